//! The ruleset a command through the exit runs under (ADR-0052): one that
//! holds no grant reuses the floor's own ruleset, built once; one with a
//! grant gets a ruleset built with it, and its `exec` entry names the grants
//! it ran under, while `nd7 allow` and `nd7 deny` come and go. Each is tried
//! as the ordinary account, a shell script standing in for the agent under
//! `nd7 run`, its Bash calls through `$EXEC`.
#![cfg(target_os = "linux")]

use crate::runs::{X, lines};
use crate::world::*;

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
  x $p-nd7 "$EXEC" "ls '$HOME_DIR/.nd7/runs'"
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

/// Commands started back to back while the test grants `$OUT/g` and denies
/// it again, over and over: each command either reuses the floor's ruleset
/// or builds one with the grant, decided from one reading of the session's
/// rules. A command that wrote into `$OUT/g` must have the grant in its
/// `exec` entry (the log says what it ran under), one logged with it must
/// have been able to write, and the command after the last deny writes
/// nothing. Held: the choice and the grants logged come from the same
/// reading (`prepare_command` and `serve_one` in `src/sandbox/linux/exit.rs`).
/// The two commands run between each allow and deny pin both kinds down
/// whatever the timing. Seen failing with the reuse made unconditional
/// (`with-1:no`) and with the `exec` entry's grants left empty (a command
/// wrote into `$OUT/g` with no grant logged).
#[test]
fn a_command_started_while_a_grant_comes_and_goes_runs_under_what_its_entry_says() {
    let w = World::new();
    let g = w.outside().join("g");
    std::fs::create_dir_all(&g).expect("mkdir");
    const ROUNDS: usize = 6;
    let (child, _pid) = w.start_agent(&format!(
        r#"{X}
( i=0; while [ ! -e stop ]; do i=$((i+1)); "$EXEC" "touch '$OUT/g/bg-$i'" >/dev/null 2>&1; done ) &
for k in $(seq {ROUNDS}); do
  touch ask-allow-$k; wait_for allowed-$k
  x with-$k "$EXEC" "touch '$OUT/g/with-$k'"
  touch ask-deny-$k; wait_for denied-$k
  x without-$k "$EXEC" "touch '$OUT/g/without-$k'"
done
touch stop; wait
x final "$EXEC" "touch '$OUT/g/final'"
"#
    ));
    let target = g.display().to_string();
    for k in 1..=ROUNDS {
        w.wait_for(&format!("ask-allow-{k}"));
        let allow = w.nd7(&["allow", &target]).output().expect("allow");
        assert!(allow.status.success(), "{}", text(&allow.stderr));
        w.signal(&format!("allowed-{k}"));
        w.wait_for(&format!("ask-deny-{k}"));
        let deny = w.nd7(&["deny", &target]).output().expect("deny");
        assert!(deny.status.success(), "{}", text(&deny.stderr));
        w.signal(&format!("denied-{k}"));
    }
    let out = child.wait_with_output().expect("agent ends");
    let mut want = Vec::new();
    for k in 1..=ROUNDS {
        want.push(format!("with-{k}:yes"));
        want.push(format!("without-{k}:no"));
    }
    want.push("final:no".into());
    assert_eq!(lines(&out), want, "{}", text(&out.stderr));
    let chain = crate::runs::run_chain(&w);
    let mut checked = 0;
    for entry in crate::runs::entries(&chain) {
        if entry["kind"] != "exec" {
            continue;
        }
        let command = entry["body"]["command"].as_str().unwrap_or_default();
        let Some(name) = command
            .strip_prefix(&format!("touch '{target}/"))
            .and_then(|rest| rest.strip_suffix('\''))
        else {
            continue;
        };
        let granted = entry["body"]["grants"]
            .as_array()
            .is_some_and(|grants| grants.iter().any(|x| x == target.as_str()));
        assert_eq!(
            g.join(name).exists(),
            granted,
            "{name}: written {} but its entry says grants {}",
            g.join(name).exists(),
            entry["body"]["grants"]
        );
        checked += 1;
    }
    assert!(checked > 2 * ROUNDS, "only {checked} commands checked");
}

/// The exit's threads outlive their commands and wait for the next one
/// (ADR-0152), but a waiting thread is taken for one connection only: a
/// command that asks the exit from inside, nested deeper than threads wait
/// (`SPARE`, 4, in `src/sandbox/linux/server.rs`), gets a thread at every level, after commands at once
/// left threads waiting, and again after that. Each nesting is bounded by
/// `timeout`, so a connection handed to a busy thread shows as a status
/// instead of hanging the test. Seen failing (`status 124`) with a thread
/// listed as waiting before it served its connection.
#[test]
fn nested_commands_each_get_a_thread_of_their_own_after_threads_have_waited() {
    let w = World::new();
    let out = w.run_agent(
        r#"export EXEC
cat > nest.sh <<'S'
#!/bin/bash
if [ "$1" -gt 0 ]; then "$EXEC" "'$0' $(($1 - 1))"; else echo deep; fi
S
chmod +x nest.sh
for i in 1 2 3 4 5 6; do "$EXEC" true & done; wait
timeout 60 "$EXEC" "'$PWD/nest.sh' 7"; echo "status $?"
"$EXEC" true
timeout 60 "$EXEC" "'$PWD/nest.sh' 7"; echo "status $?"
"#,
    );
    assert_eq!(
        text(&out.stdout),
        "deep\nstatus 0\ndeep\nstatus 0\n",
        "{}",
        text(&out.stderr)
    );
}
