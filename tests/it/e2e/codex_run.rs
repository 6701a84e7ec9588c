//! `nd7 run codex` with the real Codex CLI against the local Responses API
//! mock, as an ordinary account in the sandbox tests' scratch world: Codex's
//! own sandbox is off, its shell calls leave the floor through the exit
//! (`nd7 hook-route`), and the floor's refusals are explained to the model
//! and written down (ADR-0056, ADR-0057); every other way a model can ask
//! Codex for a command still leaves an `exec` entry or runs nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::codex::{install, path_with, version};
use super::mock_responses::{Item, MockResponses};
use crate::world::{ND7_EXEC, World, text};

/// Codex's settings in the world's home: the mock as its model provider.
pub(super) fn configure(world: &World, api: &str) {
    let dir = world.home().join(".codex");
    std::fs::create_dir_all(&dir).expect("mkdir .codex");
    std::fs::write(
        dir.join("config.toml"),
        format!(
            "# the test's settings\nmodel = \"gpt-5.5\"\nmodel_provider = \"mock\"\n\n[model_providers.mock]\nname = \"mock\"\nbase_url = \"{api}\"\nwire_api = \"responses\"\n"
        ),
    )
    .expect("write config.toml");
    world.own();
}

/// `nd7 run codex exec …` in the world, with Codex's directory on PATH.
pub(super) fn run_codex(world: &World, codex: &Path, args: &[&str]) -> Command {
    let codex_s = codex.display().to_string();
    let mut all = vec![
        "run",
        codex_s.as_str(),
        "exec",
        "--json",
        "--skip-git-repo-check",
    ];
    all.extend(args);
    let mut command = world.nd7(&all);
    command.env("PATH", path_with(codex)).stdin(Stdio::null());
    command
}

/// Waits for `child` at most three minutes; a hang is a failure.
pub(super) fn finish(mut child: std::process::Child) -> Output {
    let deadline = Instant::now() + Duration::from_secs(180);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

/// The run's chain in the world's state directory.
pub(super) fn run_entries(world: &World) -> (PathBuf, Vec<Value>) {
    let sessions = world.home().join(".local/state/nd7/sessions");
    let dir = std::fs::read_dir(&sessions)
        .expect("sessions")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("run-"))
        })
        .expect("a run's log");
    let entries = std::fs::read_to_string(dir.join("events.ndjson"))
        .expect("events")
        .lines()
        .map(|l| serde_json::from_str(l).expect("an entry"))
        .collect();
    (dir, entries)
}

pub(super) fn of_kind<'a>(entries: &'a [Value], kind: &str) -> Vec<&'a Value> {
    entries.iter().filter(|e| e["kind"] == kind).collect()
}

#[test]
fn codex_shell_calls_go_through_the_exit_under_the_sessions_grants() {
    let codex = install(&version());
    let world = World::new();
    let outside = world.outside().display().to_string();
    let gate = world.root.join("granted");
    let api = MockResponses::start(vec![
        vec![Item::Shell("echo made > made.txt && cat made.txt".into())],
        vec![Item::Shell("echo pwned >> \"$HOME/.bashrc\"".into())],
        vec![Item::Shell("cat \"$HOME/.ssh/id_ed25519\"".into())],
        vec![Item::Shell(format!("echo one > '{outside}/granted.txt'"))],
        vec![
            Item::Gate(gate.clone()),
            Item::Shell(format!("echo two > '{outside}/granted.txt'")),
        ],
        vec![Item::Message("finished".into())],
    ]);
    std::fs::write(world.home().join(".bashrc"), "# mine\n").expect("write .bashrc");
    configure(&world, &api.url);
    let child = run_codex(&world, &codex, &["do the work"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start nd7 run codex");
    // The fourth call was refused; grant the directory before the fifth.
    let deadline = Instant::now() + Duration::from_secs(120);
    while api.outputs().len() < 4 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let allowed = world.nd7(&["allow", &outside]).output().expect("nd7 allow");
    std::fs::write(&gate, "").expect("open the gate");
    let out = finish(child);
    let stderr = text(&out.stderr);
    assert!(
        allowed.status.success(),
        "nd7 allow: {}",
        text(&allowed.stderr)
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr:\n{stderr}\nstdout:\n{}",
        text(&out.stdout)
    );
    assert!(stderr.contains("Codex's own sandbox is off"), "{stderr}");

    // What ran, and what the floor refused, as the model saw it.
    let outputs = api.outputs();
    assert_eq!(outputs.len(), 5, "{outputs:?}");
    assert!(outputs[0].1.contains("made"), "{outputs:?}");
    assert!(
        outputs[1].1.contains("Read-only file system"),
        "{}",
        outputs[1].1
    );
    assert!(outputs[2].1.contains("Permission denied") && !outputs[2].1.contains("SECRET"));
    assert!(
        outputs[3].1.contains("Permission denied"),
        "{}",
        outputs[3].1
    );
    assert_eq!(
        std::fs::read_to_string(world.proj().join("made.txt")).expect("made.txt"),
        "made\n"
    );
    assert_eq!(
        std::fs::read_to_string(world.home().join(".bashrc")).expect(".bashrc"),
        "# mine\n"
    );
    assert_eq!(
        std::fs::read_to_string(world.outside().join("granted.txt")).expect("granted.txt"),
        "two\n"
    );
    // The explanation reached the model (Codex adds the hook's context).
    let sent = api.requests_text();
    assert!(
        sent.contains("nd7 allow"),
        "no explanation reached the model"
    );

    // The chain: every call's command through the exit, paired by call id,
    // how each ended, the refusals, the grant, and a clean verify.
    let (dir, entries) = run_entries(&world);
    let ids = api.call_ids();
    let execs = of_kind(&entries, "exec");
    assert_eq!(execs.len(), 5, "{execs:?}");
    for (exec, id) in execs.iter().zip(&ids) {
        assert_eq!(exec["tool_use_id"], id.as_str(), "{exec}");
        assert_eq!(exec["source"], "exit:nd7");
    }
    let ends: Vec<i64> = of_kind(&entries, "exec_end")
        .iter()
        .map(|e| e["body"]["exited"].as_i64().unwrap_or(-1))
        .collect();
    assert_eq!(ends[0], 0);
    assert!(ends[1] != 0 && ends[2] != 0 && ends[3] != 0, "{ends:?}");
    assert_eq!(ends[4], 0);
    assert!(
        execs[3]["body"]["grants"]
            .as_array()
            .expect("grants")
            .is_empty()
    );
    assert_eq!(
        execs[4]["body"]["grants"][0],
        outside.as_str(),
        "{}",
        execs[4]
    );
    let refused: Vec<(&str, &str)> = of_kind(&entries, "floor_refused")
        .iter()
        .map(|e| {
            (
                e["tool_use_id"].as_str().unwrap_or_default(),
                e["body"]["paths"][0]["why"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        refused,
        [
            (ids[1].as_str(), "outside"),
            (ids[2].as_str(), "secret"),
            (ids[3].as_str(), "outside")
        ]
    );
    assert_eq!(of_kind(&entries, "grant").len(), 1);
    let end = of_kind(&entries, "run_end")[0];
    assert_eq!(end["body"]["commands_without_call"], 0, "{end}");
    assert!(
        entries
            .iter()
            .any(|e| e["source"] == "intent:codex" && e["kind"] == "tool_call")
    );
    // The rollout is anchored from outside the floor, at the door, and
    // holds against every anchor.
    let anchors = of_kind(&entries, "transcript_anchor");
    assert!(!anchors.is_empty(), "no anchor in the run's chain");
    assert!(
        anchors.iter().all(|a| a["source"] == "exit:nd7"),
        "{anchors:?}"
    );
    assert_eq!(of_kind(&entries, "transcript_gap"), Vec::<&Value>::new());
    let verify = world
        .nd7(&["verify", "--transcript", &dir.display().to_string()])
        .output()
        .expect("nd7 verify");
    assert!(
        verify.status.success(),
        "{}{}",
        text(&verify.stdout),
        text(&verify.stderr)
    );
}

/// A trusted project's `.codex/config.toml` (planted by an earlier session
/// outside nd7, or written by the user) turning hooks off and Codex's
/// sandbox on: under `nd7 run` the command line wins, so every event is
/// still recorded and the shell call still goes through the exit.
#[test]
fn a_projects_codex_settings_cannot_turn_off_recording_or_the_exit() {
    let codex = install(&version());
    let world = World::new();
    let api = MockResponses::start(vec![
        vec![Item::Shell("echo made > made.txt".into())],
        vec![Item::Message("finished".into())],
    ]);
    configure(&world, &api.url);
    let project = world.proj().display().to_string();
    let mut config =
        std::fs::read_to_string(world.home().join(".codex/config.toml")).expect("read");
    config.push_str(&format!(
        "\n[projects.\"{project}\"]\ntrust_level = \"trusted\"\n"
    ));
    std::fs::write(world.home().join(".codex/config.toml"), config).expect("write");
    std::fs::create_dir_all(world.proj().join(".codex")).expect("mkdir");
    std::fs::write(
        world.proj().join(".codex/config.toml"),
        "sandbox_mode = \"workspace-write\"\n[features]\nhooks = false\n",
    )
    .expect("write the project's settings");
    world.own();
    let child = run_codex(&world, &codex, &["do the work"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start nd7 run codex");
    let out = finish(child);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(world.proj().join("made.txt").exists());
    let (_, entries) = run_entries(&world);
    let exec = of_kind(&entries, "exec");
    assert_eq!(exec.len(), 1, "{entries:?}");
    assert_eq!(exec[0]["tool_use_id"], api.call_ids()[0].as_str());
    assert_eq!(of_kind(&entries, "tool_call").len(), 1);
}

/// Under `nd7 run codex` the door reads what the payloads leave out from the
/// rollout, as `nd7 record` does without `nd7 run`: the Codex version in
/// `session_start`, and how each reported call ended, shell calls and
/// `apply_patch` alike (the exit's `exec_end` covers shell calls only).
/// Guards the `Door` arm of `record::entry::event_for`: before, every version was
/// null and every outcome unknown. A patch Codex did not apply (one that
/// fails its check, one the floor refuses to write) gets no PostToolUse from
/// Codex 0.171.0 at all: its `tool_call` stands alone, and its failure is in
/// the rollout only (a completed item, `failed`, for the refused write).
#[test]
fn under_nd7_run_codex_entries_name_the_version_and_each_calls_outcome() {
    let codex = install(&version());
    let world = World::new();
    std::fs::write(world.proj().join("note.txt"), "hello\n").expect("write note.txt");
    let refused = world.outside().join("patched.txt");
    let api = MockResponses::start(vec![
        vec![Item::Shell("echo fine".into())],
        vec![Item::Shell("echo failing; exit 3".into())],
        vec![Item::Patch(
            "*** Begin Patch\n*** Update File: missing.txt\n@@\n-nothing\n+here\n*** End Patch\n"
                .into(),
        )],
        vec![Item::Patch(
            "*** Begin Patch\n*** Update File: note.txt\n@@\n-hello\n+hello, patched\n*** End Patch\n"
                .into(),
        )],
        vec![Item::Patch(format!(
            "*** Begin Patch\n*** Add File: {}\n+refused\n*** End Patch\n",
            refused.display()
        ))],
        vec![Item::Message("finished".into())],
    ]);
    configure(&world, &api.url);
    let child = run_codex(&world, &codex, &["do the work"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start nd7 run codex");
    let out = finish(child);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(world.proj().join("note.txt")).expect("note.txt"),
        "hello, patched\n"
    );
    assert!(!refused.exists());
    let (_, entries) = run_entries(&world);
    let start = of_kind(&entries, "session_start");
    assert_eq!(start.len(), 1, "{entries:?}");
    assert_eq!(
        start[0]["body"]["agent"],
        serde_json::json!({"name": "codex", "version": version(), "originator": "codex_exec"})
    );
    let ids = api.call_ids();
    assert_eq!(ids.len(), 5, "{ids:?}");
    let result = |id: &str| -> Option<&Value> {
        entries
            .iter()
            .find(|e| e["kind"] == "tool_result" && e["tool_use_id"] == id)
    };
    let outcome = |id: &str| {
        let r = result(id).unwrap_or_else(|| panic!("no result for {id}: {entries:?}"));
        (r["body"]["ok"].clone(), r["body"]["outcome"].clone())
    };
    use serde_json::json;
    assert_eq!(
        outcome(&ids[0]),
        (
            json!(true),
            json!({"status": "completed", "exit_code": 0, "from": "rollout"})
        )
    );
    assert_eq!(
        outcome(&ids[1]),
        (
            json!(false),
            json!({"status": "failed", "exit_code": 3, "from": "rollout"})
        )
    );
    assert_eq!(
        outcome(&ids[3]),
        (
            json!(true),
            json!({"status": "completed", "from": "rollout"})
        )
    );
    for unapplied in [&ids[2], &ids[4]] {
        assert!(result(unapplied).is_none(), "{unapplied}: {entries:?}");
        assert!(
            entries
                .iter()
                .any(|e| e["kind"] == "tool_call" && e["tool_use_id"] == unapplied.as_str()),
            "{unapplied}"
        );
    }
    // The exit's own account of the shell calls agrees.
    let ends: Vec<i64> = of_kind(&entries, "exec_end")
        .iter()
        .map(|e| e["body"]["exited"].as_i64().unwrap_or(-1))
        .collect();
    assert_eq!(ends, [0, 3]);
}

/// Every way a model can ask Codex 0.171.0 for a command, other than the
/// `exec_command` the route hook rewrites: a terminal session fed by
/// `write_stdin` (which fires no hook), the shell tools of other models
/// (`shell`, `shell_command`, `local_shell`, `container.exec`), a
/// `local_shell_call` item, and a function named like `nd7-exec` planted in
/// Codex's shell snapshot. Each would write a file in the project. Whatever
/// ran must have gone through the exit: every file made has its `exec`
/// entry. (With 0.171.0 none of the others runs anything: the terminal
/// cannot be opened under the floor, a plain session's stdin is closed, the
/// other tools are unknown, the snapshot's function is not reached. A
/// later Codex that runs one outside the exit fails this test; it would run
/// under the floor alone, as docs/sandbox.md says.)
#[test]
fn no_command_codex_runs_skips_the_exit_unrecorded() {
    let codex = install(&version());
    let world = World::new();
    let shell = |name: &str, file: &str| {
        Item::Call(
            name.into(),
            json!({"command": ["bash", "-c", format!("echo x > {file}")]}),
        )
    };
    let snapshot = format!(
        r#"for f in "$HOME"/.codex/shell_snapshots/*.sh; do printf '%s\n' 'function {ND7_EXEC} {{ bash -c "$1"; }}' >> "$f"; done"#
    );
    let api = MockResponses::start(vec![
        vec![Item::Shell("echo x > routed.txt".into())],
        vec![Item::Call(
            "exec_command".into(),
            json!({"cmd": "bash", "tty": true, "yield_time_ms": 1000}),
        )],
        vec![Item::Call(
            "write_stdin".into(),
            json!({"session_id": "{SESSION}", "chars": "echo x > typed.txt\n", "yield_time_ms": 1000}),
        )],
        vec![Item::Call(
            "exec_command".into(),
            json!({"cmd": "bash", "yield_time_ms": 1000}),
        )],
        vec![Item::Call(
            "write_stdin".into(),
            json!({"session_id": "{SESSION}", "chars": "echo x > piped.txt\n", "yield_time_ms": 1000}),
        )],
        vec![shell("shell", "shell.txt")],
        vec![Item::Call(
            "shell_command".into(),
            json!({"command": "echo x > shell_command.txt"}),
        )],
        vec![shell("local_shell", "local_shell.txt")],
        vec![shell("container.exec", "container.txt")],
        vec![Item::Raw(json!({"type": "local_shell_call", "id": "lsc_1",
            "status": "completed", "action": {"type": "exec",
            "command": ["bash", "-c", "echo x > local_shell_call.txt"]}}))],
        vec![Item::Shell(snapshot)],
        vec![Item::Shell("echo x > after_snapshot.txt".into())],
        vec![Item::Message("finished".into())],
    ]);
    configure(&world, &api.url);
    let out = finish(
        run_codex(&world, &codex, &["do the work"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start nd7 run codex"),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let (_, entries) = run_entries(&world);
    let commands: Vec<String> = of_kind(&entries, "exec")
        .iter()
        .map(|e| {
            e["body"]["command"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    let made: Vec<String> = std::fs::read_dir(world.proj())
        .expect("read the project")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".txt"))
        .collect();
    assert!(made.contains(&"routed.txt".to_string()), "{made:?}");
    for file in &made {
        assert!(
            commands.iter().any(|c| c.contains(file.as_str())),
            "{file} was made by a command that did not go through the exit; exec entries: {commands:?}"
        );
    }
}
