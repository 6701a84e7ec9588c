//! Where Claude Code keeps a session's transcript, worked out from the
//! session rather than taken from the payload. Pure: strings and paths in,
//! paths out.
//!
//! Read off the real CLI (2.1.197 and 2.1.332 lay it out the same way):
//!
//! ```text
//! <config>/projects/<project key>/<session id>.jsonl                       the session
//! <config>/projects/<project key>/<session id>/subagents/agent-<id>.jsonl  each subagent
//!                                       (…/subagents/<dirs>/agent-<id>.jsonl for workflow agents)
//! ```
//!
//! `<config>` is `$CLAUDE_CONFIG_DIR`, else `~/.claude`. The project key is
//! the directory Claude Code started in (its real path) with every UTF-16
//! unit that is not an ASCII letter or digit replaced by `-`; a key longer
//! than 200 is cut there and given `-` and a base-36 hash of the path
//! ([`project_key`]). The hook payload's `transcript_path` must name the
//! same file: it is the agent's word, and [`locate_main`] and
//! [`locate_agent`] accept it only where the layout puts the session's own
//! file.

use std::path::{Component, Path, PathBuf};

pub use super::place::{Mismatch, Place, is_name};

/// How long a project key may be before Claude Code shortens it.
const KEY_LIMIT: usize = 200;
/// How many directories may sit between `subagents` and an agent's file.
const MAX_AGENT_SUBDIRS: usize = 3;
/// How many of the working directory's ancestors are tried as the directory
/// Claude Code started in.
const MAX_ANCESTORS: usize = 64;

/// Claude Code's name for the project directory of `cwd` under
/// `<config>/projects`.
pub fn project_key(cwd: &str) -> String {
    let units: Vec<u16> = cwd.encode_utf16().collect();
    let key: String = units
        .iter()
        .map(|&u| {
            if u < 128 && (u as u8).is_ascii_alphanumeric() {
                u as u8 as char
            } else {
                '-'
            }
        })
        .collect();
    if key.len() <= KEY_LIMIT {
        return key;
    }
    // JavaScript's `(h << 5) - h + unit | 0` over UTF-16 units, then
    // `Math.abs(h).toString(36)`.
    let h = units.iter().fold(0i32, |h, &u| {
        (h << 5).wrapping_sub(h).wrapping_add(i32::from(u))
    });
    format!(
        "{}-{}",
        &key[..KEY_LIMIT],
        base36(i64::from(h).unsigned_abs())
    )
}

fn base36(mut n: u64) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

/// Claude Code's configuration directory: `$CLAUDE_CONFIG_DIR` when set to
/// an absolute path, else `<home>/.claude`.
pub fn config_dir(
    claude_config_dir: Option<&std::ffi::OsStr>,
    home: Option<&Path>,
) -> Option<PathBuf> {
    if let Some(dir) = claude_config_dir.map(Path::new)
        && dir.is_absolute()
    {
        return Some(dir.to_path_buf());
    }
    home.filter(|h| h.is_absolute()).map(|h| h.join(".claude"))
}

/// The session's own transcript.
pub fn main_place(project_key: &str, session_id: &str) -> Option<Place> {
    if !is_name(project_key) || !is_name(session_id) {
        return None;
    }
    Some(Place {
        components: vec![
            "projects".into(),
            project_key.into(),
            format!("{session_id}.jsonl"),
        ],
    })
}

/// A subagent's transcript, in the directory of the session that started it.
pub fn agent_place(project_key: &str, session_id: &str, agent_id: &str) -> Option<Place> {
    if !is_name(project_key) || !is_name(session_id) || !is_name(agent_id) {
        return None;
    }
    Some(Place {
        components: vec![
            "projects".into(),
            project_key.into(),
            session_id.into(),
            "subagents".into(),
            format!("agent-{agent_id}.jsonl"),
        ],
    })
}

/// The components of `named` below `config`, if it lies strictly under it
/// with no `.` or `..` and only [`is_name`] components.
fn below(config: &Path, named: &Path) -> Option<Vec<String>> {
    let rest = named.strip_prefix(config).ok()?;
    let mut out = Vec::new();
    for c in rest.components() {
        match c {
            Component::Normal(s) => {
                let s = s.to_str()?;
                if !is_name(s) {
                    return None;
                }
                out.push(s.to_string());
            }
            _ => return None,
        }
    }
    Some(out)
}

/// The place of a transcript nd7 anchored, read back from an anchor's `root`
/// and `path`: only where Claude Code keeps a session's or a subagent's
/// transcript, or where Codex keeps a rollout ([`super::codex_layout`]), so
/// a reader that trusts the log no further than its shape (`nd7 ship`,
/// `nd7 verify --transcript`, `nd7 admin pull --compare`) opens nothing
/// else.
pub fn place_of(config: &Path, path: &Path) -> Option<Place> {
    let c = below(config, path)?;
    if super::codex_layout::is_rollout(&c) {
        return Some(Place { components: c });
    }
    let is_main = c.len() == 3 && c[2].ends_with(".jsonl");
    let is_agent = c.len() >= 5
        && c.len() <= 5 + MAX_AGENT_SUBDIRS
        && c[3] == "subagents"
        && c.last()
            .is_some_and(|f| f.starts_with("agent-") && f.ends_with(".jsonl"));
    (c.first().is_some_and(|p| p == "projects") && (is_main || is_agent))
        .then_some(Place { components: c })
}

/// The session's transcript under `config`. `started_in` is the project
/// key when it is known for certain (under `nd7 run`, from the directory
/// the run started Claude Code in); otherwise `cwd` (the payload's) and its
/// ancestors are tried, since the session may have moved below where it
/// started. `named` is the payload's `transcript_path`: taken when it is
/// where the layout puts this session's file, else a [`Mismatch`] (and,
/// with `started_in`, the derived place is still returned beside it).
pub fn locate_main(
    config: &Path,
    started_in: Option<&str>,
    cwd: Option<&str>,
    session_id: &str,
    named: Option<&str>,
) -> (Option<Place>, Option<Mismatch>) {
    let keys = candidate_keys(started_in, cwd);
    let derived = keys.first().and_then(|k| main_place(k, session_id));
    let Some(named) = named else {
        return (derived, None);
    };
    let parsed = below(config, Path::new(named));
    if let Some(c) = &parsed
        && let [projects, key, file] = c.as_slice()
        && projects == "projects"
        && *file == format!("{session_id}.jsonl")
        && keys.iter().any(|k| k == key)
    {
        return (main_place(key, session_id), None);
    }
    mismatched(config, started_in, derived, named)
}

/// A subagent's transcript, as [`locate_main`]: `named` is the payload's
/// `agent_transcript_path`, taken when it lies in this session's
/// `subagents` directory (at most three directories deeper) and is named
/// after `agent_id`.
pub fn locate_agent(
    config: &Path,
    started_in: Option<&str>,
    cwd: Option<&str>,
    session_id: &str,
    agent_id: &str,
    named: Option<&str>,
) -> (Option<Place>, Option<Mismatch>) {
    let keys = candidate_keys(started_in, cwd);
    let derived = keys
        .first()
        .and_then(|k| agent_place(k, session_id, agent_id));
    let Some(named) = named else {
        return (derived, None);
    };
    if let Some(c) = below(config, Path::new(named))
        && c.len() >= 5
        && c.len() <= 5 + MAX_AGENT_SUBDIRS
        && c[0] == "projects"
        && keys.iter().any(|k| *k == c[1])
        && c[2] == session_id
        && c[3] == "subagents"
        && c.last()
            .is_some_and(|f| *f == format!("agent-{agent_id}.jsonl"))
    {
        return (Some(Place { components: c }), None);
    }
    mismatched(config, started_in, derived, named)
}

/// What [`locate_main`] and [`locate_agent`] return when the payload names
/// a file other than where the layout puts it: the [`Mismatch`], and the
/// derived place only when the project key is known for certain (nothing
/// is anchored on a guess).
fn mismatched(
    config: &Path,
    started_in: Option<&str>,
    derived: Option<Place>,
    named: &str,
) -> (Option<Place>, Option<Mismatch>) {
    let mismatch = Mismatch {
        named: named.to_string(),
        expected: derived
            .as_ref()
            .map_or_else(String::new, |p| p.under(config).display().to_string()),
    };
    let kept = if started_in.is_some() { derived } else { None };
    (kept, Some(mismatch))
}

/// The project keys a session may sit under: the one known for certain,
/// or those of `cwd` and each of its ancestors, nearest first.
fn candidate_keys(started_in: Option<&str>, cwd: Option<&str>) -> Vec<String> {
    if let Some(key) = started_in {
        return vec![key.to_string()];
    }
    let Some(cwd) = cwd.filter(|c| c.starts_with('/')) else {
        return Vec::new();
    };
    Path::new(cwd)
        .ancestors()
        .take(MAX_ANCESTORS)
        .filter_map(|p| p.to_str())
        .map(project_key)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Outputs of Claude Code's own function (2.1.197 and 2.1.332 agree),
    /// run in node on these inputs.
    #[test]
    fn project_keys_are_claude_codes() {
        let cases = [
            ("/home/dev/proj", "-home-dev-proj".to_string()),
            ("/tmp/.tmpGwirr1/proj", "-tmp--tmpGwirr1-proj".to_string()),
            ("/home/dév/projé", "-home-d-v-proj-".to_string()),
            ("/home/d\u{1F600}v", "-home-d--v".to_string()),
            (
                &*format!("/{}", "a".repeat(250)),
                format!("-{}-feo44x", "a".repeat(199)),
            ),
            (
                &*format!("/home/dev/{}", "ü/".repeat(120)),
                format!("-home-dev{}-wvqpab", "-".repeat(191)),
            ),
            (
                &*format!("/x/{}", "abc_def.".repeat(40)),
                format!("-x-{}abc-d-h51td6", "abc-def-".repeat(24)),
            ),
        ];
        for (cwd, key) in cases {
            assert_eq!(project_key(cwd), key, "{cwd}");
        }
    }

    #[test]
    fn names_are_single_plain_components() {
        for good in [
            "4dc8a87d-d386-4e43-a1ee-15a0429dcdee",
            "a931bbd0a2835d51a",
            "-home-x",
            "wf_1.2",
        ] {
            assert!(is_name(good), "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            ".hidden",
            "a/b",
            "a\\b",
            "a b",
            "a\0",
            "é",
            &"x".repeat(129),
        ] {
            assert!(!is_name(bad), "{bad:?}");
        }
    }

    const SID: &str = "6fe9709e-7aa0-46ea-b9c9-6af89d638879";

    #[test]
    fn the_named_transcript_is_taken_only_where_the_layout_puts_it() {
        let config = Path::new("/h/.claude");
        let good = format!("/h/.claude/projects/-h-proj/{SID}.jsonl");
        let (place, mismatch) = locate_main(config, None, Some("/h/proj"), SID, Some(&good));
        assert_eq!(place.map(|p| p.under(config)), Some(PathBuf::from(&good)));
        assert_eq!(mismatch, None);
        // After a `cd` into a subdirectory, the start is an ancestor.
        let (place, _) = locate_main(config, None, Some("/h/proj/src/deep"), SID, Some(&good));
        assert!(place.is_some());
        for bad in [
            format!("/h/.claude/projects/-h-other/{SID}.jsonl"),
            "/h/.claude/projects/-h-proj/other-session.jsonl".to_string(),
            format!("/h/.claude/projects/-h-proj/../-h-proj/{SID}.jsonl"),
            format!("/h/.claude/projects/-h-proj/x/{SID}.jsonl"),
            format!("/elsewhere/projects/-h-proj/{SID}.jsonl"),
            "/h/.ssh/id_ed25519".to_string(),
            "relative.jsonl".to_string(),
        ] {
            let (place, mismatch) = locate_main(config, None, Some("/h/proj"), SID, Some(&bad));
            assert_eq!(place, None, "{bad}");
            assert_eq!(
                mismatch.map(|m| m.expected),
                Some(format!("/h/.claude/projects/-h-proj/{SID}.jsonl")),
                "{bad}"
            );
        }
        // Under nd7 run the key is known: a wrong name is reported and the
        // session's own file is anchored all the same.
        let bad = format!("/h/.claude/projects/-h-other/{SID}.jsonl");
        let (place, mismatch) = locate_main(config, Some("-h-proj"), None, SID, Some(&bad));
        assert_eq!(place.map(|p| p.under(config)), Some(PathBuf::from(&good)));
        assert!(mismatch.is_some());
        // No session id nd7 could build a path from.
        let (place, _) = locate_main(config, Some("-h-proj"), None, "../x", None);
        assert_eq!(place, None);
    }

    #[test]
    fn agent_transcripts_lie_in_their_sessions_subagents_directory() {
        let config = Path::new("/h/.claude");
        let dir = format!("/h/.claude/projects/-h-proj/{SID}/subagents");
        // The one agent of the session, named at `named`.
        let locate = |named: &str| {
            locate_agent(
                config,
                None,
                Some("/h/proj"),
                SID,
                "a931bbd0a2835d51a",
                Some(named),
            )
        };
        for good in [
            format!("{dir}/agent-a931bbd0a2835d51a.jsonl"),
            format!("{dir}/workflows/run-1/agent-a931bbd0a2835d51a.jsonl"),
        ] {
            let (place, mismatch) = locate(&good);
            assert_eq!(place.map(|p| p.under(config)), Some(PathBuf::from(&good)));
            assert_eq!(mismatch, None);
        }
        for bad in [
            format!("{dir}/agent-other.jsonl"),
            format!("{dir}/a/b/c/d/agent-a931bbd0a2835d51a.jsonl"),
            "/h/.claude/projects/-h-proj/other/subagents/agent-a931bbd0a2835d51a.jsonl".to_string(),
            "/h/.claude/projects/-h-proj/agent-a931bbd0a2835d51a.jsonl".to_string(),
        ] {
            let (place, mismatch) = locate(&bad);
            assert_eq!(place, None, "{bad}");
            assert!(mismatch.is_some());
        }
    }
}
