//! Enrolment: a token the organisation signed lets one machine key in, and
//! the record of that stays checkable by admins without trusting the vault.
//!
//! The token's secret derives an Ed25519 token key; the organisation signs
//! the token key's public half and an expiry. The machine signs its own key
//! with the token key (the endorsement) and sends the public half, the
//! organisation's signature and the endorsement, never the secret: the vault
//! can check all of it, and store it, but cannot endorse a key of its own.

use super::*;

/// A parsed enrolment token, `<32 hex secret>.<expires>.<128 hex signature>`.
pub struct EnrolToken {
    key: SigningKey,
    pub expires: u64,
    pub signature: [u8; 64],
}

impl fmt::Debug for EnrolToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "EnrolToken(key {}, expires {})",
            self.key.public().to_hex(),
            self.expires
        )
    }
}

/// The bytes the organisation signs for a token.
fn token_message(org: &PublicKey, token_key: &PublicKey, expires: u64) -> String {
    format!(
        "{TOKEN_MAGIC}\norg {}\nkey {}\nexpires {expires}\n",
        org.to_hex(),
        token_key.to_hex()
    )
}

/// The bytes the token key signs for a machine.
fn endorse_message(machine: &PublicKey) -> String {
    format!("{ENDORSE_MAGIC}\nkey {}\n", machine.to_hex())
}

fn token_key(secret: &[u8; 16]) -> SigningKey {
    SigningKey::from_seed(&Secret32(blake3::derive_key(TOKEN_KEY_CONTEXT, secret)))
}

impl EnrolToken {
    /// Mints a token: `secret` is 16 random bytes, `expires` Unix seconds.
    pub fn mint(org: &SigningKey, secret: &[u8; 16], expires: u64) -> String {
        let key = token_key(secret);
        let signature = org.sign(token_message(&org.public(), &key.public(), expires).as_bytes());
        format!("{}.{expires}.{}", hex(secret), hex(&signature))
    }

    pub fn parse(text: &str) -> Result<EnrolToken, Error> {
        let bad = || {
            malformed(
                "the enrolment token",
                "<32 hex>.<expiry>.<128 hex>, as `nd7 admin enrol-token` prints it",
            )
        };
        let mut parts = text.trim().split('.');
        let (Some(secret), Some(expires), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        let mut secret = unhex::<16>(secret).ok_or_else(bad)?;
        let key = token_key(&secret);
        secret.zeroize();
        Ok(EnrolToken {
            key,
            expires: expires.parse().map_err(|_| bad())?,
            signature: unhex::<64>(signature).ok_or_else(bad)?,
        })
    }

    /// Checks the organisation's signature: a typo or a token of another
    /// organisation is caught before the vault is asked.
    pub fn check(&self, org: &PublicKey) -> Result<(), Error> {
        if org.verify(
            token_message(org, &self.key.public(), self.expires).as_bytes(),
            &self.signature,
        ) {
            Ok(())
        } else {
            Err(Error::BadTokenSignature(org.fingerprint()))
        }
    }

    /// What the machine sends to enrol `machine`.
    pub fn enrolment(&self, machine: &PublicKey) -> Enrolment {
        Enrolment {
            key: *machine,
            token_key: self.key.public(),
            expires: self.expires,
            token_signature: self.signature,
            endorsement: self.key.sign(endorse_message(machine).as_bytes()),
        }
    }
}

/// An enrolment request's body, and the record the vault keeps of it.
///
/// ```text
/// nd7-enroll v2
/// key <64 hex: the machine's public key>
/// token-key <64 hex>
/// expires <Unix s>
/// token-signature <128 hex: the organisation's over the token>
/// endorsement <128 hex: the token key's over the machine's key>
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Enrolment {
    pub key: PublicKey,
    pub token_key: PublicKey,
    pub expires: u64,
    pub token_signature: [u8; 64],
    pub endorsement: [u8; 64],
}

impl Enrolment {
    pub fn render(&self) -> String {
        format!(
            "{ENROLL_MAGIC}\nkey {}\ntoken-key {}\nexpires {}\ntoken-signature {}\nendorsement {}\n",
            self.key.to_hex(),
            self.token_key.to_hex(),
            self.expires,
            hex(&self.token_signature),
            hex(&self.endorsement)
        )
    }

    pub fn parse(body: &[u8]) -> Result<Enrolment, Error> {
        let bad = || malformed("the enrolment record", "an nd7-enroll v2 body");
        let text = std::str::from_utf8(body).map_err(|_| bad())?;
        let mut lines = text.lines();
        if lines.next() != Some(ENROLL_MAGIC) {
            return Err(bad());
        }
        let enrolment = Enrolment {
            key: field(lines.next(), "key")
                .and_then(PublicKey::from_hex)
                .ok_or_else(bad)?,
            token_key: field(lines.next(), "token-key")
                .and_then(PublicKey::from_hex)
                .ok_or_else(bad)?,
            expires: field(lines.next(), "expires")
                .and_then(|e| e.parse().ok())
                .ok_or_else(bad)?,
            token_signature: field(lines.next(), "token-signature")
                .and_then(sig_hex)
                .ok_or_else(bad)?,
            endorsement: field(lines.next(), "endorsement")
                .and_then(sig_hex)
                .ok_or_else(bad)?,
        };
        if enrolment.render() != text {
            return Err(bad());
        }
        Ok(enrolment)
    }

    pub fn machine_id(&self) -> String {
        machine_id(&self.key)
    }

    /// Checks that `org` signed the token and the token key endorsed this
    /// machine key, and, given `now`, that the token had not expired.
    pub fn verify(&self, org: &PublicKey, now: Option<u64>) -> Result<(), Error> {
        let message = token_message(org, &self.token_key, self.expires);
        if !org.verify(message.as_bytes(), &self.token_signature) {
            return Err(Error::BadTokenSignature(org.fingerprint()));
        }
        if !self
            .token_key
            .verify(endorse_message(&self.key).as_bytes(), &self.endorsement)
        {
            return Err(Error::BadEndorsement);
        }
        if let Some(now) = now
            && now > self.expires
        {
            return Err(Error::TokenExpired {
                expires: self.expires,
                now,
            });
        }
        Ok(())
    }
}
