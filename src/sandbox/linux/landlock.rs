//! Landlock: applying a session's rules to the calling process. Landlock
//! confines a process and everything it starts, cannot be loosened once
//! applied, and needs no privilege.
//!
//! nd7 requires the file-system rights of Landlock ABI 3 (Linux 6.2), which
//! include `Truncate`; without it a confined process could still truncate
//! files it may not write. A kernel that cannot enforce all of them is refused:
//! the rules are applied completely or not at all.
//!
//! # No rule follows a link (ADR-0028)
//!
//! A Landlock rule is a file descriptor, and a descriptor opened by name
//! follows every symbolic link on the way: a link anywhere the agent can
//! write, re-pointed between two commands, would turn the next ruleset's
//! rule into a rule for whatever it points at (`~/.ssh`, `~/.nd7`, `/`).
//! So every rule path is opened with `openat2(RESOLVE_NO_SYMLINKS)`: a link
//! in any component makes the open fail, and that rule is left out (which
//! allows less, never more). Directories are listed the same way, and links
//! found in a listing are skipped: what a link points at is reached, and
//! judged, by its real path. The floor's rules are opened once, when `nd7
//! run` builds the floor, and the same descriptors serve every command
//! through the exit ([`prepare_floor`], [`prepare_command`]); grants are
//! opened per command and checked against the identity they were pinned
//! with: one whose path now leads to another directory is left out and
//! reported.

pub use super::abi::{SandboxError, abi};
use super::{admit, attrs, keeper, launch, seccomp};
use std::collections::BTreeSet;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use landlock::{
    ABI, Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, RestrictionStatus,
    Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus,
};
use rustix::fs::{FileType, OFlags};

use crate::kernel::linux::{open_nofollow, pin};
use crate::policy::{LandlockRules, Policy, landlock_rules, write_rules};
use crate::run_dir::RunDir;
use crate::running;
use crate::sandbox::Dropped;

/// The Landlock ABI whose file-system rights nd7 requires.
pub const REQUIRED_ABI: ABI = ABI::V3;

/// A directory's entries, for [`crate::policy::complement`], listed without
/// following links to the directory, and without the entries that are
/// links themselves: what a link points at gets a rule, or none, by its
/// real path. An unreadable directory has no entries, so nothing beneath it
/// is allowed.
pub fn list_dir(dir: &Path) -> Vec<PathBuf> {
    let Ok(fd) = open_nofollow(dir, OFlags::RDONLY | OFlags::DIRECTORY) else {
        return Vec::new();
    };
    let Ok(mut entries) = rustix::fs::Dir::new(fd) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    while let Some(Ok(entry)) = entries.read() {
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." || entry.file_type() == FileType::Symlink {
            continue;
        }
        out.push(dir.join(std::ffi::OsStr::from_bytes(name)));
    }
    out
}

/// The terminal `nd7 run` was started on (`super::own_terminal`). Only a
/// descriptor that is a character device other than a memory device
/// (`/dev/null` and its kind, major 1) is looked up by name, in `/proc`: a
/// pipe, a file or `/dev/null` costs one `fstat`, not a walk of `/proc`.
pub fn own_terminal() -> Option<PathBuf> {
    (0..3)
        .filter(|fd| maybe_terminal(*fd))
        .filter_map(|fd| std::fs::read_link(format!("/proc/self/fd/{fd}")).ok())
        .find(|p| crate::policy::own_terminal_device(p))
}

/// Whether descriptor `fd` could be a terminal: an open character device
/// that is not one of the memory devices.
fn maybe_terminal(fd: libc::c_int) -> bool {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat fills the buffer when it returns 0, and only then is it
    // read; a descriptor that is not open makes it fail with EBADF.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: fstat succeeded, so the buffer is initialised.
    let st = unsafe { st.assume_init() };
    st.st_mode & libc::S_IFMT == libc::S_IFCHR && libc::major(st.st_rdev) != 1
}

/// Where devices can be reached outside `/dev`: every mount of the
/// filesystem `/dev` is (a chroot's `mount --bind /dev /srv/root/dev`, a
/// bind of one of its directories) and every devtmpfs or devpts mounted
/// elsewhere. Landlock judges the path a file is reached by, so the floor
/// covering only named devices under `/dev` (ADR-0085) would still let
/// them be opened there; `nd7 run` keeps these places unreadable with the
/// credential stores.
pub fn device_mounts() -> Vec<PathBuf> {
    std::fs::read("/proc/self/mountinfo")
        .map(|text| device_mounts_in(&text))
        .unwrap_or_default()
}

/// [`device_mounts`] over the bytes of a `mountinfo` file (mount points
/// need not be UTF-8). A mount counts when it is of the filesystem mounted
/// at `/dev` and shows a part of what `/dev` shows (its root lies within
/// the root of `/dev`'s mount: a `/dev` that is itself a bind of a
/// directory on the root filesystem makes no other mount of that
/// filesystem a device mount), or when it is a devtmpfs or devpts.
fn device_mounts_in(mountinfo: &[u8]) -> Vec<PathBuf> {
    // id parent major:minor root mount-point options [optional...] - type source super-options
    let mounts: Vec<(&[u8], PathBuf, PathBuf, &[u8])> = mountinfo
        .split(|b| *b == b'\n')
        .filter_map(|line| {
            let fields: Vec<&[u8]> = line.split(|b| *b == b' ').collect();
            let dash = fields.iter().position(|f| *f == b"-")?;
            Some((
                *fields.get(2)?,
                unescape(fields.get(3)?),
                unescape(fields.get(4)?),
                *fields.get(dash + 1)?,
            ))
        })
        .collect();
    let dev = Path::new(crate::policy::DEV);
    let shown: Vec<(&[u8], &Path)> = mounts
        .iter()
        .filter(|(_, _, at, _)| at == dev)
        .map(|(id, root, _, _)| (*id, root.as_path()))
        .collect();
    let mut out: Vec<PathBuf> = Vec::new();
    for (id, root, at, kind) in &mounts {
        let device = shown.iter().any(|(d, r)| d == id && root.starts_with(r))
            || *kind == b"devtmpfs"
            || *kind == b"devpts";
        if device && !at.starts_with(dev) && !out.contains(at) {
            out.push(at.clone());
        }
    }
    out
}

/// A field as `mountinfo` writes it: space, tab, newline and backslash as
/// three octal digits after a backslash.
fn unescape(field: &[u8]) -> PathBuf {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal = field
            .get(i + 1..i + 4)
            .filter(|d| field[i] == b'\\' && d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match octal {
            Some(d) => {
                out.push(
                    d.iter()
                        .fold(0u8, |n, b| n.wrapping_mul(8).wrapping_add(b - b'0')),
                );
                i += 4;
            }
            None => {
                out.push(field[i]);
                i += 1;
            }
        }
    }
    PathBuf::from(std::ffi::OsStr::from_bytes(&out))
}

/// Checks each of `writes` (write roots or grants) against its pin. One
/// that is missing, reached through a link, or another directory than the
/// one pinned is left out and returned in the second list; one that was
/// never pinned (a root that did not exist when the session started) is left
/// out silently, unless it is a grant.
fn pinned(policy: &Policy, writes: &[PathBuf]) -> (Vec<PathBuf>, Vec<Dropped>) {
    let mut kept = Vec::new();
    let mut dropped = Vec::new();
    for path in writes {
        let grant = policy.grants.contains(path);
        let why = match (policy.pin_of(path), pin(path)) {
            (Some(pinned), Ok(now)) if pinned == now => {
                kept.push(path.clone());
                continue;
            }
            (None, _) if !grant => continue,
            (None, _) => "it was never pinned".to_string(),
            (Some(_), Ok(_)) => {
                "its path now leads to another directory than the one pinned".to_string()
            }
            (Some(_), Err(e)) => e.to_string(),
        };
        dropped.push(Dropped {
            path: path.clone(),
            grant,
            why,
        });
    }
    (kept, dropped)
}

/// The rules for the floor plus `writes`, each write root or grant checked
/// against its pin first ([`pinned`]).
pub fn command_rules(policy: &Policy, writes: &[PathBuf]) -> (LandlockRules, Vec<Dropped>) {
    let (kept, dropped) = pinned(policy, writes);
    (landlock_rules(policy, &kept, &list_dir), dropped)
}

/// Rules opened and ready to be added to a ruleset: a descriptor (opened
/// without links) and the rights it carries.
type Opened = Vec<(OwnedFd, BitFlags<AccessFs>)>;

/// The floor's rules, opened once when `nd7 run` builds the floor and
/// reused for every command through the exit: the descriptors hold the
/// directories the session started with, whatever is renamed or re-pointed
/// later, and no command pays for listing and opening them again.
static FLOOR: OnceLock<Opened> = OnceLock::new();

/// The write roots of opened rules, by identity (device, inode): what the
/// keeper lets a change of a file's mode, owner, times or extended
/// attributes reach ([`attrs`]), exactly what the rules let be written.
fn write_roots(opened: &[&Opened]) -> Vec<(u64, u64)> {
    opened
        .iter()
        .flat_map(|o| o.iter())
        .filter(|(_, access)| access.contains(AccessFs::WriteFile))
        .filter_map(|(fd, _)| rustix::fs::fstat(fd).ok())
        .map(|st| (st.st_dev, st.st_ino))
        .collect()
}

/// The floor's write roots ([`write_roots`] of [`FLOOR`]).
static FLOOR_ROOTS: OnceLock<Vec<(u64, u64)>> = OnceLock::new();

/// Opens every path of `rules` without following links; one that cannot be
/// opened is skipped: an allow that cannot be placed allows nothing.
fn open_rules(rules: &LandlockRules) -> Opened {
    let all = AccessFs::from_all(REQUIRED_ABI);
    let read = AccessFs::from_read(REQUIRED_ABI);
    let mut out = Vec::new();
    for (paths, access) in [(&rules.read, read), (&rules.write, all)] {
        for path in paths {
            out.extend(rule(path, access));
        }
    }
    out
}

/// The ruleset holding `rules`, every right required: with
/// HardRequirement each step fails rather than drop a right the kernel lacks.
fn ruleset(rules: &[&Opened]) -> Result<RulesetCreated, SandboxError> {
    let unsupported = |e: &dyn std::fmt::Display| SandboxError::Unsupported(e.to_string());
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(REQUIRED_ABI))
        .map_err(|e| unsupported(&e))?
        .create()
        .map_err(|e| unsupported(&e))?;
    for (fd, access) in rules.iter().flat_map(|r| r.iter()) {
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd.as_fd(), *access))
            .map_err(|e| unsupported(&e))?;
    }
    Ok(ruleset)
}

/// The floor for `policy`: its rules checked, opened, kept for the exit's
/// commands, and built into a ruleset enforced in full.
pub fn prepare_floor(policy: &Policy) -> Result<Confinement, SandboxError> {
    // The roots were pinned a moment ago; one changed since is left out.
    let (rules, _dropped) = command_rules(policy, &policy.floor_writes());
    let opened = open_rules(&rules);
    let roots = write_roots(&[&opened]);
    let confinement = confinement(ruleset(&[&opened])?, roots.clone())?;
    let _ = FLOOR_ROOTS.set(roots);
    let _ = FLOOR.set(opened);
    if let Ok(ruleset) = confinement.ruleset.try_clone() {
        let _ = FLOOR_RULESET.set(ruleset);
    }
    Ok(confinement)
}

/// The floor's ruleset, as [`prepare_floor`] built it from [`FLOOR`]. A
/// command through the exit that holds no grant runs under exactly the
/// floor's rules, so it is confined by this same ruleset (a duplicate of
/// its descriptor) instead of one rebuilt rule by rule for every command.
static FLOOR_RULESET: OnceLock<OwnedFd> = OnceLock::new();

/// Write roots and grants already reported as left out, so each is said once.
static REPORTED: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());

/// The confinement for one command through the exit: the floor's rules (as
/// opened when the session started) plus the grants, each checked against
/// its pin and opened now. A grant left out is also taken off the session's
/// record (it fails closed, and `nd7 allow` can make it again) and reported
/// on `nd7 run`'s standard error; the caller writes each one into the run's log.
pub fn prepare_command(
    run_dir: &RunDir,
    policy: &Policy,
) -> Result<(Confinement, Vec<Dropped>), SandboxError> {
    let (confined, dropped) = match FLOOR.get() {
        Some(floor) => {
            let (grants, dropped) = pinned(policy, &policy.grants);
            // No grant kept: the floor's own rules, whose ruleset is built.
            let built = grants
                .is_empty()
                .then(|| FLOOR_RULESET.get().and_then(|r| r.try_clone().ok()))
                .flatten();
            let confined = match built {
                Some(ruleset) => Confinement {
                    ruleset,
                    roots: FLOOR_ROOTS.get().cloned().unwrap_or_default(),
                },
                None => {
                    let write = write_rules(policy, &grants, &list_dir);
                    let opened = open_rules(&LandlockRules {
                        read: Vec::new(),
                        write,
                    });
                    let roots = write_roots(&[floor, &opened]);
                    confinement(ruleset(&[floor, &opened])?, roots)?
                }
            };
            (confined, dropped)
        }
        None => {
            let (rules, dropped) = command_rules(policy, &policy.command_writes());
            let opened = open_rules(&rules);
            let roots = write_roots(&[&opened]);
            (confinement(ruleset(&[&opened])?, roots)?, dropped)
        }
    };
    for d in &dropped {
        if d.grant {
            let _ = run_dir.change_policy(crate::sandbox::files_beside_record, |p| {
                (p.deny(&d.path), ())
            });
        }
        let new = REPORTED
            .lock()
            .map(|mut r| r.insert(d.path.clone()))
            .unwrap_or(true);
        if new || d.grant {
            eprintln!("nd7 run: {d}");
        }
    }
    Ok((confined, dropped))
}

/// The ruleset for `rules`, opened without following links ([`open_nofollow`]).
fn build(rules: &LandlockRules) -> Result<RulesetCreated, SandboxError> {
    ruleset(&[&open_rules(rules)])
}

/// One rule: `path` opened without links, with `access` narrowed to what a
/// file can have when it is not a directory (Landlock refuses the rest).
fn rule(path: &Path, access: BitFlags<AccessFs>) -> Option<(OwnedFd, BitFlags<AccessFs>)> {
    let fd = open_nofollow(path, OFlags::PATH).ok()?;
    let dir = rustix::fs::fstat(&fd)
        .map(|s| FileType::from_raw_mode(s.st_mode) == FileType::Directory)
        .unwrap_or(false);
    let access = if dir {
        access
    } else {
        access & AccessFs::from_file(REQUIRED_ABI)
    };
    Some((fd, access))
}

/// Applies `rules` to the calling process (and so to everything it starts),
/// with `no_new_privs` set. On success the process can never again read or
/// write outside them.
pub fn restrict_self(rules: &LandlockRules) -> Result<RestrictionStatus, SandboxError> {
    let status = build(rules)?
        .restrict_self()
        .map_err(|e| SandboxError::Unsupported(e.to_string()))?;
    match status.ruleset {
        RulesetStatus::FullyEnforced if status.no_new_privs => Ok(status),
        other => Err(SandboxError::Partial(other)),
    }
}

/// A ruleset built and checked in the parent, ready to be applied by a child
/// between fork and exec, where nothing may allocate.
#[derive(Debug)]
pub struct Confinement {
    ruleset: OwnedFd,
    /// The rules' write roots, for the keeper ([`write_roots`]).
    roots: Vec<(u64, u64)>,
}

/// Builds the ruleset for `rules`, failing unless the kernel enforces all of it.
pub fn prepare(rules: &LandlockRules) -> Result<Confinement, SandboxError> {
    let opened = open_rules(rules);
    let roots = write_roots(&[&opened]);
    confinement(ruleset(&[&opened])?, roots)
}

/// A ruleset [`ruleset`] built (so enforced in full), kept for a child.
fn confinement(
    ruleset: RulesetCreated,
    roots: Vec<(u64, u64)>,
) -> Result<Confinement, SandboxError> {
    let ruleset: Option<OwnedFd> = ruleset.into();
    ruleset
        .map(|ruleset| Confinement { ruleset, roots })
        .ok_or_else(|| SandboxError::Unsupported("Landlock is not enabled".into()))
}

/// What a confined process is, for the keeper ([`keeper`]): the agent's
/// floor, or one command through the exit.
pub enum Started {
    Floor,
    Command(running::Command),
}

impl Confinement {
    /// Arranges for the process `command` starts to confine itself just
    /// before it execs: `no_new_privs`, the Landlock ruleset, then the seccomp
    /// filter ([`seccomp`]); in a session, the filter's listener goes to the
    /// keeper with what `started` says. If any step fails the exec does not
    /// happen.
    pub fn confine(&self, command: &mut impl launch::PreExec, started: Started) {
        let fd = self.ruleset.as_raw_fd();
        let channel = keeper::channel();
        let sockets = channel.map_or(seccomp::Sockets::Open, |c| c.sockets());
        let filter: Option<&'static [seccomp::Insn]> = seccomp::available()
            .then(|| seccomp::full_program(sockets))
            .flatten();
        let report = channel.filter(|_| filter.is_some()).map(|channel| {
            let mut message = vec![match started {
                Started::Floor => keeper::FLOOR_LISTENER,
                Started::Command(_) => keeper::COMMAND_LISTENER,
            }];
            message.extend(attrs::Roots::encode(&self.roots));
            // Only a command holding a grant is listed for `nd7 deny`.
            if let Started::Command(info) = &started
                && !info.grants.is_empty()
            {
                message.extend(serde_json::to_vec(info).unwrap_or_default());
            }
            Report {
                channel: channel.fd.as_fd(),
                message,
                control: vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))],
            }
        });
        let mut report = report;
        // The agent dies with the session process (which dies with the
        // keeper); a command is started from a thread that ends before it
        // does, so it cannot have this.
        let floor = matches!(started, Started::Floor);
        // SAFETY: the closure runs in the child before exec (forked, or a
        // `launch` child sharing memory), where only async-signal-safe calls
        // are sound: raw system calls (prctl, landlock_restrict_self,
        // close_range, seccomp, sendmsg, close), errno, and writes only into
        // the buffers of the report it owns; no allocation, no lock. `fd`
        // and the channel stay open in the parent until `spawn` returns, and
        // the child has a copy of the descriptor table.
        unsafe {
            command.add_step(Box::new(move || {
                rustix::thread::set_no_new_privs(true)?;
                if libc::syscall(libc::SYS_landlock_restrict_self, fd, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if floor {
                    let kill = rustix::process::Signal::KILL;
                    rustix::process::set_parent_process_death_signal(Some(kill))?;
                }
                // Nothing but stdin, stdout and stderr crosses the exec: a
                // descriptor nd7 run inherited (a socket to another program,
                // leaked by whatever started it) would be a way out.
                if libc::syscall(
                    libc::SYS_close_range,
                    3u32,
                    u32::MAX,
                    libc::CLOSE_RANGE_CLOEXEC,
                ) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                if let Some(filter) = filter {
                    let listener = seccomp::install(filter, report.is_some())?;
                    if let Some(report) = &mut report {
                        let sent = report.send(BorrowedFd::borrow_raw(listener));
                        libc::close(listener);
                        sent?;
                    }
                }
                Ok(())
            }));
        }
    }
}

/// The message a confined child sends the keeper with its listener,
/// prepared in the parent.
struct Report {
    channel: BorrowedFd<'static>,
    message: Vec<u8>,
    control: Vec<MaybeUninit<u8>>,
}

impl Report {
    /// Sends the message with `listener` attached. Makes one system call on
    /// memory this value owns and allocates nothing, so it is sound between
    /// fork and exec.
    fn send(&mut self, listener: BorrowedFd<'_>) -> std::io::Result<()> {
        use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
        let listener = [listener];
        let mut control = SendAncillaryBuffer::new(&mut self.control);
        control.push(SendAncillaryMessage::ScmRights(&listener));
        rustix::net::sendmsg(
            self.channel,
            &[std::io::IoSlice::new(&self.message)],
            &mut control,
            SendFlags::NOSIGNAL,
        )?;
        Ok(())
    }
}

/// Whether this kernel can enforce nd7's rules, without restricting anything:
/// a ruleset that requires them is built and dropped.
pub fn probe() -> Result<(), SandboxError> {
    Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(REQUIRED_ABI))
        .and_then(|r| r.create())
        .map(drop)
        .map_err(|e| SandboxError::Unsupported(e.to_string()))
}

/// `kernel.yama.ptrace_scope`, 0 where Yama is absent.
fn ptrace_scope() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// Whether a unix socket can carry its sender's pidfd (`SO_PASSPIDFD`,
/// Linux 6.5), which the exit identifies its callers by.
pub fn callers_by_pidfd() -> bool {
    rustix::net::socket(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::STREAM,
        None,
    )
    .is_ok_and(|s| admit::set_pass_pidfd(&s).is_ok())
}

/// The protections beyond the file rules, as this kernel (and, in a
/// session, this session) enforces them.
pub fn protections() -> Vec<crate::sandbox::Protection> {
    use crate::sandbox::Protection;
    let abi = abi().unwrap_or(0);
    let session = keeper::channel();
    let scoped = session.map_or(abi >= 6, |c| c.scoped());
    let filter = seccomp::available() && seccomp::native().is_some();
    let scope = ptrace_scope();
    let sockets =
        filter && session.map_or(scope < 2, |c| c.sockets() == seccomp::Sockets::Supervised);
    let pidfd = callers_by_pidfd();
    vec![
        Protection {
            name: "signals",
            enforced: scoped,
            detail: if scoped {
                "the agent can signal, and reach abstract unix sockets of, only the session's own processes (Landlock ABI 6 scopes)".into()
            } else {
                format!(
                    "signals to your other processes, and their abstract unix sockets (Landlock ABI {abi}; scopes need ABI 6)"
                )
            },
            needs: Some("Linux 6.12 or newer"),
        },
        Protection {
            name: "tty",
            enforced: filter,
            detail: if filter {
                "TIOCSTI, TIOCLINUX and the other ioctls that inject input or act on the console fail (seccomp)".into()
            } else {
                "terminal input injection (TIOCSTI) and console ioctls (no seccomp filter for this system)".into()
            },
            needs: Some(
                "a kernel with seccomp filters (CONFIG_SECCOMP_FILTER), on x86-64, arm64 or riscv64",
            ),
        },
        Protection {
            name: "sockets",
            enforced: sockets,
            detail: if sockets {
                "connect() reaches only the session's own unix sockets, never ssh-agent, tmux, D-Bus or docker (seccomp, with nd7 run connecting for the session)".into()
            } else if filter {
                format!(
                    "other programs' unix sockets: ssh-agent, tmux, D-Bus, docker (nd7 run cannot act for the session's processes: kernel.yama.ptrace_scope is {scope})"
                )
            } else {
                "other programs' unix sockets: ssh-agent, tmux, D-Bus, docker (no seccomp filter)"
                    .into()
            },
            needs: Some("kernel.yama.ptrace_scope of 0 or 1 (sysctl), and seccomp filters"),
        },
        Protection {
            name: "attrs",
            enforced: sockets,
            detail: if sockets {
                "chmod, chown, utimensat and setxattr reach only the write roots (seccomp, with nd7 run making each call for the session)".into()
            } else {
                format!(
                    "modes, owners, times and extended attributes of files outside the write roots, such as ~/.ssh and ~/.nd7 (nd7 run cannot act for the session's processes{})",
                    if filter {
                        format!(": kernel.yama.ptrace_scope is {scope}")
                    } else {
                        ": no seccomp filter".into()
                    }
                )
            },
            needs: Some("kernel.yama.ptrace_scope of 0 or 1 (sysctl), and seccomp filters"),
        },
        Protection {
            name: "dgram",
            enforced: false,
            detail: format!(
                "datagrams sent by path (sendto, sendmsg) to other programs' unix sockets, such as the journal's (only Landlock ABI 9 checks those; this kernel has ABI {abi}, and nd7 does not use ABI 9 yet)"
            ),
            needs: None,
        },
        Protection {
            name: "callers",
            enforced: pidfd,
            detail: if pidfd {
                "the exit pins each caller with a pidfd, so a reused pid cannot pass (SO_PASSPIDFD)"
                    .into()
            } else {
                "the exit's callers by pidfd: each is pinned by its pid when its request is read, which a pid reused in between could pass (SO_PASSPIDFD needs Linux 6.5)".into()
            },
            needs: Some("Linux 6.5 or newer"),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards [`maybe_terminal`]: a pseudo-terminal is one, a pipe, a file,
    /// `/dev/null` and a closed descriptor are not.
    #[test]
    fn only_a_character_device_other_than_memory_may_be_the_terminal() {
        use std::os::fd::AsRawFd;
        let ptmx = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/ptmx")
            .expect("open /dev/ptmx");
        assert!(maybe_terminal(ptmx.as_raw_fd()));
        let null = std::fs::File::open("/dev/null").expect("open /dev/null");
        assert!(!maybe_terminal(null.as_raw_fd()));
        let file = tempfile::tempfile().expect("tempfile");
        assert!(!maybe_terminal(file.as_raw_fd()));
        let (r, _w) = std::io::pipe().expect("pipe");
        assert!(!maybe_terminal(r.as_raw_fd()));
        assert!(!maybe_terminal(1 << 20));
    }

    /// Guards [`device_mounts_in`]: the binds of `/dev`'s filesystem and any
    /// devtmpfs or devpts outside `/dev` are found (escaped names read
    /// back); `/dev` itself, what is mounted beneath it, and other
    /// filesystems are not, nor the root when `/dev` is no mount of its own.
    #[test]
    fn device_mounts_are_the_binds_of_dev_and_device_filesystems_elsewhere() {
        let mountinfo = "\
22 1 252:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw
23 22 0:5 / /dev rw,nosuid shared:2 - devtmpfs udev rw,size=4096k
24 23 0:21 / /dev/pts rw,nosuid shared:3 - devpts devpts rw,mode=600
25 23 0:22 / /dev/shm rw,nosuid shared:4 - tmpfs tmpfs rw
26 22 0:5 / /srv/chroot/dev rw,nosuid shared:2 - devtmpfs udev rw
27 22 0:5 /input /home/u/my\\040input rw,nosuid shared:2 - devtmpfs udev rw
28 22 0:21 / /srv/chroot/dev/pts rw - devpts devpts rw
29 22 0:23 / /mnt/other rw - devtmpfs none rw
30 22 0:22 / /srv/shm rw - tmpfs tmpfs rw
31 22 252:1 /home /home rw - ext4 /dev/vda1 rw
";
        assert_eq!(
            device_mounts_in(mountinfo.as_bytes()),
            [
                "/srv/chroot/dev",
                "/home/u/my input",
                "/srv/chroot/dev/pts",
                "/mnt/other"
            ]
            .map(PathBuf::from)
        );
        // A container's /dev as a tmpfs: its binds are found by its id.
        let container = "\
1 0 0:40 / / rw - overlay overlay rw
2 1 0:41 / /dev rw - tmpfs tmpfs rw
3 1 0:41 / /work/dev rw - tmpfs tmpfs rw
4 1 0:42 / /tmp rw - tmpfs tmpfs rw
";
        assert_eq!(
            device_mounts_in(container.as_bytes()),
            [PathBuf::from("/work/dev")]
        );
        // A /dev bound from a directory of the root filesystem: only binds
        // of that directory, never the root filesystem's other mounts.
        let bound = "\
1 0 252:1 / / rw - ext4 /dev/vda1 rw
2 1 252:1 /var/ctr/dev /dev rw - ext4 /dev/vda1 rw
3 1 252:1 /home /home rw - ext4 /dev/vda1 rw
4 1 252:1 /var/ctr/dev/input /srv/input rw - ext4 /dev/vda1 rw
5 1 252:1 /var/ctr/devices /srv/devices rw - ext4 /dev/vda1 rw
";
        assert_eq!(
            device_mounts_in(bound.as_bytes()),
            [PathBuf::from("/srv/input")]
        );
        // A mount point that is not UTF-8 is read, not the file dropped.
        let mut latin =
            b"1 0 252:1 / / rw - ext4 /dev/vda1 rw\n2 1 0:5 / /dev rw - devtmpfs udev rw\n"
                .to_vec();
        latin.extend(b"3 1 0:5 / /media/caf\xe9 rw - devtmpfs udev rw\n");
        assert_eq!(
            device_mounts_in(&latin),
            [PathBuf::from(std::ffi::OsStr::from_bytes(
                b"/media/caf\xe9"
            ))]
        );
        // No mount at /dev: nothing, the root least of all.
        let flat = "1 0 252:1 / / rw - ext4 /dev/vda1 rw\n";
        assert!(device_mounts_in(flat.as_bytes()).is_empty());
        assert!(device_mounts_in(b"garbage\n\n1 2 3\n").is_empty());
    }
}
