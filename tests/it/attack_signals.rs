//! Fresh eyes on issue 29 items 5 and 6 (ADR-0096, ADR-0097): attacks on
//! "nothing inside stops the session, the user's signals end the run and
//! everything in it" and "a hook's event is never lost without the log
//! saying so", each as the agent (a script under `nd7 run`, the ordinary
//! account via World). Each test says whether the attack held or broke.
#![cfg(target_os = "linux")]

use std::time::{Duration, Instant};

use crate::runs::*;
use crate::world::*;

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

/// Perl that sends `$1` whole requests to the door as fast as it can from
/// `$2` processes, each an event of the agent's own (session `flood`),
/// closing each connection once sent; makes `flooded` when all are sent.
const WHOLE_FLOOD: &str = r#"perl -MSocket -MIO::Socket::UNIX -e '
$SIG{PIPE} = "IGNORE";
my $p = q({"session_id":"flood","hook_event_name":"Stop"});
my $b = pack("C", 1) . pack("Q<", 1) . pack("V", 0) . pack("V", length $p) . $p;
my $req = pack("V", length $b) . $b;
my @kids;
for my $k (1..$ARGV[1]) {
  my $pid = fork;
  if (!$pid) {
    for (1..$ARGV[0] / $ARGV[1]) {
      my $c = IO::Socket::UNIX->new(Type => SOCK_STREAM(), Peer => "$ENV{ND7_RUN}/record.sock") or next;
      syswrite($c, $req);
      close $c;
    }
    exit 0;
  }
  push @kids, $pid;
}
waitpid($_, 0) for @kids;
open(my $f, ">", "flooded"); close $f;' "#;

/// The hook that must be recorded, and how it ended.
const HOOK: &str = r#"echo '{"session_id":"SESSION","hook_event_name":"Stop"}' | timeout 100 "$ND7" record 2> hook.err; echo "rc:$?"; cat hook.err"#;

/// A flood of whole requests (fast, cheap to send, each an append to
/// serve) from many processes, with a real hook in the middle of it and
/// the program ending right after. Whole requests queue without bound for
/// the door's 12 threads: is the hook's entry in the log, or does
/// `nd7 verify` say the chain is incomplete? Held: the door serves whole
/// requests about as fast as the floor can connect (each connect passes
/// through the keeper), so the hook waits behind a short queue and is
/// recorded.
#[test]
fn a_flood_of_whole_requests_does_not_lose_a_hook_silently() {
    let w = World::new();
    let out = w.run_agent(&format!(
        "{WHOLE_FLOOD} 6000 6 &\nsleep 0.5\n{}\n",
        HOOK.replace("SESSION", "in-flood")
    ));
    let chain = run_chain(&w);
    let e = entries(&chain);
    let flood = e.iter().filter(|x| x["session"] == "flood").count();
    let hook = e.iter().any(|x| x["session"] == "in-flood");
    let end = e.last().cloned().unwrap_or_default();
    let mut reasons: Vec<String> = e
        .iter()
        .filter(|x| x["kind"] == "refused")
        .map(|x| x["body"]["reason"].to_string())
        .collect();
    reasons.dedup();
    eprintln!("refusals: {reasons:?}");
    let verified = verify(&w, &chain);
    eprintln!(
        "out: {:?} {}\nflood entries: {flood}; hook recorded: {hook}\nrun_end: {end}\nverify: {} {}",
        lines(&out),
        text(&out.stderr),
        verified.status,
        text(&verified.stdout)
    );
    assert!(
        hook || verified.status.code() != Some(0),
        "the hook's event is lost and nd7 verify passes the chain"
    );
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

/// Perl that opens `$1` connections to the door, sends half a request on
/// each, makes `holding` and sleeps: the run's end kills it, and the door
/// then finds every connection ended short.
const HALF_SENT: &str = r#"perl -MSocket -MIO::Socket::UNIX -e '
my @s;
for (1..$ARGV[0]) {
  my $c = IO::Socket::UNIX->new(Type => SOCK_STREAM(), Peer => "$ENV{ND7_RUN}/record.sock") or last;
  syswrite($c, pack("V", 1000) . "x");
  push @s, $c;
}
open(my $f, ">", "holding"); close $f;
sleep 1000;' "#;

/// Connections left half-sent when the program ends: the run's end kills
/// their holder, and the door refuses each as it ends, possibly after
/// `run_end` is written. Is the chain still one `nd7 verify` passes only
/// with `run_end` last (no entry after the tally)? Broke: `refused`
/// entries of door `record` follow `run_end` (the door is never drained
/// before the tally), and `nd7 verify` passes the chain. These were the
/// agent's own half-sent requests, but the same path left a drop
/// (`door_dropped`) or a hook's request still queued for the door's
/// threads outside the tally, or unserved and unwritten when the session
/// exited. Fixed: the session drains the door (`door::drain`; every floor
/// process is dead by then) before `run_end` (ADR-0099). Guards `drain`.
#[test]
fn connections_ended_by_the_runs_end_write_nothing_after_run_end() {
    let w = World::new();
    let out = w.run_agent(&format!(
        "{HALF_SENT} 200 </dev/null >/dev/null 2>&1 &\nwait_for holding\necho held"
    ));
    assert_eq!(lines(&out), ["held"], "{}", text(&out.stderr));
    let chain = run_chain(&w);
    let e = entries(&chain);
    let end = e
        .iter()
        .position(|x| x["kind"] == "run_end")
        .expect("run_end");
    let after: Vec<_> = e[end + 1..].iter().map(|x| x["kind"].clone()).collect();
    let verified = verify(&w, &chain);
    eprintln!(
        "refused in run_end: {}; entries after run_end: {after:?}; verify: {} {}",
        e[end]["body"]["refused"],
        verified.status,
        text(&verified.stdout).lines().next().unwrap_or("")
    );
    assert!(after.is_empty(), "entries after run_end: {after:?}");
    assert_eq!(
        verified.status.code(),
        Some(0),
        "{}",
        text(&verified.stdout)
    );
}
