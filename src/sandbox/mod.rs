//! The platform sandboxes: Seatbelt on macOS, Landlock on Linux. All
//! `#[cfg(target_os)]` for the sandbox lives under this module; what is above
//! it (`nd7 run`, `nd7-exec`, the session) sees the few functions here.
//!
//! Both backends keep the same promises: one floor for the agent and all it
//! starts, applied before the agent runs and never loosened; one exit,
//! `nd7-exec`, through which a Bash command runs under the session's current
//! rules (the floor plus its grants); and no command ever run unconfined when
//! the session or its rules cannot be found.

#[cfg(target_os = "linux")]
pub mod linux;
#[cfg(target_os = "macos")]
pub mod macos;
pub mod wire;

use std::ffi::OsString;
use std::path::Path;
use std::process::Command;

use crate::policy::Policy;
use crate::policy::deferred::Plan;
use crate::session::{Session, Sessions};

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

/// When process `pid` started, in the kernel's units; `None` when there is
/// no such process. With the pid it names one process for good.
pub fn start_time(pid: u32) -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        linux::proc::stat(pid).map(|s| s.started)
    }
    #[cfg(target_os = "macos")]
    {
        macos::start_time(pid)
    }
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    {
        let _ = pid;
        None
    }
}

/// The calling process's ancestors as the kernel reports them, nearest
/// first, each read only when asked for.
pub fn ancestors() -> Box<dyn Iterator<Item = u32>> {
    #[cfg(target_os = "linux")]
    {
        Box::new(linux::proc::ancestors(std::process::id()))
    }
    #[cfg(target_os = "macos")]
    {
        let chain = macos::parent_chain().unwrap_or_default();
        Box::new(chain.into_iter().map(|(pid, _)| pid))
    }
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    {
        Box::new(std::iter::empty())
    }
}

/// The file in a session's directory whose presence marks it as one
/// `nd7-exec` can use: the exit socket on Linux, the profile on macOS.
pub const SESSION_MARKER: &str = if cfg!(target_os = "macos") {
    crate::session::PROFILE
} else {
    crate::session::EXIT_SOCKET
};

/// The per-command profile written beside the record, on systems whose
/// `nd7-exec` applies one itself (macOS). Linux has none: `nd7 run` builds
/// the ruleset for each command from the record.
pub fn command_profile(policy: &Policy) -> Option<String> {
    if cfg!(target_os = "macos") {
        Some(crate::policy::seatbelt::command(policy))
    } else {
        None
    }
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
        let rules = crate::policy::landlock_rules(policy, &policy.floor_writes(), &linux::list_dir);
        linux::prepare(&rules)
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
            self.confinement.confine(command);
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

/// How the files that run later outside the floor (`policy::deferred`)
/// are held for one session. On Linux, the session's namespaces with those
/// files read-only, which the agent and every command through the exit
/// join; on macOS the profiles deny them, and there is nothing to hold.
#[derive(Clone, Default)]
pub struct Held {
    #[cfg(target_os = "linux")]
    namespaces: Option<std::sync::Arc<linux::ns::Namespaces>>,
}

/// Holds `plan`'s files for the session, or says why they cannot be held
/// here (on Linux, when user namespaces are refused); the caller then has
/// them watched instead.
pub fn hold(plan: &Plan) -> Result<Held, String> {
    #[cfg(target_os = "linux")]
    {
        linux::ns::Namespaces::build(&plan.guarded)
            .map(|ns| Held {
                namespaces: Some(std::sync::Arc::new(ns)),
            })
            .map_err(|e| e.to_string())
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = plan;
        Ok(Held::default())
    }
}

/// What holds the files that run later on this system, for `nd7 doctor`:
/// on Linux a trial namespace is built and dropped.
pub fn hold_available() -> Result<&'static str, String> {
    #[cfg(target_os = "linux")]
    {
        linux::ns::Namespaces::build(&[])
            .map(|_| "a mount namespace makes them read-only (user namespaces work here)")
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
    /// Whether the plan's locks are in force: false on Linux when the
    /// namespaces could not be built.
    pub fn locks(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            self.namespaces.is_some()
        }
        #[cfg(not(target_os = "linux"))]
        {
            true
        }
    }

    /// Arranges for `command`'s process to join the session's namespaces
    /// (and work in `cwd` inside them) before it is confined: call it before
    /// [`Floor::confine`].
    pub fn join(&self, command: &mut Command, cwd: &Path) -> Result<(), String> {
        #[cfg(target_os = "linux")]
        if let Some(ns) = &self.namespaces {
            return ns.join(command, cwd).map_err(|e| e.to_string());
        }
        let _ = (command, cwd);
        Ok(())
    }
}

/// Called after each command through the exit ends, with the command's text.
pub type AfterCommand = std::sync::Arc<dyn Fn(&str) + Send + Sync>;

/// The exit, open for the session's life.
pub struct ExitService {
    #[cfg(target_os = "linux")]
    serving: linux::exit::Serving,
}

/// Opens the session's exit: on Linux `nd7 run` itself starts each command,
/// so it listens on the session's socket; on macOS `nd7-exec` leaves the
/// floor through Seatbelt's one no-sandbox exec, and there is nothing to serve.
pub fn serve_exit(session: &Session) -> Result<ExitService, String> {
    serve_exit_held(session, &Held::default(), None)
}

/// [`serve_exit`], with every command joining `held`'s namespaces and
/// `after` called when each command ends (on Linux, where the exit is
/// served; on macOS `nd7-exec` runs the command itself).
pub fn serve_exit_held(
    session: &Session,
    held: &Held,
    after: Option<AfterCommand>,
) -> Result<ExitService, String> {
    #[cfg(target_os = "linux")]
    {
        linux::exit::Exit::open(session)
            .map(|exit| ExitService {
                serving: exit
                    .joining(held.namespaces.clone())
                    .after_each(after)
                    .serve(),
            })
            .map_err(|e| e.to_string())
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (session, held, after);
        Ok(ExitService {})
    }
}

impl ExitService {
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

/// What `nd7-exec` does with its one argument: finds the session from the
/// kernel's view of its ancestors and runs `command` under that session's
/// current rules. Never runs it any other way; an error means nothing ran.
pub fn exec_command(command: OsString) -> Result<Outcome, String> {
    let sessions = Sessions::for_user().map_err(|e| e.to_string())?;
    let mut seen = Vec::new();
    let session = sessions
        .find_by_ancestors(ancestors().inspect(|&pid| seen.push(pid)), SESSION_MARKER)
        .ok_or_else(|| {
            format!(
                "not inside an nd7 session: no ancestor of this process ({}) has a session under {}",
                seen.iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
                sessions.root().display()
            )
        })?;
    #[cfg(target_os = "linux")]
    {
        match linux::exit::run(&session.socket_path(), command) {
            Ok(linux::exit::Outcome::Exited(code)) => Ok(Outcome::Exited(code)),
            Ok(linux::exit::Outcome::Signaled(sig)) => Ok(Outcome::Signaled(sig)),
            Err(e) => Err(e.to_string()),
        }
    }
    #[cfg(target_os = "macos")]
    {
        // The profile is read fresh for every command: `nd7 allow` rewrote it
        // through a rename, so it is whole. On success this never returns.
        let path = session.dir.join(crate::session::PROFILE);
        let profile = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read the session's rules at {}: {e}", path.display()))?;
        let command = command
            .into_string()
            .map_err(|_| "the command is not valid UTF-8".to_string())?;
        Err(format!(
            "cannot run the command under the session's rules: {}",
            macos::exec_shell(&command, &profile)
        ))
    }
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    {
        let _ = (session, command);
        Err("nd7-exec has no sandbox for this operating system".to_string())
    }
}
