//! Attacks on the floor through what Landlock does not mediate: a file's
//! mode, owner, times and extended attributes (issue 29, item 4), and a
//! hard link to a key made before the session (item 7), each tried
//! as the ordinary account, by an agent script under `nd7 run` and by a
//! command through the exit, with every system call that changes them
//! (`floor_attrs/attrs.py`, by number). Outside the write roots each must
//! fail and change nothing; inside the project each must still work, and so
//! must the tools that use them (`chmod +x`, `touch`, `tar x`, `cp -p`, a
//! `git checkout` of an executable file).
//!
//! Guards, each seen to fail with its mechanism taken out: the filter's
//! `attrs` part (`Filter::full` in `src/sandbox/linux/seccomp.rs`; without
//! it every outside call succeeds); the write-root check in `attrs::change`
//! (`src/sandbox/linux/attrs.rs`; likewise); each command's own roots
//! (`Confinement::roots`, `src/sandbox/linux/mod.rs`); resolution beneath
//! the caller's root (`attrs::open_target`); the modes checked at the start
//! (`check_modes`, `src/run.rs`); the hard-link check (`secret_links`); the
//! allowance for a file with no name left (`attrs::inside`).
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Output;

use crate::world::*;

const ATTRS: &str = include_str!("floor_attrs/attrs.py");
const PYTHON: &str = "/usr/bin/python3";

/// Writes the probe into the project, where the agent can run it.
fn probe(w: &World) -> String {
    let path = w.proj().join("attrs.py");
    std::fs::write(&path, ATTRS).expect("write probe");
    path.display().to_string()
}

/// Sets `user.keep` on `path`, which the removals try to take off.
pub(crate) fn keep(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: both strings are NUL-terminated and live for the call; the
    // value is one readable byte.
    let r = unsafe {
        libc::setxattr(
            c.as_ptr(),
            c"user.keep".as_ptr(),
            b"k".as_ptr().cast(),
            1,
            0,
        )
    };
    assert_eq!(r, 0, "setxattr {}", path.display());
}

pub(crate) fn has_keep(path: &Path) -> bool {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("path");
    let mut buf = [0u8; 4];
    // SAFETY: reads at most `buf.len()` bytes into `buf`.
    let r = unsafe {
        libc::getxattr(
            c.as_ptr(),
            c"user.keep".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    r == 1
}

/// Mode, owner, modification time of `path`, not following a link.
fn attrs(path: &Path) -> (u32, u32, u32, i64) {
    let m = std::fs::symlink_metadata(path).expect("stat");
    (m.mode(), m.uid(), m.gid(), m.mtime())
}

fn results(out: &Output) -> Vec<String> {
    text(&out.stdout)
        .lines()
        .filter(|l| l.contains(':'))
        .map(str::to_string)
        .collect()
}

/// The agent, then a command through the exit, each try every call on
/// files and directories outside the write roots: the key, `~/.ssh`, the
/// home, nd7's own directory and a readable file. Every call fails, and
/// nothing changed.
#[test]
fn modes_owners_times_and_xattrs_outside_the_write_roots_are_refused() {
    let w = World::new();
    let probe = probe(&w);
    let home = w.home();
    std::fs::create_dir_all(home.join(".nd7")).expect("mkdir ~/.nd7");
    std::fs::write(home.join(".nd7/grants"), "").expect("grants");
    let targets = [
        home.join(".ssh/id_ed25519"),
        home.join(".ssh"),
        home.clone(),
        home.join(".nd7/grants"),
        w.outside().join("readme"),
    ];
    w.own();
    for t in &targets {
        std::fs::set_permissions(
            t,
            std::fs::Permissions::from_mode(if t.is_dir() { 0o700 } else { 0o600 }),
        )
        .expect("chmod");
        keep(t);
    }
    let before: Vec<_> = targets.iter().map(|t| attrs(t)).collect();
    // As the session names them: the home is mounted over the account's.
    let named = [
        w.in_home(".ssh/id_ed25519"),
        w.in_home(".ssh"),
        w.in_home(""),
        w.in_home(".nd7/grants"),
        w.outside().join("readme").display().to_string(),
    ];
    let key = &named[0];
    let mut body = format!(
        "cat '{key}' >/dev/null 2>&1 && echo read-key:yes\n\
         ln -s '{key}' keylink\n\
         chmod 777 keylink 2>/dev/null && echo link-chmod:yes\n\
         touch keylink 2>/dev/null && echo link-touch:yes\n\
         \"$EXEC\" 'chmod 777 keylink' 2>/dev/null && echo exec-link-chmod:yes\n"
    );
    for (i, t) in named.iter().enumerate() {
        body.push_str(&format!("{PYTHON} {probe} '{t}' agent{i}-\n"));
        body.push_str(&format!("\"$EXEC\" \"{PYTHON} {probe} '{t}' exec{i}-\"\n"));
    }
    let out = w.run_agent(&body);
    let lines = results(&out);
    // 21 path calls each, 5 more on a descriptor for the readable file (as
    // the agent: the key is unreadable to it).
    assert!(
        lines.len() >= 2 * 5 * 21,
        "{lines:?}\n{}",
        text(&out.stderr)
    );
    let succeeded: Vec<_> = lines.iter().filter(|l| l.ends_with(":yes")).collect();
    assert!(
        succeeded.is_empty(),
        "succeeded: {succeeded:?}\n{}",
        text(&out.stderr)
    );
    for (t, before) in targets.iter().zip(before) {
        assert_eq!(attrs(t), before, "{} changed", t.display());
        assert!(has_keep(t), "{}: user.keep removed", t.display());
    }
}

/// The same calls on a file and a directory in the project all work, from
/// the agent and through the exit, and so do the tools that make them.
#[test]
fn the_same_calls_inside_the_project_still_work() {
    let w = World::new();
    let probe = probe(&w);
    let proj = w.proj();
    std::fs::create_dir_all(proj.join("d")).expect("mkdir");
    std::fs::write(proj.join("f"), "f\n").expect("write");
    std::fs::write(proj.join("tools.sh"), TOOLS).expect("write tools");
    w.own();
    keep(&proj.join("f"));
    keep(&proj.join("d"));
    let out = w.run_agent(&format!(
        "cd '{p}'\n\
         {PYTHON} {probe} '{p}/f' agent-f-\n{PYTHON} {probe} '{p}/d' agent-d-\n\
         \"$EXEC\" \"{PYTHON} {probe} '{p}/f' exec-f-\"\n\
         \"$EXEC\" \"{PYTHON} {probe} '{p}/d' exec-d-\"\n\
         bash tools.sh agent\n\"$EXEC\" 'bash tools.sh exec'\n",
        p = proj.display()
    ));
    let lines = results(&out);
    // fchmod on an O_PATH descriptor is EBADF in the kernel itself.
    let failed: Vec<_> = lines
        .iter()
        .filter(|l| !l.ends_with(":yes") && !l.ends_with("fchmod-opath:no"))
        .collect();
    assert!(
        failed.is_empty(),
        "failed: {failed:?}\n{}",
        text(&out.stderr)
    );
    for who in ["agent", "exec"] {
        for tool in ["chmodx", "touch", "tar", "cp-p", "unlinked", "git"] {
            let line = format!("{who}-{tool}:yes");
            assert!(
                lines.contains(&line),
                "no {line}: {lines:?}\n{}",
                text(&out.stderr)
            );
        }
    }
    // The probe made the project's file 0777 and dated it 1970.
    assert_eq!(attrs(&proj.join("f")).0 & 0o7777, 0o777);
    assert_eq!(attrs(&proj.join("f")).3, 0);
}

/// The tools a project uses that set modes and times, each as `WHO-NAME:yes|no`.
const TOOLS: &str = r#"
who=$1
x() { local name=$1; shift; if "$@" >/dev/null; then echo "$who-$name:yes"; else echo "$who-$name:no"; fi; }
dir=$(mktemp -d "$PWD/tools.XXXXXX") && cd "$dir" || exit 1
printf 'echo ok\n' > s.sh
x chmodx sh -c 'chmod +x s.sh && ./s.sh'
x touch sh -c 'touch -d 2001-02-03 a && [ "$(stat -c %Y a)" = "$(date -d 2001-02-03 +%s)" ]'
mkdir src && echo 1 > src/f && chmod 751 src/f && touch -d 2002-01-01 src/f
x tar sh -c 'tar cf a.tar src && rm -r src && tar xpf a.tar && [ "$(stat -c %a src/f)" = 751 ] && [ "$(stat -c %Y src/f)" = "$(date -d 2002-01-01 +%s)" ]'
x cp-p sh -c 'cp -p src/f g && [ "$(stat -c %a g)" = 751 ] && [ "$(stat -c %Y g)" = "$(date -d 2002-01-01 +%s)" ]'
x unlinked /usr/bin/python3 -c 'import os; fd = os.open("u", os.O_CREAT | os.O_WRONLY); os.unlink("u"); os.fchmod(fd, 0o700); os.utime(fd)'
x git bash -c 'g() { git -c user.name=t -c user.email=t@t "$@"; }; g init -q r && cd r && printf "echo x\n" > run.sh && chmod +x run.sh && g add run.sh && g commit -qm m && rm run.sh && g checkout -q run.sh && [ -x run.sh ]'
"#;

/// A grant made with `nd7 allow` during the session counts for the commands
/// started after it, as their Landlock rules do, and not for the agent.
/// Guards the roots sent with each command's listener (`Confinement::roots`
/// in `src/sandbox/linux/mod.rs`): with the floor's sent instead, the last
/// command is refused.
#[test]
fn a_grant_made_during_the_session_counts_for_later_commands() {
    let w = World::new();
    std::fs::create_dir_all(w.home().join("data")).expect("mkdir");
    std::fs::write(w.home().join("data/f"), "").expect("write");
    let f = w.in_home("data/f");
    let (child, _pid) = w.start_agent(&format!(
        r#"x() {{ local name=$1; shift; if "$@" >/dev/null 2>&1; then echo "$name:yes"; else echo "$name:no"; fi; }}
x before "$EXEC" "chmod 640 '{f}'"
touch ready; wait_for go
x agent chmod 641 '{f}'
x exec "$EXEC" "chmod 642 '{f}'"
"#
    ));
    w.wait_for("ready");
    let allow = w.nd7(&["allow", "~/data"]).output().expect("allow");
    assert!(allow.status.success(), "{}", text(&allow.stderr));
    w.signal("go");
    let out = child.wait_with_output().expect("nd7 run");
    assert_eq!(
        text(&out.stdout).lines().collect::<Vec<_>>(),
        ["before:no", "agent:no", "exec:yes"]
    );
    assert_eq!(attrs(&w.home().join("data/f")).0 & 0o777, 0o642);
}

/// A file the session holds read-only though it lies in the project (a
/// `.envrc`, bound read-only in the session's mount namespace) keeps its
/// mode and times: the keeper resolves the agent's path in the agent's
/// mount namespace, by a relative path, an absolute one and a link.
/// Guards `open_beneath` from the caller's root in `attrs::open_target`
/// (`src/sandbox/linux/attrs.rs`): resolved from the keeper's own root, the
/// file is writable there and every call succeeds.
#[test]
fn a_file_held_read_only_in_the_project_stays_so() {
    let w = World::new();
    std::fs::write(w.proj().join(".envrc"), "export A=1\n").expect("write");
    w.own();
    let before = attrs(&w.proj().join(".envrc"));
    let out = w.run_agent(
        r#"x() { local name=$1; shift; if "$@" >/dev/null 2>&1; then echo "$name:yes"; else echo "$name:no"; fi; }
ln -s "$PWD/.envrc" link
for how in .envrc "$PWD/.envrc" link; do
  x "chmod $how" chmod 777 "$how"
  x "touch $how" touch -d 2000-01-01 "$how"
  x "exec chmod $how" "$EXEC" "chmod 777 '$how'"
done
"#,
    );
    let lines = results(&out);
    assert_eq!(lines.len(), 9, "{lines:?}\n{}", text(&out.stderr));
    assert!(
        lines.iter().all(|l| l.ends_with(":no")),
        "{lines:?}\n{}",
        text(&out.stderr)
    );
    assert_eq!(attrs(&w.proj().join(".envrc")), before);
}

/// Modes left unsafe before the session (by an earlier session on an older
/// nd7, a tool, a mistake): a grants file another account can write stops
/// `nd7 run` before it starts anything, naming the file and the fix; a key
/// others can read is warned of, and the session runs; a grants file only
/// the account's private group may write is no reason to refuse. `nd7
/// doctor` shows the findings. Guards `check_modes` in `src/run.rs` and `modes::check`.
#[test]
fn unsafe_modes_on_nd7s_files_refuse_or_warn() {
    let w = World::new();
    let grants = w.home().join(".nd7/grants");
    std::fs::create_dir_all(w.home().join(".nd7")).expect("mkdir");
    std::fs::write(&grants, "").expect("grants");
    w.own();
    let mode = |p: &Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).expect("chmod")
    };
    mode(&grants, 0o666);
    let out = w.run_agent("echo started");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(!text(&out.stdout).contains("started"));
    let named = w.in_home(".nd7/grants");
    assert!(
        err.contains(&format!("{named} is writable by every other account"))
            && err.contains(&format!("chmod go-w '{named}'"))
            && err.contains("nothing was started"),
        "{err}"
    );
    // Writable by the account's private group (umask 002): the account's alone.
    mode(&grants, 0o664);
    mode(&w.home().join(".ssh/id_ed25519"), 0o644);
    let out = w.run_agent("echo started");
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(text(&out.stdout).contains("started"));
    let key = w.in_home(".ssh/id_ed25519");
    assert!(
        err.contains(&format!(
            "nd7 run: warning: {key} can be read or written by others"
        )) && err.contains(&format!("chmod 600 '{key}'")),
        "{err}"
    );
    let doctor = w.nd7(&["doctor"]).output().expect("doctor");
    let said = text(&doctor.stdout) + &text(&doctor.stderr);
    assert!(said.contains("modes") && said.contains(&key), "{said}");
}

/// A hard link to the key made in the project before the session (issue 29,
/// item 7) would be read through the project's rules: `nd7 run` starts
/// nothing and names the key with how to find the other name. A second name
/// inside `~/.ssh` is no reason to refuse. Guards the check of
/// `secret_links::strays` in `src/run.rs`: without it the agent reads the key.
#[test]
fn a_hard_link_to_a_key_in_the_project_stops_the_session() {
    let w = World::new();
    std::fs::hard_link(w.home().join(".ssh/id_ed25519"), w.proj().join("k")).expect("link");
    let out = w.run_agent("cat k; echo started");
    let err = text(&out.stderr);
    assert!(!text(&out.stdout).contains("SECRET-KEY"), "{err}");
    assert_eq!(out.status.code(), Some(2), "{err}");
    let key = w.in_home(".ssh/id_ed25519");
    assert!(
        err.contains(&format!("{key} has 1 more name (hard link)"))
            && err.contains(&format!("find / -xdev -samefile '{key}'"))
            && err.contains("nothing was started"),
        "{err}"
    );
    std::fs::remove_file(w.proj().join("k")).expect("rm");
    std::fs::hard_link(
        w.home().join(".ssh/id_ed25519"),
        w.home().join(".ssh/backup"),
    )
    .expect("link");
    let out = w.run_agent("echo started");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("started"));
}
