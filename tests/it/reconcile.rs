//! `nd7 verify`'s reconciliation of a run: which Bash call a command through
//! the exit is logged under, and what verify says of the two. The agent (a
//! shell script standing in for Claude Code under `nd7 run`, as the
//! ordinary account) crafts a tool line that names a harmless command, runs
//! a call its user denied (bare through the exit, from inside an allowed
//! command, or dressed as Claude Code's own tool line), or kills its own
//! `nd7 run`: none of it may read as "reconciled". Each test names the line
//! that closes it (ADR-0067, `Pairing::ToolLine`, the `run_end` check).
#![cfg(target_os = "linux")]

use crate::runs::{entries, fake_claude, run_chain, verify};
use crate::world::*;

fn run_entries(w: &World) -> Vec<serde_json::Value> {
    let logs = w.home().join(".local/state/nd7/sessions");
    let mut out = Vec::new();
    for dir in std::fs::read_dir(logs).expect("logs").flatten() {
        if dir.file_name().to_string_lossy().starts_with("run-") {
            let text = std::fs::read_to_string(dir.path().join("events.ndjson")).expect("log");
            out.extend(
                text.lines()
                    .map(|l| serde_json::from_str(l).expect("an entry")),
            );
        }
    }
    out
}

/// The exit names a command's `bash_command` (the model's command, by which
/// `nd7 verify` holds it against its Bash call) by reading Claude Code's
/// tool line back: the first `eval WORD` from which the line's tail
/// (`&& pwd -P >| FILE`) runs to its end. Everything before that `eval` is
/// taken to be Claude Code's set-up and is not checked, so a line sent by
/// the agent itself, `touch pwned && eval 'echo hi' && pwd -P >| FILE`, runs
/// both commands and goes into the log as `bash_command: "echo hi"`: a
/// reconciliation or a reader that trusts `bash_command` sees the harmless
/// one. The full line is in the same entry's `command`, so the record is not
/// lost, only misnamed.
///
/// Guards `shell_prefix::known_setup` as `run_entry::bash_command` uses it
/// (ADR-0067): with any set-up taken as Claude Code's, the entry names
/// `echo hi` again.
#[test]
fn a_crafted_tool_line_is_not_logged_as_a_harmless_command() {
    let w = World::new();
    let out = w.run_agent(
        r#"export CLAUDE_CODE_SHELL_PREFIX="$EXEC"
"$EXEC" "touch pwned.txt && eval 'echo hi' && pwd -P >| $TMPDIR/cwd-file"
echo status:$?
"#,
    );
    let said = text(&out.stdout);
    assert!(said.contains("status:0"), "{said} {}", text(&out.stderr));
    let ran_more = w.proj().join("pwned.txt").exists();
    let execs: Vec<serde_json::Value> = run_entries(&w)
        .into_iter()
        .filter(|e| e["source"] == "exit:nd7" && e["kind"] == "exec")
        .collect();
    assert_eq!(execs.len(), 1, "{execs:?}");
    let named = execs[0]["body"]["bash_command"]
        .as_str()
        .map(str::to_string);
    assert!(
        !(ran_more && named.as_deref() == Some("echo hi")),
        "the log names `echo hi` while `touch pwned.txt` ran too: {}",
        execs[0]
    );
}

/// Claude Code's Bash tool line for `command`, in double quotes for a
/// script, so that `$TMPDIR` is expanded there.
fn tool_line(command: &str) -> String {
    format!(
        "\"source /nonexistent/snapshot-bash-1-a.sh 2>/dev/null || true && eval '{command}' < /dev/null && pwd -P >| $TMPDIR/cwd-file\""
    )
}

/// A stand-in for Claude Code whose user denies the Bash call `touch
/// denied-ran` (a PreToolUse with no result), then allows `sh run.sh`, sent
/// to the exit as Claude Code's own tool line. The agent runs the denied
/// command anyway, from inside the allowed one (`inside`, run.sh's body) or
/// from the floor (`floor`, after it), and would have the log say the denied
/// call was the one that ran. Returns `nd7 verify`'s report (with what
/// `nd7 run` said) and status, and the run's `exec` entries.
fn denied_then_run(inside: &str, floor: &str) -> (String, Option<i32>, Vec<serde_json::Value>) {
    use crate::runs::*;
    let w = World::new();
    std::fs::write(
        w.proj().join("run.sh"),
        format!("ND7_EXEC='{ND7_EXEC}'\n{inside}\n"),
    )
    .expect("run.sh");
    let claude = fake_claude(
        &w,
        &format!(
            r#"
export CLAUDE_CODE_SHELL_PREFIX="$EXEC"
pre() {{ printf '{{"session_id":"c1","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{{"command":"%s"}},"tool_use_id":"%s"}}' "$2" "$1" | "$ND7" record --run-hook; }}
post() {{ printf '{{"session_id":"c1","hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{{"command":"%s"}},"tool_response":{{"stdout":""}},"tool_use_id":"%s"}}' "$2" "$1" | "$ND7" record --run-hook; }}
pre denied 'touch denied-ran'
pre allowed 'sh run.sh'
"$EXEC" {allowed}
post allowed 'sh run.sh'
{floor}
"#,
            allowed = tool_line("sh run.sh"),
        ),
    );
    let out = w
        .nd7(&["run", &claude, "-p", "x"])
        .output()
        .expect("nd7 run");
    let said = format!(
        "--- nd7 run said\n{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        w.proj().join("denied-ran").exists(),
        "the attack ran: {said}"
    );
    let dir = run_chain(&w);
    let execs = entries(&dir)
        .into_iter()
        .filter(|e| e["source"] == "exit:nd7" && e["kind"] == "exec")
        .collect();
    let v = verify(&w, &dir);
    (
        format!("{}\n{said}", text(&v.stdout)),
        v.status.code(),
        execs,
    )
}

/// Claude Code's user denied `touch denied-ran`; the agent sent the same
/// text to the exit itself (`nd7-exec` with the shell prefix unset runs any
/// text through the exit). The exit paired a command with a Bash call by its
/// exact text whatever its form, so the command took the denied call's
/// `tool_use_id` and `nd7 verify` said "reconciled": the log read as if the
/// user had allowed it.
///
/// Guards `Pairing::ToolLine` (run_entry.rs), by which under Claude Code only
/// a tool line's `bash_command` can pair, at the exit (`exec_started_inside`)
/// and in verify's `Reconciler`.
#[test]
fn a_denied_call_sent_to_the_exit_bare_is_not_reconciled() {
    let (report, status, execs) = denied_then_run(
        "",
        "(unset CLAUDE_CODE_SHELL_PREFIX; \"$EXEC\" 'touch denied-ran')",
    );
    assert_eq!(execs.len(), 2, "{execs:#?} {report}");
    assert!(execs[1]["tool_use_id"].is_null(), "{}", execs[1]);
    assert_eq!(status, Some(1), "{report}");
    assert!(!report.contains("\nreconciled"), "{report}");
    assert!(
        report.contains(&format!(
            "NOT RECONCILED: entry {}: command `touch denied-ran` ran through the exit with no Bash call announcing it",
            execs[1]["seq"]
        )),
        "{report}"
    );
}

/// The same from inside the allowed command, bare or dressed as Claude
/// Code's own tool line (so that it has a `bash_command` naming the denied
/// call's text): the command is part of the allowed one, which is what the
/// user allowed, and never the denied call's.
///
/// Guards the `inside` look-up in the Linux exit's `serve_one` (the caller's
/// ancestry through a command the exit runs) and the `Reconciler`'s
/// `nested_execs`, which never pair: without them the tool line claims the
/// denied call, whose missing result alone then shows it.
#[test]
fn a_denied_call_run_from_inside_another_is_part_of_that_one() {
    let nested_line = "source /x 2>/dev/null || true && eval 'touch denied-ran' < /dev/null && pwd -P >| $TMPDIR/cwd2";
    for inside in [
        "unset CLAUDE_CODE_SHELL_PREFIX; \"$ND7_EXEC\" 'touch denied-ran'".to_string(),
        format!("unset CLAUDE_CODE_SHELL_PREFIX; \"$ND7_EXEC\" \"{nested_line}\""),
    ] {
        let (report, status, execs) = denied_then_run(&inside, "");
        assert_eq!(execs.len(), 2, "{execs:#?} {report}");
        assert!(execs[1]["tool_use_id"].is_null(), "{}", execs[1]);
        assert_eq!(execs[1]["body"]["inside"], execs[0]["seq"], "{}", execs[1]);
        assert!(
            report.contains(&format!(
                "note: entry {}: command `touch denied-ran` was asked for from inside the command of entry {}",
                execs[1]["seq"], execs[0]["seq"]
            )),
            "{report}"
        );
        assert!(report.contains("note: 1 Bash call never ran"), "{report}");
        assert!(!report.contains("NOT RECONCILED"), "{report}");
        assert_eq!(status, Some(0), "{report}");
    }
}

/// The same from the floor as Claude Code's tool line (a hook or MCP server
/// the agent planted can call the exit so): the line claims the denied
/// call by its text, but Claude Code never reports a result for it.
///
/// Guards `Reconciliation::execs_without_result`, counted in `agrees`.
#[test]
fn a_tool_line_for_a_denied_call_is_a_command_without_a_result() {
    let (report, status, execs) =
        denied_then_run("", &format!("\"$EXEC\" {}", tool_line("touch denied-ran")));
    assert_eq!(execs.len(), 2, "{execs:#?} {report}");
    assert_eq!(execs[1]["tool_use_id"], "denied", "{}", execs[1]);
    assert_eq!(status, Some(1), "{report}");
    assert!(
        report.contains(&format!(
            "NOT RECONCILED: entry {}: command `touch denied-ran` ran through the exit for Bash call denied, but Claude Code reported no result for that call",
            execs[1]["seq"]
        )),
        "{report}"
    );
    assert!(
        report.contains("nd7 run: warning: 1 of 2 Bash commands ran through the exit for a Bash call Claude Code reported no result for"),
        "{report}"
    );
}

/// The agent kills its own `nd7 run` and works on under the floor: every
/// later hook records nothing, and the chain simply stops. `nd7 verify` said
/// "verified … reconciled" and exited 0, as for a run that ended. Broke
/// through; guards the `run_end` check in `report_reconciliation`
/// (`src/bin/nd7.rs`): without it verify passes this chain.
#[test]
fn verify_does_not_pass_a_run_whose_nd7_run_was_killed_from_inside() {
    let w = World::new();
    let claude = fake_claude(
        &w,
        r#"
pre() { printf '{"session_id":"c1","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"%s"},"tool_use_id":"%s"}' "$2" "$1" | "$ND7" record --run-hook; }
pre t1 'echo one'; "$EXEC" 'echo one' > /dev/null
kill -KILL $PPID
pre t2 'touch unrecorded' 2>/dev/null
touch unrecorded
"#,
    );
    let out = w
        .nd7(&["run", &claude, "-p", "x"])
        .output()
        .expect("nd7 run");
    // The session process is killed; the keeper (the `nd7 run` the user
    // started) ends the rest and exits as the session did: 128 + SIGKILL.
    assert!(
        out.status.code().is_none() || out.status.code() == Some(128 + 9),
        "nd7 run was killed: {:?}",
        out.status
    );
    let dir = run_chain(&w);
    assert!(
        !entries(&dir).iter().any(|x| x["kind"] == "run_end"),
        "the chain stops before run_end"
    );
    let v = verify(&w, &dir);
    let report = text(&v.stdout);
    assert_eq!(v.status.code(), Some(1), "{report}");
    assert!(
        report.contains("NOT ENDED: the run's chain has no run_end"),
        "{report}"
    );
    assert!(!report.contains("\nreconciled"), "{report}");
}
