//! The watch over files that run later outside the floor
//! ([`crate::policy::deferred`]): what they were when the session started,
//! what changed after each command through the exit, and what changed by the
//! end, when `nd7 run` reports it ([`report`]) and exits with status 3.
//!
//! Where the session's namespaces lock these files (Linux with user
//! namespaces), the watch covers what no mount can: names that did not exist
//! when the session started (a new `.envrc`, a `git init` in a
//! subdirectory), and Claude Code's state file, which it must keep writing.
//! Where they cannot be locked, it covers everything on the list. Each check
//! compares `lstat` results (type, mode, size, inode, change time, link
//! target); only the start and the end read contents, to show a diff.

pub mod report;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use crate::policy::deferred::{
    Kind, Plan, SEARCH_DEPTH, Tree, claude_state_risky, git_config_risky, gitdir_of, searched_name,
};
use report::{Body, Finding, What};

/// The real file system, for [`crate::policy::deferred::plan`].
pub struct FsTree;

/// The largest file whose text the planner reads (configurations, `.git`
/// files, `.gitmodules`).
const MAX_READ: u64 = 256 * 1024;

impl Tree for FsTree {
    fn kind(&self, path: &Path) -> Option<Kind> {
        let t = std::fs::symlink_metadata(path).ok()?.file_type();
        Some(if t.is_symlink() {
            Kind::Link
        } else if t.is_dir() {
            Kind::Dir
        } else {
            Kind::File
        })
    }

    fn read(&self, path: &Path) -> Option<String> {
        let file = std::fs::File::open(path).ok()?;
        let mut text = String::new();
        file.take(MAX_READ).read_to_string(&mut text).ok()?;
        Some(text)
    }

    fn list(&self, path: &Path) -> Vec<PathBuf> {
        std::fs::read_dir(path)
            .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
            .unwrap_or_default()
    }

    fn resolve(&self, path: &Path) -> Option<PathBuf> {
        std::fs::canonicalize(path).ok()
    }
}

/// What `lstat` says about a path: enough to tell that it changed.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Meta {
    kind: Kind,
    mode: u32,
    len: u64,
    dev: u64,
    ino: u64,
    ctime: (i64, i64),
    target: Option<PathBuf>,
}

#[derive(Clone, Debug)]
struct Entry {
    meta: Meta,
    body: Option<Body>,
}

type Snapshot = BTreeMap<PathBuf, Entry>;

/// How many entries one snapshot reads at most, and how deep.
const MAX_ENTRIES: usize = 20_000;
const MAX_DEPTH: usize = 16;
/// Files up to this size are kept whole when they are text.
const MAX_TEXT: u64 = 256 * 1024;
/// Files up to this size are hashed.
const MAX_HASH: u64 = 64 * 1024 * 1024;
/// How many directory entries the end-of-session search reads at most.
const MAX_SEARCH: usize = 100_000;

fn meta(path: &Path) -> Option<Meta> {
    let m = std::fs::symlink_metadata(path).ok()?;
    let t = m.file_type();
    let kind = if t.is_symlink() {
        Kind::Link
    } else if t.is_dir() {
        Kind::Dir
    } else {
        Kind::File
    };
    Some(Meta {
        kind,
        mode: m.mode(),
        len: m.len(),
        dev: m.dev(),
        ino: m.ino(),
        ctime: (m.ctime(), m.ctime_nsec()),
        target: (kind == Kind::Link)
            .then(|| std::fs::read_link(path).ok())
            .flatten(),
    })
}

fn body(path: &Path, meta: &Meta) -> Body {
    match meta.kind {
        Kind::Dir => Body::Dir,
        Kind::Link => Body::Link(meta.target.clone().unwrap_or_default()),
        Kind::File => {
            if meta.len <= MAX_TEXT
                && let Ok(bytes) = std::fs::read(path)
            {
                return match String::from_utf8(bytes) {
                    Ok(text) => Body::Text(text),
                    Err(e) => Body::Data {
                        len: meta.len,
                        hash: Some(blake3::hash(e.as_bytes()).to_hex().to_string()),
                    },
                };
            }
            let hash = (meta.len <= MAX_HASH)
                .then(|| {
                    let mut hasher = blake3::Hasher::new();
                    std::fs::File::open(path)
                        .and_then(|mut f| std::io::copy(&mut f, &mut hasher))
                        .ok()
                        .map(|_| hasher.finalize().to_hex().to_string())
                })
                .flatten();
            Body::Data {
                len: meta.len,
                hash,
            }
        }
    }
}

/// Reads `paths` (a directory with everything beneath it, except a `.git`
/// directory, whose own entries are watched on their own), with contents
/// when `bodies`.
fn snapshot(paths: &[PathBuf], bodies: bool) -> Snapshot {
    let mut out = Snapshot::new();
    let mut stack: Vec<(PathBuf, usize)> = paths.iter().rev().map(|p| (p.clone(), 0)).collect();
    while let Some((path, depth)) = stack.pop() {
        if out.len() >= MAX_ENTRIES || out.contains_key(&path) {
            continue;
        }
        let Some(m) = meta(&path) else { continue };
        let walk = m.kind == Kind::Dir
            && depth < MAX_DEPTH
            && path.file_name() != Some(std::ffi::OsStr::new(".git"));
        let body = bodies.then(|| body(&path, &m));
        out.insert(path.clone(), Entry { meta: m, body });
        if walk && let Ok(entries) = std::fs::read_dir(&path) {
            let mut children: Vec<PathBuf> =
                entries.filter_map(Result::ok).map(|e| e.path()).collect();
            children.sort();
            stack.extend(children.into_iter().rev().map(|c| (c, depth + 1)));
        }
    }
    out
}

/// The differences between two snapshots. Directories are reported when
/// they appear, vanish or are replaced, not when their entries change (each
/// entry is reported itself).
fn compare(before: &Snapshot, after: &Snapshot) -> Vec<Finding> {
    let paths: BTreeSet<&PathBuf> = before.keys().chain(after.keys()).collect();
    let mut out = Vec::new();
    for path in paths {
        let (b, a) = (before.get(path), after.get(path));
        let what = match (b, a) {
            (None, None) => continue,
            // A new directory says nothing by itself (Claude Code makes
            // empty ones); whatever is put in it is reported on its own.
            (None, Some(a)) if a.meta.kind == Kind::Dir => continue,
            (None, Some(_)) => What::Added,
            (Some(_), None) => What::Removed,
            (Some(b), Some(a)) => {
                let (bm, am) = (&b.meta, &a.meta);
                let replaced = bm.kind != am.kind || bm.ino != am.ino || bm.dev != am.dev;
                let content = match (&b.body, &a.body) {
                    (Some(x), Some(y)) => x != y,
                    _ => bm.len != am.len || bm.ctime != am.ctime || bm.target != am.target,
                };
                if am.kind == Kind::Dir && bm.kind == Kind::Dir {
                    if replaced {
                        What::Changed
                    } else if bm.mode != am.mode {
                        What::Mode {
                            before: bm.mode,
                            after: am.mode,
                        }
                    } else {
                        continue;
                    }
                } else if replaced || content {
                    What::Changed
                } else if bm.mode != am.mode {
                    What::Mode {
                        before: bm.mode,
                        after: am.mode,
                    }
                } else {
                    continue;
                }
            }
        };
        // A directory that went away is reported once, not with each entry
        // that went with it.
        if what == What::Removed
            && out.iter().any(|f: &Finding| {
                f.what == What::Removed
                    && matches!(f.before, Some(Body::Dir))
                    && path.starts_with(&f.path)
            })
        {
            continue;
        }
        out.push(Finding {
            path: path.clone(),
            what,
            before: b.and_then(|e| e.body.clone()),
            after: a.and_then(|e| e.body.clone()),
            after_command: None,
        });
    }
    out
}

/// Claude Code's state file's risky parts ([`claude_state_risky`]), or
/// `None` when it cannot be read as JSON. A state not made yet (the first
/// run, through the link `nd7 setup` leaves for it) starts nothing: it
/// reads as an empty one, so Claude Code creating it is no finding, while
/// creating it with an MCP server is.
fn claude_state(path: &Path, own: &[PathBuf]) -> Option<serde_json::Value> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Some(claude_state_risky(&serde_json::json!({}), own));
        }
        Err(_) => return None,
    };
    let value: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    Some(claude_state_risky(&value, own))
}

/// How Claude Code names the session's project in its state: the project
/// itself, and the repository enclosing it.
fn own_project_keys(project: &Path) -> Vec<PathBuf> {
    let mut own = vec![project.to_path_buf()];
    if let Some(top) = project.ancestors().find(|d| d.join(".git").exists()) {
        own.push(top.to_path_buf());
    }
    own
}

fn pretty(value: &Option<serde_json::Value>) -> Option<Body> {
    value
        .as_ref()
        .map(|v| Body::Text(serde_json::to_string_pretty(v).unwrap_or_default() + "\n"))
}

/// A session's watch.
pub struct Watch {
    plan: Plan,
    /// What is checked after each command: everything, or (when locks
    /// hold) what no lock covers.
    quick: Vec<PathBuf>,
    /// The start snapshot of `quick`, taken before the program starts.
    start: Snapshot,
    /// The start snapshot of what the locks hold, which nothing inside can
    /// change: read beside the program ([`Watch::program_started`]), so it
    /// does not delay its start.
    held: Vec<PathBuf>,
    locked: Background<Snapshot>,
    /// The project's directories and the listed names in them, indexed
    /// beside the program for the end-of-session search.
    index: Background<Index>,
    claude: Vec<(PathBuf, Option<serde_json::Value>)>,
    own: Vec<PathBuf>,
    project: PathBuf,
    /// Anything changed at or after this time counts as changed during the
    /// session (the start, less the file system's timestamp granularity).
    since: SystemTime,
    seen: Mutex<Seen>,
}

/// A value computed on a thread of its own once started, waited for when
/// first needed (or computed then, if it was never started). The thread
/// waits [`BACKGROUND_DELAY`] first, so that it does not compete with the
/// program's own start, unless the value is wanted sooner.
struct Background<T> {
    handle: Mutex<Option<(std::thread::JoinHandle<T>, std::sync::mpsc::Sender<()>)>>,
    value: std::sync::OnceLock<T>,
}

/// How long background work waits after the program has started.
const BACKGROUND_DELAY: Duration = Duration::from_secs(1);

impl<T: Send + 'static> Background<T> {
    fn new() -> Background<T> {
        Background {
            handle: Mutex::new(None),
            value: std::sync::OnceLock::new(),
        }
    }

    fn start(&self, f: impl FnOnce() -> T + Send + 'static) {
        if let Ok(mut handle) = self.handle.lock()
            && handle.is_none()
            && self.value.get().is_none()
        {
            let (go, wait) = std::sync::mpsc::channel::<()>();
            let thread = std::thread::spawn(move || {
                let _ = wait.recv_timeout(BACKGROUND_DELAY);
                f()
            });
            *handle = Some((thread, go));
        }
    }

    fn get(&self, fallback: impl FnOnce() -> T) -> &T {
        self.value.get_or_init(|| {
            let handle = self.handle.lock().ok().and_then(|mut h| h.take());
            match handle.map(|(thread, go)| {
                let _ = go.send(());
                thread.join()
            }) {
                Some(Ok(value)) => value,
                _ => fallback(),
            }
        })
    }
}

/// The project's directories down to [`SEARCH_DEPTH`] (inode and change
/// time each, taken before its entries are read, so an entry added while
/// it is read shows as a change), and the listed names found in them.
#[derive(Default)]
struct Index {
    dirs: Vec<(PathBuf, u64, (i64, i64))>,
    named: Vec<PathBuf>,
    truncated: bool,
}

fn dir_stamp(path: &Path) -> Option<(u64, (i64, i64))> {
    let m = std::fs::symlink_metadata(path).ok()?;
    m.is_dir().then(|| (m.ino(), (m.mtime(), m.mtime_nsec())))
}

/// Indexes `root`: every directory down to [`SEARCH_DEPTH`] below it (not
/// into `.git` directories), and the listed names found.
fn index(root: &Path) -> Index {
    let mut out = Index::default();
    let mut stack = vec![(root.to_path_buf(), 0usize)];
    let mut visited = 0usize;
    while let Some((dir, depth)) = stack.pop() {
        let Some((ino, mtime)) = dir_stamp(&dir) else {
            continue;
        };
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        out.dirs.push((dir.clone(), ino, mtime));
        for entry in entries.filter_map(Result::ok) {
            visited += 1;
            if visited > MAX_SEARCH {
                out.truncated = true;
                return out;
            }
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let path = entry.path();
            if searched_name(&name) {
                out.named.push(path.clone());
            }
            if name != ".git"
                && depth + 1 < SEARCH_DEPTH
                && entry.file_type().is_ok_and(|t| t.is_dir())
            {
                stack.push((path, depth + 1));
            }
        }
    }
    out
}

#[derive(Default)]
struct Seen {
    last: BTreeMap<PathBuf, Meta>,
    first_after: BTreeMap<PathBuf, String>,
}

impl Watch {
    /// Takes the start snapshot of `plan`'s files. `locked` says whether
    /// the plan's locks are in force (then only what they do not cover is
    /// checked after each command).
    pub fn start(plan: Plan, locked: bool, project: &Path) -> Watch {
        let since = SystemTime::now() - Duration::from_secs(2);
        let (held, quick): (Vec<PathBuf>, Vec<PathBuf>) = plan
            .watched
            .iter()
            .cloned()
            .partition(|p| locked && plan.locked(p));
        let start = snapshot(&quick, true);
        let own = own_project_keys(project);
        let claude = plan
            .claude_state
            .iter()
            .map(|p| (p.clone(), claude_state(p, &own)))
            .collect();
        let last = start
            .iter()
            .map(|(p, e)| (p.clone(), e.meta.clone()))
            .collect();
        Watch {
            plan,
            quick,
            start,
            held,
            locked: Background::new(),
            index: Background::new(),
            claude,
            own,
            project: project.to_path_buf(),
            since,
            seen: Mutex::new(Seen {
                last,
                first_after: BTreeMap::new(),
            }),
        }
    }

    /// Starts, once the program runs, what can be done beside it: the
    /// snapshot of the locked files (nothing inside can change them) and the
    /// project's index. Reading each directory's time before its entries, the
    /// index misses nothing the program adds meanwhile: an entry added before
    /// a directory is read is found by its change time, one added after by
    /// the directory's.
    pub fn program_started(&self) {
        let held = self.held.clone();
        self.locked.start(move || snapshot(&held, true));
        let root = self.project.clone();
        self.index.start(move || index(&root));
    }

    /// The paths whose changes are reported.
    pub fn watched(&self) -> &[PathBuf] {
        &self.plan.watched
    }

    /// Checks, after one command through the exit, what no lock covers,
    /// and returns what changed since the last check (each change once).
    pub fn after_command(&self, command: &str) -> Vec<PathBuf> {
        let now: BTreeMap<PathBuf, Meta> = snapshot(&self.quick, false)
            .into_iter()
            .map(|(p, e)| (p, e.meta))
            .collect();
        let Ok(mut seen) = self.seen.lock() else {
            return Vec::new();
        };
        let mut changed = Vec::new();
        let paths: BTreeSet<&PathBuf> = seen.last.keys().chain(now.keys()).collect();
        for p in paths {
            let (b, a) = (seen.last.get(p), now.get(p));
            let differs = match (b, a) {
                (Some(b), Some(a)) if b.kind == Kind::Dir && a.kind == Kind::Dir => {
                    b.ino != a.ino || b.mode != a.mode
                }
                (b, a) => b != a,
            };
            if differs {
                changed.push(p.clone());
            }
        }
        for p in &changed {
            seen.first_after
                .entry(p.clone())
                .or_insert_with(|| command.to_string());
        }
        seen.last = now;
        changed
    }

    /// Everything that changed since the start: the list's files compared
    /// whole, Claude Code's state compared in its risky parts, and the
    /// project searched for repositories and listed names that appeared or
    /// changed below it.
    pub fn finish(&self) -> Vec<Finding> {
        let end = snapshot(&self.plan.watched, true);
        let mut start = self.start.clone();
        start.extend(
            self.locked
                .get(|| snapshot(&self.held, true))
                .iter()
                .map(|(p, e)| (p.clone(), e.clone())),
        );
        let mut findings = compare(&start, &end);
        for (path, before) in &self.claude {
            let after = claude_state(path, &self.own);
            if &after != before {
                findings.push(Finding {
                    path: path.clone(),
                    what: What::Found(
                        "Claude Code's MCP servers, allowed tools or folder trust changed".into(),
                    ),
                    before: pretty(before),
                    after: pretty(&after),
                    after_command: None,
                });
            }
        }
        findings.extend(self.search());
        if let Ok(seen) = self.seen.lock() {
            for f in &mut findings {
                f.after_command = seen.first_after.get(&f.path).cloned();
            }
        }
        findings
    }

    fn changed_since(&self, path: &Path) -> bool {
        std::fs::symlink_metadata(path)
            .ok()
            .and_then(|m| {
                SystemTime::UNIX_EPOCH.checked_add(Duration::new(
                    m.ctime().max(0) as u64,
                    m.ctime_nsec().clamp(0, 999_999_999) as u32,
                ))
            })
            .is_some_and(|t| t >= self.since)
    }

    /// Whether `path` lies at or beneath a path the snapshot covers.
    fn covered(&self, path: &Path) -> bool {
        self.plan.watched.iter().any(|w| path.starts_with(w))
    }

    /// Repositories and listed names below the project, and git
    /// directories under the known ones' `modules` and `worktrees`, that
    /// appeared or changed during the session and the snapshot does not
    /// cover. Only directories whose inode or modification time changed
    /// since the index are read again; listed names the index found are
    /// looked at by their change time.
    fn search(&self) -> Vec<Finding> {
        let mut out = Vec::new();
        let index = self.index.get(|| index(&self.project));
        if index.truncated {
            out.push(Finding {
                path: self.project.clone(),
                what: What::Found(format!(
                    "the search for new repositories stopped after {MAX_SEARCH} entries; deeper ones were not checked"
                )),
                before: None,
                after: None,
                after_command: None,
            });
        }
        let known: BTreeSet<&Path> = index.dirs.iter().map(|(p, _, _)| p.as_path()).collect();
        let mut git_dirs: Vec<PathBuf> = self.plan.git_dirs.clone();
        let mut named: BTreeSet<PathBuf> = index.named.iter().cloned().collect();
        // Directories changed since the index: their entries, and every new
        // directory below them, whole.
        let mut stack: Vec<(PathBuf, usize)> = index
            .dirs
            .iter()
            .filter(|(p, ino, mtime)| dir_stamp(p) != Some((*ino, *mtime)))
            .map(|(p, _, _)| (p.clone(), 0))
            .collect();
        let mut visited = 0usize;
        while let Some((dir, depth)) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.filter_map(Result::ok) {
                visited += 1;
                if visited > MAX_SEARCH {
                    break;
                }
                let path = entry.path();
                let name = entry.file_name();
                let name = name.to_string_lossy();
                if searched_name(&name) {
                    named.insert(path.clone());
                }
                if name != ".git"
                    && !known.contains(path.as_path())
                    && depth < MAX_DEPTH
                    && entry.file_type().is_ok_and(|t| t.is_dir())
                {
                    stack.push((path, depth + 1));
                }
            }
        }
        for path in named {
            if self.covered(&path) {
                continue;
            }
            let is_dir = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir());
            if path.file_name() == Some(std::ffi::OsStr::new(".git")) {
                if is_dir {
                    git_dirs.push(path.clone());
                    out.extend(self.repository(&path));
                } else if self.changed_since(&path) {
                    let m = meta(&path);
                    out.push(Finding {
                        path: path.clone(),
                        what: What::Found(
                            "a repository link that appeared or changed during the session".into(),
                        ),
                        before: None,
                        after: m.as_ref().map(|m| body(&path, m)),
                        after_command: None,
                    });
                    let dir = path.parent().unwrap_or(&path).to_path_buf();
                    let target = std::fs::read_to_string(&path)
                        .ok()
                        .and_then(|t| gitdir_of(&t).map(|d| dir.join(d)));
                    if let Some(target) = target {
                        out.extend(self.repository(&target));
                    }
                }
            } else {
                for (p, e) in snapshot(std::slice::from_ref(&path), true) {
                    if e.meta.kind != Kind::Dir && !self.covered(&p) && self.changed_since(&p) {
                        out.push(Finding {
                            path: p,
                            what: What::Found(
                                "on the list, in a subdirectory, changed during the session".into(),
                            ),
                            before: None,
                            after: e.body,
                            after_command: None,
                        });
                    }
                }
            }
        }
        // Submodules and worktrees added during the session.
        let known: BTreeSet<PathBuf> = self.plan.git_dirs.iter().cloned().collect();
        for g in git_dirs {
            for sub in ["modules", "worktrees"] {
                let mut stack = vec![(g.join(sub), 0usize)];
                while let Some((at, depth)) = stack.pop() {
                    let Ok(entries) = std::fs::read_dir(&at) else {
                        continue;
                    };
                    for e in entries.filter_map(Result::ok) {
                        let p = e.path();
                        if !e.file_type().is_ok_and(|t| t.is_dir()) {
                            continue;
                        }
                        if p.join("HEAD").exists() {
                            if !known.contains(&p) {
                                out.extend(self.repository(&p));
                            }
                        } else if depth < 8 {
                            stack.push((p, depth + 1));
                        }
                    }
                }
            }
        }
        out
    }

    /// A git directory not held or watched from the start: reported when
    /// something in it that makes git run a program changed during the
    /// session and is not what `git init` or `git clone` write.
    fn repository(&self, git_dir: &Path) -> Vec<Finding> {
        let mut out = Vec::new();
        let config = git_dir.join("config");
        if self.changed_since(&config) {
            let text = std::fs::read_to_string(&config).unwrap_or_default();
            let risky = git_config_risky(&text);
            if !risky.is_empty() {
                out.push(Finding {
                    path: config.clone(),
                    what: What::Found(format!(
                        "a repository whose configuration runs or fetches something: {}",
                        risky.join("; ")
                    )),
                    before: None,
                    after: Some(Body::Text(text)),
                    after_command: None,
                });
            }
        }
        for name in ["commondir", "config.worktree", "info/attributes"] {
            let p = git_dir.join(name);
            if let Some(m) = meta(&p).filter(|_| self.changed_since(&p)) {
                out.push(Finding {
                    path: p.clone(),
                    what: What::Found("a repository file that changes what git runs".into()),
                    before: None,
                    after: Some(body(&p, &m)),
                    after_command: None,
                });
            }
        }
        if let Ok(hooks) = std::fs::read_dir(git_dir.join("hooks")) {
            for h in hooks.filter_map(Result::ok) {
                let p = h.path();
                let sample = p.extension().is_some_and(|e| e == "sample");
                if !sample && let Some(m) = meta(&p).filter(|_| self.changed_since(&p)) {
                    out.push(Finding {
                        path: p.clone(),
                        what: What::Found("a git hook".into()),
                        before: None,
                        after: Some(body(&p, &m)),
                        after_command: None,
                    });
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::deferred::plan;
    use crate::policy::{Policy, Roots};

    fn policy(root: &Path) -> Policy {
        Policy::new(Roots {
            project: root.join("p"),
            temp: root.join("t"),
            home: root.to_path_buf(),
            state: root.join(".local/state/nd7"),
            exit: "/usr/bin/nd7-exec".into(),
        })
    }

    /// Claude Code making its state on a first run (through the link setup
    /// left) is no finding; making it with an MCP server is.
    #[test]
    fn a_state_made_during_the_session_counts_only_for_what_it_starts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("claude.json");
        let before = claude_state(&state, &[]);
        std::fs::write(&state, "{\"numStartups\": 1}").expect("w");
        assert_eq!(claude_state(&state, &[]), before);
        std::fs::write(&state, r#"{"mcpServers": {"x": {"command": "sh"}}}"#).expect("w");
        assert_ne!(claude_state(&state, &[]), before);
        std::fs::write(&state, "not json").expect("w");
        assert_eq!(claude_state(&state, &[]), None);
    }

    #[test]
    fn every_kind_of_change_on_the_list_is_found_and_nothing_else() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        for d in ["p/.git/hooks", "p/.vscode", ".claude", "p/src"] {
            std::fs::create_dir_all(root.join(d)).expect("mkdir");
        }
        std::fs::write(root.join("p/.git/config"), "[core]\n\tbare = false\n").expect("w");
        std::fs::write(root.join("p/.git/HEAD"), "ref: refs/heads/main\n").expect("w");
        std::fs::write(root.join("p/.git/hooks/pre-commit.sample"), "#!/bin/sh\n").expect("w");
        std::fs::write(root.join("p/.vscode/tasks.json"), "{}\n").expect("w");
        std::fs::write(root.join(".claude/claude.json"), r#"{"numStartups":1}"#).expect("w");
        let p = policy(root);
        let watch = Watch::start(plan(&p, &FsTree), false, &p.roots.project);

        // Ordinary work: none of it is on the list.
        std::fs::write(root.join("p/src/main.rs"), "fn main() {}\n").expect("w");
        std::fs::write(root.join("p/.git/index"), "x").expect("w");
        std::fs::write(root.join(".claude/claude.json"), r#"{"numStartups":2}"#).expect("w");
        assert!(watch.after_command("cargo build").is_empty());
        assert!(watch.finish().is_empty(), "{:?}", watch.finish());

        // Planted: each is found, the first ones attributed to a command.
        std::fs::write(
            root.join("p/.git/config"),
            "[core]\n\tbare = false\n\tfsmonitor = evil\n",
        )
        .expect("w");
        std::fs::write(root.join("p/.envrc"), "evil\n").expect("w");
        let seen = watch.after_command("git config core.fsmonitor evil");
        assert_eq!(seen, [root.join("p/.envrc"), root.join("p/.git/config")]);
        assert!(watch.after_command("true").is_empty());
        std::fs::remove_file(root.join("p/.vscode/tasks.json")).expect("rm");
        std::fs::write(root.join("p/.git/hooks/post-commit"), "#!/bin/sh\nevil\n").expect("w");
        std::fs::write(
            root.join(".claude/claude.json"),
            r#"{"numStartups":3,"mcpServers":{"x":{"command":"sh"}}}"#,
        )
        .expect("w");
        std::fs::create_dir_all(root.join("p/sub/.git/hooks")).expect("mkdir");
        std::fs::write(root.join("p/sub/.git/HEAD"), "ref: refs/heads/main\n").expect("w");
        std::fs::write(
            root.join("p/sub/.git/config"),
            "[core]\n\tfsmonitor = evil\n",
        )
        .expect("w");
        std::fs::create_dir_all(root.join("p/clone/.git/hooks")).expect("mkdir");
        std::fs::write(root.join("p/clone/.git/config"), "[core]\n\tbare = false\n").expect("w");
        std::fs::write(root.join("p/clone/.git/hooks/update.sample"), "").expect("w");

        let found = watch.finish();
        let summary: Vec<(String, String)> = found
            .iter()
            .map(|f| {
                let what = match &f.what {
                    What::Found(_) => "found".to_string(),
                    other => format!("{other:?}"),
                };
                (
                    f.path
                        .strip_prefix(root)
                        .unwrap_or(&f.path)
                        .display()
                        .to_string(),
                    what,
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("p/.envrc".to_string(), "Added".to_string()),
                ("p/.git/config".into(), "Changed".into()),
                ("p/.git/hooks/post-commit".into(), "Added".into()),
                ("p/.vscode/tasks.json".into(), "Removed".into()),
                (".claude/claude.json".into(), "found".into()),
                ("p/sub/.git/config".into(), "found".into()),
            ],
            "{found:#?}"
        );
        assert_eq!(
            found[1].after_command.as_deref(),
            Some("git config core.fsmonitor evil")
        );
        assert_eq!(found[2].after_command, None);
        let text = report::render(&found, "the program exited with status 0");
        assert!(text.contains("+\tfsmonitor = evil"), "{text}");
    }
}
