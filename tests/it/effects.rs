//! What actually ran (issue 32): every exec in the tree `nd7 run` confines
//! is in the run's chain, read after the exec by nd7's observer outside the
//! floor (`source: effect:nd7`), and nothing inside can switch it off or
//! make it state a program that did not run. Each attack is tried as an
//! ordinary account, the agent a shell script, Bash calls through `$EXEC`.
#![cfg(target_os = "linux")]

use serde_json::Value;

use crate::runs::*;
use crate::world::*;

/// Every exec the observer wrote into the run's chain, each with its
/// executable's path (`exe`, or null when not confirmed).
fn ran(w: &World) -> Vec<Value> {
    let mut all = Vec::new();
    for e in entries(&run_chain(w)) {
        if e["source"] != "effect:nd7" || e["kind"] != "ran" {
            continue;
        }
        let exes = e["body"]["exes"].as_array().cloned().unwrap_or_default();
        for x in e["body"]["execs"].as_array().cloned().unwrap_or_default() {
            let mut x = x;
            x["path"] = x["exe"]
                .as_u64()
                .map(|i| exes[i as usize][0].clone())
                .unwrap_or(Value::Null);
            all.push(x);
        }
    }
    all
}

/// The `not_observed` entries' bodies.
fn not_observed(w: &World) -> Vec<Value> {
    entries(&run_chain(w))
        .into_iter()
        .filter(|e| e["source"] == "effect:nd7" && e["kind"] == "not_observed")
        .map(|e| e["body"].clone())
        .collect()
}

fn argv(x: &Value) -> Vec<String> {
    x["argv"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| s.as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// The execs whose arguments contain `marker`.
fn with(all: &[Value], marker: &str) -> Vec<Value> {
    all.iter()
        .filter(|x| argv(x).iter().any(|a| a.contains(marker)))
        .cloned()
        .collect()
}

/// `execs` without `nd7-exec`'s own (in the floor, its argument the command).
fn but_the_exit(execs: Vec<Value>) -> Vec<Value> {
    execs
        .into_iter()
        .filter(|x| !x["path"].as_str().unwrap_or("").ends_with("/nd7-exec"))
        .collect()
}

#[test]
fn every_exec_of_the_floor_and_of_commands_is_in_the_chain_with_its_call() {
    let w = World::new();
    let out = w.run_agent(
        r#"/bin/true floor-marker
( /bin/echo child-marker >/dev/null ) &
wait
"$EXEC" '/bin/true command-marker; /bin/sh -c "/bin/true nested-marker"'
echo done"#,
    );
    assert!(text(&out.stdout).contains("done"), "{}", text(&out.stderr));
    let all = ran(&w);
    let floor = with(&all, "floor-marker");
    assert_eq!(floor.len(), 1, "{all:#?}");
    assert_eq!(floor[0]["path"], "/usr/bin/true");
    assert!(floor[0].get("command").is_none(), "{floor:?}");
    assert_eq!(with(&all, "child-marker").len(), 1, "{all:#?}");
    let command = with(&all, "command-marker");
    assert_eq!(command.len(), 3, "nd7-exec, bash -c and true: {all:#?}");
    let command = but_the_exit(command);
    let exec_seq = entries(&run_chain(&w))
        .iter()
        .find(|e| e["kind"] == "exec" && e["source"] == "exit:nd7")
        .map(|e| e["seq"].clone())
        .expect("the command's exec entry");
    assert!(
        command.iter().all(|x| x["command"] == exec_seq),
        "{command:#?}"
    );
    let nested = but_the_exit(with(&all, "nested-marker"));
    assert_eq!(nested.len(), 3, "bash -c, sh -c and true: {nested:#?}");
    assert!(
        nested.iter().all(|x| x["command"] == exec_seq),
        "{nested:#?}"
    );
    assert!(not_observed(&w).is_empty());
    // Each executable is named with its identity and the BLAKE3 of its bytes.
    let bytes = std::fs::read("/usr/bin/true").expect("true");
    let hash = blake3::hash(&bytes).to_hex().to_string();
    let text = std::fs::read_to_string(run_chain(&w).join("events.ndjson")).expect("the run's log");
    assert!(text.contains(&hash));
}

/// A program whose bytes are in memory only (`memfd_create`, `fexecve`):
/// recorded with the memfd's name as the kernel gives it and the BLAKE3
/// of the bytes that ran.
#[test]
fn a_memfd_exec_is_recorded_with_the_bytes_that_ran() {
    let w = World::new();
    let out = w.run_agent(
        r#"/usr/bin/python3 - <<'PY'
import os
fd = os.memfd_create("nd7-memfd", 0)
os.write(fd, open("/bin/true", "rb").read())
os.execve(fd, ["memfd-marker"], dict(os.environ))
PY
echo done"#,
    );
    assert!(text(&out.stdout).contains("done"), "{}", text(&out.stderr));
    let memfd = with(&ran(&w), "memfd-marker");
    assert_eq!(memfd.len(), 1, "{:#?}", ran(&w));
    assert!(
        memfd[0]["path"]
            .as_str()
            .unwrap_or("")
            .starts_with("/memfd:nd7-memfd"),
        "{memfd:?}"
    );
    let hash = blake3::hash(&std::fs::read("/bin/true").expect("true"))
        .to_hex()
        .to_string();
    let exes: Vec<Value> = entries(&run_chain(&w))
        .iter()
        .filter(|e| e["kind"] == "ran")
        .flat_map(|e| e["body"]["exes"].as_array().cloned().unwrap_or_default())
        .collect();
    assert!(
        exes.iter()
            .any(|x| x[0].as_str().unwrap_or("").starts_with("/memfd:") && x[2] == hash.as_str()),
        "{exes:?}"
    );
}

/// A program rewritten in place between two execs, through a shared
/// mapping of a memfd (tmpfs does not date a write to a page already
/// mapped: size, mtime and ctime stay as they were), after waiting out the age below which nothing
/// is remembered: `true`'s bytes run first, then `false`'s. Each exec names
/// the BLAKE3 of the bytes that ran, never a hash remembered for the same
/// identity. Guards `hashes::dated` (only filesystems that date every
/// change are remembered) and the owner in `hashes::sealed` (a file its
/// writer owns is not sealed, whatever its mode).
#[test]
fn a_program_rewritten_without_a_new_ctime_is_hashed_again() {
    let w = World::new();
    let out = w.run_agent(
        r#"/usr/bin/python3 - <<'PY'
import mmap, os, time
fd = os.memfd_create("nd7-rewritten", 0)
os.write(fd, open("/bin/true", "rb").read())
# Its owner's alone to write, as a program under /usr is root's.
os.fchmod(fd, 0o755)
print("mode", oct(os.fstat(fd).st_mode & 0o777))
time.sleep(2.5)
def run(marker):
    pid = os.fork()
    if pid == 0:
        os.execve(fd, [marker], dict(os.environ))
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
print("first", run("rewritten-first"))
m = mmap.mmap(fd, 0)
# Read first: the pages are then mapped writable, and the write takes no
# fault that would date it.
sum(m[i] for i in range(0, len(m), 4096))
m[:] = open("/bin/false", "rb").read()
m.close()
print("second", run("rewritten-second"))
PY"#,
    );
    assert_eq!(
        lines(&out),
        ["mode 0o755", "first 0", "second 1"],
        "{}",
        text(&out.stderr)
    );
    let hash = |p: &str| {
        blake3::hash(&std::fs::read(p).expect(p))
            .to_hex()
            .to_string()
    };
    let run = run_chain(&w);
    assert_eq!(blake3_ran(&run, "rewritten-first"), [hash("/bin/true")]);
    assert_eq!(blake3_ran(&run, "rewritten-second"), [hash("/bin/false")]);
}

/// The hashes remembered across runs (ADR-0146): a program rewritten in
/// place with its size and mtime put back (its ctime moves, and nothing
/// unprivileged sets a ctime) is hashed again in the next run, and nothing
/// inside can write the file the hashes are kept in. Guards the ctime in
/// `hashes::Key`: without it the second run names `true`'s hash for
/// `false`'s bytes.
#[test]
fn a_hash_remembered_across_runs_does_not_outlive_a_rewrite() {
    let w = World::new();
    let prog = w.proj().join("prog");
    std::fs::copy("/bin/true", &prog).expect("copy true");
    w.own();
    let fs = std::process::Command::new("stat")
        .args(["-f", "-c", "%T"])
        .arg(&prog)
        .output()
        .expect("stat -f");
    let fs = text(&fs.stdout);
    if !["ext2/ext3", "xfs", "btrfs"].contains(&fs.trim()) {
        eprintln!("skipped: the world is on {fs}, where no hash is remembered");
        return;
    }
    // Older than hashes::SETTLED_NS once it runs (the world gives every
    // file to the account again, a new ctime, before each run): remembered.
    let first = w.run_agent("sleep 2.5; ./prog first-marker; echo $?");
    assert_eq!(lines(&first), ["0"], "{}", text(&first.stderr));
    let hash = |p: &str| {
        blake3::hash(&std::fs::read(p).expect(p))
            .to_hex()
            .to_string()
    };
    let kept = w.state().join("nd7/exe-hashes");
    let kept_text = std::fs::read_to_string(&kept).unwrap_or_default();
    assert!(kept_text.contains(&hash("/bin/true")), "{kept_text}");
    let second = w.run_agent(&format!(
        r#"{X}
x forge sh -c 'echo junk >> "$1"' _ "$HOME_DIR/.local/state/nd7/exe-hashes"
when=$(stat -c %y prog)
cat /bin/false > prog
touch -d "$when" prog
./prog second-marker; echo $?"#
    ));
    assert_eq!(
        lines(&second),
        ["forge:no", "1"],
        "{}",
        text(&second.stderr)
    );
    let kept_text = std::fs::read_to_string(&kept).unwrap_or_default();
    assert!(!kept_text.contains("junk"), "{kept_text}");
    let runs = run_dirs(&w);
    let last = runs.last().expect("the second run");
    assert_eq!(blake3_ran(last, "second-marker"), [hash("/bin/false")]);
}

/// The BLAKE3 each exec whose arguments contain `marker` was logged with,
/// in the run chain `run`.
fn blake3_ran(run: &std::path::Path, marker: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in entries(run) {
        if e["source"] != "effect:nd7" || e["kind"] != "ran" {
            continue;
        }
        let exes = e["body"]["exes"].as_array().cloned().unwrap_or_default();
        for x in e["body"]["execs"].as_array().cloned().unwrap_or_default() {
            if argv(&x).iter().any(|a| a.contains(marker)) {
                let exe = x["exe"].as_u64().and_then(|i| exes.get(i as usize));
                out.push(exe.map_or("not confirmed".into(), |x| {
                    x[2].as_str().unwrap_or("").into()
                }));
            }
        }
    }
    out
}

/// A daemon a command leaves (`setsid`, its own session, its parent gone)
/// still execs under that command: ancestry is the kernel's, kept from
/// each fork, not the process tree after reparenting.
#[test]
fn a_setsid_daemon_is_seen_and_named_by_the_command_that_started_it() {
    let w = World::new();
    let out = w.run_agent(
        r#""$EXEC" 'setsid sh -c "sleep 0.3; /bin/true daemon-marker; touch daemon.done" </dev/null >/dev/null 2>&1 &'
wait_for daemon.done
echo done"#,
    );
    assert!(text(&out.stdout).contains("done"), "{}", text(&out.stderr));
    let exec_seq = entries(&run_chain(&w))
        .iter()
        .find(|e| e["kind"] == "exec" && e["source"] == "exit:nd7")
        .map(|e| e["seq"].clone())
        .expect("the command's exec entry");
    let daemon = but_the_exit(with(&ran(&w), "daemon-marker"));
    let true_run: Vec<&Value> = daemon
        .iter()
        .filter(|x| x["path"] == "/usr/bin/true")
        .collect();
    assert_eq!(true_run.len(), 1, "{daemon:#?}");
    assert_eq!(true_run[0]["command"], exec_seq);
}

/// What the agent runs to attack a held or traced process: attach to a
/// child with ptrace, and write into its memory with `process_vm_writev`.
const TRACE_AND_WRITE: &str = r#"/usr/bin/python3 - <<'PY'
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(b"original")
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.read(r, 1)
    print("child:" + buf.value.decode(), flush=True)
    os._exit(0)
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
src = ctypes.create_string_buffer(b"rewritten")
local = iovec(ctypes.cast(src, ctypes.c_void_p), 9)
remote = iovec(ctypes.addressof(buf), 9)
n = libc.process_vm_writev(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
print("writev:" + ("OK" if n == 9 else os.strerror(ctypes.get_errno())), flush=True)
a = libc.ptrace(16, pid, None, None)
print("attach:" + ("OK" if a == 0 else os.strerror(ctypes.get_errno())), flush=True)
os.write(w, b"x")
os.waitpid(pid, 0)
PY"#;

/// Nothing inside traces another process or writes into one: were either
/// possible, a process held at its exec could be changed before the
/// observer reads it, or the observer detached. Guards the filter's
/// `no_tracing` (`process_vm_writev`; the attach is refused twice over: the
/// child is already traced by the observer).
#[test]
fn nothing_inside_traces_or_writes_into_another_process() {
    let w = World::new();
    let out = w.run_agent(TRACE_AND_WRITE);
    let got = lines(&out);
    assert!(
        got.contains(&"child:original".to_string()),
        "{got:?} {}",
        text(&out.stderr)
    );
    assert!(
        got.contains(&"writev:Operation not permitted".to_string()),
        "{got:?}"
    );
    assert!(
        got.iter()
            .any(|l| l.starts_with("attach:") && l != "attach:OK"),
        "{got:?}"
    );
}

/// The 32-bit exec entry point (`int 0x80`, i386's `execve`) from a 64-bit
/// process: refused, so every exec goes the way the observer reads.
/// Guards the filter's compatibility `refused_execs`.
#[test]
#[cfg(target_arch = "x86_64")]
fn a_32_bit_exec_is_refused() {
    let w = World::new();
    let src = w.proj().join("int80.c");
    std::fs::write(
        &src,
        r#"#include <stdio.h>
static char path[] = "/bin/echo";
static char arg[] = "int80-ran";
static char *argv[] = {path, arg, 0};
int main(void) {
    unsigned int argv32[3] = {(unsigned int)(unsigned long)path, (unsigned int)(unsigned long)arg, 0};
    long r;
    __asm__ volatile("int $0x80" : "=a"(r) : "a"(11), "b"(path), "c"(argv32), "d"(0) : "memory");
    printf("int80:%ld\n", r);
    (void)argv;
    return 0;
}
"#,
    )
    .expect("write int80.c");
    let bin = w.proj().join("int80");
    let built = std::process::Command::new("cc")
        .args(["-O0", "-no-pie", "-o"])
        .arg(&bin)
        .arg(&src)
        .output()
        .expect("cc");
    assert!(built.status.success(), "{}", text(&built.stderr));
    w.own();
    let out = w.run_agent("./int80");
    let got = lines(&out);
    assert_eq!(got, ["int80:-1"], "{}", text(&out.stderr));
    assert!(with(&ran(&w), "int80-ran").is_empty());
}

/// The observer killed mid-run (`kill -9` of `nd7 run`'s front, which
/// only the user can do): every process below `nd7 run` dies with it, so
/// no later exec runs unobserved. Guards `PTRACE_O_EXITKILL` in
/// `observe::INNER`: without it the agent, which ignores SIGTERM, runs
/// `touch after` during the keeper's grace.
#[test]
fn with_the_observer_killed_no_later_exec_runs() {
    let w = World::new();
    let (mut child, session) = w.start_agent(
        r#"trap '' TERM HUP INT QUIT
touch ready
while [ ! -e go ]; do read -t 0.05 < <(:) || :; done
/usr/bin/touch after"#,
    );
    w.wait_for("ready");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(child.id() as i32).expect("pid"),
        rustix::process::Signal::KILL,
    )
    .expect("kill the front");
    w.signal("go");
    let _ = child.wait();
    let start = std::time::Instant::now();
    while std::path::Path::new(&format!("/proc/{session}")).exists() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "the session lives on"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        !w.proj().join("after").exists(),
        "an exec ran after the observer died"
    );
}

/// An exec storm while `nd7 run` has fallen behind (the fault: a one-page
/// pipe it does not read until the end, a bound of one byte): execs past
/// the bound are killed at their exec, before they run, and counted in the
/// chain; none runs unrecorded. Guards the bound in `Tracer::execd`.
#[test]
fn an_exec_storm_past_the_bound_is_stopped_and_counted() {
    let w = World::new();
    let agent = w.agent(
        r#"for i in $(seq 300); do /bin/true storm-marker; done 2>/dev/null
echo done"#,
    );
    let out = w
        .nd7(&["run", &agent])
        .env("ND7_FAULT", "small-effects-queue")
        .output()
        .expect("nd7 run");
    assert!(text(&out.stdout).contains("done"), "{}", text(&out.stderr));
    let seen = with(&ran(&w), "storm-marker").len() as u64;
    let lost: u64 = not_observed(&w)
        .iter()
        .filter_map(|b| b["count"].as_u64())
        .sum();
    assert!(lost > 0, "nothing was past the bound ({seen} seen)");
    assert_eq!(seen + lost, 300, "every exec is seen or counted");
}

/// Compiles the C program `source` into the world's project as `name`.
fn compile(w: &World, name: &str, source: &str, flags: &[&str]) {
    let src = w.proj().join(format!("{name}.c"));
    std::fs::write(&src, source).expect("write the source");
    let built = std::process::Command::new("cc")
        .args(flags)
        .arg("-o")
        .arg(w.proj().join(name))
        .arg(&src)
        .output()
        .expect("cc");
    assert!(built.status.success(), "{}", text(&built.stderr));
    w.own();
}

/// Each exec's path and arguments flipped by another thread while the
/// kernel reads them: `/usr/bin/touch` or `/usr/bin/mkdir`, `f-N` or `d-N`,
/// every mix possible.
const RACER: &str = r#"#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
static char path[] = "/usr/bin/touch";
static char arg[32];
static char *argv[] = {path, arg, 0};
static void *flip(void *n) {
    for (unsigned long i = 0;; i++) {
        memcpy(path, (i & 1) ? "/usr/bin/mkdir" : "/usr/bin/touch", 14);
        arg[0] = (i & 2) ? 'd' : 'f';
    }
    return n;
}
int main(void) {
    for (int i = 0; i < 200; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            snprintf(arg, sizeof arg, "f-race-%d", i);
            pthread_t t;
            pthread_create(&t, 0, flip, 0);
            usleep(50);
            execv(path, argv);
            _exit(127);
        }
        waitpid(pid, 0, 0);
    }
    puts("raced");
    return 0;
}
"#;

/// A racing thread rewrites `execve`'s path and arguments while the kernel
/// reads them (issue 32, item 2): each entry must say what ran, as its
/// effect shows (`touch` made a file, `mkdir` a directory, under the name
/// the program was given), whatever the calling thread last wrote.
#[test]
fn a_racing_thread_cannot_make_the_log_name_another_program() {
    let w = World::new();
    compile(&w, "racer", RACER, &["-O1", "-pthread"]);
    let out = w.run_agent("./racer");
    assert_eq!(lines(&out), ["raced"], "{}", text(&out.stderr));
    let all = ran(&w);
    let raced = with(&all, "-race-");
    let (mut files, mut dirs) = (0, 0);
    for x in &raced {
        let name = argv(x).get(1).cloned().expect("an argument");
        let made = w.proj().join(&name);
        match x["path"].as_str() {
            Some("/usr/bin/touch") => {
                assert!(made.is_file(), "{x}: no file {name}");
                files += 1;
            }
            Some("/usr/bin/mkdir") => {
                assert!(made.is_dir(), "{x}: no directory {name}");
                dirs += 1;
            }
            other => panic!("{other:?} ran: {x}"),
        }
    }
    // Everything made is in the log, and both programs ran.
    let made = std::fs::read_dir(w.proj())
        .expect("the project")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains("-race-"))
        .count();
    assert_eq!(made, raced.len(), "{raced:#?}");
    assert!(files > 0 && dirs > 0, "{files} files, {dirs} directories");
}

/// `nd7 verify` holds what ran against the commands (item 4): execs under
/// a command while it ran, the agent's own (no call), and those a process a
/// command left behind ran after the command ended.
#[test]
fn verify_tells_what_ran_under_a_command_without_a_call_and_after_its_command() {
    let w = World::new();
    let out = w.run_agent(
        r#"/bin/true floor-marker
"$EXEC" '/bin/true during-marker; setsid sh -c "sleep 0.3; /bin/true after-marker; touch late.done" </dev/null >/dev/null 2>&1 &'
wait_for late.done
echo done"#,
    );
    assert!(text(&out.stdout).contains("done"), "{}", text(&out.stderr));
    let v = verify(&w, &run_chain(&w));
    let said = text(&v.stdout);
    let line = said
        .lines()
        .find(|l| l.starts_with("what ran: "))
        .unwrap_or_else(|| panic!("{said}"));
    let numbers: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect();
    // execs, under commands, without a call, after their command.
    let [all, under, without, after] = numbers[..] else {
        panic!("{line}")
    };
    assert_eq!(all, under + without + after, "{line}");
    assert!(under >= 2, "bash -c and true: {line}");
    assert!(
        after >= 2,
        "sleep, true (and touch) after the command: {line}"
    );
    assert!(without >= 2, "the agent and its true: {line}");
    assert!(v.status.success(), "{said}");
}

/// `nd7 show` lists what ran (the programs by count, the commands they ran
/// under), and `nd7 search` finds an exec's arguments across sessions.
#[test]
fn show_and_search_find_what_ran() {
    let w = World::new();
    let out = w.run_agent(
        r#""$EXEC" '/bin/true shown-marker; /bin/true shown-marker'
echo done"#,
    );
    assert!(text(&out.stdout).contains("done"), "{}", text(&out.stderr));
    let id = run_chain(&w)
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    let show = w.nd7(&["show", &id]).output().expect("nd7 show");
    let shown = text(&show.stdout);
    let ran = shown
        .lines()
        .find(|l| l.contains("[effect:nd7 ran]"))
        .unwrap_or_else(|| panic!("{shown}{}", text(&show.stderr)));
    assert!(ran.contains("true ×2"), "{ran}");
    assert!(ran.contains("under the commands of entries"), "{ran}");
    let search = w
        .nd7(&["search", "shown-marker"])
        .output()
        .expect("nd7 search");
    let found = text(&search.stdout);
    assert!(
        found
            .lines()
            .any(|l| l.contains(" execs ") && l.ends_with("  shown-marker")),
        "{found}{}",
        text(&search.stderr)
    );
}

/// A thread that is not the process's first calls `execve`: the kernel
/// makes it the process (the others end), and the exec is seen.
#[test]
fn a_thread_that_execs_is_seen() {
    let w = World::new();
    let out = w.run_agent(
        r#"/usr/bin/python3 - <<'PY'
import os, threading, time
threading.Thread(target=lambda: os.execv("/bin/true", ["true", "thread-marker"])).start()
time.sleep(30)
PY
echo done"#,
    );
    assert!(text(&out.stdout).contains("done"), "{}", text(&out.stderr));
    let seen = with(&ran(&w), "thread-marker");
    assert_eq!(seen.len(), 1, "{:#?}", ran(&w));
    assert_eq!(seen[0]["path"], "/usr/bin/true");
}

/// The form Claude Code hands a Bash call to the exit in (as
/// tests/it/reconcile.rs writes it).
fn tool_line(command: &str) -> String {
    format!(
        "\"source /nonexistent/snapshot-bash-1-a.sh 2>/dev/null || true && eval '{command}' < /dev/null && pwd -P >| $TMPDIR/cwd-file\""
    )
}

/// A scripted Claude Code session (a stand-in named `claude`, its hooks
/// and Bash calls as Claude Code makes them): one Bash call runs `make` on
/// a small C project, another leaves a process running that execs after
/// its call ended. The compilers ran under the make call's command, which
/// names the call; the late exec is counted after its command; the calls
/// and commands reconcile.
#[test]
fn a_make_under_a_bash_call_is_that_calls_and_a_late_exec_is_not() {
    let w = World::new();
    for i in 0..4 {
        std::fs::write(
            w.proj().join(format!("f{i}.c")),
            format!("int f{i}(void) {{ return {i}; }}\n"),
        )
        .expect("source");
    }
    std::fs::write(w.proj().join("main.c"), "int main(void) { return 0; }\n").expect("main");
    std::fs::write(
        w.proj().join("Makefile"),
        "prog: main.o f0.o f1.o f2.o f3.o\n\tcc -o $@ $^\n%.o: %.c\n\tcc -c -o $@ $<\n",
    )
    .expect("Makefile");
    w.own();
    let claude = fake_claude(
        &w,
        &format!(
            r#"
export CLAUDE_CODE_SHELL_PREFIX="$EXEC"
pre() {{ printf '{{"session_id":"c1","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{{"command":"%s"}},"tool_use_id":"%s"}}' "$2" "$1" | "$ND7" record --run-hook; }}
post() {{ printf '{{"session_id":"c1","hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{{"command":"%s"}},"tool_response":{{"stdout":""}},"tool_use_id":"%s"}}' "$2" "$1" | "$ND7" record --run-hook; }}
pre build 'make -j2'
"$EXEC" {build}
post build 'make -j2'
pre bg 'setsid sh -c \"sleep 0.3; touch late.done\" >/dev/null 2>&1 &'
"$EXEC" {bg}
post bg 'setsid sh -c \"sleep 0.3; touch late.done\" >/dev/null 2>&1 &'
wait_for late.done
"#,
            build = tool_line("make -j2"),
            bg = tool_line(r#"setsid sh -c \"sleep 0.3; touch late.done\" >/dev/null 2>&1 &"#),
        ),
    );
    let out = w
        .nd7(&["run", &claude, "-p", "x"])
        .output()
        .expect("nd7 run");
    assert!(w.proj().join("prog").exists(), "{}", text(&out.stderr));
    let dir = run_chain(&w);
    let e = entries(&dir);
    let build = e
        .iter()
        .find(|x| x["kind"] == "exec" && x["tool_use_id"] == "build")
        .map(|x| x["seq"].clone())
        .unwrap_or_else(|| panic!("no exec for the build call: {e:#?}"));
    let compilers: Vec<Value> = ran(&w)
        .into_iter()
        .filter(|x| argv(x).first().is_some_and(|a| a == "cc"))
        .collect();
    assert_eq!(
        compilers.len(),
        6,
        "five compiles and a link: {compilers:#?}"
    );
    assert!(
        compilers.iter().all(|x| x["command"] == build),
        "{compilers:#?}"
    );
    let v = verify(&w, &dir);
    let said = text(&v.stdout);
    assert!(said.contains("reconciled: every Bash call"), "{said}");
    let line = said
        .lines()
        .find(|l| l.starts_with("what ran: "))
        .unwrap_or_else(|| panic!("{said}"));
    assert!(
        !line.contains(", 0 started by a command"),
        "the late sleep and touch: {line}"
    );
}
