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
    let mut kept: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&cache).expect("the cache")).expect("json");
    let entry = &mut kept["entries"][0];
    // Made to say 2.1.400 for this very file: taken as it stands.
    entry["version"] = serde_json::json!([2, 1, 400]);
    std::fs::write(&cache, kept.to_string()).expect("write");
    assert_eq!(run(&w, &claude), (1, true), "the cache's version");
    // For a file of another size: not this one, so asked again.
    let entry = &mut kept["entries"][0];
    let size = entry["program"]["size"].as_u64().expect("size");
    entry["program"]["size"] = (size + 1).into();
    std::fs::write(&cache, kept.to_string()).expect("write");
    assert_eq!(run(&w, &claude), (2, false), "asked again");
}

/// The agent under `nd7 run` tries every way to put something else at the
/// cache's name for the next run: a FIFO (the next run would hang reading
/// it), a link (to `/dev/zero`, endless), a huge file, the cache moved
/// away, its directory renamed or replaced. Its session's project is the
/// home, the most the floor ever lets be written, so what holds is the
/// floor's carving nd7's state out of it. Each attempt that worked leaves a
/// line in `landed` in the temp directory; none may, and the next run
/// still takes the cached version.
#[test]
fn nothing_under_the_floor_can_put_a_fifo_a_link_or_another_file_at_the_cache() {
    let (w, bin) = (World::new(), bin());
    let home = w.in_home("");
    let tmp = w.proj().parent().expect("the world").join("tmp");
    let script = format!(
        "#!/bin/bash\n\
         [ \"$1\" = --version ] && {{ echo asked >> '{tmp}/asked'; echo '2.1.197 (Claude Code)'; exit 0; }}\n\
         h='{home}'; d=\"$h/.local/state/nd7\"; c=\"$d/claude-version.json\"; l='{tmp}/landed'\n\
         try() {{ if eval \"$1\" 2>/dev/null; then echo \"$1\" >> \"$l\"; fi; }}\n\
         touch \"$h/work/probe\" && echo 'the home is writable' > '{tmp}/home-writable'\n\
         try \"mv '$c' '$h/work/moved'\"\n\
         try \"rm -f '$c'\"\n\
         try \"mkfifo '$c'\"\n\
         try \"ln -s /dev/zero '$c'\"\n\
         try \"head -c 1M /dev/zero > '$c'\"\n\
         try \"mkfifo '$h/work/fifo' && mv '$h/work/fifo' '$c'\"\n\
         try \"mv '$d' '$h/work/nd7-moved'\"\n\
         try \"mv '$h/.local/state' '$h/work/state-moved'\"\n\
         try \"mv '$h/.local' '$h/work/local-moved'\"\n\
         try \"mkdir -p '$h/work/fake' && mkfifo '$h/work/fake/claude-version.json' && mv -T '$h/work/fake' '$d'\"\n",
        tmp = tmp.display(),
    );
    let claude = bin.path().join("claude");
    std::fs::write(&claude, script).expect("write");
    let exec = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(&claude, exec).expect("chmod");
    std::fs::create_dir_all(w.home().join("work")).expect("a directory in the home");
    // The first run asks and keeps; the second takes the kept version, so
    // the cache was there when its floor was built.
    for _ in 0..2 {
        let out = w
            .command_in(Path::new(&home), ND7, &["run", &claude.to_string_lossy()])
            .output()
            .expect("nd7 run in the home");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        assert!(
            tmp.join("home-writable").exists(),
            "the project was the home: {err}"
        );
    }
    let asked = std::fs::read_to_string(tmp.join("asked")).unwrap_or_default();
    assert_eq!(asked.lines().count(), 1, "the second run took the cache");
    let landed = std::fs::read_to_string(tmp.join("landed")).unwrap_or_default();
    assert_eq!(landed, "", "what the agent did to the cache");
    let cache = w.home().join(".local/state/nd7/claude-version.json");
    let kind = std::fs::symlink_metadata(&cache)
        .expect("the cache")
        .file_type();
    assert!(kind.is_file(), "the cache is a plain file: {kind:?}");
}

/// A version manager's shim (asdf's `.tool-versions`, mise's `.mise.toml`)
/// runs the Claude Code a directory's file names: the same program file
/// answers differently in another project. An agent writes that file in
/// its own project (the floor lets it), pinning an older Claude Code
/// there; the version asked there must not be taken for another project,
/// whose newer Claude Code would then run with fewer events registered.
#[test]
fn a_version_asked_in_one_project_is_not_taken_in_another() {
    let (w, bin) = (World::new(), bin());
    let (proj, other) = (w.proj(), w.outside().join("other"));
    std::fs::create_dir_all(&other).expect("mkdir");
    std::fs::write(proj.join(".tool-versions"), "2.1.197").expect("the agent's pin");
    std::fs::write(other.join(".tool-versions"), "2.1.400").expect("the user's pin");
    let claude = bin.path().join("claude");
    let script = "#!/bin/bash\n\
         if [ \"$1\" = --version ]; then echo \"$(cat .tool-versions) (Claude Code)\"; exit 0; fi\n\
         [ \"$1\" = --settings ] && printf '%s' \"$2\" > given-settings\n";
    std::fs::write(&claude, script).expect("write");
    let exec = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(&claude, exec).expect("chmod");
    let directory_added = |cwd: &Path| {
        let out = w
            .command_in(cwd, ND7, &["run", &claude.to_string_lossy()])
            .output()
            .expect("nd7 run");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = std::fs::read_to_string(cwd.join("given-settings")).expect("settings");
        let settings: serde_json::Value = serde_json::from_str(&text).expect("json");
        settings["hooks"].get("DirectoryAdded").is_some()
    };
    assert!(!directory_added(&proj), "the pinned older version");
    assert!(directory_added(&other), "the other project's own version");
}
