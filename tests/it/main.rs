//! nd7's one integration-test binary. Each module tests one behaviour the
//! docs promise, through the library or through the real `nd7` binary.

mod append;
#[cfg(target_os = "linux")]
mod attack_effects;
mod attack_exit_threads;
mod attack_git_config;
mod attack_hashes;
mod attack_recorder;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod attack_seccomp_search;
mod codex_floor;
mod codex_record;
mod codex_rollout;
#[cfg(target_os = "linux")]
mod codex_rollout_run;
mod common;
mod concurrency;
#[cfg(target_os = "linux")]
mod daily;
mod deferred;
mod deferred_follow;
mod deferred_grants;
mod deferred_includes;
mod deferred_reads;
mod deferred_secrets;
mod distribution;
mod door_hooks;
#[cfg(target_os = "linux")]
mod door_load;
mod e2e;
mod effects;
mod effects_reading;
#[cfg(target_os = "linux")]
mod egress;
#[cfg(target_os = "linux")]
mod egress_attacks;
#[cfg(target_os = "linux")]
mod exit_ruleset;
mod exit_status;
#[cfg(target_os = "linux")]
mod exit_working_dir;
mod floor_attrs;
mod floor_attrs_routes;
mod floor_git_config;
mod floor_paths;
mod floor_process;
#[cfg(target_os = "linux")]
mod floor_signals;
#[cfg(target_os = "linux")]
mod inert;
mod landlock;
mod layout;
mod macos_floor;
mod parsers;
#[cfg(feature = "vault-server")]
mod pg;
mod property;
mod read;
#[cfg(target_os = "linux")]
mod reconcile;
mod record;
mod record_door;
#[cfg(feature = "self-update")]
mod release;
mod report_html;
#[cfg(target_os = "linux")]
mod run_faults;
#[cfg(target_os = "linux")]
mod runs;
mod sandbox;
#[cfg(feature = "self-update")]
mod self_update;
mod setup;
mod setup_codex;
mod start_cost;
mod tamper;
#[cfg(target_os = "linux")]
mod toolchains;
mod transcript;
mod transcript_run;
#[cfg(feature = "vault-server")]
mod transcript_vault;
#[cfg(feature = "vault-server")]
mod vault;
#[cfg(feature = "vault-server")]
mod vault_attacks;
#[cfg(feature = "vault-server")]
mod vault_attacks_round2;
#[cfg(feature = "vault-server")]
mod vault_attacks_round3;
#[cfg(feature = "vault-server")]
mod vault_flood;
#[cfg(feature = "vault-server")]
mod vault_limits;
#[cfg(feature = "vault-server")]
mod vault_network;
#[cfg(feature = "vault-server")]
mod vault_restore;
#[cfg(feature = "vault-server")]
mod vault_scale;
#[cfg(feature = "vault-server")]
mod vault_service;
#[cfg(feature = "vault-server")]
mod vault_store;
#[cfg(feature = "vault-server")]
mod vault_tally_attacks;
#[cfg(feature = "vault-server")]
mod vault_team;
#[cfg(feature = "vault-server")]
mod vault_tls;
mod vectors;
#[cfg(target_os = "linux")]
mod version_cache;
// Its namespaces exist on Linux only; elsewhere it compiles and rests.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
mod world;

/// Declares [`SUITE_FEATURES`] and, for each, a refusal to build without it.
/// Without one of them some tests cannot even build: the vault server's
/// (pg, vault, vault_attacks, vault_limits, vault_scale, vault_service,
/// vault_store, vault_tls, transcript_vault, and the vault's closed-pipe
/// test in exit_status), and self-update's (self_update, and one in
/// vault_tls). The suite refuses to build, naming what is missing, rather
/// than pass with them silently left out: a build error, so that CI checks
/// it with a type-check. On Linux only, as `nd7_core`'s own refusal: macOS
/// builds this suite without them (.ci/check-macos, the macOS workflow).
macro_rules! suite_features {
    ($($feature:literal),+) => {
        /// Every feature a test in this suite is gated on (`layout.rs` holds
        /// the suite's `cfg(feature)` lines to this list).
        pub const SUITE_FEATURES: &[&str] = &[$($feature),+];
        $(
            #[cfg(all(target_os = "linux", not(feature = $feature)))]
            compile_error!(concat!(
                "tests gated on the feature ", $feature, " did not run: use `bash scripts/test.sh`, \
                 or `cargo test --features vault-server,self-update`"
            ));
        )+
    };
}
suite_features!("vault-server", "self-update");
