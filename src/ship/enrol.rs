//! `nd7 enroll`, and the enrolled machine's `vault/` files read back
//! ([`Machine`]): its key, id, vault and recipients.

use std::fs;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::*;
use crate::http_client::{self, Trust};
use crate::vault::{self, EnrolToken, Receipt, Recipients, Secret32, SigningKey, Update};

/// What enrolling wrote.
#[derive(Debug)]
pub struct Enrolled {
    pub machine_id: String,
    pub public_key: String,
    pub recipients: usize,
    pub version: u64,
    pub dir: PathBuf,
}

/// `nd7 enroll`: fetch and check the recipients document against the pinned
/// fingerprint (over TLS that trusts only `ca_cert`, if given), check the
/// token against the organisation key, make the machine's key, have the
/// token endorse it, register it, and write the vault directory.
///
/// The key is kept in `enrolling` before it is sent, so an enrolment that
/// fails after the vault took it (a lost reply, a full disk) is tried again
/// with the same key and token, which the vault accepts again: a failed
/// enrolment never burns its token. Nothing else is written unless all of
/// it worked.
pub fn enroll(
    state_dir: &Path,
    url: &str,
    token: &str,
    fingerprint: &str,
    ca_cert: Option<&Path>,
) -> Result<Enrolled, ShipError> {
    if vault::unhex::<32>(fingerprint).is_none() {
        return Err(ShipError::BadFingerprint(fingerprint.to_string()));
    }
    let token = EnrolToken::parse(token)?;
    let dir = vault_dir(state_dir);
    let id_path = dir.join(MACHINE_ID_FILE);
    if id_path.exists() {
        return Err(ShipError::AlreadyEnrolled { path: id_path, dir });
    }
    let (trust, ca_pem) = match ca_cert {
        Some(path) => {
            http_client::read_ca_file(path)?;
            let pem = fs::read(path).map_err(io_err(path, "read"))?;
            (Trust::Pinned(path.to_path_buf()), Some(pem))
        }
        None => (Trust::Default, None),
    };
    let client = Client::new(url, &trust)?;
    let (recipients, doc) = client.ok_bound_by(Request::get("/v1/recipients"), |body| {
        let text = std::str::from_utf8(body).map_err(|_| vault::Error::Malformed {
            what: "the recipients document",
            expected: "UTF-8 text",
        })?;
        let doc = Recipients::verify(text, fingerprint)?;
        let key = doc.vault;
        Ok((doc, key))
    })?;
    let doc = String::from_utf8_lossy(&doc).into_owned();
    token.check(&recipients.org)?;
    // The token names the organisation's current version: anything older
    // is a vault handing a new machine a document the organisation replaced
    // (an admin it removed, say).
    if recipients.version < token.recipients {
        return Err(ShipError::OldRecipients {
            served: recipients.version,
            least: token.recipients,
        });
    }
    let now = unix_now();
    if recipients.expired(now) {
        return Err(ShipError::RecipientsExpired {
            version: recipients.version,
            valid_until: recipients.valid_until,
        });
    }
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(io_err(&dir, "create"))?;
    let (seed, at) = pending_key(&dir, &token.public(), now)?;
    let key = SigningKey::from_seed(&seed);
    let public = key.public();
    let machine_id = vault::machine_id(&public);
    let body = token.enrolment(&public, at).render();
    let signer = Signer {
        key: &key,
        machine: &machine_id,
    };
    let reply = match client.ok_bound(
        Request::post("/v1/enroll", body.as_bytes()).signed(&signer),
        &recipients.vault,
    ) {
        Ok(reply) => reply,
        Err(e @ (ShipError::Refused { .. } | ShipError::OverQuota { .. })) => {
            // The vault answered no: this key will never be enrolled, so
            // keep nothing (and no directory, if it was made for it).
            remove_optional(&dir.join(ENROLLING_FILE))?;
            let _ = fs::remove_dir(&dir);
            return Err(e);
        }
        Err(e) => return Err(e),
    };
    if String::from_utf8_lossy(&reply).trim_end() != format!("machine {machine_id}") {
        return Err(ShipError::Http {
            url: format!("{url}/v1/enroll"),
            detail: format!("the vault's reply is not `machine {machine_id}`"),
        });
    }
    // A tally of no session, before anything is written: from now on the
    // vault serves a tally for this machine, so one it does not serve was
    // withheld (ADR-0129). If it fails, the enrolment is tried again whole.
    // Kept or not (a later one of this key, from an earlier try), the
    // vault has a tally of this machine.
    // Its number is 1, and `tally.number` says so before `machine.id` is
    // written: the first ship's tally is number 2.
    pipeline::post_tally(&client, &signer, &recipients.vault, 1, Vec::new())?;
    write_0600(&dir.join(TALLY_NUMBER_FILE), b"1\n")?;
    write_0600(
        &dir.join(MACHINE_KEY_FILE),
        format!("{}\n", vault::hex(seed.expose_secret())).as_bytes(),
    )?;
    write_0600(
        &dir.join(SERVER_FILE),
        format!("{}\n", client.base()).as_bytes(),
    )?;
    write_0600(&dir.join(RECIPIENTS_FILE), doc.as_bytes())?;
    match &ca_pem {
        Some(pem) => write_0600(&dir.join(CA_FILE), pem.as_slice())?,
        None => remove_optional(&dir.join(CA_FILE))?,
    }
    // Last: setup's timer and ship both take machine.id as "enrolled".
    write_0600(&id_path, format!("{machine_id}\n").as_bytes())?;
    remove_optional(&dir.join(ENROLLING_FILE))?;
    Ok(Enrolled {
        machine_id,
        public_key: public.to_hex(),
        recipients: recipients.recipients.len(),
        version: recipients.version,
        dir,
    })
}

/// The machine key for enrolling with the token whose key is `token`, and
/// when the token endorsed it: the ones an earlier try with this token kept
/// in `enrolling` (so the vault sees the same enrolment again), or a new
/// key endorsed at `now`, kept there (synced) before anything is sent.
fn pending_key(
    dir: &Path,
    token: &vault::PublicKey,
    now: u64,
) -> Result<(Secret32, u64), ShipError> {
    let path = dir.join(ENROLLING_FILE);
    let wanted = format!("# for the enrolment token with key {}", token.to_hex());
    if let Some(text) = read_optional(&path)?
        && text.lines().next() == Some(wanted.as_str())
        && let Some(at) = text
            .lines()
            .find_map(|l| l.strip_prefix("# endorsed at "))
            .and_then(|t| t.trim().parse().ok())
        && let Ok(seed) = vault::parse_secret_text(&text, "enrolling")
    {
        return Ok((seed, at));
    }
    let seed = Secret32::from_bytes(random()?);
    write_0600(
        &path,
        format!(
            "{wanted}\n# endorsed at {now}\n{}\n",
            vault::hex(seed.expose_secret())
        )
        .as_bytes(),
    )?;
    Ok((seed, now))
}

/// An enrolled machine's vault files, read.
pub struct Machine {
    pub id: String,
    pub key: SigningKey,
    pub client: Client,
    pub recipients: Recipients,
    pub(super) dir: PathBuf,
}

impl Machine {
    /// The vault breaking its word about `session`, as `detail` says.
    pub fn vault_broke(&self, session: &str, detail: String) -> ShipError {
        ShipError::VaultBroke {
            machine: self.id.clone(),
            session: session.into(),
            detail,
        }
    }

    pub fn load(state_dir: &Path) -> Result<Machine, ShipError> {
        let dir = vault_dir(state_dir);
        let id = read_text(&dir.join(MACHINE_ID_FILE))?.trim().to_string();
        let key_path = dir.join(MACHINE_KEY_FILE);
        let seed =
            vault::parse_secret_text(&read_text(&key_path)?, "machine.key").map_err(|e| {
                ShipError::BadFile {
                    path: key_path.clone(),
                    what: e.to_string(),
                }
            })?;
        let key = SigningKey::from_seed(&seed);
        if vault::machine_id(&key.public()) != id {
            return Err(ShipError::BadFile {
                path: dir.join(MACHINE_ID_FILE),
                what: "is not the id of the key in machine.key".into(),
            });
        }
        let server = read_text(&dir.join(SERVER_FILE))?.trim().to_string();
        let ca = dir.join(CA_FILE);
        let trust = if ca.exists() {
            Trust::Pinned(ca)
        } else {
            Trust::Default
        };
        let rec_path = dir.join(RECIPIENTS_FILE);
        let recipients =
            Recipients::parse(&read_text(&rec_path)?).map_err(|e| ShipError::BadFile {
                path: rec_path,
                what: e.to_string(),
            })?;
        Ok(Machine {
            id,
            key,
            client: Client::new(&server, &trust)?,
            recipients,
            dir,
        })
    }

    pub(crate) fn signer(&self) -> Signer<'_> {
        Signer {
            key: &self.key,
            machine: &self.id,
        }
    }

    /// Takes the vault's current recipients document if the pinned
    /// organisation key signed it and its version is higher (how admins
    /// rotate recipients). If the vault cannot be asked, or serves anything
    /// else, the held one stays and the reason is returned.
    pub fn refresh_recipients(&mut self) -> Option<String> {
        let pinned = self.recipients.org.fingerprint();
        let held = self.recipients.version;
        // The reply is held to the vault key the document names: an old
        // document replayed by the network is refused like one the vault
        // serves.
        // Signed: the vault serves a machine it knows ahead of anonymous
        // requests (ADR-0118).
        let signer = self.signer();
        let fetched =
            self.client
                .ok_bound_by(Request::get("/v1/recipients").signed(&signer), |body| {
                    let doc = Recipients::verify(&String::from_utf8_lossy(body), &pinned)?;
                    let key = doc.vault;
                    Ok((doc, key))
                });
        let (fresh, doc) = match fetched {
            Ok((fresh, doc)) => (fresh, String::from_utf8_lossy(&doc).into_owned()),
            Err(e @ ShipError::Vault(_)) => {
                return Some(format!(
                    "kept the recipients of version {held}: the vault's document is refused: {e}"
                ));
            }
            Err(e) => return Some(format!("kept the recipients of version {held}: {e}")),
        };
        match self.recipients.update_to(&fresh) {
            Update::Newer => {
                if let Err(e) = self.keep_old_recipients() {
                    return Some(format!("kept the recipients of version {held}: {e}"));
                }
                if let Err(e) = write_0600(&self.dir.join(RECIPIENTS_FILE), doc.as_bytes()) {
                    return Some(format!("kept the recipients of version {held}: {e}"));
                }
                self.recipients = fresh;
                None
            }
            Update::Same => None,
            Update::Refused(why) => Some(format!(
                "kept the recipients of version {held}: refused: {why}"
            )),
        }
    }

    /// Appends the document held now to `recipients.old` (synced) before a
    /// newer one replaces it: receipts the vault signed under the key it
    /// names stay checkable after the vault's key changes.
    fn keep_old_recipients(&self) -> Result<(), ShipError> {
        use std::io::Write;
        let held = fs::read(self.dir.join(RECIPIENTS_FILE))
            .map_err(io_err(&self.dir.join(RECIPIENTS_FILE), "read"))?;
        let path = self.dir.join(RECIPIENTS_OLD_FILE);
        let mut f = fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .open(&path)
            .map_err(io_err(&path, "open"))?;
        f.write_all(&held)
            .and_then(|()| f.sync_all())
            .map_err(io_err(&path, "append to"))
    }

    /// Checks a receipt from the vault: countersigned by the vault key the
    /// recipients document names, over a checkpoint this machine signed,
    /// for this session.
    pub(super) fn check_receipt(&self, receipt: &Receipt, session: &str) -> Result<(), String> {
        receipt
            .verify(&self.recipients.vault, &self.key.public())
            .map_err(|e| e.to_string())?;
        let c = &receipt.checkpoint;
        if c.machine != self.id || c.session != session {
            return Err(format!(
                "it is for machine {}, session {}",
                c.machine, c.session
            ));
        }
        Ok(())
    }
}
