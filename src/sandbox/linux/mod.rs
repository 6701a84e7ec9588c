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

pub mod door;
pub mod exit;
pub mod proc;

use std::collections::BTreeSet;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use landlock::{
    ABI, Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, RestrictionStatus,
    Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus,
};
use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use crate::policy::{Identity, LandlockRules, Policy, landlock_rules, write_rules};
use crate::sandbox::{Dropped, PinError};
use crate::session::Session;

/// The Landlock ABI whose file-system rights nd7 requires.
pub const REQUIRED_ABI: ABI = ABI::V3;

/// Why the rules were not applied.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error(
        "this kernel cannot enforce nd7's rules with Landlock (Linux 6.2 or newer, with Landlock enabled, is needed): {0}"
    )]
    Unsupported(String),
    #[error(
        "the kernel would enforce nd7's rules only partly ({0:?}); refusing to run with a weaker sandbox"
    )]
    Partial(RulesetStatus),
}

/// Opens `path` (absolute) as a rule descriptor, following no symbolic link
/// in any component: a link anywhere on the way fails with `ELOOP`.
pub fn open_nofollow(path: &Path, flags: OFlags) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat2(
        rustix::fs::CWD,
        path,
        flags | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS,
    )
}

/// What `path` leads to now, without following links.
pub fn pin(path: &Path) -> Result<Identity, PinError> {
    let fd = open_nofollow(path, OFlags::PATH).map_err(pin_error)?;
    let stat = rustix::fs::fstat(&fd).map_err(|e| PinError::Io(e.into()))?;
    Ok(Identity {
        dev: stat.st_dev,
        ino: stat.st_ino,
    })
}

fn pin_error(e: Errno) -> PinError {
    match e {
        Errno::LOOP => PinError::Link,
        Errno::NOENT | Errno::NOTDIR => PinError::Missing,
        other => PinError::Io(other.into()),
    }
}

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
    let confinement = confinement(ruleset(&[&opened])?)?;
    let _ = FLOOR.set(opened);
    Ok(confinement)
}

/// Write roots and grants already reported as left out, so each is said once.
static REPORTED: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());

/// The confinement for one command through the exit: the floor's rules (as
/// opened when the session started) plus the grants, each checked against
/// its pin and opened now. A grant left out is also taken off the session's
/// record (it fails closed, and `nd7 allow` can make it again) and reported
/// on `nd7 run`'s standard error; the caller writes each one into the run's log.
pub fn prepare_command(
    session: &Session,
    policy: &Policy,
) -> Result<(Confinement, Vec<Dropped>), SandboxError> {
    let (ruleset, dropped) = match FLOOR.get() {
        Some(floor) => {
            let (grants, dropped) = pinned(policy, &policy.grants);
            let write = write_rules(policy, &grants, &list_dir);
            let opened = open_rules(&LandlockRules {
                read: Vec::new(),
                write,
            });
            (ruleset(&[floor, &opened])?, dropped)
        }
        None => {
            let (rules, dropped) = command_rules(policy, &policy.command_writes());
            (ruleset(&[&open_rules(&rules)])?, dropped)
        }
    };
    for d in &dropped {
        if d.grant {
            let _ = session.change_policy(|p| (p.deny(&d.path), ()));
        }
        let new = REPORTED
            .lock()
            .map(|mut r| r.insert(d.path.clone()))
            .unwrap_or(true);
        if new || d.grant {
            eprintln!("nd7 run: {d}");
        }
    }
    Ok((confinement(ruleset)?, dropped))
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
}

/// Builds the ruleset for `rules`, failing unless the kernel enforces all of it.
pub fn prepare(rules: &LandlockRules) -> Result<Confinement, SandboxError> {
    confinement(build(rules)?)
}

/// A ruleset [`ruleset`] built (so enforced in full), kept for a child.
fn confinement(ruleset: RulesetCreated) -> Result<Confinement, SandboxError> {
    let ruleset: Option<OwnedFd> = ruleset.into();
    ruleset
        .map(|ruleset| Confinement { ruleset })
        .ok_or_else(|| SandboxError::Unsupported("Landlock is not enabled".into()))
}

impl Confinement {
    /// Arranges for the process `command` starts to apply the ruleset to
    /// itself, with `no_new_privs`, just before it execs; if either call
    /// fails the exec does not happen.
    pub fn confine(&self, command: &mut Command) {
        let fd = self.ruleset.as_raw_fd();
        // SAFETY: the closure runs in the child between fork and exec, where
        // only async-signal-safe calls are sound. It makes two raw system
        // calls and reads errno, allocating nothing and taking no lock. `fd`
        // stays open in the parent for as long as `self` lives, which is
        // until `spawn` returns, and fork copies it into the child.
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::syscall(libc::SYS_landlock_restrict_self, fd, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
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

/// The Landlock ABI the running kernel offers, `None` when it has none.
pub fn abi() -> Option<u32> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with this flag the kernel reads no attribute (a null pointer
    // and size 0 are what it requires) and returns the ABI version, or -1
    // with errno set; nothing in this process is touched.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(v).ok().filter(|&v| v > 0)
}
