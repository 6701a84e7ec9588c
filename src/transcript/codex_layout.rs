//! Where Codex keeps a session's rollout file, the transcript nd7 anchors for
//! a Codex session. Pure: strings and paths in, places out.
//!
//! Read off the real CLI (0.171.0):
//!
//! ```text
//! <codex home>/sessions/YYYY/MM/DD/rollout-YYYY-MM-DDThh-mm-ss-<session id>.jsonl
//! ```
//!
//! `<codex home>` is `$CODEX_HOME` (Codex resolves it), else `~/.codex`. The
//! date directories and the file's timestamp are the same moment, when the
//! session began (a resumed session goes on in its first day's file), so
//! they cannot be worked out from the session id alone: the payload's
//! `transcript_path` names the file, and [`locate`] takes it only where the
//! layout puts a rollout of the payload's own session. Codex writes one
//! rollout per thread; a subagent's thread has its own id, and is not the
//! session's file.

use std::path::{Component, Path, PathBuf};

use super::place::{Mismatch, Place, is_name};

/// The directory under the Codex home that holds the rollouts.
pub const SESSIONS: &str = "sessions";

/// Codex's home: `$CODEX_HOME` when set to an absolute path, else
/// `<home>/.codex`.
pub fn codex_home(codex_home: Option<&std::ffi::OsStr>, home: Option<&Path>) -> Option<PathBuf> {
    if let Some(dir) = codex_home.map(Path::new)
        && dir.is_absolute()
    {
        return Some(dir.to_path_buf());
    }
    home.filter(|h| h.is_absolute()).map(|h| h.join(".codex"))
}

/// Whether `s` is `n` ASCII digits.
fn digits(s: &str, n: usize) -> bool {
    s.len() == n && s.bytes().all(|b| b.is_ascii_digit())
}

/// The session id of a rollout's place (components below the Codex home):
/// `sessions`, a year, a month and a day directory, and
/// `rollout-<that day>T<hh-mm-ss>-<id>.jsonl`, each a plain name. `None`
/// for anything else.
pub fn session_of(c: &[String]) -> Option<&str> {
    let [sessions, year, month, day, file] = c else {
        return None;
    };
    if sessions != SESSIONS || !digits(year, 4) || !digits(month, 2) || !digits(day, 2) {
        return None;
    }
    if !c.iter().all(|s| is_name(s)) {
        return None;
    }
    let rest = file.strip_prefix("rollout-")?.strip_suffix(".jsonl")?;
    // YYYY-MM-DDThh-mm-ss-<id>
    let (stamp, id) = (rest.get(..19)?, rest.get(19..)?.strip_prefix('-')?);
    let b = stamp.as_bytes();
    let time_ok = b[10] == b'T'
        && [4, 7, 13, 16].iter().all(|&i| b[i] == b'-')
        && [(11, 2), (14, 2), (17, 2)]
            .iter()
            .all(|&(i, n)| digits(&stamp[i..i + n], n));
    let same_day = stamp[..4] == **year && stamp[5..7] == **month && stamp[8..10] == **day;
    (time_ok && same_day && is_name(id)).then_some(id)
}

/// Whether `place` is where Codex keeps a rollout.
pub fn is_rollout(place: &[String]) -> bool {
    session_of(place).is_some()
}

/// The components of `named` below `home`, if it lies strictly under it
/// through plain components only.
fn below(home: &Path, named: &Path) -> Option<Vec<String>> {
    let rest = named.strip_prefix(home).ok()?;
    rest.components()
        .map(|c| match c {
            Component::Normal(s) => s.to_str().map(str::to_string),
            _ => None,
        })
        .collect()
}

/// Session `session_id`'s rollout under `home`: `named` (the payload's
/// `transcript_path`) when it is where Codex's layout puts a rollout of
/// this session, else a [`Mismatch`] and nothing to anchor (the date in
/// the file's name cannot be known otherwise).
pub fn locate(
    home: &Path,
    session_id: &str,
    named: Option<&str>,
) -> (Option<Place>, Option<Mismatch>) {
    let expected = || {
        home.join(SESSIONS)
            .join(format!(
                "YYYY/MM/DD/rollout-YYYY-MM-DDThh-mm-ss-{session_id}.jsonl"
            ))
            .display()
            .to_string()
    };
    let Some(named) = named else {
        return (None, None);
    };
    if is_name(session_id)
        && let Some(c) = below(home, Path::new(named))
        && session_of(&c) == Some(session_id)
    {
        return (Some(Place { components: c }), None);
    }
    let mismatch = Mismatch {
        named: named.to_string(),
        expected: expected(),
    };
    (None, Some(mismatch))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SID: &str = "01a22ef1-63ed-77e0-99ae-cbf4bcd01d2c";

    #[test]
    fn the_named_rollout_is_taken_only_where_codex_puts_this_sessions() {
        let home = Path::new("/h/.codex");
        let good = format!("/h/.codex/sessions/2026/12/01/rollout-2026-12-01T00-11-41-{SID}.jsonl");
        let (place, mismatch) = locate(home, SID, Some(&good));
        assert_eq!(place.map(|p| p.under(home)), Some(PathBuf::from(&good)));
        assert_eq!(mismatch, None);
        for bad in [
            // Another session's rollout.
            "/h/.codex/sessions/2026/12/01/rollout-2026-12-01T00-11-41-01a22ef1-0000-77e0-99ae-cbf4bcd01d2c.jsonl".to_string(),
            // The day in the name is not the directory's.
            format!("/h/.codex/sessions/2026/12/02/rollout-2026-12-01T00-11-41-{SID}.jsonl"),
            format!("/h/.codex/sessions/2026/12/01/x/rollout-2026-12-01T00-11-41-{SID}.jsonl"),
            format!("/h/.codex/sessions/2026/12/rollout-2026-12-01T00-11-41-{SID}.jsonl"),
            format!("/h/.codex/sessions/2026/12/01/../01/rollout-2026-12-01T00-11-41-{SID}.jsonl"),
            format!("/h/.codex/archived/2026/12/01/rollout-2026-12-01T00-11-41-{SID}.jsonl"),
            format!("/h/.codex/sessions/2026/12/01/rollout-2026-12-01T00-11-41-{SID}.json"),
            format!("/h/.codex/sessions/2026/12/01/rollout-2026-12-01X00-11-41-{SID}.jsonl"),
            format!("/elsewhere/sessions/2026/12/01/rollout-2026-12-01T00-11-41-{SID}.jsonl"),
            format!("/h/.claude/projects/-h-proj/{SID}.jsonl"),
            "/h/.ssh/id_ed25519".to_string(),
            "relative.jsonl".to_string(),
        ] {
            let (place, mismatch) = locate(home, SID, Some(&bad));
            assert_eq!(place, None, "{bad}");
            assert!(mismatch.is_some(), "{bad}");
        }
        // A session id nd7 could not build a path from.
        let (place, _) = locate(home, "../x", Some(&good));
        assert_eq!(place, None);
        assert_eq!(locate(home, SID, None), (None, None));
    }

    #[test]
    fn a_rollouts_place_gives_its_session() {
        let c: Vec<String> = ["sessions", "2026", "11", "30"]
            .iter()
            .map(|s| s.to_string())
            .chain([format!("rollout-2026-11-30T11-09-08-{SID}.jsonl")])
            .collect();
        assert_eq!(session_of(&c), Some(SID));
        let mut short = c.clone();
        short[4] = "rollout-2026-11-30T11-09-08.jsonl".into();
        assert_eq!(session_of(&short), None);
        let mut dotted = c.clone();
        dotted[4] = "rollout-2026-11-30T11-09-08-.x.jsonl".into();
        assert_eq!(session_of(&dotted), None);
    }
}
