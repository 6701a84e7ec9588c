//! Reading a file that another program writes and the agent can change: a
//! transcript, a rollout file. Nothing here may be steered into reading
//! something else, stall, or read without end.
//!
//! - [`open_beneath`] walks from `/` through the directory the user chose
//!   down to the file one component at a time, never through a
//!   symbolic link (`O_NOFOLLOW` on every directory and the file), opens the
//!   file without blocking (a FIFO put in its place cannot stall the open),
//!   and takes it only if it is a regular file with one link: a second name
//!   could make any file of the user's look like the one expected.
//!   The directory itself is reached the same way from `/`: the user's
//!   configured directory is resolved once ([`real_dir`]), where it is
//!   configured, and no link is followed after that.
//! - [`Identity`] (device and inode) lets a later reader tell the same file
//!   from a replacement.
//! - [`read_range`] reads a byte range in blocks under a [`Budget`] of bytes
//!   and time, and says where and why it stopped.
//!
//! Under `nd7 run` this runs outside the sandbox on files the agent can
//! write, which is why every step refuses rather than guesses.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::path::{Component, Path, PathBuf};
use std::time::Instant;

use rustix::fs::{FileType, Mode, OFlags};

/// A file's identity on this machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Identity {
    pub dev: u64,
    pub ino: u64,
}

/// A file opened by [`open_beneath`].
#[derive(Debug)]
pub struct Opened {
    pub file: File,
    pub identity: Identity,
    /// Its length when it was opened.
    pub len: u64,
}

/// Why a file was not opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("{}: does not exist", path.display())]
    Missing { path: PathBuf },
    #[error("{}: is a symbolic link, and nd7 follows no link here", path.display())]
    Link { path: PathBuf },
    #[error("{}: is {what}, not a regular file", path.display())]
    NotRegular { path: PathBuf, what: &'static str },
    #[error("{}: has {links} names (hard links); nd7 reads only a file with one", path.display())]
    Hardlinked { path: PathBuf, links: u64 },
    #[error("{}: is not an absolute path without `..`; nd7 opens transcripts only from one", path.display())]
    Unclean { path: PathBuf },
    #[error("{}: cannot {action}: {source}", path.display())]
    Io {
        path: PathBuf,
        action: &'static str,
        source: io::Error,
    },
}

impl OpenError {
    /// A short name for the reason, for entries and tests.
    pub fn reason(&self) -> &'static str {
        match self {
            OpenError::Missing { .. } => "missing",
            OpenError::Link { .. } => "symbolic link",
            OpenError::NotRegular { .. } => "not a regular file",
            OpenError::Hardlinked { .. } => "hard link",
            OpenError::Unclean { .. } => "not a clean path",
            OpenError::Io { .. } => "unreadable",
        }
    }
}

/// Opens `root/components…` for reading. `root` must be absolute and, like
/// every component below it, no link anywhere (see [`real_dir`]); the last must be a
/// regular file with exactly one link.
pub fn open_beneath(root: &Path, components: &[String]) -> Result<Opened, OpenError> {
    let mut path = root.to_path_buf();
    let dir = open_root(root)?;
    let Some((name, dirs)) = components.split_last() else {
        return Err(OpenError::NotRegular {
            path,
            what: "a directory",
        });
    };
    let dir = descend(dir, &mut path, dirs)?;
    path.push(name);
    let fd = rustix::fs::openat(
        &dir,
        name.as_str(),
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| describe_at(&dir, name, &path, e, "open"))?;
    let stat = rustix::fs::fstat(&fd).map_err(|e| OpenError::Io {
        path: path.clone(),
        action: "stat",
        source: e.into(),
    })?;
    let kind = FileType::from_raw_mode(stat.st_mode as _);
    if kind != FileType::RegularFile {
        return Err(OpenError::NotRegular {
            path,
            what: type_name(kind),
        });
    }
    #[allow(clippy::useless_conversion)] // nlink is u32 on macOS, u64 on Linux
    let links = u64::from(stat.st_nlink);
    if links != 1 {
        return Err(OpenError::Hardlinked { path, links });
    }
    Ok(Opened {
        file: File::from(fd),
        #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
        identity: Identity {
            dev: stat.st_dev as u64,
            ino: stat.st_ino as u64,
        },
        len: u64::try_from(stat.st_size).unwrap_or(0),
    })
}

/// The names in the directory `root/components…` (reached as
/// [`open_beneath`] reaches a file: no link below `root`) that `keep`
/// accepts, at most `max` of them, read at most `max * 4` entries deep so
/// a huge directory costs a bounded time. Sorted.
pub fn list_beneath(
    root: &Path,
    components: &[String],
    max: usize,
    keep: impl Fn(&str) -> bool,
) -> Result<Vec<String>, OpenError> {
    let mut path = root.to_path_buf();
    let dir = descend(open_root(root)?, &mut path, components)?;
    let entries = rustix::fs::Dir::read_from(&dir).map_err(|e| OpenError::Io {
        path: path.clone(),
        action: "list",
        source: e.into(),
    })?;
    let mut names = Vec::new();
    for entry in entries.take(max.saturating_mul(4)) {
        let entry = entry.map_err(|e| OpenError::Io {
            path: path.clone(),
            action: "list",
            source: e.into(),
        })?;
        if let Ok(name) = entry.file_name().to_str()
            && keep(name)
        {
            names.push(name.to_string());
            if names.len() == max {
                break;
            }
        }
    }
    names.sort();
    Ok(names)
}

/// Opens the directory `root` from `/`, one component at a time, through
/// no symbolic link: a link anywhere on the way, even above the directory
/// the transcripts live in, could point the reader at other files. `root`
/// is what [`real_dir`] made of the configured directory, so a link the
/// user set up is already resolved in it.
/// Opens the directories `components` down from `dir`, following no link,
/// and pushes each onto `path` (which names `dir`), for the errors.
fn descend(
    mut dir: OwnedFd,
    path: &mut PathBuf,
    components: &[String],
) -> Result<OwnedFd, OpenError> {
    for component in components {
        path.push(component);
        dir = rustix::fs::openat(
            &dir,
            component.as_str(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| describe_at(&dir, component, path, e, "open the directory"))?;
    }
    Ok(dir)
}

fn open_root(root: &Path) -> Result<OwnedFd, OpenError> {
    let unclean = || OpenError::Unclean {
        path: root.to_path_buf(),
    };
    if !root.is_absolute()
        || root
            .components()
            .any(|c| matches!(c, Component::ParentDir | Component::Prefix(_)))
    {
        return Err(unclean());
    }
    let mut path = PathBuf::from("/");
    let mut dir: OwnedFd = rustix::fs::open(
        "/",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| classify(&path, e, "open the directory"))?;
    for c in root.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(name) => {
                path.push(name);
                dir = rustix::fs::openat(
                    &dir,
                    name,
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| describe_at(&dir, name, &path, e, "open the directory"))?;
            }
            Component::ParentDir | Component::Prefix(_) => return Err(unclean()),
        }
    }
    Ok(dir)
}

/// `dir` with every symbolic link in it resolved: the real path of its
/// longest existing ancestor, and the rest as written (a `.claude` that
/// does not exist yet). Used once, where the user's configuration names
/// the directory, so that [`open_beneath`] can then refuse any link.
pub fn real_dir(dir: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut at = dir;
    loop {
        if let Ok(real) = std::fs::canonicalize(at) {
            let mut out = real;
            out.extend(rest.iter().rev());
            return out;
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                at = parent;
            }
            _ => return dir.to_path_buf(),
        }
    }
}

fn classify(path: &Path, e: rustix::io::Errno, action: &'static str) -> OpenError {
    match e {
        rustix::io::Errno::NOENT => OpenError::Missing {
            path: path.to_path_buf(),
        },
        rustix::io::Errno::NOTDIR => OpenError::NotRegular {
            path: path.to_path_buf(),
            what: "not a directory",
        },
        _ => OpenError::Io {
            path: path.to_path_buf(),
            action,
            source: e.into(),
        },
    }
}

/// Names what stood at `name` in `dir` when opening it failed with `e`:
/// a link (ELOOP from `O_NOFOLLOW`, or ENOTDIR from a link to a directory
/// on some systems), something that is not a directory, or nothing.
fn describe_at(
    dir: &OwnedFd,
    name: impl rustix::path::Arg,
    path: &Path,
    e: rustix::io::Errno,
    action: &'static str,
) -> OpenError {
    let found = rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
        .ok()
        .map(|s| FileType::from_raw_mode(s.st_mode as _));
    match (e, found) {
        (_, Some(FileType::Symlink)) | (rustix::io::Errno::LOOP, _) => OpenError::Link {
            path: path.to_path_buf(),
        },
        (rustix::io::Errno::NOENT, _) => OpenError::Missing {
            path: path.to_path_buf(),
        },
        (rustix::io::Errno::NOTDIR, Some(kind)) => OpenError::NotRegular {
            path: path.to_path_buf(),
            what: type_name(kind),
        },
        _ => OpenError::Io {
            path: path.to_path_buf(),
            action,
            source: e.into(),
        },
    }
}

fn type_name(kind: FileType) -> &'static str {
    match kind {
        FileType::RegularFile => "a regular file",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symbolic link",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Unknown => "of an unknown type",
    }
}

/// What one reader may still spend: bytes, and time until a deadline.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    pub bytes: u64,
    pub deadline: Option<Instant>,
}

/// Why [`read_range`] stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// It read the whole range.
    Done,
    /// The file ended before the range did (it shrank while being read).
    Eof,
    /// The byte budget ran out.
    Bytes,
    /// The deadline passed.
    Time,
}

/// How much [`read_range`] reads at a time: 1 MiB, aligned to 1 MiB in the
/// file so that a BLAKE3 prefix takes whole subtrees.
pub const BLOCK: u64 = 1 << 20;

/// Reads `from..to` of `file` into `sink`, a block at a time, spending
/// `budget` (the bytes it read are taken off). Returns where it stopped and
/// why. The deadline is checked between blocks, so one block is the most it
/// can overrun by.
pub fn read_range(
    file: &File,
    from: u64,
    to: u64,
    budget: &mut Budget,
    mut sink: impl FnMut(&[u8]),
) -> io::Result<(u64, Stop)> {
    let mut buf = vec![0u8; BLOCK.min(to.saturating_sub(from)) as usize];
    let mut at = from;
    while at < to {
        if budget.bytes == 0 {
            return Ok((at, Stop::Bytes));
        }
        if budget.deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok((at, Stop::Time));
        }
        let block_end = ((at / BLOCK) + 1) * BLOCK;
        let want = (block_end.min(to) - at).min(budget.bytes) as usize;
        let n = match file.read_at(&mut buf[..want], at) {
            Ok(0) => return Ok((at, Stop::Eof)),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        sink(&buf[..n]);
        at += n as u64;
        budget.bytes -= n as u64;
    }
    Ok((at, Stop::Done))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn names(parts: &[&str]) -> Vec<String> {
        parts.iter().map(|s| s.to_string()).collect()
    }

    /// A hook's time runs out part way through a read: what was read so
    /// far is kept (up to a block boundary), the read says it stopped for
    /// time, and a later read with a new budget goes on from there, so the
    /// prefix hashed across both is the file's own. The sink waits out the
    /// deadline on the first block, so the cut is made there, whatever the
    /// machine's speed.
    #[test]
    fn a_read_cut_off_by_the_deadline_keeps_its_prefix_and_goes_on_later() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("t.jsonl");
        let data: Vec<u8> = (0..3 * BLOCK + 17).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).expect("write");
        let file = File::open(&path).expect("open");
        let deadline = Instant::now() + std::time::Duration::from_millis(20);
        let mut budget = Budget {
            bytes: u64::MAX,
            deadline: Some(deadline),
        };
        let mut hasher = blake3::Hasher::new();
        let (at, stop) = read_range(&file, 0, data.len() as u64, &mut budget, |b| {
            hasher.update(b);
            while Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        })
        .expect("read");
        assert_eq!((at, stop), (BLOCK, Stop::Time));
        let mut later = Budget {
            bytes: u64::MAX,
            deadline: None,
        };
        let (end, stop) = read_range(&file, at, data.len() as u64, &mut later, |b| {
            hasher.update(b);
        })
        .expect("read on");
        assert_eq!((end, stop), (data.len() as u64, Stop::Done));
        assert_eq!(hasher.finalize(), blake3::hash(&data));
    }

    #[test]
    fn a_regular_file_is_opened_with_its_identity() {
        let root = tempfile::tempdir().expect("tmp");
        std::fs::create_dir_all(root.path().join("a/b")).expect("mkdir");
        std::fs::write(root.path().join("a/b/f.jsonl"), b"hello").expect("write");
        let opened = open_beneath(root.path(), &names(&["a", "b", "f.jsonl"])).expect("opens");
        assert_eq!(opened.len, 5);
        let meta = std::fs::metadata(root.path().join("a/b/f.jsonl")).expect("stat");
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            opened.identity,
            Identity {
                dev: meta.dev(),
                ino: meta.ino()
            }
        );
    }

    /// Guards the `NOFOLLOW` on the file and on every directory, and the
    /// type and link checks after the open.
    #[test]
    fn links_other_types_and_second_names_are_refused() {
        let root = tempfile::tempdir().expect("tmp");
        let r = root.path();
        std::fs::create_dir_all(r.join("a")).expect("mkdir");
        std::fs::create_dir_all(r.join("secret")).expect("mkdir");
        std::fs::write(r.join("secret/f.jsonl"), b"secret").expect("write");
        symlink(r.join("secret/f.jsonl"), r.join("a/link.jsonl")).expect("symlink");
        symlink(r.join("secret"), r.join("dirlink")).expect("symlink");
        std::fs::hard_link(r.join("secret/f.jsonl"), r.join("a/hard.jsonl")).expect("link");
        // mkfifo(1): rustix has no mkfifoat on macOS.
        let made = std::process::Command::new("mkfifo")
            .arg(r.join("a/fifo.jsonl"))
            .status()
            .expect("run mkfifo");
        assert!(made.success(), "mkfifo");
        std::fs::create_dir(r.join("a/dir.jsonl")).expect("mkdir");
        let cases: [(&[&str], &str); 6] = [
            (&["a", "link.jsonl"], "symbolic link"),
            (&["dirlink", "f.jsonl"], "symbolic link"),
            (&["a", "hard.jsonl"], "hard link"),
            (&["a", "fifo.jsonl"], "not a regular file"),
            (&["a", "dir.jsonl"], "not a regular file"),
            (&["a", "none.jsonl"], "missing"),
        ];
        for (parts, reason) in cases {
            let e = open_beneath(r, &names(parts)).expect_err("refused");
            assert_eq!(e.reason(), reason, "{parts:?}: {e}");
        }
    }

    /// Guards `open_root`: a link among the components of the directory
    /// itself (above `projects`) is refused, not followed, and a relative
    /// or `..` root is refused. Without it the walk started at `root` as
    /// the kernel resolved it and read the file behind the link.
    #[test]
    fn a_link_above_the_directory_is_refused_too() {
        let tmp = tempfile::tempdir().expect("tmp");
        let r = real_dir(tmp.path());
        std::fs::create_dir_all(r.join("elsewhere/claude/p")).expect("mkdir");
        std::fs::write(r.join("elsewhere/claude/p/f.jsonl"), b"secret").expect("write");
        symlink(r.join("elsewhere"), r.join("home")).expect("symlink");
        let e =
            open_beneath(&r.join("home/claude"), &names(&["p", "f.jsonl"])).expect_err("refused");
        assert_eq!(e.reason(), "symbolic link", "{e}");
        assert!(e.to_string().contains("/home:"), "{e}");
        let e = open_beneath(&r.join("x/../elsewhere/claude"), &names(&["p", "f.jsonl"]))
            .expect_err("refused");
        assert_eq!(e.reason(), "not a clean path", "{e}");
        let e = open_beneath(Path::new("elsewhere/claude"), &names(&["p", "f.jsonl"]))
            .expect_err("refused");
        assert_eq!(e.reason(), "not a clean path", "{e}");
        // Resolved where it is configured, the same directory opens.
        let real = real_dir(&r.join("home/claude"));
        assert_eq!(real, r.join("elsewhere/claude"));
        assert_eq!(
            open_beneath(&real, &names(&["p", "f.jsonl"]))
                .expect("opens")
                .len,
            6
        );
        assert_eq!(
            real_dir(&r.join("home/claude/not-yet/.claude")),
            r.join("elsewhere/claude/not-yet/.claude")
        );
    }

    #[test]
    fn reads_stop_at_the_range_the_budget_or_the_files_end() {
        let root = tempfile::tempdir().expect("tmp");
        let data: Vec<u8> = (0..3 * BLOCK + 10).map(|i| (i % 7) as u8).collect();
        std::fs::write(root.path().join("f"), &data).expect("write");
        let file = File::open(root.path().join("f")).expect("open");
        let mut got = Vec::new();
        let mut budget = Budget {
            bytes: u64::MAX,
            deadline: None,
        };
        let (at, stop) = read_range(&file, 5, 2 * BLOCK + 3, &mut budget, |b| {
            got.extend_from_slice(b)
        })
        .expect("reads");
        assert_eq!((at, stop), (2 * BLOCK + 3, Stop::Done));
        assert_eq!(got, &data[5..(2 * BLOCK + 3) as usize]);

        let mut budget = Budget {
            bytes: 1000,
            deadline: None,
        };
        let (at, stop) = read_range(&file, 10, 5000, &mut budget, |_| {}).expect("reads");
        assert_eq!((at, stop, budget.bytes), (1010, Stop::Bytes, 0));

        let mut budget = Budget {
            bytes: u64::MAX,
            deadline: None,
        };
        let (at, stop) = read_range(&file, 0, 4 * BLOCK, &mut budget, |_| {}).expect("reads");
        assert_eq!((at, stop), (3 * BLOCK + 10, Stop::Eof));

        let mut budget = Budget {
            bytes: u64::MAX,
            deadline: Some(Instant::now()),
        };
        let (at, stop) = read_range(&file, 7, 100, &mut budget, |_| {}).expect("reads");
        assert_eq!((at, stop), (7, Stop::Time));
    }
}
