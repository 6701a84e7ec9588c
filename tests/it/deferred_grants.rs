//! Files that run later in a directory granted to commands: another
//! repository the user lets the agent work on (`nd7 allow ~/lib`, or a line
//! in `~/.nd7/grants`) has hooks, a config and an `.envrc` of its own, which
//! the user's plain `git` and direnv run there later, outside the floor. A
//! grant the session starts with is held like the project (Linux: locked in
//! the session's namespace); one made during the session is watched from the
//! first command that runs with it and reported at the end with exit 3.
#![cfg(target_os = "linux")]

use std::path::Path;

use crate::deferred_reads::{block, report, run_agent_bounded};
use crate::world::*;

/// A repository with one commit at `~/lib`, outside the project.
fn lib(w: &World) {
    let dir = w.home().join("lib");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("a.txt"), "a\n").expect("write");
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["add", "a.txt"],
        &[
            "-c",
            "user.name=u",
            "-c",
            "user.email=u@e",
            "commit",
            "-qm",
            "a",
        ],
    ] {
        let out = w
            .command_in(&w.acct.join("lib"), "git", args)
            .output()
            .expect("git");
        assert!(out.status.success(), "git {args:?}: {}", text(&out.stderr));
    }
}

/// The user's plain `git status` and `git commit` in `~/lib` afterwards,
/// and the markers whatever ran left.
fn users_git_in_lib(w: &World) -> Vec<String> {
    std::fs::write(w.home().join("lib/a.txt"), "a\nthe user's change\n").expect("write");
    for args in [
        &["status", "--porcelain"][..],
        &[
            "-c",
            "user.name=u",
            "-c",
            "user.email=u@e",
            "commit",
            "-qam",
            "user",
        ],
    ] {
        let _ = w
            .command_in(&w.acct.join("lib"), "git", args)
            .output()
            .expect("git");
    }
    let mut ran: Vec<String> = std::fs::read_dir(w.outside())
        .expect("ls")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "readme")
        .collect();
    ran.sort();
    ran
}

/// The plants, each through the exit (only commands get grants), each
/// saying whether it got through.
fn plants(lib: &str, out: &Path) -> String {
    let out = out.display();
    [
        (
            "hook",
            format!(
                "printf '#!/bin/sh\\ntouch {out}/lib-hook\\n' > '{lib}/.git/hooks/pre-commit' && chmod +x '{lib}/.git/hooks/pre-commit'"
            ),
        ),
        (
            "fsmonitor",
            format!("git -C '{lib}' config core.fsmonitor 'touch {out}/lib-fsmonitor; false'"),
        ),
        ("envrc", format!("echo 'touch {out}/lib-envrc' > '{lib}/.envrc'")),
    ]
    .iter()
    .map(|(name, plant)| {
        format!(
            "\"$EXEC\" {} 2>/dev/null && echo {name}:planted || echo {name}:refused\n",
            shlex::try_quote(plant).expect("quote")
        )
    })
    .collect()
}

fn lines(out: &std::process::Output) -> Vec<String> {
    text(&out.stdout).lines().map(str::to_string).collect()
}

/// Guards `Watch::before_command` (called by the exit, `exit.rs`
/// `serve_one`, before each command with its grants): a grant made with
/// `nd7 allow` during the session is planned as the project is
/// (`policy::deferred::plan_grant`) and read before the first command that
/// can write it, and every change is reported at the end with its diff and
/// exit 3. Without it, the three plants pass unseen and the run exits 0,
/// while the user's next commit in `~/lib` runs the hook.
#[test]
fn a_grant_made_during_the_session_is_watched_and_its_plants_reported() {
    let w = World::new();
    lib(&w);
    let at = w.in_home("lib");
    let (child, _pid) = w.start_agent(&format!("wait_for go\n{}", plants(&at, &w.outside())));
    let allow = w.nd7(&["allow", &at]).output().expect("allow");
    assert!(allow.status.success(), "{}", text(&allow.stderr));
    w.signal("go");
    let out = child.wait_with_output().expect("agent ends");
    assert_eq!(
        lines(&out),
        ["hook:planted", "fsmonitor:planted", "envrc:planted"],
        "{}",
        text(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    // `start_agent` keeps only the first line of stderr; the warning is
    // read from the run's log instead.
    let chains = crate::runs::run_chains(&w);
    let changes = chains[0]
        .iter()
        .rev()
        .find(|e| e["source"] == "exit:nd7" && e["kind"] == "deferred_changed")
        .map(|e| e["body"]["changes"].clone())
        .unwrap_or_else(|| panic!("no deferred_changed entry: {:?}", chains[0]));
    let change = |path: &str| {
        changes
            .as_array()
            .and_then(|c| c.iter().find(|c| c["path"] == path))
            .cloned()
            .unwrap_or_else(|| panic!("no {path} in {changes:#}"))
    };
    let out_dir = w.outside().display().to_string();
    let hook = change(&format!("{at}/.git/hooks/pre-commit"));
    assert_eq!(hook["change"], "added", "{hook}");
    assert!(
        hook["diff"]
            .to_string()
            .contains(&format!("touch {out_dir}/lib-hook")),
        "{hook}"
    );
    assert!(hook["after_command"].as_str().is_some(), "{hook}");
    let config = change(&format!("{at}/.git/config"));
    assert_eq!(config["change"], "changed", "{config}");
    assert!(
        config["diff"].to_string().contains(&format!(
            "fsmonitor = \\\"touch {out_dir}/lib-fsmonitor; false"
        )),
        "{config}"
    );
    let envrc = change(&format!("{at}/.envrc"));
    assert_eq!(envrc["change"], "added", "{envrc}");
}

/// Guards `policy::deferred::plan`'s planning of the grants a session
/// starts with (`grant_roots`, `Planner::root`): `~/lib` from
/// `~/.nd7/grants` is held in the session's namespace like the project, so
/// its hook and config cannot be written through the exit and the user's
/// plain git there runs nothing; a name that did not exist (`.envrc`) is
/// reported with exit 3. Without the planning, hook and fsmonitor are
/// planted, the user's commit runs both, and the run exits 0.
#[test]
fn a_grant_the_session_starts_with_is_held_like_the_project() {
    let w = World::new();
    lib(&w);
    std::fs::create_dir_all(w.home().join(".nd7")).expect("mkdir");
    std::fs::write(w.home().join(".nd7/grants"), "~/lib\n").expect("write");
    let at = w.in_home("lib");
    let out = run_agent_bounded(&w, &plants(&at, &w.outside()));
    assert_eq!(
        lines(&out),
        ["hook:refused", "fsmonitor:refused", "envrc:planted"],
        "{}",
        text(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let report = report(&out);
    let envrc = format!("{at}/.envrc");
    let b = block(&report, &envrc).unwrap_or_else(|| panic!("no {envrc} in\n{report}"));
    assert!(
        b.contains(&format!("+touch {}/lib-envrc", w.outside().display())),
        "{b}"
    );
    assert_eq!(users_git_in_lib(&w), Vec::<String>::new());
    assert!(!Path::new(&w.home().join("lib/.git/hooks/pre-commit")).exists());
}

/// A home granted whole (with `nd7 allow ~`: the grants file refuses it)
/// is searched like the project: a repository planted anywhere in it is
/// reported. The places presets name are not entered
/// (`deferred::skipped`, `policy::deferred::caches`): a crate unpacked with
/// a `.gitattributes` and a `.vscode`, as cargo does, is no finding.
/// Without the skip, the run reports the cache too.
#[test]
fn a_granted_home_is_searched_but_not_its_tools_caches() {
    let w = World::new();
    // A grant of the home gives what is in it, not the home itself (nd7's
    // own places are carved out): new top-level names cannot be made.
    for d in [".cargo/registry/src", "src"] {
        std::fs::create_dir_all(w.home().join(d)).expect("mkdir");
    }
    let home = w.in_home("");
    let home = home.trim_end_matches('/').to_string();
    let (child, _pid) = w.start_agent(&format!(
        r#"wait_for go
"$EXEC" "mkdir -p '{home}/.cargo/registry/src/x/.vscode' && echo '* text=auto' > '{home}/.cargo/registry/src/x/.gitattributes' && echo '{{}}' > '{home}/.cargo/registry/src/x/.vscode/settings.json'"
"$EXEC" "git init -q '{home}/src/r' && git -C '{home}/src/r' config core.fsmonitor 'touch {out}/r; false'"
echo planted
"#,
        out = w.outside().display()
    ));
    let allow = w.nd7(&["allow", &home]).output().expect("allow");
    assert!(allow.status.success(), "{}", text(&allow.stderr));
    w.signal("go");
    let out = child.wait_with_output().expect("agent ends");
    assert_eq!(text(&out.stdout), "planted\n", "{}", text(&out.stderr));
    let chains = crate::runs::run_chains(&w);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let changes = chains[0]
        .iter()
        .rev()
        .find(|e| e["source"] == "exit:nd7" && e["kind"] == "deferred_changed")
        .map(|e| e["body"]["changes"].clone())
        .unwrap_or_else(|| panic!("no deferred_changed entry: {:?}", chains[0]));
    let paths: Vec<&str> = changes
        .as_array()
        .map(|c| c.iter().filter_map(|c| c["path"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(paths, [format!("{home}/src/r/.git/config")], "{changes:#}");
}

/// A grant made during the session whose repository nests 200 submodule
/// git directories (`.git/modules/a/modules/a/…`, as the agent could leave
/// in any directory it is later granted): the planner recurses once per
/// level, deeper than the exit's 256 KiB thread stacks hold. Guards
/// `Watch::before_command`'s planning thread: without it the stack
/// overflows and the whole `nd7 run` dies with no warning and no `run_end`.
#[test]
fn a_deeply_nested_grant_is_planned_without_ending_the_session() {
    let w = World::new();
    let mut git = w.home().join("deep/.git");
    std::fs::create_dir_all(&git).expect("mkdir");
    std::fs::write(git.join("HEAD"), "ref: refs/heads/main\n").expect("write");
    for _ in 0..200 {
        git = git.join("modules/a");
        std::fs::create_dir_all(&git).expect("mkdir");
        std::fs::write(git.join("HEAD"), "ref: refs/heads/main\n").expect("write");
    }
    let at = w.in_home("deep");
    let (child, _pid) = w.start_agent(&format!(
        "wait_for go\n\"$EXEC\" \"echo '[core]' > '{at}/.git/modules/a/config'\" && echo planted\n"
    ));
    let allow = w.nd7(&["allow", &at]).output().expect("allow");
    assert!(allow.status.success(), "{}", text(&allow.stderr));
    w.signal("go");
    let out = child.wait_with_output().expect("agent ends");
    assert_eq!(text(&out.stdout), "planted\n", "{}", text(&out.stderr));
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let chains = crate::runs::run_chains(&w);
    let last = chains[0].last().expect("entries");
    assert_eq!(last["kind"], "run_end", "{last}");
}
