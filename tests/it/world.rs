//! A scratch world for running nd7 as a user would: a home, a project, a
//! temp directory and an "outside", with nd7 run in a user and mount
//! namespace (`unshare -Urm`) where the scratch home is mounted over the
//! account's home (nd7 takes the home from the account database, never
//! `$HOME`; ADR-0016). Linux only at run time.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const ND7: &str = env!("CARGO_BIN_EXE_nd7");
pub const ND7_EXEC: &str = env!("CARGO_BIN_EXE_nd7-exec");

/// A scratch home, project, temp directory and outside, and ways to run nd7
/// with that home as the account's.
pub struct World {
    _dir: tempfile::TempDir,
    pub root: PathBuf,
    /// The account's home as nd7 sees it inside the namespace (where the
    /// user is uid 0): the path the scratch home is mounted on.
    pub acct: PathBuf,
}

impl World {
    pub fn new() -> World {
        let dir = tempfile::Builder::new()
            .prefix("sandbox-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("tempdir");
        let root = std::fs::canonicalize(dir.path()).expect("realpath");
        for d in [
            "home/.ssh",
            "home/.claude",
            "home/docs",
            "home/.local/state/nd7/vault",
            "proj",
            "tmp",
            "outside",
        ] {
            std::fs::create_dir_all(root.join(d)).expect("mkdir");
        }
        std::fs::write(root.join("home/.ssh/id_ed25519"), "SECRET-KEY").expect("write");
        std::fs::write(root.join("home/.local/state/nd7/vault/machine.key"), "KEY").expect("write");
        std::fs::write(root.join("outside/readme"), "hello\n").expect("write");
        let passwd = Command::new("getent")
            .args(["passwd", "0"])
            .output()
            .expect("getent");
        let acct = text(&passwd.stdout)
            .trim()
            .split(':')
            .nth(5)
            .map(PathBuf::from)
            .expect("uid 0 has a home");
        World {
            _dir: dir,
            root,
            acct,
        }
    }

    /// `rel` under the home, by the account's path (as nd7 sees it inside).
    pub fn in_home(&self, rel: &str) -> String {
        self.acct.join(rel).display().to_string()
    }

    pub fn home(&self) -> PathBuf {
        self.root.join("home")
    }
    pub fn proj(&self) -> PathBuf {
        self.root.join("proj")
    }
    pub fn outside(&self) -> PathBuf {
        self.root.join("outside")
    }
    pub fn sessions(&self) -> PathBuf {
        self.home().join(".nd7/sessions")
    }

    /// `program args…` in the project directory, with the scratch home
    /// mounted over the account's home.
    pub fn command(&self, program: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new("unshare");
        cmd.args(["--user", "--map-root-user", "--mount", "sh", "-c"])
            .arg(
                r#"h=$(getent passwd "$(id -u)" | cut -d: -f6) && mount --bind "$0" "$h" && cd "$1" && shift && exec "$@""#,
            )
            .arg(self.home())
            .arg(self.proj())
            .arg(program)
            .args(args)
            .env("TMPDIR", self.root.join("tmp"))
            .env("HOME", &self.acct)
            .env_remove("XDG_STATE_HOME");
        cmd
    }

    pub fn nd7(&self, args: &[&str]) -> Command {
        self.command(ND7, args)
    }

    /// Writes an agent script into the project: `$EXEC` is nd7-exec, and
    /// `wait_for FILE` waits (at most a minute) for the test to make FILE.
    pub fn agent(&self, body: &str) -> String {
        let path = self.proj().join("agent.sh");
        let script = format!(
            "#!/bin/bash\nEXEC='{ND7_EXEC}'\nND7='{ND7}'\nOUT='{}'\nHOME_DIR='{}'\n\
             wait_for() {{ for _ in $(seq 1200); do [ -e \"$1\" ] && return 0; sleep 0.05; done; echo \"timed out on $1\"; exit 99; }}\n{body}\n",
            self.outside().display(),
            self.acct.display(),
        );
        std::fs::write(&path, script).expect("write agent");
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        path.display().to_string()
    }

    /// Runs the agent script under `nd7 run` to the end.
    pub fn run_agent(&self, body: &str) -> Output {
        let agent = self.agent(body);
        self.nd7(&["run", &agent]).output().expect("nd7 run")
    }

    /// Starts the agent script under `nd7 run`, returning when the session
    /// has said its pid.
    pub fn start_agent(&self, body: &str) -> (Child, u32) {
        let agent = self.agent(body);
        let mut child = self
            .nd7(&["run", &agent])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("nd7 run");
        let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
        let mut line = String::new();
        stderr.read_line(&mut line).expect("announcement");
        let pid = line
            .strip_prefix("nd7 run: session ")
            .and_then(|rest| rest.split(' ').next())
            .and_then(|pid| pid.parse().ok())
            .unwrap_or_else(|| panic!("no session announced: {line:?}"));
        std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
        (child, pid)
    }

    /// Makes FILE in the project, which `wait_for FILE` in the agent sees.
    pub fn signal(&self, file: &str) {
        std::fs::write(self.proj().join(file), "").expect("signal the agent");
    }

    /// Waits (at most a minute) for the agent to make FILE in the project.
    pub fn wait_for(&self, file: &str) {
        let path = self.proj().join(file);
        let start = Instant::now();
        while !path.exists() {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the agent never made {file}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
