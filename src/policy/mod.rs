//! What a sandboxed session may do, and how that is rendered for a kernel
//! that only knows allow-rules. Pure: the file system is consulted only
//! through the directory lister the caller passes in.
//!
//! A session reads everywhere except `~/.ssh`, `~/.aws` and `~/.nd7`, and
//! writes only to its write roots: the project, the temp directory, `~/.claude`,
//! Claude Code's caches, the terminal and `/dev/null` (the floor), plus the
//! session's grants for single commands. Nothing under `~/.nd7` is ever
//! writable, whatever is granted, the whole home included.
//!
//! Landlock allows; it cannot deny beneath an allowed directory. "Everything
//! except D" is therefore rendered as its complement: along the path from the
//! root down to D, every sibling is allowed on its own (see [`complement`]).
//! That complement is computed from what exists when the rules are built:
//! entries created later next to those paths (in `/`, in the home directory)
//! are neither readable nor writable, which fails closed.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub mod deferred;
pub mod seatbelt;

/// The directories a session's rules are built around, each already
/// resolved to its real path (no symlinks), home from the account database.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Roots {
    pub project: PathBuf,
    pub temp: PathBuf,
    pub home: PathBuf,
    /// nd7's state directory (`$XDG_STATE_HOME/nd7`). Claude Code's hooks,
    /// `nd7 record` among them, run inside the floor, so the session logs
    /// under it must be writable there (ADR-0014); the vault keys beside
    /// them must not even be readable.
    pub state: PathBuf,
    /// `nd7-exec`, the floor's one exit. On macOS it starts outside the
    /// sandbox, so no profile may let it be replaced.
    pub exit: PathBuf,
}

/// A session's rules: its roots and the grants `nd7 allow` added.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    #[serde(flatten)]
    pub roots: Roots,
    #[serde(default)]
    pub grants: Vec<PathBuf>,
}

/// Why a grant was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    #[error("nd7's own records can never be made writable")]
    OwnRecords,
}

/// Home-relative directories no sandboxed process may read (or write).
pub const UNREADABLE: &[&str] = &[".ssh", ".aws", ".nd7"];

/// Home-relative directories Claude Code writes to keep its state, beside
/// `~/.claude` (which holds `claude.json` too: ADR-0013).
pub const CLAUDE_STATE: &[&str] = &[
    ".claude",
    ".cache/claude",
    ".cache/claude-cli-nodejs",
    ".local/state/claude",
];

/// Device files every process expects to write.
pub const DEVICES: &[&str] = &["/dev/null", "/dev/tty", "/dev/zero", "/dev/full"];

impl Policy {
    /// nd7's own records: never writable from inside.
    pub fn nd7_dir(&self) -> PathBuf {
        self.roots.home.join(".nd7")
    }

    /// What no sandboxed process may read: `~/.ssh`, `~/.aws`, `~/.nd7`, and
    /// the machine's vault keys.
    pub fn unreadable(&self) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = UNREADABLE.iter().map(|d| self.roots.home.join(d)).collect();
        out.push(self.vault_dir());
        out
    }

    /// Where the session logs live, written by `nd7 record` from inside.
    pub fn logs_dir(&self) -> PathBuf {
        self.roots.state.join("sessions")
    }

    /// Where the machine's vault key and enrolment live.
    pub fn vault_dir(&self) -> PathBuf {
        self.roots.state.join("vault")
    }

    /// The floor's write roots, before anything is taken out of them.
    pub fn floor_writes(&self) -> Vec<PathBuf> {
        let mut roots = vec![self.roots.project.clone(), self.roots.temp.clone()];
        roots.extend(CLAUDE_STATE.iter().map(|d| self.roots.home.join(d)));
        roots.push(self.logs_dir());
        roots.extend(DEVICES.iter().map(PathBuf::from));
        roots
    }

    /// One command's write roots: the floor's and the grants.
    pub fn command_writes(&self) -> Vec<PathBuf> {
        let mut roots = self.floor_writes();
        roots.extend(self.grants.iter().cloned());
        roots
    }

    /// Adds `path` (already resolved) as a write root for single commands.
    /// Returns whether it was new. Nothing under `~/.nd7` can be granted; a
    /// grant above it (the home directory, `/`) is kept, and the rendering
    /// still carves `~/.nd7` out.
    pub fn allow(&mut self, path: &Path) -> Result<bool, GrantError> {
        if path.starts_with(self.nd7_dir()) {
            return Err(GrantError::OwnRecords);
        }
        if self.grants.iter().any(|g| g == path) {
            return Ok(false);
        }
        self.grants.push(path.to_path_buf());
        Ok(true)
    }

    /// Removes the grant of exactly `path`. Returns whether there was one.
    pub fn deny(&mut self, path: &Path) -> bool {
        let before = self.grants.len();
        self.grants.retain(|g| g != path);
        self.grants.len() != before
    }

    /// What must never be written, whatever the write roots say.
    pub fn unwritable(&self) -> Vec<PathBuf> {
        let mut out = self.unreadable();
        if !out.contains(&self.nd7_dir()) {
            out.push(self.nd7_dir());
        }
        out
    }
}

/// The paths beneath which everything under `root` except the subtrees of
/// `excluded` can be reached, as they stand now: `[root]` when nothing
/// excluded lies under it, nothing when `root` lies in an excluded subtree,
/// otherwise the siblings along the way down to each excluded path.
/// `list` gives a directory's entries (full paths).
pub fn complement(
    root: &Path,
    excluded: &[PathBuf],
    list: &dyn Fn(&Path) -> Vec<PathBuf>,
) -> Vec<PathBuf> {
    if excluded.iter().any(|e| root.starts_with(e)) {
        return Vec::new();
    }
    if !excluded.iter().any(|e| e.starts_with(root)) {
        return vec![root.to_path_buf()];
    }
    let mut out = Vec::new();
    for child in list(root) {
        out.extend(complement(&child, excluded, list));
    }
    out
}

/// The rules for Landlock: paths readable beneath, and paths writable (and
/// readable) beneath.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LandlockRules {
    pub read: Vec<PathBuf>,
    pub write: Vec<PathBuf>,
}

/// The Landlock rules for `writes` (the floor's or one command's), with the
/// unreadable and unwritable subtrees carved out.
pub fn landlock_rules(
    policy: &Policy,
    writes: &[PathBuf],
    list: &dyn Fn(&Path) -> Vec<PathBuf>,
) -> LandlockRules {
    let read = complement(Path::new("/"), &policy.unreadable(), list);
    let unwritable = policy.unwritable();
    let mut write = Vec::new();
    for root in writes {
        for path in complement(root, &unwritable, list) {
            if !write.contains(&path) {
                write.push(path);
            }
        }
    }
    LandlockRules { read, write }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A file tree held in memory: directory -> entries.
    fn tree(paths: &[&str]) -> BTreeMap<PathBuf, Vec<PathBuf>> {
        let mut t: BTreeMap<PathBuf, Vec<PathBuf>> = BTreeMap::new();
        for p in paths {
            let p = PathBuf::from(p);
            for a in p.ancestors().collect::<Vec<_>>().windows(2) {
                let (child, parent) = (a[0].to_path_buf(), a[1].to_path_buf());
                let entries = t.entry(parent).or_default();
                if !entries.contains(&child) {
                    entries.push(child);
                }
            }
        }
        t
    }

    fn policy(grants: &[&str]) -> Policy {
        Policy {
            roots: Roots {
                project: "/home/u/proj".into(),
                temp: "/tmp".into(),
                home: "/home/u".into(),
                state: "/home/u/.local/state/nd7".into(),
                exit: "/usr/bin/nd7-exec".into(),
            },
            grants: grants.iter().map(PathBuf::from).collect(),
        }
    }

    const FS: &[&str] = &[
        "/usr/bin/sh",
        "/etc/passwd",
        "/tmp/x",
        "/home/other/f",
        "/home/u/.ssh/id",
        "/home/u/.aws/creds",
        "/home/u/.nd7/sessions/1/record.json",
        "/home/u/.bashrc",
        "/home/u/proj/src/main.rs",
        "/home/u/.claude/settings.json",
        "/home/u/docs/a",
        "/home/u/.local/state/nd7/sessions/s1/events.ndjson",
        "/home/u/.local/state/nd7/vault/machine.key",
        "/home/u/.local/bin/tool",
    ];

    fn paths(v: &[&str]) -> Vec<PathBuf> {
        v.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn reads_are_everything_but_the_three_directories() {
        let t = tree(FS);
        let list = |p: &Path| t.get(p).cloned().unwrap_or_default();
        let rules = landlock_rules(&policy(&[]), &[], &list);
        let mut read = rules.read.clone();
        read.sort();
        assert_eq!(
            read,
            paths(&[
                "/etc",
                "/home/other",
                "/home/u/.bashrc",
                "/home/u/.claude",
                "/home/u/.local/bin",
                "/home/u/.local/state/nd7/sessions",
                "/home/u/docs",
                "/home/u/proj",
                "/tmp",
                "/usr"
            ])
        );
        for secret in [
            "/home/u/.ssh/id",
            "/home/u/.aws/creds",
            "/home/u/.nd7/sessions/1/record.json",
            "/home/u/.local/state/nd7/vault/machine.key",
        ] {
            assert!(
                !read.iter().any(|r| Path::new(secret).starts_with(r)),
                "{secret} is readable"
            );
        }
    }

    #[test]
    fn no_grant_reaches_under_nd7_not_even_the_whole_home() {
        let t = tree(FS);
        let list = |p: &Path| t.get(p).cloned().unwrap_or_default();
        let p = policy(&["/home/u", "/home/u/.nd7/sessions", "/"]);
        let rules = landlock_rules(&p, &p.command_writes(), &list);
        for never in [
            "/home/u/.nd7/sessions/1/record.json",
            "/home/u/.nd7/new",
            "/home/u/.ssh/id",
        ] {
            assert!(
                !rules.write.iter().any(|w| Path::new(never).starts_with(w)),
                "{never} is writable: {:?}",
                rules.write
            );
        }
        for yes in [
            "/home/u/docs/a",
            "/home/u/.bashrc",
            "/home/u/proj/src/main.rs",
            "/etc/passwd",
        ] {
            assert!(
                rules.write.iter().any(|w| Path::new(yes).starts_with(w)),
                "{yes} is not writable"
            );
        }
    }

    #[test]
    fn the_floor_writes_the_project_temp_and_claude_state_only() {
        let t = tree(FS);
        let list = |p: &Path| t.get(p).cloned().unwrap_or_default();
        let p = policy(&["/home/u/docs"]);
        let floor = landlock_rules(&p, &p.floor_writes(), &list);
        assert!(floor.write.contains(&PathBuf::from("/home/u/proj")));
        assert!(floor.write.contains(&PathBuf::from("/home/u/.claude")));
        assert!(floor.write.contains(&PathBuf::from("/dev/null")));
        assert!(
            floor
                .write
                .contains(&PathBuf::from("/home/u/.local/state/nd7/sessions"))
        );
        assert!(
            !floor
                .write
                .iter()
                .any(|w| Path::new("/home/u/docs/a").starts_with(w))
        );
        let command = landlock_rules(&p, &p.command_writes(), &list);
        assert!(command.write.contains(&PathBuf::from("/home/u/docs")));
    }

    #[test]
    fn grants_are_exact_paths_and_never_under_nd7() {
        let mut p = policy(&[]);
        assert_eq!(p.allow(Path::new("/home/u/docs")), Ok(true));
        assert_eq!(p.allow(Path::new("/home/u/docs")), Ok(false));
        assert_eq!(
            p.allow(Path::new("/home/u/.nd7")),
            Err(GrantError::OwnRecords)
        );
        assert_eq!(
            p.allow(Path::new("/home/u/.nd7/sessions/1")),
            Err(GrantError::OwnRecords)
        );
        // A sibling whose name merely starts the same way is not nd7's.
        assert_eq!(p.allow(Path::new("/home/u/.nd7x")), Ok(true));
        assert_eq!(p.allow(Path::new("/home/u")), Ok(true));
        assert!(!p.deny(Path::new("/home/u/docs/sub")));
        assert!(p.deny(Path::new("/home/u/docs")));
        assert!(!p.deny(Path::new("/home/u/docs")));
        assert_eq!(p.grants, paths(&["/home/u/.nd7x", "/home/u"]));
    }

    #[test]
    fn a_policy_reads_back_as_written() {
        let p = policy(&["/home/u/docs", "/srv/a \"quoted\"\nline"]);
        let text = serde_json::to_string(&p).expect("serialises");
        assert!(
            text.starts_with(
                r#"{"project":"/home/u/proj","temp":"/tmp","home":"/home/u","state":"/home/u/.local/state/nd7","exit":"/usr/bin/nd7-exec","grants":"#
            )
        );
        assert_eq!(serde_json::from_str::<Policy>(&text).expect("parses"), p);
    }
}
