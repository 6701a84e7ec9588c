//! `SessionLog::append` against every state head and log can be found in:
//! the ones interrupted appends leave (an unfinished last line, head missing
//! or behind) are repaired, every other one is refused without writing a byte.

use std::os::unix::process::CommandExt;

use nd7_core::chain::{Disagreement, Fault, HeadState};
use nd7_core::hook::Event;
use nd7_core::session_log::{Error, SessionLog};

use crate::common::*;

fn log_with(state: &State, n: usize) -> SessionLog {
    let log = state.log("s");
    for i in 0..n {
        log.append(&event("s", i)).expect("append");
    }
    log
}

/// Writes `bytes` at the log's end as a writer outside nd7 would.
fn add_to_log(log: &SessionLog, bytes: &[u8]) {
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(log.events_path())
        .expect("open");
    std::io::Write::write_all(&mut file, bytes).expect("write");
}

/// Appends `events` in one batch and puts `head` back as it was: what a
/// writer killed between the batch's write and head's rewrite leaves.
/// Returns the head it put back.
fn batch_left_behind(log: &SessionLog, events: &[Event]) -> Vec<u8> {
    let old_head = std::fs::read(log.head_path()).expect("head");
    log.append_all(events).expect("batch");
    std::fs::write(log.head_path(), &old_head).expect("restore head");
    old_head
}

#[test]
fn a_crash_between_append_and_head_rewrite_is_repaired() {
    let state = State::new();
    let log = log_with(&state, 3);
    // The state a crash right after the entry's write leaves: the line is
    // there, head still names the entry before.
    batch_left_behind(&log, &[event("s", 3)]);
    let v = log.verify(1).expect("a head one behind still verifies");
    assert_eq!(v.head_state, HeadState::Behind { entries: 1 });

    let next = log.append(&event("s", 4)).expect("the next append repairs");
    assert_eq!(next.repaired, Some(HeadState::Behind { entries: 1 }));
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
fn a_head_behind_one_append_of_hundreds_of_anchors_is_repaired() {
    // A session's last hook anchors every transcript file it knows (256 by
    // default, more where the limits say so): one append, hundreds of lines.
    let state = State::new();
    let log = log_with(&state, 2);
    let batch: Vec<_> = (0..300).map(|i| event("s", i)).collect();
    batch_left_behind(&log, &batch);
    let next = log.append(&event("s", 9)).expect("repairs");
    assert_eq!(next.repaired, Some(HeadState::Behind { entries: 300 }));
    assert_eq!(log.verify(1).expect("clean").entries, 303);
}

#[test]
fn an_unfinished_line_longer_than_any_entry_is_refused() {
    let state = State::new();
    let log = log_with(&state, 2);
    let whole = std::fs::metadata(log.events_path()).expect("stat").len();
    add_to_log(&log, &vec![b'x'; nd7_core::chain::MAX_ENTRY_BYTES]);
    assert_refused(&log, |e| {
        matches!(e, Error::NoNewline { from, bytes, .. }
            if *from == whole && *bytes == nd7_core::chain::MAX_ENTRY_BYTES as u64)
    });
}

#[test]
fn a_long_line_is_refused_where_it_starts() {
    // A sealed line one byte longer than an entry may be, which nd7 never
    // writes: refused, and the error names the byte it starts at.
    let state = State::new();
    let log = log_with(&state, 2);
    let whole = std::fs::metadata(log.events_path()).expect("stat").len();
    // Sealed, linked and numbered: only its length is wrong.
    let prev = stated_hash(&log, 1);
    let seal = ",\"hash\":\"\"}\n".len() + 64;
    let frame = format!("{{\"seq\":2,\"pad\":\"\",\"prev\":\"{prev}\"").len();
    let pad = "x".repeat(nd7_core::chain::MAX_ENTRY_BYTES + 1 - seal - frame);
    let covered = format!("{{\"seq\":2,\"pad\":\"{pad}\",\"prev\":\"{prev}\"");
    let hash = nd7_core::chain::Hash::of(covered.as_bytes()).to_hex();
    let long = format!("{covered},\"hash\":\"{hash}\"}}\n");
    assert_eq!(long.len(), nd7_core::chain::MAX_ENTRY_BYTES + 1);
    assert!(nd7_core::chain::read_checked(long.trim_end().as_bytes()).is_ok());
    add_to_log(&log, long.as_bytes());
    assert_refused(
        &log,
        |e| matches!(e, Error::LastLine { offset, fault: Fault::Unsealed(_), .. } if *offset == whole),
    );
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
fn an_entry_cut_short_that_head_names_is_refused() {
    // Someone, not a killed writer, cut into the last entry: head still
    // names it, so the cut is not the unfinished line of an append.
    let state = State::new();
    let log = log_with(&state, 2);
    let mut bytes = std::fs::read(log.events_path()).expect("read");
    let first_len = bytes.iter().position(|&b| b == b'\n').expect("nl") + 1;
    bytes.truncate(bytes.len() - 10);
    std::fs::write(log.events_path(), &bytes).expect("write");
    assert_refused(&log, |e| {
        matches!(
            e,
            Error::Unfinished {
                disagreement: Disagreement::HeadAhead {
                    head_seq: 1,
                    last_seq: 0
                },
                offset,
                ..
            } if *offset == first_len as u64
        )
    });
}

#[test]
fn a_line_without_an_entry_before_it_under_a_head_is_refused() {
    let state = State::new();
    let log = log_with(&state, 1);
    let bytes = std::fs::read(log.events_path()).expect("read");
    std::fs::write(log.events_path(), &bytes[..bytes.len() - 1]).expect("write");
    assert_refused(&log, |e| {
        matches!(
            e,
            Error::Unfinished {
                disagreement: Disagreement::HeadWithoutLog { head_seq: 0 },
                offset: 0,
                ..
            }
        )
    });
}

#[test]
fn the_start_of_a_line_a_killed_append_left_is_cut_off() {
    // What `kill -9` of a writer inside its `write` leaves: the start of the
    // next line, no newline, head naming the last whole entry. Guards the
    // cut in `SessionLog::append_all` (`if end < len`): without it the log
    // refuses every append after (`a_killed_writer_never_leaves_an_unrepairable_log`
    // met this state on a loaded CI machine).
    let state = State::new();
    let log = log_with(&state, 3);
    let whole = std::fs::read(log.events_path()).expect("read");
    let other = State::new();
    let next = log_with(&other, 4);
    let fourth = std::fs::read(next.events_path()).expect("read");
    let fourth = &fourth[whole.len()..];
    for torn in [1, 57, fourth.len() - 1] {
        let before = entries(&log).len();
        add_to_log(&log, &fourth[..torn]);
        let appended = log.append(&event("s", 9)).expect("the next append repairs");
        assert_eq!((appended.seq, appended.cut), (before as u64, torn as u64));
        assert_eq!(appended.repaired, None, "head was current");
        let v = log.verify(1).expect("clean after the cut");
        assert_eq!(v.entries, before as u64 + 1);
    }
    assert!(
        std::fs::read(log.events_path())
            .expect("read")
            .starts_with(&whole),
        "every whole entry is kept"
    );
}

#[test]
fn a_line_torn_before_any_entry_is_cut_off() {
    let state = State::new();
    let log = state.log("s");
    let other = State::new();
    let first = log_with(&other, 1);
    let line = std::fs::read(first.events_path()).expect("read");
    std::fs::create_dir_all(log.dir()).expect("dir");
    std::fs::write(log.events_path(), &line[..line.len() / 2]).expect("tear");
    let appended = log.append(&event("s", 0)).expect("repairs");
    assert_eq!((appended.seq, appended.cut), (0, (line.len() / 2) as u64));
    assert_eq!(log.verify(1).expect("clean").entries, 1);
}

#[test]
fn a_batch_whose_head_rewrite_died_is_repaired() {
    // One append writes a hook's entry and its anchors: a writer killed
    // between that write and head's leaves head several entries behind.
    let state = State::new();
    let log = log_with(&state, 2);
    let batch: Vec<_> = (2..5).map(|i| event("s", i)).collect();
    let old_head = batch_left_behind(&log, &batch);
    let v = log.verify(1).expect("a head appends left behind verifies");
    assert_eq!(v.head_state, HeadState::Behind { entries: 3 });

    // And killed inside the write of the next batch, after its first line.
    let mut bytes = std::fs::read(log.events_path()).expect("read");
    log.append_all(&batch).expect("batch");
    let grown = std::fs::read(log.events_path()).expect("read");
    let second_end = bytes.len()
        + grown[bytes.len()..]
            .iter()
            .position(|&b| b == b'\n')
            .expect("nl")
        + 1;
    bytes = grown[..second_end + 20].to_vec();
    std::fs::write(log.events_path(), &bytes).expect("tear");
    std::fs::write(log.head_path(), &old_head).expect("restore head");

    let next = log.append(&event("s", 9)).expect("the next append repairs");
    assert_eq!(next.repaired, Some(HeadState::Behind { entries: 4 }));
    assert_eq!((next.seq, next.cut), (6, 20));
    let v = log.verify(1).expect("clean");
    assert_eq!((v.entries, v.head_state), (7, HeadState::Current));
}

#[test]
fn head_behind_past_an_entry_that_does_not_link_is_refused() {
    let state = State::new();
    let log = log_with(&state, 4);
    // head two behind, and the entry after it re-sealed with another prev.
    set_head(&log, 1, &stated_hash(&log, 1));
    let mut lines: Vec<Vec<u8>> = std::fs::read(log.events_path())
        .expect("read")
        .split_inclusive(|&b| b == b'\n')
        .map(<[u8]>::to_vec)
        .collect();
    let other_state = State::new();
    let other = other_state.log("s");
    for i in 0..3 {
        other.append(&event("s", 10 + i)).expect("append");
    }
    let other = std::fs::read(other.events_path()).expect("read");
    lines[2] = other
        .split_inclusive(|&b| b == b'\n')
        .nth(2)
        .expect("line")
        .to_vec();
    std::fs::write(log.events_path(), lines.concat()).expect("write");
    assert_refused(&log, |e| {
        matches!(
            e,
            Error::Disagrees {
                disagreement: Disagreement::Unlinked {
                    head_seq: 1,
                    last_seq: 3,
                    seq: 3
                },
                ..
            }
        )
    });
    // An entry in the stretch whose bytes were changed is where it breaks.
    let changed_state = State::new();
    let changed = log_with(&changed_state, 6);
    let head_hash = stated_hash(&changed, 1);
    let mut bytes = std::fs::read(changed.events_path()).expect("read");
    let mut starts = vec![0];
    starts.extend(
        (0..bytes.len())
            .filter(|&i| bytes[i] == b'\n')
            .map(|i| i + 1),
    );
    bytes[starts[3] + 30] ^= 1;
    std::fs::write(changed.events_path(), &bytes).expect("write");
    set_head(&changed, 1, &head_hash);
    assert_refused(&changed, |e| {
        matches!(
            e,
            Error::Disagrees {
                disagreement: Disagreement::Unlinked {
                    head_seq: 1,
                    last_seq: 5,
                    seq: 3
                },
                ..
            }
        )
    });
    // And a head that does not name the entry the stretch links down to.
    let log = log_with(&other_state, 0);
    set_head(&log, 0, &stated_hash(&log, 1));
    assert_refused(&log, |e| {
        matches!(
            e,
            Error::Disagrees {
                disagreement: Disagreement::Unlinked { seq: 1, .. },
                ..
            }
        )
    });
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
