//! Codex's adapter: its payloads become events with what its rollout adds
//! (the CLI's version, how each call ended; [`crate::codex`]), its rollouts
//! live below its home (`$CODEX_HOME`, else `~/.codex`;
//! [`crate::transcript::codex_layout`]), and `nd7 run` knows it by the
//! program's name, `codex`.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use super::{Adapter, Api, Builder, PrepareError};
use crate::hook::{Agent, Event, Invocation, Payload};
use crate::policy::AgentState;
use crate::session_log::{self, SessionLog};

/// OpenAI's Codex CLI.
pub struct Codex;

impl Adapter for Codex {
    fn agent(&self) -> Agent {
        Agent::Codex
    }

    fn title(&self) -> &'static str {
        "Codex"
    }

    fn runs_as(&self, program: &OsStr) -> bool {
        Path::new(program).file_name() == Some(OsStr::new("codex"))
    }

    fn state(&self) -> AgentState {
        AgentState::Codex
    }

    fn run_banner(&self) -> Option<&'static str> {
        Some(
            "nd7 run: Codex's own sandbox is off (it cannot start inside nd7's floor); its shell calls leave the floor through nd7's exit, under this session's grants",
        )
    }

    /// Its own sandbox off, its hooks trusted and on the command line, its
    /// home made and checked (ADR-0056, ADR-0057: [`crate::run_codex`]).
    fn prepare_run(
        &self,
        args: &[OsString],
        home: &Path,
        nd7: &Path,
    ) -> Result<Vec<OsString>, PrepareError> {
        crate::run_codex::check_args(args).map_err(PrepareError::new)?;
        crate::run_codex::prepare(home, nd7).map_err(PrepareError::new)
    }

    fn event(
        &self,
        invocation: &Invocation,
        payload: Payload,
        builder: Builder<'_>,
    ) -> Result<Event, session_log::Error> {
        Ok(match builder {
            Builder::Recorder(dir) => {
                // No log yet: this entry opens it, and names the agent.
                let log = SessionLog::new(dir, &payload.session_id)?;
                let first = std::fs::metadata(log.events_path()).map_or(true, |m| m.len() == 0);
                crate::codex::event(invocation, payload, first)
            }
            // Built by `nd7 run`, outside the sandbox, for a hook inside it:
            // the run's chain opens with `run_start`, and SessionStart names
            // the agent.
            Builder::Door { codex_home } => {
                crate::codex::event_in(codex_home, invocation, payload, false)
            }
        })
    }

    fn event_reads_home(&self) -> bool {
        true
    }

    fn home(&self, home: Option<&Path>) -> Option<PathBuf> {
        crate::transcript::codex_layout::codex_home(std::env::var_os("CODEX_HOME").as_deref(), home)
            .map(|c| crate::safe_file::real_dir(&c))
    }

    fn home_words(&self) -> (&'static str, &'static str) {
        ("CODEX_HOME", "rollouts")
    }

    fn api(&self, home: &Path) -> Api {
        Api {
            configured: base_url(home).or_else(|| std::env::var("OPENAI_BASE_URL").ok()),
            defaults: &["api.openai.com", "chatgpt.com", "auth.openai.com"],
        }
    }
}

/// The base URL of the model provider Codex's config.toml selects, if it
/// names one.
fn base_url(home: &Path) -> Option<String> {
    let codex = crate::transcript::codex_layout::codex_home(
        std::env::var_os("CODEX_HOME").as_deref(),
        Some(home),
    )?;
    let text = std::fs::read_to_string(codex.join("config.toml")).ok()?;
    let doc: toml_edit::DocumentMut = text.parse().ok()?;
    let provider = doc.get("model_provider")?.as_str()?;
    doc.get("model_providers")?
        .get(provider)?
        .get("base_url")?
        .as_str()
        .map(str::to_string)
}
