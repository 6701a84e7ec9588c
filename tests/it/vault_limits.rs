//! What one machine, one token and one request may do to the vault, on
//! loopback with the real server and the real `nd7`: a small request that
//! would make the vault store a large index, quotas per day and per window
//! (429, and `nd7 ship` saying so), revocation on the very next request, an
//! enrolment whose reply was lost tried again with its token, ids that
//! carry terminal escapes, and the database's mode. Each test names the
//! check it guards; each was seen to fail with that check taken out.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use nd7_core::chain::Hash;
use nd7_core::ship::{Machine, Request, Signer};
use nd7_core::vault::{self, BatchHeader, IndexEntry, IndexKey, KeyId, Secret32};

use crate::common::{State, stderr, stdout};
use crate::vault::{Org, Vault, append, batch_body, client, enroll, nd7, ok, rewrite, ship};
use crate::vault_service::batch_head;
use crate::vault_store::lines;

/// The database files' bytes on disk, all together.
fn db_size(vault: &Vault) -> u64 {
    ["", "-wal", "-shm"]
        .iter()
        .map(|s| std::fs::metadata(format!("{}{s}", vault.db().display())).map_or(0, |m| m.len()))
        .sum()
}

/// Sends `body` as `machine`'s batch; (status, reply text).
fn post_batch(vault: &Vault, machine: &Machine, body: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(&vault.addr).expect("connect");
    s.write_all(batch_head(machine, body).as_bytes())
        .expect("head");
    s.write_all(body).expect("body");
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    let reply = String::from_utf8_lossy(&reply).into_owned();
    let status = reply
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("a reply: {reply:?}"));
    (status, reply)
}

/// A batch signed by `machine`, with a header of its own making over a
/// few real entries.
fn forged_shape(machine: &Machine, session: &str, index_len: usize) -> Vec<u8> {
    let key = Secret32::from_bytes([9; 32]);
    let ik = IndexKey::of(&key);
    let start = Hash::session_fingerprint(session);
    let (entries, _) = lines(0, start, 3, "amplify");
    let header = BatchHeader {
        machine: machine.id.clone(),
        session: session.into(),
        key: KeyId::of(&key),
        first: 0,
        prev: ik.digest(&start),
        index: (0..index_len as u64)
            .map(|seq| IndexEntry {
                seq,
                digest: ik.digest(&Hash::session_fingerprint(&seq.to_string())),
            })
            .collect(),
    };
    vault::seal_batch(&header, &entries, &key, b"wrapped", [1; 24], &machine.key).0
}

/// Guards the session id's length (`MAX_SESSION_ID_BYTES` in
/// `BatchHeader::parse`) and the index's shape against its ciphertext
/// (`MIN_CIPHERTEXT_PER_ENTRY` in `parse_batch`): the request, 0.67 MB
/// with a long session id and thousands of index lines over a few entries,
/// grew a vault by 1.84 GB.
#[test]
fn the_amplification_request_is_refused_and_stores_nothing() {
    let vault = Vault::start();
    let org = Org::new(&vault);
    let state = State::new();
    ok(enroll(&state, &vault, &org));
    let machine = Machine::load(&state.xdg().join("nd7")).expect("enrolled");
    let before = db_size(&vault);

    // The shape: a 100 KB session id and 6,000 index lines.
    let long = "a".repeat(100_000);
    let (status, reply) = post_batch(&vault, &machine, &forged_shape(&machine, &long, 6000));
    assert_eq!(status, 400, "{reply}");
    // Each check alone: the long id over three honest index lines…
    let (status, reply) = post_batch(&vault, &machine, &forged_shape(&machine, &long, 3));
    assert_eq!(status, 400, "{reply}");
    assert!(reply.contains("at most 255 bytes"), "{reply}");
    // …and an ordinary id over an index its ciphertext cannot hold.
    let (status, reply) = post_batch(&vault, &machine, &forged_shape(&machine, "s1", 6000));
    assert_eq!(status, 400, "{reply}");
    assert!(reply.contains("at least 16 bytes each"), "{reply}");

    assert_eq!((vault.count("batches"), vault.count("entries")), (0, 0));
    let grown = db_size(&vault).saturating_sub(before);
    assert!(grown < 1 << 20, "the database grew by {grown} bytes");
    // An honest batch still goes in.
    append(&state, "s1", 3);
    ok(ship(&state));
}

/// Guards `Vault::known_machine`'s revoked check, `Vault::enroll`'s, and
/// `check_token`'s revocation: all take effect on the next request, with the server
/// running throughout; and the files' mode (0600, `SqliteStore::open`).
#[test]
fn revocation_takes_effect_on_the_next_request() {
    let vault = Vault::start();
    let org = Org::new(&vault);
    let state = State::new();
    ok(enroll(&state, &vault, &org));
    let machine = Machine::load(&state.xdg().join("nd7")).expect("enrolled");
    append(&state, "s1", 3);
    ok(ship(&state));
    let token = vault.read_token();
    let sessions = |token: &str| {
        nd7()
            .args(["admin", "sessions", &vault.url, "--read-token", token])
            .args(["--fingerprint", &org.fingerprint])
            .output()
            .expect("run")
    };
    let listed = ok(sessions(&token));
    assert!(
        listed.starts_with("MACHINE ") && listed.contains("SESSION  LAST ENTRY\n"),
        "{listed}"
    );
    assert!(listed.contains("  s1       #2\n"), "{listed}");

    // The machine.
    let out = vault.admin(&["revoke", "machine", &machine.id]);
    assert!(out.status.success(), "{}", stderr(&out));
    let listed = stdout(&vault.admin(&["machines"]));
    assert!(
        listed.contains(&machine.id) && listed.contains("revoked"),
        "{listed}"
    );
    append(&state, "s1", 2);
    let out = ship(&state);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("machine {} was revoked at", machine.id)),
        "{}",
        stderr(&out)
    );
    assert_eq!(vault.count("entries"), 3, "nothing more stored");
    // What it shipped before stays readable and checkable.
    let (pulled, _) = crate::vault::pull(&state, &vault, &org, "s1", false);
    assert!(pulled.status.success(), "{}", stdout(&pulled));
    // Its own enrolment sent again, same key and token (what answers a
    // lost reply): refused as revoked, not answered `200 machine <id>`.
    // Guards the revoked check in `Vault::enroll`.
    let c = client(&vault.url);
    let path = format!("/v1/machines/{}", machine.id);
    let (status, record) = c
        .request(Request::get(&path).bearer(Some(&token)))
        .expect("the record");
    assert_eq!(status, 200);
    let auth = vault::RequestAuth::sign(
        &machine.key,
        &machine.id,
        "POST",
        "/v1/enroll",
        nd7_core::ship::unix_now(),
        nd7_core::ship::random().expect("random"),
        &record,
    );
    let (status, reply) = c
        .send_raw("POST", "/v1/enroll", &record, &auth.headers())
        .expect("enrol again");
    let reply = String::from_utf8_lossy(&reply);
    assert_eq!(status, 403, "{reply}");
    assert!(reply.contains("was revoked at"), "{reply}");

    // The read token, by its id or by itself.
    let out = vault.admin(&["revoke", "read-token", &token]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = sessions(&token);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("the read token was revoked at"),
        "{}",
        stderr(&out)
    );
    assert!(stdout(&vault.admin(&["read-tokens"])).contains("revoked"));
    let out = vault.admin(&["revoke", "machine", "no-such-machine"]);
    assert_eq!(out.status.code(), Some(1));

    for suffix in ["", "-wal", "-shm"] {
        let path = format!("{}{suffix}", vault.db().display());
        let mode = std::fs::metadata(&path).expect(&path).permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{path}");
    }
    // A database made readable by others is narrowed again when opened.
    std::fs::set_permissions(vault.db(), std::fs::Permissions::from_mode(0o644)).expect("chmod");
    vault.admin(&["machines"]);
    let mode = std::fs::metadata(vault.db())
        .expect("db")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

/// Guards the daily quota (`Usage::fits` in `link_and_store` and in
/// `Vault::admit`), the per-window request cap (`note_nonce`'s cap, which
/// also bounds the nonce table), and `nd7 ship` stopping on a 429 and
/// saying why.
#[test]
fn a_machine_over_its_quota_gets_429_and_ship_says_so() {
    let vault = Vault::start_with(&["--entries-per-day", "25", "--requests-per-10min", "12"]);
    let org = Org::new(&vault);
    let state = State::new();
    ok(enroll(&state, &vault, &org));
    append(&state, "s1", 20);
    append(&state, "s2", 20);
    append(&state, "s3", 5);
    let out = ship(&state);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("the vault refused with 429, over its quota for this machine")
            && err.contains("it stored 20 entries")
            && err.contains("of 25 entries"),
        "{err}"
    );
    assert!(err.contains("1 more session(s) not tried"), "{err}");
    assert_eq!(vault.count("entries"), 20);

    // Requests: the cap per ten minutes, and the nonce table with it.
    let machine = Machine::load(&state.xdg().join("nd7")).expect("enrolled");
    let signer = Signer {
        key: &machine.key,
        machine: &machine.id,
    };
    let c = client(&vault.url);
    let path = format!("/v1/head/{}", vault::hex(b"s1"));
    let mut refused = None;
    for n in 0..20 {
        let (status, text) = c
            .request(Request::get(&path).signed(&signer))
            .expect("head");
        if status != 200 {
            refused = Some((n, status, String::from_utf8_lossy(&text).into_owned()));
            break;
        }
    }
    let (_, status, text) = refused.expect("a request past the cap is refused");
    assert_eq!(status, 429, "{text}");
    assert!(text.contains("too many requests"), "{text}");
    // The machine's 12, and the one of its enrolment (kept under its key).
    assert!(vault.count("nonces") <= 13, "{}", vault.count("nonces"));
}

/// A proxy that forwards everything, except that the reply to an
/// enrolment is never delivered: the vault enrols, the machine hears
/// nothing. Returns its URL; it stops when `stop` is set.
fn losing_enrol_replies(upstream: String, stop: Arc<AtomicBool>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    listener.set_nonblocking(true).expect("nonblocking");
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let Ok((client, _)) = listener.accept() else {
                std::thread::sleep(std::time::Duration::from_millis(20));
                continue;
            };
            client.set_nonblocking(false).expect("blocking");
            let server = TcpStream::connect(&upstream).expect("upstream");
            let enrolling = Arc::new(AtomicBool::new(false));
            let (mut c_in, mut s_out) = (
                client.try_clone().expect("clone"),
                server.try_clone().expect("clone"),
            );
            let seen = enrolling.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                while let Ok(n) = c_in.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    if buf[..n].windows(15).any(|w| w == b"POST /v1/enroll") {
                        seen.store(true, Ordering::SeqCst);
                    }
                    if s_out.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
            let (mut s_in, mut c_out) = (server, client);
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                let mut pending: Vec<u8> = Vec::new();
                while let Ok(n) = s_in.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    pending.extend_from_slice(&buf[..n]);
                    // Interim "100 Continue" replies pass; a final reply to
                    // an enrolment is dropped, with the connection.
                    while pending.starts_with(b"HTTP/1.1 100") {
                        let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") else {
                            break;
                        };
                        let _ = c_out.write_all(&pending[..end + 4]);
                        pending.drain(..end + 4);
                    }
                    if pending.len() >= 12 && !pending.starts_with(b"HTTP/1.1 100") {
                        if enrolling.load(Ordering::SeqCst) {
                            let _ = c_out.shutdown(std::net::Shutdown::Both);
                            return;
                        }
                        if c_out.write_all(&pending).is_err() {
                            return;
                        }
                        pending.clear();
                    }
                }
                let _ = c_out.shutdown(std::net::Shutdown::Both);
            });
        }
    });
    url
}

/// Guards `ship::pending_key` (the key kept in `enrolling` before it is
/// sent, and reused for the same token) with `Enrolled::Again` on the
/// vault: an enrolment the vault took but whose reply was lost does not
/// burn the token. Without them, the second try made a new key, and the
/// token was "used already".
#[test]
fn an_enrolment_whose_reply_was_lost_is_tried_again_with_the_same_token() {
    let vault = Vault::start();
    let org = Org::new(&vault);
    let state = State::new();
    let stop = Arc::new(AtomicBool::new(false));
    let proxy = losing_enrol_replies(vault.addr.clone(), stop.clone());
    let token = org.token();
    let try_enrol = |url: &str| {
        state
            .nd7()
            .args([
                "enroll",
                url,
                "--token",
                &token,
                "--fingerprint",
                &org.fingerprint,
            ])
            .output()
            .expect("run nd7 enroll")
    };
    let lost = try_enrol(&proxy);
    stop.store(true, Ordering::Relaxed);
    assert_eq!(lost.status.code(), Some(2), "{}", stderr(&lost));
    let listed = stdout(&vault.admin(&["machines"]));
    assert_eq!(listed.lines().count(), 1, "the vault enrolled it: {listed}");
    assert!(
        state.xdg().join("nd7/vault/enrolling").exists(),
        "the key is kept for the next try"
    );
    assert!(!state.xdg().join("nd7/vault/machine.id").exists());

    let again = try_enrol(&vault.url);
    assert!(again.status.success(), "{}", stderr(&again));
    let id = std::fs::read_to_string(state.xdg().join("nd7/vault/machine.id")).expect("id");
    assert!(
        listed.starts_with(id.trim()),
        "the same key: {listed} / {id}"
    );
    assert!(!state.xdg().join("nd7/vault/enrolling").exists());
    assert_eq!(stdout(&vault.admin(&["machines"])).lines().count(), 1);
    append(&state, "s1", 2);
    ok(ship(&state));
    // The token is spent now: another machine cannot use it.
    let other = State::new();
    let out = other
        .nd7()
        .args([
            "enroll",
            &vault.url,
            "--token",
            &token,
            "--fingerprint",
            &org.fingerprint,
        ])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
}

/// Guards the inert rendering (`read::safe::term`) of ids from the vault
/// in `nd7 admin sessions`, in `nd7-vault forks` and in the server's log:
/// a session named with a terminal title escape, a bell, a carriage return
/// and a newline shows as visible escapes, on one line.
#[test]
fn escapes_and_newlines_in_ids_never_reach_a_terminal_or_the_log() {
    let vault = Vault::start();
    let org = Org::new(&vault);
    let state = State::new();
    ok(enroll(&state, &vault, &org));
    let evil = "s\u{1b}]0;owned\u{7}\r\nGET forged 200";
    append(&state, evil, 3);
    let machine = Machine::load(&state.xdg().join("nd7")).expect("enrolled");
    let whole = batch_body(&machine, &state, evil, 0, Hash::session_fingerprint(evil));
    let (status, reply) = post_batch(&vault, &machine, &whole);
    assert_eq!(status, 200, "{reply}");
    // A fork of it, so a refusal naming the session is logged and kept.
    let first = nd7_core::chain::read_stated(
        std::fs::read_to_string(state.log(evil).events_path())
            .expect("log")
            .lines()
            .next()
            .expect("entry 0")
            .as_bytes(),
    )
    .expect("entry")
    .hash;
    rewrite(&state, evil, 1, |b| {
        b.replace("\"seq\":1", "\"seq\":1,\"x\":1")
    });
    let fork = batch_body(&machine, &state, evil, 1, first);
    let (status, reply) = post_batch(&vault, &machine, &fork);
    assert_eq!(status, 409, "{reply}");
    assert!(reply.contains("would fork"), "{reply}");

    let hazards = |text: &str| text.chars().any(|c| matches!(c, '\u{1b}' | '\u{7}' | '\r'));
    let out = nd7()
        .args([
            "admin",
            "sessions",
            &vault.url,
            "--read-token",
            &vault.read_token(),
            "--fingerprint",
            &org.fingerprint,
        ])
        .output()
        .expect("run");
    // Posted by hand, so the machine's tally (its enrolment's, of no
    // session) does not name it: unsettled (exit 1, ADR-0129), and the
    // finding names the session inert too.
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let listed = stdout(&out);
    assert!(!hazards(&listed), "{listed:?}");
    assert_eq!(
        listed.lines().count(),
        3,
        "a header, one session and the finding: {listed:?}"
    );
    assert!(
        listed
            .lines()
            .skip(1)
            .all(|l| l.contains("s\\x1b]0;owned\\x07\\r\\nGET")),
        "{listed:?}"
    );

    let forks = vault.admin(&["forks"]);
    assert!(forks.status.success(), "{}", stderr(&forks));
    let forks = stdout(&forks);
    assert!(!hazards(&forks) && forks.lines().count() == 1, "{forks:?}");

    let log = vault.log();
    assert!(!hazards(&log), "{log:?}");
    assert!(
        log.lines()
            .all(|l| l.starts_with("GET ") || l.starts_with("POST ")),
        "a line the vault did not write: {log:?}"
    );
    assert!(!log.lines().any(|l| l.starts_with("GET forged")), "{log:?}");
}

/// A vault that cannot be reached: `nd7 ship` says so once (not a URL per
/// session), stops asking, counts as waiting only the sessions with entries
/// not yet shipped, and `nd7 doctor` fails the vault with what ship said
/// until a ship reaches it again.
#[test]
fn a_vault_that_cannot_be_reached_is_said_once_and_doctor_knows() {
    let vault = Vault::start();
    let org = Org::new(&vault);
    let state = State::new();
    ok(enroll(&state, &vault, &org));
    append(&state, "s1", 3);
    append(&state, "s2", 3);
    append(&state, "s3", 3);
    ok(ship(&state));
    append(&state, "s2", 2);
    let server = state.xdg().join("nd7/vault/server");
    let url = std::fs::read_to_string(&server).expect("server");
    // Nothing listens on port 1.
    std::fs::write(&server, "https://127.0.0.1:1\n").expect("write");
    let out = ship(&state);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    // The recipients it keeps (a warning), then one line: none per session.
    assert!(!err.contains("not shipped:"), "{err}");
    let said: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("cannot be reached"))
        .collect();
    assert_eq!(said.len(), 1, "{err}");
    assert!(
        said[0].starts_with("nd7 ship: the vault at https://127.0.0.1:1 cannot be reached (")
            && said[0].contains("1 session(s) wait to be shipped; nothing is lost"),
        "{err}"
    );
    assert!(!err.contains(&vault::hex(b"s1")), "{err}");
    assert!(
        stdout(&out).contains("3 sessions, 1 not fully shipped"),
        "{}",
        stdout(&out)
    );
    let kept = state.xdg().join("nd7/vault/unreachable");
    let mode = std::fs::metadata(&kept).expect("kept").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "as every file beside the enrolment");
    let doctor = |state: &State| stdout(&state.nd7().arg("doctor").output().expect("doctor"));
    let report = doctor(&state);
    assert!(
        report.contains("FAIL vault")
            && report.contains(
                "but the last nd7 ship said: the vault at https://127.0.0.1:1 cannot be reached"
            ),
        "{report}"
    );
    std::fs::write(&server, url).expect("write");
    ok(ship(&state));
    let report = doctor(&state);
    assert!(report.contains("ok   vault"), "{report}");
}

/// The database's bytes once its write-ahead log is folded in (pages in use
/// only), and the bytes the `usage` table charged `machine` today.
fn stored_and_charged(vault: &Vault, machine: &str) -> (u64, u64) {
    let db = rusqlite::Connection::open(vault.db()).expect("open db");
    db.busy_timeout(std::time::Duration::from_secs(30))
        .expect("busy timeout");
    let _: (i64, i64, i64) = db
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .expect("checkpoint");
    let pragma = |name: &str| -> u64 {
        db.query_row(&format!("PRAGMA {name}"), [], |r| r.get::<_, i64>(0))
            .expect(name) as u64
    };
    let used = (pragma("page_count") - pragma("freelist_count")) * pragma("page_size");
    let charged: i64 = db
        .query_row(
            "SELECT COALESCE(SUM(bytes), 0) FROM usage WHERE machine = ?1",
            [machine],
            |r| r.get(0),
        )
        .expect("usage");
    (used, charged as u64)
}

/// The bytes of the tally the vault keeps for `machine`.
fn tally_bytes(vault: &Vault, machine: &str) -> u64 {
    let db = rusqlite::Connection::open(vault.db()).expect("open db");
    db.query_row(
        "SELECT length(tally) FROM tallies WHERE machine = ?1",
        [machine],
        |r| r.get::<_, i64>(0),
    )
    .expect("the machine's tally") as u64
}

/// One-entry batches of sessions with 255-byte ids, each its own chain:
/// what the vault stores for them, beside the ciphertext, is several times
/// the request (the checkpoint, the chain, the index). The bytes quota
/// charges what is stored, not the request: the charge covers at least
/// the database's growth. Guards `stored_bytes` in `link_and_store`.
#[test]
fn the_bytes_quota_charges_what_is_stored() {
    let vault = Vault::start();
    let org = Org::new(&vault);
    let state = State::new();
    ok(enroll(&state, &vault, &org));
    let machine = Machine::load(&state.xdg().join("nd7")).expect("enrolled");
    append(&state, "warm", 1);
    ok(ship(&state));
    let (before, charged_before) = stored_and_charged(&vault, &machine.id);
    let tally_before = tally_bytes(&vault, &machine.id);
    for n in 0..150 {
        append(&state, &format!("{n:03}{}", "s".repeat(252)), 1);
    }
    ok(ship(&state));
    let (after, charged_after) = stored_and_charged(&vault, &machine.id);
    // The machine's tally is one row, replaced by its next, and carries a
    // receipt per session (ADR-0129, some 1 KiB each here): what it grew
    // by is not the batches' and is not charged as bytes.
    let tally_grew = tally_bytes(&vault, &machine.id) - tally_before;
    let (grown, charged) = (after - before - tally_grew, charged_after - charged_before);
    // The growth also holds what is not charged as bytes: the requests'
    // nonces (bounded by the request cap, kept 10 minutes). Charging the
    // request alone covered under a quarter of it.
    assert!(
        charged * 10 >= grown * 7,
        "the database grew by {grown} bytes, the quota was charged {charged}"
    );
}
