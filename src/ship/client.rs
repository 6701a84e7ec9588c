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
    fn headers(
        method: &str,
        path: &str,
        body: &[u8],
        signer: Option<&Signer<'_>>,
        bearer: Option<&str>,
    ) -> Result<(Headers, [u8; 16]), ShipError> {
        let mut headers: Headers = Vec::new();
        let nonce = random()?;
        match signer {
            Some(s) => {
                let auth =
                    RequestAuth::sign(s.key, s.machine, method, path, unix_now(), nonce, body);
                headers.extend(auth.headers());
            }
            None => headers.push((vault::HEADER_NONCE, vault::hex(&nonce))),
        }
        if let Some(token) = bearer {
            headers.push(("authorization", format!("Bearer {token}")));
        }
        Ok((headers, nonce))
    }

    /// Sends one request; returns the status and the body.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        body: &[u8],
        signer: Option<&Signer<'_>>,
        bearer: Option<&str>,
    ) -> Result<(u16, Vec<u8>), ShipError> {
        let (headers, _) = Client::headers(method, path, body, signer, bearer)?;
        self.send_raw(method, path, body, &headers)
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
    fn fetch(
        &self,
        method: &str,
        path: &str,
        body: &[u8],
        signer: Option<&Signer<'_>>,
        bearer: Option<&str>,
    ) -> Result<(http_client::Fetched, [u8; 16]), ShipError> {
        let (mut headers, mut nonce) = Client::headers(method, path, body, signer, bearer)?;
        let mut reply = self
            .http
            .fetch(method, path, body, &headers, MAX_REPLY_BYTES);
        if let Err(http_client::HttpError::Closed { .. }) = reply {
            // Closed before any reply (a vault evicting anonymous
            // connections under a flood, ADR-0118, or one restarting):
            // once more, on a new connection, with a new nonce. Every
            // request to the vault may be repeated.
            (headers, nonce) = Client::headers(method, path, body, signer, bearer)?;
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
    pub fn ok(
        &self,
        method: &str,
        path: &str,
        body: &[u8],
        signer: Option<&Signer<'_>>,
        bearer: Option<&str>,
    ) -> Result<Vec<u8>, ShipError> {
        Ok(self.fetch(method, path, body, signer, bearer)?.0.body)
    }

    /// [`Client::ok`], taking the reply only with the signature of the vault
    /// key `vault` over it, for this request's nonce: an old reply of the
    /// vault's, replayed, is refused (an error, not the vault's word).
    pub fn ok_bound(
        &self,
        method: &str,
        path: &str,
        body: &[u8],
        signer: Option<&Signer<'_>>,
        bearer: Option<&str>,
        vault: &PublicKey,
    ) -> Result<Vec<u8>, ShipError> {
        let (reply, nonce) = self.fetch(method, path, body, signer, bearer)?;
        self.check_bound(method, path, &reply, &nonce, vault)?;
        Ok(reply.body)
    }

    /// [`Client::request`], taking the reply, whatever its status, only
    /// with the vault key's signature over it for this request's nonce: for
    /// a refusal the caller takes for the vault's word (a 404 that says the
    /// vault holds no such thing).
    pub fn request_bound(
        &self,
        method: &str,
        path: &str,
        body: &[u8],
        bearer: Option<&str>,
        vault: &PublicKey,
    ) -> Result<(u16, Vec<u8>), ShipError> {
        let (headers, nonce) = Client::headers(method, path, body, None, bearer)?;
        let reply = self
            .http
            .fetch(method, path, body, &headers, MAX_REPLY_BYTES)?;
        self.check_bound(method, path, &reply, &nonce, vault)?;
        Ok((reply.status, reply.body))
    }

    /// A 200 reply, and a check of it against the vault key its own body
    /// names (`key_of`): for the recipients document, which says which
    /// vault key to hold its reply to.
    pub fn ok_bound_by<T>(
        &self,
        method: &str,
        path: &str,
        signer: Option<&Signer<'_>>,
        key_of: impl FnOnce(&[u8]) -> Result<(T, PublicKey), ShipError>,
    ) -> Result<(T, Vec<u8>), ShipError> {
        let (reply, nonce) = self.fetch(method, path, b"", signer, None)?;
        let (value, vault) = key_of(&reply.body)?;
        self.check_bound(method, path, &reply, &nonce, &vault)?;
        Ok((value, reply.body))
    }

    fn check_bound(
        &self,
        method: &str,
        path: &str,
        reply: &http_client::Fetched,
        nonce: &[u8; 16],
        vault: &PublicKey,
    ) -> Result<(), ShipError> {
        vault::verify_reply(
            vault,
            nonce,
            method,
            path,
            reply.status,
            &reply.body,
            reply.header(vault::HEADER_REPLY),
        )
        .map_err(|e| ShipError::Unbound {
            url: self.http.url(path),
            detail: e.to_string(),
        })
    }

    /// A GET whose 200 reply is read as it comes (a pull's batches), and
    /// the nonce its signed last frame must name.
    pub fn get_stream(&self, path: &str, bearer: Option<&str>) -> Result<Stream, ShipError> {
        let (headers, nonce) = Client::headers("GET", path, b"", None, bearer)?;
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
