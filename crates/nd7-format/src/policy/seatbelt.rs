//! The two Seatbelt profiles that enforce a session's [`Policy`] on macOS:
//! the floor, applied to the agent and everything it starts, and the
//! per-command profile `nd7-exec` applies to itself before it becomes the
//! shell. Pure: a policy in, SBPL text out.
//!
//! # Allow by default, take away what reaches outside
//!
//! Both profiles start from `(allow default)` and deny what nd7 confines:
//! every file write outside the write roots, and any access to the
//! credential stores ([`super::secrets`]), nd7's vault keys, the logs'
//! locks and `~/.nd7`; then the ways a process acts outside the sandbox
//! without writing a file ([`Profile::outside`], ADR-0074): signals to
//! processes of another sandbox, connections to other programs' unix
//! sockets, typing into a terminal (`TIOCSTI`), and handing a program to
//! launchd, LaunchServices or Apple events; and the network, all of it but
//! the session's egress proxy on 127.0.0.1 ([`Profile::network`],
//! ADR-0136), which judges each host as on Linux. Mach services and
//! sysctls stay as open as outside. A
//! `(deny default)` profile would instead have to list every mach service,
//! sysctl and device that node, git, compilers and Claude Code touch, a list
//! no Linux test can check, and whose gaps show up as mysterious failures of
//! other tools (ADR-0018).
//!
//! # Order
//!
//! Seatbelt lets the last rule that matches an operation decide. Each profile
//! therefore goes from broad to narrow: the blanket write deny, the allows of
//! the write roots, the denies of the secrets, of the files that run later
//! and of renaming what holds them, the exit (floor only), what reaches
//! outside, and last the deny of `~/.nd7`, which nothing after it can undo.
//!
//! # Links
//!
//! Seatbelt matches the real path of every access, whatever name was used.
//! An allow therefore never follows a link: a write root re-pointed to `/`
//! allows nothing under `/`, since no real path lies beneath a link. A deny
//! of a name that is a link (`~/.ssh -> dotfiles/ssh`) would miss the real
//! files, so the policy lists each secret both as named and where it really
//! is (resolved by `nd7 run` at the start), and both are denied.
//!
//! # Links, clones and renames
//!
//! A hard link is a second name for a file, and Seatbelt judges a file by the
//! name it is reached through. A link from the project to `~/.bashrc` would
//! make `~/.bashrc` writable through the project, so `file-link` is denied
//! like a write and allowed only within the write roots; links and
//! copy-on-write clones out of the secret directories are denied outright.
//! A rename is judged by the names too: a directory above a path that is
//! never written, renamed away (under a grant of the home), would take that
//! path's files to a name no deny covers, to be changed and moved back. So
//! no directory on the way to anything never written can be renamed or
//! removed ([`keep_in_place`]).
//!
//! # Paths cannot inject rules
//!
//! Paths are written into the profile as SBPL string literals, `\` and `"`
//! escaped (see [`string`]); inside a regex they are regex-escaped first
//! ([`regex_literal`]). Every other byte, newline included, is literal inside
//! an SBPL string. A path Seatbelt cannot be given (not UTF-8, or holding a
//! NUL byte; neither can name a file on APFS or HFS+) fails closed: an allow
//! of it is left out, and a deny of it covers its nearest ancestor that can
//! be written instead. The profile is text, not parameters, so that
//! `policy.sb` is the whole of what `nd7-exec` applies, readable as it is.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::Policy;
use super::deferred::{GIT_DIR_HELD, HOME_HELD, PROJECT_HELD};

/// What Claude Code writes to save `~/.claude.json`, which on macOS stays in
/// the home directory (Linux moves it under `~/.claude`: ADR-0013): the file,
/// its lock directory, and the temporaries it renames over it
/// (`.claude.json.tmp.<pid>.<hex>`; some versions use a decimal timestamp).
/// A regex on the tail of the path, anchored at the end; the home directory
/// goes in front of it.
pub const CLAUDE_JSON_SAVES: &str = r"/\.claude\.json(\.lock|\.tmp\.[0-9]+\.[0-9a-f]+)?$";

/// Home-relative directories Claude Code writes on macOS besides
/// [`super::CLAUDE_STATE`]: its caches and logs where macOS keeps them.
pub const CLAUDE_STATE_MACOS: &[&str] = &[
    "Library/Caches/claude-cli-nodejs",
    "Library/Logs/claude-cli-nodejs",
];

/// Operations that change the file system through a path.
const WRITE: &str = "file-write* file-link";

/// Operations denied on the secret directories: all of them that reach a
/// file's content, through its name, a link or a clone.
const SECRET: &str = "file-read* file-write* file-link file-clone";

/// The floor: the profile `nd7 run` applies to the agent and everything it
/// starts. Writes go to the floor's write roots only; the one way out is
/// `nd7_exec`, which starts outside the sandbox and cannot be replaced from
/// inside it. `nd7_exec` must be resolved (no symlinks), like the policy's
/// paths: Seatbelt matches the path a file really has.
pub fn floor(policy: &Policy, nd7_exec: &Path) -> String {
    let mut profile = Profile::new("floor", policy, &policy.floor_writes());
    profile.deferred(policy);
    profile.protect(nd7_exec);
    profile.exit(nd7_exec);
    profile.outside(policy);
    profile.finish(policy)
}

/// One command's profile: what `nd7-exec` applies to itself before it becomes
/// the shell. The floor's rules plus one write allow per grant, and no exit;
/// the exit itself (the policy's) stays unwritable, whatever is granted.
pub fn command(policy: &Policy) -> String {
    let mut profile = Profile::new("command", policy, &policy.command_writes());
    profile.deferred(policy);
    profile.protect(&policy.roots.exit);
    profile.outside(policy);
    profile.finish(policy)
}

/// A profile being written, one form per line.
struct Profile {
    text: String,
}

impl Profile {
    /// Everything both profiles share, with `writes` as the write roots.
    fn new(name: &str, policy: &Policy, writes: &[PathBuf]) -> Profile {
        let mut profile = Profile {
            text: format!("(version 1)\n; nd7 {name} profile\n(allow default)\n"),
        };
        profile.form(&format!("(deny {WRITE})"));
        let roots: Vec<String> = writes.iter().filter_map(|p| filter("subpath", p)).collect();
        for root in &roots {
            profile.form(&format!("(allow file-write* {root})"));
        }
        let home = &policy.roots.home;
        // Claude Code's places on macOS; a Codex session has only its home.
        let claude = policy.agent == super::AgentState::ClaudeCode;
        let mut state: Vec<String> = CLAUDE_STATE_MACOS
            .iter()
            .filter(|_| claude)
            .filter_map(|d| filter("subpath", &home.join(d)))
            .collect();
        if claude && let Some(home) = regex_literal(home) {
            state.push(format!(
                "(regex {})",
                string(&format!("^{home}{CLAUDE_JSON_SAVES}"))
            ));
        }
        if !state.is_empty() {
            profile.form(&format!("(allow file-write* {})", state.join(" ")));
        }
        // /dev/fd (and /dev/stdout, /dev/stderr, links into it) only reopens
        // descriptors the process already holds; then pseudo-terminals, and
        // the device dyld opens to register DTrace probes.
        profile.form(concat!(
            r#"(allow file-write* (subpath "/dev/fd") (literal "/dev/ptmx")"#,
            r#" (literal "/dev/dtracehelper") (regex "^/dev/ttys[0-9]+$"))"#
        ));
        if !roots.is_empty() {
            profile.form(&format!("(allow file-link {})", roots.join(" ")));
        }
        let nd7 = policy.nd7_dir();
        let secrets: Vec<String> = policy
            .unreadable()
            .iter()
            .filter(|p| **p != nd7)
            .map(|p| deny_filter("subpath", p))
            .collect();
        if !secrets.is_empty() {
            profile.form(&format!("(deny {SECRET} {})", secrets.join(" ")));
        }
        profile
    }

    /// Files that run later outside the sandbox ([`super::deferred`]) are
    /// never written, created, removed, renamed or linked, whatever the
    /// write roots and grants say, and whether or not they exist yet. By
    /// regex, so new ones are covered: in the project at any depth (a nested
    /// repository is as dangerous as the top one), in the home directory at
    /// its top. Names are matched in either case (APFS ignores case). Then
    /// every directory that must stay where it is ([`keep_in_place`]).
    fn deferred(&mut self, policy: &Policy) {
        for regex in deferred_regexes(policy) {
            self.form(&format!("(deny {WRITE} (regex {}))", string(&regex)));
        }
        let keep: Vec<String> = keep_in_place(policy)
            .iter()
            .map(|p| deny_filter("literal", p))
            .collect();
        self.form(&format!("(deny {KEEP} {})", keep.join(" ")));
        // The files Claude Code's settings run, by name (found when the
        // session started; `super::deferred::settings_programs`).
        let named: Vec<String> = policy
            .named_programs
            .iter()
            .map(|p| deny_filter("literal", p))
            .collect();
        if !named.is_empty() {
            self.form(&format!("(deny {WRITE} {})", named.join(" ")));
        }
    }

    /// Neither `nd7_exec` nor any directory on its path can be written,
    /// removed or renamed, so nothing inside can put another program at that
    /// path, even when it lies in a write root or a grant.
    fn protect(&mut self, nd7_exec: &Path) {
        let path: Vec<String> = nd7_exec
            .ancestors()
            .map(|p| deny_filter("literal", p))
            .collect();
        self.form(&format!("(deny {WRITE} {})", path.join(" ")));
    }

    /// The floor's exit: `nd7_exec` starts outside the sandbox.
    fn exit(&mut self, nd7_exec: &Path) {
        if let Some(exit) = filter("literal", nd7_exec) {
            self.form(&format!("(allow process-exec {exit} (with no-sandbox))"));
        }
    }

    /// What lets a process act outside the sandbox without writing a file
    /// (ADR-0074), in both profiles:
    ///
    /// - signals only to processes of the same sandbox (the agent and what
    ///   it starts, or one command and its children) and to the sender's own
    ///   children: Claude Code can end the `nd7-exec` it started, and no
    ///   process can stop, kill or wake one of the user's others, or the
    ///   part of `nd7-exec` that writes the log (a child of the `nd7-exec`
    ///   the agent started, never of a confined process). As in
    ///   sandbox-runtime's profile (`(allow signal (target same-sandbox))`
    ///   under a deny of every other signal);
    /// - connections to unix sockets only in the project and the agent's
    ///   state (a socket the session's own programs made: git's fsmonitor,
    ///   a test server), and to syslog; never
    ///   to a socket inside what is never read or written (a gpg-agent's in
    ///   `~/.gnupg`, with the project being the home). Other programs'
    ///   sockets run code outside: tmux, docker, ssh-agent, an editor's
    ///   (VS Code keeps its in `$TMPDIR`, which is therefore left out), other
    ///   Claude Code sessions'. Codex's profile allows unix sockets the same
    ///   way, `(remote unix-socket (subpath …))`;
    /// - `TIOCSTI`, which types into a terminal: the line would run in the
    ///   user's shell when `nd7 run` returns. Codex denies it the same way
    ///   (`(deny file-ioctl (ioctl-command TIOCSTI))`, which macOS 13 and
    ///   later compile);
    /// - `launchctl`, `open` and `osascript`, which hand a program to
    ///   launchd, LaunchServices or another application, none of which is
    ///   in the sandbox; and, whatever program asks, LaunchServices' opening
    ///   of applications and documents (`lsopen`) and the sending of Apple
    ///   events, which script other applications (operations Apple's own
    ///   profiles in `/System/Library/Sandbox/Profiles` name). A copy of
    ///   `launchctl` still reaches launchd: not closed (ADR-0074);
    /// - and last the session's mark ([`Policy::mark`]), a path that exists
    ///   nowhere, unreadable here only, by which `nd7 run` finds the
    ///   processes still in this session's sandboxes when it ends.
    fn outside(&mut self, policy: &Policy) {
        self.form("(deny signal)");
        self.form("(allow signal (target same-sandbox) (target children))");
        self.network(policy);
        self.form("(deny file-ioctl (ioctl-command TIOCSTI))");
        let handoffs: Vec<String> = HANDOFF_PROGRAMS
            .iter()
            .map(|p| format!("(literal {})", string(p)))
            .collect();
        self.form(&format!("(deny process-exec* {})", handoffs.join(" ")));
        self.form("(deny lsopen)");
        self.form("(deny appleevent-send)");
        if let Some(mark) = policy.mark.as_deref().and_then(|m| filter("literal", m)) {
            self.form(&format!("(deny file-read* {mark})"));
        }
    }

    /// The network (ADR-0136): no connection at all, IP or unix socket,
    /// but TCP to the session's egress proxy on 127.0.0.1
    /// ([`Policy::proxy_port`]; none without one) and the unix sockets of
    /// [`SYSTEM_SOCKETS`] and [`socket_roots`] (never one inside what is
    /// never written). DNS is denied with the rest: mDNSResponder's socket
    /// and UDP alike; the proxy resolves. Listening and accepting are
    /// allowed on the loopback only, so no other machine can reach a
    /// server the agent starts. As Codex's and sandbox-runtime's profiles
    /// do (`(remote tcp "localhost:PORT")`).
    fn network(&mut self, policy: &Policy) {
        self.form("(deny network-outbound)");
        self.form(r#"(deny network-bind network-inbound (local ip "*:*"))"#);
        self.form(r#"(allow network-bind network-inbound (local ip "localhost:*"))"#);
        let mut allowed: Vec<String> = SYSTEM_SOCKETS
            .iter()
            .map(|s| format!("(remote unix-socket (subpath {}))", string(s)))
            .collect();
        allowed.extend(
            socket_roots(policy)
                .iter()
                .filter_map(|p| filter("subpath", p))
                .map(|f| format!("(remote unix-socket {f})")),
        );
        // Port 0 is no listener's: a record that says it has no proxy.
        if let Some(port) = policy.proxy_port.filter(|p| *p != 0) {
            allowed.push(format!("(remote tcp \"localhost:{port}\")"));
        }
        self.form(&format!("(allow network-outbound {})", allowed.join(" ")));
        let kept: Vec<String> = policy
            .unwritable()
            .iter()
            .map(|p| format!("(remote unix-socket {})", deny_filter("subpath", p)))
            .collect();
        self.form(&format!("(deny network-outbound {})", kept.join(" ")));
    }

    /// The last forms: nd7's state (the session logs) is never written from
    /// inside, whatever is granted (ADR-0031), and nothing under `~/.nd7` is
    /// readable or writable.
    fn finish(mut self, policy: &Policy) -> String {
        let state = deny_filter("subpath", &policy.roots.state);
        self.form(&format!("(deny {WRITE} {state})"));
        let nd7 = deny_filter("subpath", &policy.nd7_dir());
        self.form(&format!("(deny {SECRET} {nd7})"));
        self.text
    }

    fn form(&mut self, form: &str) {
        let _ = writeln!(self.text, "{form}");
    }
}

/// What a directory that must stay where it is is denied: being removed or
/// renamed (`file-write-unlink` is both), and, like every path never
/// written, a hard link. sandbox-runtime keeps what it protects in place the
/// same way (`file-write-unlink` on every ancestor).
const KEEP: &str = "file-write-unlink file-link";

/// The unix sockets of the system's own services that any program needs:
/// syslog. Both spellings, as `/var` is a link to `/private/var` and which
/// one Seatbelt matches for a socket is not documented. Not the DNS
/// resolver's (`/var/run/mDNSResponder`, which `getaddrinfo` asks): a name
/// looked up is a message out (ADR-0136), and clients of the proxy need
/// none, as the proxy resolves.
pub const SYSTEM_SOCKETS: &[&str] = &["/private/var/run/syslog", "/var/run/syslog"];

/// Programs that hand a program to a process outside the sandbox: launchd
/// (`launchctl submit`, `bootstrap`, `asuser`), LaunchServices (`open`, an
/// application or a document's) and Apple events (`osascript`, another
/// application's scripting).
pub const HANDOFF_PROGRAMS: &[&str] = &["/bin/launchctl", "/usr/bin/open", "/usr/bin/osascript"];

/// Where a process inside may connect to a unix socket: the project and the
/// agent's state directories, where the session's own programs make theirs.
/// Not the temp directory, which the user's other programs share (VS Code's
/// IPC sockets are there), nor any grant.
pub fn socket_roots(policy: &Policy) -> Vec<PathBuf> {
    let mut roots = vec![policy.roots.project.clone()];
    roots.extend(
        policy
            .agent
            .dirs()
            .iter()
            .map(|d| policy.roots.home.join(d)),
    );
    roots
}

/// The directories that can be neither removed nor renamed, in either
/// profile, whatever is granted: every directory above something never
/// written ([`Policy::unwritable`]: nd7's state and logs, `~/.nd7`, the
/// credential stores), above the project, and above the files that run
/// later in the home ([`HOME_HELD`]: `~/.claude`, `~/.codex`, `~/.config`
/// and the directories between), up to `/`. Renamed away, any of them
/// would take what it holds to a name no deny covers, to be changed there
/// and moved back (`mv ~/.local/state ~/.local/s2` under a grant of the
/// home); the project swapped for a prepared one would bring its files
/// that run later. Removing or renaming what is inside them is not
/// affected: a literal names one directory, not what is beneath it.
pub fn keep_in_place(policy: &Policy) -> Vec<PathBuf> {
    let home = &policy.roots.home;
    let mut above: Vec<PathBuf> = policy
        .roots
        .project
        .ancestors()
        .map(Path::to_path_buf)
        .collect();
    for held in HOME_HELD {
        above.extend(home.join(held).ancestors().skip(1).map(Path::to_path_buf));
    }
    for never in policy.unwritable() {
        above.extend(never.ancestors().skip(1).map(Path::to_path_buf));
    }
    let mut out: Vec<PathBuf> = Vec::with_capacity(above.len());
    for path in above {
        if !out.contains(&path) {
            out.push(path);
        }
    }
    out
}

/// `name` as a regex matching it in either case (`.git` becomes
/// `\.[gG][iI][tT]`), every other metacharacter escaped.
pub fn any_case(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_alphabetic() {
            out.push('[');
            out.push(c.to_ascii_lowercase());
            out.push(c.to_ascii_uppercase());
            out.push(']');
        } else {
            if r"\.^$|?*+()[]{}".contains(c) {
                out.push('\\');
            }
            out.push(c);
        }
    }
    out
}

/// The regexes of files that run later, for `policy`'s project, each grant
/// the list covers as it covers the project (`super::deferred::grant_roots`:
/// a grant made with `nd7 allow` reaches the next command's profile, which
/// is built from the record), and the home (none for a root Seatbelt cannot
/// be given, whose own write allow is dropped too).
pub fn deferred_regexes(policy: &Policy) -> Vec<String> {
    let alternatives = |names: &[&str]| {
        names
            .iter()
            .map(|n| any_case(n))
            .collect::<Vec<_>>()
            .join("|")
    };
    let mut out = Vec::new();
    let mut roots = vec![policy.roots.project.clone()];
    roots.extend(super::deferred::grant_roots(policy, &policy.grants));
    for p in roots.iter().filter_map(|r| regex_literal(r)) {
        let git = any_case(".git");
        let mut parents: Vec<&str> = PROJECT_HELD
            .iter()
            .filter_map(|n| n.rsplit_once('/').map(|(parent, _)| parent))
            .collect();
        parents.sort_unstable();
        parents.dedup();
        // A repository anywhere in the project: its name, then what makes
        // plain git run something in it, its submodules' and worktrees'.
        out.push(format!("^{p}/(.*/)?{git}$"));
        let mut inside: Vec<&str> = GIT_DIR_HELD.to_vec();
        inside.push("info");
        out.push(format!(
            "^{p}/(.*/)?{git}/(({}|{})/.+/)?({})(/.*)?$",
            any_case("modules"),
            any_case("worktrees"),
            alternatives(&inside)
        ));
        out.push(format!(
            "^{p}/(.*/)?({})(/.*)?$",
            alternatives(PROJECT_HELD)
        ));
        // Directories holding names on the list: not created, removed or
        // renamed (a prepared one moved into place would bring its contents).
        out.push(format!("^{p}/(.*/)?({})$", alternatives(&parents)));
    }
    if let Some(h) = regex_literal(&policy.roots.home) {
        out.push(format!("^{h}/({})(/.*)?$", alternatives(HOME_HELD)));
    }
    out
}

/// The path beside a session's mark ([`Policy::mark`]) that no profile
/// names: readable in every sandbox that allows by default (nd7's, and
/// none), refused by one that denies by default. A process is in the
/// session's sandboxes when its sandbox refuses to read the mark and lets
/// it read this (ADR-0075).
pub fn unmarked(mark: &Path) -> PathBuf {
    let mut path = mark.as_os_str().to_owned();
    path.push("-unmarked");
    PathBuf::from(path)
}

/// `(kind "path")`, or `None` when Seatbelt cannot be given `path`.
fn filter(kind: &str, path: &Path) -> Option<String> {
    representable(path).map(|p| format!("({kind} {})", string(p)))
}

/// `(kind "path")` for a deny: when `path` cannot be given to Seatbelt, its
/// nearest ancestor that can (at worst `/`), which denies more, not less.
fn deny_filter(kind: &str, path: &Path) -> String {
    let (kind, path) = match representable(path) {
        Some(p) => (kind, p),
        None => (
            "subpath",
            path.ancestors().find_map(representable).unwrap_or("/"),
        ),
    };
    format!("({kind} {})", string(path))
}

/// `path` as Seatbelt can be given it: UTF-8, without NUL bytes.
fn representable(path: &Path) -> Option<&str> {
    path.to_str().filter(|s| !s.contains('\0'))
}

/// `s` as an SBPL string literal: in quotes, with `\` and `"` escaped. Any
/// other character stands for itself inside the quotes.
pub fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if c == '\\' || c == '"' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// `path` as a regular expression matching exactly that text (every regex
/// metacharacter escaped), or `None` when Seatbelt cannot be given it.
pub fn regex_literal(path: &Path) -> Option<String> {
    let s = representable(path)?;
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if r"\.^$|?*+()[]{}".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Roots;

    /// One SBPL datum, as Seatbelt's reader would see it.
    #[derive(Clone, Debug, PartialEq, Eq)]
    enum Sx {
        List(Vec<Sx>),
        Str(String),
        Sym(String),
    }

    /// Reads SBPL text into its top-level forms: parentheses, symbols,
    /// strings with `\\`, `\"`, `\n`, `\t`, `\r` escapes, `;` comments. Any
    /// other escape, or an unbalanced parenthesis or quote, is an error.
    fn read(text: &str) -> Result<Vec<Sx>, String> {
        let mut stack: Vec<Vec<Sx>> = vec![Vec::new()];
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                c if c.is_whitespace() => {}
                ';' => {
                    for c in chars.by_ref() {
                        if c == '\n' {
                            break;
                        }
                    }
                }
                '(' => stack.push(Vec::new()),
                ')' => {
                    let list = stack.pop().ok_or("unbalanced )")?;
                    stack.last_mut().ok_or("unbalanced )")?.push(Sx::List(list));
                }
                '"' => {
                    let mut s = String::new();
                    loop {
                        match chars.next().ok_or("unterminated string")? {
                            '"' => break,
                            '\\' => s.push(match chars.next().ok_or("unterminated escape")? {
                                '\\' => '\\',
                                '"' => '"',
                                'n' => '\n',
                                't' => '\t',
                                'r' => '\r',
                                other => return Err(format!("escape \\{other}")),
                            }),
                            c => s.push(c),
                        }
                    }
                    stack.last_mut().ok_or("unbalanced")?.push(Sx::Str(s));
                }
                c => {
                    let mut s = String::from(c);
                    while let Some(&c) = chars.peek() {
                        if c.is_whitespace() || "();\"".contains(c) {
                            break;
                        }
                        s.push(c);
                        chars.next();
                    }
                    stack.last_mut().ok_or("unbalanced")?.push(Sx::Sym(s));
                }
            }
        }
        match <[_; 1]>::try_from(stack) {
            Ok([forms]) => Ok(forms),
            Err(_) => Err("unclosed (".into()),
        }
    }

    fn forms(text: &str) -> Vec<Sx> {
        match read(text) {
            Ok(forms) => forms,
            Err(e) => panic!("unreadable profile ({e}):\n{text}"),
        }
    }

    fn sym(s: &str) -> Sx {
        Sx::Sym(s.into())
    }

    fn st(s: &str) -> Sx {
        Sx::Str(s.into())
    }

    fn path_filter(kind: &str, p: &Path) -> Sx {
        Sx::List(vec![sym(kind), Sx::Str(p.to_str().expect("utf-8").into())])
    }

    /// `(action op... filter...)`.
    fn rule(action: &str, ops: &str, filters: Vec<Sx>) -> Sx {
        let mut v = vec![sym(action)];
        v.extend(ops.split(' ').map(sym));
        v.extend(filters);
        Sx::List(v)
    }

    fn subpaths(paths: &[PathBuf]) -> Vec<Sx> {
        paths.iter().map(|p| path_filter("subpath", p)).collect()
    }

    #[test]
    fn a_codex_floor_has_none_of_claude_codes_places_on_macos() {
        let mut p = policy("/Users/u/proj", "/private/tmp", "/Users/u", &[]);
        p.agent = crate::policy::AgentState::Codex;
        let text = floor(&p, Path::new("/opt/nd7/nd7-exec"));
        assert!(text.contains("(subpath \"/Users/u/.codex\")"), "{text}");
        // Denials of Claude Code's files that run later stay; no allow does.
        for allow in [
            "claude-cli-nodejs",
            "claude\\.json",
            "(subpath \"/Users/u/.claude\")",
        ] {
            assert!(!text.contains(allow), "{allow} in {text}");
        }
        p.agent = crate::policy::AgentState::ClaudeCode;
        let text = floor(&p, Path::new("/opt/nd7/nd7-exec"));
        assert!(
            text.contains("claude-cli-nodejs") && !text.contains("(subpath \"/Users/u/.codex\")")
        );
    }

    fn policy(project: &str, temp: &str, home: &str, grants: &[&str]) -> Policy {
        let mut p = Policy::new(Roots {
            project: project.into(),
            temp: temp.into(),
            home: home.into(),
            state: format!("{home}/.local/state/nd7").into(),
            exit: "/usr/local/bin/nd7-exec".into(),
        });
        p.grants = grants.iter().map(PathBuf::from).collect();
        p
    }

    /// Undoes [`regex_literal`], refusing a metacharacter left unescaped.
    fn unregex(s: &str) -> Result<String, String> {
        let mut out = String::new();
        let mut chars = s.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => out.push(chars.next().ok_or("trailing \\")?),
                c if r".^$|?*+()[]{}".contains(c) => return Err(format!("bare {c} in {s:?}")),
                c => out.push(c),
            }
        }
        Ok(out)
    }

    /// The `(regex "...")` that lets Claude Code save `~/.claude.json`,
    /// checked to match `home` and nothing wider.
    fn claude_json_regex(forms: &[Sx], home: &Path) -> Sx {
        let found: Vec<&String> = forms
            .iter()
            .flat_map(|f| match f {
                Sx::List(items) => items.iter().collect(),
                _ => Vec::new(),
            })
            .filter_map(|f| match f {
                Sx::List(items) if items.first() == Some(&sym("regex")) => match items.get(1) {
                    Some(Sx::Str(s)) if s.ends_with(CLAUDE_JSON_SAVES) => Some(s),
                    _ => None,
                },
                _ => None,
            })
            .collect();
        assert_eq!(found.len(), 1, "{forms:?}");
        let s = found[0];
        let middle = s
            .strip_prefix('^')
            .and_then(|s| s.strip_suffix(CLAUDE_JSON_SAVES))
            .expect("anchored");
        assert_eq!(
            unregex(middle),
            Ok(home.to_str().expect("utf-8").to_string())
        );
        Sx::List(vec![sym("regex"), st(s)])
    }

    /// The forms every profile starts with, for `writes` as write roots.
    fn expected_head(p: &Policy, writes: &[PathBuf], regex: Sx) -> Vec<Sx> {
        let home = &p.roots.home;
        let mut out = vec![
            Sx::List(vec![sym("version"), sym("1")]),
            rule("allow", "default", vec![]),
            rule("deny", "file-write* file-link", vec![]),
        ];
        for w in writes {
            out.push(rule(
                "allow",
                "file-write*",
                vec![path_filter("subpath", w)],
            ));
        }
        let mut state = subpaths(&[
            home.join("Library/Caches/claude-cli-nodejs"),
            home.join("Library/Logs/claude-cli-nodejs"),
        ]);
        state.push(regex);
        out.push(rule("allow", "file-write*", state));
        out.push(rule(
            "allow",
            "file-write*",
            vec![
                Sx::List(vec![sym("subpath"), st("/dev/fd")]),
                Sx::List(vec![sym("literal"), st("/dev/ptmx")]),
                Sx::List(vec![sym("literal"), st("/dev/dtracehelper")]),
                Sx::List(vec![sym("regex"), st("^/dev/ttys[0-9]+$")]),
            ],
        ));
        out.push(rule("allow", "file-link", subpaths(writes)));
        let mut secrets = p.secrets.clone();
        secrets.extend(p.devices.iter().cloned());
        secrets.push(p.roots.state.join("vault"));
        secrets.push(p.roots.state.join("locks"));
        out.push(rule(
            "deny",
            "file-read* file-write* file-link file-clone",
            subpaths(&secrets),
        ));
        out
    }

    fn state_deny(p: &Policy) -> Sx {
        rule(
            "deny",
            "file-write* file-link",
            vec![path_filter("subpath", &p.roots.state)],
        )
    }

    fn nd7_deny(p: &Policy) -> Sx {
        rule(
            "deny",
            "file-read* file-write* file-link file-clone",
            vec![path_filter("subpath", &p.nd7_dir())],
        )
    }

    /// Paths built to break out of a string or a regex, each role its own.
    const PROJECT: &str = "/Users/u/p\")(allow file-write* (subpath \"/\"))(x \"";
    const TEMP: &str = "/tmp/new\nline; (deny default)\\";
    const HOME: &str = "/Users/we ird\"(h)\\;$.^*[a]|{2}+?";
    const GRANTS: &[&str] = &["/data/a\\\"b", "/data/)(allow default)(", "/d/x\\n\\\\"];
    const EXIT: &str = "/opt/nd7 \"bin\"/(x);\n/nd7-exec\\";

    fn nasty() -> Policy {
        let mut p = policy(PROJECT, TEMP, HOME, GRANTS);
        p.roots.exit = EXIT.into();
        p
    }

    #[test]
    fn hostile_paths_come_back_byte_identical_in_the_expected_forms() {
        let p = nasty();
        let exit = Path::new(EXIT);
        let got = forms(&floor(&p, exit));
        let regex = claude_json_regex(&got, &p.roots.home);
        let mut want = expected_head(&p, &p.floor_writes(), regex.clone());
        let mut path: Vec<Sx> = exit
            .ancestors()
            .map(|a| path_filter("literal", a))
            .collect();
        assert_eq!(path.len(), 5, "{path:?}");
        want.extend(deferred_forms(&p));
        want.push(rule(
            "deny",
            "file-write* file-link",
            std::mem::take(&mut path),
        ));
        want.push(Sx::List(vec![
            sym("allow"),
            sym("process-exec"),
            path_filter("literal", exit),
            Sx::List(vec![sym("with"), sym("no-sandbox")]),
        ]));
        want.extend(outside_forms(&p));
        want.push(state_deny(&p));
        want.push(nd7_deny(&p));
        assert_eq!(got, want);

        // The command profile has no exit, but the exit stays unwritable.
        let got = forms(&command(&p));
        let mut want = expected_head(&p, &p.command_writes(), regex);
        want.extend(deferred_forms(&p));
        want.push(rule(
            "deny",
            "file-write* file-link",
            exit.ancestors()
                .map(|a| path_filter("literal", a))
                .collect(),
        ));
        want.extend(outside_forms(&p));
        want.push(state_deny(&p));
        want.push(nd7_deny(&p));
        assert_eq!(got, want);
    }

    /// The forms that keep a process from acting outside the sandbox, as
    /// both profiles end with them before nd7's own denies.
    fn outside_forms(p: &Policy) -> Vec<Sx> {
        let socket = |f: Sx| Sx::List(vec![sym("remote"), sym("unix-socket"), f]);
        let mut allowed: Vec<Sx> = ["/private/var/run/syslog", "/var/run/syslog"]
            .iter()
            .map(|s| socket(path_filter("subpath", Path::new(s))))
            .collect();
        allowed.push(socket(path_filter("subpath", &p.roots.project)));
        allowed.extend(
            [
                ".claude",
                ".cache/claude",
                ".cache/claude-cli-nodejs",
                ".local/state/claude",
            ]
            .iter()
            .map(|d| socket(path_filter("subpath", &p.roots.home.join(d)))),
        );
        let kept: Vec<Sx> = p
            .unwritable()
            .iter()
            .map(|d| socket(path_filter("subpath", d)))
            .collect();
        if let Some(port) = p.proxy_port {
            allowed.push(Sx::List(vec![
                sym("remote"),
                sym("tcp"),
                Sx::Str(format!("localhost:{port}")),
            ]));
        }
        let mut ops = vec![sym("allow"), sym("network-outbound")];
        ops.extend(allowed);
        let local = |action: &str, address: &str| {
            Sx::List(vec![
                sym(action),
                sym("network-bind"),
                sym("network-inbound"),
                Sx::List(vec![sym("local"), sym("ip"), st(address)]),
            ])
        };
        let mut deny_kept = vec![sym("deny"), sym("network-outbound")];
        deny_kept.extend(kept);
        vec![
            rule("deny", "signal", vec![]),
            Sx::List(vec![
                sym("allow"),
                sym("signal"),
                Sx::List(vec![sym("target"), sym("same-sandbox")]),
                Sx::List(vec![sym("target"), sym("children")]),
            ]),
            rule("deny", "network-outbound", vec![]),
            local("deny", "*:*"),
            local("allow", "localhost:*"),
            Sx::List(ops),
            Sx::List(deny_kept),
            Sx::List(vec![
                sym("deny"),
                sym("file-ioctl"),
                Sx::List(vec![sym("ioctl-command"), sym("TIOCSTI")]),
            ]),
            rule(
                "deny",
                "process-exec*",
                ["/bin/launchctl", "/usr/bin/open", "/usr/bin/osascript"]
                    .iter()
                    .map(|p| path_filter("literal", Path::new(p)))
                    .collect(),
            ),
            rule("deny", "lsopen", vec![]),
            rule("deny", "appleevent-send", vec![]),
        ]
    }

    /// The forms that deny files that run later: one per regex, then every
    /// directory kept from being removed or renamed ([`keep_in_place`],
    /// whose contents `every_directory_above_what_is_never_written_stays_in_place`
    /// checks).
    fn deferred_forms(p: &Policy) -> Vec<Sx> {
        let mut out: Vec<Sx> = deferred_regexes(p)
            .into_iter()
            .map(|r| {
                rule(
                    "deny",
                    "file-write* file-link",
                    vec![Sx::List(vec![sym("regex"), Sx::Str(r)])],
                )
            })
            .collect();
        let keep: Vec<Sx> = keep_in_place(p)
            .iter()
            .map(|a| path_filter("literal", a))
            .collect();
        out.push(rule("deny", "file-write-unlink file-link", keep));
        if !p.named_programs.is_empty() {
            out.push(rule(
                "deny",
                "file-write* file-link",
                p.named_programs
                    .iter()
                    .map(|n| path_filter("literal", n))
                    .collect(),
            ));
        }
        out
    }

    /// Every `(regex "…")` the profile denies writing through, compiled.
    fn deny_regexes(forms: &[Sx]) -> Vec<regex::Regex> {
        forms
            .iter()
            .filter_map(|f| match f {
                Sx::List(v) if v.first() == Some(&sym("deny")) => v.last(),
                _ => None,
            })
            .filter_map(|f| match f {
                Sx::List(v) if v.first() == Some(&sym("regex")) => match v.get(1) {
                    Some(Sx::Str(r)) => Some(regex::Regex::new(r).expect("a regex Seatbelt reads")),
                    _ => None,
                },
                _ => None,
            })
            .collect()
    }

    #[test]
    fn files_that_run_later_are_denied_in_both_profiles_before_they_exist() {
        let p = policy("/Users/u/p", "/private/tmp", "/Users/u", &["/Users/u", "/"]);
        for profile in [command(&p), floor(&p, Path::new("/opt/nd7/nd7-exec"))] {
            let got = forms(&profile);
            let denies = deny_regexes(&got);
            // The project's four, the same four for each of the two grants
            // (covered as the project is), and the home's.
            assert_eq!(denies.len(), 13, "{profile}");
            let denied = |path: &str| denies.iter().any(|r| r.is_match(path));
            for no in [
                "/Users/u/p/.git",
                "/Users/u/p/.git/config",
                "/Users/u/p/.git/hooks",
                "/Users/u/p/.git/hooks/pre-commit",
                "/Users/u/p/.git/info",
                "/Users/u/p/.git/info/attributes",
                "/Users/u/p/.git/commondir",
                "/Users/u/p/.git/config.worktree",
                "/Users/u/p/.git/modules/libs/lib/config",
                "/Users/u/p/.git/modules/lib/hooks/post-checkout",
                "/Users/u/p/.git/worktrees/w/commondir",
                "/Users/u/p/sub/dir/.git/config",
                "/Users/u/p/sub/.git",
                "/Users/u/p/.GIT/Config",
                "/Users/u/p/.gitattributes",
                "/Users/u/p/.gitmodules",
                "/Users/u/p/.envrc",
                "/Users/u/p/deep/er/.envrc",
                "/Users/u/p/.mcp.json",
                "/Users/u/p/.vscode",
                "/Users/u/p/.vscode/tasks.json",
                "/Users/u/p/.idea/workspace.xml",
                "/Users/u/p/.claude",
                "/Users/u/p/.claude/settings.json",
                "/Users/u/p/.claude/Settings.Local.json",
                "/Users/u/p/.claude/commands/x.md",
                "/Users/u/p/.claude/agents/a.md",
                "/Users/u/p/.claude/skills/s/SKILL.md",
                "/Users/u/p/.claude/hooks/h.sh",
                "/Users/u/.claude/settings.json",
                "/Users/u/.claude/commands/x.md",
                "/Users/u/.claude/plugins/cache/m/p/hooks/hooks.json",
                "/Users/u/.bashrc",
                "/Users/u/.zshenv",
                "/Users/u/.gitconfig",
                "/Users/u/.config/git/config",
            ] {
                assert!(denied(no), "{no} is writable");
            }
            for yes in [
                "/Users/u/p/src/main.rs",
                "/Users/u/p/.gitignore",
                "/Users/u/p/.envrc.example",
                "/Users/u/p/.git/index",
                "/Users/u/p/.git/index.lock",
                "/Users/u/p/.git/HEAD",
                "/Users/u/p/.git/objects/ab/cdef",
                "/Users/u/p/.git/objects/info/packs",
                "/Users/u/p/.git/refs/heads/main",
                "/Users/u/p/.git/COMMIT_EDITMSG",
                "/Users/u/p/.git/modules/lib/objects/ab/cd",
                "/Users/u/p/.git-credentials-helper",
                "/Users/u/p/.claude/todos.json",
                "/Users/u/p/.claude/worktrees/w/x",
                "/Users/u/.claude/claude.json",
                "/Users/u/.claude/projects/p/s.jsonl",
                "/Users/u/.claude/plugins/store/x.json",
                "/Users/u/.claude/todos/t.json",
                "/Users/u/.claude.json",
                "/Users/u/other/.bashrc",
            ] {
                assert!(!denied(yes), "{yes} is denied");
            }
            // The denies come after every write allow, so they decide.
            let last_allow = got
                .iter()
                .rposition(|f| matches!(f, Sx::List(v) if v.first() == Some(&sym("allow")) && v.get(1) == Some(&sym("file-write*"))))
                .expect("an allow");
            let first_deny = got
                .iter()
                .position(|f| matches!(f, Sx::List(v) if v.last().is_some_and(|l| matches!(l, Sx::List(r) if r.first() == Some(&sym("regex")))) && v.first() == Some(&sym("deny"))))
                .expect("a deny");
            assert!(last_allow < first_deny, "{profile}");
            let unlink = rule(
                "deny",
                "file-write-unlink file-link",
                deferred_forms(&p)
                    .last()
                    .and_then(|f| match f {
                        Sx::List(v) => Some(v[3..].to_vec()),
                        _ => None,
                    })
                    .expect("filters"),
            );
            assert!(got.contains(&unlink), "{profile}");
            for kept in [
                "/Users/u/p",
                "/Users/u",
                "/",
                "/Users/u/.claude",
                "/Users/u/.codex",
            ] {
                assert!(
                    strings(std::slice::from_ref(&unlink)).contains(&kept),
                    "{kept}"
                );
            }
        }
    }

    #[test]
    fn a_hostile_project_path_is_matched_literally_by_the_deferred_regexes() {
        let p = nasty();
        let denies: Vec<regex::Regex> = deferred_regexes(&p)
            .iter()
            .map(|r| regex::Regex::new(r).expect("compiles"))
            .collect();
        let denied = |path: &str| denies.iter().any(|r| r.is_match(path));
        assert!(denied(&format!("{PROJECT}/.git/config")));
        assert!(denied(&format!("{PROJECT}/a/.envrc")));
        assert!(denied(&format!("{HOME}/.bashrc")));
        assert!(!denied(&format!("{PROJECT}/src")));
        // The metacharacters of the path are literal: a look-alike does not match.
        assert!(!denied(
            "/Users/u/pX)(allow file-write* (subpath X/X))(x X/.git/config"
        ));
        assert_eq!(any_case(".git"), r"\.[gG][iI][tT]");
        assert_eq!(any_case("a.b-c"), r"[aA]\.[bB]-[cC]");
    }

    /// A repository granted by path is denied as the project is, at any
    /// depth; a preset's cache is not; the scripts Claude Code's settings
    /// name are denied by name, in both profiles.
    #[test]
    fn a_granted_repository_and_the_scripts_settings_name_are_denied() {
        let mut p = policy(
            "/Users/u/p",
            "/private/tmp",
            "/Users/u",
            &["/Users/u/src/lib", "/Users/u/.cargo/registry"],
        );
        p.named_programs = vec!["/Users/u/.claude/statusline.sh".into()];
        let denies: Vec<regex::Regex> = deferred_regexes(&p)
            .iter()
            .map(|r| regex::Regex::new(r).expect("compiles"))
            .collect();
        let denied = |path: &str| denies.iter().any(|r| r.is_match(path));
        for path in [
            "/Users/u/src/lib/.git/hooks/pre-commit",
            "/Users/u/src/lib/.git/config",
            "/Users/u/src/lib/.envrc",
            "/Users/u/src/lib/deep/er/.git/config",
            "/Users/u/src/lib/.claude/settings.json",
            "/Users/u/.local/bin/git",
            "/Users/u/.cargo/config.toml",
            "/Users/u/.claude/local/claude",
        ] {
            assert!(denied(path), "{path}");
        }
        for path in [
            "/Users/u/src/lib/src/main.rs",
            "/Users/u/.cargo/registry/src/x/.gitattributes",
            "/Users/u/.cargo/registry/src/x/.vscode/settings.json",
            "/Users/u/src/other/.git/config",
        ] {
            assert!(!denied(path), "{path}");
        }
        let statusline =
            r#"(deny file-write* file-link (literal "/Users/u/.claude/statusline.sh"))"#;
        for profile in [command(&p), floor(&p, Path::new("/opt/nd7/nd7-exec"))] {
            assert!(profile.contains(statusline), "{profile}");
            assert!(
                profile.contains(r#"(literal "/Users/u/.local/share")"#),
                "{profile}"
            );
        }
    }

    #[test]
    fn the_regex_escapes_every_metacharacter_of_the_home_directory() {
        let home = Path::new(r"/U/.^$|?*+()[]{}\x");
        let r = regex_literal(home).expect("representable");
        assert_eq!(unregex(&r).as_deref(), Ok(r"/U/.^$|?*+()[]{}\x"));
        assert_eq!(r, r"/U/\.\^\$\|\?\*\+\(\)\[\]\{\}\\x");
    }

    #[test]
    fn the_nd7_deny_is_last_even_when_the_home_and_the_root_are_granted() {
        for grants in [
            &["/Users/u"][..],
            &["/"],
            &["/Users/u", "/", "/Users/u/.nd7"],
        ] {
            let p = policy("/Users/u/p", "/private/tmp", "/Users/u", grants);
            for profile in [command(&p), floor(&p, Path::new("/opt/nd7/nd7-exec"))] {
                let got = forms(&profile);
                assert_eq!(got.last(), Some(&nd7_deny(&p)), "{profile}");
                assert_eq!(
                    got.iter().filter(|f| **f == nd7_deny(&p)).count(),
                    1,
                    "{profile}"
                );
            }
        }
    }

    /// Whether `path` may be written under `forms`, by Seatbelt's rule that
    /// the last matching rule decides. Regex filters are taken never to
    /// match, so this only answers for paths no regex is about.
    fn writable(forms: &[Sx], path: &str) -> bool {
        decides(forms, "file-write*", |filter| {
            filter.first() != Some(&sym("regex")) && covers(filter, path)
        })
    }

    /// Whether `forms` let `op` happen to what `target` describes, by
    /// Seatbelt's rule that the last matching rule decides: a rule is about
    /// `op` when it names it, a wildcard over it (`file-write*`,
    /// `process-exec*`) or `default`, and matches when it has no filter or
    /// one of its filters matches (`matches`, given each filter form).
    fn decides(forms: &[Sx], op: &str, matches: impl Fn(&[Sx]) -> bool) -> bool {
        let mut allowed = false;
        for form in forms {
            let Sx::List(items) = form else { continue };
            let action = match items.first() {
                Some(s) if *s == sym("allow") => true,
                Some(s) if *s == sym("deny") => false,
                _ => continue,
            };
            let about = items[1..].iter().any(|i| match i {
                Sx::Sym(o) => {
                    o == op
                        || o == "default"
                        || o.strip_suffix('*').is_some_and(|w| op.starts_with(w))
                }
                _ => false,
            });
            if !about {
                continue;
            }
            let filters: Vec<&Sx> = items[1..]
                .iter()
                .filter(|i| matches!(i, Sx::List(_)))
                .collect();
            let hit = filters.is_empty()
                || filters.iter().any(|f| match f {
                    Sx::List(v) => matches(v),
                    _ => false,
                });
            if hit {
                allowed = action;
            }
        }
        allowed
    }

    /// Whether a path filter (`subpath`, `literal`, `regex`) covers `path`.
    fn covers(filter: &[Sx], path: &str) -> bool {
        match (filter.first(), filter.get(1)) {
            (Some(k), Some(Sx::Str(p))) if *k == sym("subpath") => {
                path == p
                    || path
                        .strip_prefix(p.as_str())
                        .is_some_and(|r| r.starts_with('/') || p.ends_with('/'))
            }
            (Some(k), Some(Sx::Str(p))) if *k == sym("literal") => path == p,
            (Some(k), Some(Sx::Str(r))) if *k == sym("regex") => regex::Regex::new(r)
                .expect("a regex Seatbelt reads")
                .is_match(path),
            _ => false,
        }
    }

    /// Whether `path` may be removed or renamed (`file-write-unlink`, which
    /// Seatbelt asks of a rename's source), regexes included.
    fn renamable(forms: &[Sx], path: &str) -> bool {
        decides(forms, "file-write-unlink", |f| covers(f, path))
    }

    #[test]
    fn every_directory_above_what_is_never_written_stays_in_place() {
        // The attack (issue 11): with the home writable, `mv ~/.local/state
        // ~/.local/s2`, rewrite the log, move it back. Guards the ancestors
        // of `Policy::unwritable` and of the home's files that run later in
        // `keep_in_place`: without them, the first paths below are renamable.
        let mut p = policy("/Users/u", "/private/tmp", "/Users/u", &["/Users/u", "/"]);
        p.secrets.push("/Users/u/dotfiles/ssh".into());
        let exit = Path::new("/opt/nd7/nd7-exec");
        for profile in [command(&p), floor(&p, exit)] {
            let got = forms(&profile);
            for kept in [
                "/Users/u/.local/state",
                "/Users/u/.local",
                "/Users/u/.local/state/nd7",
                "/Users/u/.local/state/nd7/sessions",
                "/Users/u/.nd7",
                "/Users/u",
                "/Users",
                "/",
                "/Users/u/.config",
                "/Users/u/.docker",
                "/Users/u/.cargo",
                "/Users/u/.local/share",
                "/Users/u/Library/Application Support",
                "/Users/u/Library/Application Support/Google",
                "/Users/u/Library",
                "/Users/u/dotfiles",
                "/Users/u/.claude",
                "/Users/u/.claude/plugins",
                "/Users/u/.codex",
                "/Users/u/.codex/.tmp",
            ] {
                assert!(!renamable(&got, kept), "{kept} can be renamed:\n{profile}");
            }
            // What lies inside them, or beside them, still moves.
            for free in [
                "/Users/u/src/main.rs",
                "/Users/u/build",
                "/Users/u/.local/share/fonts",
                "/Users/u/.local/state/other",
                "/Users/u/.config/htop",
                "/Users/u/.cargo/registry",
                "/Users/u/Library/Application Support/Code",
                "/Users/u/dotfiles/vimrc",
                "/Users/u/.claude/projects",
            ] {
                assert!(
                    renamable(&got, free),
                    "{free} cannot be renamed:\n{profile}"
                );
            }
        }
        // A project elsewhere: the same directories stay, and the project's
        // files still move.
        let p = policy("/Users/u/src/p", "/private/tmp", "/Users/u", &["/Users/u"]);
        let got = forms(&command(&p));
        for kept in ["/Users/u/.local/state", "/Users/u/src/p", "/Users/u/src"] {
            assert!(!renamable(&got, kept), "{kept}");
        }
        for free in ["/Users/u/src/p/a.rs", "/Users/u/src/q", "/Users/u/.local/x"] {
            assert!(renamable(&got, free), "{free}");
        }
    }

    #[test]
    fn the_sessions_mark_is_unreadable_in_its_profiles_and_its_neighbour_is_not() {
        // How nd7 run finds the session's processes at its end (ADR-0075): a
        // process whose sandbox refuses the mark and allows `unmarked`.
        // Guards the mark's form in `Profile::outside`.
        let mut p = policy("/Users/u/p", "/private/tmp", "/Users/u", &["/Users/u", "/"]);
        let mark = PathBuf::from("/.nd7-run-41287-00ff00ff00ff00ff");
        assert!(!command(&p).contains("nd7-run-"), "no mark, no form");
        p.mark = Some(mark.clone());
        let read = |forms: &[Sx], path: &Path| {
            let path = path.to_str().expect("utf-8");
            decides(forms, "file-read-data", |f| covers(f, path))
        };
        for profile in [command(&p), floor(&p, Path::new("/opt/nd7/nd7-exec"))] {
            let got = forms(&profile);
            assert!(!read(&got, &mark), "{profile}");
            assert!(read(&got, &unmarked(&mark)), "{profile}");
            assert!(read(&got, Path::new("/.nd7-run-41287-00ff00ff00ff00fe")));
        }
        assert_eq!(
            unmarked(&mark),
            Path::new("/.nd7-run-41287-00ff00ff00ff00ff-unmarked")
        );
    }

    #[test]
    fn signals_sockets_terminal_input_and_handoffs_stay_inside_in_both_profiles() {
        // Guards `Profile::outside`: without its forms every check of a
        // refusal below fails, as `(allow default)` lets all of it through.
        let p = policy(
            "/Users/u/p",
            "/private/var/folders/x/T",
            "/Users/u",
            &["/Users/u"],
        );
        let exit = Path::new("/opt/nd7/nd7-exec");
        for profile in [command(&p), floor(&p, exit)] {
            let got = forms(&profile);
            let signal = |target: &str| {
                decides(&got, "signal", |f| {
                    f.first() == Some(&sym("target")) && f.get(1) == Some(&sym(target))
                })
            };
            assert!(signal("same-sandbox") && signal("children"), "{profile}");
            assert!(!signal("others") && !signal("pgrp"), "{profile}");
            let connect = |path: &str| {
                decides(&got, "network-outbound", |f| {
                    f.first() == Some(&sym("remote"))
                        && f.get(1) == Some(&sym("unix-socket"))
                        && match f.get(2) {
                            None => true,
                            Some(Sx::List(inner)) => covers(inner, path),
                            Some(_) => false,
                        }
                })
            };
            for no in [
                "/private/tmp/tmux-501/default",
                "/private/var/folders/x/T/vscode-ipc-1.sock",
                "/Users/u/.docker/run/docker.sock",
                "/Users/u/.gnupg/S.gpg-agent",
                "/Users/u/Library/Containers/com.docker.docker/Data/docker.raw.sock",
                "/private/var/run/mDNSResponder",
                "/var/run/mDNSResponder",
            ] {
                assert!(!connect(no), "{no} reachable:\n{profile}");
            }
            for yes in [
                "/var/run/syslog",
                "/Users/u/p/.git/fsmonitor--daemon.ipc",
                "/Users/u/p/tmp/test.sock",
                "/Users/u/.claude/x.sock",
            ] {
                assert!(connect(yes), "{yes} unreachable:\n{profile}");
            }
            let ioctl = rule("deny", "file-ioctl", vec![]);
            let Sx::List(mut tiocsti) = ioctl else {
                unreachable!()
            };
            tiocsti.push(Sx::List(vec![sym("ioctl-command"), sym("TIOCSTI")]));
            assert!(got.contains(&Sx::List(tiocsti)), "{profile}");
            let exec = |path: &str| decides(&got, "process-exec", |f| covers(f, path));
            for no in ["/bin/launchctl", "/usr/bin/open", "/usr/bin/osascript"] {
                assert!(!exec(no), "{no}");
            }
            assert!(exec("/usr/bin/git"));
            for op in ["lsopen", "appleevent-send"] {
                assert!(!decides(&got, op, |_| true), "{op}");
            }
        }
        // The project being the home opens no socket in what is never read.
        let p = policy("/Users/u", "/private/tmp", "/Users/u", &[]);
        let got = forms(&floor(&p, exit));
        let connect = |path: &str| {
            decides(&got, "network-outbound", |f| match f.get(2) {
                None => f.get(1) == Some(&sym("unix-socket")),
                Some(Sx::List(inner)) => covers(inner, path),
                Some(_) => false,
            })
        };
        assert!(connect("/Users/u/work/app.sock"));
        for no in [
            "/Users/u/.gnupg/S.gpg-agent",
            "/Users/u/.ssh/agent.sock",
            "/Users/u/.nd7/runs/1/x.sock",
            "/Users/u/.local/state/nd7/x.sock",
        ] {
            assert!(!connect(no), "{no}");
        }
    }

    /// Where a process inside would connect, bind or listen.
    #[derive(Clone, Copy, Debug)]
    enum Dial<'a> {
        Tcp(&'a str, u16),
        Udp(&'a str, u16),
        Unix(&'a str),
    }

    /// Whether an address filter's `HOST:PORT` (`*` for any host or port,
    /// `localhost` for the loopback) covers `host` and `port`, as Seatbelt
    /// reads the address of `(remote ip …)` and `(local ip …)`.
    fn address_covers(address: &str, host: &str, port: u16) -> bool {
        let Some((h, p)) = address.rsplit_once(':') else {
            return false;
        };
        let loopback = host == "::1" || host.starts_with("127.");
        let host_ok = h == "*" || (h == "localhost" && loopback);
        host_ok && (p == "*" || p.parse::<u16>() == Ok(port))
    }

    /// Whether a `(remote …)` or `(local …)` filter (`side`) covers `dial`:
    /// `ip` is TCP and UDP, `tcp` and `udp` one each; `unix-socket` with no
    /// path is every unix socket, with one those beneath it.
    fn dial_covers(filter: &[Sx], side: &str, dial: Dial) -> bool {
        if filter.first() != Some(&sym(side)) {
            return false;
        }
        match (filter.get(1), filter.get(2), dial) {
            (Some(Sx::Sym(k)), None, Dial::Unix(_)) => k == "unix-socket",
            (Some(Sx::Sym(k)), Some(Sx::List(inner)), Dial::Unix(path)) => {
                k == "unix-socket" && covers(inner, path)
            }
            (Some(Sx::Sym(k)), Some(Sx::Str(a)), Dial::Tcp(host, port)) => {
                (k == "ip" || k == "tcp") && address_covers(a, host, port)
            }
            (Some(Sx::Sym(k)), Some(Sx::Str(a)), Dial::Udp(host, port)) => {
                (k == "ip" || k == "udp") && address_covers(a, host, port)
            }
            _ => false,
        }
    }

    #[test]
    fn the_network_reaches_only_the_proxys_port_on_the_loopback_in_both_profiles() {
        // ADR-0136. Guards `Profile::network`: without its deny every
        // refusal below is allowed (`(allow default)`), without its allow
        // of the port the proxy is refused, and the mDNSResponder socket
        // was allowed before it.
        let mut p = policy("/Users/u/p", "/private/tmp", "/Users/u", &["/Users/u"]);
        p.proxy_port = Some(43117);
        let exit = Path::new("/opt/nd7/nd7-exec");
        for profile in [command(&p), floor(&p, exit)] {
            let got = forms(&profile);
            let connect =
                |d: Dial| decides(&got, "network-outbound", |f| dial_covers(f, "remote", d));
            assert!(connect(Dial::Tcp("127.0.0.1", 43117)), "{profile}");
            for no in [
                Dial::Tcp("127.0.0.1", 43118),
                Dial::Tcp("127.0.0.1", 22),
                Dial::Tcp("93.184.216.34", 443),
                Dial::Tcp("93.184.216.34", 43117),
                Dial::Tcp("192.168.1.1", 43117),
                Dial::Udp("127.0.0.1", 43117),
                Dial::Udp("192.168.1.1", 53),
                Dial::Udp("8.8.8.8", 53),
                Dial::Udp("127.0.0.1", 53),
                Dial::Unix("/var/run/mDNSResponder"),
                Dial::Unix("/private/var/run/mDNSResponder"),
            ] {
                assert!(!connect(no), "{no:?} reachable:\n{profile}");
            }
            assert!(connect(Dial::Unix("/var/run/syslog")));
            assert!(connect(Dial::Unix("/Users/u/p/.git/fsmonitor--daemon.ipc")));
            // A server the agent starts listens on the loopback, never where
            // another machine reaches it.
            for op in ["network-bind", "network-inbound"] {
                let local = |d: Dial| decides(&got, op, |f| dial_covers(f, "local", d));
                assert!(local(Dial::Tcp("127.0.0.1", 8080)), "{op}");
                assert!(local(Dial::Unix("/Users/u/p/tmp/test.sock")), "{op}");
                for no in [Dial::Tcp("0.0.0.0", 8080), Dial::Tcp("192.168.1.5", 8080)] {
                    assert!(!local(no), "{op} {no:?}:\n{profile}");
                }
            }
            // Exactly one address is ever allowed out: the proxy's.
            let addresses: Vec<&Sx> = got
                .iter()
                .filter_map(|f| match f {
                    Sx::List(v) if v.first() == Some(&sym("allow")) => Some(v),
                    _ => None,
                })
                .flatten()
                .filter(|f| match f {
                    Sx::List(v) => {
                        v.first() == Some(&sym("remote")) && v.get(1) != Some(&sym("unix-socket"))
                    }
                    _ => false,
                })
                .collect();
            let proxy = Sx::List(vec![sym("remote"), sym("tcp"), st("localhost:43117")]);
            assert_eq!(addresses, vec![&proxy], "{profile}");
        }
        // Without a proxy, no IP connection at all.
        p.proxy_port = None;
        for profile in [command(&p), floor(&p, exit)] {
            let got = forms(&profile);
            let connect =
                |d: Dial| decides(&got, "network-outbound", |f| dial_covers(f, "remote", d));
            assert!(!connect(Dial::Tcp("127.0.0.1", 43117)), "{profile}");
            assert!(!profile.contains("(remote tcp"), "{profile}");
        }
    }

    #[test]
    #[ignore = "open: the profiles allow every mach service (ADR-0018), and some fetch for whoever asks, outside the sandbox: nsurlsessiond's background downloads, trustd's certificate URLs; the network is not only through the proxy (ADR-0141)"]
    fn no_system_service_fetches_for_a_process_inside() {
        // What ADR-0136 keeps from the network is a process's own sockets;
        // a daemon asked over mach connects with its own. Background URL
        // sessions are handed whole to nsurlsessiond.
        let mut p = policy("/Users/u/p", "/private/tmp", "/Users/u", &[]);
        p.proxy_port = Some(43117);
        for profile in [command(&p), floor(&p, Path::new("/opt/nd7/nd7-exec"))] {
            let got = forms(&profile);
            let lookup = |name: &str| {
                decides(&got, "mach-lookup", |f| {
                    f.first() == Some(&sym("global-name")) && f.get(1) == Some(&st(name))
                })
            };
            assert!(!lookup("com.apple.nsurlsessiond"), "{profile}");
        }
    }

    #[test]
    fn a_record_whose_proxy_port_is_zero_allows_no_ip_connection() {
        // Guards the filter in `Profile::network`: without it the profiles
        // say `(remote tcp "localhost:0")`, a port no proxy listens on,
        // whose meaning to Seatbelt nothing here can check (a record is
        // written by nd7, never with 0; one that says it is read as none).
        let mut p = policy("/Users/u/p", "/private/tmp", "/Users/u", &[]);
        p.proxy_port = Some(0);
        for profile in [command(&p), floor(&p, Path::new("/opt/nd7/nd7-exec"))] {
            assert!(!profile.contains("(remote tcp"), "{profile}");
            let got = forms(&profile);
            let connect =
                |d: Dial| decides(&got, "network-outbound", |f| dial_covers(f, "remote", d));
            assert!(!connect(Dial::Tcp("127.0.0.1", 0)), "{profile}");
        }
    }

    #[test]
    fn with_the_whole_home_granted_nd7_stays_unwritable_and_the_rest_of_home_is_not() {
        let p = policy("/Users/u/p", "/private/tmp", "/Users/u", &["/Users/u"]);
        let exit = Path::new("/Users/u/p/target/nd7-exec");
        let command = forms(&command(&p));
        let floor = forms(&floor(&p, exit));
        for yes in ["/Users/u/docs/a", "/Users/u/.bashrc", "/Users/u/p/x"] {
            assert!(writable(&command, yes), "{yes}");
        }
        for no in [
            "/Users/u/.nd7",
            "/Users/u/.nd7/runs/1/policy.sb",
            "/Users/u/.ssh/id",
            "/Users/u/.aws/credentials",
            // The session logs: read-only inside, whatever is granted.
            "/Users/u/.local/state/nd7/sessions/s/events.ndjson",
            "/Users/u/.local/state/nd7/sessions/new",
        ] {
            assert!(!writable(&command, no), "{no}");
            assert!(!writable(&floor, no), "{no}");
        }
        assert!(!writable(&floor, "/Users/u/docs/a"));
        assert!(writable(&floor, "/Users/u/p/x"));
        assert!(writable(&floor, "/Users/u/.claude/settings.json"));
        assert!(writable(&floor, "/dev/null"));
        assert!(!writable(&floor, "/etc/hosts"));
        // The exit lies in the project, yet cannot be replaced from inside.
        assert!(!writable(&floor, "/Users/u/p/target/nd7-exec"));
        assert!(!writable(&floor, "/Users/u/p/target"));
        assert!(writable(&floor, "/Users/u/p/target/other"));
    }

    /// Every `(… (with no-sandbox))` form.
    fn exits(forms: &[Sx]) -> Vec<&Sx> {
        let no_sandbox = Sx::List(vec![sym("with"), sym("no-sandbox")]);
        forms
            .iter()
            .filter(|f| matches!(f, Sx::List(v) if v.contains(&no_sandbox)))
            .collect()
    }

    #[test]
    fn the_floor_has_one_exit_and_the_command_profile_none() {
        let p = policy("/Users/u/p", "/private/tmp", "/Users/u", &["/Users/u/data"]);
        let exit = Path::new("/opt/homebrew/bin/nd7-exec");
        let floor = forms(&floor(&p, exit));
        let want = Sx::List(vec![
            sym("allow"),
            sym("process-exec"),
            path_filter("literal", exit),
            Sx::List(vec![sym("with"), sym("no-sandbox")]),
        ]);
        assert_eq!(exits(&floor), vec![&want]);
        assert!(exits(&forms(&command(&p))).is_empty());
        assert!(!command(&p).contains("no-sandbox"));
    }

    /// Every string anywhere in `forms`.
    fn strings(forms: &[Sx]) -> Vec<&str> {
        let mut out = Vec::new();
        for f in forms {
            match f {
                Sx::Str(s) => out.push(s.as_str()),
                Sx::List(v) => out.extend(strings(v)),
                Sx::Sym(_) => {}
            }
        }
        out
    }

    #[test]
    fn grants_appear_in_the_command_profile_only_one_allow_each() {
        let p = nasty();
        let floor = forms(&floor(&p, Path::new("/opt/nd7-exec")));
        let command = forms(&command(&p));
        for grant in GRANTS {
            assert!(
                !strings(&floor).iter().any(|s| s.contains(grant)),
                "{grant}"
            );
            let allow = rule(
                "allow",
                "file-write*",
                vec![path_filter("subpath", Path::new(grant))],
            );
            assert_eq!(
                command.iter().filter(|f| **f == allow).count(),
                1,
                "{grant}"
            );
        }
    }

    #[test]
    fn a_path_seatbelt_cannot_be_given_is_never_allowed_and_widens_a_deny() {
        use std::ffi::OsStr;
        use std::os::unix::ffi::OsStrExt;
        let bad_utf8 = PathBuf::from(OsStr::from_bytes(b"/data/\xff"));
        let mut p = policy("/Users/u/p", "/private/tmp", "/Users/u", &["/data/nul\0x"]);
        p.grants.push(bad_utf8);
        let got = forms(&command(&p));
        assert!(
            !strings(&got).iter().any(|s| s.starts_with("/data")),
            "{got:?}"
        );
        assert_eq!(got.last(), Some(&nd7_deny(&p)));

        // A home directory that cannot be written: every deny about it
        // covers its parent instead, and Claude Code's regex is left out.
        let home = PathBuf::from(OsStr::from_bytes(b"/Users/\xffu"));
        let mut p = policy("/Users/u/p", "/private/tmp", "/", &[]);
        p.roots.state = home.join(".local/state/nd7");
        p.secrets = crate::policy::secrets::defaults(&home);
        p.roots.home = home;
        for profile in [command(&p), floor(&p, Path::new("/opt/nd7-exec"))] {
            let got = forms(&profile);
            let users = vec![Sx::List(vec![sym("subpath"), st("/Users")])];
            let secret = "file-read* file-write* file-link file-clone";
            // Every secret, the vault keys and the locks: each widened to /Users.
            let every: Vec<Sx> = (0..p.secrets.len() + 2)
                .flat_map(|_| users.clone())
                .collect();
            assert!(got.contains(&rule("deny", secret, every)), "{profile}");
            assert_eq!(got.last(), Some(&rule("deny", secret, users)), "{profile}");
            assert!(!profile.contains(CLAUDE_JSON_SAVES), "{profile}");
        }
    }

    #[test]
    fn the_reader_refuses_what_an_unescaped_path_would_produce() {
        assert!(read("(a \"b)").is_err());
        assert!(read("(a \"b\\x\")").is_err());
        assert!(read("(a (b)").is_err());
        assert_eq!(
            read("; c\n(a \"b\\\"c\\\\\" d) ; e"),
            Ok(vec![Sx::List(vec![sym("a"), st("b\"c\\"), sym("d")])])
        );
    }

    #[test]
    fn credential_stores_and_where_their_links_lead_are_denied_even_under_a_grant() {
        let mut p = policy("/Users/u/p", "/private/tmp", "/Users/u", &["/Users/u", "/"]);
        // As nd7 run records a linked ~/.ssh: the name, then the real place.
        p.secrets.push("/Users/u/dotfiles/ssh".into());
        for profile in [command(&p), floor(&p, Path::new("/opt/nd7-exec"))] {
            let got = forms(&profile);
            for no in [
                "/Users/u/dotfiles/ssh/id_ed25519",
                "/Users/u/.netrc",
                "/Users/u/.gnupg/private-keys-v1.d/k.key",
                "/Users/u/.config/gh/hosts.yml",
                "/Users/u/.docker/config.json",
            ] {
                assert!(!writable(&got, no), "{no}");
            }
            let deny = got
                .iter()
                .find(|f| {
                    matches!(f, Sx::List(v) if v.get(1) == Some(&sym("file-read*"))
                        && v.contains(&path_filter("subpath", Path::new("/Users/u/dotfiles/ssh"))))
                })
                .cloned();
            assert!(deny.is_some(), "{profile}");
        }
        assert!(writable(&forms(&command(&p)), "/Users/u/dotfiles/vimrc"));
    }
}
