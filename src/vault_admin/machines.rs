//! What the vault says it enrolled and holds (`nd7 admin machines`,
//! `nd7 admin sessions`), held to the organisation key and its register.

use crate::http_client::Trust;
use crate::ship::{self, Client, ShipError};
use crate::vault::{self, Enrolment, PublicKey, Recipients};

use super::{Fault, Finding, PullError, Registered, when};

/// What `nd7 admin machines` found: a line per machine and per token, and
/// what the register does not account for.
#[derive(Debug, Default)]
pub struct Machines {
    pub lines: Vec<String>,
    pub findings: Vec<Finding>,
}

/// Every machine the vault enrolled, held to the organisation key and to
/// the register: each record must verify, its token be one the register
/// lists, and no token have let in two machines. Both ids and labels come
/// from outside: show them through [`crate::read::safe::term`].
pub fn list_machines(
    url: &str,
    trust: &Trust,
    read_token: &str,
    fingerprint: &str,
    register: &[Registered],
) -> Result<Machines, PullError> {
    let client = Client::new(url, trust)?;
    let (doc, _) = client.ok_bound_by("GET", "/v1/recipients", |body| {
        let doc = Recipients::verify(&String::from_utf8_lossy(body), fingerprint)?;
        let key = doc.vault;
        Ok((doc, key))
    })?;
    let text = client.ok_bound(
        "GET",
        "/v1/machines",
        b"",
        None,
        Some(read_token),
        &doc.vault,
    )?;
    let text = String::from_utf8_lossy(&text);
    let mut out = Machines::default();
    let mut by_token: Vec<(PublicKey, Vec<String>)> = Vec::new();
    let magic = "nd7-enroll ";
    let mut starts: Vec<usize> = text.match_indices(magic).map(|(i, _)| i).collect();
    starts.push(text.len());
    for w in starts.windows(2) {
        let record = &text[w[0]..w[1]];
        let enrolment = match Enrolment::parse(record.as_bytes()) {
            Ok(e) => e,
            Err(e) => {
                out.findings.push(Finding {
                    fault: Fault::Vault,
                    text: format!("the vault lists an enrolment record that does not read: {e}"),
                });
                continue;
            }
        };
        let id = enrolment.machine_id();
        if let Err(e) = enrolment.verify(&doc.org, None) {
            out.findings.push(Finding {
                fault: Fault::Vault,
                text: format!(
                    "machine {id}: its enrolment record is forged: {e}; the organisation never let this key in"
                ),
            });
            continue;
        }
        let registered = register.iter().find(|r| r.token_key == enrolment.token_key);
        out.lines.push(format!(
            "machine {id} enrolled {} with token {} ({})",
            when(enrolment.endorsed),
            &enrolment.token_key.to_hex()[..16],
            registered.map_or("NOT IN THE REGISTER".to_string(), |r| {
                if r.label.is_empty() {
                    "no label".to_string()
                } else {
                    format!("for {}", r.label)
                }
            })
        ));
        if registered.is_none() {
            out.findings.push(Finding {
                fault: Fault::Vault,
                text: format!(
                    "machine {id}: its enrolment token (key {}) is not in the register: the organisation's key signed it, but `nd7 admin enrol-token` did not record it (minted elsewhere, or with another register)",
                    enrolment.token_key.to_hex()
                ),
            });
        }
        match by_token.iter_mut().find(|(k, _)| *k == enrolment.token_key) {
            Some((_, ids)) => ids.push(id),
            None => by_token.push((enrolment.token_key, vec![id])),
        }
    }
    for (key, ids) in by_token.iter().filter(|(_, ids)| ids.len() > 1) {
        out.findings.push(Finding {
            fault: Fault::Vault,
            text: format!(
                "the enrolment token with key {} let in {} machines ({}): a token lets in one",
                key.to_hex(),
                ids.len(),
                ids.join(", ")
            ),
        });
    }
    let now = ship::unix_now();
    for r in register {
        if !by_token.iter().any(|(k, _)| *k == r.token_key) {
            out.lines.push(format!(
                "token {} ({}) not used; {} {}",
                &r.token_key.to_hex()[..16],
                if r.label.is_empty() {
                    "no label".to_string()
                } else {
                    format!("for {}", r.label)
                },
                if r.expires < now {
                    "expired"
                } else {
                    "expires"
                },
                when(r.expires)
            ));
        }
    }
    Ok(out)
}

/// Lists the chains a vault holds: (machine, session, last seq). Both
/// come from the vault: show them through [`crate::read::safe::term`].
pub fn list_sessions(
    url: &str,
    trust: &Trust,
    read_token: &str,
) -> Result<Vec<(String, String, u64)>, ShipError> {
    let client = Client::new(url, trust)?;
    let text = client.ok("GET", "/v1/sessions", b"", None, Some(read_token))?;
    let text = String::from_utf8_lossy(&text);
    Ok(text
        .lines()
        .filter_map(|l| {
            let mut p = l.split(' ');
            let machine = p.next()?.to_string();
            let session = String::from_utf8(vault::unhex_vec(p.next()?)?).ok()?;
            let last = p.next()?.parse().ok()?;
            Some((machine, session, last))
        })
        .collect())
}
