//! `SessionLog::append` against every state head and log can be found in:
//! the two an interrupted append leaves are repaired, every other one is
//! refused without writing a byte.

use std::os::unix::process::CommandExt;

use nd7_core::chain::{Disagreement, Fault, HeadState};
use nd7_core::session_log::{Error, SessionLog};

use crate::common::*;

fn log_with(state: &State, n: usize) -> SessionLog {
    let log = state.log("s");
    for i in 0..n {
        log.append(&event("s", i)).expect("append");
    }
    log
}

#[test]
fn a_crash_between_append_and_head_rewrite_is_repaired() {
    let state = State::new();
    let log = log_with(&state, 3);
    // The state a crash right after the entry's write leaves: the line is
    // there, head still names the entry before.
    let old_head = std::fs::read(log.head_path()).expect("head");
    log.append(&event("s", 3)).expect("append");
    std::fs::write(log.head_path(), &old_head).expect("restore head");
    let v = log.verify(1).expect("a head one behind still verifies");
    assert_eq!(v.head_state, HeadState::OneBehind);

    let next = log.append(&event("s", 4)).expect("the next append repairs");
    assert_eq!(next.repaired, Some(HeadState::OneBehind));
    assert_eq!(next.seq, 4);
    let v = log.verify(1).expect("clean");
    assert_eq!((v.entries, v.head_state), (5, HeadState::Current));
}

#[test]
fn a_crash_before_the_first_head_write_is_repaired() {
    let state = State::new();
    let log = log_with(&state, 1);
    std::fs::remove_file(log.head_path()).expect("rm head");
    assert_eq!(
        log.verify(1).expect("verifies").head_state,
        HeadState::Missing
    );
    let next = log.append(&event("s", 1)).expect("repairs");
    assert_eq!(next.repaired, Some(HeadState::Missing));
    assert_eq!(log.verify(1).expect("clean").entries, 2);
}

#[test]
fn a_killed_writer_never_leaves_an_unrepairable_log() {
    // Real crashes: kill -9 a process appending in a loop, at whatever point
    // it has reached, then append and verify.
    let state = State::new();
    let payload = payload("s", 0);
    for round in 0..8 {
        let mut child = std::process::Command::new("sh")
            .process_group(0)
            .arg("-c")
            .arg(format!(
                "while :; do printf '%s' '{payload}' | '{}' record; done",
                env!("CARGO_BIN_EXE_nd7")
            ))
            .env("XDG_STATE_HOME", state.xdg())
            .spawn()
            .expect("spawn");
        std::thread::sleep(std::time::Duration::from_millis(40 + 17 * round));
        // Kill the whole loop: the shell and the record it is running.
        if let Some(group) = rustix::process::Pid::from_raw(child.id() as i32) {
            rustix::process::kill_process_group(group, rustix::process::Signal::KILL)
                .expect("kill the loop's process group");
        }
        let _ = child.kill();
        let _ = child.wait();
        let log = state.log("s");
        log.append(&event("s", round as usize))
            .expect("append after a kill");
        log.verify(1).expect("clean after a kill");
    }
}

fn assert_refused(log: &SessionLog, check: impl Fn(&Error) -> bool) {
    let before = snapshot(log);
    let err = log.append(&event("s", 99)).expect_err("must refuse");
    assert!(check(&err), "unexpected refusal: {err}");
    assert!(err.to_string().contains("refusing to append"), "{err}");
    assert_eq!(snapshot(log), before, "a refusal writes nothing");
}

fn set_head(log: &SessionLog, seq: u64, hash: &str) {
    std::fs::write(log.head_path(), format!("{seq} {hash}\n")).expect("write head");
}

fn stated_hash(log: &SessionLog, seq: usize) -> String {
    entries(log)[seq]["hash"]
        .as_str()
        .expect("hash")
        .to_string()
}

#[test]
fn head_ahead_of_the_log_is_refused() {
    let state = State::new();
    let log = log_with(&state, 3);
    set_head(&log, 5, &stated_hash(&log, 2));
    assert_refused(&log, |e| {
        matches!(
            e,
            Error::Disagrees {
                disagreement: Disagreement::HeadAhead {
                    head_seq: 5,
                    last_seq: 2
                },
                ..
            }
        )
    });
}

#[test]
fn head_far_behind_is_refused() {
    let state = State::new();
    let log = log_with(&state, 4);
    set_head(&log, 1, &stated_hash(&log, 1));
    assert_refused(&log, |e| {
        matches!(
            e,
            Error::Disagrees {
                disagreement: Disagreement::HeadFarBehind {
                    head_seq: 1,
                    last_seq: 3
                },
                ..
            }
        )
    });
}

#[test]
fn head_naming_the_last_entry_with_another_hash_is_refused() {
    let state = State::new();
    let log = log_with(&state, 3);
    set_head(&log, 2, &"0".repeat(64));
    assert_refused(&log, |e| {
        matches!(
            e,
            Error::Disagrees {
                disagreement: Disagreement::HeadHashDiffers { seq: 2, .. },
                ..
            }
        )
    });
}

#[test]
fn head_one_behind_that_the_last_entry_does_not_link_to_is_refused() {
    let state = State::new();
    let log = log_with(&state, 3);
    set_head(&log, 1, &"0".repeat(64));
    assert_refused(&log, |e| {
        matches!(
            e,
            Error::Disagrees {
                disagreement: Disagreement::HeadHashDiffers { seq: 1, .. },
                ..
            }
        )
    });
}

#[test]
fn head_without_a_log_is_refused() {
    let state = State::new();
    let log = log_with(&state, 2);
    std::fs::write(log.events_path(), b"").expect("empty the log");
    assert_refused(&log, |e| {
        matches!(
            e,
            Error::Disagrees {
                disagreement: Disagreement::HeadWithoutLog { head_seq: 1 },
                ..
            }
        )
    });
}

#[test]
fn an_unreadable_head_is_refused() {
    let state = State::new();
    let log = log_with(&state, 2);
    std::fs::write(log.head_path(), b"garbage\n").expect("write");
    assert_refused(&log, |e| matches!(e, Error::HeadUnreadable { .. }));
}

#[test]
fn a_torn_last_line_is_refused_naming_its_offset() {
    let state = State::new();
    let log = log_with(&state, 2);
    let mut bytes = std::fs::read(log.events_path()).expect("read");
    let first_len = bytes.iter().position(|&b| b == b'\n').expect("nl") + 1;
    bytes.truncate(bytes.len() - 10);
    std::fs::write(log.events_path(), &bytes).expect("write");
    assert_refused(
        &log,
        |e| matches!(e, Error::LastLine { offset, fault: Fault::Unsealed(_), .. } if *offset == first_len as u64),
    );
}

#[test]
fn a_last_line_whose_bytes_were_changed_is_refused() {
    let state = State::new();
    let log = log_with(&state, 2);
    let text = std::fs::read_to_string(log.events_path()).expect("read");
    let tampered = text.replacen("echo 1", "echo 7", 1);
    assert_ne!(text, tampered);
    std::fs::write(log.events_path(), tampered).expect("write");
    assert_refused(&log, |e| {
        matches!(
            e,
            Error::LastLine {
                fault: Fault::Hash { .. },
                ..
            }
        )
    });
}

#[test]
fn an_entry_over_the_limit_is_refused() {
    let state = State::new();
    let log = state.log("s");
    let big = serde_json::json!({
        "session_id": "s", "hook_event_name": "UserPromptSubmit",
        "prompt": "z".repeat(nd7_core::chain::MAX_ENTRY_BYTES),
    });
    let ev = nd7_core::hook::Event::new(
        &invocation(),
        nd7_core::hook::Payload::parse(big.to_string().as_bytes()).expect("parses"),
    );
    let err = log.append(&ev).expect_err("too large");
    assert!(matches!(err, Error::TooLarge { seq: 0, .. }), "{err}");
    assert_eq!(snapshot(&log).0.as_deref(), Some(&b""[..]));
}

#[test]
fn long_entries_are_found_from_the_end() {
    // The last line is longer than one read-back chunk.
    let state = State::new();
    let log = state.log("s");
    for size in [10, 200_000, 70_000, 3] {
        let p = serde_json::json!({
            "session_id": "s", "hook_event_name": "UserPromptSubmit", "prompt": "q".repeat(size),
        });
        let ev = nd7_core::hook::Event::new(
            &invocation(),
            nd7_core::hook::Payload::parse(p.to_string().as_bytes()).expect("parses"),
        );
        log.append(&ev).expect("append");
        std::fs::remove_file(log.head_path()).expect("force a read-back of the last line");
    }
    assert_eq!(log.verify(1).expect("clean").entries, 4);
}

#[test]
fn session_ids_that_are_not_one_path_component_are_refused() {
    let state = State::new();
    for bad in ["", ".", "..", "a/b", "a\\b", "a\0b", "/abs"] {
        assert!(
            matches!(
                SessionLog::new(&state.sessions(), bad),
                Err(Error::InvalidSessionId { .. })
            ),
            "{bad:?}"
        );
    }
    assert!(SessionLog::new(&state.sessions(), "4dc8a87d-d386-4e43").is_ok());
}
