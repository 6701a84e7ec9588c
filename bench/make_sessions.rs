//! Writes N small sessions directly, for `nd7 sessions` benchmarks: each is
//! the real payloads of FIXTURE (one Claude Code session), under its own id,
//! project and start time, sealed as `nd7 record` seals them.
//! usage: make_sessions SESSIONS_DIR N FIXTURE

use std::io::Write;

use nd7_core::chain::{self, Cursor, Head};
use nd7_core::hook::{Event, Invocation, Payload};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, sessions, n, fixture] = &args[..] else {
        return Err("usage: make_sessions SESSIONS_DIR N FIXTURE".into());
    };
    let n: u64 = n.parse()?;
    let payloads: Vec<serde_json::Map<String, serde_json::Value>> =
        std::fs::read_to_string(fixture)?
            .lines()
            .map(serde_json::from_str)
            .collect::<Result<_, _>>()?;
    for i in 0..n {
        let id = format!("{:08x}-bench-{i:06}", i.wrapping_mul(2_654_435_761) as u32);
        let dir = std::path::Path::new(sessions).join(&id);
        std::fs::create_dir_all(&dir)?;
        let mut out = std::io::BufWriter::new(std::fs::File::create(dir.join("events.ndjson"))?);
        let mut cursor = Cursor::start(&id);
        for (k, members) in payloads.iter().enumerate() {
            let mut members = members.clone();
            members.insert("session_id".into(), id.clone().into());
            members.insert("cwd".into(), format!("/home/dev/proj-{}", i % 40).into());
            let invocation = Invocation {
                // One session an hour, back from 2026-11-30.
                ts: 1_796_000_000_000_000_000 - i * 3_600_000_000_000 + k as u64 * 1_000_000_000,
                host: "bench".into(),
                hook_ppid: Some(1234),
                cwd: None,
            };
            let event = Event::new(&invocation, Payload::from_members(members)?);
            let line = chain::render_entry(&event, &cursor);
            let stated = chain::read_stated(&line[..line.len() - 1])?;
            out.write_all(&line)?;
            cursor = Cursor {
                next_seq: stated.seq + 1,
                prev: stated.hash,
            };
        }
        out.flush()?;
        let head = Head {
            seq: cursor.next_seq - 1,
            hash: cursor.prev,
        };
        std::fs::write(dir.join("head"), head.render())?;
        std::fs::write(dir.join("lock"), b"")?;
    }
    Ok(())
}
