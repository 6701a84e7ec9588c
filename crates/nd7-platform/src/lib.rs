//! nd7's platform layer: what touches the machine below the commands. Kernel
//! facts ([`kernel`]: Landlock's ABI, pidfds, process identity), files opened
//! without following an agent's links ([`files`], [`safe_file`]), the
//! account's home and passwd entry ([`home`], [`passwd`]), the session log's
//! storage ([`session_log`]: the chain of `nd7_format::chain` on disk, under
//! its lock) and the faults a test build can inject ([`fault`]).
//!
//! It depends only on the pure layer (`nd7_format`), never on the commands
//! (ADR-0100).

pub mod fault;
pub mod files;
pub mod home;
pub mod kernel;
pub mod passwd;
pub mod safe_file;
pub mod session_log;
