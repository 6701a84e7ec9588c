//! End to end with the real Codex CLI: `nd7 setup --agent codex`, the trust
//! step, a scripted session played by a local Responses API, real hooks
//! calling the real `nd7 record --agent codex`, real tools touching a
//! scratch project; then nd7's log against what Codex fired, the outcomes
//! against what the tools did, the rollout anchored in the chain, and
//! `nd7 verify` (with `--transcript`, the rollout held against its anchors).

use std::collections::BTreeMap;

use serde_json::Value;

use super::codex::{self, Workspace};
use super::mock_responses::{Item, MockResponses};
use crate::common::*;

const PATCH: &str =
    "*** Begin Patch\n*** Update File: note.txt\n@@\n-hello\n+hello, patched\n*** End Patch\n";

fn sessions(w: &Workspace) -> Vec<String> {
    match std::fs::read_dir(w.state().join("nd7/sessions")) {
        Ok(dir) => dir
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    }
}

fn describe(out: &std::process::Output) -> String {
    format!(
        "codex exited {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// (event, call id) of a payload or of an entry's body, for comparing what
/// Codex fired with what nd7 recorded.
fn fired(payload: &Value) -> (String, String) {
    (
        payload["hook_event_name"]
            .as_str()
            .unwrap_or("?")
            .to_string(),
        payload["tool_use_id"].as_str().unwrap_or("").to_string(),
    )
}

#[test]
fn a_codex_session_is_recorded_whole_with_failures_marked_and_verifies() {
    let codex = codex::install(&codex::version());
    let api = MockResponses::start(vec![
        // The first run, before the trust step.
        vec![Item::Message("Nothing to do.".into())],
        // The second, trusted.
        vec![Item::Shell("echo hello > note.txt".into())],
        vec![Item::Shell("echo failing; exit 3".into())],
        vec![
            Item::Shell("echo one > a.txt".into()),
            Item::Shell("echo two > b.txt".into()),
        ],
        vec![Item::Patch(PATCH.into())],
        vec![Item::ShellEscalated("touch ../outside.txt".into())],
        vec![Item::Message("All done.".into())],
    ]);
    let w = Workspace::new(&codex, &api.url);
    let setup = w.nd7(&["setup", "--agent", "codex"]);
    assert!(setup.status.success(), "{}", stderr(&setup));
    assert!(stderr(&setup).contains("/hooks"), "{}", stderr(&setup));

    // Untrusted, Codex runs none of nd7's hooks, and doctor says so.
    let doctor = stdout(&w.nd7(&["doctor"]));
    assert!(
        doctor.contains("FAIL codex-trust 14 of nd7's 14 hooks will not run"),
        "{doctor}"
    );
    let first = w.exec("say nothing");
    assert!(first.status.success(), "{}", describe(&first));
    assert_eq!(api.turns_played(), 1);
    assert!(sessions(&w).is_empty(), "untrusted hooks recorded nothing");

    // The trust step, as /hooks does it. The hash Codex wants for each of
    // nd7's hooks is the one doctor computes: once trusted, doctor agrees.
    w.add_witness();
    let listed = w.trust_all();
    let ours = listed
        .iter()
        .filter(|h| {
            h["command"]
                .as_str()
                .is_some_and(nd7_core::setup::codex_merge::is_nd7_command)
        })
        .count();
    assert_eq!(ours, 14, "{listed:?}");
    let doctor = stdout(&w.nd7(&["doctor"]));
    assert!(
        doctor.contains("ok   codex-trust Codex trusts all 14 of nd7's hooks"),
        "{doctor}"
    );
    assert!(
        doctor.contains("ok   codex   codex-cli 0.171.0"),
        "{doctor}"
    );
    // Asked, the installed Codex knows no event nd7 does not register.
    assert!(
        doctor.contains("ok   codex-hooks 14 of 14 events"),
        "{doctor}"
    );

    let run = w.exec("run the scripted session");
    assert!(run.status.success(), "{}", describe(&run));
    assert_eq!(api.turns_played(), 7, "{}", describe(&run));
    let ids = sessions(&w);
    assert_eq!(ids.len(), 1, "one session recorded: {ids:?}");
    let log = nd7_core::session_log::SessionLog::new(&w.state().join("nd7/sessions"), &ids[0])
        .expect("session id");
    let all = entries(&log);
    // The hooks' entries, and nd7's own: the rollout's anchors.
    let (entries, anchors): (Vec<Value>, Vec<Value>) = all
        .iter()
        .cloned()
        .partition(|e| e["source"] == "intent:codex");
    assert!(!anchors.is_empty());

    // Every event Codex fired is in the log, once, and nothing else.
    let mut witnessed: Vec<(String, String)> = w.witnessed().iter().map(fired).collect();
    let mut recorded: Vec<(String, String)> = entries
        .iter()
        .map(|e| {
            let body = &e["body"];
            fired(if e["kind"] == "hook" {
                &body["raw"]
            } else {
                body
            })
        })
        .collect();
    witnessed.sort();
    recorded.sort();
    assert_eq!(recorded, witnessed);
    // The model requests' two events among them, kept whole.
    for event in ["PreModelRequest", "PostModelRequest"] {
        assert!(
            entries
                .iter()
                .any(|e| e["kind"] == "hook" && e["body"]["raw"]["hook_event_name"] == event),
            "{event}"
        );
    }
    let kinds: Vec<&str> = entries.iter().filter_map(|e| e["kind"].as_str()).collect();
    assert_eq!(kinds.first(), Some(&"session_start"), "{kinds:?}");
    assert_eq!(kinds.get(1), Some(&"prompt"), "{kinds:?}");
    assert_eq!(
        &kinds[kinds.len() - 2..],
        ["turn_end", "session_end"],
        "{kinds:?}"
    );
    assert_eq!(entries[1]["body"]["prompt"], "run the scripted session");

    // The first entry names the agent and its version.
    assert_eq!(entries[0]["body"]["agent"]["name"], "codex");
    assert_eq!(entries[0]["body"]["agent"]["version"], "0.171.0");
    assert_eq!(entries[0]["body"]["agent"]["originator"], "codex_exec");

    // Calls and results, paired by call id: every call the model made is
    // recorded; each one that ran has exactly one result, after it.
    let handed_out = api.call_ids();
    assert_eq!(handed_out.len(), 6);
    let calls: BTreeMap<String, &Value> = entries
        .iter()
        .filter(|e| e["kind"] == "tool_call")
        .map(|e| (e["tool_use_id"].as_str().unwrap_or_default().to_string(), e))
        .collect();
    assert_eq!(calls.keys().cloned().collect::<Vec<_>>(), handed_out);
    let results: Vec<&Value> = entries
        .iter()
        .filter(|e| e["kind"] == "tool_result")
        .collect();
    let result = |id: &str| -> Option<&Value> {
        let found: Vec<&&Value> = results.iter().filter(|r| r["tool_use_id"] == id).collect();
        assert!(found.len() <= 1, "at most one result for {id}");
        found.first().map(|r| **r)
    };
    let expect = [
        (0, true, Some(0)),
        (1, false, Some(3)),
        (2, true, Some(0)),
        (3, true, Some(0)),
        (4, true, None),
    ];
    for (n, ok, code) in expect {
        let id = &handed_out[n];
        let r = result(id).unwrap_or_else(|| panic!("a result for {id}"));
        assert!(
            r["seq"].as_u64() > calls[id]["seq"].as_u64(),
            "result after call {id}"
        );
        assert_eq!(r["body"]["ok"], ok, "{r}");
        assert_eq!(r["body"]["outcome"]["exit_code"].as_i64(), code, "{r}");
    }
    let failed = result(&handed_out[1]).expect("the failing call's result");
    assert_eq!(failed["body"]["outcome"]["status"], "failed");
    assert_eq!(failed["body"]["tool_response"], "failing\n");
    // Codex told the model the same.
    let outputs: BTreeMap<String, String> = api.outputs().into_iter().collect();
    assert!(
        outputs[&handed_out[1]].contains("exited with code 3"),
        "{outputs:?}"
    );
    // The refused call: a call, no result. That is how it reads.
    let refused = &handed_out[5];
    assert_eq!(calls[refused]["body"]["argv"][0], "touch");
    assert!(result(refused).is_none(), "no result for the refused call");
    assert!(!w.home.join("outside.txt").exists());

    // The tools did what the log says.
    assert_eq!(
        std::fs::read_to_string(w.project.join("note.txt")).expect("note.txt"),
        "hello, patched\n"
    );
    assert_eq!(
        std::fs::read_to_string(w.project.join("a.txt")).expect("a"),
        "one\n"
    );
    assert_eq!(
        std::fs::read_to_string(w.project.join("b.txt")).expect("b"),
        "two\n"
    );
    let patch = calls[&handed_out[4]];
    assert_eq!(patch["body"]["tool_name"], "apply_patch");
    assert_eq!(patch["body"]["paths"], serde_json::json!(["note.txt"]));
    assert_eq!(
        calls[&handed_out[0]]["body"]["argv"],
        serde_json::json!(["echo", "hello", ">", "note.txt"])
    );

    // The rollout Codex named is anchored, by nd7 and no one else, where
    // Codex keeps it, and nothing was refused or found changed.
    let rollout = w.witnessed()[0]["transcript_path"]
        .as_str()
        .expect("the rollout's path")
        .to_string();
    let sessions_dir = std::fs::canonicalize(w.codex_home().join("sessions")).expect("sessions");
    assert!(
        rollout.starts_with(&sessions_dir.display().to_string()),
        "{rollout}"
    );
    for a in &anchors {
        assert_eq!(a["source"], "record:nd7", "{a}");
        assert_eq!(a["kind"], "transcript_anchor", "{a}");
        assert_eq!(a["body"]["path"], rollout.as_str(), "{a}");
        assert_eq!(a["body"]["session_id"], ids[0].as_str(), "{a}");
    }
    // An anchor at the session's end covers every completed item.
    let last = anchors.last().expect("an anchor");
    let anchored = last["body"]["bytes"].as_u64().expect("bytes") as usize;
    let text = std::fs::read(&rollout).expect("read the rollout");
    let covered = String::from_utf8_lossy(&text[..anchored]);
    for id in &handed_out[..5] {
        assert!(
            covered.contains(&format!("\"id\":\"{id}\"")),
            "{id} is anchored"
        );
    }

    let verify = w.nd7(&["verify", &ids[0]]);
    assert_eq!(verify.status.code(), Some(0), "{}", stdout(&verify));
    let expected = format!("verified: {} entries, head ", all.len());
    assert!(
        stdout(&verify).starts_with(&expected),
        "{}",
        stdout(&verify)
    );
    let verify = w.nd7(&["verify", "--transcript", &ids[0]]);
    assert_eq!(
        verify.status.code(),
        Some(0),
        "{}{}",
        stdout(&verify),
        stderr(&verify)
    );
    assert!(
        stdout(&verify).contains(&format!(
            "transcript {rollout}: holds all {} anchors",
            anchors.len()
        )),
        "{}",
        stdout(&verify)
    );
}
