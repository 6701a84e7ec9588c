//! The binary trust checks `nd7 run` makes before it starts (and setup and
//! doctor report): nd7, the nd7-exec beside it and their directory must be
//! changeable by no one but the user and root, since a process inside the
//! floor that could replace one could replace the floor's exit; so must the
//! nd7-record beside them, where there is one, which every hook runs. And
//! where the hooks find that nd7-record ([`recorder_beside`]).

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::hook::{RECORDER_NAME, Recorder};

/// Why a file or directory that nd7's sandbox will trust is not private to
/// its owner: writable by group or others, or owned by someone other than the
/// user and root. `None` when it is fine.
pub fn private_problem(mode: u32, owner: u32, me: u32) -> Option<String> {
    if owner != me && owner != 0 {
        return Some(format!(
            "is owned by uid {owner}, neither you (uid {me}) nor root"
        ));
    }
    if mode & 0o022 != 0 {
        return Some(format!(
            "is writable by {} (mode {:o})",
            if mode & 0o002 != 0 {
                "anyone"
            } else {
                "its group"
            },
            mode & 0o7777
        ));
    }
    None
}

/// The recorder the hooks of the nd7 at `nd7` run (ADR-0151): the
/// `nd7-record` in the same directory when it is an executable file there
/// (a link to one counts, as a Nix profile's are), found as `nd7 run` finds
/// `nd7-exec`; otherwise `nd7 record`. The path is `nd7`'s directory as
/// given, so a stable path (Homebrew's `opt`, a Nix profile) stays stable.
pub fn recorder_beside(nd7: &Path) -> Recorder {
    let lean = nd7.with_file_name(RECORDER_NAME);
    let runnable =
        fs::metadata(&lean).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if runnable {
        Recorder::lean(lean.to_string_lossy())
    } else {
        Recorder::nd7(nd7.to_string_lossy())
    }
}

/// What setup and doctor say when [`recorder_beside`] found no nd7-record.
pub fn no_recorder_note(nd7: &Path) -> String {
    format!(
        "no {RECORDER_NAME} beside {}: hooks run `nd7 record`, which starts slower (reinstall nd7 so that nd7-record sits beside it, then nd7 setup)",
        nd7.display()
    )
}

/// nd7, the nd7-exec beside it, the nd7-record beside them when there is
/// one, and the directory holding them, each with why it is not private to
/// the user, if it is not (or cannot be read). `nd7 run` trusts all of them:
/// a process inside the sandbox that could replace one could replace the
/// exit, or the program every hook runs.
pub fn binary_problems(nd7: &Path) -> Vec<(PathBuf, String)> {
    let me = rustix::process::getuid().as_raw();
    let recorder = nd7.with_file_name(RECORDER_NAME);
    [
        Some(nd7.to_path_buf()),
        Some(nd7.with_file_name("nd7-exec")),
        fs::symlink_metadata(&recorder).is_ok().then_some(recorder),
        nd7.parent().map(Path::to_path_buf),
    ]
    .into_iter()
    .flatten()
    .filter_map(|path| {
        let problem = match fs::metadata(&path) {
            Ok(meta) => private_problem(meta.permissions().mode(), meta.uid(), me)?,
            Err(e) => format!("cannot be read: {e}"),
        };
        Some((path, problem))
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_private_paths_pass() {
        assert_eq!(private_problem(0o755, 1000, 1000), None);
        assert_eq!(private_problem(0o755, 0, 1000), None);
        assert!(
            private_problem(0o775, 1000, 1000)
                .expect("group")
                .contains("its group")
        );
        assert!(
            private_problem(0o777, 0, 1000)
                .expect("anyone")
                .contains("anyone")
        );
        assert!(
            private_problem(0o755, 1001, 1000)
                .expect("owner")
                .contains("uid 1001")
        );
    }

    /// The nd7-record beside nd7 is found only as an executable file of
    /// that exact name, and once there it is held to the binaries' rule:
    /// every hook runs it.
    #[test]
    fn nd7_record_beside_nd7_is_found_and_held_private() {
        let dir = tempfile::tempdir().expect("tempdir");
        let nd7 = dir.path().join("nd7");
        let write = |name: &str, mode: u32| {
            let path = dir.path().join(name);
            fs::write(&path, b"").expect("write");
            fs::set_permissions(&path, fs::Permissions::from_mode(mode)).expect("chmod");
            path
        };
        write("nd7", 0o755);
        write("nd7-exec", 0o755);
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
        write("nd7-recorder", 0o755);
        assert_eq!(recorder_beside(&nd7), Recorder::nd7(nd7.to_string_lossy()));
        assert!(
            binary_problems(&nd7).is_empty(),
            "{:?}",
            binary_problems(&nd7)
        );
        let record = write("nd7-record", 0o644);
        assert!(!recorder_beside(&nd7).is_lean(), "not executable");
        fs::set_permissions(&record, fs::Permissions::from_mode(0o757)).expect("chmod");
        assert_eq!(
            recorder_beside(&nd7),
            Recorder::lean(record.to_string_lossy())
        );
        let problems = binary_problems(&nd7);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].0, record);
        assert!(problems[0].1.contains("anyone"), "{problems:?}");
    }
}
