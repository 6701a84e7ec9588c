//! Standard output and standard error for nd7's binaries (`nd7`, `nd7-exec`,
//! `nd7-vault`), with one rule for a
//! reader that went away: a closed pipe on standard output (`nd7 verify --all
//! | head -1`) ends the command quietly with status 0, as ripgrep does, rather
//! than with a panic (which `panic = "abort"` turns into SIGABRT).
//!
//! This module defines `println!`, `print!`, `eprintln!` and `eprint!`, which
//! shadow the standard library's everywhere in the binary after the `mod out`
//! line, so every command, present or future, follows the rule without
//! calling anything by a new name:
//!
//! - standard output: a broken pipe exits 0 at once; any other write error
//!   (a full disk behind `>`) says so on standard error and exits 2;
//! - standard error: errors are ignored, since there is nowhere left to report
//!   them, and the command goes on to its own exit status.
//!
//! `nd7 record`, `nd7 hook-explain` and `nd7 hook-route` write their few
//! bytes themselves: they exit 0 whatever happens.

// Shared by nd7, nd7-exec and nd7-vault, which do not each use every piece.
#![allow(unused_macros, dead_code)]

use std::io::{self, Write};

/// `println!` whose failures follow the module's rule.
macro_rules! println {
    () => {
        $crate::out::stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::out::stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` whose failures follow the module's rule.
macro_rules! print {
    ($($arg:tt)*) => {
        $crate::out::stdout(format_args!($($arg)*))
    };
}

/// `eprintln!` that never panics.
macro_rules! eprintln {
    () => {
        $crate::out::stderr(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::out::stderr(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprint!` that never panics.
macro_rules! eprint {
    ($($arg:tt)*) => {
        $crate::out::stderr(format_args!($($arg)*))
    };
}

/// Writes to standard output and flushes, so that a failure shows here and
/// not at exit.
pub fn stdout(text: std::fmt::Arguments<'_>) {
    let mut out = io::stdout().lock();
    let written = out.write_fmt(text).and_then(|()| out.flush());
    drop(out);
    if let Err(e) = written {
        failed(&e);
    }
}

/// Writes bytes to standard output, as [`stdout`] does text.
pub fn stdout_bytes(bytes: &[u8]) {
    let mut out = io::stdout().lock();
    let written = out.write_all(bytes).and_then(|()| out.flush());
    drop(out);
    if let Err(e) = written {
        failed(&e);
    }
}

pub fn stderr(text: std::fmt::Arguments<'_>) {
    let _ = io::stderr().lock().write_fmt(text);
}

/// Ends the process after standard output failed: 0 when the reader closed
/// the pipe, 2 otherwise.
fn failed(e: &io::Error) -> ! {
    if e.kind() == io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    stderr(format_args!(
        "{}: cannot write to standard output: {e}\n",
        env!("CARGO_BIN_NAME")
    ));
    std::process::exit(2)
}
