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

use postgres::types::{ToSql, Type};
use postgres::{Client, GenericClient, NoTls, Transaction};

use super::sql::{self, Backend, Cell, ChainSql, Param, Row, Sql, Tx};
use super::{Enrolled, Quota, StoreError, Usage};
use nd7_format::vault::{BatchHeader, Enrolment};

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
CREATE TABLE IF NOT EXISTS tallies (
  machine TEXT PRIMARY KEY, at BIGINT NOT NULL, tally TEXT NOT NULL);
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
}

/// A PostgreSQL client, or a transaction, as the shared statements run on it.
struct Pg<C>(C);

/// What [`Pg`] runs statements on: the store's client, or a transaction.
trait Conn {
    fn client(&mut self) -> &mut impl GenericClient;
}

impl Conn for &mut Client {
    fn client(&mut self) -> &mut impl GenericClient {
        &mut **self
    }
}

impl Conn for Transaction<'_> {
    fn client(&mut self) -> &mut impl GenericClient {
        self
    }
}

/// One value of a row, by its column's type.
fn cell(row: &postgres::Row, i: usize) -> Cell {
    let value = match *row.columns()[i].type_() {
        Type::INT8 => row.try_get::<_, Option<i64>>(i).map(|v| v.map(Cell::Int)),
        Type::INT4 => row
            .try_get::<_, Option<i32>>(i)
            .map(|v| v.map(|n| Cell::Int(n.into()))),
        Type::TEXT | Type::VARCHAR => row
            .try_get::<_, Option<String>>(i)
            .map(|v| v.map(Cell::Text)),
        Type::BYTEA => row
            .try_get::<_, Option<Vec<u8>>>(i)
            .map(|v| v.map(Cell::Blob)),
        _ => Ok(None),
    };
    value.ok().flatten().unwrap_or_default()
}

fn values<'p>(params: &'p [Param<'_>]) -> Vec<&'p (dyn ToSql + Sync)> {
    params
        .iter()
        .map(|p| -> &(dyn ToSql + Sync) {
            match p {
                Param::Int(n) => n,
                Param::Text(t) => t,
                Param::Blob(b) => b,
            }
        })
        .collect()
}

impl<C: Conn> Sql for Pg<C> {
    fn execute(
        &mut self,
        action: &'static str,
        sql: &str,
        params: &[Param<'_>],
    ) -> Result<u64, StoreError> {
        self.0
            .client()
            .execute(sql, &values(params))
            .map_err(err(action))
    }

    fn query(
        &mut self,
        action: &'static str,
        sql: &str,
        params: &[Param<'_>],
    ) -> Result<Vec<Row>, StoreError> {
        Ok(self
            .0
            .client()
            .query(sql, &values(params))
            .map_err(err(action))?
            .iter()
            .map(|r| Row((0..r.len()).map(|i| cell(r, i)).collect()))
            .collect())
    }
}

impl<C: Conn> ChainSql for Pg<C> {
    fn charge(
        &mut self,
        machine: &str,
        day: u64,
        more: Usage,
        quota: &Quota,
    ) -> Result<Option<Usage>, StoreError> {
        let (day, entries, bytes) = (day as i64, more.entries as i64, more.bytes as i64);
        self.0
            .client()
            .execute(
                "INSERT INTO usage (machine, day, entries, bytes) VALUES ($1, $2, 0, 0) ON CONFLICT DO NOTHING",
                &[&machine, &day],
            )
            .map_err(err("count the machine's usage"))?;
        let max_entries = quota.entries_per_day.min(i64::MAX as u64) as i64;
        let max_bytes = quota.bytes_per_day.min(i64::MAX as u64) as i64;
        let n = self
            .0
            .client()
            .execute(
                "UPDATE usage SET entries = entries + $3, bytes = bytes + $4
                 WHERE machine = $1 AND day = $2 AND entries + $3 <= $5 AND bytes + $4 <= $6",
                &[&machine, &day, &entries, &bytes, &max_entries, &max_bytes],
            )
            .map_err(err("count the machine's usage"))?;
        if n == 1 {
            Ok(None)
        } else {
            sql::usage(self, machine, day as u64).map(Some)
        }
    }

    fn insert_index(&mut self, chain: i64, header: &BatchHeader) -> Result<(), StoreError> {
        // One statement for the whole index: arrays of seqs and digests.
        let seqs: Vec<i64> = header.index.iter().map(|e| e.seq as i64).collect();
        let digests: Vec<&[u8]> = header.index.iter().map(|e| &e.digest.0[..]).collect();
        self.0
            .client()
            .execute(
                "INSERT INTO entries (chain, seq, digest, key_id) SELECT $1, s, d, $4 FROM unnest($2::BIGINT[], $3::BYTEA[]) AS t(s, d)",
                &[&chain, &seqs, &digests, &&header.key.0[..]],
            )
            .map_err(err("store the index"))?;
        Ok(())
    }
}

impl Tx for Pg<Transaction<'_>> {
    /// Takes the chain's row `FOR UPDATE`: a resent piece racing the first
    /// through another server waits, then sees it.
    fn chain(&mut self, machine: &str, session: &str) -> Result<Option<i64>, StoreError> {
        Ok(self
            .0
            .query_opt(
                "SELECT id FROM chains WHERE machine = $1 AND session = $2 FOR UPDATE",
                &[&machine, &session],
            )
            .map_err(err("lock a chain"))?
            .map(|r| r.get::<_, i64>(0)))
    }

    fn chain_or_new(&mut self, machine: &str, session: &str) -> Result<i64, StoreError> {
        self.0
            .execute(
                "INSERT INTO chains (machine, session) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                &[&machine, &session],
            )
            .map_err(err("find a chain"))?;
        // The chain's row, locked until commit: no other server stores into
        // this chain meanwhile, and once it may, it sees this batch.
        Ok(self
            .0
            .query_one(
                "SELECT id FROM chains WHERE machine = $1 AND session = $2 FOR UPDATE",
                &[&machine, &session],
            )
            .map_err(err("lock a chain"))?
            .get(0))
    }

    fn commit(self: Box<Self>, action: &'static str) -> Result<(), StoreError> {
        self.0.commit().map_err(err(action))
    }
}

impl Backend for PgStore {
    fn sql(&mut self) -> Box<dyn Sql + '_> {
        Box::new(Pg(&mut self.db))
    }

    fn begin(&mut self, action: &'static str) -> Result<Box<dyn Tx + '_>, StoreError> {
        Ok(Box::new(Pg(self.db.transaction().map_err(err(action))?)))
    }

    fn enrol(&mut self, id: &str, enrolment: &Enrolment, now: u64) -> Result<Enrolled, StoreError> {
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

    fn connected(&mut self) -> bool {
        !self.db.is_closed()
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
