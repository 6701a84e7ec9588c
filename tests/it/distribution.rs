//! The packaging files parse with the tools that will read them. Each test
//! fails, saying what to install, when that tool is missing: .ci/run installs
//! them.

use std::path::Path;
use std::process::Command;

use crate::common::*;

fn repo(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn run_tool(tool: &str, args: &[&str], package: &str) -> std::process::Output {
    Command::new(tool).args(args).output().unwrap_or_else(|e| {
        panic!("{tool} is needed for this test ({e}): apt-get install {package}")
    })
}

#[test]
fn the_homebrew_formula_is_valid_ruby() {
    let formula = repo("Formula/nd7.rb");
    let out = run_tool("ruby", &["-c", &formula.to_string_lossy()], "ruby");
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let text = std::fs::read_to_string(formula).expect("read");
    for needle in [
        "std_cargo_args",
        "generate_completions_from_executable",
        "test do",
        "nd7 verify",
        "service do",
        "run [opt_bin/\"nd7\", \"ship\"]",
    ] {
        assert!(text.contains(needle), "the formula lacks {needle}");
    }
}

#[test]
fn the_flake_parses() {
    let out = run_tool(
        "nix-instantiate",
        &["--parse", &repo("flake.nix").to_string_lossy()],
        "nix-bin",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(repo("flake.nix")).expect("read");
    for needle in [
        "packages =",
        "apps =",
        "devShells =",
        "checks =",
        "cargoLock.lockFile = ./Cargo.lock",
        "homeManagerModules.default",
        "systemd.user.timers.nd7-ship",
        "launchd.agents.nd7-ship",
    ] {
        assert!(text.contains(needle), "the flake lacks {needle}");
    }
}

#[test]
fn the_install_script_is_valid_sh() {
    let out = run_tool(
        "sh",
        &["-n", &repo("install/install.sh").to_string_lossy()],
        "dash",
    );
    assert!(out.status.success(), "{}", stderr(&out));
}
