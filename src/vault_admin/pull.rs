//! Reading one session back from the vault (`nd7 admin pull`): a batch
//! at a time, each checked against the machine's enrolment, its signature,
//! its contents and the batch before, before it is decrypted into the
//! pulled log.

use std::fmt;
use std::io::{self, Read};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use crate::chain::Cursor;
use crate::files::Staged;
use crate::http_client::Trust;
use crate::session_log;
use crate::ship::{Client, Request, ShipError};
use crate::vault::{
    self, AgeIdentity, Batch, Checkpoint, Enrolment, IndexKey, KeyId, PublicKey, PullEnd, PullOf,
    Recipients, RestoreNotice,
};

use super::frames::{ChainKeys, Tally};
use super::{Fault, Finding, PullError, vault_fault, when};

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
    staged: Option<Staged>,
    keys: ChainKeys,
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
    pub(super) fn digest_at(&self, seq: u64, key: KeyId) -> Option<vault::Digest> {
        let chain_key = self.keys.find(key)?;
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

/// The restores the vault declares, one note each: whatever a pull finds,
/// an admin should know the vault says it lost acknowledged batches then.
fn restores(client: &Client, vault_key: &PublicKey) -> Result<Vec<String>, PullError> {
    let text = client.ok_bound(Request::get("/v1/restores"), vault_key)?;
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
    let doc = super::recipients(&client, fingerprint)?;
    let enrolment = enrolment(&client, url, read_token, &doc, machine)?;
    let (path, file) = stage_log(out, session)?;
    let batches_path = format!("/v1/batches/{machine}/{}", vault::hex(session.as_bytes()));
    let crate::ship::Stream {
        body: stream,
        nonce,
    } = client.get_stream(&batches_path, Some(read_token))?;
    let pulled = Pulled {
        machine: machine.into(),
        session: session.into(),
        path,
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
        keys: ChainKeys::default(),
    };
    let mut reading = Reading {
        names: format!("machine {machine}, session {session}"),
        identity,
        stream,
        nonce,
        tally: Tally::new(),
        ended: false,
        machine_stopped: false,
        cursor: Cursor::start(session),
        offset: 0,
        file,
        pulled,
    };
    reading.run()?;
    reading.finish()
}

/// The machine's enrolment record as the vault holds it: the organisation's
/// key must have signed it, and it must be that machine's.
fn enrolment(
    client: &Client,
    url: &str,
    read_token: &str,
    doc: &Recipients,
    machine: &str,
) -> Result<Enrolment, PullError> {
    let path = format!("/v1/machines/{machine}");
    let record = match client
        .request_bound(Request::get(&path).bearer(Some(read_token)), &doc.vault)?
    {
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
    Ok(enrolment)
}

/// `OUT/<session>/events.ndjson`, staged: written whole, the log appears
/// once every batch checked, synced, and a pull that fails leaves nothing
/// behind.
fn stage_log(out: &Path, session: &str) -> Result<(PathBuf, Staged), PullError> {
    let dir = out.join(session);
    std::fs::create_dir_all(&dir).map_err(|e| ShipError::Io {
        path: dir.clone(),
        action: "create",
        source: e,
    })?;
    let path = dir.join(session_log::EVENTS_FILE);
    let file = Staged::create(&path, 0o600).map_err(|e| PullError::Other(e.into()))?;
    Ok((path, file))
}

/// A pull under way: the vault's reply as it streams in, what has been read
/// of it, and the staged log the batches that check are decrypted into.
struct Reading<'a> {
    names: String,
    identity: &'a AgeIdentity,
    stream: Box<dyn Read + Send>,
    /// The request's nonce, which the vault's signed last frame names.
    nonce: [u8; 16],
    /// Every frame before the vault's signed last one, as it came.
    tally: Tally,
    /// Whether the vault's signed last frame came.
    ended: bool,
    /// Once the machine's own batches disagree, the rest is still checked
    /// for what only the vault could have done (a batch the machine did not
    /// sign, a gap), but no longer decrypted into the pulled log.
    machine_stopped: bool,
    cursor: Cursor,
    /// Where the next batch's entries start in the pulled log.
    offset: u64,
    file: Staged,
    pulled: Pulled,
}

impl Reading<'_> {
    /// Reads frames until the reply ends or something is found.
    fn run(&mut self) -> Result<(), PullError> {
        let mut body = Vec::new();
        while self.read_frame(&mut body).is_continue() {
            let step = if PullEnd::is_end(&body) {
                self.check_end(&body)
            } else {
                self.take_batch(&body)?
            };
            if step.is_break() {
                break;
            }
        }
        Ok(())
    }

    fn vault_finding(&mut self, text: String) {
        self.pulled.findings.push(Finding {
            fault: Fault::Vault,
            text,
        });
    }

    /// A finding against the machine: its batches are no longer decrypted.
    fn machine_finding(&mut self, text: String) {
        self.pulled.findings.push(Finding {
            fault: Fault::Machine,
            text,
        });
        self.machine_stopped = true;
    }

    fn cut(&mut self, e: io::Error) -> ControlFlow<()> {
        let n = self.pulled.held.len();
        self.vault_finding(format!(
            "{}: the vault's reply is cut short at batch {n}: {e}",
            self.names
        ));
        ControlFlow::Break(())
    }

    /// The next frame into `body`; `Break` at the reply's end, or when
    /// the reply is cut short, goes on past its last frame, or holds a
    /// frame too long (each a finding).
    fn read_frame(&mut self, body: &mut Vec<u8>) -> ControlFlow<()> {
        let n = self.pulled.held.len();
        let mut len = [0u8; 4];
        match read_frame_part(&mut self.stream, &mut len) {
            Ok(true) if self.ended => {
                self.vault_finding(format!(
                    "{}: the vault's reply goes on after its signed last frame",
                    self.names
                ));
                return ControlFlow::Break(());
            }
            Ok(true) => {}
            Ok(false) if self.ended => return ControlFlow::Break(()),
            Ok(false) => {
                // The network can end a reply cleanly at any frame; only the
                // vault's signed last frame says it is all there is.
                self.vault_finding(format!(
                    "{}: the vault's reply ends after batch {n} without its signed last frame: it is incomplete, cut short",
                    self.names
                ));
                return ControlFlow::Break(());
            }
            Err(e) => return self.cut(e),
        }
        let len = u32::from_be_bytes(len) as usize;
        if len > vault::MAX_BODY_BYTES {
            self.vault_finding(format!(
                "{}: batch {n} is forged: it is {len} bytes, over the {} a batch can be",
                self.names,
                vault::MAX_BODY_BYTES
            ));
            return ControlFlow::Break(());
        }
        body.resize(len, 0);
        match read_frame_part(&mut self.stream, body) {
            Ok(true) => ControlFlow::Continue(()),
            Ok(false) if len == 0 => ControlFlow::Continue(()),
            Ok(false) => self.cut(io::ErrorKind::UnexpectedEof.into()),
            Err(e) => self.cut(e),
        }
    }

    /// The vault's signed last frame: it must sign this request's nonce and
    /// every frame before it.
    fn check_end(&mut self, body: &[u8]) -> ControlFlow<()> {
        let p = &self.pulled;
        let checked = self.tally.check_end(
            body,
            &p.vault_key,
            &self.nonce,
            (&p.machine, &p.session),
            PullOf::Batches,
        );
        if let Err(why) = checked {
            self.vault_finding(format!(
                "{}: the vault's reply is not its whole answer: {why}",
                self.names
            ));
            return ControlFlow::Break(());
        }
        self.ended = true;
        ControlFlow::Continue(())
    }

    /// One batch frame: counted into what the last frame signs, checked for
    /// what only the vault could have done, then held, and decrypted unless
    /// the machine's own batches already disagreed.
    fn take_batch(&mut self, body: &[u8]) -> Result<ControlFlow<()>, PullError> {
        self.tally.count(body);
        let Some(batch) = self.vault_checked(body) else {
            return Ok(ControlFlow::Break(()));
        };
        self.pulled.held.push(batch.checkpoint.clone());
        if !self.machine_stopped {
            self.decrypt(batch)?;
        }
        Ok(ControlFlow::Continue(()))
    }

    /// The batch, if it is one, the machine signed it, it is of this
    /// session, and it starts where the one before ended: else a finding
    /// against the vault.
    fn vault_checked(&mut self, body: &[u8]) -> Option<Batch> {
        let n = self.pulled.held.len();
        let next = self.pulled.held.last().map_or(0, |c| c.last + 1);
        let batch = match vault::parse_batch(body) {
            Ok(batch) => batch,
            Err(e) => {
                self.vault_finding(format!(
                    "{}: batch {n} is forged: it is not a batch: {e}",
                    self.names
                ));
                return None;
            }
        };
        let c = &batch.checkpoint;
        let text = if !batch.signed_by(&self.pulled.machine_key) {
            format!(
                "{}: the batch is forged: it is not signed by the machine's enrolled key",
                c.names()
            )
        } else if c.machine != self.pulled.machine || c.session != self.pulled.session {
            format!(
                "{}: the vault serves the machine's batch of {} among them",
                self.names,
                c.names()
            )
        } else if c.first > next {
            format!(
                "{}: entries {next}..{} are missing: the vault holds no batch of them",
                self.names,
                c.first - 1
            )
        } else if c.first < next {
            format!("{}: batches overlap at entry {}", self.names, c.first)
        } else {
            return Some(batch);
        };
        self.vault_finding(text);
        None
    }

    /// Opens a batch the vault check passed and appends its entries to the
    /// log, if the machine's wrapped key opens, the batch checks and it
    /// continues the entries before; else a finding against the machine.
    fn decrypt(&mut self, batch: Batch) -> Result<(), PullError> {
        let c = &batch.checkpoint;
        // An identity the key was not wrapped for is an error: nothing of
        // the session can be read.
        let opened = match self
            .pulled
            .keys
            .get(c.key, &batch.wrapped_key, self.identity)
        {
            Ok(key) => vault::open_batch(&batch, key),
            Err(e @ vault::Error::NoMatchingStanza) => {
                return Err(PullError::Other(ShipError::Vault(e)));
            }
            Err(e) => {
                self.machine_finding(format!(
                    "{}: the machine signed a wrapped chain key that does not open: {e}",
                    c.names()
                ));
                return Ok(());
            }
        };
        let opened = match opened {
            Ok(opened) => opened,
            Err(e) => {
                self.machine_finding(format!(
                    "{}: the machine signed a batch that does not check: {e}",
                    c.names()
                ));
                return Ok(());
            }
        };
        if opened.prev != self.cursor.prev {
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
            self.machine_finding(format!("{}: {detail}", self.names));
            return Ok(());
        }
        self.append(batch.checkpoint, &opened)
    }

    /// Appends an opened batch's entries to the staged log.
    fn append(&mut self, checkpoint: Checkpoint, opened: &vault::Opened) -> Result<(), PullError> {
        self.file
            .write(&opened.entries)
            .map_err(|e| PullError::Other(e.into()))?;
        let last_line = opened.entries[..opened.entries.len() - 1]
            .rsplit(|&b| b == b'\n')
            .next()
            .unwrap_or_default();
        self.pulled.ended = is_session_end(last_line);
        self.cursor = Cursor {
            next_seq: checkpoint.last + 1,
            prev: opened.last,
        };
        let len = opened.entries.len() as u64;
        self.pulled.batches.push(PulledBatch {
            checkpoint,
            offset: self.offset,
            len,
        });
        self.offset += len;
        Ok(())
    }

    /// The log written out if the pull found nothing and got a batch; else
    /// nothing is, but what checked stays readable for `compare` until the
    /// pull is dropped.
    fn finish(self) -> Result<Pulled, PullError> {
        let Reading {
            mut pulled,
            file,
            cursor,
            ..
        } = self;
        pulled.entries = cursor.next_seq;
        if pulled.findings.is_empty() && !pulled.batches.is_empty() {
            file.commit(crate::files::Durability::Durable)
                .map_err(|e| PullError::Other(e.into()))?;
        } else {
            pulled.path = file.temporary().to_path_buf();
            pulled.staged = Some(file);
        }
        Ok(pulled)
    }
}
