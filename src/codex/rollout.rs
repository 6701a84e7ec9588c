//! Codex's rollout file (`transcript_path`: `$CODEX_HOME/sessions/YYYY/MM/DD/
//! rollout-…-<id>.jsonl`), read the careful way: the recorder runs inside a
//! hook that Codex waits for, the path is the payload's (the agent's word),
//! and the file sits where the agent's own commands may be able to write.
//!
//! - The path is taken only where Codex's layout puts a rollout of the
//!   payload's own session, below Codex's home
//!   ([`crate::transcript::codex_layout::locate`]): no other file of the
//!   user's is opened.
//! - It is opened as every transcript is ([`crate::safe_file::open_beneath`]):
//!   no symbolic link followed in any component, non-blocking (a FIFO in its
//!   place stalls nothing), a regular file with one name only.
//! - Reads are bounded: the first line up to [`HEAD_LIMIT`] bytes, and from the
//!   end back at most [`TAIL_LIMIT`] bytes, in 64 KiB steps, so the cost does
//!   not grow with the session.
//!
//! The parsing of a line ([`session_meta`], [`completed_item`]) is pure and
//! tested on its own. The same file is anchored in the chain by
//! [`crate::transcript::anchor`].

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::hook::{AgentInfo, Outcome};
use crate::safe_file::{self, OpenError};
use crate::transcript::codex_layout;

/// The first line (the session's metadata) is read up to this many bytes.
pub const HEAD_LIMIT: u64 = 1 << 20;

/// At most this many bytes are read back from the end looking for a call's
/// completed item.
pub const TAIL_LIMIT: u64 = 16 << 20;

/// Bytes read per step.
const STEP: u64 = 64 * 1024;

/// Codex's home as the environment names it ([`codex_layout::codex_home`]
/// of `$CODEX_HOME` and the home, [`crate::run_dir::env_or_account_home`]),
/// every link in it resolved once, here, so that no link on the way to a
/// rollout is followed later. Here, with the rollout, so that the recorder
/// and the anchoring both find it below them.
pub fn codex_home_from_env() -> Option<PathBuf> {
    codex_layout::codex_home(
        std::env::var_os("CODEX_HOME").as_deref(),
        crate::run_dir::env_or_account_home().as_deref(),
    )
    .map(|d| safe_file::real_dir(&d))
}

/// Why the rollout could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    #[error(
        "cannot tell where Codex keeps its rollouts: CODEX_HOME and HOME are not absolute paths, and the account has no home"
    )]
    NoHome,
    #[error(
        "{named}: not where Codex keeps this session's rollout ({expected}); nd7 opens no other file"
    )]
    Misplaced { named: String, expected: String },
    #[error(transparent)]
    Open(#[from] OpenError),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: the first line is longer than {HEAD_LIMIT} bytes", .0.display())]
    HeadTooLong(PathBuf),
}

/// An open rollout file: a regular file with one name, where Codex's layout
/// puts the session's rollout, reached through no link.
#[derive(Debug)]
pub struct Rollout {
    file: File,
    len: u64,
    path: PathBuf,
}

impl Rollout {
    /// Opens session `session_id`'s rollout below Codex's home `home`,
    /// where `named` (the payload's `transcript_path`) says it is: refused
    /// unless the layout puts one of this session's rollouts there, and
    /// opened as [`safe_file::open_beneath`] opens a file.
    pub fn open(home: &Path, session_id: &str, named: &str) -> Result<Rollout, RolloutError> {
        let (place, mismatch) = codex_layout::locate(home, session_id, Some(named));
        let Some(place) = place else {
            return Err(RolloutError::Misplaced {
                named: named.to_string(),
                expected: mismatch.map(|m| m.expected).unwrap_or_default(),
            });
        };
        let opened = safe_file::open_beneath(home, &place.components)?;
        Ok(Rollout {
            file: opened.file,
            len: opened.len,
            path: place.under(home),
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

    const SID: &str = "01a22ef1-63ed-77e0-99ae-cbf4bcd01d2c";
    const DAY: &str = "sessions/2026/12/01";

    fn rollout_name() -> String {
        format!("rollout-2026-12-01T00-11-41-{SID}.jsonl")
    }

    /// A Codex home holding this session's rollout, and the rollout's path.
    fn home_with(text: &[u8]) -> (tempfile::TempDir, PathBuf, String) {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = safe_file::real_dir(dir.path());
        std::fs::create_dir_all(home.join(DAY)).expect("mkdir");
        let path = home.join(DAY).join(rollout_name());
        std::fs::File::create(&path)
            .and_then(|mut f| f.write_all(text))
            .expect("write");
        let named = path.to_string_lossy().into_owned();
        (dir, home, named)
    }

    fn rollout_with(text: &[u8]) -> (tempfile::TempDir, Rollout) {
        let (dir, home, named) = home_with(text);
        let r = Rollout::open(&home, SID, &named).expect("open");
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

    /// The attacks a forged `transcript_path` or a rewritten Codex home
    /// can make on the read, each refused: guards the layout check in
    /// [`Rollout::open`] and `O_NOFOLLOW`, the type and the link-count checks
    /// of [`safe_file::open_beneath`].
    #[test]
    fn misplaced_files_links_fifos_and_second_names_are_refused() {
        let (_d, home, named) = home_with(b"x\n");
        assert!(Rollout::open(&home, SID, &named).is_ok());
        let open = |named: &Path| Rollout::open(&home, SID, &named.to_string_lossy());
        // A file outside the sessions directory, however it is named.
        let secret = home.join("auth.json");
        std::fs::write(&secret, "{}\n").expect("write");
        assert!(matches!(open(&secret), Err(RolloutError::Misplaced { .. })));
        let other = home
            .join(DAY)
            .join(rollout_name().replace("01a22ef1", "01a22ef2"));
        std::fs::write(&other, "x\n").expect("write");
        assert!(matches!(open(&other), Err(RolloutError::Misplaced { .. })));
        assert!(matches!(
            open(Path::new("rel/r.jsonl")),
            Err(RolloutError::Misplaced { .. })
        ));
        let day = home.join(DAY);
        let reason = |r: Result<Rollout, RolloutError>| match r {
            Err(RolloutError::Open(e)) => e.reason(),
            other => panic!("{other:?}"),
        };
        // The rollout replaced by a link, a FIFO, a second name.
        let path = day.join(rollout_name());
        std::fs::remove_file(&path).expect("rm");
        std::os::unix::fs::symlink(&secret, &path).expect("symlink");
        assert_eq!(reason(open(&path)), "symbolic link");
        std::fs::remove_file(&path).expect("rm");
        let made = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .expect("run mkfifo");
        assert!(made.success());
        assert_eq!(reason(open(&path)), "not a regular file");
        std::fs::remove_file(&path).expect("rm");
        std::fs::hard_link(&secret, &path).expect("link");
        assert_eq!(reason(open(&path)), "hard link");
        // A link among the directories.
        std::fs::remove_file(&path).expect("rm");
        std::fs::write(home.join("elsewhere.jsonl"), "x\n").expect("write");
        let real_day = home.join("real-day");
        std::fs::create_dir(&real_day).expect("mkdir");
        std::fs::write(real_day.join(rollout_name()), "x\n").expect("write");
        std::fs::remove_dir_all(&day).expect("rmdir");
        std::os::unix::fs::symlink(&real_day, &day).expect("symlink");
        assert_eq!(reason(open(&path)), "symbolic link");
    }

    /// The committed Codex vector (tests/vectors/codex): Codex 0.171.0's
    /// payloads of one session, with what its rollout (the fixture's) tells
    /// `nd7 record --agent codex`, rendered again byte for byte. Fails when
    /// a Codex entry's kind, body or derived members change
    /// (`codex::hook::event`), or the envelope does.
    #[test]
    fn the_committed_codex_vector_renders_byte_for_byte() {
        use crate::chain::{Hash, render_chain};
        use crate::codex::hook::{Facts, Outcome};
        use crate::codex::rollout::{self, Seen};
        use crate::hook::Payload;
        const SESSION: &str = "01a22ef1-63ed-77e0-99ae-cbf4bcd01d2c";
        let payloads = include_str!("../../tests/vectors/codex/payloads.ndjson");
        let rollout_lines: Vec<&str> =
            include_str!("../../tests/fixtures/codex-0.171.0/rollout.jsonl")
                .lines()
                .collect();
        let log: &[u8] = include_bytes!(
            "../../tests/vectors/codex/01a22ef1-63ed-77e0-99ae-cbf4bcd01d2c/events.ndjson"
        );
        // What `codex::facts` reads from the rollout, from its lines here.
        let outcome = |call: &str| {
            for line in rollout_lines.iter().rev() {
                match rollout::completed_item(line.as_bytes(), call) {
                    Seen::Completed(o) => return o,
                    Seen::Call => break,
                    Seen::Nothing => {}
                }
            }
            Outcome::Unknown(rollout::NO_COMPLETED_ITEM.into())
        };
        let events: Vec<_> = payloads
            .lines()
            .enumerate()
            .map(|(i, text)| {
                let payload = Payload::parse(text.as_bytes()).expect("a fixture payload");
                let event = payload.str_member("hook_event_name").unwrap_or("");
                let mut facts = Facts::default();
                if i == 0 || event == "SessionStart" {
                    facts.agent = Some(rollout::session_meta(rollout_lines[0].as_bytes(), SESSION));
                }
                if event == "PostToolUse" {
                    let call = payload.str_member("tool_use_id").expect("a call id");
                    facts.outcome = Some(outcome(call));
                }
                crate::codex::hook::event(
                    &crate::hook::Invocation {
                        ts: 1_796_000_000_000_000_000 + i as u64 * 1_000_000_000,
                        host: "vm".into(),
                        hook_ppid: Some(3327),
                        cwd: Some("/home/dev/proj".into()),
                    },
                    payload,
                    facts,
                )
            })
            .collect();
        assert_eq!(
            Hash::session_fingerprint(SESSION).to_hex(),
            "0c3f7d0355077c7b8d318112d64dbf9544bab4d1d31fe8f6c9f33f22709bc500"
        );
        assert_eq!(
            String::from_utf8_lossy(&render_chain(SESSION, &events)),
            String::from_utf8_lossy(log)
        );
    }
}
