//! Git's edits of a held `.git/config` that run nothing, made by the
//! keeper (ADR-0134): the keeper's half of the filter's rename part
//! ([`super::seccomp::rename_calls`]).
//!
//! A git directory's `config` is bound read-only onto itself in the run's
//! mount namespace ([`super::ns`]), as a key in it can make the user's next
//! plain `git` run a program. Git changes it by writing the whole new file
//! to `config.lock` and renaming that onto `config`, which the mount
//! refuses (`EBUSY`). So every rename call (the three of them) stops
//! in the kernel and waits for the keeper ([`rename`]), which:
//!
//! 1. lets the call go on unchanged (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`)
//!    unless its target, resolved as the caller resolves it, is one of the
//!    held configurations, by (device, inode). Letting it go on decides
//!    nothing: if the caller swaps a name after the check, the rename that
//!    lands on a held file is the mount's to refuse, as before;
//! 2. for a rename onto a held configuration, acts itself or refuses with
//!    `EBUSY`, never lets it go on. It acts only when the source is
//!    `config.lock` in the same directory (the same directory by identity),
//!    a regular file with one name lying in the caller's write roots
//!    ([`super::attrs::inside`]), and when [`git_config::judge`] finds that
//!    every key the new file changes runs nothing;
//! 3. then writes the bytes it read and judged (read once: the lock file
//!    rewritten after the check changes nothing) into the held file's own
//!    inode, opened outside the namespace by the path it was held at and
//!    checked by identity (a rename outside would not be seen inside,
//!    where the mount shows the inode; its first byte a NUL until the rest
//!    is written, so a reader meanwhile sees a file git refuses whole,
//!    never a cut one: [`write_in_place`]), removes the lock file,
//!    and answers 0, as the rename would have.
//!
//! The held configurations come from `nd7 run` itself (`backend::hold`), once
//! the mounts are made; a message of that kind from any other process is
//! ignored by the keeper.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rustix::fs::{AtFlags, FallocateFlags, FileType, Mode, OFlags};

use super::attrs::{self, Caller, Roots, Target};
use super::seccomp::RenameCall;
use crate::policy::deferred::MAX_CONFIG;
use crate::policy::git_config;

/// The name git's lock file has beside a configuration.
const LOCK: &str = "config.lock";

/// What to answer a rename.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Its target is no held configuration: the kernel decides.
    Continue,
    /// The call's result: 0, or an errno (`ESRCH`: the caller is gone).
    Result(Result<i64, i32>),
}

/// The run's held git configurations, by (device, inode), with the path
/// they were held at; one edit at a time.
#[derive(Default)]
pub struct HeldConfigs {
    held: Mutex<HashMap<(u64, u64), PathBuf>>,
    /// Taken while a configuration is read, judged and written, so that two
    /// edits never judge the same old text.
    editing: Mutex<()>,
    /// Where each refused edit's key is noted for the model
    /// (`refusals::HELD_KEYS` in the run directory).
    notes: Mutex<Option<PathBuf>>,
}

impl HeldConfigs {
    /// Remembers the configuration `fd` (opened by `nd7 run`) held at `path`.
    pub fn hold(&self, fd: BorrowedFd<'_>, path: &[u8]) {
        let Ok(st) = rustix::fs::fstat(fd) else {
            return;
        };
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return;
        }
        let path = PathBuf::from(std::ffi::OsStr::from_bytes(path));
        if let (true, Ok(mut held)) = (path.is_absolute(), self.held.lock()) {
            held.insert((st.st_dev, st.st_ino), path);
        }
    }

    /// Notes refused keys in `file` from now on.
    pub fn note_in(&self, file: PathBuf) {
        if let Ok(mut notes) = self.notes.lock() {
            *notes = Some(file);
        }
    }

    /// Notes that the edit of `path` was refused for `key`.
    fn note(&self, path: &Path, key: &str) {
        if let Some(file) = self.notes.lock().ok().and_then(|n| n.clone()) {
            crate::refusals::note_held_key(&file, path, key);
        }
    }

    /// Whether any configuration is held: if none, every rename goes on.
    pub fn any(&self) -> bool {
        self.held.lock().is_ok_and(|h| !h.is_empty())
    }

    fn path_of(&self, st: &rustix::fs::Stat) -> Option<PathBuf> {
        self.held.lock().ok()?.get(&(st.st_dev, st.st_ino)).cloned()
    }
}

/// Answers a rename `call` with arguments `args` from `caller`, whose write
/// roots are `roots`.
pub fn rename(
    caller: &Caller<'_>,
    call: RenameCall,
    args: [u64; 6],
    held: &HeldConfigs,
    roots: &Roots,
) -> Outcome {
    let (old_dir, old, new_dir, new, flags) = match call {
        RenameCall::Rename => (libc::AT_FDCWD, args[0], libc::AT_FDCWD, args[1], 0),
        RenameCall::Renameat => (args[0] as i32, args[1], args[2] as i32, args[3], 0),
        RenameCall::Renameat2 => (args[0] as i32, args[1], args[2] as i32, args[3], args[4]),
    };
    let Ok(new) = attrs::read_cstr(caller.tid, new, attrs::PATH_MAX) else {
        return Outcome::Continue;
    };
    if last(&new) != b"config" {
        return Outcome::Continue;
    }
    let Ok(root) = attrs::open_proc(caller.tid, "root") else {
        return Outcome::Continue;
    };
    let Ok(target) = attrs::open_target(caller, &root, &named(new_dir, new)) else {
        return Outcome::Continue;
    };
    let Ok(st) = rustix::fs::fstat(&target) else {
        return Outcome::Continue;
    };
    let Some(outside) = held.path_of(&st) else {
        return Outcome::Continue;
    };
    let source = Source {
        caller,
        root: &root,
        dir: old_dir,
        path: old,
    };
    let result = if flags != 0 {
        Err(libc::EBUSY)
    } else {
        edit(&source, (&target, &st), &outside, held, roots)
    };
    Outcome::Result(result)
}

/// The rename's source, as the caller named it.
struct Source<'a> {
    caller: &'a Caller<'a>,
    root: &'a OwnedFd,
    dir: i32,
    path: u64,
}

fn named(dirfd: i32, path: Vec<u8>) -> Target {
    Target {
        dirfd,
        path: Some(path),
        follow: false,
        opened_only: false,
    }
}

/// A path's last component, trailing slashes left out.
fn last(path: &[u8]) -> &[u8] {
    let end = path.iter().rposition(|&b| b != b'/').map_or(0, |i| i + 1);
    let path = &path[..end];
    path.rsplit(|&b| b == b'/').next().unwrap_or(path)
}

/// Makes the edit the lock file holds, if it runs nothing: `EBUSY` for
/// everything refused, as the mount answers.
fn edit(
    source: &Source<'_>,
    (target, target_st): (&OwnedFd, &rustix::fs::Stat),
    outside: &Path,
    held: &HeldConfigs,
    roots: &Roots,
) -> Result<i64, i32> {
    let busy = |_: i32| libc::EBUSY;
    attrs::without_capabilities().map_err(busy)?;
    let caller = source.caller;
    let old = attrs::read_cstr(caller.tid, source.path, attrs::PATH_MAX)?;
    if last(&old) != LOCK.as_bytes() {
        return Err(libc::EBUSY);
    }
    let lock = attrs::open_target(caller, source.root, &named(source.dir, old)).map_err(busy)?;
    let lock_st = rustix::fs::fstat(&lock).map_err(|_| libc::EBUSY)?;
    if FileType::from_raw_mode(lock_st.st_mode) != FileType::RegularFile || lock_st.st_nlink != 1 {
        return Err(libc::EBUSY);
    }
    let dir = attrs::parent(source.root, &lock, &lock_st).map_err(busy)?;
    let target_dir = attrs::parent(source.root, target, target_st).map_err(busy)?;
    if id(&dir)? != id(&target_dir)? || !attrs::inside(roots, source.root, &lock, &lock_st)? {
        return Err(libc::EBUSY);
    }
    let new = read_lock(&dir, &lock_st)?;
    let _one = held.editing.lock().map_err(|_| libc::EBUSY)?;
    let mut file = open_held(outside, target_st)?;
    let current = read_text(&mut file)?;
    if let Err(git_config::Refused(key)) = git_config::judge(&current, &new) {
        held.note(outside, &key);
        return Err(libc::EBUSY);
    }
    if !(caller.valid)() {
        return Err(libc::ESRCH);
    }
    write_in_place(&mut file, new.as_bytes())?;
    remove_lock(&dir, &lock_st);
    Ok(0)
}

fn id(fd: &OwnedFd) -> Result<(u64, u64), i32> {
    let st = rustix::fs::fstat(fd).map_err(|_| libc::EBUSY)?;
    Ok((st.st_dev, st.st_ino))
}

/// The lock file's text, read once through its directory and confirmed to
/// be the file judged by identity.
fn read_lock(dir: &OwnedFd, st: &rustix::fs::Stat) -> Result<String, i32> {
    let fd = rustix::fs::openat(
        dir,
        LOCK,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|_| libc::EBUSY)?;
    let now = rustix::fs::fstat(&fd).map_err(|_| libc::EBUSY)?;
    if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) {
        return Err(libc::EBUSY);
    }
    read_text(&mut std::fs::File::from(fd))
}

/// A configuration's text: at most [`MAX_CONFIG`] bytes, UTF-8.
fn read_text(file: &mut std::fs::File) -> Result<String, i32> {
    let mut bytes = Vec::new();
    Read::by_ref(file)
        .take(MAX_CONFIG + 1)
        .read_to_end(&mut bytes)
        .map_err(|_| libc::EBUSY)?;
    if bytes.len() as u64 > MAX_CONFIG {
        return Err(libc::EBUSY);
    }
    String::from_utf8(bytes).map_err(|_| libc::EBUSY)
}

/// The held file itself, opened for writing outside the run's namespace
/// (where it is not bound read-only) by the path it was held at, and
/// confirmed to be the file the caller named by identity.
fn open_held(outside: &Path, st: &rustix::fs::Stat) -> Result<std::fs::File, i32> {
    let fd = rustix::fs::open(
        outside,
        OFlags::RDWR | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|_| libc::EBUSY)?;
    let now = rustix::fs::fstat(&fd).map_err(|_| libc::EBUSY)?;
    if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) {
        return Err(libc::EBUSY);
    }
    Ok(std::fs::File::from(fd))
}

/// Writes `bytes` over the file's text so that a reader meanwhile sees the
/// old text, the new one, or a file that begins with a NUL, which git
/// refuses whole ("bad config line 1") and so runs nothing; never a cut
/// one. A cut falls where a page ends, which the agent can place by laying
/// out the file, so that the last line ends a listed value where it chose
/// (`pushRemote = evil.gitx`, a remote with a URL, cut to `evil.git`, a
/// local path); and a file emptied first and then filled on a full disk
/// stays cut (ADR-0138). So: the room is taken first (a full disk refuses
/// the edit before the old text is touched), the first byte is made a NUL,
/// the rest written after it, the old text's end cut off, and the first
/// byte written last. Nor is the new text's start ever joined to the old
/// one's end before a reader (`[core]` then the rest of an old
/// `description = … fsmonitor = x`): the NUL comes first.
fn write_in_place(file: &mut std::fs::File, bytes: &[u8]) -> Result<(), i32> {
    let io = |e: std::io::Error| e.raw_os_error().unwrap_or(libc::EIO);
    let len = bytes.len() as u64;
    // A file system that cannot take room ahead (`EOPNOTSUPP`) is written
    // as it is; one that has no room refuses the edit.
    let room = rustix::fs::fallocate(&*file, FallocateFlags::KEEP_SIZE, 0, len.max(1));
    if let Err(e @ (rustix::io::Errno::NOSPC | rustix::io::Errno::DQUOT)) = room {
        return Err(e.raw_os_error());
    }
    let (first, rest) = bytes.split_at(bytes.len().min(1));
    file.write_all_at(b"\0", 0).map_err(io)?;
    file.write_all_at(rest, 1).map_err(io)?;
    file.set_len(len).map_err(io)?;
    file.write_all_at(first, 0).map_err(io)?;
    file.flush().map_err(io)
}

/// Removes the lock file, if its name still leads to the file judged.
fn remove_lock(dir: &OwnedFd, st: &rustix::fs::Stat) {
    let now = rustix::fs::statat(dir, LOCK, AtFlags::SYMLINK_NOFOLLOW);
    if now.is_ok_and(|now| (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)) {
        let _ = rustix::fs::unlinkat(dir, LOCK, AtFlags::empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_component_is_the_name_renamed() {
        assert_eq!(last(b".git/config"), b"config");
        assert_eq!(last(b"config"), b"config");
        assert_eq!(last(b"/a/config//"), b"config");
        assert_eq!(last(b"/a/config.lock"), b"config.lock");
        assert_eq!(last(b"/"), b"");
        assert_eq!(last(b""), b"");
    }
}
