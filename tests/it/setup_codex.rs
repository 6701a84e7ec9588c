//! `nd7 setup --agent codex` and Codex's lines of `nd7 doctor` through the
//! real binary, on scratch homes laid out as real `~/.codex` directories are:
//! no hooks.json, a hooks.json of the user's, hooks inline in config.toml.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::common::*;

/// A config.toml as Codex users keep it: comments, a model provider, a
/// trusted project, and trust state for a hook of their own.
const CONFIG: &str = r#"# Codex settings (mine)
model = "gpt-5.5" # the default
approval_policy = "on-request"

[model_providers.local]
name = "local"
base_url = "http://127.0.0.1:11434/v1" # ollama

[projects."/home/u/src/app"]
trust_level = "trusted"
"#;

const USER_HOOKS: &str = r#"{
  "hooks": {
    "PreToolUse": [
      {
        "matcher": "Bash",
        "hooks": [
          { "type": "command", "command": "~/.codex/guard.sh", "timeout": 30 }
        ]
      }
    ],
    "Stop": [
      { "hooks": [ { "type": "command", "command": "notify-send done" } ] }
    ]
  }
}
"#;

struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Home {
        Home {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn codex(&self) -> PathBuf {
        self.dir.path().join(".codex")
    }

    fn write(&self, name: &str, text: &str) {
        std::fs::create_dir_all(self.codex()).expect("mkdir");
        std::fs::write(self.codex().join(name), text).expect("write");
    }

    fn read(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.codex().join(name)).ok()
    }

    fn hooks(&self) -> Value {
        serde_json::from_str(&self.read("hooks.json").expect("hooks.json")).expect("json")
    }

    fn nd7(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_nd7"))
            .args(args)
            .env("HOME", self.dir.path())
            .env_remove("CODEX_HOME")
            .env_remove("XDG_DATA_HOME")
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("XDG_STATE_HOME")
            // Neither claude nor codex on PATH.
            .env("PATH", "/usr/bin:/bin")
            .output()
            .expect("run nd7")
    }
}

/// nd7's handler as setup writes it, with nd7-record beside nd7 (ADR-0151).
fn command() -> String {
    format!(
        "'{}' --agent codex",
        Path::new(env!("CARGO_BIN_EXE_nd7-record")).display()
    )
}

const EVENTS: [&str; 14] = [
    "SessionStart",
    "UserPromptSubmit",
    "PreToolUse",
    "PermissionRequest",
    "PostToolUse",
    "PreCompact",
    "PostCompact",
    "SubagentStart",
    "SubagentStop",
    "Stop",
    "SessionEnd",
    "Interrupt",
    "PreModelRequest",
    "PostModelRequest",
];

#[test]
fn with_no_codex_here_plain_setup_leaves_it_alone_and_the_agent_flag_wires_it() {
    let home = Home::new();
    let out = home.nd7(&["setup"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("codex: not found"),
        "{}",
        stdout(&out)
    );
    assert!(!home.codex().exists());
    let claude = home.dir.path().join(".claude/settings.json");
    std::fs::remove_file(&claude).expect("plain setup wrote Claude Code's settings");
    let out = home.nd7(&["setup", "--agent", "codex"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let hooks = home.hooks();
    for event in EVENTS {
        let handler = &hooks["hooks"][event][0]["hooks"][0];
        assert_eq!(handler["command"], command(), "{event}");
        assert_eq!(handler["type"], "command");
    }
    assert_eq!(hooks["hooks"]["SessionEnd"][0]["hooks"][0]["timeout"], 3);
    assert_eq!(hooks["hooks"]["Interrupt"][0]["hooks"][0]["timeout"], 3);
    // Claude Code's settings were not touched by --agent codex.
    assert!(!claude.exists());
    assert!(
        stderr(&out).contains("/hooks"),
        "the trust step is said: {}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("managed hooks"), "{}", stderr(&out));
}

#[test]
fn a_users_hooks_json_is_merged_kept_and_given_back() {
    let home = Home::new();
    home.write("hooks.json", USER_HOOKS);
    home.write("config.toml", CONFIG);
    // Codex's directory is here, so plain setup does Codex too (and Claude Code).
    let out = home.nd7(&["setup"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(home.dir.path().join(".claude/settings.json").exists());
    let hooks = home.hooks();
    assert_eq!(
        hooks["hooks"]["PreToolUse"][0]["hooks"][0]["command"],
        "~/.codex/guard.sh"
    );
    assert_eq!(hooks["hooks"]["PreToolUse"][0]["matcher"], "Bash");
    assert_eq!(
        hooks["hooks"]["PreToolUse"][1]["hooks"][0]["command"],
        command()
    );
    assert_eq!(
        hooks["hooks"]["Stop"][0]["hooks"][0]["command"],
        "notify-send done"
    );
    assert_eq!(hooks["hooks"]["Stop"][1]["hooks"][0]["command"], command());
    assert_eq!(
        home.read("hooks.json.nd7-backup").as_deref(),
        Some(USER_HOOKS)
    );
    assert_eq!(
        home.read("config.toml").as_deref(),
        Some(CONFIG),
        "config.toml untouched"
    );
    // Again: nothing changes.
    let before = home.read("hooks.json");
    let again = home.nd7(&["setup", "--agent", "codex"]);
    assert!(
        stdout(&again).contains("hooks.json: nothing to change"),
        "{}",
        stdout(&again)
    );
    assert_eq!(home.read("hooks.json"), before);
    // A dry run of the uninstall writes nothing; the uninstall gives the
    // user's hooks back exactly.
    home.nd7(&["setup", "--agent", "codex", "--uninstall", "--dry-run"]);
    assert_eq!(home.read("hooks.json"), before);
    let out = home.nd7(&["setup", "--agent", "codex", "--uninstall"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let back: Value = home.hooks();
    let original: Value = serde_json::from_str(USER_HOOKS).expect("json");
    assert_eq!(back, original);
}

#[test]
fn hooks_kept_inline_in_config_toml_get_nd7_there_with_comments_kept() {
    let home = Home::new();
    let inline = format!(
        "{CONFIG}\n# my guard\n[[hooks.PreToolUse]]\nmatcher = \"Bash\"\n[[hooks.PreToolUse.hooks]]\ntype = \"command\"\ncommand = \"~/.codex/guard.sh\" # keep\n\n[hooks.state.\"/home/u/.codex/config.toml:pre_tool_use:0:0\"]\ntrusted_hash = \"sha256:0000\"\n"
    );
    home.write("config.toml", &inline);
    let out = home.nd7(&["setup", "--agent", "codex"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        home.read("hooks.json").is_none(),
        "no second place for hooks"
    );
    let text = home.read("config.toml").expect("config");
    for kept in [
        "# Codex settings (mine)",
        "# the default",
        "# ollama",
        "# my guard",
        "# keep",
    ] {
        assert!(text.contains(kept), "{kept} kept:\n{text}");
    }
    let doc: toml_edit::DocumentMut = text.parse().expect("still TOML");
    assert_eq!(
        doc["hooks"]["PreToolUse"]
            .as_array_of_tables()
            .map(|t| t.len()),
        Some(2)
    );
    for event in EVENTS {
        assert!(
            text.contains(&format!("[[hooks.{event}]]")),
            "{event}:\n{text}"
        );
    }
    assert!(text.contains(&command()), "{text}");
    // The user's hook stays first, so its trust key still names it.
    assert_eq!(
        doc["hooks"]["PreToolUse"][0]["hooks"][0]["command"].as_str(),
        Some("~/.codex/guard.sh")
    );
    let again = home.nd7(&["setup", "--agent", "codex"]);
    assert!(
        stdout(&again).contains("config.toml: nothing to change"),
        "{}",
        stdout(&again)
    );
    let out = home.nd7(&["setup", "--agent", "codex", "--uninstall"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let back = home.read("config.toml").expect("config");
    assert!(!back.contains("--agent codex"), "{back}");
    let back_doc: toml_edit::DocumentMut = back.parse().expect("TOML");
    let original: toml_edit::DocumentMut = inline.parse().expect("TOML");
    assert_eq!(
        back_doc.as_table().to_string().replace("\n\n", "\n"),
        original.as_table().to_string().replace("\n\n", "\n")
    );
    for kept in [
        "# Codex settings (mine)",
        "# my guard",
        "# keep",
        "trusted_hash = \"sha256:0000\"",
    ] {
        assert!(back.contains(kept), "{kept} kept:\n{back}");
    }
}

#[test]
fn broken_files_are_refused_with_line_and_column_and_left_as_they_were() {
    let home = Home::new();
    let broken_json = "{\n  \"hooks\": {\n    \"Stop\": [,]\n  }\n}\n";
    home.write("hooks.json", broken_json);
    let out = home.nd7(&["setup", "--agent", "codex"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("hooks.json: line 3, column"),
        "{}",
        stderr(&out)
    );
    assert_eq!(home.read("hooks.json").as_deref(), Some(broken_json));

    let home = Home::new();
    let broken_toml = "model = \"x\"\n[hooks\nStop = 1\n";
    home.write("config.toml", broken_toml);
    let out = home.nd7(&["setup", "--agent", "codex"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("config.toml: line 2, column 7: not valid TOML"),
        "{}",
        stderr(&out)
    );
    assert_eq!(home.read("config.toml").as_deref(), Some(broken_toml));
    assert!(home.read("hooks.json").is_none());
}

#[test]
fn codex_home_is_where_codex_keeps_its_settings() {
    let home = Home::new();
    let elsewhere = home.dir.path().join("codex-home");
    std::fs::create_dir_all(&elsewhere).expect("mkdir");
    let out = Command::new(env!("CARGO_BIN_EXE_nd7"))
        .args(["setup", "--agent", "codex"])
        .env("HOME", home.dir.path())
        .env("CODEX_HOME", &elsewhere)
        .env("PATH", "/usr/bin:/bin")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(elsewhere.join("hooks.json").exists());
    assert!(!home.codex().exists());
    // A CODEX_HOME that does not exist is an error, as it is to Codex.
    let out = Command::new(env!("CARGO_BIN_EXE_nd7"))
        .args(["setup", "--agent", "codex"])
        .env("HOME", home.dir.path())
        .env("CODEX_HOME", home.dir.path().join("nowhere"))
        .env("PATH", "/usr/bin:/bin")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn doctor_reports_codex_hooks_and_their_trust() {
    let home = Home::new();
    home.write("config.toml", CONFIG);
    let doctor = |home: &Home| stdout(&home.nd7(&["doctor"]));
    let before = doctor(&home);
    assert!(
        before.contains("FAIL codex-hooks 0 of 14 events"),
        "{before}"
    );
    assert!(before.contains("fix: nd7 setup --agent codex"), "{before}");
    // Only Codex here: Claude Code's absence is no failure.
    assert!(
        before.contains("ok   claude  Claude Code is not installed here"),
        "{before}"
    );
    assert!(!before.contains("FAIL hooks"), "{before}");
    home.nd7(&["setup", "--agent", "codex"]);
    let untrusted = doctor(&home);
    assert!(
        untrusted.contains("ok   codex-hooks 14 of 14 events"),
        "{untrusted}"
    );
    assert!(
        untrusted.contains(
            "FAIL codex-trust 14 of nd7's 14 hooks will not run: SessionStart (untrusted)"
        ),
        "{untrusted}"
    );
    assert!(untrusted.contains("/hooks"), "{untrusted}");
    // Trust with a hash for some other command: changed since trusted.
    let key = format!("{}:stop:0:0", home.codex().join("hooks.json").display());
    let text = format!(
        "{CONFIG}\n[hooks.state.\"{key}\"]\ntrusted_hash = \"sha256:{}\"\n",
        "0".repeat(64)
    );
    home.write("config.toml", &text);
    assert!(
        doctor(&home).contains("Stop (changed since trusted)"),
        "{}",
        doctor(&home)
    );
    // Turned off in config.toml.
    home.write(
        "config.toml",
        &format!("{CONFIG}\n[features]\nhooks = false\n"),
    );
    assert!(
        doctor(&home).contains("turns hooks off"),
        "{}",
        doctor(&home)
    );
}

/// A stand-in `codex` in a directory of its own: `--version` says
/// `version`, and `app-server generate-json-schema --out DIR` writes the
/// hooks/list schema with the event names in `events.json` beside it (as
/// the real one does, camelCase), so a test can upgrade it.
fn codex_stand_in(home: &Home, version: &str) -> PathBuf {
    let bin = home.dir.path().join("codex-bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    let script = format!(
        "#!/bin/sh\ncase \"$1\" in\n--version) echo 'codex-cli {version}' ;;\napp-server) [ \"$2 $3\" = 'generate-json-schema --out' ] || exit 2; mkdir -p \"$4/v2\" && printf '{{\"definitions\":{{\"HookEventName\":{{\"type\":\"string\",\"enum\":%s}}}}}}' \"$(cat '{}')\" > \"$4/v2/HooksListResponse.json\" ;;\n*) exit 2 ;;\nesac\n",
        bin.join("events.json").display()
    );
    std::fs::write(bin.join("codex"), script).expect("write codex");
    std::fs::set_permissions(
        bin.join("codex"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    bin
}

/// The installed Codex's events, camelCase as its schema has them.
fn knows(bin: &Path, extra: &[&str]) {
    let mut names: Vec<String> = EVENTS
        .iter()
        .chain(extra)
        .map(|e| format!("{}{}", e[..1].to_ascii_lowercase(), &e[1..]))
        .collect();
    names.rotate_left(2);
    std::fs::write(
        bin.join("events.json"),
        serde_json::json!(names).to_string(),
    )
    .expect("write events.json");
}

fn nd7_with(home: &Home, bin: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nd7"))
        .args(args)
        .env("HOME", home.dir.path())
        .env_remove("CODEX_HOME")
        .env_remove("XDG_DATA_HOME")
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_STATE_HOME")
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .output()
        .expect("run nd7")
}

/// Setup asks the installed Codex which events it knows and registers
/// those nd7 does not know too (they are recorded whole, as `hook`
/// entries); after an upgrade that adds one, doctor names it with the fix,
/// and setup brings it in. Guards `codex_merge::with_known` in setup and the
/// events-nd7-does-not-register part of `setup::codex::assess`.
#[test]
fn setup_and_doctor_keep_in_step_with_the_events_the_installed_codex_knows() {
    let home = Home::new();
    let bin = codex_stand_in(&home, "0.999.0");
    knows(&bin, &["StopFailure"]);
    let out = nd7_with(&home, &bin, &["setup", "--agent", "codex"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let hooks = home.hooks();
    assert_eq!(
        hooks["hooks"]["StopFailure"][0]["hooks"][0]["command"],
        command(),
        "{hooks}"
    );
    let text = stdout(&nd7_with(&home, &bin, &["doctor"]));
    assert!(text.contains("ok   codex-hooks 15 of 15 events"), "{text}");
    // An upgrade adds an event.
    knows(&bin, &["StopFailure", "PreShellCommand"]);
    let text = stdout(&nd7_with(&home, &bin, &["doctor"]));
    assert!(
        text.contains("FAIL codex-hooks 15 of 16 events record with")
            && text.contains(
                "; codex-cli 0.999.0 knows events nd7 does not register: PreShellCommand"
            ),
        "{text}"
    );
    let fix = text
        .lines()
        .skip_while(|l| !l.contains("codex-hooks"))
        .nth(1)
        .unwrap_or_default();
    assert_eq!(fix.trim(), "fix: nd7 setup --agent codex", "{text}");
    assert!(
        nd7_with(&home, &bin, &["setup", "--agent", "codex"])
            .status
            .success()
    );
    let text = stdout(&nd7_with(&home, &bin, &["doctor"]));
    assert!(text.contains("ok   codex-hooks 16 of 16 events"), "{text}");
    // An answer holding something that cannot be an event name is not
    // taken at all: nd7's own events only.
    let other = Home::new();
    let bin = codex_stand_in(&other, "0.999.1");
    std::fs::write(
        bin.join("events.json"),
        r#"["sessionStart", "x\"; rm -rf ~"]"#,
    )
    .expect("write events.json");
    assert!(
        nd7_with(&other, &bin, &["setup", "--agent", "codex"])
            .status
            .success()
    );
    let names: Vec<String> = other.hooks()["hooks"]
        .as_object()
        .expect("hooks")
        .keys()
        .cloned()
        .collect();
    assert_eq!(names.len(), EVENTS.len(), "{names:?}");
}

/// Setup run again over the handlers an older nd7 wrote
/// (`'<nd7>' record --agent codex`) moves each, in place, to the nd7-record
/// beside nd7 (ADR-0151) and says so; the user's handlers stay.
#[test]
fn older_handlers_move_to_nd7_record() {
    let home = Home::new();
    let old = format!(
        "'{}' record --agent codex",
        Path::new(env!("CARGO_BIN_EXE_nd7")).display()
    );
    home.write(
        "hooks.json",
        &serde_json::json!({"hooks": {
            "Stop": [
                {"hooks": [{"type": "command", "command": old}]},
                {"hooks": [{"type": "command", "command": "notify-send done"}]}
            ]
        }})
        .to_string(),
    );
    let out = home.nd7(&["setup", "--agent", "codex"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("hooks.json: ~ Stop: nd7 record moved to nd7-record"),
        "{}",
        stdout(&out)
    );
    let hooks = home.hooks();
    assert_eq!(hooks["hooks"]["Stop"][0]["hooks"][0]["command"], command());
    assert_eq!(
        hooks["hooks"]["Stop"][1]["hooks"][0]["command"],
        "notify-send done"
    );
    let again = home.nd7(&["setup", "--agent", "codex"]);
    assert!(
        stdout(&again).contains("hooks.json: nothing to change"),
        "{}",
        stdout(&again)
    );
}
