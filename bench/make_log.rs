//! Writes a session log of N entries directly, for benchmarks: the same
//! entries `nd7 record` would write, built in memory rather than one process
//! per entry. usage: make_log SESSIONS_DIR SESSION_ID N PAYLOAD_FILE

use std::io::Write;

use nd7_core::chain::{self, Cursor, Head};
use nd7_core::hook::{Event, Invocation, Payload};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, sessions, session, n, payload] = &args[..] else {
        return Err("usage: make_log SESSIONS_DIR SESSION_ID N PAYLOAD_FILE".into());
    };
    let n: u64 = n.parse()?;
    let text = std::fs::read_to_string(payload)?;
    let mut members: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&text)?;
    members.insert("session_id".into(), session.clone().into());
    let dir = std::path::Path::new(sessions).join(session);
    std::fs::create_dir_all(&dir)?;
    let mut out = std::io::BufWriter::with_capacity(
        1 << 20,
        std::fs::File::create(dir.join("events.ndjson"))?,
    );
    let mut cursor = Cursor::start(session);
    for i in 0..n {
        let invocation = Invocation {
            ts: 1_795_000_000_000_000_000 + i * 1_000_000,
            host: "bench".into(),
            hook_ppid: Some(1234),
            cwd: None,
        };
        let event = Event::new(&invocation, Payload::from_members(members.clone())?);
        let line = chain::render_entry(&event, &cursor);
        let stated = chain::read_stated(&line[..line.len() - 1])?;
        out.write_all(&line)?;
        cursor = Cursor {
            next_seq: stated.seq + 1,
            prev: stated.hash,
        };
    }
    out.flush()?;
    if n > 0 {
        let head = Head {
            seq: n - 1,
            hash: cursor.prev,
        };
        std::fs::write(dir.join("head"), head.render())?;
    }
    std::fs::write(dir.join("lock"), b"")?;
    Ok(())
}
