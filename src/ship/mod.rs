//! The machine's side of the vault: `nd7 enroll` and `nd7 ship`, and the
//! vault's requests as every client side makes them ([`Client`]: signed by a
//! machine, or with an admin's read token, over [`crate::http_client`]). The
//! format and every cryptographic step are [`crate::vault`]'s, the admin's
//! read-back is [`crate::vault_admin`]'s.
//!
//! - `client`: the vault's requests, signed or with a read token, and its
//!   refusals as errors;
//! - `enrol`: `nd7 enroll`, and the enrolled [`Machine`] read back;
//! - `pipeline`: `nd7 ship`: read, verify, seal, send, in two threads;
//! - `receipts`: what the machine keeps of the vault's word per session, and
//!   the checks that hold the vault and the local log to it.
//!
//! ```text
//! $XDG_STATE_HOME/nd7/
//!   vault/                     0700, written by enroll, every file 0600
//!     machine.key              the machine's Ed25519 seed (hex)
//!     machine.id               its id, derived from its public key
//!     server                   the vault's base URL
//!     recipients               the signed recipients document last taken
//!     recipients.old           the documents held before it, oldest first
//!     ca.pem                   the vault's CA certificate, if pinned at enrolment
//!     enrolling                a key made for an enrolment not yet confirmed
//!     ship.lock                held by the running `nd7 ship`
//!     tally.number             the number of the last tally this machine signed
//!   sessions/<id>/
//!     shipped                  "<seq> <hash>\n": the last entry the vault acknowledged
//!     receipt                  the vault's receipt for it
//!     chain.key                0600: "# recipients version N" and the chain key, until ended and shipped
//!     vault.alarm              while the vault breaks a receipt: what, and the receipt
//!     receipts.lost            receipts a vault's declared restore lost, with its notice
//!     transcript/shipped.json  how far the transcripts' anchored bytes were shipped
//!     transcript/receipt       the vault's receipt for the last transcript piece
//! ```
//!
//! Shipping a session: ask the vault for its receipt of the last batch it
//! holds and check it against the receipt kept here and against the local
//! log; read the entries after that under the log's shared lock (writers
//! wait), verify them with the same walker `nd7 verify` uses, and send them
//! in signed batches of at most 8 MiB. `receipt` and `shipped` move forward
//! only after the vault's receipt for a batch checks, under the log's
//! exclusive lock. A run killed anywhere resumes from what the vault holds:
//! nothing is lost, and nothing is stored twice.

#![forbid(unsafe_code)]

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::files::{self, Durability};
use crate::session_log;
use crate::vault;

mod client;
mod enrol;
mod pipeline;
mod receipts;

pub use client::{Client, Request, Signer, Stream};
pub use enrol::{Enrolled, Machine, enroll};
pub use pipeline::{Report, Shipped, recipients_running_out, ship_all, ship_session};
pub(crate) use receipts::chain_key;
pub use receipts::{
    lost_not_acknowledged_again, lost_receipts, reply_receipt, rewritten_since_shipped,
};

pub const VAULT_DIR: &str = "vault";
pub const MACHINE_KEY_FILE: &str = "machine.key";
pub const MACHINE_ID_FILE: &str = "machine.id";
pub const SERVER_FILE: &str = "server";
pub const RECIPIENTS_FILE: &str = "recipients";
/// Every recipients document the machine held before the current one,
/// oldest first: which vault keys the organisation vouched for, so receipts
/// signed before a vault key changed still check.
pub const RECIPIENTS_OLD_FILE: &str = "recipients.old";
pub const SHIPPED_FILE: &str = "shipped";
pub const RECEIPT_FILE: &str = "receipt";
pub const CHAIN_KEY_FILE: &str = "chain.key";
pub const ALARM_FILE: &str = "vault.alarm";
/// Beside the enrolment: why the last `nd7 ship` could not reach the vault;
/// removed by the next ship that reaches it.
pub const UNREACHABLE_FILE: &str = "unreachable";
pub const LOST_FILE: &str = "receipts.lost";
/// The vault's CA certificate, pinned at enrolment (`nd7 enroll --ca-cert`).
pub const CA_FILE: &str = "ca.pem";
/// A machine key made for an enrolment not yet confirmed, with the token's
/// key it is for: an enrolment tried again with the same token reuses it,
/// so a lost reply does not burn the token.
pub const ENROLLING_FILE: &str = "enrolling";
/// Held by a running `nd7 ship`.
pub const SHIP_LOCK_FILE: &str = "ship.lock";
/// The number of the last tally this machine signed (ADR-0132): the next
/// is one more.
pub const TALLY_NUMBER_FILE: &str = "tally.number";

/// A backlog above this prints progress on stderr.
const PROGRESS_ABOVE: u64 = 32 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ShipError {
    #[error("{}: cannot {action}: {source}", path.display())]
    Io {
        path: PathBuf,
        action: &'static str,
        source: io::Error,
    },
    #[error("this machine is not enrolled ({} is missing): run `nd7 enroll URL --token T --fingerprint FP`", path.display())]
    NotEnrolled { path: PathBuf },
    #[error("this machine is already enrolled ({} exists); remove {} to enrol again", path.display(), dir.display())]
    AlreadyEnrolled { path: PathBuf, dir: PathBuf },
    #[error("{}: {what}", path.display())]
    BadFile { path: PathBuf, what: String },
    #[error("{url}: {detail}")]
    Http { url: String, detail: String },
    /// A 200 reply without the vault's signature for this request: the
    /// network's doing (or a vault that does not sign), never the vault's word.
    #[error("{url}: {detail}")]
    Unbound { url: String, detail: String },
    #[error("{url}: the vault refused with {status}: {message}")]
    Refused {
        url: String,
        status: u16,
        message: String,
    },
    /// 429: the machine is over a quota of the vault's.
    #[error("{url}: the vault refused with 429, over its quota for this machine: {message}{}", retry_after.map(|s| format!(" (try again in {s} s)")).unwrap_or_default())]
    OverQuota {
        url: String,
        message: String,
        retry_after: Option<u64>,
    },
    #[error("{0}")]
    Vault(#[from] vault::Error),
    #[error(transparent)]
    Log(#[from] session_log::Error),
    #[error("--fingerprint must be the 64 hex digits `nd7 admin org-key` printed, not {0:?}")]
    BadFingerprint(String),
    #[error("session {session}: {}: entry {}: {fault}", path.display(), .entry)]
    Unverified {
        session: String,
        path: PathBuf,
        entry: u64,
        fault: String,
    },
    #[error("session {session}: the local log no longer matches what was shipped: {detail}")]
    Rewritten { session: String, detail: String },
    /// The vault holds less or other than it acknowledged, or shows what this
    /// machine never signed: evidence against the vault, kept in `vault.alarm`.
    #[error("machine {machine}, session {session}: the vault broke its receipt: {detail}")]
    VaultBroke {
        machine: String,
        session: String,
        detail: String,
    },
    /// At enrolment: the vault serves an older recipients document than the
    /// token says the organisation's is.
    #[error(
        "the vault serves the recipients document of version {served}, but the enrolment token says the organisation's is at least version {least}: the vault is serving a document the organisation replaced; nothing was written"
    )]
    OldRecipients { served: u64, least: u64 },
    /// The recipients document's validity ran out: no new chain key under it.
    #[error(
        "the recipients document of version {version} was valid until {valid_until} (Unix time) and the vault serves no newer one, so no new chain key is started under it: an admin must sign and install a newer version (docs/vault.md, \"Rotating recipients\"); until then this session is not shipped"
    )]
    RecipientsExpired { version: u64, valid_until: u64 },
    #[error("no randomness from the operating system: {0}")]
    Random(String),
    /// Anchored transcript bytes the file no longer holds: not shipped, and
    /// said once (docs/vault.md, "Transcripts").
    #[error(
        "session {session}: transcript bytes the chain anchors are no longer on disk as anchored, so they were not shipped (said this once): {detail}"
    )]
    TranscriptGone { session: String, detail: String },
}

crate::files::io_context_into!(ShipError);

pub fn random<const N: usize>() -> Result<[u8; N], ShipError> {
    let mut out = [0u8; N];
    getrandom::getrandom(&mut out).map_err(|e| ShipError::Random(e.to_string()))?;
    Ok(out)
}

/// Randomness for [`vault::wrap_chain_key`]: the OS's, and never silently
/// anything else. A failing OS source here would be a broken machine, so it
/// panics rather than wrapping with zeros.
pub(crate) fn os_fill(buf: &mut [u8]) {
    if let Err(e) = getrandom::getrandom(buf) {
        panic!("no randomness from the operating system: {e}");
    }
}

pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Writes `bytes` to `path` with mode 0600, whole and synced
/// ([`files::replace`]): a reader sees the old or the new text, never half
/// of one, and the new survives a power loss.
pub fn write_0600(path: &Path, bytes: &[u8]) -> Result<(), ShipError> {
    Ok(files::replace(path, bytes, 0o600, Durability::Durable)?)
}

fn read_text(path: &Path) -> Result<String, ShipError> {
    fs::read_to_string(path).map_err(|e| {
        if e.kind() == io::ErrorKind::NotFound {
            ShipError::NotEnrolled {
                path: path.to_path_buf(),
            }
        } else {
            ShipError::Io {
                path: path.to_path_buf(),
                action: "read",
                source: e,
            }
        }
    })
}

/// A file's text, `None` when it does not exist.
pub(crate) fn read_optional(path: &Path) -> Result<Option<String>, ShipError> {
    match fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(path, "read")(e)),
    }
}

fn remove_optional(path: &Path) -> Result<(), ShipError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err(path, "remove")(e)),
    }
}

/// The vault directory under a state directory.
pub fn vault_dir(state_dir: &Path) -> PathBuf {
    state_dir.join(VAULT_DIR)
}

/// Reads `--every`'s DURATION: a number with s, m or h (seconds without).
pub fn parse_duration(text: &str) -> Option<Duration> {
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let n: u64 = digits.parse().ok()?;
    let secs = match unit {
        "s" => n,
        "m" => n.checked_mul(60)?,
        "h" => n.checked_mul(3600)?,
        _ => return None,
    };
    (secs > 0).then(|| Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_s_m_h_or_plain_seconds() {
        assert_eq!(parse_duration("30"), Some(Duration::from_secs(30)));
        assert_eq!(parse_duration("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Some(Duration::from_secs(300)));
        assert_eq!(parse_duration("2h"), Some(Duration::from_secs(7200)));
        for bad in ["", "0", "0s", "5d", "m", "-1s", "1.5m"] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
    }
}
