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
//!
//! The same function serves everything else nd7 prints that the agent could
//! have chosen (ADR-0090): `nd7 run`'s end-of-session warning (file names,
//! contents, diffs, commands), the processes it ended, `nd7 deny`'s list of
//! running commands, `nd7 verify --transcript`'s paths. Two more tools sit
//! beside it for a terminal: [`fit`] cuts a line of such text to the
//! terminal's width, so that no part of it wraps to the start of a line and
//! passes for one of nd7's own, and [`RESET`] is what `nd7 run` writes
//! before its own closing lines, so that nothing the agent's program left
//! the terminal in (a string never terminated, the alternate screen, hidden
//! text) hides them.

use std::fmt::Write;
use std::path::Path;

/// Whether `c` must not reach a terminal or a page as itself. Newline and
/// tab are decided by the caller.
pub fn is_hazard(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{8}' | '\u{b}'..='\u{1f}' | '\u{7f}'..='\u{9f}'
        // bidirectional embeddings, overrides and isolates, and the marks
        | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{61c}'
        // invisible: zero-width space, line and paragraph separators, BOM
        | '\u{200b}' | '\u{2028}' | '\u{2029}' | '\u{feff}')
        || is_invisible(c)
}

/// Whether `c` shows as nothing, or as blank, on a terminal: Unicode's
/// default-ignorable code points (soft hyphen, joiners, word joiner and the
/// invisible operators, variation selectors, tag characters, the Hangul
/// fillers, which draw as blank space) and the interlinear annotation
/// marks. Text holding them is not what it looks like: `.envrc` and
/// `.envrc` plus a word joiner are two names that show alike.
fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{ad}' | '\u{34f}' | '\u{115f}' | '\u{1160}' | '\u{17b4}' | '\u{17b5}'
        | '\u{180b}'..='\u{180f}' | '\u{200c}' | '\u{200d}' | '\u{2060}'..='\u{206f}'
        | '\u{3164}' | '\u{fe00}'..='\u{fe0f}' | '\u{ffa0}' | '\u{fff0}'..='\u{fffb}'
        | '\u{1bca0}'..='\u{1bca3}' | '\u{1d173}'..='\u{1d17a}' | '\u{e0000}'..='\u{e0fff}')
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

/// A path safe to print on one line of a terminal.
pub fn path(path: &Path) -> String {
    term(&path.to_string_lossy(), Lines::One)
}

/// How many columns `c` may take on a terminal, counted high: two for
/// anything not ASCII, so a line cut by [`fit`] never takes more than it
/// was given. Wide scripts start at the Hangul Jamo block (U+1100), but a
/// terminal set to draw East Asian "ambiguous" characters wide (as CJK
/// users set theirs) draws Greek, Cyrillic, `§` and many more below it in
/// two columns too.
fn columns(c: char) -> usize {
    if c.is_ascii() { 1 } else { 2 }
}

/// `line` (already inert) cut to at most `width` columns, the cut said by a
/// trailing `…(+N)` with the count of characters left out. A line that
/// fits comes back as it is. With `None` (no terminal to wrap it) nothing
/// is cut.
pub fn fit(line: &str, width: Option<usize>) -> String {
    let Some(width) = width else {
        return line.to_string();
    };
    if line.chars().map(columns).sum::<usize>() <= width {
        return line.to_string();
    }
    let total = line.chars().count();
    // Room for the mark at its longest.
    let mark_room: usize = format!("…(+{total})").chars().map(columns).sum();
    let room = width.saturating_sub(mark_room);
    let (mut used, mut kept) = (0, 0);
    for c in line.chars() {
        if used + columns(c) > room {
            break;
        }
        used += columns(c);
        kept += 1;
    }
    let head: String = line.chars().take(kept).collect();
    format!("{head}…(+{})", total - kept)
}

/// `one` after a count of one, `many` after any other: the ending of a
/// counted word (`plural(n, "", "s")`), or the word itself
/// (`plural(n, "entry", "entries")`).
pub fn plural<'a, N: PartialEq + From<u8>>(n: N, one: &'a str, many: &'a str) -> &'a str {
    if n == N::from(1) { one } else { many }
}

/// What `nd7 run` writes to a terminal before its own closing lines, after
/// the agent's program has had the terminal: each part undoes one thing
/// that program could have left behind to hide or fake what follows.
///
/// - `ESC \` ends a string (OSC, DCS, APC, PM, SOS) left open, which would
///   swallow everything after it; `CAN` abandons a sequence half written.
/// - `?1047` and `?47` off: back to the normal screen from the alternate
///   one, where nothing printed stays once the program leaves it. Not
///   `?1049` off, which also restores a cursor saved when a program last
///   entered the alternate screen, even on the normal screen (tmux does):
///   a stale place, where nd7's lines would overwrite what is shown.
///   Leaving without it, the cursor stays where the program left it on the
///   alternate screen, so after a program that never left it nd7's lines
///   may overwrite part of the normal screen, never the reverse.
/// - `?9`, `?1000` to `?1003`, `?1005`, `?1006`, `?1015` off: no mouse
///   reporting, which would type escape sequences into the shell; `?1004`
///   off: no focus reports, which would too, at each change of window.
/// - `?1` off and `ESC >`: cursor keys and keypad send what the shell
///   expects; `?69` off: no left and right margins (xterm), within which
///   nd7's lines would wrap short of the width they were cut to. Not `?6`
///   (origin mode): setting or resetting it moves the cursor home, and with
///   the region the whole screen it changes nothing.
/// - `?2026` off: synchronized output ended (a terminal holding it shows nothing).
/// - `?25` on, `?7` on, `?5` off, `4 l`: a visible cursor, lines that wrap
///   rather than overwrite their end, normal video, no insert mode.
/// - `ESC 7`, `ESC [ r`, `ESC 8`: the scrolling region the whole screen,
///   the cursor left where it was (setting the region moves it home).
/// - last, as a cursor restore brings back attributes: `SI` and `ESC ( B`,
///   the ordinary character set (line drawing garbles text), and `ESC [ 0 m`,
///   no hidden, blinking, reversed or coloured text.
///
/// - then `ESC [ J`: the screen below the cursor erased, where nd7's lines
///   go. The program may have drawn a fake line of nd7's there and moved
///   the cursor up: nd7's lines would come above it, and it would stay the
///   last thing shown (ADR-0098).
///
/// It does not clear the screen or reset the terminal whole (`ESC c`): what
/// the program showed stays for you to read. Nor does it set the default
/// colours back (`OSC 110`, `111`, `104`): that would undo a colour theme
/// your shell set the same way (base16-shell does) after every run, and
/// text made the background's colour is blank, not forged. It cannot take
/// back what the program did to the window (its title, the clipboard):
/// docs/sandbox.md.
pub const RESET: &str = concat!(
    "\x1b\\\x18",
    "\x1b[?1047l\x1b[?47l",
    "\x1b[?9l\x1b[?1000l\x1b[?1001l\x1b[?1002l\x1b[?1003l\x1b[?1005l\x1b[?1006l\x1b[?1015l",
    "\x1b[?1004l",
    "\x1b[?1l\x1b>\x1b[?69l",
    "\x1b[?2026l",
    "\x1b[?25h\x1b[?7h\x1b[?5l\x1b[4l",
    "\x1b7\x1b[r\x1b8",
    "\x0f\x1b(B\x1b[0m",
    "\x1b[J",
);

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
    fn only_a_count_of_one_takes_the_singular() {
        assert_eq!(plural(1usize, "", "s"), "");
        assert_eq!(plural(1u64, "entry", "entries"), "entry");
        for n in [0u64, 2, 11, u64::MAX] {
            assert_eq!(plural(n, "y was", "ies were"), "ies were");
        }
    }

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

    /// Guards `is_invisible`: without it these pass through as themselves.
    #[test]
    fn characters_that_show_as_nothing_are_escaped() {
        for c in [
            '\u{ad}',
            '\u{34f}',
            '\u{115f}',
            '\u{180e}',
            '\u{200d}',
            '\u{2060}',
            '\u{2064}',
            '\u{206a}',
            '\u{3164}',
            '\u{fe0f}',
            '\u{ffa0}',
            '\u{fff9}',
            '\u{e0041}',
        ] {
            let shown = term(&format!(".envrc{c}"), Lines::One);
            assert_eq!(
                shown,
                format!(".envrc\\u{{{:x}}}", c as u32).replace("\\u{ad}", "\\xad")
            );
        }
    }

    #[test]
    fn a_line_is_cut_to_the_width_with_the_cut_said() {
        assert_eq!(fit("short", Some(10)), "short");
        assert_eq!(fit(&"x".repeat(50), None), "x".repeat(50));
        let cut = fit(
            &format!("{}nd7 run: nothing changed", "x".repeat(75)),
            Some(80),
        );
        assert!(cut.chars().count() <= 80, "{cut}");
        assert!(cut.ends_with("…(+26)"), "{cut}");
        assert!(!cut.contains("nd7 run"), "{cut}");
        // Wide characters count twice.
        let wide = fit(&"漢".repeat(50), Some(20));
        assert!(wide.chars().map(columns).sum::<usize>() <= 20, "{wide}");
        // So do the ambiguous ones, which some terminals draw wide: 40
        // Greek letters do not fit in 60 columns there.
        let greek = fit(&"α".repeat(40), Some(60));
        assert!(greek.contains("…(+"), "{greek}");
        assert!(greek.chars().map(columns).sum::<usize>() <= 60, "{greek}");
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
