//! `nd7 run`, `nd7-exec`, `nd7 allow` and `nd7 deny` on the real kernel,
//! with a shell script standing in for the agent.
//!
//! nd7 takes the home directory from the account database, never `$HOME`,
//! so each test runs nd7 in a user and mount namespace (`unshare -Urm`) where
//! a scratch directory is mounted over that home: the real one is never
//! touched. The scratch world lives under target/tmp, outside `/tmp`, so the
//! project, the temp directory, the home and "outside" are four disjoint
//! places. Inside, the home is named by the account's path ([`World::acct`]),
//! as it would be on a real machine: Landlock's rules follow the directory,
//! not the name, so the scratch directory's own path would be a second way in.
#![cfg(target_os = "linux")]

use std::process::{Command, Output};

use crate::world::*;

fn lines(out: &Output) -> Vec<String> {
    text(&out.stdout).lines().map(str::to_string).collect()
}

#[test]
fn the_floor_lets_the_project_be_written_and_nothing_else() {
    let w = World::new();
    let out = w.run_agent(
        r#"
echo "uid:$(id -u) caps:$(grep CapEff /proc/self/status | cut -f2)"
touch inside && echo "agent-inside:$?"
touch "$OUT/agent" 2>/dev/null; echo "agent-outside:$?"
touch "$HOME_DIR/agent" 2>/dev/null; echo "agent-home:$?"
cat "$HOME_DIR/.ssh/id_ed25519" 2>/dev/null; echo "agent-ssh:$?"
cat "$OUT/readme"; echo "agent-read-outside:$?"
"$EXEC" 'touch inside-exec'; echo "exec-inside:$?"
"$EXEC" "touch '$OUT/exec'" 2>/dev/null; echo "exec-outside:$?"
"$EXEC" "cat '$HOME_DIR/.ssh/id_ed25519'" 2>/dev/null; echo "exec-ssh:$?"
"$EXEC" "mkdir -p '$HOME_DIR/.nd7/x'" 2>/dev/null; echo "exec-nd7:$?"
echo '{"session_id":"s1","hook_event_name":"Stop","cwd":"/"}' | "$ND7" record; echo "record:$?"
grep -c '"session":"s1"' "$HOME_DIR"/.local/state/nd7/sessions/run-*/events.ndjson
cat "$HOME_DIR/.local/state/nd7/vault/machine.key" 2>/dev/null; echo "vault-key:$?"
"#,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        lines(&out),
        [
            format!("uid:{} caps:0000000000000000", account().uid).as_str(),
            "agent-inside:0",
            "agent-outside:1",
            "agent-home:1",
            "agent-ssh:1",
            "hello",
            "agent-read-outside:0",
            "exec-inside:0",
            "exec-outside:1",
            "exec-ssh:1",
            "exec-nd7:1",
            "record:0",
            "1",
            "vault-key:1",
        ]
    );
    assert!(w.proj().join("inside").exists() && w.proj().join("inside-exec").exists());
    assert!(!w.outside().join("agent").exists() && !w.outside().join("exec").exists());
    assert!(!w.home().join("agent").exists());
}

#[test]
fn a_symlink_in_the_project_does_not_open_what_it_points_at() {
    let w = World::new();
    std::os::unix::fs::symlink(w.acct.join(".ssh"), w.proj().join("keys")).expect("symlink");
    std::os::unix::fs::symlink(w.outside(), w.proj().join("out")).expect("symlink");
    let out = w.run_agent(
        r#"
cat keys/id_ed25519 2>/dev/null; echo "agent:$?"
"$EXEC" 'cat keys/id_ed25519' 2>/dev/null; echo "exec:$?"
"$EXEC" 'touch out/through-link' 2>/dev/null; echo "exec-write:$?"
"#,
    );
    assert_eq!(lines(&out), ["agent:1", "exec:1", "exec-write:1"]);
    assert!(!w.outside().join("through-link").exists());
}

#[test]
fn allow_widens_the_next_command_and_deny_takes_it_back() {
    let w = World::new();
    let (child, pid) = w.start_agent(
        r#"
"$EXEC" "touch '$OUT/before'" 2>/dev/null; echo "before:$?"
touch stage1; wait_for go1
"$EXEC" "touch '$OUT/allowed'"; echo "allowed:$?"
touch "$OUT/agent" 2>/dev/null; echo "agent-after-allow:$?"
"$EXEC" "mkdir '$HOME_DIR/.nd7/x'" 2>/dev/null; echo "nd7-with-home-granted:$?"
"$EXEC" "touch '$HOME_DIR/docs/granted-home'"; echo "home-granted:$?"
"$EXEC" "'$ND7' allow /" >/dev/null 2>&1; echo "allow-from-inside:$?"
touch stage2; wait_for go2
"$EXEC" "touch '$OUT/denied'" 2>/dev/null; echo "denied:$?"
"#,
    );
    w.wait_for("stage1");
    let outside = w.outside().display().to_string();
    let allow = w.nd7(&["allow", &outside]).output().expect("allow");
    assert_eq!(
        text(&allow.stdout),
        format!("run {pid}: writes under {outside} allowed from the next command\n")
    );
    assert!(allow.status.success() && allow.stderr.is_empty());
    let again = w
        .nd7(&["allow", "--run", &pid.to_string(), &outside])
        .output()
        .expect("allow again");
    assert_eq!(
        text(&again.stdout),
        format!("run {pid}: {outside} was already allowed\n")
    );
    // `--session` was the flag's name before runs were named apart from the
    // log's sessions (ADR-0065): scripts that use it keep working, and help
    // no longer shows it.
    let old_flag = "--session";
    let old_name = w
        .nd7(&["allow", old_flag, &pid.to_string(), &outside])
        .output()
        .expect("allow by the old flag");
    assert_eq!(text(&old_name.stdout), text(&again.stdout));
    let help = w.nd7(&["allow", "--help"]).output().expect("help");
    assert!(
        text(&help.stdout).contains("--run <PID>") && !text(&help.stdout).contains("--session"),
        "{}",
        text(&help.stdout)
    );
    let home = w.in_home("");
    let home = home.trim_end_matches('/');
    assert!(
        w.nd7(&["allow", home])
            .output()
            .expect("allow home")
            .status
            .success()
    );
    w.signal("go1");
    w.wait_for("stage2");
    let deny = w.nd7(&["deny", &outside]).output().expect("deny");
    assert_eq!(
        text(&deny.stdout),
        format!("run {pid}: writes under {outside} denied from the next command\n")
    );
    let deny_again = w.nd7(&["deny", &outside]).output().expect("deny again");
    assert_eq!(
        text(&deny_again.stdout),
        format!("run {pid}: {outside} was not a grant\n")
    );
    assert!(deny_again.status.success());
    w.signal("go2");
    let out = child.wait_with_output().expect("agent ends");
    assert_eq!(
        lines(&out),
        [
            "before:1",
            "allowed:0",
            "agent-after-allow:1",
            "nd7-with-home-granted:1",
            "home-granted:0",
            "allow-from-inside:2",
            "denied:1",
        ]
    );
    assert!(w.outside().join("allowed").exists());
    assert!(!w.outside().join("before").exists() && !w.outside().join("denied").exists());
    assert!(!w.home().join(".nd7/x").exists());
}

#[test]
fn allow_and_deny_say_what_is_wrong_and_exit_2() {
    let w = World::new();
    let none = w.nd7(&["allow", "/tmp"]).output().expect("allow");
    assert_eq!(none.status.code(), Some(2));
    assert_eq!(text(&none.stderr), "nd7 allow: no nd7 run is running\n");
    assert!(none.stdout.is_empty());

    let (child, pid) = w.start_agent("wait_for done");
    let (second, pid2) = w.start_agent("wait_for done");
    let several = w.nd7(&["allow", "/tmp"]).output().expect("allow");
    assert_eq!(several.status.code(), Some(2));
    // Each session is listed with its project and start, not as a bare pid.
    let listed = text(&several.stderr);
    assert!(
        listed.starts_with("nd7 allow: several nd7 runs are running; name one with --run PID:\n"),
        "{listed}"
    );
    for p in [pid, pid2] {
        assert!(
            listed.contains(&format!("  --run {p}  {}  since ", w.proj().display())),
            "{listed}"
        );
    }
    let session = pid.to_string();
    // Mistakes in the arguments: clap's message, never two usage lines.
    for args in [
        &["allow"][..],
        &["allow", "--run"],
        &["allow", "--run", &session, "/a", "/b"],
        &["allow", "--preset", "cargo", "/a"],
    ] {
        let out = w.nd7(args).output().expect("allow");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = text(&out.stderr);
        // At most one usage line (clap gives none for a missing value, and
        // only what is required, `<PATH>`, when nothing is given).
        assert!(err.starts_with("error: "), "{err}");
        assert!(err.matches("Usage:").count() <= 1, "{err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    let cases: &[(&[&str], String)] = &[
        (
            &["allow", "--run", &session, "/no/such/dir"],
            "nd7 allow: cannot create /no/such/dir to grant it: Permission denied (os error 13)\n"
                .into(),
        ),
        (
            &["allow", "--run", &session, "--preset", "nope"],
            "nd7 allow: --preset nope: no such preset; the presets are npm, pnpm, yarn, cargo, pip, uv, python-user, go, maven, gradle\n"
                .into(),
        ),
        (
            &["allow", "--run", &session, &w.in_home(".nd7")],
            "nd7 allow: nd7's own records can never be made writable\n".into(),
        ),
        (
            &["allow", "--run", &session, &w.in_home(".nd7/runs")],
            "nd7 allow: nd7's own records can never be made writable\n".into(),
        ),
        (
            &["allow", "--run", &session, "~/.nd7/new"],
            "nd7 allow: nd7's own records can never be made writable\n".into(),
        ),
    ];
    for (args, expected) in cases {
        let out = w.nd7(args).output().expect("allow");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(text(&out.stderr), *expected, "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    assert!(
        !w.home().join(".nd7/new").exists(),
        "nothing made under ~/.nd7"
    );
    // deny takes a path that no longer resolves as it is written.
    let gone = w.root.join("gone");
    std::fs::create_dir(&gone).expect("mkdir");
    let gone_text = gone.display().to_string();
    assert!(
        w.nd7(&["allow", "--run", &session, &gone_text])
            .output()
            .expect("allow")
            .status
            .success()
    );
    std::fs::remove_dir(&gone).expect("rmdir");
    let deny = w
        .nd7(&["deny", "--run", &session, &gone_text])
        .output()
        .expect("deny");
    assert_eq!(
        text(&deny.stdout),
        format!("run {pid}: writes under {gone_text} denied from the next command\n")
    );
    let record: serde_json::Value = serde_json::from_slice(
        &std::fs::read(w.sessions().join(&session).join("record.json")).expect("record"),
    )
    .expect("json");
    assert_eq!(record["grants"], serde_json::json!([]));
    w.signal("done");
    for c in [child, second] {
        assert!(c.wait_with_output().expect("ends").status.success());
    }
}

#[test]
fn exit_codes_and_signals_come_through_unchanged() {
    let w = World::new();
    let out = w.run_agent(
        r#"
"$EXEC" 'exit 7'; echo "exit:$?"
"$EXEC" 'kill -TERM $$'; echo "killed:$?"
FORWARDED_VAR=kept "$EXEC" 'printf "%s|" "$0" "$PWD"; echo "$FORWARDED_VAR"'
"$EXEC" 'trap "echo got-term; exit 3" TERM; touch ready; sleep 30 & wait' &
wait_for ready; kill -TERM $!; wait $!; echo "forwarded:$?"
"$EXEC" 'read line; echo "stdin:$line"' <<< "from-agent"
"#,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let proj = w.proj().display().to_string();
    assert_eq!(
        lines(&out),
        [
            "exit:7".to_string(),
            "killed:143".into(),
            format!("/bin/bash|{proj}|kept"),
            "got-term".into(),
            "forwarded:3".into(),
            "stdin:from-agent".into(),
        ]
    );
}

#[test]
fn run_exits_with_the_programs_status_and_leaves_no_session_behind() {
    let w = World::new();
    let out = w.run_agent("exit 42");
    assert_eq!(out.status.code(), Some(42));
    let out = w.run_agent("kill -KILL $$");
    assert_eq!(out.status.code(), Some(128 + 9));
    assert_eq!(
        std::fs::read_dir(w.sessions()).expect("sessions").count(),
        0,
        "a session directory was left"
    );
}

#[test]
fn a_terminated_run_cleans_up_and_a_killed_one_is_cleaned_next_time() {
    let w = World::new();
    // SIGTERM goes on to the agent, and the session is removed.
    let (child, pid) = w.start_agent("trap 'exit 5' TERM; touch up; while :; do sleep 0.05; done");
    w.wait_for("up");
    let run_pid = child.id();
    assert!(w.sessions().join(pid.to_string()).exists());
    // The child here is `unshare`, which execs sh, which execs nd7: one process.
    Command::new("kill")
        .args(["-TERM", &run_pid.to_string()])
        .status()
        .expect("kill");
    let out = child.wait_with_output().expect("ends");
    assert_eq!(out.status.code(), Some(5));
    assert!(!w.sessions().join(pid.to_string()).exists());

    // SIGKILL leaves the directory; the next nd7 run removes it.
    std::fs::remove_file(w.proj().join("up")).expect("rm");
    let (mut child, pid) = w.start_agent("touch up; sleep 30");
    w.wait_for("up");
    child.kill().expect("SIGKILL nd7 run");
    child.wait().expect("reaped");
    assert!(w.sessions().join(pid.to_string()).exists());
    let out = w.run_agent("true");
    assert!(out.status.success());
    assert!(!w.sessions().join(pid.to_string()).exists());
}

/// `nd7-exec` killed with SIGKILL (it cannot pass that on): `nd7 run` sees
/// its caller hang up and kills the command's process group. Guards the
/// `kill_process_group` after `relay` in the exit's `serve_one`: without it
/// the command sleeps on and the guard below runs out.
///
/// The command holds the write end of a FIFO, whose only reader is the
/// agent: end of file there is the event "the command has ended", waited
/// for rather than guessed at with a polling deadline (under load the
/// earlier version, which polled `/proc/PID` for 20 s after reading a PID
/// file that could still be empty, once saw "still-running"). The `timeout`
/// only keeps a regression from hanging the suite; the command itself
/// would sleep for a day.
#[test]
fn killing_nd7_exec_kills_its_command() {
    let w = World::new();
    let out = w.run_agent(
        r#"
mkfifo alive
"$EXEC" 'exec 3> alive; exec sleep 86400' &
# Returns once the command has opened the FIFO: it is running.
exec 4< alive
kill -KILL $!
wait $! 2>/dev/null
if timeout 300 cat <&4 > /dev/null; then echo "gone"; else echo "still-running"; fi
"#,
    );
    assert_eq!(lines(&out), ["gone"], "{}", text(&out.stderr));
}

#[test]
fn a_forged_environment_or_cwd_changes_nothing() {
    let w = World::new();
    let out = w.run_agent(
        r#"
cd "$OUT/.." 2>/dev/null
HOME=/ XDG_STATE_HOME="$OUT" TMPDIR="$OUT" ND7_SESSION=1 PWD="$OUT" "$EXEC" "touch '$OUT/forged'" 2>/dev/null
echo "forged:$?"
cd "$OUT" && "$EXEC" 'touch here' 2>/dev/null; echo "cwd-outside:$?"
"#,
    );
    assert_eq!(lines(&out), ["forged:1", "cwd-outside:1"]);
    assert!(!w.outside().join("forged").exists() && !w.outside().join("here").exists());
}

#[test]
fn a_process_outside_the_session_is_refused_at_the_exit() {
    let w = World::new();
    // A process that has left the session's tree (its parent exited, so it
    // now belongs to init) asks the exit to run a command. Its status is
    // renamed into place, so the file is never seen before it is written.
    let (child, pid) = w.start_agent(
        r#"
( ( wait_for go; "$EXEC" "touch '$PWD/escaped'" 2> orphan.err; echo $? > orphan.tmp; mv orphan.tmp orphan.rc ) & )
touch started; wait_for orphan.rc; wait_for done
"#,
    );
    w.wait_for("started");
    w.signal("go");
    w.wait_for("orphan.rc");
    let rc = std::fs::read_to_string(w.proj().join("orphan.rc")).expect("rc");
    let err = std::fs::read_to_string(w.proj().join("orphan.err")).expect("err");
    // It cannot find the session from where it now is, so nd7-exec
    // refuses before asking.
    assert_eq!(rc.trim(), "126", "{err}");
    assert!(err.contains("not inside an nd7 run"), "{err}");
    assert!(!w.proj().join("escaped").exists());

    // A process of the same account that was never in the session connects
    // directly: this test binary, run as the account.
    let socket = w.sessions().join(pid.to_string()).join("exit.sock");
    let why = as_account(CONNECT, &socket.display().to_string());
    assert!(
        why.contains("refused: ") && why.contains("is not part of session"),
        "{why}"
    );
    assert!(!w.proj().join("escaped-too").exists());
    w.signal("done");
    assert!(child.wait_with_output().expect("ends").status.success());
}

const CONNECT: &str = "ND7_TEST_CONNECT";

/// Runs this test binary's [`connect_child`] as the world's account (itself
/// when the tests do not run as root), and returns what it printed.
fn as_account(var: &str, value: &str) -> String {
    crate::record_door::test_as_account("sandbox::connect_child", var, value)
}

/// The connecting side of the test above. Does nothing unless started by it.
#[test]
fn connect_child() {
    let Ok(socket) = std::env::var(CONNECT) else {
        return;
    };
    match nd7_core::sandbox::linux::exit::run(
        std::path::Path::new(&socket),
        "touch escaped-too".into(),
    ) {
        Err(nd7_core::sandbox::linux::exit::ExitError::Refused(why)) => println!("refused: {why}"),
        other => println!("not refused: {other:?}"),
    }
}

#[test]
fn nd7_exec_outside_any_session_runs_nothing() {
    let w = World::new();
    let marker = w.outside().join("ran");
    let out = w
        .command(ND7_EXEC, &[&format!("touch '{}'", marker.display())])
        .output()
        .expect("nd7-exec");
    assert_eq!(out.status.code(), Some(126));
    let err = text(&out.stderr);
    assert!(err.contains("not inside an nd7 run"), "{err}");
    assert!(err.contains("the command was not run"), "{err}");
    assert!(!marker.exists());
    let out = w.command(ND7_EXEC, &["a", "b"]).output().expect("nd7-exec");
    assert_eq!(out.status.code(), Some(126));
}

#[test]
fn run_refuses_binaries_others_can_replace() {
    let w = World::new();
    let bin = w.root.join("bin");
    std::fs::create_dir(&bin).expect("mkdir");
    for (from, name) in [(ND7, "nd7"), (ND7_EXEC, "nd7-exec")] {
        std::fs::copy(from, bin.join(name)).expect("copy");
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let nd7 = bin.join("nd7").display().to_string();
    let marker = w.proj().join("ran");
    let out = w
        .command(&nd7, &["run", "touch", &marker.display().to_string()])
        .output()
        .expect("nd7 run");
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("{}: is writable by anyone", bin.display())),
        "{err}"
    );
    assert!(!marker.exists());
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::set_permissions(bin.join("nd7-exec"), std::fs::Permissions::from_mode(0o775))
        .expect("chmod");
    let out = w.command(&nd7, &["run", "true"]).output().expect("nd7 run");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("nd7-exec: is writable by its group"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn claude_gets_the_shell_prefix_and_one_settings_merged_with_the_users_own() {
    let w = World::new();
    // A stand-in named `claude` that writes down its arguments.
    let bin = w.root.join("bin");
    std::fs::create_dir(&bin).expect("mkdir");
    let claude = bin.join("claude");
    std::fs::write(
        &claude,
        "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done > args.txt\nprintf '%s\\n' \"$CLAUDE_CODE_SHELL_PREFIX\" > prefix.txt\n",
    )
    .expect("write stand-in");
    std::fs::set_permissions(&claude, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let claude = claude.display().to_string();
    let args = |w: &World| -> Vec<String> {
        std::fs::read_to_string(w.proj().join("args.txt"))
            .expect("args")
            .lines()
            .map(str::to_string)
            .collect()
    };

    let out = w.nd7(&["run", &claude, "-p", "hi"]).output().expect("run");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let got = args(&w);
    assert_eq!(got[0], "--settings");
    assert_eq!(&got[2..], ["-p", "hi"]);
    let settings: serde_json::Value = serde_json::from_str(&got[1]).expect("json");
    assert_eq!(settings["sandbox"]["enabled"], false);
    // nd7-exec is the shell prefix, in the settings and the environment; no
    // hook rewrites a command (ADR-0040).
    assert_eq!(settings["env"]["CLAUDE_CODE_SHELL_PREFIX"], ND7_EXEC);
    assert_eq!(
        std::fs::read_to_string(w.proj().join("prefix.txt")).expect("env"),
        format!("{ND7_EXEC}\n")
    );
    let pre = &settings["hooks"]["PreToolUse"];
    assert_eq!(pre.as_array().map(Vec::len), Some(1), "{pre}");
    // The record hook starts the nd7-record beside nd7 (ADR-0151).
    assert_eq!(pre[0]["hooks"][0]["command"], ND7_RECORD);
    assert_eq!(
        pre[0]["hooks"][0]["args"],
        serde_json::json!(["--run-hook"])
    );
    // The hook that tells the model what the floor refused, after the record hook.
    let explain = &settings["hooks"]["PostToolUseFailure"][1];
    assert_eq!(explain["matcher"], "Bash|Write|Edit|MultiEdit|NotebookEdit");
    assert_eq!(explain["hooks"][0]["command"], ND7);
    assert_eq!(
        explain["hooks"][0]["args"],
        serde_json::json!(["hook-explain"])
    );

    // The user's own --settings (a file here) is merged into the one passed.
    let theirs = w.proj().join("mine.json");
    std::fs::write(&theirs, r#"{"model":"m","sandbox":{"enabled":true}}"#).expect("write");
    let out = w
        .nd7(&[
            "run",
            &claude,
            "--settings",
            &theirs.display().to_string(),
            "-c",
        ])
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let got = args(&w);
    assert_eq!(got.len(), 3, "{got:?}");
    assert_eq!(got[2], "-c");
    let settings: serde_json::Value = serde_json::from_str(&got[1]).expect("json");
    assert_eq!(settings["model"], "m");
    assert_eq!(settings["sandbox"]["enabled"], false);
    assert_eq!(settings["hooks"]["PostToolUse"][1]["matcher"], "Bash");

    let out = w
        .nd7(&["run", &claude, "--settings=/no/such.json"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("your --settings for Claude Code: /no/such.json: No such file"),
        "{}",
        text(&out.stderr)
    );
}

/// `std::process::Command` ran the agent with `execvp`, which runs a file
/// without a `#!` line through `/bin/sh` (POSIX); guards `launch.rs`'s
/// fallback to `/bin/sh` on ENOEXEC, without which `execve` fails.
#[test]
fn a_script_without_a_shebang_still_runs_as_the_agent() {
    let w = World::new();
    let script = w.proj().join("plain-agent");
    std::fs::write(&script, "echo ran-plain\n").expect("write");
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let out = w.nd7(&["run", "./plain-agent"]).output().expect("nd7 run");
    assert!(
        text(&out.stdout).contains("ran-plain"),
        "{:?} {}",
        out.status,
        text(&out.stderr)
    );
}
