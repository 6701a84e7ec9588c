//! What ran: the execs nd7's observer saw in a run's tree (ADR-0110), as
//! the run's chain holds them (`source: effect:nd7`).
//!
//! The observer (outside the floor) hands `nd7 run` one [`Seen`] line per
//! exec, one [`Note::Exit`] per exit of a process it saw exec, and
//! [`Note::Lost`] for execs it could not keep up with; `nd7 run` gathers
//! them into [`Batch`]es, each one `ran` entry, so the envelope (hash,
//! session, host) is paid once per batch, not once per exec (ADR-0111).

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::hook::Event;
use crate::run_entry::Stamp;

pub use crate::run_entry::{EFFECT_SOURCE as SOURCE, NOT_OBSERVED, RAN};

/// The executable a process runs after its exec, as the kernel knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exe {
    /// `/proc/PID/exe` (a memfd reads `/memfd:NAME (deleted)`).
    pub path: String,
    pub dev: u64,
    pub ino: u64,
    /// BLAKE3 of its bytes, hex; `None` when they could not be read.
    pub blake3: Option<String>,
}

/// One exec, read after it happened, while the process was held.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    pub pid: u32,
    /// The process that forked it (not the one it may have been reparented
    /// to).
    pub ppid: u32,
    /// The child of `nd7 run` it descends from: the agent's program or a
    /// command the exit started; `None` outside both.
    pub root: Option<u32>,
    /// Which child of `nd7 run` that is, counted from 1 as the front saw
    /// them made: a later child given the same pid has another number, so
    /// a process a command left behind is never named by a later command
    /// that got its root's pid (ADR-0144). 0 when it has no root.
    #[serde(default)]
    pub root_number: u64,
    /// Wall-clock nanoseconds when the observer saw it.
    pub t: u64,
    /// `None` when the new image could not be read: not confirmed.
    pub exe: Option<Exe>,
    pub argv: Vec<String>,
    /// Whether `argv` was cut at [`ARGV_LIMIT`] bytes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cut: bool,
    pub cwd: Option<String>,
}

/// The bytes of arguments kept per exec; the rest is cut (and said so).
pub const ARGV_LIMIT: usize = 4096;

/// One line from the observer to `nd7 run`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Note {
    Exec(Seen),
    /// A process seen to exec has ended: its exit code, or minus the signal.
    Exit {
        pid: u32,
        status: i32,
    },
    /// Execs the observer held back from running (killed at their exec)
    /// because its queue was past its bound.
    Lost {
        count: u64,
    },
}

/// Splits `/proc/PID/cmdline` into arguments, lossily, keeping at most
/// [`ARGV_LIMIT`] bytes. Returns the arguments and whether any were cut.
pub fn argv(cmdline: &[u8]) -> (Vec<String>, bool) {
    let cut = cmdline.len() > ARGV_LIMIT;
    let kept = &cmdline[..cmdline.len().min(ARGV_LIMIT)];
    let kept = kept.strip_suffix(b"\0").unwrap_or(kept);
    if kept.is_empty() {
        return (Vec::new(), cut);
    }
    let args = kept
        .split(|&b| b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    (args, cut)
}

/// The execs and exits of one `ran` entry, with each executable written
/// once per entry.
#[derive(Default, Debug)]
pub struct Batch {
    exes: Vec<Exe>,
    execs: Vec<Value>,
    exits: Vec<Value>,
}

impl Batch {
    /// Adds an exec; `command` is the seq of the exit's `exec` entry for
    /// the command it ran under, when it did.
    pub fn exec(&mut self, seen: &Seen, command: Option<u64>) {
        let mut e = json!({"pid": seen.pid, "ppid": seen.ppid, "t": seen.t});
        let m = e.as_object_mut().expect("an object");
        match &seen.exe {
            Some(exe) => {
                let i = match self.exes.iter().position(|x| x == exe) {
                    Some(i) => i,
                    None => {
                        self.exes.push(exe.clone());
                        self.exes.len() - 1
                    }
                };
                m.insert("exe".into(), json!(i));
            }
            None => {
                m.insert("confirmed".into(), json!(false));
            }
        }
        m.insert("argv".into(), json!(seen.argv));
        if seen.cut {
            m.insert("cut".into(), json!(true));
        }
        m.insert("cwd".into(), json!(seen.cwd));
        if let Some(seq) = command {
            m.insert("command".into(), json!(seq));
        }
        self.execs.push(e);
    }

    /// Adds the end of a process seen to exec.
    pub fn exit(&mut self, pid: u32, status: i32) {
        self.exits.push(json!([pid, status]));
    }

    pub fn execs(&self) -> usize {
        self.execs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.execs.is_empty() && self.exits.is_empty()
    }

    /// The `ran` entry's body; the batch is empty afterwards.
    pub fn take(&mut self) -> Value {
        let exes: Vec<Value> = self
            .exes
            .drain(..)
            .map(|x| json!([x.path, format!("{}:{}", x.dev, x.ino), x.blake3]))
            .collect();
        let mut body = json!({"exes": exes, "execs": std::mem::take(&mut self.execs)});
        if !self.exits.is_empty() {
            body["exits"] = json!(std::mem::take(&mut self.exits));
        }
        body
    }
}

/// The body of a `not_observed` entry: `count` execs not recorded, or
/// (`count` null) nothing observed in this run, and why.
pub fn not_observed_body(count: Option<u64>, why: &str) -> Value {
    json!({"count": count, "why": why})
}

/// One of the observer's entries, ready to append.
pub fn event(stamp: &Stamp, kind: &'static str, body: &Value) -> Event {
    let mut event = crate::run_entry::event(stamp, kind, None, None, body);
    event.source = SOURCE;
    event
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(pid: u32, path: &str) -> Seen {
        Seen {
            pid,
            ppid: 1,
            root: Some(1),
            root_number: 1,
            t: 5,
            exe: Some(Exe {
                path: path.into(),
                dev: 8,
                ino: 9,
                blake3: Some("ab".into()),
            }),
            argv: vec!["cc".into(), "-c".into()],
            cut: false,
            cwd: Some("/p".into()),
        }
    }

    #[test]
    fn an_executable_is_written_once_per_batch() {
        let mut b = Batch::default();
        b.exec(&seen(2, "/usr/bin/cc"), Some(7));
        b.exec(&seen(3, "/usr/bin/cc"), None);
        b.exit(2, 0);
        let body = b.take();
        assert_eq!(body["exes"], json!([["/usr/bin/cc", "8:9", "ab"]]));
        assert_eq!(body["execs"][0]["exe"], 0);
        assert_eq!(body["execs"][1]["exe"], 0);
        assert_eq!(body["execs"][0]["command"], 7);
        assert!(body["execs"][1].get("command").is_none());
        assert_eq!(body["exits"], json!([[2, 0]]));
        assert!(b.is_empty());
    }

    #[test]
    fn an_exec_not_read_after_it_happened_is_not_confirmed() {
        let mut b = Batch::default();
        let mut s = seen(2, "/x");
        s.exe = None;
        b.exec(&s, None);
        let body = b.take();
        assert_eq!(body["execs"][0]["confirmed"], false);
        assert!(body["execs"][0].get("exe").is_none());
    }

    #[test]
    fn arguments_are_split_and_cut_at_the_limit() {
        assert_eq!(argv(b"a\0b c\0"), (vec!["a".into(), "b c".into()], false));
        assert_eq!(argv(b""), (vec![], false));
        let long = vec![b'x'; ARGV_LIMIT + 10];
        let (args, cut) = argv(&long);
        assert!(cut);
        assert_eq!(args[0].len(), ARGV_LIMIT);
    }

    #[test]
    fn notes_round_trip_as_one_line_each() {
        for note in [
            Note::Exec(seen(2, "/bin/true")),
            Note::Exit { pid: 2, status: -9 },
            Note::Lost { count: 3 },
        ] {
            let line = serde_json::to_string(&note).expect("a note renders");
            assert!(!line.contains('\n'));
            assert_eq!(
                serde_json::from_str::<Note>(&line).expect("a note parses"),
                note
            );
        }
    }
}
