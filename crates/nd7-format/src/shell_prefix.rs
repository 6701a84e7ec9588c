//! How Bash commands leave the floor under `nd7 run claude` (ADR-0040): Claude
//! Code's shell prefix. Pure: strings in, strings and settings out.
//!
//! With `CLAUDE_CODE_SHELL_PREFIX` set to `nd7-exec`, Claude Code runs every
//! Bash tool call as `<shell> -c "'<nd7-exec>' '<wrapped>'"`, where
//! `<wrapped>` is the command line it would otherwise have run itself: it
//! sources Claude Code's shell snapshot (so the user's functions and aliases
//! carry over), `eval`s the model's command, and writes the working directory
//! it ended in to a file Claude Code reads back. No hook rewrites the command,
//! so Claude Code's permission rules and mode judge the command the model
//! wrote, exactly as without nd7.
//!
//! The same prefix is put before the user's shell-form hooks and stdio MCP
//! servers. `nd7-exec` tells the two apart by the shape of the Bash tool's
//! line ([`unwrap`]): only that goes through the exit; anything else is run
//! where it is, under the floor, as Claude Code would have run it.

#![forbid(unsafe_code)]

use serde_json::{Value, json};

/// The variable Claude Code takes its shell prefix from.
pub const PREFIX_VARIABLE: &str = "CLAUDE_CODE_SHELL_PREFIX";

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

/// `text` as one shell word for a person to read or paste: as it is when
/// it is not empty and every character is `plain`, else [`shell_quote`]d.
pub fn shell_word(text: &str, plain: impl Fn(char) -> bool) -> String {
    if !text.is_empty() && text.chars().all(plain) {
        return text.to_string();
    }
    shell_quote(text)
}

/// The form nd7 before ADR-0040 rewrote Bash commands into, through a
/// PreToolUse hook: `'<nd7-exec>' '<command>'`. Logs written then still hold
/// it; [`crate::read`] recognises it.
pub fn routed_command(nd7_exec: &str, command: &str) -> String {
    format!("{} {}", shell_quote(nd7_exec), shell_quote(command))
}

/// The shell a Bash tool line was written for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shell {
    Bash,
    Zsh,
}

/// A Bash tool call as Claude Code wrapped it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BashCall {
    /// The command the model asked for, as Claude Code passed it to `eval`.
    pub command: String,
    /// The shell whose snapshot the line sources (bash when there is none).
    pub shell: Shell,
    /// Whether everything before the `eval` is Claude Code's own set-up
    /// ([`known_setup`]). When it is not, the line ran more than the
    /// `eval`'s command, and `command` names only part of what ran.
    pub setup_known: bool,
}

/// What follows the `eval`: the working directory written for Claude Code.
const CWD_TAIL: &str = " && pwd -P >| ";

/// The Bash tool's command line, read back: `None` for anything else (a
/// shell-form hook, an MCP server's command, a line of some other shape).
///
/// The line is `<set-up> && … && eval <word> [< /dev/null] && pwd -P >| <file>`,
/// in 2.1.139 to 2.1.332 at least, where `<word>` is the command quoted as one
/// shell word (bare, or single-quoted with each `'` written `'"'"'`), and the
/// `eval` may stand in braces (`{ eval <word>; }`). The first `eval` from
/// which that shape runs to the end of the line is the one: the set-up steps
/// before it are Claude Code's, and an `eval` inside the command is within
/// the word.
pub fn unwrap(line: &str) -> Option<BashCall> {
    let mut from = 0;
    while let Some(at) = line[from..].find("eval ").map(|i| i + from) {
        from = at + 1;
        let before = line[..at].chars().next_back();
        if !matches!(before, None | Some(' ') | Some('{')) {
            continue;
        }
        let Some((command, end)) = word(line, at + "eval ".len()) else {
            continue;
        };
        let mut rest = &line[end..];
        rest = rest.strip_prefix(" < /dev/null").unwrap_or(rest);
        rest = rest.strip_prefix("; }").unwrap_or(rest);
        let Some(file) = rest.strip_prefix(CWD_TAIL) else {
            continue;
        };
        match word(file, 0) {
            Some((_, end)) if file[end..].trim_end().is_empty() => {
                let shell = if line.contains("/snapshot-zsh-") {
                    Shell::Zsh
                } else {
                    Shell::Bash
                };
                let setup_known = known_setup(&line[..at]);
                return Some(BashCall {
                    command,
                    shell,
                    setup_known,
                });
            }
            _ => continue,
        }
    }
    None
}

/// The builtins Claude Code's set-up groups call: its shell options and the
/// aliases and functions it takes away before the command.
const SETUP_BUILTINS: &[&str] = &["shopt", "setopt", "unalias", "unset"];

/// Whether `setup` (the line before its `eval`) is only the steps Claude
/// Code puts there: `source <snapshot> [2>/dev/null] [|| true]`, and groups
/// `{ … } [>/dev/null 2>&1] [|| true]` whose commands are the builtins of
/// [`SETUP_BUILTINS`] (each maybe as `\builtin NAME`) with plain words,
/// each step followed by ` && `. Anything else before the `eval` runs as
/// well as the model's command, which a line the agent wrote itself can
/// use to have the log name only its harmless half. The snapshot's own
/// contents are not checked: Claude Code writes it where the agent can.
pub fn known_setup(setup: &str) -> bool {
    let mut rest = setup.strip_suffix("{ ").unwrap_or(setup);
    while !rest.is_empty() {
        let Some(after) = setup_step(rest).and_then(|r| r.strip_prefix(" && ")) else {
            return false;
        };
        rest = after;
    }
    true
}

/// One step of Claude Code's set-up at the start of `text`: what follows it.
fn setup_step(text: &str) -> Option<&str> {
    let rest = if let Some(path) = text.strip_prefix("source ") {
        let (_, end) = word(path, 0)?;
        let rest = &path[end..];
        rest.strip_prefix(" 2>/dev/null").unwrap_or(rest)
    } else {
        let group = text.strip_prefix("{ ")?;
        let close = group.find("; }")?;
        if !builtin_commands(&group[..close]) {
            return None;
        }
        let rest = &group[close + "; }".len()..];
        rest.strip_prefix(" >/dev/null 2>&1").unwrap_or(rest)
    };
    Some(rest.strip_prefix(" || true").unwrap_or(rest))
}

/// Whether `inner` (a group's body without its closing `; }`) is simple
/// commands joined by `; ` or ` || `, each a builtin of [`SETUP_BUILTINS`]
/// (maybe as `\builtin NAME`) followed by plain words.
fn builtin_commands(inner: &str) -> bool {
    inner
        .split("; ")
        .flat_map(|part| part.split(" || "))
        .all(|command| {
            let mut words = Vec::new();
            let mut at = 0;
            while at < command.len() {
                let Some((w, end)) = word(command, at) else {
                    return false;
                };
                words.push(w);
                at = match command[end..].strip_prefix(' ') {
                    Some(_) => end + 1,
                    None if end == command.len() => end,
                    None => return false,
                };
            }
            let name = match words.first().map(String::as_str) {
                Some("builtin") => words.get(1),
                _ => words.first(),
            };
            name.is_some_and(|n| SETUP_BUILTINS.contains(&n.as_str()))
        })
}

/// One shell word starting at byte `at` of `line`: its value and where it
/// ends. Only quoting is undone (single quotes, double quotes without
/// expansions, backslashes, bare characters); a word that would expand
/// anything (`$`, a backquote, a glob) is not read.
fn word(line: &str, at: usize) -> Option<(String, usize)> {
    let bytes = line.as_bytes();
    let mut out = String::new();
    let mut i = at;
    while i < bytes.len() {
        match bytes[i] {
            b' ' | b'\t' | b'\n' | b';' | b'&' | b'|' | b'<' | b'>' | b'(' | b')' => break,
            b'\'' => {
                let close = line[i + 1..].find('\'')? + i + 1;
                out.push_str(&line[i + 1..close]);
                i = close + 1;
            }
            b'"' => {
                i += 1;
                loop {
                    match *bytes.get(i)? {
                        b'"' => break,
                        b'$' | b'`' => return None,
                        b'\\' if matches!(bytes.get(i + 1), Some(b'$' | b'`' | b'"' | b'\\')) => {
                            out.push(char::from(bytes[i + 1]));
                            i += 2;
                        }
                        _ => {
                            let c = line[i..].chars().next()?;
                            out.push(c);
                            i += c.len_utf8();
                        }
                    }
                }
                i += 1;
            }
            b'\\' => {
                let c = line[i + 1..].chars().next()?;
                out.push(c);
                i += 1 + c.len_utf8();
            }
            b'$' | b'`' | b'*' | b'?' | b'[' | b'~' | b'{' | b'}' => return None,
            _ => {
                let c = line[i..].chars().next()?;
                out.push(c);
                i += c.len_utf8();
            }
        }
    }
    (i > at).then_some((out, i))
}

/// The argument that marks the record hooks `nd7 run` registers, after the
/// recorder's own (`nd7-record --run-hook`, `nd7 record --run-hook`): under
/// the run, copies from hooks registered elsewhere (`nd7 setup`'s, which
/// Claude Code runs as well, since it merges only hooks whose command and
/// arguments are identical) are then not recorded twice.
pub const RUN_HOOK_ARG: &str = "--run-hook";

/// The hook that tells the model when nd7's floor refused a tool call
/// (`nd7 hook-explain`), and the tools it is registered for: the Bash tool's
/// failures and successes (a command can carry on past a refused write, as
/// pip does without its cache), and the file tools' failures.
pub const EXPLAIN_ARGS: [&str; 1] = ["hook-explain"];
pub const EXPLAIN_ON: [(&str, &str); 2] = [
    (
        "PostToolUseFailure",
        "Bash|Write|Edit|MultiEdit|NotebookEdit",
    ),
    ("PostToolUse", "Bash"),
];

/// The settings `nd7 run` passes to Claude Code with `--settings`: one
/// `--run-hook` entry (exec form) of `recorder` (`nd7-record`, or
/// `nd7 record` where there is none) for each event in `recorded`,
/// so recording never depends on a file the agent can edit; `nd7 hook-explain`
/// after the tools nd7's floor can refuse; `nd7_exec` as the shell prefix
/// (also set in the environment by `nd7 run`); and Claude Code's own sandbox
/// off, since a sandbox inside the floor cannot start and nd7's exit already
/// confines every command; and `disableAllHooks` false, so that no settings
/// file the agent can write switches the hooks off.
///
/// Claude Code takes one `--settings`; when the user gave their own, it is
/// `theirs`, and nd7's hooks are added to it (after the user's hooks for the
/// same events) with the sandbox and the prefix overridden. `None` when
/// `theirs` is not a JSON object or its hooks or env are not shaped as Claude
/// Code's are.
pub fn run_settings(
    recorder: &crate::hook::Recorder,
    nd7: &str,
    nd7_exec: &str,
    theirs: Option<Value>,
    recorded: &[&str],
) -> Option<Value> {
    let mut record_args = recorder.args().to_vec();
    record_args.push(RUN_HOOK_ARG);
    let mut settings = theirs.unwrap_or_else(|| json!({}));
    let object = settings.as_object_mut()?;
    let hooks = object
        .entry("hooks")
        .or_insert_with(|| json!({}))
        .as_object_mut()?;
    for event in recorded {
        let mut record =
            json!({"type": "command", "command": recorder.program(), "args": record_args});
        if *event == "SessionEnd" {
            record["timeout"] = json!(crate::hook::SESSION_END_TIMEOUT_SECS);
        }
        hooks
            .entry(*event)
            .or_insert_with(|| json!([]))
            .as_array_mut()?
            .push(json!({ "hooks": [record] }));
    }
    for (event, matcher) in EXPLAIN_ON {
        hooks
            .entry(event)
            .or_insert_with(|| json!([]))
            .as_array_mut()?
            .push(json!({"matcher": matcher, "hooks": [
                {"type": "command", "command": nd7, "args": EXPLAIN_ARGS}
            ]}));
    }
    object
        .entry("env")
        .or_insert_with(|| json!({}))
        .as_object_mut()?
        .insert(PREFIX_VARIABLE.into(), json!(nd7_exec));
    let sandbox = object.entry("sandbox").or_insert_with(|| json!({}));
    sandbox
        .as_object_mut()?
        .insert("enabled".into(), json!(false));
    // A project's `.claude/settings.json` or `settings.local.json` (which
    // the agent can write) saying `true` would switch every hook off, nd7's
    // too; Claude Code ranks these flag settings above them, at the start
    // and after a change mid-session (2.1.197, 2.1.332; tests/it/e2e).
    object.insert("disableAllHooks".into(), json!(false));
    Some(settings)
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_quoted_word_reaches_the_shell_unexpanded() {
        for command in [
            "echo hi",
            "echo 'single' \"double\" $HOME `id` $(id -u); rm -rf / #",
            "it's a 'quoted' \\'' mess",
            "line one\nline two\ttab",
            "",
            "ünïcödé ✓",
        ] {
            let words = sh_words(&routed_command("/opt/nd7-exec", command));
            assert_eq!(
                words,
                vec!["/opt/nd7-exec".to_string(), command.to_string()],
                "{command:?}"
            );
        }
    }

    /// Claude Code's own quoting of the command (`Qa` in its bundle): bare
    /// when only safe characters, else single quotes with `'"'"'`.
    fn claude_quote(text: &str) -> String {
        if !text.is_empty()
            && text
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_./:=@+,-".contains(c))
        {
            return text.to_string();
        }
        format!("'{}'", text.replace('\'', "'\"'\"'"))
    }

    /// The line 2.1.197 runs (captured with a stand-in prefix).
    fn line_197(command: &str) -> String {
        format!(
            "source /home/u/.claude/shell-snapshots/snapshot-bash-1796084495120-m980kd.sh 2>/dev/null || true && {{ shopt -u extglob || setopt NO_EXTENDED_GLOB NO_BARE_GLOB_QUAL; }} >/dev/null 2>&1 || true && eval {} < /dev/null && pwd -P >| /tmp/claude-e94d-cwd",
            claude_quote(command)
        )
    }

    /// The line 2.1.332 runs (captured the same way).
    fn line_332(command: &str) -> String {
        format!(
            "source /home/u/.claude/shell-snapshots/snapshot-zsh-1796084542183-igjetp.sh 2>/dev/null || true && {{ \\builtin shopt -u extglob || \\builtin setopt NO_EXTENDED_GLOB NO_BARE_GLOB_QUAL NO_BRACE_CCL NO_MAGIC_EQUAL_SUBST NO_RC_QUOTES NO_EQUALS; }} >/dev/null 2>&1 || true && {{ \\builtin unalias -- 'which'; \\builtin unset -f -- 'which'; }} >/dev/null 2>&1 || true && eval {} < /dev/null && pwd -P >| '/tmp/dir with space/claude-72bf-cwd'",
            claude_quote(command)
        )
    }

    #[test]
    fn the_bash_tools_line_gives_back_the_models_command() {
        for command in [
            "echo hi",
            "ls",
            "cd /tmp && echo \"it's\" | cat",
            "eval 'x' && pwd -P >| /tmp/evil",
            "printf '%s' \"$HOME\" `id`; exit 3",
            "a\nb\n'\"'\"'",
            "ünïcödé ✓ && true",
        ] {
            let call = unwrap(&line_197(command)).expect("recognised");
            assert_eq!(call.command, command);
            assert_eq!(call.shell, Shell::Bash);
            let call = unwrap(&line_332(command)).expect("recognised");
            assert_eq!(call.command, command);
            assert_eq!(call.shell, Shell::Zsh);
        }
        // Braces around the eval, and no snapshot and no redirection.
        assert_eq!(
            unwrap("{ eval 'ls -la'; } && pwd -P >| /tmp/c").map(|c| c.command),
            Some("ls -la".to_string())
        );
        assert_eq!(
            unwrap("eval ls && pwd -P >| /tmp/c").map(|c| c.command),
            Some("ls".to_string())
        );
        for line in [
            line_197("echo hi"),
            line_332("echo hi"),
            "{ eval 'ls -la'; } && pwd -P >| /tmp/c".to_string(),
        ] {
            assert!(unwrap(&line).expect("recognised").setup_known, "{line}");
        }
    }

    /// A line the agent writes itself can put any command before the
    /// `eval`: it runs too, so the line is still the Bash tool's shape (and
    /// goes through the exit), but its set-up is not Claude Code's.
    #[test]
    fn anything_but_claude_codes_setup_before_the_eval_is_told_apart() {
        let tail = "eval 'echo hi' && pwd -P >| /tmp/c";
        for setup in [
            "touch pwned && ",
            "source x; touch pwned && ",
            "source x 2>/dev/null || true && touch pwned && ",
            "{ touch pwned; } >/dev/null 2>&1 || true && ",
            "{ shopt -u extglob; touch pwned; } && ",
            "{ shopt -u extglob || rm -rf x; } && ",
            "{ unset $(touch pwned); } && ",
            "{ \\builtin eval touch; } && ",
            "source `touch pwned` && ",
            "source x || touch pwned && ",
            "source x 2>/dev/null || true && { shopt -u extglob; } >/dev/null 2>&1 || true; touch y && ",
        ] {
            let line = format!("{setup}{tail}");
            let call = unwrap(&line).expect("the Bash tool's shape");
            assert_eq!(call.command, "echo hi");
            assert!(!call.setup_known, "taken as Claude Code's: {line}");
        }
    }

    #[test]
    fn anything_else_is_not_a_bash_tool_line() {
        for line in [
            "cat > /tmp/x; echo hook",
            "'/usr/bin/node' 'server.js' '--port' '3'",
            "eval 'ls'",
            "eval 'ls' && pwd -P >| /tmp/c; rm -rf ~",
            "eval 'ls' && pwd -P >| /tmp/c && more",
            "eval $X && pwd -P >| /tmp/c",
            "eval 'unterminated && pwd -P >| /tmp/c",
            "noteval 'ls' && pwd -P >| /tmp/c",
            "",
        ] {
            assert_eq!(unwrap(line), None, "{line:?}");
        }
    }

    #[test]
    fn run_settings_add_the_hooks_the_prefix_and_keep_the_users_own() {
        let nd7_record = crate::hook::Recorder::nd7("/b/nd7");
        let alone =
            run_settings(&nd7_record, "/b/nd7", "/b/nd7-exec", None, &[]).expect("settings");
        let explain = json!({"type": "command", "command": "/b/nd7", "args": ["hook-explain"]});
        assert_eq!(
            alone,
            json!({
                "hooks": {
                    "PostToolUseFailure": [{"matcher": "Bash|Write|Edit|MultiEdit|NotebookEdit", "hooks": [explain]}],
                    "PostToolUse": [{"matcher": "Bash", "hooks": [explain]}],
                },
                "env": {"CLAUDE_CODE_SHELL_PREFIX": "/b/nd7-exec"},
                "sandbox": {"enabled": false},
                "disableAllHooks": false
            })
        );
        let recording = run_settings(
            &nd7_record,
            "/b/nd7",
            "/b/nd7-exec",
            None,
            &["PreToolUse", "SessionEnd"],
        )
        .expect("settings");
        let record =
            json!({"type": "command", "command": "/b/nd7", "args": ["record", "--run-hook"]});
        let mut end = record.clone();
        end["timeout"] = json!(10);
        assert_eq!(
            recording["hooks"]["PreToolUse"],
            json!([{"hooks": [record]}])
        );
        assert_eq!(recording["hooks"]["SessionEnd"], json!([{"hooks": [end]}]));
        // With nd7-record beside nd7, the hooks start it; hook-explain stays nd7's.
        let lean = crate::hook::Recorder::lean("/b/nd7-record");
        let leaner =
            run_settings(&lean, "/b/nd7", "/b/nd7-exec", None, &["Stop"]).expect("settings");
        assert_eq!(
            leaner["hooks"]["Stop"],
            json!([{"hooks": [{"type": "command", "command": "/b/nd7-record", "args": ["--run-hook"]}]}])
        );
        assert_eq!(
            leaner["hooks"]["PostToolUse"][0]["hooks"][0]["command"],
            "/b/nd7"
        );
        let theirs = json!({
            "model": "x",
            "env": {"FOO": "1", "CLAUDE_CODE_SHELL_PREFIX": "/their/wrapper"},
            "hooks": {"PostToolUse": [{"matcher": "Write", "hooks": []}], "Stop": []},
            "sandbox": {"enabled": true, "network": {}},
            "disableAllHooks": true
        });
        let merged = run_settings(&nd7_record, "/b/nd7", "/b/nd7-exec", Some(theirs), &[])
            .expect("settings");
        assert_eq!(merged["model"], "x");
        assert_eq!(
            merged["env"],
            json!({"FOO": "1", "CLAUDE_CODE_SHELL_PREFIX": "/b/nd7-exec"})
        );
        assert_eq!(merged["hooks"]["PostToolUse"][0]["matcher"], "Write");
        assert_eq!(merged["hooks"]["PostToolUse"][1]["matcher"], "Bash");
        assert_eq!(merged["hooks"]["Stop"], json!([]));
        assert_eq!(merged["sandbox"], json!({"enabled": false, "network": {}}));
        assert_eq!(merged["disableAllHooks"], false);
        for bad in [json!([1]), json!({"hooks": []}), json!({"env": "x"})] {
            assert_eq!(
                run_settings(&nd7_record, "/b/nd7", "/b/nd7-exec", Some(bad), &[]),
                None
            );
        }
    }
}
