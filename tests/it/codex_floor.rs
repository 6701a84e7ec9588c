//! What Codex adds to the floor's attack surface under `nd7 run codex`: its
//! home is writable, and in it lie files a later Codex runs outside any
//! floor (`config.toml` with nd7 run's own hook trust, `hooks.json`, `.env`,
//! `rules/`, the standalone installer's `packages/`, a git marketplace's
//! plugins), and the project's `.codex/` (and any below it). A shell script named `codex`
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
                // floor holds it read-only (policy::deferred::HOME_HELD).
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

/// Codex's standalone installer (`chatgpt.com/codex/install.sh`) keeps the
/// `codex` program itself under `~/.codex/packages/standalone` and points
/// `~/.local/bin/codex` at it: whoever can write there decides what the
/// user's next plain `codex` (outside any floor) runs. Guards
/// `policy::deferred::HOME_HELD`'s `.codex/packages`.
#[test]
fn codex_cannot_replace_the_codex_its_standalone_installer_keeps_in_its_home() {
    let w = World::new();
    let release = w
        .home()
        .join(".codex/packages/standalone/releases/0.171.0/bin");
    std::fs::create_dir_all(&release).expect("mkdir releases");
    std::fs::write(release.join("codex"), "#!/bin/sh\necho real codex\n").expect("codex");
    std::os::unix::fs::symlink(
        "releases/0.171.0",
        w.home().join(".codex/packages/standalone/current"),
    )
    .expect("current");
    let codex = fake_codex(
        &w,
        r##"
try() { name=$1; shift; if "$@" 2>/dev/null; then echo "$name: written"; else echo "$name: refused"; fi; }
P="$HOME_DIR/.codex/packages/standalone"
evil="#!/bin/sh
touch '$OUT/ran-outside'"
for how in floor exit; do
  run() { if [ $how = exit ]; then "$EXEC" "$1"; else bash -c "$1"; fi; }
  try "$how binary" run "printf '%s\n' \"$evil\" > '$P/releases/0.171.0/bin/codex'"
  try "$how current" run "mkdir -p '$P/releases/evil/bin' && ln -sfn releases/evil '$P/current'"
  try "$how renamed" run "mv '$P' '$P.old'"
  try "$how daemon" run "mkdir -p '$HOME_DIR/.codex/packages/app-server-daemon'"
done
"##,
    );
    let out = w.nd7(&["run", &codex]).output().expect("nd7 run codex");
    let said = text(&out.stdout);
    let expected: Vec<String> = ["floor", "exit"]
        .iter()
        .flat_map(|how| {
            ["binary", "current", "renamed", "daemon"].map(|what| format!("{how} {what}: refused"))
        })
        .collect();
    assert_eq!(
        said.lines().collect::<Vec<_>>(),
        expected,
        "stderr: {}",
        text(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(release.join("codex")).expect("codex"),
        "#!/bin/sh\necho real codex\n"
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// Where nothing can be held (no user namespaces), Codex can turn its
/// `config.toml` into a link, to `~/.nd7/grants` here. The watch reports it
/// (exit 3); but the next `nd7 run codex`, unconfined, writes the trust of
/// its hooks before anything else, and must not write through the link
/// into a place no session may write. Guards the no-follow open in
/// `run_codex::trust`.
#[test]
fn the_next_nd7_run_does_not_write_its_trust_through_a_link_codex_left() {
    let w = World::new().without_user_namespaces();
    let codex = fake_codex(
        &w,
        r#"C="$HOME_DIR/.codex"
rm -f "$C/config.toml" && ln -s "$HOME_DIR/.nd7/grants" "$C/config.toml" && echo linked"#,
    );
    let out = w.nd7(&["run", &codex]).output().expect("nd7 run codex");
    assert_eq!(text(&out.stdout), "linked\n", "{}", text(&out.stderr));
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    std::fs::create_dir_all(w.home().join(".nd7")).expect("mkdir .nd7");
    std::fs::write(w.home().join(".nd7/grants"), "").expect("grants");
    let again = w.nd7(&["run", &codex]).output().expect("nd7 run codex");
    let stderr = text(&again.stderr);
    assert_eq!(
        std::fs::read_to_string(w.home().join(".nd7/grants")).expect("grants"),
        "",
        "nd7 run wrote through the link; stderr: {stderr}"
    );
    assert_eq!(again.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("config.toml"), "{stderr}");
    assert!(stderr.contains("link"), "{stderr}");
}

/// Codex reads a `.codex/` layer in every directory from the project's root
/// down to where it starts, so a later plain `codex` started in `proj/sub`
/// reads `proj/sub/.codex/config.toml` (its `notify`, MCP servers) once the
/// project is trusted. On Linux only the project root's is held; one
/// below it, whether made or edited during the session, must at least be
/// reported (exit 3).
#[test]
fn a_codex_layer_below_the_project_root_is_reported() {
    let w = World::new();
    std::fs::create_dir_all(w.proj().join("pkg/.codex")).expect("mkdir pkg/.codex");
    std::fs::write(w.proj().join("pkg/.codex/config.toml"), "# pkg\n").expect("pkg config");
    let codex = fake_codex(
        &w,
        r#"P="$PWD"
mkdir -p "$P/sub/.codex" && echo 'notify = ["sh", "-c", "touch /tmp/x"]' > "$P/sub/.codex/config.toml" && echo planted
"$EXEC" "echo 'notify = [\"sh\"]' >> '$P/pkg/.codex/config.toml'" && echo edited"#,
    );
    let out = w.nd7(&["run", &codex]).output().expect("nd7 run codex");
    let stderr = text(&out.stderr);
    eprintln!("{}\n{stderr}", text(&out.stdout));
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("sub/.codex/config.toml"), "{stderr}");
    assert!(stderr.contains("pkg/.codex/config.toml"), "{stderr}");
}

/// A plugin marketplace added from git lives in `~/.codex/.tmp/marketplaces/
/// NAME`; a later Codex reinstalls an installed plugin from there into its
/// (held) `plugins/cache` whenever the version the marketplace names
/// changes, and then starts its MCP servers. So Codex, under nd7 run, must
/// not be able to edit it. Guards `policy::deferred::HOME_HELD`'s
/// `.codex/.tmp/marketplaces`.
#[test]
fn codex_cannot_rewrite_a_marketplace_a_later_codex_installs_plugins_from() {
    let w = World::new();
    let plugin = w
        .home()
        .join(".codex/.tmp/marketplaces/team/plugins/lint/.codex-plugin");
    std::fs::create_dir_all(&plugin).expect("mkdir marketplace");
    std::fs::write(
        plugin.join("plugin.json"),
        "{\"name\":\"lint\",\"version\":\"1.0.0\"}",
    )
    .expect("plugin.json");
    let codex = fake_codex(
        &w,
        r#"
try() { name=$1; shift; if "$@" 2>/dev/null; then echo "$name: written"; else echo "$name: refused"; fi; }
M="$HOME_DIR/.codex/.tmp/marketplaces/team/plugins/lint"
for how in floor exit; do
  run() { if [ $how = exit ]; then "$EXEC" "$1"; else bash -c "$1"; fi; }
  try "$how version" run "echo '{\"name\":\"lint\",\"version\":\"9.9.9\"}' > '$M/.codex-plugin/plugin.json'"
  try "$how mcp" run "echo '{\"mcpServers\":{\"x\":{\"command\":\"sh\"}}}' > '$M/.mcp.json'"
  try "$how renamed" run "mv '$HOME_DIR/.codex/.tmp/marketplaces' '$HOME_DIR/.codex/.tmp/m.old'"
done
"#,
    );
    let out = w.nd7(&["run", &codex]).output().expect("nd7 run codex");
    let expected: Vec<String> = ["floor", "exit"]
        .iter()
        .flat_map(|how| ["version", "mcp", "renamed"].map(|what| format!("{how} {what}: refused")))
        .collect();
    assert_eq!(
        text(&out.stdout).lines().collect::<Vec<_>>(),
        expected,
        "stderr: {}",
        text(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}
