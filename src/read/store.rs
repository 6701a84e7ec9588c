//! Where the reading commands find sessions, and how they read them: the
//! session a name points at, the list with summaries, a log streamed into
//! the timeline while its chain is verified beside it, and the search over
//! many logs at once.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

use super::ReadError;
use super::entry::Entry;
use super::index::{Index, LogKeys};
use super::report::{Chain, SessionInfo, Shipped};
use super::safe::plural;
use super::scan::{in_parallel, whole_lines};
use super::search::{Filter, Hit, Pattern};
use super::timeline::{Builder, Item};
use crate::chain::{Head, HeadState};
use crate::session_log::{self, SessionLog, VerifyError};

/// A state directory and its sessions.
pub struct Store {
    pub state: PathBuf,
    pub sessions: PathBuf,
}

/// A session found by name or path.
pub struct Located {
    pub log: SessionLog,
    /// Under this store's sessions directory (so the index may keep it).
    pub in_state: bool,
}

/// Threads for reading many logs at once.
pub fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl Store {
    /// The user's store: `$XDG_STATE_HOME/nd7`.
    pub fn open() -> Result<Store, ReadError> {
        Ok(Store::at(&session_log::state_dir()?))
    }

    pub fn at(state: &Path) -> Store {
        Store {
            state: state.to_path_buf(),
            sessions: session_log::sessions_dir(state),
        }
    }

    /// The sessions' ids, sorted, and the directories that cannot be
    /// sessions (names that are not UTF-8 or not valid ids).
    pub fn ids(&self) -> Result<(Vec<String>, Vec<PathBuf>), ReadError> {
        let entries = match fs::read_dir(&self.sessions) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((Vec::new(), Vec::new())),
            Err(e) => return Err(super::io_err(&self.sessions, "list")(e)),
        };
        let mut ids = Vec::new();
        let mut foreign = Vec::new();
        for entry in entries.filter_map(Result::ok) {
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            match entry.file_name().into_string() {
                Ok(id) if session_log::check_session_id(&id).is_ok() => ids.push(id),
                _ => foreign.push(entry.path()),
            }
        }
        ids.sort();
        Ok((ids, foreign))
    }

    /// The log of `id` under this store.
    pub fn log(&self, id: &str) -> Result<SessionLog, ReadError> {
        Ok(SessionLog::new(&self.sessions, id)?)
    }

    /// Whether this machine is enrolled with a vault.
    pub fn enrolled(&self) -> bool {
        self.state
            .join(crate::ship::VAULT_DIR)
            .join(crate::ship::MACHINE_ID_FILE)
            .exists()
    }

    /// How far `log` is shipped.
    pub fn shipped(&self, log: &SessionLog, in_state: bool) -> Shipped {
        if !in_state {
            return Shipped::NotHere;
        }
        if !self.enrolled() {
            return Shipped::NotEnrolled;
        }
        match fs::read(log.dir().join(crate::ship::SHIPPED_FILE)) {
            Ok(text) => {
                Head::parse(&text).map_or(Shipped::Unreadable, |h| Shipped::Entries(h.seq + 1))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Shipped::Entries(0),
            Err(_) => Shipped::Unreadable,
        }
    }

    /// Every session, summarised, in id order. Sessions that could not be
    /// read come back as errors beside the rest.
    pub fn list(&self, index: &mut Index) -> Result<(Vec<SessionInfo>, Vec<ReadError>), ReadError> {
        let (ids, foreign) = self.ids()?;
        let mut problems: Vec<ReadError> = foreign
            .into_iter()
            .map(|p| {
                ReadError::Usage(format!(
                    "{}: not a session nd7 wrote (its name is not a session id)",
                    p.display()
                ))
            })
            .collect();
        let logs: Vec<SessionLog> = ids.iter().filter_map(|id| self.log(id).ok()).collect();
        index.retain(&ids);
        let results = index.refresh_all(&logs, threads());
        let mut rows = Vec::with_capacity(logs.len());
        for (log, result) in logs.iter().zip(results) {
            match result {
                Ok((summary, chain)) => rows.push(SessionInfo {
                    id: log.session_id().to_string(),
                    log: log.events_path().display().to_string(),
                    shipped: self.shipped(log, true),
                    summary,
                    chain,
                }),
                Err(e) => problems.push(e),
            }
        }
        Ok((rows, problems))
    }

    /// The session `target` names: `last` (the one that started last), a
    /// path (with a `/`, or one that exists while no session has that id),
    /// an id, or an unambiguous prefix of one.
    pub fn resolve(&self, target: &str, index: &mut Index) -> Result<Located, ReadError> {
        if target == "last" {
            let (rows, _) = self.list(index)?;
            let newest = rows
                .into_iter()
                .max_by_key(|r| (r.summary.first_ts, r.id.clone()))
                .ok_or_else(|| ReadError::NoSessions(self.sessions.clone()))?;
            return Ok(Located {
                log: self.log(&newest.id)?,
                in_state: true,
            });
        }
        let path = Path::new(target);
        let by_id = self.sessions.join(target);
        let is_id = session_log::check_session_id(target).is_ok() && by_id.is_dir();
        if target.contains('/') || (!is_id && path.exists()) {
            return self.at_path(path);
        }
        if is_id {
            return Ok(Located {
                log: self.log(target)?,
                in_state: true,
            });
        }
        let (ids, _) = self.ids()?;
        let matching: Vec<String> = ids
            .into_iter()
            .filter(|id| id.starts_with(target))
            .collect();
        match matching.as_slice() {
            [one] => Ok(Located {
                log: self.log(one)?,
                in_state: true,
            }),
            [] => Err(ReadError::NotFound {
                target: target.to_string(),
                sessions: self.sessions.clone(),
            }),
            many => Err(ReadError::Ambiguous {
                prefix: target.to_string(),
                candidates: many.iter().take(10).cloned().collect(),
            }),
        }
    }

    fn at_path(&self, path: &Path) -> Result<Located, ReadError> {
        let log = SessionLog::at_path(path)?;
        log.check_is_session()?;
        let canonical = |p: &Path| fs::canonicalize(p).ok();
        let in_state = canonical(log.dir()).and_then(|d| d.parent().map(Path::to_path_buf))
            == canonical(&self.sessions);
        Ok(Located { log, in_state })
    }

    /// The facts `nd7 show` puts at the top; the chain's state is what the
    /// index knows (the caller replaces it with a fresh verdict).
    pub fn info(&self, at: &Located, index: &mut Index) -> Result<SessionInfo, ReadError> {
        let mut scratch;
        let index = if at.in_state {
            index
        } else {
            scratch = Index::in_memory();
            &mut scratch
        };
        let (summary, chain) = index.refresh(&at.log)?;
        Ok(SessionInfo {
            id: at.log.session_id().to_string(),
            log: at.log.events_path().display().to_string(),
            shipped: self.shipped(&at.log, at.in_state),
            summary,
            chain,
        })
    }
}

/// What a verify result says about the chain.
pub fn chain_of(result: &Result<session_log::Verified, VerifyError>) -> Chain {
    match result {
        Ok(v) => Chain::Clean {
            entries: v.entries,
            head: v.head.map(|h| h.short()),
            note: match v.head_state {
                HeadState::Missing => Some(
                    "there is no head file beside the log: a copy (nd7 admin pull writes none), or an append interrupted before writing it".into(),
                ),
                HeadState::Behind { entries } => Some(format!(
                    "head is {entries} {} behind: an append was interrupted; the next append repairs it",
                    plural(entries, "entry", "entries")
                )),
                HeadState::Current | HeadState::Disagrees(_) => None,
            },
        },
        Err(VerifyError::Io(e)) => Chain::Unreadable {
            detail: e.to_string(),
        },
        Err(other) => Chain::Broken {
            detail: other.to_string(),
        },
    }
}

/// Verifies `log` as `nd7 verify` does and remembers the verdict in `index`
/// when the log did not change meanwhile.
pub fn verify(log: &SessionLog, threads: usize, index: Option<&mut Index>) -> Chain {
    let keys = LogKeys::of(log).ok();
    let chain = chain_of(&log.verify(threads));
    if let (Some(index), Some(keys)) = (index, keys) {
        index.remember(log, keys, &chain);
    }
    chain
}

/// Streams the timeline of `log` to `emit` while its chain is verified on
/// another thread. `emit` returns `false` to stop (the reader went away);
/// the verdict is then `None`. Otherwise returns the verdict and the file
/// facts it was reached on, for [`Index::remember`].
pub fn read_timeline(
    log: &SessionLog,
    mut emit: impl FnMut(Item) -> bool,
) -> Result<Option<(Chain, Option<LogKeys>)>, ReadError> {
    let keys = LogKeys::of(log).ok();
    let verifier = {
        let log = log.clone();
        std::thread::spawn(move || chain_of(&log.verify(1)))
    };
    let path = log.events_path();
    let file = File::open(&path).map_err(super::io_err(&path, "open"))?;
    let mut builder = Builder::new();
    let mut lines = 0u64;
    let tail = whole_lines(&file, &path, 0, |block| {
        let mut start = 0;
        for nl in memchr::memchr_iter(b'\n', block) {
            lines += 1;
            match Entry::parse(&block[start..nl], lines) {
                Ok(e) => builder.push(e),
                Err(u) => builder.push_unreadable(u),
            }
            start = nl + 1;
            for item in builder.take_ready() {
                if !emit(item) {
                    return false;
                }
            }
        }
        true
    })?;
    let Some(tail) = tail else {
        return Ok(None);
    };
    if !tail.rest.is_empty() {
        lines += 1;
        builder.push_unreadable(super::entry::Unreadable {
            line: lines,
            error: "the line has no newline: an append in progress, or one cut short".into(),
            start: String::from_utf8_lossy(&tail.rest[..tail.rest.len().min(200)]).into_owned(),
        });
    }
    for item in builder.finish() {
        if !emit(item) {
            return Ok(None);
        }
    }
    let chain = verifier.join().unwrap_or_else(|_| Chain::Unreadable {
        detail: "the verifier stopped".into(),
    });
    Ok(Some((chain, keys)))
}

/// Searches `logs` on up to `threads` threads. One result per log, in the
/// same order.
pub fn search(
    logs: &[SessionLog],
    pattern: &Pattern,
    filter: &Filter,
    threads: usize,
) -> Vec<Result<Vec<Hit>, ReadError>> {
    in_parallel(logs, threads, |_, log| search_one(log, pattern, filter))
}

fn search_one(log: &SessionLog, pattern: &Pattern, filter: &Filter) -> Result<Vec<Hit>, ReadError> {
    let path = log.events_path();
    let file = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(super::io_err(&path, "open")(e)),
    };
    // Entries are stamped before they are written, so a log last written
    // before --since holds nothing after it.
    if let Some(since) = filter.since
        && let Ok(modified) = file.metadata().and_then(|m| m.modified())
        && let Ok(d) = modified.duration_since(std::time::UNIX_EPOCH)
        && d.as_nanos() < u128::from(since)
    {
        return Ok(Vec::new());
    }
    let mut hits = Vec::new();
    whole_lines(&file, &path, 0, |block| {
        pattern.candidates(block, |line| {
            hits.extend(pattern.line_hits(line, filter));
        });
        true
    })?;
    Ok(hits)
}
