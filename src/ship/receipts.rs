//! What a machine keeps of the vault's word, per session: the vault's
//! receipt for the last batch it holds (`receipt`), the entry it names with
//! its real hash (`shipped`), the chain key (`chain.key`), receipts a
//! declared restore lost (`receipts.lost`), and the checks that hold the
//! vault's head and the local log to them.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use super::*;
use crate::chain::{Hash, Head};
use crate::session_log::SessionLog;
use crate::vault::{self, ChainKey, Receipt, RestoreNotice, Secret32};

/// `shipped`, a cache of the receipt's entry with its real hash: written
/// without a sync, so after a power loss it may be empty, which reads as
/// absent (the receipt and the vault's head say the same).
pub(super) fn read_shipped(path: &Path) -> Result<Option<Head>, ShipError> {
    Ok(read_optional(path)?.and_then(|text| Head::parse(text.as_bytes())))
}

pub(super) fn read_receipt(path: &Path) -> Result<Option<Receipt>, ShipError> {
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
pub(super) fn lock_log(log: &SessionLog, exclusive: bool) -> Result<File, ShipError> {
    let path = log.lock_path();
    let lock = crate::session_log::open_lock(&path).map_err(io_err(&path, "open"))?;
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
pub(super) fn record_ack(
    log: &SessionLog,
    receipt: &Receipt,
    head: &Head,
) -> Result<(), ShipError> {
    let _lock = lock_log(log, true)?;
    let receipt_path = log.dir().join(RECEIPT_FILE);
    if read_receipt(&receipt_path)?.is_some_and(|r| r.checkpoint.last > head.seq) {
        return Ok(());
    }
    write_0600(&receipt_path, receipt.render().as_bytes())?;
    let shipped = log.dir().join(SHIPPED_FILE);
    Ok(files::replace(
        &shipped,
        head.render().as_bytes(),
        0o600,
        Durability::Atomic,
    )?)
}

/// `chain.key`: the key, and the recipients version it was made under
/// (a `# recipients version N` line; 0 when there is none).
pub(super) fn read_chain_key(log: &SessionLog) -> Result<Option<(ChainKey, u64)>, ShipError> {
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

/// The session's chain key for `recipients`: the one in `chain.key` if it
/// was made under that version or a later one, otherwise a new one (0600),
/// so that recipients removed since never get it. No new one is made under
/// a document whose validity ran out by `now`: a vault that withholds the
/// newer document (a freeze) cannot keep a removed admin on new keys.
pub(crate) fn chain_key(
    log: &SessionLog,
    recipients: &vault::Recipients,
    now: u64,
) -> Result<ChainKey, ShipError> {
    let version = recipients.version;
    if let Some((key, made_under)) = read_chain_key(log)?
        && made_under >= version
    {
        return Ok(key);
    }
    if recipients.expired(now) {
        return Err(ShipError::RecipientsExpired {
            version,
            valid_until: recipients.valid_until,
        });
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
pub(super) fn entry_end(log: &SessionLog, file: &File, seq: u64) -> Result<(u64, Hash), ShipError> {
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

/// The receipt in the vault's reply to a shipment: what follows its status
/// line. `expected` says what the reply should have been, for the error.
pub fn reply_receipt<'a>(text: &'a str, expected: &'static str) -> Result<&'a str, vault::Error> {
    text.split_once('\n')
        .map(|(_, rest)| rest)
        .ok_or(vault::Error::Malformed {
            what: "the vault's reply",
            expected,
        })
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
pub(super) fn vault_head(machine: &Machine, session: &str) -> Result<Option<Receipt>, ShipError> {
    let path = format!("/v1/head/{}", vault::hex(session.as_bytes()));
    let reply = machine.client.ok_bound(
        Request::get(&path).signed(&machine.signer()),
        &machine.recipients.vault,
    )?;
    let text = String::from_utf8_lossy(&reply);
    if text.trim_end() == "none" {
        return Ok(None);
    }
    let broke = |detail: String| machine.vault_broke(session, detail);
    let receipt = Receipt::parse(&text)
        .map_err(|e| broke(format!("its head for this session is not a receipt: {e}")))?;
    machine
        .check_receipt(&receipt, session)
        .map_err(|e| broke(format!("its head for this session does not check: {e}")))?;
    Ok(Some(receipt))
}

/// A restore notice of the vault's, signed by its pinned key, that explains
/// losing what `kept` acknowledged, and that this machine can believe: dated
/// in the past, over a window of at most 30 days ([`RestoreNotice::credible`]),
/// and not given the lie by `head`, the batch the vault still holds (stored
/// between the backup and the restore, it would have been lost too). Else
/// why none does.
pub(super) fn restore_explaining(
    machine: &Machine,
    kept: &Receipt,
    head: Option<&Receipt>,
) -> Result<Result<RestoreNotice, String>, ShipError> {
    let text = machine.client.ok_bound(
        Request::get("/v1/restores").signed(&machine.signer()),
        &machine.recipients.vault,
    )?;
    let notices = RestoreNotice::parse_all(&String::from_utf8_lossy(&text)).unwrap_or_default();
    let now = unix_now();
    let mut refused = Vec::new();
    for n in notices {
        if n.verify(&machine.recipients.vault).is_err() || !n.explains(kept) {
            continue;
        }
        let why = match (n.credible(now), head) {
            (Err(why), _) => why,
            (Ok(()), Some(h)) if n.contradicted_by(h.stored) => format!(
                "the vault still holds entries up to {} stored at {}, between that backup and the restore",
                h.checkpoint.last, h.stored
            ),
            (Ok(()), _) => return Ok(Ok(n)),
        };
        refused.push(format!(
            "its restore notice of a backup at {} restored at {} is refused: {why}",
            n.backup, n.restored
        ));
    }
    Ok(Err(if refused.is_empty() {
        "no restore notice of the vault explains it".into()
    } else {
        refused.join("; ")
    }))
}

/// The records of `receipts.lost`, each its `#` line (what was lost), the
/// receipt and the notice (either `None` when it does not parse).
pub fn lost_receipts(text: &str) -> Vec<(String, Option<Receipt>, Option<RestoreNotice>)> {
    let mut out = Vec::new();
    for block in text.split("\n# ").map(|b| b.trim_start_matches("# ")) {
        let Some((what, rest)) = block.split_once('\n') else {
            continue;
        };
        let receipt_end = rest.find("nd7-restore v2").unwrap_or(rest.len());
        let receipt = Receipt::parse(&rest[..receipt_end]).ok();
        let notice = RestoreNotice::parse_all(&rest[receipt_end..])
            .ok()
            .and_then(|n| n.into_iter().next());
        out.push((what.to_string(), receipt, notice));
    }
    out
}

/// What `receipts.lost` holds that the vault has not acknowledged again
/// since (the receipt kept now ends before it): each such record's `#`
/// line. What `nd7 doctor` fails on: a declared restore excuses the loss
/// for shipping to go on, not for the entries to stay lost.
pub fn lost_not_acknowledged_again(log: &SessionLog) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(log.dir().join(LOST_FILE)) else {
        return Vec::new();
    };
    let now = read_receipt(&log.dir().join(RECEIPT_FILE))
        .ok()
        .flatten()
        .map(|r| r.checkpoint.last);
    lost_receipts(&text)
        .into_iter()
        .filter(|(_, r, _)| {
            r.as_ref()
                .is_some_and(|r| now.is_none_or(|n| n < r.checkpoint.last))
        })
        .map(|(what, _, _)| what)
        .collect()
}

/// Moves a receipt a declared restore lost to `receipts.lost`, with the
/// notice, and takes `receipt` and `shipped` back to what the vault holds.
pub(super) fn keep_lost(
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
