//! The macOS half of the sandbox's façade (`sandbox/mod.rs`): every
//! function and type the façade re-exports, with the same names and
//! signatures as `sandbox::linux::backend` (ADR-0128). Here `nd7-exec`
//! leaves the floor through Seatbelt's one no-sandbox exec and does the
//! exit's and the door's work itself (`seatbelt`): there is no keeper, no
//! namespace and no socket to serve.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

pub use super::SandboxError;
use crate::floor_wire::HookRequest;
use crate::kernel::ancestors;
use crate::policy::Policy;
use crate::policy::deferred::Plan;
use crate::run_dir::{RunDir, RunDirs};
use crate::run_log::RunLog;
use crate::sandbox::{
    AfterCommand, BeforeCommand, DOOR_MARKER, HOOK_ANSWER_TIMEOUT, HookAnswer, Kept, Leftovers,
    Outcome, Protection, RECORD_SKIPPED, RUN_MARKER,
};

/// Why the network is not kept to nd7's proxy in a run whose listener
/// could not be made (ADR-0136).
const NO_EGRESS: &str = "nd7 run made no listener for its proxy";

/// The session's egress proxy on this machine's 127.0.0.1 (ADR-0136): the
/// port the profiles let a process connect to, the secret every request
/// must carry, and the listener and proxy until they are served.
struct Listening {
    port: u16,
    secret: String,
    listener: Mutex<Option<std::net::TcpListener>>,
    /// Set by [`Held::serve_proxy`]; served once the agent has started
    /// ([`start_agent`]), so that `nd7 run` forks the agent with one
    /// thread ([`super::confine`]).
    proxy: Mutex<Option<Arc<crate::egress::Proxy>>>,
}

/// What [`listen_for_proxy`] made while the policy was planned (the port
/// goes into the profiles), until [`hold`] takes it into the run's
/// [`Held`]: one run a process.
static LISTENING: Mutex<Option<Arc<Listening>>> = Mutex::new(None);

/// Listens on 127.0.0.1, on a port the system picks, for the session's
/// egress proxy, and makes the run's secret; returns the port, for the
/// policy ([`Policy::proxy_port`]). The listener is served outside the
/// sandbox, by `nd7 run` itself; the profiles let the agent and its
/// commands connect to this port and nowhere else.
pub fn listen_for_proxy() -> Result<Option<u16>, String> {
    let listener = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| format!("cannot listen on 127.0.0.1 for nd7's egress proxy: {e}"))?;
    let port = listener
        .local_addr()
        .map_err(|e| format!("cannot read the egress proxy's port: {e}"))?
        .port();
    let mut bytes = [0u8; 16];
    getrandom::getrandom(&mut bytes)
        .map_err(|e| format!("no randomness for the egress proxy's secret: {e}"))?;
    let secret: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let listening = Arc::new(Listening {
        port,
        secret,
        listener: Mutex::new(Some(listener)),
        proxy: Mutex::new(None),
    });
    *LISTENING
        .lock()
        .map_err(|_| "the egress proxy's listener is poisoned")? = Some(listening);
    Ok(Some(port))
}

/// The variables that point clients at the proxy on `port`, with the
/// run's `secret` as the password of [`crate::egress::PROXY_USER`].
fn proxy_env(port: u16, secret: &str) -> Vec<(String, String)> {
    let url = format!(
        "http://{}:{secret}@127.0.0.1:{port}",
        crate::egress::PROXY_USER
    );
    ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"]
        .iter()
        .flat_map(|k| [k.to_string(), k.to_ascii_lowercase()])
        .map(|k| (k, url.clone()))
        .collect()
}

/// What this system offers nd7's sandbox.
pub fn available() -> Result<&'static str, String> {
    Ok("Seatbelt")
}

/// The terminal `nd7 run` was started on: `None`, as the rule it feeds is
/// Linux's.
pub fn own_terminal() -> Option<PathBuf> {
    None
}

/// Where devices can be reached outside `/dev`: nowhere nd7 knows of.
pub fn device_mounts() -> Vec<PathBuf> {
    Vec::new()
}

/// What the kernel's sandbox is called in nd7's own entries; no ABI.
pub fn kernel_sandbox() -> (&'static str, Option<u32>) {
    ("seatbelt", None)
}

/// Hands a hook's request to the run's door, `nd7-exec --record`, the one
/// program that leaves the floor, which appends it itself.
pub fn send_hook(_run_dir: &RunDir, request: &HookRequest) -> Result<HookAnswer, String> {
    send_through_exec(request)
}

/// `nd7-exec --record -` beside this program, fed the request on stdin; for
/// an explain request, its standard output is the explanation. Waits at
/// most [`HOOK_ANSWER_TIMEOUT`], then kills it and says so (its writer may
/// still append the entry later).
fn send_through_exec(request: &HookRequest) -> Result<HookAnswer, String> {
    use std::io::Write;
    let exec = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .map(|exe| exe.with_file_name("nd7-exec"))
        .map_err(|e| format!("cannot find nd7-exec beside nd7: {e}"))?;
    let mut child = Command::new(&exec)
        .arg("--record")
        .arg("-")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", exec.display()))?;
    let pid = child.id();
    let mut stdin = child.stdin.take();
    let bytes = request.encode();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // Written here, not before the wait: a stopped nd7-exec would block
        // a large request's write as surely as its answer.
        let sent = stdin.as_mut().map(|s| s.write_all(&bytes));
        drop(stdin);
        let _ = tx.send((sent, child.wait_with_output()));
    });
    let (sent, out) = match rx.recv_timeout(HOOK_ANSWER_TIMEOUT) {
        Ok(answer) => answer,
        Err(_) => {
            // Not reaped yet (the thread still waits for it), so the pid is
            // still this child's.
            if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
            return Err(format!(
                "{} did not answer within {} s (stopped or stuck); the entry may be missing",
                exec.display(),
                HOOK_ANSWER_TIMEOUT.as_secs()
            ));
        }
    };
    let out = out.map_err(|e| format!("{}: {e}", exec.display()))?;
    match out.status.code() {
        Some(0) if request.explain && !out.stdout.is_empty() => Ok(HookAnswer::Explained(
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )),
        Some(0) if request.explain => Ok(HookAnswer::Skipped),
        Some(0) => Ok(HookAnswer::Recorded),
        Some(c) if c == i32::from(RECORD_SKIPPED) => Ok(HookAnswer::Skipped),
        _ => {
            let why = String::from_utf8_lossy(&out.stderr).trim().to_string();
            Err(match sent {
                Some(Err(e)) => format!("cannot hand the payload to nd7-exec: {e}"),
                _ if why.is_empty() => format!("nd7-exec ended with {}", out.status),
                _ => why,
            })
        }
    }
}

/// Runs `command` as `/bin/sh -c <command>` under the floor and nothing
/// more: `nd7-exec` started outside the floor, and applies the run's floor
/// profile first. Returns only when nothing ran, saying why.
pub fn run_in_place(command: OsString) -> String {
    use std::os::unix::process::CommandExt;
    let run_dirs = match RunDirs::for_user() {
        Ok(s) => s,
        Err(e) => return e.to_string(),
    };
    let Some(run_dir) = run_dirs.find_by_ancestors(ancestors(), RUN_MARKER) else {
        return "not inside an nd7 run".to_string();
    };
    let path = run_dir.dir.join(crate::run_dir::FLOOR_PROFILE);
    let profile = match std::fs::read_to_string(&path) {
        Ok(p) => p,
        Err(e) => return format!("cannot read the floor's rules at {}: {e}", path.display()),
    };
    if let Err(e) = super::restrict_self(&profile) {
        return e.to_string();
    }
    let error = Command::new("/bin/sh").arg("-c").arg(command).exec();
    format!("cannot run /bin/sh: {error}")
}

/// The floor, built and ready to be applied to the agent as it starts.
pub struct Floor {
    profile: String,
}

/// Builds the floor for `policy`: the Seatbelt profile that lets
/// `nd7_exec`, the one program that may leave it, run unsandboxed.
pub fn floor(policy: &Policy, nd7_exec: &Path) -> Result<Floor, String> {
    Ok(Floor {
        profile: crate::policy::seatbelt::floor(policy, nd7_exec),
    })
}

impl Floor {
    /// Arranges for `command`'s process to be confined before it execs.
    pub fn confine(&self, command: &mut Command) -> Result<(), String> {
        super::confine(command, &self.profile).map_err(|e| e.to_string())
    }
}

/// Where the files that run later outside the floor would be held: the
/// profiles deny them, and there is nothing to hold.
pub struct Holding {}

/// Does nothing here: the profiles deny what Linux holds in namespaces.
pub fn enter_hold() -> Holding {
    Holding {}
}

/// The root directory outside the run's namespaces: there are none here.
pub fn outside_root() -> Option<std::os::fd::BorrowedFd<'static>> {
    None
}

/// How the files that run later are held: the profiles deny them, and
/// there is nothing to hold. And the session's egress proxy's listener.
#[derive(Clone, Default)]
pub struct Held {
    proxy: Option<Arc<Listening>>,
}

/// Nothing to hold here ([`Held`]); takes the proxy's listener
/// ([`listen_for_proxy`]) into the run's [`Held`].
pub fn hold(_holding: Holding, _plan: &Plan) -> Result<(Held, Option<String>), String> {
    let proxy = LISTENING.lock().ok().and_then(|mut l| l.take());
    Ok((Held { proxy }, None))
}

/// How `nd7 run` keeps the agent's network to its proxy here: the
/// Seatbelt profiles (ADR-0136).
pub fn egress_available() -> Result<&'static str, String> {
    Ok("the Seatbelt profiles let the session connect only to its proxy's port on 127.0.0.1")
}

/// What holds the files that run later on this system, for `nd7 doctor`.
pub fn hold_available() -> Result<&'static str, String> {
    Ok("the Seatbelt profiles deny writing them")
}

impl Held {
    /// Whether the run listens for its proxy, the one place its profiles
    /// let it connect to (ADR-0136).
    pub fn egress(&self) -> Result<(), String> {
        self.proxy
            .as_ref()
            .map(|_| ())
            .ok_or_else(|| NO_EGRESS.into())
    }

    /// What tells the proxy which process opened a connection: nothing here.
    pub fn proxy_client() -> Option<crate::egress::Who> {
        None
    }

    /// The secret the proxy asks every request for: it listens on the
    /// machine's loopback, where any local program can reach it.
    pub fn proxy_credentials(&self) -> Option<String> {
        self.proxy.as_ref().map(|l| l.secret.clone())
    }

    /// Makes `proxy` the one the listener serves, from when the agent has
    /// started ([`start_agent`]).
    pub fn serve_proxy(&self, proxy: Arc<crate::egress::Proxy>) -> Result<(), String> {
        let listening = self.proxy.as_ref().ok_or(NO_EGRESS)?;
        *listening
            .proxy
            .lock()
            .map_err(|_| "the egress proxy is poisoned")? = Some(proxy);
        Ok(())
    }

    /// Serves the proxy [`Held::serve_proxy`] named, on its thread, once.
    fn start_serving(&self) {
        let Some(listening) = &self.proxy else { return };
        let proxy = listening.proxy.lock().ok().and_then(|mut p| p.take());
        let listener = listening.listener.lock().ok().and_then(|mut l| l.take());
        if let (Some(proxy), Some(listener)) = (proxy, listener) {
            proxy.serve(listener);
        }
    }

    /// The variables that point the agent at the session's proxy, with
    /// its secret; none without a listener.
    pub fn proxy_env(&self) -> Vec<(String, String)> {
        match &self.proxy {
            Some(l) => proxy_env(l.port, &l.secret),
            None => Vec::new(),
        }
    }

    /// Always: there is nothing to hold.
    pub fn all_held(&self) -> bool {
        true
    }

    /// Nothing to prepare: no namespaces.
    pub fn prepare(&self, _command: &mut Command, _cwd: &Path) -> Result<(), String> {
        Ok(())
    }
}

/// A program the run started under the floor: the agent.
pub struct Agent {
    child: std::process::Child,
}

impl Agent {
    /// The program's pid.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the program to end.
    pub fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        self.child.wait()
    }
}

/// Starts what `command` describes (program, arguments, variables; its
/// standard descriptors are `nd7 run`'s) under `floor`, working in `cwd`.
pub fn start_agent(
    command: Command,
    held: &Held,
    floor: &Floor,
    cwd: &Path,
) -> std::io::Result<Agent> {
    let mut command = command;
    held.prepare(&mut command, cwd)
        .map_err(std::io::Error::other)?;
    floor.confine(&mut command).map_err(std::io::Error::other)?;
    let child = command.spawn()?;
    // Only now: the agent was forked while this process had one thread.
    held.start_serving();
    Ok(Agent { child })
}

/// There is no keeper here: the caller carries on as `nd7 run`.
pub fn keep_run(
    _run_dirs: &RunDirs,
    _head_start: impl FnOnce() -> Vec<u8>,
) -> Result<Kept, String> {
    Ok(Kept::Run)
}

/// No keeper, no head start: `nd7 run` works it out itself.
pub fn head_start() -> Option<Vec<u8>> {
    None
}

/// No scope to enter here.
pub fn scope_run() -> Result<(), String> {
    Ok(())
}

/// No keeper to wait for.
pub fn keeper_ready() -> Result<(), String> {
    Ok(())
}

/// Ends every process of the user still in the run's sandboxes, found by
/// the run's mark ([`Policy::mark`]) however it left the run's tree, and
/// then waits (at most 5 s) for the exit's writers to write how their
/// commands ended (`None` without a mark).
pub fn end_leftovers(run_dir: &RunDir, policy: &Policy) -> Option<Leftovers> {
    let mark = policy.mark.as_deref()?;
    let ended = super::end_marked(mark, &crate::policy::seatbelt::unmarked(mark));
    super::wait_for_writers(&run_dir.dir, std::time::Duration::from_secs(5));
    Some(ended)
}

/// A new mark for the run's profiles ([`Policy::mark`]): a path directly
/// under `/` that exists nowhere, unique to this run (its pid and 64 random
/// bits). `None` when no randomness is to be had (then nothing outside the
/// run's tree is ended at its end).
pub fn run_mark() -> Option<PathBuf> {
    let mut bytes = [0u8; 8];
    getrandom::getrandom(&mut bytes).ok()?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Some(PathBuf::from(format!(
        "/.nd7-run-{}-{hex}",
        std::process::id()
    )))
}

/// The protections beyond the file rules and whether this system enforces
/// each.
pub fn protections() -> Vec<Protection> {
    // What the Seatbelt profiles deny beyond files (ADR-0074) and what
    // nd7 run ends when the run ends (ADR-0075); not yet run on a
    // Mac by this project, only in CI where the repository is published.
    let with = |name, enforced, detail: &str| Protection {
        name,
        enforced,
        detail: detail.to_string(),
        needs: None,
    };
    vec![
        with(
            "signals",
            true,
            "the agent and its commands can signal only processes of their own sandbox and their own children: not your other processes, nor the part of nd7-exec that writes the log (Seatbelt)",
        ),
        with(
            "tty",
            true,
            "TIOCSTI, which types into a terminal, fails (Seatbelt, macOS 13 or newer)",
        ),
        with(
            "sockets",
            true,
            "connect() reaches unix sockets only in the project and the agent's state, and syslog: never tmux, ssh-agent, docker or an editor's (Seatbelt)",
        ),
        with(
            "handoff",
            true,
            "open and osascript cannot run, nor can any program open applications through LaunchServices or send Apple events to another application (Seatbelt)",
        ),
        with(
            "launchd",
            false,
            "a program handed to launchd: /bin/launchctl is refused, but a copy of it, or a program of the agent's own, can still ask launchd to start one outside the sandbox, where neither the file rules nor the network's hold",
        ),
        with(
            "orphans",
            true,
            "when the session ends, every process still in its sandboxes is ended, however it left the session's tree (nd7 run asks the kernel which sandbox each of your processes is in)",
        ),
        with(
            "terminals",
            false,
            "your other terminals (/dev/ttysN), which the agent can read and write",
        ),
    ]
}

/// The exit: nothing to serve here, as `nd7-exec` runs each command itself.
pub struct ExitService {}

/// Nothing to open: `nd7-exec` leaves the floor through Seatbelt's one
/// no-sandbox exec and writes the run's log itself.
pub fn serve_exit_held(
    _run_dir: &RunDir,
    _log: &Arc<RunLog>,
    _held: &Held,
    _before: Option<BeforeCommand>,
    _after: Option<AfterCommand>,
) -> Result<ExitService, String> {
    Ok(ExitService {})
}

impl ExitService {
    /// Nothing to accept.
    pub fn answer(&mut self) {}

    /// Nothing started here: each `nd7-exec` ends its own command.
    pub fn kill_commands(&self) {}
}

/// Runs `command` under `run_dir`'s current rules, the last step of
/// `nd7-exec` once it has found its run: `nd7-exec`, outside the floor,
/// applies the run's per-command profile to the shell itself and keeps the
/// exit's account in the run's log. An error means nothing ran.
pub fn run_command(run_dir: &RunDir, command: OsString) -> Result<Outcome, String> {
    // The profile is read fresh for every command: `nd7 allow` rewrote it
    // through a rename, so it is whole. nd7-exec is outside the floor here,
    // and keeps the exit's account itself: the command goes into the run's
    // log before it starts, and how it ended after. It splits first
    // (ADR-0075): this process, the caller's child, waits; its child, which
    // no confined process can signal, writes and runs.
    let path = run_dir.dir.join(crate::run_dir::PROFILE);
    let profile = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read the session's rules at {}: {e}", path.display()))?;
    let record = run_dir
        .record()
        .map_err(|e| format!("cannot read the session's record: {e}"))?;
    let command = command
        .into_string()
        .map_err(|_| "the command is not valid UTF-8".to_string())?;
    let cwd =
        std::env::current_dir().map_err(|e| format!("cannot find the working directory: {e}"))?;
    match super::split().map_err(|e| format!("cannot start nd7-exec's writer: {e}"))? {
        super::Half::Front(front) => front
            .wait(true)
            .map(Outcome::Exited)
            .map_err(|e| format!("cannot wait for nd7-exec's writer: {e}")),
        super::Half::Writer(lifeline) => {
            let code = match write_and_run(run_dir, &record, &command, &cwd, &profile, lifeline) {
                Ok(code) => code,
                Err(why) => {
                    eprintln!("nd7-exec: {why}; the command was not run");
                    126
                }
            };
            std::process::exit(code)
        }
    }
}

/// How long a writer on macOS waits for the chain's lock before it gives
/// up (a command is then not run, a hook's entry not written): the other
/// holders are nd7's own processes, none of which the agent can stop
/// (ADR-0075), so the bound is for what nothing else covers. Below the 30 s
/// a hook waits for its answer.
pub const WRITER_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

/// The writer's part of a command through the exit on macOS: `exec`, the
/// shell under the per-command profile, `exec_end`; the exit code to leave
/// with (the command's, 128+N for signal N). An error means nothing ran.
fn write_and_run(
    run_dir: &RunDir,
    record: &crate::run_dir::Record,
    command: &str,
    cwd: &Path,
    profile: &str,
    lifeline: super::Lifeline,
) -> Result<i32, String> {
    use crate::run_entry::Ended;
    use std::os::unix::process::ExitStatusExt;
    let signals = super::passed_on();
    let _writing = super::writing(&run_dir.dir);
    let log = RunLog::open_within(record, WRITER_LOCK_WAIT).map_err(|e| e.to_string())?;
    let exec = log
        .exec_started(
            command.as_bytes(),
            cwd,
            std::os::unix::process::parent_id(),
            &record.policy.grants,
        )
        .map_err(|e| {
            format!("cannot write the command into the session's log ({e}); it was not run")
        })?;
    let shell = match super::Shell::start(command, profile) {
        Ok(shell) => shell,
        Err(e) => {
            let why = format!("cannot run the command under the session's rules: {e}");
            let _ = log.exec_ended(exec, &Ended::NotStarted(why.clone()), None);
            return Err(why);
        }
    };
    let (gone, status) = shell.wait(signals, lifeline);
    let ended = match status {
        _ if gone => Ended::CallerGone,
        Ok(status) => match (status.code(), status.signal()) {
            (Some(code), _) => Ended::Exited(code),
            (None, Some(sig)) => Ended::Signaled(sig),
            (None, None) => Ended::Exited(255),
        },
        Err(_) => Ended::Exited(255),
    };
    let _ = log.exec_ended(exec, &ended, None);
    Ok(match ended {
        Ended::Exited(code) => code,
        Ended::Signaled(sig) => 128 + sig,
        _ => 128 + signal_hook::consts::SIGKILL,
    })
}

/// Runs `work` where no confined process can signal it, in the writer half
/// of `nd7-exec` ([`super::split`]), which this process, the front, waits
/// for, and returns the exit code it ended with. For the hooks' door, whose
/// writer would otherwise be the child of whatever confined process started
/// it, which could stop it while it holds the chain's lock (ADR-0075).
pub fn out_of_reach(work: impl FnOnce() -> u8) -> Result<u8, String> {
    match super::split().map_err(|e| format!("cannot start nd7-exec's writer: {e}"))? {
        super::Half::Front(front) => front
            .wait(false)
            .map(|code| u8::try_from(code.clamp(0, 255)).unwrap_or(u8::MAX))
            .map_err(|e| format!("cannot wait for nd7-exec's writer: {e}")),
        super::Half::Writer(_) => {
            let code = work();
            let _ = std::io::Write::flush(&mut std::io::stdout());
            std::process::exit(i32::from(code))
        }
    }
}

/// Appends a hook's `request` to the run's log, as `nd7-exec --record -`
/// (the hooks' door here, [`crate::sandbox::exec_is_door`]): the run is
/// found as a command's is, from the kernel's view of this process's
/// ancestors, and must be the `nd7 run` that made it (its start time).
pub fn record_hook(request: &HookRequest) -> Result<HookAnswer, String> {
    // [the front nd7-exec, nd7 record, Claude Code, …, nd7 run, …]: this is
    // the writer ([`out_of_reach`]).
    let chain = crate::kernel::macos::parent_chain().map_err(|e| e.to_string())?;
    let run_dirs = RunDirs::for_user().map_err(|e| e.to_string())?;
    let run_dir = run_dirs
        .find_by_ancestors(chain.iter().map(|&(pid, _)| pid), DOOR_MARKER)
        .ok_or("not inside an nd7 run")?;
    let record = run_dir.record().map_err(|e| e.to_string())?;
    let started = chain
        .iter()
        .find(|&&(pid, _)| pid == run_dir.pid)
        .map(|c| c.1);
    if record.pid != run_dir.pid || started != Some(record.started) {
        return Err(format!(
            "run {} is not the nd7 run that made its directory",
            run_dir.pid
        ));
    }
    let log = RunLog::open_within(&record, WRITER_LOCK_WAIT).map_err(|e| e.to_string())?;
    if request.explain {
        return match crate::refusals::explain(&request.body, &record.policy, &log, outside_root()) {
            Ok(Some(text)) => Ok(HookAnswer::Explained(text)),
            Ok(None) => Ok(HookAnswer::Skipped),
            Err(e) => Err(e.to_string()),
        };
    }
    match log.hook(request, chain.get(2).map(|c| c.0)) {
        Ok(crate::run_log::HookOutcome::Recorded(_)) => Ok(HookAnswer::Recorded),
        Ok(crate::run_log::HookOutcome::Skipped) => Ok(HookAnswer::Skipped),
        // Each hook is a process of its own here, so the budget counts one
        // payload at a time: it is Linux's door that keeps a total.
        Ok(crate::run_log::HookOutcome::OverBudget(why)) => Err(why),
        Err(e) => Err(e.to_string()),
    }
}

/// The exec observer's side in `nd7 run`: nothing observes execs here.
pub struct Observing {}

/// Why this run's execs are not observed: said in the banner, and in the
/// chain (a `not_observed` entry, [`observe_execs`]).
pub fn not_observed_why() -> Option<&'static str> {
    Some("this system has no way for an unprivileged program to observe execs")
}

/// Writes into `log` that no exec is observed, and why.
pub fn observe_execs(log: Arc<RunLog>) -> Observing {
    let why = not_observed_why().unwrap_or_default();
    let _ = log.effect(
        crate::effect::NOT_OBSERVED,
        &crate::effect::not_observed_body(None, why),
    );
    Observing {}
}

impl Observing {
    /// Nothing to finish.
    pub fn finish(&self) {}
}

/// These run only on macOS; on Linux `.ci/check-macos` type-checks them.
#[cfg(test)]
mod tests {
    #[test]
    fn the_proxy_variables_carry_the_runs_secret_to_127_0_0_1() {
        let env = super::proxy_env(43117, "0f1e");
        let names: Vec<&str> = env.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "HTTP_PROXY",
                "http_proxy",
                "HTTPS_PROXY",
                "https_proxy",
                "ALL_PROXY",
                "all_proxy"
            ]
        );
        for (name, url) in &env {
            assert_eq!(url, "http://nd7:0f1e@127.0.0.1:43117", "{name}");
        }
    }
}
