//! `nd7 record` through the real binary: every real payload lands as the
//! right kind, and every bad input leaves one line on stderr, nothing on
//! stdout, exit 0, and the log unchanged.

use crate::common::*;

const SESSION: &str = "4dc8a87d-d386-4e43-a1ee-15a0429dcdee";

#[test]
fn real_payloads_are_recorded_as_their_kinds() {
    let state = State::new();
    for payload in fixture_payloads() {
        let out = state.record(format!("{payload}\n").as_bytes());
        assert!(out.status.success());
        assert_eq!(stdout(&out), "", "record must never print to stdout");
        assert_eq!(stderr(&out), "");
    }
    let log = state.log(SESSION);
    let got: Vec<(String, String)> = entries(&log)
        .iter()
        .map(|e| {
            let event = e["body"]["hook_event_name"]
                .as_str()
                .unwrap_or("?")
                .to_string();
            (e["kind"].as_str().unwrap_or("?").to_string(), event)
        })
        .collect();
    let expected = [
        ("session_start", "SessionStart"),
        ("prompt", "UserPromptSubmit"),
        ("tool_call", "PreToolUse"),
        ("tool_result", "PostToolUse"),
        ("hook", "PostToolBatch"),
        ("hook", "MessageDisplay"),
        ("turn_end", "Stop"),
        ("session_end", "SessionEnd"),
    ];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(k, e)| (k.to_string(), e.to_string()))
        .collect();
    assert_eq!(got, expected);

    let all = entries(&log);
    for (seq, entry) in all.iter().enumerate() {
        assert_eq!(entry["seq"], seq as u64);
        assert_eq!(entry["session"], SESSION);
        assert_eq!(entry["source"], "intent:claude-code");
        assert_eq!(entry["cwd"], "/home/dev/proj");
        assert!(
            entry["ts"]
                .as_u64()
                .is_some_and(|ts| ts > 1_700_000_000_000_000_000)
        );
        assert!(entry["hook_ppid"].as_u64().is_some());
        assert!(entry.get("sig").is_none(), "sig is reserved, never written");
    }
    assert_eq!(all[2]["tool_use_id"], "toolu_mock_0001");
    assert_eq!(
        all[2]["body"]["argv"],
        serde_json::json!(["echo", "hello-from-model"])
    );
    assert_eq!(all[3]["body"]["ok"], true);
    assert_eq!(all[3]["body"]["duration_ms"], 283);
    assert!(all[0].get("tool_use_id").is_none());
    // The hook kind keeps the payload whole under raw.
    let batch: serde_json::Value = serde_json::from_str(&fixture_payloads()[4]).expect("json");
    assert_eq!(all[4]["body"]["raw"], batch);

    let out = state
        .nd7()
        .args(["verify", SESSION])
        .output()
        .expect("verify");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with("verified: 8 entries, head "), "{text}");
    assert!(text.contains("not third-party evidence"), "{text}");
    assert!(text.contains("intent"), "{text}");
}

fn assert_quiet_refusal(state: &State, input: &[u8], needle: &str) {
    let log = state.log(SESSION);
    let before = snapshot(&log);
    let out = state.record(input);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout(&out), "");
    let err = stderr(&out);
    assert_eq!(
        err.lines().count(),
        1,
        "exactly one line on stderr: {err:?}"
    );
    assert!(err.starts_with("nd7 record: "), "{err}");
    assert!(err.contains(needle), "{err:?} should mention {needle:?}");
    assert_eq!(snapshot(&log), before, "a refused record changes nothing");
}

#[test]
fn bad_input_is_one_line_on_stderr_and_changes_nothing() {
    let state = State::new();
    let first = fixture_payloads()[0].clone();
    assert!(state.record(first.as_bytes()).status.success());

    assert_quiet_refusal(&state, b"", "empty");
    assert_quiet_refusal(&state, b"  \n", "empty");
    assert_quiet_refusal(&state, b"{\"session_id\": ", "not valid JSON");
    assert_quiet_refusal(&state, b"{\"session_id\":\"a\xff\xfe\"}", "not valid JSON");
    assert_quiet_refusal(&state, b"[1,2]", "not an object");
    assert_quiet_refusal(&state, br#"{"hook_event_name":"Stop"}"#, "no session_id");
    assert_quiet_refusal(&state, br#"{"session_id":"../escape"}"#, "path separator");
    assert_quiet_refusal(&state, br#"{"session_id":".."}"#, "invalid session id");
    assert_quiet_refusal(&state, br#"{"session_id":""}"#, "it is empty");
    assert_quiet_refusal(&state, b"{\"session_id\":\"a\\u0000b\"}", "NUL");
    assert_eq!(lines(&state.log(SESSION)).len(), 1);
    assert!(!state.sessions().join("..").join("escape").exists());
}

#[test]
fn an_unwritable_state_directory_is_reported_not_fatal() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A file where a directory must go: refused even for root.
    let blocker = dir.path().join("not-a-dir");
    std::fs::write(&blocker, b"").expect("write");
    let out = run_with_stdin(
        std::process::Command::new(env!("CARGO_BIN_EXE_nd7"))
            .arg("record")
            .env("XDG_STATE_HOME", &blocker),
        fixture_payloads()[0].as_bytes(),
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout(&out), "");
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err:?}");
    assert!(err.contains("not-a-dir"), "names the path: {err}");
}

#[test]
fn a_refused_chain_is_reported_and_left_alone() {
    let state = State::new();
    for p in fixture_payloads().iter().take(3) {
        assert!(state.record(p.as_bytes()).status.success());
    }
    let log = state.log(SESSION);
    std::fs::write(log.head_path(), "9 ".to_string() + &"ab".repeat(32) + "\n").expect("write");
    assert_quiet_refusal(&state, fixture_payloads()[3].as_bytes(), "ahead of the log");
}

#[test]
fn a_100_mb_payload_is_recorded_by_size_and_fingerprint() {
    let state = State::new();
    let filler = "x".repeat(100 * 1024 * 1024);
    let payload = format!(
        r#"{{"session_id":"{SESSION}","cwd":"/p","hook_event_name":"PreToolUse","tool_name":"Write","tool_input":{{"file_path":"/p/big","content":"{filler}"}},"tool_use_id":"toolu_big"}}"#
    );
    let out = state.record(payload.as_bytes());
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout(&out), "");
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err:?}");
    assert!(err.contains("over the"), "{err}");
    let log = state.log(SESSION);
    let all = entries(&log);
    assert_eq!(all.len(), 1);
    let e = &all[0];
    assert_eq!(e["kind"], "hook");
    assert_eq!(e["tool_use_id"], "toolu_big");
    assert_eq!(e["body"]["hook_event_name"], "PreToolUse");
    assert_eq!(e["body"]["omitted"]["bytes"], payload.len() as u64);
    assert_eq!(
        e["body"]["omitted"]["blake3"],
        blake3::hash(payload.as_bytes()).to_hex().as_str()
    );
    assert!(log.verify(1).is_ok());
}

#[test]
fn payload_just_under_the_limit_is_stored_whole() {
    let state = State::new();
    let room = nd7_core::record::entry::MAX_STORED_PAYLOAD - 400;
    let payload = format!(
        r#"{{"session_id":"s","hook_event_name":"UserPromptSubmit","prompt":"{}"}}"#,
        "y".repeat(room)
    );
    assert!(payload.len() <= nd7_core::record::entry::MAX_STORED_PAYLOAD);
    let out = state.record(payload.as_bytes());
    assert_eq!(stderr(&out), "");
    let all = entries(&state.log("s"));
    assert_eq!(all[0]["kind"], "prompt");
    assert_eq!(all[0]["body"]["prompt"].as_str().map(str::len), Some(room));
}

#[test]
fn files_are_private_to_the_user() {
    use std::os::unix::fs::PermissionsExt;
    let state = State::new();
    assert!(
        state
            .record(fixture_payloads()[0].as_bytes())
            .status
            .success()
    );
    let log = state.log(SESSION);
    let mode =
        |p: &std::path::Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode(log.dir()), 0o700);
    assert_eq!(mode(&state.sessions()), 0o700);
    for f in [log.events_path(), log.head_path(), log.lock_path()] {
        assert_eq!(mode(&f), 0o600, "{}", f.display());
    }
}

/// The log lines under `state`, every session's, in a stable order, with
/// what differs between two runs of the same hooks masked: the time (`ts`),
/// and the hashes that cover it and the chain's random start (`prev`,
/// `hash`). Everything else is compared byte for byte.
fn masked_logs(state: &State) -> Vec<String> {
    let mut sessions: Vec<_> = std::fs::read_dir(state.sessions())
        .map(|d| d.map(|e| e.expect("entry").path()).collect())
        .unwrap_or_default();
    sessions.sort();
    let mask = |line: &str, key: &str| -> String {
        let at = format!("\"{key}\":");
        let Some(start) = line.find(&at) else {
            return line.to_string();
        };
        let value = start + at.len();
        let end = line[value..]
            .find([',', '}'])
            .map_or(line.len(), |e| value + e);
        format!("{}\"{key}\":0{}", &line[..start], &line[end..])
    };
    sessions
        .iter()
        .flat_map(|dir| {
            let text = std::fs::read_to_string(dir.join("events.ndjson")).unwrap_or_default();
            let name = dir
                .file_name()
                .expect("name")
                .to_string_lossy()
                .into_owned();
            text.lines()
                .map(|l| format!("{name}: {}", mask(&mask(&mask(l, "ts"), "prev"), "hash")))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// `nd7-record ARGS`, which `nd7 setup` wires (ADR-0151), records what
/// `nd7 record ARGS` does: the same entries but for the time, the same
/// (empty) standard output, the same standard error, for Claude Code's and
/// Codex's payloads and for arguments it refuses. Guards src/bin/nd7-record.rs
/// (it must hand on its arguments after the program name, as `nd7` hands on
/// those after `record`).
#[test]
fn nd7_record_records_what_nd7_record_does() {
    let codex = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/codex-0.171.0/hook-payloads.ndjson"
    ))
    .expect("fixture");
    let codex: Vec<String> = codex.lines().map(str::to_string).collect();
    let claude = fixture_payloads();
    let cases: [(&[&str], &[String]); 4] = [
        (&[], &claude),
        (&["--agent", "codex"], &codex),
        (&["--agent=claude-code"], &claude[..2]),
        (&["--agent", "gemini"], &claude[..1]),
    ];
    for (args, payloads) in cases {
        let (by_nd7, by_lean) = (State::new(), State::new());
        for payload in payloads {
            let nd7 = run_with_stdin(by_nd7.nd7().arg("record").args(args), payload.as_bytes());
            let lean = run_with_stdin(by_lean.nd7_record().args(args), payload.as_bytes());
            assert_eq!(lean.status.code(), Some(0), "{args:?}: {}", stderr(&lean));
            assert_eq!(stdout(&lean), "", "{args:?}");
            assert_eq!(stdout(&nd7), "", "{args:?}");
            assert_eq!(stderr(&lean), stderr(&nd7), "{args:?}");
        }
        let (want, got) = (masked_logs(&by_nd7), masked_logs(&by_lean));
        let expected = if args == ["--agent", "gemini"] {
            0
        } else {
            payloads.len()
        };
        assert!(want.len() >= expected, "{args:?}: {want:?}");
        assert_eq!(got, want, "{args:?}");
    }
}
