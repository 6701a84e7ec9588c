//! What every view says about a session besides its timeline: who, where,
//! when, the chain's state and whether it is shipped; and the same as the
//! JSON scripts get. Pure.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::summary::{Confinement, Summary};
use super::when;

/// What a clean chain does not prove, said wherever a verdict is shown.
pub const CAVEAT: [&str; 2] = [
    "the chain checks itself; it is not third-party evidence: anyone who can write the session's directory can rewrite the whole chain, head included",
    "entries record intent, what the agent said it would do and reported back, not effect, what actually ran",
];

/// The chain's state, as far as it is known. The index stores the two
/// verdicts that hold while the log does not change, tagged by `state`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Chain {
    /// Not verified since the log last changed.
    #[serde(skip)]
    NotChecked,
    Clean {
        entries: u64,
        /// The first 16 hex digits of the last entry's hash.
        head: Option<String>,
        /// About `head`, when it is missing or one behind.
        note: Option<String>,
    },
    Broken {
        detail: String,
    },
    /// The log could not be read to check it.
    #[serde(skip)]
    Unreadable {
        detail: String,
    },
}

impl Chain {
    /// One word for a list.
    pub fn word(&self) -> &'static str {
        match self {
            Chain::NotChecked => "unchecked",
            Chain::Clean { .. } => "clean",
            Chain::Broken { .. } => "BROKEN",
            Chain::Unreadable { .. } => "unreadable",
        }
    }

    pub fn json(&self) -> Value {
        match self {
            Chain::NotChecked => json!({"state": "not_checked"}),
            Chain::Clean {
                entries,
                head,
                note,
            } => json!({"state": "clean", "entries": entries, "head": head, "note": note,
                        "caveat": CAVEAT}),
            Chain::Broken { detail } => json!({"state": "broken", "detail": detail}),
            Chain::Unreadable { detail } => json!({"state": "unreadable", "detail": detail}),
        }
    }
}

/// How far the session is shipped to the vault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Shipped {
    /// This machine is not enrolled with a vault.
    NotEnrolled,
    /// A log outside the state directory (one pulled from a vault, a copy).
    NotHere,
    /// The number of entries the vault acknowledged (0 for none).
    Entries(u64),
    /// `shipped` exists but could not be read.
    Unreadable,
}

impl Shipped {
    /// A few words, given how many entries the log has.
    pub fn words(&self, entries: u64) -> String {
        match self {
            Shipped::NotEnrolled => "not enrolled".into(),
            Shipped::NotHere => "-".into(),
            Shipped::Entries(0) => "no".into(),
            Shipped::Entries(n) if *n >= entries => "yes".into(),
            Shipped::Entries(n) => format!("{n}/{entries}"),
            Shipped::Unreadable => "unreadable".into(),
        }
    }

    pub fn json(&self) -> Value {
        match self {
            Shipped::NotEnrolled => json!({"state": "not_enrolled"}),
            Shipped::NotHere => json!({"state": "not_here"}),
            Shipped::Entries(n) => json!({"state": "enrolled", "entries": n}),
            Shipped::Unreadable => json!({"state": "unreadable"}),
        }
    }
}

/// A session as a list or a header shows it.
#[derive(Clone, Debug)]
pub struct SessionInfo {
    pub id: String,
    /// The log file.
    pub log: String,
    pub summary: Summary,
    pub chain: Chain,
    pub shipped: Shipped,
}

impl SessionInfo {
    /// The agent and its version, e.g. `claude-code 2.1.197`.
    pub fn agent(&self) -> String {
        let agent = self.summary.agent.as_deref().unwrap_or("?");
        match &self.summary.version {
            Some(v) => format!("{agent} {v}"),
            None => agent.to_string(),
        }
    }

    /// Says what the log holds about `nd7 run`.
    pub fn confinement_words(&self) -> &'static str {
        match self.summary.confinement {
            Confinement::NotSeen => "no sign of nd7 run in the log",
            Confinement::Routed => "ran under nd7 run (its Bash commands went through nd7-exec)",
            Confinement::Exit => "ran under nd7 run (nd7's exit wrote its own entries)",
        }
    }

    /// The object scripts get: `{"type": "session", …}`.
    pub fn json(&self) -> Value {
        let s = &self.summary;
        json!({
            "type": "session",
            "id": self.id,
            "log": self.log,
            "started": s.first_ts.map(when::rfc3339),
            "started_ts": s.first_ts,
            "last_ts": s.last_ts,
            "duration_ms": s.duration_ns().map(|d| d / 1_000_000),
            "project": s.project,
            "host": s.host,
            "agent": s.agent,
            "version": s.version,
            "model": s.model,
            "entries": s.entries,
            "unreadable_lines": s.unreadable,
            "prompts": s.prompts,
            "first_prompt": s.first_prompt,
            "tool_calls": s.tool_calls,
            "failures": s.failures,
            "refusals": s.all_refusals(),
            "refusals_by": {"permissions": s.permission_refusals(), "nd7": s.nd7_refusals},
            "subagents": s.subagents,
            "observed": s.observed,
            "ended": s.ended.as_ref().map(|e| json!({"seq": e.seq, "ts": e.ts, "reason": e.reason})),
            "under_nd7_run": s.confinement.ran_under_nd7_run(),
            "confinement": s.confinement,
            "chain": self.chain.json(),
            "shipped": self.shipped.json(),
        })
    }
}
