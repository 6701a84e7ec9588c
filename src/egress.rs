//! The session's egress proxy (ADR-0106): the one way out of `nd7 run`'s
//! network namespace. Threads, no async runtime: one per connection, two
//! while a tunnel is open.
//!
//! A client asks with HTTP `CONNECT host:port` or a plain HTTP request in
//! absolute form (`GET http://host/path`). The proxy judges the host and
//! port against the session's `net` rules (`policy::net`), resolves the
//! name itself, and connects only to an address it judged; an allowed name
//! that resolves into loopback, private, link-local or metadata ranges is
//! refused unless a rule grants that. Inside a CONNECT tunnel the TLS
//! ClientHello's server name must be the host asked for. A refusal is
//! answered `403` with a body that says which host, that nd7 refused it, the
//! `nd7 allow --net …` the user could run, and not to look for a way round.
//! Every connection, allowed or refused, is handed to the caller's
//! [`Record`] when it ends.
//!
//! The rules are read again from the run directory's [`RULES_FILE`] (written
//! by `nd7 allow --net` and `nd7 deny --net` outside the floor) before each
//! connection is judged.
//!
//! Where the proxy listens on the machine's own loopback (macOS, ADR-0136),
//! any local program could reach it: there it asks every request for the
//! session's credentials ([`Proxy::credentials`], `Proxy-Authorization:
//! Basic`, the user [`PROXY_USER`] and a secret made for the run), and
//! answers `407` to a request without them, before reading anything else
//! of it.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::policy::net::{self, Granted, Rules, Target, Verdict};

/// The file in a run directory that holds the rules `nd7 allow --net` and
/// `nd7 deny --net` added during the run: one `allow RULE` or `deny RULE`
/// a line, applied in order after the rules the run started with.
pub const RULES_FILE: &str = "net-rules";

/// Where a rule for the agent's own API came from, as the log names it.
pub const AGENT_API: &str = "agent API";

/// How long a client has to send its request's head.
const HEAD_TIME: Duration = Duration::from_secs(10);
/// The longest request head the proxy reads.
const HEAD_MAX: usize = 16 * 1024;

/// Resolves a host name to addresses: the system's resolver in a run, a
/// map in tests (which never use the real DNS).
pub trait Resolve: Send + Sync {
    fn resolve(&self, name: &str) -> io::Result<Vec<IpAddr>>;
}

/// The system's resolver (`getaddrinfo`), run outside the namespace.
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve(&self, name: &str) -> io::Result<Vec<IpAddr>> {
        use std::net::ToSocketAddrs;
        Ok((name, 0).to_socket_addrs()?.map(|a| a.ip()).collect())
    }
}

/// The resolver a run's proxy uses: the system's; in test builds, when
/// `ND7_TEST_HOSTS` is set (`name=addr,…`), that map and nothing else, so
/// that tests never ask the real DNS.
pub fn run_resolver() -> Arc<dyn Resolve> {
    #[cfg(any(debug_assertions, feature = "fault-injection"))]
    if let Ok(list) = std::env::var("ND7_TEST_HOSTS") {
        let mut map = std::collections::HashMap::<String, Vec<IpAddr>>::new();
        for pair in list.split(',') {
            if let Some((name, addr)) = pair.split_once('=')
                && let Ok(addr) = addr.parse()
            {
                map.entry(name.to_string()).or_default().push(addr);
            }
        }
        return Arc::new(HostsMap(map));
    }
    Arc::new(SystemResolver)
}

/// A fixed map of names to addresses; any other name does not resolve.
pub struct HostsMap(pub std::collections::HashMap<String, Vec<IpAddr>>);

impl Resolve for HostsMap {
    fn resolve(&self, name: &str) -> io::Result<Vec<IpAddr>> {
        Ok(self.0.get(name).cloned().unwrap_or_default())
    }
}

/// One connection through the proxy, as it is recorded.
#[derive(Clone, Debug)]
pub struct Connection {
    pub method: &'static str,
    pub host: String,
    pub port: u16,
    /// The address connected to, when one was.
    pub address: Option<SocketAddr>,
    pub allowed: bool,
    /// The rule that allowed it, or why it was refused.
    pub rule: Option<String>,
    pub why: Option<String>,
    /// The `nd7 allow --net …` that would allow it, for a refusal.
    pub allow: Option<String>,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub duration_ms: u64,
    /// For a refusal: the process that asked (pid, name), where it can be
    /// told, and whether it is the agent's own program (its own traffic:
    /// not told to the model).
    pub client: Option<(u32, String)>,
    pub agent_own: bool,
}

impl Connection {
    /// The body of its `net` entry (docs/log-format.md).
    pub fn body(&self) -> Value {
        json!({
            "method": self.method,
            "host": self.host,
            "port": self.port,
            "address": self.address.map(|a| a.ip().to_string()),
            "verdict": if self.allowed { "allowed" } else { "refused" },
            "rule": self.rule,
            "why": self.why,
            "allow": self.allow,
            "bytes_up": self.bytes_up,
            "bytes_down": self.bytes_down,
            "duration_ms": self.duration_ms,
            "pid": self.client.as_ref().map(|c| c.0),
            "process": self.client.as_ref().map(|c| c.1.clone()),
            "agent_own": self.agent_own,
        })
    }
}

/// Called once for every connection, when it ends.
pub type Record = Arc<dyn Fn(&Connection) + Send + Sync>;

/// Tells which process holds the client's end of a connection (its address,
/// then the proxy's): pid and name; with a pid, whether that process does.
pub type Who = fn(SocketAddr, SocketAddr, Option<u32>) -> Option<(u32, String)>;

/// Caps on connections. The agent's own process (told by [`Who`]) has
/// `reserve` of its own, for tunnels and for connections still sending
/// their head alike; every other process (the agent's commands) shares
/// `tunnels` and `pending`, so commands cannot starve the agent's API.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub tunnels: usize,
    pub reserve: usize,
    /// Connections still sending their request's head.
    pub pending: usize,
}

/// The connections one kind of client holds: tunnels open, heads pending.
#[derive(Default)]
struct Pool {
    open: AtomicUsize,
    pending: AtomicUsize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            tunnels: 512,
            reserve: 64,
            pending: 512,
        }
    }
}

/// The session's proxy, ready to serve a listener.
pub struct Proxy {
    start: Rules,
    rules_file: Option<PathBuf>,
    resolver: Arc<dyn Resolve>,
    record: Record,
    limits: Limits,
    /// The agent's own process's connections, and everyone else's.
    own: Pool,
    commands: Pool,
    /// The refusals so far, for the run's end.
    refused: RwLock<Vec<String>>,
    who: Option<Who>,
    /// The agent's program, once started (0 before).
    agent: std::sync::atomic::AtomicU32,
    /// `user:secret` every request must carry in `Proxy-Authorization`,
    /// where anyone on the machine can connect ([`Proxy::credentials`]).
    credentials: Option<String>,
}

/// The user name in the proxy's URL where it asks for credentials; the
/// secret is the password.
pub const PROXY_USER: &str = "nd7";

impl Proxy {
    pub fn new(start: Rules, resolver: Arc<dyn Resolve>, record: Record) -> Proxy {
        Proxy {
            start,
            rules_file: None,
            resolver,
            record,
            limits: Limits::default(),
            own: Pool::default(),
            commands: Pool::default(),
            refused: RwLock::new(Vec::new()),
            who: None,
            agent: std::sync::atomic::AtomicU32::new(0),
            credentials: None,
        }
    }

    /// Serves only requests that carry `Proxy-Authorization: Basic` with
    /// [`PROXY_USER`] and `secret`; every other is answered `407`.
    pub fn credentials(mut self, secret: &str) -> Proxy {
        self.credentials = Some(format!("{PROXY_USER}:{secret}"));
        self
    }

    /// Names the process behind each refused connection with `who`.
    pub fn who(mut self, who: Who) -> Proxy {
        self.who = Some(who);
        self
    }

    /// The agent's program, whose own refused connections (updates,
    /// telemetry) are logged but not told to the model.
    pub fn agent_started(&self, pid: u32) {
        self.agent.store(pid, Ordering::SeqCst);
    }

    /// Reads changes to the rules from `file` before each connection.
    pub fn rules_file(mut self, file: PathBuf) -> Proxy {
        self.rules_file = Some(file);
        self
    }

    pub fn limits(mut self, limits: Limits) -> Proxy {
        self.limits = limits;
        self
    }

    /// The rules in force now: those the run started with, then the file's.
    pub fn rules(&self) -> Rules {
        let mut rules = self.start.clone();
        if let Some(text) = self
            .rules_file
            .as_ref()
            .and_then(|f| std::fs::read_to_string(f).ok())
        {
            apply_changes(&mut rules, &text);
        }
        rules
    }

    /// The hosts refused so far (`host:port`, each once).
    pub fn refused(&self) -> Vec<String> {
        self.refused.read().map(|r| r.clone()).unwrap_or_default()
    }

    /// Serves `listener` on a thread of its own until the process ends.
    pub fn serve(self: Arc<Self>, listener: TcpListener) -> std::thread::JoinHandle<()> {
        raise_file_limit();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let client = self.client(&stream, true);
                let own = client.as_ref().is_some_and(|c| c.1);
                let (pool, cap) = self.pool(own);
                let Some(slot) = take(&pool.pending, cap.1) else {
                    let _ = refuse_busy(stream);
                    continue;
                };
                // Given back by the connection's thread once its head is read.
                std::mem::forget(slot);
                let proxy = self.clone();
                let spawned = std::thread::Builder::new()
                    .stack_size(128 * 1024)
                    .spawn(move || proxy.handle(stream, client));
                if spawned.is_err() {
                    pool.pending.fetch_sub(1, Ordering::SeqCst);
                }
            }
        })
    }

    /// The process at the other end of `stream`: with `agent_only`, only
    /// whether it is the agent's own program (cheap, for every connection);
    /// else any. `None` when it cannot be told.
    fn client(&self, stream: &TcpStream, agent_only: bool) -> Option<((u32, String), bool)> {
        let (who, peer, local) = (
            self.who?,
            stream.peer_addr().ok()?,
            stream.local_addr().ok()?,
        );
        let agent = self.agent.load(Ordering::SeqCst);
        let client = match agent_only {
            true if agent == 0 => return None,
            true => who(peer, local, Some(agent))?,
            false => who(peer, local, None)?,
        };
        let own = agent != 0 && client.0 == agent;
        Some((client, own))
    }

    /// The pool a client's connections count in, and its caps (tunnels,
    /// pending): the agent's own process has the reserve, the rest share.
    fn pool(&self, own: bool) -> (&Pool, (usize, usize)) {
        let l = &self.limits;
        match own {
            true => (&self.own, (l.reserve, l.reserve)),
            false => (&self.commands, (l.tunnels, l.pending)),
        }
    }

    fn handle(&self, mut client: TcpStream, who: Option<((u32, String), bool)>) {
        let own = who.as_ref().is_some_and(|c| c.1);
        let (pool, (tunnels, _)) = self.pool(own);
        let pending = Slot(&pool.pending);
        let started = Instant::now();
        let mut buf = Vec::new();
        let head = read_head(&mut client, &mut buf, Some(started + HEAD_TIME));
        drop(pending);
        let rest = match head {
            Ok(rest) => rest,
            Err(e) => {
                let _ = client.write_all(&response(
                    400,
                    "Bad Request",
                    "nd7's proxy could not read this request\n",
                ));
                // A client that sent nothing has asked for nothing.
                if !buf.is_empty() {
                    (self.record)(&unparsed(&buf, &head_error(&e), started));
                }
                return;
            }
        };
        let head = buf;
        let _ = client.set_read_timeout(None);
        if let Some(expected) = &self.credentials
            && !authorized(&head, expected)
        {
            let _ = client.write_all(&unauthorized());
            let mut conn = unparsed(&head, NO_CREDENTIALS, started);
            conn.why = Some(NO_CREDENTIALS.into());
            (self.record)(&conn);
            return;
        }
        let request = match Request::parse(&head) {
            Ok(r) => r,
            Err(why) => {
                let _ = client.write_all(&response(
                    400,
                    "Bad Request",
                    &format!("nd7's proxy: {why}\n"),
                ));
                (self.record)(&unparsed(&head, &why, started));
                return;
            }
        };
        let mut conn = Connection {
            method: request.method(),
            host: request.target.to_string(),
            port: request.port,
            address: None,
            allowed: false,
            rule: None,
            why: None,
            allow: None,
            bytes_up: 0,
            bytes_down: 0,
            duration_ms: 0,
            client: None,
            agent_own: false,
        };
        let outcome = self.serve_request(
            &mut client,
            &request,
            &head,
            rest,
            &mut conn,
            (&pool.open, tunnels),
        );
        if let Err(why) = outcome {
            if matches!(why, Refusal::Rule(_))
                && let Some((c, own)) = who.or_else(|| self.client(&client, false))
            {
                conn.client = Some(c);
                conn.agent_own = own;
            }
            self.refuse(&mut client, &mut conn, &request, why);
        }
        conn.duration_ms = started.elapsed().as_millis() as u64;
        (self.record)(&conn);
    }

    fn refuse(
        &self,
        client: &mut TcpStream,
        conn: &mut Connection,
        request: &Request,
        why: Refusal,
    ) {
        let (status, reason, text) = match &why {
            Refusal::Busy => (503, "Service Unavailable", "nd7's proxy has too many connections open for this session; try again when some have closed".to_string()),
            Refusal::Unreachable(e) => (502, "Bad Gateway", format!("nd7's proxy could not reach {}:{}: {e}", request.target, request.port)),
            Refusal::Rule(why) => {
                let allow = net::allow_command(&request.target, request.port);
                conn.allow = Some(allow.clone());
                if let Ok(mut r) = self.refused.write() {
                    let key = format!("{}:{}", request.target, request.port);
                    if !r.contains(&key) {
                        r.push(key);
                    }
                }
                let host = format!("{}:{}", request.target, request.port);
                (403, "Forbidden", net::refusal_text(&host, why, &allow))
            }
        };
        let connected = conn.address.is_some();
        if !matches!(why, Refusal::Unreachable(_)) {
            conn.allowed = false;
        }
        conn.why = Some(match &why {
            Refusal::Busy => "too many connections".into(),
            Refusal::Unreachable(e) => format!("unreachable: {e}"),
            Refusal::Rule(w) => w.clone(),
        });
        // Once a tunnel is open the client speaks TLS: only closing is left.
        if !connected {
            let _ = client.write_all(&response(status, reason, &text));
        }
        let _ = client.shutdown(Shutdown::Both);
    }

    fn serve_request(
        &self,
        client: &mut TcpStream,
        request: &Request,
        head: &[u8],
        rest: Vec<u8>,
        conn: &mut Connection,
        (open, cap): (&AtomicUsize, usize),
    ) -> Result<(), Refusal> {
        if !request.connect
            && let Some(why) = request.host_mismatch()
        {
            return Err(Refusal::Rule(why));
        }
        let rules = self.rules();
        let resolved = match &request.target {
            Target::Ip(ip) => vec![*ip],
            // localhost is the loopback (RFC 6761), whatever a resolver says.
            Target::Name(n) if n == "localhost" || n.ends_with(".localhost") => {
                vec![
                    IpAddr::from([127, 0, 0, 1]),
                    IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
                ]
            }
            Target::Name(n) if rules.find(&request.target, request.port).is_some() => {
                self.resolver.resolve(n).unwrap_or_default()
            }
            Target::Name(_) => Vec::new(),
        };
        let (rule, addrs) = match rules.judge(&request.target, request.port, &resolved) {
            Verdict::Allowed { rule, addrs } => (rule, addrs),
            Verdict::Refused { why } => return Err(Refusal::Rule(why)),
        };
        let _slot = take(open, cap).ok_or(Refusal::Busy)?;
        let upstream = connect_any(&addrs, request.port).map_err(Refusal::Unreachable)?;
        conn.address = upstream.peer_addr().ok();
        conn.rule = Some(rule);
        conn.allowed = true;
        if request.connect {
            self.tunnel(client, upstream, request, rest, conn)
        } else {
            forward_http(client, upstream, request, head, rest, conn)
                .map_err(|e| Refusal::Unreachable(e.to_string()))
        }
    }

    fn tunnel(
        &self,
        client: &mut TcpStream,
        mut upstream: TcpStream,
        request: &Request,
        mut rest: Vec<u8>,
        conn: &mut Connection,
    ) -> Result<(), Refusal> {
        let broken = |e: io::Error| Refusal::Unreachable(e.to_string());
        client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .map_err(broken)?;
        // The server's side flows at once (a protocol whose server speaks
        // first waits for nothing); the client's waits for the check below.
        let (up_r, client_w) = (
            upstream.try_clone().map_err(broken)?,
            client.try_clone().map_err(broken)?,
        );
        let down = std::thread::Builder::new()
            .stack_size(128 * 1024)
            .spawn(move || copy_then_close(up_r, client_w))
            .map_err(broken)?;
        // The first bytes: for a tunnel to a name, a whole TLS ClientHello
        // that names that host, or nothing goes up.
        if let Target::Name(asked) = &request.target {
            let why = match first_hello(client, &mut rest) {
                Ok(Some(named)) if &named == asked => None,
                Ok(Some(named)) => Some(format!(
                    "the TLS server name ({named}) is not the host asked for ({asked})"
                )),
                Ok(None) => Some(format!(
                    "a tunnel to {asked} carries only TLS that names it; this ClientHello names no server"
                )),
                Err(e) => Some(format!(
                    "a tunnel to {asked} carries only TLS that names it; its first bytes: {e}"
                )),
            };
            if let Some(why) = why {
                let _ = upstream.shutdown(Shutdown::Both);
                let _ = client.shutdown(Shutdown::Both);
                let _ = down.join();
                conn.allowed = false;
                conn.rule = None;
                return Err(Refusal::Rule(why));
            }
            let _ = client.set_read_timeout(None);
        }
        let sent = upstream.write_all(&rest);
        conn.bytes_up += rest.len() as u64;
        if sent.is_ok() {
            let client_r = client.try_clone().map_err(broken)?;
            conn.bytes_up += copy_then_close(client_r, upstream);
        }
        conn.bytes_down += down.join().unwrap_or(0);
        Ok(())
    }
}

/// Applies `allow RULE` / `deny RULE` lines to `rules`: a later line wins.
pub fn apply_changes(rules: &mut Rules, text: &str) {
    for line in text.lines() {
        let (verb, rule) = line.split_once(' ').unwrap_or((line, ""));
        let Ok(rule) = net::parse_rule(rule) else {
            continue;
        };
        match verb {
            "allow" => {
                rules.denied.retain(|d| d != &rule);
                rules.granted.push(Granted {
                    rule,
                    from: "nd7 allow --net".into(),
                });
            }
            "deny" => {
                rules.granted.retain(|g| g.rule != rule);
                rules.denied.push(rule);
            }
            _ => {}
        }
    }
}

enum Refusal {
    Busy,
    Unreachable(String),
    Rule(String),
}

struct Slot<'a>(&'a AtomicUsize);

/// One of `count`'s `cap` places, held until the slot is dropped; `None`
/// when all are taken.
fn take(count: &AtomicUsize, cap: usize) -> Option<Slot<'_>> {
    if count.fetch_add(1, Ordering::SeqCst) >= cap {
        count.fetch_sub(1, Ordering::SeqCst);
        return None;
    }
    Some(Slot(count))
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A request's head, read.
struct Request {
    connect: bool,
    target: Target,
    port: u16,
    /// The Host headers' values, as sent, for a plain request.
    hosts: Vec<String>,
    /// How the request's body is framed, for a plain request.
    body: Body,
    /// The request line's target in origin form, for a plain request.
    path: String,
}

/// How a plain request's body is framed: the proxy forwards that body and
/// nothing after it (one request a connection).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Body {
    Length(u64),
    Chunked,
}

/// The header lines of a request's head (after its request line), as
/// `(name, value)`; a folded line (obsolete, RFC 9112 5.2) or one with no
/// name is refused.
fn header_lines<'a>(
    lines: impl Iterator<Item = &'a str>,
) -> Result<Vec<(&'a str, &'a str)>, String> {
    let mut out = Vec::new();
    for line in lines.take_while(|l| !l.is_empty()) {
        if line.starts_with([' ', '\t']) {
            return Err("a folded header line (obsolete; nd7's proxy refuses it)".into());
        }
        let (name, value) = line
            .split_once(':')
            .filter(|(n, _)| !n.is_empty() && !n.contains([' ', '\t']))
            .ok_or("a header line that is not NAME: VALUE")?;
        out.push((name, value.trim_matches([' ', '\t'])));
    }
    Ok(out)
}

/// The body's framing from a request's headers: Content-Length or
/// chunked, not both, nothing else; none is an empty body.
fn body_framing(headers: &[(&str, &str)]) -> Result<Body, String> {
    let named = |want: &str| -> Vec<&str> {
        headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(want))
            .map(|(_, v)| *v)
            .collect()
    };
    match (
        named("content-length").as_slice(),
        named("transfer-encoding").as_slice(),
    ) {
        ([], []) => Ok(Body::Length(0)),
        ([len], []) if !len.is_empty() && len.bytes().all(|b| b.is_ascii_digit()) => len
            .parse()
            .map(Body::Length)
            .map_err(|_| "a Content-Length too large".into()),
        ([], [te]) if te.eq_ignore_ascii_case("chunked") => Ok(Body::Chunked),
        ([_, ..], [_, ..]) => Err("both Content-Length and Transfer-Encoding".into()),
        ([], _) => Err("a Transfer-Encoding other than chunked".into()),
        _ => Err("a Content-Length that is not one number".into()),
    }
}

impl Request {
    fn method(&self) -> &'static str {
        if self.connect { "CONNECT" } else { "HTTP" }
    }

    fn parse(head: &[u8]) -> Result<Request, String> {
        let text = std::str::from_utf8(head).map_err(|_| "a request head that is not text")?;
        if text.split("\r\n").any(|l| l.contains(['\r', '\n'])) {
            // Many servers end a line at a bare LF (or CR): forwarded as
            // sent, it would carry a Host, or a whole request, never judged.
            return Err(
                "a CR or LF that does not end a line (a line break nd7's proxy refuses)".into(),
            );
        }
        let mut lines = text.split("\r\n");
        let line = lines.next().unwrap_or("");
        let mut parts = line.split(' ');
        let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let bad = || {
            format!(
                "not a proxy request: {:?}",
                line.chars().take(200).collect::<String>()
            )
        };
        let headers = header_lines(lines)?;
        if method == "CONNECT" {
            let (host, port) = net::split_host_port(target).ok_or_else(bad)?;
            let target = Target::parse(host).ok_or_else(bad)?;
            return Ok(Request {
                connect: true,
                target,
                port: port.ok_or_else(bad)?,
                hosts: Vec::new(),
                body: Body::Length(0),
                path: String::new(),
            });
        }
        let rest = target
            .strip_prefix("http://")
            .ok_or_else(|| format!("{} (only CONNECT and http:// URLs pass nd7's proxy)", bad()))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = net::split_host_port(authority).ok_or_else(bad)?;
        let hosts = headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("host"))
            .map(|(_, v)| v.to_string())
            .collect();
        Ok(Request {
            connect: false,
            target: Target::parse(host).ok_or_else(bad)?,
            port: port.unwrap_or(80),
            hosts,
            body: body_framing(&headers)?,
            path: path.to_string(),
        })
    }

    /// Why the Host headers do not name the host the request is sent to:
    /// there must be exactly one, and it must parse and be that host (and
    /// port, when it says one).
    fn host_mismatch(&self) -> Option<String> {
        let [host] = self.hosts.as_slice() else {
            return Some(format!(
                "a request needs exactly one Host header; this one has {}",
                self.hosts.len()
            ));
        };
        let named = net::split_host_port(host).and_then(|(h, p)| Some((Target::parse(h)?, p)));
        match named {
            Some((t, p)) if t == self.target && p.is_none_or(|p| p == self.port) => None,
            Some((t, _)) if t == self.target => Some(format!(
                "the request's Host header names another port than {}",
                self.port
            )),
            Some((t, _)) => Some(format!(
                "the request's Host header ({t}) is not the host it is sent to"
            )),
            None => Some("the request's Host header is not HOST[:PORT]".into()),
        }
    }
}

/// Reads up to the end of a request's head; returns the head and whatever
/// came after it.
fn read_head(
    client: &mut TcpStream,
    buf: &mut Vec<u8>,
    deadline: Option<Instant>,
) -> io::Result<Vec<u8>> {
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(deadline) = deadline {
            // One deadline for the whole head, however slowly it comes.
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::ErrorKind::TimedOut.into());
            }
            client.set_read_timeout(Some(left))?;
        }
        let n = client.read(&mut chunk)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Ok(buf.split_off(end + 4));
        }
        if buf.len() > HEAD_MAX {
            return Err(io::ErrorKind::InvalidData.into());
        }
    }
}

/// Why a request's head could not be read, for its `net` entry.
fn head_error(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => {
            format!("no whole request head within {} s", HEAD_TIME.as_secs())
        }
        io::ErrorKind::InvalidData => format!("a request head longer than {HEAD_MAX} bytes"),
        io::ErrorKind::UnexpectedEof => "the client closed before its request head ended".into(),
        _ => format!("read: {e}"),
    }
}

/// The longest target an unparsed request's `net` entry keeps.
const TARGET_KEPT: usize = 200;

/// The `net` entry of a request the proxy could not read or parse: refused,
/// with the request line's target as sent, made inert and cut short.
fn unparsed(head: &[u8], why: &str, started: Instant) -> Connection {
    let line = head.split(|b| *b == b'\n').next().unwrap_or(b"");
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split(' ');
    let method = parts.next().unwrap_or("");
    let target: String = parts
        .next()
        .unwrap_or("")
        .chars()
        .take(TARGET_KEPT)
        .collect();
    let inert = |t: &str| crate::read::safe::term(t, crate::read::safe::Lines::One);
    Connection {
        method: if method == "CONNECT" {
            "CONNECT"
        } else {
            "HTTP"
        },
        host: inert(&target),
        port: 0,
        address: None,
        allowed: false,
        rule: None,
        why: Some(format!(
            "not a request nd7's proxy can read: {}",
            inert(why)
        )),
        allow: None,
        bytes_up: 0,
        bytes_down: 0,
        duration_ms: started.elapsed().as_millis() as u64,
        client: None,
        agent_own: false,
    }
}

/// Reads the client's first bytes into `rest` until they hold a whole
/// ClientHello, reassembled across records (`net::client_hello`), within
/// one deadline ([`HEAD_TIME`]); returns its server name. Cut short, timed
/// out, or not TLS: `Err`.
fn first_hello(client: &mut TcpStream, rest: &mut Vec<u8>) -> Result<Option<String>, String> {
    let deadline = Instant::now() + HEAD_TIME;
    let mut chunk = [0u8; 4096];
    loop {
        match net::client_hello(rest) {
            Ok(net::Hello::Whole(name)) => return Ok(name),
            Ok(net::Hello::More) => {}
            Err(e) => return Err(e.to_string()),
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || client.set_read_timeout(Some(left)).is_err() {
            return Err("no whole ClientHello in time".into());
        }
        match client.read(&mut chunk) {
            Ok(0) => return Err("a ClientHello cut short".into()),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err("no whole ClientHello in time".into());
            }
            Err(e) => return Err(format!("read: {e}")),
            Ok(n) => rest.extend_from_slice(&chunk[..n]),
        }
    }
}

fn connect_any(addrs: &[IpAddr], port: u16) -> Result<TcpStream, String> {
    let mut last = "no address".to_string();
    for addr in addrs {
        match TcpStream::connect_timeout(&SocketAddr::new(*addr, port), Duration::from_secs(10)) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) => last = e.to_string(),
        }
    }
    Err(last)
}

/// Sends a plain request on in origin form with `Connection: close`, then
/// the response back with `Connection: close`, then whatever follows.
fn forward_http(
    client: &mut TcpStream,
    mut upstream: TcpStream,
    request: &Request,
    head: &[u8],
    rest: Vec<u8>,
    conn: &mut Connection,
) -> io::Result<()> {
    let text = String::from_utf8_lossy(head);
    let mut lines = text.split("\r\n");
    let first = lines.next().unwrap_or("");
    let mut parts = first.splitn(3, ' ');
    let (method, _, version) = (
        parts.next().unwrap_or("GET"),
        parts.next(),
        parts.next().unwrap_or("HTTP/1.1"),
    );
    let mut out = format!("{method} {} {version}\r\n", request.path);
    for line in lines.filter(|l| !l.is_empty()) {
        let name = header_name(line);
        if name.starts_with("proxy-") || name == "connection" || name == "keep-alive" {
            continue;
        }
        out.push_str(line);
        out.push_str("\r\n");
    }
    out.push_str("Connection: close\r\n\r\n");
    upstream.write_all(out.as_bytes())?;
    conn.bytes_up += out.len() as u64;
    // The body, as the head frames it, goes up while the response comes
    // down; nothing after it does.
    let (client_r, up_w) = (client.try_clone()?, upstream.try_clone()?);
    let framing = request.body;
    let up = std::thread::Builder::new()
        .stack_size(128 * 1024)
        .spawn(move || send_body(client_r, up_w, rest, framing))?;
    let down = send_response(client, upstream);
    // One request a connection: once the response has come, it is over.
    let _ = client.shutdown(Shutdown::Both);
    conn.bytes_up += up.join().unwrap_or(0);
    conn.bytes_down += down?;
    Ok(())
}

/// Sends the request's body up: `rest` (what came after the head) and
/// then what the client sends, up to the body's end as `framing` says, and
/// not a byte more. Bad framing, or a client gone before the end, shuts the
/// server's side. Returns the bytes sent.
fn send_body(mut from: TcpStream, mut to: TcpStream, rest: Vec<u8>, framing: Body) -> u64 {
    let mut ending = match framing {
        Body::Length(n) => Ending::Length(n),
        Body::Chunked => Ending::Chunked(Chunked::default()),
    };
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    let mut bytes = rest;
    while let Ok((take, done)) = ending.feed(&bytes) {
        if to.write_all(&bytes[..take]).is_err() {
            break;
        }
        total += take as u64;
        if done {
            return total;
        }
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => bytes = buf[..n].to_vec(),
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    total
}

/// Where a request body ends, found as its bytes come.
enum Ending {
    /// Bytes still to come.
    Length(u64),
    Chunked(Chunked),
}

impl Ending {
    /// How many of `bytes` are the body's, and whether the body ends there.
    fn feed(&mut self, bytes: &[u8]) -> Result<(usize, bool), &'static str> {
        match self {
            Ending::Length(left) => {
                let take = bytes
                    .len()
                    .min(usize::try_from(*left).unwrap_or(usize::MAX));
                *left -= take as u64;
                Ok((take, *left == 0))
            }
            Ending::Chunked(c) => c.feed(bytes),
        }
    }
}

/// A chunked body's end (RFC 9112 7.1): chunk-size lines (extensions
/// allowed), data each followed by CRLF, a zero chunk, trailer lines, an
/// empty line.
#[derive(Default)]
struct Chunked {
    state: ChunkState,
    line: Vec<u8>,
}

#[derive(Default, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    #[default]
    Size,
    Data(u64),
    DataEnd,
    Trailer,
}

/// The longest chunk-size or trailer line read.
const CHUNK_LINE_MAX: usize = 4096;

impl Chunked {
    fn feed(&mut self, bytes: &[u8]) -> Result<(usize, bool), &'static str> {
        let mut i = 0;
        while i < bytes.len() {
            if let ChunkState::Data(left) = self.state {
                let take = (bytes.len() - i).min(usize::try_from(left).unwrap_or(usize::MAX));
                i += take;
                self.state = match left - take as u64 {
                    0 => ChunkState::DataEnd,
                    n => ChunkState::Data(n),
                };
                continue;
            }
            self.line.push(bytes[i]);
            i += 1;
            if self.line.len() > CHUNK_LINE_MAX {
                return Err("a chunk line too long");
            }
            if bytes[i - 1] != b'\n' {
                continue;
            }
            let line = std::mem::take(&mut self.line);
            let line = line
                .strip_suffix(b"\r\n")
                .ok_or("a chunk line not ended by CRLF")?;
            self.state = match self.state {
                ChunkState::Size => {
                    let size = line.split(|b| *b == b';').next().unwrap_or(b"");
                    let size = std::str::from_utf8(size)
                        .ok()
                        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit()))
                        .and_then(|s| u64::from_str_radix(s, 16).ok())
                        .ok_or("a chunk size that is not hex")?;
                    if size == 0 {
                        ChunkState::Trailer
                    } else {
                        ChunkState::Data(size)
                    }
                }
                ChunkState::DataEnd if line.is_empty() => ChunkState::Size,
                ChunkState::DataEnd => return Err("chunk data longer than its size"),
                ChunkState::Trailer if line.is_empty() => return Ok((i, true)),
                ChunkState::Trailer => ChunkState::Trailer,
                ChunkState::Data(_) => unreachable!("data is taken above"),
            };
        }
        Ok((i, false))
    }
}

/// Passes the response's head back with `Connection: close` in place of
/// the server's own, then the rest as it comes.
fn send_response(client: &mut TcpStream, mut upstream: TcpStream) -> io::Result<u64> {
    let mut head = Vec::new();
    let rest = read_head(&mut upstream, &mut head, None).inspect_err(|_| {
        let _ = client.shutdown(Shutdown::Both);
    })?;
    let text = String::from_utf8_lossy(&head);
    let mut out = String::new();
    for line in text.split("\r\n").filter(|l| !l.is_empty()) {
        let name = header_name(line);
        if name == "connection" || name == "keep-alive" {
            continue;
        }
        out.push_str(line);
        out.push_str("\r\n");
    }
    out.push_str("Connection: close\r\n\r\n");
    client.write_all(out.as_bytes())?;
    client.write_all(&rest)?;
    let down = copy_then_close(upstream, client.try_clone()?);
    Ok(down + (out.len() + rest.len()) as u64)
}

fn copy_then_close(mut from: TcpStream, mut to: TcpStream) -> u64 {
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
                total += n as u64;
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
    total
}

fn response(status: u16, reason: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\nX-Nd7-Refused: {}\r\n\r\n{body}",
        body.len(),
        body.lines().next().unwrap_or("").replace(['\r', '\n'], " "),
    )
    .into_bytes()
}

/// Why a request without the session's credentials was refused.
const NO_CREDENTIALS: &str = "no credentials of this session (Proxy-Authorization); nd7's proxy serves only the session's own programs";

/// Whether `head` carries exactly one `Proxy-Authorization` header, of the
/// Basic scheme, whose credentials are `expected` (`user:secret`),
/// compared in constant time.
fn authorized(head: &[u8], expected: &str) -> bool {
    use base64::Engine as _;
    let text = String::from_utf8_lossy(head);
    let values: Vec<&str> = text
        .split("\r\n")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter(|l| header_name(l) == "proxy-authorization")
        .filter_map(|l| l.split_once(':').map(|(_, v)| v.trim()))
        .collect();
    let [value] = values.as_slice() else {
        return false;
    };
    let Some((scheme, token)) = value.split_once(' ') else {
        return false;
    };
    if !scheme.eq_ignore_ascii_case("basic") {
        return false;
    }
    base64::engine::general_purpose::STANDARD
        .decode(token.trim())
        .is_ok_and(|given| same_secret(&given, expected.as_bytes()))
}

/// `a == b` in a time that depends on their lengths only, not on where
/// they first differ.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a
        .iter()
        .zip(b)
        .fold(0u8, |acc, (x, y)| std::hint::black_box(acc | (x ^ y)));
    diff == 0
}

/// The `407` a request without the session's credentials gets.
fn unauthorized() -> Vec<u8> {
    let body = "nd7's proxy serves only this session's programs: the request carries no credentials of this session\n";
    format!(
        "HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"nd7\"\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn refuse_busy(mut stream: TcpStream) -> io::Result<()> {
    stream.write_all(&response(
        503,
        "Service Unavailable",
        "nd7's proxy has too many connections waiting for this session\n",
    ))
}

/// Raises this process's soft limit on open files to the hard one: a
/// tunnel holds two.
fn raise_file_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        let _ = setrlimit(Resource::Nofile, limit);
    }
}

/// The rules a session starts with: the agent's own API (from its base
/// URL, which the user configured, or its default hosts), the hosts of the
/// presets in use (`--preset`), and `~/.nd7/grants`' `net` lines (and its
/// presets' hosts) for every project or this one.
pub fn start_rules(
    agent: Option<crate::hook::Agent>,
    home: &std::path::Path,
    project: &std::path::Path,
    presets: &[String],
) -> Result<Rules, String> {
    let mut granted = agent_api(agent, home);
    for name in presets {
        if let Some(p) = net::net_preset(name) {
            granted.extend(net::preset_rules(p).into_iter().map(|mut g| {
                g.from = format!("--preset {}", p.name);
                g
            }));
        }
    }
    let file = home.join(crate::policy::grants::FILE);
    match std::fs::read_to_string(&file) {
        Ok(text) => {
            let lines = crate::policy::grants::parse(&text, home)
                .map_err(|e| format!("{} {e}", file.display()))?;
            let resolve = |p: &std::path::Path| crate::kernel::real_path(p).ok().map(|r| r.path);
            granted.extend(crate::policy::grants::net_rules(&lines, project, &resolve));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("{}: read: {e}", file.display())),
    }
    Ok(Rules {
        granted,
        denied: Vec::new(),
    })
}

/// The agent's own API: the base URL it was configured with, else its
/// default hosts. A program nd7 does not know gets none.
fn agent_api(agent: Option<crate::hook::Agent>, home: &std::path::Path) -> Vec<Granted> {
    let Some(api) = agent.map(|a| crate::agents::adapter(a).api(home)) else {
        return Vec::new();
    };
    if let Some(rule) = api.configured.as_deref().and_then(net::api_rule) {
        return vec![Granted {
            rule,
            from: AGENT_API.into(),
        }];
    }
    api.defaults
        .iter()
        .filter_map(|h| net::parse_rule(h).ok())
        .map(|rule| Granted {
            rule,
            from: AGENT_API.into(),
        })
        .collect()
}

/// Adds `verb RULE` (`allow` or `deny`) to the rules file of the run in
/// `run_dir`, then writes a `grant` entry into its log (`change`, `net`).
/// The file is replaced whole (`files::replace`), so the proxy never reads
/// half of it.
pub fn change_rules(
    run_dir: &crate::run_dir::RunDir,
    verb: &str,
    rule: &net::Rule,
) -> Result<(), String> {
    let path = run_dir.dir.join(RULES_FILE);
    let mut text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(format!("{}: read: {e}", path.display())),
    };
    text.push_str(&format!("{verb} {rule}\n"));
    crate::files::replace(
        &path,
        text.as_bytes(),
        0o600,
        crate::files::Durability::Atomic,
    )
    .map_err(|e| e.to_string())?;
    let body = json!({ "change": verb, "net": rule.to_string() });
    crate::run_log::note(run_dir, crate::run_entry::GRANT, &body)
        .map(|_| ())
        .map_err(|e| format!("the change is in force, but the run's log could not take it: {e}"))
}

/// A header line's name, in lower case ("" for a line without one).
fn header_name(line: &str) -> String {
    line.split(':')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framing(head: &str) -> Result<Body, String> {
        let lines = header_lines(head.split("\r\n"))?;
        body_framing(&lines)
    }

    /// A proxy on 127.0.0.1 asking for `secret`, allowing `allowed` (the
    /// "world": a local listener), its connections' entries in `seen`.
    fn proxy_with_secret(secret: &str, allowed: u16) -> (u16, Arc<std::sync::Mutex<Vec<Value>>>) {
        let rule = net::parse_rule(&format!("127.0.0.1:{allowed}")).expect("rule");
        let rules = Rules {
            granted: vec![Granted {
                rule,
                from: "test".into(),
            }],
            denied: Vec::new(),
        };
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = seen.clone();
        let record: Record = Arc::new(move |c: &Connection| {
            kept.lock().expect("entries").push(c.body());
        });
        let proxy =
            Proxy::new(rules, Arc::new(HostsMap(Default::default())), record).credentials(secret);
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("addr").port();
        Arc::new(proxy).serve(listener);
        (port, seen)
    }

    /// Sends `head` to the proxy and returns what it answers: all of it,
    /// or for a tunnel that opens, its head.
    fn ask(port: u16, head: &str) -> String {
        let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the proxy");
        s.write_all(head.as_bytes()).expect("send");
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
            if out.starts_with(b"HTTP/1.1 200 Connection established\r\n\r\n") {
                break;
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn where_the_proxy_asks_for_credentials_only_the_sessions_pass() {
        // ADR-0136. Guards the check in `Proxy::handle`: without it every
        // request below reaches the world.
        use base64::Engine as _;
        let world = TcpListener::bind("127.0.0.1:0").expect("bind the world");
        let world_port = world.local_addr().expect("addr").port();
        std::thread::spawn(move || {
            for s in world.incoming().flatten() {
                let mut s = s;
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
                let _ = s.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nworld",
                );
            }
        });
        let secret = "0f1e2d3c4b5a69788796a5b4c3d2e1f0";
        let (port, seen) = proxy_with_secret(secret, world_port);
        let basic = |creds: &str| {
            format!(
                "Proxy-Authorization: Basic {}\r\n",
                base64::engine::general_purpose::STANDARD.encode(creds)
            )
        };
        let get = |extra: &str| {
            format!(
                "GET http://127.0.0.1:{world_port}/ HTTP/1.1\r\nHost: 127.0.0.1:{world_port}\r\n{extra}\r\n"
            )
        };
        let connect =
            |extra: &str| format!("CONNECT 127.0.0.1:{world_port} HTTP/1.1\r\n{extra}\r\n");
        let right = basic(&format!("nd7:{secret}"));
        for refused in [
            get(""),
            connect(""),
            get(&basic("nd7:0f1e2d3c4b5a69788796a5b4c3d2e1f1")),
            get(&basic(&format!("other:{secret}"))),
            get(&basic(&format!("nd7:{secret}x"))),
            connect(&basic("nd7:")),
            get(&format!("Proxy-Authorization: Bearer {secret}\r\n")),
            get(&format!("{right}{right}")),
        ] {
            let answer = ask(port, &refused);
            assert!(answer.starts_with("HTTP/1.1 407 "), "{refused:?}: {answer}");
            assert!(answer.contains("Proxy-Authenticate: Basic"), "{answer}");
            assert!(!answer.contains("world"), "{answer}");
        }
        let answer = ask(port, &get(&right));
        assert!(
            answer.starts_with("HTTP/1.1 200 ") && answer.ends_with("world"),
            "{answer}"
        );
        // Names and the scheme in any case; a tunnel opens.
        let token = right.trim_end().rsplit(' ').next().expect("token");
        let answer = ask(
            port,
            &connect(&format!("proxy-AUTHORIZATION: basic {token}\r\n")),
        );
        assert!(
            answer.starts_with("HTTP/1.1 200 Connection established"),
            "{answer}"
        );
        let entries = seen.lock().expect("entries").clone();
        let refused = entries
            .iter()
            .filter(|e| {
                e["why"]
                    .as_str()
                    .is_some_and(|w| w.starts_with("no credentials"))
            })
            .count();
        assert_eq!(refused, 8, "{entries:?}");
    }

    #[test]
    fn a_line_break_inside_a_line_of_the_head_is_refused() {
        // Guards the check in `Request::parse`: without it each head parses,
        // and `forward_http` sends its lines on as they came, so a server
        // that ends a line at a bare LF or CR reads a Host header, or a
        // whole second request, to a host the proxy never judged.
        let ok = "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nX: 1\r\n\r\n";
        assert!(Request::parse(ok.as_bytes()).is_ok());
        for head in [
            "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nX: 1\nHost: evil.test\r\n\r\n",
            "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nX: 1\rHost: evil.test\r\n\r\n",
            "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nX: 1\n\nPOST / HTTP/1.1\nHost: evil.test\r\n\r\n",
            "GET http://a.test/ HTTP/1.1\nHost: evil.test\r\nHost: a.test\r\n\r\n",
            "GET http://a.test/x\nHost:evil.test HTTP/1.1\r\nHost: a.test\r\n\r\n",
            "CONNECT a.test:443 HTTP/1.1\r\nX: 1\nY: 2\r\n\r\n",
        ] {
            assert!(Request::parse(head.as_bytes()).is_err(), "{head:?}");
        }
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret(b"nd7:abc", b"nd7:abc"));
        assert!(!same_secret(b"nd7:abd", b"nd7:abc"));
        assert!(!same_secret(b"nd7:ab", b"nd7:abc"));
        assert!(!same_secret(b"", b"nd7:abc"));
    }

    #[test]
    fn bodies_are_framed_one_way() {
        assert_eq!(framing("Host: a"), Ok(Body::Length(0)));
        assert_eq!(framing("Content-Length: 12"), Ok(Body::Length(12)));
        assert_eq!(framing("transfer-encoding: Chunked"), Ok(Body::Chunked));
        assert!(framing("Content-Length: 1\r\nTransfer-Encoding: chunked").is_err());
        assert!(framing("Content-Length: 1\r\nContent-Length: 1").is_err());
        assert!(framing("Content-Length: +1").is_err());
        assert!(framing("Content-Length: 1, 2").is_err());
        assert!(framing("Transfer-Encoding: gzip, chunked").is_err());
        assert!(framing("Host: a\r\n b").is_err());
        assert!(framing("Host : a").is_err());
    }

    #[test]
    fn an_unparsed_request_is_kept_inert_and_short() {
        let long = format!(
            "CONNECT evil\x1b[31m.test{}:443 HTTP/1.1\r\n",
            "a".repeat(500)
        );
        let c = unparsed(long.as_bytes(), "bad \x07", Instant::now());
        assert_eq!((c.method, c.port, c.allowed), ("CONNECT", 0, false));
        assert!(
            c.host.starts_with("evil") && c.host.contains(".test"),
            "{}",
            c.host
        );
        assert!(!c.host.contains(['\x1b', '\x07']) && c.host.chars().count() < 220);
        assert!(!c.why.expect("why").contains('\x07'));
    }

    #[test]
    fn a_chunked_body_ends_where_it_says() {
        let body = b"4;x=y\r\nWiki\r\n5\r\npedia\r\n0\r\nT: 1\r\n\r\nGET / HTTP/1.1\r\n";
        let end = body.len() - "GET / HTTP/1.1\r\n".len();
        assert_eq!(Chunked::default().feed(body), Ok((end, true)));
        // Byte by byte, the same end.
        let mut c = Chunked::default();
        for (i, b) in body.iter().enumerate() {
            let (n, done) = c.feed(std::slice::from_ref(b)).expect("chunked");
            assert_eq!((n, done), (1, i + 1 == end));
            if done {
                break;
            }
        }
        assert!(Chunked::default().feed(b"zz\r\n").is_err());
        assert!(Chunked::default().feed(b"1\r\nab\r\n").is_err());
        assert!(Chunked::default().feed(b"1\n").is_err());
        assert_eq!(Chunked::default().feed(b"10\r\nabc"), Ok((7, false)));
    }
}
