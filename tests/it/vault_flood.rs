//! A flood of anonymous connections from a few addresses (ADR-0118): every
//! slot held by connections that sent nothing, that send their headers
//! slowly, or that made one anonymous request and keep it alive. The vault
//! must still serve an enrolled machine, and keep serving a connection a
//! signed request proved. The latency under a flood is measured in
//! bench/vault_flood.sh, not here: these tests prove the mechanism.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use nd7_core::ship::{self, Machine};
use nd7_core::vault::{self, RequestAuth};

use crate::common::{State, stderr};
use crate::vault::{Org, Vault, append, enroll, ok, ship as run_ship};
use crate::vault_service::{connect, connect_from, wait_until};

/// Sends `head` on `s` and reads one reply whole (headers and
/// `Content-Length` bytes of body): its status line and body.
fn exchange(s: &mut TcpStream, head: &str) -> (String, String) {
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    s.write_all(head.as_bytes()).expect("send");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let text = String::from_utf8_lossy(&got[..end]).to_string();
            let length: usize = text
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().to_string())
                })
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            if got.len() >= end + 4 + length {
                let body = String::from_utf8_lossy(&got[end + 4..end + 4 + length]).to_string();
                return (text.lines().next().unwrap_or("").to_string(), body);
            }
        }
        let n = s.read(&mut buf).expect("read the reply");
        assert!(
            n > 0,
            "the connection closed mid-reply: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
}

/// A signed `GET /v1/head/<session>` from `machine`, keeping the
/// connection alive.
fn signed_head(machine: &Machine, session: &str) -> String {
    let path = format!("/v1/head/{}", vault::hex(session.as_bytes()));
    let auth = RequestAuth::sign(
        &machine.key,
        &machine.id,
        "GET",
        &path,
        ship::unix_now(),
        ship::random().expect("random"),
        b"",
    );
    let mut head = format!("GET {path} HTTP/1.1\r\nHost: vault\r\n");
    for (k, v) in auth.headers() {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    head
}

const ANONYMOUS_RECIPIENTS: &str = "GET /v1/recipients HTTP/1.1\r\nHost: vault\r\nx-nd7-nonce: 00112233445566778899aabbccddeeff\r\n\r\n";

/// Whether the vault closed `s` (a read finds its end).
fn closed(mut s: &TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_millis(10)))
        .expect("timeout");
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

/// Three addresses hold twice as many connections as the vault serves at
/// once, each within its per-peer share: 20 that made an anonymous request
/// and stay alive, 20 sending their headers slowly, 20 that said nothing;
/// every deadline is longer than the test. The machine's `nd7 ship` is
/// served, and a connection a signed request proved before the flood is
/// served again after it. Guards the eviction in `room` (http.rs) and the
/// promotion in `answer`: without eviction the ship waited in the kernel's
/// queue until its reads timed out; without promotion the proved
/// connection was evicted with the anonymous ones.
#[test]
fn an_enrolled_machine_is_served_while_anonymous_connections_fill_every_slot() {
    let vault = Vault::start_with(&[
        "--max-connections",
        "40",
        "--reserved-connections",
        "10",
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
    append(&state, "s1", 5);
    ok(run_ship(&state));
    let machine = Machine::load(&state.xdg().join("nd7")).expect("enrolled");

    // Proved before the flood: a signed request on a connection kept alive.
    let mut proved = connect(&vault);
    let (status, _) = exchange(&mut proved, &signed_head(&machine, "s1"));
    assert!(status.contains(" 200 "), "{status}");

    let mut flood: Vec<TcpStream> = Vec::new();
    for _ in 0..20 {
        let mut s = connect_from(&vault, [127, 0, 0, 2]);
        let (status, _) = exchange(&mut s, ANONYMOUS_RECIPIENTS);
        assert!(status.contains(" 200 "), "{status}");
        flood.push(s);
    }
    for _ in 0..20 {
        let mut s = connect_from(&vault, [127, 0, 0, 3]);
        s.write_all(b"GET /v1/recipients HTTP/1.1\r\nHost: va")
            .expect("part of a head");
        flood.push(s);
    }
    for _ in 0..20 {
        flood.push(connect_from(&vault, [127, 0, 0, 4]));
    }

    append(&state, "s1", 5);
    let out = run_ship(&state);
    assert!(out.status.success(), "{}\n{}", stderr(&out), vault.log());
    let (status, body) = exchange(&mut proved, &signed_head(&machine, "s1"));
    assert!(
        status.contains(" 200 ") && body.starts_with("nd7-receipt"),
        "{status}\n{body}"
    );
    // The room was made by ending anonymous connections: at least the 30
    // past what anonymous connections may hold.
    assert!(
        wait_until(Duration::from_secs(60), || vault
            .log()
            .contains("anonymous connection(s) to make room")),
        "{}",
        vault.log()
    );
    let ended = flood.iter().filter(|s| closed(s)).count();
    assert!(ended >= 30, "only {ended} of the 60 were closed");
}
