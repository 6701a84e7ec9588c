//! What a sandboxed session may do, and how that is rendered for a kernel
//! that only knows allow-rules. Pure: the file system is consulted only
//! through the directory lister the caller passes in.
//!
//! A session reads everywhere except the credential stores ([`secrets`]),
//! `~/.nd7` and nd7's vault keys, and writes only to its write roots: the
//! project, the temp directory, the agent's state (`~/.claude` and Claude
//! Code's caches, or `~/.codex` for Codex), the
//! terminal and `/dev/null` (the floor), plus the session's grants for single
//! commands. Nothing under `~/.nd7` is ever writable, whatever is granted,
//! the whole home included.
//!
//! Paths are data here; what a path leads to on disk is the platform code's
//! business. Two facts from it are kept in the policy: the real places the
//! secrets' links lead to (resolved once, when the session starts, and
//! listed beside the names), and the identity ([`Identity`]) of each write
//! root and grant when it was pinned, so that a path re-pointed later is
//! noticed and left out rather than followed (ADR-0028).
//!
//! Landlock allows; it cannot deny beneath an allowed directory. "Everything
//! except D" is therefore rendered as its complement: along the path from the
//! root down to D, every sibling is allowed on its own (see [`complement`]).
//! That complement is computed from what exists when the rules are built:
//! entries created later next to those paths (in `/`, in the home directory)
//! are neither readable nor writable, which fails closed.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub mod deferred;
pub mod git_config;
pub mod grants;
pub mod net;
pub mod refusal;
pub mod seatbelt;
pub mod secrets;

/// The directories a session's rules are built around, each already
/// resolved to its real path (no symlinks), home from the account database.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Roots {
    pub project: PathBuf,
    pub temp: PathBuf,
    pub home: PathBuf,
    /// nd7's state directory (`$XDG_STATE_HOME/nd7`): the session logs,
    /// read-only inside (`nd7 run` appends for the hooks; ADR-0031), and the
    /// vault keys beside them, not even readable.
    pub state: PathBuf,
    /// `nd7-exec`, the floor's one exit. On macOS it starts outside the
    /// sandbox, so no profile may let it be replaced.
    pub exit: PathBuf,
}

/// A session's rules: its roots, the credential stores, the grants `nd7
/// allow` added, and what each write root and grant was when it was pinned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    #[serde(flatten)]
    pub roots: Roots,
    #[serde(default)]
    pub grants: Vec<PathBuf>,
    /// What no sandboxed process may read besides nd7's own records: the
    /// credential stores, each as named and, where links lead elsewhere,
    /// also where it really is.
    #[serde(default)]
    pub secrets: Vec<PathBuf>,
    /// Where devices can be reached outside `/dev` (a bind of `/dev`'s
    /// filesystem, a devtmpfs or devpts mounted elsewhere), found in the
    /// mount table when the session starts: unreadable like the credential
    /// stores, but not one of them, so refusals and grants say what they are.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<PathBuf>,
    /// The identity each write root and grant had when it was pinned (roots
    /// when the session started, grants when they were made). On Linux a
    /// write root or grant without a pin is not opened.
    #[serde(default)]
    pub pins: Vec<Pin>,
    /// The names grants were asked for by, when they differ from the
    /// resolved path (a link the user typed), so `nd7 deny` finds a grant
    /// by any of them.
    #[serde(default)]
    pub aliases: Vec<Alias>,
    /// The terminal `nd7 run` was started on (Linux: a device under
    /// [`TERMINALS`], or a console: [`own_terminal_device`]), the one
    /// terminal device that stays readable by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminal: Option<PathBuf>,
    /// Whose state directories are write roots of the floor.
    #[serde(default)]
    pub agent: AgentState,
    /// A path that exists nowhere, which this session's Seatbelt profiles
    /// alone deny reading (macOS): by it `nd7 run` tells the processes in
    /// this session's sandboxes from every other process of the user when
    /// the session ends, however they left its tree (ADR-0075). `None` on
    /// Linux, whose keeper knows the session's processes without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mark: Option<PathBuf>,
    /// The port on 127.0.0.1 where this session's egress proxy listens
    /// (macOS): the one place the Seatbelt profiles let a process connect
    /// to over IP (ADR-0136). `None` on Linux, where the network namespace
    /// keeps the agent to the proxy; on macOS, no IP connection at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_port: Option<u16>,
    /// The files Claude Code's settings run (a status line's script, a
    /// hook's, a helper's) in the home directory, found when the session
    /// starts ([`deferred::settings_programs`]): held like the list, which
    /// Seatbelt can only do by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub named_programs: Vec<PathBuf>,
}

/// What a path led to, without following links: the file's device and
/// inode. The same pair later means the same directory, at the same path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub dev: u64,
    pub ino: u64,
}

/// A write root or grant and its identity when pinned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pin {
    pub path: PathBuf,
    #[serde(flatten)]
    pub id: Identity,
}

/// A name a grant was asked for by, and the grant (resolved path).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Alias {
    pub name: PathBuf,
    pub grant: PathBuf,
}

/// Why a grant was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    #[error("nd7's own records can never be made writable")]
    OwnRecords,
    #[error(
        "{0} is kept unreadable by nd7 (a credential store); take it off the list in ~/.nd7/secrets and start a new session to grant it"
    )]
    Secret(PathBuf),
    #[error(
        "{0} reaches devices (a mount of /dev's filesystem or of a device filesystem outside /dev); nd7 keeps it unreadable and never grants it"
    )]
    Device(PathBuf),
    #[error(
        "{0} holds your home directory: a grant of it would let every command write the whole home and everything else your account can write; nd7 never grants / or a directory above the home (name the directories commands need)"
    )]
    AboveHome(PathBuf),
}

/// Home-relative directories Claude Code writes to keep its state, beside
/// `~/.claude` (which holds `claude.json` too: ADR-0013).
pub const CLAUDE_STATE: &[&str] = &[
    ".claude",
    ".cache/claude",
    ".cache/claude-cli-nodejs",
    ".local/state/claude",
];

/// Home-relative directories Codex writes to keep its state: its home,
/// `~/.codex` (sessions, rollouts, its databases, the helper links it puts on
/// PATH). The files in it that run later are held like Claude Code's
/// settings ([`deferred::HOME_HELD`]).
pub const CODEX_STATE: &[&str] = &[".codex"];

/// Whose state the floor keeps writable: Claude Code's (every program but
/// Codex, as before there was a second agent) or Codex's. Recorded in the
/// session, so the exit builds each command's rules from the same roots.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AgentState {
    #[default]
    ClaudeCode,
    Codex,
}

impl AgentState {
    /// The home-relative write roots of this agent's state.
    pub fn dirs(self) -> &'static [&'static str] {
        match self {
            AgentState::ClaudeCode => CLAUDE_STATE,
            AgentState::Codex => CODEX_STATE,
        }
    }
}

/// Device files every process expects to write.
pub const DEVICES: &[&str] = &["/dev/null", "/dev/tty", "/dev/zero", "/dev/full"];

/// Where the devices live. Of it the floor covers only [`DEVICES`],
/// [`DEVICE_READS`] and the session's own terminal (ADR-0085): the rest is
/// hardware (a camera, a microphone, the kernel's log, FUSE, TUN) and the
/// other consoles, which no tool an agent runs opens to read, and each
/// entry listed here was a Landlock rule of its own on every start.
pub const DEV: &str = "/dev";

/// Devices readable, not writable, besides [`DEVICES`]: the kernel's
/// random sources (bubblewrap's `--dev` holds the same set).
pub const DEVICE_READS: &[&str] = &["/dev/random", "/dev/urandom"];

/// Where Linux keeps the terminal side of every pseudo-terminal: the user's
/// other terminals are devices here, owned by the user, and what is typed
/// into one (a password at a prompt) can be read from its device. No
/// Landlock rule covers this directory but the session's own terminal
/// ([`Policy::terminal`]), readable only; a process keeps the terminals it
/// was given open (stdin, `/dev/tty`).
pub const TERMINALS: &str = "/dev/pts";

/// Whether `path` may be the session's own terminal ([`Policy::terminal`]),
/// the one terminal the floor lets be read by name: a pseudo-terminal under
/// [`TERMINALS`], or a console or serial line (`/dev/tty1`, `/dev/ttyS0`,
/// `/dev/ttyUSB0`) for a session started on one. Never `/dev/tty0` nor
/// `/dev/console`, which are whichever console is in front, nor `/dev/tty`
/// (already writable) or `/dev/ptmx`.
pub fn own_terminal_device(path: &Path) -> bool {
    if path.starts_with(TERMINALS) {
        return path != Path::new(TERMINALS) && path.parent() == Some(Path::new(TERMINALS));
    }
    let Some(name) = path
        .strip_prefix(DEV)
        .ok()
        .filter(|rest| rest.components().count() == 1)
        .and_then(|rest| rest.to_str())
    else {
        return false;
    };
    let number = |n: &str| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit());
    let Some(rest) = name.strip_prefix("tty") else {
        return false;
    };
    // A virtual console by its number (tty1..tty63, not tty0), or a serial line.
    number(rest) && !rest.starts_with('0')
        || ["S", "USB", "ACM", "AMA"]
            .iter()
            .any(|kind| rest.strip_prefix(kind).is_some_and(number))
}

impl Policy {
    /// A policy with no grants and nd7's own list of credential stores, not
    /// yet resolved or changed by the user's file.
    pub fn new(roots: Roots) -> Policy {
        Policy {
            secrets: secrets::defaults(&roots.home),
            devices: Vec::new(),
            roots,
            grants: Vec::new(),
            pins: Vec::new(),
            aliases: Vec::new(),
            terminal: None,
            agent: AgentState::default(),
            mark: None,
            proxy_port: None,
            named_programs: Vec::new(),
        }
    }

    /// nd7's own records: never writable from inside.
    pub fn nd7_dir(&self) -> PathBuf {
        self.roots.home.join(".nd7")
    }

    /// What no sandboxed process may read: the credential stores, `~/.nd7`,
    /// the machine's vault keys, the logs' locks (which a reader could hold
    /// to stall every append: ADR-0066), and device mounts outside `/dev`.
    pub fn unreadable(&self) -> Vec<PathBuf> {
        let mut out = self.secrets.clone();
        let own = [self.nd7_dir(), self.vault_dir(), self.locks_dir()];
        for place in own.into_iter().chain(self.devices.iter().cloned()) {
            if !out.contains(&place) {
                out.push(place);
            }
        }
        out
    }

    /// Where the session logs live: readable inside, never writable.
    pub fn logs_dir(&self) -> PathBuf {
        self.roots.state.join("sessions")
    }

    /// Where the logs' locks live, beside the logs
    /// (`session_log::lock_place`).
    pub fn locks_dir(&self) -> PathBuf {
        self.roots.state.join("locks")
    }

    /// Where the machine's vault key and enrolment live.
    pub fn vault_dir(&self) -> PathBuf {
        self.roots.state.join("vault")
    }

    /// The floor's write roots, before anything is taken out of them.
    pub fn floor_writes(&self) -> Vec<PathBuf> {
        let mut roots = vec![self.roots.project.clone(), self.roots.temp.clone()];
        roots.extend(self.agent.dirs().iter().map(|d| self.roots.home.join(d)));
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
    /// Returns whether it was new. Nothing under `~/.nd7` or a credential
    /// store can be granted; a grant above one (the home directory, `/`) is
    /// kept, and the rendering still carves them out.
    pub fn allow(&mut self, path: &Path) -> Result<bool, GrantError> {
        self.check_grant(path)?;
        if self.grants.iter().any(|g| g == path) {
            return Ok(false);
        }
        self.grants.push(path.to_path_buf());
        Ok(true)
    }

    /// Whether `path` (resolved) may be granted at all: nothing under
    /// `~/.nd7`, in a credential store or among nd7's vault keys, and not
    /// `/` or a directory above the home, which hold everything
    /// (ADR-0068). The home itself may be, when it is asked for by name
    /// (`nd7 allow ~`); `~/.nd7/grants` refuses it ([`grants::parse`]).
    pub fn check_grant(&self, path: &Path) -> Result<(), GrantError> {
        if self.roots.home.starts_with(path) && path != self.roots.home {
            return Err(GrantError::AboveHome(path.to_path_buf()));
        }
        if path.starts_with(self.nd7_dir()) {
            return Err(GrantError::OwnRecords);
        }
        if let Some(device) = self.devices.iter().find(|d| path.starts_with(d)) {
            return Err(GrantError::Device(device.clone()));
        }
        if let Some(secret) = self.unreadable().into_iter().find(|s| path.starts_with(s)) {
            return Err(GrantError::Secret(secret));
        }
        Ok(())
    }

    /// Records `id` as what `path` (a write root or grant) leads to now,
    /// replacing an earlier pin of it.
    pub fn pin(&mut self, path: &Path, id: Identity) {
        self.pins.retain(|p| p.path != path);
        self.pins.push(Pin {
            path: path.to_path_buf(),
            id,
        });
    }

    /// What `path` was pinned as, if it was.
    pub fn pin_of(&self, path: &Path) -> Option<Identity> {
        self.pins.iter().find(|p| p.path == path).map(|p| p.id)
    }

    /// Records that `name` (as typed, made absolute, links unresolved) asked
    /// for the grant `grant`.
    pub fn alias(&mut self, name: &Path, grant: &Path) {
        if name == grant
            || self
                .aliases
                .iter()
                .any(|a| a.name == name && a.grant == grant)
        {
            return;
        }
        self.aliases.push(Alias {
            name: name.to_path_buf(),
            grant: grant.to_path_buf(),
        });
    }

    /// Removes the grant of exactly `path`, with its pin and aliases.
    /// Returns whether there was one.
    pub fn deny(&mut self, path: &Path) -> bool {
        let before = self.grants.len();
        self.grants.retain(|g| g != path);
        if self.grants.len() == before {
            return false;
        }
        // A grant of a floor write root keeps the root's own pin.
        if !self.floor_writes().iter().any(|w| w == path) {
            self.pins.retain(|p| p.path != path);
        }
        self.aliases.retain(|a| a.grant != path);
        true
    }

    /// The grants a user means by any of `names` (the path typed, a link it
    /// was granted through, the path it resolves to now) or by `id` (what the
    /// name leads to now, when it is the directory granted, however it has
    /// been renamed since).
    pub fn grants_named(&self, names: &[PathBuf], id: Option<Identity>) -> Vec<PathBuf> {
        self.grants
            .iter()
            .filter(|g| {
                names.contains(g)
                    || self
                        .aliases
                        .iter()
                        .any(|a| a.grant == **g && names.contains(&a.name))
                    || id.is_some() && self.pin_of(g) == id
            })
            .cloned()
            .collect()
    }

    /// What must never be written, whatever the write roots say: the
    /// unreadable, `~/.nd7`, and all of nd7's state, the session logs
    /// included (ADR-0031).
    pub fn unwritable(&self) -> Vec<PathBuf> {
        let mut out = self.unreadable();
        for dir in [self.nd7_dir(), self.roots.state.clone()] {
            if !out.contains(&dir) {
                out.push(dir);
            }
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
    let excluded: Vec<&Path> = excluded.iter().map(PathBuf::as_path).collect();
    let mut out = Vec::new();
    complement_into(root, &excluded, list, &mut out);
    out
}

/// [`complement`], with `excluded` narrowed at each level to the paths
/// that lie under `root`: an excluded path that holds a child of `root`
/// either lies under `root` too, or holds `root` itself (which ends the
/// walk before its children are listed). So each entry is compared only
/// with what lies in its own directory, not with every excluded path.
fn complement_into(
    root: &Path,
    excluded: &[&Path],
    list: &dyn Fn(&Path) -> Vec<PathBuf>,
    out: &mut Vec<PathBuf>,
) {
    if excluded.iter().any(|e| root.starts_with(e)) {
        return;
    }
    let inside: Vec<&Path> = excluded
        .iter()
        .copied()
        .filter(|e| e.starts_with(root))
        .collect();
    if inside.is_empty() {
        out.push(root.to_path_buf());
        return;
    }
    for child in list(root) {
        complement_into(&child, &inside, list, out);
    }
}

/// The rules for Landlock: paths readable beneath, and paths writable (and
/// readable) beneath.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LandlockRules {
    pub read: Vec<PathBuf>,
    pub write: Vec<PathBuf>,
}

/// The Landlock rules for `writes` (the floor's or one command's), with the
/// unreadable and unwritable subtrees carved out. Reads reach everything
/// but the unreadable and `/dev`, of which only the named devices and the
/// session's terminal are readable ([`DEV`]).
pub fn landlock_rules(
    policy: &Policy,
    writes: &[PathBuf],
    list: &dyn Fn(&Path) -> Vec<PathBuf>,
) -> LandlockRules {
    let mut hidden = policy.unreadable();
    hidden.push(PathBuf::from(DEV));
    let mut read = complement(Path::new("/"), &hidden, list);
    read.extend(DEVICE_READS.iter().map(PathBuf::from));
    if let Some(own) = policy.terminal.as_ref().filter(|t| own_terminal_device(t)) {
        read.push(own.clone());
    }
    LandlockRules {
        read,
        write: write_rules(policy, writes, list),
    }
}

/// The write half of [`landlock_rules`] alone: what a command's grants add
/// to rules already placed for the floor.
pub fn write_rules(
    policy: &Policy,
    writes: &[PathBuf],
    list: &dyn Fn(&Path) -> Vec<PathBuf>,
) -> Vec<PathBuf> {
    let mut unwritable = policy.unwritable();
    // Not even a grant of `/` or `/dev` reaches another terminal.
    unwritable.push(PathBuf::from(TERMINALS));
    let mut write = Vec::new();
    for root in writes {
        for path in complement(root, &unwritable, list) {
            if !write.contains(&path) {
                write.push(path);
            }
        }
    }
    write
}

/// `base` with the names of `rest` pushed onto it, `..` taking one off,
/// as written (no link followed); `.`, the root and prefixes in `rest`
/// are passed over.
pub(crate) fn push_lexically(base: &Path, rest: &Path) -> PathBuf {
    let mut out = base.to_path_buf();
    for part in rest.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::Normal(name) => out.push(name),
            _ => {}
        }
    }
    out
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

    /// A policy for a project at /home/u/proj with these grants (the
    /// policy tests' fixture).
    pub(super) fn policy(grants: &[&str]) -> Policy {
        let mut p = Policy::new(Roots {
            project: "/home/u/proj".into(),
            temp: "/tmp".into(),
            home: "/home/u".into(),
            state: "/home/u/.local/state/nd7".into(),
            exit: "/usr/bin/nd7-exec".into(),
        });
        p.grants = grants.iter().map(PathBuf::from).collect();
        p
    }

    const FS: &[&str] = &[
        "/usr/bin/sh",
        "/etc/passwd",
        "/tmp/x",
        "/home/other/f",
        "/home/u/.ssh/id",
        "/home/u/.aws/creds",
        "/home/u/.nd7/runs/1/record.json",
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
    fn no_terminal_device_is_covered_but_the_sessions_own() {
        let t = tree(&[
            "/dev/null",
            "/dev/pts/0",
            "/dev/pts/7",
            "/dev/pts/ptmx",
            "/home/u/a",
        ]);
        let list = |p: &Path| t.get(p).cloned().unwrap_or_default();
        let mut p = policy(&["/"]);
        p.terminal = Some("/dev/pts/7".into());
        let rules = landlock_rules(&p, &p.command_writes(), &list);
        let covers =
            |rules: &[PathBuf], path: &str| rules.iter().any(|r| Path::new(path).starts_with(r));
        assert!(covers(&rules.write, "/dev/null"));
        assert!(covers(&rules.read, "/dev/pts/7") && !covers(&rules.write, "/dev/pts/7"));
        for other in ["/dev/pts", "/dev/pts/0", "/dev/pts/ptmx"] {
            assert!(!covers(&rules.read, other), "{other} readable");
            assert!(
                !covers(&rules.write, other),
                "{other} writable under a grant of /"
            );
        }
        // A console or serial line of the session's own: that one alone.
        for (terminal, own) in [
            ("/dev/tty1", true),
            ("/dev/tty12", true),
            ("/dev/ttyS0", true),
            ("/dev/ttyUSB1", true),
            ("/dev/tty0", false),
            ("/dev/tty", false),
            ("/dev/console", false),
            ("/dev/ptmx", false),
            ("/dev/pts/ptmx/x", false),
            ("/dev/ttyS", false),
            ("/dev/shm/tty1", false),
            ("/home/u/tty1", false),
        ] {
            p.terminal = Some(terminal.into());
            let rules = landlock_rules(&p, &[], &list);
            assert_eq!(
                rules.read.iter().any(|r| r == Path::new(terminal)),
                own,
                "{terminal}"
            );
        }
        // A terminal elsewhere, or none: nothing under /dev/pts at all.
        for terminal in [Some("/dev/tty1".into()), Some("/dev/pts".into()), None] {
            p.terminal = terminal;
            let rules = landlock_rules(&p, &[], &list);
            assert!(
                !rules.read.iter().any(|r| r.starts_with(TERMINALS)),
                "{:?}",
                p.terminal
            );
        }
    }

    /// Guards ADR-0085: of `/dev` the floor covers the named devices and
    /// the session's terminal, however many other devices there are; a
    /// grant of `/dev` itself writes to the rest, but still to no terminal.
    #[test]
    fn of_dev_only_the_named_devices_are_covered() {
        let t = tree(&[
            "/dev/null",
            "/dev/tty",
            "/dev/zero",
            "/dev/full",
            "/dev/random",
            "/dev/urandom",
            "/dev/kmsg",
            "/dev/fuse",
            "/dev/video0",
            "/dev/snd/pcmC0D0c",
            "/dev/input/event0",
            "/dev/shm/other",
            "/dev/tty1",
            "/dev/pts/3",
            "/dev/pts/7",
            "/home/u/a",
        ]);
        let list = |p: &Path| t.get(p).cloned().unwrap_or_default();
        let mut p = policy(&[]);
        p.terminal = Some("/dev/pts/7".into());
        let rules = landlock_rules(&p, &p.floor_writes(), &list);
        let mut under: Vec<&Path> = rules
            .read
            .iter()
            .chain(&rules.write)
            .map(PathBuf::as_path)
            .filter(|r| r.starts_with(DEV))
            .collect();
        under.sort();
        assert_eq!(
            under,
            [
                "/dev/full",
                "/dev/null",
                "/dev/pts/7",
                "/dev/random",
                "/dev/tty",
                "/dev/urandom",
                "/dev/zero"
            ]
            .map(Path::new)
        );
        let p = policy(&["/dev"]);
        let rules = landlock_rules(&p, &p.command_writes(), &list);
        assert!(rules.write.iter().any(|w| w == Path::new("/dev/kmsg")));
        assert!(!rules.write.iter().any(|w| w.starts_with(TERMINALS)));
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
                "/dev/random",
                "/dev/urandom",
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
            "/home/u/.nd7/runs/1/record.json",
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
        let p = policy(&["/home/u", "/home/u/.nd7/runs", "/"]);
        let rules = landlock_rules(&p, &p.command_writes(), &list);
        for never in [
            "/home/u/.nd7/runs/1/record.json",
            "/home/u/.nd7/new",
            "/home/u/.ssh/id",
            "/home/u/.local/state/nd7/sessions/s1/events.ndjson",
            "/home/u/.local/state/nd7/sessions/new",
            "/home/u/.local/state/nd7/new",
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
            !floor
                .write
                .iter()
                .any(|w| Path::new("/home/u/docs/a").starts_with(w))
        );
        let command = landlock_rules(&p, &p.command_writes(), &list);
        assert!(command.write.contains(&PathBuf::from("/home/u/docs")));
    }

    #[test]
    fn a_codex_session_writes_codexs_home_instead_of_claude_codes_state() {
        let mut p = policy(&[]);
        p.agent = AgentState::Codex;
        let writes = p.floor_writes();
        assert!(writes.contains(&PathBuf::from("/home/u/.codex")));
        assert!(!writes.iter().any(|w| w.starts_with("/home/u/.claude")));
        assert!(
            !writes
                .iter()
                .any(|w| w.to_string_lossy().contains("claude"))
        );
        // A record written before there was a second agent reads as Claude Code's.
        let mut old = serde_json::to_value(policy(&[])).expect("test data");
        old.as_object_mut().expect("test data").remove("agent");
        let back: Policy = serde_json::from_value(old).expect("test data");
        assert_eq!(back.agent, AgentState::ClaudeCode);
        assert!(
            back.floor_writes()
                .contains(&PathBuf::from("/home/u/.claude"))
        );
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
            p.allow(Path::new("/home/u/.nd7/runs/1")),
            Err(GrantError::OwnRecords)
        );
        // A sibling whose name merely starts the same way is not nd7's.
        assert_eq!(p.allow(Path::new("/home/u/.nd7x")), Ok(true));
        assert_eq!(p.allow(Path::new("/home/u")), Ok(true));
        // `/` and what lies between it and the home hold everything.
        for above in ["/", "/home"] {
            assert_eq!(
                p.allow(Path::new(above)),
                Err(GrantError::AboveHome(above.into()))
            );
        }
        assert_eq!(p.allow(Path::new("/home/other")), Ok(true));
        assert!(p.deny(Path::new("/home/other")));
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

    #[test]
    fn credential_files_in_the_home_are_left_out_one_by_one() {
        let t = tree(&[
            "/home/u/.netrc",
            "/home/u/.npmrc",
            "/home/u/.bashrc",
            "/home/u/.config/gh/hosts.yml",
            "/home/u/.config/git/config",
            "/home/u/.docker/config.json",
            "/home/u/.docker/buildx/current",
            "/home/u/.cargo/registry/x",
            "/home/u/.cargo/credentials.toml",
            "/home/u/proj/a",
        ]);
        let list = |p: &Path| t.get(p).cloned().unwrap_or_default();
        let p = policy(&["/home/u"]);
        let rules = landlock_rules(&p, &p.command_writes(), &list);
        let covered = |set: &[PathBuf], f: &str| set.iter().any(|r| Path::new(f).starts_with(r));
        for secret in [
            "/home/u/.netrc",
            "/home/u/.npmrc",
            "/home/u/.config/gh/hosts.yml",
            "/home/u/.docker/config.json",
            "/home/u/.cargo/credentials.toml",
        ] {
            assert!(!covered(&rules.read, secret), "{secret} readable");
            assert!(!covered(&rules.write, secret), "{secret} writable");
        }
        for fine in [
            "/home/u/.bashrc",
            "/home/u/.config/git/config",
            "/home/u/.docker/buildx/current",
            "/home/u/.cargo/registry/x",
        ] {
            assert!(covered(&rules.read, fine), "{fine} unreadable");
            assert!(
                covered(&rules.write, fine),
                "{fine} unwritable under a home grant"
            );
        }
        // An entry made later directly in the home, or in a directory that
        // was split, is in no rule: it fails closed.
        assert!(!covered(&rules.read, "/home/u/.new-token"));
        assert!(!covered(&rules.read, "/home/u/.config/new"));
    }

    #[test]
    fn a_secret_reached_through_a_link_is_left_out_where_it_really_is() {
        let t = tree(&[
            "/home/u/dotfiles/ssh/id",
            "/home/u/dotfiles/vimrc",
            "/home/u/proj/a",
        ]);
        let list = |p: &Path| t.get(p).cloned().unwrap_or_default();
        let mut p = policy(&[]);
        // As nd7 run records it: ~/.ssh (a link) and where it leads.
        p.secrets.push("/home/u/dotfiles/ssh".into());
        let rules = landlock_rules(&p, &p.floor_writes(), &list);
        assert!(
            !rules
                .read
                .iter()
                .any(|r| Path::new("/home/u/dotfiles/ssh/id").starts_with(r))
        );
        assert!(
            rules
                .read
                .contains(&PathBuf::from("/home/u/dotfiles/vimrc"))
        );
    }

    #[test]
    fn no_grant_reaches_into_a_credential_store() {
        let mut p = policy(&[]);
        assert_eq!(
            p.allow(Path::new("/home/u/.gnupg/private-keys-v1.d")),
            Err(GrantError::Secret("/home/u/.gnupg".into()))
        );
        assert_eq!(
            p.allow(Path::new("/home/u/.netrc")),
            Err(GrantError::Secret("/home/u/.netrc".into()))
        );
        assert_eq!(
            p.allow(Path::new("/home/u/.local/state/nd7/vault")),
            Err(GrantError::Secret("/home/u/.local/state/nd7/vault".into()))
        );
        assert_eq!(p.allow(Path::new("/home/u/.config")), Ok(true));
    }

    #[test]
    fn deny_finds_a_grant_by_any_name_it_had() {
        let mut p = policy(&[]);
        let id = Identity { dev: 1, ino: 42 };
        assert_eq!(p.allow(Path::new("/data/out")), Ok(true));
        p.pin(Path::new("/data/out"), id);
        p.alias(Path::new("/home/u/proj/out"), Path::new("/data/out"));
        // Typed name, resolved path, or the same directory under a new name.
        let by = |names: &[&str], id| {
            p.grants_named(&names.iter().map(PathBuf::from).collect::<Vec<_>>(), id)
        };
        assert_eq!(by(&["/home/u/proj/out"], None), paths(&["/data/out"]));
        assert_eq!(by(&["/data/out"], None), paths(&["/data/out"]));
        assert_eq!(by(&["/data/renamed"], Some(id)), paths(&["/data/out"]));
        assert!(by(&["/data/other"], Some(Identity { dev: 1, ino: 7 })).is_empty());
        assert!(p.deny(Path::new("/data/out")));
        assert!(p.aliases.is_empty() && p.pins.is_empty());
    }

    #[test]
    fn denying_a_grant_of_a_floor_root_keeps_the_roots_pin() {
        let mut p = policy(&[]);
        let id = Identity { dev: 1, ino: 2 };
        p.pin(Path::new("/home/u/proj"), id);
        assert_eq!(p.allow(Path::new("/home/u/proj")), Ok(true));
        assert!(p.deny(Path::new("/home/u/proj")));
        assert_eq!(p.pin_of(Path::new("/home/u/proj")), Some(id));
    }

    /// `complement` as it was before it narrowed the excluded paths at each
    /// level (fa7d68c): every entry compared with every excluded path. The
    /// reference the rewrite must match.
    fn complement_before(
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
            out.extend(complement_before(&child, excluded, list));
        }
        out
    }

    mod complement_matches_before {
        use super::*;
        use proptest::prelude::*;

        /// A name a directory can hold (`readdir` never gives `.`, `..` or
        /// one with a slash, but `..` is kept: `Path` compares it as text).
        fn name() -> impl Strategy<Value = String> {
            prop_oneof![
                Just("a".to_string()),
                Just("b".to_string()),
                Just("ab".to_string()),
                Just("a b".to_string()),
                Just(".a".to_string()),
                Just("..".to_string()),
                Just("...".to_string()),
                Just("ä".to_string()),
                Just("日本".to_string()),
                Just("a\\b".to_string()),
            ]
        }

        /// A path spelt as one may be: absolute or not, with `.`, `..`,
        /// doubled and trailing slashes between the names.
        fn spelt() -> impl Strategy<Value = PathBuf> {
            let part = prop_oneof![
                4 => name(),
                1 => Just(".".to_string()),
                1 => Just("..".to_string()),
                1 => Just(String::new()),
            ];
            (
                prop_oneof![4 => Just("/"), 1 => Just("")],
                proptest::collection::vec(part, 0..5),
                any::<bool>(),
            )
                .prop_map(|(lead, parts, trailing)| {
                    let mut s = format!("{lead}{}", parts.join("/"));
                    if trailing {
                        s.push('/');
                    }
                    PathBuf::from(s)
                })
        }

        /// A tree of directories under `/`: each path's ancestors hold it.
        fn tree_of(files: &[Vec<String>]) -> std::collections::BTreeMap<PathBuf, Vec<PathBuf>> {
            let mut t: std::collections::BTreeMap<PathBuf, Vec<PathBuf>> = Default::default();
            for names in files {
                let mut dir = PathBuf::from("/");
                for n in names {
                    let child = dir.join(n);
                    let entries = t.entry(dir.clone()).or_default();
                    if !entries.contains(&child) {
                        entries.push(child.clone());
                    }
                    dir = child;
                }
            }
            t
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(4096))]

            /// The same paths, in the same order, as the version that
            /// compared every entry with every excluded path: roots and
            /// excluded paths taken from the tree (so one equals, holds or
            /// lies under another) or spelt freely.
            #[test]
            fn on_generated_trees(
                files in proptest::collection::vec(proptest::collection::vec(name(), 1..5), 0..12),
                picks in proptest::collection::vec((any::<prop::sample::Index>(), 0usize..6), 0..6),
                spelt_excluded in proptest::collection::vec(spelt(), 0..3),
                root_pick in (any::<prop::sample::Index>(), 0usize..6),
                spelt_root in spelt(),
                root_spelt in any::<bool>(),
            ) {
                let t = tree_of(&files);
                let list = |p: &Path| t.get(p).cloned().unwrap_or_default();
                // A prefix of one of the tree's paths: `/`, a directory or a leaf.
                let known = |(i, depth): (prop::sample::Index, usize)| -> PathBuf {
                    if files.is_empty() {
                        return PathBuf::from("/");
                    }
                    let names = &files[i.index(files.len())];
                    let mut p = PathBuf::from("/");
                    for n in names.iter().take(depth) {
                        p.push(n);
                    }
                    p
                };
                let mut excluded: Vec<PathBuf> = picks.into_iter().map(known).collect();
                excluded.extend(spelt_excluded);
                let root = if root_spelt { spelt_root } else { known(root_pick) };
                prop_assert_eq!(
                    complement(&root, &excluded, &list),
                    complement_before(&root, &excluded, &list)
                );
            }
        }
    }
}
