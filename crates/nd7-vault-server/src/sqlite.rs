//! The vault's storage in one SQLite file: the default for a team, one
//! `nd7-vault` process. Each server thread holds its own connection; a batch
//! is stored in one `BEGIN IMMEDIATE` transaction, which SQLite runs one at
//! a time, so the link check and the insert never interleave with another
//! writer's. The file and its WAL are 0600.

use std::ops::Deref;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, OptionalExtension, Transaction, params, params_from_iter};

use super::sql::{self, Backend, Cell, ChainSql, Param, Row, Sql, Tx};
use super::{Enrolled, Quota, StoreError, Usage};
use nd7_format::vault::{BatchHeader, Enrolment};

/// The layout this file holds (`PRAGMA user_version`). 2 was the first of
/// format v2 (session ids repeated in every index row, no revocation, no
/// quotas); 3 keeps each chain once and indexes by its number; 4 holds
/// format v3's recipients documents and enrolment records (ADR-0082).
const FORMAT: i64 = 4;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS tokens (
  hash TEXT PRIMARY KEY, id TEXT NOT NULL UNIQUE, kind TEXT NOT NULL, created INTEGER NOT NULL,
  expires INTEGER NOT NULL, revoked INTEGER);
CREATE TABLE IF NOT EXISTS machines (
  id TEXT PRIMARY KEY, public_key TEXT NOT NULL UNIQUE, token_key TEXT NOT NULL UNIQUE,
  record TEXT NOT NULL, enrolled INTEGER NOT NULL, revoked INTEGER);
CREATE TABLE IF NOT EXISTS nonces (
  machine TEXT NOT NULL, nonce TEXT NOT NULL, time INTEGER NOT NULL, PRIMARY KEY (machine, nonce));
CREATE INDEX IF NOT EXISTS nonces_by_time ON nonces (time);
CREATE INDEX IF NOT EXISTS nonces_by_machine ON nonces (machine, time);
CREATE TABLE IF NOT EXISTS recipients (
  id INTEGER PRIMARY KEY AUTOINCREMENT, doc TEXT NOT NULL, installed INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS chains (
  id INTEGER PRIMARY KEY, machine TEXT NOT NULL, session TEXT NOT NULL, UNIQUE (machine, session));
CREATE TABLE IF NOT EXISTS batches (
  chain INTEGER NOT NULL, first INTEGER NOT NULL, last INTEGER NOT NULL,
  checkpoint TEXT NOT NULL, signature TEXT NOT NULL, body BLOB NOT NULL, stored INTEGER NOT NULL,
  PRIMARY KEY (chain, first)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS batches_by_last ON batches (chain, last);
CREATE TABLE IF NOT EXISTS entries (
  chain INTEGER NOT NULL, seq INTEGER NOT NULL, digest BLOB NOT NULL, key_id BLOB NOT NULL,
  PRIMARY KEY (chain, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS usage (
  machine TEXT NOT NULL, day INTEGER NOT NULL, entries INTEGER NOT NULL, bytes INTEGER NOT NULL,
  PRIMARY KEY (machine, day));
CREATE TABLE IF NOT EXISTS forks (
  id INTEGER PRIMARY KEY AUTOINCREMENT, machine TEXT NOT NULL, session TEXT NOT NULL,
  first INTEGER NOT NULL, last INTEGER NOT NULL, reason TEXT NOT NULL, header BLOB NOT NULL,
  body_blake3 TEXT NOT NULL, seen INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS pieces (
  chain INTEGER NOT NULL, anchor INTEGER NOT NULL, from_byte INTEGER NOT NULL, to_byte INTEGER NOT NULL,
  body BLOB NOT NULL, stored INTEGER NOT NULL, PRIMARY KEY (chain, anchor, from_byte)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS restores (
  id INTEGER PRIMARY KEY AUTOINCREMENT, notice TEXT NOT NULL, installed INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS tallies (
  machine TEXT PRIMARY KEY, at INTEGER NOT NULL, tally TEXT NOT NULL);
";

pub struct SqliteStore {
    db: Connection,
}

fn err(action: &'static str) -> impl FnOnce(rusqlite::Error) -> StoreError {
    move |e| StoreError::new(action, e)
}

impl SqliteStore {
    /// Opens (creating if needed, 0600) the database at `path`. A database
    /// of another layout is refused, untouched.
    pub fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        // Created 0600 before SQLite opens it: SQLite gives the WAL and its
        // index the main file's mode. An existing file is narrowed to 0600
        // by its path: opening and closing it here would drop the POSIX
        // locks this process's other connections hold on it (a close drops
        // them all), and another process would then take their WAL for
        // abandoned.
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
        {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                    .map_err(|e| StoreError::new("open the database", e))?;
            }
            Err(e) => return Err(StoreError::new("open the database", e)),
        }
        let mut db = Connection::open(path).map_err(err("open the database"))?;
        // The server's threads and the admin commands (`nd7-vault
        // recipients`, …) may write at once: wait for each other's writes
        // rather than fail.
        db.busy_timeout(std::time::Duration::from_secs(30))
            .map_err(err("set up the database"))?;
        // Refused before anything is written, WAL mode included.
        check_format(&db)?;
        db.execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;")
            .map_err(err("set up the database"))?;
        // Checking the format again and creating the tables is one
        // transaction, so two openers of a new file never see each other
        // half-way.
        let tx = db
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(err("read the database's format"))?;
        check_format(&tx)?;
        tx.execute_batch(SCHEMA)
            .and_then(|()| tx.execute_batch(&format!("PRAGMA user_version = {FORMAT};")))
            .and_then(|()| tx.commit())
            .map_err(err("create the tables"))?;
        Ok(SqliteStore { db })
    }
}

/// Refuses a database of another layout: one that has tables but not this
/// layout's `user_version`.
fn check_format(db: &Connection) -> Result<(), StoreError> {
    let version: i64 = db
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(err("read the database's format"))?;
    let tables: i64 = db
        .query_row("SELECT COUNT(*) FROM sqlite_master", [], |r| r.get(0))
        .map_err(err("read the database's format"))?;
    if version != FORMAT && (version != 0 || tables != 0) {
        let what = match version {
            0 | 1 => "vault format 1".to_string(),
            2 => "the first database layout of vault format 2".to_string(),
            3 => "the database layout of vault format 2".to_string(),
            v => format!("database layout {v}"),
        };
        return Err(StoreError {
            action: "open the database",
            detail: format!(
                "it holds {what}, and this nd7-vault serves database layout {FORMAT} only (docs/vault.md)"
            ),
        });
    }
    Ok(())
}

/// A SQLite connection, or a transaction on one, as the shared statements
/// run on it. Statements are prepared once per connection and kept.
struct Lite<D>(D);

impl rusqlite::ToSql for Param<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match *self {
            Param::Int(n) => ToSqlOutput::from(n),
            Param::Text(t) => ToSqlOutput::from(t),
            Param::Blob(b) => ToSqlOutput::from(b),
        })
    }
}

fn cell(value: ValueRef<'_>) -> Cell {
    match value {
        ValueRef::Integer(n) => Cell::Int(n),
        ValueRef::Text(t) => String::from_utf8(t.to_vec()).map_or(Cell::Null, Cell::Text),
        ValueRef::Blob(b) => Cell::Blob(b.to_vec()),
        ValueRef::Null | ValueRef::Real(_) => Cell::Null,
    }
}

impl<D: Deref<Target = Connection>> Sql for Lite<D> {
    fn execute(
        &mut self,
        action: &'static str,
        sql: &str,
        params: &[Param<'_>],
    ) -> Result<u64, StoreError> {
        self.0
            .prepare_cached(&sql.replace('$', "?"))
            .and_then(|mut q| q.execute(params_from_iter(params)))
            .map(|n| n as u64)
            .map_err(err(action))
    }

    fn query(
        &mut self,
        action: &'static str,
        sql: &str,
        params: &[Param<'_>],
    ) -> Result<Vec<Row>, StoreError> {
        let mut q = self
            .0
            .prepare_cached(&sql.replace('$', "?"))
            .map_err(err(action))?;
        let columns = q.column_count();
        let mut rows = q.query(params_from_iter(params)).map_err(err(action))?;
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(err(action))? {
            let cells = (0..columns)
                .map(|i| r.get_ref(i).map(cell))
                .collect::<Result<Vec<_>, _>>()
                .map_err(err(action))?;
            out.push(Row(cells));
        }
        Ok(out)
    }
}

impl<D: Deref<Target = Connection>> ChainSql for Lite<D> {
    fn charge(
        &mut self,
        machine: &str,
        day: u64,
        more: Usage,
        quota: &Quota,
    ) -> Result<Option<Usage>, StoreError> {
        let used = sql::usage(self, machine, day)?;
        if !used.fits(more, quota) {
            return Ok(Some(used));
        }
        self.0
            .execute(
                "INSERT INTO usage (machine, day, entries, bytes) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (machine, day) DO UPDATE SET entries = entries + ?3, bytes = bytes + ?4",
                params![machine, day as i64, more.entries as i64, more.bytes as i64],
            )
            .map_err(err("count the machine's usage"))?;
        Ok(None)
    }

    fn insert_index(&mut self, chain: i64, header: &BatchHeader) -> Result<(), StoreError> {
        let mut insert = self
            .0
            .prepare_cached(
                "INSERT INTO entries (chain, seq, digest, key_id) VALUES (?1, ?2, ?3, ?4)",
            )
            .map_err(err("store the index"))?;
        for e in &header.index {
            insert
                .execute(params![
                    chain,
                    e.seq as i64,
                    &e.digest.0[..],
                    &header.key.0[..]
                ])
                .map_err(err("store the index"))?;
        }
        Ok(())
    }
}

impl Tx for Lite<Transaction<'_>> {
    fn chain(&mut self, machine: &str, session: &str) -> Result<Option<i64>, StoreError> {
        sql::chain_id(self, machine, session)
    }

    fn chain_or_new(&mut self, machine: &str, session: &str) -> Result<i64, StoreError> {
        if let Some(id) = self.chain(machine, session)? {
            return Ok(id);
        }
        self.0
            .execute(
                "INSERT INTO chains (machine, session) VALUES (?1, ?2)",
                params![machine, session],
            )
            .map_err(err("add a chain"))?;
        Ok(self.0.last_insert_rowid())
    }

    fn commit(self: Box<Self>, action: &'static str) -> Result<(), StoreError> {
        self.0.commit().map_err(err(action))
    }
}

impl SqliteStore {
    fn immediate(&mut self, action: &'static str) -> Result<Transaction<'_>, StoreError> {
        self.db
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(err(action))
    }
}

impl Backend for SqliteStore {
    fn sql(&mut self) -> Box<dyn Sql + '_> {
        Box::new(Lite(&self.db))
    }

    /// IMMEDIATE: the write lock is taken at BEGIN, so no other writer runs
    /// between what the transaction reads and what it writes.
    fn begin(&mut self, action: &'static str) -> Result<Box<dyn Tx + '_>, StoreError> {
        Ok(Box::new(Lite(self.immediate(action)?)))
    }

    fn enrol(&mut self, id: &str, enrolment: &Enrolment, now: u64) -> Result<Enrolled, StoreError> {
        let tx = self.immediate("enrol a machine")?;
        let key = enrolment.key.to_hex();
        let token_key = enrolment.token_key.to_hex();
        let found: Option<(String, String)> = tx
            .query_row(
                "SELECT public_key, token_key FROM machines WHERE public_key = ?1 OR token_key = ?2",
                params![key, token_key],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(err("enrol a machine"))?;
        let outcome = match found {
            Some((k, t)) if k == key && t == token_key => Enrolled::Again,
            Some((k, _)) if k == key => Enrolled::KeyEnrolled,
            Some(_) => Enrolled::TokenUsed,
            None => {
                tx.execute(
                    "INSERT INTO machines (id, public_key, token_key, record, enrolled) VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![id, key, token_key, enrolment.render(), now as i64],
                )
                .map_err(err("enrol a machine"))?;
                Enrolled::New
            }
        };
        tx.commit().map_err(err("enrol a machine"))?;
        Ok(outcome)
    }
}
