//! A transcript's place below its agent's configuration directory, and the
//! names it is built from: shared by Claude Code's layout and Codex's, below
//! both, so neither reaches into the other for it. Pure.

use std::path::{Path, PathBuf};

/// Whether `name` can be one path component nd7 builds a transcript's path
/// from (a session id, an agent id, a project key, a workflow directory):
/// 1 to 128 ASCII letters, digits, `-`, `_` or `.`, not starting with `.`.
pub fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

/// A transcript's place below the configuration directory, one component
/// each, every one checked with [`is_name`] (and the file's name ending in
/// `.jsonl`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Place {
    pub components: Vec<String>,
}

impl Place {
    /// The file's path under `config`.
    pub fn under(&self, config: &Path) -> PathBuf {
        let mut path = config.to_path_buf();
        path.extend(&self.components);
        path
    }

    /// The project key it sits under.
    pub fn project_key(&self) -> &str {
        self.components.get(1).map_or("", String::as_str)
    }
}

/// Why the transcript path a payload names was not taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// What the payload named.
    pub named: String,
    /// Where the layout puts the session's file.
    pub expected: String,
}
