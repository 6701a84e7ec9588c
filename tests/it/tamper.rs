//! `nd7 verify` through the real binary, against logs changed after the fact:
//! each change is caught at the entry where it shows, with the check that
//! caught it, and exit status 1.

use crate::common::*;

const N: usize = 12;

fn recorded(state: &State) -> nd7_core::session_log::SessionLog {
    for i in 0..N {
        let out = state.record(payload("s", i).as_bytes());
        assert_eq!(stderr(&out), "");
    }
    state.log("s")
}

/// Splitting the walk across threads must not change the verdict.
fn assert_split_agrees(log: &nd7_core::session_log::SessionLog) {
    let one = format!("{:?}", log.verify_in(1));
    for parts in 2..=5 {
        assert_eq!(
            format!("{:?}", log.verify_in(parts)),
            one,
            "split into {parts}"
        );
    }
}

fn verify_fails(state: &State, target: &str, needle: &str) {
    if let Ok(log) = nd7_core::session_log::SessionLog::new(&state.sessions(), target) {
        assert_split_agrees(&log);
    }
    let out = verify(state, &[target]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}{}", stderr(&out));
    assert!(text.contains(needle), "{text:?} should contain {needle:?}");
    assert!(!text.contains("verified:"), "{text}");
}

/// `nd7 verify ARGS` against the state.
fn verify(state: &State, args: &[&str]) -> std::process::Output {
    state
        .nd7()
        .arg("verify")
        .args(args)
        .output()
        .expect("run nd7 verify")
}

fn rewrite_lines(log: &nd7_core::session_log::SessionLog, f: impl FnOnce(&mut Vec<String>)) {
    let mut all = lines(log);
    f(&mut all);
    let text: String = all.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(log.events_path(), text).expect("rewrite");
}

#[test]
fn a_clean_log_verifies_by_id_by_directory_and_by_file() {
    let state = State::new();
    let log = recorded(&state);
    for target in [
        "s".to_string(),
        log.dir().display().to_string(),
        log.events_path().display().to_string(),
    ] {
        let out = verify(&state, &[&target]);
        assert_eq!(out.status.code(), Some(0), "{target}: {}", stdout(&out));
        assert!(stdout(&out).starts_with(&format!("verified: {N} entries, head ")));
    }
}

#[test]
fn one_changed_byte_is_caught_at_its_entry() {
    let state = State::new();
    let log = recorded(&state);
    rewrite_lines(&log, |l| l[5] = l[5].replacen("echo 5", "echo 6", 1));
    verify_fails(&state, "s", "entry 5 (line 6): hash does not match");
}

#[test]
fn a_changed_byte_in_the_stated_hash_is_caught() {
    let state = State::new();
    let log = recorded(&state);
    rewrite_lines(&log, |l| {
        let at = l[3].len() - 5;
        let c = if &l[3][at..at + 1] == "a" { "b" } else { "a" };
        l[3].replace_range(at..at + 1, c);
    });
    verify_fails(&state, "s", "entry 3 (line 4): hash does not match");
}

#[test]
fn a_deleted_line_is_caught_where_it_was() {
    let state = State::new();
    let log = recorded(&state);
    rewrite_lines(&log, |l| {
        l.remove(7);
    });
    verify_fails(
        &state,
        "s",
        "entry 7 (line 8): sequence number is 8, expected 7",
    );
}

#[test]
fn two_swapped_lines_are_caught_at_the_first() {
    let state = State::new();
    let log = recorded(&state);
    rewrite_lines(&log, |l| l.swap(4, 5));
    verify_fails(
        &state,
        "s",
        "entry 4 (line 5): sequence number is 5, expected 4",
    );
}

#[test]
fn a_deleted_last_line_is_caught_by_head() {
    let state = State::new();
    let log = recorded(&state);
    rewrite_lines(&log, |l| {
        l.pop();
    });
    verify_fails(
        &state,
        "s",
        "head names entry 11, ahead of the log's last entry 10",
    );
}

#[test]
fn a_log_moved_to_another_session_id_fails_at_entry_0() {
    let state = State::new();
    let log = recorded(&state);
    let moved = state.sessions().join("other-session");
    std::fs::rename(log.dir(), &moved).expect("move");
    verify_fails(
        &state,
        "other-session",
        "entry 0 (line 1): prev does not match",
    );
}

#[test]
fn a_torn_last_line_is_caught() {
    let state = State::new();
    let log = recorded(&state);
    let bytes = std::fs::read(log.events_path()).expect("read");
    std::fs::write(log.events_path(), &bytes[..bytes.len() - 1]).expect("write");
    verify_fails(&state, "s", "entry 11 (line 12): not a sealed entry");
}

/// A typo must never look like assurance: a target that names no session
/// exits 2, naming what it looked at, and checks nothing. Guards the
/// `NoSession` and `NotASession` checks in `SessionLog::verify_split`.
#[test]
fn a_target_that_is_not_a_session_exits_2_naming_it() {
    let state = State::new();
    recorded(&state);
    let not_a_session = state.dir.path().join("just-a-directory");
    std::fs::create_dir_all(&not_a_session).expect("mkdir");
    let a_file = state.dir.path().join("notes.txt");
    std::fs::write(&a_file, "hello\n").expect("write");
    let emptied = state.sessions().join("emptied");
    std::fs::create_dir_all(&emptied).expect("mkdir");
    std::fs::write(emptied.join("lock"), "").expect("write");
    let cases = [
        (
            "never-recorded".to_string(),
            "no session \"never-recorded\" under ",
        ),
        (
            "/nonexistent/x".to_string(),
            "/nonexistent/x: no such session",
        ),
        (
            "/nonexistent/x/events.ndjson".to_string(),
            "/nonexistent/x: no such session",
        ),
        (
            not_a_session.display().to_string(),
            "just-a-directory: not a session: it holds neither events.ndjson nor head",
        ),
        ("emptied".to_string(), "emptied: not a session"),
        (
            a_file.display().to_string(),
            "notes.txt: not a session: it is not a directory",
        ),
    ];
    for (target, needle) in cases {
        let out = verify(&state, &[&target]);
        assert_eq!(out.status.code(), Some(2), "{target}: {}", stdout(&out));
        assert_eq!(
            stdout(&out),
            "",
            "{target}: nothing that reads as a verdict"
        );
        let err = stderr(&out);
        assert!(err.starts_with("nd7 verify: "), "{err}");
        assert!(err.contains(needle), "{target}: {err:?} lacks {needle:?}");
    }
    assert!(
        !state.sessions().join("never-recorded").exists(),
        "verify creates nothing"
    );
    let out = verify(&state, &["--all"]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("2 sessions: 1 verified, 0 failed, 1 unreadable"),
        "{}",
        stdout(&out)
    );
}

/// A log deleted with its head kept is a broken chain (1), not "no session".
#[test]
fn a_deleted_log_with_its_head_left_fails() {
    let state = State::new();
    let log = recorded(&state);
    std::fs::remove_file(log.events_path()).expect("rm");
    verify_fails(&state, "s", "head names entry 11 but the log is empty");
    // By path too: the one lookup the reading commands share reads a
    // directory holding `head` as the session it was.
    let dir = log.dir().display().to_string();
    verify_fails(&state, &dir, "head names entry 11 but the log is empty");
}

#[test]
fn verify_all_says_when_there_is_nothing_to_verify() {
    let state = State::new();
    let out = verify(&state, &["--all"]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert_eq!(stdout(&out), "");
    let err = stderr(&out);
    assert!(
        err.contains(&format!("{} does not exist", state.sessions().display())),
        "{err}"
    );
    assert!(err.contains("nothing was verified"), "{err}");

    std::fs::create_dir_all(state.sessions()).expect("mkdir");
    let out = verify(&state, &["--all"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with("no sessions under "), "{text}");
    assert!(text.contains("nothing was verified"), "{text}");
    assert!(!text.contains("verified:"), "{text}");
}

#[test]
fn verify_all_reports_each_session_and_fails_if_one_does() {
    let state = State::new();
    let log = recorded(&state);
    for i in 0..3 {
        state.record(payload("t", i).as_bytes());
    }
    let out = verify(&state, &["--all"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(stdout(&out).contains("2 sessions: 2 verified, 0 failed"));
    rewrite_lines(&log, |l| l.swap(0, 1));
    let out = verify(&state, &["--all"]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(text.contains("s: FAILED: "), "{text}");
    assert!(text.contains("t: verified: 3 entries"), "{text}");
}

#[test]
fn usage_errors_exit_2() {
    let state = State::new();
    let out = state.nd7().arg("verify").output().expect("verify");
    assert_eq!(out.status.code(), Some(2));
    // A path with no directory name cannot name a session.
    let out = state.nd7().args(["verify", "/"]).output().expect("verify");
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("invalid session id"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn verify_all_counts_a_directory_nd7_could_not_have_written_as_unreadable() {
    use std::os::unix::ffi::OsStrExt;
    let state = State::new();
    recorded(&state);
    let foreign = state
        .sessions()
        .join(std::ffi::OsStr::from_bytes(b"not-\xffutf8"));
    std::fs::create_dir_all(&foreign).expect("mkdir");
    let out = verify(&state, &["--all"]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("2 sessions: 1 verified, 0 failed, 1 unreadable"),
        "{}",
        stdout(&out)
    );
    assert!(
        stderr(&out).contains("not a session nd7 wrote"),
        "{}",
        stderr(&out)
    );
}

/// `nd7 verify` said of any chain named `run-…` that it "was read-only inside
/// the sandbox", though a session recorded outside `nd7 run` can take that
/// name (its id is the hook payload's `session_id`), and so can a directory
/// anyone who writes the logs makes. Now the wording follows what the chain
/// holds: nd7 run's own `run_start` as its first entry, and even that is
/// said to be only as strong as the machine.
///
/// Guards `run_log::opens_a_run` in `verify_log` (bin/nd7.rs), where the
/// name's prefix was the test.
#[test]
fn a_chain_named_like_a_run_is_not_called_one() {
    let state = State::new();
    let id = "run-20261201T000000Z-1-abcd";
    let out = state.record(payload(id, 0).as_bytes());
    assert_eq!(stderr(&out), "");
    let out = verify(&state, &[id]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    assert!(!text.contains("read-only inside the sandbox"), "{text}");
    assert!(!text.contains("nd7 run"), "{text}");
    assert!(text.contains("it is not third-party evidence"), "{text}");
}
