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

/// Guards the escaping in `read::safe::html` as a browser sees it: with `<`
/// passed through, Chromium's DOM holds the payload's `<script>` element and
/// this test fails (seen). The page's Content-Security-Policy, the second
/// wall, is checked by `read::html`'s unit test.
#[test]
fn the_report_renders_in_headless_chromium_with_the_log_inert() {
    let state = State::new();
    let hostile = "<script>document.title='PWNED';document.body.innerHTML='PWNED'</script>\
                   <img src=x onerror=\"document.title='PWNED'\">\u{1b}]0;owned\u{7}";
    let base = json!({"session_id": "s-html", "cwd": "/home/dev/proj", "transcript_path": "/none"});
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

    let artefacts = Path::new(env!("CARGO_TARGET_TMPDIR")).join("artefacts");
    std::fs::create_dir_all(&artefacts).expect("artefacts dir");
    let shot = artefacts.join("nd7-show-html.png");
    let _ = std::fs::remove_file(&shot);
    let out = chromium(
        &page,
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1280,1600",
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
