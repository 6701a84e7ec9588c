//! `nd7 run PROGRAM [ARGS]`: the program and everything it starts under the
//! sandbox floor, for the life of one session.
//!
//! In order: the binaries must be writable by nobody but the user (and
//! root), or a process inside could replace the exit; the kernel must be able
//! to enforce the floor in full; the session directory is made (stale ones of
//! dead `nd7 run`s removed first); the exit is opened; the program starts
//! confined — for Claude Code with the hook that routes Bash through
//! `nd7-exec` and its own sandbox off; `nd7 run` waits, passing on SIGTERM
//! and SIGHUP, then ends the session's remaining commands and removes the
//! session directory, whatever way the program ended.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::policy::{Policy, Roots};
use crate::session::{self, Record, Session, SessionError, Sessions};
use crate::{deferred, hook_prefix, sandbox, session_log, setup};

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
    Session(#[from] SessionError),
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
}

/// What `nd7 run` was asked to run.
pub struct Options {
    pub program: OsString,
    pub args: Vec<OsString>,
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
    let home = session::account_home()?;
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
    let policy = Policy {
        roots: Roots {
            project: resolved(&cwd, "resolve the project directory")?,
            temp: resolved(&std::env::temp_dir(), "resolve the temp directory")?,
            home: home.clone(),
            state: resolved(&state, "resolve nd7's state directory")?,
            exit: nd7_exec.clone(),
        },
        grants: Vec::new(),
    };
    // The floor's ruleset is built on a thread while this one holds the
    // files that run later outside the floor (read-only where the system
    // allows) and takes the watch's snapshot of them (in every case).
    let building = {
        let (policy, nd7_exec) = (policy.clone(), nd7_exec.clone());
        std::thread::spawn(move || sandbox::floor(&policy, &nd7_exec))
    };
    let plan = crate::policy::deferred::plan(&policy, &deferred::FsTree);
    let (held, not_held) = match sandbox::hold(&plan) {
        Ok(held) => (held, None),
        Err(why) => (sandbox::Held::default(), Some(why)),
    };
    let watch = std::sync::Arc::new(deferred::Watch::start(
        plan,
        held.locks(),
        &policy.roots.project,
    ));
    let floor = building
        .join()
        .map_err(|_| RunError::Sandbox("building the floor's rules failed".into()))?
        .map_err(RunError::Sandbox)?;

    let sessions = Sessions::under(&home);
    sessions.clean_stale();
    let pid = std::process::id();
    let mut program: Vec<String> = vec![options.program.to_string_lossy().into_owned()];
    program.extend(
        options
            .args
            .iter()
            .map(|a| a.to_string_lossy().into_owned()),
    );
    let record = Record {
        pid,
        started: sandbox::start_time(pid).unwrap_or(0),
        program,
        policy: policy.clone(),
    };
    let session = Removed(sessions.create(&record)?);
    let after: sandbox::AfterCommand = {
        let watch = watch.clone();
        std::sync::Arc::new(move |command: &str| {
            // TODO(record): each path is a change to a file that runs later,
            // first seen after `command`; write it into the session's log
            // through the exit's own entries when they exist. Until then the
            // watch keeps it for the warning at the end.
            let _changed = watch.after_command(command);
        })
    };
    let exit =
        sandbox::serve_exit_held(&session.0, &held, Some(after)).map_err(RunError::Sandbox)?;

    let mut command = Command::new(&options.program);
    let claude_json = setup::claude_json::state(&home);
    if is_claude(&options.program)
        && sandbox::CLAUDE_JSON_MUST_MOVE
        && claude_json == setup::claude_json::State::InHome
    {
        announce_warning(&format!(
            "{}/.claude.json is a file in your home directory, where the floor lets nothing be written, so Claude Code cannot save its state this session; `nd7 setup` moves it under ~/.claude with a link",
            home.display()
        ));
    }
    if is_claude(&options.program) {
        let (theirs, rest) = users_settings(&options.args)?;
        let settings = hook_prefix::run_settings(&nd7.to_string_lossy(), theirs)
            .ok_or_else(|| RunError::Settings("not a settings object".into()))?;
        command
            .arg("--settings")
            .arg(settings.to_string())
            .args(rest);
    } else {
        command.args(&options.args);
    }
    held.join(&mut command, &policy.roots.project)
        .map_err(RunError::Sandbox)?;
    floor.confine(&mut command).map_err(RunError::Sandbox)?;
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
    .map_err(|source| RunError::Io {
        path: "signals".into(),
        action: "handle",
        source,
    })?;
    announce(&format!(
        "nd7 run: session {pid} under nd7's policy: writes only to {} and {} (and Claude Code's own state); `nd7 allow DIR` lets commands write DIR",
        policy.roots.project.display(),
        policy.roots.temp.display(),
    ));
    if let Some(why) = &not_held {
        announce_warning(&format!(
            "files that run outside the sandbox later (git hooks and configuration, .envrc, editor and Claude Code settings) cannot be made read-only on this system ({why}); nd7 run watches them instead and reports every change when the session ends"
        ));
    }
    let mut child = command.spawn().map_err(|source| RunError::Start {
        program: options.program.to_string_lossy().into_owned(),
        source,
    })?;
    let agent = child.id();
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
    let status = child.wait().map_err(|source| RunError::Io {
        path: options.program.clone().into(),
        action: "wait for",
        source,
    })?;
    handle.close();
    let _ = forwarder.join();
    exit.kill_commands();
    drop(session);
    let (code, ended) = match (status.code(), status.signal()) {
        (Some(code), _) => (code, format!("the program exited with status {code}")),
        (None, Some(sig)) => (128 + sig, format!("the program was ended by signal {sig}")),
        (None, None) => (255, "the program ended in an unknown way".to_string()),
    };
    let findings = watch.finish();
    if findings.is_empty() {
        return Ok(code);
    }
    // TODO(record): the findings belong in the session's log as well.
    announce(deferred::report::render(&findings, &ended).trim_end());
    Ok(CHANGED_STATUS)
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

/// A session directory removed when this goes out of scope, however the
/// function returns.
struct Removed(Session);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = self.0.remove();
    }
}
