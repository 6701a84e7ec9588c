//! Claude Code's hook payloads, typed, and the nd7 event each one becomes.
//! Pure: no files, no clock, no network. The caller hands in the
//! [`Invocation`] facts it took before reading standard input.
//!
//! Every event Claude Code has shipped (34 names up to 2.1.332) has a struct
//! here with the fields it is known to carry. The structs are a reading aid
//! and a shape check, never a filter: the entry's body is built from the whole
//! payload, so a field this build has not heard of is still stored.
//!
//! Six events get a kind of their own; everything else, including names this
//! build has never seen, becomes `kind: "hook"` with the payload under `raw`.

#![forbid(unsafe_code)]

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// SessionEnd's hooks get 1.5 s unless they ask for more; a recorder queued
/// behind a busy lock needs longer.
pub const SESSION_END_TIMEOUT_SECS: u64 = 10;

/// The `source` of every entry nd7 records from Claude Code's hooks: what the
/// agent said it would do, and what it reported back. Not what the kernel saw.
pub const SOURCE: &str = "intent:claude-code";

/// The `source` of every entry nd7 records from Codex's hooks, the same
/// kind of word as [`SOURCE`] (`codex::hook::SOURCE` names it there).
pub const CODEX_SOURCE: &str = "intent:codex";

/// The agent whose hook called `nd7 record`. Claude Code runs its hooks in
/// exec form and is the default; Codex's hooks are shell strings that end in
/// `record --agent codex` (docs/agents/codex.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Agent {
    ClaudeCode,
    Codex,
}

impl Agent {
    pub const ALL: [Agent; 2] = [Agent::ClaudeCode, Agent::Codex];

    /// The name `--agent` takes and entries carry: `claude-code`, `codex`.
    pub fn name(self) -> &'static str {
        match self {
            Agent::ClaudeCode => "claude-code",
            Agent::Codex => "codex",
        }
    }

    /// The `source` of the entries recorded from this agent's hooks.
    pub fn source(self) -> &'static str {
        match self {
            Agent::ClaudeCode => SOURCE,
            Agent::Codex => CODEX_SOURCE,
        }
    }

    /// The agent named `name`, as `--agent` spells it.
    pub fn from_name(name: &str) -> Option<Agent> {
        Agent::ALL.into_iter().find(|a| a.name() == name)
    }
}

/// The file name of the binary that holds nothing but `nd7 record`, installed
/// beside `nd7` (ADR-0151): a hook that runs it starts a small program
/// instead of all of nd7.
pub const RECORDER_NAME: &str = "nd7-record";

/// What a hook runs to record an event: `nd7-record` beside nd7, or, where
/// there is none, `nd7 record`. Both take the same arguments after these.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorder {
    program: String,
    lean: bool,
}

impl Recorder {
    /// `nd7-record` at `program`.
    pub fn lean(program: impl Into<String>) -> Recorder {
        Recorder {
            program: program.into(),
            lean: true,
        }
    }

    /// `nd7 record`, with `nd7` at `program`.
    pub fn nd7(program: impl Into<String>) -> Recorder {
        Recorder {
            program: program.into(),
            lean: false,
        }
    }

    /// The file the hook runs.
    pub fn program(&self) -> &str {
        &self.program
    }

    /// Whether it is `nd7-record` rather than `nd7 record`.
    pub fn is_lean(&self) -> bool {
        self.lean
    }

    /// The arguments before the recorder's own: none for `nd7-record`,
    /// `record` for `nd7`.
    pub fn args(&self) -> &'static [&'static str] {
        if self.lean { &[] } else { &["record"] }
    }
}

/// Facts about the recorder process, taken before standard input is read so
/// that `ts` marks when the hook fired.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invocation {
    /// Wall-clock time, nanoseconds since the Unix epoch.
    pub ts: u64,
    pub host: String,
    /// The recorder's parent: Claude Code itself when the hook is registered
    /// in exec form, a shell otherwise.
    pub hook_ppid: Option<u32>,
    /// The recorder's working directory, used only when the payload has no `cwd`.
    pub cwd: Option<String>,
}

/// Fields every payload carries (or may carry), whatever its event.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Common {
    pub session_id: String,
    pub hook_event_name: String,
    #[serde(default)]
    pub transcript_path: Option<String>,
    #[serde(default)]
    pub cwd: Option<String>,
    /// Absent until the first user input.
    #[serde(default)]
    pub prompt_id: Option<String>,
    #[serde(default)]
    pub permission_mode: Option<String>,
    /// Present only inside subagents.
    #[serde(default)]
    pub agent_id: Option<String>,
    #[serde(default)]
    pub agent_type: Option<String>,
    /// `{level}` on models that support effort.
    #[serde(default)]
    pub effort: Option<Value>,
}

/// Types an agent's hook events: a struct per event (from the fields
/// given), and an enum of them with `NAMES`, `parse` and `name`. Claude
/// Code's events here and Codex's (`codex::hook`) are made by this one macro.
macro_rules! typed_events {
    (
        $(#[$enum_doc:meta])*
        enum $enum:ident;
        #[doc = $names_doc:literal]
        #[doc = $spelled_doc:literal]
        $(
            $(#[$doc:meta])*
            $name:ident { $($(#[$fdoc:meta])* $field:ident : $ty:ty),* $(,)? }
        )*
    ) => {
        $(
            $(#[$doc])*
            #[derive(Clone, Debug, Deserialize, PartialEq)]
            #[allow(missing_docs)]
            pub struct $name { $($(#[$fdoc])* pub $field: $ty,)* }
        )*

        $(#[$enum_doc])*
        #[derive(Clone, Debug, PartialEq)]
        pub enum $enum {
            $($name($name),)*
            /// A name this build does not know.
            Unknown(String),
        }

        impl $enum {
            #[doc = $names_doc]
            pub const NAMES: &'static [&'static str] = &[$(stringify!($name)),*];

            /// Types `payload` as the event `name` says it is.
            pub fn parse(name: &str, payload: &Value) -> Result<$enum, serde_json::Error> {
                Ok(match name {
                    $(stringify!($name) => $enum::$name($name::deserialize(payload)?),)*
                    other => $enum::Unknown(other.to_string()),
                })
            }

            #[doc = $spelled_doc]
            pub fn name(&self) -> &str {
                match self {
                    $($enum::$name(_) => stringify!($name),)*
                    $enum::Unknown(name) => name,
                }
            }
        }
    };
}
pub(crate) use typed_events;

typed_events! {
    /// One hook event, typed by its `hook_event_name`.
    enum HookEvent;
    #[doc = "Every event name this build knows, in Claude Code's own order."]
    #[doc = "The event's name as Claude Code spells it."]
    /// Before a tool runs. Recorded as `tool_call`.
    PreToolUse {
        tool_name: String,
        /// The tool's arguments as the model gave them.
        tool_input: Value,
        #[serde(default)] tool_use_id: Option<String>,
        #[serde(default)] mcp_server: Option<String>,
    }
    /// After a tool succeeded. Recorded as `tool_result` with `ok: true`.
    PostToolUse {
        tool_name: String,
        /// The input after any PreToolUse rewrite.
        #[serde(default)] tool_input: Value,
        #[serde(default)] tool_response: Value,
        #[serde(default)] tool_use_id: Option<String>,
        #[serde(default)] duration_ms: Option<f64>,
    }
    /// After a tool failed (a Bash command that exits non-zero lands here).
    /// Recorded as `tool_result` with `ok: false`.
    PostToolUseFailure {
        tool_name: String,
        #[serde(default)] tool_input: Value,
        #[serde(default)] tool_use_id: Option<String>,
        #[serde(default)] error: Option<String>,
        #[serde(default)] is_interrupt: Option<bool>,
        #[serde(default)] duration_ms: Option<f64>,
    }
    /// After a batch of tool calls resolved; repeats their responses.
    PostToolBatch {
        #[serde(default)] tool_calls: Vec<Value>,
    }
    Notification {
        #[serde(default)] message: Option<String>,
        #[serde(default)] title: Option<String>,
        #[serde(default)] notification_type: Option<String>,
    }
    /// Recorded as `prompt`.
    UserPromptSubmit {
        prompt: String,
        #[serde(default)] session_title: Option<String>,
        #[serde(default)] source: Option<String>,
    }
    UserPromptExpansion {
        #[serde(default)] expansion_type: Option<String>,
        #[serde(default)] command_name: Option<String>,
        #[serde(default)] command_args: Option<Value>,
        #[serde(default)] command_source: Option<String>,
        #[serde(default)] prompt: Option<String>,
    }
    /// Recorded as `session_start`. `source`: startup, resume, clear, compact, fork.
    SessionStart {
        #[serde(default)] source: Option<String>,
        #[serde(default)] model: Option<String>,
        #[serde(default)] session_title: Option<String>,
        #[serde(default)] seconds_since_last_response: Option<f64>,
        #[serde(default)] context_tokens: Option<f64>,
        #[serde(default)] prompt_cache_likely_expired: Option<bool>,
        #[serde(default)] estimated_cache_write_usd: Option<f64>,
    }
    /// Recorded as `session_end`. `reason`: clear, resume, logout,
    /// prompt_input_exit, other, bypass_permissions_disabled.
    SessionEnd {
        #[serde(default)] reason: Option<String>,
    }
    /// The end of a turn. Recorded as `turn_end`.
    Stop {
        #[serde(default)] stop_hook_active: Option<bool>,
        #[serde(default)] last_assistant_message: Option<String>,
        #[serde(default)] background_tasks: Option<Vec<Value>>,
        #[serde(default)] session_crons: Option<Vec<Value>>,
    }
    /// A turn ended by an API error, instead of Stop.
    StopFailure {
        #[serde(default)] error: Option<String>,
        #[serde(default)] error_details: Option<Value>,
        #[serde(default)] last_assistant_message: Option<String>,
    }
    SubagentStart {
        #[serde(default)] agent_id: Option<String>,
        #[serde(default)] agent_type: Option<String>,
    }
    SubagentStop {
        #[serde(default)] stop_hook_active: Option<bool>,
        #[serde(default)] agent_id: Option<String>,
        #[serde(default)] agent_transcript_path: Option<String>,
        #[serde(default)] agent_type: Option<String>,
        #[serde(default)] last_assistant_message: Option<String>,
        #[serde(default)] background_tasks: Option<Vec<Value>>,
        #[serde(default)] session_crons: Option<Vec<Value>>,
    }
    PreCompact {
        #[serde(default)] trigger: Option<String>,
        #[serde(default)] custom_instructions: Option<String>,
    }
    PostCompact {
        #[serde(default)] trigger: Option<String>,
        #[serde(default)] compact_summary: Option<String>,
    }
    PermissionRequest {
        #[serde(default)] tool_name: Option<String>,
        #[serde(default)] tool_input: Value,
        #[serde(default)] permission_suggestions: Option<Value>,
    }
    PermissionDenied {
        #[serde(default)] tool_name: Option<String>,
        #[serde(default)] tool_input: Value,
        #[serde(default)] tool_use_id: Option<String>,
        #[serde(default)] reason: Option<String>,
    }
    Setup {
        #[serde(default)] trigger: Option<String>,
    }
    TeammateIdle {
        #[serde(default)] teammate_name: Option<String>,
        #[serde(default)] team_name: Option<String>,
    }
    TaskCreated {
        #[serde(default)] task_id: Option<String>,
        #[serde(default)] task_subject: Option<String>,
        #[serde(default)] task_description: Option<String>,
        #[serde(default)] teammate_name: Option<String>,
        #[serde(default)] team_name: Option<String>,
    }
    TaskCompleted {
        #[serde(default)] task_id: Option<String>,
        #[serde(default)] task_subject: Option<String>,
        #[serde(default)] task_description: Option<String>,
        #[serde(default)] teammate_name: Option<String>,
        #[serde(default)] team_name: Option<String>,
    }
    Elicitation {
        #[serde(default)] mcp_server_name: Option<String>,
        #[serde(default)] message: Option<String>,
        #[serde(default)] mode: Option<String>,
        #[serde(default)] url: Option<String>,
        #[serde(default)] elicitation_id: Option<String>,
        #[serde(default)] requested_schema: Option<Value>,
    }
    ElicitationResult {
        #[serde(default)] mcp_server_name: Option<String>,
        #[serde(default)] elicitation_id: Option<String>,
        #[serde(default)] mode: Option<String>,
        #[serde(default)] action: Option<String>,
        #[serde(default)] content: Option<Value>,
    }
    ConfigChange {
        #[serde(default)] source: Option<String>,
        #[serde(default)] file_path: Option<String>,
    }
    WorktreeCreate {
        #[serde(default)] name: Option<String>,
    }
    WorktreeRemove {
        #[serde(default)] worktree_path: Option<String>,
    }
    InstructionsLoaded {
        #[serde(default)] file_path: Option<String>,
        #[serde(default)] memory_type: Option<String>,
        #[serde(default)] load_reason: Option<String>,
        #[serde(default)] globs: Option<Value>,
        #[serde(default)] trigger_file_path: Option<String>,
        #[serde(default)] parent_file_path: Option<String>,
    }
    CwdChanged {
        #[serde(default)] old_cwd: Option<String>,
        #[serde(default)] new_cwd: Option<String>,
    }
    FileChanged {
        #[serde(default)] file_path: Option<String>,
        #[serde(default)] event: Option<String>,
    }
    /// Assistant text as it streams; not registered by default (ADR-0006).
    MessageDisplay {
        #[serde(default)] turn_id: Option<String>,
        #[serde(default)] message_id: Option<String>,
        #[serde(default)] index: Option<f64>,
        #[serde(default)] r#final: Option<bool>,
        #[serde(default)] delta: Option<String>,
    }
    PreModelSwitch {
        #[serde(default)] from_model: Option<String>,
        #[serde(default)] to_model: Option<String>,
        #[serde(default)] requested_model: Option<String>,
        #[serde(default)] source: Option<String>,
        #[serde(default)] context_tokens: Option<f64>,
        #[serde(default)] prompt_cache_warm: Option<bool>,
        #[serde(default)] cache_ttl: Option<String>,
        #[serde(default)] estimated_cache_write_usd: Option<f64>,
        #[serde(default)] pricing: Option<Value>,
    }
    PostModelSwitch {
        #[serde(default)] from_model: Option<String>,
        #[serde(default)] to_model: Option<String>,
        #[serde(default)] requested_model: Option<String>,
        #[serde(default)] source: Option<String>,
        #[serde(default)] context_tokens: Option<f64>,
        #[serde(default)] prompt_cache_warm: Option<bool>,
        #[serde(default)] cache_ttl: Option<String>,
        #[serde(default)] estimated_cache_write_usd: Option<f64>,
        #[serde(default)] pricing: Option<Value>,
    }
    DirectoryAdded {
        #[serde(default)] directory: Option<String>,
        #[serde(default)] source: Option<String>,
    }
    PreSkillShellCommand {
        #[serde(default)] tool_name: Option<String>,
        #[serde(default)] tool_input: Value,
        #[serde(default)] tool_use_id: Option<String>,
        #[serde(default)] command_name: Option<String>,
        #[serde(default)] command_source: Option<String>,
        #[serde(default)] invoked_by: Option<String>,
    }
}

/// The kind of an entry: six events have their own, the rest are `hook`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    SessionStart,
    Prompt,
    ToolCall,
    ToolResult,
    TurnEnd,
    SessionEnd,
    Hook,
    /// One of the entries nd7 writes from outside the sandbox floor
    /// ([`crate::run_entry`]), never made from a hook payload.
    Exit(&'static str),
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::SessionStart => "session_start",
            Kind::Prompt => "prompt",
            Kind::ToolCall => "tool_call",
            Kind::ToolResult => "tool_result",
            Kind::TurnEnd => "turn_end",
            Kind::SessionEnd => "session_end",
            Kind::Hook => "hook",
            Kind::Exit(kind) => kind,
        }
    }

    /// The kind an event is recorded as when its payload fits its type.
    pub fn of(event: &HookEvent) -> Kind {
        match event {
            HookEvent::SessionStart(_) => Kind::SessionStart,
            HookEvent::UserPromptSubmit(_) => Kind::Prompt,
            HookEvent::PreToolUse(_) => Kind::ToolCall,
            HookEvent::PostToolUse(_) | HookEvent::PostToolUseFailure(_) => Kind::ToolResult,
            HookEvent::Stop(_) => Kind::TurnEnd,
            HookEvent::SessionEnd(_) => Kind::SessionEnd,
            _ => Kind::Hook,
        }
    }
}

impl Kind {
    /// Members nd7 adds to the body of this kind. A payload that already has
    /// one of them is recorded as `hook`, so nothing it sent is overwritten.
    pub fn derived_members(self) -> &'static [&'static str] {
        match self {
            Kind::ToolCall => &["argv", "paths"],
            Kind::ToolResult => &["ok"],
            _ => &[],
        }
    }
}

/// Tool-input members that name a file or directory, copied into `paths`.
pub const PATH_MEMBERS: &[&str] = &["file_path", "notebook_path", "path", "filePath"];

/// Why a payload cannot be recorded at all.
#[derive(Debug, thiserror::Error)]
pub enum PayloadError {
    #[error("the payload is empty")]
    Empty,
    #[error("the payload is not valid JSON: {0}")]
    Json(#[source] serde_json::Error),
    #[error("the payload is JSON but not an object")]
    NotObject,
    #[error("the payload has no session_id string")]
    NoSessionId,
}

/// A hook payload: the whole object as it arrived, and its typed reading.
#[derive(Clone, Debug)]
pub struct Payload {
    /// Every member, in the order Claude Code sent them.
    pub members: Map<String, Value>,
    pub session_id: String,
    /// `None` when the payload has no `hook_event_name` string.
    pub event_name: Option<String>,
    /// The typed event, or why the payload did not fit its event's type.
    pub event: Result<HookEvent, String>,
}

impl Payload {
    /// Parses standard input's bytes. Fails only when there is nothing a log
    /// could be keyed on: no JSON object, or no session id.
    pub fn parse(input: &[u8]) -> Result<Payload, PayloadError> {
        if input.iter().all(u8::is_ascii_whitespace) {
            return Err(PayloadError::Empty);
        }
        let value: Value = serde_json::from_slice(input).map_err(PayloadError::Json)?;
        let Value::Object(members) = value else {
            return Err(PayloadError::NotObject);
        };
        Payload::from_members(members)
    }

    pub fn from_members(members: Map<String, Value>) -> Result<Payload, PayloadError> {
        let session_id = match members.get("session_id") {
            Some(Value::String(s)) => s.clone(),
            _ => return Err(PayloadError::NoSessionId),
        };
        let event_name = match members.get("hook_event_name") {
            Some(Value::String(s)) => Some(s.clone()),
            _ => None,
        };
        let whole = Value::Object(members);
        let event = match &event_name {
            None => Err("no hook_event_name string".to_string()),
            Some(name) => HookEvent::parse(name, &whole)
                .and_then(|ev| Common::deserialize(&whole).map(|_| ev))
                .map_err(|e| format!("does not fit the {name} event: {e}")),
        };
        let Value::Object(members) = whole else {
            unreachable!("built as an object above")
        };
        Ok(Payload {
            members,
            session_id,
            event_name,
            event,
        })
    }

    /// The kind this payload is recorded as.
    pub fn kind(&self) -> Kind {
        match &self.event {
            Ok(ev) => {
                let kind = Kind::of(ev);
                let collides = kind
                    .derived_members()
                    .iter()
                    .any(|m| self.members.contains_key(*m));
                if collides { Kind::Hook } else { kind }
            }
            Err(_) => Kind::Hook,
        }
    }

    pub fn str_member(&self, name: &str) -> Option<&str> {
        self.members.get(name).and_then(Value::as_str)
    }
}

/// The words of a shell command, as a POSIX shell would split them, or `None`
/// when the text's quoting does not close. Operators such as `&&` and `|` stay
/// words of their own when spaced; nothing is expanded.
pub fn shell_words(command: &str) -> Option<Vec<String>> {
    shlex::split(command)
}

/// The path-like members of a tool input, in [`PATH_MEMBERS`] order, exactly
/// as given.
pub fn tool_paths(tool_input: &Value) -> Vec<String> {
    PATH_MEMBERS
        .iter()
        .filter_map(|m| tool_input.get(*m).and_then(Value::as_str))
        .map(str::to_string)
        .collect()
}

/// One nd7 event: an entry before the log gives it `seq`, `prev` and `hash`.
#[derive(Clone, Debug)]
pub struct Event {
    pub ts: u64,
    pub host: String,
    pub hook_ppid: Option<u32>,
    pub cwd: Option<String>,
    pub session: String,
    pub tool_use_id: Option<String>,
    pub source: &'static str,
    pub kind: Kind,
    /// The body, already rendered as compact JSON.
    pub body: Box<RawValue>,
}

impl Event {
    /// The event a payload becomes.
    ///
    /// For the six kinds, the body is the payload with every member in its
    /// order, plus what nd7 derives: `argv` and `paths` for `tool_call`, `ok`
    /// for `tool_result`. For `hook`, the body is
    /// `{"hook_event_name": <name or null>, "raw": <payload>}`.
    pub fn new(invocation: &Invocation, payload: Payload) -> Event {
        let kind = payload.kind();
        let envelope = Envelope::of(invocation, &payload);
        let body = match kind {
            Kind::Hook => payload.into_hook_body(),
            Kind::ToolCall => {
                let mut body = payload.members;
                let input = body.get("tool_input").cloned().unwrap_or(Value::Null);
                if let Some(command) = input.get("command").and_then(Value::as_str) {
                    let argv = shell_words(command)
                        .map_or(Value::Null, |w| w.into_iter().map(Value::String).collect());
                    body.insert("argv".into(), argv);
                }
                let paths = tool_paths(&input).into_iter().map(Value::String).collect();
                body.insert("paths".into(), paths);
                body
            }
            Kind::ToolResult => {
                let ok = matches!(payload.event, Ok(HookEvent::PostToolUse(_)));
                let mut body = payload.members;
                body.insert("ok".into(), Value::Bool(ok));
                body
            }
            Kind::SessionStart
            | Kind::Prompt
            | Kind::TurnEnd
            | Kind::SessionEnd
            | Kind::Exit(_) => payload.members,
        };
        envelope.event(invocation, SOURCE, kind, body)
    }

    /// The event for a payload too large to store: its size and fingerprint,
    /// and the few members a reader needs to place it.
    pub fn omitted(invocation: &Invocation, glimpse: &Glimpse, bytes: u64, blake3: &str) -> Event {
        let body = serde_json::json!({
            "hook_event_name": glimpse.hook_event_name,
            "omitted": {
                "reason": "payload larger than the entry limit",
                "bytes": bytes,
                "blake3": blake3,
            },
        });
        Event {
            ts: invocation.ts,
            host: invocation.host.clone(),
            hook_ppid: invocation.hook_ppid,
            cwd: glimpse.cwd.clone().or_else(|| invocation.cwd.clone()),
            session: glimpse.session_id.clone(),
            tool_use_id: glimpse.tool_use_id.clone(),
            source: SOURCE,
            kind: Kind::Hook,
            body: to_raw(&body),
        }
    }
}

/// What every agent's entry takes from its payload besides the body: the
/// payload's `cwd` (else the hook's), its session and its `tool_use_id`.
pub(crate) struct Envelope {
    cwd: Option<String>,
    session: String,
    tool_use_id: Option<String>,
}

impl Envelope {
    pub(crate) fn of(invocation: &Invocation, payload: &Payload) -> Envelope {
        Envelope {
            cwd: payload
                .str_member("cwd")
                .map(str::to_string)
                .or_else(|| invocation.cwd.clone()),
            session: payload.session_id.clone(),
            tool_use_id: payload.str_member("tool_use_id").map(str::to_string),
        }
    }

    /// The event of `source` and `kind` with `body`, in this envelope.
    pub(crate) fn event(
        self,
        invocation: &Invocation,
        source: &'static str,
        kind: Kind,
        body: Map<String, Value>,
    ) -> Event {
        Event {
            ts: invocation.ts,
            host: invocation.host.clone(),
            hook_ppid: invocation.hook_ppid,
            cwd: self.cwd,
            session: self.session,
            tool_use_id: self.tool_use_id,
            source,
            kind,
            body: to_raw(&Value::Object(body)),
        }
    }
}

impl Payload {
    /// The body of a `hook` entry, for an event nd7 does not type (or one it
    /// keeps whole): `{"hook_event_name": <name or null>, "raw": <payload>}`.
    pub(crate) fn into_hook_body(self) -> Map<String, Value> {
        let mut body = Map::new();
        body.insert(
            "hook_event_name".into(),
            self.event_name.map_or(Value::Null, Value::String),
        );
        body.insert("raw".into(), Value::Object(self.members));
        body
    }
}

/// The members of an oversized payload that are read without keeping the rest.
#[derive(Clone, Debug, Deserialize, serde::Serialize)]
pub struct Glimpse {
    pub session_id: String,
    #[serde(default)]
    pub hook_event_name: Option<String>,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub tool_use_id: Option<String>,
}

pub fn to_raw(value: &Value) -> Box<RawValue> {
    // Serializing a Value built from parsed JSON cannot fail: its keys are
    // strings and its numbers finite.
    serde_json::value::to_raw_value(value).expect("a parsed JSON value serializes")
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn thirty_four_names_each_typed() {
        assert_eq!(HookEvent::NAMES.len(), 34);
        let minimal = serde_json::json!({
            "session_id": "s", "hook_event_name": "x",
            "tool_name": "Bash", "tool_input": {}, "prompt": "p"
        });
        for name in HookEvent::NAMES {
            let ev = HookEvent::parse(name, &minimal).expect(name);
            assert_eq!(ev.name(), *name);
            assert!(!matches!(ev, HookEvent::Unknown(_)), "{name}");
        }
        assert_eq!(
            HookEvent::parse("FutureEvent", &minimal).expect("unknown parses"),
            HookEvent::Unknown("FutureEvent".into())
        );
    }

    #[test]
    fn bash_call_gets_argv_and_paths_and_keeps_the_payload() {
        let p = Payload::parse(
            br#"{"session_id":"s","cwd":"/p","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"git commit -m 'two words'","description":"d"},"tool_use_id":"t1","zz_new":1}"#,
        )
        .expect("parses");
        let ev = Event::new(&inv(), p);
        assert_eq!(ev.kind, Kind::ToolCall);
        assert_eq!(ev.tool_use_id.as_deref(), Some("t1"));
        assert_eq!(ev.cwd.as_deref(), Some("/p"));
        let b = body(&ev);
        assert_eq!(
            b["argv"],
            serde_json::json!(["git", "commit", "-m", "two words"])
        );
        assert_eq!(b["paths"], serde_json::json!([]));
        assert_eq!(b["zz_new"], 1);
        assert_eq!(b["tool_input"]["description"], "d");
    }

    #[test]
    fn file_tools_get_paths_and_unclosed_quotes_give_null_argv() {
        let p = Payload::parse(
            br#"{"session_id":"s","hook_event_name":"PreToolUse","tool_name":"Write","tool_input":{"file_path":"/a b/c","content":"x"}}"#,
        )
        .expect("parses");
        let b = body(&Event::new(&inv(), p));
        assert_eq!(b["paths"], serde_json::json!(["/a b/c"]));
        assert!(b.get("argv").is_none());
        let p = Payload::parse(
            br#"{"session_id":"s","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"echo 'open"}}"#,
        )
        .expect("parses");
        assert_eq!(body(&Event::new(&inv(), p))["argv"], Value::Null);
    }

    #[test]
    fn results_say_ok_or_not() {
        for (name, ok) in [("PostToolUse", true), ("PostToolUseFailure", false)] {
            let text = format!(
                r#"{{"session_id":"s","hook_event_name":"{name}","tool_name":"Bash","tool_input":{{}},"error":"Exit code 7","duration_ms":5}}"#
            );
            let ev = Event::new(&inv(), Payload::parse(text.as_bytes()).expect("parses"));
            assert_eq!(ev.kind, Kind::ToolResult);
            assert_eq!(body(&ev)["ok"], ok);
            assert_eq!(body(&ev)["duration_ms"], 5);
        }
    }

    #[test]
    fn unknown_misfit_and_colliding_payloads_become_hook_with_raw() {
        for text in [
            r#"{"session_id":"s","hook_event_name":"Brand New","x":[1,2]}"#,
            r#"{"session_id":"s","hook_event_name":"PreToolUse","tool_input":{}}"#,
            r#"{"session_id":"s","hook_event_name":"PostToolUse","tool_name":"Bash","ok":"theirs"}"#,
            r#"{"session_id":"s"}"#,
        ] {
            let p = Payload::parse(text.as_bytes()).expect("parses");
            let original = Value::Object(p.members.clone());
            let ev = Event::new(&inv(), p);
            assert_eq!(ev.kind, Kind::Hook, "{text}");
            assert_eq!(body(&ev)["raw"], original, "{text}");
            assert_eq!(ev.cwd.as_deref(), Some("/proc-cwd"));
        }
    }

    #[test]
    fn unrecordable_payloads_say_why() {
        assert!(matches!(Payload::parse(b""), Err(PayloadError::Empty)));
        assert!(matches!(Payload::parse(b" \n"), Err(PayloadError::Empty)));
        assert!(matches!(Payload::parse(b"{"), Err(PayloadError::Json(_))));
        assert!(matches!(
            Payload::parse(b"[1]"),
            Err(PayloadError::NotObject)
        ));
        assert!(matches!(
            Payload::parse(br#"{"session_id":3}"#),
            Err(PayloadError::NoSessionId)
        ));
        assert!(matches!(
            Payload::parse(b"{\"session_id\":\"\xff\"}"),
            Err(PayloadError::Json(_))
        ));
    }
}
