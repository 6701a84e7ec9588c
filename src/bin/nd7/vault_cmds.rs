//! `nd7 enroll`, `nd7 ship` and `nd7 admin`: argument handling and exit
//! statuses; the work is `nd7_core::ship`'s and `nd7_core::vault_admin`'s.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::ExitCode;

use nd7_core::cli::Admin;
use nd7_core::http_client::Trust;
use nd7_core::read::safe::{Lines, term};
use nd7_core::session_log::{self, SessionLog};
use nd7_core::ship::{self, ShipError};
use nd7_core::transcript;
use nd7_core::vault::AgeIdentity;
use nd7_core::vault_admin::{self, Fault, PullError};

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
    for (session, result) in &report.sessions {
        match result {
            Ok(done) => {
                entries += done.entries;
                batches += done.batches;
                pieces += done.transcript_pieces;
                transcript_bytes += done.transcript_bytes;
            }
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
    if !report.not_tried.is_empty() {
        eprintln!(
            "nd7 ship: stopped: the vault refused more from this machine today (quota); {} more session(s) not tried",
            report.not_tried.len()
        );
    }
    let transcripts = if pieces > 0 {
        format!(", {transcript_bytes} transcript bytes in {pieces} pieces")
    } else {
        String::new()
    };
    println!(
        "shipped {entries} entries in {batches} batches{transcripts}; {} sessions, {} not fully shipped",
        report.sessions.len() + report.not_tried.len(),
        failed + report.not_tried.len()
    );
    if report.vault_broke() {
        ExitCode::from(3)
    } else if report.all_shipped() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
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
        Fault::Machine => ExitCode::from(1),
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
        } => {
            let token = vault_admin::enrol_token(&read(&org_key)?, &read(&recipients)?, hours)
                .map_err(fail)?;
            let register = register.unwrap_or_else(|| {
                let mut name = org_key.clone().into_os_string();
                name.push(".tokens");
                name.into()
            });
            // Recorded before it is handed out: a token the register does
            // not know is one `nd7 admin machines` reports.
            vault_admin::register_token(&register, &token, &label).map_err(fail)?;
            println!("{token}");
            Ok(ExitCode::SUCCESS)
        }
        Admin::Machines {
            url,
            read_token,
            ca_cert,
            fingerprint,
            register,
        } => {
            let register = vault_admin::read_register(&register).map_err(fail)?;
            let listed = vault_admin::list_machines(
                &url,
                &trust(ca_cert),
                &read_token,
                &fingerprint,
                &register,
            )
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
            for finding in &listed.findings {
                println!("{}", term(&finding.to_string(), Lines::One));
            }
            Ok(ExitCode::from(
                vault_admin::Compared {
                    findings: listed.findings,
                    notes: Vec::new(),
                }
                .exit_code(),
            ))
        }
        Admin::Sessions {
            url,
            read_token,
            ca_cert,
        } => {
            // Ids come from the vault: shown inert (docs/vault.md).
            for (machine, session, last) in
                vault_admin::list_sessions(&url, &trust(ca_cert), &read_token).map_err(fail)?
            {
                println!(
                    "{} {} {last}",
                    term(&machine, Lines::One),
                    term(&session, Lines::One)
                );
            }
            Ok(ExitCode::SUCCESS)
        }
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
            let trust = trust(ca_cert);
            let pulled = vault_admin::pull(
                &url,
                &trust,
                &read_token,
                &identity,
                &fingerprint,
                &machine,
                &session,
                &out,
            )
            .map_err(pull_failed)?;
            for note in &pulled.restores {
                println!("note: {}", term(note, Lines::One));
            }
            if !pulled.findings.is_empty() || pulled.batches.is_empty() {
                // Nothing was written out; what the vault holds is still
                // held against the machine's receipts, so a vault that
                // dropped the rest (or the whole session) is named even
                // when the machine's own batches disagree (3 wins over 1).
                let Some(local) = compare else {
                    if pulled.findings.is_empty() {
                        return Err(fail(format!(
                            "pull: the vault holds no batch of machine {machine}, session {session} (with --compare, the machine's receipts say whether it should)"
                        )));
                    }
                    for finding in &pulled.findings {
                        println!("{}", term(&finding.to_string(), Lines::One));
                    }
                    return Ok(ExitCode::from(
                        vault_admin::Compared {
                            findings: pulled.findings.clone(),
                            notes: Vec::new(),
                        }
                        .exit_code(),
                    ));
                };
                if pulled.batches.is_empty() && pulled.findings.is_empty() {
                    println!("the vault holds no batch of machine {machine}, session {session}");
                }
                let mut compared = vault_admin::compare(&pulled, &local).map_err(fail)?;
                compared
                    .findings
                    .splice(0..0, pulled.findings.iter().cloned());
                for note in &compared.notes {
                    println!("{}", term(note, Lines::One));
                }
                for finding in &compared.findings {
                    println!("{}", term(&finding.to_string(), Lines::One));
                }
                return Ok(ExitCode::from(compared.exit_code()));
            }
            let events = pulled.path.clone();
            let dir = out.join(&session);
            let log = SessionLog::at_path(&dir).map_err(fail)?;
            match log.verify(1) {
                Ok(v) => println!(
                    "pulled {} entries in {} batches into {}, every batch signed by machine {machine}; chain verified, head {}",
                    v.entries,
                    pulled.batches.len(),
                    events.display(),
                    v.head.map_or_else(|| "(empty)".into(), |h| h.short())
                ),
                Err(e) => {
                    println!(
                        "FAILED (the machine): machine {machine}, session {session}: the signed copy does not verify: {e}"
                    );
                    return Ok(ExitCode::from(1));
                }
            }
            // The transcripts the session anchors, as the vault's pieces give
            // them back, checked against the anchors in the entries above.
            let transcripts = transcript::pull::pull(&url, &trust, &read_token, &identity, &pulled)
                .map_err(pull_failed)?;
            if !transcripts.files.is_empty() {
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
            }
            for note in &transcripts.notes {
                println!("note: {}", term(note, Lines::One));
            }
            let Some(local) = compare else {
                for finding in &transcripts.findings {
                    println!("{}", term(&finding.to_string(), Lines::One));
                }
                let transcript_code = vault_admin::Compared {
                    findings: transcripts.findings.clone(),
                    notes: Vec::new(),
                }
                .exit_code();
                if transcript_code != 0 {
                    return Ok(ExitCode::from(transcript_code));
                }
                if !pulled.ended {
                    println!(
                        "note: the vault's copy ends at entry {} without session_end; only the machine's receipt (--compare) can tell a dropped tail from a session still running",
                        pulled.entries.saturating_sub(1)
                    );
                }
                return Ok(ExitCode::SUCCESS);
            };
            let mut compared = vault_admin::compare(&pulled, &local).map_err(fail)?;
            transcript::pull::compare(&transcripts, &pulled, &local, &mut compared);
            compared
                .findings
                .extend(transcripts.findings.iter().cloned());
            for note in &compared.notes {
                println!("{}", term(note, Lines::One));
            }
            for finding in &compared.findings {
                println!("{}", term(&finding.to_string(), Lines::One));
            }
            Ok(ExitCode::from(compared.exit_code()))
        }
    }
}
