//! A day's work under `nd7 run`, as the ordinary account (`World`): grants
//! that last (`~/.nd7/grants`, `--allow`, `--preset`), `nd7 allow` and `deny`
//! as a person types them, and a `$HOME` that is not the account's.

use crate::world::*;

fn lines(out: &std::process::Output) -> Vec<String> {
    text(&out.stdout).lines().map(str::to_string).collect()
}

/// The run's chain: its entries, parsed.
fn chain(w: &World) -> Vec<serde_json::Value> {
    let sessions = w.home().join(".local/state/nd7/sessions");
    let dir = std::fs::read_dir(&sessions)
        .expect("sessions")
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().starts_with("run-"))
        .expect("a run's chain");
    std::fs::read_to_string(dir.path().join("events.ndjson"))
        .expect("log")
        .lines()
        .map(|l| serde_json::from_str(l).expect("entry"))
        .collect()
}

/// What `~/.nd7/grants`, `--allow` and `--preset` grant reaches commands
/// through the exit (and not the agent itself), is said in the banner and
/// recorded in `run_start`, and `nd7 deny` takes it back like any grant. A
/// section for another project grants nothing here; nothing inside can
/// change the file. Guards `run_grants::grant_at_start` (without it every write
/// below is refused).
#[test]
fn grants_that_last_reach_commands_are_shown_and_recorded() {
    let w = World::new();
    let other = w.root.join("other-project-cache");
    let given = w.root.join("given");
    std::fs::create_dir_all(&other).expect("mkdir");
    std::fs::create_dir_all(w.home().join(".nd7")).expect("mkdir");
    std::fs::write(
        w.home().join(".nd7/grants"),
        format!(
            "# every project\n~/data\n[{}]\n{}\n[/somewhere/else]\n{}\n",
            w.proj().display(),
            w.outside().display(),
            other.display()
        ),
    )
    .expect("write grants");
    let given_text = given.display().to_string();
    let agent = w.agent(&format!(
        r#"
"$EXEC" 'touch ~/data/a && echo data:0 || echo data:1'
"$EXEC" "touch '$OUT/b' && echo outside:0 || echo outside:1"
"$EXEC" "touch '{given}/c' && echo given:0 || echo given:1"
"$EXEC" 'mkdir -p ~/go/pkg/mod/m && echo go:0 || echo go:1'
"$EXEC" "touch '{other}/d' 2>/dev/null && echo other:0 || echo other:1"
touch ~/data/agent 2>/dev/null && echo agent:0 || echo agent:1
"$EXEC" 'echo preset cargo >> ~/.nd7/grants' 2>/dev/null && echo file:0 || echo file:1
touch ready; wait_for denied
"$EXEC" 'touch ~/data/after 2>/dev/null && echo after-deny:0 || echo after-deny:1'
"#,
        given = given.display(),
        other = other.display(),
    ));
    let helper = std::thread::scope(|s| {
        let h = s.spawn(|| {
            w.wait_for("ready");
            let deny = w.nd7(&["deny", "~/data"]).output().expect("deny");
            w.signal("denied");
            deny
        });
        let out = w
            .nd7(&["run", "--allow", &given_text, "--preset", "go", &agent])
            .output()
            .expect("nd7 run");
        (out, h.join().expect("helper"))
    });
    let (out, deny) = helper;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        lines(&out),
        [
            "data:0",
            "outside:0",
            "given:0",
            "go:0",
            "other:1",
            "agent:1",
            "file:1",
            "after-deny:1"
        ],
        "{}",
        text(&out.stderr)
    );
    assert!(deny.status.success(), "{}", text(&deny.stderr));
    // ~/data did not exist: nd7 run made it, for the grant.
    assert!(w.home().join("data/a").exists());
    assert!(!w.home().join("data/after").exists());
    assert!(!other.join("d").exists());
    assert!(
        !text(&std::fs::read(w.home().join(".nd7/grants")).unwrap_or_default()).contains("cargo")
    );
    let err = text(&out.stderr);
    let banner = err
        .lines()
        .find(|l| l.starts_with("nd7 run: commands may also write "))
        .unwrap_or_else(|| panic!("no grants in the banner: {err}"));
    for part in [
        "~/data (~/.nd7/grants:2)",
        &format!("{} (~/.nd7/grants:4)", w.outside().display()),
        "~/go/pkg/mod, ~/.cache/go-build (--preset go)",
        &format!("{} (--allow)", given.display()),
    ] {
        assert!(banner.contains(part), "{part} in {banner}");
    }
    assert!(!banner.contains(&other.display().to_string()), "{banner}");
    let entries = chain(&w);
    let froms: Vec<String> = entries[0]["body"]["grants"]
        .as_array()
        .expect("grants in run_start")
        .iter()
        .map(|g| g["from"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(
        froms,
        [
            "~/.nd7/grants:2",
            "~/.nd7/grants:4",
            "--preset go",
            "--preset go",
            "--allow"
        ]
    );
    assert!(
        entries
            .iter()
            .any(|e| e["kind"] == "grant" && e["body"]["change"] == "deny"),
        "the deny is in the log"
    );
    // nd7 doctor shows the same file, section by section.
    let doctor = w.nd7(&["doctor"]).output().expect("doctor");
    let doctor = text(&doctor.stdout);
    let line = doctor
        .lines()
        .find(|l| l.starts_with("ok   grants"))
        .unwrap_or_else(|| panic!("no grants in doctor: {doctor}"));
    for part in [
        "every project: ~/data".to_string(),
        format!("{}: {}", w.proj().display(), w.outside().display()),
        format!("/somewhere/else: {}", other.display()),
    ] {
        assert!(line.contains(&part), "{part} in {line}");
    }
}

/// A bad line, or a grant nd7 would never make, stops `nd7 run` before
/// anything runs, naming the file and the line.
#[test]
fn a_grants_file_nd7_cannot_follow_stops_the_run() {
    let w = World::new();
    std::fs::create_dir_all(w.home().join(".nd7")).expect("mkdir");
    let marker = w.proj().join("ran");
    for (file, says) in [
        (
            "preset cargo\npreset rubygems\n",
            "line 2: \"preset rubygems\": no preset called \"rubygems\"",
        ),
        ("data\n", "line 1: \"data\": a path must start with ~/ or /"),
        ("~/.ssh/sub\n", "~/.nd7/grants:1): "),
        ("--preset\n", "line 1"),
    ] {
        std::fs::write(w.home().join(".nd7/grants"), file).expect("write");
        let out = w
            .nd7(&["run", "touch", &marker.display().to_string()])
            .output()
            .expect("nd7 run");
        assert_eq!(out.status.code(), Some(2), "{file}");
        let err = text(&out.stderr);
        assert!(err.contains(says), "{file}: {err}");
        assert!(err.contains(".nd7/grants"), "{err}");
        assert!(!marker.exists());
        // A line nd7 cannot read: nd7 doctor fails on it too.
        if says.starts_with("line ") {
            let doctor = w.nd7(&["doctor"]).output().expect("doctor");
            let doctor = text(&doctor.stdout);
            assert!(
                doctor
                    .lines()
                    .any(|l| l.starts_with("FAIL grants") && l.contains(says)),
                "{file}: {doctor}"
            );
        }
    }
    std::fs::remove_file(w.home().join(".nd7/grants")).expect("rm");
    let out = w
        .nd7(&["run", "--preset", "nope", "true"])
        .output()
        .expect("nd7 run");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--preset nope: no such preset; the presets are npm,"),
        "{}",
        text(&out.stderr)
    );
}

/// `nd7 allow` as a person types it: a path that does not exist yet, a `~`
/// the shell left alone (quoted), a preset; and `--help` with one usage
/// line. Guards `RunDir::allow`'s tilde and creation (`src/run_dir.rs`),
/// and `--preset`.
#[test]
fn allow_takes_paths_as_a_person_types_them() {
    let w = World::new();
    let (child, _pid) = w.start_agent(
        r#"wait_for go
"$EXEC" 'touch ~/.cache/pip/x && echo pip:0 || echo pip:1'
"$EXEC" 'mkdir -p ~/.cargo/registry/x && echo cargo:0 || echo cargo:1'
"$EXEC" 'touch ~/.cargo/bin/x 2>/dev/null && echo bin:0 || echo bin:1'
touch ready; wait_for denied
"$EXEC" 'mkdir -p ~/.cargo/registry/y 2>/dev/null && echo after:0 || echo after:1'
"#,
    );
    let allow = w.nd7(&["allow", "~/.cache/pip"]).output().expect("allow");
    assert!(allow.status.success(), "{}", text(&allow.stderr));
    let pip = w.in_home(".cache/pip");
    assert_eq!(
        text(&allow.stdout)
            .lines()
            .next()
            .map(|l| l.ends_with(&format!("writes under {pip} allowed from the next command"))),
        Some(true),
        "{}",
        text(&allow.stdout)
    );
    assert!(
        text(&allow.stderr).contains(&format!("{pip} did not exist; created it")),
        "{}",
        text(&allow.stderr)
    );
    let preset = w
        .nd7(&["allow", "--preset", "cargo"])
        .output()
        .expect("allow");
    assert!(preset.status.success(), "{}", text(&preset.stderr));
    assert_eq!(
        text(&preset.stdout).lines().count(),
        5,
        "{}",
        text(&preset.stdout)
    );
    w.signal("go");
    w.wait_for("ready");
    let deny = w
        .nd7(&["deny", "--preset", "cargo"])
        .output()
        .expect("deny");
    assert!(deny.status.success(), "{}", text(&deny.stderr));
    w.signal("denied");
    let out = child.wait_with_output().expect("ends");
    assert_eq!(
        lines(&out),
        ["pip:0", "cargo:0", "bin:1", "after:1"],
        "{}",
        text(&out.stderr)
    );
    assert!(w.home().join(".cache/pip/x").exists());

    for verb in ["allow", "deny"] {
        let help = w.nd7(&[verb, "--help"]).output().expect("help");
        assert!(help.status.success());
        let help = text(&help.stdout);
        assert_eq!(help.matches("Usage:").count(), 1, "{help}");
        assert!(
            help.contains("The run: the pid `nd7 run` announced"),
            "{help}"
        );
        assert!(help.contains("<PATH>") || help.contains("[PATH]"), "{help}");
    }
    // nd7-exec --help is help, not a command.
    let help = w.command(ND7_EXEC, &["--help"]).output().expect("nd7-exec");
    assert_eq!(help.status.code(), Some(0));
    assert!(text(&help.stdout).contains("Usage: nd7-exec <COMMAND>"));
    assert!(!text(&help.stderr).contains("not inside an nd7 run"));
}

/// `$HOME` other than the account's home (`sudo -E`, containers, CI): nd7
/// run refuses, saying both, before it creates anything for either; `nd7
/// doctor` says the same. Guards `run::check_home`.
#[test]
fn a_home_that_is_not_the_accounts_is_refused_before_anything_is_made() {
    let w = World::new();
    let elsewhere = w.outside().join("home");
    std::fs::create_dir_all(&elsewhere).expect("mkdir");
    let marker = w.proj().join("ran");
    let out = w
        .nd7(&["run", "touch", &marker.display().to_string()])
        .env("HOME", &elsewhere)
        .output()
        .expect("nd7 run");
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!(
            "$HOME is {}, but your account's home (in the account database) is {}",
            elsewhere.display(),
            w.acct.display()
        )),
        "{err}"
    );
    assert!(!marker.exists());
    for home in [elsewhere.clone(), w.home()] {
        for made in [".nd7", ".local/state/nd7/sessions"] {
            assert!(
                !home.join(made).exists(),
                "{made} made in {}",
                home.display()
            );
        }
    }
    let doctor = w
        .nd7(&["doctor"])
        .env("HOME", &elsewhere)
        .output()
        .expect("doctor");
    assert!(
        text(&doctor.stdout).contains(&format!(
            "FAIL home    HOME is {}, your account's home is {}",
            elsewhere.display(),
            w.acct.display()
        )),
        "{}",
        text(&doctor.stdout)
    );
}

/// `git config core.fsmonitor` and `git config core.hooksPath` under `nd7
/// run` write `.git/config`, which nd7 holds read-only (it can make git run
/// programs outside the sandbox), with keys that run something, so the
/// keeper does not make the edit (ADR-0134): git says only "Device or
/// resource busy". The model
/// is told it was nd7 that held the file, why, and to ask the user to run
/// the command outside; the run's log has a `floor_refused` entry naming it
/// `held`, and `nd7 run` tells the user at its end. Guards `Why::Held` in
/// `policy::refusal::judge`, and the key the keeper refused being told
/// (`refusals::held_keys_untold`; without the keeper's note no key is named).
#[test]
fn git_config_writes_are_refused_and_explained() {
    let w = World::new();
    crate::deferred_reads::repo(&w);
    let out = w.run_agent(
        r#"
for cmd in "git config core.fsmonitor /tmp/x" "git config core.hooksPath /tmp/h"; do
  err=$("$EXEC" "$cmd" 2>&1); st=$?
  echo "[$cmd] $st: $err"
  # git's messages hold no double quote or backslash: only line ends to escape.
  err=$(printf '%s\n' "$err" | awk '{printf "%s\\n", $0}')
  payload='{"session_id":"s","hook_event_name":"PostToolUseFailure","tool_name":"Bash","tool_use_id":"t","tool_input":{"command":"'"$cmd"'"},"error":"Exit code '"$st"'\n'"$err"'","cwd":"'"$PWD"'"}'
  printf '%s' "$payload" | "$ND7" hook-explain; echo
done
"#,
    );
    let said = text(&out.stdout);
    let config = w.proj().join(".git/config").display().to_string();
    assert_eq!(
        said.matches("Device or resource busy").count(),
        2,
        "git fails on the held file:\n{said}"
    );
    assert_eq!(
        said.matches(&format!(
            "- {config}: held read-only by nd7 for this session"
        ))
        .count(),
        2,
        "{said}"
    );
    assert!(
        said.contains("Ask the user to run this command themselves, outside nd7 run"),
        "{said}"
    );
    // The keeper's refused key, each told once, with the call it stopped.
    for key in ["core.fsmonitor", "core.hookspath"] {
        assert_eq!(
            said.matches(&format!("because it changes `{key}`")).count(),
            1,
            "{said}"
        );
    }
    let refused: Vec<_> = chain(&w)
        .into_iter()
        .filter(|e| e["kind"] == "floor_refused")
        .collect();
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert_eq!(refused[0]["body"]["paths"][0]["why"], "held");
    let err = text(&out.stderr);
    assert!(
        err.contains("held read-only under nd7 run") && err.contains("run that command yourself"),
        "{err}"
    );
    let git = w
        .command("git", &["config", "--get", "core.fsmonitor"])
        .output()
        .expect("git");
    assert!(!git.status.success(), "the config was not changed");
}

/// `nd7 allow ~/.bashrc` says the file stays held and why, rather than
/// "allowed" (and a command still cannot change it); `nd7 allow ~` warns
/// that it opens the whole home and names what stays held beneath; `nd7
/// run` started in the home warns that the project is the whole home.
#[test]
fn allowing_a_held_file_or_the_home_says_what_it_does() {
    let w = World::new();
    std::fs::write(w.home().join(".bashrc"), "# rc\n").expect("write");
    let (child, pid) = w.start_agent(
        r#"wait_for go
"$EXEC" 'echo evil >> ~/.bashrc 2>/dev/null && echo rc:0 || echo rc:1'
"#,
    );
    let allow = w.nd7(&["allow", "~/.bashrc"]).output().expect("allow");
    assert!(allow.status.success(), "{}", text(&allow.stderr));
    let rc = w.in_home(".bashrc");
    assert_eq!(
        text(&allow.stdout),
        format!(
            "run {pid}: {rc} stays held read-only (watched and reported, if it did not exist when the run started): the shell, git, an editor or the agent runs what it says later, outside the sandbox, so no grant opens it; change it yourself, outside nd7 run\n"
        )
    );
    let home = w.nd7(&["allow", "~"]).output().expect("allow ~");
    assert!(home.status.success(), "{}", text(&home.stderr));
    let err = text(&home.stderr);
    assert!(
        err.contains("nd7 allow: warning: this opens your whole home"),
        "{err}"
    );
    assert!(err.contains("~/.bashrc"), "{err}");
    w.signal("go");
    let out = child.wait_with_output().expect("ends");
    assert_eq!(lines(&out), ["rc:1"], "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(w.home().join(".bashrc")).expect("rc"),
        "# rc\n"
    );

    let agent = w.agent("true");
    let out = w
        .command_in(&w.acct, ND7, &["run", &agent])
        .output()
        .expect("nd7 run in the home");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr)
            .contains("the project is your home directory, so every command may write all of it"),
        "{}",
        text(&out.stderr)
    );
}
