//! The sandbox on macOS: Seatbelt (`seatbelt`).

pub mod seatbelt;

pub use seatbelt::*;
