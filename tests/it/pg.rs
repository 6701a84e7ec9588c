//! A throwaway PostgreSQL cluster for the vault's tests: made with `initdb`
//! in a temporary directory on first use, served on a unix socket in that
//! directory only (no TCP, no port to collide on), and shared by every test
//! of this run, each in a database of its own. PostgreSQL refuses to run as
//! root, so under root the cluster runs as the tests' ordinary account
//! (`nd7-tester`, world.rs). No system service is used.
//!
//! The postmaster runs under a shell that a parent-death signal reaches
//! when this test process ends (from a thread that lives as long as the
//! process): the shell stops PostgreSQL and removes the directory, so the
//! cluster never outlives the run. Debian's `postgresql` package provides
//! the binaries (`/usr/lib/postgresql/<version>/bin`, or on PATH).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::world;

pub struct Cluster {
    /// The socket directory (also the cluster's parent directory).
    pub dir: PathBuf,
}

/// The directory holding `initdb` and `postgres`: Debian's newest
/// `/usr/lib/postgresql/*/bin`, else the one on PATH.
fn bin_dir() -> PathBuf {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.path().join("bin"))
        .filter(|b| b.join("initdb").exists() && b.join("postgres").exists())
        .collect();
    versions.sort_by_key(|p| {
        p.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    if let Some(b) = versions.pop() {
        return b;
    }
    let on_path = Command::new("sh")
        .args(["-c", "command -v initdb"])
        .output()
        .expect("sh");
    let found = String::from_utf8_lossy(&on_path.stdout).trim().to_string();
    assert!(
        !found.is_empty(),
        "PostgreSQL is not installed (no initdb in /usr/lib/postgresql/*/bin or on PATH): \
         the PostgreSQL vault tests need it (apt-get install postgresql; scripts/test.sh does)"
    );
    PathBuf::from(found)
        .parent()
        .expect("initdb's directory")
        .to_path_buf()
}

/// `program` run as the account PostgreSQL runs as.
fn as_account(program: &Path) -> Command {
    let account = world::account();
    if account.drop_from_root {
        let mut c = Command::new("setpriv");
        c.arg(format!("--reuid={}", account.uid))
            .arg(format!("--regid={}", account.gid))
            .arg("--init-groups")
            .arg("--")
            .arg(program);
        c
    } else {
        Command::new(program)
    }
}

pub fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(start)
}

fn start() -> Cluster {
    let bin = bin_dir();
    let account = world::account();
    let dir = tempfile::Builder::new()
        .prefix("nd7-pg-")
        .tempdir()
        .expect("tempdir")
        .keep();
    if account.drop_from_root {
        std::os::unix::fs::chown(&dir, Some(account.uid), Some(account.gid)).expect("chown");
    }
    let data = dir.join("data");
    let init = as_account(&bin.join("initdb"))
        .args([
            "--auth=trust",
            "--username=nd7",
            "--encoding=UTF8",
            "--no-sync",
            "-D",
        ])
        .arg(&data)
        .output()
        .expect("run initdb");
    assert!(
        init.status.success(),
        "initdb: {}",
        String::from_utf8_lossy(&init.stderr)
    );
    // The postmaster's shell, started from a thread that never ends: its
    // parent-death signal comes when the process does.
    let script = format!(
        "trap 'kill -INT $pid 2>/dev/null; wait $pid; rm -rf \"{dir}\"' TERM; \
         \"{postgres}\" -D \"{data}\" -k \"{dir}\" -c listen_addresses= -c max_connections=200 \
         -c shared_buffers=16MB > \"{dir}/log\" 2>&1 & pid=$!; wait $pid",
        dir = dir.display(),
        postgres = bin.join("postgres").display(),
        data = data.display(),
    );
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut c = Command::new("setpriv");
        c.arg("--pdeathsig=TERM");
        if account.drop_from_root {
            c.arg(format!("--reuid={}", account.uid))
                .arg(format!("--regid={}", account.gid))
                .arg("--init-groups");
        }
        let child = c
            .args(["--", "sh", "-c", &script])
            .stdin(Stdio::null())
            .spawn();
        let _ = tx.send(child.map(|_| ()));
        loop {
            std::thread::park();
        }
    });
    rx.recv().expect("started").expect("start postgres");
    let cluster = Cluster { dir };
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if postgres::Client::connect(&cluster.url("postgres"), postgres::NoTls).is_ok() {
            return cluster;
        }
        assert!(
            Instant::now() < deadline,
            "PostgreSQL did not start: {}",
            std::fs::read_to_string(cluster.dir.join("log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

impl Cluster {
    /// The URL of database `name`, on the cluster's socket.
    pub fn url(&self, name: &str) -> String {
        format!("postgresql:///{name}?host={}&user=nd7", self.dir.display())
    }

    /// A new, empty database; its URL.
    pub fn database(&self) -> String {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "t{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let mut admin =
            postgres::Client::connect(&self.url("postgres"), postgres::NoTls).expect("connect");
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .expect("create database");
        self.url(&name)
    }
}
