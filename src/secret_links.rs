//! Hard links to a credential store's files, found before a session starts
//! (issue 29, item 7).
//!
//! Landlock judges a file by the path it is opened through: a second name
//! for `~/.ssh/id_ed25519` in the project (a hard link made before the
//! session, by the user, a backup tool or an earlier agent outside nd7)
//! would be read through the project's rules. A session cannot make such a
//! link itself (Landlock refuses a link that would gain rights, `EXDEV`),
//! and nd7 cannot search every readable place for one. What it can see is
//! the count: each file in the unreadable places whose link count is higher
//! than the names found for it there has a name somewhere else, which a
//! session may be able to read. `nd7 run` then starts nothing and names the
//! file, with how to find the other names.
//!
//! The walk stops after [`MAX_ENTRIES`] entries per run (a credential store
//! is small; a huge one is only partly checked), never follows a link, and
//! never reads a file's contents.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::read::safe::plural;

/// How many entries of the unreadable places are looked at, at most.
pub const MAX_ENTRIES: usize = 20_000;

/// A file with names outside the places it was found in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stray {
    pub path: PathBuf,
    /// Its link count.
    pub links: u64,
    /// The names found for it in the unreadable places.
    pub found: usize,
}

impl std::fmt::Display for Stray {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let others = self.links - self.found as u64;
        write!(
            f,
            "{p} has {others} more name{s} (hard link{s}) outside the places sessions cannot read, through which a session may read it; find {them} with `find / -xdev -samefile '{p}'` and remove {them} (copy the file where a second copy is needed)",
            p = self.path.display(),
            s = plural(others, "", "s"),
            them = plural(others, "it", "them"),
        )
    }
}

/// The files in `places` (directories or files, each walked without
/// following links) with more hard links than names found in `places`.
pub fn strays(places: &[PathBuf]) -> Vec<Stray> {
    let mut seen: Seen = HashMap::new();
    let mut budget = MAX_ENTRIES;
    for place in places {
        walk(place, &mut seen, &mut budget);
    }
    // Each name counted once, however many places (nested, repeated) hold it.
    let mut out: Vec<Stray> = seen
        .into_values()
        .filter_map(|(links, names)| {
            let first = names.iter().min()?.clone();
            (links > names.len() as u64).then_some(Stray {
                path: first,
                links,
                found: names.len(),
            })
        })
        .collect();
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// Each file with more than one link: its link count and the names found.
type Seen = HashMap<(u64, u64), (u64, HashSet<PathBuf>)>;

fn walk(path: &Path, seen: &mut Seen, budget: &mut usize) {
    if *budget == 0 {
        return;
    }
    *budget -= 1;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return;
    };
    if meta.is_dir() {
        let Ok(entries) = std::fs::read_dir(path) else {
            return;
        };
        for entry in entries.flatten() {
            walk(&entry.path(), seen, budget);
        }
    } else if meta.is_file() && meta.nlink() > 1 {
        seen.entry((meta.dev(), meta.ino()))
            .or_insert_with(|| (meta.nlink(), HashSet::new()))
            .1
            .insert(path.to_path_buf());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_name_outside_is_found_and_one_inside_is_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ssh = dir.path().join(".ssh");
        std::fs::create_dir_all(ssh.join("old")).expect("mkdir");
        std::fs::write(ssh.join("id"), "k").expect("write");
        std::fs::write(ssh.join("other"), "k").expect("write");
        std::fs::hard_link(ssh.join("other"), ssh.join("old/other")).expect("link");
        assert_eq!(strays(std::slice::from_ref(&ssh)), Vec::new());
        std::fs::hard_link(ssh.join("id"), dir.path().join("copy")).expect("link");
        let found = strays(std::slice::from_ref(&ssh));
        assert_eq!(
            found,
            [Stray {
                path: ssh.join("id"),
                links: 2,
                found: 1
            }]
        );
        assert!(found[0].to_string().contains("has 1 more name (hard link)"));
        // Two places holding both names: nothing stray.
        let both = [ssh.clone(), dir.path().join("copy")];
        assert_eq!(strays(&both), Vec::new());
        // The same place twice counts each name once.
        let twice = [ssh.clone(), ssh.clone()];
        assert_eq!(strays(&twice).len(), 1);
    }
}
