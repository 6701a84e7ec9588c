//! nd7's one integration-test binary. Each module tests one behaviour the
//! docs promise, through the library or through the real `nd7` binary.

mod append;
mod codex_floor;
mod codex_record;
mod codex_rollout;
mod common;
mod concurrency;
#[cfg(target_os = "linux")]
mod daily;
mod deferred;
mod distribution;
mod e2e;
mod exit_status;
mod floor_paths;
mod floor_process;
mod landlock;
mod layout;
mod macos_floor;
mod parsers;
mod property;
mod read;
mod record;
mod record_door;
mod redteam;
#[cfg(target_os = "linux")]
mod redteam2;
#[cfg(target_os = "linux")]
mod redteam_codex;
#[cfg(target_os = "linux")]
mod redteam_cost;
#[cfg(target_os = "linux")]
mod redteam_rollout;
mod report_html;
#[cfg(target_os = "linux")]
mod runs;
mod sandbox;
mod setup;
mod setup_codex;
mod tamper;
#[cfg(target_os = "linux")]
mod toolchains;
mod transcript;
mod transcript_run;
#[cfg(feature = "vault-server")]
mod transcript_vault;
mod vectors;
// Its namespaces exist on Linux only; elsewhere it compiles and rests.
#[cfg(feature = "vault-server")]
mod pg;
#[cfg(feature = "vault-server")]
mod vault;
#[cfg(feature = "vault-server")]
mod vault_attacks;
#[cfg(feature = "vault-server")]
mod vault_limits;
#[cfg(feature = "vault-server")]
mod vault_network;
#[cfg(feature = "vault-server")]
mod vault_scale;
#[cfg(feature = "vault-server")]
mod vault_service;
#[cfg(feature = "vault-server")]
mod vault_store;
#[cfg(feature = "vault-server")]
mod vault_tls;
/// Without the feature the vault's tests cannot even build: fail, saying how
/// to run them, rather than pass with them silently left out.
#[cfg(not(feature = "vault-server"))]
#[test]
fn vault_tests_need_the_vault_server_feature() {
    panic!(
        "the vault server's tests (tests/it/vault.rs, tests/it/vault_attacks.rs) need the vault-server feature and did not run: \
         use `bash scripts/test.sh`, or `cargo test --features vault-server,self-update`"
    );
}
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
mod world;
