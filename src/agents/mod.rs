//! One adapter per agent (ADR-0105): what nd7 needs to know about Claude
//! Code ([`claude_code`]) and about Codex ([`codex`]), behind one trait,
//! [`Adapter`], that the recorder ([`crate::record`]), the door
//! ([`crate::run_log`]), the transcript's anchoring ([`crate::transcript`])
//! and `nd7 run` ([`crate::run`]) ask instead of matching on the agent.
//! Adding a third agent means a third module here, a name in
//! [`crate::hook::Agent`] (the format's word, kept in the pure crate), and a
//! row in [`adapter`].
//!
//! An adapter answers facts and builds events; it holds no state. It sits
//! below everything that uses it: the pure parts it calls (payload types,
//! layouts) stay where they are, in `nd7_format`, `crate::codex` and
//! `crate::transcript`'s layouts.

pub mod claude_code;
pub mod codex;

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use crate::hook::{Agent, Event, Invocation, Payload};
use crate::policy::AgentState;
use crate::session_log;

/// Who builds a hook's entry, which decides where the agent's files are
/// looked for.
#[derive(Clone, Copy, Debug)]
pub enum Builder<'a> {
    /// `nd7 record` itself, appending to the log under this sessions
    /// directory: Codex's home from the hook's environment.
    Recorder(&'a Path),
    /// `nd7 run`'s door, outside the floor, for a hook inside it: Codex's
    /// rollout is read only below the Codex home `nd7 run` fixed when it
    /// started (the one the door anchors), never where the hook's
    /// environment says; `None` (none was fixed) reads nothing.
    Door { codex_home: Option<&'a Path> },
}

/// What nd7 asks of one agent.
pub trait Adapter: Sync {
    /// The agent, as `--agent`, the door's requests and entries name it.
    fn agent(&self) -> Agent;

    /// How messages name it: "Claude Code", "Codex".
    fn title(&self) -> &'static str;

    /// Whether `program`, the command `nd7 run` is given, starts this agent.
    fn runs_as(&self, program: &OsStr) -> bool;

    /// The state directories the floor lets it write (its policy's
    /// [`AgentState`]).
    fn state(&self) -> AgentState;

    /// What `nd7 run`'s banner adds for it, if anything.
    fn run_banner(&self) -> Option<&'static str>;

    /// What `nd7 run` makes ready for it before the floor is built around
    /// it, the user's arguments `args` checked first: what goes before
    /// those arguments on its command line.
    fn prepare_run(
        &self,
        args: &[OsString],
        home: &Path,
        nd7: &Path,
    ) -> Result<Vec<OsString>, PrepareError>;

    /// The event `payload`, from this agent's hooks, becomes when `builder`
    /// builds it. Fails only where building reads the session's log.
    fn event(
        &self,
        invocation: &Invocation,
        payload: Payload,
        builder: Builder<'_>,
    ) -> Result<Event, session_log::Error>;

    /// Whether building an event at the door reads the agent's own files
    /// (Codex's rollout), below the home the run fixed.
    fn event_reads_home(&self) -> bool;

    /// The agent's own directory, where it keeps its sessions' files: its
    /// variable's when that is an absolute path, else the one below `home`;
    /// links resolved.
    fn home(&self, home: Option<&Path>) -> Option<PathBuf>;

    /// [`Adapter::home`] as the environment of `nd7 record` names it.
    fn home_from_env(&self) -> Option<PathBuf> {
        self.home(crate::run_dir::env_or_account_home().as_deref())
    }

    /// The variable that names the agent's own directory, and what its
    /// sessions' files are called, for the message when neither it nor a
    /// home can be told.
    fn home_words(&self) -> (&'static str, &'static str);

    /// The agent's own API, which `nd7 run`'s egress rules let it reach
    /// without a grant: the base URL its configuration (in `home`) or its
    /// variable names, else the hosts it uses by default.
    fn api(&self, home: &Path) -> Api;
}

/// Where an agent's own API is ([`Adapter::api`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Api {
    /// The base URL the user configured, if any: then it alone.
    pub configured: Option<String>,
    /// The hosts the agent uses when nothing is configured.
    pub defaults: &'static [&'static str],
}

/// Why `nd7 run` could not make an agent ready ([`Adapter::prepare_run`]):
/// the agent's own error, shown as it is.
#[derive(Debug)]
pub struct PrepareError(Box<dyn std::error::Error + Send + Sync>);

impl std::fmt::Display for PrepareError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for PrepareError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl PrepareError {
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> PrepareError {
        PrepareError(Box::new(error))
    }
}

/// The adapter of `agent`.
pub fn adapter(agent: Agent) -> &'static dyn Adapter {
    match agent {
        Agent::ClaudeCode => &claude_code::ClaudeCode,
        Agent::Codex => &codex::Codex,
    }
}

/// The adapter of the agent `program` starts, if it is one nd7 knows.
pub fn for_program(program: &OsStr) -> Option<&'static dyn Adapter> {
    Agent::ALL
        .into_iter()
        .map(adapter)
        .find(|a| a.runs_as(program))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_agent_has_its_own_adapter() {
        for agent in Agent::ALL {
            assert_eq!(adapter(agent).agent(), agent);
        }
    }

    #[test]
    fn the_program_names_the_agent() {
        let of = |p: &str| for_program(OsStr::new(p)).map(|a| a.agent());
        assert_eq!(of("claude"), Some(Agent::ClaudeCode));
        assert_eq!(of("/usr/local/bin/claude"), Some(Agent::ClaudeCode));
        assert_eq!(of("codex"), Some(Agent::Codex));
        assert_eq!(of("/usr/bin/codex"), Some(Agent::Codex));
        assert_eq!(of("codex-cli"), None);
        assert_eq!(of("bash"), None);
        assert_eq!(of("claude-code"), None);
    }

    /// Codex's API is the provider its config.toml selects, when it names a
    /// base URL; the defaults otherwise. (With `CODEX_HOME` set, that home's
    /// config.toml is read instead, so the check is only made without it.)
    #[test]
    fn codex_s_api_is_the_provider_its_configuration_selects() {
        if std::env::var_os("CODEX_HOME").is_some() {
            return;
        }
        let home = tempfile::tempdir().expect("home");
        let codex = adapter(Agent::Codex);
        assert_eq!(codex.api(home.path()).defaults[0], "api.openai.com");
        std::fs::create_dir(home.path().join(".codex")).expect("mkdir");
        std::fs::write(
            home.path().join(".codex/config.toml"),
            "model_provider = \"corp\"\n[model_providers.corp]\nbase_url = \"https://llm.corp.example/v1\"\n",
        )
        .expect("config.toml");
        assert_eq!(
            codex.api(home.path()).configured.as_deref(),
            Some("https://llm.corp.example/v1")
        );
    }
}
