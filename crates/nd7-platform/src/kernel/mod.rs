//! What the kernel says about processes and paths: when a process started
//! (with its pid, that names it for good), a process's ancestors, what a
//! path leads to without following links, and the real path of one a user
//! named, through no link the account could have placed. `run_dir` and
//! `sandbox` both stand on these facts, so they live below both; this
//! module, `sandbox` and setup's timer code (`setup::timer`) are the only
//! places with `#[cfg(target_os)]` (ADR-0064). It uses neither `run_dir`
//! nor `sandbox`.

#[cfg(target_os = "linux")]
pub mod linux;
#[cfg(target_os = "macos")]
pub mod macos;

use std::path::{Path, PathBuf};

use nd7_format::policy::Identity;

/// Why a path could not be pinned.
#[derive(Debug, thiserror::Error)]
pub enum PinError {
    #[error("it does not exist")]
    Missing,
    #[error("its path goes through a symbolic link")]
    Link,
    #[error("{}: cannot {action}: {source}", path.display())]
    Io {
        path: PathBuf,
        action: &'static str,
        source: std::io::Error,
    },
}

crate::files::io_context_into!(PinError);

/// What `path` (absolute, resolved) leads to now, following no symbolic
/// link in any component: the identity a write root or grant is pinned with.
/// On Linux one `openat2(RESOLVE_NO_SYMLINKS)`; elsewhere each component is
/// checked with `lstat` (macOS uses pins only to warn: Seatbelt matches the
/// real path of every access, so a re-pointed link never widens a rule).
pub fn pin(path: &Path) -> Result<Identity, PinError> {
    #[cfg(target_os = "linux")]
    {
        linux::pin(path)
    }
    #[cfg(not(target_os = "linux"))]
    {
        use std::os::unix::fs::MetadataExt;
        let mut last = None;
        for prefix in path.ancestors().collect::<Vec<_>>().into_iter().rev() {
            match std::fs::symlink_metadata(prefix) {
                Ok(m) if m.file_type().is_symlink() => return Err(PinError::Link),
                Ok(m) => last = Some(m),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(PinError::Missing);
                }
                Err(e) => return Err(io_err(prefix, "lstat")(e)),
            }
        }
        let m = last.ok_or(PinError::Missing)?;
        Ok(Identity {
            dev: m.dev(),
            ino: m.ino(),
        })
    }
}

/// What a path named for a grant really is, found without following a
/// link the account could have placed ([`real_path`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RealPath {
    /// The real path: every existing component a directory (or the last a
    /// file), none a link; the components that do not exist yet appended.
    pub path: PathBuf,
    /// Whether the whole path exists.
    pub exists: bool,
}

/// Why [`real_path`] found no real path it may take.
#[derive(Debug, thiserror::Error)]
pub enum RealPathError {
    /// A link in a directory the account can change: a command of some
    /// session (run as the account) could have placed or re-pointed it.
    #[error(
        "{link} is a symbolic link (to {target}) in a directory your account can change, so a command of an earlier or this session could have placed or re-pointed it; nd7 follows no such link{}",
        leads_to.as_ref().map(|p| format!(" (it leads to {} now)", p.display())).unwrap_or_default()
    )]
    Link {
        link: PathBuf,
        target: PathBuf,
        /// Where the link leads now, links and all (for the message).
        leads_to: Option<PathBuf>,
    },
    #[error("more than {MAX_LINKS} symbolic links on the way")]
    Loop,
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// How many links [`real_path`] follows before it gives up (Linux's own
/// bound on one lookup).
pub const MAX_LINKS: usize = 40;

/// The real path of `path` (absolute), followed from `/` one component at
/// a time, like `realpath` but following a symbolic link only where the
/// account could not have made it: in a directory it neither owns nor may
/// write (`/bin -> usr/bin`, macOS's `/tmp -> private/tmp`, a home under a
/// link root made). A link anywhere else (the home, a project, a cache)
/// may have been placed or re-pointed by a command of some session, which
/// runs as the account, and is refused ([`RealPathError::Link`]): followed,
/// it would let that command choose what a grant, a project section or a
/// temp directory is (ADR-0068). Components that do not exist are
/// appended as written, so a path to be created can be judged first.
pub fn real_path(path: &Path) -> Result<RealPath, RealPathError> {
    real_path_with(path, &account_could_change)
}

/// Whether the account running this process could have changed the entries
/// of directory `dir` (real): it owns it (and so may make it writable), or
/// may write it now (its mode, its groups, an ACL).
fn account_could_change(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let owned = std::fs::symlink_metadata(dir)
        .map(|m| m.uid() == rustix::process::getuid().as_raw())
        .unwrap_or(true);
    owned || rustix::fs::access(dir, rustix::fs::Access::WRITE_OK).is_ok()
}

/// [`real_path`], with the judgment of a link's directory passed in.
pub fn real_path_with(
    path: &Path,
    could_change: &dyn Fn(&Path) -> bool,
) -> Result<RealPath, RealPathError> {
    use std::path::Component;
    let mut real = PathBuf::from("/");
    // Components still to walk, nearest last; links push their targets.
    let mut todo: Vec<std::ffi::OsString> = Vec::new();
    let push = |todo: &mut Vec<std::ffi::OsString>, p: &Path| {
        for c in p.components().rev() {
            match c {
                Component::Normal(n) => todo.push(n.to_os_string()),
                Component::ParentDir => todo.push("..".into()),
                Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
            }
        }
    };
    push(&mut todo, path);
    // Components appended that do not exist (none of them a link).
    let mut missing = 0usize;
    let mut links = 0usize;
    while let Some(name) = todo.pop() {
        if name == ".." {
            real.pop();
            missing = missing.saturating_sub(1);
            continue;
        }
        let next = real.join(&name);
        if missing > 0 {
            real = next;
            missing += 1;
            continue;
        }
        match std::fs::symlink_metadata(&next) {
            Ok(m) if m.file_type().is_symlink() => {
                let target = std::fs::read_link(&next).map_err(|source| RealPathError::Io {
                    path: next.clone(),
                    source,
                })?;
                if could_change(&real) {
                    return Err(RealPathError::Link {
                        leads_to: std::fs::canonicalize(&next).ok(),
                        link: next,
                        target,
                    });
                }
                links += 1;
                if links > MAX_LINKS {
                    return Err(RealPathError::Loop);
                }
                if target.is_absolute() {
                    real = PathBuf::from("/");
                }
                push(&mut todo, &target);
            }
            Ok(_) => real = next,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                real = next;
                missing = 1;
            }
            Err(source) => return Err(RealPathError::Io { path: next, source }),
        }
    }
    Ok(RealPath {
        path: real,
        exists: missing == 0,
    })
}

/// When process `pid` started, in the kernel's units; `None` when there is
/// no such process, or only its zombie (dead, not yet reaped: where no init
/// reaps, a killed `nd7 run` can stay one). With the pid it names one
/// process for good.
pub fn start_time(pid: u32) -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        linux::stat(pid)
            .filter(|s| s.state != 'Z')
            .map(|s| s.started)
    }
    #[cfg(target_os = "macos")]
    {
        macos::start_time(pid)
    }
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    {
        let _ = pid;
        None
    }
}

/// The calling process's ancestors as the kernel reports them, nearest
/// first, each read only when asked for.
pub fn ancestors() -> Box<dyn Iterator<Item = u32>> {
    #[cfg(target_os = "linux")]
    {
        Box::new(linux::ancestors(std::process::id()))
    }
    #[cfg(target_os = "macos")]
    {
        let chain = macos::parent_chain().unwrap_or_default();
        Box::new(chain.into_iter().map(|(pid, _)| pid))
    }
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    {
        Box::new(std::iter::empty())
    }
}

/// The kernel's own file system `file` lies on, if it does: `/proc`
/// (other programs' command lines, environments and memory maps, most
/// of which Landlock's ptrace scope keeps from the agent) and `/sys`.
/// No file git, direnv or Claude Code runs lives there, and the watch,
/// unconfined, sees every program of the user's: it reads nothing there
/// for the agent, whichever link led it.
#[cfg(target_os = "linux")]
pub fn kernel_view(file: &std::fs::File) -> Option<&'static str> {
    /// Linux's `SYSFS_MAGIC`, `DEBUGFS_MAGIC`, `TRACEFS_MAGIC`,
    /// `SECURITYFS_MAGIC`, `CGROUP2_SUPER_MAGIC` and `BPF_FS_MAGIC`.
    const OTHERS: &[u64] = &[
        0x6265_6572,
        0x6462_6720,
        0x7472_6163,
        0x7363_6673,
        0x6367_7270,
        0xcafe_4a11,
    ];
    let kind = rustix::fs::fstatfs(file).ok()?.f_type as u64;
    if kind == rustix::fs::PROC_SUPER_MAGIC as u64 {
        Some("/proc (the kernel's view of running programs)")
    } else if OTHERS.contains(&kind) {
        Some("/sys (the kernel's own file system)")
    } else {
        None
    }
}

#[cfg(not(target_os = "linux"))]
pub fn kernel_view(_: &std::fs::File) -> Option<&'static str> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn a_link_is_followed_only_where_the_account_could_not_have_made_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(dir.path()).expect("real");
        let (trusted, mine) = (root.join("trusted"), root.join("mine"));
        std::fs::create_dir_all(root.join("real/sub")).expect("mkdir");
        std::fs::create_dir_all(&trusted).expect("mkdir");
        std::fs::create_dir_all(&mine).expect("mkdir");
        symlink("../real", trusted.join("rel")).expect("symlink");
        symlink(root.join("real"), trusted.join("abs")).expect("symlink");
        symlink("rel/sub", trusted.join("chain")).expect("symlink");
        symlink("/", mine.join("root")).expect("symlink");
        symlink(trusted.join("rel"), mine.join("via")).expect("symlink");
        let judge = |d: &Path| d != trusted.as_path();
        let real = |p: PathBuf| real_path_with(&p, &judge);
        for (asked, want) in [
            (trusted.join("rel/sub"), root.join("real/sub")),
            (trusted.join("abs/sub"), root.join("real/sub")),
            (trusted.join("chain"), root.join("real/sub")),
            (trusted.join("rel/sub/../sub"), root.join("real/sub")),
            (root.join("real/./sub"), root.join("real/sub")),
        ] {
            let got = real(asked.clone()).expect("resolves");
            assert_eq!((got.path, got.exists), (want, true), "{}", asked.display());
        }
        // Not there yet: appended as written, `..` taken back lexically
        // only over what does not exist.
        let got = real(trusted.join("rel/new/deeper")).expect("resolves");
        assert_eq!(got.path, root.join("real/new/deeper"));
        assert!(!got.exists);
        let got = real(root.join("real/new/../sub")).expect("resolves");
        assert_eq!((got.path, got.exists), (root.join("real/sub"), true));
        // A link in a directory the account could change is refused, even
        // one that leads somewhere harmless, and even as the last component.
        for (asked, link) in [
            (mine.join("root/etc"), mine.join("root")),
            (mine.join("root"), mine.join("root")),
            (mine.join("via/sub"), mine.join("via")),
            (mine.join("new/../root"), mine.join("root")),
        ] {
            match real(asked.clone()) {
                Err(RealPathError::Link { link: l, .. }) => assert_eq!(l, link),
                other => panic!("{}: {other:?}", asked.display()),
            }
        }
        let e = real(mine.join("root")).expect_err("a link");
        assert!(e.to_string().contains("(it leads to / now)"), "{e}");
        // A loop of trusted links ends.
        symlink("loop", trusted.join("loop")).expect("symlink");
        assert!(matches!(
            real(trusted.join("loop")),
            Err(RealPathError::Loop)
        ));
    }

    #[test]
    fn the_accounts_own_directories_count_as_changeable() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(account_could_change(dir.path()));
        let e = real_path(&dir.path().join("x")).expect("no link yet");
        assert!(!e.exists);
        symlink("/", dir.path().join("l")).expect("symlink");
        let real = std::fs::canonicalize(dir.path()).expect("real");
        match real_path(&real.join("l")) {
            Err(RealPathError::Link { link, .. }) => assert_eq!(link, real.join("l")),
            other => panic!("{other:?}"),
        }
    }
}
