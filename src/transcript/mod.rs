//! An agent's own transcript, anchored in the session's chain.
//!
//! Claude Code writes the whole conversation to a plain JSONL file
//! (`~/.claude/projects/<project key>/<session>.jsonl`, and one per subagent
//! beside it), Codex to its rollout file
//! (`~/.codex/sessions/YYYY/MM/DD/rollout-…-<session>.jsonl`); anyone, the
//! agent included, can rewrite either. At the hooks that end a stretch of
//! work nd7 reads what the file has grown by and appends a
//! `transcript_anchor` entry: how long the file was and the BLAKE3 of its
//! bytes up to there. `nd7 verify --transcript` later holds the file against
//! every anchor (docs/log-format.md, "Transcript anchors"). Both agents'
//! files go through the same entries, state, checks and shipping; only
//! where a file may lie differs ([`layout`], [`codex_layout`]).
//!
//! - [`prefix`]: the BLAKE3 state of a prefix, saved between hooks, so each
//!   byte is hashed once. Pure.
//! - [`layout`]: where Claude Code puts a session's files, and which places
//!   a reader of anchors may open. Pure.
//! - [`codex_layout`]: where Codex puts a session's rollout. Pure.
//! - this module: the entries' kinds and bodies, the bounds, what a payload
//!   says about its transcript, the state's shape. Pure.
//! - [`anchor`]: the anchoring itself, on real files, for `nd7 record` and
//!   for `nd7 run`'s door.
//! - [`check`]: `nd7 verify --transcript`.
//! - [`ship`]: the anchored bytes sent to the vault with the session.
//! - [`pull`]: `nd7 admin pull` putting them back together and checking them.

pub mod anchor;
pub mod check;
pub mod codex_layout;
pub mod layout;
pub mod place;
pub mod prefix;
pub mod pull;
pub mod ship;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::hook::Agent;
use crate::safe_file::Identity;

/// An anchor: the transcript's first `bytes` bytes have BLAKE3 `blake3`.
pub const ANCHOR: &str = "transcript_anchor";
/// Something nd7 could not anchor, and why: a bound, a refused file, a path
/// that is not where the layout puts it.
pub const GAP: &str = "transcript_gap";
/// The file no longer holds what was anchored (replaced, truncated,
/// rewritten, removed); anchoring starts again from its first byte.
pub const BREAK: &str = "transcript_break";

/// The `source` of the entries `nd7 record` writes about a transcript it
/// read itself (outside `nd7 run`): nd7's reading, in a process the agent's
/// hooks start. Under `nd7 run` they are written by `nd7 run` and carry
/// [`crate::run_entry::SOURCE`].
pub const SOURCE: &str = "record:nd7";

/// The hook events at which nd7 anchors: the ends of a stretch of work,
/// and the events that bound how much an abrupt end can leave unanchored.
pub const EVENTS: &[&str] = &[
    "SessionStart",
    "UserPromptSubmit",
    "PostToolUse",
    "PostToolUseFailure",
    "Stop",
    "StopFailure",
    "SubagentStop",
    "PreCompact",
    "PostCompact",
    "SessionEnd",
    // Codex's, at an interrupted turn.
    "Interrupt",
];

/// The bounds on anchoring. Set with `ND7_TRANSCRIPT_LIMITS`
/// (`hook_bytes=N,hook_ms=N,session_bytes=N,files=N`, any subset); under
/// `nd7 run`, `nd7 run`'s own environment decides, once, at its start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Bytes one hook reads, over all the files it anchors.
    pub hook_bytes: u64,
    /// Milliseconds one hook spends anchoring before it stops (checked
    /// between 1 MiB reads).
    pub hook_ms: u64,
    /// Bytes read for one log, over its whole life.
    pub session_bytes: u64,
    /// Transcript files one log anchors (the session's own and its
    /// subagents').
    pub files: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            hook_bytes: 64 << 20,
            hook_ms: 400,
            session_bytes: 1 << 30,
            files: 256,
        }
    }
}

/// The variable [`Limits::from_env`] reads.
pub const LIMITS_VARIABLE: &str = "ND7_TRANSCRIPT_LIMITS";

impl Limits {
    /// The defaults, changed by `text` (`name=value` pairs, comma-separated).
    /// Returns the limits and the pairs it could not read.
    pub fn parse(text: &str) -> (Limits, Vec<String>) {
        let mut limits = Limits::default();
        let mut bad = Vec::new();
        for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let parsed = pair
                .split_once('=')
                .and_then(|(name, value)| Some((name.trim(), value.trim().parse::<u64>().ok()?)));
            match parsed {
                Some(("hook_bytes", v)) => limits.hook_bytes = v,
                Some(("hook_ms", v)) => limits.hook_ms = v,
                Some(("session_bytes", v)) => limits.session_bytes = v,
                Some(("files", v)) => limits.files = v,
                _ => bad.push(pair.to_string()),
            }
        }
        (limits, bad)
    }

    /// [`Limits::parse`] of `$ND7_TRANSCRIPT_LIMITS`, or the defaults.
    pub fn from_env() -> Limits {
        std::env::var(LIMITS_VARIABLE).map_or_else(|_| Limits::default(), |t| Limits::parse(&t).0)
    }
}

/// What a hook's payload says about its transcript: all of it the agent's
/// word, checked against the layout before anything is read.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Facts {
    /// Whose payload it is: where its transcript may lie follows from it.
    #[serde(skip, default = "claude_code")]
    pub agent: Agent,
    pub session_id: String,
    #[serde(default)]
    pub hook_event_name: Option<String>,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub transcript_path: Option<String>,
    #[serde(default)]
    pub agent_id: Option<String>,
    #[serde(default)]
    pub agent_transcript_path: Option<String>,
}

fn claude_code() -> Agent {
    Agent::ClaudeCode
}

impl Facts {
    /// The facts of `agent`'s payload at which nd7 anchors; `None` for any
    /// other event, or a payload that does not carry them as strings.
    pub fn of(payload: &[u8], agent: Agent) -> Option<Facts> {
        let mut facts: Facts = serde_json::from_slice(payload).ok()?;
        facts.agent = agent;
        let event = facts.hook_event_name.as_deref()?;
        EVENTS.contains(&event).then_some(facts)
    }

    /// Whether every file of the session should be anchored now.
    pub fn ends_session(&self) -> bool {
        self.hook_event_name.as_deref() == Some("SessionEnd")
    }
}

/// Which transcript an entry is about.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Which {
    /// The agent's session.
    pub session_id: String,
    /// The subagent, for a subagent's file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// The agent's own directory (Claude Code's configuration directory,
    /// Codex's home), followed as configured.
    pub root: String,
    /// The file, below `root`, reached without following any link.
    pub path: String,
}

fn with_which(which: &Which, mut body: serde_json::Map<String, Value>) -> Value {
    let mut out = serde_json::Map::new();
    out.insert("session_id".into(), json!(which.session_id));
    if let Some(agent) = &which.agent_id {
        out.insert("agent_id".into(), json!(agent));
    }
    out.insert("root".into(), json!(which.root));
    out.insert("path".into(), json!(which.path));
    out.append(&mut body);
    Value::Object(out)
}

/// The body of a `transcript_anchor` entry.
pub fn anchor_body(
    which: &Which,
    bytes: u64,
    blake3: &blake3::Hash,
    from: u64,
    generation: u32,
    identity: Identity,
) -> Value {
    let body = json!({
        "bytes": bytes,
        "blake3": blake3.to_hex().as_str(),
        "from": from,
        "generation": generation,
        "dev": identity.dev,
        "ino": identity.ino,
    });
    with_which(which, into_map(body))
}

/// Why part of a transcript was not anchored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GapReason {
    /// The hook's byte budget ran out; the next anchoring hook goes on.
    HookBytes,
    /// The hook's time ran out; the next anchoring hook goes on.
    HookTime,
    /// The log's byte budget is spent: nothing more is anchored.
    SessionBytes,
    /// The log anchors as many files as it may: this one is not anchored.
    Files,
    /// The file is a link, not a regular file, or has a second name.
    Refused,
    /// The file could not be read.
    Unreadable,
    /// The payload named a file that is not where the layout puts it.
    Path,
}

impl GapReason {
    pub fn as_str(self) -> &'static str {
        match self {
            GapReason::HookBytes => "hook_bytes",
            GapReason::HookTime => "hook_time",
            GapReason::SessionBytes => "session_bytes",
            GapReason::Files => "files",
            GapReason::Refused => "refused",
            GapReason::Unreadable => "unreadable",
            GapReason::Path => "path",
        }
    }
}

/// The body of a `transcript_gap` entry: `anchored` is how much of the file
/// is anchored (its last anchor), `size` how long it was seen to be.
pub fn gap_body(
    which: &Which,
    reason: GapReason,
    detail: &str,
    anchored: u64,
    size: Option<u64>,
) -> Value {
    let body = json!({
        "reason": reason.as_str(),
        "detail": detail,
        "anchored": anchored,
        "size": size,
    });
    with_which(which, into_map(body))
}

/// What a transcript was found to be, against its last anchor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found {
    /// Another file (or no regular file) is at its path.
    Replaced,
    /// Shorter than what was anchored.
    Truncated,
    /// Its last anchored kilobyte holds other bytes.
    Rewritten,
    /// Nothing is at its path any more.
    Removed,
}

impl Found {
    pub fn as_str(self) -> &'static str {
        match self {
            Found::Replaced => "replaced",
            Found::Truncated => "truncated",
            Found::Rewritten => "rewritten",
            Found::Removed => "removed",
        }
    }
}

/// The body of a `transcript_break` entry. `anchored`/`blake3` are the last
/// anchor's, `generation` the one anchoring starts again with.
#[allow(clippy::too_many_arguments)]
pub fn break_body(
    which: &Which,
    found: Found,
    detail: &str,
    anchored: u64,
    blake3: &str,
    size: Option<u64>,
    was: Option<Identity>,
    generation: u32,
) -> Value {
    let body = json!({
        "found": found.as_str(),
        "detail": detail,
        "anchored": anchored,
        "blake3": blake3,
        "size": size,
        "was": was.map(|i| json!({"dev": i.dev, "ino": i.ino})),
        "generation": generation,
    });
    with_which(which, into_map(body))
}

fn into_map(value: Value) -> serde_json::Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_read_any_subset_and_name_what_they_cannot() {
        let (l, bad) = Limits::parse("hook_bytes=10, files=2,nonsense,hook_ms=x");
        assert_eq!(l.hook_bytes, 10);
        assert_eq!(l.files, 2);
        assert_eq!(l.hook_ms, Limits::default().hook_ms);
        assert_eq!(bad, ["nonsense", "hook_ms=x"]);
    }

    #[test]
    fn facts_are_taken_only_at_anchoring_events() {
        let stop = br#"{"session_id":"s","transcript_path":"/t","cwd":"/p","hook_event_name":"Stop","x":{"deep":[1,2]}}"#;
        let facts = Facts::of(stop, Agent::ClaudeCode).expect("Stop anchors");
        assert_eq!(facts.transcript_path.as_deref(), Some("/t"));
        let pre = br#"{"session_id":"s","hook_event_name":"PreToolUse"}"#;
        assert_eq!(Facts::of(pre, Agent::Codex), None);
        let odd = br#"{"session_id":"s","hook_event_name":"Stop","cwd":5}"#;
        assert_eq!(Facts::of(odd, Agent::ClaudeCode), None);
    }
}
