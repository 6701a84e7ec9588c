//! Claude Code's adapter: its payloads become events as they are
//! ([`crate::hook`]), its transcripts live below its configuration directory
//! (`$CLAUDE_CONFIG_DIR`, else `~/.claude`; [`crate::transcript::layout`]),
//! and `nd7 run` knows it by the program's name, `claude`.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use super::{Adapter, Api, Builder, PrepareError};
use crate::hook::{Agent, Event, Invocation, Payload};
use crate::policy::AgentState;
use crate::session_log;

/// Anthropic's Claude Code CLI.
pub struct ClaudeCode;

impl Adapter for ClaudeCode {
    fn agent(&self) -> Agent {
        Agent::ClaudeCode
    }

    fn title(&self) -> &'static str {
        "Claude Code"
    }

    fn runs_as(&self, program: &OsStr) -> bool {
        Path::new(program).file_name() == Some(OsStr::new("claude"))
    }

    fn state(&self) -> AgentState {
        AgentState::ClaudeCode
    }

    fn run_banner(&self) -> Option<&'static str> {
        None
    }

    fn prepare_run(
        &self,
        _args: &[OsString],
        _home: &Path,
        _nd7: &Path,
    ) -> Result<Vec<OsString>, PrepareError> {
        Ok(Vec::new())
    }

    fn event(
        &self,
        invocation: &Invocation,
        payload: Payload,
        _builder: Builder<'_>,
    ) -> Result<Event, session_log::Error> {
        Ok(Event::new(invocation, payload))
    }

    fn event_reads_home(&self) -> bool {
        false
    }

    fn home(&self, home: Option<&Path>) -> Option<PathBuf> {
        crate::transcript::layout::config_dir(
            std::env::var_os("CLAUDE_CONFIG_DIR").as_deref(),
            home,
        )
        .map(|c| crate::safe_file::real_dir(&c))
    }

    fn home_words(&self) -> (&'static str, &'static str) {
        ("CLAUDE_CONFIG_DIR", "transcripts")
    }

    fn api(&self, _home: &Path) -> Api {
        Api {
            configured: std::env::var("ANTHROPIC_BASE_URL")
                .ok()
                .filter(|u| !u.is_empty()),
            defaults: &["api.anthropic.com", "console.anthropic.com", "claude.ai"],
        }
    }
}
