//! Under `nd7 run` the session logs are read-only inside the floor: the
//! hooks' entries reach the log through `nd7 run` (the door), and nd7 keeps
//! its own account of the run beside them (ADR-0025). Every attack here is
//! tried as the ordinary account, by a shell script standing in for the
//! agent, directly and through the exit (`$EXEC`, as `nd7 hook-prefix`
//! rewrites Bash commands).
#![cfg(target_os = "linux")]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::world::*;

fn lines(out: &Output) -> Vec<String> {
    text(&out.stdout).lines().map(str::to_string).collect()
}

/// The logs' directory as the test sees it.
fn logs(w: &World) -> PathBuf {
    w.home().join(".local/state/nd7/sessions")
}

/// The one run chain the world's sessions wrote.
fn run_chain(w: &World) -> PathBuf {
    let runs: Vec<PathBuf> = std::fs::read_dir(logs(w))
        .expect("the logs' directory")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("run-"))
        })
        .collect();
    assert_eq!(runs.len(), 1, "one run chain: {runs:?}");
    runs[0].clone()
}

fn entries(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("events.ndjson"))
        .expect("the run's log")
        .lines()
        .map(|l| serde_json::from_str(l).expect("an entry"))
        .collect()
}

fn of_kind<'a>(entries: &'a [Value], kind: &str) -> Vec<&'a Value> {
    entries.iter().filter(|e| e["kind"] == kind).collect()
}

/// `nd7 verify` of a run chain, as the account.
fn verify(w: &World, dir: &Path) -> Output {
    let inner = w.in_home(&format!(
        ".local/state/nd7/sessions/{}",
        dir.file_name().expect("name").to_string_lossy()
    ));
    w.nd7(&["verify", &inner]).output().expect("nd7 verify")
}

/// The attacks on the log, each printing `name:status`: from the agent
/// itself, then the same through the exit. `$LOG` is the run's chain,
/// `$LOGS` the directory of every session's log.
const ATTACKS: &[(&str, &str)] = &[
    ("append", r#"echo '{"seq":99}' >> "$LOG/events.ndjson""#),
    ("truncate-s", r#"truncate -s 10 "$LOG/events.ndjson""#),
    ("rewrite-head", r#"echo '0 00' > "$LOG/head""#),
    (
        "replace-log",
        r#"cp "$LOG/events.ndjson" forged && mv -f forged "$LOG/events.ndjson""#,
    ),
    (
        "link-log",
        r#"ln -sf /dev/null "$LOG/events.ndjson.new" && mv -f "$LOG/events.ndjson.new" "$LOG/events.ndjson""#,
    ),
    (
        "replace-lock",
        r#"ln -sf "$LOG/events.ndjson" "$LOG/lock2""#,
    ),
    ("new-session", r#"mkdir "$LOGS/forged-session""#),
    (
        "rewrite-other",
        r#"echo x >> "$LOGS/earlier/events.ndjson""#,
    ),
    // The rest destroy what they reach: last, so that without the fix the
    // attacks before them still find their targets.
    ("rm-other", r#"rm -rf "$LOGS/earlier""#),
    ("rm-lock", r#"rm -f "$LOG/lock""#),
    ("truncate", r#": > "$LOG/events.ndjson""#),
    ("rm-log", r#"rm -f "$LOG/events.ndjson""#),
    ("mv-dir", r#"mv "$LOG" "$LOG.gone""#),
    ("rm-dir", r#"rm -rf "$LOG""#),
];

/// The agent's script: find the run's chain, record one entry through the
/// door, then try every attack, directly and through the exit.
fn attack_script(wait_first: bool) -> String {
    let mut body = String::from(
        r#"LOGS="$HOME_DIR/.local/state/nd7/sessions"
LOG=$(ls -d "$LOGS"/run-*)
echo '{"session_id":"s1","hook_event_name":"Stop","cwd":"/"}' | "$ND7" record; echo "record:$?"
"#,
    );
    if wait_first {
        body.push_str("touch stage1; wait_for go1\n");
    }
    // Through the exit first: a command the log cannot hold is not run, so
    // without the fix an agent that had destroyed the log first would hide
    // whether the exit refuses.
    for (name, attack) in ATTACKS {
        let quoted = attack.replace('\'', r"'\''");
        body.push_str(&format!(
            "\"$EXEC\" 'LOG=\"'\"$LOG\"'\" LOGS=\"'\"$LOGS\"'\"; {quoted}' 2>/dev/null; echo \"exec-{name}:$?\"\n"
        ));
    }
    for (name, attack) in ATTACKS {
        body.push_str(&format!(
            "( {attack} ) 2>/dev/null; echo \"agent-{name}:$?\"\n"
        ));
    }
    body.push_str(
        "echo '{\"session_id\":\"s1\",\"hook_event_name\":\"Stop\",\"cwd\":\"/\"}' | \"$ND7\" record; echo \"record-after:$?\"\n",
    );
    body
}

/// An earlier session's log, made by `nd7 record` outside any sandbox.
fn earlier_session(w: &World) {
    let out = w
        .nd7(&["record"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(br#"{"session_id":"earlier","hook_event_name":"Stop"}"#)?;
            child.wait_with_output()
        })
        .expect("nd7 record outside");
    assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");
    assert!(logs(w).join("earlier/events.ndjson").exists());
}

/// What the log and its directory hold, to compare before and after.
fn snapshot(w: &World) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut dirs = vec![logs(w)];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir)
            .expect("list")
            .filter_map(Result::ok)
        {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path.clone());
                out.push((path, Vec::new()));
            } else {
                out.push((path.clone(), std::fs::read(&path).unwrap_or_default()));
            }
        }
    }
    out.sort();
    out
}

/// Every attack was refused, the log verifies and holds exactly the two
/// entries recorded through the door besides nd7's own.
fn assert_refused_and_intact(w: &World, out: &[String], before_earlier: &[u8]) {
    assert_eq!(out.first().map(String::as_str), Some("record:0"), "{out:?}");
    assert_eq!(
        out.last().map(String::as_str),
        Some("record-after:0"),
        "{out:?}"
    );
    for (name, _) in ATTACKS {
        for side in ["agent", "exec"] {
            let line = out
                .iter()
                .find(|l| l.starts_with(&format!("{side}-{name}:")))
                .unwrap_or_else(|| panic!("{side}-{name} did not run: {out:?}"));
            assert_ne!(line, &format!("{side}-{name}:0"), "{out:?}");
        }
    }
    let dir = run_chain(w);
    let e = entries(&dir);
    assert_eq!(
        e.iter()
            .filter(|e| e["source"] == "intent:claude-code")
            .count(),
        2,
        "{e:?}"
    );
    let v = verify(w, &dir);
    assert_eq!(v.status.code(), Some(0), "{}", text(&v.stdout));
    assert!(!logs(w).join("forged-session").exists());
    assert_eq!(
        std::fs::read(logs(w).join("earlier/events.ndjson")).expect("earlier log"),
        before_earlier
    );
    let files: BTreeSet<String> = std::fs::read_dir(&dir)
        .expect("list")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        files,
        ["events.ndjson", "head", "head.tmp", "lock"]
            .into_iter()
            .map(String::from)
            .collect()
    );
}

// Guards `Policy::floor_writes` (no logs among them) and the state
// directory in `Policy::unwritable`: with the logs back among the floor's
// write roots (ADR-0014's floor), the appends, rewrites and removals succeed
// from the agent and through the exit, and this fails.
#[test]
fn the_log_cannot_be_changed_from_the_floor_nor_through_the_exit() {
    let w = World::new();
    earlier_session(&w);
    let earlier = std::fs::read(logs(&w).join("earlier/events.ndjson")).expect("earlier");
    let out = w.run_agent(&attack_script(false));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_refused_and_intact(&w, &lines(&out), &earlier);
}

// Guards the state directory in `Policy::unwritable`: a grant of the whole
// home (which contains the logs) is carved around it.
#[test]
fn the_log_stays_read_only_with_the_whole_home_granted() {
    let w = World::new();
    earlier_session(&w);
    let earlier = std::fs::read(logs(&w).join("earlier/events.ndjson")).expect("earlier");
    let (child, _pid) = w.start_agent(&attack_script(true));
    w.wait_for("stage1");
    let home = w.in_home("");
    let allow = w
        .nd7(&["allow", home.trim_end_matches('/')])
        .output()
        .expect("allow");
    assert!(allow.status.success(), "{allow:?}");
    w.signal("go1");
    let out = child.wait_with_output().expect("agent ends");
    assert_refused_and_intact(&w, &lines(&out), &earlier);
    let grants = of_kind(&entries(&run_chain(&w)), "grant")
        .into_iter()
        .cloned()
        .collect::<Vec<_>>();
    assert_eq!(grants.len(), 1, "{grants:?}");
    assert_eq!(grants[0]["source"], "exit:nd7");
    assert_eq!(grants[0]["body"]["change"], "allow");
    assert_eq!(grants[0]["body"]["path"], home.trim_end_matches('/'));
}

// Guards the same carve-out when the project, a floor write root, is the home.
#[test]
fn the_log_stays_read_only_when_the_project_is_the_home() {
    let w = World::new();
    earlier_session(&w);
    let earlier = std::fs::read(logs(&w).join("earlier/events.ndjson")).expect("earlier");
    let agent = w.agent(&attack_script(false).replace("wait_for", "true"));
    let out = w
        .command(
            "/bin/sh",
            &[
                "-c",
                &format!("cd '{}' && exec '{ND7}' run '{agent}'", w.acct.display()),
            ],
        )
        .output()
        .expect("nd7 run in the home");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(&format!("writes only to {} ", w.acct.display())),
        "the project is the home: {}",
        text(&out.stderr)
    );
    assert_refused_and_intact(&w, &lines(&out), &earlier);
}
