//! Where the user's files are: the home directory as the environment says
//! (`$HOME`), and the XDG base directories under it. nd7 uses the XDG layout
//! on every platform, macOS included (ADR-0061): the shells read their
//! completions from it there too, and one layout keeps the docs true on both.
//!
//! `nd7 run` confines by another home, the account database's
//! (`run_dir::account_home`), and refuses a `$HOME` that differs from it
//! (ADR-0043): a variable the agent's parent could set must not move the
//! floor. Everything else (setup, doctor, the logs, the read commands) uses
//! the one here.

use std::path::{Path, PathBuf};

/// The user's home as the environment says (`$HOME`, else the account's,
/// as the standard library reads it), when it is an absolute path.
pub fn env_home() -> Option<PathBuf> {
    std::env::home_dir().filter(|h| h.is_absolute())
}

/// An XDG base directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Base {
    /// `$XDG_STATE_HOME`, default `~/.local/state`: the logs.
    State,
    /// `$XDG_DATA_HOME`, default `~/.local/share`: bash's and zsh's completions.
    Data,
    /// `$XDG_CONFIG_HOME`, default `~/.config`: fish's completions, systemd units.
    Config,
}

impl Base {
    fn variable(self) -> &'static str {
        match self {
            Base::State => "XDG_STATE_HOME",
            Base::Data => "XDG_DATA_HOME",
            Base::Config => "XDG_CONFIG_HOME",
        }
    }

    fn default(self) -> &'static str {
        match self {
            Base::State => ".local/state",
            Base::Data => ".local/share",
            Base::Config => ".config",
        }
    }

    /// The variable's value if it is an absolute path (the specification
    /// says to ignore any other), else the default under `home`.
    pub fn under(self, home: &Path) -> PathBuf {
        self.set_in_env()
            .unwrap_or_else(|| home.join(self.default()))
    }

    /// The variable's value, else the default under [`env_home`]; `None`
    /// when neither is an absolute path.
    pub fn resolve(self) -> Option<PathBuf> {
        self.set_in_env()
            .or_else(|| env_home().map(|h| h.join(self.default())))
    }

    fn set_in_env(self) -> Option<PathBuf> {
        std::env::var_os(self.variable())
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Relative values are ignored, as the XDG specification says. The
    /// variables are read, so only unset or relative ones are tested here
    /// (the environment is the whole test binary's).
    #[test]
    fn defaults_sit_under_the_home() {
        let home = Path::new("/home/u");
        for (base, default) in [
            (Base::State, "/home/u/.local/state"),
            (Base::Data, "/home/u/.local/share"),
            (Base::Config, "/home/u/.config"),
        ] {
            if std::env::var_os(base.variable()).is_none() {
                assert_eq!(base.under(home), Path::new(default));
            }
        }
    }
}
