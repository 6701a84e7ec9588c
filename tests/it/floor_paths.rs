//! Attacks on the floor through paths (issue 10, items 1, 2, 3 and 7), each
//! tried as the ordinary account, by an agent script under `nd7 run`, with
//! Bash commands routed through `nd7-exec` as Claude Code's shell prefix routes them.
//!
//! Every refusal here was seen to fail with its mechanism taken out; each
//! test names the line it guards:
//! - `open_nofollow` in `src/kernel/linux.rs` (rules are opened with
//!   `RESOLVE_NO_SYMLINKS`; with a plain `open` the links are followed);
//! - `with_real_places` in `src/session.rs` (secrets denied where links
//!   lead, too);
//! - `grants_named` in `src/policy/mod.rs` (deny by any name);
//! - `pin_roots` in `src/run.rs` and the pin check in `command_rules`;
//! - `policy::secrets` (the credential-store list and `~/.nd7/secrets`).
#![cfg(target_os = "linux")]

use std::os::unix::fs::symlink;
use std::process::Output;

use crate::world::*;

fn lines(out: &Output) -> Vec<String> {
    text(&out.stdout).lines().map(str::to_string).collect()
}

/// `x NAME CMD ARGS…` prints `NAME:yes` when CMD succeeds, `NAME:no` when not.
const X: &str = r#"x() { local name=$1; shift; if "$@" >/dev/null 2>&1; then echo "$name:yes"; else echo "$name:no"; fi; }"#;

/// Runs `body` (with `x` defined) as the agent of one session.
fn session(w: &World, body: &str) -> Output {
    w.run_agent(&format!("{X}\n{body}"))
}

/// `~/.claude.json -> .claude/claude.json`, as `nd7 setup` leaves it on Linux.
fn with_claude_json_link(w: &World) {
    std::fs::write(w.home().join(".claude/claude.json"), "{}").expect("write");
    symlink(".claude/claude.json", w.home().join(".claude.json")).expect("symlink");
}

/// Guards `open_nofollow` (`src/kernel/linux.rs`): the home's entry
/// `.claude.json` is a link into the writable `~/.claude`; followed when the
/// rules are built, the agent chooses what it opens.
#[test]
fn a_re_pointed_claude_json_link_opens_nothing_to_later_commands_or_sessions() {
    let w = World::new();
    with_claude_json_link(&w);
    let out = session(
        &w,
        r#"
repoint() { rm -f "$HOME_DIR/.claude/claude.json" && ln -s "$1" "$HOME_DIR/.claude/claude.json"; }
x repointed repoint "$HOME_DIR/.ssh"
x exec-ssh "$EXEC" "cat '$HOME_DIR/.ssh/id_ed25519'"
x exec-ssh-by-link "$EXEC" "cat '$HOME_DIR/.claude.json/id_ed25519'"
repoint "$HOME_DIR/.local/state/nd7/vault"
x exec-vault "$EXEC" "cat '$HOME_DIR/.local/state/nd7/vault/machine.key'"
repoint "$HOME_DIR/.nd7"
x exec-nd7 "$EXEC" "ls '$HOME_DIR/.nd7/runs'"
repoint "$HOME_DIR/.ssh"
"#,
    );
    assert_eq!(
        lines(&out),
        [
            "repointed:yes",
            "exec-ssh:no",
            "exec-ssh-by-link:no",
            "exec-vault:no",
            "exec-nd7:no"
        ],
        "{}",
        text(&out.stderr)
    );
    // The next session starts with the link still pointing at ~/.ssh.
    let out = session(
        &w,
        r#"
x agent-ssh cat "$HOME_DIR/.ssh/id_ed25519"
x exec-ssh "$EXEC" "cat '$HOME_DIR/.ssh/id_ed25519'"
x claude-state touch "$HOME_DIR/.claude/state"
"#,
    );
    assert_eq!(
        lines(&out),
        ["agent-ssh:no", "exec-ssh:no", "claude-state:yes"],
        "{}",
        text(&out.stderr)
    );
}

/// Guards `with_real_places` (`src/session.rs`): a dotfile manager's
/// `~/.ssh -> dotfiles/ssh` must not leave the real directory readable.
#[test]
fn a_symlinked_ssh_directory_is_unreadable_where_it_really_is() {
    let w = World::new();
    std::fs::create_dir_all(w.home().join("dotfiles")).expect("mkdir");
    std::fs::rename(w.home().join(".ssh"), w.home().join("dotfiles/ssh")).expect("move");
    symlink("dotfiles/ssh", w.home().join(".ssh")).expect("symlink");
    std::fs::write(w.home().join("dotfiles/vimrc"), "set nu\n").expect("write");
    let out = session(
        &w,
        r#"
x agent-real cat "$HOME_DIR/dotfiles/ssh/id_ed25519"
x agent-link cat "$HOME_DIR/.ssh/id_ed25519"
x exec-real "$EXEC" "cat '$HOME_DIR/dotfiles/ssh/id_ed25519'"
x exec-link "$EXEC" "cat '$HOME_DIR/.ssh/id_ed25519'"
x other-dotfiles cat "$HOME_DIR/dotfiles/vimrc"
"#,
    );
    assert_eq!(
        lines(&out),
        [
            "agent-real:no",
            "agent-link:no",
            "exec-real:no",
            "exec-link:no",
            "other-dotfiles:yes"
        ],
        "{}",
        text(&out.stderr)
    );
}

/// Guards `grants_named` (`src/policy/mod.rs`) and the alias `nd7 allow`
/// records (`change_grant` in `src/session.rs`): the user granted through a
/// link in the project, the agent re-pointed it, and `nd7 deny` of the same
/// name must still take the grant back.
#[test]
fn deny_takes_back_a_grant_made_through_a_link_since_re_pointed() {
    let w = World::new();
    symlink(w.outside(), w.proj().join("out")).expect("symlink");
    let (child, pid) = w.start_agent(
        r#"
touch stage1; wait_for go1
"$EXEC" "touch out/granted"; echo "granted:$?"
rm out && ln -s "$HOME_DIR/docs" out; echo "repointed:$?"
touch stage2; wait_for go2
"$EXEC" "touch '$OUT/after-deny'" 2>/dev/null; echo "after-deny:$?"
"#,
    );
    w.wait_for("stage1");
    let link = w.proj().join("out").display().to_string();
    let outside = w.outside().display().to_string();
    let allow = w.nd7(&["allow", &link]).output().expect("allow");
    assert_eq!(
        text(&allow.stdout),
        format!("run {pid}: writes under {outside} allowed from the next command\n")
    );
    assert!(
        text(&allow.stderr).contains(&format!("{link} leads to {outside}")),
        "{}",
        text(&allow.stderr)
    );
    w.signal("go1");
    w.wait_for("stage2");
    let deny = w.nd7(&["deny", &link]).output().expect("deny");
    assert_eq!(
        text(&deny.stdout),
        format!("run {pid}: writes under {outside} denied from the next command\n"),
        "{}",
        text(&deny.stderr)
    );
    assert!(deny.status.success());
    w.signal("go2");
    let out = child.wait_with_output().expect("agent ends");
    assert_eq!(
        lines(&out),
        ["granted:0", "repointed:0", "after-deny:1"],
        "{}",
        text(&out.stderr)
    );
    assert!(w.outside().join("granted").exists());
    assert!(!w.outside().join("after-deny").exists());
}

/// Guards `open_nofollow` (the exit's rules) and `pin_roots` in
/// `src/run.rs` (the next session's floor): under a grant of `~/.cache`, a
/// command swaps the floor's write root `~/.cache/claude` for a link to `/`.
#[test]
fn a_write_root_swapped_for_a_link_to_the_root_opens_nothing() {
    let w = World::new();
    std::fs::create_dir_all(w.home().join(".cache/claude")).expect("mkdir");
    let (child, _pid) = w.start_agent(
        r#"
touch stage1; wait_for go1
"$EXEC" "rm -rf '$HOME_DIR/.cache/claude' && ln -s / '$HOME_DIR/.cache/claude'"; echo "swapped:$?"
"$EXEC" "touch '$OUT/while-granted'" 2>/dev/null; echo "while-granted:$?"
touch stage2; wait_for go2
"$EXEC" "touch '$OUT/after-deny'" 2>/dev/null; echo "after-deny:$?"
"#,
    );
    w.wait_for("stage1");
    let cache = w.in_home(".cache");
    assert!(
        w.nd7(&["allow", &cache])
            .output()
            .expect("allow")
            .status
            .success()
    );
    w.signal("go1");
    w.wait_for("stage2");
    assert!(
        w.nd7(&["deny", &cache])
            .output()
            .expect("deny")
            .status
            .success()
    );
    w.signal("go2");
    let out = child.wait_with_output().expect("agent ends");
    assert_eq!(
        lines(&out),
        ["swapped:0", "while-granted:1", "after-deny:1"],
        "{}",
        text(&out.stderr)
    );
    // The next session: its floor must not follow the link either.
    let out = session(
        &w,
        r#"
x agent touch "$OUT/next-session"
x exec "$EXEC" "touch '$OUT/next-session-exec'"
"#,
    );
    assert_eq!(
        lines(&out),
        ["agent:no", "exec:no"],
        "{}",
        text(&out.stderr)
    );
    let warning = format!(
        "nd7 run: warning: {} is reached through a symbolic link",
        w.in_home(".cache/claude")
    );
    assert!(
        text(&out.stderr).contains(&warning),
        "{}",
        text(&out.stderr)
    );
    for f in [
        "while-granted",
        "after-deny",
        "next-session",
        "next-session-exec",
    ] {
        assert!(!w.outside().join(f).exists(), "{f}");
    }
}

/// The same with the project's parent granted: the project itself is
/// swapped for a link to `/`. Guards `open_nofollow` for the exit, and the
/// refusal of a project that is `/` (`RunError::Project` in `src/run.rs`)
/// for a session started in the link. Run without user namespaces: with
/// them the project is pinned by a mount of its own (ADR-0049) and cannot be
/// renamed at all, which would leave these two mechanisms untried.
#[test]
fn a_project_swapped_for_a_link_to_the_root_opens_nothing() {
    let w = World::new().without_user_namespaces();
    let work = w.root.join("work");
    std::fs::create_dir_all(work.join("p")).expect("mkdir");
    let agent = w.agent(
        r#"
touch stage1; while [ ! -e go1 ]; do sleep 0.05; done
cd .. && "$EXEC" "mv p p.old && ln -s / p"; echo "swapped:$?"
"$EXEC" "touch '$OUT/after-swap'" 2>/dev/null; echo "after-swap:$?"
"#,
    );
    let mut child = w
        .command_in(&work.join("p"), ND7, &["run", &agent])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("nd7 run");
    let stage = work.join("p/stage1");
    while !stage.exists() {
        std::thread::sleep(std::time::Duration::from_millis(20));
        if let Ok(Some(status)) = child.try_wait() {
            panic!("nd7 run ended early: {status}");
        }
    }
    let grant = w
        .nd7(&["allow", &work.display().to_string()])
        .output()
        .expect("allow");
    assert!(grant.status.success(), "{}", text(&grant.stderr));
    std::fs::write(work.join("p/go1"), "").expect("go");
    let out = child.wait_with_output().expect("agent ends");
    assert_eq!(
        lines(&out),
        ["swapped:0", "after-swap:1"],
        "{}",
        text(&out.stderr)
    );
    assert!(!w.outside().join("after-swap").exists());
    // A session started in the link would have / as its project.
    let marker = w.outside().join("ran");
    let agent = w.agent(&format!("touch '{}'", marker.display()));
    let out = w
        .command_in(&work.join("p"), ND7, &["run", &agent])
        .output()
        .expect("nd7 run");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("nd7 run: the project would be /"),
        "{}",
        text(&out.stderr)
    );
    assert!(!marker.exists());
}

/// The probe for `~/.nd7`: re-point `~/.claude/claude.json` (which
/// `~/.claude.json` leads through) to `~/.nd7`, then try to rewrite the
/// session's record to grant `/`, to write through the link and directly,
/// and to write outside (which succeeds if the record was rewritten).
const ND7_PROBE: &str = r#"
rm -f "$HOME_DIR/.claude/claude.json" && ln -s "$HOME_DIR/.nd7" "$HOME_DIR/.claude/claude.json"
x record "$EXEC" "sed -i -e 's#\"grants\": \[\]#\"grants\": [\"/\"]#' -e 's#\"grants\": \[\$#\"grants\": [\"/\",#' '$HOME_DIR'/.claude.json/sessions/*/record.json"
x through-link "$EXEC" "touch '$HOME_DIR/.claude.json/pwn'"
x direct "$EXEC" "mkdir '$HOME_DIR/.nd7/x'"
x outside "$EXEC" "touch '$OUT/escaped'"
"#;

const ND7_REFUSED: [&str; 4] = ["record:no", "through-link:no", "direct:no", "outside:no"];

/// Guards `open_nofollow`: "nothing under `~/.nd7` is ever writable" with the
/// project = the home, the home granted, and `/` granted.
#[test]
fn nd7_stays_unwritable_through_a_link_whatever_the_project_or_the_grants() {
    let w = World::new();
    with_claude_json_link(&w);
    let unchanged = |what: &str| {
        assert!(!w.outside().join("escaped").exists(), "{what}");
        assert!(!w.home().join(".nd7/pwn").exists(), "{what}");
        assert!(!w.home().join(".nd7/x").exists(), "{what}");
    };
    // Project = home: every entry of the home is a floor write root. An
    // earlier session left the link pointing at ~/.nd7.
    std::fs::create_dir_all(w.home().join(".nd7/runs")).expect("mkdir");
    std::fs::remove_file(w.home().join(".claude/claude.json")).expect("rm");
    symlink(w.acct.join(".nd7"), w.home().join(".claude/claude.json")).expect("symlink");
    let agent = w.agent(&format!("{X}\n{ND7_PROBE}"));
    let out = w
        .command_in(&w.acct, ND7, &["run", &agent])
        .output()
        .expect("nd7 run");
    assert_eq!(
        lines(&out),
        ND7_REFUSED,
        "project = home: {}",
        text(&out.stderr)
    );
    unchanged("project = home");

    // The home granted, then `/` granted (where writing outside is granted
    // too, so only the record and ~/.nd7 are judged).
    let home = w.in_home("");
    for (grant, outside) in [
        (home.trim_end_matches('/'), "outside:no"),
        ("/", "outside:yes"),
    ] {
        let (child, _pid) = w.start_agent(&format!("{X}\ntouch stage1; wait_for go1\n{ND7_PROBE}"));
        w.wait_for("stage1");
        let allow = w.nd7(&["allow", grant]).output().expect("allow");
        assert!(allow.status.success(), "{}", text(&allow.stderr));
        w.signal("go1");
        let out = child.wait_with_output().expect("agent ends");
        let mut want = ND7_REFUSED.to_vec();
        want[3] = outside;
        assert_eq!(lines(&out), want, "{grant} granted: {}", text(&out.stderr));
        std::fs::remove_file(w.outside().join("escaped")).ok();
        unchanged(grant);
        std::fs::remove_file(w.proj().join("stage1")).ok();
        std::fs::remove_file(w.proj().join("go1")).ok();
    }
}

/// Files the tests make in the home: credential stores, and their
/// neighbours, which stay readable.
const STORES: &[&str] = &[
    ".netrc",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    ".config/gh/hosts.yml",
    ".docker/config.json",
    ".gnupg/private-keys-v1.d/k.key",
    ".kube/config",
    ".password-store/bank.gpg",
    ".local/share/keyrings/login.keyring",
    ".config/gcloud/credentials.db",
    ".azure/msal_token_cache.json",
    ".cargo/credentials.toml",
    "docs/private/key",
];
const NEIGHBOURS: &[&str] = &[
    ".bashrc",
    ".config/git/config",
    ".docker/contexts/meta.json",
    ".local/share/applications/x.desktop",
    ".cargo/config.toml",
    ".claude/.credentials.json",
];

/// Guards `policy::secrets` and its use in `Policy::unreadable`: the
/// well-known stores are unreadable by the agent and through the exit, files
/// directly in the home included; `~/.nd7/secrets` adds one and takes one
/// off; Claude Code's own credentials stay readable inside the floor.
#[test]
fn credential_stores_are_unreadable_and_the_list_is_the_users_to_change() {
    let w = World::new();
    for f in STORES.iter().chain(NEIGHBOURS) {
        let path = w.home().join(f);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, "TOKEN").expect("write");
    }
    std::fs::create_dir_all(w.home().join(".nd7")).expect("mkdir");
    std::fs::write(
        w.home().join(".nd7/secrets"),
        "# mine\n~/docs/private\n-~/.npmrc\n",
    )
    .expect("write");
    let mut body = String::new();
    for f in STORES.iter().chain(NEIGHBOURS) {
        body.push_str(&format!(
            "x 'agent {f}' cat \"$HOME_DIR/{f}\"\nx 'exec {f}' \"$EXEC\" \"cat '$HOME_DIR/{f}'\"\n"
        ));
    }
    // The list itself cannot be changed from inside, even with the home granted.
    body.push_str(
        "x agent-edit-list sh -c \"echo '-~/.netrc' >> '$HOME_DIR/.nd7/secrets'\"\n\
         x exec-edit-list \"$EXEC\" \"echo '-~/.netrc' >> '$HOME_DIR/.nd7/secrets'\"\n",
    );
    let out = session(&w, &body);
    let mut want: Vec<String> = Vec::new();
    for f in STORES.iter().chain(NEIGHBOURS) {
        // ~/.npmrc was taken off the list by the user's file.
        let readable = NEIGHBOURS.contains(f) || *f == ".npmrc";
        let word = if readable { "yes" } else { "no" };
        want.push(format!("agent {f}:{word}"));
        want.push(format!("exec {f}:{word}"));
    }
    want.push("agent-edit-list:no".into());
    want.push("exec-edit-list:no".into());
    assert_eq!(lines(&out), want, "{}", text(&out.stderr));

    // A grant of a store is refused, naming it.
    let (child, _) = w.start_agent("touch stage1; wait_for go1");
    w.wait_for("stage1");
    let gnupg = w.in_home(".gnupg");
    let allow = w.nd7(&["allow", &gnupg]).output().expect("allow");
    assert_eq!(allow.status.code(), Some(2));
    assert!(
        text(&allow.stderr).contains(&format!("{gnupg} is kept unreadable by nd7")),
        "{}",
        text(&allow.stderr)
    );
    w.signal("go1");
    child.wait_with_output().expect("agent ends");

    // A bad line: nd7 run names the file and the line and runs nothing.
    std::fs::write(w.home().join(".nd7/secrets"), "~/.fine\nrelative/path\n").expect("write");
    let marker = w.outside().join("ran");
    let out = w.run_agent(&format!("touch '{}'", marker.display()));
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        format!(
            "nd7 run: {} line 2: \"relative/path\": a path must start with ~/ or /\n",
            w.in_home(".nd7/secrets")
        )
    );
    assert!(!marker.exists());
}

/// Hard links are the kernel's to refuse (Landlock's `Refer` right, which
/// nd7 handles): a second name in the project for a file the floor may only
/// read, or not read at all, would make it writable or readable there.
#[test]
fn hard_links_give_no_second_way_in() {
    let w = World::new();
    std::fs::write(w.home().join(".bashrc"), "# rc\n").expect("write");
    let out = session(
        &w,
        r#"
x agent-rc ln "$HOME_DIR/.bashrc" rc
x agent-key ln "$HOME_DIR/.ssh/id_ed25519" key
x exec-rc "$EXEC" "ln '$HOME_DIR/.bashrc' rc"
x exec-key "$EXEC" "ln '$HOME_DIR/.ssh/id_ed25519' key"
x exec-own "$EXEC" "touch mine && ln mine mine2"
"#,
    );
    assert_eq!(
        lines(&out),
        [
            "agent-rc:no",
            "agent-key:no",
            "exec-rc:no",
            "exec-key:no",
            "exec-own:yes"
        ],
        "{}",
        text(&out.stderr)
    );
}

/// Guards the pin check of grants (`pinned` in `src/sandbox/linux/mod.rs`):
/// a granted directory replaced by another one (here under a grant of its
/// parent, since taken back) is not the directory the user granted; the
/// grant is taken back, from the next command on, and off the record.
#[test]
fn a_grant_whose_directory_was_replaced_is_taken_back() {
    let w = World::new();
    std::fs::create_dir_all(w.outside().join("a")).expect("mkdir");
    let (child, pid) = w.start_agent(&format!(
        r#"{X}
touch stage1; wait_for go1
x swap "$EXEC" "mv '$OUT/a' '$OUT/a.old' && mkdir '$OUT/a'"
touch stage2; wait_for go2
x after "$EXEC" "touch '$OUT/a/after'"
touch stage3; wait_for go3
"#
    ));
    w.wait_for("stage1");
    let (outside, a) = (
        w.outside().display().to_string(),
        w.outside().join("a").display().to_string(),
    );
    for grant in [&a, &outside] {
        assert!(
            w.nd7(&["allow", grant])
                .output()
                .expect("allow")
                .status
                .success()
        );
    }
    w.signal("go1");
    w.wait_for("stage2");
    assert!(
        w.nd7(&["deny", &outside])
            .output()
            .expect("deny")
            .status
            .success()
    );
    w.signal("go2");
    w.wait_for("stage3");
    let deny = w.nd7(&["deny", &a]).output().expect("deny");
    assert_eq!(
        text(&deny.stdout),
        format!("run {pid}: {a} was not a grant\n"),
        "{}",
        text(&deny.stderr)
    );
    w.signal("go3");
    let out = child.wait_with_output().expect("agent ends");
    assert_eq!(
        lines(&out),
        ["swap:yes", "after:no"],
        "{}",
        text(&out.stderr)
    );
    assert!(!w.outside().join("a/after").exists());
}
