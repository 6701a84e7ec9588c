//! The terminal `nd7 run` shares with the agent's program: kept as the user
//! had it, and given back before nd7's own last lines (ADR-0090, ADR-0098).

use std::io;

use crate::read::safe;

/// Writes [`safe::RESET`] to stderr when it is a terminal, so that nothing
/// the agent's program left it in hides what nd7 prints next (ADR-0090).
pub(super) fn reset_terminal() {
    let err = io::stderr();
    if rustix::termios::isatty(&err) {
        let _ = io::Write::write_all(&mut err.lock(), safe::RESET.as_bytes());
    }
}

/// The terminal as the user had it before the agent's program had it
/// (ADR-0098). That program may change the terminal's line settings (`stty
/// -echo -opost`), leave the terminal's answers to its questions (DA, DSR,
/// a title report) in the terminal's input, where the user's shell would
/// read them as typed, and set the size the terminal says it has (`stty cols
/// 1000`), so that [`safe::fit`] would cut nothing and a line of its text
/// would wrap to the start of a row and pass for one of nd7's own.
pub(super) struct Terminal {
    /// The line settings, when stdin or stderr is a terminal.
    settings: Option<rustix::termios::Termios>,
    /// The width stderr's terminal said it had.
    width: Option<usize>,
}

impl Terminal {
    pub(super) fn before() -> Terminal {
        Terminal {
            settings: rustix::termios::tcgetattr(io::stderr())
                .or_else(|_| rustix::termios::tcgetattr(io::stdin()))
                .ok(),
            width: terminal_width(),
        }
    }

    /// Puts the line settings back and throws away what waits in the
    /// terminal's input (`TCSAFLUSH`): the answers the terminal gave the
    /// program's questions, and anything typed meanwhile. An answer the
    /// terminal gives later still reaches the shell (docs/sandbox.md).
    pub(super) fn give_back(&self) {
        let Some(settings) = &self.settings else {
            return;
        };
        let flush = rustix::termios::OptionalActions::Flush;
        if rustix::termios::tcsetattr(io::stderr(), flush, settings).is_err() {
            let _ = rustix::termios::tcsetattr(io::stdin(), flush, settings);
        }
    }

    /// The width to cut lines to: the smaller of the widths the terminal
    /// said before and after the program, so a size the program set can
    /// only make the lines shorter.
    pub(super) fn width(&self) -> Option<usize> {
        let now = terminal_width()?;
        Some(self.width.map_or(now, |before| before.min(now)))
    }
}

/// The width of the terminal stderr is, in columns; `None` when it is not
/// one (nothing wraps there). A terminal that does not say is taken as 80.
fn terminal_width() -> Option<usize> {
    let err = io::stderr();
    if !rustix::termios::isatty(&err) {
        return None;
    }
    let cols = rustix::termios::tcgetwinsize(&err).map_or(0, |w| w.ws_col);
    Some(if cols == 0 { 80 } else { usize::from(cols) })
}
