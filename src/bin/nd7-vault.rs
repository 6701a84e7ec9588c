//! `nd7-vault`: the vault server and its local admin commands. Parses
//! arguments and calls `nd7_core::vault_server`.
//!
//! Exit status: 0 success; 1 the input was refused (a recipients document
//! that does not verify, names another vault key, or is not newer than the
//! installed one; a machine or read token to revoke that does not exist;
//! a `team` directory that already holds something); 2 bad usage, or the
//! database, key, certificate or address could not be opened.

// First: its print macros shadow the standard ones in everything below.
#[macro_use]
#[path = "nd7/out.rs"]
mod out;

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use nd7_core::read::safe::{Lines, term};
use nd7_core::vault::{self, Recipients, Secret32, SigningKey, Update};
use nd7_core::vault_server::http::{self, TlsFiles};
use nd7_core::vault_server::routes::{self, Limits};
use nd7_core::vault_server::{self, Database, Quota, Store};

/// The nd7 vault: stores machines' encrypted session logs, and cannot read them.
#[derive(Parser)]
#[command(name = "nd7-vault", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Where the data and the vault's key are.
#[derive(clap::Args)]
struct Db {
    /// The database: a SQLite file (created if missing, 0600), or a
    /// PostgreSQL URL (`postgres://USER@HOST/DB`; its tables are created
    /// on first use).
    #[arg(long, value_name = "FILE|URL")]
    db: OsString,
    /// The vault's signing key [default: <db>.key for a SQLite file; needed
    /// for PostgreSQL].
    #[arg(long, value_name = "FILE")]
    key: Option<PathBuf>,
}

impl Db {
    fn database(&self) -> Database {
        Database::parse(&self.db)
    }

    fn key_path(&self) -> Result<PathBuf, ExitCode> {
        if let Some(k) = &self.key {
            return Ok(k.clone());
        }
        match self.database() {
            Database::Sqlite(path) => Ok(sqlite_key(&path)),
            Database::Postgres(_) => {
                eprintln!(
                    "nd7-vault: with a PostgreSQL database, name the vault's key with --key FILE"
                );
                Err(ExitCode::from(2))
            }
        }
    }
}

/// Just the database, for commands that do not sign anything.
#[derive(clap::Args)]
struct DbOnly {
    /// The database: a SQLite file, or a PostgreSQL URL.
    #[arg(long, value_name = "FILE|URL")]
    db: OsString,
}

#[derive(Subcommand)]
enum Command {
    Team(Team),
    /// Serve HTTP (or HTTPS with --tls-cert and --tls-key) on ADDR.
    ///
    /// Prints `listening on http://ADDR` (or https) once bound (port 0
    /// picks a free port), then one line per request on stderr: method,
    /// path, status, time, and for a refusal what it concerned. Needs the
    /// vault's key (`nd7-vault key`). SIGTERM finishes the requests in
    /// progress and exits; SIGHUP reads the certificate and key again.
    /// Several servers may share one PostgreSQL database.
    Serve(Box<Serve>),
    /// Make the vault's signing key (0600, refuses to overwrite); print its public key.
    ///
    /// The key countersigns what the vault stores. Admins name its public
    /// key in the recipients document (`nd7 admin sign-recipients
    /// --vault-key`), which is how machines pin it. Servers sharing a
    /// database share the key.
    Key {
        #[command(flatten)]
        db: Db,
    },
    /// Issue a token for admin reads (`nd7 admin pull`, `nd7 admin sessions`).
    ///
    /// Prints the token. The vault keeps only its hash, and names it by an
    /// id (`read-tokens`); `revoke read-token` takes either.
    ReadToken {
        #[command(flatten)]
        db: DbOnly,
        /// Days until it expires.
        #[arg(long, default_value_t = 30)]
        days: u64,
    },
    /// List read tokens: id, issued, expires, revoked.
    ReadTokens {
        #[command(flatten)]
        db: DbOnly,
    },
    /// List enrolled machines: id, enrolled, revoked, key.
    Machines {
        #[command(flatten)]
        db: DbOnly,
    },
    /// List refused forking batches: machine, session, entries, when, why.
    ///
    /// A machine whose log was rewritten after shipping, and then shipped,
    /// shows up here.
    Forks {
        #[command(flatten)]
        db: DbOnly,
    },
    /// Revoke a machine or a read token; it is refused from its next request on.
    ///
    /// What a revoked machine shipped stays, and `nd7 admin pull` still
    /// checks it against its enrolment record.
    Revoke {
        #[command(flatten)]
        db: DbOnly,
        #[command(subcommand)]
        what: Revoke,
    },
    /// Install a signed recipients document (from `nd7 admin sign-recipients`).
    ///
    /// Refuses a document that names another vault key than this vault's,
    /// whose version is not above the installed one, or whose validity ran out. Machines take it on
    /// their next ship if the organisation key they pinned signed it.
    Recipients {
        #[command(flatten)]
        db: Db,
        /// The signed document.
        document: PathBuf,
    },
    /// Declare that the database was restored from a backup taken at SECS.
    ///
    /// Signs a restore notice that machines fetch: receipts they hold for
    /// batches stored after the backup and lost in the restore are moved to
    /// `receipts.lost` on each machine, and those entries are shipped again.
    Restored {
        #[command(flatten)]
        db: Db,
        /// When the backup was taken, in Unix seconds (e.g. `stat -c %Y backup.db`).
        #[arg(long, value_name = "SECS")]
        backup_taken: u64,
    },
}

/// Set up a team's vault in DIR in one go, and print what to run where.
///
/// Makes the vault's database and key in DIR/vault; in DIR/admin, to move
/// off this host at once, the organisation key (to keep offline) and its
/// register, one admin's age identity and the recipients document naming
/// that admin (signed, and installed); a read token, and one enrolment
/// token per machine. Then prints each key, token and id on a labelled
/// line, and the commands whole: `nd7-vault serve` here, `nd7 enroll` on
/// each machine, `nd7 admin sessions`, `pull` and `machines` in the admin
/// directory. Refuses (exit 1, nothing written) a DIR that already holds
/// anything; the steps one at a time are in docs/vault.md.
#[derive(clap::Args)]
struct Team {
    /// The directory to make it all in (created 0700 if missing; must be empty).
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
    /// The URL machines and admins reach the vault at (`https://HOST:PORT`).
    #[arg(long, value_name = "URL")]
    url: String,
    /// The machines to enrol, by label (a host, a person), comma-separated:
    /// one enrolment token each.
    #[arg(long, value_name = "LABEL,...", value_delimiter = ',', required = true)]
    machines: Vec<String>,
    /// Where the printed `nd7-vault serve` command listens.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8407")]
    listen: String,
    /// Hours the enrolment tokens stay valid.
    #[arg(long, value_name = "HOURS", default_value_t = 72)]
    token_hours: u64,
    /// Days the read token stays valid.
    #[arg(long, value_name = "DAYS", default_value_t = 30)]
    read_token_days: u64,
    /// Days the recipients document stays valid (sign and install a newer
    /// version before: docs/vault.md, "Rotating recipients").
    #[arg(long, value_name = "DAYS", default_value_t = 90, value_parser = clap::value_parser!(u64).range(1..=3660))]
    valid_days: u64,
}

// `nd7-vault serve`'s arguments (its help is the variant's doc comment).
#[derive(clap::Args)]
struct Serve {
    #[command(flatten)]
    db: Db,
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8407")]
    listen: String,
    /// The certificate chain to present (PEM), for TLS built in.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Storage threads, each with its own database connection.
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// Connections open at once [default: 4096, or fewer if the file
    /// descriptor limit is lower]. When all are open, a new one evicts the
    /// oldest anonymous connection (none of its requests yet signed by an
    /// enrolled machine or carrying a read token) not answering a known
    /// machine's request.
    #[arg(long, value_name = "N")]
    max_connections: Option<usize>,
    /// Of those, how many are kept for connections a signed request or a
    /// read token proved [default: a quarter of --max-connections].
    #[arg(long, value_name = "N")]
    reserved_connections: Option<usize>,
    /// Connections one peer address may hold at once; more are closed
    /// (0: no bound, for a vault behind a proxy, whose address every
    /// connection has).
    #[arg(long, value_name = "N", default_value_t = http::Config::default().max_connections_per_peer)]
    max_connections_per_peer: usize,
    /// Seconds a new connection may go before its first byte.
    #[arg(long, value_name = "SECS", default_value_t = 5)]
    first_byte_timeout: u64,
    /// Seconds a request's headers may take (and a connection may sit idle).
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    header_timeout: u64,
    /// Bytes of request line and headers.
    #[arg(long, value_name = "BYTES", default_value_t = http::Config::default().max_header_bytes)]
    max_header_bytes: usize,
    /// Seconds a request body may go without a byte arriving.
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    body_timeout: u64,
    /// Seconds a whole request body may take.
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    body_deadline: u64,
    /// Bytes of request bodies held at once, over all requests.
    #[arg(long, value_name = "BYTES", default_value_t = http::Config::default().body_budget)]
    body_budget: usize,
    /// Bytes of request bodies held at once for one machine.
    #[arg(long, value_name = "BYTES", default_value_t = http::Config::default().machine_budget)]
    machine_body_budget: usize,
    /// Requests handed to storage and not answered yet.
    #[arg(long, value_name = "N", default_value_t = http::Config::default().max_in_flight)]
    max_in_flight: usize,
    /// Seconds a request waits for a storage thread or body room before 503.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    queue_wait: u64,
    /// Seconds a write to a peer that stopped reading may wait.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    write_timeout: u64,
    /// Seconds SIGTERM waits for requests in progress.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    shutdown_grace: u64,
    /// Entries one machine may store a day (UTC).
    #[arg(long, value_name = "N", default_value_t = Quota::default().entries_per_day)]
    entries_per_day: u64,
    /// Bytes of batches one machine may store a day (UTC).
    #[arg(long, value_name = "N", default_value_t = Quota::default().bytes_per_day)]
    bytes_per_day: u64,
    /// Requests one machine may make in 10 minutes.
    #[arg(long, value_name = "N", default_value_t = Limits::default().requests_per_window)]
    requests_per_10min: u64,
}

#[derive(Subcommand)]
enum Revoke {
    /// A machine, by its id (`nd7-vault machines`).
    Machine { id: String },
    /// A read token, by its id (`nd7-vault read-tokens`) or the token itself.
    ReadToken { id: String },
}

fn open(db: &Database) -> Result<Box<dyn Store>, ExitCode> {
    db.open().map_err(|e| {
        eprintln!("nd7-vault: {}: {e}", term(&db.describe(), Lines::One));
        ExitCode::from(2)
    })
}

fn random<const N: usize>() -> Result<[u8; N], ExitCode> {
    let mut bytes = [0u8; N];
    getrandom::getrandom(&mut bytes).map_err(|e| {
        eprintln!("nd7-vault: no randomness from the operating system: {e}");
        ExitCode::from(2)
    })?;
    Ok(bytes)
}

fn load_key(db: &Db) -> Result<SigningKey, ExitCode> {
    let path = db.key_path()?;
    let text = std::fs::read_to_string(&path).map_err(|e| {
        eprintln!(
            "nd7-vault: {}: cannot read the vault's key: {e} (make it with `nd7-vault key`)",
            path.display(),
        );
        ExitCode::from(2)
    })?;
    let seed = vault::parse_secret_text(&text, "the vault key").map_err(|e| {
        eprintln!("nd7-vault: {}: {e}", path.display());
        ExitCode::from(2)
    })?;
    Ok(SigningKey::from_seed(&seed))
}

fn store_err(e: impl std::fmt::Display) -> ExitCode {
    eprintln!("nd7-vault: {e}");
    ExitCode::from(2)
}

/// A Unix time as people read it (UTC).
fn when(unix: u64) -> String {
    jiff::Timestamp::from_second(unix as i64)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_else(|_| unix.to_string())
}

/// Raises the soft limit on open files to the hard one, so the connection
/// bound, not the default 1024, decides how many peers are served; returns
/// the limit in force.
fn raise_file_limit() -> u64 {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        let _ = setrlimit(Resource::Nofile, limit);
    }
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

fn main() -> ExitCode {
    match run(Cli::parse().command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(code) => code,
    }
}

fn run(command: Command) -> Result<(), ExitCode> {
    let now = vault_server::unix_now();
    match command {
        Command::Team(args) => team::team(&args, now),
        Command::Serve(args) => serve(*args),
        Command::Key { db } => key(&db),
        Command::ReadToken { db, days } => {
            let mut store = open(&Database::parse(&db.db))?;
            let (token, _) = read_token(store.as_mut(), days, now)?;
            println!("{token}");
            Ok(())
        }
        Command::ReadTokens { db } => read_tokens(&db, now),
        Command::Machines { db } => machines(&db),
        Command::Forks { db } => forks(&db),
        Command::Revoke { db, what } => revoke(&db, what, now),
        Command::Recipients { db, document } => recipients(&db, &document, now),
        Command::Restored { db, backup_taken } => {
            let key = load_key(&db)?;
            let mut store = open(&db.database())?;
            let notice = routes::restore_notice(&key, backup_taken, now);
            store.add_restore(&notice, now).map_err(store_err)?;
            print!("{notice}");
            Ok(())
        }
    }
}

/// `nd7-vault serve`: binds, then serves until SIGTERM.
fn serve(args: Serve) -> Result<(), ExitCode> {
    let key = load_key(&args.db)?;
    let database = args.db.database();
    let files = match (args.tls_cert.clone(), args.tls_key.clone()) {
        (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
        _ => None,
    };
    let nofile = raise_file_limit();
    let listen = &args.listen;
    let listener = std::net::TcpListener::bind(listen).map_err(|e| {
        eprintln!("nd7-vault: cannot listen on {listen}: {e}");
        ExitCode::from(2)
    })?;
    // A deeper queue for bursts than std's default.
    let _ = rustix::net::listen(&listener, 4096);
    let addr = listener
        .local_addr()
        .map_or(listen.clone(), |a| a.to_string());
    let config = http_config(&args, nofile);
    let limits = Limits {
        quota: Quota {
            entries_per_day: args.entries_per_day,
            bytes_per_day: args.bytes_per_day,
        },
        requests_per_window: args.requests_per_10min,
    };
    let vault = routes::Vault::new(key, vault_server::unix_now, limits);
    let log: http::Log = Arc::new(|line: &str| eprintln!("{line}"));
    let scheme = if files.is_some() { "https" } else { "http" };
    // Printed once the database and the certificate are open.
    let ready = || {
        println!("listening on {scheme}://{addr}");
        let _ = std::io::stdout().flush();
    };
    http::serve(listener, &database, vault, config, files, log, ready).map_err(|e| {
        eprintln!("nd7-vault: {}: {e}", term(&database.describe(), Lines::One));
        ExitCode::from(2)
    })
}

/// The server's bounds from `serve`'s arguments, each at least its floor;
/// connections bounded by the open-file limit `nofile` unless given.
fn http_config(args: &Serve, nofile: u64) -> http::Config {
    let secs = |s: u64| Duration::from_secs(s.max(1));
    let max_connections = args
        .max_connections
        .unwrap_or_else(|| 4096.min(nofile.saturating_sub(64).max(16) as usize));
    http::Config {
        workers: args.workers.max(1),
        max_connections,
        reserved_connections: args
            .reserved_connections
            .unwrap_or(max_connections / 4)
            .min(max_connections.saturating_sub(1)),
        max_connections_per_peer: args.max_connections_per_peer,
        first_byte_timeout: secs(args.first_byte_timeout),
        header_timeout: secs(args.header_timeout),
        max_header_bytes: args.max_header_bytes.max(1024),
        body_stall: secs(args.body_timeout),
        body_deadline: secs(args.body_deadline),
        body_budget: args.body_budget.max(vault::MAX_BODY_BYTES),
        machine_budget: args.machine_body_budget.max(vault::MAX_BODY_BYTES),
        max_in_flight: args.max_in_flight.max(1),
        queue_wait: secs(args.queue_wait),
        write_stall: secs(args.write_timeout),
        shutdown_grace: secs(args.shutdown_grace),
    }
}

/// Where a SQLite database's vault key is kept by default: `<db>.key`.
fn sqlite_key(db: &Path) -> PathBuf {
    let mut name = db.to_path_buf().into_os_string();
    name.push(".key");
    PathBuf::from(name)
}

/// A new read token, kept (hashed) in `store`: the token, and when it expires.
fn read_token(store: &mut dyn Store, days: u64, now: u64) -> Result<(String, u64), ExitCode> {
    let token = vault::hex(&random::<20>()?);
    let expires = now.saturating_add(days.saturating_mul(86400));
    store
        .add_token(&vault_server::token_hash(&token), now, expires)
        .map_err(store_err)?;
    Ok((token, expires))
}

/// `nd7-vault key`: a new signing key, 0600, never over an old one.
fn key(db: &Db) -> Result<(), ExitCode> {
    println!("{}", new_key(&db.key_path()?)?);
    Ok(())
}

/// Writes a new vault key to `path` (0600, never over a file); its public
/// key in hex.
fn new_key(path: &Path) -> Result<String, ExitCode> {
    let seed = Secret32::from_bytes(random()?);
    let public = SigningKey::from_seed(&seed).public().to_hex();
    let text = format!(
        "# nd7 vault key (Ed25519 seed); public key {public}\n{}\n",
        vault::hex(seed.expose_secret())
    );
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| {
            eprintln!("nd7-vault: {}: cannot create: {e}", path.display());
            ExitCode::from(2)
        })?;
    f.write_all(text.as_bytes()).map_err(|e| {
        eprintln!("nd7-vault: {}: cannot write: {e}", path.display());
        ExitCode::from(2)
    })?;
    Ok(public)
}

fn read_tokens(db: &DbOnly, now: u64) -> Result<(), ExitCode> {
    let mut store = open(&Database::parse(&db.db))?;
    for t in store.tokens().map_err(store_err)? {
        let state = match t.revoked {
            Some(at) => format!("revoked {}", when(at)),
            None if t.expires < now => "expired".to_string(),
            None => "valid".to_string(),
        };
        println!(
            "{} issued {} expires {} {state}",
            t.id,
            when(t.created),
            when(t.expires)
        );
    }
    Ok(())
}

fn machines(db: &DbOnly) -> Result<(), ExitCode> {
    let mut store = open(&Database::parse(&db.db))?;
    for m in store.machines().map_err(store_err)? {
        let state = match m.revoked {
            Some(at) => format!("revoked {}", when(at)),
            None => "active".to_string(),
        };
        println!(
            "{} enrolled {} {state} key {}",
            term(&m.id, Lines::One),
            when(m.enrolled),
            m.enrolment.key.to_hex()
        );
    }
    Ok(())
}

fn forks(db: &DbOnly) -> Result<(), ExitCode> {
    let mut store = open(&Database::parse(&db.db))?;
    for f in store.forks().map_err(store_err)? {
        println!(
            "{}",
            term(
                &format!(
                    "machine {} session {} entries {}..{} refused {}: {}",
                    f.machine,
                    f.session,
                    f.first,
                    f.last,
                    when(f.seen),
                    f.reason
                ),
                Lines::One
            )
        );
    }
    Ok(())
}

/// `nd7-vault revoke`: 1 when there is no such machine or token.
fn revoke(db: &DbOnly, what: Revoke, now: u64) -> Result<(), ExitCode> {
    let mut store = open(&Database::parse(&db.db))?;
    let (kind, id, done) = match what {
        Revoke::Machine { id } => {
            let done = store.revoke_machine(&id, now).map_err(store_err)?;
            ("machine", id, done)
        }
        Revoke::ReadToken { id } => {
            // The token itself works too: its id is its hash's start.
            let key = if id.len() > 16 {
                vault_server::token_id(&vault_server::token_hash(&id))
            } else {
                id.clone()
            };
            let done = store.revoke_token(&key, now).map_err(store_err)?;
            ("read token", key, done)
        }
    };
    if !done {
        eprintln!(
            "nd7-vault: no {kind} {} (see `nd7-vault {}`)",
            term(&id, Lines::One),
            if kind == "machine" {
                "machines"
            } else {
                "read-tokens"
            }
        );
        return Err(ExitCode::from(1));
    }
    println!(
        "revoked {kind} {}: refused from its next request on",
        term(&id, Lines::One)
    );
    Ok(())
}

/// `nd7-vault recipients`: installs a document that is in force, names this
/// vault's key, and is newer than the installed one by the same
/// organisation key; 1 when refused.
fn recipients(db: &Db, document: &Path, now: u64) -> Result<(), ExitCode> {
    let text = std::fs::read_to_string(document).map_err(|e| {
        eprintln!("nd7-vault: {}: cannot read: {e}", document.display());
        ExitCode::from(2)
    })?;
    let refused = |why: String| {
        eprintln!("nd7-vault: {}: refused: {why}", document.display());
        ExitCode::from(1)
    };
    let doc = Recipients::parse(&text).map_err(|e| refused(e.to_string()))?;
    if doc.expired(now) {
        return Err(refused(format!(
            "its validity ran out at {} (valid-until {}): sign a new version",
            when(doc.valid_until),
            doc.valid_until
        )));
    }
    let ours = load_key(db)?.public();
    if doc.vault != ours {
        return Err(refused(format!(
            "it names vault key {}, but this vault's key is {}",
            doc.vault.to_hex(),
            ours.to_hex()
        )));
    }
    let mut store = open(&db.database())?;
    if let Some(installed) = store.recipients().map_err(store_err)? {
        let installed = Recipients::parse(&installed).map_err(store_err)?;
        if installed.org != doc.org {
            return Err(refused(format!(
                "it is signed by the organisation key {}, the installed one by {}",
                doc.org.fingerprint(),
                installed.org.fingerprint()
            )));
        }
        match installed.update_to(&doc) {
            Update::Newer => {}
            Update::Same => {
                println!("already installed: version {}", doc.version);
                return Ok(());
            }
            Update::Refused(_) => {
                return Err(refused(format!(
                    "its version {} is not above the installed version {}",
                    doc.version, installed.version
                )));
            }
        }
    }
    store.set_recipients(&text, now).map_err(store_err)?;
    println!(
        "installed version {}: {} recipients, signed by the organisation key {}",
        doc.version,
        doc.recipients.len(),
        doc.org.fingerprint()
    );
    Ok(())
}

/// `nd7-vault team`: a team's vault in one directory, in one command, and
/// the commands to run on each machine and by the admin, printed whole and
/// labelled (ADR-0133).
mod team {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    use std::path::{Path, PathBuf};
    use std::process::ExitCode;

    use nd7_core::read::safe::{Lines, term};
    use nd7_core::vault_admin;
    use nd7_core::vault_server::Database;

    use super::{Team, new_key, open, read_token, sqlite_key, store_err, when};

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
        writable_by_others(dir).map_err(|e| cannot("read", e))??;
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

    /// Exit 1 when others than its owner can write `dir`: another user
    /// could move `admin/` aside while the keys are written into it and
    /// put a link to a directory of theirs in its place.
    fn writable_by_others(dir: &Path) -> std::io::Result<Result<(), ExitCode>> {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir)?.permissions().mode();
        if mode & 0o022 == 0 {
            return Ok(Ok(()));
        }
        eprintln!(
            "nd7-vault team: {}: refused: others can write it (mode {:o}), and could swap what is made in it for their own; name a directory only you can write (chmod go-w)",
            dir.display(),
            mode & 0o7777
        );
        Ok(Err(ExitCode::from(1)))
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
        let vault_key = new_key(&sqlite_key(&db))?;
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
        let register = vault_admin::default_register(&org_path);
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

    /// `word` as a shell reads it back: as is when it holds only characters no
    /// shell treats specially, else in single quotes.
    fn quote(word: &str) -> String {
        nd7_core::shell_prefix::shell_word(word, |c| {
            c.is_ascii_alphanumeric() || "_-./:@,+=%".contains(c)
        })
    }

    /// One line of the summary: its label, then its value, both inert.
    fn line(label: &str, value: String) {
        println!(
            "{:<18} {}",
            term(label, Lines::One),
            term(&value, Lines::One)
        );
    }

    fn path_word(path: &Path) -> String {
        quote(&path.to_string_lossy())
    }

    /// The summary: what was made, then what to run where, one labelled line
    /// each. Labels and paths are the admin's own words, but still shown inert.
    fn print_made(args: &Team, m: &Made) {
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
}
