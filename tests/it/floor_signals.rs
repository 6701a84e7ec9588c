//! Issue 29 item 5: nothing inside may stop `nd7 run`, and the user's
//! signals always end it, taking everything the agent started with it
//! (ADR-0096): not a ptrace stop, a clone's exit signal, the terminal's
//! foreground, a hydra of setsid children, nor an account's task limit filled
//! to make the keeper die. Each attack is a shell script standing in for
//! the agent under `nd7 run`, as the ordinary account; the user's side is this test sending
//! signals to the process it started (`nd7 run`'s front).
#![cfg(target_os = "linux")]

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
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
    // The daemon writes its pid before it execs `sleep`: wait for the exec.
    let cmdline = || std::fs::read(format!("/proc/{marker}/cmdline")).unwrap_or_default();
    within(Duration::from_secs(60), || {
        text(&cmdline()).starts_with("sleep")
    });
    assert!(text(&cmdline()).starts_with("sleep"), "{:?}", cmdline());
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

/// A process's state letter, `None` once it is gone (or reaped).
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

/// The live processes whose command line contains `marker`.
fn running_with(marker: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(marker) && state(pid) != Some('Z') {
            found.push(pid);
        }
    }
    found
}

fn kill_all(marker: &str) {
    for pid in running_with(marker) {
        // SAFETY: kill(2) with a pid and a signal number; no memory involved.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
}

/// `nd7 run` on the agent script, its stderr gathered on a thread.
fn spawn_run(
    w: &World,
    body: &str,
    tweak: impl FnOnce(&mut std::process::Command),
) -> (Child, Arc<Mutex<String>>) {
    let agent = w.agent(body);
    let mut cmd = w.nd7(&["run", &agent]);
    tweak(&mut cmd);
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nd7 run");
    let mut stderr = child.stderr.take().expect("stderr");
    let seen = Arc::new(Mutex::new(String::new()));
    let sink = seen.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stderr.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock()
                .expect("stderr")
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    (child, seen)
}

/// A cgroup (v1 `pids` controller) with a task limit, as systemd's
/// `TasksMax` on a user's slice or a container's `--pids-limit` gives every
/// account; removed, with whatever is left in it killed, when dropped.
struct PidsLimit {
    dir: PathBuf,
}

impl PidsLimit {
    fn new(max: u32) -> Option<PidsLimit> {
        let base = Path::new("/sys/fs/cgroup/pids");
        if !account().drop_from_root
            || !base.join("pids.max").exists() && !base.join("cgroup.procs").exists()
        {
            return None;
        }
        let dir = base.join(format!("nd7-pids-limit-{}", std::process::id()));
        std::fs::create_dir(&dir).ok()?;
        std::fs::write(dir.join("pids.max"), max.to_string()).ok()?;
        Some(PidsLimit { dir })
    }

    /// Puts `cmd`'s process (and so all it starts) in the cgroup.
    fn enter(&self, cmd: &mut std::process::Command) {
        let procs =
            std::ffi::CString::new(self.dir.join("cgroup.procs").as_os_str().as_encoded_bytes())
                .expect("path");
        // SAFETY: between fork and exec: open, write and close on a path
        // owned by the closure; no allocation, no lock.
        unsafe {
            cmd.pre_exec(move || {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let ok = libc::write(fd, b"0".as_ptr().cast(), 1) == 1;
                libc::close(fd);
                if ok {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
    }

    fn tasks(&self) -> Vec<u32> {
        std::fs::read_to_string(self.dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }
}

impl Drop for PidsLimit {
    fn drop(&mut self) {
        for _ in 0..100 {
            let left = self.tasks();
            if left.is_empty() {
                break;
            }
            for pid in left {
                // SAFETY: kill(2); no memory involved.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The agent starts a `setsid` daemon (which the keeper must end with the
/// session), then fills the account's task limit with sleeping children
/// and makes one `connect`: the keeper, which makes every connect on a
/// worker thread, needs a new thread and the kernel has none to give. Were
/// that a panic, the keeper (the session's subreaper) would die, the
/// session with it, and the daemon would be left to init, outliving the
/// session with everything it may write.
///
/// Guards `Pending` in `supervise.rs` (a connect the keeper cannot start a
/// worker for is answered `EAGAIN`, and the keeper goes on): with
/// `std::thread::spawn` back in `Workers::spawn`, the keeper dies and the
/// daemon outlives the session.
#[test]
fn a_task_limit_cannot_make_the_keeper_die() {
    let Some(limit) = PidsLimit::new(48) else {
        eprintln!("skipped: needs root and the cgroup v1 pids controller");
        return;
    };
    let w = World::new();
    let marker = format!("nd7-rt2-keeper-{}", std::process::id());
    let body = format!(
        r#"
setsid sh -c 'sleep 300; : {marker}-daemon' </dev/null >/dev/null 2>&1 &
/usr/bin/python3 -c '
import os, socket, time
path = os.environ["TMPDIR"] + "/rt2.sock"
l = socket.socket(socket.AF_UNIX)
l.bind(path)
l.listen(8)
kids = []
def fill():
    while True:
        try:
            pid = os.fork()
        except OSError:
            return
        if pid == 0:
            time.sleep(120)
            os._exit(0)
        kids.append(pid)
# Threads of nd7 run end after a while and free their tasks, and a connect
# made in that moment gets its worker, which then waits (2 s, IDLE_FOR in
# supervise.rs) for the next: take the tasks freed, wait the worker out, and
# try again, so a connect meets a full limit with no worker to reuse.
r = "never tried"
for attempt in range(40):
    fill()
    time.sleep(0.25)
    fill()
    c = socket.socket(socket.AF_UNIX)
    try:
        c.connect(path)
        r = "connected"
        l.accept()[0].close()
        c.close()
        time.sleep(3)
    except OSError as e:
        r = "error %d" % e.errno
        break
for k in kids:
    os.kill(k, 9)
for k in kids:
    os.waitpid(k, 0)
open("connect.result", "w").write("%s after %d children\n" % (r, len(kids)))
' {marker}
echo agent-done
"#
    );
    let (child, stderr) = spawn_run(&w, &body, |cmd| limit.enter(cmd));
    let out = child.wait_with_output().expect("nd7 run");
    let survivors = running_with(&format!("{marker}-daemon"));
    kill_all(&marker);
    let said = stderr.lock().expect("stderr").clone();
    let result = std::fs::read_to_string(w.proj().join("connect.result")).unwrap_or_default();
    assert_eq!(
        survivors,
        Vec::<u32>::new(),
        "outlived the session; connect: {result}; nd7 run: {said}"
    );
    assert!(
        text(&out.stdout).contains("agent-done"),
        "the agent went on; connect: {result}; {said}"
    );
    assert!(out.status.success(), "{:?}: {said}", out.status);
    // The connect met the limit in the keeper, and was answered EAGAIN.
    assert!(result.starts_with("error 11 "), "{result}");
}

const PYTHON: &str = "/usr/bin/python3";

/// Python (x86-64) trying the routes to a stop the filter does not name, at
/// the session process `$1`: ptrace's seize and interrupt (a group stop
/// without a signal call), and a clone whose exit signal is SIGSTOP with
/// `CLONE_PARENT` (the kernel would send it to the session, the clone's
/// parent). Prints `NAME:RESULT`, and the session's state after each.
const OTHER_STOPS: &str = r#"/usr/bin/python3 - "$1" <<'PY'
import ctypes, errno, os, signal, sys, time
libc = ctypes.CDLL(None, use_errno=True)
pid = int(sys.argv[1])
def state():
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]
def sys_(nr, *args):
    r = libc.syscall(nr, *[ctypes.c_long(a) for a in args])
    return 0 if r == 0 else ctypes.get_errno()
# PTRACE_SEIZE = 0x4206, PTRACE_INTERRUPT = 0x4207
e = sys_(101, 0x4206, pid, 0, 0)
print(f"seize:{errno.errorcode.get(e, e) if e else 'OK'}", flush=True)
if e == 0:
    e = sys_(101, 0x4207, pid, 0, 0)
    print(f"interrupt:{errno.errorcode.get(e, e) if e else 'OK'}", flush=True)
    time.sleep(0.2)
    sys_(101, 17, pid, 0, 0)  # PTRACE_DETACH
# clone(CLONE_PARENT | SIGSTOP): the child's exit signal goes to our parent.
CLONE_PARENT = 0x8000
r = libc.syscall(56, ctypes.c_long(CLONE_PARENT | signal.SIGSTOP), 0, 0, 0, 0)
if r == 0:
    os._exit(0)
print(f"clone_parent:{'OK' if r > 0 else errno.errorcode.get(ctypes.get_errno())}", flush=True)
time.sleep(0.5)
print(f"after:{state()}", flush=True)
if state() == "T":
    os.kill(pid, signal.SIGCONT)
PY"#;

/// Stops the filter does not see by name: ptrace's interrupt of the
/// session and a `CLONE_PARENT` child whose exit signal is SIGSTOP. Held:
/// the seize is refused (Landlock's ptrace scope), and the kernel gives a
/// `CLONE_PARENT` child its parent's own exit signal, not the one asked
/// for; the session is never stopped.
#[test]
#[cfg(target_arch = "x86_64")]
fn ptrace_and_clone_exit_signals_do_not_stop_the_session() {
    let w = World::new();
    let out = w.run_agent(&format!("stops() {{ {OTHER_STOPS}\n}}\nstops $PPID"));
    let got = lines(&out);
    eprintln!("{got:?}");
    assert!(
        got.iter()
            .any(|l| l.starts_with("seize:") && l != "seize:OK"),
        "{got:?} {}",
        text(&out.stderr)
    );
    assert!(
        got.contains(&"after:S".to_string()) || got.contains(&"after:R".to_string()),
        "{got:?}"
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// Perl "hydra": a process that forks and exits at once, over and over, so
/// that its pid changes faster than a scan of `/proc` can kill it. Ends on
/// its own after 60 s (the test's bound), so a broken run leaves nothing
/// behind for good. Its command line carries `$2` to be found by.
const HYDRA: &str =
    r#"perl -e '$end = time + 60; $0 = "hydra-$ARGV[0]"; while (time < $end) { exit if fork; }' "#;

/// Processes of the tester whose command line names `marker`.
fn alive_with(marker: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if text(&cmdline).contains(marker) {
            found.push(pid);
        }
    }
    found
}

/// A hydra left behind by the agent: `nd7 run`'s end kills what a scan
/// finds, pass after pass until a pass kills nothing new, but a process
/// that has already forked and exited is gone by its kill. Held: the
/// session's `end_below` ends most heads and the keeper's last `sweep`
/// (which loops until it has no child) the rest; `nd7 run` returns with
/// the hydra gone and `run_end` written.
#[test]
fn a_hydra_does_not_outlive_the_run() {
    let w = World::new();
    let marker = format!("hydra-{}", std::process::id());
    let start = Instant::now();
    let out = w.run_agent(&format!(
        "for i in $(seq 16); do setsid {HYDRA} {marker} </dev/null >/dev/null 2>&1 & done\n\
         sleep 1\necho started"
    ));
    let took = start.elapsed();
    let left = alive_with(&marker);
    eprintln!(
        "nd7 run took {took:?}; left: {left:?}; {}",
        text(&out.stderr)
    );
    // Let any survivor end on its own before the assertion fails.
    if !left.is_empty() {
        std::thread::sleep(Duration::from_secs(61));
    }
    assert!(left.is_empty(), "the hydra outlived nd7 run: {left:?}");
    assert_eq!(lines(&out), ["started"], "{}", text(&out.stderr));
    let e = entries(&run_chain(&w));
    assert_eq!(e.last().map(|x| x["kind"].clone()), Some("run_end".into()));
}

/// Python run by the agent: moves the terminal's foreground to a process
/// group of its own and sets `TOSTOP`, then ends, leaving a daemon for the
/// session to report (which it does on the terminal).
const TAKE_FOREGROUND: &str = r#"/usr/bin/python3 - <<'PY'
import os, signal, termios
signal.signal(signal.SIGTTOU, signal.SIG_IGN)
os.setpgid(0, 0)
os.tcsetpgrp(2, os.getpgrp())
a = termios.tcgetattr(2)
a[3] |= termios.TOSTOP
termios.tcsetattr(2, termios.TCSANOW, a)
print("took", flush=True)
PY"#;

/// The session process has the default action for SIGTTOU (it resets it
/// for the program by resetting its own): the agent, in the same terminal
/// session, makes a group of its own the terminal's foreground
/// (`TIOCSPGRP`, allowed) with `TOSTOP` set and ends; the session's next
/// write to the terminal ("ended 1 process …") makes the kernel's tty
/// driver stop it. No call names a signal, so the filter sees nothing.
/// `nd7 run` is run as a job of a job-controlling shell on a pty, as a
/// user's shell runs it.
#[test]
fn taking_the_terminal_foreground_does_not_stop_the_session() {
    let w = World::new();
    let agent = w.agent(&format!(
        "echo $PPID > session.pid.new; mv session.pid.new session.pid\n\
         grep SigIgn /proc/$$/status > sigign\n\
         setsid sleep 1000 </dev/null >/dev/null 2>&1 &\n\
         {TAKE_FOREGROUND}\ntouch agent-done"
    ));
    let spawn = w.proj().join("nd7-run.py");
    std::fs::write(
        &spawn,
        "import pty, sys\nsys.exit(pty.spawn(sys.argv[1:]) >> 8)\n",
    )
    .expect("nd7-run.py");
    let shell = format!("set -m; '{ND7}' run '{agent}'; echo \"rc:$?\"");
    let mut child = w
        .command(
            PYTHON,
            &[&spawn.display().to_string(), "/bin/bash", "-c", &shell],
        )
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("nd7 run on a pty");
    let ended = |child: &mut std::process::Child| child.try_wait().ok().flatten().is_some();
    let start = Instant::now();
    let mut stopped = None;
    while start.elapsed() < Duration::from_secs(60) && !ended(&mut child) {
        // The agent's script is the program: its parent is the session.
        if let Ok(pid) = std::fs::read_to_string(w.proj().join("session.pid")) {
            let session: u32 = pid.trim().parse().unwrap_or(0);
            let st = std::fs::read_to_string(format!("/proc/{session}/stat")).unwrap_or_default();
            let state = st
                .rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().next());
            if state == Some("T") && w.proj().join("agent-done").exists() {
                stopped = Some(session);
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    if !ended(&mut child) {
        let ps = std::process::Command::new("ps")
            .args(["-eo", "pid,ppid,pgid,tpgid,stat,wchan:20,args", "--forest"])
            .output()
            .expect("ps");
        let ps = text(&ps.stdout);
        let around: Vec<&str> = ps
            .lines()
            .filter(|l| l.contains("nd7") || l.contains("agent") || l.contains("sleep 1000"))
            .collect();
        eprintln!("not ended after the bound:\n{}", around.join("\n"));
    }
    if stopped.is_none() && !ended(&mut child) {
        // Whatever it is, the user's SIGTERM to bash's job.
        let _ = std::process::Command::new("pkill")
            .args(["-TERM", "-P", &child.id().to_string()])
            .status();
    }
    if let Some(session) = stopped {
        // The user's SIGTERM to nd7 run (the front, the keeper's parent).
        let ppid = |pid: u32| -> u32 {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .unwrap_or_default()
                .rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().nth(1))
                .and_then(|p| p.parse().ok())
                .unwrap_or(0)
        };
        let front = ppid(ppid(session));
        // SAFETY: kill with a pid read just now from /proc.
        unsafe { libc::kill(front as i32, libc::SIGTERM) };
    }
    let out = child.wait_with_output().expect("ended");
    eprintln!("{}", text(&out.stdout));
    assert_eq!(stopped, None, "the session was stopped by the terminal");
    // The program still has SIGTTIN and SIGTTOU at their default.
    let ignored = std::fs::read_to_string(w.proj().join("sigign")).expect("sigign");
    let mask = u64::from_str_radix(ignored.trim().trim_start_matches("SigIgn:").trim(), 16)
        .expect("a mask");
    assert_eq!(mask & (0b11 << 20), 0, "{ignored}");
    assert!(text(&out.stdout).contains("rc:0"), "{}", text(&out.stdout));
}
