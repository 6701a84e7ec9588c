//! Files written whole, and what an I/O failure says. Every file nd7
//! replaces goes through here, so each has the same guarantees and says which
//! it asked for (ADR-0060):
//!
//! - a reader sees the old bytes or the new, never a mix: the new bytes go
//!   into a temporary beside the file, renamed over it when complete;
//! - the temporary is created at the file's final mode (`O_CREAT|O_EXCL`
//!   with the mode, then set exactly, whatever the umask), so the new bytes
//!   are never readable by more than the caller asked for, not even for a
//!   moment, as a chmod after the write would leave them;
//! - no link is followed: whatever already has the temporary's name (a link
//!   planted in a directory the agent can write, a leftover of a crash) is
//!   removed, the temporary is opened with `O_NOFOLLOW`, and the rename
//!   replaces the file's name, never what a link there points at;
//! - [`Durability::Durable`] syncs the file before the rename and its
//!   directory after, so once [`replace`] returns the new bytes survive a
//!   power loss; [`Durability::Atomic`] does neither (caches, `shipped`).
//!
//! [`swap_in`] is the hot path's variant (`head`, ADR-0011): a fixed
//! temporary overwritten in place and exchanged with the file.
//!
//! [`IoContext`] is the one shape of an I/O failure: the path, what nd7 was
//! doing to it, and the system's error. Each module's error keeps its own
//! `Io` variant of these three fields and takes an `IoContext` by `From`.
//!
//! [`on_path`] is where a program's name leads, as `execvp` finds it: the
//! file `nd7 run` starts and the one its version cache names.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// An I/O failure: on which path, doing what, and the system's error.
#[derive(Debug, thiserror::Error)]
#[error("{}: cannot {action}: {source}", path.display())]
pub struct IoContext {
    pub path: PathBuf,
    pub action: &'static str,
    #[source]
    pub source: io::Error,
}

impl IoContext {
    /// `map_err(IoContext::at(path, "read"))`.
    pub fn at<'a>(
        path: &'a Path,
        action: &'static str,
    ) -> impl FnOnce(io::Error) -> IoContext + 'a {
        move |source| IoContext {
            path: path.to_path_buf(),
            action,
            source,
        }
    }
}

/// `From<IoContext>` for a module's error whose `Io` variant holds the
/// same three fields, and the module's `io_err(path, action)` for
/// `map_err`: `crate::files::io_context_into!(ShipError);`.
#[macro_export]
macro_rules! io_context_into {
    ($error:ident) => {
        impl From<$crate::files::IoContext> for $error {
            fn from(c: $crate::files::IoContext) -> $error {
                $error::Io {
                    path: c.path,
                    action: c.action,
                    source: c.source,
                }
            }
        }

        /// `map_err(io_err(path, "read"))`: the failure, with where and doing what.
        #[allow(dead_code)]
        fn io_err<'a>(
            path: &'a ::std::path::Path,
            action: &'static str,
        ) -> impl FnOnce(::std::io::Error) -> $error + 'a {
            move |source| $crate::files::IoContext::at(path, action)(source).into()
        }
    };
}
pub use crate::io_context_into;

/// Whether a replace must survive a power loss once it returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// The old bytes or the new for every reader and after a crash of nd7;
    /// after a power loss the file may hold either, or nothing.
    Atomic,
    /// [`Durability::Atomic`], and the new bytes are on disk (file and
    /// directory synced) when the replace returns: keys, receipts,
    /// settings, binaries.
    Durable,
}

/// Replaces `path` with `bytes`, at exactly `mode` (see the module's list).
/// The directory must exist.
pub fn replace(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    durability: Durability,
) -> Result<(), IoContext> {
    let mut staged = Staged::create(path, mode)?;
    let (first, rest) = bytes.split_at(bytes.len() / 2);
    staged.write(first)?;
    fault("half", path);
    staged.write(rest)?;
    staged.commit(durability)
}

/// A replacement being written: a temporary beside the file, renamed over
/// it by [`Staged::commit`], removed if dropped before.
pub struct Staged {
    file: Option<File>,
    tmp: PathBuf,
    path: PathBuf,
}

impl Staged {
    /// Creates the temporary for `path` at `mode`, never through a link.
    pub fn create(path: &Path, mode: u32) -> Result<Staged, IoContext> {
        let tmp = temporary(path);
        match fs::remove_file(&tmp) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                return Err(IoContext::at(&tmp, "remove")(e));
            }
            _ => {}
        }
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(&tmp)
            .map_err(IoContext::at(&tmp, "create"))?;
        fault("created", path);
        // The umask may have taken bits away: the file gets the mode asked
        // for, no more (it started with no more) and no less.
        file.set_permissions(fs::Permissions::from_mode(mode))
            .map_err(IoContext::at(&tmp, "chmod"))?;
        Ok(Staged {
            file: Some(file),
            tmp,
            path: path.to_path_buf(),
        })
    }

    /// Where the replacement is being written (readable before the commit).
    pub fn temporary(&self) -> &Path {
        &self.tmp
    }

    /// Appends `bytes` to the replacement.
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), IoContext> {
        match &mut self.file {
            Some(file) => file
                .write_all(bytes)
                .map_err(IoContext::at(&self.tmp, "write")),
            None => Ok(()),
        }
    }

    /// Puts the replacement in place, synced first when `durability` says.
    pub fn commit(mut self, durability: Durability) -> Result<(), IoContext> {
        let Some(file) = self.file.take() else {
            return Ok(());
        };
        fault("written", &self.path);
        if durability == Durability::Durable {
            file.sync_all().map_err(IoContext::at(&self.tmp, "sync"))?;
        }
        drop(file);
        fs::rename(&self.tmp, &self.path).map_err(IoContext::at(&self.path, "replace"))?;
        fault("renamed", &self.path);
        if durability == Durability::Durable {
            sync_dir(&self.path)?;
        }
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// The temporary for `path`: hidden, beside it, one per process (two
/// processes replacing one file never write each other's temporary).
fn temporary(path: &Path) -> PathBuf {
    path.with_file_name(format!(
        ".{}.{}.nd7-tmp",
        path.file_name()
            .map_or_else(|| "file".into(), |n| n.to_string_lossy()),
        std::process::id()
    ))
}

/// Syncs the directory holding `path`, so a rename in it is on disk.
fn sync_dir(path: &Path) -> Result<(), IoContext> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(IoContext::at(dir, "sync"))
}

/// Replaces `path` with `text` by exchanging it with `tmp` in one
/// `renameat2(RENAME_EXCHANGE)`, `tmp` having been overwritten in place
/// (0600, never through a link). Swapping frees no inode, which a rename
/// over the file would, at a cost that dominated an append on some
/// filesystems (docs/benchmarks.md). Afterwards `tmp` holds the old text,
/// which nothing reads. Where the filesystem cannot swap, or `path` does not
/// exist yet, a plain rename. [`Durability::Atomic`]: nothing is synced.
pub fn swap_in(path: &Path, tmp: &Path, text: &[u8]) -> Result<(), IoContext> {
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(tmp)
        .map_err(IoContext::at(tmp, "open"))?;
    file.write_all_at(text, 0)
        .map_err(IoContext::at(tmp, "write"))?;
    if file.metadata().map_err(IoContext::at(tmp, "stat"))?.len() > text.len() as u64 {
        file.set_len(text.len() as u64)
            .map_err(IoContext::at(tmp, "truncate"))?;
    }
    drop(file);
    let swapped = rustix::fs::renameat_with(
        rustix::fs::CWD,
        tmp,
        rustix::fs::CWD,
        path,
        rustix::fs::RenameFlags::EXCHANGE,
    );
    match swapped {
        Ok(()) => Ok(()),
        Err(_) => fs::rename(tmp, path).map_err(IoContext::at(path, "replace")),
    }
}

/// Test builds only (debug builds, or the `fault-injection` feature, which
/// shipped builds never enable): `ND7_FAULT=replace-<step>[:<name>]` ends
/// the process at that step (`created`, `half`, `written`, `renamed`) of a
/// replace (of the file called `name`, if given), as a crash would, so tests
/// can see what a crash leaves.
#[cfg(any(debug_assertions, feature = "fault-injection"))]
fn fault(step: &str, path: &Path) {
    let Ok(spec) = std::env::var("ND7_FAULT") else {
        return;
    };
    let Some(spec) = spec.strip_prefix("replace-") else {
        return;
    };
    let (at, name) = spec
        .split_once(':')
        .map_or((spec, None), |(s, n)| (s, Some(n)));
    if at == step && name.is_none_or(|n| path.file_name().is_some_and(|f| f == n)) {
        std::process::abort();
    }
}

#[cfg(not(any(debug_assertions, feature = "fault-injection")))]
fn fault(_step: &str, _path: &Path) {}

/// The file `execvp` runs for `program`: `program` itself when it holds a
/// slash, else the first executable regular file of that name in `path`
/// (the default search path, `/bin:/usr/bin`, when there is none; an empty
/// entry is the working directory).
pub fn on_path(program: &std::ffi::OsStr, path: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    if program.as_bytes().contains(&b'/') {
        return Some(PathBuf::from(program));
    }
    let path = path.unwrap_or(std::ffi::OsStr::new("/bin:/usr/bin"));
    std::env::split_paths(path)
        .map(|dir| match dir.as_os_str().is_empty() {
            true => PathBuf::from(".").join(program),
            false => dir.join(program),
        })
        .find(|candidate| {
            rustix::fs::access(candidate, rustix::fs::Access::EXEC_OK).is_ok()
                && fs::metadata(candidate).is_ok_and(|m| m.is_file())
        })
}

/// The bytes of `file` when it is a regular file of at most `most` bytes;
/// `None` otherwise. Opened without following a link and without waiting
/// for a FIFO's writer, so something else left at a cache's name (a FIFO, a
/// link to `/dev/zero`, a huge file) can neither hold up nor exhaust its
/// reader (ADR-0157): it reads as no cache.
pub fn read_small(file: &Path, most: u64) -> Option<Vec<u8>> {
    use rustix::fs::{Mode, OFlags};
    use std::io::Read;
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let opened = File::from(rustix::fs::open(file, flags, Mode::empty()).ok()?);
    if !opened.metadata().ok()?.is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    opened.take(most + 1).read_to_end(&mut bytes).ok()?;
    (bytes.len() as u64 <= most).then_some(bytes)
}

/// A cache nd7 keeps for itself as JSON in its state directory (the
/// version cache, the recorder's answers): its value, or the default when
/// there is none, it is not a regular file of at most `most` bytes
/// ([`read_small`]) or it does not parse. A cache is only ever a shortcut,
/// so what cannot be read is asked again.
pub fn read_cache<T: serde::de::DeserializeOwned + Default>(file: &Path, most: u64) -> T {
    read_small(file, most)
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

/// Writes `value` as the cache at `file` ([`read_cache`]), its directory
/// made if need be, replaced atomically, private to the user. A cache that
/// cannot be written is asked again next time, so a failure is dropped.
pub fn write_cache<T: serde::Serialize>(file: &Path, value: &T) {
    let Ok(bytes) = serde_json::to_vec(value) else {
        return;
    };
    if let Some(dir) = file.parent() {
        let _ = fs::create_dir_all(dir);
    }
    let _ = replace(file, &bytes, 0o600, Durability::Atomic);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A regular file within the bound is read; a FIFO (no writer: it
    /// would block), a link (to `/dev/zero`: endless), a file past the bound
    /// and a directory read as nothing, at once.
    #[test]
    fn read_small_reads_only_a_small_regular_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("cache");
        fs::write(&file, b"{}").expect("write");
        assert_eq!(read_small(&file, 2).as_deref(), Some(&b"{}"[..]));
        assert_eq!(read_small(&file, 1), None, "past the bound");
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo");
        assert!(made.success());
        assert_eq!(read_small(&fifo, 1024), None);
        let link = dir.path().join("link");
        std::os::unix::fs::symlink("/dev/zero", &link).expect("symlink");
        assert_eq!(read_small(&link, 1024), None);
        assert_eq!(read_small(dir.path(), 1024), None);
        assert_eq!(read_small(&dir.path().join("absent"), 1024), None);
    }

    fn mode_of(path: &Path) -> u32 {
        fs::symlink_metadata(path)
            .expect("stat")
            .permissions()
            .mode()
            & 0o7777
    }

    #[test]
    fn a_replace_puts_the_new_bytes_at_the_mode_asked_for() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        fs::write(&path, "old").expect("write");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).expect("chmod");
        for (mode, durability) in [(0o600, Durability::Durable), (0o640, Durability::Atomic)] {
            replace(&path, b"new bytes", mode, durability).expect("replace");
            assert_eq!(fs::read(&path).expect("read"), b"new bytes");
            assert_eq!(mode_of(&path), mode);
        }
        let names: Vec<_> = fs::read_dir(dir.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["f"], "no temporary is left behind");
    }

    /// A link planted at the temporary name (the directory is writable
    /// inside the floor) is replaced, never written through: the file it
    /// points at keeps its bytes and its mode. Guards the remove and
    /// `O_NOFOLLOW` in `Staged::create`.
    #[test]
    fn a_planted_link_at_the_temporary_name_is_not_written_through() {
        let dir = tempfile::tempdir().expect("tempdir");
        let victim = dir.path().join("bashrc");
        fs::write(&victim, "mine\n").expect("write");
        fs::set_permissions(&victim, fs::Permissions::from_mode(0o644)).expect("chmod");
        let settings = dir.path().join("claude/settings.json");
        fs::create_dir_all(settings.parent().expect("parent")).expect("mkdir");
        std::os::unix::fs::symlink(&victim, temporary(&settings)).expect("link");
        replace(&settings, b"{}\n", 0o600, Durability::Durable).expect("written");
        assert_eq!(fs::read_to_string(&victim).expect("victim"), "mine\n");
        assert_eq!(mode_of(&victim), 0o644);
        assert_eq!(fs::read_to_string(&settings).expect("settings"), "{}\n");
        assert_eq!(mode_of(&settings), 0o600);
    }

    /// A link at the file's own name is replaced by the file, not followed.
    #[test]
    fn a_link_at_the_name_is_replaced_not_followed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let victim = dir.path().join("victim");
        fs::write(&victim, "mine\n").expect("write");
        let path = dir.path().join("receipt");
        std::os::unix::fs::symlink(&victim, &path).expect("link");
        replace(&path, b"receipt\n", 0o600, Durability::Atomic).expect("replace");
        assert_eq!(fs::read_to_string(&victim).expect("victim"), "mine\n");
        assert!(fs::symlink_metadata(&path).expect("stat").is_file());
    }

    #[test]
    fn a_staged_replacement_dropped_before_commit_leaves_the_old_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("events.ndjson");
        fs::write(&path, "old\n").expect("write");
        let mut staged = Staged::create(&path, 0o600).expect("stage");
        staged.write(b"half a ").expect("write");
        drop(staged);
        assert_eq!(fs::read_to_string(&path).expect("read"), "old\n");
        assert_eq!(fs::read_dir(dir.path()).expect("list").count(), 1);
    }

    #[test]
    fn a_swap_leaves_the_old_text_in_the_temporary() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (path, tmp) = (dir.path().join("head"), dir.path().join("head.tmp"));
        swap_in(&path, &tmp, b"1 first text\n").expect("first");
        swap_in(&path, &tmp, b"2 second\n").expect("second");
        assert_eq!(fs::read(&path).expect("head"), b"2 second\n");
        assert_eq!(mode_of(&path), 0o600);
        // Where the filesystem swaps, the temporary holds the old text.
        let old = fs::read(&tmp).unwrap_or_default();
        assert!(old.is_empty() || old == b"1 first text\n", "{old:?}");
    }
}
