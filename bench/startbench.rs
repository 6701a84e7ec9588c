//! How long `nd7 run` takes to start its program, and to end after it: each
//! command is run with `bench/stamp.rs` as its last argument's program,
//! which prints the clock when it starts. Commands run round-robin; the
//! report is the median start-up and the median whole run, each with its
//! ratio to the first command's.
//!
//! usage: startbench RUNS CMD [ARGS...] [:: CMD [ARGS...]]...
//! (each CMD ends with the stamp program, e.g. `nd7 run target/release/examples/stamp`)
//!
//! `STARTBENCH_GAP_MS` pauses that long before each run, so that what one
//! run leaves behind (a process still ending, dirty caches) does not fall
//! on the next. Listing the base twice around the new build (`base :: new
//! :: base`) puts each new run between two of the base's, so that neither
//! build always follows the other.

use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn now() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [runs, rest @ ..] = &args[..] else {
        return Err("usage: startbench RUNS CMD [ARGS...] [:: CMD ...]".into());
    };
    let runs: usize = runs.parse()?;
    let commands: Vec<&[String]> = rest.split(|a| a == "::").collect();
    let mut starts: Vec<Vec<u128>> = vec![Vec::new(); commands.len()];
    let mut totals: Vec<Vec<u128>> = vec![Vec::new(); commands.len()];
    let warmup = runs / 10 + 1;
    let gap = match std::env::var("STARTBENCH_GAP_MS") {
        Ok(ms) => Duration::from_millis(ms.parse()?),
        Err(_) => Duration::ZERO,
    };
    for round in 0..warmup + runs {
        for (i, cmd) in commands.iter().enumerate() {
            std::thread::sleep(gap);
            let t0 = now();
            let out = Command::new(&cmd[0])
                .args(&cmd[1..])
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .output()?;
            let t1 = now();
            let stamp: u128 = String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse()
                .map_err(|_| format!("{} printed no stamp", cmd.join(" ")))?;
            if round >= warmup {
                starts[i].push(stamp.saturating_sub(t0));
                totals[i].push(t1 - t0);
            }
        }
    }
    let median = |v: &mut Vec<u128>| {
        v.sort_unstable();
        Duration::from_nanos(v[v.len() / 2] as u64).as_secs_f64() * 1e6
    };
    let s: Vec<f64> = starts.iter_mut().map(median).collect();
    let t: Vec<f64> = totals.iter_mut().map(median).collect();
    for (i, cmd) in commands.iter().enumerate() {
        println!(
            "start {:>8.1} µs ratio {:.3}   whole {:>8.1} µs ratio {:.3}   {}",
            s[i],
            s[i] / s[0],
            t[i],
            t[i] / t[0],
            cmd.join(" ")
        );
    }
    Ok(())
}
