//! The vault's storage in one SQLite file: the embedded default behind
//! [`Store`]. Ciphertext and the clear index live in the same transaction, so
//! a batch is either wholly stored or not at all.

use std::path::Path;

use rusqlite::{Connection, OptionalExtension, params};

use super::{ForkRow, Store, StoreError, StoredHead};
use crate::chain::Hash;
use crate::vault::{BatchHeader, PublicKey};

const SCHEMA: &str = "
PRAGMA journal_mode = WAL;
PRAGMA synchronous = FULL;
CREATE TABLE IF NOT EXISTS tokens (
  hash TEXT PRIMARY KEY, kind TEXT NOT NULL, expires INTEGER NOT NULL, used INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS machines (
  id TEXT PRIMARY KEY, public_key TEXT NOT NULL UNIQUE, enrolled INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS nonces (
  machine TEXT NOT NULL, nonce TEXT NOT NULL, time INTEGER NOT NULL, PRIMARY KEY (machine, nonce));
CREATE TABLE IF NOT EXISTS recipients (
  id INTEGER PRIMARY KEY AUTOINCREMENT, doc TEXT NOT NULL, installed INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS batches (
  machine TEXT NOT NULL, session TEXT NOT NULL, first INTEGER NOT NULL, last INTEGER NOT NULL,
  last_hash TEXT NOT NULL, body BLOB NOT NULL, stored INTEGER NOT NULL,
  PRIMARY KEY (machine, session, first));
CREATE TABLE IF NOT EXISTS entries (
  machine TEXT NOT NULL, session TEXT NOT NULL, seq INTEGER NOT NULL, hash TEXT NOT NULL,
  ts INTEGER NOT NULL, PRIMARY KEY (machine, session, seq));
CREATE TABLE IF NOT EXISTS forks (
  machine TEXT NOT NULL, session TEXT NOT NULL, first INTEGER NOT NULL, last INTEGER NOT NULL,
  reason TEXT NOT NULL, header BLOB NOT NULL, body_blake3 TEXT NOT NULL, seen INTEGER NOT NULL);
";

pub struct SqliteStore {
    db: Connection,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path`.
    pub fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        let db = Connection::open(path).map_err(|e| StoreError::new("open the database", e))?;
        db.execute_batch(SCHEMA)
            .map_err(|e| StoreError::new("create the tables", e))?;
        Ok(SqliteStore { db })
    }
}

fn hash_of(text: String) -> Result<Hash, StoreError> {
    Hash::from_hex(text.as_bytes()).ok_or_else(|| StoreError {
        action: "read a stored hash",
        detail: format!("{text:?} is not 64 hex digits"),
    })
}

impl Store for SqliteStore {
    fn add_token(&mut self, kind: &str, token_hash: &str, expires: u64) -> Result<(), StoreError> {
        self.db
            .execute(
                "INSERT INTO tokens (hash, kind, expires) VALUES (?1, ?2, ?3)",
                params![token_hash, kind, expires as i64],
            )
            .map_err(|e| StoreError::new("store a token", e))?;
        Ok(())
    }

    fn use_enrol_token(&mut self, token_hash: &str, now: u64) -> Result<bool, StoreError> {
        let n = self
            .db
            .execute(
                "UPDATE tokens SET used = 1 WHERE hash = ?1 AND kind = 'enrol' AND used = 0 AND expires >= ?2",
                params![token_hash, now as i64],
            )
            .map_err(|e| StoreError::new("use an enrolment token", e))?;
        Ok(n == 1)
    }

    fn reader_token_ok(&mut self, token_hash: &str, now: u64) -> Result<bool, StoreError> {
        let found: Option<i64> = self
            .db
            .query_row(
                "SELECT 1 FROM tokens WHERE hash = ?1 AND kind = 'read' AND expires >= ?2",
                params![token_hash, now as i64],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| StoreError::new("check a read token", e))?;
        Ok(found.is_some())
    }

    fn add_machine(&mut self, id: &str, key: &PublicKey, now: u64) -> Result<(), StoreError> {
        self.db
            .execute(
                "INSERT INTO machines (id, public_key, enrolled) VALUES (?1, ?2, ?3)",
                params![id, key.to_hex(), now as i64],
            )
            .map_err(|e| StoreError::new("enrol a machine", e))?;
        Ok(())
    }

    fn machine_key(&mut self, id: &str) -> Result<Option<PublicKey>, StoreError> {
        let key: Option<String> = self
            .db
            .query_row(
                "SELECT public_key FROM machines WHERE id = ?1",
                params![id],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| StoreError::new("look up a machine", e))?;
        Ok(key.and_then(|k| PublicKey::from_hex(&k)))
    }

    fn first_use_of_nonce(
        &mut self,
        machine: &str,
        nonce: &str,
        time: u64,
        forget_before: u64,
    ) -> Result<bool, StoreError> {
        self.db
            .execute(
                "DELETE FROM nonces WHERE time < ?1",
                params![forget_before as i64],
            )
            .map_err(|e| StoreError::new("forget old nonces", e))?;
        let n = self
            .db
            .execute(
                "INSERT OR IGNORE INTO nonces (machine, nonce, time) VALUES (?1, ?2, ?3)",
                params![machine, nonce, time as i64],
            )
            .map_err(|e| StoreError::new("note a nonce", e))?;
        Ok(n == 1)
    }

    fn recipients(&mut self) -> Result<Option<String>, StoreError> {
        self.db
            .query_row(
                "SELECT doc FROM recipients ORDER BY id DESC LIMIT 1",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| StoreError::new("read the recipients document", e))
    }

    fn set_recipients(&mut self, doc: &str, now: u64) -> Result<(), StoreError> {
        self.db
            .execute(
                "INSERT INTO recipients (doc, installed) VALUES (?1, ?2)",
                params![doc, now as i64],
            )
            .map_err(|e| StoreError::new("store the recipients document", e))?;
        Ok(())
    }

    fn head(&mut self, machine: &str, session: &str) -> Result<Option<StoredHead>, StoreError> {
        let row: Option<(i64, String)> = self
            .db
            .query_row(
                "SELECT seq, hash FROM entries WHERE machine = ?1 AND session = ?2 ORDER BY seq DESC LIMIT 1",
                params![machine, session],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(|e| StoreError::new("read a chain's head", e))?;
        row.map(|(seq, hash)| {
            Ok(StoredHead {
                seq: seq as u64,
                hash: hash_of(hash)?,
            })
        })
        .transpose()
    }

    fn hash_at(
        &mut self,
        machine: &str,
        session: &str,
        seq: u64,
    ) -> Result<Option<Hash>, StoreError> {
        let hash: Option<String> = self
            .db
            .query_row(
                "SELECT hash FROM entries WHERE machine = ?1 AND session = ?2 AND seq = ?3",
                params![machine, session, seq as i64],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| StoreError::new("read the index", e))?;
        hash.map(hash_of).transpose()
    }

    fn batch_starting_at(
        &mut self,
        machine: &str,
        session: &str,
        first: u64,
    ) -> Result<Option<(u64, Hash)>, StoreError> {
        let row: Option<(i64, String)> = self
            .db
            .query_row(
                "SELECT last, last_hash FROM batches WHERE machine = ?1 AND session = ?2 AND first = ?3",
                params![machine, session, first as i64],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(|e| StoreError::new("look up a batch", e))?;
        row.map(|(last, hash)| Ok((last as u64, hash_of(hash)?)))
            .transpose()
    }

    fn insert_batch(
        &mut self,
        header: &BatchHeader,
        body: &[u8],
        now: u64,
    ) -> Result<(), StoreError> {
        let tx = self
            .db
            .transaction()
            .map_err(|e| StoreError::new("begin a transaction", e))?;
        let last = header.last();
        tx.execute(
            "INSERT INTO batches (machine, session, first, last, last_hash, body, stored) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![header.machine, header.session, header.first as i64, last.seq as i64, last.hash.to_hex(), body, now as i64],
        )
        .map_err(|e| StoreError::new("store a batch", e))?;
        {
            let mut insert = tx
                .prepare("INSERT INTO entries (machine, session, seq, hash, ts) VALUES (?1, ?2, ?3, ?4, ?5)")
                .map_err(|e| StoreError::new("store the index", e))?;
            for e in &header.index {
                insert
                    .execute(params![
                        header.machine,
                        header.session,
                        e.seq as i64,
                        e.hash.to_hex(),
                        e.ts as i64
                    ])
                    .map_err(|e| StoreError::new("store the index", e))?;
            }
        }
        tx.commit()
            .map_err(|e| StoreError::new("commit a batch", e))
    }

    fn record_fork(
        &mut self,
        header: &BatchHeader,
        reason: &str,
        body: &[u8],
        now: u64,
    ) -> Result<(), StoreError> {
        self.db
            .execute(
                "INSERT INTO forks (machine, session, first, last, reason, header, body_blake3, seen) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![header.machine, header.session, header.first as i64, header.last().seq as i64, reason, header.render(), blake3::hash(body).to_hex().as_str(), now as i64],
            )
            .map_err(|e| StoreError::new("record a fork", e))?;
        Ok(())
    }

    fn batches(&mut self, machine: &str, session: &str) -> Result<Vec<Vec<u8>>, StoreError> {
        let mut q = self
            .db
            .prepare("SELECT body FROM batches WHERE machine = ?1 AND session = ?2 ORDER BY first")
            .map_err(|e| StoreError::new("read batches", e))?;
        let rows = q
            .query_map(params![machine, session], |r| r.get::<_, Vec<u8>>(0))
            .map_err(|e| StoreError::new("read batches", e))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(|e| StoreError::new("read batches", e))
    }

    fn sessions(&mut self) -> Result<Vec<(String, String, u64)>, StoreError> {
        let mut q = self
            .db
            .prepare("SELECT machine, session, MAX(seq) FROM entries GROUP BY machine, session ORDER BY machine, session")
            .map_err(|e| StoreError::new("list sessions", e))?;
        let rows = q
            .query_map([], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get::<_, i64>(2)? as u64))
            })
            .map_err(|e| StoreError::new("list sessions", e))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(|e| StoreError::new("list sessions", e))
    }

    fn forks(&mut self) -> Result<Vec<ForkRow>, StoreError> {
        let mut q = self
            .db
            .prepare("SELECT machine, session, first, last, reason FROM forks ORDER BY seen")
            .map_err(|e| StoreError::new("list forks", e))?;
        let rows = q
            .query_map([], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get::<_, i64>(2)? as u64,
                    r.get::<_, i64>(3)? as u64,
                    r.get(4)?,
                ))
            })
            .map_err(|e| StoreError::new("list forks", e))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(|e| StoreError::new("list forks", e))
    }
}
