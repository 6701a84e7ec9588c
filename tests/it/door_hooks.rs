//! A hook's event reaches the run's chain whatever the agent does to the
//! hooks' door from inside: peers that trickle a request or flood the door
//! with connections, a stopped `nd7 run`, malformed and oversized messages,
//! an `ND7_RUN` hint forged or emptied through Claude Code's settings. The
//! hook never hangs, and where it cannot deliver it says so. Each attack is
//! tried as the ordinary account, by a shell script standing in for the
//! agent under `nd7 run` (and through the exit where that is the way in).
//! Those that broke through name the line that now closes them; those that
//! held are kept so they keep holding. `door_load.rs` holds the door under
//! load in the hundreds (ADR-0097), `record_door.rs` the log behind it.
#![cfg(target_os = "linux")]

use crate::runs::*;
use crate::world::*;

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

/// Claude Code applies its settings' `env` (in `~/.claude/settings.json` or
/// the project's `.claude/settings.json`, both writable inside) to the hooks
/// it starts, so the agent chooses `ND7_RUN` for every later hook. Named
/// after pid 1 (an ancestor of every process) with a plain file for its
/// `record.sock`, the hint passed the ancestor check, the connect failed, and
/// the hook recorded nothing: recording switched off from inside. Broke
/// through; guards the fall-back to the ancestors' door in `record::deliver`
/// (`src/record/mod.rs`): without it the hook says "nothing recorded".
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
/// empty hint in `record::deliver` (`src/record/mod.rs`).
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
