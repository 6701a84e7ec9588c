//! The entry a hook's payload becomes, for whoever appends it: `nd7 record`
//! itself ([`super`]), or `nd7 run`'s door for a hook inside the floor
//! ([`crate::run_log::RunLog::hook`]). Below both, so that the run's log does
//! not call back up into the command: which agent's payload it is decides
//! how the event is built ([`crate::hook`], [`crate::codex`]), and a payload
//! too large to store keeps only its glimpse, size and fingerprint.

use std::path::Path;

use crate::hook::{Agent, Event, Glimpse, Invocation, Payload, PayloadError};
use crate::session_log::{self, SessionLog};

/// Payloads above this size are recorded by size and fingerprint only. The
/// rest of the entry needs room under [`crate::chain::MAX_ENTRY_BYTES`].
pub const MAX_STORED_PAYLOAD: usize = crate::chain::MAX_ENTRY_BYTES - 64 * 1024;

/// Why a payload did not become an entry, or (at the door) was not
/// appended. `nd7 record` reports it as its own error
/// ([`super::RecordError`]'s `Payload` and `Log`), word for word.
#[derive(Debug, thiserror::Error)]
pub enum EntryError {
    #[error(transparent)]
    Payload(#[from] PayloadError),
    #[error(transparent)]
    Log(#[from] session_log::Error),
}

/// Who builds a hook's entry, which decides where the agent's files are
/// looked for.
#[derive(Clone, Copy, Debug)]
pub enum Builder<'a> {
    /// `nd7 record` itself, appending to the log under this sessions
    /// directory: Codex's home from the hook's environment.
    Recorder(&'a Path),
    /// `nd7 run`'s door, outside the floor, for a hook inside it: Codex's
    /// rollout is read only below the Codex home `nd7 run` fixed when it
    /// started (the one the door anchors), never where the hook's
    /// environment says; `None` (none was fixed) reads nothing.
    Door { codex_home: Option<&'a Path> },
}

/// The event a payload from `agent`'s hooks becomes, and `Some(bytes)` when
/// it was too large to store and only its size and fingerprint were kept.
/// Either way a Codex rollout is opened only where Codex's layout puts the
/// payload's session's, through `safe_file` and bounded
/// ([`crate::codex::rollout::Rollout::open`]).
pub fn event_for(
    agent: Agent,
    invocation: &Invocation,
    input: &[u8],
    builder: Builder<'_>,
) -> Result<(Event, Option<usize>), EntryError> {
    let (mut event, omitted) = if input.len() > MAX_STORED_PAYLOAD {
        (oversized(invocation, input)?, Some(input.len()))
    } else {
        let payload = Payload::parse(input)?;
        let event = match (agent, builder) {
            (Agent::ClaudeCode, _) => Event::new(invocation, payload),
            (Agent::Codex, Builder::Recorder(dir)) => {
                // No log yet: this entry opens it, and names the agent.
                let log = SessionLog::new(dir, &payload.session_id)?;
                let first = std::fs::metadata(log.events_path()).map_or(true, |m| m.len() == 0);
                crate::codex::event(invocation, payload, first)
            }
            // Built by `nd7 run`, outside the sandbox, for a hook inside it:
            // the run's chain opens with `run_start`, and SessionStart names
            // the agent.
            (Agent::Codex, Builder::Door { codex_home }) => {
                crate::codex::event_in(codex_home, invocation, payload, false)
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
    Ok((event, omitted))
}

/// What is kept of a payload too large to store: its few placing members,
/// its size and its BLAKE3.
pub fn glimpse(input: &[u8]) -> Result<(Glimpse, u64, String), EntryError> {
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
    let fingerprint = blake3::hash(input).to_hex().to_string();
    Ok((glimpse, input.len() as u64, fingerprint))
}

fn oversized(invocation: &Invocation, input: &[u8]) -> Result<Event, EntryError> {
    let (glimpse, bytes, fingerprint) = glimpse(input)?;
    Ok(Event::omitted(invocation, &glimpse, bytes, &fingerprint))
}
