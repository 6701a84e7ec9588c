//! What ran (issue 32), read back: `nd7 verify` holds what the exit claimed
//! it ran against what the kernel ran (ADR-0137), and `nd7 show` says what
//! ran under each command. The runs are real (`nd7 run` as the ordinary
//! account, the agent a shell script); a chain whose claim and effect
//! disagree is made by rewriting a real one and sealing it again, as anyone
//! who can write the logs could.
#![cfg(target_os = "linux")]

use std::path::Path;

use nd7_core::chain::{self, Hash};

use crate::runs::*;
use crate::world::*;

/// Rewrites the chain in `dir` with `edit` applied to each entry (without
/// its `prev` and hash), sealing every entry and `head` again, so the chain
/// itself verifies.
fn reseal(dir: &Path, edit: impl Fn(&str) -> String) {
    let session = dir
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
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

/// The exit's `exec` entry claims the text it hands the shell; the observer
/// reads what the command's first process became after its exec. A real run
/// agrees (exit 0); the same chain with the `exec` entry's text changed and
/// sealed again (a claim the kernel did not run) is a disagreement: verify
/// exits 1 and names the claim and what ran, path, identity and arguments.
///
/// Guards `read::claims` as `nd7 verify`'s `report_claims` uses it: without
/// it the rewritten chain verifies clean.
#[test]
fn verify_names_a_claimed_command_its_first_process_did_not_run() {
    let w = World::new();
    let out = w.run_agent(
        r#""$EXEC" '/bin/true claim-marker'
echo done"#,
    );
    assert!(text(&out.stdout).contains("done"), "{}", text(&out.stderr));
    let dir = run_chain(&w);
    let v = verify(&w, &dir);
    let said = text(&v.stdout);
    assert!(v.status.success(), "{said}");
    assert!(!said.contains("NOT RECONCILED"), "{said}");
    let exec_seq = entries(&dir)
        .iter()
        .find(|e| e["kind"] == "exec" && e["source"] == "exit:nd7")
        .map(|e| e["seq"].clone())
        .expect("the command's exec entry");

    reseal(&dir, |entry| {
        if entry.contains(r#""kind":"exec""#) && entry.contains(r#""source":"exit:nd7""#) {
            entry.replace("claim-marker", "harmless-marker")
        } else {
            entry.to_string()
        }
    });
    let v = verify(&w, &dir);
    let said = text(&v.stdout);
    assert_eq!(v.status.code(), Some(1), "{said}{}", text(&v.stderr));
    let line = said
        .lines()
        .find(|l| l.starts_with(&format!("NOT RECONCILED: entry {exec_seq}: ")))
        .unwrap_or_else(|| panic!("{said}"));
    assert!(
        line.contains("command `/bin/true harmless-marker` was claimed by the exit"),
        "{line}"
    );
    assert!(
        line.contains("with arguments `") && line.ends_with(" -c /bin/true claim-marker`"),
        "{line}"
    );
    let bash = std::fs::canonicalize("/bin/bash").expect("bash");
    let meta = std::fs::metadata(&bash).expect("bash");
    let hash = blake3::hash(&std::fs::read(&bash).expect("bash")).to_hex();
    use std::os::unix::fs::MetadataExt;
    assert!(
        line.contains(&format!(
            "ran {} ({}:{}, blake3 {hash})",
            bash.display(),
            meta.dev(),
            meta.ino()
        )),
        "{line}"
    );
}

/// Claude Code's Bash tool line for `command` (as tests/it/effects.rs
/// writes it).
fn tool_line(command: &str) -> String {
    format!(
        "\"source /nonexistent/snapshot-bash-1-a.sh 2>/dev/null || true && eval '{command}' < /dev/null && pwd -P >| $TMPDIR/cwd-file\""
    )
}

/// Headless Chromium's DOM of the page `html` (as tests/it/report_html.rs
/// runs it: Debian's `chromium`, a fresh profile, no network).
fn rendered(html: &[u8]) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let page = dir.path().join("report.html");
    std::fs::write(&page, html).expect("write the report");
    let out = std::process::Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--dump-dom",
        ])
        .arg(format!(
            "--user-data-dir={}",
            dir.path().join("profile").display()
        ))
        .arg(format!("file://{}", page.display()))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run chromium ({e}): apt-get install chromium; scripts/test.sh does")
        });
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

/// A scripted Claude Code session whose one Bash call runs two programs:
/// `nd7 show` draws what the call's command ran as a collapsed tree, on the
/// call's row while the call is still open, else on the `ran` entry's row
/// naming the call and its command; `--effects` lists every exec with its
/// arguments; the HTML report, rendered by Chromium, holds the same tree
/// and every exec; `nd7 search` finds the executable.
///
/// Guards `read::ran` as `timeline::Builder::fold_ran`, the text view and
/// the HTML report use it: without it no line draws the tree.
#[test]
fn show_draws_what_each_call_ran_and_effects_lists_every_exec() {
    let w = World::new();
    let command = "/bin/true tree-marker; /bin/true tree-marker";
    let claude = fake_claude(
        &w,
        &format!(
            r#"
export CLAUDE_CODE_SHELL_PREFIX="$EXEC"
pre() {{ printf '{{"session_id":"c1","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{{"command":"%s"}},"tool_use_id":"%s"}}' "$2" "$1" | "$ND7" record --run-hook; }}
post() {{ printf '{{"session_id":"c1","hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{{"command":"%s"}},"tool_response":{{"stdout":""}},"tool_use_id":"%s"}}' "$2" "$1" | "$ND7" record --run-hook; }}
pre tc1 '{command}'
"$EXEC" {line}
post tc1 '{command}'
"#,
            line = tool_line(command),
        ),
    );
    let out = w
        .nd7(&["run", &claude, "-p", "x"])
        .output()
        .expect("nd7 run");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let dir = run_chain(&w);
    let id = dir
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    let exec_seq = entries(&dir)
        .iter()
        .find(|e| e["kind"] == "exec" && e["tool_use_id"] == "tc1")
        .map(|e| e["seq"].clone())
        .unwrap_or_else(|| panic!("no exec for the call: {:#?}", entries(&dir)));

    let show = w.nd7(&["show", &id]).output().expect("nd7 show");
    let shown = text(&show.stdout);
    let tree = "bash → true ×2";
    let on_the_call = shown
        .split_once(&format!("$ {command}"))
        .and_then(|(_, after)| {
            after
                .lines()
                .take(4)
                .find(|l| l.trim() == format!("ran: {tree}"))
        })
        .is_some();
    let naming_the_call = shown
        .lines()
        .any(|l| l.trim() == format!("under call tc1 ($ {command}), 3 execs: {tree}"));
    assert!(
        on_the_call || naming_the_call,
        "{shown}{}",
        text(&show.stderr)
    );

    let effects = w
        .nd7(&["show", "--effects", &id])
        .output()
        .expect("nd7 show --effects");
    let listed = text(&effects.stdout);
    let each: Vec<&str> = listed
        .lines()
        .filter(|l| l.contains("/usr/bin/true: /bin/true tree-marker"))
        .collect();
    assert_eq!(each.len(), 2, "{listed}");
    assert!(
        each.iter()
            .all(|l| l.ends_with(&format!("[command of entry {exec_seq}]"))),
        "{each:?}"
    );

    let html = w
        .nd7(&["show", "--html", &id])
        .output()
        .expect("nd7 show --html");
    assert!(html.status.success(), "{}", text(&html.stderr));
    let dom = rendered(&html.stdout);
    assert!(
        dom.contains(&format!("ran: <code>{tree}</code>"))
            || dom.contains(&format!("), 3 execs: <code>{tree}</code>")),
        "{dom}"
    );
    assert!(dom.contains("<summary>every exec ("), "{dom}");
    assert!(
        dom.contains("/usr/bin/true: /bin/true tree-marker  [command of entry"),
        "{dom}"
    );

    // `nd7 search` finds the executable (as the kernel ran it) across the
    // sessions, as it finds arguments (tests/it/effects.rs).
    let search = w
        .nd7(&["search", "/usr/bin/true"])
        .output()
        .expect("nd7 search");
    let found = text(&search.stdout);
    assert!(
        found
            .lines()
            .any(|l| l.contains(" exes ") && l.ends_with("/usr/bin/true")),
        "{found}{}",
        text(&search.stderr)
    );
}

/// A run in which what ran is not observed (here the kernel's refusal of
/// the trace, by the `no-ptrace` fault; on macOS always, by the same
/// entry and banner) says so in the banner, in the chain (`not_observed`,
/// `count` null, no `ran`), in `nd7 show`, and in `nd7 verify`.
///
/// Guards `timeline::not_observed_summary`: without it `nd7 show` gives
/// only the body's scalars.
#[test]
fn a_run_that_observes_nothing_says_so_everywhere() {
    let w = World::new();
    let agent = w.agent(
        r#""$EXEC" '/bin/true unobserved-marker'
echo done"#,
    );
    let out = w
        .nd7(&["run", &agent])
        .env("ND7_FAULT", "no-ptrace")
        .output()
        .expect("nd7 run");
    assert!(text(&out.stdout).contains("done"), "{}", text(&out.stderr));
    let why = "the kernel refused nd7 run's front tracing the run";
    assert!(
        text(&out.stderr).contains(&format!(
            "nd7 run: what ran is not observed in this run ({why}"
        )),
        "{}",
        text(&out.stderr)
    );
    let dir = run_chain(&w);
    let effects: Vec<serde_json::Value> = entries(&dir)
        .into_iter()
        .filter(|e| e["source"] == "effect:nd7")
        .collect();
    assert_eq!(effects.len(), 1, "{effects:#?}");
    assert_eq!(effects[0]["kind"], "not_observed");
    assert!(effects[0]["body"]["count"].is_null(), "{effects:#?}");

    let id = dir
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    let show = w.nd7(&["show", &id]).output().expect("nd7 show");
    let shown = text(&show.stdout);
    assert!(
        shown.lines().any(|l| l.contains(&format!(
            "[effect:nd7 not_observed] what ran is not observed in this run: {why}"
        ))),
        "{shown}"
    );
    let v = verify(&w, &dir);
    let said = text(&v.stdout);
    assert!(
        said.lines()
            .any(|l| l.starts_with(&format!("what ran: not observed in this run ({why}"))),
        "{said}"
    );
}
