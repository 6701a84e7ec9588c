//! nd7 makes an AI coding agent's work accountable: Claude Code's hooks call
//! `nd7 record`, and every event becomes one entry of an append-only,
//! BLAKE3 hash-chained log per session, which `nd7 verify` walks.
//!
//! The library holds everything; the binaries parse arguments and call it.
//!
//! - [`hook`]: Claude Code's payloads, typed, and the event each becomes. Pure.
//! - [`chain`]: the sealed-line format, the chain walk and the head rules. Pure.
//! - [`session_log`]: the log on disk: lock, head, append, verify.
//! - [`record`]: what `nd7 record` does with one payload.
//! - [`hook_prefix`]: the PreToolUse reply that routes Bash through `nd7-exec`. Pure.
//! - [`vault`]: the wire format and cryptography a machine and the vault share. Pure.
//! - [`ship`]: `nd7 enroll`, `nd7 ship` and the admin read-back: files and network.
//! - `vault_server` (feature `vault-server`): the `nd7-vault` server and its storage.
//! - [`cli`], [`setup`]: the command line's definition; `nd7 setup` and `nd7 doctor`.
//!
//! What a clean chain proves is limited, and nd7 says so wherever it reports
//! one: the log records what the agent said it did (intent), not what ran
//! (effect), and it checks itself, so anyone able to write the log's directory
//! can rewrite the whole chain.

pub mod chain;
pub mod cli;
pub mod deferred;
pub mod hook;
pub mod hook_prefix;
pub mod policy;
pub mod record;
pub mod run;
pub mod sandbox;
#[cfg(feature = "self-update")]
pub mod self_update;
pub mod session;
pub mod session_log;
pub mod setup;
pub mod ship;
pub mod vault;
#[cfg(feature = "vault-server")]
pub mod vault_server;
