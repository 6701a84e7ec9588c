//! What the macOS kernel says about processes, through libproc's
//! `proc_pidinfo` and `proc_listallpids`: a process's parent, start time,
//! owner and name, and every process there is. All of nd7's `unsafe` for
//! this is in this file: two functions of libSystem, declared here rather
//! than through a crate.

use std::ffi::{c_char, c_int, c_void};
use std::io;

/// Why the kernel did not describe a process.
#[derive(Debug, thiserror::Error)]
#[error("the kernel would not describe process {pid}: {source}")]
pub struct ProcInfoError {
    pub pid: u32,
    pub source: io::Error,
}

/// `PROC_PIDTBSDINFO` in <sys/proc_info.h>: fills a [`ProcBsdInfo`].
const PROC_PIDTBSDINFO: c_int = 3;
/// `MAXCOMLEN` in <sys/param.h>.
const MAXCOMLEN: usize = 16;

/// `struct proc_bsdinfo` of <sys/proc_info.h>, field for field.
#[repr(C)]
#[allow(dead_code, reason = "the kernel's layout; nd7 reads a few fields")]
struct ProcBsdInfo {
    pbi_flags: u32,
    pbi_status: u32,
    pbi_xstatus: u32,
    pbi_pid: u32,
    pbi_ppid: u32,
    pbi_uid: u32,
    pbi_gid: u32,
    pbi_ruid: u32,
    pbi_rgid: u32,
    pbi_svuid: u32,
    pbi_svgid: u32,
    rfu_1: u32,
    pbi_comm: [c_char; MAXCOMLEN],
    pbi_name: [c_char; 2 * MAXCOMLEN],
    pbi_nfiles: u32,
    pbi_pgid: u32,
    pbi_pjobc: u32,
    e_tdev: u32,
    e_tpgid: u32,
    pbi_nice: i32,
    pbi_start_tvsec: u64,
    pbi_start_tvusec: u64,
}

// `PROC_PIDTBSDINFO_SIZE` is `sizeof(struct proc_bsdinfo)`: 136 bytes on both
// arm64 and x86_64. A field of the wrong size or place would change it.
const _: () = assert!(std::mem::size_of::<ProcBsdInfo>() == 136);
const _: () = assert!(std::mem::align_of::<ProcBsdInfo>() == 8);

unsafe extern "C" {
    /// <libproc.h>: fills `buffer` with `flavor`'s record of `pid`; returns the
    /// bytes written, 0 or less on failure (with errno set).
    fn proc_pidinfo(
        pid: c_int,
        flavor: c_int,
        arg: u64,
        buffer: *mut c_void,
        buffersize: c_int,
    ) -> c_int;
    /// <libproc.h>: fills `buffer` (`buffersize` bytes) with the pids of
    /// every process; returns how many it wrote, or with a null buffer how
    /// many there are; -1 on failure.
    fn proc_listallpids(buffer: *mut c_void, buffersize: c_int) -> c_int;
}

/// Every process of the calling user (or of everyone, to root) that the
/// kernel describes now, as (pid, start time in microseconds, command name),
/// this process left out. A process that ends meanwhile is simply missing.
pub fn own_processes() -> Vec<(u32, u64, String)> {
    let me = std::process::id();
    let uid = rustix::process::getuid().as_raw();
    // SAFETY: a null buffer of size 0 asks only for the count; nothing is
    // written.
    let count = unsafe { proc_listallpids(std::ptr::null_mut(), 0) };
    let Ok(count) = usize::try_from(count) else {
        return Vec::new();
    };
    // Room for processes started since the count.
    let mut pids: Vec<c_int> = vec![0; count + 64];
    let bytes = c_int::try_from(pids.len() * std::mem::size_of::<c_int>()).unwrap_or(c_int::MAX);
    // SAFETY: `pids` is writable for `bytes` bytes, which is what the call
    // is told; it writes at most that many and returns how many pids.
    let written = unsafe { proc_listallpids(pids.as_mut_ptr().cast::<c_void>(), bytes) };
    let Ok(written) = usize::try_from(written) else {
        return Vec::new();
    };
    pids.truncate(written.min(pids.len()));
    pids.into_iter()
        .filter_map(|pid| u32::try_from(pid).ok())
        .filter(|&pid| pid != me && pid != 0)
        .filter_map(|pid| bsd_info(pid).ok().map(|info| (pid, info)))
        .filter(|(_, info)| uid == 0 || info.pbi_uid == uid)
        .map(|(pid, info)| {
            let start = (info.pbi_start_tvsec)
                .saturating_mul(1_000_000)
                .saturating_add(info.pbi_start_tvusec);
            let name: Vec<u8> = info
                .pbi_comm
                .iter()
                .take_while(|&&c| c != 0)
                .map(|&c| c as u8)
                .collect();
            (pid, start, String::from_utf8_lossy(&name).into_owned())
        })
        .collect()
}

/// When `pid` started (microseconds since the epoch), or `None` when the
/// kernel describes no such process to this user.
pub fn start_time(pid: u32) -> Option<u64> {
    let info = bsd_info(pid).ok()?;
    Some(
        (info.pbi_start_tvsec)
            .saturating_mul(1_000_000)
            .saturating_add(info.pbi_start_tvusec),
    )
}

/// The calling process's ancestors, nearest first, each as (pid, start time
/// in microseconds since the epoch), up to pid 1.
///
/// The kernel describes only processes of the caller's own user (or all of
/// them to root), so the walk stops early at the first ancestor it will not
/// describe, typically `login` or launchd. Everything between `nd7 run` and
/// `nd7-exec` runs as the same user, so the session is found before that.
pub fn parent_chain() -> Result<Vec<(u32, u64)>, ProcInfoError> {
    let mut chain = Vec::new();
    let mut pid = bsd_info(std::process::id())?.pbi_ppid;
    while pid != 0 {
        let info = match bsd_info(pid) {
            Ok(info) => info,
            Err(_) if !chain.is_empty() || pid == 1 => break,
            Err(e) => return Err(e),
        };
        let start = (info.pbi_start_tvsec)
            .saturating_mul(1_000_000)
            .saturating_add(info.pbi_start_tvusec);
        chain.push((pid, start));
        if pid == 1 || info.pbi_ppid == pid {
            break;
        }
        pid = info.pbi_ppid;
    }
    Ok(chain)
}

/// The kernel's `proc_bsdinfo` record of `pid`.
fn bsd_info(pid: u32) -> Result<ProcBsdInfo, ProcInfoError> {
    let size = std::mem::size_of::<ProcBsdInfo>();
    let mut info = std::mem::MaybeUninit::<ProcBsdInfo>::zeroed();
    let c_pid = c_int::try_from(pid).map_err(|_| ProcInfoError {
        pid,
        source: io::Error::from(io::ErrorKind::InvalidInput),
    })?;
    // SAFETY: `info` is writable for `size` bytes, which is what the call is
    // told; the kernel writes at most that many.
    let written = unsafe {
        proc_pidinfo(
            c_pid,
            PROC_PIDTBSDINFO,
            0,
            info.as_mut_ptr().cast::<c_void>(),
            size as c_int,
        )
    };
    if written <= 0 || written as usize != size {
        let source = if written <= 0 {
            io::Error::last_os_error()
        } else {
            io::Error::other(format!("{written} of {size} bytes"))
        };
        return Err(ProcInfoError { pid, source });
    }
    // SAFETY: the struct was zeroed (a valid value for its integer and byte
    // fields) and the kernel filled all of it.
    Ok(unsafe { info.assume_init() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chain_starts_at_the_parent_with_start_times() {
        let chain = parent_chain().expect("the kernel describes our parent");
        assert_eq!(
            chain.first().map(|c| c.0),
            Some(std::os::unix::process::parent_id())
        );
        assert!(chain.iter().all(|&(_, start)| start > 0), "{chain:?}");
    }
}
