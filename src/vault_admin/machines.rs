//! What the vault says it enrolled and holds (`nd7 admin machines`,
//! `nd7 admin sessions`), held to the organisation key and its register.

use std::path::Path;

use crate::http_client::Trust;
use crate::ship::{self, Client, Request, ShipError};
use crate::vault::{self, Enrolment, PublicKey};

use super::seen::Seen;
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
    let doc = super::recipients(&client, fingerprint)?;
    let text = client.ok_bound(
        Request::get("/v1/machines").bearer(Some(read_token)),
        &doc.vault,
    )?;
    let text = String::from_utf8_lossy(&text);
    let mut out = Machines::default();
    let mut by_token: Vec<(PublicKey, Vec<String>)> = Vec::new();
    for record in super::records(&text, "nd7-enroll ") {
        let Some(enrolment) = checked_enrolment(record, &doc.org, &mut out.findings) else {
            continue;
        };
        let id = enrolment.machine_id();
        held_to_register(&enrolment, &id, register, &mut out);
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
            out.lines.push(unused_token(r, now));
        }
    }
    Ok(out)
}

/// An enrolment record the vault lists, if it reads and the organisation's
/// key signed it; else a finding against the vault.
fn checked_enrolment(
    record: &str,
    org: &PublicKey,
    findings: &mut Vec<Finding>,
) -> Option<Enrolment> {
    let text = match Enrolment::parse(record.as_bytes()) {
        Ok(enrolment) => match enrolment.verify(org, None) {
            Ok(()) => return Some(enrolment),
            Err(e) => format!(
                "machine {}: its enrolment record is forged: {e}; the organisation never let this key in",
                enrolment.machine_id()
            ),
        },
        Err(e) => format!("the vault lists an enrolment record that does not read: {e}"),
    };
    findings.push(Finding {
        fault: Fault::Vault,
        text,
    });
    None
}

/// A machine's line, and a finding when its token is not in the register.
fn held_to_register(enrolment: &Enrolment, id: &str, register: &[Registered], out: &mut Machines) {
    let registered = register.iter().find(|r| r.token_key == enrolment.token_key);
    out.lines.push(format!(
        "machine {id} enrolled {} with token {} ({})",
        when(enrolment.endorsed),
        &enrolment.token_key.to_hex()[..16],
        registered.map_or("NOT IN THE REGISTER".to_string(), label)
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
}

/// Whom a registered token was for, as a machine's line says it.
fn label(r: &Registered) -> String {
    if r.label.is_empty() {
        "no label".to_string()
    } else {
        format!("for {}", r.label)
    }
}

/// The line of a registered token no machine used.
fn unused_token(r: &Registered, now: u64) -> String {
    format!(
        "token {} ({}) not used; {} {}",
        &r.token_key.to_hex()[..16],
        label(r),
        if r.expires < now {
            "expired"
        } else {
            "expires"
        },
        when(r.expires)
    )
}

/// What `nd7 admin sessions` found: the vault's list, a line per machine
/// whose tally vouches for it, and what the tallies contradict.
#[derive(Debug, Default)]
pub struct Sessions {
    /// (machine, session, last seq), as the vault lists them.
    pub listed: Vec<(String, String, u64)>,
    pub lines: Vec<String>,
    pub findings: Vec<Finding>,
}

/// The chains a vault holds, held to the machines' own tallies (ADR-0120,
/// ADR-0129): each tally must be signed by the key of a machine the
/// organisation let in, and every such machine must have one (each sends
/// one when it enrols); every session a tally names with the vault's own
/// receipt must be listed, up to the entry the receipt names at least. A
/// tally's session without a receipt of the vault's is the machine's word
/// alone, and a listed session its machine's tally does not name is the
/// vault's word against the machine's: neither is blamed on the vault.
/// Ids come from the vault: show them through [`crate::read::safe::term`].
pub fn list_sessions(
    url: &str,
    trust: &Trust,
    read_token: &str,
    fingerprint: &str,
    seen: Option<&Path>,
) -> Result<Sessions, PullError> {
    let client = Client::new(url, trust)?;
    let doc = super::recipients(&client, fingerprint)?;
    let get = |path: &str| -> Result<String, ShipError> {
        let body = client.ok_bound(Request::get(path).bearer(Some(read_token)), &doc.vault)?;
        Ok(String::from_utf8_lossy(&body).into_owned())
    };
    let mut out = Sessions {
        listed: parse_listing(&get("/v1/sessions")?),
        ..Sessions::default()
    };
    let mut enrolled: Vec<Enrolment> = Vec::new();
    for record in super::records(&get("/v1/machines")?, "nd7-enroll ") {
        if let Some(enrolment) = checked_enrolment(record, &doc.org, &mut out.findings) {
            enrolled.push(enrolment);
        }
    }
    let tallies = served_tallies(&get("/v1/tallies")?, &mut out.findings);
    withheld(&enrolled, &tallies, &mut out.findings);
    let vouched = vouched(&tallies, &enrolled, &mut out.findings);
    let now = ship::unix_now();
    for (tally, key) in &vouched {
        out.findings.extend(dated_ahead(tally, now));
        held_to_tally(tally, key, &doc.vault, &mut out);
    }
    let verified: Vec<&vault::Tally> = vouched.iter().map(|(t, _)| *t).collect();
    if let Some(path) = seen {
        // A tally dated ahead is the machine's finding, not a time to hold
        // the vault to: remembered, every honest tally until then would
        // look older than it.
        let timely: Vec<&vault::Tally> = verified
            .iter()
            .copied()
            .filter(|t| dated_ahead(t, now).is_none())
            .collect();
        let held = Held {
            doc: &doc,
            enrolled: &enrolled,
            verified: &timely,
        };
        remembered(path, fingerprint, &held, &mut out.findings)?;
    }
    untallied(&out.listed, &verified, &mut out.findings);
    Ok(out)
}

/// The tallies the vault serves, or none and a finding if they do not
/// read.
fn served_tallies(text: &str, findings: &mut Vec<Finding>) -> Vec<vault::Tally> {
    vault::Tally::parse_all(text).unwrap_or_else(|e| {
        findings.push(vault_finding(format!(
            "the vault serves tallies that do not read: {e}"
        )));
        Vec::new()
    })
}

/// Each listed session of a machine no tally that checked is of: with
/// every machine tallied from its enrolment on, the vault's doing.
fn untallied(
    listed: &[(String, String, u64)],
    verified: &[&vault::Tally],
    findings: &mut Vec<Finding>,
) {
    for (machine, session, last) in listed {
        if !verified.iter().any(|t| t.machine == *machine) {
            findings.push(vault_finding(format!(
                "machine {machine}, session {session} (up to entry {last}) is listed, but the machine has no tally the vault serves"
            )));
        }
    }
}

/// What a run verified, for the memory to hold the vault to.
struct Held<'a> {
    /// The organisation's document the vault serves.
    doc: &'a vault::Recipients,
    enrolled: &'a [Enrolment],
    /// The tallies that checked (not one dated ahead).
    verified: &'a [&'a vault::Tally],
}

/// The vault held to what this admin verified before (the memory at
/// `path`), which then remembers what `held` verified too. A memory of
/// another vault is refused, and left as it was.
fn remembered(
    path: &Path,
    fingerprint: &str,
    held: &Held<'_>,
    findings: &mut Vec<Finding>,
) -> Result<(), ShipError> {
    let mut memory = Seen::read(path, fingerprint)?;
    let ids: Vec<String> = held.enrolled.iter().map(Enrolment::machine_id).collect();
    let document = memory
        .held_to_document(held.doc, &ids)
        .map_err(|what| ShipError::BadFile {
            path: path.to_path_buf(),
            what,
        })?;
    findings.extend(memory.held_to(&ids, held.verified));
    match document {
        Some(finding) => findings.push(finding),
        None => memory.remember_document(held.doc),
    }
    memory.remember(held.verified);
    memory.write(path, fingerprint)
}

/// Each enrolled machine the vault serves no tally of. Every machine posts
/// one as it enrols, before it calls itself enrolled (ADR-0129): a machine
/// without one was withheld, with whatever sessions it tallied.
fn withheld(enrolled: &[Enrolment], tallies: &[vault::Tally], findings: &mut Vec<Finding>) {
    for enrolment in enrolled {
        let id = enrolment.machine_id();
        if !tallies.iter().any(|t| t.machine == id) {
            findings.push(vault_finding(format!(
                "machine {id} (enrolled {}): the vault serves no tally of it, though every machine sends one as it enrols: withheld, and with it whatever sessions the machine tallied",
                when(enrolment.endorsed)
            )));
        }
    }
}

/// The tallies signed by an enrolled machine's key, each with that key; a
/// finding against the vault for each other one it serves.
fn vouched<'t>(
    tallies: &'t [vault::Tally],
    enrolled: &[Enrolment],
    findings: &mut Vec<Finding>,
) -> Vec<(&'t vault::Tally, PublicKey)> {
    let mut out = Vec::new();
    for tally in tallies {
        let key = enrolled
            .iter()
            .find(|e| e.machine_id() == tally.machine)
            .map(|e| e.key);
        match key.map(|k| (k, tally.verify(&k))) {
            Some((k, Ok(()))) => out.push((tally, k)),
            Some((_, Err(e))) => findings.push(vault_finding(format!(
                "{e}: the vault serves a tally the machine never signed"
            ))),
            None => findings.push(vault_finding(format!(
                "the vault serves a tally of machine {}, which no enrolment record the organisation signed names",
                tally.machine
            ))),
        }
    }
    out
}

/// How far past the admin's clock a tally may be dated: clocks drift, but
/// not by hours.
const TALLY_AHEAD_SECS: u64 = 3600;

/// A finding against the machine whose tally is dated past `now`: the
/// vault keeps a tally until a later one comes, so every tally the machine
/// signs before that date is dropped, and what it ships meanwhile is named
/// by no tally (a wrong clock, or a machine freezing its own tally).
fn dated_ahead(tally: &vault::Tally, now: u64) -> Option<Finding> {
    (tally.at > now.saturating_add(TALLY_AHEAD_SECS)).then(|| Finding {
        fault: Fault::Machine,
        text: format!(
            "machine {}: its tally is dated {}, past this admin's clock ({}): the vault keeps it over every tally the machine signs before then, so nothing it ships until then is tallied (its clock is wrong)",
            tally.machine,
            when(tally.at),
            when(now)
        ),
    })
}

/// The vault's list held to one machine's tally, signed by `key`: what the
/// vault's own receipts in it acknowledged must be listed; what the list
/// shows beyond the tally is unsettled.
fn held_to_tally(tally: &vault::Tally, key: &PublicKey, vault_key: &PublicKey, out: &mut Sessions) {
    let before = out.findings.len();
    // The machine's listed sessions, and the sessions its tally names, each
    // looked up once per session rather than searched for.
    let mut listed = Listed::new();
    for (_, session, last) in out.listed.iter().filter(|(m, _, _)| *m == tally.machine) {
        listed.entry(session.as_str()).or_insert(*last);
    }
    for receipt in &tally.sessions {
        match acknowledged(tally, receipt, key, vault_key) {
            Ok(()) => hidden(tally, receipt, &listed, &mut out.findings),
            Err(Some(line)) => {
                out.lines.push(line);
                unchecked_but_hidden(tally, receipt, &listed, &mut out.findings);
            }
            Err(None) => out.findings.push(claimed_alone(tally, receipt)),
        }
    }
    let named: std::collections::HashSet<&str> = tally
        .sessions
        .iter()
        .map(|r| r.checkpoint.session.as_str())
        .collect();
    for (machine, session, last) in out.listed.iter().filter(|(m, _, _)| *m == tally.machine) {
        if !named.contains(session.as_str()) {
            out.findings.push(Finding {
                fault: Fault::Unsettled,
                text: format!(
                    "machine {machine}, session {session} (up to entry {last}) is listed, but the machine's tally of {} does not name it: shipped since, left out by the machine, or made up by the vault (`nd7 admin pull` checks that the machine signed its batches)",
                    when(tally.at)
                ),
            });
        }
    }
    if out.findings.len() == before {
        out.lines.push(format!(
            "machine {}: the list agrees with its tally of {} ({} session(s))",
            tally.machine,
            when(tally.at),
            tally.sessions.len()
        ));
    }
}

/// Whether the vault whose key is `vault_key` signed `receipt` (and the
/// machine its checkpoint). `Err(Some(line))`: signed by another vault key,
/// which the document at hand cannot vouch for (one the vault had before
/// its key changed): a line saying it is not checked here. `Err(None)`:
/// not the vault's.
fn acknowledged(
    tally: &vault::Tally,
    receipt: &vault::Receipt,
    key: &PublicKey,
    vault_key: &PublicKey,
) -> Result<(), Option<String>> {
    if receipt.vault != *vault_key {
        return Err(Some(format!(
            "machine {}, session {}: the receipt in its tally is signed by vault key {}, not the one the organisation's document names: not checked here (`nd7 admin pull --compare` checks it against the documents the machine held)",
            tally.machine,
            receipt.checkpoint.session,
            receipt.vault.to_hex()
        )));
    }
    receipt.verify(vault_key, key).map_err(|_| None)
}

/// A session in `tally` with no receipt of the vault's for it: the
/// machine claims what the vault never signed.
fn claimed_alone(tally: &vault::Tally, receipt: &vault::Receipt) -> Finding {
    let c = &receipt.checkpoint;
    Finding {
        fault: Fault::Machine,
        text: format!(
            "machine {}, session {}: the machine's tally of {} claims the vault acknowledged entries up to {}, but the receipt it carries is not the vault's: the machine's word alone, not held against the vault",
            tally.machine,
            c.session,
            when(tally.at),
            c.last
        ),
    }
}

/// The session `receipt` acknowledges, if the vault's list leaves it out,
/// or lists it with fewer entries than the vault acknowledged.
fn hidden(
    tally: &vault::Tally,
    receipt: &vault::Receipt,
    listed: &Listed<'_>,
    findings: &mut Vec<Finding>,
) {
    let (session, last) = (&receipt.checkpoint.session, receipt.checkpoint.last);
    let Some(shown) = listed_short(receipt, listed) else {
        return;
    };
    findings.push(vault_finding(format!(
        "machine {}, session {session}: the machine's tally of {} carries the vault's receipt for entries up to {last} (stored {}), but the vault lists {}",
        tally.machine,
        when(tally.at),
        when(receipt.stored),
        shown.map_or("no such session".to_string(), |l| format!("entries up to {l} only"))
    )));
}

/// What the vault lists of the session `receipt` acknowledges, when that
/// is less than it acknowledged: `Some(None)` when it lists none of it,
/// `Some(Some(last))` when it lists entries up to `last` only.
fn listed_short(receipt: &vault::Receipt, listed: &Listed<'_>) -> Option<Option<u64>> {
    let shown = listed.get(receipt.checkpoint.session.as_str()).copied();
    shown
        .is_none_or(|l| l < receipt.checkpoint.last)
        .then_some(shown)
}

/// One machine's sessions as the vault lists them: the last entry of each
/// (the first the list gives, where it gives one twice).
type Listed<'a> = std::collections::HashMap<&'a str, u64>;

/// A session whose receipt in `tally` is of another vault key (not
/// checked here) that the list leaves out or shows with fewer entries:
/// the machine's word against the vault's, unsettled rather than unsaid,
/// or an operator could hide every session acknowledged before its key
/// changed.
fn unchecked_but_hidden(
    tally: &vault::Tally,
    receipt: &vault::Receipt,
    listed: &Listed<'_>,
    findings: &mut Vec<Finding>,
) {
    let (session, last) = (&receipt.checkpoint.session, receipt.checkpoint.last);
    let Some(shown) = listed_short(receipt, listed) else {
        return;
    };
    findings.push(Finding {
        fault: Fault::Unsettled,
        text: format!(
            "machine {}, session {session}: the machine's tally of {} carries a receipt of vault key {} for entries up to {last}, not checked here, but the vault lists {}: the vault's word against the machine's (`nd7 admin pull --compare` checks the receipt against the documents the machine held)",
            tally.machine,
            when(tally.at),
            receipt.vault.to_hex(),
            shown.map_or("no such session".to_string(), |l| format!("entries up to {l} only"))
        ),
    });
}

fn vault_finding(text: String) -> Finding {
    Finding {
        fault: Fault::Vault,
        text,
    }
}

/// The vault's list of chains: "machine session-hex last" lines.
fn parse_listing(text: &str) -> Vec<(String, String, u64)> {
    text.lines()
        .filter_map(|l| {
            let mut p = l.split(' ');
            let machine = p.next()?.to_string();
            let session = String::from_utf8(vault::unhex_vec(p.next()?)?).ok()?;
            let last = p.next()?.parse().ok()?;
            Some((machine, session, last))
        })
        .collect()
}
