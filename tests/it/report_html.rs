//! `nd7 show --html` rendered by a real headless Chromium (Debian's
//! `chromium`): the page loads with nothing from the network, its rendered
//! DOM holds the timeline, the verdict and its caveat, and a log's
//! `<script>` and event-handler payloads stay text. A screenshot is kept as a
//! test artefact in `target/tmp/artefacts/`. Without Chromium the test fails
//! and says how to install it; it never skips.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::*;

const CHROMIUM: &str = "chromium";

/// Runs headless Chromium on `page` with `args`, in a fresh profile.
fn chromium(page: &Path, args: &[&str]) -> Output {
    let profile = tempfile::tempdir().expect("profile dir");
    let mut child = Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot run {CHROMIUM} ({e}): install Debian's chromium package (apt-get install chromium); scripts/test.sh does")
        });
    // Reading both pipes to the end; a hang is a failure, not a wait.
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{CHROMIUM} did not finish in 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("chromium output")
}

/// Keeps a screenshot of `page`, `height` pixels tall, as the test artefact
/// `name` in `target/tmp/artefacts/`.
fn screenshot(page: &Path, name: &str, height: u32) {
    let artefacts = Path::new(env!("CARGO_TARGET_TMPDIR")).join("artefacts");
    std::fs::create_dir_all(&artefacts).expect("artefacts dir");
    let shot = artefacts.join(name);
    let _ = std::fs::remove_file(&shot);
    let out = chromium(
        page,
        &[
            &format!("--screenshot={}", shot.display()),
            &format!("--window-size=1280,{height}"),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let png = std::fs::read(&shot).expect("the screenshot was written");
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 20_000,
        "{} bytes",
        png.len()
    );
    eprintln!("screenshot kept at {}", shot.display());
}

/// Guards the escaping in `read::safe::html` as a browser sees it: with `<`
/// passed through, Chromium's DOM holds the payload's `<script>` element and
/// this test fails (seen). The page's Content-Security-Policy, the second
/// wall, is checked by `read::html`'s unit test.
#[test]
fn the_report_renders_in_headless_chromium_with_the_log_inert() {
    let state = State::new();
    let hostile = "<script>document.title='PWNED';document.body.innerHTML='PWNED'</script>\
                   <img src=x onerror=\"document.title='PWNED'\">\u{1b}]0;owned\u{7}";
    let base = json!({"session_id": "s-html", "cwd": "/home/dev/proj", "transcript_path": transcript_path("s-html", "/home/dev/proj")});
    let payloads = [
        json!({"hook_event_name": "SessionStart", "source": "startup"}),
        json!({"hook_event_name": "UserPromptSubmit", "prompt": format!("fix the build {hostile}")}),
        json!({"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_use_id": "t1",
               "tool_input": {"command": "cargo build --release"}}),
        json!({"hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_use_id": "t1",
               "tool_input": {"command": "cargo build --release"},
               "tool_response": {"stdout": (1..=40).map(|i| format!("Compiling crate-{i}\n")).collect::<String>(), "stderr": ""},
               "duration_ms": 9000}),
        json!({"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_use_id": "t2",
               "tool_input": {"command": format!("cat notes.txt # {hostile}")}}),
        json!({"hook_event_name": "PostToolUseFailure", "tool_name": "Bash", "tool_use_id": "t2",
               "tool_input": {"command": "cat notes.txt"}, "error": format!("Exit code 1\n{hostile}")}),
        json!({"hook_event_name": "SessionEnd", "reason": "prompt_input_exit"}),
    ];
    for p in payloads {
        let mut whole = base.clone();
        for (k, v) in p.as_object().expect("object") {
            whole[k] = v.clone();
        }
        let out = state.record(whole.to_string().as_bytes());
        assert!(out.stderr.is_empty(), "{}", stderr(&out));
    }
    let out = state
        .nd7()
        .args(["show", "--html", "s-html"])
        .output()
        .expect("nd7 show --html");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let dir = tempfile::tempdir().expect("tempdir");
    let page = dir.path().join("report.html");
    std::fs::write(&page, &out.stdout).expect("write the report");

    let dom = chromium(&page, &["--dump-dom"]);
    assert!(dom.status.success(), "{}", stderr(&dom));
    let dom = stdout(&dom);
    // The title the page set, not one a payload set.
    assert!(dom.contains("<title>nd7 session s-html</title>"), "{dom}");
    for text in [
        "nd7 session report",
        "Chain verification",
        "Clean</span>: 7 entries",
        "not third-party evidence",
        "not effect, what actually ran",
        "Sandbox rules and grants",
        "$ cargo build --release",
        "exit 1",
        "FAILED",
        "output (40 lines)",
        "Compiling crate-40",
        "session ended (prompt_input_exit)",
    ] {
        assert!(
            dom.contains(text),
            "{text:?} is not in the rendered page:\n{dom}"
        );
    }
    // The payloads are text in the page, never elements: no script ran and
    // none is there to run.
    assert!(!dom.contains("<script"), "{dom}");
    assert!(!dom.contains("<img"), "{dom}");
    assert!(!dom.contains("<title>PWNED"), "{dom}");
    assert!(
        dom.contains("&lt;script&gt;document.title='PWNED'"),
        "{dom}"
    );
    assert!(dom.contains("\\x1b]0;owned\\x07"), "{dom}");

    screenshot(&page, "nd7-show-html.png", 1600);
}

/// A real run's chain, built as `nd7 run` writes it: the fixture payloads
/// of Claude Code 2.1.197 through the run's door, their Bash call through
/// the exit, a grant the run started with (`--allow`), one `nd7 allow` gave
/// mid-run, and that grant dropped when its path came to lead elsewhere.
/// Returns the world and the chain's id.
#[cfg(target_os = "linux")]
fn run_chain_with_grants() -> (crate::world::World, String) {
    use crate::runs::{fake_claude, lines, run_chain};
    use crate::world::text;
    let w = crate::world::World::new();
    let fixture = fixture_payloads();
    std::fs::write(
        w.proj().join("before.ndjson"),
        fixture[..3].join("\n") + "\n",
    )
    .expect("write");
    std::fs::write(
        w.proj().join("between.ndjson"),
        fixture[3..5].join("\n") + "\n",
    )
    .expect("write");
    std::fs::write(
        w.proj().join("after.ndjson"),
        fixture[5..].join("\n") + "\n",
    )
    .expect("write");
    let claude = fake_claude(
        &w,
        r#"
unset CLAUDE_CODE_SHELL_PREFIX
hooks() { while IFS= read -r p; do printf '%s' "$p" | "$ND7" record --run-hook; done < "$1"; }
line() { printf "source /x 2>/dev/null || true && eval '%s' < /dev/null && pwd -P >| %s" "$1" "$TMPDIR/cwd"; }
hooks before.ndjson
"$EXEC" "$(line 'echo hello-from-model')" > /dev/null; echo "first:$?"
hooks between.ndjson
touch stage1; wait_for go1
cmd="touch '$OUT/granted/x'"
printf '{"session_id":"s","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"%s"},"tool_use_id":"t2"}' "$cmd" | "$ND7" record --run-hook
"$EXEC" "$cmd" 2> /dev/null; st=$?; echo "second:$st"
printf '{"session_id":"s","hook_event_name":"PostToolUseFailure","tool_name":"Bash","tool_input":{"command":"%s"},"tool_use_id":"t2","error":"Exit code %s"}' "$cmd" "$st" | "$ND7" record --run-hook
hooks after.ndjson
"#,
    );
    let start = w.outside().join("start");
    let granted = w.outside().join("granted");
    std::fs::create_dir_all(&start).expect("mkdir");
    std::fs::create_dir_all(&granted).expect("mkdir");
    let child = w
        .nd7(&["run", "--allow", &start.display().to_string(), &claude])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nd7 run");
    w.wait_for("stage1");
    let allow = w
        .nd7(&["allow", &granted.display().to_string()])
        .output()
        .expect("nd7 allow");
    assert!(allow.status.success(), "{}", text(&allow.stderr));
    // The granted path now leads to another directory than the one pinned.
    std::fs::rename(&granted, w.outside().join("granted-before")).expect("move");
    std::fs::create_dir(&granted).expect("mkdir");
    w.signal("go1");
    let out = child.wait_with_output().expect("nd7 run ends");
    assert_eq!(
        lines(&out),
        ["first:0", "second:1"],
        "{}",
        text(&out.stderr)
    );
    let chain = run_chain(&w);
    let id = chain
        .file_name()
        .expect("a name")
        .to_string_lossy()
        .into_owned();
    (w, id)
}

/// A run's chain shows its rules and grants in every view: `nd7 show`'s
/// timeline, its NDJSON, and the report's "Sandbox rules and grants" as a
/// headless Chromium renders it (`run_start` with the rules and the grants
/// it started with, `grant`, `grant_dropped` with why). The fixture's call
/// is paired with its result and marked as run through the exit.
#[cfg(target_os = "linux")]
#[test]
fn a_run_chain_shows_its_rules_and_grants_in_every_view() {
    use crate::world::text;
    let (w, id) = run_chain_with_grants();
    let project = w.proj().display().to_string();
    let start = w.outside().join("start").display().to_string();
    let granted = w.outside().join("granted").display().to_string();

    let show = w.nd7(&["show", &id]).output().expect("nd7 show");
    assert_eq!(show.status.code(), Some(0), "{}", text(&show.stderr));
    let timeline = text(&show.stdout);
    let dropped = "why=its path now leads to another directory than the one pinned";
    for line in [
        format!("[exit:nd7 run_start] project={project} grants={start} pid="),
        format!("[exit:nd7 grant] change=allow path={granted}"),
        format!("[exit:nd7 grant_dropped] path={granted} grant=true {dropped}"),
        "ok       Bash $ echo hello-from-model".to_string(),
        format!("FAILED   Bash $ touch '{granted}/x'  (exit 1, "),
        "chain     clean: ".to_string(),
    ] {
        assert!(timeline.contains(&line), "{line:?} is not in:\n{timeline}");
    }

    let json = w
        .nd7(&["show", "--json", &id])
        .output()
        .expect("nd7 show --json");
    assert_eq!(json.status.code(), Some(0), "{}", text(&json.stderr));
    let items: Vec<serde_json::Value> = text(&json.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("an NDJSON line"))
        .collect();
    let kind = |k: &str| -> Vec<&serde_json::Value> {
        items
            .iter()
            .filter(|i| i["kind"] == k && i["source"] == "exit:nd7")
            .collect()
    };
    let run_start = kind("run_start");
    assert_eq!(run_start.len(), 1, "{items:?}");
    assert_eq!(run_start[0]["body"]["rules"]["project"], project);
    assert_eq!(run_start[0]["body"]["rules"]["grants"], json!([start]));
    assert_eq!(
        run_start[0]["body"]["grants"],
        json!([{"path": start, "from": "--allow"}])
    );
    let grant = kind("grant");
    assert_eq!(grant.len(), 1, "{items:?}");
    assert_eq!(grant[0]["body"]["change"], "allow");
    assert_eq!(grant[0]["body"]["path"], granted);
    let dropped_entries = kind("grant_dropped");
    assert_eq!(dropped_entries.len(), 1, "{items:?}");
    assert_eq!(dropped_entries[0]["body"]["path"], granted);
    assert_eq!(dropped_entries[0]["class"], "grant");
    let tools: Vec<_> = items.iter().filter(|i| i["type"] == "tool").collect();
    assert_eq!(tools.len(), 2, "{items:?}");
    assert_eq!(
        (
            &tools[0]["tool_use_id"],
            &tools[0]["status"],
            &tools[0]["routed"]
        ),
        (&json!("toolu_mock_0001"), &json!("ok"), &json!(true))
    );
    assert_eq!(
        (&tools[1]["status"], &tools[1]["exit_code"]),
        (&json!("failed"), &json!(1))
    );
    assert_eq!(items.last().expect("the chain")["state"], "clean");

    let html = w
        .nd7(&["show", "--html", &id])
        .output()
        .expect("nd7 show --html");
    assert_eq!(html.status.code(), Some(0), "{}", text(&html.stderr));
    let dir = tempfile::tempdir().expect("tempdir");
    let page = dir.path().join("run-report.html");
    std::fs::write(&page, &html.stdout).expect("write the report");
    let dom = chromium(&page, &["--dump-dom"]);
    assert!(dom.status.success(), "{}", stderr(&dom));
    let dom = stdout(&dom);
    let sandbox = dom
        .split("<section id=\"sandbox\">")
        .nth(1)
        .and_then(|rest| rest.split("</section>").next())
        .unwrap_or_else(|| panic!("no sandbox section in:\n{dom}"));
    for text in [
        "Sandbox rules and grants",
        "ran under nd7 run",
        &format!(
            "#0 run_start (exit:nd7)</h3><p class=\"mono\">project={project} grants={start} pid="
        ),
        &format!("\"project\": \"{project}\""),
        &format!("\"path\": \"{start}\",\n      \"from\": \"--allow\""),
        " grant (exit:nd7)</h3>",
        "\"change\": \"allow\"",
        &format!("\"path\": \"{granted}\""),
        " grant_dropped (exit:nd7)</h3>",
        "\"why\": \"its path now leads to another directory than the one pinned\"",
    ] {
        assert!(
            sandbox.contains(text),
            "{text:?} is not in the sandbox section:\n{sandbox}"
        );
    }
    // The rules and the grants as tables a reviewer reads.
    for text in [
        "<td>Writable by commands</td>",
        &format!("<code>{project}</code>"),
        &format!("<td>granted at start</td><td><code>{start}</code></td><td>from --allow</td>"),
        &format!("<td>allow</td><td><code>{granted}</code></td>"),
        &format!(
            "<td>dropped</td><td><code>{granted}</code></td><td>its path now leads to another directory than the one pinned</td>"
        ),
        "Nothing was refused.",
    ] {
        assert!(
            sandbox.contains(text),
            "{text:?} is not in the sandbox section:\n{sandbox}"
        );
    }
    for text in [
        "$ echo hello-from-model",
        "via nd7-exec",
        "Clean</span>: ",
        &format!("[exit:nd7 grant_dropped]</code> path={granted}"),
    ] {
        assert!(
            dom.contains(text),
            "{text:?} is not in the rendered page:\n{dom}"
        );
    }
    screenshot(&page, "nd7-show-html-run.png", 2400);
}

/// Every refusal in the report, whoever made it: a table of what was
/// refused, by whom, why and the fix, and the same on each call's row of the
/// timeline, where nd7's own entries about a call fold into it, as a real
/// headless Chromium renders the page.
#[cfg(target_os = "linux")]
#[test]
fn the_report_names_every_refusal_who_made_it_and_the_fix() {
    use crate::world::text;
    let (w, id) = crate::read::run_with_refusals();
    let made = w.outside().join("made").display().to_string();
    let outside = w.outside().display().to_string();
    let html = w
        .nd7(&["show", "--html", &id])
        .output()
        .expect("nd7 show --html");
    assert_eq!(html.status.code(), Some(0), "{}", text(&html.stderr));
    let dir = tempfile::tempdir().expect("tempdir");
    let page = dir.path().join("refusals-report.html");
    std::fs::write(&page, &html.stdout).expect("write the report");
    let dom = chromium(&page, &["--dump-dom"]);
    assert!(dom.status.success(), "{}", stderr(&dom));
    let dom = stdout(&dom);
    let table = dom
        .split("<table class=\"list\" id=\"refusals\">")
        .nth(1)
        .and_then(|rest| rest.split("</table>").next())
        .unwrap_or_else(|| panic!("no refusals table in:\n{dom}"));
    for text in [
        &format!(
            "<td>nd7's sandbox</td><td><code>Bash: {made}</code></td><td>outside what this session may write</td><td><code>nd7 allow {outside}</code></td>"
        ),
        "<td>Claude Code's permissions</td><td><code>Bash: touch denied.txt</code></td><td>never ran: no result, and no command through nd7-exec",
    ] {
        assert!(
            table.contains(text),
            "{text:?} is not in the refusals table:\n{table}"
        );
    }
    let timeline = dom
        .split("<section id=\"timeline\">")
        .nth(1)
        .unwrap_or_else(|| panic!("no timeline in:\n{dom}"));
    for text in [
        &format!(
            "refused by nd7's sandbox: {made} (outside what this session may write); fix: nd7 allow {outside}"
        ),
        "nd7's entries on this call: #",
        "2 refused (1 by Claude Code's permissions, 1 by nd7)",
    ] {
        assert!(dom.contains(text), "{text:?} is not in the page:\n{dom}");
    }
    for folded in ["[exit:nd7 exec]", "[exit:nd7 floor_refused]", "NO END"] {
        assert!(
            !timeline.contains(folded),
            "{folded:?} is in the timeline:\n{timeline}"
        );
    }
    screenshot(&page, "nd7-show-html-refusals.png", 1600);
}
