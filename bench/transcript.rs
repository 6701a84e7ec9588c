//! What anchoring the transcript costs a hook: `nd7 record` of a Stop hook
//! whose transcript grew by 100 KB since the last anchor, on a 50 MB and on
//! a 0.5 MB transcript, against `nd7 record` of a hook that anchors nothing
//! (PreToolUse). Whole processes, round-robin (the transcripts grow between
//! runs, outside the timing), medians and their ratios. Then the worst single
//! hook: the first anchor of a whole 50 MB transcript (a resumed session),
//! the time SessionEnd's 1.5 s must cover.
//!
//! usage: transcript_bench ND7 RUNS WORKDIR

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const GROWTH: usize = 100 * 1000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [nd7, runs, work] = &args[..] else {
        return Err("usage: transcript_bench ND7 RUNS WORKDIR".into());
    };
    let runs: usize = runs.parse()?;
    let work = PathBuf::from(work);
    let home = work.join("home");
    let cwd = home.join("proj");
    let key: String = cwd
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let projects = home.join(".claude/projects").join(key);
    std::fs::create_dir_all(&projects)?;
    let env = Env {
        nd7: nd7.clone(),
        home: home.clone(),
        state: work.join("state"),
    };
    let big = Session::new(&projects, &cwd, "big-50mb", 50_000_000)?;
    let small = Session::new(&projects, &cwd, "small-500kb", 500_000)?;
    let plain = Session::new(&projects, &cwd, "plain", 0)?;
    // First anchors: the whole file, once.
    let first_big = env.record(&big.payload("Stop"))?;
    env.record(&small.payload("Stop"))?;
    println!(
        "first anchor of the whole 50 MB transcript: {:.1} ms",
        first_big.as_secs_f64() * 1e3
    );

    let mut times: [Vec<Duration>; 3] = Default::default();
    let warmup = runs / 10 + 1;
    let pre = plain.payload("PreToolUse");
    for round in 0..warmup + runs {
        let t0 = env.record(&pre)?;
        big.grow(GROWTH)?;
        let t1 = env.record(&big.payload("Stop"))?;
        small.grow(GROWTH)?;
        let t2 = env.record(&small.payload("Stop"))?;
        if round >= warmup {
            times[0].push(t0);
            times[1].push(t1);
            times[2].push(t2);
        }
    }
    let names = [
        "nd7 record, PreToolUse (anchors nothing)",
        "nd7 record, Stop, 50 MB transcript + 100 KB",
        "nd7 record, Stop, 0.5 MB transcript + 100 KB",
    ];
    let medians: Vec<f64> = times.iter_mut().map(|t| percentile(t, 50.0)).collect();
    for (i, name) in names.iter().enumerate() {
        println!(
            "{:>9.1} µs median  {:>9.1} p10  {:>9.1} p90  ratio {:.3}  {name}",
            medians[i],
            percentile(&mut times[i], 10.0),
            percentile(&mut times[i], 90.0),
            medians[i] / medians[0],
        );
    }
    println!(
        "50 MB ÷ 0.5 MB transcript, same growth: {:.3}",
        medians[1] / medians[2]
    );
    // The worst single hook: 50 MB never anchored before (a resumed session).
    let mut worst = Vec::new();
    for i in 0..5 {
        let fresh = Session::new(&projects, &cwd, &format!("fresh-{i}"), 50_000_000)?;
        worst.push(env.record(&fresh.payload("SessionEnd"))?);
    }
    println!(
        "SessionEnd anchoring a whole 50 MB transcript for the first time: {:.1} ms median of 5",
        percentile(&mut worst, 50.0) / 1e3
    );
    let anchors = std::fs::read_to_string(env.state.join("nd7/sessions/big-50mb/events.ndjson"))?
        .lines()
        .filter(|l| l.contains("\"kind\":\"transcript_anchor\""))
        .count();
    println!(
        "anchors in the 50 MB session's log: {anchors} (expected {})",
        warmup + runs + 1
    );
    Ok(())
}

struct Env {
    nd7: String,
    home: PathBuf,
    state: PathBuf,
}

impl Env {
    fn record(&self, payload: &[u8]) -> Result<Duration, Box<dyn std::error::Error>> {
        let start = Instant::now();
        let mut child = Command::new(&self.nd7)
            .arg("record")
            .env("HOME", &self.home)
            .env("XDG_STATE_HOME", &self.state)
            .env_remove("CLAUDE_CONFIG_DIR")
            .env_remove("ND7_TRANSCRIPT_LIMITS")
            .env_remove("ND7_RUN")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()?;
        child.stdin.take().ok_or("stdin")?.write_all(payload)?;
        let status = child.wait()?;
        let elapsed = start.elapsed();
        if !status.success() {
            return Err(format!("nd7 record exited with {status}").into());
        }
        Ok(elapsed)
    }
}

struct Session {
    id: String,
    cwd: PathBuf,
    transcript: PathBuf,
}

impl Session {
    fn new(projects: &Path, cwd: &Path, id: &str, size: usize) -> std::io::Result<Session> {
        let s = Session {
            id: id.to_string(),
            cwd: cwd.to_path_buf(),
            transcript: projects.join(format!("{id}.jsonl")),
        };
        if size > 0 {
            std::fs::write(&s.transcript, lines(size))?;
        }
        Ok(s)
    }

    fn grow(&self, by: usize) -> std::io::Result<()> {
        std::fs::OpenOptions::new()
            .append(true)
            .open(&self.transcript)?
            .write_all(&lines(by))
    }

    fn payload(&self, event: &str) -> Vec<u8> {
        let tool = if event == "PreToolUse" {
            r#","tool_name":"Bash","tool_input":{"command":"cargo test --workspace","description":"Run the tests"},"tool_use_id":"toolu_01""#
        } else {
            ""
        };
        format!(
            r#"{{"session_id":"{}","transcript_path":"{}","cwd":"{}","permission_mode":"default","hook_event_name":"{event}"{tool}}}"#,
            self.id,
            self.transcript.display(),
            self.cwd.display()
        )
        .into_bytes()
    }
}

/// About `size` bytes of transcript-like JSON lines.
fn lines(size: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(size + 1024);
    let mut n = 0u64;
    while out.len() < size {
        n += 1;
        let _ = writeln!(
            out,
            r#"{{"type":"assistant","uuid":"{n:08x}-0000-4000-8000-000000000000","message":{{"content":[{{"type":"text","text":"{}"}}]}}}}"#,
            "lorem ipsum dolor sit amet ".repeat(30)
        );
    }
    out.truncate(size);
    out
}

fn percentile(times: &mut [Duration], p: f64) -> f64 {
    times.sort();
    let idx = ((times.len() - 1) as f64 * p / 100.0).round() as usize;
    times[idx].as_secs_f64() * 1e6
}
