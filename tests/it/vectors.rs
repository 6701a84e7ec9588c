//! Known-answer vectors for the log format (tests/vectors, README there).
//!
//! `log/`, `codex/` and `run/` are logs nd7 wrote (Claude Code's session,
//! Codex's, and a run's chain with nd7's own entries), committed with the
//! hashes they must have.
//! This file recomputes them with the `blake3` crate alone, from the grammar in
//! docs/log-format.md, so a change to the hashed bytes, the context string or
//! the chain's rules fails here as well as in `nd7 verify`. `broken/` holds one
//! case per way verification fails, each with an `expect` file giving the exit
//! status and the exact line nd7 prints.

use std::path::{Path, PathBuf};

use nd7_core::session_log::SessionLog;

use crate::common::*;

const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors");
/// The committed logs: the directory under tests/vectors, the session (or
/// run) id its log is named by, and how many entries it has. Claude Code's
/// session, Codex's, and a run's chain with nd7's own `exit:nd7` entries.
const LOGS: [(&str, &str, usize); 3] = [
    ("log", "4dc8a87d-d386-4e43-a1ee-15a0429dcdee", 8),
    ("codex", "01a22ef1-63ed-77e0-99ae-cbf4bcd01d2c", 15),
    ("run", "run-20261201T120000Z-4242-00ab", 7),
];
/// Written here on purpose rather than taken from src/chain.rs.
const SESSION_CONTEXT: &str = "nd7 2026-09 session-log v1 session-id";

/// An `expect` file: `# comment` lines, then `key: value` lines.
struct Expect {
    values: Vec<(String, String)>,
}

impl Expect {
    fn read(path: &Path) -> Expect {
        let text = std::fs::read_to_string(path).expect("expect file");
        let values = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .map(|l| {
                let (k, v) = l.split_once(": ").expect("`key: value`");
                (k.to_string(), v.to_string())
            })
            .collect();
        Expect { values }
    }

    fn get(&self, key: &str) -> &str {
        self.values
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("no {key:?} in the expect file"))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn run_verify(dir: &Path) -> std::process::Output {
    // No state directory: a path target needs none, and none is created.
    std::process::Command::new(env!("CARGO_BIN_EXE_nd7"))
        .arg("verify")
        .arg(dir)
        .env("XDG_STATE_HOME", "/nonexistent-state")
        .output()
        .expect("run nd7 verify")
}

#[test]
fn the_committed_logs_have_their_known_hashes() {
    for (name, session, count) in LOGS {
        let dir = Path::new(VECTORS).join(name).join(session);
        let expect = Expect::read(&Path::new(VECTORS).join(name).join("expect"));
        let log = std::fs::read(dir.join("events.ndjson")).expect("the vector log");

        let fingerprint = hex(blake3::derive_key(SESSION_CONTEXT, session.as_bytes()).as_slice());
        assert_eq!(fingerprint, expect.get("fingerprint"), "{name}");

        let mut prev = fingerprint;
        let lines: Vec<&[u8]> = log
            .strip_suffix(b"\n")
            .expect("ends in a newline")
            .split(|&b| b == b'\n')
            .collect();
        assert_eq!(lines.len(), count, "{name}");
        for (seq, line) in lines.iter().enumerate() {
            let text = std::str::from_utf8(line).expect("UTF-8");
            // line = U ",\"hash\":\"" HEX(BLAKE3(U)) "\"}"
            let (u, sealed) = text.split_at(text.len() - 75);
            let hash = hex(blake3::hash(u.as_bytes()).as_bytes());
            assert_eq!(
                sealed,
                format!(",\"hash\":\"{hash}\"}}"),
                "{name} entry {seq}"
            );
            assert_eq!(
                hash,
                expect.get(&format!("entry {seq}")),
                "{name} entry {seq}"
            );
            // U = "{\"seq\":" SEQ "," … ",\"prev\":\"" HEX(prev) "\""
            assert!(
                u.starts_with(&format!("{{\"seq\":{seq},")),
                "{name} entry {seq}"
            );
            assert!(
                u.ends_with(&format!(",\"prev\":\"{prev}\"")),
                "{name} entry {seq}"
            );
            prev = hash;
        }
        let head = std::fs::read_to_string(dir.join("head")).expect("head");
        assert_eq!(head, format!("{} {prev}\n", count - 1), "{name}");
        assert_eq!(head.trim_end(), expect.get("head"), "{name}");
    }
}

/// The run vector holds nd7's own kinds, each from outside the floor.
#[test]
fn the_run_vector_holds_nd7s_own_entries() {
    let (name, session, _) = LOGS[2];
    let log = std::fs::read_to_string(
        Path::new(VECTORS)
            .join(name)
            .join(session)
            .join("events.ndjson"),
    )
    .expect("the run vector");
    let ours: Vec<(String, String)> = log
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("an entry"))
        .filter(|e| e["source"] == "exit:nd7")
        .map(|e| {
            (
                e["kind"].as_str().unwrap_or("").to_string(),
                e["session"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let kinds: Vec<&str> = ours.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(kinds, ["run_start", "exec", "exec_end", "grant", "run_end"]);
    assert!(ours.iter().all(|(_, s)| s == session), "{ours:?}");
}

#[test]
fn nd7_verify_accepts_the_committed_logs() {
    for (name, session, _) in LOGS {
        let dir = Path::new(VECTORS).join(name).join(session);
        let expect = Expect::read(&Path::new(VECTORS).join(name).join("expect"));
        let out = run_verify(&dir);
        assert_eq!(
            out.status.code(),
            Some(expect.get("status").parse().expect("a status")),
            "{name}: {}{}",
            stdout(&out),
            stderr(&out)
        );
        assert_eq!(
            stdout(&out).lines().next(),
            Some(expect.get("stdout")),
            "{name}: {}",
            stdout(&out)
        );
        assert!(!dir.join("lock").exists(), "{name}: verify creates nothing");
    }
    // The run's chain is reconciled, as every run's that registered the hooks.
    let (name, session, _) = LOGS[2];
    let out = run_verify(&Path::new(VECTORS).join(name).join(session));
    assert!(
        stdout(&out).contains("reconciled: every Bash call has its command through the exit, and every command its call"),
        "{}",
        stdout(&out)
    );
}

/// The session directory inside a case directory: its one subdirectory.
fn session_dir(case: &Path) -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(case)
        .expect("case directory")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(dirs.len(), 1, "{}: one session directory", case.display());
    dirs.remove(0)
}

#[test]
fn every_broken_vector_fails_as_its_expect_file_says() {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(Path::new(VECTORS).join("broken"))
        .expect("broken vectors")
        .map(|e| e.expect("entry").path())
        .collect();
    cases.sort();
    assert!(cases.len() >= 17, "{} cases", cases.len());
    for case in cases {
        let name = case
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        let expect = Expect::read(&case.join("expect"));
        let dir = session_dir(&case);
        let status: i32 = expect.get("status").parse().expect("a status");
        let (stream, wanted) = expect
            .values
            .iter()
            .find(|(k, _)| k == "stdout" || k == "stderr")
            .expect("an output line");
        let wanted = wanted.replace("{dir}", &dir.display().to_string());

        let out = run_verify(&dir);
        assert_eq!(
            out.status.code(),
            Some(status),
            "{name}: {}{}",
            stdout(&out),
            stderr(&out)
        );
        let got = if stream == "stdout" {
            stdout(&out)
        } else {
            stderr(&out)
        };
        assert_eq!(got.lines().next(), Some(wanted.as_str()), "{name}");
        assert!(!got.contains("verified:"), "{name}: {got}");

        // The library says the same, however the walk is split.
        let log = SessionLog::at_path(&dir).expect("a session path");
        for parts in 1..=4 {
            let err = log.verify_in(parts).expect_err(&name);
            assert_eq!(
                status == 2,
                err.is_unchecked(),
                "{name}: {err} in {parts} parts"
            );
            let line = match status {
                1 => format!("FAILED: {err}"),
                _ => format!("nd7 verify: {err}"),
            };
            assert_eq!(line, wanted, "{name} in {parts} parts");
        }
    }
}
