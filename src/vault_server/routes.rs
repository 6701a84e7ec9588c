//! What each request means: routes, authentication, the link check, and
//! receipts. Independent of the transport: a [`Request`] comes in, a
//! [`Reply`] goes out.

use std::sync::Mutex;

use super::{Link, Store, StoreError, StoredBatch, decide, token_hash};
use crate::vault::{
    self, Enrolment, PublicKey, Receipt, Recipients, RequestAuth, RestoreNotice, SigningKey,
};

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

/// A reply: status, body, and for the log line what a refusal concerned.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub body: Vec<u8>,
    /// Machine, session, entries and reason of a refusal, for the log.
    pub note: Option<String>,
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
    }
}

/// A refusal: its text is also the log's note.
fn refuse(status: u16, text: impl Into<String>) -> Reply {
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

/// The vault's request handling: its storage, its key and its clock.
pub struct Vault {
    store: Mutex<Box<dyn Store>>,
    key: SigningKey,
    now: fn() -> u64,
}

impl Vault {
    pub fn new(store: Box<dyn Store>, key: SigningKey, now: fn() -> u64) -> Vault {
        Vault {
            store: Mutex::new(store),
            key,
            now,
        }
    }

    fn store(&self) -> std::sync::MutexGuard<'_, Box<dyn Store>> {
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn handle(&self, request: &Request) -> Reply {
        let method = request.method.as_str();
        let path = request.path.as_str();
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let result = match (method, segments.as_slice()) {
            ("GET", ["v1", "recipients"]) => self.recipients(),
            ("GET", ["v1", "restores"]) => self.restores(),
            ("POST", ["v1", "enroll"]) => self.enroll(request),
            ("GET", ["v1", "head", session]) => self
                .authenticate(request)
                .and_then(|(machine, _)| self.head(&machine, session)),
            ("POST", ["v1", "batches"]) => self
                .authenticate(request)
                .and_then(|(machine, key)| self.batch(&machine, &key, &request.body)),
            ("GET", ["v1", "sessions"]) => self.reader(request).and_then(|()| self.sessions()),
            ("GET", ["v1", "machines", id]) => self.reader(request).and_then(|()| self.machine(id)),
            ("GET", ["v1", "batches", machine, session]) => self
                .reader(request)
                .and_then(|()| self.batches(machine, session)),
            ("GET", ["v1", "forks"]) => self.reader(request).and_then(|()| self.forks()),
            _ => Err(reply(404, format!("no such route: {method} {path}"))),
        };
        result.unwrap_or_else(|r| r)
    }

    fn recipients(&self) -> Result<Reply, Reply> {
        match self.store().recipients() {
            Ok(Some(doc)) => Ok(reply(200, doc)),
            Ok(None) => Err(reply(
                404,
                "no recipients document installed: run `nd7-vault recipients` on the vault",
            )),
            Err(e) => Err(internal(e)),
        }
    }

    fn restores(&self) -> Result<Reply, Reply> {
        let notices = self.store().restores().map_err(internal)?;
        Ok(Reply {
            status: 200,
            body: notices.concat().into_bytes(),
            note: None,
        })
    }

    /// Checks a machine's signature and the request's freshness, and notes
    /// its nonce; returns the machine's id and key.
    fn authenticate(&self, request: &Request) -> Result<(String, PublicKey), Reply> {
        let auth = auth_headers(request)?;
        let enrolment = self
            .store()
            .machine(&auth.machine)
            .map_err(internal)?
            .ok_or_else(|| {
                refuse(
                    401,
                    format!("unknown machine {:?}: enrol it first", auth.machine),
                )
            })?;
        self.check_fresh(&auth, &enrolment.key, &auth.machine, request)?;
        Ok((auth.machine, enrolment.key))
    }

    fn check_fresh(
        &self,
        auth: &RequestAuth,
        key: &PublicKey,
        nonce_owner: &str,
        request: &Request,
    ) -> Result<(), Reply> {
        let now = (self.now)();
        auth.verify(key, &request.method, &request.path, &request.body, now)
            .map_err(|e| refuse(401, format!("machine {}: {e}", auth.machine)))?;
        let first = self
            .store()
            .first_use_of_nonce(
                nonce_owner,
                &vault::hex(&auth.nonce),
                auth.time,
                now.saturating_sub(2 * vault::MAX_CLOCK_SKEW_SECS),
            )
            .map_err(internal)?;
        if !first {
            return Err(refuse(
                401,
                format!(
                    "machine {}: replayed request: this nonce was already used",
                    auth.machine
                ),
            ));
        }
        Ok(())
    }

    fn enroll(&self, request: &Request) -> Result<Reply, Reply> {
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
        self.check_fresh(&auth, &enrolment.key, &enrolment.key.to_hex(), request)?;
        let now = (self.now)();
        let mut store = self.store();
        let doc = store.recipients().map_err(internal)?.ok_or_else(|| {
            refuse(
                409,
                "no recipients document installed, so no organisation key to check the token against",
            )
        })?;
        let org = Recipients::parse(&doc)
            .map_err(|e| refuse(500, e.to_string()))?
            .org;
        enrolment
            .verify(&org, Some(now))
            .map_err(|e| refuse(403, format!("machine {id}: {e}")))?;
        if !store.add_machine(&id, &enrolment, now).map_err(internal)? {
            return Err(refuse(
                403,
                format!(
                    "machine {id}: the enrolment token was used already, or this key is enrolled"
                ),
            ));
        }
        Ok(reply(200, format!("machine {id}")))
    }

    fn reader(&self, request: &Request) -> Result<(), Reply> {
        let token = request
            .header("authorization")
            .and_then(|v| v.strip_prefix("Bearer ").map(str::to_string))
            .ok_or_else(|| refuse(401, "reads need `Authorization: Bearer <read token>`"))?;
        let now = (self.now)();
        if self
            .store()
            .reader_token_ok(&token_hash(&token), now)
            .map_err(internal)?
        {
            Ok(())
        } else {
            Err(refuse(401, "unknown or expired read token"))
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

    fn head(&self, machine: &str, session: &str) -> Result<Reply, Reply> {
        let session = session_from_hex(session)?;
        match self.store().head(machine, &session) {
            Ok(Some(h)) => Ok(reply(200, self.receipt(&h))),
            Ok(None) => Ok(reply(200, "none")),
            Err(e) => Err(internal(e)),
        }
    }

    fn batch(&self, machine: &str, key: &PublicKey, body: &[u8]) -> Result<Reply, Reply> {
        let batch =
            vault::parse_batch(body).map_err(|e| refuse(400, format!("machine {machine}: {e}")))?;
        let header = &batch.header;
        let names = format!(
            "machine {machine}, session {}, entries {}",
            header.session,
            header.range()
        );
        if header.machine != machine {
            return Err(refuse(
                403,
                format!(
                    "{names}: the batch names machine {:?} but was signed by {machine:?}",
                    header.machine
                ),
            ));
        }
        if !batch.signed_by(key) {
            return Err(refuse(
                400,
                format!("{names}: the batch's checkpoint is not signed by the machine's key"),
            ));
        }
        let now = (self.now)();
        let mut store = self.store();
        let head = store.head(machine, &header.session).map_err(internal)?;
        let link = {
            let store = &mut **store;
            decide(
                header,
                head.as_ref().map(|h| h.checkpoint.last),
                &mut |seq| store.digest_at(machine, &header.session, seq),
            )
            .map_err(internal)?
        };
        let range = header.range();
        match link {
            Link::Append => {
                store.insert_batch(&batch, body, now).map_err(internal)?;
                let stored = StoredBatch {
                    checkpoint: batch.checkpoint.clone(),
                    signature: batch.signature,
                    stored: now,
                };
                Ok(reply(
                    200,
                    format!("stored {range}\n{}", self.receipt(&stored)),
                ))
            }
            Link::AlreadyStored => {
                let stored = match store
                    .batch_ending_at(machine, &header.session, header.last().seq)
                    .map_err(internal)?
                {
                    Some(s) => Some(s),
                    None => head,
                };
                let receipt = stored.map(|s| self.receipt(&s)).unwrap_or_default();
                Ok(reply(200, format!("already stored {range}\n{receipt}")))
            }
            Link::Fork(why) => {
                store
                    .record_fork(header, &why, body, now)
                    .map_err(internal)?;
                let mut r = reply(
                    409,
                    format!("refused and recorded: batch {range} would fork the chain: {why}"),
                );
                r.note = Some(format!("{names}: would fork the chain: {why}"));
                Err(r)
            }
            Link::Unlinked(why) => {
                let mut r = reply(
                    409,
                    format!("refused: batch {range} does not link onto the stored chain: {why}"),
                );
                r.note = Some(format!("{names}: does not link: {why}"));
                Err(r)
            }
        }
    }

    fn sessions(&self) -> Result<Reply, Reply> {
        let rows = self.store().sessions().map_err(internal)?;
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
            note: None,
        })
    }

    fn machine(&self, id: &str) -> Result<Reply, Reply> {
        match self.store().machine(id).map_err(internal)? {
            Some(e) => Ok(reply(200, e.render())),
            None => Err(reply(404, format!("no machine {id:?} is enrolled"))),
        }
    }

    fn batches(&self, machine: &str, session: &str) -> Result<Reply, Reply> {
        let session = session_from_hex(session)?;
        let batches = self.store().batches(machine, &session).map_err(internal)?;
        let mut out = Vec::new();
        for b in batches {
            out.extend_from_slice(&(b.len() as u32).to_be_bytes());
            out.extend_from_slice(&b);
        }
        Ok(Reply {
            status: 200,
            body: out,
            note: None,
        })
    }

    fn forks(&self) -> Result<Reply, Reply> {
        let rows = self.store().forks().map_err(internal)?;
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
            note: None,
        })
    }
}

fn session_from_hex(hex: &str) -> Result<String, Reply> {
    vault::unhex_vec(hex)
        .and_then(|b| String::from_utf8(b).ok())
        .filter(|s| crate::session_log::check_session_id(s).is_ok())
        .ok_or_else(|| refuse(400, "the session is not a hex-encoded session id"))
}

fn auth_headers(request: &Request) -> Result<RequestAuth, Reply> {
    RequestAuth::from_headers(|name| request.header(name)).map_err(|e| refuse(401, e.to_string()))
}

/// Signs a restore notice for `nd7-vault restored`.
pub fn restore_notice(key: &SigningKey, backup: u64, restored: u64) -> String {
    RestoreNotice::sign(key, backup, restored).render()
}
