//! Issue 29 item 6: other callers' load on the hooks' door must never cost
//! a hook its entry, and where an event may still be lost, the log says so
//! and `nd7 verify` does not pass the chain as whole (ADR-0097). Each attack
//! is a shell script standing in for the agent under `nd7 run`, as the
//! ordinary account, making its connections from inside the floor.
#![cfg(target_os = "linux")]

use serde_json::Value;

use crate::runs::*;
use crate::world::*;

/// Perl that opens `$N` connections to the run's door, announces a request
/// of 1,000 bytes on each, then sends one byte on each every second,
/// forever; once the door has dropped them all, it makes `dropped`.
const TRICKLE: &str = r#"perl -MSocket -MIO::Socket::UNIX -e '
$SIG{PIPE} = "IGNORE";
my @s;
for (1..$ARGV[0]) {
  my $c = IO::Socket::UNIX->new(Type => SOCK_STREAM(), Peer => "$ENV{ND7_RUN}/record.sock") or die "connect: $!";
  syswrite($c, pack("V", 1000));
  push @s, $c;
}
open(my $f, ">", "trickling"); close $f;
while (1) {
  my $dropped = grep { !defined syswrite($_, "a") } @s;
  if ($dropped == @s) { open(my $d, ">", "dropped"); close $d; }
  sleep 1;
}' "#;

/// Perl that keeps `$N` silent connections to the door open from the floor
/// itself, opening new ones as fast as the door drops the old.
const FLOOD: &str = r#"perl -MSocket -MIO::Socket::UNIX -e '
$SIG{PIPE} = "IGNORE";
my @s;
open(my $f, ">", "flooding"); close $f;
while (1) {
  @s = grep { defined getpeername($_) && !eof($_) } @s;
  while (@s < $ARGV[0]) {
    my $c = IO::Socket::UNIX->new(Type => SOCK_STREAM(), Peer => "$ENV{ND7_RUN}/record.sock") or last;
    push @s, $c;
  }
  select(undef, undef, undef, 0.05);
}' "#;

/// The hook that must be recorded, and how it ended.
const HOOK: &str = r#"echo '{"session_id":"SESSION","hook_event_name":"Stop"}' | timeout 100 "$ND7" record 2> hook.err; echo "rc:$?"; cat hook.err"#;

fn refused_by_door(e: &[Value]) -> Vec<&Value> {
    e.iter()
        .filter(|x| {
            x["kind"] == "refused" && x["source"] == "exit:nd7" && x["body"]["door"] == "record"
        })
        .collect()
}

/// A hundred connections from inside the floor, each trickling its request
/// a byte a second, held every door thread for 10 s each: a real hook
/// waited 30 s, gave up, and its event was never recorded, while `nd7
/// verify` passed the chain. Broke through; guards the door's triage
/// (`triage` in `src/sandbox/linux/door.rs`: a connection gets a thread
/// only once its request is in): with connections handed to threads as
/// they come again, the hook gives up and nothing is recorded. The
/// dropped connections are in the log and `nd7 verify` says the chain is
/// incomplete (guards `door_dropped` in `run_end` and its report).
#[test]
fn a_hundred_trickling_connections_do_not_cost_a_hook_its_entry() {
    let w = World::new();
    let out = w.run_agent(&format!(
        "{TRICKLE} 100 &\ntrickler=$!\nwait_for trickling\n{}\nwait_for dropped\nkill $trickler",
        HOOK.replace("SESSION", "after-trickle")
    ));
    assert_eq!(lines(&out), ["rc:0"], "{}", text(&out.stderr));
    let chain = run_chain(&w);
    let e = entries(&chain);
    assert!(
        e.iter().any(|x| x["session"] == "after-trickle"),
        "the hook's entry is in the log"
    );
    // The tricklers were dropped unread, and the log says so.
    let refused = refused_by_door(&e);
    assert!(
        refused.iter().any(|x| x["body"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("dropped unread"))),
        "{refused:?}"
    );
    let end = e.last().expect("run_end");
    assert_eq!(end["kind"], "run_end");
    let dropped = end["body"]["door_dropped"].as_u64().expect("door_dropped");
    assert!(dropped >= 1, "{end}");
    let verified = verify(&w, &chain);
    let said = text(&verified.stdout);
    assert!(
        said.contains(&format!(
            "INCOMPLETE: the hooks' door dropped {dropped} connection"
        )),
        "{said}"
    );
    assert_eq!(verified.status.code(), Some(1), "{said}");
}

/// Silent connections from the floor, renewed as fast as the door drops
/// them (more than the door keeps waiting): hooks in between are still
/// recorded, each of them. Guards the same triage, and the oldest waiting
/// being the one dropped when too many wait (`Waiting::pop_late`).
#[test]
fn a_flood_of_silent_connections_from_the_floor_does_not_cost_hooks_their_entries() {
    let w = World::new();
    let hooks: Vec<String> = (0..5)
        .map(|i| HOOK.replace("SESSION", &format!("flood-{i}")))
        .collect();
    let out = w.run_agent(&format!(
        "{FLOOD} 300 &\nflooder=$!\nwait_for flooding; sleep 3\n{}\nkill $flooder",
        hooks.join("\n")
    ));
    assert_eq!(lines(&out), ["rc:0"; 5], "{}", text(&out.stderr));
    let e = entries(&run_chain(&w));
    for i in 0..5 {
        assert!(
            e.iter().any(|x| x["session"] == format!("flood-{i}")),
            "hook {i} is in the log"
        );
    }
}

/// Perl that sends `$1` whole requests to the door as fast as it can from
/// `$2` processes, each an event of the agent's own (session `flood`),
/// closing each connection once sent; makes `flooded` when all are sent.
const WHOLE_FLOOD: &str = r#"perl -MSocket -MIO::Socket::UNIX -e '
$SIG{PIPE} = "IGNORE";
my $p = q({"session_id":"flood","hook_event_name":"Stop"});
my $b = pack("C", 1) . pack("Q<", 1) . pack("V", 0) . pack("V", length $p) . $p;
my $req = pack("V", length $b) . $b;
my @kids;
for my $k (1..$ARGV[1]) {
  my $pid = fork;
  if (!$pid) {
    for (1..$ARGV[0] / $ARGV[1]) {
      my $c = IO::Socket::UNIX->new(Type => SOCK_STREAM(), Peer => "$ENV{ND7_RUN}/record.sock") or next;
      syswrite($c, $req);
      close $c;
    }
    exit 0;
  }
  push @kids, $pid;
}
waitpid($_, 0) for @kids;
open(my $f, ">", "flooded"); close $f;' "#;

/// A flood of whole requests (fast, cheap to send, each an append to
/// serve) from many processes, with a real hook in the middle of it and
/// the program ending right after. Whole requests queue without bound for
/// the door's 12 threads: is the hook's entry in the log, or does
/// `nd7 verify` say the chain is incomplete? Held: the door serves whole
/// requests about as fast as the floor can connect (each connect passes
/// through the keeper), so the hook waits behind a short queue and is
/// recorded.
#[test]
fn a_flood_of_whole_requests_does_not_lose_a_hook_silently() {
    let w = World::new();
    let out = w.run_agent(&format!(
        "{WHOLE_FLOOD} 6000 6 &\nsleep 0.5\n{}\n",
        HOOK.replace("SESSION", "in-flood")
    ));
    let chain = run_chain(&w);
    let e = entries(&chain);
    let flood = e.iter().filter(|x| x["session"] == "flood").count();
    let hook = e.iter().any(|x| x["session"] == "in-flood");
    let end = e.last().cloned().unwrap_or_default();
    let mut reasons: Vec<String> = e
        .iter()
        .filter(|x| x["kind"] == "refused")
        .map(|x| x["body"]["reason"].to_string())
        .collect();
    reasons.dedup();
    eprintln!("refusals: {reasons:?}");
    let verified = verify(&w, &chain);
    eprintln!(
        "out: {:?} {}\nflood entries: {flood}; hook recorded: {hook}\nrun_end: {end}\nverify: {} {}",
        lines(&out),
        text(&out.stderr),
        verified.status,
        text(&verified.stdout)
    );
    assert!(
        hook || verified.status.code() != Some(0),
        "the hook's event is lost and nd7 verify passes the chain"
    );
}

/// Perl that opens `$1` connections to the door, sends half a request on
/// each, makes `holding` and sleeps: the run's end kills it, and the door
/// then finds every connection ended short.
const HALF_SENT: &str = r#"perl -MSocket -MIO::Socket::UNIX -e '
my @s;
for (1..$ARGV[0]) {
  my $c = IO::Socket::UNIX->new(Type => SOCK_STREAM(), Peer => "$ENV{ND7_RUN}/record.sock") or last;
  syswrite($c, pack("V", 1000) . "x");
  push @s, $c;
}
open(my $f, ">", "holding"); close $f;
sleep 1000;' "#;

/// Connections left half-sent when the program ends: the run's end kills
/// their holder, and the door refuses each as it ends, possibly after
/// `run_end` is written. Is the chain still one `nd7 verify` passes only
/// with `run_end` last (no entry after the tally)? Broke: `refused`
/// entries of door `record` follow `run_end` (the door is never drained
/// before the tally), and `nd7 verify` passes the chain. These were the
/// agent's own half-sent requests, but the same path left a drop
/// (`door_dropped`) or a hook's request still queued for the door's
/// threads outside the tally, or unserved and unwritten when the session
/// exited. Fixed: the session drains the door (`door::drain`; every floor
/// process is dead by then) before `run_end` (ADR-0099). Guards `drain`.
#[test]
fn connections_ended_by_the_runs_end_write_nothing_after_run_end() {
    let w = World::new();
    let out = w.run_agent(&format!(
        "{HALF_SENT} 200 </dev/null >/dev/null 2>&1 &\nwait_for holding\necho held"
    ));
    assert_eq!(lines(&out), ["held"], "{}", text(&out.stderr));
    let chain = run_chain(&w);
    let e = entries(&chain);
    let end = e
        .iter()
        .position(|x| x["kind"] == "run_end")
        .expect("run_end");
    let after: Vec<_> = e[end + 1..].iter().map(|x| x["kind"].clone()).collect();
    let verified = verify(&w, &chain);
    eprintln!(
        "refused in run_end: {}; entries after run_end: {after:?}; verify: {} {}",
        e[end]["body"]["refused"],
        verified.status,
        text(&verified.stdout).lines().next().unwrap_or("")
    );
    assert!(after.is_empty(), "entries after run_end: {after:?}");
    assert_eq!(
        verified.status.code(),
        Some(0),
        "{}",
        text(&verified.stdout)
    );
}
