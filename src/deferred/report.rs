//! What `nd7 run` says when files that run later changed during a session:
//! one block per file, with a line diff where both sides are text. Pure.

use std::fmt::Write as _;
use std::path::PathBuf;

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
    /// Something found by the end-of-session search, with why it matters.
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

/// The warning `nd7 run` prints last when `findings` is not empty. `status`
/// describes how the program ended.
pub fn render(findings: &[Finding], status: &str) -> String {
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
        let label = label(&f.what);
        let _ = write!(out, "\n  {label}: {}", f.path.display());
        if let Some(cmd) = &f.after_command {
            let _ = write!(out, "  (first seen when the command {cmd:?} ended)");
        }
        out.push('\n');
        for line in body_diff(f.before.as_ref(), f.after.as_ref()) {
            let _ = writeln!(out, "    {line}");
        }
    }
    out
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
        );
        assert!(text.starts_with("nd7 run: WARNING: 2 file(s)"), "{text}");
        assert!(text.contains("exits with status 3"), "{text}");
        assert!(text.contains("\n  added: /p/.git/hooks/pre-commit  (first seen when the command \"echo x\" ended)\n    +#!/bin/sh\n    +evil\n"), "{text}");
        assert!(
            text.contains("\n  changed: /p/.idea/x.bin\n    was 3 bytes, now 4 bytes\n"),
            "{text}"
        );
    }
}
