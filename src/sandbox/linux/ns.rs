//! The session's mount namespace: where the files that run later outside
//! the floor (`policy::deferred`) are read-only, though they lie beneath
//! directories the floor lets the agent write.
//!
//! Landlock cannot deny beneath an allowed directory; a read-only bind mount
//! can. `nd7 run` builds one user namespace and one mount namespace per
//! session, once, in a short-lived child: the child leaves for a new user
//! namespace in which the account is mapped to itself and to nothing else
//! (no one is root there), binds each guarded path onto itself (read-only
//! for [`Guard::Lock`], as it was for [`Guard::Pin`]), says it is done and
//! waits. `nd7 run` opens both namespaces by descriptor, lets the child go,
//! and keeps the descriptors for the session's life. The agent and every
//! command the exit starts then join them between fork and exec
//! ([`Namespaces::join`]), move to their working directory again (a path
//! looked up inside the namespace, so it crosses the new mounts), and drop
//! every capability the join gave them before Landlock is applied. So
//! everything in the session sees the same mounts, and no process in it can
//! change them: it holds no capability, a mount point cannot be renamed or
//! removed (`EBUSY`), a hard link cannot cross one (`EXDEV`), and Landlock
//! refuses mount, umount and remount to every confined process, in this
//! namespace or any it could make.
//!
//! Where user namespaces are refused (a distribution's sysctl, AppArmor's
//! restriction, a container's seccomp profile), [`Namespaces::build`] says
//! which step failed; `nd7 run` then watches the same files instead.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use crate::policy::deferred::{Guard, Guarded};

// The new mount API's flags (linux/mount.h, stable since Linux 5.2 and
// 5.12), which the libc crate does not carry.
const OPEN_TREE_CLONE: libc::c_uint = 1;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
const MOUNT_ATTR_RDONLY: u64 = 0x1;
/// `struct mount_attr`, version 0.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}
/// `_LINUX_CAPABILITY_VERSION_3`, and its header and data for `capset`.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}
#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Why the session's namespaces could not be built or joined.
#[derive(Debug, thiserror::Error)]
pub enum NsError {
    #[error("{step}: {source}")]
    Step {
        step: &'static str,
        source: io::Error,
    },
    #[error("{0}: a path with a NUL byte cannot be mounted")]
    Path(String),
}

/// The steps of building, in the order the child takes them; the child
/// reports the index of the one that failed.
const STEPS: &[&str] = &[
    "create a user and mount namespace (unprivileged user namespaces may be disabled here)",
    "refuse setgroups in the new user namespace",
    "map the account to itself in the new user namespace",
    "map the account's group to itself in the new user namespace",
    "clone a mount of a guarded path",
    "make a guarded path read-only",
    "mount a guarded path onto itself",
];

/// The session's user and mount namespaces, held open by descriptor.
#[derive(Debug)]
pub struct Namespaces {
    user: OwnedFd,
    mnt: OwnedFd,
    /// The highest capability number this kernel knows, for dropping them.
    last_cap: libc::c_ulong,
}

fn os_err(step: &'static str) -> NsError {
    NsError::Step {
        step,
        source: io::Error::last_os_error(),
    }
}

fn pipe() -> Result<(OwnedFd, OwnedFd), NsError> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` is a valid array of two descriptors for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(os_err("make a pipe"));
    }
    // SAFETY: pipe2 succeeded, so both are open descriptors owned by no one else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Writes all of `bytes` to `fd`, with raw system calls only (the building
/// child must not allocate). Returns false on error.
fn write_all_raw(fd: RawFd, bytes: &[u8]) -> bool {
    let mut done = 0;
    while done < bytes.len() {
        // SAFETY: the pointer and length stay within `bytes`.
        let n = unsafe { libc::write(fd, bytes[done..].as_ptr().cast(), bytes.len() - done) };
        if n < 0 {
            if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return false;
        }
        done += n as usize;
    }
    true
}

/// Opens `path` for writing and writes `text` into it, raw.
fn write_file_raw(path: &std::ffi::CStr, text: &[u8]) -> bool {
    // SAFETY: `path` is a NUL-terminated string that outlives the call.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return false;
    }
    let ok = write_all_raw(fd, text);
    // SAFETY: `fd` was opened above and is closed once.
    unsafe { libc::close(fd) };
    ok
}

/// One guarded path, ready for the building child.
struct Prepared {
    path: CString,
    read_only: bool,
}

/// What the building child does, with raw system calls only. Returns the
/// index of the failed step and its errno, or `None` when every guarded
/// path is mounted.
fn build_in_child(guarded: &[Prepared], uid_map: &[u8], gid_map: &[u8]) -> Option<(u32, i32)> {
    let errno = || io::Error::last_os_error().raw_os_error().unwrap_or(0);
    // SAFETY: unshare takes no pointer.
    if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) } != 0 {
        return Some((0, errno()));
    }
    if !write_file_raw(c"/proc/self/setgroups", b"deny") {
        return Some((1, errno()));
    }
    if !write_file_raw(c"/proc/self/uid_map", uid_map) {
        return Some((2, errno()));
    }
    if !write_file_raw(c"/proc/self/gid_map", gid_map) {
        return Some((3, errno()));
    }
    for g in guarded {
        // SAFETY: `g.path` is a NUL-terminated string that outlives the call.
        let tree = unsafe {
            libc::syscall(
                libc::SYS_open_tree,
                libc::AT_FDCWD,
                g.path.as_ptr(),
                OPEN_TREE_CLONE
                    | libc::O_CLOEXEC as libc::c_uint
                    | AT_RECURSIVE
                    | libc::AT_SYMLINK_NOFOLLOW as libc::c_uint,
            )
        };
        if tree < 0 {
            // Gone since the plan was made: there is nothing to hold, and
            // the watch still sees whatever takes its place.
            if errno() == libc::ENOENT {
                continue;
            }
            return Some((4, errno()));
        }
        let tree = tree as RawFd;
        if g.read_only {
            let attr = MountAttr {
                attr_set: MOUNT_ATTR_RDONLY,
                attr_clr: 0,
                propagation: 0,
                userns_fd: 0,
            };
            // SAFETY: `attr` is a valid mount_attr of the size passed, and
            // the empty path is a NUL-terminated string.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_mount_setattr,
                    tree,
                    c"".as_ptr(),
                    libc::AT_EMPTY_PATH as libc::c_uint | AT_RECURSIVE,
                    &attr as *const MountAttr,
                    std::mem::size_of::<MountAttr>(),
                )
            };
            if r != 0 {
                return Some((5, errno()));
            }
        }
        // SAFETY: both strings are NUL-terminated and outlive the call.
        let r = unsafe {
            libc::syscall(
                libc::SYS_move_mount,
                tree,
                c"".as_ptr(),
                libc::AT_FDCWD,
                g.path.as_ptr(),
                MOVE_MOUNT_F_EMPTY_PATH,
            )
        };
        if r != 0 {
            return Some((6, errno()));
        }
        // SAFETY: `tree` was opened above and is closed once.
        unsafe { libc::close(tree) };
    }
    None
}

impl Namespaces {
    /// Builds the session's namespaces with `guarded` mounted, in order.
    pub fn build(guarded: &[Guarded]) -> Result<Namespaces, NsError> {
        let prepared: Vec<Prepared> = guarded
            .iter()
            .map(|g| {
                CString::new(g.path.as_os_str().as_bytes())
                    .map(|path| Prepared {
                        path,
                        read_only: g.guard == Guard::Lock,
                    })
                    .map_err(|_| NsError::Path(g.path.display().to_string()))
            })
            .collect::<Result<_, _>>()?;
        let uid = rustix::process::getuid().as_raw();
        let gid = rustix::process::getgid().as_raw();
        let uid_map = format!("{uid} {uid} 1\n").into_bytes();
        let gid_map = format!("{gid} {gid} 1\n").into_bytes();
        let last_cap = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(63);
        let (report_r, report_w) = pipe()?;
        let (hold_r, hold_w) = pipe()?;
        // SAFETY: fork in a process that may have other threads. The child
        // runs only `build_in_child` and the raw calls below: system calls on
        // memory prepared before the fork, no allocation, no lock, and it
        // leaves with _exit, never returning into Rust code.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(os_err("start the child that builds the namespaces"));
        }
        if pid == 0 {
            // The child's copies of the parent's ends: with its own copy of
            // the holding pipe's write end open, it would never see EOF.
            // SAFETY: closes descriptors this process copied at fork; the
            // OwnedFds in its copy of memory are never dropped (it _exits).
            unsafe {
                libc::close(hold_w.as_raw_fd());
                libc::close(report_r.as_raw_fd());
            }
            let failed = build_in_child(&prepared, &uid_map, &gid_map);
            let mut report = [0u8; 9];
            if let Some((step, errno)) = failed {
                report[0] = 1;
                report[1..5].copy_from_slice(&step.to_ne_bytes());
                report[5..9].copy_from_slice(&errno.to_ne_bytes());
            }
            write_all_raw(report_w.as_raw_fd(), &report);
            if failed.is_none() {
                // Wait for the parent to have opened the namespaces: it
                // closes its end of the pipe, and read returns 0.
                let mut byte = 0u8;
                loop {
                    // SAFETY: reads one byte into a local.
                    let n =
                        unsafe { libc::read(hold_r.as_raw_fd(), (&mut byte as *mut u8).cast(), 1) };
                    if n >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                        break;
                    }
                }
            }
            // SAFETY: ends the child without running any Rust destructor.
            unsafe { libc::_exit(0) };
        }
        drop(report_w);
        drop(hold_r);
        let mut child = Reaped {
            pid,
            hold: Some(hold_w),
        };
        let mut report = [0u8; 9];
        let mut got = 0;
        while got < report.len() {
            // SAFETY: reads into `report` within its bounds.
            let n = unsafe {
                libc::read(
                    report_r.as_raw_fd(),
                    report[got..].as_mut_ptr().cast(),
                    report.len() - got,
                )
            };
            if n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            if n <= 0 {
                return Err(NsError::Step {
                    step: "hear from the child that builds the namespaces",
                    source: io::Error::new(io::ErrorKind::UnexpectedEof, "it ended without a word"),
                });
            }
            got += n as usize;
        }
        if report[0] != 0 {
            let step = u32::from_ne_bytes([report[1], report[2], report[3], report[4]]);
            let errno = i32::from_ne_bytes([report[5], report[6], report[7], report[8]]);
            return Err(NsError::Step {
                step: STEPS
                    .get(step as usize)
                    .copied()
                    .unwrap_or("build the namespaces"),
                source: io::Error::from_raw_os_error(errno),
            });
        }
        let open = |name: &str| {
            std::fs::File::open(format!("/proc/{pid}/ns/{name}"))
                .map(OwnedFd::from)
                .map_err(|source| NsError::Step {
                    step: "open the new namespaces",
                    source,
                })
        };
        let user = open("user")?;
        let mnt = open("mnt")?;
        child.hold = None;
        drop(child);
        Ok(Namespaces {
            user,
            mnt,
            last_cap,
        })
    }

    /// Arranges for `command`'s process to join the namespaces, move to
    /// `cwd` as seen inside them, and drop every capability, just before it
    /// execs (and before any later `pre_exec`, such as Landlock's). If any
    /// step fails, the exec does not happen.
    pub fn join(&self, command: &mut Command, cwd: &Path) -> Result<(), NsError> {
        let cwd = CString::new(cwd.as_os_str().as_bytes())
            .map_err(|_| NsError::Path(cwd.display().to_string()))?;
        let user = self.user.as_raw_fd();
        let mnt = self.mnt.as_raw_fd();
        let last_cap = self.last_cap;
        // SAFETY: the closure runs in the child between fork and exec, where
        // only async-signal-safe calls are sound. It makes raw system calls
        // on a string and descriptors prepared before the fork, allocating
        // nothing and taking no lock. The descriptors stay open in the parent
        // for as long as `self` lives, which outlasts `spawn`; fork copies
        // them into the child, and they close at exec.
        unsafe {
            command.pre_exec(move || {
                let fail = || Err(io::Error::last_os_error());
                // A fresh child of a single thread, sharing no fs_struct:
                // setns into a user namespace requires both.
                if libc::setns(user, libc::CLONE_NEWUSER) != 0 {
                    return fail();
                }
                if libc::setns(mnt, libc::CLONE_NEWNS) != 0 {
                    return fail();
                }
                // setns moved the root and working directory to the
                // namespace's root; the path is looked up again inside it.
                if libc::chdir(cwd.as_ptr()) != 0 {
                    return fail();
                }
                if libc::prctl(
                    libc::PR_CAP_AMBIENT,
                    libc::PR_CAP_AMBIENT_CLEAR_ALL,
                    0,
                    0,
                    0,
                ) != 0
                {
                    return fail();
                }
                for cap in 0..=last_cap {
                    if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0
                        && io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL)
                    {
                        return fail();
                    }
                }
                let header = CapHeader {
                    version: CAPABILITY_VERSION_3,
                    pid: 0,
                };
                let data = [CapData {
                    effective: 0,
                    permitted: 0,
                    inheritable: 0,
                }; 2];
                if libc::syscall(libc::SYS_capset, &header as *const CapHeader, data.as_ptr()) != 0
                {
                    return fail();
                }
                Ok(())
            });
        }
        Ok(())
    }
}

/// The building child, let go (its end of the pipe closed) and waited for
/// when this goes out of scope.
struct Reaped {
    pid: libc::pid_t,
    hold: Option<OwnedFd>,
}

impl Drop for Reaped {
    fn drop(&mut self) {
        self.hold = None;
        let mut status = 0;
        // SAFETY: waits for our own child, writing its status to a local.
        while unsafe { libc::waitpid(self.pid, &mut status, 0) } < 0
            && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
        {}
    }
}
