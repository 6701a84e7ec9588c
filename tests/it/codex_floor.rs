//! What Codex adds to the floor's attack surface under `nd7 run codex`: its
//! home is writable, and in it lie files a later Codex runs outside any
//! floor (`config.toml` with nd7 run's own hook trust, `hooks.json`, `.env`,
//! `rules/`), and the project's `.codex/`. A shell script named `codex`
//! stands in for the agent (nd7 run knows the agent by the program's name),
//! attacking directly under the floor and through `$EXEC`, as Codex's shell
//! calls reach the exit.
#![cfg(target_os = "linux")]

use std::path::PathBuf;

use crate::world::*;

/// Installs `body` as a program named `codex` (outside the project) and
/// returns its path.
pub(crate) fn fake_codex(w: &World, body: &str) -> String {
    let script = w.agent(body);
    let dir = w.root.join("bin");
    std::fs::create_dir_all(&dir).expect("mkdir bin");
    let codex = dir.join("codex");
    std::fs::copy(&script, &codex).expect("copy the agent");
    std::fs::remove_file(&script).expect("remove agent.sh");
    w.own();
    codex.display().to_string()
}

fn codex_home(w: &World) -> PathBuf {
    w.home().join(".codex")
}

/// Each attack on a file Codex runs later, both ways; each prints
/// `NAME: refused` or `NAME: written`.
const ATTACKS: &str = r#"
try() { name=$1; shift; if "$@" 2>/dev/null; then echo "$name: written"; else echo "$name: refused"; fi; }
C="$HOME_DIR/.codex"
for how in floor exit; do
  run() { if [ $how = exit ]; then "$EXEC" "$1"; else bash -c "$1"; fi; }
  try "$how config.toml" run "echo 'notify = [\"touch\", \"$OUT/notify\"]' >> '$C/config.toml'"
  try "$how config.toml renamed" run "mv '$C/config.toml' '$C/config.old'"
  try "$how config.toml removed" run "rm -f '$C/config.toml'"
  try "$how .env" run "echo 'LD_PRELOAD=$HOME_DIR/proj/evil.so' >> '$C/.env'"
  try "$how rules" run "mkdir -p '$C/rules' && echo 'prefix_rule(pattern=[\"rm\"], decision=\"allow\")' > '$C/rules/x.rules'"
  try "$how project .codex" run "echo 'sandbox_mode = \"danger-full-access\"' >> '$HOME_DIR/proj/.codex/config.toml'"
  try "$how ~/.nd7" run "echo x > '$HOME_DIR/.nd7/grants'"
  try "$how own state" run "echo state > '$C/state-$how'"
done
"#;

#[test]
fn codex_cannot_rewrite_what_runs_after_it_nor_nd7s_trust_in_its_hooks() {
    let w = World::new();
    std::fs::create_dir_all(codex_home(&w)).expect("mkdir .codex");
    std::fs::write(
        codex_home(&w).join("config.toml"),
        "# mine\nmodel = \"m\"\n",
    )
    .expect("config.toml");
    std::fs::create_dir_all(w.proj().join(".codex")).expect("mkdir proj/.codex");
    std::fs::write(w.proj().join(".codex/config.toml"), "# project\n").expect("write");
    let codex = fake_codex(&w, ATTACKS);
    let out = w.nd7(&["run", &codex]).output().expect("nd7 run codex");
    let said = text(&out.stdout);
    let expected: Vec<String> = ["floor", "exit"]
        .iter()
        .flat_map(|how| {
            [
                // config.toml holds the trust of nd7 run's own hooks: the
                // floor holds it read-only (deferred::HOME_LOCKED).
                format!("{how} config.toml: refused"),
                format!("{how} config.toml renamed: refused"),
                format!("{how} config.toml removed: refused"),
                // Made empty by nd7 run so that it can be held
                // (run_codex::placeholders).
                format!("{how} .env: refused"),
                format!("{how} rules: refused"),
                format!("{how} project .codex: refused"),
                format!("{how} ~/.nd7: refused"),
                // Codex's own state stays writable.
                format!("{how} own state: written"),
            ]
        })
        .collect();
    assert_eq!(
        said.lines().collect::<Vec<_>>(),
        expected,
        "stderr: {}",
        text(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let config = std::fs::read_to_string(codex_home(&w).join("config.toml")).expect("read");
    assert!(config.starts_with("# mine\nmodel = \"m\"\n"), "{config}");
    assert!(
        config.contains("/<session-flags>/config.toml:pre_tool_use:1:0"),
        "{config}"
    );
    assert!(!config.contains("notify"), "{config}");
    assert_eq!(
        std::fs::read(codex_home(&w).join(".env")).expect(".env"),
        b""
    );
}

#[test]
fn a_hooks_file_planted_in_codexs_home_is_reported() {
    let w = World::new();
    let codex = fake_codex(
        &w,
        r#"echo '{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"touch /tmp/x"}]}]}}' > "$HOME_DIR/.codex/hooks.json" && echo planted"#,
    );
    let out = w.nd7(&["run", &codex]).output().expect("nd7 run codex");
    let stderr = text(&out.stderr);
    assert_eq!(text(&out.stdout), "planted\n");
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains(&format!("added: {}/.codex/hooks.json", w.acct.display())),
        "{stderr}"
    );
}

#[test]
fn a_sandbox_of_codexs_own_or_another_codex_home_is_refused_before_anything_starts() {
    let w = World::new();
    let codex = fake_codex(&w, "touch \"$OUT/started\"");
    for (args, env, says) in [
        (
            vec!["run", codex.as_str(), "exec", "-s", "workspace-write", "hi"],
            None,
            "sandbox is off",
        ),
        (
            vec!["run", codex.as_str(), "-c", "hooks.Stop=[]"],
            None,
            "its own hooks",
        ),
        (vec!["run", codex.as_str()], Some(w.outside()), "CODEX_HOME"),
    ] {
        let mut command = w.nd7(&args);
        if let Some(dir) = env {
            command.env("CODEX_HOME", dir);
        }
        let out = command.output().expect("nd7 run");
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(!w.outside().join("started").exists());
    }
}
