//! What an admin remembers of the vault it verified (`nd7 admin sessions
//! --seen FILE`, ADR-0129, ADR-0132): the vault keys the organisation's
//! documents named to it, each with the highest version that named it, and
//! each machine with the latest of its tallies that checked (time, number
//! and digest). The vault keeps only a later tally over an earlier one and
//! serves the organisation's latest document, so a machine it no longer
//! lists, an older tally or document than one seen before, or another
//! tally in the place of one seen, is the vault's doing, which no single
//! look at the vault shows.

use std::path::{Path, PathBuf};

use crate::ship::{self, ShipError};
use crate::vault::{self, PublicKey, Recipients};

use super::{Fault, Finding, when};

/// The first line of a memory: the organisation it is of, so that one
/// file is not held to two organisations' vaults.
fn head(fingerprint: &str) -> String {
    format!("# nd7 admin sessions: the tallies verified, for the organisation key {fingerprint}")
}

/// A machine's latest tally verified.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Remembered {
    machine: String,
    at: u64,
    /// 0 for a tally v2, and in a memory written before ADR-0132.
    number: u64,
    /// BLAKE3 of the tally as rendered; none in a memory written before
    /// ADR-0132.
    digest: Option<String>,
}

impl Remembered {
    fn of(tally: &vault::Tally) -> Remembered {
        Remembered {
            machine: tally.machine.clone(),
            at: tally.at,
            number: tally.number,
            digest: Some(digest(tally)),
        }
    }

    /// A machine's line: `<machine> <time> <number> <digest>`, or
    /// `<machine> <time>` as written before ADR-0132.
    fn parse(line: &str) -> Option<Remembered> {
        let fields: Vec<&str> = line.split(' ').collect();
        let (machine, at, number, digest) = match fields.as_slice() {
            [machine, at] => (machine, at, "0", None),
            [machine, at, number, digest] => (machine, at, *number, Some(*digest)),
            _ => return None,
        };
        let digest = match digest {
            None | Some("-") => None,
            Some(d)
                if d.len() == 64 && d.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) =>
            {
                Some(d.to_string())
            }
            Some(_) => return None,
        };
        Some(Remembered {
            machine: machine.to_string(),
            at: at.parse().ok()?,
            number: number.parse().ok()?,
            digest,
        })
    }

    fn order(&self) -> (u64, u64) {
        (self.at, self.number)
    }
}

/// The digest a memory keeps of a tally.
fn digest(tally: &vault::Tally) -> String {
    blake3::hash(tally.render().as_bytes()).to_hex().to_string()
}

/// What this admin verified of one vault.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Seen {
    /// (vault key, the highest document version verified that named it),
    /// by version: the last is the newest document verified.
    vaults: Vec<(PublicKey, u64)>,
    /// By machine.
    tallies: Vec<Remembered>,
}

/// The text of the regular file at `path`, none if there is none. Opened
/// without waiting (`O_NONBLOCK`), so a FIFO someone put at the memory's
/// name is refused rather than read for ever.
fn read_regular(path: &Path) -> Result<Option<String>, ShipError> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let io = |action: &'static str, source: std::io::Error| ShipError::Io {
        path: path.to_path_buf(),
        action,
        source,
    };
    let mut file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io("read", e)),
    };
    if !file.metadata().map_err(|e| io("read", e))?.is_file() {
        return Err(ShipError::BadFile {
            path: path.to_path_buf(),
            what: "not a regular file".into(),
        });
    }
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(|e| io("read", e))?;
    Ok(Some(text))
}

impl Seen {
    /// The memory at `path` for the organisation of `fingerprint`; none
    /// yet if there is no file.
    pub(crate) fn read(path: &Path, fingerprint: &str) -> Result<Seen, ShipError> {
        let Some(text) = read_regular(&linked_target(path)?)? else {
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
        let mut seen = Seen::default();
        for line in lines {
            if let Some(vault) = line.strip_prefix("vault ") {
                let (key, version) = vault
                    .split_once(' ')
                    .and_then(|(k, v)| Some((PublicKey::from_hex(k)?, v.parse().ok()?)))
                    .ok_or_else(|| bad("a line that is not `vault <key> <version>`"))?;
                seen.vaults.push((key, version));
            } else {
                seen.tallies.push(Remembered::parse(line).ok_or_else(|| {
                    bad("a line that is not `<machine> <time> <number> <digest>`")
                })?);
            }
        }
        seen.vaults.sort_by_key(|(_, version)| *version);
        Ok(seen)
    }

    /// The organisation's document the vault serves, held to the newest one
    /// this memory verified: a finding when it is older (rolled back, and
    /// with it the vault key it names). `Err` (what to say) when the memory
    /// is another vault's: the document names a vault key it never took,
    /// and the vault enrols (`enrolled`) none of its machines.
    pub(crate) fn held_to_document(
        &self,
        doc: &Recipients,
        enrolled: &[String],
    ) -> Result<Option<Finding>, String> {
        let Some((top_key, top)) = self.vaults.last() else {
            return Ok(None);
        };
        let ours = self.vaults.iter().any(|(k, _)| *k == doc.vault)
            || self.tallies.is_empty()
            || self.tallies.iter().any(|t| enrolled.contains(&t.machine));
        if !ours {
            let machines: Vec<&str> = self.tallies.iter().map(|t| t.machine.as_str()).collect();
            return Err(format!(
                "the memory of another vault: it holds vault key {} (the organisation's document of version {top}) and machines this vault enrols none of, while this vault's document (version {}) names vault key {}; keep one memory per vault. Or, if this is the vault the memory was kept of under a new key, it withholds every machine the memory holds ({}): the vault's doing; ask whoever moved it",
                top_key.to_hex(),
                doc.version,
                doc.vault.to_hex(),
                machines.join(", ")
            ));
        }
        let older = doc.version < *top || (doc.version == *top && doc.vault != *top_key);
        Ok(older.then(|| Finding {
            fault: Fault::Vault,
            text: format!(
                "the vault serves the organisation's document of version {} (vault key {}), but this admin verified its document of version {top} (vault key {}) before: an older document served, and with it the vault key it names, so that receipts of the newer key go unchecked",
                doc.version,
                doc.vault.to_hex(),
                top_key.to_hex()
            ),
        }))
    }

    /// What the vault now serves against what was verified before: each
    /// machine remembered that it no longer lists (`enrolled`), and each
    /// whose tally it serves is older than the one seen, or another of the
    /// same time and number.
    pub(crate) fn held_to(&self, enrolled: &[String], served: &[&vault::Tally]) -> Vec<Finding> {
        self.tallies
            .iter()
            .filter_map(|r| held_to_one(r, enrolled, served))
            .map(|text| Finding {
                fault: Fault::Vault,
                text,
            })
            .collect()
    }

    /// Remembers `doc` as the newest document verified.
    pub(crate) fn remember_document(&mut self, doc: &Recipients) {
        match self.vaults.iter_mut().find(|(k, _)| *k == doc.vault) {
            Some((_, version)) => *version = (*version).max(doc.version),
            None => self.vaults.push((doc.vault, doc.version)),
        }
        self.vaults.sort_by_key(|(_, version)| *version);
    }

    /// Remembers each of `verified`, keeping the later tally of a machine
    /// seen before.
    pub(crate) fn remember(&mut self, verified: &[&vault::Tally]) {
        for tally in verified {
            match self.tallies.iter_mut().find(|r| r.machine == tally.machine) {
                Some(r) if tally.order() > r.order() => *r = Remembered::of(tally),
                Some(_) => {}
                None => self.tallies.push(Remembered::of(tally)),
            }
        }
        self.tallies.sort_by(|a, b| a.machine.cmp(&b.machine));
    }

    /// Writes the memory to `path`, whole (0600, synced), making its
    /// directory (0700) if it is not there yet. A link is followed: the
    /// memory is written to its target (a temporary beside the target,
    /// renamed over it), and the link kept.
    pub(crate) fn write(&self, path: &Path, fingerprint: &str) -> Result<(), ShipError> {
        let path = linked_target(path)?;
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
        for (key, version) in &self.vaults {
            text.push_str(&format!("vault {} {version}\n", key.to_hex()));
        }
        for r in &self.tallies {
            let digest = r.digest.as_deref().unwrap_or("-");
            text.push_str(&format!("{} {} {} {digest}\n", r.machine, r.at, r.number));
        }
        ship::write_0600(&path, text.as_bytes())
    }
}

/// A finding's text when the vault no longer holds to `r`: the machine not
/// listed, or its tally served older than `r`, or another of the same time
/// and number (a machine signs each number once; a tally v2 has none, so
/// two of one second cannot be told apart).
fn held_to_one(r: &Remembered, enrolled: &[String], served: &[&vault::Tally]) -> Option<String> {
    let machine = &r.machine;
    if !enrolled.contains(machine) {
        return Some(format!(
            "machine {machine}: this admin verified its tally of {} before, but the vault no longer lists the machine: its enrolment record withheld",
            when(r.at)
        ));
    }
    let t = served.iter().find(|t| t.machine == *machine)?;
    if t.order() < r.order() {
        Some(format!(
            "machine {machine}: the vault serves its tally of {} (number {}), but this admin verified its tally of {} (number {}) before: an older tally served, hiding what the newer one held",
            when(t.at),
            t.number,
            when(r.at),
            r.number
        ))
    } else if t.order() == r.order()
        && r.number > 0
        && r.digest.as_ref().is_some_and(|d| *d != digest(t))
    {
        Some(format!(
            "machine {machine}: the vault serves its tally of {} number {}, but this admin verified another tally of that time and number before: the machine signs each number once, so this one stands in for the one seen",
            when(t.at),
            t.number
        ))
    } else {
        None
    }
}

/// Refuses the link at `path` (of metadata `link`) when another user put
/// it in a directory others can write (a sticky /tmp): it would name where
/// this admin's memory is read and written, a file of that user's
/// choosing. Linux's fs.protected_symlinks refuses the same when the
/// kernel follows a link; `read_link` bypasses it, and macOS has none.
fn followable(path: &Path, link: &std::fs::Metadata) -> Result<(), ShipError> {
    use std::os::unix::fs::MetadataExt;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let dir_meta = std::fs::metadata(dir).map_err(|source| ShipError::Io {
        path: dir.to_path_buf(),
        action: "read the metadata of",
        source,
    })?;
    let others_write = dir_meta.mode() & 0o002 != 0;
    let uid = rustix::process::geteuid().as_raw();
    if others_write && link.uid() != uid && link.uid() != dir_meta.uid() {
        return Err(ShipError::Io {
            path: path.to_path_buf(),
            action: "follow the link",
            source: std::io::Error::other(format!(
                "another user's link (uid {}) in {}, a directory others can write: not followed; name the memory's own path",
                link.uid(),
                dir.display()
            )),
        });
    }
    Ok(())
}

/// How many links `linked_target` follows before it gives up.
const MAX_LINKS: usize = 40;

/// `path`, or the file its link names, through every link (one whose
/// target is not there yet included; a relative one from the link's
/// directory).
fn linked_target(path: &Path) -> Result<PathBuf, ShipError> {
    let mut path = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_symlink() => {
                followable(&path, &m)?;
                let to = std::fs::read_link(&path).map_err(|source| ShipError::Io {
                    path: path.clone(),
                    action: "read the link",
                    source,
                })?;
                path = path.parent().map_or(to.clone(), |dir| dir.join(&to));
            }
            _ => return Ok(path),
        }
    }
    Err(ShipError::Io {
        path,
        action: "follow the links to",
        source: std::io::Error::other(format!("more than {MAX_LINKS} links")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vault::{Secret32, SigningKey};

    fn tally(machine: &str, at: u64, number: u64) -> vault::Tally {
        let key = SigningKey::from_seed(&Secret32::from_bytes([5; 32]));
        vault::Tally::sign(&key, machine, at, number, Vec::new())
    }

    fn remembered(machine: &str, t: &vault::Tally) -> Remembered {
        Remembered {
            machine: machine.into(),
            ..Remembered::of(t)
        }
    }

    /// The memory keeps each machine's latest tally across runs, holds the
    /// vault to it, and is one organisation's.
    #[test]
    fn the_memory_keeps_the_latest_and_is_one_organisations() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("admin/seen");
        let fp = "ab".repeat(32);
        let mut seen = Seen::read(&path, &fp).expect("none yet");
        assert_eq!(seen, Seen::default());
        let (a9, b5) = (tally("a", 9, 3), tally("b", 5, 1));
        seen.remember(&[&a9, &b5]);
        seen.remember(&[&tally("a", 7, 4), &tally("b", 5, 0)]);
        seen.write(&path, &fp).expect("write");
        let read = Seen::read(&path, &fp).expect("read");
        assert_eq!(
            read.tallies,
            vec![remembered("a", &a9), remembered("b", &b5)]
        );
        let enrolled = ["a".to_string(), "b".to_string()];
        assert!(read.held_to(&enrolled, &[&a9, &b5]).is_empty());
        let found = read.held_to(&enrolled[..1], &[&tally("a", 9, 2)]);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found.iter().all(|f| f.fault == Fault::Vault));
        assert!(Seen::read(&path, &"cd".repeat(32)).is_err());
    }

    /// Of one second, the number orders two tallies, and another tally of
    /// the time and number seen is the vault's; of a tally v2 (number 0),
    /// it is not (two of one second cannot be told apart).
    #[test]
    fn one_seconds_tallies_are_told_apart_by_their_number() {
        let mut seen = Seen::default();
        let seen_one = tally("a", 9, 2);
        seen.remember(&[&seen_one]);
        let enrolled = ["a".to_string()];
        assert_eq!(seen.held_to(&enrolled, &[&tally("a", 9, 1)]).len(), 1);
        let key = SigningKey::from_seed(&Secret32::from_bytes([6; 32]));
        let other = vault::Tally::sign(&key, "a", 9, 2, Vec::new());
        assert_eq!(seen.held_to(&enrolled, &[&other]).len(), 1);
        assert!(seen.held_to(&enrolled, &[&seen_one]).is_empty());
        let mut v2 = Seen::default();
        v2.remember(&[&tally("a", 9, 0)]);
        assert!(v2.held_to(&enrolled, &[&other_v2()]).is_empty());
    }

    fn other_v2() -> vault::Tally {
        let key = SigningKey::from_seed(&Secret32::from_bytes([6; 32]));
        vault::Tally::sign(&key, "a", 9, 0, Vec::new())
    }

    /// A memory written before ADR-0132 (machine and time alone, no vault
    /// line) still reads, as tallies v2 of no digest, and so once rewritten.
    #[test]
    fn a_memory_from_before_numbering_reads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("seen");
        let fp = "ab".repeat(32);
        std::fs::write(&path, format!("{}\na 9\n", head(&fp))).expect("write");
        let read = Seen::read(&path, &fp).expect("read");
        assert!(read.vaults.is_empty());
        assert_eq!(read.tallies[0].order(), (9, 0));
        assert_eq!(read.tallies[0].digest, None);
        read.write(&path, &fp).expect("rewritten in the new form");
        assert_eq!(Seen::read(&path, &fp).expect("read again"), read);
    }
}
