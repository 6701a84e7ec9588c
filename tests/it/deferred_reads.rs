//! What the watch over files that run later reads, outside the floor, in the
//! unconfined `nd7 run`: nothing the agent puts on the list may make it
//! block, read without end, or look away. A FIFO, a link to a device, a huge
//! sparse file, a directory it cannot list, a repository deeper than a search
//! would go: each, left before the session or planted during it, must end in
//! a warning and exit 3, never in a hang or a silent pass.
//!
//! Each run is bounded (`run_agent_bounded`): nd7's data segment is limited,
//! so a read without end fails at once instead of taking the machine's
//! memory, and a run still going after two minutes is killed and fails the
//! test instead of holding CI.
#![cfg(target_os = "linux")]

use std::process::{Output, Stdio};
use std::time::Duration;

use crate::world::*;

/// A git repository in the project with one commit.
pub(crate) fn repo(w: &World) {
    let git = |args: &[&str]| {
        let out = w.command("git", args).output().expect("git");
        assert!(out.status.success(), "git {args:?}: {}", text(&out.stderr));
    };
    git(&["init", "-q", "-b", "main"]);
    std::fs::write(w.proj().join("a.txt"), "a\n").expect("write");
    git(&["add", "a.txt"]);
    git(&[
        "-c",
        "user.name=u",
        "-c",
        "user.email=u@e",
        "commit",
        "-qm",
        "a",
    ]);
}

/// How long a bounded run may take before it counts as a hang.
const PATIENCE: Duration = Duration::from_secs(120);

/// Runs the agent script under `nd7 run` with nd7's data segment limited to
/// 1 GiB and at most [`PATIENCE`]: a run still going then is killed (with
/// everything in it) and the test fails, naming what it had said.
pub(crate) fn run_agent_bounded(w: &World, body: &str) -> Output {
    run_bounded(w, &["run", &w.agent(body)])
}

/// `nd7 ARGS…` under the same bounds as [`run_agent_bounded`].
pub(crate) fn run_bounded(w: &World, args: &[&str]) -> Output {
    let mut all = vec!["--data=1073741824", "--", ND7];
    all.extend_from_slice(args);
    let child = w
        .command("prlimit", &all)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nd7 run");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(PATIENCE) {
        Ok(out) => out.expect("nd7 run"),
        Err(_) => {
            // The keeper: the session and the agent go with it
            // (parent-death signal, subreaper sweep).
            if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
            panic!(
                "nd7 run did not end within {}s: the watch hung",
                PATIENCE.as_secs()
            );
        }
    }
}

/// The warning `nd7 run` printed last, from its first line on.
pub(crate) fn report(out: &Output) -> String {
    let err = text(&out.stderr);
    match err.split_once("nd7 run: WARNING: ") {
        Some((_, r)) => r.to_string(),
        None => panic!("no warning (status {:?}):\n{err}", out.status.code()),
    }
}

/// The block of the report about `path`: its heading line (`  what: path`)
/// and the lines indented beneath it.
pub(crate) fn block(report: &str, path: &str) -> Option<String> {
    let mut out: Vec<&str> = Vec::new();
    for line in report.lines() {
        if line.starts_with("  ") && !line.starts_with("    ") {
            if !out.is_empty() {
                break;
            }
            if line.ends_with(&format!(": {path}"))
                || line.contains(&format!(": {path}  (first seen"))
            {
                out.push(line);
            }
        } else if !out.is_empty() {
            out.push(line);
        }
    }
    (!out.is_empty()).then(|| out.join("\n"))
}

fn sparse(path: &std::path::Path, len: u64) {
    let file = std::fs::File::create(path).expect("create");
    file.set_len(len).expect("set_len");
}

/// Left by an earlier session (or anyone): a FIFO where `.envrc` and
/// `.gitmodules` belong, Claude Code's state a link to `/dev/zero`, and
/// `~/.claude.json` a 20 GiB sparse file. Without the non-blocking,
/// regular-only, bounded reads (`watch::read_bounded`, used by the plan's
/// `FsTree::read`, the snapshot's `body` and `claude_state`), the plan blocks
/// on the FIFO's open and the state is read without end, before the agent
/// ever starts. Each must instead be named in the warning, with exit 3.
#[test]
fn fifos_devices_and_huge_files_left_on_the_list_neither_hang_nor_pass_unseen() {
    let w = World::new();
    repo(&w);
    for name in [".envrc", ".gitmodules"] {
        let fifo = w.proj().join(name);
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo");
        assert!(made.success());
    }
    std::os::unix::fs::symlink("/dev/zero", w.home().join(".claude/claude.json")).expect("ln");
    sparse(&w.home().join(".claude.json"), 20 << 30);
    let out = run_agent_bounded(&w, "echo started");
    assert_eq!(text(&out.stdout), "started\n", "{}", text(&out.stderr));
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let report = report(&out);
    let proj = w.proj().display().to_string();
    for (path, says) in [
        (format!("{proj}/.envrc"), "a FIFO"),
        (format!("{proj}/.gitmodules"), "a FIFO"),
        (w.in_home(".claude/claude.json"), "a character device"),
        (w.in_home(".claude.json"), "21474836480 bytes"),
    ] {
        let b = block(&report, &path).unwrap_or_else(|| panic!("no {path} in\n{report}"));
        assert!(b.contains(says), "{path}: {says:?} not in\n{b}");
    }
}

/// Planted during the session, after a payload the warning must still show
/// (a new `.claude/settings.json`): a FIFO at `.envrc`, Claude Code's state
/// replaced by a link to `/dev/zero`, a new repository whose config is a 20
/// GiB sparse file (after an fsmonitor) and another whose config is a FIFO,
/// a `.git` that is a FIFO, and a new repository inside a directory nd7
/// cannot list (mode 0300, still writable). Without the bounded reads of
/// `watch::read_bounded` (`body`, `claude_state`, `repository`, the
/// search's `.git` files) `watch.finish()` blocks or is killed for its
/// memory: no warning, no `run_end`; without the unlisted directory's
/// finding (`search`), the repository in it passes unseen.
#[test]
fn fifos_devices_and_huge_files_planted_during_the_session_neither_hang_nor_pass_unseen() {
    let w = World::new();
    repo(&w);
    std::fs::write(w.home().join(".claude/claude.json"), "{\"numStartups\":1}").expect("write");
    let out = run_agent_bounded(
        &w,
        &format!(
            r#"
mkdir -p .claude && echo '{{"hooks":{{"Stop":[{{"hooks":[{{"type":"command","command":"touch $OUT/x"}}]}}]}}}}' > .claude/settings.json
mkfifo .envrc
ln -sf /dev/zero '{state}'
"$EXEC" 'git init -q huge && git -C huge config core.fsmonitor "touch $OUT/huge" && truncate -s 20G huge/.git/config'
"$EXEC" 'git init -q piped && rm piped/.git/config && mkfifo piped/.git/config'
mkdir -p linked && mkfifo linked/.git
"$EXEC" 'mkdir -p hidden && git init -q hidden/r && git -C hidden/r config core.fsmonitor "touch $OUT/hidden" && chmod 300 hidden'
echo planted
"#,
            state = w.in_home(".claude/claude.json")
        ),
    );
    assert_eq!(text(&out.stdout), "planted\n", "{}", text(&out.stderr));
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let report = report(&out);
    let proj = w.proj().display().to_string();
    for (path, says) in [
        (format!("{proj}/.claude/settings.json"), "+{\"hooks\""),
        (format!("{proj}/.envrc"), "a FIFO"),
        (w.in_home(".claude/claude.json"), "a character device"),
        (format!("{proj}/huge/.git/config"), "21474836480 bytes"),
        (format!("{proj}/piped/.git/config"), "a FIFO"),
        (format!("{proj}/linked/.git"), "a FIFO"),
        (format!("{proj}/hidden"), "cannot be listed"),
    ] {
        let b = block(&report, &path).unwrap_or_else(|| panic!("no {path} in\n{report}"));
        assert!(b.contains(says), "{path}: {says:?} not in\n{b}");
    }
    // The end reached the log: `run_end` is its last entry.
    let chains = crate::runs::run_chains(&w);
    let last = chains[0].last().expect("entries");
    assert_eq!(last["kind"], "run_end", "{last}");
    // Let the world's cleanup read what the agent hid.
    let _ = std::fs::set_permissions(
        w.proj().join("hidden"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    );
}

/// A file on the list too large to hash (100 MiB, sparse), there when the
/// session starts and rewritten in place at its own length: its contents
/// cannot be compared, so its change time and size are. Without user
/// namespaces nothing holds `.idea`, so only the watch stands between the
/// write and the user's editor. Guards `compare`'s fallback to `lstat` when
/// either side was not read whole: without it the two sides read as the same
/// "104857600 bytes" and the run exits 0.
#[test]
fn a_huge_file_on_the_list_rewritten_at_its_own_length_is_reported() {
    let w = World::new().without_user_namespaces();
    repo(&w);
    std::fs::create_dir_all(w.proj().join(".idea")).expect("mkdir");
    sparse(&w.proj().join(".idea/big.bin"), 100 << 20);
    let out = run_agent_bounded(
        &w,
        "printf 'evil' | dd of=.idea/big.bin conv=notrunc status=none && echo planted",
    );
    assert_eq!(text(&out.stdout), "planted\n", "{}", text(&out.stderr));
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let report = report(&out);
    let path = format!("{}/.idea/big.bin", w.proj().display());
    let b = block(&report, &path).unwrap_or_else(|| panic!("no {path} in\n{report}"));
    assert!(b.starts_with("  changed: "), "{b}");
    assert!(b.contains("104857600 bytes"), "{b}");
}

/// A repository made during the session at depth 5 and at depth 7 below the
/// project, inside directories that were already there when it started (so
/// only a search that indexed them sees them change), and one in a
/// directory whose modification time the agent then sets back. Guards the
/// end-of-session search's walk of the whole project (`watch::index`,
/// bounded by entries, not depth: with the old depth of 4, the first two
/// were not reported) and its stamps by change time (`dir_stamp`: by
/// modification time, the third was not).
#[test]
fn a_repository_planted_deep_in_the_project_is_found() {
    let w = World::new();
    repo(&w);
    std::fs::create_dir_all(w.proj().join("a/b/c/d/x/y")).expect("mkdir");
    std::fs::create_dir_all(w.proj().join("m")).expect("mkdir");
    // The plants come after the index, which starts a second after the
    // agent does and takes milliseconds here: an index taken after them
    // would find them by their names, whatever its stamps.
    let out = run_agent_bounded(
        &w,
        r#"
sleep 3
"$EXEC" 'git init -q a/b/c/d/e && git -C a/b/c/d/e config core.fsmonitor "touch $OUT/five"'
git init -q a/b/c/d/x/y/z && git -C a/b/c/d/x/y/z config core.fsmonitor "touch $OUT/seven"
touch -r m "$TMPDIR/times" && git init -q m/r && git -C m/r config core.fsmonitor "touch $OUT/m" && touch -m -r "$TMPDIR/times" m
echo planted
"#,
    );
    assert_eq!(text(&out.stdout), "planted\n", "{}", text(&out.stderr));
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let report = report(&out);
    let proj = w.proj().display().to_string();
    for path in [
        format!("{proj}/a/b/c/d/e/.git/config"),
        format!("{proj}/a/b/c/d/x/y/z/.git/config"),
        format!("{proj}/m/r/.git/config"),
    ] {
        let b = block(&report, &path).unwrap_or_else(|| panic!("no {path} in\n{report}"));
        assert!(b.contains("core.fsmonitor"), "{b}");
    }
}
