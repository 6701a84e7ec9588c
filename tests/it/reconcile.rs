//! The second red team's attacks, on what came after the first: the keeper
//! (its connect workers, its sweep), the shell prefix's read-back of Claude
//! Code's tool line, and the files that run later. Each is tried as the
//! ordinary account, a shell script standing in for the agent under
//! `nd7 run`. Attacks that broke through name the line that now closes them;
//! those that held are kept so they keep holding; those left open are
//! `#[ignore]`d with why.
#![cfg(target_os = "linux")]

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::world::*;

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
        let dir = base.join(format!("nd7-redteam2-{}", std::process::id()));
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

// --- the keeper --------------------------------------------------------------

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

// --- files that run later ------------------------------------------------------

/// mise (like direnv, run on `cd` by `mise activate`) loads the project's
/// `mise.toml` and runs what its `[env]` (`_.source`) and `[hooks]` name.
/// Unlike direnv, which asks again after any change to `.envrc`, mise ties
/// its trust to the file's path (content only in its paranoid mode): a
/// trusted `mise.toml` the agent edits runs, unconfined, at the user's next
/// `cd` into the project. So it is locked as `.envrc` is.
///
/// Guards the mise names in `policy::deferred::PROJECT_LOCKED`: without
/// them the agent's edit, directly and through the exit, goes through.
#[test]
fn a_trusted_mise_config_cannot_be_changed() {
    const FILES: [&str; 3] = ["mise.toml", ".mise.toml", ".mise/config.toml"];
    for mode in ["direct", "exec"] {
        let w = World::new();
        for rel in FILES {
            let path = w.proj().join(rel);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(&path, "[tools]\nnode = \"22\"\n").expect("write");
        }
        let mut script = format!(
            "attempt() {{ if [ {mode} = exec ]; then \"$EXEC\" \"$2\"; else bash -c \"$2\"; fi 2>/dev/null && echo \"$1:done\" || echo \"$1:refused\"; }}\n"
        );
        for rel in FILES {
            script.push_str(&format!(
                "attempt 'write {rel}' \"printf '[hooks]\\nenter = \\\"touch pwned\\\"\\n' >> '{rel}'\"\n"
            ));
        }
        let out = w.run_agent(&script);
        let said = text(&out.stdout);
        for rel in FILES {
            assert!(
                said.contains(&format!("write {rel}:refused")),
                "({mode}) {said}"
            );
            assert_eq!(
                std::fs::read_to_string(w.proj().join(rel)).expect("still there"),
                "[tools]\nnode = \"22\"\n",
                "({mode}) {rel}"
            );
        }
    }
}

// --- the record: the Bash tool line read back ---------------------------------------

fn run_entries(w: &World) -> Vec<serde_json::Value> {
    let logs = w.home().join(".local/state/nd7/sessions");
    let mut out = Vec::new();
    for dir in std::fs::read_dir(logs).expect("logs").flatten() {
        if dir.file_name().to_string_lossy().starts_with("run-") {
            let text = std::fs::read_to_string(dir.path().join("events.ndjson")).expect("log");
            out.extend(
                text.lines()
                    .map(|l| serde_json::from_str(l).expect("an entry")),
            );
        }
    }
    out
}

/// The exit names a command's `bash_command` (the model's command, by which
/// `nd7 verify` holds it against its Bash call) by reading Claude Code's
/// tool line back: the first `eval WORD` from which the line's tail
/// (`&& pwd -P >| FILE`) runs to its end. Everything before that `eval` is
/// taken to be Claude Code's set-up and is not checked, so a line sent by
/// the agent itself, `touch pwned && eval 'echo hi' && pwd -P >| FILE`, runs
/// both commands and goes into the log as `bash_command: "echo hi"`: a
/// reconciliation or a reader that trusts `bash_command` sees the harmless
/// one. The full line is in the same entry's `command`, so the record is not
/// lost, only misnamed.
///
/// Guards `shell_prefix::known_setup` as `run_entry::bash_command` uses it
/// (ADR-0067): with any set-up taken as Claude Code's, the entry names
/// `echo hi` again.
#[test]
fn a_crafted_tool_line_is_not_logged_as_a_harmless_command() {
    let w = World::new();
    let out = w.run_agent(
        r#"export CLAUDE_CODE_SHELL_PREFIX="$EXEC"
"$EXEC" "touch pwned.txt && eval 'echo hi' && pwd -P >| $TMPDIR/cwd-file"
echo status:$?
"#,
    );
    let said = text(&out.stdout);
    assert!(said.contains("status:0"), "{said} {}", text(&out.stderr));
    let ran_more = w.proj().join("pwned.txt").exists();
    let execs: Vec<serde_json::Value> = run_entries(&w)
        .into_iter()
        .filter(|e| e["source"] == "exit:nd7" && e["kind"] == "exec")
        .collect();
    assert_eq!(execs.len(), 1, "{execs:?}");
    let named = execs[0]["body"]["bash_command"]
        .as_str()
        .map(str::to_string);
    assert!(
        !(ran_more && named.as_deref() == Some("echo hi")),
        "the log names `echo hi` while `touch pwned.txt` ran too: {}",
        execs[0]
    );
}

// --- the record: which command a Bash call announced --------------------------------

/// Claude Code's Bash tool line for `command`, in double quotes for a
/// script, so that `$TMPDIR` is expanded there.
fn tool_line(command: &str) -> String {
    format!(
        "\"source /nonexistent/snapshot-bash-1-a.sh 2>/dev/null || true && eval '{command}' < /dev/null && pwd -P >| $TMPDIR/cwd-file\""
    )
}

/// A stand-in for Claude Code whose user denies the Bash call `touch
/// denied-ran` (a PreToolUse with no result), then allows `sh run.sh`, sent
/// to the exit as Claude Code's own tool line. The agent runs the denied
/// command anyway, from inside the allowed one (`inside`, run.sh's body) or
/// from the floor (`floor`, after it), and would have the log say the denied
/// call was the one that ran. Returns `nd7 verify`'s report (with what
/// `nd7 run` said) and status, and the run's `exec` entries.
fn denied_then_run(inside: &str, floor: &str) -> (String, Option<i32>, Vec<serde_json::Value>) {
    use crate::runs::*;
    let w = World::new();
    std::fs::write(
        w.proj().join("run.sh"),
        format!("ND7_EXEC='{ND7_EXEC}'\n{inside}\n"),
    )
    .expect("run.sh");
    let claude = fake_claude(
        &w,
        &format!(
            r#"
export CLAUDE_CODE_SHELL_PREFIX="$EXEC"
pre() {{ printf '{{"session_id":"c1","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{{"command":"%s"}},"tool_use_id":"%s"}}' "$2" "$1" | "$ND7" record --run-hook; }}
post() {{ printf '{{"session_id":"c1","hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{{"command":"%s"}},"tool_response":{{"stdout":""}},"tool_use_id":"%s"}}' "$2" "$1" | "$ND7" record --run-hook; }}
pre denied 'touch denied-ran'
pre allowed 'sh run.sh'
"$EXEC" {allowed}
post allowed 'sh run.sh'
{floor}
"#,
            allowed = tool_line("sh run.sh"),
        ),
    );
    let out = w
        .nd7(&["run", &claude, "-p", "x"])
        .output()
        .expect("nd7 run");
    let said = format!(
        "--- nd7 run said\n{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        w.proj().join("denied-ran").exists(),
        "the attack ran: {said}"
    );
    let dir = run_chain(&w);
    let execs = entries(&dir)
        .into_iter()
        .filter(|e| e["source"] == "exit:nd7" && e["kind"] == "exec")
        .collect();
    let v = verify(&w, &dir);
    (
        format!("{}\n{said}", text(&v.stdout)),
        v.status.code(),
        execs,
    )
}

/// Claude Code's user denied `touch denied-ran`; the agent sent the same
/// text to the exit itself (`nd7-exec` with the shell prefix unset runs any
/// text through the exit). The exit paired a command with a Bash call by its
/// exact text whatever its form, so the command took the denied call's
/// `tool_use_id` and `nd7 verify` said "reconciled": the log read as if the
/// user had allowed it.
///
/// Guards `Pairing::ToolLine` (run_entry.rs), by which under Claude Code only
/// a tool line's `bash_command` can pair, at the exit (`exec_started_inside`)
/// and in verify's `Reconciler`.
#[test]
fn a_denied_call_sent_to_the_exit_bare_is_not_reconciled() {
    let (report, status, execs) = denied_then_run(
        "",
        "(unset CLAUDE_CODE_SHELL_PREFIX; \"$EXEC\" 'touch denied-ran')",
    );
    assert_eq!(execs.len(), 2, "{execs:#?} {report}");
    assert!(execs[1]["tool_use_id"].is_null(), "{}", execs[1]);
    assert_eq!(status, Some(1), "{report}");
    assert!(!report.contains("\nreconciled"), "{report}");
    assert!(
        report.contains(&format!(
            "NOT RECONCILED: entry {}: command `touch denied-ran` ran through the exit with no Bash call announcing it",
            execs[1]["seq"]
        )),
        "{report}"
    );
}

/// The same from inside the allowed command, bare or dressed as Claude
/// Code's own tool line (so that it has a `bash_command` naming the denied
/// call's text): the command is part of the allowed one, which is what the
/// user allowed, and never the denied call's.
///
/// Guards the `inside` look-up in the Linux exit's `serve_one` (the caller's
/// ancestry through a command the exit runs) and the `Reconciler`'s
/// `nested_execs`, which never pair: without them the tool line claims the
/// denied call, whose missing result alone then shows it.
#[test]
fn a_denied_call_run_from_inside_another_is_part_of_that_one() {
    let nested_line = "source /x 2>/dev/null || true && eval 'touch denied-ran' < /dev/null && pwd -P >| $TMPDIR/cwd2";
    for inside in [
        "unset CLAUDE_CODE_SHELL_PREFIX; \"$ND7_EXEC\" 'touch denied-ran'".to_string(),
        format!("unset CLAUDE_CODE_SHELL_PREFIX; \"$ND7_EXEC\" \"{nested_line}\""),
    ] {
        let (report, status, execs) = denied_then_run(&inside, "");
        assert_eq!(execs.len(), 2, "{execs:#?} {report}");
        assert!(execs[1]["tool_use_id"].is_null(), "{}", execs[1]);
        assert_eq!(execs[1]["body"]["inside"], execs[0]["seq"], "{}", execs[1]);
        assert!(
            report.contains(&format!(
                "note: entry {}: command `touch denied-ran` was asked for from inside the command of entry {}",
                execs[1]["seq"], execs[0]["seq"]
            )),
            "{report}"
        );
        assert!(report.contains("note: 1 Bash call never ran"), "{report}");
        assert!(!report.contains("NOT RECONCILED"), "{report}");
        assert_eq!(status, Some(0), "{report}");
    }
}

/// The same from the floor as Claude Code's tool line (a hook or MCP server
/// the agent planted can call the exit so): the line claims the denied
/// call by its text, but Claude Code never reports a result for it.
///
/// Guards `Reconciliation::execs_without_result`, counted in `agrees`.
#[test]
fn a_tool_line_for_a_denied_call_is_a_command_without_a_result() {
    let (report, status, execs) =
        denied_then_run("", &format!("\"$EXEC\" {}", tool_line("touch denied-ran")));
    assert_eq!(execs.len(), 2, "{execs:#?} {report}");
    assert_eq!(execs[1]["tool_use_id"], "denied", "{}", execs[1]);
    assert_eq!(status, Some(1), "{report}");
    assert!(
        report.contains(&format!(
            "NOT RECONCILED: entry {}: command `touch denied-ran` ran through the exit for Bash call denied, but Claude Code reported no result for that call",
            execs[1]["seq"]
        )),
        "{report}"
    );
    assert!(
        report.contains("nd7 run: warning: 1 of 2 Bash commands ran through the exit for a Bash call Claude Code reported no result for"),
        "{report}"
    );
}
