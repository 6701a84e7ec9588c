//! `nd7-vault team`: a team's vault in one directory, in one command, and
//! the commands to run on each machine and by the admin, printed whole and
//! labelled (ADR-0133).

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use nd7_core::read::safe::{Lines, term};
use nd7_core::vault_admin;
use nd7_core::vault_server::Database;

use super::{Team, new_key, open, read_token, store_err, when};

/// The files a team's directory holds, by name: the vault's under
/// `vault/`, which stays on the vault's host, and the admin's under
/// `admin/`, which leaves it (the vault must hold neither the identity
/// that opens sessions nor the key that lets machines in).
const VAULT_DIR: &str = "vault";
const ADMIN_DIR: &str = "admin";
const VAULT_DB: &str = "vault.db";
const ORG_KEY: &str = "org.key";
const ADMIN_IDENTITY: &str = "admin.age";
const RECIPIENTS: &str = "recipients";

/// What was made, for the summary.
struct Made {
    /// The vault's directory and the admin's.
    vault: PathBuf,
    admin: PathBuf,
    vault_key: String,
    fingerprint: String,
    recipient: String,
    valid_until: u64,
    read_token: String,
    read_expires: u64,
    /// (label, token) per machine.
    tokens: Vec<(String, String)>,
    token_expires: u64,
}

pub fn team(args: &Team, now: u64) -> Result<(), ExitCode> {
    if !(args.url.starts_with("https://") || args.url.starts_with("http://")) {
        eprintln!(
            "nd7-vault team: --url {}: give the URL machines reach the vault at, https://HOST:PORT",
            term(&args.url, Lines::One)
        );
        return Err(ExitCode::from(2));
    }
    check_labels(&args.machines)?;
    let dir = new_dir(&args.dir)?;
    let made = make(args, &dir, now).inspect_err(|_| {
        eprintln!(
            "nd7-vault team: stopped; what was made so far is in {} (remove it to start again)",
            dir.display()
        );
    })?;
    print_made(args, &made);
    Ok(())
}

/// Every label one line of text, without commas or control characters,
/// and no two alike: exit 2 naming the first that is not.
fn check_labels(labels: &[String]) -> Result<(), ExitCode> {
    for (n, label) in labels.iter().enumerate() {
        let bad = if label.trim().is_empty() {
            Some("is empty")
        } else if label.chars().any(char::is_control) {
            Some("holds a control character")
        } else if labels[..n].contains(label) {
            Some("is given twice")
        } else {
            None
        };
        if let Some(why) = bad {
            eprintln!(
                "nd7-vault team: --machines: the label {:?} {why}",
                term(label, Lines::One)
            );
            return Err(ExitCode::from(2));
        }
    }
    Ok(())
}

/// `dir`, created 0700 if missing, as an absolute path; exit 1 when it
/// already holds anything (nothing in it is touched), 2 when it cannot be
/// made or read.
fn new_dir(dir: &Path) -> Result<PathBuf, ExitCode> {
    let cannot = |what: &str, e: std::io::Error| {
        eprintln!("nd7-vault team: {}: cannot {what}: {e}", dir.display());
        ExitCode::from(2)
    };
    if std::fs::symlink_metadata(dir).is_err() {
        std::fs::DirBuilder::new()
            .mode(0o700)
            .recursive(true)
            .create(dir)
            .map_err(|e| cannot("create", e))?;
    }
    let mut entries = std::fs::read_dir(dir).map_err(|e| cannot("read", e))?;
    if let Some(entry) = entries.next() {
        let name = entry.map_err(|e| cannot("read", e))?.file_name();
        eprintln!(
            "nd7-vault team: {}: refused: it already holds {} (and maybe more); nd7-vault team makes a new vault and overwrites nothing: name a new or empty directory",
            dir.display(),
            term(&name.to_string_lossy(), Lines::One)
        );
        return Err(ExitCode::from(1));
    }
    std::fs::canonicalize(dir).map_err(|e| cannot("resolve", e))
}

fn admin_err(e: impl std::fmt::Display) -> ExitCode {
    eprintln!("nd7-vault team: {e}");
    ExitCode::from(2)
}

/// Writes `text` to a new file `path`, 0600, never over one.
fn write_new(path: &Path, text: &str) -> Result<(), ExitCode> {
    let fail = |e: std::io::Error| admin_err(format!("{}: cannot create: {e}", path.display()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(fail)?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(fail)
}

/// The keys, the document, the tokens: each written, then used.
fn make(args: &Team, dir: &Path, now: u64) -> Result<Made, ExitCode> {
    let (vault, admin) = (dir.join(VAULT_DIR), dir.join(ADMIN_DIR));
    for sub in [&vault, &admin] {
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(sub)
            .map_err(|e| admin_err(format!("{}: cannot create: {e}", sub.display())))?;
    }
    let db = vault.join(VAULT_DB);
    let mut key = db.clone().into_os_string();
    key.push(".key");
    let vault_key = new_key(Path::new(&key))?;
    let (org_text, fingerprint) = vault_admin::new_org_key().map_err(admin_err)?;
    let org_path = admin.join(ORG_KEY);
    write_new(&org_path, &org_text)?;
    let (identity, recipient) = vault_admin::new_age_identity().map_err(admin_err)?;
    write_new(&admin.join(ADMIN_IDENTITY), &identity)?;
    let valid_until = now.saturating_add(args.valid_days.saturating_mul(86_400));
    let doc = vault_admin::sign_recipients(
        &org_text,
        1,
        valid_until,
        &vault_key,
        std::slice::from_ref(&recipient),
    )
    .map_err(admin_err)?;
    write_new(&admin.join(RECIPIENTS), &doc)?;
    let mut store = open(&Database::Sqlite(db))?;
    store.set_recipients(&doc, now).map_err(store_err)?;
    let (read_token, read_expires) = read_token(store.as_mut(), args.read_token_days, now)?;
    let register = register_path(&org_path);
    let mut tokens = Vec::new();
    for label in &args.machines {
        let token =
            vault_admin::enrol_token(&org_text, &doc, args.token_hours).map_err(admin_err)?;
        vault_admin::register_token(&register, &token, label).map_err(admin_err)?;
        tokens.push((label.clone(), token));
    }
    Ok(Made {
        vault,
        admin,
        vault_key,
        fingerprint,
        recipient,
        valid_until,
        read_token,
        read_expires,
        tokens,
        token_expires: now.saturating_add(args.token_hours.saturating_mul(3600)),
    })
}

/// The register beside the organisation key, as `nd7 admin enroll-token`
/// names it by default.
fn register_path(org_key: &Path) -> PathBuf {
    let mut name = org_key.to_path_buf().into_os_string();
    name.push(".tokens");
    name.into()
}

/// `word` as a shell reads it back: as is when it holds only characters no
/// shell treats specially, else in single quotes.
pub fn quote(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./:@,+=%".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

fn path_word(path: &Path) -> String {
    quote(&path.to_string_lossy())
}

/// The summary: what was made, then what to run where, one labelled line
/// each. Labels and paths are the admin's own words, but still shown inert.
fn print_made(args: &Team, m: &Made) {
    let line = |label: &str, value: String| println!("{label:<18} {}", term(&value, Lines::One));
    line(
        "vault:",
        format!(
            "{} (its key: {}), to stay on this host",
            path_word(&m.vault.join(VAULT_DB)),
            path_word(&m.vault.join(format!("{VAULT_DB}.key")))
        ),
    );
    line("vault key:", format!("{} (public)", m.vault_key));
    line(
        "admin directory:",
        format!(
            "{}: move it off this host now, to the admin (the vault must not hold what opens the sessions nor what lets machines in), and keep the organisation key in it offline",
            path_word(&m.admin)
        ),
    );
    line(
        "organisation key:",
        format!("{ORG_KEY}, its register of tokens {ORG_KEY}.tokens"),
    );
    line("fingerprint:", m.fingerprint.clone());
    line(
        "admin identity:",
        format!(
            "{ADMIN_IDENTITY}, recipient {}: it alone opens the sessions; keep a copy",
            m.recipient
        ),
    );
    line(
        "recipients:",
        format!(
            "{RECIPIENTS}, version 1, installed, valid until {}",
            when(m.valid_until)
        ),
    );
    line(
        "read token:",
        format!("{} (expires {})", m.read_token, when(m.read_expires)),
    );
    println!();
    print_commands(args, m);
}

/// The commands, whole: run each where its heading says.
fn print_commands(args: &Team, m: &Made) {
    let url = quote(&args.url);
    let line = |label: &str, value: String| println!("{label:<18} {}", term(&value, Lines::One));
    let tls = if args.url.starts_with("https:") {
        " (add --tls-cert FILE --tls-key FILE, or serve it behind a TLS proxy)"
    } else {
        ""
    };
    println!("on this host, the vault{tls}:");
    line(
        "  serve:",
        format!(
            "nd7-vault serve --db {} --listen {}",
            path_word(&m.vault.join(VAULT_DB)),
            quote(&args.listen)
        ),
    );
    println!(
        "on each machine, once (each token lets one machine in, until {}); then `nd7 ship`, or the timer `nd7 setup` installs:",
        when(m.token_expires)
    );
    for (label, token) in &m.tokens {
        line(
            &format!("  enroll {label}:"),
            format!(
                "nd7 enroll {url} --token {token} --fingerprint {}",
                m.fingerprint
            ),
        );
    }
    let reader = format!(
        "{url} --read-token {} --fingerprint {}",
        m.read_token, m.fingerprint
    );
    println!("in the admin directory, wherever it is:");
    line("  sessions:", format!("nd7 admin sessions {reader}"));
    line(
        "  pull:",
        format!("nd7 admin pull {reader} --identity {ADMIN_IDENTITY} --out pulled"),
    );
    line(
        "  machines:",
        format!("nd7 admin machines {reader} --register {ORG_KEY}.tokens"),
    );
}
