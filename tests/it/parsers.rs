//! Properties of the two parsers that read bytes nobody vouches for: the hook
//! payload (`hook::Payload::parse`, fed by whatever arrives on `nd7 record`'s
//! standard input) and the sealed-line reader (`chain`, fed by whatever is in
//! a log file). Neither may panic on any input, and the line reader must
//! catch every change to a sealed line. A bounded fuzz run, on every
//! `cargo test`.

use nd7_core::chain::{self, Cursor, Hash, Head, Walker};
use nd7_core::hook::{Event, Payload};
use proptest::prelude::*;

use crate::common::*;

/// A real payload of each kind, for mutation.
fn seed_payload() -> impl Strategy<Value = Vec<u8>> {
    prop::sample::select(fixture_payloads()).prop_map(String::into_bytes)
}

/// One edit to a byte string: flip, insert, delete or truncate.
#[derive(Clone, Debug)]
enum Edit {
    Flip(usize, u8),
    Insert(usize, u8),
    Delete(usize),
    Cut(usize),
}

fn edits() -> impl Strategy<Value = Vec<Edit>> {
    let edit = prop_oneof![
        (any::<usize>(), 1..=255u8).prop_map(|(at, x)| Edit::Flip(at, x)),
        (any::<usize>(), any::<u8>()).prop_map(|(at, b)| Edit::Insert(at, b)),
        any::<usize>().prop_map(Edit::Delete),
        any::<usize>().prop_map(Edit::Cut),
    ];
    prop::collection::vec(edit, 1..6)
}

fn apply(mut bytes: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for edit in edits {
        let len = bytes.len().max(1);
        match *edit {
            Edit::Flip(at, x) if !bytes.is_empty() => bytes[at % len] ^= x,
            Edit::Insert(at, b) => bytes.insert(at % (bytes.len() + 1), b),
            Edit::Delete(at) if !bytes.is_empty() => {
                bytes.remove(at % len);
            }
            Edit::Cut(at) => bytes.truncate(at % len),
            _ => {}
        }
    }
    bytes
}

/// What record does with a payload that parsed: the entry it would append
/// must be a sealed line that reads back as itself.
fn check_parsed(input: &[u8]) {
    if let Ok(payload) = Payload::parse(input) {
        let session = payload.session_id.clone();
        let event = Event::new(&invocation(), payload);
        let line = chain::render_entry(&event, &Cursor::start(&session));
        assert_eq!(line.last(), Some(&b'\n'));
        assert!(!line[..line.len() - 1].contains(&b'\n'), "one line");
        let stated = chain::read_checked(&line[..line.len() - 1]).expect("reads back");
        assert_eq!(stated.seq, 0);
        assert_eq!(stated.prev, Hash::session_fingerprint(&session));
        let mut walker = Walker::new(Cursor::start(&session));
        walker.feed(&line).expect("the entry continues its chain");
    }
}

/// Three entries of a real chain, as `nd7 record` writes them.
fn sealed_lines() -> Vec<Vec<u8>> {
    let mut cursor = Cursor::start("s");
    fixture_payloads()
        .iter()
        .take(3)
        .map(|p| {
            let event = Event::new(&invocation(), Payload::parse(p.as_bytes()).expect("parses"));
            let line = chain::render_entry(&event, &cursor);
            let stated = chain::read_checked(&line[..line.len() - 1]).expect("sealed");
            cursor = Cursor {
                next_seq: stated.seq + 1,
                prev: stated.hash,
            };
            line
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn payload_parse_takes_any_bytes(input in prop::collection::vec(any::<u8>(), 0..256)) {
        check_parsed(&input);
    }

    #[test]
    fn payload_parse_takes_any_json_like_text(
        input in r#"[{}\[\]":,0-9a-z_\\. \-]{0,96}"#,
    ) {
        check_parsed(input.as_bytes());
        check_parsed(format!(r#"{{"session_id":"s",{input}}}"#).as_bytes());
    }

    #[test]
    fn payload_parse_takes_any_damaged_real_payload(seed in seed_payload(), edits in edits()) {
        check_parsed(&apply(seed, &edits));
    }

    #[test]
    fn the_line_reader_takes_any_bytes(input in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = chain::read_stated(&input);
        let _ = chain::read_checked(&input);
        let _ = Head::parse(&input);
        let mut walker = Walker::new(Cursor::start("s"));
        let failure = walker.feed(&input).err();
        let _ = chain::join(Cursor::start("s"), vec![walker.finish(failure)]);
        let mut detached = Walker::detached();
        let _ = detached.feed(&input);
    }

    /// Any edit to a chain of sealed lines is caught, unless it gives the
    /// same bytes back, or only cuts whole lines off the end (which `head`
    /// catches, not the walk).
    #[test]
    fn every_edit_to_a_sealed_chain_is_caught(edits in edits()) {
        let original: Vec<u8> = sealed_lines().concat();
        let damaged = apply(original.clone(), &edits);
        let mut walker = Walker::new(Cursor::start("s"));
        let verdict = walker.feed(&damaged);
        let cut_at_a_line = original.starts_with(&damaged)
            && (damaged.is_empty() || damaged.ends_with(b"\n"));
        if damaged != original && !cut_at_a_line {
            prop_assert!(verdict.is_err(), "undetected: {}", String::from_utf8_lossy(&damaged));
        } else {
            prop_assert!(verdict.is_ok());
        }
    }

    /// Within one line, every single-byte change is caught at that line.
    #[test]
    fn every_changed_byte_is_caught_at_its_entry(line in 0..3usize, at: usize, x in 1..=255u8) {
        let mut lines = sealed_lines();
        let len = lines[line].len();
        lines[line][at % len] ^= x;
        let mut walker = Walker::new(Cursor::start("s"));
        let broken = walker.feed(&lines.concat()).expect_err("caught");
        // A changed newline joins two lines, or cuts the last one short:
        // either way the entry it ended is the one reported.
        prop_assert_eq!(broken.entry, line as u64);
    }
}
