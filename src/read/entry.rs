//! One line of a session log, read back for a person: the envelope's members
//! and the body, with the few readings of a body every view needs. Pure.
//!
//! Reading is lenient where writing is strict: a member this build does not
//! know is kept in `body`, a missing one is `None`, and a line that is not an
//! entry at all is reported (with its line number) rather than skipped.

use serde::Deserialize;
use serde_json::Value;

/// The `source` prefix of entries recorded from an agent's hooks: what the
/// agent said it would do and reported back.
pub const INTENT: &str = "intent:";

/// One entry, as the log states it. Nothing here is checked against the
/// chain; that is `nd7 verify`'s job, and every view reports its verdict.
#[derive(Clone, Debug, Deserialize)]
pub struct Entry {
    pub seq: u64,
    pub ts: u64,
    #[serde(default)]
    pub host: Option<String>,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub tool_use_id: Option<String>,
    #[serde(default)]
    pub source: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub body: Value,
}

/// A line that could not be read as an entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unreadable {
    /// 1-based line number in the file.
    pub line: u64,
    pub error: String,
    /// The line's first bytes, lossily decoded.
    pub start: String,
}

/// How many bytes of an unreadable line are kept to show.
const UNREADABLE_SHOWN: usize = 200;

impl Entry {
    /// Reads one line (without its newline). `line` is its 1-based number.
    pub fn parse(text: &[u8], line: u64) -> Result<Entry, Unreadable> {
        serde_json::from_slice(text).map_err(|e| Unreadable {
            line,
            error: e.to_string(),
            start: String::from_utf8_lossy(&text[..text.len().min(UNREADABLE_SHOWN)]).into_owned(),
        })
    }

    /// Whether the entry came from an agent's hooks (`intent:…`) rather than
    /// from nd7 itself, outside the agent's reach.
    pub fn is_intent(&self) -> bool {
        self.source.starts_with(INTENT)
    }

    /// The agent named by an `intent:<agent>` source.
    pub fn agent(&self) -> Option<&str> {
        self.source.strip_prefix(INTENT).filter(|a| !a.is_empty())
    }

    /// The payload as the hook sent it: the body itself for the six typed
    /// kinds, `body.raw` for `hook` entries.
    pub fn payload(&self) -> &Value {
        match self.body.get("raw") {
            Some(raw) if self.kind == "hook" => raw,
            _ => &self.body,
        }
    }

    /// `hook_event_name`, wherever the body keeps it.
    pub fn event_name(&self) -> Option<&str> {
        self.body
            .get("hook_event_name")
            .and_then(Value::as_str)
            .or_else(|| {
                self.payload()
                    .get("hook_event_name")
                    .and_then(Value::as_str)
            })
    }

    /// A string member of the payload.
    pub fn str(&self, name: &str) -> Option<&str> {
        self.payload().get(name).and_then(Value::as_str)
    }

    /// The tool use this entry belongs to: the envelope's, else the payload's.
    pub fn tool_use(&self) -> Option<&str> {
        self.tool_use_id
            .as_deref()
            .or_else(|| self.str("tool_use_id"))
    }

    /// The subagent the entry was recorded in; `None` in the main agent.
    pub fn agent_id(&self) -> Option<&str> {
        // SubagentStart and SubagentStop name the subagent they are about;
        // they are placed in the agent that started it.
        match self.event_name() {
            Some("SubagentStart" | "SubagentStop") => None,
            _ => self.str("agent_id"),
        }
    }
}

/// The original command of a Bash call routed through `nd7-exec`, given the
/// command as it ran: `'<dir>/nd7-exec' '<original>'`, both words quoted as
/// `nd7 hook-prefix` quotes them. `None` for any other command.
pub fn routed_original(ran: &str) -> Option<String> {
    let words = shlex::split(ran)?;
    match words.as_slice() {
        [exec, original]
            if ran.starts_with('\'') && (exec.ends_with("/nd7-exec") || exec == "nd7-exec") =>
        {
            Some(original.clone())
        }
        _ => None,
    }
}

/// The exit code Claude Code states at the start of a failed Bash call's
/// `error` ("Exit code 7\n…"), and the rest of the text.
pub fn exit_code_of(error: &str) -> Option<(i64, &str)> {
    let rest = error.strip_prefix("Exit code ")?;
    let end = rest
        .find(|c: char| !c.is_ascii_digit() && c != '-')
        .unwrap_or(rest.len());
    let code = rest[..end].parse().ok()?;
    let tail = rest[end..].strip_prefix('\n').unwrap_or(&rest[end..]);
    Some((code, tail))
}

/// A tool's response as text: a Bash call's stdout and stderr, a string
/// response as it is, a file's content, or else the JSON as it stands.
pub fn response_text(response: &Value) -> Option<String> {
    match response {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => {
            if let Some(stdout) = o.get("stdout").and_then(Value::as_str) {
                let stderr = o.get("stderr").and_then(Value::as_str).unwrap_or("");
                return Some(match (stdout.is_empty(), stderr.is_empty()) {
                    (_, true) => stdout.to_string(),
                    (true, false) => stderr.to_string(),
                    (false, false) => format!("{stdout}\n{stderr}"),
                });
            }
            if let Some(content) = o.get("content").and_then(Value::as_str) {
                return Some(content.to_string());
            }
            if let Some(content) = o
                .get("file")
                .and_then(|f| f.get("content"))
                .and_then(Value::as_str)
            {
                return Some(content.to_string());
            }
            Some(response.to_string())
        }
        other => Some(other.to_string()),
    }
}

/// Payload members every hook event carries, which say where and when rather
/// than what: left out of one-line summaries.
pub const COMMON_MEMBERS: &[&str] = &[
    "session_id",
    "transcript_path",
    "cwd",
    "hook_event_name",
    "permission_mode",
    "prompt_id",
];

/// A value's scalar members as `name=value`, for a one-line summary of a body
/// this build has no view of; the [`COMMON_MEMBERS`] left out. Long values
/// are cut.
pub fn scalars(value: &Value, limit: usize) -> String {
    let Value::Object(o) = value else {
        return cut(&value.to_string(), limit).to_string();
    };
    let mut out = String::new();
    for (name, v) in o
        .iter()
        .filter(|(k, _)| !COMMON_MEMBERS.contains(&k.as_str()))
    {
        let text = match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            _ => continue,
        };
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(name);
        out.push('=');
        out.push_str(&text);
        if out.len() >= limit {
            break;
        }
    }
    cut(&out, limit).to_string()
}

/// `text` cut to at most `limit` bytes, at a character boundary.
pub fn cut(text: &str, limit: usize) -> &str {
    if text.len() <= limit {
        return text;
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routed_commands_give_back_the_original() {
        let ran = crate::hook_prefix::routed_command("/opt/nd7/nd7-exec", "echo 'hi' $HOME");
        assert_eq!(routed_original(&ran).as_deref(), Some("echo 'hi' $HOME"));
        assert_eq!(routed_original("echo hi"), None);
        assert_eq!(routed_original("/opt/nd7/nd7-exec 'x'"), None);
        assert_eq!(routed_original("'/opt/other' 'x'"), None);
    }

    #[test]
    fn exit_codes_are_read_off_the_error() {
        assert_eq!(exit_code_of("Exit code 7\nboom"), Some((7, "boom")));
        assert_eq!(exit_code_of("Exit code 130"), Some((130, "")));
        assert_eq!(exit_code_of("Permission denied"), None);
    }

    #[test]
    fn unreadable_lines_keep_their_number_and_start() {
        let e = Entry::parse(b"{not json", 4).expect_err("not an entry");
        assert_eq!(e.line, 4);
        assert_eq!(e.start, "{not json");
        let e = Entry::parse(br#"{"seq":"x","ts":1}"#, 1).expect_err("seq is a string");
        assert!(e.error.contains("invalid type"), "{}", e.error);
    }

    #[test]
    fn responses_read_as_text() {
        let v = serde_json::json!({"stdout": "out", "stderr": "err"});
        assert_eq!(response_text(&v).as_deref(), Some("out\nerr"));
        let v = serde_json::json!({"type": "text", "file": {"content": "body"}});
        assert_eq!(response_text(&v).as_deref(), Some("body"));
        assert_eq!(response_text(&Value::Null), None);
        assert_eq!(
            response_text(&serde_json::json!([1, 2])).as_deref(),
            Some("[1,2]")
        );
    }
}
