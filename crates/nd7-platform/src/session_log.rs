//! The per-session log on disk: where it lives, the lock, `head`, append and
//! verify. The only module that knows where entries are stored; the format
//! itself is [`nd7_format::chain`]'s.
//!
//! ```text
//! $XDG_STATE_HOME/nd7/sessions/<session_id>/   (default ~/.local/state/nd7)
//!   events.ndjson   the log, one sealed entry per line, only ever appended to
//!   head            "<seq> <hash>\n" of the last entry: a cache, always checked
//!   head.tmp        the head before the last rewrite; nothing reads it
//!
//! $XDG_STATE_HOME/nd7/locks/                   (unreadable inside the floor)
//!   chain/<session_id>       empty; flock'd exclusively by writers, shared by readers
//!   transcript/<session_id>  empty; flock'd for one hook's anchoring
//! ```
//!
//! The locks live apart from the logs (ADR-0066): the logs are readable
//! inside `nd7 run`'s floor, and `flock` needs no more than a descriptor
//! open for reading, so a lock beside the log let the agent hold it and
//! stall every append. A reader that cannot open the lock (inside the
//! floor) reads without it, and takes a walk as its answer only when the
//! log and `head` were the same before and after it. A log kept anywhere
//! else (a copy, a pull) keeps its lock beside it, as `lock`.
//!
//! An append holds the exclusive lock across reading `head`, reading the last
//! line, writing the entry and rewriting `head`, so hooks running at once
//! queue rather than collide. The entry goes first, in one `write` on a file
//! opened for append; `head` follows, written into `head.tmp` and swapped with
//! `head` in one atomic rename (ADR-0011). A writer killed inside the
//! `write` leaves the start of a line, and one killed between the two leaves
//! `head` behind; the next append repairs both (ADR-0089). Directories are
//! made 0700 and files 0600: entries hold whatever the agent saw.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nd7_format::chain::{
    self, Broken, Cursor, Disagreement, Fault, Hash, Head, HeadState, Stated, Stretch, Walker,
};
use nd7_format::hook::Event;

pub const EVENTS_FILE: &str = "events.ndjson";
pub const HEAD_FILE: &str = "head";
pub const LOCK_FILE: &str = "lock";
/// The directory of the locks, beside `sessions` in nd7's state.
pub const LOCKS_DIR: &str = "locks";
const HEAD_TMP_FILE: &str = "head.tmp";

/// How much of the log's end an append reads at a time to find the last line.
const TAIL_CHUNK: u64 = 64 * 1024;
/// An append's first read of its log's end: enough for a typical last entry,
/// small enough that a hook does not fault in and zero a larger buffer it
/// does not need (bench/hookpath.sh); a longer line is read on in
/// [`TAIL_CHUNK`]s.
const FIRST_TAIL_CHUNK: u64 = 8 * 1024;
/// How much of the log `verify` reads at a time: small enough that a block
/// is still in cache when it is hashed.
const VERIFY_BLOCK: usize = 1024 * 1024;
/// Logs smaller than this are verified on one thread.
const PARALLEL_MIN_BYTES: u64 = 4 * 1024 * 1024;
/// How many walks a reader without the lock makes before it says the log
/// was being appended to throughout.
const LIVE_TRIES: usize = 50;

/// How long, in steps, a reader without the lock watches a log that walked
/// as broken before it believes the break (about 2 s in all).
const SETTLE_PAUSES_MS: [u64; 5] = [10, 40, 150, 400, 1400];

/// What an append changes, as a reader without the lock sees it: the log's
/// length and `head`'s bytes.
type Snapshot = (Option<u64>, Option<Vec<u8>>);

/// How a reader holds the chain still.
enum Reading {
    /// Under the shared lock, held until the read ends: appends wait.
    Locked(File),
    /// No lock: a copy, or a log no append has locked; read as it stands.
    Still,
    /// The lock is there but cannot be opened (inside the floor): appends
    /// may land while the log is read.
    Live,
}

/// Everything that can go wrong reading or writing a session log.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid session id {id:?}: {why}")]
    InvalidSessionId { id: String, why: &'static str },
    #[error("cannot find the state directory: set XDG_STATE_HOME or HOME to an absolute path")]
    NoStateDir,
    #[error("{}: cannot {action}: {source}", path.display())]
    Io {
        path: PathBuf,
        action: &'static str,
        source: io::Error,
    },
    #[error("{}: refusing to append: {disagreement}", path.display())]
    Disagrees {
        path: PathBuf,
        disagreement: Disagreement,
    },
    /// More of the log's end than any entry holds has no newline: not what
    /// an append cut short leaves.
    #[error(
        "{}: refusing to append: no newline in its last {bytes} bytes (from byte {from}), more than any entry can be",
        path.display()
    )]
    NoNewline {
        path: PathBuf,
        from: u64,
        bytes: u64,
    },
    /// The log ends in part of a line, which only an append cut short
    /// leaves, but what comes before it is not what such an append leaves.
    #[error(
        "{}: refusing to append: the last line (at byte {offset}) has no newline, and {disagreement}: not what an append cut short leaves",
        path.display()
    )]
    Unfinished {
        path: PathBuf,
        offset: u64,
        disagreement: Disagreement,
    },
    #[error("{}: refusing to append: head is not \"<seq> <hash>\\n\"", path.display())]
    HeadUnreadable { path: PathBuf },
    #[error("{}: refusing to append: the last line (at byte {offset}) {fault}", path.display())]
    LastLine {
        path: PathBuf,
        offset: u64,
        fault: Fault,
    },
    #[error("{}: refusing to append: entry {seq} would be {bytes} bytes, over the {limit}-byte limit", path.display())]
    TooLarge {
        path: PathBuf,
        seq: u64,
        bytes: usize,
        limit: usize,
    },
    /// The bound of [`SessionLog::waiting_at_most`] passed with the lock
    /// still taken; nothing was appended.
    #[error(
        "{}: nothing was appended: the chain's lock stayed taken for {secs} s (another nd7 process holds it, stopped or stuck)",
        path.display()
    )]
    Locked { path: PathBuf, secs: u64 },
}

crate::files::io_context_into!(Error);

/// Why a log did not verify.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// The log could not be read; nothing was checked.
    #[error(transparent)]
    Io(#[from] Error),
    #[error("{}: {broken}", path.display())]
    Broken { path: PathBuf, broken: Broken },
    #[error("{}: {disagreement}", path.display())]
    Head {
        path: PathBuf,
        disagreement: Disagreement,
    },
    #[error("{}: head is not \"<seq> <hash>\\n\"", path.display())]
    HeadUnreadable { path: PathBuf },
    /// Nothing is at the session's path: a mistyped id or path, or a
    /// session that was never recorded. Nothing was checked.
    #[error("{}: no such session: the directory does not exist", path.display())]
    NoSession { path: PathBuf },
    /// Something is at the path, but not a session nd7 wrote. Nothing was
    /// checked.
    #[error("{}: not a session: {why}", path.display())]
    NotASession { path: PathBuf, why: &'static str },
}

impl VerifyError {
    /// Whether nothing could be checked (the log could not be read, or there
    /// is no log), as opposed to a chain that was checked and is broken.
    pub fn is_unchecked(&self) -> bool {
        matches!(
            self,
            VerifyError::Io(_) | VerifyError::NoSession { .. } | VerifyError::NotASession { .. }
        )
    }
}

/// What a clean verify found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    pub entries: u64,
    /// The last entry's hash; `None` for an empty log.
    pub head: Option<Hash>,
    /// [`HeadState::Current`], or one of the states interrupted appends
    /// leave, which the next append repairs.
    pub head_state: HeadState,
}

/// What an append wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Appended {
    pub seq: u64,
    pub hash: Hash,
    /// The head state found and repaired before appending, if it needed it.
    pub repaired: Option<HeadState>,
    /// Bytes of an unfinished line an interrupted append left at the log's
    /// end, cut off before this append (0 when the log ended whole).
    pub cut: u64,
}

/// Wall-clock nanoseconds since the Unix epoch: the `ts` of every entry
/// nd7 writes. Here, below every writer (the recorder, the run's log, the
/// transcript's anchors), so that none reaches up into another for it.
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// `$XDG_STATE_HOME/nd7` if that is an absolute path, else `~/.local/state/nd7`.
pub fn state_dir() -> Result<PathBuf, Error> {
    crate::home::Base::State
        .resolve()
        .map(|state| state.join("nd7"))
        .ok_or(Error::NoStateDir)
}

/// Where the sessions live under a state directory.
pub fn sessions_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("sessions")
}

/// The two locks a log has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lock {
    /// Held by an append; shared by a reader of the whole chain.
    Chain,
    /// Held by one hook's anchoring of its transcripts.
    Transcript,
}

/// Where the lock `which` of the log in `dir` lies: for a log nd7 keeps
/// (`<state>/sessions/<id>`), in `<state>/locks/`, which the floor cannot
/// open; for a log anywhere else, in its own directory.
pub fn lock_place(dir: &Path, which: Lock) -> PathBuf {
    let kept = dir
        .parent()
        .filter(|p| p.file_name().is_some_and(|n| n == "sessions"))
        .and_then(Path::parent)
        .zip(dir.file_name());
    match (kept, which) {
        (Some((state, id)), Lock::Chain) => state.join(LOCKS_DIR).join("chain").join(id),
        (Some((state, id)), Lock::Transcript) => state.join(LOCKS_DIR).join("transcript").join(id),
        (None, Lock::Chain) => dir.join(LOCK_FILE),
        (None, Lock::Transcript) => dir.join("transcript").join(LOCK_FILE),
    }
}

/// Opens (creating, 0600, never through a link) the lock at `path`,
/// making its directory (0700) first.
pub fn open_lock(path: &Path) -> io::Result<File> {
    if let Some(parent) = path.parent() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)?;
    }
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
}

/// A session id names a directory, so it must be one path component
/// ([`nd7_format::chain::check_session_id`] says why not).
pub fn check_session_id(id: &str) -> Result<(), Error> {
    nd7_format::chain::check_session_id(id).map_err(|why| Error::InvalidSessionId {
        id: id.to_string(),
        why,
    })
}

/// One session's log.
#[derive(Clone, Debug)]
pub struct SessionLog {
    dir: PathBuf,
    session_id: String,
    /// How long an append waits for the chain's lock; `None`: as long as it
    /// takes (the holder is an append, which ends).
    lock_wait: Option<std::time::Duration>,
}

impl SessionLog {
    /// The log of `session_id` under `sessions_dir`. Touches nothing.
    pub fn new(sessions_dir: &Path, session_id: &str) -> Result<SessionLog, Error> {
        check_session_id(session_id)?;
        Ok(SessionLog {
            dir: sessions_dir.join(session_id),
            session_id: session_id.to_string(),
            lock_wait: None,
        })
    }

    /// This log, its appends waiting at most `wait` for the chain's lock and
    /// then failing with [`Error::Locked`]: for a writer whose fellow
    /// writers could be stopped while they hold it (on macOS the exit's
    /// writers are `nd7-exec` processes, not `nd7 run`, ADR-0075), so that
    /// one stopped holder costs the others an error, never a wait for good.
    pub fn waiting_at_most(mut self, wait: std::time::Duration) -> SessionLog {
        self.lock_wait = Some(wait);
        self
    }

    /// The log at `path`: a session directory, or the `events.ndjson` in one.
    /// The session id is the directory's name, so a log moved under another
    /// name fails verification at its first entry.
    pub fn at_path(path: &Path) -> Result<SessionLog, Error> {
        let dir = if path.file_name().is_some_and(|n| n == EVENTS_FILE) && !path.is_dir() {
            path.parent().unwrap_or(Path::new(".")).to_path_buf()
        } else {
            path.to_path_buf()
        };
        let absolute = std::path::absolute(&dir).map_err(io_err(&dir, "resolve"))?;
        let id = absolute
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or(Error::InvalidSessionId {
                id: absolute.display().to_string(),
                why: "the directory has no UTF-8 name",
            })?
            .to_string();
        check_session_id(&id)?;
        Ok(SessionLog {
            dir: absolute,
            session_id: id,
            lock_wait: None,
        })
    }

    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn events_path(&self) -> PathBuf {
        self.dir.join(EVENTS_FILE)
    }

    pub fn head_path(&self) -> PathBuf {
        self.dir.join(HEAD_FILE)
    }

    /// The chain's lock: writers take it exclusively, readers shared.
    pub fn lock_path(&self) -> PathBuf {
        lock_place(&self.dir, Lock::Chain)
    }

    /// Appends `event` as the chain's next entry. Creates the session's
    /// directory and files on first use. Writes nothing when head and log
    /// disagree in a way no interrupted append explains.
    pub fn append(&self, event: &Event) -> Result<Appended, Error> {
        let mut appended = self.append_all(std::slice::from_ref(event))?;
        appended.pop().ok_or_else(|| Error::Io {
            path: self.dir.clone(),
            action: "append",
            source: io::Error::other("no entry was appended"),
        })
    }

    /// Appends `events` as the chain's next entries, in order, under one
    /// lock, with one `write` and one `head` rewrite: a hook's entry and the
    /// entries nd7 writes about it (its transcript's anchors) cost one
    /// append. All or nothing: an entry over the size limit refuses the lot.
    pub fn append_all(&self, events: &[Event]) -> Result<Vec<Appended>, Error> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(io_err(&self.dir, "create the session directory"))?;
        self.check_dir()?;
        let lock_path = self.lock_path();
        let lock = open_lock(&lock_path).map_err(io_err(&lock_path, "open"))?;
        match self.lock_wait {
            None => lock
                .lock()
                .map_err(io_err(&lock_path, "lock (exclusive)"))?,
            Some(wait) => lock_within(&lock, &lock_path, wait)?,
        }

        let head_path = self.head_path();
        let head = match read_head(&head_path)? {
            HeadFile::Absent => None,
            HeadFile::Present(h) => Some(h),
            HeadFile::Unreadable => return Err(Error::HeadUnreadable { path: head_path }),
        };

        let events_path = self.events_path();
        let mut log = create_0600(&events_path, OpenOptions::new().read(true).append(true))?;
        let len = log.metadata().map_err(io_err(&events_path, "stat"))?.len();
        let Tail { end, last } = read_tail(&log, len, &events_path)?;

        let state = head_state(&log, end, head.as_ref(), last.as_ref(), &events_path)?;
        let repaired = match state {
            HeadState::Current => None,
            HeadState::Missing | HeadState::Behind { .. } => Some(state),
            HeadState::Disagrees(disagreement) if end < len => {
                return Err(Error::Unfinished {
                    path: events_path,
                    offset: end,
                    disagreement,
                });
            }
            HeadState::Disagrees(disagreement) => {
                return Err(Error::Disagrees {
                    path: self.dir.clone(),
                    disagreement,
                });
            }
        };
        let mut cursor = match last {
            Some(l) => Cursor {
                next_seq: l.seq + 1,
                prev: l.hash,
            },
            None => Cursor::start(&self.session_id),
        };
        let mut lines: Vec<u8> = Vec::new();
        let mut appended = Vec::with_capacity(events.len());
        for event in events {
            let line = chain::render_entry(event, &cursor);
            if line.len() > chain::MAX_ENTRY_BYTES {
                return Err(Error::TooLarge {
                    path: self.dir.clone(),
                    seq: cursor.next_seq,
                    bytes: line.len(),
                    limit: chain::MAX_ENTRY_BYTES,
                });
            }
            let stated = chain::read_stated(&line[..line.len() - 1])
                .expect("a freshly rendered entry reads back");
            cursor = Cursor {
                next_seq: stated.seq + 1,
                prev: stated.hash,
            };
            let first = appended.is_empty();
            appended.push(Appended {
                seq: stated.seq,
                hash: stated.hash,
                repaired: if first { repaired } else { None },
                cut: if first { len - end } else { 0 },
            });
            lines.extend_from_slice(&line);
        }
        let Some(last) = appended.last().copied() else {
            return Ok(appended);
        };

        // A writer killed inside its `write` (the kernel ends a write to a
        // file at a page when the writer has a fatal signal) leaves part of
        // a line, never sealed and never named by head: it was no entry, and
        // nothing after it could be one.
        if end < len {
            log.set_len(end).map_err(io_err(
                &events_path,
                "cut off the part of a line an interrupted append left",
            ))?;
        }
        if let Err(source) = log.write_all(&lines) {
            // Take back a partial line so the log stays a chain; we hold the
            // lock, so no reader has seen it.
            let _ = log.set_len(end);
            return Err(Error::Io {
                path: events_path,
                action: "append",
                source,
            });
        }
        drop(log);
        self.write_head(&Head {
            seq: last.seq,
            hash: last.hash,
        })?;
        Ok(appended)
    }

    /// Makes the directory of a new session, refusing one that already
    /// exists: a chain nd7 starts must hold nothing it did not write.
    pub fn create_new(sessions_dir: &Path, session_id: &str) -> Result<SessionLog, Error> {
        let log = SessionLog::new(sessions_dir, session_id)?;
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(sessions_dir)
            .map_err(io_err(sessions_dir, "create"))?;
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&log.dir)
            .map_err(io_err(&log.dir, "create the session directory"))?;
        Ok(log)
    }

    /// The session directory must be a directory, not a link to one: files
    /// are created in it by processes that may run outside any sandbox.
    fn check_dir(&self) -> Result<(), Error> {
        let meta = fs::symlink_metadata(&self.dir).map_err(io_err(&self.dir, "stat"))?;
        if meta.is_dir() {
            Ok(())
        } else {
            Err(Error::Io {
                path: self.dir.clone(),
                action: "use as the session directory",
                source: io::Error::other("it is a symbolic link or not a directory"),
            })
        }
    }

    /// The lines of the log in order (without their newline), read under the
    /// shared lock, until `f` returns `false`. For readers that need the
    /// entries' contents, such as a run's reconciliation; the chain itself
    /// is [`SessionLog::verify`]'s.
    /// Read without the lock (inside the floor), a line an append is still
    /// writing is not passed on.
    pub fn for_each_line(&self, mut f: impl FnMut(&[u8]) -> bool) -> Result<(), Error> {
        let reading = self.reading()?;
        let path = self.events_path();
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_err(&path, "open")(e)),
        };
        let mut reader = io::BufReader::with_capacity(VERIFY_BLOCK, file);
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = io::BufRead::read_until(&mut reader, b'\n', &mut line)
                .map_err(io_err(&path, "read"))?;
            if n == 0 {
                return Ok(());
            }
            if line.last() == Some(&b'\n') {
                line.pop();
            } else if matches!(reading, Reading::Live) {
                return Ok(());
            }
            if !f(&line) {
                return Ok(());
            }
        }
    }

    /// Rewrites `head` atomically: the new text goes into `head.tmp`, which
    /// is then swapped with `head` in one rename. Swapping (RENAME_EXCHANGE)
    /// rather than renaming over `head` frees no inode, and `head.tmp` is
    /// overwritten in place rather than truncated; on ext4 with online discard
    /// a rename over a file cost 1.6 ms against 20 µs for the swap
    /// (docs/benchmarks.md). After the swap `head.tmp` holds the old head,
    /// which nothing reads. Filesystems without the swap get a plain rename.
    fn write_head(&self, head: &Head) -> Result<(), Error> {
        let tmp = self.dir.join(HEAD_TMP_FILE);
        Ok(crate::files::swap_in(
            &self.head_path(),
            &tmp,
            head.render().as_bytes(),
        )?)
    }

    /// Walks the whole chain under a shared lock, then compares `head`.
    /// With `threads` > 1, a log of more than a few megabytes is split into
    /// that many stretches checked at once; the verdict is the same.
    pub fn verify(&self, threads: usize) -> Result<Verified, VerifyError> {
        self.verify_split(|size| {
            if size >= PARALLEL_MIN_BYTES {
                threads.max(1)
            } else {
                1
            }
        })
    }

    /// [`SessionLog::verify`] split into exactly `parts` stretches whatever
    /// the log's size (fewer if it has fewer lines). For tests of the split.
    pub fn verify_in(&self, parts: usize) -> Result<Verified, VerifyError> {
        self.verify_split(|_| parts.max(1))
    }

    /// Whether something at this session's path is a session to read: a
    /// directory holding its log or its `head` (a `head` without its log is
    /// a session whose entries are gone, which verification fails). What
    /// verify and the reading commands say of anything else.
    pub fn check_is_session(&self) -> Result<(), VerifyError> {
        self.check_directory()?;
        let head = self.head_path();
        if !self.events_path().is_file() && !fs::exists(&head).map_err(io_err(&head, "stat"))? {
            return Err(self.neither_log_nor_head());
        }
        Ok(())
    }

    fn check_directory(&self) -> Result<(), VerifyError> {
        match fs::metadata(&self.dir) {
            Ok(meta) if meta.is_dir() => Ok(()),
            Ok(_) => Err(VerifyError::NotASession {
                path: self.dir.clone(),
                why: "it is not a directory",
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(VerifyError::NoSession {
                path: self.dir.clone(),
            }),
            Err(e) => Err(io_err(&self.dir, "stat")(e).into()),
        }
    }

    fn neither_log_nor_head(&self) -> VerifyError {
        VerifyError::NotASession {
            path: self.dir.clone(),
            why: "it holds neither events.ndjson nor head",
        }
    }

    fn verify_split(&self, parts: impl Fn(u64) -> usize) -> Result<Verified, VerifyError> {
        self.check_directory()?;
        // A shared lock keeps writers out between reading the log and head.
        // Verify never creates anything, so a log without a lock file (a copy,
        // a read-only mount) is read unlocked.
        match self.reading()? {
            Reading::Locked(_lock) => self.walk(&parts),
            Reading::Still => self.walk(&parts),
            Reading::Live => self.walk_live(&parts),
        }
    }

    /// Walks a log that appends may land in during the walk: its answer
    /// stands only when nothing moved while it ran.
    fn walk_live(&self, parts: &impl Fn(u64) -> usize) -> Result<Verified, VerifyError> {
        for attempt in 0..LIVE_TRIES {
            let before = self.snapshot()?;
            let verdict = self.walk(parts);
            if self.snapshot()? == before && (verdict.is_ok() || self.settled(&before)?) {
                return verdict;
            }
            std::thread::sleep(std::time::Duration::from_millis(1 + attempt as u64));
        }
        Err(Error::Io {
            path: self.events_path(),
            action: "read: it was appended to during every one of the tries",
            source: io::Error::other(format!("{LIVE_TRIES} walks, each overtaken by an append")),
        }
        .into())
    }

    /// Whether a log that walked as broken stays as it was for a while. An
    /// append is two steps (the line, then `head`), and a writer the
    /// scheduler stops between them, or inside a line's write, leaves a state
    /// that walks as broken (a torn line, `head` one behind) while nothing
    /// moves. A writer that is running finishes well within this pause; one
    /// that does not has stopped, and the break is the log's.
    fn settled(&self, before: &Snapshot) -> Result<bool, Error> {
        for pause in SETTLE_PAUSES_MS {
            std::thread::sleep(std::time::Duration::from_millis(pause));
            if self.snapshot()? != *before {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// How this reader holds the chain still while it reads.
    fn reading(&self) -> Result<Reading, Error> {
        let path = self.lock_path();
        match File::open(&path) {
            Ok(lock) => {
                lock.lock_shared().map_err(io_err(&path, "lock (shared)"))?;
                Ok(Reading::Locked(lock))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Reading::Still),
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => Ok(Reading::Live),
            Err(e) => Err(io_err(&path, "open")(e)),
        }
    }

    /// What an append changes: the log's length and `head`'s bytes.
    fn snapshot(&self) -> Result<Snapshot, Error> {
        let events = self.events_path();
        let len = match fs::metadata(&events) {
            Ok(meta) => Some(meta.len()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(io_err(&events, "stat")(e)),
        };
        let head = self.head_path();
        let bytes = match fs::read(&head) {
            Ok(bytes) => Some(bytes),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(io_err(&head, "read")(e)),
        };
        Ok((len, bytes))
    }

    /// Walks the log as it stands and compares `head`.
    fn walk(&self, parts: &impl Fn(u64) -> usize) -> Result<Verified, VerifyError> {
        let events_path = self.events_path();
        let file = match File::open(&events_path) {
            Ok(f) => f,
            // Without a log, head decides: present, it names entries that
            // are gone (a failure); absent too, this is no session at all.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let head_path = self.head_path();
                if !fs::exists(&head_path).map_err(io_err(&head_path, "stat"))? {
                    return Err(self.neither_log_nor_head());
                }
                return self.finish_verify(None, None);
            }
            Err(e) => return Err(io_err(&events_path, "open")(e).into()),
        };
        let size = file.metadata().map_err(io_err(&events_path, "stat"))?.len();
        let cuts = file_cuts(&file, size, parts(size)).map_err(io_err(&events_path, "read"))?;
        let start = Cursor::start(&self.session_id);
        let stretches = chain::walk_stretches(cuts.len() - 1, start, |i, walker| {
            walk_range(&file, cuts[i], cuts[i + 1], walker)
        });
        let stretches = stretches
            .into_iter()
            .collect::<io::Result<Vec<_>>>()
            .map_err(io_err(&events_path, "read"))?;
        let end = chain::join(start, stretches).map_err(|broken| VerifyError::Broken {
            path: events_path.clone(),
            broken,
        })?;
        self.finish_verify(Some((&file, size)), end.last)
    }

    /// Compares `head` with the walked log (its file and length, when there
    /// is one) whose last entry is `last`.
    fn finish_verify(
        &self,
        log: Option<(&File, u64)>,
        last: Option<Stated>,
    ) -> Result<Verified, VerifyError> {
        let head_path = self.head_path();
        let head = match read_head(&head_path)? {
            HeadFile::Absent => None,
            HeadFile::Present(h) => Some(h),
            HeadFile::Unreadable => return Err(VerifyError::HeadUnreadable { path: head_path }),
        };
        let head_state = match log {
            Some((file, size)) => head_state(
                file,
                size,
                head.as_ref(),
                last.as_ref(),
                &self.events_path(),
            )?,
            None => chain::compare_head(head.as_ref(), last.as_ref()),
        };
        if let HeadState::Disagrees(disagreement) = head_state {
            return Err(VerifyError::Head {
                path: head_path,
                disagreement,
            });
        }
        Ok(Verified {
            entries: last.map_or(0, |l| l.seq + 1),
            head: last.map(|l| l.hash),
            head_state,
        })
    }
}

enum HeadFile {
    Absent,
    Present(Head),
    Unreadable,
}

/// Takes `lock` exclusively, trying until `wait` has passed.
fn lock_within(lock: &File, path: &Path, wait: std::time::Duration) -> Result<(), Error> {
    let deadline = std::time::Instant::now() + wait;
    loop {
        match lock.try_lock() {
            Ok(()) => return Ok(()),
            Err(fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            Err(fs::TryLockError::WouldBlock) => {
                return Err(Error::Locked {
                    path: path.to_path_buf(),
                    secs: wait.as_secs(),
                });
            }
            Err(fs::TryLockError::Error(e)) => {
                return Err(io_err(path, "lock (exclusive)")(e));
            }
        }
    }
}

fn read_head(path: &Path) -> Result<HeadFile, Error> {
    match fs::read(path) {
        Ok(text) => Ok(Head::parse(&text).map_or(HeadFile::Unreadable, HeadFile::Present)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(HeadFile::Absent),
        Err(e) => Err(io_err(path, "read")(e)),
    }
}

/// Opens (creating, 0600) a file of the session, never through a symbolic
/// link: an append may run outside the sandbox, in a directory whose
/// contents it did not make.
fn create_0600(path: &Path, options: &mut OpenOptions) -> Result<File, Error> {
    options
        .create(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .map_err(io_err(path, "open"))
}

/// The log's end as an append finds it.
struct Tail {
    /// Where the last whole line ends: the log's length, unless a writer
    /// died inside its `write` and left the start of a line after it.
    end: u64,
    /// The last whole line's entry, checked against its own bytes; its link
    /// to the entry before is verify's job.
    last: Option<Stated>,
}

/// Reads the log's end, in chunks, so the cost does not grow with the log.
/// The chunk that found the end is where the last line is looked for, so
/// an append reads its tail once (`nd7 record`'s cost, bench/hookpath.sh).
fn read_tail(log: &File, len: u64, path: &Path) -> Result<Tail, Error> {
    let (end, read) = whole_lines_end(log, len, path)?;
    let last = match LinesBack::holding(log, path, read).next()? {
        None => None,
        Some((offset, line)) => {
            Some(chain::read_checked(&line).map_err(|fault| Error::LastLine {
                path: path.to_path_buf(),
                offset,
                fault,
            })?)
        }
    };
    Ok(Tail { end, last })
}

/// The last newline in `bytes`, by `memchr`'s word-at-a-time search rather
/// than its vector one: on an append the newline lies within an entry of the
/// end, and the vector search's first call asks the CPU for its features,
/// which costs a hook more than the search (tens of microseconds in a
/// virtual machine, where each CPUID traps; bench/hookpath.sh).
fn last_newline(bytes: &[u8]) -> Option<usize> {
    memchr::arch::all::memchr::One::new(b'\n').rfind(bytes)
}

/// Where the log's last whole line ends: `len` when the log ends in a
/// newline, else just past its last newline (0 when it has none). What lies
/// beyond is part of one line, so no more than an entry's size of it is read.
/// Also the bytes read that end there: `(offset, bytes)`, the bytes from
/// `offset` up to that end (empty when there is no newline).
fn whole_lines_end(log: &File, len: u64, path: &Path) -> Result<(u64, (u64, Vec<u8>)), Error> {
    let mut chunk = vec![0u8; FIRST_TAIL_CHUNK.min(len) as usize];
    let mut start = len;
    // A first, small read; if it holds no newline (a long entry, or one a
    // writer left unfinished) the end is read again in `TAIL_CHUNK`s.
    let mut first = true;
    while start > 0 {
        let step = if first { FIRST_TAIL_CHUNK } else { TAIL_CHUNK };
        let from = start.saturating_sub(step);
        if chunk.len() < (start - from) as usize {
            chunk.resize((start - from) as usize, 0);
        }
        let part = &mut chunk[..(start - from) as usize];
        log.read_exact_at(part, from)
            .map_err(io_err(path, "read the last entry"))?;
        let found = last_newline(part).map(|nl| from + nl as u64 + 1);
        // No newline from here to the end. A line is at most MAX_ENTRY_BYTES
        // with its newline, so a writer cut short leaves less than that.
        let since = found.unwrap_or(from);
        if len - since >= chain::MAX_ENTRY_BYTES as u64 {
            return Err(Error::NoNewline {
                path: path.to_path_buf(),
                from: since,
                bytes: len - since,
            });
        }
        if let Some(end) = found {
            chunk.truncate((end - from) as usize);
            return Ok((end, (from, chunk)));
        }
        if !first {
            start = from;
        }
        first = false;
    }
    Ok((0, (0, Vec::new())))
}

struct LinesBack<'a> {
    log: &'a File,
    path: &'a Path,
    /// The file's bytes from `from` up to where the next line ends.
    buf: Vec<u8>,
    from: u64,
}

impl<'a> LinesBack<'a> {
    /// Lines ending at or before `end`: 0, or just past a newline.
    fn new(log: &'a File, end: u64, path: &'a Path) -> LinesBack<'a> {
        LinesBack {
            log,
            path,
            buf: Vec::new(),
            from: end,
        }
    }

    /// Lines back from the end of `read`, `(offset, bytes)`: bytes already
    /// read from `offset`, ending just past a newline (or empty).
    fn holding(log: &'a File, path: &'a Path, read: (u64, Vec<u8>)) -> LinesBack<'a> {
        let (from, buf) = read;
        LinesBack {
            log,
            path,
            buf,
            from,
        }
    }

    /// The next line back: where it starts and its bytes without the
    /// newline; `None` at the log's start. A line longer than any entry is
    /// an error ([`Error::LastLine`]).
    fn next(&mut self) -> Result<Option<(u64, Vec<u8>)>, Error> {
        loop {
            if let Some((&newline, body)) = self.buf.split_last() {
                debug_assert_eq!(newline, b'\n');
                let found = last_newline(body);
                if found.is_some() || self.from == 0 {
                    let begins = found.map_or(0, |nl| nl + 1);
                    let start = self.from + begins as u64;
                    if self.buf.len() - begins > chain::MAX_ENTRY_BYTES {
                        return Err(self.too_long(start));
                    }
                    let line = body[begins..].to_vec();
                    self.buf.truncate(begins);
                    return Ok(Some((start, line)));
                }
                if self.buf.len() > chain::MAX_ENTRY_BYTES {
                    return Err(self.too_long(self.from));
                }
            } else if self.from == 0 {
                return Ok(None);
            }
            let want = (self.buf.len() as u64).max(TAIL_CHUNK).min(self.from);
            let from = self.from - want;
            let mut chunk = vec![0u8; want as usize];
            self.log
                .read_exact_at(&mut chunk, from)
                .map_err(io_err(self.path, "read back from the end"))?;
            chunk.extend_from_slice(&self.buf);
            self.buf = chunk;
            self.from = from;
        }
    }

    /// A line longer than any entry can be, which starts at or before `at`.
    fn too_long(&self, at: u64) -> Error {
        Error::LastLine {
            path: self.path.to_path_buf(),
            offset: at,
            fault: Fault::Unsealed("the line is longer than any entry can be"),
        }
    }
}

/// How `head` stands against the log whose whole lines end at `end`, the
/// last of them `last`. A head more than one entry behind is one appends
/// left when the entries after it, followed down from the last one line at a
/// time, are sealed and each linked to the one before, the first to head;
/// anything else is [`Disagreement::Unlinked`], naming the entry where the
/// following stopped. It reads back as far as head (only a head set back by
/// hand puts that far), about the bytes it passes.
fn head_state(
    log: &File,
    end: u64,
    head: Option<&Head>,
    last: Option<&Stated>,
    path: &Path,
) -> Result<HeadState, Error> {
    let state = chain::compare_head(head, last);
    let (
        HeadState::Disagrees(Disagreement::HeadFarBehind { head_seq, last_seq }),
        Some(head),
        Some(last),
    ) = (state, head, last)
    else {
        return Ok(state);
    };
    let unlinked = |seq| {
        HeadState::Disagrees(Disagreement::Unlinked {
            head_seq,
            last_seq,
            seq,
        })
    };
    let mut lines = LinesBack::new(log, end, path);
    // The last line, which is `last`.
    match lines.next() {
        Ok(Some(_)) => {}
        Ok(None) | Err(Error::LastLine { .. }) => return Ok(unlinked(last_seq)),
        Err(e) => return Err(e),
    }
    let mut above = *last;
    loop {
        if above.seq == head_seq + 1 {
            return Ok(match chain::follows_head(&above, head) {
                true => HeadState::Behind {
                    entries: last_seq - head_seq,
                },
                false => unlinked(above.seq),
            });
        }
        // The line below `above` is entry `above.seq - 1` if it is sealed;
        // if it is not, that is where the chain breaks.
        let below = match lines.next() {
            Ok(Some((_, line))) => chain::read_checked(&line).ok(),
            Ok(None) | Err(Error::LastLine { .. }) => None,
            Err(e) => return Err(e),
        };
        match below {
            Some(below) if chain::links_down(&above, &below) => above = below,
            Some(_) => return Ok(unlinked(above.seq)),
            None => return Ok(unlinked(above.seq - 1)),
        }
    }
}

/// Offsets that split the file into `parts` stretches of whole lines
/// ([`chain::cut_points`]), reading a window at each split to find its newline.
fn file_cuts(file: &File, size: u64, parts: usize) -> io::Result<Vec<u64>> {
    let mut window = vec![0u8; TAIL_CHUNK as usize];
    chain::cut_points(size, parts, |mut at| {
        while at < size {
            let n = file.read_at(&mut window, at)?;
            if n == 0 {
                break;
            }
            if let Some(nl) = memchr::memchr(b'\n', &window[..n]) {
                return Ok(at + nl as u64 + 1);
            }
            at += n as u64;
        }
        Ok(size)
    })
}

/// Walks the lines in `start..end` of the file, reading a block at a time
/// into one buffer that is reused, so no byte is copied or zeroed twice.
fn walk_range(file: &File, start: u64, end: u64, mut walker: Walker) -> io::Result<Stretch> {
    let mut buf = vec![0u8; (2 * VERIFY_BLOCK).min((end - start) as usize + 1)];
    let mut held = 0; // bytes of an unfinished line at the front of buf
    let mut at = start;
    while at < end {
        if held == buf.len() {
            // One line longer than the buffer: make room for the rest of it.
            buf.resize(buf.len() * 2, 0);
        }
        let want = (buf.len() - held).min((end - at) as usize);
        let n = file.read_at(&mut buf[held..held + want], at)?;
        if n == 0 {
            break; // the file shrank under us; what was read is checked below
        }
        at += n as u64;
        let filled = held + n;
        let Some(nl) = memchr::memrchr(b'\n', &buf[..filled]) else {
            held = filled;
            continue;
        };
        if let Err(broken) = walker.feed(&buf[..=nl]) {
            return Ok(walker.finish(Some(broken)));
        }
        buf.copy_within(nl + 1..filled, 0);
        held = filled - (nl + 1);
    }
    // Whatever is left has no newline: the walker reports it as cut short.
    let failure = if held == 0 {
        None
    } else {
        walker.feed(&buf[..held]).err()
    };
    Ok(walker.finish(failure))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::value::RawValue;

    fn event(n: usize) -> Event {
        // Bodies of different lengths, some over a page, so that a walk can
        // meet an entry half written.
        let body = format!("{{\"n\":{n},\"pad\":\"{}\"}}", "x".repeat((n % 7) * 1500));
        Event {
            ts: n as u64,
            host: "h".into(),
            hook_ppid: None,
            cwd: None,
            session: "s".into(),
            tool_use_id: None,
            source: "intent:claude",
            kind: nd7_format::hook::Kind::Hook,
            body: RawValue::from_string(body).expect("json"),
        }
    }

    #[test]
    fn a_log_is_kept_with_its_locks_apart_and_a_copy_with_its_own() {
        let kept = Path::new("/s/nd7/sessions/abc");
        assert_eq!(
            lock_place(kept, Lock::Chain),
            Path::new("/s/nd7/locks/chain/abc")
        );
        assert_eq!(
            lock_place(kept, Lock::Transcript),
            Path::new("/s/nd7/locks/transcript/abc")
        );
        let copy = Path::new("/home/u/pulled/abc");
        assert_eq!(lock_place(copy, Lock::Chain), copy.join("lock"));
        assert_eq!(
            lock_place(copy, Lock::Transcript),
            copy.join("transcript/lock")
        );
    }

    #[test]
    fn a_bounded_writer_gives_up_on_a_held_lock_and_appends_nothing() {
        // The attack (issue 11, macOS): the agent stops an nd7-exec while it
        // holds the chain's lock, and every later append of the run waits for
        // good. Guards `lock_within`: with the bound ignored, this append
        // blocks on the held lock and the test never ends.
        let dir = tempfile::tempdir().expect("tempdir");
        let log = SessionLog::new(&dir.path().join("sessions"), "held")
            .expect("id")
            .waiting_at_most(std::time::Duration::from_millis(50));
        log.append(&event(0)).expect("first append");
        let holder = open_lock(&log.lock_path()).expect("open the lock");
        holder.lock().expect("hold it");
        match log.append(&event(1)) {
            Err(Error::Locked { path, .. }) => assert_eq!(path, log.lock_path()),
            other => panic!("{other:?}"),
        }
        drop(holder);
        assert_eq!(
            log.verify(1).expect("still a chain").entries,
            1,
            "nothing was appended"
        );
        assert_eq!(log.append(&event(1)).expect("lock free again").seq, 1);
    }

    #[test]
    fn the_floor_hides_the_locks_where_the_log_keeps_them() {
        let roots = nd7_format::policy::Roots {
            home: "/home/u".into(),
            state: "/home/u/.local/state/nd7".into(),
            project: "/home/u/p".into(),
            temp: "/tmp/x".into(),
            exit: "/usr/bin/nd7-exec".into(),
        };
        let policy = nd7_format::policy::Policy::new(roots);
        let log = SessionLog::new(&policy.logs_dir(), "abc").expect("id");
        let hidden = policy.unreadable();
        for lock in [log.lock_path(), lock_place(log.dir(), Lock::Transcript)] {
            assert!(
                hidden.iter().any(|h| lock.starts_with(h)),
                "{} is readable inside",
                lock.display()
            );
        }
    }

    /// A reader without the lock (inside the floor) walks while appends
    /// land: every answer it gives is a clean chain. Guards the before and
    /// after comparison in `walk_live`: with a single walk taken as the
    /// answer, a walk that meets an entry half written, or `head` moved
    /// past the log it read, reports a broken chain that is not.
    /// A writer stopped inside an append (the scheduler between the pages
    /// of a long line, a SIGSTOP) leaves a torn last line while nothing
    /// moves; a reader without the lock waits for the log to settle before
    /// it believes the break. Guards `settled` in `walk_live`: without it the
    /// reader reports the append in flight as a broken chain.
    #[test]
    fn a_reader_without_the_lock_waits_out_a_writer_stopped_mid_append() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = SessionLog::new(&dir.path().join("sessions"), "s").expect("id");
        for n in 0..3 {
            log.append(&event(n)).expect("append");
        }
        let head_before = fs::read(log.head_path()).expect("head");
        log.append(&event(6)).expect("append");
        let (events_after, head_after) = (
            fs::read(log.events_path()).expect("log"),
            fs::read(log.head_path()).expect("head"),
        );
        // Part of entry 3's line is in the log, and its head is not, yet.
        let torn = events_after[..events_after.len() - 4000].to_vec();
        fs::write(log.events_path(), &torn).expect("torn");
        fs::write(log.head_path(), &head_before).expect("head back");
        let finisher = {
            let (events, head) = (log.events_path(), log.head_path());
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(30));
                fs::write(events, events_after).expect("line on");
                fs::write(head, head_after).expect("head on");
            })
        };
        let verified = log
            .walk_live(&|_| 1)
            .expect("the append in flight is no break");
        finisher.join().expect("finisher");
        assert_eq!(verified.entries, 4);
        // A writer that never comes back leaves a break the reader reports.
        fs::write(log.events_path(), &torn).expect("torn");
        fs::write(log.head_path(), &head_before).expect("head back");
        assert!(
            log.walk_live(&|_| 1).is_err(),
            "a torn line left that way is a break"
        );
    }

    #[test]
    fn a_reader_without_the_lock_never_reports_an_append_in_flight_as_a_break() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let dir = tempfile::tempdir().expect("tempdir");
        let log = SessionLog::new(&dir.path().join("sessions"), "s").expect("id");
        log.append(&event(0)).expect("first append");
        let tries = std::sync::Arc::new(AtomicUsize::new(0));
        // The writer goes on until the reader has tried a few walks beside
        // it (clean or overtaken by appends every time), however the
        // scheduler shares the cores between the two, but never past 20,000
        // entries: a log that grows without pause can outrun every walk of
        // it, each try then taking longer than the last.
        let writer = {
            let (log, tries) = (log.clone(), tries.clone());
            std::thread::spawn(move || {
                let mut n = 1;
                while n < 3000 || (tries.load(Ordering::Relaxed) < 5 && n < 20_000) {
                    log.append(&event(n)).expect("append");
                    n += 1;
                }
                n
            })
        };
        let mut clean = 0;
        while !writer.is_finished() {
            match log.walk_live(&|_| 1) {
                Ok(_) => clean += 1,
                Err(VerifyError::Io(e)) if e.to_string().contains("every one of the tries") => {}
                Err(e) => panic!("after {clean} clean walks: {e}"),
            }
            tries.fetch_add(1, Ordering::Relaxed);
        }
        let appended = writer.join().expect("writer");
        let verified = log.walk_live(&|_| 1).expect("a still log");
        assert_eq!(verified.entries, appended as u64);
    }
}
