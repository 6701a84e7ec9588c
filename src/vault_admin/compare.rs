//! Comparing the vault's copy of a session with a machine's own
//! (`nd7 admin pull --compare`): the receipts it kept, those a declared
//! restore lost, and the log line by line.

use std::io::{self, BufRead};
use std::path::Path;

use crate::chain::Hash;
use crate::session_log::SessionLog;
use crate::ship::{self, LOST_FILE, RECEIPT_FILE, ShipError};
use crate::vault::{self, PublicKey, Receipt, Recipients};

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
            let local = crate::chain::read_stated(ours.strip_suffix(b"\n").unwrap_or(&ours))
                .map_or_else(
                    |_| "not a sealed entry".into(),
                    |s| format!("hash {}", s.hash.short()),
                );
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
    /// 3 when the vault is at fault, else 1 when the machine is, else 0.
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
        let mut starts: Vec<usize> = text
            .match_indices("nd7-recipients ")
            .map(|(i, _)| i)
            .collect();
        starts.push(text.len());
        for w in starts.windows(2) {
            if let Ok(doc) = Recipients::parse(&text[w[0]..w[1]])
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
    let names = format!("machine {}, session {}", pulled.machine, pulled.session);
    let mut out = Compared::default();
    let vouched = vouched_vault_keys(pulled, log.dir());
    // What the vault holds, signed by the machine, whether or not the pull
    // got as far as decrypting it.
    let vault_last = pulled.held.last().map(|c| c.last);

    // The receipt the machine kept: the vault must still hold that batch.
    let receipt_path = log.dir().join(RECEIPT_FILE);
    if let Ok(text) = std::fs::read_to_string(&receipt_path) {
        match Receipt::parse(&text)
            .and_then(|r| check_receipt(&r, &vouched, &pulled.machine_key).map(|()| r))
        {
            Err(e) => out.findings.push(Finding {
                fault: Fault::Machine,
                text: format!(
                    "{names}: {}: the machine's receipt does not check: {e}",
                    receipt_path.display()
                ),
            }),
            Ok(r) => {
                let k = &r.checkpoint;
                let held = pulled.held.iter().any(|c| c.same_head(k));
                if !held {
                    let text = if vault_last.is_none_or(|l| l < k.last) {
                        format!(
                            "{names}: the vault acknowledged entries up to {} (its receipt of {} is on the machine), but holds only up to {}: it dropped entries {}..{}",
                            k.last,
                            r.stored,
                            vault_last.map_or("none".into(), |l| l.to_string()),
                            vault_last.map_or(0, |l| l + 1),
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
                    out.findings.push(Finding {
                        fault: Fault::Vault,
                        text,
                    });
                }
            }
        }
    }

    // Receipts a declared restore lost: evidence, kept by the machine.
    if let Ok(text) = std::fs::read_to_string(log.dir().join(LOST_FILE)) {
        for (what, receipt, notice) in ship::lost_receipts(&text) {
            let signed = receipt
                .as_ref()
                .is_some_and(|r| check_receipt(r, &vouched, &pulled.machine_key).is_ok())
                && notice
                    .as_ref()
                    .is_some_and(|n| vouched.iter().any(|k| n.verify(k).is_ok()));
            let (Some(r), Some(n)) = (receipt.filter(|_| signed), notice) else {
                out.findings.push(Finding {
                    fault: Fault::Machine,
                    text: format!(
                        "{names}: receipts.lost holds a record that does not check ({what})"
                    ),
                });
                continue;
            };
            // The vault signed both; a notice that cannot excuse this loss
            // (too wide, in the future, not covering the receipt) is its own
            // word against it.
            if let Err(why) = n.credible(ship::unix_now()).and_then(|()| {
                n.explains(&r)
                    .then_some(())
                    .ok_or_else(|| "it does not cover the receipt".to_string())
            }) {
                out.findings.push(Finding {
                    fault: Fault::Vault,
                    text: format!(
                        "{names}: {what}; the vault's restore notice for it (backup {}, restored {}) cannot excuse the loss: {why}",
                        n.backup, n.restored
                    ),
                });
                continue;
            }
            let k = &r.checkpoint;
            let now = match pulled.digest_at(k.last, k.key) {
                Some(d) if d == k.head => "the vault holds those entries again, unchanged",
                Some(_) => {
                    out.findings.push(Finding {
                        fault: Fault::Machine,
                        text: format!(
                            "{names}: entry {} was shipped again with other contents than the machine first signed: it rewrote its log",
                            k.last
                        ),
                    });
                    continue;
                }
                None if vault_last.is_some_and(|l| l >= k.last) => {
                    "the vault holds those entries again (under a later chain key, so not compared with the lost receipt)"
                }
                None => {
                    out.findings.push(Finding {
                        fault: Fault::Vault,
                        text: format!(
                            "{names}: {what}; the vault does not hold them again: it holds up to {}, and a declared restore excuses shipping them again, not losing them",
                            vault_last.map_or("none".into(), |l| l.to_string())
                        ),
                    });
                    continue;
                }
            };
            out.notes.push(format!("{names}: {what}; {now}"));
        }
    }
    if let Ok(alarm) = std::fs::read_to_string(log.dir().join(ship::ALARM_FILE)) {
        out.notes.push(format!(
            "the machine's vault.alarm says: {}",
            alarm.lines().next().unwrap_or_default()
        ));
    }

    // The log itself.
    let events = log.events_path();
    let open = |path: &Path| {
        std::fs::File::open(path)
            .map(|f| io::BufReader::with_capacity(1 << 20, f))
            .map_err(|e| ShipError::Io {
                path: path.to_path_buf(),
                action: "read",
                source: e,
            })
    };
    let comparison =
        compare_logs(open(&pulled.path)?, open(&events)?).map_err(|e| ShipError::Io {
            path: events.clone(),
            action: "compare",
            source: e,
        })?;
    match comparison {
        Comparison::Matches { entries, unshipped } if pulled.findings.is_empty() => {
            out.notes.push(format!(
                "local copy matches the vault's {entries} entries ({unshipped} more locally, not shipped yet)"
            ))
        }
        Comparison::Matches { entries, unshipped } => out.notes.push(format!(
            "local copy matches the {entries} entries pulled before the pull stopped ({unshipped} more locally)"
        )),
        Comparison::Differs {
            entry,
            vault_hash,
            local,
        } => out.findings.push(Finding {
            fault: Fault::Machine,
            text: format!(
                "{names}: the local copy was rewritten after shipping: entry {entry} differs (the vault's, signed by the machine: hash {}; local: {local})",
                vault_hash.short()
            ),
        }),
        Comparison::Truncated {
            local_entries,
            vault_entries,
        } => out.findings.push(Finding {
            fault: Fault::Machine,
            text: format!(
                "{names}: the local copy was cut short after shipping: it has {local_entries} entries, the vault's signed copy {vault_entries}; entry {local_entries} is missing"
            ),
        }),
    }
    Ok(out)
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
