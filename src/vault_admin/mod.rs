//! The admins' side of the vault: keys, the recipients document, enrolment
//! tokens, and reading a session back (`nd7 admin`). Reading back trusts
//! the vault for nothing: every batch must carry the signature of a machine
//! key the organisation let in, and a machine's own copy (its log and the
//! receipts it kept) tells what the vault dropped from what the machine
//! rewrote.

#![forbid(unsafe_code)]

use std::fmt;
use std::io::{self, BufRead, Read};
use std::path::{Path, PathBuf};

use crate::chain::{Cursor, Hash};
use crate::http_client::Trust;
use crate::session_log::{self, SessionLog};
use crate::ship::{self, Client, LOST_FILE, RECEIPT_FILE, ShipError};
use crate::vault::{
    self, AgeIdentity, AgeRecipient, ChainKey, Checkpoint, EnrolToken, Enrolment, IndexKey, KeyId,
    PublicKey, PullEnd, PullOf, Receipt, Recipients, RestoreNotice, Secret32, SigningKey,
};

// ---------------------------------------------------------------- keys

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
    "# nd7 enrolment tokens (nd7 admin enrol-token): token key, expires (Unix s), label\n";

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
                "line {} is not `<token key> <expires> <label>` as `nd7 admin enrol-token` writes it",
                n + 1
            ),
        })?);
    }
    Ok(out)
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

/// What `nd7 admin machines` found: a line per machine and per token, and
/// what the register does not account for.
#[derive(Debug, Default)]
pub struct Machines {
    pub lines: Vec<String>,
    pub findings: Vec<Finding>,
}

/// Every machine the vault enrolled, held to the organisation key and to
/// the register: each record must verify, its token be one the register
/// lists, and no token have let in two machines. Both ids and labels come
/// from outside: show them through [`crate::read::safe::term`].
pub fn list_machines(
    url: &str,
    trust: &Trust,
    read_token: &str,
    fingerprint: &str,
    register: &[Registered],
) -> Result<Machines, PullError> {
    let client = Client::new(url, trust)?;
    let (doc, _) = client.ok_bound_by("GET", "/v1/recipients", |body| {
        let doc = Recipients::verify(&String::from_utf8_lossy(body), fingerprint)?;
        let key = doc.vault;
        Ok((doc, key))
    })?;
    let text = client.ok_bound(
        "GET",
        "/v1/machines",
        b"",
        None,
        Some(read_token),
        &doc.vault,
    )?;
    let text = String::from_utf8_lossy(&text);
    let mut out = Machines::default();
    let mut by_token: Vec<(PublicKey, Vec<String>)> = Vec::new();
    let magic = "nd7-enroll ";
    let mut starts: Vec<usize> = text.match_indices(magic).map(|(i, _)| i).collect();
    starts.push(text.len());
    for w in starts.windows(2) {
        let record = &text[w[0]..w[1]];
        let enrolment = match Enrolment::parse(record.as_bytes()) {
            Ok(e) => e,
            Err(e) => {
                out.findings.push(Finding {
                    fault: Fault::Vault,
                    text: format!("the vault lists an enrolment record that does not read: {e}"),
                });
                continue;
            }
        };
        let id = enrolment.machine_id();
        if let Err(e) = enrolment.verify(&doc.org, None) {
            out.findings.push(Finding {
                fault: Fault::Vault,
                text: format!(
                    "machine {id}: its enrolment record is forged: {e}; the organisation never let this key in"
                ),
            });
            continue;
        }
        let registered = register.iter().find(|r| r.token_key == enrolment.token_key);
        out.lines.push(format!(
            "machine {id} enrolled {} with token {} ({})",
            when(enrolment.endorsed),
            &enrolment.token_key.to_hex()[..16],
            registered.map_or("NOT IN THE REGISTER".to_string(), |r| {
                if r.label.is_empty() {
                    "no label".to_string()
                } else {
                    format!("for {}", r.label)
                }
            })
        ));
        if registered.is_none() {
            out.findings.push(Finding {
                fault: Fault::Vault,
                text: format!(
                    "machine {id}: its enrolment token (key {}) is not in the register: the organisation's key signed it, but `nd7 admin enrol-token` did not record it (minted elsewhere, or with another register)",
                    enrolment.token_key.to_hex()
                ),
            });
        }
        match by_token.iter_mut().find(|(k, _)| *k == enrolment.token_key) {
            Some((_, ids)) => ids.push(id),
            None => by_token.push((enrolment.token_key, vec![id])),
        }
    }
    for (key, ids) in by_token.iter().filter(|(_, ids)| ids.len() > 1) {
        out.findings.push(Finding {
            fault: Fault::Vault,
            text: format!(
                "the enrolment token with key {} let in {} machines ({}): a token lets in one",
                key.to_hex(),
                ids.len(),
                ids.join(", ")
            ),
        });
    }
    let now = ship::unix_now();
    for r in register {
        if !by_token.iter().any(|(k, _)| *k == r.token_key) {
            out.lines.push(format!(
                "token {} ({}) not used; {} {}",
                &r.token_key.to_hex()[..16],
                if r.label.is_empty() {
                    "no label".to_string()
                } else {
                    format!("for {}", r.label)
                },
                if r.expires < now {
                    "expired"
                } else {
                    "expires"
                },
                when(r.expires)
            ));
        }
    }
    Ok(out)
}

/// Lists the chains a vault holds: (machine, session, last seq). Both
/// come from the vault: show them through [`crate::read::safe::term`].
pub fn list_sessions(
    url: &str,
    trust: &Trust,
    read_token: &str,
) -> Result<Vec<(String, String, u64)>, ShipError> {
    let client = Client::new(url, trust)?;
    let text = client.ok("GET", "/v1/sessions", b"", None, Some(read_token))?;
    let text = String::from_utf8_lossy(&text);
    Ok(text
        .lines()
        .filter_map(|l| {
            let mut p = l.split(' ');
            let machine = p.next()?.to_string();
            let session = String::from_utf8(vault::unhex_vec(p.next()?)?).ok()?;
            let last = p.next()?.parse().ok()?;
            Some((machine, session, last))
        })
        .collect())
}

// ---------------------------------------------------------------- findings

/// Whose doing a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The vault's copy is forged, or holds less or other than it
    /// acknowledged.
    Vault,
    /// The machine rewrote its log: its copy, or its own signed batches,
    /// disagree with what it signed.
    Machine,
}

/// Something `pull` or `compare` found, naming machine, session and entries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub fault: Fault,
    pub text: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.fault {
            Fault::Vault => write!(f, "FAILED (the vault): {}", self.text),
            Fault::Machine => write!(f, "FAILED (the machine): {}", self.text),
        }
    }
}

fn vault_fault(text: String) -> PullError {
    PullError::Finding(Finding {
        fault: Fault::Vault,
        text,
    })
}

#[derive(Debug, thiserror::Error)]
pub enum PullError {
    #[error("{0}")]
    Finding(Finding),
    #[error(transparent)]
    Other(#[from] ShipError),
}

impl From<vault::Error> for PullError {
    fn from(e: vault::Error) -> PullError {
        PullError::Other(e.into())
    }
}

// ---------------------------------------------------------------- pull

/// One batch as pulled: what it covers, under which key, and where its
/// entries are in the pulled log.
#[derive(Debug)]
pub struct PulledBatch {
    pub checkpoint: Checkpoint,
    /// Byte range of its entries in the pulled `events.ndjson`.
    offset: u64,
    len: u64,
}

/// A session as the vault holds it, decrypted, checked, and written to
/// `path` as it came: a pull holds one batch at a time, whatever the
/// session's size. A pull that found something, or no batch at all, leaves
/// nothing behind: `path` is then a temporary, removed with the `Pulled`.
pub struct Pulled {
    pub machine: String,
    pub session: String,
    /// The decrypted log.
    pub path: PathBuf,
    pub entries: u64,
    pub batches: Vec<PulledBatch>,
    /// The vault's key, from the recipients document the organisation signed.
    pub vault_key: PublicKey,
    /// The organisation's key that signed it (the pinned fingerprint's).
    pub org: PublicKey,
    pub machine_key: PublicKey,
    /// Whether the copy ends in a `session_end` entry.
    pub ended: bool,
    /// The restores the vault declares (`GET /v1/restores`), as notes: each
    /// may have lost what machines hold receipts for.
    pub restores: Vec<String>,
    /// The checkpoint of every batch the vault served that the machine
    /// signed, in order: what the vault holds, whether or not it decrypted
    /// into the pulled log.
    pub held: Vec<Checkpoint>,
    /// What stopped the pull, or was found in it: a batch only the vault
    /// could have made or dropped, or the machine's own batches disagreeing.
    /// Then nothing is written out; `compare` still reads what checked.
    pub findings: Vec<Finding>,
    staged: Option<crate::files::Staged>,
    keys: Vec<(KeyId, ChainKey)>,
}

impl fmt::Debug for Pulled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Pulled(machine {}, session {}, {} entries)",
            self.machine, self.session, self.entries
        )
    }
}

impl Pulled {
    /// The digest of entry `seq` as the vault holds it, under chain key `key`
    /// if the pull saw that key (read back from the pulled log).
    fn digest_at(&self, seq: u64, key: KeyId) -> Option<vault::Digest> {
        let chain_key = self
            .keys
            .iter()
            .find(|(id, _)| *id == key)
            .map(|(_, k)| k)?;
        let batch = self
            .batches
            .iter()
            .find(|b| b.checkpoint.first <= seq && seq <= b.checkpoint.last)?;
        let file = std::fs::File::open(&self.path).ok()?;
        let mut entries = vec![0u8; batch.len as usize];
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut entries, batch.offset).ok()?;
        let line = entries
            .split(|&b| b == b'\n')
            .nth((seq - batch.checkpoint.first) as usize)?;
        let hash = crate::chain::read_stated(line).ok()?.hash;
        Some(IndexKey::of(chain_key).digest(&hash))
    }
}

/// A Unix time as people read it (UTC).
fn when(unix: u64) -> String {
    i64::try_from(unix)
        .ok()
        .and_then(|t| jiff::Timestamp::from_second(t).ok())
        .map_or_else(
            || unix.to_string(),
            |t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        )
}

/// The restores the vault declares, one note each: whatever a pull finds,
/// an admin should know the vault says it lost acknowledged batches then.
fn restores(client: &Client, vault_key: &PublicKey) -> Result<Vec<String>, PullError> {
    let text = client.ok_bound("GET", "/v1/restores", b"", None, None, vault_key)?;
    let Ok(notices) = RestoreNotice::parse_all(&String::from_utf8_lossy(&text)) else {
        return Ok(vec![
            "the vault's list of restore notices (GET /v1/restores) does not parse".into(),
        ]);
    };
    Ok(notices
        .iter()
        .map(|n| match n.verify(vault_key) {
            Ok(()) => format!(
                "the vault declares it was restored at {} from a backup taken at {}: what it stored in between was lost, and machines ship again what they hold receipts for (receipts.lost)",
                when(n.restored),
                when(n.backup)
            ),
            Err(e) => format!(
                "the vault lists a restore notice (backup {}, restored {}) that does not check: {e}",
                n.backup, n.restored
            ),
        })
        .collect())
}

/// Whether a log line is a `session_end` entry.
fn is_session_end(line: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(line)
        .ok()
        .and_then(|v| v.get("kind").and_then(|k| k.as_str()).map(str::to_string))
        .is_some_and(|k| k == "session_end")
}

/// Reads exactly `buf.len()` bytes; `Ok(false)` at a clean end before the
/// first byte.
fn read_frame_part(r: &mut dyn Read, buf: &mut [u8]) -> io::Result<bool> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) if n == 0 => return Ok(false),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(got) => n += got,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Fetches one session's batches, one at a time as the vault streams them,
/// checks each against the machine's enrolment, its signature, its own
/// contents and the batch before, and writes the decrypted log to
/// `OUT/<session>/events.ndjson` (written whole by [`crate::files::Staged`]:
/// it appears once every batch checked).
#[allow(clippy::too_many_arguments)]
pub fn pull(
    url: &str,
    trust: &Trust,
    read_token: &str,
    identity: &AgeIdentity,
    fingerprint: &str,
    machine: &str,
    session: &str,
    out: &Path,
) -> Result<Pulled, PullError> {
    session_log::check_session_id(session).map_err(ShipError::from)?;
    let client = Client::new(url, trust)?;
    let (doc, _) = client.ok_bound_by("GET", "/v1/recipients", |body| {
        let doc = Recipients::verify(&String::from_utf8_lossy(body), fingerprint)?;
        let key = doc.vault;
        Ok((doc, key))
    })?;
    let names = format!("machine {machine}, session {session}");

    // The machine: enrolled with a token the organisation signed.
    let record = match client.request_bound(
        "GET",
        &format!("/v1/machines/{machine}"),
        b"",
        Some(read_token),
        &doc.vault,
    )? {
        (200, body) => body,
        (404, _) => {
            return Err(vault_fault(format!(
                "machine {machine}: the vault has no enrolment record for it, so nothing it holds of that machine can be checked"
            )));
        }
        (status, body) => {
            return Err(PullError::Other(ShipError::Refused {
                url: format!("{url}/v1/machines/{machine}"),
                status,
                message: String::from_utf8_lossy(&body).trim_end().to_string(),
            }));
        }
    };
    let enrolment = Enrolment::parse(&record)
        .and_then(|e| e.verify(&doc.org, None).map(|()| e))
        .map_err(|e| {
            vault_fault(format!(
                "machine {machine}: its enrolment record is forged: {e}; the organisation never let this key in"
            ))
        })?;
    if enrolment.machine_id() != machine {
        return Err(vault_fault(format!(
            "machine {machine}: the vault's enrolment record is for machine {}",
            enrolment.machine_id()
        )));
    }

    let dir = out.join(session);
    std::fs::create_dir_all(&dir).map_err(|e| ShipError::Io {
        path: dir.clone(),
        action: "create",
        source: e,
    })?;
    let path = dir.join(session_log::EVENTS_FILE);
    // Written whole: the log appears once every batch checked, synced,
    // and a pull that fails leaves nothing behind.
    let mut file =
        crate::files::Staged::create(&path, 0o600).map_err(|e| PullError::Other(e.into()))?;

    let batches_path = format!("/v1/batches/{machine}/{}", vault::hex(session.as_bytes()));
    let crate::ship::Stream {
        body: mut stream,
        nonce,
    } = client.get_stream(&batches_path, Some(read_token))?;
    let mut pulled = Pulled {
        machine: machine.into(),
        session: session.into(),
        path: path.clone(),
        entries: 0,
        batches: Vec::new(),
        vault_key: doc.vault,
        org: doc.org,
        machine_key: enrolment.key,
        ended: false,
        restores: restores(&client, &doc.vault)?,
        held: Vec::new(),
        findings: Vec::new(),
        staged: None,
        keys: Vec::new(),
    };
    let mut cursor = Cursor::start(session);
    let mut offset = 0u64;
    let mut body = Vec::new();
    let finding = |fault: Fault, text: String| Finding { fault, text };
    // Once the machine's own batches disagree, the rest is still checked for
    // what only the vault could have done (a batch the machine did not sign,
    // a gap), but no longer decrypted into the pulled log.
    let mut machine_stopped = false;
    // Every frame before the vault's signed last one, as it came.
    let (mut frames, mut digest) = (0u64, blake3::Hasher::new());
    let mut ended = false;
    loop {
        let n = pulled.held.len();
        let next = pulled.held.last().map_or(0, |c| c.last + 1);
        let cut = |e: io::Error| {
            finding(
                Fault::Vault,
                format!("{names}: the vault's reply is cut short at batch {n}: {e}"),
            )
        };
        let mut len = [0u8; 4];
        match read_frame_part(&mut stream, &mut len) {
            Ok(true) if ended => {
                pulled.findings.push(finding(
                    Fault::Vault,
                    format!("{names}: the vault's reply goes on after its signed last frame"),
                ));
                break;
            }
            Ok(true) => {}
            Ok(false) if ended => break,
            Ok(false) => {
                // The network can end a reply cleanly at any frame; only the
                // vault's signed last frame says it is all there is.
                pulled.findings.push(finding(
                    Fault::Vault,
                    format!(
                        "{names}: the vault's reply ends after batch {n} without its signed last frame: it is incomplete, cut short"
                    ),
                ));
                break;
            }
            Err(e) => {
                pulled.findings.push(cut(e));
                break;
            }
        }
        let len = u32::from_be_bytes(len) as usize;
        if len > vault::MAX_BODY_BYTES {
            pulled.findings.push(finding(
                Fault::Vault,
                format!(
                    "{names}: batch {n} is forged: it is {len} bytes, over the {} a batch can be",
                    vault::MAX_BODY_BYTES
                ),
            ));
            break;
        }
        body.resize(len, 0);
        match read_frame_part(&mut stream, &mut body) {
            Ok(true) => {}
            Ok(false) if len == 0 => {}
            Ok(false) => {
                pulled
                    .findings
                    .push(cut(io::ErrorKind::UnexpectedEof.into()));
                break;
            }
            Err(e) => {
                pulled.findings.push(cut(e));
                break;
            }
        }
        if PullEnd::is_end(&body) {
            let checked = PullEnd::parse(&body)
                .map_err(|e| e.to_string())
                .and_then(|end| {
                    end.verify(
                        &doc.vault,
                        &nonce,
                        machine,
                        session,
                        PullOf::Batches,
                        frames,
                        digest.finalize().as_bytes(),
                    )
                });
            if let Err(why) = checked {
                pulled.findings.push(finding(
                    Fault::Vault,
                    format!("{names}: the vault's reply is not its whole answer: {why}"),
                ));
                break;
            }
            ended = true;
            continue;
        }
        frames += 1;
        digest.update(&(len as u32).to_be_bytes());
        digest.update(&body);
        let batch = match vault::parse_batch(&body) {
            Ok(batch) => batch,
            Err(e) => {
                pulled.findings.push(finding(
                    Fault::Vault,
                    format!("{names}: batch {n} is forged: it is not a batch: {e}"),
                ));
                break;
            }
        };
        let c = &batch.checkpoint;
        if !batch.signed_by(&enrolment.key) {
            pulled.findings.push(finding(
                Fault::Vault,
                format!(
                    "{}: the batch is forged: it is not signed by the machine's enrolled key",
                    c.names()
                ),
            ));
            break;
        }
        if c.machine != machine || c.session != session {
            pulled.findings.push(finding(
                Fault::Vault,
                format!(
                    "{names}: the vault serves the machine's batch of {} among them",
                    c.names()
                ),
            ));
            break;
        }
        if c.first != next {
            let detail = if c.first > next {
                format!(
                    "entries {next}..{} are missing: the vault holds no batch of them",
                    c.first - 1
                )
            } else {
                format!("batches overlap at entry {}", c.first)
            };
            pulled
                .findings
                .push(finding(Fault::Vault, format!("{names}: {detail}")));
            break;
        }
        pulled.held.push(c.clone());
        if machine_stopped {
            continue;
        }
        let known = pulled.keys.iter().position(|(id, _)| *id == c.key);
        let key_at = match known {
            Some(i) => i,
            None => match vault::unwrap_chain_key(&batch.wrapped_key, identity) {
                Ok(key) => {
                    pulled.keys.push((KeyId::of(&key), key));
                    pulled.keys.len() - 1
                }
                Err(e @ vault::Error::NoMatchingStanza) => {
                    return Err(PullError::Other(ShipError::Vault(e)));
                }
                Err(e) => {
                    pulled.findings.push(finding(
                        Fault::Machine,
                        format!(
                            "{}: the machine signed a wrapped chain key that does not open: {e}",
                            c.names()
                        ),
                    ));
                    machine_stopped = true;
                    continue;
                }
            },
        };
        let opened = match vault::open_batch(&batch, &pulled.keys[key_at].1) {
            Ok(opened) => opened,
            Err(e) => {
                pulled.findings.push(finding(
                    Fault::Machine,
                    format!(
                        "{}: the machine signed a batch that does not check: {e}",
                        c.names()
                    ),
                ));
                machine_stopped = true;
                continue;
            }
        };
        if opened.prev != cursor.prev {
            let detail = if c.first == 0 {
                "entry 0 does not start this session's chain".to_string()
            } else {
                format!(
                    "its signed batch of entries {}..{} does not continue its signed entries up to {}: it rewrote its log after shipping entry {}",
                    c.first,
                    c.last,
                    c.first - 1,
                    c.first - 1
                )
            };
            pulled
                .findings
                .push(finding(Fault::Machine, format!("{names}: {detail}")));
            machine_stopped = true;
            continue;
        }
        file.write(&opened.entries)
            .map_err(|e| PullError::Other(e.into()))?;
        let last_line = opened.entries[..opened.entries.len() - 1]
            .rsplit(|&b| b == b'\n')
            .next()
            .unwrap_or_default();
        pulled.ended = is_session_end(last_line);
        cursor = Cursor {
            next_seq: c.last + 1,
            prev: opened.last,
        };
        pulled.batches.push(PulledBatch {
            checkpoint: batch.checkpoint,
            offset,
            len: opened.entries.len() as u64,
        });
        offset += opened.entries.len() as u64;
    }
    pulled.entries = cursor.next_seq;
    if pulled.findings.is_empty() && !pulled.batches.is_empty() {
        file.commit(crate::files::Durability::Durable)
            .map_err(|e| PullError::Other(e.into()))?;
    } else {
        // Nothing is written out, but what checked stays readable for
        // `compare` until the pull is dropped.
        pulled.path = file.temporary().to_path_buf();
        pulled.staged = Some(file);
    }
    Ok(pulled)
}

// ---------------------------------------------------------------- compare

/// How a local log stands against the vault's copy, line by line.
#[derive(Debug, PartialEq, Eq)]
pub enum Comparison {
    /// The same entries; `unshipped` more locally, not yet shipped.
    Matches { entries: u64, unshipped: u64 },
    /// The first entry whose bytes differ: a rewrite after shipping.
    Differs {
        entry: u64,
        vault_hash: Hash,
        local: String,
    },
    /// The local log stops before the vault's copy does: entries were removed.
    Truncated {
        local_entries: u64,
        vault_entries: u64,
    },
}

/// Compares the vault's copy with a local log, line by line, reading both
/// as they go.
pub fn compare_logs(
    mut vault_copy: impl BufRead,
    mut local: impl BufRead,
) -> io::Result<Comparison> {
    let (mut theirs, mut ours) = (Vec::new(), Vec::new());
    let mut n = 0u64;
    loop {
        theirs.clear();
        if vault_copy.read_until(b'\n', &mut theirs)? == 0 {
            break;
        }
        ours.clear();
        if local.read_until(b'\n', &mut ours)? == 0 {
            let mut rest = 1u64;
            while {
                theirs.clear();
                vault_copy.read_until(b'\n', &mut theirs)? > 0
            } {
                rest += 1;
            }
            return Ok(Comparison::Truncated {
                local_entries: n,
                vault_entries: n + rest,
            });
        }
        if ours != theirs {
            let line = theirs.strip_suffix(b"\n").unwrap_or(&theirs);
            let vault_hash =
                crate::chain::read_stated(line).map_or_else(|_| Hash::of(&theirs), |s| s.hash);
            let local = crate::chain::read_stated(ours.strip_suffix(b"\n").unwrap_or(&ours))
                .map_or_else(
                    |_| "not a sealed entry".into(),
                    |s| format!("hash {}", s.hash.short()),
                );
            return Ok(Comparison::Differs {
                entry: n,
                vault_hash,
                local,
            });
        }
        n += 1;
    }
    let mut unshipped = 0u64;
    while {
        ours.clear();
        local.read_until(b'\n', &mut ours)? > 0
    } {
        unshipped += 1;
    }
    Ok(Comparison::Matches {
        entries: n,
        unshipped,
    })
}

/// What comparing a machine's copy with the vault's found.
#[derive(Debug, Default)]
pub struct Compared {
    pub findings: Vec<Finding>,
    pub notes: Vec<String>,
}

impl Compared {
    /// 3 when the vault is at fault, else 1 when the machine is, else 0.
    pub fn exit_code(&self) -> u8 {
        if self.findings.iter().any(|f| f.fault == Fault::Vault) {
            3
        } else if self.findings.is_empty() {
            0
        } else {
            1
        }
    }
}

/// The vault keys the organisation vouched for, as far as this machine
/// knows: the one in the document the vault serves now, and every one
/// named by a document the machine held (its `vault/recipients` and
/// `recipients.old`, beside the sessions directory `dir` is in) that the
/// organisation's key signed. A receipt signed before the vault's key
/// changed is checked against the key it was signed with.
pub(crate) fn vouched_vault_keys(pulled: &Pulled, dir: &Path) -> Vec<PublicKey> {
    let mut keys = vec![pulled.vault_key];
    let Some(vault_dir) = dir.parent().and_then(Path::parent).map(ship::vault_dir) else {
        return keys;
    };
    for name in [ship::RECIPIENTS_FILE, ship::RECIPIENTS_OLD_FILE] {
        let Ok(text) = std::fs::read_to_string(vault_dir.join(name)) else {
            continue;
        };
        let mut starts: Vec<usize> = text
            .match_indices("nd7-recipients ")
            .map(|(i, _)| i)
            .collect();
        starts.push(text.len());
        for w in starts.windows(2) {
            if let Ok(doc) = Recipients::parse(&text[w[0]..w[1]])
                && doc.org == pulled.org
                && !keys.contains(&doc.vault)
            {
                keys.push(doc.vault);
            }
        }
    }
    keys
}

/// Checks a receipt's two signatures: the vault's, by one of the `vouched`
/// vault keys (the one it names), and the machine's.
fn check_receipt(
    r: &Receipt,
    vouched: &[PublicKey],
    machine: &PublicKey,
) -> Result<(), vault::Error> {
    let key = vouched
        .iter()
        .find(|k| **k == r.vault)
        .unwrap_or(&vouched[0]);
    r.verify(key, machine)
}

/// Compares the vault's copy with a machine's session directory (or its
/// `events.ndjson`): the receipt the machine kept, any it lost in a vault's
/// restore, and the log.
pub fn compare(pulled: &Pulled, local: &Path) -> Result<Compared, ShipError> {
    let log = SessionLog::at_path(local)?;
    let names = format!("machine {}, session {}", pulled.machine, pulled.session);
    let mut out = Compared::default();
    let vouched = vouched_vault_keys(pulled, log.dir());
    // What the vault holds, signed by the machine, whether or not the pull
    // got as far as decrypting it.
    let vault_last = pulled.held.last().map(|c| c.last);

    // The receipt the machine kept: the vault must still hold that batch.
    let receipt_path = log.dir().join(RECEIPT_FILE);
    if let Ok(text) = std::fs::read_to_string(&receipt_path) {
        match Receipt::parse(&text)
            .and_then(|r| check_receipt(&r, &vouched, &pulled.machine_key).map(|()| r))
        {
            Err(e) => out.findings.push(Finding {
                fault: Fault::Machine,
                text: format!(
                    "{names}: {}: the machine's receipt does not check: {e}",
                    receipt_path.display()
                ),
            }),
            Ok(r) => {
                let k = &r.checkpoint;
                let held = pulled.held.iter().any(|c| c.same_head(k));
                if !held {
                    let text = if vault_last.is_none_or(|l| l < k.last) {
                        format!(
                            "{names}: the vault acknowledged entries up to {} (its receipt of {} is on the machine), but holds only up to {}: it dropped entries {}..{}",
                            k.last,
                            r.stored,
                            vault_last.map_or("none".into(), |l| l.to_string()),
                            vault_last.map_or(0, |l| l + 1),
                            k.last
                        )
                    } else {
                        format!(
                            "{names}: the vault acknowledged entry {} with digest {} (its receipt of {} is on the machine), but no longer holds that batch: it replaced what it acknowledged",
                            k.last,
                            k.head.short(),
                            r.stored
                        )
                    };
                    out.findings.push(Finding {
                        fault: Fault::Vault,
                        text,
                    });
                }
            }
        }
    }

    // Receipts a declared restore lost: evidence, kept by the machine.
    if let Ok(text) = std::fs::read_to_string(log.dir().join(LOST_FILE)) {
        for (what, receipt, notice) in ship::lost_receipts(&text) {
            let signed = receipt
                .as_ref()
                .is_some_and(|r| check_receipt(r, &vouched, &pulled.machine_key).is_ok())
                && notice
                    .as_ref()
                    .is_some_and(|n| vouched.iter().any(|k| n.verify(k).is_ok()));
            let (Some(r), Some(n)) = (receipt.filter(|_| signed), notice) else {
                out.findings.push(Finding {
                    fault: Fault::Machine,
                    text: format!(
                        "{names}: receipts.lost holds a record that does not check ({what})"
                    ),
                });
                continue;
            };
            // The vault signed both; a notice that cannot excuse this loss
            // (too wide, in the future, not covering the receipt) is its own
            // word against it.
            if let Err(why) = n.credible(ship::unix_now()).and_then(|()| {
                n.explains(&r)
                    .then_some(())
                    .ok_or_else(|| "it does not cover the receipt".to_string())
            }) {
                out.findings.push(Finding {
                    fault: Fault::Vault,
                    text: format!(
                        "{names}: {what}; the vault's restore notice for it (backup {}, restored {}) cannot excuse the loss: {why}",
                        n.backup, n.restored
                    ),
                });
                continue;
            }
            let k = &r.checkpoint;
            let now = match pulled.digest_at(k.last, k.key) {
                Some(d) if d == k.head => "the vault holds those entries again, unchanged",
                Some(_) => {
                    out.findings.push(Finding {
                        fault: Fault::Machine,
                        text: format!(
                            "{names}: entry {} was shipped again with other contents than the machine first signed: it rewrote its log",
                            k.last
                        ),
                    });
                    continue;
                }
                None if vault_last.is_some_and(|l| l >= k.last) => {
                    "the vault holds those entries again (under a later chain key, so not compared with the lost receipt)"
                }
                None => {
                    out.findings.push(Finding {
                        fault: Fault::Vault,
                        text: format!(
                            "{names}: {what}; the vault does not hold them again: it holds up to {}, and a declared restore excuses shipping them again, not losing them",
                            vault_last.map_or("none".into(), |l| l.to_string())
                        ),
                    });
                    continue;
                }
            };
            out.notes.push(format!("{names}: {what}; {now}"));
        }
    }
    if let Ok(alarm) = std::fs::read_to_string(log.dir().join(ship::ALARM_FILE)) {
        out.notes.push(format!(
            "the machine's vault.alarm says: {}",
            alarm.lines().next().unwrap_or_default()
        ));
    }

    // The log itself.
    let events = log.events_path();
    let open = |path: &Path| {
        std::fs::File::open(path)
            .map(|f| io::BufReader::with_capacity(1 << 20, f))
            .map_err(|e| ShipError::Io {
                path: path.to_path_buf(),
                action: "read",
                source: e,
            })
    };
    let comparison =
        compare_logs(open(&pulled.path)?, open(&events)?).map_err(|e| ShipError::Io {
            path: events.clone(),
            action: "compare",
            source: e,
        })?;
    match comparison {
        Comparison::Matches { entries, unshipped } if pulled.findings.is_empty() => {
            out.notes.push(format!(
                "local copy matches the vault's {entries} entries ({unshipped} more locally, not shipped yet)"
            ))
        }
        Comparison::Matches { entries, unshipped } => out.notes.push(format!(
            "local copy matches the {entries} entries pulled before the pull stopped ({unshipped} more locally)"
        )),
        Comparison::Differs {
            entry,
            vault_hash,
            local,
        } => out.findings.push(Finding {
            fault: Fault::Machine,
            text: format!(
                "{names}: the local copy was rewritten after shipping: entry {entry} differs (the vault's, signed by the machine: hash {}; local: {local})",
                vault_hash.short()
            ),
        }),
        Comparison::Truncated {
            local_entries,
            vault_entries,
        } => out.findings.push(Finding {
            fault: Fault::Machine,
            text: format!(
                "{names}: the local copy was cut short after shipping: it has {local_entries} entries, the vault's signed copy {vault_entries}; entry {local_entries} is missing"
            ),
        }),
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(lines: &[&str]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut prev = Hash::session_fingerprint("s");
        for (seq, body) in lines.iter().enumerate() {
            let line = crate::chain::seal(
                format!("{{\"seq\":{seq},\"b\":\"{body}\",\"prev\":\"{prev}\"}}").as_bytes(),
            );
            prev = crate::chain::read_stated(&line[..line.len() - 1])
                .expect("sealed")
                .hash;
            out.extend_from_slice(&line);
        }
        out
    }

    #[test]
    fn compare_names_the_first_rewritten_or_missing_entry() {
        let compare_logs = |a: &[u8], b: &[u8]| compare_logs(a, b).expect("in memory");
        let vault = chain(&["a", "b", "c"]);
        assert_eq!(
            compare_logs(&vault, &vault),
            Comparison::Matches {
                entries: 3,
                unshipped: 0
            }
        );
        assert_eq!(
            compare_logs(&vault, &chain(&["a", "b", "c", "d"])),
            Comparison::Matches {
                entries: 3,
                unshipped: 1
            }
        );
        assert!(matches!(
            compare_logs(&vault, &chain(&["a", "x", "c"])),
            Comparison::Differs { entry: 1, .. }
        ));
        assert_eq!(
            compare_logs(&vault, &chain(&["a"])),
            Comparison::Truncated {
                local_entries: 1,
                vault_entries: 3
            }
        );
    }

    #[test]
    fn findings_against_the_vault_win_the_exit_code() {
        let f = |fault| Finding {
            fault,
            text: String::new(),
        };
        let mut c = Compared::default();
        assert_eq!(c.exit_code(), 0);
        c.findings.push(f(Fault::Machine));
        assert_eq!(c.exit_code(), 1);
        c.findings.push(f(Fault::Vault));
        assert_eq!(c.exit_code(), 3);
    }
}
