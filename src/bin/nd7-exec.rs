//! `nd7-exec COMMAND`: the sandbox floor's one exit. Under `nd7 run claude`
//! it is Claude Code's shell prefix (ADR-0040): Claude Code runs every Bash
//! tool call as `nd7-exec '<its command line>'`. It finds its session from
//! the kernel's view of its ancestors and runs COMMAND under that session's
//! current rules, taking nothing else from its arguments, working directory
//! or environment to choose them.
//!
//! As Claude Code's prefix it is also put before the user's shell-form hooks
//! and MCP servers: what is not a Bash tool line is run in place, under the
//! floor, as Claude Code would have run it (`/bin/sh -c COMMAND`).
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

const HELP: &str = "\
Run one command under the current rules of the nd7 session it runs in.

Usage: nd7-exec <COMMAND>

nd7 run starts Claude Code with nd7-exec as its shell prefix
(CLAUDE_CODE_SHELL_PREFIX), so every Bash command leaves the sandbox floor
here: nd7 run starts it under the floor plus the grants `nd7 allow` made,
and writes it into the run's log. nd7-exec finds its session from the
kernel's view of its ancestors; nothing it is given chooses the rules.

Arguments:
  <COMMAND>  The command line, as one argument (a shell runs it)

Exit status: the command's; 128+N when signal N ended it; 126 when nothing
ran (no session, a refusal), with the reason on standard error.
";

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let command = match <[_; 1]>::try_from(args) {
        Ok([flag]) if flag == "--help" || flag == "-h" => {
            print!("{HELP}");
            return ExitCode::SUCCESS;
        }
        Ok([command]) => command,
        Err(args) if args == ["--record", "-"] => return record(),
        Err(_) => {
            eprintln!("nd7-exec: expects exactly one argument, the command; nothing was run");
            eprintln!("Usage: nd7-exec <COMMAND> (nd7-exec --help says more)");
            return ExitCode::from(REFUSED);
        }
    };
    if sandbox::is_shell_prefix()
        && command
            .to_str()
            .and_then(nd7_core::shell_prefix::unwrap)
            .is_none()
    {
        let why = sandbox::run_in_place(command);
        eprintln!("nd7-exec: {why}; the command was not run");
        return ExitCode::from(REFUSED);
    }
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
        Ok(sandbox::HookAnswer::Explained(text)) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(why) => {
            eprintln!("nd7-exec: {why}; nothing was recorded");
            ExitCode::from(REFUSED)
        }
    }
}
