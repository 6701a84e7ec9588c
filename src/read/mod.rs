//! Reading the record back: `nd7 sessions`, `nd7 show` (text, `--json`,
//! `--html`) and `nd7 search`.
//!
//! The pure part turns entries into what a person reads, and knows nothing of
//! files or terminals:
//! - [`claims`]: what the exit claimed it ran, held against what the kernel
//!   ran (`nd7 verify`).
//! - [`entry`]: one line read back, leniently, with the readings every view
//!   needs (a routed command's original, a failed call's exit code).
//! - [`timeline`]: entries into items, each call paired with its result,
//!   streaming, nothing dropped.
//! - [`summary`]: the few numbers `nd7 sessions` lists, fed entry by entry.
//! - [`report`]: the session's facts, the chain's state and their JSON.
//! - [`ran`]: what ran (`effect:nd7`), as collapsed trees and one line per
//!   exec.
//! - [`safe`]: untrusted text made inert for a terminal and for HTML.
//! - [`text`], [`html`]: the terminal views and the one-file report.
//! - [`search`]: a pattern, its prefilter over raw lines, and hits.
//! - [`when`]: times shown in a zone; `--since`/`--until` read.
//!
//! The thin part touches the world: [`store`] finds sessions and reads logs,
//! [`index`] keeps the per-session summaries (a cache, checked against the
//! log's file facts on every use), [`output`] is stdout, the pager and the
//! colour decision.

pub mod claims;
pub mod entry;
pub mod html;
pub mod index;
pub mod output;
pub mod ran;
pub mod report;
pub use nd7_format::safe;
mod scan;
pub mod search;
mod skim;
pub mod store;
pub mod summary;
pub mod text;
pub mod timeline;
pub mod when;

use std::path::PathBuf;

/// Everything that can stop a reading command.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Log(#[from] crate::session_log::Error),
    #[error("no session {target:?} under {}", sessions.display())]
    NotFound { target: String, sessions: PathBuf },
    #[error("{prefix:?} names {} sessions: {}; give more of the id", candidates.len(), candidates.join(", "))]
    Ambiguous {
        prefix: String,
        candidates: Vec<String>,
    },
    #[error("no sessions under {}", .0.display())]
    NoSessions(PathBuf),
    /// A path that names no session (`SessionLog::check_is_session`).
    #[error(transparent)]
    NotASession(#[from] crate::session_log::VerifyError),
    #[error("{}: cannot {action}: {source}", path.display())]
    Io {
        path: PathBuf,
        action: &'static str,
        source: std::io::Error,
    },
    #[error("{0}")]
    Usage(String),
}

crate::files::io_context_into!(ReadError);
