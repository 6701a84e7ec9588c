//! The exec observer (ADR-0110): `nd7 run`'s front traces the keeper and
//! everything below it, and reads what each exec started after the exec.
//!
//! The front seizes the keeper with `PTRACE_SEIZE` before the keeper does
//! anything (the keeper waits on [`Pipes`] for it), with
//! `PTRACE_O_TRACEFORK`, `TRACEVFORK` and `TRACECLONE`, so the kernel
//! attaches every process and thread of the run to the front as it is
//! made, and `TRACEEXEC`, so each exec stops the process once the new image
//! is in place and before any of its code runs. Held there, the process has
//! one thread and a fresh memory: its executable (`/proc/PID/exe`, its
//! device, inode and BLAKE3), arguments and working directory are what the
//! kernel runs, whatever a racing thread did to `execve`'s arguments
//! (issue 32, item 2). Nothing is read at the call itself.
//!
//! Every process below `nd7 run` (the agent and each command) is traced with
//! `PTRACE_O_EXITKILL`: should the front die, they are killed, so nothing
//! below `nd7 run` runs on unobserved. The keeper and `nd7 run` itself are
//! not: they end the run and write `run_end`. The seccomp filter refuses
//! `ptrace` and `process_vm_writev` below, so nothing there can detach the
//! observer, trace another process, or write into a held one (ADR-0112).
//!
//! The front writes one [`Note`] line per exec into a pipe that only
//! `nd7 run` reads ([`Feed`]); past [`BOUND`] bytes not yet taken, an exec
//! is killed at its stop rather than run unrecorded, and counted
//! ([`Note::Lost`]).

use std::collections::{HashMap, HashSet};
use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::sync::{Mutex, OnceLock};

use crate::effect::{Exe, Note, Seen};

const PTRACE_SEIZE: libc::c_long = 0x4206;
const PTRACE_CONT: libc::c_long = 7;
const PTRACE_SETOPTIONS: libc::c_long = 0x4200;
const PTRACE_GETEVENTMSG: libc::c_long = 0x4201;
const PTRACE_LISTEN: libc::c_long = 0x4208;
const O_TRACEFORK: libc::c_long = 0x02;
const O_TRACEVFORK: libc::c_long = 0x04;
const O_TRACECLONE: libc::c_long = 0x08;
const O_TRACEEXEC: libc::c_long = 0x10;
const O_EXITKILL: libc::c_long = 0x10_0000;
const EVENT_FORK: i32 = 1;
const EVENT_VFORK: i32 = 2;
const EVENT_CLONE: i32 = 3;
const EVENT_EXEC: i32 = 4;
const EVENT_STOP: i32 = 128;

/// Options of the keeper and `nd7 run`, which must outlive the front.
const OUTER: libc::c_long = O_TRACEFORK | O_TRACEVFORK | O_TRACECLONE | O_TRACEEXEC;
/// Options of everything below `nd7 run`.
const INNER: libc::c_long = OUTER | O_EXITKILL;

/// The bytes of notes the front holds that `nd7 run` has not taken; past
/// it, an exec is killed at its stop ([`Note::Lost`]).
pub const BOUND: usize = 4 << 20;
/// [`BOUND`] under the [`SMALL_QUEUE`] fault.
const SMALL_BOUND: usize = 1;
/// The fault (tests of the bound): a bound of one byte, a pipe of one page,
/// and `nd7 run` reading nothing until the run's end, as if it had fallen
/// behind.
const SMALL_QUEUE: &str = "small-effects-queue";
/// How long the front waits for room in the pipe between looks at its
/// tracees, while notes wait.
const ROOM_WAIT_MS: i64 = 10;

/// The pipes between the front, the keeper and `nd7 run`, made before the
/// keeper is forked.
pub struct Pipes {
    feed: (OwnedFd, OwnedFd),
    go: (OwnedFd, OwnedFd),
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = io::pipe()?;
    Ok((r.into(), w.into()))
}

impl Pipes {
    pub fn new() -> io::Result<Pipes> {
        Ok(Pipes {
            feed: pipe()?,
            go: pipe()?,
        })
    }
}

/// The feed's read end, in the keeper and `nd7 run`, when execs are
/// observed.
static FEED: Mutex<Option<OwnedFd>> = Mutex::new(None);
/// Whether the front observes this run, set by [`keeper_side`].
static OBSERVED: OnceLock<bool> = OnceLock::new();

/// In the keeper, first thing: waits until the front has seized it (or
/// given up), and keeps the feed's read end for `nd7 run`.
pub fn keeper_side(pipes: Pipes) {
    let Pipes { feed, go } = pipes;
    drop((feed.1, go.1));
    let mut answer = [0u8; 1];
    let observed = loop {
        match rustix::io::read(&go.0, &mut answer) {
            Ok(1) => break answer[0] == b'y',
            Err(rustix::io::Errno::INTR) => continue,
            _ => break false,
        }
    };
    let _ = OBSERVED.set(observed);
    if observed && let Ok(mut f) = FEED.lock() {
        *f = Some(feed.0);
    }
}

/// Whether this run's execs are observed (in the keeper and `nd7 run`).
pub fn observed() -> bool {
    OBSERVED.get().copied().unwrap_or(false)
}

/// Why execs are not observed, when they are not.
pub fn not_observed_why() -> Option<&'static str> {
    (!observed()).then_some(
        "the kernel refused nd7 run's front tracing the run (kernel.yama.ptrace_scope 2 or 3, or a container's seccomp profile)",
    )
}

/// Takes the feed's read end: in `nd7 run`, to read it; in the keeper once
/// `nd7 run` is forked, to close it, so the front's writes fail once
/// `nd7 run` is gone.
pub fn take_feed() -> Option<OwnedFd> {
    FEED.lock().ok().and_then(|mut f| f.take())
}

fn ptrace(request: libc::c_long, pid: i32, data: libc::c_long) -> io::Result<libc::c_long> {
    // SAFETY: every request made here takes a pid and an integer (or, for
    // PTRACE_GETEVENTMSG, a pointer to an unsigned long the caller owns).
    let r = unsafe { libc::syscall(libc::SYS_ptrace, request, pid, 0 as libc::c_long, data) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn event_msg(pid: i32) -> Option<u32> {
    let mut msg: libc::c_ulong = 0;
    ptrace(
        PTRACE_GETEVENTMSG,
        pid,
        &mut msg as *mut libc::c_ulong as libc::c_long,
    )
    .ok()
    .map(|_| msg as u32)
}

/// In the front, once the keeper is forked: seizes it and tells it so.
/// Returns the feed's write end when the keeper is observed.
pub fn front_side(pipes: Pipes, keeper: i32) -> Option<OwnedFd> {
    let Pipes { feed, go } = pipes;
    drop((feed.0, go.0));
    let seized =
        !crate::fault::injected("no-ptrace") && ptrace(PTRACE_SEIZE, keeper, OUTER).is_ok();
    let _ = rustix::io::write(&go.1, if seized { b"y" } else { b"n" });
    if !seized {
        return None;
    }
    let feed = feed.1;
    // A session process gone (killed from inside) closes the pipe: the
    // front's writes then fail with EPIPE, and the front lives on to return
    // the keeper's status.
    // SAFETY: installs no function, only the ignore disposition.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    let _ = rustix::fs::fcntl_setfl(&feed, rustix::fs::OFlags::NONBLOCK);
    let size = if crate::fault::injected(SMALL_QUEUE) {
        4096
    } else {
        1 << 20
    };
    // SAFETY: F_SETPIPE_SZ takes an int; a refusal keeps the default size.
    unsafe { libc::fcntl(feed.as_raw_fd(), libc::F_SETPIPE_SZ, size) };
    Some(feed)
}

/// What the front knows of one traced thread.
#[derive(Clone, Copy)]
struct Task {
    tgid: u32,
    /// The process that forked its process.
    parent: u32,
    /// The child of `nd7 run` it descends from.
    root: Option<u32>,
    /// That child's number ([`Seen::root_number`]).
    root_number: u64,
    /// Whether it has had its first stop (its options are set).
    running: bool,
    /// Whether its process has exec'd under observation.
    execd: bool,
}

/// The front's tracer: one thread, one `waitpid` loop.
struct Tracer {
    keeper: u32,
    /// `nd7 run`: the keeper's first child.
    run: Option<u32>,
    tasks: HashMap<u32, Task>,
    /// Children of `nd7 run` made so far.
    roots: u64,
    /// Threads that stopped before their creator's event named them.
    parked: HashSet<u32>,
    hashes: HashMap<(u64, u64, i64, i64, u64), Option<String>>,
    out: Vec<u8>,
    feed: OwnedFd,
    bound: usize,
    lost: u64,
}

/// The front's life when it observes: traces, passes on the signals a
/// process sent it (on a thread of its own), and returns the keeper's
/// status once it has ended.
pub fn observe(keeper: i32, feed: OwnedFd, signals: &nix::sys::signal::SigSet) -> i32 {
    let forward = *signals;
    std::thread::spawn(move || pass_on(keeper, forward));
    let mut tracer = Tracer {
        keeper: keeper as u32,
        run: None,
        tasks: HashMap::new(),
        roots: 0,
        parked: HashSet::new(),
        hashes: HashMap::new(),
        out: Vec::new(),
        feed,
        bound: if crate::fault::injected(SMALL_QUEUE) {
            SMALL_BOUND
        } else {
            BOUND
        },
        lost: 0,
    };
    tracer.tasks.insert(
        keeper as u32,
        Task {
            tgid: keeper as u32,
            parent: std::process::id(),
            root: None,
            root_number: 0,
            running: true,
            execd: false,
        },
    );
    tracer.run_loop()
}

/// Passes on to the keeper each signal a process sent the front.
fn pass_on(keeper: i32, signals: nix::sys::signal::SigSet) {
    let mut set = signals;
    set.remove(nix::sys::signal::Signal::SIGCHLD);
    loop {
        // SAFETY: siginfo_t is plain data, filled by sigwaitinfo.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waits for one of `set`, blocked in every thread, into `info`.
        let sig = unsafe { libc::sigwaitinfo(set.as_ref(), &mut info) };
        if sig > 0 && info.si_code != libc::SI_KERNEL {
            // SAFETY: kill takes a pid and a signal.
            unsafe { libc::kill(keeper, sig) };
        }
    }
}

impl Tracer {
    fn run_loop(&mut self) -> i32 {
        loop {
            let mut status = 0;
            // While notes wait for room in the pipe, the wait does not
            // block: the pipe is watched too.
            let flags = if self.out.is_empty() {
                libc::__WALL
            } else {
                libc::__WALL | libc::WNOHANG
            };
            // SAFETY: waits for any traced task or child into `status`.
            let pid = unsafe { libc::waitpid(-1, &mut status, flags) };
            if pid == 0 {
                self.wait_for_room();
                self.flush();
                continue;
            }
            if pid < 0 {
                match io::Error::last_os_error().raw_os_error() {
                    Some(libc::EINTR) => continue,
                    _ => return 255,
                }
            }
            let pid = pid as u32;
            if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
                if pid == self.keeper {
                    self.flush_all();
                    return if libc::WIFEXITED(status) {
                        libc::WEXITSTATUS(status)
                    } else {
                        128 + libc::WTERMSIG(status)
                    };
                }
                self.ended(pid, status);
            } else if libc::WIFSTOPPED(status) {
                self.stopped(pid, status);
            }
            self.flush();
        }
    }

    fn ended(&mut self, pid: u32, status: i32) {
        self.parked.remove(&pid);
        if let Some(task) = self.tasks.remove(&pid)
            && task.execd
            && task.tgid == pid
        {
            let status = if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else {
                -libc::WTERMSIG(status)
            };
            self.send(&Note::Exit { pid, status });
        }
    }

    fn stopped(&mut self, pid: u32, status: i32) {
        let event = status >> 16;
        let sig = libc::WSTOPSIG(status);
        match event {
            EVENT_FORK | EVENT_VFORK | EVENT_CLONE => {
                if let Some(child) = event_msg(pid as i32) {
                    self.born(pid, child, event);
                }
                cont(pid, 0);
            }
            EVENT_EXEC => self.execd(pid),
            EVENT_STOP => match self.tasks.get(&pid) {
                Some(t) if t.running => {
                    if is_stop_signal(sig) {
                        // The terminal's Ctrl-Z: stay stopped without being
                        // held in a ptrace stop.
                        let _ = ptrace(PTRACE_LISTEN, pid as i32, 0);
                    } else {
                        // A SIGCONT's notice to a seized task: on its way.
                        cont(pid, 0);
                    }
                }
                Some(_) => self.start(pid),
                None => {
                    self.parked.insert(pid);
                }
            },
            _ => cont(pid, sig),
        }
    }

    /// `parent` made `child` (a process, or a thread for `EVENT_CLONE`).
    fn born(&mut self, parent: u32, child: u32, event: i32) {
        let Some(&p) = self.tasks.get(&parent) else {
            return;
        };
        let tgid = if event == EVENT_CLONE {
            tgid_of(child).unwrap_or(child)
        } else {
            child
        };
        let thread = tgid == p.tgid;
        let (root, root_number) = if thread {
            (p.root, p.root_number)
        } else if p.tgid == self.keeper && self.run.is_none() {
            self.run = Some(child);
            (None, 0)
        } else if Some(p.tgid) == self.run {
            self.roots += 1;
            (Some(child), self.roots)
        } else {
            (p.root, p.root_number)
        };
        let parent = if thread { p.parent } else { p.tgid };
        self.tasks.insert(
            child,
            Task {
                tgid,
                parent,
                root,
                root_number,
                running: false,
                execd: p.execd && thread,
            },
        );
        if self.parked.remove(&child) {
            self.start(child);
        }
    }

    /// A new task's first stop: its options, then on its way.
    fn start(&mut self, pid: u32) {
        if let Some(task) = self.tasks.get_mut(&pid) {
            task.running = true;
            let options = if task.root.is_some() { INNER } else { OUTER };
            let _ = ptrace(PTRACE_SETOPTIONS, pid as i32, options);
        }
        cont(pid, 0);
    }

    /// `pid` has exec'd: read what runs now, then let it run (or, past the
    /// bound, kill it).
    fn execd(&mut self, pid: u32) {
        if let Some(former) = event_msg(pid as i32)
            && former != pid
            && let Some(t) = self.tasks.remove(&former)
        {
            self.tasks.entry(pid).or_insert(t);
        }
        let task = self.tasks.get(&pid).copied().unwrap_or(Task {
            tgid: pid,
            parent: 0,
            root: None,
            root_number: 0,
            running: true,
            execd: false,
        });
        if self.out.len() >= self.bound {
            // SAFETY: kill takes a pid and a signal; the process is held
            // at its exec, so none of the new program has run.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            self.lost += 1;
            cont(pid, 0);
            return;
        }
        let seen = self.seen(pid, &task);
        if let Some(t) = self.tasks.get_mut(&pid) {
            t.execd = true;
            t.tgid = pid;
        }
        self.send(&Note::Exec(seen));
        cont(pid, 0);
    }

    fn seen(&mut self, pid: u32, task: &Task) -> Seen {
        let proc = format!("/proc/{pid}");
        let cmdline = std::fs::read(format!("{proc}/cmdline")).unwrap_or_default();
        let (argv, cut) = crate::effect::argv(&cmdline);
        let cwd = std::fs::read_link(format!("{proc}/cwd"))
            .ok()
            .map(|p| p.to_string_lossy().into_owned());
        Seen {
            pid,
            ppid: task.parent,
            root: task.root,
            root_number: task.root_number,
            t: crate::session_log::now_ns(),
            exe: self.exe(&proc),
            argv,
            cut,
            cwd,
        }
    }

    /// The executable `proc` runs: its path, identity and BLAKE3, hashed
    /// once per identity (device, inode, size and times).
    fn exe(&mut self, proc: &str) -> Option<Exe> {
        let link = format!("{proc}/exe");
        let path = std::fs::read_link(&link).ok()?;
        let mut file = std::fs::File::open(&link).ok()?;
        let meta = file.metadata().ok()?;
        let key = (
            meta.dev(),
            meta.ino(),
            meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
            meta.ctime() * 1_000_000_000 + meta.ctime_nsec(),
            meta.size(),
        );
        let blake3 = match self.hashes.get(&key) {
            Some(h) => h.clone(),
            None => {
                let h = hash(&mut file);
                self.hashes.insert(key, h.clone());
                h
            }
        };
        Some(Exe {
            path: path.to_string_lossy().into_owned(),
            dev: meta.dev(),
            ino: meta.ino(),
            blake3,
        })
    }

    fn send(&mut self, note: &Note) {
        if let Ok(mut line) = serde_json::to_vec(note) {
            line.push(b'\n');
            self.out.extend(line);
        }
    }

    /// Waits a little (at most [`ROOM_WAIT_MS`]) for room in the pipe.
    fn wait_for_room(&self) {
        let mut poll = [rustix::event::PollFd::new(
            &self.feed,
            rustix::event::PollFlags::OUT,
        )];
        let timeout = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: ROOM_WAIT_MS * 1_000_000,
        };
        let _ = rustix::event::poll(&mut poll, Some(&timeout));
    }

    /// Writes what the pipe takes now, with the count of lost execs.
    fn flush(&mut self) {
        if self.lost > 0 {
            let count = std::mem::take(&mut self.lost);
            let mut line = serde_json::to_vec(&Note::Lost { count }).unwrap_or_default();
            line.push(b'\n');
            self.out.extend(line);
        }
        while !self.out.is_empty() {
            match rustix::io::write(&self.feed, &self.out) {
                Ok(n) => {
                    self.out.drain(..n);
                }
                Err(rustix::io::Errno::INTR) => continue,
                Err(rustix::io::Errno::AGAIN) => break,
                // `nd7 run` is gone: nothing will read what is held.
                Err(_) => {
                    self.out.clear();
                    break;
                }
            }
        }
    }

    /// At the keeper's end: what is still held, as far as the pipe takes it.
    fn flush_all(&mut self) {
        self.flush();
    }
}

/// Whether a `PTRACE_EVENT_STOP` with this signal is a group stop: a
/// seized task's other event stops (a SIGCONT's notice) carry SIGTRAP.
fn is_stop_signal(sig: i32) -> bool {
    matches!(
        sig,
        libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU
    )
}

fn cont(pid: u32, sig: i32) {
    let _ = ptrace(PTRACE_CONT, pid as i32, sig as libc::c_long);
}

fn tgid_of(tid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

fn hash(file: &mut std::fs::File) -> Option<String> {
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                hasher.update(&buf[..n]);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return None,
        }
    }
    Some(hasher.finalize().to_hex().to_string())
}

/// `nd7 run`'s reading of the feed: each line a [`Note`].
pub struct Feed {
    fd: OwnedFd,
    pending: Vec<u8>,
}

impl Feed {
    pub fn new(fd: OwnedFd) -> Feed {
        Feed {
            fd,
            pending: Vec::new(),
        }
    }

    /// Waits at most `wait_ms` for notes; returns those that came (none
    /// when the wait ran out), or `None` once the front has closed its end.
    pub fn next(&mut self, wait_ms: i32) -> Option<Vec<Note>> {
        let mut poll = [rustix::event::PollFd::new(
            &self.fd,
            rustix::event::PollFlags::IN,
        )];
        let timeout = rustix::event::Timespec {
            tv_sec: (wait_ms / 1000) as i64,
            tv_nsec: ((wait_ms % 1000) as i64) * 1_000_000,
        };
        match rustix::event::poll(&mut poll, Some(&timeout)) {
            Ok(0) => return Some(Vec::new()),
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => return Some(Vec::new()),
            Err(_) => return None,
        }
        let mut buf = vec![0u8; 1 << 16];
        let n = match rustix::io::read(&self.fd, &mut buf) {
            Ok(0) => return None,
            Ok(n) => n,
            Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => return Some(Vec::new()),
            Err(_) => return None,
        };
        self.pending.extend_from_slice(&buf[..n]);
        let mut notes = Vec::new();
        while let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            if let Ok(note) = serde_json::from_slice(&line[..line.len() - 1]) {
                notes.push(note);
            }
        }
        Some(notes)
    }
}

/// Execs gathered into one `ran` entry at most.
const BATCH: usize = 256;
/// How long `nd7 run` waits for more before it writes what it has.
const IDLE_MS: i32 = 100;

/// `nd7 run`'s side: a thread that writes what the front saw into the
/// run's chain, in batches.
pub struct Recorder {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

/// Starts writing the front's notes into `log`; `None` when execs are not
/// observed in this run (then `log` says so: a `not_observed` entry).
pub fn record(log: std::sync::Arc<crate::run_log::RunLog>) -> Option<Recorder> {
    let Some(fd) = take_feed() else {
        let why = not_observed_why().unwrap_or("the observer's feed is gone");
        let _ = log.effect(
            crate::effect::NOT_OBSERVED,
            &crate::effect::not_observed_body(None, why),
        );
        return None;
    };
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopping = stop.clone();
    let thread = std::thread::spawn(move || write_notes(Feed::new(fd), &log, &stopping));
    Some(Recorder { stop, thread })
}

impl Recorder {
    /// Once every process below `nd7 run` has ended: writes what is left
    /// and stops.
    pub fn finish(self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = self.thread.join();
    }
}

fn write_notes(mut feed: Feed, log: &crate::run_log::RunLog, stop: &std::sync::atomic::AtomicBool) {
    let mut batch = Batch::default();
    let stalled = crate::fault::injected(SMALL_QUEUE);
    loop {
        if stalled && !stop.load(std::sync::atomic::Ordering::Relaxed) {
            std::thread::sleep(std::time::Duration::from_millis(IDLE_MS as u64));
            continue;
        }
        let Some(notes) = feed.next(IDLE_MS) else {
            break;
        };
        if notes.is_empty() {
            batch.write(log);
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                break;
            }
            continue;
        }
        for note in notes {
            if let Note::Lost { count } = note {
                batch.write(log);
                let _ = log.effect(
                    crate::effect::NOT_OBSERVED,
                    &crate::effect::not_observed_body(
                        Some(count),
                        "the observer was past its bound: each was killed at its exec, before it ran",
                    ),
                );
            } else {
                batch.notes.push(note);
            }
            if batch.notes.len() >= BATCH {
                batch.write(log);
            }
        }
    }
    batch.write(log);
}

/// Notes gathered for one `ran` entry.
#[derive(Default)]
struct Batch {
    notes: Vec<Note>,
    marks: Marks,
}

/// The command each child of `nd7 run` ran, by its pid and number, once
/// the exit has listed it. The exit lists a command by its first process's
/// pid, and a pid comes round again: a later command's shell can get the
/// pid of a command's shell whose processes still run. The listing a root
/// gets first is its own (its pid is its until it ends); a listing another
/// root of that pid already took is stale, and the root not yet listed
/// (ADR-0144).
#[derive(Default)]
struct Marks {
    of: HashMap<(u32, u64), u64>,
    taken: HashMap<u64, u64>,
}

impl Marks {
    fn command(&mut self, log: &crate::run_log::RunLog, root: u32, number: u64) -> Option<u64> {
        if let Some(&seq) = self.of.get(&(root, number)) {
            return Some(seq);
        }
        let seq = log.command_of(root)?;
        if self.taken.get(&seq).is_some_and(|&n| n != number) {
            return None;
        }
        self.of.insert((root, number), seq);
        self.taken.insert(seq, number);
        Some(seq)
    }
}

impl Batch {
    /// Writes the notes as one `ran` entry, each exec naming the command it
    /// ran under. The exit lists a command once its start returns, which
    /// is just after its first exec: a first exec of a child of `nd7 run`
    /// not yet listed is given a moment.
    fn write(&mut self, log: &crate::run_log::RunLog) {
        if self.notes.is_empty() {
            return;
        }
        let marks = &mut self.marks;
        let unlisted = self.notes.iter().any(|n| {
            matches!(n, Note::Exec(s) if s.root == Some(s.pid) && marks.command(log, s.pid, s.root_number).is_none())
        });
        if unlisted {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let mut batch = crate::effect::Batch::default();
        for note in self.notes.drain(..) {
            match note {
                Note::Exec(seen) => {
                    let command = seen
                        .root
                        .and_then(|r| marks.command(log, r, seen.root_number));
                    batch.exec(&seen, command);
                }
                Note::Exit { pid, status } => batch.exit(pid, status),
                Note::Lost { .. } => {}
            }
        }
        let _ = log.effect(crate::effect::RAN, &batch.take());
    }
}
