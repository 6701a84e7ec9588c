//! Attacking ADR-0151: the `nd7-record` beside `nd7` that setup, doctor and
//! `nd7 run` wire into the agents' hooks (`setup::recorder_beside`). Every
//! hook setup writes runs that file later, outside any sandbox, so what is
//! found at that name decides what runs at every event. The attackers: a
//! local user who can write a directory the recorder is linked from, and
//! the unlucky upgrade that leaves an nd7-record of another version (or
//! something else at that name) beside nd7. Each test installs nd7 as a
//! user would, copies of the built binaries in a directory of the account's,
//! and runs it as that ordinary account in a scratch home (tests/it/world.rs).
#![cfg(target_os = "linux")]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::world::*;

/// nd7, nd7-exec and nd7-record copied into `dir` under the world's root,
/// as an install puts them; returns the directory.
fn install(world: &World, dir: &str) -> PathBuf {
    let bin = world.root.join(dir);
    std::fs::create_dir_all(&bin).expect("mkdir bin");
    for (name, built) in [
        ("nd7", ND7),
        ("nd7-exec", ND7_EXEC),
        ("nd7-record", ND7_RECORD),
    ] {
        std::fs::copy(built, bin.join(name)).expect("copy a binary");
    }
    chmod(&bin, 0o755);
    bin
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// `<bin>/nd7 ARGS` as the account, no agent on PATH.
fn nd7_in(world: &World, bin: &Path, args: &[&str]) -> Output {
    world
        .command(&bin.join("nd7").to_string_lossy(), args)
        .env("PATH", "/usr/bin:/bin")
        .output()
        .expect("run the installed nd7")
}

/// The program Claude Code's Stop hook runs, as setup wrote it.
fn stop_hook(world: &World) -> Value {
    let path = world.home().join(".claude/settings.json");
    let text = std::fs::read_to_string(&path).expect("settings written");
    let settings: Value = serde_json::from_str(&text).expect("json");
    settings["hooks"]["Stop"][0]["hooks"][0].clone()
}

/// The hook runs `nd7 record` of the nd7 in `bin`, not the nd7-record there.
fn assert_runs_nd7_record(world: &World, bin: &Path, out: &Output) {
    let hook = stop_hook(world);
    assert_eq!(
        hook["command"],
        bin.join("nd7").to_string_lossy().as_ref(),
        "{hook}\n{}",
        text(&out.stderr)
    );
    assert_eq!(hook["args"], serde_json::json!(["record"]), "{hook}");
}

/// `nd7 setup` with the nd7 in `bin`: it succeeds, wires `nd7 record`
/// rather than the nd7-record there, and says `why` on standard error.
fn setup_passes_over_the_recorder(world: &World, bin: &Path, why: &str) -> Output {
    let out = nd7_in(world, bin, &["setup"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_runs_nd7_record(world, bin, &out);
    assert!(text(&out.stderr).contains(why), "{}", text(&out.stderr));
    out
}

/// Puts `script` in `bin` as its nd7-record, written beside and renamed
/// into place, so no test's child holds it open for writing when setup
/// starts it (ETXTBSY).
fn plant_recorder(bin: &Path, script: &str) {
    let staged = bin.join("nd7-record.new");
    std::fs::write(&staged, script).expect("a recorder script");
    chmod(&staged, 0o755);
    std::fs::rename(&staged, bin.join("nd7-record")).expect("rename");
}

/// nd7-record beside nd7 is a link to a file in a directory anyone can
/// write (a shared build or download directory): the link's directory is
/// the user's and the file is the user's, 0755, so a check of those alone
/// passes, yet anyone can rename another program over the file, and every
/// hook setup wires then runs it as the user, outside any sandbox. Setup
/// must say so and not wire it; `nd7 run` refuses, as for nd7-exec.
#[test]
fn a_link_to_a_recorder_others_can_replace_is_not_trusted() {
    let world = World::new();
    let bin = install(&world, "bin");
    let shared = world.root.join("shared");
    std::fs::create_dir(&shared).expect("mkdir shared");
    std::fs::rename(bin.join("nd7-record"), shared.join("nd7-record")).expect("move");
    std::os::unix::fs::symlink(shared.join("nd7-record"), bin.join("nd7-record")).expect("link");
    chmod(&shared, 0o777);
    let out = nd7_in(&world, &bin, &["setup"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let warned = text(&out.stderr);
    assert!(
        warned.contains(&format!("{} is writable by anyone", shared.display())),
        "{warned}"
    );
    assert_runs_nd7_record(&world, &bin, &out);
    let agent = world.agent("true");
    let run = nd7_in(&world, &bin, &["run", &agent]);
    assert_ne!(run.status.code(), Some(0), "{}", text(&run.stderr));
    assert!(
        text(&run.stderr).contains(&shared.display().to_string()),
        "{}",
        text(&run.stderr)
    );
}

/// An nd7-record of another version beside nd7 (only nd7 copied over, a
/// package manager that updated one file, a self-update cut off between
/// binaries): setup wired it, so the hooks' entries came from a recorder
/// nothing checked. Setup must wire only the recorder of its own version,
/// say why it did not, and doctor must fail its recorder line.
#[test]
fn a_recorder_of_another_version_is_not_wired() {
    let world = World::new();
    let bin = install(&world, "bin");
    plant_recorder(
        &bin,
        "#!/bin/sh\n[ \"$1\" = --version ] && echo 'nd7-record 0.0.1' && exit 0\ncat >/dev/null\n",
    );
    setup_passes_over_the_recorder(&world, &bin, "nd7-record 0.0.1");
    let doctor = nd7_in(&world, &bin, &["doctor"]);
    let report = text(&doctor.stdout);
    let line = report
        .lines()
        .find(|l| l.contains(" recorder "))
        .unwrap_or_else(|| panic!("no recorder line: {report}"));
    assert!(line.starts_with("FAIL"), "{report}");
    // nd7 run says so with its banner, and runs.
    let run = nd7_in(&world, &bin, &["run", "true"]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    assert!(
        text(&run.stderr).contains("answered \"nd7-record 0.0.1\""),
        "{}",
        text(&run.stderr)
    );
}

/// Another program at that name: a copy of nd7 itself (a packager's
/// slip). Wired, every hook would have run `nd7` with no arguments, which
/// exits 2 with its help on standard error: Claude Code takes status 2 as
/// "block" (ADR-0025), so every tool call would be refused.
#[test]
fn a_copy_of_nd7_at_the_recorders_name_is_not_wired() {
    let world = World::new();
    let bin = install(&world, "bin");
    std::fs::copy(ND7, bin.join("nd7-record")).expect("copy nd7 as nd7-record");
    setup_passes_over_the_recorder(&world, &bin, "it is not this nd7's recorder");
}

/// An nd7-record that never answers (a recorder that hangs, here one that
/// leaves a process holding its output open): each hook would hold the
/// agent up until the agent's own timeout. Setup gives up on it after its
/// bound and wires `nd7 record`.
#[test]
fn a_recorder_that_never_answers_is_not_wired() {
    let world = World::new();
    let bin = install(&world, "bin");
    plant_recorder(&bin, "#!/bin/sh\nsleep 60 &\nsleep 60\n");
    setup_passes_over_the_recorder(&world, &bin, "did not answer --version");
}

/// An nd7-record the account cannot run (an execute bit for the group
/// only, as a package installed with the wrong mode leaves it): setup wired
/// it because some execute bit was set, and then every hook failed to start,
/// so nothing was recorded.
#[test]
fn a_recorder_this_account_cannot_start_is_not_wired() {
    let world = World::new();
    let bin = install(&world, "bin");
    chmod(&bin.join("nd7-record"), 0o050);
    setup_passes_over_the_recorder(&world, &bin, "cannot be started");
}

/// Doctor's fix for a binary others can write must name that binary: with
/// nd7-record the one, it named nd7, nd7-exec and their directory, and the
/// command it gave left the problem in place.
#[test]
fn doctors_fix_names_the_recorder_it_found_writable() {
    let world = World::new();
    let bin = install(&world, "bin");
    chmod(&bin.join("nd7-record"), 0o757);
    let doctor = nd7_in(&world, &bin, &["doctor"]);
    let report = text(&doctor.stdout);
    let lines: Vec<&str> = report.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("FAIL binary"))
        .unwrap_or_else(|| panic!("no failed binary line: {report}"));
    let fix = lines.get(at + 1).copied().unwrap_or_default();
    assert!(
        fix.contains("fix: chmod go-w")
            && fix.contains(&bin.join("nd7-record").display().to_string()),
        "{report}"
    );
}

/// nd7 installed in a directory whose name holds terminal controls (a
/// name the user, or whatever unpacked the archive, chose): setup's
/// messages name that path, and printed it as it was, so the terminal ran
/// the controls. Doctor shows it inert; setup must too.
#[test]
fn setup_shows_the_paths_it_names_inert() {
    let world = World::new();
    let bin = install(&world, "bin\x1b]0;pwned\x07");
    std::fs::remove_file(bin.join("nd7-record")).expect("rm nd7-record");
    let out = nd7_in(&world, &bin, &["setup"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(all.contains("no nd7-record beside"), "{all}");
    assert!(!all.contains('\x1b') && !all.contains('\x07'), "{all:?}");
}

/// nd7 installed where the agent under `nd7 run` may write (an archive
/// unpacked in the temp directory, which every run lets the agent write),
/// or an nd7-record linked into the project (a build of the project's own,
/// wired from a directory of the user's): setup wired that nd7-record into
/// Claude Code's settings, the agent replaced it during the run, and every
/// hook after the run ran the agent's program as the user, outside any
/// sandbox. `nd7 run` must not let the agent reach it.
#[test]
fn a_recorder_the_agent_may_write_is_out_of_its_reach() {
    let mut reached = Vec::new();
    for (case, dir, linked) in [
        ("installed in the temp directory", "tmp/nd7", false),
        ("linked into the project", "bin", true),
        (
            "linked into the project from the home",
            "home/.local/bin",
            true,
        ),
    ] {
        let world = World::new();
        let bin = install(&world, dir);
        let target = if linked {
            let tools = world.proj().join("tools");
            std::fs::create_dir(&tools).expect("mkdir tools");
            std::fs::rename(bin.join("nd7-record"), tools.join("nd7-record")).expect("move");
            std::os::unix::fs::symlink(tools.join("nd7-record"), bin.join("nd7-record"))
                .expect("link");
            tools.join("nd7-record")
        } else {
            bin.join("nd7-record")
        };
        let setup = nd7_in(&world, &bin, &["setup"]);
        assert_eq!(
            setup.status.code(),
            Some(0),
            "{case}: {}",
            text(&setup.stderr)
        );
        let marker = world.outside().join("pwned");
        let agent = world.agent(&format!(
            "printf '#!/bin/sh\\ntouch {marker}\\n' > {target}.new; chmod 755 {target}.new; mv -f {target}.new {target}",
            marker = marker.display(),
            target = target.display(),
        ));
        let run = nd7_in(&world, &bin, &["run", &agent]);
        // A hook after the run, as Claude Code starts the one setup wrote.
        let hook = stop_hook(&world);
        let program = hook["command"].as_str().expect("command").to_string();
        let args: Vec<&str> = hook["args"]
            .as_array()
            .expect("args")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let _ = world.command(&program, &args).output().expect("the hook");
        if marker.exists() {
            reached.push(format!("{case}: {}", text(&run.stderr)));
        }
        assert!(
            run.status.code() == Some(2)
                && text(&run.stderr).contains(&format!(
                    ": lies in {}, which the agent may write",
                    target
                        .parent()
                        .and_then(Path::parent)
                        .expect("dir")
                        .display()
                )),
            "{case}: {}",
            text(&run.stderr)
        );
    }
    assert!(
        reached.is_empty(),
        "the agent's program ran as a hook after the run:\n{}",
        reached.join("\n")
    );
}

/// Waits until `file` last changed more than the 3 s after which an
/// answer from it is remembered (ADR-0157).
fn wait_settled(file: &Path) {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(file).expect("stat");
    let changed = std::time::UNIX_EPOCH
        + std::time::Duration::new(meta.ctime() as u64, meta.ctime_nsec() as u32);
    let settled = changed + std::time::Duration::from_millis(3500);
    if let Ok(left) = settled.duration_since(std::time::SystemTime::now()) {
        std::thread::sleep(left);
    }
}

/// The nd7, nd7-exec of this build in a directory outside the world's root
/// (which the world gives the account before each command, a `chown` that
/// moves the files' change times), and a tally directory the account may
/// write; returns the directory, held, and the tally.
fn install_outside(world: &World) -> (tempfile::TempDir, PathBuf) {
    let outside = tempfile::Builder::new()
        .prefix("recorder-")
        .tempdir_in(world.root.parent().expect("the worlds' directory"))
        .expect("a directory outside the world");
    for (name, built) in [("nd7", ND7), ("nd7-exec", ND7_EXEC)] {
        std::fs::copy(built, outside.path().join(name)).expect("copy a binary");
    }
    chmod(outside.path(), 0o755);
    let tally = world.root.join("tally");
    std::fs::create_dir_all(&tally).expect("mkdir tally");
    chmod(&tally, 0o777);
    (outside, tally)
}

/// A recorder that notes each start in `starts` and answers `version`.
fn counting_recorder(starts: &Path, version: &str) -> String {
    format!(
        "#!/bin/sh\necho \"$*\" >> '{}'\n[ \"$1\" = --version ] && echo 'nd7-record {version}' && exit 0\ncat >/dev/null\n",
        starts.display()
    )
}

/// ADR-0157: a file system that keeps change times coarsely (whole seconds,
/// FAT's two, a clock tick) can write a recorder over in place again within
/// the change time it had when it answered, so that (device, inode, change
/// time) no longer tells the program that answered from its replacement:
/// an upgrade writing over nd7-record while a run asks it would have the
/// next run take the old answer for the new program, unasked. An answer
/// from a file changed within the last 3 s is therefore not remembered:
/// two runs straight after the recorder was written each ask it. Seen
/// failing (the second run took the answer) without `FileStamp::settled`.
#[test]
fn a_recorder_changed_a_moment_ago_is_asked_again() {
    let world = World::new();
    let (outside, tally) = install_outside(&world);
    let bin = outside.path().to_path_buf();
    let starts = tally.join("starts");
    plant_recorder(&bin, &counting_recorder(&starts, env!("CARGO_PKG_VERSION")));
    for round in 1..=2 {
        let run = nd7_in(&world, &bin, &["run", "true"]);
        assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
        let started = std::fs::read_to_string(&starts).map_or(0, |s| s.lines().count());
        assert_eq!(started, round, "round {round}: {}", text(&run.stderr));
    }
}

/// ADR-0156: the answer an nd7-record gave is remembered across runs for
/// exactly that file, so a later `nd7 run` starts no recorder to ask; a
/// file changed since (here rewritten in place, as an upgrade that writes
/// over it would) is asked again, and one that no longer answers as this
/// nd7's is not wired. The binaries lie outside the world's root, which the
/// world gives the account before each command (a change of the files'
/// change time).
#[test]
fn a_recorders_answer_is_remembered_for_that_file_only() {
    let world = World::new();
    let (outside, tally) = install_outside(&world);
    let bin = outside.path().to_path_buf();
    let starts = tally.join("starts");
    let recorder = |version: &str| counting_recorder(&starts, version);
    let started = || std::fs::read_to_string(&starts).map_or(0, |s| s.lines().count());
    plant_recorder(&bin, &recorder(env!("CARGO_PKG_VERSION")));
    wait_settled(&bin.join("nd7-record"));
    for round in 1..=2 {
        let run = nd7_in(&world, &bin, &["run", "true"]);
        assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
        assert!(
            !text(&run.stderr).contains("nd7-record"),
            "{}",
            text(&run.stderr)
        );
        assert_eq!(
            started(),
            1,
            "round {round} asked again: {}",
            text(&run.stderr)
        );
    }
    // Written over in place: the same inode, a new change time.
    std::fs::write(bin.join("nd7-record"), recorder("0.0.1")).expect("rewrite in place");
    let run = nd7_in(&world, &bin, &["run", "true"]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    assert_eq!(started(), 2, "a changed file was not asked again");
    assert!(
        text(&run.stderr).contains("answered \"nd7-record 0.0.1\""),
        "{}",
        text(&run.stderr)
    );
}

/// ADR-0157: something other than nd7's own file left at
/// `recorder-answers.json` (a FIFO, a link to `/dev/zero`, a sparse 1 GiB
/// file) must not hold up or exhaust `nd7 run`: each is read as no answers,
/// and the recorder is asked. Seen failing (`nd7 run` waiting forever in
/// `open` for the FIFO's writer) with the file read by `fs::read`.
#[test]
fn what_else_lies_at_the_answers_name_is_read_as_no_answers() {
    let world = World::new();
    let bin = install(&world, "bin");
    let state = world.state().join("nd7");
    std::fs::create_dir_all(&state).expect("mkdir state");
    chmod(&state, 0o700);
    let answers = state.join("recorder-answers.json");
    let fifo = || {
        let made = std::process::Command::new("mkfifo").arg(&answers).status();
        assert!(made.expect("mkfifo").success(), "mkfifo");
    };
    let zero = || std::os::unix::fs::symlink("/dev/zero", &answers).expect("link");
    let huge = || {
        let file = std::fs::File::create(&answers).expect("create");
        file.set_len(1 << 30).expect("a sparse 1 GiB file");
    };
    let places: [(&str, &dyn Fn()); 3] =
        [("a FIFO", &fifo), ("/dev/zero", &zero), ("1 GiB", &huge)];
    for (what, place) in places {
        let _ = std::fs::remove_file(&answers);
        place();
        let run = nd7_in(&world, &bin, &["run", "true"]);
        assert_eq!(run.status.code(), Some(0), "{what}: {}", text(&run.stderr));
        assert!(
            !text(&run.stderr).contains("nd7-record"),
            "{what}: {}",
            text(&run.stderr)
        );
    }
}

/// ADR-0157: `nd7 run` asks the recorder before its home check and takes
/// the answer after it (ADR-0156); when that check refuses the run, the
/// recorder still asked is killed, not left behind (here one that waits
/// on a FIFO for ever, with no process of its own to hide behind). Seen
/// failing with `Question`'s `Drop` removed.
#[test]
fn a_recorder_asked_by_a_run_refused_early_is_not_left_running() {
    let world = World::new();
    let bin = install(&world, "bin");
    let fifo = world.root.join("tally/never");
    std::fs::create_dir_all(fifo.parent().expect("tally")).expect("mkdir tally");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.expect("mkfifo").success(), "mkfifo");
    chmod(&fifo, 0o666);
    plant_recorder(
        &bin,
        &format!("#!/bin/sh\nexec 3<>'{}'\nread -r x <&3\n", fifo.display()),
    );
    let run = world
        .command(&bin.join("nd7").to_string_lossy(), &["run", "true"])
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", "/")
        .output()
        .expect("run the installed nd7");
    assert_ne!(run.status.code(), Some(0), "{}", text(&run.stderr));
    let recorder = bin.join("nd7-record");
    let left: Vec<String> = std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|p| std::fs::read(p.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(&*recorder.to_string_lossy()))
        .collect();
    assert!(
        left.is_empty(),
        "left running: {left:?}\n{}",
        text(&run.stderr)
    );
}
