//! The platform sandboxes: Seatbelt on macOS, Landlock on Linux. All
//! `#[cfg(target_os)]` for the sandbox lives under this module (the
//! kernel's facts about processes and paths, which `run_dir` needs too, are
//! in [`crate::kernel`], ADR-0064); what is above it (`nd7 run`, `nd7-exec`)
//! sees the few functions here. It stands on `run_dir`, never the reverse.
//!
//! Both backends keep the same promises: one floor for the agent and all it
//! starts, applied before the agent runs and never loosened; one exit,
//! `nd7-exec`, through which a Bash command runs under the run's current
//! rules (the floor plus its grants); and no command ever run unconfined when
//! the run or its rules cannot be found.

#[cfg(target_os = "linux")]
pub mod linux;
#[cfg(target_os = "macos")]
pub mod macos;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use crate::floor_wire::HookRequest;
use crate::kernel::ancestors;
/// Kept here for `nd7 run`, which names them through `sandbox`; they are
/// the kernel's facts ([`crate::kernel`]).
pub use crate::kernel::{PinError, pin, start_time};
use crate::policy::Policy;
use crate::policy::deferred::Plan;
use crate::run_dir::{RunDir, RunDirs};
use crate::run_log::RunLog;

#[cfg(target_os = "linux")]
pub use linux::SandboxError;
#[cfg(target_os = "macos")]
pub use macos::SandboxError;

/// Whether the floor can let Claude Code save `~/.claude.json` only by
/// having that file live under `~/.claude`.
///
/// Claude Code saves it through `~/.claude.json.tmp.<pid>.<random>` created in
/// the home directory itself. Seatbelt can allow exactly those names with a
/// regex; Landlock allows only beneath directories that exist, so on Linux the
/// file moves into `~/.claude` with a link left in its place, which Claude
/// Code resolves before saving (measured with 2.1.197; see docs/setup.md).
pub const CLAUDE_JSON_MUST_MOVE: bool = cfg!(target_os = "linux");

/// What this system offers nd7's sandbox, or why it cannot be used.
pub fn available() -> Result<&'static str, String> {
    #[cfg(target_os = "linux")]
    {
        linux::probe()
            .map(|()| "Landlock, with every right nd7 needs (ABI 3 or newer)")
            .map_err(|e| e.to_string())
    }
    #[cfg(target_os = "macos")]
    {
        Ok("Seatbelt")
    }
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    {
        Err("nd7 has no sandbox for this operating system".to_string())
    }
}

/// A write root or grant left out of a ruleset, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dropped {
    pub path: PathBuf,
    /// Whether it was a grant (then it is also taken off the record).
    pub grant: bool,
    pub why: String,
}

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.grant {
            write!(
                f,
                "the grant of {} is taken back: {}; `nd7 allow` it again if it is still what you mean",
                self.path.display(),
                self.why
            )
        } else {
            write!(
                f,
                "{} is left out of the commands' write roots: {}",
                self.path.display(),
                self.why
            )
        }
    }
}

/// The terminal `nd7 run` was started on: the device its standard input,
/// output or error is, if one of them is a pseudo-terminal, a console or a
/// serial line ([`crate::policy::own_terminal_device`]; Linux only,
/// elsewhere `None`, as the rule it feeds is Linux's).
pub fn own_terminal() -> Option<std::path::PathBuf> {
    #[cfg(target_os = "linux")]
    {
        linux::own_terminal()
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// Where devices can be reached outside `/dev` (Linux: binds of `/dev`'s
/// filesystem, device filesystems mounted elsewhere), which `nd7 run`
/// keeps unreadable as it keeps the credential stores; elsewhere none.
pub fn device_mounts() -> Vec<std::path::PathBuf> {
    #[cfg(target_os = "linux")]
    {
        linux::device_mounts()
    }
    #[cfg(not(target_os = "linux"))]
    {
        Vec::new()
    }
}

/// The file in a run's directory whose presence marks it as one
/// `nd7-exec` can use: the exit socket on Linux, the profile on macOS.
pub const RUN_MARKER: &str = if cfg!(target_os = "macos") {
    crate::run_dir::PROFILE
} else {
    crate::run_dir::EXIT_SOCKET
};

/// The file in a run's directory whose presence marks the door the
/// hooks reach the log through: the door's socket on Linux; on macOS the
/// profile, since `nd7-exec --record` is the door there.
pub const DOOR_MARKER: &str = if cfg!(target_os = "macos") {
    crate::run_dir::PROFILE
} else {
    crate::run_dir::DOOR_SOCKET
};

/// What the kernel's sandbox is called in nd7's own entries, and the Landlock
/// ABI it offers (Linux).
pub fn kernel_sandbox() -> (&'static str, Option<u32>) {
    #[cfg(target_os = "linux")]
    {
        ("landlock", linux::abi())
    }
    #[cfg(target_os = "macos")]
    {
        ("seatbelt", None)
    }
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    {
        ("none", None)
    }
}

/// The run whose door this process's hooks go through: the first of
/// its ancestors, as the kernel reports them, that owns a run with a
/// door. `None` outside any run.
pub fn hook_door() -> Option<RunDir> {
    let run_dirs = RunDirs::for_user().ok()?;
    run_dirs.find_by_ancestors(ancestors(), DOOR_MARKER)
}

/// [`hook_door`], starting from the run directory `nd7 run` named in the
/// hook's environment (`ND7_RUN`), which spares the account-database lookup
/// on every hook: taken only if that run's pid is one of this process's
/// ancestors as the kernel reports them, and on Linux the door's listener
/// must prove to be that process ([`send_hook`]). Otherwise the ancestors
/// are searched as [`hook_door`] does.
pub fn hook_door_near(dir: &Path) -> Option<RunDir> {
    let pid: u32 = dir.file_name()?.to_str()?.parse().ok()?;
    let named = RunDir {
        pid,
        dir: dir.to_path_buf(),
    };
    if named.dir.join(DOOR_MARKER).exists() && ancestors().any(|a| a == pid) {
        Some(named)
    } else {
        hook_door()
    }
}

/// How `nd7 run` answered a hook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HookAnswer {
    /// The entry is in the log.
    Recorded,
    /// The run records this event through its own hook instead; for
    /// `nd7 hook-explain`, nothing to say.
    Skipped,
    /// For `nd7 hook-explain`: what the floor refused, for the model.
    Explained(String),
}

/// What `nd7-exec --record` exits with when the run skipped the payload.
pub const RECORD_SKIPPED: u8 = 10;

/// Hands a hook's request to `run_dir`'s door and waits until the entry is
/// in the log: on Linux through the door's socket; on macOS through
/// `nd7-exec --record`, the one program that leaves the floor, which appends
/// itself. The error says why nothing was recorded.
pub fn send_hook(run_dir: &RunDir, request: &HookRequest) -> Result<HookAnswer, String> {
    #[cfg(target_os = "linux")]
    {
        let socket = run_dir.dir.join(crate::run_dir::DOOR_SOCKET);
        linux::door::send(&socket, run_dir.pid, request).map(|a| match a {
            linux::door::Answer::Recorded => HookAnswer::Recorded,
            linux::door::Answer::Skipped => HookAnswer::Skipped,
            linux::door::Answer::Explained(text) => HookAnswer::Explained(text),
        })
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = run_dir;
        send_through_exec(request)
    }
}

/// How long a hook waits for `nd7-exec --record` (macOS) to append its
/// entry and answer, as a hook waits for `nd7 run`'s door on Linux: an
/// `nd7-exec` stopped or stuck would otherwise keep the hook, and Claude Code
/// with it, waiting for good. Below Claude Code's own hook timeout (60 s),
/// so the hook says why.
pub const HOOK_ANSWER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// `nd7-exec --record -` beside this program, fed the request on stdin; for
/// an explain request, its standard output is the explanation. Waits at
/// most [`HOOK_ANSWER_TIMEOUT`], then kills it and says so (its writer may
/// still append the entry later).
#[cfg_attr(target_os = "linux", allow(dead_code))]
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

/// The files a run's record has beside it on this system, each with
/// its text: on macOS, where `nd7-exec` applies the rules itself, the
/// per-command profile and the floor's profile (for what it runs in place);
/// on Linux none, as `nd7 run` builds each command's ruleset from the
/// record. Passed to [`RunDir::write_record`] and the changes that call it,
/// so that the run's directory is written whole without `run_dir`
/// asking the platform.
pub fn files_beside_record(policy: &Policy) -> Vec<(&'static str, String)> {
    if cfg!(target_os = "macos") {
        vec![
            (
                crate::run_dir::PROFILE,
                crate::policy::seatbelt::command(policy),
            ),
            (
                crate::run_dir::FLOOR_PROFILE,
                crate::policy::seatbelt::floor(policy, &policy.roots.exit),
            ),
        ]
    } else {
        Vec::new()
    }
}

/// Runs `command` as Claude Code would have without its shell prefix,
/// `/bin/sh -c <command>`, under the floor and nothing more: on Linux
/// `nd7-exec` is inside the floor already and becomes the shell; on macOS
/// it started outside, and applies the run's floor profile first.
/// Returns only when nothing ran, saying why.
pub fn run_in_place(command: OsString) -> String {
    use std::os::unix::process::CommandExt;
    #[cfg(target_os = "macos")]
    {
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
        if let Err(e) = macos::restrict_self(&profile) {
            return e.to_string();
        }
    }
    let error = Command::new("/bin/sh").arg("-c").arg(command).exec();
    format!("cannot run /bin/sh: {error}")
}

/// The floor, built and ready to be applied to the agent as it starts.
pub struct Floor {
    #[cfg(target_os = "linux")]
    confinement: linux::Confinement,
    #[cfg(target_os = "macos")]
    profile: String,
}

/// Builds the floor for `policy`, refusing when the kernel cannot enforce it
/// in full. `nd7_exec` is the one program that may leave it.
pub fn floor(policy: &Policy, nd7_exec: &Path) -> Result<Floor, String> {
    let _ = nd7_exec;
    #[cfg(target_os = "linux")]
    {
        linux::prepare_floor(policy)
            .map(|confinement| Floor { confinement })
            .map_err(|e| e.to_string())
    }
    #[cfg(target_os = "macos")]
    {
        Ok(Floor {
            profile: crate::policy::seatbelt::floor(policy, nd7_exec),
        })
    }
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    {
        let _ = policy;
        Err("nd7 run has no sandbox for this operating system".to_string())
    }
}

impl Floor {
    /// Arranges for `command`'s process to be confined before it execs.
    pub fn confine(&self, command: &mut Command) -> Result<(), String> {
        #[cfg(target_os = "linux")]
        {
            self.confinement.confine(command, linux::Started::Floor);
            Ok(())
        }
        #[cfg(target_os = "macos")]
        {
            macos::confine(command, &self.profile).map_err(|e| e.to_string())
        }
        #[cfg(not(any(target_os = "linux", target_os = "macos")))]
        {
            let _ = command;
            Err("nd7 run has no sandbox for this operating system".to_string())
        }
    }
}

/// Where the files that run later outside the floor (`policy::deferred`)
/// will be held, made before the plan is: on Linux, the run's own user
/// and mount namespaces, which `nd7 run` enters while it has one
/// thread ([`enter_hold`]), or why it could not; elsewhere nothing.
pub struct Holding {
    #[cfg(target_os = "linux")]
    entered: Result<linux::ns::Namespaces, linux::ns::NsError>,
}

/// Moves `nd7 run` into the namespaces its files will be held in (on
/// Linux; elsewhere does nothing). Must be called while the process has
/// one thread, before the floor's thread starts. A refusal here is not an
/// error: [`hold`] then says why the files cannot be held, and the caller
/// has them watched.
pub fn enter_hold() -> Holding {
    Holding {
        #[cfg(target_os = "linux")]
        entered: linux::ns::enter(),
    }
}

/// The root directory as the account sees it outside the run's
/// namespaces, where the files that run later are not held: on Linux once
/// `nd7 run` has entered them ([`enter_hold`]); `None` elsewhere.
pub fn outside_root() -> Option<std::os::fd::BorrowedFd<'static>> {
    #[cfg(target_os = "linux")]
    {
        linux::ns::outside_root()
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// How the files that run later outside the floor (`policy::deferred`)
/// are held for one run. On Linux, the run's namespaces with those
/// files read-only, inside which the agent and every command through the
/// exit start; on macOS the profiles deny them, and there is nothing to
/// hold.
#[derive(Clone, Default)]
pub struct Held {
    #[cfg(target_os = "linux")]
    namespaces: Option<std::sync::Arc<linux::ns::Namespaces>>,
    /// Whether every one of the plan's holds was made.
    #[cfg(target_os = "linux")]
    all_held: bool,
}

/// Holds `plan`'s files for the run in `holding`, and, on Linux, gives
/// up the capability that took (nothing the run starts from here on
/// holds one). `Ok(Err(why))` when the files cannot be held here (on Linux,
/// when user namespaces are refused): the caller then has them watched
/// instead. `Err` when `nd7 run` could not give its capabilities up,
/// and must start nothing.
pub fn hold(holding: Holding, plan: &Plan) -> Result<(Held, Option<String>), String> {
    #[cfg(target_os = "linux")]
    {
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
        ns.drop_capabilities().map_err(|e| e.to_string())?;
        let not_held = bound.err().map(|e| e.to_string());
        Ok((
            Held {
                all_held: not_held.is_none(),
                namespaces: Some(std::sync::Arc::new(ns)),
            },
            not_held,
        ))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (holding, plan);
        Ok((Held::default(), None))
    }
}

/// Whether `nd7 run` can keep the agent's network to its proxy here, for
/// `nd7 doctor`: on Linux where user namespaces work (the same trial as
/// [`hold_available`]).
pub fn egress_available() -> Result<(), String> {
    #[cfg(target_os = "linux")]
    {
        linux::ns::trial().map_err(|e| e.to_string())
    }
    #[cfg(not(target_os = "linux"))]
    {
        Err("only Linux's network namespaces keep it so far".to_string())
    }
}

/// What holds the files that run later on this system, for `nd7 doctor`:
/// on Linux a short-lived child tries to enter namespaces as `nd7 run` does.
pub fn hold_available() -> Result<&'static str, String> {
    #[cfg(target_os = "linux")]
    {
        linux::ns::trial()
            .map(|()| "a mount namespace makes them read-only (user namespaces work here)")
            .map_err(|e| e.to_string())
    }
    #[cfg(target_os = "macos")]
    {
        Ok("the Seatbelt profiles deny writing them")
    }
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    {
        Err("nd7 has no sandbox for this operating system".to_string())
    }
}

impl Held {
    /// The run's network namespace and its proxy's listener (Linux, where
    /// user namespaces work), or why there is none.
    #[cfg(target_os = "linux")]
    pub fn net(&self) -> Result<&linux::netns::Net, String> {
        match &self.namespaces {
            Some(ns) => ns.net.as_ref().map_err(Clone::clone),
            None => Err("user namespaces are refused here".into()),
        }
    }

    /// Whether the run has its network namespace, where nd7's egress proxy
    /// is the one way out (ADR-0106); why not where it has none.
    pub fn egress(&self) -> Result<(), String> {
        #[cfg(target_os = "linux")]
        {
            self.net().map(|_| ())
        }
        #[cfg(not(target_os = "linux"))]
        {
            Err("only Linux's network namespaces keep it so far".into())
        }
    }

    /// What tells the proxy which process opened a connection, where this
    /// system can tell (Linux).
    pub fn proxy_client() -> Option<crate::egress::Who> {
        #[cfg(target_os = "linux")]
        {
            Some(linux::netns::client_process)
        }
        #[cfg(not(target_os = "linux"))]
        {
            None
        }
    }

    /// Serves `proxy` on the listener made inside the run's network
    /// namespace, from the thread that stayed outside it, so that the
    /// connections it opens are outside.
    pub fn serve_proxy(&self, proxy: std::sync::Arc<crate::egress::Proxy>) -> Result<(), String> {
        #[cfg(target_os = "linux")]
        {
            let net = self.net()?;
            let listener = net
                .take_listener()
                .ok_or("the proxy's listener was already taken")?;
            net.outside(move || {
                proxy.serve(listener);
            })
            .map_err(|e| e.to_string())
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = proxy;
            Err("only Linux's network namespaces keep it so far".into())
        }
    }

    /// The variables that point the agent at the session's proxy, empty
    /// where there is no network namespace.
    pub fn proxy_env(&self) -> Vec<(String, String)> {
        #[cfg(target_os = "linux")]
        if let Ok(net) = self.net() {
            return linux::netns::proxy_env(net.port);
        }
        Vec::new()
    }

    /// Whether the plan's holds are in force: false on Linux when the
    /// namespaces could not be entered or a bind failed.
    pub fn all_held(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            self.all_held
        }
        #[cfg(not(target_os = "linux"))]
        {
            true
        }
    }

    /// Arranges for `command`'s process, started inside the run's
    /// namespaces, to work in `cwd` as seen there and to hold no capability,
    /// before it is confined: call it before [`Floor::confine`].
    pub fn prepare(&self, command: &mut Command, cwd: &Path) -> Result<(), String> {
        #[cfg(target_os = "linux")]
        if let Some(ns) = &self.namespaces {
            return ns.prepare(command, cwd).map_err(|e| e.to_string());
        }
        let _ = (command, cwd);
        Ok(())
    }
}

/// A program the run started under the floor: the agent.
pub struct Agent {
    #[cfg(target_os = "linux")]
    launched: linux::launch::Launched,
    #[cfg(not(target_os = "linux"))]
    child: std::process::Child,
}

impl Agent {
    /// The program's pid.
    pub fn id(&self) -> u32 {
        #[cfg(target_os = "linux")]
        {
            self.launched.id()
        }
        #[cfg(not(target_os = "linux"))]
        {
            self.child.id()
        }
    }

    /// Waits for the program to end.
    pub fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        #[cfg(target_os = "linux")]
        {
            self.launched.wait()
        }
        #[cfg(not(target_os = "linux"))]
        {
            self.child.wait()
        }
    }
}

/// Starts what `command` describes (program, arguments, variables; its
/// standard descriptors are `nd7 run`'s) under `floor`, inside `held`,
/// working in `cwd`. On Linux the child shares `nd7 run`'s memory until
/// it execs (`linux::launch`, ADR-0087) instead of being a copy of it.
pub fn start_agent(
    command: Command,
    held: &Held,
    floor: &Floor,
    cwd: &Path,
) -> std::io::Result<Agent> {
    #[cfg(target_os = "linux")]
    {
        let mut launch = linux::launch::Launch::from_command(&command);
        if let Some(ns) = &held.namespaces {
            ns.prepare(&mut launch, cwd)
                .map_err(|e| std::io::Error::other(e.to_string()))?;
        }
        floor
            .confinement
            .confine(&mut launch, linux::Started::Floor);
        Ok(Agent {
            launched: launch.spawn()?,
        })
    }
    #[cfg(not(target_os = "linux"))]
    {
        let mut command = command;
        held.prepare(&mut command, cwd)
            .map_err(std::io::Error::other)?;
        floor.confine(&mut command).map_err(std::io::Error::other)?;
        Ok(Agent {
            child: command.spawn()?,
        })
    }
}

/// Called after each command through the exit ends, with the command's text.
pub type AfterCommand = std::sync::Arc<dyn Fn(&str) + Send + Sync>;

/// Called before each command through the exit starts, with the grants it
/// runs under (each a resolved path).
pub type BeforeCommand = std::sync::Arc<dyn Fn(&[PathBuf]) + Send + Sync>;

/// Which process [`keep_run`] returned in.
pub enum Kept {
    /// The front or the keeper: the run is over, nothing it started is
    /// left, and this process exits with this code.
    Done(i32),
    /// `nd7 run` (the keeper's child), to carry on.
    Run,
}

/// Splits `nd7 run` into the keeper, which outlives everything the run
/// starts and ends it all, and `nd7 run` proper (see `linux::keeper`). Must be
/// called while the process has a single thread. Where there is no keeper
/// (macOS), the caller simply carries on as `nd7 run`. The keeper runs
/// `head_start` while `nd7 run` sets up and hands it its bytes
/// ([`head_start`]).
pub fn keep_run(run_dirs: &RunDirs, head_start: impl FnOnce() -> Vec<u8>) -> Result<Kept, String> {
    #[cfg(target_os = "linux")]
    {
        match linux::keeper::split(run_dirs, head_start)? {
            linux::keeper::Side::Done(code) => Ok(Kept::Done(code)),
            linux::keeper::Side::Run => Ok(Kept::Run),
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (run_dirs, head_start);
        Ok(Kept::Run)
    }
}

/// What the keeper worked out for `nd7 run` ([`keep_run`]'s
/// `head_start`), waiting for it if need be; `None` where there is no keeper
/// or it sent nothing, and `nd7 run` works it out itself.
pub fn head_start() -> Option<Vec<u8>> {
    #[cfg(target_os = "linux")]
    {
        linux::keeper::channel().and_then(|c| c.head_start())
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// Puts `nd7 run` under its own scope where the system has one (on
/// Linux, the Landlock layer that keeps signals and abstract sockets inside
/// the run, `linux::keeper::scope`). Called once its
/// namespaces are built and before it starts anything.
pub fn scope_run() -> Result<(), String> {
    #[cfg(target_os = "linux")]
    {
        linux::keeper::scope()
    }
    #[cfg(not(target_os = "linux"))]
    {
        Ok(())
    }
}

/// Waits until the keeper has said what it can do for the run (on
/// Linux; elsewhere there is no keeper): called before anything is started
/// under the floor, whose seccomp filter depends on the answer. An error
/// means the keeper is gone, and nothing may be started.
pub fn keeper_ready() -> Result<(), String> {
    #[cfg(target_os = "linux")]
    if let Some(channel) = linux::keeper::channel() {
        return channel.ready();
    }
    Ok(())
}

/// What the keeper ended when `nd7 run` asked it to, once the agent had
/// ended ([`end_leftovers`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Leftovers {
    /// How many processes were ended.
    pub count: usize,
    /// The first of them (up to 256), pid and command name.
    pub processes: Vec<(u32, String)>,
    /// Connects to the hooks' door refused because the caller was not the
    /// floor's (a command through the exit, ADR-0051): how many in all,
    /// and the first of them (up to `run_log::REFUSALS_WRITTEN`).
    #[serde(default)]
    pub door_refused: usize,
    #[serde(default)]
    pub door_refused_first: Vec<(u32, String)>,
}

/// Ends every process the run started that is still running, the
/// session process itself aside, and says which: called by `nd7 run` once
/// the agent has ended, so the run's log can say so before its last entry.
/// On Linux the keeper does it (`None` when no keeper answers; it still ends
/// everything once `nd7 run` has gone). On macOS this process does: every
/// process of the user still in the run's sandboxes, found by the
/// run's mark ([`Policy::mark`]) however it left the run's tree,
/// and then it waits (at most 5 s) for the exit's writers to write how their
/// commands ended (`None` without a mark).
pub fn end_leftovers(run_dir: &RunDir, policy: &Policy) -> Option<Leftovers> {
    #[cfg(target_os = "linux")]
    {
        let _ = (run_dir, policy);
        let left = linux::keeper::end_leftovers();
        // Nothing of the floor is left to connect: what the door still
        // holds is served, refused or dropped, and written down, before the
        // tally (ADR-0099).
        linux::door::drain(linux::door::DRAIN_BOUND);
        left
    }
    #[cfg(target_os = "macos")]
    {
        let mark = policy.mark.as_deref()?;
        let ended = macos::end_marked(mark, &crate::policy::seatbelt::unmarked(mark));
        macos::wait_for_writers(&run_dir.dir, std::time::Duration::from_secs(5));
        Some(ended)
    }
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    {
        let _ = (run_dir, policy);
        None
    }
}

/// A new mark for the run's profiles ([`Policy::mark`]) on macOS: a path
/// directly under `/` that exists nowhere, unique to this run (its pid and
/// 64 random bits). `None` elsewhere, and when no randomness is to be had
/// (then nothing outside the run's tree is ended at its end).
pub fn run_mark() -> Option<PathBuf> {
    #[cfg(target_os = "macos")]
    {
        let mut bytes = [0u8; 8];
        getrandom::getrandom(&mut bytes).ok()?;
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        Some(PathBuf::from(format!(
            "/.nd7-run-{}-{hex}",
            std::process::id()
        )))
    }
    #[cfg(not(target_os = "macos"))]
    {
        None
    }
}

/// One protection beyond the file rules, and whether this system enforces it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Protection {
    /// A short name, for `nd7 doctor`.
    pub name: &'static str,
    pub enforced: bool,
    /// What is protected, or what is not and why.
    pub detail: String,
    /// What would make it enforced; `None` when nothing the user can do
    /// today would (then `nd7 doctor` notes it without failing).
    pub needs: Option<&'static str>,
}

/// The protections beyond the file rules and whether the running system
/// enforces each; in a run, as that run applies them.
pub fn protections() -> Vec<Protection> {
    #[cfg(target_os = "linux")]
    {
        linux::protections()
    }
    #[cfg(target_os = "macos")]
    {
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
                "connect() reaches unix sockets only in the project and the agent's state, and the system's DNS resolver and syslog: never tmux, ssh-agent, docker or an editor's (Seatbelt)",
            ),
            with(
                "handoff",
                true,
                "open and osascript cannot run, nor can any program open applications through LaunchServices or send Apple events to another application (Seatbelt)",
            ),
            with(
                "launchd",
                false,
                "a program handed to launchd: /bin/launchctl is refused, but a copy of it, or a program of the agent's own, can still ask launchd to start one outside the sandbox",
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
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    {
        Vec::new()
    }
}

/// The banner's line naming what this system cannot enforce, if anything.
pub fn unenforced_line() -> Option<String> {
    let missing: Vec<String> = protections()
        .into_iter()
        .filter(|p| !p.enforced)
        .map(|p| p.detail)
        .collect();
    (!missing.is_empty()).then(|| {
        format!(
            "nd7 run: not enforced on this system: {}",
            missing.join("; ")
        )
    })
}

/// The exit, open for the run's life.
pub struct ExitService {
    #[cfg(target_os = "linux")]
    serving: linux::exit::Serving,
    /// The door and the exit, listening, until [`ExitService::answer`]
    /// starts the threads that accept their connections.
    #[cfg(target_os = "linux")]
    waiting: Option<(linux::door::Door, linux::exit::Exit)>,
}

/// Opens the run's exit and the hooks' door: on Linux `nd7 run` itself
/// starts each command and appends each hook's entry, so it listens on the
/// session's two sockets; on macOS `nd7-exec` leaves the floor through
/// Seatbelt's one no-sandbox exec and writes `log` itself, and there is
/// nothing to serve. Connections are accepted once
/// [`ExitService::answer`] is called.
pub fn serve_exit(run_dir: &RunDir, log: &Arc<RunLog>) -> Result<ExitService, String> {
    serve_exit_held(run_dir, log, &Held::default(), None, None)
}

/// [`serve_exit`], with every command started inside `held`'s namespaces,
/// `before` called before each command starts and `after` when it ends (on
/// Linux, where the exit is served; on macOS `nd7-exec` runs the command
/// itself).
pub fn serve_exit_held(
    run_dir: &RunDir,
    log: &Arc<RunLog>,
    held: &Held,
    before: Option<BeforeCommand>,
    after: Option<AfterCommand>,
) -> Result<ExitService, String> {
    #[cfg(target_os = "linux")]
    {
        let door = linux::door::Door::open(run_dir, log.clone()).map_err(|e| e.to_string())?;
        let exit = linux::exit::Exit::open(run_dir, log.clone())
            .map_err(|e| e.to_string())?
            .inside(held.namespaces.clone())
            .before_each(before)
            .after_each(after);
        Ok(ExitService {
            serving: exit.serving(),
            waiting: Some((door, exit)),
        })
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (run_dir, log, held, before, after);
        Ok(ExitService {})
    }
}

impl ExitService {
    /// Starts accepting the door's and the exit's connections, each socket
    /// on a thread of its own. `nd7 run` calls it just after it has
    /// started the agent: the agent's start then waits for no thread to
    /// be made, and a connection the agent makes first waits in its
    /// socket's queue until then.
    pub fn answer(&mut self) {
        #[cfg(target_os = "linux")]
        if let Some((door, exit)) = self.waiting.take() {
            door.serve();
            exit.serve();
        }
    }

    /// Ends every command the exit started that is still running.
    pub fn kill_commands(&self) {
        #[cfg(target_os = "linux")]
        self.serving.kill_commands();
    }
}

/// How a command that went through the exit ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Exited(i32),
    Signaled(i32),
}

/// Runs `command` under `run_dir`'s current rules, the last step of
/// `nd7-exec` once it has found its run: on Linux `nd7 run` starts it,
/// through the run's exit socket; on macOS `nd7-exec`, outside the
/// floor, applies the run's per-command profile to the shell itself and
/// keeps the exit's account in the run's log. An error means nothing ran.
pub fn run_command(run_dir: &RunDir, command: OsString) -> Result<Outcome, String> {
    #[cfg(target_os = "linux")]
    {
        match linux::exit::run(&run_dir.socket_path(), command) {
            Ok(linux::exit::Outcome::Exited(code)) => Ok(Outcome::Exited(code)),
            Ok(linux::exit::Outcome::Signaled(sig)) => Ok(Outcome::Signaled(sig)),
            Err(e) => Err(e.to_string()),
        }
    }
    #[cfg(target_os = "macos")]
    {
        // The profile is read fresh for every command: `nd7 allow` rewrote it
        // through a rename, so it is whole. nd7-exec is outside the floor
        // here, and keeps the exit's account itself: the command goes into
        // the run's log before it starts, and how it ended after. It splits
        // first (ADR-0075): this process, the caller's child, waits; its
        // child, which no confined process can signal, writes and runs.
        let path = run_dir.dir.join(crate::run_dir::PROFILE);
        let profile = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read the session's rules at {}: {e}", path.display()))?;
        let record = run_dir
            .record()
            .map_err(|e| format!("cannot read the session's record: {e}"))?;
        let command = command
            .into_string()
            .map_err(|_| "the command is not valid UTF-8".to_string())?;
        let cwd = std::env::current_dir()
            .map_err(|e| format!("cannot find the working directory: {e}"))?;
        match macos::split().map_err(|e| format!("cannot start nd7-exec's writer: {e}"))? {
            macos::Half::Front(front) => front
                .wait(true)
                .map(Outcome::Exited)
                .map_err(|e| format!("cannot wait for nd7-exec's writer: {e}")),
            macos::Half::Writer(lifeline) => {
                let code = match write_and_run(run_dir, &record, &command, &cwd, &profile, lifeline)
                {
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
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    {
        let _ = (run_dir, command);
        Err("nd7-exec has no sandbox for this operating system".to_string())
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
#[cfg(target_os = "macos")]
fn write_and_run(
    run_dir: &RunDir,
    record: &crate::run_dir::Record,
    command: &str,
    cwd: &Path,
    profile: &str,
    lifeline: macos::Lifeline,
) -> Result<i32, String> {
    use crate::run_entry::Ended;
    use std::os::unix::process::ExitStatusExt;
    let signals = macos::passed_on();
    let _writing = macos::writing(&run_dir.dir);
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
    let shell = match macos::Shell::start(command, profile) {
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

/// Runs `work` where no confined process can signal it, and returns the
/// exit code it ended with: on macOS in the writer half of `nd7-exec`
/// ([`macos::split`]), which this process, the front, waits for; elsewhere
/// here. For the hooks' door, whose writer would otherwise be the child of
/// whatever confined process started it, which could stop it while it holds
/// the chain's lock (ADR-0075).
pub fn out_of_reach(work: impl FnOnce() -> u8) -> Result<u8, String> {
    #[cfg(target_os = "macos")]
    {
        match macos::split().map_err(|e| format!("cannot start nd7-exec's writer: {e}"))? {
            macos::Half::Front(front) => front
                .wait(false)
                .map(|code| u8::try_from(code.clamp(0, 255)).unwrap_or(u8::MAX))
                .map_err(|e| format!("cannot wait for nd7-exec's writer: {e}")),
            macos::Half::Writer(_) => {
                let code = work();
                let _ = std::io::Write::flush(&mut std::io::stdout());
                std::process::exit(i32::from(code))
            }
        }
    }
    #[cfg(not(target_os = "macos"))]
    {
        Ok(work())
    }
}

/// Whether `nd7-exec --record -` is the hooks' door on this system: on
/// macOS it is, as `nd7 record` inside the floor cannot write the run's log
/// and `nd7-exec` is the one program that leaves the floor; on Linux the
/// door is `nd7 run`'s socket, and the error says so.
pub fn exec_is_door() -> Result<(), String> {
    if cfg!(target_os = "macos") {
        Ok(())
    } else {
        Err(NOT_THE_DOOR.to_string())
    }
}

const NOT_THE_DOOR: &str = "nd7-exec --record is the hooks' door on macOS only; on this system nd7 record reaches nd7 run through its socket";

/// Appends a hook's `request` to the run's log, as `nd7-exec --record -`
/// (the hooks' door on macOS, [`exec_is_door`]): the run is found as a
/// command's is, from the kernel's view of this process's ancestors, and
/// must be the `nd7 run` that made it (its start time). On Linux this refuses.
pub fn record_hook(request: &HookRequest) -> Result<HookAnswer, String> {
    #[cfg(target_os = "macos")]
    {
        // [the front nd7-exec, nd7 record, Claude Code, …, nd7 run, …]: this
        // is the writer ([`out_of_reach`]).
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
            return match crate::refusals::explain(
                &request.body,
                &record.policy,
                &log,
                outside_root(),
            ) {
                Ok(Some(text)) => Ok(HookAnswer::Explained(text)),
                Ok(None) => Ok(HookAnswer::Skipped),
                Err(e) => Err(e.to_string()),
            };
        }
        match log.hook(request, chain.get(2).map(|c| c.0)) {
            Ok(crate::run_log::HookOutcome::Recorded(_)) => Ok(HookAnswer::Recorded),
            Ok(crate::run_log::HookOutcome::Skipped) => Ok(HookAnswer::Skipped),
            // Each hook is a process of its own here, so the budget counts
            // one payload at a time: it is Linux's door that keeps a total.
            Ok(crate::run_log::HookOutcome::OverBudget(why)) => Err(why),
            Err(e) => Err(e.to_string()),
        }
    }
    #[cfg(not(target_os = "macos"))]
    {
        let _ = request;
        Err(NOT_THE_DOOR.to_string())
    }
}

/// The exec observer's side in `nd7 run` (ADR-0110): writes what ran into
/// the run's chain until [`Observing::finish`].
pub struct Observing {
    #[cfg(target_os = "linux")]
    recorder: std::sync::Mutex<Option<linux::observe::Recorder>>,
}

/// Why this run's execs are not observed, when they are not: said in the
/// banner, and in the chain (a `not_observed` entry, [`observe_execs`]).
pub fn not_observed_why() -> Option<&'static str> {
    #[cfg(target_os = "linux")]
    {
        linux::observe::not_observed_why()
    }
    #[cfg(not(target_os = "linux"))]
    {
        Some("this system has no way for an unprivileged program to observe execs")
    }
}

/// Starts writing the execs observed in this run into `log`, or writes
/// that none are.
pub fn observe_execs(log: std::sync::Arc<crate::run_log::RunLog>) -> Observing {
    #[cfg(target_os = "linux")]
    {
        Observing {
            recorder: std::sync::Mutex::new(linux::observe::record(log)),
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let why = not_observed_why().unwrap_or_default();
        let _ = log.effect(
            crate::effect::NOT_OBSERVED,
            &crate::effect::not_observed_body(None, why),
        );
        Observing {}
    }
}

impl Observing {
    /// Once every process of the run has ended: writes the rest.
    pub fn finish(&self) {
        #[cfg(target_os = "linux")]
        if let Some(r) = self.recorder.lock().ok().and_then(|mut r| r.take()) {
            r.finish();
        }
    }
}
