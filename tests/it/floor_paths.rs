//! Attacks on the floor through paths (issue 10, items 1, 2, 3 and 7), each
//! tried as the ordinary account, by an agent script under `nd7 run`, with
//! Bash commands routed through `nd7-exec` as Claude Code's shell prefix routes them.
//!
//! Every refusal here was seen to fail with its mechanism taken out; each
//! test names the line it guards:
//! - "no rule follows a link" (ADR-0028) is four mechanisms that back each
//!   other up, each taken out alone and in pairs: `open_nofollow` in `rule`
//!   (`src/sandbox/linux/mod.rs`) and the link skip in `list_dir` cover each
//!   other for a directory's entries (the re-pointed `~/.claude.json` and the
//!   `~/.nd7` probe fail only with both out); `open_nofollow` and the pins
//!   (`pin_roots` in `src/run.rs`, `pinned` in `src/sandbox/linux/mod.rs`)
//!   for a write root swapped for a link (`~/.cache/claude` fails only with
//!   both out); the floor's descriptors kept from the start (`FLOOR`), the
//!   pins and `open_nofollow` for the project swapped (its escape needs all
//!   three out; `kept:0` there fails with `FLOOR` alone out). The pins alone
//!   hold a granted directory replaced by another, and
//!   `tests/it/landlock.rs` holds the opening and the skip one by one;
//! - `kernel::real_path` (`src/kernel/mod.rs`) wherever a path the user
//!   named is resolved: start grants (`run_grants::grant_at_start`), `nd7
//!   allow` and `nd7 deny` (`RunDir::allow`, `RunDir::deny` in
//!   `src/run_dir.rs`), project sections, the project and the temp
//!   directory (`check_project`, `temp_root` in `src/run.rs`), ADR-0068;
//! - `Policy::check_grant`'s refusal of `/` and what lies above the home;
//! - `with_real_places` in `src/run_dir.rs` (secrets denied where links
//!   lead, too);
//! - `grants_named` in `src/policy/mod.rs` (deny by any name);
//! - `policy::secrets` (the credential-store list and `~/.nd7/secrets`);
//! - `run_dir::nd7_real_places` (`~/.nd7`, its secrets list and its grants
//!   kept out where they really are, as in a dotfiles repository).
#![cfg(target_os = "linux")]

use std::os::unix::fs::symlink;
use std::path::PathBuf;
use std::process::Output;

use crate::runs::X;
use crate::world::*;

fn lines(out: &Output) -> Vec<String> {
    text(&out.stdout).lines().map(str::to_string).collect()
}

/// Runs `body` (with `x` defined) as the agent of one session.
fn session(w: &World, body: &str) -> Output {
    w.run_agent(&format!("{X}\n{body}"))
}

/// `~/.claude.json -> .claude/claude.json`, as `nd7 setup` leaves it on Linux.
fn with_claude_json_link(w: &World) {
    std::fs::write(w.home().join(".claude/claude.json"), "{}").expect("write");
    symlink(".claude/claude.json", w.home().join(".claude.json")).expect("symlink");
}

/// Guards `open_nofollow` in `rule` and the link skip in `list_dir`
/// (`src/sandbox/linux/mod.rs`; fails with both taken out, not with one):
/// the home's entry `.claude.json` is a link into the writable `~/.claude`;
/// followed when the rules are built, the agent chooses what it opens.
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

/// Guards `with_real_places` (`src/run_dir.rs`): a dotfile manager's
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

/// Issue 10, item 2: `nd7 allow ./out` where `out` is a link the agent
/// planted in the project (`out -> ~`) granted the home, with only a note
/// on stderr. Guards `RunDir::allow` in `src/run_dir.rs`, which resolves
/// the path with `kernel::real_path` and refuses a link in a directory the
/// account can change (with `fs::canonicalize` there, the first allow
/// succeeds and `docs:yes`). Then the user grants the real place, the agent
/// re-points `out`, and `nd7 deny ./out` must not take back whatever `out`
/// leads to now while saying nothing: it follows no such link either
/// (`RunDir::deny`), says so and names the grants that stand; and `deny` of
/// the real place takes it back (`grants_named`).
#[test]
fn a_link_the_agent_planted_chooses_no_grant() {
    let w = World::new();
    let (child, pid) = w.start_agent(&format!(
        r#"{X}
ln -s "$HOME_DIR" out
touch stage1; wait_for go1
x docs "$EXEC" "touch out/docs/planted"
x docs-direct "$EXEC" "touch '$HOME_DIR/docs/planted'"
touch stage2; wait_for go2
rm out && ln -s "$HOME_DIR/docs" out
touch stage3; wait_for go3
x still-granted "$EXEC" "touch '$OUT/still'"
touch stage4; wait_for go4
x after-deny "$EXEC" "touch '$OUT/after-deny'"
"#
    ));
    w.wait_for("stage1");
    let link = w.proj().join("out").display().to_string();
    let allow = w.nd7(&["allow", &link]).output().expect("allow");
    let err = text(&allow.stderr);
    assert_eq!(allow.status.code(), Some(2), "{err}");
    assert_eq!(text(&allow.stdout), "");
    assert!(
        err.contains(&format!(
            "nd7 allow: {link} is not granted: {link} is a symbolic link (to {home}) in a directory your account can change",
            home = w.acct.display()
        )) && err.contains(&format!("(it leads to {} now)", w.acct.display()))
            && err.contains("nd7 allow that place by its real path"),
        "{err}"
    );
    w.signal("go1");
    w.wait_for("stage2");
    let outside = w.outside().display().to_string();
    let allow = w.nd7(&["allow", &outside]).output().expect("allow");
    assert!(allow.status.success(), "{}", text(&allow.stderr));
    w.signal("go2");
    w.wait_for("stage3");
    let deny = w.nd7(&["deny", &link]).output().expect("deny");
    let err = text(&deny.stderr);
    assert!(deny.status.success(), "{err}");
    assert_eq!(
        text(&deny.stdout),
        format!("run {pid}: {link} was not a grant\n")
    );
    assert!(
        err.contains(&format!(
            "nd7 deny: note: {link} is a symbolic link (to {})",
            w.in_home("docs")
        )) && err.contains(&format!(
            "nd7 deny: note: this run's grants are {outside}\n"
        )),
        "{err}"
    );
    w.signal("go3");
    w.wait_for("stage4");
    let deny = w.nd7(&["deny", &outside]).output().expect("deny");
    assert_eq!(
        text(&deny.stdout),
        format!("run {pid}: writes under {outside} denied from the next command\n"),
        "{}",
        text(&deny.stderr)
    );
    w.signal("go4");
    let out = child.wait_with_output().expect("agent ends");
    assert_eq!(
        lines(&out),
        [
            "docs:no",
            "docs-direct:no",
            "still-granted:yes",
            "after-deny:no"
        ],
        "{}",
        text(&out.stderr)
    );
    assert!(!w.home().join("docs/planted").exists());
    assert!(!w.outside().join("after-deny").exists());
}

/// A link nd7 does follow: one in a directory the account can neither
/// write nor owns (root made it, as `/bin -> usr/bin`), which no session
/// can have placed. `nd7 allow` through it grants where it leads, says so,
/// and `nd7 deny` by the same name takes it back (the alias `nd7 allow`
/// records, found by `grants_named` in `src/policy/mod.rs`). Needs root to
/// make such a directory, so it is tried only when the tests run as root.
#[test]
fn a_link_root_made_is_followed_and_denied_by_its_name() {
    if !account().drop_from_root {
        eprintln!("skipped: making a directory the account cannot write needs root");
        return;
    }
    let w = World::new();
    // Outside the world, whose files are all given to the account.
    let ro = tempfile::Builder::new()
        .prefix("root-made-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("tempdir");
    std::fs::set_permissions(
        ro.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    symlink(w.outside(), ro.path().join("out")).expect("symlink");
    let link = ro.path().join("out").display().to_string();
    let outside = w.outside().display().to_string();
    let (child, pid) = w.start_agent(&format!(
        r#"{X}
touch stage1; wait_for go1
x granted "$EXEC" "touch '$OUT/granted'"
touch stage2; wait_for go2
x after-deny "$EXEC" "touch '$OUT/after-deny'"
"#
    ));
    w.wait_for("stage1");
    let allow = w.nd7(&["allow", &link]).output().expect("allow");
    assert_eq!(
        text(&allow.stdout),
        format!("run {pid}: writes under {outside} allowed from the next command\n"),
        "{}",
        text(&allow.stderr)
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
    w.signal("go2");
    let out = child.wait_with_output().expect("agent ends");
    assert_eq!(
        lines(&out),
        ["granted:yes", "after-deny:no"],
        "{}",
        text(&out.stderr)
    );
    // A line of ~/.nd7/grants that leads to the home through such a link
    // stops the run: the file never grants the whole home
    // (`StartGrantError::LastingHome` in `src/run_grants.rs`).
    symlink(&w.acct, ro.path().join("home")).expect("symlink");
    std::fs::create_dir_all(w.home().join(".nd7")).expect("mkdir");
    let home_link = ro.path().join("home").display().to_string();
    std::fs::write(w.home().join(".nd7/grants"), format!("{home_link}\n")).expect("grants");
    let marker = w.outside().join("ran");
    let out = w.run_agent(&format!("touch '{}'", marker.display()));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "nd7 run: {home_link} (~/.nd7/grants:1) is your home directory: ~/.nd7/grants never grants the whole home"
        )),
        "{err}"
    );
    assert!(!marker.exists());
}

/// Guards `open_nofollow` in `rule` (the exit's rules) together with the
/// pins, `pin_roots` in `src/run.rs` (the next session's floor) and `pinned`
/// (fails with both taken out, not with one): under a grant of `~/.cache`, a
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
/// swapped for a link to `/`, and the grant taken back. Guards, for the
/// exit, the floor's descriptors kept from the start (`FLOOR` in
/// `src/sandbox/linux/mod.rs`: commands keep writing the project the
/// session started with, by its new name, `kept:0`; rebuilt per command,
/// its path fails its pin and `kept:1`), behind them the pins and
/// `open_nofollow` (this attack succeeds only with all three taken out);
/// and the refusal of a project that is `/` (`RunError::Project` in
/// `src/run.rs`) for a session started in the link. Run without user
/// namespaces: with them the project is pinned by a mount of its own
/// (ADR-0049) and cannot be renamed at all, which would leave these
/// mechanisms untried.
#[test]
fn a_project_swapped_for_a_link_to_the_root_opens_nothing() {
    let w = World::new().without_user_namespaces();
    let work = w.root.join("work");
    std::fs::create_dir_all(work.join("p")).expect("mkdir");
    let agent = w.agent(
        r#"
touch stage1; while [ ! -e go1 ]; do sleep 0.05; done
cd .. && "$EXEC" "mv p p.old && ln -s / p"; echo "swapped:$?"
touch p.old/stage2; while [ ! -e p.old/go2 ]; do sleep 0.05; done
"$EXEC" "touch '$OUT/after-swap'" 2>/dev/null; echo "after-swap:$?"
"$EXEC" "touch p.old/kept" 2>/dev/null; echo "kept:$?"
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
    let stage = work.join("p.old/stage2");
    while !stage.exists() {
        std::thread::sleep(std::time::Duration::from_millis(20));
        if let Ok(Some(status)) = child.try_wait() {
            panic!("nd7 run ended early: {status}");
        }
    }
    let deny = w
        .nd7(&["deny", &work.display().to_string()])
        .output()
        .expect("deny");
    assert!(deny.status.success(), "{}", text(&deny.stderr));
    std::fs::write(work.join("p.old/go2"), "").expect("go");
    let out = child.wait_with_output().expect("agent ends");
    assert_eq!(
        lines(&out),
        ["swapped:0", "after-swap:1", "kept:0"],
        "{}",
        text(&out.stderr)
    );
    assert!(work.join("p.old/kept").exists());
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

/// The probe for `~/.nd7`: once the test has seen the run's record exist
/// (`$OUT/go`), re-point `~/.claude/claude.json` (which `~/.claude.json`
/// leads through) to `~/.nd7`, then try to rewrite the run's record, named
/// exactly (a glob would match nothing once a layout changed, and the
/// refusal would prove nothing: ADR-0065 moved the records from
/// `sessions/` to `runs/`), to write through the link and directly, and to
/// write outside.
const ND7_PROBE: &str = r#"
wait_for "$OUT/go"
rm -f "$HOME_DIR/.claude/claude.json" && ln -s "$HOME_DIR/.nd7" "$HOME_DIR/.claude/claude.json"
record="$HOME_DIR/.claude.json/runs/${ND7_RUN##*/}/record.json"
echo "target:$record"
x record "$EXEC" "sed -i -e 's#\"grants\": \[\]#\"grants\": [\"/\"]#' '$record'"
x through-link "$EXEC" "touch '$HOME_DIR/.claude.json/pwn'"
x direct "$EXEC" "mkdir '$HOME_DIR/.nd7/x'"
x outside "$EXEC" "touch '$OUT/escaped'"
"#;

const ND7_REFUSED: [&str; 4] = ["record:no", "through-link:no", "direct:no", "outside:no"];

/// `nd7 run AGENT` started in `cwd`, returned once it has said its pid
/// (as `World::start_agent`, which starts in the project).
fn start_in(w: &World, cwd: &std::path::Path, agent: &str) -> (std::process::Child, u32) {
    use std::io::BufRead;
    let mut child = w
        .command_in(cwd, ND7, &["run", agent])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("nd7 run");
    let mut stderr = std::io::BufReader::new(child.stderr.take().expect("stderr"));
    let mut line = String::new();
    stderr.read_line(&mut line).expect("announcement");
    let pid = line
        .strip_prefix("nd7 run: run ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no run announced: {line:?}"));
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    (child, pid)
}

/// Checks that run `pid`'s record exists (the probe's target), lets the
/// probe go, and returns its lines without the target's.
fn probe_its_record(w: &World, child: std::process::Child, pid: u32) -> Vec<String> {
    let record = w.sessions().join(pid.to_string()).join("record.json");
    assert!(record.is_file(), "{} is not there", record.display());
    std::fs::write(w.outside().join("go"), "").expect("go");
    let out = child.wait_with_output().expect("agent ends");
    std::fs::remove_file(w.outside().join("go")).expect("rm go");
    let mut lines = lines(&out);
    let target = format!(
        "target:{}",
        w.in_home(&format!(".claude.json/runs/{pid}/record.json"))
    );
    assert_eq!(lines.first(), Some(&target), "{lines:?}");
    lines.remove(0);
    lines
}

/// Guards `open_nofollow` in `rule` and the link skip in `list_dir`
/// together (fails with both taken out): "nothing under `~/.nd7` is ever
/// writable" with the project = the home and the home granted.
#[test]
fn nd7_stays_unwritable_through_a_link_whatever_the_project_or_the_grants() {
    let w = World::new();
    with_claude_json_link(&w);
    let unchanged = |what: &str| {
        assert!(!w.outside().join("escaped").exists(), "{what}");
        assert!(!w.home().join(".nd7/pwn").exists(), "{what}");
        assert!(!w.home().join(".nd7/x").exists(), "{what}");
    };
    let agent = w.agent(&format!("{X}\n{ND7_PROBE}"));
    // Project = home: every entry of the home is a floor write root.
    let (child, pid) = start_in(&w, &w.acct, &agent);
    assert_eq!(
        probe_its_record(&w, child, pid),
        ND7_REFUSED,
        "project = home"
    );
    unchanged("project = home");

    // The home granted (`/` is never granted: see
    // `nothing_above_the_home_is_ever_granted`; the rendering's carve-out
    // under a grant of `/` is `policy`'s unit test).
    let home = w.in_home("");
    let grant = home.trim_end_matches('/');
    let (child, pid) = w.start_agent(&format!("{X}\ntouch stage1; wait_for go1\n{ND7_PROBE}"));
    w.wait_for("stage1");
    let allow = w.nd7(&["allow", grant]).output().expect("allow");
    assert!(allow.status.success(), "{}", text(&allow.stderr));
    w.signal("go1");
    assert_eq!(
        probe_its_record(&w, child, pid),
        ND7_REFUSED,
        "{grant} granted"
    );
    unchanged(grant);
}

/// ADR-0068: `/` and the directories above the home are never granted, by
/// `nd7 allow` (typed, or `"$EMPTY/"`), `--allow` or `~/.nd7/grants`: they
/// hold the home and everything else, and are what a re-pointed link or an
/// empty variable makes of a grant. The home itself may be given to one
/// session by name (`nothing…whatever_the_project_or_the_grants` above),
/// never by the lasting file (`a_link_root_made_is_followed…`). Guards
/// `GrantError::AboveHome` in `Policy::check_grant` (without it `nd7 allow
/// /` succeeds and `outside:yes`).
#[test]
fn nothing_above_the_home_is_ever_granted() {
    let w = World::new();
    let above = w
        .acct
        .parent()
        .expect("the home has a parent")
        .display()
        .to_string();
    let (child, _pid) = w.start_agent(&format!(
        "{X}\ntouch stage1; wait_for go1\nx outside \"$EXEC\" \"touch '$OUT/escaped'\"\n"
    ));
    w.wait_for("stage1");
    for grant in ["/", "//", above.as_str(), "/tmp/..", "~/.."] {
        let allow = w.nd7(&["allow", grant]).output().expect("allow");
        let err = text(&allow.stderr);
        assert_eq!(allow.status.code(), Some(2), "{grant}: {err}");
        assert!(
            err.contains("holds your home directory") && err.contains("nd7 never grants /"),
            "{grant}: {err}"
        );
    }
    w.signal("go1");
    let out = child.wait_with_output().expect("agent ends");
    assert_eq!(lines(&out), ["outside:no"], "{}", text(&out.stderr));
    assert!(!w.outside().join("escaped").exists());
    // At the start, --allow stops the run (the file refuses them when it is
    // read: `grants::parse`).
    let marker = w.outside().join("ran");
    let agent = w.agent(&format!("touch '{}'", marker.display()));
    for grant in ["/", above.as_str()] {
        let out = w
            .nd7(&["run", "--allow", grant, &agent])
            .output()
            .expect("nd7 run");
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{grant}: {err}");
        assert!(err.contains("holds your home directory"), "{grant}: {err}");
        assert!(!marker.exists(), "{grant}");
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
    ".config/git/credentials",
    ".pgpass",
    ".my.cnf",
    ".config/containers/auth.json",
    ".m2/settings-security.xml",
    ".config/rclone/rclone.conf",
    ".local/share/kwalletd/kdewallet.kwl",
    "docs/private/key",
];
/// Beside them, what stays readable: shell and tool configuration, and
/// Maven's `settings.xml` and Gradle's `gradle.properties`, which hold
/// passwords at times but are read at every build (Maven stops on an
/// unreadable `settings.xml`: "Non-readable settings"), so they are yours
/// to add to `~/.nd7/secrets`.
const NEIGHBOURS: &[&str] = &[
    ".bashrc",
    ".config/git/config",
    ".docker/contexts/meta.json",
    ".config/containers/registries.conf",
    ".local/share/applications/x.desktop",
    ".cargo/config.toml",
    ".m2/settings.xml",
    ".gradle/gradle.properties",
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

/// Issue 10, item 1 (the start grants): a lasting grant of `~/.cache` lets
/// one command swap `~/.cache/pip` for a link to `/` (or to the home);
/// every later session whose start grants name `~/.cache/pip` (`preset pip`
/// in `~/.nd7/grants`, `--preset pip`, `--allow ~/.cache/pip`) then granted
/// what the link led to: every command wrote the home and everything
/// outside it. Guards `grant_at_start` in `src/run_grants.rs`, which
/// resolves each start grant with `kernel::real_path` (no link followed that
/// the account could have placed) and leaves one reached through such a
/// link out: with `std::fs::canonicalize` back in its place, the link to the
/// home is granted (`docs:yes`) and the one to `/` stops the run (refused by
/// `check_grant` as above the home, the second guard).
#[test]
fn a_start_grant_re_pointed_by_an_earlier_session_grants_nothing() {
    let w = World::new();
    std::fs::create_dir_all(w.home().join(".nd7")).expect("mkdir");
    std::fs::create_dir_all(w.home().join(".cache/pip")).expect("mkdir");
    let probe = format!(
        r#"{X}
x docs "$EXEC" "touch '$HOME_DIR/docs/planted'"
x outside "$EXEC" "touch '$OUT/escaped'"
x dotdot "$EXEC" "touch /tmp/../'{outside}/dotdot'"
x bashrc "$EXEC" "echo pwned >> '$HOME_DIR/.bashrc'"
x cache "$EXEC" "touch '$HOME_DIR/.cache/pip/x'"
"#,
        outside = w.outside().display()
    );
    let pip = w.in_home(".cache/pip");
    for target in ["/", w.acct.to_str().expect("utf-8")] {
        // An earlier session, with ~/.cache granted for good.
        std::fs::write(w.home().join(".nd7/grants"), "~/.cache\npreset pip\n").expect("grants");
        // The same session's next command already finds its grant of
        // `~/.cache/pip` led elsewhere (its pin, ADR-0028).
        let out = session(
            &w,
            &format!(
                r#"x swap "$EXEC" "rm -rf '$HOME_DIR/.cache/pip' && ln -s '{target}' '$HOME_DIR/.cache/pip'"
x same-session "$EXEC" "touch '$HOME_DIR/docs/same-session' '$OUT/same-session'""#
            ),
        );
        assert_eq!(
            lines(&out),
            ["swap:yes", "same-session:no"],
            "{}",
            text(&out.stderr)
        );
        assert!(w.home().join(".cache/pip").is_symlink());
        // The next sessions: the link is still there, named by each kind
        // of start grant in turn.
        let agent = w.agent(&probe);
        for args in [
            vec!["run", &agent],
            vec!["run", "--preset", "pip", &agent],
            vec!["run", "--allow", "~/.cache/pip", &agent],
        ] {
            if args.len() == 2 {
                std::fs::write(w.home().join(".nd7/grants"), "preset pip\n").expect("grants");
            } else {
                std::fs::remove_file(w.home().join(".nd7/grants")).ok();
            }
            let out = w.nd7(&args).output().expect("nd7 run");
            let err = text(&out.stderr);
            assert_eq!(
                lines(&out),
                [
                    "docs:no",
                    "outside:no",
                    "dotdot:no",
                    "bashrc:no",
                    "cache:no"
                ],
                "{target} {args:?}: {err}"
            );
            assert!(
                err.contains(&format!("nd7 run: warning: {pip} ("))
                    && err.contains("is not granted: ")
                    && err.contains(&format!("{pip} is a symbolic link (to {target})")),
                "{target} {args:?}: {err}"
            );
            assert!(!err.contains("commands may also write"), "{args:?}: {err}");
            for f in ["docs/planted", ".bashrc"] {
                assert!(!w.home().join(f).exists(), "{target} {args:?}: {f}");
            }
            for f in ["escaped", "dotdot"] {
                assert!(!w.outside().join(f).exists(), "{target} {args:?}: {f}");
            }
        }
        std::fs::remove_file(w.home().join(".cache/pip")).expect("rm");
    }
}

/// Issue 10, item 2 (the project): a project that holds the home, and the
/// home reached through a link the account could have placed (a project
/// directory an earlier command swapped for a link to `~` under a grant of
/// its parent; `$PWD` is the shell's name for it). Both used to start, the
/// second with only a warning, every command then writing the whole home.
/// Guards `check_project` in `src/run.rs` (without its link check the last
/// session starts and `docs:yes`); the home entered by its own name stays a
/// project (`nd7_stays_unwritable…` runs in it).
#[test]
fn a_project_that_would_hold_the_home_is_refused() {
    let w = World::new();
    let marker = w.outside().join("ran");
    let agent = w.agent(&format!(
        "touch '{}'; touch \"$HOME_DIR/docs/planted\" && echo docs:yes || echo docs:no",
        marker.display()
    ));
    let above = w.acct.parent().expect("a parent").to_path_buf();
    let out = w
        .command_in(&above, ND7, &["run", &agent])
        .output()
        .expect("nd7 run");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "nd7 run: the project would be {} (you are in {}), which holds your home directory",
            above.display(),
            above.display()
        )),
        "{err}"
    );
    let work = w.root.join("work");
    std::fs::create_dir_all(&work).expect("mkdir");
    symlink(&w.acct, work.join("p")).expect("symlink");
    let out = w
        .command_in(&work.join("p"), ND7, &["run", &agent])
        .env("PWD", work.join("p"))
        .output()
        .expect("nd7 run");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "nd7 run: you are in {}, a link to your home directory {} (",
            work.join("p").display(),
            w.acct.display()
        )) && err.contains("start nd7 run in the home by its own name (cd ~)"),
        "{err}"
    );
    assert_eq!(lines(&out), Vec::<String>::new());
    assert!(!marker.exists());
    assert!(!w.home().join("docs/planted").exists());
}

/// The temp directory is a floor write root: a `$TMPDIR` that is the home
/// (or above it), or that an earlier session replaced with a link (in
/// `/tmp`, which every session writes) to the home, would make the whole
/// home writable. Guards `temp_root` in `src/run.rs` (with
/// `fs::canonicalize` in its place both sessions start and `docs:yes`).
#[test]
fn a_temp_directory_that_leads_to_the_home_is_refused() {
    let w = World::new();
    let marker = w.outside().join("ran");
    let agent = w.agent(&format!(
        "touch '{}'; touch \"$HOME_DIR/docs/planted\" && echo docs:yes || echo docs:no",
        marker.display()
    ));
    let link = w.root.join("tmp/mine");
    symlink(&w.acct, &link).expect("symlink");
    for (tmpdir, says) in [
        (
            w.acct.clone(),
            "which holds your home directory".to_string(),
        ),
        (
            link.clone(),
            format!(
                "{} is a symbolic link (to {})",
                link.display(),
                w.acct.display()
            ),
        ),
    ] {
        let out = w
            .nd7(&["run", &agent])
            .env("TMPDIR", &tmpdir)
            .output()
            .expect("nd7 run");
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{}: {err}", tmpdir.display());
        assert!(
            err.contains(&format!(
                "nd7 run: the temp directory {} cannot be a write root: ",
                tmpdir.display()
            )) && err.contains(&says),
            "{err}"
        );
        assert_eq!(lines(&out), Vec::<String>::new());
        assert!(!marker.exists());
    }
}

/// A `[PATH]` section of `~/.nd7/grants` is matched against the project's
/// real path; one found by following a link the account could have placed
/// (an agent with a grant of `~/src` makes `~/src/web` a link to its own
/// project) would hand another project's grants to this one. Guards the
/// `resolve` of `run_grants::planned` (`kernel::real_path`; with
/// `fs::canonicalize` there `outside:yes`): the section is no project's, and
/// `nd7 run` says so.
#[test]
fn a_project_section_reached_through_a_link_grants_nothing() {
    let w = World::new();
    let web = w.root.join("web");
    symlink(w.proj(), &web).expect("symlink");
    std::fs::create_dir_all(w.home().join(".nd7")).expect("mkdir");
    std::fs::write(
        w.home().join(".nd7/grants"),
        format!("[{}]\n{}\n", web.display(), w.outside().display()),
    )
    .expect("grants");
    let out = session(&w, r#"x outside "$EXEC" "touch '$OUT/escaped'""#);
    let err = text(&out.stderr);
    assert_eq!(lines(&out), ["outside:no"], "{err}");
    assert!(
        err.contains(&format!(
            "nd7 run: warning: the section [{}] of ~/.nd7/grants is no project's: {} is a symbolic link",
            web.display(),
            web.display()
        )),
        "{err}"
    );
    assert!(!w.outside().join("escaped").exists());
    // Written by its real path, the section is this project's.
    std::fs::write(
        w.home().join(".nd7/grants"),
        format!("[{}]\n{}\n", w.proj().display(), w.outside().display()),
    )
    .expect("grants");
    let out = session(&w, r#"x outside "$EXEC" "touch '$OUT/escaped'""#);
    assert_eq!(lines(&out), ["outside:yes"], "{}", text(&out.stderr));
}

/// A dotfile manager's `~/.ssh` whose real place is inside a write root: the
/// project itself (a dotfiles repository being worked on) and `~/.claude`.
/// The real directory must stay unreadable, and cannot be renamed out from
/// under its rule. Held.
#[test]
fn a_secret_whose_real_place_is_inside_a_write_root_stays_unreadable() {
    for place in ["proj", "claude"] {
        let w = World::new();
        // `real` as the test sees it, `inner` as nd7 does: the scratch home
        // is bound over the account's, and a link must name one place.
        let (real, inner) = match place {
            "proj" => (w.proj().join("ssh"), w.proj().join("ssh")),
            _ => (
                w.home().join(".claude/ssh"),
                PathBuf::from(w.in_home(".claude/ssh")),
            ),
        };
        std::fs::rename(w.home().join(".ssh"), &real).expect("move");
        std::os::unix::fs::symlink(&inner, w.home().join(".ssh")).expect("symlink");
        let real = inner.display().to_string();
        let out = w.run_agent(&format!(
            r#"{X}
x agent-real cat '{real}/id_ed25519'
x exec-real "$EXEC" "cat '{real}/id_ed25519'"
x agent-link cat "$HOME_DIR/.ssh/id_ed25519"
x agent-mv mv '{real}' '{real}2'
x exec-mv "$EXEC" "mv '{real}' '{real}2'"
x after-mv cat '{real}2/id_ed25519'
x exec-after-mv "$EXEC" "cat '{real}2/id_ed25519'"
x agent-ln ln '{real}/id_ed25519' '{real}.k'
x exec-cp-dir "$EXEC" "cp -r '{real}' '{real}3'; cat '{real}3/id_ed25519'"
"#
        ));
        assert_eq!(
            lines(&out),
            [
                "agent-real:no",
                "exec-real:no",
                "agent-link:no",
                "agent-mv:no",
                "exec-mv:no",
                "after-mv:no",
                "exec-after-mv:no",
                "agent-ln:no",
                "exec-cp-dir:no"
            ],
            "{place}: {}",
            text(&out.stderr)
        );
    }
}

/// Rewrites the running run's record.json (`$1/runs/<its pid>`, named
/// exactly: a glob that matches nothing proves nothing, as the one of
/// `sessions/*` did once ADR-0065 renamed the directory) to grant `$OUT`,
/// pinned as it is now, as only `nd7 allow` may.
const FORGE_GRANT: &str = r#"forge() { python3 - "$1" "$OUT" <<'PY'
import json, os, sys
path = sys.argv[1] + "/runs/" + os.environ["ND7_RUN"].rsplit("/", 1)[1] + "/record.json"
record = json.load(open(path))
st = os.stat(sys.argv[2])
record["grants"].append(sys.argv[2])
record.setdefault("pins", []).append({"path": sys.argv[2], "dev": st.st_dev, "ino": st.st_ino})
open(path, "w").write(json.dumps(record))
PY
}"#;

/// `~/.nd7` kept in a dotfiles repository (`~/.nd7 -> dotfiles/nd7`, as
/// stow leaves it) and the repository is the project: the floor's carve-out
/// named `~/.nd7` only by its link, so its real directory was writable, and
/// the agent rewrote its own session's record.json to grant itself any
/// directory, pins included. Broke through; guards the real place of
/// `~/.nd7` kept out with the secrets (`run_dir::nd7_real_places`, added in
/// `src/run.rs`): without it `forge` succeeds and the command after it
/// writes outside.
#[test]
fn nd7s_own_directory_behind_a_link_is_kept_out_where_it_really_is() {
    let w = World::new();
    let dotfiles = w.proj();
    std::fs::create_dir_all(dotfiles.join("nd7")).expect("mkdir");
    std::os::unix::fs::symlink(dotfiles.join("nd7"), w.home().join(".nd7")).expect("symlink");
    let (child, pid) = w.start_agent(&format!(
        r#"{X}
{FORGE_GRANT}
wait_for "$OUT/go1"
x read-record cat "$PWD/nd7/runs/${{ND7_RUN##*/}}/record.json"
x forge forge "$PWD/nd7"
x exec-outside "$EXEC" "touch '$OUT/escaped'"
x agent-secrets sh -c "echo '-~/.ssh' >> '$PWD/nd7/secrets'"
"#
    ));
    // The probes' target is there (the record is written before nd7 run
    // says its pid): their refusal is the floor's. The agent cannot write
    // the project's root here (it holds ~/.nd7's real place), so the word
    // to go is left outside.
    let record = dotfiles.join(format!("nd7/runs/{pid}/record.json"));
    assert!(record.is_file(), "{} is not there", record.display());
    std::fs::write(w.outside().join("go1"), "").expect("go");
    let out = child.wait_with_output().expect("agent ends");
    assert_eq!(
        lines(&out),
        [
            "read-record:no",
            "forge:no",
            "exec-outside:no",
            "agent-secrets:no"
        ],
        "{}",
        text(&out.stderr)
    );
    assert!(!w.outside().join("escaped").exists());
}

/// The same with only the list of secrets kept elsewhere
/// (`~/.nd7/secrets -> dotfiles/nd7-secrets`, the repository being the
/// project): the agent appended `-~/.ssh` to the list and so took `~/.ssh`
/// off the next session's. Broke through; guards the same line as above
/// (`run_dir::nd7_real_places`, added to the secrets in `src/run.rs`).
/// (The next session is not run here: in the test world the scratch home
/// has a second name, and a secret inside the scratch tree splits the
/// rules around that name, which no real home has.)
#[test]
fn the_secrets_list_behind_a_link_cannot_be_edited_from_inside() {
    let w = World::new();
    std::fs::create_dir_all(w.home().join(".nd7")).expect("mkdir");
    std::fs::write(w.proj().join("nd7-secrets"), "~/.config/mytool\n").expect("write");
    std::os::unix::fs::symlink(w.proj().join("nd7-secrets"), w.home().join(".nd7/secrets"))
        .expect("symlink");
    let out = w.run_agent(&format!(
        r#"{X}
x edit sh -c "echo '-~/.ssh' >> '$PWD/nd7-secrets'"
x exec-edit "$EXEC" "echo '-~/.ssh' >> '$PWD/nd7-secrets'"
"#
    ));
    assert_eq!(
        lines(&out),
        ["edit:no", "exec-edit:no"],
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(w.proj().join("nd7-secrets")).expect("list"),
        "~/.config/mytool\n"
    );
}

/// The same with the lasting grants kept elsewhere (`~/.nd7/grants ->
/// nd7-grants` in the project, a dotfiles repository): the real file was
/// writable, so the agent could add any directory to the next session's
/// start grants. Guards `grants::FILE` among `run_dir::nd7_real_places`:
/// without it `edit:yes`, `exec-edit:yes`.
#[test]
fn the_grants_file_behind_a_link_cannot_be_edited_from_inside() {
    let w = World::new();
    std::fs::create_dir_all(w.home().join(".nd7")).expect("mkdir");
    std::fs::write(w.proj().join("nd7-grants"), "~/data\n").expect("write");
    std::os::unix::fs::symlink(w.proj().join("nd7-grants"), w.home().join(".nd7/grants"))
        .expect("symlink");
    let out = w.run_agent(&format!(
        r#"{X}
x edit sh -c "echo '$OUT' >> '$PWD/nd7-grants'"
x exec-edit "$EXEC" "echo '$OUT' >> '$PWD/nd7-grants'"
x exec-replace "$EXEC" "cp '$PWD/nd7-grants' x && echo '$OUT' >> x && mv x '$PWD/nd7-grants'"
x granted "$EXEC" "touch ~/data/ok"
"#
    ));
    assert_eq!(
        lines(&out),
        ["edit:no", "exec-edit:no", "exec-replace:no", "granted:yes"],
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(w.proj().join("nd7-grants")).expect("grants"),
        "~/data\n"
    );
}
