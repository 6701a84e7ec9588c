//! The vault's storage in PostgreSQL, for an organisation past one machine:
//! any number of `nd7-vault serve` processes share one database behind a
//! load balancer, and hold nothing of their own but their connections.
//!
//! What must not race across servers is a chain's link check and insert:
//! [`Store::store_batch`] runs in one transaction that first takes the
//! chain's row `FOR UPDATE` (creating it if this is the chain's first
//! batch), so a second server storing into the same chain waits, then sees
//! what the first committed and acknowledges or refuses accordingly. Quotas
//! are counted by a conditional `UPDATE`, which PostgreSQL re-checks after
//! waiting on a concurrent one, so two servers cannot both spend the same
//! room. A transcript piece ([`Store::store_piece`]) takes the same lock.
//! Enrolment relies on the unique keys of `machines`.

use postgres::{Client, NoTls, Transaction};

use super::sqlite::{index_row, stored_batch};
use super::{
    ChainTx, Enrolled, ForkRow, MachineRow, NonceUse, PieceStored, Quota, Store, StoreError,
    Stored, StoredBatch, TokenCheck, TokenRow, Usage, link_and_store, store_piece, token_id,
};
use nd7_format::vault::{Batch, BatchHeader, Digest, Enrolment, KeyId, PieceHeader};

/// The layout this database holds (the one row of `nd7_vault`): 4 holds
/// format v3's recipients documents and enrolment records (ADR-0082).
const FORMAT: i32 = 4;

/// Taken while creating the tables, so two servers starting at once on an
/// empty database do not trip over each other's `CREATE`.
const SCHEMA_LOCK: i64 = 0x6e64_375f_7661_756c; // "nd7_vaul"

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS nd7_vault (format INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS tokens (
  hash TEXT PRIMARY KEY, id TEXT NOT NULL UNIQUE, kind TEXT NOT NULL, created BIGINT NOT NULL,
  expires BIGINT NOT NULL, revoked BIGINT);
CREATE TABLE IF NOT EXISTS machines (
  id TEXT PRIMARY KEY, public_key TEXT NOT NULL UNIQUE, token_key TEXT NOT NULL UNIQUE,
  record TEXT NOT NULL, enrolled BIGINT NOT NULL, revoked BIGINT);
CREATE TABLE IF NOT EXISTS nonces (
  machine TEXT NOT NULL, nonce TEXT NOT NULL, time BIGINT NOT NULL, PRIMARY KEY (machine, nonce));
CREATE INDEX IF NOT EXISTS nonces_by_time ON nonces (time);
CREATE TABLE IF NOT EXISTS recipients (
  id BIGSERIAL PRIMARY KEY, doc TEXT NOT NULL, installed BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS chains (
  id BIGSERIAL PRIMARY KEY, machine TEXT NOT NULL, session TEXT NOT NULL, UNIQUE (machine, session));
CREATE TABLE IF NOT EXISTS batches (
  chain BIGINT NOT NULL REFERENCES chains (id), first BIGINT NOT NULL, last BIGINT NOT NULL,
  checkpoint TEXT NOT NULL, signature TEXT NOT NULL, body BYTEA NOT NULL, stored BIGINT NOT NULL,
  PRIMARY KEY (chain, first));
CREATE INDEX IF NOT EXISTS batches_by_last ON batches (chain, last);
CREATE TABLE IF NOT EXISTS entries (
  chain BIGINT NOT NULL, seq BIGINT NOT NULL, digest BYTEA NOT NULL, key_id BYTEA NOT NULL,
  PRIMARY KEY (chain, seq));
CREATE TABLE IF NOT EXISTS usage (
  machine TEXT NOT NULL, day BIGINT NOT NULL, entries BIGINT NOT NULL, bytes BIGINT NOT NULL,
  PRIMARY KEY (machine, day));
CREATE TABLE IF NOT EXISTS forks (
  id BIGSERIAL PRIMARY KEY, machine TEXT NOT NULL, session TEXT NOT NULL, first BIGINT NOT NULL,
  last BIGINT NOT NULL, reason TEXT NOT NULL, header BYTEA NOT NULL, body_blake3 TEXT NOT NULL,
  seen BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS pieces (
  chain BIGINT NOT NULL REFERENCES chains (id), anchor BIGINT NOT NULL, from_byte BIGINT NOT NULL,
  to_byte BIGINT NOT NULL, body BYTEA NOT NULL, stored BIGINT NOT NULL,
  PRIMARY KEY (chain, anchor, from_byte));
CREATE TABLE IF NOT EXISTS restores (
  id BIGSERIAL PRIMARY KEY, notice TEXT NOT NULL, installed BIGINT NOT NULL);
";

pub struct PgStore {
    db: Client,
}

/// A PostgreSQL error in full: the server's message and detail when it
/// sent one, else the client's words.
fn describe(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => match db.detail() {
            Some(detail) => format!("{}: {detail}", db.message()),
            None => db.message().to_string(),
        },
        None => e.to_string(),
    }
}

fn err(action: &'static str) -> impl FnOnce(postgres::Error) -> StoreError {
    move |e| StoreError::new(action, describe(&e))
}

/// `url` with any password replaced by `***`, for messages and logs.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, tail) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

impl PgStore {
    /// Connects, and creates the tables on an empty database. A database
    /// of another layout is refused, untouched.
    pub fn open(url: &str) -> Result<PgStore, StoreError> {
        let mut db = Client::connect(url, NoTls).map_err(|e| StoreError {
            action: "connect to the database",
            detail: format!("{}: {}", redact(url), describe(&e)),
        })?;
        let mut tx = db.transaction().map_err(err("create the tables"))?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
            .map_err(err("create the tables"))?;
        let exists: bool = tx
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = 'nd7_vault')",
                &[],
            )
            .map_err(err("read the database's format"))?
            .get(0);
        if exists {
            let format: Option<i32> = tx
                .query_opt("SELECT format FROM nd7_vault LIMIT 1", &[])
                .map_err(err("read the database's format"))?
                .map(|r| r.get(0));
            if format != Some(FORMAT) {
                return Err(StoreError {
                    action: "open the database",
                    detail: format!(
                        "it holds vault database layout {}, and this nd7-vault serves layout {FORMAT} only (docs/vault.md)",
                        format.map_or("(none)".to_string(), |f| f.to_string())
                    ),
                });
            }
        } else {
            tx.batch_execute(SCHEMA).map_err(err("create the tables"))?;
            tx.execute("INSERT INTO nd7_vault (format) VALUES ($1)", &[&FORMAT])
                .map_err(err("create the tables"))?;
        }
        tx.commit().map_err(err("create the tables"))?;
        Ok(PgStore { db })
    }

    fn chain_id(&mut self, machine: &str, session: &str) -> Result<Option<i64>, StoreError> {
        Ok(self
            .db
            .query_opt(
                "SELECT id FROM chains WHERE machine = $1 AND session = $2",
                &[&machine, &session],
            )
            .map_err(err("find a chain"))?
            .map(|r| r.get(0)))
    }
}

fn machine_row(row: &postgres::Row) -> Result<MachineRow, StoreError> {
    let record: String = row.get(1);
    Ok(MachineRow {
        id: row.get(0),
        enrolment: Enrolment::parse(record.as_bytes())
            .map_err(|e| StoreError::new("read a machine's record", e))?,
        enrolled: row.get::<_, i64>(2) as u64,
        revoked: row.get::<_, Option<i64>>(3).map(|t| t as u64),
    })
}

fn head_of(
    q: &mut impl postgres::GenericClient,
    chain: i64,
) -> Result<Option<StoredBatch>, StoreError> {
    q.query_opt(
        "SELECT checkpoint, signature, stored FROM batches WHERE chain = $1 ORDER BY last DESC LIMIT 1",
        &[&chain],
    )
    .map_err(err("read a chain's head"))?
    .map(|r| stored_batch(r.get(0), r.get(1), r.get(2)))
    .transpose()
}

fn usage_of(
    q: &mut impl postgres::GenericClient,
    machine: &str,
    day: u64,
) -> Result<Usage, StoreError> {
    Ok(q.query_opt(
        "SELECT entries, bytes FROM usage WHERE machine = $1 AND day = $2",
        &[&machine, &(day as i64)],
    )
    .map_err(err("read the machine's usage"))?
    .map_or(Usage::default(), |r| Usage {
        entries: r.get::<_, i64>(0) as u64,
        bytes: r.get::<_, i64>(1) as u64,
    }))
}

/// A batch's transaction in PostgreSQL, over one chain whose row it holds.
struct Tx<'a, 'b> {
    tx: &'a mut Transaction<'b>,
    chain: i64,
    machine: &'a str,
}

impl ChainTx for Tx<'_, '_> {
    fn head(&mut self) -> Result<Option<StoredBatch>, StoreError> {
        head_of(self.tx, self.chain)
    }

    fn digest_at(&mut self, seq: u64) -> Result<Option<(Digest, KeyId)>, StoreError> {
        self.tx
            .query_opt(
                "SELECT digest, key_id FROM entries WHERE chain = $1 AND seq = $2",
                &[&self.chain, &(seq as i64)],
            )
            .map_err(err("read the index"))?
            .map(|r| index_row(seq, r.get(0), r.get(1)))
            .transpose()
    }

    fn batch_ending_at(&mut self, last: u64) -> Result<Option<StoredBatch>, StoreError> {
        self.tx
            .query_opt(
                "SELECT checkpoint, signature, stored FROM batches WHERE chain = $1 AND last = $2",
                &[&self.chain, &(last as i64)],
            )
            .map_err(err("look up a batch"))?
            .map(|r| stored_batch(r.get(0), r.get(1), r.get(2)))
            .transpose()
    }

    fn charge(
        &mut self,
        day: u64,
        more: Usage,
        quota: &Quota,
    ) -> Result<Option<Usage>, StoreError> {
        let (day, entries, bytes) = (day as i64, more.entries as i64, more.bytes as i64);
        self.tx
            .execute(
                "INSERT INTO usage (machine, day, entries, bytes) VALUES ($1, $2, 0, 0) ON CONFLICT DO NOTHING",
                &[&self.machine, &day],
            )
            .map_err(err("count the machine's usage"))?;
        let max_entries = quota.entries_per_day.min(i64::MAX as u64) as i64;
        let max_bytes = quota.bytes_per_day.min(i64::MAX as u64) as i64;
        let n = self
            .tx
            .execute(
                "UPDATE usage SET entries = entries + $3, bytes = bytes + $4
                 WHERE machine = $1 AND day = $2 AND entries + $3 <= $5 AND bytes + $4 <= $6",
                &[
                    &self.machine,
                    &day,
                    &entries,
                    &bytes,
                    &max_entries,
                    &max_bytes,
                ],
            )
            .map_err(err("count the machine's usage"))?;
        if n == 1 {
            Ok(None)
        } else {
            usage_of(self.tx, self.machine, day as u64).map(Some)
        }
    }

    fn insert(&mut self, batch: &Batch, body: &[u8], now: u64) -> Result<(), StoreError> {
        let header = &batch.header;
        self.tx
            .execute(
                "INSERT INTO batches (chain, first, last, checkpoint, signature, body, stored) VALUES ($1, $2, $3, $4, $5, $6, $7)",
                &[
                    &self.chain,
                    &(header.first as i64),
                    &(header.last().seq as i64),
                    &batch.checkpoint.render(),
                    &nd7_format::vault::hex(&batch.signature),
                    &body,
                    &(now as i64),
                ],
            )
            .map_err(err("store a batch"))?;
        // One statement for the whole index: arrays of seqs and digests.
        let seqs: Vec<i64> = header.index.iter().map(|e| e.seq as i64).collect();
        let digests: Vec<&[u8]> = header.index.iter().map(|e| &e.digest.0[..]).collect();
        self.tx
            .execute(
                "INSERT INTO entries (chain, seq, digest, key_id) SELECT $1, s, d, $4 FROM unnest($2::BIGINT[], $3::BYTEA[]) AS t(s, d)",
                &[&self.chain, &seqs, &digests, &&header.key.0[..]],
            )
            .map_err(err("store the index"))?;
        Ok(())
    }

    fn piece_at(&mut self, anchor: u64, from: u64) -> Result<Option<(u64, Vec<u8>)>, StoreError> {
        Ok(self
            .tx
            .query_opt(
                "SELECT stored, body FROM pieces WHERE chain = $1 AND anchor = $2 AND from_byte = $3",
                &[&self.chain, &(anchor as i64), &(from as i64)],
            )
            .map_err(err("look up a transcript piece"))?
            .map(|r| (r.get::<_, i64>(0) as u64, r.get::<_, Vec<u8>>(1))))
    }

    fn insert_piece(
        &mut self,
        header: &PieceHeader,
        body: &[u8],
        now: u64,
    ) -> Result<(), StoreError> {
        self.tx
            .execute(
                "INSERT INTO pieces (chain, anchor, from_byte, to_byte, body, stored) VALUES ($1, $2, $3, $4, $5, $6)",
                &[
                    &self.chain,
                    &(header.anchor as i64),
                    &(header.from as i64),
                    &(header.to as i64),
                    &body,
                    &(now as i64),
                ],
            )
            .map_err(err("store a transcript piece"))?;
        Ok(())
    }

    fn record_fork(
        &mut self,
        header: &BatchHeader,
        reason: &str,
        body: &[u8],
        now: u64,
    ) -> Result<(), StoreError> {
        self.tx
            .execute(
                "INSERT INTO forks (machine, session, first, last, reason, header, body_blake3, seen) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                &[
                    &header.machine,
                    &header.session,
                    &(header.first as i64),
                    &(header.last().seq as i64),
                    &reason,
                    &header.render(),
                    &blake3::hash(body).to_hex().as_str(),
                    &(now as i64),
                ],
            )
            .map_err(err("record a fork"))?;
        Ok(())
    }
}

impl Store for PgStore {
    fn add_token(&mut self, hash: &str, now: u64, expires: u64) -> Result<String, StoreError> {
        let id = token_id(hash);
        self.db
            .execute(
                "INSERT INTO tokens (hash, id, kind, created, expires) VALUES ($1, $2, 'read', $3, $4)",
                &[&hash, &id, &(now as i64), &(expires as i64)],
            )
            .map_err(err("store a token"))?;
        Ok(id)
    }

    fn check_token(&mut self, hash: &str, now: u64) -> Result<TokenCheck, StoreError> {
        let row = self
            .db
            .query_opt(
                "SELECT expires, revoked FROM tokens WHERE hash = $1 AND kind = 'read'",
                &[&hash],
            )
            .map_err(err("check a read token"))?;
        Ok(match row {
            None => TokenCheck::Unknown,
            Some(r) => match (r.get::<_, i64>(0) as u64, r.get::<_, Option<i64>>(1)) {
                (_, Some(revoked)) => TokenCheck::Revoked(revoked as u64),
                (expires, None) if expires < now => TokenCheck::Expired(expires),
                _ => TokenCheck::Valid,
            },
        })
    }

    fn tokens(&mut self) -> Result<Vec<TokenRow>, StoreError> {
        Ok(self
            .db
            .query(
                "SELECT id, created, expires, revoked FROM tokens ORDER BY created, id",
                &[],
            )
            .map_err(err("list tokens"))?
            .iter()
            .map(|r| TokenRow {
                id: r.get(0),
                created: r.get::<_, i64>(1) as u64,
                expires: r.get::<_, i64>(2) as u64,
                revoked: r.get::<_, Option<i64>>(3).map(|t| t as u64),
            })
            .collect())
    }

    fn revoke_token(&mut self, id: &str, now: u64) -> Result<bool, StoreError> {
        let n = self
            .db
            .execute(
                "UPDATE tokens SET revoked = COALESCE(revoked, $2) WHERE id = $1",
                &[&id, &(now as i64)],
            )
            .map_err(err("revoke a token"))?;
        Ok(n == 1)
    }

    fn add_machine(
        &mut self,
        id: &str,
        enrolment: &Enrolment,
        now: u64,
    ) -> Result<Enrolled, StoreError> {
        let key = enrolment.key.to_hex();
        let token_key = enrolment.token_key.to_hex();
        let inserted = self
            .db
            .execute(
                "INSERT INTO machines (id, public_key, token_key, record, enrolled) VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
                &[&id, &key, &token_key, &enrolment.render(), &(now as i64)],
            )
            .map_err(err("enrol a machine"))?;
        if inserted == 1 {
            return Ok(Enrolled::New);
        }
        let found = self
            .db
            .query_opt(
                "SELECT public_key, token_key FROM machines WHERE public_key = $1 OR token_key = $2 LIMIT 1",
                &[&key, &token_key],
            )
            .map_err(err("enrol a machine"))?;
        Ok(
            match found.map(|r| (r.get::<_, String>(0), r.get::<_, String>(1))) {
                Some((k, t)) if k == key && t == token_key => Enrolled::Again,
                Some((k, _)) if k == key => Enrolled::KeyEnrolled,
                _ => Enrolled::TokenUsed,
            },
        )
    }

    fn machine(&mut self, id: &str) -> Result<Option<MachineRow>, StoreError> {
        self.db
            .query_opt(
                "SELECT id, record, enrolled, revoked FROM machines WHERE id = $1",
                &[&id],
            )
            .map_err(err("look up a machine"))?
            .as_ref()
            .map(machine_row)
            .transpose()
    }

    fn machines(&mut self) -> Result<Vec<MachineRow>, StoreError> {
        self.db
            .query(
                "SELECT id, record, enrolled, revoked FROM machines ORDER BY enrolled, id",
                &[],
            )
            .map_err(err("list machines"))?
            .iter()
            .map(machine_row)
            .collect()
    }

    fn revoke_machine(&mut self, id: &str, now: u64) -> Result<bool, StoreError> {
        let n = self
            .db
            .execute(
                "UPDATE machines SET revoked = COALESCE(revoked, $2) WHERE id = $1",
                &[&id, &(now as i64)],
            )
            .map_err(err("revoke a machine"))?;
        Ok(n == 1)
    }

    fn note_nonce(
        &mut self,
        owner: &str,
        nonce: &str,
        time: u64,
        forget_before: u64,
        cap: u64,
    ) -> Result<NonceUse, StoreError> {
        let mut tx = self.db.transaction().map_err(err("note a nonce"))?;
        tx.execute(
            "DELETE FROM nonces WHERE time < $1",
            &[&(forget_before as i64)],
        )
        .map_err(err("forget old nonces"))?;
        let held: i64 = tx
            .query_one("SELECT COUNT(*) FROM nonces WHERE machine = $1", &[&owner])
            .map_err(err("count nonces"))?
            .get(0);
        let used = if held as u64 >= cap {
            NonceUse::TooMany(held as u64)
        } else {
            let n = tx
                .execute(
                    "INSERT INTO nonces (machine, nonce, time) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                    &[&owner, &nonce, &(time as i64)],
                )
                .map_err(err("note a nonce"))?;
            if n == 1 {
                NonceUse::First
            } else {
                NonceUse::Replayed
            }
        };
        tx.commit().map_err(err("note a nonce"))?;
        Ok(used)
    }

    fn nonce_seen(&mut self, owner: &str, nonce: &str) -> Result<bool, StoreError> {
        Ok(self
            .db
            .query_opt(
                "SELECT 1 FROM nonces WHERE machine = $1 AND nonce = $2",
                &[&owner, &nonce],
            )
            .map_err(err("look up a nonce"))?
            .is_some())
    }

    fn recipients(&mut self) -> Result<Option<String>, StoreError> {
        Ok(self
            .db
            .query_opt("SELECT doc FROM recipients ORDER BY id DESC LIMIT 1", &[])
            .map_err(err("read the recipients document"))?
            .map(|r| r.get(0)))
    }

    fn set_recipients(&mut self, doc: &str, now: u64) -> Result<(), StoreError> {
        self.db
            .execute(
                "INSERT INTO recipients (doc, installed) VALUES ($1, $2)",
                &[&doc, &(now as i64)],
            )
            .map_err(err("store the recipients document"))?;
        Ok(())
    }

    fn head(&mut self, machine: &str, session: &str) -> Result<Option<StoredBatch>, StoreError> {
        match self.chain_id(machine, session)? {
            Some(chain) => head_of(&mut self.db, chain),
            None => Ok(None),
        }
    }

    fn usage(&mut self, machine: &str, day: u64) -> Result<Usage, StoreError> {
        usage_of(&mut self.db, machine, day)
    }

    fn store_batch(
        &mut self,
        batch: &Batch,
        body: &[u8],
        now: u64,
        quota: &Quota,
    ) -> Result<Stored, StoreError> {
        let header = &batch.header;
        let mut tx = self.db.transaction().map_err(err("begin a transaction"))?;
        tx.execute(
            "INSERT INTO chains (machine, session) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            &[&header.machine, &header.session],
        )
        .map_err(err("find a chain"))?;
        // The chain's row, locked until commit: no other server stores into
        // this chain meanwhile, and once it may, it sees this batch.
        let chain: i64 = tx
            .query_one(
                "SELECT id FROM chains WHERE machine = $1 AND session = $2 FOR UPDATE",
                &[&header.machine, &header.session],
            )
            .map_err(err("lock a chain"))?
            .get(0);
        let stored = link_and_store(
            &mut Tx {
                tx: &mut tx,
                chain,
                machine: &header.machine,
            },
            batch,
            body,
            now,
            quota,
        )?;
        tx.commit().map_err(err("commit a batch"))?;
        Ok(stored)
    }

    fn batch_after(
        &mut self,
        machine: &str,
        session: &str,
        after: Option<u64>,
    ) -> Result<Option<(u64, Vec<u8>)>, StoreError> {
        let Some(chain) = self.chain_id(machine, session)? else {
            return Ok(None);
        };
        let after = after.map_or(-1, |a| a as i64);
        Ok(self
            .db
            .query_opt(
                "SELECT first, body FROM batches WHERE chain = $1 AND first > $2 ORDER BY first LIMIT 1",
                &[&chain, &after],
            )
            .map_err(err("read batches"))?
            .map(|r| (r.get::<_, i64>(0) as u64, r.get(1))))
    }

    fn store_piece(
        &mut self,
        header: &PieceHeader,
        body: &[u8],
        now: u64,
        quota: &Quota,
    ) -> Result<PieceStored, StoreError> {
        let mut tx = self.db.transaction().map_err(err("begin a transaction"))?;
        // The chain's row, locked as a batch locks it: a resent piece racing
        // the first through another server waits, then sees it. A chain the
        // vault does not hold gets no row: the piece has no anchor.
        let Some(chain) = tx
            .query_opt(
                "SELECT id FROM chains WHERE machine = $1 AND session = $2 FOR UPDATE",
                &[&header.machine, &header.session],
            )
            .map_err(err("lock a chain"))?
            .map(|r| r.get::<_, i64>(0))
        else {
            return Ok(PieceStored::NotAnchored);
        };
        let stored = store_piece(
            &mut Tx {
                tx: &mut tx,
                chain,
                machine: &header.machine,
            },
            header,
            body,
            now,
            quota,
        )?;
        tx.commit().map_err(err("commit a transcript piece"))?;
        Ok(stored)
    }

    fn piece_after(
        &mut self,
        machine: &str,
        session: &str,
        after: Option<(u64, u64)>,
    ) -> Result<Option<super::Placed>, StoreError> {
        let Some(chain) = self.chain_id(machine, session)? else {
            return Ok(None);
        };
        let (anchor, from) = after.map_or((-1i64, -1i64), |(a, f)| (a as i64, f as i64));
        Ok(self
            .db
            .query_opt(
                "SELECT anchor, from_byte, body FROM pieces WHERE chain = $1 AND (anchor, from_byte) > ($2, $3)
                 ORDER BY anchor, from_byte LIMIT 1",
                &[&chain, &anchor, &from],
            )
            .map_err(err("read transcript pieces"))?
            .map(|r| {
                (
                    (r.get::<_, i64>(0) as u64, r.get::<_, i64>(1) as u64),
                    r.get(2),
                )
            }))
    }

    fn sessions(&mut self) -> Result<Vec<(String, String, u64)>, StoreError> {
        Ok(self
            .db
            .query(
                "SELECT c.machine, c.session, MAX(b.last) FROM chains c JOIN batches b ON b.chain = c.id
                 GROUP BY c.id, c.machine, c.session ORDER BY c.machine, c.session",
                &[],
            )
            .map_err(err("list sessions"))?
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get::<_, i64>(2) as u64))
            .collect())
    }

    fn forks(&mut self) -> Result<Vec<ForkRow>, StoreError> {
        Ok(self
            .db
            .query(
                "SELECT machine, session, first, last, reason, seen FROM forks ORDER BY id",
                &[],
            )
            .map_err(err("list forks"))?
            .iter()
            .map(|r| ForkRow {
                machine: r.get(0),
                session: r.get(1),
                first: r.get::<_, i64>(2) as u64,
                last: r.get::<_, i64>(3) as u64,
                reason: r.get(4),
                seen: r.get::<_, i64>(5) as u64,
            })
            .collect())
    }

    fn add_restore(&mut self, notice: &str, now: u64) -> Result<(), StoreError> {
        self.db
            .execute(
                "INSERT INTO restores (notice, installed) VALUES ($1, $2)",
                &[&notice, &(now as i64)],
            )
            .map_err(err("store a restore notice"))?;
        Ok(())
    }

    fn healthy(&mut self) -> bool {
        !self.db.is_closed()
    }

    fn restores(&mut self) -> Result<Vec<String>, StoreError> {
        Ok(self
            .db
            .query("SELECT notice FROM restores ORDER BY id", &[])
            .map_err(err("read restore notices"))?
            .iter()
            .map(|r| r.get(0))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn passwords_never_reach_a_message() {
        assert_eq!(
            super::redact("postgres://vault:s3cret@db.example.org:5432/nd7?sslmode=disable"),
            "postgres://vault:***@db.example.org:5432/nd7?sslmode=disable"
        );
        assert_eq!(
            super::redact("postgresql://vault@db/nd7"),
            "postgresql://vault@db/nd7"
        );
        assert_eq!(
            super::redact("host=/tmp dbname=nd7"),
            "host=/tmp dbname=nd7"
        );
    }
}
