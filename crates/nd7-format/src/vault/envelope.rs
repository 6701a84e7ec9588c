//! The signed envelope that batches and transcript pieces travel in, sealed,
//! read and opened by one code:
//!
//! ```text
//! magic
//! u32 BE length, the header        (associated data)
//! u32 BE length, the wrapped chain key (an age v1 file)
//! 24 bytes nonce
//! u32 BE length, XChaCha20-Poly1305(chain key, nonce, zstd(payload), header)
//! 64 bytes: the machine's Ed25519 signature over a text that names the
//!           BLAKE3 of every byte before it
//! ```
//!
//! What differs is the caller's: the magic, the header, the text the machine
//! signs ([`Checkpoint`] for a batch, `nd7-transcript-signed` for a piece)
//! and the payload's bounds.

use super::*;

/// An envelope's parts, as [`split`] reads them.
pub(super) struct Envelope {
    pub header_bytes: Vec<u8>,
    pub wrapped_key: Vec<u8>,
    pub nonce: [u8; 24],
    pub ciphertext: Vec<u8>,
    /// BLAKE3 of every byte before the signature.
    pub signed: [u8; 32],
    pub signature: [u8; 64],
}

/// Seals `payload` (compressed, then encrypted under `key`, bound to
/// `header_bytes`) into an envelope after `magic`, with the machine's
/// signature over `signed_text` of the BLAKE3 of every byte before it.
/// Returns the envelope's bytes and that BLAKE3.
pub(super) fn seal(
    magic: &[u8],
    header_bytes: &[u8],
    payload: &[u8],
    (key, wrapped_key, nonce): (&ChainKey, &[u8], [u8; 24]),
    machine: &SigningKey,
    signed_text: impl FnOnce(&[u8; 32]) -> String,
) -> (Vec<u8>, [u8; 32]) {
    let compressed = compress(payload);
    let ciphertext = XChaCha20Poly1305::new(key.expose_secret().into())
        .encrypt(
            &nonce.into(),
            Payload {
                msg: &compressed,
                aad: header_bytes,
            },
        )
        .unwrap_or_default();
    let mut out = Vec::with_capacity(
        magic.len() + 12 + header_bytes.len() + wrapped_key.len() + 24 + ciphertext.len() + 64,
    );
    out.extend_from_slice(magic);
    out.extend_from_slice(&(header_bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(header_bytes);
    out.extend_from_slice(&(wrapped_key.len() as u32).to_be_bytes());
    out.extend_from_slice(wrapped_key);
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&(ciphertext.len() as u32).to_be_bytes());
    out.extend_from_slice(&ciphertext);
    let signed: [u8; 32] = blake3::hash(&out).into();
    out.extend_from_slice(&machine.sign(signed_text(&signed).as_bytes()));
    (out, signed)
}

/// A zstd frame of `payload`: libzstd at level 3 when built with it, else
/// ruzstd's one implemented level (about zstd's level 1, five times slower;
/// ADR-0021). Either is read by [`open`].
fn compress(payload: &[u8]) -> Vec<u8> {
    #[cfg(feature = "zstd-c")]
    if let Ok(frame) = zstd::bulk::compress(payload, 3) {
        return frame;
    }
    ruzstd::encoding::compress_to_vec(payload, ruzstd::encoding::CompressionLevel::Fastest)
}

/// Splits `body` into an envelope's parts, after `magic`; `what` and
/// `shape` name it in the error. Checks the framing only (and that the
/// ciphertext can hold the AEAD tag).
pub(super) fn split(
    body: &[u8],
    magic: &[u8],
    what: &'static str,
    shape: &'static str,
) -> Result<Envelope, Error> {
    let bad = || malformed(what, shape);
    let rest = body.strip_prefix(magic).ok_or_else(bad)?;
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
    let rest = &rest[24..];
    let (ciphertext, used) = take(rest)?;
    let signature: [u8; 64] = rest[used..].try_into().map_err(|_| bad())?;
    if ciphertext.len() < 16 {
        return Err(bad());
    }
    Ok(Envelope {
        header_bytes,
        wrapped_key,
        nonce,
        ciphertext,
        signed: blake3::hash(&body[..body.len() - 64]).into(),
        signature,
    })
}

/// What [`open`] decrypts: the parts of an envelope the machine sealed, and
/// the chain key id its header names.
pub(super) struct Sealed<'a> {
    pub header_key: KeyId,
    pub header_bytes: &'a [u8],
    pub nonce: &'a [u8; 24],
    pub ciphertext: &'a [u8],
}

/// Decrypts and decompresses an envelope's payload under `key`, which must
/// be the one its header names: at most `limit` bytes and one more, so a
/// caller can tell a payload over its bound.
pub(super) fn open(sealed: Sealed<'_>, key: &ChainKey, limit: usize) -> Result<Vec<u8>, Error> {
    if KeyId::of(key) != sealed.header_key {
        return Err(Error::IndexMismatch(format!(
            "the header names chain key {}, but the wrapped key is {}",
            sealed.header_key,
            KeyId::of(key)
        )));
    }
    let compressed = XChaCha20Poly1305::new(key.expose_secret().into())
        .decrypt(
            sealed.nonce.into(),
            Payload {
                msg: sealed.ciphertext,
                aad: sealed.header_bytes,
            },
        )
        .map_err(|_| Error::BatchDecrypt)?;
    let decoder = ruzstd::decoding::StreamingDecoder::new(compressed.as_slice())
        .map_err(|e| Error::Decompress(e.to_string()))?;
    let mut payload = Vec::new();
    decoder
        .take(limit as u64 + 1)
        .read_to_end(&mut payload)
        .map_err(|e| Error::Decompress(e.to_string()))?;
    Ok(payload)
}
