//! The real Claude Code's transcripts, anchored: a scripted session with
//! tool calls and a subagent (the Agent tool, its turns scripted apart so it
//! may run beside the main loop, as 2.1.332 runs it), then every anchor held
//! against the files Claude Code left, and the files changed to see
//! `nd7 verify --transcript` name the anchor they contradict.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::*;

/// What the main script asks the subagent; the mock knows its requests by it.
const SUBAGENT_PROMPT: &str = "nd7-e2e-subagent: run one command";

fn main_turns(project: &Path) -> Vec<Vec<Block>> {
    vec![
        vec![
            Block::Text("Let me look.".into()),
            bash("echo first > first.txt && cat first.txt"),
        ],
        vec![Block::Tool(
            "Write",
            json!({"file_path": project.join("notes.md"), "content": "notes\n"}),
        )],
        vec![Block::Tool(
            "Agent",
            json!({"description": "one command", "prompt": SUBAGENT_PROMPT, "subagent_type": "general-purpose"}),
        )],
        vec![Block::Text("All done.".into())],
    ]
}

fn subagent_turns() -> Vec<Vec<Block>> {
    vec![
        vec![bash("echo from-the-subagent")],
        vec![Block::Text("subagent done".into())],
    ]
}

fn with_subagent(turns: Vec<Vec<Block>>) -> MockApi {
    MockApi::start_with_subagent(turns, SUBAGENT_PROMPT, subagent_turns())
}

/// The anchors of one log, by file: (seq, bytes, blake3) in order.
fn anchors_by_file(entries: &[Value]) -> BTreeMap<String, Vec<(u64, u64, String)>> {
    let mut out: BTreeMap<String, Vec<(u64, u64, String)>> = BTreeMap::new();
    for e in entries.iter().filter(|e| e["kind"] == "transcript_anchor") {
        out.entry(e["body"]["path"].as_str().unwrap_or_default().to_string())
            .or_default()
            .push((
                e["seq"].as_u64().unwrap_or_default(),
                e["body"]["bytes"].as_u64().unwrap_or_default(),
                e["body"]["blake3"].as_str().unwrap_or_default().to_string(),
            ));
    }
    out
}

/// Checks what a finished session anchored against the files (seen from
/// outside at `outside(path)`), then changes them and runs `verify`
/// (`nd7 verify --transcript` on the session) after each change.
fn hold_and_tamper(
    entries: &[Value],
    outside: impl Fn(&str) -> PathBuf,
    verify: impl Fn() -> std::process::Output,
) {
    let files = anchors_by_file(entries);
    let session_start = entries
        .iter()
        .find(|e| e["kind"] == "session_start")
        .expect("a session_start");
    let main = session_start["body"]["transcript_path"]
        .as_str()
        .expect("Claude Code names its transcript");
    let subagent_stop = entries
        .iter()
        .find(|e| e["body"]["hook_event_name"] == "SubagentStop")
        .expect("a SubagentStop");
    let agent = subagent_stop["body"]["raw"]["agent_transcript_path"]
        .as_str()
        .expect("the subagent's transcript");
    assert!(files.contains_key(main), "{files:#?}");
    assert!(files.contains_key(agent), "{files:#?}");
    for (path, anchors) in &files {
        let data = std::fs::read(outside(path)).expect("the transcript");
        for (seq, bytes, blake3) in anchors {
            assert_eq!(
                blake3::hash(&data[..*bytes as usize]).to_hex().as_str(),
                blake3,
                "entry {seq} anchors {path}"
            );
        }
        let last = anchors.last().map_or(0, |a| a.1);
        // Measured, and kept: Claude Code has written everything by the
        // time SessionEnd's hooks run, so nothing is left unanchored.
        eprintln!(
            "{path}: {} anchors at {:?}; {} bytes on disk, {} after the last anchor",
            anchors.len(),
            anchors.iter().map(|a| a.1).collect::<Vec<_>>(),
            data.len(),
            data.len() as u64 - last
        );
        assert_eq!(
            last,
            data.len() as u64,
            "{path}: all of it anchored at the end"
        );
    }
    let out = verify();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert_eq!(
        stdout(&out).matches("holds all").count(),
        files.len(),
        "{}",
        stdout(&out)
    );

    let main_path = outside(main);
    let original = std::fs::read(&main_path).expect("read");
    let first = &files[main][0];
    // Appending after the last anchor changes nothing.
    std::fs::write(
        &main_path,
        [original.as_slice(), b"{\"later\":1}\n"].concat(),
    )
    .expect("append");
    assert_eq!(verify().status.code(), Some(0));
    // One byte of the first anchored stretch: the first anchor is named.
    let mut changed = original.clone();
    changed[first.1 as usize / 2] ^= 0x01;
    std::fs::write(&main_path, &changed).expect("write");
    let out = verify();
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let named = format!("TRANSCRIPT CHANGED: {main}: entry {} anchored", first.0);
    assert!(stdout(&out).contains(&named), "{}", stdout(&out));
    // Truncated below it: named too, as truncated.
    std::fs::write(&main_path, &original[..first.1 as usize - 1]).expect("write");
    let out = verify();
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains(&named), "{}", stdout(&out));
    assert!(stdout(&out).contains("truncated"), "{}", stdout(&out));
    std::fs::write(&main_path, &original).expect("restore");
    assert_eq!(verify().status.code(), Some(0));
}

#[test]
fn a_real_sessions_transcripts_are_anchored_and_hold() {
    let s = session_on(claude::Workspace::new(), main_turns, with_subagent);
    assert_eq!(s.api.subagent_turns_played(), subagent_turns().len());
    // As a tool result (2.1.197), or in a notification once the background
    // agent ends (2.1.332).
    assert!(
        s.api
            .requests()
            .iter()
            .any(|r| r["messages"].to_string().contains("subagent done")),
        "the subagent's answer came back to the main loop"
    );
    for e in s.entries.iter().filter(|e| {
        e["kind"]
            .as_str()
            .is_some_and(|k| k.starts_with("transcript_"))
    }) {
        assert_eq!(e["kind"], "transcript_anchor", "no gap or break: {e}");
        assert_eq!(e["source"], "record:nd7");
    }
    assert_clean(&s);
    let verify = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_nd7"))
            .args(["verify", "--transcript", s.log.session_id()])
            .env("XDG_STATE_HOME", &s.run.state)
            .output()
            .expect("nd7 verify --transcript")
    };
    hold_and_tamper(&s.entries, |p: &str| PathBuf::from(p), verify);
}

/// Under `nd7 run` the same anchors are nd7 run's own (`exit:nd7`), in the
/// run's chain.
#[cfg(target_os = "linux")]
#[test]
fn under_nd7_run_nd7_run_anchors_the_real_sessions_transcripts() {
    let world = std::sync::Arc::new(crate::world::World::new());
    let s = session_on(
        claude::Workspace::sandboxed(world.clone()),
        main_turns,
        with_subagent,
    );
    assert_eq!(s.api.subagent_turns_played(), subagent_turns().len());
    let ours: Vec<&Value> = s
        .entries
        .iter()
        .filter(|e| {
            e["kind"]
                .as_str()
                .is_some_and(|k| k.starts_with("transcript_"))
        })
        .collect();
    assert!(!ours.is_empty());
    for e in &ours {
        assert_eq!(e["kind"], "transcript_anchor", "no gap or break: {e}");
        assert_eq!(e["source"], "exit:nd7");
    }
    let acct = world.acct.clone();
    let home = world.home();
    let outside = move |inside: &str| {
        home.join(
            Path::new(inside)
                .strip_prefix(&acct)
                .expect("under the home"),
        )
    };
    let chain = world.in_home(&format!(".local/state/nd7/sessions/{}", s.log.session_id()));
    let verify = || {
        world
            .nd7(&["verify", "--transcript", &chain])
            .output()
            .expect("nd7 verify --transcript")
    };
    hold_and_tamper(&s.entries, outside, verify);
}
