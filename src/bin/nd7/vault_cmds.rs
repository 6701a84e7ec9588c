//! `nd7 enroll`, `nd7 ship` and `nd7 admin`: argument handling and exit
//! statuses; the work is `nd7_core::ship`'s and `nd7_core::vault_admin`'s.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use nd7_core::cli::Admin;
use nd7_core::http_client::Trust;
use nd7_core::read::safe::{Lines, term};
use nd7_core::session_log::{self, SessionLog};
use nd7_core::ship::{self, ShipError};
use nd7_core::transcript;
use nd7_core::vault::AgeIdentity;
use nd7_core::vault_admin::{self, Compared, Fault, Finding, PullError, Pulled};

fn state_dir(cmd: &str) -> Result<std::path::PathBuf, ExitCode> {
    session_log::state_dir().map_err(|e| {
        eprintln!("nd7 {cmd}: {e}");
        ExitCode::from(2)
    })
}

/// 1 when a vault or its document was refused (or refused us), 2 otherwise.
fn refusal_code(e: &ShipError) -> ExitCode {
    match e {
        ShipError::Refused { .. }
        | ShipError::Vault(_)
        | ShipError::OldRecipients { .. }
        | ShipError::RecipientsExpired { .. } => ExitCode::from(1),
        _ => ExitCode::from(2),
    }
}

pub fn enroll(url: &str, token: &str, fingerprint: &str, ca_cert: Option<&Path>) -> ExitCode {
    let state = match state_dir("enroll") {
        Ok(s) => s,
        Err(code) => return code,
    };
    match ship::enroll(&state, url, token, fingerprint, ca_cert) {
        Ok(done) => {
            println!(
                "enrolled as machine {} (key {}) with {url}; chain keys will be wrapped to {} admin recipient(s) of version {}; files in {}",
                done.machine_id,
                done.public_key,
                done.recipients,
                done.version,
                done.dir.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("nd7 enroll: {}", term(&e.to_string(), Lines::One));
            refusal_code(&e)
        }
    }
}

fn ship_once(state: &Path) -> ExitCode {
    let report = match ship::ship_all(state, &mut |line| {
        eprintln!("nd7 ship: {}", term(line, Lines::One))
    }) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("nd7 ship: {e}");
            return ExitCode::from(2);
        }
    };
    for w in &report.warnings {
        eprintln!("nd7 ship: warning: {}", term(w, Lines::One));
    }
    let (mut entries, mut batches, mut failed) = (0, 0, 0);
    let (mut pieces, mut transcript_bytes) = (0, 0);
    let unreachable = report.unreachable();
    let sessions = nd7_core::session_log::sessions_dir(state);
    // A session whose every entry was shipped before is not "not shipped"
    // because this ship could not ask the vault about it.
    let waiting = |id: &str| !up_to_date(&sessions.join(id));
    for (session, result) in &report.sessions {
        match result {
            Ok(done) => {
                entries += done.entries;
                batches += done.batches;
                pieces += done.transcript_pieces;
                transcript_bytes += done.transcript_bytes;
            }
            Err(_) if unreachable.is_some() => failed += usize::from(waiting(session)),
            Err(e) => {
                failed += 1;
                // The vault's words and the session's name, shown inert.
                eprintln!(
                    "nd7 ship: {}",
                    term(&format!("{session}: not shipped: {e}"), Lines::One)
                );
            }
        }
    }
    // Batches the vault acknowledged before a session's run failed count:
    // they are stored.
    for (_, acked) in &report.partly {
        entries += acked.entries;
        batches += acked.batches;
    }
    let not_tried = report.not_tried.iter().filter(|id| waiting(id)).count();
    match unreachable {
        Some(why) => {
            let server = std::fs::read_to_string(ship::vault_dir(state).join(ship::SERVER_FILE))
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "the vault".into());
            let why = format!(
                "the vault at {server} cannot be reached ({why}): {} session(s) wait to be shipped; nothing is lost, the next ship sends them",
                failed + not_tried
            );
            eprintln!("nd7 ship: {}", term(&why, Lines::One));
            note_unreachable(state, Some(&why));
        }
        None => {
            note_unreachable(state, None);
            if !report.not_tried.is_empty() {
                eprintln!(
                    "nd7 ship: stopped: the vault refused more from this machine today (quota); {} more session(s) not tried",
                    report.not_tried.len()
                );
            }
        }
    }
    let transcripts = if pieces > 0 {
        format!(", {transcript_bytes} transcript bytes in {pieces} pieces")
    } else {
        String::new()
    };
    println!(
        "shipped {entries} entries in {batches} batches{transcripts}; {} sessions, {} not fully shipped",
        report.sessions.len() + report.not_tried.len(),
        failed
            + if unreachable.is_some() {
                not_tried
            } else {
                report.not_tried.len()
            }
    );
    if report.vault_broke() {
        ExitCode::from(3)
    } else if report.all_shipped() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Whether every entry of the session in `dir` was shipped: its `shipped`
/// mark is its `head`.
fn up_to_date(dir: &Path) -> bool {
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
    matches!(
        (read("head"), read(ship::SHIPPED_FILE)),
        (Some(head), Some(shipped)) if head.trim() == shipped.trim()
    )
}

/// Keeps (or clears) the last ship's "cannot be reached" beside the
/// enrolment, for `nd7 doctor`.
fn note_unreachable(state: &Path, why: Option<&str>) {
    let file = ship::vault_dir(state).join(ship::UNREACHABLE_FILE);
    let _ = match why {
        // 0600, as every file beside the enrolment.
        Some(why) => std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&file)
            .and_then(|mut f| f.write_all(format!("{why}\n").as_bytes())),
        None => std::fs::remove_file(&file).or(Ok(())),
    };
}

pub fn ship(every: Option<&str>) -> ExitCode {
    let state = match state_dir("ship") {
        Ok(s) => s,
        Err(code) => return code,
    };
    let Some(every) = every else {
        return ship_once(&state);
    };
    let Some(period) = ship::parse_duration(every) else {
        eprintln!("nd7 ship: --every takes a duration such as 30s, 5m or 1h, not {every:?}");
        return ExitCode::from(2);
    };
    // Failures are reported each round and the loop goes on: a vault that
    // is down, or an enrolment still to come, may be fixed meanwhile.
    loop {
        let _ = ship_once(&state);
        std::thread::sleep(period);
    }
}

fn write_new_0600(path: &Path, text: &str) -> Result<(), String> {
    write_new_bytes_0600(path, text.as_bytes())
}

fn write_new_bytes_0600(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("{}: cannot create: {e}", path.display()))?;
    f.write_all(bytes)
        .map_err(|e| format!("{}: cannot write: {e}", path.display()))
}

fn read(path: &Path) -> Result<String, ExitCode> {
    std::fs::read_to_string(path).map_err(|e| {
        eprintln!("nd7 admin: {}: cannot read: {e}", path.display());
        ExitCode::from(2)
    })
}

pub fn admin(command: Admin) -> ExitCode {
    match admin_inner(command) {
        Ok(code) => code,
        Err(code) => code,
    }
}

fn fail(e: impl std::fmt::Display) -> ExitCode {
    eprintln!("nd7 admin: {}", term(&e.to_string(), Lines::One));
    ExitCode::from(2)
}

/// Whom the vault's HTTPS is trusted by: --ca-cert, or the default.
fn trust(ca_cert: Option<std::path::PathBuf>) -> Trust {
    ca_cert.map_or(Trust::Default, Trust::Pinned)
}

fn fault_code(fault: Fault) -> ExitCode {
    match fault {
        Fault::Vault => ExitCode::from(3),
        Fault::Machine | Fault::Unsettled => ExitCode::from(1),
    }
}

/// A pull that found a fault says it on stdout, as a finding, and exits
/// with whose fault it is; any other failure is an error (2).
fn pull_failed(e: PullError) -> ExitCode {
    match e {
        PullError::Finding(f) => {
            println!("{}", term(&f.to_string(), Lines::One));
            fault_code(f.fault)
        }
        PullError::Other(e) => fail(format!("pull: {e}")),
    }
}

fn admin_inner(command: Admin) -> Result<ExitCode, ExitCode> {
    match command {
        Admin::OrgKey { out } => {
            let (text, fp) = vault_admin::new_org_key().map_err(fail)?;
            write_new_0600(&out, &text).map_err(fail)?;
            println!("{fp}");
            Ok(ExitCode::SUCCESS)
        }
        Admin::AgeKey { out } => {
            let (text, recipient) = vault_admin::new_age_identity().map_err(fail)?;
            write_new_0600(&out, &text).map_err(fail)?;
            println!("{recipient}");
            Ok(ExitCode::SUCCESS)
        }
        Admin::SignRecipients {
            org_key,
            version,
            valid_days,
            valid_until,
            vault_key,
            recipients,
        } => {
            let valid_until = valid_until.unwrap_or_else(|| {
                ship::unix_now().saturating_add(valid_days.saturating_mul(86_400))
            });
            let doc = vault_admin::sign_recipients(
                &read(&org_key)?,
                version,
                valid_until,
                &vault_key,
                &recipients,
            )
            .map_err(fail)?;
            print!("{doc}");
            Ok(ExitCode::SUCCESS)
        }
        Admin::EnrolToken {
            org_key,
            recipients,
            hours,
            label,
            register,
        } => enrol_token(&org_key, &recipients, hours, &label, register),
        Admin::Machines {
            url,
            read_token,
            ca_cert,
            fingerprint,
            register,
        } => machines(&url, &read_token, trust(ca_cert), &fingerprint, &register),
        Admin::Sessions {
            url,
            read_token,
            ca_cert,
            fingerprint,
            seen,
        } => sessions(
            &url,
            &read_token,
            trust(ca_cert),
            &fingerprint,
            seen.as_deref(),
        ),
        Admin::Pull {
            url,
            read_token,
            ca_cert,
            identity,
            fingerprint,
            machine,
            session,
            out,
            compare,
        } => {
            let identity = AgeIdentity::parse(&read(&identity)?).map_err(fail)?;
            let vault = Vault {
                url,
                trust: trust(ca_cert),
                read_token,
                identity,
            };
            match (machine, session) {
                (Some(machine), Some(session)) => {
                    pull(&vault, &fingerprint, &machine, &session, &out, compare)
                }
                (machine, _) => pull_every(&vault, &fingerprint, machine.as_deref(), &out),
            }
        }
    }
}

/// `nd7 admin enrol-token`: the token, recorded in the register (beside
/// the organisation key unless named) before it is handed out.
fn enrol_token(
    org_key: &Path,
    recipients: &Path,
    hours: u64,
    label: &str,
    register: Option<PathBuf>,
) -> Result<ExitCode, ExitCode> {
    let token =
        vault_admin::enrol_token(&read(org_key)?, &read(recipients)?, hours).map_err(fail)?;
    let register = register.unwrap_or_else(|| vault_admin::default_register(org_key));
    // Recorded before it is handed out: a token the register does not know
    // is one `nd7 admin machines` reports.
    vault_admin::register_token(&register, &token, label).map_err(fail)?;
    println!("{token}");
    Ok(ExitCode::SUCCESS)
}

/// `nd7 admin machines`: a line per machine and token, then the findings.
fn machines(
    url: &str,
    read_token: &str,
    trust: Trust,
    fingerprint: &str,
    register: &Path,
) -> Result<ExitCode, ExitCode> {
    let register = vault_admin::read_register(register).map_err(fail)?;
    let listed = vault_admin::list_machines(url, &trust, read_token, fingerprint, &register)
        .map_err(|e| match e {
            PullError::Finding(f) => {
                println!("{}", term(&f.to_string(), Lines::One));
                fault_code(f.fault)
            }
            PullError::Other(e) => fail(format!("machines: {e}")),
        })?;
    for line in &listed.lines {
        println!("{}", term(line, Lines::One));
    }
    Ok(ExitCode::from(print_findings(listed.findings)))
}

/// `nd7 admin sessions`: a line per session, a line per machine whose
/// tally vouches for its sessions, then the findings. Ids come from the
/// vault: shown inert (docs/vault.md).
/// The vault's sessions under a header, in aligned columns, or a line
/// saying it holds none.
fn print_sessions(listed: &[(String, String, u64)]) {
    let rows: Vec<[String; 3]> = listed
        .iter()
        .map(|(machine, session, last)| {
            [
                term(machine, Lines::One),
                term(session, Lines::One),
                format!("#{last}"),
            ]
        })
        .collect();
    if rows.is_empty() {
        println!("the vault holds no sessions yet");
        return;
    }
    let head = ["MACHINE", "SESSION", "LAST ENTRY"];
    let width = |i: usize| {
        rows.iter()
            .map(|r| r[i].chars().count())
            .chain([head[i].len()])
            .max()
            .unwrap_or(0)
    };
    let (m, s) = (width(0), width(1));
    println!("{:<m$}  {:<s$}  {}", head[0], head[1], head[2]);
    for [machine, session, last] in rows {
        println!("{machine:<m$}  {session:<s$}  {last}");
    }
}

fn sessions(
    url: &str,
    read_token: &str,
    trust: Trust,
    fingerprint: &str,
    seen: Option<&Path>,
) -> Result<ExitCode, ExitCode> {
    let listed = vault_admin::list_sessions(url, &trust, read_token, fingerprint, seen).map_err(
        |e| match e {
            PullError::Finding(f) => {
                println!("{}", term(&f.to_string(), Lines::One));
                fault_code(f.fault)
            }
            PullError::Other(e) => fail(format!("sessions: {e}")),
        },
    )?;
    // Ids come from the vault: shown inert (docs/vault.md).
    print_sessions(&listed.listed);
    for line in &listed.lines {
        println!("{}", term(line, Lines::One));
    }
    Ok(ExitCode::from(print_findings(listed.findings)))
}

/// Prints the findings; the exit status that says whose fault they are.
fn print_findings(findings: Vec<Finding>) -> u8 {
    for finding in &findings {
        println!("{}", term(&finding.to_string(), Lines::One));
    }
    Compared {
        findings,
        notes: Vec::new(),
    }
    .exit_code()
}

/// Prints a comparison's notes, then its findings, and exits with whose
/// fault they are.
fn print_compared(compared: Compared) -> ExitCode {
    for note in &compared.notes {
        println!("{}", term(note, Lines::One));
    }
    ExitCode::from(print_findings(compared.findings))
}

/// The vault a pull reads from, and the admin's identity that opens what
/// it holds.
struct Vault {
    url: String,
    trust: Trust,
    read_token: String,
    identity: AgeIdentity,
}

/// `nd7 admin pull`: the session's log, checked; its transcripts; and with
/// `--compare`, both held against the machine's copy.
fn pull(
    vault: &Vault,
    fingerprint: &str,
    machine: &str,
    session: &str,
    out: &Path,
    compare: Option<PathBuf>,
) -> Result<ExitCode, ExitCode> {
    let pulled = vault_admin::pull(
        &vault.url,
        &vault.trust,
        &vault.read_token,
        &vault.identity,
        fingerprint,
        machine,
        session,
        out,
    )
    .map_err(pull_failed)?;
    for note in &pulled.restores {
        println!("note: {}", term(note, Lines::One));
    }
    if !pulled.findings.is_empty() || pulled.batches.is_empty() {
        return pull_stopped(&pulled, compare.as_deref());
    }
    let dir = out.join(session);
    if let Some(code) = verify_pulled(&pulled, &dir)? {
        return Ok(code);
    }
    // The transcripts the session anchors, as the vault's pieces give them
    // back, checked against the anchors in the entries above.
    let transcripts = transcript::pull::pull(
        &vault.url,
        &vault.trust,
        &vault.read_token,
        &vault.identity,
        &pulled,
    )
    .map_err(pull_failed)?;
    restore_transcripts(&transcripts, &dir)?;
    for note in &transcripts.notes {
        println!("note: {}", term(note, Lines::One));
    }
    let Some(local) = compare else {
        return Ok(pulled_alone(&pulled, &transcripts));
    };
    let mut compared = vault_admin::compare(&pulled, &local).map_err(fail)?;
    transcript::pull::compare(&transcripts, &pulled, &local, &mut compared);
    compared
        .findings
        .extend(transcripts.findings.iter().cloned());
    Ok(print_compared(compared))
}

/// `nd7 admin pull` without --session: every session the vault lists (of
/// `machine` if given), each pulled as alone; the listing's findings too.
/// The exit status is the worst: 3 (the vault's doing), then 1, then 2.
fn pull_every(
    vault: &Vault,
    fingerprint: &str,
    machine: Option<&str>,
    out: &Path,
) -> Result<ExitCode, ExitCode> {
    let listed = vault_admin::list_sessions(
        &vault.url,
        &vault.trust,
        &vault.read_token,
        fingerprint,
        None,
    )
    .map_err(pull_failed)?;
    let chosen: Vec<&(String, String, u64)> = listed
        .listed
        .iter()
        .filter(|(m, _, _)| machine.is_none_or(|want| m == want))
        .collect();
    if chosen.is_empty() {
        let whose = machine.map_or(String::new(), |m| format!(" of machine {m}"));
        let none = format!("the vault holds no sessions{whose} yet");
        println!("{}", term(&none, Lines::One));
    }
    let mut codes = vec![ExitCode::from(print_findings(listed.findings))];
    for (m, session, _) in &chosen {
        let owners = chosen
            .iter()
            .filter(|(_, s, _)| one_place(s, session))
            .count();
        codes.push(if owners > 1 {
            shared_session(session, owners)
        } else {
            let head = format!("machine {m}, session {session}:");
            println!("{}", term(&head, Lines::One));
            pull(vault, fingerprint, m, session, out, None).unwrap_or_else(|code| code)
        });
    }
    Ok(worst(&codes))
}

/// Whether two session ids may name one directory: a case-insensitive
/// file system (macOS) takes `Shared` and `shared` for one.
fn one_place(a: &str, b: &str) -> bool {
    a == b || a.to_lowercase() == b.to_lowercase()
}

/// A session id several machines list is pulled for none (2): their copies
/// would be written to one OUT/<session>, where a machine could put its
/// copy over the one just checked of another.
fn shared_session(session: &str, owners: usize) -> ExitCode {
    let why = format!(
        "session {session} is listed for {owners} machines: not pulled; pull each alone, with --machine M --session {session} and its own --out"
    );
    println!("{}", term(&why, Lines::One));
    ExitCode::from(2)
}

/// The worst of several exit statuses: 3 (the vault's doing), then 1 (the
/// machine's), then 2 (an error), else 0.
fn worst(codes: &[ExitCode]) -> ExitCode {
    [3u8, 1, 2]
        .into_iter()
        .map(ExitCode::from)
        .find(|bad| codes.contains(bad))
        .unwrap_or(ExitCode::SUCCESS)
}

/// A pull that found something, or no batch: nothing was written out.
/// What the vault holds is still held against the machine's receipts, so
/// a vault that dropped the rest (or the whole session) is named even when
/// the machine's own batches disagree (3 wins over 1).
fn pull_stopped(pulled: &Pulled, compare: Option<&Path>) -> Result<ExitCode, ExitCode> {
    let (machine, session) = (&pulled.machine, &pulled.session);
    let Some(local) = compare else {
        if pulled.findings.is_empty() {
            return Err(fail(format!(
                "pull: the vault holds no batch of machine {machine}, session {session} (with --compare, the machine's receipts say whether it should)"
            )));
        }
        return Ok(ExitCode::from(print_findings(pulled.findings.clone())));
    };
    if pulled.batches.is_empty() && pulled.findings.is_empty() {
        println!("the vault holds no batch of machine {machine}, session {session}");
    }
    let mut compared = vault_admin::compare(pulled, local).map_err(fail)?;
    compared
        .findings
        .splice(0..0, pulled.findings.iter().cloned());
    Ok(print_compared(compared))
}

/// Verifies the pulled log's chain and says what was pulled; `Some(1)`
/// when the copy the machine signed does not verify.
fn verify_pulled(pulled: &Pulled, dir: &Path) -> Result<Option<ExitCode>, ExitCode> {
    let (machine, session) = (&pulled.machine, &pulled.session);
    let log = SessionLog::at_path(dir).map_err(fail)?;
    match log.verify(1) {
        Ok(v) => {
            println!(
                "pulled {} entries in {} batches into {}, every batch signed by machine {machine}; chain verified, head {}",
                v.entries,
                pulled.batches.len(),
                pulled.path.display(),
                v.head.map_or_else(|| "(empty)".into(), |h| h.short())
            );
            Ok(None)
        }
        Err(e) => {
            println!(
                "FAILED (the machine): machine {machine}, session {session}: the signed copy does not verify: {e}"
            );
            Ok(Some(ExitCode::from(1)))
        }
    }
}

/// Writes the restored transcripts into `<dir>/transcripts`, a line each.
fn restore_transcripts(
    transcripts: &transcript::pull::Transcripts,
    dir: &Path,
) -> Result<(), ExitCode> {
    if transcripts.files.is_empty() {
        return Ok(());
    }
    let tdir = dir.join("transcripts");
    std::fs::create_dir_all(&tdir)
        .map_err(|e| fail(format!("{}: cannot create: {e}", tdir.display())))?;
    for (n, r) in transcripts.files.iter().enumerate() {
        let file = tdir.join(transcript::pull::restored_name(n, r));
        let _ = std::fs::remove_file(&file);
        write_new_bytes_0600(&file, &r.bytes).map_err(fail)?;
        println!(
            "transcript {} (generation {}): {} bytes restored into {}, holding {} of its {} anchors",
            term(&r.path, Lines::One),
            r.generation,
            r.bytes.len(),
            file.display(),
            r.held,
            r.anchors
        );
    }
    Ok(())
}

/// A pull without `--compare`: the transcripts' findings decide, and a copy
/// without `session_end` gets a note.
fn pulled_alone(pulled: &Pulled, transcripts: &transcript::pull::Transcripts) -> ExitCode {
    let code = print_findings(transcripts.findings.clone());
    if code != 0 {
        return ExitCode::from(code);
    }
    if !pulled.ended {
        println!(
            "note: the vault's copy ends at entry {} without session_end; only the machine's receipt (--compare) can tell a dropped tail from a session still running",
            pulled.entries.saturating_sub(1)
        );
    }
    ExitCode::SUCCESS
}
