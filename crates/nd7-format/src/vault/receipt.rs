//! What the machine signs about a batch (its checkpoint), what the vault
//! signs about storing it (a receipt), and what the vault signs when it was
//! restored from a backup (a restore notice).

use super::*;

/// The longest a restore notice may declare between the backup and the
/// restore (30 days): older backups leave machines alarmed, for an admin to
/// deal with by hand.
pub const MAX_RESTORE_WINDOW_SECS: u64 = 30 * 86_400;

/// What the machine signs for each batch. Not sent as text: both sides
/// render it from the batch.
///
/// ```text
/// nd7-checkpoint v2
/// machine <id>
/// session <hex>
/// key <32 hex: chain key id>
/// first <seq>
/// last <seq>
/// head <64 hex: digest of the last entry>
/// batch <64 hex: BLAKE3 of the batch's bytes before the signature>
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    pub machine: String,
    pub session: String,
    pub key: KeyId,
    pub first: u64,
    pub last: u64,
    pub head: Digest,
    pub batch: [u8; 32],
}

impl Checkpoint {
    pub fn of(header: &BatchHeader, batch: [u8; 32]) -> Checkpoint {
        let last = header.last();
        Checkpoint {
            machine: header.machine.clone(),
            session: header.session.clone(),
            key: header.key,
            first: header.first,
            last: last.seq,
            head: last.digest,
            batch,
        }
    }

    pub fn render(&self) -> String {
        format!(
            "{CHECKPOINT_MAGIC}\nmachine {}\nsession {}\nkey {}\nfirst {}\nlast {}\nhead {}\nbatch {}\n",
            self.machine,
            hex(self.session.as_bytes()),
            self.key,
            self.first,
            self.last,
            self.head,
            hex(&self.batch)
        )
    }

    /// Reads the checkpoint's 8 lines from `lines`.
    fn parse_lines<'a>(lines: &mut impl Iterator<Item = &'a str>) -> Option<Checkpoint> {
        if lines.next() != Some(CHECKPOINT_MAGIC) {
            return None;
        }
        let machine = field(lines.next(), "machine")?.to_string();
        let session = String::from_utf8(unhex_vec(field(lines.next(), "session")?)?).ok()?;
        Some(Checkpoint {
            machine,
            session,
            key: KeyId::from_hex(field(lines.next(), "key")?)?,
            first: field(lines.next(), "first")?.parse().ok()?,
            last: field(lines.next(), "last")?.parse().ok()?,
            head: Digest::from_hex(field(lines.next(), "head")?)?,
            batch: unhex::<32>(field(lines.next(), "batch")?)?,
        })
    }

    /// Reads a checkpoint's text, as [`Checkpoint::render`] writes it.
    pub fn parse(text: &str) -> Result<Checkpoint, Error> {
        let bad = || malformed("the checkpoint", "an nd7-checkpoint v2");
        let mut lines = text.lines();
        let checkpoint = Checkpoint::parse_lines(&mut lines).ok_or_else(bad)?;
        if lines.next().is_some() || checkpoint.render() != text {
            return Err(bad());
        }
        Ok(checkpoint)
    }

    pub fn verify(&self, machine: &PublicKey, signature: &[u8; 64]) -> bool {
        machine.verify(self.render().as_bytes(), signature)
    }

    /// The same entries: session, chain key, last seq and head digest. Two
    /// batches of the same entries sent twice differ only in their bytes.
    pub fn same_head(&self, other: &Checkpoint) -> bool {
        (&self.machine, &self.session, self.key, self.last, self.head)
            == (
                &other.machine,
                &other.session,
                other.key,
                other.last,
                other.head,
            )
    }

    /// "machine M, session S, entries a..b", as findings name a batch.
    pub fn names(&self) -> String {
        format!(
            "machine {}, session {}, entries {}..{}",
            self.machine, self.session, self.first, self.last
        )
    }
}

/// The vault's countersignature over a stored batch's checkpoint.
///
/// ```text
/// nd7-receipt v2
/// vault <64 hex: the vault's public key>
/// stored <Unix s: when the vault stored the batch>
/// <the checkpoint's 8 lines>
/// checkpoint-signature <128 hex: the machine's>
/// signature <128 hex: the vault's, over every byte above this line>
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Receipt {
    pub vault: PublicKey,
    pub stored: u64,
    pub checkpoint: Checkpoint,
    pub checkpoint_signature: [u8; 64],
    pub signature: [u8; 64],
}

impl Receipt {
    fn signed_part(
        vault: &PublicKey,
        stored: u64,
        checkpoint: &Checkpoint,
        checkpoint_signature: &[u8; 64],
    ) -> String {
        format!(
            "{RECEIPT_MAGIC}\nvault {}\nstored {stored}\n{}checkpoint-signature {}\n",
            vault.to_hex(),
            checkpoint.render(),
            hex(checkpoint_signature)
        )
    }

    pub fn sign(
        vault: &SigningKey,
        stored: u64,
        checkpoint: &Checkpoint,
        checkpoint_signature: &[u8; 64],
    ) -> Receipt {
        let public = vault.public();
        let signed = Receipt::signed_part(&public, stored, checkpoint, checkpoint_signature);
        Receipt {
            vault: public,
            stored,
            checkpoint: checkpoint.clone(),
            checkpoint_signature: *checkpoint_signature,
            signature: vault.sign(signed.as_bytes()),
        }
    }

    pub fn render(&self) -> String {
        let mut text = Receipt::signed_part(
            &self.vault,
            self.stored,
            &self.checkpoint,
            &self.checkpoint_signature,
        );
        text.push_str(&format!("signature {}\n", hex(&self.signature)));
        text
    }

    /// Reads a receipt's text (no signature is checked here).
    pub fn parse(text: &str) -> Result<Receipt, Error> {
        let bad = || malformed("the receipt", "an nd7-receipt v2");
        let (signed, signature) = split_signed(text, "signature").ok_or_else(bad)?;
        let mut lines = signed.lines();
        if lines.next() != Some(RECEIPT_MAGIC) {
            return Err(bad());
        }
        let vault = field(lines.next(), "vault")
            .and_then(PublicKey::from_hex)
            .ok_or_else(bad)?;
        let stored = field(lines.next(), "stored")
            .and_then(|s| s.parse().ok())
            .ok_or_else(bad)?;
        let checkpoint = Checkpoint::parse_lines(&mut lines).ok_or_else(bad)?;
        let checkpoint_signature = field(lines.next(), "checkpoint-signature")
            .and_then(sig_hex)
            .ok_or_else(bad)?;
        let receipt = Receipt {
            vault,
            stored,
            checkpoint,
            checkpoint_signature,
            signature,
        };
        if lines.next().is_some() || receipt.render() != text {
            return Err(bad());
        }
        Ok(receipt)
    }

    /// Checks both signatures: `vault`'s over the receipt, `machine`'s over
    /// the checkpoint.
    pub fn verify(&self, vault: &PublicKey, machine: &PublicKey) -> Result<(), Error> {
        let signed = Receipt::signed_part(
            &self.vault,
            self.stored,
            &self.checkpoint,
            &self.checkpoint_signature,
        );
        if self.vault != *vault || !vault.verify(signed.as_bytes(), &self.signature) {
            return Err(Error::BadReceiptSignature(vault.to_hex()));
        }
        if !self.checkpoint.verify(machine, &self.checkpoint_signature) {
            return Err(Error::BadCheckpointSignature);
        }
        Ok(())
    }
}

/// The vault's signed statement that it was restored, at `restored`, from a
/// backup taken at `backup`: receipts stored in between may be lost.
///
/// ```text
/// nd7-restore v2
/// vault <64 hex>
/// backup <Unix s>
/// restored <Unix s>
/// signature <128 hex: the vault's, over every byte above this line>
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestoreNotice {
    pub vault: PublicKey,
    pub backup: u64,
    pub restored: u64,
    pub signature: [u8; 64],
}

impl RestoreNotice {
    fn signed_part(vault: &PublicKey, backup: u64, restored: u64) -> String {
        format!(
            "{RESTORE_MAGIC}\nvault {}\nbackup {backup}\nrestored {restored}\n",
            vault.to_hex()
        )
    }

    pub fn sign(vault: &SigningKey, backup: u64, restored: u64) -> RestoreNotice {
        let public = vault.public();
        let signature =
            vault.sign(RestoreNotice::signed_part(&public, backup, restored).as_bytes());
        RestoreNotice {
            vault: public,
            backup,
            restored,
            signature,
        }
    }

    pub fn render(&self) -> String {
        format!(
            "{}signature {}\n",
            RestoreNotice::signed_part(&self.vault, self.backup, self.restored),
            hex(&self.signature)
        )
    }

    /// Reads notices one after another, as `GET /v1/restores` serves them.
    pub fn parse_all(text: &str) -> Result<Vec<RestoreNotice>, Error> {
        let bad = || malformed("the restore notices", "nd7-restore v2 notices");
        let lines: Vec<&str> = text.lines().collect();
        if !lines.len().is_multiple_of(5) {
            return Err(bad());
        }
        lines
            .chunks(5)
            .map(|c| {
                let mut it = c.iter().copied();
                if it.next() != Some(RESTORE_MAGIC) {
                    return Err(bad());
                }
                let notice = RestoreNotice {
                    vault: field(it.next(), "vault")
                        .and_then(PublicKey::from_hex)
                        .ok_or_else(bad)?,
                    backup: field(it.next(), "backup")
                        .and_then(|s| s.parse().ok())
                        .ok_or_else(bad)?,
                    restored: field(it.next(), "restored")
                        .and_then(|s| s.parse().ok())
                        .ok_or_else(bad)?,
                    signature: field(it.next(), "signature")
                        .and_then(sig_hex)
                        .ok_or_else(bad)?,
                };
                Ok(notice)
            })
            .collect()
    }

    pub fn verify(&self, vault: &PublicKey) -> Result<(), Error> {
        let signed = RestoreNotice::signed_part(&self.vault, self.backup, self.restored);
        if self.vault != *vault || !vault.verify(signed.as_bytes(), &self.signature) {
            return Err(Error::BadNoticeSignature(vault.to_hex()));
        }
        Ok(())
    }

    /// Whether a machine can take this notice at all, at `now` (its clock):
    /// the backup no later than the restore, the restore in the past (within
    /// the clock skew requests are allowed), and no more than
    /// [`MAX_RESTORE_WINDOW_SECS`] between them. A vault that drops a tail
    /// and signs `backup 0` or a restore far in the future would otherwise
    /// excuse any loss, past and to come.
    pub fn credible(&self, now: u64) -> Result<(), String> {
        if self.backup > self.restored {
            return Err(format!(
                "its backup ({}) is dated after its restore ({})",
                self.backup, self.restored
            ));
        }
        if self.restored > now.saturating_add(MAX_CLOCK_SKEW_SECS) {
            return Err(format!(
                "its restore is dated {} s ahead of this machine's clock",
                self.restored - now
            ));
        }
        let window = self.restored - self.backup;
        if window > MAX_RESTORE_WINDOW_SECS {
            return Err(format!(
                "it declares {} day(s) between backup and restore, more than the {} a restore may excuse",
                window / 86_400,
                MAX_RESTORE_WINDOW_SECS / 86_400
            ));
        }
        Ok(())
    }

    /// Whether a batch the vault still holds, stored at `stored`, gives this
    /// notice the lie: a restore from a backup taken at `backup` keeps
    /// nothing stored after it and before the restore (the seconds at either
    /// end may fall on either side).
    pub fn contradicted_by(&self, stored: u64) -> bool {
        self.backup < stored && stored < self.restored
    }

    /// Whether this restore explains losing what `receipt` acknowledged:
    /// stored no earlier than the second the backup was taken (times are in
    /// whole seconds, so that second may be either side), and before the
    /// restore.
    pub fn explains(&self, receipt: &Receipt) -> bool {
        self.backup <= receipt.stored && receipt.stored <= self.restored
    }
}
