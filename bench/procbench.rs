//! Times whole processes the way a hook runs them: spawned, fed a payload on
//! stdin, waited for. The commands run round-robin, so a burst of noise on a
//! shared machine lands on all of them alike; the report is the median and
//! its ratio to the first command's.
//!
//! usage: procbench RUNS STDIN_FILE CMD [ARGS...] [:: CMD [ARGS...]]...
//! Environment variables of the form `NAME=VALUE` before a CMD are set for it,
//! and `-NAME=` removes NAME from its environment; a first word `<FILE` gives
//! that command its own stdin.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [runs, stdin_file, rest @ ..] = &args[..] else {
        return Err("usage: procbench RUNS STDIN_FILE CMD [ARGS...] [:: CMD ...]".into());
    };
    let runs: usize = runs.parse()?;
    let input = std::fs::read(stdin_file)?;
    let mut commands: Vec<(&[String], Vec<u8>, String)> = Vec::new();
    for cmd in rest.split(|a| a == "::") {
        match cmd.first().and_then(|w| w.strip_prefix('<')) {
            Some(file) => commands.push((&cmd[1..], std::fs::read(file)?, file.to_string())),
            None => commands.push((cmd, input.clone(), stdin_file.to_string())),
        }
    }
    let mut times: Vec<Vec<Duration>> = vec![Vec::with_capacity(runs); commands.len()];
    let warmup = runs / 10 + 1;
    for round in 0..warmup + runs {
        for (i, (cmd, input, _)) in commands.iter().enumerate() {
            let elapsed = run(cmd, input)?;
            if round >= warmup {
                times[i].push(elapsed);
            }
        }
    }
    let medians: Vec<f64> = times.iter_mut().map(|t| percentile(t, 50.0)).collect();
    for (i, (cmd, _, stdin)) in commands.iter().enumerate() {
        let t = &mut times[i];
        println!(
            "{:>9.1} µs median  {:>9.1} p10  {:>9.1} p90  ratio {:.3}  {} < {stdin}",
            medians[i],
            percentile(t, 10.0),
            percentile(t, 90.0),
            medians[i] / medians[0],
            cmd.join(" ")
        );
    }
    Ok(())
}

fn run(cmd: &[String], input: &[u8]) -> Result<Duration, Box<dyn std::error::Error>> {
    use std::io::Write;
    let env_end = cmd
        .iter()
        .position(|a| !a.contains('='))
        .ok_or("no command")?;
    let (envs, argv) = cmd.split_at(env_end);
    let mut command = Command::new(&argv[0]);
    command.args(&argv[1..]);
    for kv in envs {
        let (k, v) = kv.split_once('=').ok_or("bad NAME=VALUE")?;
        match k.strip_prefix('-') {
            Some(removed) => command.env_remove(removed),
            None => command.env(k, v),
        };
    }
    let start = Instant::now();
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()?;
    // A command that does not read its stdin closes the pipe early; that is
    // its business, not a failed run.
    if let Err(e) = child.stdin.take().ok_or("stdin")?.write_all(input)
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        return Err(e.into());
    }
    let status = child.wait()?;
    let elapsed = start.elapsed();
    if !status.success() {
        return Err(format!("{} exited with {status}", argv.join(" ")).into());
    }
    Ok(elapsed)
}

fn percentile(times: &mut [Duration], p: f64) -> f64 {
    times.sort();
    let idx = ((times.len() - 1) as f64 * p / 100.0).round() as usize;
    times[idx].as_secs_f64() * 1e6
}
