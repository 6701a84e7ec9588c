//! `nd7 setup` through the real binary, against a temporary HOME.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

use crate::common::*;

struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Home {
        Home {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn settings(&self) -> PathBuf {
        self.dir.path().join(".claude/settings.json")
    }

    fn setup(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_nd7"))
            .arg("setup")
            .args(args)
            .env("HOME", self.dir.path())
            .env_remove("XDG_DATA_HOME")
            .env_remove("XDG_CONFIG_HOME")
            // No claude on PATH: setup warns and carries on.
            .env("PATH", "/usr/bin:/bin")
            .output()
            .expect("run nd7 setup")
    }

    fn write_settings(&self, text: &str) {
        std::fs::create_dir_all(self.settings().parent().expect("dir")).expect("mkdir");
        std::fs::write(self.settings(), text).expect("write settings");
    }

    fn read_settings(&self) -> Value {
        serde_json::from_str(&std::fs::read_to_string(self.settings()).expect("read"))
            .expect("json")
    }
}

fn nd7_path() -> String {
    Path::new(env!("CARGO_BIN_EXE_nd7")).display().to_string()
}

/// The nd7-record beside the nd7 under test, which setup wires (ADR-0151).
fn nd7_record_path() -> String {
    Path::new(env!("CARGO_BIN_EXE_nd7-record"))
        .display()
        .to_string()
}

/// The hook entry setup writes with nd7-record beside nd7.
fn lean_hook() -> Value {
    json!({"type": "command", "command": nd7_record_path(), "args": []})
}

#[test]
fn setup_on_no_settings_registers_every_recorded_event() {
    let home = Home::new();
    let out = home.setup(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let settings = home.read_settings();
    let hooks = settings["hooks"].as_object().expect("hooks");
    assert_eq!(hooks.len(), 32);
    assert!(!hooks.contains_key("MessageDisplay") && !hooks.contains_key("PostToolBatch"));
    assert_eq!(
        hooks["PostToolUseFailure"],
        json!([{"hooks": [lean_hook()]}])
    );
    assert_eq!(hooks["SessionEnd"][0]["hooks"][0]["timeout"], 10);
    assert!(
        stdout(&out).contains(
            "~/.claude/settings.json: registered nd7 record for 32 events (every event nd7 records: Claude Code is not installed)"
        ),
        "{}",
        stdout(&out)
    );
    assert!(stderr(&out).contains("not on PATH"), "{}", stderr(&out));
    for f in [
        ".local/share/bash-completion/completions/nd7",
        ".local/share/zsh/site-functions/_nd7",
        ".config/fish/completions/nd7.fish",
    ] {
        assert!(home.dir.path().join(f).exists(), "{f}");
    }
}

#[test]
fn setup_keeps_the_users_keys_hooks_and_order_and_backs_up() {
    let home = Home::new();
    let mine = r#"{
  "permissions": {"allow": ["Bash(git *)"]},
  "hooks": {
    "Stop": [{"hooks": [{"type": "command", "command": "/usr/local/bin/notify"}]}],
    "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "/old/nd7 record"}]}]
  },
  "model": "opus"
}"#;
    home.write_settings(mine);
    let out = home.setup(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let s = home.read_settings();
    let keys: Vec<&String> = s.as_object().expect("object").keys().collect();
    assert_eq!(keys, ["permissions", "hooks", "model"]);
    let events: Vec<&String> = s["hooks"].as_object().expect("hooks").keys().collect();
    assert_eq!(&events[..2], ["Stop", "PreToolUse"]);
    assert_eq!(
        s["hooks"]["Stop"][0]["hooks"][0]["command"],
        "/usr/local/bin/notify"
    );
    assert_eq!(s["hooks"]["Stop"].as_array().map(Vec::len), Some(2));
    // The old shell-form nd7 entry is moved to nd7-record, and its emptied group goes.
    assert_eq!(s["hooks"]["PreToolUse"], json!([{"hooks": [lean_hook()]}]));
    assert!(
        stdout(&out).contains("moved 1 event from nd7 record to nd7-record"),
        "{}",
        stdout(&out)
    );
    let backup = home.settings().with_file_name("settings.json.nd7-backup");
    assert_eq!(std::fs::read_to_string(backup).expect("backup"), mine);
}

#[test]
fn a_second_setup_changes_nothing() {
    let home = Home::new();
    assert!(home.setup(&[]).status.success());
    let first = std::fs::read(home.settings()).expect("read");
    let modified = std::fs::metadata(home.settings())
        .expect("stat")
        .modified()
        .expect("mtime");
    let out = home.setup(&[]);
    assert!(out.status.success());
    assert!(
        stdout(&out).contains("nothing to change"),
        "{}",
        stdout(&out)
    );
    assert!(!stdout(&out).contains("completions"), "{}", stdout(&out));
    assert_eq!(std::fs::read(home.settings()).expect("read"), first);
    assert_eq!(
        std::fs::metadata(home.settings())
            .expect("stat")
            .modified()
            .expect("mtime"),
        modified
    );
}

#[test]
fn dry_run_writes_nothing() {
    let home = Home::new();
    let out = home.setup(&["--dry-run"]);
    assert!(out.status.success());
    assert!(stdout(&out).contains("dry run"), "{}", stdout(&out));
    assert!(!home.settings().exists());
    assert!(!home.dir.path().join(".local").exists());
}

#[test]
fn uninstall_removes_only_what_setup_added() {
    let home = Home::new();
    let mine = r#"{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"/usr/local/bin/notify"}]}]},"model":"opus"}"#;
    home.write_settings(mine);
    assert!(home.setup(&[]).status.success());
    let out = home.setup(&["--uninstall"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        home.read_settings(),
        serde_json::from_str::<Value>(mine).expect("json")
    );
    assert!(
        !home
            .dir
            .path()
            .join(".config/fish/completions/nd7.fish")
            .exists()
    );
}

#[test]
fn broken_settings_are_refused_with_line_and_column_and_left_untouched() {
    let home = Home::new();
    let broken = "{\n  \"model\": \"opus\",\n  \"hooks\": {\n}\n";
    home.write_settings(broken);
    let out = home.setup(&[]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("settings.json: line 5, column 0"), "{err}");
    assert!(err.contains("left as it was"), "{err}");
    assert_eq!(
        std::fs::read_to_string(home.settings()).expect("read"),
        broken
    );
    assert!(
        !home
            .settings()
            .with_file_name("settings.json.nd7-backup")
            .exists()
    );
}

#[test]
fn a_symlinked_settings_file_stays_a_symlink() {
    let home = Home::new();
    let real = home.dir.path().join("dotfiles/claude-settings.json");
    std::fs::create_dir_all(real.parent().expect("dir")).expect("mkdir");
    std::fs::write(&real, "{}").expect("write");
    std::fs::create_dir_all(home.settings().parent().expect("dir")).expect("mkdir");
    std::os::unix::fs::symlink(&real, home.settings()).expect("symlink");
    assert!(home.setup(&[]).status.success());
    assert!(
        std::fs::symlink_metadata(home.settings())
            .expect("lstat")
            .file_type()
            .is_symlink()
    );
    let s: Value =
        serde_json::from_str(&std::fs::read_to_string(&real).expect("read")).expect("json");
    assert!(s["hooks"]["PreToolUse"].is_array());
}

#[test]
fn committed_completions_are_current() {
    for shell in nd7_core::cli::Shell::ALL {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("completions")
            .join(shell.file_name());
        let committed = std::fs::read(&path).unwrap_or_default();
        assert!(
            committed == shell.completions(),
            "{} is stale: run `cargo run -- completions {:?} > {}`",
            path.display(),
            shell,
            path.display()
        );
    }
}

#[test]
fn completions_load_in_bash_zsh_and_fish() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("completions");
    let checks = [
        (
            "bash",
            format!(
                "source '{}' && complete -p nd7",
                dir.join("nd7.bash").display()
            ),
        ),
        (
            "zsh",
            format!(
                // compinit replaces its dump file: a scratch one, never /dev/null.
                "autoload -Uz compinit && compinit -u -d \"$HOME/zcompdump\" && source '{}'",
                dir.join("_nd7").display()
            ),
        ),
        (
            "fish",
            format!(
                "source '{}' && complete -c nd7 | grep -q verify",
                dir.join("nd7.fish").display()
            ),
        ),
    ];
    for (shell, script) in checks {
        let home = tempfile::tempdir().expect("tempdir");
        let out = Command::new(shell)
            .args(["-c", &script])
            .env("HOME", home.path())
            .output()
            .unwrap_or_else(|e| {
                panic!("{shell} must be installed for this test ({e}); .ci/run installs it")
            });
        assert!(
            out.status.success(),
            "{shell}: {}{}",
            stdout(&out),
            stderr(&out)
        );
        assert_eq!(stderr(&out), "", "{shell} complained");
    }
}

#[test]
fn doctor_reports_the_hooks_setup_wrote() {
    let home = Home::new();
    let doctor = |home: &Home| {
        Command::new(env!("CARGO_BIN_EXE_nd7"))
            .arg("doctor")
            .env("HOME", home.dir.path())
            .env("PATH", "/usr/bin:/bin")
            .env_remove("XDG_STATE_HOME")
            .output()
            .expect("run nd7 doctor")
    };
    let before = doctor(&home);
    assert_eq!(before.status.code(), Some(1));
    assert!(
        stdout(&before).contains("FAIL hooks"),
        "{}",
        stdout(&before)
    );
    assert!(
        stdout(&before).contains("fix: nd7 setup"),
        "{}",
        stdout(&before)
    );
    assert!(home.setup(&[]).status.success());
    let after = doctor(&home);
    let text = stdout(&after);
    assert!(
        text.contains(&format!(
            "ok   hooks   32 of 32 events record with {}\n",
            nd7_record_path()
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("ok   recorder hooks run {}\n", nd7_record_path())),
        "{text}"
    );
    // This kernel has Landlock (the landlock tests need it too).
    assert!(text.contains("ok   sandbox Landlock"), "{text}");
    // And user namespaces, for the files that run later.
    assert!(
        text.contains("ok   locks   files that run later outside the sandbox: a mount namespace makes them read-only"),
        "{text}"
    );
    // No claude on this PATH: still a failure, with its fix.
    assert!(text.contains("FAIL claude"), "{text}");
    assert_eq!(after.status.code(), Some(1));
}

#[test]
fn the_ship_timer_waits_for_enrolment_and_uninstall_removes_it() {
    let home = Home::new();
    let out = home.setup(&[]);
    assert!(
        stdout(&out).contains("ship timer: not installed"),
        "{}",
        stdout(&out)
    );
    let units = home.dir.path().join(".config/systemd/user");
    assert!(!units.join("nd7-ship.timer").exists());

    // Enrolled (as far as setup can tell): the units are written. The user
    // manager is not reachable here, which setup reports as a warning.
    let vault = home.dir.path().join(".local/state/nd7/vault");
    std::fs::create_dir_all(&vault).expect("mkdir");
    std::fs::write(vault.join("machine.id"), "m-1\n").expect("write");
    let out = home.setup(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let service = std::fs::read_to_string(units.join("nd7-ship.service")).expect("service written");
    assert!(
        service.contains(&format!("ExecStart=\"{}\" ship", nd7_path())),
        "{service}"
    );
    assert!(units.join("nd7-ship.timer").exists());

    let out = home.setup(&["--uninstall"]);
    assert!(out.status.success());
    assert!(
        stdout(&out).contains("removed the ship timer"),
        "{}",
        stdout(&out)
    );
    assert!(!units.join("nd7-ship.service").exists() && !units.join("nd7-ship.timer").exists());
}

#[test]
fn a_timer_brew_services_runs_is_left_to_it() {
    let home = Home::new();
    let vault = home.dir.path().join(".local/state/nd7/vault");
    std::fs::create_dir_all(&vault).expect("mkdir");
    std::fs::write(vault.join("machine.id"), "m-1\n").expect("write");
    let brew = home
        .dir
        .path()
        .join(".config/systemd/user/homebrew.nd7.timer");
    std::fs::create_dir_all(brew.parent().expect("dir")).expect("mkdir");
    std::fs::write(&brew, "[Timer]\n").expect("write");
    let out = home.setup(&[]);
    assert!(
        stdout(&out).contains("ship timer: left to Homebrew"),
        "{}",
        stdout(&out)
    );
    assert!(!brew.with_file_name("nd7-ship.timer").exists());
}

#[test]
fn the_timer_units_pass_systemd_analyze_and_the_plist_parses() {
    let dir = tempfile::tempdir().expect("tempdir");
    let nd7 = Path::new(env!("CARGO_BIN_EXE_nd7"));
    let (service, timer) = nd7_core::setup::timer::systemd_units(nd7);
    std::fs::write(dir.path().join("nd7-ship.service"), service).expect("write");
    std::fs::write(dir.path().join("nd7-ship.timer"), timer).expect("write");
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(dir.path().join("nd7-ship.service"))
        .arg(dir.path().join("nd7-ship.timer"))
        .output()
        .expect("systemd-analyze is needed for this test: apt-get install systemd");
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert_eq!(stderr(&out), "", "systemd-analyze complained");

    let plist = dir.path().join("dev.nd7.ship.plist");
    std::fs::write(
        &plist,
        nd7_core::setup::timer::launchd_plist(Path::new("/Users/a&b/nd7")),
    )
    .expect("write");
    let script = "import plistlib,sys; p=plistlib.load(open(sys.argv[1],'rb')); print(p['Label'], p['ProgramArguments'], p['StartInterval'])";
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(&plist)
        .output()
        .expect("python3 is needed for this test");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out).trim(),
        "dev.nd7.ship ['/Users/a&b/nd7', 'ship'] 300"
    );
}

#[test]
fn claude_json_moves_under_dot_claude_visibly_and_comes_back() {
    let home = Home::new();
    let file = home.dir.path().join(".claude.json");
    std::fs::write(&file, r#"{"projects":{}}"#).expect("write");
    let out = home.setup(&["--dry-run"]);
    assert!(stdout(&out).contains("would move to"), "{}", stdout(&out));
    assert!(
        std::fs::symlink_metadata(&file)
            .expect("lstat")
            .file_type()
            .is_file()
    );

    let out = home.setup(&[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("moved to"), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("nd7 run lets it write"),
        "says why: {}",
        stdout(&out)
    );
    assert!(
        std::fs::symlink_metadata(&file)
            .expect("lstat")
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        std::fs::read_to_string(&file).expect("through the link"),
        r#"{"projects":{}}"#
    );

    let out = home.setup(&["--uninstall"]);
    assert!(stdout(&out).contains("moved back"), "{}", stdout(&out));
    assert!(
        std::fs::symlink_metadata(&file)
            .expect("lstat")
            .file_type()
            .is_file()
    );
    assert!(!home.dir.path().join(".claude/claude.json").exists());
    assert_eq!(
        std::fs::read_to_string(&file).expect("read"),
        r#"{"projects":{}}"#
    );
}

/// A stand-in `claude` that says it is `version`, alone in a directory
/// (what setup and doctor ask it is its version, nothing else).
fn claude_of(home: &Home, version: &str) -> PathBuf {
    let bin = home.dir.path().join(format!("claude-{version}"));
    std::fs::create_dir_all(&bin).expect("mkdir");
    let claude = bin.join("claude");
    std::fs::write(
        &claude,
        format!("#!/bin/sh\necho '{version} (Claude Code)'\n"),
    )
    .expect("write");
    std::fs::set_permissions(&claude, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    bin
}

fn run_with(home: &Home, path_dir: Option<&Path>, args: &[&str]) -> Output {
    let path = match path_dir {
        Some(dir) => format!("{}:/usr/bin:/bin", dir.display()),
        None => "/usr/bin:/bin".into(),
    };
    Command::new(env!("CARGO_BIN_EXE_nd7"))
        .args(args)
        .env("HOME", home.dir.path())
        .env_remove("XDG_DATA_HOME")
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_STATE_HOME")
        .env("PATH", path)
        .output()
        .expect("run nd7")
}

/// Setup run before Claude Code is installed registers every event; once
/// 2.1.197 is there, doctor names the events it does not know (it warns
/// about them at every start) and says to run setup; after an upgrade to
/// 2.1.332, doctor names the events now missing. Guards the unknown-events
/// part of `hooks_check`.
#[test]
fn setup_and_doctor_keep_in_step_with_the_installed_claude_code() {
    let home = Home::new();
    assert!(home.setup(&[]).status.success());
    let old = claude_of(&home, "2.1.197");
    let doctor = run_with(&home, Some(&old), &["doctor"]);
    let text = stdout(&doctor);
    assert_eq!(doctor.status.code(), Some(1), "{text}");
    assert!(
        text.contains("registered for events Claude Code 2.1.197 does not know, which it warns about at every start: PreModelSwitch, PostModelSwitch, DirectoryAdded, PreSkillShellCommand"),
        "{text}"
    );
    let hooks_fix = text
        .lines()
        .skip_while(|l| !l.contains(" hooks "))
        .nth(1)
        .unwrap_or_default();
    assert_eq!(hooks_fix.trim(), "fix: nd7 setup", "{text}");
    let setup = run_with(&home, Some(&old), &["setup"]);
    assert!(
        stdout(&setup).contains("took nd7 record from 4 events"),
        "{}",
        stdout(&setup)
    );
    let text = stdout(&run_with(&home, Some(&old), &["doctor"]));
    assert!(
        text.contains("ok   hooks   28 of 28 events record with"),
        "{text}"
    );
    // An upgrade adds events.
    let new = claude_of(&home, "2.1.332");
    let text = stdout(&run_with(&home, Some(&new), &["doctor"]));
    assert!(
        text.contains("FAIL hooks   28 of 32 events record with")
            && text.contains(
                "missing: PreModelSwitch, PostModelSwitch, DirectoryAdded, PreSkillShellCommand"
            ),
        "{text}"
    );
}

/// Setup says what it did in a few lines, not one per event.
#[test]
fn setup_prints_a_short_summary() {
    let home = Home::new();
    let out = run_with(&home, Some(&claude_of(&home, "2.1.197")), &["setup"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.lines().count() <= 5, "{text}");
    assert!(
        text.starts_with("~/.claude/settings.json: registered nd7 record for 28 events (the events Claude Code 2.1.197 knows)\n"),
        "{text}"
    );
    assert!(
        text.contains("completions: wrote ~/.local/share/bash-completion/completions/nd7, "),
        "{text}"
    );
}

/// `--uninstall` leaves no `{}` settings file, no backup holding nd7's
/// hooks, no empty completion folders and no link of nd7's.
#[test]
fn uninstall_leaves_nothing_of_nd7_behind() {
    let home = Home::new();
    // An older nd7 entry is all the file holds: setup's backup holds it too.
    home.write_settings(
        r#"{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"/old/bin/nd7 record"}]}]}}"#,
    );
    assert!(home.setup(&[]).status.success());
    let backup = home.settings().with_file_name("settings.json.nd7-backup");
    assert!(backup.exists());
    assert!(
        std::fs::symlink_metadata(home.dir.path().join(".claude.json"))
            .expect("setup left a link")
            .file_type()
            .is_symlink()
    );
    let out = home.setup(&["--uninstall"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!home.settings().exists(), "no {{}} left: {}", stdout(&out));
    assert!(!backup.exists(), "{}", stdout(&out));
    for gone in [
        ".local/share/bash-completion",
        ".local/share/zsh",
        ".config/fish",
        ".claude.json",
    ] {
        assert!(
            std::fs::symlink_metadata(home.dir.path().join(gone)).is_err(),
            "{gone} is left: {}",
            stdout(&out)
        );
    }
    // What is not nd7's stays: the user's own settings and files.
    let home = Home::new();
    home.write_settings(r#"{"model":"opus"}"#);
    std::fs::create_dir_all(home.dir.path().join(".config/fish/completions")).expect("mkdir");
    std::fs::write(
        home.dir.path().join(".config/fish/completions/git.fish"),
        "",
    )
    .expect("write");
    assert!(home.setup(&[]).status.success());
    assert!(home.setup(&["--uninstall"]).status.success());
    assert_eq!(home.read_settings(), json!({"model": "opus"}));
    assert!(
        home.dir
            .path()
            .join(".config/fish/completions/git.fish")
            .exists()
    );
}

/// A crash at any step of replacing the settings or their backup leaves
/// each file whole: the old bytes or the new, never a mix, at its mode from
/// the first moment. The crash is injected (`ND7_FAULT=replace-<step>:<name>`,
/// test builds only) and the process aborts there; setup runs under umask
/// 022, so a temporary made at the default mode and chmodded after would be
/// caught world-readable at `created`. Guards `files::replace` (the
/// temporary and the rename) and the mode in `Staged::create`.
#[test]
fn a_crash_while_replacing_the_settings_leaves_each_file_whole_and_private() {
    use std::os::unix::fs::PermissionsExt;
    let mine = "{\n  \"model\": \"opus\"\n}\n";
    for name in ["settings.json.nd7-backup", "settings.json"] {
        for step in ["created", "half", "written", "renamed"] {
            let home = Home::new();
            home.write_settings(mine);
            std::fs::set_permissions(home.settings(), std::fs::Permissions::from_mode(0o600))
                .expect("chmod");
            let out = Command::new("sh")
                .args([
                    "-c",
                    "umask 022; exec \"$0\" setup",
                    env!("CARGO_BIN_EXE_nd7"),
                ])
                .env("HOME", home.dir.path())
                .env_remove("XDG_DATA_HOME")
                .env_remove("XDG_CONFIG_HOME")
                .env("PATH", "/usr/bin:/bin")
                .env("ND7_FAULT", format!("replace-{step}:{name}"))
                .output()
                .expect("run nd7 setup");
            assert_eq!(out.status.code(), None, "{name} {step}: the crash happened");
            let dir = home.settings().parent().expect("dir").to_path_buf();
            let settings = std::fs::read_to_string(home.settings()).expect("settings");
            let new = settings != mine;
            assert!(
                !new || (name == "settings.json" && step == "renamed"),
                "{name} {step}: settings replaced before their rename"
            );
            if new {
                let v: Value = serde_json::from_str(&settings).expect("the new settings, whole");
                assert!(v["hooks"].is_object(), "{settings}");
            }
            let backup = dir.join("settings.json.nd7-backup");
            match std::fs::read_to_string(&backup) {
                Ok(text) => assert_eq!(text, mine, "{name} {step}: the backup is whole"),
                Err(_) => assert!(
                    name == "settings.json.nd7-backup" && step != "renamed",
                    "{name} {step}: the backup is missing"
                ),
            }
            for entry in std::fs::read_dir(&dir).expect("list") {
                let path = entry.expect("entry").path();
                let mode = std::fs::symlink_metadata(&path)
                    .expect("stat")
                    .permissions()
                    .mode();
                assert_eq!(
                    mode & 0o077,
                    0,
                    "{name} {step}: {} is mode {mode:o}",
                    path.display()
                );
            }
        }
    }
}

/// The XDG variables count only as absolute paths (home::Base): an
/// absolute `XDG_DATA_HOME` takes bash's and zsh's completions, a relative
/// `XDG_CONFIG_HOME` is ignored for `~/.config`, and a relative
/// `XDG_STATE_HOME` leaves the logs under `~/.local/state`. Guards the
/// `is_absolute` filter in `home::Base::set_in_env`.
#[test]
fn xdg_variables_count_only_as_absolute_paths() {
    let home = Home::new();
    let data = home.dir.path().join("data");
    let cwd = tempfile::tempdir().expect("cwd");
    let out = Command::new(env!("CARGO_BIN_EXE_nd7"))
        .arg("setup")
        .current_dir(cwd.path())
        .env("HOME", home.dir.path())
        .env("XDG_DATA_HOME", &data)
        .env("XDG_CONFIG_HOME", "relative/config")
        .env("PATH", "/usr/bin:/bin")
        .output()
        .expect("run nd7 setup");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(data.join("bash-completion/completions/nd7").is_file());
    assert!(
        home.dir
            .path()
            .join(".config/fish/completions/nd7.fish")
            .is_file()
    );
    let doctor = Command::new(env!("CARGO_BIN_EXE_nd7"))
        .arg("doctor")
        .current_dir(cwd.path())
        .env("HOME", home.dir.path())
        .env("XDG_STATE_HOME", "relative/state")
        .env("PATH", "/usr/bin:/bin")
        .output()
        .expect("run nd7 doctor");
    let logs = home.dir.path().join(".local/state/nd7/sessions");
    assert!(
        stdout(&doctor).contains(&logs.display().to_string()),
        "{}",
        stdout(&doctor)
    );
    assert_eq!(
        std::fs::read_dir(cwd.path()).expect("list").count(),
        0,
        "nothing under the working directory"
    );
}

/// The first run, before `nd7 setup` and before Claude Code ever made
/// `~/.claude.json`: `nd7 doctor` fails its `state` check with the fix, and
/// `nd7 run claude` warns that Claude Code cannot save its state this
/// session; after `nd7 setup` (which leaves a link for the file under
/// `~/.claude`) doctor is content and the warning is gone. Guards the
/// `State::Absent` arms of doctor's `state` check (src/setup/doctor.rs) and of
/// `nd7 run`'s warning (src/run.rs): once doctor said ok here while every
/// save was refused.
#[cfg(target_os = "linux")]
#[test]
fn the_first_run_without_claude_json_is_named_by_doctor_and_nd7_run() {
    use crate::world::World;
    let world = World::new();
    let home = world.home();
    assert!(std::fs::symlink_metadata(home.join(".claude.json")).is_err());
    let doctor = |home: &Path| {
        Command::new(env!("CARGO_BIN_EXE_nd7"))
            .arg("doctor")
            .env("HOME", home)
            .env("PATH", "/usr/bin:/bin")
            .env_remove("XDG_STATE_HOME")
            .env_remove("CLAUDE_CONFIG_DIR")
            .output()
            .expect("run nd7 doctor")
    };
    let text = stdout(&doctor(&home));
    let state = text
        .lines()
        .position(|l| l.starts_with("FAIL state"))
        .unwrap_or_else(|| panic!("no failed state check:\n{text}"));
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[state].contains("~/.claude.json does not exist yet, and Claude Code would create it in your home directory"),
        "{text}"
    );
    assert_eq!(lines[state + 1].trim(), "fix: nd7 setup", "{text}");
    // A stand-in claude under nd7 run: what it prints shows it ran.
    let bin = world.proj().join("bin");
    std::fs::create_dir_all(&bin).expect("mkdir bin");
    let claude = bin.join("claude");
    std::fs::write(&claude, "#!/bin/sh\necho claude-ran\n").expect("write claude");
    std::fs::set_permissions(&claude, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let run = |world: &World| {
        world
            .nd7(&["run", &claude.display().to_string()])
            .output()
            .expect("nd7 run")
    };
    let out = run(&world);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("claude-ran"), "{}", stdout(&out));
    let warning = format!(
        "{}/.claude.json does not exist yet, and Claude Code would create it in your home directory, where the floor lets nothing be written, so it cannot save its state this session; `nd7 setup` leaves a link for it under ~/.claude",
        world.acct.display()
    );
    assert!(stderr(&out).contains(&warning), "{}", stderr(&out));

    let setup = Command::new(env!("CARGO_BIN_EXE_nd7"))
        .arg("setup")
        .env("HOME", &home)
        .env("PATH", "/usr/bin:/bin")
        .env_remove("XDG_DATA_HOME")
        .env_remove("XDG_CONFIG_HOME")
        .output()
        .expect("nd7 setup");
    assert!(setup.status.success(), "{}", stderr(&setup));
    let text = stdout(&doctor(&home));
    assert!(
        text.contains("ok   state   ~/.claude.json links to ~/.claude/claude.json"),
        "{text}"
    );
    let out = run(&world);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stderr(&out).contains(".claude.json"), "{}", stderr(&out));
}

/// On a machine without a systemd user session (su, a container, no
/// lingering): setup writes the timer and says what is missing and how to
/// run `nd7 ship` otherwise, rather than fail on systemctl; doctor names the
/// same fix, not `nd7 setup`, the command that could not start it.
#[test]
fn without_a_user_session_setup_and_doctor_say_what_is_missing_and_how_to_ship() {
    let home = Home::new();
    let vault = home.dir.path().join(".local/state/nd7/vault");
    std::fs::create_dir_all(&vault).expect("mkdir");
    std::fs::write(vault.join("machine.id"), "m-1\n").expect("write");
    std::fs::write(vault.join("server"), "https://127.0.0.1:9\n").expect("write");
    let run = |cmd: &str, runtime: Option<&Path>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_nd7"));
        c.arg(cmd)
            .env("HOME", home.dir.path())
            .env("PATH", "/usr/bin:/bin")
            .env("USER", "dev")
            .env_remove("XDG_DATA_HOME")
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("XDG_STATE_HOME");
        match runtime {
            Some(r) => c.env("XDG_RUNTIME_DIR", r),
            None => c.env_remove("XDG_RUNTIME_DIR"),
        };
        c.output().expect("run nd7")
    };
    let out = run("setup", None);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let said = format!("{}{}", stdout(&out), stderr(&out));
    for text in [
        "nothing runs them: this account has no systemd user session here ($XDG_RUNTIME_DIR is not set",
        "`loginctl enable-linger dev`",
        "`systemctl --user enable --now nd7-ship.timer`",
        &format!("`*/5 * * * * {} ship`", nd7_path()),
    ] {
        assert!(said.contains(text), "{text:?} is not in:\n{said}");
    }
    assert!(!said.contains("Failed to connect"), "{said}");
    let units = home.dir.path().join(".config/systemd/user");
    assert!(units.join("nd7-ship.timer").exists());

    // A runtime directory with no user manager in it is the same case.
    let runtime = tempfile::tempdir().expect("tempdir");
    let out = run("doctor", Some(runtime.path()));
    let text = stdout(&out);
    let timer = text
        .lines()
        .skip_while(|l| !l.contains("timer"))
        .take(2)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(timer.contains("installed, but nothing runs it"), "{text}");
    assert!(
        timer.contains("has no systemd user manager running"),
        "{text}"
    );
    assert!(timer.contains("loginctl enable-linger dev"), "{text}");
    assert!(!timer.contains("fix: nd7 setup"), "{text}");
}

/// `nd7 uninstall` is `nd7 setup --uninstall`; with --dry-run it says what
/// it would do, in the conditional, and changes nothing.
#[test]
fn uninstall_exists_and_its_dry_run_says_what_it_would_do() {
    let home = Home::new();
    let vault = home.dir.path().join(".local/state/nd7/vault");
    std::fs::create_dir_all(&vault).expect("mkdir");
    std::fs::write(vault.join("machine.id"), "m-1\n").expect("write");
    assert!(home.setup(&[]).status.success());
    let units = home.dir.path().join(".config/systemd/user");
    let uninstall = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_nd7"))
            .arg("uninstall")
            .args(args)
            .env("HOME", home.dir.path())
            .env_remove("XDG_DATA_HOME")
            .env_remove("XDG_CONFIG_HOME")
            .env("PATH", "/usr/bin:/bin")
            .output()
            .expect("run nd7 uninstall")
    };
    let dry = uninstall(&["--dry-run"]);
    assert!(dry.status.success(), "{}", stderr(&dry));
    let said = stdout(&dry);
    assert!(said.contains("would remove the ship timer"), "{said}");
    assert!(said.contains("completions: would remove"), "{said}");
    assert!(!said.contains(": removed"), "{said}");
    assert!(units.join("nd7-ship.timer").exists());
    assert!(
        !home.read_settings()["hooks"]
            .as_object()
            .is_none_or(|h| h.is_empty())
    );

    let out = uninstall(&[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("removed the ship timer"),
        "{}",
        stdout(&out)
    );
    assert!(!units.join("nd7-ship.timer").exists());
}

/// Where bash-completion is not installed (as on this test machine, when
/// /usr/share/bash-completion is absent), nothing loads the bash script
/// setup writes: setup says so and how to load it. Only for a bash user.
#[test]
fn bash_completions_nothing_loads_are_said() {
    let loaded = nd7_core::setup::completions::bash_completion_loaded(&|p: &Path| p.exists());
    let home = Home::new();
    let setup = |shell: &str| {
        Command::new(env!("CARGO_BIN_EXE_nd7"))
            .arg("setup")
            .env("HOME", home.dir.path())
            .env("SHELL", shell)
            .env_remove("XDG_DATA_HOME")
            .env_remove("XDG_CONFIG_HOME")
            .env("PATH", "/usr/bin:/bin")
            .output()
            .expect("run nd7 setup")
    };
    let out = setup("/bin/bash");
    assert!(out.status.success(), "{}", stderr(&out));
    let said = format!("{}{}", stdout(&out), stderr(&out));
    let warned = said
        .contains("only through the bash-completion package, which is not installed here")
        && said.contains(&format!(
            "add `source {}` to ~/.bashrc",
            home.dir
                .path()
                .join(".local/share/bash-completion/completions/nd7")
                .display()
        ));
    assert_eq!(warned, !loaded, "{said}");
    // A zsh user is not told about bash.
    std::fs::remove_dir_all(home.dir.path().join(".local/share/bash-completion")).expect("rm");
    let said = stderr(&setup("/bin/zsh")) + &stdout(&setup("/bin/zsh"));
    assert!(!said.contains("bash-completion package"), "{said}");
}

/// Setup run again over the hooks an older nd7 wrote (`nd7 record`, exec
/// and shell form) moves each to the nd7-record beside nd7 (ADR-0151), says
/// so, leaves the user's hook, and changes nothing the time after; doctor
/// then finds every event recording with nd7-record. Guards
/// `setup::recorder_beside` in setup and doctor, and `Change::Moved`.
#[test]
fn setup_moves_older_hooks_to_nd7_record() {
    let home = Home::new();
    let old = json!({"hooks": {
        "Stop": [{"hooks": [
            {"type": "command", "command": "/usr/local/bin/notify"},
            {"type": "command", "command": nd7_path(), "args": ["record"]}
        ]}],
        "SessionStart": [{"hooks": [{"type": "command", "command": format!("{} record", nd7_path())}]}]
    }});
    home.write_settings(&old.to_string());
    let out = home.setup(&[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(
            "moved 2 events from nd7 record to nd7-record, which starts faster (ADR-0151)"
        ),
        "{}",
        stdout(&out)
    );
    assert!(!stderr(&out).contains("no nd7-record"), "{}", stderr(&out));
    let s = home.read_settings();
    assert_eq!(
        s["hooks"]["Stop"],
        json!([
            {"hooks": [{"type": "command", "command": "/usr/local/bin/notify"}]},
            {"hooks": [lean_hook()]}
        ])
    );
    assert_eq!(
        s["hooks"]["SessionStart"],
        json!([{"hooks": [lean_hook()]}])
    );
    let again = home.setup(&[]);
    assert!(
        stdout(&again).contains("~/.claude/settings.json: nothing to change"),
        "{}",
        stdout(&again)
    );
    // The hook as written records, through the real nd7-record.
    let state = State::new();
    let hook = &s["hooks"]["Stop"][1]["hooks"][0];
    let out = run_with_stdin(
        state
            .command(hook["command"].as_str().expect("command"))
            .args(
                hook["args"]
                    .as_array()
                    .expect("args")
                    .iter()
                    .map(|a| a.as_str().expect("arg")),
            ),
        br#"{"session_id":"moved","hook_event_name":"Stop"}"#,
    );
    assert!(
        out.status.success() && stderr(&out).is_empty(),
        "{}",
        stderr(&out)
    );
    assert_eq!(lines(&state.log("moved")).len(), 1);
}

/// An nd7 with no nd7-record beside it (a partial install) wires
/// `nd7 record` as before and says why; doctor says the same.
#[test]
fn without_nd7_record_beside_it_setup_wires_nd7_record_and_says_so() {
    let home = Home::new();
    let bin = tempfile::tempdir().expect("tempdir");
    let alone = bin.path().join("nd7");
    if std::fs::hard_link(env!("CARGO_BIN_EXE_nd7"), &alone).is_err() {
        std::fs::copy(env!("CARGO_BIN_EXE_nd7"), &alone).expect("copy nd7");
    }
    let run = |args: &[&str]| {
        Command::new(&alone)
            .args(args)
            .env("HOME", home.dir.path())
            .env_remove("XDG_DATA_HOME")
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("XDG_STATE_HOME")
            .env("PATH", "/usr/bin:/bin")
            .output()
            .expect("run nd7")
    };
    let out = run(&["setup"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let said = format!(
        "no nd7-record beside {}: hooks run `nd7 record`",
        alone.display()
    );
    assert!(stderr(&out).contains(&said), "{}", stderr(&out));
    let s = home.read_settings();
    assert_eq!(
        s["hooks"]["Stop"],
        json!([{"hooks": [{"type": "command", "command": alone.display().to_string(), "args": ["record"]}]}])
    );
    let doctor = stdout(&run(&["doctor"]));
    assert!(
        doctor.contains(&format!("ok   recorder {said}")),
        "{doctor}"
    );
    assert!(
        doctor.contains(&format!(
            "ok   hooks   32 of 32 events record with {}\n",
            alone.display()
        )),
        "{doctor}"
    );
}
