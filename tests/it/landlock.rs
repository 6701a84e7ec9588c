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
    if probe == "links" {
        // Rules placed straight on a link and through one, as a listed
        // entry or a root swapped for a link after it was listed or pinned
        // would be opened.
        let rules = policy::LandlockRules {
            read: Vec::new(),
            write: vec![
                root.join("home/proj/out-link"),
                root.join("home/proj/up/outside"),
            ],
        };
        linux::restrict_self(&rules).expect("Landlock applies fully on this kernel");
        attempt(
            "write outside",
            std::fs::write(root.join("outside/made"), "x"),
        );
        return;
    }
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

/// The four mechanisms of "no rule follows a link" (ADR-0028) back each
/// other up, so no attack in `floor_paths.rs` fails with one of the first
/// two taken out alone: a re-pointed link among a directory's entries is
/// both skipped by the listing and refused by the opening, a write root or
/// grant swapped for a link both fails its pin and the opening, and the
/// floor's descriptors were opened before the agent ran. These two hold
/// each of the first two on its own.
///
/// Guards the link skip in `list_dir` (`src/sandbox/linux/mod.rs`): a
/// listing leaves links out, so what one points at is judged by its real
/// path only. Without it `ssh-link` is listed.
#[test]
fn a_listing_leaves_links_out() {
    let world = World::new();
    let listed = linux::list_dir(&world.root.join("home/proj"));
    assert!(
        !listed.iter().any(|p| p.ends_with("ssh-link")),
        "{listed:?}"
    );
    std::fs::create_dir_all(world.root.join("home/proj/real")).expect("mkdir");
    let listed = linux::list_dir(&world.root.join("home/proj"));
    assert_eq!(listed, [world.root.join("home/proj/real")]);
    // Nor is a directory reached through a link listed at all.
    assert!(linux::list_dir(&world.root.join("home/proj/ssh-link")).is_empty());
}

/// Guards `open_nofollow` in `rule` (`src/sandbox/linux/mod.rs`): a rule
/// whose path is a link, or goes through one (an entry listed as a
/// directory, or a root that passed its pin check, and swapped for a link
/// before the rule was opened), allows nothing. With a plain `open` there
/// `write outside` succeeds.
#[test]
fn a_rule_on_a_link_allows_nothing() {
    let world = World::new();
    std::os::unix::fs::symlink(
        world.root.join("outside"),
        world.root.join("home/proj/out-link"),
    )
    .expect("symlink");
    std::os::unix::fs::symlink(&world.root, world.root.join("home/proj/up")).expect("symlink");
    let lines = world.confined("links", &[]);
    assert_eq!(outcome(&lines, "write outside"), "permission denied");
    assert!(!world.root.join("outside/made").exists());
}
