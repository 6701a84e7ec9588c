//! Landlock: applying a session's rules to the calling process. Landlock
//! confines a process and everything it starts, cannot be loosened once
//! applied, and needs no privilege.
//!
//! nd7 requires the file-system rights of Landlock ABI 3 (Linux 6.2), which
//! include `Truncate`; without it a confined process could still truncate
//! files it may not write. A kernel that cannot enforce all of them is refused:
//! the rules are applied completely or not at all.

pub mod exit;
pub mod ns;
pub mod proc;

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, RestrictionStatus, Ruleset, RulesetAttr,
    RulesetCreated, RulesetCreatedAttr, RulesetStatus, path_beneath_rules,
};

use crate::policy::LandlockRules;

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

/// A directory's entries, for [`crate::policy::complement`]; an unreadable
/// directory has none, so nothing beneath it is allowed.
pub fn list_dir(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default()
}

/// The ruleset for `rules`, every right required: with HardRequirement each
/// step fails rather than drop a right the kernel lacks. Paths that cannot be
/// opened (gone since the rules were computed) are skipped: an allow that
/// cannot be placed allows nothing.
fn build(rules: &LandlockRules) -> Result<RulesetCreated, SandboxError> {
    let unsupported = |e: &dyn std::fmt::Display| SandboxError::Unsupported(e.to_string());
    let all = AccessFs::from_all(REQUIRED_ABI);
    let read = AccessFs::from_read(REQUIRED_ABI);
    Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(all)
        .map_err(|e| unsupported(&e))?
        .create()
        .map_err(|e| unsupported(&e))?
        .add_rules(path_beneath_rules(&rules.read, read))
        .map_err(|e| unsupported(&e))?
        .add_rules(path_beneath_rules(&rules.write, all))
        .map_err(|e| unsupported(&e))
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
    // A ruleset that `build` returns is enforced in full.
    let ruleset: Option<OwnedFd> = build(rules)?.into();
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
