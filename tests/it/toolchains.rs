//! A day's toolchains under `nd7 run claude`, against the real npm, crates.io
//! and PyPI registries, as the ordinary account: `npm install`, `cargo add` and
//! `cargo build` of a crate not downloaded before, `pip install` in a venv
//! and with `--user` (Debian asks for `--break-system-packages`), and the Go
//! preset's places (the Go proxy is not reachable from CI, so no download).
//!
//! With the presets in `~/.nd7/grants` every step works (each preset also
//! brings its registry's hosts, issue 31). Without them, but with those hosts
//! as `net` lines, each is refused by the floor, and nd7's explanation, with the `nd7 allow` that
//! would have allowed it, reaches the model (the next request) and the user
//! (`nd7 run`'s summary at its end). pip in a venv fails without its preset
//! when it builds a wheel: it checks its cache with access(2), which Landlock
//! does not answer, so it goes on to build into the cache and stops at the
//! refused directory, naming it ("Building wheel for docopt failed: [Errno
//! 13] Permission denied: '~/.cache'"). What it only downloads as wheels it
//! installs without the preset, caching nothing (it swallows the HTTP cache's
//! failed writes).
//!
//! Runs once, with the default Claude Code (it does not depend on the
//! version, and downloads from three registries). The account reaches the
//! tests' Rust toolchain through a read-only bind mount (it usually lives
//! under root's home, which the account cannot enter).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use crate::common::*;
use crate::e2e::mock_api::{Block, bash};
use crate::e2e::{Session, claude, play};
use crate::world::World;

/// The steps, each a Bash call, with the preset it needs.
fn steps() -> Vec<(String, &'static str)> {
    // Debian marks its Python as the distribution's (PEP 668), and pip
    // installs into the user site only when told to break that.
    let user_flag = if externally_managed() {
        " --break-system-packages"
    } else {
        ""
    };
    vec![
        (
            "npm install --no-audit --no-fund --loglevel=error is-number@7.0.0".into(),
            "npm",
        ),
        (
            "cargo new -q --vcs none demo && cd demo && cargo add -q cfg-if@1.0.0 && cargo build -q && echo built".into(),
            "cargo",
        ),
        // docopt 0.6.2 is on PyPI as an sdist alone (pure Python), so pip
        // builds its wheel, into its wheel cache (~/.cache/pip/wheels).
        // `--use-pep517`: pip 23.1 and later build every sdist that way;
        // Debian 12's pip 23.0.1 would run the project's `setup.py install`
        // instead, which uses no cache.
        (
            "python3 -m venv .venv && .venv/bin/pip install -q --disable-pip-version-check --use-pep517 docopt==0.6.2 && .venv/bin/python -c 'import docopt' && echo venv-ok".into(),
            "pip",
        ),
        (
            format!("python3 -m pip install -q --disable-pip-version-check --user{user_flag} iniconfig==2.0.0 && echo user-ok"),
            "python-user",
        ),
        (
            "mkdir -p ~/go/pkg/mod/cache ~/.cache/go-build/00 && echo go-ok".into(),
            "go",
        ),
    ]
}

/// Whether the system's python3 is marked as the distribution's
/// (`EXTERNALLY-MANAGED` beside its standard library, PEP 668).
fn externally_managed() -> bool {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import os, sysconfig; print(os.path.exists(os.path.join(sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED')))",
        ])
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .output()
        .expect("python3");
    assert!(out.status.success(), "{out:?}");
    stdout(&out).trim() == "True"
}

/// The files below `dir` whose names start with `prefix`.
fn found_below(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                todo.push(path);
            } else if entry.file_name().to_string_lossy().starts_with(prefix) {
                out.push(path);
            }
        }
    }
    out
}

/// A world whose account can run the tests' Rust toolchain, and the PATH
/// that finds it.
fn world_with_rust() -> (Arc<World>, String) {
    let world = Arc::new(World::new());
    let sysroot = std::process::Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .expect("rustc --print sysroot");
    assert!(sysroot.status.success(), "{sysroot:?}");
    let sysroot = PathBuf::from(stdout(&sysroot).trim());
    assert!(
        sysroot.join("bin/cargo").exists(),
        "no cargo beside rustc in {}",
        sysroot.display()
    );
    let rust = world.bind(&sysroot, "rust");
    // The project is a workspace of its own, so `demo` joins it (and builds
    // into proj/target): without one, `cargo new` would join the workspace it
    // sits in (nd7's, the world being under its target/) and write that
    // manifest, which no sandbox allows.
    std::fs::write(world.proj().join("Cargo.toml"), "[workspace]\n")
        .expect("write proj/Cargo.toml");
    let path = format!("{}/bin:/usr/local/bin:/usr/bin:/bin", rust.display());
    (world, path)
}

fn session(world: &Arc<World>, path: &str) -> Session {
    let mut workspace = claude::Workspace::sandboxed(world.clone());
    workspace.env.push(("PATH".into(), path.into()));
    // pip's and npm's own notices stay out of the way.
    workspace.env.push(("PIP_NO_INPUT".into(), "1".into()));
    let s = play(workspace, |_| {
        let mut turns: Vec<Vec<Block>> = steps().iter().map(|(c, _)| vec![bash(c)]).collect();
        turns.push(vec![Block::Text("Done.".into())]);
        turns
    });
    assert_eq!(
        s.denials(),
        Value::Array(Vec::new()),
        "{}",
        s.run.describe()
    );
    s
}

/// The newest user message of each main-loop request after the first: what
/// the model read right after each tool call.
fn after_each_call(s: &Session) -> Vec<String> {
    s.api
        .requests()
        .iter()
        .skip(1)
        .map(|r| {
            r["messages"]
                .as_array()
                .and_then(|m| m.iter().rfind(|m| m["role"] == "user"))
                .map(Value::to_string)
                .unwrap_or_default()
        })
        .collect()
}

fn exists(path: &Path) -> bool {
    path.exists()
}

#[test]
fn npm_cargo_pip_and_go_work_with_the_presets_and_explain_themselves_without() {
    // Without the presets, but with their registries' hosts (`net` lines,
    // issue 31): what is refused is the caches, by the floor.
    let (world, path) = world_with_rust();
    std::fs::create_dir_all(world.home().join(".nd7")).expect("mkdir ~/.nd7");
    let hosts: String = ["npm", "cargo", "pip"]
        .iter()
        .filter_map(|p| nd7_core::policy::net::net_preset(p))
        .flat_map(|p| p.hosts.iter().map(|h| format!("net {h}\n")))
        .collect();
    std::fs::write(world.home().join(".nd7/grants"), hosts).expect("write grants");
    let s = session(&world, &path);
    let results = s.api.tool_results();
    let told = after_each_call(&s);
    let err = stderr(&s.run.output);
    let steps = steps();
    for (i, (command, preset)) in steps.iter().enumerate() {
        let allow = format!("nd7 allow --preset {preset}");
        let (_, output, failed) = &results[i];
        assert!(failed, "{command} was not refused: {output}");
        assert!(told[i].contains("nd7's sandbox"), "{command}: {}", told[i]);
        assert!(told[i].contains(&allow), "{command}: {}", told[i]);
        assert!(err.contains(&format!("`{allow}`")), "{command}: {err}");
    }
    let refused: Vec<&Value> = s
        .entries
        .iter()
        .filter(|e| e["kind"] == "floor_refused")
        .collect();
    assert_eq!(refused.len(), steps.len(), "{:?}", s.kinds());
    // pip said which directory it could not make, and stopped there.
    assert!(
        results[2].1.contains("Building wheel for docopt failed")
            && results[2].1.contains("Permission denied"),
        "{:?}",
        results[2]
    );
    assert!(!exists(&world.proj().join("target")));
    assert!(!exists(&world.home().join(".local/lib")));

    // With them, in ~/.nd7/grants (which nothing inside a session can write).
    let (world, path) = world_with_rust();
    std::fs::create_dir_all(world.home().join(".nd7")).expect("mkdir ~/.nd7");
    let presets: String = steps.iter().map(|(_, p)| format!("preset {p}\n")).collect();
    std::fs::write(world.home().join(".nd7/grants"), presets).expect("write grants");
    let s = session(&world, &path);
    let results = s.api.tool_results();
    for (i, (command, _)) in steps.iter().enumerate() {
        let (_, output, failed) = &results[i];
        assert!(!failed, "{command}: {output}\n{}", s.run.describe());
    }
    assert!(results[1].1.contains("built") && results[2].1.contains("venv-ok"));
    assert!(results[3].1.contains("user-ok") && results[4].1.contains("go-ok"));
    assert!(exists(
        &world.proj().join("node_modules/is-number/package.json")
    ));
    assert!(exists(&world.proj().join("target/debug")));
    assert!(exists(&world.home().join(".cargo/registry/cache")));
    // The wheel pip built went into its cache this time.
    let wheels = found_below(&world.home().join(".cache/pip/wheels"), "docopt-0.6.2-");
    assert_eq!(wheels.len(), 1, "{wheels:?}");
    let user_site = std::fs::read_dir(world.home().join(".local/lib"))
        .expect("~/.local/lib")
        .filter_map(Result::ok)
        .any(|d| {
            d.path()
                .join("site-packages/iniconfig/__init__.py")
                .exists()
        });
    assert!(user_site, "iniconfig in the user site");
    // Nothing was refused, and nothing of the presets reaches ~/.cargo/bin.
    assert!(
        !s.entries.iter().any(|e| e["kind"] == "floor_refused"),
        "{:?}",
        s.kinds()
    );
    let err = stderr(&s.run.output);
    assert!(
        err.contains("nd7 run: commands may also write ~/.npm/_cacache, ~/.npm/_logs (~/.nd7/grants:1, preset npm); "),
        "{err}"
    );
    assert!(!err.contains("the sandbox refused"), "{err}");
    let start = &s.entries[0];
    assert_eq!(start["kind"], "run_start");
    let granted: Vec<&str> = start["body"]["grants"]
        .as_array()
        .expect("grants in run_start")
        .iter()
        .filter_map(|g| g["from"].as_str())
        .collect();
    assert!(
        granted.contains(&"~/.nd7/grants:2, preset cargo"),
        "{granted:?}"
    );
    crate::e2e::assert_clean(&s);
}
