//! The real Codex CLI, installed from the npm registry into a cache folder
//! once per version, set up by `nd7 setup --agent codex`, trusted the way
//! `/hooks` does it, and run headless (`codex exec`) against
//! [`super::mock_responses`].
//!
//! The version is one setting: `ND7_E2E_CODEX_VERSION` (default
//! [`DEFAULT_VERSION`]). If the registry cannot be reached the tests fail and
//! say so; they never skip.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub const DEFAULT_VERSION: &str = "0.171.0";

/// Codex runs with the system's PATH only, plus its own directory.
const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

pub fn version() -> String {
    std::env::var("ND7_E2E_CODEX_VERSION").unwrap_or_else(|_| DEFAULT_VERSION.to_string())
}

/// The `codex` executable of `version`, installing it first if needed.
pub fn install(version: &str) -> PathBuf {
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("codex-{version}"));
    std::fs::create_dir_all(&cache).expect("create the Codex cache folder");
    let bin = cache.join("node_modules/.bin/codex");
    // One installer at a time, across test threads and processes.
    let lock = File::create(cache.join(".install-lock")).expect("create the install lock");
    lock.lock().expect("lock the Codex cache");
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
            .arg(format!("@openai/codex@{version}"))
            .output()
            .unwrap_or_else(|e| panic!("cannot run npm to install Codex {version}: {e}"));
        assert!(
            out.status.success(),
            "cannot install Codex {version} from the npm registry (is it reachable?):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            runs(&bin, version),
            "Codex {version} installed but `codex --version` fails"
        );
    }
    bin
}

fn runs(bin: &Path, version: &str) -> bool {
    let scratch = tempfile::Builder::new()
        .prefix("codex-version-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"));
    let Ok(scratch) = scratch else { return false };
    Command::new(bin)
        .arg("--version")
        .env_clear()
        .env("PATH", SYSTEM_PATH)
        .env("HOME", scratch.path())
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|o| {
            o.status.success()
                && String::from_utf8_lossy(&o.stdout).trim() == format!("codex-cli {version}")
        })
}

/// The system PATH with `codex`'s directory first, as on a machine where it
/// is installed: `nd7 setup` and `nd7 doctor` ask it for its version.
pub fn path_with(codex: &Path) -> String {
    match codex.parent() {
        Some(dir) => format!("{}:{SYSTEM_PATH}", dir.display()),
        None => SYSTEM_PATH.to_string(),
    }
}

/// A scratch home (under the target directory: Codex will not put its
/// helper links under /tmp) with `~/.codex/config.toml` pointing Codex at a
/// mock Responses API as a custom model provider, and a project `proj`.
pub struct Workspace {
    pub root: tempfile::TempDir,
    pub home: PathBuf,
    pub project: PathBuf,
    pub codex: PathBuf,
    /// Where the witness hook leaves one file per payload Codex sent.
    pub witness: PathBuf,
}

impl Workspace {
    /// `api` is the provider's base URL (ending in /v1).
    pub fn new(codex: &Path, api: &str) -> Workspace {
        let root = tempfile::Builder::new()
            .prefix("codex-e2e-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("tempdir");
        let home = root.path().join("home");
        let project = home.join("proj");
        std::fs::create_dir_all(&project).expect("mkdir proj");
        std::fs::create_dir_all(home.join(".codex")).expect("mkdir .codex");
        let witness = root.path().join("witness");
        std::fs::create_dir_all(&witness).expect("mkdir witness");
        std::fs::write(
            home.join(".codex/config.toml"),
            format!(
                "# the e2e test's settings\nmodel = \"gpt-5.5\"\nmodel_provider = \"mock\"\n\n[model_providers.mock]\nname = \"mock\"\nbase_url = \"{api}\" # a local mock\nwire_api = \"responses\"\n"
            ),
        )
        .expect("write config.toml");
        Workspace {
            root,
            home,
            project,
            codex: codex.to_path_buf(),
            witness,
        }
    }

    pub fn codex_home(&self) -> PathBuf {
        self.home.join(".codex")
    }

    pub fn state(&self) -> PathBuf {
        self.home.join(".local/state")
    }

    /// A command run with the environment of this home.
    pub fn command(&self, program: &Path) -> Command {
        let mut command = Command::new(program);
        command
            .current_dir(&self.project)
            .env_clear()
            .env("PATH", path_with(&self.codex))
            .env("HOME", &self.home)
            .env("SHELL", "/bin/bash")
            .env("XDG_STATE_HOME", self.state())
            .stdin(Stdio::null());
        command
    }

    /// `nd7 ARGS` in this home.
    pub fn nd7(&self, args: &[&str]) -> Output {
        self.command(Path::new(env!("CARGO_BIN_EXE_nd7")))
            .args(args)
            .output()
            .expect("run nd7")
    }

    /// Adds, after nd7's, a hook on every event that writes its payload to a
    /// file of its own under `witness`: what Codex fired, to compare with
    /// what nd7 recorded.
    pub fn add_witness(&self) {
        let path = self.codex_home().join("hooks.json");
        let mut hooks: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("hooks.json"))
                .expect("json");
        let command = format!("cat > \"$(mktemp '{}/XXXXXXXX')\"", self.witness.display());
        for (_, groups) in hooks["hooks"].as_object_mut().expect("hooks") {
            groups
                .as_array_mut()
                .expect("groups")
                .push(json!({"hooks": [{"type": "command", "command": command}]}));
        }
        std::fs::write(&path, hooks.to_string()).expect("write hooks.json");
    }

    /// The payloads the witness hook saw.
    pub fn witnessed(&self) -> Vec<Value> {
        let mut seen: Vec<Value> = std::fs::read_dir(&self.witness)
            .expect("witness dir")
            .filter_map(Result::ok)
            .map(|e| {
                serde_json::from_slice(&std::fs::read(e.path()).expect("read")).expect("a payload")
            })
            .collect();
        seen.sort_by_key(|p| p.to_string());
        seen
    }

    /// The trust step, as `/hooks` in the TUI does it: Codex's app server
    /// lists the hooks with the hash it wants (`hooks/list`), and the
    /// client writes `[hooks.state."<key>"] trusted_hash` through it
    /// (`config/batchWrite`). Returns the hooks as listed before.
    pub fn trust_all(&self) -> Vec<Value> {
        let mut server = AppServer::start(self);
        server.call(
            "initialize",
            json!({"clientInfo": {"name": "nd7-e2e", "version": "0"}}),
        );
        server.notify("initialized");
        let listed = server.hooks();
        let edits: serde_json::Map<String, Value> = listed
            .iter()
            .map(|h| {
                (
                    h["key"].as_str().expect("key").to_string(),
                    json!({"trusted_hash": h["currentHash"]}),
                )
            })
            .collect();
        let written = server.call(
            "config/batchWrite",
            json!({"edits": [{"keyPath": "hooks.state", "mergeStrategy": "upsert", "value": edits}]}),
        );
        assert_eq!(written["result"]["status"], "ok", "{written}");
        let after = server.hooks();
        assert!(
            after.iter().all(|h| h["trustStatus"] == "trusted"),
            "{after:?}"
        );
        listed
    }

    /// `codex exec PROMPT` in the project, headless, with no hook-trust
    /// bypass: only hooks the user trusted run.
    pub fn exec(&self, prompt: &str) -> Output {
        let stdout = self.root.path().join("codex.stdout");
        let stderr = self.root.path().join("codex.stderr");
        let mut child = self
            .command(&self.codex)
            .args([
                "exec",
                "--json",
                "--skip-git-repo-check",
                "--sandbox",
                "workspace-write",
                prompt,
            ])
            // Files, not pipes: nobody reads a pipe while we wait.
            .stdout(File::create(&stdout).expect("stdout file"))
            .stderr(File::create(&stderr).expect("stderr file"))
            .spawn()
            .expect("start codex");
        // A scripted session takes seconds; a hang is a failure, not a wait.
        let deadline = Instant::now() + Duration::from_secs(180);
        while child.try_wait().expect("wait for codex").is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let status = child.wait().expect("wait for codex");
        Output {
            status,
            stdout: std::fs::read(stdout).unwrap_or_default(),
            stderr: std::fs::read(stderr).unwrap_or_default(),
        }
    }
}

/// `codex app-server` on standard input and output: one JSON message a line.
struct AppServer {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: std::sync::mpsc::Receiver<String>,
    next_id: u64,
    cwd: String,
}

impl AppServer {
    fn start(workspace: &Workspace) -> AppServer {
        let mut child = workspace
            .command(&workspace.codex)
            .arg("app-server")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start codex app-server");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        AppServer {
            child,
            stdin,
            lines,
            next_id: 1,
            cwd: workspace.project.display().to_string(),
        }
    }

    fn send(&mut self, message: &Value) {
        writeln!(self.stdin, "{message}").expect("write to app-server");
        self.stdin.flush().expect("flush");
    }

    fn notify(&mut self, method: &str) {
        self.send(&json!({"method": method}));
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"id": id, "method": method, "params": params}));
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|e| panic!("no answer to {method} from codex app-server: {e}"));
            let Ok(message) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if message["id"] == id {
                assert!(message.get("error").is_none(), "{method}: {message}");
                return message;
            }
        }
    }

    fn hooks(&mut self) -> Vec<Value> {
        let cwd = self.cwd.clone();
        let listed = self.call("hooks/list", json!({"cwds": [cwd]}));
        let data = &listed["result"]["data"][0];
        assert_eq!(data["errors"], json!([]), "{listed}");
        data["hooks"].as_array().cloned().unwrap_or_default()
    }
}

impl Drop for AppServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
