//! What `nd7 run` does for Codex (ADR-0056, ADR-0057): its home is the
//! floor's one state directory, its own sandbox is off, its hooks are on the
//! command line and trusted in its `config.toml`, and its shell calls leave
//! the floor through the exit by `nd7 hook-route`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::codex::run::{self, RunHook};
use crate::files::Durability;

/// Why a Codex session was not started.
#[derive(Debug, thiserror::Error)]
pub enum CodexRunError {
    #[error(
        "CODEX_HOME is {0}: nd7 run keeps Codex's state writable only in ~/.codex ({1}); unset CODEX_HOME (or point it there) to run Codex under nd7 run; nothing was started"
    )]
    Home(PathBuf, PathBuf),
    #[error(
        "{0} is reached through a symbolic link; nd7 run follows no link to a write root, so Codex could not keep its state; make it a real directory; nothing was started"
    )]
    HomeLink(PathBuf),
    #[error("{path}: {action}: {source}; nothing was started")]
    Io {
        path: PathBuf,
        action: &'static str,
        source: std::io::Error,
    },
    #[error(
        "{0} is a symbolic link; nd7 run writes the trust of its hooks there and follows no link to do it (a session where nothing could be locked may have left it); look at where it leads, make it a real file and run again; nothing was started"
    )]
    ConfigLink(PathBuf),
    #[error("{0}: {1}; fix it (or move it away) and run again; nothing was started")]
    Config(PathBuf, crate::setup::codex_merge::CodexConfigError),
    #[error(
        "{0}: under nd7 run Codex's own sandbox is off (it cannot start inside nd7's floor, ADR-0056) and nd7's floor and exit confine every command; leave out {0}; nothing was started"
    )]
    Sandbox(String),
    #[error(
        "{0}: nd7 run registers its own hooks with -c hooks.*; an override of yours would replace them; put your hooks in ~/.codex/hooks.json instead; nothing was started"
    )]
    Hooks(String),
}

/// Makes Codex's home (it must exist to be a write root) and writes the
/// trust of the run's hooks into its `config.toml`, before the floor is
/// built. Returns the arguments that go before the user's: `-c` for each of
/// [`run::overrides`].
pub fn prepare(home: &Path, nd7: &Path) -> Result<Vec<OsString>, CodexRunError> {
    let codex_home = home.join(".codex");
    if let Some(theirs) = std::env::var_os("CODEX_HOME").filter(|v| !v.is_empty()) {
        let theirs = PathBuf::from(theirs);
        if std::fs::canonicalize(&theirs).ok().as_deref() != Some(codex_home.as_path()) {
            return Err(CodexRunError::Home(theirs, codex_home));
        }
    }
    match std::fs::symlink_metadata(&codex_home) {
        Ok(m) if m.file_type().is_symlink() => return Err(CodexRunError::HomeLink(codex_home)),
        Ok(_) => {}
        Err(_) => {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&codex_home)
                .map_err(|source| CodexRunError::Io {
                    path: codex_home.clone(),
                    action: "create",
                    source,
                })?;
        }
    }
    let hooks = run::run_hooks(&nd7.to_string_lossy(), &crate::setup::recorder_beside(nd7));
    trust(&codex_home.join("config.toml"), &hooks)?;
    placeholders(&codex_home)?;
    Ok(run::overrides(&hooks)
        .into_iter()
        .flat_map(|v| [OsString::from("-c"), OsString::from(v)])
        .collect())
}

/// What Codex runs later without asking anyone, made empty where it does
/// not exist yet, so that the floor holds it read-only like the rest of the
/// list (a name made during the session could only be reported at its end):
/// `.env`, whose variables every later Codex sets for itself and all it
/// starts (`LD_PRELOAD`, `PATH`), and `rules/`, whose `allow` rules let
/// commands skip its approval. An empty `.env` and an empty `rules/` are
/// what Codex does without them. Hooks a planted `hooks.json` adds wait for
/// the user's trust; `config.toml` is written above.
fn placeholders(codex_home: &Path) -> Result<(), CodexRunError> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let env = codex_home.join(".env");
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&env)
    {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(source) => {
            return Err(CodexRunError::Io {
                path: env,
                action: "create (empty)",
                source,
            });
        }
    }
    let rules = codex_home.join("rules");
    match std::fs::DirBuilder::new().mode(0o700).create(&rules) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(source) => Err(CodexRunError::Io {
            path: rules,
            action: "create (empty)",
            source,
        }),
    }
}

/// Writes the hooks' trust into `config`, keeping everything else.
///
/// `nd7 run` does this unconfined, in a directory the last session could
/// write, so `config` is opened without following a final link, to read and
/// to write: where nothing could be locked (no user namespaces) Codex can
/// leave `config.toml` as a link to any file of the account's (`~/.nd7/grants`,
/// a dotfile), and following it would have nd7 run rewrite that file, or make
/// it, with TOML of its own. A link is refused, nothing written (ADR-0062).
fn trust(config: &Path, hooks: &[RunHook]) -> Result<(), CodexRunError> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let link = |path: &Path| CodexRunError::ConfigLink(path.to_path_buf());
    if std::fs::symlink_metadata(config).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(link(config));
    }
    let nofollow =
        |e: &std::io::Error| e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error());
    let no_follow = rustix::fs::OFlags::NOFOLLOW.bits() as i32;
    // The file's own mode is kept; a new one is the user's alone.
    let mut mode = 0o600;
    let text = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(no_follow)
        .open(config)
    {
        Ok(mut file) => {
            use std::os::unix::fs::PermissionsExt;
            let read = |source| CodexRunError::Io {
                path: config.to_path_buf(),
                action: "read",
                source,
            };
            mode = file.metadata().map_err(read)?.permissions().mode() & 0o777;
            let mut text = String::new();
            file.read_to_string(&mut text).map_err(read)?;
            Some(text)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) if nofollow(&e) => return Err(link(config)),
        Err(source) => {
            return Err(CodexRunError::Io {
                path: config.to_path_buf(),
                action: "read",
                source,
            });
        }
    };
    let updated = run::trusted(text.as_deref(), hooks)
        .map_err(|e| CodexRunError::Config(config.to_path_buf(), e))?;
    if let Some(updated) = updated {
        // Whole or not at all, through a temporary renamed over the name: a
        // run killed mid-write leaves the user's settings as they were, and
        // the rename replaces the name rather than following it.
        crate::files::replace(config, updated.as_bytes(), mode, Durability::Durable).map_err(
            |c| CodexRunError::Io {
                path: c.path,
                action: "write the trust of nd7 run's hooks into",
                source: c.source,
            },
        )?;
    }
    Ok(())
}

/// Refuses what would undo the run's settings: a sandbox of Codex's own
/// (`-s`, `--sandbox`, `--full-auto`, `-c sandbox_mode=…`), hooks given
/// with `-c`, and hooks switched off (`--disable hooks`, `-c features.hooks=…`). Arguments after `--` are the prompt's.
pub fn check_args(args: &[OsString]) -> Result<(), CodexRunError> {
    let mut iter = args.iter().map(|a| a.to_string_lossy());
    while let Some(arg) = iter.next() {
        if arg == "--" {
            break;
        }
        let sandbox = match arg.as_ref() {
            "-s" | "--sandbox" => iter.next().map(|v| v.into_owned()),
            "--full-auto" => Some("workspace-write".into()),
            a => a
                .strip_prefix("--sandbox=")
                .or_else(|| a.strip_prefix("-s="))
                .map(str::to_string),
        };
        if let Some(mode) = sandbox {
            if mode != run::SANDBOX_MODE {
                return Err(CodexRunError::Sandbox(format!("{arg} {mode}")));
            }
            continue;
        }
        let disabled = match arg.as_ref() {
            "--disable" => iter.next().map(|v| v.into_owned()),
            a => a.strip_prefix("--disable=").map(str::to_string),
        };
        if disabled.as_deref().map(str::trim) == Some("hooks") {
            return Err(CodexRunError::Hooks("--disable hooks".to_string()));
        }
        let config = match arg.as_ref() {
            "-c" | "--config" => iter.next().map(|v| v.into_owned()),
            a => a.strip_prefix("--config=").map(str::to_string),
        };
        if let Some(value) = config {
            let key = value
                .split('=')
                .next()
                .unwrap_or_default()
                .trim()
                .to_string();
            // `features.hooks=false` (or a whole `features` table) would
            // switch the run's hooks off as surely as replacing them.
            if key == "hooks"
                || key.starts_with("hooks.")
                || key == "features"
                || key == "features.hooks"
            {
                return Err(CodexRunError::Hooks(format!("-c {value}")));
            }
            if key == "sandbox_mode"
                && value
                    .split_once('=')
                    .map(|(_, v)| v.trim().trim_matches('"'))
                    != Some(run::SANDBOX_MODE)
            {
                return Err(CodexRunError::Sandbox(format!("-c {value}")));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    #[test]
    fn a_sandbox_or_hooks_of_the_users_own_are_refused() {
        assert!(check_args(&args(&["exec", "--json", "hello"])).is_ok());
        assert!(check_args(&args(&["exec", "-s", "danger-full-access", "x"])).is_ok());
        assert!(check_args(&args(&["exec", "--", "-s", "read-only"])).is_ok());
        for bad in [
            &["exec", "-s", "workspace-write", "x"][..],
            &["--sandbox=read-only"],
            &["--full-auto"],
            &["-c", "sandbox_mode=\"workspace-write\""],
        ] {
            assert!(
                matches!(check_args(&args(bad)), Err(CodexRunError::Sandbox(_))),
                "{bad:?}"
            );
        }
        for bad in [
            &["-c", "hooks.Stop=[]"][..],
            &["--config=hooks={}"],
            &["-c", "features.hooks=false"],
            &["--disable", "hooks"],
            &["exec", "--disable=hooks", "x"],
        ] {
            assert!(
                matches!(check_args(&args(bad)), Err(CodexRunError::Hooks(_))),
                "{bad:?}"
            );
        }
    }
}
