//! The Landlock floor on the real kernel. Each check runs in a child process
//! (this test binary, run again with ND7_LANDLOCK_CHILD set) that applies the
//! rules to itself and then tries to get past them; the parent reads what it
//! could and could not do.
#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::process::Command;

use nd7_core::policy::{self, Policy, Roots};
use nd7_core::sandbox::linux;

const CHILD: &str = "ND7_LANDLOCK_CHILD";

/// A scratch world: a home with secrets, a project, a temp dir, an outside.
struct World {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(dir.path()).expect("realpath");
        for d in [
            "home/.ssh",
            "home/.nd7/runs",
            "home/.claude",
            "home/docs",
            "home/proj",
            "tmp",
            "outside",
        ] {
            std::fs::create_dir_all(root.join(d)).expect("mkdir");
        }
        std::fs::write(root.join("home/.ssh/id_ed25519"), "SECRET").expect("write");
        std::fs::write(root.join("home/.bashrc"), "# rc").expect("write");
        std::fs::write(root.join("outside/readme"), "hello").expect("write");
        std::os::unix::fs::symlink(root.join("home/.ssh"), root.join("home/proj/ssh-link"))
            .expect("symlink");
        World { _dir: dir, root }
    }

    fn policy(&self, grants: &[&str]) -> Policy {
        let mut policy = Policy::new(Roots {
            project: self.root.join("home/proj"),
            temp: self.root.join("tmp"),
            home: self.root.join("home"),
            state: self.root.join("home/.local/state/nd7"),
            exit: self.root.join("bin/nd7-exec"),
        });
        policy.grants = grants.iter().map(|g| self.root.join(g)).collect();
        policy
    }

    /// Runs `probe` in a child confined by `policy`'s command rules; returns
    /// its report lines.
    fn confined(&self, probe: &str, grants: &[&str]) -> Vec<String> {
        let out = Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--exact",
                "landlock::child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, probe)
            .env("ND7_WORLD", &self.root)
            .env("ND7_GRANTS", grants.join(":"))
            .output()
            .expect("run the child");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "child failed: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text.lines()
            // libtest may print its own words before the first probe's.
            .filter_map(|l| l.find("PROBE ").map(|at| l[at + 6..].to_string()))
            .collect()
    }
}

fn attempt(what: &str, result: std::io::Result<()>) {
    match result {
        Ok(()) => println!("PROBE {what}: ok"),
        Err(e) => println!("PROBE {what}: {}", e.kind()),
    }
}

/// The confined side. Does nothing unless the parent started it.
#[test]
fn child() {
    let Ok(probe) = std::env::var(CHILD) else {
        return;
    };
    let root = PathBuf::from(std::env::var("ND7_WORLD").expect("world"));
    let grants: Vec<String> = std::env::var("ND7_GRANTS")
        .unwrap_or_default()
        .split(':')
        .filter(|g| !g.is_empty())
        .map(str::to_string)
        .collect();
    let world = World {
        _dir: tempfile::tempdir().expect("unused"),
        root: root.clone(),
    };
    let grants: Vec<&str> = grants.iter().map(String::as_str).collect();
    let policy = world.policy(&grants);
    let writes = if probe == "floor" {
        policy.floor_writes()
    } else {
        policy.command_writes()
    };
    let rules = policy::landlock_rules(&policy, &writes, &linux::list_dir);
    linux::restrict_self(&rules).expect("Landlock applies fully on this kernel");
    let r = |p: &str| root.join(p);
    attempt("write project", std::fs::write(r("home/proj/made"), "x"));
    attempt("write tmp", std::fs::write(r("tmp/made"), "x"));
    attempt("write outside", std::fs::write(r("outside/made"), "x"));
    attempt("write home", std::fs::write(r("home/made"), "x"));
    attempt("write docs", std::fs::write(r("home/docs/made"), "x"));
    attempt(
        "write bashrc",
        std::fs::write(r("home/.bashrc"), "# changed"),
    );
    attempt("write nd7", std::fs::write(r("home/.nd7/runs/made"), "x"));
    attempt("read outside", std::fs::read(r("outside/readme")).map(drop));
    attempt("read bashrc", std::fs::read(r("home/.bashrc")).map(drop));
    attempt(
        "read ssh",
        std::fs::read(r("home/.ssh/id_ed25519")).map(drop),
    );
    attempt(
        "read ssh via link",
        std::fs::read(r("home/proj/ssh-link/id_ed25519")).map(drop),
    );
    attempt("write dev null", std::fs::write("/dev/null", "x"));
    attempt(
        "run sh",
        Command::new("/bin/sh")
            .args(["-c", "exit 0"])
            .status()
            .map(drop),
    );
}

fn outcome<'a>(lines: &'a [String], what: &str) -> &'a str {
    lines
        .iter()
        .find_map(|l| l.strip_prefix(what).and_then(|r| r.strip_prefix(": ")))
        .unwrap_or_else(|| panic!("no probe {what:?} in {lines:?}"))
}

#[test]
fn the_floor_confines_writes_and_hides_secrets() {
    let world = World::new();
    let lines = world.confined("floor", &["home/docs"]);
    assert_eq!(outcome(&lines, "write project"), "ok");
    assert_eq!(outcome(&lines, "write tmp"), "ok");
    assert_eq!(outcome(&lines, "write outside"), "permission denied");
    assert_eq!(outcome(&lines, "write home"), "permission denied");
    assert_eq!(outcome(&lines, "write bashrc"), "permission denied");
    // The floor ignores grants: they are for single commands.
    assert_eq!(outcome(&lines, "write docs"), "permission denied");
    assert_eq!(outcome(&lines, "write nd7"), "permission denied");
    assert_eq!(outcome(&lines, "read outside"), "ok");
    assert_eq!(outcome(&lines, "read bashrc"), "ok");
    assert_eq!(outcome(&lines, "read ssh"), "permission denied");
    assert_eq!(outcome(&lines, "read ssh via link"), "permission denied");
    assert_eq!(outcome(&lines, "write dev null"), "ok");
    assert_eq!(outcome(&lines, "run sh"), "ok");
    assert!(!world.root.join("outside/made").exists());
}

#[test]
fn a_grant_of_the_whole_home_still_cannot_write_under_nd7() {
    let world = World::new();
    let lines = world.confined("command", &["home"]);
    assert_eq!(outcome(&lines, "write docs"), "ok");
    assert_eq!(outcome(&lines, "write bashrc"), "ok");
    // Landlock cannot allow the home directory itself without what lies
    // under .nd7, so a new file directly in home is refused: it fails closed.
    assert_eq!(outcome(&lines, "write home"), "permission denied");
    assert_eq!(outcome(&lines, "write nd7"), "permission denied");
    assert_eq!(outcome(&lines, "read ssh"), "permission denied");
    assert!(!world.root.join("home/.nd7/runs/made").exists());
}

#[test]
fn without_the_rules_every_probe_succeeds() {
    // The same probes unconfined: what the tests above refuse is reachable
    // otherwise, so their refusals come from Landlock.
    let world = World::new();
    let r = |p: &str| world.root.join(p);
    assert!(std::fs::write(r("outside/made"), "x").is_ok());
    assert!(std::fs::write(r("home/.nd7/runs/made"), "x").is_ok());
    assert!(std::fs::read(r("home/proj/ssh-link/id_ed25519")).is_ok());
    let _ = Path::new("/");
}
