//! Attacks on the floor through processes rather than paths (issue 10,
//! items 4, 5 and 8): pushing input into the user's terminal, talking to
//! other programs' sockets, signalling the user's other processes, and
//! leaving processes running after the session, and reaching `nd7 run`'s
//! own descriptors and /proc entries. Each is tried as an
//! ordinary account, the agent a shell script, Bash calls through `$EXEC`.
#![cfg(target_os = "linux")]

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::runs::*;
use crate::world::*;

/// Waits (at most a minute) for `done`; panics with `what` otherwise.
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(60), "never: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// A process's state letter, `None` once it is gone (or reaped).
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

/// Whether any process's command line contains `marker`.
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

/// `nd7 run` on the agent script with its stderr kept, returning once the
/// session has said its pid.
fn start(w: &World, body: &str) -> (Child, u32, Arc<Mutex<String>>) {
    let agent = w.agent(body);
    let mut child = w
        .nd7(&["run", &agent])
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
    eventually("the session announces itself", || {
        seen.lock().expect("stderr").contains("nd7 run: run ")
    });
    let text = seen.lock().expect("stderr").clone();
    let pid = text
        .split("nd7 run: run ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no session announced: {text:?}"));
    (child, pid, seen)
}

// ---------------------------------------------------------------- item 4

/// Injects $2 into its standard input (the terminal) with TIOCSTI, then
/// tries every other refused request; appends `label:errno` lines to
/// `results` (0 for success).
const INJECT: &str = r#"
use strict;
my ($label, $text) = @ARGV;
open my $out, ">>", "results" or die "results: $!";
my $err = 0;
for my $c (split //, $text) {
    my $byte = $c;
    unless (ioctl(STDIN, 0x5412, $byte)) { $err = $! + 0; last }
}
print $out "$label:$err\n";
exit if $label ne "agent";
my @others = (["TIOCLINUX", 0x541C], ["TIOCCONS", 0x541D], ["TIOCSETD", 0x5423],
    ["KDSIGACCEPT", 0x4B4E], ["KDSKBENT", 0x4B47], ["KDSKBSENT", 0x4B49],
    ["KDSETKEYCODE", 0x4B4D], ["KDSKBMODE", 0x4B45], ["VT_ACTIVATE", 0x5606],
    ["VT_SETMODE", 0x5602]);
for my $o (@others) {
    my $arg = pack("i", 0);
    my $ok = ioctl(STDIN, $o->[1], $arg);
    print $out "$o->[0]:" . ($ok ? 0 : $! + 0) . "\n";
}
"#;

/// Sets `dev.tty.legacy_tiocsti` to 1 for the test where it is 0 (and the
/// tests run as root), so that the attack would work without nd7; puts the
/// old value back when dropped.
struct LegacyTiocsti(Option<String>);

impl LegacyTiocsti {
    fn on() -> LegacyTiocsti {
        const KNOB: &str = "/proc/sys/dev/tty/legacy_tiocsti";
        match std::fs::read_to_string(KNOB) {
            Ok(v) if v.trim() == "0" && std::fs::write(KNOB, "1").is_ok() => LegacyTiocsti(Some(v)),
            _ => LegacyTiocsti(None),
        }
    }
}

impl Drop for LegacyTiocsti {
    fn drop(&mut self) {
        if let Some(old) = &self.0 {
            let _ = std::fs::write("/proc/sys/dev/tty/legacy_tiocsti", old);
        }
    }
}

/// A pseudo-terminal pair: (the terminal emulator's side, the shell's side).
fn pty() -> (OwnedFd, OwnedFd) {
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes two descriptors into the locals; the other
    // arguments may be null.
    let r = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(r, 0, "openpty");
    // SAFETY: both descriptors were just opened and are owned by nothing else.
    unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) }
}

/// Item 4. `nd7 run` is started on a terminal (a pty the test made its
/// controlling terminal). The agent, and a command through the exit, push a
/// line into that terminal with TIOCSTI: without nd7 the user's shell would
/// read and run it, unconfined, once `nd7 run` returns. The test reads the
/// terminal as that shell would, and finds nothing. Every other refused
/// ioctl fails with EPERM too (on a pty most would otherwise fail with
/// ENOTTY, and TIOCSETD would succeed).
///
/// Guards the ioctl checks in `sandbox::linux::seccomp::arch_body` (and the
/// filter's installation in `Confinement::confine`): without them the
/// injected line is read back and the errnos differ.
#[test]
fn the_agent_cannot_push_input_into_the_terminal() {
    let _legacy = LegacyTiocsti::on();
    let w = World::new();
    std::fs::write(w.proj().join("inject.pl"), INJECT).expect("inject.pl");
    let agent = w.agent(
        r#"
perl inject.pl agent "touch $OUT/injected-agent
"
"$EXEC" "perl inject.pl exec 'touch $OUT/injected-exec
'"
"#,
    );
    let (master, slave) = pty();
    let mut cmd = w.nd7(&["run", &agent]);
    for (set, fd) in [(0, &slave), (1, &slave), (2, &slave)] {
        let stdio = Stdio::from(fd.try_clone().expect("dup"));
        match set {
            0 => cmd.stdin(stdio),
            1 => cmd.stdout(stdio),
            _ => cmd.stderr(stdio),
        };
    }
    // SAFETY: setsid and ioctl are async-signal-safe; the child makes the
    // pty on its stdin its controlling terminal, as a login shell's is.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("nd7 run on the pty");
    // What the terminal shows, drained so the agent never blocks on it.
    let screen = Arc::new(Mutex::new(Vec::new()));
    let shown = screen.clone();
    let mut reader = std::fs::File::from(master.try_clone().expect("dup master"));
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 {
                break;
            }
            shown.lock().expect("screen").extend_from_slice(&buf[..n]);
        }
    });
    let status = child.wait().expect("nd7 run ends");
    let screen = String::from_utf8_lossy(&screen.lock().expect("screen")).into_owned();
    assert!(status.success(), "{screen}");

    // The shell's side of the terminal, read as the user's shell would once
    // nd7 run has returned: nothing was pushed into it.
    // SAFETY: fcntl on a descriptor this test owns.
    unsafe { libc::fcntl(slave.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
    let mut pending = [0u8; 4096];
    let mut shell = std::fs::File::from(slave);
    let read_back = shell.read(&mut pending);
    let injected = match read_back {
        Ok(n) => String::from_utf8_lossy(&pending[..n]).into_owned(),
        Err(e) => {
            assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}");
            String::new()
        }
    };
    assert_eq!(injected, "", "the user's shell would run this");

    let results = read(&w.proj().join("results"));
    let eperm = libc::EPERM.to_string();
    let expected: Vec<String> = [
        "agent",
        "TIOCLINUX",
        "TIOCCONS",
        "TIOCSETD",
        "KDSIGACCEPT",
        "KDSKBENT",
        "KDSKBSENT",
        "KDSETKEYCODE",
        "KDSKBMODE",
        "VT_ACTIVATE",
        "VT_SETMODE",
        "exec",
    ]
    .iter()
    .map(|name| format!("{name}:{eperm}"))
    .collect();
    assert_eq!(results.lines().collect::<Vec<_>>(), expected, "{screen}");
    assert!(!w.outside().join("injected-agent").exists());
    assert!(!w.outside().join("injected-exec").exists());
}

/// The system's Python, which the account can run (a `python3` found first
/// on the tests' own PATH may live where it cannot, as pyenv's shims do).
const PYTHON: &str = "/usr/bin/python3";

/// The user's other terminal, held by a process of the account outside
/// any session (as a terminal emulator holds one): it opens a pty, prints
/// the name of the terminal's side, and "types" `typed-secret` into it
/// every tenth of a second, as a user typing a password there would.
const OTHER_TERMINAL: &str = r#"
import os, sys, time
master, slave = os.openpty()
print(os.ttyname(slave), flush=True)
while True:
    os.write(master, b"typed-secret\n")
    time.sleep(0.1)
"#;

/// A terminal the agent opens and reads a line from (only opens, given a
/// third argument), and what it got: `read:LINE`, `opened` or
/// `refused:ERRNO`.
const READ_TERMINAL: &str = r#"
my ($how, $tty, $open_only) = @ARGV;
open(my $r, ">>", "results");
if (!open(my $t, "<", $tty)) { print $r "$how:refused:", $!+0, "\n" }
elsif ($open_only) { print $r "$how:opened\n" }
else { my $line = <$t>; print $r "$how:read:$line" }
"#;

/// Another terminal of the user's (`/dev/pts/N`, the account's own, so
/// readable by it) is read by the agent and by a command through the exit:
/// what the user types there (a password at a prompt) would reach the agent.
/// Neither can open it. The terminal `nd7 run` was itself started on stays
/// readable by name.
///
/// Guards the `/dev/pts` exclusion in `policy::landlock_rules` (with
/// `Policy::terminal`): without it both read `typed-secret`; without the
/// exception for the session's own terminal the last line is refused.
#[test]
fn the_agent_cannot_read_the_users_other_terminals() {
    let w = World::new();
    std::fs::write(w.outside().join("terminal.py"), OTHER_TERMINAL).expect("terminal.py");
    std::fs::write(w.proj().join("read.pl"), READ_TERMINAL).expect("read.pl");
    let script = w.outside().join("terminal.py").display().to_string();
    let mut other = w
        .command(PYTHON, &[&script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the other terminal");
    let mut name = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(other.stdout.take().expect("stdout")),
        &mut name,
    )
    .expect("its name");
    let tty = name.trim().to_string();
    if !tty.starts_with("/dev/pts/") {
        let out = other.wait_with_output().expect("ended");
        panic!("no terminal: {tty:?} {out:?}");
    }
    // nd7 run itself on a terminal of the account's: python's pty.spawn,
    // as the account, runs it on a fresh pty (stdin: nothing to copy).
    let agent = w.agent(&format!(
        r#"
perl read.pl agent {tty}
"$EXEC" "perl read.pl exec {tty}"
perl read.pl own "$(readlink /proc/self/fd/0)" open
"#
    ));
    let nd7 = w.proj().join("nd7-run.py");
    std::fs::write(
        &nd7,
        "import pty, sys\nsys.exit(pty.spawn(sys.argv[1:]) >> 8)\n",
    )
    .expect("nd7-run.py");
    let out = w
        .command(PYTHON, &[&nd7.display().to_string(), ND7, "run", &agent])
        .stdin(Stdio::null())
        .output()
        .expect("nd7 run on a pty");
    let _ = other.kill();
    let _ = other.wait();
    assert!(out.status.success(), "{}", text(&out.stdout));
    let eacces = libc::EACCES.to_string();
    assert_eq!(
        read(&w.proj().join("results")).lines().collect::<Vec<_>>(),
        [
            format!("agent:refused:{eacces}"),
            format!("exec:refused:{eacces}"),
            "own:opened".to_string(),
        ],
        "{}",
        text(&out.stdout)
    );
}

/// Devices the account can open, tried in turn: FUSE, TUN, the kernel's
/// log, the hardware random source, the first console.
const OTHER_DEVICES: &[&str] = &[
    "/dev/fuse",
    "/dev/net/tun",
    "/dev/kmsg",
    "/dev/hwrng",
    "/dev/tty0",
];

/// A device the account can open outside (here FUSE, TUN or the kernel's
/// log; on a desktop a camera, a microphone, input devices) cannot be
/// opened by the agent nor by a command through the exit; the named
/// devices still work: `/dev/urandom` read, `/dev/null` written.
///
/// The same devices through a bind mount of `/dev` elsewhere (a chroot's),
/// which Landlock judges by that path.
///
/// Guards the `DEV` exclusion in `policy::landlock_rules` (ADR-0085):
/// with `/dev` carved only around `/dev/pts`, as before, both open every
/// device on the list; and `sandbox::device_mounts` among the secrets
/// (`src/run.rs`): without it both open them through the bind.
#[test]
fn the_agent_opens_no_device_but_the_named_ones() {
    let w = World::new();
    let bound = w.bind(Path::new("/dev"), "chroot/dev");
    let try_open = r#"for d in "$@"; do if (exec 3<"$d") 2>/dev/null; then echo "$d"; fi; done"#;
    let mut candidates: Vec<String> = OTHER_DEVICES.iter().map(|d| d.to_string()).collect();
    candidates.extend(
        OTHER_DEVICES
            .iter()
            .map(|d| format!("{}{}", bound.display(), &d["/dev".len()..])),
    );
    let mut args = vec!["-c", try_open, "try"];
    args.extend(candidates.iter().map(String::as_str));
    let outside = w.command("bash", &args).output().expect("bash");
    let openable: Vec<String> = text(&outside.stdout).lines().map(str::to_string).collect();
    assert!(
        openable.iter().any(|d| d.starts_with("/dev/"))
            && openable
                .iter()
                .any(|d| d.starts_with(&*bound.to_string_lossy())),
        "the account opens none of {candidates:?} outside, or not both ways: nothing to test here ({openable:?})"
    );
    let list = openable.join(" ");
    let out = w.run_agent(&format!(
        r#"
try() {{ {try_open}; }}
try {list} | sed 's/^/agent:/'
"$EXEC" 'for d in {list}; do if (exec 3<"$d") 2>/dev/null; then echo "exec:$d"; fi; done'
head -c 4 /dev/urandom | wc -c | sed 's/^/urandom:/'
"$EXEC" 'echo x > /dev/null && echo null:ok'
"#
    ));
    assert_eq!(
        text(&out.stdout).lines().collect::<Vec<_>>(),
        ["urandom:4", "null:ok"],
        "{}",
        text(&out.stderr)
    );
}

// ---------------------------------------------------------------- item 5

/// A server of the account's, started outside the floor, which notes every
/// connection and datagram it receives: a stream listener and a datagram
/// socket, both abstract, named after `tag`, and a stream listener on a path
/// (a stand-in for any program's socket, put in `~/.ssh`).
const LISTENER: &str = r#"
use strict; use IO::Socket::UNIX; use IO::Select;
my ($tag, $log, $ready, $path) = @ARGV;
my $s = IO::Socket::UNIX->new(Local => "\0$tag", Listen => 5) or die "stream: $!";
my $d = IO::Socket::UNIX->new(Local => "\0$tag-dgram", Type => SOCK_DGRAM) or die "dgram: $!";
my $p = IO::Socket::UNIX->new(Local => $path, Listen => 5) or die "path: $!";
open my $r, ">", $ready; close $r;
my $sel = IO::Select->new($s, $d, $p);
while (my @ready = $sel->can_read) {
    for my $h (@ready) {
        open my $l, ">>", $log;
        if ($h == $d) { my $m; $d->recv($m, 100); print $l "datagram:$m\n" }
        else { my $c = $h->accept; print $l "connection\n"; close $c }
        close $l;
    }
}
"#;

/// Item 5, sockets. Servers of the same account, outside the floor: a tmux
/// server (which runs whatever a client asks, unconfined), an ssh-agent
/// holding a key, its socket inside `~/.ssh` (which the floor cannot read,
/// but a socket there is reached without reading), and abstract sockets. The
/// agent, and commands through the exit, try each; none is reached. The
/// session's own sockets (a server started through the exit, on a path and
/// an abstract name) and TCP still work.
///
/// Guards `Supervisor::connect_unix` (`allows_file` and `allows_name`):
/// without them tmux runs the command, ssh-add lists the key and the
/// listener logs connections; and the abstract datagram guards the signal
/// and socket scope (`scope_self`).
#[test]
fn other_programs_sockets_are_out_of_reach() {
    let w = World::new();
    let tag = format!("nd7-f2-{}", std::process::id());
    let out = w.outside();
    let tmux_sock = out.join("tmux.sock");
    let log = out.join("listener.log");
    let ready = out.join("listener.ready");
    std::fs::write(out.join("listener.pl"), LISTENER).expect("listener.pl");

    // The account's own servers, started outside any session.
    let tmux = w
        .command("tmux", &["-S", &tmux_sock.display().to_string()])
        .args(["new-session", "-d", "sleep 600"])
        .output()
        .expect("tmux");
    assert!(tmux.status.success(), "{}", text(&tmux.stderr));
    let mut listener = w
        .command(
            "perl",
            &[
                &out.join("listener.pl").display().to_string(),
                &tag,
                &log.display().to_string(),
                &ready.display().to_string(),
                &w.home().join(".ssh/stand-in.sock").display().to_string(),
            ],
        )
        .spawn()
        .expect("listener");
    eventually("the listener is ready", || ready.exists());
    let agent_sock = w.home().join(".ssh/agent.sock");
    let ssh_agent = which("ssh-agent").then(|| SshAgent::start(&w, &agent_sock));
    let port = tcp_service();

    let tmux = format!("tmux -S '{}'", tmux_sock.display());
    let body = format!(
        r#"
T="{tag}"
{tmux} new-window "touch $OUT/tmux-agent" 2>/dev/null; echo "tmux-agent:$?"
"$EXEC" "{tmux} new-window 'touch $OUT/tmux-exec'" 2>/dev/null; echo "tmux-exec:$?"
export SSH_AUTH_SOCK="$HOME_DIR/.ssh/agent.sock"
ssh-add -L >/dev/null 2>&1; echo "ssh-agent:$?"
"$EXEC" 'ssh-add -L >/dev/null 2>&1'; echo "ssh-agent-exec:$?"
connect='use IO::Socket::UNIX; my $a = $ARGV[0]; $a =~ s/^@/\0/; IO::Socket::UNIX->new(Peer => $a) or exit 1'
perl -e "$connect" "@$T"; echo "abstract:$?"
"$EXEC" "perl -e '$connect' '@$T'"; echo "abstract-exec:$?"
perl -e "$connect" "$HOME_DIR/.ssh/stand-in.sock"; echo "path:$?"
"$EXEC" "perl -e '$connect' '$HOME_DIR/.ssh/stand-in.sock'"; echo "path-exec:$?"
send='use IO::Socket::UNIX; my $s = IO::Socket::UNIX->new(Type => SOCK_DGRAM) or exit 2; $s->send("hi", 0, pack("S", 1) . "\0$ARGV[0]-dgram") or exit 1'
perl -e "$send" "$T"; echo "abstract-dgram:$?"
"$EXEC" "perl -e '$send' '$T'"; echo "abstract-dgram-exec:$?"
# The session's own servers, started through the exit, stay reachable.
# (a leading @ names an abstract socket)
serve='use IO::Socket::UNIX; my $a = $ARGV[0]; $a =~ s/^@/\0/; my $l = IO::Socket::UNIX->new(Local => $a, Listen => 5) or die "$!"; open my $r, ">", "$ARGV[1]"; close $r; while (my $c = $l->accept) {{ print $c "own-ok\n"; close $c }}'
"$EXEC" "perl -e '$serve' '$TMPDIR/own.sock' own-path.ready >/dev/null 2>&1 & perl -e '$serve' '@$T-own' own-name.ready >/dev/null 2>&1 &"
wait_for own-path.ready; wait_for own-name.ready
ask='use IO::Socket::UNIX; my $a = $ARGV[0]; $a =~ s/^@/\0/; my $c = IO::Socket::UNIX->new(Peer => $a) or die "$!\n"; print scalar <$c>'
perl -e "$ask" "$TMPDIR/own.sock"
perl -e "$ask" "@$T-own"
"$EXEC" "perl -e '$ask' '$TMPDIR/own.sock'"
curl -s "http://localhost:{port}/"
"#
    );
    // A local TCP service, reached through the session's proxy (issue 31).
    std::fs::create_dir_all(w.home().join(".nd7")).expect("mkdir");
    std::fs::write(
        w.home().join(".nd7/grants"),
        format!("net localhost:{port}\n"),
    )
    .expect("grants");
    let out_run = w.run_agent(&body);
    let _ = w
        .command(
            "tmux",
            &["-S", &tmux_sock.display().to_string(), "kill-server"],
        )
        .output();
    let _ = listener.kill();
    let _ = listener.wait();
    drop(ssh_agent);
    let stdout = text(&out_run.stdout);
    let mut expected = vec![
        "tmux-agent:1",
        "tmux-exec:1",
        "ssh-agent:2",
        "ssh-agent-exec:2",
        "abstract:1",
        "abstract-exec:1",
        "path:1",
        "path-exec:1",
        "abstract-dgram:1",
        "abstract-dgram-exec:1",
        "own-ok",
        "own-ok",
        "own-ok",
        "tcp-ok",
    ];
    // Without ssh-agent on this machine, the path listener stands in for it.
    let ssh = which("ssh-agent");
    if !ssh {
        expected.retain(|l| !l.starts_with("ssh-agent"));
    }
    let got: Vec<&str> = stdout
        .lines()
        .filter(|l| ssh || !l.starts_with("ssh-agent"))
        .collect();
    assert_eq!(got, expected, "{}", text(&out_run.stderr));
    assert!(!w.outside().join("tmux-agent").exists());
    assert!(!w.outside().join("tmux-exec").exists());
    assert_eq!(read(&log), "", "the outside listener was reached");
}

/// A local HTTP service on the loopback answering `tcp-ok`, reached
/// through the session's proxy. It reads the request's head before it
/// answers, as any server does: one that answers first and closes races
/// the request (a reset can take its answer with it).
fn tcp_service() -> u16 {
    use std::io::{BufRead, Write};
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").expect("tcp");
    let port = tcp.local_addr().expect("port").port();
    std::thread::spawn(move || {
        for conn in tcp.incoming().flatten() {
            let mut reader = std::io::BufReader::new(&conn);
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                line.clear();
            }
            let _ = (&conn).write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\ntcp-ok\n",
            );
        }
    });
    port
}

fn which(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The account's ssh-agent, holding a key, its socket at the given path;
/// killed when dropped.
struct SshAgent(Option<u32>);

impl SshAgent {
    fn start(w: &World, socket: &Path) -> SshAgent {
        let key = w.outside().join("id_test");
        let keygen = w
            .command(
                "ssh-keygen",
                &[
                    "-q",
                    "-t",
                    "ed25519",
                    "-N",
                    "",
                    "-f",
                    &key.display().to_string(),
                ],
            )
            .output()
            .expect("ssh-keygen");
        assert!(keygen.status.success(), "{}", text(&keygen.stderr));
        let agent = w
            .command("ssh-agent", &["-s", "-a", &socket.display().to_string()])
            .output()
            .expect("ssh-agent");
        let said = text(&agent.stdout);
        let pid = said
            .split("SSH_AGENT_PID=")
            .nth(1)
            .and_then(|rest| rest.split(';').next())
            .and_then(|pid| pid.parse().ok());
        let add = w
            .command("ssh-add", &[&key.display().to_string()])
            .env("SSH_AUTH_SOCK", socket)
            .output()
            .expect("ssh-add");
        assert!(add.status.success(), "{}", text(&add.stderr));
        SshAgent(pid)
    }
}

impl Drop for SshAgent {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            let _ = Command::new("kill").arg(pid.to_string()).status();
        }
    }
}

/// Item 5, signals. A process of the account outside the session is out of
/// reach of the agent and of its commands (SIGSTOP, SIGKILL), and so is
/// `nd7 run`'s keeper; inside the session, the agent and commands through
/// the exit still signal each other.
///
/// Guards `scope_self` (the session's signal scope, in `keeper::split`):
/// without it the outside process is stopped and killed.
#[test]
fn signals_reach_only_the_session() {
    let w = World::new();
    let mut victim = w
        .command("sleep", &["600"])
        .spawn()
        .expect("the account's own process");
    let victim_pid = victim.id();
    let (child, session, _) = start(
        &w,
        &format!(
            r#"
kill -STOP {victim_pid} 2>/dev/null; echo "stop-outside:$?"
"$EXEC" "kill -KILL {victim_pid}" 2>/dev/null; echo "kill-outside-exec:$?"
keeper=$(awk '{{print $4}}' /proc/$PPID/stat)
kill -0 "$keeper" 2>/dev/null; echo "signal-keeper:$?"
"$EXEC" 'echo $$ > cmd.new && mv cmd.new cmd.pid; exec sleep 600' &
wait_for cmd.pid
kill -TERM "$(cat cmd.pid)"; echo "agent-kills-command:$?"
wait
sleep 600 & mine=$!
"$EXEC" "kill -TERM $mine"; echo "command-kills-agents:$?"
wait
"#
        ),
    );
    let out = child.wait_with_output().expect("nd7 run");
    let alive = state(victim_pid);
    let _ = victim.kill();
    let _ = victim.wait();
    assert_eq!(
        text(&out.stdout).lines().collect::<Vec<_>>(),
        [
            "stop-outside:1",
            "kill-outside-exec:1",
            "signal-keeper:1",
            "agent-kills-command:0",
            "command-kills-agents:0",
        ],
        "run {session}"
    );
    assert!(matches!(alive, Some('S' | 'R')), "{alive:?}");
}

// ---------------------------------------------------------------- item 8

/// Item 8. A `setsid` daemon started through the exit under a grant keeps
/// writing the granted directory: `nd7 deny` names its command as still
/// running under that grant, and when the session ends it is killed, as is
/// one the agent started itself. A daemon started before the agent kills
/// the session process itself is ended by the keeper.
///
/// Guards `keeper::sweep` (with the subreaper): without it the daemons are
/// still running after `nd7 run` returns (the second session, whose session
/// process the agent kills, relies on it alone); `keeper::end_leftovers`
/// (the session asking the keeper before `run_end`): without it the run's
/// chain has no `processes_ended` entry; and `running::deny_report` with the
/// keeper's tracking of listeners: without them deny says nothing.
#[test]
fn nothing_the_session_started_outlives_it() {
    let w = World::new();
    let data = w.outside().join("data");
    std::fs::create_dir(&data).expect("data");
    let marker = format!("nd7-daemon-{}", std::process::id());
    let (child, session, stderr) = start(
        &w,
        &format!(
            r#"
touch ready; wait_for granted
"$EXEC" "setsid sh -c 'while :; do date >> {data}/log; sleep 0.2; done # {marker}-exec' </dev/null >/dev/null 2>&1 &"
setsid sh -c 'while :; do sleep 0.2; done # {marker}-agent' </dev/null >/dev/null 2>&1 &
wait_for "{data}/log"
touch started; wait_for denied
"#,
            data = data.display()
        ),
    );
    w.wait_for("ready");
    let data_path = data.display().to_string();
    let allow = w.nd7(&["allow", &data_path]).output().expect("allow");
    assert!(allow.status.success(), "{}", text(&allow.stderr));
    w.signal("granted");
    w.wait_for("started");
    let deny = w.nd7(&["deny", &data_path]).output().expect("deny");
    let said = text(&deny.stdout);
    assert!(deny.status.success(), "{}", text(&deny.stderr));
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(lines.len(), 3, "{said}");
    assert_eq!(
        lines[1],
        format!(
            "run {session}: 1 command started with writes under {data_path} allowed is still running and keeps that until it ends (nd7 run ends it when it exits):"
        )
    );
    assert!(
        lines[2].starts_with("  process group ") && lines[2].contains(&format!("{marker}-exec")),
        "{said}"
    );
    eventually("both daemons run, and nothing else with the mark", || {
        running_with(&marker).len() == 2
    });
    w.signal("denied");
    let out = child.wait_with_output().expect("nd7 run");
    assert!(out.status.success());
    assert_eq!(
        running_with(&marker),
        Vec::<u32>::new(),
        "outlived the session"
    );
    // Its stderr is read on a thread of its own, which may lag the exit.
    eventually("nd7 run says what it ended", || {
        stderr.lock().expect("stderr").contains("nd7 run: ended ")
    });
    // And the run's chain says it, from outside, before its last entry.
    let chain = run_chains(&w);
    assert_eq!(chain.len(), 1, "{chain:?}");
    let kinds: Vec<String> = chain[0]
        .iter()
        .filter(|e| e["source"] == "exit:nd7")
        .map(|e| e["kind"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(
        kinds.iter().rev().take(2).collect::<Vec<_>>(),
        ["run_end", "processes_ended"],
        "{kinds:?}"
    );
    let ended = chain[0]
        .iter()
        .find(|e| e["kind"] == "processes_ended")
        .expect("processes_ended");
    let count = ended["body"]["count"].as_u64().expect("count");
    assert!(count >= 2, "both daemons at least: {ended}");
    assert_eq!(
        ended["body"]["processes"].as_array().map(Vec::len),
        Some(count as usize),
        "{ended}"
    );

    // The agent kills the session process itself: the keeper, which it
    // cannot signal, ends the daemon and everything else.
    let (child, second, stderr) = start(
        &w,
        &format!(
            r#"
"$EXEC" "setsid sh -c 'touch orphan.up; while :; do sleep 0.2; done # {marker}-orphan' </dev/null >/dev/null 2>&1 &"
wait_for orphan.up
kill -KILL $PPID
sleep 600
"#
        ),
    );
    let out = child.wait_with_output().expect("nd7 run");
    assert_eq!(out.status.code(), Some(128 + 9));
    assert_eq!(
        running_with(&marker),
        Vec::<u32>::new(),
        "outlived the session"
    );
    eventually("nd7 run says the session process was killed", || {
        stderr
            .lock()
            .expect("stderr")
            .contains("was killed by signal 9")
    });
    assert!(!w.sessions().join(second.to_string()).exists());
}

/// Item 8. `nd7 run` is stopped (SIGSTOP) while a command runs through the
/// exit; `nd7-exec` gets SIGTERM. It must end anyway rather than wait for a
/// session that cannot answer; once `nd7 run` runs again it kills the
/// command whose caller went away.
///
/// Guards the acknowledgement wait in `exit::run` (`ACK_WAIT`): without it
/// `nd7-exec` never ends.
#[test]
fn nd7_exec_ends_on_sigterm_while_nd7_run_is_stopped() {
    let w = World::new();
    let (child, session, _) = start(
        &w,
        r#"
"$EXEC" 'echo $$ > cmd.new && mv cmd.new cmd.pid; exec sleep 600' &
echo $! > exec.new && mv exec.new exec.pid
wait_for cmd.pid
wait_for done
wait
"#,
    );
    w.wait_for("cmd.pid");
    w.wait_for("exec.pid");
    let pid = |file: &str| -> u32 {
        read(&w.proj().join(file))
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{file}"))
    };
    let (exec, command) = (pid("exec.pid"), pid("cmd.pid"));
    let signal = |sig: &str, pid: u32| {
        assert!(
            Command::new("kill")
                .args([sig, &pid.to_string()])
                .status()
                .expect("kill")
                .success()
        )
    };
    signal("-STOP", session);
    // 't' where the exec observer traces it (issue 32): stopped all the same.
    eventually("nd7 run is stopped", || {
        matches!(state(session), Some('T' | 't'))
    });
    signal("-TERM", exec);
    eventually("nd7-exec ends", || matches!(state(exec), None | Some('Z')));
    signal("-CONT", session);
    eventually("the command is killed", || {
        matches!(state(command), None | Some('Z'))
    });
    w.signal("done");
    assert!(child.wait_with_output().expect("nd7 run").status.success());
}

/// What the process protections must leave alone: files moved between
/// directories (within the project, and between the project and the temp
/// directory, as compilers and package managers do), in the floor and
/// through the exit; git; a local TCP service, through the session's proxy.
///
/// Guards the `Refer` rule of `scope_self`: without it the scope layer
/// makes every cross-directory move fail with EXDEV once the floor's rules
/// are stacked on it (rustc's "Invalid cross-device link").
#[test]
fn ordinary_work_still_works_under_the_process_protections() {
    let w = World::new();
    let port = tcp_service();
    // Reached through the session's proxy, as a granted host (issue 31).
    std::fs::create_dir_all(w.home().join(".nd7")).expect("mkdir");
    std::fs::write(
        w.home().join(".nd7/grants"),
        format!("net localhost:{port}\n"),
    )
    .expect("grants");
    let out = w.run_agent(&format!(
        r#"
move='mkdir -p a b && echo x > a/f && mv a/f b/f && echo x > "$TMPDIR/t" && mv "$TMPDIR/t" b/t && mv b/t "$TMPDIR/u" && ln b/f a/hard'
sh -c "$move" && echo "floor-moves:ok"
rm -rf a b "$TMPDIR/u"
"$EXEC" "$move" && echo "exec-moves:ok"
"$EXEC" 'git init -q repo && cd repo && echo hi > f && git add f && git -c user.name=n -c user.email=e@x commit -qm one && git log --format=%s' 
curl -s "http://localhost:{port}/"
"#
    ));
    assert_eq!(
        text(&out.stdout).lines().collect::<Vec<_>>(),
        ["floor-moves:ok", "exec-moves:ok", "one", "tcp-ok"],
        "{}",
        text(&out.stderr)
    );
}

/// A connect the keeper makes for the session can block for ever (here: a
/// server of the agent's with a full backlog that never accepts). The
/// keeper must still see the session end and sweep: the agent exits with
/// connects still hanging, and `nd7 run` must return with nothing left.
///
/// Guards the worker threads in `Supervisor::handle` (`Workers::run`):
/// with the connect made on the keeper's own loop, `nd7 run` never returns.
#[test]
fn a_connect_that_never_completes_does_not_hold_the_session_open() {
    let w = World::new();
    let marker = format!("nd7-stuck-{}", std::process::id());
    let (mut child, _, _) = start(
        &w,
        &format!(
            r#"
perl -e 'use IO::Socket::UNIX; my $l = IO::Socket::UNIX->new(Local => "$ENV{{TMPDIR}}/full.sock", Listen => 1) or die "$!"; open my $r, ">", "full.ready"; close $r; sleep 600; # {marker}' &
wait_for full.ready
for i in 1 2 3 4 5; do
  perl -e 'use IO::Socket::UNIX; IO::Socket::UNIX->new(Peer => "$ENV{{TMPDIR}}/full.sock"); sleep 600; # {marker}' &
done
sleep 1
"#
        ),
    );
    eventually("nd7 run returns", || {
        matches!(child.try_wait(), Ok(Some(_)))
    });
    assert_eq!(
        running_with(&marker),
        Vec::<u32>::new(),
        "outlived the session"
    );
}

/// A descriptor `nd7 run` inherited from whatever started it (here a
/// socket connected to a server of the account's outside the floor, as a
/// terminal or IDE may leak) does not reach the agent, nor a command
/// through the exit.
///
/// Guards the `close_range` in `Confinement::confine`: without it the
/// agent writes to the server through descriptor 5.
#[test]
fn a_descriptor_nd7_run_inherited_does_not_reach_the_agent() {
    let w = World::new();
    let dir = tempfile::tempdir_in(w.outside()).expect("dir");
    let path = dir.path().join("leaked.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
    let client = std::os::unix::net::UnixStream::connect(&path).expect("connect");
    let (mut server, _) = listener.accept().expect("accept");
    let leaked = OwnedFd::from(client);
    let agent = w.agent(
        r#"
echo agent >&5 2>/dev/null; echo "agent:$?"
"$EXEC" 'echo exec >&5' 2>/dev/null; echo "exec:$?"
"#,
    );
    let mut cmd = w.nd7(&["run", &agent]);
    let fd = leaked.as_raw_fd();
    // SAFETY: dup2 is async-signal-safe; it puts the socket at 5 in the
    // child, without close-on-exec, as a leaking parent would.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(fd, 5) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().expect("nd7 run");
    drop(leaked);
    assert_eq!(
        text(&out.stdout).lines().collect::<Vec<_>>(),
        ["agent:1", "exec:1"],
        "{}",
        text(&out.stderr)
    );
    server
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut got = String::new();
    let _ = server.read_to_string(&mut got);
    assert_eq!(got, "", "the leaked socket was used");
}

/// Prints `fd:N:TARGET` for each descriptor above 2 this shell holds.
const FDS: &str = r#"for f in /proc/self/fd/*; do n=${f##*/}; [ "$n" -gt 2 ] || continue; t=$(readlink "$f") || continue; echo "fd:$n:$t"; done"#;

/// What an agent can reach through `nd7 run`'s own descriptors and its
/// /proc entries (it is the agent's parent, and the parent of every command
/// through the exit). `nd7 run` holds the floor's rule descriptors, the run's
/// log, its sockets: none may leak into the floor or a command, and its
/// /proc/PID/{fd,root,cwd,environ,mem} must stay shut (Landlock's ptrace
/// scoping). Held. (Listing /proc/PID/fd works for the same account, which
/// shows descriptor numbers only; reading where they lead does not.)
#[test]
fn nd7_runs_descriptors_and_proc_entries_give_the_agent_nothing() {
    let w = World::new();
    let probe = format!(
        r#"{X}
{FDS}
x ppid-fd3 cat /proc/$PPID/fd/3
x ppid-fd-readlink readlink /proc/$PPID/fd/3
x ppid-fd-write sh -c 'for f in /proc/'$PPID'/fd/*; do echo x >> "$f" && exit 0; done; exit 1'
x ppid-root cat "/proc/$PPID/root$HOME_DIR/.ssh/id_ed25519"
x ppid-cwd ls /proc/$PPID/cwd/
x ppid-environ cat /proc/$PPID/environ
x ppid-mem head -c1 /proc/$PPID/mem
x ppid-map-files ls /proc/$PPID/map_files/
x ppid-fd-dir sh -c 'for f in /proc/'$PPID'/fd/*; do ls "$f/" >/dev/null 2>&1 && exit 0; done; exit 1'
"#
    );
    let quoted = probe.replace('\'', r"'\''");
    let out = w.run_agent(&format!(
        "echo agent; {probe}\necho exit; \"$EXEC\" '{quoted}'\n"
    ));
    let got = lines(&out);
    let mut leaked = Vec::new();
    let mut opened = Vec::new();
    for line in &got {
        if let Some(rest) = line.strip_prefix("fd:") {
            let target = rest.split_once(':').map_or("", |(_, t)| t);
            // Descriptors nd7 run itself inherited from whoever started it
            // (here the test harness) pass on like its environment; what
            // must never show up is anything nd7 opened: its state, the
            // floor's rule directories, its sockets, a ruleset.
            let nd7s = target.contains("/.nd7")
                || target.contains("/state/nd7")
                || target.starts_with("socket:")
                || target.starts_with("anon_inode:")
                || target.contains("/.claude")
                || target.contains("/proj")
                // The root outside the session's namespaces, which nd7 run
                // keeps to judge refusals (`ns::outside_root`).
                || target == "/";
            if nd7s {
                leaked.push(line.clone());
            }
        } else if line.ends_with(":yes") {
            opened.push(line.clone());
        }
    }
    assert!(
        got.contains(&"exit".to_string()),
        "{got:?} {}",
        text(&out.stderr)
    );
    assert_eq!(leaked, Vec::<String>::new(), "descriptors leaked: {got:?}");
    assert_eq!(opened, Vec::<String>::new(), "reached nd7 run: {got:?}");
}
