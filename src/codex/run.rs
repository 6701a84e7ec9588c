//! What `nd7 run codex` gives Codex on its command line, and the PreToolUse
//! reply that sends a shell call through the exit. Pure: text in, text out.
//!
//! Codex takes hooks from `-c` overrides (its "session flags" layer), so the
//! run's hooks live on the command line, where the agent cannot edit them,
//! as Claude Code's live in `--settings`. Codex runs no hook it has not been
//! told to trust, and trust is read from the user's `config.toml` only
//! (checked with 0.171.0: a `-c hooks.state…` override is ignored), under a
//! key made of the layer's name and the hook's place: `nd7 run` writes the
//! hash of each of its own hooks there before the floor is built, and the
//! floor then holds `config.toml` read-only (ADR-0057).

use serde_json::{Value, json};
use toml_edit::{Array, InlineTable, Item, Table};

use crate::codex::hook::CodexEvent;
use crate::setup::codex_merge::{self, CodexConfigError};

/// The source Codex names hooks from `-c` overrides by, in their trust keys.
pub const SESSION_FLAGS: &str = "/<session-flags>/config.toml";

/// The matcher of the hooks that concern shell calls only: Codex names its
/// shell tool `Bash` in hook payloads.
pub const SHELL_MATCHER: &str = "^Bash$";

/// The sandbox Codex is told to use under `nd7 run`: none of its own. Its
/// Linux sandbox cannot start inside the floor (bubblewrap cannot write its
/// user namespace's uid map), so every command would fail; nd7's floor and
/// exit confine every command instead (ADR-0056).
pub const SANDBOX_MODE: &str = "danger-full-access";

/// One hook `nd7 run` registers, where Codex will find it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunHook {
    pub event: &'static str,
    /// Its group's place in the event's list (the handler is always the
    /// group's first).
    pub group: usize,
    pub matcher: Option<&'static str>,
    pub command: String,
    pub timeout: Option<u64>,
}

impl RunHook {
    /// The key of its `[hooks.state."…"]` table in config.toml.
    pub fn trust_key(&self) -> String {
        codex_merge::trust_key(SESSION_FLAGS, self.event, self.group, 0)
    }

    /// The hash Codex expects under that key.
    pub fn trust_hash(&self) -> String {
        codex_merge::trust_hash(
            self.event,
            self.matcher,
            &self.command,
            self.timeout,
            false,
            None,
        )
    }
}

/// The hooks of a run, for the nd7 at `nd7` (an absolute path) and its
/// `recorder`: `nd7-record --agent codex --run-hook` (or `nd7 record ...`
/// where there is no nd7-record) on every event Codex knows, then `nd7
/// hook-route` on shell calls before they run and `nd7 hook-explain` on
/// every tool result.
pub fn run_hooks(nd7: &str, recorder: &crate::hook::Recorder) -> Vec<RunHook> {
    let nd7_q = codex_merge::shell_quote(nd7);
    let mut hooks: Vec<RunHook> = CodexEvent::NAMES
        .iter()
        .map(|event| RunHook {
            event,
            group: 0,
            matcher: None,
            command: format!("{} --run-hook", codex_merge::command(recorder)),
            timeout: codex_merge::timeout_for(event),
        })
        .collect();
    hooks.push(RunHook {
        event: "PreToolUse",
        group: 1,
        matcher: Some(SHELL_MATCHER),
        command: format!("{nd7_q} hook-route"),
        timeout: None,
    });
    hooks.push(RunHook {
        event: "PostToolUse",
        group: 1,
        matcher: None,
        command: format!("{nd7_q} hook-explain"),
        timeout: None,
    });
    hooks
}

/// The `-c` values that register `hooks`, turn Codex's own sandbox off and
/// keep hooks on, whatever a project's settings say (session flags override
/// every file).
pub fn overrides(hooks: &[RunHook]) -> Vec<String> {
    let mut out = vec![
        format!("sandbox_mode=\"{SANDBOX_MODE}\""),
        "features.hooks=true".to_string(),
    ];
    let mut events: Vec<&str> = Vec::new();
    for hook in hooks {
        if !events.contains(&hook.event) {
            events.push(hook.event);
        }
    }
    for event in events {
        let mut groups: Vec<&RunHook> = hooks.iter().filter(|h| h.event == event).collect();
        groups.sort_by_key(|h| h.group);
        let mut list = Array::new();
        for hook in groups {
            let mut handler = InlineTable::new();
            handler.insert("type", "command".into());
            handler.insert("command", hook.command.as_str().into());
            if let Some(t) = hook.timeout {
                handler.insert("timeout", (t as i64).into());
            }
            let mut handlers = Array::new();
            handlers.push(handler);
            let mut group = InlineTable::new();
            if let Some(m) = hook.matcher {
                group.insert("matcher", m.into());
            }
            group.insert("hooks", handlers.into());
            list.push(group);
        }
        out.push(format!("hooks.{event}={list}"));
    }
    out
}

/// config.toml's text with `[hooks.state."<key>"] trusted_hash` set for
/// each of `hooks`, everything else (comments included) kept; `None` when
/// it holds them already. A broken file is refused with line and column.
pub fn trusted(text: Option<&str>, hooks: &[RunHook]) -> Result<Option<String>, CodexConfigError> {
    let mut doc = codex_merge::parse_toml(text)?;
    let before = doc.to_string();
    let root = doc.as_table_mut();
    let section = root.entry("hooks").or_insert_with(|| {
        let mut t = Table::new();
        t.set_implicit(true);
        Item::Table(t)
    });
    let section = section
        .as_table_like_mut()
        .ok_or(CodexConfigError::HooksNotTable)?;
    let state = section.entry("state").or_insert_with(|| {
        let mut t = Table::new();
        t.set_implicit(true);
        Item::Table(t)
    });
    let state = state
        .as_table_like_mut()
        .ok_or(CodexConfigError::HooksNotTable)?;
    for hook in hooks {
        let entry = state
            .entry(&hook.trust_key())
            .or_insert_with(|| Item::Table(Table::new()));
        let entry = entry
            .as_table_like_mut()
            .ok_or(CodexConfigError::HooksNotTable)?;
        let hash = hook.trust_hash();
        if entry.get("trusted_hash").and_then(Item::as_str) != Some(hash.as_str()) {
            entry.insert("trusted_hash", toml_edit::value(hash));
        }
    }
    let after = doc.to_string();
    Ok((after != before).then_some(after))
}

/// Why the reply allows the call, as Codex shows it.
pub const REASON: &str = "routed through nd7-exec, which runs it under the session's current rules";

/// The reply to a PreToolUse payload for a shell call: the command becomes
/// `'<nd7_exec>' '<command>'`, so the shell Codex starts hands `nd7-exec` the
/// model's text, byte for byte, as its one argument, and `nd7-exec` sends it
/// through the exit. `None` (no reply, the command runs as it is, under the
/// floor, which is never wider) for anything else, or a command holding a
/// NUL byte, which no argument can carry.
pub fn route_reply(payload: &[u8], nd7_exec: &str) -> Option<Value> {
    let payload: Value = serde_json::from_slice(payload).ok()?;
    if payload.get("hook_event_name")?.as_str()? != "PreToolUse"
        || payload.get("tool_name")?.as_str()? != "Bash"
    {
        return None;
    }
    let command = payload.pointer("/tool_input/command")?.as_str()?;
    if command.contains('\0') {
        return None;
    }
    let routed = format!(
        "{} {}",
        codex_merge::shell_quote(nd7_exec),
        codex_merge::shell_quote(command)
    );
    Some(json!({
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "allow",
            "permissionDecisionReason": REASON,
            "updatedInput": {"command": routed},
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_is_recorded_and_shell_calls_are_routed_and_explained() {
        let nd7 = "/opt/nd7 it's/nd7";
        let hooks = run_hooks(nd7, &crate::hook::Recorder::nd7(nd7));
        assert_eq!(hooks.len(), CodexEvent::NAMES.len() + 2);
        let record = &hooks[0];
        assert_eq!(
            record.command,
            r"'/opt/nd7 it'\''s/nd7' record --agent codex --run-hook"
        );
        let lean = crate::hook::Recorder::lean("/opt/nd7 it's/nd7-record");
        let leaner = run_hooks(nd7, &lean);
        assert_eq!(
            leaner[0].command,
            r"'/opt/nd7 it'\''s/nd7-record' --agent codex --run-hook"
        );
        assert!(
            leaner
                .iter()
                .any(|h| h.command == r"'/opt/nd7 it'\''s/nd7' hook-route")
        );
        let route = hooks
            .iter()
            .find(|h| h.command.ends_with("hook-route"))
            .expect("test data");
        assert_eq!(
            (route.event, route.group, route.matcher),
            ("PreToolUse", 1, Some(SHELL_MATCHER))
        );
        assert_eq!(
            route.trust_key(),
            "/<session-flags>/config.toml:pre_tool_use:1:0"
        );
        let end = hooks
            .iter()
            .find(|h| h.event == "SessionEnd")
            .expect("test data");
        assert_eq!(end.timeout, Some(3));
    }

    #[test]
    fn the_overrides_are_toml_codex_reads_back() {
        let hooks = run_hooks("/b/n\"d7", &crate::hook::Recorder::nd7("/b/n\"d7"));
        let values = overrides(&hooks);
        assert_eq!(values[0], "sandbox_mode=\"danger-full-access\"");
        let pre = values
            .iter()
            .find(|v| v.starts_with("hooks.PreToolUse="))
            .expect("test data");
        let doc: toml_edit::DocumentMut = format!("x={}", &pre["hooks.PreToolUse=".len()..])
            .parse()
            .expect("test data");
        let list = doc["x"].as_array().expect("test data");
        assert_eq!(list.len(), 2);
        let second = list
            .get(1)
            .expect("test data")
            .as_inline_table()
            .expect("test data");
        assert_eq!(
            second.get("matcher").expect("test data").as_str(),
            Some("^Bash$")
        );
        let handler = second
            .get("hooks")
            .expect("test data")
            .as_array()
            .expect("test data")
            .get(0)
            .expect("test data");
        assert_eq!(
            handler
                .as_inline_table()
                .expect("test data")
                .get("command")
                .expect("test data")
                .as_str(),
            Some("'/b/n\"d7' hook-route")
        );
    }

    #[test]
    fn trust_is_written_beside_the_users_settings_and_only_once() {
        let hooks = run_hooks("/b/nd7", &crate::hook::Recorder::lean("/b/nd7-record"));
        let theirs = "# mine\nmodel = \"gpt-5.5\" # keep\n\n[hooks.state.\"/h/.codex/hooks.json:stop:0:0\"]\ntrusted_hash = \"sha256:00\"\n";
        let text = trusted(Some(theirs), &hooks)
            .expect("test data")
            .expect("test data");
        assert!(
            text.starts_with("# mine\nmodel = \"gpt-5.5\" # keep\n"),
            "{text}"
        );
        assert!(text.contains("trusted_hash = \"sha256:00\""));
        let states = codex_merge::trust_states(Some(&text)).expect("test data");
        for hook in &hooks {
            assert_eq!(
                states[&hook.trust_key()].trusted_hash.as_deref(),
                Some(hook.trust_hash().as_str())
            );
        }
        assert_eq!(trusted(Some(&text), &hooks).expect("test data"), None);
        assert!(trusted(None, &hooks).expect("test data").is_some());
        let broken = trusted(Some("a = \n"), &hooks)
            .expect_err("a broken file")
            .to_string();
        assert!(broken.starts_with("line 1, column"), "{broken}");
    }

    #[test]
    fn only_shell_calls_are_routed_and_the_text_is_one_word() {
        let payload = json!({"hook_event_name": "PreToolUse", "tool_name": "Bash",
            "tool_input": {"command": "echo 'a' $HOME"}, "tool_use_id": "c1"});
        let reply = route_reply(payload.to_string().as_bytes(), "/x/nd7-exec").expect("test data");
        let out = &reply["hookSpecificOutput"];
        assert_eq!(out["permissionDecision"], "allow");
        assert_eq!(
            out["updatedInput"]["command"],
            r"'/x/nd7-exec' 'echo '\''a'\'' $HOME'"
        );
        let words = shlex::split(out["updatedInput"]["command"].as_str().expect("test data"))
            .expect("test data");
        assert_eq!(words, ["/x/nd7-exec", "echo 'a' $HOME"]);
        for other in [
            json!({"hook_event_name": "PreToolUse", "tool_name": "apply_patch", "tool_input": {"command": "x"}}),
            json!({"hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_input": {"command": "x"}}),
            json!({"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "a\u{0}b"}}),
            json!({"hook_event_name": "PreToolUse", "tool_name": "Bash"}),
        ] {
            assert_eq!(
                route_reply(other.to_string().as_bytes(), "/x/nd7-exec"),
                None
            );
        }
        assert_eq!(route_reply(b"not json", "/x/nd7-exec"), None);
    }
}
