//! What the agent may reach under `nd7 run` (ADR-0106, ADR-0107): the `net`
//! rules, how a connection's host and port are judged against them, and the
//! address classes an allowed name must not resolve into unless granted as
//! such (DNS rebinding). Pure: names and addresses in, verdicts out.
//!
//! # A rule
//!
//! ```text
//! net api.example.com        # that host, ports 80 and 443
//! net *.example.com          # any name below example.com (not example.com itself)
//! net registry.local:8443    # that host, that port only
//! net localhost:5432         # the host's own loopback, port 5432
//! net 10.0.0.7:22            # an IP literal, granted as one
//! ```
//!
//! A rule without a port allows 80 and 443. A name allowed by a rule may
//! resolve only to public addresses, unless the rule names a loopback host
//! (`localhost`, `127.0.0.1`, `[::1]`) or an IP literal: then that address
//! class is what was granted. An IP literal in a connection is allowed only
//! when a rule names that literal.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Ports a rule without one allows.
pub const DEFAULT_PORTS: [u16; 2] = [80, 443];

/// What a rule names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Host {
    /// One name, lower case, no trailing dot.
    Name(String),
    /// Every name below this suffix (`*.example.com` holds `example.com`).
    Below(String),
    /// An address, granted as one.
    Ip(IpAddr),
}

/// One `net` rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub host: Host,
    /// `None`: 80 and 443.
    pub port: Option<u16>,
}

/// What is wrong with a rule's text.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{text:?}: {why}")]
pub struct RuleError {
    pub text: String,
    pub why: &'static str,
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.host {
            Host::Name(n) => write!(f, "{n}")?,
            Host::Below(s) => write!(f, "*.{s}")?,
            Host::Ip(IpAddr::V6(a)) => write!(f, "[{a}]")?,
            Host::Ip(IpAddr::V4(a)) => write!(f, "{a}")?,
        }
        match self.port {
            Some(p) => write!(f, ":{p}"),
            None => Ok(()),
        }
    }
}

/// Lower-cases `name` and strips one trailing dot; `None` when it is not a
/// DNS name (letters, digits, `-`, `_`, dots; labels 1–63 bytes).
pub fn normal_name(name: &str) -> Option<String> {
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    let ok = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    ok.then_some(name)
}

/// Splits `HOST[:PORT]` (`[v6]:PORT` for IPv6) into host and port.
pub fn split_host_port(text: &str) -> Option<(&str, Option<u16>)> {
    if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return match after {
            "" => Some((host, None)),
            _ => Some((host, Some(after.strip_prefix(':')?.parse().ok()?))),
        };
    }
    match text.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => Some((host, Some(port.parse().ok()?))),
        Some(_) => None,
        None => Some((text, None)),
    }
}

/// Parses a rule: `HOST`, `*.SUFFIX`, `HOST:PORT`, an IP literal.
pub fn parse_rule(text: &str) -> Result<Rule, RuleError> {
    let err = |why| RuleError {
        text: text.to_string(),
        why,
    };
    let (host, port) = split_host_port(text.trim())
        .ok_or_else(|| err("a rule is HOST, *.DOMAIN, HOST:PORT or an IP address"))?;
    if port == Some(0) {
        return Err(err("port 0 is no port"));
    }
    let host = if let Ok(ip) = host.parse::<IpAddr>() {
        Host::Ip(ip)
    } else if let Some(suffix) = host.strip_prefix("*.") {
        let suffix = normal_name(suffix).ok_or_else(|| err("not a domain name after *."))?;
        if !suffix.contains('.') {
            return Err(err(
                "*.TLD would allow a whole top-level domain; name the domain",
            ));
        }
        Host::Below(suffix)
    } else {
        Host::Name(normal_name(host).ok_or_else(|| err("not a host name or IP address"))?)
    };
    Ok(Rule { host, port })
}

/// Where an address lies, for the rebinding check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    Public,
    Loopback,
    /// 169.254/16, fe80::/10.
    LinkLocal,
    /// A cloud's metadata service (169.254.169.254, fd00:ec2::254).
    Metadata,
    /// RFC 1918, fc00::/7.
    Private,
    /// 100.64/10, carrier-grade NAT (Tailscale's addresses).
    Shared,
    /// 0/8, multicast, broadcast, reserved, 192.0.0/24: never a peer.
    Unusable,
}

impl Class {
    pub fn name(self) -> &'static str {
        match self {
            Class::Public => "public",
            Class::Loopback => "loopback",
            Class::LinkLocal => "link-local",
            Class::Metadata => "cloud metadata",
            Class::Private => "private",
            Class::Shared => "shared (CGNAT)",
            Class::Unusable => "unusable",
        }
    }
}

fn class_v4(a: Ipv4Addr) -> Class {
    let o = a.octets();
    if a == Ipv4Addr::new(169, 254, 169, 254) || a == Ipv4Addr::new(100, 100, 100, 200) {
        Class::Metadata
    } else if a.is_loopback() {
        Class::Loopback
    } else if a.is_link_local() {
        Class::LinkLocal
    } else if a.is_private() {
        Class::Private
    } else if o[0] == 100 && (64..128).contains(&o[1]) {
        Class::Shared
    } else if o[0] == 0 || o[0] >= 224 || (o[0] == 192 && o[1] == 0 && o[2] == 0) {
        // Never a peer. The documentation and benchmarking ranges stay
        // public: no one's own network, and what some resolvers answer (a
        // fake-IP gateway).
        Class::Unusable
    } else {
        Class::Public
    }
}

/// The class of `addr`; IPv4-mapped and -compatible IPv6 forms, NAT64 and
/// 6to4 are judged by the IPv4 address they carry.
pub fn class(addr: IpAddr) -> Class {
    match addr {
        IpAddr::V4(a) => class_v4(a),
        IpAddr::V6(a) => class_v6(a),
    }
}

fn class_v6(a: Ipv6Addr) -> Class {
    let s = a.segments();
    if let Some(v4) = a.to_ipv4_mapped() {
        return class_v4(v4);
    }
    // ::a.b.c.d (deprecated compatible form), 64:ff9b::/96 (NAT64).
    if (s[..6] == [0; 6] && !a.is_loopback() && !a.is_unspecified())
        || s[..6] == [0x64, 0xff9b, 0, 0, 0, 0]
    {
        let [a, b] = [s[6].to_be_bytes(), s[7].to_be_bytes()];
        return class_v4(Ipv4Addr::new(a[0], a[1], b[0], b[1]));
    }
    // 2002::/16, 6to4: the IPv4 address in the next 32 bits.
    if s[0] == 0x2002 {
        let [a, b] = [s[1].to_be_bytes(), s[2].to_be_bytes()];
        return class_v4(Ipv4Addr::new(a[0], a[1], b[0], b[1]));
    }
    if a == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) {
        Class::Metadata
    } else if a.is_loopback() {
        Class::Loopback
    } else if s[0] & 0xffc0 == 0xfe80 {
        Class::LinkLocal
    } else if s[0] & 0xfe00 == 0xfc00 {
        Class::Private
    } else if a.is_unspecified() || a.is_multicast() {
        Class::Unusable
    } else {
        Class::Public
    }
}

/// Whether `name` names the host's own loopback.
fn is_loopback_name(name: &str) -> bool {
    name == "localhost" || name.ends_with(".localhost")
}

impl Rule {
    fn port_ok(&self, port: u16) -> bool {
        match self.port {
            Some(p) => p == port,
            None => DEFAULT_PORTS.contains(&port),
        }
    }

    /// Whether this rule covers a connection to `host` (normal name or IP
    /// literal) on `port`, before any name is resolved.
    pub fn covers(&self, host: &Target, port: u16) -> bool {
        if !self.port_ok(port) {
            return false;
        }
        match (&self.host, host) {
            (Host::Name(n), Target::Name(h)) => n == h,
            (Host::Below(s), Target::Name(h)) => {
                h.len() > s.len() + 1
                    && h.ends_with(s.as_str())
                    && h[..h.len() - s.len()].ends_with('.')
            }
            (Host::Ip(a), Target::Ip(b)) => same_ip(*a, *b),
            _ => false,
        }
    }

    /// Whether a name this rule allowed may connect to `addr`: public ones
    /// always; loopback when the rule names a loopback host; nothing else.
    pub fn address_ok(&self, addr: IpAddr) -> bool {
        match class(addr) {
            Class::Public => true,
            Class::Loopback => matches!(&self.host, Host::Name(n) if is_loopback_name(n)),
            _ => false,
        }
    }
}

/// Two addresses the same, an IPv4-mapped IPv6 one as its IPv4 address.
fn same_ip(a: IpAddr, b: IpAddr) -> bool {
    a.to_canonical() == b.to_canonical()
}

/// A connection's destination as the client named it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Name(String),
    Ip(IpAddr),
}

impl Target {
    /// Reads a host as a client sends it (`[::1]`, `1.2.3.4`, a name).
    pub fn parse(host: &str) -> Option<Target> {
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return Some(Target::Ip(ip));
        }
        normal_name(host).map(Target::Name)
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Name(n) => f.write_str(n),
            Target::Ip(IpAddr::V6(a)) => write!(f, "[{a}]"),
            Target::Ip(a) => write!(f, "{a}"),
        }
    }
}

/// A rule and where it came from (`~/.nd7/grants:3`, `agent API`,
/// `preset npm`, `nd7 allow --net`), as the log names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Granted {
    pub rule: Rule,
    pub from: String,
}

/// The verdict on a connection before it is made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Allowed by this rule; connect only to these addresses (those of
    /// the resolved ones the rule lets the name reach).
    Allowed {
        rule: String,
        addrs: Vec<IpAddr>,
    },
    Refused {
        why: String,
    },
}

/// The rules in force for a session, in order; the first that covers a
/// connection decides it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rules {
    pub granted: Vec<Granted>,
    /// Rules `nd7 deny --net` took off the session: they cover nothing.
    pub denied: Vec<Rule>,
}

impl Rules {
    /// The rule that covers `target:port`, if any (and none denied).
    pub fn find(&self, target: &Target, port: u16) -> Option<&Granted> {
        if self.denied.iter().any(|d| d.covers(target, port)) {
            return None;
        }
        self.granted.iter().find(|g| g.rule.covers(target, port))
    }

    /// Judges `target:port`, given what the target's name resolved to
    /// (`resolved`; for an IP literal, the literal itself).
    pub fn judge(&self, target: &Target, port: u16, resolved: &[IpAddr]) -> Verdict {
        let Some(g) = self.find(target, port) else {
            let why = match target {
                Target::Ip(_) => "an IP address is reached only when granted as one",
                Target::Name(_) => "no rule allows this host and port",
            };
            return Verdict::Refused { why: why.into() };
        };
        let rule = format!("{} ({})", g.rule, g.from);
        if let Target::Ip(ip) = target {
            return Verdict::Allowed {
                rule,
                addrs: vec![*ip],
            };
        }
        let addrs: Vec<IpAddr> = resolved
            .iter()
            .copied()
            .filter(|a| g.rule.address_ok(*a))
            .collect();
        match (addrs.is_empty(), resolved.first()) {
            (false, _) => Verdict::Allowed { rule, addrs },
            (true, None) => Verdict::Refused {
                why: "the name does not resolve".into(),
            },
            (true, Some(a)) => Verdict::Refused {
                why: format!(
                    "the name resolves to {a}, a {} address, which only a rule naming that address (or localhost) allows",
                    class(*a).name()
                ),
            },
        }
    }
}

/// The `nd7 allow --net` a user would type to allow `target:port`.
pub fn allow_command(target: &Target, port: u16) -> String {
    if DEFAULT_PORTS.contains(&port) {
        format!("nd7 allow --net {target}")
    } else {
        format!("nd7 allow --net {target}:{port}")
    }
}

/// What a refused connection to `host` (`HOST:PORT`) tells the model:
/// which host, that nd7 refused it and why, the `nd7 allow --net …` the user
/// could run (`allow`), and not to look for a way round.
pub fn refusal_text(host: &str, why: &str, allow: &str) -> String {
    format!(
        "nd7 refused the connection to {host}: {why}. This session reaches only the hosts its user allows. If this host is needed, ask the user to run `{allow}` in a terminal outside the session; do not look for another way to reach it.\n"
    )
}

/// The agent's own API, from its base URL (`https://api.anthropic.com`,
/// `http://127.0.0.1:8080/v1`): the rule that allows exactly that host and
/// port. `None` for a URL that is not http(s).
pub fn api_rule(base_url: &str) -> Option<Rule> {
    let (scheme, rest) = base_url.split_once("://")?;
    let default = match scheme.to_ascii_lowercase().as_str() {
        "https" => 443,
        "http" => 80,
        _ => return None,
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit('@').next()?;
    let (host, port) = split_host_port(authority)?;
    let target = Target::parse(host)?;
    let host = match target {
        Target::Ip(ip) => Host::Ip(ip),
        Target::Name(n) => Host::Name(n),
    };
    Some(Rule {
        host,
        port: Some(port.unwrap_or(default)),
    })
}

/// A named set of hosts one toolchain fetches from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetPreset {
    pub name: &'static str,
    pub hosts: &'static [&'static str],
    /// Why these hosts.
    pub why: &'static str,
}

/// The presets' hosts (docs/sandbox.md lists them with why).
pub const NET_PRESETS: &[NetPreset] = &[
    NetPreset {
        name: "npm",
        hosts: &["registry.npmjs.org"],
        why: "npm's registry serves both the package documents and the tarballs",
    },
    NetPreset {
        name: "cargo",
        hosts: &["index.crates.io", "static.crates.io", "crates.io"],
        why: "the sparse index, the .crate downloads, and the API cargo asks for the index's config",
    },
    NetPreset {
        name: "pip",
        hosts: &["pypi.org", "files.pythonhosted.org"],
        why: "the simple index and the files it links to",
    },
    NetPreset {
        name: "python-user",
        hosts: &["pypi.org", "files.pythonhosted.org"],
        why: "pip install --user reads the same index",
    },
    NetPreset {
        name: "uv",
        hosts: &["pypi.org", "files.pythonhosted.org"],
        why: "uv reads the same index as pip",
    },
    NetPreset {
        name: "go",
        hosts: &["proxy.golang.org", "sum.golang.org"],
        why: "the module proxy and the checksum database go verifies modules against",
    },
    NetPreset {
        name: "github",
        hosts: &[
            "github.com",
            "codeload.github.com",
            "objects.githubusercontent.com",
            "raw.githubusercontent.com",
        ],
        why: "git clone over https, and the archives and raw files it redirects to",
    },
];

/// The net preset called `name`, if there is one.
pub fn net_preset(name: &str) -> Option<&'static NetPreset> {
    NET_PRESETS.iter().find(|p| p.name == name)
}

/// The rules a net preset grants, each marked `preset NAME`.
pub fn preset_rules(p: &NetPreset) -> Vec<Granted> {
    p.hosts
        .iter()
        .map(|h| Granted {
            rule: Rule {
                host: Host::Name((*h).to_string()),
                port: Some(443),
            },
            from: format!("preset {}", p.name),
        })
        .collect()
}

/// The longest ClientHello nd7 reads (its records' bytes, headers and
/// all): a real one is a few KiB; past this the tunnel is refused.
pub const HELLO_MAX: usize = 64 * 1024;

/// What a tunnel's first bytes hold, so far.
#[derive(Debug, PartialEq, Eq)]
pub enum Hello {
    /// A ClientHello not yet whole: read more.
    More,
    /// A whole ClientHello, and the server name it carries, if any.
    Whole(Option<String>),
}

/// Reads a TLS ClientHello from a client's first bytes, reassembling it
/// across handshake records (a client may fragment it: RFC 8446 5.1), up
/// to [`HELLO_MAX`] bytes. `Err` says why the bytes are not one: not TLS,
/// not a ClientHello, malformed, too long.
pub fn client_hello(bytes: &[u8]) -> Result<Hello, &'static str> {
    let mut records = Reader(bytes);
    let mut message = Vec::new();
    loop {
        if records.0.len() < 5 {
            return more(bytes);
        }
        let head = records.take(5)?;
        if head[0] != 22 {
            return Err("not a TLS handshake");
        }
        let len = usize::from(u16::from_be_bytes([head[3], head[4]]));
        if len == 0 {
            return Err("an empty TLS record");
        }
        let Ok(fragment) = records.take(len) else {
            return more(bytes);
        };
        message.extend_from_slice(fragment);
        if message.len() >= 4 {
            if message[0] != 1 {
                return Err("not a ClientHello");
            }
            let want = 4
                + (usize::from(message[1]) << 16
                    | usize::from(message[2]) << 8
                    | usize::from(message[3]));
            if want > HELLO_MAX {
                return Err("a ClientHello longer than nd7 reads");
            }
            if message.len() >= want {
                return hello_name(&message[4..want])
                    .map(Hello::Whole)
                    .map_err(|_| "a malformed ClientHello");
            }
        }
    }
}

fn more(bytes: &[u8]) -> Result<Hello, &'static str> {
    if bytes.len() >= HELLO_MAX {
        return Err("a ClientHello longer than nd7 reads");
    }
    Ok(Hello::More)
}

/// The server name in a ClientHello's body (after its type and length).
fn hello_name(body: &[u8]) -> Result<Option<String>, &'static str> {
    let mut hello = Reader(body);
    hello.take(2 + 32)?; // version, random
    let sid = hello.u8()? as usize;
    hello.take(sid)?;
    let suites = hello.u16()? as usize;
    hello.take(suites)?;
    let comp = hello.u8()? as usize;
    hello.take(comp)?;
    if hello.0.is_empty() {
        return Ok(None);
    }
    let ext_len = hello.u16()? as usize;
    let mut exts = Reader(hello.take(ext_len)?);
    while !exts.0.is_empty() {
        let kind = exts.u16()?;
        let len = exts.u16()? as usize;
        let mut ext = Reader(exts.take(len)?);
        if kind != 0 {
            continue;
        }
        let list = ext.u16()? as usize;
        let mut names = Reader(ext.take(list)?);
        while !names.0.is_empty() {
            let kind = names.u8()?;
            let len = names.u16()? as usize;
            let name = names.take(len)?;
            if kind == 0 {
                let name = std::str::from_utf8(name).map_err(|_| "a server name not ASCII")?;
                return normal_name(name)
                    .map(Some)
                    .ok_or("a server name that is no host name");
            }
        }
    }
    Ok(None)
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        if self.0.len() < n {
            return Err("a ClientHello cut short");
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, &'static str> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, &'static str> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(lines: &[&str]) -> Rules {
        Rules {
            granted: lines
                .iter()
                .map(|l| Granted {
                    rule: parse_rule(l).expect("rule"),
                    from: "test".into(),
                })
                .collect(),
            denied: Vec::new(),
        }
    }
    fn name(n: &str) -> Target {
        Target::parse(n).expect("target")
    }
    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn grammar() {
        assert_eq!(
            parse_rule("API.Example.com.").expect("ok").host,
            Host::Name("api.example.com".into())
        );
        assert_eq!(
            parse_rule("*.example.com").expect("ok").to_string(),
            "*.example.com"
        );
        assert_eq!(parse_rule("localhost:5432").expect("ok").port, Some(5432));
        assert_eq!(
            parse_rule("[::1]:80").expect("ok").host,
            Host::Ip(ip("::1"))
        );
        for bad in [
            "*.com",
            "a b",
            "host:0",
            "host:99999",
            "",
            "x:y",
            "*.",
            "::1:80",
        ] {
            assert!(parse_rule(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn matching() {
        let r = rules(&["example.com", "*.corp.io", "db.local:5432"]);
        assert!(r.find(&name("example.com"), 443).is_some());
        assert!(r.find(&name("example.com"), 8080).is_none());
        assert!(r.find(&name("a.example.com"), 443).is_none());
        assert!(r.find(&name("x.corp.io"), 80).is_some());
        assert!(r.find(&name("corp.io"), 443).is_none());
        assert!(r.find(&name("evilcorp.io"), 443).is_none());
        assert!(r.find(&name("db.local"), 5432).is_some());
        assert!(r.find(&name("db.local"), 443).is_none());
    }

    #[test]
    fn rebinding_refused_unless_granted_as_such() {
        let r = rules(&["example.com", "localhost:5432"]);
        for bad in [
            "127.0.0.1",
            "169.254.169.254",
            "10.1.2.3",
            "::ffff:127.0.0.1",
            "fe80::1",
            "100.64.0.1",
            "::1",
            "0.0.0.0",
        ] {
            assert!(
                matches!(
                    r.judge(&name("example.com"), 443, &[ip(bad)]),
                    Verdict::Refused { .. }
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            r.judge(&name("example.com"), 443, &[ip("10.0.0.1"), ip("93.184.216.34")]),
            Verdict::Allowed { addrs, .. } if addrs == vec![ip("93.184.216.34")]
        ));
        assert!(matches!(
            r.judge(&name("localhost"), 5432, &[ip("127.0.0.1")]),
            Verdict::Allowed { .. }
        ));
    }

    #[test]
    fn ip_literals_only_as_granted() {
        let r = rules(&["example.com", "10.0.0.7:22", "127.0.0.1:8080"]);
        assert!(matches!(
            r.judge(&name("93.184.216.34"), 443, &[]),
            Verdict::Refused { .. }
        ));
        assert!(matches!(
            r.judge(&name("10.0.0.7"), 22, &[]),
            Verdict::Allowed { .. }
        ));
        assert!(matches!(
            r.judge(&name("[::ffff:127.0.0.1]"), 8080, &[]),
            Verdict::Allowed { .. }
        ));
        assert!(matches!(
            r.judge(&name("127.0.0.1"), 8081, &[]),
            Verdict::Refused { .. }
        ));
    }

    #[test]
    fn denied_rules_cover_nothing() {
        let mut r = rules(&["example.com"]);
        r.denied.push(parse_rule("example.com").expect("rule"));
        assert!(r.find(&name("example.com"), 443).is_none());
    }

    #[test]
    fn classes() {
        assert_eq!(class(ip("169.254.169.254")), Class::Metadata);
        assert_eq!(class(ip("::ffff:169.254.169.254")), Class::Metadata);
        assert_eq!(class(ip("64:ff9b::7f00:1")), Class::Loopback);
        assert_eq!(class(ip("2002:7f00:1::")), Class::Loopback);
        assert_eq!(class(ip("::127.0.0.1")), Class::Loopback);
        assert_eq!(class(ip("fd12::1")), Class::Private);
        assert_eq!(class(ip("192.168.1.1")), Class::Private);
        assert_eq!(class(ip("100.100.1.1")), Class::Shared);
        assert_eq!(class(ip("1.1.1.1")), Class::Public);
        assert_eq!(class(ip("203.0.113.80")), Class::Public);
        assert_eq!(class(ip("0.0.0.0")), Class::Unusable);
        assert_eq!(class(ip("224.0.0.1")), Class::Unusable);
        assert_eq!(class(ip("2606:4700::1111")), Class::Public);
    }

    #[test]
    fn api_rules() {
        assert_eq!(
            api_rule("https://api.anthropic.com")
                .expect("rule")
                .to_string(),
            "api.anthropic.com:443"
        );
        assert_eq!(
            api_rule("http://127.0.0.1:4321/v1")
                .expect("rule")
                .to_string(),
            "127.0.0.1:4321"
        );
        assert!(api_rule("unix:///x").is_none());
    }

    /// A ClientHello as a client sends it, naming `host`.
    pub(crate) fn hello(host: &str) -> Vec<u8> {
        let name = host.as_bytes();
        let mut sni = vec![0u8];
        sni.extend((name.len() as u16).to_be_bytes());
        sni.extend(name);
        let mut ext = Vec::new();
        ext.extend(0u16.to_be_bytes());
        ext.extend(((sni.len() + 2) as u16).to_be_bytes());
        ext.extend((sni.len() as u16).to_be_bytes());
        ext.extend(&sni);
        let mut body = vec![3, 3];
        body.extend([0u8; 32]);
        body.extend([0, 0, 2, 0x13, 0x01, 1, 0]);
        body.extend((ext.len() as u16).to_be_bytes());
        body.extend(&ext);
        let mut hs = vec![1];
        hs.extend(&(body.len() as u32).to_be_bytes()[1..]);
        hs.extend(&body);
        let mut rec = vec![22, 3, 1];
        rec.extend((hs.len() as u16).to_be_bytes());
        rec.extend(&hs);
        rec
    }

    /// `record`'s handshake message in records of at most `size` bytes.
    fn split(record: &[u8], size: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for part in record[5..].chunks(size) {
            out.extend([22, 3, 1]);
            out.extend((part.len() as u16).to_be_bytes());
            out.extend(part);
        }
        out
    }

    #[test]
    fn sni() {
        let whole = |b: &[u8]| client_hello(b);
        assert_eq!(
            whole(&hello("Example.COM")),
            Ok(Hello::Whole(Some("example.com".into())))
        );
        let full = hello("example.com");
        assert_eq!(whole(&full[..full.len() - 3]), Ok(Hello::More));
        assert_eq!(whole(&full[..3]), Ok(Hello::More));
        assert!(whole(b"GET / HTTP/1.1\r\n").is_err());
        // Fragmented over records, one byte each: the same name.
        let bytes = split(&full, 1);
        assert_eq!(whole(&bytes), Ok(Hello::Whole(Some("example.com".into()))));
        assert_eq!(whole(&bytes[..bytes.len() - 1]), Ok(Hello::More));
        // A record of another type between the fragments.
        let mut mixed = split(&full, 8);
        mixed.splice(13..13, [23, 3, 3, 0, 1, 0]);
        assert!(whole(&mixed).is_err());
        // A hello longer than nd7 reads, and endless More.
        let mut long = vec![22, 3, 1, 0, 4, 1, 0xff, 0xff, 0xff];
        assert!(whole(&long).is_err());
        long = vec![22, 3, 1, 0xff, 0xff];
        long.resize(HELLO_MAX, 0);
        assert!(whole(&long).is_err());
        // A whole hello with no extensions names no server.
        let mut bare = full[5..].to_vec();
        bare.truncate(4 + 2 + 32 + 1 + 2 + 2 + 1 + 1);
        let n = (bare.len() - 4) as u32;
        bare[1..4].copy_from_slice(&n.to_be_bytes()[1..]);
        let mut rec = vec![22, 3, 1];
        rec.extend((bare.len() as u16).to_be_bytes());
        rec.extend(&bare);
        assert_eq!(whole(&rec), Ok(Hello::Whole(None)));
    }
}
