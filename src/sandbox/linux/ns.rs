//! The session's mount namespace: where the files that run later outside
//! the floor (`policy::deferred`) are read-only, though they lie beneath
//! directories the floor lets the agent write.
//!
//! Landlock cannot deny beneath an allowed directory; a read-only bind mount
//! can. `nd7 run` builds one user namespace and one mount namespace per
//! session, once, in a short-lived child made the way `posix_spawn` makes
//! one (sharing memory and descriptors, the parent suspended until it ends):
//! the child starts in the new namespaces, maps the account to itself and to
//! nothing else (no one is root there), binds each guarded path onto itself
//! (read-only for [`Guard::Lock`], as it was for [`Guard::Pin`]), opens both
//! namespaces into the shared descriptor table, and ends. `nd7 run` keeps
//! the descriptors for the session's life. The agent and every command the
//! exit starts then join them between fork and exec
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
    "open the new namespaces",
];

/// The session's user and mount namespaces, held open by descriptor.
#[derive(Debug)]
pub struct Namespaces {
    user: OwnedFd,
    mnt: OwnedFd,
    /// The highest capability number this kernel knows, for dropping them.
    last_cap: libc::c_ulong,
}

/// Opens `path` for writing and writes `text` into it, with raw system
/// calls only (the building child must not allocate). Returns false on
/// error, errno set.
fn write_file_raw(path: &std::ffi::CStr, text: &[u8]) -> bool {
    // SAFETY: `path` is a NUL-terminated string that outlives the call.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return false;
    }
    // SAFETY: the pointer and length are `text`'s own.
    let n = unsafe { libc::write(fd, text.as_ptr().cast(), text.len()) };
    // SAFETY: `fd` was opened above and is closed once.
    unsafe { libc::close(fd) };
    n == text.len() as isize
}

/// One guarded path, ready for the building child.
struct Prepared {
    path: CString,
    read_only: bool,
}

/// What the building child is given, and what it leaves behind.
struct Job<'a> {
    guarded: &'a [Prepared],
    uid_map: &'a [u8],
    gid_map: &'a [u8],
    /// The failed step and its errno, or (0, 0).
    failed: (u32, i32),
    /// The namespaces, opened into the parent's descriptor table.
    user: RawFd,
    mnt: RawFd,
}

/// The building child: it starts in the new namespaces (clone's flags),
/// maps the account, mounts each guarded path, opens both namespaces into
/// the descriptor table it shares with the parent, and returns, which ends
/// it. Raw system calls only, on memory the suspended parent prepared.
extern "C" fn build_in_child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Job` the parent passed to clone, alive and not
    // touched by the parent until this child has ended (CLONE_VFORK).
    let job = unsafe { &mut *arg.cast::<Job<'_>>() };
    let errno = || io::Error::last_os_error().raw_os_error().unwrap_or(0);
    let mut fail = |step: u32| {
        job.failed = (step, errno());
        0
    };
    if !write_file_raw(c"/proc/self/setgroups", b"deny") {
        return fail(1);
    }
    if !write_file_raw(c"/proc/self/uid_map", job.uid_map) {
        return fail(2);
    }
    if !write_file_raw(c"/proc/self/gid_map", job.gid_map) {
        return fail(3);
    }
    for g in job.guarded {
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
            return fail(4);
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
                return fail(5);
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
        // SAFETY: `tree` was opened above and is closed once.
        unsafe { libc::close(tree) };
        if r != 0 {
            return fail(6);
        }
    }
    // SAFETY: NUL-terminated paths; the descriptors land in the table this
    // child shares with the parent (CLONE_FILES), close-on-exec.
    job.user = unsafe {
        libc::open(
            c"/proc/self/ns/user".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if job.user < 0 {
        return fail(7);
    }
    // SAFETY: as above.
    job.mnt = unsafe {
        libc::open(
            c"/proc/self/ns/mnt".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if job.mnt < 0 {
        return fail(7);
    }
    0
}

/// The building child's stack. It runs a few system calls and no deeper
/// Rust than [`build_in_child`], far below this.
const CHILD_STACK: usize = 64 * 1024;

impl Namespaces {
    /// Builds the session's namespaces with `guarded` mounted, in order: in
    /// a child made the way `posix_spawn` makes one (CLONE_VM|CLONE_VFORK,
    /// with all signals blocked), so nothing is copied and this thread waits,
    /// suspended, until the child has ended; the child shares the descriptor
    /// table and leaves both namespaces open in it.
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
        let mut job = Job {
            guarded: &prepared,
            uid_map: &uid_map,
            gid_map: &gid_map,
            failed: (0, 0),
            user: -1,
            mnt: -1,
        };
        let mut stack = vec![0u8; CHILD_STACK];
        // The stack grows down from its 16-byte aligned top.
        let top = (stack.as_mut_ptr() as usize + CHILD_STACK) & !15;
        // SAFETY: sigset_t values are plain data, filled by sigfillset and
        // pthread_sigmask before they are read.
        let (mut all, mut old) = unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        // SAFETY: both point at the locals above.
        unsafe {
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        }
        // SAFETY: the child runs `build_in_child` on `stack`, which lives
        // until after clone returns; with CLONE_VFORK this thread is
        // suspended until the child has ended, so the child's use of `job`
        // and of this thread's errno races with nothing, and with every
        // signal blocked no handler runs in it. Other threads share the
        // memory but touch neither `job` nor `stack`.
        let pid = unsafe {
            libc::clone(
                build_in_child,
                top as *mut libc::c_void,
                libc::CLONE_VM
                    | libc::CLONE_VFORK
                    | libc::CLONE_FILES
                    | libc::CLONE_NEWUSER
                    | libc::CLONE_NEWNS
                    | libc::SIGCHLD,
                (&mut job as *mut Job<'_>).cast(),
            )
        };
        let clone_error = (pid < 0).then(io::Error::last_os_error);
        // SAFETY: restores the mask saved above.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
        if let Some(source) = clone_error {
            return Err(NsError::Step {
                step: STEPS[0],
                source,
            });
        }
        let mut status = 0;
        // SAFETY: reaps our own child, writing its status to a local.
        while unsafe { libc::waitpid(pid, &mut status, 0) } < 0
            && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
        {}
        drop(stack);
        // SAFETY: each descriptor the child opened is ours now, owned once.
        let owned = |fd: RawFd| (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) });
        let (user, mnt) = (owned(job.user), owned(job.mnt));
        match (job.failed, user, mnt) {
            ((0, 0), Some(user), Some(mnt)) => Ok(Namespaces {
                user,
                mnt,
                last_cap,
            }),
            ((step, errno), _, _) => Err(NsError::Step {
                step: STEPS.get(step as usize).copied().unwrap_or(STEPS[0]),
                source: io::Error::from_raw_os_error(errno),
            }),
        }
    }
}

impl Namespaces {
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
