//! Enrolment: a token the organisation signed lets one machine key in, and
//! the record of that stays checkable by admins without trusting the vault.
//!
//! The token's secret derives an Ed25519 token key; the organisation signs
//! the token key's public half, an expiry, and the lowest recipients version
//! the machine may take at enrolment. The machine signs its own key and the
//! time with the token key (the endorsement) and sends the public half, the
//! organisation's signature and the endorsement, never the secret: the vault
//! can check all of it, and store it, but cannot endorse a key of its own,
//! nor date an endorsement, nor hand a new machine an older recipients
//! document than the organisation's current one.

use super::*;

/// A parsed enrolment token,
/// `<32 hex secret>.<expires>.<recipients version>.<128 hex signature>`.
pub struct EnrolToken {
    key: SigningKey,
    pub expires: u64,
    /// The lowest recipients version a machine enrolling with it takes.
    pub recipients: u64,
    pub signature: [u8; 64],
}

impl fmt::Debug for EnrolToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "EnrolToken(key {}, expires {}, recipients {})",
            self.key.public().to_hex(),
            self.expires,
            self.recipients
        )
    }
}

/// The bytes the organisation signs for a token.
fn token_message(org: &PublicKey, token_key: &PublicKey, expires: u64, recipients: u64) -> String {
    format!(
        "{TOKEN_MAGIC}\norg {}\nkey {}\nexpires {expires}\nrecipients {recipients}\n",
        org.to_hex(),
        token_key.to_hex()
    )
}

/// The bytes the token key signs for a machine, at `at` (Unix s).
fn endorse_message(machine: &PublicKey, at: u64) -> String {
    format!("{ENDORSE_MAGIC}\nkey {}\nat {at}\n", machine.to_hex())
}

fn token_key(secret: &[u8; 16]) -> SigningKey {
    SigningKey::from_seed(&Secret32(blake3::derive_key(TOKEN_KEY_CONTEXT, secret)))
}

impl EnrolToken {
    /// Mints a token: `secret` is 16 random bytes, `expires` Unix seconds,
    /// `recipients` the version of the organisation's current recipients
    /// document (a machine enrolling with it refuses any older one).
    pub fn mint(org: &SigningKey, secret: &[u8; 16], expires: u64, recipients: u64) -> String {
        let key = token_key(secret);
        let signature =
            org.sign(token_message(&org.public(), &key.public(), expires, recipients).as_bytes());
        format!("{}.{expires}.{recipients}.{}", hex(secret), hex(&signature))
    }

    pub fn parse(text: &str) -> Result<EnrolToken, Error> {
        let bad = || {
            malformed(
                "the enrolment token",
                "<32 hex>.<expiry>.<recipients version>.<128 hex>, as `nd7 admin enrol-token` prints it",
            )
        };
        let mut parts = text.trim().split('.');
        let (Some(secret), Some(expires), Some(recipients), Some(signature), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(bad());
        };
        let mut secret = unhex::<16>(secret).ok_or_else(bad)?;
        let key = token_key(&secret);
        secret.zeroize();
        Ok(EnrolToken {
            key,
            expires: expires.parse().map_err(|_| bad())?,
            recipients: recipients.parse().map_err(|_| bad())?,
            signature: unhex::<64>(signature).ok_or_else(bad)?,
        })
    }

    /// The token's public key: what the vault records as used.
    pub fn public(&self) -> PublicKey {
        self.key.public()
    }

    /// Checks the organisation's signature: a typo or a token of another
    /// organisation is caught before the vault is asked.
    pub fn check(&self, org: &PublicKey) -> Result<(), Error> {
        if org.verify(
            token_message(org, &self.key.public(), self.expires, self.recipients).as_bytes(),
            &self.signature,
        ) {
            Ok(())
        } else {
            Err(Error::BadTokenSignature(org.fingerprint()))
        }
    }

    /// What the machine sends to enrol `machine`, endorsed at `at`.
    pub fn enrolment(&self, machine: &PublicKey, at: u64) -> Enrolment {
        Enrolment {
            key: *machine,
            token_key: self.key.public(),
            expires: self.expires,
            recipients: self.recipients,
            endorsed: at,
            token_signature: self.signature,
            endorsement: self.key.sign(endorse_message(machine, at).as_bytes()),
        }
    }
}

/// An enrolment request's body, and the record the vault keeps of it.
///
/// ```text
/// nd7-enroll v3
/// key <64 hex: the machine's public key>
/// token-key <64 hex>
/// expires <Unix s>
/// recipients <the token's lowest recipients version>
/// endorsed <Unix s: when the token key endorsed the machine's key>
/// token-signature <128 hex: the organisation's over the token>
/// endorsement <128 hex: the token key's over the machine's key and the time>
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Enrolment {
    pub key: PublicKey,
    pub token_key: PublicKey,
    pub expires: u64,
    pub recipients: u64,
    pub endorsed: u64,
    pub token_signature: [u8; 64],
    pub endorsement: [u8; 64],
}

impl Enrolment {
    pub fn render(&self) -> String {
        format!(
            "{ENROLL_MAGIC}\nkey {}\ntoken-key {}\nexpires {}\nrecipients {}\nendorsed {}\ntoken-signature {}\nendorsement {}\n",
            self.key.to_hex(),
            self.token_key.to_hex(),
            self.expires,
            self.recipients,
            self.endorsed,
            hex(&self.token_signature),
            hex(&self.endorsement)
        )
    }

    pub fn parse(body: &[u8]) -> Result<Enrolment, Error> {
        let bad = || malformed("the enrolment record", "an nd7-enroll v3 body");
        let text = std::str::from_utf8(body).map_err(|_| bad())?;
        let mut lines = text.lines();
        if lines.next() != Some(ENROLL_MAGIC) {
            return Err(bad());
        }
        let number = |line: Option<&str>, name: &str| {
            field(line, name)
                .and_then(|e| e.parse::<u64>().ok())
                .ok_or_else(bad)
        };
        let enrolment = Enrolment {
            key: field(lines.next(), "key")
                .and_then(PublicKey::from_hex)
                .ok_or_else(bad)?,
            token_key: field(lines.next(), "token-key")
                .and_then(PublicKey::from_hex)
                .ok_or_else(bad)?,
            expires: number(lines.next(), "expires")?,
            recipients: number(lines.next(), "recipients")?,
            endorsed: number(lines.next(), "endorsed")?,
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
    /// machine key at the stated time, no later than the token expired
    /// (what an admin checks: the vault cannot date an endorsement). Given
    /// `now` (the vault, at enrolment), also that the token has not expired
    /// by then.
    pub fn verify(&self, org: &PublicKey, now: Option<u64>) -> Result<(), Error> {
        let message = token_message(org, &self.token_key, self.expires, self.recipients);
        if !org.verify(message.as_bytes(), &self.token_signature) {
            return Err(Error::BadTokenSignature(org.fingerprint()));
        }
        if !self.token_key.verify(
            endorse_message(&self.key, self.endorsed).as_bytes(),
            &self.endorsement,
        ) {
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
        if self.endorsed > self.expires {
            return Err(Error::EndorsedLate {
                expires: self.expires,
                endorsed: self.endorsed,
            });
        }
        Ok(())
    }
}
