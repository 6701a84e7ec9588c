//! Red team for ADR-0134 (the keeper's edits of a held `.git/config`), as
//! the ordinary account in a home outside /tmp (ADR-0138). Each attack
//! makes the user's next plain `git push`, outside the floor, run a hook of
//! a bare repository the agent made in the project: git takes a branch's
//! remote that no configured remote has for a URL, a local path among
//! them; a NUL ends a key's name for git; a reader during the keeper's
//! write saw the file cut where the agent chose; `.git/branches` and
//! `.git/remotes` name a remote's URL.
//!
//! Guards, each seen to fail with its mechanism taken out: the check of
//! the remotes a file names (`git_config::loose_remotes`); the refusal of
//! control characters (`git_config::unwritten`); the keeper's NUL-first
//! write (`rename::write_in_place`, which emptied the file before); and
//! `branches`, `remotes` among `deferred::GIT_DIR_HELD`.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use crate::world::*;

/// Makes a bare repository `evil.git` in the project whose `pre-receive`
/// hook leaves `pwned` in the project, as the agent can.
const EVIL: &str = r#"
git init -q --bare evil.git
printf '#!/bin/sh\ntouch ../pwned\n' > evil.git/hooks/pre-receive
chmod +x evil.git/hooks/pre-receive
try() { name=$1; shift; if "$@" 2>/dev/null; then echo "$name:0"; else echo "$name:1"; fi; rm -f .git/config.lock; }
"#;

/// The user's next plain `git push`, outside the floor, after a commit of
/// their own; whether it ran the agent's hook.
fn user_pushes(w: &World) -> bool {
    let out = w
        .command(
            "git",
            &[
                "-c",
                "user.name=u",
                "-c",
                "user.email=u@e",
                "commit",
                "-q",
                "--allow-empty",
                "-m",
                "user",
            ],
        )
        .output()
        .expect("git commit");
    assert!(out.status.success(), "commit: {}", text(&out.stderr));
    let _ = w.command("git", &["push"]).output().expect("git push");
    w.proj().join("pwned").exists()
}

/// A branch's push remote set to a path (as `git config
/// branch.main.pushRemote` writes it), to a name no remote has (git then
/// takes the name for a path, relative to where the user runs `git`), or
/// left naming a remote whose URL a later edit takes away: each is
/// refused, and the user's next `git push` runs nothing of the agent's.
#[test]
fn a_branch_remote_that_is_a_path_is_refused() {
    let mut broke = Vec::new();
    for (name, edit) in [
        (
            "absolute",
            r#"try push git config push.default current
try path git config branch.main.pushRemote "$PWD/evil.git""#,
        ),
        (
            "relative",
            r#"try push git config push.default current
try path git config branch.main.pushRemote evil.git"#,
        ),
        (
            "upstream",
            r#"try push git config branch.main.merge refs/heads/main
try path git config branch.main.remote ./evil.git"#,
        ),
        (
            // Git reads a key's name as a C string: a NUL in a subsection
            // ends it there, so `remote."pushdefault\0".fetch` (a refspec
            // to nd7) is `remote.pushdefault` to git.
            "nul",
            r#"try push git config push.default current
cp .git/config .git/config.lock
printf '[remote "pushdefault\0"]\n\tfetch = %s\n' "$PWD/evil.git" >> .git/config.lock
try path /usr/bin/python3 -c 'import os; os.rename(".git/config.lock", ".git/config")'"#,
        ),
        (
            // Git ignores a configured remote whose name starts with `/`:
            // the name is a path all the same.
            "slash-named",
            r#"try push git config push.default current
git config remote."$PWD/evil.git".url https://example.invalid/r.git
try path git config branch.main.pushRemote "$PWD/evil.git""#,
        ),
        (
            "removed",
            r#"try push git config push.default current
git remote add evil.git https://example.invalid/r.git
git config branch.main.pushRemote evil.git
grep -v 'url = https://example.invalid/r.git' .git/config > .git/config.lock
try path /usr/bin/python3 -c 'import os; os.rename(".git/config.lock", ".git/config")'"#,
        ),
    ] {
        let w = World::new();
        crate::deferred_reads::repo(&w);
        let out = w.run_agent(&format!("{EVIL}{edit}\n"));
        let said = text(&out.stdout);
        assert!(
            said.contains("push:0"),
            "{name}: {said}\n{}",
            text(&out.stderr)
        );
        if user_pushes(&w) {
            broke.push(format!(
                "{name}: the user's push ran the agent's hook:\n{said}"
            ));
        } else if !said.contains("path:1") {
            broke.push(format!("{name}: let through:\n{said}"));
        }
    }
    assert!(broke.is_empty(), "{}", broke.join("\n"));
}

/// `.git/branches/<name>` and `.git/remotes/<name>` name a remote's URL
/// when the configuration has none by that name: with no `origin`
/// configured, the user's plain `git push` goes to `.git/branches/origin`'s
/// path and runs its hooks. `git init` makes `.git/branches`; it is held.
#[test]
fn a_remote_named_by_the_branches_directory_is_refused() {
    let w = World::new();
    crate::deferred_reads::repo(&w);
    assert!(w.proj().join(".git/branches").is_dir(), "git init makes it");
    let out = w.run_agent(&format!(
        "{EVIL}try branches sh -c 'echo \"$PWD/evil.git\" > .git/branches/origin'\n"
    ));
    let said = text(&out.stdout);
    assert!(
        !user_pushes(&w),
        "the user's push ran the agent's hook:\n{said}"
    );
    assert!(said.contains("branches:1"), "let through:\n{said}");
}

/// `.git/remotes/<name>`, which `git init` does not make, is not refused
/// (below) but reported at the end as one that lets git run code, as a
/// planted `commondir` is (ADR-0091).
#[test]
fn a_remotes_file_made_during_the_run_is_reported() {
    let w = World::new();
    crate::deferred_reads::repo(&w);
    let out = w.run_agent(
        "mkdir .git/remotes && printf 'URL: /x.git\\nPush: main:main\\n' > .git/remotes/origin",
    );
    let warned = text(&out.stderr);
    let file = w.proj().join(".git/remotes/origin");
    let named = format!(
        "let git run code (hooks, fsmonitor, commondir, a repository's configuration) at your next plain git command:\n  {}",
        file.display()
    );
    assert!(warned.contains(&named), "not reported:\n{warned}");
}

/// The same through `.git/remotes/origin`, which `git init` does not make:
/// a held entry that does not exist at the start is only watched on Linux,
/// so the agent makes it, and with no `origin` configured the user's plain
/// `git push` goes to its `URL:` and runs that repository's hooks.
#[test]
#[ignore = "open: a git directory's remotes/ made during the run is not refused on Linux (ADR-0138)"]
fn a_remote_named_by_a_remotes_file_made_during_the_run_is_refused() {
    let w = World::new();
    crate::deferred_reads::repo(&w);
    assert!(
        !w.proj().join(".git/remotes").exists(),
        "git init leaves it out"
    );
    let out = w.run_agent(&format!(
        "{EVIL}try remotes sh -c 'mkdir .git/remotes && printf \"URL: %s\\nPush: main:main\\n\" \"$PWD/evil.git\" > .git/remotes/origin'\n"
    ));
    let said = text(&out.stdout);
    assert!(
        !user_pushes(&w),
        "the user's push ran the agent's hook:\n{said}"
    );
}

/// What a `git` reading the held config while the keeper writes it may
/// see: the judged file whole, or one that begins with a NUL, which git
/// refuses whole ("bad config line 1") and so runs nothing, never a cut
/// one. A cut can end a listed value where the agent chose (it lays the
/// file out, and a page's end is where a reader's cut falls): a
/// `pushRemote = evil.gitx`, naming a remote with a URL, cut after
/// `evil.git` names a local path. The agent edits over and over while a
/// reader reads the file.
#[test]
fn a_reader_never_sees_the_held_config_cut() {
    let w = World::new();
    crate::deferred_reads::repo(&w);
    let racer = r##"
import os
base = open(".git/config").read()
versions = []
for name in ("a", "b"):
    text = base + "[user]\n\tname = " + name + "\n" + "#" + "x" * 6000 + "\n"
    versions.append(text.encode())
pid = os.fork()
if pid == 0:
    for i in range(400):
        with open(".git/config.lock", "wb") as f:
            f.write(versions[i % 2])
        os.rename(".git/config.lock", ".git/config")
    os._exit(0)
seen = {"whole": 0, "nul": 0, "empty": 0, "cut": 0}
while os.waitpid(pid, os.WNOHANG) == (0, 0):
    got = open(".git/config", "rb").read()
    if got in versions or got == base.encode():
        seen["whole"] += 1
    elif got.startswith(b"\0"):
        seen["nul"] += 1
    elif not got:
        seen["empty"] += 1
    else:
        seen["cut"] += 1
print("seen", seen)
"##;
    std::fs::write(w.proj().join("race.py"), racer).expect("write racer");
    let out = w.run_agent("/usr/bin/python3 race.py");
    let said = text(&out.stdout);
    assert!(said.contains("seen "), "{said}\n{}", text(&out.stderr));
    assert!(
        said.contains("'cut': 0"),
        "a reader saw the config cut: {said}"
    );
}

/// An interactive rebase the agent leaves stopped keeps its remaining
/// `exec` lines in `.git/rebase-merge/git-rebase-todo`: the user's `git
/// rebase --continue`, which `git status` suggests, runs them outside the
/// floor. Nothing holds the todo list (a rebase inside needs to write it);
/// it is reported at the end, as a planted `commondir` is.
#[test]
fn a_stopped_rebase_with_an_exec_line_is_reported() {
    let w = World::new();
    crate::deferred_reads::repo(&w);
    let out = w.run_agent(
        r#"git -c user.name=a -c user.email=b commit -q --allow-empty -m two
GIT_SEQUENCE_EDITOR="sh -c 'printf \"break\\nexec touch pwned\\n\" > \"\$1\"' -" git -c user.name=a -c user.email=b rebase -i HEAD~1 && echo stopped"#,
    );
    let said = text(&out.stdout);
    assert!(said.contains("stopped"), "{said}\n{}", text(&out.stderr));
    let warned = text(&out.stderr);
    let todo = w.proj().join(".git/rebase-merge/git-rebase-todo");
    assert!(todo.exists(), "the rebase did not stop:\n{warned}");
    assert!(
        warned.contains(&todo.display().to_string()),
        "not reported:\n{warned}"
    );
}

/// The check of the remotes a file names leaves git's own edits alone:
/// removing a remote a branch tracks and pushes to rewrites the branch's
/// keys first, and lands. (`git remote rename` of such a remote renames
/// the section first and the branch's keys in a second write: its first
/// write is refused, as the state between is the attack's, ADR-0138.)
#[test]
fn removing_a_tracked_remote_lands() {
    let w = World::new();
    crate::deferred_reads::repo(&w);
    let out = w.run_agent(
        r#"
git remote add origin https://example.invalid/x.git && echo add:0
git update-ref refs/remotes/origin/main HEAD
git branch --set-upstream-to=origin/main main && echo upstream:0
git config branch.main.pushRemote origin && echo pushremote:0
git remote remove origin && echo remove:0
"#,
    );
    let said = text(&out.stdout);
    for step in ["add", "upstream", "pushremote", "remove"] {
        assert!(
            said.contains(&format!("{step}:0")),
            "{step} failed:\n{said}\n{}",
            text(&out.stderr)
        );
    }
    let config = std::fs::read_to_string(w.proj().join(".git/config")).expect("config");
    assert!(!config.contains("remote"), "{config}");
}
