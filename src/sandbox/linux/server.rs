//! One shape for `nd7 run`'s two servers, the exit (commands) and the door
//! (hooks): a Unix socket of the user's alone that the keeper lets the
//! session's processes reach, connections accepted on a thread of their
//! own and bounded, each caller's whole request read with the credentials
//! the kernel attached to it, the caller admitted (`super::admit`) or
//! refused and written down, and only then the request handed to the
//! server's [`Handler`]. What is each server's own is its handler: the
//! exit starts a command, the door appends an entry.
//!
//! # Two bounds
//!
//! - [`Bound::Threads`] (the exit): a thread per connection, at most `max`
//!   at once; a caller beyond them is refused at once, before its request
//!   is read (a confined agent could otherwise start threads of the
//!   unconfined `nd7 run` without bound). A thread that has answered its
//!   connection waits for the next, while [`SPARE`] wait (ADR-0152).
//! - [`Bound::Triage`] (the door, ADR-0097): one thread accepts every
//!   connection as it comes and waits, for all of them together, until a
//!   connection's request is in the socket whole (or its first
//!   [`WHOLE_ENOUGH`] bytes are: the socket holds no more); only then does
//!   a connection get a thread. Whole requests go to threads of their own
//!   ([`WHOLE_HOOKS`]), which never wait on a caller, so a caller that
//!   trickles its request, or sends nothing, holds no thread a hook needs:
//!   it waits among the others for at most [`TRIAGE_BUDGET`], and
//!   [`MAX_WAITING`] wait at most (past that the oldest goes). A connection
//!   dropped unread is written down ([`RunLog::door_dropped`]). A caller's
//!   identity only comes with its first bytes (the connection's peer is the
//!   keeper), and the floor can start new callers at will: so the bound is
//!   on what a connection has sent, not on who sent it. [`settled`] waits
//!   until every connection it accepted is finished with (ADR-0099).

use std::collections::BTreeMap;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::admit::{Admitted, admit, receive_prefix, refuse, set_pass_pidfd};
use crate::floor_wire::Request;
use crate::run_log::RunLog;

/// Threads of the exit and the door do little but wait and relay.
pub(super) const STACK: usize = 256 * 1024;

/// Why a server could not be opened, or the exit used.
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

/// Binds a server's socket at `path`, readable and writable by the user
/// alone, and tells the keeper about it (`register`: which of the
/// session's processes it may connect).
pub(super) fn bind(
    path: &Path,
    register: fn(BorrowedFd<'_>) -> io::Result<()>,
) -> Result<UnixListener, ExitError> {
    let io_err = |action| {
        move |source| ExitError::Io {
            path: path.to_path_buf(),
            action,
            source,
        }
    };
    let listener = UnixListener::bind(path).map_err(io_err("listen on"))?;
    // The directory is already 0700; the socket's own mode says the same.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(io_err("restrict"))?;
    // Every message then carries its sender's credentials, and a pidfd
    // where the kernel can (Linux 6.5); accepted connections inherit both.
    // That is how callers are told apart: the connection's peer is the
    // keeper, which connects for every process of the session.
    rustix::net::sockopt::set_socket_passcred(&listener, true)
        .map_err(|e| io_err("set up")(e.into()))?;
    let _ = set_pass_pidfd(&listener);
    register(listener.as_fd()).map_err(io_err("register"))?;
    Ok(listener)
}

/// What a server does with a request once it is whole and its caller
/// admitted.
pub(super) trait Handler: Send + Sync + 'static {
    /// The server's name in the log's `refused` entries.
    const NAME: &'static str;
    /// The descriptors a request must carry.
    type Fds;
    /// The request, decoded.
    type Request;
    /// The log refusals and drops are written into.
    fn log(&self) -> &RunLog;
    /// The descriptors that came with the request, checked before its body
    /// is read.
    fn fds(fds: Vec<OwnedFd>) -> Result<Self::Fds, String>;
    /// Decodes the request's body.
    fn decode(body: &[u8]) -> Result<Self::Request, String>;
    /// Answers an admitted caller on `conn`.
    fn handle(&self, conn: &UnixStream, caller: Admitted, request: Self::Request, fds: Self::Fds);
}

/// How a server bounds the connections it serves.
pub(super) enum Bound {
    /// A thread per connection, at most `max` at once; one beyond them is
    /// refused at once with `busy`.
    Threads { max: usize, busy: String },
    /// The door's triage (ADR-0097): threads only for requests already sent.
    Triage,
}

/// Serves `listener` with `handler` on threads of their own for as long as
/// the process lives. Connections made before it is called wait in the
/// socket's queue.
pub(super) fn serve<H: Handler>(listener: UnixListener, handler: H, bound: Bound) {
    let me = std::process::id();
    let handler = Arc::new(handler);
    match bound {
        Bound::Threads { max, busy } => {
            std::thread::spawn(move || each_on_a_thread(&listener, me, &handler, max, &busy));
        }
        Bound::Triage => {
            let _ = std::thread::Builder::new()
                .stack_size(STACK)
                .spawn(move || {
                    let mut whole = Pool::new(me, &handler, WHOLE_HOOKS);
                    let mut large = Pool::new(me, &handler, LARGE_HOOKS);
                    triage(&listener, handler.log(), &mut whole, &mut large);
                });
        }
    }
}

/// How long a caller with a thread may take to send the rest of its
/// request (one deadline, not a timeout per read): a caller that stalls is
/// dropped rather than holding a thread for the rest of the session.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Reads `conn`'s request, admits its caller (or refuses it, written down)
/// and hands the request to `handler`.
fn serve_one<H: Handler>(conn: &UnixStream, me: u32, handler: &H) {
    // One deadline for the whole request, not a timeout per read: a peer
    // trickling a byte at a time would otherwise hold its thread for as long
    // as it liked.
    let deadline = Instant::now() + REQUEST_TIMEOUT;
    let _ = conn.set_read_timeout(Some(REQUEST_TIMEOUT));
    // The request first: the credentials that name its sender come with it.
    let (caller, received) = receive_prefix(conn);
    let read = || {
        let (prefix, fds) = received?;
        let fds = H::fds(fds)?;
        let len = Request::announced_len(prefix).map_err(|e| e.to_string())?;
        let mut body = vec![0u8; len];
        read_by(conn, &mut body, deadline)?;
        Ok::<_, String>((H::decode(&body)?, fds))
    };
    let read = read();
    let _ = conn.set_read_timeout(None);
    let who = (caller.pid, caller.uid);
    let (request, fds) = match read {
        Ok(got) => got,
        Err(why) => return refuse(conn, handler.log(), H::NAME, who, why),
    };
    match admit(caller, me) {
        Ok(admitted) => handler.handle(conn, admitted, request, fds),
        Err(why) => refuse(conn, handler.log(), H::NAME, who, why),
    }
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

/// [`Bound::Threads`]: accepts each connection and serves it on a thread of
/// its own while fewer than `max` are served; refuses it at once otherwise.
/// A thread that has served a connection waits for the next one, while
/// fewer than [`SPARE`] wait: each connection still has a thread to itself
/// from its request to its answer (a command's nested `nd7-exec` never
/// waits for it), and starting a thread per command cost it a `clone3`,
/// the thread's setup and end, and two stops of the exec observer
/// (ADR-0152).
fn each_on_a_thread<H: Handler>(
    listener: &UnixListener,
    me: u32,
    handler: &Arc<H>,
    max: usize,
    busy: &str,
) {
    let slots = Arc::new(Slots::default());
    let spare = Arc::new(Spare::default());
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let Some(slot) = Slots::try_take(&slots, max) else {
            // Refused before its request is read, so named by the
            // connection's peer, where that is not the keeper.
            refuse(&conn, handler.log(), H::NAME, peer(&conn), busy.into());
            continue;
        };
        // A waiting thread, taken off the list: no other connection can be
        // handed to it. One that has gone gives the connection back.
        let work = match spare.take() {
            Some(thread) => match thread.send((conn, slot)) {
                Ok(()) => continue,
                Err(std::sync::mpsc::SendError(work)) => work,
            },
            None => (conn, slot),
        };
        let (handler, spare) = (handler.clone(), spare.clone());
        let spawned = std::thread::Builder::new()
            .stack_size(STACK)
            .spawn(move || serve_on(work, me, &*handler, &spare));
        // Out of threads: the connection was dropped with the closure
        // and its caller sees the server close; nothing ran.
        drop(spawned);
    }
}

/// A connection for a thread, with the slot it holds while it is served.
type Work = (UnixStream, Slot);

/// Threads waiting for a connection after serving one, at most this many;
/// one more ends.
const SPARE: usize = 4;

/// The threads waiting for a connection: each one's own channel.
#[derive(Default)]
struct Spare {
    waiting: Mutex<Vec<Sender<Work>>>,
}

impl Spare {
    /// A waiting thread, no longer listed as waiting.
    fn take(&self) -> Option<Sender<Work>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }

    /// Lists a thread as waiting on `channel`, unless [`SPARE`] already
    /// are. Returns whether it was listed.
    fn offer(&self, channel: Sender<Work>) -> bool {
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        (waiting.len() < SPARE)
            .then(|| waiting.push(channel))
            .is_some()
    }
}

/// Serves `work`, then each connection handed to this thread while it is
/// listed as waiting in `spare`; ends when it cannot be listed.
fn serve_on<H: Handler>(work: Work, me: u32, handler: &H, spare: &Spare) {
    let (channel, next) = std::sync::mpsc::channel::<Work>();
    let mut work = work;
    loop {
        let (conn, slot) = work;
        serve_one(&conn, me, handler);
        // The caller sees the end of the exchange, and the slot is free,
        // before this thread waits.
        drop(conn);
        drop(slot);
        if !spare.offer(channel.clone()) {
            return;
        }
        match next.recv() {
            Ok(got) => work = got,
            Err(_) => return,
        }
    }
}

/// Who is on the other end of `conn`, as far as its peer credentials tell:
/// nobody known when the peer is nd7 run's keeper, which connects for every
/// process of the session (only a request's own credentials name its sender).
fn peer(conn: &UnixStream) -> (Option<u32>, Option<u32>) {
    match rustix::net::sockopt::socket_peercred(conn) {
        Ok(c) if Some(c.pid.as_raw_nonzero().get() as u32) != super::keeper::keeper_pid() => (
            Some(c.pid.as_raw_nonzero().get() as u32),
            Some(c.uid.as_raw()),
        ),
        _ => (None, None),
    }
}

/// A bound on the connections served at once: a slot is taken before a
/// connection is served and given back when its thread ends.
#[derive(Debug, Default)]
struct Slots {
    taken: Mutex<usize>,
}

/// A taken slot, given back when dropped.
struct Slot(Arc<Slots>);

impl Slots {
    /// A slot if one of `max` is free now.
    fn try_take(slots: &Arc<Slots>, max: usize) -> Option<Slot> {
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

/// Requests served at once by the triage whose request was whole when they
/// got a thread. Each append takes the log's lock in turn anyway; this
/// bounds the threads, not the throughput.
pub const WHOLE_HOOKS: usize = 12;
/// Requests served at once by the triage whose request was larger than the
/// socket holds.
pub const LARGE_HOOKS: usize = 4;
/// Requests served at once by the triage, in all.
pub const MAX_HOOKS: usize = WHOLE_HOOKS + LARGE_HOOKS;

/// How long a connection may take to put its request in the socket (whole,
/// or [`WHOLE_ENOUGH`] of it) before the triage drops it unread.
pub const TRIAGE_BUDGET: Duration = Duration::from_secs(2);
/// Connections waiting for their request at once; past this the oldest is
/// dropped unread.
pub const MAX_WAITING: usize = 256;
/// A request counts as sent once this much of it is in the socket (a
/// larger one cannot be whole there: the socket's buffer is smaller).
const WHOLE_ENOUGH: u64 = 32 * 1024;

/// Connections the triage has accepted and not yet finished with: waiting,
/// queued for a thread, or being served. [`settled`] waits for it to come
/// to 0 (ADR-0099).
static IN_TRIAGE: AtomicUsize = AtomicUsize::new(0);

/// Waits (at most `bound`) until the triage has finished with every
/// connection it accepted: each is served, refused or dropped, and written
/// down. Returns whether it did.
pub(super) fn settled(bound: Duration) -> bool {
    let start = Instant::now();
    while IN_TRIAGE.load(Ordering::Acquire) > 0 {
        if start.elapsed() >= bound {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// Up to `max` threads serving the connections handed to them, started as
/// they are needed (a run whose hooks come one at a time has one).
struct Pool<H> {
    queue: Sender<UnixStream>,
    taken: Arc<Mutex<std::sync::mpsc::Receiver<UnixStream>>>,
    /// Threads waiting for a connection.
    idle: Arc<AtomicUsize>,
    started: usize,
    max: usize,
    me: u32,
    handler: Arc<H>,
}

impl<H: Handler> Pool<H> {
    fn new(me: u32, handler: &Arc<H>, max: usize) -> Pool<H> {
        let (queue, taken) = std::sync::mpsc::channel::<UnixStream>();
        Pool {
            queue,
            taken: Arc::new(Mutex::new(taken)),
            idle: Arc::new(AtomicUsize::new(0)),
            started: 0,
            max,
            me,
            handler: handler.clone(),
        }
    }

    /// Hands `conn` to a thread: an idle one, or a new one while fewer
    /// than `max` run; else it waits in the queue for the next free.
    fn send(&mut self, conn: UnixStream) {
        if self.idle.load(Ordering::Acquire) == 0 && self.started < self.max {
            let (taken, idle) = (self.taken.clone(), self.idle.clone());
            let (me, handler) = (self.me, self.handler.clone());
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
                        serve_one(&conn, me, &*handler);
                        drop(conn);
                        IN_TRIAGE.fetch_sub(1, Ordering::AcqRel);
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

/// [`Bound::Triage`]: accepts every connection as it comes, and hands each
/// to a thread once it has sent its request ([`sent`]): whole ones to
/// `whole`, the rest to `large`. Drops (and writes down) a connection
/// that has not sent it within [`TRIAGE_BUDGET`], and the oldest waiting
/// when more than [`MAX_WAITING`] wait. Edge-triggered: a connection is
/// looked at again only when more of its request has come.
fn triage<H: Handler>(
    listener: &UnixListener,
    log: &RunLog,
    whole: &mut Pool<H>,
    large: &mut Pool<H>,
) {
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
            IN_TRIAGE.fetch_sub(1, Ordering::AcqRel);
        }
        while let Ok((conn, _)) = listener.accept() {
            IN_TRIAGE.fetch_add(1, Ordering::AcqRel);
            let id = waiting.next;
            waiting.next += 1;
            let _ = conn.set_nonblocking(true);
            let flags = EventFlags::IN | EventFlags::RDHUP | EventFlags::ET;
            if epoll::add(&poll, &conn, EventData::new_u64(id), flags).is_err() {
                IN_TRIAGE.fetch_sub(1, Ordering::AcqRel);
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
                IN_TRIAGE.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}
