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

use super::proc;
use crate::policy::landlock_rules;
use crate::sandbox::wire::{Frame, Request};
use crate::session::Session;

/// The shell commands run under: the Bash tool's commands are bash.
pub fn shell() -> &'static str {
    if Path::new("/bin/bash").exists() {
        "/bin/bash"
    } else {
        "/bin/sh"
    }
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
    groups: Arc<Mutex<HashSet<u32>>>,
    /// The session's namespaces, which every command joins (`ns`).
    namespaces: Option<Arc<super::ns::Namespaces>>,
    /// Called with the command's text when it ends.
    after: Option<crate::sandbox::AfterCommand>,
}

/// The running exit, to stop the commands still running when the session ends.
pub struct Serving {
    groups: Arc<Mutex<HashSet<u32>>>,
}

impl Exit {
    /// Binds the session's socket, readable and writable by the user alone.
    pub fn open(session: &Session) -> Result<Exit, ExitError> {
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
            groups: Arc::default(),
            namespaces: None,
            after: None,
        })
    }

    /// Every command will join `namespaces` (when there are any).
    pub fn joining(mut self, namespaces: Option<Arc<super::ns::Namespaces>>) -> Exit {
        self.namespaces = namespaces;
        self
    }

    /// `after` is called with each command's text when it ends.
    pub fn after_each(mut self, after: Option<crate::sandbox::AfterCommand>) -> Exit {
        self.after = after;
        self
    }

    /// Serves connections on a thread of their own, each on its own thread,
    /// for as long as the process lives.
    pub fn serve(self) -> Serving {
        let groups = self.groups.clone();
        std::thread::spawn(move || {
            let me = std::process::id();
            for conn in self.listener.incoming() {
                let Ok(conn) = conn else { continue };
                let session = self.session.clone();
                let groups = self.groups.clone();
                let namespaces = self.namespaces.clone();
                let after = self.after.clone();
                std::thread::spawn(move || {
                    serve_one(conn, me, &session, &groups, namespaces.as_deref(), after)
                });
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
fn admit(conn: &UnixStream, session_pid: u32) -> Result<u32, String> {
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

fn serve_one(
    conn: UnixStream,
    me: u32,
    session: &Session,
    groups: &Mutex<HashSet<u32>>,
    namespaces: Option<&super::ns::Namespaces>,
    after: Option<crate::sandbox::AfterCommand>,
) {
    let refuse = |conn: &UnixStream, why: String| {
        let _ = (&*conn).write_all(&Frame::Refused(why).encode());
    };
    if let Err(why) = admit(&conn, me) {
        return refuse(&conn, why);
    }
    // nd7-exec sends its request at once; a caller that stalls is dropped
    // rather than holding a thread for the rest of the session.
    let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(10)));
    let (request, stdio) = match receive(&conn) {
        Ok(got) => got,
        Err(why) => return refuse(&conn, why),
    };
    let _ = conn.set_read_timeout(None);
    let mut child = match start(&request, stdio, session, namespaces) {
        Ok(child) => child,
        Err(why) => return refuse(&conn, why),
    };
    let pgid = child.id();
    if let Ok(mut g) = groups.lock() {
        g.insert(pgid);
    }
    let frame = relay(&conn, &mut child);
    if let Ok(mut g) = groups.lock() {
        g.remove(&pgid);
    }
    // Checked before the status is reported, so the next command starts
    // after the check of this one.
    if let Some(after) = after {
        after(&request.command.to_string_lossy());
    }
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
    session: &Session,
    namespaces: Option<&super::ns::Namespaces>,
) -> Result<Child, String> {
    let record = session
        .record()
        .map_err(|e| format!("cannot read the session's rules: {e}"))?;
    let policy = record.policy;
    let rules = landlock_rules(&policy, &policy.command_writes(), &super::list_dir);
    let confinement = super::prepare(&rules).map_err(|e| e.to_string())?;
    let [stdin, stdout, stderr] = stdio;
    let shell = shell();
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
    if let Some(ns) = namespaces {
        ns.join(&mut command, &request.cwd)
            .map_err(|e| e.to_string())?;
    }
    confinement.confine(&mut command);
    command
        .spawn()
        .map_err(|e| format!("cannot start {shell} in {}: {e}", request.cwd.display()))
}

/// Waits for the command while passing on the caller's signals. Returns the
/// frame that reports how it ended, or `None` when the caller is gone (and
/// the command's process group has been killed).
fn relay(conn: &UnixStream, child: &mut Child) -> Option<Frame> {
    let pgid = Pid::from_raw(child.id() as i32)?;
    let pidfd = pidfd_open(pgid, PidfdFlags::empty()).ok();
    loop {
        let mut fds = vec![PollFd::new(conn, PollFlags::IN)];
        if let Some(pidfd) = &pidfd {
            fds.push(PollFd::new(pidfd, PollFlags::IN));
        }
        if poll(&mut fds, None).is_err() {
            continue;
        }
        let exited = fds.get(1).is_some_and(|f| !f.revents().is_empty());
        let caller = !fds[0].revents().is_empty();
        if exited || pidfd.is_none() {
            let status = child.wait().ok()?;
            return Some(match (status.code(), status.signal()) {
                (Some(code), _) => Frame::Exited(code),
                (None, Some(sig)) => Frame::Signaled(sig),
                (None, None) => Frame::Exited(255),
            });
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
                    return None;
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
