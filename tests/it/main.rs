//! nd7's one integration-test binary. Each module tests one behaviour the
//! docs promise, through the library or through the real `nd7` binary.

mod append;
mod common;
mod concurrency;
mod deferred;
mod distribution;
mod e2e;
mod landlock;
mod property;
mod record;
mod sandbox;
mod setup;
mod tamper;
// Its namespaces exist on Linux only; elsewhere it compiles and rests.
#[cfg(feature = "vault-server")]
mod vault;
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
mod world;
