//! Files that run later because another file names them: what git includes
//! (`include.path`, `includeIf.*.path`), what an allowed `.envrc` sources,
//! what mise's `[env]` sources, and git configuration written in the forms
//! git accepts but a line-by-line reader misses (ADR-0093). Each attack is
//! planted by the agent, directly and through the exit; the user then runs
//! plain `git`, and what ran is a marker in the world's outside directory.
#![cfg(target_os = "linux")]

use crate::deferred_reads::{block, repo, report};
use crate::world::*;

fn ran(w: &World) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(w.outside())
        .expect("ls outside")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "readme")
        .collect();
    names.sort();
    names
}

fn users_git(w: &World) {
    let _ = w
        .command("git", &["status", "--porcelain"])
        .output()
        .expect("git");
}

fn git(w: &World, args: &[&str]) {
    let out = w.command("git", args).output().expect("git");
    assert!(out.status.success(), "git {args:?}: {}", text(&out.stderr));
}

/// Guards the planner's following of git's includes
/// (`Planner::git_config`): a tracked `.gitshared` that `.git/config`
/// includes by a path relative to itself, and one that `~/.gitconfig`
/// includes by `~/`, under an `includeIf`. Without it, the agent's
/// fsmonitor runs under the user's next `git status`.
#[test]
fn files_git_includes_are_held_like_its_configuration() {
    for mode in ["direct", "exec"] {
        let w = World::new();
        repo(&w);
        std::fs::write(w.proj().join(".gitshared"), "[alias]\n\tst = status\n").expect("w");
        std::fs::write(w.proj().join(".gitmine"), "[alias]\n\tco = checkout\n").expect("w");
        git(&w, &["config", "include.path", "../.gitshared"]);
        let proj_in_home = w.proj().join(".gitmine").display().to_string();
        std::fs::write(
            w.home().join(".gitconfig"),
            format!("[includeIf \"gitdir:/\"]\n\tpath = \"{proj_in_home}\"\n"),
        )
        .expect("w");
        w.own();
        let plant = r#"printf '[core]\n\tfsmonitor = touch %s/included; false\n' "$OUT" >> .gitshared && echo wrote-shared; printf '[core]\n\tfsmonitor = touch %s/home-included; false\n' "$OUT" >> .gitmine && echo wrote-mine"#;
        let run = if mode == "exec" {
            r#""$EXEC" "$PLANT""#
        } else {
            r#"bash -c "$PLANT""#
        };
        let out = w.run_agent(&format!(
            "export OUT\nPLANT='{}'\n{run} 2>/dev/null; echo done",
            plant.replace('\'', "'\\''")
        ));
        assert_eq!(text(&out.stdout), "done\n", "{}", text(&out.stderr));
        users_git(&w);
        assert_eq!(
            ran(&w),
            Vec::<String>::new(),
            "({mode}) {}",
            text(&out.stderr)
        );
    }
}

/// Guards git's configuration syntax in `policy::deferred::parse_config`:
/// a repository made during the session whose fsmonitor is written on the
/// section's line, with quotes and a continued line, and with keys in
/// another case. Without it, the session ends with no warning and the
/// fsmonitor runs under the user's `git status` there.
#[test]
fn a_new_repositorys_configuration_is_read_as_git_reads_it() {
    let w = World::new();
    repo(&w);
    let out = w.run_agent(
        r#"
for d in a b c d; do git init -q $d; done
printf '[core] fsmonitor = touch $OUT/header; false\n' >> a/.git/config
printf '[core]fsmonitor="touch $OUT/quoted"\\\n"; false"\n' >> b/.git/config
printf '[CoRe]\n\tFsMonitor = touch $OUT/case; false\n' >> c/.git/config
printf '[core] ; a comment\n[alias] x = !touch $OUT/alias\n' >> d/.git/config
echo done
"#,
    );
    assert_eq!(text(&out.stdout), "done\n", "{}", text(&out.stderr));
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let report = report(&out);
    let proj = w.proj().display().to_string();
    for (d, says) in [
        ("a", "core.fsmonitor = touch"),
        ("b", "core.fsmonitor = touch"),
        ("c", "core.fsmonitor = touch"),
        ("d", "alias.x = !touch"),
    ] {
        let path = format!("{proj}/{d}/.git/config");
        let b = block(&report, &path).unwrap_or_else(|| panic!("no {path} in\n{report}"));
        assert!(b.contains(says), "{d}: {says:?} not in\n{b}");
    }
}

/// Guards the planner's reading of `.envrc` (`Planner::envrc`) and of
/// mise's `[env]` (`Planner::mise`): a file an allowed `.envrc` sources and
/// a script mise sources run without either asking again, so each is held
/// like `.envrc` itself; the environment files they load (`dotenv`,
/// `_.file`) are ordinary project files, reported when they change.
#[test]
fn what_direnv_and_mise_source_is_held_and_what_they_load_is_reported() {
    let w = World::new();
    repo(&w);
    std::fs::write(
        w.proj().join(".envrc"),
        "source_env_if_exists .envrc.local\ndotenv_if_exists \"config/dev.env\"\nsource ./scripts/env.sh\n",
    )
    .expect("w");
    std::fs::write(w.proj().join(".envrc.local"), "export A=1\n").expect("w");
    std::fs::create_dir_all(w.proj().join("scripts")).expect("mkdir");
    std::fs::write(w.proj().join("scripts/env.sh"), "export B=1\n").expect("w");
    std::fs::write(
        w.proj().join("mise.toml"),
        "[env]\n_.source = \"./scripts/mise.sh\"\n_.file = [\".env.mise\"]\n",
    )
    .expect("w");
    std::fs::write(w.proj().join("scripts/mise.sh"), "export C=1\n").expect("w");
    w.own();
    let out = w.run_agent(
        r#"
for f in .envrc.local scripts/env.sh scripts/mise.sh; do
  if echo 'touch $OUT/x' >> $f 2>/dev/null; then echo "wrote $f"; fi
done
mkdir -p config && echo 'LD_PRELOAD=/tmp/evil.so' > config/dev.env
echo 'PATH=/tmp/evil:/usr/bin' > .env.mise
echo done
"#,
    );
    assert_eq!(text(&out.stdout), "done\n", "{}", text(&out.stderr));
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let report = report(&out);
    let proj = w.proj().display().to_string();
    for f in ["config/dev.env", ".env.mise"] {
        let path = format!("{proj}/{f}");
        assert!(block(&report, &path).is_some(), "no {path} in\n{report}");
    }
}
