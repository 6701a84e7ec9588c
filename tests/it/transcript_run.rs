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
    // A second name of a secret, made before the session (the floor may
    // not let the agent make one; nd7 must not rely on that). Not a
    // credential store's file: a second name of one stops `nd7 run` before
    // anything starts (ADR-0095); the anchoring refuses every second name.
    let kept = w.home().join("kept-secret");
    std::fs::write(&kept, "SECRET-KEY").expect("write");
    std::fs::hard_link(&kept, &outside).expect("ln");
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

/// One `ln` of the transcript (a second name, which the anchoring refuses so
/// that it never reads a secret through one) turns every later anchor into a
/// `refused` gap, SessionEnd's too; the agent then rewrites what follows the
/// last anchor and removes the second name. `nd7 verify --transcript` said
/// "holds all 1 anchors" and exited 0, with the stopped anchoring only in a
/// note. Now the file's summary says how much lies past its last anchor and
/// how many gaps it has, and a refused (or unreadable) gap after the last
/// anchor is TRANSCRIPT NOT COVERED, exit 2: the file cannot be vouched for.
///
/// Guards `stopped` in `transcript_cmds::verify` (bin/nd7).
#[test]
fn a_second_name_that_stops_the_anchoring_is_not_a_clean_transcript() {
    let w = World::new();
    let key = nd7_core::transcript::layout::project_key(&w.proj().display().to_string());
    let rel = format!(".claude/projects/{key}/{SID}.jsonl");
    let inside = w.in_home(&rel);
    let claude = fake_claude(
        &w,
        &inside,
        r#"mkdir -p "$(dirname "$T")"
printf '{"n":1}\n' > "$T"
hook Stop
ln "$T" "$T.second"; echo "ln:$?"
printf '{"n":2}\n' >> "$T"
hook Stop
printf '{"n":3,"rewritten":true}\n' >> "$T"
hook SessionEnd '"reason":"other"'
rm -f "$T.second"
"#,
    );
    let out = w.nd7(&["run", &claude]).output().expect("nd7 run");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("ln:0"), "{}", text(&out.stdout));
    let dir = run_chain(&w);
    let gaps: Vec<Value> = entries(&dir)
        .into_iter()
        .filter(|e| e["kind"] == "transcript_gap")
        .collect();
    // The second name is seen at the next Stop as another file in the
    // transcript's place (a break), and the new generation is refused.
    let kinds: Vec<String> = entries(&dir)
        .iter()
        .filter(|e| {
            e["kind"]
                .as_str()
                .is_some_and(|k| k.starts_with("transcript_"))
        })
        .map(|e| {
            format!(
                "{} {}",
                e["kind"],
                e["body"]["reason"]
                    .as_str()
                    .or(e["body"]["found"].as_str())
                    .unwrap_or("")
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "\"transcript_anchor\" ",
            "\"transcript_break\" replaced",
            "\"transcript_gap\" refused"
        ],
        "{gaps:#?}"
    );
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
    let report = text(&v.stdout);
    assert_eq!(v.status.code(), Some(2), "{report}{}", text(&v.stderr));
    let size = "{\"n\":1}\n{\"n\":2}\n{\"n\":3,\"rewritten\":true}\n".len();
    let tail = size - "{\"n\":1}\n".len();
    assert!(
        report.contains(&format!(
            "transcript {inside}: holds all 1 anchors (the first 8 of its {size} bytes; {tail} after the last anchor, anchored by nothing; 1 gap recorded)"
        )),
        "{report}"
    );
    assert!(
        report.contains(&format!(
            "TRANSCRIPT NOT COVERED: {inside}: the anchoring stopped at entry {} (refused: ",
            gaps[0]["seq"]
        )),
        "{report}"
    );
}

/// 200 anchoring hooks at once through the door, each after a line of its
/// own was appended to the transcript: every hook's entry is in the chain,
/// once; the anchors, taken in turn under the transcript's lock, each pick
/// up where the one before ended, none is a break; and the file holds them
/// all. A hook whose 400 ms ran out while it read, or while it waited for
/// the lock (a loaded machine: 200 processes on two cores), may leave a gap
/// that says so (the next one goes on), never a wrong anchor. Guards the
/// transcript lock in `anchor::at_door` (without it two hooks resume from
/// the same state and the second anchor's `from` repeats the first's).
#[test]
fn two_hundred_anchoring_hooks_at_once_lose_nothing_and_agree() {
    // The gap of a hook that gave up waiting for the transcript's lock: it
    // read nothing, so it cannot have anchored wrongly.
    fn waited_past_its_time(gap: &Value) -> bool {
        gap["body"]["reason"] == "unreadable"
            && gap["body"]["anchored"] == 0
            && gap["body"]["detail"].as_str().is_some_and(|d| {
                d.ends_with("past this hook's time for anchoring; nothing was read")
            })
    }
    let w = World::new();
    let key = nd7_core::transcript::layout::project_key(&w.proj().display().to_string());
    let rel = format!(".claude/projects/{key}/{SID}.jsonl");
    let inside = w.in_home(&rel);
    let claude = fake_claude(
        &w,
        &inside,
        r#"mkdir -p "$(dirname "$T")"
: > "$T"
for i in $(seq 200); do
  ( printf '{"n":%d}\n' "$i" >> "$T"; hook Stop ) &
done
wait
hook SessionEnd '"reason":"other"'
"#,
    );
    let out = w.nd7(&["run", &claude]).output().expect("nd7 run");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let dir = run_chain(&w);
    let e = entries(&dir);
    assert_eq!(
        e.iter().filter(|x| x["kind"] == "turn_end").count(),
        200,
        "every hook once"
    );
    let size = std::fs::metadata(w.home().join(&rel))
        .expect("transcript")
        .len();
    let anchors: Vec<&Value> = e
        .iter()
        .filter(|x| x["kind"] == "transcript_anchor")
        .collect();
    let mut at = 0;
    for a in &anchors {
        assert_eq!(
            a["body"]["from"], at,
            "each anchor goes on from the last: {a}"
        );
        assert_eq!(a["body"]["generation"], 0, "{a}");
        at = a["body"]["bytes"].as_u64().expect("bytes");
    }
    assert_eq!(at, size, "SessionEnd anchored the whole file");
    let others: Vec<&Value> = e
        .iter()
        .filter(|x| {
            x["kind"] == "transcript_break"
                || x["kind"] == "transcript_gap"
                    && x["body"]["reason"] != "hook_time"
                    && !waited_past_its_time(x)
        })
        .collect();
    assert!(others.is_empty(), "{others:#?}");
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
    assert_eq!(v.status.code(), Some(0), "{}", text(&v.stdout));
    assert!(
        text(&v.stdout).contains(&format!("holds all {} anchors", anchors.len())),
        "{}",
        text(&v.stdout)
    );
}

const CODEX_SID: &str = "01a22ef1-63ed-77e0-99ae-cbf4bcd01d2c";

/// `nd7 run` of a stand-in that sends Codex's hooks (`codex_hook EVENT`,
/// naming `$TP` or the rollout) as `nd7 record --agent codex --run-hook`.
/// The floor does not let it write ~/.codex, so the test arranges the
/// files between runs, as the agent's commands could with a grant.
fn codex_run(w: &World, rollout_inside: &str, body: &str) {
    let claude = fake_claude(
        w,
        rollout_inside,
        &format!(
            r#"codex_hook() {{
  printf '{{"session_id":"{CODEX_SID}","transcript_path":"%s","cwd":"%s","hook_event_name":"%s","model":"gpt-5.5"}}' \
    "${{TP:-$T}}" "$PWD" "$1" | "$ND7" record --agent codex --run-hook
}}
{body}
"#
        ),
    );
    let out = w.nd7(&["run", &claude]).output().expect("nd7 run");
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// The `transcript_*` entries of a run chain, as (kind, reason or found).
fn transcript_summary(chain: &[Value]) -> Vec<(String, String)> {
    chain
        .iter()
        .filter(|e| {
            e["kind"]
                .as_str()
                .is_some_and(|k| k.starts_with("transcript_"))
        })
        .map(|e| {
            assert_eq!(e["source"], "exit:nd7", "written by nd7 run: {e}");
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
        .collect()
}

// Codex's hooks under `nd7 run`: the unconfined `nd7 run` anchors the
// rollout at its door, from the Codex home its own environment names
// (`start_run`), only where Codex's layout puts this session's rollout.
// The agent names a secret as its rollout; the rollout becomes a link to
// the secret, a second name of it, a file behind a linked day directory:
// a path gap, then refusals, and the secret is never read. Guards
// `codex_layout::locate` in the door's anchoring, and `NOFOLLOW` and the
// link count in `safe_file::open_beneath` for the rollout.
#[test]
fn nd7_run_anchors_a_codex_rollout_from_outside_and_reads_no_secret() {
    let w = World::new();
    let rel = format!(".codex/sessions/2026/12/01/rollout-2026-12-01T00-11-41-{CODEX_SID}.jsonl");
    let inside = w.in_home(&rel);
    let outside = w.home().join(&rel);
    let day = outside.parent().expect("day").to_path_buf();
    let secret_out = w.home().join("kept-secret");
    let secret = w.in_home(".ssh/id_ed25519");
    std::fs::create_dir_all(&day).expect("mkdir");
    let first = b"{\"type\":\"session_meta\"}\n{\"n\":2}\n".to_vec();
    std::fs::write(&outside, &first).expect("write");
    // Codex's credentials, inside its home.
    std::fs::write(w.home().join(".codex/auth.json"), "CODEX-AUTH\n").expect("write");
    let auth = w.in_home(".codex/auth.json");
    codex_run(
        &w,
        &inside,
        &format!(
            "codex_hook SessionStart\nTP='{secret}' codex_hook Stop\nTP='{auth}' codex_hook Stop\n"
        ),
    );
    // The rollout a link to the secret.
    std::fs::remove_file(&outside).expect("rm");
    std::os::unix::fs::symlink(&secret, &outside).expect("symlink");
    codex_run(&w, &inside, "codex_hook Stop\n");
    // A second name of a secret (not a credential store's file, whose
    // second name would stop `nd7 run` at the start: ADR-0095).
    std::fs::remove_file(&outside).expect("rm");
    std::fs::write(&secret_out, "SECRET-KEY").expect("write");
    std::fs::hard_link(&secret_out, &outside).expect("ln");
    codex_run(&w, &inside, "codex_hook Stop\n");
    // The day's directory a link to one holding a file of the right name.
    let hidden = w.home().join(".hidden");
    std::fs::create_dir_all(&hidden).expect("mkdir");
    std::fs::write(
        hidden.join(outside.file_name().expect("name")),
        "HIDDEN-ONE\n",
    )
    .expect("write");
    std::fs::remove_dir_all(&day).expect("rm");
    std::os::unix::fs::symlink(w.in_home(".hidden"), &day).expect("symlink");
    codex_run(&w, &inside, "codex_hook SessionEnd\n");

    let chains = run_chains(&w);
    assert_eq!(chains.len(), 4);
    for chain in &chains {
        let hooks = chain.iter().filter(|e| e["source"] == "intent:codex");
        assert!(hooks.count() >= 1, "the Codex hooks recorded at the door");
    }
    let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
    assert_eq!(
        transcript_summary(&chains[0]),
        [
            pair("transcript_anchor", ""),
            pair("transcript_gap", "path"),
            pair("transcript_gap", "path")
        ]
    );
    for chain in &chains[1..] {
        assert_eq!(
            transcript_summary(chain),
            [pair("transcript_gap", "refused")]
        );
    }
    let body = |chain: &[Value], kind: &str| -> Value {
        chain
            .iter()
            .find(|e| e["kind"] == kind)
            .map(|e| e["body"].clone())
            .expect("entry")
    };
    let anchor = body(&chains[0], "transcript_anchor");
    assert_eq!(anchor["path"], inside.as_str());
    assert_eq!(anchor["bytes"], first.len());
    assert_eq!(anchor["blake3"], blake3::hash(&first).to_hex().as_str());
    assert_eq!(body(&chains[0], "transcript_gap")["path"], secret.as_str());
    let detail = |n: usize| body(&chains[n], "transcript_gap")["detail"].to_string();
    assert!(detail(1).contains("symbolic link"), "{}", detail(1));
    assert!(detail(2).contains("2 names"), "{}", detail(2));
    assert!(detail(3).contains("symbolic link"), "{}", detail(3));
    for secret in [
        &b"SECRET-KEY"[..],
        b"SECRET-KEY\n",
        b"HIDDEN-ONE\n",
        b"CODEX-AUTH\n",
    ] {
        let hash = blake3::hash(secret).to_hex().to_string();
        for chain in &chains {
            let text = serde_json::to_string(chain).expect("json");
            assert!(!text.contains(&hash), "a secret was read: {text}");
        }
    }
}
