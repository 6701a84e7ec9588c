//! What the watch must never read for the agent (ADR-0092).
//!
//! The watch runs in the unconfined `nd7 run`, and much of what it reads is
//! where the agent pointed it: a `.git` file's `gitdir:`, a link put where
//! Claude Code's state belongs, a link or hard link put on the list. Whatever
//! it reads can end up in the warning and the run's log, which the next
//! session reads. So nothing it reads may come from a place the floor keeps
//! unreadable ([`Policy::unreadable`]): each file is checked on its open
//! descriptor, by where the kernel says it really is (no link on the way can
//! lie about that), and, when it has more than one name, by its identity
//! against the files in those places (a hard link's name says nothing about
//! where else it lies). A file refused is reported in words, never read.

use std::collections::HashSet;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::policy::Policy;

/// How many entries the places' walk for files with several names reads at
/// most; beyond it, every file with several names counts as theirs.
const MAX_WALK: usize = 100_000;

/// The floor's unreadable places, as the watch checks its reads against them.
#[derive(Debug, Default)]
pub struct Unreadable {
    /// Each place as named and, where links lead elsewhere, where it is
    /// (as the policy lists them).
    places: Vec<PathBuf>,
    /// The identities of the places' files that have more than one name,
    /// found when first needed.
    linked: OnceLock<Linked>,
}

#[derive(Debug, Default)]
struct Linked {
    ids: HashSet<(u64, u64)>,
    /// The walk stopped at [`MAX_WALK`] or met a directory it could not list.
    incomplete: bool,
}

/// Why a file was not read: where it lies, and whether it was found by its
/// identity (a hard link) rather than its path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    pub place: PathBuf,
    pub linked: bool,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.linked {
            write!(
                f,
                "it is a hard link to a file in a place the floor keeps unreadable ({}): nd7 does not read it",
                self.place.display()
            )
        } else {
            write!(
                f,
                "it lies in a place the floor keeps unreadable ({}): nd7 does not read it",
                self.place.display()
            )
        }
    }
}

impl Unreadable {
    /// `policy`'s unreadable places.
    pub fn of(policy: &Policy) -> Unreadable {
        Unreadable::new(&policy.unreadable())
    }

    /// `places`, already resolved (the policy's list holds each credential
    /// store both as named and where its links lead).
    pub fn new(places: &[PathBuf]) -> Unreadable {
        Unreadable {
            places: places.to_vec(),
            linked: OnceLock::new(),
        }
    }

    /// The place `real` (a path without links) lies in, if any.
    pub fn place(&self, real: &Path) -> Option<&Path> {
        self.places
            .iter()
            .find(|p| real.starts_with(p))
            .map(PathBuf::as_path)
    }

    /// The place `path` leads to, following every link on the way (a
    /// missing last component is taken as named, below its resolved
    /// parent).
    pub fn place_of(&self, path: &Path) -> Option<Refused> {
        let real = std::fs::canonicalize(path).ok().or_else(|| {
            let parent = std::fs::canonicalize(path.parent()?).ok()?;
            Some(parent.join(path.file_name()?))
        })?;
        self.place(&real).map(|p| Refused {
            place: p.to_path_buf(),
            linked: false,
        })
    }

    /// Whether `file`, opened from `path`, may be read: not when the kernel
    /// says it lies in a place, nor when it has several names and one of
    /// the places' files is the same file.
    pub fn check(&self, path: &Path, file: &std::fs::File) -> Result<(), Refused> {
        if let Some(kernel) = crate::kernel::kernel_view(file) {
            return Err(Refused {
                place: PathBuf::from(kernel),
                linked: false,
            });
        }
        let real = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
            .or_else(|_| std::fs::canonicalize(path))
            .unwrap_or_else(|_| path.to_path_buf());
        if let Some(place) = self.place(&real) {
            return Err(Refused {
                place: place.to_path_buf(),
                linked: false,
            });
        }
        let Ok(m) = file.metadata() else {
            return Ok(());
        };
        if m.nlink() <= 1 || !m.is_file() {
            return Ok(());
        }
        let linked = self.linked.get_or_init(|| self.walk());
        if linked.incomplete || linked.ids.contains(&(m.dev(), m.ino())) {
            let place = self
                .owner(m.dev(), m.ino())
                .unwrap_or_else(|| PathBuf::from("one of them, which nd7 could not read through"));
            return Err(Refused {
                place,
                linked: true,
            });
        }
        Ok(())
    }

    /// The place whose walk found the file `(dev, ino)`.
    fn owner(&self, dev: u64, ino: u64) -> Option<PathBuf> {
        self.places
            .iter()
            .find(|p| {
                let mut hit = false;
                walk(p, &mut |m| hit |= m.dev() == dev && m.ino() == ino);
                hit
            })
            .cloned()
    }

    /// The identities of the places' regular files with several names.
    fn walk(&self) -> Linked {
        let mut out = Linked::default();
        for p in &self.places {
            out.incomplete |= !walk(p, &mut |m| {
                if m.is_file() && m.nlink() > 1 {
                    out.ids.insert((m.dev(), m.ino()));
                }
            });
        }
        out
    }
}

/// Calls `each` with every entry's `lstat` below `root` (itself included),
/// not through links, at most [`MAX_WALK`] entries. Returns whether it saw
/// everything.
fn walk(root: &Path, each: &mut dyn FnMut(&std::fs::Metadata)) -> bool {
    let mut stack = vec![root.to_path_buf()];
    let mut seen = 0usize;
    while let Some(p) = stack.pop() {
        let Ok(m) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        seen += 1;
        if seen > MAX_WALK {
            return false;
        }
        each(&m);
        if m.is_dir() {
            match std::fs::read_dir(&p) {
                Ok(entries) => stack.extend(entries.filter_map(Result::ok).map(|e| e.path())),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(_) => return false,
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_place_is_refused_by_where_the_file_is_and_by_its_other_names() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("real");
        std::fs::create_dir_all(root.join("store")).expect("mkdir");
        std::fs::create_dir_all(root.join("p")).expect("mkdir");
        std::fs::write(root.join("store/key"), "secret").expect("w");
        std::fs::write(root.join("p/plain"), "ok").expect("w");
        std::os::unix::fs::symlink(root.join("store"), root.join("p/link")).expect("ln");
        std::fs::hard_link(root.join("store/key"), root.join("p/hard")).expect("ln");
        let u = Unreadable::new(&[root.join("store")]);
        let open = |rel: &str| std::fs::File::open(root.join(rel)).expect("open");
        assert_eq!(u.check(&root.join("p/plain"), &open("p/plain")), Ok(()));
        let by_path = u.check(&root.join("p/link/key"), &open("p/link/key"));
        assert_eq!(
            by_path,
            Err(Refused {
                place: root.join("store"),
                linked: false
            })
        );
        let by_id = u.check(&root.join("p/hard"), &open("p/hard"));
        assert_eq!(
            by_id,
            Err(Refused {
                place: root.join("store"),
                linked: true
            })
        );
        // Where there is a /proc (Linux), nothing on it is read.
        if let Ok(status) = std::fs::File::open("/proc/self/status") {
            assert!(u.check(Path::new("/proc/self/status"), &status).is_err());
        }
        assert!(u.place_of(&root.join("p/link/missing")).is_some());
        assert!(u.place_of(&root.join("p/missing")).is_none());
    }
}
