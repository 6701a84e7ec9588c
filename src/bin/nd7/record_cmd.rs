//! `nd7 record`: exits 0 whatever happens and never writes to standard
//! output, because Claude Code reads a hook's output as instructions and takes
//! status 2 as "block". A failure is one line on standard error.
//!
//! "Whatever happens" includes the ways a Rust process ends without returning
//! from `main`. Release builds have `panic = "abort"`, so a panic cannot be
//! caught; running out of memory and overflowing the stack abort too. Two
//! guards, set before anything is read:
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
use std::sync::atomic::{AtomicBool, Ordering};

use nd7_core::hook::Invocation;
use nd7_core::{record, session_log};

/// Set once a failure has been reported, so an abort after a reported panic
/// adds no second line.
static REPORTED: AtomicBool = AtomicBool::new(false);

const ABORTED: &[u8] =
    b"nd7 record: aborted (out of memory, stack overflow or an internal error); the event may not be recorded\n";

/// `nd7 record`, with the arguments after `record`: there should be none.
pub fn run(invocation: Invocation, args: &[OsString]) -> ExitCode {
    guard();
    if !args.is_empty() {
        say(format_args!(
            "nd7 record: takes no arguments, got {args:?}; nothing recorded (the hook payload comes on standard input)"
        ));
        return ExitCode::SUCCESS;
    }
    inject_fault();
    let outcome = record::read_payload(std::io::stdin().lock()).and_then(|input| {
        let state = session_log::state_dir()?;
        record::record(&invocation, &input, &session_log::sessions_dir(&state))
    });
    match outcome {
        Ok(recorded) => {
            if let Some(bytes) = recorded.omitted {
                say(format_args!(
                    "nd7 record: payload of {bytes} bytes is over the {} byte limit; recorded its size and BLAKE3 only (session {}, entry {})",
                    record::MAX_STORED_PAYLOAD,
                    recorded.session_id,
                    recorded.appended.seq
                ));
            }
        }
        Err(e) => say(format_args!("nd7 record: {e}; nothing recorded")),
    }
    ExitCode::SUCCESS
}

/// One line on standard error; a closed or broken standard error is ignored.
fn say(line: std::fmt::Arguments<'_>) {
    REPORTED.store(true, Ordering::SeqCst);
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// Installs the panic hook and the SIGABRT handler described above.
fn guard() {
    std::panic::set_hook(Box::new(|info| {
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
                "nd7 record: internal error ({msg} at {at}); the event may not be recorded"
            );
        }
        signal_hook::low_level::exit(0);
    }));
    // SAFETY: the action runs inside a signal handler, so it may only do
    // async-signal-safe things: an atomic swap, write(2) on file descriptor 2
    // and _exit(2). It allocates nothing and takes no lock. Descriptor 2 is
    // never closed by nd7; had the caller closed it, the write fails with
    // EBADF and nothing else happens.
    let registered = unsafe {
        signal_hook::low_level::register(signal_hook::consts::SIGABRT, || {
            if !REPORTED.swap(true, Ordering::SeqCst) {
                let stderr = std::os::fd::BorrowedFd::borrow_raw(2);
                let _ = rustix::io::write(stderr, ABORTED);
            }
            signal_hook::low_level::exit(0);
        })
    };
    if let Err(e) = registered {
        say(format_args!(
            "nd7 record: warning: cannot handle SIGABRT ({e}); an abort would end this hook with status 134"
        ));
        REPORTED.store(false, Ordering::SeqCst);
    }
}

/// Test builds only (debug builds, or the `fault-injection` feature, which
/// shipped builds never enable): `ND7_FAULT` makes the recorder fail in one
/// of the ways the guards must survive. Compiled out of release builds.
#[cfg(any(debug_assertions, feature = "fault-injection"))]
fn inject_fault() {
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
fn inject_fault() {}
