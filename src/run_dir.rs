//! A run directory: `~/.nd7/runs/<pid>/`, the state of one `nd7 run`,
//! named after its pid, holding its record (`record.json`: the rules and
//! what is running) and, on macOS, the per-command profile (`policy.sb`).
//!
//! The home directory comes from the account database, never from `$HOME`:
//! `nd7-exec` runs with an environment the agent chose. Every file is written
//! through a temporary file and a rename, so a reader never sees half a
//! record. Nothing under `~/.nd7` is writable from inside a run.
//!
//! "Session" in nd7 is the log's word (`sessions/<id>` under the state
//! directory, `nd7 sessions`); the directory of a run is never called one
//! (ADR-0065). An `~/.nd7/sessions` left by an older nd7 is not read.

use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::policy::{GrantError, Policy, secrets};

/// The run's record, read fresh by every command it runs.
pub const RECORD: &str = "record.json";
/// The per-command Seatbelt profile `nd7-exec` applies (macOS).
pub const PROFILE: &str = "policy.sb";
/// The floor's own Seatbelt profile (macOS), which `nd7-exec` applies to what
/// Claude Code's shell prefix hands it that is not a Bash tool call (a hook, an
/// MCP server): those run as they would without the prefix, under the floor.
pub const FLOOR_PROFILE: &str = "floor.sb";
/// The socket `nd7-exec` reaches `nd7 run` through (Linux).
pub const EXIT_SOCKET: &str = "exit.sock";
/// The socket the hooks reach the run's log through (Linux): the log is
/// read-only inside the floor, so `nd7 run` appends for them.
pub const DOOR_SOCKET: &str = "record.sock";
/// Serialises changes to the record (`nd7 allow` and `nd7 deny`).
const LOCK: &str = "lock";

/// The files the platform keeps beside the record, each name with its
/// text, rendered from the policy: `sandbox::files_beside_record` (the
/// Seatbelt profiles on macOS, none on Linux). Every write of the record
/// writes them first, so they never describe other rules than the record.
pub type Beside = fn(&Policy) -> Vec<(&'static str, String)>;

/// What `nd7 run` writes when the run starts; `nd7 allow` and `nd7 deny`
/// change only the policy's grants.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The `nd7 run` process.
    pub pid: u32,
    /// Its start time as the kernel reports it, so that a later process with
    /// the same pid is not taken for it.
    pub started: u64,
    /// The program and arguments `nd7 run` runs.
    pub program: Vec<String>,
    /// When it started, in seconds since the Unix epoch (for people: the
    /// list of runs `nd7 allow` shows). Absent in older records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<u64>,
    #[serde(flatten)]
    pub policy: Policy,
    /// The run's chain, where the hooks' entries and nd7's own go
    /// ([`crate::run_log`]). Absent in records of older versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<LogRef>,
}

/// Which chain a run writes, under the policy's logs directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogRef {
    /// The chain's session id (`run-…`).
    pub id: String,
    /// Whether `nd7 run` registered the record hooks itself (Claude Code), so
    /// that hooks registered elsewhere are not recorded twice.
    pub hooks: bool,
}

/// Why a run could not be found, made or changed.
#[derive(Debug, thiserror::Error)]
pub enum RunDirError {
    #[error("cannot find your home directory in the account database: {0}")]
    NoHome(String),
    #[error("no nd7 run is running")]
    NoneRunning,
    #[error("several nd7 runs are running; name one with --run PID:{}", listing(.0))]
    Several(Vec<Running>),
    #[error("no running nd7 run has pid {0}")]
    NotRunning(u32),
    #[error("cannot resolve {path}: {source}")]
    Unresolvable { path: PathBuf, source: io::Error },
    #[error("{0}")]
    Grant(#[from] GrantError),
    #[error("{path}: {action}: {source}")]
    Io {
        path: PathBuf,
        action: &'static str,
        source: io::Error,
    },
    #[error("{path}: not a run record: {source}")]
    BadRecord {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{path} {source}")]
    Secrets {
        path: PathBuf,
        source: secrets::SecretsError,
    },
    #[error(
        "{path} is not granted: {source}; if the place it leads to is what you mean, nd7 allow that place by its real path"
    )]
    Link {
        path: PathBuf,
        source: crate::kernel::RealPathError,
    },
    #[error("{path} changed while it was being granted ({why}); nothing was granted")]
    Moved { path: PathBuf, why: String },
    #[error("cannot create {path} to grant it: {source}")]
    Create { path: PathBuf, source: io::Error },
}

/// An `nd7 run` still running, as `nd7 allow` lists it for a person to choose from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Running {
    pub pid: u32,
    pub project: PathBuf,
    pub started_at: Option<u64>,
    pub program: String,
}

/// The runs, one a line: pid, project, start (local time), program.
fn listing(runs: &[Running]) -> String {
    let zone = jiff::tz::TimeZone::system();
    runs.iter()
        .map(|s| {
            let since = s
                .started_at
                .and_then(|t| jiff::Timestamp::from_second(t as i64).ok())
                .map(|t| {
                    t.to_zoned(zone.clone())
                        .strftime("%Y-%m-%d %H:%M")
                        .to_string()
                })
                .unwrap_or_else(|| "?".into());
            // Each field on its own line's part, inert (ADR-0090): a project
            // or program name cannot start a line of its own.
            let one = |t: &str| crate::read::safe::term(t, crate::read::safe::Lines::One);
            format!(
                "\n  --run {}  {}  since {since}  ({})",
                s.pid,
                one(&s.project.display().to_string()),
                one(&s.program)
            )
        })
        .collect()
}

crate::files::io_context_into!(RunDirError);

/// What `nd7 allow` and `nd7 deny` do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Allow,
    Deny,
}

/// What came of it, with the paths as the record holds them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Changed {
    /// Granted; `created` when nd7 made the directory (or file) first.
    Allowed {
        path: PathBuf,
        created: bool,
    },
    AlreadyAllowed(PathBuf),
    /// The grants taken back: every one the path names (usually one).
    Denied(Vec<PathBuf>),
    /// Nothing the path names is a grant: the run's grants as they stand,
    /// and, when the path goes through a link nd7 does not follow, why.
    NotAGrant {
        path: PathBuf,
        grants: Vec<PathBuf>,
        link: Option<String>,
    },
}

/// The home the agents find from a hook's environment: `$HOME`
/// ([`crate::home::env_home`]), else the account database's
/// ([`account_home`]).
pub fn env_or_account_home() -> Option<PathBuf> {
    crate::home::env_home().or_else(|| account_home().ok())
}

/// The calling user's home directory from the account database, resolved.
pub fn account_home() -> Result<PathBuf, RunDirError> {
    let uid = nix::unistd::getuid();
    let dir = match crate::passwd::home_from_files(uid.as_raw()) {
        Some(dir) => dir,
        None => {
            nix::unistd::User::from_uid(uid)
                .map_err(|e| RunDirError::NoHome(e.to_string()))?
                .ok_or_else(|| RunDirError::NoHome(format!("uid {uid} has no entry")))?
                .dir
        }
    };
    fs::canonicalize(&dir).map_err(io_err(&dir, "resolve"))
}

/// The credential stores a run starting now keeps unreadable: nd7's
/// list with the changes in `~/.nd7/secrets` (a file nothing inside a
/// run can write), each followed by the real place it leads to when a
/// link is on its way ([`with_real_places`]).
pub fn secrets(home: &Path) -> Result<Vec<PathBuf>, RunDirError> {
    let file = home.join(secrets::FILE);
    let defaults = secrets::defaults(home);
    let list = match fs::read_to_string(&file) {
        Ok(text) => secrets::apply(&defaults, &text, home)
            .map_err(|source| RunDirError::Secrets { path: file, source })?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => defaults,
        Err(e) => return Err(io_err(&file, "read")(e)),
    };
    Ok(with_real_places(&list))
}

/// Each of `paths`, and after it the place it really is when links lie on
/// its way (`~/.ssh -> dotfiles/ssh`): Seatbelt matches real paths, and
/// Landlock rules are placed on real directories, so a secret is kept out by
/// both names. A path that does not exist is resolved as far as it does.
pub fn with_real_places(paths: &[PathBuf]) -> Vec<PathBuf> {
    let mut places = Places::default();
    let mut seen = std::collections::HashSet::new();
    let mut out: Vec<PathBuf> = Vec::new();
    for path in paths {
        for p in [Some(path.clone()), places.real(path)]
            .into_iter()
            .flatten()
        {
            if seen.insert(p.clone()) {
                out.push(p);
            }
        }
    }
    out
}

/// Where nd7's own files really are, when a link lies on the way to them
/// (`~/.nd7 -> dotfiles/nd7`, `~/.nd7/secrets -> dotfiles/nd7-secrets` or
/// `~/.nd7/grants -> dotfiles/nd7-grants`, as a dotfile manager leaves
/// them; the logs or vault keys moved elsewhere). Landlock rules act on
/// real directories, so a carve-out made by the name alone would leave the
/// real place writable wherever it lies in a write root or grant: the agent
/// could rewrite its run's record (its grants), the next run's list of
/// secrets or its start grants. Only places that differ from their names
/// are returned.
pub fn nd7_real_places(home: &Path, state: &Path) -> Vec<PathBuf> {
    let mut places = Places::default();
    [
        home.join(".nd7"),
        home.join(secrets::FILE),
        home.join(crate::policy::grants::FILE),
        state.join("sessions"),
        state.join("vault"),
        state.join("locks"),
    ]
    .iter()
    .filter_map(|p| places.real(p).filter(|r| r != p))
    .collect()
}

/// Where paths really are, each directory on the way looked at once for
/// all of them: the start resolves some forty paths, most under the same
/// few ancestors (`~`, `~/.config`, `~/.local`), and resolving each alone
/// (`fs::canonicalize`, a `readlink` per component) cost a few hundred
/// system calls on every `nd7 run`.
#[derive(Default)]
struct Places {
    /// A path (absolute, as named) and where it really is; `None` when it
    /// cannot be resolved (a link that leads nowhere, a loop).
    known: std::collections::HashMap<PathBuf, Option<PathBuf>>,
}

impl Places {
    /// Where `path` really is: its nearest existing ancestor resolved, and
    /// the rest appended. A component that exists and is no link is where
    /// its parent really is, plus its name; a link is resolved whole.
    fn real(&mut self, path: &Path) -> Option<PathBuf> {
        // `link/` and `link/.` name the link's target, which `lstat`
        // follows: taken by their components, they are `link`.
        let path: PathBuf = path.components().collect();
        let path = path.as_path();
        if let Some(known) = self.known.get(path) {
            return known.clone();
        }
        let real = match (path.parent(), path.file_name()) {
            (Some(parent), Some(name)) => {
                let link = fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
                if link {
                    fs::canonicalize(path).ok()
                } else {
                    self.real(parent).map(|p| p.join(name))
                }
            }
            // `/`, or a path with `..` at its end, resolved as it stands.
            _ => fs::canonicalize(path).ok(),
        };
        self.known.insert(path.to_path_buf(), real.clone());
        real
    }
}

/// The directory that holds every run: `<home>/.nd7/runs`.
#[derive(Clone, Debug)]
pub struct RunDirs {
    root: PathBuf,
}

/// One run's directory.
#[derive(Clone, Debug)]
pub struct RunDir {
    pub pid: u32,
    pub dir: PathBuf,
}

/// Whether the process `pid` still is the one that started at `started`.
fn alive(pid: u32, started: u64) -> bool {
    crate::kernel::start_time(pid) == Some(started)
}

impl RunDirs {
    pub fn under(home: &Path) -> RunDirs {
        RunDirs {
            root: home.join(".nd7").join("runs"),
        }
    }

    /// The runs of the user running this process.
    pub fn for_user() -> Result<RunDirs, RunDirError> {
        Ok(RunDirs::under(&account_home()?))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn run(&self, pid: u32) -> RunDir {
        RunDir {
            pid,
            dir: self.root.join(pid.to_string()),
        }
    }

    /// The numeric entries, in order; anything else there is not a run.
    pub fn pids(&self) -> Result<Vec<u32>, RunDirError> {
        let entries = match fs::read_dir(&self.root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_err(&self.root, "list")(e)),
        };
        let mut pids: Vec<u32> = entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect();
        pids.sort_unstable();
        Ok(pids)
    }

    /// The runs whose `nd7 run` is still the process that made them.
    pub fn running(&self) -> Result<Vec<u32>, RunDirError> {
        Ok(self
            .pids()?
            .into_iter()
            .filter(|&pid| {
                self.run(pid)
                    .record()
                    .is_ok_and(|r| r.pid == pid && alive(pid, r.started))
            })
            .collect())
    }

    /// Removes the directories of runs whose `nd7 run` is gone (killed
    /// before it could clean up). Returns their pids.
    pub fn clean_stale(&self) -> Vec<u32> {
        let Ok(pids) = self.pids() else {
            return Vec::new();
        };
        let mut removed = Vec::new();
        for pid in pids {
            let run_dir = self.run(pid);
            let live = run_dir
                .record()
                .is_ok_and(|r| r.pid == pid && alive(pid, r.started));
            // A record that cannot be read may be one being written right
            // now; only a dead pid makes it stale then.
            let owner_alive = crate::kernel::start_time(pid).is_some();
            let unreadable = run_dir.record().is_err();
            let in_the_making = unreadable && owner_alive;
            if !live && !in_the_making && fs::remove_dir_all(&run_dir.dir).is_ok() {
                removed.push(pid);
            }
        }
        removed
    }

    /// The run `nd7 allow` and `nd7 deny` act on: the one given, or the
    /// only one running.
    pub fn pick(&self, requested: Option<u32>) -> Result<RunDir, RunDirError> {
        let running = self.running()?;
        match requested {
            Some(pid) if running.contains(&pid) => Ok(self.run(pid)),
            Some(pid) => Err(RunDirError::NotRunning(pid)),
            None => match running.as_slice() {
                [] => Err(RunDirError::NoneRunning),
                [pid] => Ok(self.run(*pid)),
                several => Err(RunDirError::Several(
                    several
                        .iter()
                        .map(|&pid| {
                            let record = self.run(pid).record().ok();
                            Running {
                                pid,
                                project: record
                                    .as_ref()
                                    .map(|r| r.policy.roots.project.clone())
                                    .unwrap_or_default(),
                                started_at: record.as_ref().and_then(|r| r.started_at),
                                program: record
                                    .and_then(|r| r.program.first().cloned())
                                    .unwrap_or_default(),
                            }
                        })
                        .collect(),
                )),
            },
        }
    }

    /// The run a process belongs to, given its ancestors (nearest first):
    /// the first ancestor that owns a run directory holding `marker`.
    /// Only the kernel's view of the process tree is consulted.
    pub fn find_by_ancestors(
        &self,
        ancestors: impl IntoIterator<Item = u32>,
        marker: &str,
    ) -> Option<RunDir> {
        ancestors
            .into_iter()
            .map(|pid| self.run(pid))
            .find(|s| s.dir.join(marker).exists())
    }

    /// Makes the run directory for `record` (its pid's), private to the
    /// user, with the record written (and `beside`). A directory left by an
    /// earlier process with the same pid is replaced.
    pub fn create(&self, record: &Record, beside: Beside) -> Result<RunDir, RunDirError> {
        let nd7 = self.root.parent().unwrap_or(&self.root);
        for dir in [nd7, &self.root] {
            match fs::DirBuilder::new().mode(0o700).create(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io_err(dir, "create")(e)),
            }
        }
        let run_dir = self.run(record.pid);
        match fs::remove_dir_all(&run_dir.dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(&run_dir.dir, "remove the stale run directory")(e)),
        }
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&run_dir.dir)
            .map_err(io_err(&run_dir.dir, "create"))?;
        run_dir.write_record(record, beside)?;
        Ok(run_dir)
    }
}

impl RunDir {
    pub fn record_path(&self) -> PathBuf {
        self.dir.join(RECORD)
    }

    pub fn socket_path(&self) -> PathBuf {
        self.dir.join(EXIT_SOCKET)
    }

    pub fn record(&self) -> Result<Record, RunDirError> {
        let path = self.record_path();
        let bytes = fs::read(&path).map_err(io_err(&path, "read"))?;
        serde_json::from_slice(&bytes).map_err(|source| RunDirError::BadRecord { path, source })
    }

    /// Writes the platform's files `beside` the record, then the record,
    /// each replaced whole.
    pub fn write_record(&self, record: &Record, beside: Beside) -> Result<(), RunDirError> {
        let mut json =
            serde_json::to_vec_pretty(record).map_err(|source| RunDirError::BadRecord {
                path: self.record_path(),
                source,
            })?;
        json.push(b'\n');
        for (name, text) in beside(&record.policy) {
            replace(&self.dir.join(name), text.as_bytes())?;
        }
        replace(&self.record_path(), &json)
    }

    /// Changes the run's grants under its lock, so that two `nd7 allow`
    /// at once both land. `change` says whether anything changed; nothing is
    /// written when it did not; when it did, `beside` with the record.
    pub fn change_policy<T>(
        &self,
        beside: Beside,
        change: impl FnOnce(&mut Policy) -> (bool, T),
    ) -> Result<T, RunDirError> {
        let lock_path = self.dir.join(LOCK);
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&lock_path)
            .map_err(io_err(&lock_path, "open"))?;
        lock.lock().map_err(io_err(&lock_path, "lock"))?;
        let mut record = self.record()?;
        let (changed, out) = change(&mut record.policy);
        if changed {
            self.write_record(&record, beside)?;
        }
        Ok(out)
    }

    /// Adds or removes the grant of `path` (a directory).
    pub fn change_grant(
        &self,
        change: Change,
        path: &Path,
        beside: Beside,
    ) -> Result<Changed, RunDirError> {
        match change {
            Change::Allow => self.allow(path, true, beside),
            Change::Deny => self.deny(path, beside),
        }
    }

    /// Grants `typed`, a directory (`dir`) or a single file.
    ///
    /// `~` and `~/…` are the run's home, even when the shell left them
    /// alone (quoted). A path that does not exist yet is created (a
    /// directory, or an empty file), once nd7 has checked that what it would
    /// be may be granted. A grant is of the real path `typed` leads to then
    /// ([`crate::kernel::real_path`]: a link the account could have placed,
    /// in the project or anywhere it can write, is refused, since the agent
    /// may have planted or re-pointed it: ADR-0068), pinned to what is found
    /// there, with the name as typed kept beside it. Nothing under `~/.nd7`,
    /// in a credential store, among the vault keys, `/` or above the home
    /// is accepted.
    pub fn allow(&self, typed: &Path, dir: bool, beside: Beside) -> Result<Changed, RunDirError> {
        // The record first: from inside the floor it cannot even be read, so
        // nothing is created there either.
        let policy = self.record()?.policy;
        let expanded = crate::policy::grants::expand_tilde(typed, &policy.roots.home);
        let unresolvable = |source| RunDirError::Unresolvable {
            path: expanded.clone(),
            source,
        };
        let named = std::path::absolute(&expanded).map_err(unresolvable)?;
        let real = |named: &Path| {
            crate::kernel::real_path(named).map_err(|source| RunDirError::Link {
                path: named.to_path_buf(),
                source,
            })
        };
        let mut found = real(&named)?;
        let created = !found.exists;
        if created {
            policy.check_grant(&found.path)?;
            create(&found.path, dir).map_err(|source| RunDirError::Create {
                path: named.clone(),
                source,
            })?;
            found = real(&named)?;
            if !found.exists {
                return Err(RunDirError::Moved {
                    path: found.path,
                    why: "it was gone again once created".into(),
                });
            }
        }
        let resolved = found.path;
        let id = crate::kernel::pin(&resolved).map_err(|e| RunDirError::Moved {
            path: resolved.clone(),
            why: e.to_string(),
        })?;
        self.change_policy(beside, |policy| match policy.allow(&resolved) {
            Ok(new) => {
                policy.pin(&resolved, id);
                policy.alias(&named, &resolved);
                let changed = if new {
                    Changed::Allowed {
                        path: resolved.clone(),
                        created,
                    }
                } else {
                    Changed::AlreadyAllowed(resolved.clone())
                };
                (true, Ok(changed))
            }
            Err(e) => (false, Err(e.into())),
        })?
    }

    /// Takes back every grant `typed` names: as typed, as granted through
    /// (a link nd7 may follow), as it resolves now, or as the directory it
    /// leads to (a grant since renamed). A link the account could have
    /// placed is not followed: one the agent re-pointed would take back
    /// another grant than the one meant and leave that one standing; the
    /// answer then says so, with the run's grants. Nothing under `~/.nd7`
    /// is accepted.
    pub fn deny(&self, typed: &Path, beside: Beside) -> Result<Changed, RunDirError> {
        let home = self.record()?.policy.roots.home;
        let expanded = crate::policy::grants::expand_tilde(typed, &home);
        let named = std::path::absolute(&expanded).map_err(|source| RunDirError::Unresolvable {
            path: expanded.clone(),
            source,
        })?;
        let (now, link) = match crate::kernel::real_path(&named) {
            Ok(real) => (real.exists.then_some(real.path), None),
            Err(e) => (None, Some(e.to_string())),
        };
        let id = now.as_deref().and_then(|p| crate::kernel::pin(p).ok());
        let mut names = vec![named.clone()];
        names.extend(now.clone());
        self.change_policy(beside, |policy| {
            if names.iter().any(|n| n.starts_with(policy.nd7_dir())) {
                return (false, Err(GrantError::OwnRecords.into()));
            }
            let found = policy.grants_named(&names, id);
            for grant in &found {
                policy.deny(grant);
            }
            if found.is_empty() {
                let changed = Changed::NotAGrant {
                    path: now.unwrap_or(named),
                    grants: policy.grants.clone(),
                    link,
                };
                (false, Ok(changed))
            } else {
                (true, Ok(Changed::Denied(found)))
            }
        })?
    }

    /// Removes the directory and everything in it.
    pub fn remove(&self) -> Result<(), RunDirError> {
        match fs::remove_dir_all(&self.dir) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_err(&self.dir, "remove")(e)),
            _ => Ok(()),
        }
    }
}

/// Makes `path`: a directory (and its parents), or an empty file in a
/// directory made as needed. An existing file is left as it is.
pub fn create(path: &Path, dir: bool) -> io::Result<()> {
    if dir {
        return fs::create_dir_all(path);
    }
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)?;
    }
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o644)
        .open(path)
        .map(drop)
}

/// Replaces `path` with `bytes`, private to the user ([`crate::files::replace`]).
/// Atomic, not durable: the directory lives only as long as its `nd7 run`,
/// which a power loss ends, so a synced record would outlive its only reader.
fn replace(path: &Path, bytes: &[u8]) -> Result<(), RunDirError> {
    Ok(crate::files::replace(
        path,
        bytes,
        0o600,
        crate::files::Durability::Atomic,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Roots;

    fn record(pid: u32, started: u64) -> Record {
        Record {
            pid,
            started,
            program: vec!["agent".into()],
            started_at: Some(1_796_076_909),
            log: None,
            policy: Policy::new(Roots {
                project: "/p".into(),
                temp: "/tmp".into(),
                home: "/h".into(),
                state: "/h/.local/state/nd7".into(),
                exit: "/usr/bin/nd7-exec".into(),
            }),
        }
    }

    /// How a path was resolved before [`Places`]: alone, its nearest
    /// existing ancestor canonicalized and the rest appended.
    fn resolved_alone(path: &Path) -> Option<PathBuf> {
        let existing = path.ancestors().find(|a| fs::symlink_metadata(a).is_ok())?;
        let rest = path.strip_prefix(existing).ok()?;
        let real = fs::canonicalize(existing).ok()?;
        Some(if rest.as_os_str().is_empty() {
            real
        } else {
            real.join(rest)
        })
    }

    /// Guards [`Places`]: resolving many paths through one memo gives, for
    /// each, what resolving it alone gives, through links to directories,
    /// links to links, a link that leads nowhere, a loop, a file used as a
    /// directory and paths that do not exist, in any order.
    #[test]
    fn places_resolve_as_each_path_alone() {
        use std::os::unix::fs::symlink;
        let t = tempfile::tempdir().expect("tempdir");
        let r = fs::canonicalize(t.path()).expect("real tempdir");
        fs::create_dir_all(r.join("dotfiles/ssh/keys")).expect("dirs");
        fs::create_dir_all(r.join("home/.config")).expect("dirs");
        fs::write(r.join("home/file"), "").expect("file");
        symlink(r.join("dotfiles/ssh"), r.join("home/.ssh")).expect("ln");
        symlink("../dotfiles", r.join("home/.config/df")).expect("ln");
        symlink(r.join("home/.config/df/ssh"), r.join("home/twice")).expect("ln");
        symlink(r.join("nowhere"), r.join("home/dangling")).expect("ln");
        symlink(r.join("home/loop"), r.join("home/loop")).expect("ln");
        symlink(r.join("home"), r.join("h")).expect("ln");
        let names = [
            "h/.ssh/keys",
            "home/.ssh",
            "home/.ssh/keys/id",
            "home/.ssh/missing/deeper",
            "home/.config",
            "home/.config/df/ssh/keys",
            "home/.config/gh",
            "home/twice/keys",
            "home/dangling",
            "home/dangling/x",
            "home/loop/x",
            "home/file/x",
            "home/missing/a/b",
            "h",
            "h/",
            "home/.ssh/.",
            "home/.ssh/./keys/",
            "",
        ];
        let paths: Vec<PathBuf> = names.iter().map(|n| r.join(n)).collect();
        for order in [paths.clone(), paths.iter().rev().cloned().collect()] {
            let mut places = Places::default();
            for path in &order {
                assert_eq!(
                    places.real(path),
                    resolved_alone(path),
                    "{}",
                    path.display()
                );
            }
        }
        assert_eq!(
            with_real_places(&[r.join("h/.ssh"), r.join("home/.ssh")]),
            [
                r.join("h/.ssh"),
                r.join("dotfiles/ssh"),
                r.join("home/.ssh")
            ]
        );
    }

    fn none(_: &Policy) -> Vec<(&'static str, String)> {
        Vec::new()
    }

    impl RunDirs {
        fn create_plain(&self, record: &Record) -> Result<RunDir, RunDirError> {
            self.create(record, none)
        }
    }

    fn me() -> (u32, u64) {
        let pid = std::process::id();
        (pid, crate::kernel::start_time(pid).expect("own start time"))
    }

    #[test]
    fn a_session_is_private_and_reads_back() {
        use std::os::unix::fs::PermissionsExt;
        let home = tempfile::tempdir().expect("tempdir");
        let run_dirs = RunDirs::under(home.path());
        let (pid, started) = me();
        let run_dir = run_dirs
            .create_plain(&record(pid, started))
            .expect("create");
        assert_eq!(run_dir.record().expect("read"), record(pid, started));
        for path in [
            home.path().join(".nd7"),
            run_dirs.root().to_path_buf(),
            run_dir.dir.clone(),
            run_dir.record_path(),
        ] {
            let mode = fs::metadata(&path).expect("stat").permissions().mode() & 0o777;
            assert_eq!(mode & 0o077, 0, "{} is mode {mode:o}", path.display());
        }
        assert_eq!(run_dirs.running().expect("list"), vec![pid]);
        assert_eq!(run_dirs.pick(None).expect("one").pid, pid);
        run_dir.remove().expect("remove");
        assert!(!run_dir.dir.exists());
        assert!(matches!(run_dirs.pick(None), Err(RunDirError::NoneRunning)));
    }

    #[test]
    fn stale_sessions_are_told_apart_from_running_ones() {
        let home = tempfile::tempdir().expect("tempdir");
        let run_dirs = RunDirs::under(home.path());
        let (pid, started) = me();
        run_dirs.create_plain(&record(pid, started)).expect("mine");
        // Same pid, another start time: a process that has since died.
        let reused = run_dirs.run(pid);
        // A pid that cannot exist (above pid_max), and one whose process
        // started at another time.
        run_dirs
            .create_plain(&record(u32::MAX - 1, 1))
            .expect("dead");
        let mut other = record(1, 1);
        other.pid = 1;
        run_dirs.create_plain(&other).expect("reused pid");
        fs::create_dir_all(run_dirs.root().join("not-a-pid")).expect("mkdir");
        assert_eq!(run_dirs.pids().expect("pids"), vec![1, pid, u32::MAX - 1]);
        assert_eq!(run_dirs.running().expect("running"), vec![pid]);
        let mut removed = run_dirs.clean_stale();
        removed.sort_unstable();
        assert_eq!(removed, vec![1, u32::MAX - 1]);
        assert!(reused.dir.exists());
        assert!(run_dirs.root().join("not-a-pid").exists());
    }

    #[test]
    fn picking_says_which_sessions_there_are() {
        let home = tempfile::tempdir().expect("tempdir");
        let run_dirs = RunDirs::under(home.path());
        let (pid, started) = me();
        run_dirs.create_plain(&record(pid, started)).expect("mine");
        let parent = rustix::process::getppid().expect("parent").as_raw_pid() as u32;
        let parent_started = crate::kernel::start_time(parent).expect("parent start");
        run_dirs
            .create_plain(&record(parent, parent_started))
            .expect("parent's");
        let mut both = vec![pid, parent];
        both.sort_unstable();
        match run_dirs.pick(None) {
            Err(e @ RunDirError::Several(_)) => {
                let text = e.to_string();
                assert!(
                    text.starts_with(
                        "several nd7 runs are running; name one with --run PID:\n  --run "
                    ),
                    "{text}"
                );
                for pid in both {
                    assert!(
                        text.contains(&format!("--run {pid}  /p  since 20")),
                        "{text}"
                    );
                }
                assert!(text.ends_with("(agent)"), "{text}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(run_dirs.pick(Some(parent)).expect("given").pid, parent);
        assert!(matches!(
            run_dirs.pick(Some(7)),
            Err(RunDirError::NotRunning(7))
        ));
    }

    #[test]
    fn grants_change_under_the_lock_and_survive_rereading() {
        let home = tempfile::tempdir().expect("tempdir");
        let run_dirs = RunDirs::under(home.path());
        let (pid, started) = me();
        let run_dir = run_dirs.create_plain(&record(pid, started)).expect("mine");
        std::thread::scope(|s| {
            for i in 0..8 {
                let run_dir = run_dir.clone();
                s.spawn(move || {
                    run_dir
                        .change_policy(none, |p| {
                            let added = p.allow(Path::new(&format!("/g{i}"))).expect("grant");
                            (added, ())
                        })
                        .expect("change")
                });
            }
        });
        let mut grants = run_dir.record().expect("read").policy.grants;
        grants.sort();
        assert_eq!(grants.len(), 8, "{grants:?}");
    }

    #[test]
    fn the_files_beside_the_record_are_written_with_it_and_follow_its_changes() {
        fn profile(policy: &Policy) -> Vec<(&'static str, String)> {
            vec![(PROFILE, format!("{:?}\n", policy.grants))]
        }
        let home = tempfile::tempdir().expect("tempdir");
        let run_dirs = RunDirs::under(home.path());
        let (pid, started) = me();
        let run_dir = run_dirs
            .create(&record(pid, started), profile)
            .expect("mine");
        let beside = run_dir.dir.join(PROFILE);
        assert_eq!(fs::read_to_string(&beside).expect("written"), "[]\n");
        run_dir
            .change_policy(profile, |p| (p.allow(Path::new("/g")).expect("grant"), ()))
            .expect("change");
        assert_eq!(
            fs::read_to_string(&beside).expect("rewritten"),
            "[\"/g\"]\n"
        );
        assert!(!run_dir.dir.join(FLOOR_PROFILE).exists());
    }
}
