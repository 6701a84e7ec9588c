//! nd7's pure layer: what nd7 writes and reads, and what it decides, as
//! values. The hash chain and its entries ([`chain`], [`hook`],
//! [`codex_hook`], [`run_entry`], [`effect`]), the vault's wire format and its crypto
//! ([`vault`]), the rules of the floor and their rendering for Landlock and
//! Seatbelt ([`policy`], [`shell_prefix`]), and how text an agent chose is
//! made inert before anyone prints it ([`safe`]).
//!
//! Nothing here opens a file, reads a clock or draws randomness: those come in
//! as arguments, so every function is tested on every OS, and known-answer
//! vectors pin the bytes. The compiler keeps it that way: this crate depends
//! on no crate of nd7's, and `unsafe` is forbidden (ADR-0100).

#![forbid(unsafe_code)]

pub mod chain;
pub mod codex_hook;
pub mod effect;
pub mod floor_wire;
pub mod hook;
pub mod policy;
pub mod run_entry;
pub mod safe;
pub mod shell_prefix;
pub mod vault;
