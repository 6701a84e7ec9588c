//! Attacks on the exit's threads that outlive their commands (ADR-0152,
//! ADR-0154): a thread that has answered a command waits for the next one.
//! The agent speaks the exit's protocol itself here (as it may: the socket
//! is its own), through a client of its own standing in for `nd7-exec`.
#![cfg(target_os = "linux")]

use crate::world::*;

/// An exit client: `run(cmd, cwd, env)` sends a request and waits for the
/// answer's first frame; `hold()` opens a connection and sends only the
/// first bytes of a request, keeping a thread of the exit reading it.
const CLIENT: &str = r#"
import os, socket, struct, sys
def field(b): return struct.pack('<I', len(b)) + b
def request(cmd, cwd, env):
    body = field(cmd.encode()) + field(cwd.encode()) + struct.pack('<I', len(env)) + b''.join(field(e.encode()) for e in env)
    return struct.pack('<I', len(body)) + body
def connect():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(os.environ['ND7_RUN'] + '/exit.sock')
    return s
def run(cmd, cwd, env):
    s = connect()
    socket.send_fds(s, [request(cmd, cwd, env)], [0, 1, 2])
    data = b''
    while True:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    sys.stdout.flush()
    return data[:1].decode() if data else 'none'
def hold():
    s = connect()
    # The length and a part of the body: the exit waits for the rest.
    socket.send_fds(s, [request('true', '/', [])[:6]], [0, 1, 2])
    return s
def still_held(s):
    # Neither answered (a refusal once the exit gives up) nor closed.
    s.setblocking(False)
    try:
        s.recv(1)
        return False
    except BlockingIOError:
        return True
"#;

fn client(w: &World) {
    std::fs::write(w.proj().join("exitc.py"), CLIENT).expect("write client");
    w.own();
}

/// What a command sees of what it was started with: its environment, its
/// directory, umask, descriptors, blocked and ignored signals, limits.
const PROBE: &str = "echo env:$(env | grep -v '^_=\\|^SHLVL=' | sort | tr '\\n' ' '); \
    echo cwd:$(pwd); echo umask:$(umask); echo fds:$(ls /proc/self/fd | tr '\\n' ' '); \
    echo sig:$(grep -E '^Sig(Blk|Ign)' /proc/self/status | tr '\\t\\n' '  '); \
    echo limits:$(ulimit -n) $(ulimit -c)";

/// A command served by a thread that served another before it starts as
/// one served by a fresh thread: nothing of the previous request (its
/// environment, directory) nor of what the previous command did to itself
/// (umask, signal dispositions and mask, descriptors it opened, limits)
/// reaches the next. The commands are asked one after the other, so the
/// thread that served the first waits and serves each next one. Held: all
/// that a command starts with is built from its own request, in a child
/// whose signal mask is emptied; the thread keeps nothing between them.
#[test]
fn a_command_on_a_thread_that_served_another_starts_clean() {
    let w = World::new();
    client(&w);
    let script = format!(
        r#"
import sys
sys.path.insert(0, '.')
from exitc import run
cwd = sys.argv[1]
env = ['PATH=/usr/bin:/bin']
probe = {PROBE:?}
print('frame-first:' + run(probe, cwd, env), flush=True)
dirty = "umask 077; trap '' INT TERM HUP USR1; ulimit -n 64; ulimit -c 0; exec 7>/dev/null; cd /; " + probe
print('frame-dirty:' + run(dirty, '/', env + ['LEAK=1']), flush=True)
print('frame-again:' + run(probe, cwd, env), flush=True)
"#
    );
    std::fs::write(w.proj().join("leak.py"), script).expect("write");
    w.own();
    let out = w.run_agent("/usr/bin/python3 leak.py \"$PWD\"\n");
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    let diag = format!("{stdout}\n{}", text(&out.stderr));
    assert_eq!(
        lines.len(),
        21,
        "three probes of six lines and their frames\n{diag}"
    );
    let (first, dirty, again) = (&lines[0..6], &lines[7..13], &lines[14..20]);
    assert_eq!(
        [lines[6], lines[13], lines[20]],
        ["frame-first:x", "frame-dirty:x", "frame-again:x"],
        "{diag}"
    );
    // The dirty command did change what it could see of itself.
    assert!(dirty[0].contains("LEAK=1"), "{diag}");
    assert_eq!(dirty[2], "umask:0077", "{diag}");
    assert!(dirty[3].split_whitespace().any(|fd| fd == "7"), "{diag}");
    assert_eq!(first, again, "{diag}");
}

/// Connections that never send their whole request cannot take the exit's
/// waiting threads from the commands that come after them: once threads
/// have served commands and wait, the agent opens a silent connection and
/// asks a command, five times (more than wait, `SPARE`, 4), and each
/// command runs while every silent one is still unanswered and open (a
/// connection handed to a thread still reading a silent one would be served
/// only once the exit gave up on that one, after `REQUEST_TIMEOUT`, 10 s,
/// and refused it). Seen failing (`0:frame:x:held:false`) with a thread
/// listed as waiting before it served its own connection.
#[test]
fn silent_connections_do_not_hold_back_the_next_command() {
    let w = World::new();
    client(&w);
    let script = r#"
import sys, threading
sys.path.insert(0, '.')
from exitc import run, hold, still_held
cwd = sys.argv[1]
env = ['PATH=/usr/bin:/bin']
# Threads that served a command and now wait.
ts = [threading.Thread(target=run, args=('true', cwd, env)) for _ in range(6)]
for t in ts: t.start()
for t in ts: t.join()
silent = []
for i in range(5):
    silent.append(hold())
    frame = run('echo ran', cwd, env)
    held = all(still_held(s) for s in silent)
    print(f'{i}:frame:{frame}:held:{str(held).lower()}', flush=True)
"#;
    std::fs::write(w.proj().join("starve.py"), script).expect("write");
    w.own();
    let out = w.run_agent("/usr/bin/python3 starve.py \"$PWD\"\n");
    let expected: String = (0..5)
        .map(|i| format!("ran\n{i}:frame:x:held:true\n"))
        .collect();
    assert_eq!(text(&out.stdout), expected, "{}", text(&out.stderr));
}

/// What [`outsider_child`] is given: the exit's socket.
const OUTSIDER: &str = "ND7_TEST_EXIT_OUTSIDER";

/// A process of the account that was never in the session asks the exit
/// for a command after the agent's commands have left threads waiting, so
/// that a thread that served (and admitted) the agent's caller serves it:
/// it is refused as before, and the agent's next command still runs. Each
/// connection is admitted on its own credentials, in `serve_one`, wherever
/// it is served. Held. Seen failing (`not refused`) with the outsider's
/// admission taken from the thread's previous connection.
#[test]
fn an_outsider_served_by_a_thread_that_admitted_the_agent_is_refused() {
    let w = World::new();
    let (child, pid) = w.start_agent(
        r#"
for i in 1 2 3 4 5 6; do "$EXEC" true & done; wait
"$EXEC" true; touch started; wait_for asked
"$EXEC" "echo after"; wait_for done
"#,
    );
    w.wait_for("started");
    let socket = w.sessions().join(pid.to_string()).join("exit.sock");
    let why = as_account(&socket.display().to_string());
    assert!(
        why.contains("refused: ") && why.contains("is not part of session"),
        "{why}"
    );
    w.signal("asked");
    w.signal("done");
    let out = child.wait_with_output().expect("ends");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "after\n", "{}", text(&out.stderr));
}

/// Runs [`outsider_child`] as the world's account, and returns what it
/// printed.
fn as_account(socket: &str) -> String {
    crate::record_door::test_as_account("attack_exit_threads::outsider_child", OUTSIDER, socket)
}

/// The outsider of the test above. Does nothing unless started by it.
#[test]
fn outsider_child() {
    let Ok(socket) = std::env::var(OUTSIDER) else {
        return;
    };
    match nd7_core::sandbox::linux::exit::run(std::path::Path::new(&socket), "touch escaped".into())
    {
        Err(nd7_core::sandbox::linux::exit::ExitError::Refused(why)) => println!("refused: {why}"),
        other => println!("not refused: {other:?}"),
    }
}
