//! The recipients document: the admins' age recipients, signed by the
//! organisation key whose fingerprint machines pin at enrolment.

use super::*;

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
