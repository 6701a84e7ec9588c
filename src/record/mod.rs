//! `nd7 record`: one hook payload in, one entry appended.
//!
//! The recorder must never change what the agent does: Claude Code reads a
//! hook's standard output as instructions and treats exit status 2 as a
//! block. So the binary exits 0 whatever happens here and prints nothing to
//! standard output; this module only reports what went wrong, for one line on
//! standard error. A failed record leaves the log as it was.
//!
//! The entry a payload becomes is built in [`entry`], below this command and
//! below the run's log, whose door builds the same entries.

pub mod entry;

use std::io::Read;
use std::path::Path;

use crate::floor_wire::{self, HookRequest};
use crate::hook::{Agent, Invocation, PayloadError};
use crate::sandbox::{self, HookAnswer};
use crate::session_log::{self, Appended, SessionLog};
use entry::{Builder, EntryError, MAX_STORED_PAYLOAD, event_for, glimpse};

/// Set by `nd7 run` for the program it runs, and so for its hooks, to its
/// session directory: the entry must go through the run's door, since the
/// log is read-only inside the floor. Only a hint: the door is used only if
/// the kernel places that session's `nd7 run` among the recorder's
/// ancestors (and, on Linux, says it is the process serving the door).
pub const RUN_VARIABLE: &str = "ND7_RUN";

/// Standard input beyond this is not read into memory at all.
pub const MAX_READ: u64 = 1 << 30;

/// The recorder's facts, taken now: call it before reading the payload.
pub fn invocation_now() -> Invocation {
    let ts = session_log::now_ns();
    let host = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    let cwd = std::env::current_dir()
        .ok()
        .map(|p| p.to_string_lossy().into_owned());
    Invocation {
        ts,
        host,
        hook_ppid: Some(std::os::unix::process::parent_id()),
        cwd,
    }
}

/// Why a payload was not recorded.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("cannot read standard input: {0}")]
    Stdin(#[source] std::io::Error),
    #[error("the payload is larger than {MAX_READ} bytes")]
    TooLargeToRead,
    #[error(transparent)]
    Payload(#[from] PayloadError),
    #[error(transparent)]
    Log(#[from] session_log::Error),
    #[error(
        "{0}; inside nd7 run's sandbox the logs are read-only and only nd7 run writes them, and no running nd7 run was found among this hook's ancestors"
    )]
    ReadOnly(Box<RecordError>),
    #[error(
        "this hook runs under nd7 run ({RUN_VARIABLE} is set), but no running nd7 run was found among its ancestors; the logs are read-only inside the sandbox, so nothing could be written"
    )]
    RunGone,
    #[error("{0}")]
    Door(String),
}

impl From<EntryError> for RecordError {
    fn from(e: EntryError) -> RecordError {
        match e {
            EntryError::Payload(e) => RecordError::Payload(e),
            EntryError::Log(e) => RecordError::Log(e),
        }
    }
}

impl RecordError {
    /// Whether the log refused the write for want of permission, as the
    /// floor refuses every write to the logs.
    fn is_permission(&self) -> bool {
        let RecordError::Log(session_log::Error::Io { source, .. }) = self else {
            return false;
        };
        source.kind() == std::io::ErrorKind::PermissionDenied
            || source.raw_os_error() == Some(rustix::io::Errno::ROFS.raw_os_error())
            || source.raw_os_error() == Some(rustix::io::Errno::PERM.raw_os_error())
    }
}

/// Where an entry went.
#[derive(Clone, Debug)]
pub enum Delivered {
    /// Appended here, to the session's own log.
    Direct(Recorded),
    /// Handed to the `nd7 run` of session `pid`, which appended it (or
    /// skipped it, recording the same event through its own hook).
    Door {
        pid: u32,
        answer: HookAnswer,
        omitted: Option<usize>,
    },
}

/// What `nd7 record` does with one payload: under `nd7 run`, hands it to the
/// run's door; otherwise appends it to its session's log, and turns to a
/// door only if that log cannot be written. `run_hook` says the hook is the
/// one `nd7 run` registered (`record --run-hook`).
pub fn deliver(
    agent: Agent,
    invocation: &Invocation,
    input: &[u8],
    run_hook: bool,
) -> Result<Delivered, RecordError> {
    // Set at all, even empty, the variable says the hook runs under nd7 run:
    // nd7 run never sets it empty, and a hook whose environment the agent
    // chose (Claude Code's settings have an `env`) must not be steered to a
    // direct append into a state directory of the agent's choosing.
    let hint = std::env::var_os(RUN_VARIABLE);
    let Some(hint) = hint else {
        let state = session_log::state_dir()?;
        match record_as(agent, invocation, input, &session_log::sessions_dir(&state)) {
            Ok(recorded) => return Ok(Delivered::Direct(recorded)),
            Err(e) if e.is_permission() => match sandbox::hook_door() {
                Some(run_dir) => {
                    return through_door(&run_dir, agent, invocation, input, run_hook);
                }
                None => return Err(RecordError::ReadOnly(Box::new(e))),
            },
            Err(e) => return Err(e),
        }
    };
    let run_dir = sandbox::hook_door_near(std::path::Path::new(&hint))
        .or_else(sandbox::hook_door)
        .ok_or(RecordError::RunGone)?;
    match through_door(&run_dir, agent, invocation, input, run_hook) {
        Ok(delivered) => Ok(delivered),
        // The hint is only a hint: the agent can set the hooks' environment
        // (Claude Code's settings have an `env`), naming a directory called
        // after any ancestor, pid 1 included, with a `record.sock` that is
        // no door. A door named there that fails is not the last word while
        // a run's door lies among the ancestors.
        Err(e) => match sandbox::hook_door() {
            Some(found) if found.dir != run_dir.dir => {
                through_door(&found, agent, invocation, input, run_hook)
            }
            _ => Err(e),
        },
    }
}

/// Hands the payload to `run_dir`'s door and waits for the append.
fn through_door(
    run_dir: &crate::run_dir::RunDir,
    agent: Agent,
    invocation: &Invocation,
    input: &[u8],
    run_hook: bool,
) -> Result<Delivered, RecordError> {
    let (body, glimpsed) = if input.len() > MAX_STORED_PAYLOAD {
        let (glimpse, bytes, blake3) = glimpse(input)?;
        let wire = crate::run_log::GlimpseWire {
            glimpse,
            bytes,
            blake3,
        };
        let body = serde_json::to_vec(&wire).map_err(|e| RecordError::Door(e.to_string()))?;
        (body, Some(input.len()))
    } else {
        (input.to_vec(), None)
    };
    let request = HookRequest {
        agent,
        ts: invocation.ts,
        cwd: invocation.cwd.as_ref().map(|c| c.as_bytes().to_vec()),
        run_hook,
        glimpse: glimpsed.is_some(),
        explain: false,
        body,
    };
    let answer = sandbox::send_hook(run_dir, &request).map_err(RecordError::Door)?;
    Ok(Delivered::Door {
        pid: run_dir.pid,
        answer,
        omitted: glimpsed,
    })
}

/// What `nd7 hook-explain` does with one finished tool call under `nd7 run`:
/// hands it to the run, which judges it against the run's rules (and
/// writes down what the floor refused), and returns what to tell the model.
/// `None` outside `nd7 run`, or when the floor refused nothing.
pub fn explain(invocation: &Invocation, input: &[u8]) -> Result<Option<String>, RecordError> {
    let Some(hint) = std::env::var_os(RUN_VARIABLE).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    // A tool's whole output is judged; one too large for the door is not.
    if input.len() > floor_wire::MAX_REQUEST - 4096 {
        return Ok(None);
    }
    let run_dir =
        sandbox::hook_door_near(std::path::Path::new(&hint)).ok_or(RecordError::RunGone)?;
    // Only `nd7 run claude` registers `nd7 hook-explain`.
    let request = HookRequest {
        agent: Agent::ClaudeCode,
        ts: invocation.ts,
        cwd: invocation.cwd.as_ref().map(|c| c.as_bytes().to_vec()),
        run_hook: true,
        glimpse: false,
        explain: true,
        body: input.to_vec(),
    };
    match sandbox::send_hook(&run_dir, &request).map_err(RecordError::Door)? {
        HookAnswer::Explained(text) => Ok(Some(text)),
        _ => Ok(None),
    }
}

/// What was recorded.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub session_id: String,
    pub appended: Appended,
    /// `Some(bytes)` when the payload was too large and only its size and
    /// fingerprint were stored.
    pub omitted: Option<usize>,
    /// What anchoring the session's transcript did, at the events that
    /// anchor ([`crate::transcript`]).
    pub transcript: Option<Result<crate::transcript::anchor::Report, String>>,
}

/// Reads all of `input`, up to [`MAX_READ`] bytes.
pub fn read_payload(input: impl Read) -> Result<Vec<u8>, RecordError> {
    let mut buf = Vec::new();
    let mut limited = input.take(MAX_READ + 1);
    limited.read_to_end(&mut buf).map_err(RecordError::Stdin)?;
    if buf.len() as u64 > MAX_READ {
        // Drain the rest so the writer does not see a broken pipe.
        let _ = std::io::copy(&mut limited.into_inner(), &mut std::io::sink());
        return Err(RecordError::TooLargeToRead);
    }
    Ok(buf)
}

/// Records one Claude Code payload into its session's log under `sessions_dir`.
pub fn record(
    invocation: &Invocation,
    input: &[u8],
    sessions_dir: &Path,
) -> Result<Recorded, RecordError> {
    record_as(Agent::ClaudeCode, invocation, input, sessions_dir)
}

/// Records one payload from `agent`'s hooks into its session's log under
/// `sessions_dir`.
pub fn record_as(
    agent: Agent,
    invocation: &Invocation,
    input: &[u8],
    sessions_dir: &Path,
) -> Result<Recorded, RecordError> {
    let (event, omitted) = event_for(agent, invocation, input, Builder::Recorder(sessions_dir))?;
    let log = SessionLog::new(sessions_dir, &event.session)?;
    // The transcript's anchors (Claude Code's transcript, Codex's rollout)
    // go in with the hook's entry, in one append.
    let anchoring = match omitted {
        None => crate::transcript::anchor::for_payload(input, agent, &log),
        Some(_) => None,
    };
    let session_id = event.session.clone();
    let mut events = vec![event];
    let (pending, failed) = match anchoring {
        Some(Ok(pending)) => {
            events.extend(crate::transcript::anchor::record_events(
                invocation,
                &session_id,
                &pending,
            ));
            (Some(pending), None)
        }
        Some(Err(e)) => (None, Some(e.to_string())),
        None => (None, None),
    };
    let appended = log.append_all(&events)?;
    let transcript = match (pending, failed) {
        (Some(pending), _) => Some(pending.commit().map_err(|e| e.to_string())),
        (None, Some(why)) => Some(Err(why)),
        (None, None) => None,
    };
    Ok(Recorded {
        session_id,
        appended: appended[0],
        omitted,
        transcript,
    })
}
