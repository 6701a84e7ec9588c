//! `nd7-vault`: the vault server and its local admin commands. Parses
//! arguments and calls `nd7_core::vault_server`.
//!
//! Exit status: 0 success; 1 the input was refused (a recipients document
//! that does not verify, names another vault key, or is not newer than the
//! installed one); 2 bad usage, or the database, key or address could not be
//! opened.

// First: its print macros shadow the standard ones in everything below.
#[macro_use]
#[path = "nd7/out.rs"]
mod out;

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use clap::{Parser, Subcommand};
use nd7_core::vault::{self, Recipients, Secret32, SigningKey, Update};
use nd7_core::vault_server::{self, Config, Store, routes, sqlite::SqliteStore};

/// The nd7 vault: stores machines' encrypted session logs, and cannot read them.
#[derive(Parser)]
#[command(name = "nd7-vault", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Where the vault's key is: --key, or `<db>.key`.
#[derive(clap::Args)]
struct Db {
    /// The database (SQLite; created if missing).
    #[arg(long, value_name = "FILE")]
    db: PathBuf,
    /// The vault's signing key [default: <db>.key].
    #[arg(long, value_name = "FILE")]
    key: Option<PathBuf>,
}

impl Db {
    fn key_path(&self) -> PathBuf {
        self.key.clone().unwrap_or_else(|| {
            let mut name = self.db.clone().into_os_string();
            name.push(".key");
            PathBuf::from(name)
        })
    }
}

#[derive(Subcommand)]
enum Command {
    /// Serve HTTP on ADDR. Put a TLS reverse proxy in front of it.
    ///
    /// Prints `listening on http://ADDR` once bound (port 0 picks a free
    /// port), then one line per request on stderr: method, path, status,
    /// time, and for a refusal what it concerned. Needs the vault's key
    /// (`nd7-vault key`).
    Serve {
        #[command(flatten)]
        db: Db,
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8407")]
        listen: String,
        /// Requests handled at once.
        #[arg(long, default_value_t = 4)]
        workers: usize,
    },
    /// Make the vault's signing key (0600, refuses to overwrite); print its public key.
    ///
    /// The key countersigns what the vault stores. Admins name its public
    /// key in the recipients document (`nd7 admin sign-recipients
    /// --vault-key`), which is how machines pin it.
    Key {
        #[command(flatten)]
        db: Db,
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
    /// Refuses a document that names another vault key than this vault's,
    /// or whose version is not above the installed one. Machines take it on
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

fn open(db: &Path) -> Result<SqliteStore, ExitCode> {
    SqliteStore::open(db).map_err(|e| {
        eprintln!("nd7-vault: {}: {e}", db.display());
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
    let path = db.key_path();
    let text = std::fs::read_to_string(&path).map_err(|e| {
        eprintln!(
            "nd7-vault: {}: cannot read the vault's key: {e} (make it with `nd7-vault key --db {}`)",
            path.display(),
            db.db.display()
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
            let key = load_key(&db)?;
            let store = open(&db.db)?;
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
                key,
                config,
                Arc::new(AtomicBool::new(false)),
                |line| eprintln!("{line}"),
            );
            Ok(())
        }
        Command::Key { db } => {
            let path = db.key_path();
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
                .open(&path)
                .map_err(|e| {
                    eprintln!("nd7-vault: {}: cannot create: {e}", path.display());
                    ExitCode::from(2)
                })?;
            f.write_all(text.as_bytes()).map_err(|e| {
                eprintln!("nd7-vault: {}: cannot write: {e}", path.display());
                ExitCode::from(2)
            })?;
            println!("{public}");
            Ok(())
        }
        Command::ReadToken { db, days } => {
            let mut store = open(&db)?;
            let token = vault::hex(&random::<20>()?);
            store
                .add_token(
                    "read",
                    &vault_server::token_hash(&token),
                    now + days * 86400,
                )
                .map_err(store_err)?;
            println!("{token}");
            Ok(())
        }
        Command::Recipients { db, document } => {
            let text = std::fs::read_to_string(&document).map_err(|e| {
                eprintln!("nd7-vault: {}: cannot read: {e}", document.display());
                ExitCode::from(2)
            })?;
            let refused = |why: String| {
                eprintln!("nd7-vault: {}: refused: {why}", document.display());
                ExitCode::from(1)
            };
            let doc = Recipients::parse(&text).map_err(|e| refused(e.to_string()))?;
            let ours = load_key(&db)?.public();
            if doc.vault != ours {
                return Err(refused(format!(
                    "it names vault key {}, but this vault's key is {}",
                    doc.vault.to_hex(),
                    ours.to_hex()
                )));
            }
            let mut store = open(&db.db)?;
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
        Command::Restored { db, backup_taken } => {
            let key = load_key(&db)?;
            let mut store = open(&db.db)?;
            let notice = routes::restore_notice(&key, backup_taken, now);
            store.add_restore(&notice, now).map_err(store_err)?;
            print!("{notice}");
            Ok(())
        }
    }
}
