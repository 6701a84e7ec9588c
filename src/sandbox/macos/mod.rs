//! The sandbox on macOS: Seatbelt (`seatbelt`), and the façade's macOS
//! half (`backend`).

pub mod backend;
pub mod seatbelt;

pub use seatbelt::*;
