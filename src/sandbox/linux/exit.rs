//! The floor's one exit on Linux. Landlock can never be loosened inside a
//! process tree, so a command that needs more than the floor must be started
//! from outside it: by `nd7 run`, which stays unconfined for the life of the
//! agent and listens on `~/.nd7/runs/<pid>/exit.sock` (0600).
//!
//! [`Exit::serve`] is that side. For each connection it reads the request
//! and the credentials the kernel attached to it (`SCM_CREDENTIALS`, and a
//! pidfd of the sender, `SCM_PIDFD`, where the kernel has it): not the
//! connection's peer, which is nd7 run's keeper, since it connects for
//! every process of the run (`super::supervise`). Only a descendant of
//! this `nd7 run`, of the same user, is served, each link of its ancestry
//! pinned with a pidfd. It then reads the run's record afresh, starts
//! the shell under the floor plus the run's current grants, in its own
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
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustix::event::{PollFd, PollFlags, poll};
use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags, sendmsg};
use rustix::process::{Pid, PidfdFlags, Signal, kill_process_group, pidfd_open};

use super::Confinement;
use super::launch::{Launch, Launched};
use crate::floor_wire::{Frame, Request};
use crate::kernel::linux as proc;
use crate::run_dir::RunDir;
use crate::run_entry::Ended;
use crate::run_log::RunLog;
use crate::running;

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
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut taken = self.0.taken.lock().unwrap_or_else(|e| e.into_inner());
        *taken -= 1;
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

/// `nd7 run`'s side: its listening socket.
pub struct Exit {
    listener: UnixListener,
    run_dir: RunDir,
    log: Arc<RunLog>,
    groups: Arc<Mutex<Running>>,
    /// The run's namespaces, inside which every command starts (`ns`).
    namespaces: Option<Arc<super::ns::Namespaces>>,
    /// Called with the command's grants before it starts.
    before: Option<crate::sandbox::BeforeCommand>,
    /// Called with the command's text when it ends.
    after: Option<crate::sandbox::AfterCommand>,
}

/// The running exit, to stop the commands still running when the run ends.
pub struct Serving {
    groups: Arc<Mutex<Running>>,
}

/// The commands the exit is running: each one's process group (its leader's
/// pid) and the seq of its `exec` entry. A caller that descends from one of
/// them asks from inside that command, not from the floor.
type Running = HashMap<u32, u64>;

impl Exit {
    /// Binds the run's socket, readable and writable by the user alone.
    /// Every command and every refused caller goes into `log`.
    pub fn open(run_dir: &RunDir, log: Arc<RunLog>) -> Result<Exit, ExitError> {
        let path = run_dir.socket_path();
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
        // Every message then carries its sender's credentials, and a pidfd
        // where the kernel can (Linux 6.5); accepted connections inherit both.
        rustix::net::sockopt::set_socket_passcred(&listener, true)
            .map_err(|e| io_err("set up")(e.into()))?;
        let _ = set_pass_pidfd(&listener);
        // The keeper connects for the run's processes, and only to
        // sockets it knows to be the run's.
        super::keeper::allow_own(listener.as_fd()).map_err(io_err("register"))?;
        Ok(Exit {
            listener,
            run_dir: run_dir.clone(),
            log,
            groups: Arc::default(),
            namespaces: None,
            before: None,
            after: None,
        })
    }

    /// Every command will start inside `namespaces` (when there are any).
    pub fn inside(mut self, namespaces: Option<Arc<super::ns::Namespaces>>) -> Exit {
        self.namespaces = namespaces;
        self
    }

    /// `before` is called with each command's grants before it starts.
    pub fn before_each(mut self, before: Option<crate::sandbox::BeforeCommand>) -> Exit {
        self.before = before;
        self
    }

    /// `after` is called with each command's text when it ends.
    pub fn after_each(mut self, after: Option<crate::sandbox::AfterCommand>) -> Exit {
        self.after = after;
        self
    }

    /// What ends the commands this exit starts, once it serves.
    pub fn serving(&self) -> Serving {
        Serving {
            groups: self.groups.clone(),
        }
    }

    /// Serves connections on a thread of their own, each on its own thread,
    /// at most [`MAX_COMMANDS`] at once, for as long as the process lives.
    /// Connections made before it is called wait in the socket's queue.
    pub fn serve(self) {
        std::thread::spawn(move || {
            let me = std::process::id();
            let slots = Arc::new(Slots::default());
            for conn in self.listener.incoming() {
                let Ok(conn) = conn else { continue };
                let Some(slot) = Slots::try_take(&slots, MAX_COMMANDS) else {
                    let why = format!(
                        "this session already runs {MAX_COMMANDS} commands through its exit; wait for one to end"
                    );
                    // Refused before its request is read, so named by the
                    // connection's peer, where that is not the keeper.
                    refuse(&conn, &self.log, "exit", peer(&conn), why);
                    continue;
                };
                let run_dir = self.run_dir.clone();
                let groups = self.groups.clone();
                let log = self.log.clone();
                let namespaces = self.namespaces.clone();
                let before = self.before.clone();
                let after = self.after.clone();
                let spawned = std::thread::Builder::new()
                    .stack_size(STACK)
                    .spawn(move || {
                        let _slot = slot;
                        serve_one(
                            conn,
                            me,
                            &run_dir,
                            &log,
                            &groups,
                            namespaces.as_deref(),
                            (before, after),
                        );
                    });
                // Out of threads: the connection was dropped with the closure
                // and its caller sees the exit close; nothing ran.
                drop(spawned);
            }
        });
    }
}

impl Serving {
    /// Kills every command still running: a run's commands end with it.
    pub fn kill_commands(&self) {
        let groups = self.groups.lock().map(|g| g.clone()).unwrap_or_default();
        for pgid in groups.into_keys() {
            if let Some(pid) = Pid::from_raw(pgid as i32) {
                let _ = kill_process_group(pid, Signal::KILL);
            }
        }
    }
}

/// `SO_PASSPIDFD`: the kernel attaches a pidfd of the sender to every
/// message (Linux 6.5).
pub fn set_pass_pidfd(socket: &impl AsFd) -> io::Result<()> {
    if crate::fault::injected("no-pidfd-passing") {
        return Err(io::ErrorKind::Unsupported.into());
    }
    const SO_PASSPIDFD: libc::c_int = 76;
    let one: libc::c_int = 1;
    // SAFETY: setsockopt reads one c_int from a live local.
    let r = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&socket.as_fd()),
            libc::SOL_SOCKET,
            SO_PASSPIDFD,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether `pidfd`'s process is still alive (signal 0 through the pidfd).
fn alive(pidfd: &OwnedFd) -> bool {
    // SAFETY: pidfd_send_signal with signal 0 and no info only checks.
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            std::os::fd::AsRawFd::as_raw_fd(pidfd),
            0,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        ) == 0
    }
}

/// Whether process `pid`, pinned by `pinned`, descends from `ancestor`:
/// the child of `ancestor` it descends through (itself, when it is one).
/// Each parent is pinned with a pidfd as it is reached, and the link to it
/// read again once it is pinned; at the end every pinned process must still
/// be alive. A pid reused anywhere along the way therefore fails the check.
fn descends_pinned(pid: u32, pinned: OwnedFd, ancestor: u32) -> Option<u32> {
    let mut held = vec![pinned];
    let mut at = pid;
    // A tree deeper than this is not one the kernel builds.
    for _ in 0..(1 << 16) {
        let parent = proc::stat(at)?.ppid;
        if parent == 0 {
            return None;
        }
        if parent == ancestor {
            return held.iter().all(alive).then_some(at);
        }
        let id = Pid::from_raw(parent as i32)?;
        let pidfd = pidfd_open(id, PidfdFlags::empty()).ok()?;
        if proc::stat(at).map(|s| s.ppid) != Some(parent) {
            return None;
        }
        held.push(pidfd);
        at = parent;
    }
    None
}

/// A caller the kernel places in the run's process tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Admitted {
    pub(super) pid: u32,
    /// `nd7 run`'s child it descends through: the program (the floor),
    /// or a command the exit started, when it asks from inside one. The
    /// keeper, not `nd7 run`, adopts orphans, so a process whose parent
    /// died is no longer below `nd7 run` at all.
    pub(super) below: u32,
}

/// Whether the kernel places the caller in this run's process tree.
pub(super) fn admit(caller: Caller, session_pid: u32) -> Result<Admitted, String> {
    let (Some(pid), Some(uid)) = (caller.pid, caller.uid) else {
        return Err("cannot tell who is calling: the request came without credentials".into());
    };
    let me = rustix::process::getuid().as_raw();
    if uid != me {
        return Err(format!(
            "the caller runs as uid {uid}, the session as uid {me}"
        ));
    }
    let refused = || {
        format!(
            "process {pid} is not part of session {session_pid}; only the session's own processes are let in"
        )
    };
    let pinned = match caller.pidfd {
        Some(pidfd) => pidfd,
        // Before Linux 6.5: pinned now, which a pid reused between the
        // message and this line could fool (said by `nd7 doctor`).
        None => Pid::from_raw(pid as i32)
            .and_then(|id| pidfd_open(id, PidfdFlags::empty()).ok())
            .ok_or_else(refused)?,
    };
    match descends_pinned(pid, pinned, session_pid) {
        Some(below) => Ok(Admitted { pid, below }),
        None => Err(refused()),
    }
}

/// Who is on the other end of `conn`, as far as its peer credentials tell:
/// nobody known when the peer is nd7 run's keeper, which connects for every
/// process of the run (only a request's own credentials name its sender).
pub(super) fn peer(conn: &UnixStream) -> (Option<u32>, Option<u32>) {
    match rustix::net::sockopt::socket_peercred(conn) {
        Ok(c) if Some(c.pid.as_raw_nonzero().get() as u32) != super::keeper::keeper_pid() => (
            Some(c.pid.as_raw_nonzero().get() as u32),
            Some(c.uid.as_raw()),
        ),
        _ => (None, None),
    }
}

/// Refuses a caller (pid and uid as the kernel gave them, where it did),
/// writing it down in the run's log.
pub(super) fn refuse(
    conn: &UnixStream,
    log: &RunLog,
    door: &str,
    (pid, uid): (Option<u32>, Option<u32>),
    why: String,
) {
    log.refused(door, pid, uid, &why);
    let _ = (&*conn).write_all(&Frame::Refused(why).encode());
}

fn serve_one(
    conn: UnixStream,
    me: u32,
    run_dir: &RunDir,
    log: &RunLog,
    groups: &Mutex<Running>,
    namespaces: Option<&super::ns::Namespaces>,
    (before, after): (
        Option<crate::sandbox::BeforeCommand>,
        Option<crate::sandbox::AfterCommand>,
    ),
) {
    // nd7-exec sends its request at once; a caller that stalls is dropped
    // rather than holding a thread for the rest of the run.
    let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(10)));
    // The request is read first: the credentials that name its sender come
    // with it (the connection's peer is the keeper).
    let (caller, received) = receive(&conn);
    let _ = conn.set_read_timeout(None);
    let who = (caller.pid, caller.uid);
    let (request, stdio) = match received {
        Ok(got) => got,
        Err(why) => return refuse(&conn, log, "exit", who, why),
    };
    let admitted = match admit(caller, me) {
        Ok(admitted) => admitted,
        Err(why) => return refuse(&conn, log, "exit", who, why),
    };
    let caller = admitted.pid;
    let say = |why: String| {
        let _ = (&conn).write_all(&Frame::Refused(why).encode());
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
    let started = running::Command::new(&request.command.to_string_lossy(), &request.cwd, &grants);
    // Started with `groups` held, so a nested caller's look-up above waits
    // until its command is listed.
    let child = {
        let mut running = groups.lock().unwrap_or_else(|e| e.into_inner());
        match start(&request, stdio, confinement, started, namespaces) {
            Ok(child) => {
                running.insert(child.id(), exec);
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
    let (exited, watch) = relay(&conn, &child);
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
        let _ = (&conn).write_all(&frame.encode());
    }
}

/// Who sent a request, as the kernel attached it to the message.
#[derive(Debug, Default)]
pub(super) struct Caller {
    pub(super) pid: Option<u32>,
    pub(super) uid: Option<u32>,
    /// A pidfd of the sender (`SCM_PIDFD`), where the kernel gives one.
    pub(super) pidfd: Option<OwnedFd>,
}

/// A request's length prefix and the descriptors that came with it.
pub(super) type Prefix = ([u8; 4], Vec<OwnedFd>);

/// Reads a request's four-byte length prefix with the descriptors and the
/// credentials the kernel attached to it (the socket must have
/// `SO_PASSCRED`, and `SO_PASSPIDFD` where the kernel has it). The
/// credentials are returned whatever else went wrong, so a refusal can name
/// its caller. At most three descriptors are taken.
pub(super) fn receive_prefix(conn: &UnixStream) -> (Caller, Result<Prefix, String>) {
    const SCM_PIDFD: libc::c_int = 4;
    let mut prefix = [0u8; 4];
    // Room for three descriptors, a ucred and a pidfd, aligned for cmsghdr.
    let mut space = [0u64; 32];
    let mut iov = libc::iovec {
        iov_base: prefix.as_mut_ptr().cast(),
        iov_len: prefix.len(),
    };
    // SAFETY: msghdr is plain data; every field used is set below.
    let mut header: libc::msghdr = unsafe { std::mem::zeroed() };
    header.msg_iov = &mut iov;
    header.msg_iovlen = 1;
    header.msg_control = space.as_mut_ptr().cast();
    header.msg_controllen = std::mem::size_of_val(&space) as _;
    // SAFETY: `header` points at `iov` and `space`, both live and writable
    // for their whole lengths for the duration of the call.
    let got = unsafe {
        libc::recvmsg(
            std::os::fd::AsRawFd::as_raw_fd(conn),
            &mut header,
            libc::MSG_CMSG_CLOEXEC | libc::MSG_WAITALL,
        )
    };
    let mut caller = Caller::default();
    if got < 0 {
        let e = io::Error::last_os_error();
        return (caller, Err(format!("cannot read the request: {e}")));
    }
    let mut fds: Vec<OwnedFd> = Vec::new();
    // SAFETY: the kernel filled `header.msg_control` with well-formed
    // control messages up to `msg_controllen`; each descriptor in them is
    // new in this process and owned by nothing else, so each is wrapped
    // exactly once.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&header);
        while !cmsg.is_null() {
            let data = libc::CMSG_DATA(cmsg);
            let len = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
            match ((*cmsg).cmsg_level, (*cmsg).cmsg_type) {
                (libc::SOL_SOCKET, libc::SCM_RIGHTS) => {
                    for i in 0..len / 4 {
                        let fd = std::ptr::read_unaligned(data.cast::<libc::c_int>().add(i));
                        fds.push(std::os::fd::FromRawFd::from_raw_fd(fd));
                    }
                }
                (libc::SOL_SOCKET, libc::SCM_CREDENTIALS) if len >= 12 => {
                    let cred = std::ptr::read_unaligned(data.cast::<libc::ucred>());
                    caller.pid = u32::try_from(cred.pid).ok().filter(|&p| p != 0);
                    caller.uid = Some(cred.uid);
                }
                (libc::SOL_SOCKET, SCM_PIDFD) if len >= 4 => {
                    let fd = std::ptr::read_unaligned(data.cast::<libc::c_int>());
                    caller.pidfd = Some(std::os::fd::FromRawFd::from_raw_fd(fd));
                }
                _ => {}
            }
            cmsg = libc::CMSG_NXTHDR(&header, cmsg);
        }
    }
    if header.msg_flags & libc::MSG_CTRUNC != 0 {
        return (
            caller,
            Err("the request carried more than three descriptors".into()),
        );
    }
    if got != 4 {
        return (caller, Err("the request ended before its length".into()));
    }
    (caller, Ok((prefix, fds)))
}

/// Reads the request, the three descriptors sent with it and the
/// credentials the kernel attached.
fn receive(conn: &UnixStream) -> (Caller, Result<(Request, [OwnedFd; 3]), String>) {
    let (caller, got) = receive_prefix(conn);
    let read = || {
        let (prefix, fds) = got?;
        let stdio: [OwnedFd; 3] = fds.try_into().map_err(|fds: Vec<_>| {
            format!("the request carried {} descriptors, not 3", fds.len())
        })?;
        let len = Request::announced_len(prefix).map_err(|e| e.to_string())?;
        let mut body = vec![0u8; len];
        (&*conn)
            .read_exact(&mut body)
            .map_err(|e| format!("cannot read the request: {e}"))?;
        let request = Request::decode(&body).map_err(|e| e.to_string())?;
        Ok((request, stdio))
    };
    let read = read();
    (caller, read)
}

/// Starts the command under the confinement prepared for it, reported to
/// the keeper as `started`, in a child that shares `nd7 run`'s memory
/// until it execs (`launch`).
fn start(
    request: &Request,
    stdio: [OwnedFd; 3],
    confinement: Confinement,
    started: running::Command,
    namespaces: Option<&super::ns::Namespaces>,
) -> Result<Launched, String> {
    let shell = shell_for(&request.command);
    // The directory is the caller's word: opened here, from `nd7 run`'s
    // root (on top of the binds), absolute, and through no magic link
    // (`/proc/self/cwd`, `/proc/self/fd/N` in the child before exec lead to
    // `nd7 run`'s working directory taken before the binds, or to the root
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
        command.env(k, v);
    }
    // The working directory is found again inside the run's namespaces
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
                    // nd7-exec gives up on a run that does not answer
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
/// directory and environment) to the `nd7 run` listening on `socket`, passes
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
        return match read_outcome(&conn, None) {
            Err(refused @ ExitError::Refused(_)) => Err(refused),
            _ => Err(io_err("send the command to")(e)),
        };
    }
    let signals = conn.try_clone().map_err(io_err("use"))?;
    let (acked, acks) = std::sync::mpsc::channel::<()>();
    if let Ok(mut incoming) = signal_hook::iterator::Signals::new(FORWARDED) {
        std::thread::spawn(move || {
            for sig in incoming.forever() {
                let _ = (&signals).write_all(&Frame::Kill(sig).encode());
                if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = acks.recv_timeout(ACK_WAIT)
                {
                    eprintln!(
                        "nd7-exec: nd7 run did not answer within {} s (stopped?); leaving the command to it",
                        ACK_WAIT.as_secs()
                    );
                    std::process::exit(128 + sig);
                }
            }
        });
    }
    read_outcome(&conn, Some(&acked))
}

/// Reads the frame that ends an exchange: how the command ended, or why it
/// was refused. Acknowledgements of passed-on signals on the way are
/// reported on `acked`.
fn read_outcome(
    mut conn: &UnixStream,
    acked: Option<&std::sync::mpsc::Sender<()>>,
) -> Result<Outcome, ExitError> {
    let mut head = [0u8; 5];
    loop {
        conn.read_exact(&mut head).map_err(|_| ExitError::Lost)?;
        if let Ok(Ok(Frame::Kill(_))) = Frame::decode(head) {
            if let Some(acked) = acked {
                let _ = acked.send(());
            }
        } else {
            break;
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn pidfd_of(pid: u32) -> OwnedFd {
        pidfd_open(Pid::from_raw(pid as i32).expect("pid"), PidfdFlags::empty()).expect("pidfd")
    }

    /// A child of this process descends from it while the process pinned
    /// for it is alive. When the pinned process is dead, the same number
    /// naming a descendant (as a reused pid would) does not pass: this is
    /// what the final liveness check in `descends_pinned` guards.
    #[test]
    fn a_pid_whose_pinned_process_died_does_not_pass() {
        let me = std::process::id();
        let mut child = Command::new("sleep").arg("30").spawn().expect("sleep");
        assert_eq!(
            descends_pinned(child.id(), pidfd_of(child.id()), me),
            Some(child.id())
        );

        let mut gone = Command::new("true").spawn().expect("true");
        let dead = pidfd_of(gone.id());
        gone.wait().expect("reaped");
        assert!(!alive(&dead));
        assert_eq!(descends_pinned(child.id(), dead, me), None);

        // Not a descendant at all.
        assert_eq!(descends_pinned(me, pidfd_of(me), child.id()), None);
        child.kill().expect("kill");
        child.wait().expect("reaped");
    }

    #[test]
    fn a_caller_without_credentials_or_of_another_user_is_refused() {
        let none = admit(Caller::default(), 1).expect_err("no credentials");
        assert!(none.contains("without credentials"), "{none}");
        let other = Caller {
            pid: Some(std::process::id()),
            uid: Some(rustix::process::getuid().as_raw() + 1),
            pidfd: None,
        };
        let why = admit(other, 1).expect_err("another uid");
        assert!(why.contains("runs as uid"), "{why}");
    }
}
