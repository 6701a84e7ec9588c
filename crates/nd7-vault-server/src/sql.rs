//! What the SQLite and PostgreSQL stores share: the statements and what
//! their rows mean, written once. A backend says only how a statement runs
//! ([`Sql`]), how a chain's usage is charged and its index stored
//! ([`ChainSql`]), and what must be one transaction of its own
//! ([`Backend`]: enrolment, nonces, a batch, a piece). Statements are
//! written with PostgreSQL's `$N` placeholders; SQLite's backend reads them
//! as its `?N`.

use super::{
    ChainTx, Enrolled, ForkRow, MachineRow, NonceUse, PieceStored, Placed, Quota, Store,
    StoreError, Stored, StoredBatch, TokenCheck, TokenRow, Usage, link_and_store, store_piece,
    token_id,
};
use nd7_format::vault::{Batch, BatchHeader, Checkpoint, Digest, Enrolment, KeyId, PieceHeader};

/// A statement's parameter.
pub(super) enum Param<'a> {
    Int(i64),
    Text(&'a str),
    Blob(&'a [u8]),
}

/// A parameter from a count or a time: they fit in i64.
fn int(n: u64) -> Param<'static> {
    Param::Int(n as i64)
}

/// One value of a row, as the database holds it.
#[derive(Debug, Default)]
pub(super) enum Cell {
    #[default]
    Null,
    Int(i64),
    Text(String),
    Blob(Vec<u8>),
}

/// A row, read cell by cell; a cell of another type than asked reads as
/// `None`, which the query reports as a malformed row.
pub(super) struct Row(pub(super) Vec<Cell>);

impl Row {
    fn take(&mut self, i: usize) -> Cell {
        self.0.get_mut(i).map(std::mem::take).unwrap_or_default()
    }

    fn u64(&mut self, i: usize) -> Option<u64> {
        match self.take(i) {
            Cell::Int(n) => Some(n as u64),
            _ => None,
        }
    }

    fn opt_u64(&mut self, i: usize) -> Option<Option<u64>> {
        match self.take(i) {
            Cell::Null => Some(None),
            Cell::Int(n) => Some(Some(n as u64)),
            _ => None,
        }
    }

    fn text(&mut self, i: usize) -> Option<String> {
        match self.take(i) {
            Cell::Text(s) => Some(s),
            _ => None,
        }
    }

    fn blob(&mut self, i: usize) -> Option<Vec<u8>> {
        match self.take(i) {
            Cell::Blob(b) => Some(b),
            _ => None,
        }
    }
}

/// How a backend runs a statement; `action` names it in an error.
pub(super) trait Sql {
    /// Runs a statement; how many rows it changed.
    fn execute(
        &mut self,
        action: &'static str,
        sql: &str,
        params: &[Param<'_>],
    ) -> Result<u64, StoreError>;
    /// Runs a query; its rows.
    fn query(
        &mut self,
        action: &'static str,
        sql: &str,
        params: &[Param<'_>],
    ) -> Result<Vec<Row>, StoreError>;
}

/// A chain's statements that differ between backends.
pub(super) trait ChainSql: Sql {
    /// Adds `more` to the machine's usage of `day` if it fits `quota`;
    /// otherwise the usage so far.
    fn charge(
        &mut self,
        machine: &str,
        day: u64,
        more: Usage,
        quota: &Quota,
    ) -> Result<Option<Usage>, StoreError>;
    /// Stores a batch's index entries.
    fn insert_index(&mut self, chain: i64, header: &BatchHeader) -> Result<(), StoreError>;
}

/// A backend's transaction: its statements, its chains, and its commit.
pub(super) trait Tx: ChainSql {
    /// The chain's id if the vault holds it, held until commit: no other
    /// server stores into it meanwhile.
    fn chain(&mut self, machine: &str, session: &str) -> Result<Option<i64>, StoreError>;
    /// The chain's id, held until commit; the chain is added if new.
    fn chain_or_new(&mut self, machine: &str, session: &str) -> Result<i64, StoreError>;
    fn commit(self: Box<Self>, action: &'static str) -> Result<(), StoreError>;
}

/// What a backend provides; [`Store`] is the statements here, over it.
pub(super) trait Backend: Send {
    /// The connection, as the shared statements run on it.
    fn sql(&mut self) -> Box<dyn Sql + '_>;
    /// A transaction in which what is read and what is written see no
    /// other writer between them.
    fn begin(&mut self, action: &'static str) -> Result<Box<dyn Tx + '_>, StoreError>;
    /// [`Store::add_machine`], which each database does its own way.
    fn enrol(&mut self, id: &str, enrolment: &Enrolment, now: u64) -> Result<Enrolled, StoreError>;
    /// [`Store::healthy`].
    fn connected(&mut self) -> bool {
        true
    }
}

/// The rows of a query, each read by `read`.
fn rows<T, S: Sql + ?Sized>(
    db: &mut S,
    action: &'static str,
    sql: &str,
    params: &[Param<'_>],
    read: impl Fn(&mut Row) -> Option<T>,
) -> Result<Vec<T>, StoreError> {
    db.query(action, sql, params)?
        .iter_mut()
        .map(|r| read(r).ok_or_else(|| malformed(action)))
        .collect()
}

/// The first row of a query, read by `read`.
fn row<T, S: Sql + ?Sized>(
    db: &mut S,
    action: &'static str,
    sql: &str,
    params: &[Param<'_>],
    read: impl Fn(&mut Row) -> Option<T>,
) -> Result<Option<T>, StoreError> {
    match db.query(action, sql, params)?.first_mut() {
        Some(r) => read(r).map(Some).ok_or_else(|| malformed(action)),
        None => Ok(None),
    }
}

fn malformed(action: &'static str) -> StoreError {
    StoreError {
        action,
        detail: "a row is not of the types this nd7-vault stores".into(),
    }
}

/// A stored batch's row: its checkpoint, signature and when it was stored.
pub(super) fn stored_batch(
    checkpoint: &str,
    signature: &str,
    stored: u64,
) -> Result<StoredBatch, StoreError> {
    let bad = |what: &str| StoreError {
        action: "read a stored batch",
        detail: format!("its {what} is malformed"),
    };
    Ok(StoredBatch {
        checkpoint: Checkpoint::parse(checkpoint).map_err(|_| bad("checkpoint"))?,
        signature: nd7_format::vault::unhex::<64>(signature).ok_or_else(|| bad("signature"))?,
        stored,
    })
}

fn index_row(seq: u64, digest: &[u8], key: &[u8]) -> Result<(Digest, KeyId), StoreError> {
    match (<[u8; 32]>::try_from(digest), <[u8; 16]>::try_from(key)) {
        (Ok(d), Ok(k)) => Ok((Digest(d), KeyId(k))),
        _ => Err(StoreError {
            action: "read the index",
            detail: format!("entry {seq} is malformed"),
        }),
    }
}

/// A batch row (checkpoint, signature, stored) as the query found it.
fn batch_row<S: Sql + ?Sized>(
    db: &mut S,
    action: &'static str,
    sql: &str,
    params: &[Param<'_>],
) -> Result<Option<StoredBatch>, StoreError> {
    row(db, action, sql, params, |r| {
        Some((r.text(0)?, r.text(1)?, r.u64(2)?))
    })?
    .map(|(c, s, t)| stored_batch(&c, &s, t))
    .transpose()
}

fn machine_row(
    (id, record, enrolled, revoked): (String, String, u64, Option<u64>),
) -> Result<MachineRow, StoreError> {
    Ok(MachineRow {
        enrolment: Enrolment::parse(record.as_bytes())
            .map_err(|e| StoreError::new("read a machine's record", e))?,
        id,
        enrolled,
        revoked,
    })
}

fn machine_cells(r: &mut Row) -> Option<(String, String, u64, Option<u64>)> {
    Some((r.text(0)?, r.text(1)?, r.u64(2)?, r.opt_u64(3)?))
}

/// The id of a chain, if the vault holds it.
pub(super) fn chain_id<S: Sql + ?Sized>(
    db: &mut S,
    machine: &str,
    session: &str,
) -> Result<Option<i64>, StoreError> {
    row(
        db,
        "find a chain",
        "SELECT id FROM chains WHERE machine = $1 AND session = $2",
        &[Param::Text(machine), Param::Text(session)],
        |r| r.u64(0).map(|id| id as i64),
    )
}

/// The last batch stored of a chain.
pub(super) fn head<S: Sql + ?Sized>(
    db: &mut S,
    chain: i64,
) -> Result<Option<StoredBatch>, StoreError> {
    batch_row(
        db,
        "read a chain's head",
        "SELECT checkpoint, signature, stored FROM batches WHERE chain = $1 ORDER BY last DESC LIMIT 1",
        &[Param::Int(chain)],
    )
}

/// What a machine stored on `day`.
pub(super) fn usage<S: Sql + ?Sized>(
    db: &mut S,
    machine: &str,
    day: u64,
) -> Result<Usage, StoreError> {
    Ok(row(
        db,
        "read the machine's usage",
        "SELECT entries, bytes FROM usage WHERE machine = $1 AND day = $2",
        &[Param::Text(machine), int(day)],
        |r| {
            Some(Usage {
                entries: r.u64(0)?,
                bytes: r.u64(1)?,
            })
        },
    )?
    .unwrap_or_default())
}

/// [`Store::note_nonce`], in the transaction `db` is.
pub(super) fn note_nonce<S: Sql + ?Sized>(
    db: &mut S,
    owner: &str,
    nonce: &str,
    time: u64,
    forget_before: u64,
    cap: u64,
) -> Result<NonceUse, StoreError> {
    db.execute(
        "forget old nonces",
        "DELETE FROM nonces WHERE time < $1",
        &[int(forget_before)],
    )?;
    let held = row(
        db,
        "count nonces",
        "SELECT COUNT(*) FROM nonces WHERE machine = $1",
        &[Param::Text(owner)],
        |r| r.u64(0),
    )?
    .unwrap_or_default();
    if held >= cap {
        return Ok(NonceUse::TooMany(held));
    }
    let n = db.execute(
        "note a nonce",
        "INSERT INTO nonces (machine, nonce, time) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
        &[Param::Text(owner), Param::Text(nonce), int(time)],
    )?;
    Ok(if n == 1 {
        NonceUse::First
    } else {
        NonceUse::Replayed
    })
}

/// One chain inside a transaction that holds it, over any backend.
pub(super) struct Chain<'a, T: ChainSql + ?Sized> {
    pub(super) tx: &'a mut T,
    pub(super) chain: i64,
    pub(super) machine: &'a str,
}

impl<T: ChainSql + ?Sized> ChainTx for Chain<'_, T> {
    fn head(&mut self) -> Result<Option<StoredBatch>, StoreError> {
        head(self.tx, self.chain)
    }

    fn digest_at(&mut self, seq: u64) -> Result<Option<(Digest, KeyId)>, StoreError> {
        row(
            self.tx,
            "read the index",
            "SELECT digest, key_id FROM entries WHERE chain = $1 AND seq = $2",
            &[Param::Int(self.chain), int(seq)],
            |r| Some((r.blob(0)?, r.blob(1)?)),
        )?
        .map(|(d, k)| index_row(seq, &d, &k))
        .transpose()
    }

    fn batch_ending_at(&mut self, last: u64) -> Result<Option<StoredBatch>, StoreError> {
        batch_row(
            self.tx,
            "look up a batch",
            "SELECT checkpoint, signature, stored FROM batches WHERE chain = $1 AND last = $2",
            &[Param::Int(self.chain), int(last)],
        )
    }

    fn charge(
        &mut self,
        day: u64,
        more: Usage,
        quota: &Quota,
    ) -> Result<Option<Usage>, StoreError> {
        self.tx.charge(self.machine, day, more, quota)
    }

    fn insert(&mut self, batch: &Batch, body: &[u8], now: u64) -> Result<(), StoreError> {
        let header = &batch.header;
        self.tx.execute(
            "store a batch",
            "INSERT INTO batches (chain, first, last, checkpoint, signature, body, stored) VALUES ($1, $2, $3, $4, $5, $6, $7)",
            &[
                Param::Int(self.chain),
                int(header.first),
                int(header.last().seq),
                Param::Text(&batch.checkpoint.render()),
                Param::Text(&nd7_format::vault::hex(&batch.signature)),
                Param::Blob(body),
                int(now),
            ],
        )?;
        self.tx.insert_index(self.chain, header)
    }

    fn piece_at(&mut self, anchor: u64, from: u64) -> Result<Option<(u64, Vec<u8>)>, StoreError> {
        row(
            self.tx,
            "look up a transcript piece",
            "SELECT stored, body FROM pieces WHERE chain = $1 AND anchor = $2 AND from_byte = $3",
            &[Param::Int(self.chain), int(anchor), int(from)],
            |r| Some((r.u64(0)?, r.blob(1)?)),
        )
    }

    fn insert_piece(
        &mut self,
        header: &PieceHeader,
        body: &[u8],
        now: u64,
    ) -> Result<(), StoreError> {
        self.tx.execute(
            "store a transcript piece",
            "INSERT INTO pieces (chain, anchor, from_byte, to_byte, body, stored) VALUES ($1, $2, $3, $4, $5, $6)",
            &[
                Param::Int(self.chain),
                int(header.anchor),
                int(header.from),
                int(header.to),
                Param::Blob(body),
                int(now),
            ],
        )?;
        Ok(())
    }

    fn record_fork(
        &mut self,
        header: &BatchHeader,
        reason: &str,
        body: &[u8],
        now: u64,
    ) -> Result<(), StoreError> {
        self.tx.execute(
            "record a fork",
            "INSERT INTO forks (machine, session, first, last, reason, header, body_blake3, seen) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            &[
                Param::Text(&header.machine),
                Param::Text(&header.session),
                int(header.first),
                int(header.last().seq),
                Param::Text(reason),
                Param::Blob(&header.render()),
                Param::Text(blake3::hash(body).to_hex().as_str()),
                int(now),
            ],
        )?;
        Ok(())
    }
}

impl<B: Backend> Store for B {
    fn add_token(&mut self, hash: &str, now: u64, expires: u64) -> Result<String, StoreError> {
        let id = token_id(hash);
        self.sql().execute(
            "store a token",
            "INSERT INTO tokens (hash, id, kind, created, expires) VALUES ($1, $2, 'read', $3, $4)",
            &[Param::Text(hash), Param::Text(&id), int(now), int(expires)],
        )?;
        Ok(id)
    }

    fn check_token(&mut self, hash: &str, now: u64) -> Result<TokenCheck, StoreError> {
        let found = row(
            &mut *self.sql(),
            "check a read token",
            "SELECT expires, revoked FROM tokens WHERE hash = $1 AND kind = 'read'",
            &[Param::Text(hash)],
            |r| Some((r.u64(0)?, r.opt_u64(1)?)),
        )?;
        Ok(match found {
            None => TokenCheck::Unknown,
            Some((_, Some(revoked))) => TokenCheck::Revoked(revoked),
            Some((expires, None)) if expires < now => TokenCheck::Expired(expires),
            Some(_) => TokenCheck::Valid,
        })
    }

    fn tokens(&mut self) -> Result<Vec<TokenRow>, StoreError> {
        rows(
            &mut *self.sql(),
            "list tokens",
            "SELECT id, created, expires, revoked FROM tokens ORDER BY created, id",
            &[],
            |r| {
                Some(TokenRow {
                    id: r.text(0)?,
                    created: r.u64(1)?,
                    expires: r.u64(2)?,
                    revoked: r.opt_u64(3)?,
                })
            },
        )
    }

    fn revoke_token(&mut self, id: &str, now: u64) -> Result<bool, StoreError> {
        let n = self.sql().execute(
            "revoke a token",
            "UPDATE tokens SET revoked = COALESCE(revoked, $2) WHERE id = $1",
            &[Param::Text(id), int(now)],
        )?;
        Ok(n == 1)
    }

    fn add_machine(
        &mut self,
        id: &str,
        enrolment: &Enrolment,
        now: u64,
    ) -> Result<Enrolled, StoreError> {
        self.enrol(id, enrolment, now)
    }

    fn machine(&mut self, id: &str) -> Result<Option<MachineRow>, StoreError> {
        row(
            &mut *self.sql(),
            "look up a machine",
            "SELECT id, record, enrolled, revoked FROM machines WHERE id = $1",
            &[Param::Text(id)],
            machine_cells,
        )?
        .map(machine_row)
        .transpose()
    }

    fn machines(&mut self) -> Result<Vec<MachineRow>, StoreError> {
        rows(
            &mut *self.sql(),
            "list machines",
            "SELECT id, record, enrolled, revoked FROM machines ORDER BY enrolled, id",
            &[],
            machine_cells,
        )?
        .into_iter()
        .map(machine_row)
        .collect()
    }

    fn revoke_machine(&mut self, id: &str, now: u64) -> Result<bool, StoreError> {
        let n = self.sql().execute(
            "revoke a machine",
            "UPDATE machines SET revoked = COALESCE(revoked, $2) WHERE id = $1",
            &[Param::Text(id), int(now)],
        )?;
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
        let mut tx = self.begin("note a nonce")?;
        let used = note_nonce(&mut *tx, owner, nonce, time, forget_before, cap)?;
        tx.commit("note a nonce")?;
        Ok(used)
    }

    fn nonce_seen(&mut self, owner: &str, nonce: &str) -> Result<bool, StoreError> {
        Ok(row(
            &mut *self.sql(),
            "look up a nonce",
            "SELECT 1 FROM nonces WHERE machine = $1 AND nonce = $2",
            &[Param::Text(owner), Param::Text(nonce)],
            |_| Some(()),
        )?
        .is_some())
    }

    fn recipients(&mut self) -> Result<Option<String>, StoreError> {
        row(
            &mut *self.sql(),
            "read the recipients document",
            "SELECT doc FROM recipients ORDER BY id DESC LIMIT 1",
            &[],
            |r| r.text(0),
        )
    }

    fn set_recipients(&mut self, doc: &str, now: u64) -> Result<(), StoreError> {
        self.sql().execute(
            "store the recipients document",
            "INSERT INTO recipients (doc, installed) VALUES ($1, $2)",
            &[Param::Text(doc), int(now)],
        )?;
        Ok(())
    }

    fn head(&mut self, machine: &str, session: &str) -> Result<Option<StoredBatch>, StoreError> {
        let chain = chain_id(&mut *self.sql(), machine, session)?;
        match chain {
            Some(chain) => head(&mut *self.sql(), chain),
            None => Ok(None),
        }
    }

    fn usage(&mut self, machine: &str, day: u64) -> Result<Usage, StoreError> {
        usage(&mut *self.sql(), machine, day)
    }

    fn store_batch(
        &mut self,
        batch: &Batch,
        body: &[u8],
        now: u64,
        quota: &Quota,
    ) -> Result<Stored, StoreError> {
        let header = &batch.header;
        let mut tx = self.begin("begin a transaction")?;
        let chain = tx.chain_or_new(&header.machine, &header.session)?;
        let stored = link_and_store(
            &mut Chain {
                tx: &mut *tx,
                chain,
                machine: &header.machine,
            },
            batch,
            body,
            now,
            quota,
        )?;
        tx.commit("commit a batch")?;
        Ok(stored)
    }

    fn batch_after(
        &mut self,
        machine: &str,
        session: &str,
        after: Option<u64>,
    ) -> Result<Option<(u64, Vec<u8>)>, StoreError> {
        let Some(chain) = chain_id(&mut *self.sql(), machine, session)? else {
            return Ok(None);
        };
        // Seqs fit in i64; -1 is before any.
        let after = after.map_or(-1, |a| a as i64);
        row(
            &mut *self.sql(),
            "read batches",
            "SELECT first, body FROM batches WHERE chain = $1 AND first > $2 ORDER BY first LIMIT 1",
            &[Param::Int(chain), Param::Int(after)],
            |r| Some((r.u64(0)?, r.blob(1)?)),
        )
    }

    fn store_piece(
        &mut self,
        header: &PieceHeader,
        body: &[u8],
        now: u64,
        quota: &Quota,
    ) -> Result<PieceStored, StoreError> {
        let mut tx = self.begin("begin a transaction")?;
        // A chain the vault does not hold: the piece has no anchor.
        let Some(chain) = tx.chain(&header.machine, &header.session)? else {
            return Ok(PieceStored::NotAnchored);
        };
        let stored = store_piece(
            &mut Chain {
                tx: &mut *tx,
                chain,
                machine: &header.machine,
            },
            header,
            body,
            now,
            quota,
        )?;
        tx.commit("commit a transcript piece")?;
        Ok(stored)
    }

    fn piece_after(
        &mut self,
        machine: &str,
        session: &str,
        after: Option<(u64, u64)>,
    ) -> Result<Option<Placed>, StoreError> {
        let Some(chain) = chain_id(&mut *self.sql(), machine, session)? else {
            return Ok(None);
        };
        // Seqs and offsets fit in i64; (-1, -1) is before any.
        let (anchor, from) = after.map_or((-1, -1), |(a, f)| (a as i64, f as i64));
        row(
            &mut *self.sql(),
            "read transcript pieces",
            "SELECT anchor, from_byte, body FROM pieces WHERE chain = $1 AND (anchor, from_byte) > ($2, $3)
             ORDER BY anchor, from_byte LIMIT 1",
            &[Param::Int(chain), Param::Int(anchor), Param::Int(from)],
            |r| Some(((r.u64(0)?, r.u64(1)?), r.blob(2)?)),
        )
    }

    fn sessions(&mut self) -> Result<Vec<(String, String, u64)>, StoreError> {
        rows(
            &mut *self.sql(),
            "list sessions",
            "SELECT c.machine, c.session, MAX(b.last) FROM chains c JOIN batches b ON b.chain = c.id
             GROUP BY c.id, c.machine, c.session ORDER BY c.machine, c.session",
            &[],
            |r| Some((r.text(0)?, r.text(1)?, r.u64(2)?)),
        )
    }

    fn forks(&mut self) -> Result<Vec<ForkRow>, StoreError> {
        rows(
            &mut *self.sql(),
            "list forks",
            "SELECT machine, session, first, last, reason, seen FROM forks ORDER BY id",
            &[],
            |r| {
                Some(ForkRow {
                    machine: r.text(0)?,
                    session: r.text(1)?,
                    first: r.u64(2)?,
                    last: r.u64(3)?,
                    reason: r.text(4)?,
                    seen: r.u64(5)?,
                })
            },
        )
    }

    fn add_restore(&mut self, notice: &str, now: u64) -> Result<(), StoreError> {
        self.sql().execute(
            "store a restore notice",
            "INSERT INTO restores (notice, installed) VALUES ($1, $2)",
            &[Param::Text(notice), int(now)],
        )?;
        Ok(())
    }

    fn set_tally(&mut self, machine: &str, at: u64, tally: &str) -> Result<bool, StoreError> {
        let n = self.sql().execute(
            "store a tally",
            "INSERT INTO tallies (machine, at, tally) VALUES ($1, $2, $3) ON CONFLICT (machine) DO UPDATE SET at = excluded.at, tally = excluded.tally WHERE excluded.at >= tallies.at",
            &[Param::Text(machine), int(at), Param::Text(tally)],
        )?;
        Ok(n == 1)
    }

    fn tallies(&mut self) -> Result<Vec<String>, StoreError> {
        rows(
            &mut *self.sql(),
            "read the tallies",
            "SELECT tally FROM tallies ORDER BY machine",
            &[],
            |r| r.text(0),
        )
    }

    fn restores(&mut self) -> Result<Vec<String>, StoreError> {
        rows(
            &mut *self.sql(),
            "read restore notices",
            "SELECT notice FROM restores ORDER BY id",
            &[],
            |r| r.text(0),
        )
    }

    fn healthy(&mut self) -> bool {
        self.connected()
    }
}
