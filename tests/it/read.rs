//! `nd7 sessions`, `nd7 show` and `nd7 search` through the real binary, on
//! sessions recorded by the real `nd7 record`: the fixture payloads Claude
//! Code 2.1.197 sent, sessions built from the same shapes, and hostile ones.

use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

use crate::common::*;

fn record_all(state: &State, payloads: &[Value]) {
    for p in payloads {
        let out = state.record(p.to_string().as_bytes());
        assert!(out.stderr.is_empty(), "{}", stderr(&out));
    }
}

fn nd7(state: &State, args: &[&str]) -> Output {
    state
        .nd7()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run nd7")
}

fn json_lines(out: &Output) -> Vec<Value> {
    stdout(out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The payloads of a session with several Bash calls, one failing, a Write,
/// and its end, shaped as Claude Code 2.1.197 sends them.
fn session(id: &str, cwd: &str) -> Vec<Value> {
    let base = json!({"session_id": id, "transcript_path": transcript_path(id, cwd), "cwd": cwd});
    let with = |extra: Value| {
        let mut v = base.clone();
        for (k, x) in extra.as_object().expect("object") {
            v[k] = x.clone();
        }
        v
    };
    let call = |n: u32, command: &str| {
        with(json!({"hook_event_name": "PreToolUse", "tool_name": "Bash",
                    "tool_input": {"command": command, "description": format!("step {n}")},
                    "tool_use_id": format!("toolu_{n}")}))
    };
    let ok = |n: u32, command: &str, stdout: &str| {
        with(
            json!({"hook_event_name": "PostToolUse", "tool_name": "Bash",
                    "tool_input": {"command": command}, "tool_use_id": format!("toolu_{n}"),
                    "tool_response": {"stdout": stdout, "stderr": "", "interrupted": false},
                    "duration_ms": 40 + n}),
        )
    };
    vec![
        with(json!({"hook_event_name": "SessionStart", "source": "startup"})),
        with(json!({"hook_event_name": "UserPromptSubmit", "prompt": "build and test it"})),
        call(1, "cargo build --release"),
        ok(1, "cargo build --release", "Finished release"),
        call(2, "cargo test -- --exact broken"),
        with(
            json!({"hook_event_name": "PostToolUseFailure", "tool_name": "Bash",
                    "tool_input": {"command": "cargo test -- --exact broken"},
                    "tool_use_id": "toolu_2", "error": "Exit code 101\ntest broken ... FAILED",
                    "duration_ms": 812}),
        ),
        call(3, "git status --short"),
        ok(3, "git status --short", " M src/lib.rs"),
        with(
            json!({"hook_event_name": "PreToolUse", "tool_name": "Write",
                    "tool_input": {"file_path": format!("{cwd}/NOTES.md"), "content": "notes\n"},
                    "tool_use_id": "toolu_4"}),
        ),
        with(
            json!({"hook_event_name": "PostToolUse", "tool_name": "Write",
                    "tool_input": {"file_path": format!("{cwd}/NOTES.md"), "content": "notes\n"},
                    "tool_use_id": "toolu_4",
                    "tool_response": {"type": "create", "filePath": format!("{cwd}/NOTES.md"),
                                      "content": "notes\n", "structuredPatch": []}}),
        ),
        with(json!({"hook_event_name": "Stop", "stop_hook_active": false,
                    "last_assistant_message": "One test fails."})),
        with(json!({"hook_event_name": "SessionEnd", "reason": "prompt_input_exit"})),
    ]
}

fn tools(lines: &[Value]) -> Vec<&Value> {
    lines.iter().filter(|l| l["type"] == "tool").collect()
}

#[test]
fn the_fixture_session_reads_back_paired_listed_and_found() {
    let state = State::new();
    let payloads: Vec<Value> = fixture_payloads()
        .iter()
        .map(|p| serde_json::from_str(p).expect("fixture"))
        .collect();
    record_all(&state, &payloads);
    let id = "4dc8a87d-d386-4e43-a1ee-15a0429dcdee";

    let out = nd7(&state, &["show", "--json", "4dc8"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let lines = json_lines(&out);
    assert_eq!(lines[0]["type"], "session");
    assert_eq!(lines[0]["id"], id);
    let t = tools(&lines);
    assert_eq!(t.len(), 1, "{lines:#?}");
    assert_eq!(t[0]["command"], "echo hello-from-model");
    assert_eq!(t[0]["status"], "ok");
    assert_eq!(
        (t[0]["call_seq"].as_u64(), t[0]["result_seq"].as_u64()),
        (Some(2), Some(3))
    );
    // The fixture's PreToolUse rewrite shows as what ran.
    assert_eq!(t[0]["ran"], "echo REWRITTEN-BY-HOOK; echo hello-from-model");
    assert_eq!(t[0]["output"], "REWRITTEN-BY-HOOK\nhello-from-model");
    let last = lines.last().expect("a verdict");
    assert_eq!(
        (last["type"].as_str(), last["state"].as_str()),
        (Some("chain"), Some("clean"))
    );
    // Every entry is in exactly one item: 8 entries, the call and result as one.
    let seqs: usize = lines
        .iter()
        .filter(|l| l["seq"].is_u64())
        .map(|l| if l["type"] == "tool" { 2 } else { 1 })
        .sum();
    assert_eq!(seqs, 8);

    let text = stdout(&nd7(&state, &["show", id]));
    assert!(
        text.contains("ok       Bash $ echo hello-from-model"),
        "{text}"
    );
    assert!(text.contains("clean: 8 entries"), "{text}");
    assert!(text.contains("not third-party evidence"), "{text}");

    let list = json_lines(&nd7(&state, &["sessions", "--json"]));
    assert_eq!(list.len(), 1);
    assert_eq!(
        (
            list[0]["tool_calls"].as_u64(),
            list[0]["failures"].as_u64(),
            list[0]["entries"].as_u64()
        ),
        (Some(1), Some(0), Some(8))
    );
    assert_eq!(list[0]["chain"]["state"], "clean", "show's verdict is kept");

    let found = nd7(&state, &["search", "hello-from"]);
    assert_eq!(found.status.code(), Some(0));
    let hits = stdout(&found);
    assert!(
        hits.lines()
            .next()
            .is_some_and(|l| l.contains("4dc8a87d  #2  Bash command  echo hello-from-model")),
        "{hits}"
    );
    assert_eq!(
        nd7(&state, &["search", "nowhere-in-the-log"]).status.code(),
        Some(1)
    );
}

#[test]
fn a_failing_call_is_marked_in_every_view() {
    let state = State::new();
    record_all(&state, &session("s-failing", "/work/app"));
    record_all(&state, &session("s-other", "/work/lib")[..4]);

    let out = nd7(&state, &["show", "s-failing"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    let failed: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("FAILED   Bash"))
        .collect();
    assert_eq!(failed.len(), 1, "{text}");
    assert!(
        failed[0].contains("$ cargo test -- --exact broken") && failed[0].contains("exit 101"),
        "{text}"
    );
    assert!(
        text.contains("test broken ... FAILED"),
        "the failure's output: {text}"
    );
    assert!(text.contains("session ended (prompt_input_exit)"), "{text}");
    assert!(text.contains("Write /work/app/NOTES.md"), "{text}");

    let lines = json_lines(&nd7(&state, &["show", "--json", "s-failing"]));
    let t = tools(&lines);
    assert_eq!(t.len(), 4);
    let statuses: Vec<&str> = t
        .iter()
        .map(|t| t["status"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(statuses, ["ok", "failed", "ok", "ok"]);
    assert_eq!(t[1]["exit_code"], 101);
    assert_eq!(t[1]["duration_ms"], 812.0);
    assert!(
        t.iter().all(|t| t["result_seq"].is_u64()),
        "every call paired"
    );

    let list = json_lines(&nd7(&state, &["sessions", "--json", "--failed"]));
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["id"], "s-failing");
    assert_eq!(
        (list[0]["tool_calls"].as_u64(), list[0]["failures"].as_u64()),
        (Some(4), Some(1))
    );
    assert_eq!(list[0]["ended"]["reason"], "prompt_input_exit");
    let list = json_lines(&nd7(
        &state,
        &["sessions", "--json", "--project", "/work/lib"],
    ));
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["id"], "s-other");
    let all = stdout(&nd7(&state, &["sessions"]));
    assert_eq!(all.lines().count(), 3, "a header and two sessions: {all}");

    let hits = json_lines(&nd7(
        &state,
        &["search", "--json", "--tool", "bash", "cargo"],
    ));
    assert_eq!(hits.len(), 3, "three commands name cargo: {hits:#?}");
    assert!(hits.iter().all(|h| h["field"] == "command"));
    let hits = json_lines(&nd7(
        &state,
        &["search", "--json", "--project", "/work/app", "FAILED"],
    ));
    assert_eq!(hits.len(), 1);
    assert_eq!(
        (hits[0]["field"].as_str(), hits[0]["line"].as_u64()),
        (Some("output"), Some(2))
    );
    assert_eq!(
        nd7(&state, &["search", "cargo", "--since", "2100-01-01"])
            .status
            .code(),
        Some(1)
    );
    assert_eq!(
        nd7(&state, &["search", "cargo", "--since", "soonish"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(nd7(&state, &["search", "("]).status.code(), Some(2));
}

/// Escape sequences a command's output or a prompt could carry: a window
/// title, a screen clear, a clipboard write (OSC 52), a bell, a carriage
/// return hiding what precedes it, a C1 CSI, and a right-to-left override.
const HOSTILE: &str = "safe\u{1b}]0;owned\u{7}\u{1b}[2J\u{1b}]52;c;cm0gLXJmIH4=\u{7}\rrm -rf ~\u{9b}31m\u{202e}gnp.exe</pre><script>document.title='PWNED'</script><img src=x onerror=alert(1)>";

fn hostile_session(state: &State) {
    let base = json!({"session_id": "s-hostile", "cwd": "/p"});
    let mut payloads = Vec::new();
    for (event, extra) in [
        ("UserPromptSubmit", json!({"prompt": HOSTILE})),
        (
            "PreToolUse",
            json!({"tool_name": "Bash", "tool_input": {"command": HOSTILE, "description": HOSTILE}, "tool_use_id": "t1"}),
        ),
        (
            "PostToolUse",
            json!({"tool_name": "Bash", "tool_input": {"command": HOSTILE}, "tool_use_id": "t1",
                               "tool_response": {"stdout": format!("{HOSTILE}\n{HOSTILE}"), "stderr": HOSTILE}}),
        ),
        (
            "Notification",
            json!({"message": HOSTILE, "title": HOSTILE}),
        ),
    ] {
        let mut p = base.clone();
        p["hook_event_name"] = event.into();
        for (k, v) in extra.as_object().expect("object") {
            p[k] = v.clone();
        }
        payloads.push(p);
    }
    record_all(state, &payloads);
    // A forged payload can name any session id; the id is a directory name.
    let mut forged = payloads[0].clone();
    forged["session_id"] = "s-\u{1b}]0;id-owned\u{7}\r".into();
    record_all(state, &[forged]);
}

/// Fails unless every ESC in `text` starts one of nd7's own SGR sequences,
/// and no other control character but newline is in it.
fn assert_inert(text: &[u8], what: &str) {
    let text = String::from_utf8_lossy(text);
    for c in text.chars() {
        assert!(
            c == '\n' || c == '\x1b' || !(c.is_control() || nd7_core::read::safe::is_hazard(c)),
            "{what}: {c:?} reached the terminal"
        );
    }
    for (i, _) in text.match_indices('\x1b') {
        let rest = &text[i + 1..];
        let sgr = rest.strip_prefix('[').and_then(|r| {
            let end = r.find(|c: char| !(c.is_ascii_digit() || c == ';'))?;
            (r[end..].starts_with('m')).then_some(())
        });
        assert!(
            sgr.is_some(),
            "{what}: a foreign escape {:?}",
            &rest[..rest.len().min(12)]
        );
    }
}

/// Guards `read::safe::term_marked` (the `escape` decision) and the HTML
/// escaping in `read::safe::html`: with either made a pass-through, this test
/// fails (seen: BEL reaches the terminal; `<script` is in the report).
#[test]
fn hostile_escape_sequences_and_markup_come_out_inert() {
    let state = State::new();
    hostile_session(&state);
    for args in [
        vec!["show", "s-hostile", "--full"],
        vec!["show", "s-hostile", "--full", "--color=always"],
        vec!["sessions", "--color=always"],
        vec!["sessions"],
        vec!["search", "owned", "--color=always"],
        vec!["search", "onerror"],
        vec!["show", "s-"],
    ] {
        let out = nd7(&state, &args);
        let ambiguous = args == ["show", "s-"];
        assert!(
            out.status.success() != ambiguous,
            "{args:?}: {}",
            stderr(&out)
        );
        assert_inert(&out.stdout, &format!("{args:?}"));
        assert_inert(&out.stderr, &format!("{args:?} (stderr)"));
    }
    let text = stdout(&nd7(&state, &["show", "s-hostile", "--full"]));
    assert!(
        text.contains("safe\\x1b]0;owned\\x07\\x1b[2J"),
        "shown, escaped: {text}"
    );
    assert!(
        text.contains("\\rrm -rf ~\\x9b31m\\u{202e}gnp.exe"),
        "{text}"
    );

    let html = stdout(&nd7(&state, &["show", "s-hostile", "--html"]));
    let lower = html.to_lowercase();
    assert!(
        !lower.contains("<script") && !lower.contains("<img"),
        "{html}"
    );
    assert!(html.contains("&lt;script&gt;document.title=&#39;PWNED&#39;&lt;/script&gt;"));
    assert!(
        !html
            .chars()
            .any(|c| c != '\n' && (c.is_control() || nd7_core::read::safe::is_hazard(c)))
    );
}

#[test]
fn a_broken_chain_is_shown_with_the_break_named_and_exits_1() {
    let state = State::new();
    record_all(&state, &session("s-broken", "/p"));
    let log = state.log("s-broken");
    let text = std::fs::read_to_string(log.events_path()).expect("log");
    std::fs::write(
        log.events_path(),
        text.replacen("git status --short", "git status --SHORT", 1),
    )
    .expect("tamper");
    let out = nd7(&state, &["show", "s-broken"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("BROKEN") && text.contains("entry 6 (line 7): hash does not match"),
        "{text}"
    );
    assert!(
        text.contains("$ git status --SHORT"),
        "the timeline is still shown: {text}"
    );
    let list = json_lines(&nd7(&state, &["sessions", "--json"]));
    assert_eq!(list[0]["chain"]["state"], "broken");
    let html = nd7(&state, &["show", "--html", "s-broken"]);
    assert_eq!(html.status.code(), Some(1));
    assert!(stdout(&html).contains("BROKEN"));
}

#[test]
fn sessions_are_named_by_id_prefix_last_or_path_and_mistakes_exit_2() {
    let state = State::new();
    record_all(&state, &session("aaa-first", "/p")[..2]);
    record_all(&state, &session("aaa-second", "/p")[..2]);
    let out = nd7(&state, &["show", "aaa"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("\"aaa\" names 2 sessions: aaa-first, aaa-second"),
        "{}",
        stderr(&out)
    );
    let out = nd7(&state, &["show", "--json", "aaa-f"]);
    assert_eq!(json_lines(&out)[0]["id"], "aaa-first");
    let out = nd7(&state, &["show", "--json", "last"]);
    assert_eq!(json_lines(&out)[0]["id"], "aaa-second");
    let out = nd7(&state, &["show", "zzz"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("no session \"zzz\""),
        "{}",
        stderr(&out)
    );
    let not_a_session = tempfile::tempdir().expect("tempdir");
    let out = nd7(
        &state,
        &["show", &not_a_session.path().display().to_string()],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("not a session: it holds neither"),
        "{}",
        stderr(&out)
    );

    // A copy elsewhere, as `nd7 admin pull --out` writes one: the log alone.
    let copy = tempfile::tempdir().expect("tempdir");
    let dir = copy.path().join("aaa-first");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::copy(
        state.log("aaa-first").events_path(),
        dir.join("events.ndjson"),
    )
    .expect("copy");
    let out = nd7(&state, &["show", &dir.display().to_string()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("a copy outside this machine's state directory"),
        "{text}"
    );
    assert!(
        text.contains("clean: 2 entries") && text.contains("no head file"),
        "{text}"
    );
    let empty = State::new();
    let out = nd7(&empty, &["show", "last"]);
    assert_eq!(out.status.code(), Some(2));
    let out = nd7(&empty, &["sessions"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        stdout(&out).starts_with("no sessions under"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn a_verdict_is_shown_only_while_the_log_is_as_it_was_verified() {
    let state = State::new();
    let payloads = session("s-v", "/p");
    record_all(&state, &payloads[..6]);
    let chain = |state: &State| {
        json_lines(&nd7(state, &["sessions", "--json", "--no-verify"]))[0]["chain"]["state"].clone()
    };
    assert_eq!(chain(&state), "not_checked");
    assert!(nd7(&state, &["verify", "s-v"]).status.success());
    assert_eq!(chain(&state), "clean");
    record_all(&state, &payloads[6..7]);
    assert_eq!(chain(&state), "not_checked", "an entry was added since");
    let list = json_lines(&nd7(&state, &["sessions", "--json", "--verify"]));
    assert_eq!(list[0]["chain"]["state"], "clean");
    assert_eq!(list[0]["tool_calls"], 3, "the summary grew with the log");
    assert!(nd7(&state, &["verify", "--all"]).status.success());
    assert_eq!(chain(&state), "clean");
    // A small log is checked on the way when nothing says otherwise.
    record_all(&state, &payloads[7..8]);
    assert_eq!(chain(&state), "not_checked");
    let list = json_lines(&nd7(&state, &["sessions", "--json"]));
    assert_eq!(list[0]["chain"]["state"], "clean");
}

/// Runs `nd7 ARGS` on a pseudo-terminal (util-linux `script`), with `env`.
fn on_terminal(state: &State, args: &str, env: &[(&str, &str)]) -> Output {
    let nd7 = env!("CARGO_BIN_EXE_nd7");
    let mut cmd = Command::new("script");
    cmd.args(["-qec", &format!("{nd7} {args}"), "/dev/null"])
        .env("XDG_STATE_HOME", state.xdg())
        .env("TERM", "xterm")
        .env_remove("NO_COLOR")
        .env_remove("PAGER")
        .env_remove("ND7_PAGER")
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run script (util-linux)")
}

#[test]
fn a_terminal_gets_colour_and_the_pager_and_no_color_turns_colour_off() {
    let state = State::new();
    record_all(&state, &session("s-tty", "/p"));
    let dir = tempfile::tempdir().expect("tempdir");
    let paged = dir.path().join("paged");
    let pager = format!("cat > '{}'", paged.display());

    let out = on_terminal(
        &state,
        "show s-tty",
        &[("ND7_PAGER", &pager), ("PAGER", "false")],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let got = std::fs::read_to_string(&paged).expect("the pager was given the output");
    assert!(
        got.contains("cargo build --release") && got.contains("\x1b[1;31mFAILED"),
        "{got:?}"
    );
    assert!(
        !stdout(&out).contains("cargo build"),
        "nothing bypassed the pager"
    );

    std::fs::remove_file(&paged).expect("rm");
    let out = on_terminal(
        &state,
        "show s-tty",
        &[("PAGER", &pager), ("NO_COLOR", "1")],
    );
    assert!(out.status.success());
    let got = std::fs::read_to_string(&paged).expect("PAGER is used without ND7_PAGER");
    assert!(got.contains("FAILED") && !got.contains('\x1b'), "{got:?}");

    std::fs::remove_file(&paged).expect("rm");
    let out = on_terminal(&state, "sessions --no-pager", &[("PAGER", &pager)]);
    assert!(!paged.exists(), "--no-pager");
    assert!(stdout(&out).contains("\x1b["), "colour on a terminal");

    // Not a terminal: no pager, no colour.
    let out = state
        .nd7()
        .args(["show", "s-tty"])
        .env("PAGER", &pager)
        .env("TERM", "xterm")
        .output()
        .expect("nd7");
    assert!(!paged.exists() && !stdout(&out).contains('\x1b'));
}

#[test]
fn a_reader_that_goes_away_ends_the_output_quietly() {
    let state = State::new();
    let log = state.log("s-long");
    for n in 0..3000 {
        log.append(&event("s-long", n)).expect("append");
    }
    for args in [["show", "s-long"], ["show", "--json"], ["search", "echo"]] {
        let mut args: Vec<&str> = args.to_vec();
        if args == ["show", "--json"] {
            args.push("s-long");
        }
        let mut child = state
            .nd7()
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let mut first = [0u8; 64];
        use std::io::Read;
        child
            .stdout
            .as_mut()
            .expect("stdout")
            .read_exact(&mut first)
            .expect("some output");
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("wait");
        assert!(out.stderr.is_empty(), "{args:?}: {}", stderr(&out));
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "{args:?}: {:?}",
            out.status
        );
    }
}

/// One lookup for every command that takes a session: the short id `nd7
/// sessions` prints, `last`, an id and a path name the same session for
/// `show` and `verify` alike, and a mistake is the same mistake in both.
#[test]
fn every_command_takes_the_ids_sessions_prints() {
    let state = State::new();
    record_all(
        &state,
        &session("57577be6-1111-4e2f-9d00-000000000001", "/p")[..2],
    );
    record_all(
        &state,
        &session("6a1f0c22-2222-4e2f-9d00-000000000002", "/p")[..3],
    );
    let listed = stdout(&nd7(&state, &["sessions", "--no-pager"]));
    assert!(listed.contains("57577be6 "), "{listed}");
    for name in ["57577be6", "last", "6a1f"] {
        let shown = nd7(&state, &["show", "--json", name]);
        assert_eq!(
            shown.status.code(),
            Some(0),
            "show {name}: {}",
            stderr(&shown)
        );
        let id = json_lines(&shown)[0]["id"]
            .as_str()
            .expect("id")
            .to_string();
        let verified = nd7(&state, &["verify", name]);
        assert_eq!(
            verified.status.code(),
            Some(0),
            "verify {name}: {}",
            stderr(&verified)
        );
        let entries = if id.starts_with("5757") { 2 } else { 3 };
        assert!(
            stdout(&verified).contains(&format!("verified: {entries} entries")),
            "verify {name} should verify {id}: {}",
            stdout(&verified)
        );
    }
    let dir = state.log("57577be6-1111-4e2f-9d00-000000000001");
    let out = nd7(&state, &["verify", &dir.dir().display().to_string()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for (cmd, said) in [
        (&["verify", "zzz"][..], "no session \"zzz\""),
        (&["show", "zzz"], "no session \"zzz\""),
    ] {
        let out = nd7(&state, cmd);
        assert_eq!(out.status.code(), Some(2));
        assert!(stderr(&out).contains(said), "{}", stderr(&out));
    }
    let out = nd7(&state, &["verify", "--transcript", "5757"]);
    assert!(
        !stderr(&out).contains("no session"),
        "verify --transcript takes a prefix too: {}",
        stderr(&out)
    );
}

/// A day's session under `nd7 run`, as Claude Code's hooks and the exit
/// write it: one call the sandbox refuses (nd7's `floor_refused` written
/// after the result, by another hook), one Claude Code's permissions refuse
/// (a call, then nothing: no result, no command through the exit), one that
/// runs. Returns the world and the chain's id.
#[cfg(target_os = "linux")]
pub(crate) fn run_with_refusals() -> (crate::world::World, String) {
    use crate::runs::{fake_claude, run_chain};
    let w = crate::world::World::new();
    let claude = fake_claude(
        &w,
        r#"
unset CLAUDE_CODE_SHELL_PREFIX
base='"session_id":"s","cwd":"'"$PWD"'"'
hook() { printf '{%s,%s}' "$base" "$1" | "$ND7" record --run-hook; }
call() { hook '"hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"'"$2"'"},"tool_use_id":"'"$1"'"'; }
# Claude Code's shell wrapper around the model's command, as the exit gets it.
line() { printf "source /x 2>/dev/null || true && eval '%s' < /dev/null && pwd -P >| %s" "$1" "$TMPDIR/cwd"; }
hook '"hook_event_name":"SessionStart","source":"startup"'
hook '"hook_event_name":"UserPromptSubmit","prompt":"make the dirs"'
cmd="mkdir $OUT/made"
call t1 "$cmd"
err=$("$EXEC" "$(line "$cmd")" 2>&1); st=$?
fail='"hook_event_name":"PostToolUseFailure","tool_name":"Bash","tool_input":{"command":"'"$cmd"'"},"tool_use_id":"t1","error":"Exit code '"$st"'\n'"$err"'"'
hook "$fail"
printf '{%s,%s}' "$base" "$fail" | "$ND7" hook-explain > explain.out 2>&1
call t2 "touch denied.txt"
call t3 "echo fine"
out=$("$EXEC" "$(line "echo fine")")
hook '"hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{"command":"echo fine"},"tool_use_id":"t3","tool_response":{"stdout":"'"$out"'","stderr":""}'
hook '"hook_event_name":"Stop","last_assistant_message":"done"'
hook '"hook_event_name":"SessionEnd","reason":"other"'
"#,
    );
    let out = w.nd7(&["run", &claude]).output().expect("nd7 run");
    assert!(out.status.success(), "{}", crate::world::text(&out.stderr));
    let id = run_chain(&w)
        .file_name()
        .expect("a name")
        .to_string_lossy()
        .into_owned();
    (w, id)
}

/// Every refusal is shown where people look, whoever made it: in `nd7 show`
/// the sandbox's names the path, why and the `nd7 allow` that fixes it, on
/// the call's own row; Claude Code's reads as refused by its permissions,
/// not as a call with no end; the header counts both and says by whom; the
/// exit's `exec`, `exec_end`, `floor_refused` and transcript anchors fold
/// into their call (kept in `--full` and the NDJSON); `--only refused`
/// keeps the two; `nd7 sessions` has a REFUSED column and `--refused`.
#[cfg(target_os = "linux")]
#[test]
fn refusals_are_shown_with_who_why_and_the_fix_and_nd7s_evidence_folds_into_its_call() {
    use crate::world::text;
    let (w, id) = run_with_refusals();
    let made = w.outside().join("made").display().to_string();
    let outside = w.outside().display().to_string();
    let show = w.nd7(&["show", &id]).output().expect("nd7 show");
    assert_eq!(show.status.code(), Some(0), "{}", text(&show.stderr));
    let timeline = text(&show.stdout);
    for line in [
        format!("REFUSED  Bash $ mkdir {made}  (exit 1, "),
        format!(
            "refused by nd7's sandbox: {made} (outside what this session may write); fix: nd7 allow {outside}"
        ),
        "REFUSED  Bash $ touch denied.txt".to_string(),
        "never ran: no result, and no command through nd7-exec; Claude Code's permissions refused it".to_string(),
        "ok       Bash $ echo fine  (".to_string(),
        "via nd7-exec".to_string(),
        "2 refused (1 by Claude Code's permissions, 1 by nd7)".to_string(),
    ] {
        let explained = std::fs::read_to_string(w.proj().join("explain.out")).unwrap_or_default();
        assert!(timeline.contains(&line), "{line:?} is not in:\n{timeline}\nhook-explain said: {explained}");
    }
    for folded in [
        "[exit:nd7 exec]",
        "[exit:nd7 exec_end]",
        "[exit:nd7 floor_refused]",
        "transcript_anchor",
        "NO END",
    ] {
        assert!(!timeline.contains(folded), "{folded:?} is in:\n{timeline}");
    }
    // Rows: start, prompt, 3 calls, turn end, end, and nd7's run_start and run_end.
    // What nd7's observer saw run (issue 32) is a row of its own, batched by
    // time, not folded into the calls yet: not counted.
    let rows = timeline
        .lines()
        .filter(|l| l.contains(" #") && !l.contains("[effect:nd7 ran]"))
        .count();
    assert!(rows <= 9, "{rows} rows:\n{timeline}");

    let full = text(
        &w.nd7(&["show", "--full", &id])
            .output()
            .expect("nd7 show")
            .stdout,
    );
    for kept in [
        "[exit:nd7 exec]",
        "[exit:nd7 exec_end]",
        "[exit:nd7 floor_refused]",
        // The exec row names the model's command, not the shell wrapper.
        "[exit:nd7 exec] command=echo fine",
    ] {
        assert!(full.contains(kept), "{kept:?} is not in --full:\n{full}");
    }

    let only = w
        .nd7(&["show", "--only", "refused", &id])
        .output()
        .expect("nd7 show");
    let only = text(&only.stdout);
    assert_eq!(only.matches("REFUSED  Bash").count(), 2, "{only}");
    assert!(
        !only.contains("echo fine") && !only.contains("make the dirs"),
        "{only}"
    );

    let json = w
        .nd7(&["show", "--json", &id])
        .output()
        .expect("nd7 show --json");
    let items: Vec<serde_json::Value> = text(&json.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("NDJSON"))
        .collect();
    assert_eq!(items[0]["refusals"], 2);
    assert_eq!(items[0]["refusals_by"], json!({"permissions": 1, "nd7": 1}));
    let tools: Vec<_> = items.iter().filter(|i| i["type"] == "tool").collect();
    assert_eq!(tools[0]["refused_by"], "nd7_sandbox");
    assert_eq!(
        tools[0]["refused_paths"][0]["fix"],
        format!("nd7 allow {outside}")
    );
    assert_eq!(tools[1]["refused_by"], "permissions");
    assert!(
        items
            .iter()
            .any(|i| i["kind"] == "floor_refused" && i["folded"] == true)
    );

    let listed = text(
        &w.nd7(&["sessions", "--refused"])
            .output()
            .expect("sessions")
            .stdout,
    );
    let head = listed.lines().next().unwrap_or("");
    assert!(head.contains("FAILED  REFUSED"), "{listed}");
    // FAILED 1, REFUSED 2, under nd7 run.
    let row = listed.lines().nth(1).unwrap_or_else(|| panic!("{listed}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert!(cells.windows(3).any(|c| c == ["1", "2", "run"]), "{listed}");
    // A small chain is checked on the way, not listed as "unchecked".
    assert!(cells.contains(&"clean"), "{listed}");
}

/// A pattern that is not a regular expression is named with the reason,
/// on one line: no literal `\n` from the regex crate's drawing.
#[test]
fn a_bad_pattern_is_named_on_one_line() {
    let state = State::new();
    record_all(&state, &session("s-bad", "/p")[..2]);
    let out = nd7(&state, &["search", "("]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert_eq!(err, "nd7 search: bad pattern \"(\": unclosed group\n");
}

/// Bash completes session ids (and `last`) where `nd7 show` and `nd7
/// verify` take a session, as `nd7 sessions --ids` lists them, and clap's
/// own completion elsewhere.
#[test]
fn bash_completes_session_ids_for_show_and_verify() {
    let state = State::new();
    record_all(
        &state,
        &session("57577be6-1111-4e2f-9d00-000000000001", "/p")[..2],
    );
    record_all(
        &state,
        &session("6a1f0c22-2222-4e2f-9d00-000000000002", "/p")[..2],
    );
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("completions/nd7.bash");
    let complete = |words: &str| {
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!(
                "source '{}'; COMP_WORDS=('{}' {words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); _nd7_sessions \"${{COMP_WORDS[0]}}\" \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
                script.display(),
                env!("CARGO_BIN_EXE_nd7"),
            ))
            .env("XDG_STATE_HOME", state.xdg())
            .output()
            .expect("bash");
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
    };
    assert_eq!(
        complete("show 5757"),
        "57577be6-1111-4e2f-9d00-000000000001\n"
    );
    assert_eq!(complete("verify l"), "last\n");
    let both = complete("show --full ''");
    assert!(
        both.contains("6a1f0c22-2222-4e2f-9d00-000000000002\n") && both.contains("last\n"),
        "{both}"
    );
    // Elsewhere, clap's: the value of --color, a subcommand.
    assert_eq!(complete("show --color nev"), "never\n");
    assert!(
        complete("sess").contains("sessions"),
        "sessions is a command"
    );
}
