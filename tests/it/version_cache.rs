//! `nd7 run claude` registers the events the program's version knows, and
//! asks that version once per program file (the version cache, ADR-0147):
//! a rewritten file is asked again, and nothing under the floor can write
//! the cache.
#![cfg(target_os = "linux")]

use std::path::Path;

use crate::world::*;

/// A stand-in for Claude Code in `bin` answering `--version` as `version`:
/// each time it is asked it adds a line to `asked` in the project; as the
/// agent it writes the `--settings` it was given to `given-settings` and
/// tries to write the version cache. `bin` lies outside the world, whose
/// every command gives its files to the account again (a change of each
/// file's ctime).
fn claude_at(w: &World, bin: &Path, version: &str) -> String {
    let proj = w.proj();
    let cache = w.in_home(".local/state/nd7/claude-version.json");
    let script = format!(
        "#!/bin/bash\n\
         if [ \"$1\" = --version ]; then echo asked >> '{proj}/asked'; echo '{version} (Claude Code)'; exit 0; fi\n\
         [ \"$1\" = --settings ] && printf '%s' \"$2\" > '{proj}/given-settings'\n\
         if echo forged > '{cache}' 2>/dev/null; then echo wrote > '{proj}/forged'; fi\n",
        proj = proj.display(),
    );
    let claude = bin.join("claude");
    // Written beside and renamed into place, as an update would.
    let staged = bin.join(".claude.new");
    std::fs::write(&staged, script).expect("write");
    std::fs::set_permissions(&staged, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    std::fs::rename(&staged, &claude).expect("rename");
    claude.display().to_string()
}

/// Runs `claude` under `nd7 run`; returns how many times its version has
/// been asked so far and whether the settings it got register
/// DirectoryAdded (an event Claude Code knows from 2.1.219 on).
fn run(w: &World, claude: &str) -> (usize, bool) {
    let out = w.nd7(&["run", claude]).output().expect("nd7 run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let proj = w.proj();
    let read = |name: &str| std::fs::read_to_string(proj.join(name)).unwrap_or_default();
    assert!(
        !Path::new(&proj.join("forged")).exists(),
        "the agent wrote the version cache"
    );
    let settings: serde_json::Value =
        serde_json::from_str(&read("given-settings")).expect("the settings given");
    let asked = read("asked").lines().count();
    (asked, settings["hooks"].get("DirectoryAdded").is_some())
}

/// A directory outside the world that the account can read.
fn bin() -> tempfile::TempDir {
    let bin = tempfile::Builder::new()
        .prefix("claude-bin-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("tempdir");
    let open = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(bin.path(), open).expect("chmod");
    bin
}

#[test]
fn nd7_run_asks_claude_codes_version_once_per_program_file() {
    let (w, bin) = (World::new(), bin());
    let claude = claude_at(&w, bin.path(), "2.1.197");
    assert_eq!(run(&w, &claude), (1, false), "first run: asked");
    assert_eq!(run(&w, &claude), (1, false), "same file: not asked again");
    // The same path, a new file of the same length: asked again.
    let claude = claude_at(&w, bin.path(), "2.1.400");
    assert_eq!(run(&w, &claude), (2, true), "a new file: asked again");
    assert_eq!(run(&w, &claude), (2, true), "and kept");
}

#[test]
fn the_version_cache_is_taken_for_the_same_file_only() {
    let (w, bin) = (World::new(), bin());
    let claude = claude_at(&w, bin.path(), "2.1.197");
    assert_eq!(run(&w, &claude), (1, false));
    let cache = w.home().join(".local/state/nd7/claude-version.json");
    let mut entry: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&cache).expect("the cache")).expect("json");
    // Made to say 2.1.400 for this very file: taken as it stands.
    entry["version"] = serde_json::json!([2, 1, 400]);
    std::fs::write(&cache, entry.to_string()).expect("write");
    assert_eq!(run(&w, &claude), (1, true), "the cache's version");
    // For a file of another size: not this one, so asked again.
    let size = entry["program"]["size"].as_u64().expect("size");
    entry["program"]["size"] = (size + 1).into();
    std::fs::write(&cache, entry.to_string()).expect("write");
    assert_eq!(run(&w, &claude), (2, false), "asked again");
}
