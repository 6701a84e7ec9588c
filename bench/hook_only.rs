//! An experiment, not a shipped binary: `nd7 record` alone, the same code as
//! the `nd7` binary's hook path (src/bin/nd7/hooks.rs) in a binary that holds
//! nothing else, to measure what the size of `nd7` costs a hook
//! (bench/hookpath.sh, docs/benchmarks.md).
//! usage: hook_only record [--agent NAME] [--run-hook] < payload
#![allow(dead_code)]

use std::process::ExitCode;

#[path = "../src/bin/nd7/hooks.rs"]
mod hooks;

fn main() -> ExitCode {
    let early = nd7_core::record::invocation_now();
    let args: Vec<_> = std::env::args_os().skip(2).collect();
    hooks::record(early, &args)
}
