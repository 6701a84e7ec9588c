//! Moving `~/.claude.json` under `~/.claude`, with a link in its place, so
//! that Claude Code's saves of it land inside the one home directory `nd7 run`
//! lets it write (see [`crate::sandbox::CLAUDE_JSON_MUST_MOVE`]).
//!
//! Claude Code resolves the link before it saves: it writes
//! `~/.claude/claude.json.tmp.*` and renames it over `~/.claude/claude.json`,
//! leaving the link alone. Every step keeps `~/.claude.json` readable with the
//! same content: the file is first hard-linked into `~/.claude`, then a
//! symlink is renamed over the original name. `--uninstall` renames the file
//! back over the link in one step.

use std::fs;
use std::path::{Path, PathBuf};

use super::{SetupError, io_err};

/// The link's target, relative to the home directory, so it survives a
/// renamed home.
pub const LINK_TARGET: &str = ".claude/claude.json";

/// Where `~/.claude.json` stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// No file: Claude Code has not run yet, or keeps its state elsewhere.
    Absent,
    /// A regular file in the home directory: nd7 run would stop its saves.
    InHome,
    /// nd7's link to `~/.claude/claude.json`.
    Moved,
    /// A link somewhere else (a dotfile manager's): left alone.
    OtherLink(PathBuf),
}

/// Whether Claude Code keeps the file elsewhere (`CLAUDE_CONFIG_DIR`), so
/// nothing here applies.
pub fn elsewhere() -> bool {
    std::env::var_os("CLAUDE_CONFIG_DIR").is_some()
}

pub fn paths(home: &Path) -> (PathBuf, PathBuf) {
    (home.join(".claude.json"), home.join(LINK_TARGET))
}

pub fn state(home: &Path) -> State {
    let (file, _) = paths(home);
    match fs::symlink_metadata(&file) {
        Err(_) => State::Absent,
        Ok(meta) if meta.file_type().is_symlink() => match fs::read_link(&file) {
            Ok(target) if target == Path::new(LINK_TARGET) || target == home.join(LINK_TARGET) => {
                State::Moved
            }
            Ok(target) => State::OtherLink(target),
            Err(_) => State::OtherLink(PathBuf::from("?")),
        },
        Ok(_) => State::InHome,
    }
}

/// Moves the file under `~/.claude` and leaves a link; where there is no
/// file yet (Claude Code has not run), leaves the link alone, so that Claude
/// Code creates the file there (it saves through a link even when its target
/// does not exist yet: checked with 2.1.197 and 2.1.332). Returns what it did
/// (or would do), or nothing when there is nothing to do.
pub fn install(home: &Path, dry_run: bool) -> Result<Option<String>, SetupError> {
    let (file, moved) = paths(home);
    match state(home) {
        State::InHome => {}
        State::Absent => {
            if !dry_run {
                let dir = moved.parent().unwrap_or(home);
                fs::create_dir_all(dir).map_err(io_err(dir, "create"))?;
                std::os::unix::fs::symlink(LINK_TARGET, &file)
                    .map_err(io_err(&file, "create a link"))?;
            }
            return Ok(Some(format!(
                "~/.claude.json: {} a link to ~/{LINK_TARGET} (Claude Code has not made the file yet), so that it saves inside ~/.claude, which nd7 run lets it write",
                if dry_run { "would leave" } else { "left" }
            )));
        }
        _ => return Ok(None),
    }
    let why = "so Claude Code's saves of it stay inside ~/.claude, which nd7 run lets it write; nd7 setup --uninstall moves it back";
    if moved.exists() {
        return Err(SetupError::Io {
            path: moved,
            action: "move ~/.claude.json here: a file is already there",
            source: std::io::Error::from(std::io::ErrorKind::AlreadyExists),
        });
    }
    if dry_run {
        return Ok(Some(format!(
            "~/.claude.json: would move to ~/{LINK_TARGET} with a link in its place, {why}"
        )));
    }
    let dir = moved.parent().unwrap_or(home);
    fs::create_dir_all(dir).map_err(io_err(dir, "create"))?;
    fs::hard_link(&file, &moved).map_err(io_err(&moved, "link ~/.claude.json into place"))?;
    let link = home.join(".claude.json.nd7-link");
    let _ = fs::remove_file(&link);
    let result = std::os::unix::fs::symlink(LINK_TARGET, &link)
        .map_err(io_err(&link, "create a link"))
        .and_then(|()| fs::rename(&link, &file).map_err(io_err(&file, "replace with a link")));
    if let Err(e) = result {
        // Put things back as they were: the original name still holds the file.
        let _ = fs::remove_file(&link);
        let _ = fs::remove_file(&moved);
        return Err(e);
    }
    Ok(Some(format!(
        "~/.claude.json: moved to ~/{LINK_TARGET} with a link in its place, {why}"
    )))
}

/// Puts the file back in the home directory, replacing nd7's link.
pub fn uninstall(home: &Path, dry_run: bool) -> Result<Option<String>, SetupError> {
    let (file, moved) = paths(home);
    if state(home) != State::Moved {
        return Ok(None);
    }
    if !moved.exists() {
        // A dangling link of ours: take it away.
        if !dry_run {
            fs::remove_file(&file).map_err(io_err(&file, "remove"))?;
        }
        return Ok(Some(format!(
            "{}: {} nd7's link (its target was gone)",
            file.display(),
            if dry_run { "would remove" } else { "removed" }
        )));
    }
    if !dry_run {
        fs::rename(&moved, &file).map_err(io_err(&file, "move back"))?;
    }
    Ok(Some(format!(
        "{}: {} from {}",
        file.display(),
        if dry_run {
            "would move back"
        } else {
            "moved back"
        },
        moved.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn move_and_back_keep_the_content_and_leave_nothing_behind() {
        let home = tempfile::tempdir().expect("tempdir");
        let (file, moved) = paths(home.path());
        fs::write(&file, r#"{"numStartups":3}"#).expect("write");
        assert_eq!(state(home.path()), State::InHome);
        assert!(install(home.path(), false).expect("moves").is_some());
        assert_eq!(state(home.path()), State::Moved);
        assert_eq!(
            fs::read_to_string(&file).expect("through the link"),
            r#"{"numStartups":3}"#
        );
        assert!(
            fs::symlink_metadata(&moved)
                .expect("moved")
                .file_type()
                .is_file()
        );
        assert_eq!(install(home.path(), false).expect("twice"), None);
        assert!(uninstall(home.path(), false).expect("back").is_some());
        assert_eq!(state(home.path()), State::InHome);
        assert!(!moved.exists());
        assert_eq!(
            fs::read_to_string(&file).expect("back"),
            r#"{"numStartups":3}"#
        );
        let leftovers: Vec<_> = fs::read_dir(home.path()).expect("ls").collect();
        assert_eq!(leftovers.len(), 2, "only .claude.json and .claude remain");
    }

    #[test]
    fn a_file_not_made_yet_gets_the_link_and_uninstall_takes_it() {
        let home = tempfile::tempdir().expect("tempdir");
        assert_eq!(state(home.path()), State::Absent);
        assert!(install(home.path(), true).expect("says").is_some());
        assert_eq!(state(home.path()), State::Absent, "dry run");
        assert!(install(home.path(), false).expect("links").is_some());
        assert_eq!(state(home.path()), State::Moved);
        assert!(home.path().join(".claude").is_dir());
        assert_eq!(install(home.path(), false).expect("twice"), None);
        assert!(uninstall(home.path(), false).expect("takes it").is_some());
        assert_eq!(state(home.path()), State::Absent);
    }

    #[test]
    fn other_links_and_conflicts_are_left_alone() {
        let home = tempfile::tempdir().expect("tempdir");
        let (file, moved) = paths(home.path());
        std::os::unix::fs::symlink("dotfiles/claude.json", &file).expect("link");
        assert!(matches!(state(home.path()), State::OtherLink(_)));
        assert_eq!(install(home.path(), false).expect("nothing"), None);
        assert_eq!(uninstall(home.path(), false).expect("nothing"), None);
        fs::remove_file(&file).expect("rm");
        fs::write(&file, "{}").expect("write");
        fs::create_dir_all(moved.parent().expect("dir")).expect("mkdir");
        fs::write(&moved, "other").expect("write");
        assert!(install(home.path(), false).is_err());
        assert_eq!(fs::read_to_string(&file).expect("untouched"), "{}");
        assert_eq!(fs::read_to_string(&moved).expect("untouched"), "other");
    }

    #[test]
    fn dry_run_moves_nothing() {
        let home = tempfile::tempdir().expect("tempdir");
        let (file, moved) = paths(home.path());
        fs::write(&file, "{}").expect("write");
        assert!(install(home.path(), true).expect("says").is_some());
        assert_eq!(state(home.path()), State::InHome);
        assert!(!moved.exists());
    }
}
