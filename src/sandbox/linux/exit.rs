//! The floor's one exit on Linux. Landlock can never be loosened inside a
//! process tree, so a command that needs more than the floor must be started
//! from outside it: by `nd7 run`, which stays unconfined for the life of the
//! agent and listens on `~/.nd7/sessions/<pid>/exit.sock` (0600).
//!
//! [`Exit::serve`] is that side. For each connection it asks the kernel who
//! is calling (`SO_PEERCRED`) and walks that process's ancestors through
//! `/proc`: only a descendant of this `nd7 run`, of the same user, is served.
//! It then reads the session's record afresh, starts the shell under the
//! floor plus the session's current grants, in its own process group, with
//! the caller's descriptors as stdio, and relays signals and the exit status.
//! If the caller goes away first, the command's process group is killed.
//!
//! [`run`] is the `nd7-exec` side.

use std::collections::HashSet;
use std::ffi::OsString;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use rustix::event::{PollFd, PollFlags, poll};
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, recvmsg, sendmsg,
};
use rustix::process::{Pid, PidfdFlags, Signal, kill_process_group, pidfd_open};

use super::Confinement;
use super::proc;
use crate::run_entry::Ended;
use crate::run_log::RunLog;
use crate::sandbox::wire::{Frame, Request};
use crate::session::Session;

/// At most this many commands run through the exit at once; a caller beyond
/// them is refused at once rather than given a thread of the unconfined
/// `nd7 run` (a confined agent could otherwise start threads without bound).
pub const MAX_COMMANDS: usize = 128;

/// Threads of the exit and the door do little but wait and relay.
pub(super) const STACK: usize = 256 * 1024;

/// A bound on the connections served at once: a slot is taken before a
/// connection is served and given back when its thread ends.
#[derive(Debug, Default)]
pub(super) struct Slots {
    taken: Mutex<usize>,
    freed: std::sync::Condvar,
}

/// A taken slot, given back when dropped.
pub(super) struct Slot(Arc<Slots>);

impl Slots {
    /// A slot if one of `max` is free now.
    pub(super) fn try_take(slots: &Arc<Slots>, max: usize) -> Option<Slot> {
        let mut taken = slots.taken.lock().unwrap_or_else(|e| e.into_inner());
        (*taken < max).then(|| {
            *taken += 1;
            Slot(slots.clone())
        })
    }

    /// A slot of `max`, waiting until one is free.
    pub(super) fn take(slots: &Arc<Slots>, max: usize) -> Slot {
        let mut taken = slots.taken.lock().unwrap_or_else(|e| e.into_inner());
        while *taken >= max {
            taken = slots.freed.wait(taken).unwrap_or_else(|e| e.into_inner());
        }
        *taken += 1;
        Slot(slots.clone())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut taken = self.0.taken.lock().unwrap_or_else(|e| e.into_inner());
        *taken -= 1;
        self.0.freed.notify_one();
    }
}

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

/// Why the exit could not be opened or used.
#[derive(Debug, thiserror::Error)]
pub enum ExitError {
    #[error("{path}: {action}: {source}")]
    Io {
        path: PathBuf,
        action: &'static str,
        source: io::Error,
    },
    #[error("nd7 run refused the command: {0}")]
    Refused(String),
    #[error("nd7 run closed the connection before the command finished")]
    Lost,
}

/// The session side: `nd7 run`'s listening socket.
pub struct Exit {
    listener: UnixListener,
    session: Session,
    log: Arc<RunLog>,
    groups: Arc<Mutex<HashSet<u32>>>,
}

/// The running exit, to stop the commands still running when the session ends.
pub struct Serving {
    groups: Arc<Mutex<HashSet<u32>>>,
}

impl Exit {
    /// Binds the session's socket, readable and writable by the user alone.
    /// Every command and every refused caller goes into `log`.
    pub fn open(session: &Session, log: Arc<RunLog>) -> Result<Exit, ExitError> {
        let path = session.socket_path();
        let io_err = |action| {
            let path = path.clone();
            move |source| ExitError::Io {
                path,
                action,
                source,
            }
        };
        let listener = UnixListener::bind(&path).map_err(io_err("listen on"))?;
        // The directory is already 0700; the socket's own mode says the same.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .map_err(io_err("restrict"))?;
        Ok(Exit {
            listener,
            session: session.clone(),
            log,
            groups: Arc::default(),
        })
    }

    /// Serves connections on a thread of their own, each on its own thread,
    /// at most [`MAX_COMMANDS`] at once, for as long as the process lives.
    pub fn serve(self) -> Serving {
        let groups = self.groups.clone();
        std::thread::spawn(move || {
            let me = std::process::id();
            let slots = Arc::new(Slots::default());
            for conn in self.listener.incoming() {
                let Ok(conn) = conn else { continue };
                let Some(slot) = Slots::try_take(&slots, MAX_COMMANDS) else {
                    let why = format!(
                        "this session already runs {MAX_COMMANDS} commands through its exit; wait for one to end"
                    );
                    let cred = rustix::net::sockopt::socket_peercred(&conn).ok();
                    self.log.refused(
                        "exit",
                        cred.map(|c| c.pid.as_raw_nonzero().get() as u32),
                        cred.map(|c| c.uid.as_raw()),
                        &why,
                    );
                    let _ = (&conn).write_all(&Frame::Refused(why).encode());
                    continue;
                };
                let session = self.session.clone();
                let groups = self.groups.clone();
                let log = self.log.clone();
                let spawned = std::thread::Builder::new()
                    .stack_size(STACK)
                    .spawn(move || {
                        let _slot = slot;
                        serve_one(conn, me, &session, &log, &groups);
                    });
                // Out of threads: the connection was dropped with the closure
                // and its caller sees the exit close; nothing ran.
                drop(spawned);
            }
        });
        Serving { groups }
    }
}

impl Serving {
    /// Kills every command still running: a session's commands end with it.
    pub fn kill_commands(&self) {
        let groups = self.groups.lock().map(|g| g.clone()).unwrap_or_default();
        for pgid in groups {
            if let Some(pid) = Pid::from_raw(pgid as i32) {
                let _ = kill_process_group(pid, Signal::KILL);
            }
        }
    }
}

/// Whether the kernel places the caller in this session's process tree.
pub(super) fn admit(conn: &UnixStream, session_pid: u32) -> Result<u32, String> {
    let cred = rustix::net::sockopt::socket_peercred(conn)
        .map_err(|e| format!("cannot tell who is calling: {e}"))?;
    let me = rustix::process::getuid();
    if cred.uid != me {
        return Err(format!(
            "the caller runs as uid {}, the session as uid {}",
            cred.uid.as_raw(),
            me.as_raw()
        ));
    }
    let pid = cred.pid.as_raw_nonzero().get() as u32;
    let before = proc::stat(pid).map(|s| s.started);
    let inside = proc::ancestors(pid).any(|p| p == session_pid);
    // The same process, still: a pid reused during the walk would have
    // another start time.
    let after = proc::stat(pid).map(|s| s.started);
    if !inside || before.is_none() || before != after {
        return Err(format!(
            "process {pid} is not part of session {session_pid}; only the session's own processes may use its exit"
        ));
    }
    Ok(pid)
}

/// Refuses a caller, writing it down in the session's log.
pub(super) fn refuse(conn: &UnixStream, log: &RunLog, door: &str, why: String) {
    let cred = rustix::net::sockopt::socket_peercred(conn).ok();
    log.refused(
        door,
        cred.map(|c| c.pid.as_raw_nonzero().get() as u32),
        cred.map(|c| c.uid.as_raw()),
        &why,
    );
    let _ = (&*conn).write_all(&Frame::Refused(why).encode());
}

fn serve_one(
    conn: UnixStream,
    me: u32,
    session: &Session,
    log: &RunLog,
    groups: &Mutex<HashSet<u32>>,
) {
    let caller = match admit(&conn, me) {
        Ok(pid) => pid,
        Err(why) => return refuse(&conn, log, "exit", why),
    };
    // nd7-exec sends its request at once; a caller that stalls is dropped
    // rather than holding a thread for the rest of the session.
    let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(10)));
    let (request, stdio) = match receive(&conn) {
        Ok(got) => got,
        Err(why) => return refuse(&conn, log, "exit", why),
    };
    let _ = conn.set_read_timeout(None);
    let say = |why: String| {
        let _ = (&conn).write_all(&Frame::Refused(why).encode());
    };
    // The rules are read once, and the grants that go into the log are the
    // ones the command runs under.
    let policy = match session.record() {
        Ok(record) => record.policy,
        Err(e) => return say(format!("cannot read the session's rules: {e}")),
    };
    // The rules are built before the command is written down, so the grants
    // logged are those it runs under: a grant whose path changed since it was
    // made is dropped here (ADR-0028), and that is written down too.
    let (confinement, dropped) = match super::prepare_command(session, &policy) {
        Ok(prepared) => prepared,
        Err(e) => return say(e.to_string()),
    };
    for d in &dropped {
        let _ = log.note(
            "grant_dropped",
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
    // The command is written down before it starts: one the log cannot hold
    // is not run.
    use std::os::unix::ffi::OsStrExt;
    let exec = match log.exec_started(request.command.as_bytes(), &request.cwd, caller, &grants) {
        Ok(seq) => seq,
        Err(e) => {
            return say(format!(
                "cannot write the command into the session's log ({e}); it was not run"
            ));
        }
    };
    let mut child = match start(&request, stdio, confinement) {
        Ok(child) => child,
        Err(why) => {
            let _ = log.exec_ended(exec, &Ended::NotStarted(why.clone()), None);
            return say(why);
        }
    };
    let pgid = child.id();
    if let Ok(mut g) = groups.lock() {
        g.insert(pgid);
    }
    let (frame, watch) = relay(&conn, &mut child);
    if let Ok(mut g) = groups.lock() {
        g.remove(&pgid);
    }
    let ended = match &frame {
        Some(Frame::Exited(code)) => Ended::Exited(*code),
        Some(Frame::Signaled(sig)) => Ended::Signaled(*sig),
        _ => Ended::CallerGone,
    };
    let _ = log.exec_ended(exec, &ended, watch.as_deref());
    if let Some(frame) = frame {
        let _ = (&conn).write_all(&frame.encode());
    }
}

/// Reads the request and the three descriptors sent with it.
fn receive(conn: &UnixStream) -> Result<(Request, [OwnedFd; 3]), String> {
    let mut prefix = [0u8; 4];
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(3))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = recvmsg(
        conn,
        &mut [IoSliceMut::new(&mut prefix)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC | RecvFlags::WAITALL,
    )
    .map_err(|e| format!("cannot read the request: {e}"))?;
    let mut fds: Vec<OwnedFd> = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = message {
            fds.extend(rights);
        }
    }
    if got.bytes != 4 {
        return Err("the request ended before its length".into());
    }
    let stdio: [OwnedFd; 3] = fds
        .try_into()
        .map_err(|fds: Vec<_>| format!("the request carried {} descriptors, not 3", fds.len()))?;
    let len = Request::announced_len(prefix).map_err(|e| e.to_string())?;
    let mut body = vec![0u8; len];
    (&*conn)
        .read_exact(&mut body)
        .map_err(|e| format!("cannot read the request: {e}"))?;
    let request = Request::decode(&body).map_err(|e| e.to_string())?;
    Ok((request, stdio))
}

/// Starts the command under the session's current rules.
fn start(
    request: &Request,
    stdio: [OwnedFd; 3],
    confinement: Confinement,
) -> Result<Child, String> {
    let [stdin, stdout, stderr] = stdio;
    let shell = shell_for(&request.command);
    let mut command = Command::new(shell);
    command
        .arg("-c")
        .arg(&request.command)
        .env_clear()
        .envs(request.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&request.cwd)
        .stdin(Stdio::from(stdin))
        .stdout(Stdio::from(stdout))
        .stderr(Stdio::from(stderr))
        .process_group(0);
    confinement.confine(&mut command);
    command
        .spawn()
        .map_err(|e| format!("cannot start {shell} in {}: {e}", request.cwd.display()))
}

/// How often the command is checked on when no pidfd can watch it.
const POLL_WITHOUT_PIDFD: rustix::event::Timespec = rustix::event::Timespec {
    tv_sec: 0,
    tv_nsec: 50_000_000,
};

/// Waits for the command while passing on the caller's signals. Returns the
/// frame that reports how it ended, or `None` when the caller is gone (and
/// the command's process group has been killed); and, when no pidfd could
/// watch the command, why, for the log: the command is then checked on every
/// 50 ms instead, so signals and a hang-up are still passed on.
fn relay(conn: &UnixStream, child: &mut Child) -> (Option<Frame>, Option<String>) {
    let Some(pgid) = Pid::from_raw(child.id() as i32) else {
        return (None, None);
    };
    let (pidfd, watch) = match pidfd_open(pgid, PidfdFlags::empty()) {
        Ok(fd) => (Some(fd), None),
        Err(e) => (
            None,
            Some(format!(
                "pidfd_open failed ({e}); the command was checked on every 50 ms instead"
            )),
        ),
    };
    let status_frame = |status: std::process::ExitStatus| match (status.code(), status.signal()) {
        (Some(code), _) => Frame::Exited(code),
        (None, Some(sig)) => Frame::Signaled(sig),
        (None, None) => Frame::Exited(255),
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
        if exited {
            return (child.wait().ok().map(status_frame), watch);
        }
        if pidfd.is_none()
            && let Ok(Some(status)) = child.try_wait()
        {
            return (Some(status_frame(status)), watch);
        }
        if caller {
            let mut head = [0u8; 5];
            match (&*conn)
                .read_exact(&mut head)
                .ok()
                .map(|()| Frame::decode(head))
            {
                Some(Ok(Ok(Frame::Kill(sig)))) => {
                    if let Some(sig) = forwardable(sig) {
                        let _ = kill_process_group(pgid, sig);
                    }
                }
                Some(_) => {}
                None => {
                    // The caller died or hung up: its command goes with it.
                    let _ = kill_process_group(pgid, Signal::KILL);
                    let _ = child.wait();
                    return (None, watch);
                }
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

/// The `nd7-exec` side: sends `command` (with this process's stdio, working
/// directory and environment) to the session listening on `socket`, passes
/// on SIGINT, SIGTERM, SIGHUP and SIGQUIT, and returns how the command ended.
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
    let signals = conn.try_clone().map_err(io_err("use"))?;
    if let Ok(mut incoming) = signal_hook::iterator::Signals::new(FORWARDED) {
        std::thread::spawn(move || {
            for sig in incoming.forever() {
                let _ = (&signals).write_all(&Frame::Kill(sig).encode());
            }
        });
    }
    read_outcome(&conn)
}

/// Reads the frame that ends an exchange: how the command ended, or why it
/// was refused.
fn read_outcome(mut conn: &UnixStream) -> Result<Outcome, ExitError> {
    let mut head = [0u8; 5];
    conn.read_exact(&mut head).map_err(|_| ExitError::Lost)?;
    match Frame::decode(head).map_err(|_| ExitError::Lost)? {
        Ok(Frame::Exited(code)) => Ok(Outcome::Exited(code)),
        Ok(Frame::Signaled(sig)) => Ok(Outcome::Signaled(sig)),
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
    // SAFETY: 0, 1 and 2 are borrowed only for this call, during which this
    // thread does not close them; if one is not open, sendmsg fails (EBADF).
    let stdio: [BorrowedFd<'_>; 3] = unsafe {
        [
            BorrowedFd::borrow_raw(0),
            BorrowedFd::borrow_raw(1),
            BorrowedFd::borrow_raw(2),
        ]
    };
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
