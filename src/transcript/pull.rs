//! `nd7 admin pull`'s transcripts: the pieces the vault holds of a session,
//! checked (signed by the machine, for this session, opening under a chain
//! key the admin's identity unwraps), put together file by file in the
//! order of the chain, and held against the anchors in the pulled entries.
//! With `--compare`, the machine's own copy of each file is held against
//! what was shipped.
//!
//! Whose doing a finding is: a piece the machine did not sign, or signed for
//! another session, is the vault's; bytes the machine signed that do not
//! match the machine's own anchor are the machine's; bytes that are missing
//! may be either, and are said so, unless a later piece names a missing one
//! as the one it came after (the vault's), or, with `--compare`, the
//! machine's receipt for its last piece names one the vault no longer has.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::check;
use super::layout;
use super::prefix::Prefix;
use crate::http_client::Trust;
use crate::safe_file::{self, Budget};
use crate::ship::{Client, ShipError};
use crate::vault::{self, AgeIdentity};
use crate::vault_admin::frames::{ChainKeys, Tally};
use crate::vault_admin::{Compared, Fault, Finding, PullError, Pulled};

/// One transcript file (one generation of it) as the vault's pieces give it back.
#[derive(Debug)]
pub struct Restored {
    pub root: String,
    pub path: String,
    pub generation: u64,
    pub bytes: Vec<u8>,
    /// Anchors of this file and generation in the chain, and how many the
    /// restored bytes hold (from the first, up to the first missing piece).
    pub anchors: usize,
    pub held: usize,
}

/// What pulling a session's transcripts found.
#[derive(Debug, Default)]
pub struct Transcripts {
    pub files: Vec<Restored>,
    pub findings: Vec<Finding>,
    pub notes: Vec<String>,
    /// Every piece the vault served that the machine signed for this
    /// session: its anchor, first byte and BLAKE3 (what a receipt names).
    pub served: Vec<(u64, u64, [u8; 32])>,
}

impl Transcripts {
    /// Records a finding against the vault.
    fn vault(&mut self, text: String) {
        self.findings.push(finding(Fault::Vault, text));
    }
}

fn finding(fault: Fault, text: String) -> Finding {
    Finding { fault, text }
}

/// Fetches and checks the transcript pieces of `pulled`'s session.
pub fn pull(
    url: &str,
    trust: &Trust,
    read_token: &str,
    identity: &AgeIdentity,
    pulled: &Pulled,
) -> Result<Transcripts, PullError> {
    let names = format!("machine {}, session {}", pulled.machine, pulled.session);
    let mut out = Transcripts::default();
    let answer = fetch(url, trust, read_token, pulled, &names, &mut out)?;
    let pieces = open_pieces(&answer, identity, pulled, &names, &mut out)?;
    let anchored = read_anchors(pulled)?;
    restore(&anchored, &pieces, &names, &mut out);
    Ok(out)
}

/// The vault's answer to the request for a session's transcript pieces:
/// its frames, and the nonce its signed last frame must name.
struct Answer {
    framed: Vec<u8>,
    /// Whether the answer was read to its end (not cut short).
    whole: bool,
    nonce: [u8; 16],
}

/// The opened pieces by the sequence number of the anchor they belong to,
/// each `(from, to, bytes)`, sorted by where they start.
type Pieces = BTreeMap<u64, Vec<(u64, u64, Vec<u8>)>>;

/// Asks the vault for the session's transcript pieces; an answer cut short
/// is a finding against the vault, and what came is kept.
fn fetch(
    url: &str,
    trust: &Trust,
    read_token: &str,
    pulled: &Pulled,
    names: &str,
    out: &mut Transcripts,
) -> Result<Answer, PullError> {
    let client = Client::new(url, trust)?;
    let path = format!(
        "/v1/transcripts/{}/{}",
        pulled.machine,
        vault::hex(pulled.session.as_bytes())
    );
    let stream = client.get_stream(&path, Some(read_token))?;
    let mut framed = Vec::new();
    let read = std::io::Read::read_to_end(&mut { stream.body }, &mut framed);
    let whole = read.is_ok();
    if let Err(e) = read {
        out.vault(format!(
            "{names}: the vault's transcript pieces are cut short: {e}"
        ));
    }
    Ok(Answer {
        framed,
        whole,
        nonce: stream.nonce,
    })
}

/// Splits the answer into its frames, checks each piece and opens it; what
/// does not hold is a finding, and the pieces that open are returned.
/// Stops at a frame cut short or after the vault's signed last frame.
fn open_pieces(
    answer: &Answer,
    identity: &AgeIdentity,
    pulled: &Pulled,
    names: &str,
    out: &mut Transcripts,
) -> Result<Pieces, PullError> {
    let mut tally = Tally::new();
    let mut ended = false;
    let mut keys = ChainKeys::default();
    let mut pieces = Pieces::new();
    let mut rest = answer.framed.as_slice();
    while !rest.is_empty() {
        if ended {
            out.vault(format!(
                "{names}: the vault's transcript pieces go on after its signed last frame"
            ));
            break;
        }
        let Some(body) = next_frame(&mut rest) else {
            out.vault(format!(
                "{names}: the vault's transcript pieces are cut short"
            ));
            break;
        };
        if vault::PullEnd::is_end(body) {
            let checked = tally.check_end(
                body,
                &pulled.vault_key,
                &answer.nonce,
                (&pulled.machine, &pulled.session),
                vault::PullOf::Transcripts,
            );
            if let Err(why) = checked {
                out.vault(format!(
                    "{names}: the vault's transcript pieces are not its whole answer: {why}"
                ));
                break;
            }
            ended = true;
            continue;
        }
        tally.count(body);
        let Some(piece) = admit(body, pulled, names, out) else {
            continue;
        };
        let h = &piece.header;
        let key = chain_key(&mut keys, &piece, identity)?;
        match vault::open_piece(&piece, key) {
            Ok(bytes) => pieces
                .entry(h.anchor)
                .or_default()
                .push((h.from, h.to, bytes)),
            Err(e) => out.findings.push(finding(
                Fault::Machine,
                format!(
                    "{}: the machine signed a piece that does not open: {e}",
                    h.names()
                ),
            )),
        }
    }
    if answer.whole && rest.is_empty() && !ended {
        out.vault(format!(
                "{names}: the vault's transcript pieces end without its signed last frame: they are incomplete, cut short"
            ));
    }
    for list in pieces.values_mut() {
        list.sort_by_key(|p| p.0);
    }
    Ok(pieces)
}

/// The next frame's body (after its u32 BE length), and `rest` moved past
/// it; `None`, and `rest` as it was, where the frame is cut short.
fn next_frame<'a>(rest: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = rest.get(..4).and_then(|l| <[u8; 4]>::try_from(l).ok())?;
    let len = u32::from_be_bytes(len) as usize;
    let body = rest.get(4..4 + len)?;
    *rest = &rest[4 + len..];
    Some(body)
}

/// The piece in `body`, where the machine signed it for this session; what
/// is forged or another session's is a finding against the vault, and so
/// is a piece whose link to the one before it does not hold (it is kept:
/// its bytes are the machine's). Every piece admitted is `served`.
fn admit(body: &[u8], pulled: &Pulled, names: &str, out: &mut Transcripts) -> Option<vault::Piece> {
    let piece = match vault::parse_piece(body) {
        Ok(p) => p,
        Err(e) => {
            out.vault(format!("{names}: a transcript piece is forged: {e}"));
            return None;
        }
    };
    let h = &piece.header;
    if !piece.signed_by(&pulled.machine_key) {
        out.vault(format!(
            "{}: forged: not signed by the machine's enrolled key",
            h.names()
        ));
        return None;
    }
    if h.machine != pulled.machine || h.session != pulled.session {
        out.vault(format!(
            "{names}: the vault serves {} among this session's",
            h.names()
        ));
        return None;
    }
    // Each piece names the one the machine shipped before it: a piece
    // the vault no longer serves shows as a link that does not hold.
    let before = out.served.last().map(|&(a, f, _)| (a, f));
    if h.after != before {
        out.vault(match h.after {
            Some((a, f)) => format!(
                "{}: the machine shipped it after its piece of entry {a} from byte {f}, which the vault does not serve{}: it dropped it",
                h.names(),
                before.map_or(String::new(), |(a, f)| format!(
                    " (the piece before it is entry {a}'s from byte {f})"
                ))
            ),
            None => format!(
                "{}: the machine shipped it as the session's first piece, but the vault serves others before it",
                h.names()
            ),
        });
    }
    out.served.push((h.anchor, h.from, piece.batch));
    Some(piece)
}

/// The chain key `piece` is sealed under, unwrapped by the admin's
/// identity: one the identity cannot open stops the pull, and one that does
/// not open at all is the machine's fault.
fn chain_key<'k>(
    keys: &'k mut ChainKeys,
    piece: &vault::Piece,
    identity: &AgeIdentity,
) -> Result<&'k vault::ChainKey, PullError> {
    let h = &piece.header;
    keys.get(h.key, &piece.wrapped_key, identity)
        .map_err(|e| match e {
            vault::Error::NoMatchingStanza => PullError::Other(e.into()),
            e => PullError::Finding(finding(
                Fault::Machine,
                format!(
                    "{}: the machine signed a wrapped chain key that does not open: {e}",
                    h.names()
                ),
            )),
        })
}

/// The anchors in the pulled log, which say what each file's bytes must be.
fn read_anchors(pulled: &Pulled) -> Result<check::Anchored, PullError> {
    std::fs::File::open(&pulled.path)
        .and_then(|f| check::collect_read(std::io::BufReader::new(f)))
        .map_err(|source| {
            PullError::Other(ShipError::Io {
                path: pulled.path.clone(),
                action: "read back",
                source,
            })
        })
}

/// Puts each file together in the chain's order, generation by generation.
fn restore(anchored: &check::Anchored, pieces: &Pieces, names: &str, out: &mut Transcripts) {
    for ((root, path), anchors) in &anchored.files {
        let mut generations: BTreeMap<u64, Vec<&check::Anchor>> = BTreeMap::new();
        for a in anchors {
            generations.entry(a.generation).or_default().push(a);
        }
        for (generation, anchors) in generations {
            let mut restored = Restored {
                root: root.clone(),
                path: path.clone(),
                generation,
                bytes: Vec::new(),
                anchors: anchors.len(),
                held: 0,
            };
            restore_generation(&mut restored, &anchors, pieces, names, out);
            out.files.push(restored);
        }
    }
}

/// Appends to `restored` the pieces of each of its anchors in turn, up to
/// the first anchor the pieces do not cover whole (a note) or whose bytes
/// are not what the machine anchored (a finding against the machine).
fn restore_generation(
    restored: &mut Restored,
    anchors: &[&check::Anchor],
    pieces: &Pieces,
    names: &str,
    out: &mut Transcripts,
) {
    let path = &restored.path;
    let mut prefix = Prefix::new();
    for a in anchors {
        let at = restored.bytes.len() as u64;
        let got = pieces.get(&a.seq).map(Vec::as_slice).unwrap_or_default();
        let tiles = a.from == at
            && got.first().is_some_and(|p| p.0 == a.from)
            && got.windows(2).all(|w| w[0].1 == w[1].0)
            && got.last().is_some_and(|p| p.1 == a.bytes);
        if !tiles {
            out.notes.push(format!(
                "{names}: {path}: the vault holds no complete bytes {}..{} for entry {}'s anchor, so this file is restored up to byte {at} only (not shipped yet, or gone from the machine before it was; with --compare, the machine's receipt says whether the vault took it)",
                a.from, a.bytes, a.seq
            ));
            break;
        }
        for (_, _, bytes) in got {
            prefix.update(bytes);
            restored.bytes.extend_from_slice(bytes);
        }
        if prefix.digest().to_hex().as_str() != a.blake3 {
            out.findings.push(finding(
                Fault::Machine,
                format!(
                    "{names}: {path}: the bytes the machine shipped for entry {}'s anchor are not what it anchored",
                    a.seq
                ),
            ));
            break;
        }
        restored.held += 1;
    }
}

/// The name a restored file gets in the pulled session's `transcripts/`.
pub fn restored_name(n: usize, r: &Restored) -> String {
    let base = Path::new(&r.path).file_name().map_or_else(
        || "transcript.jsonl".into(),
        |b| b.to_string_lossy().into_owned(),
    );
    format!("{n}-g{}-{base}", r.generation)
}

/// Holds the vault's pieces to the receipt the machine kept for the last
/// piece it shipped (`transcript/receipt` in the session directory at
/// `local`): the vault must still serve that piece. The links between
/// pieces answer for the ones before it ([`pull`]).
fn compare_receipt(transcripts: &Transcripts, pulled: &Pulled, local: &Path, out: &mut Compared) {
    let names = format!("machine {}, session {}", pulled.machine, pulled.session);
    let Ok(log) = crate::session_log::SessionLog::at_path(local) else {
        return;
    };
    let path = log
        .dir()
        .join(super::anchor::STATE_DIR)
        .join(super::ship::PIECE_RECEIPT);
    let Ok(text) = std::fs::read_to_string(&path) else {
        return;
    };
    let vouched = crate::vault_admin::vouched_vault_keys(pulled, log.dir());
    let checked = vault::PieceReceipt::parse(&text).and_then(|r| {
        let key = vouched
            .iter()
            .find(|k| **k == r.vault)
            .unwrap_or(&vouched[0]);
        r.verify(key, &pulled.machine_key).map(|()| r)
    });
    let r = match checked {
        Ok(r) => r,
        Err(e) => {
            out.findings.push(finding(
                Fault::Machine,
                format!(
                    "{names}: {}: the machine's transcript receipt does not check: {e}",
                    path.display()
                ),
            ));
            return;
        }
    };
    let h = &r.header;
    let held = transcripts
        .served
        .iter()
        .find(|&&(a, f, _)| (a, f) == (h.anchor, h.from));
    match held {
        Some(&(_, _, piece)) if piece == r.piece => {}
        Some(_) => out.findings.push(finding(
            Fault::Vault,
            format!(
                "{}: the vault acknowledged that piece (its receipt of {} is on the machine), but serves another in its place: it replaced what it acknowledged",
                h.names(),
                r.stored
            ),
        )),
        None => out.findings.push(finding(
            Fault::Vault,
            format!(
                "{}: the vault acknowledged that piece (its receipt of {} is on the machine), but no longer serves it: it dropped it",
                h.names(),
                r.stored
            ),
        )),
    }
}

/// Holds the machine's own copy of each restored file (its last generation)
/// against what was shipped: it must extend it byte for byte; and the
/// vault's pieces to the machine's receipt for the last one it shipped.
pub fn compare(transcripts: &Transcripts, pulled: &Pulled, local: &Path, out: &mut Compared) {
    compare_receipt(transcripts, pulled, local, out);
    let names = format!("machine {}, session {}", pulled.machine, pulled.session);
    let mut last: BTreeMap<(&str, &str), &Restored> = BTreeMap::new();
    for r in &transcripts.files {
        let e = last.entry((r.root.as_str(), r.path.as_str())).or_insert(r);
        if r.generation > e.generation {
            *e = r;
        }
    }
    for ((root, path), r) in last {
        if r.bytes.is_empty() {
            continue;
        }
        let root_path = PathBuf::from(root);
        let Some(place) = layout::place_of(&root_path, Path::new(path)) else {
            continue;
        };
        let opened = match safe_file::open_beneath(&root_path, &place.components) {
            Ok(opened) => opened,
            Err(e) => {
                out.findings.push(finding(
                    Fault::Machine,
                    format!("{names}: the machine's copy of the transcript cannot be read: {e}"),
                ));
                continue;
            }
        };
        let mut local = Vec::with_capacity(r.bytes.len());
        let mut unlimited = Budget {
            bytes: u64::MAX,
            deadline: None,
        };
        if let Err(e) =
            safe_file::read_range(&opened.file, 0, r.bytes.len() as u64, &mut unlimited, |b| {
                local.extend_from_slice(b)
            })
        {
            out.findings.push(finding(
                Fault::Machine,
                format!("{names}: {path}: the machine's copy cannot be read: {e}"),
            ));
            continue;
        }
        match local.iter().zip(&r.bytes).position(|(a, b)| a != b) {
            Some(at) => {
                let line = r.bytes[..at].iter().filter(|&&b| b == b'\n').count() + 1;
                out.findings.push(finding(
                    Fault::Machine,
                    format!(
                        "{names}: {path}: the machine's copy of the transcript differs from what was shipped, from byte {at} (line {line})"
                    ),
                ));
            }
            None if local.len() < r.bytes.len() => out.findings.push(finding(
                Fault::Machine,
                format!(
                    "{names}: {path}: the machine's copy of the transcript is {} bytes, shorter than the {} shipped",
                    local.len(),
                    r.bytes.len()
                ),
            )),
            None => out.notes.push(format!(
                "{path}: the machine's copy extends the {} bytes shipped ({} on disk)",
                r.bytes.len(),
                opened.len
            )),
        }
    }
}
