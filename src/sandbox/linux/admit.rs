//! Who is calling `nd7 run`'s servers (the exit, the door): the
//! credentials the kernel attached to a request (`SCM_CREDENTIALS`, and a
//! pidfd of the sender, `SCM_PIDFD`, where the kernel has it), not the
//! connection's peer, which is nd7 run's keeper, since it connects for
//! every process of the session (`super::supervise`). Only a descendant of
//! this `nd7 run`, of the same user, is admitted, each link of its ancestry
//! pinned with a pidfd, so a pid reused on the way fails the check.

use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;

use rustix::process::{Pid, PidfdFlags, pidfd_open};

use crate::floor_wire::Frame;
use crate::kernel::linux as proc;
use crate::run_log::RunLog;

/// `SO_PASSPIDFD`: the kernel attaches a pidfd of the sender to every
/// message (Linux 6.5).
pub fn set_pass_pidfd(socket: &impl AsFd) -> io::Result<()> {
    if crate::fault::injected("no-pidfd-passing") {
        return Err(io::ErrorKind::Unsupported.into());
    }
    const SO_PASSPIDFD: libc::c_int = 76;
    let one: libc::c_int = 1;
    // SAFETY: setsockopt reads one c_int from a live local.
    let r = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&socket.as_fd()),
            libc::SOL_SOCKET,
            SO_PASSPIDFD,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether `pidfd`'s process is still alive (signal 0 through the pidfd).
fn alive(pidfd: &OwnedFd) -> bool {
    // SAFETY: pidfd_send_signal with signal 0 and no info only checks.
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            std::os::fd::AsRawFd::as_raw_fd(pidfd),
            0,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        ) == 0
    }
}

/// Whether process `pid`, pinned by `pinned`, descends from `ancestor`:
/// the child of `ancestor` it descends through (itself, when it is one).
/// Each parent is pinned with a pidfd as it is reached, and the link to it
/// read again once it is pinned; at the end every pinned process must still
/// be alive. A pid reused anywhere along the way therefore fails the check.
fn descends_pinned(pid: u32, pinned: OwnedFd, ancestor: u32) -> Option<u32> {
    let mut held = vec![pinned];
    let mut at = pid;
    // A tree deeper than this is not one the kernel builds.
    for _ in 0..(1 << 16) {
        let parent = proc::stat(at)?.ppid;
        if parent == 0 {
            return None;
        }
        if parent == ancestor {
            return held.iter().all(alive).then_some(at);
        }
        let id = Pid::from_raw(parent as i32)?;
        let pidfd = pidfd_open(id, PidfdFlags::empty()).ok()?;
        if proc::stat(at).map(|s| s.ppid) != Some(parent) {
            return None;
        }
        held.push(pidfd);
        at = parent;
    }
    None
}

/// A caller the kernel places in the session's process tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Admitted {
    pub(super) pid: u32,
    /// The session's child it descends through: the program (the floor),
    /// or a command the exit started, when it asks from inside one. The
    /// keeper, not the session, adopts orphans, so a process whose parent
    /// died is no longer below the session at all.
    pub(super) below: u32,
}

/// Whether the kernel places the caller in this session's process tree.
pub(super) fn admit(caller: Caller, session_pid: u32) -> Result<Admitted, String> {
    let (Some(pid), Some(uid)) = (caller.pid, caller.uid) else {
        return Err("cannot tell who is calling: the request came without credentials".into());
    };
    let me = rustix::process::getuid().as_raw();
    if uid != me {
        return Err(format!(
            "the caller runs as uid {uid}, the session as uid {me}"
        ));
    }
    let refused = || {
        format!(
            "process {pid} is not part of session {session_pid}; only the session's own processes are let in"
        )
    };
    let pinned = match caller.pidfd {
        Some(pidfd) => pidfd,
        // Before Linux 6.5: pinned now, which a pid reused between the
        // message and this line could fool (said by `nd7 doctor`).
        None => Pid::from_raw(pid as i32)
            .and_then(|id| pidfd_open(id, PidfdFlags::empty()).ok())
            .ok_or_else(refused)?,
    };
    match descends_pinned(pid, pinned, session_pid) {
        Some(below) => Ok(Admitted { pid, below }),
        None => Err(refused()),
    }
}

/// Refuses a caller (pid and uid as the kernel gave them, where it did),
/// writing it down in the session's log.
pub(super) fn refuse(
    conn: &UnixStream,
    log: &RunLog,
    door: &str,
    (pid, uid): (Option<u32>, Option<u32>),
    why: String,
) {
    log.refused(door, pid, uid, &why);
    let _ = (&*conn).write_all(&Frame::Refused(why).encode());
}

/// Who sent a request, as the kernel attached it to the message.
#[derive(Debug, Default)]
pub(super) struct Caller {
    pub(super) pid: Option<u32>,
    pub(super) uid: Option<u32>,
    /// A pidfd of the sender (`SCM_PIDFD`), where the kernel gives one.
    pub(super) pidfd: Option<OwnedFd>,
}

/// A request's length prefix and the descriptors that came with it.
pub(super) type Prefix = ([u8; 4], Vec<OwnedFd>);

/// Reads a request's four-byte length prefix with the descriptors and the
/// credentials the kernel attached to it (the socket must have
/// `SO_PASSCRED`, and `SO_PASSPIDFD` where the kernel has it). The
/// credentials are returned whatever else went wrong, so a refusal can name
/// its caller. At most three descriptors are taken.
pub(super) fn receive_prefix(conn: &UnixStream) -> (Caller, Result<Prefix, String>) {
    const SCM_PIDFD: libc::c_int = 4;
    let mut prefix = [0u8; 4];
    // Room for three descriptors, a ucred and a pidfd, aligned for cmsghdr.
    let mut space = [0u64; 32];
    let mut iov = libc::iovec {
        iov_base: prefix.as_mut_ptr().cast(),
        iov_len: prefix.len(),
    };
    // SAFETY: msghdr is plain data; every field used is set below.
    let mut header: libc::msghdr = unsafe { std::mem::zeroed() };
    header.msg_iov = &mut iov;
    header.msg_iovlen = 1;
    header.msg_control = space.as_mut_ptr().cast();
    header.msg_controllen = std::mem::size_of_val(&space) as _;
    // SAFETY: `header` points at `iov` and `space`, both live and writable
    // for their whole lengths for the duration of the call.
    let got = unsafe {
        libc::recvmsg(
            std::os::fd::AsRawFd::as_raw_fd(conn),
            &mut header,
            libc::MSG_CMSG_CLOEXEC | libc::MSG_WAITALL,
        )
    };
    let mut caller = Caller::default();
    if got < 0 {
        let e = io::Error::last_os_error();
        return (caller, Err(format!("cannot read the request: {e}")));
    }
    let mut fds: Vec<OwnedFd> = Vec::new();
    // SAFETY: the kernel filled `header.msg_control` with well-formed
    // control messages up to `msg_controllen`; each descriptor in them is
    // new in this process and owned by nothing else, so each is wrapped
    // exactly once.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&header);
        while !cmsg.is_null() {
            let data = libc::CMSG_DATA(cmsg);
            let len = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
            match ((*cmsg).cmsg_level, (*cmsg).cmsg_type) {
                (libc::SOL_SOCKET, libc::SCM_RIGHTS) => {
                    for i in 0..len / 4 {
                        let fd = std::ptr::read_unaligned(data.cast::<libc::c_int>().add(i));
                        fds.push(std::os::fd::FromRawFd::from_raw_fd(fd));
                    }
                }
                (libc::SOL_SOCKET, libc::SCM_CREDENTIALS) if len >= 12 => {
                    let cred = std::ptr::read_unaligned(data.cast::<libc::ucred>());
                    caller.pid = u32::try_from(cred.pid).ok().filter(|&p| p != 0);
                    caller.uid = Some(cred.uid);
                }
                (libc::SOL_SOCKET, SCM_PIDFD) if len >= 4 => {
                    let fd = std::ptr::read_unaligned(data.cast::<libc::c_int>());
                    caller.pidfd = Some(std::os::fd::FromRawFd::from_raw_fd(fd));
                }
                _ => {}
            }
            cmsg = libc::CMSG_NXTHDR(&header, cmsg);
        }
    }
    if header.msg_flags & libc::MSG_CTRUNC != 0 {
        return (
            caller,
            Err("the request carried more than three descriptors".into()),
        );
    }
    if got != 4 {
        return (caller, Err("the request ended before its length".into()));
    }
    (caller, Ok((prefix, fds)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn pidfd_of(pid: u32) -> OwnedFd {
        pidfd_open(Pid::from_raw(pid as i32).expect("pid"), PidfdFlags::empty()).expect("pidfd")
    }

    /// A child of this process descends from it while the process pinned
    /// for it is alive. When the pinned process is dead, the same number
    /// naming a descendant (as a reused pid would) does not pass: this is
    /// what the final liveness check in `descends_pinned` guards.
    #[test]
    fn a_pid_whose_pinned_process_died_does_not_pass() {
        let me = std::process::id();
        let mut child = Command::new("sleep").arg("30").spawn().expect("sleep");
        assert_eq!(
            descends_pinned(child.id(), pidfd_of(child.id()), me),
            Some(child.id())
        );

        let mut gone = Command::new("true").spawn().expect("true");
        let dead = pidfd_of(gone.id());
        gone.wait().expect("reaped");
        assert!(!alive(&dead));
        assert_eq!(descends_pinned(child.id(), dead, me), None);

        // Not a descendant at all.
        assert_eq!(descends_pinned(me, pidfd_of(me), child.id()), None);
        child.kill().expect("kill");
        child.wait().expect("reaped");
    }

    #[test]
    fn a_caller_without_credentials_or_of_another_user_is_refused() {
        let none = admit(Caller::default(), 1).expect_err("no credentials");
        assert!(none.contains("without credentials"), "{none}");
        let other = Caller {
            pid: Some(std::process::id()),
            uid: Some(rustix::process::getuid().as_raw() + 1),
            pidfd: None,
        };
        let why = admit(other, 1).expect_err("another uid");
        assert!(why.contains("runs as uid"), "{why}");
    }
}
