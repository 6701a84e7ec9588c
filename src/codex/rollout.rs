//! Codex's rollout file (`transcript_path`: `$CODEX_HOME/sessions/YYYY/MM/DD/
//! rollout-…-<id>.jsonl`), read the careful way: the recorder runs inside a
//! hook that Codex waits for, and the file sits where the agent's own
//! commands may be able to write.
//!
//! - It is opened without following a symbolic link in any component (each
//!   directory is opened with `O_NOFOLLOW` from the one before), and
//!   non-blocking, so a link or a FIFO put in its place opens nothing and
//!   stalls nothing.
//! - Only a regular file is read.
//! - Reads are bounded: the first line up to [`HEAD_LIMIT`] bytes, and from the
//!   end back at most [`TAIL_LIMIT`] bytes, in 64 KiB steps, so the cost does
//!   not grow with the session.
//!
//! The parsing of a line ([`session_meta`], [`completed_item`]) is pure and
//! tested on its own. [`Rollout`] and [`Rollout::lines_from_end`] are the
//! seam for anchoring the rollout in the chain later.

use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags};
use serde_json::Value;

use super::hook::{AgentInfo, Outcome};

/// The first line (the session's metadata) is read up to this many bytes.
pub const HEAD_LIMIT: u64 = 1 << 20;

/// At most this many bytes are read back from the end looking for a call's
/// completed item.
pub const TAIL_LIMIT: u64 = 16 << 20;

/// Bytes read per step.
const STEP: u64 = 64 * 1024;

/// Why the rollout could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    #[error("{}: not an absolute path without `..`", .0.display())]
    NotAbsolute(PathBuf),
    #[error("{}: a symbolic link on the way; nd7 follows none", .0.display())]
    Link(PathBuf),
    #[error("{}: not a regular file", .0.display())]
    NotRegular(PathBuf),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: the first line is longer than {HEAD_LIMIT} bytes", .0.display())]
    HeadTooLong(PathBuf),
}

/// An open rollout file: a regular file reached through no link.
#[derive(Debug)]
pub struct Rollout {
    file: File,
    len: u64,
    path: PathBuf,
}

impl Rollout {
    /// Opens `path` for reading, following no symbolic link and refusing
    /// anything but a regular file.
    pub fn open(path: &Path) -> Result<Rollout, RolloutError> {
        let file = open_nofollow(path)?;
        let meta = file.metadata().map_err(|source| RolloutError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        if !meta.file_type().is_file() {
            return Err(RolloutError::NotRegular(path.to_path_buf()));
        }
        Ok(Rollout {
            file,
            len: meta.len(),
            path: path.to_path_buf(),
        })
    }

    /// The file's length when it was opened; nothing after it is read.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), RolloutError> {
        self.file
            .read_exact_at(buf, offset)
            .map_err(|source| RolloutError::Io {
                path: self.path.clone(),
                source,
            })
    }

    /// The first line, without its newline, if it ends within
    /// [`HEAD_LIMIT`] bytes.
    pub fn first_line(&self) -> Result<Vec<u8>, RolloutError> {
        let mut line = Vec::new();
        let mut offset = 0;
        while offset < self.len.min(HEAD_LIMIT) {
            let n = STEP.min(self.len - offset).min(HEAD_LIMIT - offset);
            let mut chunk = vec![0; n as usize];
            self.read_at(&mut chunk, offset)?;
            if let Some(i) = memchr::memchr(b'\n', &chunk) {
                line.extend_from_slice(&chunk[..i]);
                return Ok(line);
            }
            line.extend_from_slice(&chunk);
            offset += n;
        }
        Err(RolloutError::HeadTooLong(self.path.clone()))
    }

    /// The complete lines, last first, without their newlines, reading back
    /// at most `budget` bytes. A last line with no newline yet (still being
    /// written) is skipped.
    pub fn lines_from_end(&self, budget: u64) -> TailLines<'_> {
        TailLines {
            rollout: self,
            block: Vec::new(),
            block_start: self.len,
            idx: 0,
            carry: Vec::new(),
            read: 0,
            budget,
            skip_partial: true,
            exhausted: false,
            done: false,
        }
    }
}

/// Lines of a [`Rollout`] from its end; see [`Rollout::lines_from_end`].
pub struct TailLines<'a> {
    rollout: &'a Rollout,
    /// The block being consumed; `block[..idx]` is not yet consumed.
    block: Vec<u8>,
    block_start: u64,
    idx: usize,
    /// Pieces of the current line from later blocks, last piece first.
    carry: Vec<Vec<u8>>,
    read: u64,
    budget: u64,
    skip_partial: bool,
    exhausted: bool,
    /// The first line of the file has been given.
    done: bool,
}

impl TailLines<'_> {
    /// Whether the budget ran out before the start of the file.
    pub fn exhausted(&self) -> bool {
        self.exhausted
    }

    fn take_line(&mut self, piece_start: usize) -> Vec<u8> {
        let mut line = self.block[piece_start..self.idx].to_vec();
        for piece in self.carry.drain(..).rev() {
            line.extend_from_slice(&piece);
        }
        line
    }
}

impl Iterator for TailLines<'_> {
    type Item = Result<Vec<u8>, RolloutError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(i) = memchr::memrchr(b'\n', &self.block[..self.idx]) {
                let line = self.take_line(i + 1);
                self.idx = i;
                if std::mem::take(&mut self.skip_partial) {
                    continue;
                }
                return Some(Ok(line));
            }
            if self.block_start == 0 {
                // The file's first line: what is left, even if empty.
                if std::mem::replace(&mut self.done, true) {
                    return None;
                }
                let line = self.take_line(0);
                self.idx = 0;
                if std::mem::take(&mut self.skip_partial) {
                    return None;
                }
                return Some(Ok(line));
            }
            if self.read >= self.budget {
                self.exhausted = true;
                return None;
            }
            let rest = self.block[..self.idx].to_vec();
            if !rest.is_empty() {
                self.carry.push(rest);
            }
            let n = STEP.min(self.block_start).min(self.budget - self.read);
            self.block_start -= n;
            self.block = vec![0; n as usize];
            if let Err(e) = self.rollout.read_at(&mut self.block, self.block_start) {
                self.exhausted = true;
                self.done = true;
                self.block_start = 0;
                self.block.clear();
                self.idx = 0;
                self.carry.clear();
                return Some(Err(e));
            }
            self.idx = self.block.len();
            self.read += n;
        }
    }
}

/// Opens `path` read-only and non-blocking, each directory from `/` opened
/// with `O_NOFOLLOW` relative to the one before and the file itself with
/// `O_NOFOLLOW`: a link anywhere fails with `ELOOP` (or `ENOTDIR`).
fn open_nofollow(path: &Path) -> Result<File, RolloutError> {
    let not_absolute = || RolloutError::NotAbsolute(path.to_path_buf());
    let mut components = path.components();
    if components.next() != Some(Component::RootDir) {
        return Err(not_absolute());
    }
    let names: Vec<&OsStr> = components
        .map(|c| match c {
            Component::Normal(name) => Ok(name),
            _ => Err(not_absolute()),
        })
        .collect::<Result<_, _>>()?;
    let Some((last, dirs)) = names.split_last() else {
        return Err(RolloutError::NotRegular(path.to_path_buf()));
    };
    let fail = |e: rustix::io::Errno| match e {
        rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => {
            RolloutError::Link(path.to_path_buf())
        }
        other => RolloutError::Io {
            path: path.to_path_buf(),
            source: other.into(),
        },
    };
    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut dir = rustix::fs::open("/", dir_flags, Mode::empty()).map_err(fail)?;
    for name in dirs {
        dir = rustix::fs::openat(&dir, name.as_bytes(), dir_flags, Mode::empty()).map_err(fail)?;
    }
    let file_flags =
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(&dir, last.as_bytes(), file_flags, Mode::empty()).map_err(fail)?;
    Ok(File::from(fd))
}

/// What a rollout's first line says: the CLI's version and originator, if it
/// is the `session_meta` line of session `session_id`.
pub fn session_meta(line: &[u8], session_id: &str) -> AgentInfo {
    let unknown = |why: &str| AgentInfo {
        version: None,
        originator: None,
        why: Some(why.to_string()),
    };
    let Ok(value) = serde_json::from_slice::<Value>(line) else {
        return unknown("the rollout's first line is not JSON");
    };
    if value["type"] != "session_meta" {
        return unknown("the rollout's first line is not its session_meta");
    }
    let meta = &value["payload"];
    let id = meta["id"].as_str().or_else(|| meta["session_id"].as_str());
    if id != Some(session_id) {
        return unknown("the rollout belongs to another session");
    }
    let text = |v: &Value| v.as_str().map(|s| s.chars().take(128).collect::<String>());
    let version = text(&meta["cli_version"]);
    AgentInfo {
        why: version
            .is_none()
            .then(|| "the rollout's session_meta has no cli_version".to_string()),
        version,
        originator: text(&meta["originator"]),
    }
}

/// What a line tells about call `call_id`: its outcome if it is the call's
/// `item_completed` event, [`Seen::Call`] if it is the call itself (nothing
/// earlier can hold its completion), [`Seen::Nothing`] otherwise.
pub fn completed_item(line: &[u8], call_id: &str) -> Seen {
    // Cheap filter first: most lines do not name the call at all.
    let needle = serde_json::to_string(call_id).unwrap_or_default();
    if memchr::memmem::find(line, needle.as_bytes()).is_none() {
        return Seen::Nothing;
    }
    let Ok(value) = serde_json::from_slice::<Value>(line) else {
        return Seen::Nothing;
    };
    let payload = &value["payload"];
    match (value["type"].as_str(), payload["type"].as_str()) {
        (Some("event_msg"), Some("item_completed")) if payload["item"]["id"] == call_id => {
            let item = &payload["item"];
            match item["status"].as_str() {
                Some(status) => Seen::Completed(Outcome::Known {
                    status: status.chars().take(64).collect(),
                    exit_code: item["exit_code"].as_i64(),
                }),
                None => Seen::Completed(Outcome::Unknown(
                    "the call's completed item has no status".into(),
                )),
            }
        }
        (Some("response_item"), Some("function_call" | "custom_tool_call"))
            if payload["call_id"] == call_id =>
        {
            Seen::Call
        }
        _ => Seen::Nothing,
    }
}

/// What [`completed_item`] found on one line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seen {
    Completed(Outcome),
    Call,
    Nothing,
}

/// How call `call_id` ended, read from the end of `rollout` back to the
/// call itself or [`TAIL_LIMIT`] bytes. `None` when the rollout has no
/// completed item for the call yet: it may still be on its way.
pub fn outcome(rollout: &Rollout, call_id: &str) -> Option<Outcome> {
    let mut lines = rollout.lines_from_end(TAIL_LIMIT);
    for line in lines.by_ref() {
        match line.map(|l| completed_item(&l, call_id)) {
            Ok(Seen::Completed(outcome)) => return Some(outcome),
            Ok(Seen::Call) => return None,
            Ok(Seen::Nothing) => {}
            Err(e) => return Some(Outcome::Unknown(e.to_string())),
        }
    }
    if lines.exhausted() {
        Some(Outcome::Unknown(format!(
            "no completed item for this call in the rollout's last {TAIL_LIMIT} bytes"
        )))
    } else {
        None
    }
}

/// The reason given when the rollout has no completed item for a call.
pub const NO_COMPLETED_ITEM: &str = "the rollout has no completed item for this call";

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn rollout_with(text: &[u8]) -> (tempfile::TempDir, Rollout) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("r.jsonl");
        std::fs::File::create(&path)
            .and_then(|mut f| f.write_all(text))
            .expect("write");
        let r = Rollout::open(&path).expect("open");
        (dir, r)
    }

    fn lines(r: &Rollout, budget: u64) -> Vec<String> {
        r.lines_from_end(budget)
            .map(|l| String::from_utf8(l.expect("read")).expect("utf8"))
            .collect()
    }

    #[test]
    fn lines_come_last_first_and_a_partial_last_line_is_skipped() {
        let (_d, r) = rollout_with(b"one\ntwo\nthree\n");
        assert_eq!(lines(&r, TAIL_LIMIT), ["three", "two", "one"]);
        let (_d, r) = rollout_with(b"one\ntwo\nthree-being-writ");
        assert_eq!(lines(&r, TAIL_LIMIT), ["two", "one"]);
        let (_d, r) = rollout_with(b"");
        assert!(lines(&r, TAIL_LIMIT).is_empty());
        let (_d, r) = rollout_with(b"\n\nx\n");
        assert_eq!(lines(&r, TAIL_LIMIT), ["x", "", ""]);
    }

    #[test]
    fn lines_longer_than_a_step_are_joined_and_the_budget_holds() {
        let long = "a".repeat(3 * STEP as usize + 17);
        let text = format!("first\n{long}\nlast\n");
        let (_d, r) = rollout_with(text.as_bytes());
        assert_eq!(lines(&r, TAIL_LIMIT), ["last", long.as_str(), "first"]);
        let mut tail = r.lines_from_end(STEP);
        assert_eq!(
            tail.next().map(|l| l.expect("read")),
            Some(b"last".to_vec())
        );
        assert!(tail.next().is_none(), "the long line is beyond the budget");
        assert!(tail.exhausted());
    }

    #[test]
    fn the_first_line_is_bounded() {
        let (_d, r) = rollout_with(b"{\"type\":\"session_meta\"}\nrest\n");
        assert_eq!(
            r.first_line().expect("line"),
            b"{\"type\":\"session_meta\"}"
        );
        let (_d, r) = rollout_with(&vec![b'x'; HEAD_LIMIT as usize + 1]);
        assert!(matches!(r.first_line(), Err(RolloutError::HeadTooLong(_))));
    }

    #[test]
    fn session_meta_gives_the_version_of_its_own_session_only() {
        let line = br#"{"timestamp":"t","type":"session_meta","payload":{"id":"s1","originator":"codex_exec","cli_version":"0.171.0"}}"#;
        let info = session_meta(line, "s1");
        assert_eq!(info.version.as_deref(), Some("0.171.0"));
        assert_eq!(info.originator.as_deref(), Some("codex_exec"));
        assert_eq!(info.why, None);
        assert!(
            session_meta(line, "s2")
                .why
                .expect("why")
                .contains("another session")
        );
        assert!(session_meta(b"{", "s1").version.is_none());
        assert!(
            session_meta(br#"{"type":"event_msg"}"#, "s1")
                .version
                .is_none()
        );
    }

    #[test]
    fn completed_items_are_matched_by_call_id_exactly() {
        let failed = br#"{"type":"event_msg","payload":{"type":"item_completed","item":{"type":"CommandExecution","id":"call_1","status":"failed","exit_code":3}}}"#;
        assert_eq!(
            completed_item(failed, "call_1"),
            Seen::Completed(Outcome::Known {
                status: "failed".into(),
                exit_code: Some(3)
            })
        );
        assert_eq!(completed_item(failed, "call_"), Seen::Nothing);
        assert_eq!(completed_item(failed, "call_12"), Seen::Nothing);
        let output = br#"{"type":"response_item","payload":{"type":"function_call_output","call_id":"call_1","output":"Process exited with code 0"}}"#;
        assert_eq!(completed_item(output, "call_1"), Seen::Nothing);
        let call = br#"{"type":"response_item","payload":{"type":"function_call","name":"exec_command","call_id":"call_1"}}"#;
        assert_eq!(completed_item(call, "call_1"), Seen::Call);
    }

    #[test]
    fn outcome_reads_back_to_the_call_and_no_further() {
        let text = concat!(
            r#"{"type":"event_msg","payload":{"type":"item_completed","item":{"id":"c1","status":"completed","exit_code":0}}}"#,
            "\n",
            r#"{"type":"response_item","payload":{"type":"function_call","call_id":"c1"}}"#,
            "\n",
            r#"{"type":"response_item","payload":{"type":"function_call","call_id":"c2"}}"#,
            "\n",
            r#"{"type":"event_msg","payload":{"type":"item_completed","item":{"id":"c2","status":"failed","exit_code":3}}}"#,
            "\n",
        );
        let (_d, r) = rollout_with(text.as_bytes());
        assert_eq!(
            outcome(&r, "c2"),
            Some(Outcome::Known {
                status: "failed".into(),
                exit_code: Some(3)
            })
        );
        // c1's completion sits before its call here, so it is not taken.
        assert_eq!(outcome(&r, "c1"), None);
        assert_eq!(outcome(&r, "c3"), None);
    }

    #[test]
    fn links_fifos_and_relative_paths_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let real = dir.path().join("real.jsonl");
        std::fs::write(&real, "x\n").expect("write");
        let link = dir.path().join("link.jsonl");
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        assert!(matches!(Rollout::open(&link), Err(RolloutError::Link(_))));
        let linked_dir = dir.path().join("d");
        std::os::unix::fs::symlink(dir.path(), &linked_dir).expect("symlink");
        assert!(matches!(
            Rollout::open(&linked_dir.join("real.jsonl")),
            Err(RolloutError::Link(_))
        ));
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("run mkfifo");
        assert!(made.success());
        assert!(matches!(
            Rollout::open(&fifo),
            Err(RolloutError::NotRegular(_))
        ));
        assert!(matches!(
            Rollout::open(Path::new("rel/r.jsonl")),
            Err(RolloutError::NotAbsolute(_))
        ));
        assert!(matches!(
            Rollout::open(&dir.path().join("../x")),
            Err(RolloutError::NotAbsolute(_))
        ));
        assert!(Rollout::open(&real).is_ok());
    }
}
