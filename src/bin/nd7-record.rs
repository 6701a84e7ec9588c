//! `nd7-record`: `nd7 record` in a binary that holds nothing else, so that
//! the hook every agent event runs starts a small program (ADR-0151).
//! `nd7-record ARGS` is `nd7 record ARGS`: the same code (src/bin/nd7/hooks.rs),
//! the same flags (`--agent NAME`, `--run-hook`), the same entries; it exits
//! 0 whatever happens and never writes to standard output. `nd7 setup` and
//! `nd7 run` register it where it sits beside `nd7`, once it has answered
//! `--version`, its one other use, with the version nd7 expects (ADR-0153).

use std::io::Write;
use std::process::ExitCode;

// `nd7` also holds the other hooks (`hook-explain`, `hook-route`); this
// binary runs only `record`.
#[allow(dead_code)]
#[path = "nd7/hooks.rs"]
mod hooks;

fn main() -> ExitCode {
    // Take the time before anything else, so `ts` marks when the hook fired.
    let early = nd7_core::record::invocation_now();
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    // Setup, doctor and nd7 run asking which recorder this is; no hook
    // passes this argument alone.
    if args.len() == 1 && args[0] == nd7_core::setup::VERSION_ARG {
        let _ = writeln!(std::io::stdout(), "{}", nd7_core::setup::RECORDER_VERSION);
        return ExitCode::SUCCESS;
    }
    hooks::record(early, &args)
}
