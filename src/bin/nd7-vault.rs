//! `nd7-vault`: the vault server and its local admin commands. Parses
//! arguments and calls `nd7_core::vault_server`.
//!
//! Exit status: 0 success; 1 the input was refused (a recipients document
//! that does not verify); 2 bad usage, or the database or address could not
//! be opened.

// First: its print macros shadow the standard ones in everything below.
#[macro_use]
#[path = "nd7/out.rs"]
mod out;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use clap::{Parser, Subcommand};
use nd7_core::vault::{self, Recipients};
use nd7_core::vault_server::{self, Config, Store, sqlite::SqliteStore};

/// The nd7 vault: stores machines' encrypted session logs, and cannot read them.
#[derive(Parser)]
#[command(name = "nd7-vault", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve HTTP on ADDR. Put a TLS reverse proxy in front of it.
    ///
    /// Prints `listening on http://ADDR` once bound (port 0 picks a free
    /// port), then one line per request on stderr: method, path, status, time.
    Serve {
        #[arg(long, value_name = "FILE")]
        db: PathBuf,
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8407")]
        listen: String,
        /// Requests handled at once.
        #[arg(long, default_value_t = 4)]
        workers: usize,
    },
    /// Issue a one-time enrolment token for `nd7 enroll`.
    Token {
        #[arg(long, value_name = "FILE")]
        db: PathBuf,
        /// Hours until it expires.
        #[arg(long, default_value_t = 24)]
        hours: u64,
    },
    /// Issue a token for admin reads (`nd7 admin pull`, `nd7 admin sessions`).
    ReadToken {
        #[arg(long, value_name = "FILE")]
        db: PathBuf,
        /// Days until it expires.
        #[arg(long, default_value_t = 30)]
        days: u64,
    },
    /// Install a signed recipients document (from `nd7 admin sign-recipients`).
    ///
    /// Machines take it on their next ship if the organisation key they
    /// pinned signed it; new chain keys are wrapped to it from then on.
    Recipients {
        #[arg(long, value_name = "FILE")]
        db: PathBuf,
        /// The signed document.
        document: PathBuf,
    },
}

fn open(db: &Path) -> Result<SqliteStore, ExitCode> {
    SqliteStore::open(db).map_err(|e| {
        eprintln!("nd7-vault: {}: {e}", db.display());
        ExitCode::from(2)
    })
}

fn new_token() -> Result<String, ExitCode> {
    let mut bytes = [0u8; 20];
    getrandom::getrandom(&mut bytes).map_err(|e| {
        eprintln!("nd7-vault: no randomness from the operating system: {e}");
        ExitCode::from(2)
    })?;
    Ok(vault::hex(&bytes))
}

/// Stores a new token of `kind` that expires at `expires` (Unix seconds), and
/// prints it: the only time it is shown.
fn issue_token(db: &Path, kind: &str, expires: u64) -> Result<(), ExitCode> {
    let mut store = open(db)?;
    let token = new_token()?;
    store
        .add_token(kind, &vault_server::token_hash(&token), expires)
        .map_err(|e| {
            eprintln!("nd7-vault: {e}");
            ExitCode::from(2)
        })?;
    println!("{token}");
    Ok(())
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
        Command::Serve {
            db,
            listen,
            workers,
        } => {
            let store = open(&db)?;
            let server = tiny_http::Server::http(&listen).map_err(|e| {
                eprintln!("nd7-vault: cannot listen on {listen}: {e}");
                ExitCode::from(2)
            })?;
            let addr = server.server_addr().to_ip().map(|a| a.to_string());
            println!("listening on http://{}", addr.unwrap_or(listen));
            let _ = std::io::stdout().flush();
            let config = Config {
                workers,
                ..Config::default()
            };
            vault_server::serve(
                server,
                Box::new(store),
                config,
                Arc::new(AtomicBool::new(false)),
                |line| eprintln!("{line}"),
            );
            Ok(())
        }
        Command::Token { db, hours } => issue_token(&db, "enrol", now + hours * 3600),
        Command::ReadToken { db, days } => issue_token(&db, "read", now + days * 86400),
        Command::Recipients { db, document } => {
            let text = std::fs::read_to_string(&document).map_err(|e| {
                eprintln!("nd7-vault: {}: cannot read: {e}", document.display());
                ExitCode::from(2)
            })?;
            let doc = Recipients::parse(&text).map_err(|e| {
                eprintln!("nd7-vault: {}: refused: {e}", document.display());
                ExitCode::from(1)
            })?;
            let mut store = open(&db)?;
            store.set_recipients(&text, now).map_err(|e| {
                eprintln!("nd7-vault: {e}");
                ExitCode::from(2)
            })?;
            println!(
                "installed: {} recipients, signed by the organisation key {}",
                doc.recipients.len(),
                doc.org.fingerprint()
            );
            Ok(())
        }
    }
}
