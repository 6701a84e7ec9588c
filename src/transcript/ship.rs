//! `nd7 ship`'s transcripts: after a session's entries, the bytes its
//! anchors cover, read from the files on disk, checked against the anchors,
//! and sent as transcript pieces ([`crate::vault::seal_piece`]) under the
//! session's chain key.
//!
//! Only anchors whose entries the vault already holds are shipped, in the
//! order of the chain, each byte read once per ship (a BLAKE3 prefix state
//! per file and generation is kept in `transcript/shipped.json` beside the
//! anchoring state). An anchor's bytes are checked before any of them is
//! sent: a file that no longer holds what an anchor covers (rewritten,
//! truncated, replaced, gone) cannot give them back, and nd7 says so once,
//! naming the anchor, and goes on with the next ones; `nd7 admin pull` shows
//! the missing bytes.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::anchor::STATE_DIR;
use super::check::{self, Anchor};
use super::layout;
use super::prefix::{Prefix, Saved};
use crate::safe_file::{self, Budget};
use crate::session_log::SessionLog;
use crate::ship::{self, Machine, Request, ShipError};
use crate::vault::{self, KeyId, PieceHeader};

/// What ship keeps about the transcripts it shipped: `transcript/shipped.json`.
pub const SHIPPED_STATE: &str = "shipped.json";
/// The vault's receipt for the last transcript piece shipped of the session:
/// `transcript/receipt`.
pub const PIECE_RECEIPT: &str = "receipt";

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Shipped {
    /// The last anchor whose bytes were dealt with (shipped, or found gone).
    #[serde(default)]
    anchor: Option<u64>,
    #[serde(default)]
    files: Vec<ShippedFile>,
    /// The last piece shipped (its anchor and first byte): what the next
    /// piece names as the one it comes after.
    #[serde(default)]
    after: Option<(u64, u64)>,
}

/// How far one file's generation was read and shipped, and its BLAKE3 state there.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct ShippedFile {
    root: String,
    path: String,
    generation: u64,
    prefix: Saved,
}

/// What shipping a session's transcripts did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub pieces: u64,
    pub bytes: u64,
    /// Anchors whose bytes the files no longer hold: never shipped, said once.
    pub gone: Vec<String>,
}

/// One anchor in the chain's order, with its file.
struct InOrder {
    root: String,
    path: String,
    anchor: Anchor,
}

/// Ships the bytes of every anchor up to entry `holds` (the last entry the
/// vault holds) not shipped yet.
pub fn ship(machine: &Machine, log: &SessionLog, holds: u64) -> Result<Report, ShipError> {
    let mut report = Report::default();
    let anchored = check::collect(log)?;
    let mut order: Vec<InOrder> = anchored
        .files
        .into_iter()
        .flat_map(|((root, path), anchors)| {
            anchors.into_iter().map(move |anchor| InOrder {
                root: root.clone(),
                path: path.clone(),
                anchor,
            })
        })
        .collect();
    order.sort_by_key(|a| a.anchor.seq);
    let dir = log.dir().join(STATE_DIR);
    let state_path = dir.join(SHIPPED_STATE);
    let mut state: Shipped = match std::fs::read(&state_path) {
        Ok(text) => serde_json::from_slice(&text).unwrap_or_default(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Shipped::default(),
        Err(e) => {
            return Err(ShipError::Io {
                path: state_path,
                action: "read",
                source: e,
            });
        }
    };
    let due: Vec<&InOrder> = order
        .iter()
        .filter(|a| a.anchor.seq <= holds && state.anchor.is_none_or(|s| a.anchor.seq > s))
        .collect();
    if due.is_empty() {
        return Ok(report);
    }
    let key = ship::chain_key(log, &machine.recipients, ship::unix_now())?;
    let wrapped = vault::wrap_chain_key(&key, &machine.recipients.recipients, &mut ship::os_fill);
    for a in due {
        let at = state.files.iter().position(|f| {
            f.root == a.root && f.path == a.path && f.generation == a.anchor.generation
        });
        let mut prefix = at
            .and_then(|i| Prefix::restore(&state.files[i].prefix).ok())
            .unwrap_or_default();
        match bytes_of(a, &mut prefix) {
            Ok(checked) => {
                let (pieces, bytes) =
                    send(machine, log, a, &checked, &key, &wrapped, &mut state.after)?;
                report.pieces += pieces;
                report.bytes += bytes;
            }
            Err(why) => {
                report.gone.push(format!(
                    "entry {}: bytes {}..{} of {}: {why}; they were not shipped",
                    a.anchor.seq, a.anchor.from, a.anchor.bytes, a.path
                ));
                prefix = Prefix::new();
            }
        }
        let saved = ShippedFile {
            root: a.root.clone(),
            path: a.path.clone(),
            generation: a.anchor.generation,
            prefix: prefix.save(),
        };
        match at {
            Some(i) => state.files[i] = saved,
            None => state.files.push(saved),
        }
        state.anchor = Some(a.anchor.seq);
        let text = serde_json::to_vec(&state).unwrap_or_default();
        super::anchor::write_state_file(&dir, SHIPPED_STATE, &text).map_err(|e| {
            ShipError::BadFile {
                path: state_path.clone(),
                what: e.to_string(),
            }
        })?;
    }
    Ok(report)
}

/// Anchored ranges up to this size are read once, into memory, checked and
/// sent from there; longer ones (only with raised bounds) are read twice.
const IN_MEMORY: u64 = 64 << 20;

/// The anchor's bytes, once checked against it.
enum Checked {
    /// In memory: what was checked is what is sent.
    Held(Vec<u8>),
    /// Too long to hold: read again from the file to send.
    Reread(std::fs::File),
}

/// Opens the anchor's file and checks that it holds what the anchor covers:
/// brings `prefix` (this file's, shipped up to the previous anchor) to the
/// anchor's end and compares. On success `prefix` is at the anchor's end.
fn bytes_of(a: &InOrder, prefix: &mut Prefix) -> Result<Checked, String> {
    let root = PathBuf::from(&a.root);
    let place = layout::place_of(&root, Path::new(&a.path))
        .ok_or("it is not where Claude Code keeps transcripts or Codex its rollouts")?;
    let opened = safe_file::open_beneath(&root, &place.components).map_err(|e| e.to_string())?;
    let mut unlimited = Budget {
        bytes: u64::MAX,
        deadline: None,
    };
    if prefix.len() != a.anchor.from {
        // The state is behind, lost, or from another run: start over.
        *prefix = Prefix::new();
        safe_file::read_range(&opened.file, 0, a.anchor.from, &mut unlimited, |b| {
            prefix.update(b)
        })
        .map_err(|e| format!("cannot read it: {e}"))?;
    }
    let range = a.anchor.bytes.saturating_sub(a.anchor.from);
    let mut held = Vec::new();
    let mut check = prefix.clone();
    safe_file::read_range(
        &opened.file,
        a.anchor.from,
        a.anchor.bytes,
        &mut unlimited,
        |b| {
            check.update(b);
            if range <= IN_MEMORY {
                held.extend_from_slice(b);
            }
        },
    )
    .map_err(|e| format!("cannot read it: {e}"))?;
    if check.len() != a.anchor.bytes {
        return Err(format!(
            "the file is {} bytes now, shorter than anchored",
            check.len()
        ));
    }
    if check.digest().to_hex().as_str() != a.anchor.blake3 {
        return Err("the file no longer holds what was anchored".into());
    }
    *prefix = check;
    Ok(if range <= IN_MEMORY {
        Checked::Held(held)
    } else {
        Checked::Reread(opened.file)
    })
}

/// The vault's receipt in `reply` for the piece `sent`, checked: signed by
/// the pinned vault key, over a piece this machine signed, of this session,
/// anchor and bytes. Anything else is the vault breaking its word.
fn piece_receipt(
    machine: &Machine,
    log: &SessionLog,
    sent: &PieceHeader,
    reply: &[u8],
) -> Result<vault::PieceReceipt, ShipError> {
    let broke = |detail: String| machine.vault_broke(log.session_id(), detail);
    let text = String::from_utf8_lossy(reply);
    let receipt = ship::reply_receipt(&text, "a status line and a piece receipt")
        .and_then(vault::PieceReceipt::parse)
        .map_err(|e| {
            broke(format!(
                "its reply to {} is not a receipt: {e}",
                sent.names()
            ))
        })?;
    receipt
        .verify(&machine.recipients.vault, &machine.key.public())
        .map_err(|e| {
            broke(format!(
                "its receipt for {} does not check: {e}",
                sent.names()
            ))
        })?;
    let got = &receipt.header;
    if (&got.machine, &got.session, got.anchor, got.from, got.to)
        != (
            &sent.machine,
            &sent.session,
            sent.anchor,
            sent.from,
            sent.to,
        )
    {
        return Err(broke(format!(
            "it acknowledged {} with a receipt for {}",
            sent.names(),
            got.names()
        )));
    }
    Ok(receipt)
}

/// Sends the anchor's bytes in pieces of at most 8 MiB, each naming the one
/// before (`after`, moved on as each is acknowledged), and keeps the vault's
/// receipt for each in `transcript/receipt` once it checks. Returns the
/// pieces and bytes sent.
fn send(
    machine: &Machine,
    log: &SessionLog,
    a: &InOrder,
    checked: &Checked,
    key: &vault::ChainKey,
    wrapped: &[u8],
    after: &mut Option<(u64, u64)>,
) -> Result<(u64, u64), ShipError> {
    let (mut pieces, mut bytes) = (0, 0);
    let mut from = a.anchor.from;
    while from < a.anchor.bytes {
        let to = (from + vault::MAX_PIECE_BYTES as u64).min(a.anchor.bytes);
        let buf = match checked {
            Checked::Held(all) => {
                all[(from - a.anchor.from) as usize..(to - a.anchor.from) as usize].to_vec()
            }
            Checked::Reread(file) => {
                let mut buf = Vec::with_capacity((to - from) as usize);
                let mut unlimited = Budget {
                    bytes: u64::MAX,
                    deadline: None,
                };
                safe_file::read_range(file, from, to, &mut unlimited, |b| buf.extend_from_slice(b))
                    .map_err(|e| ShipError::Io {
                        path: PathBuf::from(&a.path),
                        action: "read",
                        source: e,
                    })?;
                buf
            }
        };
        let header = PieceHeader {
            machine: machine.id.clone(),
            session: log.session_id().to_string(),
            key: KeyId::of(key),
            anchor: a.anchor.seq,
            from,
            to,
            after: *after,
        };
        let body = vault::seal_piece(&header, &buf, key, wrapped, ship::random()?, &machine.key);
        let reply = machine.client.ok_bound(
            Request::post("/v1/transcripts", &body).signed(&machine.signer()),
            &machine.recipients.vault,
        )?;
        let receipt = piece_receipt(machine, log, &header, &reply)?;
        let dir = log.dir().join(STATE_DIR);
        super::anchor::write_state_file(&dir, PIECE_RECEIPT, receipt.render().as_bytes()).map_err(
            |e| ShipError::BadFile {
                path: dir.join(PIECE_RECEIPT),
                what: e.to_string(),
            },
        )?;
        *after = Some((header.anchor, header.from));
        pieces += 1;
        bytes += to - from;
        from = to;
    }
    Ok((pieces, bytes))
}
