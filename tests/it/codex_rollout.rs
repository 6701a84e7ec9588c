//! Codex's rollout file anchored by `nd7 record --agent codex` (outside
//! `nd7 run`), through the real binary, on files laid out as Codex 0.171.0
//! lays them out: the same entries as Claude Code's transcript, `nd7 verify
//! --transcript` holding the rollout against them, and every refusal the
//! transcript has, for a `transcript_path` the agent can forge and a Codex
//! home the agent's commands can rewrite.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::common::*;

const SID: &str = "01a22ef1-63ed-77e0-99ae-cbf4bcd01d2c";
const OTHER: &str = "01a22ef1-0000-77e0-99ae-cbf4bcd01d2c";

/// A scratch home with Codex's layout under it, and a state directory.
struct Scene {
    dir: tempfile::TempDir,
}

impl Scene {
    fn new() -> Scene {
        let scene = Scene {
            dir: tempfile::tempdir().expect("tempdir"),
        };
        std::fs::create_dir_all(scene.day()).expect("mkdir");
        scene
    }

    fn codex_home(&self) -> PathBuf {
        self.dir.path().join("home/.codex")
    }

    fn day(&self) -> PathBuf {
        self.codex_home().join("sessions/2026/12/01")
    }

    fn rollout_of(&self, session: &str) -> PathBuf {
        self.day()
            .join(format!("rollout-2026-12-01T00-11-41-{session}.jsonl"))
    }

    fn rollout(&self) -> PathBuf {
        self.rollout_of(SID)
    }

    fn nd7(&self) -> std::process::Command {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_nd7"));
        cmd.env("XDG_STATE_HOME", self.dir.path().join("state"))
            .env("HOME", self.dir.path().join("home"))
            .env_remove("CODEX_HOME")
            .env_remove("CLAUDE_CONFIG_DIR")
            .env_remove(nd7_core::record::RUN_VARIABLE)
            .env_remove(nd7_core::transcript::LIMITS_VARIABLE);
        cmd
    }

    /// `nd7 record --agent codex` of hook `event` naming `rollout`.
    fn hook_naming(&self, event: &str, rollout: &std::path::Path) {
        let payload = json!({
            "session_id": SID,
            "transcript_path": rollout,
            "cwd": self.dir.path().join("home/proj"),
            "hook_event_name": event,
            "model": "gpt-5.5",
        });
        let out = run_with_stdin(
            self.nd7().args(["record", "--agent", "codex"]),
            payload.to_string().as_bytes(),
        );
        assert!(out.status.success());
        assert_eq!(stdout(&out), "");
    }

    fn hook(&self, event: &str) {
        self.hook_naming(event, &self.rollout());
    }

    fn log(&self) -> nd7_core::session_log::SessionLog {
        nd7_core::session_log::SessionLog::new(&self.dir.path().join("state/nd7/sessions"), SID)
            .expect("session id")
    }

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

    fn log_text(&self) -> String {
        std::fs::read_to_string(self.log().events_path()).expect("log")
    }

    fn verify(&self) -> std::process::Output {
        self.nd7()
            .args(["verify", "--transcript", SID])
            .output()
            .expect("nd7 verify")
    }
}

fn rollout_lines(n: std::ops::Range<usize>) -> Vec<u8> {
    n.flat_map(|i| {
        format!(
            "{{\"timestamp\":\"2026-12-01T00:11:41.{i:03}Z\",\"ordinal\":{i},\"type\":\"event_msg\",\"payload\":{{\"type\":\"token_count\"}}}}\n"
        )
        .into_bytes()
    })
    .collect()
}

fn append(path: &std::path::Path, bytes: &[u8]) {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .and_then(|mut f| f.write_all(bytes))
        .expect("append to the rollout");
}

fn detail(entry: &Value) -> &str {
    entry["body"]["detail"].as_str().unwrap_or_default()
}

#[test]
fn anchors_follow_the_rollout_and_verify_holds_it_against_them() {
    let s = Scene::new();
    append(&s.rollout(), &rollout_lines(0..20));
    s.hook("SessionStart");
    append(&s.rollout(), &rollout_lines(20..60));
    s.hook("PostToolUse");
    // PreToolUse anchors nothing.
    append(&s.rollout(), &rollout_lines(60..61));
    s.hook("PreToolUse");
    s.hook("Stop");
    let t = s.transcript_entries();
    let kinds: Vec<&str> = t.iter().filter_map(|e| e["kind"].as_str()).collect();
    assert_eq!(kinds, ["transcript_anchor"; 3], "{t:#?}");
    let all = std::fs::read(s.rollout()).expect("read");
    let home = std::fs::canonicalize(s.codex_home()).expect("home");
    for a in &t {
        assert_eq!(a["source"], "record:nd7");
        assert_eq!(a["body"]["session_id"], SID);
        assert_eq!(a["body"]["root"], home.display().to_string());
        assert_eq!(a["body"]["path"], s.rollout().display().to_string());
        let n = a["body"]["bytes"].as_u64().expect("bytes") as usize;
        assert_eq!(
            a["body"]["blake3"],
            blake3::hash(&all[..n]).to_hex().to_string()
        );
    }
    assert_eq!(t[2]["body"]["bytes"], all.len() as u64);
    let out = s.verify();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        stdout(&out).contains("holds all 3 anchors"),
        "{}",
        stdout(&out)
    );

    // A rewrite of an anchored line is found, by entry and lines.
    let mut changed = all.clone();
    let at = rollout_lines(0..30).len() + 5;
    changed[at] ^= 1;
    std::fs::write(s.rollout(), &changed).expect("write");
    let out = s.verify();
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("TRANSCRIPT CHANGED"),
        "{}",
        stdout(&out)
    );
    // And the next hook records it as a break and anchors afresh.
    std::fs::write(s.rollout(), rollout_lines(0..5)).expect("write");
    s.hook("Stop");
    let t = s.transcript_entries();
    assert_eq!(t[3]["kind"], "transcript_break", "{t:#?}");
    assert_eq!(t[3]["body"]["found"], "truncated");
    assert_eq!(t[4]["kind"], "transcript_anchor");
    assert_eq!(t[4]["body"]["generation"], 1);
}

/// The payload is the agent's word: a `transcript_path` anywhere but where
/// Codex's layout puts this session's rollout is never opened, however much
/// it looks like one. Each is one `path` gap (written once per name), and
/// nothing of the file reaches the log. Guards `codex_layout::locate` in
/// `transcript::anchor` (without it the secret was anchored, and shipped).
#[test]
fn a_rollout_path_outside_the_sessions_layout_is_not_read() {
    let s = Scene::new();
    let secret_text = "SECRET-CREDENTIAL-8f2a\n";
    let decoys = [
        // Codex's own credentials, beside the sessions directory.
        s.codex_home().join("auth.json"),
        // Another session's rollout.
        s.rollout_of(OTHER),
        // This session's name, in the wrong day.
        s.codex_home()
            .join("sessions/2026/12/02")
            .join(s.rollout().file_name().expect("name")),
        // This session's name, in another Codex home.
        s.dir
            .path()
            .join("other/.codex/sessions/2026/12/01")
            .join(s.rollout().file_name().expect("name")),
        // Through `..`.
        s.day()
            .join("../01")
            .join(s.rollout().file_name().expect("name")),
    ];
    for decoy in &decoys {
        let parent = decoy.parent().expect("parent");
        std::fs::create_dir_all(parent).expect("mkdir");
        if !decoy.exists() {
            std::fs::write(decoy, secret_text).expect("write");
        }
        s.hook_naming("Stop", decoy);
        s.hook_naming("Stop", decoy);
    }
    let t = s.transcript_entries();
    assert_eq!(t.len(), decoys.len(), "{t:#?}");
    for (entry, decoy) in t.iter().zip(&decoys) {
        assert_eq!(entry["kind"], "transcript_gap");
        assert_eq!(entry["body"]["reason"], "path");
        assert_eq!(entry["body"]["path"], decoy.display().to_string());
        assert!(detail(entry).contains("Codex's layout"), "{entry}");
    }
    assert!(!s.log_text().contains("SECRET-CREDENTIAL"));
}

/// A link where the rollout should be (to a file the agent wants read, or
/// a directory on the way), a file with a second name, a FIFO: none is
/// read; each is one gap entry, not repeated at every hook. Guards the
/// `NOFOLLOW` opens and the type and link-count checks in
/// `safe_file::open_beneath`, which the rollout goes through as the
/// transcript does.
#[test]
fn links_second_names_and_fifos_in_place_of_the_rollout_are_refused() {
    let secret_dir = tempfile::tempdir().expect("tmp");
    let secret = secret_dir.path().join("id_ed25519");
    std::fs::write(&secret, "SECRET-KEY\n").expect("write");

    let s = Scene::new();
    std::os::unix::fs::symlink(&secret, s.rollout()).expect("symlink");
    s.hook("Stop");
    s.hook("Stop");
    let t = s.transcript_entries();
    assert_eq!(t.len(), 1, "{t:#?}");
    assert_eq!(t[0]["kind"], "transcript_gap");
    assert_eq!(t[0]["body"]["reason"], "refused");
    assert!(detail(&t[0]).contains("symbolic link"), "{t:#?}");
    assert!(!s.log_text().contains("SECRET-KEY"));

    let s = Scene::new();
    std::fs::hard_link(&secret, s.rollout()).expect("link");
    s.hook("Stop");
    let t = s.transcript_entries();
    assert_eq!(t.len(), 1, "{t:#?}");
    assert_eq!(t[0]["body"]["reason"], "refused");
    assert!(detail(&t[0]).contains("2 names"), "{t:#?}");

    // The day's directory a link to elsewhere.
    let s = Scene::new();
    let elsewhere = s.dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).expect("mkdir");
    std::fs::write(
        elsewhere.join(s.rollout().file_name().expect("name")),
        "SECRET-KEY\n",
    )
    .expect("write");
    std::fs::remove_dir(s.day()).expect("rmdir");
    std::os::unix::fs::symlink(&elsewhere, s.day()).expect("symlink");
    s.hook("Stop");
    let t = s.transcript_entries();
    assert_eq!(t.len(), 1, "{t:#?}");
    assert_eq!(t[0]["body"]["reason"], "refused");
    assert!(detail(&t[0]).contains("symbolic link"), "{t:#?}");
    assert!(!s.log_text().contains("SECRET-KEY"));

    let s = Scene::new();
    let made = std::process::Command::new("mkfifo")
        .arg(s.rollout())
        .status()
        .expect("run mkfifo");
    assert!(made.success(), "mkfifo");
    s.hook("SessionEnd");
    let t = s.transcript_entries();
    assert_eq!(t.len(), 1, "{t:#?}");
    assert!(detail(&t[0]).contains("FIFO"), "{t:#?}");
}

/// A rollout anchored and then swapped for a link (re-pointed between two
/// hooks) is a `replaced` break: the link is not followed, and `nd7 verify`
/// refuses the file rather than holding the link's target against the
/// anchors.
#[test]
fn a_rollout_swapped_for_a_link_between_hooks_is_a_break_and_not_followed() {
    let s = Scene::new();
    append(&s.rollout(), &rollout_lines(0..10));
    s.hook("Stop");
    let copy = s.dir.path().join("copy.jsonl");
    std::fs::copy(s.rollout(), &copy).expect("copy");
    std::fs::remove_file(s.rollout()).expect("rm");
    std::os::unix::fs::symlink(&copy, s.rollout()).expect("symlink");
    s.hook("Stop");
    let t = s.transcript_entries();
    assert_eq!(t.len(), 2, "{t:#?}");
    assert_eq!(t[1]["kind"], "transcript_break");
    assert_eq!(t[1]["body"]["found"], "replaced");
    let out = s.verify();
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(stderr(&out).contains("symbolic link"), "{}", stderr(&out));
}
