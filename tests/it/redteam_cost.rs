//! The red team's attacks on what made the floor cheaper (ADR-0052): a
//! command through the exit that holds no grant runs under the floor's own
//! ruleset, built once, and the keeper splits off before the session sets
//! up. Each is tried as the ordinary account, a shell script standing in
//! for the agent under `nd7 run`, its Bash calls through `$EXEC`.
#![cfg(target_os = "linux")]

use std::process::Output;

use crate::world::*;

fn lines(out: &Output) -> Vec<String> {
    text(&out.stdout).lines().map(str::to_string).collect()
}

/// `x NAME CMD ARGS…` prints `NAME:yes` when CMD succeeds, `NAME:no` when not.
const X: &str = r#"x() { local name=$1; shift; if "$@" >/dev/null 2>&1; then echo "$name:yes"; else echo "$name:no"; fi; }"#;

/// What one command through the exit may do, asked of a fresh command each
/// time, prefixed with the phase: writes in each floor root and outside,
/// the agent's state, a file that runs later, the secrets, nd7's own state,
/// the terminals, a move between two directories (Landlock's `Refer`), a
/// program in the project, and the exit from inside a command.
const PROBE: &str = r#"probe() {
  local p=$1
  x $p-proj "$EXEC" "touch '$PWD/w-$p'"
  x $p-temp "$EXEC" "touch \"\$TMPDIR/w-$p\""
  x $p-claude "$EXEC" "touch '$HOME_DIR/.claude/w-$p'"
  x $p-claude-settings "$EXEC" "echo x >> '$HOME_DIR/.claude/settings.json'"
  x $p-envrc "$EXEC" "echo x >> '$PWD/.envrc'"
  x $p-home "$EXEC" "touch '$HOME_DIR/docs/w-$p'"
  x $p-outside "$EXEC" "touch '$OUT/w-$p'"
  x $p-granted "$EXEC" "touch '$OUT/g/w-$p'"
  x $p-ssh "$EXEC" "cat '$HOME_DIR/.ssh/id_ed25519'"
  x $p-vault "$EXEC" "cat '$HOME_DIR/.local/state/nd7/vault/machine.key'"
  x $p-nd7 "$EXEC" "ls '$HOME_DIR/.nd7/sessions'"
  x $p-logs "$EXEC" "touch '$HOME_DIR/.local/state/nd7/sessions/w-$p'"
  x $p-read "$EXEC" "cat /etc/passwd"
  x $p-null "$EXEC" "echo x > /dev/null"
  x $p-pts "$EXEC" "ls /dev/pts"
  x $p-ptmx "$EXEC" "exec 3<>/dev/ptmx"
  x $p-refer "$EXEC" "mkdir -p '$PWD/d-$p' && touch '$PWD/d-$p/f' && mv '$PWD/d-$p/f' \"\$TMPDIR/f-$p\""
  x $p-run "$EXEC" "'$PWD/tool.sh'"
  x $p-nested "$EXEC" "'$EXEC' true"
}"#;

/// The results [`PROBE`] must give for `phase`, `granted` saying whether
/// `$OUT/g` is granted then.
fn expected(phase: &str, granted: bool) -> Vec<String> {
    [
        ("proj", true),
        ("temp", true),
        ("claude", true),
        ("claude-settings", false),
        ("envrc", false),
        ("home", false),
        ("outside", false),
        ("granted", granted),
        ("ssh", false),
        ("vault", false),
        ("nd7", false),
        ("logs", false),
        ("read", true),
        ("null", true),
        ("pts", false),
        ("ptmx", false),
        ("refer", true),
        ("run", true),
        ("nested", true),
    ]
    .iter()
    .map(|(name, yes)| format!("{phase}-{name}:{}", if *yes { "yes" } else { "no" }))
    .collect()
}

/// Guards the condition on which a command reuses the floor's ruleset
/// (`grants.is_empty()` in `prepare_command`, `src/sandbox/linux/mod.rs`):
/// a command without grants may do exactly what one with a grant may, but
/// for the grant, both before the grant is made and after it is denied
/// again. The reused ruleset is the floor's; had it been the agent's own
/// (say with Claude Code's settings or a terminal in it), or had a denied
/// grant stayed in it, a phase would differ. Held: the reused ruleset is
/// the one every command used to build from the floor's opened rules, and
/// `nd7 deny` sends the next command back to it. Seen failing with the
/// condition made `grants.len() <= 1` (the grant's phase reused the
/// floor's ruleset: `during-granted:no`).
#[test]
fn a_command_without_grants_may_do_what_a_rebuilt_ruleset_allows_before_and_after_a_grant() {
    let w = World::new();
    std::fs::create_dir_all(w.outside().join("g")).expect("mkdir");
    std::fs::write(w.proj().join(".envrc"), "").expect("write");
    std::fs::write(w.home().join(".claude/settings.json"), "{}").expect("write");
    let tool = w.proj().join("tool.sh");
    std::fs::write(&tool, "#!/bin/sh\ntrue\n").expect("write");
    std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let (child, _pid) = w.start_agent(&format!(
        r#"{X}
{PROBE}
probe before
touch stage1; wait_for granted
probe during
touch stage2; wait_for denied
probe after
"#
    ));
    w.wait_for("stage1");
    let granted = w
        .nd7(&["allow", &w.outside().join("g").display().to_string()])
        .output()
        .expect("allow");
    assert!(granted.status.success(), "{}", text(&granted.stderr));
    w.signal("granted");
    w.wait_for("stage2");
    let denied = w
        .nd7(&["deny", &w.outside().join("g").display().to_string()])
        .output()
        .expect("deny");
    assert!(denied.status.success(), "{}", text(&denied.stderr));
    w.signal("denied");
    let out = child.wait_with_output().expect("agent ends");
    let mut want = expected("before", false);
    want.extend(expected("during", true));
    want.extend(expected("after", false));
    assert_eq!(lines(&out), want, "{}", text(&out.stderr));
    assert!(!w.outside().join("w-before").exists() && !w.outside().join("w-after").exists());
}
