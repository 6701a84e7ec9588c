//! What `nd7 run` was asked to run, and which agent that is.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

/// What `nd7 run` was asked to run.
pub struct Options {
    pub program: OsString,
    pub args: Vec<OsString>,
    /// `--allow DIR`: directories commands may write this run.
    pub allow: Vec<PathBuf>,
    /// `--preset NAME`: toolchain caches commands may write this run.
    pub presets: Vec<String>,
}

/// Whether `program` is Claude Code, which gets the hook and settings.
pub fn is_claude(program: &OsStr) -> bool {
    Path::new(program).file_name() == Some(OsStr::new("claude"))
}
