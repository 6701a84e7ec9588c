//! The Ed25519 signature every machine request carries (method, path, time,
//! nonce, body hash).

use super::*;

// ---------------------------------------------------------------- requests

/// The bytes a request signature covers.
pub fn request_message(
    method: &str,
    path: &str,
    time: u64,
    nonce: &[u8; 16],
    body: &[u8],
) -> Vec<u8> {
    format!(
        "{REQUEST_MAGIC}\n{method}\n{path}\n{time}\n{}\n{}\n",
        hex(nonce),
        blake3::hash(body).to_hex()
    )
    .into_bytes()
}

/// A request's authentication, as it travels in four headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestAuth {
    pub machine: String,
    pub time: u64,
    pub nonce: [u8; 16],
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
        let signature = key.sign(&request_message(method, path, time, &nonce, body));
        RequestAuth {
            machine: machine.to_string(),
            time,
            nonce,
            signature,
        }
    }

    /// The four headers, names lowercase.
    pub fn headers(&self) -> [(&'static str, String); 4] {
        [
            (HEADER_MACHINE, self.machine.clone()),
            (HEADER_TIME, self.time.to_string()),
            (HEADER_NONCE, hex(&self.nonce)),
            (HEADER_SIGNATURE, hex(&self.signature)),
        ]
    }

    /// Reads the headers back; `get` looks one up by lowercase name.
    pub fn from_headers(get: impl Fn(&str) -> Option<String>) -> Result<RequestAuth, Error> {
        let bad = || {
            malformed(
                "the request's authentication",
                "x-nd7-machine, -time, -nonce and -signature headers",
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
            signature: get(HEADER_SIGNATURE)
                .and_then(|s| unhex::<64>(&s))
                .ok_or_else(bad)?,
        })
    }

    /// Checks the signature against `key` and the time against `now`.
    /// Replays of a fresh request are the caller's to refuse, by nonce.
    pub fn verify(
        &self,
        key: &PublicKey,
        method: &str,
        path: &str,
        body: &[u8],
        now: u64,
    ) -> Result<(), Error> {
        let message = request_message(method, path, self.time, &self.nonce, body);
        if !key.verify(&message, &self.signature) {
            return Err(Error::BadSignature);
        }
        let skew = now.abs_diff(self.time);
        if skew > MAX_CLOCK_SKEW_SECS {
            return Err(Error::Stale { skew });
        }
        Ok(())
    }
}
