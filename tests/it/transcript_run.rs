//! Under `nd7 run`, transcripts are anchored by `nd7 run` itself, outside
//! the floor, when it appends a hook's entry at its door: the hook inside
//! only hands over the payload. A script named `claude` stands in for Claude
//! Code (so the run registers its hooks), writes a transcript where Claude
//! Code would, sends hooks as `nd7 record --run-hook`, and attacks: a
//! payload naming another file, writes to the anchoring state, a rewrite of
//! the anchored prefix, a link to a secret in the transcript's place.
#![cfg(target_os = "linux")]

use serde_json::Value;

use crate::runs::*;
use crate::world::*;

const SID: &str = "0b7f4f7e-5d1c-4a55-9d8e-2a7b1c9e0f11";

/// Writes `proj/claude`: answers `--version` as Claude Code does, and
/// otherwise runs `body` with `hook EVENT [JSON members]` at hand.
fn fake_claude(w: &World, transcript_inside: &str, body: &str) -> String {
    let path = w.proj().join("claude");
    let script = format!(
        r#"#!/bin/bash
[ "$1" = --version ] && {{ echo "2.1.197 (Claude Code)"; exit 0; }}
ND7='{ND7}'
HOME_DIR='{home}'
T='{transcript_inside}'
LOG=$(ls -d "$HOME_DIR"/.local/state/nd7/sessions/run-*)
hook() {{
  printf '{{"session_id":"{SID}","transcript_path":"%s","cwd":"%s","hook_event_name":"%s"%s}}' \
    "${{TP:-$T}}" "$PWD" "$1" "${{2:+,$2}}" | "$ND7" record --run-hook
}}
{body}
"#,
        home = w.acct.display(),
    );
    std::fs::write(&path, script).expect("write the stand-in");
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    path.display().to_string()
}

// Guards the anchoring in `RunLog::hook` (outside the floor, from the run's
// own `transcript/log.json`), the read-only state directory, the layout
// check of a payload's `transcript_path`, and `NOFOLLOW` in `open_beneath`
// for the unconfined `nd7 run`: without the last, nd7 run would hash the
// secret the link points to.
#[test]
fn nd7_run_anchors_from_outside_and_the_agent_can_neither_steer_nor_forge_it() {
    let w = World::new();
    let key = nd7_core::transcript::layout::project_key(&w.proj().display().to_string());
    let rel = format!(".claude/projects/{key}/{SID}.jsonl");
    let inside = w.in_home(&rel);
    let outside = w.home().join(&rel);
    let secret = w.in_home(".ssh/id_ed25519");
    let claude = fake_claude(
        &w,
        &inside,
        &format!(
            r#"mkdir -p "$(dirname "$T")"
printf '{{"n":1}}\n{{"n":2}}\n' > "$T"
hook Stop
printf '{{"n":3}}\n' >> "$T"
TP='{secret}' hook Stop
for f in "$LOG/transcript/file-0.json" "$LOG/transcript/log.json" "$LOG/transcript/lock"; do
  ( echo '{{}}' > "$f" ) 2>/dev/null; echo "write-state:$?"
done
( rm -rf "$LOG/transcript" ) 2>/dev/null; echo "rm-state:$?"
( echo '{{"kind":"transcript_anchor"}}' >> "$LOG/events.ndjson" ) 2>/dev/null; echo "write-log:$?"
printf '{{"n":9}}' 1<> "$T"
hook PostToolUse '"tool_name":"Bash","tool_input":{{}},"tool_response":{{}}'
rm -f "$T" && ln -s '{secret}' "$T"
hook Stop
hook SessionEnd '"reason":"other"'
"#
        ),
    );
    let out = w.nd7(&["run", &claude]).output().expect("nd7 run");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    for line in said.lines() {
        assert!(line.ends_with(":1"), "refused from inside: {said}");
    }
    assert_eq!(said.lines().count(), 5, "{said}");

    let dir = run_chain(&w);
    let all = entries(&dir);
    let ours: Vec<&Value> = all
        .iter()
        .filter(|e| {
            e["kind"]
                .as_str()
                .is_some_and(|k| k.starts_with("transcript_"))
        })
        .collect();
    for e in &ours {
        assert_eq!(e["source"], "exit:nd7", "written by nd7 run: {e}");
        assert_eq!(e["hook_ppid"], Value::Null);
    }
    let summary: Vec<(String, String)> = ours
        .iter()
        .map(|e| {
            let b = &e["body"];
            (
                e["kind"].as_str().unwrap_or("?").to_string(),
                b["reason"]
                    .as_str()
                    .or(b["found"].as_str())
                    .unwrap_or("")
                    .to_string(),
            )
        })
        .collect();
    let expected = [
        ("transcript_anchor", ""),
        ("transcript_gap", "path"),
        ("transcript_anchor", ""),
        ("transcript_break", "rewritten"),
        ("transcript_anchor", ""),
        ("transcript_break", "replaced"),
        // At SessionEnd the link is still there: refused, never read.
        ("transcript_gap", "refused"),
    ];
    assert_eq!(
        summary,
        expected.map(|(a, b)| (a.to_string(), b.to_string())),
        "{ours:#?}"
    );
    let first = b"{\"n\":1}\n{\"n\":2}\n".to_vec();
    let second = [first.clone(), b"{\"n\":3}\n".to_vec()].concat();
    let mut third = second.clone();
    third[..7].copy_from_slice(b"{\"n\":9}");
    let anchors: Vec<&&Value> = ours
        .iter()
        .filter(|e| e["kind"] == "transcript_anchor")
        .collect();
    for (a, bytes) in anchors.iter().zip([&first, &second, &third]) {
        assert_eq!(
            a["body"]["path"],
            inside.as_str(),
            "the derived path, not the payload's"
        );
        assert_eq!(a["body"]["bytes"], bytes.len());
        assert_eq!(a["body"]["blake3"], blake3::hash(bytes).to_hex().as_str());
    }
    assert_eq!(ours[1]["body"]["path"], secret.as_str());
    let secret_hash = blake3::hash(b"SECRET-KEY").to_hex().to_string();
    let log_text = std::fs::read_to_string(dir.join("events.ndjson")).expect("log");
    assert!(
        !log_text.contains(&secret_hash),
        "the secret was never read"
    );
    assert!(
        ours[5]["body"]["detail"]
            .as_str()
            .unwrap_or("")
            .contains("symbolic link")
    );

    // Afterwards: the file on disk holds the third anchor's bytes, so the
    // first anchor is the one it contradicts.
    std::fs::remove_file(&outside).expect("rm the link");
    std::fs::write(&outside, &third).expect("write");
    let v = w
        .nd7(&[
            "verify",
            "--transcript",
            &w.in_home(&format!(
                ".local/state/nd7/sessions/{}",
                dir.file_name().expect("name").to_string_lossy()
            )),
        ])
        .output()
        .expect("verify");
    assert_eq!(
        v.status.code(),
        Some(1),
        "{}{}",
        text(&v.stdout),
        text(&v.stderr)
    );
    assert!(
        text(&v.stdout).contains(&format!(
            "TRANSCRIPT CHANGED: {inside}: entry {} anchored its first {} bytes",
            anchors[0]["seq"],
            first.len()
        )),
        "{}",
        text(&v.stdout)
    );
}

// The unconfined `nd7 run` reads what the agent can arrange under
// ~/.claude: a second name of a secret in the transcript's place, and the
// project's directory (or `projects` itself) re-pointed by a link at a
// directory that holds a file of the right name. Guards the link count
// check and `NOFOLLOW` on the directories in `safe_file::open_beneath`
// (with either removed, nd7 run hashes the secret into the chain, and
// `nd7 ship` would send it).
#[test]
fn nd7_run_reads_no_secret_through_second_names_or_linked_directories() {
    let w = World::new();
    let key = nd7_core::transcript::layout::project_key(&w.proj().display().to_string());
    let rel = format!(".claude/projects/{key}/{SID}.jsonl");
    let inside = w.in_home(&rel);
    let outside = w.home().join(&rel);
    std::fs::create_dir_all(outside.parent().expect("parent")).expect("mkdir");
    // A second name of the key, made before the session (the floor may
    // not let the agent make one; nd7 must not rely on that).
    std::fs::hard_link(w.home().join(".ssh/id_ed25519"), &outside).expect("ln");
    // A directory the agent cannot read, holding a file named as the
    // session's transcript.
    let hidden = w.home().join(".hidden");
    std::fs::create_dir_all(hidden.join("projects").join(&key)).expect("mkdir");
    std::fs::write(hidden.join(format!("{SID}.jsonl")), "HIDDEN-ONE\n").expect("write");
    std::fs::write(
        hidden
            .join("projects")
            .join(&key)
            .join(format!("{SID}.jsonl")),
        "HIDDEN-TWO\n",
    )
    .expect("write");
    let hidden_in = w.in_home(".hidden");
    let projects_in = w.in_home(".claude/projects");
    let claude = fake_claude(
        &w,
        &inside,
        &format!(
            r#"hook Stop
rm -f "$T"
D=$(dirname "$T")
rm -rf "$D" && ln -s '{hidden_in}' "$D"; echo "link-dir:$?"
hook Stop
rm -f "$D" && mv '{projects_in}' '{projects_in}.old' && ln -s '{hidden_in}/projects' '{projects_in}'; echo "link-projects:$?"
hook SessionEnd '"reason":"other"'
"#
        ),
    );
    let out = w.nd7(&["run", &claude]).output().expect("nd7 run");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(said.contains("link-dir:0"), "{said}");
    assert!(said.contains("link-projects:0"), "{said}");

    let dir = run_chain(&w);
    let ours: Vec<Value> = entries(&dir)
        .into_iter()
        .filter(|e| {
            e["kind"]
                .as_str()
                .is_some_and(|k| k.starts_with("transcript_"))
        })
        .collect();
    assert!(
        ours.iter().all(|e| e["kind"] == "transcript_gap"),
        "nothing anchored: {ours:#?}"
    );
    let details: Vec<&str> = ours
        .iter()
        .map(|e| e["body"]["detail"].as_str().unwrap_or(""))
        .collect();
    assert!(details[0].contains("hard links"), "{details:?}");
    assert!(
        details[1..].iter().all(|d| d.contains("symbolic link")),
        "{details:?}"
    );
    assert_eq!(details.len(), 3, "{details:?}");
    let log_text = std::fs::read_to_string(dir.join("events.ndjson")).expect("log");
    for secret in [&b"SECRET-KEY"[..], b"HIDDEN-ONE\n", b"HIDDEN-TWO\n"] {
        let hash = blake3::hash(secret).to_hex().to_string();
        assert!(!log_text.contains(&hash), "a secret was read: {log_text}");
    }
}
