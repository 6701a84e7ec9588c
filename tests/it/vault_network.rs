//! The network between machines, admins and the vault, attacked as anyone on
//! a plain-HTTP path could: a proxy that replays the vault's earlier replies
//! as today's, and that ends a pull cleanly at a batch boundary. Neither
//! may be taken for the vault's word: a replayed receipt is not the vault
//! breaking it (no alarm, exit 1, the next ship goes through), and a pull
//! without the vault's signed last frame is incomplete (exit 3), not
//! verified. Each test names the check it guards.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use nd7_core::vault;

use crate::common::{State, stderr, stdout};
use crate::vault::{Org, Vault, append, enroll, nd7, ok, ship};

/// What the proxy does to the replies it relays.
#[derive(Clone)]
enum Rule {
    Pass,
    /// Answers a request whose "METHOD path" starts with the first with
    /// the second: a reply of the vault's captured earlier.
    Replay(String, Vec<u8>),
    /// Ends pulls cleanly (a whole, valid HTTP reply) after this many frames.
    Cut(usize),
    /// Rewrites the body of `GET /v1/sessions` replies with the function,
    /// and signs the new reply with the vault's key, as its operator can.
    Lie(
        Arc<dyn Fn(&str) -> String + Send + Sync>,
        Arc<vault::SigningKey>,
    ),
    /// Answers the n-th request starting with the prefix (counting from 1)
    /// with a bare 500, the ones before it as the vault did.
    FailNth(String, usize, Arc<std::sync::atomic::AtomicUsize>),
}

/// The replies relayed, by "METHOD path", oldest first.
type Seen = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// A man in the middle on loopback: every request is relayed to the vault
/// on a connection of its own, and every reply kept, by "METHOD path".
struct Mitm {
    url: String,
    rule: Arc<Mutex<Rule>>,
    seen: Seen,
}

impl Mitm {
    fn start(vault: &Vault) -> Mitm {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let rule = Arc::new(Mutex::new(Rule::Pass));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (to, r, s) = (vault.addr.clone(), rule.clone(), seen.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let (to, r, s) = (to.clone(), r.clone(), s.clone());
                std::thread::spawn(move || relay(client, &to, &r, &s));
            }
        });
        Mitm { url, rule, seen }
    }

    fn set(&self, rule: Rule) {
        *self.rule.lock().expect("rule") = rule;
    }

    /// The last reply relayed for a request starting with `what`.
    fn last(&self, what: &str) -> Vec<u8> {
        self.seen
            .lock()
            .expect("seen")
            .iter()
            .rev()
            .find(|(w, _)| w.starts_with(what))
            .map(|(_, r)| r.clone())
            .unwrap_or_else(|| panic!("no reply to {what} was seen"))
    }
}

fn head_end(bytes: &[u8]) -> Option<usize> {
    bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 4)
}

fn relay(mut client: TcpStream, to: &str, rule: &Mutex<Rule>, seen: &Seen) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    let end = loop {
        if let Some(end) = head_end(&buf) {
            break end;
        }
        match client.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let what = lines
        .next()
        .unwrap_or_default()
        .rsplit_once(' ')
        .map_or("", |(w, _)| w)
        .to_string();
    let mut length = 0usize;
    let mut forward = String::new();
    let mut expect = false;
    let mut nonce = String::new();
    for line in lines.filter(|l| !l.is_empty()) {
        let lower = line.to_ascii_lowercase();
        if let Some(n) = lower.strip_prefix("x-nd7-nonce:") {
            nonce = n.trim().to_string();
        }
        if let Some(n) = lower.strip_prefix("content-length:") {
            length = n.trim().parse().unwrap_or(0);
        }
        if lower.starts_with("expect:") {
            expect = true;
            continue;
        }
        if lower.starts_with("connection:") {
            continue;
        }
        forward.push_str(line);
        forward.push_str("\r\n");
    }
    if expect {
        let _ = client.write_all(b"HTTP/1.1 100 Continue\r\n\r\n");
    }
    let mut body = buf[end..].to_vec();
    while body.len() < length {
        match client.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => body.extend_from_slice(&chunk[..n]),
        }
    }
    let Ok(mut vault) = TcpStream::connect(to) else {
        return;
    };
    let request_line = head.split("\r\n").next().unwrap_or_default();
    let out = format!("{request_line}\r\n{forward}Connection: close\r\n\r\n");
    if vault
        .write_all(out.as_bytes())
        .and_then(|()| vault.write_all(&body))
        .is_err()
    {
        return;
    }
    let mut reply = Vec::new();
    let _ = vault.read_to_end(&mut reply);
    seen.lock()
        .expect("seen")
        .push((what.clone(), reply.clone()));
    let reply = match rule.lock().expect("rule").clone() {
        Rule::Replay(prefix, old) if what.starts_with(&prefix) => old,
        Rule::Cut(frames) if what.starts_with("GET /v1/batches/") => cut(&reply, frames),
        Rule::Lie(edit, key) if what == "GET /v1/sessions" => lie(&reply, &nonce, &*edit, &key),
        Rule::FailNth(prefix, n, seen)
            if what.starts_with(&prefix)
                && seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 == n =>
        {
            b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 12\r\n\r\nvault error\n"
                .to_vec()
        }
        _ => reply,
    };
    let _ = client.write_all(&closing(&reply));
}

/// A `GET /v1/sessions` reply with its body rewritten by `edit`, signed
/// anew with the vault's key for the request's nonce.
fn lie(
    reply: &[u8],
    nonce: &str,
    edit: &dyn Fn(&str) -> String,
    key: &vault::SigningKey,
) -> Vec<u8> {
    let end = head_end(reply).expect("a reply");
    let body = edit(&String::from_utf8_lossy(&reply[end..]));
    let nonce: [u8; 16] = vault::unhex(nonce).expect("the request's nonce");
    let signature = vault::sign_reply(key, &nonce, "GET", "/v1/sessions", 200, body.as_bytes());
    let head: String = String::from_utf8_lossy(&reply[..end])
        .split("\r\n")
        .filter(|l| {
            let l = l.to_ascii_lowercase();
            !l.is_empty() && !l.starts_with("content-length") && !l.starts_with(vault::HEADER_REPLY)
        })
        .map(|l| format!("{l}\r\n"))
        .collect();
    format!(
        "{head}content-length: {}\r\n{}: {}\r\n\r\n{body}",
        body.len(),
        vault::HEADER_REPLY,
        vault::hex(&signature)
    )
    .into_bytes()
}

/// The reply with `connection: close`, so the client does not reuse it.
fn closing(reply: &[u8]) -> Vec<u8> {
    let Some(at) = reply.windows(2).position(|w| w == b"\r\n") else {
        return reply.to_vec();
    };
    [&reply[..at + 2], b"connection: close\r\n", &reply[at + 2..]].concat()
}

/// A streamed (chunked) pull's reply, ended cleanly after `frames` frames:
/// what the network can send in its place.
fn cut(reply: &[u8], frames: usize) -> Vec<u8> {
    let end = head_end(reply).expect("a reply");
    let (head, mut rest) = (&reply[..end], &reply[end..]);
    let mut body = Vec::new();
    loop {
        let line = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("chunk size");
        let size = usize::from_str_radix(std::str::from_utf8(&rest[..line]).expect("hex"), 16)
            .expect("chunk size");
        if size == 0 {
            break;
        }
        body.extend_from_slice(&rest[line + 2..line + 2 + size]);
        rest = &rest[line + 2 + size + 2..];
    }
    let mut at = 0;
    for _ in 0..frames {
        let len = u32::from_be_bytes(body[at..at + 4].try_into().expect("len")) as usize;
        at += 4 + len;
    }
    let head: String = String::from_utf8_lossy(head)
        .split("\r\n")
        .filter(|l| !l.to_ascii_lowercase().starts_with("transfer-encoding") && !l.is_empty())
        .map(|l| format!("{l}\r\n"))
        .collect();
    [
        head.as_bytes(),
        format!("content-length: {at}\r\n\r\n").as_bytes(),
        &body[..at],
    ]
    .concat()
}

/// The machine ships through `url` from now on.
fn ship_through(state: &State, url: &str) {
    std::fs::write(state.xdg().join("nd7/vault/server"), format!("{url}\n")).expect("server");
}

/// The network answers `GET /v1/head` with the receipt the vault gave the
/// run before, and `POST /v1/batches` with the receipt of the batch before:
/// both genuine, both signed by the vault, neither this request's answer.
/// Guards the reply signatures (`Client::ok_bound`, `vault::verify_reply`)
/// in `ship::receipts::vault_head` and `ship::pipeline::send_batch`; seen
/// to write vault.alarm and exit 3, blaming the vault, without them.
#[test]
fn an_old_receipt_replayed_by_the_network_is_not_the_vault_breaking_its_word() {
    let vault = Vault::start();
    let org = Org::new(&vault);
    let state = State::new();
    ok(enroll(&state, &vault, &org));
    let mitm = Mitm::start(&vault);
    ship_through(&state, &mitm.url);
    append(&state, "s1", 5);
    ok(ship(&state));
    append(&state, "s1", 5);
    ok(ship(&state));
    let head = format!("GET /v1/head/{}", vault::hex(b"s1"));
    let old_head = mitm.last(&head);
    let old_batch = mitm.last("POST /v1/batches");
    let alarm = state.log("s1").dir().join("vault.alarm");

    append(&state, "s1", 5);
    for (what, old) in [
        (head.clone(), old_head),
        ("POST /v1/batches".to_string(), old_batch),
    ] {
        mitm.set(Rule::Replay(what.clone(), old));
        let out = ship(&state);
        assert_eq!(out.status.code(), Some(1), "{what}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("is not the vault's answer to this request")
                && !stderr(&out).contains("broke its receipt"),
            "{what}: {}",
            stderr(&out)
        );
        assert!(!alarm.exists(), "{what}: the vault was blamed");
    }
    mitm.set(Rule::Pass);
    ok(ship(&state));
    assert_eq!(vault.count("entries"), 15);
}

/// The network ends a pull cleanly after its first batch, or answers it
/// with the whole of an earlier pull: each is a complete, valid HTTP reply
/// of frames the machine signed. Guards the vault's signed last frame
/// (`PullEnd`) and its check in `vault_admin::pull`; seen to say "chain
/// verified" and exit 0 without it.
#[test]
fn a_pull_the_network_ended_early_or_replayed_is_incomplete_not_verified() {
    let vault = Vault::start();
    let org = Org::new(&vault);
    let state = State::new();
    ok(enroll(&state, &vault, &org));
    let mitm = Mitm::start(&vault);
    let machine = std::fs::read_to_string(state.xdg().join("nd7/vault/machine.id")).expect("id");
    let token = vault.read_token();
    let pull = |mitm: &Mitm| {
        nd7()
            .args(["admin", "pull", &mitm.url, "--read-token", &token])
            .arg("--identity")
            .arg(&org.identity)
            .args(["--fingerprint", &org.fingerprint])
            .args(["--machine", machine.trim(), "--session", "s1", "--out"])
            .arg(vault.dir.path().join("pulled"))
            .output()
            .expect("pull")
    };
    append(&state, "s1", 5);
    ok(ship(&state));
    ok(pull(&mitm));
    let earlier = mitm.last("GET /v1/batches/");
    append(&state, "s1", 5);
    ok(ship(&state));

    mitm.set(Rule::Cut(1));
    let out = pull(&mitm);
    assert_eq!(out.status.code(), Some(3), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("session s1: the vault's reply ends after batch 1 without its signed last frame: it is incomplete")
            && !stdout(&out).contains("chain verified"),
        "{}",
        stdout(&out)
    );
    mitm.set(Rule::Replay("GET /v1/batches/".into(), earlier));
    let out = pull(&mitm);
    assert_eq!(out.status.code(), Some(3), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("its last frame answers another request (another nonce): a replay"),
        "{}",
        stdout(&out)
    );
    mitm.set(Rule::Pass);
    let out = pull(&mitm);
    assert!(
        ok(out).contains("pulled 10 entries in 2 batches"),
        "the whole session, once the network stops"
    );
}

/// The vault's operator (here a proxy holding the vault's key, so every
/// reply it alters is signed) hides a session a machine shipped and
/// invents one in `nd7 admin sessions`' list. Each machine's tally, signed
/// by its own key, gives both away: the hidden one is the vault's (exit 3:
/// the tally carries the vault's receipt for it), the invented one is
/// named as unsettled (the vault's word against the machine's, ADR-0129).
/// Guards `hidden` and the check of listed sessions against the tally in
/// `vault_admin::machines`; seen to exit 0 with either removed.
#[test]
fn a_listing_that_hides_or_invents_a_session_is_caught_by_the_machines_tally() {
    let vault = Vault::start();
    let org = Org::new(&vault);
    let state = State::new();
    ok(enroll(&state, &vault, &org));
    append(&state, "s1", 3);
    append(&state, "s2", 3);
    ok(ship(&state));
    let machine = std::fs::read_to_string(state.xdg().join("nd7/vault/machine.id"))
        .expect("id")
        .trim()
        .to_string();
    let text = std::fs::read_to_string(vault.key_path()).expect("vault key");
    let key =
        vault::SigningKey::from_seed(&vault::parse_secret_text(&text, "vault key").expect("seed"));
    let mitm = Mitm::start(&vault);
    let sessions = || {
        nd7()
            .args([
                "admin",
                "sessions",
                &mitm.url,
                "--read-token",
                &vault.read_token(),
            ])
            .args(["--fingerprint", &org.fingerprint])
            .output()
            .expect("run")
    };

    let honest = sessions();
    assert_eq!(honest.status.code(), Some(0), "{}", stdout(&honest));
    assert!(
        stdout(&honest).contains(&format!(
            "machine {machine}: the list agrees with its tally of"
        )),
        "{}",
        stdout(&honest)
    );

    let (hide, invent) = (
        vault::hex(b"s1"),
        format!("{machine} {} 2\n", vault::hex(b"made-up")),
    );
    mitm.set(Rule::Lie(
        Arc::new(move |body: &str| {
            let kept: String = body
                .lines()
                .filter(|l| !l.contains(&format!(" {hide} ")))
                .map(|l| format!("{l}\n"))
                .collect();
            format!("{kept}{invent}")
        }),
        Arc::new(key),
    ));
    let out = sessions();
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(3), "{text}\n{}", stderr(&out));
    assert!(
        text.contains(&format!(
            "FAILED (the vault): machine {machine}, session s1: the machine's tally of"
        )) && text.contains("carries the vault's receipt for entries up to 2 (stored ")
            && text.contains("but the vault lists no such session"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "UNSETTLED: machine {machine}, session made-up (up to entry 2) is listed, but the machine's tally of"
        )),
        "{text}"
    );
    assert!(!text.contains("the list agrees"), "{text}");
}

/// The vault stores a session's first batch, then answers the second with a
/// 500: `nd7 ship`'s summary counts the batch it acknowledged (it said
/// "shipped 0 entries"). Guards `Report::partly` and its count in
/// `ship_once`.
#[test]
fn a_ship_that_fails_midway_counts_what_the_vault_acknowledged() {
    let vault = Vault::start();
    let org = Org::new(&vault);
    let state = State::new();
    ok(enroll(&state, &vault, &org));
    // Four entries of over 3 MiB each (the command is kept twice in the
    // entry): a batch each (a batch holds 8 MiB).
    let log = state.log("big");
    for n in 0..4 {
        let payload = serde_json::json!({
            "session_id": "big",
            "cwd": "/proj",
            "hook_event_name": "PreToolUse",
            "tool_name": "Bash",
            "tool_input": {"command": format!("echo {n} {}", "x".repeat(3 << 20))},
            "tool_use_id": format!("toolu_{n}"),
        })
        .to_string();
        let event = nd7_core::hook::Event::new(
            &crate::common::invocation(),
            nd7_core::hook::Payload::parse(payload.as_bytes()).expect("payload"),
        );
        log.append(&event).expect("append");
    }
    let mitm = Mitm::start(&vault);
    ship_through(&state, &mitm.url);
    mitm.set(Rule::FailNth(
        "POST /v1/batches".into(),
        2,
        Arc::new(std::sync::atomic::AtomicUsize::new(0)),
    ));
    let out = ship(&state);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("shipped 1 entries in 1 batches"),
        "{}\n{}",
        stdout(&out),
        stderr(&out)
    );
}
