//! Claude Code's transcript anchored by `nd7 record` (outside `nd7 run`),
//! through the real binary, on files laid out as Claude Code lays them out:
//! anchors follow the file, `nd7 verify --transcript` holds it against them,
//! links, second names and replacements are refused or recorded, and each
//! bound stops the reading with a gap entry.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::common::*;

const SID: &str = "6fe9709e-7aa0-46ea-b9c9-6af89d638879";

/// A scratch home with Claude Code's layout under it, and a state directory.
struct Scene {
    dir: tempfile::TempDir,
    limits: Option<String>,
}

impl Scene {
    fn new() -> Scene {
        let scene = Scene {
            dir: tempfile::tempdir().expect("tempdir"),
            limits: None,
        };
        std::fs::create_dir_all(scene.project_dir()).expect("mkdir");
        scene
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    fn cwd(&self) -> String {
        self.home().join("proj").display().to_string()
    }

    fn project_dir(&self) -> PathBuf {
        let key = nd7_core::transcript::layout::project_key(&self.cwd());
        self.home().join(".claude/projects").join(key)
    }

    fn transcript(&self) -> PathBuf {
        self.project_dir().join(format!("{SID}.jsonl"))
    }

    fn agent_transcript(&self, agent: &str) -> PathBuf {
        self.project_dir()
            .join(SID)
            .join("subagents")
            .join(format!("agent-{agent}.jsonl"))
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    fn nd7(&self) -> std::process::Command {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_nd7"));
        cmd.env("XDG_STATE_HOME", self.state())
            .env("HOME", self.home())
            .env_remove("CLAUDE_CONFIG_DIR")
            .env_remove(nd7_core::record::RUN_VARIABLE);
        match &self.limits {
            Some(l) => cmd.env(nd7_core::transcript::LIMITS_VARIABLE, l),
            None => cmd.env_remove(nd7_core::transcript::LIMITS_VARIABLE),
        };
        cmd
    }

    /// `nd7 record` of one hook `event` with `extra` members; asserts it
    /// printed nothing on stdout and returns its stderr.
    fn hook(&self, event: &str, extra: Value) -> String {
        let mut payload = json!({
            "session_id": SID,
            "transcript_path": self.transcript(),
            "cwd": self.cwd(),
            "hook_event_name": event,
        });
        if let (Some(p), Value::Object(extra)) = (payload.as_object_mut(), extra) {
            p.extend(extra);
        }
        let out = run_with_stdin(self.nd7().arg("record"), payload.to_string().as_bytes());
        assert!(out.status.success());
        assert_eq!(stdout(&out), "");
        stderr(&out)
    }

    fn log(&self) -> nd7_core::session_log::SessionLog {
        nd7_core::session_log::SessionLog::new(&self.state().join("nd7/sessions"), SID)
            .expect("session id")
    }

    /// The transcript entries of the log, in order.
    fn transcript_entries(&self) -> Vec<Value> {
        entries(&self.log())
            .into_iter()
            .filter(|e| {
                e["kind"]
                    .as_str()
                    .is_some_and(|k| k.starts_with("transcript_"))
            })
            .collect()
    }

    fn verify(&self) -> std::process::Output {
        self.nd7()
            .args(["verify", "--transcript", SID])
            .output()
            .expect("nd7 verify")
    }
}

fn lines(n: std::ops::Range<usize>) -> Vec<u8> {
    n.flat_map(|i| {
        format!(
            "{{\"type\":\"user\",\"n\":{i},\"pad\":\"{}\"}}\n",
            "x".repeat(i % 50)
        )
        .into_bytes()
    })
    .collect()
}

fn append(path: &Path, bytes: &[u8]) {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .and_then(|mut f| f.write_all(bytes))
        .expect("append to the transcript");
}

fn hash(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

#[test]
fn anchors_follow_the_transcript_and_verify_holds_it_against_them() {
    let s = Scene::new();
    // No transcript yet (Claude Code writes it at the first message): nothing.
    assert_eq!(s.hook("SessionStart", json!({"source": "startup"})), "");
    assert!(s.transcript_entries().is_empty());

    let first = lines(0..40);
    append(&s.transcript(), &first);
    assert_eq!(
        s.hook(
            "PostToolUse",
            json!({"tool_name": "Bash", "tool_input": {}, "tool_response": {}})
        ),
        ""
    );
    let more = lines(40..400);
    append(&s.transcript(), &more);
    assert_eq!(s.hook("Stop", json!({})), "");
    // Nothing new: no entry.
    assert_eq!(s.hook("Stop", json!({})), "");
    let whole = [first.clone(), more].concat();
    let anchors = s.transcript_entries();
    assert_eq!(anchors.len(), 2, "{anchors:#?}");
    for a in &anchors {
        assert_eq!(a["kind"], "transcript_anchor");
        assert_eq!(a["source"], "record:nd7");
        assert_eq!(a["session"], SID);
        assert_eq!(a["body"]["path"], s.transcript().display().to_string());
        assert_eq!(a["body"]["session_id"], SID);
    }
    assert_eq!(anchors[0]["body"]["bytes"], first.len());
    assert_eq!(anchors[0]["body"]["blake3"], hash(&first));
    assert_eq!(anchors[0]["body"]["from"], 0);
    assert_eq!(anchors[1]["body"]["bytes"], whole.len());
    assert_eq!(anchors[1]["body"]["blake3"], hash(&whole));
    assert_eq!(
        anchors[1]["body"]["from"],
        first.len(),
        "each byte is hashed once"
    );

    let out = s.verify();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        stdout(&out).contains("holds all 2 anchors"),
        "{}",
        stdout(&out)
    );
    assert!(
        stdout(&out).contains("nd7 record in the hooks' own processes"),
        "{}",
        stdout(&out)
    );

    // Appending after the last anchor changes nothing.
    append(&s.transcript(), &lines(400..410));
    assert_eq!(s.verify().status.code(), Some(0));

    // One byte changed inside the first anchor: that anchor is named.
    let mut changed = std::fs::read(s.transcript()).expect("read");
    changed[100] ^= 0x20;
    std::fs::write(s.transcript(), &changed).expect("write");
    let out = s.verify();
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let text = stdout(&out);
    let seq = anchors[0]["seq"].as_u64().expect("seq");
    assert!(
        text.contains(&format!(
            "TRANSCRIPT CHANGED: {}: entry {seq} anchored its first {} bytes",
            s.transcript().display(),
            first.len()
        )),
        "{text}"
    );
    // One byte changed after the first anchor: the second is named.
    let mut changed = whole.clone();
    changed[first.len() + 10] ^= 0x20;
    std::fs::write(s.transcript(), &changed).expect("write");
    let text = stdout(&s.verify());
    assert!(
        text.contains(&format!("entry {} anchored", anchors[1]["seq"])),
        "{text}"
    );
    assert!(
        text.contains(&format!("within bytes {}..{}", first.len(), whole.len())),
        "{text}"
    );
    // Truncated: named, and said to be truncated.
    std::fs::write(s.transcript(), &whole[..whole.len() - 1]).expect("write");
    let out = s.verify();
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains("truncated"), "{}", stdout(&out));
    // Gone: cannot be read.
    std::fs::remove_file(s.transcript()).expect("rm");
    let out = s.verify();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("does not exist"), "{}", stderr(&out));
}

#[test]
fn a_session_without_anchors_or_unknown_is_not_verified() {
    let s = Scene::new();
    s.hook("SessionStart", json!({}));
    let out = s.verify();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("no transcript anchor"),
        "{}",
        stderr(&out)
    );
    let out = s
        .nd7()
        .args(["verify", "--transcript", "no-such-session"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
}

/// A link where the transcript should be (to a file the agent wants read,
/// or a directory on the way), a file with a second name, a FIFO: none is
/// read; each is one gap entry, not repeated at every hook. Guards the
/// `NOFOLLOW` opens and the type and link-count checks in
/// `safe_file::open_beneath`.
#[test]
fn links_second_names_and_fifos_are_refused_with_a_gap() {
    let secret_dir = tempfile::tempdir().expect("tmp");
    let secret = secret_dir.path().join("id_ed25519.jsonl");
    std::fs::write(&secret, "SECRET-KEY\n").expect("write");

    let s = Scene::new();
    std::os::unix::fs::symlink(&secret, s.transcript()).expect("symlink");
    s.hook("Stop", json!({}));
    s.hook("Stop", json!({}));
    let entries = s.transcript_entries();
    assert_eq!(entries.len(), 1, "{entries:#?}");
    assert_eq!(entries[0]["kind"], "transcript_gap");
    assert_eq!(entries[0]["body"]["reason"], "refused");
    assert!(
        entries[0]["body"]["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("symbolic link")
    );
    assert!(
        !std::fs::read_to_string(s.log().events_path())
            .expect("log")
            .contains("SECRET-KEY")
    );

    let s = Scene::new();
    std::fs::hard_link(&secret, s.transcript()).expect("link");
    s.hook("Stop", json!({}));
    let entries = s.transcript_entries();
    assert_eq!(entries.len(), 1);
    assert!(
        entries[0]["body"]["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("2 names"),
        "{entries:#?}"
    );

    // The project's directory itself a link to elsewhere.
    let s = Scene::new();
    let elsewhere = s.dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).expect("mkdir");
    std::fs::write(elsewhere.join(format!("{SID}.jsonl")), "{}\n").expect("write");
    std::fs::remove_dir(s.project_dir()).expect("rmdir");
    std::os::unix::fs::symlink(&elsewhere, s.project_dir()).expect("symlink");
    s.hook("Stop", json!({}));
    let entries = s.transcript_entries();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["body"]["reason"], "refused");

    let s = Scene::new();
    // mkfifo(1): rustix has no mkfifoat on macOS.
    let made = std::process::Command::new("mkfifo")
        .arg(s.transcript())
        .status()
        .expect("run mkfifo");
    assert!(made.success(), "mkfifo");
    s.hook("SessionEnd", json!({"reason": "other"}));
    let entries = s.transcript_entries();
    assert_eq!(entries.len(), 1);
    assert!(
        entries[0]["body"]["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("FIFO")
    );
}

/// The payload is the agent's word: a `transcript_path` that is not where
/// the layout puts this session's file is never opened.
#[test]
fn a_transcript_path_outside_the_layout_is_not_read() {
    let s = Scene::new();
    let decoy = s
        .home()
        .join(".claude/projects")
        .join("-elsewhere")
        .join(format!("{SID}.jsonl"));
    std::fs::create_dir_all(decoy.parent().expect("parent")).expect("mkdir");
    std::fs::write(&decoy, "decoy\n").expect("write");
    let payload = json!({
        "session_id": SID, "transcript_path": decoy, "cwd": s.cwd(), "hook_event_name": "Stop",
    });
    for _ in 0..2 {
        let out = run_with_stdin(s.nd7().arg("record"), payload.to_string().as_bytes());
        assert!(out.status.success());
    }
    let entries = s.transcript_entries();
    assert_eq!(entries.len(), 1, "{entries:#?}");
    assert_eq!(entries[0]["kind"], "transcript_gap");
    assert_eq!(entries[0]["body"]["reason"], "path");
    assert_eq!(entries[0]["body"]["path"], decoy.display().to_string());
}

/// The transcript's path comes from the hooks' payloads, which the agent
/// can write: `nd7 verify --transcript` shows it inert (ADR-0090), with the
/// gap the refusal to read it left.
///
/// Guards the escaping in `transcript_cmds::verify`: without it the path's
/// OSC and CSI sequences reach stdout as they are.
#[test]
fn verify_shows_a_hostile_transcript_path_inert() {
    let s = Scene::new();
    let hostile = s
        .home()
        .join("x\x1b]2;title\x07\x1b[2J\u{9b}H\u{202e}")
        .join(format!("{SID}.jsonl"));
    let payload = json!({
        "session_id": SID, "transcript_path": hostile, "cwd": s.cwd(), "hook_event_name": "Stop",
    });
    let out = run_with_stdin(s.nd7().arg("record"), payload.to_string().as_bytes());
    assert!(out.status.success());
    let out = s.verify();
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert!(
        !said
            .chars()
            .any(|c| (c.is_control() && c != '\n') || c == '\u{202e}'),
        "{said:?}"
    );
    assert!(
        said.contains("x\\x1b]2;title\\x07\\x1b[2J\\x9bH\\u{202e}/"),
        "{said}"
    );
}

/// A file replaced, truncated, or rewritten at its anchored end is found at
/// the next hook and recorded as such; anchoring starts again from byte 0
/// (a new generation), and verify still fails on the old anchors.
#[test]
fn a_replaced_truncated_or_rewritten_transcript_is_recorded_not_reanchored_silently() {
    for case in ["replaced", "truncated", "rewritten"] {
        let s = Scene::new();
        let first = lines(0..100);
        append(&s.transcript(), &first);
        s.hook("Stop", json!({}));
        let mut now = first.clone();
        match case {
            "replaced" => {
                now[0] = b'['; // a different file, a byte apart
                let tmp = s.project_dir().join("new.tmp");
                std::fs::write(&tmp, &now).expect("write");
                std::fs::rename(&tmp, s.transcript()).expect("rename");
            }
            "truncated" => {
                now.truncate(first.len() - 10);
                std::fs::write(s.transcript(), &now).expect("write");
            }
            _ => {
                let at = now.len() - 3;
                now[at] = b'#';
                std::fs::write(s.transcript(), &now).expect("write");
            }
        }
        s.hook("Stop", json!({}));
        s.hook("Stop", json!({}));
        let entries = s.transcript_entries();
        let kinds: Vec<&str> = entries
            .iter()
            .map(|e| e["kind"].as_str().unwrap_or("?"))
            .collect();
        assert_eq!(
            kinds,
            ["transcript_anchor", "transcript_break", "transcript_anchor"],
            "{case}: {entries:#?}"
        );
        assert_eq!(entries[1]["body"]["found"], case, "{entries:#?}");
        assert_eq!(entries[1]["body"]["anchored"], first.len());
        assert_eq!(entries[1]["body"]["blake3"], hash(&first));
        assert_eq!(entries[2]["body"]["generation"], 1);
        assert_eq!(entries[2]["body"]["from"], 0);
        assert_eq!(entries[2]["body"]["blake3"], hash(&now));
        let out = s.verify();
        assert_eq!(out.status.code(), Some(1), "{case}: {}", stdout(&out));
        assert!(
            stdout(&out).contains(&format!("entry {} anchored", entries[0]["seq"])),
            "{case}: {}",
            stdout(&out)
        );
        assert!(
            stdout(&out).contains("transcript_break"),
            "{}",
            stdout(&out)
        );
    }
}

#[test]
fn a_subagent_transcript_is_anchored_and_found_again_at_the_sessions_end() {
    let s = Scene::new();
    append(&s.transcript(), &lines(0..10));
    let agent = "a931bbd0a2835d51a";
    std::fs::create_dir_all(s.agent_transcript(agent).parent().expect("parent")).expect("mkdir");
    append(&s.agent_transcript(agent), &lines(0..20));
    s.hook(
        "SubagentStop",
        json!({"agent_id": agent, "agent_type": "general-purpose", "agent_transcript_path": s.agent_transcript(agent), "stop_hook_active": false}),
    );
    // A second subagent no hook named, and more in the first.
    let other = "b0000000000000001";
    append(&s.agent_transcript(other), &lines(0..5));
    append(&s.agent_transcript(agent), &lines(20..30));
    s.hook("SessionEnd", json!({"reason": "other"}));
    let anchors = s.transcript_entries();
    let paths: Vec<(String, u64)> = anchors
        .iter()
        .map(|a| {
            (
                a["body"]["agent_id"].as_str().unwrap_or("main").to_string(),
                a["body"]["bytes"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(
        paths,
        [
            ("main".to_string(), lines(0..10).len() as u64),
            (agent.to_string(), lines(0..20).len() as u64),
            (agent.to_string(), lines(0..30).len() as u64),
            (other.to_string(), lines(0..5).len() as u64),
        ],
        "{anchors:#?}"
    );
    let out = s.verify();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert_eq!(stdout(&out).matches("holds all").count(), 3);
}

/// Each bound stops the reading where it says, with one gap entry, and the
/// next hook goes on from there (for the per-hook bounds) or nothing more
/// is read (for the per-log ones).
#[test]
fn each_bound_stops_reading_with_a_gap() {
    let data = lines(0..2000);
    let len = data.len() as u64;
    assert!(len > 3 * 16_384);

    // Bytes per hook: 16 KiB at a time, each hook going on.
    let mut s = Scene::new();
    s.limits = Some("hook_bytes=16384".into());
    append(&s.transcript(), &data);
    let hooks = len.div_ceil(16_384);
    for _ in 0..hooks {
        s.hook("Stop", json!({}));
    }
    let entries = s.transcript_entries();
    let anchors: Vec<u64> = entries
        .iter()
        .filter(|e| e["kind"] == "transcript_anchor")
        .map(|e| e["body"]["bytes"].as_u64().unwrap_or(0))
        .collect();
    let expected: Vec<u64> = (1..=hooks).map(|k| (k * 16_384).min(len)).collect();
    assert_eq!(anchors, expected);
    let gaps: Vec<&Value> = entries
        .iter()
        .filter(|e| e["kind"] == "transcript_gap")
        .collect();
    assert_eq!(gaps.len() as u64, hooks - 1);
    assert!(
        gaps.iter()
            .all(|g| g["body"]["reason"] == "hook_bytes" && g["body"]["size"] == len)
    );
    assert_eq!(s.verify().status.code(), Some(0));

    // Bytes per log: once spent, one gap, and nothing more, ever.
    let mut s = Scene::new();
    s.limits = Some("hook_bytes=16384,session_bytes=20000".into());
    append(&s.transcript(), &data);
    for _ in 0..4 {
        s.hook("Stop", json!({}));
    }
    let got: Vec<(String, Value)> = s
        .transcript_entries()
        .iter()
        .map(|e| {
            (
                e["kind"].as_str().unwrap_or("?").to_string(),
                e["body"]["reason"].clone(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("transcript_anchor".to_string(), Value::Null),
            ("transcript_gap".to_string(), json!("hook_bytes")),
            ("transcript_anchor".to_string(), Value::Null),
            ("transcript_gap".to_string(), json!("session_bytes")),
        ]
    );

    // Time per hook: none left, so nothing is read; the gap says so.
    let mut s = Scene::new();
    s.limits = Some("hook_ms=0".into());
    append(&s.transcript(), &data);
    s.hook("Stop", json!({}));
    let entries = s.transcript_entries();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["body"]["reason"], "hook_time");
    assert_eq!(entries[0]["body"]["anchored"], 0);

    // Files per log: the second file is not anchored, said once.
    let mut s = Scene::new();
    s.limits = Some("files=1".into());
    append(&s.transcript(), &data[..100]);
    let agents = ["a1", "a2"];
    for agent in agents {
        std::fs::create_dir_all(s.agent_transcript(agent).parent().expect("parent"))
            .expect("mkdir");
        append(&s.agent_transcript(agent), &data[..50]);
        s.hook(
            "SubagentStop",
            json!({"agent_id": agent, "agent_transcript_path": s.agent_transcript(agent)}),
        );
    }
    let got: Vec<(String, Value)> = s
        .transcript_entries()
        .iter()
        .map(|e| {
            (
                e["kind"].as_str().unwrap_or("?").to_string(),
                e["body"]["reason"].clone(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("transcript_anchor".to_string(), Value::Null),
            ("transcript_gap".to_string(), json!("files")),
        ]
    );
}

/// Hooks anchoring at once queue on the state's lock: every anchor starts
/// where the one before ended, so no byte is hashed twice (guards the
/// `lock()` in `transcript::anchor`).
#[test]
fn concurrent_hooks_hash_each_byte_once() {
    let s = Scene::new();
    append(&s.transcript(), &lines(0..10));
    std::thread::scope(|scope| {
        for round in 0..6 {
            let s = &s;
            scope.spawn(move || {
                for i in 0..3 {
                    append(
                        &s.transcript(),
                        &lines(100 * round + 10 * i..100 * round + 10 * i + 10),
                    );
                    s.hook(
                        "PostToolUse",
                        json!({"tool_name": "Bash", "tool_input": {}}),
                    );
                }
            });
        }
    });
    let anchors: Vec<(u64, u64)> = s
        .transcript_entries()
        .iter()
        .filter(|e| e["kind"] == "transcript_anchor")
        .map(|e| {
            (
                e["body"]["from"].as_u64().unwrap_or(0),
                e["body"]["bytes"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert!(!anchors.is_empty());
    for pair in anchors.windows(2) {
        assert_eq!(pair[1].0, pair[0].1, "{anchors:?}");
    }
    assert_eq!(s.verify().status.code(), Some(0));
}
