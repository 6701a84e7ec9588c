//! `nd7-vault`: the server machines ship to. Three parts, each replaceable:
//!
//! - [`routes`]: what a request means and what the reply is: routes,
//!   authentication, the link check ([`decide`], pure), receipts. It sees
//!   a [`routes::Request`] (method, path, headers, body) and knows nothing
//!   of HTTP's transport.
//! - [`http`]: the transport (tiny_http): bounded bodies, read deadlines,
//!   worker threads, one log line per request.
//! - [`Store`]: storage, behind a narrow trait ([`sqlite::SqliteStore`] is
//!   the one built so far).
//!
//! It holds no key that opens anything: it checks who sent a batch, that the
//! machine signed it, and that it links onto the chain it already has, stores
//! ciphertext plus the clear index of keyed digests, and countersigns what it
//! stored with its own key. The format is [`crate::vault`]'s.
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
//! GET  /v1/machines/<id>                 a machine's enrolment record      reader token
//! GET  /v1/batches/<machine>/<session hex>  a chain's batches, framed      reader token
//! GET  /v1/forks                         refused forking batches           reader token
//! ```

#![forbid(unsafe_code)]

pub mod http;
pub mod routes;
pub mod sqlite;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use crate::vault::{Batch, BatchHeader, Checkpoint, Digest, Enrolment, KeyId, SigningKey};

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

/// (machine, session, first, last, reason) of a refused forking batch.
pub type ForkRow = (String, String, u64, u64, String);

/// What the server needs from storage, and nothing more. SQLite implements
/// it; an index in PostgreSQL with ciphertext in object storage would too
/// (`insert_batch` is the one step that must be atomic).
pub trait Store: Send {
    /// Keeps a read token's hash (`kind` is "read").
    fn add_token(&mut self, kind: &str, token_hash: &str, expires: u64) -> Result<(), StoreError>;
    fn reader_token_ok(&mut self, token_hash: &str, now: u64) -> Result<bool, StoreError>;
    /// Keeps a machine and its enrolment record; `false` if its key or its
    /// token's key is enrolled already.
    fn add_machine(
        &mut self,
        id: &str,
        enrolment: &Enrolment,
        now: u64,
    ) -> Result<bool, StoreError>;
    fn machine(&mut self, id: &str) -> Result<Option<Enrolment>, StoreError>;
    /// Notes a request nonce; `false` if this machine used it already.
    /// Nonces older than `forget_before` are dropped: their requests are stale anyway.
    fn first_use_of_nonce(
        &mut self,
        machine: &str,
        nonce: &str,
        time: u64,
        forget_before: u64,
    ) -> Result<bool, StoreError>;
    fn recipients(&mut self) -> Result<Option<String>, StoreError>;
    fn set_recipients(&mut self, doc: &str, now: u64) -> Result<(), StoreError>;
    /// The last batch stored of a chain.
    fn head(&mut self, machine: &str, session: &str) -> Result<Option<StoredBatch>, StoreError>;
    /// The digest of a stored entry, and the chain key it is under.
    fn digest_at(
        &mut self,
        machine: &str,
        session: &str,
        seq: u64,
    ) -> Result<Option<(Digest, KeyId)>, StoreError>;
    /// The stored batch whose last entry is `last`.
    fn batch_ending_at(
        &mut self,
        machine: &str,
        session: &str,
        last: u64,
    ) -> Result<Option<StoredBatch>, StoreError>;
    /// Stores the batch as sent, its checkpoint and every index entry, all or nothing.
    fn insert_batch(&mut self, batch: &Batch, body: &[u8], now: u64) -> Result<(), StoreError>;
    fn record_fork(
        &mut self,
        header: &BatchHeader,
        reason: &str,
        body: &[u8],
        now: u64,
    ) -> Result<(), StoreError>;
    fn batches(&mut self, machine: &str, session: &str) -> Result<Vec<Vec<u8>>, StoreError>;
    /// (machine, session, last seq) of every chain held.
    fn sessions(&mut self) -> Result<Vec<(String, String, u64)>, StoreError>;
    /// (machine, session, first, last, reason) of every refused fork.
    fn forks(&mut self) -> Result<Vec<ForkRow>, StoreError>;
    /// Keeps a signed restore notice.
    fn add_restore(&mut self, notice: &str, now: u64) -> Result<(), StoreError>;
    /// Every restore notice, oldest first.
    fn restores(&mut self) -> Result<Vec<String>, StoreError>;
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

/// How the HTTP transport runs.
pub struct Config {
    /// The longest a request body may take to arrive.
    pub body_deadline: Duration,
    /// Request handlers running at once.
    pub workers: usize,
    /// The clock, in Unix seconds.
    pub now: fn() -> u64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            body_deadline: Duration::from_secs(30),
            workers: 4,
            now: unix_now,
        }
    }
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

/// Serves requests on `server` with `store`, countersigning with `key`,
/// until `stop` is set. Each request's line goes to `log`.
pub fn serve(
    server: tiny_http::Server,
    store: Box<dyn Store>,
    key: SigningKey,
    config: Config,
    stop: Arc<AtomicBool>,
    log: impl Fn(&str) + Send + Sync,
) {
    let vault = routes::Vault::new(store, key, config.now);
    http::serve(&server, &vault, &config, &stop, &log);
}

#[cfg(test)]
mod tests;
