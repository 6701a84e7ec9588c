//! What a machine, the vault server and the admins say to each other, and
//! the cryptography behind it (format v2, docs/vault.md). Pure: bytes, keys,
//! randomness and the time come in as arguments; nothing here opens a file or
//! a socket or reads a clock. `nd7 ship`, `nd7 enroll`, the admin commands
//! and `nd7-vault` all use this module for the format, and nothing else.
//!
//! What travels:
//!
//! - **Recipients** ([`Recipients`]): a versioned text document listing the
//!   admins' age recipients and the vault's key, signed by the organisation's
//!   Ed25519 key, whose fingerprint machines and admins pin.
//! - **Enrolment** ([`EnrolToken`], [`Enrolment`]): a token the organisation
//!   signed, whose secret derives a key that signs the machine's key.
//! - **Signed requests** ([`RequestAuth`]): every request from a machine
//!   carries its id, the time, a random nonce, the body's BLAKE3 and an
//!   Ed25519 signature over method, path, time, nonce, the body's length
//!   and its BLAKE3: all in the headers, so it is checked before the body
//!   is read.
//! - **Batches** ([`seal_batch`], [`open_batch`]): a run of whole log lines,
//!   compressed and encrypted under the session's chain key, with a header of
//!   keyed digests as associated data and the machine's signature over the
//!   whole ([`Checkpoint`]). The chain key travels beside it, wrapped to the
//!   admins as a standard age v1 file ([`wrap_chain_key`]).
//! - **Transcript pieces** ([`seal_piece`], [`open_piece`]): bytes of Claude
//!   Code's transcript that an anchor in the chain covers, sealed as batches
//!   are and signed by the machine, named only by that anchor's seq and
//!   their place in the file.
//! - **Receipts** ([`Receipt`]) and **restore notices** ([`RestoreNotice`]):
//!   what the vault signs about what it stored, and about losing some of it.
//! - **Tallies** ([`Tally`]): a machine's signed list of the sessions the
//!   vault acknowledged, each with the vault's receipt, which admins hold
//!   the vault's list of sessions to.
//! - **Signed replies** ([`sign_reply`], [`PullEnd`]): the vault's signature
//!   over each reply, naming the request's nonce, and over the end of each
//!   streamed pull, so the network can neither replay an old answer nor end
//!   a pull early unnoticed.
//!
//! Every byte that is signed, hashed or authenticated is rendered by one
//! function here and pinned by a test; change none of them.

#![forbid(unsafe_code)]

use std::fmt;
use std::io::Read;

use base64::Engine;
use base64::engine::general_purpose::STANDARD_NO_PAD as B64;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, XChaCha20Poly1305};
use ed25519_dalek::Signer;
use hmac::Mac;
use sha2::Digest as _;
use zeroize::Zeroize;

use crate::chain::{self, Cursor, Hash, Walker};

/// At most this many bytes of log lines go into one batch.
pub const MAX_BATCH_ENTRIES_BYTES: usize = 8 * 1024 * 1024;
/// The largest request body the vault reads: a full batch that did not
/// compress at all, its index (at most one line per 100 entry bytes… and
/// entries are longer than that) and the wrapped key, with room to spare.
pub const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;
/// At most this many entries go into one batch.
pub const MAX_BATCH_ENTRIES: usize = 65_536;
/// The longest session id a batch may name, in bytes: the longest file
/// name (NAME_MAX), so every session directory can be shipped.
pub const MAX_SESSION_ID_BYTES: usize = 255;
/// The fewest ciphertext bytes a batch carries per entry. Every entry holds
/// its own 32-byte hash (64 hex digits), which no compressor can shrink, so
/// a real batch never comes near this; a header that claims more entries
/// than its ciphertext could hold is refused, so a small request cannot
/// make the vault store a large index.
pub const MIN_CIPHERTEXT_PER_ENTRY: usize = 16;
/// How far a request's stated time may be from the vault's clock, either way.
pub const MAX_CLOCK_SKEW_SECS: u64 = 300;

pub const HEADER_MACHINE: &str = "x-nd7-machine";
pub const HEADER_TIME: &str = "x-nd7-time";
pub const HEADER_NONCE: &str = "x-nd7-nonce";
pub const HEADER_BODY: &str = "x-nd7-body";
pub const HEADER_SIGNATURE: &str = "x-nd7-signature";

const AGE_MAGIC: &str = "age-encryption.org/v1";
const AGE_X25519_INFO: &[u8] = b"age-encryption.org/v1/X25519";
const RECIPIENTS_MAGIC: &str = "nd7-recipients v3";
const BATCH_HEADER_MAGIC: &str = "nd7-batch v2";
const BATCH_BODY_MAGIC: &[u8] = b"ND7B\x02";
const CHECKPOINT_MAGIC: &str = "nd7-checkpoint v2";
const RECEIPT_MAGIC: &str = "nd7-receipt v2";
const RESTORE_MAGIC: &str = "nd7-restore v2";
const TOKEN_MAGIC: &str = "nd7-token v3";
const ENDORSE_MAGIC: &str = "nd7-endorse v3";
const ENROLL_MAGIC: &str = "nd7-enroll v3";
const REQUEST_MAGIC: &str = "nd7-request v2";
const FINGERPRINT_CONTEXT: &[u8] = b"nd7 organisation key v1\n";
const TOKEN_KEY_CONTEXT: &str = "nd7 2026-12 vault enrolment token v2";
const MACHINE_ID_CONTEXT: &str = "nd7 2026-12 vault machine id v2";
const CHAIN_KEY_ID_CONTEXT: &str = "nd7 2026-12 vault chain key id v2";
const INDEX_KEY_CONTEXT: &str = "nd7 2026-12 vault index key v2";

/// Everything the format can refuse. Messages name what was wrong; none of
/// them carries secret material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("{what} is not {expected}")]
    Malformed {
        what: &'static str,
        expected: &'static str,
    },
    #[error(
        "the recipients document is signed by the key with fingerprint {found}, not the pinned {pinned}"
    )]
    WrongOrgKey { found: String, pinned: String },
    #[error("the recipients document's signature does not verify")]
    BadDocumentSignature,
    #[error("the recipients document lists no recipient")]
    NoRecipients,
    #[error("the enrolment token is not signed by the organisation key with fingerprint {0}")]
    BadTokenSignature(String),
    #[error("the enrolment token expired at {expires} (Unix time), before {now}")]
    TokenExpired { expires: u64, now: u64 },
    #[error(
        "the machine's key was endorsed at {endorsed} (Unix time), after its enrolment token expired at {expires}"
    )]
    EndorsedLate { expires: u64, endorsed: u64 },

    #[error("the machine's key is not endorsed by the enrolment token's key")]
    BadEndorsement,
    #[error("the batch's checkpoint is not signed by the machine's key")]
    BadCheckpointSignature,
    #[error("the receipt is not signed by the vault key {0}")]
    BadReceiptSignature(String),
    #[error("the restore notice is not signed by the vault key {0}")]
    BadNoticeSignature(String),
    #[error("machine {0}'s tally is not signed by its key")]
    BadTallySignature(String),
    #[error("the request's signature does not verify")]
    BadSignature,
    #[error("the request's body is not the one its signature names (changed in transit)")]
    BodyMismatch,
    #[error(
        "the reply is not the vault's answer to this request: {0} (the network altered or replayed it)"
    )]
    UnboundReply(&'static str),
    #[error(
        "the request's time is {skew} s away from the vault's clock (at most {MAX_CLOCK_SKEW_SECS} s)"
    )]
    Stale { skew: u64 },
    #[error("no recipient stanza in the age file opens with this identity")]
    NoMatchingStanza,
    #[error("the age file's header MAC does not verify")]
    BadHeaderMac,
    #[error("the wrapped chain key does not decrypt")]
    KeyDecrypt,
    #[error(
        "the batch does not decrypt with this chain key (wrong key, or the batch or its header was altered)"
    )]
    BatchDecrypt,
    #[error("the batch's entries do not decompress: {0}")]
    Decompress(String),
    #[error("the batch's entries do not match its index: {0}")]
    IndexMismatch(String),
    #[error(
        "the transcript piece carries {ciphertext} bytes of ciphertext for the {bytes} bytes its header names; at most {most} can hold that many"
    )]
    PieceOversize {
        ciphertext: usize,
        bytes: u64,
        most: u64,
    },
}

fn malformed(what: &'static str, expected: &'static str) -> Error {
    Error::Malformed { what, expected }
}

// ---------------------------------------------------------------- hex

pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

/// Lowercase hex of exactly `N` bytes.
pub fn unhex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let text = text.as_bytes();
    if text.len() != 2 * N {
        return None;
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; N];
    for (i, pair) in text.chunks_exact(2).enumerate() {
        out[i] = (nibble(pair[0])? << 4) | nibble(pair[1])?;
    }
    Some(out)
}

/// Lowercase hex of any length (session ids in paths and headers).
pub fn unhex_vec(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    text.as_bytes()
        .chunks_exact(2)
        .map(|pair| {
            let s = std::str::from_utf8(pair).ok()?;
            if s.bytes().any(|c| c.is_ascii_uppercase()) {
                return None;
            }
            u8::from_str_radix(s, 16).ok()
        })
        .collect()
}

// ---------------------------------------------------------------- secrets

/// 32 secret bytes with a redacted `Debug`, no `Clone`, wiped on drop.
pub struct Secret32([u8; 32]);

impl Secret32 {
    pub fn from_bytes(bytes: [u8; 32]) -> Secret32 {
        Secret32(bytes)
    }

    pub fn expose_secret(&self) -> &[u8; 32] {
        &self.0
    }
}

impl Drop for Secret32 {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

impl fmt::Debug for Secret32 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret32(*******)")
    }
}

/// The key one session's chain is encrypted under (`chain.key`).
pub type ChainKey = Secret32;

/// Reads a one-line hex secret file, ignoring `#` comment lines.
pub fn parse_secret_text(text: &str, what: &'static str) -> Result<Secret32, Error> {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .ok_or(malformed(what, "64 lowercase hex digits"))?;
    unhex::<32>(line)
        .map(Secret32)
        .ok_or(malformed(what, "64 lowercase hex digits"))
}

// ---------------------------------------------------------------- Ed25519

/// An Ed25519 signing key: a machine's key or the organisation's.
pub struct SigningKey(ed25519_dalek::SigningKey);

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SigningKey(public {})", self.public().to_hex())
    }
}

impl SigningKey {
    pub fn from_seed(seed: &Secret32) -> SigningKey {
        SigningKey(ed25519_dalek::SigningKey::from_bytes(seed.expose_secret()))
    }

    pub fn public(&self) -> PublicKey {
        PublicKey(self.0.verifying_key().to_bytes())
    }

    pub fn sign(&self, message: &[u8]) -> [u8; 64] {
        self.0.sign(message).to_bytes()
    }
}

/// An Ed25519 public key, written as 64 hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PublicKey(pub [u8; 32]);

impl PublicKey {
    pub fn from_hex(text: &str) -> Option<PublicKey> {
        let bytes = unhex::<32>(text)?;
        ed25519_dalek::VerifyingKey::from_bytes(&bytes).ok()?;
        Some(PublicKey(bytes))
    }

    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }

    /// What an admin hands to `nd7 enroll --fingerprint`: SHA-256 over a
    /// context string and the key, as 64 hex digits.
    pub fn fingerprint(&self) -> String {
        let mut h = sha2::Sha256::new();
        h.update(FINGERPRINT_CONTEXT);
        h.update(self.0);
        hex(&h.finalize())
    }

    pub fn verify(&self, message: &[u8], signature: &[u8; 64]) -> bool {
        let Ok(key) = ed25519_dalek::VerifyingKey::from_bytes(&self.0) else {
            return false;
        };
        key.verify_strict(message, &ed25519_dalek::Signature::from_bytes(signature))
            .is_ok()
    }
}

/// A machine's id: derived from its public key, so the vault cannot pair an
/// id with another key.
pub fn machine_id(key: &PublicKey) -> String {
    hex(&blake3::derive_key(MACHINE_ID_CONTEXT, &key.0)[..16])
}

// ---------------------------------------------------------------- digests

/// A keyed digest of an entry's hash: what the vault's clear index holds in
/// place of the hash itself, so it cannot test a guessed entry.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    pub fn from_hex(text: &str) -> Option<Digest> {
        unhex::<32>(text).map(Digest)
    }

    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }

    pub fn short(&self) -> String {
        hex(&self.0[..8])
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({})", self.short())
    }
}

/// A chain key's public name: which batches share a key (and so whose
/// digests compare).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct KeyId(pub [u8; 16]);

impl KeyId {
    pub fn of(key: &ChainKey) -> KeyId {
        let mut id = [0u8; 16];
        id.copy_from_slice(&blake3::derive_key(CHAIN_KEY_ID_CONTEXT, key.expose_secret())[..16]);
        KeyId(id)
    }

    pub fn from_hex(text: &str) -> Option<KeyId> {
        unhex::<16>(text).map(KeyId)
    }

    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// The key of a session's clear index, derived from its chain key.
pub struct IndexKey([u8; 32]);

impl IndexKey {
    pub fn of(key: &ChainKey) -> IndexKey {
        IndexKey(blake3::derive_key(INDEX_KEY_CONTEXT, key.expose_secret()))
    }

    pub fn digest(&self, hash: &Hash) -> Digest {
        Digest(*blake3::keyed_hash(&self.0, hash.as_bytes()).as_bytes())
    }
}

impl Drop for IndexKey {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

/// Reads a `name value` line: the value, or `None`.
fn field<'a>(line: Option<&'a str>, name: &str) -> Option<&'a str> {
    line?.strip_prefix(name)?.strip_prefix(' ')
}

fn sig_hex(text: &str) -> Option<[u8; 64]> {
    unhex::<64>(text)
}

/// Splits a signed text into (the signed part, the signature), the signature
/// being its last line, `<name> <128 hex>`.
fn split_signed<'a>(text: &'a str, name: &str) -> Option<(&'a str, [u8; 64])> {
    let body = text.strip_suffix('\n')?;
    let at = body.rfind('\n').map_or(0, |i| i + 1);
    let signature = field(Some(&body[at..]), name).and_then(sig_hex)?;
    Some((&text[..at], signature))
}

mod age;
mod batch;
mod enrol;
mod envelope;
mod receipt;
mod recipients;
mod reply;
mod request;
mod tally;
mod transcript;

pub use age::*;
pub use batch::*;
pub use enrol::*;
pub use receipt::*;
pub use recipients::*;
pub use reply::*;
pub use request::*;
pub use tally::*;
pub use transcript::*;

#[cfg(test)]
mod tests;
