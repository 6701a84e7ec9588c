//! What tests of `nd7 run` read back: the run chains the world's sessions
//! wrote, their entries, `nd7 verify` of one, and a stand-in for Claude Code.
#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::world::*;

/// `x NAME CMD ARGS…` prints `NAME:yes` when CMD succeeds, `NAME:no` when not.
pub(crate) const X: &str = r#"x() { local name=$1; shift; if "$@" >/dev/null 2>&1; then echo "$name:yes"; else echo "$name:no"; fi; }"#;

/// The lines a command printed on stdout.
pub(crate) fn lines(out: &Output) -> Vec<String> {
    text(&out.stdout).lines().map(str::to_string).collect()
}

/// The logs' directory as the test sees it.
pub(crate) fn logs(w: &World) -> PathBuf {
    w.home().join(".local/state/nd7/sessions")
}

/// Every run chain the world's sessions wrote, oldest first.
pub(crate) fn run_dirs(w: &World) -> Vec<PathBuf> {
    let mut runs: Vec<PathBuf> = std::fs::read_dir(logs(w))
        .expect("the logs' directory")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("run-"))
        })
        .collect();
    runs.sort();
    runs
}

/// The one run chain the world's sessions wrote.
pub(crate) fn run_chain(w: &World) -> PathBuf {
    let runs = run_dirs(w);
    assert_eq!(runs.len(), 1, "one run chain: {runs:?}");
    runs[0].clone()
}

/// The entries of the log in `dir`.
pub(crate) fn entries(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("events.ndjson"))
        .expect("the run's log")
        .lines()
        .map(|l| serde_json::from_str(l).expect("an entry"))
        .collect()
}

/// The entries of every run chain the world's sessions wrote, oldest first.
pub(crate) fn run_chains(w: &World) -> Vec<Vec<Value>> {
    run_dirs(w).iter().map(|dir| entries(dir)).collect()
}

/// `nd7 verify` of the log in `dir`, as the account runs it.
pub(crate) fn verify(w: &World, dir: &Path) -> Output {
    let inner = w.in_home(&format!(
        ".local/state/nd7/sessions/{}",
        dir.file_name().expect("name").to_string_lossy()
    ));
    w.nd7(&["verify", &inner]).output().expect("nd7 verify")
}

/// A stand-in for Claude Code, named `claude` so that `nd7 run` registers
/// its record hooks (and so reconciles): `--version` answers as 2.1.197.
pub(crate) fn fake_claude(w: &World, body: &str) -> String {
    let script = std::fs::read_to_string(w.agent(body)).expect("agent");
    let script = script.replacen(
        "#!/bin/bash\n",
        "#!/bin/bash\n[ \"$1\" = --version ] && { echo '2.1.197 (Claude Code)'; exit 0; }\n",
        1,
    );
    let bin = w.root.join("bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    let claude = bin.join("claude");
    std::fs::write(&claude, script).expect("write");
    std::fs::set_permissions(&claude, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    claude.display().to_string()
}
