//! `nd7 run` when the kernel withholds what it asks for, reached through
//! `ND7_FAULT` (`nd7_core::fault`, test builds only): no start time of its
//! own, no pidfd on a caller's request (before Linux 6.5), no pidfd to watch
//! a command. Each way is either refused or said, never silent.
#![cfg(target_os = "linux")]

use std::process::Stdio;

use crate::runs::*;
use crate::world::*;

/// Without its own start time `nd7 run` cannot mark its run directory as
/// its own (another run would take it for a dead one and remove it), so it
/// starts nothing: 2, and the reason. Guards `.ok_or(RunError::NoStartTime)?`
/// in src/run.rs: with `unwrap_or(0)` there the agent runs.
#[test]
fn nd7_run_without_its_start_time_starts_nothing() {
    let w = World::new();
    let agent = w.agent("touch started");
    let out = w
        .nd7(&["run", &agent])
        .env("ND7_FAULT", "no-start-time")
        .output()
        .expect("nd7 run");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("nd7 run: cannot read nd7 run's own start time from the kernel;")
            && err.contains("so nothing was started"),
        "{err}"
    );
    assert!(!w.proj().join("started").exists(), "the agent never ran");
    let logs = logs(&w);
    assert!(
        !logs.exists() || run_dirs(&w).is_empty(),
        "no run chain was started"
    );
}

/// Before Linux 6.5 a request carries no pidfd of its sender: the exit pins
/// the caller by its pid when it reads the request (`admit`'s fallback in
/// src/sandbox/linux/exit.rs). A command from the session still runs, a
/// process outside it is still refused, and the weaker check is said in the
/// run's banner and by `nd7 doctor`, never silent.
#[test]
fn without_pidfds_on_requests_the_exit_pins_callers_by_pid_and_says_so() {
    let w = World::new();
    let agent = w.agent(
        r#"
"$EXEC" 'echo hi' > /dev/null; echo "ok:$?"
touch stage1; wait_for go1
"#,
    );
    let child = w
        .nd7(&["run", &agent])
        .env("ND7_FAULT", "no-pidfd-passing")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nd7 run");
    w.wait_for("stage1");
    let runs: Vec<_> = std::fs::read_dir(w.sessions())
        .expect("the run directories")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    let outsider = crate::record_door::as_account(
        crate::record_door::EXIT_SOCKET_VAR,
        &runs[0].join("exit.sock").display().to_string(),
    );
    assert!(
        outsider.contains("refused: ") && outsider.contains("is not part of session"),
        "{outsider}"
    );
    w.signal("go1");
    let out = child.wait_with_output().expect("nd7 run ends");
    assert_eq!(lines(&out), ["ok:0"], "{}", text(&out.stderr));
    let said = "the exit's callers by pidfd: each is pinned by its pid when its request is read";
    let err = text(&out.stderr);
    assert!(
        err.lines()
            .any(|l| l.starts_with("nd7 run: not enforced on this system: ") && l.contains(said)),
        "{err}"
    );
    let e = entries(&run_chain(&w));
    let execs: Vec<_> = e.iter().filter(|x| x["kind"] == "exec").collect();
    assert_eq!(execs.len(), 1, "{e:?}");
    assert_eq!(execs[0]["body"]["command"], "echo hi");

    let doctor = w
        .nd7(&["doctor"])
        .env("ND7_FAULT", "no-pidfd-passing")
        .output()
        .expect("nd7 doctor");
    let report = text(&doctor.stdout);
    assert!(
        report
            .lines()
            .any(|l| l.contains("callers") && l.contains(&format!("not enforced: {said}"))),
        "{report}"
    );
    assert!(report.contains("Linux 6.5 or newer"), "{report}");
}

/// When no pidfd can watch a command the exit started, it is checked on
/// every 50 ms instead: its status still comes back, and its `exec_end`
/// says how it was watched. Guards the `watch` note `relay` returns in
/// src/sandbox/linux/exit.rs.
#[test]
fn a_command_no_pidfd_can_watch_is_polled_and_its_end_says_so() {
    let w = World::new();
    let agent = w.agent(r#""$EXEC" 'exit 3'; echo "status:$?""#);
    let out = w
        .nd7(&["run", &agent])
        .env("ND7_FAULT", "no-pidfd-watch")
        .output()
        .expect("nd7 run");
    assert_eq!(lines(&out), ["status:3"], "{}", text(&out.stderr));
    let e = entries(&run_chain(&w));
    let ends: Vec<_> = e.iter().filter(|x| x["kind"] == "exec_end").collect();
    assert_eq!(ends.len(), 1, "{e:?}");
    assert_eq!(ends[0]["body"]["exited"], 3, "{}", ends[0]);
    let watch = ends[0]["body"]["watch"].as_str().unwrap_or_default();
    assert!(
        watch.starts_with("pidfd_open failed (")
            && watch.ends_with("; the command was checked on every 50 ms instead"),
        "{}",
        ends[0]
    );
    assert_eq!(verify(&w, &run_chain(&w)).status.code(), Some(0));
}

/// What this system does not enforce is said in full on the first run, and
/// again whenever it changes; in between, in a few words: the same
/// paragraph on every run is one people stop reading.
#[test]
fn the_not_enforced_paragraph_is_said_in_full_once() {
    let w = World::new();
    let agent = w.agent("true");
    let run = |fault: &str| {
        let out = w
            .nd7(&["run", &agent])
            .env("ND7_FAULT", fault)
            .output()
            .expect("nd7 run");
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stderr)
            .lines()
            .find(|l| l.starts_with("nd7 run: not enforced on this system: "))
            .map(str::to_string)
    };
    let said = "the exit's callers by pidfd";
    let first = run("no-pidfd-passing").expect("said");
    assert!(first.contains(said), "{first}");
    let short = "nd7 run: not enforced on this system: the same as the first run said (`nd7 doctor` lists it)";
    assert_eq!(run("no-pidfd-passing").as_deref(), Some(short));
    // Something else (or nothing) missing: said in full again, if at all.
    let changed = run("");
    assert_ne!(changed.as_deref(), Some(short), "{changed:?}");
}
