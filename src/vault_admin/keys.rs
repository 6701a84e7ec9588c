//! The admins' keys and tokens: the organisation key, an admin's age
//! identity, the recipients document the organisation signs, enrolment
//! tokens and the register `nd7 admin machines` holds the vault to.

use std::path::{Path, PathBuf};

use crate::ship::{self, ShipError};
use crate::vault::{
    self, AgeIdentity, AgeRecipient, EnrolToken, PublicKey, Recipients, Secret32, SigningKey,
};

/// An organisation key: its seed as a file's text, and its fingerprint.
pub fn new_org_key() -> Result<(String, String), ShipError> {
    let seed = Secret32::from_bytes(ship::random()?);
    let fp = SigningKey::from_seed(&seed).public().fingerprint();
    let text = format!(
        "# nd7 organisation key (Ed25519 seed); keep it offline\n# fingerprint: {fp}\n{}\n",
        vault::hex(seed.expose_secret())
    );
    Ok((text, fp))
}

/// An admin's age identity, as age-keygen writes one, and its recipient.
pub fn new_age_identity() -> Result<(String, String), ShipError> {
    let id = AgeIdentity::from_secret(&Secret32::from_bytes(ship::random()?));
    let recipient = id.recipient().to_string();
    let text = format!(
        "# created by nd7 admin age-key\n# public key: {recipient}\n{}\n",
        id.to_bech32()
    );
    Ok((text, recipient))
}

fn org_key(text: &str) -> Result<SigningKey, ShipError> {
    Ok(SigningKey::from_seed(&vault::parse_secret_text(
        text,
        "the organisation key",
    )?))
}

/// Signs a recipients document of `version`, valid until `valid_until`,
/// naming the vault's key, with the organisation key in `org_key_text`.
pub fn sign_recipients(
    org_key_text: &str,
    version: u64,
    valid_until: u64,
    vault_key: &str,
    recipients: &[String],
) -> Result<String, ShipError> {
    let vault_key = PublicKey::from_hex(vault_key).ok_or(vault::Error::Malformed {
        what: "--vault-key",
        expected: "the 64 hex digits `nd7-vault key` printed",
    })?;
    let parsed = recipients
        .iter()
        .map(|r| AgeRecipient::parse(r))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Recipients::sign(
        &org_key(org_key_text)?,
        version,
        valid_until,
        &vault_key,
        &parsed,
    ))
}

/// An enrolment token valid for `hours`, signed with the organisation key,
/// naming the version of `recipients_text` (the document the vault holds,
/// which that key must have signed) as the lowest a machine may take.
pub fn enrol_token(
    org_key_text: &str,
    recipients_text: &str,
    hours: u64,
) -> Result<String, ShipError> {
    let org = org_key(org_key_text)?;
    let doc = Recipients::verify(recipients_text, &org.public().fingerprint())?;
    let expires = ship::unix_now().saturating_add(hours.saturating_mul(3600));
    Ok(EnrolToken::mint(
        &org,
        &ship::random()?,
        expires,
        doc.version,
    ))
}

/// One token of the organisation's register: its public key, when it
/// expires, and whom it was for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registered {
    pub token_key: PublicKey,
    pub expires: u64,
    pub label: String,
}

const REGISTER_HEAD: &str =
    "# nd7 enrolment tokens (nd7 admin enroll-token): token key, expires (Unix s), label\n";

/// The register's lines: `<token key hex> <expires> <label>`, `#` lines
/// aside. A line that does not read is an error naming it.
pub fn read_register(path: &Path) -> Result<Vec<Registered>, ShipError> {
    let text = std::fs::read_to_string(path).map_err(|e| ShipError::Io {
        path: path.to_path_buf(),
        action: "read",
        source: e,
    })?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut parts = line.splitn(3, ' ');
        let parsed = (|| {
            Some(Registered {
                token_key: PublicKey::from_hex(parts.next()?)?,
                expires: parts.next()?.parse().ok()?,
                label: parts.next().unwrap_or_default().to_string(),
            })
        })();
        out.push(parsed.ok_or_else(|| ShipError::BadFile {
            path: path.to_path_buf(),
            what: format!(
                "line {} is not `<token key> <expires> <label>` as `nd7 admin enroll-token` writes it",
                n + 1
            ),
        })?);
    }
    Ok(out)
}

/// The register's place when none is named: the organisation key's file
/// with `.tokens` added.
pub fn default_register(org_key: &Path) -> PathBuf {
    let mut name = org_key.to_path_buf().into_os_string();
    name.push(".tokens");
    name.into()
}

/// Adds a token to the organisation's register (0600, created with its
/// header line if missing, synced): what `nd7 admin machines` holds the
/// vault's machines to.
pub fn register_token(path: &Path, token: &str, label: &str) -> Result<(), ShipError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if label.chars().any(char::is_control) {
        return Err(ShipError::BadFile {
            path: path.to_path_buf(),
            what: "--label must be one line of text, without control characters".into(),
        });
    }
    let parsed = EnrolToken::parse(token)?;
    let io = |action| {
        let path = path.to_path_buf();
        move |source| ShipError::Io {
            path,
            action,
            source,
        }
    };
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)
        .map_err(io("open"))?;
    let fresh = f.metadata().map_err(io("stat"))?.len() == 0;
    let line = format!(
        "{}{} {} {label}\n",
        if fresh { REGISTER_HEAD } else { "" },
        parsed.public().to_hex(),
        parsed.expires
    );
    f.write_all(line.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(io("append to"))
}
