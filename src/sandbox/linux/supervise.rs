//! Other programs' sockets, kept out: the keeper's half of the seccomp
//! filter ([`super::seccomp`]). Every `connect` and `bind` a process of the run
//! makes stops in the kernel and waits here (`SECCOMP_RET_USER_NOTIF`).
//!
//! Landlock (before ABI 9) does not look at `connect`: a pathname socket
//! can be reached whenever its directory can be walked, which is everywhere
//! the floor lets the agent read, `~/.ssh` included. So the keeper decides:
//!
//! - `bind`: the socket object is fetched from the caller (`pidfd_getfd`),
//!   its cookie remembered as one of the run's, and the call goes on
//!   unchanged in the caller, where Landlock judges where it may create a
//!   socket file. Nothing the caller can change afterwards matters: the
//!   cookie names the object, not an address.
//! - `connect`: done here, on the caller's own socket object (the same open
//!   file, fetched with `pidfd_getfd`) with a copy of the address read once
//!   from the caller's memory, and the result returned as the call's. A
//!   unix pathname is opened `O_PATH` from the caller's root or working
//!   directory, and connected through `/proc/self/fd/N`, so the file checked
//!   is the file connected. It is allowed only when the socket bound to that
//!   file is one the run bound (or nd7's own exit), confirmed with the
//!   kernel's socket diagnostics (`sock_diag`); an abstract name likewise.
//!   Anything else is refused with `EACCES` (a path) or `EPERM` (a name), the
//!   errors Landlock itself gives. Other families (TCP, UDP, netlink) are
//!   connected as asked.
//!
//! The caller is never let through with `SECCOMP_USER_NOTIF_FLAG_CONTINUE`
//! on a connect: it could rewrite the address or swap the descriptor after
//! the check. A caller the keeper cannot act for (one that made itself
//! non-dumpable) is refused. What stays open: datagrams sent with `sendto`
//! or `sendmsg` to another program's unix socket by path (Landlock ABI 9
//! closes that); abstract datagrams are Landlock's signal-and-socket scope's.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};

use rustix::net::AddressFamily;
use rustix::process::{Pid, PidfdFlags, pidfd_getfd, pidfd_open};

use super::attrs;
use super::memory::read_memory;
use super::rename;
use super::seccomp;

/// The sockets the run may connect to.
#[derive(Default)]
pub struct Supervisor {
    /// Threads that make the connects.
    workers: Workers,
    /// Cookie → socket inode of every unix socket a process of the run bound.
    bound: Mutex<HashMap<u64, u32>>,
    /// nd7's own listening sockets (the exit, the hooks' door): cookie,
    /// socket inode, the file they are bound to once learnt, and whether
    /// only the floor's processes may connect. Their files live under
    /// `~/.nd7`, which nothing inside can write, so the file, once learnt,
    /// stays theirs for the run.
    own: Mutex<Vec<Own>>,
    /// Connects to a socket of nd7's that is the floor's alone (the hooks'
    /// door) from outside the floor, refused: how many, and the first
    /// [`crate::run_log::REFUSALS_WRITTEN`] callers by pid and name, for
    /// the run's log ([`Supervisor::door_refusals`]).
    door_refused: Mutex<(usize, Vec<(u32, String)>)>,
    /// Each listener's write roots, by its descriptor number
    /// ([`Supervisor::set_roots`]); a listener without any has every
    /// change of a file's attributes refused.
    roots: Mutex<HashMap<RawFd, Arc<attrs::Roots>>>,
    /// The run's held git configurations ([`Supervisor::hold_git_config`]).
    git_configs: rename::HeldConfigs,
}

/// One of nd7's own listening sockets: cookie, socket inode, the
/// (device, inode) of its file once learnt, and whether it is the floor's
/// alone ([`Supervisor::allow_own`]).
type Own = (u64, u32, Option<(u32, u32)>, bool);

/// What a notification asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Call {
    Connect {
        fd: i32,
        addr: u64,
        len: u32,
    },
    Bind {
        fd: i32,
    },
    /// A multiplexed call whose arguments are in the caller's memory.
    Multiplexed {
        call: u32,
        args: u64,
    },
    /// A change of a file's mode, owner, times or extended attributes
    /// ([`super::attrs`]).
    Attr {
        call: seccomp::AttrCall,
        args: [u64; 6],
    },
    /// A rename, which may be onto a held git configuration
    /// ([`super::rename`]).
    Rename {
        call: seccomp::RenameCall,
        args: [u64; 6],
    },
    Other,
}

/// How to answer a notification.
enum Reply {
    /// The call's result: 0, or an errno.
    Result(Result<i64, i32>),
    /// Let the call run in the caller, as it asked.
    Continue,
    /// The caller is gone; nothing to answer.
    Nothing,
}

fn classify(data: &libc::seccomp_data) -> Call {
    let arch = |a: Option<seccomp::Arch>| a.filter(|a| a.audit == data.arch);
    let Some(a) = arch(seccomp::native()).or_else(|| arch(seccomp::compat())) else {
        return Call::Other;
    };
    let nr = data.nr as u32;
    let args = data.args;
    if nr == a.connect {
        Call::Connect {
            fd: args[0] as i32,
            addr: args[1],
            len: args[2] as u32,
        }
    } else if nr == a.bind {
        Call::Bind { fd: args[0] as i32 }
    } else if Some(nr) == a.socketcall {
        Call::Multiplexed {
            call: args[0] as u32,
            args: args[1],
        }
    } else if let Some(&(_, call)) = seccomp::attr_calls(a.audit).iter().find(|c| c.0 == nr) {
        Call::Attr { call, args }
    } else if let Some(&(_, call)) = seccomp::rename_calls(a.audit).iter().find(|c| c.0 == nr) {
        Call::Rename { call, args }
    } else {
        Call::Other
    }
}

fn errno(e: io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// The listener's notification and the process it came from.
struct Notice {
    listener: Arc<OwnedFd>,
    /// Whether it came through the floor's filter, not a command's.
    floor: bool,
    id: u64,
    /// The calling thread, as this process's pid namespace sees it.
    tid: i32,
    call: Call,
}

impl Notice {
    /// Whether the caller is still waiting in this same call: checked after
    /// anything learnt about it by pid, so a pid reused meanwhile is caught.
    fn valid(&self) -> bool {
        let mut id = self.id;
        // SAFETY: the ioctl reads one u64 from a live local.
        unsafe {
            libc::ioctl(
                self.listener.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_ID_VALID,
                &mut id,
            ) == 0
        }
    }

    fn answer(&self, reply: Reply) {
        let mut resp = libc::seccomp_notif_resp {
            id: self.id,
            val: 0,
            error: 0,
            flags: 0,
        };
        match reply {
            Reply::Nothing => return,
            Reply::Continue => resp.flags = libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32,
            Reply::Result(Ok(v)) => resp.val = v,
            Reply::Result(Err(e)) => resp.error = -e,
        }
        // SAFETY: the ioctl reads a fully initialised response. ENOENT (the
        // caller was interrupted and gave up) needs nothing more.
        unsafe {
            libc::ioctl(
                self.listener.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_SEND,
                &mut resp,
            );
        }
    }

    /// A pidfd for the calling thread (Linux 6.9), else for its process.
    fn pidfd(&self) -> Result<OwnedFd, i32> {
        const PIDFD_THREAD: u32 = libc::O_EXCL as u32;
        let pid = Pid::from_raw(self.tid).ok_or(libc::ESRCH)?;
        pidfd_open(pid, PidfdFlags::from_bits_retain(PIDFD_THREAD))
            .or_else(|_| {
                let tgid =
                    crate::kernel::linux::tgid(self.tid as u32).ok_or(rustix::io::Errno::SRCH)?;
                pidfd_open(
                    Pid::from_raw(tgid as i32).ok_or(rustix::io::Errno::SRCH)?,
                    PidfdFlags::empty(),
                )
            })
            .map_err(|e| e.raw_os_error())
    }

    /// The caller's descriptor `fd`: the same open socket, not a copy.
    fn socket(&self, fd: i32) -> Result<OwnedFd, i32> {
        let pidfd = self.pidfd()?;
        if !self.valid() {
            return Err(libc::ESRCH);
        }
        pidfd_getfd(&pidfd, fd, rustix::process::PidfdGetfdFlags::empty()).map_err(|e| {
            match e.raw_os_error() {
                libc::EBADF => libc::EBADF,
                // Not allowed to act for this caller: refused, never let through.
                _ => libc::EACCES,
            }
        })
    }
}

impl Supervisor {
    pub fn new() -> Arc<Supervisor> {
        Arc::new(Supervisor::default())
    }

    /// Allows connections to `socket`, a listening socket of nd7's own:
    /// from every process of the run, or with `floor_only` from the
    /// floor's alone (the program and what it starts), never from a command
    /// through the exit. The hooks' door is the floor's: Claude Code's hooks
    /// are its children, and a command flooding the door with connections
    /// would otherwise hold them back.
    pub fn allow_own(&self, socket: BorrowedFd<'_>, floor_only: bool) {
        if let (Some(id), Ok(mut own)) = (identify(socket), self.own.lock()) {
            own.push((id.0, id.1, None, floor_only));
        }
    }

    /// Sets the write roots of the processes under `listener`'s filter.
    pub fn set_roots(&self, listener: RawFd, roots: attrs::Roots) {
        if let Ok(mut all) = self.roots.lock() {
            all.insert(listener, Arc::new(roots));
        }
    }

    /// Forgets `listener`'s roots: no process uses its filter any more.
    pub fn forget_roots(&self, listener: RawFd) {
        if let Ok(mut all) = self.roots.lock() {
            all.remove(&listener);
        }
    }

    /// Makes a change of a file's attributes for the caller, within its
    /// listener's roots ([`attrs::change`]).
    fn attr(&self, n: &Notice, call: seccomp::AttrCall, args: [u64; 6]) -> Reply {
        match self.as_caller(n, |caller, roots| attrs::change(caller, call, args, roots)) {
            Err(libc::ESRCH) => Reply::Nothing,
            result => Reply::Result(result),
        }
    }

    /// Runs `job` for the process `n` stopped, with its listener's write
    /// roots: the caller's descriptors fetched on demand, its notice still
    /// valid checked by `job` before it acts.
    fn as_caller<R>(&self, n: &Notice, job: impl FnOnce(&attrs::Caller, &attrs::Roots) -> R) -> R {
        let roots = self
            .roots
            .lock()
            .ok()
            .and_then(|all| all.get(&n.listener.as_raw_fd()).cloned())
            .unwrap_or_default();
        let fetch = |fd: i32| n.socket(fd);
        let valid = || n.valid();
        let caller = attrs::Caller {
            tid: n.tid,
            fd: &fetch,
            valid: &valid,
        };
        job(&caller, &roots)
    }

    /// Remembers `fd`, opened at `path` by `nd7 run`, as a held git
    /// configuration, whose edits that run nothing the keeper makes.
    pub fn hold_git_config(&self, fd: BorrowedFd<'_>, path: &[u8]) {
        self.git_configs.hold(fd, path);
    }

    /// Notes the keys of refused edits of held git configurations in
    /// `file`, for the model's explanation (`refusals::held_keys_untold`).
    pub fn note_held_keys_in(&self, file: std::path::PathBuf) {
        self.git_configs.note_in(file);
    }

    /// Answers a rename for the caller ([`rename::rename`]).
    fn rename(&self, n: &Notice, call: seccomp::RenameCall, args: [u64; 6]) -> Reply {
        let outcome = self.as_caller(n, |caller, roots| {
            rename::rename(caller, call, args, &self.git_configs, roots)
        });
        match outcome {
            rename::Outcome::Continue => Reply::Continue,
            rename::Outcome::Result(Err(libc::ESRCH)) => Reply::Nothing,
            rename::Outcome::Result(result) => Reply::Result(result),
        }
    }

    /// Remembers a unix socket as one of the run's.
    fn remember(&self, socket: BorrowedFd<'_>) {
        if let (Some((cookie, ino)), Ok(mut bound)) = (identify(socket), self.bound.lock()) {
            bound.insert(cookie, ino);
        }
    }

    /// Answers the next notification waiting on `listener`, a filter's
    /// notification descriptor that polled readable.
    /// `floor` says whether it is the floor's listener or a command's.
    pub fn answer(self: &Arc<Self>, listener: &Arc<OwnedFd>, floor: bool) {
        if let Some(notice) = receive(listener, floor) {
            self.handle(notice);
        }
    }

    fn handle(self: &Arc<Self>, n: Notice) {
        match n.call {
            Call::Bind { fd } => {
                let reply = self.bind(&n, fd);
                n.answer(reply);
            }
            Call::Multiplexed { call, args } => {
                let mut words = [0u8; 12];
                if let Err(e) = read_memory(n.tid, args, &mut words) {
                    return n.answer(Reply::Result(Err(e)));
                }
                let word = |i: usize| {
                    u32::from_le_bytes(words[4 * i..4 * i + 4].try_into().unwrap_or_default())
                };
                let call = match call {
                    2 => Call::Bind { fd: word(0) as i32 },
                    3 => Call::Connect {
                        fd: word(0) as i32,
                        addr: u64::from(word(1)),
                        len: word(2),
                    },
                    _ => return n.answer(Reply::Continue),
                };
                self.handle(Notice { call, ..n });
            }
            Call::Connect { fd, addr, len } => {
                // Any connect may block for as long as its peer likes (a
                // full backlog, a stopped server, a slow TCP peer), so it is
                // made on a worker thread: the keeper's loop, which must
                // always be free to end the run, never waits on it.
                // Should no thread be had (the account's task limit, which
                // the run itself can fill), the job is dropped unrun and
                // `Pending` answers `EAGAIN`: the keeper never dies of it.
                let me = self.clone();
                let pending = Pending(Some(n));
                self.workers.run(Box::new(move || {
                    let mut pending = pending;
                    if let Some(n) = pending.0.take() {
                        let reply = me.connect(&n, fd, addr, len);
                        n.answer(reply);
                    }
                }));
            }
            // A file system call may block (a stalled network or FUSE
            // mount): on a worker, as a connect is.
            Call::Attr { call, args } => {
                let me = self.clone();
                let pending = Pending(Some(n));
                self.workers.run(Box::new(move || {
                    let mut pending = pending;
                    if let Some(n) = pending.0.take() {
                        let reply = me.attr(&n, call, args);
                        n.answer(reply);
                    }
                }));
            }
            // With no git configuration held, a rename is the kernel's
            // alone: let through at once.
            Call::Rename { .. } if !self.git_configs.any() => n.answer(Reply::Continue),
            Call::Rename { call, args } => {
                let me = self.clone();
                let pending = Pending(Some(n));
                self.workers.run(Box::new(move || {
                    let mut pending = pending;
                    if let Some(n) = pending.0.take() {
                        let reply = me.rename(&n, call, args);
                        n.answer(reply);
                    }
                }));
            }
            // The filter hands over nothing else; let it through unchanged.
            Call::Other => n.answer(Reply::Continue),
        }
    }

    fn bind(&self, n: &Notice, fd: i32) -> Reply {
        match n.socket(fd) {
            Ok(socket) => self.remember(socket.as_fd()),
            Err(libc::ESRCH) => return Reply::Nothing,
            // The bind goes on regardless: where a socket file may be made is
            // Landlock's to judge, in the caller. A socket not remembered
            // is one nothing in the run can connect to.
            Err(_) => {}
        }
        Reply::Continue
    }

    /// Connects the caller's socket `fd` (its own open socket, fetched) to
    /// the address it gave.
    fn connect(&self, n: &Notice, fd: i32, addr: u64, len: u32) -> Reply {
        const MAX: usize = std::mem::size_of::<libc::sockaddr_storage>();
        let socket = match n.socket(fd) {
            Ok(socket) => socket,
            Err(libc::ESRCH) => return Reply::Nothing,
            Err(e) => return Reply::Result(Err(e)),
        };
        let family = match rustix::net::sockopt::socket_domain(&socket) {
            Ok(family) => family,
            Err(e) => return Reply::Result(Err(e.raw_os_error())),
        };
        let socket = &socket;
        let len = len as usize;
        if len > MAX {
            return Reply::Result(Err(libc::EINVAL));
        }
        let mut address = [0u8; MAX];
        if let Err(e) = read_memory(n.tid, addr, &mut address[..len]) {
            return Reply::Result(Err(e));
        }
        if !n.valid() {
            return Reply::Nothing;
        }
        let address = &address[..len];
        let result = if family == AddressFamily::UNIX {
            self.connect_unix(n.tid, n.floor, socket, address)
        } else {
            raw_connect(socket, address)
        };
        Reply::Result(result.map(|()| 0))
    }

    fn connect_unix(
        &self,
        tid: i32,
        floor: bool,
        socket: &OwnedFd,
        address: &[u8],
    ) -> Result<(), i32> {
        const PATH: usize = 2; // offsetof(struct sockaddr_un, sun_path)
        let family = address
            .get(..PATH)
            .map(|f| u16::from_ne_bytes([f[0], f[1]]) as i32);
        // Too short, or not a unix address (AF_UNSPEC disconnects a
        // datagram socket): the kernel names nothing, so let it answer.
        if address.len() <= PATH || family != Some(libc::AF_UNIX) {
            return raw_connect(socket, address);
        }
        let path = &address[PATH..];
        if path[0] == 0 {
            return if self.allows_name(path) {
                raw_connect(socket, address)
            } else {
                Err(libc::EPERM)
            };
        }
        let end = memchr::memchr(0, path).unwrap_or(path.len());
        let pinned = open_in(tid, &path[..end])?;
        let st = rustix::fs::fstat(&pinned).map_err(|e| e.raw_os_error())?;
        if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Socket {
            return Err(libc::ECONNREFUSED);
        }
        match self.allows_file(st.st_dev, st.st_ino, floor) {
            Allowed::Yes => {}
            Allowed::FloorOnly => {
                self.door_refused(tid);
                return Err(libc::EACCES);
            }
            Allowed::No => return Err(libc::EACCES),
        }
        let via = format!("/proc/self/fd/{}", pinned.as_raw_fd());
        let mut target = Vec::with_capacity(PATH + via.len() + 1);
        target.extend_from_slice(&(libc::AF_UNIX as u16).to_ne_bytes());
        target.extend_from_slice(via.as_bytes());
        target.push(0);
        raw_connect(socket, &target)
    }

    /// Finds the run's sockets as the kernel describes them now,
    /// forgetting those that are closed.
    fn described(&self) -> Vec<Described> {
        let Ok(mut bound) = self.bound.lock() else {
            return Vec::new();
        };
        let mut found = Vec::new();
        bound.retain(|&cookie, &mut ino| match describe(ino, cookie) {
            Ok(Some(d)) => {
                found.push(d);
                true
            }
            Ok(None) => false,
            Err(_) => true,
        });
        found
    }

    fn allows_file(&self, dev: u64, ino: u64, floor: bool) -> Allowed {
        let file = (kernel_dev(dev), ino as u32);
        if let Ok(mut own) = self.own.lock() {
            for (cookie, sino, vfs, floor_only) in own.iter_mut() {
                if vfs.is_none() {
                    *vfs = describe(*sino, *cookie).ok().flatten().and_then(|d| d.vfs);
                }
                if *vfs == Some(file) {
                    return match floor || !*floor_only {
                        true => Allowed::Yes,
                        false => Allowed::FloorOnly,
                    };
                }
            }
        }
        match self.described().iter().any(|d| d.vfs == Some(file)) {
            true => Allowed::Yes,
            false => Allowed::No,
        }
    }

    /// Counts a refused connect to the hooks' door by thread `tid`, and
    /// keeps the first callers' pid and name.
    fn door_refused(&self, tid: i32) {
        let pid = crate::kernel::linux::tgid(tid as u32).unwrap_or(tid as u32);
        if let Ok(mut refused) = self.door_refused.lock() {
            refused.0 += 1;
            if refused.1.len() < crate::run_log::REFUSALS_WRITTEN as usize {
                refused.1.push((pid, crate::kernel::linux::name(pid)));
            }
        }
    }

    /// The connects to the hooks' door refused so far: how many, and the
    /// first callers.
    pub fn door_refusals(&self) -> (usize, Vec<(u32, String)>) {
        self.door_refused
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }

    fn allows_name(&self, name: &[u8]) -> bool {
        self.described()
            .iter()
            .any(|d| d.name.as_deref() == Some(name))
    }
}

/// Whether a connect to a socket file may go on.
enum Allowed {
    Yes,
    /// One of nd7's sockets that only the floor's processes may reach, and
    /// the caller is not one of them.
    FloorOnly,
    No,
}

/// A notification a worker is to answer: answered `EAGAIN` if it is dropped
/// unanswered (no worker could be started for it), so its caller never
/// waits for an answer that will not come.
struct Pending(Option<Notice>);

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(n) = self.0.take() {
            n.answer(Reply::Result(Err(libc::EAGAIN)));
        }
    }
}

/// A job for a worker.
type Job = Box<dyn FnOnce() + Send>;

/// How long a worker with nothing to do waits for a job before it ends. A
/// burst of blocked connects leaves no threads behind for the rest of the
/// run, and a task limit the run filled gets its tasks back; a
/// thread's start (tens of microseconds) is small beside any command's.
const IDLE_FOR: std::time::Duration = std::time::Duration::from_secs(2);

/// What a worker thread is called (its `comm`, in `ps -L` and /proc).
const WORKER_NAME: &str = "nd7-keeper-work";

/// A pool of threads that grows whenever every thread is busy, so a job
/// never waits behind one that blocks; idle threads wait for the next, for
/// at most `idle_for`.
struct Workers {
    /// Threads waiting for a job and not yet promised one: a job is only
    /// queued after claiming one of them, and a thread only leaves after
    /// taking itself off this count, so a queued job always has a thread.
    idle: Arc<std::sync::atomic::AtomicUsize>,
    queue: Mutex<Option<std::sync::mpsc::Sender<Job>>>,
    jobs: Arc<Mutex<Option<std::sync::mpsc::Receiver<Job>>>>,
    idle_for: std::time::Duration,
}

impl Default for Workers {
    fn default() -> Workers {
        Workers {
            idle: Arc::default(),
            queue: Mutex::default(),
            jobs: Arc::default(),
            idle_for: IDLE_FOR,
        }
    }
}

impl Workers {
    fn run(&self, job: Job) {
        use std::sync::atomic::Ordering;
        // Claim an idle thread, if there is one, for this job alone.
        let claimed = self
            .idle
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok();
        let job = if claimed {
            let sent = match self.queue.lock() {
                Ok(queue) => match queue.as_ref() {
                    Some(queue) => queue.send(job).map_err(|e| e.0),
                    None => Err(job),
                },
                Err(_) => Err(job),
            };
            match sent {
                Ok(()) => return,
                Err(job) => {
                    // Nothing was sent; give the claim back.
                    self.idle.fetch_add(1, Ordering::AcqRel);
                    job
                }
            }
        } else {
            job
        };
        self.spawn(job);
    }

    /// A new thread for `job`, which then joins the idle ones.
    fn spawn(&self, job: Job) {
        use std::sync::atomic::Ordering;
        if let Ok(mut queue) = self.queue.lock()
            && queue.is_none()
            && let Ok(mut jobs) = self.jobs.lock()
        {
            let (tx, rx) = std::sync::mpsc::channel();
            *queue = Some(tx);
            *jobs = Some(rx);
        }
        let (idle, jobs, idle_for) = (self.idle.clone(), self.jobs.clone(), self.idle_for);
        // Not `std::thread::spawn`, which panics when the kernel has no
        // thread to give (a task limit the run can fill): that would end
        // the keeper, and with it the sweep. On failure the job is dropped
        // unrun, which answers its caller (`Pending`).
        let worker = std::thread::Builder::new().name(WORKER_NAME.into());
        let _ = worker.spawn(move || {
            use std::sync::mpsc::RecvTimeoutError;
            job();
            'idle: loop {
                idle.fetch_add(1, Ordering::AcqRel);
                // Each thread's wait is its own: one that queued for the
                // lock has been waiting all along, so a pool of many idle
                // threads empties in about `idle_for`, not one per turn.
                let mut until = std::time::Instant::now() + idle_for;
                loop {
                    // Idle threads take turns waiting on the queue.
                    let next = match jobs.lock() {
                        Ok(jobs) => match jobs.as_ref() {
                            Some(rx) => rx.recv_timeout(
                                until.saturating_duration_since(std::time::Instant::now()),
                            ),
                            None => return,
                        },
                        Err(_) => return,
                    };
                    match next {
                        Ok(job) => {
                            job();
                            continue 'idle;
                        }
                        // Leave only if no job was promised to the idle
                        // meanwhile; one that was is on its way: wait on.
                        Err(RecvTimeoutError::Timeout) => {
                            if idle
                                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                                    n.checked_sub(1)
                                })
                                .is_ok()
                            {
                                return;
                            }
                            until = std::time::Instant::now() + idle_for;
                        }
                        Err(RecvTimeoutError::Disconnected) => return,
                    }
                }
            }
        });
    }
}

/// A unix socket's cookie and inode; `None` for any other socket.
fn identify(socket: BorrowedFd<'_>) -> Option<(u64, u32)> {
    if rustix::net::sockopt::socket_domain(socket) != Ok(AddressFamily::UNIX) {
        return None;
    }
    let cookie = rustix::net::sockopt::socket_cookie(socket).ok()?;
    let ino = rustix::fs::fstat(socket).ok()?.st_ino as u32;
    Some((cookie, ino))
}

/// Waits for the next notification on `listener`.
fn receive(listener: &Arc<OwnedFd>, floor: bool) -> Option<Notice> {
    // SAFETY: seccomp_notif is plain data; the kernel requires it zeroed.
    let mut notif: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: the ioctl fills `notif`, a live local of the right type.
    let r = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_RECV,
            &mut notif,
        )
    };
    // ENOENT: the caller was interrupted before it could be read.
    (r == 0).then(|| Notice {
        listener: listener.clone(),
        floor,
        id: notif.id,
        tid: notif.pid as i32,
        call: classify(&notif.data),
    })
}

fn raw_connect(socket: &OwnedFd, address: &[u8]) -> Result<(), i32> {
    // SAFETY: `address` is a readable buffer of the length passed; the
    // kernel copies it before using it.
    let r = unsafe {
        libc::connect(
            socket.as_raw_fd(),
            address.as_ptr().cast(),
            address.len() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(errno(io::Error::last_os_error()))
    }
}

/// Opens `path` (`O_PATH`, following links as `connect` does) as thread
/// `tid` would resolve it: from its root if absolute, else from its
/// working directory.
fn open_in(tid: i32, path: &[u8]) -> Result<OwnedFd, i32> {
    use std::os::unix::ffi::OsStrExt;
    let absolute = path.first() == Some(&b'/');
    let base = format!("/proc/{tid}/{}", if absolute { "root" } else { "cwd" });
    let base = rustix::fs::open(
        base.as_str(),
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| e.raw_os_error())?;
    let path = std::ffi::OsStr::from_bytes(path);
    let how = rustix::fs::ResolveFlags::IN_ROOT;
    rustix::fs::openat2(
        &base,
        path,
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
        if absolute {
            how
        } else {
            rustix::fs::ResolveFlags::empty()
        },
    )
    .map_err(|e| e.raw_os_error())
}

/// A device number as `stat` gives it, in the kernel's own form
/// (major << 20 | minor), which `sock_diag` reports.
fn kernel_dev(dev: u64) -> u32 {
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    (major << 20) | minor
}

/// A unix socket as `sock_diag` describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Described {
    /// The abstract name (with its leading NUL) or path it is bound to.
    name: Option<Vec<u8>>,
    /// The device and inode (low 32 bits) of the file it is bound to.
    vfs: Option<(u32, u32)>,
}

const SOCK_DIAG_BY_FAMILY: u16 = 20;
const UDIAG_SHOW_NAME: u32 = 1;
const UDIAG_SHOW_VFS: u32 = 2;
const UNIX_DIAG_NAME: u16 = 0;
const UNIX_DIAG_VFS: u16 = 1;

/// A `sock_diag` request for one unix socket: a `nlmsghdr` and a
/// `unix_diag_req`, in the kernel's layout (native byte order).
fn request(ino: u32, cookie: u64) -> [u8; 40] {
    let mut r = [0u8; 40];
    let mut put = |at: usize, bytes: &[u8]| r[at..at + bytes.len()].copy_from_slice(bytes);
    // nlmsghdr: length, type, flags, sequence, port.
    put(0, &40u32.to_ne_bytes());
    put(4, &SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    put(6, &(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    put(8, &1u32.to_ne_bytes());
    // unix_diag_req: family, protocol, pad, states, inode, show, cookie.
    put(16, &[libc::AF_UNIX as u8, 0]);
    put(20, &(!0u32).to_ne_bytes());
    put(24, &ino.to_ne_bytes());
    put(28, &(UDIAG_SHOW_NAME | UDIAG_SHOW_VFS).to_ne_bytes());
    put(32, &(cookie as u32).to_ne_bytes());
    put(36, &((cookie >> 32) as u32).to_ne_bytes());
    r
}

/// A socket-diagnostics socket made inside the run's network namespace
/// (ADR-0106): the run's unix sockets (the exit's, the door's, those its
/// processes bind) live there, and the kernel describes a socket only to a
/// `sock_diag` socket of its own namespace.
static INSIDE: std::sync::OnceLock<Mutex<OwnedFd>> = std::sync::OnceLock::new();

/// Keeps `fd`, `nd7 run`'s `sock_diag` socket from inside its network
/// namespace, if it is one (the first only).
pub fn describe_inside(fd: OwnedFd) {
    use rustix::net::sockopt;
    let netlink = sockopt::socket_domain(&fd) == Ok(AddressFamily::NETLINK)
        && sockopt::socket_protocol(&fd).ok().flatten() == Some(rustix::net::netlink::SOCK_DIAG);
    if netlink {
        let _ = INSIDE.set(Mutex::new(fd));
    }
}

/// Asks the kernel about the unix socket with inode `ino` and `cookie`:
/// `None` when there is no such socket (closed, or the cookie is another's).
/// Asked inside the run's network namespace first, when there is one.
fn describe(ino: u32, cookie: u64) -> io::Result<Option<Described>> {
    use rustix::net::{SocketFlags, SocketType, netlink};
    if let Some(inside) = INSIDE.get()
        && let Ok(fd) = inside.lock()
        && let Ok(Some(found)) = describe_with(&fd, ino, cookie)
    {
        return Ok(Some(found));
    }
    let fd = rustix::net::socket_with(
        AddressFamily::NETLINK,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        Some(netlink::SOCK_DIAG),
    )?;
    describe_with(&fd, ino, cookie)
}

fn describe_with(fd: &OwnedFd, ino: u32, cookie: u64) -> io::Result<Option<Described>> {
    use rustix::net::SendFlags;
    rustix::net::send(fd, &request(ino, cookie), SendFlags::empty())?;
    let mut buf = [0u8; 4096];
    let (got, _) = rustix::net::recv(fd, &mut buf[..], rustix::net::RecvFlags::empty())?;
    parse_reply(&buf[..got.min(buf.len())])
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Parses one `sock_diag` reply: an error (no such socket) or a
/// `unix_diag_msg` followed by attributes.
fn parse_reply(reply: &[u8]) -> io::Result<Option<Described>> {
    const HEADER: usize = 16; // nlmsghdr
    const MSG: usize = 16; // unix_diag_msg
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "malformed sock_diag reply");
    let len = u32_at(reply, 0).ok_or_else(bad)? as usize;
    let kind = u16_at(reply, 4).ok_or_else(bad)?;
    let reply = reply.get(..len).ok_or_else(bad)?;
    if kind == libc::NLMSG_ERROR as u16 {
        let code = u32_at(reply, HEADER).ok_or_else(bad)? as i32;
        return match -code {
            0 | libc::ENOENT | libc::ESTALE => Ok(None),
            e => Err(io::Error::from_raw_os_error(e)),
        };
    }
    if kind != SOCK_DIAG_BY_FAMILY {
        return Err(bad());
    }
    let mut described = Described {
        name: None,
        vfs: None,
    };
    let mut at = HEADER + MSG;
    while let (Some(rta_len), Some(rta_type)) = (u16_at(reply, at), u16_at(reply, at + 2)) {
        let rta_len = rta_len as usize;
        if rta_len < 4 {
            break;
        }
        let data = reply.get(at + 4..at + rta_len).ok_or_else(bad)?;
        match rta_type {
            UNIX_DIAG_NAME => described.name = Some(data.to_vec()),
            UNIX_DIAG_VFS => {
                let (ino, dev) = (u32_at(data, 0), u32_at(data, 4));
                described.vfs = ino.zip(dev).map(|(ino, dev)| (dev, ino));
            }
            _ => {}
        }
        at += (rta_len + 3) & !3;
    }
    Ok(Some(described))
}

/// Asks the kernel to hand a call from the waiting process to the keeper,
/// and the answer back, on the same CPU (`SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP`,
/// Linux 6.6): a round trip then costs two context switches rather than two
/// cross-CPU wake-ups. Where the kernel lacks it, nothing changes.
pub fn wake_on_one_cpu(listener: BorrowedFd<'_>) {
    const SYNC_WAKE_UP: libc::c_ulong = 1;
    // SAFETY: this ioctl takes its flags as the argument's value, not
    // through a pointer; nothing is read from or written to memory.
    unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS,
            SYNC_WAKE_UP,
        );
    }
}

/// Whether this process may act for its children's system calls: fetch
/// a descriptor from `pid`, as the keeper will for every `connect`.
pub fn can_act_for(pid: Pid, fd: RawFd) -> bool {
    pidfd_open(pid, PidfdFlags::empty())
        .and_then(|pidfd| pidfd_getfd(&pidfd, fd, rustix::process::PidfdGetfdFlags::empty()))
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::{UnixDatagram, UnixListener};

    /// The live worker threads of this process, by their name in /proc.
    fn threads() -> usize {
        let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
            return 0;
        };
        tasks
            .flatten()
            .filter(|t| {
                std::fs::read_to_string(t.path().join("comm"))
                    .is_ok_and(|comm| comm.trim_end() == WORKER_NAME)
            })
            .count()
    }

    /// Every job runs, however the idle threads come and go around it, and
    /// a pool left alone gives its threads back. Without the idle timeout
    /// the last assertion fails (the threads wait for ever); without the
    /// claim on `idle` before leaving, a job queued as its thread timed out
    /// is never run and the count of finished jobs falls short.
    #[test]
    fn workers_run_every_job_and_idle_ones_end() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let workers = Workers {
            idle_for: std::time::Duration::from_millis(1),
            ..Workers::default()
        };
        let done = Arc::new(AtomicUsize::new(0));
        for round in 0..200 {
            for _ in 0..(round % 4 + 1) {
                let done = done.clone();
                workers.run(Box::new(move || {
                    done.fetch_add(1, Ordering::SeqCst);
                }));
            }
            // Around the idle timeout, so some jobs meet a leaving thread.
            std::thread::sleep(std::time::Duration::from_micros(500 + 300 * (round % 5)));
        }
        let expected: usize = (0..200).map(|round| round % 4 + 1).sum();
        let mut waited = 0;
        while (done.load(Ordering::SeqCst) < expected || threads() > 0) && waited < 500 {
            std::thread::sleep(std::time::Duration::from_millis(10));
            waited += 1;
        }
        assert_eq!(done.load(Ordering::SeqCst), expected, "a job was lost");
        assert_eq!(threads(), 0, "idle workers stayed");
    }

    #[test]
    fn sock_diag_names_a_bound_socket_and_its_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.sock");
        let listener = UnixListener::bind(&path).expect("bind");
        let cookie = rustix::net::sockopt::socket_cookie(&listener).expect("cookie");
        let ino = rustix::fs::fstat(&listener).expect("fstat").st_ino as u32;
        let file = rustix::fs::stat(&path).expect("stat");
        let d = describe(ino, cookie).expect("query").expect("found");
        assert_eq!(d.vfs, Some((kernel_dev(file.st_dev), file.st_ino as u32)));
        let name = d.name.expect("a name");
        assert!(name.starts_with(path.as_os_str().as_encoded_bytes()));
        // Another socket's cookie with this inode: not this socket.
        assert_eq!(describe(ino, cookie ^ 1).expect("query"), None);
        drop(listener);
        assert_eq!(describe(ino, cookie).expect("query"), None);
    }

    #[test]
    fn sock_diag_names_an_abstract_socket() {
        let name = format!("nd7-test-{}", std::process::id());
        let addr = <std::os::unix::net::SocketAddr as std::os::linux::net::SocketAddrExt>::from_abstract_name(name.as_bytes())
            .expect("name");
        let socket = UnixDatagram::bind_addr(&addr).expect("bind");
        let cookie = rustix::net::sockopt::socket_cookie(&socket).expect("cookie");
        let ino = rustix::fs::fstat(&socket).expect("fstat").st_ino as u32;
        let d = describe(ino, cookie).expect("query").expect("found");
        let mut expected = vec![0u8];
        expected.extend_from_slice(name.as_bytes());
        assert_eq!(d.name, Some(expected));
        assert_eq!(d.vfs, None);
    }

    #[test]
    fn a_malformed_reply_is_an_error() {
        assert!(parse_reply(&[1, 2, 3]).is_err());
        let mut error = vec![0u8; 20];
        error[0] = 20;
        error[4] = libc::NLMSG_ERROR as u8;
        error[16..20].copy_from_slice(&(-libc::ENOENT).to_ne_bytes());
        assert_eq!(parse_reply(&error).expect("parsed"), None);
    }
}
