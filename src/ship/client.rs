//! The vault's requests as every client side makes them: signed by a
//! machine, or with an admin's read token, over [`crate::http_client`], and
//! the vault's refusals turned into [`ShipError`]s.

use std::io;

use super::{ShipError, random, unix_now};
use crate::http_client::{self, Trust};
use crate::vault::{RequestAuth, SigningKey};

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
            http_client::HttpError::Transport { url, detail } => ShipError::Http { url, detail },
            http_client::HttpError::Trust { path, what } => ShipError::BadFile { path, what },
        }
    }
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

    fn headers(
        method: &str,
        path: &str,
        body: &[u8],
        signer: Option<&Signer<'_>>,
        bearer: Option<&str>,
    ) -> Result<Vec<(&'static str, String)>, ShipError> {
        let mut headers: Vec<(&str, String)> = Vec::new();
        if let Some(s) = signer {
            let auth =
                RequestAuth::sign(s.key, s.machine, method, path, unix_now(), random()?, body);
            headers.extend(auth.headers());
        }
        if let Some(token) = bearer {
            headers.push(("authorization", format!("Bearer {token}")));
        }
        Ok(headers)
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
        let headers = Client::headers(method, path, body, signer, bearer)?;
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
        let (status, _, body) = self
            .http
            .send(method, path, body, headers, MAX_REPLY_BYTES)?;
        Ok((status, body))
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

    /// [`Client::request`], refusing anything but 200.
    pub fn ok(
        &self,
        method: &str,
        path: &str,
        body: &[u8],
        signer: Option<&Signer<'_>>,
        bearer: Option<&str>,
    ) -> Result<Vec<u8>, ShipError> {
        let headers = Client::headers(method, path, body, signer, bearer)?;
        let (status, retry_after, reply) =
            self.http
                .send(method, path, body, &headers, MAX_REPLY_BYTES)?;
        if status != 200 {
            return Err(self.refused(path, status, retry_after, &reply));
        }
        Ok(reply)
    }

    /// A GET whose 200 reply is read as it comes (a pull's batches).
    pub fn get_stream(
        &self,
        path: &str,
        bearer: Option<&str>,
    ) -> Result<Box<dyn io::Read + Send>, ShipError> {
        let headers = Client::headers("GET", path, b"", None, bearer)?;
        let mut r = self.http.open("GET", path, b"", &headers)?;
        if r.status != 200 {
            let mut text = Vec::new();
            let _ = io::Read::read_to_end(&mut io::Read::take(&mut r.body, 64 * 1024), &mut text);
            return Err(self.refused(path, r.status, r.retry_after, &text));
        }
        Ok(r.body)
    }
}
