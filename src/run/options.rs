//! What `nd7 run` was asked to run (which agent that is, its adapter says:
//! [`crate::agents::for_program`]).

use std::ffi::OsString;
use std::path::PathBuf;

/// What `nd7 run` was asked to run.
pub struct Options {
    pub program: OsString,
    pub args: Vec<OsString>,
    /// `--allow DIR`: directories commands may write this run.
    pub allow: Vec<PathBuf>,
    /// `--preset NAME`: toolchain caches commands may write this run.
    pub presets: Vec<String>,
    /// `--net strict`: refuse to start where egress cannot be enforced.
    pub net_strict: bool,
}
