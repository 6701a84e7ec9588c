//! Faults a test can ask for, by name, in `ND7_FAULT` (a comma-separated
//! list): test builds only (debug builds, or the `fault-injection` feature,
//! which shipped builds never enable), so a test can reach the code that
//! meets a kernel refusing what nd7 asks of it. In any other build
//! [`injected`] is `false`, and the variable is never read.
//!
//! The knobs:
//! - `no-start-time`: the kernel gives `nd7 run` no start time of its own
//!   ([`crate::run`] then starts nothing, `RunError::NoStartTime`);
//! - `no-pidfd-passing`: sockets cannot carry a sender's pidfd
//!   (`SO_PASSPIDFD`, before Linux 6.5): the exit and the door pin each
//!   caller by its pid instead, and `nd7 doctor` says so;
//! - `no-pidfd-watch`: no pidfd can watch a command the exit started, which
//!   is then checked on every 50 ms, as its `exec_end` says;
//! - `no-ptrace`: the kernel refuses `nd7 run`'s front tracing the run, which
//!   then observes no exec and says so;
//! - `small-effects-queue`: the exec observer's bound is one byte and its
//!   pipe one page, and `nd7 run` reads it only at the run's end (fallen
//!   behind), so execs past the bound are stopped and counted.
//!
//! (`nd7 record`'s and `files::replace`'s own faults, which end the process,
//! are read where they happen.)

/// Whether `ND7_FAULT` names `knob`.
#[cfg(any(debug_assertions, feature = "fault-injection"))]
pub fn injected(knob: &str) -> bool {
    std::env::var("ND7_FAULT").is_ok_and(|list| names(&list, knob))
}

/// Never, in a shipped build.
#[cfg(not(any(debug_assertions, feature = "fault-injection")))]
#[inline(always)]
pub fn injected(_knob: &str) -> bool {
    false
}

/// Whether the comma-separated `list` names `knob`, whole.
#[cfg_attr(
    not(any(debug_assertions, feature = "fault-injection")),
    allow(dead_code)
)]
fn names(list: &str, knob: &str) -> bool {
    list.split(',').any(|k| k == knob)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_knob_is_named_whole_in_the_list() {
        assert!(names("panic,no-pidfd-watch", "no-pidfd-watch"));
        assert!(names("no-start-time", "no-start-time"));
        assert!(!names("no-pidfd-watch", "no-pidfd"));
        assert!(!names("", "no-start-time"));
    }
}
