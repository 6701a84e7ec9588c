//! The vault's requests as every client side makes them: signed by a
//! machine, or with an admin's read token, over [`crate::http_client`], and
//! the vault's refusals turned into [`ShipError`]s. Every request carries a
//! fresh nonce; a reply the caller relies on is taken only with the vault's
//! signature over it for that nonce ([`Client::ok_bound`]), so the network
//! cannot answer with an old reply of the vault's.

use std::io;

use super::{ShipError, random, unix_now};
use crate::http_client::{self, Trust};
use crate::vault::{self, PublicKey, RequestAuth, SigningKey};

/// The vault as the machine and the admins speak to it: requests signed by
/// a machine, or carrying a read token, over [`http_client::Client`].
pub struct Client {
    http: http_client::Client,
}

/// A signer for requests: the machine's key and id.
pub struct Signer<'a> {
    pub key: &'a SigningKey,
    pub machine: &'a str,
}

/// One request to the vault: what it asks for, and who asks (a machine
/// that signs it, an admin with a read token, or no one).
#[derive(Clone, Copy)]
pub struct Request<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub body: &'a [u8],
    pub signer: Option<&'a Signer<'a>>,
    pub bearer: Option<&'a str>,
}

impl<'a> Request<'a> {
    /// A GET of `path`, from no one yet.
    pub fn get(path: &'a str) -> Request<'a> {
        Request::new("GET", path, b"")
    }

    /// A POST of `body` to `path`, from no one yet.
    pub fn post(path: &'a str, body: &'a [u8]) -> Request<'a> {
        Request::new("POST", path, body)
    }

    pub fn new(method: &'a str, path: &'a str, body: &'a [u8]) -> Request<'a> {
        Request {
            method,
            path,
            body,
            signer: None,
            bearer: None,
        }
    }

    /// The same request, signed by the machine.
    pub fn signed(self, signer: &'a Signer<'a>) -> Request<'a> {
        Request {
            signer: Some(signer),
            ..self
        }
    }

    /// The same request, with a read token when there is one.
    pub fn bearer(self, token: Option<&'a str>) -> Request<'a> {
        Request {
            bearer: token,
            ..self
        }
    }
}

/// The largest reply read whole (documents, receipts, lists); a pull's
/// batches are read as they come instead.
const MAX_REPLY_BYTES: u64 = 256 << 20;

impl From<http_client::HttpError> for ShipError {
    fn from(e: http_client::HttpError) -> ShipError {
        match e {
            http_client::HttpError::Transport { url, detail }
            | http_client::HttpError::Closed { url, detail } => ShipError::Http { url, detail },
            http_client::HttpError::Trust { path, what } => ShipError::BadFile { path, what },
        }
    }
}

/// A request's headers, names lowercase.
type Headers = Vec<(&'static str, String)>;

/// A reply streamed as it comes, and the nonce its request carried (which
/// its signed end must name).
pub struct Stream {
    pub body: Box<dyn io::Read + Send>,
    pub nonce: [u8; 16],
}

impl Client {
    pub fn new(base: &str, trust: &Trust) -> Result<Client, ShipError> {
        Ok(Client {
            http: http_client::Client::new(base, trust)?,
        })
    }

    pub fn base(&self) -> &str {
        self.http.base()
    }

    /// The request's headers and the nonce they carry: the machine's
    /// signature if `signer`, else a bare `x-nd7-nonce`; a read token if
    /// `bearer`.
    fn headers(req: &Request<'_>) -> Result<(Headers, [u8; 16]), ShipError> {
        let mut headers: Headers = Vec::new();
        let nonce = random()?;
        match req.signer {
            Some(s) => {
                let auth = RequestAuth::sign(
                    s.key,
                    s.machine,
                    req.method,
                    req.path,
                    unix_now(),
                    nonce,
                    req.body,
                );
                headers.extend(auth.headers());
            }
            None => headers.push((vault::HEADER_NONCE, vault::hex(&nonce))),
        }
        if let Some(token) = req.bearer {
            headers.push(("authorization", format!("Bearer {token}")));
        }
        Ok((headers, nonce))
    }

    /// Sends one request; returns the status and the body.
    pub fn request(&self, req: Request<'_>) -> Result<(u16, Vec<u8>), ShipError> {
        let (headers, _) = Client::headers(&req)?;
        self.send_raw(req.method, req.path, req.body, &headers)
    }

    /// Sends a request with exactly these headers (tests use it to send
    /// what a correct client never would).
    pub fn send_raw(
        &self,
        method: &str,
        path: &str,
        body: &[u8],
        headers: &[(&str, String)],
    ) -> Result<(u16, Vec<u8>), ShipError> {
        let reply = self
            .http
            .fetch(method, path, body, headers, MAX_REPLY_BYTES)?;
        Ok((reply.status, reply.body))
    }

    /// The error for a reply other than 200.
    fn refused(&self, path: &str, status: u16, retry_after: Option<u64>, body: &[u8]) -> ShipError {
        let url = self.http.url(path);
        let message = String::from_utf8_lossy(body).trim_end().to_string();
        if status == 429 {
            ShipError::OverQuota {
                url,
                message,
                retry_after,
            }
        } else {
            ShipError::Refused {
                url,
                status,
                message,
            }
        }
    }

    /// Sends a request and reads the reply: 200, or the refusal as an error.
    fn fetch(&self, req: &Request<'_>) -> Result<(http_client::Fetched, [u8; 16]), ShipError> {
        let Request {
            method, path, body, ..
        } = *req;
        let (mut headers, mut nonce) = Client::headers(req)?;
        let mut reply = self
            .http
            .fetch(method, path, body, &headers, MAX_REPLY_BYTES);
        if let Err(http_client::HttpError::Closed { .. }) = reply {
            // Closed before any reply (a vault evicting anonymous
            // connections under a flood, ADR-0118, or one restarting):
            // once more, on a new connection, with a new nonce. Every
            // request to the vault may be repeated.
            (headers, nonce) = Client::headers(req)?;
            reply = self
                .http
                .fetch(method, path, body, &headers, MAX_REPLY_BYTES);
        }
        let reply = reply?;
        if reply.status != 200 {
            return Err(self.refused(path, reply.status, reply.retry_after, &reply.body));
        }
        Ok((reply, nonce))
    }

    /// [`Client::request`], refusing anything but 200. For what the caller
    /// checks by itself (an organisation-signed document), or does not rely
    /// on; otherwise [`Client::ok_bound`].
    pub fn ok(&self, req: Request<'_>) -> Result<Vec<u8>, ShipError> {
        Ok(self.fetch(&req)?.0.body)
    }

    /// [`Client::ok`], taking the reply only with the signature of the vault
    /// key `vault` over it, for this request's nonce: an old reply of the
    /// vault's, replayed, is refused (an error, not the vault's word).
    pub fn ok_bound(&self, req: Request<'_>, vault: &PublicKey) -> Result<Vec<u8>, ShipError> {
        let (reply, nonce) = self.fetch(&req)?;
        self.check_bound(&req, &reply, &nonce, vault)?;
        Ok(reply.body)
    }

    /// [`Client::request`], taking the reply, whatever its status, only
    /// with the vault key's signature over it for this request's nonce: for
    /// a refusal the caller takes for the vault's word (a 404 that says the
    /// vault holds no such thing).
    pub fn request_bound(
        &self,
        req: Request<'_>,
        vault: &PublicKey,
    ) -> Result<(u16, Vec<u8>), ShipError> {
        let (headers, nonce) = Client::headers(&req)?;
        let reply = self
            .http
            .fetch(req.method, req.path, req.body, &headers, MAX_REPLY_BYTES)?;
        self.check_bound(&req, &reply, &nonce, vault)?;
        Ok((reply.status, reply.body))
    }

    /// A 200 reply, and a check of it against the vault key its own body
    /// names (`key_of`): for the recipients document, which says which
    /// vault key to hold its reply to.
    pub fn ok_bound_by<T>(
        &self,
        req: Request<'_>,
        key_of: impl FnOnce(&[u8]) -> Result<(T, PublicKey), ShipError>,
    ) -> Result<(T, Vec<u8>), ShipError> {
        let (reply, nonce) = self.fetch(&req)?;
        let (value, vault) = key_of(&reply.body)?;
        self.check_bound(&req, &reply, &nonce, &vault)?;
        Ok((value, reply.body))
    }

    fn check_bound(
        &self,
        req: &Request<'_>,
        reply: &http_client::Fetched,
        nonce: &[u8; 16],
        vault: &PublicKey,
    ) -> Result<(), ShipError> {
        vault::verify_reply(
            vault,
            nonce,
            req.method,
            req.path,
            reply.status,
            &reply.body,
            reply.header(vault::HEADER_REPLY),
        )
        .map_err(|e| ShipError::Unbound {
            url: self.http.url(req.path),
            detail: e.to_string(),
        })
    }

    /// A GET whose 200 reply is read as it comes (a pull's batches), and
    /// the nonce its signed last frame must name.
    pub fn get_stream(&self, path: &str, bearer: Option<&str>) -> Result<Stream, ShipError> {
        let (headers, nonce) = Client::headers(&Request::get(path).bearer(bearer))?;
        let mut r = self.http.open("GET", path, b"", &headers)?;
        if r.status != 200 {
            let mut text = Vec::new();
            let _ = io::Read::read_to_end(&mut io::Read::take(&mut r.body, 64 * 1024), &mut text);
            return Err(self.refused(path, r.status, r.retry_after, &text));
        }
        Ok(Stream {
            body: r.body,
            nonce,
        })
    }
}
