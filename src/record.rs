//! `nd7 record`: one hook payload in, one entry appended.
//!
//! The recorder must never change what the agent does: Claude Code reads a
//! hook's standard output as instructions and treats exit status 2 as a
//! block. So the binary exits 0 whatever happens here and prints nothing to
//! standard output; this module only reports what went wrong, for one line on
//! standard error. A failed record leaves the log as it was.

use std::io::Read;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::hook::{Agent, Event, Glimpse, Invocation, Payload, PayloadError};
use crate::session_log::{self, Appended, SessionLog};

/// Payloads above this size are recorded by size and fingerprint only. The
/// rest of the entry needs room under [`crate::chain::MAX_ENTRY_BYTES`].
pub const MAX_STORED_PAYLOAD: usize = crate::chain::MAX_ENTRY_BYTES - 64 * 1024;

/// Standard input beyond this is not read into memory at all.
pub const MAX_READ: u64 = 1 << 30;

impl Invocation {
    /// The recorder's facts, taken now: call it before reading the payload.
    pub fn now() -> Invocation {
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        let host = rustix::system::uname()
            .nodename()
            .to_string_lossy()
            .into_owned();
        let cwd = std::env::current_dir()
            .ok()
            .map(|p| p.to_string_lossy().into_owned());
        Invocation {
            ts,
            host,
            hook_ppid: Some(std::os::unix::process::parent_id()),
            cwd,
        }
    }
}

/// Why a payload was not recorded.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("cannot read standard input: {0}")]
    Stdin(#[source] std::io::Error),
    #[error("the payload is larger than {MAX_READ} bytes")]
    TooLargeToRead,
    #[error(transparent)]
    Payload(#[from] PayloadError),
    #[error(transparent)]
    Log(#[from] session_log::Error),
}

/// What was recorded.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub session_id: String,
    pub appended: Appended,
    /// `Some(bytes)` when the payload was too large and only its size and
    /// fingerprint were stored.
    pub omitted: Option<usize>,
}

/// Reads all of `input`, up to [`MAX_READ`] bytes.
pub fn read_payload(input: impl Read) -> Result<Vec<u8>, RecordError> {
    let mut buf = Vec::new();
    let mut limited = input.take(MAX_READ + 1);
    limited.read_to_end(&mut buf).map_err(RecordError::Stdin)?;
    if buf.len() as u64 > MAX_READ {
        // Drain the rest so the writer does not see a broken pipe.
        let _ = std::io::copy(&mut limited.into_inner(), &mut std::io::sink());
        return Err(RecordError::TooLargeToRead);
    }
    Ok(buf)
}

/// Records one Claude Code payload into its session's log under `sessions_dir`.
pub fn record(
    invocation: &Invocation,
    input: &[u8],
    sessions_dir: &Path,
) -> Result<Recorded, RecordError> {
    record_as(Agent::ClaudeCode, invocation, input, sessions_dir)
}

/// Records one payload from `agent`'s hooks into its session's log.
pub fn record_as(
    agent: Agent,
    invocation: &Invocation,
    input: &[u8],
    sessions_dir: &Path,
) -> Result<Recorded, RecordError> {
    let (mut event, omitted) = if input.len() > MAX_STORED_PAYLOAD {
        (oversized(invocation, input)?, Some(input.len()))
    } else {
        let payload = Payload::parse(input)?;
        let event = match agent {
            Agent::ClaudeCode => Event::new(invocation, payload),
            Agent::Codex => {
                // No log yet: this entry opens it, and names the agent.
                let log = SessionLog::new(sessions_dir, &payload.session_id)?;
                let first = std::fs::metadata(log.events_path()).map_or(true, |m| m.len() == 0);
                crate::codex::event(invocation, payload, first)
            }
        };
        if event.body.get().len() > MAX_STORED_PAYLOAD {
            // Derived members (a long command split into argv) can push a
            // payload that fit over the limit.
            (oversized(invocation, input)?, Some(input.len()))
        } else {
            (event, None)
        }
    };
    event.source = agent.source();
    let log = SessionLog::new(sessions_dir, &event.session)?;
    let appended = log.append(&event)?;
    Ok(Recorded {
        session_id: event.session,
        appended,
        omitted,
    })
}

fn oversized(invocation: &Invocation, input: &[u8]) -> Result<Event, RecordError> {
    if input.iter().all(u8::is_ascii_whitespace) {
        return Err(PayloadError::Empty.into());
    }
    let glimpse: Glimpse = serde_json::from_slice(input).map_err(|e| {
        if e.is_data() {
            PayloadError::NoSessionId
        } else {
            PayloadError::Json(e)
        }
    })?;
    let fingerprint = blake3::hash(input).to_hex();
    Ok(Event::omitted(
        invocation,
        &glimpse,
        input.len() as u64,
        fingerprint.as_str(),
    ))
}
