//! Anchoring on real files: at an anchoring hook, find the session's
//! transcripts, read what each has grown by, and write the entries.
//!
//! Two callers. Outside `nd7 run`, `nd7 record` anchors after appending the
//! hook's entry ([`for_record`]): the agent's own directory (Claude Code's
//! configuration directory, Codex's home) comes from the hook's
//! environment, the file from the payload, checked against the agent's
//! layout ([`layout`], [`codex_layout`]). Under `nd7 run`, `nd7 run` anchors
//! from outside the sandbox when it appends a hook's entry at its door
//! ([`for_run`]): where the agents keep their files was fixed by `nd7 run`
//! when it started the program ([`start_run`]), and the files are read by
//! the process the agent cannot reach.
//!
//! Which agent a payload is from decides only where its file may lie; the
//! entries, the state, the bounds and every refusal of a file are the same.
//!
//! The state that makes the work incremental lives beside the log, in the
//! log's directory (read-only inside the sandbox under `nd7 run`):
//!
//! ```text
//! <session dir>/transcript/
//!   log.json      where the agents' files are (nd7 run), the bounds (nd7 run),
//!                 bytes read so far, the files known, the notes written once
//!   file-<n>.json one per file: its identity, the BLAKE3 prefix state, the last anchor
//! ```
//!
//! The state only saves work: every anchor states a whole prefix's digest
//! and length, so a state that is lost or behind costs rereading, never a
//! wrong anchor, and one that is tampered with can only make later anchors
//! disagree with the file (which `nd7 verify --transcript` reports), never
//! make an earlier anchor agree with a rewritten prefix.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::codex_layout;
use super::layout::{self, Place};
use super::prefix::{Prefix, Saved};
use super::{Facts, Found, GapReason, Limits, Which};
use crate::hook::Agent;
use crate::safe_file::{self, Budget, Identity, OpenError, Stop};
use crate::session_log;

/// The state's directory inside a session's directory.
pub const STATE_DIR: &str = "transcript";
const LOG_STATE: &str = "log.json";
/// The note kept once the log's byte budget is spent.
const SESSION_NOTE: &str = "session_bytes";
/// The note kept once the log anchors as many files as it may.
const FILES_NOTE: &str = "files";
/// How many refused names a log's state remembers (so as to write each
/// down once); the names past them are written down at every hook.
const PATH_NOTES: usize = 256;

/// Why anchoring could not run at all (a file it could not read is a
/// `transcript_gap` entry instead).
#[derive(Debug, thiserror::Error)]
pub enum AnchorError {
    #[error("{}: cannot {action}: {source}", path.display())]
    Io {
        path: PathBuf,
        action: &'static str,
        source: io::Error,
    },
    /// The agent's own directory cannot be told (its adapter's words:
    /// "Claude Code", "CLAUDE_CONFIG_DIR", "transcripts").
    #[error(
        "cannot tell where {agent} keeps its {files}: {variable} and HOME are not absolute paths, and the account has no home"
    )]
    NoHome {
        agent: &'static str,
        variable: &'static str,
        files: &'static str,
    },
    #[error(
        "{}: held by another process past this hook's time for anchoring; nothing was read",
        path.display()
    )]
    Locked { path: PathBuf },
    #[error(
        "this run's chain was started without transcript anchoring (no {STATE_DIR}/{LOG_STATE})"
    )]
    NotStarted,
}

impl AnchorError {
    /// [`AnchorError::NoHome`] for `agent`, in its adapter's words.
    fn no_home(agent: Agent) -> AnchorError {
        let adapter = crate::agents::adapter(agent);
        let (variable, files) = adapter.home_words();
        AnchorError::NoHome {
            agent: adapter.title(),
            variable,
            files,
        }
    }
}

crate::files::io_context_into!(AnchorError);

/// What one hook's anchoring did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub anchors: usize,
    pub gaps: usize,
    pub breaks: usize,
    /// Bytes read and hashed.
    pub read: u64,
    /// Whether the log's state could not be read and was started afresh.
    pub state_reset: bool,
}

/// One hook's anchoring, worked out and waiting for its entries to be in
/// the log: the caller appends [`Pending::entries`] (with the hook's own
/// entry, in one append), then [`Pending::commit`]s, which writes the state.
/// Entries first, so a state can be behind the chain but never ahead of a
/// break it has not recorded. The state's lock is held until then, so
/// hooks anchoring at once queue, and each byte is hashed once.
#[derive(Debug)]
pub struct Pending {
    /// The entries to append, in order: (kind, body).
    pub entries: Vec<(&'static str, Value)>,
    pub report: Report,
    dir: PathBuf,
    states: Vec<(String, Vec<u8>)>,
    _lock: Option<File>,
}

impl Pending {
    /// A pending anchoring that only reports `why` anchoring failed, as one
    /// gap entry about `facts`' session.
    fn failed(facts: &Facts, why: &AnchorError) -> Pending {
        let which = Which {
            session_id: facts.session_id.clone(),
            agent_id: facts.agent_id.clone(),
            root: String::new(),
            path: facts.transcript_path.clone().unwrap_or_default(),
        };
        let body = super::gap_body(&which, GapReason::Unreadable, &why.to_string(), 0, None);
        Pending {
            entries: vec![(super::GAP, body)],
            report: Report {
                gaps: 1,
                ..Report::default()
            },
            dir: PathBuf::new(),
            states: Vec::new(),
            _lock: None,
        }
    }

    /// Writes the state, once the entries are in the log.
    pub fn commit(self) -> Result<Report, AnchorError> {
        for (name, bytes) in &self.states {
            write_state_file(&self.dir, name, bytes)?;
        }
        Ok(self.report)
    }
}

/// Where the agents keep a run's files, fixed when the run started.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct RunPlace {
    /// Claude Code's configuration directory.
    config: PathBuf,
    project_key: String,
    /// Codex's home (absent in a state written before Codex was anchored).
    #[serde(default)]
    codex_home: Option<PathBuf>,
}

impl RunPlace {
    /// The directory fixed for `agent`'s files: `log.json` keeps one
    /// member per agent.
    fn home(&self, agent: Agent) -> Option<PathBuf> {
        match agent {
            Agent::ClaudeCode => Some(self.config.clone()),
            Agent::Codex => self.codex_home.clone(),
        }
    }
}

/// `log.json`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct LogState {
    #[serde(default)]
    run: Option<RunPlace>,
    #[serde(default)]
    limits: Option<Limits>,
    /// Bytes read over the log's life.
    #[serde(default)]
    read: u64,
    #[serde(default)]
    files: Vec<Known>,
    /// Entries written once per log (a bound reached, a path refused).
    #[serde(default)]
    notes: Vec<String>,
}

/// A file the log has met.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Known {
    session_id: String,
    #[serde(default)]
    agent_id: Option<String>,
    /// Below the agent's own directory.
    place: Vec<String>,
}

/// `file-<n>.json`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct FileState {
    #[serde(default)]
    identity: Option<Identity>,
    #[serde(default)]
    prefix: Option<Saved>,
    #[serde(default)]
    blake3: String,
    #[serde(default)]
    generation: u32,
    /// The last gap written for this file, so it is not written at every hook.
    #[serde(default)]
    last_gap: Option<String>,
}

/// Anchors for `nd7 record`, outside `nd7 run`: the agent's directory from
/// the environment (`CLAUDE_CONFIG_DIR`, `CODEX_HOME`, else `HOME`), the
/// bounds from the environment.
pub fn for_record(log_dir: &Path, facts: &Facts, started: Instant) -> Result<Pending, AnchorError> {
    let adapter = crate::agents::adapter(facts.agent);
    let root = adapter
        .home_from_env()
        .ok_or_else(|| AnchorError::no_home(facts.agent))?;
    let mut ctx = Ctx::new(log_dir, facts.agent, root, None, Limits::from_env());
    ctx.anchor(facts, started)
}

/// Fixes, at the start of a run, where the agent will keep the session's
/// files and the bounds (from `nd7 run`'s environment): the program starts
/// in `project`, with `home` (or `$CLAUDE_CONFIG_DIR`, `$CODEX_HOME`) as its
/// own.
pub fn start_run(log_dir: &Path, project: &Path, home: &Path) -> Result<(), AnchorError> {
    let env_home = crate::home::env_home();
    let home = Some(env_home.as_deref().unwrap_or(home));
    // Resolved here, once, where nd7 run's environment names them: from
    // now on no link on the way to a transcript is followed.
    let home_of = |agent| crate::agents::adapter(agent).home(home);
    let config =
        home_of(Agent::ClaudeCode).ok_or_else(|| AnchorError::no_home(Agent::ClaudeCode))?;
    let codex_home = home_of(Agent::Codex);
    let dir = state_dir(log_dir)?;
    let state = LogState {
        run: Some(RunPlace {
            config,
            project_key: layout::project_key(&project.to_string_lossy()),
            codex_home,
        }),
        limits: Some(Limits::from_env()),
        ..LogState::default()
    };
    save_json(&dir, LOG_STATE, &state)
}

/// The Codex home [`start_run`] fixed for the run whose chain is at
/// `log_dir`: where the door reads a Codex session's rollout. `None` when
/// the run fixed none (anchoring did not start, or the home could not be
/// told).
pub fn run_codex_home(log_dir: &Path) -> Option<PathBuf> {
    let state: LogState = load_json(&log_dir.join(STATE_DIR).join(LOG_STATE)).ok()??;
    state.run?.codex_home
}

/// Anchors for `nd7 run` at its door: where the files are and the bounds
/// come from what [`start_run`] fixed, never from the hook.
pub fn for_run(log_dir: &Path, facts: &Facts, started: Instant) -> Result<Pending, AnchorError> {
    let dir = log_dir.join(STATE_DIR);
    let state: LogState = load_json(&dir.join(LOG_STATE))?.ok_or(AnchorError::NotStarted)?;
    let run = state.run.ok_or(AnchorError::NotStarted)?;
    let root = run
        .home(facts.agent)
        .ok_or_else(|| AnchorError::no_home(facts.agent))?;
    let mut ctx = Ctx::new(
        log_dir,
        facts.agent,
        root,
        Some(run.project_key),
        state.limits.unwrap_or_default(),
    );
    ctx.anchor(facts, started)
}

struct Ctx<'a> {
    log_dir: &'a Path,
    /// Whose files: where they may lie below `root`.
    agent: Agent,
    /// The agent's own directory, every file's path below it.
    root: PathBuf,
    started_in: Option<String>,
    limits: Limits,
    /// Entries worked out so far, in order.
    entries: Vec<(&'static str, Value)>,
    /// State files to write once the entries are in, by name.
    states: Vec<(String, Vec<u8>)>,
}

/// One file to anchor.
struct Target {
    which: Which,
    place: Place,
}

/// A file to anchor, as the log left it at the last hook: its state, where
/// its prefix stands, and its number if the log has met it.
struct Last<'t> {
    target: &'t Target,
    known: Option<usize>,
    file_state: FileState,
    prefix: Prefix,
}

impl<'t> Last<'t> {
    /// The file's state (a fresh one, noted in the report, where it is not
    /// the JSON it should be) and its prefix restored.
    fn load(
        dir: &Path,
        target: &'t Target,
        state: &LogState,
        report: &mut Report,
    ) -> Result<Last<'t>, AnchorError> {
        let known = state
            .files
            .iter()
            .position(|k| k.place == target.place.components);
        let file_state = match known {
            Some(n) => load_or_reset(&dir.join(file_state_name(n)), report)?,
            None => FileState::default(),
        };
        let prefix = match &file_state.prefix {
            Some(saved) => Prefix::restore(saved).unwrap_or_else(|_| {
                report.state_reset = true;
                Prefix::new()
            }),
            None => Prefix::new(),
        };
        Ok(Last {
            target,
            known,
            file_state,
            prefix,
        })
    }
}

/// The file opened below the agent's directory and numbered in the log.
struct Open<'t> {
    target: &'t Target,
    /// Its number in the log.
    index: usize,
    file_state: FileState,
    prefix: Prefix,
    opened: safe_file::Opened,
    /// What the log had anchored of it before this hook.
    anchored: u64,
}

/// The file found to hold what was anchored of it (or its prefix started
/// afresh after a break): it may be read on.
struct Held<'t> {
    open: Open<'t>,
    /// Whether its identity or its prefix differ from the state's.
    changed: bool,
}

/// The file read on as far as this hook may.
struct Grown<'t> {
    open: Open<'t>,
    changed: bool,
    /// Bytes read at this hook.
    read: u64,
    stop: Stop,
}

/// The bytes still to read: the log's, and this hook's.
#[derive(Clone, Copy)]
struct Left {
    session: u64,
    hook: u64,
}

impl<'a> Ctx<'a> {
    fn new(
        log_dir: &'a Path,
        agent: Agent,
        root: PathBuf,
        started_in: Option<String>,
        limits: Limits,
    ) -> Ctx<'a> {
        Ctx {
            log_dir,
            agent,
            root,
            started_in,
            limits,
            entries: Vec::new(),
            states: Vec::new(),
        }
    }

    fn write(&mut self, kind: &'static str, body: Value) {
        self.entries.push((kind, body));
    }

    /// Stages `value` to be written as the state file `name`.
    fn stage<T: Serialize>(&mut self, name: String, value: &T) -> Result<(), AnchorError> {
        let bytes = serde_json::to_vec(value)
            .map_err(|e| io_err(Path::new(&name), "serialise")(io::Error::other(e)))?;
        self.states.retain(|(n, _)| *n != name);
        self.states.push((name, bytes));
        Ok(())
    }

    fn anchor(&mut self, facts: &Facts, started: Instant) -> Result<Pending, AnchorError> {
        let dir = state_dir(self.log_dir)?;
        let lock_path = session_log::lock_place(self.log_dir, session_log::Lock::Transcript);
        let lock = session_log::open_lock(&lock_path).map_err(io_err(&lock_path, "open"))?;
        let deadline = started + Duration::from_millis(self.limits.hook_ms);
        lock_by(&lock, &lock_path, deadline)?;

        let mut report = Report::default();
        let mut state = match load_json::<LogState>(&dir.join(LOG_STATE)) {
            Ok(Some(state)) => state,
            Ok(None) => LogState::default(),
            Err(AnchorError::Io { source, .. }) if source.kind() == io::ErrorKind::InvalidData => {
                report.state_reset = true;
                LogState::default()
            }
            Err(e) => return Err(e),
        };
        let loaded = serde_json::to_vec(&state).unwrap_or_default();
        let mut budget = Budget {
            bytes: self.limits.hook_bytes,
            deadline: Some(deadline),
        };
        for target in self.targets(facts, &mut state, &mut report)? {
            self.anchor_file(&dir, &target, &mut state, &mut budget, &mut report)?;
        }
        if serde_json::to_vec(&state).unwrap_or_default() != loaded {
            self.stage(LOG_STATE.to_string(), &state)?;
        }
        Ok(Pending {
            entries: std::mem::take(&mut self.entries),
            report,
            dir,
            states: std::mem::take(&mut self.states),
            _lock: Some(lock),
        })
    }

    fn which(&self, session_id: &str, agent_id: Option<&str>, path: &Path) -> Which {
        Which {
            session_id: session_id.to_string(),
            agent_id: agent_id.map(str::to_string),
            root: self.root.display().to_string(),
            path: path.display().to_string(),
        }
    }

    /// The files this hook anchors: for Codex, the session's rollout; for
    /// Claude Code, the session's own, the subagent's a payload names or
    /// runs in, and at the session's end every subagent file the log knows
    /// or the session's `subagents` directory holds.
    fn targets(
        &mut self,
        facts: &Facts,
        state: &mut LogState,
        report: &mut Report,
    ) -> Result<Vec<Target>, AnchorError> {
        if self.agent == Agent::Codex {
            return self.rollout_targets(facts, state, report);
        }
        let sid = facts.session_id.as_str();
        let (main, mismatch) = layout::locate_main(
            &self.root,
            self.started_in.as_deref(),
            facts.cwd.as_deref(),
            sid,
            facts.transcript_path.as_deref(),
        );
        if let Some(m) = mismatch {
            self.path_gap(sid, None, &m, state, report)?;
        }
        let Some(main) = main else {
            return Ok(Vec::new());
        };
        let key = main.project_key().to_string();
        let mut out = vec![self.target(sid, None, main)];
        if let Some(agent) = facts.agent_id.as_deref() {
            out.extend(self.agent_target(facts, &key, agent, state, report)?);
        }
        if facts.ends_session() {
            out.extend(self.known_subagents(sid, state));
            out.extend(self.listed_subagents(&key, sid));
        }
        let mut seen = std::collections::HashSet::new();
        out.retain(|t| seen.insert(t.place.clone()));
        Ok(out)
    }

    /// The file at `place`, of session `sid` (or its subagent `agent`).
    fn target(&self, sid: &str, agent: Option<&str>, place: Place) -> Target {
        Target {
            which: self.which(sid, agent, &place.under(&self.root)),
            place,
        }
    }

    /// The transcript of the subagent `agent` a payload names or runs in,
    /// where the layout puts it below the project `key` (a payload that
    /// names another place: a gap).
    fn agent_target(
        &mut self,
        facts: &Facts,
        key: &str,
        agent: &str,
        state: &mut LogState,
        report: &mut Report,
    ) -> Result<Option<Target>, AnchorError> {
        let sid = facts.session_id.as_str();
        let (place, mismatch) = layout::locate_agent(
            &self.root,
            Some(key),
            None,
            sid,
            agent,
            facts.agent_transcript_path.as_deref(),
        );
        if let Some(m) = mismatch {
            self.path_gap(sid, Some(agent), &m, state, report)?;
        }
        Ok(place.map(|place| self.target(sid, Some(agent), place)))
    }

    /// The subagent files of session `sid` the log has met.
    fn known_subagents(&self, sid: &str, state: &LogState) -> Vec<Target> {
        state
            .files
            .iter()
            .filter(|k| k.session_id == sid && !codex_layout::is_rollout(&k.place))
            .map(|known| {
                let place = Place {
                    components: known.place.clone(),
                };
                self.target(sid, known.agent_id.as_deref(), place)
            })
            .collect()
    }

    /// The subagent files the session's `subagents` directory below the
    /// project `key` holds, as many as the log anchors at most.
    fn listed_subagents(&self, key: &str, sid: &str) -> Vec<Target> {
        let dir: Vec<String> = ["projects", key, sid, "subagents"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let found = safe_file::list_beneath(&self.root, &dir, self.limits.files as usize, |n| {
            n.starts_with("agent-")
                && n.ends_with(".jsonl")
                && layout::is_name(&n["agent-".len()..n.len() - ".jsonl".len()])
        })
        .unwrap_or_default();
        found
            .iter()
            .filter_map(|name| {
                let agent = &name["agent-".len()..name.len() - ".jsonl".len()];
                layout::agent_place(key, sid, agent)
                    .map(|place| self.target(sid, Some(agent), place))
            })
            .collect()
    }

    /// Codex's session rollout, only where its layout puts one of this
    /// session's (the payload names it; its date cannot be worked out).
    fn rollout_targets(
        &mut self,
        facts: &Facts,
        state: &mut LogState,
        report: &mut Report,
    ) -> Result<Vec<Target>, AnchorError> {
        let sid = facts.session_id.as_str();
        let (place, mismatch) =
            codex_layout::locate(&self.root, sid, facts.transcript_path.as_deref());
        if let Some(m) = mismatch {
            self.path_gap(sid, None, &m, state, report)?;
        }
        let mut places: Vec<Place> = place.into_iter().collect();
        if facts.ends_session() {
            // The rollout anchored before, whatever the last payload names.
            places.extend(
                state
                    .files
                    .iter()
                    .filter(|k| k.session_id == sid && codex_layout::is_rollout(&k.place))
                    .map(|k| Place {
                        components: k.place.clone(),
                    }),
            );
        }
        let mut seen = std::collections::HashSet::new();
        places.retain(|p| seen.insert(p.clone()));
        Ok(places
            .into_iter()
            .map(|place| Target {
                which: self.which(sid, None, &place.under(&self.root)),
                place,
            })
            .collect())
    }

    /// A payload named a transcript where the layout puts none of this
    /// session's: written once per name.
    fn path_gap(
        &mut self,
        sid: &str,
        agent: Option<&str>,
        m: &layout::Mismatch,
        state: &mut LogState,
        report: &mut Report,
    ) -> Result<(), AnchorError> {
        // A digest, not the name, and at most PATH_NOTES of them: the state
        // is read and rewritten whole at every anchoring hook, and the
        // agent picks the names. Past the cap every such payload is
        // written down again.
        let note = format!("path:{}", blake3::hash(m.named.as_bytes()).to_hex());
        if state.notes.contains(&note) {
            return Ok(());
        }
        let which = self.which(sid, agent, Path::new(&m.named));
        let agent = crate::agents::adapter(self.agent).title();
        let detail = if m.expected.is_empty() {
            format!("the payload names a transcript nd7 cannot place in {agent}'s layout")
        } else {
            format!(
                "the payload names a transcript that is not where {agent}'s layout puts this session's ({})",
                m.expected
            )
        };
        self.gap(&which, GapReason::Path, &detail, 0, None, report)?;
        if state
            .notes
            .iter()
            .filter(|n| n.starts_with("path:"))
            .count()
            < PATH_NOTES
        {
            state.notes.push(note);
        }
        Ok(())
    }

    fn gap(
        &mut self,
        which: &Which,
        reason: GapReason,
        detail: &str,
        anchored: u64,
        size: Option<u64>,
        report: &mut Report,
    ) -> Result<(), AnchorError> {
        let body = super::gap_body(which, reason, detail, anchored, size);
        self.write(super::GAP, body);
        report.gaps += 1;
        Ok(())
    }

    /// Anchors what `target` has grown by since the log last read it,
    /// within this hook's `budget` and the log's, and stages the file's
    /// state. Each step takes the phase before it and gives the next:
    /// [`Last`] → [`Open`] → [`Held`] → [`Grown`], so none can be skipped
    /// or taken out of order.
    fn anchor_file(
        &mut self,
        dir: &Path,
        target: &Target,
        state: &mut LogState,
        budget: &mut Budget,
        report: &mut Report,
    ) -> Result<(), AnchorError> {
        let last = Last::load(dir, target, state, report)?;
        let session_left = self.limits.session_bytes.saturating_sub(state.read);
        if session_left == 0 {
            return self.session_spent_once(&last, state, report);
        }
        let Some(open) = self.open(last, state, report)? else {
            return Ok(());
        };
        let Some(held) = self.recheck(open, report)? else {
            return Ok(());
        };
        let left = Left {
            session: session_left,
            hook: budget.bytes,
        };
        let grown = self.read_on(held, left, budget.deadline, report)?;
        budget.bytes -= grown.read;
        state.read += grown.read;
        self.shortfall(&grown, left, state, report)?;
        self.save(grown)
    }

    /// The log's bytes are spent: said once per log.
    fn session_spent_once(
        &mut self,
        last: &Last,
        state: &mut LogState,
        report: &mut Report,
    ) -> Result<(), AnchorError> {
        if !state.notes.iter().any(|n| n == SESSION_NOTE) {
            let detail = self.session_spent();
            self.gap(
                &last.target.which,
                GapReason::SessionBytes,
                &detail,
                last.prefix.len(),
                None,
                report,
            )?;
            state.notes.push(SESSION_NOTE.into());
        }
        Ok(())
    }

    /// Opens the file below the agent's directory and numbers it in the
    /// log. `None` when this hook has nothing more to do with it: it is
    /// not written yet, it could not be opened ([`Ctx::unopened`]), or it
    /// is one more than the log anchors.
    fn open<'t>(
        &mut self,
        last: Last<'t>,
        state: &mut LogState,
        report: &mut Report,
    ) -> Result<Option<Open<'t>>, AnchorError> {
        let anchored = last.prefix.len();
        let opened = match safe_file::open_beneath(&self.root, &last.target.place.components) {
            Ok(opened) => opened,
            // Not written yet: nothing to anchor, nothing to say.
            Err(OpenError::Missing { .. }) if anchored == 0 => return Ok(None),
            Err(e) => return self.unopened(last, e, state, report).map(|()| None),
        };
        let Some(index) = self.register(state, last.target, last.known, report)? else {
            return Ok(None);
        };
        Ok(Some(Open {
            target: last.target,
            index,
            file_state: last.file_state,
            prefix: last.prefix,
            opened,
            anchored,
        }))
    }

    /// The file could not be opened: a break where it was anchored and is
    /// now gone or another file, else a gap, written once while its reason
    /// stays the same.
    fn unopened(
        &mut self,
        last: Last,
        e: OpenError,
        state: &mut LogState,
        report: &mut Report,
    ) -> Result<(), AnchorError> {
        let Some(index) = self.register(state, last.target, last.known, report)? else {
            return Ok(());
        };
        let which = &last.target.which;
        let anchored = last.prefix.len();
        let mut file_state = last.file_state;
        if anchored > 0 && !matches!(e, OpenError::Io { .. }) {
            let found = match e {
                OpenError::Missing { .. } => Found::Removed,
                _ => Found::Replaced,
            };
            self.broke(which, found, &e.to_string(), None, &mut file_state, report)?;
            file_state.prefix = None;
            file_state.identity = None;
        } else {
            let detail = e.to_string();
            if file_state.last_gap.as_deref() == Some(detail.as_str()) {
                return Ok(());
            }
            let reason = match e {
                OpenError::Io { .. } => GapReason::Unreadable,
                _ => GapReason::Refused,
            };
            self.gap(which, reason, &detail, anchored, None, report)?;
            file_state.last_gap = Some(detail);
        }
        self.stage(file_state_name(index), &file_state)
    }

    /// Whether the file still holds what the log anchored of it. Where it
    /// does not: a break, and the file is anchored afresh from its start.
    /// Where it cannot be read: a gap, and `None`.
    fn recheck<'t>(
        &mut self,
        mut open: Open<'t>,
        report: &mut Report,
    ) -> Result<Option<Held<'t>>, AnchorError> {
        if open.anchored > 0 {
            let which = &open.target.which;
            match still_anchored(&open.file_state, &open.prefix, &open.opened) {
                Ok(None) => {}
                Ok(Some((found, detail))) => {
                    let size = Some(open.opened.len);
                    self.broke(which, found, &detail, size, &mut open.file_state, report)?;
                    open.prefix = Prefix::new();
                }
                Err(e) => {
                    let detail = format!("cannot read {}: {e}", which.path);
                    let size = Some(open.opened.len);
                    let reason = GapReason::Unreadable;
                    self.gap(which, reason, &detail, open.anchored, size, report)?;
                    return Ok(None);
                }
            }
        }
        let changed = open.file_state.identity != Some(open.opened.identity)
            || open.prefix.len() != open.anchored;
        open.file_state.identity = Some(open.opened.identity);
        Ok(Some(Held { open, changed }))
    }

    /// Reads and hashes what the file has grown by, as far as `left`
    /// allows by `deadline`, and writes the anchor of the prefix read.
    fn read_on<'t>(
        &mut self,
        held: Held<'t>,
        left: Left,
        deadline: Option<Instant>,
        report: &mut Report,
    ) -> Result<Grown<'t>, AnchorError> {
        let Held { mut open, changed } = held;
        let from = open.prefix.len();
        let mut allowed = Budget {
            bytes: left.hook.min(left.session),
            deadline,
        };
        let stop = if open.opened.len > from {
            safe_file::read_range(
                &open.opened.file,
                from,
                open.opened.len,
                &mut allowed,
                |b| open.prefix.update(b),
            )
            .map_err(io_err(Path::new(&open.target.which.path), "read"))?
            .1
        } else {
            Stop::Done
        };
        let read = open.prefix.len() - from;
        report.read += read;
        if read > 0 {
            self.write_anchor(&mut open, from, report);
        }
        Ok(Grown {
            open,
            changed,
            read,
            stop,
        })
    }

    /// The anchor of the prefix read so far, the bytes from `from` on new.
    fn write_anchor(&mut self, open: &mut Open, from: u64, report: &mut Report) {
        let digest = open.prefix.digest();
        let body = super::anchor_body(
            &open.target.which,
            open.prefix.len(),
            &digest,
            from,
            open.file_state.generation,
            open.opened.identity,
        );
        self.write(super::ANCHOR, body);
        report.anchors += 1;
        open.file_state.blake3 = digest.to_hex().to_string();
        open.file_state.last_gap = None;
    }

    /// Where the file was not read to its end, a gap saying why (the log's
    /// bytes spent is noted, so that it is said once).
    fn shortfall(
        &mut self,
        grown: &Grown,
        left: Left,
        state: &mut LogState,
        report: &mut Report,
    ) -> Result<(), AnchorError> {
        let open = &grown.open;
        if open.prefix.len() >= open.opened.len {
            return Ok(());
        }
        let Some((reason, detail)) = self.why_stopped(grown.stop, left) else {
            return Ok(());
        };
        let size = Some(open.opened.len);
        self.gap(
            &open.target.which,
            reason,
            &detail,
            open.prefix.len(),
            size,
            report,
        )?;
        if reason == GapReason::SessionBytes {
            state.notes.push(SESSION_NOTE.into());
        }
        Ok(())
    }

    /// Why a read stopped short, as a gap's reason and detail; `None` when
    /// the file shrank while it was read (the next hook sees it).
    fn why_stopped(&self, stop: Stop, left: Left) -> Option<(GapReason, String)> {
        match stop {
            Stop::Time => Some((
                GapReason::HookTime,
                format!(
                    "this hook's {} ms for anchoring ran out; the next anchoring hook goes on",
                    self.limits.hook_ms
                ),
            )),
            Stop::Bytes if left.session <= left.hook => {
                Some((GapReason::SessionBytes, self.session_spent()))
            }
            Stop::Bytes => Some((
                GapReason::HookBytes,
                format!(
                    "this hook read the {} bytes one hook may; the next anchoring hook goes on",
                    self.limits.hook_bytes
                ),
            )),
            Stop::Done | Stop::Eof => None,
        }
    }

    /// Stages the file's state, where this hook changed it.
    fn save(&mut self, grown: Grown) -> Result<(), AnchorError> {
        let Grown {
            mut open,
            changed,
            read,
            ..
        } = grown;
        if changed || read > 0 || open.file_state.prefix.is_none() {
            open.file_state.prefix = Some(open.prefix.save());
            self.stage(file_state_name(open.index), &open.file_state)?;
        }
        Ok(())
    }

    fn session_spent(&self) -> String {
        format!(
            "this log has read the {} bytes it may read from transcripts; nothing more is anchored",
            self.limits.session_bytes
        )
    }

    /// Writes a `transcript_break` naming the last anchor, and starts the
    /// file's next generation.
    fn broke(
        &mut self,
        which: &Which,
        found: Found,
        detail: &str,
        size: Option<u64>,
        file_state: &mut FileState,
        report: &mut Report,
    ) -> Result<(), AnchorError> {
        let generation = file_state.generation + 1;
        let anchored = file_state
            .prefix
            .as_ref()
            .and_then(|p| Prefix::restore(p).ok())
            .map_or(0, |p| p.len());
        let body = super::break_body(
            which,
            found,
            detail,
            anchored,
            &file_state.blake3,
            size,
            file_state.identity,
            generation,
        );
        self.write(super::BREAK, body);
        report.breaks += 1;
        file_state.generation = generation;
        file_state.blake3.clear();
        file_state.last_gap = None;
        Ok(())
    }

    /// The file's number in the log, registering it if it is new. `None`
    /// when the log anchors as many files as it may (a gap, once).
    fn register(
        &mut self,
        state: &mut LogState,
        target: &Target,
        index: Option<usize>,
        report: &mut Report,
    ) -> Result<Option<usize>, AnchorError> {
        if index.is_some() {
            return Ok(index);
        }
        if state.files.len() as u64 >= self.limits.files {
            if !state.notes.iter().any(|n| n == FILES_NOTE) {
                let detail = format!(
                    "this log anchors at most {} transcript files; this one and any later ones are not anchored",
                    self.limits.files
                );
                self.gap(&target.which, GapReason::Files, &detail, 0, None, report)?;
                state.notes.push(FILES_NOTE.into());
            }
            return Ok(None);
        }
        state.files.push(Known {
            session_id: target.which.session_id.clone(),
            agent_id: target.which.agent_id.clone(),
            place: target.place.components.clone(),
        });
        Ok(Some(state.files.len() - 1))
    }
}

/// Whether the file `opened` is still the one `prefix` anchored, holding
/// the same last kilobyte: `Some` names what it was found to be instead.
/// Only the bytes of the last chunk are read again, so the cost does not
/// grow with the file; a rewrite further back is `nd7 verify
/// --transcript`'s to find.
fn still_anchored(
    file_state: &FileState,
    prefix: &Prefix,
    opened: &safe_file::Opened,
) -> io::Result<Option<(Found, String)>> {
    let anchored = prefix.len();
    if let Some(was) = file_state.identity
        && was != opened.identity
    {
        return Ok(Some((
            Found::Replaced,
            format!(
                "another file is at the path (device {}, inode {}; the anchored one was device {}, inode {})",
                opened.identity.dev, opened.identity.ino, was.dev, was.ino
            ),
        )));
    }
    if opened.len < anchored {
        return Ok(Some((
            Found::Truncated,
            format!(
                "the file is {} bytes, shorter than the {anchored} anchored",
                opened.len
            ),
        )));
    }
    let mut tail = vec![0u8; prefix.tail().len()];
    opened.file.read_exact_at(&mut tail, prefix.tail_start())?;
    if tail != prefix.tail() {
        return Ok(Some((
            Found::Rewritten,
            format!(
                "bytes {}..{anchored}, the end of what was anchored, hold other bytes",
                prefix.tail_start()
            ),
        )));
    }
    Ok(None)
}

/// A file's state, or a fresh one (noted in the report) when it is not
/// the JSON it should be.
fn load_or_reset(path: &Path, report: &mut Report) -> Result<FileState, AnchorError> {
    match load_json::<FileState>(path) {
        Ok(found) => Ok(found.unwrap_or_default()),
        Err(AnchorError::Io { source, .. }) if source.kind() == io::ErrorKind::InvalidData => {
            report.state_reset = true;
            Ok(FileState::default())
        }
        Err(e) => Err(e),
    }
}

fn file_state_name(n: usize) -> String {
    format!("file-{n}.json")
}

/// The state's directory in `log_dir`, made (with the session's directory,
/// 0700) if needed; neither may be a link.
fn state_dir(log_dir: &Path) -> Result<PathBuf, AnchorError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(log_dir)
        .map_err(io_err(log_dir, "create"))?;
    let dir = log_dir.join(STATE_DIR);
    match fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io_err(&dir, "create")(e)),
    }
    for d in [log_dir, dir.as_path()] {
        let meta = fs::symlink_metadata(d).map_err(io_err(d, "stat"))?;
        if !meta.is_dir() {
            return Err(AnchorError::Io {
                path: d.to_path_buf(),
                action: "keep the transcript state in",
                source: io::Error::other("it is a symbolic link or not a directory"),
            });
        }
    }
    Ok(dir)
}

/// Takes `lock` exclusively, waiting no later than `deadline`. The lock
/// lies where the floor cannot open it ([`session_log::lock_place`]), but
/// a log outside nd7's state keeps it beside the log, which whoever can
/// read the log can hold: the wait stays bounded, so no holder keeps a
/// hook, and its entry, for as long as it likes.
fn lock_by(lock: &File, path: &Path, deadline: Instant) -> Result<(), AnchorError> {
    loop {
        match lock.try_lock() {
            Ok(()) => return Ok(()),
            Err(std::fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(AnchorError::Locked {
                    path: path.to_path_buf(),
                });
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(io_err(path, "lock (exclusive)")(e));
            }
        }
    }
}

/// Reads a state file: `None` when there is none; an `InvalidData` error
/// when it is not the JSON it should be.
fn load_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>, AnchorError> {
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(path, "open")(e)),
    };
    let mut text = Vec::new();
    io::Read::read_to_end(&mut io::Read::take(&file, 1 << 20), &mut text)
        .map_err(io_err(path, "read"))?;
    serde_json::from_slice(&text)
        .map(Some)
        .map_err(|e| io_err(path, "read")(io::Error::new(io::ErrorKind::InvalidData, e)))
}

/// Writes `value` as the state file `name`, at once ([`write_state`]).
fn save_json<T: Serialize>(dir: &Path, name: &str, value: &T) -> Result<(), AnchorError> {
    let text = serde_json::to_vec(value)
        .map_err(|e| io_err(&dir.join(name), "serialise")(io::Error::other(e)))?;
    write_state_file(dir, name, &text)
}

/// Writes a state file whole, as `head` is written (ADR-0011, through
/// [`crate::files::swap_in`]): `<name>.tmp` filled in place, then swapped
/// with `<name>`, which frees no inode (replacing the file cost 0.4 ms here,
/// most of an anchoring hook's own time). A reader sees the old state or the
/// new, never a mix.
pub(crate) fn write_state_file(dir: &Path, name: &str, text: &[u8]) -> Result<(), AnchorError> {
    let tmp = dir.join(format!("{name}.tmp"));
    crate::files::swap_in(&dir.join(name), &tmp, text).map_err(|c| AnchorError::Io {
        path: c.path,
        action: c.action,
        source: c.source,
    })
}

/// What `nd7 record` anchors for a hook's payload outside `nd7 run`, into
/// `log` (the payload's session): `None` when the payload is no anchoring
/// event. The entries are [`super::SOURCE`]'s, for [`record_events`].
pub fn for_payload(
    input: &[u8],
    agent: Agent,
    log: &crate::session_log::SessionLog,
) -> Option<Result<Pending, AnchorError>> {
    let facts = Facts::of(input, agent)?;
    if facts.session_id != log.session_id() {
        return None;
    }
    Some(for_record(log.dir(), &facts, Instant::now()))
}

/// A pending anchoring's entries as `nd7 record` writes them: stamped now,
/// in `session`, [`super::SOURCE`].
pub fn record_events(
    invocation: &crate::hook::Invocation,
    session: &str,
    pending: &Pending,
) -> Vec<crate::hook::Event> {
    let ts = session_log::now_ns();
    pending
        .entries
        .iter()
        .map(|(kind, body)| crate::hook::Event {
            ts,
            host: invocation.host.clone(),
            hook_ppid: invocation.hook_ppid,
            cwd: None,
            session: session.to_string(),
            tool_use_id: None,
            source: super::SOURCE,
            kind: crate::hook::Kind::Exit(kind),
            body: crate::hook::to_raw(body),
        })
        .collect()
}

/// What `nd7 run` anchors at its door for a hook's payload, read outside
/// the floor, into the run's chain at `log_dir`: `None` for a payload that
/// anchors nothing, or a chain started without anchoring (by an older nd7).
/// A failure that stops anchoring altogether comes back as one gap entry,
/// so it is not lost.
pub fn at_door(log_dir: &Path, agent: Agent, payload: &[u8], started: Instant) -> Option<Pending> {
    let facts = Facts::of(payload, agent)?;
    match for_run(log_dir, &facts, started) {
        Ok(pending) => Some(pending),
        Err(AnchorError::NotStarted) => None,
        Err(e) => Some(Pending::failed(&facts, &e)),
    }
}
