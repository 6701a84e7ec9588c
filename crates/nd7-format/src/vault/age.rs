//! Chain keys wrapped to admins as standard age v1 files (X25519 stanzas),
//! so the stock `age` CLI can recover them.

use super::*;

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
