//! OpenAI's Codex CLI as a second agent: its hook payloads ([`hook`], pure)
//! and its rollout file ([`rollout`]), from which `nd7 record --agent codex`
//! takes what the payloads leave out: the CLI's version, and how each tool
//! call ended (Codex has no failure event, and PostToolUse carries no exit
//! status). docs/agents/codex.md says what is recorded and what is not.

pub use nd7_format::codex_hook as hook;
pub mod rollout;
pub mod run;

use std::path::Path;
use std::time::{Duration, Instant};

use crate::hook::{Event, Invocation, Payload};
use hook::{AgentInfo, CodexEvent, Facts, Outcome, Typed};
use rollout::{Rollout, RolloutError};

/// How long a PostToolUse record waits, in all, for the call's completed
/// item to reach the rollout. Codex 0.171.0 writes it before it runs the
/// hook; this covers a write still on its way.
pub const OUTCOME_WAIT: Duration = Duration::from_millis(200);

/// Pause between two looks at the rollout while waiting.
const OUTCOME_POLL: Duration = Duration::from_millis(25);

/// The event a Codex payload becomes, with what the rollout adds: the
/// rollout under Codex's home as the hook's environment names it.
/// `first_entry` says the session's log has no entry yet.
pub fn event(invocation: &Invocation, payload: Payload, first_entry: bool) -> Event {
    let home = rollout::codex_home_from_env();
    event_in(home.as_deref(), invocation, payload, first_entry)
}

/// [`event`] with Codex's home given: `None` when it cannot be told (then
/// no rollout is opened, and the entry says so).
pub fn event_in(
    home: Option<&Path>,
    invocation: &Invocation,
    payload: Payload,
    first_entry: bool,
) -> Event {
    let facts = facts(home, &payload, first_entry);
    hook::event(invocation, payload, facts)
}

/// Reads from the rollout what `payload` needs: the agent's version for
/// SessionStart and for the first entry of a log, a call's outcome for
/// PostToolUse. Every failure becomes a reason in the entry, never an error.
pub fn facts(home: Option<&Path>, payload: &Payload, first_entry: bool) -> Facts {
    let typed = Typed::of(payload);
    let rollout_path = payload.str_member("transcript_path");
    let event = typed.known();
    let mut facts = Facts::default();
    if first_entry || matches!(event, Some(CodexEvent::SessionStart(_))) {
        facts.agent = Some(agent(home, rollout_path, &payload.session_id));
    }
    if let Some(CodexEvent::PostToolUse(post)) = event {
        facts.outcome = Some(match (&post.tool_use_id, rollout_path) {
            (None, _) => Outcome::Unknown("the payload has no tool_use_id".into()),
            (Some(_), None) => Outcome::Unknown("the payload names no rollout".into()),
            (Some(id), Some(path)) => outcome(home, &payload.session_id, path, id, OUTCOME_WAIT),
        });
    }
    facts
}

/// Session `session_id`'s rollout at `path` (the payload's word) below
/// Codex's `home`, as [`Rollout::open`] takes it.
fn open(home: Option<&Path>, session_id: &str, path: &str) -> Result<Rollout, RolloutError> {
    Rollout::open(home.ok_or(RolloutError::NoHome)?, session_id, path)
}

fn agent(home: Option<&Path>, path: Option<&str>, session_id: &str) -> AgentInfo {
    let unknown = |why: String| AgentInfo {
        version: None,
        originator: None,
        why: Some(why),
    };
    let Some(path) = path else {
        return unknown("the payload names no rollout".into());
    };
    match open(home, session_id, path).and_then(|r| r.first_line()) {
        Ok(line) => rollout::session_meta(&line, session_id),
        Err(e) => unknown(e.to_string()),
    }
}

/// The outcome of call `call_id` in session `session_id`'s rollout (at
/// `path`, the payload's word, checked by [`Rollout::open`]), looking again
/// every [`OUTCOME_POLL`] until `wait` has passed while the rollout has no
/// completed item for it (yet). A rollout that cannot be read, or whose
/// item lies beyond the bound, is not looked at again.
pub fn outcome(
    home: Option<&Path>,
    session_id: &str,
    path: &str,
    call_id: &str,
    wait: Duration,
) -> Outcome {
    let deadline = Instant::now() + wait;
    loop {
        let found = match open(home, session_id, path) {
            Ok(r) => rollout::outcome(&r, call_id),
            Err(e) => return Outcome::Unknown(e.to_string()),
        };
        match found {
            Some(outcome) => return outcome,
            None if Instant::now() >= deadline => {
                return Outcome::Unknown(rollout::NO_COMPLETED_ITEM.into());
            }
            None => std::thread::sleep(OUTCOME_POLL),
        }
    }
}
