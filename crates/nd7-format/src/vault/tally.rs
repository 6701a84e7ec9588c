//! A machine's tally: its own signed list of the sessions the vault
//! acknowledged, each with the vault's receipt for the last batch it
//! acknowledged (ADR-0120, ADR-0129), numbered by the machine (ADR-0132).
//! The vault keeps each machine's latest and serves them to admins, who
//! hold the vault's list of sessions to them. The machine's signature
//! means the vault cannot forge or edit a tally; the receipts mean a
//! machine cannot claim more than the vault acknowledged: an admin blames
//! the vault only for what its own key signed.

use super::*;

const TALLY_MAGIC: &str = "nd7-tally v3";
/// Before tallies were numbered: still read (a machine not yet upgraded
/// keeps sending it), as number 0.
const TALLY_MAGIC_V2: &str = "nd7-tally v2";

/// ```text
/// nd7-tally v3
/// machine <id>
/// at <Unix s: when the machine signed it>
/// number <n ≥ 1: one more than the machine's tally before it>
/// sessions <n>
/// <receipt line>   (n lines, by session, each once)
/// signature <128 hex: the machine's, over every byte above this line>
/// ```
///
/// A receipt line is the vault's receipt for the session's last batch
/// acknowledged, every field of it but the machine (the tally's) on one
/// line, so that it is rebuilt whole and checked as the vault signed it:
///
/// ```text
/// <session hex> <last> <first> <chain key id> <head> <batch> <checkpoint signature> <vault key> <stored> <vault signature>
/// ```
///
/// A tally v2 is the same without its `number` line; it reads as number 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tally {
    pub machine: String,
    pub at: u64,
    /// The machine's count of the tallies it signed, this one included:
    /// two of one second are told apart by it. 0 for a tally v2.
    pub number: u64,
    /// The receipt for each session's last batch acknowledged, sorted by
    /// session, each session once; each checkpoint names `machine`.
    pub sessions: Vec<Receipt>,
    pub signature: [u8; 64],
}

/// A receipt as a tally's line (see [`Tally`]).
fn receipt_line(r: &Receipt) -> String {
    let c = &r.checkpoint;
    format!(
        "{} {} {} {} {} {} {} {} {} {}\n",
        hex(c.session.as_bytes()),
        c.last,
        c.first,
        c.key,
        c.head,
        hex(&c.batch),
        hex(&r.checkpoint_signature),
        r.vault.to_hex(),
        r.stored,
        hex(&r.signature)
    )
}

/// A tally's receipt line read back, for a batch of `machine`'s.
fn parse_receipt_line(machine: &str, line: &str) -> Option<Receipt> {
    let mut f = line.split(' ');
    let session = String::from_utf8(unhex_vec(f.next()?)?).ok()?;
    let last = f.next()?.parse().ok()?;
    let checkpoint = Checkpoint {
        machine: machine.to_string(),
        session,
        first: f.next()?.parse().ok()?,
        last,
        key: KeyId::from_hex(f.next()?)?,
        head: Digest::from_hex(f.next()?)?,
        batch: unhex::<32>(f.next()?)?,
    };
    let receipt = Receipt {
        checkpoint_signature: sig_hex(f.next()?)?,
        vault: PublicKey::from_hex(f.next()?)?,
        stored: f.next()?.parse().ok()?,
        signature: sig_hex(f.next()?)?,
        checkpoint,
    };
    // Only the form `receipt_line` writes (no other spelling of a number).
    (f.next().is_none() && receipt_line(&receipt) == format!("{line}\n")).then_some(receipt)
}

impl Tally {
    /// The signed part: v3, or v2 for number 0 (a tally read back from a
    /// machine before numbering, which signed it so).
    fn signed_part(machine: &str, at: u64, number: u64, sessions: &[Receipt]) -> String {
        let mut text = if number == 0 {
            format!("{TALLY_MAGIC_V2}\nmachine {machine}\nat {at}\n")
        } else {
            format!("{TALLY_MAGIC}\nmachine {machine}\nat {at}\nnumber {number}\n")
        };
        text.push_str(&format!("sessions {}\n", sessions.len()));
        for receipt in sessions {
            text.push_str(&receipt_line(receipt));
        }
        text
    }

    /// The machine `machine`'s tally number `number` (≥ 1; 0 signs a tally
    /// v2) at `at` of `receipts` (the one it keeps for each session),
    /// signed by `key`.
    pub fn sign(
        key: &SigningKey,
        machine: &str,
        at: u64,
        number: u64,
        mut receipts: Vec<Receipt>,
    ) -> Tally {
        receipts.sort_by(|a, b| a.checkpoint.session.cmp(&b.checkpoint.session));
        receipts.dedup_by(|a, b| a.checkpoint.session == b.checkpoint.session);
        let signature = key.sign(Tally::signed_part(machine, at, number, &receipts).as_bytes());
        Tally {
            machine: machine.to_string(),
            at,
            number,
            sessions: receipts,
            signature,
        }
    }

    pub fn render(&self) -> String {
        format!(
            "{}signature {}\n",
            Tally::signed_part(&self.machine, self.at, self.number, &self.sessions),
            hex(&self.signature)
        )
    }

    /// Which of two tallies of one machine the machine signed later: the
    /// later time, and of one second the higher number.
    pub fn order(&self) -> (u64, u64) {
        (self.at, self.number)
    }

    /// One tally, v3 or v2; `rest` is what follows it (tallies are served
    /// one after another).
    pub fn parse_one(text: &str) -> Result<(Tally, &str), Error> {
        let bad = || malformed("a machine's tally", "an nd7-tally v3 (or v2)");
        let mut lines = text.split_inclusive('\n');
        let mut next = || lines.next().map(|l| l.trim_end_matches('\n'));
        let numbered = match next() {
            Some(TALLY_MAGIC) => true,
            Some(TALLY_MAGIC_V2) => false,
            _ => return Err(bad()),
        };
        let machine = field(next(), "machine").ok_or_else(bad)?.to_string();
        let at = field(next(), "at")
            .and_then(|s| s.parse().ok())
            .ok_or_else(bad)?;
        let number = if numbered {
            field(next(), "number")
                .and_then(|s| s.parse().ok())
                .filter(|&n| n >= 1)
                .ok_or_else(bad)?
        } else {
            0
        };
        let n: usize = field(next(), "sessions")
            .and_then(|s| s.parse().ok())
            .ok_or_else(bad)?;
        let mut sessions = Vec::new();
        for _ in 0..n {
            let line = next().ok_or_else(bad)?;
            sessions.push(parse_receipt_line(&machine, line).ok_or_else(bad)?);
        }
        let signature = field(next(), "signature")
            .and_then(sig_hex)
            .ok_or_else(bad)?;
        let head = if numbered { 6 } else { 5 };
        let used: usize = text
            .split_inclusive('\n')
            .take(n + head)
            .map(str::len)
            .sum();
        let tally = Tally {
            machine,
            at,
            number,
            sessions,
            signature,
        };
        // Only the form `sign` makes: sorted, each session once.
        if tally
            .sessions
            .windows(2)
            .any(|w| w[0].checkpoint.session >= w[1].checkpoint.session)
        {
            return Err(bad());
        }
        Ok((tally, &text[used..]))
    }

    /// Every tally of `text`, one after another.
    pub fn parse_all(mut text: &str) -> Result<Vec<Tally>, Error> {
        let mut out = Vec::new();
        while !text.is_empty() {
            let (tally, rest) = Tally::parse_one(text)?;
            out.push(tally);
            text = rest;
        }
        Ok(out)
    }

    /// Whether `key` (the machine's, from its enrolment record) signed it.
    /// The receipts in it are the vault's word, checked apart
    /// ([`Receipt::verify`]): a machine can put anything there.
    pub fn verify(&self, key: &PublicKey) -> Result<(), Error> {
        let signed = Tally::signed_part(&self.machine, self.at, self.number, &self.sessions);
        if !key.verify(signed.as_bytes(), &self.signature) {
            return Err(Error::BadTallySignature(self.machine.clone()));
        }
        Ok(())
    }
}
