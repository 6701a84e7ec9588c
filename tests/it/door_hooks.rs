//! The red team's attacks on the floor and the record, each tried as the
//! ordinary account with a home outside /tmp, by a shell script standing in
//! for the agent under `nd7 run` (and, where it matters, through the exit,
//! as Claude Code's shell prefix sends Bash). Attacks that broke through name the line
//! that now closes them; those that held are kept so they keep holding.
#![cfg(target_os = "linux")]

use std::path::PathBuf;

use crate::runs::*;
use crate::world::*;

/// `x NAME CMD ARGS…` prints `NAME:yes` when CMD succeeds, `NAME:no` when not.
const X: &str = r#"x() { local name=$1; shift; if "$@" >/dev/null 2>&1; then echo "$name:yes"; else echo "$name:no"; fi; }"#;

// --- descriptors and /proc -------------------------------------------------

/// Prints `fd:N:TARGET` for each descriptor above 2 this shell holds.
const FDS: &str = r#"for f in /proc/self/fd/*; do n=${f##*/}; [ "$n" -gt 2 ] || continue; t=$(readlink "$f") || continue; echo "fd:$n:$t"; done"#;

/// What an agent can reach through `nd7 run`'s own descriptors and its
/// /proc entries (it is the agent's parent, and the parent of every command
/// through the exit). `nd7 run` holds the floor's rule descriptors, the run's
/// log, its sockets: none may leak into the floor or a command, and its
/// /proc/PID/{fd,root,cwd,environ,mem} must stay shut (Landlock's ptrace
/// scoping). Held. (Listing /proc/PID/fd works for the same account, which
/// shows descriptor numbers only; reading where they lead does not.)
#[test]
fn nd7_runs_descriptors_and_proc_entries_give_the_agent_nothing() {
    let w = World::new();
    let probe = format!(
        r#"{X}
{FDS}
x ppid-fd3 cat /proc/$PPID/fd/3
x ppid-fd-readlink readlink /proc/$PPID/fd/3
x ppid-fd-write sh -c 'for f in /proc/'$PPID'/fd/*; do echo x >> "$f" && exit 0; done; exit 1'
x ppid-root cat "/proc/$PPID/root$HOME_DIR/.ssh/id_ed25519"
x ppid-cwd ls /proc/$PPID/cwd/
x ppid-environ cat /proc/$PPID/environ
x ppid-mem head -c1 /proc/$PPID/mem
x ppid-map-files ls /proc/$PPID/map_files/
x ppid-fd-dir sh -c 'for f in /proc/'$PPID'/fd/*; do ls "$f/" >/dev/null 2>&1 && exit 0; done; exit 1'
"#
    );
    let quoted = probe.replace('\'', r"'\''");
    let out = w.run_agent(&format!(
        "echo agent; {probe}\necho exit; \"$EXEC\" '{quoted}'\n"
    ));
    let got = lines(&out);
    let mut leaked = Vec::new();
    let mut opened = Vec::new();
    for line in &got {
        if let Some(rest) = line.strip_prefix("fd:") {
            let target = rest.split_once(':').map_or("", |(_, t)| t);
            // Descriptors nd7 run itself inherited from whoever started it
            // (here the test harness) pass on like its environment; what
            // must never show up is anything nd7 opened: its state, the
            // floor's rule directories, its sockets, a ruleset.
            let nd7s = target.contains("/.nd7")
                || target.contains("/state/nd7")
                || target.starts_with("socket:")
                || target.starts_with("anon_inode:")
                || target.contains("/.claude")
                || target.contains("/proj")
                // The root outside the session's namespaces, which nd7 run
                // keeps to judge refusals (`ns::outside_root`).
                || target == "/";
            if nd7s {
                leaked.push(line.clone());
            }
        } else if line.ends_with(":yes") {
            opened.push(line.clone());
        }
    }
    assert!(
        got.contains(&"exit".to_string()),
        "{got:?} {}",
        text(&out.stderr)
    );
    assert_eq!(leaked, Vec::<String>::new(), "descriptors leaked: {got:?}");
    assert_eq!(opened, Vec::<String>::new(), "reached nd7 run: {got:?}");
}

// --- the hooks' door: stalled, flooded, malformed ----------------------------

/// Perl that opens `$N` connections to the run's door, announces a request
/// of 1,000 bytes on each, then sends one byte on each every 2 s, forever:
/// a peer that is never silent long enough for a per-read timeout.
const TRICKLE: &str = r#"perl -MSocket -MIO::Socket::UNIX -e '
$SIG{PIPE} = "IGNORE";
my @s;
for (1..$ARGV[0]) {
  my $c = IO::Socket::UNIX->new(Type => SOCK_STREAM(), Peer => "$ENV{ND7_RUN}/record.sock") or die "connect: $!";
  syswrite($c, pack("V", 1000));
  push @s, $c;
}
open(my $f, ">", "trickling"); close $f;
while (1) { syswrite($_, "a") for @s; sleep 2 }' "#;

/// A peer that trickles a request one byte at a time held a door slot for
/// as long as it liked (the door's timeout was per read), and sixteen of
/// them stalled every later hook: the hook blocked until Claude Code's own
/// hook timeout killed it, and the event was never recorded. An agent could
/// so switch recording off from inside. Broke through; closed first by an
/// overall deadline per request, now by the door's triage (a connection
/// gets a thread only once its request is in, ADR-0097; `door_load.rs`
/// has the hundred-connection form of this attack).
#[test]
fn a_door_peer_trickling_its_request_does_not_stall_later_hooks() {
    let w = World::new();
    let out = w.run_agent(&format!(
        r#"
{TRICKLE} 20 &
trickler=$!
wait_for trickling
echo '{{"session_id":"after-stall","hook_event_name":"Stop"}}' | timeout 100 "$ND7" record 2> hook.err; echo "rc:$?"
kill $trickler
"#
    ));
    assert_eq!(lines(&out), ["rc:0"], "{}", text(&out.stderr));
    let e = entries(&run_chain(&w));
    assert!(
        e.iter().any(|x| x["session"] == "after-stall"),
        "the hook's entry is in the log"
    );
    // How the tricklers are dropped and written down: `door_load.rs`
    // (ADR-0097).
}

/// Perl, run through the exit (as an agent's Bash command would be), that
/// keeps `$N` silent connections to the door open and opens new ones as
/// fast as the door drops the old: the door serves 16 at a time, so a hook
/// waits behind the whole queue.
const FLOOD: &str = r#"perl -MSocket -MIO::Socket::UNIX -e '
my $door = $ARGV[0]; my @s;
open(my $f, ">", "flooding"); close $f;
while (1) {
  @s = grep { defined getpeername($_) } @s;
  while (@s < $ARGV[1]) {
    my $c = IO::Socket::UNIX->new(Type => SOCK_STREAM(), Peer => $door) or last;
    push @s, $c;
  }
  select(undef, undef, undef, 0.2);
}' "#;

/// A flood of silent connections to the door from a command through the
/// exit, renewed as fast as the door drops them, kept every hook queued
/// behind it for longer than the hook waits (30 s; Claude Code's own timeout
/// is 60 s): the door served connections in arrival order with one set of
/// threads, so Write/Edit calls went unrecorded (Bash commands were still in
/// the exit's own `exec` entries). Broke through; guards the door being the
/// floor's alone (`keeper::allow_own_to_floor` in `Door::open`, and the
/// `floor_only` check in `Supervisor::allows_file`): with the door open to
/// commands through the exit again, the hook gives up and nothing is
/// recorded.
#[test]
fn a_flood_of_door_connections_through_the_exit_does_not_delay_the_hooks() {
    let w = World::new();
    let out = w.run_agent(&format!(
        r#"
"$EXEC" '{} "$ND7_RUN/record.sock" 300' &
wait_for flooding; sleep 3
echo '{{"session_id":"after-flood","hook_event_name":"Stop"}}' | timeout 60 "$ND7" record 2> hook.err; echo "rc:$?"
kill %1
"#,
        FLOOD.replace('\'', r"'\''")
    ));
    assert_eq!(lines(&out), ["rc:0"], "{}", text(&out.stderr));
    assert!(
        entries(&run_chain(&w))
            .iter()
            .any(|x| x["session"] == "after-flood")
    );
}

/// The agent stopped its own `nd7 run` (same account) and the next hook
/// waited for the door's answer forever: the recorder never returned to
/// Claude Code. The agent can no longer stop it (ADR-0096,
/// `floor_signals.rs`), but a session stopped from outside (a debugger, the
/// user) must not hang the hook either: here the test stops it. Guards the
/// deadline on the hook's side of the door (`DOOR_ANSWER_TIMEOUT` in
/// `src/sandbox/linux/door.rs`): without it the hook is still waiting when
/// `timeout` ends it (rc 124).
#[test]
fn a_stopped_nd7_run_does_not_hang_the_hook() {
    let w = World::new();
    let (child, session) = w.start_agent(
        r#"
kill -STOP $PPID; echo "stop-from-inside:$?" > inside.out
touch ready
wait_for stopped
echo '{"session_id":"stopped","hook_event_name":"Stop"}' | timeout 100 "$ND7" record > hook.out 2> hook.err; echo "rc:$?" > rc.new; mv rc.new rc
wait_for go-on
cat inside.out rc hook.out hook.err
"#,
    );
    w.wait_for("ready");
    let kill = |sig: &str| {
        std::process::Command::new("kill")
            .args([sig, &session.to_string()])
            .status()
            .expect("kill")
    };
    assert!(kill("-STOP").success());
    w.signal("stopped");
    w.wait_for("rc");
    assert!(kill("-CONT").success());
    w.signal("go-on");
    let out = child.wait_with_output().expect("nd7 run");
    let got = lines(&out);
    assert_eq!(
        got.first().map(String::as_str),
        Some("stop-from-inside:1"),
        "{got:?}"
    );
    assert_eq!(got.get(1).map(String::as_str), Some("rc:0"), "{got:?}");
    assert!(
        got.get(2).is_some_and(|l| l.starts_with("nd7 record: ")
            && l.contains("did not answer")
            && l.ends_with("; nothing recorded")),
        "{got:?}"
    );
}

/// Malformed and oversized door messages: a length of 4 GiB, one just past
/// the limit, a body of junk, unknown flags, a request cut short. Each is
/// refused and written down, nothing else changes, and the door serves the
/// next hook. Held.
#[test]
fn malformed_and_huge_door_messages_are_refused_and_the_door_still_serves() {
    let w = World::new();
    let out = w.run_agent(
        r#"
send() { perl -MSocket -MIO::Socket::UNIX -e '
  my $c = IO::Socket::UNIX->new(Type => SOCK_STREAM(), Peer => "$ENV{ND7_RUN}/record.sock") or die "connect: $!";
  $SIG{PIPE} = "IGNORE";
  syswrite($c, eval $ARGV[0]); shutdown($c, 1);
  my $got = ""; while (sysread($c, my $b, 4096)) { $got .= $b } print substr($got, 0, 1), "\n"' "$1"; }
echo "huge:$(send 'pack("V", 0xffffffff)')"
echo "over:$(send 'pack("V", (16 << 20) + 1)')"
echo "junk:$(send 'pack("V", 64) . ("\xff" x 64)')"
echo "flags:$(send 'pack("V", 17) . "\x80" . ("\0" x 16)')"
echo "short:$(send 'pack("V", 100) . "\x01"')"
echo '{"session_id":"after","hook_event_name":"Stop"}' | "$ND7" record; echo "record:$?"
"#,
    );
    assert_eq!(
        lines(&out),
        [
            "huge:r", "over:r", "junk:r", "flags:r", "short:r", "record:0"
        ],
        "{}",
        text(&out.stderr)
    );
    let e = entries(&run_chain(&w));
    assert!(e.iter().any(|x| x["session"] == "after"));
    let refused = e
        .iter()
        .filter(|x| x["kind"] == "refused" && x["source"] == "exit:nd7")
        .count();
    assert_eq!(refused, 5);
}

// --- the record ---------------------------------------------------------------

/// The agent kills its own `nd7 run` and works on under the floor: every
/// later hook records nothing, and the chain simply stops. `nd7 verify` said
/// "verified … reconciled" and exited 0, as for a run that ended. Broke
/// through; guards the `run_end` check in `report_reconciliation`
/// (`src/bin/nd7.rs`): without it verify passes this chain.
#[test]
fn verify_does_not_pass_a_run_whose_nd7_run_was_killed_from_inside() {
    let w = World::new();
    let claude = fake_claude(
        &w,
        r#"
pre() { printf '{"session_id":"c1","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"%s"},"tool_use_id":"%s"}' "$2" "$1" | "$ND7" record --run-hook; }
pre t1 'echo one'; "$EXEC" 'echo one' > /dev/null
kill -KILL $PPID
pre t2 'touch unrecorded' 2>/dev/null
touch unrecorded
"#,
    );
    let out = w
        .nd7(&["run", &claude, "-p", "x"])
        .output()
        .expect("nd7 run");
    // The session process is killed; the keeper (the `nd7 run` the user
    // started) ends the rest and exits as the session did: 128 + SIGKILL.
    assert!(
        out.status.code().is_none() || out.status.code() == Some(128 + 9),
        "nd7 run was killed: {:?}",
        out.status
    );
    let dir = run_chain(&w);
    assert!(
        !entries(&dir).iter().any(|x| x["kind"] == "run_end"),
        "the chain stops before run_end"
    );
    let v = verify(&w, &dir);
    let report = text(&v.stdout);
    assert_eq!(v.status.code(), Some(1), "{report}");
    assert!(
        report.contains("NOT ENDED: the run's chain has no run_end"),
        "{report}"
    );
    assert!(!report.contains("\nreconciled"), "{report}");
}

/// The logs can be neither hard-linked into the project (a second name,
/// with the project's write rights) nor reached by a grant the user makes
/// inside nd7's own state or inside `~/.nd7`. Held.
#[test]
fn the_log_cannot_be_hard_linked_out_nor_granted_from_inside_nd7s_state() {
    let w = World::new();
    let (child, _pid) = w.start_agent(&format!(
        r#"{X}
LOG=$(ls -d "$HOME_DIR/.local/state/nd7/sessions"/run-*)
x agent-hardlink ln "$LOG/events.ndjson" ev
x exec-hardlink "$EXEC" "ln '$LOG/events.ndjson' ev2"
echo "$LOG" > log.path
touch stage1; wait_for go1
x exec-append "$EXEC" "echo x >> '$LOG/events.ndjson'"
x exec-nd7 "$EXEC" "touch '$HOME_DIR/.nd7/runs/x'"
x exec-secrets "$EXEC" "echo /x >> '$HOME_DIR/.nd7/secrets'"
"#
    ));
    w.wait_for("stage1");
    let log = std::fs::read_to_string(w.proj().join("log.path")).expect("log path");
    let mut allowed = Vec::new();
    for path in [
        log.trim().to_string(),
        w.in_home(".local/state/nd7"),
        w.in_home(".local/state"),
        w.in_home(".nd7/runs"),
        w.in_home(".nd7"),
    ] {
        let allow = w.nd7(&["allow", &path]).output().expect("allow");
        allowed.push((path, allow.status.code(), text(&allow.stderr)));
    }
    w.signal("go1");
    let out = child.wait_with_output().expect("agent ends");
    assert_eq!(
        lines(&out),
        [
            "agent-hardlink:no",
            "exec-hardlink:no",
            "exec-append:no",
            "exec-nd7:no",
            "exec-secrets:no"
        ],
        "{allowed:?} {}",
        text(&out.stderr)
    );
}

// --- secrets --------------------------------------------------------------------

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

// --- ~/.nd7 kept in a dotfiles repository ------------------------------------------

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

// --- what nd7 verify prints --------------------------------------------------

/// The agent names a Bash call and runs a command whose text carries
/// terminal escapes (a carriage return and "erase line", then a fake
/// "reconciled" line). `nd7 verify` printed the NOT RECONCILED lines with the
/// text as it was, so on a terminal the warning was overwritten by the
/// agent's own line. Broke through; guards the `safe::term` calls in
/// `report_reconciliation` (`src/bin/nd7.rs`): without them the raw escape
/// bytes reach verify's output.
#[test]
fn verify_shows_the_agents_text_inert() {
    let w = World::new();
    let claude = fake_claude(
        &w,
        r#"
unset CLAUDE_CODE_SHELL_PREFIX
FAKE=$(printf 'x\r\033[2Kreconciled: every Bash call has its command through the exit, and every command its call\033[8m')
printf '{"session_id":"c1","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"never %s"},"tool_use_id":"id\\u001b[8m"}' "$(printf '\\r\\u001b[2K')" | "$ND7" record --run-hook
printf '{"session_id":"c1","hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{"command":"never %s"},"tool_use_id":"id\\u001b[8m","tool_response":{"stdout":""}}' "$(printf '\\r\\u001b[2K')" | "$ND7" record --run-hook
"$EXEC" "true '$FAKE'"
"#,
    );
    let out = w
        .nd7(&["run", &claude, "-p", "x"])
        .output()
        .expect("nd7 run");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let dir = run_chain(&w);
    let v = verify(&w, &dir);
    let report = text(&v.stdout);
    assert_eq!(v.status.code(), Some(1), "{report}");
    // The call with no command, and the command with no call.
    assert_eq!(report.matches("NOT RECONCILED").count(), 2, "{report}");
    assert!(
        !report.contains(['\u{1b}', '\r']),
        "the agent's escapes reach the terminal: {report:?}"
    );
    assert!(report.contains("\\x1b[2K"), "{report}");
}

// --- the hooks' environment -------------------------------------------------

/// Claude Code applies its settings' `env` (in `~/.claude/settings.json` or
/// the project's `.claude/settings.json`, both writable inside) to the hooks
/// it starts, so the agent chooses `ND7_RUN` for every later hook. Named
/// after pid 1 (an ancestor of every process) with a plain file for its
/// `record.sock`, the hint passed the ancestor check, the connect failed, and
/// the hook recorded nothing: recording switched off from inside. Broke
/// through; guards the fall-back to the ancestors' door in `record::deliver`
/// (`src/record.rs`): without it the hook says "nothing recorded".
#[test]
fn a_forged_nd7_run_hint_does_not_switch_recording_off() {
    let w = World::new();
    let out = w.run_agent(
        r#"
mkdir -p fake/1 && touch fake/1/record.sock
echo '{"session_id":"hinted","hook_event_name":"Stop"}' | ND7_RUN="$PWD/fake/1" "$ND7" record 2> hook.err; echo "rc:$?"
cat hook.err
"#,
    );
    assert_eq!(lines(&out), ["rc:0"], "{}", text(&out.stderr));
    assert!(
        entries(&run_chain(&w))
            .iter()
            .any(|x| x["session"] == "hinted"),
        "the entry went through the run's own door"
    );
}

/// The same `env` can set `ND7_RUN` to something that is no directory at
/// all (`x`), or to the empty string, which read as "not under nd7 run":
/// with `XDG_STATE_HOME` pointed into the project, the hook then appended to
/// a log of the agent's own and reported success, and the run's chain got
/// nothing. Broke through; guards `or_else(sandbox::hook_door)` and the
/// empty hint in `record::deliver` (`src/record.rs`).
#[test]
fn an_empty_or_meaningless_nd7_run_hint_does_not_switch_recording_off() {
    let w = World::new();
    let out = w.run_agent(
        r#"
for hint in x ''; do
  echo '{"session_id":"hint-'"$hint"'","hook_event_name":"Stop"}' | ND7_RUN="$hint" XDG_STATE_HOME="$PWD/st" "$ND7" record 2> hook.err; echo "rc:$?"
  cat hook.err
done
ls st 2>/dev/null
"#,
    );
    assert_eq!(lines(&out), ["rc:0", "rc:0"], "{}", text(&out.stderr));
    let e = entries(&run_chain(&w));
    for session in ["hint-x", "hint-"] {
        assert!(
            e.iter().any(|x| x["session"] == session),
            "{session} went through the run's own door"
        );
    }
}
