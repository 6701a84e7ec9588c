//! `nd7 setup`: wires `nd7-record` (or, where it is missing, `nd7 record`)
//! into Claude Code's user settings and
//! installs shell completions. Everything it changes it prints, `--dry-run`
//! changes nothing, and `--uninstall` takes back exactly what it added.
//!
//! The decisions are pure ([`merge`], [`stable_path`], [`private_problem`]);
//! this module reads and writes Claude Code's settings around them and
//! installs the ship timer ([`timer`]). Beside it: `completions` (the shell
//! scripts), `doctor` (`nd7 doctor`'s checks), `trust` (the checks of nd7's
//! own binaries `nd7 run` makes), [`codex`] (Codex's part of all three).

pub mod claude_json;
pub mod codex;
pub mod codex_merge;
pub mod completions;
mod doctor;
pub mod merge;
pub mod timer;
mod trust;

pub use completions::completion_path;
pub use doctor::{Check, doctor};
pub use trust::{
    NoRecorder, RECORDER_VERSION, VERSION_ARG, ask_recorder, binary_places, binary_problems,
    find_recorder, no_recorder_note, private_problem, recorder_beside,
};

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::hook::Agent;
use merge::{MergeError, Merged};

/// The first Claude Code with exec-form hooks (`args`), which nd7 registers.
pub const MIN_CLAUDE: (u32, u32, u32) = (2, 1, 139);

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("cannot find the home directory: set HOME")]
    NoHome,
    #[error("{}: {source}; the file was left as it was", path.display())]
    Settings { path: PathBuf, source: MergeError },
    #[error("{}: {source}; the file was left as it was", path.display())]
    CodexConfig {
        path: PathBuf,
        source: codex_merge::CodexConfigError,
    },
    #[error("{}: cannot {action}: {source}", path.display())]
    Io {
        path: PathBuf,
        action: &'static str,
        source: io::Error,
    },
    #[error(
        "nd7 runs from the Nix store ({}) and no profile links to it; install it into a profile (nix profile install, home-manager) and run setup from there",
        exe.display()
    )]
    NixStoreOnly { exe: PathBuf },
}

crate::files::io_context_into!(SetupError);

/// What `nd7 setup` was asked to do.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// One agent only; `None`: Claude Code, and every other agent found.
    pub agent: Option<crate::hook::Agent>,
    pub settings: Option<PathBuf>,
    pub dry_run: bool,
    pub uninstall: bool,
}

/// What it did (or, with `--dry-run`, would do), one line each, and what the
/// user should look at.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub done: Vec<String>,
    pub warnings: Vec<String>,
}

/// The path setup writes into the settings for `exe`, the running binary: one
/// that survives upgrades. A Homebrew Cellar path becomes the `opt` link; a
/// Nix store path becomes the first profile that has `nd7`; anything else
/// (`~/.cargo/bin/nd7`, a prefix install) is used as it is.
pub fn stable_path(
    exe: &Path,
    home: &Path,
    exists: impl Fn(&Path) -> bool,
) -> Result<PathBuf, SetupError> {
    let text = exe.to_string_lossy();
    if let Some(at) = text.find("/Cellar/nd7/") {
        let prefix = Path::new(&text[..at]);
        let opt = prefix.join("opt/nd7/bin/nd7");
        return Ok(if exists(&opt) {
            opt
        } else {
            prefix.join("bin/nd7")
        });
    }
    if text.starts_with("/nix/store/") {
        let user = std::env::var("USER").unwrap_or_default();
        let candidates = [
            home.join(".nix-profile/bin/nd7"),
            PathBuf::from(format!("/etc/profiles/per-user/{user}/bin/nd7")),
            PathBuf::from("/run/current-system/sw/bin/nd7"),
        ];
        return candidates.into_iter().find(|c| exists(c)).ok_or_else(|| {
            SetupError::NixStoreOnly {
                exe: exe.to_path_buf(),
            }
        });
    }
    Ok(exe.to_path_buf())
}

/// Whether `~/.claude.json` must live under `~/.claude` here: only where the
/// sandbox cannot name its temporary files, and only when Claude Code keeps it
/// in the home directory (no `CLAUDE_CONFIG_DIR`).
fn claude_json_applies() -> bool {
    crate::sandbox::CLAUDE_JSON_MUST_MOVE && !claude_json::elsewhere()
}

/// Parses `claude --version` output ("2.1.197 (Claude Code)").
pub fn parse_claude_version(text: &str) -> Option<(u32, u32, u32)> {
    let word = text.split_whitespace().next()?;
    let mut parts = word.split('.').map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next()??, parts.next()??))
}

/// Runs setup for the binary at `exe`.
pub fn run(options: &Options, exe: &Path) -> Result<Report, SetupError> {
    let home = crate::home::env_home().ok_or(SetupError::NoHome)?;
    let mut report = Report::default();
    let nd7 = stable_path(exe, &home, Path::exists)?;
    let claude_wanted = options.agent.is_none_or(|a| a == Agent::ClaudeCode);
    let claude = if claude_wanted {
        let claude = claude_version();
        claude_settings(options, &home, &nd7, claude.as_ref(), &mut report)?;
        claude
    } else {
        None
    };

    // Codex: when asked for, or found here.
    match options.agent {
        Some(Agent::Codex) => codex::setup(&home, &nd7, options.dry_run, options.uninstall, &mut report)?,
        Some(Agent::ClaudeCode) => {}
        None if codex::found(&home) => {
            codex::setup(&home, &nd7, options.dry_run, options.uninstall, &mut report)?
        }
        None if options.uninstall => {}
        None => report.done.push(
            "codex: not found (no `codex` on PATH, no ~/.codex or $CODEX_HOME); `nd7 setup --agent codex` wires it anyway".into(),
        ),
    }

    completions::setup(options, &home, &mut report)?;
    ship_timer(options, &home, &nd7, &mut report)?;

    if options.uninstall {
        return Ok(report);
    }
    // Checks that change nothing.
    if claude_wanted {
        claude_warnings(claude, &mut report);
    }
    if let Err(why) = find_recorder(&nd7) {
        report.warnings.push(no_recorder_note(&nd7, &why));
    }
    for (path, problem) in binary_problems(&nd7) {
        report.warnings.push(format!(
            "{} {problem}: nd7 run will refuse to start until only you (or root) can change it (chmod go-w {})",
            path.display(),
            path.display()
        ));
    }
    Ok(report)
}

/// Claude Code's settings and, where the floor needs it, its state file.
#[allow(clippy::type_complexity)]
fn claude_settings(
    options: &Options,
    home: &Path,
    nd7: &Path,
    claude: Option<&(String, Option<(u32, u32, u32)>)>,
    report: &mut Report,
) -> Result<(), SetupError> {
    // Settings. A symlinked settings file (dotfile managers) is changed where
    // it points, so the link survives.
    let settings = options
        .settings
        .clone()
        .unwrap_or_else(|| home.join(".claude/settings.json"));
    let settings = fs::canonicalize(&settings).unwrap_or(settings);
    let text = match fs::read_to_string(&settings) {
        Ok(t) => Some(t),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_err(&settings, "read")(e)),
    };
    let merged = if options.uninstall {
        merge::uninstall(text.as_deref())
    } else {
        merge::install(
            text.as_deref(),
            &recorder_beside(nd7),
            claude.and_then(|(_, v)| *v),
        )
    }
    .map_err(|source| SetupError::Settings {
        path: settings.clone(),
        source,
    })?;
    let shown = display_path(&settings, home);
    for line in merge::summary(&merged.changes, options.dry_run) {
        let version = match (&claude, options.uninstall) {
            (_, true) => String::new(),
            (Some((_, Some(v))), false) => {
                format!(" (the events Claude Code {}.{}.{} knows)", v.0, v.1, v.2)
            }
            _ => " (every event nd7 records: Claude Code is not installed)".into(),
        };
        report.done.push(format!("{shown}: {line}{version}"));
    }
    let emptied = options.uninstall
        && merged
            .text
            .as_deref()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(t).ok())
            .is_some_and(|v| v.as_object().is_some_and(|o| o.is_empty()));
    match (&merged, options.dry_run) {
        (Merged { text: None, .. }, _) => report.done.push(format!("{shown}: nothing to change")),
        (Merged { text: Some(_), .. }, false) if emptied => {
            // It held nothing but nd7's entries: no `{}` is left behind.
            fs::remove_file(&settings).map_err(io_err(&settings, "remove"))?;
            report.done.push(format!(
                "{shown}: removed, as it held nothing but nd7's entries"
            ));
        }
        (
            Merged {
                text: Some(new), ..
            },
            false,
        ) => {
            // What uninstall takes out is nd7's own: no backup of it.
            let original = if options.uninstall {
                None
            } else {
                text.as_deref()
            };
            if let Some(backup) = write_settings(&settings, original, new)? {
                report.done.push(format!(
                    "{shown}: the previous version is kept as {}",
                    display_path(&backup, home)
                ));
            }
        }
        (Merged { text: Some(_), .. }, true) => report
            .done
            .push(format!("{shown}: dry run, nothing written")),
    }
    // A backup that still holds nd7's entries goes with them.
    if options.uninstall {
        let backup = backup_path(&settings);
        if fs::read_to_string(&backup).is_ok_and(|t| !merge::registered_events(&t).is_empty()) {
            if !options.dry_run {
                fs::remove_file(&backup).map_err(io_err(&backup, "remove"))?;
            }
            report.done.push(format!(
                "{}: {} (it held nd7's entries)",
                display_path(&backup, home),
                if options.dry_run {
                    "would remove"
                } else {
                    "removed"
                }
            ));
        }
    }

    // Claude Code's own state file, where nd7 run's floor needs it.
    if claude_json_applies() {
        let line = if options.uninstall {
            claude_json::uninstall(home, options.dry_run)?
        } else {
            claude_json::install(home, options.dry_run)?
        };
        report.done.extend(line);
    }
    Ok(())
}

/// The ship timer, whatever the agent: only on an enrolled machine, and
/// only if nothing else (brew services, a home-manager module) already runs
/// nd7 ship.
fn ship_timer(
    options: &Options,
    home: &Path,
    nd7: &Path,
    report: &mut Report,
) -> Result<(), SetupError> {
    if options.uninstall {
        report.done.extend(timer::uninstall(home, options.dry_run)?);
        return Ok(());
    }
    let enrolled =
        crate::session_log::state_dir().is_ok_and(|state| state.join("vault/machine.id").exists());
    if !enrolled {
        report.done.push(
            "ship timer: not installed: this machine is not enrolled with a vault, so there is nothing to ship yet".into(),
        );
    } else if let Some(who) = timer::managed_elsewhere(home) {
        report.done.push(format!("ship timer: left to {who}"));
    } else {
        let (done, warning) = timer::install(home, nd7, options.dry_run)?;
        report.done.extend(done);
        report.warnings.extend(warning);
    }
    Ok(())
}

/// What setup says about the installed Claude Code.
#[allow(clippy::type_complexity)]
fn claude_warnings(claude: Option<(String, Option<(u32, u32, u32)>)>, report: &mut Report) {
    match claude {
        None => report.warnings.push(
            "Claude Code (`claude`) is not on PATH: the hooks take effect once it is installed; run nd7 setup again then, to register only the events it knows (nd7 doctor says when)".into(),
        ),
        Some((text, None)) => report.warnings.push(format!("cannot read Claude Code's version from {text:?}")),
        Some((_, Some(v))) if v < MIN_CLAUDE => report.warnings.push(format!(
            "Claude Code {}.{}.{} is older than {}.{}.{}, the first to run exec-form hooks: nd7's hooks will not run until you upgrade it",
            v.0, v.1, v.2, MIN_CLAUDE.0, MIN_CLAUDE.1, MIN_CLAUDE.2
        )),
        Some(_) => {}
    }
}

/// `claude --version`'s text and the version read from it, or `None` when
/// `claude` cannot be run.
#[allow(clippy::type_complexity)]
fn claude_version() -> Option<(String, Option<(u32, u32, u32)>)> {
    let out = std::process::Command::new("claude")
        .arg("--version")
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let version = parse_claude_version(&text);
    Some((text, version))
}

/// `path` with the home written `~`, for what setup prints.
fn display_path(path: &Path, home: &Path) -> String {
    crate::policy::grants::tilde(path, home)
}

/// Where the settings file's previous version is kept.
fn backup_path(settings: &Path) -> PathBuf {
    settings.with_file_name(format!(
        "{}.nd7-backup",
        settings
            .file_name()
            .map_or_else(|| "settings.json".into(), |n| n.to_string_lossy())
    ))
}

/// Replaces the settings file through a temporary file and a rename, keeping
/// its mode, after copying the original aside. Returns the backup's path.
fn write_settings(
    path: &Path,
    original: Option<&str>,
    new: &str,
) -> Result<Option<PathBuf>, SetupError> {
    let mode = fs::metadata(path).map_or(0o600, |m| m.permissions().mode() & 0o7777);
    let backup = match original {
        Some(text) => {
            let backup = backup_path(path);
            write_file(&backup, text.as_bytes(), mode)?;
            Some(backup)
        }
        None => None,
    };
    write_file(path, new.as_bytes(), mode)?;
    Ok(backup)
}

/// Writes `bytes` to `path` whole, at `mode` from the start, synced
/// ([`crate::files::replace`]), making its directory first. The directories
/// setup writes (`~/.claude`) are writable inside `nd7 run`'s floor: the
/// helper never writes through a link planted at its temporary's name.
fn write_file(path: &Path, bytes: &[u8], mode: u32) -> Result<(), SetupError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(io_err(dir, "create"))?;
    Ok(crate::files::replace(
        path,
        bytes,
        mode,
        crate::files::Durability::Durable,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_paths_survive_upgrades() {
        let home = Path::new("/home/u");
        let cellar = Path::new("/opt/homebrew/Cellar/nd7/0.3.1/bin/nd7");
        let opt = Path::new("/opt/homebrew/opt/nd7/bin/nd7");
        assert_eq!(stable_path(cellar, home, |p| p == opt).expect("ok"), opt);
        assert_eq!(
            stable_path(cellar, home, |_| false).expect("ok"),
            Path::new("/opt/homebrew/bin/nd7")
        );
        let store = Path::new("/nix/store/abc-nd7-0.3.1/bin/nd7");
        let profile = home.join(".nix-profile/bin/nd7");
        assert_eq!(
            stable_path(store, home, |p| p == profile).expect("ok"),
            profile
        );
        assert!(matches!(
            stable_path(store, home, |_| false),
            Err(SetupError::NixStoreOnly { .. })
        ));
        let cargo = Path::new("/home/u/.cargo/bin/nd7");
        assert_eq!(stable_path(cargo, home, |_| false).expect("ok"), cargo);
    }

    #[test]
    fn claude_versions_parse_and_compare() {
        assert_eq!(
            parse_claude_version("2.1.197 (Claude Code)"),
            Some((2, 1, 197))
        );
        assert_eq!(parse_claude_version("garbage"), None);
        assert!(parse_claude_version("2.1.138 (Claude Code)").expect("v") < MIN_CLAUDE);
        assert!(parse_claude_version("2.1.332 (Claude Code)").expect("v") >= MIN_CLAUDE);
    }
}
