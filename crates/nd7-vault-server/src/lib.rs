//! `nd7-vault`: the server machines ship to. Three parts, each replaceable:
//!
//! - [`routes`]: what a request means and what the reply is: routes,
//!   authentication, limits, the link check ([`decide`], pure), receipts.
//!   It sees a [`routes::Request`] (method, path, headers, body) and a
//!   [`Store`], and knows nothing of HTTP's transport.
//! - [`http`]: the transport (hyper on tokio, TLS by rustls): timeouts,
//!   bounded connections, bodies and in-flight requests, authentication
//!   before a body is read, graceful shutdown, one log line per request.
//! - [`Store`]: storage, behind a narrow trait: [`sqlite::SqliteStore`] (one
//!   file, one server) and [`postgres::PgStore`] (one database, any number
//!   of servers). [`link_and_store`] is the one step that must be atomic,
//!   and each backend runs it in one transaction with the chain locked.
//!
//! It holds no key that opens anything: it checks who sent a batch, that the
//! machine signed it, and that it links onto the chain it already has, stores
//! ciphertext plus the clear index of keyed digests, and countersigns what it
//! stored with its own key. The format is [`nd7_format::vault`]'s.
//!
//! Routes (docs/vault.md has the statuses):
//!
//! ```text
//! GET  /v1/recipients                    the signed recipients document    anyone
//! GET  /v1/restores                      the vault's signed restore notices anyone
//! POST /v1/enroll                        register a key with a token       signed by that key
//! GET  /v1/head/<session hex>            the receipt of the last batch     machine
//! POST /v1/batches                       one batch; replies with a receipt machine
//! GET  /v1/sessions                      every chain held                  reader token
//! GET  /v1/machines                      every enrolment record            reader token
//! GET  /v1/machines/<id>                 a machine's enrolment record      reader token
//! GET  /v1/batches/<machine>/<session hex>  a chain's batches, framed, streamed  reader token
//! GET  /v1/forks                         refused forking batches           reader token
//! POST /v1/transcripts                   one transcript piece              machine
//! GET  /v1/transcripts/<machine>/<session hex>  a chain's pieces, framed  reader token
//! POST /v1/tallies                       the machine's signed tally        machine
//! GET  /v1/tallies                       each machine's latest tally       reader token
//! ```

#![forbid(unsafe_code)]

pub mod http;
pub mod postgres;
pub mod routes;
mod sql;
pub mod sqlite;

use nd7_format::vault::{Batch, BatchHeader, Checkpoint, Digest, Enrolment, KeyId, PieceHeader};

/// A storage failure: what the server was doing, and the backend's words.
#[derive(Debug, thiserror::Error)]
#[error("vault storage: cannot {action}: {detail}")]
pub struct StoreError {
    pub action: &'static str,
    pub detail: String,
}

impl StoreError {
    pub fn new(action: &'static str, e: impl std::fmt::Display) -> StoreError {
        StoreError {
            action,
            detail: e.to_string(),
        }
    }
}

/// A stored batch as a receipt needs it: the checkpoint the machine signed,
/// its signature, and when the vault stored it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredBatch {
    pub checkpoint: Checkpoint,
    pub signature: [u8; 64],
    pub stored: u64,
}

/// A refused forking batch: machine, session, its entries and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForkRow {
    pub machine: String,
    pub session: String,
    pub first: u64,
    pub last: u64,
    pub reason: String,
    pub seen: u64,
}

/// An enrolled machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineRow {
    pub id: String,
    pub enrolment: Enrolment,
    pub enrolled: u64,
    /// When an admin revoked it (`nd7-vault revoke machine`).
    pub revoked: Option<u64>,
}

/// A read token as the vault keeps it: never the token, only its BLAKE3,
/// and an id (the hash's first 16 hex digits) to name it by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenRow {
    pub id: String,
    pub created: u64,
    pub expires: u64,
    pub revoked: Option<u64>,
}

/// How a presented read token stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenCheck {
    Valid,
    Unknown,
    Expired(u64),
    Revoked(u64),
}

/// What enrolling a machine did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Enrolled {
    /// A new machine.
    New,
    /// This key was already enrolled with this very token: the machine is
    /// asking again (its first reply was lost), so it is told yes again.
    Again,
    /// The token's key enrolled another machine key already.
    TokenUsed,
    /// This key is enrolled already, with another token.
    KeyEnrolled,
}

/// Whether a request's nonce is fresh.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NonceUse {
    First,
    Replayed,
    /// The machine made this many requests in the window already: the cap.
    TooMany(u64),
}

/// What one machine may store per day (UTC), counted in entries and in
/// bytes of stored batches, recorded forks and transcript pieces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quota {
    pub entries_per_day: u64,
    pub bytes_per_day: u64,
}

impl Default for Quota {
    fn default() -> Quota {
        Quota {
            entries_per_day: 1_000_000,
            bytes_per_day: 1 << 30,
        }
    }
}

/// What a machine stored on one day.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub entries: u64,
    pub bytes: u64,
}

impl Usage {
    /// Whether `more` still fits under `quota`.
    pub fn fits(&self, more: Usage, quota: &Quota) -> bool {
        self.entries.saturating_add(more.entries) <= quota.entries_per_day
            && self.bytes.saturating_add(more.bytes) <= quota.bytes_per_day
    }
}

/// The UTC day of a Unix time, as quotas count them.
pub fn day_of(unix: u64) -> u64 {
    unix / 86_400
}

/// What storing a batch came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stored {
    /// Appended; the receipt's contents.
    Appended(StoredBatch),
    /// Every entry of it was stored already: the stored batch ending where
    /// it ends (or the head), to acknowledge it with.
    AlreadyStored(Option<StoredBatch>),
    /// It contradicts a stored entry; `recorded` unless the machine's quota
    /// had no room for the record.
    Fork { reason: String, recorded: bool },
    /// It does not reach the stored chain, or repeats part of it and runs on.
    Unlinked(String),
    /// Storing it would take the machine over its quota for the day.
    OverQuota(Usage),
}

/// What the server needs from storage, and nothing more. Each server
/// thread holds its own; several servers may share one database
/// ([`postgres::PgStore`]), so anything that must not race is one call here.
pub trait Store: Send {
    /// Keeps a read token's hash; returns its id.
    fn add_token(&mut self, token_hash: &str, now: u64, expires: u64)
    -> Result<String, StoreError>;
    fn check_token(&mut self, token_hash: &str, now: u64) -> Result<TokenCheck, StoreError>;
    fn tokens(&mut self) -> Result<Vec<TokenRow>, StoreError>;
    /// Revokes the read token with this id; `false` if there is none.
    fn revoke_token(&mut self, id: &str, now: u64) -> Result<bool, StoreError>;
    /// Keeps a machine and its enrolment record, unless its key or its
    /// token's key is enrolled already.
    fn add_machine(
        &mut self,
        id: &str,
        enrolment: &Enrolment,
        now: u64,
    ) -> Result<Enrolled, StoreError>;
    fn machine(&mut self, id: &str) -> Result<Option<MachineRow>, StoreError>;
    fn machines(&mut self) -> Result<Vec<MachineRow>, StoreError>;
    /// Revokes a machine; `false` if no machine has this id.
    fn revoke_machine(&mut self, id: &str, now: u64) -> Result<bool, StoreError>;
    /// Notes a request nonce of `owner`'s. Nonces older than
    /// `forget_before` are dropped (their requests are stale anyway); an
    /// owner holding `cap` nonces already is refused, which bounds the table.
    fn note_nonce(
        &mut self,
        owner: &str,
        nonce: &str,
        time: u64,
        forget_before: u64,
        cap: u64,
    ) -> Result<NonceUse, StoreError>;
    /// Whether `owner` used this nonce already (a read only: what admission
    /// asks before a body is read; [`Store::note_nonce`] spends it once the
    /// request is whole).
    fn nonce_seen(&mut self, owner: &str, nonce: &str) -> Result<bool, StoreError>;
    fn recipients(&mut self) -> Result<Option<String>, StoreError>;
    fn set_recipients(&mut self, doc: &str, now: u64) -> Result<(), StoreError>;
    /// The last batch stored of a chain.
    fn head(&mut self, machine: &str, session: &str) -> Result<Option<StoredBatch>, StoreError>;
    /// What a machine stored on `day`.
    fn usage(&mut self, machine: &str, day: u64) -> Result<Usage, StoreError>;
    /// Decides how the batch links ([`link_and_store`]) and stores it, or
    /// records it as a fork, in one transaction during which no other
    /// server stores into the same chain.
    fn store_batch(
        &mut self,
        batch: &Batch,
        body: &[u8],
        now: u64,
        quota: &Quota,
    ) -> Result<Stored, StoreError>;
    /// The stored batch of a chain that starts first after `after` (the
    /// chain's first when `None`): its first seq and its bytes as sent.
    /// A pull reads a chain one batch at a time, so neither side holds more.
    fn batch_after(
        &mut self,
        machine: &str,
        session: &str,
        after: Option<u64>,
    ) -> Result<Option<(u64, Vec<u8>)>, StoreError>;
    /// Keeps a transcript piece as sent ([`store_piece`]), in one
    /// transaction during which no other server stores into the chain.
    fn store_piece(
        &mut self,
        header: &PieceHeader,
        body: &[u8],
        now: u64,
        quota: &Quota,
    ) -> Result<PieceStored, StoreError>;
    /// The stored transcript piece of a chain that comes first after
    /// `after` (anchor seq, first byte), in that order (the chain's first
    /// when `None`): where it is and its bytes as sent. A pull reads the
    /// pieces one at a time, as it reads batches.
    fn piece_after(
        &mut self,
        machine: &str,
        session: &str,
        after: Option<(u64, u64)>,
    ) -> Result<Option<Placed>, StoreError>;
    /// (machine, session, last seq) of every chain held.
    fn sessions(&mut self) -> Result<Vec<(String, String, u64)>, StoreError>;
    /// Every refused fork, oldest first.
    fn forks(&mut self) -> Result<Vec<ForkRow>, StoreError>;
    /// Keeps a signed restore notice.
    fn add_restore(&mut self, notice: &str, now: u64) -> Result<(), StoreError>;
    /// Every restore notice, oldest first.
    fn restores(&mut self) -> Result<Vec<String>, StoreError>;
    /// Keeps `machine`'s tally signed at `at`, unless one signed later is
    /// kept already; whether it was kept.
    fn set_tally(&mut self, machine: &str, at: u64, tally: &str) -> Result<bool, StoreError>;
    /// Each machine's latest tally, by machine.
    fn tallies(&mut self) -> Result<Vec<String>, StoreError>;
    /// Whether the connection still works; a server thread opens a new one
    /// when it does not (a database restarted under it).
    fn healthy(&mut self) -> bool {
        true
    }
}

/// One chain inside a transaction that holds it: what [`link_and_store`]
/// reads and writes. Backends implement it over their transaction.
pub trait ChainTx {
    /// The last batch stored of the chain.
    fn head(&mut self) -> Result<Option<StoredBatch>, StoreError>;
    /// The digest of a stored entry, and the chain key it is under.
    fn digest_at(&mut self, seq: u64) -> Result<Option<(Digest, KeyId)>, StoreError>;
    /// The stored batch whose last entry is `last`.
    fn batch_ending_at(&mut self, last: u64) -> Result<Option<StoredBatch>, StoreError>;
    /// Adds `more` to the machine's usage of `day` if it fits `quota`;
    /// otherwise changes nothing and returns the usage so far.
    fn charge(&mut self, day: u64, more: Usage, quota: &Quota)
    -> Result<Option<Usage>, StoreError>;
    /// Stores the batch as sent, its checkpoint and every index entry.
    fn insert(&mut self, batch: &Batch, body: &[u8], now: u64) -> Result<(), StoreError>;
    /// The chain's transcript piece of `anchor` from `from`, if it holds
    /// one: when it was stored, and its bytes as sent.
    fn piece_at(&mut self, anchor: u64, from: u64) -> Result<Option<(u64, Vec<u8>)>, StoreError>;
    /// Stores a transcript piece as sent.
    fn insert_piece(
        &mut self,
        header: &PieceHeader,
        body: &[u8],
        now: u64,
    ) -> Result<(), StoreError>;
    /// Keeps a refused fork: its header, the reason, the BLAKE3 of its body.
    fn record_fork(
        &mut self,
        header: &BatchHeader,
        reason: &str,
        body: &[u8],
        now: u64,
    ) -> Result<(), StoreError>;
}

/// Decides how `batch` stands against the chain `tx` holds, and acts on it:
/// appends it (within the machine's quota), acknowledges it, or records it
/// as a fork. Runs inside the backend's transaction, with the chain locked.
pub fn link_and_store(
    tx: &mut dyn ChainTx,
    batch: &Batch,
    body: &[u8],
    now: u64,
    quota: &Quota,
) -> Result<Stored, StoreError> {
    let header = &batch.header;
    let head = tx.head()?;
    let link = decide(
        header,
        head.as_ref().map(|h| h.checkpoint.last),
        &mut |seq| tx.digest_at(seq),
    )?;
    let day = day_of(now);
    Ok(match link {
        Link::Append => {
            let more = Usage {
                entries: header.index.len() as u64,
                bytes: stored_bytes(batch, body, head.is_none()),
            };
            if let Some(used) = tx.charge(day, more, quota)? {
                return Ok(Stored::OverQuota(used));
            }
            tx.insert(batch, body, now)?;
            Stored::Appended(StoredBatch {
                checkpoint: batch.checkpoint.clone(),
                signature: batch.signature,
                stored: now,
            })
        }
        Link::AlreadyStored => {
            let stored = tx.batch_ending_at(header.last().seq)?.or(head);
            Stored::AlreadyStored(stored)
        }
        Link::Fork(reason) => {
            let more = Usage {
                entries: 0,
                bytes: batch.header_bytes.len() as u64,
            };
            let recorded = tx.charge(day, more, quota)?.is_none();
            if recorded {
                tx.record_fork(header, &reason, body, now)?;
            }
            Stored::Fork { reason, recorded }
        }
        Link::Unlinked(why) => Stored::Unlinked(why),
    })
}

/// What storing a batch adds to the database, as the bytes quota charges
/// it: its row (the body as sent, its checkpoint and signature) in whole
/// pages, a row of a small batch taking a page of its own; a row of the
/// index per entry; and for a chain's first batch, the chain's row and its
/// unique index, each holding machine and session. One-entry batches of a
/// 255-byte session id store several times their request's bytes, which
/// the quota used to charge.
pub fn stored_bytes(batch: &Batch, body: &[u8], new_chain: bool) -> u64 {
    const PAGE: u64 = 4096;
    const INDEX_ROW: u64 = 64;
    let row = (body.len() + batch.checkpoint.render().len() + 128 + 32) as u64;
    let header = &batch.header;
    let chain = if new_chain {
        2 * (header.machine.len() + header.session.len() + 16) as u64
    } else {
        0
    };
    row.div_ceil(PAGE) * PAGE + header.index.len() as u64 * INDEX_ROW + chain
}

/// A stored piece (or a pull's frame) and where it is in its chain: the
/// anchor's seq and the first byte (a batch's first seq, and 0).
pub type Placed = ((u64, u64), Vec<u8>);

/// What storing a transcript piece came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PieceStored {
    /// Stored at this time.
    Stored(u64),
    /// The chain holds a piece of this anchor from this byte already; the
    /// first is kept: when it was stored, and its bytes, to acknowledge it by.
    AlreadyStored(u64, Vec<u8>),
    /// The chain does not hold the anchoring entry (yet).
    NotAnchored,
    /// Storing it would take the machine over its quota for the day.
    OverQuota(Usage),
}

/// Keeps a transcript piece: only of an entry the chain holds, once per
/// anchor and first byte, its bytes charged to the machine's quota as a
/// batch's are (no entries: a piece adds none to the chain). Runs inside
/// the backend's transaction, with the chain locked.
pub fn store_piece(
    tx: &mut dyn ChainTx,
    header: &PieceHeader,
    body: &[u8],
    now: u64,
    quota: &Quota,
) -> Result<PieceStored, StoreError> {
    if tx.head()?.is_none_or(|h| h.checkpoint.last < header.anchor) {
        return Ok(PieceStored::NotAnchored);
    }
    if let Some((stored, body)) = tx.piece_at(header.anchor, header.from)? {
        return Ok(PieceStored::AlreadyStored(stored, body));
    }
    let more = Usage {
        entries: 0,
        bytes: body.len() as u64,
    };
    if let Some(used) = tx.charge(day_of(now), more, quota)? {
        return Ok(PieceStored::OverQuota(used));
    }
    tx.insert_piece(header, body, now)?;
    Ok(PieceStored::Stored(now))
}

/// How a batch stands against the chain the vault holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Link {
    /// It continues the chain: store it.
    Append,
    /// Every entry in it is already stored, identical: acknowledge.
    AlreadyStored,
    /// It contradicts a stored entry: refuse and record.
    Fork(String),
    /// It does not reach the stored chain, or repeats part of it: refuse.
    Unlinked(String),
}

/// Decides [`Link`] for `header` given the stored chain: the seq of its last
/// entry, and the digest (with its chain key id) of any stored entry.
/// Digests compare only under the same chain key: a batch under a new key
/// must start right after the stored head, and whether it joins is for
/// `nd7 admin pull` to check.
pub fn decide(
    header: &BatchHeader,
    head: Option<u64>,
    at: &mut dyn FnMut(u64) -> Result<Option<(Digest, KeyId)>, StoreError>,
) -> Result<Link, StoreError> {
    let last = header.last();
    let next = head.map_or(0, |h| h + 1);
    if header.first > next {
        return Ok(Link::Unlinked(match head {
            Some(h) => format!(
                "the vault holds entries 0 to {h}; this batch starts at {}",
                header.first
            ),
            None => format!(
                "the vault holds no entries of this session; this batch starts at {}",
                header.first
            ),
        }));
    }
    let other_key = |seq: u64| {
        Link::Unlinked(format!(
            "the vault holds entry {seq} under another chain key; a batch under chain key {} must start at {next}",
            header.key
        ))
    };
    if header.first > 0 {
        match at(header.first - 1)? {
            Some((digest, key)) if key == header.key => {
                if digest != header.prev {
                    return Ok(Link::Fork(format!(
                        "entry {} names a prev with digest {}, but the stored entry {} has digest {}",
                        header.first,
                        header.prev.short(),
                        header.first - 1,
                        digest.short()
                    )));
                }
            }
            Some(_) if header.first == next => {}
            _ => return Ok(other_key(header.first - 1)),
        }
    }
    for e in header.index.iter().take_while(|e| e.seq < next) {
        match at(e.seq)? {
            Some((digest, key)) if key == header.key => {
                if digest != e.digest {
                    return Ok(Link::Fork(format!(
                        "entry {} has digest {}, but the stored entry {} has digest {}",
                        e.seq,
                        e.digest.short(),
                        e.seq,
                        digest.short()
                    )));
                }
            }
            _ => return Ok(other_key(e.seq)),
        }
    }
    if header.first < next {
        if last.seq < next {
            return Ok(Link::AlreadyStored);
        }
        return Ok(Link::Unlinked(format!(
            "the vault already holds entries up to {}; send from {next}",
            next - 1
        )));
    }
    Ok(Link::Append)
}

pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// How a token is kept: only its BLAKE3, so the database does not hold it.
pub fn token_hash(token: &str) -> String {
    blake3::hash(token.as_bytes()).to_hex().to_string()
}

/// The id a read token is named by: its hash's first 16 hex digits.
pub fn token_id(token_hash: &str) -> String {
    token_hash.chars().take(16).collect()
}

/// Where the vault's data is: a SQLite file, or a PostgreSQL database.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Database {
    Sqlite(std::path::PathBuf),
    /// A `postgres://` or `postgresql://` URL.
    Postgres(String),
}

impl Database {
    /// Reads `--db`: a PostgreSQL URL, or else a SQLite file's path.
    pub fn parse(text: &std::ffi::OsStr) -> Database {
        match text.to_str() {
            Some(t) if t.starts_with("postgres://") || t.starts_with("postgresql://") => {
                Database::Postgres(t.to_string())
            }
            _ => Database::Sqlite(text.into()),
        }
    }

    /// Opens one connection.
    pub fn open(&self) -> Result<Box<dyn Store>, StoreError> {
        Ok(match self {
            Database::Sqlite(path) => Box::new(sqlite::SqliteStore::open(path)?),
            Database::Postgres(url) => Box::new(postgres::PgStore::open(url)?),
        })
    }

    /// The database named for people: the file's path, or the URL without
    /// its password.
    pub fn describe(&self) -> String {
        match self {
            Database::Sqlite(path) => path.display().to_string(),
            Database::Postgres(url) => postgres::redact(url),
        }
    }
}

#[cfg(test)]
mod tests;
