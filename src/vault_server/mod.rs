//! `nd7-vault`: the HTTP server machines ship to. tiny_http in front, a
//! [`Store`] behind (SQLite, [`sqlite::SqliteStore`], is the one built so far).
//! It holds no key that opens anything: it checks who sent a batch and that
//! the batch links onto the chain it already has, and stores ciphertext plus
//! the clear index. The format is [`crate::vault`]'s.
//!
//! Routes (docs/vault.md has the statuses):
//!
//! ```text
//! GET  /v1/recipients                    the signed recipients document    anyone
//! POST /v1/enroll                        register a key with a token       signed by that key
//! GET  /v1/head/<session hex>            the stored chain's last entry     machine
//! POST /v1/batches                       one batch                         machine
//! GET  /v1/sessions                      every chain held                  reader token
//! GET  /v1/batches/<machine>/<session hex>  a chain's batches, framed      reader token
//! GET  /v1/forks                         refused forking batches           reader token
//! ```
//!
//! Bodies are bounded ([`vault::MAX_BODY_BYTES`]) and must arrive within a
//! deadline; TLS and connection timeouts belong to a reverse proxy in front.

#![forbid(unsafe_code)]

pub mod sqlite;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::chain::Hash;
use crate::vault::{self, BatchHeader, PublicKey, RequestAuth};

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

/// The last entry the vault holds of one chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoredHead {
    pub seq: u64,
    pub hash: Hash,
}

/// (machine, session, first, last, reason) of a refused forking batch.
pub type ForkRow = (String, String, u64, u64, String);

/// What the server needs from storage, and nothing more. SQLite implements
/// it; an index in PostgreSQL with ciphertext in object storage would too
/// (`insert_batch` is the one step that must be atomic).
pub trait Store: Send {
    fn add_token(&mut self, kind: &str, token_hash: &str, expires: u64) -> Result<(), StoreError>;
    /// Marks an unexpired, unused enrolment token used; `false` if there is none.
    fn use_enrol_token(&mut self, token_hash: &str, now: u64) -> Result<bool, StoreError>;
    fn reader_token_ok(&mut self, token_hash: &str, now: u64) -> Result<bool, StoreError>;
    fn add_machine(&mut self, id: &str, key: &PublicKey, now: u64) -> Result<(), StoreError>;
    fn machine_key(&mut self, id: &str) -> Result<Option<PublicKey>, StoreError>;
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
    fn head(&mut self, machine: &str, session: &str) -> Result<Option<StoredHead>, StoreError>;
    fn hash_at(
        &mut self,
        machine: &str,
        session: &str,
        seq: u64,
    ) -> Result<Option<Hash>, StoreError>;
    /// The (last seq, last hash) of the batch stored starting at `first`.
    fn batch_starting_at(
        &mut self,
        machine: &str,
        session: &str,
        first: u64,
    ) -> Result<Option<(u64, Hash)>, StoreError>;
    /// Stores the ciphertext and every index entry, all or nothing.
    fn insert_batch(
        &mut self,
        header: &BatchHeader,
        body: &[u8],
        now: u64,
    ) -> Result<(), StoreError>;
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

/// Decides [`Link`] for `header` given the stored chain: its head, the batch
/// stored at the same first seq, and the stored hash at any seq.
pub fn decide(
    header: &BatchHeader,
    head: Option<StoredHead>,
    same_first: Option<(u64, Hash)>,
    hash_at: &mut dyn FnMut(u64) -> Result<Option<Hash>, StoreError>,
) -> Result<Link, StoreError> {
    let last = header.last();
    if same_first == Some((last.seq, last.hash)) {
        return Ok(Link::AlreadyStored);
    }
    let next = head.map_or(0, |h| h.seq + 1);
    if header.first > next {
        return Ok(Link::Unlinked(match head {
            Some(h) => format!(
                "the vault holds entries 0 to {}; this batch starts at {}",
                h.seq, header.first
            ),
            None => format!(
                "the vault holds no entries of this session; this batch starts at {}",
                header.first
            ),
        }));
    }
    let expected_prev = if header.first == 0 {
        Some(Hash::session_fingerprint(&header.session))
    } else {
        hash_at(header.first - 1)?
    };
    if expected_prev != Some(header.prev) {
        if header.first == 0 {
            return Ok(Link::Unlinked(
                "entry 0 does not name the session's fingerprint as prev".into(),
            ));
        }
        return Ok(Link::Fork(format!(
            "entry {} names prev {}, but the stored entry {} has hash {}",
            header.first,
            header.prev.short(),
            header.first - 1,
            expected_prev.map_or_else(|| "(none)".into(), |h| h.short())
        )));
    }
    for e in header.index.iter().take_while(|e| e.seq < next) {
        let stored = hash_at(e.seq)?;
        if stored != Some(e.hash) {
            return Ok(Link::Fork(format!(
                "entry {} has hash {}, but the stored entry {} has hash {}",
                e.seq,
                e.hash.short(),
                e.seq,
                stored.map_or_else(|| "(none)".into(), |h| h.short())
            )));
        }
    }
    if header.first < next {
        if last.seq < next {
            return Ok(Link::AlreadyStored);
        }
        return Ok(Link::Unlinked(format!(
            "the vault already holds entries up to {}; send from {}",
            next - 1,
            next
        )));
    }
    Ok(Link::Append)
}

/// A reply: status and a one-line text body (or bytes, for reads).
struct Reply {
    status: u16,
    body: Vec<u8>,
}

fn reply(status: u16, text: impl Into<String>) -> Reply {
    let mut text = text.into();
    if !text.ends_with('\n') {
        text.push('\n');
    }
    Reply {
        status,
        body: text.into_bytes(),
    }
}

fn internal(e: StoreError) -> Reply {
    reply(500, format!("vault error: {e}"))
}

/// What the server runs with.
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

struct Ctx {
    store: Mutex<Box<dyn Store>>,
    config: Config,
}

impl Ctx {
    fn store(&self) -> std::sync::MutexGuard<'_, Box<dyn Store>> {
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Serves requests on `server` until `stop` is set. Each request's line
/// (method, path, status, milliseconds) goes to `log`.
pub fn serve(
    server: tiny_http::Server,
    store: Box<dyn Store>,
    config: Config,
    stop: Arc<AtomicBool>,
    log: impl Fn(&str) + Send + Sync,
) {
    let ctx = Ctx {
        store: Mutex::new(store),
        config,
    };
    let (ctx, server, log) = (&ctx, &server, &log);
    std::thread::scope(|scope| {
        for _ in 0..ctx.config.workers.max(1) {
            let stop = Arc::clone(&stop);
            scope.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let Ok(Some(mut request)) = server.recv_timeout(Duration::from_millis(200))
                    else {
                        continue;
                    };
                    let started = Instant::now();
                    let method = request.method().as_str().to_string();
                    let path = request.url().to_string();
                    let r = handle(ctx, &mut request);
                    let status = r.status;
                    let response = tiny_http::Response::from_data(r.body)
                        .with_status_code(status)
                        .with_header(tiny_http::Header {
                            field: "Content-Type".parse().unwrap_or_else(|_| unreachable!()),
                            value: "text/plain; charset=utf-8"
                                .parse()
                                .unwrap_or_else(|_| unreachable!()),
                        });
                    let _ = request.respond(response);
                    log(&format!(
                        "{method} {path} {status} {:.3}ms",
                        started.elapsed().as_secs_f64() * 1000.0
                    ));
                }
            });
        }
    });
}

fn header(request: &tiny_http::Request, name: &str) -> Option<String> {
    request
        .headers()
        .iter()
        .find(|h| h.field.as_str().as_str().eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str().to_string())
}

fn read_body(ctx: &Ctx, request: &mut tiny_http::Request) -> Result<Vec<u8>, Reply> {
    let too_large = || {
        reply(
            413,
            format!(
                "refused: the body is over the vault's {}-byte limit",
                vault::MAX_BODY_BYTES
            ),
        )
    };
    if request
        .body_length()
        .is_some_and(|n| n > vault::MAX_BODY_BYTES)
    {
        return Err(too_large());
    }
    let started = Instant::now();
    let mut body = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let reader = request.as_reader();
    loop {
        let n = reader
            .read(&mut chunk)
            .map_err(|e| reply(400, format!("refused: reading the body failed: {e}")))?;
        if n == 0 {
            return Ok(body);
        }
        if body.len() + n > vault::MAX_BODY_BYTES {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk[..n]);
        if started.elapsed() > ctx.config.body_deadline {
            return Err(reply(
                408,
                format!(
                    "refused: the body took longer than {} s to arrive",
                    ctx.config.body_deadline.as_secs()
                ),
            ));
        }
    }
}

fn handle(ctx: &Ctx, request: &mut tiny_http::Request) -> Reply {
    let method = request.method().as_str().to_string();
    let path = request.url().to_string();
    let body = match read_body(ctx, request) {
        Ok(body) => body,
        Err(r) => return r,
    };
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let result = match (method.as_str(), segments.as_slice()) {
        ("GET", ["v1", "recipients"]) => recipients(ctx),
        ("POST", ["v1", "enroll"]) => enroll(ctx, request, &path, &body),
        ("GET", ["v1", "head", session]) => authenticate(ctx, request, &method, &path, &body)
            .and_then(|machine| {
                let session = session_from_hex(session)?;
                match ctx.store().head(&machine, &session) {
                    Ok(Some(h)) => Ok(reply(200, format!("{} {}", h.seq, h.hash))),
                    Ok(None) => Ok(reply(200, "none")),
                    Err(e) => Err(internal(e)),
                }
            }),
        ("POST", ["v1", "batches"]) => authenticate(ctx, request, &method, &path, &body)
            .and_then(|machine| batch(ctx, &machine, &body)),
        ("GET", ["v1", "sessions"]) => reader(ctx, request).and_then(|()| {
            let rows = ctx.store().sessions().map_err(internal)?;
            let mut text = String::new();
            for (machine, session, last) in rows {
                text.push_str(&format!(
                    "{machine} {} {last}\n",
                    vault::hex(session.as_bytes())
                ));
            }
            Ok(Reply {
                status: 200,
                body: text.into_bytes(),
            })
        }),
        ("GET", ["v1", "batches", machine, session]) => reader(ctx, request).and_then(|()| {
            let session = session_from_hex(session)?;
            let batches = ctx.store().batches(machine, &session).map_err(internal)?;
            let mut out = Vec::new();
            for b in batches {
                out.extend_from_slice(&(b.len() as u32).to_be_bytes());
                out.extend_from_slice(&b);
            }
            Ok(Reply {
                status: 200,
                body: out,
            })
        }),
        ("GET", ["v1", "forks"]) => reader(ctx, request).and_then(|()| {
            let rows = ctx.store().forks().map_err(internal)?;
            let mut text = String::new();
            for (machine, session, first, last, reason) in rows {
                text.push_str(&format!(
                    "{machine} {} {first}..{last}: {reason}\n",
                    vault::hex(session.as_bytes())
                ));
            }
            Ok(Reply {
                status: 200,
                body: text.into_bytes(),
            })
        }),
        _ => Err(reply(404, format!("no such route: {method} {path}"))),
    };
    result.unwrap_or_else(|r| r)
}

fn session_from_hex(hex: &str) -> Result<String, Reply> {
    vault::unhex_vec(hex)
        .and_then(|b| String::from_utf8(b).ok())
        .filter(|s| crate::session_log::check_session_id(s).is_ok())
        .ok_or_else(|| reply(400, "refused: the session is not a hex-encoded session id"))
}

fn recipients(ctx: &Ctx) -> Result<Reply, Reply> {
    match ctx.store().recipients() {
        Ok(Some(doc)) => Ok(reply(200, doc)),
        Ok(None) => Err(reply(
            404,
            "no recipients document installed: run `nd7-vault recipients` on the vault",
        )),
        Err(e) => Err(internal(e)),
    }
}

fn auth_headers(request: &tiny_http::Request) -> Result<RequestAuth, Reply> {
    RequestAuth::from_headers(|name| header(request, name))
        .map_err(|e| reply(401, format!("refused: {e}")))
}

/// Checks a machine's signature and the request's freshness, and notes its
/// nonce; returns the machine's id.
fn authenticate(
    ctx: &Ctx,
    request: &tiny_http::Request,
    method: &str,
    path: &str,
    body: &[u8],
) -> Result<String, Reply> {
    let auth = auth_headers(request)?;
    let key = ctx
        .store()
        .machine_key(&auth.machine)
        .map_err(internal)?
        .ok_or_else(|| {
            reply(
                401,
                format!(
                    "refused: unknown machine {:?}: enrol it first",
                    auth.machine
                ),
            )
        })?;
    check_fresh(ctx, &auth, &key, &auth.machine, method, path, body)?;
    Ok(auth.machine)
}

fn check_fresh(
    ctx: &Ctx,
    auth: &RequestAuth,
    key: &PublicKey,
    nonce_owner: &str,
    method: &str,
    path: &str,
    body: &[u8],
) -> Result<(), Reply> {
    let now = (ctx.config.now)();
    auth.verify(key, method, path, body, now)
        .map_err(|e| reply(401, format!("refused: {e}")))?;
    let first = ctx
        .store()
        .first_use_of_nonce(
            nonce_owner,
            &vault::hex(&auth.nonce),
            auth.time,
            now.saturating_sub(2 * vault::MAX_CLOCK_SKEW_SECS),
        )
        .map_err(internal)?;
    if !first {
        return Err(reply(
            401,
            "refused: replayed request: this nonce was already used",
        ));
    }
    Ok(())
}

fn enroll(
    ctx: &Ctx,
    request: &tiny_http::Request,
    path: &str,
    body: &[u8],
) -> Result<Reply, Reply> {
    let (token, key) =
        vault::parse_enroll_body(body).map_err(|e| reply(400, format!("refused: {e}")))?;
    let auth = auth_headers(request)?;
    check_fresh(ctx, &auth, &key, &key.to_hex(), "POST", path, body)?;
    let now = (ctx.config.now)();
    let mut store = ctx.store();
    if !store
        .use_enrol_token(&token_hash(&token), now)
        .map_err(internal)?
    {
        return Err(reply(
            403,
            "refused: the enrolment token is unknown, used or expired",
        ));
    }
    let mut id = [0u8; 16];
    getrandom::getrandom(&mut id)
        .map_err(|e| reply(500, format!("vault error: no randomness: {e}")))?;
    let id = vault::hex(&id);
    store
        .add_machine(&id, &key, now)
        .map_err(|e| reply(409, format!("refused: this key is already enrolled ({e})")))?;
    Ok(reply(200, format!("machine {id}")))
}

/// How a token is kept: only its BLAKE3, so the database does not hold it.
pub fn token_hash(token: &str) -> String {
    blake3::hash(token.as_bytes()).to_hex().to_string()
}

fn reader(ctx: &Ctx, request: &tiny_http::Request) -> Result<(), Reply> {
    let token = header(request, "authorization")
        .and_then(|v| v.strip_prefix("Bearer ").map(str::to_string))
        .ok_or_else(|| {
            reply(
                401,
                "refused: reads need `Authorization: Bearer <read token>`",
            )
        })?;
    let now = (ctx.config.now)();
    if ctx
        .store()
        .reader_token_ok(&token_hash(&token), now)
        .map_err(internal)?
    {
        Ok(())
    } else {
        Err(reply(401, "refused: unknown or expired read token"))
    }
}

fn batch(ctx: &Ctx, machine: &str, body: &[u8]) -> Result<Reply, Reply> {
    let batch = vault::parse_batch(body).map_err(|e| reply(400, format!("refused: {e}")))?;
    let header = &batch.header;
    if header.machine != machine {
        return Err(reply(
            403,
            format!(
                "refused: the batch names machine {:?} but was signed by {machine:?}",
                header.machine
            ),
        ));
    }
    let now = (ctx.config.now)();
    let mut store = ctx.store();
    let head = store.head(machine, &header.session).map_err(internal)?;
    let same_first = store
        .batch_starting_at(machine, &header.session, header.first)
        .map_err(internal)?;
    let link = {
        let store = &mut **store;
        decide(header, head, same_first, &mut |seq| {
            store.hash_at(machine, &header.session, seq)
        })
        .map_err(internal)?
    };
    let range = format!("{}..{}", header.first, header.last().seq);
    match link {
        Link::Append => {
            store.insert_batch(header, body, now).map_err(internal)?;
            Ok(reply(200, format!("stored {range}")))
        }
        Link::AlreadyStored => Ok(reply(200, format!("already stored {range}"))),
        Link::Fork(why) => {
            store
                .record_fork(header, &why, body, now)
                .map_err(internal)?;
            Err(reply(
                409,
                format!("refused and recorded: batch {range} would fork the chain: {why}"),
            ))
        }
        Link::Unlinked(why) => Err(reply(
            409,
            format!("refused: batch {range} does not link onto the stored chain: {why}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vault::IndexEntry;

    fn header(first: u64, prev: Hash, hashes: &[Hash]) -> BatchHeader {
        BatchHeader {
            machine: "m".into(),
            session: "s".into(),
            first,
            prev,
            index: hashes
                .iter()
                .enumerate()
                .map(|(i, h)| IndexEntry {
                    seq: first + i as u64,
                    hash: *h,
                    ts: 0,
                })
                .collect(),
        }
    }

    fn h(n: u8) -> Hash {
        Hash::of(&[n])
    }

    /// The stored chain: entries 0..=3 with hashes h(0)..h(3).
    fn stored(seq: u64) -> Result<Option<Hash>, StoreError> {
        Ok((seq <= 3).then(|| h(seq as u8)))
    }

    fn run(b: &BatchHeader, same_first: Option<(u64, Hash)>) -> Link {
        let head = Some(StoredHead { seq: 3, hash: h(3) });
        decide(b, head, same_first, &mut stored).expect("no store error")
    }

    #[test]
    fn a_batch_is_appended_acked_or_refused_by_how_it_links() {
        let fp = Hash::session_fingerprint("s");
        let mut none = |_| Ok(None);
        assert_eq!(
            decide(&header(0, fp, &[h(0)]), None, None, &mut none).expect("ok"),
            Link::Append
        );
        assert!(matches!(
            decide(&header(0, h(9), &[h(0)]), None, None, &mut none).expect("ok"),
            Link::Unlinked(_)
        ));
        assert_eq!(run(&header(4, h(3), &[h(4), h(5)]), None), Link::Append);
        // A resend of a stored batch, or any stretch already held identically.
        assert_eq!(
            run(&header(2, h(1), &[h(2), h(3)]), Some((3, h(3)))),
            Link::AlreadyStored
        );
        assert_eq!(
            run(&header(1, h(0), &[h(1), h(2)]), None),
            Link::AlreadyStored
        );
        // Different entries where the vault has some: a fork.
        assert!(matches!(
            run(&header(4, h(9), &[h(4)]), None),
            Link::Fork(_)
        ));
        assert!(matches!(
            run(&header(2, h(1), &[h(2), h(8), h(4)]), None),
            Link::Fork(_)
        ));
        // Same entries, running past the head: refused, not a fork.
        assert!(matches!(
            run(&header(3, h(2), &[h(3), h(4)]), None),
            Link::Unlinked(_)
        ));
        // A gap.
        assert!(matches!(
            run(&header(6, h(5), &[h(6)]), None),
            Link::Unlinked(_)
        ));
    }
}
