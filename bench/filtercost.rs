//! What the seccomp filter costs a system call: a child process makes
//! `getppid` N times with no filter, with the floor's filter without its
//! stop-signal part (`no_stops: false`), and with the whole filter, the
//! three round-robin; the report is each one's median time per call over
//! the rounds. Linux only.
//!
//! usage: filtercost [CALLS] [ROUNDS]

#[cfg(target_os = "linux")]
fn main() {
    use nd7_core::sandbox::linux::seccomp::{self, Filter, Sockets};
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let calls = args.first().copied().unwrap_or(2_000_000);
    let rounds = args.get(1).copied().unwrap_or(15);
    let full = Filter::full(Sockets::Open);
    let without = Filter {
        no_stops: false,
        ..full
    };
    let programs = [
        ("no filter", None),
        ("filter without the stop part", seccomp::program(without)),
        ("the whole filter", seccomp::program(full)),
    ];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); programs.len()];
    for _ in 0..rounds {
        for (i, (_, program)) in programs.iter().enumerate() {
            times[i].push(time_in_child(program.as_deref(), calls));
        }
    }
    for ((name, _), mut t) in programs.iter().zip(times) {
        t.sort_by(f64::total_cmp);
        println!(
            "{name}: {:.1} ns per call (median of {rounds})",
            t[t.len() / 2]
        );
    }
}

/// Nanoseconds per `getppid` in a forked child under `program`.
#[cfg(target_os = "linux")]
fn time_in_child(program: Option<&[libc::sock_filter]>, calls: u64) -> f64 {
    let (mut read, mut write) = std::io::pipe().expect("pipe");
    // SAFETY: the child makes system calls and exits with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        if let Some(program) = program {
            // SAFETY: plain prctl with integer arguments.
            unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
            nd7_core::sandbox::linux::seccomp::install(program, false).expect("install");
        }
        let start = std::time::Instant::now();
        for _ in 0..calls {
            // SAFETY: getppid takes nothing and cannot fail.
            unsafe { libc::syscall(libc::SYS_getppid) };
        }
        let ns = start.elapsed().as_nanos() as f64 / calls as f64;
        let _ = std::io::Write::write_all(&mut write, &ns.to_le_bytes());
        // SAFETY: ends the child without the parent's destructors.
        unsafe { libc::_exit(0) };
    }
    drop(write);
    let mut buf = [0u8; 8];
    let _ = std::io::Read::read_exact(&mut read, &mut buf);
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    f64::from_le_bytes(buf)
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("filtercost: Linux only");
}
