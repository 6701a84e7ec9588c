//! Under `nd7 run` the session logs are read-only inside the floor: the
//! hooks' entries reach the log through `nd7 run` (the door), and nd7 keeps
//! its own account of the run beside them (ADR-0031). Every attack here is
//! tried as the ordinary account, by a shell script standing in for the
//! agent, directly and through the exit (`$EXEC`, as Claude Code's shell
//! prefix hands Bash commands to it).
#![cfg(target_os = "linux")]

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use crate::runs::*;
use crate::world::*;

fn of_kind<'a>(entries: &'a [Value], kind: &str) -> Vec<&'a Value> {
    entries.iter().filter(|e| e["kind"] == kind).collect()
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
    // The chain's lock lies apart, where the floor reads nothing (ADR-0066):
    // taking it would hold every append back, replacing it would let two
    // writers in at once.
    (
        "take-lock",
        r#"flock -n "$LOGS/../locks/chain/${LOG##*/}" true"#,
    ),
    (
        "replace-lock",
        r#"ln -sf "$LOG/events.ndjson" "$LOGS/../locks/chain/new" && mv -f "$LOGS/../locks/chain/new" "$LOGS/../locks/chain/${LOG##*/}""#,
    ),
    ("new-session", r#"mkdir "$LOGS/forged-session""#),
    (
        "rewrite-other",
        r#"echo x >> "$LOGS/earlier/events.ndjson""#,
    ),
    // The rest destroy what they reach: last, so that without the fix the
    // attacks before them still find their targets.
    ("rm-other", r#"rm -rf "$LOGS/earlier""#),
    ("rm-lock", r#"rm -f "$LOGS/../locks/chain/${LOG##*/}""#),
    ("truncate", r#": > "$LOG/events.ndjson""#),
    ("rm-log", r#"rm -f "$LOG/events.ndjson""#),
    ("mv-dir", r#"mv "$LOG" "$LOG.gone""#),
    ("rm-dir", r#"rm -rf "$LOG""#),
    // Moving a directory above the log away would let the agent put one of
    // its own where nd7 run appends: none may move, the home granted or not.
    ("mv-logs", r#"mv "$LOGS" "$LOGS.gone""#),
    ("mv-nd7-state", r#"mv "$LOGS/.." "$LOGS/../../nd7.gone""#),
    (
        "mv-xdg-state",
        r#"mv "$HOME/.local/state" "$HOME/.local/state.gone""#,
    ),
    ("mv-local", r#"mv "$HOME/.local" "$HOME/.local.gone""#),
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
        ["events.ndjson", "head", "head.tmp"]
            .into_iter()
            .map(String::from)
            .collect()
    );
    let lock = logs(w)
        .join("../locks/chain")
        .join(dir.file_name().expect("the chain's name"));
    assert!(
        lock.is_file(),
        "the chain's lock lies apart: {}",
        lock.display()
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
        .command_in(&w.acct, ND7, &["run", &agent])
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

/// The first line of `nd7 run`'s own entries of `kind`.
fn ours<'a>(entries: &'a [Value], kind: &str) -> Vec<&'a Value> {
    entries
        .iter()
        .filter(|e| e["kind"] == kind && e["source"] == "exit:nd7")
        .collect()
}

// What nd7 writes of its own: the run's start with its rules, version and
// kernel; each command with its text as received, cwd, grants and how it
// ended; each grant changed; each refused caller; the run's end.
#[test]
fn nd7_keeps_its_own_account_of_the_run() {
    let w = World::new();
    let (child, pid) = w.start_agent(
        r#"
"$EXEC" 'echo hi' > /dev/null; echo "ok:$?"
"$EXEC" "printf '%s' \"it's\"; exit 3" > /dev/null; echo "fails:$?"
"$EXEC" 'kill -TERM $$'; echo "signal:$?"
touch stage1; wait_for go1
"$EXEC" "touch '$OUT/granted'"; echo "granted:$?"
touch stage2; wait_for go2
"#,
    );
    w.wait_for("stage1");
    let outside = w.outside().display().to_string();
    assert!(
        w.nd7(&["allow", &outside])
            .output()
            .expect("allow")
            .status
            .success()
    );
    w.signal("go1");
    w.wait_for("stage2");
    assert!(
        w.nd7(&["deny", &outside])
            .output()
            .expect("deny")
            .status
            .success()
    );
    // Callers of the same account that were never in the session, at both
    // doors. Guards `admit` in the exit's and the door's `serve_one` (the
    // credentials on the request, pinned by pidfd): without it at the door
    // the outsider's hook is recorded.
    let session = w.sessions().join(pid.to_string());
    let exit = as_account(
        EXIT_SOCKET_VAR,
        &session.join("exit.sock").display().to_string(),
    );
    assert!(
        exit.contains("refused: ") && exit.contains("is not part of session"),
        "{exit}"
    );
    let door = as_account(
        DOOR_SOCKET_VAR,
        &session.join("record.sock").display().to_string(),
    );
    assert!(
        door.contains("refused: ") && door.contains("is not part of session"),
        "{door}"
    );
    w.signal("go2");
    let out = child.wait_with_output().expect("agent ends");
    assert_eq!(lines(&out), ["ok:0", "fails:3", "signal:143", "granted:0"]);

    let dir = run_chain(&w);
    let e = entries(&dir);
    let start = &e[0];
    assert_eq!(
        (start["kind"].as_str(), start["source"].as_str()),
        (Some("run_start"), Some("exit:nd7"))
    );
    assert_eq!(
        start["session"],
        dir.file_name().expect("name").to_string_lossy().as_ref()
    );
    assert_eq!(start["body"]["pid"], pid);
    assert_eq!(start["body"]["nd7_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(start["body"]["sandbox"], "landlock");
    assert!(
        start["body"]["landlock_abi"]
            .as_u64()
            .is_some_and(|v| v >= 3),
        "{start}"
    );
    assert_eq!(start["body"]["hooks"], false);
    assert_eq!(
        start["body"]["rules"]["project"],
        w.proj().display().to_string()
    );
    assert_eq!(start["body"]["rules"]["grants"], serde_json::json!([]));

    let execs = ours(&e, "exec");
    let ends = ours(&e, "exec_end");
    let commands: Vec<&str> = execs
        .iter()
        .map(|x| x["body"]["command"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        commands,
        [
            "echo hi",
            "printf '%s' \"it's\"; exit 3",
            "kill -TERM $$",
            &format!("touch '{outside}/granted'")
        ]
    );
    for x in &execs {
        assert_eq!(x["cwd"], w.proj().display().to_string());
        assert!(x["body"]["caller"].as_u64().is_some());
    }
    assert_eq!(execs[0]["body"]["grants"], serde_json::json!([]));
    assert_eq!(execs[3]["body"]["grants"], serde_json::json!([outside]));
    let how: Vec<(u64, Value)> = ends
        .iter()
        .map(|x| {
            let b = x["body"].as_object().expect("body");
            let (k, v) = b.iter().find(|(k, _)| *k != "exec").expect("how");
            (
                b["exec"].as_u64().expect("seq"),
                serde_json::json!({ k: v }),
            )
        })
        .collect();
    let seqs: Vec<u64> = execs
        .iter()
        .map(|x| x["seq"].as_u64().expect("seq"))
        .collect();
    assert_eq!(
        how,
        [
            (seqs[0], serde_json::json!({"exited": 0})),
            (seqs[1], serde_json::json!({"exited": 3})),
            (seqs[2], serde_json::json!({"signaled": 15})),
            (seqs[3], serde_json::json!({"exited": 0})),
        ]
    );
    let grants: Vec<(String, Value)> = ours(&e, "grant")
        .iter()
        .map(|g| {
            (
                g["body"]["change"].as_str().unwrap_or("").to_string(),
                g["body"]["grants"].clone(),
            )
        })
        .collect();
    assert_eq!(
        grants,
        [
            ("allow".to_string(), serde_json::json!([outside])),
            ("deny".to_string(), serde_json::json!([])),
        ]
    );
    let refused: Vec<&str> = ours(&e, "refused")
        .iter()
        .map(|r| r["body"]["door"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(refused, ["exit", "record"]);
    for r in ours(&e, "refused") {
        assert_eq!(r["body"]["uid"], account().uid);
        assert!(
            r["body"]["reason"]
                .as_str()
                .unwrap_or("")
                .contains("is not part of session")
        );
    }
    let end = e.last().expect("entries");
    assert_eq!(
        (end["kind"].as_str(), end["source"].as_str()),
        (Some("run_end"), Some("exit:nd7"))
    );
    assert_eq!(end["body"]["exited"], 0);
    assert_eq!(end["body"]["commands"], 4);
    assert_eq!(end["body"]["refused"], 2);
    assert!(
        e.iter()
            .all(|x| x["source"] == "exit:nd7" || x["source"] == "effect:nd7"),
        "only nd7 wrote this run's log"
    );
    let v = verify(&w, &dir);
    assert_eq!(v.status.code(), Some(0), "{}", text(&v.stdout));
    assert!(
        text(&v.stdout).contains(
            "the run registered no hooks (the program was not Claude Code), so its 4 commands"
        ),
        "{}",
        text(&v.stdout)
    );
}

pub(crate) const EXIT_SOCKET_VAR: &str = "ND7_TEST_EXIT_SOCKET";
const DOOR_SOCKET_VAR: &str = "ND7_TEST_DOOR_SOCKET";

/// Runs this test binary's [`outsider`] as the world's account, and returns
/// what it printed.
pub(crate) fn as_account(var: &str, value: &str) -> String {
    test_as_account("record_door::outsider", var, value)
}

/// Runs the test `test` of this binary as the world's account (itself when
/// the tests do not run as root) with `var` set to `value`, and returns what
/// it printed: a caller that is not the session's, for the tests that hold
/// the door and the exit to refusing one.
pub(crate) fn test_as_account(test: &str, var: &str, value: &str) -> String {
    let acct = account();
    let me = std::env::current_exe().expect("test binary");
    let mut cmd = if acct.drop_from_root {
        let mut c = std::process::Command::new("setpriv");
        c.arg(format!("--reuid={}", acct.uid))
            .arg(format!("--regid={}", acct.gid))
            .args(["--clear-groups", "--"])
            .arg(me);
        c
    } else {
        std::process::Command::new(me)
    };
    let out = cmd
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(var, value)
        .output()
        .expect("run the child");
    text(&out.stdout)
}

/// A caller that was never in the session, for the test above. Does
/// nothing unless started by it.
#[test]
fn outsider() {
    if let Ok(socket) = std::env::var(EXIT_SOCKET_VAR) {
        match nd7_core::sandbox::linux::exit::run(Path::new(&socket), "true".into()) {
            Err(nd7_core::sandbox::linux::exit::ExitError::Refused(why)) => {
                println!("refused: {why}")
            }
            other => println!("not refused: {other:?}"),
        }
    }
    if let Ok(socket) = std::env::var(DOOR_SOCKET_VAR) {
        let request = nd7_core::floor_wire::HookRequest {
            agent: nd7_core::hook::Agent::ClaudeCode,
            ts: 1,
            cwd: None,
            run_hook: false,
            glimpse: false,
            explain: false,
            body: br#"{"session_id":"x","hook_event_name":"Stop"}"#.to_vec(),
        };
        let server: u32 = Path::new(&socket)
            .parent()
            .and_then(|d| d.file_name())
            .and_then(|n| n.to_str()?.parse().ok())
            .expect("the session's pid");
        match nd7_core::sandbox::linux::door::send(Path::new(&socket), server, &request) {
            Err(why) => println!("refused: {why}"),
            Ok(answer) => println!("not refused: {answer:?}"),
        }
    }
}

// A forged entry goes in as the agent's word, whatever it claims, and
// nothing written before it changes. Guards `RunLog::hook`, which builds
// every door entry with `Event::new` (source intent:claude-code).
#[test]
fn a_forged_entry_is_the_agents_word_and_changes_nothing_before_it() {
    let w = World::new();
    let out = w.run_agent(
        r#"
LOG=$(ls -d "$HOME_DIR"/.local/state/nd7/sessions/run-*)
echo '{"session_id":"c","hook_event_name":"UserPromptSubmit","prompt":"hi"}' | "$ND7" record
"$EXEC" 'echo one' > /dev/null
cp "$LOG/events.ndjson" before.ndjson
forged='{"seq":0,"session_id":"c","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"rm -rf /"},"source":"exit:nd7","kind":"exec","body":{"command":"rm -rf /"},"prev":"00","hash":"11"}'
printf '%s' "$forged" | "$ND7" record > out1 2> err1; echo "forged:$?"
"$EXEC" "printf '%s' '{\"session_id\":\"c\",\"hook_event_name\":\"SessionEnd\",\"source\":\"exit:nd7\"}' | '$ND7' record"; echo "through-exit:$?"
printf 'not json' | "$ND7" record 2> err2; echo "garbage:$?"
head -c 8000000 /dev/zero | tr '\0' 'a' | sed 's/^/{"session_id":"c","hook_event_name":"Notification","message":"/; s/$/"}/' | "$ND7" record 2> err3; echo "huge:$?"
cat out1 err1; cat err2; cat err3
"#,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let got = lines(&out);
    assert_eq!(
        got[..4],
        ["forged:0", "through-exit:0", "garbage:0", "huge:0"],
        "{got:?}"
    );
    assert!(
        got[4].starts_with("nd7 record: nd7 run refused the entry: the payload is not valid JSON"),
        "{got:?}"
    );
    assert!(
        got[5].contains(
            "over the 7274496 byte limit; recorded its size and BLAKE3 only (nd7 run session"
        ),
        "{got:?}"
    );
    assert_eq!(
        got.len(),
        6,
        "nothing on stdout, and the forged entry said nothing: {got:?}"
    );

    let dir = run_chain(&w);
    let now = std::fs::read(dir.join("events.ndjson")).expect("log");
    let before = std::fs::read(w.proj().join("before.ndjson")).expect("copy");
    assert!(
        now.starts_with(&before),
        "the entries written before are unchanged"
    );
    let e = entries(&dir);
    let before_count = before.iter().filter(|&&b| b == b'\n').count();
    let added: Vec<&Value> = e[before_count..]
        .iter()
        .filter(|x| x["source"] != "exit:nd7" && x["source"] != "effect:nd7")
        .collect();
    // The forged entry and the oversized one; the hook run through the exit
    // never reaches the door, which is the floor's alone (ADR-0051).
    assert_eq!(added.len(), 2, "{added:?}");
    assert!(
        !added
            .iter()
            .any(|x| x["body"]["hook_event_name"] == "SessionEnd"),
        "{added:?}"
    );
    for x in &added {
        assert_eq!(x["source"], "intent:claude-code", "{x}");
        assert_eq!(x["session"], "c");
    }
    // What it claims stays inside the body, where it is only what it said.
    assert_eq!(added[0]["kind"], "tool_call");
    assert_eq!(added[0]["body"]["source"], "exit:nd7");
    assert_eq!(added[0]["body"]["kind"], "exec");
    assert_eq!(added[1]["body"]["omitted"]["bytes"], 8_000_000 + 64);
    // The forged exec is no command: the exit's own entries name one command.
    assert_eq!(
        ours(&e, "exec").len(),
        2,
        "echo one, and the forging command itself"
    );
    let v = verify(&w, &dir);
    assert_eq!(v.status.code(), Some(0), "{}", text(&v.stdout));
}

// Two hundred hooks at once through the door: each entry lands exactly
// once, every recorder exits 0 and prints nothing. Guards the lock in
// `SessionLog::append`, which the door's threads share with every writer:
// without it appends collide and entries are lost or refused. Also guards
// `keeper::allow_own_to_floor` in `Door::open`: without it the keeper refuses the
// hooks' connects to the session's own `record.sock` and none records.
#[test]
fn two_hundred_hooks_at_once_through_the_door_lose_nothing() {
    const HOOKS: usize = 200;
    let w = World::new();
    let out = w.run_agent(&format!(
        r#"
mkdir -p p
for i in $(seq {HOOKS}); do
  printf '{{"session_id":"c","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{{"command":"echo %d"}},"tool_use_id":"toolu_%d"}}' $i $i > p/$i.json
done
for i in $(seq {HOOKS}); do ( "$ND7" record < p/$i.json > p/$i.out 2> p/$i.err; echo $? > p/$i.rc ) & done
wait
cat p/*.out p/*.err | wc -c
cat p/*.rc | sort | uniq -c | tr -s ' '
"#
    ));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(lines(&out), ["0", &format!(" {HOOKS} 0")]);
    let dir = run_chain(&w);
    let e = entries(&dir);
    let ids: BTreeSet<String> = e
        .iter()
        .filter(|x| x["source"] == "intent:claude-code")
        .map(|x| x["tool_use_id"].as_str().expect("id").to_string())
        .collect();
    assert_eq!(ids.len(), HOOKS);
    // What ran (issue 32) is counted apart.
    let e: Vec<Value> = e
        .into_iter()
        .filter(|x| x["source"] != "effect:nd7")
        .collect();
    assert_eq!(
        e.len(),
        HOOKS + ours(&e, "exec").len() * 2 + 2,
        "no entry twice"
    );
    let v = verify(&w, &dir);
    assert_eq!(v.status.code(), Some(0), "{}", text(&v.stdout));
}

// When nd7 run is gone, a hook inside the floor records nothing and says
// why on stderr, exiting 0 with nothing on stdout; the log stays as it was.
//
// nd7 run is two processes (ADR-0035): killing the session process (the pid
// the banner names, which serves the door) makes the keeper end everything
// below it, the hook's shell included, so no hook outlives the door that
// way, and since ADR-0096 neither does `kill -9` of `nd7 run` (the front:
// its keeper then ends the run as on SIGTERM). The one way left is the
// keeper itself, the front's child, killed with SIGKILL from outside: the
// session and the agent die with it, and a process that left the agent's
// tree runs on under init, still under the floor. That is what this does:
// the door is gone, with `ND7_RUN` still naming its directory.
#[test]
fn with_nd7_run_gone_a_hook_fails_closed_and_says_so() {
    let w = World::new();
    // Without the exec observer: with it, every process below nd7 run dies
    // with the keeper (its front ends, ADR-0110), and no hook is left to try.
    let (mut child, session) = w.start_agent_with(
        r#"
( wait_for go
  echo '{"session_id":"c","hook_event_name":"Stop"}' | "$ND7" record > gone.out 2> gone.err; echo $? > gone.rc
  echo '{"session_id":"c","hook_event_name":"Stop"}' | env -u ND7_RUN "$ND7" record > direct.out 2> direct.err; echo $? > direct.rc
  touch finished ) &
touch started; wait_for finished
"#,
        &[("ND7_FAULT", "no-ptrace")],
    );
    w.wait_for("started");
    let dir = run_chain(&w);
    let before = std::fs::read(dir.join("events.ndjson")).expect("log");
    // The keeper: the session's parent, below the front (the process the
    // user's shell started and waits for).
    let ppid = |pid: u32| -> u32 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
        let rest = stat.rsplit(") ").next().expect("stat fields");
        rest.split(' ')
            .nth(1)
            .and_then(|p| p.parse().ok())
            .expect("ppid")
    };
    let keeper = ppid(session);
    assert_eq!(ppid(keeper), child.id(), "the keeper is the front's child");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(keeper as i32).expect("pid"),
        rustix::process::Signal::KILL,
    )
    .expect("kill nd7 run");
    let _ = child.wait();
    // Gone, or a zombie nothing reaps (where no init does).
    let gone = || {
        std::fs::read_to_string(format!("/proc/{session}/stat")).map_or(true, |stat| {
            stat.rsplit(") ")
                .next()
                .is_some_and(|rest| rest.starts_with('Z'))
        })
    };
    let start = std::time::Instant::now();
    while !gone() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "the session process outlived its keeper"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    w.signal("go");
    w.wait_for("finished");
    for (name, says) in [
        (
            "gone",
            "this hook runs under nd7 run (ND7_RUN is set), but no running nd7 run was found among its ancestors; the logs are read-only inside the sandbox, so nothing could be written",
        ),
        (
            "direct",
            "Permission denied (os error 13); inside nd7 run's sandbox the logs are read-only and only nd7 run writes them",
        ),
    ] {
        let read =
            |ext: &str| std::fs::read_to_string(w.proj().join(format!("{name}.{ext}"))).expect(ext);
        assert_eq!(read("rc").trim(), "0", "{name}");
        assert_eq!(read("out"), "", "{name}");
        let err = read("err");
        assert!(
            err.starts_with("nd7 record: ") && err.contains(says),
            "{name}: {err}"
        );
        assert!(err.ends_with("; nothing recorded\n"), "{name}: {err}");
    }
    assert_eq!(
        std::fs::read(dir.join("events.ndjson")).expect("log"),
        before
    );
}

// A Bash call with a result but no command through the exit, and a command
// no call announced, are each named by `nd7 verify` and counted by `nd7 run`
// at its end; a call with neither result nor command (Claude Code denied it)
// is only noted (ADR-0040); a hook registered elsewhere does not record an
// event a second time. The stand-in hands the exit Claude Code's tool line
// for each call, as Claude Code's shell prefix does; the command it sends
// bare (the prefix unset, as a person would) is no Bash call's, and the
// tool line's pairing with the real CLI is in tests/it/e2e.
#[test]
fn verify_names_a_call_without_its_command_and_a_command_without_its_call() {
    let w = World::new();
    let claude = fake_claude(
        &w,
        r#"
export CLAUDE_CODE_SHELL_PREFIX="$EXEC"
pre() { printf '{"session_id":"c1","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"%s"},"tool_use_id":"%s"}' "$2" "$1" | "$ND7" record --run-hook; }
post() { printf '{"session_id":"c1","hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{"command":"%s"},"tool_response":{"stdout":""},"tool_use_id":"%s"}' "$2" "$1" | "$ND7" record --run-hook; }
line() { printf "source /x 2>/dev/null || true && eval '%s' < /dev/null && pwd -P >| %s" "$1" "$TMPDIR/cwd"; }
pre t1 'echo one'; "$EXEC" "$(line 'echo one')" > /dev/null; post t1 'echo one'
pre t2 'exit 3'; "$EXEC" "$(line 'exit 3')"; post t2 'exit 3'
pre t3 'echo never'; post t3 'echo never'
pre t4 'echo denied'
(unset CLAUDE_CODE_SHELL_PREFIX; "$EXEC" 'echo unannounced' > /dev/null)
echo '{"session_id":"c1","hook_event_name":"Stop"}' | "$ND7" record; echo "plain:$?"
echo '{"session_id":"c1","hook_event_name":"Stop"}' | "$ND7" record --run-hook; echo "ours:$?"
"#,
    );
    let out = w
        .nd7(&["run", &claude, "-p", "x"])
        .output()
        .expect("nd7 run");
    assert_eq!(lines(&out), ["plain:0", "ours:0"]);
    assert!(
        text(&out.stderr).contains("nd7 run: warning: 1 of 3 Bash commands ran through the exit without a matching hook entry"),
        "{}",
        text(&out.stderr)
    );
    let dir = run_chain(&w);
    let e = entries(&dir);
    assert_eq!(e[0]["body"]["hooks"], true);
    let named: Vec<Option<&str>> = ours(&e, "exec")
        .iter()
        .map(|x| x["tool_use_id"].as_str())
        .collect();
    assert_eq!(named, [Some("t1"), Some("t2"), None]);
    assert_eq!(of_kind(&e, "turn_end").len(), 1, "the Stop event once");
    let v = verify(&w, &dir);
    assert_eq!(v.status.code(), Some(1), "{}", text(&v.stdout));
    let report = text(&v.stdout);
    let call = e.iter().find(|x| x["tool_use_id"] == "t3").expect("t3");
    let exec = ours(&e, "exec")[2];
    assert!(
        report.contains(&format!(
            "NOT RECONCILED: entry {}: Bash call t3 (`echo never`) has no command through the exit",
            call["seq"]
        )),
        "{report}"
    );
    assert!(
        report.contains(&format!("NOT RECONCILED: entry {}: command `echo unannounced` ran through the exit with no Bash call announcing it", exec["seq"])),
        "{report}"
    );
    assert!(
        report.contains("note: 1 Bash call never ran (no result and no command"),
        "{report}"
    );
    assert!(!report.contains("Bash call t4"), "{report}");
    assert!(
        report.starts_with(&format!("verified: {} entries", e.len())),
        "{report}"
    );
}

// The unconfined nd7 run gives the exit at most 128 commands at once; one
// more is refused at once, said on stderr and written down, and the exit
// serves again once one ends. Guards the `Slots::try_take` check in
// `Exit::serve`: without it the 129th command runs (one thread each, no bound).
#[test]
fn the_exit_runs_at_most_128_commands_at_once() {
    let w = World::new();
    let out = w.run_agent(
        r#"
for i in $(seq 128); do "$EXEC" "touch started.$i; while [ ! -e release ]; do sleep 0.2; done" & done
for _ in $(seq 1200); do [ "$(ls started.* 2>/dev/null | wc -l)" -ge 128 ] && break; sleep 0.05; done
"$EXEC" 'echo one-too-many' 2> over.err; echo "over:$?"
cat over.err
touch release; wait
"$EXEC" 'echo again'; echo "again:$?"
"#,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let got = lines(&out);
    assert_eq!(got[0], "over:126", "{got:?}");
    assert!(
        got[1].contains("this session already runs 128 commands through its exit; wait for one to end; the command was not run"),
        "{got:?}"
    );
    assert_eq!(got[2..], ["again", "again:0"]);
    let e = entries(&run_chain(&w));
    let refused = ours(&e, "refused");
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["body"]["door"], "exit");
    assert_eq!(ours(&e, "exec").len(), 129);
}

const FAKE_DOOR_VAR: &str = "ND7_TEST_FAKE_DOOR";

/// A socket of the agent's own, standing in for nd7 run's door, for the
/// test below: takes one connection, keeps what it was sent in `<socket>.got`
/// and answers "recorded". Does nothing unless started by it.
#[test]
fn fake_door() {
    use std::io::{Read, Write};
    let Ok(socket) = std::env::var(FAKE_DOOR_VAR) else {
        return;
    };
    let listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
    let (mut conn, _) = listener.accept().expect("accept");
    let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(5)));
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = conn.read(&mut buf) {
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
        let _ = conn.write_all(b"a\0\0\0\0");
    }
    std::fs::write(format!("{socket}.got"), got).expect("write what came");
}

// `ND7_RUN` is only a hint: a door named there is used only if the kernel
// reports nd7 run as the process listening on it. Guards the SO_PEERCRED
// check in `door::send`: without it the payload goes to the agent's own
// socket, which answers "recorded", and the entry is lost without a word.
// The hint failing, the hook finds the run's door among its ancestors.
#[test]
fn a_door_the_agent_made_gets_no_payload() {
    let w = World::new();
    let test_binary = std::env::current_exe().expect("test binary");
    let out = w.run_agent(&format!(
        r#"
mkdir -p "fake/$$"
{FAKE_DOOR_VAR}="$PWD/fake/$$/record.sock" '{}' --exact record_door::fake_door --nocapture --test-threads=1 > /dev/null 2>&1 &
wait_for "fake/$$/record.sock"
echo '{{"session_id":"c","hook_event_name":"Stop"}}' | ND7_RUN="$PWD/fake/$$" "$ND7" record > fake.out 2> fake.err; echo "rc:$?"
wait
cat fake.out fake.err
wc -c < "fake/$$/record.sock.got"
"#,
        test_binary.display()
    ));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let got = lines(&out);
    // The agent's socket is sent nothing; the entry goes through the run's
    // own door instead (a failed hint falls back to the ancestors' door:
    // see door_hooks::a_forged_nd7_run_hint_does_not_switch_recording_off).
    assert_eq!(got, ["rc:0", "0"], "{got:?}");
    assert!(
        entries(&run_chain(&w)).iter().any(|e| e["session"] == "c"),
        "recorded through nd7 run's door"
    );
}

// Inside the floor the chain's lock cannot be opened (ADR-0066), so `nd7
// verify` there walks without it while the door appends. Each walk must
// give a true verdict: the chain verifies every time. Guards
// `Reading::Live` and `walk_live` in `session_log`: without the first,
// verify inside stops at the lock it cannot open; without the second, a
// walk that meets an append in flight reports `head` ahead of the log.
#[test]
fn verify_inside_the_floor_reads_its_chain_while_the_door_appends() {
    let w = World::new();
    let out = w.run_agent(
        r#"LOGS="$HOME_DIR/.local/state/nd7/sessions"
LOG=$(ls -d "$LOGS"/run-*)
( for i in $(seq 1 150); do
    echo '{"session_id":"s1","hook_event_name":"Stop","cwd":"/","pad":"'"$(head -c 3000 /dev/zero | tr '\0' x)"'"}' | "$ND7" record
  done; touch appended ) &
ok=0; failed=0
while [ ! -e appended ]; do
  if "$ND7" verify "$LOG" > verify.out 2>&1; then ok=$((ok+1)); else failed=$((failed+1)); cp verify.out verify.failed; fi
done
wait
echo "$ok $failed" > verify.counts
"#,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let counts = std::fs::read_to_string(w.proj().join("verify.counts")).expect("the agent ran");
    let failed = std::fs::read_to_string(w.proj().join("verify.failed")).unwrap_or_default();
    let (ok, bad) = counts.trim().split_once(' ').expect("two counts");
    assert_eq!(bad, "0", "verify inside failed: {failed}");
    assert_ne!(ok, "0", "no verify finished while the door appended");
    let dir = run_chain(&w);
    let stops = entries(&dir)
        .iter()
        .filter(|e| e["source"] == "intent:claude-code")
        .count();
    assert_eq!(stops, 150);
}

// The agent can send the door anything, as often as it likes: 7 MiB entries
// in a loop would fill the disk, and then no command could run (a command
// the log cannot hold is not run). The door takes a budget of hook bytes per
// run (1 GiB; 100 kB here, by the test builds' `ND7_TEST_DOOR_BUDGET`), then
// refuses and counts: one `refused` entry, the count in `run_end`, a warning
// at the end, and commands still run and are written down. Guards the
// budget check at the top of `RunLog::hook`.
#[test]
fn the_door_takes_a_budget_of_bytes_per_run_then_counts() {
    let w = World::new();
    let out = w
        .nd7(&["run", &w.agent(
            r#"
big=$(head -c 40000 /dev/zero | tr '\0' a)
for i in 1 2 3 4 5; do
  printf '{"session_id":"s1","hook_event_name":"UserPromptSubmit","prompt":"%s"}' "$big" | "$ND7" record 2>> record.err
  echo "record:$?"
done
"$EXEC" 'echo still-runs'
"#,
        )])
        .env("ND7_TEST_DOOR_BUDGET", "100000")
        .output()
        .expect("nd7 run");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        lines(&out),
        [
            "record:0",
            "record:0",
            "record:0",
            "record:0",
            "record:0",
            "still-runs"
        ]
    );
    let said = std::fs::read_to_string(w.proj().join("record.err")).expect("record.err");
    assert_eq!(said.matches("counted, not recorded").count(), 3, "{said}");
    let e = entries(&run_chain(&w));
    assert_eq!(of_kind(&e, "prompt").len(), 2, "two fit in the budget");
    let refused = ours(&e, "refused");
    assert_eq!(refused.len(), 1, "said once: {refused:?}");
    assert_eq!(refused[0]["body"]["door"], "record");
    assert_eq!(ours(&e, "exec").len(), 1);
    let end = ours(&e, "run_end");
    assert_eq!(end[0]["body"]["hooks_over_budget"], 3, "{}", end[0]);
    assert!(
        text(&out.stderr).contains("nd7 run: warning: 3 hook entries were not recorded: this run's hooks sent more through the door than one run takes (100000 bytes)"),
        "{}",
        text(&out.stderr)
    );
}

// The keeper turns away a command's connects to the hooks' door (ADR-0051)
// before they reach nd7 run, so nd7 run never saw those callers and wrote
// no `refused` entry for them. The keeper now keeps the first 100 and the
// count, and nd7 run writes them at its end: a flood of refusals grows the
// log by at most 100 entries. Guards `Allowed::FloorOnly` in
// `supervise::connect_unix` and the `door_refused_first` loop in `run::run`.
#[test]
fn refused_connects_to_the_door_from_a_command_are_written_down_and_bounded() {
    let w = World::new();
    let out = w.run_agent(
        r#"
"$EXEC" 'for i in $(seq 120); do echo "{\"session_id\":\"s\",\"hook_event_name\":\"Stop\"}" | '"'$ND7'"' record 2>/dev/null; done; echo flooded'
"#,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(lines(&out), ["flooded"]);
    let e = entries(&run_chain(&w));
    assert_eq!(of_kind(&e, "turn_end").len(), 0, "nothing recorded: {e:?}");
    let refused = ours(&e, "refused");
    assert_eq!(refused.len(), 100, "the first 100: {refused:#?}");
    assert!(refused.iter().all(|r| r["body"]["door"] == "record"));
    assert!(
        refused[0]["body"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("runs inside a command through the exit")),
        "{}",
        refused[0]
    );
    let end = ours(&e, "run_end");
    let counted = end[0]["body"]["refused"].as_u64().unwrap_or(0);
    assert!(counted >= 120, "every refusal counted: {}", end[0]);
}

/// The logs can be neither hard-linked into the project (a second name,
/// with the project's write rights) nor reached by a grant the user makes
/// inside nd7's own state or inside `~/.nd7`. Held.
#[test]
fn the_log_cannot_be_hard_linked_out_nor_granted_from_inside_nd7s_state() {
    let w = World::new();
    let (child, _pid) = w.start_agent(&format!(
        r#"{X}
LOG=$(ls -d "$HOME_DIR/.local/state/nd7/sessions"/run-*)
x agent-hardlink ln "$LOG/events.ndjson" ev
x exec-hardlink "$EXEC" "ln '$LOG/events.ndjson' ev2"
echo "$LOG" > log.path
touch stage1; wait_for go1
x exec-append "$EXEC" "echo x >> '$LOG/events.ndjson'"
x exec-nd7 "$EXEC" "touch '$HOME_DIR/.nd7/runs/x'"
x exec-secrets "$EXEC" "echo /x >> '$HOME_DIR/.nd7/secrets'"
"#
    ));
    w.wait_for("stage1");
    let log = std::fs::read_to_string(w.proj().join("log.path")).expect("log path");
    let mut allowed = Vec::new();
    for path in [
        log.trim().to_string(),
        w.in_home(".local/state/nd7"),
        w.in_home(".local/state"),
        w.in_home(".nd7/runs"),
        w.in_home(".nd7"),
    ] {
        let allow = w.nd7(&["allow", &path]).output().expect("allow");
        allowed.push((path, allow.status.code(), text(&allow.stderr)));
    }
    w.signal("go1");
    let out = child.wait_with_output().expect("agent ends");
    assert_eq!(
        lines(&out),
        [
            "agent-hardlink:no",
            "exec-hardlink:no",
            "exec-append:no",
            "exec-nd7:no",
            "exec-secrets:no"
        ],
        "{allowed:?} {}",
        text(&out.stderr)
    );
}
