//! The per-session summaries `nd7 sessions` lists, kept so that listing
//! years of sessions reads no log: `$XDG_STATE_HOME/nd7/index/summaries.ndjson`,
//! one JSON object per session, rewritten whole (to a temporary file, then
//! renamed) when something changed. 0600: summaries quote first prompts.
//!
//! It is a cache and never outranks the log. Each record holds the file
//! facts of `events.ndjson` and `head` it was built from (inode, size,
//! modification and change times); on every use those are compared with the
//! files as they are now. Equal: the record stands. The log grew and the
//! bytes just before where the record stopped are still the line it last
//! read (checked by its BLAKE3): only the new lines are read. Anything else:
//! the summary is rebuilt from the whole log. A chain verdict (from
//! `nd7 verify`, `nd7 show` or `nd7 sessions --verify`) counts only while
//! both files are exactly as they were when it was reached; otherwise the
//! chain is "not checked". The index lives outside `sessions/`, so the floor
//! of `nd7 run` (which lets the agent write only the logs) keeps the agent
//! from writing it; a reader that cannot write it still works, slower.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::entry::Entry;
use super::report::Chain;
use super::summary::{self, Summary};
use crate::session_log::SessionLog;

pub const INDEX_DIR: &str = "index";
pub const INDEX_FILE: &str = "summaries.ndjson";
/// How much of a transcript is read to find the agent's version.
const TRANSCRIPT_PEEK: u64 = 256 * 1024;

/// What identifies a file's contents without reading them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileKey {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime: (i64, i64),
    pub ctime: (i64, i64),
}

impl FileKey {
    fn of(meta: &fs::Metadata) -> FileKey {
        FileKey {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// The facts of `path` now; `None` when it does not exist.
    pub fn at(path: &Path) -> io::Result<Option<FileKey>> {
        match fs::metadata(path) {
            Ok(m) => Ok(Some(FileKey::of(&m))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// Both files a verdict depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogKeys {
    pub events: Option<FileKey>,
    pub head: Option<FileKey>,
}

impl LogKeys {
    pub fn of(log: &SessionLog) -> io::Result<LogKeys> {
        Ok(LogKeys {
            events: FileKey::at(&log.events_path())?,
            head: FileKey::at(&log.head_path())?,
        })
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Verdict {
    keys: LogKeys,
    /// Clean or broken: the others are not stored.
    chain: Chain,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Record {
    session: String,
    /// The log's facts when the summary was last brought up to date.
    events: Option<FileKey>,
    /// Where reading stopped: just past the last complete line read.
    offset: u64,
    /// That line's length and BLAKE3, to check it is still there.
    last_line: Option<(u64, String)>,
    lines: u64,
    summary: Summary,
    version_checked: bool,
    verdict: Option<Verdict>,
}

/// The summaries of one state directory.
pub struct Index {
    path: Option<PathBuf>,
    records: HashMap<String, Record>,
    dirty: bool,
}

impl Index {
    /// Loads the index under `state`; a missing or damaged index is empty
    /// (damaged lines are dropped, and rebuilt from the logs).
    pub fn load(state: &Path) -> Index {
        let path = state.join(INDEX_DIR).join(INDEX_FILE);
        let mut records = HashMap::new();
        if let Ok(text) = fs::read(&path) {
            for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                if let Ok(r) = serde_json::from_slice::<Record>(line) {
                    records.insert(r.session.clone(), r);
                }
            }
        }
        Index {
            path: Some(path),
            records,
            dirty: false,
        }
    }

    /// An index kept in memory only, for logs outside the state directory.
    pub fn in_memory() -> Index {
        Index {
            path: None,
            records: HashMap::new(),
            dirty: false,
        }
    }

    /// Brings the summary of `log` up to date and says what is known of its
    /// chain.
    pub fn refresh(&mut self, log: &SessionLog) -> Result<(Summary, Chain), super::ReadError> {
        let id = log.session_id().to_string();
        let record = self
            .records
            .remove(&id)
            .unwrap_or_else(|| Record::empty(&id));
        let (record, result) = refresh_record(record, log);
        self.records.insert(id, record);
        result.map(|(summary, chain, changed)| {
            self.dirty |= changed;
            (summary, chain)
        })
    }

    /// [`Index::refresh`] for many logs, on up to `threads` threads.
    pub fn refresh_all(
        &mut self,
        logs: &[SessionLog],
        threads: usize,
    ) -> Vec<Result<(Summary, Chain), super::ReadError>> {
        let records: Vec<std::sync::Mutex<Option<Record>>> = logs
            .iter()
            .map(|l| {
                let id = l.session_id();
                let r = self.records.remove(id).unwrap_or_else(|| Record::empty(id));
                std::sync::Mutex::new(Some(r))
            })
            .collect();
        let done = super::scan::in_parallel(logs, threads, |i, log| {
            let record = records[i]
                .lock()
                .ok()
                .and_then(|mut r| r.take())
                .unwrap_or_else(|| Record::empty(log.session_id()));
            refresh_record(record, log)
        });
        done.into_iter()
            .map(|(record, result)| {
                self.records.insert(record.session.clone(), record);
                result.map(|(summary, chain, changed)| {
                    self.dirty |= changed;
                    (summary, chain)
                })
            })
            .collect()
    }

    /// Remembers a verdict reached while the log's files were as `keys`
    /// says (taken before verifying; nothing is kept if they changed since).
    pub fn remember(&mut self, log: &SessionLog, keys: LogKeys, chain: &Chain) {
        if LogKeys::of(log).ok() != Some(keys) {
            return;
        }
        if matches!(chain, Chain::NotChecked | Chain::Unreadable { .. }) {
            return;
        }
        let stored = chain.clone();
        let id = log.session_id().to_string();
        let record = self
            .records
            .entry(id.clone())
            .or_insert_with(|| Record::empty(&id));
        record.verdict = Some(Verdict {
            keys,
            chain: stored,
        });
        self.dirty = true;
    }

    /// Drops records of sessions no longer in `ids`.
    pub fn retain(&mut self, ids: &[String]) {
        let keep: std::collections::HashSet<&str> = ids.iter().map(String::as_str).collect();
        let before = self.records.len();
        self.records.retain(|k, _| keep.contains(k.as_str()));
        self.dirty |= self.records.len() != before;
    }

    /// Writes the index if anything changed. Best effort: a reader that
    /// cannot write it (inside the floor, a read-only state directory)
    /// simply rebuilds next time; the returned error says why.
    pub fn save(&mut self) -> io::Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        if !self.dirty {
            return Ok(());
        }
        let dir = path.parent().unwrap_or(Path::new("."));
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        let mut ids: Vec<&String> = self.records.keys().collect();
        ids.sort();
        let mut text = Vec::with_capacity(ids.len() * 512);
        for id in ids {
            serde_json::to_writer(&mut text, &self.records[id]).map_err(io::Error::other)?;
            text.push(b'\n');
        }
        // A cache: atomic, never synced (the next reader rebuilds what a
        // power loss took).
        let written = crate::files::replace(path, &text, 0o600, crate::files::Durability::Atomic)
            .map_err(|e| io::Error::new(e.source.kind(), e.to_string()));
        self.dirty = false;
        written
    }
}

type RefreshResult = Result<(Summary, Chain, bool), super::ReadError>;

/// Brings one record up to date: the summary, the version, and the chain's
/// state as far as a stored verdict still holds. Says whether it changed.
fn refresh_record(mut record: Record, log: &SessionLog) -> (Record, RefreshResult) {
    let keys = match LogKeys::of(log) {
        Ok(k) => k,
        Err(e) => return (record, Err(super::io_err(log.dir(), "stat")(e))),
    };
    let before = record.events;
    let mut changed = false;
    if record.events != keys.events
        && let Err(e) = update(&mut record, log, keys.events)
    {
        return (record, Err(e));
    }
    if !record.version_checked {
        record.version_checked = true;
        if let Some(version) = record
            .summary
            .transcript
            .as_deref()
            .and_then(|t| peek_version(Path::new(t)))
        {
            record.summary.version = Some(version);
        }
        changed = true;
    }
    changed |= before != record.events;
    let chain = match &record.verdict {
        Some(v) if v.keys == keys => v.chain.clone(),
        _ => Chain::NotChecked,
    };
    let summary = record.summary.clone();
    (record, Ok((summary, chain, changed)))
}

impl Record {
    fn empty(id: &str) -> Record {
        Record {
            session: id.to_string(),
            events: None,
            offset: 0,
            last_line: None,
            lines: 0,
            summary: Summary::default(),
            version_checked: false,
            verdict: None,
        }
    }
}

/// Reads what is new in the log into `record`, or all of it when the log
/// is not the one the record was built from.
fn update(
    record: &mut Record,
    log: &SessionLog,
    now: Option<FileKey>,
) -> Result<(), super::ReadError> {
    let path = log.events_path();
    let Some(now) = now else {
        *record = Record {
            verdict: record.verdict.take(),
            ..Record::empty(&record.session)
        };
        return Ok(());
    };
    let file = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            *record = Record {
                verdict: record.verdict.take(),
                ..Record::empty(&record.session)
            };
            return Ok(());
        }
        Err(e) => return Err(super::io_err(&path, "open")(e)),
    };
    let appended = record.events.is_some_and(|then| {
        then.dev == now.dev && then.ino == now.ino && now.size >= record.offset
    }) && still_there(&file, record.offset, record.last_line.as_ref());
    if !appended {
        *record = Record {
            verdict: record.verdict.take(),
            ..Record::empty(&record.session)
        };
    }
    let tail = super::scan::whole_lines(&file, &path, record.offset, |block| {
        let mut start = 0;
        for nl in memchr::memchr_iter(b'\n', block) {
            record.lines += 1;
            match Entry::parse(&block[start..nl], record.lines) {
                Ok(e) => record.summary.feed(&e),
                Err(_) => record.summary.feed_unreadable(),
            }
            record.last_line = Some((
                (nl + 1 - start) as u64,
                blake3::hash(&block[start..=nl]).to_hex().to_string(),
            ));
            start = nl + 1;
        }
        true
    })?;
    record.offset = tail.map_or(record.offset, |t| t.end);
    record.events = Some(now);
    // A transcript may name the version only once the session is under way.
    if record.summary.version.is_none() {
        record.version_checked = false;
    }
    Ok(())
}

/// Whether the line that ended at `offset` is still the one read then.
fn still_there(file: &File, offset: u64, last: Option<&(u64, String)>) -> bool {
    let Some((len, hash)) = last else {
        return offset == 0;
    };
    let Some(from) = offset.checked_sub(*len) else {
        return false;
    };
    let mut line = vec![0u8; *len as usize];
    file.read_exact_at(&mut line, from).is_ok() && blake3::hash(&line).to_hex().as_str() == hash
}

/// The agent's version from the start of its transcript, if it is a
/// regular file that can be read without waiting.
fn peek_version(path: &Path) -> Option<String> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut head = Vec::new();
    file.take(TRANSCRIPT_PEEK).read_to_end(&mut head).ok()?;
    summary::version_in_transcript(&head)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn line(seq: u64, kind: &str, ok: bool) -> String {
        format!(
            "{{\"seq\":{seq},\"ts\":{},\"cwd\":\"/p\",\"source\":\"intent:claude-code\",\"kind\":\"{kind}\",\"body\":{{\"ok\":{ok}}}}}\n",
            seq + 1
        )
    }

    #[test]
    fn a_grown_log_is_read_from_where_it_stopped_and_a_rewritten_one_from_the_start() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = SessionLog::new(dir.path(), "s").expect("log");
        fs::create_dir_all(log.dir()).expect("mkdir");
        let events = log.events_path();
        fs::write(
            &events,
            line(0, "tool_call", true) + &line(1, "tool_result", false),
        )
        .expect("write");
        let mut index = Index::in_memory();
        let (s, chain) = index.refresh(&log).expect("refresh");
        assert_eq!((s.entries, s.tool_calls, s.failures), (2, 1, 1));
        assert_eq!(chain, Chain::NotChecked);

        // Appended: only the new line is read (the old ones are not re-counted).
        let mut f = OpenOptions::new().append(true).open(&events).expect("open");
        f.write_all(line(2, "tool_call", true).as_bytes())
            .expect("append");
        drop(f);
        let (s, _) = index.refresh(&log).expect("refresh");
        assert_eq!((s.entries, s.tool_calls, s.failures), (3, 2, 1));
        assert_eq!(
            index.records["s"].offset,
            fs::metadata(&events).expect("stat").len()
        );

        // Rewritten in place with a longer file: the old last line is gone,
        // so everything is read again.
        fs::write(
            &events,
            line(0, "tool_call", true)
                + &line(1, "tool_result", true)
                + &line(2, "prompt", true)
                + &line(3, "tool_call", true),
        )
        .expect("rewrite");
        let (s, _) = index.refresh(&log).expect("refresh");
        assert_eq!((s.entries, s.tool_calls, s.failures), (4, 2, 0));
    }

    #[test]
    fn a_verdict_counts_only_while_the_files_are_unchanged() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = SessionLog::new(dir.path(), "s").expect("log");
        fs::create_dir_all(log.dir()).expect("mkdir");
        fs::write(log.events_path(), line(0, "prompt", true)).expect("write");
        let mut index = Index::in_memory();
        let keys = LogKeys::of(&log).expect("keys");
        let clean = Chain::Clean {
            entries: 1,
            head: None,
            note: None,
        };
        index.remember(&log, keys, &clean);
        assert_eq!(index.refresh(&log).expect("refresh").1, clean);
        fs::write(log.head_path(), "0 x\n").expect("head");
        assert_eq!(index.refresh(&log).expect("refresh").1, Chain::NotChecked);
    }

    #[test]
    fn the_index_survives_a_round_trip_and_damage() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = SessionLog::new(&dir.path().join("sessions"), "s").expect("log");
        fs::create_dir_all(log.dir()).expect("mkdir");
        fs::write(log.events_path(), line(0, "tool_call", true)).expect("write");
        let mut index = Index::load(dir.path());
        index.refresh(&log).expect("refresh");
        index.save().expect("save");
        let file = dir.path().join(INDEX_DIR).join(INDEX_FILE);
        assert_eq!(fs::metadata(&file).expect("stat").mode() & 0o777, 0o600);
        assert_eq!(Index::load(dir.path()).records.len(), 1);
        fs::write(&file, "{broken\n").expect("damage");
        let mut index = Index::load(dir.path());
        assert_eq!(index.refresh(&log).expect("refresh").0.tool_calls, 1);
    }
}
