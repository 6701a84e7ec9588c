//! What `nd7 run claude` adds for Claude Code: the events its version
//! knows, the user's own `--settings` merged with nd7's, and the warnings
//! about its state file and a shell prefix of the user's.

use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::process::Command;

use crate::{sandbox, setup, shell_prefix};

use super::error::RunError;
use super::version_cache;

/// The events to register `nd7 record` for with this Claude Code: those its
/// version knows (an unknown event opens a warning at every interactive
/// start, ADR-0015). The version is asked under the floor, like everything
/// the program runs, unless the version cache in `state` holds it for the
/// very file `program` runs (ADR-0147); if it cannot be read, the events
/// every supported version knows.
pub(super) fn claude_events(
    program: &OsStr,
    floor: &sandbox::Floor,
    held: &sandbox::Held,
    project: &Path,
    state: &Path,
) -> Vec<&'static str> {
    let path = std::env::var_os("PATH");
    let identity = version_cache::Identity::of(program, path.as_deref());
    let now = crate::session_log::now_ns() / 1_000_000_000;
    let cached = identity
        .as_ref()
        .and_then(|id| version_cache::cached(state, id, project, now));
    let version = cached.or_else(|| {
        let version = asked_version(program, floor, held, project)?;
        // Kept only when the file asked is the one named before asking.
        let after = version_cache::Identity::of(program, path.as_deref());
        if let Some(id) = identity.as_ref().filter(|id| after.as_ref() == Some(id)) {
            version_cache::keep(state, id, project, version, now);
        }
        Some(version)
    });
    setup::merge::recorded_events(Some(version.unwrap_or(setup::MIN_CLAUDE))).collect()
}

/// `program --version`'s answer, asked under the floor, or `None` when it
/// gives none within seconds.
fn asked_version(
    program: &OsStr,
    floor: &sandbox::Floor,
    held: &sandbox::Held,
    project: &Path,
) -> Option<setup::merge::Version> {
    let mut probe = Command::new(program);
    probe
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    held.prepare(&mut probe, project)
        .and_then(|()| floor.confine(&mut probe))
        .ok()
        .and_then(|()| probe.spawn().ok())
        .and_then(|mut child| {
            // A program that does not answer within seconds is not asked again.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while child.try_wait().ok()?.is_none() {
                if std::time::Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    return None;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            child.wait_with_output().ok()
        })
        .filter(|out| out.status.success())
        .and_then(|out| setup::parse_claude_version(&String::from_utf8_lossy(&out.stdout)))
}

/// Takes the user's own `--settings` (a file or a JSON text) out of Claude
/// Code's arguments, to be merged with nd7's: Claude Code reads only one.
pub(super) fn users_settings(
    args: &[OsString],
) -> Result<(Option<serde_json::Value>, Vec<OsString>), RunError> {
    let mut theirs = None;
    let mut rest = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let text = arg.to_string_lossy();
        let value = if text == "--settings" {
            match args.next() {
                Some(v) => v.to_string_lossy().into_owned(),
                None => return Err(RunError::Settings("--settings needs a value".into())),
            }
        } else if let Some(v) = text.strip_prefix("--settings=") {
            v.to_string()
        } else if text == "--" {
            rest.push(arg.clone());
            rest.extend(args.by_ref().cloned());
            break;
        } else {
            rest.push(arg.clone());
            continue;
        };
        let json = if value.trim_start().starts_with('{') {
            value
        } else {
            std::fs::read_to_string(&value)
                .map_err(|e| RunError::Settings(format!("{value}: {e}")))?
        };
        theirs = Some(
            serde_json::from_str(&json)
                .map_err(|e| RunError::Settings(format!("not valid JSON: {e}")))?,
        );
    }
    Ok((theirs, rest))
}

/// Said when Claude Code could not save its state this run: its
/// `~/.claude.json` lies (or would be made) in the home, where the floor
/// lets nothing be written (Linux), and `nd7 setup` has not moved it.
pub(super) fn claude_json_warning(home: &Path, claude: bool) -> Option<String> {
    match setup::claude_json::state(home) {
        _ if !claude || !sandbox::CLAUDE_JSON_MUST_MOVE || setup::claude_json::elsewhere() => None,
        setup::claude_json::State::InHome => Some(format!(
            "{}/.claude.json is a file in your home directory, where the floor lets nothing be written, so Claude Code cannot save its state this session; `nd7 setup` moves it under ~/.claude with a link",
            home.display()
        )),
        setup::claude_json::State::Absent => Some(format!(
            "{}/.claude.json does not exist yet, and Claude Code would create it in your home directory, where the floor lets nothing be written, so it cannot save its state this session; `nd7 setup` leaves a link for it under ~/.claude",
            home.display()
        )),
        _ => None,
    }
}

/// nd7-exec takes the place of a prefix of the user's own: said so.
pub(super) fn prefix_warning(nd7_exec: &Path, claude: bool) -> Option<String> {
    std::env::var_os(shell_prefix::PREFIX_VARIABLE)
        .filter(|p| claude && !p.is_empty() && Path::new(p) != nd7_exec)
        .map(|p| {
            format!(
                "your {} ({}) is replaced by nd7-exec for this session: Bash commands leave the sandbox through it",
                shell_prefix::PREFIX_VARIABLE,
                p.to_string_lossy()
            )
        })
}
