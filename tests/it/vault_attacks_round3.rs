//! ADR-0132 (numbered tallies, the admin's memory through a link) and
//! ADR-0133 (`nd7-vault team`, `nd7 admin pull` of every session) attacked
//! by a dishonest operator, a malicious machine and a local user on the
//! admin's or the vault's host. An attack the code withstands is a normal
//! test that says what would make it fail; one that still succeeds is
//! `#[ignore = "open: …"]` and asserts what should hold.

use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};

use nd7_core::vault;

use crate::common::{State, stderr, stdout};
use crate::vault::{Org, Vault, append, enroll, ok, ship};
use crate::vault_attacks_round2::{kept_tally, machine, sessions_seen};
use crate::vault_team::{labelled, team};

/// Another local user plants `seen` in a directory everyone can write
/// (a sticky /tmp), a link to where the admin's memory would make a file
/// of the user's choosing (here one not there yet, in a directory not there
/// yet). The admin's `--seen` names that link: the memory is not written
/// through it (exit 2, naming the link), as Linux's fs.protected_symlinks
/// would refuse it and macOS would not. Would fail if `Seen` followed every
/// link by `read_link` (on a host whose fs.protected_symlinks is 0, as in
/// containers, or macOS).
#[test]
fn a_link_another_user_planted_in_a_shared_directory_is_not_followed() {
    let vault = Vault::start();
    let org = Org::new(&vault);
    let state = State::new();
    ok(enroll(&state, &vault, &org));
    let admin = tempfile::tempdir().expect("tempdir");
    let shared = admin.path().join("tmp");
    std::fs::create_dir(&shared).expect("mkdir");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    let planted = admin.path().join("victim/planted");
    let link = shared.join("seen");
    std::os::unix::fs::symlink(&planted, &link).expect("link");
    // Another user's link (nobody's), in a directory that user can write.
    std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).expect("lchown");
    let out = sessions_seen(&vault, &org, &link);
    assert!(!planted.exists(), "a file made where the link said");
    assert!(!admin.path().join("victim").exists(), "a directory made");
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(
        stderr(&out).contains(&link.display().to_string()),
        "{}",
        stderr(&out)
    );
    // The admin's own link there is followed.
    std::fs::remove_file(&link).expect("rm");
    std::os::unix::fs::symlink(&planted, &link).expect("link");
    ok(sessions_seen(&vault, &org, &link));
    assert!(planted.exists());
}

/// A machine whose `tally.number` reached the last number (a file edited,
/// or a counter run out) signs no tally again with that number: one number
/// signed over two tallies of different contents makes an honest vault,
/// which keeps one, look as if it put another in the place of the one an
/// admin saw. The ship says so and the number stays. Would fail if the
/// next number saturated at u64::MAX.
#[test]
fn a_machine_at_the_last_number_signs_no_second_tally_with_it() {
    let vault = Vault::start();
    let org = Org::new(&vault);
    let state = State::new();
    ok(enroll(&state, &vault, &org));
    let m = machine(&state);
    let number = state.xdg().join("nd7/vault/tally.number");
    std::fs::write(&number, format!("{}\n", u64::MAX - 1)).expect("write");
    append(&state, "s1", 2);
    ok(ship(&state));
    let (_, text) = kept_tally(&vault, &m.id).expect("kept");
    let first = vault::Tally::parse_one(&text).expect("reads").0;
    assert_eq!(first.number, u64::MAX);
    append(&state, "s2", 2);
    let out = ship(&state);
    let (_, text) = kept_tally(&vault, &m.id).expect("kept");
    assert_eq!(
        vault::Tally::parse_one(&text).expect("reads").0,
        first,
        "a second tally numbered {}: {}",
        u64::MAX,
        stderr(&out)
    );
    assert!(stderr(&out).contains("tally.number"), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(&number).expect("read").trim(),
        u64::MAX.to_string()
    );
}

/// `nd7-vault team --dir DIR` where DIR is an empty directory another local
/// user can write (made for the admin in /tmp, or 0777 under umask 000):
/// that user could move `admin/` aside while the keys are written and put a
/// link in its place, taking the organisation key. Refused (exit 1), as a
/// directory that holds anything is, with nothing made. Would fail if
/// `new_dir` took any empty directory.
#[test]
fn team_refuses_a_directory_others_can_write() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("team");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let out = team(&dir, "http://127.0.0.1:1", "127.0.0.1:1", "alice");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("others can write"),
        "{}",
        stderr(&out)
    );
    assert_eq!(std::fs::read_dir(&dir).expect("read").count(), 0);
}

/// Words a shell reads from `args` (a printed command without its
/// program), run in `cwd` through `printf`.
fn shell_words(args: &str, cwd: &std::path::Path) -> Vec<String> {
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("printf '%s\\n' {args}"))
        .current_dir(cwd)
        .output()
        .expect("run sh");
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out).lines().map(str::to_string).collect()
}

/// `nd7-vault team` given a DIR, a URL and a label full of what a shell
/// runs (`$(…)`, backquotes, `;`, a quote): each printed command, pasted
/// into `sh`, reads back the path and the URL as one word each and runs
/// nothing of them. Would fail if `quote` let any of them through bare.
#[test]
fn printed_commands_carry_a_hostile_path_and_url_as_words() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root
        .path()
        .join("it's $(touch pwned1) `touch pwned2`; touch pwned3");
    let url = "http://127.0.0.1:1/$(touch pwned4);touch${IFS}pwned5";
    let made = ok(team(&dir, url, "127.0.0.1:1", "$(touch pwned6)"));
    let serve = shell_words(
        labelled(&made, "serve")
            .strip_prefix("nd7-vault ")
            .expect("serve"),
        root.path(),
    );
    let db = dir.canonicalize().expect("made").join("vault/vault.db");
    assert_eq!(serve[2], db.display().to_string(), "{serve:?}");
    let enroll = labelled(&made, "enroll $(touch pwned6)");
    let enroll = shell_words(enroll.strip_prefix("nd7 ").expect("enroll"), root.path());
    assert_eq!(enroll[1], url, "{enroll:?}");
    let sessions = labelled(&made, "sessions");
    let sessions = shell_words(sessions.strip_prefix("nd7 ").expect("nd7"), root.path());
    assert_eq!(sessions[2], url, "{sessions:?}");
    let names: Vec<_> = std::fs::read_dir(root.path())
        .expect("read")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.starts_with("pwned")), "{names:?}");
}

/// A vault that lists a machine's sessions as `..` and `../escape` (the
/// operator renames their chains): `nd7 admin pull` without `--session`
/// takes each listed id as a directory under OUT, and writes nothing outside
/// OUT for them (the ids are refused as session ids, exit 2). Would fail if
/// `pull` joined an id to OUT unchecked.
#[test]
fn session_ids_the_vault_lists_write_nothing_outside_out() {
    let vault = Vault::start();
    let org = Org::new(&vault);
    let state = State::new();
    ok(enroll(&state, &vault, &org));
    for s in ["s1", "s2", "s3"] {
        append(&state, s, 2);
    }
    ok(ship(&state));
    let db = rusqlite::Connection::open(vault.db()).expect("open db");
    for (from, to) in [
        ("s1", ".."),
        ("s2", "../escape"),
        ("s3", "ok\u{1b}]0;x\u{7}"),
    ] {
        db.execute(
            "UPDATE chains SET session = ?1 WHERE session = ?2",
            [to, from],
        )
        .expect("rename");
    }
    drop(db);
    let root = tempfile::tempdir().expect("tempdir");
    let out_dir = root.path().join("out");
    let out = crate::vault::nd7()
        .args([
            "admin",
            "pull",
            &vault.url,
            "--read-token",
            &vault.read_token(),
        ])
        .arg("--identity")
        .arg(&org.identity)
        .args(["--fingerprint", &org.fingerprint, "--out"])
        .arg(&out_dir)
        .output()
        .expect("run pull");
    assert_ne!(out.status.code(), Some(0), "{}", stdout(&out));
    let names: Vec<_> = std::fs::read_dir(root.path())
        .expect("read")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, ["out"], "{}", stdout(&out));
    assert!(!stdout(&out).contains('\u{1b}'), "{}", stdout(&out));
    assert!(!stderr(&out).contains('\u{1b}'), "{}", stderr(&out));
}

/// The operator of the vault an admin's memory was kept of, once the
/// organisation moved it to a new vault key (a newer document), withholds
/// every machine the memory holds: to the memory that is "another vault"
/// (exit 2), and an admin told only that may start a new memory and never
/// hear of the machines withheld. The refusal says the other reading too:
/// this vault, under its new key, withholding every machine the memory
/// holds. (A second vault of the organisation, here, is what the admin
/// sees either way.) Would fail if the refusal said only "another vault".
#[test]
fn another_vault_refusal_names_every_machine_withheld_as_the_other_reading() {
    let (a, b) = (Vault::start(), Vault::start());
    let org = Org::new(&a);
    let state = State::new();
    ok(enroll(&state, &a, &org));
    let m = machine(&state);
    let admin = tempfile::tempdir().expect("tempdir");
    let seen = admin.path().join("seen");
    ok(sessions_seen(&a, &org, &seen));
    let kept = std::fs::read(&seen).expect("made");
    org.install(&b);
    let out = sessions_seen(&b, &org, &seen);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{}\n{err}", stdout(&out));
    assert!(err.contains("another vault"), "{err}");
    assert!(err.contains("withholds every machine"), "{err}");
    assert!(err.contains(&m.id), "{err}");
    assert_eq!(std::fs::read(&seen).expect("read"), kept);
}

/// `--seen` naming a link that loops, or a link to a directory: exit 2
/// naming the path, and nothing written (the directory as it was). Would
/// fail if `linked_target` followed links without end, or `Seen::write`
/// put the memory inside, or over, the directory.
#[test]
fn a_memory_that_is_a_link_loop_or_a_directory_is_refused() {
    let vault = Vault::start();
    let org = Org::new(&vault);
    let state = State::new();
    ok(enroll(&state, &vault, &org));
    let admin = tempfile::tempdir().expect("tempdir");
    let looped = admin.path().join("loop");
    std::os::unix::fs::symlink("loop", &looped).expect("link");
    let dir = admin.path().join("dir");
    std::fs::create_dir(&dir).expect("mkdir");
    let to_dir = admin.path().join("to-dir");
    std::os::unix::fs::symlink("dir", &to_dir).expect("link");
    for path in [&looped, &dir, &to_dir] {
        let out = sessions_seen(&vault, &org, path);
        assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
        assert!(
            stderr(&out).contains(&admin.path().display().to_string()),
            "{}",
            stderr(&out)
        );
    }
    assert_eq!(std::fs::read_dir(&dir).expect("read").count(), 0);
    assert!(
        std::fs::symlink_metadata(&looped)
            .expect("kept")
            .is_symlink()
    );
}

/// A FIFO someone put at the memory's name: refused as not a regular file
/// (exit 2), without waiting for a writer. Would fail (an empty memory read
/// once the helper thread below lets a blocked reader go, "not a memory")
/// if the memory were opened as it was, waiting for a writer.
#[test]
fn a_memory_that_is_a_fifo_is_refused_without_waiting() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let vault = Vault::start();
    let org = Org::new(&vault);
    let state = State::new();
    ok(enroll(&state, &vault, &org));
    let admin = tempfile::tempdir().expect("tempdir");
    let fifo = admin.path().join("seen");
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
    )
    .expect("mkfifo");
    // Lets a reader that waits for a writer go (an end of file), so that
    // without the fix the test fails instead of hanging.
    let done = std::sync::Arc::new(AtomicBool::new(false));
    let releaser = {
        let (done, fifo) = (done.clone(), fifo.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                let opened = std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
                    .open(&fifo);
                drop(opened);
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        })
    };
    let out = sessions_seen(&vault, &org, &fifo);
    done.store(true, Ordering::Relaxed);
    releaser.join().expect("releaser");
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("not a regular file"),
        "{}",
        stderr(&out)
    );
}

/// `nd7-vault team` under umask 000: what it makes is still its owner's
/// alone (the directory, the keys, the register, the database). Would fail
/// if any of them took its mode from the umask.
#[test]
fn team_under_umask_000_makes_nothing_others_can_read() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("team");
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg("umask 000; exec \"$0\" team --dir \"$1\" --url http://127.0.0.1:1 --listen 127.0.0.1:1 --machines a")
        .arg(env!("CARGO_BIN_EXE_nd7-vault"))
        .arg(&dir)
        .output()
        .expect("run team");
    ok(out);
    for entry in walk(&dir) {
        let mode = std::fs::metadata(&entry)
            .expect("made")
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "{}: {mode:o}", entry.display());
    }
}

/// `dir` and everything under it.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = vec![dir.to_path_buf()];
    if dir.is_dir() {
        for e in std::fs::read_dir(dir).expect("read") {
            found.extend(walk(&e.expect("entry").path()));
        }
    }
    found
}

/// Two machines' session ids that differ only in case (`Shared`, a
/// malicious machine's `shared`): on a case-insensitive file system (macOS)
/// `OUT/Shared` and `OUT/shared` are one directory, where the second pull
/// puts its machine's copy over the one just checked of the first. Neither
/// is pulled (exit 2), as for one id two machines list. Would fail if
/// `pull` without `--session` told ids apart by their bytes alone.
#[test]
fn session_ids_that_differ_only_in_case_are_not_pulled_into_one_place() {
    let vault = Vault::start();
    let org = Org::new(&vault);
    let (alice, mallory) = (State::new(), State::new());
    for (state, session) in [(&alice, "Shared"), (&mallory, "shared")] {
        ok(enroll(state, &vault, &org));
        append(state, session, 2);
        ok(ship(state));
    }
    let root = tempfile::tempdir().expect("tempdir");
    let out_dir = root.path().join("out");
    let out = crate::vault::nd7()
        .args([
            "admin",
            "pull",
            &vault.url,
            "--read-token",
            &vault.read_token(),
        ])
        .arg("--identity")
        .arg(&org.identity)
        .args(["--fingerprint", &org.fingerprint, "--out"])
        .arg(&out_dir)
        .output()
        .expect("run pull");
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("is listed for 2 machines"),
        "{}",
        stdout(&out)
    );
    for session in ["Shared", "shared"] {
        assert!(!out_dir.join(session).exists(), "{session} pulled");
    }
}
