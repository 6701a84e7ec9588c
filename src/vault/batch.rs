//! Batches: entries compressed, sealed with XChaCha20-Poly1305 under the chain
//! key, their header (machine, session, seq range, clear index) as associated data.

use super::*;

/// One entry of a batch's clear index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexEntry {
    pub seq: u64,
    pub hash: Hash,
    pub ts: u64,
}

/// What the vault sees of a batch in clear, and what the AEAD binds the
/// ciphertext to.
///
/// ```text
/// nd7-batch v1
/// machine <id>
/// session <hex of the session id's bytes>
/// first <seq of the first entry>
/// prev <64 hex: the hash the first entry names as prev>
/// entries <n ≥ 1>
/// <seq> <hash> <ts>          (n lines, seq counting up from first)
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchHeader {
    pub machine: String,
    pub session: String,
    pub first: u64,
    pub prev: Hash,
    pub index: Vec<IndexEntry>,
}

impl BatchHeader {
    pub fn last(&self) -> IndexEntry {
        // Never empty: parse refuses that and ship never builds one.
        self.index.last().copied().unwrap_or(IndexEntry {
            seq: self.first,
            hash: self.prev,
            ts: 0,
        })
    }

    pub fn render(&self) -> Vec<u8> {
        let mut out = format!(
            "{BATCH_HEADER_MAGIC}\nmachine {}\nsession {}\nfirst {}\nprev {}\nentries {}\n",
            self.machine,
            hex(self.session.as_bytes()),
            self.first,
            self.prev,
            self.index.len()
        );
        for e in &self.index {
            out.push_str(&format!("{} {} {}\n", e.seq, e.hash, e.ts));
        }
        out.into_bytes()
    }

    pub fn parse(bytes: &[u8]) -> Result<BatchHeader, Error> {
        let bad = || malformed("the batch header", "an nd7-batch v1 header");
        let text = std::str::from_utf8(bytes).map_err(|_| bad())?;
        let mut lines = text.lines();
        let mut field = |name: &str| {
            lines
                .next()
                .and_then(|l| l.strip_prefix(name))
                .and_then(|l| l.strip_prefix(' '))
                .map(str::to_string)
        };
        if field("nd7-batch").as_deref() != Some("v1") {
            return Err(bad());
        }
        let machine = field("machine").ok_or_else(bad)?;
        let session = field("session")
            .and_then(|s| unhex_vec(&s))
            .and_then(|s| String::from_utf8(s).ok())
            .ok_or_else(bad)?;
        crate::session_log::check_session_id(&session).map_err(|_| bad())?;
        let first: u64 = field("first")
            .and_then(|s| s.parse().ok())
            .ok_or_else(bad)?;
        let prev = field("prev")
            .and_then(|s| Hash::from_hex(s.as_bytes()))
            .ok_or_else(bad)?;
        let n: usize = field("entries")
            .and_then(|s| s.parse().ok())
            .filter(|&n| n >= 1)
            .ok_or_else(bad)?;
        let mut index = Vec::with_capacity(n.min(1 << 16));
        for (i, line) in lines.enumerate() {
            let mut parts = line.split(' ');
            let (Some(seq), Some(hash), Some(ts), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                return Err(bad());
            };
            let entry = IndexEntry {
                seq: seq.parse().map_err(|_| bad())?,
                hash: Hash::from_hex(hash.as_bytes()).ok_or_else(bad)?,
                ts: ts.parse().map_err(|_| bad())?,
            };
            if Some(entry.seq) != first.checked_add(i as u64) {
                return Err(bad());
            }
            index.push(entry);
        }
        let header = BatchHeader {
            machine,
            session,
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

/// A batch as it travels:
///
/// ```text
/// "ND7B" 0x01
/// u32 BE length, the header        (associated data)
/// u32 BE length, the wrapped chain key (an age v1 file)
/// 24 bytes nonce
/// the rest: XChaCha20-Poly1305(chain key, nonce, zstd(entries), header)
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    pub header: BatchHeader,
    pub header_bytes: Vec<u8>,
    pub wrapped_key: Vec<u8>,
    pub nonce: [u8; 24],
    pub ciphertext: Vec<u8>,
}

/// The index entry of each whole line in `entries` (which must be complete,
/// newline-terminated log lines).
pub fn index_lines(entries: &[u8]) -> Result<Vec<IndexEntry>, Error> {
    entries
        .split_inclusive(|&b| b == b'\n')
        .map(|line| {
            let line = line.strip_suffix(b"\n").unwrap_or(line);
            let stated = chain::read_stated(line)
                .map_err(|f| Error::IndexMismatch(format!("a line is not an entry: {f}")))?;
            Ok(IndexEntry {
                seq: stated.seq,
                hash: stated.hash,
                ts: entry_ts(line).unwrap_or(0),
            })
        })
        .collect()
}

/// The `ts` member that follows `seq` in every envelope nd7 writes.
pub fn entry_ts(line: &[u8]) -> Option<u64> {
    let rest = line.strip_prefix(b"{\"seq\":")?;
    let comma = rest.iter().position(|&b| b == b',')?;
    let rest = rest[comma..].strip_prefix(b",\"ts\":")?;
    let end = rest.iter().position(|b| !b.is_ascii_digit())?;
    std::str::from_utf8(&rest[..end]).ok()?.parse().ok()
}

/// Compresses and encrypts `entries` (whole log lines) under `key`, bound to
/// `header`.
pub fn seal_batch(
    header: &BatchHeader,
    entries: &[u8],
    key: &ChainKey,
    wrapped_key: &[u8],
    nonce: [u8; 24],
) -> Vec<u8> {
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
        BATCH_BODY_MAGIC.len() + 8 + header_bytes.len() + wrapped_key.len() + 24 + ciphertext.len(),
    );
    out.extend_from_slice(BATCH_BODY_MAGIC);
    out.extend_from_slice(&(header_bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(&header_bytes);
    out.extend_from_slice(&(wrapped_key.len() as u32).to_be_bytes());
    out.extend_from_slice(wrapped_key);
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&ciphertext);
    out
}

/// A zstd frame of `entries`: libzstd at level 3 when built with it, else
/// ruzstd's one implemented level (about zstd's level 1, five times slower;
/// ADR-0021). Either is read by [`open_batch`].
fn compress(entries: &[u8]) -> Vec<u8> {
    #[cfg(feature = "zstd-c")]
    if let Ok(frame) = zstd::bulk::compress(entries, 3) {
        return frame;
    }
    ruzstd::encoding::compress_to_vec(entries, ruzstd::encoding::CompressionLevel::Fastest)
}

/// Splits a batch body into its parts and parses its header. Checks the
/// framing only: whether it decrypts is [`open_batch`]'s question.
pub fn parse_batch(body: &[u8]) -> Result<Batch, Error> {
    let bad = || malformed("the batch", "an ND7B v1 batch");
    let rest = body.strip_prefix(BATCH_BODY_MAGIC).ok_or_else(bad)?;
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
    let ciphertext = rest[24..].to_vec();
    if ciphertext.len() < 16 {
        return Err(bad());
    }
    let header = BatchHeader::parse(&header_bytes)?;
    Ok(Batch {
        header,
        header_bytes,
        wrapped_key,
        nonce,
        ciphertext,
    })
}

/// Decrypts and decompresses a batch, then checks that its lines are exactly
/// the chain its header promises: each line sealed and linked (the same
/// [`Walker`] `nd7 verify` uses), starting at `first` after `prev`, with the
/// index's seq, hash and ts. Returns the lines.
pub fn open_batch(batch: &Batch, key: &ChainKey) -> Result<Vec<u8>, Error> {
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
    check_entries(&batch.header, &entries)?;
    Ok(entries)
}

/// Checks whole lines against a header: the chain from (first, prev), and
/// the index line for line.
pub fn check_entries(header: &BatchHeader, entries: &[u8]) -> Result<(), Error> {
    if !entries.ends_with(b"\n") {
        return Err(Error::IndexMismatch("the last line has no newline".into()));
    }
    let mut walker = Walker::new(Cursor {
        next_seq: header.first,
        prev: header.prev,
    });
    walker.feed(entries).map_err(|b| {
        Error::IndexMismatch(format!("entry {}: {}", header.first + b.entry, b.fault))
    })?;
    let found = index_lines(entries)?;
    if found != header.index {
        return Err(Error::IndexMismatch(format!(
            "{} lines against {} index entries, or a seq, hash or ts differs",
            found.len(),
            header.index.len()
        )));
    }
    Ok(())
}
