//! Git's everyday edits of a held `.git/config` under `nd7 run` (issue 33,
//! item 4; ADR-0134), and the attacks on the way they are let through, as
//! the ordinary account in a home outside /tmp: by the agent itself and by
//! a command through the exit.
//!
//! Guards, each seen to fail with its mechanism taken out: the filter's
//! rename calls (`rename_calls` in `src/sandbox/linux/seccomp.rs`; without
//! them every edit fails with EBUSY); the keeper's judgement
//! (`policy::git_config::judge`; passing everything, every attack lands);
//! the same-directory check in `rename::edit` (without it, the lock from
//! another directory lands).
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use crate::world::*;

/// Renames its first argument onto its second, as git does.
const RENAME: &str = "/usr/bin/python3 -c 'import os,sys; os.rename(sys.argv[1], sys.argv[2])'";

fn config(w: &World) -> String {
    std::fs::read_to_string(w.proj().join(".git/config")).expect("read .git/config")
}

fn git_get(w: &World, key: &str) -> Option<String> {
    let out = w
        .command("git", &["config", "--get", key])
        .output()
        .expect("git");
    out.status
        .success()
        .then(|| text(&out.stdout).trim().to_string())
}

/// `git config user.email`, `git remote add`, `git branch
/// --set-upstream-to` and `git branch -d` work under `nd7 run`, from the
/// agent and through the exit: each lands in `.git/config` as git wrote it,
/// and no lock file is left behind.
#[test]
fn everyday_git_config_edits_land() {
    let w = World::new();
    crate::deferred_reads::repo(&w);
    let out = w.run_agent(
        r#"
git config user.email agent@example.com && echo email:0 || echo email:1
git remote add origin https://example.invalid/x.git && echo remote:0 || echo remote:1
git update-ref refs/remotes/origin/main HEAD
git branch --set-upstream-to=origin/main main && echo upstream:0 || echo upstream:1
git branch b && git branch -d b && echo delete:0 || echo delete:1
"$EXEC" 'git config user.name "Through Exit"' && echo exit:0 || echo exit:1
"$EXEC" 'git remote add fork git@example.invalid:o/r.git' && echo exit-remote:0 || echo exit-remote:1
"#,
    );
    let said = text(&out.stdout);
    for step in [
        "email",
        "remote",
        "upstream",
        "delete",
        "exit",
        "exit-remote",
    ] {
        assert!(
            said.contains(&format!("{step}:0")),
            "{step} failed:\n{said}\n{}",
            text(&out.stderr)
        );
    }
    assert_eq!(
        git_get(&w, "user.email").as_deref(),
        Some("agent@example.com")
    );
    assert_eq!(git_get(&w, "user.name").as_deref(), Some("Through Exit"));
    assert_eq!(
        git_get(&w, "remote.origin.url").as_deref(),
        Some("https://example.invalid/x.git")
    );
    assert_eq!(
        git_get(&w, "remote.fork.url").as_deref(),
        Some("git@example.invalid:o/r.git")
    );
    assert_eq!(git_get(&w, "branch.main.remote").as_deref(), Some("origin"));
    assert!(!w.proj().join(".git/config.lock").exists());
}

/// Every edit that could make a later plain `git` run something is still
/// refused (git's EBUSY, the file unchanged), whether git writes it or the
/// lock file is made by hand: a key that runs a program, an include, an
/// `insteadOf` to `ext::`, a remote with an `ext::` URL, a key on its
/// section's line, a lock that is a symbolic or hard link to an acceptable
/// file, an acceptable lock renamed from another directory, a flag of
/// `renameat2`.
#[test]
fn edits_that_could_run_something_are_refused() {
    let w = World::new();
    crate::deferred_reads::repo(&w);
    let before = config(&w);
    let agent = format!(
        r#"
rename() {{ {RENAME} "$@"; }}
# A hand-made lock must be there, or its refusal would prove nothing.
made() {{ [ -e "$1" ] || [ -L "$1" ] || echo "$1:missing"; }}
try() {{ name=$1; shift; if "$@" 2>/dev/null; then echo "$name:0"; else echo "$name:1"; fi; rm -f .git/config.lock; }}
try fsmonitor git config core.fsmonitor /tmp/x
try alias git config alias.st '!sh'
try include git config include.path /tmp/inc
try insteadof git config url.ext::sh.insteadOf https://
try ext-remote git remote add evil 'ext::sh -c touch% /tmp/pwn'
try helper-remote git remote add evil2 'evil::https://example.invalid/r'
try exit-fsmonitor "$EXEC" 'git config core.fsmonitor /tmp/x'
# Hand-written lock files: each acceptable to the judge but for the trick.
cp .git/config .git/config.lock && printf '[core]fsmonitor=/tmp/x\n' >> .git/config.lock
made .git/config.lock
try section-line rename .git/config.lock .git/config
cp .git/config ok.cfg && printf '[user]\n\tname = ok\n' >> ok.cfg
ln -s "$PWD/ok.cfg" .git/config.lock
made .git/config.lock
try symlink rename .git/config.lock .git/config
cp ok.cfg .git/ok.cfg && ln .git/ok.cfg .git/config.lock
made .git/config.lock
try hardlink rename .git/config.lock .git/config
mkdir -p other && cp ok.cfg other/config.lock
made other/config.lock
try other-dir rename other/config.lock .git/config
cp ok.cfg .git/config.lock
made .git/config.lock
try exchange /usr/bin/python3 -c 'import ctypes,os; libc=ctypes.CDLL(None, use_errno=True); r=libc.renameat2(-100, b".git/config.lock", -100, b".git/config", 2); os._exit(0 if r == 0 else 1)'
"#
    );
    let out = w.run_agent(&agent);
    let said = text(&out.stdout);
    for step in [
        "fsmonitor",
        "alias",
        "include",
        "insteadof",
        "ext-remote",
        "helper-remote",
        "exit-fsmonitor",
        "section-line",
        "symlink",
        "hardlink",
        "other-dir",
        "exchange",
    ] {
        assert!(
            said.contains(&format!("{step}:1")),
            "{step} was let through:\n{said}\n{}",
            text(&out.stderr)
        );
    }
    assert!(!said.contains(":missing"), "a lock was not made:\n{said}");
    assert_eq!(config(&w), before, "the held config changed");
    assert!(
        w.proj().join(".git/ok.cfg").exists(),
        "the hard link's file stays"
    );
}

/// A lock file rewritten while the keeper judges it: the keeper writes the
/// bytes it read and judged, never what the file holds by then. An agent
/// renames an acceptable lock onto the config over and over while another
/// process keeps rewriting the lock's inode in place with a key that runs
/// a program; the config never gets it.
#[test]
fn a_lock_rewritten_after_the_check_is_not_what_lands() {
    let w = World::new();
    crate::deferred_reads::repo(&w);
    let racer = r#"
import os, sys
base = open(".git/config").read()
good = (base + "[user]\n\tname = a\n").encode()
bad = (base + "[core]\n\tpager=xx\n").encode()
assert len(good) == len(bad)
pid = os.fork()
if pid == 0:
    # Rewrites whatever inode the lock's name has, in place, for ever.
    while True:
        try:
            fd = os.open(".git/config.lock", os.O_WRONLY)
            os.pwrite(fd, bad, 0)
            os.close(fd)
        except OSError:
            pass
landed = 0
for _ in range(300):
    fd = os.open(".git/config.lock", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, good)
    os.close(fd)
    try:
        os.rename(".git/config.lock", ".git/config")
        landed += 1
    except OSError:
        pass
    if b"pager" in open(".git/config", "rb").read():
        print("bad landed")
        break
    open(".git/config", "rb").read()
os.kill(pid, 9)
print("landed", landed)
"#;
    std::fs::write(w.proj().join("race.py"), racer).expect("write racer");
    let out = w.run_agent("/usr/bin/python3 race.py; rm -f .git/config.lock");
    let said = text(&out.stdout);
    assert!(said.contains("landed "), "{said}\n{}", text(&out.stderr));
    assert!(!said.contains("bad landed"), "{said}");
    assert!(!config(&w).contains("pager"), "{}", config(&w));
}
