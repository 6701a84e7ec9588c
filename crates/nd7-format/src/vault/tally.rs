//! A machine's tally: its own signed list of the sessions the vault
//! acknowledged, each with the last entry acknowledged (ADR-0120). The
//! vault keeps each machine's latest and serves them to admins, who hold
//! the vault's list of sessions to them: the vault's key cannot sign for a
//! machine, so a list missing a session a machine tallied, or showing one
//! no machine tallied, is caught.

use super::*;

const TALLY_MAGIC: &str = "nd7-tally v1";

/// ```text
/// nd7-tally v1
/// machine <id>
/// at <Unix s: when the machine signed it>
/// sessions <n>
/// <hex of the session id's bytes> <last seq the vault acknowledged>   (n lines, by session)
/// signature <128 hex: the machine's, over every byte above this line>
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tally {
    pub machine: String,
    pub at: u64,
    /// (session, last seq acknowledged), sorted by session, each once.
    pub sessions: Vec<(String, u64)>,
    pub signature: [u8; 64],
}

impl Tally {
    fn signed_part(machine: &str, at: u64, sessions: &[(String, u64)]) -> String {
        let mut text = format!(
            "{TALLY_MAGIC}\nmachine {machine}\nat {at}\nsessions {}\n",
            sessions.len()
        );
        for (session, last) in sessions {
            text.push_str(&format!("{} {last}\n", hex(session.as_bytes())));
        }
        text
    }

    /// The machine `machine`'s tally of `sessions` at `at`, signed by `key`.
    pub fn sign(
        key: &SigningKey,
        machine: &str,
        at: u64,
        mut sessions: Vec<(String, u64)>,
    ) -> Tally {
        sessions.sort();
        sessions.dedup_by(|a, b| a.0 == b.0);
        let signature = key.sign(Tally::signed_part(machine, at, &sessions).as_bytes());
        Tally {
            machine: machine.to_string(),
            at,
            sessions,
            signature,
        }
    }

    pub fn render(&self) -> String {
        format!(
            "{}signature {}\n",
            Tally::signed_part(&self.machine, self.at, &self.sessions),
            hex(&self.signature)
        )
    }

    /// One tally; `rest` is what follows it (tallies are served one after
    /// another).
    pub fn parse_one(text: &str) -> Result<(Tally, &str), Error> {
        let bad = || malformed("a machine's tally", "an nd7-tally v1");
        let mut lines = text.split_inclusive('\n');
        let mut next = || lines.next().map(|l| l.trim_end_matches('\n'));
        if next() != Some(TALLY_MAGIC) {
            return Err(bad());
        }
        let machine = field(next(), "machine").ok_or_else(bad)?.to_string();
        let at = field(next(), "at")
            .and_then(|s| s.parse().ok())
            .ok_or_else(bad)?;
        let n: usize = field(next(), "sessions")
            .and_then(|s| s.parse().ok())
            .ok_or_else(bad)?;
        let mut sessions = Vec::new();
        for _ in 0..n {
            let (session, last) = next().and_then(|l| l.split_once(' ')).ok_or_else(bad)?;
            let session = unhex_vec(session)
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or_else(bad)?;
            sessions.push((session, last.parse().map_err(|_| bad())?));
        }
        let signature = field(next(), "signature")
            .and_then(sig_hex)
            .ok_or_else(bad)?;
        let used: usize = text.split_inclusive('\n').take(n + 5).map(str::len).sum();
        let tally = Tally {
            machine,
            at,
            sessions,
            signature,
        };
        // Only the form `sign` makes: sorted, each session once.
        if tally.sessions.windows(2).any(|w| w[0].0 >= w[1].0) {
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
    pub fn verify(&self, key: &PublicKey) -> Result<(), Error> {
        let signed = Tally::signed_part(&self.machine, self.at, &self.sessions);
        if !key.verify(signed.as_bytes(), &self.signature) {
            return Err(Error::BadTallySignature(self.machine.clone()));
        }
        Ok(())
    }
}
