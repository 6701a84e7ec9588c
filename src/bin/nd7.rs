//! The `nd7` command line. Parses arguments, calls the library, and decides
//! the exit status, in this file and nowhere else.
//!
//! Exit status: 0 success; 1 a log failed verification (or a run's chain did
//! not reconcile); 2 bad usage or a log that could not be read. `nd7 record`
//! always exits 0. `nd7 run` exits with the program's status, or 3 when files
//! that run later changed. A reader that closes standard output early ends
//! any command with 0 (see `out`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use nd7_core::chain::HeadState;
use nd7_core::cli::{Cli, Command};
use nd7_core::read::safe::plural;
use nd7_core::run_dir::{Change, Changed, RunDir, RunDirError, RunDirs};
use nd7_core::run_entry::Reconciliation;
use nd7_core::session_log::{self, SessionLog, Verified, VerifyError};
use nd7_core::{run, setup};

// First: its print macros shadow the standard ones in everything below.
#[macro_use]
#[path = "nd7/out.rs"]
mod out;
#[path = "nd7/hooks.rs"]
mod hooks;
#[path = "nd7/read_cmds.rs"]
mod read_cmds;
#[path = "nd7/transcript_cmds.rs"]
mod transcript_cmds;
#[path = "nd7/vault_cmds.rs"]
mod vault_cmds;

fn main() -> ExitCode {
    // Take the time before anything else, so `ts` marks when the hook fired.
    let early = nd7_core::record::invocation_now();
    match std::env::args_os().nth(1).as_ref().and_then(|a| a.to_str()) {
        // Before clap, which would exit 2 on a stray argument (a block, to a
        // hook) or print help on standard output.
        Some("record") => {
            let args: Vec<_> = std::env::args_os().skip(2).collect();
            return hooks::record(early, &args);
        }
        // `nd7 run`'s start is timed (docs/benchmarks.md): its line is parsed
        // by a parser that knows only `run`, with the same help and errors.
        Some("run") => {
            let nd7_core::cli::RunOnly::Run(run) = nd7_core::cli::RunLine::parse().command;
            return run_run(run.command, run.allow, run.preset, run.net.is_some());
        }
        _ => {}
    }
    let cli = Cli::parse();
    match cli.command {
        // Reached only as `nd7 -- record` and the like: `record` is taken above.
        Command::Record { run_hook, agent } => {
            let mut args: Vec<std::ffi::OsString> = agent
                .map(|a| format!("--agent={}", a.agent().name()).into())
                .into_iter()
                .collect();
            if run_hook {
                args.push("--run-hook".into());
            }
            hooks::record(early, &args)
        }
        Command::Verify {
            target,
            all,
            threads,
            transcript,
        } => {
            let threads = threads.unwrap_or_else(default_threads).max(1);
            match (target, all) {
                (_, true) => verify_all(threads),
                (Some(target), false) if transcript => {
                    transcript_cmds::verify(&target, |log| verify_log(log, threads))
                }
                (Some(target), false) => verify_one(&target, threads),
                (None, false) => ExitCode::from(2),
            }
        }
        Command::Setup {
            agent,
            target,
            uninstall,
        } => run_setup(&target.options(agent, uninstall)),
        Command::Uninstall { agent, target } => run_setup(&target.options(agent, true)),
        Command::Run(run) => run_run(run.command, run.allow, run.preset, run.net.is_some()),
        Command::Allow {
            run,
            net: Some(rule),
            ..
        } => run_net_grant(Change::Allow, run, &rule),
        Command::Deny {
            run,
            net: Some(rule),
            ..
        } => run_net_grant(Change::Deny, run, &rule),
        Command::Allow {
            run, preset, path, ..
        } => run_grant(Change::Allow, run, preset, path),
        Command::Deny {
            run, preset, path, ..
        } => run_grant(Change::Deny, run, preset, path),
        Command::HookExplain => hooks::explain(early),
        Command::HookRoute => hooks::route(),
        Command::Doctor { settings } => run_doctor(settings.as_deref()),
        Command::SelfUpdate {
            from,
            allow_downgrade,
        } => run_self_update(from, allow_downgrade),
        Command::Enroll {
            url,
            token,
            fingerprint,
            ca_cert,
        } => vault_cmds::enroll(&url, &token, &fingerprint, ca_cert.as_deref()),
        Command::Ship { every } => vault_cmds::ship(every.as_deref()),
        Command::Admin(admin) => vault_cmds::admin(admin),
        Command::Sessions(args) => read_cmds::sessions(args),
        Command::Show(args) => read_cmds::show(args),
        Command::Search(args) => read_cmds::search(args),
        Command::Completions { shell } => {
            out::stdout_bytes(&shell.completions());
            ExitCode::SUCCESS
        }
        Command::Man => {
            out::stdout_bytes(&nd7_core::cli::man_page());
            ExitCode::SUCCESS
        }
    }
}

/// `nd7 run`: exits with the program's status, 2 when it never started, or 3
/// when files that run later outside the sandbox changed during the session
/// (`run::CHANGED_STATUS`; the warning names the program's own status).
fn run_run(
    mut command: Vec<std::ffi::OsString>,
    allow: Vec<PathBuf>,
    presets: Vec<String>,
    net_strict: bool,
) -> ExitCode {
    let program = command.remove(0);
    let options = run::Options {
        program,
        args: command,
        allow,
        presets,
        net_strict,
    };
    // Every line passes through the one escaping function once more, as a
    // last guard: the parts the agent chose are already inert on one line
    // each (ADR-0090), and nd7's own text holds nothing it would change.
    let inert = |text: &str| nd7_core::read::safe::term(text, nd7_core::read::safe::Lines::Keep);
    match run::run(&options, |line| eprintln!("{}", inert(line))) {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            eprintln!("nd7 run: {}", inert(&e.to_string()));
            ExitCode::from(2)
        }
    }
}

/// `nd7 allow` and `nd7 deny`: one line on stdout per path and 0 when the
/// run ends up as asked; the reason on stderr and 2 otherwise.
/// `nd7 allow --net RULE` / `nd7 deny --net RULE`: the running session's
/// proxy judges its next connection by the changed rules. Exits 0 when the
/// change is made, 2 otherwise.
fn run_net_grant(change: Change, run: Option<u32>, rule: &str) -> ExitCode {
    let verb = match change {
        Change::Allow => "allow",
        Change::Deny => "deny",
    };
    let fail = |why: &dyn std::fmt::Display| {
        let why = nd7_core::read::safe::term(&why.to_string(), nd7_core::read::safe::Lines::Keep);
        eprintln!("nd7 {verb} --net: {why}");
        ExitCode::from(2)
    };
    let rule = match nd7_core::policy::net::parse_rule(rule) {
        Ok(rule) => rule,
        Err(e) => return fail(&e),
    };
    let run_dir = match RunDirs::for_user().and_then(|s| s.pick(run)) {
        Ok(run_dir) => run_dir,
        Err(e) => return fail(&e),
    };
    if let Err(e) = nd7_core::egress::change_rules(&run_dir, verb, &rule) {
        return fail(&e);
    }
    eprintln!(
        "nd7 {verb} --net: {rule} {}, from the agent's next connection (run {})",
        if verb == "allow" {
            "allowed"
        } else {
            "no longer allowed"
        },
        run_dir.pid
    );
    ExitCode::SUCCESS
}

fn run_grant(
    change: Change,
    run: Option<u32>,
    preset: Option<String>,
    path: Option<PathBuf>,
) -> ExitCode {
    let verb = match change {
        Change::Allow => "allow",
        Change::Deny => "deny",
    };
    // The reason keeps its own line ends (a list of runs); what the agent
    // chose in it is already inert on one line each.
    let fail = |why: &dyn std::fmt::Display| {
        let why = nd7_core::read::safe::term(&why.to_string(), nd7_core::read::safe::Lines::Keep);
        eprintln!("nd7 {verb}: {why}");
        ExitCode::from(2)
    };
    let grant = match Grant::open(verb, run) {
        Ok(grant) => grant,
        Err(e) => return fail(&e),
    };
    let targets = match grant_targets(preset.as_deref(), path, &grant.home) {
        Ok(targets) => targets,
        Err(e) => return fail(&e),
    };
    for (target, dir) in targets {
        if let Err(e) = grant.change(change, &target, dir) {
            return fail(&e);
        }
    }
    ExitCode::SUCCESS
}

/// What `nd7 allow` or `nd7 deny` changes: the path, or every path of the
/// preset, each with whether it is a directory.
fn grant_targets(
    preset: Option<&str>,
    path: Option<PathBuf>,
    home: &Path,
) -> Result<Vec<(PathBuf, bool)>, String> {
    use nd7_core::policy::grants;
    match (preset, path) {
        (Some(name), _) => match grants::preset(name) {
            Some(p) => Ok(p.paths(home)),
            None => Err(format!(
                "--preset {name}: no such preset; the presets are {}",
                grants::preset_names()
            )),
        },
        (None, Some(path)) => Ok(vec![(path, true)]),
        (None, None) => Err("no path given".to_string()),
    }
}

/// Paths here may lead through links the agent made, and a run's list
/// holds its commands' text: all shown inert (ADR-0090).
fn shown(path: &Path) -> String {
    nd7_core::read::safe::path(path)
}

/// `nd7 allow` or `nd7 deny` on one run: what each of its changes needs.
struct Grant {
    verb: &'static str,
    run_dir: RunDir,
    /// The run's home, from its record.
    home: PathBuf,
}

impl Grant {
    fn open(verb: &'static str, run: Option<u32>) -> Result<Grant, RunDirError> {
        let run_dir = RunDirs::for_user().and_then(|s| s.pick(run))?;
        let home = run_dir.record()?.policy.roots.home;
        Ok(Grant {
            verb,
            run_dir,
            home,
        })
    }

    /// Makes one change to the run's grants, and says what it did.
    fn change(&self, change: Change, target: &Path, dir: bool) -> Result<(), RunDirError> {
        let typed = nd7_core::policy::grants::expand_tilde(target, &self.home);
        let typed = std::path::absolute(&typed).unwrap_or(typed);
        let beside = nd7_core::sandbox::files_beside_record;
        let changed = match change {
            Change::Allow => self.run_dir.allow(target, dir, beside),
            Change::Deny => self.run_dir.deny(target, beside),
        };
        match changed? {
            Changed::Allowed { path, created } => self.allowed(&typed, &path, created),
            Changed::AlreadyAllowed(path) => {
                println!(
                    "run {}: {} was already allowed",
                    self.run_dir.pid,
                    shown(&path)
                )
            }
            Changed::Denied(paths) => {
                for path in paths {
                    self.denied(&typed, &path);
                }
            }
            Changed::NotAGrant { path, grants, link } => {
                self.not_a_grant(&path, &grants, link.as_deref())
            }
        }
        Ok(())
    }

    /// Every change is written into the run's log, from outside the floor.
    fn logged(&self, path: &Path) {
        let verb = self.verb;
        if let Err(e) = nd7_core::run_log::grant_changed(&self.run_dir, verb, path) {
            eprintln!(
                "nd7 {verb}: warning: the change is in force, but it could not be written into the run's log: {}",
                inert_line(&e.to_string())
            );
        }
    }

    /// `typed` granted as `path`: said with what stays held read-only.
    fn allowed(&self, typed: &Path, path: &Path, created: bool) {
        let pid = self.run_dir.pid;
        self.logged(path);
        if created {
            eprintln!(
                "nd7 allow: note: {} did not exist; created it",
                shown(typed)
            );
        }
        // The name goes through a link: say what is granted.
        if typed != path {
            eprintln!(
                "nd7 allow: note: {} leads to {}, which is what is granted; a link re-pointed later does not move the grant",
                shown(typed),
                shown(path),
            );
        }
        let (held, beneath) = nd7_core::policy::deferred::held_in_home(path, &self.home);
        if held {
            println!(
                "run {pid}: {} stays held read-only (watched and reported, if it did not exist when the run started): the shell, git, an editor or the agent runs what it says later, outside the sandbox, so no grant opens it; change it yourself, outside nd7 run",
                shown(path)
            );
            return;
        }
        println!(
            "run {pid}: writes under {} allowed from the next command",
            shown(path)
        );
        if path == self.home {
            eprintln!(
                "nd7 allow: warning: this opens your whole home to the run's commands (but the credential stores, nd7's own files and the files held read-only); `nd7 deny ~` takes it back"
            );
        }
        self.held_beneath(beneath);
    }

    /// The files held read-only beneath a grant that are there now: what
    /// a person would miss.
    fn held_beneath(&self, beneath: Vec<&str>) {
        let beneath: Vec<&str> = beneath
            .into_iter()
            .filter(|n| std::fs::symlink_metadata(self.home.join(n)).is_ok())
            .collect();
        if !beneath.is_empty() {
            eprintln!(
                "nd7 allow: note: beneath it, {} stay held read-only (they run later, outside the sandbox)",
                beneath
                    .iter()
                    .take(6)
                    .map(|n| format!("~/{n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
                    + if beneath.len() > 6 { ", …" } else { "" }
            );
        }
    }

    /// The grant `path` taken back, named `typed`: said with the commands
    /// still running that hold it.
    fn denied(&self, typed: &Path, path: &Path) {
        let pid = self.run_dir.pid;
        self.logged(path);
        if typed != path && std::fs::canonicalize(typed).ok().as_deref() != Some(path) {
            eprintln!(
                "nd7 deny: note: {} no longer leads to {}; the grant it named is taken back all the same",
                shown(typed),
                shown(path)
            );
        }
        println!(
            "run {pid}: writes under {} denied from the next command",
            shown(path)
        );
        let running = nd7_core::running::read(&self.run_dir.dir);
        for line in nd7_core::running::deny_report(pid, path, &running) {
            println!("{line}");
        }
    }

    /// `nd7 deny` named no grant: said with the run's grants, and why a
    /// link was not followed.
    fn not_a_grant(&self, path: &Path, grants: &[PathBuf], link: Option<&str>) {
        println!("run {}: {} was not a grant", self.run_dir.pid, shown(path));
        if let Some(why) = link {
            eprintln!("nd7 deny: note: {}", inert_line(why));
        }
        if link.is_some() || !grants.is_empty() {
            eprintln!(
                "nd7 deny: note: this run's grants are {}",
                if grants.is_empty() {
                    "none".to_string()
                } else {
                    grants
                        .iter()
                        .map(|g| shown(g))
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            );
        }
    }
}

/// Text the agent chose (a run's commands, a call's id), inert on one
/// line (ADR-0090).
fn inert_line(text: &str) -> String {
    nd7_core::read::safe::term(text, nd7_core::read::safe::Lines::One)
}

/// `nd7 self-update [--from URL] [--allow-downgrade]`: 0 when both binaries
/// were replaced, 2 otherwise.
#[cfg(feature = "self-update")]
fn run_self_update(from: Option<String>, downgrade: bool) -> ExitCode {
    use nd7_core::self_update::{self, Accept, UpdateError};
    let from = from.as_deref().unwrap_or(self_update::DEFAULT_SOURCE);
    let result = (|| {
        let exe = std::env::current_exe()
            .and_then(std::fs::canonicalize)
            .map_err(|source| UpdateError::Io {
                path: "nd7".into(),
                action: "find this program's own path",
                source,
            })?;
        self_update::refuse_managed(&exe)?;
        let key = self_update::release_key().ok_or(UpdateError::NoKey)?;
        let key = nd7_core::vault::unhex::<32>(&key).ok_or(UpdateError::BadKey)?;
        let dir = exe.parent().unwrap_or(std::path::Path::new("/"));
        self_update::update(
            dir,
            from,
            &nd7_core::http_client::Trust::Default,
            &key,
            &Accept::running(downgrade),
        )
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

/// `nd7 self-update` in a build without it: what updates this nd7, and 2.
#[cfg(not(feature = "self-update"))]
fn run_self_update(_from: Option<String>, _downgrade: bool) -> ExitCode {
    eprintln!("nd7 self-update: {}", nd7_core::cli::NO_SELF_UPDATE);
    ExitCode::from(2)
}

fn run_doctor(settings: Option<&std::path::Path>) -> ExitCode {
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("nd7"));
    let checks = setup::doctor(&exe, settings);
    // Details name paths and link targets an agent may have chosen (a
    // re-pointed `~/.claude.json`): shown inert (ADR-0090).
    let inert = |text: &str| nd7_core::read::safe::term(text, nd7_core::read::safe::Lines::Keep);
    for check in &checks {
        let mark = check.mark();
        println!("{mark} {:<7} {}", check.name, inert(&check.detail));
        if let Some(fix) = &check.fix {
            println!("             fix: {}", inert(fix));
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
    // Setup's lines name paths the user or an agent chose (where nd7 is
    // installed, what a link points at): shown inert, as doctor's.
    let inert = |text: &str| nd7_core::read::safe::term(text, nd7_core::read::safe::Lines::Keep);
    match setup::run(options, &exe) {
        Ok(report) => {
            for line in &report.done {
                println!("{}", inert(line));
            }
            for warning in &report.warnings {
                eprintln!("nd7 setup: warning: {}", inert(warning));
            }
            ExitCode::SUCCESS
        }
        Err(e @ (setup::SetupError::Settings { .. } | setup::SetupError::CodexConfig { .. })) => {
            eprintln!("nd7 setup: {}", inert(&e.to_string()));
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("nd7 setup: {}", inert(&e.to_string()));
            ExitCode::from(2)
        }
    }
}

fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(2))
}

const RUN_CAVEAT: &str = "\
note: this log opens with nd7 run's own run_start: while its run lasted, it was read-only inside the sandbox, so nothing there could change or remove an entry once written.
note: entries with source exit:nd7 were written by nd7 from outside the sandbox, as were effect:nd7 (the programs nd7 saw run, on Linux) and effect:nd7-proxy (the connections its proxy saw); intent: entries (intent:claude-code, intent:codex) are the agent's word, and it can add false ones.
note: all of this is only as strong as the machine: anyone who can write this account's files outside the sandbox could have written the whole chain, run_start included; a chain shipped to a vault is held against the vault's copy by nd7 admin pull --compare.";

const CAVEAT: &str = "\
note: the chain checks itself; it is not third-party evidence. Anyone who can write the session's directory can rewrite the whole chain, head included.
note: entries record intent, what the agent said it would do and reported back, not effect, what actually ran.";

fn verify_one(target: &str, threads: usize) -> ExitCode {
    match resolve_target(target) {
        Ok(log) => verify_log(&log, threads),
        // Ids and paths can come from payloads: shown inert (ADR-0090).
        Err(e) => read_cmds::fail("verify", e),
    }
}

/// `nd7 verify` of one log: the chain, its reconciliation, the caveats.
fn verify_log(log: &SessionLog, threads: usize) -> ExitCode {
    let log = log.clone();
    let mut verdicts = read_cmds::Verdicts::new();
    let keys = read_cmds::Verdicts::before(&log);
    let result = log.verify(threads);
    verdicts.note(&log, keys, &result);
    verdicts.save();
    let code = report(&log, result, None);
    if code == ExitCode::SUCCESS {
        // By what the chain holds, never by its name: anyone who can write
        // the logs can name a directory `run-…`.
        if nd7_core::run_log::opens_a_run(&log) {
            println!("{RUN_CAVEAT}");
        }
        println!("{CAVEAT}");
    }
    code
}

/// For a run's chain that verified: the two accounts held against each
/// other. Returns whether they agree.
fn report_reconciliation(log: &SessionLog, prefix: &str) -> Result<bool, session_log::Error> {
    let r = nd7_core::run_log::reconcile(log)?;
    if !r.is_run {
        return Ok(true);
    }
    // A chain that stops before `run_end` accounts for the run only up to
    // its last entry: an agent that killed its `nd7 run` went on unrecorded.
    let ended = r.ended || run_is_live(log.session_id());
    if !ended {
        println!(
            "{prefix}NOT ENDED: the run's chain has no run_end: its nd7 run was killed before it could end it, and nothing after entry {} was recorded",
            r.last_seq
        );
    }
    let whole = report_lost_events(&r, prefix);
    report_effects(&r.effects, prefix);
    let claims_hold = report_claims(log, prefix)?;
    if !r.hooks {
        println!(
            "{prefix}run: nd7 run's own log; the run registered no hooks (the program was not Claude Code), so its {} commands through the exit are not held against Bash calls",
            r.execs
        );
        return Ok(whole && claims_hold);
    }
    println!(
        "{prefix}run: nd7 run's own log: {} commands through the exit, {} Bash calls in the hooks' entries",
        r.execs, r.calls
    );
    report_unmatched(&r, prefix);
    // A command that has just ended in a run still going may be waiting for
    // its result; once the run is over (or gone), a missing result is final.
    let in_flight = !r.ended && ended;
    report_unanswered(&r, in_flight, prefix);
    let agrees = if in_flight {
        r.unmatched_calls.is_empty() && r.unmatched_execs.is_empty()
    } else {
        r.agrees()
    };
    if agrees && ended && whole && claims_hold {
        println!(
            "{prefix}reconciled: every Bash call has its command through the exit, and every command its call"
        );
    }
    Ok(agrees && ended && whole && claims_hold)
}

/// Each command's `exec` entry (what the exit claims it handed the shell)
/// held against what its first process ran, read after the exec (ADR-0137).
/// Both are named where they differ. Returns whether none does.
fn report_claims(log: &SessionLog, prefix: &str) -> Result<bool, session_log::Error> {
    let mut claims = nd7_core::read::claims::Claims::new();
    log.for_each_line(|line| {
        claims.feed(line);
        true
    })?;
    let unheld = claims.unheld();
    let found = claims.finish();
    if unheld > 0 {
        println!(
            "{prefix}note: {unheld} command{} not held against what ran: {} first process is not known (its exec not marked with the command, not forked by nd7 run, not confirmed, or not seen)",
            plural(unheld, " was", "s were"),
            plural(unheld, "its", "their"),
        );
    }
    for m in &found {
        let (path, id, hash) = &m.exe;
        println!(
            "{prefix}NOT RECONCILED: entry {}: command `{}` was claimed by the exit, but its first process (pid {}, entry {}) ran {} ({id}, blake3 {}) with arguments `{}`",
            m.exec_seq,
            inert_line(&m.command),
            m.pid,
            m.ran_seq,
            inert_line(path),
            hash.as_deref().unwrap_or("not read"),
            inert_line(&m.argv.join(" ")),
        );
    }
    Ok(found.is_empty())
}

/// Events a hook sent that the chain does not hold (ADR-0097): whatever
/// the rest says, the chain is not the whole account. Returns whether
/// there are none.
fn report_lost_events(r: &Reconciliation, prefix: &str) -> bool {
    if r.door_dropped > 0 {
        println!(
            "{prefix}INCOMPLETE: the hooks' door dropped {} connection{} unread (each may have been a hook whose event is missing; the `refused` entries of door `record` say why)",
            r.door_dropped,
            plural(r.door_dropped, "", "s")
        );
    }
    if r.hooks_over_budget > 0 {
        println!(
            "{prefix}INCOMPLETE: {} hook event{} counted but not recorded: the run's hooks sent more through the door than one run takes",
            r.hooks_over_budget,
            plural(r.hooks_over_budget, " was", "s were")
        );
    }
    r.door_dropped == 0 && r.hooks_over_budget == 0
}

/// The Bash calls with no command through the exit, those that never ran,
/// and the commands no call announced. Ids and commands are the agent's
/// text: shown inert, so escapes in them cannot overwrite or hide these
/// lines on a terminal.
fn report_unmatched(r: &Reconciliation, prefix: &str) {
    for call in &r.unmatched_calls {
        println!(
            "{prefix}NOT RECONCILED: entry {}: Bash call {} ({}) has no command through the exit",
            call.seq,
            call.tool_use_id
                .as_deref()
                .map_or("without a tool_use_id".to_string(), inert_line),
            call.command
                .as_deref()
                .map_or("no command text".to_string(), |c| format!(
                    "`{}`",
                    inert_line(c)
                )),
        );
    }
    if !r.calls_not_run.is_empty() {
        println!(
            "{prefix}note: {} Bash call{} never ran (no result and no command: Claude Code's permissions denied {}, or the run ended first)",
            r.calls_not_run.len(),
            plural(r.calls_not_run.len(), "", "s"),
            plural(r.calls_not_run.len(), "it", "them"),
        );
    }
    for exec in &r.unmatched_execs {
        println!(
            "{prefix}NOT RECONCILED: entry {}: command `{}` ran through the exit with no Bash call announcing it",
            exec.seq,
            inert_line(&exec.command)
        );
    }
}

/// The commands whose call has no result (final unless the run is
/// `in_flight`), and those asked for from inside another command.
fn report_unanswered(r: &Reconciliation, in_flight: bool, prefix: &str) {
    for unanswered in &r.execs_without_result {
        let call = unanswered
            .call
            .tool_use_id
            .as_deref()
            .map_or("without a tool_use_id".to_string(), inert_line);
        if in_flight {
            println!(
                "{prefix}note: entry {}: command `{}` for Bash call {call} has no result yet (the run is still going)",
                unanswered.exec.seq,
                inert_line(&unanswered.exec.command)
            );
        } else {
            println!(
                "{prefix}NOT RECONCILED: entry {}: command `{}` ran through the exit for Bash call {call}, but Claude Code reported no result for that call (denied, or never run by it)",
                unanswered.exec.seq,
                inert_line(&unanswered.exec.command)
            );
        }
    }
    for nested in &r.nested_execs {
        println!(
            "{prefix}note: entry {}: command `{}` was asked for from inside the command of entry {}, so it is part of that command, not a Bash call of its own",
            nested.seq,
            inert_line(&nested.command),
            nested.inside.unwrap_or_default()
        );
    }
}

/// What ran (`effect:nd7`, ADR-0111), held against the commands through
/// the exit: counts, and what ran under no call. None of it is a
/// disagreement: what ran without a call is the agent's own work (its tools,
/// MCP servers, hooks) or a process a command left behind.
fn report_effects(e: &nd7_core::run_entry::Effects, prefix: &str) {
    use nd7_core::read::safe;
    if !e.present {
        return;
    }
    if let Some(why) = &e.not_observed {
        println!(
            "{prefix}what ran: not observed in this run ({})",
            safe::term(why, safe::Lines::One)
        );
        return;
    }
    println!(
        "{prefix}what ran: {} execs observed: {} under commands through the exit, {} ran without a call (the agent's own processes and what they started), {} started by a command's process after the command had ended",
        e.execs, e.under_commands, e.without_call, e.after_command
    );
    if e.unconfirmed > 0 {
        println!(
            "{prefix}note: {} exec{} not confirmed (the new program could not be read after its exec)",
            e.unconfirmed,
            plural(e.unconfirmed, "", "s")
        );
    }
    if e.stopped > 0 {
        println!(
            "{prefix}note: {} exec{} not observed: stopped at the exec, before running, while the observer was past its bound",
            e.stopped,
            plural(e.stopped, " was", "s were")
        );
    }
}

/// Whether the `nd7 run` that writes the chain `id` (`run-<time>-<pid>-<hex>`)
/// is running now: its chain has no `run_end` yet, and that is no fault.
fn run_is_live(id: &str) -> bool {
    let Some(pid) = id.split('-').nth(2).and_then(|p| p.parse::<u32>().ok()) else {
        return false;
    };
    let Ok(run_dirs) = nd7_core::run_dir::RunDirs::for_user() else {
        return false;
    };
    run_dirs.running().is_ok_and(|r| r.contains(&pid))
        && run_dirs
            .run(pid)
            .record()
            .is_ok_and(|r| r.log.is_some_and(|l| l.id == id))
}

/// The session `target` names, by the one lookup every reading command
/// uses (`Store::resolve`): an id, the short prefix `nd7 sessions` prints,
/// `last`, or a path to a session directory or its events.ndjson.
fn resolve_target(target: &str) -> Result<SessionLog, nd7_core::read::ReadError> {
    let store = nd7_core::read::store::Store::open()?;
    let mut index = nd7_core::read::index::Index::load(&store.state);
    Ok(store.resolve(target, &mut index)?.log)
}

fn report(
    log: &SessionLog,
    result: Result<Verified, VerifyError>,
    label: Option<&str>,
) -> ExitCode {
    let prefix = label.map(|l| format!("{l}: ")).unwrap_or_default();
    // A verify error may quote what it found in the log: shown inert (ADR-0090).
    let inert = |e: &dyn std::fmt::Display| {
        nd7_core::read::safe::term(&e.to_string(), nd7_core::read::safe::Lines::One)
    };
    match result {
        Ok(v) => {
            match v.head {
                Some(head) => println!(
                    "{prefix}verified: {} entries, head {}",
                    v.entries,
                    head.short()
                ),
                None => println!("{prefix}verified: 0 entries (the log is empty)"),
            }
            match v.head_state {
                HeadState::Missing => println!(
                    "{prefix}note: head is missing: an append was interrupted before writing it; the next append repairs it"
                ),
                HeadState::Behind { entries } => println!(
                    "{prefix}note: head is {entries} {} behind: an append was interrupted before rewriting it; the next append repairs it",
                    plural(entries, "entry", "entries")
                ),
                HeadState::Current | HeadState::Disagrees(_) => {}
            }
            match report_reconciliation(log, &prefix) {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::from(1),
                Err(e) => {
                    eprintln!("nd7 verify: {prefix}{}", inert(&e));
                    ExitCode::from(2)
                }
            }
        }
        Err(e) if e.is_unchecked() => {
            eprintln!("nd7 verify: {prefix}{}", inert(&e));
            ExitCode::from(2)
        }
        Err(e) => {
            println!("{prefix}FAILED: {}", inert(&e));
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
    let (ids, foreign) = match session_ids(&sessions) {
        Ok(found) => found,
        Err(code) => return code,
    };
    if ids.is_empty() && foreign == 0 {
        println!(
            "no sessions under {}: nothing was verified",
            sessions.display()
        );
        return ExitCode::SUCCESS;
    }
    let tally = verify_each(&sessions, &ids, threads);
    let failed = tally.failed;
    let unreadable = foreign + tally.unreadable;
    // Every directory counted once: the UTF-8 ones checked, the others unreadable.
    let total = ids.len() + foreign;
    println!(
        "{total} sessions: {} verified, {failed} failed, {unreadable} unreadable",
        total - failed - unreadable
    );
    if tally.runs > 0 {
        println!("{RUN_CAVEAT}");
    }
    println!("{CAVEAT}");
    if failed > 0 {
        ExitCode::from(1)
    } else if unreadable > 0 {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    }
}

/// The sessions under `sessions`, by id, and how many directories there
/// are not sessions nd7 wrote (each said on stderr); the exit status when
/// the directory cannot be listed.
fn session_ids(sessions: &Path) -> Result<(Vec<String>, usize), ExitCode> {
    let entries = match std::fs::read_dir(sessions) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!(
                "nd7 verify: {} does not exist: no session was ever recorded there; nothing was verified",
                sessions.display()
            );
            return Err(ExitCode::from(2));
        }
        Err(e) => {
            eprintln!("nd7 verify: {}: cannot list: {e}", sessions.display());
            return Err(ExitCode::from(2));
        }
    };
    let mut foreign = 0;
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
    Ok((ids, foreign))
}

/// How `nd7 verify --all` found the sessions it checked.
struct Tally {
    failed: usize,
    unreadable: usize,
    /// Clean chains of a run.
    runs: usize,
}

/// Verifies each session in `ids`, saying each verdict, and keeps the
/// verdicts for `nd7 sessions`.
fn verify_each(sessions: &Path, ids: &[String], threads: usize) -> Tally {
    let mut tally = Tally {
        failed: 0,
        unreadable: 0,
        runs: 0,
    };
    let mut verdicts = read_cmds::Verdicts::new();
    for id in ids {
        let code = match SessionLog::new(sessions, id) {
            Ok(log) => {
                let keys = read_cmds::Verdicts::before(&log);
                let result = log.verify(threads);
                verdicts.note(&log, keys, &result);
                if result.is_ok() && nd7_core::run_log::opens_a_run(&log) {
                    tally.runs += 1;
                }
                report(&log, result, Some(id))
            }
            Err(e) => {
                eprintln!("nd7 verify: {e}");
                ExitCode::from(2)
            }
        };
        if code == ExitCode::from(1) {
            tally.failed += 1;
        } else if code != ExitCode::SUCCESS {
            tally.unreadable += 1;
        }
    }
    verdicts.save();
    tally
}
