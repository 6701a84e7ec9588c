//! End to end with the real Claude Code: a scripted session played by a local
//! Messages API, real hooks calling the real `nd7 record`, real tools touching
//! a scratch project; then assertions on nd7's log, `nd7 verify`, the tool
//! results Claude Code sent back, and the file system.
//!
//! To add a scenario: script the turns with [`mock_api::Block`]s, call
//! [`session`], and assert on what it returns.

pub(crate) mod claude;
mod codex;
#[cfg(target_os = "linux")]
mod codex_run;
mod codex_session;
#[cfg(target_os = "linux")]
mod daily;
mod deferred;
#[cfg(target_os = "linux")]
mod interactive;
pub(crate) mod mock_api;
mod mock_responses;
mod transcript;

use mock_api::{Block, MockApi, bash};
use serde_json::{Value, json};

use crate::common::*;

/// What a finished session left behind.
pub(crate) struct Session {
    pub api: MockApi,
    pub run: claude::Run,
    pub log: nd7_core::session_log::SessionLog,
    pub entries: Vec<Value>,
}

impl Session {
    /// The calls Claude Code refused itself (its permissions), from the
    /// result line of the stream.
    pub fn denials(&self) -> Value {
        self.run
            .stream()
            .into_iter()
            .rfind(|l| l["type"] == "result")
            .map(|r| r["permission_denials"].clone())
            .unwrap_or(Value::Null)
    }

    pub fn kinds(&self) -> Vec<String> {
        self.entries
            .iter()
            .map(|e| e["kind"].as_str().unwrap_or("?").to_string())
            .collect()
    }

    pub fn of_kind(&self, kind: &str) -> Vec<&Value> {
        self.entries.iter().filter(|e| e["kind"] == kind).collect()
    }

    /// `nd7 verify` on this session, through the binary.
    fn verify(&self) -> std::process::Output {
        std::process::Command::new(env!("CARGO_BIN_EXE_nd7"))
            .args(["verify", self.log.session_id()])
            .env("XDG_STATE_HOME", &self.run.state)
            .output()
            .expect("run nd7 verify")
    }
}

/// Plays the turns `script` writes for a project directory through the real
/// Claude Code, with nd7 recording.
fn session(script: impl FnOnce(&std::path::Path) -> Vec<Vec<Block>>) -> Session {
    session_with(|_| {}, script)
}

/// [`session`], after `prepare` has added to the workspace.
fn session_with(
    prepare: impl FnOnce(&mut claude::Workspace),
    script: impl FnOnce(&std::path::Path) -> Vec<Vec<Block>>,
) -> Session {
    let mut workspace = claude::Workspace::new();
    prepare(&mut workspace);
    session_in(workspace, script)
}

/// [`session`], in a given workspace.
fn session_in(
    workspace: claude::Workspace,
    script: impl FnOnce(&std::path::Path) -> Vec<Vec<Block>>,
) -> Session {
    session_on(workspace, script, MockApi::start)
}

/// [`session_in`], with the API `serve` starts for the scripted turns.
fn session_on(
    workspace: claude::Workspace,
    script: impl FnOnce(&std::path::Path) -> Vec<Vec<Block>>,
    serve: impl FnOnce(Vec<Vec<Block>>) -> MockApi,
) -> Session {
    let s = play_on(workspace, script, serve);
    assert_eq!(
        s.denials(),
        json!([]),
        "Claude Code refused nothing itself\n{}",
        s.run.describe()
    );
    s
}

/// Plays the script in `workspace` to its end, whatever Claude Code itself
/// refuses along the way ([`Session::denials`]).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) fn play(
    workspace: claude::Workspace,
    script: impl FnOnce(&std::path::Path) -> Vec<Vec<Block>>,
) -> Session {
    play_on(workspace, script, MockApi::start)
}

/// [`play`], with the API `serve` starts for the scripted turns.
fn play_on(
    workspace: claude::Workspace,
    script: impl FnOnce(&std::path::Path) -> Vec<Vec<Block>>,
    serve: impl FnOnce(Vec<Vec<Block>>) -> MockApi,
) -> Session {
    let claude = claude::install(&claude::version());
    let turns = script(&workspace.project);
    let scripted = turns.len();
    let api = serve(turns);
    let status = workspace.status;
    let run = claude::run(&claude, &api.url, "run the scripted session", workspace);
    assert_eq!(run.output.status.code(), Some(status), "{}", run.describe());
    assert_eq!(
        api.turns_played(),
        scripted,
        "every scripted turn was played\n{}",
        run.describe()
    );
    let sessions = run.state.join("nd7/sessions");
    let ids: Vec<String> = std::fs::read_dir(&sessions)
        .unwrap_or_else(|e| {
            panic!(
                "no sessions recorded under {}: {e}\n{}",
                sessions.display(),
                run.describe()
            )
        })
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(ids.len(), 1, "one session recorded: {ids:?}");
    let log = nd7_core::session_log::SessionLog::new(&sessions, &ids[0]).expect("session id");
    let entries = entries(&log);
    Session {
        api,
        run,
        log,
        entries,
    }
}

pub(crate) fn assert_clean(s: &Session) {
    let out = s.verify();
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let expected = format!("verified: {} entries, head ", s.entries.len());
    assert!(stdout(&out).starts_with(&expected), "{}", stdout(&out));
}

/// Every tool_call has one tool_result with the same id, after it.
fn assert_calls_paired(s: &Session) {
    for call in s.of_kind("tool_call") {
        let id = &call["tool_use_id"];
        let results: Vec<&Value> = s
            .of_kind("tool_result")
            .into_iter()
            .filter(|r| &r["tool_use_id"] == id)
            .collect();
        assert_eq!(results.len(), 1, "one result for {id}");
        assert!(
            results[0]["seq"].as_u64() > call["seq"].as_u64(),
            "result after call {id}"
        );
    }
    assert_eq!(s.of_kind("tool_call").len(), s.of_kind("tool_result").len());
}

#[test]
fn a_plain_session_is_recorded_in_order_and_verifies() {
    let s = session(|project| {
        vec![
            vec![
                Block::Text("I'll run a command.".into()),
                bash("echo hello-e2e > made-by-bash.txt && cat made-by-bash.txt"),
            ],
            vec![Block::Tool(
                "Write",
                json!({"file_path": project.join("written.txt"), "content": "by the Write tool\n"}),
            )],
            vec![Block::Text("All done.".into())],
        ]
    });
    // The hooks' entries; the transcript's anchors follow some of them
    // (e2e/transcript.rs).
    let kinds: Vec<String> = s
        .kinds()
        .into_iter()
        .filter(|k| !k.starts_with("transcript_"))
        .collect();
    assert_eq!(
        kinds.first().map(String::as_str),
        Some("session_start"),
        "{kinds:?}"
    );
    assert_eq!(
        kinds.get(1).map(String::as_str),
        Some("prompt"),
        "{kinds:?}"
    );
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("session_end"),
        "{kinds:?}"
    );
    let turn_end = kinds
        .iter()
        .position(|k| k == "turn_end")
        .expect("a turn_end");
    assert_eq!(
        turn_end,
        kinds.len() - 2,
        "turn_end right before session_end: {kinds:?}"
    );
    assert_calls_paired(&s);
    assert_clean(&s);

    let bash_call = s.of_kind("tool_call")[0];
    assert_eq!(bash_call["body"]["tool_name"], "Bash");
    assert_eq!(bash_call["body"]["argv"][0], "echo");
    assert_eq!(bash_call["tool_use_id"], s.api.tool_ids()[0].as_str());
    assert_eq!(bash_call["source"], "intent:claude-code");
    let results = s.api.tool_results();
    assert!(results[0].1.contains("hello-e2e"), "{results:?}");
    assert_eq!(
        std::fs::read_to_string(s.run.project.join("made-by-bash.txt"))
            .expect("bash wrote its file"),
        "hello-e2e\n"
    );
    let prompt = &s.of_kind("prompt")[0];
    // Exactly the prompt given: Claude Code appends whatever its stdin holds,
    // which once caught a test that had turned /dev/null into a file.
    assert_eq!(prompt["body"]["prompt"], "run the scripted session");

    let write_call = s.of_kind("tool_call")[1];
    assert_eq!(write_call["body"]["tool_name"], "Write");
    assert_eq!(
        write_call["body"]["paths"],
        json!([s.run.project.join("written.txt")])
    );
    assert_eq!(
        std::fs::read_to_string(s.run.project.join("written.txt")).expect("Write wrote its file"),
        "by the Write tool\n"
    );
}

#[test]
fn a_failing_bash_command_is_a_result_that_is_not_ok() {
    let s = session(|_| vec![vec![bash("echo about-to-fail; exit 7")]]);
    assert_calls_paired(&s);
    let result = s.of_kind("tool_result")[0];
    assert_eq!(result["body"]["ok"], false, "{result}");
    assert_eq!(result["body"]["hook_event_name"], "PostToolUseFailure");
    let error = result["body"]["error"].as_str().unwrap_or_default();
    assert!(error.contains("Exit code 7"), "{error}");
    let results = s.api.tool_results();
    assert!(
        results[0].2,
        "Claude Code told the model the call failed: {results:?}"
    );
    assert_clean(&s);
}

#[test]
fn parallel_tool_calls_in_one_turn_are_all_recorded_on_one_chain() {
    const CALLS: usize = 6;
    let s = session(|_| {
        vec![
            (0..CALLS)
                .map(|i| bash(&format!("echo parallel-{i} > p{i}.txt")))
                .collect(),
        ]
    });
    assert_eq!(s.of_kind("tool_call").len(), CALLS, "{:?}", s.kinds());
    assert_calls_paired(&s);
    let recorded: std::collections::BTreeSet<String> = s
        .of_kind("tool_call")
        .iter()
        .map(|c| c["tool_use_id"].as_str().unwrap_or_default().to_string())
        .collect();
    let handed_out: std::collections::BTreeSet<String> = s.api.tool_ids().into_iter().collect();
    assert_eq!(recorded, handed_out);
    for i in 0..CALLS {
        assert!(s.run.project.join(format!("p{i}.txt")).exists());
    }
    assert_clean(&s);
}

/// What `nd7 run` relies on in Claude Code's shell prefix (ADR-0040), read
/// off this version: every Bash call reaches the prefix as one argument, a
/// line from which `shell_prefix::unwrap` gives back exactly the model's
/// command; a shell-form hook reaches it too, as a line that is not a Bash
/// tool line; exec-form hooks (nd7's own) do not reach it at all.
#[test]
fn the_shell_prefix_hands_nd7_exec_each_bash_line_and_the_hooks_apart() {
    // A stand-in for nd7-exec that writes down what it was given and runs it.
    let bin = tempfile::tempdir().expect("tempdir");
    let seen = bin.path().join("seen");
    let prefix = bin.path().join("nd7-exec");
    std::fs::write(
        &prefix,
        format!(
            "#!/bin/bash\n{{ printf '%s' \"$#\"; printf '\\0%s' \"$@\"; printf '\\0\\n'; }} >> '{}'\nexec /bin/bash -c \"$1\"\n",
            seen.display()
        ),
    )
    .expect("write stand-in");
    std::fs::set_permissions(&prefix, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let command = r#"echo "it's $HOME" `id -u` 'a  b' \; && pwd -P >| cwd-like.txt; echo ran-it"#;
    let hook_out = bin.path().join("hook-ran");
    let prefix_env = prefix.display().to_string();
    let hook = format!("echo shell-form-hook >> '{}'", hook_out.display());
    let s = session_with(
        move |w| {
            w.env.push(("CLAUDE_CODE_SHELL_PREFIX".into(), prefix_env));
            w.extra_hooks
                .push(("PreToolUse", json!({"type": "command", "command": hook})));
        },
        |_| vec![vec![bash(command)]],
    );
    let calls: Vec<Vec<String>> = std::fs::read_to_string(&seen)
        .expect("the prefix ran")
        .lines()
        .map(|l| l.split('\0').map(str::to_string).collect())
        .collect();
    let bash_lines: Vec<&Vec<String>> = calls
        .iter()
        .filter(|c| {
            c.get(1)
                .and_then(|l| nd7_core::shell_prefix::unwrap(l))
                .is_some()
        })
        .collect();
    assert_eq!(bash_lines.len(), 1, "{calls:?}");
    assert_eq!(bash_lines[0][0], "1", "one argument: {calls:?}");
    let call = nd7_core::shell_prefix::unwrap(&bash_lines[0][1]).expect("a Bash line");
    assert_eq!(call.command, command);
    // The shell-form hook went through the prefix too, as another line.
    let others: Vec<&Vec<String>> = calls
        .iter()
        .filter(|c| {
            c.get(1)
                .and_then(|l| nd7_core::shell_prefix::unwrap(l))
                .is_none()
        })
        .collect();
    assert!(
        others.iter().any(|c| c[1].contains("echo shell-form-hook")),
        "{calls:?}"
    );
    assert!(hook_out.exists(), "the hook ran");
    // nd7's exec-form record hooks never reach the prefix.
    assert!(!calls.iter().any(|c| c[1].contains("record")), "{calls:?}");
    let results = s.api.tool_results();
    assert!(results[0].1.contains("ran-it"), "{results:?}");
    // Its own `pwd -P >|` ran as the model wrote it, inside the eval.
    assert!(s.run.project.join("cwd-like.txt").exists());
    // The log keeps the command as the model gave it.
    let call = s.of_kind("tool_call")[0];
    assert_eq!(call["body"]["tool_input"]["command"], command);
    assert_clean(&s);
}

#[test]
fn claude_code_keeps_saving_its_state_through_the_link_setup_leaves() {
    let s = session_with(
        |w| {
            std::fs::write(w.home.path().join(".claude.json"), r#"{"nd7Marker":1}"#)
                .expect("write ~/.claude.json");
        },
        |_| vec![vec![bash("echo hi")]],
    );
    let home = s.run.home.path();
    let link =
        std::fs::read_link(home.join(".claude.json")).expect("~/.claude.json is still a link");
    assert_eq!(link, std::path::Path::new(".claude/claude.json"));
    let saved: Value = serde_json::from_str(
        &std::fs::read_to_string(home.join(".claude/claude.json")).expect("the moved file"),
    )
    .expect("json");
    assert_eq!(saved["nd7Marker"], 1, "{saved}");
    assert!(
        saved.as_object().is_some_and(|o| o.len() > 1),
        "Claude Code saved its state through the link: {saved}"
    );
    let stray: Vec<String> = std::fs::read_dir(home)
        .expect("ls home")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".claude.json.tmp"))
        .collect();
    assert!(
        stray.is_empty(),
        "no temporary file was left in the home directory: {stray:?}"
    );
}

/// Claude Code under `nd7 run`, its home the sandbox world's (Linux: the
/// world mounts its home with `unshare`).
#[cfg(any(target_os = "linux", target_os = "macos"))]
fn sandboxed_session(
    world: &std::sync::Arc<crate::world::World>,
    script: impl FnOnce(&std::path::Path) -> Vec<Vec<Block>>,
) -> Session {
    session_in(claude::Workspace::sandboxed(world.clone()), script)
}

#[cfg(any(target_os = "linux", target_os = "macos"))]
#[test]
#[cfg_attr(
    target_os = "macos",
    ignore = "writes into the real home: the macOS CI job runs it with ND7_TEST_REAL_HOME=1 and --ignored"
)]
fn under_nd7_run_bash_goes_through_nd7_exec_and_stays_inside_the_floor() {
    let world = std::sync::Arc::new(crate::world::World::new());
    let outside = world.outside();
    let key = world.acct.join(".ssh/id_ed25519");
    let s = sandboxed_session(&world, |project| {
        vec![
            vec![bash("echo inside > inside.txt && cat inside.txt")],
            vec![bash(&format!("touch '{}/escaped'", outside.display()))],
            vec![bash(&format!("cat '{}'", key.display()))],
            vec![Block::Tool(
                "Write",
                json!({"file_path": project.join("written.txt"), "content": "by Write\n"}),
            )],
            vec![Block::Text("Done.".into())],
        ]
    });
    let results = s.api.tool_results();
    assert!(
        results[0].1.contains("inside") && !results[0].2,
        "{results:?}"
    );
    // Landlock's refusal is EACCES, Seatbelt's EPERM.
    let denied = if cfg!(target_os = "macos") {
        "Operation not permitted"
    } else {
        "Permission denied"
    };
    for refused in &results[1..3] {
        assert!(refused.2, "refused: {results:?}");
        assert!(refused.1.contains(denied), "{results:?}");
    }
    assert!(!results[2].1.contains("SECRET-KEY"), "{results:?}");
    assert!(!outside.join("escaped").exists());
    assert_eq!(
        std::fs::read_to_string(world.proj().join("written.txt")).expect("Write inside"),
        "by Write\n"
    );
    // Every Bash call ran through nd7-exec, as Claude Code's shell prefix:
    // no hook rewrote it, and the exit wrote each one down.
    let execs: Vec<&Value> = s
        .entries
        .iter()
        .filter(|e| e["kind"] == "exec" && e["source"] == "exit:nd7")
        .collect();
    for result in s.of_kind("tool_result") {
        if result["body"]["tool_name"] == "Bash" {
            let call = &result["tool_use_id"];
            assert!(
                execs
                    .iter()
                    .any(|e| announced_by(e, result, &s.of_kind("tool_call"))),
                "{call} ran through the exit"
            );
            assert!(
                !result["body"]["tool_input"]["command"]
                    .as_str()
                    .unwrap_or("")
                    .contains("nd7-exec"),
                "{result}"
            );
        }
    }
    assert_calls_paired(&s);
    assert_clean(&s);
    // Read back, the session says it ran under nd7 run, and each Bash call
    // shows the command the model gave, marked as routed.
    let lines = ndjson(&read_back(&s, &["show", "--json", s.log.session_id()]));
    assert_eq!(lines[0]["under_nd7_run"], true, "{}", lines[0]);
    let bash_calls: Vec<&Value> = lines
        .iter()
        .filter(|l| l["type"] == "tool" && l["tool"] == "Bash")
        .collect();
    assert_eq!(bash_calls.len(), 3);
    // A call is shown as routed by the `exec` entry that names it, which on
    // macOS none does (docs/sandbox.md, macOS: each nd7-exec opens the chain
    // afresh and knows no call's id).
    assert!(
        bash_calls
            .iter()
            .all(|t| t["routed"] == !cfg!(target_os = "macos")),
        "{bash_calls:#?}"
    );
    assert_eq!(
        bash_calls[0]["command"],
        "echo inside > inside.txt && cat inside.txt"
    );
    assert_eq!(
        bash_calls
            .iter()
            .map(|t| t["status"].clone())
            .collect::<Vec<_>>(),
        // The floor's refusals read as refused, not as failed commands.
        [json!("ok"), json!("refused"), json!("refused")]
    );
    assert_eq!(
        std::fs::read_dir(world.sessions())
            .expect("sessions")
            .count(),
        0,
        "the session directory is gone"
    );
}

#[cfg(any(target_os = "linux", target_os = "macos"))]
#[test]
#[cfg_attr(
    target_os = "macos",
    ignore = "writes into the real home: the macOS CI job runs it with ND7_TEST_REAL_HOME=1 and --ignored"
)]
fn under_nd7_run_allow_reaches_the_next_command() {
    let world = std::sync::Arc::new(crate::world::World::new());
    let outside = world.outside();
    let helper = {
        let world = world.clone();
        std::thread::spawn(move || {
            world.wait_for("ready");
            let out = world.outside().display().to_string();
            let allow = world.nd7(&["allow", &out]).output().expect("nd7 allow");
            world.signal("go");
            allow
        })
    };
    let s = sandboxed_session(&world, |_| {
        let o = outside.display();
        vec![
            vec![bash(&format!("touch '{o}/before'"))],
            vec![bash(
                "touch ready; for _ in $(seq 1200); do [ -e go ] && exit 0; sleep 0.05; done; exit 9",
            )],
            vec![bash(&format!("touch '{o}/after' && echo granted"))],
            vec![Block::Text("Done.".into())],
        ]
    });
    let allow = helper.join().expect("helper");
    assert!(
        String::from_utf8_lossy(&allow.stdout).contains("allowed from the next command"),
        "{allow:?}"
    );
    let results = s.api.tool_results();
    assert!(results[0].2, "{results:?}");
    assert!(!results[1].2, "{results:?}");
    assert!(
        results[2].1.contains("granted") && !results[2].2,
        "{results:?}"
    );
    assert!(!outside.join("before").exists());
    assert!(outside.join("after").exists());
    assert_clean(&s);
}

/// Whether the exit's `exec` entry ran the Bash call (or result) `hook`
/// announced: by `tool_use_id` where the exit names the call (Linux: `nd7
/// run` holds the hooks' announcements); on macOS, where each `nd7-exec`
/// writes its own entry and names none, by the model's command, which must
/// then be unique among `calls` for the pairing to mean anything.
fn announced_by(exec: &Value, hook: &Value, calls: &[&Value]) -> bool {
    if cfg!(target_os = "macos") {
        let command = |v: &Value| v["body"]["tool_input"]["command"].clone();
        let same: Vec<&&Value> = calls
            .iter()
            .filter(|c| command(c) == command(hook))
            .collect();
        assert_eq!(
            same.len(),
            1,
            "a command run twice cannot be paired by its text"
        );
        exec["body"]["bash_command"] == command(hook)
    } else {
        exec["tool_use_id"] == hook["tool_use_id"]
    }
}

/// `nd7 ARGS` reading the session's state directory.
fn read_back(s: &Session, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_nd7"))
        .args(args)
        .env("XDG_STATE_HOME", &s.run.state)
        .env("HOME", &s.run.home_path)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run nd7")
}

fn ndjson(out: &std::process::Output) -> Vec<Value> {
    stdout(out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[test]
fn nd7_show_sessions_and_search_read_a_real_session_back() {
    let s = session(|project| {
        vec![
            vec![bash("echo first-step-e2e")],
            vec![bash("echo about-to-fail-e2e; exit 3")],
            vec![bash("echo third-e2e > third.txt && cat third.txt")],
            vec![Block::Tool(
                "Write",
                json!({"file_path": project.join("notes-e2e.md"), "content": "notes\n"}),
            )],
            vec![Block::Text("Done.".into())],
        ]
    });
    assert_calls_paired(&s);
    let id = s.log.session_id().to_string();

    let out = read_back(&s, &["show", "--json", &id]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let lines = ndjson(&out);
    let tools: Vec<&Value> = lines.iter().filter(|l| l["type"] == "tool").collect();
    let summary: Vec<(String, String)> = tools
        .iter()
        .map(|t| {
            (
                t["tool"].as_str().unwrap_or("?").to_string(),
                t["status"].as_str().unwrap_or("?").to_string(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("Bash", "ok"),
            ("Bash", "failed"),
            ("Bash", "ok"),
            ("Write", "ok")
        ]
        .map(|(a, b)| (a.to_string(), b.to_string())),
        "{lines:#?}"
    );
    for (t, call) in tools.iter().zip(s.of_kind("tool_call")) {
        assert_eq!(t["tool_use_id"], call["tool_use_id"], "in call order");
        assert!(t["result_seq"].is_u64(), "paired: {t}");
    }
    assert_eq!(tools[1]["exit_code"], 3);
    assert!(
        tools[1]["output"]
            .as_str()
            .is_some_and(|o| o.contains("about-to-fail-e2e")),
        "{}",
        tools[1]
    );
    assert_eq!(tools[2]["output"], "third-e2e");
    assert_eq!(
        lines.last().map(|l| l["state"].clone()),
        Some(json!("clean"))
    );

    let text = stdout(&read_back(&s, &["show", &id]));
    let failed: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("FAILED   Bash"))
        .collect();
    assert_eq!(failed.len(), 1, "{text}");
    assert!(failed[0].contains("echo about-to-fail-e2e; exit 3") && failed[0].contains("exit 3"));

    let list = ndjson(&read_back(&s, &["sessions", "--json"]));
    assert_eq!(list.len(), 1);
    let row = &list[0];
    assert_eq!(row["id"], id.as_str());
    assert_eq!(
        (row["tool_calls"].as_u64(), row["failures"].as_u64()),
        (Some(4), Some(1))
    );
    assert_eq!(row["agent"], "claude-code");
    // The version is Claude Code's own, read from its transcript.
    assert_eq!(row["version"], claude::version().as_str(), "{row}");
    assert_eq!(row["project"], s.run.project.display().to_string().as_str());
    assert_eq!(row["chain"]["state"], "clean", "show's verdict is kept");
    assert_eq!(row["under_nd7_run"], false);

    let found = read_back(&s, &["search", "--json", "third-e2e"]);
    assert_eq!(found.status.code(), Some(0));
    let hits = ndjson(&found);
    assert!(
        hits.iter().any(|h| h["field"] == "command"
            && h["session"] == id.as_str()
            && h["text"] == "echo third-e2e > third.txt && cat third.txt"),
        "{hits:#?}"
    );
    assert!(hits.iter().any(|h| h["field"] == "output"), "{hits:#?}");
}

/// Under `nd7 run` the run's chain holds both accounts: each Bash call the
/// hooks recorded has exactly one command through the exit, named by its
/// `tool_use_id`, with how it ended; each event is recorded once, though
/// `nd7 setup`'s hooks in the user settings fire too; `nd7 verify` says the
/// two agree.
#[cfg(any(target_os = "linux", target_os = "macos"))]
#[test]
#[cfg_attr(
    target_os = "macos",
    ignore = "writes into the real home: the macOS CI job runs it with ND7_TEST_REAL_HOME=1 and --ignored"
)]
fn under_nd7_run_the_exits_account_reconciles_with_the_hooks() {
    let world = std::sync::Arc::new(crate::world::World::new());
    let s = sandboxed_session(&world, |_| {
        vec![
            vec![bash("echo first > first.txt")],
            vec![bash("echo about-to-fail; exit 7")],
            vec![bash("echo left > left.txt"), bash("echo right > right.txt")],
            vec![bash("cat first.txt left.txt right.txt")],
            vec![Block::Text("Done.".into())],
        ]
    });
    assert_calls_paired(&s);
    let ours = |kind: &str| -> Vec<&Value> {
        s.entries
            .iter()
            .filter(|e| e["kind"] == kind && e["source"] == "exit:nd7")
            .collect()
    };
    assert_eq!(s.entries[0]["kind"], "run_start");
    assert_eq!(s.entries[0]["body"]["hooks"], true);
    assert_eq!(
        s.entries.last().map(|e| e["kind"].clone()),
        Some(json!("run_end"))
    );
    let calls = s.of_kind("tool_call");
    assert_eq!(calls.len(), 5, "{:?}", s.kinds());
    let execs = ours("exec");
    assert_eq!(execs.len(), 5, "one command through the exit per Bash call");
    for call in &calls {
        let id = &call["tool_use_id"];
        let exec: Vec<&&Value> = execs
            .iter()
            .filter(|x| announced_by(x, call, &calls))
            .collect();
        assert_eq!(exec.len(), 1, "one command for {id}");
        assert_eq!(
            exec[0]["body"]["bash_command"],
            call["body"]["tool_input"]["command"]
        );
        assert!(exec[0]["seq"].as_u64() > call["seq"].as_u64());
        let end: Vec<&Value> = ours("exec_end")
            .into_iter()
            .filter(|e| e["body"]["exec"] == exec[0]["seq"])
            .collect();
        assert_eq!(end.len(), 1, "one end for {id}");
        let code = if call["body"]["tool_input"]["command"]
            .as_str()
            .is_some_and(|c| c.contains("exit 7"))
        {
            7
        } else {
            0
        };
        assert_eq!(end[0]["body"]["exited"], code, "{}", end[0]);
    }
    // Each hook event once: setup's hooks in the user settings fire as well
    // as the run's own, and only the run's are recorded.
    for kind in ["session_start", "prompt", "session_end"] {
        assert_eq!(s.of_kind(kind).len(), 1, "{kind}: {:?}", s.kinds());
    }
    let out = s.verify();
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let report = stdout(&out);
    assert!(
        report.contains("run: nd7 run's own log: 5 commands through the exit, 5 Bash calls in the hooks' entries"),
        "{report}"
    );
    assert!(
        report.contains("reconciled: every Bash call has its command through the exit"),
        "{report}"
    );
    assert!(world.proj().join("right.txt").exists() && world.proj().join("left.txt").exists());
}

/// `disableAllHooks: true` in a settings file switches every hook off,
/// nd7's and the transcript's anchors with them. Under `nd7 run` the agent
/// can write the project's `.claude/settings.json` or `settings.local.json`
/// (they are only watched), so one left by an earlier session, or one a
/// Bash call writes, would leave the session unrecorded but for the exit's
/// own entries. Claude Code ranks the `--settings` it is given (its flag
/// settings) above the project's and the user's files, so `nd7 run`'s own
/// `"disableAllHooks": false` there keeps them on.
///
/// Guards the `disableAllHooks` line in `shell_prefix::run_settings`: without
/// it, with 2.1.197 and 2.1.332 alike, no hook runs in the session.
#[cfg(target_os = "linux")]
#[test]
fn under_nd7_run_a_project_settings_file_cannot_switch_the_hooks_off() {
    let world = std::sync::Arc::new(crate::world::World::new());
    let local = world.proj().join(".claude");
    std::fs::create_dir_all(&local).expect("mkdir .claude");
    std::fs::write(local.join("settings.json"), r#"{"disableAllHooks": true}"#)
        .expect("project settings");
    let s = sandboxed_session(&world, |_| {
        vec![
            vec![bash("echo one")],
            vec![bash("echo two")],
            vec![Block::Text("Done.".into())],
        ]
    });
    assert_hooks_stayed_on(&s, 2);
}

/// The same switch written mid-session, by a script a Bash call runs
/// (Claude Code asks before a Bash command that names its settings files
/// itself, not before one whose script does).
#[cfg(target_os = "linux")]
#[test]
fn under_nd7_run_hooks_switched_off_mid_session_stay_on() {
    let world = std::sync::Arc::new(crate::world::World::new());
    std::fs::write(
        world.proj().join("switch.sh"),
        "mkdir -p .claude && printf '{\"disableAllHooks\": true}' > .claude/settings.local.json\n",
    )
    .expect("switch.sh");
    let mut workspace = claude::Workspace::sandboxed(world.clone());
    // The new settings file is a file that runs later: reported, exit 3.
    workspace.status = 3;
    let s = session_in(workspace, |_| {
        vec![
            vec![bash("sh switch.sh && echo switched")],
            // Time for Claude Code to see the change (it watches the file).
            vec![bash("sleep 3; echo after-one")],
            vec![bash("echo after-two")],
            vec![Block::Text("Done.".into())],
        ]
    });
    assert!(world.proj().join(".claude/settings.local.json").exists());
    assert!(
        String::from_utf8_lossy(&s.run.output.stderr).contains("/.claude/settings.local.json"),
        "{}",
        s.run.describe()
    );
    assert_hooks_stayed_on(&s, 3);
}

/// Every Bash call (`calls` of them) was recorded, with its result, and
/// verify holds the hooks' account against the exit's.
#[cfg(target_os = "linux")]
fn assert_hooks_stayed_on(s: &Session, calls: usize) {
    let recorded: Vec<String> = s
        .of_kind("tool_call")
        .iter()
        .map(|c| {
            c["body"]["tool_input"]["command"]
                .as_str()
                .unwrap_or("?")
                .to_string()
        })
        .collect();
    assert_eq!(
        recorded.len(),
        calls,
        "every Bash call was recorded: {recorded:?}\n{}",
        s.run.describe()
    );
    assert_calls_paired(s);
    assert_eq!(s.of_kind("session_end").len(), 1, "{:?}", s.kinds());
    let out = s.verify();
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(stdout(&out).contains("\nreconciled: "), "{}", stdout(&out));
}

/// If Claude Code stops calling the hooks mid-session (a mod answering
/// them, a crash of its hook runner, a binary gone), the exit's entries
/// still show every Bash command, and `nd7 run` says at its end how many
/// ran without a hook entry announcing them, and how many for a call whose
/// result never came. Simulated with the real CLI by taking away the nd7
/// its hooks name, once the second call has been announced: its result,
/// and every hook after it, then fails to run.
///
/// Guards the end-of-run warnings in `run::run` (the `unmatched_execs` and
/// `execs_without_result` of `RunLog::end`'s tally).
#[cfg(target_os = "linux")]
#[test]
fn under_nd7_run_hooks_that_stop_mid_session_leave_the_exits_account() {
    use std::os::unix::fs::PermissionsExt;
    let world = std::sync::Arc::new(crate::world::World::new());
    // A copy of nd7 the account cannot change (nd7 run checks), named by
    // the run's hooks.
    let copy = tempfile::Builder::new()
        .prefix("nd7-copy-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("tempdir");
    std::fs::set_permissions(copy.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    for (from, name) in [
        (crate::world::ND7, "nd7"),
        (crate::world::ND7_EXEC, "nd7-exec"),
    ] {
        std::fs::copy(from, copy.path().join(name)).expect("copy nd7");
    }
    let nd7 = copy.path().join("nd7");
    let logs = world.home().join(".local/state/nd7/sessions");
    let proj = world.proj();
    let taker = {
        let nd7 = nd7.clone();
        std::thread::spawn(move || {
            let start = std::time::Instant::now();
            // The second call's command, through the exit: it was announced.
            let announced = || {
                std::fs::read_dir(&logs)
                    .ok()
                    .into_iter()
                    .flatten()
                    .flatten()
                    .any(|d| {
                        std::fs::read_to_string(d.path().join("events.ndjson"))
                            .is_ok_and(|t| t.contains(r#""bash_command":"while"#))
                    })
            };
            while !announced() {
                assert!(
                    start.elapsed() < std::time::Duration::from_secs(120),
                    "never announced"
                );
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            std::fs::rename(&nd7, nd7.with_file_name("nd7.gone")).expect("take nd7 away");
            std::fs::write(proj.join("hooks-gone"), "").expect("signal");
        })
    };
    let mut workspace = claude::Workspace::sandboxed(world.clone());
    workspace.nd7 = Some(nd7);
    let s = play(workspace, |_| {
        vec![
            vec![bash("echo one")],
            vec![bash(
                "while [ ! -e hooks-gone ]; do sleep 0.05; done; echo two",
            )],
            vec![bash("echo three")],
            vec![bash("echo four")],
            vec![Block::Text("Done.".into())],
        ]
    });
    taker.join().expect("nd7 taken away");
    let execs: Vec<&str> = s
        .entries
        .iter()
        .filter(|e| e["kind"] == "exec" && e["source"] == "exit:nd7")
        .map(|e| e["body"]["bash_command"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(
        execs,
        [
            "echo one",
            "while [ ! -e hooks-gone ]; do sleep 0.05; done; echo two",
            "echo three",
            "echo four"
        ],
        "{}",
        s.run.describe()
    );
    assert_eq!(s.of_kind("tool_call").len(), 2, "{:?}", s.kinds());
    assert_eq!(s.of_kind("tool_result").len(), 1, "{:?}", s.kinds());
    let said = String::from_utf8_lossy(&s.run.output.stderr);
    assert!(
        said.contains("nd7 run: warning: 2 of 4 Bash commands ran through the exit without a matching hook entry"),
        "{said}"
    );
    assert!(
        said.contains("nd7 run: warning: 1 of 4 Bash commands ran through the exit for a Bash call Claude Code reported no result for"),
        "{said}"
    );
    let out = s.verify();
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let report = stdout(&out);
    assert!(
        report
            .contains("command `echo three` ran through the exit with no Bash call announcing it"),
        "{report}"
    );
}

/// User and system CPU seconds of every child this process has waited for
/// (and, through them, of every descendant waited for in turn).
#[cfg(target_os = "linux")]
fn children_cpu() -> f64 {
    // SAFETY: getrusage writes only into the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// Not a test but the whole-session benchmark (`bench/session.sh` runs it,
/// docs/benchmarks.md has the figures): one scripted session with the real
/// Claude Code, played bare (no nd7), with `nd7 setup`'s hooks, and under
/// `nd7 run` twice: as the first run in a home, and with the version cache
/// (ADR-0147) and the executables' hashes (ADR-0146) the previous first run
/// left, as every later run finds them;
/// round-robin, each in a fresh world; prints each one's median wall time
/// and CPU time (of the whole tree) and their ratios to bare. Asserts
/// nothing about time.
#[cfg(target_os = "linux")]
#[test]
#[ignore = "a benchmark: bench/session.sh runs it"]
fn bench_whole_session_under_nd7_run_against_bare() {
    let rounds: usize = std::env::var("ND7_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5);
    let claude = claude::install(&claude::version());
    let script = |project: &std::path::Path| {
        vec![
            vec![bash("echo one > one.txt")],
            vec![bash("ls -la"), bash("cat one.txt")],
            vec![bash("echo about-to-fail; exit 3")],
            vec![Block::Tool(
                "Write",
                json!({"file_path": project.join("w.txt"), "content": "w\n"}),
            )],
            vec![bash("wc -c one.txt w.txt")],
            vec![Block::Text("Done.".into())],
        ]
    };
    let names = [
        "bare",
        "nd7 setup's hooks",
        "under nd7 run, first run in the home",
        "under nd7 run, the version cache and hashes warm",
    ];
    // The version cache (ADR-0147) and the executables' hashes (ADR-0146)
    // the last first run left, given to the next warm run's fresh world: the
    // same files, as on a machine where nd7 run has run before in the same
    // project.
    let kept = [
        ".local/state/nd7/claude-version.json",
        ".local/state/nd7/exe-hashes",
    ];
    let mut cache: Vec<Option<Vec<u8>>> = vec![None; kept.len()];
    let mut first_project = String::new();
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    let mut cpu_series: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for round in 0..=rounds {
        for (variant, series) in times.iter_mut().enumerate() {
            let world = std::sync::Arc::new(crate::world::World::new());
            let workspace = match variant {
                0 => {
                    let mut w = claude::Workspace::new();
                    w.bare = true;
                    w
                }
                1 => claude::Workspace::new(),
                _ => claude::Workspace::sandboxed(world.clone()),
            };
            let project = std::fs::canonicalize(&workspace.project)
                .unwrap_or_else(|_| workspace.project.clone())
                .to_string_lossy()
                .into_owned();
            if variant == 3 {
                for (file, bytes) in kept.iter().zip(&cache) {
                    let Some(bytes) = bytes else { continue };
                    // The same project run again: the version cache's
                    // entries name the project they were asked in (ADR-0149).
                    let text = String::from_utf8_lossy(bytes).replace(&first_project, &project);
                    let to = world.home().join(file);
                    std::fs::create_dir_all(to.parent().expect("a state directory"))
                        .expect("make the state directory");
                    std::fs::write(&to, text).expect("write what the first run left");
                }
            }
            let api = MockApi::start(script(&workspace.project));
            let (start, cpu_before) = (std::time::Instant::now(), children_cpu());
            let run = claude::run(&claude, &api.url, "run the scripted session", workspace);
            let elapsed = start.elapsed().as_secs_f64();
            let cpu = children_cpu() - cpu_before;
            assert!(run.output.status.success(), "{}", run.describe());
            if variant == 2 {
                first_project = project;
                for (file, bytes) in kept.iter().zip(cache.iter_mut()) {
                    *bytes = std::fs::read(world.home().join(file)).ok();
                }
            }
            if round > 0 {
                series.push(elapsed);
                cpu_series[variant].push(cpu);
            }
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let medians: Vec<f64> = times.iter_mut().map(median).collect();
    let cpu: Vec<f64> = cpu_series.iter_mut().map(median).collect();
    println!(
        "Claude Code {}, {rounds} rounds (after one warm-up)",
        claude::version()
    );
    for ((name, m), c) in names.iter().zip(&medians).zip(&cpu) {
        println!(
            "{m:8.3} s median  ratio {:.3}  CPU {c:.3} s, ratio {:.3}  {name}",
            m / medians[0],
            c / cpu[0]
        );
    }
    println!(
        "under nd7 run / with nd7 setup's hooks: {:.3} (first run), {:.3} (version cache and hashes warm)",
        medians[2] / medians[1],
        medians[3] / medians[1]
    );
}
