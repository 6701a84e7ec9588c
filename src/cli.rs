//! The command line's definition, in one place: the `nd7` binary parses it,
//! and completions are generated from it.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "nd7", version, about = "Accountable, bounded AI coding agents")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Append one Claude Code hook payload (read on stdin) to its session's log.
    ///
    /// Always exits 0 and never writes to stdout, so it cannot change what
    /// the agent does. Problems are reported in one line on stderr.
    Record,
    /// Walk a session's hash chain and say what a clean chain does and does not prove.
    ///
    /// TARGET is a session id (looked up under $XDG_STATE_HOME/nd7/sessions,
    /// default ~/.local/state/nd7/sessions) or a path to a session directory
    /// or its events.ndjson. Exits 0 when the chain is clean, 1 when it is
    /// broken, 2 when the log cannot be read.
    Verify {
        /// Session id, session directory or events.ndjson.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        target: Option<String>,
        /// Verify every session under the state directory.
        #[arg(long)]
        all: bool,
        /// Threads used to check a large log (default: available cores, at most 2).
        #[arg(long, value_name = "N")]
        threads: Option<usize>,
    },
    /// Register `nd7 record` in Claude Code's user settings, and install completions.
    ///
    /// Adds one exec-form hook entry per recorded event (all but MessageDisplay
    /// and PostToolBatch), keeping every other key and hook. Running it again
    /// changes nothing. Exits 0 when done, 1 when the settings file is not
    /// valid JSON (it is left untouched), 2 on other errors.
    Setup {
        /// Settings file to change [default: ~/.claude/settings.json].
        #[arg(long, value_name = "FILE")]
        settings: Option<PathBuf>,
        /// Print what would change and write nothing.
        #[arg(long)]
        dry_run: bool,
        /// Remove nd7's entries (and only those) and the completions setup installed.
        #[arg(long)]
        uninstall: bool,
    },
    /// Reply to a PreToolUse hook so that a Bash command runs through nd7-exec.
    ///
    /// Reads the hook payload on stdin. For the Bash tool, prints the reply
    /// that allows the call with its command routed through the nd7-exec
    /// beside this binary, the original command passed as one quoted word;
    /// for anything else prints nothing. Always exits 0. `nd7 run` installs it.
    HookPrefix,
    /// Say what is installed and working, and the command that fixes what is not.
    ///
    /// Exits 0 when every check passes, 1 otherwise. Changes nothing.
    Doctor {
        /// Settings file to check [default: ~/.claude/settings.json].
        #[arg(long, value_name = "FILE")]
        settings: Option<PathBuf>,
    },
    /// Print a shell completion script.
    Completions {
        #[arg(value_enum)]
        shell: Shell,
    },
}

/// Shells nd7 ships completions for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

impl Shell {
    pub const ALL: [Shell; 3] = [Shell::Bash, Shell::Zsh, Shell::Fish];

    /// The completion script for this shell.
    pub fn completions(self) -> Vec<u8> {
        use clap::CommandFactory;
        let mut out = Vec::new();
        let mut cmd = Cli::command();
        match self {
            Shell::Bash => {
                clap_complete::generate(clap_complete::Shell::Bash, &mut cmd, "nd7", &mut out)
            }
            Shell::Zsh => {
                clap_complete::generate(clap_complete::Shell::Zsh, &mut cmd, "nd7", &mut out)
            }
            Shell::Fish => {
                clap_complete::generate(clap_complete::Shell::Fish, &mut cmd, "nd7", &mut out)
            }
        }
        out
    }

    /// The file name the script is committed under in completions/.
    pub fn file_name(self) -> &'static str {
        match self {
            Shell::Bash => "nd7.bash",
            Shell::Zsh => "_nd7",
            Shell::Fish => "nd7.fish",
        }
    }
}
