//! nd7's one integration-test binary. Each module tests one behaviour the
//! docs promise, through the library or through the real `nd7` binary.

mod append;
mod common;
mod concurrency;
mod distribution;
mod e2e;
mod landlock;
mod property;
mod record;
mod setup;
mod tamper;
#[cfg(feature = "vault-server")]
mod vault;
