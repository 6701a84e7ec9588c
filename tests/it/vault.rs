//! The vault end to end, on loopback, with the real `nd7-vault` server and the
//! real `nd7` binary: enrolment, shipping, reading back, and every refusal.
//! Built only with the `vault-server` feature (scripts/test.sh turns it on).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

use nd7_core::chain::{self, Hash};
use nd7_core::ship::{self, Client, Machine, Request};
use nd7_core::vault::{self, BatchHeader, IndexKey, KeyId, RequestAuth, SigningKey};

use crate::common::{State, event, stderr, stdout};

const MARKER: &str = "PLAINTEXT-MARKER-7f3a9c";

/// A running `nd7-vault serve` on 127.0.0.1, its database and key in a temp dir.
pub struct Vault {
    pub dir: tempfile::TempDir,
    child: Option<Child>,
    pub url: String,
    pub addr: String,
    /// The vault key's public half, as `nd7-vault key` printed it.
    pub key: String,
    /// More arguments for `nd7-vault serve`.
    pub serve_args: Vec<String>,
    /// A command `nd7-vault` runs under (`prlimit --nofile=…`).
    pub wrapper: Vec<String>,
    /// `--db` for every command: this SQLite file, or a PostgreSQL URL.
    pub database: Option<String>,
}

impl Vault {
    pub fn start() -> Vault {
        Vault::start_with(&[])
    }

    /// A vault whose `serve` gets `args` too.
    pub fn start_with(args: &[&str]) -> Vault {
        let mut v = Vault::new(None);
        v.serve_args = args.iter().map(|a| a.to_string()).collect();
        v.spawn();
        v
    }

    /// A vault's key and directory, serving nothing yet; on the PostgreSQL
    /// database `url` if given, else a SQLite file.
    pub fn new(url: Option<String>) -> Vault {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut v = Vault {
            dir,
            child: None,
            url: String::new(),
            addr: "127.0.0.1:0".into(),
            key: String::new(),
            serve_args: Vec::new(),
            wrapper: Vec::new(),
            database: url,
        };
        let out = v.admin(&["key"]);
        assert!(out.status.success(), "{}", stderr(&out));
        v.key = stdout(&out).trim().to_string();
        v
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Waits for the server to exit; its status.
    pub fn wait(&mut self) -> std::process::ExitStatus {
        self.child.take().expect("running").wait().expect("wait")
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// Starts (another) `nd7-vault serve` on the same database and key:
    /// (the process, its URL).
    pub fn another(&self, log: &str) -> (Child, String) {
        let (child, url) = self.serve(log, "127.0.0.1:0");
        (child, url)
    }

    fn serve(&self, log: &str, addr: &str) -> (Child, String) {
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(self.dir.path().join(log))
            .expect("server log");
        let mut cmd = match self.wrapper.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(env!("CARGO_BIN_EXE_nd7-vault"));
                c
            }
            None => Command::new(env!("CARGO_BIN_EXE_nd7-vault")),
        };
        let mut child = cmd
            .args(["serve", "--listen", addr, "--db"])
            .arg(self.db_arg())
            .arg("--key")
            .arg(self.key_path())
            .args(&self.serve_args)
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("start nd7-vault");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("nd7-vault says where it listens");
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("listening line: {line:?}"))
            .to_string();
        (child, url)
    }

    pub fn key_path(&self) -> PathBuf {
        self.dir.path().join("vault.key")
    }

    /// What `--db` says.
    pub fn db_arg(&self) -> std::ffi::OsString {
        match &self.database {
            Some(url) => url.into(),
            None => self.db().into(),
        }
    }

    pub fn db(&self) -> PathBuf {
        self.dir.path().join("vault.db")
    }

    pub fn spawn(&mut self) {
        let (child, url) = self.serve("server.log", &self.addr.clone());
        self.url = url;
        self.addr = self
            .url
            .trim_start_matches("http://")
            .trim_start_matches("https://")
            .to_string();
        self.child = Some(child);
    }

    /// Kills the server (SIGKILL) and starts it again on the same port and database.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// `nd7-vault COMMAND --db … [--key …] ARGS`.
    pub fn admin(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_nd7-vault"));
        cmd.args(&args[..1]).arg("--db").arg(self.db_arg());
        if matches!(args[0], "key" | "recipients" | "restored") {
            cmd.arg("--key").arg(self.key_path());
        }
        cmd.args(&args[1..]);
        cmd.output().expect("run nd7-vault")
    }

    pub fn read_token(&self) -> String {
        let out = self.admin(&["read-token"]);
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out).trim().to_string()
    }

    /// Rows in a table, read straight from the database.
    pub fn count(&self, table: &str) -> i64 {
        let db = rusqlite::Connection::open(self.db()).expect("open db");
        db.query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0))
            .expect("count")
    }
}

impl Drop for Vault {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The admins' side: an organisation key, one age identity, and the signed
/// recipients document installed on the vault.
pub struct Org {
    pub dir: tempfile::TempDir,
    pub fingerprint: String,
    pub identity: PathBuf,
    /// The version of the last document signed.
    pub version: std::cell::Cell<u64>,
}

/// A client for the vault at `url`, trusting as nd7 does by default.
pub fn client(url: &str) -> Client {
    Client::new(url, &nd7_core::http_client::Trust::Default).expect("client")
}

pub fn nd7() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nd7"))
}

pub fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        stdout(&out),
        stderr(&out)
    );
    stdout(&out)
}

impl Org {
    pub fn new(vault: &Vault) -> Org {
        let org = Org::keys();
        org.install(vault);
        org
    }

    pub fn keys() -> Org {
        let dir = tempfile::tempdir().expect("tempdir");
        let key = dir.path().join("org.key");
        let fingerprint = ok(nd7()
            .args(["admin", "org-key", "--out"])
            .arg(&key)
            .output()
            .expect("run"))
        .trim()
        .to_string();
        let identity = dir.path().join("admin.age");
        ok(nd7()
            .args(["admin", "age-key", "--out"])
            .arg(&identity)
            .output()
            .expect("run"));
        Org {
            dir,
            fingerprint,
            identity,
            version: std::cell::Cell::new(0),
        }
    }

    /// A one-time enrolment token, signed by the organisation key, naming
    /// the version of the last document installed (an organisation that
    /// installed none names a document of its own, for no vault).
    pub fn token(&self) -> String {
        self.token_for("")
    }

    /// The same, registered for `label` in the organisation's register
    /// (`org.key.tokens`).
    pub fn token_for(&self, label: &str) -> String {
        let doc = self.dir.path().join("recipients");
        if !doc.exists() {
            let nowhere = SigningKey::from_seed(&vault::Secret32::from_bytes([0x5a; 32]))
                .public()
                .to_hex();
            let text = ok(nd7()
                .args(["admin", "sign-recipients", "--org-key"])
                .arg(self.dir.path().join("org.key"))
                .args(["--version", "1", "--vault-key", &nowhere, &self.recipient()])
                .output()
                .expect("run"));
            std::fs::write(&doc, text).expect("write doc");
        }
        ok(nd7()
            .args(["admin", "enrol-token", "--org-key"])
            .arg(self.dir.path().join("org.key"))
            .arg("--recipients")
            .arg(&doc)
            .args(["--label", label])
            .output()
            .expect("run"))
        .trim()
        .to_string()
    }

    pub fn recipient(&self) -> String {
        let text = std::fs::read_to_string(&self.identity).expect("identity");
        vault::AgeIdentity::parse(&text)
            .expect("identity parses")
            .recipient()
            .to_string()
    }

    pub fn install(&self, vault: &Vault) {
        self.install_for(vault, &[self.recipient()]);
    }

    /// Signs a document listing `recipients`, at the next version, and
    /// installs it on the vault.
    pub fn install_for(&self, vault: &Vault, recipients: &[String]) {
        self.install_until(vault, recipients, None);
    }

    /// The same, valid until `valid_until` (Unix s) rather than the default.
    pub fn install_until(&self, vault: &Vault, recipients: &[String], valid_until: Option<u64>) {
        let doc = self.sign_until(vault, recipients, valid_until);
        let path = self.dir.path().join("recipients");
        std::fs::write(&path, doc).expect("write doc");
        ok(vault.admin(&["recipients", path.to_str().expect("utf8")]));
    }

    /// A recipients document listing `recipients` and `vault`'s key, at the next version.
    pub fn sign(&self, vault: &Vault, recipients: &[String]) -> String {
        self.sign_until(vault, recipients, None)
    }

    pub fn sign_until(
        &self,
        vault: &Vault,
        recipients: &[String],
        valid_until: Option<u64>,
    ) -> String {
        self.version.set(self.version.get() + 1);
        let mut cmd = nd7();
        cmd.args(["admin", "sign-recipients", "--org-key"])
            .arg(self.dir.path().join("org.key"))
            .args(["--version", &self.version.get().to_string()])
            .args(["--vault-key", &vault.key]);
        if let Some(t) = valid_until {
            cmd.args(["--valid-until", &t.to_string()]);
        }
        ok(cmd.args(recipients).output().expect("run"))
    }
}

pub fn enroll(state: &State, vault: &Vault, org: &Org) -> Output {
    state
        .nd7()
        .args([
            "enroll",
            &vault.url,
            "--token",
            &org.token(),
            "--fingerprint",
            &org.fingerprint,
        ])
        .output()
        .expect("run nd7 enroll")
}

pub fn ship(state: &State) -> Output {
    state.nd7().arg("ship").output().expect("run nd7 ship")
}

pub fn pull(
    state: &State,
    vault: &Vault,
    org: &Org,
    session: &str,
    compare: bool,
) -> (Output, PathBuf) {
    let out_dir = vault.dir.path().join("pulled");
    let machine = std::fs::read_to_string(state.xdg().join("nd7/vault/machine.id")).expect("id");
    let mut cmd = nd7();
    cmd.args([
        "admin",
        "pull",
        &vault.url,
        "--read-token",
        &vault.read_token(),
    ])
    .arg("--identity")
    .arg(&org.identity)
    .args(["--fingerprint", &org.fingerprint])
    .args(["--machine", machine.trim(), "--session", session, "--out"])
    .arg(&out_dir);
    if compare {
        cmd.arg("--compare").arg(state.log(session).dir());
    }
    (
        cmd.output().expect("run pull"),
        out_dir.join(session).join("events.ndjson"),
    )
}

/// The batches the vault serves for a session, parsed.
pub fn stored_batches(vault: &Vault, machine: &str, session: &str) -> Vec<vault::Batch> {
    let framed = client(&vault.url)
        .ok(Request::get(&format!(
            "/v1/batches/{machine}/{}",
            vault::hex(session.as_bytes())
        ))
        .bearer(Some(&vault.read_token())))
        .expect("read batches");
    let mut rest = framed.as_slice();
    let mut out = Vec::new();
    while !rest.is_empty() {
        let len = u32::from_be_bytes(rest[..4].try_into().expect("len")) as usize;
        let frame = &rest[4..4 + len];
        if !vault::PullEnd::is_end(frame) {
            out.push(vault::parse_batch(frame).expect("batch"));
        }
        rest = &rest[4 + len..];
    }
    out
}

/// `nd7 doctor`'s lines, run with a scratch home.
pub fn doctor_lines(state: &State) -> Vec<String> {
    let home = tempfile::tempdir().expect("home");
    let out = state
        .nd7()
        .arg("doctor")
        .env("HOME", home.path())
        .output()
        .expect("doctor");
    stdout(&out).lines().map(str::to_string).collect()
}

/// Every byte of the vault's database files.
pub fn db_bytes(vault: &Vault) -> Vec<u8> {
    let mut all = Vec::new();
    for suffix in ["", "-wal", "-shm"] {
        let path = PathBuf::from(format!("{}{suffix}", vault.db().display()));
        all.extend(std::fs::read(path).unwrap_or_default());
    }
    all
}

pub fn record_payload(state: &State, payload: serde_json::Value) {
    let out = state.record(payload.to_string().as_bytes());
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{}",
        stderr(&out)
    );
}

#[test]
fn enrol_record_ship_pull_decrypt_verify_byte_for_byte() {
    let vault = Vault::start();
    let org = Org::new(&vault);
    let state = State::new();
    let out = enroll(&state, &vault, &org);
    assert!(out.status.success(), "{}", stderr(&out));
    let vdir = state.xdg().join("nd7/vault");
    for f in ["machine.key", "machine.id", "server", "recipients"] {
        let mode = std::fs::metadata(vdir.join(f)).expect(f).permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o600,
            "{f}"
        );
    }

    let s = "e2e-session";
    let base = serde_json::json!({"session_id": s, "cwd": "/proj", "transcript_path": crate::common::transcript_path(s, "/proj")});
    let mut start = base.clone();
    start["hook_event_name"] = "SessionStart".into();
    start["source"] = "startup".into();
    record_payload(&state, start);
    for n in 0..20 {
        let mut p = base.clone();
        p["hook_event_name"] = "UserPromptSubmit".into();
        p["prompt"] = format!("say {MARKER} number {n}").into();
        record_payload(&state, p);
    }
    assert_eq!(
        ok(ship(&state))
            .lines()
            .next()
            .map(|l| l.starts_with("shipped 21 entries")),
        Some(true)
    );
    let key_path = state.log(s).dir().join("chain.key");
    let chain_key =
        std::fs::read_to_string(&key_path).expect("chain.key while the session is open");

    // An admin recovers the chain key with the stock age CLI.
    let machine = Machine::load(&state.xdg().join("nd7")).expect("enrolled");
    let client = client(&vault.url);
    let framed = client
        .ok(Request::get(&format!(
            "/v1/batches/{}/{}",
            machine.id,
            vault::hex(s.as_bytes())
        ))
        .bearer(Some(&vault.read_token())))
        .expect("read batches");
    let len = u32::from_be_bytes(framed[..4].try_into().expect("len")) as usize;
    let batch = vault::parse_batch(&framed[4..4 + len]).expect("batch");
    let wrapped = vault.dir.path().join("chain.key.age");
    std::fs::write(&wrapped, &batch.wrapped_key).expect("write");
    let age = Command::new("age")
        .arg("-d")
        .arg("-i")
        .arg(&org.identity)
        .arg(&wrapped)
        .output()
        .expect("run age (apt-get install age)");
    assert!(age.status.success(), "{}", stderr(&age));
    assert_eq!(
        Some(vault::hex(&age.stdout).as_str()),
        chain_key.lines().last()
    );

    // The session ends; the next ship takes the rest and drops chain.key.
    let mut end = base.clone();
    end["hook_event_name"] = "SessionEnd".into();
    end["reason"] = "exit".into();
    record_payload(&state, end);
    ok(ship(&state));
    assert!(
        !key_path.exists(),
        "chain.key removed once ended and shipped"
    );
    assert_eq!(
        std::fs::read_to_string(state.log(s).dir().join("shipped")).expect("shipped"),
        std::fs::read_to_string(state.log(s).head_path()).expect("head")
    );

    let (out, pulled) = pull(&state, &vault, &org, s, true);
    let text = ok(out);
    assert!(text.contains("chain verified"), "{text}");
    assert!(
        text.contains("local copy matches the vault's 22 entries"),
        "{text}"
    );
    // `nd7 show` reads the pulled copy as it reads the local log, and the
    // local list says every entry is shipped.
    let show = state
        .nd7()
        .args(["show", "--json"])
        .arg(pulled.parent().expect("the session directory"))
        .output()
        .expect("nd7 show");
    assert_eq!(show.status.code(), Some(0), "{}", stderr(&show));
    let text = String::from_utf8_lossy(&show.stdout);
    let first: serde_json::Value =
        serde_json::from_str(text.lines().next().unwrap_or("")).expect("json");
    assert_eq!(
        (
            first["entries"].as_u64(),
            first["shipped"]["state"].as_str()
        ),
        (Some(22), Some("not_here"))
    );
    assert!(
        text.lines()
            .last()
            .is_some_and(|l| l.contains(r#""state":"clean""#)),
        "{text}"
    );
    let list = state
        .nd7()
        .args(["sessions", "--json"])
        .output()
        .expect("nd7 sessions");
    let row: serde_json::Value =
        serde_json::from_slice(list.stdout.split(|&b| b == b'\n').next().unwrap_or(b""))
            .expect("json");
    assert_eq!(
        row["shipped"],
        serde_json::json!({"state": "enrolled", "entries": 22})
    );
    assert_eq!(
        std::fs::read(pulled).expect("pulled log"),
        std::fs::read(state.log(s).events_path()).expect("local log")
    );

    // The vault holds no entry text.
    let local = std::fs::read(state.log(s).events_path()).expect("log");
    assert!(local.windows(MARKER.len()).any(|w| w == MARKER.as_bytes()));
    let db = db_bytes(&vault);
    assert!(db.len() > 10_000);
    assert!(
        !db.windows(MARKER.len()).any(|w| w == MARKER.as_bytes()),
        "plaintext in the vault"
    );
    assert_eq!(vault.count("entries"), 22);
}

/// Rewrites the log from entry `from` on with `edit` applied to that entry,
/// re-sealing every later entry and head, so the local chain verifies clean.
pub fn rewrite(state: &State, session: &str, from: usize, edit: impl Fn(&str) -> String) {
    let log = state.log(session);
    let text = std::fs::read_to_string(log.events_path()).expect("log");
    let mut out = String::new();
    let mut prev: Option<Hash> = None;
    for (i, line) in text.lines().enumerate() {
        if i < from {
            out.push_str(line);
            out.push('\n');
            prev = Some(chain::read_stated(line.as_bytes()).expect("entry").hash);
            continue;
        }
        let cut = line.rfind(",\"prev\":\"").expect("prev");
        let mut body = line[..cut].to_string();
        if i == from {
            body = edit(&body);
        }
        let p = prev.unwrap_or_else(|| Hash::session_fingerprint(session));
        let sealed = chain::seal(format!("{body},\"prev\":\"{p}\"}}").as_bytes());
        prev = Some(
            chain::read_stated(&sealed[..sealed.len() - 1])
                .expect("sealed")
                .hash,
        );
        out.push_str(std::str::from_utf8(&sealed).expect("utf8"));
    }
    std::fs::write(log.events_path(), out).expect("write log");
    let last = prev.expect("entries");
    let n = text.lines().count() - 1;
    std::fs::write(log.head_path(), format!("{n} {last}\n")).expect("head");
}

pub fn append(state: &State, session: &str, n: usize) {
    let log = state.log(session);
    for i in 0..n {
        log.append(&event(session, i)).expect("append");
    }
}

#[test]
fn a_rewrite_after_shipping_is_named_by_pull_and_refused_by_ship() {
    let vault = Vault::start();
    let org = Org::new(&vault);
    let state = State::new();
    ok(enroll(&state, &vault, &org));
    append(&state, "s1", 10);
    ok(ship(&state));

    rewrite(&state, "s1", 4, |e| e.replace("echo 4", "echo harmless"));
    let verify = state.nd7().args(["verify", "s1"]).output().expect("verify");
    assert!(verify.status.success(), "the rewrite is self-consistent");

    let (out, _) = pull(&state, &vault, &org, "s1", true);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("FAILED (the machine): machine ")
            && stdout(&out).contains(
                "session s1: the local copy was rewritten after shipping: entry 4 differs"
            ),
        "{}",
        stdout(&out)
    );
    // `nd7 doctor` says whose doing it is.
    let doctor = doctor_lines(&state);
    assert!(
        doctor.iter().any(|l| l.starts_with("FAIL receipts the local log of 1 session(s) no longer holds what was shipped (this machine's doing, not the vault's); s1: entry 9 was shipped with hash")),
        "{doctor:?}"
    );

    append(&state, "s1", 2);
    let out = ship(&state);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out)
            .contains("no longer matches what was shipped: entry 9 was shipped with digest"),
        "{}",
        stderr(&out)
    );
    assert_eq!(vault.count("entries"), 10);
}

/// A machine's signed batch of entries `first..` of a log, ready to send.
pub fn batch_body(
    machine: &Machine,
    state: &State,
    session: &str,
    first: u64,
    prev: Hash,
) -> Vec<u8> {
    batch_signed_by(machine, &machine.key, state, session, first, prev)
}

/// The same, its checkpoint signed by `signer`.
fn batch_signed_by(
    machine: &Machine,
    signer: &SigningKey,
    state: &State,
    session: &str,
    first: u64,
    prev: Hash,
) -> Vec<u8> {
    let text = std::fs::read(state.log(session).events_path()).expect("log");
    let lines: Vec<&[u8]> = text.split_inclusive(|&b| b == b'\n').collect();
    let entries: Vec<u8> = lines[first as usize..].concat();
    let key = vault::Secret32::from_bytes([1; 32]);
    let index_key = IndexKey::of(&key);
    let header = BatchHeader {
        machine: machine.id.clone(),
        session: session.into(),
        key: KeyId::of(&key),
        first,
        prev: index_key.digest(&prev),
        index: vault::index_lines(&entries, &index_key).expect("index"),
    };
    let wrapped = vault::wrap_chain_key(
        &key,
        &machine.recipients.recipients,
        &mut |b: &mut [u8]| b.fill(7),
    );
    vault::seal_batch(&header, &entries, &key, &wrapped, [9; 24], signer).0
}

fn signed(
    key: &SigningKey,
    machine: &str,
    path: &str,
    body: &[u8],
    time: u64,
    nonce: u8,
) -> Vec<(&'static str, String)> {
    RequestAuth::sign(key, machine, "POST", path, time, [nonce; 16], body)
        .headers()
        .to_vec()
}

#[test]
fn the_vault_refuses_what_it_must_and_stores_none_of_it() {
    let vault = Vault::start();
    let org = Org::new(&vault);
    let state = State::new();
    ok(enroll(&state, &vault, &org));
    let machine = Machine::load(&state.xdg().join("nd7")).expect("enrolled");
    let client = client(&vault.url);
    let now = ship::unix_now();
    append(&state, "s1", 6);
    let body = batch_body(&machine, &state, "s1", 0, Hash::session_fingerprint("s1"));
    let p = "/v1/batches";
    let stored = |v: &Vault| (v.count("batches"), v.count("entries"));

    let send = |body: &[u8], headers: Vec<(&'static str, String)>| {
        let (status, text) = client.send_raw("POST", p, body, &headers).expect("http");
        (status, String::from_utf8_lossy(&text).into_owned())
    };
    let expect = |(status, text): (u16, String), want: u16, says: &str| {
        assert_eq!(status, want, "{text}");
        assert!(text.contains(says), "{text:?} should say {says:?}");
    };

    // Ciphertext altered after it was signed: the headers check, the body
    // read is not the one they name.
    let mut tampered = body.clone();
    let at = tampered.len() - 30;
    tampered[at] ^= 1;
    expect(
        send(
            &tampered,
            signed(&machine.key, &machine.id, p, &body, now, 1),
        ),
        401,
        "is not the one its signature names",
    );
    // Signed by a key that is not the machine's.
    let other = SigningKey::from_seed(&vault::Secret32::from_bytes([5; 32]));
    expect(
        send(&body, signed(&other, &machine.id, p, &body, now, 2)),
        401,
        "signature does not verify",
    );
    // A machine the vault never enrolled.
    expect(
        send(&body, signed(&other, "feedface", p, &body, now, 3)),
        401,
        "unknown machine",
    );
    // Stale.
    expect(
        send(
            &body,
            signed(&machine.key, &machine.id, p, &body, now - 3600, 4),
        ),
        401,
        "away from the vault's clock",
    );
    // Too large: refused before it is read.
    let huge = vec![0u8; vault::MAX_BODY_BYTES + 1];
    expect(
        send(&huge, signed(&machine.key, &machine.id, p, &huge, now, 5)),
        413,
        "over the vault's",
    );
    // A request the machine signed, carrying a batch whose checkpoint it did not.
    let alien = batch_signed_by(
        &machine,
        &other,
        &state,
        "s1",
        0,
        Hash::session_fingerprint("s1"),
    );
    expect(
        send(&alien, signed(&machine.key, &machine.id, p, &alien, now, 9)),
        400,
        "the batch's checkpoint is not signed by the machine's key",
    );
    assert_eq!(stored(&vault), (0, 0));

    // A good batch is stored; the same request again is a replay.
    let good = signed(&machine.key, &machine.id, p, &body, now, 6);
    expect(send(&body, good.clone()), 200, "stored 0..5");
    assert_eq!(stored(&vault), (1, 6));
    expect(send(&body, good), 401, "replayed request");
    // A fresh resend of the same entries is acknowledged, not stored twice.
    expect(
        send(&body, signed(&machine.key, &machine.id, p, &body, now, 7)),
        200,
        "already stored 0..5",
    );
    assert_eq!(stored(&vault), (1, 6));

    // A batch that would fork the chain at entry 3: refused and recorded.
    rewrite(&state, "s1", 3, |e| e.replace("echo 3", "echo other"));
    let log = std::fs::read_to_string(state.log("s1").events_path()).expect("log");
    let prev2 = chain::read_stated(log.lines().nth(2).expect("entry 2").as_bytes())
        .expect("e")
        .hash;
    let fork = batch_body(&machine, &state, "s1", 3, prev2);
    expect(
        send(&fork, signed(&machine.key, &machine.id, p, &fork, now, 8)),
        409,
        "would fork the chain",
    );
    assert_eq!(stored(&vault), (1, 6));
    assert_eq!(vault.count("forks"), 1);
    let (_, forks) = client
        .request(Request::get("/v1/forks").bearer(Some(&vault.read_token())))
        .expect("forks");
    assert!(
        String::from_utf8_lossy(&forks).contains("3..5: entry 3 has digest"),
        "{}",
        String::from_utf8_lossy(&forks)
    );

    // Reads need a read token.
    let (status, _) = client.request(Request::get("/v1/sessions")).expect("http");
    assert_eq!(status, 401);
    let (status, _) = client
        .request(Request::get("/v1/sessions").bearer(Some("guess")))
        .expect("http");
    assert_eq!(status, 401);
}

#[test]
fn a_recipients_document_signed_by_another_key_is_refused_at_enrolment() {
    let vault = Vault::start();
    let org = Org::keys();
    let impostor = Org::keys();
    impostor.install(&vault);
    let state = State::new();
    let out = enroll(&state, &vault, &org);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "signed by the key with fingerprint {}, not the pinned {}",
            impostor.fingerprint, org.fingerprint
        )),
        "{}",
        stderr(&out)
    );
    assert!(!state.xdg().join("nd7/vault").exists(), "nothing written");
    assert_eq!(vault.count("machines"), 0, "the token was not spent either");
}

/// Checks the vault holds exactly the local log: every entry once.
fn assert_all_stored_once(vault: &Vault, state: &State, org: &Org, session: &str) {
    let local = std::fs::read(state.log(session).events_path()).expect("log");
    let n = local.iter().filter(|&&b| b == b'\n').count() as i64;
    assert_eq!(vault.count("entries"), n);
    let db = rusqlite::Connection::open(vault.db()).expect("db");
    let covered: i64 = db
        .query_row("SELECT SUM(last - first + 1) FROM batches", [], |r| {
            r.get(0)
        })
        .expect("sum");
    assert_eq!(covered, n, "no entry is in two batches");
    let (out, pulled) = pull(state, vault, org, session, true);
    ok(out);
    assert_eq!(std::fs::read(pulled).expect("pulled"), local);
}

fn big_session(state: &State, session: &str, entries: usize) {
    // About 20 KB per entry, so a few batches of 8 MiB.
    let log = state.log(session);
    let filler = "x".repeat(20_000);
    for i in 0..entries {
        let payload = serde_json::json!({
            "session_id": session, "cwd": "/proj", "hook_event_name": "PreToolUse",
            "tool_name": "Write", "tool_use_id": format!("t{i}"),
            "tool_input": {"file_path": "/proj/f", "content": format!("{i}{filler}")},
        });
        let e = nd7_core::hook::Event::new(
            &crate::common::invocation(),
            nd7_core::hook::Payload::parse(payload.to_string().as_bytes()).expect("payload"),
        );
        log.append(&e).expect("append");
    }
}

#[test]
fn killing_ship_or_the_vault_mid_batch_loses_and_duplicates_nothing() {
    let mut vault = Vault::start();
    let org = Org::new(&vault);
    let state = State::new();
    ok(enroll(&state, &vault, &org));
    big_session(&state, "big", 1500); // about 30 MB: four batches

    // Kill nd7 ship at a few points in its run.
    for delay_ms in [5, 40, 120, 300] {
        let mut child = state
            .nd7()
            .arg("ship")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("ship");
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        let _ = child.kill();
        let _ = child.wait();
    }
    // Kill the vault while a ship is under way, then bring it back.
    let mut child = state
        .nd7()
        .arg("ship")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("ship");
    std::thread::sleep(std::time::Duration::from_millis(60));
    vault.restart();
    let _ = child.wait();
    // The acknowledgement arrived but `shipped` was never rewritten.
    let shipped = state.log("big").dir().join("shipped");
    let _ = std::fs::remove_file(&shipped);

    ok(ship(&state));
    assert_all_stored_once(&vault, &state, &org, "big");
    assert_eq!(
        std::fs::read_to_string(&shipped).expect("shipped"),
        std::fs::read_to_string(state.log("big").head_path()).expect("head")
    );
    // Nothing left to ship: nothing sent.
    let out = ok(ship(&state));
    assert!(out.starts_with("shipped 0 entries in 0 batches"), "{out}");
    // Killed again between the acknowledgement and `shipped`: the next run
    // starts where the vault's copy ends and sends nothing again.
    std::fs::remove_file(&shipped).expect("remove shipped");
    let out = ok(ship(&state));
    assert!(out.starts_with("shipped 0 entries in 0 batches"), "{out}");
    assert!(
        shipped.exists(),
        "shipped is restored from the vault's head"
    );
}

#[test]
fn the_stock_age_cli_and_nd7_read_each_others_chain_key_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let id_path = dir.path().join("key.txt");
    let keygen = Command::new("age-keygen")
        .arg("-o")
        .arg(&id_path)
        .output()
        .expect("run age-keygen (apt-get install age)");
    assert!(keygen.status.success(), "{}", stderr(&keygen));
    let identity = vault::AgeIdentity::parse(&std::fs::read_to_string(&id_path).expect("key"))
        .expect("age-keygen's identity parses");

    // nd7 wraps; age unwraps.
    let key = vault::Secret32::from_bytes([0x5a; 32]);
    let mut os = |b: &mut [u8]| getrandom::getrandom(b).expect("random");
    let file = vault::wrap_chain_key(&key, &[identity.recipient()], &mut os);
    let wrapped = dir.path().join("chain.key.age");
    std::fs::write(&wrapped, &file).expect("write");
    let out = Command::new("age")
        .arg("-d")
        .arg("-i")
        .arg(&id_path)
        .arg(&wrapped)
        .output()
        .expect("age");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(out.stdout, [0x5a; 32]);

    // age wraps; nd7 unwraps.
    let plain = dir.path().join("plain");
    std::fs::write(&plain, [0x33; 32]).expect("write");
    let by_age = dir.path().join("by-age.age");
    let out = Command::new("age")
        .args(["-r", &identity.recipient().to_string(), "-o"])
        .arg(&by_age)
        .arg(&plain)
        .output()
        .expect("age");
    assert!(out.status.success(), "{}", stderr(&out));
    let got = vault::unwrap_chain_key(&std::fs::read(&by_age).expect("read"), &identity)
        .expect("nd7 opens age's file");
    assert_eq!(got.expose_secret(), &[0x33; 32]);
}

#[test]
fn a_torn_last_line_is_not_shipped_and_ship_says_so() {
    let vault = Vault::start();
    let org = Org::new(&vault);
    let state = State::new();
    ok(enroll(&state, &vault, &org));
    append(&state, "s1", 3);
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(state.log("s1").events_path())
        .expect("log");
    std::io::Write::write_all(&mut f, b"{\"seq\":3,\"ts\":1").expect("torn write");
    let out = ship(&state);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("entry 3: not a sealed entry: the line has no newline"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        vault.count("entries"),
        3,
        "the whole entries before it are shipped"
    );
}

#[test]
fn shipping_while_the_agent_records_ships_every_entry_once() {
    let vault = Vault::start();
    let org = Org::new(&vault);
    let state = State::new();
    ok(enroll(&state, &vault, &org));
    append(&state, "live", 1);
    let log = state.log("live");
    let writer = std::thread::spawn(move || {
        for i in 0..400 {
            log.append(&event("live", i))
                .expect("append while shipping");
        }
    });
    for _ in 0..6 {
        let out = ship(&state);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    writer.join().expect("writer");
    ok(ship(&state));
    assert_all_stored_once(&vault, &state, &org, "live");
}

#[test]
fn enrolment_takes_only_an_unused_unexpired_token_the_organisation_signed() {
    let vault = Vault::start();
    let org = Org::new(&vault);
    let enroll_with = |state: &State, token: &str| {
        state
            .nd7()
            .args([
                "enroll",
                &vault.url,
                "--token",
                token,
                "--fingerprint",
                &org.fingerprint,
            ])
            .output()
            .expect("run nd7 enroll")
    };
    // A token is used once.
    let token = org.token();
    let (a, b) = (State::new(), State::new());
    ok(enroll_with(&a, &token));
    let out = enroll_with(&b, &token);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("refused with 403: refused: machine")
            && stderr(&out).contains("the enrolment token was used already"),
        "{}",
        stderr(&out)
    );
    assert!(!b.xdg().join("nd7/vault").exists(), "nothing written");
    // An expired token.
    let org_key = SigningKey::from_seed(
        &vault::parse_secret_text(
            &std::fs::read_to_string(org.dir.path().join("org.key")).expect("org key"),
            "org",
        )
        .expect("seed"),
    );
    let old = vault::EnrolToken::mint(&org_key, &[3; 16], ship::unix_now() - 10, 1);
    let out = enroll_with(&State::new(), &old);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("the enrolment token expired at"),
        "{}",
        stderr(&out)
    );
    // A token of another organisation: nd7 enroll refuses it before asking,
    // and the vault refuses it too.
    let impostor = Org::keys();
    let out = enroll_with(&State::new(), &impostor.token());
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "the enrolment token is not signed by the organisation key with fingerprint {}",
            org.fingerprint
        )),
        "{}",
        stderr(&out)
    );
    let key = SigningKey::from_seed(&vault::Secret32::from_bytes([8; 32]));
    let token = vault::EnrolToken::parse(&impostor.token()).expect("token");
    let body = token.enrolment(&key.public(), ship::unix_now()).render();
    let id = vault::machine_id(&key.public());
    let (status, text) = client(&vault.url)
        .request(
            Request::post("/v1/enroll", body.as_bytes()).signed(&ship::Signer {
                key: &key,
                machine: &id,
            }),
        )
        .expect("http");
    assert_eq!(status, 403, "{}", String::from_utf8_lossy(&text));
    assert_eq!(vault.count("machines"), 1);

    // The vault installs no document naming another vault's key.
    let elsewhere = SigningKey::from_seed(&vault::Secret32::from_bytes([9; 32])).public();
    let doc = vault::Recipients::sign(
        &org_key,
        99,
        ship::unix_now() + 3600,
        &elsewhere,
        &[vault::AgeRecipient::parse(&org.recipient()).expect("recipient")],
    );
    let path = org.dir.path().join("elsewhere");
    std::fs::write(&path, doc).expect("write");
    let out = vault.admin(&["recipients", path.to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("it names vault key {}", elsewhere.to_hex())),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_database_of_format_v1_is_refused_untouched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("v1.db");
    rusqlite::Connection::open(&db)
        .expect("db")
        .execute_batch(
            "CREATE TABLE entries (machine TEXT, session TEXT, seq INTEGER, hash TEXT, ts INTEGER);",
        )
        .expect("v1 table");
    let before = std::fs::read(&db).expect("read");
    let out = Command::new(env!("CARGO_BIN_EXE_nd7-vault"))
        .args(["read-token", "--db"])
        .arg(&db)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out)
            .contains("it holds vault format 1, and this nd7-vault serves database layout 4 only"),
        "{}",
        stderr(&out)
    );
    assert!(
        std::fs::read(&db).expect("read") == before,
        "the file changed"
    );
}

/// The vault's key changes (a new key, named by a new recipients document)
/// while a machine holds receipts the old one signed. Guards
/// `vault_admin::vouched_vault_keys` (receipts checked against the key the
/// organisation vouched for when they were signed, from the machine's own
/// `recipients` and `recipients.old`); seen to report the machine's receipt
/// as not checking (exit 1, the machine blamed) without it.
#[test]
fn receipts_the_vault_signed_before_its_key_changed_still_check() {
    let mut vault = Vault::start();
    let org = Org::new(&vault);
    let state = State::new();
    ok(enroll(&state, &vault, &org));
    append(&state, "s1", 3);
    ok(ship(&state));

    vault.kill();
    std::fs::rename(vault.key_path(), vault.dir.path().join("vault.key.old")).expect("move");
    let out = vault.admin(&["key"]);
    assert!(out.status.success(), "{}", stderr(&out));
    vault.key = stdout(&out).trim().to_string();
    org.install(&vault);
    vault.spawn();

    // The machine has not shipped since: its receipt is the old key's.
    let (out, _) = pull(&state, &vault, &org, "s1", true);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    // It ships, takes the new document and keeps the old one; a lost
    // receipt of the old key's would check the same way.
    append(&state, "s1", 2);
    ok(ship(&state));
    let old = std::fs::read_to_string(state.xdg().join("nd7/vault/recipients.old")).expect("kept");
    assert!(old.contains("\nversion 1\n"), "{old}");
    let (out, _) = pull(&state, &vault, &org, "s1", true);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

/// `nd7 enroll` and the token it takes are spelt alike: `admin
/// enroll-token`, and the older `enrol-token` still.
#[test]
fn the_enrolment_token_is_spelt_as_enroll_is() {
    for spelling in ["enroll-token", "enrol-token"] {
        let out = nd7()
            .args(["admin", spelling, "--help"])
            .output()
            .expect("run");
        assert!(out.status.success(), "{spelling}: {}", stderr(&out));
        assert!(
            stdout(&out).contains("one-time enrolment token"),
            "{}",
            stdout(&out)
        );
    }
}
