//! `nd7 run` as three processes, so that nothing a run starts outlives it
//! and nothing inside can stop the one that ends it.
//!
//! [`split`] forks twice, first thing, while `nd7 run` is small and has one
//! thread (a fork copies less then):
//!
//! - **The front** ([`front`], `nd7 run`'s first process, the one the user's
//!   shell waits for) does nothing but wait for the keeper, pass on the
//!   signals a process sent it, and exit with the keeper's status; [`split`]
//!   returns [`Side::Done`] in it.
//! - **The keeper** (the front's child) stays outside every sandbox. It is
//!   the child subreaper (`PR_SET_CHILD_SUBREAPER`), so every process of the
//!   run whose parent dies, a `setsid` daemon included, becomes its child,
//!   however far down it was started. It serves the run's seccomp listeners
//!   ([`super::supervise`]): it performs every `connect`, and it learns when
//!   the last process of a command is gone, which is how `running.json`
//!   (`crate::running`) stays true for `nd7 deny`. When `nd7 run` (its
//!   child) exits, however it ends, the keeper kills every process still
//!   below it and reaps them, removes the run directory, and exits with
//!   `nd7 run`'s status ([`Side::Done`] too). It passes SIGTERM and SIGHUP
//!   on to `nd7 run`.
//! - **`nd7 run`** (the keeper's child, [`Side::Run`]) is what `nd7 run`
//!   always was: it makes the run directory, serves the exit and the door,
//!   starts the agent. Once it has built its namespaces (Landlock refuses
//!   mounts) and before it starts anything, it puts itself under a Landlock
//!   layer that only scopes signals and abstract unix sockets (ABI 6,
//!   [`scope`]); the agent and every command are nested beneath it, so they
//!   can signal each other and it, but nothing outside: not the keeper, not
//!   the user's other processes. It dies with the keeper
//!   (`PR_SET_PDEATHSIG`).
//!
//! The agent can kill `nd7 run` (it is inside the same scope); then the
//! keeper ends everything at once. It cannot signal, trace or outlive the
//! keeper, and it cannot stop `nd7 run`: the seccomp filter refuses every
//! stop signal (ADR-0096).
//!
//! # The user's signals always end the run (ADR-0096)
//!
//! The keeper dies with the front (`PR_SET_PDEATHSIG`, SIGTERM), so a
//! `kill -9` of the front ends the run as SIGTERM does, `run_end` and all,
//! instead of leaving the keeper's charges to init. On SIGTERM or SIGHUP the
//! keeper wakes `nd7 run` (SIGCONT) and passes the signal on; if the program
//! has not ended [`GRACE`] later, the keeper ends every process below it but
//! `nd7 run`, which then writes `run_end` and exits; if `nd7 run` itself has
//! not ended [`RUN_GRACE`] after that, the keeper kills it too. A typed
//! Ctrl-C or Ctrl-\ is the program's (the terminal sends it to the program
//! as well); the third of them within [`INTERRUPT_WINDOW`] ends the run as
//! SIGTERM does.
//!
//! The keeper and `nd7 run` talk over one `SOCK_SEQPACKET` pair: the keeper
//! says once whether it can act for the run's processes and whether it
//! serves the channel (read by `nd7 run` only before it first starts
//! anything, so the two set up side by side, [`Channel::ready`]); `nd7 run`
//! (or, between fork and exec, each process it confines) sends the seccomp
//! listeners and nd7's own listening sockets, each message one letter and a
//! descriptor. Once the agent has ended, `nd7 run` asks the keeper to end
//! what is left ([`end_leftovers`]), so that the run's log says so before
//! its last entry; the keeper's own sweep after `nd7 run` has gone is the
//! backstop.
//!
//! Which process is "nd7 run" to the rest of nd7: the keeper's child. Its pid
//! names `~/.nd7/runs/<pid>`, the run's chain and the banner; it serves the
//! exit and the hooks' door, and callers must descend from it. The front and
//! the keeper are only its parents.

use std::collections::BTreeMap;
use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use nix::sys::signal::{SigSet, SigmaskHow};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use std::sync::{Arc, OnceLock};

use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketFlags, SocketType,
};
use rustix::process::{Pid, PidfdFlags, Signal, WaitOptions};

use super::seccomp::{self, Sockets};
use super::supervise::{self, Supervisor};
use crate::kernel::linux as proc;
use crate::run_dir::RunDirs;
use crate::running;
use crate::sandbox::Leftovers;

/// Message kinds on the channel, from `nd7 run` to the keeper.
pub const OWN_SOCKET: u8 = b'O';
/// `nd7 run`'s socket-diagnostics socket made inside the run's network
/// namespace (`netns`), where the run's unix sockets are described.
pub const NET_DIAG: u8 = b'N';
pub const FLOOR_LISTENER: u8 = b'F';
/// From `nd7 run` alone: a held git configuration, its path and a
/// descriptor of it (`backend::announce_git_configs`).
pub const HELD_GIT_CONFIG: u8 = b'G';
pub const COMMAND_LISTENER: u8 = b'C';
/// From `nd7 run` alone, with no descriptor: end every process below the
/// keeper but `nd7 run`; answered with [`ENDED`].
pub const END_LEFTOVERS: u8 = b'E';
/// The keeper's answer to [`END_LEFTOVERS`]: a JSON list of `[pid, name]`.
pub const ENDED: u8 = b'e';

/// The keeper's first message: what it worked out for `nd7 run` while
/// `nd7 run` set up its own side ([`split`]'s `head_start`).
const HEAD_START: u8 = b'H';
/// The largest head start sent; a larger one is sent empty, and `nd7 run`
/// works it out itself.
const MAX_HEAD_START: usize = 128 * 1024;

/// Bits of the keeper's first byte on the channel.
const GO_SUPERVISED: u8 = 1;
const GO_SERVED: u8 = 2;

/// `nd7 run`'s end of the channel, and what the keeper said it can do.
///
/// The keeper answers once, after setting itself up; `nd7 run` reads the
/// answer only when it first needs it ([`Channel::ready`], just before it
/// starts anything under the floor), so both set up side by side and the
/// `nd7 run` never waits for the keeper while it builds its own side.
#[derive(Debug)]
pub struct Channel {
    pub fd: OwnedFd,
    /// The keeper's pid: the peer of every connection it makes for the
    /// run's processes.
    pub keeper: u32,
    /// The keeper's answer (its first byte on the channel), once read;
    /// `None` inside when it never came.
    answer: OnceLock<Option<u8>>,
    /// The keeper's head start, once read; `None` inside when it never came
    /// or came empty.
    head_start: OnceLock<Option<Vec<u8>>>,
    /// Whether `nd7 run` runs under the signal and abstract-socket scope
    /// ([`scope`]).
    scoped: OnceLock<bool>,
}

impl Channel {
    /// What the keeper worked out for `nd7 run` (`split`'s `head_start`),
    /// read from the channel the first time it is asked for: its first
    /// message, so this waits for the keeper to have sent it.
    pub fn head_start(&self) -> Option<Vec<u8>> {
        self.head_start
            .get_or_init(|| {
                let conn = self.fd.as_fd();
                let mut message = Vec::with_capacity(MAX_HEAD_START + 1);
                loop {
                    match rustix::net::recv(
                        conn,
                        rustix::buffer::spare_capacity(&mut message),
                        RecvFlags::empty(),
                    ) {
                        Ok(_) => break,
                        Err(rustix::io::Errno::INTR) => continue,
                        Err(_) => return None,
                    }
                }
                match message.split_first() {
                    Some((&HEAD_START, rest)) => (!rest.is_empty()).then(|| rest.to_vec()),
                    // No head start came (the keeper could not send it):
                    // this is the answer, kept for `answer`, which would
                    // otherwise wait for a second message that never comes.
                    Some((&go, [])) => {
                        let _ = self.answer.set(Some(go));
                        None
                    }
                    _ => None,
                }
            })
            .clone()
    }

    /// The keeper's answer, read from the channel the first time it is
    /// asked for (every later call returns the same), after its head start.
    fn answer(&self) -> Option<u8> {
        let _ = self.head_start();
        *self.answer.get_or_init(|| {
            let conn = self.fd.as_fd();
            let mut go = [0u8; 1];
            loop {
                match rustix::io::read(conn, &mut go) {
                    Ok(1) => return Some(go[0]),
                    Err(rustix::io::Errno::INTR) => continue,
                    _ => return None,
                }
            }
        })
    }

    /// Waits for the keeper's answer: an error when the keeper ended or
    /// closed the channel without one (nothing may then be started).
    pub fn ready(&self) -> Result<(), String> {
        self.answer()
            .map(drop)
            .ok_or_else(|| "nd7 run's keeper did not answer".to_string())
    }

    /// What the filter does with `connect` and `bind`: handed to the keeper
    /// when it said it can act for the run's processes.
    pub fn sockets(&self) -> Sockets {
        match self.answer() {
            Some(go) if go & GO_SUPERVISED != 0 => Sockets::Supervised,
            _ => Sockets::Open,
        }
    }

    /// Whether the keeper reads the channel (its event loop runs), so that
    /// a question on it gets an answer.
    pub fn served(&self) -> bool {
        self.answer().is_some_and(|go| go & GO_SERVED != 0)
    }

    /// Whether `nd7 run` put itself under the signal and abstract-socket
    /// scope ([`scope`]).
    pub fn scoped(&self) -> bool {
        self.scoped.get().copied().unwrap_or(false)
    }
}

static CHANNEL: OnceLock<Channel> = OnceLock::new();

/// The channel to the keeper, in `nd7 run`; `None` elsewhere.
pub fn channel() -> Option<&'static Channel> {
    CHANNEL.get()
}

/// The keeper's pid, in `nd7 run`; `None` elsewhere.
pub fn keeper_pid() -> Option<u32> {
    channel().map(|c| c.keeper)
}

/// Which process [`split`] returned in.
pub enum Side {
    /// The front or the keeper, done: `nd7 run` ended with this exit code
    /// and nothing it started is left.
    Done(i32),
    /// `nd7 run` (the keeper's child), to carry on.
    Run,
}

/// How long the program has to end after SIGTERM or SIGHUP before the
/// keeper ends every process of the run but `nd7 run`.
pub const GRACE: std::time::Duration = std::time::Duration::from_secs(3);
/// How long `nd7 run` then has to write `run_end` and exit
/// before the keeper kills it.
pub const RUN_GRACE: std::time::Duration = std::time::Duration::from_secs(10);
/// The third Ctrl-C (or Ctrl-\\) within this ends the run as SIGTERM does.
pub const INTERRUPT_WINDOW: std::time::Duration = std::time::Duration::from_secs(5);
/// How many interrupts within [`INTERRUPT_WINDOW`] end the run.
pub const INTERRUPTS_TO_END: usize = 3;

/// `si_code` of a signal the kernel sent (the terminal's Ctrl-C among them).
const SI_KERNEL: i32 = 0x80;

const KEEPER_SIGNALS: [i32; 5] = [
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGCHLD,
];

fn sigset(signals: &[i32]) -> SigSet {
    let mut set = SigSet::empty();
    for sig in signals
        .iter()
        .filter_map(|&s| nix::sys::signal::Signal::try_from(s).ok())
    {
        set.add(sig);
    }
    set
}

fn set_mask(how: SigmaskHow, set: &SigSet) {
    let _ = nix::sys::signal::pthread_sigmask(how, Some(set), None);
}

fn os(what: &str) -> impl FnOnce(io::Error) -> String + '_ {
    move |e| format!("cannot {what}: {e}")
}

/// Forks the front, the keeper and `nd7 run`. Must be called while this process has
/// one thread. `run_dirs` is where the run directory will be. The
/// keeper runs `head_start` first thing, while `nd7 run` sets up, and
/// sends `nd7 run` what it returns ([`Channel::head_start`]): work the
/// `nd7 run` would otherwise do itself before it can build its floor.
pub fn split(run_dirs: &RunDirs, head_start: impl FnOnce() -> Vec<u8>) -> Result<Side, String> {
    if let Some(code) = front()? {
        return Ok(Side::Done(code));
    }
    let (keeper_end, child_end) = rustix::net::socketpair(
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
    set_mask(SigmaskHow::SIG_BLOCK, &signals);
    let keeper = std::process::id();
    // SAFETY: this process has a single thread (the caller's promise), so
    // the child may go on running ordinary Rust code.
    let child = unsafe { libc::fork() };
    if child < 0 {
        set_mask(SigmaskHow::SIG_UNBLOCK, &signals);
        return Err(os("start nd7 run's keeper")(io::Error::last_os_error()));
    }
    if child == 0 {
        drop(keeper_end);
        return run_side(keeper, child_end, &signals);
    }
    // Only `nd7 run` reads the observer's feed.
    drop(super::observe::take_feed());
    // The descriptor number `nd7 run` keeps its end under, which the
    // keeper fetches once to learn whether it may act for `nd7 run`.
    let probe = child_end.as_raw_fd();
    drop(child_end);
    Ok(Side::Done(keep(
        child as u32,
        keeper_end,
        probe,
        run_dirs,
        &signals,
        head_start,
    )))
}

/// Sets `sig`'s disposition to `handler` (`SIG_IGN` or `SIG_DFL`).
fn dispose(sig: i32, handler: libc::sighandler_t) {
    // SAFETY: installs no function, only the ignore or default disposition.
    unsafe { libc::signal(sig, handler) };
}

/// The background terminal signals: the front, the keeper and `nd7 run`
/// ignore them, so a program that moves the terminal's foreground away from
/// them (and sets `TOSTOP`) cannot stop them by making them write to it.
const TERMINAL_STOPS: [i32; 2] = [libc::SIGTTIN, libc::SIGTTOU];

/// Forks the keeper off `nd7 run`'s first process, which stays as the front
/// (see the module's doc). Returns, in the front, the keeper's exit status
/// once it has ended; `None` in the keeper, which carries on.
fn front() -> Result<Option<i32>, String> {
    let signals = sigset(&KEEPER_SIGNALS);
    set_mask(SigmaskHow::SIG_BLOCK, &signals);
    for sig in TERMINAL_STOPS {
        dispose(sig, libc::SIG_IGN);
    }
    let front = std::process::id();
    // The exec observer's pipes (ADR-0110): the keeper waits to be traced.
    let pipes = super::observe::Pipes::new().map_err(os("open the observer's pipes"))?;
    // SAFETY: this process has a single thread ([`split`]'s caller's
    // promise), so the child may go on running ordinary Rust code.
    let child = unsafe { libc::fork() };
    if child < 0 {
        set_mask(SigmaskHow::SIG_UNBLOCK, &signals);
        return Err(os("start nd7 run's keeper")(io::Error::last_os_error()));
    }
    if child == 0 {
        // The signals stay blocked: [`split`] blocks them again and the
        // keeper reads them from a signalfd. SIGTERM when the front dies,
        // however it dies: the keeper then ends the run as on SIGTERM.
        let _ = rustix::process::set_parent_process_death_signal(Some(Signal::TERM));
        if std::os::unix::process::parent_id() != front {
            return Err("nd7 run ended before its keeper started".into());
        }
        super::observe::keeper_side(pipes);
        return Ok(None);
    }
    let keeper = Pid::from_raw(child).expect("fork returned a positive pid");
    Ok(Some(match super::observe::front_side(pipes, child) {
        Some(feed) => super::observe::observe(child, feed, &signals),
        None => wait_in_front(keeper, &signals),
    }))
}

/// The front's life: passes on to the keeper each signal a process sent
/// (one the terminal sent reached the keeper too), and returns the keeper's
/// status once it has ended.
fn wait_in_front(keeper: Pid, signals: &SigSet) -> i32 {
    loop {
        // SAFETY: siginfo_t is plain data, filled by sigwaitinfo.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waits for one of `signals`, which are blocked, into `info`.
        let sig = unsafe { libc::sigwaitinfo(signals.as_ref(), &mut info) };
        if sig == libc::SIGCHLD || sig < 0 {
            match rustix::process::waitpid(Some(keeper), WaitOptions::NOHANG) {
                Ok(Some((_, status))) => {
                    return match status.exit_status() {
                        Some(code) => code,
                        None => 128 + status.terminating_signal().unwrap_or(0),
                    };
                }
                Ok(None) => continue,
                Err(_) => return 255,
            }
        }
        if info.si_code != SI_KERNEL {
            // The keeper's pid, this process's own child (not reaped yet,
            // so the pid is still its).
            if let Some(sig) = Signal::from_named_raw(sig) {
                let _ = rustix::process::kill_process(keeper, sig);
            }
        }
    }
}

fn run_side(keeper: u32, channel: OwnedFd, signals: &SigSet) -> Result<Side, String> {
    set_mask(SigmaskHow::SIG_UNBLOCK, signals);
    // `nd7 run` keeps ignoring the terminal's stops, as the front and the
    // keeper do: a program that takes the terminal's foreground (with
    // `TOSTOP`) would otherwise have the tty driver stop `nd7 run` at its
    // next write there, and no call of the program's would name the signal
    // (ADR-0099). The program gets them back at their default from
    // `launch`'s child, which resets them before exec.
    let _ = rustix::process::set_parent_process_death_signal(Some(Signal::KILL));
    if std::os::unix::process::parent_id() != keeper {
        return Err("nd7 run's keeper ended before the session started".into());
    }
    let _ = CHANNEL.set(Channel {
        fd: channel,
        keeper,
        answer: OnceLock::new(),
        head_start: OnceLock::new(),
        scoped: OnceLock::new(),
    });
    Ok(Side::Run)
}

/// Puts `nd7 run` under the Landlock layer that scopes signals
/// and abstract unix sockets ([`super::scope::scope_self`]), where the kernel has
/// it. Called by `nd7 run` once it has built its namespaces (Landlock
/// refuses mounts) and before it starts anything: the agent and every
/// command are nested beneath it. Outside `nd7 run`, does nothing.
pub fn scope() -> Result<(), String> {
    let Some(channel) = channel() else {
        return Ok(());
    };
    let scoped = super::scope::scope_self().map_err(|e| e.to_string())?;
    let _ = channel.scoped.set(scoped);
    Ok(())
}

/// Sends `nd7 run` what the keeper worked out: empty when it is larger
/// than [`MAX_HEAD_START`] or the socket will not take it in one message
/// (a send buffer set small), so `nd7 run` works it out itself.
fn send_head_start(channel: BorrowedFd<'_>, worked_out: Vec<u8>) {
    let mut message = vec![HEAD_START];
    if worked_out.len() <= MAX_HEAD_START {
        message.extend(worked_out);
    }
    if rustix::io::write(channel, &message).is_err() && message.len() > 1 {
        let _ = rustix::io::write(channel, &[HEAD_START]);
    }
}

/// Sends one message with one descriptor to the keeper (`nd7 run`'s side).
pub fn send(kind: u8, body: &[u8], fd: BorrowedFd<'_>) -> io::Result<()> {
    let Some(channel) = channel() else {
        return Ok(());
    };
    let mut message = Vec::with_capacity(body.len() + 1);
    message.push(kind);
    message.extend_from_slice(body);
    let conn = channel.fd.as_fd();
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

/// Tells the keeper that connections to `socket`, one of nd7's own
/// listening sockets, are allowed from the floor's processes alone, never
/// from a command through the exit (the hooks' door).
pub fn allow_own_to_floor(socket: BorrowedFd<'_>) -> io::Result<()> {
    send(OWN_SOCKET, FLOOR_ONLY, socket)
}

/// The text of an [`OWN_SOCKET`] message for a socket the floor alone may
/// connect to.
const FLOOR_ONLY: &[u8] = b"floor";

/// The commands the keeper knows to be running with a grant, written to
/// `running.json` while `nd7 run` lives.
struct Tracker {
    dir: std::path::PathBuf,
    commands: BTreeMap<u64, running::Command>,
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

/// What an epoll event is about.
const SIGNALS: u64 = 0;
const CHANNEL_IN: u64 = 1;
/// Listeners are numbered from here.
const FIRST_LISTENER: u64 = 2;

/// The keeper's life: returns `nd7 run`'s exit code once it and every
/// process below the keeper are gone. One thread, one epoll loop over the
/// signals (a signalfd), the channel and every seccomp listener; only a
/// `connect` that may block for long gets a thread of its own.
fn keep(
    run: u32,
    channel: OwnedFd,
    probe: RawFd,
    run_dirs: &RunDirs,
    signals: &SigSet,
    head_start: impl FnOnce() -> Vec<u8>,
) -> i32 {
    // Any pid turns it on: the kernel reads the argument as a flag.
    let _ = rustix::process::set_child_subreaper(Some(rustix::process::getpid()));
    // `nd7 run` waits for this before it builds its floor, and for the
    // answer below only before it starts anything: this goes first.
    send_head_start(channel.as_fd(), head_start());
    let me = std::process::id();
    let pid = Pid::from_raw(run as i32).expect("fork returned a positive pid");
    let pidfd = rustix::process::pidfd_open(pid, PidfdFlags::empty()).ok();
    let reply = channel.try_clone();
    let event_loop = Loop::new(run, channel, run_dirs, signals);
    // Whether this process may act for the run's: fetch a descriptor
    // from `nd7 run`, as it will for every connect. Without the
    // loop nothing would answer, so `nd7 run` must then not ask.
    let supervised = event_loop.is_ok()
        && seccomp::available()
        && seccomp::native().is_some()
        && supervise::can_act_for(pid, probe);
    let go =
        if supervised { GO_SUPERVISED } else { 0 } | if event_loop.is_ok() { GO_SERVED } else { 0 };
    if let Ok(reply) = reply {
        let _ = rustix::io::write(&reply, &[go]);
    }

    let status = match event_loop {
        Ok(mut l) => l.run(pidfd.as_ref()),
        // Without epoll or a signalfd: wait for `nd7 run` alone; the sweep
        // below still ends everything it left.
        Err(_) => wait_plainly(run, signals),
    };
    let ended = sweep(me);
    if let Ended::Signaled(sig) = status {
        eprintln!("nd7 run: the session process {run} was killed by signal {sig}");
    }
    if !ended.is_empty() {
        let list: Vec<String> = ended
            .iter()
            .map(|(pid, name)| {
                format!(
                    "{pid} ({})",
                    crate::read::safe::term(name, crate::read::safe::Lines::One)
                )
            })
            .collect();
        // Those `nd7 run` left after asking for the end of the rest
        // (`end_leftovers`), or all of them when it could not ask: its log is
        // closed by now, so they are said here only.
        eprintln!(
            "nd7 run: ended {} process{} the session left running: {}",
            ended.len(),
            if ended.len() == 1 { "" } else { "es" },
            list.join(", ")
        );
    }
    let _ = run_dirs.run(run).remove();
    match status {
        Ended::Exited(code) => code,
        Ended::Signaled(sig) => 128 + sig,
        Ended::Unknown => 255,
    }
}

/// How `nd7 run` ended.
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

fn wait_plainly(run: u32, blocked: &SigSet) -> Ended {
    set_mask(SigmaskHow::SIG_UNBLOCK, blocked);
    loop {
        match rustix::process::waitpid(Pid::from_raw(run as i32), WaitOptions::empty()) {
            Ok(Some((_, status))) => return status.into(),
            Err(rustix::io::Errno::INTR) => continue,
            _ => return Ended::Unknown,
        }
    }
}

/// The keeper's event loop while `nd7 run` lives.
struct Loop {
    run: u32,
    epoll: OwnedFd,
    signals: SignalFd,
    channel: OwnedFd,
    supervisor: Arc<Supervisor>,
    /// Each listener, the command it belongs to if it is listed, and
    /// whether it is the floor's (not a command's).
    listeners: BTreeMap<u64, (Arc<OwnedFd>, Option<u64>, bool)>,
    next: u64,
    tracker: Tracker,
    /// Room for one message from `nd7 run`.
    buffer: Vec<u8>,
    /// Once the user asked for the end: what the keeper does next, and when.
    ending: Option<(std::time::Instant, Ending)>,
    /// When the last interrupts (Ctrl-C, Ctrl-\\) came.
    interrupts: std::collections::VecDeque<std::time::Instant>,
}

/// The keeper's next step once the user asked for the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    /// End every process but `nd7 run`, which then writes `run_end`.
    Program,
    /// Kill `nd7 run`.
    Session,
    /// Nothing left to do but wait for `nd7 run` to be reaped.
    Waiting,
}

impl Loop {
    fn new(run: u32, channel: OwnedFd, run_dirs: &RunDirs, blocked: &SigSet) -> io::Result<Loop> {
        use rustix::event::epoll;
        let signals = SignalFd::with_flags(blocked, SfdFlags::SFD_CLOEXEC)?;
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        let flags = epoll::EventFlags::IN;
        epoll::add(&epoll, &signals, epoll::EventData::new_u64(SIGNALS), flags)?;
        epoll::add(
            &epoll,
            &channel,
            epoll::EventData::new_u64(CHANNEL_IN),
            flags,
        )?;
        let supervisor = Supervisor::new();
        supervisor.note_held_keys_in(run_dirs.run(run).dir.join(crate::refusals::HELD_KEYS));
        Ok(Loop {
            run,
            epoll,
            signals,
            channel,
            supervisor,
            listeners: BTreeMap::new(),
            next: FIRST_LISTENER,
            tracker: Tracker {
                dir: run_dirs.run(run).dir,
                commands: BTreeMap::new(),
                open: true,
            },
            buffer: vec![0u8; 64 * 1024],
            ending: None,
            interrupts: std::collections::VecDeque::new(),
        })
    }

    /// Runs until `nd7 run` has ended; returns how it did.
    fn run(&mut self, pidfd: Option<&OwnedFd>) -> Ended {
        use rustix::event::epoll;
        let mut events = Vec::with_capacity(16);
        loop {
            events.clear();
            let timeout = self.ending.map(|(at, _)| {
                let left = at.saturating_duration_since(std::time::Instant::now());
                rustix::event::Timespec {
                    tv_sec: left.as_secs() as _,
                    tv_nsec: left.subsec_nanos() as _,
                }
            });
            match epoll::wait(
                &self.epoll,
                rustix::buffer::spare_capacity(&mut events),
                timeout.as_ref(),
            ) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(_) => return wait_plainly(self.run, &sigset(&[])),
            }
            for event in &events {
                match event.data.u64() {
                    SIGNALS => {
                        if let Some(ended) = self.signal(pidfd) {
                            self.tracker.open = false;
                            return ended;
                        }
                    }
                    CHANNEL_IN => self.message(),
                    id => self.listener(id, event.flags),
                }
            }
            self.next_step(pidfd);
        }
    }

    /// The user asked for the end (SIGTERM, SIGHUP, or the third
    /// interrupt): `nd7 run` is woken and sent `sig`, and the grace
    /// starts, once.
    fn end(&mut self, pidfd: Option<&OwnedFd>, sig: Signal) {
        if let Some(pidfd) = pidfd {
            let _ = rustix::process::pidfd_send_signal(pidfd, Signal::CONT);
            let _ = rustix::process::pidfd_send_signal(pidfd, sig);
        }
        if self.ending.is_none() {
            self.ending = Some((std::time::Instant::now() + GRACE, Ending::Program));
        }
    }

    /// Takes the ending's next step once its time has come.
    fn next_step(&mut self, pidfd: Option<&OwnedFd>) {
        let Some((at, step)) = self.ending else {
            return;
        };
        if std::time::Instant::now() < at {
            return;
        }
        let later = |step| Some((std::time::Instant::now() + RUN_GRACE, step));
        self.ending = match step {
            Ending::Program => {
                end_below(std::process::id(), self.run);
                later(Ending::Session)
            }
            Ending::Session => {
                if let Some(pidfd) = pidfd {
                    let _ = rustix::process::pidfd_send_signal(pidfd, Signal::KILL);
                }
                later(Ending::Waiting)
            }
            Ending::Waiting => later(Ending::Waiting),
        };
    }

    /// Counts an interrupt; the third within [`INTERRUPT_WINDOW`] ends the
    /// run as SIGTERM does.
    fn interrupted(&mut self, pidfd: Option<&OwnedFd>) {
        let now = std::time::Instant::now();
        self.interrupts.push_back(now);
        while self
            .interrupts
            .front()
            .is_some_and(|t| now.duration_since(*t) > INTERRUPT_WINDOW)
        {
            self.interrupts.pop_front();
        }
        if self.interrupts.len() >= INTERRUPTS_TO_END {
            self.end(pidfd, Signal::TERM);
        }
    }

    /// Handles the signals that arrived: SIGTERM and SIGHUP go on to the
    /// `nd7 run` and start the ending ([`Loop::end`]); SIGCHLD reaps (the
    /// run's orphans as they end, and `nd7 run` itself, which ends the
    /// loop); SIGINT and SIGQUIT come from the terminal, which sends them to
    /// the program too: they are only counted ([`Loop::interrupted`]).
    fn signal(&mut self, pidfd: Option<&OwnedFd>) -> Option<Ended> {
        // One record per wake-up; epoll wakes again while more are pending.
        let Ok(Some(info)) = self.signals.read_signal() else {
            return None;
        };
        let sig = info.ssi_signo as i32;
        if matches!(sig, libc::SIGTERM | libc::SIGHUP)
            && let Some(sig) = Signal::from_named_raw(sig)
        {
            self.end(pidfd, sig);
        }
        if matches!(sig, libc::SIGINT | libc::SIGQUIT) {
            self.interrupted(pidfd);
        }
        if sig == libc::SIGCHLD {
            while let Ok(Some((pid, status))) = rustix::process::wait(WaitOptions::NOHANG) {
                if pid.as_raw_nonzero().get() as u32 == self.run {
                    return Some(status.into());
                }
            }
        }
        None
    }

    /// Reads one message from `nd7 run` (or a process it confines).
    fn message(&mut self) {
        use rustix::event::epoll;
        let body = &mut self.buffer;
        let mut space =
            [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1), ScmCredentials(1))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let got = match rustix::net::recvmsg(
            &self.channel,
            &mut [IoSliceMut::new(body)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT,
        ) {
            Ok(got) => got,
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
            // `nd7 run` and everything it confined closed the channel.
            let _ = epoll::delete(&self.epoll, &self.channel);
            return;
        }
        if got.bytes == 1 && body[0] == END_LEFTOVERS && fd.is_none() && sender == self.run {
            let ended = end_below(std::process::id(), self.run);
            let (door_refused, door_refused_first) = self.supervisor.door_refusals();
            let answer = Leftovers {
                count: ended.len(),
                processes: ended.into_iter().take(NAMED).collect(),
                door_refused,
                door_refused_first,
            };
            let mut message = vec![ENDED];
            message.extend(serde_json::to_vec(&answer).unwrap_or_default());
            let _ = rustix::net::send(&self.channel, &message, SendFlags::DONTWAIT);
            return;
        }
        let (Some(&kind), Some(fd)) = (body.first(), fd) else {
            return;
        };
        let text = body[1..got.bytes.min(body.len())].to_vec();
        let floor = kind == FLOOR_LISTENER;
        // A listener's message starts with its processes' write roots.
        let (roots, text) = match kind {
            FLOOR_LISTENER | COMMAND_LISTENER => {
                let (roots, rest) = super::attrs::Roots::decode(&text);
                (roots, rest.to_vec())
            }
            _ => (Default::default(), text),
        };
        if kind == HELD_GIT_CONFIG {
            // Only `nd7 run`'s word, as for NET_DIAG.
            if sender == self.run {
                self.supervisor.hold_git_config(fd.as_fd(), &text);
            }
            return;
        }
        if kind == NET_DIAG {
            // Only `nd7 run`'s own word (the kernel checks the pid it sends).
            if sender == self.run {
                super::supervise::describe_inside(fd);
            }
            return;
        }
        let command = match kind {
            OWN_SOCKET => {
                return self
                    .supervisor
                    .allow_own(fd.as_fd(), text.as_slice() == FLOOR_ONLY);
            }
            FLOOR_LISTENER => None,
            // Only commands holding a grant matter to `nd7 deny`; the rest
            // are served but not listed, which spares a write.
            COMMAND_LISTENER if text.is_empty() => None,
            COMMAND_LISTENER => serde_json::from_slice::<running::Command>(&text)
                .ok()
                .filter(|c| !c.grants.is_empty()),
            _ => return,
        };
        let id = self.next;
        self.next += 1;
        let listed = command.map(|mut command| {
            command.pid = sender;
            self.tracker.commands.insert(id, command);
            self.tracker.save();
            id
        });
        supervise::wake_on_one_cpu(fd.as_fd());
        let flags = epoll::EventFlags::IN;
        if epoll::add(&self.epoll, &fd, epoll::EventData::new_u64(id), flags).is_ok() {
            self.supervisor.set_roots(fd.as_raw_fd(), roots);
            self.listeners.insert(id, (Arc::new(fd), listed, floor));
        }
    }

    /// A listener is ready: a notification to answer, or no process uses its
    /// filter any more.
    fn listener(&mut self, id: u64, flags: rustix::event::epoll::EventFlags) {
        use rustix::event::epoll::EventFlags;
        let Some((listener, listed, floor)) = self.listeners.get(&id) else {
            return;
        };
        if flags.contains(EventFlags::IN) {
            self.supervisor.answer(listener, *floor);
        } else if flags.intersects(EventFlags::HUP | EventFlags::ERR) {
            let _ = rustix::event::epoll::delete(&self.epoll, &**listener);
            self.supervisor.forget_roots(listener.as_raw_fd());
            if let Some(command) = listed {
                self.tracker.commands.remove(command);
                self.tracker.save();
            }
            self.listeners.remove(&id);
        }
    }
}

/// One pass over the processes below the keeper (`me`) but `spare` (and,
/// with `new_only`, those already in `ended`): each still running is pinned
/// with a pidfd, checked to still descend from the keeper, killed, and
/// added to `ended` with its name. Returns whether it killed one not in
/// `ended` before.
fn kill_pass(
    me: u32,
    spare: Option<u32>,
    new_only: bool,
    ended: &mut BTreeMap<u32, String>,
) -> bool {
    let mut killed = false;
    for (pid, st) in proc::descendants(me) {
        if st.state == 'Z' || Some(pid) == spare || (new_only && ended.contains_key(&pid)) {
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
            killed |= ended.insert(pid, name).is_none();
        }
    }
    killed
}

/// Kills every process below the keeper but `nd7 run` (`spare`),
/// pass after pass until one finds nothing new (a process forked between a
/// scan and its kill is found by the next), without waiting for them: the
/// keeper reaps those that come to it as they go. For [`END_LEFTOVERS`].
fn end_below(me: u32, spare: u32) -> BTreeMap<u32, String> {
    let mut ended = BTreeMap::new();
    for _ in 0..1024 {
        if !kill_pass(me, Some(spare), true, &mut ended) {
            break;
        }
    }
    ended
}

/// Kills every process below the keeper and reaps them all. Returns those
/// that were still running, with their names.
fn sweep(me: u32) -> BTreeMap<u32, String> {
    let mut ended = BTreeMap::new();
    loop {
        kill_pass(me, None, false, &mut ended);
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

/// At most this many processes are named in [`Leftovers`]; the rest are
/// counted.
const NAMED: usize = 256;

/// Asks the keeper to end every process `nd7 run` left running but the
/// `nd7 run` itself, and waits for the answer: called once the agent
/// has ended, before the run's last entry. `None` outside `nd7 run`, when
/// the keeper does not serve the channel, or does not answer.
pub fn end_leftovers() -> Option<Leftovers> {
    let channel = channel().filter(|c| c.served())?;
    let conn = channel.fd.as_fd();
    rustix::net::send(conn, &[END_LEFTOVERS], SendFlags::empty()).ok()?;
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let mut ready = [rustix::event::PollFd::new(
            &conn,
            rustix::event::PollFlags::IN,
        )];
        let wait = rustix::event::Timespec {
            tv_sec: 10,
            tv_nsec: 0,
        };
        match rustix::event::poll(&mut ready, Some(&wait)) {
            Ok(0) => return None,
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return None,
        }
        let got = rustix::net::recv(conn, &mut buffer, RecvFlags::DONTWAIT)
            .ok()?
            .0;
        if got == 0 {
            return None;
        }
        if buffer[0] == ENDED {
            return serde_json::from_slice(&buffer[1..got]).ok();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (OwnedFd, OwnedFd) {
        rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )
        .expect("socketpair")
    }

    fn channel(fd: OwnedFd) -> Channel {
        Channel {
            fd,
            keeper: 0,
            answer: OnceLock::new(),
            head_start: OnceLock::new(),
            scoped: OnceLock::new(),
        }
    }

    /// A head start the socket refuses (its send buffer is smaller) still
    /// reaches `nd7 run`, empty. Guards the second write in
    /// `send_head_start`: without it nothing is sent.
    #[test]
    fn a_head_start_the_socket_refuses_goes_empty() {
        let (keeper, run) = pair();
        rustix::net::sockopt::set_socket_send_buffer_size(&keeper, 4096).expect("SO_SNDBUF");
        send_head_start(keeper.as_fd(), vec![b'x'; 64 * 1024]);
        let mut message = [0u8; 16];
        let n = rustix::net::recv(&run, &mut message, RecvFlags::DONTWAIT)
            .expect("a message came")
            .0;
        assert_eq!(&message[..n], &[HEAD_START]);

        // One that fits goes whole.
        send_head_start(keeper.as_fd(), b"places".to_vec());
        let n = rustix::net::recv(&run, &mut message, RecvFlags::DONTWAIT)
            .expect("a message came")
            .0;
        assert_eq!(&message[..n], b"Hplaces");
    }

    /// `nd7 run` reads the head start, then the answer.
    #[test]
    fn the_run_reads_the_head_start_then_the_answer() {
        let (keeper, run) = pair();
        let channel = channel(run);
        send_head_start(keeper.as_fd(), b"places".to_vec());
        rustix::io::write(&keeper, &[GO_SERVED]).expect("write");
        drop(keeper);
        assert_eq!(channel.head_start().as_deref(), Some(&b"places"[..]));
        assert!(channel.served());
        assert_eq!(channel.sockets(), Sockets::Open);
    }

    /// When the keeper's answer comes with no head start before it, the
    /// `nd7 run` takes it as the answer instead of waiting for another message.
    /// Guards the `Some((&go, []))` arm of `Channel::head_start`: without
    /// it the answer is lost (here the channel is then closed, so the
    /// `nd7 run` would say the keeper did not answer; with a live keeper it
    /// would wait for ever).
    #[test]
    fn an_answer_with_no_head_start_before_it_is_the_answer() {
        let (keeper, run) = pair();
        let channel = channel(run);
        rustix::io::write(&keeper, &[GO_SERVED | GO_SUPERVISED]).expect("write");
        drop(keeper);
        assert_eq!(channel.head_start(), None);
        assert!(channel.ready().is_ok());
        assert!(channel.served());
        assert_eq!(channel.sockets(), Sockets::Supervised);
    }
}
