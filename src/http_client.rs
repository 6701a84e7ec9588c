//! nd7's one HTTP client (ureq, blocking): what `nd7 enroll`, `nd7 ship`,
//! `nd7 admin` and `nd7 self-update` use to reach a server. It knows URLs,
//! headers, bodies and whom to trust for TLS; what the requests mean is its
//! callers' business.
//!
//! Whom HTTPS trusts, first that applies (ADR-0048):
//!
//! 1. a CA certificate file the caller names (`nd7 enroll --ca-cert`, kept
//!    as the machine's `vault/ca.pem` and used for that vault from then on;
//!    `nd7 admin … --ca-cert`): only the certificates in it;
//! 2. `SSL_CERT_FILE`, as OpenSSL reads it: only the certificates in it;
//! 3. the Mozilla roots compiled in (webpki-roots).
//!
//! A file that cannot be read or holds no certificate is an error, never a
//! silent fall back to the next. TLS needs the default feature `tls`;
//! without it, only `http://` URLs work.

#![forbid(unsafe_code)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// No response byte, and no request byte accepted, for this long: the
/// server is gone.
const STALL: Duration = Duration::from_secs(60);
const CONNECT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("{url}: {detail}")]
    Transport { url: String, detail: String },
    /// The server closed the connection before any reply: a request that
    /// may be sent again on a new connection.
    #[error("{url}: {detail}")]
    Closed { url: String, detail: String },
    #[error("{}: {what}", path.display())]
    Trust { path: PathBuf, what: String },
}

/// Whom HTTPS trusts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Trust {
    /// `SSL_CERT_FILE` if set, else the Mozilla roots compiled in.
    #[default]
    Default,
    /// Only the CA certificates in this PEM file.
    Pinned(PathBuf),
}

impl Trust {
    /// The file whose certificates are trusted, if any: the pinned one, or
    /// `SSL_CERT_FILE`.
    pub fn file(&self) -> Option<PathBuf> {
        match self {
            Trust::Pinned(path) => Some(path.clone()),
            Trust::Default => std::env::var_os("SSL_CERT_FILE")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
        }
    }
}

/// The CA certificates in a PEM file, as DER; an error names the file.
pub fn read_ca_file(path: &Path) -> Result<Vec<Vec<u8>>, HttpError> {
    let bad = |what: String| HttpError::Trust {
        path: path.to_path_buf(),
        what,
    };
    let bytes = std::fs::read(path).map_err(|e| bad(format!("cannot read: {e}")))?;
    let certs = pem_certificates(&bytes);
    if certs.is_empty() {
        return Err(bad(
            "holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into(),
        ));
    }
    Ok(certs)
}

/// Every `CERTIFICATE` block of PEM text, decoded. Other blocks (keys,
/// parameters) and text around them are skipped.
fn pem_certificates(text: &[u8]) -> Vec<Vec<u8>> {
    use base64::Engine;
    let text = String::from_utf8_lossy(text);
    let mut out = Vec::new();
    let mut rest = text.as_ref();
    while let Some(start) = rest.find("-----BEGIN CERTIFICATE-----") {
        let body = &rest[start + "-----BEGIN CERTIFICATE-----".len()..];
        let Some(end) = body.find("-----END CERTIFICATE-----") else {
            break;
        };
        let b64: String = body[..end].chars().filter(|c| !c.is_whitespace()).collect();
        if let Ok(der) = base64::engine::general_purpose::STANDARD.decode(b64) {
            out.push(der);
        }
        rest = &body[end..];
    }
    out
}

/// A blocking client for one server, by its base URL.
pub struct Client {
    base: String,
    agent: ureq::Agent,
}

/// A response whose body is read as it comes.
pub struct Streamed {
    pub status: u16,
    /// `Retry-After`, in seconds, when the server sent one.
    pub retry_after: Option<u64>,
    /// Every header whose value is text, names lowercase.
    pub headers: Vec<(String, String)>,
    pub body: Box<dyn Read + Send>,
}

/// A response read whole.
pub struct Fetched {
    pub status: u16,
    pub retry_after: Option<u64>,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Fetched {
    /// A header's value, by lowercase name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

impl Client {
    /// A client for `base` (`http://` or `https://`, no trailing path
    /// needed), trusting as `trust` says.
    pub fn new(base: &str, trust: &Trust) -> Result<Client, HttpError> {
        let builder = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(CONNECT))
            .timeout_per_read(Some(STALL))
            .timeout_per_write(Some(STALL));
        let builder = with_trust(builder, trust)?;
        Ok(Client {
            base: base.trim_end_matches('/').to_string(),
            agent: ureq::Agent::new_with_config(builder.build()),
        })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// The full URL of `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Sends a request and returns the response with its body unread.
    /// `body` is sent only for methods other than GET.
    pub fn open(
        &self,
        method: &str,
        path: &str,
        body: &[u8],
        headers: &[(&str, String)],
    ) -> Result<Streamed, HttpError> {
        let url = self.url(path);
        let fail = |e: ureq::Error| {
            let closed = matches!(&e, ureq::Error::Io(io) if matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::UnexpectedEof
            ));
            let (url, detail) = (url.clone(), describe(&e));
            if closed {
                HttpError::Closed { url, detail }
            } else {
                HttpError::Transport { url, detail }
            }
        };
        let response = if method == "GET" {
            let mut req = self.agent.get(&url);
            for (k, v) in headers {
                req = req.header(*k, v);
            }
            req.call()
        } else {
            let mut req = self.agent.post(&url);
            for (k, v) in headers {
                req = req.header(*k, v);
            }
            if !body.is_empty() {
                // The server may refuse from the headers alone (unknown
                // sender, too large, over quota): let it, before the body
                // is sent, and see its reason rather than a reset.
                req = req.header("expect", "100-continue");
            }
            req.content_type("application/octet-stream").send(body)
        };
        let response = response.map_err(fail)?;
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse().ok());
        let reply_headers = response
            .headers()
            .iter()
            .filter_map(|(n, v)| Some((n.as_str().to_string(), v.to_str().ok()?.to_string())))
            .collect();
        let reader = response
            .into_body()
            .into_with_config()
            .limit(u64::MAX)
            .reader();
        Ok(Streamed {
            status,
            retry_after,
            headers: reply_headers,
            body: Box::new(reader),
        })
    }

    /// Sends a request and reads the whole reply, its body up to `limit`
    /// bytes (more is an error).
    pub fn fetch(
        &self,
        method: &str,
        path: &str,
        body: &[u8],
        headers: &[(&str, String)],
        limit: u64,
    ) -> Result<Fetched, HttpError> {
        let url = self.url(path);
        let mut r = self.open(method, path, body, headers)?;
        let mut out = Vec::new();
        (&mut r.body)
            .take(limit + 1)
            .read_to_end(&mut out)
            .map_err(|e| HttpError::Transport {
                url: url.clone(),
                detail: format!("reading the reply: {e}"),
            })?;
        if out.len() as u64 > limit {
            return Err(HttpError::Transport {
                url,
                detail: format!("the reply is over {limit} bytes"),
            });
        }
        Ok(Fetched {
            status: r.status,
            retry_after: r.retry_after,
            headers: r.headers,
            body: out,
        })
    }
}

/// ureq's error, with TLS failures said plainly.
fn describe(e: &ureq::Error) -> String {
    let text = e.to_string();
    let lower = text.to_ascii_lowercase();
    if lower.contains("certificate") || lower.contains("tls") || lower.contains("rustls") {
        format!(
            "{text} (the server's certificate is not trusted here: pass --ca-cert FILE at enrolment, or set SSL_CERT_FILE)"
        )
    } else {
        text
    }
}

#[cfg(feature = "tls")]
fn with_trust(
    builder: ureq::config::ConfigBuilder<ureq::typestate::AgentScope>,
    trust: &Trust,
) -> Result<ureq::config::ConfigBuilder<ureq::typestate::AgentScope>, HttpError> {
    use ureq::tls::{Certificate, RootCerts, TlsConfig};
    let roots = match trust.file() {
        None => RootCerts::WebPki,
        Some(path) => {
            let certs: Vec<Certificate<'static>> = read_ca_file(&path)?
                .into_iter()
                .map(|der| Certificate::from_der(&der).to_owned())
                .collect();
            RootCerts::new_with_certs(&certs)
        }
    };
    Ok(builder.tls_config(TlsConfig::builder().root_certs(roots).build()))
}

#[cfg(not(feature = "tls"))]
fn with_trust(
    builder: ureq::config::ConfigBuilder<ureq::typestate::AgentScope>,
    trust: &Trust,
) -> Result<ureq::config::ConfigBuilder<ureq::typestate::AgentScope>, HttpError> {
    if let Trust::Pinned(path) = trust {
        return Err(HttpError::Trust {
            path: path.clone(),
            what:
                "this nd7 was built without TLS (feature `tls`), so it cannot use a CA certificate"
                    .into(),
        });
    }
    Ok(builder)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificates_are_read_from_pem_and_nothing_else() {
        let pem = b"junk\n-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n\
            -----BEGIN CERTIFICATE-----\nAQID\nBA==\n-----END CERTIFICATE-----\n\
            -----BEGIN CERTIFICATE-----\nBQY=\n-----END CERTIFICATE-----\n";
        assert_eq!(pem_certificates(pem), vec![vec![1, 2, 3, 4], vec![5, 6]]);
        assert!(pem_certificates(b"no certificate here").is_empty());
    }

    #[test]
    fn a_ca_file_without_certificates_is_an_error_naming_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, "not a certificate\n").expect("write");
        let e = read_ca_file(&path).expect_err("refused");
        assert!(e.to_string().contains("ca.pem"), "{e}");
        let e = read_ca_file(&dir.path().join("missing.pem")).expect_err("refused");
        assert!(e.to_string().contains("cannot read"), "{e}");
    }
}
