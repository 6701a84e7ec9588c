//! A session's entries turned into the timeline a person reads: prompts, each
//! tool call paired with its result, subagents placed under the call that
//! started them, the turns' and the session's ends, and every other entry
//! kept as it is. Pure: entries in, items out.
//!
//! The builder streams: an item leaves as soon as nothing before it can still
//! change. A tool call waits for its result, and holds back the items after
//! it, up to [`HOLD_BACK`] items; past that the oldest waiting call leaves as
//! it stands, and a result that arrives later is an item of its own that
//! names the call. So memory stays bounded on any log, and no entry is ever
//! dropped: each one is an item, or part of exactly one.
//!
//! Entries whose `source` is not `intent:…` were written by nd7 itself from
//! outside the agent (the sandbox's exit, under `nd7 run`); each is an
//! [`Item::Observed`], classified by [`observed_class`], and kept whole.
//! Those about one call (`exec`, `exec_end`, `floor_refused`) are also
//! folded into that call's item (`routed`, `refused_by`, `refused_paths`,
//! `evidence`) and marked `folded`, so that the default view shows one row
//! per call; the entries themselves stay apart from the agent's claims. A
//! finished call of a run stays open for [`LINGER`] entries, for the
//! `floor_refused` another hook writes beside its result.

use std::collections::{HashMap, VecDeque};

use serde::Serialize;
use serde_json::Value;

use super::entry::{self, Entry, Unreadable};
use super::safe::plural;

/// How many items may wait behind a tool call that has no result yet.
pub const HOLD_BACK: usize = 4096;

/// Where an item sits in the log.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct At {
    pub seq: u64,
    /// Nanoseconds since the Unix epoch, as the entry states.
    pub ts: u64,
    /// The subagent the entry was recorded in; absent in the main agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
}

impl At {
    fn of(entry: &Entry) -> At {
        At {
            seq: entry.seq,
            ts: entry.ts,
            agent: entry.agent_id().map(str::to_string),
        }
    }
}

/// One thing that happened, in the order the log holds them.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Item {
    SessionStart(SessionStart),
    Prompt(Prompt),
    Tool(Tool),
    TurnEnd(TurnEnd),
    SessionEnd(SessionEnd),
    Subagent(Subagent),
    Refusal(Refusal),
    Observed(Observed),
    Event(Event),
    Unreadable(UnreadableLine),
}

impl Item {
    /// The entry the item starts at; `None` for a line that is not an entry.
    pub fn at(&self) -> Option<&At> {
        Some(match self {
            Item::SessionStart(i) => &i.at,
            Item::Prompt(i) => &i.at,
            Item::Tool(i) => &i.at,
            Item::TurnEnd(i) => &i.at,
            Item::SessionEnd(i) => &i.at,
            Item::Subagent(i) => &i.at,
            Item::Refusal(i) => &i.at,
            Item::Observed(i) => &i.at,
            Item::Event(i) => &i.at,
            Item::Unreadable(_) => return None,
        })
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SessionStart {
    #[serde(flatten)]
    pub at: At,
    /// startup, resume, clear, compact, fork.
    pub how: Option<String>,
    pub model: Option<String>,
    pub cwd: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Prompt {
    #[serde(flatten)]
    pub at: At,
    pub text: String,
}

/// What became of a tool call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    Failed,
    /// Refused by a permission check (a `PermissionDenied` entry).
    Refused,
    Interrupted,
    /// No result in the log: still running, killed, or never reported.
    NoResult,
}

/// Who refused a tool call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusedBy {
    /// nd7's sandbox floor (a `floor_refused` entry).
    Nd7Sandbox,
    /// Claude Code's permissions: a `PermissionDenied` entry, or a call that
    /// never ran (no result while the session went on, and under `nd7 run`
    /// no command through the exit).
    Permissions,
}

impl RefusedBy {
    /// Who, in words.
    pub fn words(self) -> &'static str {
        match self {
            RefusedBy::Nd7Sandbox => "nd7's sandbox",
            RefusedBy::Permissions => "Claude Code's permissions",
        }
    }
}

/// One path nd7's sandbox refused, as its `floor_refused` entry says.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RefusedPath {
    pub path: String,
    /// outside, secret, nd7, device.
    pub why: String,
    /// The command that would allow it, when one would.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl RefusedPath {
    /// The paths of a `floor_refused` body.
    pub fn of(body: &Value) -> Vec<RefusedPath> {
        body["paths"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| RefusedPath {
                path: p["path"].as_str().unwrap_or("?").to_string(),
                why: p["why"].as_str().unwrap_or("?").to_string(),
                fix: p["allow"].as_str().map(str::to_string),
            })
            .collect()
    }

    /// Why, in words a person reads.
    pub fn why_words(&self) -> String {
        match self.why.as_str() {
            "outside" => "outside what this session may write".into(),
            "secret" => "a secret store nd7 keeps unreadable".into(),
            "nd7" => "nd7's own files".into(),
            "device" => "a device nd7 does not open".into(),
            "held" => "held read-only by nd7: it can make git or the shell run programs outside the sandbox".into(),
            other => other.to_string(),
        }
    }

    /// The fix, in words: the command, or that none is offered.
    pub fn fix_words(&self) -> String {
        match &self.fix {
            Some(f) => format!("fix: {f}"),
            None => "no grant opens it; the user can run the command outside nd7 run".into(),
        }
    }
}

/// A tool call and its result, paired by `tool_use_id`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Tool {
    /// The call's entry; the result's when the call is not in the log.
    #[serde(flatten)]
    pub at: At,
    pub tool: String,
    pub tool_use_id: Option<String>,
    pub status: Status,
    /// A Bash call's command, as the model gave it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    /// The other inputs, in one line, for tools with no command or path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
    /// The command as it ran, when a hook rewrote it into something other
    /// than the `nd7-exec` routing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ran: Option<String>,
    /// The command ran through `nd7-exec`, the sandbox's exit.
    pub routed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// Why it failed or was refused, in a line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Who refused it, when something did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused_by: Option<RefusedBy>,
    /// The paths nd7's sandbox refused it, each with why and the fix, from
    /// the call's `floor_refused` entry.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub refused_paths: Box<[RefusedPath]>,
    /// nd7's own entries about this call (`exec`, `exec_end`,
    /// `floor_refused`), folded into it; each is also an item of its own.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<u64>,
    /// What its command ran, as the observer saw it (`ran` entries,
    /// `effect:nd7`): a collapsed tree of programs per `ran` entry that
    /// arrived while the call was still open.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_seq: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result_seq: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal_seq: Option<u64>,
    /// When the result was recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_ts: Option<u64>,
    /// For a result whose call left the timeline before it arrived: the
    /// call's entry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result_of: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TurnEnd {
    #[serde(flatten)]
    pub at: At,
    pub message: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SessionEnd {
    #[serde(flatten)]
    pub at: At,
    pub reason: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SubagentEvent {
    Start,
    Stop,
}

/// A subagent starting or stopping. Entries recorded inside it carry its id
/// in their `agent`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Subagent {
    #[serde(flatten)]
    pub at: At,
    pub event: SubagentEvent,
    pub id: Option<String>,
    pub agent_type: Option<String>,
    /// The `tool_use_id` of the call that started it, when one call can have.
    pub parent: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A permission refusal whose call is not waiting in the timeline.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Refusal {
    #[serde(flatten)]
    pub at: At,
    pub tool: Option<String>,
    pub tool_use_id: Option<String>,
    pub reason: Option<String>,
}

impl Tool {
    /// The call as an entry about it (its call's, or a result standing
    /// alone) states it, with `paths`: nothing known yet of how it went.
    fn stated(entry: &Entry, input: &Value, paths: Vec<String>) -> Tool {
        Tool {
            at: At::of(entry),
            tool: entry.str("tool_name").unwrap_or("?").to_string(),
            tool_use_id: entry.tool_use().map(str::to_string),
            status: Status::NoResult,
            command: None,
            description: input
                .get("description")
                .and_then(Value::as_str)
                .map(str::to_string),
            paths,
            input: other_inputs(input),
            ran: None,
            routed: false,
            exit_code: None,
            duration_ms: None,
            output: None,
            reason: None,
            refused_by: None,
            refused_paths: Box::default(),
            evidence: Vec::new(),
            processes: Vec::new(),
            call_seq: None,
            result_seq: None,
            refusal_seq: None,
            end_ts: None,
            result_of: None,
        }
    }
}

/// How many entries a finished call of a run stays open for nd7's word on
/// it (`floor_refused`, written beside the result by another hook).
const LINGER: u32 = 8;

/// How many commands' calls the builder remembers, to name the call of
/// what ran under a command after the call has left.
const CALLS_KEPT: usize = 4096;

/// What the builder remembers of the last [`CALLS_KEPT`] commands, by the
/// seq of their `exec` entry; the oldest is forgotten first.
struct Recent<V> {
    by_seq: HashMap<u64, V>,
    order: VecDeque<u64>,
}

impl<V> Default for Recent<V> {
    fn default() -> Self {
        Recent {
            by_seq: HashMap::new(),
            order: VecDeque::new(),
        }
    }
}

impl<V> Recent<V> {
    fn insert(&mut self, seq: u64, value: V) {
        self.by_seq.insert(seq, value);
        self.order.push_back(seq);
        if self.order.len() > CALLS_KEPT
            && let Some(old) = self.order.pop_front()
        {
            self.by_seq.remove(&old);
        }
    }

    fn get(&self, seq: &u64) -> Option<&V> {
        self.by_seq.get(seq)
    }
}

/// What an entry nd7 wrote itself is about, as far as its kind tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ObservedClass {
    /// `nd7 allow` or `nd7 deny`.
    Grant,
    Refusal,
    Command,
    Session,
    /// A connection through the session's egress proxy it allowed (a
    /// refused one is a `Refusal`).
    Net,
    Other,
}

/// An entry whose `source` is not the agent's: nd7's own account, written
/// from outside the agent's reach. Kept whole.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Observed {
    #[serde(flatten)]
    pub at: At,
    pub source: String,
    pub kind: String,
    pub class: ObservedClass,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_use_id: Option<String>,
    /// Its scalar members, in one line.
    pub summary: String,
    pub body: Value,
    /// Evidence folded into the tool call it belongs to (or, for a
    /// transcript anchor, about the transcript): the default view leaves it
    /// to that call's row; `--full` and the NDJSON keep it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub folded: bool,
    /// For a `ran` entry: its execs by command, each a collapsed tree, but
    /// those folded into their call's row (`Tool::processes`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<Processes>,
    /// For a `ran` entry: when each of its commands had ended, by `exec`
    /// seq, as far as the log had said so by then (`ran::each` marks what
    /// ran after).
    #[serde(skip)]
    pub ended: Vec<(u64, u64)>,
}

impl Observed {
    /// When the command of `exec` seq had ended, as [`Observed::ended`]
    /// holds it.
    pub fn ended_at(&self, seq: u64) -> Option<u64> {
        self.ended.iter().find(|e| e.0 == seq).map(|e| e.1)
    }
}

/// What ran under one command (or under none) in a `ran` entry, shown on
/// the entry's row because the command's call had left the timeline.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Processes {
    #[serde(flatten)]
    pub group: super::ran::Group,
    /// The Bash call the command ran for, when the timeline saw it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call: Option<String>,
    /// That call's command, as the model gave it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_command: Option<String>,
}

/// Any other entry: a hook event this view has no shape for, kept whole.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Event {
    #[serde(flatten)]
    pub at: At,
    pub source: String,
    pub kind: String,
    pub event: Option<String>,
    pub summary: String,
    pub body: Value,
}

/// A line that is not an entry.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct UnreadableLine {
    pub line: u64,
    pub error: String,
    pub start: String,
}

/// Length of the one-line summaries of bodies.
const SUMMARY_LEN: usize = 160;

/// Tool-input members shown elsewhere, or too long for a one-line summary.
const INPUT_SHOWN_ELSEWHERE: &[&str] = &[
    "command",
    "description",
    "file_path",
    "notebook_path",
    "path",
    "filePath",
    "content",
    "old_string",
    "new_string",
    "new_source",
    "edits",
    "prompt",
];

/// The one line an entry nd7 wrote shows: its scalar members, after, for
/// a run's start, the rules it began with that a person looks for first
/// (the project and the grants), which are not scalars.
fn observed_summary(entry: &Entry) -> String {
    if entry.kind == crate::run_entry::NET {
        return net_summary(&entry.body);
    }
    if entry.kind == crate::run_entry::RUN_END {
        // Its `refused` counts callers the exit and the door turned away,
        // not tool calls: the header's "refused" are those.
        let mut body = entry.body.clone();
        if let Some(map) = body.as_object_mut()
            && let Some(n) = map.remove("refused")
        {
            map.insert("callers_refused".into(), n);
        }
        return entry::scalars(&body, SUMMARY_LEN);
    }
    if entry.kind == crate::run_entry::EXEC
        && let Some(model) = entry.body["command"]
            .as_str()
            .and_then(|c| crate::run_entry::bash_command(c.as_bytes()))
    {
        // The command as the model gave it, not Claude Code's shell wrapper
        // around it (cut off before the command); the NDJSON keeps it whole.
        let mut body = entry.body.clone();
        body["command"] = Value::String(model);
        body["wrapper"] = Value::String("Claude Code's shell line".into());
        return entry::scalars(&body, SUMMARY_LEN);
    }
    if entry.source == crate::effect::SOURCE && entry.kind == crate::effect::RAN {
        return ran_summary(&entry.body);
    }
    if entry.source == crate::effect::SOURCE && entry.kind == crate::effect::NOT_OBSERVED {
        return not_observed_summary(&entry.body);
    }
    let scalars = entry::scalars(&entry.body, SUMMARY_LEN);
    if entry.kind != crate::run_entry::RUN_START {
        return scalars;
    }
    let rules = &entry.body["rules"];
    let grants: Vec<&str> = rules["grants"]
        .as_array()
        .map(|g| g.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let grants = if grants.is_empty() {
        "none".to_string()
    } else {
        grants.join(",")
    };
    let line = format!(
        "project={} grants={grants} {scalars}",
        rules["project"].as_str().unwrap_or("?")
    );
    entry::cut(&line, SUMMARY_LEN).to_string()
}

/// The line a `not_observed` entry shows: that nothing ran observed in this
/// run (on macOS, or where the kernel refused the tracing), or how many
/// execs were stopped before they ran; and why.
fn not_observed_summary(body: &Value) -> String {
    let why = body["why"].as_str().unwrap_or("no reason given");
    let line = match body["count"].as_u64() {
        None => format!("what ran is not observed in this run: {why}"),
        Some(n) => format!(
            "{n} exec{} not observed: stopped at the exec, before running: {why}",
            plural(n, "", "s")
        ),
    };
    entry::cut(&line, SUMMARY_LEN).to_string()
}

/// The class of an entry nd7 wrote: a `net` entry's is its verdict's.
pub fn entry_class(entry: &Entry) -> ObservedClass {
    if entry.kind == crate::run_entry::NET {
        return match entry.body["verdict"].as_str() {
            Some("allowed") => ObservedClass::Net,
            _ => ObservedClass::Refusal,
        };
    }
    observed_class(&entry.kind)
}

/// The line a `net` entry shows: the host and port, the verdict and the
/// rule or reason, the address and the bytes.
fn net_summary(body: &Value) -> String {
    let n = |k: &str| body[k].as_u64().unwrap_or(0);
    let s = |k: &str| body[k].as_str().unwrap_or("?");
    let line = if body["verdict"] == "allowed" {
        format!(
            "{}:{} allowed by {} via {}, {} B up, {} B down, {} ms",
            s("host"),
            n("port"),
            s("rule"),
            body["address"].as_str().unwrap_or("no address"),
            n("bytes_up"),
            n("bytes_down"),
            n("duration_ms")
        )
    } else {
        format!(
            "{}:{} refused: {}{}",
            s("host"),
            n("port"),
            s("why"),
            body["allow"]
                .as_str()
                .map(|a| format!(" ({a})"))
                .unwrap_or_default()
        )
    };
    entry::cut(&line, SUMMARY_LEN).to_string()
}

/// The one line a `ran` entry shows: how many execs, the programs by how
/// often they ran (most first), and the commands through the exit they ran
/// under (by the seq of each one's `exec` entry).
fn ran_summary(body: &Value) -> String {
    let exes = body["exes"].as_array().cloned().unwrap_or_default();
    let execs = body["execs"].as_array().cloned().unwrap_or_default();
    let mut counts: Vec<(String, usize)> = Vec::new();
    let mut commands: Vec<u64> = Vec::new();
    for x in &execs {
        let name = match x["exe"].as_u64().and_then(|i| exes.get(i as usize)) {
            Some(exe) => {
                let path = exe[0].as_str().unwrap_or("?");
                super::ran::quoted(path.rsplit('/').next().unwrap_or(path))
            }
            None => "(not confirmed)".to_string(),
        };
        match counts.iter_mut().find(|(n, _)| *n == name) {
            Some((_, c)) => *c += 1,
            None => counts.push((name, 1)),
        }
        if let Some(seq) = x["command"].as_u64()
            && !commands.contains(&seq)
        {
            commands.push(seq);
        }
    }
    counts.sort_by_key(|c| std::cmp::Reverse(c.1));
    let programs: Vec<String> = counts
        .iter()
        .map(|(n, c)| {
            if *c > 1 {
                format!("{n} ×{c}")
            } else {
                n.clone()
            }
        })
        .collect();
    let under = if commands.is_empty() {
        String::new()
    } else {
        let seqs: Vec<String> = commands.iter().map(u64::to_string).collect();
        format!(" (under the commands of entries {})", seqs.join(", "))
    };
    let line = format!(
        "{} exec{}: {}{under}",
        execs.len(),
        plural(execs.len(), "", "s"),
        programs.join(", ")
    );
    // Cut, and said to be: the trees below list every program (ADR-0144).
    match entry::cut(&line, SUMMARY_LEN) {
        kept if kept.len() < line.len() => format!("{kept}…"),
        _ => line,
    }
}

/// The class of an entry nd7 wrote from outside the agent, read off its
/// kind. Extend here when the exit writes kinds this does not know; an
/// unknown kind is `Other`, and shown whole all the same.
pub fn observed_class(kind: &str) -> ObservedClass {
    let k = kind.to_ascii_lowercase();
    if k.contains("allow") || k.contains("deny") || k.contains("grant") {
        ObservedClass::Grant
    } else if k.contains("refus") {
        ObservedClass::Refusal
    } else if k.contains("command") || k.contains("exec") || k == "ran" {
        ObservedClass::Command
    } else if k.contains("session") || k.starts_with("run_") {
        ObservedClass::Session
    } else {
        ObservedClass::Other
    }
}

/// An item in the queue; `waiting` while it is a call expecting its result.
struct Slot {
    item: Item,
    waiting: bool,
    /// Entries still to come before a finished call of a run leaves.
    linger: u32,
}

/// The streaming builder: feed it entries in log order, take the items that
/// are ready, and finish it at the end of the log.
pub struct Builder {
    queue: VecDeque<Slot>,
    /// The item number of `queue[0]`.
    first: u64,
    /// Calls waiting for their result: tool_use_id → item number.
    waiting: HashMap<String, u64>,
    /// Calls that left without a result: tool_use_id → the call's seq.
    left: HashMap<String, u64>,
    /// Finished calls of a run still open for nd7's word: tool_use_id → item number.
    lingering: HashMap<String, u64>,
    /// `exec` entries folded into a call: their seq → the call's tool_use_id.
    execs: HashMap<u64, String>,
    /// The last [`CALLS_KEPT`] `exec` entries folded into a call, by seq:
    /// the call's tool_use_id and command, for what ran under it later.
    calls: Recent<(String, Option<String>)>,
    /// When the last [`CALLS_KEPT`] commands' `exec_end` entries were
    /// written, by their `exec` seq: what a command's process ran after
    /// that is not drawn as the call's (ADR-0144).
    ended: Recent<u64>,
    /// Turn ends so far: a call with none after it (before the next
    /// prompt) may still be running, or was stopped; one the turn ended
    /// without was passed over.
    progress: u64,
    /// Waiting calls: tool_use_id → `progress` when they were made.
    made_at: HashMap<String, u64>,
    /// The log is a run's chain (nd7 wrote an entry from outside).
    run: bool,
    hold_back: usize,
}

impl Default for Builder {
    fn default() -> Self {
        Builder::new()
    }
}

impl Builder {
    pub fn new() -> Builder {
        Builder::with_hold_back(HOLD_BACK)
    }

    /// A builder that lets at most `hold_back` items wait behind a call.
    pub fn with_hold_back(hold_back: usize) -> Builder {
        Builder {
            queue: VecDeque::new(),
            first: 0,
            waiting: HashMap::new(),
            left: HashMap::new(),
            lingering: HashMap::new(),
            execs: HashMap::new(),
            calls: Recent::default(),
            ended: Recent::default(),
            progress: 0,
            made_at: HashMap::new(),
            run: false,
            hold_back: hold_back.max(1),
        }
    }

    /// A line that could not be read as an entry.
    pub fn push_unreadable(&mut self, u: Unreadable) {
        self.ready(Item::Unreadable(UnreadableLine {
            line: u.line,
            error: u.error,
            start: u.start,
        }));
    }

    /// The next entry of the log.
    pub fn push(&mut self, entry: Entry) {
        self.age_lingering();
        if !entry.is_intent() {
            self.run |= entry.source == crate::run_entry::SOURCE;
            self.note_ended(&entry);
            let ran = entry.source == crate::effect::SOURCE && entry.kind == crate::effect::RAN;
            let (folded, processes) = if ran {
                self.fold_ran(&entry.body)
            } else {
                (self.fold(&entry), Vec::new())
            };
            let ended = if ran {
                self.ends_of(&entry.body)
            } else {
                Vec::new()
            };
            let item = Item::Observed(Observed {
                at: At::of(&entry),
                class: entry_class(&entry),
                tool_use_id: entry.tool_use_id.clone(),
                summary: observed_summary(&entry),
                source: entry.source,
                kind: entry.kind,
                body: entry.body,
                folded,
                processes,
                ended,
            });
            self.ready(item);
            return;
        }
        match entry.kind.as_str() {
            // The turn cannot end while one of its calls runs.
            "turn_end" => self.progress += 1,
            // A prompt before anything answered a call: the person stopped
            // it, or it still runs; it was not passed over.
            "prompt" => {
                let progress = self.progress;
                for at in self.made_at.values_mut() {
                    if *at == progress {
                        *at = u64::MAX;
                    }
                }
            }
            _ => {}
        }
        match entry.kind.as_str() {
            "session_start" => self.ready(Item::SessionStart(SessionStart {
                at: At::of(&entry),
                how: entry.str("source").map(str::to_string),
                model: entry.str("model").map(str::to_string),
                cwd: entry.cwd.clone(),
            })),
            "prompt" => match entry.str("prompt") {
                Some(text) => self.ready(Item::Prompt(Prompt {
                    at: At::of(&entry),
                    text: text.to_string(),
                })),
                None => self.event(entry),
            },
            "tool_call" => self.call(entry),
            "tool_result" => self.result(entry),
            "turn_end" => self.ready(Item::TurnEnd(TurnEnd {
                at: At::of(&entry),
                message: entry.str("last_assistant_message").map(str::to_string),
            })),
            "session_end" => self.ready(Item::SessionEnd(SessionEnd {
                at: At::of(&entry),
                reason: entry.str("reason").map(str::to_string),
            })),
            _ => match entry.event_name() {
                Some("SubagentStart") => self.subagent(entry, SubagentEvent::Start),
                Some("SubagentStop") => self.subagent(entry, SubagentEvent::Stop),
                Some("PermissionDenied") => self.refusal(entry),
                _ => self.event(entry),
            },
        }
    }

    /// Items ready to show, in order.
    pub fn take_ready(&mut self) -> impl Iterator<Item = Item> + '_ {
        std::iter::from_fn(move || {
            let front = self.queue.front()?;
            if front.waiting || front.linger > 0 {
                return None;
            }
            self.first += 1;
            self.queue.pop_front().map(|slot| slot.item)
        })
    }

    /// Everything left, at the end of the log: calls still waiting have no
    /// result (and one passed over by what came after it never ran).
    pub fn finish(mut self) -> Vec<Item> {
        let progress = self.progress;
        let run = self.run;
        let made_at = std::mem::take(&mut self.made_at);
        self.queue
            .drain(..)
            .map(|slot| {
                let mut item = slot.item;
                if slot.waiting
                    && let Item::Tool(tool) = &mut item
                {
                    let at = tool.tool_use_id.as_ref().and_then(|id| made_at.get(id));
                    never_ran(tool, at.copied(), progress, run);
                }
                item
            })
            .collect()
    }

    fn ready(&mut self, item: Item) {
        self.queue.push_back(Slot {
            item,
            waiting: false,
            linger: 0,
        });
        self.bound();
    }

    /// Lets the oldest waiting call leave once too much waits behind it.
    fn bound(&mut self) {
        if self.queue.len() <= self.hold_back {
            return;
        }
        let (progress, run) = (self.progress, self.run);
        if let Some(slot) = self.queue.front_mut() {
            slot.linger = 0;
            if slot.waiting
                && let Item::Tool(tool) = &mut slot.item
            {
                slot.waiting = false;
                if let Some(id) = tool.tool_use_id.clone() {
                    self.waiting.remove(&id);
                    let at = self.made_at.remove(&id);
                    never_ran(tool, at, progress, run);
                    self.left.insert(id, tool.at.seq);
                }
            }
        }
    }

    /// One entry more: finished calls of a run wait one entry less.
    fn age_lingering(&mut self) {
        let first = self.first;
        let queue = &mut self.queue;
        self.lingering
            .retain(|_, n| match queue.get_mut((*n - first) as usize) {
                Some(slot) if slot.linger > 0 => {
                    slot.linger -= 1;
                    slot.linger > 0
                }
                _ => false,
            });
    }

    /// A call waiting for its result, or finished and still open for nd7's
    /// word on it.
    fn open_mut(&mut self, id: &str) -> Option<&mut Tool> {
        let n = *self.waiting.get(id).or_else(|| self.lingering.get(id))?;
        match self.queue.get_mut((n - self.first) as usize)? {
            Slot {
                item: Item::Tool(tool),
                ..
            } => Some(tool),
            _ => None,
        }
    }

    /// Folds one of nd7's entries into the call it is about; whether it did.
    fn fold(&mut self, entry: &Entry) -> bool {
        use crate::run_entry::{EXEC, EXEC_END, FLOOR_REFUSED};
        let id = match entry.kind.as_str() {
            // Evidence about the transcript, not a call: --full shows it.
            crate::transcript::ANCHOR => return true,
            // The agent reaching its own API, allowed: one per model turn,
            // routine; --full shows it (any other connection stays a row).
            crate::run_entry::NET => {
                return entry.body["verdict"] == "allowed"
                    && entry.body["rule"]
                        .as_str()
                        .is_some_and(|r| r.ends_with(&format!("({})", crate::egress::AGENT_API)));
            }
            EXEC_END => entry.body["exec"]
                .as_u64()
                .and_then(|exec| self.execs.remove(&exec)),
            _ => entry.tool_use_id.clone(),
        };
        let Some(id) = id else {
            return false;
        };
        let kind = entry.kind.as_str();
        let seq = entry.seq;
        let Some(tool) = self.open_mut(&id) else {
            return false;
        };
        tool.evidence.push(seq);
        match kind {
            // nd7's exit ran the command of the Bash call it names: that call
            // went through nd7-exec (ADR-0040; before it, the rewritten
            // command in the result said so, see `complete`).
            EXEC => {
                tool.routed = true;
                let command = tool.command.clone();
                self.execs.insert(seq, id.clone());
                self.remember_call(seq, id, command);
            }
            FLOOR_REFUSED => {
                tool.status = Status::Refused;
                tool.refused_by = Some(RefusedBy::Nd7Sandbox);
                tool.refused_paths = RefusedPath::of(&entry.body).into();
            }
            _ => {}
        }
        true
    }

    /// When each command a `ran` body names had ended, where known.
    fn ends_of(&self, body: &Value) -> Vec<(u64, u64)> {
        let mut ends: Vec<(u64, u64)> = Vec::new();
        for x in body["execs"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
            if let Some(seq) = x["command"].as_u64()
                && let Some(&end) = self.ended.get(&seq)
                && !ends.contains(&(seq, end))
            {
                ends.push((seq, end));
            }
        }
        ends
    }

    /// Remembers when a command's `exec_end` (nd7's own) was written.
    fn note_ended(&mut self, entry: &Entry) {
        if entry.source != crate::run_entry::SOURCE || entry.kind != crate::run_entry::EXEC_END {
            return;
        }
        let Some(exec) = entry.body["exec"].as_u64() else {
            return;
        };
        self.ended.insert(exec, entry.ts);
    }

    fn remember_call(&mut self, exec: u64, id: String, command: Option<String>) {
        self.calls.insert(exec, (id, command));
    }

    /// Folds what a `ran` entry says ran under each command into the row of
    /// the command's call, while that call is still open. Returns whether
    /// all of it was folded, and the groups left to the entry's own row.
    fn fold_ran(&mut self, body: &Value) -> (bool, Vec<Processes>) {
        let mut left = Vec::new();
        let ended = |seq: u64| self.ended.get(&seq).copied();
        for group in super::ran::groups(body, &ended) {
            let call = group.command.and_then(|seq| self.calls.get(&seq).cloned());
            if let Some((id, _)) = &call
                && !group.after
                && let Some(tool) = self.open_mut(id)
            {
                tool.processes.push(group.tree);
                continue;
            }
            let (call, call_command) = call.map_or((None, None), |(id, c)| (Some(id), c));
            left.push(Processes {
                group,
                call,
                call_command,
            });
        }
        (left.is_empty(), left)
    }

    fn event(&mut self, entry: Entry) {
        let item = Item::Event(Event {
            at: At::of(&entry),
            event: entry.event_name().map(str::to_string),
            summary: entry::scalars(entry.payload(), SUMMARY_LEN),
            source: entry.source,
            kind: entry.kind,
            body: entry.body,
        });
        self.ready(item);
    }

    fn waiting_mut(&mut self, id: &str) -> Option<&mut Tool> {
        let n = *self.waiting.get(id)?;
        match self.queue.get_mut((n - self.first) as usize)? {
            Slot {
                item: Item::Tool(tool),
                waiting: true,
                ..
            } => Some(tool),
            _ => None,
        }
    }

    fn call(&mut self, entry: Entry) {
        let input = entry.payload().get("tool_input").unwrap_or(&Value::Null);
        let command = input
            .get("command")
            .and_then(Value::as_str)
            .map(str::to_string);
        let paths: Vec<String> = match entry.payload().get("paths") {
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
            _ => crate::hook::tool_paths(input),
        };
        let tool = Tool {
            command,
            call_seq: Some(entry.seq),
            ..Tool::stated(&entry, input, paths)
        };
        match tool.tool_use_id.clone() {
            Some(id) => {
                let n = self.first + self.queue.len() as u64;
                self.made_at.insert(id.clone(), self.progress);
                self.waiting.insert(id, n);
                self.queue.push_back(Slot {
                    item: Item::Tool(tool),
                    waiting: true,
                    linger: 0,
                });
                self.bound();
            }
            None => self.ready(Item::Tool(tool)),
        }
    }

    fn result(&mut self, entry: Entry) {
        let id = entry.tool_use().map(str::to_string);
        if let Some(id) = &id
            && self.waiting.contains_key(id)
        {
            let n = self.waiting.remove(id).unwrap_or_default();
            self.made_at.remove(id);
            if let Some(slot) = self.queue.get_mut((n - self.first) as usize)
                && let Item::Tool(tool) = &mut slot.item
            {
                complete(tool, &entry);
                slot.waiting = false;
                if self.run {
                    slot.linger = LINGER;
                    self.lingering.insert(id.clone(), n);
                }
            }
            return;
        }
        // No call waiting: the result stands alone.
        let input = entry.payload().get("tool_input").unwrap_or(&Value::Null);
        let mut tool = Tool {
            result_of: id.as_ref().and_then(|id| self.left.remove(id)),
            ..Tool::stated(&entry, input, crate::hook::tool_paths(input))
        };
        complete(&mut tool, &entry);
        self.ready(Item::Tool(tool));
    }

    fn refusal(&mut self, entry: Entry) {
        let reason = entry.str("reason").map(str::to_string);
        if let Some(id) = entry.tool_use().map(str::to_string)
            && let Some(tool) = self.waiting_mut(&id)
        {
            tool.status = Status::Refused;
            tool.refused_by = Some(RefusedBy::Permissions);
            tool.refusal_seq = Some(entry.seq);
            tool.reason = reason.or(tool.reason.take());
            return;
        }
        let item = Item::Refusal(Refusal {
            at: At::of(&entry),
            tool: entry.str("tool_name").map(str::to_string),
            tool_use_id: entry.tool_use().map(str::to_string),
            reason,
        });
        self.ready(item);
    }

    fn subagent(&mut self, entry: Entry, event: SubagentEvent) {
        let agent_type = entry.str("agent_type").map(str::to_string);
        let parent = match event {
            SubagentEvent::Start => self.spawning_call(agent_type.as_deref()),
            SubagentEvent::Stop => None,
        };
        let item = Item::Subagent(Subagent {
            at: At::of(&entry),
            event,
            id: entry.str("agent_id").map(str::to_string),
            agent_type,
            parent,
            message: entry.str("last_assistant_message").map(str::to_string),
        });
        self.ready(item);
    }

    /// The waiting Task/Agent call of the main agent that a subagent of
    /// `agent_type` was started by: the only one, or the only one asking for
    /// that type. `None` when it cannot be told.
    fn spawning_call(&self, agent_type: Option<&str>) -> Option<String> {
        let spawning: Vec<&Tool> = self
            .queue
            .iter()
            .filter_map(|s| match &s.item {
                Item::Tool(t)
                    if s.waiting
                        && t.at.agent.is_none()
                        && matches!(t.tool.as_str(), "Task" | "Agent") =>
                {
                    Some(t)
                }
                _ => None,
            })
            .collect();
        let pick = |ts: Vec<&Tool>| match ts.as_slice() {
            [one] => one.tool_use_id.clone(),
            _ => None,
        };
        if spawning.len() == 1 {
            return pick(spawning);
        }
        let of_type = spawning
            .into_iter()
            .filter(|t| {
                t.input
                    .as_deref()
                    .zip(agent_type)
                    .is_some_and(|(i, ty)| i.contains(&format!("subagent_type={ty}")))
            })
            .collect();
        pick(of_type)
    }
}

/// A call that leaves with no result: when its turn ended after it,
/// before any prompt, (`progress` past `made_at`) and, in a run, no command went
/// through the exit for it, Claude Code never ran it: its permissions (or a
/// hook) refused it. Otherwise it may still be running, or the agent died.
fn never_ran(tool: &mut Tool, made_at: Option<u64>, progress: u64, run: bool) {
    let passed_over = made_at.is_some_and(|at| at != u64::MAX && progress > at);
    if tool.status != Status::NoResult || !passed_over || tool.routed {
        return;
    }
    tool.status = Status::Refused;
    tool.refused_by = Some(RefusedBy::Permissions);
    tool.reason = Some(if run {
        "never ran: no result, and no command through nd7-exec; Claude Code's permissions refused it (fix: an allow rule in Claude Code's settings, or ask for it in the prompt)".into()
    } else {
        "never ran: no result while the session went on; Claude Code's permissions refused it, or it was stopped (fix: an allow rule in Claude Code's settings)".into()
    });
}

/// Fills a tool item from its result entry.
fn complete(tool: &mut Tool, result: &Entry) {
    let payload = result.payload();
    tool.result_seq = Some(result.seq);
    tool.end_ts = Some(result.ts);
    if tool.tool == "?"
        && let Some(name) = result.str("tool_name")
    {
        tool.tool = name.to_string();
    }
    tool.duration_ms = payload
        .get("duration_ms")
        .and_then(Value::as_f64)
        .or_else(|| {
            let call = tool.call_seq.map(|_| tool.at.ts)?;
            Some(result.ts.checked_sub(call)? as f64 / 1e6)
        });
    let ran = payload
        .get("tool_input")
        .and_then(|i| i.get("command"))
        .and_then(Value::as_str);
    if let Some(ran) = ran {
        match entry::routed_original(ran) {
            Some(original) => {
                tool.routed = true;
                if tool.command.is_none() {
                    tool.command = Some(original);
                }
            }
            None if tool.command.is_none() => tool.command = Some(ran.to_string()),
            None if tool.command.as_deref() != Some(ran) => tool.ran = Some(ran.to_string()),
            None => {}
        }
    }
    let ok = payload.get("ok").and_then(Value::as_bool);
    let interrupted = payload.get("is_interrupt").and_then(Value::as_bool) == Some(true);
    if ok == Some(true) {
        if tool.status != Status::Refused {
            tool.status = Status::Ok;
        }
        if tool.tool == "Bash" {
            tool.exit_code = Some(0);
        }
        tool.output = payload.get("tool_response").and_then(output_of);
        return;
    }
    if tool.status != Status::Refused {
        tool.status = if interrupted {
            Status::Interrupted
        } else {
            Status::Failed
        };
    }
    let error = payload.get("error").and_then(Value::as_str).unwrap_or("");
    match entry::exit_code_of(error) {
        Some((code, rest)) => {
            tool.exit_code = Some(code);
            tool.output = (!rest.is_empty()).then(|| rest.to_string());
        }
        None => {
            let (first, rest) = error.split_once('\n').unwrap_or((error, ""));
            if tool.reason.is_none() && !first.is_empty() {
                tool.reason = Some(first.to_string());
            }
            tool.output = (!rest.is_empty()).then(|| rest.to_string());
        }
    }
    if tool.output.is_none() {
        tool.output = payload.get("tool_response").and_then(output_of);
    }
}

/// A response as text; an edit's patch as its diff lines.
fn output_of(response: &Value) -> Option<String> {
    if let Some(Value::Array(hunks)) = response.get("structuredPatch")
        && !hunks.is_empty()
    {
        let mut out = String::new();
        for hunk in hunks {
            if let (Some(o), Some(n)) = (hunk.get("oldStart"), hunk.get("newStart")) {
                out.push_str(&format!("@@ -{o} +{n} @@\n"));
            }
            for line in hunk
                .get("lines")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                out.push_str(line.as_str().unwrap_or(""));
                out.push('\n');
            }
        }
        return Some(out.trim_end_matches('\n').to_string());
    }
    entry::response_text(response).filter(|t| !t.is_empty())
}

/// A tool input's members not shown as command, description or paths, in
/// one line; `None` when there are none.
fn other_inputs(input: &Value) -> Option<String> {
    let Value::Object(o) = input else {
        return None;
    };
    let rest: serde_json::Map<String, Value> = o
        .iter()
        .filter(|(k, _)| !INPUT_SHOWN_ELSEWHERE.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let line = entry::scalars(&Value::Object(rest), SUMMARY_LEN);
    (!line.is_empty()).then_some(line)
}

/// Builds the whole timeline of `lines` at once (tests, and small logs).
pub fn build<'a>(lines: impl IntoIterator<Item = &'a [u8]>) -> Vec<Item> {
    let mut builder = Builder::new();
    let mut out = Vec::new();
    for (i, line) in lines.into_iter().enumerate() {
        match Entry::parse(line, i as u64 + 1) {
            Ok(entry) => builder.push(entry),
            Err(u) => builder.push_unreadable(u),
        }
        out.extend(builder.take_ready());
    }
    out.extend(builder.finish());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn line(seq: u64, kind: &str, tool_use_id: Option<&str>, body: Value) -> Vec<u8> {
        line_from(seq, "intent:claude-code", kind, tool_use_id, body)
    }

    fn line_from(
        seq: u64,
        source: &str,
        kind: &str,
        tool_use_id: Option<&str>,
        body: Value,
    ) -> Vec<u8> {
        let mut v = json!({"seq": seq, "ts": 1_000_000_000 * (seq + 1), "host": "h", "cwd": "/p",
                           "session": "s", "source": source, "kind": kind, "body": body});
        if let Some(id) = tool_use_id {
            v["tool_use_id"] = json!(id);
        }
        v.to_string().into_bytes()
    }

    fn bash_call(seq: u64, id: &str, command: &str) -> Vec<u8> {
        line(
            seq,
            "tool_call",
            Some(id),
            json!({"hook_event_name": "PreToolUse", "tool_name": "Bash",
                   "tool_input": {"command": command, "description": "d"}, "tool_use_id": id,
                   "argv": [], "paths": []}),
        )
    }

    fn bash_ok(seq: u64, id: &str, command: &str, stdout: &str) -> Vec<u8> {
        line(
            seq,
            "tool_result",
            Some(id),
            json!({"hook_event_name": "PostToolUse", "tool_name": "Bash",
                   "tool_input": {"command": command}, "tool_use_id": id,
                   "tool_response": {"stdout": stdout, "stderr": ""}, "duration_ms": 12, "ok": true}),
        )
    }

    fn bash_failed(seq: u64, id: &str, error: &str) -> Vec<u8> {
        line(
            seq,
            "tool_result",
            Some(id),
            json!({"hook_event_name": "PostToolUseFailure", "tool_name": "Bash",
                   "tool_input": {"command": "x"}, "tool_use_id": id, "error": error, "ok": false}),
        )
    }

    fn run(lines: &[Vec<u8>]) -> Vec<Item> {
        build(lines.iter().map(Vec::as_slice))
    }

    fn tools(items: &[Item]) -> Vec<&Tool> {
        items
            .iter()
            .filter_map(|i| match i {
                Item::Tool(t) => Some(t),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn calls_pair_with_results_in_call_order_even_when_results_cross() {
        let items = run(&[
            bash_call(0, "a", "echo a"),
            bash_call(1, "b", "false"),
            bash_failed(2, "b", "Exit code 1\nno"),
            bash_ok(3, "a", "echo a", "a"),
        ]);
        let t = tools(&items);
        assert_eq!(t.len(), 2, "{items:?}");
        assert_eq!(t[0].command.as_deref(), Some("echo a"));
        assert_eq!(t[0].status, Status::Ok);
        assert_eq!(t[0].exit_code, Some(0));
        assert_eq!(t[0].output.as_deref(), Some("a"));
        assert_eq!(t[0].result_seq, Some(3));
        assert_eq!(t[0].duration_ms, Some(12.0));
        assert_eq!(t[1].status, Status::Failed);
        assert_eq!(t[1].exit_code, Some(1));
        assert_eq!(t[1].output.as_deref(), Some("no"));
        // Duration from the timestamps when the result does not say.
        assert_eq!(t[1].duration_ms, Some(1000.0));
    }

    /// nd7's word on a call folds into it whether it comes before the
    /// result or just after it (another hook writes it beside the result);
    /// each entry is still an item of its own, marked folded.
    #[test]
    fn nd7s_entries_fold_into_their_call_before_or_after_its_result() {
        let refused = json!({"tool": "Bash", "paths": [
            {"path": "/o/x", "why": "outside", "allow": "nd7 allow /o"}]});
        let ours = |seq, kind: &str, id: Option<&str>, body: Value| {
            line_from(seq, "exit:nd7", kind, id, body)
        };
        for after in [false, true] {
            let mut lines = vec![
                ours(0, "run_start", None, json!({})),
                bash_call(1, "a", "mkdir /o/x"),
                ours(
                    2,
                    "exec",
                    Some("a"),
                    json!({"command": "wrapped mkdir /o/x"}),
                ),
                ours(3, "exec_end", None, json!({"exec": 2, "exited": 1})),
            ];
            let result = bash_failed(4, "a", "Exit code 1\nmkdir: Permission denied");
            let word = ours(5, "floor_refused", Some("a"), refused.clone());
            if after {
                lines.extend([result, word]);
            } else {
                lines.extend([word, result]);
            }
            let items = run(&lines);
            let t = tools(&items);
            assert_eq!(t[0].status, Status::Refused, "after={after}");
            assert_eq!(t[0].refused_by, Some(RefusedBy::Nd7Sandbox));
            assert_eq!(t[0].refused_paths[0].fix.as_deref(), Some("nd7 allow /o"));
            assert!(t[0].routed);
            assert_eq!(t[0].evidence.len(), 3, "exec, exec_end, floor_refused");
            let folded = items
                .iter()
                .filter(|i| matches!(i, Item::Observed(o) if o.folded))
                .count();
            assert_eq!(folded, 3, "after={after}: {items:?}");
        }
    }

    /// The agent's own API connections, allowed, fold (one per model
    /// turn); any other connection, or a refused one, stays a row.
    #[test]
    fn only_the_agents_allowed_api_connections_fold() {
        let net = |seq, verdict: &str, rule: &str| {
            line_from(
                seq,
                "effect:nd7-proxy",
                "net",
                None,
                json!({"verdict": verdict, "rule": rule}),
            )
        };
        let items = run(&[
            net(0, "allowed", "127.0.0.1:443 (agent API)"),
            net(1, "allowed", "registry.npmjs.org:443 (preset npm)"),
            net(2, "refused", "127.0.0.1:443 (agent API)"),
        ]);
        let folded: Vec<bool> = items
            .iter()
            .map(|i| matches!(i, Item::Observed(o) if o.folded))
            .collect();
        assert_eq!(folded, [true, false, false]);
    }

    /// A call passed over (its turn ended without its result, and no
    /// command went through the exit) never ran: Claude Code refused it. A
    /// call that only a prompt or other results followed was stopped, or
    /// still runs.
    #[test]
    fn a_call_passed_over_was_refused_by_claude_codes_permissions() {
        let turn_end = |seq| {
            line(
                seq,
                "turn_end",
                None,
                json!({"last_assistant_message": "ok"}),
            )
        };
        let items = run(&[
            bash_call(0, "denied", "touch x"),
            bash_call(1, "b", "ls"),
            bash_ok(2, "b", "ls", ""),
            turn_end(3),
        ]);
        let t = tools(&items);
        assert_eq!(t[0].status, Status::Refused);
        assert_eq!(t[0].refused_by, Some(RefusedBy::Permissions));
        // Other calls' results alone say nothing: it may still run (a Task,
        // a call beside others), as in a session being recorded now.
        let items = run(&[
            bash_call(0, "long", "sleep 99"),
            bash_call(1, "b", "ls"),
            bash_ok(2, "b", "ls", ""),
        ]);
        assert_eq!(tools(&items)[0].status, Status::NoResult);
        let items = run(&[
            bash_call(0, "stopped", "sleep 9"),
            line(1, "prompt", None, json!({"prompt": "no, stop"})),
            bash_call(2, "b", "ls"),
            bash_ok(3, "b", "ls", ""),
        ]);
        assert_eq!(tools(&items)[0].status, Status::NoResult);
    }

    #[test]
    fn a_call_without_result_holds_back_what_follows_until_the_end() {
        let mut b = Builder::new();
        b.push(Entry::parse(&bash_call(0, "a", "sleep 9"), 1).expect("entry"));
        b.push(
            Entry::parse(&line(1, "prompt", None, json!({"prompt": "next"})), 2).expect("entry"),
        );
        assert_eq!(b.take_ready().count(), 0);
        let rest = b.finish();
        assert_eq!(rest.len(), 2);
        assert!(matches!(&rest[0], Item::Tool(t) if t.status == Status::NoResult));
    }

    #[test]
    fn hold_back_is_bounded_and_a_late_result_names_its_call() {
        let mut lines = vec![bash_call(0, "slow", "sleep 100")];
        for i in 1..=5 {
            lines.push(line(i, "prompt", None, json!({"prompt": format!("p{i}")})));
        }
        lines.push(bash_ok(6, "slow", "sleep 100", "done"));
        let mut b = Builder::with_hold_back(3);
        let mut items = Vec::new();
        for (i, l) in lines.iter().enumerate() {
            b.push(Entry::parse(l, i as u64 + 1).expect("entry"));
            items.extend(b.take_ready());
        }
        items.extend(b.finish());
        assert_eq!(items.len(), 7, "nothing lost: {items:?}");
        let t = tools(&items);
        assert_eq!(t[0].status, Status::NoResult);
        assert_eq!(t[1].result_of, Some(0));
        assert_eq!(t[1].status, Status::Ok);
    }

    #[test]
    fn routed_commands_show_the_original_and_say_so() {
        let routed = crate::shell_prefix::routed_command("/x/nd7-exec", "ls -la");
        let items = run(&[bash_call(0, "a", "ls -la"), bash_ok(1, "a", &routed, "")]);
        let t = tools(&items);
        assert!(t[0].routed);
        assert_eq!(t[0].command.as_deref(), Some("ls -la"));
        assert_eq!(t[0].ran, None);
        assert_eq!(t[0].output, None);
        // Another hook's rewrite is shown as what ran.
        let items = run(&[bash_call(0, "a", "ls"), bash_ok(1, "a", "ls; id", "")]);
        assert_eq!(tools(&items)[0].ran.as_deref(), Some("ls; id"));
        assert!(!tools(&items)[0].routed);
        // Through the shell prefix, the exit's own `exec` entry names the call.
        let exec =
            |seq, id: &str| line_from(seq, "exit:nd7", "exec", Some(id), json!({"command": "…"}));
        let items = run(&[
            bash_call(0, "a", "ls"),
            exec(1, "a"),
            bash_ok(2, "a", "ls", ""),
            bash_call(3, "b", "id"),
            exec(4, "other"),
            bash_ok(5, "b", "id", ""),
        ]);
        let t = tools(&items);
        assert!(t[0].routed && !t[1].routed, "{t:?}");
        assert_eq!(t[0].ran, None);
    }

    #[test]
    fn refusals_mark_their_call_or_stand_alone() {
        let denied = |seq, id: &str| {
            line(
                seq,
                "hook",
                Some(id),
                json!({"hook_event_name": "PermissionDenied",
                       "raw": {"hook_event_name": "PermissionDenied", "tool_name": "Bash",
                               "tool_use_id": id, "reason": "not allowed"}}),
            )
        };
        let items = run(&[
            bash_call(0, "a", "rm -rf /"),
            denied(1, "a"),
            denied(2, "zz"),
        ]);
        let t = tools(&items);
        assert_eq!(t[0].status, Status::Refused);
        assert_eq!(t[0].reason.as_deref(), Some("not allowed"));
        assert_eq!(t[0].refusal_seq, Some(1));
        assert!(matches!(&items[1], Item::Refusal(r) if r.tool_use_id.as_deref() == Some("zz")));
    }

    #[test]
    fn subagents_are_placed_under_the_call_that_started_them() {
        let items = run(&[
            line(
                0,
                "tool_call",
                Some("task"),
                json!({"hook_event_name": "PreToolUse", "tool_name": "Task", "tool_use_id": "task",
                       "tool_input": {"description": "look", "prompt": "p", "subagent_type": "Explore"}}),
            ),
            line(
                1,
                "hook",
                None,
                json!({"hook_event_name": "SubagentStart",
                       "raw": {"hook_event_name": "SubagentStart", "agent_id": "ag1", "agent_type": "Explore"}}),
            ),
            line(
                2,
                "tool_call",
                Some("in"),
                json!({"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_use_id": "in",
                       "agent_id": "ag1", "tool_input": {"command": "ls"}}),
            ),
            line(
                3,
                "tool_result",
                Some("in"),
                json!({"hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_use_id": "in",
                       "agent_id": "ag1", "tool_input": {"command": "ls"}, "tool_response": {"stdout": "f"}, "ok": true}),
            ),
        ]);
        let Item::Subagent(s) = &items[1] else {
            panic!("{items:?}")
        };
        assert_eq!(s.parent.as_deref(), Some("task"));
        assert_eq!(s.id.as_deref(), Some("ag1"));
        assert_eq!(s.at.agent, None);
        let inner = tools(&items)[1];
        assert_eq!(inner.at.agent.as_deref(), Some("ag1"));
        assert_eq!(inner.status, Status::Ok);
    }

    #[test]
    fn unknown_kinds_sources_and_lines_are_all_kept() {
        let items = run(&[
            line(0, "brand_new_kind", None, json!({"x": 1})),
            line_from(1, "nd7:exit", "allow", None, json!({"path": "/data"})),
            line_from(
                2,
                "nd7:exit",
                "command_end",
                Some("t"),
                json!({"status": 0}),
            ),
            line_from(
                3,
                "effect:kernel",
                "file_open",
                None,
                json!({"path": "/etc"}),
            ),
            line(
                4,
                "hook",
                None,
                json!({"hook_event_name": "Notification", "raw": {"message": "hi"}}),
            ),
            b"garbage".to_vec(),
        ]);
        assert_eq!(items.len(), 6, "{items:?}");
        assert!(matches!(&items[0], Item::Event(e) if e.kind == "brand_new_kind"));
        assert!(
            matches!(&items[1], Item::Observed(o) if o.class == ObservedClass::Grant && o.summary == "path=/data")
        );
        assert!(
            matches!(&items[2], Item::Observed(o) if o.class == ObservedClass::Command && o.tool_use_id.as_deref() == Some("t"))
        );
        assert!(matches!(&items[3], Item::Observed(o) if o.class == ObservedClass::Other));
        assert!(
            matches!(&items[4], Item::Event(e) if e.event.as_deref() == Some("Notification") && e.summary == "message=hi")
        );
        assert!(matches!(&items[5], Item::Unreadable(u) if u.line == 6));
    }

    fn ran_under(seq: u64, command: u64, pid: u64) -> Vec<u8> {
        line_from(
            seq,
            "effect:nd7",
            "ran",
            None,
            json!({"exes": [["/usr/bin/bash", "1:2", "a"], ["/usr/bin/true", "1:3", "b"]],
                   "execs": [
                       {"pid": pid, "ppid": 1, "exe": 0, "argv": ["bash"], "command": command},
                       {"pid": pid + 1, "ppid": pid, "exe": 1, "argv": ["true"], "command": command},
                       {"pid": pid + 2, "ppid": pid, "exe": 1, "argv": ["true"], "command": command}]}),
        )
    }

    /// What ran under a command goes on its call's row while the call is
    /// open; once the call has left, the `ran` entry's own row names the
    /// call and its command. Either way it is drawn as a collapsed tree.
    #[test]
    fn what_ran_shows_under_its_call_or_names_it() {
        let exec = |seq: u64, id: &str| {
            line_from(
                seq,
                "exit:nd7",
                "exec",
                Some(id),
                json!({"command": "make"}),
            )
        };
        let mut lines = vec![
            line_from(0, "exit:nd7", "run_start", None, json!({"hooks": true})),
            bash_call(1, "a", "make"),
            exec(2, "a"),
            ran_under(3, 2, 10),
            bash_ok(4, "a", "make", ""),
            bash_call(5, "b", "make"),
            exec(6, "b"),
            bash_ok(7, "b", "make", ""),
        ];
        // The call's row is open for LINGER entries after its result.
        for seq in 8..8 + u64::from(LINGER) {
            lines.push(line(
                seq,
                "hook",
                None,
                json!({"hook_event_name": "Notification"}),
            ));
        }
        lines.push(ran_under(20, 6, 30));
        let items = run(&lines);
        let t = tools(&items);
        assert_eq!(t[0].processes, ["bash → true ×2"], "{items:?}");
        assert!(t[1].processes.is_empty(), "{items:?}");
        let rows: Vec<&Observed> = items
            .iter()
            .filter_map(|i| match i {
                Item::Observed(o) if o.kind == "ran" => Some(o),
                _ => None,
            })
            .collect();
        assert!(rows[0].folded && rows[0].processes.is_empty(), "{rows:?}");
        assert!(!rows[1].folded, "{rows:?}");
        let p = &rows[1].processes[0];
        assert_eq!(
            (
                p.call.as_deref(),
                p.call_command.as_deref(),
                p.group.tree.as_str()
            ),
            (Some("b"), Some("make"), "bash → true ×2")
        );
    }

    /// A run in which nothing is observed (macOS, or a kernel that refused
    /// the tracing) says so on the `not_observed` row, with why; execs
    /// stopped past the observer's bound are counted.
    #[test]
    fn a_run_that_observes_nothing_says_so() {
        let items = run(&[
            line_from(
                0,
                "effect:nd7",
                "not_observed",
                None,
                json!({"count": null, "why": "this system has no way for an unprivileged program to observe execs"}),
            ),
            line_from(
                1,
                "effect:nd7",
                "not_observed",
                None,
                json!({"count": 3, "why": "past its bound"}),
            ),
        ]);
        let said: Vec<&str> = items
            .iter()
            .filter_map(|i| match i {
                Item::Observed(o) => Some(o.summary.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(
            said,
            [
                "what ran is not observed in this run: this system has no way for an unprivileged program to observe execs",
                "3 execs not observed: stopped at the exec, before running: past its bound",
            ]
        );
    }

    /// A run's start shows the project and grants it began with, which
    /// the body's scalars leave out.
    #[test]
    fn a_run_start_shows_its_project_and_grants() {
        let rules = |grants: Value| json!({"pid": 7, "rules": {"project": "/p", "grants": grants}, "hooks": true});
        let items = run(&[
            line_from(0, "exit:nd7", "run_start", None, rules(json!(["/a", "/b"]))),
            line_from(1, "exit:nd7", "run_start", None, rules(json!([]))),
        ]);
        assert!(
            matches!(&items[0], Item::Observed(o) if o.class == ObservedClass::Session && o.summary == "project=/p grants=/a,/b pid=7 hooks=true"),
            "{items:?}"
        );
        assert!(
            matches!(&items[1], Item::Observed(o) if o.summary == "project=/p grants=none pid=7 hooks=true"),
            "{items:?}"
        );
    }

    #[test]
    fn what_ran_shows_its_programs_by_count_and_its_commands() {
        let body = json!({
            "exes": [["/usr/bin/cc", "1:2", "ab"], ["/usr/bin/make", "1:3", "cd"]],
            "execs": [
                {"pid": 1, "ppid": 0, "t": 1, "exe": 1, "argv": ["make"], "cwd": "/p", "command": 4},
                {"pid": 2, "ppid": 1, "t": 2, "exe": 0, "argv": ["cc"], "cwd": "/p", "command": 4},
                {"pid": 3, "ppid": 1, "t": 3, "exe": 0, "argv": ["cc"], "cwd": "/p", "command": 4},
                {"pid": 4, "ppid": 1, "t": 4, "confirmed": false, "argv": [], "cwd": null}
            ]
        });
        let items = run(&[line_from(5, "effect:nd7", "ran", None, body)]);
        assert!(
            matches!(
                &items[0],
                Item::Observed(o) if o.summary == "4 execs: cc ×2, make, (not confirmed) (under the commands of entries 4)"
            ),
            "{items:?}"
        );
    }

    #[test]
    fn edits_show_their_patch() {
        let items = run(&[
            line(
                0,
                "tool_call",
                Some("e"),
                json!({"hook_event_name": "PreToolUse", "tool_name": "Edit", "tool_use_id": "e",
                       "tool_input": {"file_path": "/p/a.rs", "old_string": "a", "new_string": "b"},
                       "paths": ["/p/a.rs"]}),
            ),
            line(
                1,
                "tool_result",
                Some("e"),
                json!({"hook_event_name": "PostToolUse", "tool_name": "Edit", "tool_use_id": "e",
                       "tool_response": {"filePath": "/p/a.rs", "originalFile": "a\n",
                          "structuredPatch": [{"oldStart": 1, "newStart": 1, "lines": ["-a", "+b"]}]},
                       "ok": true}),
            ),
        ]);
        let t = tools(&items);
        assert_eq!(t[0].paths, vec!["/p/a.rs".to_string()]);
        assert_eq!(t[0].input, None);
        assert_eq!(t[0].output.as_deref(), Some("@@ -1 +1 @@\n-a\n+b"));
    }
}
