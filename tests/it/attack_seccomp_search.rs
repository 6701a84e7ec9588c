//! Attack on ADR-0152's binary search over call numbers in the floor's
//! seccomp filter (ADR-0154): the unit test `the_search_decides_as_the_chain_of_checks`
//! runs both programs in nd7's own BPF interpreter, which could share a
//! misreading of jumps with the assembler. Here the kernel runs them: each
//! program is installed in a real forked child, which then makes every call
//! number of both entry points (`syscall`, and `int 0x80`, i386's), the x32
//! forms, numbers above the tables, negative and 64-bit ones, each with
//! every argument the filter reads (and a few it does not), and what the
//! kernel did is compared between the chain of checks and the search.
//!
//! Nothing a child asks is carried out: under the program a second filter
//! answers every call `SECCOMP_RET_TRACE`, which without a tracer skips the
//! call with `ENOSYS`. The kernel takes the strongest of the two answers,
//! so a call the program allows ends in `ENOSYS`, one it refuses in
//! `EPERM`, one it hands to a listener in the errno this test's listener
//! answers (`EXDEV`), and one it kills ends the child with `SIGSYS`. The
//! child checks first that `getpid` is skipped, and stops if it is not.

use std::sync::atomic::{AtomicI32, AtomicU32, AtomicUsize, Ordering};

use nd7_core::sandbox::linux::seccomp::{self, Filter, Insn, Sockets};

/// How a call is made.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Entry {
    /// The 64-bit `syscall` instruction.
    Native,
    /// The 32-bit entry, `int 0x80`.
    Int80,
}

#[derive(Clone, Copy, Debug)]
struct Call {
    entry: Entry,
    nr: u64,
    args: [u64; 6],
}

/// What the kernel did with a call.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Verdict {
    /// Skipped by the second filter: the program allowed it.
    Allowed,
    Refused,
    /// Handed to the listener.
    Notified,
    /// The child ended with this signal.
    Killed(i32),
    /// Any other return value.
    Other(i64),
}

/// What the listener answers a call it is handed.
const NOTIFIED_ERRNO: i64 = libc::EXDEV as i64;

/// The state the parent and a child share (a page mapped before the fork):
/// the child makes no system call of its own once its filters are in, so
/// it reports here.
#[repr(C)]
struct Shared {
    /// The child's listener, or -1 before it has one, -2 when it failed.
    listener: AtomicI32,
    go: AtomicU32,
    /// Set when the second filter did not skip a call.
    unsafe_to_go_on: AtomicU32,
    /// How many calls (from the child's first) have their result below.
    done: AtomicUsize,
}

fn ret(k: u32) -> Insn {
    Insn {
        code: (libc::BPF_RET | libc::BPF_K) as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

/// # Safety
/// Makes any system call: only under filters that skip it.
unsafe fn native_call(nr: u64, a: [u64; 6]) -> i64 {
    let r: i64;
    // SAFETY: the caller's promise; the instruction clobbers only the
    // registers named.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") nr as i64 => r,
            in("rdi") a[0], in("rsi") a[1], in("rdx") a[2],
            in("r10") a[3], in("r8") a[4], in("r9") a[5],
            lateout("rcx") _, lateout("r11") _,
            options(nostack),
        );
    }
    r
}

/// # Safety
/// As [`native_call`], through i386's entry (arguments in `ebx`, `ecx`,
/// `edx`, `esi`, `edi`; the filter reads no sixth).
unsafe fn int80_call(nr: u64, a: [u64; 6]) -> i64 {
    let r: i64;
    // SAFETY: the caller's promise; `rbx` is swapped back after the call.
    unsafe {
        std::arch::asm!(
            "xchg rbx, {b}",
            "int 0x80",
            "xchg rbx, {b}",
            b = inout(reg) a[0] => _,
            inlateout("rax") nr as i64 => r,
            in("rcx") a[1], in("rdx") a[2], in("rsi") a[3], in("rdi") a[4],
            options(nostack),
        );
    }
    i64::from(r as i32)
}

/// Ends a child without a system call.
fn crash() -> ! {
    // SAFETY: an undefined instruction: the child ends with SIGILL.
    unsafe { std::arch::asm!("ud2", options(noreturn)) }
}

/// The child: installs `prog` (with a listener) and the skipping filter,
/// then makes `calls` from `from`, writing each result to `results`.
fn child(prog: &[Insn], calls: &[Call], from: usize, shared: &Shared, results: *mut i64) -> ! {
    // SAFETY: plain prctl; the filters need no_new_privs.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        shared.listener.store(-2, Ordering::Release);
        crash();
    }
    let Ok(fd) = seccomp::install(prog, true) else {
        shared.listener.store(-2, Ordering::Release);
        crash()
    };
    let skip = [ret(libc::SECCOMP_RET_TRACE)];
    if seccomp::install(&skip, false).is_err() {
        shared.listener.store(-2, Ordering::Release);
        crash();
    }
    shared.listener.store(fd, Ordering::Release);
    while shared.go.load(Ordering::Acquire) == 0 {
        std::hint::spin_loop();
    }
    // SAFETY: getpid; if it runs, nothing else is made.
    if unsafe { native_call(libc::SYS_getpid as u64, [0; 6]) } != -i64::from(libc::ENOSYS) {
        shared.unsafe_to_go_on.store(1, Ordering::Release);
        crash();
    }
    for (i, call) in calls.iter().enumerate().skip(from) {
        // SAFETY: both filters are in and the second skips every call.
        let r = unsafe {
            match call.entry {
                Entry::Native => native_call(call.nr, call.args),
                Entry::Int80 => int80_call(call.nr, call.args),
            }
        };
        // SAFETY: `results` has a slot for every call.
        unsafe { results.add(i).write_volatile(r) };
        shared.done.store(i + 1, Ordering::Release);
    }
    crash()
}

/// A shared anonymous mapping of `len` bytes, zeroed.
fn shared_map(len: usize) -> *mut u8 {
    // SAFETY: a fresh anonymous mapping.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(
        p,
        libc::MAP_FAILED,
        "mmap: {}",
        std::io::Error::last_os_error()
    );
    p.cast()
}

/// Answers every call handed to `notify` with `NOTIFIED_ERRNO`.
fn answer(notify: i32) {
    // SAFETY: plain data, zeroed as the kernel requires.
    let mut req: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: `req` is a seccomp_notif the kernel fills.
    if unsafe { libc::ioctl(notify, libc::SECCOMP_IOCTL_NOTIF_RECV, &mut req) } != 0 {
        return; // the child is gone, or the call was interrupted
    }
    let mut resp = libc::seccomp_notif_resp {
        id: req.id,
        val: 0,
        error: -(NOTIFIED_ERRNO as i32),
        flags: 0,
    };
    // SAFETY: `resp` answers the call just received.
    unsafe { libc::ioctl(notify, libc::SECCOMP_IOCTL_NOTIF_SEND, &mut resp) };
}

/// Waits for `pid` without blocking: its status once it has ended.
fn ended(pid: i32) -> Option<i32> {
    let mut status = 0;
    // SAFETY: waits for our own child.
    let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    assert!(r >= 0, "waitpid: {}", std::io::Error::last_os_error());
    (r == pid).then_some(status)
}

/// Runs `calls` under `prog` in children (a new one after each kill): what
/// the kernel did with each.
fn verdicts(prog: &[Insn], calls: &[Call]) -> Vec<Verdict> {
    let mut out = Vec::with_capacity(calls.len());
    let len = std::mem::size_of::<Shared>() + 8 * calls.len();
    while out.len() < calls.len() {
        let from = out.len();
        let map = shared_map(len);
        // SAFETY: the mapping is zeroed and large enough for `Shared`, and
        // all of its fields are atomics, for which zero is valid.
        let shared = unsafe { &*map.cast::<Shared>() };
        shared.listener.store(-1, Ordering::Release);
        // SAFETY: the slots after the header, one per call.
        let results = unsafe { map.add(std::mem::size_of::<Shared>()) }.cast::<i64>();
        // SAFETY: the child touches only memory it inherited and makes
        // system calls directly (no allocation, no lock).
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            child(prog, calls, from, shared, results);
        }
        let status = serve(pid, shared);
        assert_eq!(
            shared.unsafe_to_go_on.load(Ordering::Acquire),
            0,
            "a call was not skipped"
        );
        let done = shared.done.load(Ordering::Acquire);
        for i in from..done {
            // SAFETY: written by the child before `done` passed it.
            let r = unsafe { results.add(i).read_volatile() };
            out.push(match -r {
                e if e == i64::from(libc::ENOSYS) => Verdict::Allowed,
                e if e == i64::from(libc::EPERM) => Verdict::Refused,
                NOTIFIED_ERRNO => Verdict::Notified,
                _ => Verdict::Other(r),
            });
        }
        let signal = libc::WTERMSIG(status);
        assert!(libc::WIFSIGNALED(status), "the child exited: {status:#x}");
        if done < calls.len() {
            // The call it was making ended it.
            out.push(Verdict::Killed(signal));
        } else {
            assert_eq!(signal, libc::SIGILL, "the child's end after its calls");
        }
        // SAFETY: unmapping the region mapped above, no longer used.
        unsafe { libc::munmap(map.cast(), len) };
    }
    out
}

/// Takes the child's listener and answers it until the child has ended:
/// the child's wait status.
fn serve(pid: i32, shared: &Shared) -> i32 {
    let fd = loop {
        let fd = shared.listener.load(Ordering::Acquire);
        if fd >= 0 {
            break fd;
        }
        if let Some(status) = ended(pid) {
            panic!("the child could not install its filters: {status:#x}");
        }
        std::thread::yield_now();
    };
    // SAFETY: plain system calls on our own child.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
    assert!(
        pidfd >= 0,
        "pidfd_open: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: as above.
    let notify = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd, fd, 0) } as i32;
    assert!(
        notify >= 0,
        "pidfd_getfd: {}",
        std::io::Error::last_os_error()
    );
    shared.go.store(1, Ordering::Release);
    let status = loop {
        let mut p = libc::pollfd {
            fd: notify,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd.
        let n = unsafe { libc::poll(&mut p, 1, 10) };
        if n > 0 && p.revents & libc::POLLIN != 0 {
            answer(notify);
        }
        if let Some(status) = ended(pid) {
            break status;
        }
    };
    // SAFETY: closing our own descriptors.
    unsafe {
        libc::close(notify);
        libc::close(pidfd);
    }
    status
}

/// Arguments that reach every check the filter makes of one (the ioctl
/// requests, stop signals where `kill`-like calls and `fcntl` name them,
/// `seccomp`'s listener flag, `socketcall`'s bind and connect), the same
/// with bits above the low 32, and a few the filter does not read.
fn argument_sets() -> Vec<[u64; 6]> {
    let mut sets = vec![[0; 6], [u64::MAX; 6]];
    let requests = seccomp::DENIED_IOCTLS
        .iter()
        .chain(&seccomp::STOPPING_IOCTLS)
        .map(|d| d.1)
        .chain(seccomp::ATTR_IOCTLS.iter().map(|d| d.1))
        .chain([0x5413, 0]);
    for request in requests {
        let request = u64::from(request);
        sets.push([0, request, 0, 0, 0, 0]);
        sets.push([0, request | 1 << 32, 0, 0, 0, 0]);
    }
    for sig in [0, 1, 9, 17, 18, 19, 20, 21, 22, 23, 24] {
        sets.push([0, sig, 0, 0, 0, 0]);
        sets.push([0, 0, sig, 0, 0, 0]);
        sets.push([0, 10 /* F_SETSIG */, sig, 0, 0, 0]);
    }
    let filter = u64::from(libc::SECCOMP_SET_MODE_FILTER);
    let listener = libc::SECCOMP_FILTER_FLAG_NEW_LISTENER;
    sets.extend([
        [filter, listener, 0, 0, 0, 0],
        [filter, listener | 1, 0, 0, 0, 0],
        [filter, 0, 0, 0, 0, 0],
        [filter | 1 << 32, listener, 0, 0, 0, 0],
    ]);
    // socketcall's calls, clone's new namespaces, socket families, prctl.
    for n in 1..=20 {
        sets.push([n, 0, 0, 0, 0, 0]);
    }
    sets.extend([
        [libc::CLONE_NEWUSER as u64, 0, 0, 0, 0, 0],
        [libc::AF_INET as u64, libc::SOCK_STREAM as u64, 0, 0, 0, 0],
        [libc::AF_UNIX as u64, 0, 0, 0, 0, 0],
        [libc::PR_SET_SECCOMP as u64, 2, 0, 0, 0, 0],
    ]);
    sets
}

/// Every call to make through `entry`: each number of the tables' range
/// with every argument set, and the edges.
fn calls_for(entry: Entry, numbers: &[u64], args: &[[u64; 6]]) -> Vec<Call> {
    numbers
        .iter()
        .flat_map(|&nr| args.iter().map(move |&args| Call { entry, nr, args }))
        .collect()
}

fn numbers(entry: Entry) -> Vec<u64> {
    let mut n: Vec<u64> = (0..1100).collect();
    if entry == Entry::Native {
        // x32's numbers, refused whole.
        n.extend((0..1100).map(|n| 0x4000_0000 | n));
        // 64-bit numbers whose low half names a call (the kernel reads 32).
        n.extend([0x1_0000_0000 | 42, 0x1_0000_0000 | 49, 0x1_4000_0000]);
    }
    n.extend([
        0x3fff_ffff,
        0x7fff_ffff,
        0x8000_0000,
        0xffff_fffe,
        0xffff_ffff,
        u64::MAX,
        u64::MAX - 1,
    ]);
    n
}

/// Whether `int 0x80` reaches the kernel's 32-bit entry in this kernel.
fn int80_works() -> bool {
    // SAFETY: the child makes one call (i386 getpid) and exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        // SAFETY: i386's getpid (20), then exit.
        let r = unsafe { int80_call(20, [0; 6]) };
        // SAFETY: ends the child.
        unsafe { libc::_exit(i32::from(r > 0)) };
    }
    let mut status = 0;
    // SAFETY: our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 1
}

/// The kernel decides every call alike under the search (ADR-0152) and
/// under the chain of checks it replaced, in the floor's filter, the one
/// with open sockets and the one without attribute calls. Seen failing with
/// the split compared one above its number (a call equal to a split point
/// was allowed: `ioctl` and `connect` among them).
#[test]
fn the_kernel_decides_every_call_alike_under_the_search_and_the_chain() {
    assert!(seccomp::available(), "this kernel runs no seccomp filter");
    let native = seccomp::native().expect("x86-64's table");
    let compat = seccomp::compat();
    let args = argument_sets();
    let mut calls = calls_for(Entry::Native, &numbers(Entry::Native), &args);
    let int80 = compat.is_some() && int80_works();
    if int80 {
        calls.extend(calls_for(Entry::Int80, &numbers(Entry::Int80), &args));
    } else {
        eprintln!("no 32-bit entry here: only the 64-bit one is compared");
    }
    let filters = [
        Filter::full(Sockets::Supervised),
        Filter::full(Sockets::Open),
        Filter {
            attrs: false,
            ..Filter::full(Sockets::Supervised)
        },
    ];
    for f in filters {
        let search = seccomp::program_for(&native, compat.as_ref(), f);
        let chain = seccomp::program_with(&native, compat.as_ref(), f, usize::MAX);
        assert_ne!(search, chain, "the search is not the chain");
        let by_search = verdicts(&search, &calls);
        let by_chain = verdicts(&chain, &calls);
        for ((call, s), c) in calls.iter().zip(&by_search).zip(&by_chain) {
            assert_eq!(s, c, "{call:x?}: search {s:?}, chain {c:?} in {f:?}");
        }
        let count = |v: Verdict| by_search.iter().filter(|&&s| s == v).count();
        eprintln!(
            "{f:?}: {} calls, 32-bit entry {int80}: {} allowed, {} refused, {} notified",
            calls.len(),
            count(Verdict::Allowed),
            count(Verdict::Refused),
            count(Verdict::Notified)
        );
        // Not a comparison of two programs that allow everything.
        let seen = |entry, nr, args: [u64; 6]| {
            let at = calls
                .iter()
                .position(|c| c.entry == entry && c.nr == nr && c.args == args)
                .expect("a call made");
            by_search[at]
        };
        assert_eq!(seen(Entry::Native, 39, [0; 6]), Verdict::Allowed);
        assert_eq!(seen(Entry::Native, 0x4000_0000, [0; 6]), Verdict::Refused);
        assert_eq!(seen(Entry::Native, 101, [0; 6]), Verdict::Refused, "ptrace");
        let tiocsti = [0, 0x5412, 0, 0, 0, 0];
        assert_eq!(
            seen(Entry::Native, 16, tiocsti),
            Verdict::Refused,
            "TIOCSTI"
        );
        let connect = match f.sockets {
            Sockets::Supervised => Verdict::Notified,
            Sockets::Open => Verdict::Allowed,
        };
        assert_eq!(seen(Entry::Native, 42, [0; 6]), connect, "connect");
        // A filter with a listener of its own (a notifier nested under the
        // session's), through both entries.
        let listener = [1, libc::SECCOMP_FILTER_FLAG_NEW_LISTENER, 0, 0, 0, 0];
        assert_eq!(
            seen(Entry::Native, 317, listener),
            Verdict::Refused,
            "seccomp"
        );
        assert_eq!(
            seen(Entry::Native, 317, [1, 0, 0, 0, 0, 0]),
            Verdict::Allowed
        );
        if int80 {
            assert_eq!(
                seen(Entry::Int80, 354, listener),
                Verdict::Refused,
                "i386 seccomp"
            );
        }
        if f.attrs && f.sockets == Sockets::Supervised {
            assert_eq!(seen(Entry::Native, 90, [0; 6]), Verdict::Notified, "chmod");
        }
        if int80 {
            assert_eq!(
                seen(Entry::Int80, 15, [0; 6]),
                if f.attrs {
                    Verdict::Refused
                } else {
                    Verdict::Allowed
                },
                "i386 chmod"
            );
            assert_eq!(
                seen(Entry::Int80, 11, [0; 6]),
                Verdict::Refused,
                "i386 execve"
            );
        }
    }
}
