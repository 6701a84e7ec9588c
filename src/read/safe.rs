//! Untrusted text made inert for a terminal and for HTML. Pure.
//!
//! Entries hold whatever the agent saw: a command's output can carry escape
//! sequences that would move the cursor, retitle the window, write the
//! clipboard (OSC 52) or hide a line behind a carriage return, and a file
//! can carry bidirectional overrides that show text in another order than it
//! runs. Every string from a log passes through [`term`] before it reaches a
//! terminal and through [`html`] before it reaches a report: control
//! characters, C1 controls, DEL, and the invisible characters that reorder
//! or hide text are written as visible escapes (`\x1b`, `\r`, `\u{202e}`),
//! so what is shown is what the log holds, and nothing in it acts.

use std::fmt::Write;

/// Whether `c` must not reach a terminal or a page as itself. Newline and
/// tab are decided by the caller.
pub fn is_hazard(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{8}' | '\u{b}'..='\u{1f}' | '\u{7f}'..='\u{9f}'
        // bidirectional embeddings, overrides and isolates, and the marks
        | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{61c}'
        // invisible: zero-width space, line and paragraph separators, BOM
        | '\u{200b}' | '\u{2028}' | '\u{2029}' | '\u{feff}')
}

/// How one hazardous character is shown.
fn escape_char(c: char, out: &mut String) {
    match c {
        '\r' => out.push_str("\\r"),
        '\n' => out.push_str("\\n"),
        '\t' => out.push_str("\\t"),
        c if (c as u32) < 0x100 => {
            let _ = write!(out, "\\x{:02x}", c as u32);
        }
        c => {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
    }
}

/// How text is laid out where it is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lines {
    /// Newlines and tabs kept: a block of output.
    Keep,
    /// Everything on one line: newlines and tabs escaped too.
    One,
}

/// `text` with every hazard escaped. `mark` wraps each escape (e.g. in
/// reverse video) so it stands out from text that merely looks like one;
/// the wrapping is the caller's own and never comes from `text`.
pub fn term_marked(text: &str, lines: Lines, mark: Option<(&str, &str)>) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let escape = is_hazard(c) || (lines == Lines::One && matches!(c, '\n' | '\t'));
        if !escape {
            out.push(c);
            continue;
        }
        if let Some((open, _)) = mark {
            out.push_str(open);
        }
        escape_char(c, &mut out);
        if let Some((_, close)) = mark {
            out.push_str(close);
        }
    }
    out
}

/// `text` safe to print on a terminal.
pub fn term(text: &str, lines: Lines) -> String {
    term_marked(text, lines, None)
}

/// `text` safe as HTML character data or a quoted attribute value: the
/// terminal hazards made visible, then `& < > " '` escaped.
pub fn html(text: &str, lines: Lines) -> String {
    let visible = term(text, lines);
    let mut out = String::with_capacity(visible.len());
    for c in visible.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_controls_come_out_visible_and_inert() {
        let hostile = "ok\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\rrm -rf ~\u{9b}31m\u{202e}txt.exe\x7f";
        let shown = term(hostile, Lines::Keep);
        assert!(!shown.chars().any(is_hazard), "{shown:?}");
        assert_eq!(
            shown,
            "ok\\x1b]52;c;cm0gLXJmIH4=\\x07\\x1b[2J\\rrm -rf ~\\x9b31m\\u{202e}txt.exe\\x7f"
        );
        assert_eq!(term("a\n\tb", Lines::Keep), "a\n\tb");
        assert_eq!(term("a\n\tb", Lines::One), "a\\n\\tb");
        assert_eq!(
            term_marked("a\x1bb", Lines::One, Some(("<", ">"))),
            "a<\\x1b>b"
        );
    }

    #[test]
    fn every_hazard_is_escaped_whatever_it_is() {
        for c in (0u32..0x3000).filter_map(char::from_u32) {
            let shown = term(&c.to_string(), Lines::One);
            assert!(
                !shown.chars().any(|s| s.is_control() || is_hazard(s)),
                "{c:?} -> {shown:?}"
            );
        }
    }

    #[test]
    fn html_has_no_markup_left() {
        let shown = html("<script>alert('x')</script>&\"\x1b", Lines::Keep);
        assert_eq!(
            shown,
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;\\x1b"
        );
    }
}
