//! Where the reading commands write: standard output, or a pager when it is a
//! terminal, as git does; and whether to colour.
//!
//! Colour only when standard output is a terminal, `NO_COLOR` is unset or
//! empty and `TERM` is not `dumb` (or when `--color=always` asks). The pager
//! is `$ND7_PAGER`, else `$PAGER`, else `less -FRX`, run by `sh -c` with
//! `LESS=FRX` set if unset (so a plain `PAGER=less` shows colour and quits
//! on a short page); an empty value or `cat` means none, and there is none
//! when standard output is not a terminal. A reader that goes away (the pager
//! quit, `| head` closed the pipe) ends the output quietly.

use std::io::{self, BufWriter, IsTerminal, Write};
use std::process::{Child, ChildStdin, Command, Stdio};

/// `--color`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ColourChoice {
    #[default]
    Auto,
    Always,
    Never,
}

/// Whether to colour, from the choice, the environment and the terminal.
pub fn colour(
    choice: ColourChoice,
    stdout_is_terminal: bool,
    env: &dyn Fn(&str) -> Option<String>,
) -> bool {
    match choice {
        ColourChoice::Always => true,
        ColourChoice::Never => false,
        ColourChoice::Auto => {
            stdout_is_terminal
                && env("NO_COLOR").is_none_or(|v| v.is_empty())
                && env("TERM").as_deref() != Some("dumb")
        }
    }
}

/// The pager command, or `None` for no pager.
pub fn pager_command(env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    let chosen = env("ND7_PAGER").or_else(|| env("PAGER"));
    match chosen {
        None => Some("less -FRX".into()),
        Some(p) if p.trim().is_empty() || p.trim() == "cat" => None,
        Some(p) => Some(p),
    }
}

/// Why writing stopped.
#[derive(Debug)]
pub enum Stopped {
    /// The reader went away: end quietly.
    Gone,
    Failed(io::Error),
}

impl From<io::Error> for Stopped {
    fn from(e: io::Error) -> Stopped {
        if e.kind() == io::ErrorKind::BrokenPipe {
            Stopped::Gone
        } else {
            Stopped::Failed(e)
        }
    }
}

enum Sink {
    Stdout(BufWriter<io::Stdout>),
    Pager(Child, BufWriter<ChildStdin>),
}

/// The output of one command.
pub struct Output {
    sink: Sink,
    pub colour: bool,
}

fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

impl Output {
    /// Standard output, through the pager when `page` and it is a terminal.
    pub fn open(page: bool, choice: ColourChoice) -> Output {
        let terminal = io::stdout().is_terminal();
        let colour = colour(choice, terminal, &env_var);
        let sink = match (page && terminal)
            .then(|| pager_command(&env_var))
            .flatten()
        {
            Some(command) => spawn_pager(&command)
                .map(|(child, stdin)| Sink::Pager(child, BufWriter::new(stdin)))
                .unwrap_or_else(|_| Sink::Stdout(BufWriter::new(io::stdout()))),
            None => Sink::Stdout(BufWriter::new(io::stdout())),
        };
        Output { sink, colour }
    }

    fn writer(&mut self) -> &mut dyn Write {
        match &mut self.sink {
            Sink::Stdout(w) => w,
            Sink::Pager(_, w) => w,
        }
    }

    /// Writes one line.
    pub fn line(&mut self, text: &str) -> Result<(), Stopped> {
        let w = self.writer();
        w.write_all(text.as_bytes())?;
        w.write_all(b"\n")?;
        Ok(())
    }

    /// Writes bytes as they are.
    pub fn bytes(&mut self, bytes: &[u8]) -> Result<(), Stopped> {
        self.writer().write_all(bytes)?;
        Ok(())
    }

    /// Flushes, and waits for the pager to be closed.
    pub fn finish(self) -> Result<(), Stopped> {
        match self.sink {
            Sink::Stdout(mut w) => w.flush().map_err(Stopped::from),
            Sink::Pager(mut child, mut w) => {
                let flushed = w.flush();
                drop(w);
                let _ = child.wait();
                flushed.map_err(Stopped::from)
            }
        }
    }
}

fn spawn_pager(command: &str) -> io::Result<(Child, ChildStdin)> {
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(command).stdin(Stdio::piped());
    if std::env::var_os("LESS").is_none() {
        cmd.env("LESS", "FRX");
    }
    if std::env::var_os("LV").is_none() {
        cmd.env("LV", "-c");
    }
    let mut child = cmd.spawn()?;
    let stdin = child
        .stdin
        .take()
        .ok_or_else(|| io::Error::other("the pager has no standard input"))?;
    Ok((child, stdin))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn colour_only_on_a_terminal_and_never_with_no_color() {
        assert!(colour(ColourChoice::Auto, true, &env(&[])));
        assert!(!colour(ColourChoice::Auto, false, &env(&[])));
        assert!(!colour(
            ColourChoice::Auto,
            true,
            &env(&[("NO_COLOR", "1")])
        ));
        assert!(colour(ColourChoice::Auto, true, &env(&[("NO_COLOR", "")])));
        assert!(!colour(ColourChoice::Auto, true, &env(&[("TERM", "dumb")])));
        assert!(colour(
            ColourChoice::Always,
            false,
            &env(&[("NO_COLOR", "1")])
        ));
        assert!(!colour(ColourChoice::Never, true, &env(&[])));
    }

    #[test]
    fn the_pager_is_nd7_pager_then_pager_then_less() {
        assert_eq!(pager_command(&env(&[])).as_deref(), Some("less -FRX"));
        assert_eq!(
            pager_command(&env(&[("PAGER", "more")])).as_deref(),
            Some("more")
        );
        assert_eq!(
            pager_command(&env(&[("PAGER", "more"), ("ND7_PAGER", "most")])).as_deref(),
            Some("most")
        );
        assert_eq!(pager_command(&env(&[("ND7_PAGER", "")])), None);
        assert_eq!(pager_command(&env(&[("PAGER", "cat")])), None);
    }
}
