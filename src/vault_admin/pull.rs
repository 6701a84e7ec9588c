//! Reading one session back from the vault (`nd7 admin pull`): a batch
//! at a time, each checked against the machine's enrolment, its signature,
//! its contents and the batch before, before it is decrypted into the
//! pulled log.

use std::fmt;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::chain::Cursor;
use crate::http_client::Trust;
use crate::session_log;
use crate::ship::{Client, ShipError};
use crate::vault::{
    self, AgeIdentity, ChainKey, Checkpoint, Enrolment, IndexKey, KeyId, PublicKey, PullEnd,
    PullOf, Recipients, RestoreNotice,
};

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
    pub(super) fn digest_at(&self, seq: u64, key: KeyId) -> Option<vault::Digest> {
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
