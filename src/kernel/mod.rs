//! What the kernel says about processes and paths: when a process started
//! (with its pid, that names it for good), a process's ancestors, and what
//! a path leads to without following links. `run_dir` and `sandbox` both
//! stand on these facts, so they live below both; this module, `sandbox`
//! and setup's timer code (`setup::timer`) are the only places with
//! `#[cfg(target_os)]` (ADR-0064). It uses neither `run_dir` nor `sandbox`.

#[cfg(target_os = "linux")]
pub mod linux;
#[cfg(target_os = "macos")]
pub mod macos;

use std::path::{Path, PathBuf};

use crate::policy::Identity;

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
