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
//!
//! This file is the façade (ADR-0128): the words both systems share, and
//! one `pub use` of the backend, `linux::backend` or `macos::backend`, which
//! give the same functions and types under the same names. Each backend
//! holds one system's code whole, so neither reads through the other's
//! `cfg` arms; a name one of them lacks fails the other's build (the macOS
//! one is type-checked from Linux, .ci/check-macos).

#[cfg(target_os = "linux")]
pub mod linux;
#[cfg(target_os = "macos")]
pub mod macos;

#[cfg(target_os = "linux")]
use linux::backend;
#[cfg(target_os = "macos")]
use macos::backend;

pub use backend::{
    Agent, ExitService, Floor, Held, Holding, Observing, SandboxError, available, device_mounts,
    egress_available, end_leftovers, enter_hold, floor, head_start, hold, hold_available, keep_run,
    keeper_ready, kernel_sandbox, listen_for_proxy, not_observed_why, observe_execs, out_of_reach,
    outside_root, own_terminal, protections, record_hook, run_command, run_in_place, run_mark,
    scope_run, send_hook, serve_exit_held, start_agent,
};

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::kernel::ancestors;
/// Kept here for `nd7 run`, which names them through `sandbox`; they are
/// the kernel's facts ([`crate::kernel`]).
pub use crate::kernel::{PinError, pin, start_time};
use crate::policy::Policy;
use crate::run_dir::{RunDir, RunDirs};
use crate::run_log::RunLog;

/// Whether the floor can let Claude Code save `~/.claude.json` only by
/// having that file live under `~/.claude`.
///
/// Claude Code saves it through `~/.claude.json.tmp.<pid>.<random>` created in
/// the home directory itself. Seatbelt can allow exactly those names with a
/// regex; Landlock allows only beneath directories that exist, so on Linux the
/// file moves into `~/.claude` with a link left in its place, which Claude
/// Code resolves before saving (measured with 2.1.197; see docs/setup.md).
pub const CLAUDE_JSON_MUST_MOVE: bool = cfg!(target_os = "linux");

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

/// How long a hook waits for `nd7-exec --record` (macOS) to append its
/// entry and answer, as a hook waits for `nd7 run`'s door on Linux: an
/// `nd7-exec` stopped or stuck would otherwise keep the hook, and Claude Code
/// with it, waiting for good. Below Claude Code's own hook timeout (60 s),
/// so the hook says why.
pub const HOOK_ANSWER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

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

/// Opens the run's exit and the hooks' door ([`serve_exit_held`]) with
/// nothing held and nothing called around each command.
pub fn serve_exit(run_dir: &RunDir, log: &Arc<RunLog>) -> Result<ExitService, String> {
    serve_exit_held(run_dir, log, &Held::default(), None, None)
}

/// How a command that went through the exit ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Exited(i32),
    Signaled(i32),
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
