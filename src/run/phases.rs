//! `nd7 run`'s start as a value per phase. Each phase is made only by the
//! method of the one before it (the fields are private to this module), so
//! a step taken out of order does not compile:
//!
//! [`Checked`] → [`Split`] → [`Kept`] → [`Planned`] → [`Held`] →
//! [`Chained`] → [`Confined`] → [`Opened`] → [`Prepared`] → [`Running`] →
//! [`Finished`] → the exit status.
//!
//! The comments that say why a step comes where it does sit on the method
//! that takes it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::Arc;
use std::thread::JoinHandle;

use signal_hook::iterator::Signals;
use signal_hook::iterator::backend::Handle;

use crate::policy::{Policy, Roots};
use crate::run_dir::{self, Record, RunDir, RunDirs};
use crate::run_entry::{self, Ended, RunFacts};
use crate::run_log::RunLog;
use crate::{record, run_grants, sandbox, session_log, setup, shell_prefix, watch};

use super::checks;
use super::claude;
use super::end;
use super::error::RunError;
use super::head_start::HeadStart;
use super::options::Options;
use super::terminal::Terminal;
use crate::agents::Adapter;
use crate::hook::Agent;

/// What the checks found, carried through every phase after them.
struct Base {
    nd7: PathBuf,
    nd7_exec: PathBuf,
    terminal: Terminal,
    home: PathBuf,
    run_dirs: RunDirs,
    /// What the checks found that only harms the account (the modes) or
    /// slows the hooks (an nd7-record not used), said with the banner.
    check_warnings: Vec<String>,
}

/// The binaries, the home and the modes checked; nothing created yet.
pub(super) struct Checked {
    base: Base,
}

/// Which process [`Checked::split`] returned in.
pub(super) enum Split {
    /// The front or the keeper: the run is over; exit with this status.
    Done(i32),
    /// `nd7 run` itself, under its keeper, to carry on.
    Run(Kept),
}

/// `nd7 run` proper: the keeper's child, its own side still to set up.
pub(super) struct Kept {
    base: Base,
}

/// The floor's policy worked out: roots, credential stores, devices, the
/// grants the run starts with made and every write root pinned.
pub(super) struct Planned {
    base: Base,
    policy: Policy,
    /// The agent the program is, if nd7 knows it: its adapter.
    agent: Option<&'static dyn Adapter>,
    /// What goes before the user's arguments to the agent (Codex's `-c`
    /// overrides).
    before_args: Vec<OsString>,
    started_grants: Vec<run_grants::Started>,
    warnings: Vec<String>,
}

impl Planned {
    /// Whether the program is `agent`.
    fn is(&self, agent: Agent) -> bool {
        self.agent.is_some_and(|a| a.agent() == agent)
    }
}

/// In the namespaces, the files that run later held, back in the project
/// and scoped; the floor's ruleset and the watch's snapshot on their way.
pub(super) struct Held {
    planned: Planned,
    building: JoinHandle<Result<sandbox::Floor, String>>,
    snapshot: JoinHandle<watch::Watch>,
    plan: crate::policy::deferred::Plan,
    held: sandbox::Held,
    /// Why the files that run later could not be held, when they could not.
    not_held: Option<String>,
}

/// The run's chain started and its run directory made.
pub(super) struct Chained {
    held: Held,
    chain: Chain,
    run_dir: Removed,
}

/// The floor built, the watch ready and the keeper's answer in: things may
/// now start under the floor.
pub(super) struct Confined {
    planned: Planned,
    held: sandbox::Held,
    not_held: Option<String>,
    chain: Chain,
    run_dir: Removed,
    floor: sandbox::Floor,
    watch: Arc<watch::Watch>,
    /// What ran, written into the chain as it is seen (ADR-0110).
    observing: sandbox::Observing,
}

/// The exit and the door open (not yet answering); the events to record
/// known.
pub(super) struct Opened {
    confined: Confined,
    recorded: Vec<&'static str>,
    exit: sandbox::ExitService,
    /// The session's egress proxy, serving outside the network namespace;
    /// `Err(why)` where the kernel cannot keep the agent to it.
    proxy: Result<Arc<crate::egress::Proxy>, String>,
}

/// The agent's command line made and the signals caught.
pub(super) struct Prepared {
    opened: Opened,
    command: Command,
    signals: Signals,
    claude_json_warning: Option<String>,
    prefix_warning: Option<String>,
}

/// The agent's program started, the exit answering, signals passed on.
pub(super) struct Running {
    opened: Opened,
    agent: sandbox::Agent,
    signals: Handle,
    forwarder: JoinHandle<()>,
}

/// The agent's program has ended, and the commands it left with it.
pub(super) struct Finished {
    opened: Opened,
    status: ExitStatus,
}

/// The run's chain once it has its start: every way out writes its end.
struct Chain(Arc<RunLog>);

impl Chain {
    /// `e`, once the chain's end says the program was not started for it.
    fn not_started(&self, e: RunError) -> RunError {
        let _ = self.0.end(&Ended::NotStarted(e.to_string()));
        e
    }
}

/// A run directory removed when this goes out of scope, however `nd7 run`
/// returns.
struct Removed(RunDir);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = self.0.remove();
    }
}

impl Checked {
    /// Checks `nd7 run`'s binaries, the home and the modes, before anything
    /// is created; takes the terminal's settings before the agent's program
    /// can touch it (ADR-0098).
    pub(super) fn check() -> Result<Checked, RunError> {
        let exe = std::env::current_exe().map_err(|source| RunError::Io {
            path: "nd7".into(),
            action: "find this program's own path",
            source,
        })?;
        let nd7 = checks::resolved(&exe, "resolve")?;
        let nd7_exec = checks::binary_checks(&nd7)?;
        // The nd7-record beside nd7 is asked which recorder it is now
        // (ADR-0153), before the split, while nothing is traced; it answers
        // while the checks below are made. The answer is kept for the
        // process, so the hooks Claude Code's settings and Codex's overrides
        // get later (recorder_beside again) start no process under the run.
        // One there but not used is said.
        // An answer this file gave an earlier run is remembered in the
        // state directory (ADR-0156).
        let state = crate::session_log::state_dir().ok();
        let asking = setup::ask_recorder(&nd7, state.as_deref());
        let terminal = Terminal::before();
        let home = run_dir::account_home()?;
        checks::check_home(&home)?;
        let mut check_warnings = checks::check_modes(&home)?;
        if let Err(why @ setup::NoRecorder::Refused(_)) = asking.answer() {
            check_warnings.push(setup::no_recorder_note(&nd7, &why));
        }
        let run_dirs = RunDirs::under(&home);
        let base = Base {
            nd7,
            nd7_exec,
            terminal,
            home,
            run_dirs,
            check_warnings,
        };
        Ok(Checked { base })
    }

    /// First, while the process is small and has one thread: from here on
    /// this is the run, and the process the user started waits outside as
    /// its keeper, setting itself up while `nd7 run` builds its side.
    /// Whatever fails from here on ends the run, and the keeper exits with
    /// its status. The keeper works out the credential stores' real places
    /// and the device mounts meanwhile (ADR-0088).
    pub(super) fn split(self) -> Result<Split, RunError> {
        let home = &self.base.home;
        let head_start = || {
            HeadStart {
                secrets: run_dir::secrets(home).ok(),
                devices: sandbox::device_mounts(),
            }
            .encode()
        };
        match sandbox::keep_run(&self.base.run_dirs, head_start).map_err(RunError::Sandbox)? {
            sandbox::Kept::Done(code) => Ok(Split::Done(code)),
            sandbox::Kept::Run => Ok(Split::Run(Kept { base: self.base })),
        }
    }
}

impl Kept {
    /// Works out the floor's policy. Codex's home, its hooks' trust and its
    /// arguments come before the floor is built around them (ADR-0057).
    pub(super) fn plan(self, options: &Options) -> Result<Planned, RunError> {
        let base = self.base;
        let cwd = std::env::current_dir().map_err(|source| RunError::Io {
            path: ".".into(),
            action: "find the working directory",
            source,
        })?;
        let mut policy = roots(&base, &cwd)?;
        let agent = crate::agents::for_program(&options.program);
        let before_args = match agent {
            Some(agent) => {
                policy.agent = agent.state();
                agent.prepare_run(&options.args, &base.home, &base.nd7)?
            }
            None => Vec::new(),
        };
        policy.terminal = sandbox::own_terminal();
        unreadable(&mut policy, &base.home)?;
        let (started_grants, warnings) = start_grants(&mut policy, options, &base.home, &cwd)?;
        // Named in the policy for Seatbelt, which holds files by name; on
        // Linux the plan holds them (the same list).
        policy.named_programs =
            crate::policy::deferred::settings_programs(&policy, &watch::FsTree::of(&policy))
                .into_iter()
                .filter(|p| !p.starts_with(&policy.roots.project))
                .collect();
        Ok(Planned {
            base,
            policy,
            agent,
            before_args,
            started_grants,
            warnings,
        })
    }
}

/// nd7's binaries out of the agent's reach (ADR-0153): a place one is
/// reached through ([`setup::binary_places`]) that lies in a directory the
/// agent may write, and that the run does not hold read-only (`holds`),
/// would let it replace a program that runs later outside any sandbox,
/// nd7-record at every hook setup wired: an archive unpacked in the temp
/// directory, a link into the project.
fn binaries_out_of_reach(
    policy: &Policy,
    holds: impl Fn(&Path) -> bool,
    nd7: &Path,
) -> Result<(), RunError> {
    let writes = policy.command_writes();
    for place in setup::binary_places(nd7) {
        let root = writes.iter().find(|root| place.starts_with(root));
        if let Some(root) = root.filter(|_| !holds(&place)) {
            let why = format!("lies in {}, which the agent may write", root.display());
            return Err(RunError::Binary(place, why));
        }
    }
    Ok(())
}

/// The floor's roots, checked, in a new policy. The logs' directory must
/// exist to be named in the floor.
fn roots(base: &Base, cwd: &Path) -> Result<Policy, RunError> {
    let state = session_log::state_dir().map_err(|e| RunError::Sandbox(e.to_string()))?;
    let logs = state.join("sessions");
    std::fs::create_dir_all(&logs).map_err(|source| RunError::Io {
        path: logs.clone(),
        action: "create",
        source,
    })?;
    let project = checks::resolved(cwd, "resolve the project directory")?;
    checks::check_project(&project, &base.home, cwd)?;
    let mut policy = Policy::new(Roots {
        project,
        temp: checks::temp_root(&base.home)?,
        home: base.home.clone(),
        state: checks::resolved(&state, "resolve nd7's state directory")?,
        exit: base.nd7_exec.clone(),
    });
    // macOS: the mark by which the run's processes are found at its end,
    // and the port of the proxy's listener, which the profiles name.
    policy.mark = sandbox::run_mark();
    policy.proxy_port = sandbox::listen_for_proxy().map_err(RunError::Sandbox)?;
    Ok(policy)
}

/// The credential stores and the devices: what the keeper worked out, or,
/// without it (or for the error a bad secrets list gives), the same worked
/// out here.
fn unreadable(policy: &mut Policy, home: &Path) -> Result<(), RunError> {
    let own_places = run_dir::nd7_real_places(home, &policy.roots.state);
    let head = sandbox::head_start().and_then(|bytes| HeadStart::decode(&bytes));
    policy.secrets = match head.as_ref().and_then(|h| h.secrets.clone()) {
        Some(secrets) => secrets,
        None => run_dir::secrets(home)?,
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
    Ok(())
}

/// The grants the run starts with, made (where missing) before the floor is
/// built: the floor's rules cover what exists when it is built. Then every
/// write root pinned. Returns the grants and what the user should be told.
fn start_grants(
    policy: &mut Policy,
    options: &Options,
    home: &Path,
    cwd: &Path,
) -> Result<(Vec<run_grants::Started>, Vec<String>), RunError> {
    let (planned, mut warnings) = run_grants::planned(
        home,
        &policy.roots.project.clone(),
        &options.presets,
        &options.allow,
    )?;
    let (started, grant_warnings) = run_grants::grant_at_start(policy, &planned)?;
    warnings.extend(grant_warnings);
    warnings.extend(checks::pin_roots(policy, cwd));
    Ok((started, warnings))
}

impl Planned {
    /// While it has one thread, `nd7 run` moves into the namespaces the
    /// files that run later will be held in (ADR-0086). Then the floor's
    /// ruleset is built on a thread while this one holds those files
    /// (read-only where the system allows) and gives up the capability that
    /// took, scopes the run and (in [`Held::start_chain`]) starts its chain
    /// and run directory, and a third takes the watch's snapshot of those
    /// files (in every case). The binds are made before `nd7 run` puts
    /// itself under Landlock (which refuses mounts). Neither thread starts a
    /// process or sends a signal, and both have ended (in
    /// [`Chained::confine`]) before anything is started.
    pub(super) fn hold(self) -> Result<Held, RunError> {
        let holding = sandbox::enter_hold();
        let building = {
            let (policy, nd7_exec) = (self.policy.clone(), self.base.nd7_exec.clone());
            std::thread::spawn(move || sandbox::floor(&policy, &nd7_exec))
        };
        let plan = crate::policy::deferred::plan(&self.policy, &watch::FsTree::of(&self.policy));
        // The snapshot is taken as if the locks will hold (they nearly
        // always do), and again in `confine` if they do not.
        let snapshot = {
            let (plan, policy) = (plan.clone(), self.policy.clone());
            std::thread::spawn(move || watch::Watch::start(plan, true, &policy))
        };
        let (held, not_held) = sandbox::hold(holding, &plan).map_err(RunError::Sandbox)?;
        let holds = |place: &Path| not_held.is_none() && plan.held(place);
        binaries_out_of_reach(&self.policy, holds, &self.base.nd7)?;
        // The working directory was taken before the binds, beneath the
        // project's pin: found again by path, on top of them, so that
        // nothing that inherits it reaches past the locks.
        let project = &self.policy.roots.project;
        std::env::set_current_dir(project).map_err(|source| RunError::Io {
            path: project.clone(),
            action: "move to",
            source,
        })?;
        sandbox::scope_run().map_err(RunError::Sandbox)?;
        Ok(Held {
            planned: self,
            building,
            snapshot,
            plan,
            held,
            not_held,
        })
    }
}

impl Held {
    /// Starts the run's chain, then makes the run directory that names it.
    /// From the chain's start on, every way out writes its end ([`Chain`]).
    pub(super) fn start_chain(self, options: &Options) -> Result<Chained, RunError> {
        let planned = &self.planned;
        planned.base.run_dirs.clean_stale();
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
        let log = RunLog::start(&planned.policy.logs_dir(), &planned.facts(pid, &program))?;
        let chain = Chain(Arc::new(log));
        let record = Record {
            pid,
            started,
            started_at: Some(crate::session_log::now_ns() / 1_000_000_000),
            program,
            policy: planned.policy.clone(),
            log: Some(chain.0.reference()),
        };
        let run_dir = planned
            .base
            .run_dirs
            .create(&record, sandbox::files_beside_record)
            .map_err(|e| chain.not_started(e.into()))?;
        Ok(Chained {
            held: self,
            chain,
            run_dir: Removed(run_dir),
        })
    }
}

impl Planned {
    /// What the chain's first entry says of the run.
    fn facts<'a>(&self, pid: u32, program: &'a [String]) -> RunFacts<'a> {
        let (kernel_sandbox, landlock_abi) = sandbox::kernel_sandbox();
        RunFacts {
            pid,
            program,
            rules: serde_json::to_value(&self.policy).unwrap_or_default(),
            nd7_version: env!("CARGO_PKG_VERSION"),
            sandbox: kernel_sandbox,
            landlock_abi,
            hooks: self.agent.is_some(),
            agent: self.agent.map(|a| a.agent().name()),
            grants: run_grants::entry(&self.started_grants),
        }
    }
}

impl Chained {
    /// Takes the floor's ruleset and the watch's snapshot from their
    /// threads (the snapshot again if not every lock held), then waits for
    /// the keeper: nothing is started under the floor before the keeper has
    /// said what it can do, since the seccomp filter depends on it.
    pub(super) fn confine(self) -> Result<Confined, RunError> {
        let Chained {
            held:
                Held {
                    planned,
                    building,
                    snapshot,
                    plan,
                    held,
                    not_held,
                },
            chain,
            run_dir,
        } = self;
        let floor = building.join();
        let snapshot = snapshot.join();
        let floor = floor
            .map_err(|_| RunError::Sandbox("building the floor's rules failed".into()))
            .and_then(|f| f.map_err(RunError::Sandbox))
            .map_err(|e| chain.not_started(e))?;
        let watch = Arc::new(match snapshot {
            Ok(watch) if held.all_held() => watch,
            _ => watch::Watch::start(plan, held.all_held(), &planned.policy),
        });
        sandbox::keeper_ready().map_err(|e| chain.not_started(RunError::Sandbox(e)))?;
        let observing = sandbox::observe_execs(chain.0.clone());
        Ok(Confined {
            planned,
            held,
            not_held,
            chain,
            run_dir,
            floor,
            watch,
            observing,
        })
    }
}

impl Confined {
    /// Asks Claude Code's version for the events to record, then opens the
    /// exit and the door. On macOS confining a child (the version's probe)
    /// is only sound while this process has one thread, which it has here:
    /// the exit's threads start after.
    pub(super) fn open_exit(self, options: &Options) -> Result<Opened, RunError> {
        let recorded = if self.planned.is(Agent::ClaudeCode) {
            let roots = &self.planned.policy.roots;
            let (project, state) = (&roots.project, &roots.state);
            claude::claude_events(&options.program, &self.floor, &self.held, project, state)
        } else {
            Vec::new()
        };
        let exit = sandbox::serve_exit_held(
            &self.run_dir.0,
            &self.chain.0,
            &self.held,
            Some(self.before_command()),
            Some(self.after_command()),
        )
        .map_err(|e| self.chain.not_started(RunError::Sandbox(e)))?;
        let proxy = self
            .start_proxy(options)
            .map_err(|e| self.chain.not_started(e))?;
        if proxy.is_err() && options.net_strict {
            let why = proxy.as_ref().err().cloned().unwrap_or_default();
            return Err(self.chain.not_started(RunError::Sandbox(format!(
                "--net strict: this system cannot keep the agent to nd7's egress proxy ({why})"
            ))));
        }
        Ok(Opened {
            confined: self,
            recorded,
            exit,
            proxy,
        })
    }

    /// Starts the session's egress proxy on the listener made inside the
    /// network namespace, from the thread that stayed outside it (ADR-0106);
    /// on macOS on 127.0.0.1, asking for the run's secret (ADR-0136).
    /// `Ok(Err(why))` when there is no network namespace here: egress is
    /// then not enforced, and the banner says so.
    fn start_proxy(
        &self,
        options: &Options,
    ) -> Result<Result<Arc<crate::egress::Proxy>, String>, RunError> {
        if let Err(why) = self.held.egress() {
            return Ok(Err(why));
        }
        let planned = &self.planned;
        let agent = planned.agent.map(|a| a.agent());
        let rules = crate::egress::start_rules(
            agent,
            &planned.base.home,
            &planned.policy.roots.project,
            &options.presets,
        )
        .map_err(RunError::Sandbox)?;
        let log = self.chain.0.clone();
        let record: crate::egress::Record = Arc::new(move |c: &crate::egress::Connection| {
            let _ = log.net(&c.body());
        });
        let mut proxy = crate::egress::Proxy::new(rules, crate::egress::run_resolver(), record)
            .rules_file(self.run_dir.0.dir.join(crate::egress::RULES_FILE));
        if let Some(who) = sandbox::Held::proxy_client() {
            proxy = proxy.who(who);
        }
        if let Some(secret) = self.held.proxy_credentials() {
            proxy = proxy.credentials(&secret);
        }
        let proxy = Arc::new(proxy);
        self.held
            .serve_proxy(proxy.clone())
            .map_err(|e| RunError::Sandbox(format!("start nd7's egress proxy: {e}")))?;
        Ok(Ok(proxy))
    }

    /// What the exit calls before each command: the watch snapshots the
    /// grants' files that run later first.
    fn before_command(&self) -> sandbox::BeforeCommand {
        let watch = self.watch.clone();
        Arc::new(move |grants: &[PathBuf]| {
            watch.before_command(grants);
        })
    }

    /// What the exit calls after each command: each path is a change to a
    /// file that runs later, first seen after `command`; the watch also
    /// keeps it for the warning at the end. The warning names the model's
    /// command, read back from Claude Code's Bash tool line when it is one
    /// (ADR-0040).
    fn after_command(&self) -> sandbox::AfterCommand {
        let (watch, log) = (self.watch.clone(), self.chain.0.clone());
        Arc::new(move |command: &str| {
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
    }
}

impl Opened {
    /// Makes the agent's command line, then catches the signals. They are
    /// caught before the program starts, so that no SIGTERM can end `nd7
    /// run` without the run being cleaned up. SIGINT and SIGQUIT come from
    /// the terminal, which sends them to the program too: here they are
    /// only kept from ending `nd7 run` first.
    pub(super) fn prepare(self, options: &Options) -> Result<Prepared, RunError> {
        let planned = &self.confined.planned;
        let mut command = Command::new(&options.program);
        let claude = planned.is(Agent::ClaudeCode);
        let claude_json_warning = claude::claude_json_warning(&planned.base.home, claude);
        let prefix_warning = claude::prefix_warning(&planned.base.nd7_exec, claude);
        self.agent_args(&mut command, options)?;
        command.env(record::RUN_VARIABLE, &self.confined.run_dir.0.dir);
        if self.proxy.is_ok() {
            command.env_remove("NO_PROXY").env_remove("no_proxy");
            command.envs(self.confined.held.proxy_env());
        }
        let signals = Signals::new([
            signal_hook::consts::SIGTERM,
            signal_hook::consts::SIGHUP,
            signal_hook::consts::SIGINT,
            signal_hook::consts::SIGQUIT,
        ])
        .map_err(|source| {
            self.confined.chain.not_started(RunError::Io {
                path: "signals".into(),
                action: "handle",
                source,
            })
        })?;
        Ok(Prepared {
            opened: self,
            command,
            signals,
            claude_json_warning,
            prefix_warning,
        })
    }

    /// The agent's arguments: for Claude Code, nd7's settings merged with
    /// the user's own and `nd7-exec` as the shell prefix (taking the place
    /// of a prefix of the user's own); for Codex, the `-c` overrides first.
    fn agent_args(&self, command: &mut Command, options: &Options) -> Result<(), RunError> {
        let (planned, chain) = (&self.confined.planned, &self.confined.chain);
        if planned.is(Agent::ClaudeCode) {
            let (theirs, rest) =
                claude::users_settings(&options.args).map_err(|e| chain.not_started(e))?;
            let nd7 = planned.base.nd7.to_string_lossy();
            let exec = planned.base.nd7_exec.to_string_lossy();
            let recorder = setup::recorder_beside(&planned.base.nd7);
            let settings =
                shell_prefix::run_settings(&recorder, &nd7, &exec, theirs, &self.recorded)
                    .ok_or_else(|| {
                        chain.not_started(RunError::Settings("not a settings object".into()))
                    })?;
            command
                .arg("--settings")
                .arg(settings.to_string())
                .args(rest)
                .env(shell_prefix::PREFIX_VARIABLE, &planned.base.nd7_exec);
        } else {
            command.args(&planned.before_args).args(&options.args);
        }
        Ok(())
    }
}

impl Prepared {
    /// Says what the run is (the banner, then every warning), starts the
    /// agent's program under the floor, and only then lets the exit answer
    /// and the watch know the program is there. Inside the namespaces, the
    /// working directory is found again and the capabilities cleared before
    /// the floor's own steps.
    pub(super) fn start(
        self,
        options: &Options,
        announce: &dyn Fn(&str),
    ) -> Result<Running, RunError> {
        self.announce(announce);
        let Prepared {
            mut opened,
            command,
            signals,
            ..
        } = self;
        let confined = &opened.confined;
        let project = &confined.planned.policy.roots.project;
        let agent = sandbox::start_agent(command, &confined.held, &confined.floor, project)
            .map_err(|source| {
                confined.chain.not_started(RunError::Start {
                    program: options.program.to_string_lossy().into_owned(),
                    source,
                })
            })?;
        opened.exit.answer();
        if let Ok(proxy) = &opened.proxy {
            proxy.agent_started(agent.id());
        }
        opened.confined.watch.program_started();
        let handle = signals.handle();
        let forwarder = pass_on(signals, agent.id());
        Ok(Running {
            opened,
            agent,
            signals: handle,
            forwarder,
        })
    }

    /// The banner, the agent's and the grants' lines, then the warnings.
    fn announce(&self, announce: &dyn Fn(&str)) {
        let confined = &self.opened.confined;
        let planned = &confined.planned;
        let roots = &planned.policy.roots;
        announce(&format!(
            "nd7 run: run {} under nd7's policy: writes only to {} and {} (and {}'s own state); `nd7 allow DIR` lets commands write DIR; log {}",
            std::process::id(),
            roots.project.display(),
            roots.temp.display(),
            // A program nd7 does not know keeps Claude Code's state writable.
            planned
                .agent
                .unwrap_or(crate::agents::adapter(Agent::ClaudeCode))
                .title(),
            confined.chain.0.id(),
        ));
        if let Some(line) = planned.agent.and_then(|a| a.run_banner()) {
            announce(line);
        }
        if let Some(line) = run_grants::banner(&planned.started_grants, &planned.base.home) {
            announce(&line);
        }
        if let Some(line) = sandbox::unenforced_line() {
            announce(&said_before(&line));
        }
        match &self.opened.proxy {
            Ok(_) => announce(
                "nd7 run: the network only through nd7's proxy, to the agent's API and the hosts you allow (`nd7 allow --net HOST`)",
            ),
            Err(why) => announce(&format!(
                "nd7 run: not enforced on this system: what the agent may send over the network ({why})"
            )),
        }
        if let Some(why) = sandbox::not_observed_why() {
            announce(&format!(
                "nd7 run: what ran is not observed in this run ({why}): the log holds what the agent said, not what the kernel ran"
            ));
        }
        for warning in planned
            .warnings
            .iter()
            .chain(&self.claude_json_warning)
            .chain(&self.prefix_warning)
            .chain(&planned.base.check_warnings)
        {
            end::warn(announce, warning);
        }
        if roots.project == roots.home {
            end::warn(
                announce,
                "the project is your home directory, so every command may write all of it (but the credential stores, nd7's own files and the files held read-only); start nd7 run from the project's directory instead",
            );
        }
        if let Some(why) = &confined.not_held {
            end::warn(
                announce,
                &format!(
                    "files that run outside the sandbox later (git hooks and configuration, .envrc, editor and Claude Code settings) cannot be made read-only on this system ({why}); nd7 run watches them instead and reports every change when the session ends"
                ),
            );
        }
    }
}

/// Where `nd7 run` keeps the last "not enforced" line it said in full.
const UNENFORCED_SAID: &str = "unenforced-said";

/// The "not enforced on this system" line in full the first time (and
/// whenever it changes), then in a few words: the same paragraph on every
/// run is one people stop reading. Kept beside the logs, outside the floor.
fn said_before(line: &str) -> String {
    let Ok(state) = crate::session_log::state_dir() else {
        return line.to_string();
    };
    let file = state.join(UNENFORCED_SAID);
    if std::fs::read_to_string(&file).is_ok_and(|said| said == line) {
        return "nd7 run: not enforced on this system: the same as the first run said (`nd7 doctor` lists it)".into();
    }
    let _ = std::fs::create_dir_all(&state).and_then(|()| std::fs::write(&file, line));
    line.to_string()
}

/// Passes SIGTERM and SIGHUP on to the agent's program `agent`; SIGINT and
/// SIGQUIT are only caught (the terminal sent them to the program too).
fn pass_on(mut signals: Signals, agent: u32) -> JoinHandle<()> {
    std::thread::spawn(move || {
        for sig in signals.forever() {
            let forwarded = [signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP];
            let target = rustix::process::Pid::from_raw(agent as i32);
            let sig = rustix::process::Signal::from_named_raw(sig)
                .filter(|s| forwarded.contains(&s.as_raw()));
            if let (Some(pid), Some(sig)) = (target, sig) {
                let _ = rustix::process::kill_process(pid, sig);
            }
        }
    })
}

impl Running {
    /// Waits for the agent's program, stops passing signals on, and ends
    /// the commands still running through the exit.
    pub(super) fn wait(self, options: &Options) -> Result<Finished, RunError> {
        let Running {
            opened,
            mut agent,
            signals,
            forwarder,
        } = self;
        let status = agent.wait().map_err(|source| {
            opened.confined.chain.not_started(RunError::Io {
                path: options.program.clone().into(),
                action: "wait for",
                source,
            })
        })?;
        signals.close();
        let _ = forwarder.join();
        opened.exit.kill_commands();
        Ok(Finished { opened, status })
    }
}

impl Finished {
    /// The run's end, in order: what the run left running ended and written
    /// down; the terminal given back; every change to a file that runs
    /// later written; the chain's end; the refusals; the run directory
    /// removed; then the changes shown. Returns the status to exit with.
    pub(super) fn end(self, announce: &dyn Fn(&str)) -> i32 {
        let Confined {
            planned,
            chain,
            run_dir,
            watch,
            observing,
            ..
        } = &self.opened.confined;
        let (log, terminal) = (&chain.0, &planned.base.terminal);
        // What the run left running ends now, and the chain says so before
        // its last entry (the keeper ends anything later once this process
        // is gone, and says so on stderr).
        let left = sandbox::end_leftovers(&run_dir.0, &planned.policy);
        end::door_refusals(log, left.as_ref());
        // Every process below nd7 run has ended: what they ran is written
        // before the chain's end.
        observing.finish();
        // The agent's program has had the terminal until now: whatever it
        // left the terminal in must not hide or garble nd7's own last lines.
        terminal.give_back();
        super::terminal::reset_terminal();
        end::processes_ended(log, left, terminal.width(), announce);
        let ended = end::ended(self.status);
        // Every change to a file that runs later goes into the chain before
        // its last entry, and is shown once the run directory is gone.
        let findings = watch.finish();
        end::findings(log, &findings);
        let agent = planned.agent.map(|a| a.title());
        end::chain_end(log, &ended, agent, announce);
        end::over_budget(log, announce);
        end::refusals(log, &planned.base.home, terminal, announce);
        if let Ok(proxy) = &self.opened.proxy {
            end::net_refusals(
                &proxy.refused(),
                log.net_refused_unwritten(),
                log.id(),
                announce,
            );
        }
        let Opened { confined, .. } = self.opened;
        drop(confined.run_dir);
        end::close(&ended, &findings, &confined.planned.base.terminal, announce)
    }
}
