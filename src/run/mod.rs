//! `nd7 run PROGRAM [ARGS]`: the program and everything it starts under the
//! sandbox floor, for the life of one session.
//!
//! In order: the binaries must be writable by nobody but the user (and
//! root), or a process inside could replace the exit; the kernel must be able
//! to enforce the floor in full; the session directory is made (stale ones of
//! dead `nd7 run`s removed first); the grants it starts with are made
//! (`run_grants`); the exit is opened; the program starts confined — for
//! Claude Code with `nd7-exec` as its shell prefix (ADR-0040) and its own
//! sandbox off, for Codex with its shell calls routed to `nd7-exec` by a
//! hook and its own sandbox off (`run_codex`, ADR-0056, ADR-0057); `nd7 run` waits, passing on SIGTERM and SIGHUP, then ends
//! the session's remaining commands and removes the session directory,
//! whatever way the program ended. On Linux the session runs in a child of
//! `nd7 run`; `nd7 run` itself stays outside as its keeper, which ends every
//! process the session left behind ([`sandbox::keep_session`]).

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use std::sync::Arc;

use crate::policy::{Policy, Roots};
use crate::read::safe;
use crate::run_dir::{self, Record, RunDir, RunDirError, RunDirs};
use crate::run_entry::{self, Ended, RunFacts};
use crate::run_log::{RunLog, RunLogError};
use crate::{deferred, record, run_grants, sandbox, session_log, setup, shell_prefix};

/// The status `nd7 run` exits with when files that run outside the floor
/// changed during the session, whatever the program's own status (which the
/// warning names).
pub const CHANGED_STATUS: i32 = 3;

/// Why the program was not started.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{0}: {1}; a process inside the sandbox could replace it, so nd7 run will not start")]
    Binary(PathBuf, String),
    #[error("{0}: not found beside nd7; reinstall nd7 so that both binaries sit in one directory")]
    NoExec(PathBuf),
    #[error("cannot confine the program, so it was not started: {0}")]
    Sandbox(String),
    #[error("{0}")]
    RunDir(#[from] RunDirError),
    #[error("{path}: {action}: {source}")]
    Io {
        path: PathBuf,
        action: &'static str,
        source: io::Error,
    },
    #[error("your --settings for Claude Code: {0}")]
    Settings(String),
    #[error("cannot start {program}: {source}")]
    Start { program: String, source: io::Error },
    #[error(
        "cannot read nd7 run's own start time from the kernel; without it another nd7 run could take this session for a dead one and remove it, so nothing was started"
    )]
    NoStartTime,
    #[error("cannot keep the session's log, so nothing was started: {0}")]
    Log(#[from] RunLogError),
    #[error(
        "the project would be {project} ({named}), which holds your home directory: every command could write all of it and more; start nd7 run in the project's own directory"
    )]
    Project { project: PathBuf, named: String },
    #[error(
        "you are in {pwd}, a link to your home directory {home} ({why}): the whole home would be the project; if that is what you mean, start nd7 run in the home by its own name (cd ~), else in the project's own directory; nothing was started"
    )]
    ProjectHomeByLink {
        pwd: PathBuf,
        home: PathBuf,
        why: String,
    },
    #[error(
        "the temp directory {named} cannot be a write root: {why}; set TMPDIR to a directory of its own, by its real path; nothing was started"
    )]
    Temp { named: PathBuf, why: String },
    #[error(
        "$HOME is {env}, but your account's home (in the account database) is {account}: nd7 run keeps the floor around your account's home, so Claude Code would keep its state where nothing may be written and every command would fail; run it with HOME={account}, or as the account whose home {env} is (sudo -E and containers change HOME); nothing was started or created"
    )]
    Home { env: PathBuf, account: PathBuf },
    #[error(
        "another account could choose what this session may write or read: {0}; nothing was started"
    )]
    Modes(String),
    #[error("{0}; nothing was started")]
    SecretLinks(String),
    #[error(transparent)]
    Grants(#[from] run_grants::StartGrantError),
    #[error(transparent)]
    Codex(#[from] crate::run_codex::CodexRunError),
}

/// How the working directory was named: `$PWD` (the shell's name for it,
/// links and all) when it names it, else its real path.
fn project_named(cwd: &Path) -> String {
    match std::env::var_os("PWD").map(PathBuf::from) {
        Some(pwd) if pwd != cwd && std::fs::canonicalize(&pwd).ok().as_deref() == Some(cwd) => {
            format!("you are in {}, a link to it", pwd.display())
        }
        _ => format!("you are in {}", cwd.display()),
    }
}

/// Refuses a project that would give commands more than the user meant
/// (ADR-0068): `/` or a directory above the home, which hold the home; and
/// the home itself when the shell reached it through a link the account
/// could have placed (a project directory an agent swapped for a link to
/// `~` under a grant of its parent). The home entered by its own name (`cd
/// ~`) stays a project.
fn check_project(project: &Path, home: &Path, cwd: &Path) -> Result<(), RunError> {
    if home.starts_with(project) && project != home {
        return Err(RunError::Project {
            project: project.to_path_buf(),
            named: project_named(cwd),
        });
    }
    if project != home {
        return Ok(());
    }
    let Some(pwd) = std::env::var_os("PWD").map(PathBuf::from) else {
        return Ok(());
    };
    if pwd == project || std::fs::canonicalize(&pwd).ok().as_deref() != Some(project) {
        return Ok(());
    }
    match crate::kernel::real_path(&pwd) {
        Ok(_) => Ok(()),
        Err(e) => Err(RunError::ProjectHomeByLink {
            pwd,
            home: home.to_path_buf(),
            why: e.to_string(),
        }),
    }
}

/// The temp directory (`$TMPDIR`, else `/tmp`), a floor write root: found
/// without following a link the account could have placed (a `$TMPDIR` in
/// `/tmp` an earlier session replaced with a link to the home would make
/// the home writable), and never `/`, the home or above it.
fn temp_root(home: &Path) -> Result<PathBuf, RunError> {
    let named = std::env::temp_dir();
    let refused = |why: String| RunError::Temp {
        named: named.clone(),
        why,
    };
    let real = crate::kernel::real_path(&named).map_err(|e| refused(e.to_string()))?;
    if !real.exists {
        return Err(refused("it does not exist".into()));
    }
    if home.starts_with(&real.path) {
        return Err(refused(format!(
            "it is {}, which holds your home directory",
            real.path.display()
        )));
    }
    Ok(real.path)
}

/// Pins every floor write root to the directory its path leads to now,
/// following no link (ADR-0028); returns what the user should be told.
/// nd7 never follows a link to find a write root of its own: a link an
/// earlier command re-pointed (`~/.cache/claude -> /`) would otherwise open
/// whatever it points at to every later session. A root reached through a
/// link is left out, and said so; one that does not exist is left out
/// silently (nothing inside can make it). The project is the working
/// directory, which the kernel names by its real path; when the shell
/// reached it through a link, the banner says where it really is.
fn pin_roots(policy: &mut Policy, cwd: &Path) -> Vec<String> {
    let mut warnings = Vec::new();
    if let Some(pwd) = std::env::var_os("PWD").map(PathBuf::from)
        && pwd != cwd
        && std::fs::canonicalize(&pwd).ok().as_deref() == Some(cwd)
    {
        warnings.push(format!(
            "{} is a link: the project is {}, where it leads now",
            pwd.display(),
            cwd.display()
        ));
    }
    for root in policy.floor_writes() {
        match sandbox::pin(&root) {
            Ok(id) => policy.pin(&root, id),
            Err(sandbox::PinError::Missing) => {}
            Err(sandbox::PinError::Link) => warnings.push(format!(
                "{} is reached through a symbolic link, and nd7 follows no link to a write root (one re-pointed by an earlier command would open whatever it points at): nothing there is writable this session; make it a real directory (move what the link points at there, and link the other way if you need the old place)",
                root.display()
            )),
            Err(e @ sandbox::PinError::Io { .. }) => warnings.push(format!(
                "{e}: it cannot be checked, so it is not writable this session"
            )),
        }
    }
    warnings
}

/// What `nd7 run` was asked to run.
pub struct Options {
    pub program: OsString,
    pub args: Vec<OsString>,
    /// `--allow DIR`: directories commands may write this session.
    pub allow: Vec<PathBuf>,
    /// `--preset NAME`: toolchain caches commands may write this session.
    pub presets: Vec<String>,
}

/// Refuses a `$HOME` that is not the account's home: the floor is built
/// around the account's (nd7 never takes the home from the environment,
/// which `nd7-exec`'s caller chooses), while Claude Code keeps its state
/// under `$HOME`. Checked before anything is created, so a `sudo -E` never
/// makes `~/.nd7` or a log for the wrong account.
fn check_home(account: &Path) -> Result<(), RunError> {
    let Some(env) = std::env::var_os("HOME").filter(|h| !h.is_empty()) else {
        return Ok(());
    };
    let env = PathBuf::from(env);
    if std::fs::canonicalize(&env).ok().as_deref() == Some(account) {
        return Ok(());
    }
    Err(RunError::Home {
        env,
        account: account.to_path_buf(),
    })
}

/// Refuses to start when another account could choose the session's grants
/// or credential stores through a mode (`~/.nd7/grants` writable by
/// others); returns the warnings of the modes that only harm the account,
/// said with the banner ([`crate::modes`], ADR-0095). Before anything is
/// created.
fn check_modes(home: &Path) -> Result<Vec<String>, RunError> {
    let state = session_log::state_dir().ok();
    let uid = rustix::process::geteuid().as_raw();
    let (refused, warned): (Vec<_>, Vec<_>) = crate::modes::check(
        home,
        state.as_deref(),
        uid,
        crate::modes::private_group(uid),
    )
    .into_iter()
    .partition(|f| f.verdict == crate::modes::Verdict::Refuse);
    if refused.is_empty() {
        return Ok(warned.iter().map(|f| f.to_string()).collect());
    }
    let list: Vec<String> = refused.iter().map(|f| f.to_string()).collect();
    Err(RunError::Modes(list.join("; ")))
}

/// Whether `program` is Claude Code, which gets the hook and settings.
pub fn is_claude(program: &OsStr) -> bool {
    Path::new(program).file_name() == Some(OsStr::new("claude"))
}

fn resolved(path: &Path, action: &'static str) -> Result<PathBuf, RunError> {
    std::fs::canonicalize(path).map_err(|source| RunError::Io {
        path: path.to_path_buf(),
        action,
        source,
    })
}

/// The checks `nd7 run` makes of its own binaries; returns nd7-exec's path.
pub fn binary_checks(nd7: &Path) -> Result<PathBuf, RunError> {
    let exec = nd7.with_file_name("nd7-exec");
    if !exec.exists() {
        return Err(RunError::NoExec(exec));
    }
    match setup::binary_problems(nd7).into_iter().next() {
        Some((path, problem)) => Err(RunError::Binary(path, problem)),
        None => Ok(exec),
    }
}

/// Runs the session; `announce` gets the line to show on stderr once the
/// session exists. Returns the exit code to leave with: the program's, or
/// 128+N when signal N ended it.
pub fn run(options: &Options, announce: impl Fn(&str)) -> Result<i32, RunError> {
    let announce_warning = |line: &str| announce(&format!("nd7 run: warning: {line}"));
    let nd7 = resolved(
        &std::env::current_exe().map_err(|source| RunError::Io {
            path: "nd7".into(),
            action: "find this program's own path",
            source,
        })?,
        "resolve",
    )?;
    let nd7_exec = binary_checks(&nd7)?;
    // Before the agent's program can touch the terminal (ADR-0098).
    let terminal = Terminal::before();
    let home = run_dir::account_home()?;
    check_home(&home)?;
    let mode_warnings = check_modes(&home)?;
    let sessions = RunDirs::under(&home);
    // First, while the process is small and has one thread: from here on
    // this is the session, and the process the user started waits outside
    // as its keeper, setting itself up while the session builds its side.
    // Whatever fails from here on ends the session, and the keeper exits
    // with its status.
    // The keeper works out the credential stores' real places and the
    // device mounts meanwhile (ADR-0088).
    let head_start = || {
        HeadStart {
            secrets: run_dir::secrets(&home).ok(),
            devices: sandbox::device_mounts(),
        }
        .encode()
    };
    if let sandbox::Kept::Done(code) =
        sandbox::keep_session(&sessions, head_start).map_err(RunError::Sandbox)?
    {
        return Ok(code);
    }
    let cwd = std::env::current_dir().map_err(|source| RunError::Io {
        path: ".".into(),
        action: "find the working directory",
        source,
    })?;
    // The logs' directory must exist to be named in the floor.
    let state = session_log::state_dir().map_err(|e| RunError::Sandbox(e.to_string()))?;
    let logs = state.join("sessions");
    std::fs::create_dir_all(&logs).map_err(|source| RunError::Io {
        path: logs.clone(),
        action: "create",
        source,
    })?;
    let project = resolved(&cwd, "resolve the project directory")?;
    check_project(&project, &home, &cwd)?;
    let mut policy = Policy::new(Roots {
        project,
        temp: temp_root(&home)?,
        home: home.clone(),
        state: resolved(&state, "resolve nd7's state directory")?,
        exit: nd7_exec.clone(),
    });
    // macOS: the mark by which the session's processes are found at its end.
    policy.mark = sandbox::run_mark();
    let codex = crate::run_codex::is_codex(&options.program);
    // Codex's home, its hooks' trust and its arguments, before the floor
    // is built around them (ADR-0057).
    let codex_args = if codex {
        crate::run_codex::check_args(&options.args)?;
        policy.agent = crate::policy::AgentState::Codex;
        crate::run_codex::prepare(&home, &nd7)?
    } else {
        Vec::new()
    };
    policy.terminal = sandbox::own_terminal();
    let own_places = run_dir::nd7_real_places(&home, &policy.roots.state);
    // What the keeper worked out, or, without it (or for the error a bad
    // secrets list gives), the same worked out here.
    let head = sandbox::head_start().and_then(|bytes| HeadStart::decode(&bytes));
    policy.secrets = match head.as_ref().and_then(|h| h.secrets.clone()) {
        Some(secrets) => secrets,
        None => run_dir::secrets(&home)?,
    };
    policy.secrets.extend(own_places);
    // Before the devices join the list: a second name for a credential
    // store's file would be read through it.
    let strays = crate::secret_links::strays(&policy.unreadable());
    if !strays.is_empty() {
        let list: Vec<String> = strays.iter().map(|s| s.to_string()).collect();
        return Err(RunError::SecretLinks(list.join("; ")));
    }
    policy.devices = match head {
        Some(h) => h.devices,
        None => sandbox::device_mounts(),
    };
    // Made (where missing) before the floor is built: the floor's rules
    // cover what exists when it is built.
    let (planned, mut warnings) = run_grants::planned(
        &home,
        &policy.roots.project.clone(),
        &options.presets,
        &options.allow,
    )?;
    let (started_grants, grant_warnings) = run_grants::grant_at_start(&mut policy, &planned)?;
    warnings.extend(grant_warnings);
    warnings.extend(pin_roots(&mut policy, &cwd));
    // Named in the policy for Seatbelt, which holds files by name; on Linux
    // the plan below holds them (the same list).
    policy.named_programs =
        crate::policy::deferred::settings_programs(&policy, &deferred::FsTree::of(&policy))
            .into_iter()
            .filter(|p| !p.starts_with(&policy.roots.project))
            .collect();
    // While it has one thread, the session moves into the namespaces the
    // files that run later will be held in (ADR-0086). Then the floor's
    // ruleset is built on a thread while this one holds those files
    // (read-only where the system allows) and gives up the capability that
    // took, scopes the session and starts its log and record, and a third
    // takes the watch's snapshot of those files (in every case). The binds
    // are made before the session puts itself under Landlock (which refuses
    // mounts). Neither thread starts a process or sends a signal, and both
    // have ended before anything is started.
    let holding = sandbox::enter_hold();
    let building = {
        let (policy, nd7_exec) = (policy.clone(), nd7_exec.clone());
        std::thread::spawn(move || sandbox::floor(&policy, &nd7_exec))
    };
    let plan = crate::policy::deferred::plan(&policy, &deferred::FsTree::of(&policy));
    // The snapshot is taken as if the locks will hold (they nearly always
    // do), and again below if they do not.
    let snapshot = {
        let (plan, policy) = (plan.clone(), policy.clone());
        std::thread::spawn(move || deferred::Watch::start(plan, true, &policy))
    };
    let (held, not_held) = sandbox::hold(holding, &plan).map_err(RunError::Sandbox)?;
    // The working directory was taken before the binds, beneath the
    // project's pin: found again by path, on top of them, so that nothing
    // that inherits it reaches past the locks.
    std::env::set_current_dir(&policy.roots.project).map_err(|source| RunError::Io {
        path: policy.roots.project.clone(),
        action: "move to",
        source,
    })?;
    sandbox::scope_session().map_err(RunError::Sandbox)?;
    let claude = is_claude(&options.program);
    sessions.clean_stale();
    let pid = std::process::id();
    let mut program: Vec<String> = vec![options.program.to_string_lossy().into_owned()];
    program.extend(
        options
            .args
            .iter()
            .map(|a| a.to_string_lossy().into_owned()),
    );
    let started = sandbox::start_time(pid)
        .filter(|_| !crate::fault::injected("no-start-time"))
        .ok_or(RunError::NoStartTime)?;
    let (kernel_sandbox, landlock_abi) = sandbox::kernel_sandbox();
    let log = Arc::new(RunLog::start(
        &policy.logs_dir(),
        &RunFacts {
            pid,
            program: &program,
            rules: serde_json::to_value(&policy).unwrap_or_default(),
            nd7_version: env!("CARGO_PKG_VERSION"),
            sandbox: kernel_sandbox,
            landlock_abi,
            hooks: claude || codex,
            agent: if claude {
                Some(run_entry::AGENT_CLAUDE)
            } else if codex {
                Some(run_entry::AGENT_CODEX)
            } else {
                None
            },
            grants: run_grants::entry(&started_grants),
        },
    )?);
    // From here on the chain has its start; every way out writes its end.
    let end_early = |e: RunError| {
        let _ = log.end(&Ended::NotStarted(e.to_string()));
        e
    };
    let record = Record {
        pid,
        started,
        started_at: Some(crate::run_log::now_ns() / 1_000_000_000),
        program,
        policy: policy.clone(),
        log: Some(log.reference()),
    };
    let session = Removed(
        sessions
            .create(&record, sandbox::files_beside_record)
            .map_err(|e| end_early(e.into()))?,
    );
    let floor = building.join();
    let snapshot = snapshot.join();
    let floor = floor
        .map_err(|_| RunError::Sandbox("building the floor's rules failed".into()))
        .and_then(|f| f.map_err(RunError::Sandbox))
        .map_err(end_early)?;
    let watch = Arc::new(match snapshot {
        Ok(watch) if held.locks() => watch,
        _ => deferred::Watch::start(plan, held.locks(), &policy),
    });
    // Nothing is started under the floor before the keeper has said what it
    // can do: the seccomp filter depends on it.
    sandbox::keeper_ready().map_err(|e| end_early(RunError::Sandbox(e)))?;
    // On macOS confining a child is only sound while this process has one
    // thread, which it has here (the exit's threads start below).
    let recorded = if claude {
        claude_events(&options.program, &floor, &held, &policy.roots.project)
    } else {
        Vec::new()
    };
    let after: sandbox::AfterCommand = {
        let (watch, log) = (watch.clone(), log.clone());
        Arc::new(move |command: &str| {
            // Each path is a change to a file that runs later, first seen
            // after `command`; the watch also keeps it for the warning at
            // the end.
            // The warning names the model's command, read back from
            // Claude Code's Bash tool line when it is one (ADR-0040).
            let call = run_entry::bash_command(command.as_bytes());
            let paths = watch.after_command(call.as_deref().unwrap_or(command));
            if !paths.is_empty() {
                let mut body = serde_json::json!({ "command": command, "paths": paths });
                if let Some(call) = call {
                    body["bash_command"] = call.into();
                }
                let _ = log.note(run_entry::DEFERRED_CHANGED, None, None, &body);
            }
        })
    };
    let before: sandbox::BeforeCommand = {
        let watch = watch.clone();
        Arc::new(move |grants: &[PathBuf]| {
            watch.before_command(grants);
        })
    };
    let mut exit = sandbox::serve_exit_held(&session.0, &log, &held, Some(before), Some(after))
        .map_err(|e| end_early(RunError::Sandbox(e)))?;

    let mut command = Command::new(&options.program);
    let claude_json = setup::claude_json::state(&home);
    let claude_json_warning = match claude_json {
        _ if !claude || !sandbox::CLAUDE_JSON_MUST_MOVE || setup::claude_json::elsewhere() => None,
        setup::claude_json::State::InHome => Some(format!(
            "{}/.claude.json is a file in your home directory, where the floor lets nothing be written, so Claude Code cannot save its state this session; `nd7 setup` moves it under ~/.claude with a link",
            home.display()
        )),
        setup::claude_json::State::Absent => Some(format!(
            "{}/.claude.json does not exist yet, and Claude Code would create it in your home directory, where the floor lets nothing be written, so it cannot save its state this session; `nd7 setup` leaves a link for it under ~/.claude",
            home.display()
        )),
        _ => None,
    };
    // nd7-exec takes the place of a prefix of the user's own.
    let prefix_warning = std::env::var_os(shell_prefix::PREFIX_VARIABLE)
        .filter(|p| claude && !p.is_empty() && std::path::Path::new(p) != nd7_exec)
        .map(|p| {
            format!(
                "your {} ({}) is replaced by nd7-exec for this session: Bash commands leave the sandbox through it",
                shell_prefix::PREFIX_VARIABLE,
                p.to_string_lossy()
            )
        });
    if claude {
        let (theirs, rest) = users_settings(&options.args).map_err(end_early)?;
        let exec = nd7_exec.to_string_lossy();
        let settings = shell_prefix::run_settings(&nd7.to_string_lossy(), &exec, theirs, &recorded)
            .ok_or_else(|| end_early(RunError::Settings("not a settings object".into())))?;
        command
            .arg("--settings")
            .arg(settings.to_string())
            .args(rest)
            .env(shell_prefix::PREFIX_VARIABLE, &nd7_exec);
    } else if codex {
        command.args(&codex_args).args(&options.args);
    } else {
        command.args(&options.args);
    }
    command.env(record::RUN_VARIABLE, &session.0.dir);
    // Registered before the program starts, so that no SIGTERM can end nd7
    // run without the session being cleaned up. SIGINT and SIGQUIT come from
    // the terminal, which sends them to the program too: here they are
    // only kept from ending nd7 run first.
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGQUIT,
    ])
    .map_err(|source| {
        end_early(RunError::Io {
            path: "signals".into(),
            action: "handle",
            source,
        })
    })?;
    announce(&format!(
        "nd7 run: run {pid} under nd7's policy: writes only to {} and {} (and {}'s own state); `nd7 allow DIR` lets commands write DIR; log {}",
        policy.roots.project.display(),
        policy.roots.temp.display(),
        if codex { "Codex" } else { "Claude Code" },
        log.id(),
    ));
    if codex {
        announce(
            "nd7 run: Codex's own sandbox is off (it cannot start inside nd7's floor); its shell calls leave the floor through nd7's exit, under this session's grants",
        );
    }
    if let Some(line) = run_grants::banner(&started_grants, &home) {
        announce(&line);
    }
    if let Some(line) = sandbox::unenforced_line() {
        announce(&line);
    }
    for warning in warnings
        .iter()
        .chain(&claude_json_warning)
        .chain(&prefix_warning)
        .chain(&mode_warnings)
    {
        announce_warning(warning);
    }
    if let Some(why) = &not_held {
        announce_warning(&format!(
            "files that run outside the sandbox later (git hooks and configuration, .envrc, editor and Claude Code settings) cannot be made read-only on this system ({why}); nd7 run watches them instead and reports every change when the session ends"
        ));
    }
    // Inside the namespaces, the working directory is found again and the
    // capabilities cleared before the floor's own steps.
    let mut child =
        sandbox::start_agent(command, &held, &floor, &policy.roots.project).map_err(|source| {
            end_early(RunError::Start {
                program: options.program.to_string_lossy().into_owned(),
                source,
            })
        })?;
    let agent = child.id();
    exit.answer();
    watch.program_started();
    let handle = signals.handle();
    let forwarder = std::thread::spawn(move || {
        for sig in signals.forever() {
            let forwarded = [signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP];
            let target = rustix::process::Pid::from_raw(agent as i32);
            let sig = rustix::process::Signal::from_named_raw(sig)
                .filter(|s| forwarded.contains(&s.as_raw()));
            if let (Some(pid), Some(sig)) = (target, sig) {
                let _ = rustix::process::kill_process(pid, sig);
            }
        }
    });
    let status = child.wait().map_err(|source| {
        end_early(RunError::Io {
            path: options.program.clone().into(),
            action: "wait for",
            source,
        })
    })?;
    handle.close();
    let _ = forwarder.join();
    exit.kill_commands();
    // What the session left running ends now, and the log says so before
    // its last entry (the keeper ends anything later once this process is
    // gone, and says so on stderr).
    let left = sandbox::end_leftovers(&session.0, &policy);
    // The keeper refuses a command's connects to the hooks' door itself
    // (ADR-0051), and keeps them until now: each of the first is a
    // `refused` entry, the rest are counted.
    if let Some(left) = &left {
        for (pid, name) in &left.door_refused_first {
            log.refused(
                "record",
                Some(*pid),
                None,
                &format!(
                    "process {pid} ({name}) runs inside a command through the exit, and only the sandbox's own processes may reach the hooks' door; nd7 run's keeper refused its connect (written at the run's end)"
                ),
            );
        }
        log.refused_uncounted(
            left.door_refused
                .saturating_sub(left.door_refused_first.len()) as u64,
        );
    }
    // The agent's program has had the terminal until now: whatever it left
    // the terminal in must not hide or garble nd7's own last lines.
    terminal.give_back();
    reset_terminal();
    if let Some(left) = left.filter(|l| l.count > 0) {
        let _ = log.note(
            run_entry::PROCESSES_ENDED,
            None,
            None,
            &run_entry::processes_ended_body(left.count, &left.processes),
        );
        let named: Vec<String> = left
            .processes
            .iter()
            .map(|(pid, name)| format!("{pid} ({})", safe::term(name, safe::Lines::One)))
            .collect();
        announce(&safe::fit(
            &format!(
                "nd7 run: ended {} process{} the session left running: {}{}",
                left.count,
                if left.count == 1 { "" } else { "es" },
                named.join(", "),
                if left.count > named.len() {
                    ", …"
                } else {
                    ""
                }
            ),
            terminal.width(),
        ));
    }
    let ended = match (status.code(), status.signal()) {
        (Some(code), _) => Ended::Exited(code),
        (None, Some(sig)) => Ended::Signaled(sig),
        (None, None) => Ended::Exited(255),
    };
    // Every change to a file that runs later goes into the log before its
    // last entry, and is shown once the session is gone.
    let findings = watch.finish();
    if !findings.is_empty() {
        let _ = log.note(
            run_entry::DEFERRED_CHANGED,
            None,
            None,
            &deferred::report::log_body(&findings),
        );
    }
    match log.end(&ended) {
        Ok(tally) if claude || codex => {
            let agent = if codex { "Codex" } else { "Claude Code" };
            if !tally.unmatched_execs.is_empty() {
                announce_warning(&format!(
                    "{} of {} Bash commands ran through the exit without a matching hook entry ({agent}'s hooks did not announce them); nd7's own entries in log {} show each one",
                    tally.unmatched_execs.len(),
                    tally.execs,
                    log.id()
                ));
            }
            if !tally.execs_without_result.is_empty() {
                announce_warning(&format!(
                    "{} of {} Bash commands ran through the exit for a Bash call {agent} reported no result for (denied, or never run by it); nd7 verify {} names each one",
                    tally.execs_without_result.len(),
                    tally.execs,
                    log.id()
                ));
            }
        }
        Ok(_) => {}
        Err(e) => announce_warning(&format!("cannot write the end of log {}: {e}", log.id())),
    }
    let over = log.hooks_over_budget();
    if over > 0 {
        announce_warning(&format!(
            "{over} hook entr{} not recorded: this run's hooks sent more through the door than one run takes ({} bytes); the exit's own entries in log {} still show every command",
            if over == 1 { "y was" } else { "ies were" },
            log.door_budget(),
            log.id()
        ));
    }
    for line in crate::refusals::summary(&log.floor_refusals(), &home, log.id()) {
        announce(&safe::fit(&format!("nd7 run: {line}"), terminal.width()));
    }
    drop(session);
    let (code, how) = match ended {
        Ended::Exited(code) => (code, format!("the program exited with status {code}")),
        Ended::Signaled(sig) => (128 + sig, format!("the program was ended by signal {sig}")),
        Ended::CallerGone | Ended::NotStarted(_) => {
            (255, "the program ended in an unknown way".to_string())
        }
    };
    if findings.is_empty() {
        terminal.give_back();
        return Ok(code);
    }
    // The changes, then nd7's own closing lines after a reset (ADR-0090):
    // nothing in a file's content can clear or cut short what follows it.
    let warning = deferred::report::render(&findings, &how, terminal.width());
    announce(warning.changes.trim_end());
    reset_terminal();
    announce(&warning.close);
    // Again, last: answers that came while nd7 wrote its lines.
    terminal.give_back();
    Ok(CHANGED_STATUS)
}

/// Writes [`safe::RESET`] to stderr when it is a terminal, so that nothing
/// the agent's program left it in hides what nd7 prints next (ADR-0090).
fn reset_terminal() {
    let err = io::stderr();
    if rustix::termios::isatty(&err) {
        let _ = io::Write::write_all(&mut err.lock(), safe::RESET.as_bytes());
    }
}

/// The terminal as the user had it before the agent's program had it
/// (ADR-0098). That program may change the terminal's line settings (`stty
/// -echo -opost`), leave the terminal's answers to its questions (DA, DSR,
/// a title report) in the terminal's input, where the user's shell would
/// read them as typed, and set the size the terminal says it has (`stty cols
/// 1000`), so that [`safe::fit`] would cut nothing and a line of its text
/// would wrap to the start of a row and pass for one of nd7's own.
struct Terminal {
    /// The line settings, when stdin or stderr is a terminal.
    settings: Option<rustix::termios::Termios>,
    /// The width stderr's terminal said it had.
    width: Option<usize>,
}

impl Terminal {
    fn before() -> Terminal {
        Terminal {
            settings: rustix::termios::tcgetattr(io::stderr())
                .or_else(|_| rustix::termios::tcgetattr(io::stdin()))
                .ok(),
            width: terminal_width(),
        }
    }

    /// Puts the line settings back and throws away what waits in the
    /// terminal's input (`TCSAFLUSH`): the answers the terminal gave the
    /// program's questions, and anything typed meanwhile. An answer the
    /// terminal gives later still reaches the shell (docs/sandbox.md).
    fn give_back(&self) {
        let Some(settings) = &self.settings else {
            return;
        };
        let flush = rustix::termios::OptionalActions::Flush;
        if rustix::termios::tcsetattr(io::stderr(), flush, settings).is_err() {
            let _ = rustix::termios::tcsetattr(io::stdin(), flush, settings);
        }
    }

    /// The width to cut lines to: the smaller of the widths the terminal
    /// said before and after the program, so a size the program set can
    /// only make the lines shorter.
    fn width(&self) -> Option<usize> {
        let now = terminal_width()?;
        Some(self.width.map_or(now, |before| before.min(now)))
    }
}

/// The width of the terminal stderr is, in columns; `None` when it is not
/// one (nothing wraps there). A terminal that does not say is taken as 80.
fn terminal_width() -> Option<usize> {
    let err = io::stderr();
    if !rustix::termios::isatty(&err) {
        return None;
    }
    let cols = rustix::termios::tcgetwinsize(&err).map_or(0, |w| w.ws_col);
    Some(if cols == 0 { 80 } else { usize::from(cols) })
}

/// The events to register `nd7 record` for with this Claude Code: those its
/// version knows (an unknown event opens a warning at every interactive
/// start, ADR-0015). The version is asked under the floor, like everything
/// the program runs; if it cannot be read, the events every supported
/// version knows.
fn claude_events(
    program: &OsStr,
    floor: &sandbox::Floor,
    held: &sandbox::Held,
    project: &Path,
) -> Vec<&'static str> {
    let mut probe = Command::new(program);
    probe
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let version = held
        .prepare(&mut probe, project)
        .and_then(|()| floor.confine(&mut probe))
        .ok()
        .and_then(|()| probe.spawn().ok())
        .and_then(|mut child| {
            // A program that does not answer within seconds is not asked again.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while child.try_wait().ok()?.is_none() {
                if std::time::Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    return None;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            child.wait_with_output().ok()
        })
        .filter(|out| out.status.success())
        .and_then(|out| setup::parse_claude_version(&String::from_utf8_lossy(&out.stdout)));
    setup::merge::recorded_events(Some(version.unwrap_or(setup::MIN_CLAUDE))).collect()
}

/// Takes the user's own `--settings` (a file or a JSON text) out of Claude
/// Code's arguments, to be merged with nd7's: Claude Code reads only one.
fn users_settings(
    args: &[OsString],
) -> Result<(Option<serde_json::Value>, Vec<OsString>), RunError> {
    let mut theirs = None;
    let mut rest = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let text = arg.to_string_lossy();
        let value = if text == "--settings" {
            match args.next() {
                Some(v) => v.to_string_lossy().into_owned(),
                None => return Err(RunError::Settings("--settings needs a value".into())),
            }
        } else if let Some(v) = text.strip_prefix("--settings=") {
            v.to_string()
        } else if text == "--" {
            rest.push(arg.clone());
            rest.extend(args.by_ref().cloned());
            break;
        } else {
            rest.push(arg.clone());
            continue;
        };
        let json = if value.trim_start().starts_with('{') {
            value
        } else {
            std::fs::read_to_string(&value)
                .map_err(|e| RunError::Settings(format!("{value}: {e}")))?
        };
        theirs = Some(
            serde_json::from_str(&json)
                .map_err(|e| RunError::Settings(format!("not valid JSON: {e}")))?,
        );
    }
    Ok((theirs, rest))
}

/// What the keeper works out for the session while the session sets up
/// its own side: the credential stores with their real places
/// (`run_dir::secrets`; `None` when the list cannot be read, which the
/// session then reads itself to say why) and the device mounts. Sent over
/// the keeper's channel as bytes: paths need not be UTF-8.
#[derive(Debug, PartialEq)]
struct HeadStart {
    secrets: Option<Vec<PathBuf>>,
    devices: Vec<PathBuf>,
}

impl HeadStart {
    fn encode(&self) -> Vec<u8> {
        fn put(out: &mut Vec<u8>, paths: &[PathBuf]) {
            out.extend((paths.len() as u32).to_le_bytes());
            for path in paths {
                let bytes = path.as_os_str().as_bytes();
                out.extend((bytes.len() as u32).to_le_bytes());
                out.extend(bytes);
            }
        }
        let mut out = vec![u8::from(self.secrets.is_some())];
        put(&mut out, self.secrets.as_deref().unwrap_or_default());
        put(&mut out, &self.devices);
        out
    }

    /// The head start in `bytes`, or `None` when they are not one whole.
    fn decode(bytes: &[u8]) -> Option<HeadStart> {
        fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
            let (head, rest) = bytes.split_at_checked(n)?;
            *bytes = rest;
            Some(head)
        }
        fn number(bytes: &mut &[u8]) -> Option<usize> {
            let raw: [u8; 4] = take(bytes, 4)?.try_into().ok()?;
            usize::try_from(u32::from_le_bytes(raw)).ok()
        }
        fn paths(bytes: &mut &[u8]) -> Option<Vec<PathBuf>> {
            let count = number(bytes)?;
            let mut out = Vec::with_capacity(count.min(bytes.len()));
            for _ in 0..count {
                let len = number(bytes)?;
                out.push(PathBuf::from(std::ffi::OsStr::from_bytes(take(
                    bytes, len,
                )?)));
            }
            Some(out)
        }
        let mut bytes = bytes;
        let has_secrets = *take(&mut bytes, 1)?.first()? == 1;
        let secrets = paths(&mut bytes)?;
        let devices = paths(&mut bytes)?;
        bytes.is_empty().then_some(HeadStart {
            secrets: has_secrets.then_some(secrets),
            devices,
        })
    }
}

/// A session directory removed when this goes out of scope, however the
/// function returns.
struct Removed(RunDir);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = self.0.remove();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_start_reads_back_whole_with_paths_that_are_not_utf8() {
        let odd = PathBuf::from(std::ffi::OsStr::from_bytes(b"/home/a/\xff\xfe"));
        for secrets in [
            Some(vec![PathBuf::from("/home/a/.ssh"), odd.clone()]),
            Some(Vec::new()),
            None,
        ] {
            let start = HeadStart {
                secrets,
                devices: vec![odd.clone(), PathBuf::from("/srv/chroot/dev")],
            };
            assert_eq!(HeadStart::decode(&start.encode()), Some(start));
        }
    }

    /// A head start cut short or with bytes after it is none at all: the
    /// session then works everything out itself.
    #[test]
    fn a_cut_or_padded_head_start_is_refused() {
        let start = HeadStart {
            secrets: Some(vec![PathBuf::from("/home/a/.aws")]),
            devices: vec![PathBuf::from("/mnt/dev")],
        };
        let bytes = start.encode();
        for cut in 0..bytes.len() {
            assert_eq!(HeadStart::decode(&bytes[..cut]), None, "cut at {cut}");
        }
        let mut padded = bytes.clone();
        padded.push(0);
        assert_eq!(HeadStart::decode(&padded), None);
        // A count far beyond what follows is refused, not allocated.
        let mut huge = vec![1u8];
        huge.extend(u32::MAX.to_le_bytes());
        assert_eq!(HeadStart::decode(&huge), None);
    }
}
