//! The version cache: the Claude Code version `nd7 run` last read from a
//! program's `--version`, with that program file's identity (ADR-0147).
//! Asking costs a whole start of Claude Code (a quarter of a second, a
//! fifth of a short session), and the answer only changes when the file
//! does, so a run whose program is the same file as last time (the same
//! resolved path, device, inode, size, modification and change times)
//! takes the version from here. An entry is trusted for a day at most: a
//! program that only starts another (a version manager's shim) stays the
//! same file while the Claude Code behind it changes. And an entry holds
//! for the project it was asked in only: such a shim runs the Claude Code
//! a file in the working directory names (`.tool-versions`), which the
//! agent can write in its project (ADR-0149).
//!
//! The file lies in nd7's state directory, beside the logs, which the floor
//! keeps read-only: nothing under `nd7 run` can write it.

use std::ffi::OsStr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::setup::merge::Version;

/// The cache's file, in nd7's state directory.
pub const FILE: &str = "claude-version.json";

/// How long an entry is trusted.
pub const TRUSTED_FOR: Duration = Duration::from_secs(24 * 60 * 60);

/// What names one version of a program file: where it resolves to and the
/// facts that change whenever its bytes are replaced or rewritten.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub path: PathBuf,
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i128,
    pub ctime_ns: i128,
}

/// How many (program, project) entries the cache keeps, newest first: a
/// user moving between projects finds each one's answer.
pub const ENTRIES: usize = 32;

/// The cache: one entry per program file and project, newest first.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Cache {
    entries: Vec<Entry>,
}

/// One entry of the cache.
#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    program: Identity,
    /// The project the version was asked in (the probe's working directory).
    project: PathBuf,
    version: Version,
    /// When the version was read, in seconds since the Unix epoch.
    asked_at: u64,
}

impl Identity {
    /// The identity of the file `program` runs, found as `execvp` finds it
    /// (a name with no slash on `PATH`), links followed; `None` when there
    /// is no such file.
    pub fn of(program: &OsStr, path: Option<&OsStr>) -> Option<Identity> {
        let file = crate::files::on_path(program, path)?;
        let path = std::fs::canonicalize(file).ok()?;
        let meta = std::fs::metadata(&path).ok()?;
        let ns = |secs: i64, nanos: i64| i128::from(secs) * 1_000_000_000 + i128::from(nanos);
        Some(Identity {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
            ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
            path,
        })
    }
}

/// The version the cache in `state` holds for `program`, if it holds one
/// for exactly this file asked in `project`, read less than
/// [`TRUSTED_FOR`] before `now` (seconds since the Unix epoch).
pub fn cached(state: &Path, program: &Identity, project: &Path, now: u64) -> Option<Version> {
    let fresh = |entry: &Entry| {
        now.checked_sub(entry.asked_at)
            .is_some_and(|age| age < TRUSTED_FOR.as_secs())
    };
    read(state)
        .entries
        .into_iter()
        .find(|e| e.program.path == program.path && e.project == project)
        .filter(|e| e.program == *program && fresh(e))
        .map(|e| e.version)
}

/// The most the cache's file may hold (32 entries of two paths of up to
/// 4096 bytes, escaped): a larger one, or anything but a regular file, is
/// read as empty ([`crate::files::read_cache`]).
const MOST: u64 = 1024 * 1024;

/// The cache in `state`; empty when there is none or it cannot be read
/// (an older cache's one entry among them: it is asked again).
fn read(state: &Path) -> Cache {
    crate::files::read_cache(&state.join(FILE), MOST)
}

/// Writes `version` for `program`, asked in `project` at `now`, into the
/// cache in `state`, first, in place of the entry for the same program
/// path and project; the oldest past [`ENTRIES`] go. A cache that cannot
/// be written is asked again next time.
pub fn keep(state: &Path, program: &Identity, project: &Path, version: Version, now: u64) {
    let mut cache = read(state);
    cache
        .entries
        .retain(|e| !(e.program.path == program.path && e.project == project));
    cache.entries.insert(
        0,
        Entry {
            program: program.clone(),
            project: project.to_path_buf(),
            version,
            asked_at: now,
        },
    );
    cache.entries.truncate(ENTRIES);
    crate::files::write_cache(&state.join(FILE), &cache);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn program(dir: &Path, body: &str) -> Identity {
        let file = dir.join("claude");
        std::fs::write(&file, body).expect("write");
        let exec = std::os::unix::fs::PermissionsExt::from_mode(0o755);
        std::fs::set_permissions(&file, exec).expect("chmod");
        Identity::of(file.as_os_str(), None).expect("identity")
    }

    #[test]
    fn a_kept_version_is_found_for_the_same_file_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state");
        let first = program(dir.path(), "#!/bin/sh\necho 2.1.197\n");
        assert_eq!(cached(&state, &first, dir.path(), 1000), None);
        keep(&state, &first, dir.path(), (2, 1, 197), 1000);
        assert_eq!(cached(&state, &first, dir.path(), 1001), Some((2, 1, 197)));
        // Asked in another project: not taken (ADR-0149).
        assert_eq!(cached(&state, &first, &state, 1001), None);
        // Rewritten in place, even to the same length: another file.
        let second = program(dir.path(), "#!/bin/sh\necho 2.1.400\n");
        assert_ne!(first, second);
        assert_eq!(cached(&state, &second, dir.path(), 1001), None);
    }

    #[test]
    fn each_project_keeps_its_own_answer_up_to_the_bound() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state");
        let file = program(dir.path(), "#!/bin/sh\n");
        let project = |i: usize| dir.path().join(format!("p{i}"));
        keep(&state, &file, &project(0), (2, 1, 100), 1000);
        keep(&state, &file, &project(1), (2, 1, 197), 1000);
        assert_eq!(cached(&state, &file, &project(0), 1001), Some((2, 1, 100)));
        assert_eq!(cached(&state, &file, &project(1), 1001), Some((2, 1, 197)));
        // Asked again in a project: its entry replaced, not added.
        keep(&state, &file, &project(0), (2, 1, 200), 1002);
        assert_eq!(cached(&state, &file, &project(0), 1003), Some((2, 1, 200)));
        assert_eq!(read(&state).entries.len(), 2);
        for i in 2..ENTRIES + 5 {
            keep(&state, &file, &project(i), (2, 1, 197), 1004);
        }
        assert_eq!(read(&state).entries.len(), ENTRIES);
        assert_eq!(
            cached(&state, &file, &project(0), 1005),
            None,
            "the oldest went"
        );
    }

    #[test]
    fn a_kept_version_is_trusted_for_a_day_and_not_from_the_future() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state");
        let file = program(dir.path(), "#!/bin/sh\n");
        let day = TRUSTED_FOR.as_secs();
        keep(&state, &file, dir.path(), (2, 1, 197), 10 * day);
        assert_eq!(
            cached(&state, &file, dir.path(), 11 * day - 1),
            Some((2, 1, 197))
        );
        assert_eq!(cached(&state, &file, dir.path(), 11 * day), None);
        assert_eq!(cached(&state, &file, dir.path(), 10 * day - 1), None);
    }

    #[test]
    fn a_name_is_found_on_the_path_as_execvp_finds_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (first, second) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::create_dir_all(&first).expect("mkdir");
        std::fs::create_dir_all(&second).expect("mkdir");
        std::fs::write(first.join("claude"), "not executable").expect("write");
        let found = program(&second, "#!/bin/sh\n");
        let path = std::env::join_paths([&first, &second]).expect("path");
        let by_name = Identity::of(OsStr::new("claude"), Some(&path)).expect("found");
        assert_eq!(by_name, found);
        assert_eq!(Identity::of(OsStr::new("nowhere"), Some(&path)), None);
    }
}
