//! Issue 29 item 1 attacked again, with fresh eyes, after ADR-0090: a
//! prompt-injected agent (a script under `nd7 run`) tries to make the
//! user's terminal show something false, hide the warning, or type into the
//! shell after `nd7 run` returns, and tries to make any nd7 command print a
//! byte it chose that acts on a terminal. Each test is one attack; those
//! still open are ignored with the reason.
#![cfg(target_os = "linux")]

use crate::inert::{Tmux, acting, eventually, repo};
use crate::world::*;

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
