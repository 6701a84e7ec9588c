//! The real Claude Code CLI, installed from the npm registry into a cache
//! folder once per version, and run headless against [`super::mock_api`].
//!
//! The version is one setting: `ND7_E2E_CLAUDE_VERSION` (default
//! [`DEFAULT_VERSION`], what npm resolves on node 20). If the registry cannot
//! be reached the tests fail and say so; they never skip.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const DEFAULT_VERSION: &str = "2.1.197";

/// Claude Code runs with the system's PATH only: a developer's shims (pyenv,
/// nvm) are not part of what is being tested.
const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

pub fn version() -> String {
    std::env::var("ND7_E2E_CLAUDE_VERSION").unwrap_or_else(|_| DEFAULT_VERSION.to_string())
}

/// The `claude` executable of `version`, installing it first if needed.
pub fn install(version: &str) -> PathBuf {
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("claude-code-{version}"));
    std::fs::create_dir_all(&cache).expect("create the Claude Code cache folder");
    let bin = cache.join("node_modules/.bin/claude");
    // One installer at a time, across test threads and processes.
    let lock = File::create(cache.join(".install-lock")).expect("create the install lock");
    lock.lock().expect("lock the Claude Code cache");
    if !runs(&bin, version) {
        let out = Command::new("npm")
            .args([
                "install",
                "--no-audit",
                "--no-fund",
                "--loglevel=error",
                "--prefix",
            ])
            .arg(&cache)
            .arg(format!("@anthropic-ai/claude-code@{version}"))
            .output()
            .unwrap_or_else(|e| panic!("cannot run npm to install Claude Code {version}: {e}"));
        assert!(
            out.status.success(),
            "cannot install Claude Code {version} from the npm registry (is it reachable?):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            runs(&bin, version),
            "Claude Code {version} installed but `claude --version` fails"
        );
    }
    bin
}

fn runs(bin: &Path, version: &str) -> bool {
    Command::new(bin)
        .arg("--version")
        .env_clear()
        .env("PATH", SYSTEM_PATH)
        .env("HOME", bin.parent().unwrap_or(Path::new("/")))
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|o| {
            o.status.success() && String::from_utf8_lossy(&o.stdout).starts_with(version)
        })
}

/// The system PATH with `claude`'s directory first, as on a machine where
/// it is installed: `nd7 setup` asks it for its version.
pub fn path_with(claude: &Path) -> String {
    match claude.parent() {
        Some(dir) => format!("{}:{SYSTEM_PATH}", dir.display()),
        None => SYSTEM_PATH.to_string(),
    }
}

/// One headless run of Claude Code in a scratch home and project.
pub struct Run {
    pub home: tempfile::TempDir,
    /// The home directory, seen from outside.
    #[allow(dead_code)]
    pub home_path: PathBuf,
    pub project: PathBuf,
    pub state: PathBuf,
    pub output: Output,
    /// Kept so the sandbox world outlives the run.
    #[allow(dead_code)]
    pub sandbox: Option<Sandboxed>,
}

impl Run {
    /// The stream-json lines Claude Code printed.
    pub fn stream(&self) -> Vec<Value> {
        String::from_utf8_lossy(&self.output.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    pub fn describe(&self) -> String {
        format!(
            "claude (HOME {}) exited {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.home.path().display(),
            self.output.status.code(),
            String::from_utf8_lossy(&self.output.stdout),
            String::from_utf8_lossy(&self.output.stderr)
        )
    }
}

/// The tools a scripted session uses, allowed up front.
pub const ALLOWED_TOOLS: &str = "Bash Read Write Edit";

/// A fresh temporary HOME with a project directory `proj` in it, and what a
/// test adds to the run: hook entries beyond `nd7 setup`'s, and environment
/// variables for Claude Code (and so for its tools and hooks).
pub struct Workspace {
    pub home: tempfile::TempDir,
    pub project: PathBuf,
    pub extra_hooks: Vec<(&'static str, Value)>,
    pub env: Vec<(String, String)>,
    /// Arguments for Claude Code after the usual ones (a later
    /// `--permission-mode` wins).
    pub args: Vec<String>,
    /// Set by [`Workspace::sandboxed`]: run Claude Code under `nd7 run`.
    pub sandbox: Option<Sandboxed>,
    /// Run Claude Code with no nd7 at all (no `nd7 setup`, no hooks): the
    /// baseline of the whole-session benchmark.
    pub bare: bool,
    /// Claude Code's `permissions` in the user's settings, beside nd7's hooks.
    pub permissions: Option<Value>,
    /// `--allowedTools`: by default every tool a script uses, so that a
    /// headless run is not refused by Claude Code itself; `None` leaves the
    /// flag out (the permission tests).
    pub allowed_tools: Option<&'static str>,
    /// `nd7 run`'s own options (`--preset`, `--allow`), before the program.
    pub run_options: Vec<String>,
    /// The exit status the run must end with: 0, or 3 under `nd7 run` when
    /// the session changes a file that runs later.
    pub status: i32,
    /// Under `nd7 run`: the nd7 to run it with (`nd7-exec` beside it), so
    /// that its hooks name that copy; the build's by default.
    pub nd7: Option<PathBuf>,
}

/// What a run under `nd7 run` needs beyond a home: the home mounted over
/// the account's (nd7 takes the home from the account database), and a temp
/// directory and an "outside" that are neither the home nor the project.
pub struct Sandboxed {
    pub world: std::sync::Arc<crate::world::World>,
}

impl Workspace {
    pub fn new() -> Workspace {
        let home = tempfile::tempdir().expect("tempdir");
        let project = home.path().join("proj");
        std::fs::create_dir_all(&project).expect("mkdir proj");
        Workspace {
            home,
            project,
            extra_hooks: Vec::new(),
            env: Vec::new(),
            args: Vec::new(),
            sandbox: None,
            bare: false,
            permissions: None,
            allowed_tools: Some(ALLOWED_TOOLS),
            run_options: Vec::new(),
            status: 0,
            nd7: None,
        }
    }

    /// A workspace whose Claude Code runs under `nd7 run`, in the scratch
    /// world of the sandbox tests: its home is the world's home, its
    /// project the world's project.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub fn sandboxed(world: std::sync::Arc<crate::world::World>) -> Workspace {
        // The TempDir only removes the world when dropped; the world owns it.
        let home = tempfile::Builder::new()
            .prefix("unused-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("tempdir");
        Workspace {
            home,
            project: world.proj(),
            extra_hooks: Vec::new(),
            env: Vec::new(),
            args: Vec::new(),
            sandbox: Some(Sandboxed { world }),
            bare: false,
            permissions: None,
            allowed_tools: Some(ALLOWED_TOOLS),
            run_options: Vec::new(),
            status: 0,
            nd7: None,
        }
    }

    /// The home directory as seen from outside.
    pub fn home_path(&self) -> PathBuf {
        match &self.sandbox {
            Some(s) => s.world.home(),
            None => self.home.path().to_path_buf(),
        }
    }
}

/// Runs `claude -p prompt` with nd7's hooks, against the mock API at `api_url`,
/// in `workspace`'s HOME with its project as the working directory.
pub fn run(claude: &Path, api_url: &str, prompt: &str, workspace: Workspace) -> Run {
    let home_path = workspace.home_path();
    let Workspace {
        home,
        project,
        extra_hooks,
        env,
        args,
        sandbox,
        bare,
        permissions,
        allowed_tools,
        run_options,
        status: _,
        nd7,
    } = workspace;
    let state = match &sandbox {
        Some(s) => s.world.state(),
        None => home_path.join(".local/state"),
    };
    // The hooks are the ones `nd7 setup` writes, written by it: into a file
    // passed with --settings, or, under `nd7 run` (which passes its own
    // --settings), into the user settings, as on a real machine.
    let settings = match &sandbox {
        Some(_) => home_path.join(".claude/settings.json"),
        None => home_path.join("nd7-settings.json"),
    };
    let setup = Command::new(env!("CARGO_BIN_EXE_nd7"))
        .args(["setup", "--settings"])
        .arg(&settings)
        .env("HOME", &home_path)
        .env("PATH", path_with(claude))
        .stdin(Stdio::null())
        .output()
        .expect("run nd7 setup");
    assert!(
        setup.status.success(),
        "nd7 setup: {}",
        String::from_utf8_lossy(&setup.stderr)
    );
    if bare {
        std::fs::write(&settings, "{}").expect("no hooks");
    }
    if let Some(permissions) = permissions {
        let mut value: Value =
            serde_json::from_slice(&std::fs::read(&settings).expect("read settings"))
                .expect("json");
        value["permissions"] = permissions;
        std::fs::write(&settings, value.to_string()).expect("write settings");
    }
    if !extra_hooks.is_empty() {
        let mut value: Value =
            serde_json::from_slice(&std::fs::read(&settings).expect("read settings"))
                .expect("json");
        for (event, hook) in extra_hooks {
            value["hooks"][event]
                .as_array_mut()
                .expect("setup wrote a list for every recorded event")
                .push(serde_json::json!({ "hooks": [hook] }));
        }
        std::fs::write(&settings, value.to_string()).expect("write settings");
    }
    let mut command = match &sandbox {
        Some(s) => {
            let claude = claude.display().to_string();
            let mut args: Vec<&str> = vec!["run"];
            args.extend(run_options.iter().map(String::as_str));
            args.extend([claude.as_str(), "-p", prompt]);
            match &nd7 {
                Some(nd7) => s.world.command(&nd7.to_string_lossy(), &args),
                None => s.world.nd7(&args),
            }
        }
        None => {
            let mut command = Command::new(claude);
            command.args(["-p", prompt, "--settings"]).arg(&settings);
            command
        }
    };
    // Seen from inside: under `nd7 run` the home is the account's path.
    let inner_home = match &sandbox {
        Some(s) => s.world.acct.clone(),
        None => home_path.clone(),
    };
    let tmpdir: Vec<(&str, PathBuf)> = match &sandbox {
        Some(s) => vec![("TMPDIR", s.world.root.join("tmp"))],
        None => Vec::new(),
    };
    let mut child = command
        .args([
            "--output-format",
            "stream-json",
            "--verbose",
            "--model",
            "claude-sonnet-4-5",
            "--permission-mode",
            "default",
        ])
        .args(
            allowed_tools
                .into_iter()
                .flat_map(|t| ["--allowedTools", t]),
        )
        .args(args)
        .current_dir(&project)
        .env_clear()
        .env("PATH", SYSTEM_PATH)
        .env("HOME", &inner_home)
        .env(
            "XDG_STATE_HOME",
            match &sandbox {
                Some(s) => s.world.inner_state(),
                None => inner_home.join(".local/state"),
            },
        )
        .env("ANTHROPIC_BASE_URL", api_url)
        .env("ANTHROPIC_API_KEY", "sk-ant-e2e-dummy")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_ERROR_REPORTING", "1")
        .envs(env)
        .envs(tmpdir)
        .stdin(Stdio::null())
        // Files, not pipes: nobody reads a pipe while we wait, and a full one
        // would stall Claude Code.
        .stdout(File::create(home.path().join("claude.stdout")).expect("stdout file"))
        .stderr(File::create(home.path().join("claude.stderr")).expect("stderr file"))
        .spawn()
        .expect("start claude");
    // Claude Code must finish a scripted session in well under this; a hang
    // is a failure, not a wait.
    let deadline = Instant::now() + Duration::from_secs(180);
    while child.try_wait().expect("wait for claude").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = child.wait().expect("wait for claude");
    let output = Output {
        status,
        stdout: std::fs::read(home.path().join("claude.stdout")).unwrap_or_default(),
        stderr: std::fs::read(home.path().join("claude.stderr")).unwrap_or_default(),
    };
    Run {
        home,
        home_path,
        project,
        state,
        output,
        sandbox,
    }
}
