//! Writes a session log of N entries directly, for benchmarks: the same
//! entries `nd7 record` would write, built in memory rather than one process
//! per entry. usage: make_log SESSIONS_DIR SESSION_ID N PAYLOAD_FILE [TEXT_FILE]
//!
//! With TEXT_FILE, each entry's payload also carries the next 2 KiB of that
//! file as `tool_response.stdout`, so the log compresses like real sessions
//! (file contents and command output) rather than like one payload repeated.

use std::io::Write;

use nd7_core::chain::{self, Cursor, Head};
use nd7_core::hook::{Event, Invocation, Payload};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (sessions, session, n, payload, text_file) = match &args[..] {
        [_, s, id, n, p] => (s, id, n, p, None),
        [_, s, id, n, p, t] => (s, id, n, p, Some(t)),
        _ => {
            return Err(
                "usage: make_log SESSIONS_DIR SESSION_ID N PAYLOAD_FILE [TEXT_FILE]".into(),
            );
        }
    };
    let filler = match text_file {
        Some(t) => String::from_utf8_lossy(&std::fs::read(t)?).into_owned(),
        None => String::new(),
    };
    let mut at = 0;
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
        let mut members = members.clone();
        if !filler.is_empty() {
            let mut end = (at + 2048).min(filler.len());
            while !filler.is_char_boundary(end) {
                end -= 1;
            }
            members.insert(
                "tool_response".into(),
                serde_json::json!({"stdout": &filler[at..end]}),
            );
            at = if end >= filler.len() { 0 } else { end };
        }
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
