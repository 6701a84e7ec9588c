//! Batches: entries compressed, sealed with XChaCha20-Poly1305 under the chain
//! key, their header (machine, session, chain key id, seq range, keyed
//! digests) as associated data, and the machine's signature over the whole.

use super::*;

/// One entry of a batch's clear index: its seq and the keyed digest of its hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexEntry {
    pub seq: u64,
    pub digest: Digest,
}

/// What the vault sees of a batch in clear, and what the AEAD binds the
/// ciphertext to.
///
/// ```text
/// nd7-batch v2
/// machine <id>
/// session <hex of the session id's bytes>
/// key <32 hex: the chain key's id>
/// first <seq of the first entry>
/// prev <64 hex: digest of the hash the first entry names as prev>
/// entries <n ≥ 1>
/// <seq> <digest>             (n lines, seq counting up from first)
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchHeader {
    pub machine: String,
    pub session: String,
    pub key: KeyId,
    pub first: u64,
    pub prev: Digest,
    pub index: Vec<IndexEntry>,
}

impl BatchHeader {
    pub fn last(&self) -> IndexEntry {
        // Never empty: parse refuses that and ship never builds one.
        self.index.last().copied().unwrap_or(IndexEntry {
            seq: self.first,
            digest: self.prev,
        })
    }

    /// "first..last", as every message names a batch.
    pub fn range(&self) -> String {
        format!("{}..{}", self.first, self.last().seq)
    }

    pub fn render(&self) -> Vec<u8> {
        let mut out = format!(
            "{BATCH_HEADER_MAGIC}\nmachine {}\nsession {}\nkey {}\nfirst {}\nprev {}\nentries {}\n",
            self.machine,
            hex(self.session.as_bytes()),
            self.key,
            self.first,
            self.prev,
            self.index.len()
        );
        for e in &self.index {
            out.push_str(&format!("{} {}\n", e.seq, e.digest));
        }
        out.into_bytes()
    }

    pub fn parse(bytes: &[u8]) -> Result<BatchHeader, Error> {
        let bad = || malformed("the batch header", "an nd7-batch v2 header");
        let text = std::str::from_utf8(bytes).map_err(|_| bad())?;
        let mut lines = text.lines();
        if lines.next() != Some(BATCH_HEADER_MAGIC) {
            return Err(bad());
        }
        let machine = field(lines.next(), "machine")
            .filter(|m| !m.is_empty() && m.len() <= 64)
            .ok_or_else(bad)?
            .to_string();
        let session = field(lines.next(), "session")
            .and_then(unhex_vec)
            .and_then(|s| String::from_utf8(s).ok())
            .ok_or_else(bad)?;
        crate::chain::check_session_id(&session).map_err(|_| bad())?;
        if session.len() > MAX_SESSION_ID_BYTES {
            return Err(malformed(
                "the batch header",
                "a header naming a session id of at most 255 bytes",
            ));
        }
        let key = field(lines.next(), "key")
            .and_then(KeyId::from_hex)
            .ok_or_else(bad)?;
        let first: u64 = field(lines.next(), "first")
            .and_then(|s| s.parse().ok())
            .ok_or_else(bad)?;
        let prev = field(lines.next(), "prev")
            .and_then(Digest::from_hex)
            .ok_or_else(bad)?;
        let n: usize = field(lines.next(), "entries")
            .and_then(|s| s.parse().ok())
            .filter(|&n| n >= 1)
            .ok_or_else(bad)?;
        if n > MAX_BATCH_ENTRIES {
            return Err(malformed(
                "the batch header",
                "a header of at most 65536 entries",
            ));
        }
        let mut index = Vec::with_capacity(n.min(1 << 16));
        for (i, line) in lines.enumerate() {
            let (Some(seq), Some(digest)) = line
                .split_once(' ')
                .map_or((None, None), |(s, d)| (Some(s), Some(d)))
            else {
                return Err(bad());
            };
            let entry = IndexEntry {
                seq: seq.parse().map_err(|_| bad())?,
                digest: Digest::from_hex(digest).ok_or_else(bad)?,
            };
            if Some(entry.seq) != first.checked_add(i as u64) {
                return Err(bad());
            }
            index.push(entry);
        }
        let header = BatchHeader {
            machine,
            session,
            key,
            first,
            prev,
            index,
        };
        // One spelling only: what was authenticated is what is stored.
        if header.index.len() != n || header.render() != bytes {
            return Err(bad());
        }
        Ok(header)
    }
}

/// A batch as it travels and is stored:
///
/// ```text
/// "ND7B" 0x02
/// u32 BE length, the header        (associated data)
/// u32 BE length, the wrapped chain key (an age v1 file)
/// 24 bytes nonce
/// u32 BE length, XChaCha20-Poly1305(chain key, nonce, zstd(entries), header)
/// 64 bytes: the machine's Ed25519 signature over the checkpoint
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    pub header: BatchHeader,
    pub header_bytes: Vec<u8>,
    pub wrapped_key: Vec<u8>,
    pub nonce: [u8; 24],
    pub ciphertext: Vec<u8>,
    /// What the machine signed: the header's fields and the BLAKE3 of every
    /// byte before the signature.
    pub checkpoint: Checkpoint,
    pub signature: [u8; 64],
}

impl Batch {
    /// Whether `machine` signed this batch, exactly as it is.
    pub fn signed_by(&self, machine: &PublicKey) -> bool {
        self.checkpoint.verify(machine, &self.signature)
    }
}

/// The clear index of whole lines in `entries` (complete, newline-terminated
/// log lines) under `key`.
pub fn index_lines(entries: &[u8], key: &IndexKey) -> Result<Vec<IndexEntry>, Error> {
    entries
        .split_inclusive(|&b| b == b'\n')
        .map(|line| {
            let line = line.strip_suffix(b"\n").unwrap_or(line);
            let stated = chain::read_stated(line)
                .map_err(|f| Error::IndexMismatch(format!("a line is not an entry: {f}")))?;
            Ok(IndexEntry {
                seq: stated.seq,
                digest: key.digest(&stated.hash),
            })
        })
        .collect()
}

/// Compresses and encrypts `entries` (whole log lines) under `key`, bound to
/// `header`, and signs the result with the machine's key. Returns the batch's
/// bytes and the checkpoint signed.
pub fn seal_batch(
    header: &BatchHeader,
    entries: &[u8],
    key: &ChainKey,
    wrapped_key: &[u8],
    nonce: [u8; 24],
    machine: &SigningKey,
) -> (Vec<u8>, Checkpoint) {
    let header_bytes = header.render();
    let compressed = compress(entries);
    let ciphertext = XChaCha20Poly1305::new(key.expose_secret().into())
        .encrypt(
            &nonce.into(),
            Payload {
                msg: &compressed,
                aad: &header_bytes,
            },
        )
        .unwrap_or_default();
    let mut out = Vec::with_capacity(
        BATCH_BODY_MAGIC.len()
            + 12
            + header_bytes.len()
            + wrapped_key.len()
            + 24
            + ciphertext.len()
            + 64,
    );
    out.extend_from_slice(BATCH_BODY_MAGIC);
    out.extend_from_slice(&(header_bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(&header_bytes);
    out.extend_from_slice(&(wrapped_key.len() as u32).to_be_bytes());
    out.extend_from_slice(wrapped_key);
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&(ciphertext.len() as u32).to_be_bytes());
    out.extend_from_slice(&ciphertext);
    let checkpoint = Checkpoint::of(header, blake3::hash(&out).into());
    out.extend_from_slice(&machine.sign(checkpoint.render().as_bytes()));
    (out, checkpoint)
}

/// A zstd frame of `entries`: libzstd at level 3 when built with it, else
/// ruzstd's one implemented level (about zstd's level 1, five times slower;
/// ADR-0021). Either is read by [`open_batch`].
pub(super) fn compress(entries: &[u8]) -> Vec<u8> {
    #[cfg(feature = "zstd-c")]
    if let Ok(frame) = zstd::bulk::compress(entries, 3) {
        return frame;
    }
    ruzstd::encoding::compress_to_vec(entries, ruzstd::encoding::CompressionLevel::Fastest)
}

/// The parts every sealed body (a batch, a transcript piece) has, in order
/// after its magic: a length-prefixed header, a length-prefixed wrapped key,
/// a 24-byte nonce, a length-prefixed ciphertext and a 64-byte signature.
pub(super) struct Sealed {
    pub header_bytes: Vec<u8>,
    pub wrapped_key: Vec<u8>,
    pub nonce: [u8; 24],
    pub ciphertext: Vec<u8>,
    pub signature: [u8; 64],
}

/// Splits `body` into a sealed body's parts, after `magic`; `what` and
/// `shape` name it in the error. Checks the framing only (and that the
/// ciphertext can hold the AEAD tag).
pub(super) fn split_sealed(
    body: &[u8],
    magic: &[u8],
    what: &'static str,
    shape: &'static str,
) -> Result<Sealed, Error> {
    let bad = || malformed(what, shape);
    let rest = body.strip_prefix(magic).ok_or_else(bad)?;
    let take = |rest: &[u8]| -> Result<(Vec<u8>, usize), Error> {
        let len: [u8; 4] = rest
            .get(..4)
            .and_then(|l| l.try_into().ok())
            .ok_or_else(bad)?;
        let len = u32::from_be_bytes(len) as usize;
        let part = rest.get(4..4 + len).ok_or_else(bad)?;
        Ok((part.to_vec(), 4 + len))
    };
    let (header_bytes, used) = take(rest)?;
    let rest = &rest[used..];
    let (wrapped_key, used) = take(rest)?;
    let rest = &rest[used..];
    let nonce: [u8; 24] = rest
        .get(..24)
        .and_then(|n| n.try_into().ok())
        .ok_or_else(bad)?;
    let rest = &rest[24..];
    let (ciphertext, used) = take(rest)?;
    let signature: [u8; 64] = rest[used..].try_into().map_err(|_| bad())?;
    if ciphertext.len() < 16 {
        return Err(bad());
    }
    Ok(Sealed {
        header_bytes,
        wrapped_key,
        nonce,
        ciphertext,
        signature,
    })
}

/// Splits a batch into its parts, parses its header and renders the
/// checkpoint it claims. Checks the framing only: whether the signature
/// holds is [`Batch::signed_by`]'s question, whether it decrypts
/// [`open_batch`]'s.
pub fn parse_batch(body: &[u8]) -> Result<Batch, Error> {
    let Sealed {
        header_bytes,
        wrapped_key,
        nonce,
        ciphertext,
        signature,
    } = split_sealed(body, BATCH_BODY_MAGIC, "the batch", "an ND7B v2 batch")?;
    let header = BatchHeader::parse(&header_bytes)?;
    if ciphertext.len() < header.index.len() * MIN_CIPHERTEXT_PER_ENTRY {
        return Err(malformed(
            "the batch",
            "a batch whose ciphertext can hold the entries its index lists (at least 16 bytes each)",
        ));
    }
    let signed = &body[..body.len() - 64];
    let checkpoint = Checkpoint::of(&header, blake3::hash(signed).into());
    Ok(Batch {
        header,
        header_bytes,
        wrapped_key,
        nonce,
        ciphertext,
        checkpoint,
        signature,
    })
}

/// A batch's entries, decrypted and checked, and where its chain starts and
/// ends (the real hashes, which the clear index only holds digests of).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Opened {
    pub entries: Vec<u8>,
    /// The hash the first entry names as prev.
    pub prev: Hash,
    /// The last entry's hash.
    pub last: Hash,
}

/// Decrypts and decompresses a batch, then checks that its lines are exactly
/// the chain its header promises: each line sealed and linked (the same
/// [`Walker`] `nd7 verify` uses), starting at `first`, with the index's
/// digests under `key`'s index key, and `key` the one the header names.
pub fn open_batch(batch: &Batch, key: &ChainKey) -> Result<Opened, Error> {
    if KeyId::of(key) != batch.header.key {
        return Err(Error::IndexMismatch(format!(
            "the header names chain key {}, but the wrapped key is {}",
            batch.header.key,
            KeyId::of(key)
        )));
    }
    let compressed = XChaCha20Poly1305::new(key.expose_secret().into())
        .decrypt(
            &batch.nonce.into(),
            Payload {
                msg: &batch.ciphertext,
                aad: &batch.header_bytes,
            },
        )
        .map_err(|_| Error::BatchDecrypt)?;
    let decoder = ruzstd::decoding::StreamingDecoder::new(compressed.as_slice())
        .map_err(|e| Error::Decompress(e.to_string()))?;
    let mut entries = Vec::new();
    decoder
        .take(MAX_BATCH_ENTRIES_BYTES as u64 + 1)
        .read_to_end(&mut entries)
        .map_err(|e| Error::Decompress(e.to_string()))?;
    if entries.len() > MAX_BATCH_ENTRIES_BYTES {
        return Err(Error::Decompress("more than 8 MiB of entries".into()));
    }
    let (prev, last) = check_entries(&batch.header, &entries, &IndexKey::of(key))?;
    Ok(Opened {
        entries,
        prev,
        last,
    })
}

/// Checks whole lines against a header: one chain from `first`, whose first
/// prev and every hash have the header's digests. Returns the first entry's
/// prev and the last entry's hash.
pub fn check_entries(
    header: &BatchHeader,
    entries: &[u8],
    key: &IndexKey,
) -> Result<(Hash, Hash), Error> {
    if !entries.ends_with(b"\n") {
        return Err(Error::IndexMismatch("the last line has no newline".into()));
    }
    let first_line = entries.split(|&b| b == b'\n').next().unwrap_or_default();
    let prev = chain::read_stated(first_line)
        .map_err(|f| Error::IndexMismatch(format!("entry {}: {f}", header.first)))?
        .prev;
    if key.digest(&prev) != header.prev {
        return Err(Error::IndexMismatch(format!(
            "entry {} names a prev whose digest is not the header's",
            header.first
        )));
    }
    let mut walker = Walker::new(Cursor {
        next_seq: header.first,
        prev,
    });
    walker.feed(entries).map_err(|b| {
        Error::IndexMismatch(format!("entry {}: {}", header.first + b.entry, b.fault))
    })?;
    let found = index_lines(entries, key)?;
    if found != header.index {
        return Err(Error::IndexMismatch(format!(
            "{} lines against {} index entries, or a seq or digest differs",
            found.len(),
            header.index.len()
        )));
    }
    let last_line = entries[..entries.len() - 1]
        .rsplit(|&b| b == b'\n')
        .next()
        .unwrap_or_default();
    let last = chain::read_stated(last_line)
        .map_err(|f| Error::IndexMismatch(format!("the last entry: {f}")))?
        .hash;
    Ok((prev, last))
}
