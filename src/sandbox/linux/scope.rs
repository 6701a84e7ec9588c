//! The session's scope layer: the Landlock layer the keeper puts the
//! session under (`super::keeper::scope`) so that signals and abstract unix
//! sockets stay inside it. Apart from `landlock`'s rulesets, which build
//! the floor from the keeper's answers, so that the keeper stands on this
//! and not on them.

use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetStatus, Scope,
};

use super::abi::{SandboxError, abi};

/// Puts the calling process under a Landlock layer that scopes signals and
/// abstract unix sockets (ABI 6): from then on it and everything it starts
/// can signal, or connect to an abstract socket of, only processes beneath
/// this layer. Returns `false`, changing nothing, on a kernel without
/// scopes.
///
/// The layer restricts no file access, but it must say so for `Refer`:
/// Landlock treats moving a file between directories as denied in every
/// layer unless that layer allows it, so a layer silent about it would make
/// every cross-directory `rename` and `link` below it fail with `EXDEV` once
/// the floor's rules are stacked on top. It allows it beneath `/`.
pub fn scope_self() -> Result<bool, SandboxError> {
    if abi().unwrap_or(0) < 6 {
        return Ok(false);
    }
    let unsupported = |e: &dyn std::fmt::Display| SandboxError::Unsupported(e.to_string());
    let root = landlock::PathFd::new("/").map_err(|e| unsupported(&e))?;
    let status = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::Refer)
        .and_then(|r| r.scope(Scope::from_all(ABI::V6)))
        .and_then(|r| r.create())
        .and_then(|r| r.add_rule(landlock::PathBeneath::new(root, AccessFs::Refer)))
        .and_then(|r| r.restrict_self())
        .map_err(|e| unsupported(&e))?;
    match status.ruleset {
        RulesetStatus::FullyEnforced => Ok(true),
        other => Err(SandboxError::Partial(other)),
    }
}
