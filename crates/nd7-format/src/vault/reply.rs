//! What binds the vault's answers to the requests they answer: a signature
//! over each reply, naming the request's nonce (`x-nd7-reply`), and a signed
//! last frame ending each streamed pull. Without them the network (plain
//! HTTP) could replay an old receipt as today's, which the machine would
//! take for the vault breaking its word, or end a pull cleanly at a batch
//! boundary, which the admin would take for all there is.

use super::*;

pub const HEADER_REPLY: &str = "x-nd7-reply";

const REPLY_MAGIC: &str = "nd7-reply v1";
const PULL_END_MAGIC: &str = "nd7-pull-end v1";

/// The bytes the vault signs for a reply: its key, the request's nonce,
/// method and path, the status and the body's BLAKE3.
pub fn reply_message(
    vault: &PublicKey,
    nonce: &[u8; 16],
    method: &str,
    path: &str,
    status: u16,
    body: &[u8],
) -> Vec<u8> {
    format!(
        "{REPLY_MAGIC}\nvault {}\nnonce {}\nrequest {method} {path}\nstatus {status}\nbody {}\n",
        vault.to_hex(),
        hex(nonce),
        blake3::hash(body).to_hex()
    )
    .into_bytes()
}

/// The vault's signature over a reply to the request with `nonce`.
pub fn sign_reply(
    vault: &SigningKey,
    nonce: &[u8; 16],
    method: &str,
    path: &str,
    status: u16,
    body: &[u8],
) -> [u8; 64] {
    vault.sign(&reply_message(
        &vault.public(),
        nonce,
        method,
        path,
        status,
        body,
    ))
}

/// Checks `signature` (the `x-nd7-reply` header's text): the vault key
/// `vault` signed this reply to the request with `nonce`.
pub fn verify_reply(
    vault: &PublicKey,
    nonce: &[u8; 16],
    method: &str,
    path: &str,
    status: u16,
    body: &[u8],
    signature: Option<&str>,
) -> Result<(), Error> {
    let signature = signature
        .and_then(sig_hex)
        .ok_or(Error::UnboundReply("it carries no x-nd7-reply signature"))?;
    if vault.verify(
        &reply_message(vault, nonce, method, path, status, body),
        &signature,
    ) {
        Ok(())
    } else {
        Err(Error::UnboundReply(
            "its x-nd7-reply signature is not the vault key's over this request's nonce and this reply",
        ))
    }
}

/// What a pull streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PullOf {
    Batches,
    Transcripts,
}

impl PullOf {
    fn name(self) -> &'static str {
        match self {
            PullOf::Batches => "batches",
            PullOf::Transcripts => "transcripts",
        }
    }
}

/// The last frame of a pull: the vault's signature over how many frames it
/// sent before, and their BLAKE3 as sent, for the request with `nonce`.
///
/// ```text
/// nd7-pull-end v1
/// vault <64 hex>
/// nonce <32 hex: the request's x-nd7-nonce>
/// machine <id>
/// session <hex>
/// of batches|transcripts
/// frames <n>
/// digest <64 hex: BLAKE3 of every frame before this one, length prefixes included>
/// signature <128 hex: the vault's, over every byte above this line>
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PullEnd {
    pub vault: PublicKey,
    pub nonce: [u8; 16],
    pub machine: String,
    pub session: String,
    pub of: PullOf,
    pub frames: u64,
    pub digest: [u8; 32],
    pub signature: [u8; 64],
}

impl PullEnd {
    /// Whether a frame's bytes are a pull's end rather than a batch or piece.
    pub fn is_end(frame: &[u8]) -> bool {
        frame.starts_with(PULL_END_MAGIC.as_bytes())
    }

    fn signed_part(&self) -> String {
        format!(
            "{PULL_END_MAGIC}\nvault {}\nnonce {}\nmachine {}\nsession {}\nof {}\nframes {}\ndigest {}\n",
            self.vault.to_hex(),
            hex(&self.nonce),
            self.machine,
            hex(self.session.as_bytes()),
            self.of.name(),
            self.frames,
            hex(&self.digest)
        )
    }

    #[allow(clippy::too_many_arguments)]
    pub fn sign(
        vault: &SigningKey,
        nonce: [u8; 16],
        machine: &str,
        session: &str,
        of: PullOf,
        frames: u64,
        digest: [u8; 32],
    ) -> PullEnd {
        let mut end = PullEnd {
            vault: vault.public(),
            nonce,
            machine: machine.to_string(),
            session: session.to_string(),
            of,
            frames,
            digest,
            signature: [0; 64],
        };
        end.signature = vault.sign(end.signed_part().as_bytes());
        end
    }

    pub fn render(&self) -> String {
        format!("{}signature {}\n", self.signed_part(), hex(&self.signature))
    }

    pub fn parse(bytes: &[u8]) -> Result<PullEnd, Error> {
        let bad = || malformed("the pull's last frame", "an nd7-pull-end v1");
        let text = std::str::from_utf8(bytes).map_err(|_| bad())?;
        let (signed, signature) = split_signed(text, "signature").ok_or_else(bad)?;
        let mut lines = signed.lines();
        if lines.next() != Some(PULL_END_MAGIC) {
            return Err(bad());
        }
        let end = PullEnd {
            vault: field(lines.next(), "vault")
                .and_then(PublicKey::from_hex)
                .ok_or_else(bad)?,
            nonce: field(lines.next(), "nonce")
                .and_then(unhex::<16>)
                .ok_or_else(bad)?,
            machine: field(lines.next(), "machine").ok_or_else(bad)?.to_string(),
            session: field(lines.next(), "session")
                .and_then(unhex_vec)
                .and_then(|s| String::from_utf8(s).ok())
                .ok_or_else(bad)?,
            of: match field(lines.next(), "of") {
                Some("batches") => PullOf::Batches,
                Some("transcripts") => PullOf::Transcripts,
                _ => return Err(bad()),
            },
            frames: field(lines.next(), "frames")
                .and_then(|n| n.parse().ok())
                .ok_or_else(bad)?,
            digest: field(lines.next(), "digest")
                .and_then(unhex::<32>)
                .ok_or_else(bad)?,
            signature,
        };
        if lines.next().is_some() || end.render() != text {
            return Err(bad());
        }
        Ok(end)
    }

    /// Checks that `vault` signed this end of the pull of `of` for
    /// `machine`'s `session` asked with `nonce`, after exactly `frames`
    /// frames whose BLAKE3 is `digest`.
    #[allow(clippy::too_many_arguments)]
    pub fn verify(
        &self,
        vault: &PublicKey,
        nonce: &[u8; 16],
        machine: &str,
        session: &str,
        of: PullOf,
        frames: u64,
        digest: &[u8; 32],
    ) -> Result<(), String> {
        if self.vault != *vault || !vault.verify(self.signed_part().as_bytes(), &self.signature) {
            return Err(format!(
                "its last frame is not signed by the vault key {}",
                vault.to_hex()
            ));
        }
        if self.nonce != *nonce {
            return Err("its last frame answers another request (another nonce): a replay".into());
        }
        if (self.machine.as_str(), self.session.as_str(), self.of) != (machine, session, of) {
            return Err(format!(
                "its last frame ends the {} of machine {}, session {}",
                self.of.name(),
                self.machine,
                self.session
            ));
        }
        if self.frames != frames || self.digest != *digest {
            return Err(format!(
                "its last frame says {} frame(s) came before it, but {frames} did, or other bytes",
                self.frames
            ));
        }
        Ok(())
    }
}
