//! The floor's one exit on Linux. Landlock can never be loosened inside a
//! process tree, so a command that needs more than the floor must be started
//! from outside it: by `nd7 run`, which stays unconfined for the life of the
//! agent and listens on `~/.nd7/runs/<pid>/exit.sock` (0600).
//!
//! [`Exit::serve`] is that side. The listening, reading and admitting are
//! the door's too (`super::server`, `super::admit`): only a descendant of
//! this `nd7 run`, of the same user, is served, named by the credentials the
//! kernel attached to its request, each link of its ancestry pinned with a
//! pidfd. What is the exit's own ([`Commands`]): it reads the session's record afresh, starts
//! the shell under the floor plus the session's current grants, in its own
//! process group, with the caller's descriptors as stdio, and relays signals
//! (acknowledging each) and the exit status. If the caller goes away first,
//! the command's process group is killed.
//!
//! [`run`] is the `nd7-exec` side.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{self, IoSlice, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use rustix::event::{PollFd, PollFlags, poll};
use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags, sendmsg};
use rustix::process::{Pid, PidfdFlags, Signal, kill_process_group, pidfd_open};

use super::Confinement;
use super::admit::Admitted;
use super::launch::{Launch, Launched};
pub use super::server::ExitError;
use super::server::{Bound, Handler};
use crate::floor_wire::{Frame, Request};
use crate::run_dir::RunDir;
use crate::run_entry::Ended;
use crate::run_log::RunLog;
use crate::running;

/// At most this many commands run through the exit at once; a caller beyond
/// them is refused at once rather than given a thread of the unconfined
/// `nd7 run` (a confined agent could otherwise start threads without bound).
pub const MAX_COMMANDS: usize = 128;

/// The shell commands run under: the Bash tool's commands are bash.
pub fn shell() -> &'static str {
    if Path::new("/bin/bash").exists() {
        "/bin/bash"
    } else {
        "/bin/sh"
    }
}

/// The shell for `command`: zsh for a Bash tool line Claude Code wrote for
/// zsh (it sources a zsh snapshot, ADR-0040) where zsh is installed, else
/// [`shell`].
fn shell_for(command: &std::ffi::OsStr) -> &'static str {
    let zsh = command
        .to_str()
        .and_then(crate::shell_prefix::unwrap)
        .is_some_and(|call| call.shell == crate::shell_prefix::Shell::Zsh);
    if zsh {
        for path in ["/bin/zsh", "/usr/bin/zsh"] {
            if Path::new(path).exists() {
                return path;
            }
        }
    }
    shell()
}

/// The session side: `nd7 run`'s listening socket.
pub struct Exit {
    listener: UnixListener,
    commands: Commands,
}

/// What the exit does with an admitted caller's request: starts its
/// command under the floor plus the session's current grants, relays
/// signals and the exit status, and writes it down.
struct Commands {
    run_dir: RunDir,
    log: Arc<RunLog>,
    groups: Arc<Mutex<Running>>,
    /// The session's namespaces, inside which every command starts (`ns`).
    namespaces: Option<Arc<super::ns::Namespaces>>,
    /// Called with the command's grants before it starts.
    before: Option<crate::sandbox::BeforeCommand>,
    /// Called with the command's text when it ends.
    after: Option<crate::sandbox::AfterCommand>,
}

/// The running exit, to stop the commands still running when the session ends.
pub struct Serving {
    groups: Arc<Mutex<Running>>,
}

/// The commands the exit is running: each one's process group (its leader's
/// pid) and the seq of its `exec` entry. A caller that descends from one of
/// them asks from inside that command, not from the floor.
type Running = HashMap<u32, u64>;

impl Exit {
    /// Binds the session's socket, readable and writable by the user alone.
    /// Every command and every refused caller goes into `log`.
    pub fn open(run_dir: &RunDir, log: Arc<RunLog>) -> Result<Exit, ExitError> {
        // The keeper connects for the session's processes, and only to
        // sockets it knows to be the session's.
        let listener = super::server::bind(&run_dir.socket_path(), super::keeper::allow_own)?;
        Ok(Exit {
            listener,
            commands: Commands {
                run_dir: run_dir.clone(),
                log,
                groups: Arc::default(),
                namespaces: None,
                before: None,
                after: None,
            },
        })
    }

    /// Every command will start inside `namespaces` (when there are any).
    pub fn inside(mut self, namespaces: Option<Arc<super::ns::Namespaces>>) -> Exit {
        self.commands.namespaces = namespaces;
        self
    }

    /// `before` is called with each command's grants before it starts.
    pub fn before_each(mut self, before: Option<crate::sandbox::BeforeCommand>) -> Exit {
        self.commands.before = before;
        self
    }

    /// `after` is called with each command's text when it ends.
    pub fn after_each(mut self, after: Option<crate::sandbox::AfterCommand>) -> Exit {
        self.commands.after = after;
        self
    }

    /// What ends the commands this exit starts, once it serves.
    pub fn serving(&self) -> Serving {
        Serving {
            groups: self.commands.groups.clone(),
        }
    }

    /// Serves connections on a thread of their own, each on its own thread,
    /// at most [`MAX_COMMANDS`] at once, for as long as the process lives.
    /// Connections made before it is called wait in the socket's queue.
    pub fn serve(self) {
        let busy = format!(
            "this session already runs {MAX_COMMANDS} commands through its exit; wait for one to end"
        );
        let bound = Bound::Threads {
            max: MAX_COMMANDS,
            busy,
        };
        super::server::serve(self.listener, self.commands, bound);
    }
}

impl Serving {
    /// Kills every command still running: a session's commands end with it.
    pub fn kill_commands(&self) {
        let groups = self.groups.lock().map(|g| g.clone()).unwrap_or_default();
        for pgid in groups.into_keys() {
            if let Some(pid) = Pid::from_raw(pgid as i32) {
                let _ = kill_process_group(pid, Signal::KILL);
            }
        }
    }
}

impl Handler for Commands {
    const NAME: &'static str = "exit";
    type Fds = [OwnedFd; 3];
    type Request = Request;

    fn log(&self) -> &RunLog {
        &self.log
    }

    /// The command's stdin, stdout and stderr.
    fn fds(fds: Vec<OwnedFd>) -> Result<[OwnedFd; 3], String> {
        fds.try_into()
            .map_err(|fds: Vec<_>| format!("the request carried {} descriptors, not 3", fds.len()))
    }

    fn decode(body: &[u8]) -> Result<Request, String> {
        Request::decode(body).map_err(|e| e.to_string())
    }

    /// Runs the command for `admitted` with `stdio`, answering on `conn`
    /// with how it ended (or why it did not start).
    fn handle(&self, conn: &UnixStream, admitted: Admitted, request: Request, stdio: [OwnedFd; 3]) {
        let (run_dir, log, groups) = (&self.run_dir, &*self.log, &*self.groups);
        let namespaces = self.namespaces.as_deref();
        let (before, after) = (self.before.clone(), self.after.clone());
        let caller = admitted.pid;
        let say = |why: String| {
            let _ = (&*conn).write_all(&Frame::Refused(why).encode());
        };
        // The rules are read once, and the grants that go into the log are the
        // ones the command runs under.
        let policy = match run_dir.record() {
            Ok(record) => record.policy,
            Err(e) => return say(format!("cannot read the session's rules: {e}")),
        };
        // The rules are built before the command is written down, so the grants
        // logged are those it runs under: a grant whose path changed since it was
        // made is dropped here (ADR-0028), and that is written down too.
        let (confinement, dropped) = match super::prepare_command(run_dir, &policy) {
            Ok(prepared) => prepared,
            Err(e) => return say(e.to_string()),
        };
        for d in &dropped {
            let _ = log.note(
                crate::run_entry::GRANT_DROPPED,
                None,
                None,
                &serde_json::json!({"path": d.path, "grant": d.grant, "why": d.why}),
            );
        }
        let grants: Vec<std::path::PathBuf> = policy
            .grants
            .iter()
            .filter(|g| !dropped.iter().any(|d| d.grant && &d.path == *g))
            .cloned()
            .collect();
        // What the grants let it write is read before it can (the files that
        // run later in a grant made since the last command).
        if let Some(before) = before {
            before(&grants);
        }
        // The command is written down before it starts: one the log cannot hold
        // is not run.
        use std::os::unix::ffi::OsStrExt;
        // Asked from inside a command the exit runs (a nested `nd7-exec`), not
        // from the floor: no Bash call of Claude Code's can have asked for it,
        // so it names none (its outer command is the one the call announced).
        // Each command enters `groups` before its lock is let go after the
        // start, and a caller inside it exists only after the start: looked up
        // under the same lock, it is always found.
        let inside = groups
            .lock()
            .ok()
            .and_then(|g| g.get(&admitted.below).copied());
        let started_exec = log.exec_started_inside(
            request.command.as_bytes(),
            &request.cwd,
            caller,
            &grants,
            inside,
        );
        let exec = match started_exec {
            Ok(seq) => seq,
            Err(e) => {
                return say(format!(
                    "cannot write the command into the session's log ({e}); it was not run"
                ));
            }
        };
        // What the keeper lists for `nd7 deny`: the grants it actually runs with.
        let started =
            running::Command::new(&request.command.to_string_lossy(), &request.cwd, &grants);
        // Started with `groups` held, so a nested caller's look-up above waits
        // until its command is listed.
        let child = {
            let mut running = groups.lock().unwrap_or_else(|e| e.into_inner());
            match start(&request, stdio, confinement, started, namespaces) {
                Ok(child) => {
                    running.insert(child.id(), exec);
                    log.command_started(child.id(), exec);
                    child
                }
                Err(why) => {
                    drop(running);
                    let _ = log.exec_ended(exec, &Ended::NotStarted(why.clone()), None);
                    return say(why);
                }
            }
        };
        let pgid = child.id();
        let (exited, watch) = relay(conn, &child);
        // The group's leader is not reaped yet, so its id cannot belong to
        // another group: it leaves the set before `wait` frees it.
        if !exited && let Some(pid) = Pid::from_raw(pgid as i32) {
            // The caller died or hung up: its command goes with it.
            let _ = kill_process_group(pid, Signal::KILL);
        }
        if let Ok(mut g) = groups.lock() {
            g.remove(&pgid);
        }
        let mut child = child;
        let status = child.wait();
        let frame = match (exited, status) {
            (true, Ok(status)) => Some(match (status.code(), status.signal()) {
                (Some(code), _) => Frame::Exited(code),
                (None, Some(sig)) => Frame::Signaled(sig),
                (None, None) => Frame::Exited(255),
            }),
            _ => None,
        };
        let ended = match &frame {
            Some(Frame::Exited(code)) => Ended::Exited(*code),
            Some(Frame::Signaled(sig)) => Ended::Signaled(*sig),
            _ => Ended::CallerGone,
        };
        let _ = log.exec_ended(exec, &ended, watch.as_deref());
        // Checked before the status is reported, so the next command starts
        // after the check of this one.
        if let Some(after) = after {
            after(&request.command.to_string_lossy());
        }
        if let Some(frame) = frame {
            let _ = (&*conn).write_all(&frame.encode());
        }
    }
}

/// Starts the command under the confinement prepared for it, reported to
/// the keeper as `started`, in a child that shares the session's memory
/// until it execs (`launch`).
fn start(
    request: &Request,
    stdio: [OwnedFd; 3],
    confinement: Confinement,
    started: running::Command,
    namespaces: Option<&super::ns::Namespaces>,
) -> Result<Launched, String> {
    let shell = shell_for(&request.command);
    // The directory is the caller's word: opened here, from the session's
    // root (on top of the binds), absolute, and through no magic link
    // (`/proc/self/cwd`, `/proc/self/fd/N` in the child before exec lead to
    // the session's directory taken before the binds, or to the root
    // outside), and the child moves to it by descriptor.
    if !request.cwd.is_absolute() {
        return Err(format!(
            "{}: not an absolute directory",
            request.cwd.display()
        ));
    }
    let dir = rustix::fs::openat2(
        rustix::fs::CWD,
        &request.cwd,
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
        rustix::fs::ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(|e| format!("cannot work in {}: {e}", request.cwd.display()))?;
    let mut command = Launch::new(shell);
    command
        .arg("-c")
        .arg(&request.command)
        .env_clear()
        .current_dir_fd(dir)
        .stdio(stdio)
        .new_process_group();
    for (k, v) in &request.env {
        if !super::netns::BYPASS_VARIABLES.iter().any(|b| k == b) {
            command.env(k, v);
        }
    }
    // Every command is pointed at the session's proxy, whatever the caller
    // set: inside the network namespace it is the only way out.
    if let Some(net) = namespaces.and_then(|ns| ns.net.as_ref().ok()) {
        for (k, v) in super::netns::proxy_env(net.port) {
            command.env(k, v);
        }
    }
    // The working directory is found again inside the session's namespaces
    // and the capabilities dropped first, before Landlock and the seccomp
    // filter.
    if let Some(ns) = namespaces {
        ns.prepare_in(&mut command, None)
            .map_err(|e| e.to_string())?;
    }
    confinement.confine(&mut command, super::Started::Command(started));
    command
        .spawn()
        .map_err(|e| format!("cannot start {shell} in {}: {e}", request.cwd.display()))
}

/// How often the command is checked on when no pidfd can watch it.
const POLL_WITHOUT_PIDFD: rustix::event::Timespec = rustix::event::Timespec {
    tv_sec: 0,
    tv_nsec: 50_000_000,
};

/// Waits for the command while passing on the caller's signals, each
/// acknowledged by echoing its frame. Returns `true` when the command has
/// exited (not yet reaped, so its process group's id stays its own), `false`
/// when the caller is gone first; and, when no pidfd could watch the
/// command, why, for the log: the command is then checked on every 50 ms
/// instead, so signals and a hang-up are still passed on.
fn relay(conn: &UnixStream, child: &Launched) -> (bool, Option<String>) {
    let Some(pgid) = Pid::from_raw(child.id() as i32) else {
        return (false, None);
    };
    let opened = match crate::fault::injected("no-pidfd-watch") {
        true => Err(rustix::io::Errno::NOSYS),
        false => pidfd_open(pgid, PidfdFlags::empty()),
    };
    let (pidfd, watch) = match opened {
        Ok(fd) => (Some(fd), None),
        Err(e) => (
            None,
            Some(format!(
                "pidfd_open failed ({e}); the command was checked on every 50 ms instead"
            )),
        ),
    };
    // Whether the command has exited, asked without reaping it.
    let ended = || {
        use rustix::process::{WaitId, WaitIdOptions, waitid};
        let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
        matches!(waitid(WaitId::Pid(pgid), options), Ok(Some(_)))
    };
    loop {
        let mut fds = vec![PollFd::new(conn, PollFlags::IN)];
        if let Some(pidfd) = &pidfd {
            fds.push(PollFd::new(pidfd, PollFlags::IN));
        }
        let timeout = pidfd.is_none().then_some(&POLL_WITHOUT_PIDFD);
        if poll(&mut fds, timeout).is_err() {
            continue;
        }
        let exited = fds.get(1).is_some_and(|f| !f.revents().is_empty());
        let caller = !fds[0].revents().is_empty();
        if exited || (pidfd.is_none() && ended()) {
            return (true, watch);
        }
        if caller {
            let mut head = [0u8; 5];
            match (&*conn)
                .read_exact(&mut head)
                .ok()
                .map(|()| Frame::decode(head))
            {
                Some(Ok(Ok(Frame::Kill(sig)))) => {
                    if let Some(signal) = forwardable(sig) {
                        let _ = kill_process_group(pgid, signal);
                    }
                    // nd7-exec gives up on a session that does not answer
                    // (a stopped nd7 run); this says it was heard.
                    let _ = (&*conn).write_all(&Frame::Kill(sig).encode());
                }
                Some(_) => {}
                None => return (false, watch),
            }
        }
    }
}

/// The signals `nd7-exec` passes on.
pub const FORWARDED: [i32; 4] = [
    Signal::INT.as_raw(),
    Signal::TERM.as_raw(),
    Signal::HUP.as_raw(),
    Signal::QUIT.as_raw(),
];

fn forwardable(sig: i32) -> Option<Signal> {
    FORWARDED
        .contains(&sig)
        .then(|| Signal::from_named_raw(sig))
        .flatten()
}

/// How a command run through the exit ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Exited(i32),
    Signaled(i32),
}

/// How long `nd7-exec` waits for `nd7 run` to acknowledge a signal it passed
/// on before it gives up on the command: a stopped or hung `nd7 run` must not
/// make `nd7-exec` deaf to SIGTERM. When `nd7 run` runs again it sees the
/// connection gone and kills the command.
pub const ACK_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// The `nd7-exec` side: sends `command` (with this process's stdio, working
/// directory and environment) to the session listening on `socket`, passes
/// on SIGINT, SIGTERM, SIGHUP and SIGQUIT, and returns how the command ended.
/// A signal `nd7 run` does not acknowledge within [`ACK_WAIT`] ends this
/// process as the signal would have (128+N).
pub fn run(socket: &Path, command: OsString) -> Result<Outcome, ExitError> {
    let io_err = |action| {
        let path = socket.to_path_buf();
        move |source| ExitError::Io {
            path,
            action,
            source,
        }
    };
    let conn = UnixStream::connect(socket).map_err(io_err("connect to"))?;
    let request = Request {
        command,
        cwd: std::env::current_dir().map_err(|e| io_err("find the working directory for")(e))?,
        env: std::env::vars_os().collect(),
    };
    if let Err(e) = send(&conn, &request.encode()) {
        // A refusal comes before the request is read, and the socket may be
        // closed under a long request: the refusal is the answer to report.
        return match read_outcome(&conn) {
            Err(refused @ ExitError::Refused(_)) => Err(refused),
            _ => Err(io_err("send the command to")(e)),
        };
    }
    // Installed once the request is on its way, as before: a signal until
    // then ends this process, and nothing ran.
    let signals = forwarded_signals();
    wait_outcome(&conn, &signals)
}

/// A signal this process passes on, with the socket that becomes readable
/// when it arrives (a byte written by its handler).
type Forwarded = (i32, UnixStream);

/// A handler for each of [`FORWARDED`] that wakes this process's one thread
/// ([`wait_outcome`]), so passing signals on starts no thread: a thread's
/// start is a cost in every command, and two more stops of the exec
/// observer (ADR-0145). A signal whose handler cannot be set is not passed
/// on, and ends this process as it would have.
fn forwarded_signals() -> Vec<Forwarded> {
    FORWARDED
        .iter()
        .filter_map(|&sig| {
            let (woken, waker) = UnixStream::pair().ok()?;
            woken.set_nonblocking(true).ok()?;
            signal_hook::low_level::pipe::register(sig, waker).ok()?;
            Some((sig, woken))
        })
        .collect()
}

/// Waits for the frame that ends the exchange, passing on each signal of
/// `signals` as it arrives. A signal `nd7 run` does not acknowledge within
/// [`ACK_WAIT`] ends this process (128+N), the oldest first.
fn wait_outcome(mut conn: &UnixStream, signals: &[Forwarded]) -> Result<Outcome, ExitError> {
    let mut unacked: std::collections::VecDeque<(i32, std::time::Instant)> = Default::default();
    loop {
        let timeout = unacked.front().map(|&(_, by)| {
            let left = by.saturating_duration_since(std::time::Instant::now());
            rustix::event::Timespec {
                tv_sec: left.as_secs() as _,
                tv_nsec: left.subsec_nanos() as _,
            }
        });
        let mut fds: Vec<PollFd<'_>> = std::iter::once(PollFd::new(&conn, PollFlags::IN))
            .chain(signals.iter().map(|(_, s)| PollFd::new(s, PollFlags::IN)))
            .collect();
        match poll(&mut fds, timeout.as_ref()) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(_) => return Err(ExitError::Lost),
        }
        let answered = !fds[0].revents().is_empty();
        let arrived: Vec<&Forwarded> = fds[1..]
            .iter()
            .zip(signals)
            .filter(|(fd, _)| !fd.revents().is_empty())
            .map(|(_, s)| s)
            .collect();
        drop(fds);
        if let Some(&(sig, by)) = unacked.front()
            && std::time::Instant::now() >= by
        {
            eprintln!(
                "nd7-exec: nd7 run did not answer within {} s (stopped?); leaving the command to it",
                ACK_WAIT.as_secs()
            );
            std::process::exit(128 + sig);
        }
        for (sig, woken) in arrived {
            // Every byte waiting is this signal's: it is passed on once.
            while (&*woken).read(&mut [0u8; 16]).is_ok_and(|n| n > 0) {}
            let _ = conn.write_all(&Frame::Kill(*sig).encode());
            unacked.push_back((*sig, std::time::Instant::now() + ACK_WAIT));
        }
        if answered {
            match read_frame(conn)? {
                Some(outcome) => return Ok(outcome),
                None => {
                    unacked.pop_front();
                }
            }
        }
    }
}

/// Reads the frame that ends an exchange: how the command ended, or why it
/// was refused. Acknowledgements of passed-on signals on the way are skipped.
fn read_outcome(conn: &UnixStream) -> Result<Outcome, ExitError> {
    loop {
        if let Some(outcome) = read_frame(conn)? {
            return Ok(outcome);
        }
    }
}

/// One frame from `nd7 run`: `None` when it acknowledges a signal passed on,
/// else how the exchange ended.
fn read_frame(mut conn: &UnixStream) -> Result<Option<Outcome>, ExitError> {
    let mut head = [0u8; 5];
    conn.read_exact(&mut head).map_err(|_| ExitError::Lost)?;
    match Frame::decode(head).map_err(|_| ExitError::Lost)? {
        Ok(Frame::Kill(_)) => Ok(None),
        Ok(Frame::Exited(code)) => Ok(Some(Outcome::Exited(code))),
        Ok(Frame::Signaled(sig)) => Ok(Some(Outcome::Signaled(sig))),
        Ok(_) => Err(ExitError::Lost),
        Err(len) => {
            let mut text = vec![0u8; len];
            let _ = conn.read_exact(&mut text);
            match Frame::refusal(&text) {
                Frame::Refused(why) => Err(ExitError::Refused(why)),
                _ => Err(ExitError::Lost),
            }
        }
    }
}

/// Writes the request with stdin, stdout and stderr attached to its first byte.
fn send(conn: &UnixStream, bytes: &[u8]) -> io::Result<()> {
    let (stdin, stdout, stderr) = (io::stdin(), io::stdout(), io::stderr());
    let stdio: [BorrowedFd<'_>; 3] = [stdin.as_fd(), stdout.as_fd(), stderr.as_fd()];
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(3))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    control.push(SendAncillaryMessage::ScmRights(&stdio));
    let sent = sendmsg(
        conn.as_fd(),
        &[IoSlice::new(bytes)],
        &mut control,
        SendFlags::empty(),
    )?;
    (&*conn).write_all(&bytes[sent..])
}
