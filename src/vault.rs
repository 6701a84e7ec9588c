//! What a machine and the vault server say to each other, and the
//! cryptography behind it. Pure: bytes, keys, randomness and the time come in
//! as arguments; nothing here opens a file or a socket or reads a clock.
//! `nd7 ship`, `nd7 enroll`, the admin commands and `nd7-vault` all use this
//! module for the format, and nothing else (docs/vault.md, ADR-0020).
//!
//! Four things travel:
//!
//! - **Enrolment**: a machine registers its Ed25519 public key with a
//!   one-time token ([`enroll_body`]) and receives its id.
//! - **Recipients**: a text document listing the admins' age X25519
//!   recipients, signed by the organisation's Ed25519 key. A machine pins
//!   that key's fingerprint at enrolment ([`Recipients::verify`]).
//! - **Signed requests**: every request from a machine carries its id, the
//!   time, a random nonce and an Ed25519 signature over method, path, time,
//!   nonce and the body's BLAKE3 ([`request_message`]).
//! - **Batches**: a run of whole log lines, compressed (zstd) and encrypted
//!   with XChaCha20-Poly1305 under the session's chain key, with the batch
//!   header — machine, session, seq range, prev, and the clear index of
//!   (seq, hash, ts) — as associated data. The chain key travels beside it,
//!   wrapped to the admins as a standard age v1 file ([`wrap_chain_key`]), so
//!   `age -d -i identity` recovers it.
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
use sha2::Digest;
use zeroize::Zeroize;

use crate::chain::{self, Cursor, Hash, Walker};

/// At most this many bytes of log lines go into one batch.
pub const MAX_BATCH_ENTRIES_BYTES: usize = 8 * 1024 * 1024;
/// The largest request body the vault reads: a full batch that did not
/// compress at all, its index (at most one line per 100 entry bytes… and
/// entries are longer than that) and the wrapped key, with room to spare.
pub const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;
/// How far a request's stated time may be from the vault's clock, either way.
pub const MAX_CLOCK_SKEW_SECS: u64 = 300;

pub const HEADER_MACHINE: &str = "x-nd7-machine";
pub const HEADER_TIME: &str = "x-nd7-time";
pub const HEADER_NONCE: &str = "x-nd7-nonce";
pub const HEADER_SIGNATURE: &str = "x-nd7-signature";

const AGE_MAGIC: &str = "age-encryption.org/v1";
const AGE_X25519_INFO: &[u8] = b"age-encryption.org/v1/X25519";
const RECIPIENTS_MAGIC: &str = "nd7-recipients v1";
const BATCH_HEADER_MAGIC: &str = "nd7-batch v1";
const BATCH_BODY_MAGIC: &[u8] = b"ND7B\x01";
const ENROLL_MAGIC: &str = "nd7-enroll v1";
const REQUEST_MAGIC: &str = "nd7-request v1";
const FINGERPRINT_CONTEXT: &[u8] = b"nd7 organisation key v1\n";

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
    #[error("the request's signature does not verify")]
    BadSignature,
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

// ---------------------------------------------------------------- age X25519

/// An admin's age identity (`AGE-SECRET-KEY-1…`).
pub struct AgeIdentity(x25519_dalek::StaticSecret);

impl fmt::Debug for AgeIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AgeIdentity(recipient {})", self.recipient())
    }
}

/// An admin's age recipient (`age1…`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct AgeRecipient([u8; 32]);

impl AgeIdentity {
    pub fn from_secret(secret: &Secret32) -> AgeIdentity {
        AgeIdentity(x25519_dalek::StaticSecret::from(*secret.expose_secret()))
    }

    pub fn recipient(&self) -> AgeRecipient {
        AgeRecipient(x25519_dalek::PublicKey::from(&self.0).to_bytes())
    }

    /// The `AGE-SECRET-KEY-1…` form the age CLI reads.
    pub fn to_bech32(&self) -> String {
        let hrp = bech32::Hrp::parse_unchecked("age-secret-key-");
        let mut bytes = self.0.to_bytes();
        let out = bech32::encode_upper::<bech32::Bech32>(hrp, &bytes).unwrap_or_default();
        bytes.zeroize();
        out
    }

    /// Reads an identity file as age-keygen writes it: `#` comments, blank
    /// lines, and one `AGE-SECRET-KEY-1…` line (the first is used).
    pub fn parse(text: &str) -> Result<AgeIdentity, Error> {
        let bad = || malformed("the age identity", "an AGE-SECRET-KEY-1… line");
        let line = text
            .lines()
            .map(str::trim)
            .find(|l| l.starts_with("AGE-SECRET-KEY-1"))
            .ok_or_else(bad)?;
        let (hrp, mut data) = bech32::decode(line).map_err(|_| bad())?;
        if hrp.to_lowercase() != "age-secret-key-" || data.len() != 32 {
            return Err(bad());
        }
        let mut bytes = [0u8; 32];
        bytes.copy_from_slice(&data);
        data.zeroize();
        let secret = Secret32(bytes);
        bytes.zeroize();
        Ok(AgeIdentity::from_secret(&secret))
    }
}

impl AgeRecipient {
    pub fn parse(text: &str) -> Result<AgeRecipient, Error> {
        let bad = || malformed("an age recipient", "an age1… X25519 recipient");
        if text != text.to_lowercase() {
            return Err(bad());
        }
        let (hrp, data) = bech32::decode(text).map_err(|_| bad())?;
        if hrp.as_str() != "age" || data.len() != 32 {
            return Err(bad());
        }
        let mut bytes = [0u8; 32];
        bytes.copy_from_slice(&data);
        Ok(AgeRecipient(bytes))
    }
}

impl fmt::Display for AgeRecipient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hrp = bech32::Hrp::parse_unchecked("age");
        let text = bech32::encode_lower::<bech32::Bech32>(hrp, &self.0).map_err(|_| fmt::Error)?;
        f.write_str(&text)
    }
}

fn hkdf32(ikm: &[u8], salt: &[u8], info: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    // 32 bytes is far below HKDF-SHA-256's limit of 255 × 32.
    let _ = hkdf::Hkdf::<sha2::Sha256>::new(Some(salt), ikm).expand(info, &mut out);
    out
}

fn header_mac(file_key: &[u8; 16], header: &[u8]) -> [u8; 32] {
    let key = hkdf32(file_key, &[], b"header");
    let mut mac = <hmac::Hmac<sha2::Sha256> as Mac>::new_from_slice(&key)
        .unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
    mac.update(header);
    mac.finalize().into_bytes().into()
}

fn age_payload_nonce_final() -> chacha20poly1305::Nonce {
    let mut nonce = [0u8; 12];
    nonce[11] = 1;
    nonce.into()
}

/// Wraps `key` to every recipient as an age v1 file with X25519 stanzas, the
/// file's payload being the 32 key bytes. `fill` supplies randomness (the
/// file key, one ephemeral secret per stanza, the payload nonce).
///
/// From the age spec (age-encryption.org/v1): the stanza is
/// `-> X25519 <b64 ephemeral share>` and a body of ChaCha20-Poly1305(wrap
/// key, zero nonce, file key), where the wrap key is HKDF-SHA-256 of the
/// shared secret with salt `share || recipient` and info
/// `age-encryption.org/v1/X25519`; the header ends `--- <b64 HMAC>`.
pub fn wrap_chain_key(
    key: &ChainKey,
    recipients: &[AgeRecipient],
    fill: &mut dyn FnMut(&mut [u8]),
) -> Vec<u8> {
    let mut file_key = [0u8; 16];
    fill(&mut file_key);
    let mut header = format!("{AGE_MAGIC}\n");
    for recipient in recipients {
        let mut eph = [0u8; 32];
        fill(&mut eph);
        let eph_secret = x25519_dalek::StaticSecret::from(eph);
        eph.zeroize();
        let share = x25519_dalek::PublicKey::from(&eph_secret).to_bytes();
        let shared = eph_secret.diffie_hellman(&x25519_dalek::PublicKey::from(recipient.0));
        let mut salt = share.to_vec();
        salt.extend_from_slice(&recipient.0);
        let wrap_key = hkdf32(shared.as_bytes(), &salt, AGE_X25519_INFO);
        let body = ChaCha20Poly1305::new(&wrap_key.into())
            .encrypt(&[0u8; 12].into(), file_key.as_slice())
            .unwrap_or_default();
        header.push_str(&format!(
            "-> X25519 {}\n{}\n",
            B64.encode(share),
            B64.encode(&body)
        ));
    }
    header.push_str("---");
    let mac = header_mac(&file_key, header.as_bytes());
    let mut out = header.into_bytes();
    out.extend_from_slice(format!(" {}\n", B64.encode(mac)).as_bytes());
    let mut nonce = [0u8; 16];
    fill(&mut nonce);
    let payload_key = hkdf32(&file_key, &nonce, b"payload");
    file_key.zeroize();
    let sealed = ChaCha20Poly1305::new(&payload_key.into())
        .encrypt(&age_payload_nonce_final(), key.expose_secret().as_slice())
        .unwrap_or_default();
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&sealed);
    out
}

/// Recovers a chain key from an age file with `identity`: the inverse of
/// [`wrap_chain_key`], and it also reads files the age CLI writes to X25519
/// recipients, as long as the payload is the 32 key bytes.
pub fn unwrap_chain_key(file: &[u8], identity: &AgeIdentity) -> Result<ChainKey, Error> {
    let bad = |expected| malformed("the wrapped chain key", expected);
    // The header is text up to the "--- " line; the payload follows it.
    let mut lines = Vec::new();
    let mut at = 0;
    let mac_line = loop {
        let nl = memchr::memchr(b'\n', &file[at..]).ok_or(bad("an age v1 file"))? + at;
        let line = std::str::from_utf8(&file[at..nl]).map_err(|_| bad("an age v1 file"))?;
        let start = at;
        at = nl + 1;
        if line.starts_with("---") {
            break (start, line);
        }
        lines.push(line);
    };
    let (mac_start, mac_text) = mac_line;
    if lines.first() != Some(&AGE_MAGIC) {
        return Err(bad("an age v1 file"));
    }
    let mac = mac_text
        .strip_prefix("--- ")
        .and_then(|m| B64.decode(m).ok())
        .filter(|m| m.len() == 32)
        .ok_or(bad("an age header ending in a MAC"))?;
    // Stanzas: an "-> " line, then body lines up to one shorter than 64.
    let mut file_key = None;
    let mut i = 1;
    while i < lines.len() {
        let args: Vec<&str> = lines[i]
            .strip_prefix("-> ")
            .ok_or(bad("age stanzas"))?
            .split(' ')
            .collect();
        let mut body = String::new();
        loop {
            i += 1;
            let line = lines.get(i).ok_or(bad("age stanzas"))?;
            body.push_str(line);
            if line.len() < 64 {
                i += 1;
                break;
            }
        }
        if args.first() != Some(&"X25519") || file_key.is_some() {
            continue;
        }
        let (Some(share), 2) = (args.get(1), args.len()) else {
            return Err(bad("an X25519 stanza with one argument"));
        };
        let share: [u8; 32] = B64
            .decode(share)
            .ok()
            .and_then(|s| s.try_into().ok())
            .ok_or(bad("an X25519 stanza with a 32-byte share"))?;
        let body = B64.decode(&body).map_err(|_| bad("base64 stanza bodies"))?;
        if body.len() != 32 {
            return Err(bad("an X25519 stanza with a 32-byte body"));
        }
        let shared = identity
            .0
            .diffie_hellman(&x25519_dalek::PublicKey::from(share));
        if shared.as_bytes() == &[0u8; 32] {
            return Err(bad("an X25519 stanza with a valid share"));
        }
        let mut salt = share.to_vec();
        salt.extend_from_slice(&identity.recipient().0);
        let wrap_key = hkdf32(shared.as_bytes(), &salt, AGE_X25519_INFO);
        if let Ok(key) = ChaCha20Poly1305::new(&wrap_key.into()).decrypt(&[0u8; 12].into(), &*body)
            && let Ok(key) = <[u8; 16]>::try_from(key.as_slice())
        {
            file_key = Some(key);
        }
    }
    let mut file_key = file_key.ok_or(Error::NoMatchingStanza)?;
    let header = &file[..mac_start + 3];
    if header_mac(&file_key, header).as_slice() != mac.as_slice() {
        return Err(Error::BadHeaderMac);
    }
    let payload = &file[at..];
    if payload.len() < 16 {
        return Err(bad("an age file with a payload"));
    }
    let payload_key = hkdf32(&file_key, &payload[..16], b"payload");
    file_key.zeroize();
    let mut plain = ChaCha20Poly1305::new(&payload_key.into())
        .decrypt(&age_payload_nonce_final(), &payload[16..])
        .map_err(|_| Error::KeyDecrypt)?;
    let key = <[u8; 32]>::try_from(plain.as_slice()).map_err(|_| Error::KeyDecrypt);
    plain.zeroize();
    key.map(Secret32)
}

// ---------------------------------------------------------------- recipients

/// A recipients document: who chain keys are wrapped to, signed by the
/// organisation key.
///
/// ```text
/// nd7-recipients v1
/// org <64 hex: the organisation's Ed25519 public key>
/// recipient age1…            (one line each, at least one)
/// signature <128 hex: Ed25519 over every byte above this line>
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recipients {
    pub org: PublicKey,
    pub recipients: Vec<AgeRecipient>,
}

impl Recipients {
    fn signed_part(org: &PublicKey, recipients: &[AgeRecipient]) -> String {
        let mut text = format!("{RECIPIENTS_MAGIC}\norg {}\n", org.to_hex());
        for r in recipients {
            text.push_str(&format!("recipient {r}\n"));
        }
        text
    }

    /// The signed document.
    pub fn sign(org_key: &SigningKey, recipients: &[AgeRecipient]) -> String {
        let mut text = Recipients::signed_part(&org_key.public(), recipients);
        let signature = org_key.sign(text.as_bytes());
        text.push_str(&format!("signature {}\n", hex(&signature)));
        text
    }

    /// Reads a document and checks its own signature, whoever signed it.
    pub fn parse(text: &str) -> Result<Recipients, Error> {
        let bad = || malformed("the recipients document", "an nd7-recipients v1 document");
        let sig_at = text.rfind("signature ").ok_or_else(bad)?;
        let (signed, sig_line) = text.split_at(sig_at);
        let signature = sig_line
            .strip_prefix("signature ")
            .and_then(|s| s.strip_suffix('\n'))
            .and_then(unhex::<64>)
            .ok_or_else(bad)?;
        let mut lines = signed.lines();
        if lines.next() != Some(RECIPIENTS_MAGIC) {
            return Err(bad());
        }
        let org = lines
            .next()
            .and_then(|l| l.strip_prefix("org "))
            .and_then(PublicKey::from_hex)
            .ok_or_else(bad)?;
        let recipients = lines
            .map(|l| {
                l.strip_prefix("recipient ")
                    .ok_or_else(bad)
                    .and_then(AgeRecipient::parse)
            })
            .collect::<Result<Vec<_>, _>>()?;
        if Recipients::signed_part(&org, &recipients) != signed {
            return Err(bad());
        }
        if !org.verify(signed.as_bytes(), &signature) {
            return Err(Error::BadDocumentSignature);
        }
        if recipients.is_empty() {
            return Err(Error::NoRecipients);
        }
        Ok(Recipients { org, recipients })
    }

    /// [`Recipients::parse`], then refuses a document signed by any key but
    /// the one whose fingerprint the machine pinned.
    pub fn verify(text: &str, pinned_fingerprint: &str) -> Result<Recipients, Error> {
        let doc = Recipients::parse(text)?;
        let found = doc.org.fingerprint();
        if found != pinned_fingerprint {
            return Err(Error::WrongOrgKey {
                found,
                pinned: pinned_fingerprint.to_string(),
            });
        }
        Ok(doc)
    }
}

// ---------------------------------------------------------------- enrolment

/// The body of an enrolment request; the request is signed with the key it
/// registers, which proves the machine holds it.
pub fn enroll_body(token: &str, key: &PublicKey) -> String {
    format!("{ENROLL_MAGIC}\ntoken {token}\nkey {}\n", key.to_hex())
}

pub fn parse_enroll_body(body: &[u8]) -> Result<(String, PublicKey), Error> {
    let bad = || malformed("the enrolment request", "an nd7-enroll v1 body");
    let text = std::str::from_utf8(body).map_err(|_| bad())?;
    let mut lines = text.lines();
    if lines.next() != Some(ENROLL_MAGIC) {
        return Err(bad());
    }
    let token = lines
        .next()
        .and_then(|l| l.strip_prefix("token "))
        .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_alphanumeric()))
        .ok_or_else(bad)?;
    let key = lines
        .next()
        .and_then(|l| l.strip_prefix("key "))
        .and_then(PublicKey::from_hex)
        .ok_or_else(bad)?;
    if lines.next().is_some() || enroll_body(token, &key) != text {
        return Err(bad());
    }
    Ok((token.to_string(), key))
}

// ---------------------------------------------------------------- requests

/// The bytes a request signature covers.
pub fn request_message(
    method: &str,
    path: &str,
    time: u64,
    nonce: &[u8; 16],
    body: &[u8],
) -> Vec<u8> {
    format!(
        "{REQUEST_MAGIC}\n{method}\n{path}\n{time}\n{}\n{}\n",
        hex(nonce),
        blake3::hash(body).to_hex()
    )
    .into_bytes()
}

/// A request's authentication, as it travels in four headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestAuth {
    pub machine: String,
    pub time: u64,
    pub nonce: [u8; 16],
    pub signature: [u8; 64],
}

impl RequestAuth {
    pub fn sign(
        key: &SigningKey,
        machine: &str,
        method: &str,
        path: &str,
        time: u64,
        nonce: [u8; 16],
        body: &[u8],
    ) -> RequestAuth {
        let signature = key.sign(&request_message(method, path, time, &nonce, body));
        RequestAuth {
            machine: machine.to_string(),
            time,
            nonce,
            signature,
        }
    }

    /// The four headers, names lowercase.
    pub fn headers(&self) -> [(&'static str, String); 4] {
        [
            (HEADER_MACHINE, self.machine.clone()),
            (HEADER_TIME, self.time.to_string()),
            (HEADER_NONCE, hex(&self.nonce)),
            (HEADER_SIGNATURE, hex(&self.signature)),
        ]
    }

    /// Reads the headers back; `get` looks one up by lowercase name.
    pub fn from_headers(get: impl Fn(&str) -> Option<String>) -> Result<RequestAuth, Error> {
        let bad = || {
            malformed(
                "the request's authentication",
                "x-nd7-machine, -time, -nonce and -signature headers",
            )
        };
        Ok(RequestAuth {
            machine: get(HEADER_MACHINE)
                .filter(|m| !m.is_empty() && m.len() <= 64)
                .ok_or_else(bad)?,
            time: get(HEADER_TIME)
                .and_then(|t| t.parse().ok())
                .ok_or_else(bad)?,
            nonce: get(HEADER_NONCE)
                .and_then(|n| unhex::<16>(&n))
                .ok_or_else(bad)?,
            signature: get(HEADER_SIGNATURE)
                .and_then(|s| unhex::<64>(&s))
                .ok_or_else(bad)?,
        })
    }

    /// Checks the signature against `key` and the time against `now`.
    /// Replays of a fresh request are the caller's to refuse, by nonce.
    pub fn verify(
        &self,
        key: &PublicKey,
        method: &str,
        path: &str,
        body: &[u8],
        now: u64,
    ) -> Result<(), Error> {
        let message = request_message(method, path, self.time, &self.nonce, body);
        if !key.verify(&message, &self.signature) {
            return Err(Error::BadSignature);
        }
        let skew = now.abs_diff(self.time);
        if skew > MAX_CLOCK_SKEW_SECS {
            return Err(Error::Stale { skew });
        }
        Ok(())
    }
}

// ---------------------------------------------------------------- batches

/// One entry of a batch's clear index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexEntry {
    pub seq: u64,
    pub hash: Hash,
    pub ts: u64,
}

/// What the vault sees of a batch in clear, and what the AEAD binds the
/// ciphertext to.
///
/// ```text
/// nd7-batch v1
/// machine <id>
/// session <hex of the session id's bytes>
/// first <seq of the first entry>
/// prev <64 hex: the hash the first entry names as prev>
/// entries <n ≥ 1>
/// <seq> <hash> <ts>          (n lines, seq counting up from first)
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchHeader {
    pub machine: String,
    pub session: String,
    pub first: u64,
    pub prev: Hash,
    pub index: Vec<IndexEntry>,
}

impl BatchHeader {
    pub fn last(&self) -> IndexEntry {
        // Never empty: parse refuses that and ship never builds one.
        self.index.last().copied().unwrap_or(IndexEntry {
            seq: self.first,
            hash: self.prev,
            ts: 0,
        })
    }

    pub fn render(&self) -> Vec<u8> {
        let mut out = format!(
            "{BATCH_HEADER_MAGIC}\nmachine {}\nsession {}\nfirst {}\nprev {}\nentries {}\n",
            self.machine,
            hex(self.session.as_bytes()),
            self.first,
            self.prev,
            self.index.len()
        );
        for e in &self.index {
            out.push_str(&format!("{} {} {}\n", e.seq, e.hash, e.ts));
        }
        out.into_bytes()
    }

    pub fn parse(bytes: &[u8]) -> Result<BatchHeader, Error> {
        let bad = || malformed("the batch header", "an nd7-batch v1 header");
        let text = std::str::from_utf8(bytes).map_err(|_| bad())?;
        let mut lines = text.lines();
        let mut field = |name: &str| {
            lines
                .next()
                .and_then(|l| l.strip_prefix(name))
                .and_then(|l| l.strip_prefix(' '))
                .map(str::to_string)
        };
        if field("nd7-batch").as_deref() != Some("v1") {
            return Err(bad());
        }
        let machine = field("machine").ok_or_else(bad)?;
        let session = field("session")
            .and_then(|s| unhex_vec(&s))
            .and_then(|s| String::from_utf8(s).ok())
            .ok_or_else(bad)?;
        crate::session_log::check_session_id(&session).map_err(|_| bad())?;
        let first: u64 = field("first")
            .and_then(|s| s.parse().ok())
            .ok_or_else(bad)?;
        let prev = field("prev")
            .and_then(|s| Hash::from_hex(s.as_bytes()))
            .ok_or_else(bad)?;
        let n: usize = field("entries")
            .and_then(|s| s.parse().ok())
            .filter(|&n| n >= 1)
            .ok_or_else(bad)?;
        let mut index = Vec::with_capacity(n.min(1 << 16));
        for (i, line) in lines.enumerate() {
            let mut parts = line.split(' ');
            let (Some(seq), Some(hash), Some(ts), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                return Err(bad());
            };
            let entry = IndexEntry {
                seq: seq.parse().map_err(|_| bad())?,
                hash: Hash::from_hex(hash.as_bytes()).ok_or_else(bad)?,
                ts: ts.parse().map_err(|_| bad())?,
            };
            if Some(entry.seq) != first.checked_add(i as u64) {
                return Err(bad());
            }
            index.push(entry);
        }
        let header = BatchHeader {
            machine,
            session,
            first,
            prev,
            index,
        };
        // One spelling only: what was authenticated is what is stored.
        if header.index.len() != n || header.render() != bytes {
            return Err(bad());
        }
        Ok(header)
    }
}

/// A batch as it travels:
///
/// ```text
/// "ND7B" 0x01
/// u32 BE length, the header        (associated data)
/// u32 BE length, the wrapped chain key (an age v1 file)
/// 24 bytes nonce
/// the rest: XChaCha20-Poly1305(chain key, nonce, zstd(entries), header)
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    pub header: BatchHeader,
    pub header_bytes: Vec<u8>,
    pub wrapped_key: Vec<u8>,
    pub nonce: [u8; 24],
    pub ciphertext: Vec<u8>,
}

/// The index entry of each whole line in `entries` (which must be complete,
/// newline-terminated log lines).
pub fn index_lines(entries: &[u8]) -> Result<Vec<IndexEntry>, Error> {
    entries
        .split_inclusive(|&b| b == b'\n')
        .map(|line| {
            let line = line.strip_suffix(b"\n").unwrap_or(line);
            let stated = chain::read_stated(line)
                .map_err(|f| Error::IndexMismatch(format!("a line is not an entry: {f}")))?;
            Ok(IndexEntry {
                seq: stated.seq,
                hash: stated.hash,
                ts: entry_ts(line).unwrap_or(0),
            })
        })
        .collect()
}

/// The `ts` member that follows `seq` in every envelope nd7 writes.
pub fn entry_ts(line: &[u8]) -> Option<u64> {
    let rest = line.strip_prefix(b"{\"seq\":")?;
    let comma = rest.iter().position(|&b| b == b',')?;
    let rest = rest[comma..].strip_prefix(b",\"ts\":")?;
    let end = rest.iter().position(|b| !b.is_ascii_digit())?;
    std::str::from_utf8(&rest[..end]).ok()?.parse().ok()
}

/// Compresses and encrypts `entries` (whole log lines) under `key`, bound to
/// `header`.
pub fn seal_batch(
    header: &BatchHeader,
    entries: &[u8],
    key: &ChainKey,
    wrapped_key: &[u8],
    nonce: [u8; 24],
) -> Vec<u8> {
    let header_bytes = header.render();
    let compressed = compress(entries);
    let ciphertext = XChaCha20Poly1305::new(key.expose_secret().into())
        .encrypt(
            &nonce.into(),
            Payload {
                msg: &compressed,
                aad: &header_bytes,
            },
        )
        .unwrap_or_default();
    let mut out = Vec::with_capacity(
        BATCH_BODY_MAGIC.len() + 8 + header_bytes.len() + wrapped_key.len() + 24 + ciphertext.len(),
    );
    out.extend_from_slice(BATCH_BODY_MAGIC);
    out.extend_from_slice(&(header_bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(&header_bytes);
    out.extend_from_slice(&(wrapped_key.len() as u32).to_be_bytes());
    out.extend_from_slice(wrapped_key);
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&ciphertext);
    out
}

/// A zstd frame of `entries`: libzstd at level 3 when built with it, else
/// ruzstd's one implemented level (about zstd's level 1, five times slower;
/// ADR-0021). Either is read by [`open_batch`].
fn compress(entries: &[u8]) -> Vec<u8> {
    #[cfg(feature = "zstd-c")]
    if let Ok(frame) = zstd::bulk::compress(entries, 3) {
        return frame;
    }
    ruzstd::encoding::compress_to_vec(entries, ruzstd::encoding::CompressionLevel::Fastest)
}

/// Splits a batch body into its parts and parses its header. Checks the
/// framing only: whether it decrypts is [`open_batch`]'s question.
pub fn parse_batch(body: &[u8]) -> Result<Batch, Error> {
    let bad = || malformed("the batch", "an ND7B v1 batch");
    let rest = body.strip_prefix(BATCH_BODY_MAGIC).ok_or_else(bad)?;
    let take = |rest: &[u8]| -> Result<(Vec<u8>, usize), Error> {
        let len: [u8; 4] = rest
            .get(..4)
            .and_then(|l| l.try_into().ok())
            .ok_or_else(bad)?;
        let len = u32::from_be_bytes(len) as usize;
        let part = rest.get(4..4 + len).ok_or_else(bad)?;
        Ok((part.to_vec(), 4 + len))
    };
    let (header_bytes, used) = take(rest)?;
    let rest = &rest[used..];
    let (wrapped_key, used) = take(rest)?;
    let rest = &rest[used..];
    let nonce: [u8; 24] = rest
        .get(..24)
        .and_then(|n| n.try_into().ok())
        .ok_or_else(bad)?;
    let ciphertext = rest[24..].to_vec();
    if ciphertext.len() < 16 {
        return Err(bad());
    }
    let header = BatchHeader::parse(&header_bytes)?;
    Ok(Batch {
        header,
        header_bytes,
        wrapped_key,
        nonce,
        ciphertext,
    })
}

/// Decrypts and decompresses a batch, then checks that its lines are exactly
/// the chain its header promises: each line sealed and linked (the same
/// [`Walker`] `nd7 verify` uses), starting at `first` after `prev`, with the
/// index's seq, hash and ts. Returns the lines.
pub fn open_batch(batch: &Batch, key: &ChainKey) -> Result<Vec<u8>, Error> {
    let compressed = XChaCha20Poly1305::new(key.expose_secret().into())
        .decrypt(
            &batch.nonce.into(),
            Payload {
                msg: &batch.ciphertext,
                aad: &batch.header_bytes,
            },
        )
        .map_err(|_| Error::BatchDecrypt)?;
    let decoder = ruzstd::decoding::StreamingDecoder::new(compressed.as_slice())
        .map_err(|e| Error::Decompress(e.to_string()))?;
    let mut entries = Vec::new();
    decoder
        .take(MAX_BATCH_ENTRIES_BYTES as u64 + 1)
        .read_to_end(&mut entries)
        .map_err(|e| Error::Decompress(e.to_string()))?;
    if entries.len() > MAX_BATCH_ENTRIES_BYTES {
        return Err(Error::Decompress("more than 8 MiB of entries".into()));
    }
    check_entries(&batch.header, &entries)?;
    Ok(entries)
}

/// Checks whole lines against a header: the chain from (first, prev), and
/// the index line for line.
pub fn check_entries(header: &BatchHeader, entries: &[u8]) -> Result<(), Error> {
    if !entries.ends_with(b"\n") {
        return Err(Error::IndexMismatch("the last line has no newline".into()));
    }
    let mut walker = Walker::new(Cursor {
        next_seq: header.first,
        prev: header.prev,
    });
    walker.feed(entries).map_err(|b| {
        Error::IndexMismatch(format!("entry {}: {}", header.first + b.entry, b.fault))
    })?;
    let found = index_lines(entries)?;
    if found != header.index {
        return Err(Error::IndexMismatch(format!(
            "{} lines against {} index entries, or a seq, hash or ts differs",
            found.len(),
            header.index.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
#[path = "vault_tests.rs"]
mod tests;
