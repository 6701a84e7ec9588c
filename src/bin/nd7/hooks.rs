//! The commands agents run as hooks, `nd7 record` (Claude Code's and Codex's)
//! and `nd7 hook-explain`: they exit 0 whatever happens, because Claude Code
//! takes a hook's status 2 as "block" and any other failure as an error to
//! show (Codex, likewise, a non-zero status as a failed hook). `nd7 record`
//! also never writes to standard output, which both read as instructions;
//! `nd7 hook-explain` writes there only the reply that tells the model what
//! nd7's floor refused. A failure is one line on standard error.
//!
//! "Whatever happens" includes the ways a Rust process ends without returning
//! from `main`. Release builds have `panic = "abort"`, so a panic cannot be
//! caught; running out of memory and overflowing the stack abort too.
//! [`guard`] sets two things before anything is read (ADR-0025):
//!
//! - a panic hook that reports the panic and ends the process with 0 (in every
//!   build, before any unwinding or abort);
//! - a SIGABRT handler that ends it with 0: every abort (an allocation that
//!   failed, a stack overflow, a panic inside the panic hook, an abort in C
//!   code) raises SIGABRT first.
//!
//! What no process can catch (SIGKILL from the OOM killer, a hook timeout)
//! still ends it by that signal. An interrupted append leaves the log as a
//! crash does: docs/log-format.md says how the next append repairs it.

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use nd7_core::hook::{Agent, Invocation};
use nd7_core::record;

/// A command run as a hook.
#[derive(Clone, Copy)]
pub enum Hook {
    Record = 0,
    Explain = 1,
    Route = 2,
}

impl Hook {
    fn name(self) -> &'static str {
        match self {
            Hook::Record => "record",
            Hook::Explain => "hook-explain",
            Hook::Route => "hook-route",
        }
    }

    /// What a failure means for this hook's work.
    fn consequence(self) -> &'static str {
        match self {
            Hook::Record => "the event may not be recorded",
            Hook::Explain => "the model is not told what the sandbox refused",
            Hook::Route => "the command runs under the floor alone, without the session's grants",
        }
    }
}

/// The line the SIGABRT handler writes, by [`Hook`]: fixed bytes, since a
/// signal handler may not format or allocate.
const ABORTED: [&[u8]; 3] = [
    b"nd7 record: aborted (out of memory, stack overflow or an internal error); the event may not be recorded\n",
    b"nd7 hook-explain: aborted (out of memory, stack overflow or an internal error); the model is not told what the sandbox refused\n",
    b"nd7 hook-route: aborted (out of memory, stack overflow or an internal error); the command runs under the floor alone, without the session's grants\n",
];

/// The hook this process runs, as an index into [`ABORTED`].
static RUNNING: AtomicUsize = AtomicUsize::new(0);

/// Set once a failure has been reported, so an abort after a reported panic
/// adds no second line.
static REPORTED: AtomicBool = AtomicBool::new(false);

/// `nd7 record`, with the arguments after `record`: none (Claude Code), or
/// `--agent NAME` for another agent's hooks (Codex's are shell strings
/// ending in `record --agent codex`), and `--run-hook` on the copy of the
/// hook `nd7 run claude` passes in its own settings.
pub fn record(invocation: Invocation, args: &[OsString]) -> ExitCode {
    guard(Hook::Record);
    let run_hook = args.iter().any(|a| a == "--run-hook");
    let rest: Vec<OsString> = args
        .iter()
        .filter(|a| *a != "--run-hook")
        .cloned()
        .collect();
    let agent = match record_agent(&rest) {
        Ok(agent) => agent,
        Err(why) => {
            say(format_args!(
                "nd7 record: arguments {args:?}: {why}; nothing recorded (usage: nd7 record [--agent claude-code|codex], the hook payload on standard input)"
            ));
            return ExitCode::SUCCESS;
        }
    };
    inject_fault();
    let outcome = record::read_payload(std::io::stdin().lock())
        .and_then(|input| record::deliver(agent, &invocation, &input, run_hook));
    match outcome {
        Ok(record::Delivered::Direct(recorded)) => {
            if let Some(Err(e)) = &recorded.transcript {
                say(format_args!(
                    "nd7 record: the transcript was not anchored: {e} (session {})",
                    recorded.session_id
                ));
            }
            if let Some(bytes) = recorded.omitted {
                say(format_args!(
                    "nd7 record: payload of {bytes} bytes is over the {} byte limit; recorded its size and BLAKE3 only (session {}, entry {})",
                    record::entry::MAX_STORED_PAYLOAD,
                    recorded.session_id,
                    recorded.appended.seq
                ));
            }
        }
        Ok(record::Delivered::Door {
            pid,
            answer: nd7_core::sandbox::HookAnswer::Recorded,
            omitted: Some(bytes),
        }) => say(format_args!(
            "nd7 record: payload of {bytes} bytes is over the {} byte limit; recorded its size and BLAKE3 only (nd7 run session {pid})",
            record::entry::MAX_STORED_PAYLOAD,
        )),
        Ok(record::Delivered::Door { .. }) => {}
        Err(e) => say(format_args!("nd7 record: {e}; nothing recorded")),
    }
    ExitCode::SUCCESS
}

/// `nd7 hook-explain`: a finished tool call's payload in; under `nd7 run`,
/// when the floor refused a path it named, the reply that tells the model
/// (additional context) out. Nothing is printed otherwise.
pub fn explain(invocation: Invocation) -> ExitCode {
    guard(Hook::Explain);
    inject_fault();
    let input = match record::read_payload(std::io::stdin().lock()) {
        Ok(input) => input,
        Err(e) => {
            say(format_args!("nd7 hook-explain: {e}"));
            return ExitCode::SUCCESS;
        }
    };
    let event = serde_json::from_slice::<serde_json::Value>(&input)
        .ok()
        .and_then(|p| p.get("hook_event_name")?.as_str().map(str::to_string));
    match (record::explain(&invocation, &input), event) {
        (Ok(Some(text)), Some(event)) => {
            let reply = nd7_core::policy::refusal::hook_reply(&event, &text);
            // Not println!: a failed write must not change the exit status.
            let _ = writeln!(std::io::stdout(), "{reply}");
        }
        (Ok(_), _) => {}
        (Err(e), _) => say(format_args!(
            "nd7 hook-explain: {e}; the model is not told what the sandbox refused"
        )),
    }
    ExitCode::SUCCESS
}

/// `nd7 hook-route`: a Codex PreToolUse payload in; under `nd7 run`, for a
/// shell call, the reply that makes the command `'<nd7-exec>' '<command>'`
/// out, so it leaves the floor through the exit and runs under the
/// session's current grants. `nd7-exec` is the one beside this nd7, the
/// binary `nd7 run` checked. Nothing is printed otherwise, and then the
/// command runs as it is, under the floor alone, which is never wider.
pub fn route() -> ExitCode {
    guard(Hook::Route);
    inject_fault();
    if std::env::var_os(record::RUN_VARIABLE).is_none() {
        say(format_args!(
            "nd7 hook-route: not under nd7 run ({} is not set); the command is not routed",
            record::RUN_VARIABLE
        ));
        return ExitCode::SUCCESS;
    }
    let input = match record::read_payload(std::io::stdin().lock()) {
        Ok(input) => input,
        Err(e) => {
            say(format_args!(
                "nd7 hook-route: {e}; the command is not routed"
            ));
            return ExitCode::SUCCESS;
        }
    };
    let exec = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .map(|nd7| nd7.with_file_name("nd7-exec"));
    let exec = match exec {
        Ok(exec) => exec,
        Err(e) => {
            say(format_args!(
                "nd7 hook-route: cannot find nd7-exec beside nd7 ({e}); the command is not routed"
            ));
            return ExitCode::SUCCESS;
        }
    };
    if let Some(reply) = nd7_core::codex::run::route_reply(&input, &exec.to_string_lossy()) {
        // Not println!: a failed write must not change the exit status.
        let _ = writeln!(std::io::stdout(), "{reply}");
    }
    ExitCode::SUCCESS
}

/// The agent `nd7 record`'s arguments name: none is Claude Code;
/// `--agent NAME` or `--agent=NAME` another. Anything else is refused.
fn record_agent(args: &[OsString]) -> Result<Agent, String> {
    let text: Vec<_> = args.iter().map(|a| a.to_string_lossy()).collect();
    let unexpected = || "expected none, or --agent NAME".to_string();
    let name = match text.as_slice() {
        [] => return Ok(Agent::ClaudeCode),
        [flag, name] if flag == "--agent" => name.as_ref(),
        [one] => one.strip_prefix("--agent=").ok_or_else(unexpected)?,
        _ => return Err(unexpected()),
    };
    Agent::from_name(name).ok_or_else(|| format!("unknown agent {name:?}"))
}

/// One line on standard error; a closed or broken standard error is ignored.
fn say(line: std::fmt::Arguments<'_>) {
    REPORTED.store(true, Ordering::SeqCst);
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// Installs the panic hook and the SIGABRT handler described above, for
/// `hook`. Call it first.
pub fn guard(hook: Hook) {
    RUNNING.store(hook as usize, Ordering::SeqCst);
    std::panic::set_hook(Box::new(move |info| {
        if !REPORTED.swap(true, Ordering::SeqCst) {
            let msg = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_default();
            let at = info.location().map(|l| l.to_string()).unwrap_or_default();
            let _ = writeln!(
                std::io::stderr(),
                "nd7 {}: internal error ({msg} at {at}); {}",
                hook.name(),
                hook.consequence()
            );
        }
        signal_hook::low_level::exit(0);
    }));
    // SAFETY: the action runs inside a signal handler, so it may only do
    // async-signal-safe things: atomic loads and a swap, write(2) on file
    // descriptor 2 and _exit(2). It allocates nothing and takes no lock.
    // Descriptor 2 is never closed by nd7; had the caller closed it, the
    // write fails with EBADF and nothing else happens.
    let registered = unsafe {
        signal_hook::low_level::register(signal_hook::consts::SIGABRT, || {
            if !REPORTED.swap(true, Ordering::SeqCst) {
                let line = ABORTED[RUNNING.load(Ordering::SeqCst) % ABORTED.len()];
                let stderr = std::os::fd::BorrowedFd::borrow_raw(2);
                let _ = rustix::io::write(stderr, line);
            }
            signal_hook::low_level::exit(0);
        })
    };
    if let Err(e) = registered {
        say(format_args!(
            "nd7 {}: warning: cannot handle SIGABRT ({e}); an abort would end this hook with status 134",
            hook.name()
        ));
        REPORTED.store(false, Ordering::SeqCst);
    }
}

/// Test builds only (debug builds, or the `fault-injection` feature, which
/// shipped builds never enable): `ND7_FAULT` makes a hook fail in one of the
/// ways the guards must survive. Compiled out of release builds.
#[cfg(any(debug_assertions, feature = "fault-injection"))]
pub fn inject_fault() {
    #[allow(unconditional_recursion)]
    fn overflow(depth: u64) -> u64 {
        let frame = std::hint::black_box([depth; 512]);
        overflow(depth + 1) + frame[(depth % 512) as usize]
    }
    match std::env::var("ND7_FAULT").as_deref() {
        Ok("panic") => panic!("injected fault"),
        Ok("stack-overflow") => {
            std::hint::black_box(overflow(0));
        }
        Ok("out-of-memory") => {
            std::alloc::handle_alloc_error(std::alloc::Layout::new::<[u8; 1 << 20]>())
        }
        _ => {}
    }
}

#[cfg(not(any(debug_assertions, feature = "fault-injection")))]
pub fn inject_fault() {}
