//! The `nd7` command line. Parses arguments, calls the library, and decides
//! the exit status, in this file and nowhere else.
//!
//! Exit status: 0 success; 1 a log failed verification; 2 bad usage or a log
//! that could not be read. `nd7 record` always exits 0. `nd7 run` exits with
//! the program's status, or 3 when files that run later changed.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use nd7_core::chain::HeadState;
use nd7_core::cli::{Cli, Command};
use nd7_core::hook::Invocation;
use nd7_core::record;
use nd7_core::session::{Change, Changed, Sessions};
use nd7_core::session_log::{self, SessionLog, Verified, VerifyError};
use nd7_core::{run, setup};

#[path = "nd7/vault_cmds.rs"]
mod vault_cmds;

fn main() -> ExitCode {
    // Take the time before anything else, so `ts` marks when the hook fired.
    let early = Invocation::now();
    // Release builds only, and outside clap, so that the command line and its
    // committed completions are the same for every build.
    #[cfg(feature = "self-update")]
    if std::env::args_os().nth(1).as_deref() == Some(std::ffi::OsStr::new("self-update")) {
        return run_self_update(std::env::args().skip(2).collect());
    }
    let cli = Cli::parse();
    match cli.command {
        Command::Record => run_record(early),
        Command::Verify {
            target,
            all,
            threads,
        } => {
            let threads = threads.unwrap_or_else(default_threads).max(1);
            match (target, all) {
                (_, true) => verify_all(threads),
                (Some(target), false) => verify_one(&target, threads),
                (None, false) => ExitCode::from(2),
            }
        }
        Command::Setup {
            settings,
            dry_run,
            uninstall,
        } => run_setup(&setup::Options {
            settings,
            dry_run,
            uninstall,
        }),
        Command::Run { command } => run_run(command),
        Command::Allow { args } => run_grant(Change::Allow, &args),
        Command::Deny { args } => run_grant(Change::Deny, &args),
        Command::HookPrefix => run_hook_prefix(),
        Command::Doctor { settings } => run_doctor(settings.as_deref()),
        Command::Enroll {
            url,
            token,
            fingerprint,
        } => vault_cmds::enroll(&url, &token, &fingerprint),
        Command::Ship { every } => vault_cmds::ship(every.as_deref()),
        Command::Admin(admin) => vault_cmds::admin(admin),
        Command::Completions { shell } => {
            let _ = std::io::stdout().write_all(&shell.completions());
            ExitCode::SUCCESS
        }
    }
}

/// `nd7 run`: exits with the program's status, 2 when it never started, or 3
/// when files that run later outside the sandbox changed during the session
/// (`run::CHANGED_STATUS`; the warning names the program's own status).
fn run_run(mut command: Vec<std::ffi::OsString>) -> ExitCode {
    let program = command.remove(0);
    let options = run::Options {
        program,
        args: command,
    };
    match run::run(&options, |line| eprintln!("{line}")) {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            eprintln!("nd7 run: {e}");
            ExitCode::from(2)
        }
    }
}

/// `nd7 allow` and `nd7 deny`: one line on stdout and 0 when the session
/// ends up as asked; the reason and the usage line on stderr and 2 otherwise.
fn run_grant(change: Change, args: &[std::ffi::OsString]) -> ExitCode {
    let verb = match change {
        Change::Allow => "allow",
        Change::Deny => "deny",
    };
    let fail = |why: &dyn std::fmt::Display| {
        eprintln!("nd7 {verb}: {why}");
        eprintln!("usage: nd7 {verb} [--session <pid>] <path>");
        ExitCode::from(2)
    };
    let args = match nd7_core::cli::parse_grant_args(args) {
        Ok(args) => args,
        Err(why) => return fail(&why),
    };
    let session = match Sessions::for_user().and_then(|s| s.pick(args.session)) {
        Ok(session) => session,
        Err(e) => return fail(&e),
    };
    let pid = session.pid;
    match session.change_grant(change, &args.path) {
        Ok(Changed::Allowed(path)) => println!(
            "session {pid}: writes under {} allowed from the next command",
            path.display()
        ),
        Ok(Changed::AlreadyAllowed(path)) => {
            println!("session {pid}: {} was already allowed", path.display())
        }
        Ok(Changed::Denied(path)) => println!(
            "session {pid}: writes under {} denied from the next command",
            path.display()
        ),
        Ok(Changed::NotAGrant(path)) => {
            println!("session {pid}: {} was not a grant", path.display())
        }
        Err(e) => return fail(&e),
    }
    ExitCode::SUCCESS
}

/// `nd7 self-update [--from URL]`: 0 when both binaries were replaced, 2
/// otherwise.
#[cfg(feature = "self-update")]
fn run_self_update(args: Vec<String>) -> ExitCode {
    use nd7_core::self_update::{self, UpdateError};
    let from = match args.as_slice() {
        [] => self_update::DEFAULT_SOURCE.to_string(),
        [flag, url] if flag == "--from" => url.clone(),
        _ => {
            eprintln!("usage: nd7 self-update [--from URL]");
            return ExitCode::from(2);
        }
    };
    let from = from.as_str();
    let result = (|| {
        let exe = std::env::current_exe()
            .and_then(std::fs::canonicalize)
            .map_err(|source| UpdateError::Io {
                path: "nd7".into(),
                action: "find this program's own path",
                source,
            })?;
        self_update::refuse_managed(&exe)?;
        let key = self_update::RELEASE_KEY.ok_or(UpdateError::NoKey)?;
        let key = nd7_core::vault::unhex::<32>(key).ok_or(UpdateError::BadKey)?;
        let dir = exe.parent().unwrap_or(std::path::Path::new("/"));
        self_update::update(dir, from, &key)
    })();
    match result {
        Ok(version) => {
            println!("nd7 self-update: now {version}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("nd7 self-update: {e}");
            ExitCode::from(2)
        }
    }
}

/// `nd7 hook-prefix`: like record, it exits 0 whatever happens; a failure
/// means no reply, so the command runs under the floor as it is.
fn run_hook_prefix() -> ExitCode {
    let input = match record::read_payload(std::io::stdin().lock()) {
        Ok(input) => input,
        Err(e) => {
            eprintln!("nd7 hook-prefix: {e}; command not rewritten");
            return ExitCode::SUCCESS;
        }
    };
    let exec = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .map(|exe| exe.with_file_name("nd7-exec"));
    let exec = match exec {
        Ok(exec) => exec,
        Err(e) => {
            eprintln!(
                "nd7 hook-prefix: cannot find this program's own path: {e}; command not rewritten"
            );
            return ExitCode::SUCCESS;
        }
    };
    if let Some(reply) = nd7_core::hook_prefix::reply(&input, &exec.to_string_lossy()) {
        println!("{reply}");
    }
    ExitCode::SUCCESS
}

fn run_doctor(settings: Option<&std::path::Path>) -> ExitCode {
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("nd7"));
    let checks = setup::doctor(&exe, settings);
    for check in &checks {
        let mark = if check.ok { "ok  " } else { "FAIL" };
        println!("{mark} {:<7} {}", check.name, check.detail);
        if let Some(fix) = &check.fix {
            println!("             fix: {fix}");
        }
    }
    if checks.iter().all(|c| c.ok) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn run_setup(options: &setup::Options) -> ExitCode {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            eprintln!("nd7 setup: cannot find this program's own path: {e}");
            return ExitCode::from(2);
        }
    };
    match setup::run(options, &exe) {
        Ok(report) => {
            for line in &report.done {
                println!("{line}");
            }
            for warning in &report.warnings {
                eprintln!("nd7 setup: warning: {warning}");
            }
            ExitCode::SUCCESS
        }
        Err(e @ setup::SetupError::Settings { .. }) => {
            eprintln!("nd7 setup: {e}");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("nd7 setup: {e}");
            ExitCode::from(2)
        }
    }
}

fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(2))
}

/// `nd7 record`: exit 0 whatever happens, one line on stderr if it failed.
fn run_record(invocation: Invocation) -> ExitCode {
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let at = info.location().map(|l| l.to_string()).unwrap_or_default();
        let _ = writeln!(
            std::io::stderr(),
            "nd7 record: internal error ({msg} at {at}); nothing recorded"
        );
    }));
    let outcome = std::panic::catch_unwind(|| {
        let input = record::read_payload(std::io::stdin().lock())?;
        let state = session_log::state_dir()?;
        record::record(&invocation, &input, &session_log::sessions_dir(&state))
    });
    match outcome {
        Ok(Ok(recorded)) => {
            if let Some(bytes) = recorded.omitted {
                let _ = writeln!(
                    std::io::stderr(),
                    "nd7 record: payload of {bytes} bytes is over the {} byte limit; recorded its size and BLAKE3 only (session {}, entry {})",
                    record::MAX_STORED_PAYLOAD,
                    recorded.session_id,
                    recorded.appended.seq
                );
            }
        }
        Ok(Err(e)) => {
            let _ = writeln!(std::io::stderr(), "nd7 record: {e}; nothing recorded");
        }
        Err(_) => {} // the panic hook has said it
    }
    ExitCode::SUCCESS
}

const CAVEAT: &str = "\
note: the chain checks itself; it is not third-party evidence. Anyone who can write the session's directory can rewrite the whole chain, head included.
note: entries record intent, what the agent said it would do and reported back, not effect, what actually ran.";

fn verify_one(target: &str, threads: usize) -> ExitCode {
    let log = match resolve_target(target) {
        Ok(log) => log,
        Err(e) => {
            eprintln!("nd7 verify: {e}");
            return ExitCode::from(2);
        }
    };
    let code = report(&log, log.verify(threads), None);
    if code == ExitCode::SUCCESS {
        println!("{CAVEAT}");
    }
    code
}

/// A target with a path separator, or one that exists as a path while no
/// session has that id, is a path; anything else is a session id.
fn resolve_target(target: &str) -> Result<SessionLog, session_log::Error> {
    let as_path = PathBuf::from(target);
    if target.contains('/') {
        return SessionLog::at_path(&as_path);
    }
    let sessions = session_log::sessions_dir(&session_log::state_dir()?);
    let by_id = SessionLog::new(&sessions, target);
    match by_id {
        Ok(log) if log.dir().exists() || !as_path.exists() => Ok(log),
        _ if as_path.exists() => SessionLog::at_path(&as_path),
        other => other,
    }
}

fn report(
    log: &SessionLog,
    result: Result<Verified, VerifyError>,
    label: Option<&str>,
) -> ExitCode {
    let prefix = label.map(|l| format!("{l}: ")).unwrap_or_default();
    match result {
        Ok(v) => {
            match v.head {
                Some(head) => println!(
                    "{prefix}verified: {} entries, head {}",
                    v.entries,
                    head.short()
                ),
                None if v.exists => println!("{prefix}verified: 0 entries (the log is empty)"),
                None => println!(
                    "{prefix}verified: 0 entries (no log at {})",
                    log.events_path().display()
                ),
            }
            match v.head_state {
                HeadState::Missing => println!(
                    "{prefix}note: head is missing: an append was interrupted before writing it; the next append repairs it"
                ),
                HeadState::OneBehind => println!(
                    "{prefix}note: head is one entry behind: an append was interrupted before rewriting it; the next append repairs it"
                ),
                HeadState::Current | HeadState::Disagrees(_) => {}
            }
            ExitCode::SUCCESS
        }
        Err(VerifyError::Io(e)) => {
            eprintln!("nd7 verify: {prefix}{e}");
            ExitCode::from(2)
        }
        Err(e) => {
            println!("{prefix}FAILED: {e}");
            ExitCode::from(1)
        }
    }
}

fn verify_all(threads: usize) -> ExitCode {
    let sessions = match session_log::state_dir() {
        Ok(state) => session_log::sessions_dir(&state),
        Err(e) => {
            eprintln!("nd7 verify: {e}");
            return ExitCode::from(2);
        }
    };
    let entries = match std::fs::read_dir(&sessions) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            println!("verified: no sessions under {}", sessions.display());
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("nd7 verify: {}: cannot list: {e}", sessions.display());
            return ExitCode::from(2);
        }
    };
    let (mut failed, mut unreadable, mut foreign) = (0, 0, 0);
    let mut ids: Vec<String> = Vec::new();
    for entry in entries.filter_map(Result::ok) {
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        match entry.file_name().into_string() {
            Ok(id) => ids.push(id),
            // nd7 names sessions after JSON strings, which are UTF-8.
            Err(name) => {
                eprintln!(
                    "nd7 verify: {}: not a session nd7 wrote (the name is not UTF-8)",
                    sessions.join(&name).display()
                );
                foreign += 1;
            }
        }
    }
    ids.sort();
    unreadable += foreign;
    for id in &ids {
        let code = match SessionLog::new(&sessions, id) {
            Ok(log) => report(&log, log.verify(threads), Some(id)),
            Err(e) => {
                eprintln!("nd7 verify: {e}");
                ExitCode::from(2)
            }
        };
        if code == ExitCode::from(1) {
            failed += 1;
        } else if code != ExitCode::SUCCESS {
            unreadable += 1;
        }
    }
    // Every directory counted once: the UTF-8 ones checked, the others unreadable.
    let total = ids.len() + foreign;
    println!(
        "{total} sessions: {} verified, {failed} failed, {unreadable} unreadable",
        total - failed - unreadable
    );
    println!("{CAVEAT}");
    if failed > 0 {
        ExitCode::from(1)
    } else if unreadable > 0 {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    }
}
