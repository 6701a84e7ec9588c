//! The machine's side of the vault: `nd7 enroll` and `nd7 ship`. The only
//! part of nd7 that uses the network on the machine; the format and every
//! cryptographic step are [`crate::vault`]'s, the admin's read-back is
//! [`crate::vault_admin`]'s.
//!
//! ```text
//! $XDG_STATE_HOME/nd7/
//!   vault/                     0700, written by enroll, every file 0600
//!     machine.key              the machine's Ed25519 seed (hex)
//!     machine.id               its id, derived from its public key
//!     server                   the vault's base URL
//!     recipients               the signed recipients document last taken
//!   sessions/<id>/
//!     shipped                  "<seq> <hash>\n": the last entry the vault acknowledged
//!     receipt                  the vault's receipt for it
//!     chain.key                0600: "# recipients version N" and the chain key, until ended and shipped
//!     vault.alarm              while the vault breaks a receipt: what, and the receipt
//!     receipts.lost            receipts a vault's declared restore lost, with its notice
//! ```
//!
//! Shipping a session: ask the vault for its receipt of the last batch it
//! holds and check it against the receipt kept here and against the local
//! log; read the entries after that under the log's shared lock (writers
//! wait), verify them with the same walker `nd7 verify` uses, and send them
//! in signed batches of at most 8 MiB. `receipt` and `shipped` move forward
//! only after the vault's receipt for a batch checks, under the log's
//! exclusive lock. A run killed anywhere resumes from what the vault holds:
//! nothing is lost, and nothing is stored twice.

#![forbid(unsafe_code)]

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::chain::{Cursor, Hash, Head, Walker};
use crate::session_log::{self, SessionLog};
use crate::vault::{
    self, BatchHeader, ChainKey, Checkpoint, EnrolToken, IndexKey, KeyId, Receipt, Recipients,
    RequestAuth, RestoreNotice, Secret32, SigningKey, Update,
};

pub const VAULT_DIR: &str = "vault";
pub const MACHINE_KEY_FILE: &str = "machine.key";
pub const MACHINE_ID_FILE: &str = "machine.id";
pub const SERVER_FILE: &str = "server";
pub const RECIPIENTS_FILE: &str = "recipients";
pub const SHIPPED_FILE: &str = "shipped";
pub const RECEIPT_FILE: &str = "receipt";
pub const CHAIN_KEY_FILE: &str = "chain.key";
pub const ALARM_FILE: &str = "vault.alarm";
pub const LOST_FILE: &str = "receipts.lost";

/// A backlog above this prints progress on stderr.
const PROGRESS_ABOVE: u64 = 32 * 1024 * 1024;
const HTTP_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, thiserror::Error)]
pub enum ShipError {
    #[error("{}: cannot {action}: {source}", path.display())]
    Io {
        path: PathBuf,
        action: &'static str,
        source: io::Error,
    },
    #[error("this machine is not enrolled ({} is missing): run `nd7 enroll URL --token T --fingerprint FP`", path.display())]
    NotEnrolled { path: PathBuf },
    #[error("this machine is already enrolled ({} exists); remove {} to enrol again", path.display(), dir.display())]
    AlreadyEnrolled { path: PathBuf, dir: PathBuf },
    #[error("{}: {what}", path.display())]
    BadFile { path: PathBuf, what: String },
    #[error("{url}: {detail}")]
    Http { url: String, detail: String },
    #[error("{url}: the vault refused with {status}: {message}")]
    Refused {
        url: String,
        status: u16,
        message: String,
    },
    #[error("{0}")]
    Vault(#[from] vault::Error),
    #[error(transparent)]
    Log(#[from] session_log::Error),
    #[error("--fingerprint must be the 64 hex digits `nd7 admin org-key` printed, not {0:?}")]
    BadFingerprint(String),
    #[error("session {session}: {}: entry {}: {fault}", path.display(), .entry)]
    Unverified {
        session: String,
        path: PathBuf,
        entry: u64,
        fault: String,
    },
    #[error("session {session}: the local log no longer matches what was shipped: {detail}")]
    Rewritten { session: String, detail: String },
    /// The vault holds less or other than it acknowledged, or shows what this
    /// machine never signed: evidence against the vault, kept in `vault.alarm`.
    #[error("machine {machine}, session {session}: the vault broke its receipt: {detail}")]
    VaultBroke {
        machine: String,
        session: String,
        detail: String,
    },
    #[error("no randomness from the operating system: {0}")]
    Random(String),
}

fn io_err<'a>(path: &'a Path, action: &'static str) -> impl FnOnce(io::Error) -> ShipError + 'a {
    move |source| ShipError::Io {
        path: path.to_path_buf(),
        action,
        source,
    }
}

pub fn random<const N: usize>() -> Result<[u8; N], ShipError> {
    let mut out = [0u8; N];
    getrandom::getrandom(&mut out).map_err(|e| ShipError::Random(e.to_string()))?;
    Ok(out)
}

/// Randomness for [`vault::wrap_chain_key`]: the OS's, and never silently
/// anything else. A failing OS source here would be a broken machine, so it
/// panics rather than wrapping with zeros.
fn os_fill(buf: &mut [u8]) {
    if let Err(e) = getrandom::getrandom(buf) {
        panic!("no randomness from the operating system: {e}");
    }
}

pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Writes `bytes` to `path` with mode 0600, through a temporary file and a
/// rename, so a reader sees the old or the new text and never half of one.
pub fn write_0600(path: &Path, bytes: &[u8]) -> Result<(), ShipError> {
    write_file(path, bytes, true)
}

/// [`write_0600`], syncing the data before the rename only when `sync`.
fn write_file(path: &Path, bytes: &[u8], sync: bool) -> Result<(), ShipError> {
    let tmp = path.with_extension("tmp");
    let _ = fs::remove_file(&tmp);
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io_err(&tmp, "create"))?;
    f.write_all(bytes).map_err(io_err(&tmp, "write"))?;
    if sync {
        f.sync_all().map_err(io_err(&tmp, "sync"))?;
    }
    drop(f);
    fs::rename(&tmp, path).map_err(io_err(path, "replace"))
}

fn read_text(path: &Path) -> Result<String, ShipError> {
    fs::read_to_string(path).map_err(|e| {
        if e.kind() == io::ErrorKind::NotFound {
            ShipError::NotEnrolled {
                path: path.to_path_buf(),
            }
        } else {
            ShipError::Io {
                path: path.to_path_buf(),
                action: "read",
                source: e,
            }
        }
    })
}

/// A file's text, `None` when it does not exist.
fn read_optional(path: &Path) -> Result<Option<String>, ShipError> {
    match fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(path, "read")(e)),
    }
}

fn remove_optional(path: &Path) -> Result<(), ShipError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err(path, "remove")(e)),
    }
}

// ---------------------------------------------------------------- HTTP

/// A blocking HTTP client for one vault. Plain HTTP: TLS belongs to the
/// reverse proxy in front of the vault (docs/vault.md, ADR-0022).
pub struct Client {
    base: String,
    agent: ureq::Agent,
}

/// A signer for requests: the machine's key and id.
pub struct Signer<'a> {
    pub key: &'a SigningKey,
    pub machine: &'a str,
}

impl Client {
    pub fn new(base: &str) -> Client {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(HTTP_TIMEOUT))
            .build();
        Client {
            base: base.trim_end_matches('/').to_string(),
            agent: ureq::Agent::new_with_config(config),
        }
    }

    /// Sends one request; returns the status and the body.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        body: &[u8],
        signer: Option<&Signer<'_>>,
        bearer: Option<&str>,
    ) -> Result<(u16, Vec<u8>), ShipError> {
        let mut headers: Vec<(&str, String)> = Vec::new();
        if let Some(s) = signer {
            let auth =
                RequestAuth::sign(s.key, s.machine, method, path, unix_now(), random()?, body);
            headers.extend(auth.headers());
        }
        if let Some(token) = bearer {
            headers.push(("authorization", format!("Bearer {token}")));
        }
        self.send_raw(method, path, body, &headers)
    }

    /// Sends a request with exactly these headers (tests use it to send
    /// what a correct client never would).
    pub fn send_raw(
        &self,
        method: &str,
        path: &str,
        body: &[u8],
        headers: &[(&str, String)],
    ) -> Result<(u16, Vec<u8>), ShipError> {
        let url = format!("{}{path}", self.base);
        let http = |e: ureq::Error| ShipError::Http {
            url: url.clone(),
            detail: e.to_string(),
        };
        let response = if method == "GET" {
            let mut req = self.agent.get(&url);
            for (k, v) in headers {
                req = req.header(*k, v);
            }
            req.call()
        } else {
            let mut req = self.agent.post(&url);
            for (k, v) in headers {
                req = req.header(*k, v);
            }
            req.content_type("application/octet-stream").send(body)
        };
        let mut response = response.map_err(http)?;
        let status = response.status().as_u16();
        let body = response
            .body_mut()
            .with_config()
            .limit(1 << 30)
            .read_to_vec()
            .map_err(http)?;
        Ok((status, body))
    }

    /// [`Client::request`], refusing anything but 200.
    pub fn ok(
        &self,
        method: &str,
        path: &str,
        body: &[u8],
        signer: Option<&Signer<'_>>,
        bearer: Option<&str>,
    ) -> Result<Vec<u8>, ShipError> {
        let (status, reply) = self.request(method, path, body, signer, bearer)?;
        if status != 200 {
            return Err(ShipError::Refused {
                url: format!("{}{path}", self.base),
                status,
                message: String::from_utf8_lossy(&reply).trim_end().to_string(),
            });
        }
        Ok(reply)
    }
}

// ---------------------------------------------------------------- enrolment

/// What enrolling wrote.
#[derive(Debug)]
pub struct Enrolled {
    pub machine_id: String,
    pub public_key: String,
    pub recipients: usize,
    pub version: u64,
    pub dir: PathBuf,
}

pub fn vault_dir(state_dir: &Path) -> PathBuf {
    state_dir.join(VAULT_DIR)
}

/// `nd7 enroll`: fetch and check the recipients document against the pinned
/// fingerprint, check the token against the organisation key, make the
/// machine's key, have the token endorse it, register it, and write the
/// vault directory. Nothing is written unless all of that worked.
pub fn enroll(
    state_dir: &Path,
    url: &str,
    token: &str,
    fingerprint: &str,
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
    let client = Client::new(url);
    let doc = client.ok("GET", "/v1/recipients", b"", None, None)?;
    let doc = String::from_utf8(doc).map_err(|_| vault::Error::Malformed {
        what: "the recipients document",
        expected: "UTF-8 text",
    })?;
    let recipients = Recipients::verify(&doc, fingerprint)?;
    token.check(&recipients.org)?;
    let seed = Secret32::from_bytes(random()?);
    let key = SigningKey::from_seed(&seed);
    let public = key.public();
    let machine_id = vault::machine_id(&public);
    let body = token.enrolment(&public).render();
    let signer = Signer {
        key: &key,
        machine: &machine_id,
    };
    let reply = client.ok("POST", "/v1/enroll", body.as_bytes(), Some(&signer), None)?;
    if String::from_utf8_lossy(&reply).trim_end() != format!("machine {machine_id}") {
        return Err(ShipError::Http {
            url: format!("{url}/v1/enroll"),
            detail: format!("the vault's reply is not `machine {machine_id}`"),
        });
    }
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(io_err(&dir, "create"))?;
    write_0600(
        &dir.join(MACHINE_KEY_FILE),
        format!("{}\n", vault::hex(seed.expose_secret())).as_bytes(),
    )?;
    write_0600(
        &dir.join(SERVER_FILE),
        format!("{}\n", client.base).as_bytes(),
    )?;
    write_0600(&dir.join(RECIPIENTS_FILE), doc.as_bytes())?;
    // Last: setup's timer and ship both take machine.id as "enrolled".
    write_0600(&id_path, format!("{machine_id}\n").as_bytes())?;
    Ok(Enrolled {
        machine_id,
        public_key: public.to_hex(),
        recipients: recipients.recipients.len(),
        version: recipients.version,
        dir,
    })
}

/// An enrolled machine's vault files, read.
pub struct Machine {
    pub id: String,
    pub key: SigningKey,
    pub client: Client,
    pub recipients: Recipients,
    dir: PathBuf,
}

impl Machine {
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
        let rec_path = dir.join(RECIPIENTS_FILE);
        let recipients =
            Recipients::parse(&read_text(&rec_path)?).map_err(|e| ShipError::BadFile {
                path: rec_path,
                what: e.to_string(),
            })?;
        Ok(Machine {
            id,
            key,
            client: Client::new(&server),
            recipients,
            dir,
        })
    }

    fn signer(&self) -> Signer<'_> {
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
        let doc = match self.client.ok("GET", "/v1/recipients", b"", None, None) {
            Ok(doc) => String::from_utf8_lossy(&doc).into_owned(),
            Err(e) => return Some(format!("kept the recipients of version {held}: {e}")),
        };
        let fresh = match Recipients::verify(&doc, &pinned) {
            Ok(fresh) => fresh,
            Err(e) => {
                return Some(format!(
                    "kept the recipients of version {held}: the vault's document is refused: {e}"
                ));
            }
        };
        match self.recipients.update_to(&fresh) {
            Update::Newer => {
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

    /// Checks a receipt from the vault: countersigned by the vault key the
    /// recipients document names, over a checkpoint this machine signed,
    /// for this session.
    fn check_receipt(&self, receipt: &Receipt, session: &str) -> Result<(), String> {
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

// ---------------------------------------------------------------- shipping

/// What shipping one session did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Shipped {
    pub entries: u64,
    pub batches: u64,
    pub bytes: u64,
    /// The session ended and everything is shipped: chain.key was removed.
    pub closed: bool,
    /// What the run found and acted on (receipts lost in a declared restore).
    pub notes: Vec<String>,
}

/// The outcome of `nd7 ship` over every session.
#[derive(Debug, Default)]
pub struct Report {
    pub sessions: Vec<(String, Result<Shipped, ShipError>)>,
    pub warnings: Vec<String>,
}

impl Report {
    pub fn all_shipped(&self) -> bool {
        self.sessions.iter().all(|(_, r)| r.is_ok())
    }

    /// Whether the vault broke a receipt for some session.
    pub fn vault_broke(&self) -> bool {
        self.sessions
            .iter()
            .any(|(_, r)| matches!(r, Err(ShipError::VaultBroke { .. })))
    }
}

/// `nd7 ship`, once: every session under the state directory.
pub fn ship_all(state_dir: &Path, progress: &mut dyn FnMut(&str)) -> Result<Report, ShipError> {
    let mut machine = Machine::load(state_dir)?;
    let mut report = Report::default();
    if let Some(w) = machine.refresh_recipients() {
        report.warnings.push(w);
    }
    let sessions = session_log::sessions_dir(state_dir);
    let entries = match fs::read_dir(&sessions) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(report),
        Err(e) => return Err(io_err(&sessions, "list")(e)),
    };
    let mut ids: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    ids.sort();
    for id in ids {
        let result = SessionLog::new(&sessions, &id)
            .map_err(ShipError::from)
            .and_then(|log| ship_and_alarm(&machine, &log, progress));
        report.sessions.push((id, result));
    }
    Ok(report)
}

/// [`ship_session`], keeping `vault.alarm` in step: written when the vault
/// broke a receipt, removed once the session ships cleanly again.
fn ship_and_alarm(
    machine: &Machine,
    log: &SessionLog,
    progress: &mut dyn FnMut(&str),
) -> Result<Shipped, ShipError> {
    let result = ship_session(machine, log, progress);
    let alarm = log.dir().join(ALARM_FILE);
    match &result {
        Err(e @ ShipError::VaultBroke { .. }) => {
            let text = format!("{e}\nfound at {} (Unix time)\n", unix_now());
            if let Err(w) = write_0600(&alarm, text.as_bytes()) {
                return Err(ShipError::VaultBroke {
                    machine: machine.id.clone(),
                    session: log.session_id().into(),
                    detail: format!("{e}; and {w}"),
                });
            }
        }
        Ok(_) => remove_optional(&alarm)?,
        Err(_) => {}
    }
    result
}

/// `shipped`, a cache of the receipt's entry with its real hash: written
/// without a sync, so after a power loss it may be empty, which reads as
/// absent (the receipt and the vault's head say the same).
fn read_shipped(path: &Path) -> Result<Option<Head>, ShipError> {
    Ok(read_optional(path)?.and_then(|text| Head::parse(text.as_bytes())))
}

fn read_receipt(path: &Path) -> Result<Option<Receipt>, ShipError> {
    read_optional(path)?
        .map(|text| {
            Receipt::parse(&text).map_err(|e| ShipError::BadFile {
                path: path.to_path_buf(),
                what: e.to_string(),
            })
        })
        .transpose()
}

/// Holds the log's lock file locked, shared or exclusive, until dropped.
fn lock_log(log: &SessionLog, exclusive: bool) -> Result<File, ShipError> {
    let path = log.lock_path();
    let lock = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&path)
        .map_err(io_err(&path, "open"))?;
    if exclusive {
        lock.lock().map_err(io_err(&path, "lock (exclusive)"))?;
    } else {
        lock.lock_shared().map_err(io_err(&path, "lock (shared)"))?;
    }
    Ok(lock)
}

/// Keeps the vault's receipt for the entry `head` (synced: it is evidence)
/// and moves `shipped` to it, under the writer's lock; never back to a
/// receipt before the one kept.
fn record_ack(log: &SessionLog, receipt: &Receipt, head: &Head) -> Result<(), ShipError> {
    let _lock = lock_log(log, true)?;
    let receipt_path = log.dir().join(RECEIPT_FILE);
    if read_receipt(&receipt_path)?.is_some_and(|r| r.checkpoint.last > head.seq) {
        return Ok(());
    }
    write_0600(&receipt_path, receipt.render().as_bytes())?;
    write_file(
        &log.dir().join(SHIPPED_FILE),
        head.render().as_bytes(),
        false,
    )
}

/// `chain.key`: the key, and the recipients version it was made under
/// (a `# recipients version N` line; 0 when there is none).
fn read_chain_key(log: &SessionLog) -> Result<Option<(ChainKey, u64)>, ShipError> {
    let path = log.dir().join(CHAIN_KEY_FILE);
    let Some(text) = read_optional(&path)? else {
        return Ok(None);
    };
    let version = text
        .lines()
        .find_map(|l| l.strip_prefix("# recipients version "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let key = vault::parse_secret_text(&text, "chain.key").map_err(|e| ShipError::BadFile {
        path,
        what: e.to_string(),
    })?;
    Ok(Some((key, version)))
}

/// The session's chain key for recipients of `version`: the one in
/// `chain.key` if it was made under that version or a later one, otherwise
/// a new one (0600), so that recipients removed since never get it.
fn chain_key(log: &SessionLog, version: u64) -> Result<ChainKey, ShipError> {
    if let Some((key, made_under)) = read_chain_key(log)?
        && made_under >= version
    {
        return Ok(key);
    }
    let key = Secret32::from_bytes(random()?);
    let text = format!(
        "# recipients version {version}\n{}\n",
        vault::hex(key.expose_secret())
    );
    write_0600(&log.dir().join(CHAIN_KEY_FILE), text.as_bytes())?;
    Ok(key)
}

/// Where entry `seq + 1` starts in the log, and entry `seq`'s hash (checked
/// against its own bytes).
fn entry_end(log: &SessionLog, file: &File, seq: u64) -> Result<(u64, Hash), ShipError> {
    let path = log.events_path();
    let rewritten = |detail: String| ShipError::Rewritten {
        session: log.session_id().into(),
        detail,
    };
    let mut buf = vec![0u8; 1 << 20];
    let (mut at, mut n_seq) = (0u64, 0u64);
    let mut line: Vec<u8> = Vec::new();
    loop {
        let n = file.read_at(&mut buf, at).map_err(io_err(&path, "read"))?;
        if n == 0 {
            return Err(rewritten(format!(
                "the vault acknowledged entry {seq}, but the log has only {n_seq} entries"
            )));
        }
        let mut from = 0;
        for nl in memchr::memchr_iter(b'\n', &buf[..n]) {
            if n_seq == seq {
                line.extend_from_slice(&buf[from..nl]);
                return match crate::chain::read_checked(&line) {
                    Ok(s) if s.seq == seq => Ok((at + nl as u64 + 1, s.hash)),
                    _ => Err(rewritten(format!(
                        "entry {seq} was shipped, but the local entry {seq} is not a sealed entry"
                    ))),
                };
            }
            n_seq += 1;
            from = nl + 1;
        }
        if n_seq == seq {
            line.extend_from_slice(&buf[from..n]);
        }
        at += n as u64;
    }
}

/// Whether the log still holds, unchanged, the entry `shipped` names: `None`
/// when it does (or nothing was shipped), else what differs. What `nd7
/// doctor` asks to tell a machine that rewrote its log from a vault that
/// broke its receipt.
pub fn rewritten_since_shipped(log: &SessionLog) -> Option<String> {
    let shipped = read_shipped(&log.dir().join(SHIPPED_FILE)).ok()??;
    let file = File::open(log.events_path()).ok()?;
    match entry_end(log, &file, shipped.seq) {
        Ok((_, hash)) if hash == shipped.hash => None,
        Ok((_, hash)) => Some(format!(
            "entry {} was shipped with hash {}, but the local entry {} has hash {}",
            shipped.seq,
            shipped.hash.short(),
            shipped.seq,
            hash.short()
        )),
        Err(ShipError::Rewritten { detail, .. }) => Some(detail),
        Err(_) => None,
    }
}

/// The vault's receipt for the last batch it holds of this session, checked:
/// countersigned by the pinned vault key, over a checkpoint this machine
/// signed. Anything else is the vault showing what the machine never signed.
fn vault_head(machine: &Machine, session: &str) -> Result<Option<Receipt>, ShipError> {
    let path = format!("/v1/head/{}", vault::hex(session.as_bytes()));
    let reply = machine
        .client
        .ok("GET", &path, b"", Some(&machine.signer()), None)?;
    let text = String::from_utf8_lossy(&reply);
    if text.trim_end() == "none" {
        return Ok(None);
    }
    let broke = |detail: String| ShipError::VaultBroke {
        machine: machine.id.clone(),
        session: session.into(),
        detail,
    };
    let receipt = Receipt::parse(&text)
        .map_err(|e| broke(format!("its head for this session is not a receipt: {e}")))?;
    machine
        .check_receipt(&receipt, session)
        .map_err(|e| broke(format!("its head for this session does not check: {e}")))?;
    Ok(Some(receipt))
}

/// A restore notice of the vault's, signed by its pinned key, that explains
/// losing what `kept` acknowledged.
fn restore_explaining(
    machine: &Machine,
    kept: &Receipt,
) -> Result<Option<RestoreNotice>, ShipError> {
    let text = machine.client.ok("GET", "/v1/restores", b"", None, None)?;
    let notices = RestoreNotice::parse_all(&String::from_utf8_lossy(&text)).unwrap_or_default();
    Ok(notices
        .into_iter()
        .find(|n| n.verify(&machine.recipients.vault).is_ok() && n.explains(kept)))
}

/// Moves a receipt a declared restore lost to `receipts.lost`, with the
/// notice, and takes `receipt` and `shipped` back to what the vault holds.
fn keep_lost(
    log: &SessionLog,
    kept: &Receipt,
    notice: &RestoreNotice,
    holds: Option<u64>,
) -> Result<String, ShipError> {
    let _lock = lock_log(log, true)?;
    let c = &kept.checkpoint;
    let what = format!(
        "the vault lost entries {}..{} it had acknowledged (receipt stored at {}): it was restored at {} from a backup of {}; shipping them again",
        holds.map_or(0, |h| h + 1),
        c.last,
        kept.stored,
        notice.restored,
        notice.backup
    );
    let path = log.dir().join(LOST_FILE);
    let mut f = OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(&path)
        .map_err(io_err(&path, "open"))?;
    let record = format!("# {what}\n{}{}", kept.render(), notice.render());
    f.write_all(record.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(io_err(&path, "append to"))?;
    remove_optional(&log.dir().join(RECEIPT_FILE))?;
    if holds.is_none() {
        remove_optional(&log.dir().join(SHIPPED_FILE))?;
    }
    Ok(what)
}

/// One sealed batch on its way to the vault.
struct Sealed {
    body: Vec<u8>,
    checkpoint: Checkpoint,
    /// The batch's last entry, with its real hash.
    head: Head,
    entries: u64,
    bytes: u64,
}

/// Ships one session's unshipped entries.
pub fn ship_session(
    machine: &Machine,
    log: &SessionLog,
    progress: &mut dyn FnMut(&str),
) -> Result<Shipped, ShipError> {
    let session = log.session_id().to_string();
    let events_path = log.events_path();
    let broke = |detail: String| ShipError::VaultBroke {
        machine: machine.id.clone(),
        session: session.clone(),
        detail,
    };
    let mut done = Shipped::default();
    // Start from what the vault holds, after holding it to its word.
    let kept = read_receipt(&log.dir().join(RECEIPT_FILE))?;
    let head = vault_head(machine, &session)?;
    if let Some(kept) = &kept {
        let k = &kept.checkpoint;
        let holds = head.as_ref().map(|h| h.checkpoint.last);
        if holds.is_none_or(|h| h < k.last) {
            let Some(notice) = restore_explaining(machine, kept)? else {
                return Err(broke(format!(
                    "it acknowledged entries up to {} (receipt stored at {}), but holds {}, and no restore notice of the vault explains it",
                    k.last,
                    kept.stored,
                    holds.map_or("none of them".into(), |h| format!("only entries up to {h}")),
                )));
            };
            done.notes.push(keep_lost(log, kept, &notice, holds)?);
        } else if let Some(h) = &head
            && h.checkpoint.last == k.last
            && !h.checkpoint.same_head(k)
        {
            return Err(broke(format!(
                "it acknowledged entry {} with digest {} under chain key {} (receipt stored at {}), but now shows digest {} under chain key {} there",
                k.last,
                k.head.short(),
                k.key,
                kept.stored,
                h.checkpoint.head.short(),
                h.checkpoint.key
            )));
        }
    }
    let file = match File::open(&events_path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(done),
        Err(e) => return Err(io_err(&events_path, "open")(e)),
    };
    let (mut offset, cursor) = match &head {
        None => (0, Cursor::start(&session)),
        Some(h) => {
            let c = &h.checkpoint;
            let lock = lock_log(log, false)?;
            let (offset, hash) = entry_end(log, &file, c.last)?;
            drop(lock);
            let shipped = read_shipped(&log.dir().join(SHIPPED_FILE))?;
            let same = match read_chain_key(log)? {
                Some((k, _)) if KeyId::of(&k) == c.key => IndexKey::of(&k).digest(&hash) == c.head,
                _ => match shipped {
                    Some(s) if s.seq == c.last => s.hash == hash,
                    _ => {
                        return Err(ShipError::Rewritten {
                            session,
                            detail: format!(
                                "entry {} cannot be checked against the vault's receipt: chain.key no longer holds chain key {}, and `shipped` does not name the entry",
                                c.last, c.key
                            ),
                        });
                    }
                },
            };
            if !same {
                return Err(ShipError::Rewritten {
                    session,
                    detail: format!(
                        "entry {} was shipped with digest {} under chain key {}, but the local entry {} (hash {}) is another",
                        c.last,
                        c.head.short(),
                        c.key,
                        c.last,
                        hash.short()
                    ),
                });
            }
            let at = Head { seq: c.last, hash };
            if kept.as_ref() != Some(h) || shipped != Some(at) {
                record_ack(log, h, &at)?;
            }
            (
                offset,
                Cursor {
                    next_seq: c.last + 1,
                    prev: hash,
                },
            )
        }
    };
    let size = file.metadata().map_err(io_err(&events_path, "stat"))?.len();
    let backlog = size.saturating_sub(offset);
    // Sealing batch k+1 (read, verify, compress, encrypt, sign) overlaps
    // sending batch k: one thread sends, in order, and keeps each receipt;
    // a refusal stops it, and what was queued behind is dropped, to be sent
    // by the next run.
    let (tx, rx) = std::sync::mpsc::sync_channel::<Sealed>(1);
    let (produced, sent) = std::thread::scope(|scope| {
        let sender = scope.spawn(move || -> (Shipped, Result<(), ShipError>) {
            let mut acked = Shipped::default();
            for sealed in rx {
                match send_batch(machine, log, &sealed) {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(e) => return (acked, Err(e)),
                }
                acked.entries += sealed.entries;
                acked.batches += 1;
                acked.bytes += sealed.bytes;
            }
            (acked, Ok(()))
        });
        let produced = seal_batches(
            machine,
            log,
            &file,
            &mut offset,
            cursor,
            backlog,
            &tx,
            progress,
        );
        drop(tx);
        let sent = sender
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        (produced, sent)
    });
    let (acked, sent) = sent;
    let notes = std::mem::take(&mut done.notes);
    done = acked;
    done.notes = notes;
    sent?;
    produced?;
    done.closed = close_if_ended(log, &file, offset)?;
    Ok(done)
}

/// Sends one batch and keeps the vault's receipt for it. `Ok(false)`: the
/// vault already holds more than this run sent (another run got there
/// first); the next run continues from its head.
fn send_batch(machine: &Machine, log: &SessionLog, sealed: &Sealed) -> Result<bool, ShipError> {
    let session = log.session_id();
    let reply = machine.client.ok(
        "POST",
        "/v1/batches",
        &sealed.body,
        Some(&machine.signer()),
        None,
    )?;
    let text = String::from_utf8_lossy(&reply);
    let sent = &sealed.checkpoint;
    let broke = |detail: String| ShipError::VaultBroke {
        machine: machine.id.clone(),
        session: session.into(),
        detail,
    };
    let receipt = text
        .split_once('\n')
        .map(|(_, rest)| rest)
        .ok_or(vault::Error::Malformed {
            what: "the vault's reply",
            expected: "a status line and a receipt",
        })
        .and_then(Receipt::parse)
        .map_err(|e| {
            broke(format!(
                "its reply to entries {}..{} is not a receipt: {e}",
                sent.first, sent.last
            ))
        })?;
    machine.check_receipt(&receipt, session).map_err(|e| {
        broke(format!(
            "its receipt for entries {}..{} does not check: {e}",
            sent.first, sent.last
        ))
    })?;
    let got = &receipt.checkpoint;
    if got.same_head(sent) {
        record_ack(log, &receipt, &sealed.head)?;
        return Ok(true);
    }
    if got.last > sent.last {
        return Ok(false);
    }
    Err(broke(format!(
        "it acknowledged entries {}..{} with a receipt for entries {}..{}",
        sent.first, sent.last, got.first, got.last
    )))
}

/// Reads, verifies, seals and signs the batches after `offset`, handing
/// each to `tx`; `offset` ends after the last batch handed over.
#[allow(clippy::too_many_arguments)]
fn seal_batches(
    machine: &Machine,
    log: &SessionLog,
    file: &File,
    offset: &mut u64,
    mut cursor: Cursor,
    backlog: u64,
    tx: &std::sync::mpsc::SyncSender<Sealed>,
    progress: &mut dyn FnMut(&str),
) -> Result<(), ShipError> {
    let session = log.session_id().to_string();
    let events_path = log.events_path();
    let mut key: Option<(ChainKey, IndexKey, KeyId, Vec<u8>)> = None;
    let mut buf = vec![0u8; vault::MAX_BATCH_ENTRIES_BYTES];
    let mut sealed = 0u64;
    loop {
        // Read a batch's worth under the shared lock: an append in progress
        // is never seen half-written.
        let n = {
            let _lock = lock_log(log, false)?;
            read_full_at(file, &mut buf, *offset).map_err(io_err(&events_path, "read"))?
        };
        let Some(nl) = memchr::memrchr(b'\n', &buf[..n]) else {
            if n == 0 {
                return Ok(());
            }
            // Under the lock no append is in progress, so bytes without a
            // newline are a torn write (or a line longer than any entry):
            // `nd7 verify` reports the same, and this session is not shipped.
            return Err(ShipError::Unverified {
                session,
                path: events_path,
                entry: cursor.next_seq,
                fault: "not a sealed entry: the line has no newline (an append was cut short)"
                    .into(),
            });
        };
        let entries = &buf[..=nl];
        let mut walker = Walker::new(cursor);
        walker.feed(entries).map_err(|b| ShipError::Unverified {
            session: session.clone(),
            path: events_path.clone(),
            entry: cursor.next_seq + b.entry,
            fault: b.fault.to_string(),
        })?;
        // The walker checked every line, the last one included.
        let last_line = entries[..entries.len() - 1]
            .rsplit(|&b| b == b'\n')
            .next()
            .unwrap_or_default();
        let Ok(last) = crate::chain::read_stated(last_line) else {
            return Ok(());
        };
        let end = Cursor {
            next_seq: last.seq + 1,
            prev: last.hash,
        };
        if key.is_none() {
            let k = chain_key(log, machine.recipients.version)?;
            let wrapped = vault::wrap_chain_key(&k, &machine.recipients.recipients, &mut os_fill);
            let (ik, id) = (IndexKey::of(&k), KeyId::of(&k));
            key = Some((k, ik, id, wrapped));
        }
        let Some((k, ik, id, wrapped)) = &key else {
            return Ok(());
        };
        let index = vault::index_lines(entries, ik)?;
        let count = index.len() as u64;
        let header = BatchHeader {
            machine: machine.id.clone(),
            session: session.clone(),
            key: *id,
            first: cursor.next_seq,
            prev: ik.digest(&cursor.prev),
            index,
        };
        let (body, checkpoint) =
            vault::seal_batch(&header, entries, k, wrapped, random()?, &machine.key);
        let batch = Sealed {
            body,
            checkpoint,
            head: Head {
                seq: end.next_seq - 1,
                hash: end.prev,
            },
            entries: count,
            bytes: entries.len() as u64,
        };
        if tx.send(batch).is_err() {
            // The sender stopped (on an error, which it reports).
            return Ok(());
        }
        *offset += entries.len() as u64;
        sealed += entries.len() as u64;
        cursor = end;
        if backlog > PROGRESS_ABOVE {
            progress(&format!(
                "{session}: {} of {} MiB sealed and sent",
                sealed >> 20,
                backlog >> 20
            ));
        }
    }
}

/// Reads until `buf` is full or the file ends.
fn read_full_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        let got = file.read_at(&mut buf[n..], offset + n as u64)?;
        if got == 0 {
            break;
        }
        n += got;
    }
    Ok(n)
}

/// Removes chain.key once the log ends in a `session_end` entry (a run's
/// chain: `run_end`) and everything up to it is shipped. Returns whether it did.
fn close_if_ended(log: &SessionLog, file: &File, shipped_to: u64) -> Result<bool, ShipError> {
    let key_path = log.dir().join(CHAIN_KEY_FILE);
    if !key_path.exists() {
        return Ok(false);
    }
    let _lock = lock_log(log, true)?;
    let path = log.events_path();
    let size = file.metadata().map_err(io_err(&path, "stat"))?.len();
    if size != shipped_to || size == 0 {
        return Ok(false);
    }
    // The last line: at most one entry's length back from the end.
    let from = size.saturating_sub(crate::chain::MAX_ENTRY_BYTES as u64 + 1);
    let mut tail = vec![0u8; (size - from) as usize];
    file.read_exact_at(&mut tail, from)
        .map_err(io_err(&path, "read"))?;
    let body = &tail[..tail.len() - 1];
    let last = memchr::memrchr(b'\n', body).map_or(body, |nl| &body[nl + 1..]);
    let ended = serde_json::from_slice::<serde_json::Value>(last)
        .ok()
        .and_then(|v| {
            v.get("kind")
                .and_then(|k| k.as_str())
                .map(|k| k == "session_end" || k == crate::run_entry::RUN_END)
        })
        .unwrap_or(false);
    if ended {
        fs::remove_file(&key_path).map_err(io_err(&key_path, "remove"))?;
    }
    Ok(ended)
}

/// Reads `--every`'s DURATION: a number with s, m or h (seconds without).
pub fn parse_duration(text: &str) -> Option<Duration> {
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let n: u64 = digits.parse().ok()?;
    let secs = match unit {
        "s" => n,
        "m" => n.checked_mul(60)?,
        "h" => n.checked_mul(3600)?,
        _ => return None,
    };
    (secs > 0).then(|| Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_s_m_h_or_plain_seconds() {
        assert_eq!(parse_duration("30"), Some(Duration::from_secs(30)));
        assert_eq!(parse_duration("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Some(Duration::from_secs(300)));
        assert_eq!(parse_duration("2h"), Some(Duration::from_secs(7200)));
        for bad in ["", "0", "0s", "5d", "m", "-1s", "1.5m"] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
    }
}
