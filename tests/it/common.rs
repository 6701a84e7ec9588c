//! Helpers shared by the integration tests.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use nd7_core::hook::{Event, Invocation, Payload};
use nd7_core::session_log::SessionLog;

pub const FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/claude-code-2.1.197/hook-payloads.ndjson"
);

pub fn fixture_payloads() -> Vec<String> {
    std::fs::read_to_string(FIXTURES)
        .expect("fixtures are in the repository")
        .lines()
        .map(str::to_string)
        .collect()
}

pub fn invocation() -> Invocation {
    Invocation {
        ts: 1_795_000_000_000_000_000,
        host: "test-host".into(),
        hook_ppid: Some(4242),
        cwd: Some("/work".into()),
    }
}

pub fn payload(session: &str, n: usize) -> String {
    serde_json::json!({
        "session_id": session,
        "cwd": "/proj",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": format!("echo {n}")},
        "tool_use_id": format!("toolu_{n}"),
    })
    .to_string()
}

pub fn event(session: &str, n: usize) -> Event {
    Event::new(
        &invocation(),
        Payload::parse(payload(session, n).as_bytes()).expect("test payload parses"),
    )
}

/// Where Claude Code would keep `session`'s transcript for a project in
/// `cwd`, under the configuration directory [`State::nd7`] gives nd7: a
/// payload naming it is where the layout puts it, and no file is there.
pub fn transcript_path(session: &str, cwd: &str) -> String {
    format!(
        "/home/dev/.claude/projects/{}/{session}.jsonl",
        nd7_core::transcript::layout::project_key(cwd)
    )
}

/// A temporary state directory with the sessions under it.
pub struct State {
    pub dir: tempfile::TempDir,
}

impl State {
    pub fn new() -> State {
        State {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    /// What `XDG_STATE_HOME` should be for the binary to use this state.
    pub fn xdg(&self) -> &Path {
        self.dir.path()
    }

    pub fn sessions(&self) -> PathBuf {
        self.dir.path().join("nd7").join("sessions")
    }

    pub fn log(&self, session: &str) -> SessionLog {
        SessionLog::new(&self.sessions(), session).expect("valid session id")
    }

    pub fn nd7(&self) -> Command {
        self.command(env!("CARGO_BIN_EXE_nd7"))
    }

    /// `nd7-record`, set up as [`State::nd7`] is.
    pub fn nd7_record(&self) -> Command {
        self.command(env!("CARGO_BIN_EXE_nd7-record"))
    }

    /// `program` with this state, set up as [`State::nd7`] is.
    pub fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        // The fixtures' payloads name transcripts under /home/dev/.claude
        // and rollouts under /home/dev/.codex: there they are where the
        // agents' layouts put them (and absent), so no transcript entry
        // joins these logs.
        cmd.env("XDG_STATE_HOME", self.xdg())
            .env_remove("HOME")
            .env("CLAUDE_CONFIG_DIR", "/home/dev/.claude")
            .env("CODEX_HOME", "/home/dev/.codex");
        cmd
    }

    /// Runs `nd7 record` with `input` on stdin.
    pub fn record(&self, input: &[u8]) -> Output {
        run_with_stdin(self.nd7().arg("record"), input)
    }
}

pub fn run_with_stdin(cmd: &mut Command, input: &[u8]) -> Output {
    use std::io::Write;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn nd7");
    let mut stdin = child.stdin.take().expect("stdin");
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().expect("wait for nd7");
    writer.join().expect("stdin writer");
    out
}

/// The log's lines, newline stripped.
pub fn lines(log: &SessionLog) -> Vec<String> {
    std::fs::read_to_string(log.events_path())
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

pub fn entries(log: &SessionLog) -> Vec<serde_json::Value> {
    lines(log)
        .iter()
        .map(|l| serde_json::from_str(l).expect("every entry is JSON"))
        .collect()
}

/// The bytes of the log and head files, to show a refusal changed nothing.
pub fn snapshot(log: &SessionLog) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
    (
        std::fs::read(log.events_path()).ok(),
        std::fs::read(log.head_path()).ok(),
    )
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}
