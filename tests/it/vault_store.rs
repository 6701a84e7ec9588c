//! The vault's storage, one suite run against each backend: SQLite, and
//! PostgreSQL on a throwaway cluster (pg.rs). Whatever `nd7-vault` relies on
//! a store for is checked here through the `Store` trait alone, and then
//! again under concurrency: several connections (threads of one server, or
//! servers sharing a PostgreSQL database) storing the same chain at once.

use std::sync::{Arc, Barrier};

use nd7_core::chain::{self, Hash};
use nd7_core::vault::{
    self, Batch, BatchHeader, ChainKey, EnrolToken, IndexKey, KeyId, PieceHeader, Secret32,
    SigningKey,
};
use nd7_core::vault_server::{
    Database, Enrolled, NonceUse, PieceStored, Quota, Store, Stored, TokenCheck, Usage, token_hash,
    token_id,
};

use crate::pg;

/// Log lines `first..first+n` of a chain whose entry `first` follows `prev`.
pub fn lines(first: u64, prev: Hash, n: u64, tag: &str) -> (Vec<u8>, Hash) {
    let mut out = Vec::new();
    let mut prev = prev;
    for seq in first..first + n {
        let line = chain::seal(
            format!("{{\"seq\":{seq},\"kind\":\"t\",\"b\":\"{tag}\",\"prev\":\"{prev}\"}}")
                .as_bytes(),
        );
        prev = chain::read_stated(&line[..line.len() - 1])
            .expect("sealed")
            .hash;
        out.extend_from_slice(&line);
    }
    (out, prev)
}

/// A machine of the suite: its key and id.
pub struct Mach {
    pub key: SigningKey,
    pub id: String,
}

impl Mach {
    pub fn new(seed: u8) -> Mach {
        let key = SigningKey::from_seed(&Secret32::from_bytes([seed; 32]));
        let id = vault::machine_id(&key.public());
        Mach { key, id }
    }

    /// A signed batch of `lines` (entries `first..`, after `prev`) of
    /// `session`, under `key`; its bytes as sent.
    pub fn batch(
        &self,
        session: &str,
        key: &ChainKey,
        first: u64,
        prev: Hash,
        lines: &[u8],
    ) -> (Batch, Vec<u8>) {
        let ik = IndexKey::of(key);
        let header = BatchHeader {
            machine: self.id.clone(),
            session: session.into(),
            key: KeyId::of(key),
            first,
            prev: ik.digest(&prev),
            index: vault::index_lines(lines, &ik).expect("index"),
        };
        let (body, _) = vault::seal_batch(&header, lines, key, b"wrapped", [7; 24], &self.key);
        (vault::parse_batch(&body).expect("parses"), body)
    }

    /// A signed transcript piece of `session`: bytes `from..` that entry
    /// `anchor` anchors; its header and bytes as sent.
    pub fn piece(
        &self,
        session: &str,
        key: &ChainKey,
        anchor: u64,
        from: u64,
        bytes: &[u8],
    ) -> (PieceHeader, Vec<u8>) {
        let header = PieceHeader {
            machine: self.id.clone(),
            session: session.into(),
            key: KeyId::of(key),
            anchor,
            from,
            to: from + bytes.len() as u64,
            after: None,
        };
        let body = vault::seal_piece(&header, bytes, key, b"wrapped", [8; 24], &self.key);
        (header, body)
    }
}

const Q: Quota = Quota {
    entries_per_day: 1_000_000,
    bytes_per_day: 1 << 30,
};

/// Everything the server asks of a store, in order.
pub fn suite(open: &dyn Fn() -> Box<dyn Store>) {
    let mut s = open();
    let now = 1_800_000_000;

    // Read tokens: only hashes, named by an id; expiry and revocation.
    let (a, b) = (token_hash("token-a"), token_hash("token-b"));
    assert_eq!(s.add_token(&a, now, now + 100).expect("add"), token_id(&a));
    s.add_token(&b, now, now + 10).expect("add");
    assert_eq!(s.check_token(&a, now).expect("check"), TokenCheck::Valid);
    assert_eq!(
        s.check_token(&b, now + 11).expect("check"),
        TokenCheck::Expired(now + 10)
    );
    assert_eq!(
        s.check_token(&token_hash("guess"), now).expect("check"),
        TokenCheck::Unknown
    );
    assert!(s.revoke_token(&token_id(&a), now + 1).expect("revoke"));
    assert!(!s.revoke_token("0000000000000000", now).expect("revoke"));
    assert_eq!(
        s.check_token(&a, now + 2).expect("check"),
        TokenCheck::Revoked(now + 1)
    );
    let tokens = s.tokens().expect("tokens");
    assert_eq!(tokens.len(), 2);
    assert_eq!(tokens[0].revoked.or(tokens[1].revoked), Some(now + 1));

    // Machines: one per key and per token; the same pair again is asked
    // again, not refused.
    let org = SigningKey::from_seed(&Secret32::from_bytes([1; 32]));
    let t1 = EnrolToken::parse(&EnrolToken::mint(&org, &[1; 16], now + 100, 1)).expect("token");
    let t2 = EnrolToken::parse(&EnrolToken::mint(&org, &[2; 16], now + 100, 1)).expect("token");
    let (m1, m2) = (Mach::new(11), Mach::new(12));
    let e11 = t1.enrolment(&m1.key.public(), now);
    assert_eq!(
        s.add_machine(&m1.id, &e11, now).expect("add"),
        Enrolled::New
    );
    assert_eq!(
        s.add_machine(&m1.id, &e11, now).expect("add"),
        Enrolled::Again
    );
    let e21 = t1.enrolment(&m2.key.public(), now);
    assert_eq!(
        s.add_machine(&m2.id, &e21, now).expect("add"),
        Enrolled::TokenUsed
    );
    let e12 = t2.enrolment(&m1.key.public(), now);
    assert_eq!(
        s.add_machine(&m1.id, &e12, now).expect("add"),
        Enrolled::KeyEnrolled
    );
    let row = s.machine(&m1.id).expect("machine").expect("enrolled");
    assert_eq!(row.enrolment, e11);
    assert_eq!(row.revoked, None);
    assert!(s.machine(&m2.id).expect("machine").is_none());
    assert!(s.revoke_machine(&m1.id, now + 5).expect("revoke"));
    assert!(s.revoke_machine(&m1.id, now + 9).expect("revoke again"));
    assert_eq!(
        s.machine(&m1.id).expect("machine").expect("kept").revoked,
        Some(now + 5),
        "the first revocation's time stays"
    );
    assert!(!s.revoke_machine("nobody", now).expect("revoke"));
    assert_eq!(s.machines().expect("machines").len(), 1);

    // Nonces: once each, forgotten when stale, at most `cap` an owner.
    let nonce = |s: &mut Box<dyn Store>, n: &str, t: u64| {
        s.note_nonce("m", n, t, t.saturating_sub(600), 3)
            .expect("nonce")
    };
    assert!(!s.nonce_seen("m", "n1").expect("seen"));
    assert_eq!(nonce(&mut s, "n1", now), NonceUse::First);
    assert!(
        s.nonce_seen("m", "n1").expect("seen"),
        "admission sees it used"
    );
    assert!(!s.nonce_seen("other", "n1").expect("seen"), "per owner");
    assert_eq!(nonce(&mut s, "n1", now), NonceUse::Replayed);
    assert_eq!(nonce(&mut s, "n2", now), NonceUse::First);
    assert_eq!(nonce(&mut s, "n3", now), NonceUse::First);
    assert_eq!(nonce(&mut s, "n4", now), NonceUse::TooMany(3));
    assert_eq!(
        s.note_nonce("other", "n4", now, now - 600, 3)
            .expect("nonce"),
        NonceUse::First,
        "the cap is per owner"
    );
    // Ten minutes on, the old ones are gone and room is back.
    assert_eq!(nonce(&mut s, "n4", now + 601), NonceUse::First);

    // Recipients and restore notices: the last installed; all, in order.
    assert_eq!(s.recipients().expect("recipients"), None);
    s.set_recipients("doc 1", now).expect("set");
    s.set_recipients("doc 2", now).expect("set");
    assert_eq!(
        s.recipients().expect("recipients").as_deref(),
        Some("doc 2")
    );
    s.add_restore("notice 1\n", now).expect("restore");
    s.add_restore("notice 2\n", now).expect("restore");
    assert_eq!(
        s.restores().expect("restores"),
        vec!["notice 1\n".to_string(), "notice 2\n".to_string()]
    );

    // Batches: appended, acknowledged again, forks recorded, gaps refused.
    let m = Mach::new(13);
    let key = Secret32::from_bytes([5; 32]);
    let start = Hash::session_fingerprint("s1");
    let (l0, h0) = lines(0, start, 3, "a");
    let (l1, h1) = lines(3, h0, 2, "a");
    let (b0, body0) = m.batch("s1", &key, 0, start, &l0);
    let (b1, body1) = m.batch("s1", &key, 3, h0, &l1);
    assert_eq!(s.head(&m.id, "s1").expect("head"), None);
    let Stored::Appended(r0) = s.store_batch(&b0, &body0, now, &Q).expect("store") else {
        panic!("appended")
    };
    assert_eq!(r0.checkpoint, b0.checkpoint);
    assert!(matches!(
        s.store_batch(&b1, &body1, now + 1, &Q).expect("store"),
        Stored::Appended(_)
    ));
    assert_eq!(
        s.head(&m.id, "s1").expect("head").expect("held").checkpoint,
        b1.checkpoint
    );
    match s.store_batch(&b0, &body0, now + 2, &Q).expect("store") {
        Stored::AlreadyStored(Some(r)) => {
            assert_eq!(r.checkpoint, b0.checkpoint);
            assert_eq!(r.stored, now, "the receipt is for when it was stored");
        }
        other => panic!("{other:?}"),
    }
    let (fork_lines, _) = lines(3, h0, 2, "other");
    let (fork, fork_body) = m.batch("s1", &key, 3, h0, &fork_lines);
    assert!(matches!(
        s.store_batch(&fork, &fork_body, now, &Q).expect("store"),
        Stored::Fork { recorded: true, .. }
    ));
    let (gap_lines, _) = lines(9, h1, 1, "a");
    let (gap, gap_body) = m.batch("s1", &key, 9, h1, &gap_lines);
    assert!(matches!(
        s.store_batch(&gap, &gap_body, now, &Q).expect("store"),
        Stored::Unlinked(_)
    ));
    let forks = s.forks().expect("forks");
    assert_eq!(forks.len(), 1);
    assert_eq!((forks[0].first, forks[0].last), (3, 4));
    assert_eq!(
        s.sessions().expect("sessions"),
        vec![(m.id.clone(), "s1".to_string(), 4)]
    );

    // Read back one batch at a time, in order, exactly as sent.
    assert_eq!(
        s.batch_after(&m.id, "s1", None).expect("read"),
        Some((0, body0.clone()))
    );
    assert_eq!(
        s.batch_after(&m.id, "s1", Some(0)).expect("read"),
        Some((3, body1.clone()))
    );
    assert_eq!(s.batch_after(&m.id, "s1", Some(3)).expect("read"), None);
    assert_eq!(s.batch_after(&m.id, "nothing", None).expect("read"), None);

    // Quotas: what was stored today counts; a batch that would pass the
    // quota is refused and stores nothing; tomorrow starts afresh.
    let day = nd7_core::vault_server::day_of(now);
    let used = s.usage(&m.id, day).expect("usage");
    assert_eq!(used.entries, 5);
    // A batch is charged what storing it adds (its row in whole pages, its
    // index, the chain's row for the first); a refused fork its header.
    assert_eq!(
        used.bytes,
        nd7_core::vault_server::stored_bytes(&b0, &body0, true)
            + nd7_core::vault_server::stored_bytes(&b1, &body1, false)
            + fork.header_bytes.len() as u64
    );
    assert!(nd7_core::vault_server::stored_bytes(&b0, &body0, true) > body0.len() as u64);
    let (l2, _) = lines(5, h1, 4, "a");
    let (b2, body2) = m.batch("s1", &key, 5, h1, &l2);
    let tight = Quota {
        entries_per_day: 8,
        bytes_per_day: 1 << 30,
    };
    assert_eq!(
        s.store_batch(&b2, &body2, now, &tight).expect("store"),
        Stored::OverQuota(used)
    );
    assert_eq!(s.usage(&m.id, day).expect("usage"), used);
    assert!(matches!(
        s.store_batch(&b2, &body2, now + 86_400, &tight)
            .expect("store"),
        Stored::Appended(_)
    ));
    assert_eq!(
        s.usage(&m.id, day + 1).expect("usage"),
        Usage {
            entries: 4,
            bytes: nd7_core::vault_server::stored_bytes(&b2, &body2, false)
        }
    );

    // Transcript pieces: only of an entry the chain holds (it ends at 8
    // now), once per anchor and first byte, charged as bytes to the day's
    // quota, read back one at a time by anchor and first byte.
    let used = s.usage(&m.id, day).expect("usage");
    let (p3, body3) = m.piece("s1", &key, 3, 0, b"abcd");
    assert_eq!(
        s.store_piece(&p3, &body3, now, &Q).expect("store"),
        PieceStored::Stored(now)
    );
    let charged = Usage {
        entries: used.entries,
        bytes: used.bytes + body3.len() as u64,
    };
    assert_eq!(s.usage(&m.id, day).expect("usage"), charged);
    let (again, again_body) = m.piece("s1", &key, 3, 0, b"abce");
    assert_eq!(
        s.store_piece(&again, &again_body, now + 1, &Q)
            .expect("store"),
        PieceStored::AlreadyStored(now, body3.clone()),
        "the first piece of an anchor and first byte is kept, and named"
    );
    assert_eq!(
        s.usage(&m.id, day).expect("usage"),
        charged,
        "not charged twice"
    );
    let (beyond, beyond_body) = m.piece("s1", &key, 9, 0, b"abcd");
    assert_eq!(
        s.store_piece(&beyond, &beyond_body, now, &Q)
            .expect("store"),
        PieceStored::NotAnchored
    );
    let (elsewhere, elsewhere_body) = m.piece("no-chain", &key, 0, 0, b"abcd");
    assert_eq!(
        s.store_piece(&elsewhere, &elsewhere_body, now, &Q)
            .expect("store"),
        PieceStored::NotAnchored
    );
    assert_eq!(
        s.sessions().expect("sessions").len(),
        1,
        "a piece makes no chain"
    );
    let (p3b, body3b) = m.piece("s1", &key, 3, 4, b"efgh");
    let full = Quota {
        entries_per_day: Q.entries_per_day,
        bytes_per_day: charged.bytes + body3b.len() as u64 - 1,
    };
    assert_eq!(
        s.store_piece(&p3b, &body3b, now, &full).expect("store"),
        PieceStored::OverQuota(charged)
    );
    assert_eq!(s.usage(&m.id, day).expect("usage"), charged);
    assert_eq!(
        s.store_piece(&p3b, &body3b, now, &Q).expect("store"),
        PieceStored::Stored(now)
    );
    let (p1, body1p) = m.piece("s1", &key, 1, 0, b"ab");
    assert_eq!(
        s.store_piece(&p1, &body1p, now, &Q).expect("store"),
        PieceStored::Stored(now)
    );
    let mut read = Vec::new();
    let mut after = None;
    while let Some((at, body)) = s.piece_after(&m.id, "s1", after).expect("read") {
        read.push((at, body));
        after = Some(at);
    }
    assert_eq!(
        read,
        vec![((1, 0), body1p), ((3, 0), body3), ((3, 4), body3b)],
        "by anchor, then first byte, exactly as sent"
    );
    assert_eq!(s.piece_after(&m2.id, "s1", None).expect("read"), None);
    assert_eq!(s.piece_after(&m.id, "no-chain", None).expect("read"), None);
}

/// `threads` connections store the same chain of `batches` at once, each
/// in order, as servers sharing a database would when a machine's two
/// ships race: every batch is stored once, and every call succeeds
/// (appended, or acknowledged as stored).
pub fn concurrent(
    open: Arc<dyn Fn() -> Box<dyn Store> + Send + Sync>,
    threads: usize,
    batches: u64,
) {
    let m = Arc::new(Mach::new(21));
    let key = Secret32::from_bytes([6; 32]);
    let mut chain = Vec::new();
    let mut prev = Hash::session_fingerprint("race");
    for k in 0..batches {
        let (l, next) = lines(k * 3, prev, 3, "race");
        chain.push(m.batch("race", &key, k * 3, prev, &l));
        prev = next;
    }
    let chain = Arc::new(chain);
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (open, chain, barrier) = (open.clone(), chain.clone(), barrier.clone());
            std::thread::spawn(move || {
                let mut s = open();
                barrier.wait();
                let mut appended = 0;
                for (b, body) in chain.iter() {
                    match s.store_batch(b, body, 1_800_000_000, &Q) {
                        Ok(Stored::Appended(_)) => appended += 1,
                        Ok(Stored::AlreadyStored(Some(_))) => {}
                        other => panic!("batch {}: {other:?}", b.header.range()),
                    }
                }
                appended
            })
        })
        .collect();
    let appended: u64 = handles.into_iter().map(|h| h.join().expect("thread")).sum();
    assert_eq!(appended, batches, "each batch appended exactly once");
    let mut s = open();
    let mut after = None;
    let mut n = 0;
    while let Some((first, _)) = s.batch_after(&m.id, "race", after).expect("read") {
        assert_eq!(first, n * 3);
        after = Some(first);
        n += 1;
    }
    assert_eq!(n, batches);
    assert_eq!(
        s.usage(&m.id, nd7_core::vault_server::day_of(1_800_000_000))
            .expect("usage")
            .entries,
        batches * 3,
        "counted once"
    );
}

#[test]
fn the_sqlite_store_keeps_its_promises() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Database::Sqlite(dir.path().join("vault.db"));
    suite(&|| db.open().expect("open"));
    let mode = std::fs::metadata(dir.path().join("vault.db"))
        .expect("db")
        .permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o600
    );
}

#[test]
fn the_postgres_store_keeps_its_promises() {
    let db = Database::Postgres(pg::cluster().database());
    suite(&|| db.open().expect("open"));
}

/// Guards `BEGIN IMMEDIATE` in `SqliteStore::store_batch`: with a deferred
/// transaction, two connections both read the chain before either writes,
/// and the second writer is refused ("database is locked": its snapshot
/// is stale, so waiting cannot help).
#[test]
fn sqlite_connections_storing_one_chain_at_once_store_each_batch_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Database::Sqlite(dir.path().join("vault.db"));
    db.open().expect("create");
    concurrent(Arc::new(move || db.open().expect("open")), 4, 40);
}

/// Guards the `FOR UPDATE` on the chain's row in `PgStore::store_batch`:
/// without it, two servers both find the same head, both append, and one
/// fails on the primary key (or, for different batches, both store).
#[test]
fn postgres_connections_storing_one_chain_at_once_store_each_batch_once() {
    let db = Database::Postgres(pg::cluster().database());
    db.open().expect("create");
    concurrent(Arc::new(move || db.open().expect("open")), 6, 40);
}

/// Two servers starting at once on an empty database: one makes the
/// tables, the other waits for it and finds them (guards the advisory
/// lock in `PgStore::open`).
#[test]
fn postgres_servers_starting_at_once_create_the_tables_once() {
    let url = pg::cluster().database();
    let barrier = Arc::new(Barrier::new(4));
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let (url, barrier) = (url.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                Database::Postgres(url).open().map(|_| ())
            })
        })
        .collect();
    for h in handles {
        h.join().expect("thread").expect("opened");
    }
}
