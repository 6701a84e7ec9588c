//! The checks `nd7 run` makes before it starts anything, and the places it
//! finds for the floor's roots: each refuses what would give commands more
//! than the user meant, or says what it left out.

use std::path::{Path, PathBuf};

use crate::policy::Policy;
use crate::{sandbox, session_log, setup};

use super::error::RunError;

/// How the working directory was named: `$PWD` (the shell's name for it,
/// links and all) when it names it, else its real path.
fn project_named(cwd: &Path) -> String {
    match std::env::var_os("PWD").map(PathBuf::from) {
        Some(pwd) if pwd != cwd && std::fs::canonicalize(&pwd).ok().as_deref() == Some(cwd) => {
            format!("you are in {}, a link to it", pwd.display())
        }
        _ => format!("you are in {}", cwd.display()),
    }
}

/// Refuses a project that would give commands more than the user meant
/// (ADR-0068): `/` or a directory above the home, which hold the home; and
/// the home itself when the shell reached it through a link the account
/// could have placed (a project directory an agent swapped for a link to
/// `~` under a grant of its parent). The home entered by its own name (`cd
/// ~`) stays a project.
pub(super) fn check_project(project: &Path, home: &Path, cwd: &Path) -> Result<(), RunError> {
    if home.starts_with(project) && project != home {
        return Err(RunError::Project {
            project: project.to_path_buf(),
            named: project_named(cwd),
        });
    }
    if project != home {
        return Ok(());
    }
    let Some(pwd) = std::env::var_os("PWD").map(PathBuf::from) else {
        return Ok(());
    };
    if pwd == project || std::fs::canonicalize(&pwd).ok().as_deref() != Some(project) {
        return Ok(());
    }
    match crate::kernel::real_path(&pwd) {
        Ok(_) => Ok(()),
        Err(e) => Err(RunError::ProjectHomeByLink {
            pwd,
            home: home.to_path_buf(),
            why: e.to_string(),
        }),
    }
}

/// The temp directory (`$TMPDIR`, else `/tmp`), a floor write root: found
/// without following a link the account could have placed (a `$TMPDIR` in
/// `/tmp` an earlier run replaced with a link to the home would make
/// the home writable), and never `/`, the home or above it.
pub(super) fn temp_root(home: &Path) -> Result<PathBuf, RunError> {
    let named = std::env::temp_dir();
    let refused = |why: String| RunError::Temp {
        named: named.clone(),
        why,
    };
    let real = crate::kernel::real_path(&named).map_err(|e| refused(e.to_string()))?;
    if !real.exists {
        return Err(refused("it does not exist".into()));
    }
    if home.starts_with(&real.path) {
        return Err(refused(format!(
            "it is {}, which holds your home directory",
            real.path.display()
        )));
    }
    Ok(real.path)
}

/// Pins every floor write root to the directory its path leads to now,
/// following no link (ADR-0028); returns what the user should be told.
/// nd7 never follows a link to find a write root of its own: a link an
/// earlier command re-pointed (`~/.cache/claude -> /`) would otherwise open
/// whatever it points at to every later run. A root reached through a
/// link is left out, and said so; one that does not exist is left out
/// silently (nothing inside can make it). The project is the working
/// directory, which the kernel names by its real path; when the shell
/// reached it through a link, the banner says where it really is.
pub(super) fn pin_roots(policy: &mut Policy, cwd: &Path) -> Vec<String> {
    let mut warnings = Vec::new();
    if let Some(pwd) = std::env::var_os("PWD").map(PathBuf::from)
        && pwd != cwd
        && std::fs::canonicalize(&pwd).ok().as_deref() == Some(cwd)
    {
        warnings.push(format!(
            "{} is a link: the project is {}, where it leads now",
            pwd.display(),
            cwd.display()
        ));
    }
    for root in policy.floor_writes() {
        match sandbox::pin(&root) {
            Ok(id) => policy.pin(&root, id),
            Err(sandbox::PinError::Missing) => {}
            Err(sandbox::PinError::Link) => warnings.push(format!(
                "{} is reached through a symbolic link, and nd7 follows no link to a write root (one re-pointed by an earlier command would open whatever it points at): nothing there is writable this session; make it a real directory (move what the link points at there, and link the other way if you need the old place)",
                root.display()
            )),
            Err(e @ sandbox::PinError::Io { .. }) => warnings.push(format!(
                "{e}: it cannot be checked, so it is not writable this session"
            )),
        }
    }
    warnings
}

/// Refuses a `$HOME` that is not the account's home: the floor is built
/// around the account's (nd7 never takes the home from the environment,
/// which `nd7-exec`'s caller chooses), while Claude Code keeps its state
/// under `$HOME`. Checked before anything is created, so a `sudo -E` never
/// makes `~/.nd7` or a log for the wrong account.
pub(super) fn check_home(account: &Path) -> Result<(), RunError> {
    let Some(env) = std::env::var_os("HOME").filter(|h| !h.is_empty()) else {
        return Ok(());
    };
    let env = PathBuf::from(env);
    if std::fs::canonicalize(&env).ok().as_deref() == Some(account) {
        return Ok(());
    }
    Err(RunError::Home {
        env,
        account: account.to_path_buf(),
    })
}

/// Refuses to start when another account could choose the run's grants
/// or credential stores through a mode (`~/.nd7/grants` writable by
/// others); returns the warnings of the modes that only harm the account,
/// said with the banner ([`crate::modes`], ADR-0095). Before anything is
/// created.
pub(super) fn check_modes(home: &Path) -> Result<Vec<String>, RunError> {
    let state = session_log::state_dir().ok();
    let uid = rustix::process::geteuid().as_raw();
    let (refused, warned): (Vec<_>, Vec<_>) = crate::modes::check(
        home,
        state.as_deref(),
        uid,
        crate::modes::private_group(uid),
    )
    .into_iter()
    .partition(|f| f.verdict == crate::modes::Verdict::Refuse);
    if refused.is_empty() {
        return Ok(warned.iter().map(|f| f.to_string()).collect());
    }
    let list: Vec<String> = refused.iter().map(|f| f.to_string()).collect();
    Err(RunError::Modes(list.join("; ")))
}

pub(super) fn resolved(path: &Path, action: &'static str) -> Result<PathBuf, RunError> {
    std::fs::canonicalize(path).map_err(|source| RunError::Io {
        path: path.to_path_buf(),
        action,
        source,
    })
}

/// The checks `nd7 run` makes of its own binaries; returns nd7-exec's path.
pub fn binary_checks(nd7: &Path) -> Result<PathBuf, RunError> {
    let exec = nd7.with_file_name("nd7-exec");
    if !exec.exists() {
        return Err(RunError::NoExec(exec));
    }
    match setup::binary_problems(nd7).into_iter().next() {
        Some((path, problem)) => Err(RunError::Binary(path, problem)),
        None => Ok(exec),
    }
}
