//! The PreToolUse reply that routes a Bash command through `nd7-exec`, the
//! sandbox's one exit. Pure: a payload in, a reply (or none) out.
//!
//! The rewritten command is the absolute path of `nd7-exec` followed by the
//! original command as one single-quoted word, so the shell that Claude Code
//! evaluates it with hands `nd7-exec` the original text, byte for byte, as its
//! only argument: nothing in it is expanded, split or run by that shell.
//! Claude Code replaces the whole tool input with `updatedInput`, so every
//! other field of the input is copied through unchanged.
//!
//! Anything else (another tool, another event, a payload that is not what
//! Claude Code sends) gets no reply: the command then runs as it is, under the
//! session's floor, which is never wider than what nd7-exec would apply.

use serde_json::{Value, json};

/// Why the reply allows the call, as Claude Code shows it.
pub const REASON: &str = "routed through nd7-exec, which applies the session's current rules";

/// `text` as one POSIX shell word: single-quoted, each `'` written `'\''`.
pub fn shell_quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('\'');
    for c in text.chars() {
        if c == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    out
}

/// The command `nd7_exec` is given in place of `command`.
pub fn routed_command(nd7_exec: &str, command: &str) -> String {
    format!("{} {}", shell_quote(nd7_exec), shell_quote(command))
}

/// The arguments of the record hooks `nd7 run` registers: under the run,
/// copies from hooks registered elsewhere (`nd7 setup`'s, which Claude Code
/// runs as well, since it merges only hooks whose command and arguments are
/// identical) are then not recorded twice.
pub const RUN_RECORD_ARGS: [&str; 2] = ["record", "--run-hook"];

/// The settings `nd7 run` passes to Claude Code with `--settings`: one
/// `nd7 record --run-hook` entry (exec form) for each event in `recorded`,
/// so recording never depends on a file the agent can edit; the PreToolUse
/// entry that runs `nd7 hook-prefix` for Bash; and Claude Code's own sandbox
/// off, since a sandbox inside the floor cannot start and nd7's exit already
/// confines every command.
///
/// Claude Code takes one `--settings`; when the user gave their own, it is
/// `theirs`, and nd7's hooks are added to it (after the user's hooks for the
/// same events) with the sandbox key overridden. `None` when `theirs` is not
/// a JSON object or its hooks are not shaped as Claude Code's are.
pub fn run_settings(nd7: &str, theirs: Option<Value>, recorded: &[&str]) -> Option<Value> {
    let prefix = json!({
        "matcher": "Bash",
        "hooks": [{"type": "command", "command": nd7, "args": ["hook-prefix"]}]
    });
    let mut settings = theirs.unwrap_or_else(|| json!({}));
    let object = settings.as_object_mut()?;
    let hooks = object
        .entry("hooks")
        .or_insert_with(|| json!({}))
        .as_object_mut()?;
    for event in recorded {
        let mut record = json!({"type": "command", "command": nd7, "args": RUN_RECORD_ARGS});
        if *event == "SessionEnd" {
            record["timeout"] = json!(crate::setup::merge::SESSION_END_TIMEOUT_SECS);
        }
        hooks
            .entry(*event)
            .or_insert_with(|| json!([]))
            .as_array_mut()?
            .push(json!({ "hooks": [record] }));
    }
    hooks
        .entry("PreToolUse")
        .or_insert_with(|| json!([]))
        .as_array_mut()?
        .push(prefix);
    let sandbox = object.entry("sandbox").or_insert_with(|| json!({}));
    sandbox
        .as_object_mut()?
        .insert("enabled".into(), json!(false));
    Some(settings)
}

/// The reply to a PreToolUse payload for the Bash tool, or `None` when there
/// is nothing to rewrite. A command holding a NUL byte cannot be passed as an
/// argument, so it is not rewritten either.
pub fn reply(payload: &[u8], nd7_exec: &str) -> Option<Value> {
    let payload: Value = serde_json::from_slice(payload).ok()?;
    if payload.get("hook_event_name")?.as_str()? != "PreToolUse"
        || payload.get("tool_name")?.as_str()? != "Bash"
    {
        return None;
    }
    let mut input = payload.get("tool_input")?.as_object()?.clone();
    let command = input.get("command")?.as_str()?;
    if command.contains('\0') {
        return None;
    }
    let routed = routed_command(nd7_exec, command);
    input.insert("command".into(), Value::String(routed));
    Some(json!({
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "allow",
            "permissionDecisionReason": REASON,
            "updatedInput": input,
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXEC: &str = "/opt/nd7/bin/nd7-exec";

    fn bash(input: Value) -> Vec<u8> {
        json!({"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "Bash",
               "tool_input": input, "tool_use_id": "t"})
        .to_string()
        .into_bytes()
    }

    /// What sh makes of a command line: its words, as a shell would pass them.
    fn sh_words(line: &str) -> Vec<String> {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("for w in {line}; do printf '%s\\0' \"$w\"; done"))
            .output()
            .expect("sh runs");
        // Every word ends in NUL, so the last piece of the split is empty.
        let mut words: Vec<String> = out
            .stdout
            .split(|&b| b == 0)
            .map(|w| String::from_utf8_lossy(w).into_owned())
            .collect();
        words.pop();
        words
    }

    #[test]
    fn the_command_reaches_nd7_exec_as_one_unexpanded_word() {
        for command in [
            "echo hi",
            "echo 'single' \"double\" $HOME `id` $(id -u); rm -rf / #",
            "it's a 'quoted' \\'' mess",
            "line one\nline two\ttab",
            "",
            "ünïcödé ✓",
        ] {
            let words = sh_words(&routed_command(EXEC, command));
            assert_eq!(
                words,
                vec![EXEC.to_string(), command.to_string()],
                "{command:?}"
            );
        }
    }

    #[test]
    fn the_reply_allows_and_keeps_every_other_field() {
        let input = json!({"command": "ls", "description": "list", "timeout": 120000,
                           "run_in_background": true, "dangerouslyDisableSandbox": true, "future": [1]});
        let reply = reply(&bash(input.clone()), EXEC).expect("a reply");
        let out = &reply["hookSpecificOutput"];
        assert_eq!(out["hookEventName"], "PreToolUse");
        assert_eq!(out["permissionDecision"], "allow");
        let mut expected = input;
        expected["command"] = json!("'/opt/nd7/bin/nd7-exec' 'ls'");
        assert_eq!(out["updatedInput"], expected);
    }

    #[test]
    fn nothing_else_is_rewritten() {
        let other_tool = json!({"session_id": "s", "hook_event_name": "PreToolUse",
                                "tool_name": "Write", "tool_input": {"file_path": "/x", "content": "y"}});
        let other_event = json!({"session_id": "s", "hook_event_name": "PostToolUse",
                                 "tool_name": "Bash", "tool_input": {"command": "ls"}});
        for payload in [
            other_tool.to_string().into_bytes(),
            other_event.to_string().into_bytes(),
            bash(json!({"description": "no command"})),
            bash(json!({"command": 42})),
            bash(json!("not an object")),
            bash(json!({"command": "a\u{0}b"})),
            b"{not json".to_vec(),
            b"".to_vec(),
        ] {
            assert_eq!(
                reply(&payload, EXEC),
                None,
                "{}",
                String::from_utf8_lossy(&payload)
            );
        }
    }

    #[test]
    fn run_settings_add_the_hooks_and_keep_the_users_own() {
        let alone = run_settings("/b/nd7", None, &[]).expect("settings");
        assert_eq!(
            alone,
            json!({
                "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
                    {"type": "command", "command": "/b/nd7", "args": ["hook-prefix"]}
                ]}]},
                "sandbox": {"enabled": false}
            })
        );
        let recording =
            run_settings("/b/nd7", None, &["PreToolUse", "SessionEnd"]).expect("settings");
        let record =
            json!({"type": "command", "command": "/b/nd7", "args": ["record", "--run-hook"]});
        let mut end = record.clone();
        end["timeout"] = json!(10);
        assert_eq!(
            recording["hooks"],
            json!({
                "PreToolUse": [{"hooks": [record]}, {"matcher": "Bash", "hooks": [
                    {"type": "command", "command": "/b/nd7", "args": ["hook-prefix"]}
                ]}],
                "SessionEnd": [{"hooks": [end]}]
            })
        );
        let theirs = json!({
            "model": "x",
            "hooks": {"PreToolUse": [{"matcher": "Write", "hooks": []}], "Stop": []},
            "sandbox": {"enabled": true, "network": {}}
        });
        let merged = run_settings("/b/nd7", Some(theirs), &[]).expect("settings");
        assert_eq!(merged["model"], "x");
        assert_eq!(merged["hooks"]["PreToolUse"][0]["matcher"], "Write");
        assert_eq!(merged["hooks"]["PreToolUse"][1]["matcher"], "Bash");
        assert_eq!(merged["hooks"]["Stop"], json!([]));
        assert_eq!(merged["sandbox"], json!({"enabled": false, "network": {}}));
        assert_eq!(run_settings("/b/nd7", Some(json!([1])), &[]), None);
        assert_eq!(
            run_settings("/b/nd7", Some(json!({"hooks": []})), &[]),
            None
        );
    }
}
