//! The BLAKE3 of each executable the exec observer saw, remembered by the
//! file's identity within a run and across runs (ADR-0146), so a build does
//! not hash `cargo` (42 MB) or `cc` again each time.
//!
//! An identity is the device, inode, size, mtime and ctime. A remembered
//! hash is only as good as the promise that the bytes cannot change while
//! the identity stays: nothing unprivileged sets a ctime, and on the
//! filesystems in [`DATED`] every change of a file's bytes sets it (a
//! write, a truncation, and a write through a shared mapping, which each
//! takes a fault those filesystems date; the kernel refuses an exec while
//! a writable mapping is open). tmpfs (and so a memfd) does not date a
//! write to a page already mapped writable: there a hash is remembered
//! only for a file no process of the run can write at all ([`sealed`]),
//! and only for the run. A change within the clock's tick (or a second, where a
//! filesystem keeps whole seconds) of the last can leave the ctime as it
//! was, so a hash is remembered only when the file's ctime was at least
//! [`SETTLED_NS`] old before its bytes were read, and only if its identity
//! is the same once they were.
//!
//! Across runs the hashes live in nd7's state directory ([`FILE`]), which
//! no write root or grant reaches (`Policy::unwritable`), so nothing under
//! `nd7 run` can write a hash into it.

use std::collections::HashMap;
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::PathBuf;

/// Filesystems that date every change of a file's bytes (`statfs`'s
/// `f_type`): ext2/3/4, XFS, Btrfs.
const DATED: [i64; 3] = [0xEF53, 0x5846_5342, 0x9123_683E];
/// How old a file's ctime must be before its hash is remembered: past the
/// coarsest timestamp a dated filesystem keeps (whole seconds) and a tick.
const SETTLED_NS: i64 = 2_000_000_000;
/// The file in nd7's state directory.
pub const FILE: &str = "exe-hashes";
/// At most this many identities are kept across runs (the newest).
const KEPT: usize = 4096;

/// A file's identity: device, inode, size, mtime and ctime (ns).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Key {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: i64,
    ctime: i64,
}

fn key(meta: &std::fs::Metadata) -> Key {
    Key {
        dev: meta.dev(),
        ino: meta.ino(),
        size: meta.size(),
        mtime: meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
        ctime: meta.ctime() * 1_000_000_000 + meta.ctime_nsec(),
    }
}

/// Whether `file` lies on a filesystem that dates every change of its
/// bytes ([`DATED`]).
// `f_type` is an i64 here, a u32 or i32 on other architectures.
#[allow(clippy::unnecessary_cast)]
fn dated(file: &std::fs::File) -> bool {
    rustix::fs::fstatfs(file).is_ok_and(|s| DATED.contains(&(s.f_type as i64)))
}

/// Whether no process of the run can write the file `meta` describes,
/// whatever the floor: it is not theirs (they run as this process's user,
/// which is not root), and neither its group nor others may write it (an
/// ACL grants no more than the group bits show).
fn sealed(meta: &std::fs::Metadata) -> bool {
    let me = rustix::process::geteuid().as_raw();
    me != 0 && meta.uid() != me && meta.mode() & 0o022 == 0
}

/// The hashes remembered: this run's and, once read, earlier runs'.
pub struct Hashes {
    known: HashMap<Key, String>,
    /// Hashes of files no process of the run can write ([`sealed`]) on
    /// filesystems that do not date every change: remembered for this run
    /// only, as whoever can write them (root) could change them undated.
    this_run: HashMap<Key, String>,
    /// Where they are kept across runs; `None` when there is no state
    /// directory (then only this run's are remembered).
    place: Option<PathBuf>,
    /// Whether [`Hashes::place`] has been read.
    read: bool,
    /// Keys learnt in this run, newest last.
    learnt: Vec<Key>,
}

impl Hashes {
    /// Hashes kept in `place` (read at the first exec, written by
    /// [`Hashes::save`]).
    pub fn new(place: Option<PathBuf>) -> Hashes {
        Hashes {
            known: HashMap::new(),
            this_run: HashMap::new(),
            place,
            read: false,
            learnt: Vec::new(),
        }
    }

    /// The place in the user's state directory, as `nd7 run` resolves it.
    pub fn place() -> Option<PathBuf> {
        let state = crate::session_log::state_dir().ok()?;
        Some(std::fs::canonicalize(state).ok()?.join(FILE))
    }

    /// The BLAKE3 of `file`'s bytes (its metadata `meta`, read before):
    /// remembered when its identity and filesystem allow, read otherwise.
    pub fn of(&mut self, file: &mut std::fs::File, meta: &std::fs::Metadata) -> Option<String> {
        let before = key(meta);
        let dated = dated(file);
        let sealed = sealed(meta);
        if dated {
            self.read_place();
        }
        let remembered = match (dated, sealed) {
            (true, _) => self.known.get(&before),
            (false, true) => self.this_run.get(&before),
            (false, false) => None,
        };
        if let Some(h) = remembered {
            return Some(h.clone());
        }
        let read_at = crate::session_log::now_ns() as i64;
        let hash = hash(file)?;
        let same = file.metadata().is_ok_and(|m| key(&m) == before);
        if same && dated && before.ctime <= read_at - SETTLED_NS {
            self.known.insert(before, hash.clone());
            self.learnt.push(before);
        } else if same && sealed {
            self.this_run.insert(before, hash.clone());
        }
        Some(hash)
    }

    fn read_place(&mut self) {
        if std::mem::replace(&mut self.read, true) {
            return;
        }
        let Some(place) = &self.place else { return };
        let Ok(text) = read_nofollow(place) else {
            return;
        };
        for line in text.lines() {
            if let Some((k, h)) = parse(line) {
                self.known.entry(k).or_insert(h);
            }
        }
    }

    /// Writes what this run learnt, with the newest of what earlier runs
    /// left, beside and renamed into place. Nothing when it learnt nothing.
    pub fn save(&mut self) {
        let Some(place) = self.place.clone().filter(|_| !self.learnt.is_empty()) else {
            return;
        };
        let learnt: Vec<Key> = std::mem::take(&mut self.learnt);
        let mut lines: Vec<String> = learnt
            .iter()
            .filter_map(|k| self.known.get(k).map(|h| line(k, h)))
            .collect();
        // Then what earlier runs left, in their order, newest first.
        if let Ok(text) = read_nofollow(&place) {
            lines.extend(
                text.lines()
                    .filter_map(parse)
                    .filter(|(k, _)| !learnt.contains(k))
                    .map(|(k, h)| line(&k, &h)),
            );
        }
        lines.truncate(KEPT);
        let _ = crate::files::replace(
            &place,
            lines.join("").as_bytes(),
            0o600,
            crate::files::Durability::Atomic,
        );
    }
}

fn line(k: &Key, hash: &str) -> String {
    format!(
        "{} {} {} {} {} {hash}\n",
        k.dev, k.ino, k.size, k.mtime, k.ctime
    )
}

/// One line of [`FILE`]: the five numbers of a [`Key`] and a BLAKE3 in
/// lowercase hex; anything else is passed over.
fn parse(line: &str) -> Option<(Key, String)> {
    let f: Vec<&str> = line.split(' ').collect();
    let [dev, ino, size, mtime, ctime, hash] = f.as_slice() else {
        return None;
    };
    let hex = hash.len() == 64 && hash.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    hex.then_some(())?;
    Some((
        Key {
            dev: dev.parse().ok()?,
            ino: ino.parse().ok()?,
            size: size.parse().ok()?,
            mtime: mtime.parse().ok()?,
            ctime: ctime.parse().ok()?,
        },
        hash.to_string(),
    ))
}

fn read_nofollow(path: &std::path::Path) -> io::Result<String> {
    let mut text = String::new();
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?
        .take(1 << 20)
        .read_to_string(&mut text)?;
    Ok(text)
}

/// The BLAKE3 of what `file` holds from where it stands to its end.
fn hash(file: &mut std::fs::File) -> Option<String> {
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                hasher.update(&buf[..n]);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return None,
        }
    }
    Some(hasher.finalize().to_hex().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("nd7-hashes-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        dir
    }

    /// A line written is read back; lines that are not one are passed over.
    #[test]
    fn lines_round_trip_and_garbage_is_passed_over() {
        let k = Key {
            dev: 1,
            ino: 2,
            size: 3,
            mtime: -4,
            ctime: 5,
        };
        let h = "ab".repeat(32);
        assert_eq!(parse(line(&k, &h).trim_end()), Some((k, h.clone())));
        assert_eq!(parse(&format!("1 2 3 4 5 {}", "AB".repeat(32))), None);
        assert_eq!(parse("1 2 3 4 5"), None);
        assert_eq!(parse(&format!("1 2 3 4 5 {h} 6")), None);
    }

    /// A file whose ctime is older than [`SETTLED_NS`] on a dated
    /// filesystem is remembered, and read back by a later run; a new one
    /// is not.
    #[test]
    fn a_settled_file_is_remembered_across_runs_and_a_new_one_is_not() {
        let dir = temp_dir("settled");
        let place = dir.join(FILE);
        let old = PathBuf::from("/usr/bin/true");
        let new = dir.join("new");
        std::fs::write(&new, b"fresh bytes").expect("a new file");
        let mut run = Hashes::new(Some(place.clone()));
        for p in [&old, &new] {
            let mut f = std::fs::File::open(p).expect("open");
            let meta = f.metadata().expect("metadata");
            let want = blake3::hash(&std::fs::read(p).expect("read"))
                .to_hex()
                .to_string();
            assert_eq!(run.of(&mut f, &meta), Some(want));
        }
        let on_dated = dated(&std::fs::File::open(&old).expect("open"));
        run.save();
        let kept = std::fs::read_to_string(&place).unwrap_or_default();
        assert_eq!(kept.lines().count(), usize::from(on_dated), "{kept}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
