//! The hooks' door on Linux: how a hook's payload reaches the session log,
//! which is read-only inside the floor. `nd7 run` listens on
//! `~/.nd7/runs/<pid>/record.sock` (0600); `nd7 record`, run by Claude
//! Code inside the floor, sends its payload there ([`send`]), and `nd7 run`
//! admits the caller as the exit does (the credentials the kernel attached
//! to the request, a descendant of this `nd7 run`, each link pinned with a
//! pidfd; not the connection's peer, which is nd7 run's keeper, since it
//! connects for every process of the run), appends the entry and only
//! then answers, so the hook returns after the entry is in the log.
//!
//! # Other callers' load cannot cost a hook its entry (ADR-0097)
//!
//! A hook (`nd7 record`) connects and writes its whole request at once.
//! One thread ([`triage`]) accepts every connection as it comes and waits,
//! for all of them together, until a connection's request is in the socket
//! whole (or its first [`WHOLE_ENOUGH`] bytes are: the socket holds no
//! more); only then does a connection get a thread. Whole requests go to
//! threads of their own ([`WHOLE_HOOKS`]), which never wait on a caller, so
//! a caller that trickles its request, or sends nothing, holds no thread a
//! hook needs: it waits among the others for at most [`TRIAGE_BUDGET`], and
//! [`MAX_WAITING`] wait at most (past that the oldest goes). A connection
//! dropped unread is written down ([`RunLog::door_dropped`]: a `refused`
//! entry and `run_end`'s `door_dropped`, which `nd7 verify` reports as
//! events that may be missing), and `nd7 record` tries again when the door
//! closed on it unanswered. A caller's identity only comes with its first
//! bytes (the connection's peer is the keeper, which connects for every
//! process of the run), and the floor can start new callers at will: so
//! the bound is on what a connection has sent, not on who sent it.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use std::os::fd::AsFd;

use super::exit::{ExitError, STACK, admit, receive_prefix, refuse, set_pass_pidfd};
use crate::floor_wire::{Frame, HookRequest, Request};
use crate::kernel::linux as proc;
use crate::run_dir::RunDir;
use crate::run_log::{HookOutcome, RunLog};

/// Hooks served at once whose request was whole when they got a thread.
/// Each append takes the log's lock in turn anyway; this bounds the
/// threads, not the throughput.
pub const WHOLE_HOOKS: usize = 12;
/// Hooks served at once whose request was larger than the socket holds.
pub const LARGE_HOOKS: usize = 4;
/// Hooks served at once, in all.
pub const MAX_HOOKS: usize = WHOLE_HOOKS + LARGE_HOOKS;

/// How long a connection may take to put its request in the socket (whole,
/// or [`WHOLE_ENOUGH`] of it) before it is dropped unread.
pub const TRIAGE_BUDGET: Duration = Duration::from_secs(2);
/// Connections waiting for their request at once; past this the oldest is
/// dropped unread.
pub const MAX_WAITING: usize = 256;
/// A request counts as sent once this much of it is in the socket (a
/// larger one cannot be whole there: the socket's buffer is smaller).
const WHOLE_ENOUGH: u64 = 32 * 1024;

/// How long a caller with a thread may take to send the rest of its
/// request (one deadline, not a timeout per read).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// `nd7 run`'s side: its door for the hooks.
pub struct Door {
    listener: UnixListener,
    run_dir: RunDir,
    log: Arc<RunLog>,
}

impl Door {
    /// Binds the run's door, readable and writable by the user alone.
    pub fn open(run_dir: &RunDir, log: Arc<RunLog>) -> Result<Door, ExitError> {
        let path = run_dir.dir.join(crate::run_dir::DOOR_SOCKET);
        let io_err = |action| {
            let path = path.clone();
            move |source| ExitError::Io {
                path,
                action,
                source,
            }
        };
        let listener = UnixListener::bind(&path).map_err(io_err("listen on"))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .map_err(io_err("restrict"))?;
        // Each request carries its sender's credentials (and a pidfd, Linux
        // 6.5), which is how callers are told apart: the connection's peer is
        // the keeper.
        rustix::net::sockopt::set_socket_passcred(&listener, true)
            .map_err(|e| io_err("set up")(e.into()))?;
        let _ = set_pass_pidfd(&listener);
        // The keeper connects the run's processes only to sockets it
        // knows to be the run's, and to this one only the floor's: the
        // program's hooks, never a command through the exit, which could
        // otherwise hold the hooks back with a flood of connections.
        super::keeper::allow_own_to_floor(listener.as_fd()).map_err(io_err("register"))?;
        Ok(Door {
            listener,
            run_dir: run_dir.clone(),
            log,
        })
    }

    /// Serves the door on threads of its own for as long as the process
    /// lives: [`triage`], and the hooks' threads it hands requests to.
    pub fn serve(self) {
        let me = std::process::id();
        let _ = std::thread::Builder::new()
            .stack_size(STACK)
            .spawn(move || {
                let mut whole = Pool::new(me, &self, WHOLE_HOOKS);
                let mut large = Pool::new(me, &self, LARGE_HOOKS);
                triage(&self.listener, &self.log, &mut whole, &mut large);
            });
    }
}

/// Connections the door has accepted and not yet finished with: waiting in
/// [`triage`], queued for a thread, or being served. [`drain`] waits for it
/// to come to 0 before the run's tally (ADR-0099).
static IN_DOOR: AtomicUsize = AtomicUsize::new(0);

/// Waits (at most `bound`) until the door has finished with every
/// connection it accepted: each is served, refused or dropped, and written
/// down, before `run_end` counts them. Called once every process of the
/// floor has ended, so no new one comes and each waiting one ends short or
/// is dropped within [`TRIAGE_BUDGET`]. Returns whether it did.
pub fn drain(bound: Duration) -> bool {
    let start = Instant::now();
    while IN_DOOR.load(Ordering::Acquire) > 0 {
        if start.elapsed() >= bound {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// How long [`drain`] waits at most. Every caller has ended by then, so a
/// waiting connection ends short (or is dropped within [`TRIAGE_BUDGET`])
/// and a thread's read meets the end at once; the bound keeps the run's
/// end well inside the keeper's 10 s for the run after its grace.
pub const DRAIN_BOUND: Duration = Duration::from_secs(5);

/// Up to `max` threads serving the connections handed to them, started as
/// they are needed (a run whose hooks come one at a time has one).
struct Pool {
    queue: Sender<UnixStream>,
    taken: Arc<Mutex<std::sync::mpsc::Receiver<UnixStream>>>,
    /// Threads waiting for a connection.
    idle: Arc<AtomicUsize>,
    started: usize,
    max: usize,
    me: u32,
    run_dir: RunDir,
    log: Arc<RunLog>,
}

impl Pool {
    fn new(me: u32, door: &Door, max: usize) -> Pool {
        let (queue, taken) = std::sync::mpsc::channel::<UnixStream>();
        Pool {
            queue,
            taken: Arc::new(Mutex::new(taken)),
            idle: Arc::new(AtomicUsize::new(0)),
            started: 0,
            max,
            me,
            run_dir: door.run_dir.clone(),
            log: door.log.clone(),
        }
    }

    /// Hands `conn` to a thread: an idle one, or a new one while fewer
    /// than `max` run; else it waits in the queue for the next free.
    fn send(&mut self, conn: UnixStream) {
        if self.idle.load(Ordering::Acquire) == 0 && self.started < self.max {
            let (taken, idle) = (self.taken.clone(), self.idle.clone());
            let (me, run_dir, log) = (self.me, self.run_dir.clone(), self.log.clone());
            let spawned = std::thread::Builder::new()
                .stack_size(STACK)
                .spawn(move || {
                    loop {
                        idle.fetch_add(1, Ordering::AcqRel);
                        let next = taken.lock().map(|q| q.recv());
                        idle.fetch_sub(1, Ordering::AcqRel);
                        let Ok(Ok(conn)) = next else {
                            return;
                        };
                        serve_one(&conn, me, &run_dir, &log);
                        drop(conn);
                        IN_DOOR.fetch_sub(1, Ordering::AcqRel);
                    }
                });
            self.started += usize::from(spawned.is_ok());
        }
        let _ = self.queue.send(conn);
    }
}

/// Whether `conn` has sent enough to get a thread: its whole request, or
/// [`WHOLE_ENOUGH`] of it, or something that will be refused at once (a
/// length over the limit, the end of the stream). `Some(true)` when it is
/// whole there, or refused at once: nothing its thread reads can wait.
fn sent(conn: &UnixStream) -> Option<bool> {
    let mut prefix = [0u8; 4];
    let peeked = rustix::net::recv(
        conn,
        &mut prefix,
        rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT,
    );
    match peeked {
        Ok((4, _)) => {}
        Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => return None,
        // The end, or an error: the thread writes it down as it reads.
        Ok((0, _)) | Err(_) => return Some(true),
        Ok(_) => return None,
    }
    let Ok(len) = Request::announced_len(prefix) else {
        return Some(true);
    };
    let queued = rustix::io::ioctl_fionread(conn).unwrap_or(0);
    if queued >= 4 + len as u64 {
        Some(true)
    } else {
        (queued >= WHOLE_ENOUGH).then_some(false)
    }
}

/// The connections waiting for their request, by number, oldest first.
#[derive(Default)]
struct Waiting {
    conns: BTreeMap<u64, (UnixStream, Instant)>,
    next: u64,
}

impl Waiting {
    /// The oldest, if it has waited [`TRIAGE_BUDGET`] (or `all`).
    fn pop_late(&mut self, all: bool) -> Option<UnixStream> {
        let (&id, (_, since)) = self.conns.iter().next()?;
        (all || since.elapsed() >= TRIAGE_BUDGET).then(|| self.conns.remove(&id).map(|c| c.0))?
    }
}

/// The listener's number in the triage's epoll; connections are numbered
/// from 1.
const LISTENER: u64 = 0;

/// Accepts every connection to the door as it comes, and hands each to a
/// hook's thread once it has sent its request ([`sent`]): whole ones to
/// `whole`, the rest to `large`. Drops (and writes down) a connection
/// that has not sent it within [`TRIAGE_BUDGET`], and the oldest waiting
/// when more than [`MAX_WAITING`] wait. Edge-triggered: a connection is
/// looked at again only when more of its request has come.
fn triage(listener: &UnixListener, log: &RunLog, whole: &mut Pool, large: &mut Pool) {
    use rustix::event::epoll::{self, CreateFlags, EventData, EventFlags};
    let Ok(poll) = epoll::create(CreateFlags::CLOEXEC) else {
        return;
    };
    if listener.set_nonblocking(true).is_err()
        || epoll::add(
            &poll,
            listener,
            EventData::new_u64(LISTENER),
            EventFlags::IN,
        )
        .is_err()
    {
        return;
    }
    let mut waiting = Waiting {
        next: LISTENER + 1,
        ..Waiting::default()
    };
    let mut events = Vec::with_capacity(64);
    loop {
        let timeout = waiting.conns.values().next().map(|(_, since)| {
            let left = (*since + TRIAGE_BUDGET).saturating_duration_since(Instant::now());
            rustix::event::Timespec {
                tv_sec: left.as_secs() as _,
                tv_nsec: left.subsec_nanos() as _,
            }
        });
        events.clear();
        match epoll::wait(
            &poll,
            rustix::buffer::spare_capacity(&mut events),
            timeout.as_ref(),
        ) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(_) => return,
        }
        for event in &events {
            let id = event.data.u64();
            if id == LISTENER {
                continue;
            }
            let Some((conn, _)) = waiting.conns.get(&id) else {
                continue;
            };
            let sent = sent(conn);
            let flags = event.flags;
            let ended = flags.intersects(EventFlags::RDHUP | EventFlags::HUP);
            if sent.is_none() && !ended {
                continue;
            }
            let (conn, _) = waiting.conns.remove(&id).expect("looked up above");
            let _ = epoll::delete(&poll, &conn);
            let _ = conn.set_nonblocking(false);
            // One that ended short is read to its end at once and refused
            // (its caller hears why): never a wait.
            match sent {
                Some(false) => large.send(conn),
                Some(true) | None => whole.send(conn),
            }
        }
        while let Some(late) = waiting.pop_late(false) {
            let _ = epoll::delete(&poll, &late);
            log.door_dropped(&format!(
                "the request was not sent within {} s; the connection was dropped unread",
                TRIAGE_BUDGET.as_secs()
            ));
            IN_DOOR.fetch_sub(1, Ordering::AcqRel);
        }
        while let Ok((conn, _)) = listener.accept() {
            IN_DOOR.fetch_add(1, Ordering::AcqRel);
            let id = waiting.next;
            waiting.next += 1;
            let _ = conn.set_nonblocking(true);
            let flags = EventFlags::IN | EventFlags::RDHUP | EventFlags::ET;
            if epoll::add(&poll, &conn, EventData::new_u64(id), flags).is_err() {
                IN_DOOR.fetch_sub(1, Ordering::AcqRel);
                continue;
            }
            // Its request may be in already; the edge came before `add`.
            if let Some(is_whole) = sent(&conn) {
                let _ = epoll::delete(&poll, &conn);
                let _ = conn.set_nonblocking(false);
                if is_whole {
                    whole.send(conn)
                } else {
                    large.send(conn)
                }
                continue;
            }
            waiting.conns.insert(id, (conn, Instant::now()));
            if waiting.conns.len() > MAX_WAITING
                && let Some(oldest) = waiting.pop_late(true)
            {
                let _ = epoll::delete(&poll, &oldest);
                log.door_dropped(&format!(
                    "more than {MAX_WAITING} connections waited for their request at once; the oldest was dropped unread"
                ));
                IN_DOOR.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

fn serve_one(conn: &UnixStream, me: u32, run_dir: &RunDir, log: &RunLog) {
    // One deadline for the whole request, not a timeout per read: a peer
    // trickling a byte at a time would otherwise hold its thread for as long
    // as it liked, and MAX_HOOKS of them would stall every hook behind them.
    let deadline = Instant::now() + REQUEST_TIMEOUT;
    let _ = conn.set_read_timeout(Some(REQUEST_TIMEOUT));
    // The request first: the credentials that name its sender come with it.
    let (caller, request) = receive(conn, deadline);
    let who = (caller.pid, caller.uid);
    let request = match request {
        Ok(request) => request,
        Err(why) => return refuse(conn, log, "record", who, why),
    };
    let caller = match admit(caller, me) {
        Ok(admitted) => admitted.pid,
        Err(why) => return refuse(conn, log, "record", who, why),
    };
    if request.explain {
        let frame = match run_dir.record() {
            Ok(record) => match crate::refusals::explain(
                &request.body,
                &record.policy,
                log,
                super::ns::outside_root(),
            ) {
                Ok(Some(text)) => Frame::Explained(text),
                Ok(None) => Frame::Skipped,
                Err(e) => Frame::Refused(e.to_string()),
            },
            Err(e) => Frame::Refused(e.to_string()),
        };
        let _ = (&*conn).write_all(&frame.encode());
        return;
    }
    // The recorder's parent, as the kernel has it: Claude Code itself for an
    // exec-form hook.
    let hook_ppid = proc::stat(caller).map(|s| s.ppid);
    let frame = match log.hook(&request, hook_ppid) {
        Ok(HookOutcome::Recorded(_)) => Frame::Recorded,
        Ok(HookOutcome::Skipped) => Frame::Skipped,
        Ok(HookOutcome::OverBudget(why)) => Frame::Refused(why),
        Err(e) => Frame::Refused(e.to_string()),
    };
    let _ = (&*conn).write_all(&frame.encode());
}

/// Reads one hook request, and who sent it as the kernel attached it.
fn receive(
    conn: &UnixStream,
    deadline: Instant,
) -> (super::exit::Caller, Result<HookRequest, String>) {
    let (caller, got) = receive_prefix(conn);
    let read = || {
        // Descriptors sent along are closed unread.
        let (prefix, _fds) = got?;
        let len = Request::announced_len(prefix).map_err(|e| e.to_string())?;
        let mut body = vec![0u8; len];
        read_by(conn, &mut body, deadline)?;
        HookRequest::decode(&body).map_err(|e| e.to_string())
    };
    let request = read();
    (caller, request)
}

/// Fills `buf` from `conn`, failing once `deadline` has passed.
fn read_by(mut conn: &UnixStream, buf: &mut [u8], deadline: Instant) -> Result<(), String> {
    let late = || {
        format!(
            "the request was not sent within {} s",
            REQUEST_TIMEOUT.as_secs()
        )
    };
    let mut at = 0;
    while at < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(late());
        }
        conn.set_read_timeout(Some(left))
            .map_err(|e| format!("cannot read the request: {e}"))?;
        match conn.read(&mut buf[at..]) {
            Ok(0) => return Err("the request ended early".into()),
            Ok(n) => at += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(late());
            }
            Err(e) => return Err(format!("cannot read the request: {e}")),
        }
    }
    Ok(())
}

/// How long a hook waits for `nd7 run` to take its request and answer. The
/// answer comes once the entry is appended, behind at most the hooks queued
/// before it; a `nd7 run` that is stopped (SIGSTOP from inside, a debugger)
/// would otherwise keep the hook, and Claude Code with it, waiting for good.
/// Below Claude Code's own hook timeout (60 s), so the hook says why.
pub const DOOR_ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// How `nd7 run` answered a hook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    Recorded,
    Skipped,
    /// For `nd7 hook-explain`: what to tell the model.
    Explained(String),
}

/// The `nd7 record` side: sends `request` to the door at `socket`, which
/// must be served by process `server` (the kernel says who listens on it),
/// and waits for the answer, which comes once the entry is in the log.
pub fn send(socket: &Path, server: u32, request: &HookRequest) -> Result<Answer, String> {
    let mut tries = 0;
    loop {
        tries += 1;
        match send_once(socket, server, request) {
            Err(Sent::Unanswered(_)) if tries < SEND_TRIES => continue,
            Err(Sent::Unanswered(why) | Sent::Failed(why)) => return Err(why),
            Ok(answer) => return Ok(answer),
        }
    }
}

/// How often `nd7 record` sends its request when the door closes on it
/// unanswered (it dropped the connection unread, ADR-0097).
const SEND_TRIES: usize = 3;

/// Why one try of [`send`] failed.
enum Sent {
    /// The door closed the connection without answering: nothing of the
    /// request was taken, so it may be sent again.
    Unanswered(String),
    Failed(String),
}

fn send_once(socket: &Path, server: u32, request: &HookRequest) -> Result<Answer, Sent> {
    let fail = Sent::Failed;
    let mut conn = UnixStream::connect(socket)
        .map_err(|e| fail(format!("cannot reach nd7 run at {}: {e}", socket.display())))?;
    let listener = rustix::net::sockopt::socket_peercred(&conn)
        .map(|c| c.pid.as_raw_nonzero().get() as u32)
        .map_err(|e| fail(format!("cannot tell who serves {}: {e}", socket.display())))?;
    if listener != server {
        return Err(fail(format!(
            "{} is served by process {listener}, not by nd7 run {server}",
            socket.display()
        )));
    }
    let _ = conn.set_write_timeout(Some(DOOR_ANSWER_TIMEOUT));
    let _ = conn.set_read_timeout(Some(DOOR_ANSWER_TIMEOUT));
    let timed_out = |e: &std::io::Error| {
        matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        )
    };
    let silent = || {
        format!(
            "nd7 run {server} did not answer within {} s (stopped, or its door overwhelmed)",
            DOOR_ANSWER_TIMEOUT.as_secs()
        )
    };
    let sent = conn.write_all(&request.encode());
    if sent.as_ref().is_err_and(timed_out) {
        return Err(fail(silent()));
    }
    let mut head = [0u8; 5];
    if let Err(e) = conn.read_exact(&mut head) {
        return Err(match sent {
            Err(s) => Sent::Unanswered(format!("cannot send the payload to nd7 run: {s}")),
            Ok(()) if timed_out(&e) => fail(silent()),
            Ok(()) => Sent::Unanswered(format!("nd7 run closed the door before answering: {e}")),
        });
    }
    match Frame::decode(head) {
        Ok(Ok(Frame::Recorded)) => Ok(Answer::Recorded),
        Ok(Ok(Frame::Skipped)) => Ok(Answer::Skipped),
        Ok(Err(len)) => {
            let mut text = vec![0u8; len];
            let _ = conn.read_exact(&mut text);
            match Frame::text(head[0], &text) {
                Frame::Refused(why) => Err(fail(format!("nd7 run refused the entry: {why}"))),
                Frame::Explained(text) => Ok(Answer::Explained(text)),
                _ => Err(fail("nd7 run answered with an unknown frame".into())),
            }
        }
        _ => Err(fail("nd7 run answered with an unknown frame".into())),
    }
}
