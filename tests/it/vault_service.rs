//! `nd7-vault` against peers that try to bring it down, on loopback with
//! the real server and the real `nd7 ship`: idle connections, bodies that
//! stall after their headers, a header that never ends, a peer that stops
//! reading, a process out of file descriptors, and SIGTERM with a request
//! half received. Each test names the mechanism it guards; each was seen to
//! fail with that mechanism taken out.
//!
//! Loops are bounded; the only timing asserted is the one the issue asks
//! for (p99 of a machine's requests under attack below 1 s, generous for a
//! shared two-core machine, where an unloaded request takes a few ms).
//! Waits for a server to act have deadlines of a minute or more.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use nd7_core::ship::{self, Machine, Request, Signer};
use nd7_core::vault::{self, RequestAuth};

use crate::common::{State, stderr};
use crate::vault::{Org, Vault, append, client, enroll, ok, ship as run_ship};

/// Lets this test process hold a few thousand sockets.
pub fn raise_file_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    limit.current = limit.maximum;
    let _ = setrlimit(Resource::Nofile, limit);
}

pub fn connect(vault: &Vault) -> TcpStream {
    TcpStream::connect(&vault.addr).expect("connect")
}

/// The head of a signed `POST /v1/batches` whose body is `body` (of which
/// the caller may send less), as `machine` would send it.
pub fn batch_head(machine: &Machine, body: &[u8]) -> String {
    let auth = RequestAuth::sign(
        &machine.key,
        &machine.id,
        "POST",
        "/v1/batches",
        ship::unix_now(),
        ship::random().expect("random"),
        body,
    );
    let mut head = format!(
        "POST /v1/batches HTTP/1.1\r\nHost: vault\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in auth.headers() {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    head
}

/// The resident memory of a process, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("status")
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// Waits up to `limit` for `done`; whether it came.
pub fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    done()
}

/// The p-th percentile (nearest rank) of `samples`.
pub fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let rank = ((p * samples.len() as f64).ceil() as usize).clamp(1, samples.len());
    samples[rank - 1]
}

/// Guards what keeps the vault serving under a held-open attack, measuring
/// the ship's own requests while it is held: bodies
/// read asynchronously after admission, not on the storage threads (with
/// tiny_http's four workers, four stalled bodies stopped everything);
/// connections bounded only by the descriptor limit; the header size bound
/// (`max_header_size`), which ends the endless header.
#[test]
fn a_real_ship_completes_while_1000_idle_200_stalled_and_1_endless_header_connections_are_held() {
    raise_file_limit();
    // Deadlines longer than the test, so every attacking connection is
    // held throughout, not timed out.
    // Every connection is from loopback, the honest ones too: no bound
    // per peer here (`one_peer_cannot_hold_every_connection` tests it).
    let vault = Vault::start_with(&[
        "--header-timeout",
        "300",
        "--first-byte-timeout",
        "300",
        "--body-timeout",
        "300",
        "--max-connections-per-peer",
        "0",
    ]);
    let org = Org::new(&vault);
    let (state, attacker) = (State::new(), State::new());
    ok(enroll(&state, &vault, &org));
    ok(enroll(&attacker, &vault, &org));
    let bad = Machine::load(&attacker.xdg().join("nd7")).expect("enrolled");
    let rss_before = rss_kib(vault.pid());

    let idle: Vec<TcpStream> = (0..1000).map(|_| connect(&vault)).collect();
    // From an enrolled machine, so they pass admission and are held
    // reading: 10 bytes of 100,000, then nothing.
    let stalled: Vec<TcpStream> = (0..200)
        .map(|_| {
            let body = vec![b'x'; 100_000];
            let mut s = connect(&vault);
            s.write_all(batch_head(&bad, &body).as_bytes())
                .expect("head");
            s.write_all(&body[..10]).expect("some body");
            s
        })
        .collect();
    let endless = {
        let mut s = connect(&vault);
        std::thread::spawn(move || {
            let _ = s.write_all(b"GET /v1/recipients HTTP/1.1\r\nHost: vault\r\nX-Endless: ");
            let chunk = [b'a'; 16 * 1024];
            let mut sent = 0usize;
            while sent < 64 << 20 {
                match s.write(&chunk) {
                    Ok(n) => sent += n,
                    Err(_) => break,
                }
            }
            sent
        })
    };

    // Real ships: the first of 300 entries, then 20 more of 5 entries
    // each, every one a whole `nd7 ship` (recipients, head, batch).
    append(&state, "s1", 300);
    let started = Instant::now();
    let shipped = run_ship(&state);
    let first_ship = started.elapsed();
    ok(shipped);
    let mut ships = Vec::new();
    for _ in 0..20 {
        append(&state, "s1", 5);
        let t = Instant::now();
        let out = run_ship(&state);
        ships.push(t.elapsed());
        ok(out);
    }
    // The ship's own requests, timed one by one as it sends them (signed,
    // each on a new connection, the reply's signature checked): 100
    // batches of 3 entries, and 100 heads.
    let machine = Machine::load(&state.xdg().join("nd7")).expect("enrolled");
    let signer = Signer {
        key: &machine.key,
        machine: &machine.id,
    };
    let vault_key = vault::PublicKey::from_hex(&vault.key).expect("vault key");
    let (mut batches, mut heads) = (Vec::new(), Vec::new());
    let mut prev = nd7_core::chain::Hash::session_fingerprint("load");
    let head_path = format!("/v1/head/{}", vault::hex(b"load"));
    for i in 0..100u64 {
        append(&state, "load", 3);
        let body = crate::vault::batch_body(&machine, &state, "load", 3 * i, prev);
        let c = client(&vault.url);
        let t = Instant::now();
        let reply = c.ok_bound(
            Request::post("/v1/batches", &body).signed(&signer),
            &vault_key,
        );
        batches.push(t.elapsed());
        reply.expect("the batch stored");
        let t = Instant::now();
        let reply = c.ok_bound(Request::get(&head_path).signed(&signer), &vault_key);
        heads.push(t.elapsed());
        reply.expect("the head");
        let text = std::fs::read(state.log("load").events_path()).expect("log");
        let last = text[..text.len() - 1]
            .rsplit(|&b| b == b'\n')
            .next()
            .expect("an entry");
        prev = nd7_core::chain::read_stated(last).expect("entry").hash;
    }
    let p = |t: &mut Vec<Duration>| (percentile(t, 0.50), percentile(t, 0.99));
    let ((b50, b99), (h50, h99), (s50, s99)) = (p(&mut batches), p(&mut heads), p(&mut ships));
    eprintln!(
        "under attack: first nd7 ship (300 entries) {first_ship:?}; 20 nd7 ship runs p50 {s50:?}, p99 {s99:?}; 100 batch requests p50 {b50:?}, p99 {b99:?}; 100 head requests p50 {h50:?}, p99 {h99:?}"
    );
    assert!(
        b99 < Duration::from_secs(1) && h99 < Duration::from_secs(1),
        "batches p99 {b99:?} (p50 {b50:?}), heads p99 {h99:?} (p50 {h50:?}) with the attack held"
    );

    let sent = endless.join().expect("endless header");
    assert!(
        sent < 8 << 20,
        "the endless header was read for {sent} bytes before the vault closed it"
    );
    let rss_after = rss_kib(vault.pid());
    assert!(
        rss_after < rss_before + 150 * 1024,
        "the vault grew from {rss_before} KiB to {rss_after} KiB"
    );
    // The stalled bodies were held, not refused (no reply, no log line).
    let log = vault.log();
    assert!(
        !log.lines()
            .any(|l| l.starts_with("POST /v1/batches") && !l.contains(" 200 ")),
        "{log}"
    );
    drop((idle, stalled));
}

/// Guards the accept loop's handling of a failed `accept` (wait, accept
/// again): tiny_http's accept thread ended on the first EMFILE, and the
/// process stayed up serving nothing.
#[test]
fn a_vault_at_its_file_descriptor_limit_serves_again_once_connections_close() {
    raise_file_limit();
    let mut vault = Vault::new(None);
    vault.wrapper = vec!["prlimit".into(), "--nofile=64:64".into()];
    vault.serve_args = [
        "--max-connections",
        "1000",
        "--header-timeout",
        "300",
        "--first-byte-timeout",
        "300",
    ]
    .map(String::from)
    .to_vec();
    vault.spawn();
    let org = Org::new(&vault);
    let state = State::new();
    ok(enroll(&state, &vault, &org));

    let held: Vec<TcpStream> = (0..200).map(|_| connect(&vault)).collect();
    assert!(
        wait_until(Duration::from_secs(60), || vault
            .log()
            .contains("accept failed")),
        "the vault never ran out of descriptors: {}",
        vault.log()
    );
    drop(held);

    append(&state, "s1", 5);
    let mut last = None;
    let served = wait_until(Duration::from_secs(120), || {
        let out = run_ship(&state);
        let done = out.status.success();
        last = Some(stderr(&out));
        done
    });
    assert!(served, "never served again: {last:?}\n{}", vault.log());
}

/// Guards the header deadline (`header_read_timeout`), the body stall
/// deadline (`read_body`) and the write stall guard (`WriteStall`): each
/// ends a connection whose peer stopped, with the deadlines set short.
#[test]
fn stalled_peers_are_cut_off_at_each_deadline() {
    let vault = Vault::start_with(&[
        "--header-timeout",
        "2",
        "--body-timeout",
        "2",
        "--write-timeout",
        "3",
    ]);
    let org = Org::new(&vault);
    let state = State::new();
    ok(enroll(&state, &vault, &org));
    let machine = Machine::load(&state.xdg().join("nd7")).expect("enrolled");
    let read_all = |s: &mut TcpStream| {
        s.set_read_timeout(Some(Duration::from_secs(120)))
            .expect("timeout");
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        out
    };

    // Connected, silent: closed, with nothing to say.
    let mut idle = connect(&vault);
    let t = Instant::now();
    assert!(read_all(&mut idle).is_empty());
    assert!(t.elapsed() < Duration::from_secs(100));

    // Half a header: closed.
    let mut half = connect(&vault);
    half.write_all(b"GET /v1/recipients HTTP/1.1\r\nHost: va")
        .expect("write");
    let t = Instant::now();
    let _ = read_all(&mut half);
    assert!(t.elapsed() < Duration::from_secs(100));

    // Headers, then part of the body: 408, naming the stall.
    let body = vec![b'x'; 10_000];
    let mut slow = connect(&vault);
    slow.write_all(batch_head(&machine, &body).as_bytes())
        .expect("head");
    slow.write_all(&body[..100]).expect("some body");
    let reply = String::from_utf8_lossy(&read_all(&mut slow)).into_owned();
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
    assert!(reply.contains("the body stalled"), "{reply}");

    // A reader that asks for a large pull and never reads: cut off once
    // the socket's buffers are full and a write has waited 3 s, so when
    // it finally reads, the reply stops short of the whole session.
    let s = "big";
    let log = state.log(s);
    let mut seed = [0u8; 32];
    for i in 0..1000 {
        // Incompressible: the pull is as large as the entries.
        seed = *blake3::hash(&seed).as_bytes();
        let noise: String = (0..1000)
            .map(|k: u32| {
                vault::hex(blake3::hash(&[&seed[..], &k.to_le_bytes()].concat()).as_bytes())
            })
            .collect::<String>();
        let payload = serde_json::json!({
            "session_id": s, "cwd": "/proj", "hook_event_name": "UserPromptSubmit",
            "prompt": format!("{i} {}", &noise[..60_000]),
        });
        let e = nd7_core::hook::Event::new(
            &crate::common::invocation(),
            nd7_core::hook::Payload::parse(payload.to_string().as_bytes()).expect("payload"),
        );
        log.append(&e).expect("append");
    }
    ok(run_ship(&state));
    let token = vault.read_token();
    let pull_path = format!("/v1/batches/{}/{}", machine.id, vault::hex(s.as_bytes()));
    let full = client(&vault.url)
        .ok(Request::get(&pull_path).bearer(Some(&token)))
        .expect("a reader that reads gets it all")
        .len() as u64;
    let mut reader = connect(&vault);
    reader
        .write_all(
            format!(
                "GET /v1/batches/{}/{} HTTP/1.1\r\nHost: vault\r\nAuthorization: Bearer {token}\r\nX-Nd7-Nonce: {}\r\n\r\n",
                machine.id,
                vault::hex(s.as_bytes()),
                "00".repeat(16)
            )
            .as_bytes(),
        )
        .expect("ask");
    std::thread::sleep(Duration::from_secs(20));
    let got = read_all(&mut reader).len() as u64;
    assert!(
        got < full,
        "the vault kept writing to a peer that stopped reading: {got} of {full} bytes"
    );
}

/// Guards the graceful shutdown (connections told to finish, the process
/// waiting for them): on SIGTERM a request half received is completed and
/// acknowledged, the vault exits 0, and the batch is there after a restart.
#[test]
fn sigterm_finishes_the_request_in_progress_and_keeps_what_it_acknowledged() {
    let mut vault = Vault::start();
    let org = Org::new(&vault);
    let state = State::new();
    ok(enroll(&state, &vault, &org));
    let machine = Machine::load(&state.xdg().join("nd7")).expect("enrolled");
    append(&state, "s1", 5);
    let body = crate::vault::batch_body(
        &machine,
        &state,
        "s1",
        0,
        nd7_core::chain::Hash::session_fingerprint("s1"),
    );
    let mut s = connect(&vault);
    s.write_all(batch_head(&machine, &body).as_bytes())
        .expect("head");
    let half = body.len() / 2;
    s.write_all(&body[..half]).expect("half");
    // The vault is reading this body; now it is told to stop.
    std::thread::sleep(Duration::from_millis(500));
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(vault.pid() as i32).expect("pid"),
        rustix::process::Signal::TERM,
    )
    .expect("SIGTERM");
    assert!(
        wait_until(Duration::from_secs(60), || vault
            .log()
            .contains("shutting down")),
        "{}",
        vault.log()
    );
    s.write_all(&body[half..]).expect("the rest");
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(reply.contains("stored 0..4"), "{reply}");
    assert!(vault.wait().success(), "{}", vault.log());
    assert!(vault.log().contains("shut down: every connection closed"));

    // Started again: it holds what it acknowledged.
    vault.spawn();
    let (status, head) = client(&vault.url)
        .request(
            Request::get(&format!("/v1/head/{}", vault::hex(b"s1"))).signed(&Signer {
                key: &machine.key,
                machine: &machine.id,
            }),
        )
        .expect("head");
    assert_eq!(status, 200);
    assert!(
        String::from_utf8_lossy(&head).contains("last 4"),
        "{}",
        String::from_utf8_lossy(&head)
    );
}

/// The head of a `POST /v1/batches` that says it carries `length` bytes,
/// signed by `key` in the name of machine `id`, dated `time`.
fn head_as(key: &vault::SigningKey, id: &str, time: u64, length: usize) -> String {
    let auth = RequestAuth::sign_claiming(
        key,
        id,
        "POST",
        "/v1/batches",
        time,
        ship::random().expect("random"),
        length as u64,
        [0x42; 32],
    );
    let mut head =
        format!("POST /v1/batches HTTP/1.1\r\nHost: vault\r\nContent-Length: {length}\r\n");
    for (k, v) in auth.headers() {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head + "\r\n"
}

/// Sends `head` and no body; the reply the vault gives without waiting for
/// one (the body deadlines are far longer than the read's).
fn reply_without_body(vault: &Vault, head: &str) -> String {
    let mut s = connect(vault);
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    s.write_all(head.as_bytes()).expect("head");
    let mut reply = Vec::new();
    match s.read_to_end(&mut reply) {
        Ok(_) => {}
        Err(e) if !reply.is_empty() && e.kind() != std::io::ErrorKind::WouldBlock => {}
        Err(e) => panic!("no reply without the body ({e}): the vault waited to read it"),
    }
    String::from_utf8_lossy(&reply).into_owned()
}

/// Guards `Vault::admit` (routes.rs), which decides from the headers alone
/// whether a body may be read: a peer that is not an enrolled machine, a
/// revoked machine, a stale (replayed from a capture) request, and a body
/// over the limit are each answered at once and the body never read, so
/// none of them can hold a connection, a body budget or memory. Seen to
/// fail (no reply within a minute) with `known_machine` and the freshness
/// check taken out of `admit`.
#[test]
fn a_body_is_refused_unread_from_a_peer_the_vault_would_not_admit() {
    let vault = Vault::start_with(&["--header-timeout", "300", "--body-timeout", "300"]);
    let org = Org::new(&vault);
    let (state, revoked) = (State::new(), State::new());
    ok(enroll(&state, &vault, &org));
    ok(enroll(&revoked, &vault, &org));
    let machine = Machine::load(&state.xdg().join("nd7")).expect("enrolled");
    let gone = Machine::load(&revoked.xdg().join("nd7")).expect("enrolled");
    let out = vault.admin(&["revoke", "machine", &gone.id]);
    assert!(out.status.success(), "{}", stderr(&out));
    let stranger = vault::SigningKey::from_seed(&vault::Secret32::from_bytes([7; 32]));
    let stranger_id = vault::machine_id(&stranger.public());
    let now = ship::unix_now();
    let big = vault::MAX_BODY_BYTES;
    let cases = [
        (
            "a key the vault never enrolled",
            head_as(&stranger, &stranger_id, now, big),
            "401",
            "unknown machine",
        ),
        (
            "a revoked machine",
            head_as(&gone.key, &gone.id, now, big),
            "403",
            "was revoked at",
        ),
        (
            "the machine's id with a signature of another key",
            head_as(&stranger, &machine.id, now, big),
            "401",
            "signature does not verify",
        ),
        (
            "a request dated an hour ago",
            head_as(&machine.key, &machine.id, now - 3600, big),
            "401",
            "",
        ),
        (
            "a body over the limit",
            head_as(&machine.key, &machine.id, now, big + 1),
            "413",
            "limit",
        ),
    ];
    for (what, head, status, says) in cases {
        let reply = reply_without_body(&vault, &head);
        assert!(
            reply.starts_with(&format!("HTTP/1.1 {status} ")) && reply.contains(says),
            "{what}: {reply}"
        );
    }
    assert_eq!(vault.count("batches"), 0);
    // And the vault still serves the honest machine.
    append(&state, "s1", 3);
    ok(run_ship(&state));
    // A request answered already, its headers sent again (captured off the
    // wire): a replay, refused before its body (`nonce_seen` in `admit`).
    append(&state, "s1", 3);
    let body = crate::vault::batch_body(&machine, &state, "s1", 3, {
        let text = std::fs::read_to_string(state.log("s1").events_path()).expect("log");
        nd7_core::chain::read_stated(text.lines().nth(2).expect("entry 2").as_bytes())
            .expect("entry")
            .hash
    });
    let head = batch_head(&machine, &body);
    let mut s = connect(&vault);
    s.write_all(head.as_bytes()).expect("head");
    s.write_all(&body).expect("body");
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    let mut first = [0u8; 12];
    s.read_exact(&mut first).expect("reply");
    assert_eq!(&first, b"HTTP/1.1 200");
    let reply = reply_without_body(&vault, &head);
    assert!(
        reply.starts_with("HTTP/1.1 401 ") && reply.contains("replayed request"),
        "{reply}"
    );
}

/// Someone who knows a machine's id (it travels in clear over plain HTTP,
/// and admins see it) but not its key sends four signed-looking 16 MiB
/// bodies in its name and stalls them: before the signature over the headers
/// was checked in `Vault::admit`, the vault read them and held the machine's
/// whole 64 MiB body budget, so the real machine's ship got 429. Guards the
/// `check_fresh` call in `admit` (routes.rs); seen to fail, the ship refused
/// with "sending … bytes of bodies at once already", without it.
#[test]
fn a_peer_that_knows_only_a_machine_id_cannot_hold_its_body_budget() {
    let vault = Vault::start_with(&["--header-timeout", "300", "--body-timeout", "300"]);
    let org = Org::new(&vault);
    let state = State::new();
    ok(enroll(&state, &vault, &org));
    let machine = Machine::load(&state.xdg().join("nd7")).expect("enrolled");
    let stranger = vault::SigningKey::from_seed(&vault::Secret32::from_bytes([9; 32]));
    let held: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut s = connect(&vault);
            let head = head_as(
                &stranger,
                &machine.id,
                ship::unix_now(),
                vault::MAX_BODY_BYTES,
            );
            s.write_all(head.as_bytes()).expect("head");
            s.write_all(&[b'x'; 10]).expect("some body");
            s
        })
        .collect();
    append(&state, "s1", 5);
    let out = run_ship(&state);
    assert!(out.status.success(), "{}", stderr(&out));
    for mut s in held {
        s.set_read_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
        let mut reply = Vec::new();
        let _ = s.read_to_end(&mut reply);
        let reply = String::from_utf8_lossy(&reply);
        assert!(
            reply.starts_with("HTTP/1.1 401") && reply.contains("signature does not verify"),
            "{reply}"
        );
    }
}

/// A connection to the vault from the loopback address `from` (any of
/// 127.0.0.0/8 is this host), as another host's would be.
pub fn connect_from(vault: &Vault, from: [u8; 4]) -> TcpStream {
    use rustix::net::{AddressFamily, SocketType, bind, connect, socket};
    let to: std::net::SocketAddr = vault.addr.parse().expect("the vault's address");
    let fd = socket(AddressFamily::INET, SocketType::STREAM, None).expect("socket");
    bind(&fd, &std::net::SocketAddr::from((from, 0))).expect("bind");
    connect(&fd, &to).expect("connect");
    TcpStream::from(fd)
}

/// One host opens more connections than the vault serves at once and
/// holds them, sending nothing: without a bound per peer it held every
/// slot, and the machine's ship waited in the kernel's queue until its
/// reads timed out. Guards `PeerSlot::take` (`--max-connections-per-peer`)
/// in the accept loop; seen to fail (the ship refused after a minute)
/// without it.
#[test]
fn one_peer_cannot_hold_every_connection() {
    let vault = Vault::start_with(&[
        "--max-connections",
        "40",
        "--max-connections-per-peer",
        "20",
        "--header-timeout",
        "300",
        "--first-byte-timeout",
        "300",
    ]);
    let org = Org::new(&vault);
    let state = State::new();
    ok(enroll(&state, &vault, &org));
    let held: Vec<TcpStream> = (0..60)
        .map(|_| connect_from(&vault, [127, 0, 0, 2]))
        .collect();
    append(&state, "s1", 5);
    let out = run_ship(&state);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        vault
            .log()
            .contains("connection(s) from 127.0.0.2 over its 20 at once"),
        "{}",
        vault.log()
    );
    drop(held);
}

/// A connection that sends nothing is closed at the first-byte deadline,
/// long before the header deadline. Guards the `first_byte_timeout` wait in
/// `connection` (http.rs); seen to hold the connection for the header
/// deadline (300 s here) without it.
#[test]
fn a_connection_that_sends_nothing_is_closed_at_the_first_byte_deadline() {
    let vault = Vault::start_with(&["--header-timeout", "300", "--first-byte-timeout", "2"]);
    let mut silent = connect(&vault);
    silent
        .set_read_timeout(Some(Duration::from_secs(120)))
        .expect("timeout");
    let t = Instant::now();
    let mut got = Vec::new();
    let closed = silent.read_to_end(&mut got).is_ok();
    assert!(closed && got.is_empty(), "read {got:?}");
    assert!(
        t.elapsed() < Duration::from_secs(100),
        "held for {:?}",
        t.elapsed()
    );
    // One that speaks at once is served as before.
    let (status, _) = client(&vault.url)
        .request(Request::get("/v1/restores"))
        .expect("restores");
    assert_eq!(status, 200);
}
