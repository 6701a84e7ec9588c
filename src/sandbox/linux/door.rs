//! The hooks' door on Linux: how a hook's payload reaches the session log,
//! which is read-only inside the floor. `nd7 run` listens on
//! `~/.nd7/sessions/<pid>/record.sock` (0600); `nd7 record`, run by Claude
//! Code inside the floor, sends its payload there ([`send`]), and `nd7 run`
//! admits the caller as the exit does (the kernel's word on who is calling,
//! a descendant of this `nd7 run`), appends the entry and only then answers,
//! so the hook returns after the entry is in the log.
//!
//! Connections are served at most [`MAX_HOOKS`] at a time; more wait in the
//! socket's backlog, so a burst of parallel hooks is queued, never dropped.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use super::exit::{ExitError, STACK, Slots, admit, refuse};
use super::proc;
use crate::run_log::{HookOutcome, RunLog};
use crate::sandbox::wire::{Frame, HookRequest, Request};
use crate::session::Session;

/// Hooks served at once. Each append takes the log's lock in turn anyway;
/// this bounds the threads, not the throughput.
pub const MAX_HOOKS: usize = 16;

/// How long a caller may take to send its whole request. A deadline for the
/// request, not a timeout per read: a peer trickling one byte at a time
/// would otherwise hold a slot for as long as it liked, and sixteen of them
/// would stall every hook behind them.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The session side: `nd7 run`'s door for the hooks.
pub struct Door {
    listener: UnixListener,
    log: Arc<RunLog>,
}

impl Door {
    /// Binds the session's door, readable and writable by the user alone.
    pub fn open(session: &Session, log: Arc<RunLog>) -> Result<Door, ExitError> {
        let path = session.dir.join(crate::session::DOOR_SOCKET);
        let io_err = |action| {
            let path = path.clone();
            move |source| ExitError::Io {
                path,
                action,
                source,
            }
        };
        let listener = UnixListener::bind(&path).map_err(io_err("listen on"))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .map_err(io_err("restrict"))?;
        Ok(Door { listener, log })
    }

    /// Serves the door on a thread of its own for as long as the process lives.
    ///
    /// Callers are served in two queues of [`MAX_HOOKS`] threads each: the
    /// program's own processes (Claude Code's hooks) wait for a thread;
    /// anything else (a command through the exit) is refused at once when
    /// its queue is full. A command flooding the door with connections
    /// therefore never delays the hooks behind it.
    pub fn serve(self) {
        std::thread::spawn(move || {
            let me = std::process::id();
            let hooks = Arc::new(Slots::default());
            let others = Arc::new(Slots::default());
            loop {
                let Ok((conn, _)) = self.listener.accept() else {
                    continue;
                };
                let slot = if from_program(&conn, me) {
                    Slots::take(&hooks, MAX_HOOKS)
                } else {
                    match Slots::try_take(&others, MAX_HOOKS) {
                        Some(slot) => slot,
                        None => {
                            refuse(
                                &conn,
                                &self.log,
                                "record",
                                format!(
                                    "{MAX_HOOKS} connections to the door from outside the program are already being served"
                                ),
                            );
                            continue;
                        }
                    }
                };
                let log = self.log.clone();
                let spawned = std::thread::Builder::new()
                    .stack_size(STACK)
                    .spawn(move || {
                        let _slot = slot;
                        serve_one(&conn, me, &log);
                    });
                drop(spawned);
            }
        });
    }
}

/// The program `nd7 run` started (Claude Code), once it has started.
static PROGRAM: OnceLock<u32> = OnceLock::new();

/// Tells the door which process is the program, whose own processes (its
/// hooks) it serves ahead of anything else.
pub fn program_started(pid: u32) {
    let _ = PROGRAM.set(pid);
}

/// Whether the caller descends from the program rather than from a command
/// through the exit: the kernel's word on its ancestors, up to this `nd7 run`.
/// Only chooses a queue; admission is [`admit`]'s.
fn from_program(conn: &UnixStream, me: u32) -> bool {
    let Some(&program) = PROGRAM.get() else {
        return false;
    };
    let Ok(cred) = rustix::net::sockopt::socket_peercred(conn) else {
        return false;
    };
    let pid = cred.pid.as_raw_nonzero().get() as u32;
    std::iter::once(pid)
        .chain(proc::ancestors(pid))
        .take_while(|&p| p != me)
        .any(|p| p == program)
}

fn serve_one(conn: &UnixStream, me: u32, log: &RunLog) {
    let caller = match admit(conn, me) {
        Ok(pid) => pid,
        Err(why) => return refuse(conn, log, "record", why),
    };
    let request = match receive(conn, Instant::now() + REQUEST_TIMEOUT) {
        Ok(request) => request,
        Err(why) => return refuse(conn, log, "record", why),
    };
    // The recorder's parent, as the kernel has it: Claude Code itself for an
    // exec-form hook.
    let hook_ppid = proc::stat(caller).map(|s| s.ppid);
    let frame = match log.hook(&request, hook_ppid) {
        Ok(HookOutcome::Recorded(_)) => Frame::Recorded,
        Ok(HookOutcome::Skipped) => Frame::Skipped,
        Err(e) => Frame::Refused(e.to_string()),
    };
    let _ = (&*conn).write_all(&frame.encode());
}

fn receive(conn: &UnixStream, deadline: Instant) -> Result<HookRequest, String> {
    let mut prefix = [0u8; 4];
    read_by(conn, &mut prefix, deadline)?;
    let len = Request::announced_len(prefix).map_err(|e| e.to_string())?;
    let mut body = vec![0u8; len];
    read_by(conn, &mut body, deadline)?;
    HookRequest::decode(&body).map_err(|e| e.to_string())
}

/// Fills `buf` from `conn`, failing once `deadline` has passed.
fn read_by(mut conn: &UnixStream, buf: &mut [u8], deadline: Instant) -> Result<(), String> {
    let late = || {
        format!(
            "the request was not sent within {} s",
            REQUEST_TIMEOUT.as_secs()
        )
    };
    let mut at = 0;
    while at < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(late());
        }
        conn.set_read_timeout(Some(left))
            .map_err(|e| format!("cannot read the request: {e}"))?;
        match conn.read(&mut buf[at..]) {
            Ok(0) => return Err("the request ended early".into()),
            Ok(n) => at += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(late());
            }
            Err(e) => return Err(format!("cannot read the request: {e}")),
        }
    }
    Ok(())
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
}

/// The `nd7 record` side: sends `request` to the door at `socket`, which
/// must be served by process `server` (the kernel says who listens on it),
/// and waits for the answer, which comes once the entry is in the log.
pub fn send(socket: &Path, server: u32, request: &HookRequest) -> Result<Answer, String> {
    let mut conn = UnixStream::connect(socket)
        .map_err(|e| format!("cannot reach nd7 run at {}: {e}", socket.display()))?;
    let listener = rustix::net::sockopt::socket_peercred(&conn)
        .map(|c| c.pid.as_raw_nonzero().get() as u32)
        .map_err(|e| format!("cannot tell who serves {}: {e}", socket.display()))?;
    if listener != server {
        return Err(format!(
            "{} is served by process {listener}, not by nd7 run {server}",
            socket.display()
        ));
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
        return Err(silent());
    }
    let mut head = [0u8; 5];
    if let Err(e) = conn.read_exact(&mut head) {
        return Err(match sent {
            Err(s) => format!("cannot send the payload to nd7 run: {s}"),
            Ok(()) if timed_out(&e) => silent(),
            Ok(()) => format!("nd7 run closed the door before answering: {e}"),
        });
    }
    match Frame::decode(head) {
        Ok(Ok(Frame::Recorded)) => Ok(Answer::Recorded),
        Ok(Ok(Frame::Skipped)) => Ok(Answer::Skipped),
        Ok(Err(len)) => {
            let mut text = vec![0u8; len];
            let _ = conn.read_exact(&mut text);
            match Frame::refusal(&text) {
                Frame::Refused(why) => Err(format!("nd7 run refused the entry: {why}")),
                _ => Err("nd7 run answered with an unknown frame".into()),
            }
        }
        _ => Err("nd7 run answered with an unknown frame".into()),
    }
}
