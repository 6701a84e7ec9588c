//! `nd7-vault team` (ADR-0133): a small team's vault from nothing to a
//! shipped and pulled session, running the commands it prints as printed,
//! through `sh`, on loopback with the real `nd7-vault` and `nd7`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{State, payload, stderr, stdout};
use crate::vault::ok;

/// Where the test binaries are: first on the PATH the printed commands run with.
fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_nd7"))
        .parent()
        .expect("a directory")
        .to_path_buf()
}

/// `line` run by `sh -c`, with the test's binaries first on PATH, in `cwd`.
fn sh(line: &str, cwd: &Path) -> Command {
    let path = format!(
        "{}:{}",
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(line).env("PATH", path).current_dir(cwd);
    cmd
}

/// The same, as a machine whose state is `state` (as `State::nd7` sets it).
fn sh_on(state: &State, line: &str) -> Command {
    let mut cmd = sh(line, state.xdg());
    cmd.env("XDG_STATE_HOME", state.xdg())
        .env_remove("HOME")
        .env("CLAUDE_CONFIG_DIR", "/home/dev/.claude")
        .env("CODEX_HOME", "/home/dev/.codex");
    cmd
}

/// A port on loopback nothing listens on (just now).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

pub(crate) fn team(dir: &Path, url: &str, listen: &str, machines: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nd7-vault"))
        .args(["team", "--dir"])
        .arg(dir)
        .args(["--url", url, "--listen", listen, "--machines", machines])
        .output()
        .expect("run nd7-vault team")
}

/// The value of the line labelled `label` (`label:` then spaces).
pub(crate) fn labelled<'t>(text: &'t str, label: &str) -> &'t str {
    let head = format!("{label}:");
    text.lines()
        .find_map(|l| l.trim_start().strip_prefix(&head))
        .unwrap_or_else(|| panic!("no line labelled {label:?} in:\n{text}"))
        .trim()
}

/// A server started from the printed line, killed when dropped.
struct Served(Child);

impl Served {
    fn start(line: &str, cwd: &Path) -> Served {
        let mut child = sh(&format!("exec {line}"), cwd)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the printed serve command");
        let mut first = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut first)
            .expect("it says where it listens");
        assert!(first.starts_with("listening on "), "{first:?}");
        Served(child)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `cmd`, counting and timing it.
fn timed(count: &mut usize, spent: &mut Duration, cmd: &mut Command) -> Output {
    let start = Instant::now();
    let out = cmd.output().expect("run");
    *spent += start.elapsed();
    *count += 1;
    out
}

#[test]
fn a_team_vault_goes_from_nothing_to_a_pulled_session_with_the_commands_it_prints() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("vault");
    let port = free_port();
    let (url, listen) = (
        format!("http://127.0.0.1:{port}"),
        format!("127.0.0.1:{port}"),
    );
    let (mut count, mut spent) = (0, Duration::ZERO);

    // 1: the vault, the keys, the document, the tokens.
    let start = Instant::now();
    let made = ok(team(&dir, &url, &listen, "alice,bob laptop"));
    spent += start.elapsed();
    count += 1;
    for label in ["vault key", "fingerprint", "read token", "admin identity"] {
        assert!(!labelled(&made, label).is_empty(), "{label}");
    }
    assert!(
        labelled(&made, "admin directory").contains("offline"),
        "{made}"
    );

    // 2: the vault, served as printed (running, not timed).
    let _served = Served::start(labelled(&made, "serve"), root.path());
    count += 1;

    // 3: alice's machine enrols with the line printed for it.
    let alice = State::new();
    let enrolled = timed(
        &mut count,
        &mut spent,
        &mut sh_on(&alice, labelled(&made, "enroll alice")),
    );
    assert!(enrolled.status.success(), "{}", stderr(&enrolled));

    // Claude Code's hook records a session there (no one types this).
    for n in 0..3 {
        let out = alice.record(payload("team-s1", n).as_bytes());
        assert!(out.status.success(), "{}", stderr(&out));
    }

    // 4: it ships.
    let shipped = timed(&mut count, &mut spent, alice.nd7().arg("ship"));
    assert!(shipped.status.success(), "{}", stderr(&shipped));

    // 5: the admin, who took the admin directory off the vault's host,
    // pulls there with the line printed for it.
    let away = tempfile::tempdir().expect("tempdir");
    let admin = away.path().join("our-vault-admin");
    std::fs::rename(dir.join("admin"), &admin).expect("move the admin directory");
    let pulled = timed(
        &mut count,
        &mut spent,
        &mut sh(labelled(&made, "pull"), &admin),
    );
    assert!(
        pulled.status.success(),
        "{}\n{}",
        stdout(&pulled),
        stderr(&pulled)
    );
    let copy = std::fs::read_to_string(admin.join("pulled/team-s1/events.ndjson"))
        .expect("the session pulled");
    let local = std::fs::read_to_string(alice.log("team-s1").events_path()).expect("local");
    assert_eq!(copy, local, "the pulled copy is the machine's log");
    assert!(copy.contains("echo 2"), "{copy}");
    eprintln!("a team's vault to a pulled session: {count} commands, {spent:?} in those timed");
    assert!(count <= 6, "{count} commands");

    // The printed sessions line lists it, and bob's token is one of its own.
    let listed = ok(sh(labelled(&made, "sessions"), &admin)
        .output()
        .expect("run"));
    assert!(listed.contains("team-s1"), "{listed}");
    let machines = ok(sh(labelled(&made, "machines"), &admin)
        .output()
        .expect("run"));
    assert!(machines.contains("alice"), "{machines}");
    assert_ne!(
        labelled(&made, "enroll alice"),
        labelled(&made, "enroll bob laptop")
    );
    let register = std::fs::read_to_string(admin.join("org.key.tokens")).expect("register");
    assert!(register.contains(" alice\n") && register.contains(" bob laptop\n"));
}

#[test]
fn a_directory_that_holds_anything_is_refused_and_left_as_it_was() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("vault");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::write(dir.join("notes"), "keep me").expect("write");
    let out = team(&dir, "http://127.0.0.1:1", "127.0.0.1:1", "alice");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("overwrites nothing"),
        "{}",
        stderr(&out)
    );
    let names: Vec<_> = std::fs::read_dir(&dir)
        .expect("read")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, ["notes"]);
    assert_eq!(
        std::fs::read_to_string(dir.join("notes")).expect("read"),
        "keep me"
    );

    // A team's vault made once is not made again over itself.
    let fresh = root.path().join("made");
    ok(team(&fresh, "http://127.0.0.1:1", "127.0.0.1:1", "alice"));
    let key = std::fs::read(fresh.join("vault/vault.db.key")).expect("key");
    let again = team(&fresh, "http://127.0.0.1:1", "127.0.0.1:1", "alice");
    assert_eq!(again.status.code(), Some(1), "{}", stderr(&again));
    assert_eq!(
        std::fs::read(fresh.join("vault/vault.db.key")).expect("key"),
        key
    );
}

#[test]
fn the_keys_are_the_owners_alone_and_the_admins_apart_from_the_vaults() {
    use std::os::unix::fs::PermissionsExt;
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("vault");
    ok(team(&dir, "http://127.0.0.1:1", "127.0.0.1:1", "alice"));
    for name in [
        "",
        "admin",
        "admin/org.key",
        "admin/org.key.tokens",
        "admin/admin.age",
        "vault",
        "vault/vault.db.key",
    ] {
        let mode = std::fs::metadata(dir.join(name))
            .expect("made")
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "{name}: {mode:o}");
    }
}

#[test]
fn commands_are_spelt_enroll_and_the_older_spelling_is_hidden() {
    let help = ok(Command::new(env!("CARGO_BIN_EXE_nd7"))
        .args(["admin", "--help"])
        .output()
        .expect("run"));
    assert!(help.contains("enroll-token"), "{help}");
    assert!(!help.contains("enrol-token"), "{help}");
    let top = ok(Command::new(env!("CARGO_BIN_EXE_nd7"))
        .arg("--help")
        .output()
        .expect("run"));
    assert!(top.contains("enroll") && !top.contains(" enrol "), "{top}");
    let old = Command::new(env!("CARGO_BIN_EXE_nd7"))
        .args(["enrol", "--help"])
        .output()
        .expect("run");
    assert!(old.status.success(), "{}", stderr(&old));
}

#[test]
fn a_label_that_would_break_a_line_is_refused_before_anything_is_made() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("vault");
    let out = team(&dir, "http://127.0.0.1:1", "127.0.0.1:1", "alice,ev\nil");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(!dir.exists());
}

/// A machine that ships under another machine's session id does not get
/// its copy written over the other's by the printed pull: a session id two
/// machines share is named, and pulled for neither (exit 2), while the rest
/// are pulled.
#[test]
fn a_session_id_two_machines_share_is_not_pulled_into_one_place() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("vault");
    let port = free_port();
    let (url, listen) = (
        format!("http://127.0.0.1:{port}"),
        format!("127.0.0.1:{port}"),
    );
    let made = ok(team(&dir, &url, &listen, "alice,mallory"));
    let _served = Served::start(labelled(&made, "serve"), root.path());
    let (alice, mallory) = (State::new(), State::new());
    for (state, label, sessions) in [
        (&alice, "enroll alice", &["shared", "alices-own"][..]),
        (&mallory, "enroll mallory", &["shared"][..]),
    ] {
        ok(sh_on(state, labelled(&made, label)).output().expect("run"));
        for session in sessions {
            for n in 0..2 {
                ok(state.record(payload(session, n).as_bytes()));
            }
        }
        ok(state.nd7().arg("ship").output().expect("ship"));
    }
    let admin = dir.join("admin");
    let out = sh(labelled(&made, "pull"), &admin).output().expect("run");
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("session shared is listed for 2 machines"),
        "{}",
        stdout(&out)
    );
    assert!(!admin.join("pulled/shared").exists());
    assert!(admin.join("pulled/alices-own/events.ndjson").exists());
}
