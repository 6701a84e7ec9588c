//! `nd7 run` under Seatbelt on a real Mac, with a shell script as the agent
//! and Bash commands through `nd7-exec`. There is no mount namespace to put
//! a scratch home over the account's, so these write into the real home:
//! scratch directories, `~/.nd7/secrets` and `~/.claude/settings.json` (put
//! back afterwards). They are therefore ignored by default and run by the
//! macOS CI job (`.github/workflows/macos.yml`) with `--ignored` and one test
//! at a time, on a runner whose home is thrown away. None of them has run on
//! a Mac in this project's own CI, which is Linux.
//!
//! What they check is what the Linux tests check through `World`, as the
//! attacker would try it, each line of an agent script printing `name:yes` or
//! `name:no`:
//!
//! - the floor (`the_seatbelt_floor_holds_on_a_real_mac`): writes outside
//!   the project, by the agent and through the exit; a secret listed in
//!   `~/.nd7/secrets`, by its name, a link and where the link leads; a
//!   credential file of nd7's own list; a link in the project to outside;
//! - the record (`the_logs_and_nd7s_own_files_stay_put_with_the_home_writable`):
//!   the logs rewritten, truncated and removed, `~/.local/state`, `~/.local`,
//!   the sessions and `~/.nd7` renamed away, with the home granted and with
//!   the project being the home (the renames are `keep_in_place` in
//!   `policy::seatbelt`, ADR-0074);
//! - the files that run later, written, renamed and swapped, the project
//!   itself renamed, while ordinary work and a commit go on;
//! - grants: `nd7 allow` reaching the next command, a grant swapped for a
//!   link opening nothing, `nd7 deny` taking one back;
//! - what acts outside without a file (`Profile::outside`): signals to a
//!   process of the account's, another program's unix socket, `TIOCSTI`,
//!   `osascript`, `open`, `launchctl`;
//! - the exit's writer (ADR-0075): the agent cannot stop or kill it, a
//!   stopped front holds up nothing, a killed front ends its command with
//!   `exec_end` saying so;
//! - nothing outlives the session: daemons started by the agent and through
//!   the exit, double-forked out of the tree, are ended with it;
//! - the network (ADR-0136): only through the session's proxy, with its
//!   secret; no direct connection, no UDP, no DNS resolver, no listener
//!   beyond the loopback.
#![cfg(target_os = "macos")]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const ND7: &str = env!("CARGO_BIN_EXE_nd7");
const ND7_EXEC: &str = env!("CARGO_BIN_EXE_nd7-exec");

/// Puts a file back as it was (or removes it) when dropped.
struct Restore(PathBuf, Option<Vec<u8>>);

impl Drop for Restore {
    fn drop(&mut self) {
        match &self.1 {
            Some(bytes) => drop(std::fs::write(&self.0, bytes)),
            None => drop(std::fs::remove_file(&self.0)),
        }
    }
}

fn keep(path: PathBuf) -> Restore {
    let before = std::fs::read(&path).ok();
    Restore(path, before)
}

/// A scratch directory in the real home, with a project and an outside.
struct Scratch {
    _dir: tempfile::TempDir,
    home: PathBuf,
    base: PathBuf,
}

impl Scratch {
    fn new(prefix: &str) -> Scratch {
        let home = nd7_core::run_dir::account_home().expect("home");
        let dir = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in(&home)
            .expect("scratch dir in the home");
        let base = std::fs::canonicalize(dir.path()).expect("real path");
        for d in ["proj", "outside"] {
            std::fs::create_dir_all(base.join(d)).expect("mkdir");
        }
        Scratch {
            _dir: dir,
            home,
            base,
        }
    }

    fn proj(&self) -> PathBuf {
        self.base.join("proj")
    }

    fn outside(&self) -> PathBuf {
        self.base.join("outside")
    }

    /// Writes an agent script: `$EXEC` is nd7-exec, `$HOME_DIR` the home,
    /// `$PROJ` the project, `$OUT` the outside; `x NAME CMD…` prints
    /// `NAME:yes` when CMD succeeds, `NAME:no` otherwise; `wait_for FILE`
    /// waits (at most a minute) for FILE in the project.
    fn agent(&self, body: &str) -> PathBuf {
        let path = self.base.join("agent.sh");
        let script = format!(
            "#!/bin/bash\nEXEC='{ND7_EXEC}'; HOME_DIR='{}'; PROJ='{}'; OUT='{}'\n\
             x() {{ local name=$1; shift; if \"$@\" >/dev/null 2>&1; then echo \"$name:yes\"; else echo \"$name:no\"; fi; }}\n\
             wait_for() {{ for _ in $(seq 1200); do [ -e \"$PROJ/$1\" ] && return 0; sleep 0.05; done; echo \"timed out on $1\"; exit 99; }}\n\
             {body}\n",
            self.home.display(),
            self.proj().display(),
            self.outside().display(),
        );
        std::fs::write(&path, script).expect("agent");
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        path
    }

    /// Makes FILE in the project, which `wait_for FILE` in the agent sees.
    fn signal(&self, file: &str) {
        std::fs::write(self.proj().join(file), "").expect("signal the agent");
    }

    /// Waits (at most a minute) for the agent to make FILE in the project.
    fn wait_for(&self, file: &str) {
        let start = Instant::now();
        while !self.proj().join(file).exists() {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the agent never made {file}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// `nd7 run ARGS… AGENT` in `cwd`, to its end.
fn run(cwd: &Path, args: &[&str], agent: &Path) -> Output {
    Command::new(ND7)
        .arg("run")
        .args(args)
        .arg(agent)
        .current_dir(cwd)
        .output()
        .expect("nd7 run")
}

/// The lines an agent printed, and the run's log id from the banner.
fn outcome(out: &Output) -> (Vec<String>, String) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let id = stderr
        .lines()
        .find_map(|l| {
            l.strip_prefix("nd7 run: run ")
                .and_then(|r| r.rsplit("; log ").next())
        })
        .map(|id| id.trim().to_string())
        .unwrap_or_else(|| panic!("no log named: {stderr}"));
    (stdout.lines().map(str::to_string).collect(), id)
}

/// Asserts that every line the agent printed ends in `:no` but those named
/// in `yes`, which end in `:yes`.
fn only(lines: &[String], yes: &[&str], context: &str) {
    assert!(!lines.is_empty(), "the agent printed nothing: {context}");
    for line in lines {
        let (name, said) = line
            .rsplit_once(':')
            .unwrap_or_else(|| panic!("{line}: {context}"));
        let want = if yes.contains(&name) { "yes" } else { "no" };
        assert_eq!(said, want, "{name}: {context}");
    }
}

/// The run's chain, entry by entry.
fn entries(home: &Path, id: &str) -> Vec<Value> {
    let log = home
        .join(".local/state/nd7/sessions")
        .join(id)
        .join("events.ndjson");
    std::fs::read_to_string(&log)
        .unwrap_or_else(|e| panic!("{}: {e}", log.display()))
        .lines()
        .map(|l| serde_json::from_str(l).expect("an entry"))
        .collect()
}

/// `nd7 verify ID` exits 0.
fn assert_verifies(id: &str) {
    let out = Command::new(ND7)
        .args(["verify", id])
        .output()
        .expect("nd7 verify");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `attacks` once by the agent itself (`sh -c`) and once through the exit:
/// `@W@` becomes `agent` or `exec` in each line's name, `@RUN@` the way in.
fn both_ways(attacks: &str) -> String {
    let through = |who: &str, how: &str| attacks.replace("@W@", who).replace("@RUN@", how);
    format!(
        "{}\n{}",
        through("agent", "sh -c"),
        through("exec", "\"$EXEC\"")
    )
}

#[test]
#[ignore = "writes into the real home directory; the macOS CI job runs it with --ignored"]
fn the_seatbelt_floor_holds_on_a_real_mac() {
    let s = Scratch::new("nd7-macos-floor-");
    let (home, base) = (s.home.clone(), s.base.clone());
    std::fs::create_dir_all(base.join("secret-real")).expect("mkdir");
    std::fs::write(base.join("secret-real/key"), "SECRET").expect("write");
    std::os::unix::fs::symlink(base.join("secret-real"), base.join("secret-link"))
        .expect("symlink");
    std::fs::create_dir_all(home.join(".nd7")).expect("mkdir");
    let _secrets = keep(home.join(".nd7/secrets"));
    std::fs::write(
        home.join(".nd7/secrets"),
        format!("{}\n", base.join("secret-link").display()),
    )
    .expect("write secrets");
    let netrc = home.join(".netrc");
    let _netrc = keep(netrc.clone());
    if !netrc.exists() {
        std::fs::write(&netrc, "machine example.org login x password y\n").expect("write");
    }
    let agent = s.agent(&format!(
        r#"BASE='{base}'
cd "$PROJ"
x agent-project touch inside
x agent-outside touch "$OUT/agent"
x exec-project "$EXEC" "touch inside-exec"
x exec-outside "$EXEC" "touch '$OUT/exec'"
x agent-secret-real cat "$BASE/secret-real/key"
x agent-secret-link cat "$BASE/secret-link/key"
x exec-secret-real "$EXEC" "cat '$BASE/secret-real/key'"
x agent-netrc cat "$HOME_DIR/.netrc"
x exec-netrc "$EXEC" "cat '$HOME_DIR/.netrc'"
x agent-nd7 ls "$HOME_DIR/.nd7"
x link-in-project ln -s "$OUT" out
x agent-through-link touch out/agent
x exec-through-link "$EXEC" "touch out/exec""#,
        base = base.display(),
    ));
    let out = run(&s.proj(), &[], &agent);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let (lines, id) = outcome(&out);
    only(
        &lines,
        &["agent-project", "exec-project", "link-in-project"],
        &stderr,
    );
    assert!(s.proj().join("inside").exists() && s.proj().join("inside-exec").exists());
    assert!(
        std::fs::read_dir(s.outside())
            .expect("outside")
            .next()
            .is_none()
    );
    assert_verifies(&id);
}

/// The attacks of issue 11 on macOS: with the home writable, the logs and
/// nd7's own files are neither changed nor moved out of their denies.
/// Guards `keep_in_place` and the state's deny in `policy::seatbelt`:
/// without the first, `mv ~/.local/state ~/.local/s2` succeeds.
#[test]
#[ignore = "writes into the real home directory; the macOS CI job runs it with --ignored"]
fn the_logs_and_nd7s_own_files_stay_put_with_the_home_writable() {
    let s = Scratch::new("nd7-macos-record-");
    let home = s.home.clone();
    std::fs::create_dir_all(home.join(".nd7")).expect("mkdir");
    let _grants = keep(home.join(".nd7/grants"));
    // Every attempt, then each rename undone if it went through, so that a
    // failing run leaves the runner usable for the next check.
    let attacks = r#"L=$(ls -td "$HOME_DIR/.local/state/nd7/sessions"/run-* | head -1)
S="$HOME_DIR/.local/state"
undo() { for p in "$HOME_DIR/.local/s2:$S" "$HOME_DIR/l2:$HOME_DIR/.local" "$HOME_DIR/n2:$HOME_DIR/.nd7" "$S/nd7/s2:$S/nd7/sessions"; do [ -e "${p%%:*}" ] && "$EXEC" "mv '${p%%:*}' '${p##*:}'"; done; true; }
x @W@-mv-state @RUN@ "mv '$S' '$HOME_DIR/.local/s2'"; undo
x @W@-mv-local @RUN@ "mv '$HOME_DIR/.local' '$HOME_DIR/l2'"; undo
x @W@-mv-nd7 @RUN@ "mv '$HOME_DIR/.nd7' '$HOME_DIR/n2'"; undo
x @W@-mv-sessions @RUN@ "mv '$S/nd7/sessions' '$S/nd7/s2'"; undo
x @W@-append @RUN@ "echo forged >> '$L/events.ndjson'"
x @W@-truncate @RUN@ ": > '$L/events.ndjson'"
x @W@-rm-head @RUN@ "rm '$L/head'"
x @W@-rm-log @RUN@ "rm -r '$L'"
x @W@-link-log @RUN@ "ln '$L/events.ndjson' '$PROJ/log-link'"
x @W@-grants @RUN@ "echo / >> '$HOME_DIR/.nd7/grants'"
x @W@-home @RUN@ "touch '$HOME_DIR/.nd7-macos-home-write' && rm '$HOME_DIR/.nd7-macos-home-write'""#;
    // The home granted: the exit's commands may write all of it but these.
    let agent = s.agent(&attacks.replace("@W@", "exec").replace("@RUN@", "\"$EXEC\""));
    let home_arg = home.display().to_string();
    let out = run(&s.proj(), &["--allow", &home_arg], &agent);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let (lines, id) = outcome(&out);
    only(&lines, &["exec-home"], &stderr);
    assert_verifies(&id);
    // The project being the home: the agent itself may write all of it but
    // these, and so may the exit.
    let agent = s.agent(&both_ways(attacks));
    let out = run(&home, &[], &agent);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let (lines, id) = outcome(&out);
    only(&lines, &["agent-home", "exec-home"], &stderr);
    assert_verifies(&id);
    assert!(home.join(".local/state/nd7/sessions").is_dir());
}

/// Files that run later outside the sandbox: written, renamed and swapped
/// by the agent and through the exit with the home granted, none changes,
/// while new files and a commit go through. Guards the deferred regexes and
/// the kept directories of `policy::seatbelt`.
#[test]
#[ignore = "writes into the real home directory; the macOS CI job runs it with --ignored"]
fn files_that_run_later_cannot_be_written_renamed_or_swapped() {
    let s = Scratch::new("nd7-macos-deferred-");
    let (home, proj) = (s.home.clone(), s.proj());
    let out = Command::new("git")
        .args(["init", "-q"])
        .current_dir(&proj)
        .output()
        .expect("git");
    assert!(out.status.success(), "{out:?}");
    std::fs::write(proj.join(".envrc"), "export A=1\n").expect("envrc");
    std::fs::create_dir_all(home.join(".claude")).expect("mkdir");
    let settings = home.join(".claude/settings.json");
    let _settings = keep(settings.clone());
    let _zshenv = keep(home.join(".zshenv"));
    std::fs::write(&settings, "{}\n").expect("settings");
    let watched = [proj.join(".git/config"), proj.join(".envrc"), settings];
    let read =
        || -> Vec<Option<Vec<u8>>> { watched.iter().map(|p| std::fs::read(p).ok()).collect() };
    let before = read();
    let agent = s.agent(&format!(
        "cd \"$PROJ\"\n{}",
        both_ways(
            r#"x @W@-git-config @RUN@ "echo '[core] fsmonitor = touch $OUT/ran' >> .git/config"
x @W@-hook @RUN@ "mkdir -p .git/hooks && echo 'touch $OUT/ran' > .git/hooks/pre-commit"
x @W@-swap-git @RUN@ "mv .git .git-old"
x @W@-envrc @RUN@ "echo 'touch $OUT/ran' > .envrc"
x @W@-sub-envrc @RUN@ "mkdir -p sub && echo 'touch $OUT/ran' > sub/.envrc"
x @W@-vscode @RUN@ "mkdir .vscode"
x @W@-mcp @RUN@ "echo '{}' > .mcp.json"
x @W@-settings @RUN@ "echo '{}' > '$HOME_DIR/.claude/settings.json'"
x @W@-mv-claude @RUN@ "mv '$HOME_DIR/.claude' '$HOME_DIR/.claude-old'"
x @W@-mv-project @RUN@ "mv '$PROJ' '$PROJ-old'"
x @W@-zshenv @RUN@ "echo 'touch $OUT/ran' >> '$HOME_DIR/.zshenv'"
x @W@-new-file @RUN@ "echo work > @W@-new.txt"
x @W@-commit @RUN@ "git add @W@-new.txt && git -c user.email=a@b -c user.name=n -c commit.gpgsign=false commit -qm work""#
        )
    ));
    let home_arg = home.display().to_string();
    let out = run(&proj, &["--allow", &home_arg], &agent);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let (lines, id) = outcome(&out);
    only(
        &lines,
        &[
            "agent-new-file",
            "agent-commit",
            "exec-new-file",
            "exec-commit",
        ],
        &stderr,
    );
    assert_eq!(before, read(), "a file that runs later changed");
    assert!(!proj.join(".git/hooks/pre-commit").exists());
    assert!(!s.outside().join("ran").exists());
    assert_verifies(&id);
}

/// Reads the run's pid from `nd7 run`'s first line on stderr, and drains
/// the rest into a string returned when the run ends.
fn announced(child: &mut Child) -> (u32, std::thread::JoinHandle<String>) {
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut line = String::new();
    stderr.read_line(&mut line).expect("announcement");
    let pid = line
        .strip_prefix("nd7 run: run ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no run announced: {line:?}"));
    let rest = std::thread::spawn(move || {
        let mut rest = line;
        let _ = stderr.read_to_string(&mut rest);
        rest
    });
    (pid, rest)
}

/// `nd7 allow` reaches the next command; a grant swapped for a link opens
/// nothing, neither through the link (Seatbelt matches the real path) nor
/// under the directory's new name; `nd7 deny` takes a grant back.
#[test]
#[ignore = "writes into the real home directory; the macOS CI job runs it with --ignored"]
fn grants_reach_the_next_command_and_a_swapped_grant_opens_nothing() {
    let s = Scratch::new("nd7-macos-grants-");
    let (grant, kept, victim) = (
        s.base.join("grant"),
        s.base.join("kept"),
        s.base.join("victim"),
    );
    for d in [&grant, &kept, &victim] {
        std::fs::create_dir_all(d).expect("mkdir");
    }
    let agent = s.agent(&format!(
        r#"G='{g}'; K='{k}'; V='{v}'
x before "$EXEC" "touch '$G/a'"
touch "$PROJ/ready1"; wait_for go1
x granted "$EXEC" "touch '$G/b'"
x granted-kept "$EXEC" "touch '$K/b'"
x swap "$EXEC" "mv '$G' '$G-old' && ln -s '$V' '$G'"
x through-swap "$EXEC" "touch '$G/c'"
x renamed-grant "$EXEC" "touch '$G-old/c'"
touch "$PROJ/ready2"; wait_for go2
x after-deny "$EXEC" "touch '$K/d'""#,
        g = grant.display(),
        k = kept.display(),
        v = victim.display(),
    ));
    let mut child = Command::new(ND7)
        .arg("run")
        .arg(&agent)
        .current_dir(s.proj())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nd7 run");
    let (pid, rest) = announced(&mut child);
    let nd7 = |args: &[&str]| {
        let out = Command::new(ND7)
            .args(args)
            .arg("--run")
            .arg(pid.to_string())
            .output()
            .expect("nd7");
        assert!(out.status.success(), "{out:?}");
    };
    s.wait_for("ready1");
    nd7(&["allow", &grant.display().to_string()]);
    nd7(&["allow", &kept.display().to_string()]);
    s.signal("go1");
    s.wait_for("ready2");
    nd7(&["deny", &kept.display().to_string()]);
    s.signal("go2");
    let out = child.wait_with_output().expect("nd7 run");
    let stderr = rest.join().expect("stderr");
    assert!(out.status.success(), "{stderr}");
    let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    only(&lines, &["granted", "granted-kept", "swap"], &stderr);
    assert!(s.base.join("grant-old/b").exists());
    assert!(kept.join("b").exists() && !kept.join("d").exists());
    assert!(std::fs::read_dir(&victim).expect("victim").next().is_none());
}

/// Signals, sockets, terminal input and hand-offs to launchd, LaunchServices
/// and Apple events, by the agent and through the exit. Guards
/// `Profile::outside` in `policy::seatbelt`: without its forms every refusal
/// below is a `yes`.
#[test]
#[ignore = "writes into the real home directory; the macOS CI job runs it with --ignored"]
fn signals_sockets_terminal_input_and_handoffs_stay_inside() {
    let s = Scratch::new("nd7-macos-outside-");
    let proj = s.proj();
    let mut victim = Command::new("/bin/sleep")
        .arg("600")
        .spawn()
        .expect("victim");
    let socket = s.outside().join("x.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).expect("listen");
    listener.set_nonblocking(true).expect("nonblocking");
    // A terminal's controlling process typing into it, the injection the
    // floor refuses: exit 0 when it went in, 1 when the ioctl was refused,
    // 2 when no terminal could be made. Tried outside first, so the test
    // knows it works here.
    std::fs::write(
        proj.join("tiocsti.py"),
        "import fcntl, os, pty, sys, termios\n\
         try:\n\
         \x20   pid, fd = pty.fork()\n\
         except OSError:\n\
         \x20   sys.exit(2)\n\
         if pid == 0:\n\
         \x20   try:\n\
         \x20       fcntl.ioctl(0, termios.TIOCSTI, b'x')\n\
         \x20       os._exit(0)\n\
         \x20   except OSError:\n\
         \x20       os._exit(1)\n\
         _, status = os.waitpid(pid, 0)\n\
         sys.exit(os.waitstatus_to_exitcode(status))\n",
    )
    .expect("tiocsti.py");
    std::fs::write(
        proj.join("connect.py"),
        "import socket, sys\ns = socket.socket(socket.AF_UNIX)\ns.connect(sys.argv[1])\n",
    )
    .expect("connect.py");
    std::fs::write(
        proj.join("own.py"),
        "import os, socket\np = 'own.sock'\n\
         if os.path.exists(p): os.remove(p)\n\
         l = socket.socket(socket.AF_UNIX); l.bind(p); l.listen(1)\n\
         c = socket.socket(socket.AF_UNIX); c.connect(p)\n",
    )
    .expect("own.py");
    let control = Command::new("python3")
        .arg("tiocsti.py")
        .current_dir(&proj)
        .status()
        .expect("python3");
    assert!(
        control.success(),
        "TIOCSTI fails even outside the sandbox here ({control}), so this test cannot tell"
    );
    let attacks = format!(
        r#"VICTIM={victim}; SOCK='{socket}'
x @W@-stop-outside @RUN@ "kill -STOP $VICTIM"
x @W@-kill-outside @RUN@ "kill -KILL $VICTIM"
x @W@-own-child @RUN@ 'sleep 100 & kill $!'
x @W@-socket-outside @RUN@ "python3 connect.py '$SOCK'"
x @W@-socket-own @RUN@ "python3 own.py"
x @W@-tiocsti @RUN@ "python3 tiocsti.py"
x @W@-tiocsti-refused @RUN@ "python3 tiocsti.py; [ \$? -eq 1 ]"
x @W@-osascript @RUN@ "/usr/bin/osascript -e 'return 1'"
x @W@-open @RUN@ "/usr/bin/open -g '$OUT'"
x @W@-launchctl @RUN@ "/bin/launchctl print gui/$(id -u)""#,
        victim = victim.id(),
        socket = socket.display(),
    );
    let agent = s.agent(&format!("cd \"$PROJ\"\n{}", both_ways(&attacks)));
    let out = run(&proj, &[], &agent);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let (lines, id) = outcome(&out);
    only(
        &lines,
        &[
            "agent-own-child",
            "agent-socket-own",
            "agent-tiocsti-refused",
            "exec-own-child",
            "exec-socket-own",
            "exec-tiocsti-refused",
        ],
        &stderr,
    );
    let alive = victim.try_wait().expect("victim");
    assert!(alive.is_none(), "the victim was killed from inside");
    let stat = Command::new("ps")
        .args(["-o", "stat=", "-p", &victim.id().to_string()])
        .output()
        .expect("ps");
    assert!(
        !String::from_utf8_lossy(&stat.stdout).contains('T'),
        "the victim was stopped from inside"
    );
    assert!(
        matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "a connection reached the outside socket"
    );
    let _ = victim.kill();
    let _ = victim.wait();
    assert_verifies(&id);
}

/// The exit's writer is out of the agent's reach (ADR-0075): it cannot be
/// stopped or killed from inside; the front, the agent's own child, can be
/// stopped without holding up the next command, and killed, which ends its
/// command with `exec_end` saying the caller went away (the writer's
/// lifeline; without it the command runs on until the session's end, and
/// its `exec_end` says signal 9).
#[test]
#[ignore = "writes into the real home directory; the macOS CI job runs it with --ignored"]
fn the_exits_writer_cannot_be_stopped_and_a_killed_front_ends_its_command() {
    let s = Scratch::new("nd7-macos-writer-");
    let agent = s.agent(
        r#"cd "$PROJ"
writer_of() { for _ in $(seq 200); do W=$(pgrep -P "$1") && { echo "$W"; return 0; }; sleep 0.05; done; return 1; }
"$EXEC" 'sleep 3' & F=$!
W=$(writer_of $F)
x writer-found test -n "$W"
x stop-writer kill -STOP $W
x kill-writer kill -KILL $W
x stop-front kill -STOP $F
x while-stopped "$EXEC" 'echo ok'
kill -CONT $F; wait $F
"$EXEC" "sleep 30; touch '$PROJ/late'" & F2=$!
writer_of $F2 >/dev/null
x kill-front kill -KILL $F2
wait $F2 2>/dev/null
x late-ran test -e late"#,
    );
    let out = run(&s.proj(), &[], &agent);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let (lines, id) = outcome(&out);
    only(
        &lines,
        &["writer-found", "stop-front", "while-stopped", "kill-front"],
        &stderr,
    );
    let entries = entries(&s.home, &id);
    let ours = |kind: &str| -> Vec<&Value> {
        entries
            .iter()
            .filter(|e| e["kind"] == kind && e["source"] == "exit:nd7")
            .collect()
    };
    let (execs, ends) = (ours("exec"), ours("exec_end"));
    assert_eq!(execs.len(), ends.len(), "every command's end is written");
    let late = execs
        .iter()
        .find(|e| {
            e["body"]["command"]
                .as_str()
                .is_some_and(|c| c.contains("late"))
        })
        .expect("the late command's exec");
    let end = ends
        .iter()
        .find(|e| e["body"]["exec"] == late["seq"])
        .expect("its exec_end");
    assert!(end["body"]["killed"].is_string(), "{end}");
    assert!(!s.proj().join("late").exists());
    assert_verifies(&id);
}

/// Daemons that leave the session's tree (double-forked, in a session of
/// their own), started by the agent and through the exit, are ended with
/// the session, and the run's log says so. Guards the session's mark and
/// `end_marked` (ADR-0075).
#[test]
#[ignore = "writes into the real home directory; the macOS CI job runs it with --ignored"]
fn nothing_the_session_started_outlives_it() {
    let s = Scratch::new("nd7-macos-orphans-");
    let marker = format!("nd7-macos-daemon-{}", std::process::id());
    std::fs::write(
        s.proj().join("daemon.py"),
        "import os, sys, time\n\
         if os.fork(): os._exit(0)\n\
         os.setsid()\n\
         if os.fork(): os._exit(0)\n\
         time.sleep(600)\n",
    )
    .expect("daemon.py");
    let agent = s.agent(&format!(
        r#"cd "$PROJ"; M='{marker}'
python3 daemon.py "$M-agent"
"$EXEC" "python3 daemon.py '$M-exec'"
running() {{ pgrep -f "$M" | wc -l | tr -d ' '; }}
for _ in $(seq 200); do [ "$(running)" -ge 2 ] && break; sleep 0.05; done
x both-running test "$(running)" -ge 2"#
    ));
    let out = run(&s.proj(), &[], &agent);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let (lines, id) = outcome(&out);
    only(&lines, &["both-running"], &stderr);
    let left = Command::new("pgrep")
        .args(["-f", &marker])
        .output()
        .expect("pgrep");
    assert!(
        left.stdout.is_empty(),
        "still running after the session: {}",
        String::from_utf8_lossy(&left.stdout)
    );
    let ended = entries(&s.home, &id)
        .into_iter()
        .filter(|e| e["kind"] == "processes_ended")
        .count();
    assert_eq!(ended, 1, "{stderr}");
    assert!(stderr.contains("ended"), "{stderr}");
    assert_verifies(&id);
}

/// The network on macOS (ADR-0136), by the agent and through the exit: a
/// listener of the test's on 127.0.0.1 (the "world", granted in
/// `~/.nd7/grants`) answers through the proxy only; directly, without the
/// proxy's secret, by UDP, through mDNSResponder's socket, or from a
/// server on every interface, nothing goes. Guards `Profile::network` and
/// the proxy's credentials; no real host or name is asked.
#[test]
#[ignore = "writes into the real home directory; the macOS CI job runs it with --ignored"]
fn the_network_leaves_only_through_the_proxy_with_its_secret() {
    use std::io::Write;
    let s = Scratch::new("nd7-macos-net-");
    let world = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the world");
    let port = world.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for mut c in world.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = c.read(&mut buf);
            let _ = c.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nworld",
            );
        }
    });
    std::fs::create_dir_all(s.home.join(".nd7")).expect("mkdir");
    let _grants = keep(s.home.join(".nd7/grants"));
    std::fs::write(
        s.home.join(".nd7/grants"),
        format!("net 127.0.0.1:{port}\n"),
    )
    .expect("write grants");
    let attacks = format!(
        r#"x @W@-proxy @RUN@ "curl -sf --max-time 10 http://127.0.0.1:{port}/"
x @W@-direct @RUN@ "curl -sf --max-time 10 --noproxy '*' http://127.0.0.1:{port}/"
x @W@-no-secret @RUN@ "curl -sf --max-time 10 -x http://127.0.0.1:${{HTTP_PROXY##*:}} http://127.0.0.1:{port}/"
x @W@-udp @RUN@ "python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b\"x\", (\"127.0.0.1\", 53))'"
x @W@-resolver @RUN@ "python3 -c 'import socket; socket.socket(socket.AF_UNIX).connect(\"/var/run/mDNSResponder\")'"
x @W@-listen-all @RUN@ "python3 -c 'import socket; socket.socket().bind((\"0.0.0.0\", 0))'"
x @W@-listen-loopback @RUN@ "python3 -c 'import socket; socket.socket().bind((\"127.0.0.1\", 0))'""#
    );
    let agent = s.agent(&both_ways(&attacks));
    let out = run(&s.proj(), &[], &agent);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("the network only through nd7's proxy")
            && !stderr.contains("what the agent may send over the network"),
        "{stderr}"
    );
    let (lines, id) = outcome(&out);
    only(
        &lines,
        &[
            "agent-proxy",
            "exec-proxy",
            "agent-listen-loopback",
            "exec-listen-loopback",
        ],
        &stderr,
    );
    let refused_without_secret = entries(&s.home, &id)
        .iter()
        .filter(|e| e["kind"] == "net")
        .any(|e| e.to_string().contains("no credentials of this session"));
    assert!(refused_without_secret, "{stderr}");
    assert_verifies(&id);
}
