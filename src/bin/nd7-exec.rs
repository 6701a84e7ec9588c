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
//! [`sandbox::record_hook`]): 0 when the entry is in the log, 10 when the run
//! records that event through its own hook instead, 126 otherwise.
//!
//! What is decided here: which way a command goes (a Bash tool line, or
//! something run in place), which session it belongs to (the kernel's view
//! of the ancestors, nothing else), and what a hook request on stdin is.
//! How a command is then run under the session's rules, and how a hook's
//! entry reaches the log, is the platform's, in `sandbox`.

use std::ffi::OsString;
use std::process::ExitCode;

use nd7_core::floor_wire;
use nd7_core::kernel;
use nd7_core::run_dir::{RunDir, RunDirs};
use nd7_core::sandbox::{self, Outcome};

// First: its print macros shadow the standard ones in everything below, so
// a closed pipe on standard output ends `nd7-exec --help | head -0` with 0
// and a refusal on a closed standard error still exits 126 (ADR-0026).
#[macro_use]
#[path = "nd7/out.rs"]
mod out;

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
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
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
    if is_shell_prefix()
        && command
            .to_str()
            .and_then(nd7_core::shell_prefix::unwrap)
            .is_none()
    {
        let why = sandbox::run_in_place(command);
        eprintln!("nd7-exec: {why}; the command was not run");
        return ExitCode::from(REFUSED);
    }
    match own_run().and_then(|run_dir| sandbox::run_command(&run_dir, command)) {
        Ok(Outcome::Exited(code)) => ExitCode::from(code.clamp(0, 255) as u8),
        Ok(Outcome::Signaled(sig)) => ExitCode::from((128 + sig).clamp(0, 255) as u8),
        Err(why) => {
            eprintln!("nd7-exec: {why}; the command was not run");
            ExitCode::from(REFUSED)
        }
    }
}

/// Whether this `nd7-exec` is Claude Code's shell prefix (ADR-0040):
/// `CLAUDE_CODE_SHELL_PREFIX` names this very program. Only a choice of
/// where a command runs, never of its rules: what is not a Bash tool call
/// is then run in place under the floor ([`sandbox::run_in_place`]).
fn is_shell_prefix() -> bool {
    let named = std::env::var_os(nd7_core::shell_prefix::PREFIX_VARIABLE)
        .filter(|v| !v.is_empty())
        .and_then(|v| std::fs::canonicalize(v).ok());
    let me = std::env::current_exe().and_then(std::fs::canonicalize).ok();
    named.is_some() && named == me
}

/// The run this process runs in: the first of its ancestors, as the
/// kernel reports them, that owns a run directory with an exit. Never
/// taken from the arguments, the working directory or the environment.
fn own_run() -> Result<RunDir, String> {
    let run_dirs = RunDirs::for_user().map_err(|e| e.to_string())?;
    let mut seen = Vec::new();
    run_dirs
        .find_by_ancestors(
            kernel::ancestors().inspect(|&pid| seen.push(pid)),
            sandbox::RUN_MARKER,
        )
        .ok_or_else(|| {
            format!(
                "not inside an nd7 run: no ancestor of this process ({}) has a run directory under {}",
                seen.iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
                run_dirs.root().display()
            )
        })
}

/// A hook request on stdin, as `nd7 record` sends it: the bytes of
/// [`floor_wire::HookRequest::encode`], read up to the largest request and no
/// further, with the length it announces checked.
fn read_request() -> Result<floor_wire::HookRequest, String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::io::stdin()
        .lock()
        .take(floor_wire::MAX_REQUEST as u64 + 4)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read the request: {e}"))?;
    let (prefix, body) = bytes
        .split_first_chunk::<4>()
        .ok_or("the request ended before its length")?;
    let len = floor_wire::Request::announced_len(*prefix).map_err(|e| e.to_string())?;
    if body.len() != len {
        return Err(format!(
            "the request announced {len} bytes and carried {}",
            body.len()
        ));
    }
    floor_wire::HookRequest::decode(body).map_err(|e| e.to_string())
}

/// `nd7-exec --record -`: one hook's entry into the run's log (macOS; on
/// Linux it refuses before reading anything). The entry is appended by a
/// writer no confined process can signal ([`sandbox::out_of_reach`]), which
/// this process waits for.
fn record() -> ExitCode {
    let request = match sandbox::exec_is_door().and_then(|()| read_request()) {
        Ok(request) => request,
        Err(why) => {
            eprintln!("nd7-exec: {why}; nothing was recorded");
            return ExitCode::from(REFUSED);
        }
    };
    match sandbox::out_of_reach(|| answer(&request)) {
        Ok(code) => ExitCode::from(code),
        Err(why) => {
            eprintln!("nd7-exec: {why}; nothing was recorded");
            ExitCode::from(REFUSED)
        }
    }
}

/// Appends `request` to the run's log, says on stdout what to tell the
/// model (an explain request) or on stderr why nothing was recorded, and
/// returns the exit code for it.
fn answer(request: &floor_wire::HookRequest) -> u8 {
    match sandbox::record_hook(request) {
        Ok(sandbox::HookAnswer::Recorded) => 0,
        Ok(sandbox::HookAnswer::Skipped) => sandbox::RECORD_SKIPPED,
        Ok(sandbox::HookAnswer::Explained(text)) => {
            print!("{text}");
            0
        }
        Err(why) => {
            eprintln!("nd7-exec: {why}; nothing was recorded");
            REFUSED
        }
    }
}
