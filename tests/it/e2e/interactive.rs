//! Daily use is interactive: `nd7 run claude` in a terminal (tmux gives it
//! one), a prompt typed in, a command run through nd7-exec, and Claude Code's
//! saved state (the folder trust it asks for once) kept from one run to the
//! next under the floor.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::claude;
use super::mock_api::{Block, MockApi, bash};
use crate::world::{ND7, World};

const KEY: &str = "sk-ant-e2e-interactive-0123456789abcdefghij";

/// One tmux server of our own per use, so a developer's sessions (and the
/// other tests') are never touched.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn new() -> Tmux {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Tmux {
            socket: format!("nd7-e2e-{}-{n}", std::process::id()),
        }
    }

    fn cmd(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .args(["-L", &self.socket, "-f", "/dev/null"])
            .args(args)
            .output()
            .expect("run tmux")
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.cmd(&["capture-pane", "-p", "-t", "nd7"]).stdout).into_owned()
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "nd7"];
        args.extend_from_slice(keys);
        self.cmd(&args);
    }

    /// Waits (at most two minutes) until the screen shows `text`.
    fn wait_for(&self, what: &str, shows: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if shows(&screen) {
                return screen;
            }
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "the terminal never showed {what}:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.cmd(&["kill-server"]);
    }
}

/// Starts `nd7 run claude` in a fresh tmux session; `status` receives its
/// exit status when it ends.
fn start(tmux: &Tmux, world: &World, claude: &Path, api: &MockApi, status: &Path) {
    let script = world.root.join("launch.sh");
    let inner = world.nd7(&["run", &claude.display().to_string()]);
    let program = inner.get_program().to_string_lossy().into_owned();
    let args: Vec<String> = inner
        .get_args()
        .map(|a| nd7_core::shell_prefix::shell_quote(&a.to_string_lossy()))
        .collect();
    let acct = world.acct.display();
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ncd '{proj}'\nexport PATH=/usr/local/bin:/usr/bin:/bin HOME='{acct}' TMPDIR='{tmp}' \
             XDG_STATE_HOME='{acct}/.local/state' TERM=xterm-256color ANTHROPIC_BASE_URL='{url}' \
             ANTHROPIC_API_KEY='{KEY}' CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1 \
             DISABLE_TELEMETRY=1 DISABLE_ERROR_REPORTING=1\n{program} {args}\necho $? > '{status}'\n",
            proj = world.proj().display(),
            tmp = world.root.join("tmp").display(),
            url = api.url,
            args = args.join(" "),
            status = status.display(),
        ),
    )
    .expect("write launcher");
    let out = tmux.cmd(&[
        "new-session",
        "-d",
        "-s",
        "nd7",
        "-x",
        "160",
        "-y",
        "50",
        &format!("sh '{}'", script.display()),
    ]);
    assert!(out.status.success(), "{out:?}");
}

/// Types a prompt whose turn runs a Bash command, waits for the command and
/// the turn, then leaves Claude Code and waits for `nd7 run` to end.
fn prompt_and_exit(tmux: &Tmux, world: &World, api: &MockApi, status: &Path, marker: &str) {
    type_prompt(tmux);
    let start = Instant::now();
    let mut approved = false;
    while !world.proj().join(marker).exists() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the command never ran:\n{}",
            tmux.screen()
        );
        // Claude Code asks before a command writes a file, under nd7 run as
        // without it (ADR-0040): the person says yes, once.
        if !approved && tmux.screen().contains("Do you want to proceed?") {
            tmux.keys(&["Enter"]);
            approved = true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    tmux.wait_for("the end of the turn", |s| s.contains("all done"));
    let _ = api;
    exit_claude(tmux, status);
}

/// Waits for the prompt box, types a prompt and sends it.
fn type_prompt(tmux: &Tmux) {
    tmux.wait_for("the prompt box", prompt_box);
    // Keys sent while the box is still being drawn can be lost: type until
    // the prompt shows, then send it.
    let typed = (0..20).any(|_| {
        tmux.keys(&["-l", "please run the command"]);
        std::thread::sleep(Duration::from_millis(500));
        if tmux.screen().contains("please run the command") {
            return true;
        }
        tmux.keys(&["C-u"]);
        false
    });
    assert!(typed, "the prompt never took the text:\n{}", tmux.screen());
    tmux.keys(&["Enter"]);
}

/// Leaves Claude Code and waits (at most a minute) for `nd7 run` to end.
fn exit_claude(tmux: &Tmux, status: &Path) {
    tmux.keys(&["-l", "/exit"]);
    std::thread::sleep(Duration::from_millis(300));
    tmux.keys(&["Enter"]);
    let start = Instant::now();
    while !status.exists() {
        if start.elapsed() > Duration::from_secs(10) {
            tmux.keys(&["C-c"]);
            std::thread::sleep(Duration::from_millis(300));
            tmux.keys(&["C-c"]);
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "claude did not exit:\n{}",
            tmux.screen()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn trusted(world: &World) -> Option<bool> {
    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(world.home().join(".claude/claude.json")).ok()?)
            .ok()?;
    saved["projects"][world.proj().display().to_string()]["hasTrustDialogAccepted"].as_bool()
}

/// Whether the screen shows an empty prompt box ready for input: a line
/// holding nothing but the prompt mark (its footer differs between versions).
fn prompt_box(screen: &str) -> bool {
    screen.lines().any(|l| l.trim() == "❯")
}

/// Answers the trust question with yes. Versions differ: 2.1.197 offers yes
/// first, 2.1.332 offers "No, exit" first; and a key sent before the dialog
/// takes input is lost, so it is answered until the question goes away.
fn accept_trust(tmux: &Tmux, question: &str) {
    let selected = |screen: &str| {
        screen
            .lines()
            .find(|l| l.contains('❯'))
            .unwrap_or_default()
            .to_string()
    };
    for _ in 0..20 {
        let screen = tmux.screen();
        if !screen.contains(question) {
            return;
        }
        // Never Enter on "No, exit": move to yes, and look again.
        if selected(&screen).contains("No") {
            tmux.keys(&["Down"]);
            std::thread::sleep(Duration::from_millis(500));
            continue;
        }
        tmux.keys(&["Enter"]);
        std::thread::sleep(Duration::from_millis(1500));
    }
    panic!("the trust question stayed:\n{}", tmux.screen());
}

#[test]
fn an_interactive_session_under_nd7_run_runs_commands_and_keeps_its_state() {
    let claude = claude::install(&claude::version());
    let world = Arc::new(World::new());
    // Claude Code keys its per-project state by the enclosing git
    // repository; make the project its own, as a real one would be.
    let init = Command::new("git")
        .args(["init", "-q"])
        .current_dir(world.proj())
        .status()
        .expect("git init");
    assert!(init.success());
    // Past onboarding and with the key approved, as a user who has run
    // Claude Code before; the folder is not yet trusted.
    let approved = &KEY[KEY.len() - 20..];
    std::fs::write(
        world.home().join(".claude.json"),
        serde_json::json!({
            "hasCompletedOnboarding": true,
            "theme": "dark",
            "customApiKeyResponses": {"approved": [approved], "rejected": []},
        })
        .to_string(),
    )
    .expect("seed ~/.claude.json");
    let setup = Command::new(ND7)
        .args(["setup"])
        .env("HOME", world.home())
        .env("PATH", claude::path_with(&claude))
        .output()
        .expect("nd7 setup");
    assert!(setup.status.success(), "{setup:?}");
    assert!(world.home().join(".claude/claude.json").exists());

    let mut question = String::new();
    for (run, marker) in [(1, "first.txt"), (2, "second.txt")] {
        let api = MockApi::start(vec![
            vec![bash(&format!("echo run-{run} > {marker}"))],
            vec![Block::Text("all done".into())],
        ]);
        let tmux = Tmux::new();
        let status: PathBuf = world.root.join(format!("status-{run}"));
        start(&tmux, &world, &claude, &api, &status);
        if run == 1 {
            // The folder is new: Claude Code asks whether to trust it.
            let screen = tmux.wait_for("the trust question", |s| s.contains("trust"));
            question = screen
                .lines()
                .find(|l| l.contains("trust"))
                .unwrap_or_default()
                .trim()
                .to_string();
            accept_trust(&tmux, &question);
        } else {
            // The answer was saved: no question the second time.
            let screen = tmux.wait_for("the prompt box", prompt_box);
            assert!(!screen.contains(&question), "asked again:\n{screen}");
        }
        prompt_and_exit(&tmux, &world, &api, &status, marker);
        assert_eq!(
            std::fs::read_to_string(&status).expect("status").trim(),
            "0",
            "{}",
            tmux.screen()
        );
        assert_eq!(
            std::fs::read_to_string(world.proj().join(marker)).expect("marker"),
            format!("run-{run}\n")
        );
        // The trust given in the first run was saved, through the floor.
        assert_eq!(
            trusted(&world),
            Some(true),
            "run {run}: {}",
            std::fs::read_to_string(world.home().join(".claude/claude.json")).unwrap_or_default()
        );
        let results = api.tool_results();
        assert_eq!(results.len(), 1, "{results:?}");
        assert!(!results[0].2, "{results:?}");
    }
    assert_eq!(
        std::fs::read_dir(world.sessions())
            .expect("sessions")
            .count(),
        0
    );
    // Both runs were recorded through nd7 run's door, each in a chain of its
    // own, and verify.
    let verify = Command::new(ND7)
        .args(["verify", "--all"])
        .env("XDG_STATE_HOME", world.home().join(".local/state"))
        .output()
        .expect("nd7 verify");
    let report = String::from_utf8_lossy(&verify.stdout);
    assert!(verify.status.success(), "{report}");
    assert_eq!(report.matches("verified:").count(), 2, "{report}");
}

/// An ask rule under `nd7 run claude`, beside an allow rule that covers the
/// same command: Claude Code asks the person before the command runs (ask
/// beats allow), showing the command as the model wrote it, and runs it
/// through nd7's exit once approved; a control command the allow rule alone
/// matches runs without a question. In the default mode Claude Code would
/// ask before either (both write a file), so it is the allow rule that lets
/// the control through and the ask rule that stops the other. Guards
/// ADR-0040's routing (`shell_prefix::run_settings` registers no PreToolUse
/// answer): with the old allow-everything rewrite (`nd7 hook-route`'s reply
/// on PreToolUse) restored, or the ask rule taken out of the settings, the
/// asked command runs unasked and this test fails.
#[test]
fn an_ask_rule_under_nd7_run_asks_before_the_command_runs() {
    let claude = claude::install(&claude::version());
    let world = Arc::new(World::new());
    let init = Command::new("git")
        .args(["init", "-q"])
        .current_dir(world.proj())
        .status()
        .expect("git init");
    assert!(init.success());
    // Onboarded, the key approved and the folder trusted: the only questions
    // left are the rules'.
    let approved = &KEY[KEY.len() - 20..];
    let mut projects = serde_json::Map::new();
    projects.insert(
        world.proj().display().to_string(),
        serde_json::json!({"hasTrustDialogAccepted": true}),
    );
    std::fs::write(
        world.home().join(".claude.json"),
        serde_json::json!({
            "hasCompletedOnboarding": true,
            "theme": "dark",
            "customApiKeyResponses": {"approved": [approved], "rejected": []},
            "projects": projects,
        })
        .to_string(),
    )
    .expect("seed ~/.claude.json");
    let setup = Command::new(ND7)
        .args(["setup"])
        .env("HOME", world.home())
        .env("PATH", claude::path_with(&claude))
        .output()
        .expect("nd7 setup");
    assert!(setup.status.success(), "{setup:?}");
    let settings_path = world.home().join(".claude/settings.json");
    let mut settings: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&settings_path).expect("settings")).expect("json");
    settings["permissions"] = serde_json::json!({
        "allow": ["Bash(touch:*)"],
        "ask": ["Bash(touch asked.txt)"],
    });
    std::fs::write(&settings_path, settings.to_string()).expect("write settings");

    let api = MockApi::start(vec![
        vec![bash("touch control.txt")],
        vec![bash("touch asked.txt")],
        vec![Block::Text("all done".into())],
    ]);
    let tmux = Tmux::new();
    let status: PathBuf = world.root.join("status-ask");
    start(&tmux, &world, &claude, &api, &status);
    type_prompt(&tmux);
    // The control runs with no question: nobody answers one before it ran.
    let start = Instant::now();
    while !world.proj().join("control.txt").exists() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the allowed command never ran (was it asked about?):\n{}",
            tmux.screen()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Claude Code asks about the other, as the model wrote it.
    let screen = tmux.wait_for("the permission question", |s| {
        s.contains("touch asked.txt") && s.contains("proceed")
    });
    assert!(!screen.contains("nd7-exec"), "{screen}");
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !world.proj().join("asked.txt").exists(),
        "ran before it was approved"
    );
    tmux.keys(&["Enter"]);
    let start = Instant::now();
    while !world.proj().join("asked.txt").exists() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the approved command never ran:\n{}",
            tmux.screen()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    tmux.wait_for("the end of the turn", |s| s.contains("all done"));
    exit_claude(&tmux, &status);
    // Both ran through nd7's exit, each named by its call.
    let sessions = world.home().join(".local/state/nd7/sessions");
    let chain = std::fs::read_dir(&sessions)
        .expect("sessions")
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().starts_with("run-"))
        .expect("a run's chain");
    let log = std::fs::read_to_string(chain.path().join("events.ndjson")).expect("log");
    let ids = api.tool_ids();
    assert_eq!(ids.len(), 2, "{ids:?}");
    for id in &ids {
        assert!(
            log.lines().any(|l| {
                let e: serde_json::Value = serde_json::from_str(l).unwrap_or_default();
                e["kind"] == "exec" && e["source"] == "exit:nd7" && e["tool_use_id"] == id.as_str()
            }),
            "{id}: {log}"
        );
    }
}
