//! The Linux half of the sandbox's façade (`sandbox/mod.rs`): every
//! function and type the façade re-exports, with the same names and
//! signatures as `sandbox::macos::backend`, so that the code above the
//! sandbox reads the same on both systems (ADR-0128). What is here only
//! translates between the façade's words and this module's parts: the
//! floor (`landlock`, `seccomp`, `launch`), the namespaces (`ns`, `netns`),
//! the door and the exit, the keeper and the exec observer.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

pub use super::SandboxError;
use super::{door, exit, keeper, launch, netns, ns, observe};
use crate::floor_wire::HookRequest;
use crate::policy::Policy;
use crate::policy::deferred::Plan;
use crate::run_dir::{RunDir, RunDirs};
use crate::run_log::RunLog;
use crate::sandbox::{
    AfterCommand, BeforeCommand, HookAnswer, Kept, Leftovers, Outcome, Protection,
};

/// What this system offers nd7's sandbox, or why it cannot be used.
pub fn available() -> Result<&'static str, String> {
    super::probe()
        .map(|()| "Landlock, with every right nd7 needs (ABI 3 or newer)")
        .map_err(|e| e.to_string())
}

/// The terminal `nd7 run` was started on: the device its standard input,
/// output or error is, if one of them is a pseudo-terminal, a console or a
/// serial line ([`crate::policy::own_terminal_device`]).
pub fn own_terminal() -> Option<PathBuf> {
    super::own_terminal()
}

/// Where devices can be reached outside `/dev`: binds of `/dev`'s
/// filesystem, device filesystems mounted elsewhere, which `nd7 run` keeps
/// unreadable as it keeps the credential stores.
pub fn device_mounts() -> Vec<PathBuf> {
    super::device_mounts()
}

/// What the kernel's sandbox is called in nd7's own entries, and the
/// Landlock ABI it offers.
pub fn kernel_sandbox() -> (&'static str, Option<u32>) {
    ("landlock", super::abi())
}

/// Hands a hook's request to `run_dir`'s door, its socket, and waits until
/// the entry is in the log. The error says why nothing was recorded.
pub fn send_hook(run_dir: &RunDir, request: &HookRequest) -> Result<HookAnswer, String> {
    let socket = run_dir.dir.join(crate::run_dir::DOOR_SOCKET);
    door::send(&socket, run_dir.pid, request).map(|a| match a {
        door::Answer::Recorded => HookAnswer::Recorded,
        door::Answer::Skipped => HookAnswer::Skipped,
        door::Answer::Explained(text) => HookAnswer::Explained(text),
    })
}

/// Runs `command` as `/bin/sh -c <command>` under the floor and nothing
/// more: `nd7-exec` is inside the floor already and becomes the shell.
/// Returns only when nothing ran, saying why.
pub fn run_in_place(command: OsString) -> String {
    use std::os::unix::process::CommandExt;
    let error = Command::new("/bin/sh").arg("-c").arg(command).exec();
    format!("cannot run /bin/sh: {error}")
}

/// The floor, built and ready to be applied to the agent as it starts.
pub struct Floor {
    confinement: super::Confinement,
}

/// Builds the floor for `policy`, refusing when the kernel cannot enforce it
/// in full. `nd7_exec` is the one program that may leave it: on Linux it
/// leaves through the exit's socket, which the floor does not name.
pub fn floor(policy: &Policy, _nd7_exec: &Path) -> Result<Floor, String> {
    super::prepare_floor(policy)
        .map(|confinement| Floor { confinement })
        .map_err(|e| e.to_string())
}

impl Floor {
    /// Arranges for `command`'s process to be confined before it execs.
    pub fn confine(&self, command: &mut Command) -> Result<(), String> {
        self.confinement.confine(command, super::Started::Floor);
        Ok(())
    }
}

/// Where the files that run later outside the floor (`policy::deferred`)
/// will be held, made before the plan is: the run's own user and mount
/// namespaces, which `nd7 run` enters while it has one thread
/// ([`enter_hold`]), or why it could not.
pub struct Holding {
    entered: Result<ns::Namespaces, ns::NsError>,
}

/// Moves `nd7 run` into the namespaces its files will be held in. Must be
/// called while the process has one thread, before the floor's thread
/// starts. A refusal here is not an error: [`hold`] then says why the files
/// cannot be held, and the caller has them watched.
pub fn enter_hold() -> Holding {
    Holding {
        entered: ns::enter(),
    }
}

/// The root directory as the account sees it outside the run's
/// namespaces, once `nd7 run` has entered them ([`enter_hold`]).
pub fn outside_root() -> Option<std::os::fd::BorrowedFd<'static>> {
    ns::outside_root()
}

/// How the files that run later outside the floor are held for one run:
/// the run's namespaces with those files read-only, inside which the agent
/// and every command through the exit start.
#[derive(Clone, Default)]
pub struct Held {
    namespaces: Option<Arc<ns::Namespaces>>,
    /// Whether every one of the plan's holds was made.
    all_held: bool,
}

/// Holds `plan`'s files for the run in `holding`, and gives up the
/// capability that took (nothing the run starts from here on holds one).
/// `Ok((_, Some(why)))` when the files cannot be held here (user namespaces
/// refused): the caller then has them watched instead. `Err` when `nd7 run`
/// could not give its capabilities up, and must start nothing.
pub fn hold(holding: Holding, plan: &Plan) -> Result<(Held, Option<String>), String> {
    let ns = match holding.entered {
        Ok(ns) => ns,
        Err(e) if e.half_entered() => {
            return Err(format!(
                "the session's user namespace could not be set up ({e}), and the session cannot go on in it"
            ));
        }
        Err(e) => return Ok((Held::default(), Some(e.to_string()))),
    };
    let bound = ns.hold(&plan.guarded);
    if bound.is_ok() {
        announce_git_configs(plan);
    }
    ns.drop_capabilities().map_err(|e| e.to_string())?;
    let not_held = bound.err().map(|e| e.to_string());
    Ok((
        Held {
            all_held: not_held.is_none(),
            namespaces: Some(Arc::new(ns)),
        },
        not_held,
    ))
}

/// Tells the keeper which of `plan`'s git configurations are held, each
/// by its path and a descriptor of it, so that it makes their edits that
/// run nothing (`rename`, ADR-0134). Called once the mounts are made.
fn announce_git_configs(plan: &Plan) {
    use rustix::fs::{Mode, OFlags};
    use std::os::fd::AsFd;
    use std::os::unix::ffi::OsStrExt;
    for dir in &plan.git_dirs {
        let path = dir.join("config");
        if !plan.held(&path) {
            continue;
        }
        let Ok(fd) = rustix::fs::open(
            &path,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) else {
            continue;
        };
        let _ = keeper::send(
            keeper::HELD_GIT_CONFIG,
            path.as_os_str().as_bytes(),
            fd.as_fd(),
        );
    }
}

/// Whether `nd7 run` can keep the agent's network to its proxy here, for
/// `nd7 doctor`: where user namespaces work (the same trial as
/// [`hold_available`]).
pub fn egress_available() -> Result<&'static str, String> {
    ns::trial()
        .map(|()| "a network namespace per session")
        .map_err(|e| e.to_string())
}

/// Nothing to listen on yet: the proxy's listener is made inside the run's
/// network namespace ([`hold`]), and no profile names its port.
pub fn listen_for_proxy() -> Result<Option<u16>, String> {
    Ok(None)
}

/// What holds the files that run later on this system, for `nd7 doctor`:
/// a short-lived child tries to enter namespaces as `nd7 run` does.
pub fn hold_available() -> Result<&'static str, String> {
    ns::trial()
        .map(|()| "a mount namespace makes them read-only (user namespaces work here)")
        .map_err(|e| e.to_string())
}

impl Held {
    /// The run's network namespace and its proxy's listener (where user
    /// namespaces work), or why there is none.
    pub fn net(&self) -> Result<&netns::Net, String> {
        match &self.namespaces {
            Some(ns) => ns.net.as_ref().map_err(Clone::clone),
            None => Err("user namespaces are refused here".into()),
        }
    }

    /// Whether the run has its network namespace, where nd7's egress proxy
    /// is the one way out (ADR-0106); why not where it has none.
    pub fn egress(&self) -> Result<(), String> {
        self.net().map(|_| ())
    }

    /// What tells the proxy which process opened a connection.
    pub fn proxy_client() -> Option<crate::egress::Who> {
        Some(netns::client_process)
    }

    /// None: the proxy listens inside the run's network namespace, where
    /// only the session's processes are.
    pub fn proxy_credentials(&self) -> Option<String> {
        None
    }

    /// Serves `proxy` on the listener made inside the run's network
    /// namespace, from the thread that stayed outside it, so that the
    /// connections it opens are outside.
    pub fn serve_proxy(&self, proxy: Arc<crate::egress::Proxy>) -> Result<(), String> {
        let net = self.net()?;
        let listener = net
            .take_listener()
            .ok_or("the proxy's listener was already taken")?;
        net.outside(move || {
            proxy.serve(listener);
        })
        .map_err(|e| e.to_string())
    }

    /// The variables that point the agent at the session's proxy, empty
    /// where there is no network namespace.
    pub fn proxy_env(&self) -> Vec<(String, String)> {
        match self.net() {
            Ok(net) => netns::proxy_env(net.port),
            Err(_) => Vec::new(),
        }
    }

    /// Whether the plan's holds are in force: false when the namespaces
    /// could not be entered or a bind failed.
    pub fn all_held(&self) -> bool {
        self.all_held
    }

    /// Arranges for `command`'s process, started inside the run's
    /// namespaces, to work in `cwd` as seen there and to hold no capability,
    /// before it is confined: call it before [`Floor::confine`].
    pub fn prepare(&self, command: &mut Command, cwd: &Path) -> Result<(), String> {
        match &self.namespaces {
            Some(ns) => ns.prepare(command, cwd).map_err(|e| e.to_string()),
            None => Ok(()),
        }
    }
}

/// A program the run started under the floor: the agent.
pub struct Agent {
    launched: launch::Launched,
}

impl Agent {
    /// The program's pid.
    pub fn id(&self) -> u32 {
        self.launched.id()
    }

    /// Waits for the program to end.
    pub fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        self.launched.wait()
    }
}

/// Starts what `command` describes (program, arguments, variables; its
/// standard descriptors are `nd7 run`'s) under `floor`, inside `held`,
/// working in `cwd`. The child shares `nd7 run`'s memory until it execs
/// (`launch`, ADR-0087) instead of being a copy of it.
pub fn start_agent(
    command: Command,
    held: &Held,
    floor: &Floor,
    cwd: &Path,
) -> std::io::Result<Agent> {
    let mut launch = launch::Launch::from_command(&command);
    if let Some(ns) = &held.namespaces {
        ns.prepare(&mut launch, cwd)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
    }
    floor
        .confinement
        .confine(&mut launch, super::Started::Floor);
    Ok(Agent {
        launched: launch.spawn()?,
    })
}

/// Splits `nd7 run` into the keeper, which outlives everything the run
/// starts and ends it all, and `nd7 run` proper (see `keeper`). Must be
/// called while the process has a single thread. The keeper runs
/// `head_start` while `nd7 run` sets up and hands it its bytes
/// ([`head_start`]).
pub fn keep_run(run_dirs: &RunDirs, head_start: impl FnOnce() -> Vec<u8>) -> Result<Kept, String> {
    match keeper::split(run_dirs, head_start)? {
        keeper::Side::Done(code) => Ok(Kept::Done(code)),
        keeper::Side::Run => Ok(Kept::Run),
    }
}

/// What the keeper worked out for `nd7 run` ([`keep_run`]'s `head_start`),
/// waiting for it if need be; `None` when it sent nothing, and `nd7 run`
/// works it out itself.
pub fn head_start() -> Option<Vec<u8>> {
    keeper::channel().and_then(|c| c.head_start())
}

/// Puts `nd7 run` under the Landlock layer that keeps signals and abstract
/// sockets inside the run (`keeper::scope`). Called once its namespaces are
/// built and before it starts anything.
pub fn scope_run() -> Result<(), String> {
    keeper::scope()
}

/// Waits until the keeper has said what it can do for the run: called
/// before anything is started under the floor, whose seccomp filter depends
/// on the answer. An error means the keeper is gone, and nothing may be
/// started.
pub fn keeper_ready() -> Result<(), String> {
    match keeper::channel() {
        Some(channel) => channel.ready(),
        None => Ok(()),
    }
}

/// Ends every process the run started that is still running, the session
/// process itself aside, and says which: the keeper does it (`None` when no
/// keeper answers; it still ends everything once `nd7 run` has gone).
pub fn end_leftovers(_run_dir: &RunDir, _policy: &Policy) -> Option<Leftovers> {
    let left = keeper::end_leftovers();
    // Nothing of the floor is left to connect: what the door still holds is
    // served, refused or dropped, and written down, before the tally
    // (ADR-0099).
    door::drain(door::DRAIN_BOUND);
    left
}

/// A mark for the run's profiles ([`Policy::mark`]): macOS only.
pub fn run_mark() -> Option<PathBuf> {
    None
}

/// The protections beyond the file rules and whether the running kernel
/// enforces each; in a run, as that run applies them.
pub fn protections() -> Vec<Protection> {
    super::protections()
}

/// The exit, open for the run's life.
pub struct ExitService {
    serving: exit::Serving,
    /// The door and the exit, listening, until [`ExitService::answer`]
    /// starts the threads that accept their connections.
    waiting: Option<(door::Door, exit::Exit)>,
}

/// Opens the run's exit and the hooks' door: `nd7 run` itself starts each
/// command and appends each hook's entry, so it listens on the session's
/// two sockets, every command started inside `held`'s namespaces, `before`
/// called before each command starts and `after` when it ends. Connections
/// are accepted once [`ExitService::answer`] is called.
pub fn serve_exit_held(
    run_dir: &RunDir,
    log: &Arc<RunLog>,
    held: &Held,
    before: Option<BeforeCommand>,
    after: Option<AfterCommand>,
) -> Result<ExitService, String> {
    let door = door::Door::open(run_dir, log.clone()).map_err(|e| e.to_string())?;
    let exit = exit::Exit::open(run_dir, log.clone())
        .map_err(|e| e.to_string())?
        .inside(held.namespaces.clone())
        .before_each(before)
        .after_each(after);
    Ok(ExitService {
        serving: exit.serving(),
        waiting: Some((door, exit)),
    })
}

impl ExitService {
    /// Starts accepting the door's and the exit's connections, each socket
    /// on a thread of its own. `nd7 run` calls it just after it has
    /// started the agent: the agent's start then waits for no thread to
    /// be made, and a connection the agent makes first waits in its
    /// socket's queue until then.
    pub fn answer(&mut self) {
        if let Some((door, exit)) = self.waiting.take() {
            door.serve();
            exit.serve();
        }
    }

    /// Ends every command the exit started that is still running.
    pub fn kill_commands(&self) {
        self.serving.kill_commands();
    }
}

/// Runs `command` under `run_dir`'s current rules, the last step of
/// `nd7-exec` once it has found its run: `nd7 run` starts it, through the
/// run's exit socket. An error means nothing ran.
pub fn run_command(run_dir: &RunDir, command: OsString) -> Result<Outcome, String> {
    match exit::run(&run_dir.socket_path(), command) {
        Ok(exit::Outcome::Exited(code)) => Ok(Outcome::Exited(code)),
        Ok(exit::Outcome::Signaled(sig)) => Ok(Outcome::Signaled(sig)),
        Err(e) => Err(e.to_string()),
    }
}

/// Runs `work` here: no confined process can signal `nd7-exec`'s callers
/// on Linux, where the door is `nd7 run`'s own.
pub fn out_of_reach(work: impl FnOnce() -> u8) -> Result<u8, String> {
    Ok(work())
}

/// Refuses: on Linux the hooks' door is `nd7 run`'s socket, not
/// `nd7-exec --record` ([`crate::sandbox::exec_is_door`]).
pub fn record_hook(_request: &HookRequest) -> Result<HookAnswer, String> {
    Err(crate::sandbox::NOT_THE_DOOR.to_string())
}

/// The exec observer's side in `nd7 run` (ADR-0110): writes what ran into
/// the run's chain until [`Observing::finish`].
pub struct Observing {
    recorder: std::sync::Mutex<Option<observe::Recorder>>,
}

/// Why this run's execs are not observed, when they are not: said in the
/// banner, and in the chain (a `not_observed` entry, [`observe_execs`]).
pub fn not_observed_why() -> Option<&'static str> {
    observe::not_observed_why()
}

/// Starts writing the execs observed in this run into `log`, or writes
/// that none are.
pub fn observe_execs(log: Arc<RunLog>) -> Observing {
    Observing {
        recorder: std::sync::Mutex::new(observe::record(log)),
    }
}

impl Observing {
    /// Once every process of the run has ended: writes the rest.
    pub fn finish(&self) {
        if let Some(r) = self.recorder.lock().ok().and_then(|mut r| r.take()) {
            r.finish();
        }
    }
}
