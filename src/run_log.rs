//! A run's chain on disk: the one log an `nd7 run` writes, from
//! outside the sandbox floor (ADR-0031, docs/log-format.md "A run's chain").
//!
//! Inside the floor the logs are read-only. The hooks' payloads reach this
//! chain through `nd7 run` (the door, [`RunLog::hook`]), which stamps them
//! `intent:claude-code`: the agent's word. Everything else here is nd7's own
//! account, [`crate::run_entry::SOURCE`]: the run's start and end, each command
//! the exit runs, each grant changed, each caller refused, and whatever else
//! the sandbox has to report ([`note`]).
//!
//! Appends go through [`SessionLog::append`] and so take its lock: the door,
//! the exit's threads, `nd7 allow` and any other writer queue on it.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;

use crate::hook::{Glimpse, Invocation, Kind};
use crate::record::entry::{self, EntryError};
use crate::run_dir::{LogRef, Record, RunDir, RunDirError};
use crate::run_entry::{
    self, Announced, Ended, Pairing, Reconciler, Reconciliation, RunFacts, Stamp,
};
use crate::session_log::{self, Appended, SessionLog, now_ns};

/// Why one of nd7's own entries could not be written.
#[derive(Debug, thiserror::Error)]
pub enum RunLogError {
    #[error("{0}")]
    Log(#[from] session_log::Error),
    #[error("{0}")]
    RunDir(#[from] RunDirError),
    #[error("session {0} keeps no log of its own (started by an older nd7)")]
    NoChain(u32),
}

/// How many refused callers are written down; the rest are only counted,
/// so a caller refused in a loop cannot fill the disk.
pub const REFUSALS_WRITTEN: u64 = 100;

/// How many bytes of hook payloads one run's door takes, in all: the agent
/// can send the door anything, as often as it likes (a hook's bytes are its
/// word), and each entry may hold up to 7 MiB; unbounded, forged entries
/// would fill the disk, and then no command could run (one the log cannot
/// hold is not run). Past it, hooks are refused and counted: one `refused`
/// entry says so, `run_end` has the count, and `nd7 run` warns.
pub const DOOR_BUDGET: u64 = 1 << 30;

/// [`DOOR_BUDGET`], or in test builds `ND7_TEST_DOOR_BUDGET` when set, so
/// the tests can spend it without writing a gigabyte.
fn door_budget() -> u64 {
    #[cfg(any(debug_assertions, feature = "fault-injection"))]
    if let Some(bytes) = std::env::var("ND7_TEST_DOOR_BUDGET")
        .ok()
        .and_then(|b| b.parse().ok())
    {
        return bytes;
    }
    DOOR_BUDGET
}

fn hostname() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

/// What became of a hook's payload at the door.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HookOutcome {
    Recorded(Appended),
    /// The run registered its own hook for this event; this copy (from a
    /// hook registered elsewhere, such as `nd7 setup`'s) was not recorded.
    Skipped,
    /// The run's door has taken its [`DOOR_BUDGET`]: not recorded, counted.
    OverBudget(String),
}

/// A run's chain, open for appending.
#[derive(Debug)]
pub struct RunLog {
    log: SessionLog,
    host: String,
    hooks: bool,
    /// How a command is held against the Bash call that announced it.
    pairing: Pairing,
    announced: Mutex<Announced>,
    refused: AtomicU64,
    /// Bytes of hook payloads taken through the door, and hooks refused
    /// once they passed [`DOOR_BUDGET`].
    door_bytes: AtomicU64,
    over_budget: AtomicU64,
    budget: u64,
    /// Connections to the hooks' door dropped unread (ADR-0097): each may
    /// have been a hook whose event is then missing.
    door_dropped: AtomicU64,
    /// What the floor refused, as `nd7 hook-explain` reported it (the first
    /// [`REFUSALS_WRITTEN`] written down; the summary at the run's end).
    floor_refused: Mutex<Vec<crate::policy::refusal::Refused>>,
    /// What to tell the model of each connection the egress proxy refused
    /// by its rules, and how many of them it has been told.
    net_refused: Mutex<(Vec<String>, usize)>,
    /// The commands the exit started, by the pid of their first process:
    /// the seq of each one's `exec` entry, for the execs seen below it.
    commands: Mutex<std::collections::HashMap<u32, u64>>,
}

impl RunLog {
    /// Starts a new chain under `logs_dir` whose first entry is `run_start`
    /// with `facts`. The directory must not exist yet, so the chain holds
    /// only what this run writes.
    pub fn start(logs_dir: &Path, facts: &RunFacts<'_>) -> Result<RunLog, RunLogError> {
        let ts = now_ns();
        let mut salt = [0u8; 2];
        let mut attempt = 0;
        let log = loop {
            let _ = getrandom::getrandom(&mut salt);
            let id = run_entry::run_id(ts / 1_000_000_000, facts.pid, u16::from_le_bytes(salt));
            match SessionLog::create_new(logs_dir, &id) {
                Ok(log) => break log,
                Err(session_log::Error::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::AlreadyExists && attempt < 8 =>
                {
                    attempt += 1;
                }
                Err(e) => return Err(e.into()),
            }
        };
        let mut run = RunLog::new(log, facts.hooks);
        run.pairing = Pairing::of_agent(facts.agent);
        run.note(
            run_entry::RUN_START,
            None,
            None,
            &run_entry::run_start_body(facts),
        )?;
        if facts.hooks {
            run.start_transcripts(&facts.rules);
        }
        Ok(run)
    }

    fn new(log: SessionLog, hooks: bool) -> RunLog {
        RunLog {
            log,
            host: hostname(),
            hooks,
            pairing: Pairing::default(),
            announced: Mutex::default(),
            refused: AtomicU64::new(0),
            door_bytes: AtomicU64::new(0),
            over_budget: AtomicU64::new(0),
            door_dropped: AtomicU64::new(0),
            budget: door_budget(),
            floor_refused: Mutex::default(),
            net_refused: Mutex::default(),
            commands: Mutex::default(),
        }
    }

    /// Fixes where Claude Code will keep the transcripts the door anchors:
    /// under the account's home (or `$CLAUDE_CONFIG_DIR`), for the project
    /// the program starts in (`rules`' `project` and `home`). A failure is a
    /// `transcript_gap` entry: the run goes on, unanchored.
    fn start_transcripts(&self, rules: &Value) {
        let path = |name: &str| rules.get(name).and_then(Value::as_str).map(PathBuf::from);
        let started = match (path("project"), path("home")) {
            (Some(project), Some(home)) => {
                crate::transcript::anchor::start_run(self.log.dir(), &project, &home)
                    .map_err(|e| e.to_string())
            }
            _ => Err("the run's rules name no project or home".to_string()),
        };
        if let Err(why) = started {
            let which = crate::transcript::Which {
                session_id: String::new(),
                agent_id: None,
                root: String::new(),
                path: String::new(),
            };
            let body = crate::transcript::gap_body(
                &which,
                crate::transcript::GapReason::Unreadable,
                &format!("transcripts are not anchored in this run: {why}"),
                0,
                None,
            );
            let _ = self.note(crate::transcript::GAP, None, None, &body);
        }
    }

    /// The chain a running run's record names, for writers other than
    /// `nd7 run` itself (`nd7 allow`, `nd7-exec` on macOS).
    pub fn open(record: &Record) -> Result<RunLog, RunLogError> {
        let LogRef { id, hooks } = record.log.clone().ok_or(RunLogError::NoChain(record.pid))?;
        let log = SessionLog::new(&record.policy.logs_dir(), &id)?;
        Ok(RunLog::new(log, hooks))
    }

    /// [`RunLog::open`], every append waiting at most `wait` for the chain's
    /// lock ([`SessionLog::waiting_at_most`]): for the writers on macOS,
    /// which are `nd7-exec` processes rather than `nd7 run` (ADR-0075).
    pub fn open_within(record: &Record, wait: std::time::Duration) -> Result<RunLog, RunLogError> {
        let LogRef { id, hooks } = record.log.clone().ok_or(RunLogError::NoChain(record.pid))?;
        let log = SessionLog::new(&record.policy.logs_dir(), &id)?.waiting_at_most(wait);
        Ok(RunLog::new(log, hooks))
    }

    /// How the run's record names this chain.
    pub fn reference(&self) -> LogRef {
        LogRef {
            id: self.log.session_id().to_string(),
            hooks: self.hooks,
        }
    }

    pub fn id(&self) -> &str {
        self.log.session_id()
    }

    pub fn log(&self) -> &SessionLog {
        &self.log
    }

    fn stamp(&self) -> Stamp {
        Stamp {
            ts: now_ns(),
            host: self.host.clone(),
            session: self.id().to_string(),
        }
    }

    /// Appends one of nd7's own entries, stamped now.
    pub fn note(
        &self,
        kind: &'static str,
        cwd: Option<&str>,
        tool_use_id: Option<&str>,
        body: &Value,
    ) -> Result<Appended, RunLogError> {
        let event = run_entry::event(&self.stamp(), kind, cwd, tool_use_id, body);
        Ok(self.log.append(&event)?)
    }

    /// Appends the egress proxy's entry for one connection
    /// (`source: effect:nd7-proxy`, kind `net`).
    pub fn net(&self, body: &Value) -> Result<Appended, RunLogError> {
        if let (Some(allow), Some(why), false) = (
            body["allow"].as_str(),
            body["why"].as_str(),
            body["agent_own"] == true,
        ) {
            let host = format!(
                "{}:{}",
                body["host"].as_str().unwrap_or("?"),
                body["port"].as_u64().unwrap_or(0)
            );
            let text = crate::policy::net::refusal_text(&host, why, allow);
            let mut kept = self.net_refused.lock().unwrap_or_else(|e| e.into_inner());
            if kept.0.len() < REFUSALS_WRITTEN as usize && !kept.0.contains(&text) {
                kept.0.push(text);
            }
        }
        let event = run_entry::event_from(
            run_entry::PROXY_SOURCE,
            &self.stamp(),
            run_entry::NET,
            None,
            None,
            body,
        );
        Ok(self.log.append(&event)?)
    }

    /// Appends a hook's payload for the agent, as the direct path would
    /// (same kinds, same bodies, `intent:claude-code`), into this chain.
    /// `hook_ppid` is the recorder's parent as the kernel reports it.
    pub fn hook(
        &self,
        request: &crate::floor_wire::HookRequest,
        hook_ppid: Option<u32>,
    ) -> Result<HookOutcome, EntryError> {
        if self.hooks && !request.run_hook {
            return Ok(HookOutcome::Skipped);
        }
        let size = request.body.len() as u64;
        let before = self.door_bytes.fetch_add(size, Ordering::Relaxed);
        if before.saturating_add(size) > self.budget {
            let why = format!(
                "this run's hooks have sent more than {} bytes through the door, all it takes in one run; this hook and every later one are counted, not recorded (the exit still writes down every command)",
                self.budget
            );
            if self.over_budget.fetch_add(1, Ordering::Relaxed) == 0 {
                self.refused("record", None, None, &why);
            }
            return Ok(HookOutcome::OverBudget(why));
        }
        let started = std::time::Instant::now();
        let invocation = Invocation {
            ts: request.ts,
            host: self.host.clone(),
            hook_ppid,
            cwd: request
                .cwd
                .as_ref()
                .map(|c| String::from_utf8_lossy(c).into_owned()),
        };
        let event = if request.glimpse {
            let glimpse: GlimpseWire = serde_json::from_slice(&request.body)
                .map_err(|e| EntryError::Payload(crate::hook::PayloadError::Json(e)))?;
            crate::hook::Event::omitted(
                &invocation,
                &glimpse.glimpse,
                glimpse.bytes,
                &glimpse.blake3,
            )
        } else {
            // Codex's rollout is read below the home fixed at the start,
            // as the anchoring below reads it.
            let codex_home = if crate::agents::adapter(request.agent).event_reads_home() {
                crate::transcript::anchor::run_codex_home(self.log.dir())
            } else {
                None
            };
            let builder = entry::Builder::Door {
                codex_home: codex_home.as_deref(),
            };
            let (event, _) = entry::event_for(request.agent, &invocation, &request.body, builder)?;
            if event.kind == Kind::ToolCall
                && let Ok(payload) = serde_json::from_str::<Value>(event.body.get())
                && let Ok(mut announced) = self.announced.lock()
            {
                announced.note(&payload);
            }
            event
        };
        // The transcript (Codex's rollout) is read here, outside the floor,
        // never by the hook inside it, and only where the agent's layout
        // puts the session's file; its anchors go in with the hook's entry.
        let anchoring = match request.glimpse {
            false => crate::transcript::anchor::at_door(
                self.log.dir(),
                request.agent,
                &request.body,
                started,
            ),
            true => None,
        };
        let mut events = vec![event];
        if let Some(pending) = &anchoring {
            let stamp = self.stamp();
            events.extend(
                pending
                    .entries
                    .iter()
                    .map(|(kind, body)| run_entry::event(&stamp, kind, None, None, body)),
            );
        }
        let appended = self.log.append_all(&events)?;
        if let Some(pending) = anchoring {
            let _ = pending.commit();
        }
        Ok(HookOutcome::Recorded(appended[0]))
    }

    /// Writes the `exec` entry for a command about to start, naming the Bash
    /// call that announced it when one did. Returns the entry's seq.
    pub fn exec_started(
        &self,
        command: &[u8],
        cwd: &Path,
        caller: u32,
        grants: &[PathBuf],
    ) -> Result<u64, RunLogError> {
        self.exec_started_inside(command, cwd, caller, grants, None)
    }

    /// [`RunLog::exec_started`] for a caller the kernel places `inside` the
    /// command whose `exec` entry has that seq (a nested `nd7-exec`), or in
    /// the floor (`None`). Only a command from the floor, in the form the
    /// run's agent hands Bash calls to the exit ([`Pairing`]), can claim a
    /// call: one asked for from inside another command is part of that one,
    /// and a bare command under Claude Code is nobody's Bash call, whatever
    /// its text (a call the user denied would otherwise be claimed by the
    /// same text run some other way).
    pub fn exec_started_inside(
        &self,
        command: &[u8],
        cwd: &Path,
        caller: u32,
        grants: &[PathBuf],
        inside: Option<u64>,
    ) -> Result<u64, RunLogError> {
        let announced = run_entry::bash_command(command);
        let text = std::str::from_utf8(command).ok();
        let key = match inside {
            None if self.hooks => self.pairing.key(text, announced.as_deref()),
            _ => None,
        };
        let tool_use_id = key.and_then(|key| {
            self.announced
                .lock()
                .ok()
                .and_then(|mut a| a.claim(key.as_bytes()))
        });
        let body = run_entry::exec_body(command, caller, grants, inside);
        let cwd = cwd.to_string_lossy();
        self.note(run_entry::EXEC, Some(&cwd), tool_use_id.as_deref(), &body)
            .map(|a| a.seq)
    }

    /// Notes that the command whose `exec` entry is `exec` started as
    /// process `pid` (a child of `nd7 run`), so the execs seen below it
    /// name it.
    pub fn command_started(&self, pid: u32, exec: u64) {
        if let Ok(mut c) = self.commands.lock() {
            c.insert(pid, exec);
        }
    }

    /// The `exec` seq of the command started as `pid`, if one was.
    pub fn command_of(&self, pid: u32) -> Option<u64> {
        self.commands.lock().ok()?.get(&pid).copied()
    }

    /// Appends one of the exec observer's entries (`source: effect:nd7`).
    pub fn effect(&self, kind: &'static str, body: &Value) -> Result<Appended, RunLogError> {
        let event = crate::effect::event(&self.stamp(), kind, body);
        Ok(self.log.append(&event)?)
    }

    /// Writes the `exec_end` entry of the command whose `exec` entry is `exec`.
    pub fn exec_ended(
        &self,
        exec: u64,
        ended: &Ended,
        watch: Option<&str>,
    ) -> Result<Appended, RunLogError> {
        let body = run_entry::exec_end_body(exec, ended, watch);
        self.note(run_entry::EXEC_END, None, None, &body)
    }

    /// Writes down a refused caller: the first [`REFUSALS_WRITTEN`], then
    /// only counts them (the count is in `run_end`).
    pub fn refused(&self, door: &str, pid: Option<u32>, uid: Option<u32>, why: &str) {
        let n = self.refused.fetch_add(1, Ordering::Relaxed);
        if n < REFUSALS_WRITTEN {
            let body = run_entry::refused_body(door, pid, uid, why);
            let _ = self.note(run_entry::REFUSED, None, None, &body);
        }
    }

    /// Counts `n` refused callers that are not written down one by one (the
    /// keeper kept only the first of them).
    pub fn refused_uncounted(&self, n: u64) {
        self.refused.fetch_add(n, Ordering::Relaxed);
    }

    /// The bytes of hook payloads this run's door takes ([`DOOR_BUDGET`]).
    pub fn door_budget(&self) -> u64 {
        self.budget
    }

    /// Writes down a connection to the hooks' door dropped unread: a
    /// `refused` entry (the first [`REFUSALS_WRITTEN`]), and the count in
    /// `run_end` (`door_dropped`), which `nd7 verify` reports as events
    /// that may be missing (ADR-0097).
    pub fn door_dropped(&self, why: &str) {
        self.door_dropped.fetch_add(1, Ordering::Relaxed);
        self.refused("record", None, None, why);
    }

    /// How many connections to the hooks' door were dropped unread.
    pub fn doors_dropped(&self) -> u64 {
        self.door_dropped.load(Ordering::Relaxed)
    }

    /// How many hooks the door refused past its budget.
    pub fn hooks_over_budget(&self) -> u64 {
        self.over_budget.load(Ordering::Relaxed)
    }

    /// Writes the `floor_refused` entry for a tool call the floor refused
    /// (`tool_use_id`'s), and keeps the paths for [`RunLog::floor_refusals`].
    /// Past [`REFUSALS_WRITTEN`] paths, they are only kept: an agent that
    /// fails in a loop cannot fill the disk.
    pub fn floor_refused(
        &self,
        refused: &[crate::policy::refusal::Refused],
        tool: &str,
        home: &Path,
        cwd: Option<&str>,
        tool_use_id: Option<&str>,
    ) -> Result<(), RunLogError> {
        let written = {
            let mut kept = self.floor_refused.lock().unwrap_or_else(|e| e.into_inner());
            let before = kept.len();
            for r in refused {
                if kept.len() < 4 * REFUSALS_WRITTEN as usize {
                    kept.push(r.clone());
                }
            }
            before
        };
        if written as u64 >= REFUSALS_WRITTEN {
            return Ok(());
        }
        let body = crate::policy::refusal::entry_body(refused, tool, home);
        self.note(run_entry::FLOOR_REFUSED, cwd, tool_use_id, &body)
            .map(|_| ())
    }

    /// What to tell the model of the connections the egress proxy refused
    /// since it was last asked (each refusal once).
    pub fn net_refusals_untold(&self) -> Vec<String> {
        let mut kept = self.net_refused.lock().unwrap_or_else(|e| e.into_inner());
        let told = kept.1;
        kept.1 = kept.0.len();
        kept.0[told..].to_vec()
    }

    /// What the floor refused this run, as reported so far.
    pub fn floor_refusals(&self) -> Vec<crate::policy::refusal::Refused> {
        self.floor_refused
            .lock()
            .map(|k| k.clone())
            .unwrap_or_default()
    }

    /// Holds the chain against itself: see [`Reconciler`].
    pub fn reconcile(&self) -> Result<Reconciliation, RunLogError> {
        reconcile(&self.log).map_err(RunLogError::from)
    }

    /// Writes `run_end`, with how the program ended and the run's tally.
    /// Returns the tally.
    pub fn end(&self, ended: &Ended) -> Result<Reconciliation, RunLogError> {
        let tally = self.reconcile()?;
        let refused = self.refused.load(Ordering::Relaxed);
        let mut body = run_entry::run_end_body(ended, &tally, refused);
        body["hooks_over_budget"] = self.hooks_over_budget().into();
        body["door_dropped"] = self.doors_dropped().into();
        self.note(run_entry::RUN_END, None, None, &body)?;
        Ok(tally)
    }
}

/// Reads any log through the [`Reconciler`]; `is_run` in the result says
/// whether it is a run's chain at all.
pub fn reconcile(log: &SessionLog) -> Result<Reconciliation, session_log::Error> {
    let mut reconciler = Reconciler::new();
    log.for_each_line(|line| reconciler.feed(line))?;
    Ok(reconciler.finish())
}

/// Whether `log` opens with nd7's own `run_start` (`exit:nd7`): what makes a
/// chain a run's, whatever its name. Reads the first line only. Only as
/// strong as the machine: outside the sandbox, anyone who can write the
/// logs can write such a line too.
pub fn opens_a_run(log: &SessionLog) -> bool {
    let mut reconciler = Reconciler::new();
    let _ = log.for_each_line(|line| {
        reconciler.feed(line);
        false
    });
    reconciler.finish().is_run
}

/// The body `nd7 record` sends through the door for a payload too large to
/// store.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct GlimpseWire {
    #[serde(flatten)]
    pub glimpse: Glimpse,
    pub bytes: u64,
    pub blake3: String,
}

/// Writes the `grant` entry for a change `nd7 allow` or `nd7 deny` just made
/// to `run_dir`: the change, the path, and the grants now in force.
pub fn grant_changed(run_dir: &RunDir, change: &str, path: &Path) -> Result<u64, RunLogError> {
    let record = run_dir.record()?;
    let body = run_entry::grant_body(change, path, &record.policy.grants);
    RunLog::open(&record)?
        .note(run_entry::GRANT, None, None, &body)
        .map(|a| a.seq)
}

/// Puts one of nd7's own entries (`source: exit:nd7`) into the log of the
/// run whose directory is `run_dir`, for code outside the floor that has
/// something to report: processes ended with the run, a dangerous file
/// changed, a grant dropped. `kind` is a new entry kind, documented in
/// docs/log-format.md; `body` is its JSON object. Returns the entry's seq.
///
/// Each call opens the chain and takes its lock: fine for the occasional
/// report; the exit's per-command entries use a [`RunLog`] kept open.
pub fn note(run_dir: &RunDir, kind: &'static str, body: &Value) -> Result<u64, RunLogError> {
    let record = run_dir.record()?;
    RunLog::open(&record)?
        .note(kind, None, None, body)
        .map(|a| a.seq)
}
