//! Codex CLI's hook payloads, typed, and the nd7 event each one becomes.
//! Pure: no files, no clock, no network. What only the rollout file knows
//! (the CLI's version, how a tool call ended) comes in as [`Facts`], read by
//! [`super::facts`].
//!
//! Codex 0.171.0 fires fourteen events. Their payloads are shaped like Claude
//! Code's (snake_case, `session_id`, `hook_event_name`, `tool_use_id`), with
//! `turn_id` on turn-scoped events. As for Claude Code, the structs here are a
//! shape check, never a filter: the body is built from the whole payload, and
//! an event or member this build does not know is stored all the same.

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::hook::{
    Envelope, Event, Invocation, Kind, Payload, shell_words, tool_paths, typed_events,
};

/// The `source` of every entry recorded from Codex's hooks (kept with
/// [`crate::hook::Agent`], which names each agent's).
pub use crate::hook::CODEX_SOURCE as SOURCE;

/// The name Codex gives its shell tool in hook payloads (`exec_command` to
/// the model).
pub const SHELL_TOOL: &str = "Bash";

/// The name of Codex's file-editing tool, whose input is a patch.
pub const PATCH_TOOL: &str = "apply_patch";

/// Fields every Codex payload carries (or may carry), whatever its event.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Common {
    pub session_id: String,
    pub hook_event_name: String,
    /// The rollout file; null when Codex keeps none (ephemeral sessions).
    #[serde(default)]
    pub transcript_path: Option<String>,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub permission_mode: Option<String>,
    /// On turn-scoped events.
    #[serde(default)]
    pub turn_id: Option<String>,
}

typed_events! {
    /// One Codex hook event, typed by its `hook_event_name`.
    enum CodexEvent;
    #[doc = "Every event name Codex 0.171.0 accepts: the twelve it first had, in its order, then the two of a model request."]
    #[doc = "The event's name as Codex spells it."]
    /// Recorded as `session_start`. `source`: startup, resume, clear, and
    /// compact (it fires again after every compaction).
    SessionStart {
        #[serde(default)] source: Option<String>,
    }
    /// Recorded as `prompt`.
    UserPromptSubmit {
        prompt: String,
    }
    /// Before a tool runs. Recorded as `tool_call`. The shell tool is
    /// `Bash` with `tool_input.command`; `apply_patch` carries the patch in
    /// `tool_input.command` too.
    PreToolUse {
        tool_name: String,
        tool_input: Value,
        #[serde(default)] tool_use_id: Option<String>,
    }
    /// Before Codex asks for approval (also for network access).
    PermissionRequest {
        #[serde(default)] tool_name: Option<String>,
        #[serde(default)] tool_input: Value,
        #[serde(default)] tool_use_id: Option<String>,
    }
    /// After a tool returned, whether it succeeded or not: Codex has no
    /// failure event, and the payload holds the output but no status.
    /// Recorded as `tool_result`, with `ok` and `outcome` from the rollout.
    PostToolUse {
        tool_name: String,
        #[serde(default)] tool_input: Value,
        #[serde(default)] tool_response: Value,
        #[serde(default)] tool_use_id: Option<String>,
    }
    PreCompact {
        #[serde(default)] trigger: Option<String>,
    }
    PostCompact {
        #[serde(default)] trigger: Option<String>,
    }
    SubagentStart {
        #[serde(default)] agent_id: Option<String>,
        #[serde(default)] agent_type: Option<String>,
    }
    SubagentStop {
        #[serde(default)] agent_id: Option<String>,
        #[serde(default)] agent_type: Option<String>,
        #[serde(default)] agent_transcript_path: Option<String>,
        #[serde(default)] last_assistant_message: Option<String>,
        #[serde(default)] stop_hook_active: Option<bool>,
    }
    /// The end of a turn. Recorded as `turn_end`.
    Stop {
        #[serde(default)] stop_hook_active: Option<bool>,
        #[serde(default)] last_assistant_message: Option<String>,
    }
    /// Recorded as `session_end`. Codex gives its hooks at most 3 s.
    SessionEnd {
        #[serde(default)] reason: Option<String>,
    }
    /// The user interrupted a turn. At most 3 s, like SessionEnd.
    Interrupt {}
    /// Before each request to the model (and each retry, `attempt_number`):
    /// which request, not its input.
    PreModelRequest {
        #[serde(default)] request_id: Option<String>,
        #[serde(default)] attempt_number: Option<u64>,
    }
    /// After each request to the model: how it ended (`status`, `error`)
    /// and its `token_usage`, not its output.
    PostModelRequest {
        #[serde(default)] request_id: Option<String>,
        #[serde(default)] attempt_number: Option<u64>,
        #[serde(default)] status: Option<String>,
        #[serde(default)] error: Value,
        #[serde(default)] token_usage: Value,
    }
}

impl Kind {
    /// The kind a Codex event is recorded as when its payload fits its type.
    pub fn of_codex(event: &CodexEvent) -> Kind {
        match event {
            CodexEvent::SessionStart(_) => Kind::SessionStart,
            CodexEvent::UserPromptSubmit(_) => Kind::Prompt,
            CodexEvent::PreToolUse(_) => Kind::ToolCall,
            CodexEvent::PostToolUse(_) => Kind::ToolResult,
            CodexEvent::Stop(_) => Kind::TurnEnd,
            CodexEvent::SessionEnd(_) => Kind::SessionEnd,
            _ => Kind::Hook,
        }
    }
}

/// Members nd7 adds to a Codex entry of `kind`. A payload that already has
/// one of them is recorded as `hook`, so nothing Codex sent is overwritten.
pub fn derived_members(kind: Kind) -> &'static [&'static str] {
    match kind {
        Kind::ToolCall => &["argv", "paths"],
        Kind::ToolResult => &["ok", "outcome"],
        Kind::SessionStart => &[AGENT],
        _ => &[],
    }
}

/// The member naming the agent and its version.
pub const AGENT: &str = "agent";

/// What the rollout's first line says about the CLI that wrote it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentInfo {
    /// `cli_version`, e.g. "0.171.0"; `None` when the rollout did not say.
    pub version: Option<String>,
    /// `originator`: `codex_exec` for `codex exec`, `codex_cli_rs` for the TUI.
    pub originator: Option<String>,
    /// Why the version is unknown, when it is.
    pub why: Option<String>,
}

/// How a tool call ended, as its completed item in the rollout says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The item was found: its `status` verbatim ("completed", "failed",
    /// "declined"…) and, for commands, its `exit_code`.
    Known {
        status: String,
        exit_code: Option<i64>,
    },
    /// Nothing could be read; the reason.
    Unknown(String),
}

impl Outcome {
    /// Whether the call succeeded: a completed item with no exit code or 0.
    /// `None` when the outcome is unknown or its status is not a final one.
    pub fn ok(&self) -> Option<bool> {
        match self {
            Outcome::Known { exit_code, .. } if exit_code.is_some_and(|c| c != 0) => Some(false),
            Outcome::Known { status, .. } => match status.as_str() {
                "completed" => Some(true),
                "failed" | "declined" | "rejected" | "cancelled" | "canceled" | "aborted" => {
                    Some(false)
                }
                _ => None,
            },
            Outcome::Unknown(_) => None,
        }
    }

    fn to_value(&self) -> Value {
        match self {
            Outcome::Known { status, exit_code } => {
                let mut m = Map::new();
                m.insert("status".into(), Value::String(status.clone()));
                if let Some(code) = exit_code {
                    m.insert("exit_code".into(), Value::from(*code));
                }
                m.insert("from".into(), Value::String("rollout".into()));
                Value::Object(m)
            }
            Outcome::Unknown(why) => serde_json::json!({
                "status": null, "why": why, "from": "rollout",
            }),
        }
    }
}

/// What the world told [`super::facts`] about this payload.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Facts {
    /// Set for SessionStart, and for whatever event opens a session's log.
    pub agent: Option<AgentInfo>,
    /// Set for PostToolUse.
    pub outcome: Option<Outcome>,
}

/// A Codex payload's typed reading, next to [`Payload`]'s members.
#[derive(Clone, Debug)]
pub struct Typed {
    /// The event, or why the payload did not fit its type.
    pub event: Result<CodexEvent, String>,
}

impl Typed {
    /// Types a parsed payload as Codex's.
    pub fn of(payload: &Payload) -> Typed {
        let whole = Value::Object(payload.members.clone());
        let event = match &payload.event_name {
            None => Err("no hook_event_name string".to_string()),
            Some(name) => CodexEvent::parse(name, &whole)
                .and_then(|ev| Common::deserialize(&whole).map(|_| ev))
                .map_err(|e| format!("does not fit Codex's {name} event: {e}")),
        };
        Typed { event }
    }

    /// The kind the payload is recorded as.
    pub fn kind(&self, payload: &Payload) -> Kind {
        match &self.event {
            Ok(ev) => {
                let kind = Kind::of_codex(ev);
                let collides = derived_members(kind)
                    .iter()
                    .any(|m| payload.members.contains_key(*m));
                if collides { Kind::Hook } else { kind }
            }
            Err(_) => Kind::Hook,
        }
    }

    /// The event name, when the payload fits a known one.
    pub fn known(&self) -> Option<&CodexEvent> {
        self.event
            .as_ref()
            .ok()
            .filter(|e| !matches!(e, CodexEvent::Unknown(_)))
    }
}

/// The files an `apply_patch` patch names, in order, as written in its
/// `*** Add File:`, `*** Update File:`, `*** Delete File:` and `*** Move to:`
/// lines (usually relative to the session's `cwd`).
pub fn patch_paths(patch: &str) -> Vec<String> {
    const HEADERS: [&str; 4] = [
        "*** Add File: ",
        "*** Update File: ",
        "*** Delete File: ",
        "*** Move to: ",
    ];
    patch
        .lines()
        .filter_map(|line| {
            HEADERS
                .iter()
                .find_map(|h| line.strip_prefix(h))
                .map(|p| p.trim_end().to_string())
        })
        .filter(|p| !p.is_empty())
        .collect()
}

/// The nd7 event a Codex payload becomes.
///
/// For the six kinds the body is the payload with every member in its order,
/// plus what nd7 derives: `argv` (for `Bash`) and `paths` for `tool_call`;
/// `ok` and `outcome` for `tool_result`; `agent` for `session_start`. For
/// `hook` it is `{"hook_event_name", "raw"}`. When `facts.agent` is set on an
/// event other than SessionStart (the first entry of a log that SessionStart
/// did not open), the body gets `agent` too, beside `raw` for `hook`.
pub fn event(invocation: &Invocation, payload: Payload, facts: Facts) -> Event {
    let typed = Typed::of(&payload);
    let kind = typed.kind(&payload);
    let envelope = Envelope::of(invocation, &payload);
    let tool_name = payload.str_member("tool_name").map(str::to_string);
    let mut body = match kind {
        Kind::Hook => payload.into_hook_body(),
        Kind::ToolCall => {
            let mut body = payload.members;
            let input = body.get("tool_input").cloned().unwrap_or(Value::Null);
            let command = input.get("command").and_then(Value::as_str);
            let paths = match (tool_name.as_deref(), command) {
                (Some(SHELL_TOOL), Some(command)) => {
                    let argv = shell_words(command)
                        .map_or(Value::Null, |w| w.into_iter().map(Value::String).collect());
                    body.insert("argv".into(), argv);
                    tool_paths(&input)
                }
                (Some(PATCH_TOOL), Some(patch)) => patch_paths(patch),
                _ => tool_paths(&input),
            };
            body.insert(
                "paths".into(),
                paths.into_iter().map(Value::String).collect(),
            );
            body
        }
        Kind::ToolResult => {
            let outcome = facts
                .outcome
                .clone()
                .unwrap_or_else(|| Outcome::Unknown("no rollout was read".into()));
            let mut body = payload.members;
            body.insert("ok".into(), outcome.ok().map_or(Value::Null, Value::Bool));
            body.insert("outcome".into(), outcome.to_value());
            body
        }
        Kind::SessionStart | Kind::Prompt | Kind::TurnEnd | Kind::SessionEnd | Kind::Exit(_) => {
            payload.members
        }
    };
    // SessionStart always names the agent (a payload with its own `agent`
    // was made `hook` above); the first entry of a log does too, unless the
    // payload already has the member, which is never overwritten.
    if (kind == Kind::SessionStart || facts.agent.is_some()) && !body.contains_key(AGENT) {
        let info = facts.agent.unwrap_or(AgentInfo {
            version: None,
            originator: None,
            why: Some("no rollout was read".into()),
        });
        body.insert(AGENT.into(), agent_value(&info));
    }
    envelope.event(invocation, SOURCE, kind, body)
}

fn agent_value(info: &AgentInfo) -> Value {
    let mut m = Map::new();
    m.insert("name".into(), Value::String("codex".into()));
    m.insert(
        "version".into(),
        info.version.clone().map_or(Value::Null, Value::String),
    );
    if let Some(originator) = &info.originator {
        m.insert("originator".into(), Value::String(originator.clone()));
    }
    if let Some(why) = &info.why {
        m.insert("why".into(), Value::String(why.clone()));
    }
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE: &str =
        include_str!("../../../tests/fixtures/codex-0.171.0/hook-payloads.ndjson");

    fn inv() -> Invocation {
        Invocation {
            ts: 1,
            host: "h".into(),
            hook_ppid: Some(7),
            cwd: Some("/proc-cwd".into()),
        }
    }

    fn body(event: &Event) -> Value {
        serde_json::from_str(event.body.get()).expect("body is JSON")
    }

    fn parse(text: &str) -> Payload {
        Payload::parse(text.as_bytes()).expect("parses")
    }

    #[test]
    fn fourteen_names_each_typed() {
        assert_eq!(CodexEvent::NAMES.len(), 14);
        let minimal = serde_json::json!({
            "session_id": "s", "hook_event_name": "x", "tool_name": "Bash",
            "tool_input": {}, "prompt": "p"
        });
        for name in CodexEvent::NAMES {
            let ev = CodexEvent::parse(name, &minimal).expect(name);
            assert_eq!(ev.name(), *name);
            assert!(!matches!(ev, CodexEvent::Unknown(_)), "{name}");
        }
    }

    #[test]
    fn every_real_payload_fits_its_type_and_keeps_every_member() {
        for line in FIXTURE.lines() {
            let payload = parse(line);
            let original = Value::Object(payload.members.clone());
            let typed = Typed::of(&payload);
            assert!(typed.known().is_some(), "{line}");
            let ev = event(&inv(), payload, Facts::default());
            assert_eq!(ev.source, SOURCE);
            let b = body(&ev);
            let kept = if ev.kind == Kind::Hook { &b["raw"] } else { &b };
            for (k, v) in original.as_object().expect("object") {
                assert_eq!(&kept[k], v, "{k} in {line}");
            }
        }
    }

    #[test]
    fn calls_get_argv_for_bash_and_patch_paths_for_apply_patch() {
        let bash = parse(
            r#"{"session_id":"s","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"echo 'a b' > x"},"tool_use_id":"c1","turn_id":"t"}"#,
        );
        let ev = event(&inv(), bash, Facts::default());
        assert_eq!(ev.kind, Kind::ToolCall);
        assert_eq!(ev.tool_use_id.as_deref(), Some("c1"));
        assert_eq!(
            body(&ev)["argv"],
            serde_json::json!(["echo", "a b", ">", "x"])
        );
        let patch = parse(
            r#"{"session_id":"s","hook_event_name":"PreToolUse","tool_name":"apply_patch","tool_input":{"command":"*** Begin Patch\n*** Update File: note.txt\n@@\n-a\n+b\n*** Add File: new dir/n.txt\n+x\n*** Update File: old.txt\n*** Move to: moved.txt\n*** Delete File: gone.txt\n*** End Patch"}}"#,
        );
        let b = body(&event(&inv(), patch, Facts::default()));
        assert!(b.get("argv").is_none());
        assert_eq!(
            b["paths"],
            serde_json::json!([
                "note.txt",
                "new dir/n.txt",
                "old.txt",
                "moved.txt",
                "gone.txt"
            ])
        );
    }

    #[test]
    fn results_say_ok_from_the_outcome_or_null_when_unknown() {
        let post = r#"{"session_id":"s","hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{"command":"exit 3"},"tool_response":"","tool_use_id":"c1"}"#;
        let cases = [
            (
                Some(Outcome::Known {
                    status: "failed".into(),
                    exit_code: Some(3),
                }),
                Value::Bool(false),
                serde_json::json!({"status": "failed", "exit_code": 3, "from": "rollout"}),
            ),
            (
                Some(Outcome::Known {
                    status: "completed".into(),
                    exit_code: Some(0),
                }),
                Value::Bool(true),
                serde_json::json!({"status": "completed", "exit_code": 0, "from": "rollout"}),
            ),
            (
                Some(Outcome::Known {
                    status: "completed".into(),
                    exit_code: Some(2),
                }),
                Value::Bool(false),
                serde_json::json!({"status": "completed", "exit_code": 2, "from": "rollout"}),
            ),
            (
                Some(Outcome::Unknown("gone".into())),
                Value::Null,
                serde_json::json!({"status": null, "why": "gone", "from": "rollout"}),
            ),
            (
                None,
                Value::Null,
                serde_json::json!({"status": null, "why": "no rollout was read", "from": "rollout"}),
            ),
        ];
        for (outcome, ok, recorded) in cases {
            let facts = Facts {
                agent: None,
                outcome,
            };
            let ev = event(&inv(), parse(post), facts);
            assert_eq!(ev.kind, Kind::ToolResult);
            assert_eq!(body(&ev)["ok"], ok);
            assert_eq!(body(&ev)["outcome"], recorded);
        }
    }

    #[test]
    fn session_start_and_a_first_entry_name_the_agent() {
        let start = r#"{"session_id":"s","hook_event_name":"SessionStart","source":"startup","model":"gpt-5.5"}"#;
        let info = AgentInfo {
            version: Some("0.171.0".into()),
            originator: Some("codex_exec".into()),
            why: None,
        };
        let facts = Facts {
            agent: Some(info.clone()),
            outcome: None,
        };
        let ev = event(&inv(), parse(start), facts);
        assert_eq!(ev.kind, Kind::SessionStart);
        assert_eq!(
            body(&ev)[AGENT],
            serde_json::json!({"name": "codex", "version": "0.171.0", "originator": "codex_exec"})
        );
        // Without facts, the session start still names the agent, and says why
        // the version is missing.
        let bare = body(&event(&inv(), parse(start), Facts::default()));
        assert_eq!(bare[AGENT]["name"], "codex");
        assert_eq!(bare[AGENT]["version"], Value::Null);
        // A hook entry that opens a log names it beside `raw`.
        let compact = r#"{"session_id":"s","hook_event_name":"PreCompact","trigger":"auto"}"#;
        let facts = Facts {
            agent: Some(info),
            outcome: None,
        };
        let b = body(&event(&inv(), parse(compact), facts));
        assert_eq!(b[AGENT]["version"], "0.171.0");
        assert_eq!(b["raw"]["trigger"], "auto");
        // Other entries do not.
        assert!(
            body(&event(&inv(), parse(compact), Facts::default()))
                .get(AGENT)
                .is_none()
        );
    }

    #[test]
    fn unknown_misfit_and_colliding_payloads_become_hook_with_raw() {
        for text in [
            r#"{"session_id":"s","hook_event_name":"StopFailure","error":"rate_limit"}"#,
            r#"{"session_id":"s","hook_event_name":"PreToolUse","tool_input":{}}"#,
            r#"{"session_id":"s","hook_event_name":"PostToolUse","tool_name":"Bash","outcome":"theirs"}"#,
            r#"{"session_id":"s","hook_event_name":"SessionStart","agent":"theirs"}"#,
            r#"{"session_id":"s"}"#,
        ] {
            let p = parse(text);
            let original = Value::Object(p.members.clone());
            let ev = event(&inv(), p, Facts::default());
            assert_eq!(ev.kind, Kind::Hook, "{text}");
            assert_eq!(body(&ev)["raw"], original, "{text}");
            assert_eq!(ev.source, SOURCE);
        }
    }
}
