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

/// One tmux server of our own, so a developer's sessions are never touched.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn new() -> Tmux {
        Tmux {
            socket: format!("nd7-e2e-{}", std::process::id()),
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
        .map(|a| nd7_core::hook_prefix::shell_quote(&a.to_string_lossy()))
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
    let start = Instant::now();
    while !world.proj().join(marker).exists() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the command never ran:\n{}",
            tmux.screen()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    tmux.wait_for("the end of the turn", |s| s.contains("all done"));
    let _ = api;
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
