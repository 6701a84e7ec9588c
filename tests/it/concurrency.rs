//! Appends that race. Without the exclusive lock these tests fail: two
//! writers read the same head and write the same seq, or one rewrites head
//! under the other and the next append refuses the log (checked by removing
//! the lock call in `SessionLog::append`; see docs/log-format.md).

use std::collections::BTreeSet;
use std::process::{Command, Stdio};

use crate::common::*;

#[test]
fn sixteen_threads_appending_at_once_lose_nothing() {
    const THREADS: usize = 16;
    const EACH: usize = 60;
    let state = State::new();
    let barrier = std::sync::Barrier::new(THREADS);
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let (state, barrier) = (&state, &barrier);
            scope.spawn(move || {
                let log = state.log("s");
                barrier.wait();
                for i in 0..EACH {
                    log.append(&event("s", t * 1000 + i))
                        .unwrap_or_else(|e| panic!("thread {t} append {i}: {e}"));
                }
            });
        }
    });
    let log = state.log("s");
    let v = log.verify(1).expect("the chain is clean");
    assert_eq!(v.entries, (THREADS * EACH) as u64);
    let ids: BTreeSet<String> = entries(&log)
        .iter()
        .map(|e| e["tool_use_id"].as_str().expect("id").to_string())
        .collect();
    assert_eq!(ids.len(), THREADS * EACH, "every append landed once");
}

#[test]
fn forty_recorder_processes_at_once_lose_nothing() {
    const PROCS: usize = 40;
    const EACH: usize = 8;
    let state = State::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut children = Vec::new();
    for p in 0..PROCS {
        // Each process is a shell running `nd7 record` EACH times in a row,
        // so 40 recorders overlap for the whole test rather than only at start.
        let mut script = String::new();
        for i in 0..EACH {
            let file = dir.path().join(format!("{p}-{i}.json"));
            std::fs::write(&file, payload("s", p * 100 + i)).expect("write payload");
            script.push_str(&format!(
                "'{}' record < '{}' || exit 1\n",
                env!("CARGO_BIN_EXE_nd7"),
                file.display()
            ));
        }
        children.push(
            Command::new("sh")
                .arg("-c")
                .arg(script)
                .env("XDG_STATE_HOME", state.xdg())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn"),
        );
    }
    for child in children {
        let out = child.wait_with_output().expect("wait");
        assert!(out.status.success());
        assert_eq!(stdout(&out), "");
        assert_eq!(stderr(&out), "", "no recorder complained");
    }
    let log = state.log("s");
    let out = state.nd7().args(["verify", "s"]).output().expect("verify");
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(stdout(&out).starts_with(&format!("verified: {} entries", PROCS * EACH)));
    let ids: BTreeSet<String> = entries(&log)
        .iter()
        .map(|e| e["tool_use_id"].as_str().expect("id").to_string())
        .collect();
    assert_eq!(ids.len(), PROCS * EACH);
}

#[test]
fn verify_while_appending_never_sees_a_half_state() {
    let state = State::new();
    let log = state.log("s");
    log.append(&event("s", 0)).expect("first");
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for i in 1..400 {
                log.append(&event("s", i)).expect("append");
            }
            done.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        let mut checks = 0;
        while !done.load(std::sync::atomic::Ordering::SeqCst) || checks == 0 {
            let v = log
                .verify(1)
                .expect("verify under a shared lock is always clean");
            assert_eq!(v.head_state, nd7_core::chain::HeadState::Current);
            checks += 1;
            // flock does not queue a waiting writer ahead of new readers:
            // give the writer a turn, as any real reader does between runs.
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    });
}
