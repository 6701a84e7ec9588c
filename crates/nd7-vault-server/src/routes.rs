//! What each request means: routes, authentication, limits, the link check,
//! and receipts. Independent of the transport: a [`Request`] and a
//! [`Store`] come in, a [`Reply`] goes out.
//!
//! A request with a body is seen twice: [`Vault::admit`] with its headers
//! only, before the transport reads the body (who is sending, proven by the
//! signature over the headers, whether they may, and how much), then
//! [`Vault::handle`] with the body read and held to the hash the signature
//! names. A body is never read for a route that takes none, a machine the
//! vault does not know or revoked, a signature that does not verify, a
//! stale or replayed request, or a machine over its quota: knowing a
//! machine's id is not enough to make the vault read, or hold room for, a
//! byte.

use super::{
    Enrolled, NonceUse, PieceStored, Quota, Store, StoreError, Stored, StoredBatch, TokenCheck,
    Usage, day_of,
};
use nd7_format::vault::{
    self, Enrolment, PieceReceipt, PublicKey, PullEnd, PullOf, Receipt, Recipients, RequestAuth,
    RestoreNotice, SigningKey, Tally,
};

/// The largest enrolment body: a few hundred bytes of text, with room.
pub const MAX_ENROL_BYTES: usize = 4096;

/// A request as the transport read it. Header names are compared without
/// regard to case.
#[derive(Clone, Debug, Default)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    }
}

/// A chain to stream back, one batch or transcript piece at a time
/// ([`Vault::next_frame`]), then a signed last frame ([`Vault::end_frame`])
/// answering the request's nonce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pull {
    pub machine: String,
    pub session: String,
    pub of: PullOf,
    pub nonce: [u8; 16],
}

/// A reply: status, body, and for the log line what a refusal concerned.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub body: Vec<u8>,
    /// Machine, session, entries and reason of a refusal, for the log.
    pub note: Option<String>,
    /// For a 429: when to try again, in seconds.
    pub retry_after: Option<u64>,
    /// The body is this chain's batches or pieces, framed, after `body`.
    pub pull: Option<Box<Pull>>,
    /// The vault's signature over this reply to the request's nonce
    /// (`x-nd7-reply`), when the request carried one and the body is whole.
    pub signature: Option<Box<[u8; 64]>>,
    /// The request proved an enrolled, unrevoked machine (its signature) or
    /// an admin (a valid read token): its connection is no longer
    /// anonymous (ADR-0118).
    pub proven: bool,
    /// For a request a machine's signature proved: the machine and its key,
    /// which the transport keeps to vouch for its later requests from their
    /// headers alone ([`vouches`]).
    pub machine: Option<Box<(String, PublicKey)>>,
    /// The request named a machine that was revoked: the transport forgets
    /// its key.
    pub revoked: Option<String>,
}

pub fn reply(status: u16, text: impl Into<String>) -> Reply {
    let mut text = text.into();
    if !text.ends_with('\n') {
        text.push('\n');
    }
    Reply {
        status,
        body: text.into_bytes(),
        note: None,
        retry_after: None,
        pull: None,
        signature: None,
        proven: false,
        machine: None,
        revoked: None,
    }
}

/// That what a machine sent (a batch, a piece) is its own: it names the
/// machine whose request signature carried it (else 403) and is signed by
/// that machine's key (else 400). `what` names the thing and its signed
/// part in the refusal.
fn sent_by(
    machine: &str,
    named: &str,
    signed: impl FnOnce() -> bool,
    what: (&str, &str),
    names: &str,
) -> Result<(), Reply> {
    let (thing, part) = what;
    if named != machine {
        return Err(refuse(
            403,
            format!("{names}: the {thing} names machine {named:?} but was signed by {machine:?}"),
        ));
    }
    if !signed() {
        return Err(refuse(
            400,
            format!("{names}: the {part} is not signed by the machine's key"),
        ));
    }
    Ok(())
}

/// A refusal: its text is also the log's note.
pub fn refuse(status: u16, text: impl Into<String>) -> Reply {
    let text = text.into();
    let mut r = reply(status, format!("refused: {text}"));
    r.note = Some(text);
    r
}

fn internal(e: StoreError) -> Reply {
    let mut r = reply(500, format!("vault error: {e}"));
    r.note = Some(e.to_string());
    r
}

fn bytes(status: u16, body: Vec<u8>) -> Reply {
    Reply {
        status,
        body,
        note: None,
        retry_after: None,
        pull: None,
        signature: None,
        proven: false,
        machine: None,
        revoked: None,
    }
}

/// What the vault allows each machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub quota: Quota,
    /// Requests one machine may make within the replay window (twice the
    /// allowed clock skew): what bounds the nonce table.
    pub requests_per_window: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            quota: Quota::default(),
            requests_per_window: 20_000,
        }
    }
}

/// The routes, as [`Vault::handle`] dispatches them. A new route is a
/// variant, a line in [`Route::parse`], its [`Access`] and body limit, and
/// an arm in [`Vault::handle`]; the transport needs nothing more.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route<'a> {
    Recipients,
    Restores,
    Enroll,
    Head(&'a str),
    Batch,
    Sessions,
    Machines,
    Machine(&'a str),
    Batches(&'a str, &'a str),
    Forks,
    Piece,
    Pieces(&'a str, &'a str),
    Tally,
    Tallies,
}

impl<'a> Route<'a> {
    fn parse(method: &str, path: &'a str) -> Option<Route<'a>> {
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        Some(match (method, segments.as_slice()) {
            ("GET", ["v1", "recipients"]) => Route::Recipients,
            ("GET", ["v1", "restores"]) => Route::Restores,
            ("POST", ["v1", "enroll"]) => Route::Enroll,
            ("GET", ["v1", "head", session]) => Route::Head(session),
            ("POST", ["v1", "batches"]) => Route::Batch,
            ("GET", ["v1", "sessions"]) => Route::Sessions,
            ("GET", ["v1", "machines"]) => Route::Machines,
            ("GET", ["v1", "machines", id]) => Route::Machine(id),
            ("GET", ["v1", "batches", machine, session]) => Route::Batches(machine, session),
            ("GET", ["v1", "forks"]) => Route::Forks,
            ("POST", ["v1", "transcripts"]) => Route::Piece,
            ("GET", ["v1", "transcripts", machine, session]) => Route::Pieces(machine, session),
            ("POST", ["v1", "tallies"]) => Route::Tally,
            ("GET", ["v1", "tallies"]) => Route::Tallies,
            _ => return None,
        })
    }

    /// The largest body the route takes.
    fn max_body(&self) -> usize {
        match self {
            Route::Enroll => MAX_ENROL_BYTES,
            // A piece is at most 8 MiB of transcript, sealed as a batch
            // is: the batch's bound holds it.
            Route::Batch | Route::Piece | Route::Tally => vault::MAX_BODY_BYTES,
            _ => 0,
        }
    }

    /// Who may call the route.
    fn access(&self) -> Access {
        match self {
            Route::Recipients | Route::Restores | Route::Enroll => Access::Anyone,
            Route::Head(_) | Route::Batch | Route::Piece | Route::Tally => Access::Machine,
            Route::Sessions
            | Route::Machines
            | Route::Machine(_)
            | Route::Batches(..)
            | Route::Forks
            | Route::Pieces(..)
            | Route::Tallies => Access::Reader,
        }
    }
}

/// Who may call a route: what [`Vault::admit`] checks before a body is
/// read, and [`Vault::handle`] again (with the signature over the body)
/// after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    /// Anyone (an enrolment carries its own proof, checked in the handler).
    Anyone,
    /// An enrolled, unrevoked machine, by a signed request.
    Machine,
    /// An admin, by a read token.
    Reader,
}

/// The largest body a request to `method path` may carry, or the reply
/// for a route that does not exist. Pure: the transport asks before it
/// reads anything more.
pub fn max_body(method: &str, path: &str) -> Result<usize, Reply> {
    Route::parse(method, path)
        .map(|r| r.max_body())
        .ok_or_else(|| reply(404, format!("no such route: {method} {path}")))
}

/// Whether `method path` is a route anyone may call (the recipients
/// document, restore notices, enrolment): what the transport bounds
/// separately, so that they cannot crowd out machines and admins.
pub fn anonymous(method: &str, path: &str) -> bool {
    Route::parse(method, path).is_some_and(|r| r.access() == Access::Anyone)
}

/// Whether `request` (with a body of `length` bytes) carries a valid,
/// fresh signature over its headers by a machine whose key `key_of` knows:
/// checked on the transport's threads, with no storage (ADR-0118). Vouches
/// for who sent it, not for the request: the nonce, revocation and the body
/// are [`Vault::handle`]'s to check.
pub fn vouches(
    request: &Request,
    length: usize,
    now: u64,
    key_of: impl FnOnce(&str) -> Option<PublicKey>,
) -> bool {
    let Ok(auth) = RequestAuth::from_headers(|name| request.header(name)) else {
        return false;
    };
    key_of(&auth.machine).is_some_and(|key| {
        auth.verify_headers(&key, &request.method, &request.path, length as u64, now)
            .is_ok()
    })
}

/// What [`Vault::admit`] established from a request's headers: for a
/// machine's request, the machine whose signature over the headers
/// verified, with a nonce not used yet.
#[derive(Clone, Debug)]
pub struct Admitted {
    machine: Option<String>,
}

impl Admitted {
    /// The machine whose body this is, for the transport's per-machine
    /// budget; `None` for an enrolment.
    pub fn machine(&self) -> Option<&str> {
        self.machine.as_deref()
    }
}

/// The vault's request handling: its key, its clock and its limits. Each
/// call is given the store to use, so the transport can run several at once,
/// each on its own connection.
pub struct Vault {
    key: SigningKey,
    now: fn() -> u64,
    limits: Limits,
}

impl Vault {
    pub fn new(key: SigningKey, now: fn() -> u64, limits: Limits) -> Vault {
        Vault { key, now, limits }
    }

    /// Before a body of `length` bytes is read: whether it may be, and
    /// whose it is (a machine, for a batch or a piece: its signature over
    /// the headers verified, its nonce not used; nobody for an enrolment,
    /// which no one can be authenticated for yet and is small). Only reads
    /// the store: a held body costs the vault no write, and the nonce is
    /// spent once the request is whole ([`Vault::handle`]).
    pub fn admit(
        &self,
        store: &mut dyn Store,
        request: &Request,
        length: usize,
    ) -> Result<Admitted, Reply> {
        let route = Route::parse(&request.method, &request.path).ok_or_else(|| {
            reply(
                404,
                format!("no such route: {} {}", request.method, request.path),
            )
        })?;
        let max = route.max_body();
        if length > max {
            return Err(refuse(
                413,
                format!(
                    "a body of {length} bytes is over the vault's {max}-byte limit for {} {}",
                    request.method, request.path
                ),
            ));
        }
        // A machine's body is admitted only from a known, unrevoked machine
        // whose signature over the headers (this length, the body's hash)
        // verifies, with a fresh nonce and room in its quota; the body is
        // held to that hash once it is read. Other routes take no body but
        // an enrolment's, which is small and carries its own proof.
        if route.access() != Access::Machine || max == 0 {
            return Ok(Admitted { machine: None });
        }
        let auth = auth_headers(request)?;
        let (id, key) = self.known_machine(store, &auth.machine)?;
        let now = (self.now)();
        auth.verify_headers(&key, &request.method, &request.path, length as u64, now)
            .map_err(|e| refuse(401, format!("machine {id}: {e}")))?;
        if store
            .nonce_seen(&id, &vault::hex(&auth.nonce))
            .map_err(internal)?
        {
            return Err(refuse(
                401,
                format!("machine {id}: replayed request: this nonce was already used"),
            ));
        }
        let used = store.usage(&auth.machine, day_of(now)).map_err(internal)?;
        if !used.fits(
            Usage {
                entries: 1,
                bytes: length as u64,
            },
            &self.limits.quota,
        ) {
            return Err(self.over_quota(&auth.machine, used, now));
        }
        Ok(Admitted { machine: Some(id) })
    }

    /// Answers a request whose body (if any) was read: a machine's is
    /// authenticated whole here (signature, freshness, nonce spent, body).
    pub fn handle(&self, store: &mut dyn Store, request: &Request) -> Reply {
        let method = request.method.as_str();
        let path = request.path.as_str();
        let Some(route) = Route::parse(method, path) else {
            return reply(404, format!("no such route: {method} {path}"));
        };
        let mut proven = false;
        let mut known = None;
        let mut machine = |store: &mut dyn Store| {
            let who = self.authenticate(store, request);
            proven = who.is_ok();
            known = who
                .as_ref()
                .ok()
                .map(|(id, key)| Box::new((id.clone(), *key)));
            who
        };
        let result = match route {
            Route::Recipients => self.recipients(store),
            Route::Restores => self.restores(store),
            Route::Enroll => self.enroll(store, request),
            Route::Head(session) => {
                machine(store).and_then(|(machine, _)| self.head(store, &machine, session))
            }
            Route::Batch => machine(store)
                .and_then(|(machine, key)| self.batch(store, &machine, &key, &request.body)),
            Route::Piece => machine(store)
                .and_then(|(machine, key)| self.piece(store, &machine, &key, &request.body)),
            Route::Tally => machine(store)
                .and_then(|(machine, key)| self.tally(store, &machine, &key, &request.body)),
            _ => {
                let reader = self.reader(store, request);
                proven = reader.is_ok();
                reader.and_then(|()| self.read(store, request, route))
            }
        };
        let mut reply = result.unwrap_or_else(|r| r);
        reply.proven = proven;
        reply.machine = known;
        if reply.pull.is_none()
            && let Some(nonce) = request_nonce(request)
        {
            reply.signature = Some(Box::new(vault::sign_reply(
                &self.key,
                &nonce,
                method,
                path,
                reply.status,
                &reply.body,
            )));
        }
        reply
    }

    /// An admin's read (the reader was checked).
    fn read(
        &self,
        store: &mut dyn Store,
        request: &Request,
        route: Route<'_>,
    ) -> Result<Reply, Reply> {
        match route {
            Route::Sessions => self.sessions(store),
            Route::Machines => self.machines(store),
            Route::Machine(id) => self.machine(store, id),
            Route::Batches(machine, session) => pull(request, machine, session, PullOf::Batches),
            Route::Forks => self.forks(store),
            Route::Pieces(machine, session) => pull(request, machine, session, PullOf::Transcripts),
            Route::Tallies => Ok(bytes(
                200,
                store.tallies().map_err(internal)?.concat().into_bytes(),
            )),
            _ => Err(reply(
                404,
                format!("no such route: {} {}", request.method, request.path),
            )),
        }
    }

    /// A pull's last frame, as `u32 BE length, bytes`: the vault's signature
    /// over the `frames` frames sent before it, whose BLAKE3 (length
    /// prefixes included) is `digest`, answering the request's nonce.
    pub fn end_frame(&self, pull: &Pull, frames: u64, digest: [u8; 32]) -> Vec<u8> {
        let end = PullEnd::sign(
            &self.key,
            pull.nonce,
            &pull.machine,
            &pull.session,
            pull.of,
            frames,
            digest,
        )
        .render();
        let mut frame = Vec::with_capacity(4 + end.len());
        frame.extend_from_slice(&(end.len() as u32).to_be_bytes());
        frame.extend_from_slice(end.as_bytes());
        frame
    }

    /// The next frame of a pull, as `u32 BE length, bytes`: the chain's
    /// first batch after `after` (the first seq of the last one sent, and
    /// 0), or its first transcript piece after `after` (anchor seq and
    /// first byte of the last one sent), with where it is; `None` at the
    /// end.
    pub fn next_frame(
        &self,
        store: &mut dyn Store,
        pull: &Pull,
        after: Option<(u64, u64)>,
    ) -> Result<Option<super::Placed>, StoreError> {
        let next = match pull.of {
            PullOf::Batches => store
                .batch_after(&pull.machine, &pull.session, after.map(|(first, _)| first))?
                .map(|(first, body)| ((first, 0), body)),
            PullOf::Transcripts => store.piece_after(&pull.machine, &pull.session, after)?,
        };
        Ok(next.map(|(at, body)| {
            let mut frame = Vec::with_capacity(4 + body.len());
            frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
            frame.extend_from_slice(&body);
            (at, frame)
        }))
    }

    fn over_quota(&self, machine: &str, used: Usage, now: u64) -> Reply {
        let q = &self.limits.quota;
        let reset = (day_of(now) + 1) * 86_400;
        let mut r = refuse(
            429,
            format!(
                "machine {machine} is over its daily quota: it stored {} entries and {} bytes today, of {} entries and {} bytes a day; the quota resets at 00:00 UTC, in {} s",
                used.entries,
                used.bytes,
                q.entries_per_day,
                q.bytes_per_day,
                reset - now
            ),
        );
        r.retry_after = Some(reset - now);
        r
    }

    fn recipients(&self, store: &mut dyn Store) -> Result<Reply, Reply> {
        match store.recipients() {
            Ok(Some(doc)) => Ok(reply(200, doc)),
            Ok(None) => Err(reply(
                404,
                "no recipients document installed: run `nd7-vault recipients` on the vault",
            )),
            Err(e) => Err(internal(e)),
        }
    }

    fn restores(&self, store: &mut dyn Store) -> Result<Reply, Reply> {
        let notices = store.restores().map_err(internal)?;
        Ok(bytes(200, notices.concat().into_bytes()))
    }

    /// The enrolled, unrevoked machine `id`, and its key.
    fn known_machine(&self, store: &mut dyn Store, id: &str) -> Result<(String, PublicKey), Reply> {
        let row = store
            .machine(id)
            .map_err(internal)?
            .ok_or_else(|| refuse(401, format!("unknown machine {id:?}: enrol it first")))?;
        if let Some(at) = row.revoked {
            let mut r = refuse(
                403,
                format!(
                    "machine {id} was revoked at {at} (Unix time): an admin must enrol it again with a new token"
                ),
            );
            r.revoked = Some(row.id);
            return Err(r);
        }
        Ok((row.id, row.enrolment.key))
    }

    /// The machine a request is from: its signature, its freshness, its
    /// nonce (spent here), and the body read against the hash the signature
    /// names. Returns the machine's id and key.
    fn authenticate(
        &self,
        store: &mut dyn Store,
        request: &Request,
    ) -> Result<(String, PublicKey), Reply> {
        let auth = auth_headers(request)?;
        let (id, key) = self.known_machine(store, &auth.machine)?;
        self.check_fresh(store, &auth, &key, &id, request, request.body.len() as u64)?;
        auth.verify_body(&request.body)
            .map_err(|e| refuse(401, format!("machine {id}: {e}")))?;
        Ok((id, key))
    }

    /// Checks a request's signature over its headers (for a body of
    /// `length` bytes) and its freshness, and spends its nonce.
    fn check_fresh(
        &self,
        store: &mut dyn Store,
        auth: &RequestAuth,
        key: &PublicKey,
        nonce_owner: &str,
        request: &Request,
        length: u64,
    ) -> Result<(), Reply> {
        let now = (self.now)();
        auth.verify_headers(key, &request.method, &request.path, length, now)
            .map_err(|e| refuse(401, format!("machine {}: {e}", auth.machine)))?;
        let window = 2 * vault::MAX_CLOCK_SKEW_SECS;
        match store
            .note_nonce(
                nonce_owner,
                &vault::hex(&auth.nonce),
                auth.time,
                now.saturating_sub(window),
                self.limits.requests_per_window,
            )
            .map_err(internal)?
        {
            NonceUse::First => Ok(()),
            NonceUse::Replayed => Err(refuse(
                401,
                format!(
                    "machine {}: replayed request: this nonce was already used",
                    auth.machine
                ),
            )),
            NonceUse::TooMany(n) => {
                let mut r = refuse(
                    429,
                    format!(
                        "machine {}: too many requests: {n} in the last {window} s, the most the vault takes",
                        auth.machine
                    ),
                );
                r.retry_after = Some(window);
                Err(r)
            }
        }
    }

    fn enroll(&self, store: &mut dyn Store, request: &Request) -> Result<Reply, Reply> {
        let enrolment = Enrolment::parse(&request.body).map_err(|e| refuse(400, e.to_string()))?;
        let auth = auth_headers(request)?;
        let id = enrolment.machine_id();
        if auth.machine != id {
            return Err(refuse(
                400,
                format!(
                    "the request names machine {:?}, but its key's id is {id}",
                    auth.machine
                ),
            ));
        }
        let now = (self.now)();
        auth.verify(
            &enrolment.key,
            &request.method,
            &request.path,
            &request.body,
            now,
        )
        .map_err(|e| refuse(401, format!("machine {id}: {e}")))?;
        let doc = store.recipients().map_err(internal)?.ok_or_else(|| {
            refuse(
                409,
                "no recipients document installed, so no organisation key to check the token against",
            )
        })?;
        let org = Recipients::parse(&doc)
            .map_err(|e| refuse(500, e.to_string()))?
            .org;
        // The same key with the same token, asking again (its first reply
        // was lost): yes again, even once the token has expired. Anything
        // else must hold a valid, unexpired token, which is checked before
        // a nonce is kept, so that nobody without one can fill the table.
        let existing = store.machine(&id).map_err(internal)?;
        // A revoked machine stays out, whatever it sends: its key is not let
        // in again by the token that first let it in.
        if let Some(at) = existing.as_ref().and_then(|m| m.revoked) {
            return Err(refuse(
                403,
                format!(
                    "machine {id} was revoked at {at} (Unix time): an admin must enrol a new key with a new token"
                ),
            ));
        }
        let again = existing.is_some_and(|m| m.enrolment.token_key == enrolment.token_key);
        enrolment
            .verify(&org, (!again).then_some(now))
            .map_err(|e| refuse(403, format!("machine {id}: {e}")))?;
        self.check_fresh(
            store,
            &auth,
            &enrolment.key,
            &enrolment.key.to_hex(),
            request,
            request.body.len() as u64,
        )?;
        match store.add_machine(&id, &enrolment, now).map_err(internal)? {
            Enrolled::New | Enrolled::Again => Ok(reply(200, format!("machine {id}"))),
            Enrolled::TokenUsed => Err(refuse(
                403,
                format!("machine {id}: the enrolment token was used already, by another key"),
            )),
            Enrolled::KeyEnrolled => Err(refuse(
                403,
                format!("machine {id}: this key is enrolled already, with another token"),
            )),
        }
    }

    fn reader(&self, store: &mut dyn Store, request: &Request) -> Result<(), Reply> {
        let token = request
            .header("authorization")
            .and_then(|v| v.strip_prefix("Bearer ").map(str::to_string))
            .ok_or_else(|| refuse(401, "reads need `Authorization: Bearer <read token>`"))?;
        let now = (self.now)();
        match store
            .check_token(&super::token_hash(&token), now)
            .map_err(internal)?
        {
            TokenCheck::Valid => Ok(()),
            TokenCheck::Unknown => Err(refuse(401, "unknown read token")),
            TokenCheck::Expired(at) => Err(refuse(
                401,
                format!("the read token expired at {at} (Unix time)"),
            )),
            TokenCheck::Revoked(at) => Err(refuse(
                401,
                format!("the read token was revoked at {at} (Unix time)"),
            )),
        }
    }

    fn receipt(&self, stored: &StoredBatch) -> String {
        Receipt::sign(
            &self.key,
            stored.stored,
            &stored.checkpoint,
            &stored.signature,
        )
        .render()
    }

    fn head(&self, store: &mut dyn Store, machine: &str, session: &str) -> Result<Reply, Reply> {
        let session = session_from_hex(session)?;
        match store.head(machine, &session) {
            Ok(Some(h)) => Ok(reply(200, self.receipt(&h))),
            Ok(None) => Ok(reply(200, "none")),
            Err(e) => Err(internal(e)),
        }
    }

    fn batch(
        &self,
        store: &mut dyn Store,
        machine: &str,
        key: &PublicKey,
        body: &[u8],
    ) -> Result<Reply, Reply> {
        let batch =
            vault::parse_batch(body).map_err(|e| refuse(400, format!("machine {machine}: {e}")))?;
        let header = &batch.header;
        let range = header.range();
        let names = format!(
            "machine {machine}, session {}, entries {range}",
            header.session
        );
        sent_by(
            machine,
            &header.machine,
            || batch.signed_by(key),
            ("batch", "batch's checkpoint"),
            &names,
        )?;
        let now = (self.now)();
        match store
            .store_batch(&batch, body, now, &self.limits.quota)
            .map_err(internal)?
        {
            Stored::Appended(stored) => Ok(reply(
                200,
                format!("stored {range}\n{}", self.receipt(&stored)),
            )),
            Stored::AlreadyStored(stored) => {
                let receipt = stored.map(|s| self.receipt(&s)).unwrap_or_default();
                Ok(reply(200, format!("already stored {range}\n{receipt}")))
            }
            Stored::Fork { reason, recorded } => {
                let (done, note) = if recorded {
                    ("refused and recorded", "")
                } else {
                    (
                        "refused (not recorded: the machine is over its quota)",
                        "; not recorded",
                    )
                };
                let mut r = reply(
                    409,
                    format!("{done}: batch {range} would fork the chain: {reason}"),
                );
                r.note = Some(format!("{names}: would fork the chain: {reason}{note}"));
                Err(r)
            }
            Stored::Unlinked(why) => {
                let mut r = reply(
                    409,
                    format!("refused: batch {range} does not link onto the stored chain: {why}"),
                );
                r.note = Some(format!("{names}: does not link: {why}"));
                Err(r)
            }
            Stored::OverQuota(used) => Err(self.over_quota(machine, used, now)),
        }
    }

    /// A transcript piece: signed by the machine that sends it, of bytes an
    /// entry the vault already holds anchors. Its contents are the admins'
    /// to check against that anchor; the vault keeps the first piece of
    /// each anchor and first byte, and acknowledges a resend.
    fn piece(
        &self,
        store: &mut dyn Store,
        machine: &str,
        key: &PublicKey,
        body: &[u8],
    ) -> Result<Reply, Reply> {
        let piece =
            vault::parse_piece(body).map_err(|e| refuse(400, format!("machine {machine}: {e}")))?;
        let header = &piece.header;
        let names = header.names();
        sent_by(
            machine,
            &header.machine,
            || piece.signed_by(key),
            ("piece", "piece"),
            &names,
        )?;
        let range = format!("{}..{}", header.from, header.to);
        let now = (self.now)();
        match store
            .store_piece(header, body, now, &self.limits.quota)
            .map_err(internal)?
        {
            PieceStored::Stored(stored) => Ok(reply(
                200,
                format!(
                    "stored {} {range}\n{}",
                    header.anchor,
                    PieceReceipt::sign(&self.key, stored, &piece).render()
                ),
            )),
            // The first piece of this anchor and first byte is kept, and is
            // what the receipt names.
            PieceStored::AlreadyStored(stored, kept) => {
                let kept = vault::parse_piece(&kept).map_err(|e| {
                    internal(super::StoreError::new("read a stored transcript piece", e))
                })?;
                Ok(reply(
                    200,
                    format!(
                        "already stored {} {range}\n{}",
                        header.anchor,
                        PieceReceipt::sign(&self.key, stored, &kept).render()
                    ),
                ))
            }
            PieceStored::NotAnchored => {
                let mut r = reply(
                    409,
                    format!(
                        "refused: entry {} is not stored yet: ship the entries before the transcript they anchor",
                        header.anchor
                    ),
                );
                r.note = Some(format!("{names}: its anchor is not stored"));
                Err(r)
            }
            PieceStored::OverQuota(used) => Err(self.over_quota(machine, used, now)),
        }
    }

    /// A machine's tally: its own, signed by its key, kept unless a later
    /// one is. The receipts in it are not checked here: admins check them
    /// against this vault's key, and blame a machine whose receipts are not
    /// the vault's (ADR-0129).
    fn tally(
        &self,
        store: &mut dyn Store,
        machine: &str,
        key: &PublicKey,
        body: &[u8],
    ) -> Result<Reply, Reply> {
        let text = std::str::from_utf8(body).map_err(|_| refuse(400, "the tally is not UTF-8"))?;
        let (tally, rest) = Tally::parse_one(text).map_err(|e| refuse(400, e.to_string()))?;
        if !rest.is_empty() {
            return Err(refuse(400, "the body holds more than one tally"));
        }
        sent_by(
            machine,
            &tally.machine,
            || tally.verify(key).is_ok(),
            ("tally", "tally"),
            &format!("machine {machine}"),
        )?;
        // Kept as `render` writes it, not as sent: tallies are served one
        // after another, and one sent without its last newline would run
        // into the next and leave none readable.
        let kept = store
            .set_tally(machine, tally.at, &tally.render())
            .map_err(internal)?;
        Ok(reply(
            200,
            if kept {
                format!("tally {}", tally.at)
            } else {
                format!("a later tally is kept; not tally {}", tally.at)
            },
        ))
    }

    fn sessions(&self, store: &mut dyn Store) -> Result<Reply, Reply> {
        let rows = store.sessions().map_err(internal)?;
        let mut text = String::new();
        for (machine, session, last) in rows {
            text.push_str(&format!(
                "{machine} {} {last}\n",
                vault::hex(session.as_bytes())
            ));
        }
        Ok(bytes(200, text.into_bytes()))
    }

    /// Every machine's enrolment record, one after another.
    fn machines(&self, store: &mut dyn Store) -> Result<Reply, Reply> {
        let rows = store.machines().map_err(internal)?;
        let text: String = rows.iter().map(|m| m.enrolment.render()).collect();
        Ok(bytes(200, text.into_bytes()))
    }

    fn machine(&self, store: &mut dyn Store, id: &str) -> Result<Reply, Reply> {
        match store.machine(id).map_err(internal)? {
            Some(m) => Ok(reply(200, m.enrolment.render())),
            None => Err(reply(404, format!("no machine {id:?} is enrolled"))),
        }
    }

    fn forks(&self, store: &mut dyn Store) -> Result<Reply, Reply> {
        let rows = store.forks().map_err(internal)?;
        let mut text = String::new();
        for f in rows {
            text.push_str(&format!(
                "{} {} {}..{}: {}\n",
                f.machine,
                vault::hex(f.session.as_bytes()),
                f.first,
                f.last,
                f.reason
            ));
        }
        Ok(bytes(200, text.into_bytes()))
    }
}

/// A pull: the reply's body is streamed by the transport, one batch or
/// piece at a time ([`Vault::next_frame`]), ended by a frame signed for the
/// request's nonce, which a pull must carry.
fn pull(request: &Request, machine: &str, session: &str, of: PullOf) -> Result<Reply, Reply> {
    let session = session_from_hex(session)?;
    let nonce = request_nonce(request).ok_or_else(|| {
        refuse(
            400,
            "a pull needs an x-nd7-nonce header (32 hex): its last frame is signed for it",
        )
    })?;
    let mut r = bytes(200, Vec::new());
    r.pull = Some(Box::new(Pull {
        machine: machine.to_string(),
        session,
        of,
        nonce,
    }));
    Ok(r)
}

/// The request's `x-nd7-nonce`, which the reply is signed for.
fn request_nonce(request: &Request) -> Option<[u8; 16]> {
    request
        .header(vault::HEADER_NONCE)
        .and_then(|n| vault::unhex::<16>(&n))
}

fn session_from_hex(hex: &str) -> Result<String, Reply> {
    vault::unhex_vec(hex)
        .and_then(|b| String::from_utf8(b).ok())
        .filter(|s| {
            nd7_format::chain::check_session_id(s).is_ok() && s.len() <= vault::MAX_SESSION_ID_BYTES
        })
        .ok_or_else(|| refuse(400, "the session is not a hex-encoded session id"))
}

fn auth_headers(request: &Request) -> Result<RequestAuth, Reply> {
    RequestAuth::from_headers(|name| request.header(name)).map_err(|e| refuse(401, e.to_string()))
}

/// Signs a restore notice for `nd7-vault restored`.
pub fn restore_notice(key: &SigningKey, backup: u64, restored: u64) -> String {
    RestoreNotice::sign(key, backup, restored).render()
}
