//! The recipients document: the admins' age recipients and the vault's key,
//! versioned and signed by the organisation key whose fingerprint machines
//! and admins pin.

use super::*;

/// A recipients document: who chain keys are wrapped to, and which vault key
/// countersigns, signed by the organisation key.
///
/// ```text
/// nd7-recipients v3
/// org <64 hex: the organisation's Ed25519 public key>
/// version <n ≥ 1: machines take only a higher one>
/// valid-until <Unix s: after this, machines start no new chain key under it>
/// vault <64 hex: the vault's Ed25519 public key>
/// recipient age1…            (one line each, at least one)
/// signature <128 hex: Ed25519 over every byte above this line>
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recipients {
    pub org: PublicKey,
    pub version: u64,
    /// The organisation's promise to sign a newer document before then: a
    /// vault that keeps serving this one after it (a freeze) is noticed.
    pub valid_until: u64,
    pub vault: PublicKey,
    pub recipients: Vec<AgeRecipient>,
}

/// Whether a machine holding one document takes another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Update {
    /// A higher version: take it.
    Newer,
    /// The same document: nothing to do.
    Same,
    /// A lower version, or the same version with other contents: refuse.
    Refused(String),
}

impl Recipients {
    fn signed_part(&self) -> String {
        let mut text = format!(
            "{RECIPIENTS_MAGIC}\norg {}\nversion {}\nvalid-until {}\nvault {}\n",
            self.org.to_hex(),
            self.version,
            self.valid_until,
            self.vault.to_hex()
        );
        for r in &self.recipients {
            text.push_str(&format!("recipient {r}\n"));
        }
        text
    }

    /// The signed document.
    pub fn sign(
        org_key: &SigningKey,
        version: u64,
        valid_until: u64,
        vault: &PublicKey,
        recipients: &[AgeRecipient],
    ) -> String {
        let doc = Recipients {
            org: org_key.public(),
            version,
            valid_until,
            vault: *vault,
            recipients: recipients.to_vec(),
        };
        let mut text = doc.signed_part();
        let signature = org_key.sign(text.as_bytes());
        text.push_str(&format!("signature {}\n", hex(&signature)));
        text
    }

    /// Reads a document and checks its own signature, whoever signed it.
    pub fn parse(text: &str) -> Result<Recipients, Error> {
        let bad = || malformed("the recipients document", "an nd7-recipients v3 document");
        let (signed, signature) = split_signed(text, "signature").ok_or_else(bad)?;
        let mut lines = signed.lines();
        if lines.next() != Some(RECIPIENTS_MAGIC) {
            return Err(bad());
        }
        let org = field(lines.next(), "org")
            .and_then(PublicKey::from_hex)
            .ok_or_else(bad)?;
        let version = field(lines.next(), "version")
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|&v| v >= 1)
            .ok_or_else(bad)?;
        let valid_until = field(lines.next(), "valid-until")
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or_else(bad)?;
        let vault = field(lines.next(), "vault")
            .and_then(PublicKey::from_hex)
            .ok_or_else(bad)?;
        let recipients = lines
            .map(|l| {
                field(Some(l), "recipient")
                    .ok_or_else(bad)
                    .and_then(AgeRecipient::parse)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let doc = Recipients {
            org,
            version,
            valid_until,
            vault,
            recipients,
        };
        if doc.signed_part() != signed {
            return Err(bad());
        }
        if !org.verify(signed.as_bytes(), &signature) {
            return Err(Error::BadDocumentSignature);
        }
        if doc.recipients.is_empty() {
            return Err(Error::NoRecipients);
        }
        Ok(doc)
    }

    /// [`Recipients::parse`], then refuses a document signed by any key but
    /// the one whose fingerprint was pinned.
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

    /// Whether the document's validity ran out by `now`: the organisation
    /// promised a newer one before then, so a vault still serving this one
    /// withholds it (or the organisation is late), and no new chain key is
    /// started under it.
    pub fn expired(&self, now: u64) -> bool {
        now > self.valid_until
    }

    /// Whether a holder of `self` takes `offered` (both verified against the
    /// same organisation key): only a higher version, never a rollback.
    pub fn update_to(&self, offered: &Recipients) -> Update {
        use std::cmp::Ordering;
        match offered.version.cmp(&self.version) {
            Ordering::Greater => Update::Newer,
            Ordering::Equal if offered == self => Update::Same,
            Ordering::Equal => Update::Refused(format!(
                "the vault serves a different document with the same version {}",
                offered.version
            )),
            Ordering::Less => Update::Refused(format!(
                "the vault serves version {}, older than the held version {}: a rollback",
                offered.version, self.version
            )),
        }
    }
}
