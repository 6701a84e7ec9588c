//! docs/vault.md's restore procedure, on SQLite and on PostgreSQL: the
//! backup holds entries 0..4 of two sessions, entries 5..9 are shipped after
//! it; one session ends (its `chain.key` removed), the other goes on. After
//! the vault is restored from the backup and the restore declared, one
//! `nd7 ship` ships again what the vault lost of both, from the local log,
//! and `nd7 admin pull --compare` matches again (issue 34, item 2).

use crate::common::{State, stderr, stdout};
use crate::pg;
use crate::vault::{Org, Vault, append, doctor_lines, enroll, ok, pull, record_payload, ship};

/// How the test takes a backup of the vault's database and puts it back.
enum Db {
    Sqlite,
    /// The database's name on the test cluster.
    Postgres(String),
}

impl Db {
    fn backup(&self, vault: &Vault) {
        match self {
            Db::Sqlite => copy_files(vault, "vault.db", "backup.db"),
            Db::Postgres(name) => admin_sql(&format!("CREATE DATABASE {name}_bk TEMPLATE {name}")),
        }
    }

    fn restore(&self, vault: &Vault) {
        match self {
            Db::Sqlite => copy_files(vault, "backup.db", "vault.db"),
            Db::Postgres(name) => admin_sql(&format!(
                "DROP DATABASE {name}; CREATE DATABASE {name} TEMPLATE {name}_bk"
            )),
        }
    }
}

fn copy_files(vault: &Vault, from: &str, to: &str) {
    for suffix in ["", "-wal", "-shm"] {
        let src = vault.dir.path().join(format!("{from}{suffix}"));
        let dst = vault.dir.path().join(format!("{to}{suffix}"));
        let _ = std::fs::remove_file(&dst);
        if src.exists() {
            std::fs::copy(&src, &dst).expect("copy");
        }
    }
}

fn admin_sql(sql: &str) {
    let mut admin = postgres::Client::connect(&pg::cluster().url("postgres"), postgres::NoTls)
        .expect("connect");
    for statement in sql.split("; ") {
        admin.batch_execute(statement).expect(statement);
    }
}

fn session_end(state: &State, session: &str) {
    record_payload(
        state,
        serde_json::json!({
            "session_id": session,
            "cwd": "/proj",
            "hook_event_name": "SessionEnd",
            "reason": "exit",
        }),
    );
}

/// The procedure on `vault` (stopped, its database empty): see the module.
/// Guards `chain_reaches` in `ship_session`: without it, every ship after
/// the restore failed on the ended session ("chain.key no longer holds
/// chain key"), and its lost entries were never shipped again.
fn restore_strands_no_session(mut vault: Vault, db: Db) {
    vault.spawn();
    let org = Org::new(&vault);
    let state = State::new();
    ok(enroll(&state, &vault, &org));
    append(&state, "ended", 5);
    append(&state, "running", 5);
    ok(ship(&state));

    vault.kill();
    db.backup(&vault);
    let backup_taken = nd7_core::ship::unix_now();
    vault.spawn();
    append(&state, "ended", 4);
    session_end(&state, "ended");
    append(&state, "running", 5);
    ok(ship(&state));
    let ended = state.log("ended").dir().to_path_buf();
    assert!(!ended.join("chain.key").exists(), "ended and shipped");

    vault.kill();
    db.restore(&vault);
    ok(vault.admin(&["restored", "--backup-taken", &backup_taken.to_string()]));
    vault.spawn();
    let out = ship(&state);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for session in ["ended", "running"] {
        assert!(
            stderr(&out).contains(&format!(
                "{session}: warning: the vault lost entries 5..9 it had acknowledged"
            )),
            "{}",
            stderr(&out)
        );
        let (out, _) = pull(&state, &vault, &org, session, true);
        assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
        assert!(
            stdout(&out).contains("local copy matches the vault's 10 entries")
                && stdout(&out).contains("the vault holds those entries again, unchanged"),
            "{}",
            stdout(&out)
        );
        std::fs::remove_dir_all(vault.dir.path().join("pulled")).expect("clear the pull");
    }
    assert!(!ended.join("chain.key").exists(), "ended and shipped again");
    let doctor = doctor_lines(&state);
    for check in ["ok   ship ", "ok   receipts "] {
        assert!(doctor.iter().any(|l| l.starts_with(check)), "{doctor:?}");
    }
}

#[test]
fn a_declared_restore_on_sqlite_strands_no_session_ended_or_running() {
    restore_strands_no_session(Vault::new(None), Db::Sqlite);
}

#[test]
fn a_declared_restore_on_postgresql_strands_no_session_ended_or_running() {
    let url = pg::cluster().database();
    let name = url
        .trim_start_matches("postgresql:///")
        .split('?')
        .next()
        .expect("a database name")
        .to_string();
    restore_strands_no_session(Vault::new(Some(url)), Db::Postgres(name));
}
