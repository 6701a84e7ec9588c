//! Exit statuses that must hold however a command ends: the commands Claude
//! Code and Codex run as hooks (`nd7 record` and `nd7-record`, `nd7
//! hook-explain`, `nd7 hook-route`) exit 0, and record
//! prints nothing on standard output, even when they panic, run out of memory
//! or overflow the stack; every printing command exits 0, quietly, when its
//! reader closes the pipe, `nd7-exec` included.
//!
//! Release builds abort on panic (`panic = "abort"`), so these are checked
//! against release binaries too. `cargo test` has only its debug build;
//! `.ci/run` builds the two release binaries and runs the ignored tests at the
//! end of this file with `ND7_RELEASE_BIN` (the shipped build) and
//! `ND7_FAULT_BIN` (the same profile with the `fault-injection` feature).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::common::*;

/// A command an agent runs as a hook: its arguments after `nd7`, a payload
/// it acts on, and whether it runs as it does under `nd7 run` (`ND7_RUN`
/// set, so `hook-route` reads its payload rather than stopping first).
struct HookCall {
    args: &'static [&'static str],
    payload: &'static str,
    under_run: bool,
}

impl HookCall {
    /// The name its messages start with, after `nd7 `.
    fn name(&self) -> &'static str {
        self.args[0]
    }
}

const STOP: &str = r#"{"session_id":"exit-status","hook_event_name":"Stop"}"#;

/// Every hook command nd7 registers (`hooks_cover_every_registered_hook`
/// holds this list to the settings): record as `nd7 setup` and `nd7 run`
/// register it for Claude Code and for Codex, hook-explain, hook-route.
const HOOKS: [HookCall; 6] = [
    HookCall {
        args: &["record"],
        payload: STOP,
        under_run: false,
    },
    HookCall {
        args: &["record", "--run-hook"],
        payload: STOP,
        under_run: false,
    },
    HookCall {
        args: &["record", "--agent", "codex"],
        payload: STOP,
        under_run: false,
    },
    HookCall {
        args: &["record", "--agent", "codex", "--run-hook"],
        payload: STOP,
        under_run: false,
    },
    HookCall {
        args: &["hook-explain"],
        payload: r#"{"session_id":"exit-status","hook_event_name":"PostToolUseFailure","tool_name":"Bash","tool_input":{"command":"ls"},"error":"Permission denied"}"#,
        under_run: false,
    },
    HookCall {
        args: &["hook-route"],
        payload: r#"{"session_id":"exit-status","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"ls"}}"#,
        under_run: true,
    },
];

/// The argument lists of every hook nd7 registers: `nd7 setup`'s for
/// Claude Code and Codex, and `nd7 run`'s for each.
fn registered_hooks() -> Vec<Vec<String>> {
    use nd7_core::hook::Recorder;
    use nd7_core::{codex, setup, shell_prefix};
    let nd7 = "/opt/nd7/nd7";
    let lean = "/opt/nd7/nd7-record";
    let strings = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .expect("args")
            .iter()
            .map(|a| a.as_str().expect("an argument").to_string())
            .collect()
    };
    let mut all = Vec::new();
    // `nd7-record ARGS` runs as `nd7 record ARGS`: its hooks are counted so.
    for recorder in [Recorder::nd7(nd7), Recorder::lean(lean)] {
        let as_nd7 = |mut args: Vec<String>| {
            if recorder.is_lean() {
                args.insert(0, "record".into());
            }
            args
        };
        let command = |hook: &serde_json::Value| {
            if hook["command"] == lean {
                as_nd7(strings(&hook["args"]))
            } else {
                assert_eq!(hook["command"], nd7, "{hook}");
                strings(&hook["args"])
            }
        };
        let shell = |line: &str| {
            let words = shlex::split(line).expect("a shell command");
            if words[0] == lean {
                as_nd7(words[1..].to_vec())
            } else {
                assert_eq!(words[0], nd7, "{line}");
                words[1..].to_vec()
            }
        };
        all.push(command(&setup::merge::nd7_hook(&recorder, "Stop")));
        let run = shell_prefix::run_settings(&recorder, nd7, "/opt/nd7/nd7-exec", None, &["Stop"])
            .expect("run settings");
        for groups in run["hooks"].as_object().expect("hooks").values() {
            for group in groups.as_array().expect("groups") {
                for hook in group["hooks"].as_array().expect("hooks") {
                    all.push(command(hook));
                }
            }
        }
        all.push(shell(&setup::codex_merge::command(&recorder)));
        all.extend(
            codex::run::run_hooks(nd7, &recorder)
                .iter()
                .map(|h| shell(&h.command)),
        );
    }
    all.sort();
    all.dedup();
    all
}

/// A hook nd7 registers that these tests do not run would go unchecked:
/// fails when a settings change adds one (or changes its arguments) without
/// adding it to [`HOOKS`].
#[test]
fn hooks_cover_every_registered_hook() {
    let covered: Vec<Vec<String>> = HOOKS
        .iter()
        .map(|h| h.args.iter().map(|a| a.to_string()).collect())
        .collect();
    let registered = registered_hooks();
    assert!(registered.len() >= 5, "{registered:?}");
    for args in registered {
        assert!(
            covered.contains(&args),
            "{args:?} is registered as a hook but not in HOOKS"
        );
    }
}

/// A pipe whose reading end is already closed: every write to it fails with
/// EPIPE at once, so no test depends on when a reader goes away.
fn closed_pipe() -> std::io::PipeWriter {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    writer
}

/// `bin` with a scratch state and home of its own.
fn nd7(bin: &Path, state: &State) -> Command {
    let mut cmd = Command::new(bin);
    cmd.env("XDG_STATE_HOME", state.xdg())
        .env("HOME", state.dir.path().join("home"))
        .env_remove("ND7_FAULT")
        .env_remove("ND7_RUN")
        .env_remove("RUST_BACKTRACE");
    cmd
}

/// Whether `bin` is `nd7-record`, which takes `nd7 record`'s arguments
/// without the `record`.
fn is_nd7_record(bin: &Path) -> bool {
    bin.file_name() == Some(std::ffi::OsStr::new("nd7-record"))
}

/// The hooks `bin` runs: all of them for `nd7`, the record hooks for
/// `nd7-record`.
fn hooks_of(bin: &Path) -> impl Iterator<Item = &'static HookCall> {
    let lean = is_nd7_record(bin);
    HOOKS.iter().filter(move |h| !lean || h.args[0] == "record")
}

/// `bin` (`nd7` or `nd7-record`) running `record`.
fn record_cmd(bin: &Path, state: &State) -> Command {
    let mut cmd = nd7(bin, state);
    if !is_nd7_record(bin) {
        cmd.arg("record");
    }
    cmd
}

/// `hook`'s arguments for `bin`.
fn hook_args(bin: &Path, hook: &HookCall) -> &'static [&'static str] {
    if is_nd7_record(bin) {
        &hook.args[1..]
    } else {
        hook.args
    }
}

/// `bin` running `hook`, with `ND7_RUN` naming a run directory (one that
/// does not exist: nothing may reach a door) when it runs under `nd7 run`.
fn hook_cmd(bin: &Path, state: &State, hook: &HookCall) -> Command {
    let mut cmd = nd7(bin, state);
    cmd.args(hook_args(bin, hook));
    if hook.under_run {
        cmd.env("ND7_RUN", state.dir.path().join("no-run"));
    }
    cmd
}

/// What every failed hook must look like: 0, nothing on stdout (no reply,
/// for hook-explain), and no log written.
fn assert_survived(out: &Output, state: &State, hook: &str, needle: &str) {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{hook}: {:?}; stderr: {}",
        out.status,
        stderr(out)
    );
    assert_eq!(stdout(out), "", "{hook}: nothing on stdout");
    let err = stderr(out);
    assert!(
        err.contains(&format!("nd7 {hook}: {needle}")),
        "{hook}: {err:?} lacks {needle:?}"
    );
    assert!(
        lines(&state.log("exit-status")).is_empty(),
        "{hook}: nothing was recorded"
    );
}

/// Each injected fault ends a hook in a different way: a panic (an abort, in
/// release builds), a stack overflow and a failed allocation (both aborts in
/// every build). Guards the panic hook and the SIGABRT handler that
/// src/bin/nd7/hooks.rs's `guard` installs.
fn hooks_survive_injected_faults(bin: &Path) {
    for hook in hooks_of(bin) {
        for (fault, needle) in [
            ("panic", "internal error (injected fault"),
            ("stack-overflow", "aborted ("),
            ("out-of-memory", "aborted ("),
        ] {
            let state = State::new();
            let out = run_with_stdin(
                hook_cmd(bin, &state, hook).env("ND7_FAULT", fault),
                hook.payload.as_bytes(),
            );
            assert_survived(&out, &state, hook.name(), needle);
            // And with standard error gone too.
            let out = hook_cmd(bin, &state, hook)
                .env("ND7_FAULT", fault)
                .stdin(Stdio::null())
                .stderr(closed_pipe())
                .output()
                .expect("run nd7");
            assert_eq!(
                out.status.code(),
                Some(0),
                "{:?} {fault}: {:?}",
                hook.args,
                out.status
            );
        }
    }
}

/// Ways to end a hook that need no trigger inside it, so they run against
/// the shipped binary as it is.
fn hooks_survive_without_a_trigger(bin: &Path) {
    for hook in hooks_of(bin) {
        // SIGABRT is how every abort starts, a panic under panic = "abort"
        // too. Sent once the handler is in place (the process catches
        // SIGABRT) and while the hook waits for its payload.
        let state = State::new();
        let child = hook_cmd(bin, &state, hook)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn nd7");
        wait_until_catching_sigabrt(child.id());
        let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("a pid");
        rustix::process::kill_process(pid, rustix::process::Signal::ABORT).expect("kill");
        let out = child.wait_with_output().expect("wait");
        assert_survived(&out, &state, hook.name(), "aborted (");

        // A real allocation failure: a 6 MB payload needs a few hundred MB
        // as a JSON tree, over a 128 MiB address-space limit.
        let state = State::new();
        let big = format!(
            r#"{},"x":[{}0]}}"#,
            hook.payload.strip_suffix('}').expect("an object"),
            "0,".repeat(3_000_000)
        );
        let mut cmd = Command::new("prlimit");
        cmd.arg(format!("--as={}", 128 << 20))
            .arg(bin)
            .args(hook_args(bin, hook))
            .env("XDG_STATE_HOME", state.xdg())
            .env_remove("ND7_RUN")
            .env_remove("RUST_BACKTRACE");
        if hook.under_run {
            cmd.env("ND7_RUN", state.dir.path().join("no-run"));
        }
        let out = run_with_stdin(&mut cmd, big.as_bytes());
        assert_survived(&out, &state, hook.name(), "aborted (");
    }

    // Nesting deep enough to overflow a recursive parser is refused by the
    // parser's depth limit, in one line.
    let state = State::new();
    let deep = format!(
        r#"{{"session_id":"exit-status","x":{}{}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let out = run_with_stdin(&mut record_cmd(bin, &state), deep.as_bytes());
    assert_survived(
        &out,
        &state,
        "record",
        "the payload is not valid JSON: recursion limit",
    );
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));

    // Stray arguments: clap would exit 2 (a block, to a hook) or print help
    // on standard output. `--agent` names Claude Code or Codex, nothing else.
    for args in [
        &["--verbose"][..],
        &["--help"],
        &["x", "y"],
        &["--agent"],
        &["--agent", "gemini"],
        &["--agent", "codex", "--help"],
    ] {
        let state = State::new();
        let out = run_with_stdin(
            record_cmd(bin, &state).args(args),
            HOOKS[0].payload.as_bytes(),
        );
        assert_survived(&out, &state, "record", &format!("arguments {args:?}: "));
    }

    // A refusal reported on a closed standard error.
    let state = State::new();
    let out = record_cmd(bin, &state)
        .stdin(Stdio::null())
        .stderr(closed_pipe())
        .output()
        .expect("run nd7 record");
    assert_eq!(out.status.code(), Some(0), "{:?}", out.status);
}

/// Polls /proc until `pid` has a handler for SIGABRT (the bound only keeps a
/// broken build from hanging the suite; nothing here is timed).
fn wait_until_catching_sigabrt(pid: u32) {
    let sigabrt_bit = 1u64 << (6 - 1);
    for _ in 0..60_000 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let caught = status
            .lines()
            .find_map(|l| l.strip_prefix("SigCgt:"))
            .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
            .unwrap_or(0);
        if caught & sigabrt_bit != 0 {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    panic!("nd7 record (pid {pid}) never installed its SIGABRT handler");
}

#[test]
fn hooks_exit_0_however_they_fail() {
    let bin = Path::new(env!("CARGO_BIN_EXE_nd7"));
    hooks_survive_injected_faults(bin);
    hooks_survive_without_a_trigger(bin);
}

/// The same for `nd7-record`, the binary the hooks setup wires run
/// (ADR-0151): guards the `hooks::record` call of src/bin/nd7-record.rs
/// (its `guard`, and the arguments it hands on).
#[test]
fn nd7_record_exits_0_however_it_fails() {
    let bin = Path::new(env!("CARGO_BIN_EXE_nd7-record"));
    hooks_survive_injected_faults(bin);
    hooks_survive_without_a_trigger(bin);
}

/// A state with three sessions, a settings file and the files the admin
/// commands read, for [`printing_commands`].
fn printing_state() -> State {
    let state = State::new();
    for (i, session) in ["a", "b", "c"].iter().enumerate() {
        assert!(
            state
                .record(payload(session, i).as_bytes())
                .status
                .success()
        );
    }
    std::fs::create_dir_all(state.dir.path().join("home")).expect("home");
    std::fs::write(state.dir.path().join("settings.json"), "{}").expect("settings");
    state
}

/// Every command that prints to standard output, with what it needs.
fn printing_commands(state: &State) -> Vec<(Vec<String>, Option<String>)> {
    let dir = state.dir.path();
    let settings = dir.join("settings.json").display().to_string();
    let tmp = |name: &str| dir.join(name).display().to_string();
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    vec![
        (args(&["verify", "--all"]), None),
        (args(&["verify", "a"]), None),
        (args(&["sessions"]), None),
        (args(&["show", "a"]), None),
        (args(&["show", "--json", "a"]), None),
        (args(&["show", "--html", "a"]), None),
        (args(&["search", "echo"]), None),
        (args(&["doctor", "--settings", &settings]), None),
        (args(&["setup", "--dry-run", "--settings", &settings]), None),
        (args(&["completions", "bash"]), None),
        (args(&["completions", "zsh"]), None),
        (args(&["completions", "fish"]), None),
        (args(&["--help"]), None),
        (args(&["help", "verify"]), None),
        (args(&["--version"]), None),
    ]
    .into_iter()
    .chain(
        ["org-key", "age-key"]
            .into_iter()
            .map(|key| (args(&["admin", key, "--out", &tmp(key)]), None)),
    )
    .collect()
}

fn run_printing(bin: &Path, state: &State, args: &[String], input: &Option<String>) -> Command {
    if args[0] == "admin" {
        // The key commands refuse to overwrite their output file.
        let _ = std::fs::remove_file(&args[3]);
    }
    let mut cmd = nd7(bin, state);
    cmd.args(args);
    match input {
        Some(text) => {
            let file = state.dir.path().join("stdin");
            std::fs::write(&file, text).expect("stdin file");
            cmd.stdin(std::fs::File::open(file).expect("open"));
        }
        None => {
            cmd.stdin(Stdio::null());
        }
    }
    cmd
}

/// Guards the print macros of src/bin/nd7/out.rs: with std's, each of these
/// panics on EPIPE (134 in a release build).
fn printing_commands_end_quietly_on_a_closed_pipe(bin: &Path) {
    let state = printing_state();
    for (args, input) in printing_commands(&state) {
        // Each prints something when its reader stays, so the closed pipe
        // below is really written to.
        let out = run_printing(bin, &state, &args, &input)
            .output()
            .expect("run nd7");
        assert!(!out.stdout.is_empty(), "{args:?} prints: {}", stderr(&out));
        let out = run_printing(bin, &state, &args, &input)
            .stdout(closed_pipe())
            .stderr(Stdio::piped())
            .output()
            .expect("run nd7");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?} on a closed pipe: {:?}, stderr {}",
            out.status,
            stderr(&out)
        );
        assert_eq!(stderr(&out), "", "{args:?} ends quietly");
    }
    // A full disk is not a reader going away: said, and status 2.
    let out = run_printing(bin, &state, &["verify".into(), "--all".into()], &None)
        .stdout(std::fs::File::create("/dev/full").expect("/dev/full"))
        .output()
        .expect("run nd7");
    assert_eq!(out.status.code(), Some(2), "{:?}", out.status);
    assert!(
        stderr(&out).contains("nd7: cannot write to standard output: "),
        "{}",
        stderr(&out)
    );
    // A command whose stderr is gone still ends with its own status.
    let out = run_printing(bin, &state, &["verify".into(), "nope".into()], &None)
        .stderr(closed_pipe())
        .output()
        .expect("run nd7");
    assert_eq!(out.status.code(), Some(2), "{:?}", out.status);
    exec_ends_quietly(&bin.with_file_name("nd7-exec"), &state);
}

/// `nd7-exec`, the one beside `nd7`, follows the same rule: its help on a
/// closed pipe ends with 0, and a refusal with standard error closed still
/// exits 126. Guards the `mod out` line of src/bin/nd7-exec.rs: with std's
/// print macros, each write panics (101; 134 in a release build).
fn exec_ends_quietly(exec: &Path, state: &State) {
    let help = || {
        let mut cmd = nd7(exec, state);
        cmd.arg("--help").stdin(Stdio::null());
        cmd
    };
    let out = help().output().expect("run nd7-exec");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("Run one command"),
        "{}",
        stdout(&out)
    );
    let out = help()
        .stdout(closed_pipe())
        .stderr(Stdio::piped())
        .output()
        .expect("run nd7-exec");
    assert_eq!(
        out.status.code(),
        Some(0),
        "--help on a closed pipe: {:?}, stderr {}",
        out.status,
        stderr(&out)
    );
    assert_eq!(stderr(&out), "", "--help ends quietly");
    // Refusals: no command, and a command outside any run.
    for args in [&[][..], &["true"]] {
        let refused = || {
            let mut cmd = nd7(exec, state);
            cmd.args(args)
                .env_remove("CLAUDE_CODE_SHELL_PREFIX")
                .stdin(Stdio::null());
            cmd
        };
        let out = refused().output().expect("run nd7-exec");
        assert_eq!(out.status.code(), Some(126), "{args:?}: {:?}", out.status);
        assert!(
            stderr(&out).starts_with("nd7-exec: "),
            "{args:?}: {}",
            stderr(&out)
        );
        let out = refused()
            .stderr(closed_pipe())
            .output()
            .expect("run nd7-exec");
        assert_eq!(
            out.status.code(),
            Some(126),
            "{args:?} with stderr closed: {:?}",
            out.status
        );
    }
}

#[test]
fn printing_commands_exit_0_when_the_reader_goes_away() {
    printing_commands_end_quietly_on_a_closed_pipe(Path::new(env!("CARGO_BIN_EXE_nd7")));
}

#[cfg(feature = "vault-server")]
#[test]
fn vault_admin_commands_exit_0_when_the_reader_goes_away() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("vault.db");
    // The vault's key, printed once when it is made.
    let out = Command::new(env!("CARGO_BIN_EXE_nd7-vault"))
        .args(["key", "--db"])
        .arg(&db)
        .stdout(closed_pipe())
        .stderr(Stdio::piped())
        .output()
        .expect("run nd7-vault key");
    assert_eq!(out.status.code(), Some(0), "key: {}", stderr(&out));
    assert_eq!(stderr(&out), "", "key ends quietly");
    let sub = "read-token";
    let out = Command::new(env!("CARGO_BIN_EXE_nd7-vault"))
        .args([sub, "--db"])
        .arg(&db)
        .stdout(closed_pipe())
        .stderr(Stdio::piped())
        .output()
        .expect("run nd7-vault");
    assert_eq!(out.status.code(), Some(0), "{sub}: {}", stderr(&out));
    assert_eq!(stderr(&out), "", "{sub} ends quietly");
    let out = Command::new(env!("CARGO_BIN_EXE_nd7-vault"))
        .args([sub, "--db"])
        .arg(&db)
        .output()
        .expect("run nd7-vault");
    assert_eq!(stdout(&out).trim().len(), 40, "{sub} prints a token");
}

/// A release binary named by `var`, which .ci/run sets.
fn release_bin(var: &str) -> PathBuf {
    let bin = std::env::var_os(var).unwrap_or_else(|| {
        panic!(
            "{var} is not set: this test runs against a release build. Build one and name it, as .ci/run does:\n  \
             cargo build --release --locked --bin nd7 && {var}=$PWD/target/release/nd7 (for ND7_FAULT_BIN add --features fault-injection)"
        )
    });
    let bin = PathBuf::from(bin);
    assert!(bin.is_file(), "{var}={} is not a file", bin.display());
    bin
}

#[test]
#[ignore = "needs ND7_RELEASE_BIN and ND7_FAULT_BIN, release builds (.ci/run runs it)"]
fn release_hooks_exit_0_however_they_fail() {
    let shipped = release_bin("ND7_RELEASE_BIN");
    hooks_survive_without_a_trigger(&shipped);
    // The shipped build has no trigger: ND7_FAULT changes nothing.
    let state = State::new();
    let out = run_with_stdin(
        nd7(&shipped, &state)
            .arg("record")
            .env("ND7_FAULT", "panic"),
        HOOKS[0].payload.as_bytes(),
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stderr(&out), "");
    assert_eq!(lines(&state.log("exit-status")).len(), 1);

    let probe = release_bin("ND7_FAULT_BIN");
    hooks_survive_injected_faults(&probe);
    // And the nd7-record each was built and installed with.
    hooks_survive_without_a_trigger(&shipped.with_file_name("nd7-record"));
    hooks_survive_injected_faults(&probe.with_file_name("nd7-record"));
}

/// The shipped build (`cargo install`, no `self-update` feature) still has
/// the subcommand: it says how to update this nd7 and exits 2, changing
/// nothing. Guards the `cfg(not(feature = "self-update"))` `run_self_update`
/// in src/bin/nd7.rs.
#[test]
#[ignore = "needs ND7_RELEASE_BIN, a release build without self-update (.ci/run runs it)"]
fn release_self_update_says_how_to_update() {
    let shipped = release_bin("ND7_RELEASE_BIN");
    let state = State::new();
    let out = nd7(&shipped, &state)
        .args(["self-update", "--allow-downgrade"])
        .output()
        .expect("run nd7 self-update");
    assert_eq!(out.status.code(), Some(2), "{:?}", out.status);
    assert_eq!(stdout(&out), "");
    assert_eq!(
        stderr(&out),
        format!("nd7 self-update: {}\n", nd7_core::cli::NO_SELF_UPDATE)
    );
}

#[test]
#[ignore = "needs ND7_RELEASE_BIN, a release build (.ci/run runs it)"]
fn release_printing_commands_exit_0_when_the_reader_goes_away() {
    printing_commands_end_quietly_on_a_closed_pipe(&release_bin("ND7_RELEASE_BIN"));
}
