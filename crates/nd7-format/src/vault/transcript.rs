//! Transcript pieces: bytes of Claude Code's transcript that an anchor in the
//! session's chain covers, shipped beside the entries, sealed the same way
//! (zstd, XChaCha20-Poly1305 under the session's chain key, the header as
//! associated data, the chain key wrapped beside it) and signed by the machine.
//!
//! A piece is named by the chain entry that anchors its bytes and by where in
//! the file they lie, so the vault learns sizes and positions only, never the
//! file's name or a byte of it. Their integrity comes from the chain: an admin
//! puts the pieces of a file together and holds them against the anchors in
//! the (signed, checked) entries, as `nd7 verify --transcript` holds a file
//! on disk.

use super::*;

/// The most bytes of a transcript one piece carries: a piece of an anchor
/// that covers more is one of several.
pub const MAX_PIECE_BYTES: usize = MAX_BATCH_ENTRIES_BYTES;

const PIECE_HEADER_MAGIC: &str = "nd7-transcript v3";
const PIECE_BODY_MAGIC: &[u8] = b"ND7T\x03";
const PIECE_SIGNED_MAGIC: &str = "nd7-transcript-signed v3";
const PIECE_RECEIPT_MAGIC: &str = "nd7-piece-receipt v1";

/// What the vault sees of a piece in clear, and what the AEAD binds its
/// ciphertext to.
///
/// ```text
/// nd7-transcript v3
/// machine <id>
/// session <hex of the session id's bytes>
/// key <32 hex: the chain key's id>
/// anchor <seq of the transcript_anchor entry whose bytes these are>
/// from <byte offset in the file>
/// to <byte offset, from < to ≤ from + 8 MiB>
/// after <anchor> <from> of the session's piece the machine shipped before, or "after -"
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PieceHeader {
    pub machine: String,
    pub session: String,
    pub key: KeyId,
    pub anchor: u64,
    pub from: u64,
    pub to: u64,
    /// The session's piece the machine shipped just before this one (its
    /// anchor and first byte), so the pieces form a chain the vault cannot
    /// drop a link of unnoticed; `None` for the first.
    pub after: Option<(u64, u64)>,
}

impl PieceHeader {
    /// "entry N, bytes a..b", as every message names a piece.
    pub fn names(&self) -> String {
        format!(
            "machine {}, session {}, the transcript bytes {}..{} entry {} anchors",
            self.machine, self.session, self.from, self.to, self.anchor
        )
    }

    pub fn render(&self) -> Vec<u8> {
        format!(
            "{PIECE_HEADER_MAGIC}\nmachine {}\nsession {}\nkey {}\nanchor {}\nfrom {}\nto {}\nafter {}\n",
            self.machine,
            hex(self.session.as_bytes()),
            self.key,
            self.anchor,
            self.from,
            self.to,
            self.after
                .map_or_else(|| "-".to_string(), |(a, f)| format!("{a} {f}"))
        )
        .into_bytes()
    }

    pub fn parse(bytes: &[u8]) -> Result<PieceHeader, Error> {
        let bad = || {
            malformed(
                "the transcript piece's header",
                "an nd7-transcript v3 header",
            )
        };
        let text = std::str::from_utf8(bytes).map_err(|_| bad())?;
        let mut lines = text.lines();
        if lines.next() != Some(PIECE_HEADER_MAGIC) {
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
        let key = field(lines.next(), "key")
            .and_then(KeyId::from_hex)
            .ok_or_else(bad)?;
        let number = |line: Option<&str>, name| {
            field(line, name)
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or_else(bad)
        };
        let anchor = number(lines.next(), "anchor")?;
        let from = number(lines.next(), "from")?;
        let to = number(lines.next(), "to")?;
        let after = match field(lines.next(), "after").ok_or_else(bad)? {
            "-" => None,
            pair => {
                let (a, f) = pair.split_once(' ').ok_or_else(bad)?;
                Some((a.parse().map_err(|_| bad())?, f.parse().map_err(|_| bad())?))
            }
        };
        if to <= from || to - from > MAX_PIECE_BYTES as u64 || lines.next().is_some() {
            return Err(bad());
        }
        let header = PieceHeader {
            machine,
            session,
            key,
            anchor,
            from,
            to,
            after,
        };
        // One spelling only: what was authenticated is what is stored.
        if header.render() != bytes {
            return Err(bad());
        }
        Ok(header)
    }
}

/// A piece as it travels and is stored:
///
/// ```text
/// "ND7T" 0x03
/// u32 BE length, the header        (associated data)
/// u32 BE length, the wrapped chain key (an age v1 file)
/// 24 bytes nonce
/// u32 BE length, XChaCha20-Poly1305(chain key, nonce, zstd(bytes), header)
/// 64 bytes: the machine's Ed25519 signature over
///           "nd7-transcript-signed v3\nbatch <64 hex: BLAKE3 of every byte before it>\n"
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    pub header: PieceHeader,
    pub header_bytes: Vec<u8>,
    pub wrapped_key: Vec<u8>,
    pub nonce: [u8; 24],
    pub ciphertext: Vec<u8>,
    /// BLAKE3 of every byte before the signature.
    pub batch: [u8; 32],
    pub signature: [u8; 64],
}

fn piece_signed(batch: &[u8; 32]) -> String {
    format!("{PIECE_SIGNED_MAGIC}\nbatch {}\n", hex(batch))
}

impl Piece {
    /// Whether `machine` signed this piece, exactly as it is.
    pub fn signed_by(&self, machine: &PublicKey) -> bool {
        machine.verify(piece_signed(&self.batch).as_bytes(), &self.signature)
    }
}

/// The vault's countersignature over a stored transcript piece: what the
/// machine keeps of the last piece it shipped of a session
/// (`transcript/receipt`), so the vault cannot drop it unnoticed; the
/// pieces' `after` links answer for the ones before.
///
/// ```text
/// nd7-piece-receipt v1
/// vault <64 hex: the vault's public key>
/// stored <Unix s>
/// <the piece's header, 8 lines>
/// piece <64 hex: BLAKE3 of the piece's bytes before its signature>
/// piece-signature <128 hex: the machine's>
/// signature <128 hex: the vault's, over every byte above this line>
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PieceReceipt {
    pub vault: PublicKey,
    pub stored: u64,
    pub header: PieceHeader,
    pub piece: [u8; 32],
    pub piece_signature: [u8; 64],
    pub signature: [u8; 64],
}

impl PieceReceipt {
    fn signed_part(
        vault: &PublicKey,
        stored: u64,
        header: &PieceHeader,
        piece: &[u8; 32],
        piece_signature: &[u8; 64],
    ) -> String {
        format!(
            "{PIECE_RECEIPT_MAGIC}\nvault {}\nstored {stored}\n{}piece {}\npiece-signature {}\n",
            vault.to_hex(),
            String::from_utf8_lossy(&header.render()),
            hex(piece),
            hex(piece_signature)
        )
    }

    /// The vault's receipt for `piece`, stored at `stored`.
    pub fn sign(vault: &SigningKey, stored: u64, piece: &Piece) -> PieceReceipt {
        let public = vault.public();
        let signed = PieceReceipt::signed_part(
            &public,
            stored,
            &piece.header,
            &piece.batch,
            &piece.signature,
        );
        PieceReceipt {
            vault: public,
            stored,
            header: piece.header.clone(),
            piece: piece.batch,
            piece_signature: piece.signature,
            signature: vault.sign(signed.as_bytes()),
        }
    }

    pub fn render(&self) -> String {
        format!(
            "{}signature {}\n",
            PieceReceipt::signed_part(
                &self.vault,
                self.stored,
                &self.header,
                &self.piece,
                &self.piece_signature
            ),
            hex(&self.signature)
        )
    }

    /// Reads a receipt's text (no signature is checked here).
    pub fn parse(text: &str) -> Result<PieceReceipt, Error> {
        let bad = || malformed("the transcript piece's receipt", "an nd7-piece-receipt v1");
        let (signed, signature) = split_signed(text, "signature").ok_or_else(bad)?;
        let mut lines = signed.lines();
        if lines.next() != Some(PIECE_RECEIPT_MAGIC) {
            return Err(bad());
        }
        let vault = field(lines.next(), "vault")
            .and_then(PublicKey::from_hex)
            .ok_or_else(bad)?;
        let stored = field(lines.next(), "stored")
            .and_then(|s| s.parse().ok())
            .ok_or_else(bad)?;
        let header: String = lines.by_ref().take(8).map(|l| format!("{l}\n")).collect();
        let header = PieceHeader::parse(header.as_bytes()).map_err(|_| bad())?;
        let receipt = PieceReceipt {
            vault,
            stored,
            header,
            piece: field(lines.next(), "piece")
                .and_then(unhex::<32>)
                .ok_or_else(bad)?,
            piece_signature: field(lines.next(), "piece-signature")
                .and_then(sig_hex)
                .ok_or_else(bad)?,
            signature,
        };
        if lines.next().is_some() || receipt.render() != text {
            return Err(bad());
        }
        Ok(receipt)
    }

    /// Checks both signatures: `vault`'s over the receipt, `machine`'s over
    /// the piece it names.
    pub fn verify(&self, vault: &PublicKey, machine: &PublicKey) -> Result<(), Error> {
        let signed = PieceReceipt::signed_part(
            &self.vault,
            self.stored,
            &self.header,
            &self.piece,
            &self.piece_signature,
        );
        if self.vault != *vault || !vault.verify(signed.as_bytes(), &self.signature) {
            return Err(Error::BadReceiptSignature(vault.to_hex()));
        }
        if !machine.verify(piece_signed(&self.piece).as_bytes(), &self.piece_signature) {
            return Err(Error::BadCheckpointSignature);
        }
        Ok(())
    }
}

/// Compresses and encrypts `bytes` (the transcript's `header.from..header.to`)
/// under `key`, bound to `header`, and signs the result with the machine's key.
pub fn seal_piece(
    header: &PieceHeader,
    bytes: &[u8],
    key: &ChainKey,
    wrapped_key: &[u8],
    nonce: [u8; 24],
    machine: &SigningKey,
) -> Vec<u8> {
    let header_bytes = header.render();
    let compressed = compress(bytes);
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
        PIECE_BODY_MAGIC.len()
            + 12
            + header_bytes.len()
            + wrapped_key.len()
            + 24
            + ciphertext.len()
            + 64,
    );
    out.extend_from_slice(PIECE_BODY_MAGIC);
    out.extend_from_slice(&(header_bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(&header_bytes);
    out.extend_from_slice(&(wrapped_key.len() as u32).to_be_bytes());
    out.extend_from_slice(wrapped_key);
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&(ciphertext.len() as u32).to_be_bytes());
    out.extend_from_slice(&ciphertext);
    let batch: [u8; 32] = blake3::hash(&out).into();
    out.extend_from_slice(&machine.sign(piece_signed(&batch).as_bytes()));
    out
}

/// Splits a piece into its parts and parses its header. Checks the framing
/// only: the signature is [`Piece::signed_by`]'s question, the contents
/// [`open_piece`]'s.
pub fn parse_piece(body: &[u8]) -> Result<Piece, Error> {
    let Sealed {
        header_bytes,
        wrapped_key,
        nonce,
        ciphertext,
        signature,
    } = split_sealed(
        body,
        PIECE_BODY_MAGIC,
        "the transcript piece",
        "an ND7T v3 piece",
    )?;
    let header = PieceHeader::parse(&header_bytes)?;
    let bytes = header.to - header.from;
    let most = most_ciphertext(bytes);
    if ciphertext.len() as u64 > most {
        return Err(Error::PieceOversize {
            ciphertext: ciphertext.len(),
            bytes,
            most,
        });
    }
    Ok(Piece {
        header,
        header_bytes,
        wrapped_key,
        nonce,
        ciphertext,
        batch: blake3::hash(&body[..body.len() - 64]).into(),
        signature,
    })
}

/// The most ciphertext a piece of `bytes` transcript bytes can need: zstd's
/// worst case (the bytes stored raw, a block header per 128 KiB, the frame
/// header) with room to spare, and the AEAD tag. A piece with more carries
/// something besides its bytes, which the vault would keep for nothing.
pub fn most_ciphertext(bytes: u64) -> u64 {
    bytes + bytes / 128 + 1024 + 16
}

/// Decrypts and decompresses a piece: exactly `to - from` bytes, under the
/// chain key its header names.
pub fn open_piece(piece: &Piece, key: &ChainKey) -> Result<Vec<u8>, Error> {
    if KeyId::of(key) != piece.header.key {
        return Err(Error::IndexMismatch(format!(
            "the header names chain key {}, but the wrapped key is {}",
            piece.header.key,
            KeyId::of(key)
        )));
    }
    let compressed = XChaCha20Poly1305::new(key.expose_secret().into())
        .decrypt(
            &piece.nonce.into(),
            Payload {
                msg: &piece.ciphertext,
                aad: &piece.header_bytes,
            },
        )
        .map_err(|_| Error::BatchDecrypt)?;
    let decoder = ruzstd::decoding::StreamingDecoder::new(compressed.as_slice())
        .map_err(|e| Error::Decompress(e.to_string()))?;
    let mut bytes = Vec::new();
    decoder
        .take(MAX_PIECE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::Decompress(e.to_string()))?;
    let want = piece.header.to - piece.header.from;
    if bytes.len() as u64 != want {
        return Err(Error::IndexMismatch(format!(
            "{} bytes decrypted, the header says {want}",
            bytes.len()
        )));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> ChainKey {
        Secret32::from_bytes([7; 32])
    }

    fn machine() -> SigningKey {
        SigningKey::from_seed(&Secret32::from_bytes([9; 32]))
    }

    fn header() -> PieceHeader {
        PieceHeader {
            machine: "m1".into(),
            session: "s-1".into(),
            key: KeyId::of(&key()),
            anchor: 12,
            from: 100,
            to: 130,
            after: Some((11, 40)),
        }
    }

    /// The header's bytes are pinned: both sides authenticate exactly these.
    #[test]
    fn the_header_is_pinned_and_read_back_only_in_its_one_spelling() {
        let h = header();
        let text = String::from_utf8(h.render()).expect("utf-8");
        assert_eq!(
            text,
            format!(
                "nd7-transcript v3\nmachine m1\nsession 732d31\nkey {}\nanchor 12\nfrom 100\nto 130\nafter 11 40\n",
                KeyId::of(&key())
            )
        );
        assert_eq!(PieceHeader::parse(text.as_bytes()), Ok(h.clone()));
        let first = text.replace("after 11 40", "after -");
        assert_eq!(
            PieceHeader::parse(first.as_bytes()).map(|p| p.after),
            Ok(None)
        );
        for bad in [
            text.replace("after 11 40", "after 11"),
            text.replace("after 11 40\n", ""),
            text.replace("from 100", "from 130"),
            text.replace("to 130", &format!("to {}", 100 + MAX_PIECE_BYTES + 1)),
            text.replace("anchor 12", "anchor 012"),
            format!("{text}extra\n"),
            text.replace("session 732d31", "session 2f"),
        ] {
            assert!(PieceHeader::parse(bad.as_bytes()).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_piece_opens_to_its_bytes_and_any_change_is_caught() {
        let bytes = b"{\"type\":\"user\"}\n{\"type\":\"a\"}\n".to_vec();
        let mut h = header();
        h.to = h.from + bytes.len() as u64;
        let body = seal_piece(&h, &bytes, &key(), b"wrapped", [3; 24], &machine());
        let piece = parse_piece(&body).expect("parses");
        assert!(piece.signed_by(&machine().public()));
        assert_eq!(piece.header, h);
        assert_eq!(open_piece(&piece, &key()), Ok(bytes.clone()));
        // Another machine's key, another chain key, a changed byte anywhere.
        let other = SigningKey::from_seed(&Secret32::from_bytes([1; 32]));
        assert!(!piece.signed_by(&other.public()));
        assert!(open_piece(&piece, &Secret32::from_bytes([8; 32])).is_err());
        for at in [7, body.len() / 2, body.len() - 70, body.len() - 1] {
            let mut changed = body.clone();
            changed[at] ^= 1;
            let still = parse_piece(&changed)
                .map(|p| p.signed_by(&machine().public()) && open_piece(&p, &key()).is_ok())
                .unwrap_or(false);
            assert!(!still, "a change at byte {at} went unnoticed");
        }
        // More ciphertext than the bytes it names can need: refused before
        // anything is kept (guards the check in `parse_piece`).
        let mut noise = vec![0u8; 300_000];
        blake3::Hasher::new().finalize_xof().fill(&mut noise);
        let padded = seal_piece(&h, &noise[..4096], &key(), b"wrapped", [3; 24], &machine());
        assert!(matches!(
            parse_piece(&padded),
            Err(Error::PieceOversize { .. })
        ));
        // Incompressible bytes fit the bound.
        let mut n = header();
        n.to = n.from + noise.len() as u64;
        let body = seal_piece(&n, &noise, &key(), b"wrapped", [3; 24], &machine());
        assert_eq!(
            open_piece(&parse_piece(&body).expect("fits"), &key()),
            Ok(noise)
        );
        // The header says how many bytes: a piece claiming more is refused.
        let mut lying = h.clone();
        lying.to += 1;
        let body = seal_piece(&lying, &bytes, &key(), b"wrapped", [3; 24], &machine());
        assert!(open_piece(&parse_piece(&body).expect("parses"), &key()).is_err());
    }

    #[test]
    fn a_piece_receipt_names_the_piece_and_checks_both_signatures() {
        let bytes = b"{}\n".to_vec();
        let mut h = header();
        h.to = h.from + bytes.len() as u64;
        let piece = parse_piece(&seal_piece(&h, &bytes, &key(), b"w", [3; 24], &machine()))
            .expect("parses");
        let vault = SigningKey::from_seed(&Secret32::from_bytes([4; 32]));
        let receipt = PieceReceipt::sign(&vault, 77, &piece);
        let text = receipt.render();
        assert!(text.starts_with(&format!(
            "nd7-piece-receipt v1\nvault {}\nstored 77\nnd7-transcript v3\n",
            vault.public().to_hex()
        )));
        let back = PieceReceipt::parse(&text).expect("round trip");
        assert_eq!(back, receipt);
        assert_eq!(back.verify(&vault.public(), &machine().public()), Ok(()));
        let other = SigningKey::from_seed(&Secret32::from_bytes([5; 32])).public();
        assert!(back.verify(&other, &machine().public()).is_err());
        assert!(back.verify(&vault.public(), &other).is_err());
        let moved = text.replace("from 100", "from 101");
        assert!(
            PieceReceipt::parse(&moved)
                .map(|r| r.verify(&vault.public(), &machine().public()).is_err())
                .unwrap_or(true)
        );
    }
}
