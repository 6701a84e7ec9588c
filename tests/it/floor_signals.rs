//! Issue 29 item 5: nothing inside may stop `nd7 run`, and the user's
//! signals always end it, taking everything the agent started with it
//! (ADR-0096). Each attack is a shell script standing in for the agent under
//! `nd7 run`, as the ordinary account; the user's side is this test sending
//! signals to the process it started (`nd7 run`'s front).
#![cfg(target_os = "linux")]

use std::process::Child;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::runs::*;
use crate::world::*;

/// Python (x86-64 numbers) that tries every call that sends a signal, with each stop
/// signal, at `$1` (a pid), and prints `NAME SIG:OK` or `NAME SIG:ERRNO`.
/// After each that got through it sends SIGCONT, so the run still ends.
const STOPPERS: &str = r#"/usr/bin/python3 - "$1" <<'PY'
import ctypes, errno, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
pid = int(sys.argv[1])
def sys_(nr, *args):
    r = libc.syscall(nr, *[ctypes.c_long(a) for a in args])
    return 0 if r == 0 else ctypes.get_errno()
info = (ctypes.c_int * 32)()
info[0] = 0; info[2] = -1  # si_signo set by the kernel; si_code SI_QUEUE
def rt(nr, *args):
    r = libc.syscall(nr, *[ctypes.c_long(a) for a in args[:-1]], ctypes.byref(info))
    return 0 if r == 0 else ctypes.get_errno()
for sig in (signal.SIGSTOP, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU):
    tries = {
        "kill": lambda: sys_(62, pid, sig),
        "kill-all": lambda: sys_(62, -1, sig),
        "tkill": lambda: sys_(200, pid, sig),
        "tgkill": lambda: sys_(234, pid, pid, sig),
        "rt_sigqueueinfo": lambda: rt(129, pid, sig, 0),
        "rt_tgsigqueueinfo": lambda: rt(297, pid, pid, sig, 0),
    }
    def pidfd():
        fd = os.pidfd_open(pid)
        try:
            return sys_(424, fd, sig, 0, 0)
        finally:
            os.close(fd)
    tries["pidfd_send_signal"] = pidfd
    for name, call in tries.items():
        e = call()
        print(f"{name} {int(sig)}:{'OK' if e == 0 else errno.errorcode.get(e, e)}", flush=True)
        if e == 0:
            os.kill(pid, signal.SIGCONT)
            os.kill(0, signal.SIGCONT)
# F_SETSIG: the kernel would send the owner SIGSTOP on I/O.
import fcntl
r, w = os.pipe()
e = 0
try:
    fcntl.fcntl(r, 10, signal.SIGSTOP)
except OSError as x:
    e = x.errno
print(f"F_SETSIG:{'OK' if e == 0 else errno.errorcode.get(e, e)}", flush=True)
# tcflow(TCOOFF) on a descriptor that is not a terminal: ENOTTY when the
# kernel sees it, EPERM when the filter refuses it first.
null = os.open("/dev/null", os.O_RDWR)
try:
    fcntl.ioctl(null, 0x540A, 0)
    e = 0
except OSError as x:
    e = x.errno
print(f"TCXONC:{errno.errorcode.get(e, e)}", flush=True)
PY"#;

/// The agent stopped its session process (`kill -STOP $PPID`), which left
/// `nd7 run` waiting for ever, deaf to the user's Ctrl-C, SIGTERM and SIGHUP.
/// Every call that names a signal is tried with every stop signal, at the
/// session process and at every process (-1), and
/// `fcntl(F_SETSIG)` and `tcflow` besides: each fails with EPERM. Broke
/// through; guards the `no_stops` part of the seccomp filter
/// (`src/sandbox/linux/seccomp.rs`): without it every call says OK (and the
/// script sends SIGCONT after each, so the run still ends).
#[test]
#[cfg(target_arch = "x86_64")]
fn nothing_inside_can_stop_the_session() {
    let w = World::new();
    let out = w.run_agent(&format!("stoppers() {{ {STOPPERS}\n}}\nstoppers $PPID"));
    let got = lines(&out);
    assert_eq!(got.len(), 4 * 7 + 2, "{got:?} {}", text(&out.stderr));
    let through: Vec<&String> = got.iter().filter(|l| !l.ends_with(":EPERM")).collect();
    assert!(through.is_empty(), "got through: {through:?}");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// Starts a stubborn agent: it ignores every signal the user might send,
/// leaves a daemon of its own (`setsid`), writes the daemon's pid to
/// `marker.pid` and then makes `ready`.
fn stubborn(w: &World) -> (Child, u32) {
    let (child, _session) = w.start_agent(
        r#"
trap '' TERM HUP INT QUIT
setsid sh -c 'echo $$ > marker.pid.new; mv marker.pid.new marker.pid; exec sleep 1000' < /dev/null > /dev/null 2>&1 &
wait_for marker.pid
touch ready
while :; do sleep 1; done
"#,
    );
    w.wait_for("ready");
    let marker: u32 = std::fs::read_to_string(w.proj().join("marker.pid"))
        .expect("marker.pid")
        .trim()
        .parse()
        .expect("a pid");
    let cmdline = std::fs::read(format!("/proc/{marker}/cmdline")).unwrap_or_default();
    assert!(text(&cmdline).starts_with("sleep"), "{cmdline:?}");
    (child, marker)
}

/// Polls for `done` for at most `bound` (no claim on speed: the bound only
/// keeps a broken run from hanging the suite); returns whether it came.
fn within(bound: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < bound {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    done()
}

fn send(child: &Child, sig: i32) {
    // SAFETY: kill with the pid of a child not yet reaped.
    assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
}

/// After `nd7 run` ended: nothing of the session is left (the daemon is
/// gone), and the run's chain ends with `run_end`.
fn ended_cleanly(w: &World, marker: u32) {
    assert!(
        within(Duration::from_secs(60), || !std::path::Path::new(&format!(
            "/proc/{marker}"
        ))
        .exists()),
        "the agent's daemon {marker} outlived the run"
    );
    // After `kill -9` of the front nothing waits for the keeper: the chain
    // is polled until it ends.
    let last = || entries(&run_chain(w)).last().map(|x| x["kind"].clone());
    within(Duration::from_secs(60), || {
        last() == Some(Value::from("run_end"))
    });
    assert_eq!(last(), Some(Value::from("run_end")));
}

/// A program that ignores SIGTERM and SIGHUP kept `nd7 run` running after
/// the user's `kill`: the session passed the signal on and waited for the
/// program for ever. Broke through; guards the keeper's grace
/// (`Loop::next_step` in `src/sandbox/linux/keeper.rs`): without it `nd7
/// run` never returns.
#[test]
fn sigterm_and_sighup_end_a_run_whose_program_ignores_them() {
    for sig in [libc::SIGTERM, libc::SIGHUP] {
        let w = World::new();
        let (mut child, marker) = stubborn(&w);
        send(&child, sig);
        assert!(
            within(Duration::from_secs(120), || child
                .try_wait()
                .ok()
                .flatten()
                .is_some()),
            "nd7 run did not end on signal {sig}"
        );
        ended_cleanly(&w, marker);
    }
}

/// The third interrupt within a few seconds ends the run as SIGTERM does
/// (ADR-0096); one or two are left to the program. Guards
/// `Loop::interrupted`: without it `nd7 run` never returns.
#[test]
fn a_third_interrupt_ends_the_run() {
    let w = World::new();
    let (mut child, marker) = stubborn(&w);
    send(&child, libc::SIGINT);
    send(&child, libc::SIGQUIT);
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        child.try_wait().expect("try_wait").is_none(),
        "two interrupts ended the run"
    );
    send(&child, libc::SIGINT);
    assert!(
        within(Duration::from_secs(120), || child
            .try_wait()
            .ok()
            .flatten()
            .is_some()),
        "nd7 run did not end on the third interrupt"
    );
    ended_cleanly(&w, marker);
}

/// `kill -9` of `nd7 run` left the agent's `setsid` daemon running under
/// init, and the chain without `run_end`. Broke through; guards the front
/// (`front` in `src/sandbox/linux/keeper.rs`, the keeper dying with it by
/// `PR_SET_PDEATHSIG` as on SIGTERM): without it the daemon outlives the run.
#[test]
fn sigkill_of_nd7_run_still_ends_everything() {
    let w = World::new();
    let (mut child, marker) = stubborn(&w);
    send(&child, libc::SIGKILL);
    child.wait().expect("wait");
    ended_cleanly(&w, marker);
}
