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
//! The filesystem dates only the changes made through it: on a device an
//! ordinary user can have set up over bytes of their own (a loop device
//! udisks attaches over the user's file, [`USER_DEVICES`]) the bytes change
//! under it with no time moving, and a file there that no process of the
//! run can write through the filesystem is the agent's all the same: there
//! nothing is remembered, not even for the run; nor on FUSE or a network
//! filesystem, whose server decides who writes ([`trust`], ADR-0148).
//!
//! Across runs the hashes live in nd7's state directory ([`FILE`]), which
//! no write root or grant reaches (`Policy::unwritable`), so nothing under
//! `nd7 run` can write a hash into it.

use std::collections::HashMap;
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::PathBuf;

/// Btrfs's `f_type`: its device numbers are its own, not a device's
/// ([`btrfs_devices`]).
const BTRFS: i64 = 0x9123_683E;
/// Filesystems that date every change of a file's bytes (`statfs`'s
/// `f_type`): ext2/3/4, XFS, Btrfs.
const DATED: [i64; 3] = [0xEF53, 0x5846_5342, BTRFS];
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

/// Filesystems with no device under them, where the kernel alone decides
/// who writes a file, by the owner and mode it shows: tmpfs, ramfs,
/// overlayfs (its layers are root's where a file is).
const LOCAL: [i64; 3] = [0x0102_1994, 0x8584_58F6, 0x794C_7630];

/// Whether `file`'s hash (its metadata `meta`) may be remembered across
/// runs, and whether for this run: across runs on a filesystem that dates
/// every change of its bytes ([`DATED`]), for the run where no process of
/// the run can write it ([`sealed`]); each only where nothing changes the
/// bytes under the filesystem ([`LOCAL`], or on its own devices,
/// [`on_own_devices`]). FUSE and network filesystems are neither: their
/// server, not the kernel, decides who writes.
// `f_type` is an i64 here, a u32 or i32 on other architectures.
#[allow(clippy::unnecessary_cast)]
fn trust(file: &std::fs::File, meta: &std::fs::Metadata) -> (bool, bool) {
    let Ok(fs) = rustix::fs::fstatfs(file) else {
        return (false, false);
    };
    let kind = fs.f_type as i64;
    if LOCAL.contains(&kind) {
        return (false, sealed(meta));
    }
    let own = on_own_devices(file, meta, kind);
    (own && DATED.contains(&kind), own && sealed(meta))
}

/// Block devices an ordinary user can have set up over bytes they can
/// write while a filesystem on them is mounted: a loop device (udisks
/// attaches one over the user's own file), a network block device, a
/// userspace one (ublk). Writing the bytes under the filesystem changes a
/// file's without its ctime (ADR-0148).
const USER_DEVICES: [&str; 3] = ["loop", "nbd", "ublkb"];

/// Whether every device the filesystem of `file` is made of is known and
/// none is, or stands on, one of [`USER_DEVICES`]. Unknown (a filesystem
/// on no device) is no.
fn on_own_devices(file: &std::fs::File, meta: &std::fs::Metadata, kind: i64) -> bool {
    let devices = if kind == BTRFS {
        btrfs_devices(file)
    } else {
        let dev = meta.dev();
        let at = format!(
            "/sys/dev/block/{}:{}",
            rustix::fs::major(dev),
            rustix::fs::minor(dev)
        );
        Some(vec![PathBuf::from(at)])
    };
    devices.is_some_and(|d| !d.is_empty() && d.iter().all(|d| own_device(d, 0)))
}

/// Whether the block device whose sysfs directory is `dir` is none of
/// [`USER_DEVICES`], nor a partition of one, nor stacked on one (a device
/// mapper's `slaves`).
fn own_device(dir: &std::path::Path, depth: u32) -> bool {
    let Ok(dir) = std::fs::canonicalize(dir) else {
        return false;
    };
    let name = dir.file_name().unwrap_or_default().to_string_lossy();
    if depth > 8 || USER_DEVICES.iter().any(|u| name.starts_with(u)) {
        return false;
    }
    if dir.join("partition").exists() {
        return dir.parent().is_some_and(|disk| own_device(disk, depth + 1));
    }
    std::fs::read_dir(dir.join("slaves"))
        .is_ok_and(|below| below.flatten().all(|d| own_device(&d.path(), depth + 1)))
}

/// A Btrfs filesystem's devices (its device numbers are its own, not a
/// device's): `/sys/fs/btrfs/FSID/devices/*`, the FSID by
/// `BTRFS_IOC_FS_INFO`.
fn btrfs_devices(file: &std::fs::File) -> Option<Vec<PathBuf>> {
    use std::os::fd::AsRawFd;
    // struct btrfs_ioctl_fs_info_args: 1024 bytes, the fsid at 16.
    let mut args = [0u8; 1024];
    // _IOR(0x94, 31, struct btrfs_ioctl_fs_info_args)
    // The request's type is glibc's unsigned long and musl's int
    // (`libc::Ioctl`): the release's static Linux builds are musl.
    const FS_INFO: libc::Ioctl = 0x8400_941Fu32 as libc::Ioctl;
    // SAFETY: the request fills at most the 1024 bytes of `args`.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), FS_INFO, args.as_mut_ptr()) };
    if r != 0 {
        return None;
    }
    let hex: String = args[16..32].iter().map(|b| format!("{b:02x}")).collect();
    let fsid = format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    );
    let listed = std::fs::read_dir(format!("/sys/fs/btrfs/{fsid}/devices")).ok()?;
    Some(listed.flatten().map(|d| d.path()).collect())
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
        let (dated, sealed) = trust(file, meta);
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

/// The BLAKE3 of what `file` holds from where it stands to its end (read
/// 64 KiB at a time by BLAKE3's own reader loop).
fn hash(file: &mut std::fs::File) -> Option<String> {
    let mut hasher = blake3::Hasher::new();
    hasher.update_reader(file).ok()?;
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

    /// A disk, its partition and a mapper device over it are the
    /// filesystem's own; a loop device, its partition and a mapper device
    /// over one are not (a sysfs tree made here).
    #[test]
    fn a_loop_device_partition_or_mapping_over_one_is_not_own() {
        let sys = temp_dir("sysfs");
        for d in ["sda/sda1", "sda/slaves", "loop0/loop0p1", "loop0/slaves"] {
            std::fs::create_dir_all(sys.join(d)).expect("mkdir");
        }
        for p in ["sda/sda1", "loop0/loop0p1"] {
            std::fs::write(sys.join(p).join("partition"), "1").expect("partition");
        }
        for (dm, below) in [("dm-0", "sda/sda1"), ("dm-1", "loop0/loop0p1")] {
            std::fs::create_dir_all(sys.join(dm).join("slaves")).expect("mkdir");
            std::os::unix::fs::symlink(sys.join(below), sys.join(dm).join("slaves/x"))
                .expect("symlink");
        }
        let own = |d: &str| own_device(&sys.join(d), 0);
        assert!(own("sda") && own("sda/sda1") && own("dm-0"));
        assert!(!own("loop0") && !own("loop0/loop0p1") && !own("dm-1"));
        assert!(!own("absent"));
        let _ = std::fs::remove_dir_all(&sys);
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
        let f = std::fs::File::open(&old).expect("open");
        let on_dated = trust(&f, &f.metadata().expect("metadata")).0;
        run.save();
        let kept = std::fs::read_to_string(&place).unwrap_or_default();
        assert_eq!(kept.lines().count(), usize::from(on_dated), "{kept}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
