//! The admins' side of the vault: keys, the recipients document, enrolment
//! tokens, and reading a session back (`nd7 admin`). Reading back trusts
//! the vault for nothing: every batch must carry the signature of a machine
//! key the organisation let in, and a machine's own copy (its log and the
//! receipts it kept) tells what the vault dropped from what the machine
//! rewrote.
//!
//! By job: [`keys`] (keys, the recipients document, tokens and their
//! register), [`machines`] (what the vault enrolled and holds), [`pull`]
//! (reading a session back) and [`compare`] (against a machine's copy).
//! What they share is here: the findings and their fault.

#![forbid(unsafe_code)]

use std::fmt;

use crate::ship::{Client, Request, ShipError};
use crate::vault::{self, Recipients};

mod compare;
pub(crate) mod frames;
mod keys;
mod machines;
mod pull;
mod seen;

pub(crate) use compare::vouched_vault_keys;
pub use compare::{Compared, Comparison, compare, compare_logs};
pub use keys::{
    Registered, default_register, enrol_token, new_age_identity, new_org_key, read_register,
    register_token, sign_recipients,
};
pub use machines::{Machines, list_machines, list_sessions};
pub use pull::{Pulled, PulledBatch, pull};

// ---------------------------------------------------------------- findings

/// Whose doing a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The vault's copy is forged, or holds less or other than it
    /// acknowledged.
    Vault,
    /// The machine rewrote its log: its copy, or its own signed batches,
    /// disagree with what it signed; or it claims, in its tally, what the
    /// vault never acknowledged.
    Machine,
    /// The vault's word against the machine's, neither signed for it: a
    /// session the vault lists that the machine's tally does not name
    /// (`nd7 admin pull` settles whose doing it is).
    Unsettled,
}

/// Something `pull` or `compare` found, naming machine, session and entries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub fault: Fault,
    pub text: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.fault {
            Fault::Vault => write!(f, "FAILED (the vault): {}", self.text),
            Fault::Machine => write!(f, "FAILED (the machine): {}", self.text),
            Fault::Unsettled => write!(f, "UNSETTLED: {}", self.text),
        }
    }
}

fn vault_fault(text: String) -> PullError {
    PullError::Finding(Finding {
        fault: Fault::Vault,
        text,
    })
}

#[derive(Debug, thiserror::Error)]
pub enum PullError {
    #[error("{0}")]
    Finding(Finding),
    #[error(transparent)]
    Other(#[from] ShipError),
}

impl From<vault::Error> for PullError {
    fn from(e: vault::Error) -> PullError {
        PullError::Other(e.into())
    }
}

fn when(unix: u64) -> String {
    i64::try_from(unix)
        .ok()
        .and_then(|t| jiff::Timestamp::from_second(t).ok())
        .map_or_else(
            || unix.to_string(),
            |t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        )
}

/// The recipients document the vault serves, signed by the organisation
/// key of the pinned `fingerprint`: it names the vault's key, which every
/// reply after it must be bound by.
fn recipients(client: &Client, fingerprint: &str) -> Result<Recipients, ShipError> {
    let (doc, _) = client.ok_bound_by(Request::get("/v1/recipients"), |body| {
        let doc = Recipients::verify(&String::from_utf8_lossy(body), fingerprint)?;
        let key = doc.vault;
        Ok((doc, key))
    })?;
    Ok(doc)
}

/// The records in `text` that each start with `magic`, as served or kept
/// one after the other.
fn records<'t>(text: &'t str, magic: &str) -> impl Iterator<Item = &'t str> {
    let mut starts: Vec<usize> = text.match_indices(magic).map(|(i, _)| i).collect();
    starts.push(text.len());
    (0..starts.len() - 1).map(move |i| &text[starts[i]..starts[i + 1]])
}
