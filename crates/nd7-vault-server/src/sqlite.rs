//! The vault's storage in one SQLite file: the default for a team, one
//! `nd7-vault` process. Each server thread holds its own connection; a batch
//! is stored in one `BEGIN IMMEDIATE` transaction, which SQLite runs one at
//! a time, so the link check and the insert never interleave with another
//! writer's. The file and its WAL are 0600.

use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use rusqlite::{Connection, OptionalExtension, Transaction, params};

use super::{
    ChainTx, Enrolled, ForkRow, MachineRow, NonceUse, PieceStored, Quota, Store, StoreError,
    Stored, StoredBatch, TokenCheck, TokenRow, Usage, link_and_store, store_piece, token_id,
};
use nd7_format::vault::{Batch, BatchHeader, Checkpoint, Digest, Enrolment, KeyId, PieceHeader};

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

    fn chain_id(&self, machine: &str, session: &str) -> Result<Option<i64>, StoreError> {
        self.db
            .query_row(
                "SELECT id FROM chains WHERE machine = ?1 AND session = ?2",
                params![machine, session],
                |r| r.get(0),
            )
            .optional()
            .map_err(err("find a chain"))
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

pub(super) fn stored_batch(
    checkpoint: &str,
    signature: &str,
    stored: i64,
) -> Result<StoredBatch, StoreError> {
    let bad = |what: &str| StoreError {
        action: "read a stored batch",
        detail: format!("its {what} is malformed"),
    };
    Ok(StoredBatch {
        checkpoint: Checkpoint::parse(checkpoint).map_err(|_| bad("checkpoint"))?,
        signature: nd7_format::vault::unhex::<64>(signature).ok_or_else(|| bad("signature"))?,
        stored: stored as u64,
    })
}

pub(super) fn index_row(
    seq: u64,
    digest: &[u8],
    key: &[u8],
) -> Result<(Digest, KeyId), StoreError> {
    match (<[u8; 32]>::try_from(digest), <[u8; 16]>::try_from(key)) {
        (Ok(d), Ok(k)) => Ok((Digest(d), KeyId(k))),
        _ => Err(StoreError {
            action: "read the index",
            detail: format!("entry {seq} is malformed"),
        }),
    }
}

fn machine_row(
    (id, record, enrolled, revoked): (String, String, i64, Option<i64>),
) -> Result<MachineRow, StoreError> {
    Ok(MachineRow {
        enrolment: Enrolment::parse(record.as_bytes())
            .map_err(|e| StoreError::new("read a machine's record", e))?,
        id,
        enrolled: enrolled as u64,
        revoked: revoked.map(|t| t as u64),
    })
}

/// A batch's transaction in SQLite, over one chain.
struct Tx<'a> {
    tx: &'a Transaction<'a>,
    chain: i64,
    machine: &'a str,
}

const HEAD: &str =
    "SELECT checkpoint, signature, stored FROM batches WHERE chain = ?1 ORDER BY last DESC LIMIT 1";

fn read_head(db: &Connection, chain: i64) -> Result<Option<StoredBatch>, StoreError> {
    let row: Option<(String, String, i64)> = db
        .query_row(HEAD, params![chain], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .optional()
        .map_err(err("read a chain's head"))?;
    row.map(|(c, s, t)| stored_batch(&c, &s, t)).transpose()
}

impl ChainTx for Tx<'_> {
    fn head(&mut self) -> Result<Option<StoredBatch>, StoreError> {
        read_head(self.tx, self.chain)
    }

    fn digest_at(&mut self, seq: u64) -> Result<Option<(Digest, KeyId)>, StoreError> {
        let row: Option<(Vec<u8>, Vec<u8>)> = self
            .tx
            .prepare_cached("SELECT digest, key_id FROM entries WHERE chain = ?1 AND seq = ?2")
            .and_then(|mut q| {
                q.query_row(params![self.chain, seq as i64], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .optional()
            })
            .map_err(err("read the index"))?;
        row.map(|(d, k)| index_row(seq, &d, &k)).transpose()
    }

    fn batch_ending_at(&mut self, last: u64) -> Result<Option<StoredBatch>, StoreError> {
        let row: Option<(String, String, i64)> = self
            .tx
            .query_row(
                "SELECT checkpoint, signature, stored FROM batches WHERE chain = ?1 AND last = ?2",
                params![self.chain, last as i64],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()
            .map_err(err("look up a batch"))?;
        row.map(|(c, s, t)| stored_batch(&c, &s, t)).transpose()
    }

    fn charge(
        &mut self,
        day: u64,
        more: Usage,
        quota: &Quota,
    ) -> Result<Option<Usage>, StoreError> {
        let used = usage(self.tx, self.machine, day)?;
        if !used.fits(more, quota) {
            return Ok(Some(used));
        }
        self.tx
            .execute(
                "INSERT INTO usage (machine, day, entries, bytes) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (machine, day) DO UPDATE SET entries = entries + ?3, bytes = bytes + ?4",
                params![self.machine, day as i64, more.entries as i64, more.bytes as i64],
            )
            .map_err(err("count the machine's usage"))?;
        Ok(None)
    }

    fn insert(&mut self, batch: &Batch, body: &[u8], now: u64) -> Result<(), StoreError> {
        let header = &batch.header;
        self.tx
            .execute(
                "INSERT INTO batches (chain, first, last, checkpoint, signature, body, stored) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    self.chain,
                    header.first as i64,
                    header.last().seq as i64,
                    batch.checkpoint.render(),
                    nd7_format::vault::hex(&batch.signature),
                    body,
                    now as i64
                ],
            )
            .map_err(err("store a batch"))?;
        let mut insert = self
            .tx
            .prepare_cached(
                "INSERT INTO entries (chain, seq, digest, key_id) VALUES (?1, ?2, ?3, ?4)",
            )
            .map_err(err("store the index"))?;
        for e in &header.index {
            insert
                .execute(params![
                    self.chain,
                    e.seq as i64,
                    &e.digest.0[..],
                    &header.key.0[..]
                ])
                .map_err(err("store the index"))?;
        }
        Ok(())
    }

    fn piece_at(&mut self, anchor: u64, from: u64) -> Result<Option<(u64, Vec<u8>)>, StoreError> {
        self.tx
            .query_row(
                "SELECT stored, body FROM pieces WHERE chain = ?1 AND anchor = ?2 AND from_byte = ?3",
                params![self.chain, anchor as i64, from as i64],
                |r| Ok((r.get::<_, i64>(0)? as u64, r.get::<_, Vec<u8>>(1)?)),
            )
            .optional()
            .map_err(err("look up a transcript piece"))
    }

    fn insert_piece(
        &mut self,
        header: &PieceHeader,
        body: &[u8],
        now: u64,
    ) -> Result<(), StoreError> {
        self.tx
            .execute(
                "INSERT INTO pieces (chain, anchor, from_byte, to_byte, body, stored) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    self.chain,
                    header.anchor as i64,
                    header.from as i64,
                    header.to as i64,
                    body,
                    now as i64
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
                "INSERT INTO forks (machine, session, first, last, reason, header, body_blake3, seen) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![header.machine, header.session, header.first as i64, header.last().seq as i64, reason, header.render(), blake3::hash(body).to_hex().as_str(), now as i64],
            )
            .map_err(err("record a fork"))?;
        Ok(())
    }
}

fn usage(db: &Connection, machine: &str, day: u64) -> Result<Usage, StoreError> {
    let row: Option<(i64, i64)> = db
        .query_row(
            "SELECT entries, bytes FROM usage WHERE machine = ?1 AND day = ?2",
            params![machine, day as i64],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .map_err(err("read the machine's usage"))?;
    Ok(row.map_or(Usage::default(), |(e, b)| Usage {
        entries: e as u64,
        bytes: b as u64,
    }))
}

impl Store for SqliteStore {
    fn add_token(&mut self, hash: &str, now: u64, expires: u64) -> Result<String, StoreError> {
        let id = token_id(hash);
        self.db
            .execute(
                "INSERT INTO tokens (hash, id, kind, created, expires) VALUES (?1, ?2, 'read', ?3, ?4)",
                params![hash, id, now as i64, expires as i64],
            )
            .map_err(err("store a token"))?;
        Ok(id)
    }

    fn check_token(&mut self, hash: &str, now: u64) -> Result<TokenCheck, StoreError> {
        let row: Option<(i64, Option<i64>)> = self
            .db
            .query_row(
                "SELECT expires, revoked FROM tokens WHERE hash = ?1 AND kind = 'read'",
                params![hash],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(err("check a read token"))?;
        Ok(match row {
            None => TokenCheck::Unknown,
            Some((_, Some(revoked))) => TokenCheck::Revoked(revoked as u64),
            Some((expires, None)) if (expires as u64) < now => TokenCheck::Expired(expires as u64),
            Some(_) => TokenCheck::Valid,
        })
    }

    fn tokens(&mut self) -> Result<Vec<TokenRow>, StoreError> {
        let mut q = self
            .db
            .prepare("SELECT id, created, expires, revoked FROM tokens ORDER BY created, id")
            .map_err(err("list tokens"))?;
        let rows = q
            .query_map([], |r| {
                Ok(TokenRow {
                    id: r.get(0)?,
                    created: r.get::<_, i64>(1)? as u64,
                    expires: r.get::<_, i64>(2)? as u64,
                    revoked: r.get::<_, Option<i64>>(3)?.map(|t| t as u64),
                })
            })
            .map_err(err("list tokens"))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(err("list tokens"))
    }

    fn revoke_token(&mut self, id: &str, now: u64) -> Result<bool, StoreError> {
        let n = self
            .db
            .execute(
                "UPDATE tokens SET revoked = COALESCE(revoked, ?2) WHERE id = ?1",
                params![id, now as i64],
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
        let tx = self
            .db
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(err("enrol a machine"))?;
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

    fn machine(&mut self, id: &str) -> Result<Option<MachineRow>, StoreError> {
        self.db
            .query_row(
                "SELECT id, record, enrolled, revoked FROM machines WHERE id = ?1",
                params![id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .optional()
            .map_err(err("look up a machine"))?
            .map(machine_row)
            .transpose()
    }

    fn machines(&mut self) -> Result<Vec<MachineRow>, StoreError> {
        let mut q = self
            .db
            .prepare("SELECT id, record, enrolled, revoked FROM machines ORDER BY enrolled, id")
            .map_err(err("list machines"))?;
        let rows = q
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .map_err(err("list machines"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(err("list machines"))?;
        rows.into_iter().map(machine_row).collect()
    }

    fn revoke_machine(&mut self, id: &str, now: u64) -> Result<bool, StoreError> {
        let n = self
            .db
            .execute(
                "UPDATE machines SET revoked = COALESCE(revoked, ?2) WHERE id = ?1",
                params![id, now as i64],
            )
            .map_err(err("revoke a machine"))?;
        Ok(n == 1)
    }

    fn nonce_seen(&mut self, owner: &str, nonce: &str) -> Result<bool, StoreError> {
        self.db
            .query_row(
                "SELECT 1 FROM nonces WHERE machine = ?1 AND nonce = ?2",
                params![owner, nonce],
                |_| Ok(()),
            )
            .optional()
            .map(|r| r.is_some())
            .map_err(err("look up a nonce"))
    }

    fn note_nonce(
        &mut self,
        owner: &str,
        nonce: &str,
        time: u64,
        forget_before: u64,
        cap: u64,
    ) -> Result<NonceUse, StoreError> {
        let tx = self
            .db
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(err("note a nonce"))?;
        tx.execute(
            "DELETE FROM nonces WHERE time < ?1",
            params![forget_before as i64],
        )
        .map_err(err("forget old nonces"))?;
        let held: i64 = tx
            .query_row(
                "SELECT COUNT(*) FROM nonces WHERE machine = ?1",
                params![owner],
                |r| r.get(0),
            )
            .map_err(err("count nonces"))?;
        let used = if held as u64 >= cap {
            NonceUse::TooMany(held as u64)
        } else {
            let n = tx
                .execute(
                    "INSERT OR IGNORE INTO nonces (machine, nonce, time) VALUES (?1, ?2, ?3)",
                    params![owner, nonce, time as i64],
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

    fn recipients(&mut self) -> Result<Option<String>, StoreError> {
        self.db
            .query_row(
                "SELECT doc FROM recipients ORDER BY id DESC LIMIT 1",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(err("read the recipients document"))
    }

    fn set_recipients(&mut self, doc: &str, now: u64) -> Result<(), StoreError> {
        self.db
            .execute(
                "INSERT INTO recipients (doc, installed) VALUES (?1, ?2)",
                params![doc, now as i64],
            )
            .map_err(err("store the recipients document"))?;
        Ok(())
    }

    fn head(&mut self, machine: &str, session: &str) -> Result<Option<StoredBatch>, StoreError> {
        match self.chain_id(machine, session)? {
            Some(chain) => read_head(&self.db, chain),
            None => Ok(None),
        }
    }

    fn usage(&mut self, machine: &str, day: u64) -> Result<Usage, StoreError> {
        usage(&self.db, machine, day)
    }

    fn store_batch(
        &mut self,
        batch: &Batch,
        body: &[u8],
        now: u64,
        quota: &Quota,
    ) -> Result<Stored, StoreError> {
        let header = &batch.header;
        // IMMEDIATE: the write lock is taken at BEGIN, so no other writer
        // runs between this transaction's link check and its insert.
        let tx = self
            .db
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(err("begin a transaction"))?;
        let find = |tx: &Transaction<'_>| {
            tx.query_row(
                "SELECT id FROM chains WHERE machine = ?1 AND session = ?2",
                params![header.machine, header.session],
                |r| r.get::<_, i64>(0),
            )
            .optional()
            .map_err(err("find a chain"))
        };
        let chain = match find(&tx)? {
            Some(id) => id,
            None => {
                tx.execute(
                    "INSERT INTO chains (machine, session) VALUES (?1, ?2)",
                    params![header.machine, header.session],
                )
                .map_err(err("add a chain"))?;
                tx.last_insert_rowid()
            }
        };
        let stored = link_and_store(
            &mut Tx {
                tx: &tx,
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
        // Seqs fit in i64; -1 is before any.
        let after = after.map_or(-1, |a| a as i64);
        self.db
            .query_row(
                "SELECT first, body FROM batches WHERE chain = ?1 AND first > ?2 ORDER BY first LIMIT 1",
                params![chain, after],
                |r| Ok((r.get::<_, i64>(0)? as u64, r.get(1)?)),
            )
            .optional()
            .map_err(err("read batches"))
    }

    fn store_piece(
        &mut self,
        header: &PieceHeader,
        body: &[u8],
        now: u64,
        quota: &Quota,
    ) -> Result<PieceStored, StoreError> {
        // IMMEDIATE, as for a batch: the anchor check, the charge and the
        // insert see no other writer in between.
        let tx = self
            .db
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(err("begin a transaction"))?;
        let chain = tx
            .query_row(
                "SELECT id FROM chains WHERE machine = ?1 AND session = ?2",
                params![header.machine, header.session],
                |r| r.get::<_, i64>(0),
            )
            .optional()
            .map_err(err("find a chain"))?;
        let Some(chain) = chain else {
            return Ok(PieceStored::NotAnchored);
        };
        let stored = store_piece(
            &mut Tx {
                tx: &tx,
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
        // Seqs and offsets fit in i64; (-1, -1) is before any.
        let (anchor, from) = after.map_or((-1, -1), |(a, f)| (a as i64, f as i64));
        self.db
            .query_row(
                "SELECT anchor, from_byte, body FROM pieces WHERE chain = ?1 AND (anchor, from_byte) > (?2, ?3)
                 ORDER BY anchor, from_byte LIMIT 1",
                params![chain, anchor, from],
                |r| {
                    Ok((
                        (r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64),
                        r.get(2)?,
                    ))
                },
            )
            .optional()
            .map_err(err("read transcript pieces"))
    }

    fn sessions(&mut self) -> Result<Vec<(String, String, u64)>, StoreError> {
        let mut q = self
            .db
            .prepare(
                "SELECT c.machine, c.session, MAX(b.last) FROM chains c JOIN batches b ON b.chain = c.id
                 GROUP BY c.id ORDER BY c.machine, c.session",
            )
            .map_err(err("list sessions"))?;
        let rows = q
            .query_map([], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get::<_, i64>(2)? as u64))
            })
            .map_err(err("list sessions"))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(err("list sessions"))
    }

    fn forks(&mut self) -> Result<Vec<ForkRow>, StoreError> {
        let mut q = self
            .db
            .prepare("SELECT machine, session, first, last, reason, seen FROM forks ORDER BY id")
            .map_err(err("list forks"))?;
        let rows = q
            .query_map([], |r| {
                Ok(ForkRow {
                    machine: r.get(0)?,
                    session: r.get(1)?,
                    first: r.get::<_, i64>(2)? as u64,
                    last: r.get::<_, i64>(3)? as u64,
                    reason: r.get(4)?,
                    seen: r.get::<_, i64>(5)? as u64,
                })
            })
            .map_err(err("list forks"))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(err("list forks"))
    }

    fn add_restore(&mut self, notice: &str, now: u64) -> Result<(), StoreError> {
        self.db
            .execute(
                "INSERT INTO restores (notice, installed) VALUES (?1, ?2)",
                params![notice, now as i64],
            )
            .map_err(err("store a restore notice"))?;
        Ok(())
    }

    fn restores(&mut self) -> Result<Vec<String>, StoreError> {
        let mut q = self
            .db
            .prepare("SELECT notice FROM restores ORDER BY id")
            .map_err(err("read restore notices"))?;
        let rows = q
            .query_map([], |r| r.get(0))
            .map_err(err("read restore notices"))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(err("read restore notices"))
    }
}
