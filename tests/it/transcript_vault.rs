//! Claude Code's transcript shipped with its session: `nd7 ship` sends the
//! bytes the anchors cover as encrypted pieces (the vault learns sizes only),
//! `nd7 admin pull` puts them back together and holds them against the
//! anchors, and `--compare` says when the machine's copy differs from what
//! was shipped. On loopback with the real `nd7-vault`.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::common::{State, run_with_stdin, stderr, stdout};
use crate::vault::{Org, Vault, db_bytes, enroll, ship};

const MARKER: &str = "TRANSCRIPT-PLAINTEXT-5e1d";

/// A session whose transcript lives under a scratch Claude configuration.
struct Claude {
    config: tempfile::TempDir,
    session: String,
}

impl Claude {
    fn new(session: &str) -> Claude {
        let c = Claude {
            config: tempfile::tempdir().expect("tempdir"),
            session: session.into(),
        };
        std::fs::create_dir_all(c.dir()).expect("mkdir");
        c
    }

    fn cwd() -> &'static str {
        "/home/dev/proj"
    }

    fn dir(&self) -> PathBuf {
        self.config
            .path()
            .join("projects")
            .join(nd7_core::transcript::layout::project_key(Claude::cwd()))
    }

    fn transcript(&self) -> PathBuf {
        self.dir().join(format!("{}.jsonl", self.session))
    }

    fn agent(&self, id: &str) -> PathBuf {
        self.dir()
            .join(&self.session)
            .join("subagents")
            .join(format!("agent-{id}.jsonl"))
    }

    fn hook(&self, state: &State, event: &str, extra: Value) {
        let mut p = json!({
            "session_id": self.session, "transcript_path": self.transcript(),
            "cwd": Claude::cwd(), "hook_event_name": event,
        });
        if let (Some(p), Value::Object(extra)) = (p.as_object_mut(), extra) {
            p.extend(extra);
        }
        let out = run_with_stdin(
            state
                .nd7()
                .env("CLAUDE_CONFIG_DIR", self.config.path())
                .arg("record"),
            p.to_string().as_bytes(),
        );
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "{}",
            stderr(&out)
        );
    }
}

fn grow(path: &Path, lines: std::ops::Range<usize>) {
    use std::io::Write;
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .expect("open");
    for i in lines {
        writeln!(
            f,
            "{{\"n\":{i},\"text\":\"{MARKER} {}\"}}",
            "y".repeat(i % 300)
        )
        .expect("write");
    }
}

fn pull(
    state: &State,
    vault: &Vault,
    org: &Org,
    session: &str,
    compare: bool,
) -> (std::process::Output, PathBuf) {
    let (out, events) = crate::vault::pull(state, vault, org, session, compare);
    let dir = events.parent().expect("session dir").join("transcripts");
    (out, dir)
}

/// The restored file whose name ends with `suffix`.
fn restored(dir: &Path, suffix: &str) -> Vec<u8> {
    let name = std::fs::read_dir(dir)
        .expect("transcripts restored")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.ends_with(suffix))
        .unwrap_or_else(|| panic!("no restored file ending in {suffix}"));
    std::fs::read(dir.join(name)).expect("read")
}

#[test]
fn transcripts_ship_with_their_session_and_pull_restores_and_compares_them() {
    let vault = Vault::start();
    let org = Org::new(&vault);
    let state = State::new();
    assert!(enroll(&state, &vault, &org).status.success());
    let c = Claude::new("7a1e2c3d-0000-4000-8000-000000000001");
    grow(&c.transcript(), 0..50);
    c.hook(&state, "Stop", json!({}));
    // More than one piece's worth (8 MiB) in one anchor.
    grow(&c.transcript(), 50..60_000);
    c.hook(
        &state,
        "PostToolUse",
        json!({"tool_name": "Bash", "tool_input": {}}),
    );
    grow(&c.agent("a1"), 0..30);
    c.hook(
        &state,
        "SubagentStop",
        json!({"agent_id": "a1", "agent_transcript_path": c.agent("a1")}),
    );
    grow(&c.transcript(), 60_000..60_010);
    c.hook(&state, "SessionEnd", json!({"reason": "other"}));
    let main_bytes = std::fs::read(c.transcript()).expect("read");
    assert!(main_bytes.len() > 8 << 20);

    let out = ship(&state);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let agent_bytes = std::fs::read(c.agent("a1")).expect("read");
    let total = main_bytes.len() + agent_bytes.len();
    assert!(
        stdout(&out).contains(&format!("{total} transcript bytes in 5 pieces")),
        "{}",
        stdout(&out)
    );
    // The vault learns sizes, never a byte of the transcript or its name.
    assert_eq!(vault.count("pieces"), 5);
    let db = db_bytes(&vault);
    let config = c.config.path().to_string_lossy().into_owned();
    for secret in [MARKER, "subagents", config.as_str()] {
        assert!(
            !db.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "{secret} is in the vault's database"
        );
    }
    // Shipping again sends nothing new.
    let again = ship(&state);
    assert!(
        !stdout(&again).contains("transcript bytes"),
        "{}",
        stdout(&again)
    );

    let (out, dir) = pull(&state, &vault, &org, &c.session, false);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert_eq!(restored(&dir, &format!("{}.jsonl", c.session)), main_bytes);
    assert_eq!(restored(&dir, "agent-a1.jsonl"), agent_bytes);
    assert!(
        stdout(&out).contains("holding 3 of its 3 anchors"),
        "{}",
        stdout(&out)
    );
    let (out, _) = pull(&state, &vault, &org, &c.session, true);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        stdout(&out).contains("the machine's copy extends"),
        "{}",
        stdout(&out)
    );

    // The machine's copy rewritten after shipping: --compare says so.
    let mut changed = main_bytes.clone();
    changed[100] ^= 1;
    std::fs::write(c.transcript(), &changed).expect("write");
    let (out, _) = pull(&state, &vault, &org, &c.session, true);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let line = main_bytes[..100].iter().filter(|&&b| b == b'\n').count() + 1;
    assert!(
        stdout(&out).contains(&format!(
            "the machine's copy of the transcript differs from what was shipped, from byte 100 (line {line})"
        )),
        "{}",
        stdout(&out)
    );
    std::fs::write(c.transcript(), &main_bytes).expect("restore");

    // The vault changes a stored piece: it no longer carries the machine's signature.
    let db = rusqlite::Connection::open(vault.db()).expect("db");
    let body: Vec<u8> = db
        .query_row("SELECT body FROM pieces ORDER BY anchor LIMIT 1", [], |r| {
            r.get(0)
        })
        .expect("a piece");
    let mut forged = body.clone();
    let at = forged.len() - 100;
    forged[at] ^= 1;
    db.execute(
        "UPDATE pieces SET body = ?1 WHERE body = ?2",
        rusqlite::params![forged, body],
    )
    .expect("forge");
    let (out, _) = pull(&state, &vault, &org, &c.session, false);
    assert_eq!(out.status.code(), Some(3), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("FAILED (the vault)") && stdout(&out).contains("forged"),
        "{}",
        stdout(&out)
    );
    db.execute(
        "UPDATE pieces SET body = ?1 WHERE body = ?2",
        rusqlite::params![body, forged],
    )
    .expect("undo");
    // The vault drops a piece: the file comes back up to there, and pull says why.
    db.execute(
        "DELETE FROM pieces WHERE anchor = (SELECT MAX(anchor) FROM pieces)",
        [],
    )
    .expect("drop");
    let (out, dir) = pull(&state, &vault, &org, &c.session, false);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("holds no complete bytes"),
        "{}",
        stdout(&out)
    );
    let partial = restored(&dir, &format!("{}.jsonl", c.session));
    assert!(partial.len() < main_bytes.len() && main_bytes.starts_with(&partial));
}

/// Anchored bytes the file no longer holds when ship comes are not shipped
/// (they are gone), said once; later anchors still ship.
#[test]
fn anchored_bytes_gone_before_shipping_are_said_once_and_skipped() {
    let vault = Vault::start();
    let org = Org::new(&vault);
    let state = State::new();
    assert!(enroll(&state, &vault, &org).status.success());
    let c = Claude::new("7a1e2c3d-0000-4000-8000-000000000002");
    grow(&c.transcript(), 0..20);
    c.hook(&state, "Stop", json!({}));
    // Rewritten before any ship: the anchored bytes are gone.
    std::fs::write(c.transcript(), b"{\"rewritten\":true}\n").expect("write");
    c.hook(&state, "Stop", json!({}));
    let out = ship(&state);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("no longer on disk as anchored"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("entry 1: bytes 0..")
            && stderr(&out).contains("shorter than anchored"),
        "{}",
        stderr(&out)
    );
    let out = ship(&state);
    assert_eq!(out.status.code(), Some(0), "said once: {}", stderr(&out));
    let (out, dir) = pull(&state, &vault, &org, &c.session, false);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    // The second generation (after the break) came through whole.
    assert_eq!(
        restored(&dir, &format!("g1-{}.jsonl", c.session)),
        b"{\"rewritten\":true}\n"
    );
    assert!(
        stdout(&out).contains("holds no complete bytes"),
        "{}",
        stdout(&out)
    );

    // Changed in place, same length, before its end: no hook saw it, and
    // ship checks the bytes against the anchor before sending any (guards
    // the digest comparison in `transcript::ship::bytes_of`).
    let d = Claude::new("7a1e2c3d-0000-4000-8000-000000000004");
    grow(&d.transcript(), 0..100);
    d.hook(&state, "Stop", json!({}));
    let mut bytes = std::fs::read(d.transcript()).expect("read");
    bytes[10] ^= 1;
    std::fs::write(d.transcript(), &bytes).expect("write");
    let out = ship(&state);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("the file no longer holds what was anchored"),
        "{}",
        stderr(&out)
    );
    let (out, _) = pull(&state, &vault, &org, &d.session, false);
    assert!(
        stdout(&out).contains("holds no complete bytes"),
        "{}",
        stdout(&out)
    );
}

/// What the vault refuses of a piece: one not signed by the machine that
/// sends it, one naming another machine, one whose anchor it does not hold
/// yet; and a piece sent again is acknowledged, stored once.
#[test]
fn the_vault_takes_only_the_machines_own_pieces_of_anchors_it_holds() {
    use nd7_core::ship::{Client, Machine};
    use nd7_core::vault::{self as v, KeyId, PieceHeader, RequestAuth, Secret32, SigningKey};
    let vault = Vault::start();
    let org = Org::new(&vault);
    let state = State::new();
    assert!(enroll(&state, &vault, &org).status.success());
    let c = Claude::new("7a1e2c3d-0000-4000-8000-000000000003");
    grow(&c.transcript(), 0..5);
    c.hook(&state, "Stop", json!({}));
    // Ship the entries only: the vault then holds entries 0 and 1 (the
    // hook's, then its anchor).
    let machine = Machine::load(&state.xdg().join("nd7")).expect("enrolled");
    assert_eq!(ship(&state).status.code(), Some(0));
    // A second machine of the same organisation, with a session of its own.
    let state2 = State::new();
    assert!(enroll(&state2, &vault, &org).status.success());
    let c2 = Claude::new("7a1e2c3d-0000-4000-8000-000000000004");
    grow(&c2.transcript(), 0..5);
    c2.hook(&state2, "Stop", json!({}));
    assert_eq!(ship(&state2).status.code(), Some(0));
    let machine2 = Machine::load(&state2.xdg().join("nd7")).expect("enrolled");
    let pieces_before = vault.count("pieces");
    let key = Secret32::from_bytes([1; 32]);
    let sealed = |session: &str,
                  anchor: u64,
                  from: u64,
                  machine_id: &str,
                  signer: &SigningKey,
                  bytes: &[u8]| {
        let header = PieceHeader {
            machine: machine_id.into(),
            session: session.into(),
            key: KeyId::of(&key),
            anchor,
            from,
            to: from + 4,
            after: None,
        };
        v::seal_piece(&header, bytes, &key, b"wrapped", [2; 24], signer)
    };
    let piece = |anchor: u64, from: u64, machine_id: &str, signer: &SigningKey| {
        sealed(&c.session, anchor, from, machine_id, signer, b"abcd")
    };
    let client = Client::new(&vault.url, &nd7_core::http_client::Trust::Default).expect("client");
    let mut nonce = 0u8;
    let mut send = |body: Vec<u8>| {
        nonce += 1;
        let auth = RequestAuth::sign(
            &machine.key,
            &machine.id,
            "POST",
            "/v1/transcripts",
            nd7_core::ship::unix_now(),
            [nonce; 16],
            &body,
        );
        let (status, text) = client
            .send_raw("POST", "/v1/transcripts", &body, &auth.headers())
            .expect("http");
        (status, String::from_utf8_lossy(&text).into_owned())
    };
    let other = SigningKey::from_seed(&Secret32::from_bytes([5; 32]));
    let (status, text) = send(piece(1, 100, &machine.id, &other));
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("not signed by the machine's key"), "{text}");
    let (status, text) = send(piece(1, 100, "another-machine", &machine.key));
    assert_eq!(status, 403, "{text}");
    let (status, text) = send(piece(9, 100, &machine.id, &machine.key));
    assert_eq!(status, 409, "{text}");
    assert!(text.contains("entry 9 is not stored yet"), "{text}");
    // The other machine's session: named as this machine's, the vault
    // holds no such chain of this machine's (guards the head lookup by the
    // signer, not by the header); named as the other machine's, the
    // signer is not that machine.
    let (status, text) = send(sealed(
        &c2.session,
        1,
        0,
        &machine.id,
        &machine.key,
        b"abcd",
    ));
    assert_eq!(status, 409, "{text}");
    let (status, text) = send(sealed(
        &c2.session,
        1,
        0,
        &machine2.id,
        &machine.key,
        b"abcd",
    ));
    assert_eq!(status, 403, "{text}");
    // More ciphertext than four bytes can need: padding the vault would
    // keep for nothing (guards `most_ciphertext` in `parse_piece`).
    let mut noise = vec![0u8; 64 << 10];
    blake3::Hasher::new().finalize_xof().fill(&mut noise);
    let (status, text) = send(sealed(
        &c.session,
        1,
        100,
        &machine.id,
        &machine.key,
        &noise,
    ));
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("bytes of ciphertext"), "{text}");
    assert_eq!(vault.count("pieces"), pieces_before);
    let first = piece(1, 100, &machine.id, &machine.key);
    let (status, text) = send(first.clone());
    assert_eq!(
        (status, text.lines().next()),
        (200, Some("stored 1 100..104"))
    );
    // The receipt names the piece stored, signed by the vault.
    let receipt =
        v::PieceReceipt::parse(text.split_once('\n').expect("receipt").1).expect("a piece receipt");
    let vault_key = v::PublicKey::from_hex(&vault.key).expect("vault key");
    assert_eq!(receipt.verify(&vault_key, &machine.key.public()), Ok(()));
    assert_eq!(receipt.piece, v::parse_piece(&first).expect("piece").batch);
    // Sent again (other bytes: another nonce), it is acknowledged with the
    // receipt of the first, which is kept.
    let (status, text) = send(piece(1, 100, &machine.id, &machine.key));
    assert_eq!(
        (status, text.lines().next()),
        (200, Some("already stored 1 100..104"))
    );
    let again =
        v::PieceReceipt::parse(text.split_once('\n').expect("receipt").1).expect("a piece receipt");
    assert_eq!(again.piece, receipt.piece);
    assert_eq!(vault.count("pieces"), pieces_before + 1);
}

/// Codex's rollout ships and comes back as Claude Code's transcript does:
/// the same pieces, restored, held against the same anchors, compared with
/// the machine's copy; a file the agent named outside Codex's sessions
/// directory is neither anchored nor shipped.
#[test]
fn a_codex_rollout_ships_with_its_session_and_pull_restores_and_compares_it() {
    let vault = Vault::start();
    let org = Org::new(&vault);
    let state = State::new();
    assert!(enroll(&state, &vault, &org).status.success());
    let session = "01a22ef1-63ed-77e0-99ae-cbf4bcd01d2c";
    let home = tempfile::tempdir().expect("tempdir");
    let codex_home = home.path().join(".codex");
    let rollout = codex_home
        .join("sessions/2026/12/01")
        .join(format!("rollout-2026-12-01T00-11-41-{session}.jsonl"));
    let secret = codex_home.join("auth.json");
    std::fs::create_dir_all(&codex_home).expect("mkdir");
    std::fs::write(&secret, "CODEX-AUTH-SECRET-77c1\n").expect("write");
    let hook = |event: &str, named: &Path| {
        let p = json!({
            "session_id": session, "transcript_path": named,
            "cwd": "/home/dev/proj", "hook_event_name": event,
        });
        let out = run_with_stdin(
            state
                .nd7()
                .env("CODEX_HOME", &codex_home)
                .args(["record", "--agent", "codex"]),
            p.to_string().as_bytes(),
        );
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "{}",
            stderr(&out)
        );
    };
    grow(&rollout, 0..40);
    hook("SessionStart", &rollout);
    grow(&rollout, 40..400);
    hook("PostToolUse", &rollout);
    // The agent names its credentials as the rollout: a gap, nothing read.
    hook("Stop", &secret);
    grow(&rollout, 400..410);
    hook("SessionEnd", &rollout);
    let bytes = std::fs::read(&rollout).expect("read");

    let out = ship(&state);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        stdout(&out).contains(&format!("{} transcript bytes in 3 pieces", bytes.len())),
        "{}",
        stdout(&out)
    );
    let db = db_bytes(&vault);
    let root = codex_home.to_string_lossy().into_owned();
    for secret in [MARKER, "rollout-", root.as_str(), "CODEX-AUTH-SECRET"] {
        assert!(
            !db.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "{secret} is in the vault's database"
        );
    }

    let (out, dir) = pull(&state, &vault, &org, session, true);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert_eq!(restored(&dir, &format!("-{session}.jsonl")), bytes);
    assert!(
        stdout(&out).contains("holding 3 of its 3 anchors"),
        "{}",
        stdout(&out)
    );
    assert!(
        stdout(&out).contains("the machine's copy extends"),
        "{}",
        stdout(&out)
    );
    let names: Vec<String> = std::fs::read_dir(&dir)
        .expect("restored")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");

    // The rollout rewritten on the machine after shipping: --compare says so.
    let mut changed = bytes.clone();
    changed[200] ^= 1;
    std::fs::write(&rollout, &changed).expect("write");
    let (out, _) = pull(&state, &vault, &org, session, true);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("differs from what was shipped, from byte 200"),
        "{}",
        stdout(&out)
    );
}

/// The vault drops a transcript piece it took: one in the middle, then the
/// last. Guards the pieces' `after` links, checked in
/// `transcript::pull::pull` (a dropped piece in the middle is the vault's,
/// without the machine's copy), and the piece receipt the machine keeps
/// (`transcript/receipt`), checked by `compare_receipt` (a dropped last
/// piece, with `--compare`). Each was seen to pass as a note, exit 0,
/// without its check.
#[test]
fn attack_drop_a_transcript_piece() {
    let vault = Vault::start();
    let org = Org::new(&vault);
    let state = State::new();
    assert!(enroll(&state, &vault, &org).status.success());
    let c = Claude::new("7a1e2c3d-0000-4000-8000-000000000009");
    for n in 0..3 {
        grow(&c.transcript(), n * 40..(n + 1) * 40);
        c.hook(&state, "Stop", json!({}));
    }
    let out = ship(&state);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(vault.count("pieces"), 3);
    let receipt = state.log(&c.session).dir().join("transcript/receipt");
    assert!(
        std::fs::read_to_string(&receipt)
            .expect("the last piece's receipt")
            .starts_with("nd7-piece-receipt v1\n")
    );

    let db = rusqlite::Connection::open(vault.db()).expect("db");
    let anchors: Vec<i64> = db
        .prepare("SELECT anchor FROM pieces ORDER BY anchor")
        .expect("q")
        .query_map([], |r| r.get(0))
        .expect("rows")
        .collect::<Result<_, _>>()
        .expect("anchors");
    let take = |anchor: i64| -> Vec<u8> {
        let body: Vec<u8> = db
            .query_row("SELECT body FROM pieces WHERE anchor = ?1", [anchor], |r| {
                r.get(0)
            })
            .expect("piece");
        db.execute("DELETE FROM pieces WHERE anchor = ?1", [anchor])
            .expect("drop");
        body
    };
    let put = |anchor: i64, body: Vec<u8>| {
        db.execute(
            "INSERT INTO pieces (chain, anchor, from_byte, to_byte, body, stored) SELECT chain, ?1, 0, 0, ?2, 0 FROM pieces LIMIT 1",
            rusqlite::params![anchor, body],
        )
        .expect("put back");
    };
    let middle = take(anchors[1]);
    let (out, _) = pull(&state, &vault, &org, &c.session, false);
    assert_eq!(out.status.code(), Some(3), "{}", stdout(&out));
    assert!(
        stdout(&out).contains(&format!(
            "the machine shipped it after its piece of entry {} from byte",
            anchors[1]
        )) && stdout(&out).contains("which the vault does not serve"),
        "{}",
        stdout(&out)
    );
    put(anchors[1], middle);

    take(anchors[2]);
    let (out, _) = pull(&state, &vault, &org, &c.session, false);
    assert_eq!(
        out.status.code(),
        Some(0),
        "without the machine's copy, a dropped last piece is a note: {}",
        stdout(&out)
    );
    let (out, _) = pull(&state, &vault, &org, &c.session, true);
    assert_eq!(out.status.code(), Some(3), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("the transcript bytes")
            && stdout(&out).contains(&format!(
                "entry {} anchors: the vault acknowledged that piece",
                anchors[2]
            ))
            && stdout(&out).contains("but no longer serves it: it dropped it"),
        "{}",
        stdout(&out)
    );
}
