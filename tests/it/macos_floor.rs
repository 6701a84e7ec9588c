//! `nd7 run` under Seatbelt on a real Mac, with a shell script as the agent
//! and Bash commands through `nd7-exec`. There is no mount namespace to put
//! a scratch home over the account's, so this writes into the real home: a
//! scratch directory, and `~/.nd7/secrets` (put back afterwards). It is
//! therefore ignored by default and run by the macOS CI job
//! (`.github/workflows/macos.yml`) with `--ignored`, on a runner whose home is
//! thrown away.
//!
//! What it checks is what the Linux tests check through `World`: writes
//! outside the project are refused, by the agent and through the exit; a
//! secret listed in `~/.nd7/secrets` is unreadable both by its name, a link,
//! and where the link leads (`with_real_places` in `src/run_dir.rs`, rendered
//! by `policy::seatbelt`); a credential file of nd7's own list directly in the
//! home is unreadable; and a link in the project to a place outside opens
//! nothing (Seatbelt matches real paths).
#![cfg(target_os = "macos")]

use std::path::PathBuf;
use std::process::Command;

const ND7: &str = env!("CARGO_BIN_EXE_nd7");
const ND7_EXEC: &str = env!("CARGO_BIN_EXE_nd7-exec");

/// Puts a file back as it was (or removes it) when dropped.
struct Restore(PathBuf, Option<Vec<u8>>);

impl Drop for Restore {
    fn drop(&mut self) {
        match &self.1 {
            Some(bytes) => drop(std::fs::write(&self.0, bytes)),
            None => drop(std::fs::remove_file(&self.0)),
        }
    }
}

fn keep(path: PathBuf) -> Restore {
    let before = std::fs::read(&path).ok();
    Restore(path, before)
}

#[test]
#[ignore = "writes into the real home directory; the macOS CI job runs it with --ignored"]
fn the_seatbelt_floor_holds_on_a_real_mac() {
    let home = nd7_core::run_dir::account_home().expect("home");
    let dir = tempfile::Builder::new()
        .prefix("nd7-macos-floor-")
        .tempdir_in(&home)
        .expect("scratch dir in the home");
    let base = std::fs::canonicalize(dir.path()).expect("real path");
    let (proj, outside) = (base.join("proj"), base.join("outside"));
    for d in [&proj, &outside, &base.join("secret-real")] {
        std::fs::create_dir_all(d).expect("mkdir");
    }
    std::fs::write(base.join("secret-real/key"), "SECRET").expect("write");
    std::os::unix::fs::symlink(base.join("secret-real"), base.join("secret-link"))
        .expect("symlink");
    std::fs::create_dir_all(home.join(".nd7")).expect("mkdir");
    let _secrets = keep(home.join(".nd7/secrets"));
    std::fs::write(
        home.join(".nd7/secrets"),
        format!("{}\n", base.join("secret-link").display()),
    )
    .expect("write secrets");
    let netrc = home.join(".netrc");
    let _netrc = keep(netrc.clone());
    if !netrc.exists() {
        std::fs::write(&netrc, "machine example.org login x password y\n").expect("write");
    }

    let agent = proj.join("agent.sh");
    std::fs::write(
        &agent,
        format!(
            r#"#!/bin/bash
EXEC='{ND7_EXEC}'; OUT='{out}'; BASE='{base}'; HOME_DIR='{home}'
x() {{ local name=$1; shift; if "$@" >/dev/null 2>&1; then echo "$name:yes"; else echo "$name:no"; fi; }}
x agent-project touch inside
x agent-outside touch "$OUT/agent"
x exec-project "$EXEC" "touch inside-exec"
x exec-outside "$EXEC" "touch '$OUT/exec'"
x agent-secret-real cat "$BASE/secret-real/key"
x agent-secret-link cat "$BASE/secret-link/key"
x exec-secret-real "$EXEC" "cat '$BASE/secret-real/key'"
x agent-netrc cat "$HOME_DIR/.netrc"
x exec-netrc "$EXEC" "cat '$HOME_DIR/.netrc'"
x agent-nd7 ls "$HOME_DIR/.nd7"
x link-in-project ln -s "$OUT" out
x agent-through-link touch out/agent
x exec-through-link "$EXEC" "touch out/exec"
"#,
            out = outside.display(),
            base = base.display(),
            home = home.display(),
        ),
    )
    .expect("agent");
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let out = Command::new(ND7)
        .arg("run")
        .arg(&agent)
        .current_dir(&proj)
        .output()
        .expect("nd7 run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        [
            "agent-project:yes",
            "agent-outside:no",
            "exec-project:yes",
            "exec-outside:no",
            "agent-secret-real:no",
            "agent-secret-link:no",
            "exec-secret-real:no",
            "agent-netrc:no",
            "exec-netrc:no",
            "agent-nd7:no",
            "link-in-project:yes",
            "agent-through-link:no",
            "exec-through-link:no",
        ],
        "{stderr}"
    );
    assert!(proj.join("inside").exists() && proj.join("inside-exec").exists());
    assert!(
        std::fs::read_dir(&outside)
            .expect("outside")
            .next()
            .is_none()
    );
}
