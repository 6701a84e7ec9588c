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
//! Connections are served at most [`MAX_HOOKS`] at a time; more wait in the
//! socket's backlog, so a burst of parallel hooks is queued, never dropped.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::os::fd::AsFd;

use super::exit::{ExitError, STACK, Slots, admit, receive_prefix, refuse, set_pass_pidfd};
use crate::kernel::linux as proc;
use crate::run_dir::RunDir;
use crate::run_log::{HookOutcome, RunLog};
use crate::sandbox::wire::{Frame, HookRequest, Request};

/// Hooks served at once. Each append takes the log's lock in turn anyway;
/// this bounds the threads, not the throughput.
pub const MAX_HOOKS: usize = 16;

/// How long a caller may take to send its whole request (one deadline, not
/// a timeout per read).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The session side: `nd7 run`'s door for the hooks.
pub struct Door {
    listener: UnixListener,
    session: RunDir,
    log: Arc<RunLog>,
}

impl Door {
    /// Binds the session's door, readable and writable by the user alone.
    pub fn open(session: &RunDir, log: Arc<RunLog>) -> Result<Door, ExitError> {
        let path = session.dir.join(crate::run_dir::DOOR_SOCKET);
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
        // Each request carries its sender's credentials (and a pidfd, Linux
        // 6.5), which is how callers are told apart: the connection's peer is
        // the keeper.
        rustix::net::sockopt::set_socket_passcred(&listener, true)
            .map_err(|e| io_err("set up")(e.into()))?;
        let _ = set_pass_pidfd(&listener);
        // The keeper connects the session's processes only to sockets it
        // knows to be the session's, and to this one only the floor's: the
        // program's hooks, never a command through the exit, which could
        // otherwise hold the hooks back with a flood of connections.
        super::keeper::allow_own_to_floor(listener.as_fd()).map_err(io_err("register"))?;
        Ok(Door {
            listener,
            session: session.clone(),
            log,
        })
    }

    /// Serves the door on a thread of its own for as long as the process lives.
    pub fn serve(self) {
        std::thread::spawn(move || {
            let me = std::process::id();
            let slots = Arc::new(Slots::default());
            loop {
                let slot = Slots::take(&slots, MAX_HOOKS);
                let Ok((conn, _)) = self.listener.accept() else {
                    continue;
                };
                let log = self.log.clone();
                let session = self.session.clone();
                let spawned = std::thread::Builder::new()
                    .stack_size(STACK)
                    .spawn(move || {
                        let _slot = slot;
                        serve_one(&conn, me, &session, &log);
                    });
                drop(spawned);
            }
        });
    }
}

fn serve_one(conn: &UnixStream, me: u32, session: &RunDir, log: &RunLog) {
    // One deadline for the whole request, not a timeout per read: a peer
    // trickling a byte at a time would otherwise hold its thread for as long
    // as it liked, and MAX_HOOKS of them would stall every hook behind them.
    let deadline = Instant::now() + REQUEST_TIMEOUT;
    let _ = conn.set_read_timeout(Some(REQUEST_TIMEOUT));
    // The request first: the credentials that name its sender come with it.
    let (caller, request) = receive(conn, deadline);
    let who = (caller.pid, caller.uid);
    let request = match request {
        Ok(request) => request,
        Err(why) => return refuse(conn, log, "record", who, why),
    };
    let caller = match admit(caller, me) {
        Ok(admitted) => admitted.pid,
        Err(why) => return refuse(conn, log, "record", who, why),
    };
    if request.explain {
        let frame = match session.record() {
            Ok(record) => match crate::refusals::explain(&request.body, &record.policy, log) {
                Ok(Some(text)) => Frame::Explained(text),
                Ok(None) => Frame::Skipped,
                Err(e) => Frame::Refused(e.to_string()),
            },
            Err(e) => Frame::Refused(e.to_string()),
        };
        let _ = (&*conn).write_all(&frame.encode());
        return;
    }
    // The recorder's parent, as the kernel has it: Claude Code itself for an
    // exec-form hook.
    let hook_ppid = proc::stat(caller).map(|s| s.ppid);
    let frame = match log.hook(&request, hook_ppid) {
        Ok(HookOutcome::Recorded(_)) => Frame::Recorded,
        Ok(HookOutcome::Skipped) => Frame::Skipped,
        Ok(HookOutcome::OverBudget(why)) => Frame::Refused(why),
        Err(e) => Frame::Refused(e.to_string()),
    };
    let _ = (&*conn).write_all(&frame.encode());
}

/// Reads one hook request, and who sent it as the kernel attached it.
fn receive(
    conn: &UnixStream,
    deadline: Instant,
) -> (super::exit::Caller, Result<HookRequest, String>) {
    let (caller, got) = receive_prefix(conn);
    let read = || {
        // Descriptors sent along are closed unread.
        let (prefix, _fds) = got?;
        let len = Request::announced_len(prefix).map_err(|e| e.to_string())?;
        let mut body = vec![0u8; len];
        read_by(conn, &mut body, deadline)?;
        HookRequest::decode(&body).map_err(|e| e.to_string())
    };
    let request = read();
    (caller, request)
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
    /// For `nd7 hook-explain`: what to tell the model.
    Explained(String),
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
            match Frame::text(head[0], &text) {
                Frame::Refused(why) => Err(format!("nd7 run refused the entry: {why}")),
                Frame::Explained(text) => Ok(Answer::Explained(text)),
                _ => Err("nd7 run answered with an unknown frame".into()),
            }
        }
        _ => Err("nd7 run answered with an unknown frame".into()),
    }
}
