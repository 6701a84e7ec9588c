//! `nd7 run` as two processes, so that nothing a session starts outlives it
//! and nothing inside can stop the one that ends it.
//!
//! [`split`] forks `nd7 run` once, before it has a second thread:
//!
//! - **The keeper** (the parent, the process the user's shell waits for)
//!   stays outside every sandbox. It is the child subreaper
//!   (`PR_SET_CHILD_SUBREAPER`), so every process of the session whose
//!   parent dies, a `setsid` daemon included, becomes its child, however
//!   far down it was started. It serves the session's seccomp listeners
//!   ([`super::supervise`]): it performs every `connect`, and it learns when
//!   the last process of a command is gone, which is how `running.json`
//!   (`crate::running`) stays true for `nd7 deny`. When the session process
//!   exits, however it ends, the keeper kills every process still below it
//!   and reaps them, removes the session directory, and exits with the
//!   session's status. It passes SIGTERM and SIGHUP on to the session.
//! - **The session** (the child) is what `nd7 run` always was: it makes the
//!   session directory, serves the exit, starts the agent. It first puts
//!   itself under a Landlock layer that only scopes signals and abstract
//!   unix sockets (ABI 6); the agent and every command are nested beneath
//!   it, so they can signal each other and it, but nothing outside: not the
//!   keeper, not the user's other processes. It dies with the keeper
//!   (`PR_SET_PDEATHSIG`).
//!
//! The agent can kill the session process (it is inside the same scope);
//! then the keeper ends everything at once. It cannot signal, trace or
//! outlive the keeper.
//!
//! The two talk over one `SOCK_SEQPACKET` pair: the keeper says once whether
//! it can act for the session's processes; the session (or, between fork and
//! exec, each process it confines) sends the seccomp listeners and nd7's own
//! listening sockets, each message one letter and a descriptor.

use std::collections::BTreeMap;
use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, IntoRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex, OnceLock};

use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketFlags, SocketType,
};
use rustix::process::{Pid, PidfdFlags, Signal, WaitOptions};

use super::proc;
use super::seccomp::{self, Sockets};
use super::supervise::{self, Supervisor};
use crate::running;
use crate::session::Sessions;

/// Message kinds on the channel, from the session to the keeper.
pub const OWN_SOCKET: u8 = b'O';
pub const FLOOR_LISTENER: u8 = b'F';
pub const COMMAND_LISTENER: u8 = b'C';

/// The session's end of the channel, and what the keeper said it can do.
#[derive(Debug)]
pub struct Channel {
    pub fd: RawFd,
    pub sockets: Sockets,
    /// Whether the session runs under the signal and abstract-socket scope.
    pub scoped: bool,
}

static CHANNEL: OnceLock<Channel> = OnceLock::new();

/// The channel to the keeper, in the session process; `None` elsewhere.
pub fn channel() -> Option<&'static Channel> {
    CHANNEL.get()
}

/// Which process [`split`] returned in.
pub enum Side {
    /// The keeper, done: the session ended with this exit code and nothing
    /// it started is left.
    Keeper(i32),
    /// The session, to carry on as `nd7 run`.
    Session,
}

const KEEPER_SIGNALS: [i32; 5] = [
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGCHLD,
];

fn sigset(signals: &[i32]) -> libc::sigset_t {
    // SAFETY: sigemptyset and sigaddset only write the local set.
    unsafe {
        let mut set = MaybeUninit::<libc::sigset_t>::zeroed().assume_init();
        libc::sigemptyset(&mut set);
        for &s in signals {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

fn set_mask(how: libc::c_int, set: &libc::sigset_t) {
    // SAFETY: changes this thread's signal mask from a valid set.
    unsafe { libc::pthread_sigmask(how, set, std::ptr::null_mut()) };
}

fn os(what: &str) -> impl FnOnce(io::Error) -> String + '_ {
    move |e| format!("cannot {what}: {e}")
}

/// Forks the keeper from the session. Must be called while this process has
/// one thread. `sessions` is where the session's directory will be.
pub fn split(sessions: &Sessions) -> Result<Side, String> {
    let (keeper_end, session_end) = rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| os("open the keeper's channel")(e.into()))?;
    rustix::net::sockopt::set_socket_passcred(&keeper_end, true)
        .map_err(|e| os("set up the keeper's channel")(e.into()))?;
    let signals = sigset(&KEEPER_SIGNALS);
    // Held until each side has its handlers, so none is lost in between.
    set_mask(libc::SIG_BLOCK, &signals);
    let keeper = std::process::id();
    // SAFETY: this process has a single thread (the caller's promise), so
    // the child may go on running ordinary Rust code.
    let child = unsafe { libc::fork() };
    if child < 0 {
        set_mask(libc::SIG_UNBLOCK, &signals);
        return Err(os("start nd7 run's keeper")(io::Error::last_os_error()));
    }
    if child == 0 {
        drop(keeper_end);
        return session_side(keeper, session_end, &signals);
    }
    // The descriptor number the session keeps its end under, which the
    // keeper fetches once to learn whether it may act for the session.
    let probe = session_end.as_raw_fd();
    drop(session_end);
    Ok(Side::Keeper(keep(
        child as u32,
        keeper_end,
        probe,
        sessions,
        &signals,
    )))
}

fn session_side(keeper: u32, channel: OwnedFd, signals: &libc::sigset_t) -> Result<Side, String> {
    set_mask(libc::SIG_UNBLOCK, signals);
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
    if std::os::unix::process::parent_id() != keeper {
        return Err("nd7 run's keeper ended before the session started".into());
    }
    let mut go = [0u8; 1];
    match rustix::io::read(&channel, &mut go) {
        Ok(1) => {}
        _ => return Err("nd7 run's keeper did not answer".into()),
    }
    let sockets = if go[0] == 1 {
        Sockets::Supervised
    } else {
        Sockets::Open
    };
    let scoped = super::scope_self().map_err(|e| e.to_string())?;
    let _ = CHANNEL.set(Channel {
        fd: channel.into_raw_fd(),
        sockets,
        scoped,
    });
    Ok(Side::Session)
}

/// Sends one message with one descriptor to the keeper (the session side).
pub fn send(kind: u8, body: &[u8], fd: BorrowedFd<'_>) -> io::Result<()> {
    let Some(channel) = channel() else {
        return Ok(());
    };
    let mut message = Vec::with_capacity(body.len() + 1);
    message.push(kind);
    message.extend_from_slice(body);
    // SAFETY: the channel's descriptor stays open for the process's life.
    let conn = unsafe { BorrowedFd::borrow_raw(channel.fd) };
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds = [fd];
    control.push(SendAncillaryMessage::ScmRights(&fds));
    rustix::net::sendmsg(
        conn,
        &[IoSlice::new(&message)],
        &mut control,
        SendFlags::empty(),
    )?;
    Ok(())
}

/// Tells the keeper that connections to `socket`, one of nd7's own
/// listening sockets, are allowed.
pub fn allow_own(socket: BorrowedFd<'_>) -> io::Result<()> {
    send(OWN_SOCKET, &[], socket)
}

/// The commands the keeper knows to be running, written to `running.json`
/// while the session lives.
struct Tracker {
    dir: std::path::PathBuf,
    commands: BTreeMap<u64, running::Command>,
    next: u64,
    open: bool,
}

impl Tracker {
    fn save(&self) {
        if self.open {
            let list: Vec<_> = self.commands.values().cloned().collect();
            let _ = running::write(&self.dir, &list);
        }
    }
}

/// The keeper's life: returns the session's exit code once it and every
/// process below the keeper are gone.
fn keep(
    session: u32,
    channel: OwnedFd,
    probe: RawFd,
    sessions: &Sessions,
    signals: &libc::sigset_t,
) -> i32 {
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    let me = std::process::id();
    let pid = Pid::from_raw(session as i32).expect("fork returned a positive pid");
    // Whether this process may act for the session's: fetch a descriptor
    // from the session process, as it will for every connect.
    let supervised =
        seccomp::available() && seccomp::native().is_some() && supervise::can_act_for(pid, probe);
    let _ = rustix::io::write(&channel, &[u8::from(supervised)]);
    let pidfd = rustix::process::pidfd_open(pid, PidfdFlags::empty()).ok();

    let dir = sessions.session(session).dir;
    let tracker = Arc::new(Mutex::new(Tracker {
        dir: dir.clone(),
        commands: BTreeMap::new(),
        next: 0,
        open: true,
    }));
    let supervisor = Supervisor::new();
    {
        let (tracker, supervisor) = (tracker.clone(), supervisor.clone());
        std::thread::spawn(move || serve_channel(channel, &supervisor, &tracker));
    }

    let status = wait_for_session(session, pidfd.as_ref(), signals);
    if let Ok(mut t) = tracker.lock() {
        t.open = false;
    }
    let ended = sweep(me);
    if let Ended::Signaled(sig) = status {
        eprintln!("nd7 run: the session process {session} was killed by signal {sig}");
    }
    if !ended.is_empty() {
        let list: Vec<String> = ended
            .iter()
            .map(|(pid, name)| format!("{pid} ({name})"))
            .collect();
        // TODO(record): enter the processes ended at the session's end in its log.
        eprintln!(
            "nd7 run: ended {} process{} the session left running: {}",
            ended.len(),
            if ended.len() == 1 { "" } else { "es" },
            list.join(", ")
        );
    }
    let _ = sessions.session(session).remove();
    match status {
        Ended::Exited(code) => code,
        Ended::Signaled(sig) => 128 + sig,
        Ended::Unknown => 255,
    }
}

/// How the session process ended.
#[derive(Clone, Copy)]
enum Ended {
    Exited(i32),
    Signaled(i32),
    Unknown,
}

impl From<rustix::process::WaitStatus> for Ended {
    fn from(status: rustix::process::WaitStatus) -> Ended {
        match (status.exit_status(), status.terminating_signal()) {
            (Some(code), _) => Ended::Exited(code),
            (None, Some(sig)) => Ended::Signaled(sig),
            (None, None) => Ended::Unknown,
        }
    }
}

/// Waits for the session process to end, passing on SIGTERM and SIGHUP and
/// reaping every other child (the session's orphans) as they end.
fn wait_for_session(session: u32, pidfd: Option<&OwnedFd>, blocked: &libc::sigset_t) -> Ended {
    let signals = signal_hook::iterator::Signals::new(KEEPER_SIGNALS);
    set_mask(libc::SIG_UNBLOCK, blocked);
    let Ok(mut signals) = signals else {
        // Without handlers, wait for the session alone; orphans are reaped
        // at the end.
        return loop {
            match rustix::process::waitpid(Pid::from_raw(session as i32), WaitOptions::empty()) {
                Ok(Some((_, status))) => break status.into(),
                Err(rustix::io::Errno::INTR) => continue,
                _ => break Ended::Unknown,
            }
        };
    };
    for sig in signals.forever() {
        match sig {
            libc::SIGTERM | libc::SIGHUP => {
                if let (Some(pidfd), Some(sig)) = (pidfd, Signal::from_named_raw(sig)) {
                    let _ = rustix::process::pidfd_send_signal(pidfd, sig);
                }
            }
            libc::SIGCHLD => {
                while let Ok(Some((pid, status))) =
                    rustix::process::wait(WaitOptions::NOHANG)
                {
                    if pid.as_raw_nonzero().get() as u32 == session {
                        return status.into();
                    }
                }
            }
            // SIGINT and SIGQUIT come from the terminal, which sends them to
            // the session too.
            _ => {}
        }
    }
    Ended::Unknown
}

/// Kills every process below the keeper and reaps them all. Returns those
/// that were still running, with their names.
fn sweep(me: u32) -> BTreeMap<u32, String> {
    let mut ended = BTreeMap::new();
    loop {
        for (pid, st) in proc::descendants(me) {
            if st.state == 'Z' {
                continue;
            }
            let name = proc::name(pid);
            let Some(id) = Pid::from_raw(pid as i32) else {
                continue;
            };
            // Pinned first, then checked: a pid reused since the scan
            // fails the check or gets nothing.
            let Ok(pidfd) = rustix::process::pidfd_open(id, PidfdFlags::empty()) else {
                continue;
            };
            if proc::descends_from(pid, me)
                && rustix::process::pidfd_send_signal(&pidfd, Signal::KILL).is_ok()
            {
                ended.entry(pid).or_insert(name);
            }
        }
        match rustix::process::wait(WaitOptions::empty()) {
            Ok(Some(_)) | Err(rustix::io::Errno::INTR) => {
                while let Ok(Some(_)) = rustix::process::wait(WaitOptions::NOHANG) {}
            }
            // ECHILD: no child left, so nothing below the keeper at all.
            _ => break,
        }
    }
    ended
}

/// Reads the session's messages until it is gone.
fn serve_channel(channel: OwnedFd, supervisor: &Arc<Supervisor>, tracker: &Arc<Mutex<Tracker>>) {
    let mut body = vec![0u8; 64 * 1024];
    loop {
        let mut space =
            [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1), ScmCredentials(1))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let got = match rustix::net::recvmsg(
            &channel,
            &mut [IoSliceMut::new(&mut body)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Ok(got) => got,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return,
        };
        let mut fd: Option<OwnedFd> = None;
        let mut sender = 0u32;
        for message in control.drain() {
            match message {
                RecvAncillaryMessage::ScmRights(fds) => {
                    for f in fds {
                        fd.get_or_insert(f);
                    }
                }
                RecvAncillaryMessage::ScmCredentials(cred) => {
                    sender = cred.pid.as_raw_nonzero().get() as u32;
                }
                _ => {}
            }
        }
        if got.bytes == 0 && fd.is_none() {
            return; // the session and everything it confined are gone
        }
        let (Some(&kind), Some(fd)) = (body.first(), fd) else {
            continue;
        };
        let text = &body[1..got.bytes.min(body.len())];
        match kind {
            OWN_SOCKET => supervisor.allow_own(fd.as_fd()),
            FLOOR_LISTENER => supervisor.watch(fd, || {}),
            COMMAND_LISTENER => {
                let Ok(mut command) = serde_json::from_slice::<running::Command>(text) else {
                    supervisor.watch(fd, || {});
                    continue;
                };
                command.pid = sender;
                let id = {
                    let Ok(mut t) = tracker.lock() else { continue };
                    let id = t.next;
                    t.next += 1;
                    t.commands.insert(id, command);
                    t.save();
                    id
                };
                let tracker = tracker.clone();
                supervisor.watch(fd, move || {
                    if let Ok(mut t) = tracker.lock() {
                        t.commands.remove(&id);
                        t.save();
                    }
                });
            }
            _ => {}
        }
    }
}
