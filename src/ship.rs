//! The machine's side of the vault, and the admin's read-back: `nd7 enroll`,
//! `nd7 ship`, `nd7 admin pull`. The only part of nd7 that uses the network;
//! the format and every cryptographic step are [`crate::vault`]'s.
//!
//! ```text
//! $XDG_STATE_HOME/nd7/
//!   vault/                     0700, written by enroll, every file 0600
//!     machine.key              the machine's Ed25519 seed (hex)
//!     machine.id               the id the vault assigned
//!     server                   the vault's base URL
//!     recipients               the signed recipients document last accepted
//!   sessions/<id>/
//!     shipped                  "<seq> <hash>\n": the last entry the vault acknowledged
//!     chain.key                0600: the session's chain key, until it has ended and is all shipped
//! ```
//!
//! Shipping a session: ask the vault how far it has the chain, read the
//! entries after that under the log's shared lock (writers wait), verify
//! them with the same walker `nd7 verify` uses, and send them in batches of
//! at most 8 MiB. `shipped` moves forward only after the vault acknowledges a
//! batch, under the log's exclusive lock. A run killed anywhere resumes from
//! what the vault holds: nothing is lost, and nothing is stored twice (the
//! vault acknowledges a resend without storing it again).

#![forbid(unsafe_code)]

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::chain::{Cursor, Hash, Head, Walker};
use crate::session_log::{self, SessionLog};
use crate::vault::{
    self, AgeIdentity, AgeRecipient, BatchHeader, ChainKey, PublicKey, Recipients, RequestAuth,
    Secret32, SigningKey,
};

pub const VAULT_DIR: &str = "vault";
pub const MACHINE_KEY_FILE: &str = "machine.key";
pub const MACHINE_ID_FILE: &str = "machine.id";
pub const SERVER_FILE: &str = "server";
pub const RECIPIENTS_FILE: &str = "recipients";
pub const SHIPPED_FILE: &str = "shipped";
pub const CHAIN_KEY_FILE: &str = "chain.key";

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

fn random<const N: usize>() -> Result<[u8; N], ShipError> {
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
fn write_0600(path: &Path, bytes: &[u8]) -> Result<(), ShipError> {
    let tmp = path.with_extension("tmp");
    let _ = fs::remove_file(&tmp);
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io_err(&tmp, "create"))?;
    f.write_all(bytes).map_err(io_err(&tmp, "write"))?;
    f.sync_all().map_err(io_err(&tmp, "sync"))?;
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
    pub recipients: usize,
    pub dir: PathBuf,
}

pub fn vault_dir(state_dir: &Path) -> PathBuf {
    state_dir.join(VAULT_DIR)
}

/// `nd7 enroll`: fetch and check the recipients document against the pinned
/// fingerprint, make the machine's key, register it with the token, and
/// write the vault directory. Nothing is written unless all of that worked.
pub fn enroll(
    state_dir: &Path,
    url: &str,
    token: &str,
    fingerprint: &str,
) -> Result<Enrolled, ShipError> {
    if vault::unhex::<32>(fingerprint).is_none() {
        return Err(ShipError::BadFingerprint(fingerprint.to_string()));
    }
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
    let seed = Secret32::from_bytes(random()?);
    let key = SigningKey::from_seed(&seed);
    let body = vault::enroll_body(token, &key.public());
    let signer = Signer {
        key: &key,
        machine: "new",
    };
    let reply = client.ok("POST", "/v1/enroll", body.as_bytes(), Some(&signer), None)?;
    let machine_id = String::from_utf8_lossy(&reply)
        .trim_end()
        .strip_prefix("machine ")
        .filter(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric()))
        .map(str::to_string)
        .ok_or_else(|| ShipError::Http {
            url: format!("{url}/v1/enroll"),
            detail: "the vault's reply is not `machine <id>`".into(),
        })?;
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
        recipients: recipients.recipients.len(),
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
        let server = read_text(&dir.join(SERVER_FILE))?.trim().to_string();
        let rec_path = dir.join(RECIPIENTS_FILE);
        let recipients =
            Recipients::parse(&read_text(&rec_path)?).map_err(|e| ShipError::BadFile {
                path: rec_path,
                what: e.to_string(),
            })?;
        Ok(Machine {
            id,
            key: SigningKey::from_seed(&seed),
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
    /// organisation key signed it (how admins rotate recipients). If the
    /// vault cannot be asked, or serves a document the pinned key did not
    /// sign, the last accepted one stays and the reason is returned.
    pub fn refresh_recipients(&mut self) -> Option<String> {
        let pinned = self.recipients.org.fingerprint();
        let doc = match self.client.ok("GET", "/v1/recipients", b"", None, None) {
            Ok(doc) => String::from_utf8_lossy(&doc).into_owned(),
            Err(e) => return Some(format!("kept the pinned recipients: {e}")),
        };
        match Recipients::verify(&doc, &pinned) {
            Ok(fresh) if fresh != self.recipients => {
                if let Err(e) = write_0600(&self.dir.join(RECIPIENTS_FILE), doc.as_bytes()) {
                    return Some(format!("kept the pinned recipients: {e}"));
                }
                self.recipients = fresh;
                None
            }
            Ok(_) => None,
            Err(e) => Some(format!(
                "kept the pinned recipients: the vault's document is refused: {e}"
            )),
        }
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
            .and_then(|log| ship_session(&machine, &log, progress));
        report.sessions.push((id, result));
    }
    Ok(report)
}

fn read_shipped(path: &Path) -> Result<Option<Head>, ShipError> {
    match fs::read(path) {
        Ok(text) => Head::parse(&text)
            .map(Some)
            .ok_or_else(|| ShipError::BadFile {
                path: path.to_path_buf(),
                what: "not \"<seq> <hash>\\n\"".into(),
            }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(path, "read")(e)),
    }
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

/// Moves `shipped` forward to `head`, under the writer's lock; never back.
fn advance_shipped(log: &SessionLog, head: &Head) -> Result<(), ShipError> {
    let _lock = lock_log(log, true)?;
    let path = log.dir().join(SHIPPED_FILE);
    if read_shipped(&path)?.is_some_and(|s| s.seq >= head.seq) {
        return Ok(());
    }
    write_0600(&path, head.render().as_bytes())
}

/// The session's chain key, made (0600, never overwritten) on first use.
fn chain_key(log: &SessionLog) -> Result<ChainKey, ShipError> {
    let path = log.dir().join(CHAIN_KEY_FILE);
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
    {
        Ok(mut f) => {
            let key = Secret32::from_bytes(random()?);
            f.write_all(format!("{}\n", vault::hex(key.expose_secret())).as_bytes())
                .and_then(|()| f.sync_all())
                .map_err(io_err(&path, "write"))?;
            Ok(key)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let text = fs::read_to_string(&path).map_err(io_err(&path, "read"))?;
            vault::parse_secret_text(&text, "chain.key").map_err(|e| ShipError::BadFile {
                path,
                what: e.to_string(),
            })
        }
        Err(e) => Err(io_err(&path, "create")(e)),
    }
}

/// Where entry `seq + 1` starts in the log, checking on the way that entry
/// `seq` is still the one with `hash` (a log rewritten after shipping fails
/// here, naming the entry).
fn offset_after(log: &SessionLog, file: &File, head: &Head) -> Result<u64, ShipError> {
    let path = log.events_path();
    let mut buf = vec![0u8; 1 << 20];
    let (mut at, mut seq) = (0u64, 0u64);
    let mut line: Vec<u8> = Vec::new();
    loop {
        let n = file.read_at(&mut buf, at).map_err(io_err(&path, "read"))?;
        if n == 0 {
            return Err(ShipError::Rewritten {
                session: log.session_id().into(),
                detail: format!(
                    "the vault acknowledged entry {}, but the log has only {seq} entries",
                    head.seq
                ),
            });
        }
        let mut from = 0;
        for nl in memchr::memchr_iter(b'\n', &buf[..n]) {
            if seq == head.seq {
                line.extend_from_slice(&buf[from..nl]);
                let found = crate::chain::read_checked(&line).ok();
                if found.map(|s| (s.seq, s.hash)) != Some((head.seq, head.hash)) {
                    return Err(ShipError::Rewritten {
                        session: log.session_id().into(),
                        detail: format!(
                            "entry {} was shipped with hash {}, but the local entry {} is {}",
                            head.seq,
                            head.hash.short(),
                            head.seq,
                            found.map_or_else(|| "not a sealed entry".into(), |s| s.hash.short())
                        ),
                    });
                }
                return Ok(at + nl as u64 + 1);
            }
            seq += 1;
            from = nl + 1;
        }
        if seq == head.seq {
            line.extend_from_slice(&buf[from..n]);
        }
        at += n as u64;
    }
}

/// What the vault holds of this session: its last entry, if any.
fn vault_head(machine: &Machine, session: &str) -> Result<Option<Head>, ShipError> {
    let path = format!("/v1/head/{}", vault::hex(session.as_bytes()));
    let reply = machine
        .client
        .ok("GET", &path, b"", Some(&machine.signer()), None)?;
    let text = String::from_utf8_lossy(&reply);
    if text.trim_end() == "none" {
        return Ok(None);
    }
    Head::parse(text.as_bytes())
        .map(Some)
        .ok_or_else(|| ShipError::Http {
            url: path,
            detail: "the vault's head is not \"<seq> <hash>\"".into(),
        })
}

/// Ships one session's unshipped entries.
pub fn ship_session(
    machine: &Machine,
    log: &SessionLog,
    progress: &mut dyn FnMut(&str),
) -> Result<Shipped, ShipError> {
    let session = log.session_id().to_string();
    let shipped_path = log.dir().join(SHIPPED_FILE);
    let events_path = log.events_path();
    let mut done = Shipped::default();
    // Start from what the vault holds: after a run killed between the
    // vault's acknowledgement and the `shipped` rewrite, it is ahead.
    let local = read_shipped(&shipped_path)?;
    let remote = vault_head(machine, &session)?;
    let start = match (local, remote) {
        (_, None) => None,
        (Some(l), Some(r)) if l.seq > r.seq => {
            return Err(ShipError::Rewritten {
                session,
                detail: format!(
                    "`shipped` says entry {} was acknowledged, but the vault holds only up to {}",
                    l.seq, r.seq
                ),
            });
        }
        (_, Some(r)) => Some(r),
    };
    let file = match File::open(&events_path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(done),
        Err(e) => return Err(io_err(&events_path, "open")(e)),
    };
    let (mut offset, cursor) = match start {
        None => (0, Cursor::start(&session)),
        Some(head) => {
            let _lock = lock_log(log, false)?;
            let offset = offset_after(log, &file, &head)?;
            drop(_lock);
            if local != Some(head) {
                advance_shipped(log, &head)?;
            }
            (
                offset,
                Cursor {
                    next_seq: head.seq + 1,
                    prev: head.hash,
                },
            )
        }
    };
    let size = file.metadata().map_err(io_err(&events_path, "stat"))?.len();
    let backlog = size.saturating_sub(offset);
    // Sealing batch k+1 (read, verify, compress, encrypt) overlaps sending
    // batch k: one thread sends, in order, and moves `shipped` after each
    // acknowledgement; a refusal stops it, and what was queued behind is
    // dropped, to be sent by the next run.
    let (tx, rx) = std::sync::mpsc::sync_channel::<(Vec<u8>, Head, u64, u64)>(1);
    let (produced, sent) = std::thread::scope(|scope| {
        let sender = scope.spawn(move || -> (Shipped, Result<(), ShipError>) {
            let mut acked = Shipped::default();
            for (body, head, entries, bytes) in rx {
                let result = machine
                    .client
                    .ok("POST", "/v1/batches", &body, Some(&machine.signer()), None)
                    .and_then(|_| advance_shipped(log, &head));
                if let Err(e) = result {
                    return (acked, Err(e));
                }
                acked.entries += entries;
                acked.batches += 1;
                acked.bytes += bytes;
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
    done = acked;
    sent?;
    produced?;
    done.closed = close_if_ended(log, &file, offset)?;
    Ok(done)
}

/// Reads, verifies and seals the batches after `offset`, handing each to
/// `tx`; `offset` ends after the last batch handed over.
#[allow(clippy::too_many_arguments)]
fn seal_batches(
    machine: &Machine,
    log: &SessionLog,
    file: &File,
    offset: &mut u64,
    mut cursor: Cursor,
    backlog: u64,
    tx: &std::sync::mpsc::SyncSender<(Vec<u8>, Head, u64, u64)>,
    progress: &mut dyn FnMut(&str),
) -> Result<(), ShipError> {
    let session = log.session_id().to_string();
    let events_path = log.events_path();
    let mut key: Option<(ChainKey, Vec<u8>)> = None;
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
        let index = vault::index_lines(entries)?;
        let Some(last) = index.last().copied() else {
            return Ok(());
        };
        if key.is_none() {
            let k = chain_key(log)?;
            let wrapped = vault::wrap_chain_key(&k, &machine.recipients.recipients, &mut os_fill);
            key = Some((k, wrapped));
        }
        let Some((k, wrapped)) = &key else {
            return Ok(());
        };
        let count = index.len() as u64;
        let header = BatchHeader {
            machine: machine.id.clone(),
            session: session.clone(),
            first: cursor.next_seq,
            prev: cursor.prev,
            index,
        };
        let body = vault::seal_batch(&header, entries, k, wrapped, random()?);
        let head = Head {
            seq: last.seq,
            hash: last.hash,
        };
        if tx.send((body, head, count, entries.len() as u64)).is_err() {
            // The sender stopped on an error, which it reports.
            return Ok(());
        }
        *offset += entries.len() as u64;
        sealed += entries.len() as u64;
        cursor = Cursor {
            next_seq: last.seq + 1,
            prev: last.hash,
        };
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

// ---------------------------------------------------------------- admin

/// An organisation key: its seed as a file's text, and its fingerprint.
pub fn new_org_key() -> Result<(String, String), ShipError> {
    let seed = Secret32::from_bytes(random()?);
    let fp = SigningKey::from_seed(&seed).public().fingerprint();
    let text = format!(
        "# nd7 organisation key (Ed25519 seed); keep it offline\n# fingerprint: {fp}\n{}\n",
        vault::hex(seed.expose_secret())
    );
    Ok((text, fp))
}

/// An admin's age identity, as age-keygen writes one, and its recipient.
pub fn new_age_identity() -> Result<(String, String), ShipError> {
    let id = AgeIdentity::from_secret(&Secret32::from_bytes(random()?));
    let recipient = id.recipient().to_string();
    let text = format!(
        "# created by nd7 admin age-key\n# public key: {recipient}\n{}\n",
        id.to_bech32()
    );
    Ok((text, recipient))
}

/// Signs a recipients document with the organisation key in `org_key_text`.
pub fn sign_recipients(org_key_text: &str, recipients: &[String]) -> Result<String, ShipError> {
    let seed = vault::parse_secret_text(org_key_text, "the organisation key")?;
    let parsed = recipients
        .iter()
        .map(|r| AgeRecipient::parse(r))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Recipients::sign(&SigningKey::from_seed(&seed), &parsed))
}

/// A session as the vault holds it, decrypted and checked.
#[derive(Debug)]
pub struct Pulled {
    pub log: Vec<u8>,
    pub entries: u64,
    pub batches: usize,
}

/// Fetches every batch of one session, opens each with `identity`, and
/// checks that they join into one chain from entry 0.
pub fn pull(
    url: &str,
    read_token: &str,
    identity: &AgeIdentity,
    machine: &str,
    session: &str,
) -> Result<Pulled, ShipError> {
    session_log::check_session_id(session)?;
    let client = Client::new(url);
    let path = format!("/v1/batches/{machine}/{}", vault::hex(session.as_bytes()));
    let framed = client.ok("GET", &path, b"", None, Some(read_token))?;
    let bad = |detail: String| ShipError::Http {
        url: format!("{url}{path}"),
        detail,
    };
    let mut rest = framed.as_slice();
    let mut log = Vec::new();
    let mut cursor = Cursor::start(session);
    let mut batches = 0;
    let mut last_wrapped: Option<(Vec<u8>, ChainKey)> = None;
    while !rest.is_empty() {
        let len: [u8; 4] = rest
            .get(..4)
            .and_then(|l| l.try_into().ok())
            .ok_or_else(|| bad("a batch's length is cut short".into()))?;
        let len = u32::from_be_bytes(len) as usize;
        let body = rest
            .get(4..4 + len)
            .ok_or_else(|| bad("a batch is cut short".into()))?;
        rest = &rest[4 + len..];
        let batch = vault::parse_batch(body)?;
        if batch.header.session != session || batch.header.machine != machine {
            return Err(bad(format!(
                "batch {} belongs to another session or machine",
                batch.header.first
            )));
        }
        if batch.header.first != cursor.next_seq || batch.header.prev != cursor.prev {
            return Err(ShipError::Rewritten {
                session: session.into(),
                detail: format!(
                    "the vault's batches do not join: batch at {} after entry {}",
                    batch.header.first,
                    cursor.next_seq.wrapping_sub(1)
                ),
            });
        }
        let reuse = matches!(&last_wrapped, Some((w, _)) if *w == batch.wrapped_key);
        if !reuse {
            let key = vault::unwrap_chain_key(&batch.wrapped_key, identity)?;
            last_wrapped = Some((batch.wrapped_key.clone(), key));
        }
        let Some((_, key)) = &last_wrapped else {
            continue;
        };
        let entries = vault::open_batch(&batch, key)?;
        log.extend_from_slice(&entries);
        let last = batch.header.last();
        cursor = Cursor {
            next_seq: last.seq + 1,
            prev: last.hash,
        };
        batches += 1;
    }
    Ok(Pulled {
        log,
        entries: cursor.next_seq,
        batches,
    })
}

/// How a local log stands against the vault's copy.
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

/// Compares the vault's copy with a local log, line by line.
pub fn compare(vault_copy: &[u8], local: &[u8]) -> Comparison {
    let mut ours = local.split_inclusive(|&b| b == b'\n');
    let mut n = 0u64;
    for theirs in vault_copy.split_inclusive(|&b| b == b'\n') {
        let stated = crate::chain::read_stated(&theirs[..theirs.len() - 1]).ok();
        let vault_hash = stated.map_or_else(|| Hash::of(theirs), |s| s.hash);
        match ours.next() {
            None => {
                return Comparison::Truncated {
                    local_entries: n,
                    vault_entries: vault_copy.iter().filter(|&&b| b == b'\n').count() as u64,
                };
            }
            Some(line) if line == theirs => {}
            Some(line) => {
                let local = crate::chain::read_stated(line.strip_suffix(b"\n").unwrap_or(line))
                    .map_or_else(
                        |_| "not a sealed entry".into(),
                        |s| format!("hash {}", s.hash.short()),
                    );
                return Comparison::Differs {
                    entry: n,
                    vault_hash,
                    local,
                };
            }
        }
        n += 1;
    }
    Comparison::Matches {
        entries: n,
        unshipped: ours.count() as u64,
    }
}

/// Lists the chains a vault holds: (machine, session, last seq).
pub fn list_sessions(url: &str, read_token: &str) -> Result<Vec<(String, String, u64)>, ShipError> {
    let client = Client::new(url);
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

/// Checks that a public key parses, for the CLI.
pub fn public_key_ok(hex: &str) -> bool {
    PublicKey::from_hex(hex).is_some()
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
        let vault = chain(&["a", "b", "c"]);
        assert_eq!(
            compare(&vault, &vault),
            Comparison::Matches {
                entries: 3,
                unshipped: 0
            }
        );
        assert_eq!(
            compare(&vault, &chain(&["a", "b", "c", "d"])),
            Comparison::Matches {
                entries: 3,
                unshipped: 1
            }
        );
        assert!(matches!(
            compare(&vault, &chain(&["a", "x", "c"])),
            Comparison::Differs { entry: 1, .. }
        ));
        assert_eq!(
            compare(&vault, &chain(&["a"])),
            Comparison::Truncated {
                local_entries: 1,
                vault_entries: 3
            }
        );
    }
}
