//! Which of a tool call's failures were the floor's refusals, and what to
//! tell the model and the user about them (ADR-0041). Pure: the payload and
//! the session's rules come in, with a [`Probe`] for what `nd7 run` sees of
//! the file system outside the floor.
//!
//! The kernel does not tell an unprivileged process which of its commands'
//! accesses Landlock refused (its audit records need privileges to read), so
//! this is a heuristic over what the tool reported, checked against the
//! rules: a path named near a "permission denied" in the tool's output counts
//! as refused by the floor only when the session's rules keep it out and the
//! account could write it without them. A path the account could not write
//! anyway (`/etc/passwd`) is not nd7's doing and is never claimed; a refusal
//! whose message names no path is not seen at all.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::Policy;
use super::grants::{Preset, tilde};

/// What `nd7 run` needs to know about a path outside the floor.
pub trait Probe {
    /// Where `path` really is: its nearest existing ancestor resolved, the
    /// rest appended.
    fn real(&self, path: &Path) -> PathBuf;
    /// Whether the account could write at `path` (its nearest existing
    /// ancestor) without the floor.
    fn writable(&self, path: &Path) -> bool;
    fn is_dir(&self, path: &Path) -> bool;
    /// Whether anything is at `path` (a link counts). Without an answer,
    /// everything is taken to exist, and no missing directory is suggested.
    fn exists(&self, _path: &Path) -> bool {
        true
    }
}

/// Why the floor keeps a path out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Why {
    /// Beyond what this session's commands (or Claude Code's own tools) may write.
    Outside,
    /// In a credential store, kept unreadable: the store.
    Secret(PathBuf),
    /// nd7's own records and keys.
    Own,
    /// Where devices are reached outside `/dev` (`Policy::devices`): the mount.
    Device(PathBuf),
    /// Inside what the session may write, but held read-only for it (a file
    /// that makes git or the shell run programs later, outside the floor,
    /// such as `.git/config`): the write or rename met a read-only mount
    /// (`EROFS`) or a mount point (`EBUSY`).
    Held,
}

/// One path the floor refused, and the grant that would have allowed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    pub path: PathBuf,
    pub why: Why,
    /// The directory (or file) `nd7 allow` would grant; `None` where nd7
    /// suggests none (a credential store, the home directory itself).
    pub grant: Option<PathBuf>,
    /// The preset that holds it, if one does.
    pub preset: Option<&'static str>,
}

/// Words a refused access leaves in a tool's output.
const MARKERS: &[&str] = &[
    "Permission denied",
    "permission denied",
    "EACCES",
    "EPERM",
    "Operation not permitted",
    "os error 13",
    "Errno 13",
    "not owned or is not writable",
    "Read-only file system",
];

/// The words a write to a held file leaves: a read-only mount, or a rename
/// over a mount point (git's lock file renamed onto `.git/config`).
const HELD_MARKERS: &[&str] = &["Read-only file system", "Device or resource busy"];

/// At most this much of a tool's output is read.
const SCANNED: usize = 256 * 1024;
/// At most this many paths are judged per call.
const CANDIDATES: usize = 16;
/// Lines this far from a marker are read for paths (npm names the path on
/// a line of its own, cargo a few lines above the cause).
const NEAR: usize = 4;

/// The tool calls worth judging: Bash's results and failures, the file
/// tools' failures.
fn text_of(payload: &Value) -> Option<String> {
    let event = payload.get("hook_event_name")?.as_str()?;
    match event {
        "PostToolUseFailure" => payload.get("error")?.as_str().map(str::to_string),
        "PostToolUse" => {
            let response = payload.get("tool_response")?;
            // Codex's result is the output text itself.
            if let Some(text) = response.as_str() {
                return Some(text.to_string());
            }
            let part = |k: &str| response.get(k).and_then(Value::as_str).unwrap_or("");
            Some(format!("{}\n{}", part("stdout"), part("stderr")))
        }
        _ => None,
    }
}

/// The paths the floor refused in the tool call `payload` (a PostToolUse or
/// PostToolUseFailure payload), judged against `policy`.
pub fn judge(payload: &Value, policy: &Policy, probe: &dyn Probe) -> Vec<Refused> {
    let Some(text) = scanned(payload) else {
        return Vec::new();
    };
    let call = Call::new(payload, policy, probe);
    let found = Found::in_text(&text, &call);
    let mut out: Vec<Refused> = Vec::new();
    for (n, path) in found.paths.iter().enumerate().take(CANDIDATES) {
        // Named only by a held file's words: nothing else is claimed of it.
        let held_only = n >= found.general;
        if let Some(refused) = call.refusal(path, found.held.contains(path), held_only) {
            push_once(&mut out, refused);
        }
    }
    out
}

/// The text of a tool call worth judging ([`text_of`]), its first
/// [`SCANNED`] bytes at most.
fn scanned(payload: &Value) -> Option<String> {
    let mut text = text_of(payload)?;
    if text.len() > SCANNED {
        let mut cut = SCANNED;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    Some(text)
}

/// One tool call being judged: where it ran, and the rules it ran under.
struct Call<'a> {
    payload: &'a Value,
    policy: &'a Policy,
    probe: &'a dyn Probe,
    cwd: PathBuf,
    home: &'a Path,
    /// Whether it is a Bash command (else one of the agent's own tools).
    bash: bool,
    writes: Vec<PathBuf>,
    unreadable: Vec<PathBuf>,
    unwritable: Vec<PathBuf>,
}

impl<'a> Call<'a> {
    fn new(payload: &'a Value, policy: &'a Policy, probe: &'a dyn Probe) -> Call<'a> {
        let cwd = payload
            .get("cwd")
            .and_then(Value::as_str)
            .map(PathBuf::from)
            .unwrap_or_else(|| policy.roots.project.clone());
        let bash = payload.get("tool_name").and_then(Value::as_str) == Some("Bash");
        // Bash commands run under the floor plus the grants; Claude Code's own
        // tools under the floor alone.
        let writes = if bash {
            policy.command_writes()
        } else {
            policy.floor_writes()
        };
        Call {
            payload,
            policy,
            probe,
            cwd,
            home: &policy.roots.home,
            bash,
            writes,
            unreadable: policy.unreadable(),
            unwritable: policy.unwritable(),
        }
    }

    /// Whether the floor refused `path` (`held_named` when a held file's
    /// words name it, `held_only` when only they do), and why; `None` when
    /// it is not nd7's doing, or is not claimed.
    fn refusal(&self, path: &Path, held_named: bool, held_only: bool) -> Option<Refused> {
        // Inside a credential store nothing is looked at: not even where a
        // link there leads (the answer goes back to the agent).
        let lexical = self
            .unreadable
            .iter()
            .find(|s| path.starts_with(s))
            .cloned();
        let real = match lexical {
            Some(_) => path.to_path_buf(),
            None => self.probe.real(path),
        };
        let held = |set: &[PathBuf]| {
            set.iter()
                .find(|s| real.starts_with(s) || path.starts_with(s))
                .cloned()
        };
        let why = if let Some(store) = lexical.or_else(|| held(&self.unreadable)) {
            self.unreadable_why(store)
        } else if held(&self.unwritable).is_some() {
            Why::Own
        } else if held_named
            && self.writes.iter().any(|w| real.starts_with(w))
            && self.probe.writable(&real)
        {
            // Writable by the rules and by the account, yet read-only or a
            // mount point here: nd7's hold.
            Why::Held
        } else if held_only {
            return None;
        } else if !self.writes.iter().any(|w| real.starts_with(w)) && self.probe.writable(&real) {
            return Some(self.outside(real));
        } else {
            return None;
        };
        Some(Refused {
            path: real,
            why,
            grant: None,
            preset: None,
        })
    }

    /// Why `store`, kept unreadable, is: nd7's own, a device's mount, or a
    /// credential store.
    fn unreadable_why(&self, store: PathBuf) -> Why {
        let policy = self.policy;
        let own = [policy.nd7_dir(), policy.vault_dir(), policy.locks_dir()].contains(&store);
        if own {
            Why::Own
        } else if policy.devices.contains(&store) {
            Why::Device(store)
        } else {
            Why::Secret(store)
        }
    }

    /// `real`, beyond what the call may write and writable by the account:
    /// refused, with the preset or the grant that would allow it.
    fn outside(&self, real: PathBuf) -> Refused {
        let command = self
            .payload
            .pointer("/tool_input/command")
            .and_then(Value::as_str);
        let (grant, preset) = match Preset::for_refusal(&real, self.home, command) {
            Some((preset, at)) => (Some(at), Some(preset.name)),
            None => (self.grant_for(&real), None),
        };
        Refused {
            path: real,
            why: Why::Outside,
            grant,
            preset,
        }
    }

    /// The directory (or file) `nd7 allow` would grant for `real`; `None`
    /// where that is the home itself or a directory above it, too broad to
    /// suggest.
    fn grant_for(&self, real: &Path) -> Option<PathBuf> {
        let home = self.home;
        // A directory directly in the home that is not there yet
        // (`~/.cache` on a fresh home): `nd7 allow` creates it.
        let missing_in_home = real.parent() == Some(home) && !self.probe.exists(real);
        let dir = if self.probe.is_dir(real) || missing_in_home {
            real.to_path_buf()
        } else {
            real.parent()
                .map_or_else(|| real.to_path_buf(), Path::to_path_buf)
        };
        (!home.starts_with(&dir)).then_some(dir)
    }
}

/// The paths a tool call's output names near a refusal's words.
struct Found {
    /// In order: the file tool's own file (when its output has a refusal's
    /// words), those near a refusal's words, then those only a held file's
    /// words name.
    paths: Vec<PathBuf>,
    /// How many were near a refusal's words, counted before the file
    /// tool's own was put first.
    general: usize,
    /// Those a held file's words name.
    held: Vec<PathBuf>,
}

impl Found {
    fn in_text(text: &str, call: &Call) -> Found {
        let (cwd, home) = (call.cwd.as_path(), call.home);
        let mut paths = candidates(text, cwd, home);
        let general = paths.len();
        let held = held_candidates(text, cwd, home);
        for path in &held {
            if !paths.contains(path) {
                paths.push(path.clone());
            }
        }
        if !call.bash
            && MARKERS.iter().any(|m| text.contains(m))
            && let Some(file) = call
                .payload
                .pointer("/tool_input/file_path")
                .and_then(Value::as_str)
        {
            paths.insert(0, normalize(Path::new(file), cwd, home));
        }
        Found {
            paths,
            general,
            held,
        }
    }
}

/// Adds `refused` to `out` unless a line there says it already: one line
/// per grant, and a deeper path of one already said adds nothing.
fn push_once(out: &mut Vec<Refused>, refused: Refused) {
    if !out.iter().any(|r| {
        r.why == refused.why
            && (refused.path.starts_with(&r.path) || r.grant.is_some() && r.grant == refused.grant)
    }) {
        out.push(refused);
    }
}

/// The paths a held file's refusal names: the word just before
/// `: Read-only file system` or `: Device or resource busy` (`could not
/// write config file .git/config: Device or resource busy`), relative ones
/// resolved against `cwd`.
fn held_candidates(text: &str, cwd: &Path, home: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for line in text.lines() {
        for marker in HELD_MARKERS {
            let Some(at) = line.find(&format!(": {marker}")) else {
                continue;
            };
            let before = &line[..at];
            let word = before
                .rsplit(char::is_whitespace)
                .next()
                .unwrap_or("")
                .trim_matches(|c| matches!(c, '\'' | '"' | '`' | '\u{2018}' | '\u{2019}'));
            if word.len() < 2 || word.starts_with('-') || word.contains("://") {
                continue;
            }
            let path = normalize(Path::new(word), cwd, home);
            if !out.contains(&path) {
                out.push(path);
            }
        }
    }
    out
}

/// The paths named in `text` near a refusal's words, absolute (relative ones
/// resolved against `cwd`) and lexically normal, in order, each once.
fn candidates(text: &str, cwd: &Path, home: &Path) -> Vec<PathBuf> {
    let lines: Vec<&str> = text.lines().collect();
    let marked: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| MARKERS.iter().any(|m| l.contains(m)))
        .map(|(i, _)| i)
        .collect();
    let mut out: Vec<PathBuf> = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(&mark) = marked.iter().find(|&&m| m.abs_diff(i) <= NEAR) else {
            continue;
        };
        for (token, quoted) in tokens(line) {
            let absolute = token.starts_with('/') || token.starts_with("~/");
            // A relative path counts only when quoted on the refusal's own
            // line (`touch: cannot touch 'out/x': Permission denied`).
            if !(absolute || (quoted && i == mark && !token.starts_with('-'))) {
                continue;
            }
            if token.len() < 2 || token.contains("://") || token.starts_with("//") {
                continue;
            }
            let path = normalize(Path::new(token), cwd, home);
            if !out.contains(&path) {
                out.push(path);
            }
        }
    }
    out
}

/// The path-like words of a line: runs starting with `/` or `~/` after a
/// separator, and quoted strings (which may hold spaces), each with whether
/// it was quoted.
fn tokens(line: &str) -> Vec<(&str, bool)> {
    let mut out = Vec::new();
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        // GNU tools in a UTF-8 locale quote ‘so’ (C.UTF-8, en_US.UTF-8).
        if line[i..].starts_with('\u{2018}') {
            let open = '\u{2018}'.len_utf8();
            if let Some(end) = line[i + open..].find('\u{2019}') {
                let inner = &line[i + open..i + open + end];
                if !inner.is_empty() {
                    out.push((inner.trim_end_matches('/'), true));
                }
                i += open + end + '\u{2019}'.len_utf8();
                continue;
            }
        }
        if matches!(c, b'\'' | b'"' | b'`') {
            if let Some(end) = line[i + 1..].find(char::from(c)) {
                let inner = &line[i + 1..i + 1 + end];
                if !inner.is_empty() && !inner.contains('\n') {
                    out.push((inner.trim_end_matches('/'), true));
                }
                i += end + 2;
                continue;
            }
            i += 1;
            continue;
        }
        let starts = (c == b'/' || (c == b'~' && bytes.get(i + 1) == Some(&b'/')))
            && (i == 0 || matches!(bytes[i - 1], b' ' | b'\t' | b'(' | b'=' | b':' | b','));
        if starts {
            let end = line[i..]
                .find(|ch: char| {
                    ch.is_whitespace()
                        || matches!(
                            ch,
                            '\'' | '"' | '`' | ')' | ',' | ';' | ':' | '<' | '>' | '|'
                        )
                })
                .map_or(line.len(), |e| i + e);
            let token = line[i..end].trim_end_matches('.').trim_end_matches('/');
            if !token.is_empty() {
                out.push((token, false));
            }
            i = end;
            continue;
        }
        i += 1;
    }
    out
}

/// `path` made absolute (`~/` under `home`, relative against `cwd`), with
/// `.` and `..` taken out lexically.
fn normalize(path: &Path, cwd: &Path, home: &Path) -> PathBuf {
    let path = super::grants::expand_tilde(path, home);
    let joined = if path.is_absolute() {
        path
    } else {
        cwd.join(path)
    };
    super::push_lexically(Path::new("/"), &joined)
}

/// What `nd7 allow` would grant `refused`: the command to type.
pub fn allow_command(refused: &Refused, home: &Path) -> Option<String> {
    match (refused.preset, &refused.grant) {
        (Some(preset), _) => Some(format!("nd7 allow --preset {preset}")),
        (None, Some(grant)) => Some(format!("nd7 allow {}", quote(&tilde(grant, home)))),
        (None, None) => None,
    }
}

/// A path as a person would type it in a shell: bare when nothing in it
/// needs quoting, else in single quotes (`~` kept outside them).
fn quote(text: &str) -> String {
    if text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_./~:=@+,-".contains(c))
    {
        return text.to_string();
    }
    match text.strip_prefix("~/") {
        Some(rest) => format!("~/{}", crate::shell_prefix::shell_quote(rest)),
        None => crate::shell_prefix::shell_quote(text),
    }
}

/// What the model is told, after a tool call the floor refused.
pub fn explain(refused: &[Refused], tool: &str, home: &Path) -> String {
    let mut out = String::from(
        "nd7's sandbox (the user runs you under `nd7 run`) refused this, not the files' own permissions:\n",
    );
    for r in refused {
        let path = tilde(&r.path, home);
        match &r.why {
            Why::Secret(store) => out.push_str(&format!(
                "- {path}: inside {}, a credential store nd7 keeps unreadable; no grant opens it. If the task really needs it, tell the user why.\n",
                tilde(store, home)
            )),
            Why::Own => out.push_str(&format!(
                "- {path}: nd7's own records and keys, which nothing under nd7 run may change.\n"
            )),
            Why::Device(mount) => out.push_str(&format!(
                "- {path}: under {}, where devices are mounted outside /dev; nd7 keeps it unreadable and no grant opens it.\n",
                tilde(mount, home)
            )),
            Why::Held => out.push_str(&format!(
                "- {path}: held read-only by nd7 for this session, because what it says can make git or the shell run programs later, outside the sandbox (hooks, core.fsmonitor, aliases); no grant opens it.{} Ask the user to run this command themselves, outside nd7 run.\n",
                git_config_note(&r.path)
            )),
            Why::Outside => match allow_command(r, home) {
                Some(allow) => {
                    let lasting = match r.preset {
                        Some(p) => format!("`preset {p}` in ~/.nd7/grants"),
                        None => format!(
                            "`{}` in ~/.nd7/grants",
                            quote(&tilde(r.grant.as_deref().unwrap_or(&r.path), home))
                        ),
                    };
                    out.push_str(&format!(
                        "- {path}: outside what this session may write. The user can allow it by running `{allow}` in another terminal (from the next command on), or for every session with {lasting}.\n"
                    ));
                }
                None => out.push_str(&format!(
                    "- {path}: outside what this session may write, directly in the home directory, which nd7 does not open to commands; the user can run this command outside nd7 run.\n"
                )),
            },
        }
    }
    if tool != "Bash" && refused.iter().any(|r| r.why == Why::Outside) {
        out.push_str(
            "Claude Code's own Write and Edit tools stay within the project and the temp directory whatever is allowed; grants reach Bash commands.\n",
        );
    }
    out.push_str(
        "Do not retry it, change permissions, use sudo, or look for another way around the sandbox: tell the user what was refused and ask them to allow it or to run it themselves.",
    );
    out
}

/// What `nd7 hook-explain` prints for the hook `event` (PostToolUse or
/// PostToolUseFailure): `text` as additional context, which Claude Code adds
/// to what the model reads next (checked with 2.1.197 and 2.1.332).
pub fn hook_reply(event: &str, text: &str) -> Value {
    json!({"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}})
}

/// The body of a `floor_refused` entry in the run's log.
pub fn entry_body(refused: &[Refused], tool: &str, home: &Path) -> Value {
    json!({
        "tool": tool,
        "paths": refused.iter().map(|r| {
            let (why, store) = match &r.why {
                Why::Outside => ("outside", None),
                Why::Secret(s) => ("secret", Some(s.to_string_lossy().into_owned())),
                Why::Own => ("nd7", None),
                Why::Device(m) => ("device", Some(m.to_string_lossy().into_owned())),
                Why::Held => ("held", None),
            };
            json!({
                "path": r.path.to_string_lossy(),
                "why": why,
                "store": store,
                "grant": r.grant.as_ref().map(|g| g.to_string_lossy().into_owned()),
                "preset": r.preset,
                "allow": allow_command(r, home),
            })
        }).collect::<Vec<_>>(),
    })
}

/// What a held git configuration's refusal adds: which edits of it nd7
/// lets through on Linux (ADR-0134), so that the model knows this one
/// changed something else.
fn git_config_note(path: &Path) -> &'static str {
    if path.file_name().is_some_and(|n| n == "config") {
        " (Under nd7 run on Linux, git's edits of a repository's config go through when every key they change runs nothing: user.name, user.email, a remote's or branch's settings with a plain https, ssh or git URL; this command changed another key.)"
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file system of a few existing directories, all the account's but `/etc`.
    struct Fs;

    impl Probe for Fs {
        fn real(&self, path: &Path) -> PathBuf {
            // ~/link leads to /data, and so does ~/.ssh/cfg.
            if path == Path::new("/home/u/.ssh/cfg") {
                return "/data/ssh-cfg".into();
            }
            match path.strip_prefix("/home/u/link") {
                Ok(rest) => Path::new("/data").join(rest),
                Err(_) => path.to_path_buf(),
            }
        }
        fn writable(&self, path: &Path) -> bool {
            !path.starts_with("/etc") && !path.starts_with("/proc")
        }
        fn is_dir(&self, path: &Path) -> bool {
            ["/outside", "/home/u/.npm", "/data", "/home/u"]
                .iter()
                .any(|d| path == Path::new(d))
        }
        fn exists(&self, path: &Path) -> bool {
            // A fresh home: no ~/.cache yet.
            !path.starts_with("/home/u/.cache")
        }
    }

    fn policy() -> Policy {
        crate::policy::tests::policy(&["/srv/granted"])
    }

    fn failed(tool: &str, error: &str) -> Value {
        json!({"hook_event_name": "PostToolUseFailure", "tool_name": tool, "cwd": "/home/u/proj",
               "tool_input": {"command": "x"}, "error": error})
    }

    fn paths(r: &[Refused]) -> Vec<String> {
        r.iter().map(|r| r.path.display().to_string()).collect()
    }

    /// Guards `Why::Held`: git's rename of its lock file onto a held
    /// `.git/config` (EBUSY) or a write to a held file (EROFS), inside what
    /// the session may write, is nd7's hold, named; the same words about a
    /// path outside the write roots claim nothing (no Landlock refusal says
    /// them).
    /// On a fresh home a tool's first refusal names `~/.cache`, which is not
    /// there: the fix is `nd7 allow ~/.cache` (created by it), not "run it
    /// outside nd7 run". A file that is there, directly in the home, still
    /// gets no grant of the home.
    #[test]
    fn a_missing_directory_in_the_home_is_the_grant() {
        let p = policy();
        let home = Path::new("/home/u");
        let r = judge(
            &failed(
                "Bash",
                "Exit code 1\nmkdir: cannot create directory '/home/u/.cache': Permission denied",
            ),
            &p,
            &Fs,
        );
        assert_eq!(paths(&r), ["/home/u/.cache"]);
        assert_eq!(
            allow_command(&r[0], home).as_deref(),
            Some("nd7 allow ~/.cache")
        );
        let r = judge(
            &failed(
                "Bash",
                "Exit code 1\ntouch: cannot touch '/home/u/notes': Permission denied",
            ),
            &p,
            &Fs,
        );
        assert_eq!(allow_command(&r[0], home), None);
    }

    #[test]
    fn a_held_file_is_named_as_held() {
        let p = policy();
        for error in [
            "Exit code 4\nerror: could not write config file .git/config: Device or resource busy",
            "Exit code 1\nsh: line 1: .git/hooks/pre-commit: Read-only file system",
        ] {
            let r = judge(&failed("Bash", error), &p, &Fs);
            assert_eq!(r.len(), 1, "{error}: {r:?}");
            assert_eq!(r[0].why, Why::Held);
            assert!(r[0].path.starts_with("/home/u/proj/.git"), "{r:?}");
            assert_eq!(allow_command(&r[0], Path::new("/home/u")), None);
            let said = explain(&r, "Bash", Path::new("/home/u"));
            assert!(said.contains("held read-only by nd7"));
            // Only the config's refusal says which of its edits go through.
            let config = r[0].path.ends_with(".git/config");
            assert_eq!(said.contains("every key they change runs nothing"), config);
        }
        let r = judge(
            &failed(
                "Bash",
                "Exit code 1\nrm: cannot remove '/outside/mnt': Device or resource busy",
            ),
            &p,
            &Fs,
        );
        assert!(r.is_empty(), "{r:?}");
    }

    #[test]
    fn what_real_tools_print_is_read_for_the_path_refused() {
        let p = policy();
        let cases = [
            (
                "Exit code 243\nnpm error code EACCES\nnpm error syscall mkdir\nnpm error path /home/u/.npm/_cacache\nnpm error errno -13\nnpm error Your cache folder contains root-owned files",
                "/home/u/.npm/_cacache",
                Some("nd7 allow --preset npm"),
            ),
            (
                "Exit code 101\nerror: failed to download `cfg-if v1.0.0`\n\nCaused by:\n  failed to create directory `/home/u/.cargo/registry/cache/index.crates.io-1949cf8c6b5b557f`\n\nCaused by:\n  Permission denied (os error 13)",
                "/home/u/.cargo/registry/cache/index.crates.io-1949cf8c6b5b557f",
                Some("nd7 allow --preset cargo"),
            ),
            (
                "Exit code 1\nERROR: Could not install packages due to an OSError: [Errno 13] Permission denied: '/home/u/.local/lib/python3.11'\nCheck the permissions.",
                "/home/u/.local/lib/python3.11",
                Some("nd7 allow --preset python-user"),
            ),
            (
                "Exit code 1\ntouch: cannot touch '/outside/new file': Permission denied",
                "/outside/new file",
                Some("nd7 allow /outside"),
            ),
            // In a UTF-8 locale GNU tools quote with ‘ and ’.
            (
                "Exit code 1\nmkdir: cannot create directory \u{2018}/outside/made\u{2019}: Permission denied",
                "/outside/made",
                Some("nd7 allow /outside"),
            ),
            (
                "Exit code 1\nmkdir: cannot create directory 'out': Permission denied",
                "/home/u/proj/out",
                None,
            ),
            (
                "Exit code 255\nerror: could not lock config file /home/u/.gitconfig: Permission denied",
                "/home/u/.gitconfig",
                None,
            ),
        ];
        for (error, path, allow) in cases {
            let r = judge(&failed("Bash", error), &p, &Fs);
            if path.starts_with("/home/u/proj") {
                assert!(r.is_empty(), "the project is writable: {r:?}");
                continue;
            }
            assert_eq!(paths(&r), [path], "{error}");
            assert_eq!(r[0].why, Why::Outside);
            assert_eq!(
                allow_command(&r[0], &p.roots.home).as_deref(),
                allow,
                "{error}"
            );
        }
    }

    #[test]
    fn only_the_floors_refusals_are_claimed() {
        let p = policy();
        for error in [
            // The account could not write it either.
            "touch: cannot touch '/etc/passwd': Permission denied",
            // Allowed by the rules: something else refused it.
            "touch: cannot touch '/tmp/x': Permission denied",
            "touch: cannot touch '/srv/granted/x': Permission denied",
            // No refusal at all.
            "cat: /outside/x: No such file or directory",
            // A URL is no path.
            "GET https://registry.npmjs.org/x: EACCES",
        ] {
            assert_eq!(judge(&failed("Bash", error), &p, &Fs), [], "{error}");
        }
        // A grant reaches Bash commands, never Claude Code's own tools.
        let write = json!({"hook_event_name": "PostToolUseFailure", "tool_name": "Write",
            "cwd": "/home/u/proj", "tool_input": {"file_path": "/srv/granted/f"},
            "error": "EACCES: permission denied, open '/srv/granted/f.tmp.7.ab'"});
        let r = judge(&write, &p, &Fs);
        assert_eq!(paths(&r), ["/srv/granted/f"], "{r:?}");
        assert!(explain(&r, "Write", &p.roots.home).contains("grants reach Bash commands"));
    }

    #[test]
    fn secrets_and_nd7s_own_are_never_offered() {
        let p = policy();
        let r = judge(
            &failed(
                "Bash",
                "cat: /home/u/.ssh/id_ed25519: Permission denied\nsh: /home/u/.nd7/runs/1/x: Permission denied\ncp: cannot create '/home/u/.local/state/nd7/sessions/s/events.ndjson': Permission denied",
            ),
            &p,
            &Fs,
        );
        assert_eq!(
            r.iter().map(|r| r.why.clone()).collect::<Vec<_>>(),
            [Why::Secret("/home/u/.ssh".into()), Why::Own, Why::Own]
        );
        assert!(r.iter().all(|r| allow_command(r, &p.roots.home).is_none()));
        // Where a link in a store leads is not looked up, nor told.
        let link = judge(
            &failed("Bash", "cat: /home/u/.ssh/cfg: Permission denied"),
            &p,
            &Fs,
        );
        assert_eq!(paths(&link), ["/home/u/.ssh/cfg"]);
        let text = explain(&r, "Bash", &p.roots.home);
        assert!(text.contains("~/.ssh, a credential store"), "{text}");
        assert!(!text.contains("nd7 allow"), "{text}");
    }

    /// Guards `Why::Device` in `judge`: a device reached through a mount
    /// outside `/dev` is told as that, not as a credential store to take
    /// off `~/.nd7/secrets`, and neither it nor the mount can be granted.
    #[test]
    fn a_device_mount_is_told_as_devices_and_never_granted() {
        let mut p = policy();
        p.devices.push("/srv/chroot/dev".into());
        let r = judge(
            &failed(
                "Bash",
                "head: cannot open '/srv/chroot/dev/sda' for reading: Permission denied",
            ),
            &p,
            &Fs,
        );
        assert_eq!(
            r.iter().map(|r| r.why.clone()).collect::<Vec<_>>(),
            [Why::Device("/srv/chroot/dev".into())]
        );
        let text = explain(&r, "Bash", &p.roots.home);
        assert!(text.contains("devices are mounted outside /dev"), "{text}");
        assert!(
            !text.contains("credential") && !text.contains("nd7 allow"),
            "{text}"
        );
        let body = entry_body(&r, "Bash", &p.roots.home);
        assert_eq!(body["paths"][0]["why"], "device");
        assert_eq!(body["paths"][0]["store"], "/srv/chroot/dev");
        for grant in ["/srv/chroot/dev", "/srv/chroot/dev/pts"] {
            assert!(
                matches!(
                    p.check_grant(Path::new(grant)),
                    Err(crate::policy::GrantError::Device(_))
                ),
                "{grant}"
            );
        }
        assert!(p.unreadable().contains(&PathBuf::from("/srv/chroot/dev")));
    }

    #[test]
    fn the_explanation_names_the_path_the_sandbox_and_the_command() {
        let p = policy();
        let r = judge(
            &failed(
                "Bash",
                "touch: cannot touch '/outside/a b/c': Permission denied\nln: ~/link/x: Permission denied",
            ),
            &p,
            &Fs,
        );
        let text = explain(&r, "Bash", &p.roots.home);
        assert!(text.starts_with("nd7's sandbox"), "{text}");
        assert!(text.contains("`nd7 allow '/outside/a b'`"), "{text}");
        // Where a link leads, the real place is what is granted.
        assert_eq!(paths(&r), ["/outside/a b/c", "/data/x"]);
        assert!(text.contains("`nd7 allow /data`"), "{text}");
        assert!(text.contains("Do not retry it"), "{text}");
        let body = entry_body(&r, "Bash", &p.roots.home);
        assert_eq!(body["paths"][0]["why"], "outside");
        assert_eq!(body["paths"][0]["allow"], "nd7 allow '/outside/a b'");
        // A successful command's output is read too (pip without its cache).
        let ok = json!({"hook_event_name": "PostToolUse", "tool_name": "Bash", "cwd": "/home/u/proj",
            "tool_response": {"stdout": "Successfully installed six", "stderr":
            "WARNING: The directory '/home/u/.cache/pip' or its parent directory is not owned or is not writable by the current user. The cache has been disabled."}});
        let r = judge(&ok, &p, &Fs);
        assert_eq!(paths(&r), ["/home/u/.cache/pip"]);
        assert_eq!(r[0].preset, Some("pip"));
        // Other events say nothing.
        assert_eq!(
            judge(&json!({"hook_event_name": "PreToolUse"}), &p, &Fs),
            []
        );
    }
}
