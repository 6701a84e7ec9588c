//! The vault's storage in one SQLite file: the embedded default behind
//! [`Store`]. A batch, its checkpoint and its clear index live in one
//! transaction, so a batch is either wholly stored or not at all.

use std::path::Path;

use rusqlite::{Connection, OptionalExtension, params};

use super::{ForkRow, Store, StoreError, StoredBatch};
use crate::vault::{Batch, BatchHeader, Checkpoint, Digest, Enrolment, KeyId};

/// The format this file holds (`PRAGMA user_version`).
const FORMAT: i64 = 2;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS tokens (
  hash TEXT PRIMARY KEY, kind TEXT NOT NULL, expires INTEGER NOT NULL, used INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS machines (
  id TEXT PRIMARY KEY, public_key TEXT NOT NULL UNIQUE, token_key TEXT NOT NULL UNIQUE,
  record TEXT NOT NULL, enrolled INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS nonces (
  machine TEXT NOT NULL, nonce TEXT NOT NULL, time INTEGER NOT NULL, PRIMARY KEY (machine, nonce));
CREATE TABLE IF NOT EXISTS recipients (
  id INTEGER PRIMARY KEY AUTOINCREMENT, doc TEXT NOT NULL, installed INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS batches (
  machine TEXT NOT NULL, session TEXT NOT NULL, first INTEGER NOT NULL, last INTEGER NOT NULL,
  checkpoint TEXT NOT NULL, signature TEXT NOT NULL, body BLOB NOT NULL, stored INTEGER NOT NULL,
  PRIMARY KEY (machine, session, first));
CREATE INDEX IF NOT EXISTS batches_by_last ON batches (machine, session, last);
CREATE TABLE IF NOT EXISTS entries (
  machine TEXT NOT NULL, session TEXT NOT NULL, seq INTEGER NOT NULL, digest TEXT NOT NULL,
  key_id TEXT NOT NULL, PRIMARY KEY (machine, session, seq));
CREATE TABLE IF NOT EXISTS forks (
  machine TEXT NOT NULL, session TEXT NOT NULL, first INTEGER NOT NULL, last INTEGER NOT NULL,
  reason TEXT NOT NULL, header BLOB NOT NULL, body_blake3 TEXT NOT NULL, seen INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS restores (
  id INTEGER PRIMARY KEY AUTOINCREMENT, notice TEXT NOT NULL, installed INTEGER NOT NULL);
";

pub struct SqliteStore {
    db: Connection,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path`. A database of
    /// another format (nd7-vault before v2) is refused, untouched.
    pub fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        let mut db = Connection::open(path).map_err(|e| StoreError::new("open the database", e))?;
        // The server and the admin commands (`nd7-vault recipients`, …) may
        // open it at once: wait for each other's writes rather than fail.
        db.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(|e| StoreError::new("set up the database", e))?;
        // Refused before anything is written, WAL mode included.
        check_format(&db)?;
        db.execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;")
            .map_err(|e| StoreError::new("set up the database", e))?;
        // Checking the format again and creating the tables is one
        // transaction, so two openers of a new file never see each other
        // half-way.
        let tx = db
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(|e| StoreError::new("read the database's format", e))?;
        check_format(&tx)?;
        tx.execute_batch(SCHEMA)
            .and_then(|()| tx.execute_batch(&format!("PRAGMA user_version = {FORMAT};")))
            .and_then(|()| tx.commit())
            .map_err(|e| StoreError::new("create the tables", e))?;
        Ok(SqliteStore { db })
    }
}

/// Refuses a database of another format: one that has tables but not
/// this format's `user_version`.
fn check_format(db: &Connection) -> Result<(), StoreError> {
    let version: i64 = db
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(|e| StoreError::new("read the database's format", e))?;
    let tables: i64 = db
        .query_row("SELECT COUNT(*) FROM sqlite_master", [], |r| r.get(0))
        .map_err(|e| StoreError::new("read the database's format", e))?;
    if version != FORMAT && (version != 0 || tables != 0) {
        return Err(StoreError {
            action: "open the database",
            detail: format!(
                "it holds vault format {}, and this nd7-vault serves format {FORMAT} only (docs/vault.md)",
                if version == 0 { 1 } else { version }
            ),
        });
    }
    Ok(())
}

fn stored_batch(
    (checkpoint, signature, stored): (String, String, i64),
) -> Result<StoredBatch, StoreError> {
    let bad = |what: &str| StoreError {
        action: "read a stored batch",
        detail: format!("its {what} is malformed"),
    };
    Ok(StoredBatch {
        checkpoint: Checkpoint::parse(&checkpoint).map_err(|_| bad("checkpoint"))?,
        signature: crate::vault::unhex::<64>(&signature).ok_or_else(|| bad("signature"))?,
        stored: stored as u64,
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

    fn add_machine(
        &mut self,
        id: &str,
        enrolment: &Enrolment,
        now: u64,
    ) -> Result<bool, StoreError> {
        let n = self
            .db
            .execute(
                "INSERT OR IGNORE INTO machines (id, public_key, token_key, record, enrolled) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![
                    id,
                    enrolment.key.to_hex(),
                    enrolment.token_key.to_hex(),
                    enrolment.render(),
                    now as i64
                ],
            )
            .map_err(|e| StoreError::new("enrol a machine", e))?;
        Ok(n == 1)
    }

    fn machine(&mut self, id: &str) -> Result<Option<Enrolment>, StoreError> {
        let record: Option<String> = self
            .db
            .query_row(
                "SELECT record FROM machines WHERE id = ?1",
                params![id],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| StoreError::new("look up a machine", e))?;
        record
            .map(|r| {
                Enrolment::parse(r.as_bytes())
                    .map_err(|e| StoreError::new("read a machine's record", e))
            })
            .transpose()
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

    fn head(&mut self, machine: &str, session: &str) -> Result<Option<StoredBatch>, StoreError> {
        self.db
            .query_row(
                "SELECT checkpoint, signature, stored FROM batches WHERE machine = ?1 AND session = ?2 ORDER BY last DESC LIMIT 1",
                params![machine, session],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()
            .map_err(|e| StoreError::new("read a chain's head", e))?
            .map(stored_batch)
            .transpose()
    }

    fn digest_at(
        &mut self,
        machine: &str,
        session: &str,
        seq: u64,
    ) -> Result<Option<(Digest, KeyId)>, StoreError> {
        let row: Option<(String, String)> = self
            .db
            .query_row(
                "SELECT digest, key_id FROM entries WHERE machine = ?1 AND session = ?2 AND seq = ?3",
                params![machine, session, seq as i64],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(|e| StoreError::new("read the index", e))?;
        row.map(|(d, k)| match (Digest::from_hex(&d), KeyId::from_hex(&k)) {
            (Some(d), Some(k)) => Ok((d, k)),
            _ => Err(StoreError {
                action: "read the index",
                detail: format!("entry {seq} of {machine}/{session} is malformed"),
            }),
        })
        .transpose()
    }

    fn batch_ending_at(
        &mut self,
        machine: &str,
        session: &str,
        last: u64,
    ) -> Result<Option<StoredBatch>, StoreError> {
        self.db
            .query_row(
                "SELECT checkpoint, signature, stored FROM batches WHERE machine = ?1 AND session = ?2 AND last = ?3",
                params![machine, session, last as i64],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()
            .map_err(|e| StoreError::new("look up a batch", e))?
            .map(stored_batch)
            .transpose()
    }

    fn insert_batch(&mut self, batch: &Batch, body: &[u8], now: u64) -> Result<(), StoreError> {
        let header = &batch.header;
        let tx = self
            .db
            .transaction()
            .map_err(|e| StoreError::new("begin a transaction", e))?;
        tx.execute(
            "INSERT INTO batches (machine, session, first, last, checkpoint, signature, body, stored) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                header.machine,
                header.session,
                header.first as i64,
                header.last().seq as i64,
                batch.checkpoint.render(),
                crate::vault::hex(&batch.signature),
                body,
                now as i64
            ],
        )
        .map_err(|e| StoreError::new("store a batch", e))?;
        {
            let mut insert = tx
                .prepare("INSERT INTO entries (machine, session, seq, digest, key_id) VALUES (?1, ?2, ?3, ?4, ?5)")
                .map_err(|e| StoreError::new("store the index", e))?;
            let key = header.key.to_hex();
            for e in &header.index {
                insert
                    .execute(params![
                        header.machine,
                        header.session,
                        e.seq as i64,
                        e.digest.to_hex(),
                        key
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
            .prepare("SELECT machine, session, MAX(last) FROM batches GROUP BY machine, session ORDER BY machine, session")
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

    fn add_restore(&mut self, notice: &str, now: u64) -> Result<(), StoreError> {
        self.db
            .execute(
                "INSERT INTO restores (notice, installed) VALUES (?1, ?2)",
                params![notice, now as i64],
            )
            .map_err(|e| StoreError::new("store a restore notice", e))?;
        Ok(())
    }

    fn restores(&mut self) -> Result<Vec<String>, StoreError> {
        let mut q = self
            .db
            .prepare("SELECT notice FROM restores ORDER BY id")
            .map_err(|e| StoreError::new("read restore notices", e))?;
        let rows = q
            .query_map([], |r| r.get(0))
            .map_err(|e| StoreError::new("read restore notices", e))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(|e| StoreError::new("read restore notices", e))
    }
}
