//! `nd7 run PROGRAM [ARGS]`: the program and everything it starts under the
//! sandbox floor, for the life of one run.
//!
//! In order: the binaries must be writable by nobody but the user (and
//! root), or a process inside could replace the exit; the kernel must be able
//! to enforce the floor in full; the run directory is made (stale ones of
//! dead `nd7 run`s removed first); the grants it starts with are made
//! (`run_grants`); the exit is opened; the program starts confined — for
//! Claude Code with `nd7-exec` as its shell prefix (ADR-0040) and its own
//! sandbox off, for Codex with its shell calls routed to `nd7-exec` by a
//! hook and its own sandbox off (`run_codex`, ADR-0056, ADR-0057); `nd7 run` waits, passing on SIGTERM and SIGHUP, then ends
//! the run's remaining commands and removes the run directory,
//! whatever way the program ended. On Linux `nd7 run` runs in a child of
//! `nd7 run`; `nd7 run` itself stays outside as its keeper, which ends every
//! process the run left behind ([`sandbox::keep_run`]).
//!
//! The start is a value per phase ([`phases`]), each made only by the one
//! before it, so that a step out of order does not compile: the checks
//! ([`phases::Checked`]), the split into keeper and `nd7 run`, the floor's
//! policy planned, the files that run later held, the run's chain started,
//! the floor confined, the exit opened, the agent's command prepared, the
//! program running, and its end.

mod checks;
mod claude;
mod end;
mod error;
mod head_start;
mod options;
mod phases;
mod terminal;
mod version_cache;

pub use checks::binary_checks;
pub use end::CHANGED_STATUS;
pub use error::RunError;
pub use options::Options;

use phases::{Checked, Split};

/// Runs `nd7 run`; `announce` gets the line to show on stderr once the
/// session exists. Returns the exit code to leave with: the program's, or
/// 128+N when signal N ended it.
pub fn run(options: &Options, announce: impl Fn(&str)) -> Result<i32, RunError> {
    let kept = match Checked::check()?.split()? {
        Split::Done(code) => return Ok(code),
        Split::Run(kept) => kept,
    };
    let running = kept
        .plan(options)?
        .hold()?
        .start_chain(options)?
        .confine()?
        .open_exit(options)?
        .prepare(options)?
        .start(options, &announce)?;
    Ok(running.wait(options)?.end(&announce))
}
