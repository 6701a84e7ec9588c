//! What actually ran (issue 32): every exec in the tree `nd7 run` confines
//! is in the run's chain, read after the exec by nd7's observer outside the
//! floor (`source: effect:nd7`), and nothing inside can switch it off or
//! make it state a program that did not run. Each attack is tried as an
//! ordinary account, the agent a shell script, Bash calls through `$EXEC`.
#![cfg(target_os = "linux")]

use serde_json::Value;

use crate::runs::*;
use crate::world::*;

/// Every exec the observer wrote into the run's chain, each with its
/// executable's path (`exe`, or null when not confirmed).
fn ran(w: &World) -> Vec<Value> {
    let mut all = Vec::new();
    for e in entries(&run_chain(w)) {
        if e["source"] != "effect:nd7" || e["kind"] != "ran" {
            continue;
        }
        let exes = e["body"]["exes"].as_array().cloned().unwrap_or_default();
        for x in e["body"]["execs"].as_array().cloned().unwrap_or_default() {
            let mut x = x;
            x["path"] = x["exe"]
                .as_u64()
                .map(|i| exes[i as usize][0].clone())
                .unwrap_or(Value::Null);
            all.push(x);
        }
    }
    all
}

/// The `not_observed` entries' bodies.
fn not_observed(w: &World) -> Vec<Value> {
    entries(&run_chain(w))
        .into_iter()
        .filter(|e| e["source"] == "effect:nd7" && e["kind"] == "not_observed")
        .map(|e| e["body"].clone())
        .collect()
}

fn argv(x: &Value) -> Vec<String> {
    x["argv"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| s.as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// The execs whose arguments contain `marker`.
fn with(all: &[Value], marker: &str) -> Vec<Value> {
    all.iter()
        .filter(|x| argv(x).iter().any(|a| a.contains(marker)))
        .cloned()
        .collect()
}

/// `execs` without `nd7-exec`'s own (in the floor, its argument the command).
fn but_the_exit(execs: Vec<Value>) -> Vec<Value> {
    execs
        .into_iter()
        .filter(|x| !x["path"].as_str().unwrap_or("").ends_with("/nd7-exec"))
        .collect()
}

#[test]
fn every_exec_of_the_floor_and_of_commands_is_in_the_chain_with_its_call() {
    let w = World::new();
    let out = w.run_agent(
        r#"/bin/true floor-marker
( /bin/echo child-marker >/dev/null ) &
wait
"$EXEC" '/bin/true command-marker; /bin/sh -c "/bin/true nested-marker"'
echo done"#,
    );
    assert!(text(&out.stdout).contains("done"), "{}", text(&out.stderr));
    let all = ran(&w);
    let floor = with(&all, "floor-marker");
    assert_eq!(floor.len(), 1, "{all:#?}");
    assert_eq!(floor[0]["path"], "/usr/bin/true");
    assert!(floor[0].get("command").is_none(), "{floor:?}");
    assert_eq!(with(&all, "child-marker").len(), 1, "{all:#?}");
    let command = with(&all, "command-marker");
    assert_eq!(command.len(), 3, "nd7-exec, bash -c and true: {all:#?}");
    let command = but_the_exit(command);
    let exec_seq = entries(&run_chain(&w))
        .iter()
        .find(|e| e["kind"] == "exec" && e["source"] == "exit:nd7")
        .map(|e| e["seq"].clone())
        .expect("the command's exec entry");
    assert!(
        command.iter().all(|x| x["command"] == exec_seq),
        "{command:#?}"
    );
    let nested = but_the_exit(with(&all, "nested-marker"));
    assert_eq!(nested.len(), 3, "bash -c, sh -c and true: {nested:#?}");
    assert!(
        nested.iter().all(|x| x["command"] == exec_seq),
        "{nested:#?}"
    );
    assert!(not_observed(&w).is_empty());
    // Each executable is named with its identity and the BLAKE3 of its bytes.
    let bytes = std::fs::read("/usr/bin/true").expect("true");
    let hash = blake3::hash(&bytes).to_hex().to_string();
    let text = std::fs::read_to_string(run_chain(&w).join("events.ndjson")).unwrap();
    assert!(text.contains(&hash));
}
