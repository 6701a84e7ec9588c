//! Modes, owners, times and extended attributes, kept to the write roots:
//! the keeper's half of the filter's `attrs` part ([`super::seccomp`]).
//!
//! Landlock has no right for `chmod`, `chown`, `utimensat` or `setxattr`:
//! under it alone the agent could make `~/.ssh`, a private key, `~/.nd7` or
//! its grants file mode 0777 (another account could then append a grant),
//! date a credential store so the end-of-run watch trusts it, or strip
//! an extended attribute. So every such call stops in the kernel and waits
//! for the keeper ([`change`]), which:
//!
//! 1. reads the call's arguments once from the caller's memory;
//! 2. opens the file named, `O_PATH`, as the caller would resolve it: a path
//!    is made absolute from the caller's working directory (or the
//!    directory descriptor it gave, fetched with `pidfd_getfd`) and resolved
//!    beneath the caller's root (`/proc/<tid>/root`, `RESOLVE_IN_ROOT`), so
//!    the run's mount namespace is used, read-only binds included; a
//!    descriptor call fetches the caller's own open file; a trailing link is
//!    followed or not as the call says; a magic link (`/proc/self/fd/N`) is
//!    refused, as from the keeper it would name the keeper's own;
//! 3. decides on the opened file ([`inside`]): it lies in the write roots
//!    when it, or a directory above it, is one of the directories or files
//!    the caller's Landlock rules let it write, by identity (device,
//!    inode), walking `..` up from it as Landlock itself walks the path;
//! 4. if so, makes the call itself on the opened file (through
//!    `/proc/self/fd/N` or the `AT_EMPTY_PATH` forms) and returns its
//!    result as the call's; if not, `EPERM`.
//!
//! The call is never let through (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`): the
//! caller could change the path or swap a link between the check and the
//! call. The keeper runs as the same account and holds no capability, so the
//! kernel's own permission checks on the call are the caller's; what the
//! keeper lacks is Landlock, which is why the check is made on the object
//! opened, not on a name. A file cannot cross the write roots' border while
//! it is checked: moving it out of (or into) them needs a write outside,
//! which Landlock refuses.
//!
//! Each confined process's roots come with its listener ([`Roots`]): the
//! floor's, or a command's with the grants it was started under, so a
//! grant made with `nd7 allow` counts for the commands started after it.

use std::collections::HashSet;
use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};

use super::seccomp::AttrCall;

/// The write roots of one confined process, by (device, inode): every
/// directory or file its Landlock rules let it write.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Roots(HashSet<(u64, u64)>);

/// At most this many roots travel with a listener; a process with more
/// (a grant split into thousands of entries) has the rest refused.
const MAX_ROOTS: usize = 2048;

impl Roots {
    /// The roots as the listener's message carries them: a count, then each
    /// device and inode, little-endian.
    pub fn encode(ids: &[(u64, u64)]) -> Vec<u8> {
        let ids = &ids[..ids.len().min(MAX_ROOTS)];
        let mut out = Vec::with_capacity(4 + 16 * ids.len());
        out.extend((ids.len() as u32).to_le_bytes());
        for (dev, ino) in ids {
            out.extend(dev.to_le_bytes());
            out.extend(ino.to_le_bytes());
        }
        out
    }

    /// The roots at the start of `bytes`, and what follows them. A message
    /// too short for its count carries none (everything is then refused).
    pub fn decode(bytes: &[u8]) -> (Roots, &[u8]) {
        let word = |b: &[u8], at: usize| -> Option<u64> {
            Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
        };
        let Some(count) = bytes
            .get(..4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        else {
            return (Roots::default(), bytes);
        };
        let end = 4 + 16 * count as usize;
        if bytes.len() < end {
            return (Roots::default(), &[]);
        }
        let ids = (0..count as usize)
            .filter_map(|i| Some((word(bytes, 4 + 16 * i)?, word(bytes, 12 + 16 * i)?)))
            .collect();
        (Roots(ids), &bytes[end..])
    }

    fn holds(&self, st: &rustix::fs::Stat) -> bool {
        self.0.contains(&(st.st_dev, st.st_ino))
    }
}

/// The caller of one call, as the keeper can reach it.
pub struct Caller<'a> {
    /// The calling thread, in the keeper's pid namespace.
    pub tid: i32,
    /// Fetches the caller's descriptor (`pidfd_getfd`).
    pub fd: &'a dyn Fn(i32) -> Result<OwnedFd, i32>,
    /// Whether the caller still waits in this call (its pid not reused).
    pub valid: &'a dyn Fn() -> bool,
}

/// Which file a call names.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Target {
    pub(super) dirfd: i32,
    /// `None`: the descriptor itself.
    pub(super) path: Option<Vec<u8>>,
    pub(super) follow: bool,
    /// A descriptor call (`fchmod`, `fchown`, `fsetxattr`, `futimens`),
    /// which the kernel refuses on an `O_PATH` descriptor.
    pub(super) opened_only: bool,
}

/// What a call changes.
#[derive(Debug, PartialEq, Eq)]
enum Change {
    Mode(u32),
    Owner(Option<u32>, Option<u32>),
    /// Access and modification times; `None` for now.
    Times(Option<[(i64, i64); 2]>),
    SetXattr {
        name: CString,
        value: Vec<u8>,
        flags: i32,
    },
    RemoveXattr(CString),
}

pub(super) const PATH_MAX: usize = 4096;
const XATTR_NAME_MAX: usize = 255;
const XATTR_SIZE_MAX: usize = 65536;
/// How far [`inside`] walks up; deeper than any path the kernel resolves.
const MAX_DEPTH: usize = PATH_MAX / 2;

/// Makes `call` for the caller if the file it names lies in `roots`:
/// the call's result, or its errno (`EPERM` outside the roots, `ESRCH` when
/// the caller is gone and nothing is to be answered).
pub fn change(
    caller: &Caller<'_>,
    call: AttrCall,
    args: [u64; 6],
    roots: &Roots,
) -> Result<i64, i32> {
    let (target, change) = decode(caller.tid, call, args)?;
    let change = outer_owner(caller.tid, change)?;
    let root = open_proc(caller.tid, "root")?;
    let object = open_target(caller, &root, &target)?;
    if target.opened_only && is_path_only(&object) {
        return Err(libc::EBADF);
    }
    let st = rustix::fs::fstat(&object).map_err(|e| e.raw_os_error())?;
    let allowed = inside(roots, &root, &object, &st)?;
    if !(caller.valid)() {
        return Err(libc::ESRCH);
    }
    if !allowed {
        return Err(libc::EPERM);
    }
    without_capabilities()?;
    perform(&object, &st, &change).map(|()| 0)
}

/// The call's target and change, from its arguments and the caller's memory.
fn decode(tid: i32, call: AttrCall, a: [u64; 6]) -> Result<(Target, Change), i32> {
    use AttrCall::*;
    let path = |addr: u64| read_cstr(tid, addr, PATH_MAX);
    let cwd = libc::AT_FDCWD;
    let named = |dirfd: i32, addr: u64, follow: bool| -> Result<Target, i32> {
        at(
            dirfd,
            path(addr)?,
            if follow { 0 } else { libc::AT_SYMLINK_NOFOLLOW },
        )
    };
    let flagged = |dirfd: u64, addr: u64, flags: u64| -> Result<Target, i32> {
        let flags = i32::try_from(flags).map_err(|_| libc::EINVAL)?;
        at(dirfd as i32, path(addr)?, flags)
    };
    let opened = |fd: u64| Target {
        dirfd: fd as i32,
        path: None,
        follow: true,
        opened_only: true,
    };
    let owner = |u: u64, g: u64| Change::Owner(id(u), id(g));
    let name = |addr: u64| read_cstr(tid, addr, XATTR_NAME_MAX + 1).and_then(xattr_name);
    let set = |n: u64, v: u64, size: u64, flags: u64| -> Result<Change, i32> {
        Ok(Change::SetXattr {
            name: name(n)?,
            value: read_value(tid, v, size)?,
            flags: flags as i32,
        })
    };
    Ok(match call {
        Chmod => (named(cwd, a[0], true)?, Change::Mode(a[1] as u32)),
        Fchmod => (opened(a[0]), Change::Mode(a[1] as u32)),
        Fchmodat => (named(a[0] as i32, a[1], true)?, Change::Mode(a[2] as u32)),
        Fchmodat2 => (flagged(a[0], a[1], a[3])?, Change::Mode(a[2] as u32)),
        Chown => (named(cwd, a[0], true)?, owner(a[1], a[2])),
        Lchown => (named(cwd, a[0], false)?, owner(a[1], a[2])),
        Fchown => (opened(a[0]), owner(a[1], a[2])),
        Fchownat => (flagged(a[0], a[1], a[4])?, owner(a[2], a[3])),
        Utime => (named(cwd, a[0], true)?, Change::Times(utimbuf(tid, a[1])?)),
        Utimes => (named(cwd, a[0], true)?, Change::Times(timevals(tid, a[1])?)),
        Futimesat => (
            named(a[0] as i32, a[1], true)?,
            Change::Times(timevals(tid, a[2])?),
        ),
        Utimensat if a[1] == 0 => {
            // futimens: the descriptor itself, and no flags.
            if a[0] as i32 == cwd {
                return Err(libc::EFAULT);
            }
            if a[3] != 0 {
                return Err(libc::EINVAL);
            }
            (opened(a[0]), Change::Times(timespecs(tid, a[2])?))
        }
        Utimensat => (
            flagged(a[0], a[1], a[3])?,
            Change::Times(timespecs(tid, a[2])?),
        ),
        Setxattr => (named(cwd, a[0], true)?, set(a[1], a[2], a[3], a[4])?),
        Lsetxattr => (named(cwd, a[0], false)?, set(a[1], a[2], a[3], a[4])?),
        Fsetxattr => (opened(a[0]), set(a[1], a[2], a[3], a[4])?),
        Removexattr => (named(cwd, a[0], true)?, Change::RemoveXattr(name(a[1])?)),
        Lremovexattr => (named(cwd, a[0], false)?, Change::RemoveXattr(name(a[1])?)),
        Fremovexattr => (opened(a[0]), Change::RemoveXattr(name(a[1])?)),
        Setxattrat => {
            // struct xattr_args { u64 value; u32 size; u32 flags; }
            if a[5] < 16 {
                return Err(libc::EINVAL);
            }
            let mut x = [0u8; 16];
            super::memory::read_memory(tid, a[4], &mut x)?;
            let value = u64::from_le_bytes(x[0..8].try_into().unwrap_or_default());
            let size = u32::from_le_bytes(x[8..12].try_into().unwrap_or_default());
            let flags = u32::from_le_bytes(x[12..16].try_into().unwrap_or_default());
            let target = flagged(a[0], a[1], a[2])?;
            (target, set(a[3], value, u64::from(size), u64::from(flags))?)
        }
        Removexattrat => (flagged(a[0], a[1], a[2])?, Change::RemoveXattr(name(a[3])?)),
    })
}

/// A path call's target with its `AT_*` flags: `AT_EMPTY_PATH` with an
/// empty path names the directory descriptor itself.
fn at(dirfd: i32, path: Vec<u8>, flags: i32) -> Result<Target, i32> {
    if flags & !(libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH) != 0 {
        return Err(libc::EINVAL);
    }
    let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
    if let Some((fd, rest)) = own_descriptor(&path) {
        return Ok(Target {
            dirfd: fd,
            path: rest.map(<[u8]>::to_vec),
            follow,
            opened_only: false,
        });
    }
    if path.is_empty() {
        if flags & libc::AT_EMPTY_PATH == 0 {
            return Err(libc::ENOENT);
        }
        return Ok(Target {
            dirfd,
            path: None,
            follow,
            opened_only: false,
        });
    }
    Ok(Target {
        dirfd,
        path: Some(path),
        follow,
        opened_only: false,
    })
}

/// A path through one of the caller's own descriptors (`/proc/self/fd/N`,
/// `/proc/thread-self/fd/N`, `/dev/fd/N`), as glibc before 2.39 makes
/// `fchmodat(…, AT_SYMLINK_NOFOLLOW)`: the descriptor, and what follows it.
/// Resolved from the keeper such a path would name the keeper's own.
fn own_descriptor(path: &[u8]) -> Option<(i32, Option<&[u8]>)> {
    let rest = [
        &b"/proc/self/fd/"[..],
        b"/proc/thread-self/fd/",
        b"/dev/fd/",
    ]
    .iter()
    .find_map(|p| path.strip_prefix(*p))?;
    let end = rest.iter().position(|&b| b == b'/').unwrap_or(rest.len());
    let fd: i32 = std::str::from_utf8(&rest[..end]).ok()?.parse().ok()?;
    let tail = rest[end..].strip_prefix(b"/").filter(|t| !t.is_empty());
    Some((fd, tail))
}

/// An owner change with the caller's numbers, which are its user
/// namespace's (the run's maps only the account's own user and group),
/// made the keeper's: each mapped through `/proc/<tid>/uid_map` or
/// `gid_map`, which the kernel shows relative to the reader. A number the
/// caller's namespace does not map fails with `EINVAL`, as the kernel's own
/// `chown` does there; taken as the keeper's own, it gave a file to a
/// supplementary group (`docker`) the caller cannot name.
fn outer_owner(tid: i32, change: Change) -> Result<Change, i32> {
    let Change::Owner(uid, gid) = change else {
        return Ok(change);
    };
    let map = |what: &str, id: Option<u32>| -> Result<Option<u32>, i32> {
        let Some(id) = id else { return Ok(None) };
        let text = std::fs::read_to_string(format!("/proc/{tid}/{what}"))
            .map_err(|e| e.raw_os_error().unwrap_or(libc::ESRCH))?;
        map_id(&text, id).map(Some).ok_or(libc::EINVAL)
    };
    Ok(Change::Owner(map("uid_map", uid)?, map("gid_map", gid)?))
}

/// `id` through a `uid_map`'s lines (`inside outside count`).
fn map_id(map: &str, id: u32) -> Option<u32> {
    map.lines().find_map(|line| {
        let mut w = line.split_whitespace().map(|w| w.parse::<u64>().ok());
        let (inside, outside, count) = (w.next()??, w.next()??, w.next()??);
        let id = u64::from(id);
        (inside <= id && id < inside + count)
            .then(|| u32::try_from(outside + (id - inside)).ok())
            .flatten()
    })
}

/// An owner argument: -1 leaves it as it is.
fn id(value: u64) -> Option<u32> {
    let value = value as u32;
    (value != u32::MAX).then_some(value)
}

fn xattr_name(name: Vec<u8>) -> Result<CString, i32> {
    if name.is_empty() || name.len() > XATTR_NAME_MAX {
        return Err(libc::ERANGE);
    }
    CString::new(name).map_err(|_| libc::EINVAL)
}

fn read_value(tid: i32, addr: u64, size: u64) -> Result<Vec<u8>, i32> {
    let size = usize::try_from(size).map_err(|_| libc::E2BIG)?;
    if size > XATTR_SIZE_MAX {
        return Err(libc::E2BIG);
    }
    let mut value = vec![0u8; size];
    super::memory::read_memory(tid, addr, &mut value)?;
    Ok(value)
}

/// Reads a NUL-terminated string of at most `max` bytes (the NUL not
/// counted) at `addr`, a page at a time so that a string ending just before
/// unmapped memory is read whole.
pub(super) fn read_cstr(tid: i32, addr: u64, max: usize) -> Result<Vec<u8>, i32> {
    const PAGE: u64 = 4096;
    if addr == 0 {
        return Err(libc::EFAULT);
    }
    let mut out = Vec::new();
    let mut at = addr;
    loop {
        let chunk = (PAGE - at % PAGE) as usize;
        let mut buf = vec![0u8; chunk];
        super::memory::read_memory(tid, at, &mut buf)?;
        if let Some(end) = memchr::memchr(0, &buf) {
            out.extend_from_slice(&buf[..end]);
            return if out.len() > max {
                Err(libc::ENAMETOOLONG)
            } else {
                Ok(out)
            };
        }
        out.extend_from_slice(&buf);
        if out.len() > max {
            return Err(libc::ENAMETOOLONG);
        }
        at += chunk as u64;
    }
}

/// Two `(seconds, nanoseconds)` pairs at `addr`, as `struct timespec[2]`.
fn timespecs(tid: i32, addr: u64) -> Result<Option<[(i64, i64); 2]>, i32> {
    pairs(tid, addr, 32).map(|p| p.map(|p| [(p[0], p[1]), (p[2], p[3])]))
}

/// `struct timeval[2]`, microseconds made nanoseconds.
fn timevals(tid: i32, addr: u64) -> Result<Option<[(i64, i64); 2]>, i32> {
    let Some(p) = pairs(tid, addr, 32)? else {
        return Ok(None);
    };
    let ns = |us: i64| {
        if (0..1_000_000).contains(&us) {
            Ok(us * 1000)
        } else {
            Err(libc::EINVAL)
        }
    };
    Ok(Some([(p[0], ns(p[1])?), (p[2], ns(p[3])?)]))
}

/// `struct utimbuf`: whole seconds.
fn utimbuf(tid: i32, addr: u64) -> Result<Option<[(i64, i64); 2]>, i32> {
    pairs(tid, addr, 16).map(|p| p.map(|p| [(p[0], 0), (p[1], 0)]))
}

/// `len` bytes (16 or 32) of 64-bit words at `addr`; `None` for a null
/// pointer, which means "now".
fn pairs(tid: i32, addr: u64, len: usize) -> Result<Option<[i64; 4]>, i32> {
    if addr == 0 {
        return Ok(None);
    }
    let mut buf = [0u8; 32];
    super::memory::read_memory(tid, addr, &mut buf[..len])?;
    let word = |i: usize| i64::from_le_bytes(buf[8 * i..8 * i + 8].try_into().unwrap_or_default());
    Ok(Some([word(0), word(1), word(2), word(3)]))
}

fn errno(e: rustix::io::Errno) -> i32 {
    e.raw_os_error()
}

/// `/proc/<tid>/<what>` (`root`, `cwd`), opened `O_PATH`: the caller's own.
pub(super) fn open_proc(tid: i32, what: &str) -> Result<OwnedFd, i32> {
    rustix::fs::open(
        format!("/proc/{tid}/{what}").as_str(),
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(errno)
}

/// Where a descriptor of the keeper's leads, as the kernel names it.
fn link_of(fd: &OwnedFd) -> Result<Vec<u8>, i32> {
    let link = rustix::fs::readlink(format!("/proc/self/fd/{}", fd.as_raw_fd()), Vec::new())
        .map_err(errno)?;
    Ok(link.into_bytes())
}

/// Opens `path` beneath the caller's `root`, as the caller resolves it.
fn open_beneath(root: &OwnedFd, path: &[u8], flags: OFlags) -> Result<OwnedFd, i32> {
    rustix::fs::openat2(
        root,
        std::ffi::OsStr::from_bytes(path),
        flags | OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(errno)
}

/// The file `target` names, opened `O_PATH` (or the caller's own
/// descriptor), resolved as the caller resolves it.
pub(super) fn open_target(
    caller: &Caller<'_>,
    root: &OwnedFd,
    target: &Target,
) -> Result<OwnedFd, i32> {
    let base = || -> Result<OwnedFd, i32> {
        match target.dirfd {
            libc::AT_FDCWD => open_proc(caller.tid, "cwd"),
            fd => (caller.fd)(fd),
        }
    };
    let Some(path) = &target.path else {
        return base();
    };
    let full = if path.first() == Some(&b'/') {
        path.clone()
    } else {
        let base = base()?;
        let st = rustix::fs::fstat(&base).map_err(errno)?;
        if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
            return Err(libc::ENOTDIR);
        }
        let mut full = link_of(&base)?;
        if full.first() != Some(&b'/') {
            return Err(libc::ENOENT);
        }
        full.push(b'/');
        full.extend_from_slice(path);
        full
    };
    let nofollow = if target.follow {
        OFlags::empty()
    } else {
        OFlags::NOFOLLOW
    };
    open_beneath(root, &full, nofollow)
}

fn is_path_only(fd: &OwnedFd) -> bool {
    rustix::fs::fcntl_getfl(fd).is_ok_and(|f| f.contains(OFlags::PATH))
}

fn is_dir(st: &rustix::fs::Stat) -> bool {
    FileType::from_raw_mode(st.st_mode) == FileType::Directory
}

/// Clears this thread's effective capabilities (credentials are a
/// thread's own), so that a keeper started by root acts for the run
/// with only what the account's own files allow, as the run's processes
/// (in a user namespace, with none) would: never `CAP_CHOWN` or
/// `CAP_FOWNER` on another account's file. Fails closed.
pub(super) fn without_capabilities() -> Result<(), i32> {
    let mut sets = rustix::thread::capabilities(None).map_err(|_| libc::EPERM)?;
    if sets.effective.is_empty() {
        return Ok(());
    }
    sets.effective = rustix::thread::CapabilitySet::empty();
    rustix::thread::set_capabilities(None, sets).map_err(|_| libc::EPERM)
}

/// Whether `object` (whose status is `st`) lies in `roots`: it is one, or a
/// directory above it is, walking `..` from it (from the directory it is
/// an entry of, for anything not a directory). A file with no name left
/// (removed, or made `O_TMPFILE`) is: only its holders can reach it, and
/// a name it is given later is Landlock's to allow.
pub(super) fn inside(
    roots: &Roots,
    root: &OwnedFd,
    object: &OwnedFd,
    st: &rustix::fs::Stat,
) -> Result<bool, i32> {
    if roots.holds(st) || (!is_dir(st) && st.st_nlink == 0) {
        return Ok(true);
    }
    let mut dir = if is_dir(st) {
        object
            .try_clone()
            .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?
    } else {
        parent(root, object, st)?
    };
    for _ in 0..MAX_DEPTH {
        let here = rustix::fs::fstat(&dir).map_err(errno)?;
        if roots.holds(&here) {
            return Ok(true);
        }
        let up = rustix::fs::openat(
            &dir,
            "..",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(errno)?;
        let above = rustix::fs::fstat(&up).map_err(errno)?;
        if (above.st_dev, above.st_ino) == (here.st_dev, here.st_ino) {
            return Ok(false);
        }
        dir = up;
    }
    Ok(false)
}

/// The directory `object` (not a directory) is an entry of, as the caller
/// sees it: found by the name the kernel gives the descriptor and confirmed
/// by identity, so a file renamed, removed or reached otherwise is refused.
pub(super) fn parent(
    root: &OwnedFd,
    object: &OwnedFd,
    st: &rustix::fs::Stat,
) -> Result<OwnedFd, i32> {
    let link = link_of(object)?;
    let Some(slash) = link.iter().rposition(|&b| b == b'/') else {
        return Err(libc::EPERM);
    };
    if link.first() != Some(&b'/') {
        return Err(libc::EPERM);
    }
    let (dir, name) = (&link[..slash.max(1)], &link[slash + 1..]);
    let dir = open_beneath(root, dir, OFlags::DIRECTORY).map_err(|_| libc::EPERM)?;
    let entry = rustix::fs::statat(
        &dir,
        std::ffi::OsStr::from_bytes(name),
        AtFlags::SYMLINK_NOFOLLOW,
    )
    .map_err(|_| libc::EPERM)?;
    if (entry.st_dev, entry.st_ino) != (st.st_dev, st.st_ino) {
        return Err(libc::EPERM);
    }
    Ok(dir)
}

/// Makes the change on the opened file.
fn perform(object: &OwnedFd, st: &rustix::fs::Stat, change: &Change) -> Result<(), i32> {
    let link = FileType::from_raw_mode(st.st_mode) == FileType::Symlink;
    let via =
        CString::new(format!("/proc/self/fd/{}", object.as_raw_fd())).map_err(|_| libc::EINVAL)?;
    match change {
        // A link's own mode cannot be changed (fchmodat2's EOPNOTSUPP).
        Change::Mode(_) if link => Err(libc::EOPNOTSUPP),
        Change::Mode(mode) => {
            rustix::fs::chmod(via.as_c_str(), Mode::from_raw_mode(*mode as _)).map_err(errno)
        }
        Change::Owner(uid, gid) => rustix::fs::chownat(
            object,
            "",
            uid.map(rustix::fs::Uid::from_raw),
            gid.map(rustix::fs::Gid::from_raw),
            AtFlags::EMPTY_PATH,
        )
        .map_err(errno),
        Change::Times(times) => {
            // No times is both now (what utimensat's null means, with the
            // same permission check).
            let [atime, mtime] = times.unwrap_or([(0, rustix::fs::UTIME_NOW); 2]);
            let spec = |(sec, nsec): (i64, i64)| rustix::fs::Timespec {
                tv_sec: sec,
                tv_nsec: nsec as _,
            };
            let times = rustix::fs::Timestamps {
                last_access: spec(atime),
                last_modification: spec(mtime),
            };
            rustix::fs::utimensat(object, "", &times, AtFlags::EMPTY_PATH).map_err(errno)
        }
        // Links carry no user attributes, and others need a capability.
        Change::SetXattr { .. } | Change::RemoveXattr(_) if link => Err(libc::EPERM),
        Change::SetXattr { name, value, flags } => {
            let flags = rustix::fs::XattrFlags::from_bits_retain(*flags as _);
            rustix::fs::setxattr(via.as_c_str(), name.as_c_str(), value, flags).map_err(errno)
        }
        Change::RemoveXattr(name) => {
            rustix::fs::removexattr(via.as_c_str(), name.as_c_str()).map_err(errno)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run as root (the tests are), a thread that clears its effective
    /// capabilities can no longer change another account's file; the test
    /// process's other threads keep theirs.
    #[test]
    fn a_thread_without_capabilities_changes_only_its_own_files() {
        if !rustix::process::geteuid().is_root() {
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("theirs");
        std::fs::write(&file, "").expect("write");
        rustix::fs::chown(&file, Some(rustix::fs::Uid::from_raw(65534)), None).expect("chown");
        let path = file.clone();
        let outcome = std::thread::spawn(move || {
            without_capabilities().expect("dropped");
            rustix::fs::chmod(&path, Mode::from_raw_mode(0o777))
        })
        .join()
        .expect("thread");
        assert_eq!(outcome, Err(rustix::io::Errno::PERM));
        rustix::fs::chmod(&file, Mode::from_raw_mode(0o640)).expect("this thread keeps its own");
    }

    #[test]
    fn roots_travel_whole_and_a_short_message_carries_none() {
        let ids = [(1, 2), (3, 4)];
        let mut message = Roots::encode(&ids);
        message.extend(b"{json}");
        let (roots, rest) = Roots::decode(&message);
        assert_eq!(roots, Roots(ids.into_iter().collect()));
        assert_eq!(rest, b"{json}");
        let (roots, rest) = Roots::decode(&message[..10]);
        assert_eq!(roots, Roots::default());
        assert!(rest.is_empty());
        assert_eq!(Roots::decode(&[]).0, Roots::default());
    }

    #[test]
    fn owner_numbers_are_mapped_and_unmapped_ones_refused() {
        let map = "         0       1001          1\n      1000     200000      65536\n";
        assert_eq!(map_id(map, 0), Some(1001));
        assert_eq!(map_id(map, 1000), Some(200_000));
        assert_eq!(map_id(map, 1001), Some(200_001));
        assert_eq!(map_id(map, 1), None);
        assert_eq!(map_id(map, 66536), None);
        assert_eq!(map_id("0 0 4294967295\n", 100), Some(100));
        assert_eq!(map_id("", 0), None);
    }

    #[test]
    fn flags_choose_the_target() {
        let t = at(5, b"a".to_vec(), libc::AT_SYMLINK_NOFOLLOW).expect("target");
        assert!(!t.follow && t.path.is_some());
        let t = at(5, Vec::new(), libc::AT_EMPTY_PATH).expect("target");
        assert_eq!(t.path, None);
        assert_eq!(at(5, Vec::new(), 0), Err(libc::ENOENT));
        assert_eq!(at(5, b"a".to_vec(), 0x8000), Err(libc::EINVAL));
        let t = at(-100, b"/proc/self/fd/7".to_vec(), 0).expect("target");
        assert_eq!((t.dirfd, t.path), (7, None));
        let t = at(-100, b"/dev/fd/3/a/b".to_vec(), 0).expect("target");
        assert_eq!((t.dirfd, t.path), (3, Some(b"a/b".to_vec())));
        let t = at(-100, b"/proc/self/fdx".to_vec(), 0).expect("target");
        assert_eq!(t.dirfd, -100);
        assert_eq!(id(u64::from(u32::MAX)), None);
        assert_eq!(id(u64::MAX), None);
        assert_eq!(id(1000), Some(1000));
    }

    /// The walk up: a file in a root's subdirectory is inside, the root's
    /// parent and a file beside the root are not, a root file is inside by
    /// itself, and a file reached through a link is judged where it is.
    #[test]
    fn inside_is_judged_on_the_opened_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = dir.path();
        std::fs::create_dir_all(base.join("root/sub")).expect("mkdir");
        std::fs::write(base.join("root/sub/f"), "").expect("write");
        std::fs::write(base.join("beside"), "").expect("write");
        std::fs::write(base.join("lone"), "").expect("write");
        std::os::unix::fs::symlink(base.join("beside"), base.join("root/link")).expect("symlink");
        let id = |p: &std::path::Path| {
            let st = rustix::fs::stat(p).expect("stat");
            (st.st_dev, st.st_ino)
        };
        let roots = Roots(
            [id(&base.join("root")), id(&base.join("lone"))]
                .into_iter()
                .collect(),
        );
        let slash =
            rustix::fs::open("/", OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).expect("/");
        let judge = |rel: &str, flags: OFlags| {
            let full = base.join(rel);
            let fd = open_beneath(&slash, full.as_os_str().as_bytes(), flags).expect("open");
            let st = rustix::fs::fstat(&fd).expect("fstat");
            inside(&roots, &slash, &fd, &st).expect("judged")
        };
        assert!(judge("root/sub/f", OFlags::empty()));
        assert!(judge("root/sub", OFlags::empty()));
        assert!(judge("root", OFlags::empty()));
        assert!(judge("lone", OFlags::empty()));
        assert!(!judge("beside", OFlags::empty()));
        assert!(!judge("", OFlags::empty()));
        // Followed, the link is the file beside; not followed, the link itself.
        assert!(!judge("root/link", OFlags::empty()));
        assert!(judge("root/link", OFlags::NOFOLLOW));
    }
}
