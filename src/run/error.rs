//! Why `nd7 run` does not start the program, one variant per reason: each
//! message says what was found and, where the user can, what to do.

use std::io;
use std::path::PathBuf;

use crate::run_dir::RunDirError;
use crate::run_grants;
use crate::run_log::RunLogError;

/// Why the program was not started.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{0}: {1}; a process inside the sandbox could replace it, so nd7 run will not start")]
    Binary(PathBuf, String),
    #[error("{0}: not found beside nd7; reinstall nd7 so that both binaries sit in one directory")]
    NoExec(PathBuf),
    #[error("cannot confine the program, so it was not started: {0}")]
    Sandbox(String),
    #[error("{0}")]
    RunDir(#[from] RunDirError),
    #[error("{path}: {action}: {source}")]
    Io {
        path: PathBuf,
        action: &'static str,
        source: io::Error,
    },
    #[error("your --settings for Claude Code: {0}")]
    Settings(String),
    #[error("cannot start {program}: {source}")]
    Start { program: String, source: io::Error },
    #[error(
        "cannot read nd7 run's own start time from the kernel; without it another nd7 run could take this session for a dead one and remove it, so nothing was started"
    )]
    NoStartTime,
    #[error("cannot keep the session's log, so nothing was started: {0}")]
    Log(#[from] RunLogError),
    #[error(
        "the project would be {project} ({named}), which holds your home directory: every command could write all of it and more; start nd7 run in the project's own directory"
    )]
    Project { project: PathBuf, named: String },
    #[error(
        "you are in {pwd}, a link to your home directory {home} ({why}): the whole home would be the project; if that is what you mean, start nd7 run in the home by its own name (cd ~), else in the project's own directory; nothing was started"
    )]
    ProjectHomeByLink {
        pwd: PathBuf,
        home: PathBuf,
        why: String,
    },
    #[error(
        "the temp directory {named} cannot be a write root: {why}; set TMPDIR to a directory of its own, by its real path; nothing was started"
    )]
    Temp { named: PathBuf, why: String },
    #[error(
        "$HOME is {env}, but your account's home (in the account database) is {account}: nd7 run keeps the floor around your account's home, so Claude Code would keep its state where nothing may be written and every command would fail; run it with HOME={account}, or as the account whose home {env} is (sudo -E and containers change HOME); nothing was started or created"
    )]
    Home { env: PathBuf, account: PathBuf },
    #[error(
        "another account could choose what this session may write or read: {0}; nothing was started"
    )]
    Modes(String),
    #[error("{0}; nothing was started")]
    SecretLinks(String),
    #[error(transparent)]
    Grants(#[from] run_grants::StartGrantError),
    #[error(transparent)]
    Agent(#[from] crate::agents::PrepareError),
}
