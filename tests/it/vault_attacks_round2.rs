//! Issue 34's second round of vault changes, attacked by someone who did not
//! write them: the vault's operator (who holds its key and its database)
//! and an enrolled but malicious machine, against the machines' tallies
//! (ADR-0120) that `nd7 admin sessions` holds the vault's list to. A test
//! of an attack that still succeeds is marked `#[ignore = "open: …"]` and
//! asserts what should hold, so `--ignored` shows the break.

use nd7_core::ship::{Machine, Signer, unix_now};
use nd7_core::vault;

use crate::common::{State, stderr, stdout};
use crate::vault::{Org, Vault, append, client, enroll, nd7, ok, ship};

/// `nd7 admin sessions` against `vault`, as an admin of `org`.
fn sessions(vault: &Vault, org: &Org) -> std::process::Output {
    nd7()
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
        .expect("run nd7 admin sessions")
}

fn machine(state: &State) -> Machine {
    Machine::load(&state.xdg().join("nd7")).expect("enrolled")
}

/// The operator at the vault's database: runs `sql` with `?1` = `machine`.
fn operator_sql(vault: &Vault, sql: &str, machine: &str) {
    let db = rusqlite::Connection::open(vault.db()).expect("open db");
    db.busy_timeout(std::time::Duration::from_secs(30))
        .expect("busy timeout");
    for statement in sql.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        db.execute(statement, [machine]).expect(statement);
    }
}

/// Every trace of `machine`'s sessions, and its tally, gone from the
/// vault's database.
const FORGET_MACHINE: &str = "
DELETE FROM entries WHERE chain IN (SELECT id FROM chains WHERE machine = ?1);
DELETE FROM batches WHERE chain IN (SELECT id FROM chains WHERE machine = ?1);
DELETE FROM pieces WHERE chain IN (SELECT id FROM chains WHERE machine = ?1);
DELETE FROM chains WHERE machine = ?1;
DELETE FROM tallies WHERE machine = ?1";

/// The tally the vault keeps for `machine`: (at, text).
fn kept_tally(vault: &Vault, machine: &str) -> Option<(u64, String)> {
    let db = rusqlite::Connection::open(vault.db()).expect("open db");
    db.query_row(
        "SELECT at, tally FROM tallies WHERE machine = ?1",
        [machine],
        |r| Ok((r.get::<_, i64>(0)? as u64, r.get(1)?)),
    )
    .ok()
}

/// Posts `body` to `POST /v1/tallies` signed as `by`: (status, reply).
fn post_tally(vault: &Vault, by: &Machine, body: &str) -> (u16, String) {
    let signer = Signer {
        key: &by.key,
        machine: &by.id,
    };
    let (status, reply) = client(&vault.url)
        .request("POST", "/v1/tallies", body.as_bytes(), Some(&signer), None)
        .expect("request");
    (status, String::from_utf8_lossy(&reply).into_owned())
}

/// Two enrolled machines, each with one session shipped (and so a tally).
fn two_machines(vault: &Vault, org: &Org) -> (State, State) {
    let (a, b) = (State::new(), State::new());
    for (state, session) in [(&a, "a-session"), (&b, "b-session")] {
        ok(enroll(state, vault, org));
        append(state, session, 3);
        ok(ship(state));
    }
    assert_eq!(
        vault.count("tallies"),
        2,
        "each ship leaves its machine's tally"
    );
    (a, b)
}

/// The operator removes everything of one machine: its sessions from the
/// list and its tally from the tallies. ADR-0120 says a withheld tally gets
/// "every session of that machine" reported, but with the sessions gone too
/// nothing is listed to report, and the check never asks which enrolled
/// machine served no tally: exit 0, "the list agrees" for the other
/// machine, not a word about this one.
#[test]
#[ignore = "open: a machine whose tally AND sessions the operator withholds goes unreported (exit 0)"]
fn an_operator_who_withholds_a_machines_tally_and_sessions_is_caught() {
    let vault = Vault::start();
    let org = Org::new(&vault);
    let (a, b) = two_machines(&vault, &org);
    let (a, b) = (machine(&a), machine(&b));
    let honest = sessions(&vault, &org);
    assert_eq!(honest.status.code(), Some(0), "{}", stdout(&honest));

    operator_sql(&vault, FORGET_MACHINE, &b.id);
    assert_eq!(vault.count("tallies"), 1);
    let out = sessions(&vault, &org);
    let text = stdout(&out);
    assert!(
        text.contains(&format!("machine {}: the list agrees", a.id)),
        "{text}"
    );
    assert_eq!(
        out.status.code(),
        Some(3),
        "machine {} shipped b-session and tallied it; the vault hid both:\n{text}\n{}",
        b.id,
        stderr(&out)
    );
    assert!(text.contains(&b.id), "{text}");
}

/// The operator keeps a copy of a machine's tally, and after the machine's
/// next ship (a new session, a new tally) puts the old tally back and hides
/// the new session. ADR-0120 accepts this ("the time it shows is the
/// admin's clue"); it is recorded here because `nd7 admin sessions` exits
/// 0 and says "the list agrees", so an admin reading exit statuses (a cron
/// job) never sees the clue.
#[test]
#[ignore = "open (accepted in ADR-0120): an older tally served with the newer sessions hidden passes, exit 0"]
fn an_operator_who_serves_an_older_tally_is_caught() {
    let vault = Vault::start();
    let org = Org::new(&vault);
    let state = State::new();
    ok(enroll(&state, &vault, &org));
    let m = machine(&state);
    append(&state, "early", 3);
    ok(ship(&state));
    let (old_at, old) = kept_tally(&vault, &m.id).expect("the first ship's tally");
    // A later second, so that the next ship's tally is kept over it
    // (tallies of the same second are not: `set_tally` keeps a later one only).
    while unix_now() <= old_at {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    append(&state, "late", 3);
    ok(ship(&state));
    let (new_at, _) = kept_tally(&vault, &m.id).expect("tally");
    assert!(new_at > old_at, "the second ship's tally is kept");

    let db = rusqlite::Connection::open(vault.db()).expect("open db");
    db.execute(
        "UPDATE tallies SET at = ?1, tally = ?2 WHERE machine = ?3",
        rusqlite::params![old_at as i64, old, m.id],
    )
    .expect("put the old tally back");
    drop(db);
    let hide_late = "
DELETE FROM entries WHERE chain IN (SELECT id FROM chains WHERE machine = ?1 AND session = 'late');
DELETE FROM batches WHERE chain IN (SELECT id FROM chains WHERE machine = ?1 AND session = 'late');
DELETE FROM chains WHERE machine = ?1 AND session = 'late'";
    operator_sql(&vault, hide_late, &m.id);
    let out = sessions(&vault, &org);
    assert_eq!(
        out.status.code(),
        Some(3),
        "session late was shipped and tallied, then hidden behind the older tally:\n{}",
        stdout(&out)
    );
}

/// An enrolled machine that lies in its own tally: it names a session it
/// never shipped, and leaves out one it did. `nd7 admin sessions` blames
/// the vault for both ("FAILED (the vault)", exit 3), though the vault
/// did nothing: the tally is the machine's word alone, with nothing of
/// the vault's (a receipt) in it, so a malicious machine frames an honest
/// vault at will. What should hold: an honest vault is not blamed.
#[test]
#[ignore = "open: a machine's lying tally makes `nd7 admin sessions` blame an honest vault (exit 3)"]
fn a_machine_cannot_frame_an_honest_vault_with_its_own_tally() {
    let vault = Vault::start();
    let org = Org::new(&vault);
    let state = State::new();
    ok(enroll(&state, &vault, &org));
    append(&state, "real", 3);
    ok(ship(&state));
    let m = machine(&state);
    let honest = sessions(&vault, &org);
    assert_eq!(honest.status.code(), Some(0), "{}", stdout(&honest));

    let at = kept_tally(&vault, &m.id).expect("tally").0 + 1;
    let lie = vault::Tally::sign(&m.key, &m.id, at, vec![("ghost".to_string(), 5)]).render();
    let (status, reply) = post_tally(&vault, &m, &lie);
    assert_eq!(status, 200, "{reply}");
    let out = sessions(&vault, &org);
    let text = stdout(&out);
    assert!(
        !text.contains("FAILED (the vault)"),
        "the vault stored every batch it acknowledged and hid nothing, yet:\n{text}"
    );
}

/// A malicious machine sends a tally in another machine's name: one it
/// signed itself, and that machine's own genuine tally (which a machine
/// cannot read from the vault, but an eavesdropper on plain HTTP can
/// capture). Both are refused, and the other machine's tally is kept as
/// it was. Held (`sent_by` in the server's `tally`).
#[test]
fn a_machine_cannot_replace_another_machines_tally() {
    let vault = Vault::start();
    let org = Org::new(&vault);
    let (a, b) = two_machines(&vault, &org);
    let (a, b) = (machine(&a), machine(&b));
    let (b_at, b_tally) = kept_tally(&vault, &b.id).expect("b's tally");

    let forged = vault::Tally::sign(&a.key, &b.id, b_at + 1, Vec::new()).render();
    let (status, reply) = post_tally(&vault, &a, &forged);
    assert!((400..500).contains(&status), "{status} {reply}");
    let (status, reply) = post_tally(&vault, &a, &b_tally);
    assert!((400..500).contains(&status), "{status} {reply}");
    assert_eq!(kept_tally(&vault, &b.id), Some((b_at, b_tally)));
    let out = sessions(&vault, &org);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

/// An outsider holding one signed header of a machine's `POST /v1/batches`
/// whose body never came (an on-path capture of a request cut short, or a
/// machine's request it held back) sends that same header on every
/// connection the vault allows, and no body. ADR-0118 says a replayed
/// request promotes nothing, but `answer` promotes a body route's
/// connection at admission, when the header's signature verifies and its
/// nonce is not yet spent, and the nonce is spent only once a body is
/// handled: every copy is promoted, none can be evicted, and an honest
/// request waits until the bodies time out (`--body-timeout`, 120 s here).
/// `Expect: 100-continue` makes the vault say when each was admitted
/// (hyper answers 100 once the body is read, after admission).
#[test]
#[ignore = "open: one signed header replayed without a body promotes every connection it is sent on; nothing else is served"]
fn one_captured_header_without_its_body_cannot_hold_every_slot() {
    use std::io::{BufRead, BufReader, Write};
    use std::net::TcpStream;
    use std::time::Duration;

    let vault = Vault::start_with(&[
        "--max-connections",
        "4",
        "--reserved-connections",
        "1",
        "--body-timeout",
        "120",
        "--body-deadline",
        "600",
    ]);
    let org = Org::new(&vault);
    let state = State::new();
    ok(enroll(&state, &vault, &org));
    let m = machine(&state);
    let head = crate::vault_service::batch_head(&m, &[0u8; 1024]);
    let head = head.replacen("\r\n\r\n", "\r\nExpect: 100-continue\r\n\r\n", 1);
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut s = TcpStream::connect(&vault.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
        s.write_all(head.as_bytes()).expect("head");
        let mut line = String::new();
        BufReader::new(&s).read_line(&mut line).expect("a reply");
        assert!(line.contains(" 100 "), "admitted: {line:?}");
        held.push(s);
    }

    let mut honest = TcpStream::connect(&vault.addr).expect("connect");
    honest
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    honest
        .write_all(b"GET /v1/recipients HTTP/1.1\r\nHost: vault\r\nConnection: close\r\n\r\n")
        .expect("request");
    let mut line = String::new();
    let answered = BufReader::new(&honest).read_line(&mut line);
    assert!(
        matches!(answered, Ok(n) if n > 0) && line.contains(" 200 "),
        "four copies of one header, no body, hold every slot: {answered:?} {line:?}"
    );
    drop(held);
}
