//! `nd7 ship`: every session's unshipped entries read under the log's
//! lock, verified, sealed and signed into batches, and sent in order by a
//! second thread while the next batch is sealed; each receipt checked and
//! kept before `shipped` moves.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use super::receipts::{
    chain_key, entry_end, keep_lost, lock_log, read_chain_key, read_receipt, read_shipped,
    record_ack, restore_explaining, vault_head,
};
use super::*;
use crate::chain::{Cursor, Hash, Head, Walker};
use crate::session_log::{self, SessionLog};
use crate::vault::{self, BatchHeader, ChainKey, Checkpoint, IndexKey, KeyId, Receipt};

/// What shipping one session did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Shipped {
    pub entries: u64,
    pub batches: u64,
    pub bytes: u64,
    /// Transcript pieces sent, and the transcript bytes in them.
    pub transcript_pieces: u64,
    pub transcript_bytes: u64,
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
    /// Sessions not tried, because the vault said this machine is over its
    /// quota, or could not be reached (the reason is the last session's
    /// error).
    pub not_tried: Vec<String>,
    /// What the vault acknowledged of sessions whose run then failed.
    pub partly: Vec<(String, Shipped)>,
}

impl Report {
    /// Why the vault could not be reached, when that stopped this ship.
    pub fn unreachable(&self) -> Option<&str> {
        match self.sessions.last() {
            Some((_, Err(ShipError::Http { detail, .. }))) => Some(detail),
            _ => None,
        }
    }

    pub fn all_shipped(&self) -> bool {
        self.not_tried.is_empty() && self.sessions.iter().all(|(_, r)| r.is_ok())
    }

    /// Whether the vault broke a receipt for some session.
    pub fn vault_broke(&self) -> bool {
        self.sessions
            .iter()
            .any(|(_, r)| matches!(r, Err(ShipError::VaultBroke { .. })))
    }
}

/// `nd7 ship`, once: every session under the state directory. Runs one at
/// a time on a machine (the timer's and one by hand wait for each other
/// on `vault/ship.lock`): two at once would each make a session's first
/// chain key, and one would be refused.
pub fn ship_all(state_dir: &Path, progress: &mut dyn FnMut(&str)) -> Result<Report, ShipError> {
    let mut machine = Machine::load(state_dir)?;
    let lock_path = machine.dir.join(SHIP_LOCK_FILE);
    let _one_at_a_time = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&lock_path)
        .and_then(|f| f.lock().map(|()| f))
        .map_err(io_err(&lock_path, "lock"))?;
    let mut report = Report::default();
    if let Some(w) = machine.refresh_recipients() {
        report.warnings.push(w);
    }
    if let Some(w) = recipients_running_out(&machine.recipients, unix_now()) {
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
    let mut ids = ids.into_iter();
    for id in ids.by_ref() {
        let mut acked = Shipped::default();
        let result = SessionLog::new(&sessions, &id)
            .map_err(ShipError::from)
            .and_then(|log| ship_and_alarm(&machine, &log, progress, &mut acked));
        if result.is_err() && acked.batches > 0 {
            report.partly.push((id.clone(), acked));
        }
        // Every other session would be refused, or fail to connect, the
        // same way: one line says it, not one per session.
        let stop = matches!(
            result,
            Err(ShipError::OverQuota { .. } | ShipError::Http { .. })
        );
        report.sessions.push((id, result));
        if stop {
            break;
        }
    }
    report.not_tried = ids.collect();
    // A vault out of reach is said once (`ShipReport::unreachable`), not
    // again for the tally.
    if report.unreachable().is_none() {
        match send_tally(&machine, &sessions) {
            Ok(true) => {}
            Ok(false) => report.warnings.push(
                "the vault keeps a later tally of this machine than the one just sent (one dated ahead: this machine's clock is or was wrong), so the sessions shipped since are in no tally it keeps".to_string(),
            ),
            Err(e) => report
                .warnings
                .push(format!("the tally of shipped sessions was not sent: {e}")),
        }
    }
    Ok(report)
}

/// Signs and sends this machine's tally (ADR-0120, ADR-0129): the receipt
/// it keeps for every session, so that admins can hold the vault's list of
/// sessions to what the vault itself acknowledged. Whether the vault
/// kept it.
fn send_tally(machine: &Machine, sessions: &Path) -> Result<bool, ShipError> {
    let mut receipts = Vec::new();
    for entry in fs::read_dir(sessions).map_err(io_err(sessions, "list"))? {
        let Ok(entry) = entry else { continue };
        if let Some(receipt) = read_receipt(&entry.path().join(RECEIPT_FILE))? {
            receipts.push(receipt);
        }
    }
    post_tally(
        &machine.client,
        &machine.signer(),
        &machine.recipients.vault,
        next_tally_number(&machine.dir)?,
        receipts,
    )
}

/// The number of this machine's next tally (ADR-0132): one more than the
/// last it signed (`vault/tally.number`; none kept: 0). Written, synced,
/// before the tally is signed, so that no number is signed twice, not even
/// by a run killed after posting; taken under `ship.lock`, so that two
/// runs never take one number, and post their tallies in its order.
fn next_tally_number(dir: &Path) -> Result<u64, ShipError> {
    let path = dir.join(TALLY_NUMBER_FILE);
    let last = match read_optional(&path)? {
        None => 0,
        Some(text) => text
            .trim_end()
            .parse::<u64>()
            .map_err(|_| ShipError::BadFile {
                path: path.clone(),
                what: "not the number of a tally".to_string(),
            })?,
    };
    // At the last number, none is left: signing it again would put two
    // tallies of different contents under one number.
    let next = last.checked_add(1).ok_or_else(|| ShipError::BadFile {
        path: path.clone(),
        what: format!("the last tally number ({last}) was signed: no number is left"),
    })?;
    write_0600(&path, format!("{next}\n").as_bytes())?;
    Ok(next)
}

/// Signs tally number `number` of `receipts` now, as `signer`'s machine,
/// and posts it to the vault whose key is `vault_key`. `nd7 enroll` posts
/// one of none, so that every machine the vault enrolled has a tally
/// (ADR-0129). Whether the vault kept it: it keeps a later one (dated
/// ahead) over it.
pub(super) fn post_tally(
    client: &Client,
    signer: &Signer<'_>,
    vault_key: &vault::PublicKey,
    number: u64,
    receipts: Vec<vault::Receipt>,
) -> Result<bool, ShipError> {
    let tally = vault::Tally::sign(signer.key, signer.machine, unix_now(), number, receipts);
    let reply = client.ok_bound(
        Request::post("/v1/tallies", tally.render().as_bytes()).signed(signer),
        vault_key,
    )?;
    Ok(String::from_utf8_lossy(&reply).trim_end() == format!("tally {}", tally.at))
}

/// How long before the recipients document's validity runs out ship starts
/// saying so.
const RECIPIENTS_WARN_SECS: u64 = 7 * 86_400;

/// A warning when the held recipients document has run out, or will within
/// a week: after that, no new chain key is started (a new session is not
/// shipped) until an admin installs a newer one.
pub fn recipients_running_out(doc: &vault::Recipients, now: u64) -> Option<String> {
    if doc.expired(now) {
        Some(format!(
            "the recipients document of version {} was valid until {} (Unix time), and the vault serves no newer one: sessions that need a new chain key are not shipped until an admin installs a newer version",
            doc.version, doc.valid_until
        ))
    } else if doc.valid_until - now < RECIPIENTS_WARN_SECS {
        Some(format!(
            "the recipients document of version {} is valid for {} more hour(s) only: an admin should sign and install a newer version before then",
            doc.version,
            (doc.valid_until - now) / 3600
        ))
    } else {
        None
    }
}

/// [`ship_session`], keeping `vault.alarm` in step: written when the vault
/// broke a receipt, removed once the session ships cleanly again.
fn ship_and_alarm(
    machine: &Machine,
    log: &SessionLog,
    progress: &mut dyn FnMut(&str),
    acked: &mut Shipped,
) -> Result<Shipped, ShipError> {
    let result = ship_acking(machine, log, progress, acked);
    let alarm = log.dir().join(ALARM_FILE);
    match &result {
        Err(e @ ShipError::VaultBroke { .. }) => {
            let text = format!("{e}\nfound at {} (Unix time)\n", unix_now());
            if let Err(w) = write_0600(&alarm, text.as_bytes()) {
                return Err(machine.vault_broke(log.session_id(), format!("{e}; and {w}")));
            }
        }
        Ok(_) => remove_optional(&alarm)?,
        Err(_) => {}
    }
    result
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
    ship_acking(machine, log, progress, &mut Shipped::default())
}

/// [`ship_session`], keeping in `acked` what the vault acknowledged even
/// when the run then fails (a refusal after some batches went in).
fn ship_acking(
    machine: &Machine,
    log: &SessionLog,
    progress: &mut dyn FnMut(&str),
    acked_out: &mut Shipped,
) -> Result<Shipped, ShipError> {
    let session = log.session_id().to_string();
    let events_path = log.events_path();
    let mut notes = Vec::new();
    // Start from what the vault holds, after holding it to its word.
    let kept = read_receipt(&log.dir().join(RECEIPT_FILE))?;
    let head = vault_head(machine, &session)?;
    if let Some(kept) = &kept {
        notes.extend(hold_to_receipt(
            machine,
            log,
            kept,
            head.as_ref(),
            progress,
        )?);
    }
    let file = match File::open(&events_path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Ok(Shipped {
                notes,
                ..Shipped::default()
            });
        }
        Err(e) => return Err(io_err(&events_path, "open")(e)),
    };
    let (mut offset, cursor) = match &head {
        None => (0, Cursor::start(&session)),
        Some(h) => resume_after(log, &file, h, kept.as_ref())?,
    };
    let size = file.metadata().map_err(io_err(&events_path, "stat"))?.len();
    let backlog = size.saturating_sub(offset);
    let pipelined = seal_and_send(machine, log, &file, &mut offset, cursor, backlog, progress);
    let mut done = Shipped {
        notes,
        ..pipelined.acked
    };
    *acked_out = done.clone();
    pipelined.sent?;
    pipelined.produced?;
    ship_transcripts(machine, log, &mut done)?;
    done.closed = close_if_ended(log, &file, offset)?;
    Ok(done)
}

/// Holds the vault to the receipt kept for the session: holding less than
/// it acknowledged is a restore it must explain, and then the receipt moves
/// back (the note returned, said at once: whatever happens to the rest of
/// this run, the user learns the receipt moved); the entry it acknowledged
/// under another digest is the vault broken.
fn hold_to_receipt(
    machine: &Machine,
    log: &SessionLog,
    kept: &Receipt,
    head: Option<&Receipt>,
    progress: &mut dyn FnMut(&str),
) -> Result<Option<String>, ShipError> {
    let session = log.session_id();
    let broke = |detail: String| machine.vault_broke(session, detail);
    let k = &kept.checkpoint;
    let holds = head.map(|h| h.checkpoint.last);
    if holds.is_none_or(|h| h < k.last) {
        let notice = match restore_explaining(machine, kept, head)? {
            Ok(notice) => notice,
            Err(why) => {
                return Err(broke(format!(
                    "it acknowledged entries up to {} (receipt stored at {}), but holds {}, and {why}",
                    k.last,
                    kept.stored,
                    holds.map_or("none of them".into(), |h| format!("only entries up to {h}")),
                )));
            }
        };
        let note = keep_lost(log, kept, &notice, holds)?;
        progress(&format!("{session}: warning: {note}"));
        return Ok(Some(note));
    }
    if let Some(h) = head
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
    Ok(None)
}

/// Where shipping resumes after the vault's head `h`: the offset past the
/// entry it acknowledged last, and the chain from there, once the local
/// entry is shown to be the one shipped. The kept receipt and `shipped`
/// are brought up to the head.
fn resume_after(
    log: &SessionLog,
    file: &File,
    h: &Receipt,
    kept: Option<&Receipt>,
) -> Result<(u64, Cursor), ShipError> {
    let c = &h.checkpoint;
    let lock = lock_log(log, false)?;
    let (offset, hash) = entry_end(log, file, c.last)?;
    drop(lock);
    let shipped = read_shipped(&log.dir().join(SHIPPED_FILE))?;
    if !is_shipped_entry(log, file, offset, c, hash, shipped)? {
        return Err(ShipError::Rewritten {
            session: log.session_id().to_string(),
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
    if kept != Some(h) || shipped != Some(at) {
        record_ack(log, h, &at)?;
    }
    Ok((
        offset,
        Cursor {
            next_seq: c.last + 1,
            prev: hash,
        },
    ))
}

/// Whether the local entry `c.last` (of hash `hash`, ending at `offset`) is
/// the one the vault's checkpoint `c` names: by the chain key's digest while
/// chain.key holds it, else by `shipped`. An entry neither can vouch for
/// is an error.
fn is_shipped_entry(
    log: &SessionLog,
    file: &File,
    offset: u64,
    c: &Checkpoint,
    hash: Hash,
    shipped: Option<Head>,
) -> Result<bool, ShipError> {
    Ok(match read_chain_key(log)? {
        Some((k, _)) if KeyId::of(&k) == c.key => IndexKey::of(&k).digest(&hash) == c.head,
        _ => match shipped {
            Some(s) if s.seq == c.last => s.hash == hash,
            // The vault holds less than it acknowledged (a declared
            // restore) and the chain key that made its head's digest
            // is gone (the session ended): the local entry it names
            // is the one shipped if the local chain still runs from
            // it, unbroken, to the entry acknowledged last.
            Some(s) if s.seq > c.last => chain_reaches(
                log,
                file,
                offset,
                Cursor {
                    next_seq: c.last + 1,
                    prev: hash,
                },
                s,
            )?,
            _ => {
                return Err(ShipError::Rewritten {
                    session: log.session_id().to_string(),
                    detail: format!(
                        "entry {} cannot be checked against the vault's receipt: chain.key no longer holds chain key {}, and `shipped` does not name the entry",
                        c.last, c.key
                    ),
                });
            }
        },
    })
}

/// What sealing and sending the batches did: what the vault acknowledged,
/// and how each side ended.
struct Pipelined {
    acked: Shipped,
    sent: Result<(), ShipError>,
    produced: Result<(), ShipError>,
}

/// Seals the batches from `offset` on and sends them. Sealing batch k+1
/// (read, verify, compress, encrypt, sign) overlaps sending batch k: one
/// thread sends, in order, and keeps each receipt; a refusal stops it, and
/// what was queued behind is dropped, to be sent by the next run.
fn seal_and_send(
    machine: &Machine,
    log: &SessionLog,
    file: &File,
    offset: &mut u64,
    cursor: Cursor,
    backlog: u64,
    progress: &mut dyn FnMut(&str),
) -> Pipelined {
    let (tx, rx) = std::sync::mpsc::sync_channel::<Sealed>(1);
    std::thread::scope(|scope| {
        let sender = scope.spawn(move || send_in_order(machine, log, rx));
        let produced = seal_batches(machine, log, file, offset, cursor, backlog, &tx, progress);
        drop(tx);
        let (acked, sent) = sender
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        Pipelined {
            acked,
            sent,
            produced,
        }
    })
}

/// The sending side of [`seal_and_send`]: each sealed batch in turn, until
/// the vault refuses one or already holds more.
fn send_in_order(
    machine: &Machine,
    log: &SessionLog,
    rx: std::sync::mpsc::Receiver<Sealed>,
) -> (Shipped, Result<(), ShipError>) {
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
}

/// The transcripts' bytes, once the anchors that cover them are in the
/// vault; before chain.key can go.
fn ship_transcripts(
    machine: &Machine,
    log: &SessionLog,
    done: &mut Shipped,
) -> Result<(), ShipError> {
    if let Some(holds) = read_shipped(&log.dir().join(SHIPPED_FILE))? {
        let t = crate::transcript::ship::ship(machine, log, holds.seq)?;
        done.transcript_pieces = t.pieces;
        done.transcript_bytes = t.bytes;
        if !t.gone.is_empty() {
            return Err(ShipError::TranscriptGone {
                session: log.session_id().to_string(),
                detail: t.gone.join("; "),
            });
        }
    }
    Ok(())
}

/// Sends one batch and keeps the vault's receipt for it. `Ok(false)`: the
/// vault already holds more than this run sent (another run got there
/// first); the next run continues from its head.
fn send_batch(machine: &Machine, log: &SessionLog, sealed: &Sealed) -> Result<bool, ShipError> {
    let session = log.session_id();
    let reply = machine.client.ok_bound(
        Request::post("/v1/batches", &sealed.body).signed(&machine.signer()),
        &machine.recipients.vault,
    )?;
    let text = String::from_utf8_lossy(&reply);
    let sent = &sealed.checkpoint;
    let broke = |detail: String| machine.vault_broke(session, detail);
    let receipt = reply_receipt(&text, "a status line and a receipt")
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
    let mut key: Option<BatchKey> = None;
    let mut buf = vec![0u8; vault::MAX_BATCH_ENTRIES_BYTES];
    let mut sealed = 0u64;
    loop {
        let Some(verified) = read_verified(log, file, *offset, cursor, &mut buf)? else {
            return Ok(());
        };
        if key.is_none() {
            key = Some(BatchKey::start(machine, log)?);
        }
        let Some(key) = &key else {
            return Ok(());
        };
        let batch = seal(machine, &session, key, cursor, &verified)?;
        if tx.send(batch).is_err() {
            // The sender stopped (on an error, which it reports).
            return Ok(());
        }
        let len = verified.entries.len() as u64;
        *offset += len;
        sealed += len;
        cursor = verified.end;
        if backlog > PROGRESS_ABOVE {
            progress(&format!(
                "{session}: {} of {} MiB sealed and sent",
                sealed >> 20,
                backlog >> 20
            ));
        }
    }
}

/// Whole entries read from the log and verified as the chain's next.
struct Verified<'b> {
    /// The entries' lines, each with its newline.
    entries: &'b [u8],
    /// The chain after the last of them.
    end: Cursor,
}

/// The next batch's worth of entries after `offset` (at most
/// MAX_BATCH_ENTRIES whole lines), verified to continue the chain from
/// `cursor`; `None` at the end of the log.
fn read_verified<'b>(
    log: &SessionLog,
    file: &File,
    offset: u64,
    cursor: Cursor,
    buf: &'b mut [u8],
) -> Result<Option<Verified<'b>>, ShipError> {
    let events_path = log.events_path();
    let unverified = |entry: u64, fault: String| ShipError::Unverified {
        session: log.session_id().to_string(),
        path: events_path.clone(),
        entry,
        fault,
    };
    // Read a batch's worth under the shared lock: an append in progress
    // is never seen half-written.
    let n = {
        let _lock = lock_log(log, false)?;
        read_full_at(file, buf, offset).map_err(io_err(&events_path, "read"))?
    };
    let Some(nl) = memchr::memrchr(b'\n', &buf[..n]) else {
        if n == 0 {
            return Ok(None);
        }
        // Under the lock no append is in progress, so bytes without a
        // newline are a torn write (or a line longer than any entry):
        // `nd7 verify` reports the same, and this session is not shipped.
        return Err(unverified(
            cursor.next_seq,
            "not a sealed entry: the line has no newline (an append was cut short)".into(),
        ));
    };
    // At most MAX_BATCH_ENTRIES whole lines.
    let nl = memchr::memchr_iter(b'\n', &buf[..=nl])
        .nth(vault::MAX_BATCH_ENTRIES - 1)
        .unwrap_or(nl);
    let entries = &buf[..=nl];
    let mut walker = Walker::new(cursor);
    walker
        .feed(entries)
        .map_err(|b| unverified(cursor.next_seq + b.entry, b.fault.to_string()))?;
    // The walker checked every line, the last one included.
    let last_line = entries[..entries.len() - 1]
        .rsplit(|&b| b == b'\n')
        .next()
        .unwrap_or_default();
    let Ok(last) = crate::chain::read_stated(last_line) else {
        return Ok(None);
    };
    Ok(Some(Verified {
        entries,
        end: Cursor {
            next_seq: last.seq + 1,
            prev: last.hash,
        },
    }))
}

/// The session's chain key, as every batch of this run is sealed under it:
/// the key, its index key and id, and the key wrapped to the recipients.
struct BatchKey {
    key: ChainKey,
    index: IndexKey,
    id: KeyId,
    wrapped: Vec<u8>,
}

impl BatchKey {
    /// The session's chain key (made on its first batch), wrapped to the
    /// recipients the machine holds.
    fn start(machine: &Machine, log: &SessionLog) -> Result<BatchKey, ShipError> {
        let key = chain_key(log, &machine.recipients, unix_now())?;
        let wrapped = vault::wrap_chain_key(&key, &machine.recipients.recipients, &mut os_fill);
        Ok(BatchKey {
            index: IndexKey::of(&key),
            id: KeyId::of(&key),
            key,
            wrapped,
        })
    }
}

/// Seals and signs `verified`, the entries after `cursor`, into one batch.
fn seal(
    machine: &Machine,
    session: &str,
    key: &BatchKey,
    cursor: Cursor,
    verified: &Verified,
) -> Result<Sealed, ShipError> {
    let entries = verified.entries;
    let index = vault::index_lines(entries, &key.index)?;
    let count = index.len() as u64;
    let header = BatchHeader {
        machine: machine.id.clone(),
        session: session.to_string(),
        key: key.id,
        first: cursor.next_seq,
        prev: key.index.digest(&cursor.prev),
        index,
    };
    let (body, checkpoint) = vault::seal_batch(
        &header,
        entries,
        &key.key,
        &key.wrapped,
        random()?,
        &machine.key,
    );
    Ok(Sealed {
        body,
        checkpoint,
        head: Head {
            seq: verified.end.next_seq - 1,
            hash: verified.end.prev,
        },
        entries: count,
        bytes: entries.len() as u64,
    })
}

/// Whether the log, from `offset` (where the entry before `from` ends), is
/// an unbroken chain from `from` to the entry `to` names, with `to`'s hash.
fn chain_reaches(
    log: &SessionLog,
    file: &File,
    offset: u64,
    from: Cursor,
    to: Head,
) -> Result<bool, ShipError> {
    let (end, hash) = entry_end(log, file, to.seq)?;
    if hash != to.hash {
        return Ok(false);
    }
    let path = log.events_path();
    let mut walker = Walker::new(from);
    let mut buf = vec![0u8; vault::MAX_BATCH_ENTRIES_BYTES];
    let mut at = offset;
    while at < end {
        let want = buf.len().min((end - at) as usize);
        let n = read_full_at(file, &mut buf[..want], at).map_err(io_err(&path, "read"))?;
        let Some(nl) = memchr::memrchr(b'\n', &buf[..n]) else {
            return Ok(false);
        };
        if walker.feed(&buf[..=nl]).is_err() {
            return Ok(false);
        }
        at += nl as u64 + 1;
    }
    Ok(true)
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
