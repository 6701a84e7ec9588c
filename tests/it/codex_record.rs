//! `nd7 record --agent codex` through the real binary, with the hook payloads
//! and the rollout file the real Codex 0.171.0 wrote for one session
//! (tests/fixtures/codex-0.171.0/), and the attacks on the rollout read: a
//! link, a FIFO, a file grown past the bound, a forged line out of place.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::*;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/codex-0.171.0");

/// The captured session, its paths moved into a scratch home.
struct Captured {
    home: tempfile::TempDir,
    state: State,
    payloads: Vec<String>,
    rollout: PathBuf,
    session: String,
}

impl Captured {
    fn new() -> Captured {
        let home = tempfile::tempdir().expect("tempdir");
        let root = home.path().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(format!("{DIR}/session-hooks.ndjson"))
            .expect("fixture")
            .replace("/home/dev", &root);
        let payloads: Vec<String> = text.lines().map(str::to_string).collect();
        let first: Value = serde_json::from_str(&payloads[0]).expect("json");
        let rollout = PathBuf::from(first["transcript_path"].as_str().expect("path"));
        std::fs::create_dir_all(rollout.parent().expect("dir")).expect("mkdir");
        let rollout_text = std::fs::read_to_string(format!("{DIR}/rollout.jsonl"))
            .expect("fixture")
            .replace("/home/dev", &root);
        std::fs::write(&rollout, rollout_text).expect("write rollout");
        Captured {
            home,
            state: State::new(),
            session: first["session_id"].as_str().expect("id").to_string(),
            payloads,
            rollout,
        }
    }

    /// `nd7` with this capture's Codex home.
    fn nd7(&self) -> Command {
        let mut cmd = self.state.nd7();
        cmd.env("CODEX_HOME", self.home.path().join(".codex"));
        cmd
    }

    fn record(&self, payload: &str) -> std::process::Output {
        let out = run_with_stdin(
            self.nd7().args(["record", "--agent", "codex"]),
            payload.as_bytes(),
        );
        assert_eq!(out.status.code(), Some(0));
        assert!(out.stdout.is_empty(), "nothing on stdout: {out:?}");
        out
    }

    fn record_all(&self) {
        for p in &self.payloads {
            let out = self.record(p);
            assert!(out.stderr.is_empty(), "{}", stderr(&out));
        }
    }

    /// The entries made from Codex's hooks (not nd7's anchors).
    fn entries(&self) -> Vec<Value> {
        entries(&self.state.log(&self.session))
            .into_iter()
            .filter(|e| e["source"] == "intent:codex")
            .collect()
    }

    fn result_for(&self, id: &str) -> Option<Value> {
        self.entries()
            .into_iter()
            .find(|e| e["kind"] == "tool_result" && e["tool_use_id"] == id)
    }

    /// The PostToolUse payload of call `id`.
    fn post(&self, id: &str) -> String {
        self.payloads
            .iter()
            .find(|p| p.contains("\"PostToolUse\"") && p.contains(&format!("\"{id}\"")))
            .expect("a PostToolUse for the call")
            .clone()
    }
}

#[test]
fn a_real_codex_session_is_recorded_with_outcomes_from_the_rollout() {
    let c = Captured::new();
    c.record_all();
    let entries = c.entries();
    assert_eq!(entries.len(), c.payloads.len());
    assert!(entries.iter().all(|e| e["source"] == "intent:codex"));
    let kinds: Vec<&str> = entries.iter().filter_map(|e| e["kind"].as_str()).collect();
    assert_eq!(kinds.first(), Some(&"session_start"));
    assert_eq!(kinds.last(), Some(&"session_end"));
    // The first entry names the agent and the version that wrote the rollout.
    assert_eq!(
        entries[0]["body"]["agent"],
        serde_json::json!({"name": "codex", "version": "0.171.0", "originator": "codex_exec"})
    );
    // Every call that got a result is paired with it by call id; the failing
    // one is marked failed with its exit code.
    let expected = [
        ("call_mock_0_0", true, Some(0)),
        ("call_mock_1_0", false, Some(3)),
        ("call_mock_2_0", true, Some(0)),
        ("call_mock_2_1", true, Some(0)),
        ("call_mock_3_0", true, None),
    ];
    for (id, ok, code) in expected {
        let result = c
            .result_for(id)
            .unwrap_or_else(|| panic!("a result for {id}"));
        assert_eq!(result["body"]["ok"], ok, "{result}");
        assert_eq!(
            result["body"]["outcome"]["exit_code"].as_i64(),
            code,
            "{result}"
        );
        assert_eq!(result["body"]["outcome"]["from"], "rollout");
    }
    let patch = entries
        .iter()
        .find(|e| e["kind"] == "tool_call" && e["body"]["tool_name"] == "apply_patch")
        .expect("the apply_patch call");
    assert_eq!(patch["body"]["paths"], serde_json::json!(["note.txt"]));
    // The refused call has its call and no result: that is how a reader sees
    // a call that never got one.
    assert!(
        entries
            .iter()
            .any(|e| e["kind"] == "tool_call" && e["tool_use_id"] == "call_mock_4_0")
    );
    assert!(c.result_for("call_mock_4_0").is_none());
    let out = c
        .nd7()
        .args(["verify", &c.session])
        .output()
        .expect("verify");
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

/// Records the PostToolUse of the failing call after `tamper` has had its
/// way with the rollout; returns the result entry.
fn failing_result_after(tamper: impl FnOnce(&Captured)) -> Value {
    let c = Captured::new();
    for p in &c.payloads[..5] {
        c.record(p);
    }
    tamper(&c);
    c.record(&c.post("call_mock_1_0"));
    c.result_for("call_mock_1_0").expect("a result is recorded")
}

fn why(result: &Value) -> String {
    result["body"]["outcome"]["why"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_rollout_replaced_by_a_link_is_not_followed() {
    // The attack: point the rollout at a file that says the call succeeded.
    // Guarded by O_NOFOLLOW on the file in safe_file::open_beneath.
    let result = failing_result_after(|c| {
        let forged = c.home.path().join("forged.jsonl");
        let text = std::fs::read_to_string(&c.rollout).expect("read").replace(
            r#""status":"failed","aggregated_output":"failing\n","exit_code":3"#,
            r#""status":"completed","aggregated_output":"failing\n","exit_code":0"#,
        );
        assert!(text.contains(r#""exit_code":0"#));
        std::fs::write(&forged, text).expect("write");
        std::fs::remove_file(&c.rollout).expect("rm");
        std::os::unix::fs::symlink(&forged, &c.rollout).expect("link");
    });
    assert_eq!(result["body"]["ok"], Value::Null, "{result}");
    assert!(why(&result).contains("symbolic link"), "{result}");
}

#[test]
fn a_link_among_the_rollouts_directories_is_not_followed() {
    // Guarded by O_NOFOLLOW on every directory in safe_file::open_beneath.
    let result = failing_result_after(|c| {
        let day = c.rollout.parent().expect("day dir").to_path_buf();
        let elsewhere = c.home.path().join("elsewhere");
        std::fs::rename(&day, &elsewhere).expect("move");
        std::os::unix::fs::symlink(&elsewhere, &day).expect("link");
    });
    assert_eq!(result["body"]["ok"], Value::Null, "{result}");
    assert!(why(&result).contains("symbolic link"), "{result}");
}

/// A rollout that says the failing call succeeded, with the session's
/// rollout name, outside the day's directory: the payload naming it is the
/// agent's word, so the outcome is unknown rather than forged. Guards the
/// layout check in `rollout::Rollout::open`.
#[test]
fn a_rollout_named_outside_the_sessions_directory_is_not_read() {
    let c = Captured::new();
    for p in &c.payloads[..5] {
        c.record(p);
    }
    let name = c.rollout.file_name().expect("name");
    let forged = c.home.path().join(name);
    let text = std::fs::read_to_string(&c.rollout).expect("read").replace(
        r#""status":"failed","aggregated_output":"failing\n","exit_code":3"#,
        r#""status":"completed","aggregated_output":"failing\n","exit_code":0"#,
    );
    assert!(text.contains(r#""exit_code":0"#));
    std::fs::write(&forged, text).expect("write");
    let payload = c.post("call_mock_1_0").replace(
        &c.rollout.display().to_string(),
        &forged.display().to_string(),
    );
    assert!(payload.contains(&forged.display().to_string()));
    c.record(&payload);
    let result = c.result_for("call_mock_1_0").expect("a result is recorded");
    assert_eq!(result["body"]["ok"], Value::Null, "{result}");
    assert!(
        why(&result).contains("not where Codex keeps this session's rollout"),
        "{result}"
    );
}

/// The rollout given a second name that is a forged file: refused as the
/// transcript is (guards the link-count check in `safe_file::open_beneath`,
/// which the rollout read now shares).
#[test]
fn a_rollout_with_a_second_name_is_not_read() {
    let result = failing_result_after(|c| {
        let forged = c.home.path().join("forged.jsonl");
        let text = std::fs::read_to_string(&c.rollout).expect("read").replace(
            r#""status":"failed","aggregated_output":"failing\n","exit_code":3"#,
            r#""status":"completed","aggregated_output":"failing\n","exit_code":0"#,
        );
        std::fs::write(&forged, text).expect("write");
        std::fs::remove_file(&c.rollout).expect("rm");
        std::fs::hard_link(&forged, &c.rollout).expect("link");
    });
    assert_eq!(result["body"]["ok"], Value::Null, "{result}");
    assert!(why(&result).contains("2 names"), "{result}");
}

#[test]
fn a_fifo_in_place_of_the_rollout_stalls_nothing() {
    // Without O_NONBLOCK (safe_file::open_beneath) opening a FIFO waits for
    // a writer that never comes, and Codex waits on its hook for 10 minutes;
    // without its regular-file check it is read as empty.
    let c = Captured::new();
    for p in &c.payloads[..5] {
        c.record(p);
    }
    std::fs::remove_file(&c.rollout).expect("rm");
    let status = Command::new("mkfifo")
        .arg(&c.rollout)
        .status()
        .expect("mkfifo");
    assert!(status.success());
    let mut child = c
        .nd7()
        .args(["record", "--agent", "codex"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin
            .write_all(c.post("call_mock_1_0").as_bytes())
            .expect("write");
    }
    // A hang is a failure, not a wait: the record takes milliseconds.
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("nd7 record hung on a FIFO in place of the rollout");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let result = c.result_for("call_mock_1_0").expect("recorded");
    assert_eq!(result["body"]["ok"], Value::Null, "{result}");
    assert!(why(&result).contains("not a regular file"), "{result}");
}

#[test]
fn a_rollout_grown_past_the_bound_is_read_only_that_far() {
    // 17 MiB of lines after the completed item: it lies beyond TAIL_LIMIT
    // (16 MiB), so the outcome is unknown rather than read at any cost.
    let result = failing_result_after(|c| {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&c.rollout)
            .expect("open");
        let line = format!(
            "{{\"type\":\"event_msg\",\"payload\":{{\"pad\":\"{}\"}}}}\n",
            "x".repeat(1 << 20)
        );
        for _ in 0..17 {
            f.write_all(line.as_bytes()).expect("append");
        }
    });
    assert_eq!(result["body"]["ok"], Value::Null, "{result}");
    assert!(why(&result).contains("last 16777216 bytes"), "{result}");
}

#[test]
fn a_completed_item_before_its_call_is_not_taken() {
    // A forged "completed" line planted earlier in the file does not answer
    // for a call made after it: the read stops at the call itself.
    let result = failing_result_after(|c| {
        let text = std::fs::read_to_string(&c.rollout).expect("read");
        let forged = r#"{"type":"event_msg","payload":{"type":"item_completed","item":{"id":"call_mock_1_0","status":"completed","exit_code":0}}}"#;
        let mut lines: Vec<&str> = text.lines().collect();
        // Put it first after the session_meta, and take the real one out.
        lines.retain(|l| !(l.contains("item_completed") && l.contains("\"call_mock_1_0\"")));
        lines.insert(1, forged);
        std::fs::write(&c.rollout, lines.join("\n") + "\n").expect("write");
    });
    assert_eq!(result["body"]["ok"], Value::Null, "{result}");
    assert!(why(&result).contains("no completed item"), "{result}");
}

#[test]
fn a_missing_rollout_is_said_and_the_call_still_recorded() {
    let result = failing_result_after(|c| std::fs::remove_file(&c.rollout).expect("rm"));
    assert_eq!(result["body"]["ok"], Value::Null, "{result}");
    assert_eq!(result["body"]["tool_response"], "failing\n");
}

#[test]
fn bad_agent_arguments_record_nothing_and_exit_0() {
    let c = Captured::new();
    for args in [
        &["record", "--agent", "gemini"][..],
        &["record", "--agent"],
        &["record", "--agent", "codex", "extra"],
        &["record", "--verbose"],
    ] {
        let out = run_with_stdin(c.state.nd7().args(args), c.payloads[0].as_bytes());
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(out.stdout.is_empty());
        assert!(
            stderr(&out).contains("nothing recorded"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    assert!(!c.state.log(&c.session).events_path().exists());
    // `--agent=codex` and `--agent claude-code` are fine.
    let out = run_with_stdin(
        c.nd7().args(["record", "--agent=codex"]),
        c.payloads[0].as_bytes(),
    );
    assert!(out.stderr.is_empty(), "{}", stderr(&out));
    assert_eq!(c.entries()[0]["source"], "intent:codex");
}

#[test]
fn every_captured_payload_records_as_codex() {
    // The second capture (compactions, a refused call) records as well.
    let state = State::new();
    let text = std::fs::read_to_string(format!("{DIR}/hook-payloads.ndjson")).expect("fixture");
    for line in text.lines() {
        let out = run_with_stdin(
            state.nd7().args(["record", "--agent", "codex"]),
            line.as_bytes(),
        );
        assert_eq!(out.status.code(), Some(0));
        assert!(out.stdout.is_empty());
    }
    let sessions: Vec<_> = std::fs::read_dir(state.sessions())
        .expect("sessions")
        .collect();
    assert_eq!(sessions.len(), 2);
    for s in sessions {
        let id = s.expect("entry").file_name().to_string_lossy().into_owned();
        let entries = entries(&state.log(&id));
        assert!(entries.iter().all(|e| e["source"] == "intent:codex"));
        // The rollout is not on this machine: every result says so.
        for r in entries.iter().filter(|e| e["kind"] == "tool_result") {
            assert_eq!(r["body"]["ok"], Value::Null);
        }
        let starts = entries
            .iter()
            .filter(|e| e["kind"] == "session_start")
            .count();
        assert!(starts >= 1);
    }
}

/// Under `nd7 run`, `nd7 run` itself builds a hook's entry, outside the
/// sandbox. It reads the version and each call's outcome from the rollout as
/// `nd7 record` does, but only below the Codex home the run fixed when it
/// started, where the door anchors the rollout too: an agent that points
/// `transcript_path` at a file only the unconfined `nd7 run` can read gets
/// nothing of it into the log. Guards the `Door` arm of `record::entry::event_for`
/// (and `Rollout::open`'s layout check behind it): built the recorder's way
/// from the environment, or without the check, the planted version lands.
#[test]
fn built_for_the_door_a_codex_entry_reads_the_rollout_only_where_codex_keeps_it() {
    use nd7_core::record::entry::{Builder, event_for};
    let c = Captured::new();
    let invocation = nd7_core::record::invocation_now();
    let agent = nd7_core::hook::Agent::Codex;
    let home = c.home.path().join(".codex");
    // A file in Codex's home that is no rollout (its credentials live
    // beside the sessions), dressed as this session's rollout.
    let secret = home.join("auth.json");
    std::fs::write(
        &secret,
        format!(
            "{{\"type\":\"session_meta\",\"payload\":{{\"id\":\"{}\",\"cli_version\":\"LEAKED-9.9.9\"}}}}\n",
            c.session
        ),
    )
    .expect("write the secret");
    let mut results = 0;
    for payload in &c.payloads {
        let kind: Value = serde_json::from_str(payload).expect("json");
        let name = kind["hook_event_name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let direct = nd7_core::codex::event_in(
            Some(&home),
            &invocation,
            nd7_core::hook::Payload::parse(payload.as_bytes()).expect("payload"),
            false,
        );
        let door = |codex_home: Option<&Path>, payload: &str| {
            let (event, _) = event_for(
                agent,
                &invocation,
                payload.as_bytes(),
                Builder::Door { codex_home },
            )
            .expect("event");
            event.body.get().to_string()
        };
        // With the run's Codex home, the same entry as the recorder's.
        assert_eq!(door(Some(&home), payload), direct.body.get(), "{name}");
        if name == "SessionStart" {
            assert!(
                direct.body.get().contains(r#""version":"0.171.0""#),
                "{direct:?}"
            );
        }
        if name == "PostToolUse" {
            assert!(
                direct.body.get().contains(r#""from":"rollout""#),
                "{direct:?}"
            );
            results += 1;
        }
        // With none fixed, nothing is read.
        let unread = door(None, payload);
        assert!(!unread.contains("0.171.0"), "{unread}");
        if name == "PostToolUse" {
            assert!(unread.contains(r#""ok":null"#), "{unread}");
        }
        // Pointed elsewhere, nothing of that file is recorded.
        let mut planted = kind.clone();
        if planted.get("transcript_path").is_some() {
            planted["transcript_path"] = Value::String(secret.display().to_string());
            let built = door(Some(&home), &planted.to_string());
            assert!(!built.contains("LEAKED"), "{name}: {built}");
            if name == "SessionStart" || name == "PostToolUse" {
                assert!(built.contains("not where Codex keeps"), "{name}: {built}");
            }
        }
    }
    assert!(results > 0, "the capture has results");
}

/// Codex's payloads name its rollout as `transcript_path`: nd7 anchors it
/// as it anchors Claude Code's transcript, and `nd7 verify --transcript`
/// holds the rollout against the anchors (the refusals are in
/// codex_rollout.rs).
#[test]
fn a_codex_sessions_rollout_is_anchored_and_verified() {
    let c = Captured::new();
    c.record_all();
    let anchors: Vec<Value> = entries(&c.state.log(&c.session))
        .into_iter()
        .filter(|e| {
            e["kind"]
                .as_str()
                .is_some_and(|k| k.starts_with("transcript_"))
        })
        .collect();
    assert!(!anchors.is_empty());
    let rollout = c.rollout.display().to_string();
    for a in &anchors {
        assert_eq!(a["kind"], "transcript_anchor", "{a}");
        assert_eq!(a["source"], "record:nd7", "{a}");
        assert_eq!(a["body"]["path"], rollout, "{a}");
    }
    let size = std::fs::metadata(&c.rollout).expect("stat").len();
    assert_eq!(anchors.last().expect("anchor")["body"]["bytes"], size);
    let out = c
        .nd7()
        .args(["verify", "--transcript", &c.session])
        .output()
        .expect("verify");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(stdout(&out).contains(&format!("transcript {rollout}: holds all")));
}
