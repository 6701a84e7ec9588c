//! The commands the exit started with a grant that still have a process
//! running: `running.json` in the session directory, kept by `nd7 run` (its keeper,
//! which learns when a command's last process is gone) and read by
//! `nd7 deny`, which names those still running under the grant it takes
//! back. A command keeps the rules it started with, so a grant taken back
//! stays in force for them until they end.
//!
//! The file lives under `~/.nd7`, which nothing inside the session can
//! write; it is replaced whole through [`crate::files::replace`].

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::read::safe::{self, plural};

/// The file's name in the session directory.
pub const FILE: &str = "running.json";

/// Command texts are kept to this many bytes in the list.
const TEXT_LIMIT: usize = 2048;

/// One command started through the exit, as the exit saw it start.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Command {
    /// The shell the exit started for it; also its process group.
    #[serde(default)]
    pub pid: u32,
    /// The command text (cut to 2 KiB, on a character boundary).
    pub command: String,
    pub cwd: PathBuf,
    /// The grants in force when it started, which it keeps.
    pub grants: Vec<PathBuf>,
    /// Seconds since the epoch.
    pub started: u64,
}

impl Command {
    pub fn new(command: &str, cwd: &Path, grants: &[PathBuf]) -> Command {
        let mut end = command.len().min(TEXT_LIMIT);
        while !command.is_char_boundary(end) {
            end -= 1;
        }
        Command {
            pid: 0,
            command: command[..end].to_string(),
            cwd: cwd.to_path_buf(),
            grants: grants.to_vec(),
            started: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        }
    }

    /// One line for people: its process group and its text, newlines shown
    /// as `⏎`, the rest of the agent's text inert (ADR-0090).
    pub fn describe(&self) -> String {
        format!(
            "process group {}: {}",
            self.pid,
            safe::term(&self.command.trim().replace('\n', " ⏎ "), safe::Lines::One)
        )
    }

    /// Whether it was started with writes under `grant` allowed.
    pub fn holds(&self, grant: &Path) -> bool {
        self.grants.iter().any(|g| g == grant)
    }
}

/// The lines `nd7 deny` adds after taking back `grant` in session `pid`:
/// the commands still running that started with it. Empty when there are none.
pub fn deny_report(pid: u32, grant: &Path, commands: &[Command]) -> Vec<String> {
    let holding: Vec<&Command> = commands.iter().filter(|c| c.holds(grant)).collect();
    if holding.is_empty() {
        return Vec::new();
    }
    let mut lines = vec![format!(
        "run {pid}: {} command{} started with writes under {} allowed {} still running and keep{} that until {} end{} (nd7 run ends {} when it exits):",
        holding.len(),
        plural(holding.len(), "", "s"),
        safe::path(grant),
        plural(holding.len(), "is", "are"),
        plural(holding.len(), "s", ""),
        plural(holding.len(), "it", "they"),
        plural(holding.len(), "s", ""),
        plural(holding.len(), "it", "them"),
    )];
    lines.extend(holding.iter().map(|c| format!("  {}", c.describe())));
    lines
}

/// The list in `dir`; empty when there is none (no command has run, or the
/// platform's exit starts nothing itself).
pub fn read(dir: &Path) -> Vec<Command> {
    std::fs::read(dir.join(FILE))
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

/// Replaces the list in `dir`, private to the user. Atomic, not durable
/// ([`crate::files::Durability::Atomic`]): the list is about processes, which
/// a power loss ends along with the `nd7 run` that keeps it.
pub fn write(dir: &Path, commands: &[Command]) -> std::io::Result<()> {
    let mut json = serde_json::to_vec_pretty(commands).map_err(std::io::Error::other)?;
    json.push(b'\n');
    crate::files::replace(
        &dir.join(FILE),
        &json,
        0o600,
        crate::files::Durability::Atomic,
    )
    .map_err(|c| std::io::Error::new(c.source.kind(), c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_reads_back_and_a_long_text_is_cut_on_a_character() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(read(dir.path()).is_empty());
        let long = "é".repeat(TEXT_LIMIT);
        let mut c = Command::new(&long, Path::new("/p"), &[PathBuf::from("/data")]);
        c.pid = 42;
        assert!(c.command.len() <= TEXT_LIMIT && c.command.chars().all(|ch| ch == 'é'));
        write(dir.path(), std::slice::from_ref(&c)).expect("write");
        assert_eq!(read(dir.path()), vec![c.clone()]);
        assert!(c.holds(Path::new("/data")) && !c.holds(Path::new("/")));
    }

    #[test]
    fn deny_names_only_the_commands_holding_the_grant() {
        let mut a = Command::new("npm run dev\n", Path::new("/p"), &[PathBuf::from("/data")]);
        a.pid = 7;
        let b = Command::new("ls", Path::new("/p"), &[]);
        let lines = deny_report(1, Path::new("/data"), &[a, b]);
        assert_eq!(
            lines,
            [
                "run 1: 1 command started with writes under /data allowed is still running and keeps that until it ends (nd7 run ends it when it exits):",
                "  process group 7: npm run dev",
            ]
        );
        assert!(deny_report(1, Path::new("/other"), &[]).is_empty());
    }

    /// Guards `safe::term` in `describe`: without it the command's escapes
    /// (clear the screen, OSC 52, CSI as U+009B, a bidi override) reach
    /// `nd7 deny`'s output as they are.
    #[test]
    fn a_running_command_is_shown_inert() {
        let mut a = Command::new(
            "sleep 9 #\x1b[2J\x1b]52;c;eA==\x07\u{9b}H\u{202e}\rdone\nnext",
            Path::new("/p"),
            &[PathBuf::from("/d")],
        );
        a.pid = 3;
        let lines = deny_report(1, Path::new("/d"), &[a]);
        assert_eq!(
            lines[1],
            "  process group 3: sleep 9 #\\x1b[2J\\x1b]52;c;eA==\\x07\\x9bH\\u{202e}\\rdone ⏎ next"
        );
    }
}
