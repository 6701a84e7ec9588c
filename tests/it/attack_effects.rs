//! Attacking what ran, read back (issue 32; ADR-0110, ADR-0111, ADR-0137;
//! the fixes ADR-0144). The attacker is the agent under `nd7 run` (Linux),
//! an ordinary account: it picks the commands, the programs' file names,
//! their arguments and when its processes run, and wants `nd7 show`, the
//! HTML report or `nd7 verify` to tell its reader something that is not so:
//! a program it ran left out of a tree, one program drawn as a tree of
//! others, an argument passing for the command an exec ran under, a
//! process it left behind drawn as its call's, a claim held against
//! nothing while verify says "reconciled", or a faithful command reported
//! as a disagreement. Each test runs the attack for real (`nd7 run`, the
//! agent a shell script) and holds what must be shown.
#![cfg(target_os = "linux")]

use std::path::Path;

use nd7_core::chain::{self, Hash};

use crate::runs::*;
use crate::world::*;

/// The run chain's id (its directory's name).
fn chain_id(dir: &Path) -> String {
    dir.file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned()
}

/// `nd7 show` of the chain `id` with `args`, its stdout.
fn show(w: &World, id: &str, args: &[&str]) -> String {
    let mut all = vec!["show"];
    all.extend_from_slice(args);
    all.push(id);
    let out = w.nd7(&all).output().expect("nd7 show");
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// The seq of the exit's `exec` entry whose command holds `marker`.
fn exec_seq(dir: &Path, marker: &str) -> u64 {
    entries(dir)
        .iter()
        .find(|e| {
            e["source"] == "exit:nd7"
                && e["kind"] == "exec"
                && e["body"]["command"]
                    .as_str()
                    .is_some_and(|c| c.contains(marker))
        })
        .and_then(|e| e["seq"].as_u64())
        .unwrap_or_else(|| panic!("no exec entry with {marker}: {:#?}", entries(dir)))
}

/// Rewrites the chain in `dir` with `edit` applied to each entry (without
/// its `prev` and hash) and seals it again, as tests/it/effects_reading.rs
/// does: what the observer may write, written.
fn reseal(dir: &Path, edit: impl Fn(&str) -> String) {
    let session = chain_id(dir);
    let text = std::fs::read_to_string(dir.join("events.ndjson")).expect("the run's log");
    let mut out = String::new();
    let mut prev = Hash::session_fingerprint(&session);
    for line in text.lines() {
        let cut = line.rfind(",\"prev\":\"").expect("prev");
        let body = edit(&line[..cut]);
        let sealed = chain::seal(format!("{body},\"prev\":\"{prev}\"}}").as_bytes());
        prev = chain::read_stated(&sealed[..sealed.len() - 1])
            .expect("sealed")
            .hash;
        out.push_str(std::str::from_utf8(&sealed).expect("utf8"));
    }
    std::fs::write(dir.join("events.ndjson"), out).expect("write the log");
    let n = text.lines().count() - 1;
    std::fs::write(dir.join("head"), format!("{n} {prev}\n")).expect("write head");
}

/// A command runs programs whose file names fill the tree's 400 bytes,
/// then the program it wants unseen (`id`). `nd7 show` and the HTML report
/// cut a long tree: before ADR-0144 the cut was silent, so the tree looked
/// whole with `id` gone. A cut tree must say it is cut (and where every
/// exec is), or hold `id`.
///
/// Guards `ran::cut_tree`: without it the tree ends mid-name, unmarked.
#[test]
fn a_program_drawn_past_the_trees_length_is_not_cut_away_unsaid() {
    let w = World::new();
    let long: Vec<String> = ["a", "b", "c"].iter().map(|c| c.repeat(200)).collect();
    let copies: Vec<String> = long
        .iter()
        .map(|n| format!("cp /bin/true ./{n} && ./{n}"))
        .collect();
    let out = w.run_agent(&format!(
        "\"$EXEC\" '{} && /usr/bin/id >/dev/null; echo hidden-marker'\necho done",
        copies.join(" && ")
    ));
    assert!(text(&out.stdout).contains("done"), "{}", text(&out.stderr));
    let dir = run_chain(&w);
    let seq = exec_seq(&dir, "hidden-marker");
    let shown = show(&w, &chain_id(&dir), &[]);
    let row = shown
        .lines()
        .find(|l| l.contains(&format!("under the command of entry {seq}, ")))
        .unwrap_or_else(|| panic!("{shown}"));
    let cut = "… (cut; `nd7 show --effects` lists every exec)";
    assert!(
        row.ends_with(cut) || row.contains(", id"),
        "a tree that leaves id out without saying so: {row}"
    );
    let html = w
        .nd7(&["show", "--html", &chain_id(&dir)])
        .output()
        .expect("nd7 show --html");
    let page = text(&html.stdout);
    assert!(
        page.contains("… (cut; `nd7 show --effects` lists every exec)</code>")
            || page.contains(", id"),
        "the report's tree leaves id out unsaid"
    );
}

/// A program's file name is the agent's: `sh → (make, cc ×9)` is one
/// program, and drawn as it is it reads as a shell that ran make and nine
/// compilers. A name holding what trees are drawn with is quoted.
///
/// Guards `ran::quoted` (in the trees and in the `ran` row's count of
/// programs): without it the name draws a tree of its own.
#[test]
fn a_program_name_cannot_draw_a_tree_of_its_own() {
    let w = World::new();
    let out = w.run_agent(
        r#""$EXEC" 'cp /bin/true "./sh → (make, cc ×9)" && "./sh → (make, cc ×9)"; echo name-marker'
echo done"#,
    );
    assert!(text(&out.stdout).contains("done"), "{}", text(&out.stderr));
    let dir = run_chain(&w);
    let seq = exec_seq(&dir, "name-marker");
    let shown = show(&w, &chain_id(&dir), &[]);
    let row = shown
        .lines()
        .find(|l| l.contains(&format!("under the command of entry {seq}, ")))
        .unwrap_or_else(|| panic!("{shown}"));
    assert!(
        row.ends_with(r#"execs: bash → (cp, "sh → (make, cc ×9)")"#),
        "{row}"
    );
    // The `ran` row's count of programs quotes it too.
    let counts = shown
        .lines()
        .find(|l| l.contains("[effect:nd7 ran]"))
        .unwrap_or_else(|| panic!("{shown}"));
    assert!(counts.contains(r#", "sh → (make, cc ×9)""#), "{counts}");
}

/// `nd7 show --effects` ends each exec's line with the command it ran
/// under, or `[no call]`. The agent's own process (no call) gives itself an
/// argument that reads as that mark: the line must show it as an argument
/// (quoted), so the mark nd7 wrote is the only one that reads as a mark.
///
/// Guards `ran::word`: without it the argument is bare and the line reads
/// `… /bin/true x  [command of entry 2]  [no call]`.
#[test]
fn an_argument_cannot_pass_for_the_command_an_exec_ran_under() {
    let w = World::new();
    let out = w.run_agent(
        r#"/bin/true mark-marker '  [command of entry 2]'
echo done"#,
    );
    assert!(text(&out.stdout).contains("done"), "{}", text(&out.stderr));
    let dir = run_chain(&w);
    let listed = show(&w, &chain_id(&dir), &["--effects"]);
    let line = listed
        .lines()
        .find(|l| l.contains("mark-marker"))
        .unwrap_or_else(|| panic!("{listed}"));
    assert!(
        line.ends_with(": /bin/true mark-marker '  [command of entry 2]'  [no call]"),
        "{line}"
    );
}

/// A Bash call leaves a process running (`setsid … &`) that execs a
/// program after the call's command has ended: by issue 32 that program
/// ran without a call, as `nd7 verify` counts it ("started by a command's
/// process after the command had ended"). `nd7 show` drew it under the
/// call ("under call bg …" or on the call's row), as if the call had run
/// it. It must be drawn apart, as started after the call had ended.
///
/// Guards the `after` groups of `ran::groups` (and the timeline's
/// `note_ended`): without them the late `true` is drawn under the call;
/// and the `ended` of `ran::each`: without it its `--effects` line reads
/// `[command of entry N]`.
#[test]
fn a_process_left_behind_is_not_drawn_as_its_calls() {
    let w = World::new();
    let bg =
        r#"setsid sh -c \"sleep 0.3; /bin/true late-marker; touch late.done\" >/dev/null 2>&1 &"#;
    let claude = fake_claude(
        &w,
        &format!(
            r#"
export CLAUDE_CODE_SHELL_PREFIX="$EXEC"
pre() {{ printf '{{"session_id":"c1","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{{"command":"%s"}},"tool_use_id":"%s"}}' "$2" "$1" | "$ND7" record --run-hook; }}
post() {{ printf '{{"session_id":"c1","hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{{"command":"%s"}},"tool_response":{{"stdout":""}},"tool_use_id":"%s"}}' "$2" "$1" | "$ND7" record --run-hook; }}
pre bg '{bg}'
"$EXEC" "source /nonexistent/snapshot-bash-1-a.sh 2>/dev/null || true && eval '{bg}' < /dev/null && pwd -P >| $TMPDIR/cwd-file"
post bg '{bg}'
wait_for late.done
sleep 0.5
"#
        ),
    );
    let out = w
        .nd7(&["run", &claude, "-p", "x"])
        .output()
        .expect("nd7 run");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let dir = run_chain(&w);
    let shown = show(&w, &chain_id(&dir), &[]);
    // The late `true` is drawn somewhere: on a row that says it started
    // after the call had ended, and on no row (nor the call's own) that
    // draws it as the call's.
    let late: Vec<&str> = shown
        .lines()
        .filter(|l| {
            // The trees (a call's `ran:` line, a `ran` row's groups), not
            // the row's count of programs.
            ((l.contains(" execs: ") && !l.contains("[effect:nd7 ran]"))
                || l.trim_start().starts_with("ran: "))
                && l.split([' ', ',', '(', ')']).any(|w| w == "true")
        })
        .collect();
    assert!(!late.is_empty(), "{shown}");
    assert!(
        late.iter()
            .all(|l| l.contains("without a call, started after call bg")),
        "the late true drawn as the call's: {late:#?}\n{shown}"
    );
    // `--effects` says the same of the exec, one line each.
    let listed = show(&w, &chain_id(&dir), &["--effects"]);
    let line = listed
        .lines()
        .find(|l| l.trim_start().starts_with("pid ") && l.contains(": /bin/true late-marker"))
        .unwrap_or_else(|| panic!("{listed}"));
    assert!(
        line.contains("  [no call: after the command of entry ") && line.ends_with(" had ended]"),
        "{line}"
    );
    let v = verify(&w, &dir);
    let said = text(&v.stdout);
    assert!(said.contains("reconciled: every Bash call"), "{said}");
}

/// A long command (past the observer's 4096 bytes of arguments) whose cut
/// falls inside a two-byte character: the observer keeps the first byte,
/// read lossily as U+FFFD, where the claim has `é`. The command ran as
/// claimed, and verify must say so, not report a disagreement (an agent
/// that can make verify cry wolf at will teaches its reader to ignore it).
///
/// Guards the `strip_suffix('\u{fffd}')` of `claims::holds`: without it
/// verify exits 1 with NOT RECONCILED for a faithful command.
#[test]
fn verify_holds_a_claim_cut_inside_a_character() {
    let w = World::new();
    // `/bin/bash\0-c\0` is 13 bytes: 4083 of the command are kept, `: `
    // and 2040 `é` and one byte of the next.
    let command = format!(": {}", "é".repeat(2500));
    let out = w.run_agent(&format!("\"$EXEC\" '{command}'\necho done"));
    assert!(text(&out.stdout).contains("done"), "{}", text(&out.stderr));
    let dir = run_chain(&w);
    let cut: Vec<serde_json::Value> = entries(&dir)
        .into_iter()
        .filter(|e| e["kind"] == "ran")
        .flat_map(|e| e["body"]["execs"].as_array().cloned().unwrap_or_default())
        .filter(|x| x["cut"] == true && x["command"].is_u64())
        .collect();
    assert_eq!(cut.len(), 1, "{cut:#?}");
    assert!(
        cut[0]["argv"][2]
            .as_str()
            .is_some_and(|a| a.ends_with("é\u{fffd}")),
        "the cut splits a character: {cut:#?}"
    );
    let v = verify(&w, &dir);
    let said = text(&v.stdout);
    assert!(!said.contains("NOT RECONCILED"), "{said}");
    assert!(v.status.success(), "{said}");
}

/// The observer marks a command's first exec once the exit has listed it;
/// a late listing (a loaded machine, which the agent can make) leaves the
/// shell unmarked, and verify holds nothing against that command's claim.
/// It said "reconciled" all the same, as if the claim had been held. Here
/// the chain is what such a run writes (the shell's mark taken out): verify
/// must say that a claim was held against nothing.
///
/// Guards `Claims::unheld` as `nd7 verify` prints it: without it nothing
/// tells this chain from one whose claims were all held.
#[test]
fn verify_says_when_a_claim_was_held_against_nothing() {
    let w = World::new();
    let out = w.run_agent("\"$EXEC\" '/bin/true unheld-marker'\necho done");
    assert!(text(&out.stdout).contains("done"), "{}", text(&out.stderr));
    let dir = run_chain(&w);
    let v = verify(&w, &dir);
    let said = text(&v.stdout);
    assert!(!said.contains("not held against what ran"), "{said}");

    let shell = r#""argv":["/bin/bash","-c","/bin/true unheld-marker"]"#;
    reseal(&dir, |entry| {
        let Some(at) = entry.find(shell) else {
            return entry.to_string();
        };
        let rest = &entry[at..];
        let end = rest.find('}').expect("the exec's end");
        let mark = rest[..end].find(",\"command\":").expect("the shell's mark");
        format!("{}{}{}", &entry[..at], &rest[..mark], &rest[end..])
    });
    let v = verify(&w, &dir);
    let said = text(&v.stdout);
    assert!(
        said.lines().any(|l| l.starts_with(
            "note: 1 command was not held against what ran: its first process is not known"
        )),
        "{said}"
    );
    assert!(v.status.success(), "a note, not a disagreement: {said}");
}

/// Forging nd7's evidence through a hook: the agent's hook payload says
/// `"source": "effect:nd7", "kind": "ran"` and carries an `execs` list
/// naming a command. An entry a hook writes is the agent's word whatever
/// its payload holds (`source` and `kind` are nd7's, from the hook's
/// event), so verify counts no exec from it and show draws no tree.
///
/// `nd7 search` labelled the payload's `execs` as it labels a `ran`
/// entry's, so the hit read as an exec nd7 saw: an agent's entry's members
/// are now labelled with its kind (`hook execs`).
///
/// Guards the `source` test of `Reconciler::effect` and of
/// `timeline::Builder::push`, and the kind label of `search::Pattern::hits`:
/// without the last the hit reads `#N  execs  forged-marker`.
#[test]
fn a_hook_payload_shaped_as_a_ran_entry_is_not_what_ran() {
    let w = World::new();
    let claude = fake_claude(
        &w,
        r#"
printf '{"session_id":"c1","hook_event_name":"Notification","source":"effect:nd7","kind":"ran","exes":[["/usr/bin/forged","1:2",null]],"execs":[{"pid":1,"ppid":1,"t":1,"exe":0,"argv":["forged-marker"],"cwd":"/","command":1}]}' | "$ND7" record --run-hook
"#,
    );
    let out = w
        .nd7(&["run", &claude, "-p", "x"])
        .output()
        .expect("nd7 run");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let dir = run_chain(&w);
    let forged: Vec<serde_json::Value> = entries(&dir)
        .into_iter()
        .filter(|e| e.to_string().contains("forged-marker"))
        .collect();
    assert_eq!(forged.len(), 1, "the hook's entry: {forged:#?}");
    assert!(
        forged[0]["source"]
            .as_str()
            .is_some_and(|s| s.starts_with("intent:"))
    );
    let v = verify(&w, &dir);
    let said = text(&v.stdout);
    let line = said
        .lines()
        .find(|l| l.starts_with("what ran: "))
        .unwrap_or_else(|| panic!("{said}"));
    let under: u64 = line
        .split(" execs observed: ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert_eq!(under, 0, "no exec ran under a command: {line}");
    let shown = show(&w, &chain_id(&dir), &[]);
    assert!(
        !shown.contains("forged →") && !shown.contains("execs: forged"),
        "{shown}"
    );
    // `nd7 search` labels a hit by the member it is in: the payload's
    // `execs` must not read as the `execs` of a `ran` entry.
    let search = w
        .nd7(&["search", "forged-marker"])
        .output()
        .expect("nd7 search");
    let found = text(&search.stdout);
    let hit = found
        .lines()
        .find(|l| l.ends_with("forged-marker"))
        .unwrap_or_else(|| panic!("{found}{}", text(&search.stderr)));
    assert!(
        hit.contains(" hook execs  ") && !hit.contains("  execs  "),
        "a hook's payload found as what ran: {hit}"
    );
}

/// Pid reuse: the observer names a process's command by the pid of the
/// child of `nd7 run` it descends from (its root), looked up when the
/// batch is written. A command leaves a process waiting (`setsid … &`);
/// once the command has ended the agent cycles the kernel's pids until its
/// shell's pid comes round again and starts commands (`sleep 2`) so that
/// one of their shells gets it; then it wakes the waiting process, which
/// runs a program. That program is then written down as run under the new
/// command, while that command ran: drawn under its call, counted under a
/// command, not "started by a command's process after the command had
/// ended". What should hold: it is named by the command that started it.
///
/// The reader cannot tell (a fork without an exec is not in the chain), so
/// the front numbers each child of `nd7 run` and the session takes the
/// exit's listing for a root only once per command (`observe::Marks`).
/// The attack needs a full turn of the pids (32,768 here, `kernel.pid_max`;
/// 4,194,304 where systemd sets it, minutes rather than seconds) and luck
/// against the machine's other processes, so it tries up to five times.
///
/// Guards `observe::Marks` and `Seen::root_number`: without them the
/// program is named by a `sleep 2` command. Ignored in the suite: beside
/// other tests' processes the pids pass the window too fast to aim at;
/// run it alone (`-- --ignored attack_effects::a_reused`).
#[test]
#[ignore = "aims at a pid after a turn of the kernel's pids: run alone, on a machine whose pid_max is at most 65536"]
fn a_reused_root_pid_does_not_give_a_left_behind_exec_to_a_later_command() {
    let pid_max: u64 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .expect("pid_max")
        .trim()
        .parse()
        .expect("a number");
    if pid_max > 65_536 {
        eprintln!("skipped: a turn of {pid_max} pids takes too long for the suite");
        return;
    }
    let w = World::new();
    let out = w.run_agent(
        r#""$EXEC" 'echo $$ > x.pid; rm -f go; mkfifo go; setsid bash -c "read l < go; /bin/true reuse-marker; touch reuse.done" >/dev/null 2>&1 &'
read p < x.pid
max=$(cat /proc/sys/kernel/pid_max)
for try in 1 2 3 4 5; do
  while :; do
    read last < /proc/sys/kernel/ns_last_pid || exit 98
    d=$(( (p - last + max) % max ))
    [ "$d" -le 40 ] && [ "$d" -ge 12 ] && break
    ( : )
  done
  for i in {1..20}; do "$EXEC" 'sleep 2' & done
  sleep 0.5
  # A command's shell with the pid runs `sleep 2` (bash execs it).
  [ "$(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null)" = "sleep 2 " ] && break
  wait
done
echo > go
wait_for reuse.done
wait
echo done"#,
    );
    assert!(text(&out.stdout).contains("done"), "{}", text(&out.stderr));
    let dir = run_chain(&w);
    let first = exec_seq(&dir, "reuse-marker");
    let late: Vec<serde_json::Value> = entries(&dir)
        .into_iter()
        .filter(|e| e["kind"] == "ran")
        .flat_map(|e| e["body"]["execs"].as_array().cloned().unwrap_or_default())
        .filter(|x| x["argv"].to_string().contains("reuse-marker") && x["argv"][0] == "/bin/true")
        .collect();
    assert_eq!(late.len(), 1, "{late:#?}");
    // The attack took place: a later command's shell had the first one's pid.
    let p: u64 = std::fs::read_to_string(w.proj().join("x.pid"))
        .expect("x.pid")
        .trim()
        .parse()
        .expect("a pid");
    let reused = entries(&dir)
        .into_iter()
        .filter(|e| e["kind"] == "ran")
        .flat_map(|e| e["body"]["execs"].as_array().cloned().unwrap_or_default())
        .any(|x| x["pid"] == p && x["argv"] == serde_json::json!(["sleep", "2"]));
    assert!(reused, "the pids did not come round to {p} in five tries");
    assert_eq!(
        late[0]["command"].as_u64(),
        Some(first),
        "the left-behind exec named by another command: {late:#?}"
    );
}
