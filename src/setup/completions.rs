//! Shell completions: where setup puts each shell's script under the
//! user's home (XDG data and config directories), writing them, and taking
//! them back with the directories they leave empty.

use std::fs;
use std::path::{Path, PathBuf};

use super::{Options, Report, SetupError, display_path, io_err, write_file};
use crate::cli::Shell;
use crate::home::Base;

/// Where setup puts each shell's completions, under the user's home. bash
/// (bash-completion ≥ 2.2) and fish look there by themselves; zsh needs the
/// directory in `fpath`, which setup says.
pub fn completion_path(shell: Shell, home: &Path) -> PathBuf {
    let data = Base::Data.under(home);
    let config = Base::Config.under(home);
    match shell {
        Shell::Bash => data.join("bash-completion/completions/nd7"),
        Shell::Zsh => data.join("zsh/site-functions/_nd7"),
        Shell::Fish => config.join("fish/completions/nd7.fish"),
    }
}

/// Where the bash-completion package's loader is, on the systems nd7 runs
/// on: without one, bash reads nothing from its completions directory.
const BASH_COMPLETION_LOADERS: &[&str] = &[
    "/usr/share/bash-completion/bash_completion",
    "/etc/bash_completion",
    "/opt/homebrew/etc/profile.d/bash_completion.sh",
    "/usr/local/etc/profile.d/bash_completion.sh",
    "/run/current-system/sw/share/bash-completion/bash_completion",
];

/// Whether bash-completion is installed, by `exists`.
pub fn bash_completion_loaded(exists: &dyn Fn(&Path) -> bool) -> bool {
    BASH_COMPLETION_LOADERS.iter().any(|p| exists(Path::new(p)))
}

/// Whether the user's login shell ($SHELL) is `name`.
fn user_shell_is(name: &str) -> bool {
    std::env::var_os("SHELL").is_some_and(|s| Path::new(&s).file_name().is_some_and(|n| n == name))
}

/// Shell completions, whatever the agent: one line for the three shells.
pub(super) fn setup(options: &Options, home: &Path, report: &mut Report) -> Result<(), SetupError> {
    let verb = if options.dry_run {
        "would write"
    } else {
        "wrote"
    };
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
        if shell == Shell::Bash
            && user_shell_is("bash")
            && !bash_completion_loaded(&|p: &Path| p.exists())
        {
            report.warnings.push(format!(
                "bash loads {} only through the bash-completion package, which is not installed here (apt install bash-completion, dnf install bash-completion, brew install bash-completion@2); or add `source {}` to ~/.bashrc",
                display_path(&path, home),
                path.display()
            ));
        }
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
    Ok(())
}

/// Removes the directories above `removed` that are left empty, up to the
/// XDG base directory they are in (`~/.local/share`, `~/.config`) or the home.
fn remove_empty_parents(removed: &Path, home: &Path) {
    let stops = [
        Base::Data.under(home),
        Base::Config.under(home),
        home.to_path_buf(),
    ];
    for dir in removed.ancestors().skip(1) {
        if stops.iter().any(|s| s == dir) || fs::remove_dir(dir).is_err() {
            break;
        }
    }
}
