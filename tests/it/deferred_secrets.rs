//! What the watch reads for the agent: the end-of-session watch runs outside
//! the floor, and it follows what the agent planted (a `.git` file's
//! `gitdir:`, Claude Code's state re-pointed by a link, a hard link put on
//! the list). None of that may make it read a credential store the floor
//! keeps unreadable and copy it into the warning or the run's log, which the
//! next session can read (ADR-0092).
//!
//! Each attack leaves a secret the agent cannot `cat` in a store on the
//! deny list, makes the watch look at it, and then looks for the secret's
//! bytes in everything nd7 printed and in every file under nd7's state
//! directory (the logs a later session reads).
#![cfg(target_os = "linux")]

use std::process::Output;

use crate::deferred_reads::repo;
use crate::world::*;

/// Everything nd7 wrote where a later session can read it: the run's
/// output, and every file under its state directory.
fn everything_written(w: &World, out: &Output) -> String {
    let mut all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    let mut stack = vec![w.home().join(".local/state/nd7")];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.filter_map(Result::ok) {
            let p = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(p);
            } else if let Ok(bytes) = std::fs::read(&p) {
                all.push_str(&String::from_utf8_lossy(&bytes));
            }
        }
    }
    all
}

fn secret(w: &World, rel: &str, content: &str) {
    let path = w.home().join(rel);
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(&path, content).expect("write secret");
    w.own();
}

/// Guards `Unreadable::check` in the watch's reads (`watch::read_bounded`)
/// and the search's refusal to follow a `gitdir:` into a credential store:
/// the agent touches `~/.kube/config` and `~/.ssh/config` (a new change
/// time, which Landlock does not mediate), points a new repository's `.git`
/// file at each store, and re-points Claude Code's state at Docker's
/// logins. Without the guard the kube token, the ssh host's key path and
/// the Docker login are in the warning and the log.
#[test]
fn the_watch_never_reads_a_credential_store_for_the_agent() {
    let w = World::new();
    crate::deferred_reads::repo(&w);
    secret(
        &w,
        ".kube/config",
        "apiVersion: v1\nusers:\n- name: u\n  user:\n    token: KUBE-SECRET-TOKEN\n",
    );
    secret(
        &w,
        ".ssh/config",
        "Host prod\n  IdentityFile ~/.ssh/SSH-SECRET-KEY\n",
    );
    secret(
        &w,
        ".docker/config.json",
        r#"{"mcpServers": {"x": {"command": "sh", "env": {"T": "DOCKER-SECRET-LOGIN"}}}, "projects": {"/": {"mcpServers": {"y": {"command": "DOCKER-SECRET-TWO"}}}}}"#,
    );
    let out = w.run_agent(
        r#"
cat "$HOME_DIR/.kube/config" >/dev/null 2>&1 && echo read-kube
touch "$HOME_DIR/.kube/config" "$HOME_DIR/.ssh/config" 2>/dev/null
mkdir -p k s && echo "gitdir: $HOME_DIR/.kube" > k/.git && echo "gitdir: $HOME_DIR/.ssh" > s/.git
ln -sf "$HOME_DIR/.docker/config.json" "$HOME_DIR/.claude/claude.json.new" && mv -f "$HOME_DIR/.claude/claude.json.new" "$HOME_DIR/.claude/claude.json"
echo done
"#,
    );
    assert_eq!(text(&out.stdout), "done\n", "{}", text(&out.stderr));
    let all = everything_written(&w, &out);
    for s in [
        "KUBE-SECRET-TOKEN",
        "SSH-SECRET-KEY",
        "DOCKER-SECRET-LOGIN",
        "DOCKER-SECRET-TWO",
    ] {
        assert!(
            !all.contains(s),
            "{s} was copied out:\n{}",
            text(&out.stderr)
        );
    }
    // Each pointer is named, in words, and fails the run.
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let report = crate::deferred_reads::report(&out);
    let kube = w.in_home(".kube");
    assert!(
        report.contains(&format!(
            "a repository link that leads where the floor keeps the agent from reading: it lies in a place the floor keeps unreadable ({kube})"
        )),
        "{report}"
    );
    assert!(
        report.contains(&w.in_home(".claude/claude.json")),
        "{report}"
    );
}

/// A hard link to a secret that already lay in the project (made before the
/// session, where the floor cannot see it), which the agent would move onto
/// the list as `.envrc`: `nd7 run` starts nothing (`secret_links`, ADR-0095),
/// so neither the agent nor the watch reads it, and no log holds its bytes.
/// The watch's own identity check (`Unreadable::check`'s link count and
/// inode), for a link the start's bounded walk missed, is held by
/// `watch::unreadable`'s unit tests.
#[test]
fn a_hard_link_to_a_secret_in_the_project_is_never_read() {
    let w = World::new();
    crate::deferred_reads::repo(&w);
    secret(&w, ".pgpass", "db:5432:*:u:PG-SECRET-PASSWORD\n");
    std::fs::hard_link(w.home().join(".pgpass"), w.proj().join("old-link")).expect("ln");
    w.own();
    let out = w.run_agent("mv old-link .envrc && echo done");
    assert_eq!(text(&out.stdout), "", "{}", text(&out.stderr));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("hard link")
            && text(&out.stderr).contains("nothing was started"),
        "{}",
        text(&out.stderr)
    );
    let all = everything_written(&w, &out);
    assert!(!all.contains("PG-SECRET-PASSWORD"), "{}", text(&out.stderr));
}

/// Guards the snapshot's refusal to list a directory on the list whose
/// real place is a credential store: `.vscode` left as a link to `~/.kube`
/// (by an earlier session: links are followed by the plan), whose names
/// would otherwise be listed and each file named in the warning.
#[test]
fn a_directory_on_the_list_that_leads_into_a_store_is_not_listed() {
    let w = World::new();
    crate::deferred_reads::repo(&w);
    secret(&w, ".kube/KUBE-SECRET-NAME", "x\n");
    std::os::unix::fs::symlink(w.in_home(".kube"), w.proj().join(".vscode")).expect("ln");
    w.own();
    let out = w.run_agent("echo done");
    assert_eq!(text(&out.stdout), "done\n", "{}", text(&out.stderr));
    let all = everything_written(&w, &out);
    assert!(!all.contains("KUBE-SECRET-NAME"), "{}", text(&out.stderr));
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let report = crate::deferred_reads::report(&out);
    let kube = w.in_home(".kube");
    // Named as the plan reached it, through the link (`~/.kube/`).
    let b = crate::deferred_reads::block(&report, &kube)
        .or_else(|| crate::deferred_reads::block(&report, &format!("{kube}/")))
        .unwrap_or_else(|| panic!("no {kube} in\n{report}"));
    assert!(b.contains("keeps unreadable"), "{b}");
}

/// Holds (checks `Unreadable::check` and `place_of`): a `gitdir:` into a
/// credential store by way of `/proc/self/root` and `/proc/self/cwd`.
/// Nothing of the secret may be written. (A hard link of `~/.kube/config`
/// the user made in the project before the session now stops `nd7 run`
/// at the start, ADR-0095; the watch's identity check for one is held by
/// `watch::unreadable`'s unit tests.)
#[test]
fn proc_paths_and_hard_links_do_not_lead_the_watch_to_a_secret() {
    let w = World::new();
    repo(&w);
    let kube = w.home().join(".kube/config");
    std::fs::create_dir_all(kube.parent().expect("p")).expect("mkdir");
    std::fs::write(&kube, "[core]\n\tfsmonitor = KUBE-SECRET-TOKEN\n").expect("w");
    w.own();
    let out = w.run_agent(
        r#"
touch "$HOME_DIR/.kube/config" 2>/dev/null
mkdir -p a b && echo "gitdir: /proc/self/root$HOME_DIR/.kube" > a/.git
echo "gitdir: /proc/self/cwd/../../../../../../../../..$HOME_DIR/.kube" > b/.git
echo done
"#,
    );
    assert_eq!(text(&out.stdout), "done\n", "{}", text(&out.stderr));
    let all = everything_written(&w, &out);
    assert!(
        !all.contains("KUBE-SECRET-TOKEN"),
        "the secret was written:\n{all}"
    );
}

/// Guards the watch's refusal to read what is not a file on a disk
/// (`Unreadable::check`, `/proc`): a new repository whose `hooks` is a
/// link to `/proc/<pid>` of another of the user's programs, outside the
/// floor (the agent cannot see it, but the watch, unconfined, can). Its
/// `environ` and `cmdline` are regular files to `stat`, new by their change
/// time; without the guard the program's command line (and whatever else
/// of `/proc` the unconfined watch may read, an environment where the
/// kernel lets it) is copied into the warning and the log.
#[test]
fn the_watch_does_not_read_another_programs_proc_files_for_the_agent() {
    let w = World::new();
    repo(&w);
    // A program of the user's own, started as the user's shell starts it.
    let mut victim = w
        .command(
            "bash",
            &[
                "-c",
                "VICTIM_TOKEN=PROC-ENV-SECRET exec -a PROC-CMDLINE-SECRET sleep 600 & echo $!; wait",
            ],
        )
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("victim");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(victim.stdout.as_mut().expect("stdout")),
        &mut line,
    )
    .expect("pid");
    let pid: u32 = line.trim().parse().expect("pid");
    // The pattern is not the secret's text: what the agent's `grep` is
    // given is in the log (what ran, issue 32), as the agent's own word.
    let out = w.run_agent(&format!(
        r#"
tr "\\0" "\\n" < /proc/{pid}/environ 2>/dev/null | grep -q 'PROC-ENV-SECRE[T]' && echo read-it
mkdir -p x/.git && ln -s /proc/{pid} x/.git/hooks
mkdir -p y && echo "gitdir: /proc/{pid}/cwd/../../../../../../../../../proc/{pid}" > y/.git
echo done
"#
    ));
    let _ = std::process::Command::new("kill")
        .arg(pid.to_string())
        .status();
    let _ = victim.wait();
    assert_eq!(text(&out.stdout), "done\n", "{}", text(&out.stderr));
    let all = everything_written(&w, &out);
    for secret in ["PROC-ENV-SECRET", "PROC-CMDLINE-SECRET"] {
        assert!(!all.contains(secret), "{secret} was written:\n{all}");
    }
}
