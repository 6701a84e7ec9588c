//! The Ed25519 signature every machine request carries, over its headers
//! alone (method, path, time, nonce, the body's length and BLAKE3), so the
//! vault authenticates a request before it reads a byte of its body, then
//! holds the body it read to the hash the signature names.

use super::*;

// ---------------------------------------------------------------- requests

/// The bytes a request signature covers.
pub fn request_message(
    method: &str,
    path: &str,
    time: u64,
    nonce: &[u8; 16],
    length: u64,
    body: &[u8; 32],
) -> Vec<u8> {
    format!(
        "{REQUEST_MAGIC}\n{method}\n{path}\n{time}\n{}\n{length}\n{}\n",
        hex(nonce),
        hex(body)
    )
    .into_bytes()
}

/// A request's authentication, as it travels in five headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestAuth {
    pub machine: String,
    pub time: u64,
    pub nonce: [u8; 16],
    /// The BLAKE3 of the body the signature is for (`x-nd7-body`).
    pub body: [u8; 32],
    pub signature: [u8; 64],
}

impl RequestAuth {
    pub fn sign(
        key: &SigningKey,
        machine: &str,
        method: &str,
        path: &str,
        time: u64,
        nonce: [u8; 16],
        body: &[u8],
    ) -> RequestAuth {
        RequestAuth::sign_claiming(
            key,
            machine,
            method,
            path,
            time,
            nonce,
            body.len() as u64,
            *blake3::hash(body).as_bytes(),
        )
    }

    /// Signs for a body of `length` bytes whose BLAKE3 is `body`, without
    /// having it (tests send what a correct client never would).
    #[allow(clippy::too_many_arguments)]
    pub fn sign_claiming(
        key: &SigningKey,
        machine: &str,
        method: &str,
        path: &str,
        time: u64,
        nonce: [u8; 16],
        length: u64,
        body: [u8; 32],
    ) -> RequestAuth {
        let signature = key.sign(&request_message(method, path, time, &nonce, length, &body));
        RequestAuth {
            machine: machine.to_string(),
            time,
            nonce,
            body,
            signature,
        }
    }

    /// The five headers, names lowercase.
    pub fn headers(&self) -> [(&'static str, String); 5] {
        [
            (HEADER_MACHINE, self.machine.clone()),
            (HEADER_TIME, self.time.to_string()),
            (HEADER_NONCE, hex(&self.nonce)),
            (HEADER_BODY, hex(&self.body)),
            (HEADER_SIGNATURE, hex(&self.signature)),
        ]
    }

    /// Reads the headers back; `get` looks one up by lowercase name.
    pub fn from_headers(get: impl Fn(&str) -> Option<String>) -> Result<RequestAuth, Error> {
        let bad = || {
            malformed(
                "the request's authentication",
                "x-nd7-machine, -time, -nonce, -body and -signature headers",
            )
        };
        Ok(RequestAuth {
            machine: get(HEADER_MACHINE)
                .filter(|m| !m.is_empty() && m.len() <= 64)
                .ok_or_else(bad)?,
            time: get(HEADER_TIME)
                .and_then(|t| t.parse().ok())
                .ok_or_else(bad)?,
            nonce: get(HEADER_NONCE)
                .and_then(|n| unhex::<16>(&n))
                .ok_or_else(bad)?,
            body: get(HEADER_BODY)
                .and_then(|b| unhex::<32>(&b))
                .ok_or_else(bad)?,
            signature: get(HEADER_SIGNATURE)
                .and_then(|s| unhex::<64>(&s))
                .ok_or_else(bad)?,
        })
    }

    /// Checks the signature against `key` for a body of `length` bytes (the
    /// request's `Content-Length`), and the time against `now`: everything
    /// but the body itself, so before it is read. Replays of a fresh
    /// request are the caller's to refuse, by nonce.
    pub fn verify_headers(
        &self,
        key: &PublicKey,
        method: &str,
        path: &str,
        length: u64,
        now: u64,
    ) -> Result<(), Error> {
        let message = request_message(method, path, self.time, &self.nonce, length, &self.body);
        if !key.verify(&message, &self.signature) {
            return Err(Error::BadSignature);
        }
        let skew = now.abs_diff(self.time);
        if skew > MAX_CLOCK_SKEW_SECS {
            return Err(Error::Stale { skew });
        }
        Ok(())
    }

    /// Once the body is read: whether it is the one the signature names.
    pub fn verify_body(&self, body: &[u8]) -> Result<(), Error> {
        if *blake3::hash(body).as_bytes() == self.body {
            Ok(())
        } else {
            Err(Error::BodyMismatch)
        }
    }

    /// [`RequestAuth::verify_headers`] and [`RequestAuth::verify_body`].
    pub fn verify(
        &self,
        key: &PublicKey,
        method: &str,
        path: &str,
        body: &[u8],
        now: u64,
    ) -> Result<(), Error> {
        self.verify_headers(key, method, path, body.len() as u64, now)?;
        self.verify_body(body)
    }
}
