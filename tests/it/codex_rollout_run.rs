//! Codex's rollout anchored into the run's chain under `nd7 run`
//! (ADR-0054), attacked by a prompt-injected agent: the chain's and the
//! anchoring's locks, the anchoring state's size, a session id that walks
//! out of the rollouts' layout. A script named `claude` stands in for the
//! agent (so the run registers its hooks) and sends Codex's hooks as
//! `nd7 record --agent codex --run-hook`. (`codex_rollout.rs` holds the
//! rollout outside `nd7 run`, `transcript_run.rs` Claude Code's transcript
//! under it.)
#![cfg(target_os = "linux")]

use serde_json::Value;

use crate::runs::*;
use crate::world::*;

const SID: &str = "01a22ef1-63ed-77e0-99ae-cbf4bcd01d2c";

/// Writes `proj/claude`: answers `--version` as Claude Code does, and
/// otherwise runs `body` with `$LOG` (the run's log directory, read-only
/// inside), `$T` (the rollout, as the agent sees it) and `codex_hook EVENT`
/// at hand; runs it under `nd7 run`.
fn codex_run(w: &World, rollout_inside: &str, body: &str) {
    let path = w.proj().join("claude");
    let script = format!(
        r#"#!/bin/bash
[ "$1" = --version ] && {{ echo "2.1.197 (Claude Code)"; exit 0; }}
ND7='{ND7}'
HOME_DIR='{home}'
T='{rollout_inside}'
LOG=$(ls -d "$HOME_DIR"/.local/state/nd7/sessions/run-*)
codex_hook() {{
  printf '{{"session_id":"%s","transcript_path":"%s","cwd":"%s","hook_event_name":"%s","model":"gpt-5.5"}}' \
    "${{S:-{SID}}}" "${{TP:-$T}}" "$PWD" "$1" | "$ND7" record --agent codex --run-hook
}}
export -f codex_hook; export ND7 T
{body}
"#,
        home = w.acct.display(),
    );
    std::fs::write(&path, script).expect("write the stand-in");
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let out = w
        .nd7(&["run", &path.display().to_string()])
        .output()
        .expect("nd7 run");
    assert!(out.status.success(), "{}", text(&out.stderr));
}

fn hook_events(chain: &[Value]) -> Vec<String> {
    chain
        .iter()
        .filter(|e| e["source"] == "intent:codex")
        .filter_map(|e| e["body"]["hook_event_name"].as_str().map(str::to_string))
        .collect()
}

// The chain's append lock and the anchoring state's lock lay in the log's
// directory (`<log>/lock`, `<log>/transcript/lock`), readable inside the
// floor (read-only, not hidden), and `flock` needs no more than a
// descriptor open for reading. The agent took the chain's lock and held
// it: every append the run makes waited (hook entries, `exec`,
// `exec_end`), the hook's recorder gave up after its 30 s, and what
// happened meanwhile went unrecorded. Guards `session_log::lock_place`
// and `locks_dir` in the floor's unreadable set (ADR-0066): with the locks
// back beside the log, the agent holds one and the list it leaves names it.
#[test]
fn an_agent_cannot_hold_a_lock_of_its_chain() {
    let w = World::new();
    let rel = format!(".codex/sessions/2026/12/01/rollout-2026-12-01T00-11-41-{SID}.jsonl");
    let inside = w.in_home(&rel);
    let outside = w.home().join(&rel);
    std::fs::create_dir_all(outside.parent().expect("day")).expect("mkdir");
    std::fs::write(&outside, b"{\"type\":\"session_meta\"}\n").expect("write");
    // As an earlier session (a hook outside `nd7 run`) leaves them: the
    // floor's rules cover what exists when it is built.
    for which in ["chain", "transcript"] {
        let dir = w.home().join(".local/state/nd7/locks").join(which);
        std::fs::create_dir_all(dir).expect("mkdir");
    }
    codex_run(
        &w,
        &inside,
        &r#"codex_hook SessionStart
STATE="$HOME_DIR/.local/state/nd7"
ID=$(basename "$LOG")
held=""
n=10
for l in "$LOG/lock" "$LOG/transcript/lock" "$STATE/locks/chain/$ID" "$STATE/locks/transcript/$ID" \
         "$STATE/locks/chain/$SID" "$STATE/locks/transcript/$SID"; do
  n=$((n+1))
  if eval "exec $n<\"\$l\"" 2>/dev/null && flock -x -n $n; then held="$held $l"; fi
done
echo "$held" > held.list
codex_hook Stop
grep -c '"hook_event_name":"Stop"' "$LOG"/events.ndjson > held.rc
"#
        .replace("$SID", SID),
    );
    let held = std::fs::read_to_string(w.proj().join("held.list")).expect("the script ran");
    assert_eq!(held.trim(), "", "the agent holds a lock of its chain");
    let seen = std::fs::read_to_string(w.proj().join("held.rc")).expect("the script ran");
    assert_eq!(
        seen.trim(),
        "1",
        "the hook's entry was in when it came back"
    );
    let chains = run_chains(&w);
    assert_eq!(chains.len(), 1);
    assert_eq!(hook_events(&chains[0]), ["SessionStart", "Stop"]);
}

// A lock held outside the floor (another hook stuck, a reader paused)
// does not hold an anchoring hook for longer than its budget: the hook's
// entry goes in with a gap naming the lock. Guards the bounded wait in
// `Ctx::anchor` (`lock_by`, ADR-0055): with `lock.lock()` back, the
// recorder gives up on the door's answer (after its own 30 s) with the
// entry not yet in the log.
#[test]
fn a_held_anchoring_lock_costs_a_gap_not_the_hooks_entry() {
    let w = World::new();
    let rel = format!(".codex/sessions/2026/12/01/rollout-2026-12-01T00-11-41-{SID}.jsonl");
    let inside = w.in_home(&rel);
    let outside = w.home().join(&rel);
    std::fs::create_dir_all(outside.parent().expect("day")).expect("mkdir");
    std::fs::write(&outside, b"{\"type\":\"session_meta\"}\n").expect("write");
    let locks = w.home().join(".local/state/nd7/locks/transcript");
    let locked = w.proj().join("locked");
    let release = w.proj().join("released");
    let holder = {
        let (locks, locked, release) = (locks.clone(), locked.clone(), release.clone());
        std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            let lock = loop {
                let found = std::fs::read_dir(&locks)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .find(|e| e.file_name().to_string_lossy().starts_with("run-"));
                if let Some(e) = found {
                    break std::fs::File::open(e.path()).expect("open the lock");
                }
                assert!(std::time::Instant::now() < deadline, "no run lock appeared");
                std::thread::sleep(std::time::Duration::from_millis(20));
            };
            lock.lock().expect("flock");
            std::fs::write(&locked, b"").expect("say so");
            while !release.exists() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        })
    };
    codex_run(
        &w,
        &inside,
        r#"codex_hook SessionStart
for i in $(seq 1 500); do [ -e locked ] && break; sleep 0.02; done
codex_hook Stop
grep -c '"hook_event_name":"Stop"' "$LOG"/events.ndjson > held.rc
: > released
"#,
    );
    std::fs::write(&release, b"").expect("release");
    holder.join().expect("the holder");
    let seen = std::fs::read_to_string(w.proj().join("held.rc")).expect("the script ran");
    assert_eq!(
        seen.trim(),
        "1",
        "the hook's entry was in when it came back, the lock still held"
    );
    let chains = run_chains(&w);
    assert_eq!(chains.len(), 1);
    assert_eq!(hook_events(&chains[0]), ["SessionStart", "Stop"]);
    let gap = chains[0]
        .iter()
        .filter(|e| e["kind"] == "transcript_gap")
        .map(|e| e["body"]["detail"].to_string())
        .collect::<Vec<_>>();
    assert!(
        gap.iter().any(|d| d.contains("lock")),
        "the held lock is written down: {gap:?}"
    );
}

// A payload naming a rollout nd7 will not open is written down once per
// name, and the names were kept in the anchoring state (`log.json`),
// which every anchoring hook reads and rewrites whole: an agent naming a
// new long path at each hook made that file, and the work of every hook
// after, grow without bound (each hook rewriting all the names before
// it). Guards the digest and the cap of `path_gap`'s notes
// (`PATH_NOTES`): without them `log.json` holds every name.
#[test]
fn bogus_rollout_names_do_not_grow_the_anchoring_state() {
    let state = crate::common::State::new();
    let home = tempfile::tempdir().expect("tempdir");
    let long = "x".repeat(2000);
    let hooks = 600;
    for n in 0..hooks {
        let payload = serde_json::json!({
            "session_id": SID,
            "transcript_path": format!("/nowhere/{n}/{long}.jsonl"),
            "cwd": "/tmp",
            "hook_event_name": "Stop",
            "model": "gpt-5.5",
        })
        .to_string();
        let out = crate::common::run_with_stdin(
            state
                .nd7()
                .env("CODEX_HOME", home.path())
                .args(["record", "--agent", "codex"]),
            payload.as_bytes(),
        );
        assert_eq!(out.status.code(), Some(0));
    }
    let log = state.log(SID);
    let gaps = crate::common::entries(&log)
        .into_iter()
        .filter(|e| e["kind"] == "transcript_gap" && e["body"]["reason"] == "path")
        .count();
    assert_eq!(gaps, hooks, "every refused name is still written down");
    let kept = std::fs::metadata(log.dir().join("transcript/log.json"))
        .expect("the anchoring state")
        .len();
    assert!(kept < 32 * 1024, "log.json is {kept} bytes");
}

// Under `nd7 run` (the door anchors whatever session the payload names,
// into the run's chain): a session id that would walk out of the layout
// once put in the rollout's name (`/` and `..`, `..` alone, a NUL), with a
// file where that walk ends and the path built from it as the payload's
// `transcript_path`. Nothing is read: guards `is_name` on the session id
// in `codex_layout::locate` and `session_of` (with both gone, the `..`
// one is read: its name is a plain one).
#[test]
fn a_session_id_that_walks_out_of_the_layout_reads_nothing() {
    let w = World::new();
    let rel = format!(".codex/sessions/2026/12/01/rollout-2026-12-01T00-11-41-{SID}.jsonl");
    let inside = w.in_home(&rel);
    let day = w.home().join(".codex/sessions/2026/12/01");
    std::fs::create_dir_all(day.join("rollout-2026-12-01T00-11-41-x")).expect("mkdir");
    let secret = b"SECRET-KEY-MATERIAL\n";
    std::fs::write(w.home().join(".codex/s.jsonl"), secret).expect("write");
    std::fs::write(day.join("rollout-2026-12-01T00-11-41-...jsonl"), secret).expect("write");
    let day_inside = w.in_home(".codex/sessions/2026/12/01");
    let mut body = String::new();
    for sid in ["x/../../../../../s", "..", "x\\u0000y", "x/y"] {
        let named = format!("{day_inside}/rollout-2026-12-01T00-11-41-{sid}.jsonl");
        body.push_str(&format!(
            "S='{sid}' TP='{named}' codex_hook SessionStart\nS='{sid}' TP='{named}' codex_hook Stop\n"
        ));
    }
    codex_run(&w, &inside, &body);
    let chains = run_chains(&w);
    assert_eq!(chains.len(), 1);
    assert_eq!(hook_events(&chains[0]).len(), 8, "every hook recorded");
    let gaps = chains[0]
        .iter()
        .filter(|e| e["kind"] == "transcript_gap" && e["body"]["reason"] == "path")
        .count();
    assert_eq!(gaps, 4, "each name refused, once");
    let text = serde_json::to_string(&chains[0]).expect("json");
    let hash = blake3::hash(secret).to_hex().to_string();
    assert!(!text.contains(&hash), "a file was read: {text}");
    assert!(
        !chains[0].iter().any(|e| e["kind"] == "transcript_anchor"),
        "nothing anchored: {text}"
    );
}
