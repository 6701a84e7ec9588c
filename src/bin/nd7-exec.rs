//! `nd7-exec COMMAND`: the sandbox floor's one exit. Claude Code's Bash
//! commands reach it through `nd7 hook-prefix`; it finds its session from the
//! kernel's view of its ancestors and runs COMMAND under that session's
//! current rules, taking nothing else from its arguments, working directory
//! or environment to choose them.
//!
//! Exit status: the command's; 128+N when signal N ended it; 126 when
//! nothing ran (no session, unreadable rules, a refusal), said on stderr.
//!
//! `nd7-exec --record -` is the hooks' door on macOS (see
//! [`sandbox::record_from_stdin`]): 0 when the entry is in the log, 10 when
//! the run records that event through its own hook instead, 126 otherwise.

use std::process::ExitCode;

use nd7_core::sandbox::{self, Outcome};

/// What nd7-exec exits with when it ran nothing.
const REFUSED: u8 = 126;

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let command = match <[_; 1]>::try_from(args) {
        Ok([command]) => command,
        Err(args) if args == ["--record", "-"] => return record(),
        Err(_) => {
            eprintln!("nd7-exec: expects exactly one argument, the command; nothing was run");
            eprintln!("usage: nd7-exec <command>");
            return ExitCode::from(REFUSED);
        }
    };
    match sandbox::exec_command(command) {
        Ok(Outcome::Exited(code)) => ExitCode::from(code.clamp(0, 255) as u8),
        Ok(Outcome::Signaled(sig)) => ExitCode::from((128 + sig).clamp(0, 255) as u8),
        Err(why) => {
            eprintln!("nd7-exec: {why}; the command was not run");
            ExitCode::from(REFUSED)
        }
    }
}

/// `nd7-exec --record -`: one hook's entry into the run's log (macOS).
fn record() -> ExitCode {
    match sandbox::record_from_stdin() {
        Ok(sandbox::HookAnswer::Recorded) => ExitCode::SUCCESS,
        Ok(sandbox::HookAnswer::Skipped) => ExitCode::from(sandbox::RECORD_SKIPPED),
        Err(why) => {
            eprintln!("nd7-exec: {why}; nothing was recorded");
            ExitCode::from(REFUSED)
        }
    }
}
