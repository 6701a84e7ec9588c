//! What an admin remembers of the tallies it verified (`nd7 admin sessions
//! --seen FILE`, ADR-0129): each machine, and the time of the latest tally
//! of it that checked. The vault keeps only a later tally over an earlier
//! one, so a machine it no longer lists, or an older tally than one seen
//! before, is the vault's doing, which no single look at the vault shows.

use std::path::Path;

use crate::ship::{self, ShipError};
use crate::vault;

use super::{Fault, Finding, when};

/// The first line of a memory: the organisation it is of, so that one
/// file is not held to two organisations' vaults.
fn head(fingerprint: &str) -> String {
    format!("# nd7 admin sessions: the tallies verified, for the organisation key {fingerprint}")
}

/// (machine, the time of the latest tally of it verified), by machine.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Seen(Vec<(String, u64)>);

impl Seen {
    /// The memory at `path` for the organisation of `fingerprint`; none
    /// yet if there is no file.
    pub(crate) fn read(path: &Path, fingerprint: &str) -> Result<Seen, ShipError> {
        let Some(text) = ship::read_optional(path)? else {
            return Ok(Seen::default());
        };
        let bad = |what: &str| ShipError::BadFile {
            path: path.to_path_buf(),
            what: what.to_string(),
        };
        let mut lines = text.lines();
        if lines.next() != Some(head(fingerprint).as_str()) {
            return Err(bad(
                "not a memory of `nd7 admin sessions --seen` for this organisation key",
            ));
        }
        let mut seen = Vec::new();
        for line in lines {
            let (machine, at) = line
                .split_once(' ')
                .and_then(|(m, at)| Some((m.to_string(), at.parse().ok()?)))
                .ok_or_else(|| bad("a line that is not `<machine> <time>`"))?;
            seen.push((machine, at));
        }
        Ok(Seen(seen))
    }

    /// What the vault now serves against what was verified before: each
    /// machine remembered that it no longer lists (`enrolled`), and each
    /// whose tally it serves is older than the one seen.
    pub(crate) fn held_to(&self, enrolled: &[String], served: &[&vault::Tally]) -> Vec<Finding> {
        let mut findings = Vec::new();
        for (machine, at) in &self.0 {
            let text = if !enrolled.contains(machine) {
                format!(
                    "machine {machine}: this admin verified its tally of {} before, but the vault no longer lists the machine: its enrolment record withheld",
                    when(*at)
                )
            } else if let Some(t) = served.iter().find(|t| t.machine == *machine && t.at < *at) {
                format!(
                    "machine {machine}: the vault serves its tally of {}, but this admin verified its tally of {} before: an older tally served, hiding what the newer one held",
                    when(t.at),
                    when(*at)
                )
            } else {
                continue;
            };
            findings.push(Finding {
                fault: Fault::Vault,
                text,
            });
        }
        findings
    }

    /// Remembers each of `verified`, keeping the later time of a machine
    /// seen before.
    pub(crate) fn remember(&mut self, verified: &[&vault::Tally]) {
        for tally in verified {
            match self.0.iter_mut().find(|(m, _)| *m == tally.machine) {
                Some((_, at)) => *at = (*at).max(tally.at),
                None => self.0.push((tally.machine.clone(), tally.at)),
            }
        }
        self.0.sort();
    }

    /// Writes the memory to `path`, whole (0600, synced), making its
    /// directory (0700) if it is not there yet.
    pub(crate) fn write(&self, path: &Path, fingerprint: &str) -> Result<(), ShipError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|source| ShipError::Io {
                    path: dir.to_path_buf(),
                    action: "create",
                    source,
                })?;
        }
        let mut text = format!("{}\n", head(fingerprint));
        for (machine, at) in &self.0 {
            text.push_str(&format!("{machine} {at}\n"));
        }
        ship::write_0600(path, text.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vault::{Secret32, SigningKey};

    fn tally(machine: &str, at: u64) -> vault::Tally {
        let key = SigningKey::from_seed(&Secret32::from_bytes([5; 32]));
        vault::Tally::sign(&key, machine, at, Vec::new())
    }

    /// The memory keeps each machine's latest time across runs, holds the
    /// vault to it, and is one organisation's.
    #[test]
    fn the_memory_keeps_the_latest_and_is_one_organisations() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("admin/seen");
        let fp = "ab".repeat(32);
        let mut seen = Seen::read(&path, &fp).expect("none yet");
        assert_eq!(seen, Seen::default());
        let (a9, b5) = (tally("a", 9), tally("b", 5));
        seen.remember(&[&a9, &b5]);
        seen.remember(&[&tally("a", 7)]);
        seen.write(&path, &fp).expect("write");
        let read = Seen::read(&path, &fp).expect("read");
        assert_eq!(read, Seen(vec![("a".into(), 9), ("b".into(), 5)]));
        let enrolled = ["a".to_string(), "b".to_string()];
        assert!(read.held_to(&enrolled, &[&a9, &b5]).is_empty());
        let older = tally("a", 8);
        let found = read.held_to(&enrolled[..1], &[&older]);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found.iter().all(|f| f.fault == Fault::Vault));
        assert!(Seen::read(&path, &"cd".repeat(32)).is_err());
    }
}
