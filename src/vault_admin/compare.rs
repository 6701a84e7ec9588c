//! Comparing the vault's copy of a session with a machine's own
//! (`nd7 admin pull --compare`): the receipts it kept, those a declared
//! restore lost, and the log line by line.

use std::io::{self, BufRead};
use std::path::Path;

use crate::chain::Hash;
use crate::session_log::SessionLog;
use crate::ship::{self, LOST_FILE, RECEIPT_FILE, ShipError};
use crate::vault::{self, PublicKey, Receipt, Recipients, RestoreNotice};

use super::{Fault, Finding, Pulled};

/// How a local log stands against the vault's copy, line by line.
#[derive(Debug, PartialEq, Eq)]
pub enum Comparison {
    /// The same entries; `unshipped` more locally, not yet shipped.
    Matches { entries: u64, unshipped: u64 },
    /// The first entry whose bytes differ: a rewrite after shipping.
    Differs {
        entry: u64,
        vault_hash: Hash,
        local: String,
    },
    /// The local log stops before the vault's copy does: entries were removed.
    Truncated {
        local_entries: u64,
        vault_entries: u64,
    },
}

/// Compares the vault's copy with a local log, line by line, reading both
/// as they go.
pub fn compare_logs(
    mut vault_copy: impl BufRead,
    mut local: impl BufRead,
) -> io::Result<Comparison> {
    let (mut theirs, mut ours) = (Vec::new(), Vec::new());
    let mut n = 0u64;
    loop {
        theirs.clear();
        if vault_copy.read_until(b'\n', &mut theirs)? == 0 {
            break;
        }
        ours.clear();
        if local.read_until(b'\n', &mut ours)? == 0 {
            let mut rest = 1u64;
            while {
                theirs.clear();
                vault_copy.read_until(b'\n', &mut theirs)? > 0
            } {
                rest += 1;
            }
            return Ok(Comparison::Truncated {
                local_entries: n,
                vault_entries: n + rest,
            });
        }
        if ours != theirs {
            let line = theirs.strip_suffix(b"\n").unwrap_or(&theirs);
            let vault_hash =
                crate::chain::read_stated(line).map_or_else(|_| Hash::of(&theirs), |s| s.hash);
            // The hash a line states may be the vault's while its bytes
            // changed: say what its bytes hash to as well.
            let line = ours.strip_suffix(b"\n").unwrap_or(&ours);
            let local = match crate::chain::read_checked(line) {
                Ok(s) => format!("hash {}", s.hash.short()),
                Err(crate::chain::Fault::Hash { stated, computed }) => format!(
                    "states hash {} but its bytes hash to {}: edited in place",
                    &stated[..16.min(stated.len())],
                    &computed[..16.min(computed.len())]
                ),
                Err(_) => crate::chain::read_stated(line).map_or_else(
                    |_| "not a sealed entry".into(),
                    |s| format!("hash {}", s.hash.short()),
                ),
            };
            return Ok(Comparison::Differs {
                entry: n,
                vault_hash,
                local,
            });
        }
        n += 1;
    }
    let mut unshipped = 0u64;
    while {
        ours.clear();
        local.read_until(b'\n', &mut ours)? > 0
    } {
        unshipped += 1;
    }
    Ok(Comparison::Matches {
        entries: n,
        unshipped,
    })
}

/// What comparing a machine's copy with the vault's found.
#[derive(Debug, Default)]
pub struct Compared {
    pub findings: Vec<Finding>,
    pub notes: Vec<String>,
}

impl Compared {
    /// 3 when the vault is at fault, else 1 when the machine is (or whose
    /// fault it is is unsettled), else 0.
    pub fn exit_code(&self) -> u8 {
        if self.findings.iter().any(|f| f.fault == Fault::Vault) {
            3
        } else if self.findings.is_empty() {
            0
        } else {
            1
        }
    }
}

/// The vault keys the organisation vouched for, as far as this machine
/// knows: the one in the document the vault serves now, and every one
/// named by a document the machine held (its `vault/recipients` and
/// `recipients.old`, beside the sessions directory `dir` is in) that the
/// organisation's key signed. A receipt signed before the vault's key
/// changed is checked against the key it was signed with.
pub(crate) fn vouched_vault_keys(pulled: &Pulled, dir: &Path) -> Vec<PublicKey> {
    let mut keys = vec![pulled.vault_key];
    let Some(vault_dir) = dir.parent().and_then(Path::parent).map(ship::vault_dir) else {
        return keys;
    };
    for name in [ship::RECIPIENTS_FILE, ship::RECIPIENTS_OLD_FILE] {
        let Ok(text) = std::fs::read_to_string(vault_dir.join(name)) else {
            continue;
        };
        for record in super::records(&text, "nd7-recipients ") {
            if let Ok(doc) = Recipients::parse(record)
                && doc.org == pulled.org
                && !keys.contains(&doc.vault)
            {
                keys.push(doc.vault);
            }
        }
    }
    keys
}

/// Checks a receipt's two signatures: the vault's, by one of the `vouched`
/// vault keys (the one it names), and the machine's.
fn check_receipt(
    r: &Receipt,
    vouched: &[PublicKey],
    machine: &PublicKey,
) -> Result<(), vault::Error> {
    let key = vouched
        .iter()
        .find(|k| **k == r.vault)
        .unwrap_or(&vouched[0]);
    r.verify(key, machine)
}

/// Compares the vault's copy with a machine's session directory (or its
/// `events.ndjson`): the receipt the machine kept, any it lost in a vault's
/// restore, and the log.
pub fn compare(pulled: &Pulled, local: &Path) -> Result<Compared, ShipError> {
    let log = SessionLog::at_path(local)?;
    let against = Against {
        pulled,
        names: format!("machine {}, session {}", pulled.machine, pulled.session),
        vouched: vouched_vault_keys(pulled, log.dir()),
        // What the vault holds, signed by the machine, whether or not the
        // pull got as far as decrypting it.
        vault_last: pulled.held.last().map(|c| c.last),
    };
    let mut out = Compared::default();
    let receipt_path = log.dir().join(RECEIPT_FILE);
    if let Ok(text) = std::fs::read_to_string(&receipt_path) {
        out.findings
            .extend(against.kept_receipt(&receipt_path, &text));
    }
    // Receipts a declared restore lost: evidence, kept by the machine.
    if let Ok(text) = std::fs::read_to_string(log.dir().join(LOST_FILE)) {
        for (what, receipt, notice) in ship::lost_receipts(&text) {
            match against.lost_receipt(&what, receipt, notice) {
                Ok(note) => out.notes.push(note),
                Err(finding) => out.findings.push(finding),
            }
        }
    }
    if let Ok(alarm) = std::fs::read_to_string(log.dir().join(ship::ALARM_FILE)) {
        out.notes.push(format!(
            "the machine's vault.alarm says: {}",
            alarm.lines().next().unwrap_or_default()
        ));
    }
    let events = log.events_path();
    let comparison = compare_files(&pulled.path, &events)?;
    match against.log(comparison) {
        Ok(note) => out.notes.push(note),
        Err(finding) => out.findings.push(finding),
    }
    Ok(out)
}

/// [`compare_logs`] of two files.
fn compare_files(vault_copy: &Path, events: &Path) -> Result<Comparison, ShipError> {
    let open = |path: &Path| {
        std::fs::File::open(path)
            .map(|f| io::BufReader::with_capacity(1 << 20, f))
            .map_err(|e| ShipError::Io {
                path: path.to_path_buf(),
                action: "read",
                source: e,
            })
    };
    compare_logs(open(vault_copy)?, open(events)?).map_err(|e| ShipError::Io {
        path: events.to_path_buf(),
        action: "compare",
        source: e,
    })
}

/// What a machine's copy is compared against: the pull, and the vault keys
/// the organisation vouched for.
struct Against<'a> {
    pulled: &'a Pulled,
    names: String,
    vouched: Vec<PublicKey>,
    vault_last: Option<u64>,
}

impl Against<'_> {
    fn machine(&self, text: String) -> Finding {
        Finding {
            fault: Fault::Machine,
            text,
        }
    }

    fn vault(&self, text: String) -> Finding {
        Finding {
            fault: Fault::Vault,
            text,
        }
    }

    fn holds_up_to(&self) -> String {
        self.vault_last.map_or("none".into(), |l| l.to_string())
    }

    /// The receipt the machine kept: the vault must still hold that batch.
    fn kept_receipt(&self, path: &Path, text: &str) -> Option<Finding> {
        let names = &self.names;
        let r = match Receipt::parse(text)
            .and_then(|r| check_receipt(&r, &self.vouched, &self.pulled.machine_key).map(|()| r))
        {
            Ok(r) => r,
            Err(e) => {
                return Some(self.machine(format!(
                    "{names}: {}: the machine's receipt does not check: {e}",
                    path.display()
                )));
            }
        };
        let k = &r.checkpoint;
        if self.pulled.held.iter().any(|c| c.same_head(k)) {
            return None;
        }
        let text = if self.vault_last.is_none_or(|l| l < k.last) {
            format!(
                "{names}: the vault acknowledged entries up to {} (its receipt of {} is on the machine), but holds only up to {}: it dropped entries {}..{}",
                k.last,
                r.stored,
                self.holds_up_to(),
                self.vault_last.map_or(0, |l| l + 1),
                k.last
            )
        } else {
            format!(
                "{names}: the vault acknowledged entry {} with digest {} (its receipt of {} is on the machine), but no longer holds that batch: it replaced what it acknowledged",
                k.last,
                k.head.short(),
                r.stored
            )
        };
        Some(self.vault(text))
    }

    /// One record of receipts.lost: a receipt and the restore notice that
    /// lost it, both signed; a note when the vault holds those entries
    /// again, else a finding.
    fn lost_receipt(
        &self,
        what: &str,
        receipt: Option<Receipt>,
        notice: Option<RestoreNotice>,
    ) -> Result<String, Finding> {
        let names = &self.names;
        let signed = receipt
            .as_ref()
            .is_some_and(|r| check_receipt(r, &self.vouched, &self.pulled.machine_key).is_ok())
            && notice
                .as_ref()
                .is_some_and(|n| self.vouched.iter().any(|k| n.verify(k).is_ok()));
        let (Some(r), Some(n)) = (receipt.filter(|_| signed), notice) else {
            return Err(self.machine(format!(
                "{names}: receipts.lost holds a record that does not check ({what})"
            )));
        };
        // The vault signed both; a notice that cannot excuse this loss (too
        // wide, in the future, not covering the receipt) is its own word
        // against it.
        if let Err(why) = n.credible(ship::unix_now()).and_then(|()| {
            n.explains(&r)
                .then_some(())
                .ok_or_else(|| "it does not cover the receipt".to_string())
        }) {
            return Err(self.vault(format!(
                "{names}: {what}; the vault's restore notice for it (backup {}, restored {}) cannot excuse the loss: {why}",
                n.backup, n.restored
            )));
        }
        let k = &r.checkpoint;
        let now = match self.pulled.digest_at(k.last, k.key) {
            Some(d) if d == k.head => "the vault holds those entries again, unchanged",
            Some(_) => {
                return Err(self.machine(format!(
                    "{names}: entry {} was shipped again with other contents than the machine first signed: it rewrote its log",
                    k.last
                )));
            }
            None if self.vault_last.is_some_and(|l| l >= k.last) => {
                "the vault holds those entries again (under a later chain key, so not compared with the lost receipt)"
            }
            None => {
                return Err(self.vault(format!(
                    "{names}: {what}; the vault does not hold them again: it holds up to {}, and a declared restore excuses shipping them again, not losing them",
                    self.holds_up_to()
                )));
            }
        };
        Ok(format!("{names}: {what}; {now}"))
    }

    /// The log itself, line by line: a note when it matches, else a finding
    /// against the machine.
    fn log(&self, comparison: Comparison) -> Result<String, Finding> {
        let names = &self.names;
        match comparison {
            Comparison::Matches { entries, unshipped } if self.pulled.findings.is_empty() => {
                Ok(format!(
                    "local copy matches the vault's {entries} entries ({unshipped} more locally, not shipped yet)"
                ))
            }
            Comparison::Matches { entries, unshipped } => Ok(format!(
                "local copy matches the {entries} entries pulled before the pull stopped ({unshipped} more locally)"
            )),
            Comparison::Differs {
                entry,
                vault_hash,
                local,
            } => Err(self.machine(format!(
                "{names}: the local copy was rewritten after shipping: entry {entry} differs (the vault's, signed by the machine: hash {}; local: {local})",
                vault_hash.short()
            ))),
            Comparison::Truncated {
                local_entries,
                vault_entries,
            } => Err(self.machine(format!(
                "{names}: the local copy was cut short after shipping: it has {local_entries} entries, the vault's signed copy {vault_entries}; entry {local_entries} is missing"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(lines: &[&str]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut prev = Hash::session_fingerprint("s");
        for (seq, body) in lines.iter().enumerate() {
            let line = crate::chain::seal(
                format!("{{\"seq\":{seq},\"b\":\"{body}\",\"prev\":\"{prev}\"}}").as_bytes(),
            );
            prev = crate::chain::read_stated(&line[..line.len() - 1])
                .expect("sealed")
                .hash;
            out.extend_from_slice(&line);
        }
        out
    }

    #[test]
    fn compare_names_the_first_rewritten_or_missing_entry() {
        let compare_logs = |a: &[u8], b: &[u8]| compare_logs(a, b).expect("in memory");
        let vault = chain(&["a", "b", "c"]);
        assert_eq!(
            compare_logs(&vault, &vault),
            Comparison::Matches {
                entries: 3,
                unshipped: 0
            }
        );
        assert_eq!(
            compare_logs(&vault, &chain(&["a", "b", "c", "d"])),
            Comparison::Matches {
                entries: 3,
                unshipped: 1
            }
        );
        assert!(matches!(
            compare_logs(&vault, &chain(&["a", "x", "c"])),
            Comparison::Differs { entry: 1, .. }
        ));
        assert_eq!(
            compare_logs(&vault, &chain(&["a"])),
            Comparison::Truncated {
                local_entries: 1,
                vault_entries: 3
            }
        );
    }

    /// An entry whose bytes changed under its stated hash shows two
    /// different hashes, not the same one twice.
    #[test]
    fn an_entry_edited_in_place_shows_what_its_bytes_hash_to() {
        let vault = chain(&["a", "bbbb", "c"]);
        let edited = String::from_utf8(vault.clone())
            .expect("text")
            .replace("\"b\":\"bbbb\"", "\"b\":\"BBBB\"");
        match compare_logs(&vault[..], edited.as_bytes()).expect("in memory") {
            Comparison::Differs {
                entry,
                vault_hash,
                local,
            } => {
                assert_eq!(entry, 1);
                assert!(
                    local.starts_with(&format!(
                        "states hash {} but its bytes hash to ",
                        vault_hash.short()
                    )) && local.ends_with(": edited in place"),
                    "{local}"
                );
                assert!(!local.ends_with(&vault_hash.short()), "{local}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn findings_against_the_vault_win_the_exit_code() {
        let f = |fault| Finding {
            fault,
            text: String::new(),
        };
        let mut c = Compared::default();
        assert_eq!(c.exit_code(), 0);
        c.findings.push(f(Fault::Machine));
        assert_eq!(c.exit_code(), 1);
        c.findings.push(f(Fault::Vault));
        assert_eq!(c.exit_code(), 3);
    }
}
