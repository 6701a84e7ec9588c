//! The entry a hook's payload becomes, for whoever appends it: `nd7 record`
//! itself ([`super`]), or `nd7 run`'s door for a hook inside the floor
//! ([`crate::run_log::RunLog::hook`]). Below both, so that the run's log does
//! not call back up into the command: which agent's payload it is decides
//! how the event is built (its adapter, [`crate::agents`]), and a payload
//! too large to store keeps only its glimpse, size and fingerprint.

pub use crate::agents::Builder;
use crate::hook::{Agent, Event, Glimpse, Invocation, Payload, PayloadError};
use crate::session_log;

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
        let event = crate::agents::adapter(agent).event(invocation, payload, builder)?;
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
