//! The watch over files that run later outside the floor
//! ([`crate::policy::deferred`]): what they were when the run started,
//! what changed after each command through the exit, and what changed by the
//! end, when `nd7 run` reports it ([`report`]) and exits with status 3.
//!
//! Where the run's namespaces hold these files (Linux with user
//! namespaces), the watch covers what no mount can: names that did not exist
//! when the run started (a new `.envrc`, a `git init` in a
//! subdirectory), grants made during the run, and Claude Code's state
//! file, which it must keep writing. Where they cannot be held, it covers
//! everything on the list. Each check compares `lstat` results (type, mode,
//! size, inode, change time, link target); only the start and the end read
//! contents, to show a diff.
//!
//! This runs in the unconfined `nd7 run`, on files the agent can replace
//! with anything: every read opens without blocking and without following a
//! final link (`read_bounded`), takes only a regular file, and reads at
//! most a bound. What it cannot read whole (a FIFO, a device, a directory it
//! cannot list, a file larger than the bound, a search cut off) is a finding
//! itself, never a silent pass. Much of it is read where the agent pointed
//! (a `gitdir:`, a link): nothing is read from a place the floor keeps
//! unreadable ([`unreadable`], ADR-0092), and such a pointer is reported in
//! words, never with contents.

pub mod report;
pub mod unreadable;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use crate::policy::Policy;
use crate::policy::deferred::{
    Kind, MAX_CONFIG, MAX_STATE, Plan, Tree, caches, claude_state_risky, git_config_risky,
    gitdir_of, grant_roots, listed_beneath, plan_grant, searched_name,
};
use report::{Body, Finding, What};
use unreadable::{Refused, Unreadable};

/// The real file system, for [`crate::policy::deferred::plan`]: what it
/// reads never comes from a place the floor keeps unreadable.
pub struct FsTree {
    unreadable: Unreadable,
}

impl FsTree {
    /// The file system as `policy`'s session may have the planner read it.
    pub fn of(policy: &Policy) -> FsTree {
        FsTree {
            unreadable: Unreadable::of(policy),
        }
    }
}

impl Tree for FsTree {
    fn kind(&self, path: &Path) -> Option<Kind> {
        Some(kind_of(std::fs::symlink_metadata(path).ok()?.file_type()))
    }

    /// Read as bytes, as git and the shell read: a file that is not UTF-8
    /// (a name in Latin-1 in `~/.gitconfig`) is still read for what it
    /// names, each bad byte replaced.
    fn read(&self, path: &Path, limit: u64) -> Option<String> {
        let bytes = read_bounded(path, Follow::Yes, limit, &self.unreadable).ok()?;
        Some(String::from_utf8_lossy(&bytes).into_owned())
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

fn kind_of(t: std::fs::FileType) -> Kind {
    if t.is_symlink() {
        Kind::Link
    } else if t.is_dir() {
        Kind::Dir
    } else if t.is_file() {
        Kind::File
    } else {
        Kind::Special
    }
}

/// What a file that is neither regular, a directory nor a link is, in words.
fn special_name(t: std::fs::FileType) -> &'static str {
    if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else {
        "not a regular file"
    }
}

/// Whether a read follows a final symbolic link.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Follow {
    Yes,
    No,
}

/// Why a file was not read whole.
#[derive(Debug)]
enum Unread {
    Missing,
    /// A symbolic link, where none is followed.
    Link,
    /// A FIFO, socket or device (what it is, in words).
    Special(&'static str),
    /// Larger than the bound: its length (or what was read of it).
    TooLarge(u64, u64),
    Io(std::io::Error),
    /// In a place the floor keeps unreadable (ADR-0092).
    Secret(Refused),
}

impl std::fmt::Display for Unread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unread::Missing => write!(f, "it does not exist"),
            Unread::Link => write!(f, "it is a symbolic link"),
            Unread::Special(what) => write!(f, "it is {what}, not a regular file"),
            Unread::TooLarge(len, limit) => {
                write!(f, "it has {len} bytes, more than the {limit} nd7 reads")
            }
            Unread::Io(e) => write!(f, "{e}"),
            Unread::Secret(r) => write!(f, "{r}"),
        }
    }
}

/// A regular file's contents, at most `limit` bytes. Opened without
/// blocking (a FIFO cannot stall the open), without a controlling terminal
/// and, unless `follow`, without following a final link; checked again on
/// the open descriptor, so what is read is a regular file even if the name
/// was swapped between the checks, and read to at most one byte past the
/// bound, so a file that grows cannot keep it reading. Nothing is read
/// from a place the floor keeps unreadable (`unreadable`).
fn read_bounded(
    path: &Path,
    follow: Follow,
    limit: u64,
    unreadable: &Unreadable,
) -> Result<Vec<u8>, Unread> {
    use rustix::fs::{Mode, OFlags};
    let checked = |m: &std::fs::Metadata| -> Result<(), Unread> {
        let t = m.file_type();
        if t.is_symlink() {
            Err(Unread::Link)
        } else if !t.is_file() {
            Err(Unread::Special(if t.is_dir() {
                "a directory"
            } else {
                special_name(t)
            }))
        } else if m.len() > limit {
            Err(Unread::TooLarge(m.len(), limit))
        } else {
            Ok(())
        }
    };
    let named = match follow {
        Follow::Yes => std::fs::metadata(path),
        Follow::No => std::fs::symlink_metadata(path),
    };
    let named = named.map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Unread::Missing,
        _ => Unread::Io(e),
    })?;
    checked(&named)?;
    let mut flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    if follow == Follow::No {
        flags |= OFlags::NOFOLLOW;
    }
    let fd = rustix::fs::open(path, flags, Mode::empty()).map_err(|e| match e {
        rustix::io::Errno::LOOP => Unread::Link,
        rustix::io::Errno::NOENT => Unread::Missing,
        e => Unread::Io(e.into()),
    })?;
    let file = std::fs::File::from(fd);
    checked(&file.metadata().map_err(Unread::Io)?)?;
    unreadable.check(path, &file).map_err(Unread::Secret)?;
    let mut bytes = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(Unread::Io)?;
    if bytes.len() as u64 > limit {
        return Err(Unread::TooLarge(bytes.len() as u64, limit));
    }
    Ok(bytes)
}

/// A regular file's BLAKE3 hash, read as [`read_bounded`] reads, in
/// blocks, at most `limit` bytes, and never from where `unreadable` says.
fn hash_bounded(path: &Path, limit: u64, unreadable: &Unreadable) -> Result<String, Unread> {
    use rustix::fs::{Mode, OFlags};
    let flags =
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
    let m = std::fs::symlink_metadata(path).map_err(Unread::Io)?;
    if !m.file_type().is_file() {
        return Err(Unread::Special(special_name(m.file_type())));
    }
    let fd = rustix::fs::open(path, flags, Mode::empty()).map_err(|e| Unread::Io(e.into()))?;
    let file = std::fs::File::from(fd);
    let m = file.metadata().map_err(Unread::Io)?;
    if !m.file_type().is_file() {
        return Err(Unread::Special(special_name(m.file_type())));
    }
    unreadable.check(path, &file).map_err(Unread::Secret)?;
    let mut hasher = blake3::Hasher::new();
    let n = std::io::copy(&mut file.take(limit + 1), &mut hasher).map_err(Unread::Io)?;
    if n > limit {
        return Err(Unread::TooLarge(n, limit));
    }
    Ok(hasher.finalize().to_hex().to_string())
}

/// What `lstat` says about a path: enough to tell that it changed. The
/// change time cannot be set back from inside (only the clock moves it),
/// so a file whose contents cannot be compared is compared by it.
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

/// How many entries one snapshot reads at most.
const MAX_ENTRIES: usize = 100_000;
/// Files up to this size are kept whole when they are text.
const MAX_TEXT: u64 = 256 * 1024;
/// Files up to this size are hashed.
const MAX_HASH: u64 = 64 * 1024 * 1024;
/// The stack a grant made during the run is planned on.
const PLAN_STACK: usize = 8 * 1024 * 1024;
/// The most entries of a grant made during the run that are checked
/// after each command.
const MAX_QUICK: usize = 5_000;
/// How many directory entries the search for new repositories reads at
/// most below one root, when the run starts and again at its end.
const MAX_SEARCH: usize = 1_000_000;

fn meta(path: &Path) -> Option<Meta> {
    let m = std::fs::symlink_metadata(path).ok()?;
    let kind = kind_of(m.file_type());
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

/// What a file on the list holds now. A directory's entries are read by
/// [`snapshot`], which replaces `Body::Dir` when it cannot list them.
fn body(path: &Path, meta: &Meta, unreadable: &Unreadable) -> Body {
    match meta.kind {
        Kind::Dir => Body::Dir,
        Kind::Link => Body::Link(meta.target.clone().unwrap_or_default()),
        Kind::Special => Body::Special(
            std::fs::symlink_metadata(path)
                .map(|m| special_name(m.file_type()))
                .unwrap_or("not a regular file")
                .to_string(),
        ),
        Kind::File => {
            if meta.len <= MAX_TEXT {
                match read_bounded(path, Follow::No, MAX_TEXT, unreadable) {
                    Ok(bytes) => {
                        return match String::from_utf8(bytes) {
                            Ok(text) => Body::Text(text),
                            Err(e) => Body::Data {
                                len: e.as_bytes().len() as u64,
                                hash: Some(blake3::hash(e.as_bytes()).to_hex().to_string()),
                            },
                        };
                    }
                    // Grown since `lstat`: hashed below, or too large.
                    Err(Unread::TooLarge(..)) => {}
                    Err(Unread::Special(what)) => return Body::Special(what.to_string()),
                    Err(e) => return Body::Unread(e.to_string()),
                }
            }
            match hash_bounded(path, MAX_HASH, unreadable) {
                Ok(hash) => Body::Data {
                    len: meta.len,
                    hash: Some(hash),
                },
                Err(Unread::TooLarge(..)) => Body::Data {
                    len: meta.len,
                    hash: None,
                },
                Err(Unread::Special(what)) => Body::Special(what.to_string()),
                Err(e) => Body::Unread(e.to_string()),
            }
        }
    }
}

/// Whether a body holds everything needed to tell the file changed; for
/// one that does not, `lstat` is compared instead.
fn exact(body: &Option<Body>) -> bool {
    matches!(
        body,
        Some(Body::Text(_) | Body::Dir | Body::Link(_) | Body::Data { hash: Some(_), .. })
    )
}

/// A snapshot, and the watched path below which it stopped at
/// [`MAX_ENTRIES`], if it did.
struct Taken {
    entries: Snapshot,
    cut_off: Option<PathBuf>,
}

/// Reads `paths` (a directory with everything beneath it, except a `.git`
/// directory, whose own entries are watched on their own), with contents
/// when `bodies`. A file whose `lstat` is what `earlier` holds keeps the
/// body read then: the change time says it was not written since.
fn snapshot(
    paths: &[PathBuf],
    bodies: bool,
    earlier: Option<&Snapshot>,
    unreadable: &Unreadable,
) -> Taken {
    snapshot_within(paths, bodies, earlier, MAX_ENTRIES, unreadable)
}

/// [`snapshot`], reading at most `max` entries.
fn snapshot_within(
    paths: &[PathBuf],
    bodies: bool,
    earlier: Option<&Snapshot>,
    max: usize,
    unreadable: &Unreadable,
) -> Taken {
    let mut out = Snapshot::new();
    let mut cut_off = None;
    let mut stack: Vec<(PathBuf, usize)> = paths
        .iter()
        .enumerate()
        .rev()
        .map(|(i, p)| (p.clone(), i))
        .collect();
    while let Some((path, top)) = stack.pop() {
        if out.contains_key(&path) {
            continue;
        }
        if out.len() >= max {
            cut_off.get_or_insert_with(|| paths[top].clone());
            continue;
        }
        let Some(m) = meta(&path) else { continue };
        let mut walk =
            m.kind == Kind::Dir && path.file_name() != Some(std::ffi::OsStr::new(".git"));
        let mut body = bodies.then(|| {
            earlier
                .and_then(|e| e.get(&path))
                .filter(|e| e.meta == m && m.kind != Kind::Dir)
                .and_then(|e| e.body.clone())
                .unwrap_or_else(|| body(&path, &m, unreadable))
        });
        // A directory on the list that leads into a credential store (a
        // link on the way the planner followed, or one planted since) is
        // not listed: its names are the store's (ADR-0092). Below a listed
        // directory nothing leads elsewhere, as links are not followed.
        if walk
            && bodies
            && path == paths[top]
            && let Some(refused) = unreadable.place_of(&path)
        {
            walk = false;
            body = Some(Body::Unread(refused.to_string()));
        }
        if walk {
            match std::fs::read_dir(&path) {
                Ok(entries) => {
                    let mut children: Vec<PathBuf> =
                        entries.filter_map(Result::ok).map(|e| e.path()).collect();
                    children.sort();
                    stack.extend(children.into_iter().rev().map(|c| (c, top)));
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    if bodies {
                        body = Some(Body::Unlisted(e.to_string()));
                    }
                }
            }
        }
        out.insert(path.clone(), Entry { meta: m, body });
    }
    Taken {
        entries: out,
        cut_off,
    }
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
            (None, Some(a))
                if matches!(a.body, None | Some(Body::Dir)) && a.meta.kind == Kind::Dir =>
            {
                continue;
            }
            (None, Some(_)) => What::Added,
            (Some(_), None) => What::Removed,
            (Some(b), Some(a)) => {
                let (bm, am) = (&b.meta, &a.meta);
                let replaced = bm.kind != am.kind || bm.ino != am.ino || bm.dev != am.dev;
                let content = if exact(&b.body) && exact(&a.body) {
                    b.body != a.body
                } else {
                    // Either side not read whole (too large, not listed,
                    // not read at all): what `lstat` says decides.
                    b.body != a.body
                        || bm.len != am.len
                        || bm.ctime != am.ctime
                        || bm.target != am.target
                };
                let changed = if am.kind == Kind::Dir && bm.kind == Kind::Dir {
                    replaced || b.body != a.body
                } else {
                    replaced || content
                };
                if changed {
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

/// What on the list is, at the end, something nd7 could not read whole:
/// reported whether or not it changed, since what it holds is unknown.
fn unreadable_at_the_end(end: &Snapshot, already: &[Finding]) -> Vec<Finding> {
    end.iter()
        .filter_map(|(path, e)| {
            let why = match e.body.as_ref()? {
                Body::Special(what) => format!(
                    "{what} where a file on the list belongs: nd7 does not read it, and what reads it later may block or run"
                ),
                Body::Unlisted(why) => format!(
                    "a directory on the list that cannot be listed ({why}): what is in it was not checked"
                ),
                Body::Unread(why) => {
                    format!("a file on the list that cannot be read ({why}): it was not compared")
                }
                _ => return None,
            };
            (!already.iter().any(|f| f.path == *path)).then(|| Finding {
                path: path.clone(),
                what: What::Found(why),
                before: None,
                after: e.body.clone(),
                after_command: None,
            })
        })
        .collect()
}

/// A finding that is only a reason.
fn found(path: &Path, why: String) -> Finding {
    Finding {
        path: path.to_path_buf(),
        what: What::Found(why),
        before: None,
        after: None,
        after_command: None,
    }
}

/// Claude Code's state file's risky parts ([`claude_state_risky`]), or why
/// they cannot be read. A state not made yet (the first run, through the
/// link `nd7 setup` leaves for it) starts nothing: it reads as an empty
/// one, so Claude Code creating it is no finding, while creating it with an
/// MCP server is. Read following a link (`~/.claude.json` is one), but only
/// ever a regular file, and at most [`MAX_STATE`].
fn claude_state(
    path: &Path,
    own: &[PathBuf],
    unreadable: &Unreadable,
) -> Result<serde_json::Value, String> {
    let bytes = match read_bounded(path, Follow::Yes, MAX_STATE, unreadable) {
        Ok(bytes) => bytes,
        Err(Unread::Missing) => return Ok(claude_state_risky(&serde_json::json!({}), own)),
        Err(e) => return Err(e.to_string()),
    };
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| format!("it is not JSON: {e}"))?;
    Ok(claude_state_risky(&value, own))
}

/// How Claude Code names the run's project in its state: the project
/// itself, and the repository enclosing it.
fn own_project_keys(project: &Path) -> Vec<PathBuf> {
    let mut own = vec![project.to_path_buf()];
    if let Some(top) = project.ancestors().find(|d| d.join(".git").exists()) {
        own.push(top.to_path_buf());
    }
    own
}

fn pretty(value: &Result<serde_json::Value, String>) -> Option<Body> {
    value
        .as_ref()
        .ok()
        .map(|v| Body::Text(serde_json::to_string_pretty(v).unwrap_or_default() + "\n"))
}

/// A run's watch.
pub struct Watch {
    plan: Plan,
    /// What is checked after each command: everything, or (when the holds
    /// are in force) what no hold covers.
    quick: Vec<PathBuf>,
    /// The start snapshot of `quick`, taken before the program starts.
    start: Snapshot,
    /// The start snapshot of what is held, which nothing inside can
    /// change: read beside the program ([`Watch::program_started`]), so it
    /// does not delay its start.
    held: Vec<PathBuf>,
    held_start: Background<Snapshot>,
    /// The roots' directories and the listed names in them, indexed beside
    /// the program for the end-of-run search.
    index: Background<Vec<Index>>,
    claude: Vec<(PathBuf, Result<serde_json::Value, String>)>,
    own: Vec<PathBuf>,
    policy: Policy,
    /// Where nothing is read for the agent (ADR-0092).
    unreadable: std::sync::Arc<Unreadable>,
    /// Presets' places, which the search does not enter.
    caches: Vec<PathBuf>,
    /// Anything changed at or after this time counts as changed during the
    /// session (the start, less the file system's timestamp granularity).
    since: SystemTime,
    seen: Mutex<Seen>,
    /// Grants made during the run, watched from the first command that
    /// ran with them.
    granted: Mutex<Granted>,
}

/// What the watch learned of grants made during the run.
#[derive(Default)]
struct Granted {
    /// Every grant a command has run with, covered or not.
    seen: BTreeSet<PathBuf>,
    /// The grants the list covers ([`grant_roots`]), each with its plan,
    /// its start snapshot and its index.
    watched: Vec<GrantWatch>,
}

struct GrantWatch {
    plan: Plan,
    start: Snapshot,
    /// Whether it is checked after each command too: not when its list
    /// holds more than [`MAX_QUICK`] entries (a granted home's
    /// `~/.vscode`, VS Code's extensions), which the end compares alone.
    quick: bool,
    /// `None` for a grant beneath a root already indexed.
    index: Option<Background<Index>>,
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

/// A root's directories (inode and change time each, taken before its
/// entries are read, so an entry added while it is read shows as a change;
/// the change time, which nothing inside can set back, unlike the
/// modification time), and the listed names found in them.
#[derive(Default)]
struct Index {
    root: PathBuf,
    dirs: Vec<(PathBuf, u64, (i64, i64))>,
    named: Vec<PathBuf>,
    /// Directories that could not be listed, and why.
    unlisted: Vec<(PathBuf, String)>,
    /// How many entries it was allowed, and whether it stopped there.
    budget: usize,
    truncated: bool,
}

/// What reading the directories changed since an [`Index`] again found:
/// findings (a directory that cannot be listed, a search cut off), and the
/// paths with a searched name, and links, to look at.
#[derive(Default)]
struct Rescanned {
    findings: Vec<Finding>,
    named: Vec<PathBuf>,
}

fn dir_stamp(path: &Path) -> Option<(u64, (i64, i64))> {
    let m = std::fs::symlink_metadata(path).ok()?;
    m.is_dir().then(|| (m.ino(), (m.ctime(), m.ctime_nsec())))
}

/// Indexes `root`: every directory below it, at any depth (not into `.git`
/// directories, nor through links, nor into `skip` below it), and the
/// listed names found, reading at most `budget` entries. A directory that
/// cannot be listed is still stamped: if it changes, the end's search tries
/// it again.
fn index(root: &Path, budget: usize, skip: &[PathBuf]) -> Index {
    let mut out = Index {
        root: root.to_path_buf(),
        budget,
        ..Index::default()
    };
    let skip = skipped_below(root, skip);
    let mut stack = vec![root.to_path_buf()];
    let mut visited = 0usize;
    while let Some(dir) = stack.pop() {
        let Some((ino, ctime)) = dir_stamp(&dir) else {
            continue;
        };
        out.dirs.push((dir.clone(), ino, ctime));
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                out.unlisted.push((dir, e.to_string()));
                continue;
            }
        };
        for entry in entries.filter_map(Result::ok) {
            visited += 1;
            if visited > budget {
                out.truncated = true;
                return out;
            }
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let path = entry.path();
            if skip.iter().any(|s| path.starts_with(s)) {
                continue;
            }
            if searched(&name) || entry.file_type().is_ok_and(|t| t.is_symlink()) {
                out.named.push(path.clone());
            }
            if name != ".git" && entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(path);
            }
        }
    }
    out
}

/// Whether a name found by the search is one it looks at: a name on the
/// list, a repository's `.git`, or a `HEAD`, which makes its directory a
/// git directory of its own to git when the user stands in it, whatever
/// the directory's name (git's `is_git_directory` also wants `objects/`
/// and `refs/` or a `commondir`; [`Watch::repository`] reports only what
/// makes git run something, so `HEAD` alone is enough to look).
fn searched(name: &str) -> bool {
    name == "HEAD" || searched_name(name)
}

/// The places of `skip` that can hold an entry found below `root`: those
/// strictly below it (one that holds `root` is not skipped). Worked out once
/// for a walk, so each entry is compared only with these; most walks have
/// none, and then no entry is compared with any.
fn skipped_below<'a>(root: &Path, skip: &'a [PathBuf]) -> Vec<&'a PathBuf> {
    skip.iter()
        .filter(|s| s.starts_with(root) && !root.starts_with(s))
        .collect()
}

fn unlisted_why(why: &str) -> String {
    format!(
        "a directory that changed during the session and cannot be listed ({why}): repositories or files on the list in it were not checked"
    )
}

/// `roots` without those beneath another (indexing the outer one covers
/// them).
fn outermost(roots: &[PathBuf]) -> Vec<PathBuf> {
    roots
        .iter()
        .filter(|r| !roots.iter().any(|o| o != *r && r.starts_with(o)))
        .cloned()
        .collect()
}

#[derive(Default)]
struct Seen {
    last: BTreeMap<PathBuf, Meta>,
    first_after: BTreeMap<PathBuf, String>,
}

impl Watch {
    /// Takes the start snapshot of `plan`'s files. `all_held` says whether
    /// the plan's holds are in force (then only what they do not cover is
    /// checked after each command). `policy` is the run's: its project
    /// and home say which grants the list covers.
    pub fn start(plan: Plan, all_held: bool, policy: &Policy) -> Watch {
        let since = SystemTime::now() - Duration::from_secs(2);
        let (held, quick): (Vec<PathBuf>, Vec<PathBuf>) = plan
            .watched
            .iter()
            .cloned()
            .partition(|p| all_held && plan.held(p));
        let unreadable = std::sync::Arc::new(Unreadable::of(policy));
        let start = snapshot(&quick, true, None, &unreadable).entries;
        let own = own_project_keys(&policy.roots.project);
        let claude = plan
            .claude_state
            .iter()
            .map(|p| (p.clone(), claude_state(p, &own, &unreadable)))
            .collect();
        let last = start
            .iter()
            .map(|(p, e)| (p.clone(), e.meta.clone()))
            .collect();
        let granted = Granted {
            seen: policy.grants.iter().cloned().collect(),
            watched: Vec::new(),
        };
        Watch {
            plan,
            quick,
            start,
            held,
            held_start: Background::new(),
            index: Background::new(),
            claude,
            own,
            caches: caches(&policy.roots.home),
            policy: policy.clone(),
            unreadable,
            since,
            seen: Mutex::new(Seen {
                last,
                first_after: BTreeMap::new(),
            }),
            granted: Mutex::new(granted),
        }
    }

    /// Starts, once the program runs, what can be done beside it: the
    /// snapshot of the held files (nothing inside can change them) and the
    /// roots' index. Reading each directory's time before its entries, the
    /// index misses nothing the program adds meanwhile: an entry added before
    /// a directory is read is found by its change time, one added after by
    /// the directory's.
    pub fn program_started(&self) {
        let (held, unreadable) = (self.held.clone(), self.unreadable.clone());
        self.held_start
            .start(move || snapshot(&held, true, None, &unreadable).entries);
        let roots = outermost(&self.plan.roots);
        let skip = self.caches.clone();
        self.index
            .start(move || roots.iter().map(|r| index(r, MAX_SEARCH, &skip)).collect());
    }

    /// The paths whose changes are reported.
    pub fn watched(&self) -> &[PathBuf] {
        &self.plan.watched
    }

    /// Called before a command through the exit starts, with the grants it
    /// runs under: each one no command had before that the list covers
    /// ([`grant_roots`]) is planned and its files read now, before anything
    /// could write them (only commands get grants), and its directory
    /// indexed beside the command. Returns the grants newly watched.
    pub fn before_command(&self, grants: &[PathBuf]) -> Vec<PathBuf> {
        let Ok(mut granted) = self.granted.lock() else {
            return Vec::new();
        };
        let new: Vec<PathBuf> = grants
            .iter()
            .filter(|g| !granted.seen.contains(*g))
            .cloned()
            .collect();
        if new.is_empty() {
            return Vec::new();
        }
        granted.seen.extend(new.iter().cloned());
        let mut indexed: Vec<PathBuf> = self.plan.roots.clone();
        indexed.extend(granted.watched.iter().flat_map(|g| g.plan.roots.clone()));
        let mut added = Vec::new();
        for root in grant_roots(&self.policy, &new) {
            // The planner recurses once per nested git directory (a
            // grant's `.git/modules/a/modules/a/…`, up to 256), more than
            // the exit's small thread stacks hold: it gets a thread of its
            // own with the main thread's usual stack.
            let (at, policy) = (root.clone(), self.policy.clone());
            let plan = std::thread::Builder::new()
                .stack_size(PLAN_STACK)
                .spawn(move || plan_grant(&at, &policy, &FsTree::of(&policy)))
                .ok()
                .and_then(|t| t.join().ok())
                .unwrap_or_else(|| plan_grant(&root, &self.policy, &FsTree::of(&self.policy)));
            if plan.roots.is_empty() {
                continue;
            }
            let start = snapshot(&plan.watched, true, None, &self.unreadable).entries;
            let quick = start.len() <= MAX_QUICK;
            if quick && let Ok(mut seen) = self.seen.lock() {
                for (p, e) in &start {
                    seen.last.entry(p.clone()).or_insert_with(|| e.meta.clone());
                }
            }
            let index = (!indexed.iter().any(|r| root.starts_with(r))).then(|| {
                let bg = Background::new();
                let (at, skip) = (root.clone(), self.caches.clone());
                bg.start(move || index(&at, MAX_SEARCH, &skip));
                bg
            });
            indexed.push(root.clone());
            granted.watched.push(GrantWatch {
                plan,
                start,
                quick,
                index,
            });
            added.push(root);
        }
        added
    }

    /// What is checked after each command: `quick`, and every grant's list.
    fn quick_paths(&self) -> Vec<PathBuf> {
        let mut paths = self.quick.clone();
        if let Ok(granted) = self.granted.lock() {
            for g in granted.watched.iter().filter(|g| g.quick) {
                paths.extend(g.plan.watched.iter().cloned());
            }
        }
        paths
    }

    /// Checks, after one command through the exit, what no hold covers,
    /// and returns what changed since the last check (each change once).
    pub fn after_command(&self, command: &str) -> Vec<PathBuf> {
        let now: BTreeMap<PathBuf, Meta> =
            snapshot(&self.quick_paths(), false, None, &self.unreadable)
                .entries
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
    /// roots searched for repositories and listed names that appeared or
    /// changed below them.
    pub fn finish(&self) -> Vec<Finding> {
        let granted = self.granted.lock().ok();
        let grants: &[GrantWatch] = granted.as_deref().map_or(&[], |g| &g.watched);
        let mut start = self.start.clone();
        start.extend(
            self.held_start
                .get(|| snapshot(&self.held, true, None, &self.unreadable).entries)
                .iter()
                .map(|(p, e)| (p.clone(), e.clone())),
        );
        let mut watched = self.plan.watched.clone();
        for g in grants {
            start.extend(g.start.iter().map(|(p, e)| (p.clone(), e.clone())));
            watched.extend(g.plan.watched.iter().cloned());
        }
        watched.sort();
        watched.dedup();
        let end = snapshot(&watched, true, Some(&start), &self.unreadable);
        let mut findings = compare(&start, &end.entries);
        findings.extend(unreadable_at_the_end(&end.entries, &findings));
        if let Some(top) = &end.cut_off {
            findings.push(found(
                top,
                format!(
                    "more than {MAX_ENTRIES} entries on the list lie beneath it: those after the first {MAX_ENTRIES} were not compared"
                ),
            ));
        }
        for (path, before) in &self.claude {
            let after = claude_state(path, &self.own, &self.unreadable);
            let why = match (&after, before) {
                (Err(why), _) => format!(
                    "Claude Code's state cannot be read ({why}), so what it starts (MCP servers, allowed tools, folder trust) was not checked"
                ),
                (Ok(_), Err(why)) => format!(
                    "Claude Code's state could not be read when the session started ({why}); what it starts now is shown"
                ),
                (Ok(a), Ok(b)) if a != b => {
                    "Claude Code's MCP servers, allowed tools or folder trust changed".into()
                }
                _ => continue,
            };
            findings.push(Finding {
                path: path.clone(),
                what: What::Found(why),
                before: pretty(before),
                after: pretty(&after),
                after_command: None,
            });
        }
        let mut indexes: Vec<&Index> = self
            .index
            .get(|| {
                outermost(&self.plan.roots)
                    .iter()
                    .map(|r| index(r, MAX_SEARCH, &self.caches))
                    .collect()
            })
            .iter()
            .collect();
        for g in grants {
            if let (Some(bg), Some(root)) = (&g.index, g.plan.roots.first()) {
                indexes.push(bg.get(|| index(root, MAX_SEARCH, &self.caches)));
            }
        }
        let mut git_dirs = self.plan.git_dirs.clone();
        for g in grants {
            git_dirs.extend(g.plan.git_dirs.iter().cloned());
        }
        findings.extend(self.search(&indexes, &watched, &git_dirs));
        for g in &git_dirs {
            findings.extend(self.stopped_sequences(g));
        }
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

    /// Repositories and listed names below the roots, and git directories
    /// under the known ones' `modules` and `worktrees`, that appeared or
    /// changed during the run and `watched` does not cover. Only
    /// directories whose inode or change time changed since the index are
    /// read again (and every new directory below them, whole); listed names
    /// the index found are looked at by their change time. A search cut
    /// off, or a directory that cannot be listed, is a finding.
    fn search(
        &self,
        indexes: &[&Index],
        watched: &[PathBuf],
        known_git_dirs: &[PathBuf],
    ) -> Vec<Finding> {
        let covered = |path: &Path| watched.iter().any(|w| path.starts_with(w));
        let roots: Vec<PathBuf> = indexes.iter().map(|i| i.root.clone()).collect();
        let mut out = Vec::new();
        let mut named: BTreeSet<PathBuf> = BTreeSet::new();
        for index in indexes {
            out.extend(self.index_gaps(index));
            named.extend(index.named.iter().cloned());
            let rescanned = self.rescan(index);
            out.extend(rescanned.findings);
            named.extend(rescanned.named);
        }
        let mut git_dirs: Vec<PathBuf> = known_git_dirs.to_vec();
        for path in named.into_iter().filter(|p| !covered(p)) {
            out.extend(self.named_path(&path, &roots, &mut git_dirs, &covered));
        }
        out.extend(self.added_git_dirs(git_dirs, known_git_dirs));
        out
    }

    /// What the index taken when the session started missed: a search cut
    /// off, and directories it could not list that changed during the run
    /// (the index may have been taken after).
    fn index_gaps(&self, index: &Index) -> Vec<Finding> {
        let mut out = Vec::new();
        if index.truncated {
            out.push(found(
                &index.root,
                format!(
                    "the search below it for repositories and files on the list was cut off at {} entries when the session started: what lies beyond was not checked",
                    index.budget
                ),
            ));
        }
        for (dir, why) in &index.unlisted {
            if self.changed_since(dir) {
                out.push(found(dir, unlisted_why(why)));
            }
        }
        out
    }

    /// Directories changed since the index: their entries, and every new
    /// directory below them, whole, within the index's budget.
    fn rescan(&self, index: &Index) -> Rescanned {
        let mut out = Rescanned::default();
        let known: BTreeSet<&Path> = index.dirs.iter().map(|(p, _, _)| p.as_path()).collect();
        let mut stack: Vec<PathBuf> = index
            .dirs
            .iter()
            .filter(|(p, ino, ctime)| dir_stamp(p) != Some((*ino, *ctime)))
            .map(|(p, _, _)| p.clone())
            .collect();
        let skip = skipped_below(&index.root, &self.caches);
        let mut visited = 0usize;
        while let Some(dir) = stack.pop() {
            let entries = match std::fs::read_dir(&dir) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    if !index.unlisted.iter().any(|(d, _)| *d == dir) {
                        out.findings.push(found(&dir, unlisted_why(&e.to_string())));
                    }
                    continue;
                }
            };
            for entry in entries.filter_map(Result::ok) {
                visited += 1;
                if visited > index.budget {
                    out.findings.push(found(
                        &index.root,
                        format!(
                            "the search below it for repositories and files on the list was cut off at {} entries when the session ended: what lies beyond was not checked",
                            index.budget
                        ),
                    ));
                    stack.clear();
                    break;
                }
                let path = entry.path();
                if skip.iter().any(|s| path.starts_with(s)) {
                    continue;
                }
                let name = entry.file_name();
                let name = name.to_string_lossy();
                if searched(&name) || entry.file_type().is_ok_and(|t| t.is_symlink()) {
                    out.named.push(path.clone());
                }
                if name != ".git"
                    && !known.contains(path.as_path())
                    && entry.file_type().is_ok_and(|t| t.is_dir())
                {
                    stack.push(path);
                }
            }
        }
        out
    }

    /// What one path with a searched name (or a link) found below the roots
    /// reports; the git directories it turns out to be join `git_dirs`, so
    /// that each is reported once and its submodules and worktrees are
    /// searched after.
    fn named_path(
        &self,
        path: &Path,
        roots: &[PathBuf],
        git_dirs: &mut Vec<PathBuf>,
        covered: &dyn Fn(&Path) -> bool,
    ) -> Vec<Finding> {
        let mut out = Vec::new();
        let is_dir = std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir());
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if !searched(&name) {
            // A link (the index and search note every one).
            if self.changed_since(path) {
                out.extend(self.beyond_link(path, roots, git_dirs));
            }
        } else if path.file_name() == Some(std::ffi::OsStr::new("HEAD")) {
            // Any directory with a `HEAD` is searched as a repository: git
            // takes one for a bare repository with `objects/` and `refs/`
            // beside it (the project itself, once its `.git/HEAD` is
            // garbage; a bare repository in a subdirectory), and this is
            // looser, so it reports more.
            let dir = path.parent().unwrap_or(path).to_path_buf();
            if !git_dirs.contains(&dir) && !covered(&dir) {
                out.extend(self.repository(&dir));
                git_dirs.push(dir);
            }
        } else if path.file_name() == Some(std::ffi::OsStr::new(".git")) {
            if is_dir {
                git_dirs.push(path.to_path_buf());
                out.extend(self.repository(path));
            } else if self.changed_since(path) {
                out.extend(self.repository_link(path));
            }
        } else {
            out.extend(self.listed_in_subdirectory(path, covered));
        }
        out
    }

    /// A `.git` file or link that appeared or changed during the run, and
    /// the repository it leads to.
    fn repository_link(&self, path: &Path) -> Vec<Finding> {
        let mut out = Vec::new();
        let m = meta(path);
        out.push(Finding {
            path: path.to_path_buf(),
            what: What::Found(
                "a repository link that appeared or changed during the session".into(),
            ),
            before: None,
            after: m.as_ref().map(|m| body(path, m, &self.unreadable)),
            after_command: None,
        });
        let dir = path.parent().unwrap_or(path).to_path_buf();
        // Git follows a link as any path, and reads a file
        // for its `gitdir:`.
        let target = match m.as_ref().map(|m| m.kind) {
            Some(Kind::Link) => std::fs::read_link(path).ok().map(|t| dir.join(t)),
            _ => read_bounded(path, Follow::No, MAX_CONFIG, &self.unreadable)
                .ok()
                .and_then(|t| gitdir_of(&t).map(|d| dir.join(d))),
        };
        // Followed only where the floor lets the agent read:
        // a `gitdir:` into a credential store is named, and
        // nothing there is read (ADR-0092).
        match target.as_ref().map(|t| (t, self.unreadable.place_of(t))) {
            Some((_, Some(refused))) => out.push(found(
                path,
                format!(
                    "a repository link that leads where the floor keeps the agent from reading: {refused}"
                ),
            )),
            Some((target, None)) => out.extend(self.repository(target)),
            None => {}
        }
        out
    }

    /// Files on the list beneath the directory of `path` (a listed name
    /// found below the roots) that changed during the run.
    fn listed_in_subdirectory(&self, path: &Path, covered: &dyn Fn(&Path) -> bool) -> Vec<Finding> {
        let mut out = Vec::new();
        let parent = path.parent().unwrap_or(path);
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let listed: Vec<PathBuf> = listed_beneath(parent, &name)
            .into_iter()
            .filter(|p| !covered(p))
            .collect();
        let taken = snapshot(&listed, true, None, &self.unreadable);
        for (p, e) in taken.entries {
            let unreadable = matches!(
                e.body,
                Some(Body::Special(_) | Body::Unlisted(_) | Body::Unread(_))
            );
            let new_dir = e.meta.kind == Kind::Dir && !unreadable;
            if !new_dir && !covered(&p) && self.changed_since(&p) {
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
        if let Some(top) = taken.cut_off {
            out.push(found(
                &top,
                format!(
                    "more than {MAX_ENTRIES} entries on the list lie beneath it: those after the first {MAX_ENTRIES} were not compared"
                ),
            ));
        }
        out
    }

    /// Submodules and worktrees added during the run: repositories under
    /// the `modules` and `worktrees` of every git directory the search
    /// knows of, that are not among the known ones.
    fn added_git_dirs(&self, git_dirs: Vec<PathBuf>, known_git_dirs: &[PathBuf]) -> Vec<Finding> {
        let mut out = Vec::new();
        let known: BTreeSet<&PathBuf> = known_git_dirs.iter().collect();
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
                        if std::fs::symlink_metadata(p.join("HEAD")).is_ok() {
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

    /// The repository git would use in the directory a new link in a
    /// root leads to, when that lies outside every root (within one, the
    /// search finds it): git starts from the physical directory, so a user
    /// who enters the link uses the first `.git` or directory with a `HEAD`
    /// at or above where it leads. Reported as [`Watch::repository`]
    /// reports, so only what changed during the run and makes git run
    /// something; a `.git` file or link there is followed as git follows
    /// it, never into a place the floor keeps unreadable.
    fn beyond_link(
        &self,
        link: &Path,
        roots: &[PathBuf],
        git_dirs: &mut Vec<PathBuf>,
    ) -> Vec<Finding> {
        let Ok(target) = std::fs::canonicalize(link) else {
            return Vec::new();
        };
        if !target.is_dir() || roots.iter().any(|r| target.starts_with(r)) {
            return Vec::new();
        }
        for at in target.ancestors() {
            let dot_git = at.join(".git");
            let (git_dir, kind) = match std::fs::symlink_metadata(&dot_git) {
                Ok(m) if m.is_dir() => (Some(dot_git.clone()), Kind::Dir),
                Ok(m) => (None, kind_of(m.file_type())),
                Err(_) if std::fs::symlink_metadata(at.join("HEAD")).is_ok() => {
                    (Some(at.to_path_buf()), Kind::Dir)
                }
                Err(_) => continue,
            };
            let git_dir = match (git_dir, kind) {
                (Some(d), _) => Some(d),
                (None, Kind::Link) => std::fs::canonicalize(&dot_git).ok(),
                (None, _) => read_bounded(&dot_git, Follow::No, MAX_CONFIG, &self.unreadable)
                    .ok()
                    .and_then(|t| gitdir_of(&t).map(|d| at.join(d))),
            };
            let Some(git_dir) = git_dir else {
                return Vec::new();
            };
            if let Some(refused) = self.unreadable.place_of(&git_dir) {
                return vec![found(
                    link,
                    format!(
                        "a link to a directory whose repository lies where the floor keeps the agent from reading: {refused}"
                    ),
                )];
            }
            if git_dirs.contains(&git_dir) {
                return Vec::new();
            }
            git_dirs.push(git_dir.clone());
            return self.repository(&git_dir);
        }
        Vec::new()
    }

    /// A git directory not held or watched from the start: reported when
    /// something in it that makes git run a program changed during the
    /// session and is not what `git init` or `git clone` write.
    fn repository(&self, git_dir: &Path) -> Vec<Finding> {
        let mut out = Vec::new();
        let config = git_dir.join("config");
        if self.changed_since(&config) {
            match read_bounded(&config, Follow::No, MAX_CONFIG, &self.unreadable) {
                Ok(bytes) => {
                    let text = String::from_utf8_lossy(&bytes).into_owned();
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
                Err(Unread::Missing) => {}
                Err(why) => out.push(found(
                    &config,
                    format!(
                        "a repository whose configuration cannot be read ({why}): what it makes git run was not checked"
                    ),
                )),
            }
        }
        for name in ["commondir", "config.worktree", "info/attributes"] {
            let p = git_dir.join(name);
            if let Some(m) = meta(&p).filter(|_| self.changed_since(&p)) {
                out.push(Finding {
                    path: p.clone(),
                    what: What::Found("a repository file that changes what git runs".into()),
                    before: None,
                    after: Some(body(&p, &m, &self.unreadable)),
                    after_command: None,
                });
            }
        }
        out.extend(self.stopped_sequences(git_dir));
        let hooks = git_dir.join("hooks");
        match std::fs::read_dir(&hooks) {
            Ok(entries) => {
                for h in entries.filter_map(Result::ok) {
                    let p = h.path();
                    let sample = p.extension().is_some_and(|e| e == "sample");
                    if !sample && let Some(m) = meta(&p).filter(|_| self.changed_since(&p)) {
                        out.push(Finding {
                            path: p.clone(),
                            what: What::Found("a git hook".into()),
                            before: None,
                            after: Some(body(&p, &m, &self.unreadable)),
                            after_command: None,
                        });
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) if self.changed_since(&hooks) => out.push(found(
                &hooks,
                format!("a repository's hooks that cannot be listed ({e}): they were not checked"),
            )),
            Err(_) => {}
        }
        out
    }

    /// A rebase or cherry-pick left stopped, changed during the session,
    /// whose remaining steps include `exec`: `git rebase --continue` (which
    /// `git status` suggests) runs them outside the floor. Not held: a
    /// rebase inside must write its list (ADR-0138).
    fn stopped_sequences(&self, git_dir: &Path) -> Vec<Finding> {
        let mut out = Vec::new();
        for name in ["rebase-merge/git-rebase-todo", "sequencer/todo"] {
            let p = git_dir.join(name);
            if !self.changed_since(&p) {
                continue;
            }
            let Ok(bytes) = read_bounded(&p, Follow::No, MAX_CONFIG, &self.unreadable) else {
                continue;
            };
            if todo_runs_commands(&bytes) {
                out.push(Finding {
                    path: p.clone(),
                    what: What::Found(
                        "a stopped rebase whose remaining steps run commands (`exec`): `git rebase --continue` runs them, `git rebase --abort` drops them".into(),
                    ),
                    before: None,
                    after: Some(Body::Text(String::from_utf8_lossy(&bytes).into_owned())),
                    after_command: None,
                });
            }
        }
        out
    }
}

/// Whether a rebase's or the sequencer's list of steps has an `exec`
/// (`x`) line, one git would run: its first word, after blanks; comment
/// lines start with another word.
fn todo_runs_commands(todo: &[u8]) -> bool {
    todo.split(|&b| b == b'\n').any(|line| {
        let word = line
            .trim_ascii_start()
            .split(|b| b.is_ascii_whitespace())
            .next()
            .unwrap_or_default();
        word == b"exec" || word == b"x"
    })
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

    /// Guards the rebase report: only an `exec` step (or its `x` short
    /// form) runs a command; other steps and comments do not.
    #[test]
    fn a_todo_list_runs_commands_only_with_an_exec_step() {
        assert!(todo_runs_commands(b"pick 1234 one\nexec make test\n"));
        assert!(todo_runs_commands(b"break\n  x touch pwned\n"));
        assert!(todo_runs_commands(b"x\ttouch pwned"));
        assert!(!todo_runs_commands(
            b"pick 1234 exec\n# exec in a comment\nbreak\n"
        ));
        assert!(!todo_runs_commands(b"executable 1\nxx 2\n"));
    }

    /// Guards the bounds of the search and the snapshot: stopping at one is
    /// a finding that names where, never a silent pass.
    #[test]
    fn a_search_or_snapshot_cut_off_is_a_finding() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        std::fs::create_dir_all(root.join("p/.vscode")).expect("mkdir");
        for i in 0..20 {
            std::fs::write(root.join(format!("p/.vscode/f{i:02}")), "{}\n").expect("w");
        }
        let p = policy(root);
        let watch = Watch::start(plan(&p, &FsTree::of(&p)), false, &p);
        let whole = index(&root.join("p"), MAX_SEARCH, &[]);
        assert!(!whole.truncated);
        assert!(watch.search(&[&whole], watch.watched(), &[]).is_empty());
        let cut = index(&root.join("p"), 10, &[]);
        assert!(cut.truncated);
        let found = watch.search(&[&cut], watch.watched(), &[]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].path, root.join("p"));
        assert!(
            report::label(&found[0].what).contains("cut off at 10 entries"),
            "{found:?}"
        );
        let taken = snapshot_within(
            &[root.join("p/.vscode")],
            false,
            None,
            5,
            &Unreadable::default(),
        );
        assert_eq!(taken.entries.len(), 5);
        assert_eq!(taken.cut_off, Some(root.join("p/.vscode")));
        assert_eq!(
            snapshot(
                &[root.join("p/.vscode")],
                false,
                None,
                &Unreadable::default()
            )
            .cut_off,
            None
        );
    }

    /// A grant made during the run is read before its first command
    /// and compared at the end; one whose list is too large to check after
    /// every command is still compared at the end.
    #[test]
    fn a_grant_made_during_the_session_is_read_before_its_first_command() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        for d in ["p", "small/.git/hooks", "big/.idea"] {
            std::fs::create_dir_all(root.join(d)).expect("mkdir");
        }
        std::fs::write(root.join("small/.git/HEAD"), "ref: refs/heads/main\n").expect("w");
        std::fs::write(root.join("small/.git/config"), "[core]\n").expect("w");
        for i in 0..=MAX_QUICK {
            std::fs::write(root.join(format!("big/.idea/{i}")), "").expect("w");
        }
        let p = policy(root);
        let watch = Watch::start(plan(&p, &FsTree::of(&p)), false, &p);
        let grants = [root.join("small"), root.join("big")];
        assert_eq!(watch.before_command(&grants), grants);
        assert!(watch.before_command(&grants).is_empty(), "once each");
        let quick = watch.quick_paths();
        assert!(quick.contains(&root.join("small/.git/hooks")), "{quick:?}");
        assert!(!quick.contains(&root.join("big/.idea")), "{quick:?}");
        std::fs::write(root.join("small/.git/hooks/pre-commit"), "evil\n").expect("w");
        std::fs::write(root.join("big/.idea/0"), "evil\n").expect("w");
        assert_eq!(
            watch.after_command("plant"),
            [root.join("small/.git/hooks/pre-commit")]
        );
        let found: Vec<PathBuf> = watch.finish().into_iter().map(|f| f.path).collect();
        assert_eq!(
            found,
            [
                root.join("big/.idea/0"),
                root.join("small/.git/hooks/pre-commit")
            ]
        );
    }

    /// Claude Code making its state on a first run (through the link setup
    /// left) is no finding; making it with an MCP server is.
    #[test]
    fn a_state_made_during_the_session_counts_only_for_what_it_starts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("claude.json");
        let before = claude_state(&state, &[], &Unreadable::default());
        std::fs::write(&state, "{\"numStartups\": 1}").expect("w");
        assert_eq!(claude_state(&state, &[], &Unreadable::default()), before);
        std::fs::write(&state, r#"{"mcpServers": {"x": {"command": "sh"}}}"#).expect("w");
        assert_ne!(claude_state(&state, &[], &Unreadable::default()), before);
        std::fs::write(&state, "not json").expect("w");
        assert!(
            claude_state(&state, &[], &Unreadable::default())
                .is_err_and(|e| e.contains("not JSON"))
        );
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
        let watch = Watch::start(plan(&p, &FsTree::of(&p)), false, &p);

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
        let text = report::render(&found, "the program exited with status 0", None).changes;
        assert!(text.contains("+    fsmonitor = evil"), "{text}");
    }
}
