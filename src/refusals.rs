//! The floor's refusals as `nd7 run` meets them (ADR-0041): `nd7 hook-explain`
//! hands each finished tool call to the run; the run judges it against the
//! session's current rules and the file system as it is outside the floor
//! ([`crate::policy::refusal`]), writes what the floor refused into the run's
//! log (`floor_refused`), and answers with what to tell the model. At the end
//! of the run, [`summary`] says it all once more to the user. The keeper
//! notes the key of each edit of a held git configuration it refused
//! ([`note_held_key`]), which the model is told with the next explanation
//! ([`held_keys_untold`], ADR-0134).

use std::io;
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::policy::Policy;
use crate::policy::grants::tilde;
use crate::policy::refusal::{self, Probe, Refused, Why};
use crate::read::safe::plural;
use crate::run_log::RunLog;

/// The file system as `nd7 run` (unconfined, the user's account) sees it.
/// `root` is the root as the account sees it outside the session's
/// namespaces, where it has them (`sandbox::outside_root`, handed in by the
/// sandbox that serves the request, so that this module stays below it).
pub struct Outside<'a> {
    pub root: Option<BorrowedFd<'a>>,
}

impl Probe for Outside<'_> {
    fn real(&self, path: &Path) -> PathBuf {
        let Some(existing) = path
            .ancestors()
            .find(|a| std::fs::symlink_metadata(a).is_ok())
        else {
            return path.to_path_buf();
        };
        let rest = path.strip_prefix(existing).unwrap_or(Path::new(""));
        match std::fs::canonicalize(existing) {
            Ok(real) if rest.as_os_str().is_empty() => real,
            Ok(real) => real.join(rest),
            Err(_) => path.to_path_buf(),
        }
    }

    /// Asked of the mounts outside the session's namespaces where it has
    /// them: inside, a file nd7 locked is read-only to the session too, and
    /// a write the lock refused would not read as the floor's.
    fn writable(&self, path: &Path) -> bool {
        let Some(existing) = path
            .ancestors()
            .find(|a| std::fs::symlink_metadata(a).is_ok())
        else {
            return false;
        };
        match (self.root, existing.strip_prefix("/")) {
            (Some(root), Ok(rel)) => {
                let rel = if rel.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    rel
                };
                rustix::fs::accessat(
                    root,
                    rel,
                    rustix::fs::Access::WRITE_OK,
                    rustix::fs::AtFlags::empty(),
                )
                .is_ok()
            }
            _ => rustix::fs::access(existing, rustix::fs::Access::WRITE_OK).is_ok(),
        }
    }

    fn is_dir(&self, path: &Path) -> bool {
        std::fs::metadata(path).is_ok_and(|m| m.is_dir())
    }

    fn exists(&self, path: &Path) -> bool {
        std::fs::symlink_metadata(path).is_ok()
    }
}

/// Judges the tool call in `payload` (what `nd7 hook-explain` received)
/// against `policy`; when the floor refused something, writes the
/// `floor_refused` entry and returns what to tell the model. `outside_root`
/// is [`Outside`]'s `root`.
pub fn explain(
    payload: &[u8],
    policy: &Policy,
    log: &RunLog,
    outside_root: Option<BorrowedFd<'_>>,
) -> io::Result<Option<String>> {
    let Ok(payload) = serde_json::from_slice::<Value>(payload) else {
        return Ok(None);
    };
    let refused = refusal::judge(&payload, policy, &Outside { root: outside_root });
    // Connections nd7's proxy refused since the last call: told once.
    let net = log.net_refusals_untold();
    if refused.is_empty() {
        return Ok((!net.is_empty()).then(|| net.concat()));
    }
    let tool = payload
        .get("tool_name")
        .and_then(Value::as_str)
        .unwrap_or("?");
    let home = &policy.roots.home;
    let id = payload.get("tool_use_id").and_then(Value::as_str);
    let cwd = payload.get("cwd").and_then(Value::as_str);
    log.floor_refused(&refused, tool, home, cwd, id)
        .map_err(io::Error::other)?;
    Ok(Some(refusal::explain(&refused, tool, home) + &net.concat()))
}

/// The file in the run directory where the keeper notes each edit of a
/// held git configuration it refused, and the key that stopped it
/// (ADR-0134): one JSON `[path, key]` a line, at most [`MAX_HELD_KEYS`]
/// bytes. Nothing inside the floor can write the run directory.
pub const HELD_KEYS: &str = "held-git-keys";

/// The most [`HELD_KEYS`] grows to; later refusals are not noted.
pub const MAX_HELD_KEYS: u64 = 64 * 1024;

/// Notes in `file` ([`HELD_KEYS`]) that an edit of the git configuration
/// at `path` was refused for `key`. Best effort: a note that cannot be
/// written leaves only the model's explanation shorter.
pub fn note_held_key(file: &Path, path: &Path, key: &str) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(mut f) = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(file)
    else {
        return;
    };
    if f.metadata().is_ok_and(|m| m.len() >= MAX_HELD_KEYS) {
        return;
    }
    let mut line = serde_json::json!([path, key]).to_string();
    line.push('\n');
    let _ = f.write_all(line.as_bytes());
}

/// What the model is told of the keys the keeper refused since the last
/// call ([`note_held_key`], in `run_dir`), each once: the file is emptied
/// as it is read. Empty when there were none.
pub fn held_keys_untold(run_dir: &Path, home: &Path) -> String {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(mut f) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(run_dir.join(HELD_KEYS))
    else {
        return String::new();
    };
    let mut text = String::new();
    let read = (&mut f).take(MAX_HELD_KEYS).read_to_string(&mut text);
    let _ = f.set_len(0);
    if read.is_err() {
        return String::new();
    }
    let mut out = String::new();
    for line in text.lines() {
        let Ok((path, key)) = serde_json::from_str::<(PathBuf, String)>(line) else {
            continue;
        };
        out.push_str(&format!(
            "- {}: nd7 refused git's edit of it because it changes `{}`, a key that can make git run a program, or one nd7 does not know to run nothing. Edits that change only user.name, user.email, a remote's or a branch's settings (with a plain https, ssh or git URL) go through.\n",
            tilde(&path, home),
            nd7_format::safe::term(&key, nd7_format::safe::Lines::One)
        ));
    }
    out
}

/// What `nd7 run` says at its end about the floor's refusals it was told
/// of: each path once, with the grant that would have allowed it. Empty when
/// there were none.
pub fn summary(refused: &[Refused], home: &Path, log_id: &str) -> Vec<String> {
    if refused.is_empty() {
        return Vec::new();
    }
    let mut seen: Vec<&Refused> = Vec::new();
    for r in refused {
        if !seen.iter().any(|s| s.path == r.path) {
            seen.push(r);
        }
    }
    let mut out = vec![format!(
        "the sandbox refused {} path{} this session (log {log_id} has each one, as floor_refused):",
        seen.len(),
        plural(seen.len(), "", "s")
    )];
    // Paths come from a tool's output, which the agent controls: shown inert.
    let inert = |text: String| crate::read::safe::term(&text, crate::read::safe::Lines::One);
    for r in seen {
        let path = inert(tilde(&r.path, home));
        let line = match (&r.why, refusal::allow_command(r, home)) {
            (Why::Secret(store), _) => format!(
                "  {path}: a credential store ({}), kept unreadable; change that in ~/.nd7/secrets",
                inert(tilde(store, home))
            ),
            (Why::Own, _) => format!("  {path}: nd7's own records, never writable"),
            (Why::Held, _) => format!(
                "  {path}: held read-only under nd7 run (it can make git or the shell run programs outside the sandbox); run that command yourself, outside nd7 run"
            ),
            (Why::Device(mount), _) => format!(
                "  {path}: devices mounted outside /dev ({}), kept unreadable; no grant opens them",
                inert(tilde(mount, home))
            ),
            (Why::Outside, Some(allow)) => {
                let lasting = match r.preset {
                    Some(p) => format!("preset {p}"),
                    None => inert(tilde(r.grant.as_deref().unwrap_or(&r.path), home)),
                };
                let allow = inert(allow);
                format!("  {path}: `{allow}` (or `{lasting}` in ~/.nd7/grants, for every session)")
            }
            (Why::Outside, None) => {
                format!(
                    "  {path}: directly in your home directory; run that command outside nd7 run"
                )
            }
        };
        out.push(line);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refused key is told once, escaped (a subsection is the agent's
    /// text), and the notes stop growing at their bound.
    #[test]
    fn held_keys_are_told_once_and_escaped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = Path::new("/home/u");
        let file = dir.path().join(HELD_KEYS);
        let config = Path::new("/home/u/p/.git/config");
        assert_eq!(held_keys_untold(dir.path(), home), "");
        note_held_key(&file, config, "core.fsmonitor");
        note_held_key(&file, config, "alias.\u{1b}]0;x\u{7}.st");
        let told = held_keys_untold(dir.path(), home);
        assert!(told.contains("- ~/p/.git/config: nd7 refused git's edit of it because it changes `core.fsmonitor`"), "{told}");
        assert!(!told.contains('\u{1b}'), "{told}");
        assert!(told.contains("alias.\\x1b]0;x"), "{told}");
        assert_eq!(held_keys_untold(dir.path(), home), "", "told twice");
        std::fs::write(&file, vec![b'x'; MAX_HELD_KEYS as usize]).expect("fill");
        note_held_key(&file, config, "core.pager");
        assert_eq!(std::fs::metadata(&file).expect("stat").len(), MAX_HELD_KEYS);
    }

    #[test]
    fn the_summary_names_each_path_once_with_its_grant() {
        let home = Path::new("/home/u");
        let npm = Refused {
            path: "/home/u/.npm/_cacache".into(),
            why: Why::Outside,
            grant: Some("/home/u/.npm/_cacache".into()),
            preset: Some("npm"),
        };
        let ssh = Refused {
            path: "/home/u/.ssh/id".into(),
            why: Why::Secret("/home/u/.ssh".into()),
            grant: None,
            preset: None,
        };
        let out = Refused {
            path: "/srv/out/x".into(),
            why: Why::Outside,
            grant: Some("/srv/out".into()),
            preset: None,
        };
        let evil = Refused {
            path: "/srv/\x1b]0;owned\x07".into(),
            why: Why::Outside,
            grant: Some("/srv".into()),
            preset: None,
        };
        let lines = summary(&[evil], home, "run-x");
        assert_eq!(
            lines[1],
            "  /srv/\\x1b]0;owned\\x07: `nd7 allow /srv` (or `/srv` in ~/.nd7/grants, for every session)"
        );
        let lines = summary(&[npm.clone(), ssh, npm, out], home, "run-x");
        assert_eq!(
            lines,
            [
                "the sandbox refused 3 paths this session (log run-x has each one, as floor_refused):",
                "  ~/.npm/_cacache: `nd7 allow --preset npm` (or `preset npm` in ~/.nd7/grants, for every session)",
                "  ~/.ssh/id: a credential store (~/.ssh), kept unreadable; change that in ~/.nd7/secrets",
                "  /srv/out/x: `nd7 allow /srv/out` (or `/srv/out` in ~/.nd7/grants, for every session)",
            ]
        );
        assert!(summary(&[], home, "run-x").is_empty());
    }
}
