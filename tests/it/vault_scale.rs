//! Fifty machines shipping at once, each twice over (two `nd7 ship` runs
//! racing on the same sessions), into one vault on SQLite, and into two
//! `nd7-vault` processes sharing one PostgreSQL database, each machine
//! enrolled through one server and shipping through the other. Nothing is
//! lost, nothing is stored twice, and every run ends well. Throughput and
//! per-batch times are `bench/vault.sh`'s (docs/benchmarks.md).
//!
//! Guards `vault/ship.lock` in `ship::ship_all`: without it the two runs on
//! one machine race to make a session's chain key, and one fails (seen:
//! "chain.key: cannot replace"); and, through two servers, the chain's row
//! lock (ADR-0047).

use std::process::Child;

use crate::common::{State, stderr};
use crate::pg;
use crate::vault::{Org, Vault, append, ok};

const MACHINES: usize = 50;
const SESSIONS: usize = 2;
const ENTRIES: usize = 60;

/// (entries, distinct (chain, seq), batches, entries the batches cover).
fn counts(vault: &Vault) -> (i64, i64, i64, i64) {
    let q = "SELECT (SELECT COUNT(*) FROM entries), (SELECT COUNT(*) FROM (SELECT DISTINCT chain, seq FROM entries) d),
                    (SELECT COUNT(*) FROM batches), (SELECT CAST(COALESCE(SUM(last - first + 1), 0) AS BIGINT) FROM batches)";
    match &vault.database {
        None => {
            let db = rusqlite::Connection::open(vault.db()).expect("open");
            db.query_row(q, [], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
                .expect("count")
        }
        Some(url) => {
            let mut db = postgres::Client::connect(url, postgres::NoTls).expect("connect");
            let r = db.query_one(q, &[]).expect("count");
            (r.get(0), r.get(1), r.get(2), r.get(3))
        }
    }
}

/// Enrols the machines through `urls[i % n]`, points each at the next
/// server to ship through, and runs two ships per machine at once.
fn fifty_machines(vault: &Vault, urls: &[String]) {
    let org = Org::new(vault);
    let states: Vec<State> = (0..MACHINES).map(|_| State::new()).collect();
    for (i, state) in states.iter().enumerate() {
        let url = &urls[i % urls.len()];
        ok(state
            .nd7()
            .args([
                "enroll",
                url,
                "--token",
                &org.token(),
                "--fingerprint",
                &org.fingerprint,
            ])
            .output()
            .expect("enroll"));
        let ship_to = &urls[(i + 1) % urls.len()];
        std::fs::write(state.xdg().join("nd7/vault/server"), format!("{ship_to}\n"))
            .expect("server");
        for s in 0..SESSIONS {
            append(state, &format!("m{i}-s{s}"), ENTRIES);
        }
    }
    let runs: Vec<(usize, Child)> = states
        .iter()
        .enumerate()
        .flat_map(|(i, state)| {
            (0..2).map(move |_| {
                (
                    i,
                    state
                        .nd7()
                        .arg("ship")
                        .stdout(std::process::Stdio::piped())
                        .stderr(std::process::Stdio::piped())
                        .spawn()
                        .expect("ship"),
                )
            })
        })
        .collect();
    for (i, run) in runs {
        let out = run.wait_with_output().expect("ship");
        assert!(out.status.success(), "machine {i}: {}", stderr(&out));
    }
    let total = (MACHINES * SESSIONS * ENTRIES) as i64;
    let (entries, distinct, batches, covered) = counts(vault);
    assert_eq!((entries, distinct, covered), (total, total, total));
    assert!(batches >= (MACHINES * SESSIONS) as i64);
    // And each machine's own view agrees: its kept receipt is the last entry.
    for (i, state) in states.iter().enumerate() {
        for s in 0..SESSIONS {
            let receipt =
                std::fs::read_to_string(state.log(&format!("m{i}-s{s}")).dir().join("receipt"))
                    .expect("receipt");
            assert!(
                receipt.contains(&format!("\nlast {}\n", ENTRIES - 1)),
                "machine {i} session {s}: {receipt}"
            );
        }
    }
}

#[test]
fn fifty_machines_ship_at_once_into_sqlite() {
    let vault = Vault::start();
    fifty_machines(&vault, std::slice::from_ref(&vault.url));
}

/// Two servers, one database: the chain's row lock is what keeps two
/// servers from storing the same batch (vault_store.rs has the same race
/// between connections, and the test that fails without the lock).
#[test]
fn fifty_machines_ship_at_once_into_postgres_through_two_servers() {
    let mut vault = Vault::new(Some(pg::cluster().database()));
    vault.spawn();
    let (mut second, second_url) = vault.another("server2.log");
    fifty_machines(&vault, &[vault.url.clone(), second_url]);
    let _ = second.kill();
    let _ = second.wait();
}
