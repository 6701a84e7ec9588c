//! The sandbox on Linux: Landlock (`landlock`), the session's namespaces,
//! its keeper, and the exit and the door `nd7 run` serves.

pub mod abi;
pub mod admit;
pub mod attrs;
pub mod backend;
pub mod door;
pub mod exit;
pub mod hashes;
pub mod keeper;
pub mod launch;
pub mod memory;
pub mod netns;
pub mod ns;
pub mod observe;
pub mod rename;
pub mod scope;
pub mod seccomp;
pub mod server;
pub mod supervise;

pub mod landlock;

pub use landlock::*;
