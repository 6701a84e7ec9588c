//! What `nd7 sessions` shows of a session, accumulated entry by entry so that
//! a log that grew is summarised by reading only what was added. Pure.
//!
//! A summary is a cache of what the log says ([`super::index`] keeps it
//! beside the log's file facts); it is rebuilt from the log whenever the log
//! changed in a way an append does not explain, and it never stands in for
//! `nd7 verify`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::entry::{self, Entry};

/// How much of the first prompt a summary keeps.
pub const FIRST_PROMPT_LEN: usize = 200;

/// What the log holds that says the session ran under `nd7 run`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Confinement {
    /// Nothing in the log says so. A session under `nd7 run` that ran no
    /// Bash command looks like this too, until the exit writes its own
    /// entries.
    #[default]
    NotSeen,
    /// A Bash command ran as `'…/nd7-exec' '<command>'`: routed through the
    /// sandbox's exit by `nd7 run`'s hook. The agent's own report (intent).
    Routed,
    /// nd7 wrote entries of its own into the log from outside the agent
    /// (`source` `nd7:…`), which only `nd7 run`'s exit does.
    Exit,
}

impl Confinement {
    /// Evidence only ever strengthens: the exit's own entries outrank the
    /// agent's report of a routed command.
    fn raise(&mut self, to: Confinement) {
        let rank = |c: Confinement| match c {
            Confinement::NotSeen => 0,
            Confinement::Routed => 1,
            Confinement::Exit => 2,
        };
        if rank(to) > rank(*self) {
            *self = to;
        }
    }

    pub fn ran_under_nd7_run(self) -> bool {
        self != Confinement::NotSeen
    }
}

/// How the session ended, as its last `session_end` entry says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ended {
    pub seq: u64,
    pub ts: u64,
    pub reason: Option<String>,
}

/// One session, in the few numbers a list needs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Entries read (lines that parse).
    pub entries: u64,
    /// Lines that are not entries.
    pub unreadable: u64,
    pub first_ts: Option<u64>,
    pub last_ts: Option<u64>,
    pub last_seq: Option<u64>,
    /// The working directory of the first entry that has one.
    pub project: Option<String>,
    pub host: Option<String>,
    /// From the first `intent:<agent>` source, e.g. `claude-code`.
    pub agent: Option<String>,
    /// The agent's version; the log does not hold it, so the reader fills it
    /// from Claude Code's transcript when that is still there.
    #[serde(default)]
    pub version: Option<String>,
    pub model: Option<String>,
    /// Claude Code's transcript, as the first entry naming one says.
    pub transcript: Option<String>,
    pub prompts: u64,
    pub first_prompt: Option<String>,
    pub tool_calls: u64,
    /// Results with `ok: false`.
    pub failures: u64,
    /// `PermissionDenied` entries, and refusals nd7 recorded itself.
    pub refusals: u64,
    /// Of `refusals`, those nd7 recorded itself (`floor_refused`, `refused`).
    pub nd7_refusals: u64,
    /// Calls with no result yet, and no command through the exit: their
    /// `tool_use_id` → `progress` when they were made. No default: a
    /// summary kept before these were counted is rebuilt from its log.
    pub pending: std::collections::BTreeMap<String, u64>,
    /// Turn ends so far.
    pub progress: u64,
    pub subagents: u64,
    /// Entries nd7 wrote from outside the agent.
    pub observed: u64,
    pub ended: Option<Ended>,
    pub confinement: Confinement,
}

impl Summary {
    /// Adds one entry.
    pub fn feed(&mut self, e: &Entry) {
        self.entries += 1;
        self.first_ts.get_or_insert(e.ts);
        self.last_ts = Some(self.last_ts.map_or(e.ts, |t| t.max(e.ts)));
        self.last_seq = Some(e.seq);
        if self.project.is_none() {
            self.project = e.cwd.clone();
        }
        if self.host.is_none() {
            self.host = e.host.clone();
        }
        if !e.is_intent() {
            self.observed += 1;
            if e.source == crate::run_entry::SOURCE {
                self.confinement.raise(Confinement::Exit);
            }
            if super::timeline::entry_class(e) == super::timeline::ObservedClass::Refusal {
                self.refusals += 1;
                self.nd7_refusals += 1;
            }
            if e.kind == crate::run_entry::EXEC
                && let Some(id) = &e.tool_use_id
            {
                self.pending.remove(id);
            }
            return;
        }
        if self.agent.is_none() {
            self.agent = e.agent().map(str::to_string);
        }
        if self.transcript.is_none() {
            self.transcript = e.str("transcript_path").map(str::to_string);
        }
        match e.kind.as_str() {
            "session_start" => {
                if let Some(model) = e.str("model") {
                    self.model = Some(model.to_string());
                }
            }
            "prompt" => {
                // Calls nothing answered before this prompt were stopped
                // (or still run): not passed over.
                let progress = self.progress;
                for at in self.pending.values_mut() {
                    if *at == progress {
                        *at = u64::MAX;
                    }
                }
                self.prompts += 1;
                if self.first_prompt.is_none() {
                    self.first_prompt = e
                        .str("prompt")
                        .map(|p| entry::cut(p, FIRST_PROMPT_LEN).to_string());
                }
            }
            "tool_call" => {
                self.tool_calls += 1;
                if let Some(id) = e.tool_use() {
                    self.pending.insert(id.to_string(), self.progress);
                }
            }
            // The turn cannot end while one of its calls runs.
            "turn_end" => self.progress += 1,
            "tool_result" => {
                if let Some(id) = e.tool_use() {
                    self.pending.remove(id);
                }
                if e.payload().get("ok").and_then(Value::as_bool) == Some(false) {
                    self.failures += 1;
                }
                let ran = e
                    .payload()
                    .get("tool_input")
                    .and_then(|i| i.get("command"))
                    .and_then(Value::as_str);
                if ran.is_some_and(|r| entry::routed_original(r).is_some()) {
                    self.confinement.raise(Confinement::Routed);
                }
            }
            "session_end" => {
                self.ended = Some(Ended {
                    seq: e.seq,
                    ts: e.ts,
                    reason: e.str("reason").map(str::to_string),
                })
            }
            _ => match e.event_name() {
                Some("PermissionDenied") => {
                    self.refusals += 1;
                    if let Some(id) = e.tool_use() {
                        self.pending.remove(id);
                    }
                }
                Some("SubagentStart") => self.subagents += 1,
                _ => {}
            },
        }
    }

    /// Calls Claude Code never ran: no result though their turn ended
    /// (before any prompt), and no command through the exit
    /// (`timeline::never_ran` reads one call the same way).
    pub fn never_ran(&self) -> u64 {
        self.pending
            .values()
            .filter(|&&at| at != u64::MAX && at < self.progress)
            .count() as u64
    }

    /// Every refusal, whoever made it.
    pub fn all_refusals(&self) -> u64 {
        self.refusals + self.never_ran()
    }

    /// Refusals by Claude Code's permissions (recorded or read off calls
    /// that never ran).
    pub fn permission_refusals(&self) -> u64 {
        self.all_refusals() - self.nd7_refusals
    }

    /// A line that is not an entry.
    pub fn feed_unreadable(&mut self) {
        self.unreadable += 1;
    }

    /// From the first entry to the session's end (or its last entry), in
    /// nanoseconds.
    pub fn duration_ns(&self) -> Option<u64> {
        let end = self.ended.as_ref().map(|e| e.ts).or(self.last_ts)?;
        end.checked_sub(self.first_ts?)
    }
}

/// The agent's version in the first `bytes` of a Claude Code transcript:
/// the first `"version":"…"` member, if it looks like a version.
pub fn version_in_transcript(bytes: &[u8]) -> Option<String> {
    const TAG: &[u8] = b"\"version\":\"";
    let at = memchr::memmem::find(bytes, TAG)? + TAG.len();
    let rest = &bytes[at..];
    let end = rest.iter().position(|&b| b == b'"')?;
    let version = std::str::from_utf8(&rest[..end]).ok()?;
    let plausible = !version.is_empty()
        && version.len() <= 40
        && version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+'));
    plausible.then(|| version.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(seq: u64, source: &str, kind: &str, body: Value) -> Entry {
        let v = json!({"seq": seq, "ts": 10 * seq + 5, "host": "h", "cwd": "/proj",
                       "source": source, "kind": kind, "body": body});
        Entry::parse(v.to_string().as_bytes(), seq + 1).expect("entry")
    }

    #[test]
    fn counts_calls_failures_refusals_and_the_end() {
        let routed = crate::shell_prefix::routed_command("/b/nd7-exec", "ls");
        let mut s = Summary::default();
        let cc = "intent:claude-code";
        for e in [
            entry(
                0,
                cc,
                "session_start",
                json!({"source": "startup", "transcript_path": "/t.jsonl"}),
            ),
            entry(1, cc, "prompt", json!({"prompt": "do it"})),
            entry(2, cc, "tool_call", json!({"tool_name": "Bash"})),
            entry(
                3,
                cc,
                "tool_result",
                json!({"ok": false, "tool_input": {"command": routed}}),
            ),
            entry(
                4,
                cc,
                "hook",
                json!({"hook_event_name": "PermissionDenied", "raw": {}}),
            ),
            entry(5, cc, "session_end", json!({"reason": "other"})),
        ] {
            s.feed(&e);
        }
        assert_eq!(s.entries, 6);
        assert_eq!(s.tool_calls, 1);
        assert_eq!(s.failures, 1);
        assert_eq!(s.refusals, 1);
        assert_eq!(s.prompts, 1);
        assert_eq!(s.first_prompt.as_deref(), Some("do it"));
        assert_eq!(s.agent.as_deref(), Some("claude-code"));
        assert_eq!(s.project.as_deref(), Some("/proj"));
        assert_eq!(s.transcript.as_deref(), Some("/t.jsonl"));
        assert_eq!(s.confinement, Confinement::Routed);
        assert_eq!(
            s.ended.as_ref().and_then(|e| e.reason.as_deref()),
            Some("other")
        );
        assert_eq!(s.duration_ns(), Some(50));
    }

    #[test]
    fn the_exits_own_entries_outrank_a_routed_command() {
        let mut s = Summary::default();
        s.feed(&entry(
            0,
            crate::run_entry::SOURCE,
            crate::run_entry::RUN_START,
            json!({}),
        ));
        s.feed(&entry(
            1,
            "intent:claude-code",
            "tool_result",
            json!({"ok": true, "tool_input": {"command": "'/b/nd7-exec' 'ls'"}}),
        ));
        assert_eq!(s.confinement, Confinement::Exit);
        assert_eq!(s.observed, 1);
        assert_eq!(s.agent.as_deref(), Some("claude-code"));
    }

    #[test]
    fn a_summary_fed_in_two_parts_equals_one_fed_at_once() {
        let cc = "intent:claude-code";
        let all: Vec<Entry> = (0..6)
            .map(|i| {
                entry(
                    i,
                    cc,
                    if i % 2 == 0 {
                        "tool_call"
                    } else {
                        "tool_result"
                    },
                    json!({"ok": i != 3}),
                )
            })
            .collect();
        let mut whole = Summary::default();
        all.iter().for_each(|e| whole.feed(e));
        let mut parts = Summary::default();
        all[..2].iter().for_each(|e| parts.feed(e));
        let resumed: Summary =
            serde_json::from_str(&serde_json::to_string(&parts).expect("json")).expect("back");
        let mut parts = resumed;
        all[2..].iter().for_each(|e| parts.feed(e));
        assert_eq!(parts, whole);
    }

    #[test]
    fn versions_come_from_the_transcript_when_plausible() {
        assert_eq!(
            version_in_transcript(br#"{"type":"user","version":"2.1.197","x":1}"#).as_deref(),
            Some("2.1.197")
        );
        assert_eq!(version_in_transcript(b"{\"version\":\"\x1b[2J\"}"), None);
        assert_eq!(version_in_transcript(b"{}"), None);
    }
}
