//! nd7 makes an AI coding agent's work accountable: Claude Code's and Codex's
//! hooks call `nd7 record`, and every event becomes one entry of an
//! append-only, BLAKE3 hash-chained log per session, which `nd7 verify` walks.
//!
//! The library holds the commands; the binaries parse arguments and call it.
//! The modules below marked *Pure* (but `transcript`'s and `read`'s) are the
//! crate `nd7_format`'s, and `session_log`, `safe_file`, `files`, `home`,
//! `fault`, `kernel` and `passwd` are `nd7_platform`'s, re-exported here under
//! their old names so every path holds (ADR-0100); `vault_server` is the crate
//! `nd7_vault_server`.
//!
//! - [`agents`]: one adapter per agent (Claude Code, Codex): what the recorder, the door,
//!   the transcript's anchoring and `nd7 run` ask of an agent instead of matching on it.
//! - [`hook`]: Claude Code's payloads, typed, and the event each becomes. Pure.
//! - [`codex`]: Codex's payloads (pure) and its rollout file, read for what
//!   the payloads leave out: the CLI's version and how each call ended.
//! - [`chain`]: the sealed-line format, the chain walk and the head rules. Pure.
//! - [`session_log`]: the log on disk: lock, head, append, verify.
//! - [`floor_wire`]: what `nd7-exec`, `nd7 record` and `nd7 run` say over the exit's and the door's sockets. Pure.
//! - [`record`]: what `nd7 record` does with one payload: append it, or hand it to `nd7 run`.
//! - [`run_entry`]: the entries nd7 writes from outside the floor, and a run's reconciliation. Pure.
//! - [`effect`]: what ran, as the exec observer saw it (`effect:nd7` entries). Pure.
//! - [`run_log`]: a run's chain on disk: the door's appends and nd7's own entries.
//! - [`refusals`]: the floor's refusals a run is told of: judged, logged, explained, summed up.
//! - [`shell_prefix`]: how Bash leaves the floor under `nd7 run claude`: the Bash tool's line read back, the settings. Pure.
//! - [`transcript`]: Claude Code's own transcript anchored in the chain, and checked against it.
//! - [`safe_file`]: reading a file the agent can change: no links, one name, bounded.
//! - [`files`]: writing a file whole (one atomic replace, its mode and durability said),
//!   and [`files::IoContext`], what every I/O failure names.
//! - [`home`]: the home directory and the XDG base directories.
//! - [`fault`]: the kernel refusals a test can ask for (`ND7_FAULT`; test builds only).
//! - [`vault`]: the wire format and cryptography a machine and the vault share. Pure.
//! - [`http_client`]: nd7's one HTTP client (ureq), and whom its TLS trusts.
//! - [`ship`]: `nd7 enroll` and `nd7 ship`: the vault's requests (`client`), enrolment
//!   (`enrol`), the shipping pipeline (`pipeline`), the receipts kept (`receipts`).
//! - [`vault_admin`]: `nd7 admin`: keys, tokens, and reading a session back, trusting the vault for nothing.
//! - `vault_server` (feature `vault-server`): the `nd7-vault` server and its storage.
//! - [`read`]: `nd7 sessions`, `nd7 show` and `nd7 search`: the record read back.
//! - [`policy`]: a run's rules and their rendering for Landlock and Seatbelt. Pure.
//! - [`kernel`]: what the kernel says about processes (start time, ancestors) and paths (pins).
//! - [`modes`]: unsafe modes on `~/.nd7`, nd7's state and the credential stores (refused or warned).
//! - [`secret_links`]: hard links to a credential store's file from outside, which stop `nd7 run`.
//! - [`run_dir`]: a run's directory under `~/.nd7/runs` (not a log's session), its record and grants.
//! - [`sandbox`]: the platform floors, the exit and the door; with [`kernel`] (and setup's timer
//!   code), all `cfg(target_os)` is here.
//! - [`run`]: `nd7 run`; [`run_grants`]: the grants a run starts with; [`run_codex`]: its Codex part
//!   (`~/.codex` made and checked, the run's hooks trusted); [`running`]: commands still running under a grant.
//! - [`watch`]: the watch over files that run later outside the floor.
//! - [`passwd`]: an account's home from `/etc/passwd`.
//! - [`cli`]: the command line's definition.
//! - [`egress`]: the session's egress proxy, the one way out of `nd7 run`'s network namespace.
//! - [`setup`]: `nd7 setup` (settings, completions, the ship timer, Codex), `nd7 doctor`,
//!   and the trust checks of nd7's own binaries that `nd7 run` makes.
//! - `self_update` (feature `self-update`): `nd7 self-update`.
//!
//! What a clean chain proves is limited, and nd7 says so wherever it reports
//! one: the log records what the agent said it did (intent), not what ran
//! (effect), and it checks itself, so anyone able to write the log's directory
//! can rewrite the whole chain.

pub mod agents;
pub use nd7_format::chain;
pub use nd7_format::effect;
pub mod cli;
pub mod codex;
pub mod egress;
pub use nd7_format::floor_wire;
pub use nd7_format::hook;
pub use nd7_platform::fault;
pub use nd7_platform::files;
pub use nd7_platform::home;
pub mod http_client;
pub use nd7_platform::kernel;
pub mod modes;
pub use nd7_format::policy;
pub use nd7_platform::passwd;
pub mod read;
pub mod record;
pub mod refusals;
pub mod run;
pub mod run_codex;
pub mod run_dir;
pub use nd7_format::run_entry;
pub mod run_grants;
pub mod run_log;
pub mod running;
pub use nd7_platform::safe_file;
pub mod sandbox;
pub mod secret_links;
#[cfg(feature = "self-update")]
pub mod self_update;
pub use nd7_platform::session_log;
pub mod setup;
pub use nd7_format::shell_prefix;
pub mod ship;
pub mod transcript;
pub use nd7_format::vault;
pub mod vault_admin;
#[cfg(feature = "vault-server")]
pub use nd7_vault_server as vault_server;
pub mod watch;

// `cargo test` without these features cannot build `vault_server`'s and
// `self_update`'s tests: refuse to build, saying how to run them, rather
// than pass with them silently left out. A build error, not a failing test,
// so that CI checks the refusal with a type-check rather than a test build.
// On Linux only: the vault server and self-update are tested there, and
// macOS builds its tests without them (.ci/check-macos, the macOS workflow).
#[cfg(all(
    test,
    target_os = "linux",
    not(all(feature = "vault-server", feature = "self-update"))
))]
compile_error!(
    "the tests of vault_server (feature vault-server) and self_update (feature self-update) did not run: \
     use `bash scripts/test.sh`, or `cargo test --features vault-server,self-update`"
);
