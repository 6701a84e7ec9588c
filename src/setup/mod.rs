//! `nd7 setup`: wires `nd7 record` into Claude Code's user settings and
//! installs shell completions. Everything it changes it prints, `--dry-run`
//! changes nothing, and `--uninstall` takes back exactly what it added.
//!
//! The decisions are pure ([`merge`], [`stable_path`], [`private_problem`]);
//! this module reads and writes the files around them.

pub mod claude_json;
pub mod codex;
pub mod codex_merge;
pub mod merge;
pub mod timer;

use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::cli::Shell;
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

fn io_err<'a>(path: &'a Path, action: &'static str) -> impl FnOnce(io::Error) -> SetupError + 'a {
    move |source| SetupError::Io {
        path: path.to_path_buf(),
        action,
        source,
    }
}

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

/// Why a file or directory that nd7's sandbox will trust is not private to
/// its owner: writable by group or others, or owned by someone other than the
/// user and root. `None` when it is fine.
pub fn private_problem(mode: u32, owner: u32, me: u32) -> Option<String> {
    if owner != me && owner != 0 {
        return Some(format!(
            "is owned by uid {owner}, neither you (uid {me}) nor root"
        ));
    }
    if mode & 0o022 != 0 {
        return Some(format!(
            "is writable by {} (mode {:o})",
            if mode & 0o002 != 0 {
                "anyone"
            } else {
                "its group"
            },
            mode & 0o7777
        ));
    }
    None
}

/// Whether `~/.claude.json` must live under `~/.claude` here: only where the
/// sandbox cannot name its temporary files, and only when Claude Code keeps it
/// in the home directory (no `CLAUDE_CONFIG_DIR`).
fn claude_json_applies() -> bool {
    crate::sandbox::CLAUDE_JSON_MUST_MOVE && !claude_json::elsewhere()
}

/// nd7, the nd7-exec beside it and the directory holding both, each with why
/// it is not private to the user, if it is not (or cannot be read). `nd7 run`
/// trusts all three: a process inside the sandbox that could replace one
/// could replace the exit.
pub fn binary_problems(nd7: &Path) -> Vec<(PathBuf, String)> {
    let me = rustix::process::getuid().as_raw();
    [
        Some(nd7.to_path_buf()),
        Some(nd7.with_file_name("nd7-exec")),
        nd7.parent().map(Path::to_path_buf),
    ]
    .into_iter()
    .flatten()
    .filter_map(|path| {
        let problem = match fs::metadata(&path) {
            Ok(meta) => private_problem(meta.permissions().mode(), meta.uid(), me)?,
            Err(e) => format!("cannot be read: {e}"),
        };
        Some((path, problem))
    })
    .collect()
}

/// Parses `claude --version` output ("2.1.197 (Claude Code)").
pub fn parse_claude_version(text: &str) -> Option<(u32, u32, u32)> {
    let word = text.split_whitespace().next()?;
    let mut parts = word.split('.').map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next()??, parts.next()??))
}

/// An XDG base directory: the variable's value if it is an absolute path (the
/// specification says to ignore any other), else `home/default`.
fn xdg_dir(variable: &str, home: &Path, default: &str) -> PathBuf {
    std::env::var_os(variable)
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| home.join(default))
}

/// Where setup puts each shell's completions, under the user's home. bash
/// (bash-completion ≥ 2.2) and fish look there by themselves; zsh needs the
/// directory in `fpath`, which setup says.
pub fn completion_path(shell: Shell, home: &Path) -> PathBuf {
    let data = xdg_dir("XDG_DATA_HOME", home, ".local/share");
    let config = xdg_dir("XDG_CONFIG_HOME", home, ".config");
    match shell {
        Shell::Bash => data.join("bash-completion/completions/nd7"),
        Shell::Zsh => data.join("zsh/site-functions/_nd7"),
        Shell::Fish => config.join("fish/completions/nd7.fish"),
    }
}

/// Runs setup for the binary at `exe`.
pub fn run(options: &Options, exe: &Path) -> Result<Report, SetupError> {
    let home = std::env::home_dir()
        .filter(|h| h.is_absolute())
        .ok_or(SetupError::NoHome)?;
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

    completions_and_timer(options, &home, &nd7, &mut report)?;

    if options.uninstall {
        return Ok(report);
    }
    // Checks that change nothing.
    if claude_wanted {
        claude_warnings(claude, &mut report);
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
            &nd7.to_string_lossy(),
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
    if options.uninstall && !options.dry_run {
        let backup = backup_path(&settings);
        if fs::read_to_string(&backup).is_ok_and(|t| !merge::registered_events(&t).is_empty()) {
            fs::remove_file(&backup).map_err(io_err(&backup, "remove"))?;
            report.done.push(format!(
                "{}: removed (it held nd7's entries)",
                display_path(&backup, home)
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

/// Shell completions and the ship timer, whatever the agent.
fn completions_and_timer(
    options: &Options,
    home: &Path,
    nd7: &Path,
    report: &mut Report,
) -> Result<(), SetupError> {
    let verb = if options.dry_run {
        "would write"
    } else {
        "wrote"
    };
    // Completions: one line for the three shells.
    let mut written = Vec::new();
    let mut removed = Vec::new();
    for shell in Shell::ALL {
        let path = completion_path(shell, home);
        if options.uninstall {
            if path.exists() {
                if !options.dry_run {
                    fs::remove_file(&path).map_err(io_err(&path, "remove"))?;
                    remove_empty_parents(&path, home);
                }
                removed.push(display_path(&path, home));
            }
            continue;
        }
        let script = shell.completions();
        if fs::read(&path).ok().as_deref() == Some(&script[..]) {
            continue;
        }
        if !options.dry_run {
            write_file(&path, &script, 0o644)?;
        }
        written.push(display_path(&path, home));
        if shell == Shell::Zsh {
            report.warnings.push(format!(
                "zsh finds the completions only if {} is in fpath (add `fpath+=({})` to ~/.zshrc before compinit)",
                path.parent().unwrap_or(&path).display(),
                path.parent().unwrap_or(&path).display()
            ));
        }
    }
    if !written.is_empty() {
        report
            .done
            .push(format!("completions: {verb} {}", written.join(", ")));
    }
    if !removed.is_empty() {
        report.done.push(format!(
            "completions: {} {}",
            if options.dry_run {
                "would remove"
            } else {
                "removed"
            },
            removed.join(", ")
        ));
    }
    // The ship timer: only on an enrolled machine, and only if nothing else
    // (brew services, a home-manager module) already runs nd7 ship.
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

/// Removes the directories above `removed` that are left empty, up to the
/// XDG base directory they are in (`~/.local/share`, `~/.config`) or the home.
fn remove_empty_parents(removed: &Path, home: &Path) {
    let stops = [
        xdg_dir("XDG_DATA_HOME", home, ".local/share"),
        xdg_dir("XDG_CONFIG_HOME", home, ".config"),
        home.to_path_buf(),
    ];
    for dir in removed.ancestors().skip(1) {
        if stops.iter().any(|s| s == dir) || fs::remove_dir(dir).is_err() {
            break;
        }
    }
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

/// Writes `bytes` to `path` atomically: a temporary file beside it, made
/// new with `mode` (never readable by others for a moment, as a chmod after
/// the write would leave it) and without following a link, synced, then
/// renamed over `path`. The directory (`~/.claude`) is writable inside
/// `nd7 run`'s floor, so whatever already has the temporary name (a link to
/// one of the user's files, planted by an agent) is removed, never written
/// through.
fn write_file(path: &Path, bytes: &[u8], mode: u32) -> Result<(), SetupError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(io_err(dir, "create"))?;
    let tmp = path.with_file_name(format!(
        ".{}.nd7-tmp",
        path.file_name()
            .map_or_else(|| "file".into(), |n| n.to_string_lossy())
    ));
    match fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(io_err(&tmp, "remove")(e));
        }
        _ => {}
    }
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&tmp)
        .map_err(io_err(&tmp, "create"))?;
    // The umask may have taken bits away; the file keeps the mode it replaces.
    file.set_permissions(fs::Permissions::from_mode(mode))
        .map_err(io_err(&tmp, "chmod"))?;
    file.write_all(bytes).map_err(io_err(&tmp, "write"))?;
    file.sync_all().map_err(io_err(&tmp, "sync"))?;
    fs::rename(&tmp, path).map_err(io_err(path, "replace"))
}

/// One line of `nd7 doctor`: what was checked, whether it is fine, what was
/// found, and the command that fixes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    pub name: &'static str,
    pub ok: bool,
    pub detail: String,
    pub fix: Option<String>,
}

/// What `nd7 doctor` reports for the binary at `exe`. Changes nothing.
pub fn doctor(exe: &Path, settings: Option<&Path>) -> Vec<Check> {
    let mut checks = Vec::new();
    let home = std::env::home_dir().filter(|h| h.is_absolute());
    let nd7 = home
        .as_deref()
        .and_then(|h| stable_path(exe, h, Path::exists).ok())
        .unwrap_or_else(|| exe.to_path_buf());

    // Where only Codex is installed, Claude Code's absence is no failure.
    let codex_here = home.as_deref().is_some_and(codex::found);
    let claude_absent = settings.is_none()
        && claude_version().is_none()
        && home.as_deref().is_none_or(|h| !h.join(".claude").exists());
    if codex_here && claude_absent {
        checks.push(Check {
            name: "claude",
            ok: true,
            detail: "Claude Code is not installed here (no `claude` on PATH, no ~/.claude): nothing to record".into(),
            fix: None,
        });
    }

    // The hooks: present for every recorded event and pointing at this nd7.
    let settings = settings
        .map(Path::to_path_buf)
        .or_else(|| home.as_deref().map(|h| h.join(".claude/settings.json")));
    let claude_checks = !(codex_here && claude_absent);
    checks.extend(
        claude_checks.then(|| match settings.as_deref().map(fs::read_to_string) {
            None => Check {
                name: "hooks",
                ok: false,
                detail: "cannot find the home directory".into(),
                fix: Some("set HOME".into()),
            },
            Some(Err(e)) => Check {
                name: "hooks",
                ok: false,
                detail: format!(
                    "{}: {e}",
                    settings.as_deref().unwrap_or(Path::new("?")).display()
                ),
                fix: Some("nd7 setup".into()),
            },
            Some(Ok(text)) => hooks_check(&text, &nd7.to_string_lossy()),
        }),
    );

    // The binary and its directory: nd7 run trusts both.
    let problems: Vec<String> = binary_problems(&nd7)
        .into_iter()
        .map(|(path, problem)| format!("{} {problem}", path.display()))
        .collect();
    checks.push(Check {
        name: "binary",
        ok: problems.is_empty(),
        detail: if problems.is_empty() {
            format!(
                "{} {} and its directory are yours alone",
                nd7.display(),
                env!("CARGO_PKG_VERSION")
            )
        } else {
            problems.join("; ")
        },
        fix: (!problems.is_empty()).then(|| {
            format!(
                "chmod go-w {} {} {}",
                nd7.display(),
                nd7.with_file_name("nd7-exec").display(),
                nd7.parent().unwrap_or(Path::new("/")).display()
            )
        }),
    });

    // Claude Code itself.
    checks.extend(claude_checks.then(|| match claude_version() {
        None => Check {
            name: "claude",
            ok: false,
            detail: "Claude Code (`claude`) is not on PATH".into(),
            fix: Some("npm install -g @anthropic-ai/claude-code".into()),
        },
        Some((text, Some(v))) if v >= MIN_CLAUDE => Check {
            name: "claude",
            ok: true,
            detail: text,
            fix: None,
        },
        Some((text, _)) => Check {
            name: "claude",
            ok: false,
            detail: format!(
                "{text:?}: exec-form hooks need {}.{}.{} or newer",
                MIN_CLAUDE.0, MIN_CLAUDE.1, MIN_CLAUDE.2
            ),
            fix: Some("claude update".into()),
        },
    }));

    // Codex, where it is installed.
    if let Some(home) = home.as_deref().filter(|_| codex_here) {
        checks.extend(codex::doctor(home, &nd7.to_string_lossy()));
    }

    // Claude Code's state file, where the floor needs it moved.
    if let Some(home) = home.as_deref().filter(|_| claude_json_applies()) {
        let state = claude_json::state(home);
        checks.push(Check {
            name: "state",
            ok: !matches!(state, claude_json::State::InHome | claude_json::State::Absent),
            detail: match &state {
                claude_json::State::Absent => "~/.claude.json does not exist yet, and Claude Code would create it in your home directory, where nd7 run lets nothing be written".into(),
                claude_json::State::InHome => {
                    "~/.claude.json is in the home directory, where nd7 run would stop Claude Code saving it".into()
                }
                claude_json::State::Moved => format!("~/.claude.json links to ~/{}", claude_json::LINK_TARGET),
                claude_json::State::OtherLink(target) => {
                    format!("~/.claude.json links to {} (left as it is)", target.display())
                }
            },
            fix: matches!(state, claude_json::State::InHome | claude_json::State::Absent)
                .then(|| "nd7 setup".into()),
        });
    }

    // The kernel's sandbox, which nd7 run will apply.
    checks.push(match crate::sandbox::available() {
        Ok(what) => Check {
            name: "sandbox",
            ok: true,
            detail: what.to_string(),
            fix: None,
        },
        Err(why) => Check {
            name: "sandbox",
            ok: false,
            detail: why,
            fix: Some(
                "run nd7 on Linux 6.2 or newer with Landlock enabled (lsm=...,landlock)".into(),
            ),
        },
    });

    // The home nd7 run builds the floor around must be the one Claude Code uses.
    checks.push(home_check(home.as_deref()));

    // What keeps the agent from planting files that run later outside the
    // sandbox (git hooks and configuration, .envrc, editor and Claude Code
    // settings): refused, or only watched and reported.
    checks.push(match crate::sandbox::hold_available() {
        Ok(what) => Check {
            name: "locks",
            ok: true,
            detail: format!("files that run later outside the sandbox: {what}"),
            fix: None,
        },
        Err(why) => Check {
            name: "locks",
            ok: false,
            detail: format!(
                "files that run later outside the sandbox cannot be made read-only ({why}); nd7 run only reports their changes when a session ends"
            ),
            fix: Some(
                "allow unprivileged user namespaces (sysctl user.max_user_namespaces above 0; on Ubuntu, kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile for nd7)".into(),
            ),
        },
    });
    // The credential stores nd7 run keeps unreadable, and the user's file.
    if let Some(home) = home.as_deref() {
        checks.push(secrets_check(home));
        checks.push(grants_check(home));
    }

    // What the kernel enforces beyond the file rules, one line each.
    checks.extend(crate::sandbox::protections().into_iter().map(|p| Check {
        name: p.name,
        // A limit nothing can lift today is said, not failed.
        ok: p.enforced || p.needs.is_none(),
        detail: if p.enforced {
            p.detail
        } else {
            format!("not enforced: {}", p.detail)
        },
        fix: p.needs.filter(|_| !p.enforced).map(str::to_string),
    }));

    // Where the logs go.
    checks.push(match crate::session_log::state_dir() {
        Err(e) => Check {
            name: "logs",
            ok: false,
            detail: e.to_string(),
            fix: Some("set HOME or XDG_STATE_HOME".into()),
        },
        Ok(state) => {
            let sessions = crate::session_log::sessions_dir(&state);
            // The nearest directory that exists is the one a first record
            // will create the rest under.
            let existing = sessions
                .ancestors()
                .find(|p| p.exists())
                .unwrap_or(Path::new("/"));
            let writable = rustix::fs::access(existing, rustix::fs::Access::WRITE_OK).is_ok();
            let count = fs::read_dir(&sessions).map_or(0, |d| d.count());
            Check {
                name: "logs",
                ok: writable,
                detail: if writable {
                    format!("{} ({count} sessions)", sessions.display())
                } else {
                    format!("{} is not writable", existing.display())
                },
                fix: (!writable).then(|| format!("chown -R \"$USER\" {}", existing.display())),
            }
        }
    });
    if let (Ok(state), Some(home)) = (crate::session_log::state_dir(), home.as_deref()) {
        checks.extend(vault_checks(&state, home, SystemTime::now()));
    }
    checks
}

/// `$HOME` against the account database's home, which `nd7 run` confines
/// by: they must be the same directory, or `nd7 run` refuses to start.
fn home_check(env: Option<&Path>) -> Check {
    let account = crate::session::account_home();
    let same = match (&account, env) {
        (Ok(a), Some(e)) => fs::canonicalize(e).ok().as_deref() == Some(a.as_path()),
        (Ok(_), None) => true,
        (Err(_), _) => false,
    };
    Check {
        name: "home",
        ok: same,
        detail: match (&account, env) {
            (Err(e), _) => e.to_string(),
            (Ok(a), _) if same => format!("{} (HOME and your account agree)", a.display()),
            (Ok(a), e) => format!(
                "HOME is {}, your account's home is {}: nd7 run will not start",
                e.map_or("unset".into(), |e| e.display().to_string()),
                a.display()
            ),
        },
        fix: (!same).then(|| match &account {
            Ok(a) => format!(
                "export HOME={} (or run nd7 as the account whose home HOME is)",
                a.display()
            ),
            Err(_) => "add your account to the account database (getent passwd)".into(),
        }),
    }
}

/// What sessions may write beyond the floor from the start: `~/.nd7/grants`
/// read as `nd7 run` reads it.
fn grants_check(home: &Path) -> Check {
    use crate::policy::grants;
    let file = home.join(grants::FILE);
    let text = match fs::read_to_string(&file) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Check {
                name: "grants",
                ok: true,
                detail: format!(
                    "none: commands write only the floor's places; name toolchain caches in {} (preset cargo, npm, pip, …) or pass nd7 run --preset",
                    file.display()
                ),
                fix: None,
            };
        }
        Err(e) => {
            return Check {
                name: "grants",
                ok: false,
                detail: format!("{}: {e}", file.display()),
                fix: Some(format!("make {} readable", file.display())),
            };
        }
    };
    match grants::parse(&text, home) {
        Ok(lines) => {
            let mut sections: Vec<(String, Vec<String>)> = Vec::new();
            for line in &lines {
                let section = line
                    .project
                    .as_deref()
                    .map_or("every project".to_string(), |p| grants::tilde(p, home));
                let what = match &line.entry {
                    grants::Entry::Preset(p) => format!("preset {}", p.name),
                    grants::Entry::Path(p) => grants::tilde(p, home),
                };
                match sections.iter_mut().find(|(s, _)| *s == section) {
                    Some((_, list)) => list.push(what),
                    None => sections.push((section, vec![what])),
                }
            }
            Check {
                name: "grants",
                ok: true,
                detail: format!(
                    "{}: {}",
                    file.display(),
                    sections
                        .iter()
                        .map(|(s, l)| format!("{s}: {}", l.join(", ")))
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
                fix: None,
            }
        }
        Err(e) => Check {
            name: "grants",
            ok: false,
            detail: format!("{} {e}; nd7 run will not start", file.display()),
            fix: Some(format!(
                "correct {} (docs/sandbox.md, \"Grants that last\")",
                file.display()
            )),
        },
    }
}

/// The credential stores a session would keep unreadable: how many, which
/// of them exist here, and whether `~/.nd7/secrets` reads.
fn secrets_check(home: &Path) -> Check {
    let file = home.join(crate::policy::secrets::FILE);
    match crate::session::secrets(home) {
        Ok(list) => {
            let here: Vec<String> = list
                .iter()
                .filter(|p| fs::symlink_metadata(p).is_ok())
                .map(|p| match p.strip_prefix(home) {
                    Ok(rel) => format!("~/{}", rel.display()),
                    Err(_) => p.display().to_string(),
                })
                .collect();
            Check {
                name: "secrets",
                ok: true,
                detail: format!(
                    "{} paths unreadable under nd7 run ({}){}",
                    list.len(),
                    if file.exists() {
                        format!("nd7's list changed by {}", file.display())
                    } else {
                        format!("nd7's list; change it in {}", file.display())
                    },
                    if here.is_empty() {
                        String::new()
                    } else {
                        format!("; here: {}", here.join(", "))
                    }
                ),
                fix: None,
            }
        }
        Err(e) => Check {
            name: "secrets",
            ok: false,
            detail: e.to_string(),
            fix: Some(format!(
                "correct {} (docs/sandbox.md, \"Credential stores\")",
                file.display()
            )),
        },
    }
}

/// Enrolment, the last ship and the timer. A machine that is not enrolled
/// passes: a vault is the organisation's choice.
fn vault_checks(state: &Path, home: &Path, now: SystemTime) -> Vec<Check> {
    let vault = crate::ship::vault_dir(state);
    let read = |name: &str| fs::read_to_string(vault.join(name)).map(|t| t.trim().to_string());
    let (Ok(machine), Ok(server)) = (
        read(crate::ship::MACHINE_ID_FILE),
        read(crate::ship::SERVER_FILE),
    ) else {
        return vec![Check {
            name: "vault",
            ok: true,
            detail: "not enrolled: logs stay on this machine only".into(),
            fix: Some("nd7 enroll URL --token T --fingerprint FP (from your vault's admin)".into()),
        }];
    };
    let mut checks = vec![Check {
        name: "vault",
        ok: true,
        detail: format!("enrolled with {server} as machine {machine}"),
        fix: None,
    }];
    let backlog = ship_backlog(&crate::session_log::sessions_dir(state));
    let ago = |t: SystemTime| {
        now.duration_since(t).map_or("just now".to_string(), |d| {
            format!("{} min ago", d.as_secs() / 60)
        })
    };
    let stale = backlog
        .last_ship
        .is_none_or(|t| now.duration_since(t).is_ok_and(|d| d.as_secs() > 3600));
    checks.push(Check {
        name: "ship",
        ok: backlog.unshipped == 0 || !stale,
        detail: format!(
            "last ship {}; {} of {} sessions have entries not yet shipped",
            backlog.last_ship.map_or("never".to_string(), ago),
            backlog.unshipped,
            backlog.sessions
        ),
        fix: (backlog.unshipped > 0 && stale).then(|| "nd7 ship".into()),
    });
    checks.push(receipts_check(&backlog));
    checks.push(match timer::active(home) {
        Ok(what) => Check {
            name: "timer",
            ok: true,
            detail: what,
            fix: None,
        },
        Err(why) => Check {
            name: "timer",
            ok: false,
            detail: why,
            fix: Some("nd7 setup".into()),
        },
    });
    checks
}

/// What the session logs hold that the vault does not, and what the last
/// ships found about the vault.
struct Backlog {
    sessions: usize,
    unshipped: usize,
    last_ship: Option<SystemTime>,
    /// (session, first line of its `vault.alarm`): the vault broke a receipt.
    alarms: Vec<(String, String)>,
    /// Sessions keeping receipts a declared restore lost.
    lost: usize,
    /// (session, what differs): the local log no longer holds what was shipped.
    rewritten: Vec<(String, String)>,
}

/// Fails while `nd7 ship` finds the vault breaking a receipt for some
/// session, or a local log no longer holds what was shipped: the vault's
/// doing and the machine's, told apart.
fn receipts_check(backlog: &Backlog) -> Check {
    let mut problems = Vec::new();
    if let Some((session, first)) = backlog.alarms.first() {
        problems.push(format!(
            "the vault broke its receipt for {} session(s); {session}: {first}",
            backlog.alarms.len()
        ));
    }
    if let Some((session, what)) = backlog.rewritten.first() {
        problems.push(format!(
            "the local log of {} session(s) no longer holds what was shipped (this machine's doing, not the vault's); {session}: {what}",
            backlog.rewritten.len()
        ));
    }
    if !problems.is_empty() {
        return Check {
            name: "receipts",
            ok: false,
            detail: problems.join("; and "),
            fix: Some(
                "docs/vault.md (\"Restoring a vault from a backup\" when the vault lost entries); `nd7 admin pull --compare` names what differs"
                    .into(),
            ),
        };
    }
    Check {
        name: "receipts",
        ok: true,
        detail: if backlog.lost > 0 {
            format!(
                "the vault honours every receipt; {} session(s) keep receipts a declared restore lost (receipts.lost)",
                backlog.lost
            )
        } else {
            "the vault honoured every receipt at the last ship".into()
        },
        fix: None,
    }
}

/// Compares each session's `head` with its `shipped` (both "<seq> <hash>").
fn ship_backlog(sessions: &Path) -> Backlog {
    let mut backlog = Backlog {
        sessions: 0,
        unshipped: 0,
        last_ship: None,
        alarms: Vec::new(),
        lost: 0,
        rewritten: Vec::new(),
    };
    let Ok(entries) = fs::read_dir(sessions) else {
        return backlog;
    };
    for dir in entries.filter_map(Result::ok).map(|e| e.path()) {
        let Ok(head) = fs::read_to_string(dir.join("head")) else {
            continue;
        };
        backlog.sessions += 1;
        let shipped = dir.join(crate::ship::SHIPPED_FILE);
        if fs::read_to_string(&shipped).ok().as_deref().map(str::trim) != Some(head.trim()) {
            backlog.unshipped += 1;
        }
        if let Ok(modified) = fs::metadata(&shipped).and_then(|m| m.modified()) {
            backlog.last_ship = backlog.last_ship.max(Some(modified));
        }
        let session = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if let Ok(alarm) = fs::read_to_string(dir.join(crate::ship::ALARM_FILE)) {
            let first = alarm.lines().next().unwrap_or_default().to_string();
            backlog.alarms.push((session.clone(), first));
        }
        if let Some(log) = dir
            .parent()
            .and_then(|parent| crate::session_log::SessionLog::new(parent, &session).ok())
            && let Some(what) = crate::ship::rewritten_since_shipped(&log)
        {
            backlog.rewritten.push((session, what));
        }
        if dir.join(crate::ship::LOST_FILE).exists() {
            backlog.lost += 1;
        }
    }
    backlog
}

fn hooks_check(text: &str, nd7: &str) -> Check {
    let settings: serde_json::Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            return Check {
                name: "hooks",
                ok: false,
                detail: format!(
                    "the settings are not valid JSON (line {}, column {})",
                    e.line(),
                    e.column()
                ),
                fix: Some("fix the file, then nd7 setup".into()),
            };
        }
    };
    let mut missing = Vec::new();
    let mut elsewhere = Vec::new();
    let claude = claude_version().and_then(|(_, v)| v);
    let events: Vec<&str> = merge::recorded_events(claude).collect();
    for event in &events {
        let ours: Vec<&serde_json::Value> = settings["hooks"][*event]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|g| g["hooks"].as_array())
            .flatten()
            .filter(|h| merge::is_nd7_hook(h))
            .collect();
        if ours.is_empty() {
            missing.push(*event);
        } else if !ours
            .iter()
            .any(|h| h["command"] == nd7 && h.get("args").is_some())
        {
            elsewhere.push(*event);
        }
    }
    // Registered for events this Claude Code does not know (setup ran before
    // it was installed, or it was downgraded): it warns at every start.
    let registered = merge::registered_events(text);
    let unknown: Vec<&str> = crate::hook::HookEvent::NAMES
        .iter()
        .copied()
        .filter(|e| claude.is_some() && !events.contains(e) && registered.iter().any(|r| r == e))
        .collect();
    let ok = missing.is_empty() && elsewhere.is_empty() && unknown.is_empty();
    let mut detail = format!(
        "{} of {} events record with {nd7}",
        events.len() - missing.len() - elsewhere.len(),
        events.len()
    );
    if let (false, Some(v)) = (unknown.is_empty(), claude) {
        detail.push_str(&format!(
            "; registered for events Claude Code {}.{}.{} does not know, which it warns about at every start: {}",
            v.0,
            v.1,
            v.2,
            unknown.join(", ")
        ));
    }
    if !missing.is_empty() {
        detail.push_str(&format!("; missing: {}", missing.join(", ")));
    }
    if !elsewhere.is_empty() {
        detail.push_str(&format!(
            "; another nd7 or shell form: {}",
            elsewhere.join(", ")
        ));
    }
    Check {
        name: "hooks",
        ok,
        detail,
        fix: (!ok).then(|| "nd7 setup".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A link planted at the temporary name (the directory is writable
    /// inside the floor) is replaced, never written through: the file it
    /// points at keeps its bytes and its mode.
    #[test]
    fn a_planted_link_at_the_temporary_name_is_not_written_through() {
        let dir = tempfile::tempdir().expect("tempdir");
        let victim = dir.path().join("bashrc");
        fs::write(&victim, "mine\n").expect("write");
        fs::set_permissions(&victim, fs::Permissions::from_mode(0o644)).expect("chmod");
        let settings = dir.path().join("claude/settings.json");
        fs::create_dir_all(settings.parent().expect("parent")).expect("mkdir");
        std::os::unix::fs::symlink(&victim, dir.path().join("claude/.settings.json.nd7-tmp"))
            .expect("link");
        write_file(&settings, b"{}\n", 0o600).expect("written");
        assert_eq!(fs::read_to_string(&victim).expect("victim"), "mine\n");
        assert_eq!(
            fs::metadata(&victim).expect("victim").permissions().mode() & 0o777,
            0o644
        );
        assert_eq!(fs::read_to_string(&settings).expect("settings"), "{}\n");
        assert_eq!(
            fs::symlink_metadata(&settings)
                .expect("settings")
                .permissions()
                .mode()
                & 0o777,
            0o600
        );
    }

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
    fn only_private_paths_pass() {
        assert_eq!(private_problem(0o755, 1000, 1000), None);
        assert_eq!(private_problem(0o755, 0, 1000), None);
        assert!(
            private_problem(0o775, 1000, 1000)
                .expect("group")
                .contains("its group")
        );
        assert!(
            private_problem(0o777, 0, 1000)
                .expect("anyone")
                .contains("anyone")
        );
        assert!(
            private_problem(0o755, 1001, 1000)
                .expect("owner")
                .contains("uid 1001")
        );
    }

    #[test]
    fn the_hooks_check_names_what_is_missing_or_stale() {
        let nd7 = "/home/u/.cargo/bin/nd7";
        let full = merge::install(None, nd7, None)
            .expect("ok")
            .text
            .expect("text");
        assert!(hooks_check(&full, nd7).ok);
        let stale = hooks_check(&full, "/other/nd7");
        assert!(
            !stale.ok && stale.detail.contains("another nd7"),
            "{stale:?}"
        );
        let none = hooks_check("{}", nd7);
        assert!(!none.ok && none.detail.starts_with("0 of 32"), "{none:?}");
        assert!(!hooks_check("{", nd7).ok);
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

    #[test]
    fn doctor_reports_enrolment_and_the_ship_backlog() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state/nd7");
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home).expect("mkdir");
        let now = SystemTime::now();
        let not = vault_checks(&state, &home, now);
        assert_eq!(not.len(), 1);
        assert!(not[0].ok && not[0].detail.starts_with("not enrolled"));

        let vault = crate::ship::vault_dir(&state);
        std::fs::create_dir_all(&vault).expect("mkdir");
        std::fs::write(vault.join(crate::ship::MACHINE_ID_FILE), "m-1\n").expect("write");
        std::fs::write(vault.join(crate::ship::SERVER_FILE), "https://v.example\n").expect("write");
        let sessions = crate::session_log::sessions_dir(&state);
        for (id, head, shipped) in [
            ("a", "3 aa", Some("3 aa")),
            ("b", "5 bb", Some("2 cc")),
            ("c", "1 dd", None),
        ] {
            let s = sessions.join(id);
            std::fs::create_dir_all(&s).expect("mkdir");
            std::fs::write(s.join("head"), format!("{head}\n")).expect("write");
            if let Some(shipped) = shipped {
                std::fs::write(s.join(crate::ship::SHIPPED_FILE), format!("{shipped}\n"))
                    .expect("write");
            }
        }
        let checks = vault_checks(&state, &home, now);
        assert_eq!(
            checks[0].detail,
            "enrolled with https://v.example as machine m-1"
        );
        let ship = &checks[1];
        assert!(
            ship.detail
                .ends_with("2 of 3 sessions have entries not yet shipped"),
            "{}",
            ship.detail
        );
        assert!(ship.ok, "a ship just now is not stale: {}", ship.detail);
        let later = now + std::time::Duration::from_secs(2 * 3600);
        let stale = &vault_checks(&state, &home, later)[1];
        assert!(
            !stale.ok && stale.fix.as_deref() == Some("nd7 ship"),
            "{}",
            stale.detail
        );
        assert!(
            stale.detail.starts_with("last ship 120 min ago")
                || stale.detail.starts_with("last ship 119 min ago"),
            "{}",
            stale.detail
        );
        // Receipts: fine until a ship leaves an alarm, then failing and naming it.
        assert!(
            checks[2].ok && checks[2].name == "receipts",
            "{:?}",
            checks[2]
        );
        std::fs::write(sessions.join("b").join(crate::ship::LOST_FILE), "# lost\n").expect("write");
        let noted = &vault_checks(&state, &home, now)[2];
        assert!(
            noted.ok && noted.detail.contains("1 session(s) keep receipts"),
            "{noted:?}"
        );
        std::fs::write(
            sessions.join("b").join(crate::ship::ALARM_FILE),
            "machine m-1, session b: the vault broke its receipt: it dropped\nfound at 1\n",
        )
        .expect("write");
        let alarm = &vault_checks(&state, &home, now)[2];
        assert!(!alarm.ok, "{alarm:?}");
        assert!(
            alarm
                .detail
                .contains("for 1 session(s); b: machine m-1, session b"),
            "{}",
            alarm.detail
        );
    }
}
