//! The run's mount namespace: where the files that run later outside
//! the floor (`policy::deferred`) are read-only, though they lie beneath
//! directories the floor lets the agent write.
//!
//! Landlock cannot deny beneath an allowed directory; a read-only bind mount
//! can. `nd7 run` (the keeper's child) moves itself
//! into a user namespace and a mount namespace of its own ([`enter`]),
//! while it still has one thread (`unshare` refuses a threaded process):
//! it maps the account to itself and to nothing else (no one is root
//! there), and keeps of the capabilities the new namespace gives it only
//! the one that mounts. Once the plan is known it binds each guarded path
//! onto itself ([`Namespaces::hold`]: read-only for [`Guard::Hold`], as it
//! was for [`Guard::Fix`]) and drops every capability for good
//! ([`Namespaces::drop_capabilities`]), before it starts anything. The
//! agent and every command the exit starts are then born inside the
//! namespaces, with nothing to join and no capability to inherit; each
//! moves to its working directory again by path just before exec (so it
//! stands on the new mounts) and clears its capability sets once more
//! ([`Namespaces::prepare`]). So everything in the run sees the same
//! mounts, and no process in it can change them: it holds no capability, a
//! mount point cannot be renamed or removed (`EBUSY`), a hard link cannot
//! cross one (`EXDEV`), and Landlock refuses mount, umount and remount to
//! every confined process, in this namespace or any it could make.
//!
//! The keeper, forked before, stays outside: it sees the files as they are
//! and, as the namespace's owner, may still act for every process in it.
//!
//! Where user namespaces are refused (a distribution's sysctl, AppArmor's
//! restriction, a container's seccomp profile), [`enter`] says which step
//! failed; `nd7 run` then watches the same files instead.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::policy::deferred::{Guard, Guarded};

// The new mount API's flags (linux/mount.h, stable since Linux 5.2 and
// 5.12), which the libc crate does not carry.
const AT_RECURSIVE: libc::c_uint = 0x8000;
const MOUNT_ATTR_RDONLY: u64 = 0x1;
/// `struct mount_attr`, version 0.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}
/// `CAP_SYS_ADMIN`, the capability the bind mounts need, and
/// `CAP_SETPCAP`, the one that empties the bounding set afterwards.
const CAP_SYS_ADMIN: u32 = 21;
const CAP_SETPCAP: u32 = 8;
/// `CAP_NET_ADMIN`, which brings up the network namespace's loopback.
const CAP_NET_ADMIN: u32 = 12;

/// Why the run's namespaces could not be entered, held or left behind.
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

/// The steps, each named for the error it gives; the trial child reports
/// the index of the one that failed.
const STEPS: &[&str] = &[
    "create a user and mount namespace (unprivileged user namespaces may be disabled here)",
    "refuse setgroups in the new user namespace",
    "map the account to itself in the new user namespace",
    "map the account's group to itself in the new user namespace",
    "clone a mount of a guarded path",
    "make a guarded path read-only",
    "mount a guarded path onto itself",
    "keep only the capabilities to mount and to drop capabilities in the new user namespace",
    "drop the capabilities of the new user namespace",
];
const UNSHARE: usize = 0;
const CLONE_MOUNT: usize = 4;
const READ_ONLY: usize = 5;
const MOVE_MOUNT: usize = 6;
const KEEP_MOUNT: usize = 7;
const DROP: usize = 8;

impl NsError {
    /// Whether [`enter`] failed after the process had left its namespaces:
    /// it then sits in a user namespace it could not finish setting up
    /// (unmapped, or with every capability), and must start nothing.
    pub fn half_entered(&self) -> bool {
        matches!(self, NsError::Step { step, .. } if STEPS[1..=3].contains(step) || *step == STEPS[KEEP_MOUNT])
    }
}

fn step(index: usize, source: io::Error) -> NsError {
    NsError::Step {
        step: STEPS[index],
        source,
    }
}

/// The run's user and mount namespaces, which the calling process
/// entered ([`enter`]): what it needs to bind paths in them and to start
/// processes inside them as the account alone.
#[derive(Debug)]
pub struct Namespaces {
    /// The highest capability number this kernel knows, for dropping them.
    last_cap: libc::c_ulong,
    /// The run's network namespace (`netns`), or why it could not be made.
    pub net: Result<super::netns::Net, String>,
}

/// Opens `path` for writing and writes `text` into it, with raw system
/// calls only (the trial child must not allocate: rustix takes the `CStr`
/// as it is).
fn write_file_raw(path: &CStr, text: &[u8]) -> io::Result<()> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(path, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())?;
    match rustix::io::write(&fd, text)? {
        n if n == text.len() => Ok(()),
        _ => Err(io::Error::from(rustix::io::Errno::IO)),
    }
}

/// The one-line uid and gid maps that map the account to itself.
struct Maps {
    uid: Vec<u8>,
    gid: Vec<u8>,
}

impl Maps {
    fn of_account() -> Maps {
        let uid = rustix::process::getuid().as_raw();
        let gid = rustix::process::getgid().as_raw();
        Maps {
            uid: format!("{uid} {uid} 1\n").into_bytes(),
            gid: format!("{gid} {gid} 1\n").into_bytes(),
        }
    }

    /// Writes the maps of the calling process, just made in a new user
    /// namespace, with raw system calls only. Returns the failed step and
    /// why.
    fn write(&self) -> Result<(), (usize, io::Error)> {
        write_file_raw(c"/proc/self/setgroups", b"deny").map_err(|e| (1, e))?;
        write_file_raw(c"/proc/self/uid_map", &self.uid).map_err(|e| (2, e))?;
        write_file_raw(c"/proc/self/gid_map", &self.gid).map_err(|e| (3, e))
    }
}

/// Sets the calling thread's effective and permitted capabilities to
/// `keep` (a mask of the first 32) and its inheritable ones to none.
fn set_capabilities(keep: u32) -> io::Result<()> {
    use rustix::thread::{CapabilitySet, CapabilitySets};
    let keep = CapabilitySet::from_bits_retain(u64::from(keep));
    rustix::thread::set_capabilities(
        None,
        CapabilitySets {
            effective: keep,
            permitted: keep,
            inheritable: CapabilitySet::empty(),
        },
    )?;
    Ok(())
}

/// Clears the calling thread's ambient and bounding sets and then its
/// other capabilities, with raw system calls only (it also runs between
/// fork and exec).
fn drop_all(last_cap: libc::c_ulong) -> io::Result<()> {
    rustix::thread::clear_ambient_capability_set()?;
    // A capability set holds 64 (capset's version 3); kernels have ~41.
    for cap in 0..=last_cap.min(63) {
        let one = rustix::thread::CapabilitySet::from_bits_retain(1 << cap);
        // EINVAL names a capability this kernel does not have.
        match rustix::thread::remove_capability_from_bounding_set(one) {
            Ok(()) | Err(rustix::io::Errno::INVAL) => {}
            Err(e) => return Err(e.into()),
        }
    }
    set_capabilities(0)
}

static OUTSIDE_ROOT: std::sync::OnceLock<OwnedFd> = std::sync::OnceLock::new();

/// The root directory as the account sees it outside the run's
/// namespaces, opened (`O_PATH`, close-on-exec) just before `nd7 run` left
/// them: a path looked up from it walks the mounts outside, where nothing
/// is held, so `nd7 run` can still tell what the account may write there (why
/// a write was refused, `refusals`). `None` outside an `nd7 run` that entered
/// its namespaces. Nothing the run starts keeps it: every descriptor
/// but the standard three is closed at exec.
pub fn outside_root() -> Option<std::os::fd::BorrowedFd<'static>> {
    use std::os::fd::AsFd;
    OUTSIDE_ROOT.get().map(|fd| fd.as_fd())
}

/// Moves the calling process into a new user namespace and a new mount
/// namespace, maps the account to itself there, and keeps, of the
/// capabilities the new user namespace gives, only the one to mount and
/// the one to empty the bounding set (so
/// that until [`Namespaces::drop_capabilities`] the process reads and
/// writes files as it did before). The mounts are the same as outside
/// until [`Namespaces::hold`] adds its binds; the working directory and
/// root move to the new namespace's copies.
///
/// Must be called while the process has one thread: the kernel refuses to
/// move a threaded process to another user namespace.
pub fn enter() -> Result<Namespaces, NsError> {
    let maps = Maps::of_account();
    // The root as it is outside, opened before leaving and kept once left
    // (`outside_root`).
    let outside = rustix::fs::open(
        "/",
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    );
    let last_cap = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(63);
    // SAFETY: unshare with flags only; it changes this process's own
    // namespaces and credentials, which no other thread shares (the
    // caller's promise, which the kernel checks: EINVAL otherwise).
    if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) } != 0 {
        return Err(step(UNSHARE, io::Error::last_os_error()));
    }
    maps.write().map_err(|(i, e)| step(i, e))?;
    set_capabilities(1 << CAP_SYS_ADMIN | 1 << CAP_SETPCAP | 1 << CAP_NET_ADMIN)
        .map_err(|e| step(KEEP_MOUNT, e))?;
    if let Ok(root) = outside {
        let _ = OUTSIDE_ROOT.set(root);
    }
    // Last: it starts the outside thread, and the steps above need one.
    let net = if crate::fault::injected("no-netns") {
        Err("network namespaces refused (fault injected)".to_string())
    } else {
        super::netns::enter(drop_thread_capabilities)
    };
    Ok(Namespaces { last_cap, net })
}

/// Drops every capability of the calling thread (its other threads keep
/// theirs).
pub fn drop_thread_capabilities() -> io::Result<()> {
    let last_cap = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(63);
    drop_all(last_cap)
}

impl Namespaces {
    /// Binds each of `guarded` onto itself in the run's mount
    /// namespace, in order (shallow first), read-only for the held ones.
    /// A path gone since the plan was made is skipped: there is nothing to
    /// hold, and the watch still sees whatever takes its place. Nothing is
    /// followed through a link: a link in a guarded path fails its clone.
    pub fn hold(&self, guarded: &[Guarded]) -> Result<(), NsError> {
        for g in guarded {
            let path = CString::new(g.path.as_os_str().as_bytes())
                .map_err(|_| NsError::Path(g.path.display().to_string()))?;
            bind(&path, g.guard == Guard::Hold)?;
        }
        Ok(())
    }

    /// Drops every capability of the calling thread for good (ambient,
    /// bounding, effective, permitted, inheritable): called once the binds
    /// are made and before anything is started, so every process and
    /// thread it starts from then on has none. Threads started before keep
    /// what they had; none of them starts a process.
    pub fn drop_capabilities(&self) -> Result<(), NsError> {
        drop_all(self.last_cap).map_err(|e| step(DROP, e))
    }

    /// Arranges for `command`'s process, born inside the namespaces, to move
    /// to `cwd` again by path (`nd7 run`'s own working directory was
    /// taken before the binds, and may lie under one) and to hold no
    /// capability, just before it execs (and before any later `pre_exec`,
    /// such as Landlock's). A process started from a thread that still
    /// held the bounding set drops it too. If any step fails, the exec does
    /// not happen.
    pub fn prepare(
        &self,
        command: &mut impl super::launch::PreExec,
        cwd: &Path,
    ) -> Result<(), NsError> {
        self.prepare_in(command, Some(cwd))
    }

    /// [`Namespaces::prepare`], leaving the working directory alone when
    /// `cwd` is `None` (the caller moved the child there by descriptor).
    pub fn prepare_in(
        &self,
        command: &mut impl super::launch::PreExec,
        cwd: Option<&Path>,
    ) -> Result<(), NsError> {
        let cwd = cwd
            .map(|cwd| {
                CString::new(cwd.as_os_str().as_bytes())
                    .map_err(|_| NsError::Path(cwd.display().to_string()))
            })
            .transpose()?;
        let last_cap = self.last_cap;
        // SAFETY: the closure runs in the child before exec, where only
        // async-signal-safe calls are sound. It makes raw system calls on a
        // string prepared before the child was made, allocating nothing and
        // taking no lock.
        unsafe {
            command.add_step(Box::new(move || {
                if let Some(cwd) = &cwd {
                    rustix::process::chdir(cwd.as_c_str())?;
                }
                // `nd7 run`'s threads that start processes hold no
                // bounding set; one that did is caught by its mounting
                // capability, the last `nd7 run` gives up.
                let admin = rustix::thread::CapabilitySet::from_bits_retain(1 << CAP_SYS_ADMIN);
                if rustix::thread::capability_is_in_bounding_set(admin) != Ok(false) {
                    return drop_all(last_cap);
                }
                rustix::thread::clear_ambient_capability_set()?;
                set_capabilities(0)
            }));
        }
        Ok(())
    }
}

/// Binds `path` onto itself in the calling process's mount namespace,
/// read-only when asked.
fn bind(path: &CStr, read_only: bool) -> Result<(), NsError> {
    use rustix::mount::{MoveMountFlags, OpenTreeFlags};
    let tree = match rustix::mount::open_tree(
        rustix::fs::CWD,
        path,
        OpenTreeFlags::OPEN_TREE_CLONE
            | OpenTreeFlags::OPEN_TREE_CLOEXEC
            | OpenTreeFlags::AT_RECURSIVE
            | OpenTreeFlags::AT_SYMLINK_NOFOLLOW,
    ) {
        Ok(tree) => tree,
        Err(rustix::io::Errno::NOENT) => return Ok(()),
        Err(e) => return Err(step(CLONE_MOUNT, e.into())),
    };
    if read_only {
        let attr = MountAttr {
            attr_set: MOUNT_ATTR_RDONLY,
            attr_clr: 0,
            propagation: 0,
            userns_fd: 0,
        };
        // SAFETY: `attr` is a valid mount_attr of the size passed, and the
        // empty path is a NUL-terminated string.
        let r = unsafe {
            libc::syscall(
                libc::SYS_mount_setattr,
                tree.as_raw_fd(),
                c"".as_ptr(),
                libc::AT_EMPTY_PATH as libc::c_uint | AT_RECURSIVE,
                &attr as *const MountAttr,
                std::mem::size_of::<MountAttr>(),
            )
        };
        if r != 0 {
            return Err(step(READ_ONLY, io::Error::last_os_error()));
        }
    }
    rustix::mount::move_mount(
        &tree,
        c"",
        rustix::fs::CWD,
        path,
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
    )
    .map_err(|e| step(MOVE_MOUNT, e.into()))
}

/// What the trial child is given, and what it leaves behind.
struct Trial<'a> {
    maps: &'a Maps,
    /// The failed step and its errno, or (0, 0).
    failed: (usize, i32),
}

/// The trial child: it starts in new namespaces (clone's flags), maps the
/// account, and returns, which ends it. Raw system calls only, on memory
/// the suspended parent prepared.
extern "C" fn trial_in_child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Trial` the parent passed to clone, alive and not
    // touched by the parent until this child has ended (CLONE_VFORK).
    let trial = unsafe { &mut *arg.cast::<Trial<'_>>() };
    if let Err((i, e)) = trial.maps.write() {
        trial.failed = (i, e.raw_os_error().unwrap_or(0));
    }
    0
}

/// Whether this process could enter namespaces as [`enter`] does, for
/// `nd7 doctor`, without entering them: a short-lived child made the way
/// `posix_spawn` makes one (CLONE_VM|CLONE_VFORK, all signals blocked)
/// starts in new ones, maps the account, and ends.
pub fn trial() -> Result<(), NsError> {
    let maps = Maps::of_account();
    let mut trial = Trial {
        maps: &maps,
        failed: (0, 0),
    };
    // SAFETY: `trial_in_child` makes raw system calls on `trial`, which
    // lives on this frame until `vfork` returns, writes only into it, and
    // returns (no signal is unblocked in it, so no handler can run).
    let pid = unsafe {
        super::launch::vfork(
            trial_in_child,
            (&mut trial as *mut Trial<'_>).cast(),
            libc::CLONE_NEWUSER | libc::CLONE_NEWNS,
        )
    }
    .map_err(|e| step(UNSHARE, e))?;
    // Reaps our own child.
    if let Some(pid) = rustix::process::Pid::from_raw(pid) {
        while let Err(rustix::io::Errno::INTR) =
            rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty())
        {}
    }
    match trial.failed {
        (0, 0) => Ok(()),
        (i, errno) => Err(step(i, io::Error::from_raw_os_error(errno))),
    }
}
