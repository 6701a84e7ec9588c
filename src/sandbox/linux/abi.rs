//! What Landlock this kernel offers, and why rules were not applied: below
//! both the rulesets (`landlock`) and the keeper's scope layer (`scope`),
//! which the keeper puts on and the rulesets consult the keeper about.

use landlock::RulesetStatus;

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
