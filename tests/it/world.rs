//! A scratch world for running nd7 as a user would: a home, a project, a
//! temp directory and an "outside", with nd7 run as an ordinary account in a
//! mount namespace where the scratch home is mounted over that account's home
//! (nd7 takes the home from the account database, never `$HOME`; ADR-0016).
//! Linux only at run time.
//!
//! The account is never root: attacks on the floor must be tried with exactly
//! the powers an agent has. Run as root (CI), the world uses a dedicated
//! account, `nd7-tester` (created on first use, home `/home/nd7-tester`), and
//! runs nd7 as it in the initial user namespace: `unshare --mount` binds the
//! home, then `setpriv` drops to the account before nd7 starts. Run as anyone
//! else, the world uses that account, binding the home from a user namespace
//! that maps the account to itself, and drops the namespace's capabilities
//! before nd7 starts. Either way nd7 runs with no capabilities at all.
//!
//! On macOS there is no mount namespace: the world's home is the account's
//! real home, into which it writes what the Linux world puts in its scratch
//! home (and puts it back when dropped), and nd7's state is the world's own
//! (`XDG_STATE_HOME`). So it refuses to be made unless
//! `ND7_TEST_REAL_HOME` is 1, as the macOS CI job sets it on a runner
//! whose home is thrown away, and the tests that use it are ignored there
//! unless asked for.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub const ND7: &str = env!("CARGO_BIN_EXE_nd7");
pub const ND7_EXEC: &str = env!("CARGO_BIN_EXE_nd7-exec");
pub const ND7_RECORD: &str = env!("CARGO_BIN_EXE_nd7-record");

/// On macOS, the variable that lets a world write into the real home.
#[cfg(target_os = "macos")]
pub const REAL_HOME_VARIABLE: &str = "ND7_TEST_REAL_HOME";

/// A scratch home, project, temp directory and outside, and ways to run nd7
/// with that home as the account's.
pub struct World {
    _dir: tempfile::TempDir,
    pub root: PathBuf,
    /// The account's home as nd7 sees it inside the namespace: the path the
    /// scratch home is mounted on.
    pub acct: PathBuf,
    /// More directories mounted into the namespace: (what, where).
    binds: std::sync::Mutex<Vec<(PathBuf, PathBuf)>>,
    /// Whether the kernel refuses nd7 new user namespaces, as on systems
    /// that disable them ([`World::without_user_namespaces`]).
    no_user_namespaces: bool,
    /// Supplementary groups the account runs with (none unless
    /// [`World::with_groups`]), as an account in `docker` or `adm` does.
    groups: Vec<u32>,
    /// On macOS, what the world changed in the real home, put back when it
    /// is dropped: each path and what it held (`None`: nothing).
    #[cfg(target_os = "macos")]
    restores: Vec<(PathBuf, Option<Vec<u8>>)>,
}

#[cfg(target_os = "macos")]
impl Drop for World {
    fn drop(&mut self) {
        for (path, before) in self.restores.iter().rev() {
            match before {
                Some(bytes) => drop(std::fs::write(path, bytes)),
                None => drop(std::fs::remove_file(path)),
            }
        }
    }
}

/// The ordinary account the world runs nd7 as.
#[derive(Clone, Debug)]
pub struct Account {
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
    /// Whether the tests run as root and must drop to this account.
    pub drop_from_root: bool,
}

/// The account tests run nd7 as when they themselves run as root.
pub const TESTER: &str = "nd7-tester";

fn passwd(who: &str) -> Option<Vec<String>> {
    let out = Command::new("getent")
        .args(["passwd", who])
        .output()
        .expect("getent");
    out.status.success().then(|| {
        text(&out.stdout)
            .trim()
            .split(':')
            .map(str::to_string)
            .collect()
    })
}

/// The account, created once per test run when running as root.
pub fn account() -> &'static Account {
    static ACCOUNT: OnceLock<Account> = OnceLock::new();
    ACCOUNT.get_or_init(|| {
        let me = rustix::process::geteuid().as_raw();
        let who = if me == 0 {
            if passwd(TESTER).is_none() {
                let made = Command::new("useradd")
                    .args(["--create-home", "--home-dir", "/home/nd7-tester"])
                    .args(["--shell", "/bin/bash", TESTER])
                    .status()
                    .expect("useradd");
                assert!(
                    made.success() || passwd(TESTER).is_some(),
                    "could not create the test account {TESTER}"
                );
            }
            TESTER.to_string()
        } else {
            me.to_string()
        };
        let entry = passwd(&who).unwrap_or_else(|| panic!("no account {who}"));
        let home = PathBuf::from(&entry[5]);
        assert!(
            home.is_dir(),
            "the account's home {} must exist to mount over it",
            home.display()
        );
        Account {
            uid: entry[2].parse().expect("uid"),
            gid: entry[3].parse().expect("gid"),
            home,
            drop_from_root: me == 0,
        }
    })
}

/// Gives everything under `path` to the account (a no-op unless the tests
/// run as root): the world is the account's, as a real home would be.
fn give(path: &Path, to: &Account) {
    if !to.drop_from_root {
        return;
    }
    let _ = std::os::unix::fs::lchown(path, Some(to.uid), Some(to.gid));
    if path.is_symlink() || !path.is_dir() {
        return;
    }
    if let Ok(entries) = std::fs::read_dir(path) {
        for entry in entries.flatten() {
            give(&entry.path(), to);
        }
    }
}

impl World {
    #[cfg(target_os = "macos")]
    pub fn new() -> World {
        assert!(
            std::env::var_os(REAL_HOME_VARIABLE).is_some_and(|v| v == "1"),
            "this test writes into your real home directory on macOS; it runs only with {REAL_HOME_VARIABLE}=1 (the macOS CI job sets it)"
        );
        let dir = tempfile::Builder::new()
            .prefix("sandbox-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("tempdir");
        let root = std::fs::canonicalize(dir.path()).expect("realpath");
        for d in ["proj", "tmp", "outside", "state/nd7/vault"] {
            std::fs::create_dir_all(root.join(d)).expect("mkdir");
        }
        std::fs::write(root.join("state/nd7/vault/machine.key"), "KEY").expect("write");
        std::fs::write(root.join("outside/readme"), "hello\n").expect("write");
        let acct = nd7_core::run_dir::account_home().expect("the account's home");
        for d in [".ssh", ".claude", "docs"] {
            std::fs::create_dir_all(acct.join(d)).expect("mkdir in the home");
        }
        let key = acct.join(".ssh/id_ed25519");
        let settings = acct.join(".claude/settings.json");
        let restores = vec![
            (key.clone(), std::fs::read(&key).ok()),
            (settings.clone(), std::fs::read(&settings).ok()),
        ];
        std::fs::write(&key, "SECRET-KEY").expect("write");
        World {
            _dir: dir,
            root,
            acct,
            binds: std::sync::Mutex::default(),
            no_user_namespaces: false,
            groups: Vec::new(),
            restores,
        }
    }

    #[cfg(not(target_os = "macos"))]
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
        // As ssh-keygen and the vault leave them (nd7 run warns of others).
        for key in [
            "home/.ssh/id_ed25519",
            "home/.local/state/nd7/vault/machine.key",
        ] {
            let private = std::os::unix::fs::PermissionsExt::from_mode(0o600);
            std::fs::set_permissions(root.join(key), private).expect("chmod");
        }
        std::fs::write(root.join("outside/readme"), "hello\n").expect("write");
        let acct = account().home.clone();
        let world = World {
            _dir: dir,
            root,
            acct,
            binds: std::sync::Mutex::default(),
            no_user_namespaces: false,
            groups: Vec::new(),
        };
        world.own();
        world
    }

    /// From now on, the account runs with these supplementary groups
    /// (Linux, as root only).
    pub fn with_groups(mut self, groups: &[u32]) -> World {
        self.groups = groups.to_vec();
        self
    }

    /// From now on, every command this world starts runs where the kernel
    /// refuses to create user namespaces: as root, under a seccomp filter
    /// that fails `unshare` and `clone` with `CLONE_NEWUSER` (EPERM, as
    /// container runtimes do); otherwise with `user.max_user_namespaces` set
    /// to 0 in the world's own user namespace (ENOSPC, as the sysctl does).
    pub fn without_user_namespaces(mut self) -> World {
        self.no_user_namespaces = true;
        self
    }

    /// Gives the whole world to the account, so files a test made (as root)
    /// are the account's like everything else in its home. Every command the
    /// world starts does this first. (On macOS the tests run as the account.)
    pub fn own(&self) {
        #[cfg(not(target_os = "macos"))]
        give(&self.root, account());
    }

    /// nd7's state as seen from outside (`XDG_STATE_HOME`): in the home on
    /// Linux, the world's own on macOS.
    pub fn state(&self) -> PathBuf {
        if cfg!(target_os = "macos") {
            self.root.join("state")
        } else {
            self.home().join(".local/state")
        }
    }

    /// nd7's state as nd7 sees it inside (the path `XDG_STATE_HOME` names).
    pub fn inner_state(&self) -> PathBuf {
        if cfg!(target_os = "macos") {
            self.root.join("state")
        } else {
            self.acct.join(".local/state")
        }
    }

    /// Shows `what` (a directory the tests can read, such as a Rust
    /// toolchain under root's home) at `rel` under the world's root, in every
    /// command's namespace from now on: the account can use it, read only,
    /// without the tests copying it. Returns where it is seen.
    pub fn bind(&self, what: &Path, rel: &str) -> PathBuf {
        if cfg!(target_os = "macos") {
            // No mount: the account reads it where it is.
            return what.to_path_buf();
        }
        let at = self.root.join(rel);
        std::fs::create_dir_all(&at).expect("mkdir for a bind mount");
        self.binds
            .lock()
            .expect("binds")
            .push((what.to_path_buf(), at.clone()));
        at
    }

    /// `rel` under the home, by the account's path (as nd7 sees it inside).
    pub fn in_home(&self, rel: &str) -> String {
        self.acct.join(rel).display().to_string()
    }

    pub fn home(&self) -> PathBuf {
        if cfg!(target_os = "macos") {
            self.acct.clone()
        } else {
            self.root.join("home")
        }
    }
    pub fn proj(&self) -> PathBuf {
        self.root.join("proj")
    }
    pub fn outside(&self) -> PathBuf {
        self.root.join("outside")
    }
    pub fn sessions(&self) -> PathBuf {
        self.home().join(".nd7/runs")
    }

    /// `program args…` in the project directory, with the scratch home
    /// mounted over the account's home.
    pub fn command(&self, program: &str, args: &[&str]) -> Command {
        self.command_in(&self.proj(), program, args)
    }

    /// `program args…` in `cwd` (a path as seen inside, e.g. [`World::acct`]
    /// for a session whose project is the home), otherwise as [`World::command`].
    pub fn command_in(&self, cwd: &Path, program: &str, args: &[&str]) -> Command {
        if cfg!(target_os = "macos") {
            let mut cmd = Command::new(program);
            cmd.args(args)
                .current_dir(cwd)
                .env("TMPDIR", self.root.join("tmp"))
                .env("HOME", &self.acct)
                .env("XDG_STATE_HOME", self.inner_state());
            return cmd;
        }
        self.own();
        let acct = account();
        let binds: String = self
            .binds
            .lock()
            .expect("binds")
            .iter()
            .map(|(what, at)| {
                format!(
                    "mount --bind -o ro {} {} && ",
                    nd7_core::shell_prefix::shell_quote(&what.to_string_lossy()),
                    nd7_core::shell_prefix::shell_quote(&at.to_string_lossy())
                )
            })
            .collect();
        let mut cmd = Command::new("unshare");
        if acct.drop_from_root {
            cmd.args(["--mount", "sh", "-c"]).arg(format!(
                r#"mount --bind "$0" "$1" && {binds}cd "$2" && shift 2 && exec setpriv --reuid={} --regid={} {} -- "$@""#,
                acct.uid,
                acct.gid,
                if self.groups.is_empty() {
                    "--clear-groups".to_string()
                } else {
                    let list: Vec<String> = self.groups.iter().map(u32::to_string).collect();
                    format!("--groups={}", list.join(","))
                }
            ));
            #[cfg(target_os = "linux")]
            if self.no_user_namespaces {
                refuse_user_namespaces(&mut cmd);
            }
        } else {
            let limit = if self.no_user_namespaces {
                "echo 0 > /proc/sys/user/max_user_namespaces && "
            } else {
                ""
            };
            cmd.args(["--user", "--map-current-user", "--mount", "--keep-caps"])
                .args(["sh", "-c"])
                .arg(format!(
                    r#"mount --bind "$0" "$1" && {binds}{limit}cd "$2" && shift 2 && exec setpriv --inh-caps=-all --ambient-caps=-all -- "$@""#,
                ));
        }
        cmd.arg(self.home())
            .arg(&acct.home)
            .arg(cwd)
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
        // Written beside and renamed into place: a test that starts a second
        // agent while the first is being exec'd would otherwise meet
        // ETXTBSY, as the kernel denies writes to a file during its exec.
        let staged = self.proj().join(".agent.sh.new");
        std::fs::write(&staged, script).expect("write agent");
        std::fs::set_permissions(&staged, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        std::fs::rename(&staged, &path).expect("rename agent");
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
        self.start_agent_with(body, &[])
    }

    /// [`World::start_agent`] with `env` set for `nd7 run`.
    pub fn start_agent_with(&self, body: &str, env: &[(&str, &str)]) -> (Child, u32) {
        let agent = self.agent(body);
        let mut child = self
            .nd7(&["run", &agent])
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("nd7 run");
        let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
        let mut line = String::new();
        stderr.read_line(&mut line).expect("announcement");
        let pid = line
            .strip_prefix("nd7 run: run ")
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

/// Installs, in `cmd`'s process before it execs, a seccomp filter that
/// fails every `unshare` and `clone` asking for a new user namespace with
/// EPERM, and `clone3` with ENOSYS (its flags are behind a pointer; libc
/// then falls back to `clone`). Inherited by everything the process starts.
#[cfg(target_os = "linux")]
fn refuse_user_namespaces(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    #[cfg(target_arch = "x86_64")]
    const ARCH: u32 = 0xc000_003e; // AUDIT_ARCH_X86_64
    #[cfg(target_arch = "aarch64")]
    const ARCH: u32 = 0xc000_00b7; // AUDIT_ARCH_AARCH64
    const LD_W_ABS: u16 = 0x20;
    const JEQ_K: u16 = 0x15;
    const JSET_K: u16 = 0x45;
    const RET_K: u16 = 0x06;
    const ALLOW: u32 = 0x7fff_0000;
    const ERRNO: u32 = 0x0005_0000;
    let f = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    let filter = [
        f(LD_W_ABS, 0, 0, 4),
        f(JEQ_K, 1, 0, ARCH),
        f(RET_K, 0, 0, ALLOW),
        f(LD_W_ABS, 0, 0, 0),
        f(JEQ_K, 3, 0, libc::SYS_unshare as u32),
        f(JEQ_K, 2, 0, libc::SYS_clone as u32),
        f(JEQ_K, 5, 0, libc::SYS_clone3 as u32),
        f(RET_K, 0, 0, ALLOW),
        f(LD_W_ABS, 0, 0, 16),
        f(JSET_K, 0, 1, libc::CLONE_NEWUSER as u32),
        f(RET_K, 0, 0, ERRNO | libc::EPERM as u32),
        f(RET_K, 0, 0, ALLOW),
        f(RET_K, 0, 0, ERRNO | libc::ENOSYS as u32),
    ];
    // SAFETY: runs in the child between fork and exec: one prctl with a
    // pointer to the filter, which the closure owns and which outlives the
    // call (the kernel copies it). No allocation, no lock.
    unsafe {
        cmd.pre_exec(move || {
            let prog = libc::sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_ptr() as *mut libc::sock_filter,
            };
            if libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &prog as *const libc::sock_fprog,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
