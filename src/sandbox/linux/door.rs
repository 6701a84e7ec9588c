//! The hooks' door on Linux: how a hook's payload reaches the session log,
//! which is read-only inside the floor. `nd7 run` listens on
//! `~/.nd7/runs/<pid>/record.sock` (0600); `nd7 record`, run by Claude
//! Code inside the floor, sends its payload there ([`send`]), and `nd7 run`
//! admits the caller as the exit does (the credentials the kernel attached
//! to the request, a descendant of this `nd7 run`, each link pinned with a
//! pidfd; not the connection's peer, which is nd7 run's keeper, since it
//! connects for every process of the session), appends the entry and only
//! then answers, so the hook returns after the entry is in the log.
//!
//! The listening, admitting and bounding are the exit's too
//! (`super::server`); what is the door's own is [`Hooks`], which appends
//! the entry (or explains a refusal), and the `nd7 record` side, [`send`].
//!
//! # Other callers' load cannot cost a hook its entry (ADR-0097)
//!
//! A hook (`nd7 record`) connects and writes its whole request at once. The
//! door is served under the server's triage ([`Bound::Triage`]): a
//! connection gets a thread only once its request is in the socket, so a
//! caller that trickles its request, or sends nothing, holds no thread a
//! hook needs; one that waits past [`TRIAGE_BUDGET`], or is the oldest of
//! more than [`MAX_WAITING`], is dropped unread and written down
//! ([`RunLog::door_dropped`]: a `refused` entry and `run_end`'s
//! `door_dropped`, which `nd7 verify` reports as events that may be
//! missing), and `nd7 record` tries again when the door closed on it
//! unanswered.

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::admit::Admitted;
use super::server::{Bound, ExitError, Handler};
pub use super::server::{MAX_WAITING, TRIAGE_BUDGET};
use crate::floor_wire::{Frame, HookRequest};
use crate::kernel::linux as proc;
use crate::run_dir::RunDir;
use crate::run_log::{HookOutcome, RunLog};

/// The session side: `nd7 run`'s door for the hooks.
pub struct Door {
    listener: std::os::unix::net::UnixListener,
    hooks: Hooks,
}

impl Door {
    /// Binds the session's door, readable and writable by the user alone.
    pub fn open(run_dir: &RunDir, log: Arc<RunLog>) -> Result<Door, ExitError> {
        let path = run_dir.dir.join(crate::run_dir::DOOR_SOCKET);
        // The keeper connects the session's processes only to sockets it
        // knows to be the session's, and to this one only the floor's: the
        // program's hooks, never a command through the exit, which could
        // otherwise hold the hooks back with a flood of connections.
        let listener = super::server::bind(&path, super::keeper::allow_own_to_floor)?;
        Ok(Door {
            listener,
            hooks: Hooks {
                run_dir: run_dir.clone(),
                log,
            },
        })
    }

    /// Serves the door on threads of its own for as long as the process
    /// lives, under the server's triage (ADR-0097).
    pub fn serve(self) {
        super::server::serve(self.listener, self.hooks, Bound::Triage);
    }
}

/// Waits (at most `bound`) until the door has finished with every
/// connection it accepted: each is served, refused or dropped, and written
/// down, before `run_end` counts them (ADR-0099). Called once every process
/// of the floor has ended, so no new one comes and each waiting one ends
/// short or is dropped within [`TRIAGE_BUDGET`]. Returns whether it did.
pub fn drain(bound: Duration) -> bool {
    super::server::settled(bound)
}

/// How long [`drain`] waits at most. Every caller has ended by then, so a
/// waiting connection ends short (or is dropped within [`TRIAGE_BUDGET`])
/// and a thread's read meets the end at once; the bound keeps the run's
/// end well inside the keeper's 10 s for the session after its grace.
pub const DRAIN_BOUND: Duration = Duration::from_secs(5);

/// What the door does with an admitted hook's request: appends its entry,
/// and only then answers, so the hook returns after the entry is in the
/// log; or, for `nd7 hook-explain`, says why a call was refused.
struct Hooks {
    run_dir: RunDir,
    log: Arc<RunLog>,
}

impl Handler for Hooks {
    const NAME: &'static str = "record";
    type Fds = ();
    type Request = HookRequest;

    fn log(&self) -> &RunLog {
        &self.log
    }

    /// Descriptors sent along are closed unread.
    fn fds(_: Vec<OwnedFd>) -> Result<(), String> {
        Ok(())
    }

    fn decode(body: &[u8]) -> Result<HookRequest, String> {
        HookRequest::decode(body).map_err(|e| e.to_string())
    }

    fn handle(&self, conn: &UnixStream, caller: Admitted, request: HookRequest, (): ()) {
        let frame = if request.explain {
            self.explain(&request)
        } else {
            self.append(&request, caller.pid)
        };
        let _ = (&*conn).write_all(&frame.encode());
    }
}

impl Hooks {
    /// Why the call in `request` was refused, for the model.
    fn explain(&self, request: &HookRequest) -> Frame {
        match self.run_dir.record() {
            Ok(record) => match crate::refusals::explain(
                &request.body,
                &record.policy,
                &self.log,
                super::ns::outside_root(),
            ) {
                // With the keys the keeper refused in held git
                // configurations meanwhile (ADR-0134).
                Ok(Some(text)) => Frame::Explained(
                    text + &crate::refusals::held_keys_untold(
                        &self.run_dir.dir,
                        &record.policy.roots.home,
                    ),
                ),
                Ok(None) => Frame::Skipped,
                Err(e) => Frame::Refused(e.to_string()),
            },
            Err(e) => Frame::Refused(e.to_string()),
        }
    }

    /// Appends the hook's entry, sent by process `caller`.
    fn append(&self, request: &HookRequest, caller: u32) -> Frame {
        // The recorder's parent, as the kernel has it: Claude Code itself
        // for an exec-form hook.
        let hook_ppid = proc::stat(caller).map(|s| s.ppid);
        match self.log.hook(request, hook_ppid) {
            Ok(HookOutcome::Recorded(_)) => Frame::Recorded,
            Ok(HookOutcome::Skipped) => Frame::Skipped,
            Ok(HookOutcome::OverBudget(why)) => Frame::Refused(why),
            Err(e) => Frame::Refused(e.to_string()),
        }
    }
}

/// How long a hook waits for `nd7 run` to take its request and answer. The
/// answer comes once the entry is appended, behind at most the hooks queued
/// before it; a `nd7 run` that is stopped (SIGSTOP from inside, a debugger)
/// would otherwise keep the hook, and Claude Code with it, waiting for good.
/// Below Claude Code's own hook timeout (60 s), so the hook says why.
pub const DOOR_ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// How `nd7 run` answered a hook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    Recorded,
    Skipped,
    /// For `nd7 hook-explain`: what to tell the model.
    Explained(String),
}

/// The `nd7 record` side: sends `request` to the door at `socket`, which
/// must be served by process `server` (the kernel says who listens on it),
/// and waits for the answer, which comes once the entry is in the log.
pub fn send(socket: &Path, server: u32, request: &HookRequest) -> Result<Answer, String> {
    let mut tries = 0;
    loop {
        tries += 1;
        match send_once(socket, server, request) {
            Err(Sent::Unanswered(_)) if tries < SEND_TRIES => continue,
            Err(Sent::Unanswered(why) | Sent::Failed(why)) => return Err(why),
            Ok(answer) => return Ok(answer),
        }
    }
}

/// How often `nd7 record` sends its request when the door closes on it
/// unanswered (it dropped the connection unread, ADR-0097).
const SEND_TRIES: usize = 3;

/// Why one try of [`send`] failed.
enum Sent {
    /// The door closed the connection without answering: nothing of the
    /// request was taken, so it may be sent again.
    Unanswered(String),
    Failed(String),
}

fn send_once(socket: &Path, server: u32, request: &HookRequest) -> Result<Answer, Sent> {
    let fail = Sent::Failed;
    let mut conn = UnixStream::connect(socket)
        .map_err(|e| fail(format!("cannot reach nd7 run at {}: {e}", socket.display())))?;
    let listener = rustix::net::sockopt::socket_peercred(&conn)
        .map(|c| c.pid.as_raw_nonzero().get() as u32)
        .map_err(|e| fail(format!("cannot tell who serves {}: {e}", socket.display())))?;
    if listener != server {
        return Err(fail(format!(
            "{} is served by process {listener}, not by nd7 run {server}",
            socket.display()
        )));
    }
    let _ = conn.set_write_timeout(Some(DOOR_ANSWER_TIMEOUT));
    let _ = conn.set_read_timeout(Some(DOOR_ANSWER_TIMEOUT));
    let timed_out = |e: &std::io::Error| {
        matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        )
    };
    let silent = || {
        format!(
            "nd7 run {server} did not answer within {} s (stopped, or its door overwhelmed)",
            DOOR_ANSWER_TIMEOUT.as_secs()
        )
    };
    let sent = conn.write_all(&request.encode());
    if sent.as_ref().is_err_and(timed_out) {
        return Err(fail(silent()));
    }
    let mut head = [0u8; 5];
    if let Err(e) = conn.read_exact(&mut head) {
        return Err(match sent {
            Err(s) => Sent::Unanswered(format!("cannot send the payload to nd7 run: {s}")),
            Ok(()) if timed_out(&e) => fail(silent()),
            Ok(()) => Sent::Unanswered(format!("nd7 run closed the door before answering: {e}")),
        });
    }
    match Frame::decode(head) {
        Ok(Ok(Frame::Recorded)) => Ok(Answer::Recorded),
        Ok(Ok(Frame::Skipped)) => Ok(Answer::Skipped),
        Ok(Err(len)) => {
            let mut text = vec![0u8; len];
            let _ = conn.read_exact(&mut text);
            match Frame::text(head[0], &text) {
                Frame::Refused(why) => Err(fail(format!("nd7 run refused the entry: {why}"))),
                Frame::Explained(text) => Ok(Answer::Explained(text)),
                _ => Err(fail("nd7 run answered with an unknown frame".into())),
            }
        }
        _ => Err(fail("nd7 run answered with an unknown frame".into())),
    }
}
