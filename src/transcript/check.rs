//! `nd7 verify --transcript`: the transcript on disk held against every
//! anchor in the session's chain.
//!
//! Each file named by an anchor is read once from its first byte, through
//! [`crate::safe_file`] as the anchoring did, and its BLAKE3 prefix compared
//! at every anchored length ([`Prefix::digest`] does not consume the state).
//! The file passes when it extends every anchor byte for byte: bytes written
//! after the last anchor change nothing. An anchor it contradicts is named by
//! its entry, with what can be said about where the change lies: between the
//! last anchor still held and this one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::prefix::Prefix;
use crate::safe_file::{self, Budget, OpenError};
use crate::session_log::{self, SessionLog};

/// One anchor, as its entry states it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Anchor {
    pub seq: u64,
    /// Where the previous anchor of its generation ended.
    pub from: u64,
    pub bytes: u64,
    pub blake3: String,
    pub generation: u64,
}

/// A gap or break entry, reported beside the verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    pub seq: u64,
    pub kind: String,
    pub path: String,
    /// `reason` (gap) or `found` (break), and the entry's detail.
    pub what: String,
    pub detail: String,
}

/// Every transcript a log anchors.
#[derive(Clone, Debug, Default)]
pub struct Anchored {
    /// By (root, path), in the order of their first anchor.
    pub files: Vec<((String, String), Vec<Anchor>)>,
    pub notes: Vec<Note>,
}

/// Reads the anchors, gaps and breaks out of `log`. Only nd7's own entries
/// count (`record:nd7` outside a run, `exit:nd7` in a run's chain): a hook's
/// payload can never make one.
pub fn collect(log: &SessionLog) -> Result<Anchored, session_log::Error> {
    let mut collector = Collector::default();
    log.for_each_line(|line| {
        collector.feed(line);
        true
    })?;
    Ok(collector.out)
}

/// [`collect`] over a log read line by line from `log` (a pulled copy,
/// which may be larger than memory).
pub fn collect_read(log: impl std::io::BufRead) -> std::io::Result<Anchored> {
    let mut collector = Collector::default();
    for line in log.split(b'\n') {
        collector.feed(&line?);
    }
    Ok(collector.out)
}

#[derive(Default)]
struct Collector {
    out: Anchored,
    index: BTreeMap<(String, String), usize>,
}

impl Collector {
    fn feed(&mut self, line: &[u8]) {
        let (out, index) = (&mut self.out, &mut self.index);
        if memchr::memmem::find(line, b"\"kind\":\"transcript_").is_none() {
            return;
        }
        let Ok(entry) = serde_json::from_slice::<Value>(line) else {
            return;
        };
        let source = entry["source"].as_str().unwrap_or_default();
        if source != super::SOURCE && source != crate::run_entry::SOURCE {
            return;
        }
        let seq = entry["seq"].as_u64().unwrap_or_default();
        let body = &entry["body"];
        let text = |name: &str| body[name].as_str().unwrap_or_default().to_string();
        match entry["kind"].as_str() {
            Some(super::ANCHOR) => {
                let key = (text("root"), text("path"));
                let n = *index.entry(key.clone()).or_insert_with(|| {
                    out.files.push((key, Vec::new()));
                    out.files.len() - 1
                });
                out.files[n].1.push(Anchor {
                    seq,
                    from: body["from"].as_u64().unwrap_or_default(),
                    bytes: body["bytes"].as_u64().unwrap_or_default(),
                    blake3: text("blake3"),
                    generation: body["generation"].as_u64().unwrap_or_default(),
                });
            }
            Some(kind @ (super::GAP | super::BREAK)) => out.notes.push(Note {
                seq,
                kind: kind.to_string(),
                path: text("path"),
                what: if kind == super::GAP {
                    text("reason")
                } else {
                    text("found")
                },
                detail: text("detail"),
            }),
            _ => {}
        }
    }
}

/// What holding one file against its anchors found.
#[derive(Debug)]
pub enum Verdict {
    /// The file extends every anchor.
    Holds {
        anchors: usize,
        /// The longest anchored prefix, and the file's length now.
        anchored: u64,
        size: u64,
    },
    /// The file contradicts the anchor of entry `seq`.
    Contradicts(Contradiction),
    /// The file could not be read: nothing was checked.
    Unreadable(String),
}

/// The first anchor (by entry) a file contradicts.
#[derive(Debug, PartialEq, Eq)]
pub struct Contradiction {
    pub seq: u64,
    pub bytes: u64,
    /// The file is this long, shorter than the anchor.
    pub truncated_to: Option<u64>,
    /// The longest anchored prefix below `bytes` that still holds (0 if
    /// none), and the line numbers (1-based) the change lies between.
    pub held: u64,
    pub lines: (u64, u64),
}

impl std::fmt::Display for Contradiction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.truncated_to {
            Some(size) => write!(
                f,
                "entry {} anchored its first {} bytes, but the file is {size} bytes: truncated",
                self.seq, self.bytes
            ),
            None => write!(
                f,
                "entry {} anchored its first {} bytes, and they are not what was anchored: rewritten within bytes {}..{} (lines {}-{})",
                self.seq, self.bytes, self.held, self.bytes, self.lines.0, self.lines.1
            ),
        }
    }
}

/// Holds the file at `path` (reached from `root` as the anchoring reached
/// it) against `anchors`.
pub fn check_file(root: &str, path: &str, anchors: &[Anchor]) -> Verdict {
    let Some(place) = super::layout::place_of(Path::new(root), Path::new(path)) else {
        return Verdict::Unreadable(format!(
            "{path}: the anchor names a file that is not where Claude Code keeps transcripts or Codex its rollouts under {root}"
        ));
    };
    let opened = match safe_file::open_beneath(&PathBuf::from(root), &place.components) {
        Ok(opened) => opened,
        Err(e @ OpenError::Missing { .. }) => {
            return Verdict::Unreadable(format!("{e} (it was anchored {} times)", anchors.len()));
        }
        Err(e) => return Verdict::Unreadable(e.to_string()),
    };
    let mut order: Vec<&Anchor> = anchors.iter().collect();
    order.sort_by_key(|a| (a.bytes, a.seq));
    let mut prefix = Prefix::new();
    let mut newlines: u64 = 0;
    // The line a byte offset falls in, for the offsets we pass.
    let mut line_at: BTreeMap<u64, u64> = BTreeMap::new();
    let mut failed: Vec<Contradiction> = Vec::new();
    let mut held: u64 = 0;
    let mut budget = Budget {
        bytes: u64::MAX,
        deadline: None,
    };
    for anchor in &order {
        if anchor.bytes > prefix.len() {
            let read =
                safe_file::read_range(&opened.file, prefix.len(), anchor.bytes, &mut budget, |b| {
                    newlines += memchr::memchr_iter(b'\n', b).count() as u64;
                    prefix.update(b);
                });
            if let Err(e) = read {
                return Verdict::Unreadable(format!("{path}: cannot read: {e}"));
            }
        }
        line_at.insert(prefix.len(), newlines + 1);
        if prefix.len() < anchor.bytes {
            failed.push(Contradiction {
                seq: anchor.seq,
                bytes: anchor.bytes,
                truncated_to: Some(prefix.len()),
                held,
                lines: (0, 0),
            });
            continue;
        }
        if prefix.digest().to_hex().as_str() == anchor.blake3 {
            held = held.max(anchor.bytes);
        } else {
            failed.push(Contradiction {
                seq: anchor.seq,
                bytes: anchor.bytes,
                truncated_to: None,
                held,
                lines: (0, 0),
            });
        }
    }
    match failed.into_iter().min_by_key(|c| c.seq) {
        Some(mut first) => {
            if first.truncated_to.is_none() {
                let line = |at: u64| line_at.range(..=at).next_back().map_or(1, |(_, l)| *l);
                first.lines = (line(first.held), line(first.bytes));
            }
            Verdict::Contradicts(first)
        }
        None => Verdict::Holds {
            anchors: anchors.len(),
            anchored: order.last().map_or(0, |a| a.bytes),
            size: opened.len,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn anchor(seq: u64, data: &[u8]) -> Anchor {
        Anchor {
            seq,
            from: 0,
            bytes: data.len() as u64,
            blake3: blake3::hash(data).to_hex().to_string(),
            generation: 0,
        }
    }

    #[test]
    fn a_file_that_extends_every_anchor_holds_and_a_changed_one_names_the_first() {
        let dir = tempfile::tempdir().expect("tmp");
        let root = dir.path().to_string_lossy().into_owned();
        std::fs::create_dir_all(format!("{root}/projects/-p")).expect("mkdir");
        let path = format!("{root}/projects/-p/s.jsonl");
        let data: Vec<u8> = (0..5000u32)
            .flat_map(|i| format!("{{\"line\":{i}}}\n").into_bytes())
            .collect();
        let anchors = [
            anchor(3, &data[..1000]),
            anchor(7, &data[..30_000]),
            anchor(9, &data[..60_000]),
        ];
        std::fs::write(&path, &data).expect("write");
        assert!(matches!(
            check_file(&root, &path, &anchors),
            Verdict::Holds {
                anchors: 3,
                anchored: 60_000,
                ..
            }
        ));
        let mut changed = data.clone();
        changed[20_000] ^= 1;
        std::fs::write(&path, &changed).expect("write");
        let Verdict::Contradicts(c) = check_file(&root, &path, &anchors) else {
            panic!("a changed byte is found");
        };
        assert_eq!((c.seq, c.held, c.truncated_to), (7, 1000, None));
        let line_of = |at: usize| data[..at].iter().filter(|&&b| b == b'\n').count() as u64 + 1;
        assert_eq!(c.lines, (line_of(1000), line_of(30_000)));
        std::fs::write(&path, &data[..40_000]).expect("write");
        let Verdict::Contradicts(c) = check_file(&root, &path, &anchors) else {
            panic!("a truncated file is found");
        };
        assert_eq!((c.seq, c.truncated_to), (9, Some(40_000)));
        std::fs::remove_file(&path).expect("rm");
        assert!(matches!(
            check_file(&root, &path, &anchors),
            Verdict::Unreadable(_)
        ));
    }
}
