//! The keeper's mediation of modes, owners, times and extended attributes
//! (issue 29 item 4, ADR-0094) and the start-up checks (ADR-0095), tried by
//! the routes `floor_attrs.rs` does not take. Each is made as the ordinary
//! account, by the agent under `nd7 run` and by a command through the exit,
//! and each says what it would change outside the write roots. Its scripts
//! are `floor_attrs/probe.py` and `floor_attrs/race.py`.
//!
//! - inode flags through `ioctl` (`FS_IOC_SETFLAGS`, `FS_IOC_FSSETXATTR`)
//!   on a file or directory the session may only read: the ioctl form of
//!   `file_setattr`, which the filter refuses;
//! - `chmod` through the 32-bit entry (`int $0x80`) of a 64-bit process;
//! - `io_uring`, whose `SETXATTR` and `FSETXATTR` operations no filter sees;
//! - a hard link made during the session in the project to a file outside,
//!   then changed through the link;
//! - a hard link to a file of `~/.nd7` or a credential store, made in the
//!   session, to stop every later `nd7 run` (denial of service);
//! - the keeper raced, `truncate` and `mknod`, and owner numbers as the
//!   caller's namespace names them.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use crate::world::*;

const PROBE: &str = include_str!("floor_attrs/probe.py");
const RACE: &str = include_str!("floor_attrs/race.py");
const PYTHON: &str = "/usr/bin/python3";

fn probe(w: &World) -> String {
    let path = w.proj().join("probe.py");
    std::fs::write(&path, PROBE).expect("write probe");
    path.display().to_string()
}

/// The inode flags of `path` (`FS_IOC_GETFLAGS`), read from outside.
fn inode_flags(path: &Path) -> libc::c_long {
    let f = std::fs::File::open(path).expect("open");
    let mut flags: libc::c_long = 0;
    // SAFETY: FS_IOC_GETFLAGS writes one long into `flags`, which lives for the call.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), 0x8008_6601, &mut flags) };
    assert_eq!(r, 0, "getflags {}", path.display());
    flags
}

fn lines(out: &std::process::Output) -> Vec<String> {
    text(&out.stdout)
        .lines()
        .filter(|l| l.ends_with(":yes") || l.ends_with(":no"))
        .map(str::to_string)
        .collect()
}

/// Inode flags (`NODUMP`, `NOATIME`) of a readable directory and file
/// outside the write roots, set through `ioctl` by the agent and through the exit. The
/// flags' own call (`file_setattr`) is refused; its ioctl forms must be
/// too. Also the 32-bit `chmod` and `io_uring`.
#[test]
fn inode_flags_32_bit_calls_and_io_uring_outside_the_write_roots_are_refused() {
    let w = World::new();
    let probe = probe(&w);
    let readme = w.outside().join("readme");
    std::fs::write(&readme, "r").expect("write");
    w.own();
    std::fs::set_permissions(&readme, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let home = w.outside();
    let before = [inode_flags(&home), inode_flags(&readme)];
    let mode = std::fs::metadata(&readme).expect("stat").mode();
    let named = [home.display().to_string(), readme.display().to_string()];
    let mut body = String::new();
    for (i, t) in named.iter().enumerate() {
        body.push_str(&format!("{PYTHON} {probe} '{t}' agent{i}-\n"));
        body.push_str(&format!("\"$EXEC\" \"{PYTHON} {probe} '{t}' exec{i}-\"\n"));
    }
    let out = w.run_agent(&body);
    let got = lines(&out);
    assert_eq!(got.len(), 2 * 2 * 4, "{got:?}\n{}", text(&out.stderr));
    let broke: Vec<_> = got.iter().filter(|l| l.ends_with(":yes")).collect();
    assert!(broke.is_empty(), "{broke:?}\n{}", text(&out.stderr));
    assert_eq!([inode_flags(&home), inode_flags(&readme)], before);
    assert_eq!(std::fs::metadata(&readme).expect("stat").mode(), mode);
}

/// A hard link made in the project, during the session, to a file outside
/// that the session may read, then changed through the link: the keeper
/// judges the file by the directory it was named in, which is the project.
/// Landlock must refuse the link (it would gain the project's rights).
#[test]
fn a_hard_link_made_in_the_session_to_a_file_outside_is_refused() {
    let w = World::new();
    let readme = w.outside().join("readme");
    std::fs::write(&readme, "r").expect("write");
    w.own();
    std::fs::set_permissions(&readme, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let before = std::fs::metadata(&readme).expect("stat");
    let r = readme.display().to_string();
    let out = w.run_agent(&format!(
        r#"x() {{ local name=$1; shift; if "$@" >/dev/null 2>&1; then echo "$name:yes"; else echo "$name:no"; fi; }}
x link ln '{r}' hl
x chmod chmod 777 hl
x exec-link "$EXEC" "ln '{r}' hl2"
x exec-chmod "$EXEC" "chmod 777 hl2"
x rc-link ln '{r}' "$TMPDIR/hl3"
"#
    ));
    let got = lines(&out);
    assert_eq!(got.len(), 5, "{got:?}\n{}", text(&out.stderr));
    assert!(
        got.iter().all(|l| l.ends_with(":no")),
        "{got:?}\n{}",
        text(&out.stderr)
    );
    let after = std::fs::metadata(&readme).expect("stat");
    assert_eq!(
        (after.mode(), after.nlink()),
        (before.mode(), before.nlink())
    );
}

/// The start-up check refuses a credential store's file with a name
/// elsewhere. A session that could give such a file a second name would
/// stop every later `nd7 run` (a denial of service the user must hunt
/// down): it tries, in the project, in its temp directory and in the
/// agent's state, for the key, `~/.nd7/grants` and a log. The next run
/// must start.
#[test]
fn a_session_cannot_plant_a_link_that_stops_the_next_run() {
    let w = World::new();
    std::fs::create_dir_all(w.home().join(".nd7")).expect("mkdir");
    std::fs::write(w.home().join(".nd7/grants"), "").expect("grants");
    w.own();
    let first = w.run_agent("echo first");
    assert!(first.status.success(), "{}", text(&first.stderr));
    let key = w.in_home(".ssh/id_ed25519");
    let grants = w.in_home(".nd7/grants");
    let logs = w.inner_state().join("nd7/sessions").display().to_string();
    let claude = w.in_home(".claude");
    let out = w.run_agent(&format!(
        r#"n=0
for f in '{key}' '{grants}' $(find '{logs}' -type f 2>/dev/null | head -3); do
  for d in . "$TMPDIR" '{claude}'; do
    n=$((n+1))
    ln "$f" "$d/planted$n" 2>/dev/null && echo "link $f $d:yes"
    "$EXEC" "ln '$f' '$d/xplanted$n'" 2>/dev/null && echo "exec-link $f $d:yes"
  done
done
echo tried:$n
"#
    ));
    let said = text(&out.stdout);
    assert!(said.contains("tried:"), "{said}\n{}", text(&out.stderr));
    let broke: Vec<_> = said.lines().filter(|l| l.ends_with(":yes")).collect();
    assert!(broke.is_empty(), "{broke:?}");
    let next = w.run_agent("echo next");
    assert!(next.status.success(), "{}", text(&next.stderr));
    assert!(text(&next.stdout).contains("next"));
}

/// Inside its write roots the keeper makes any mode the agent asks for, the
/// roots themselves included: `~/.claude` (whose `settings.json` hooks run
/// as the account, inside nd7 or not) and the project (whose `.git/config`
/// runs `core.fsmonitor`) made writable by every other account, and a file
/// made set-user-ID (any account running it runs as this one). Another
/// local account then plants what the account runs next, after the session
/// and its watch have ended: the grants attack of issue 29 item 4, moved
/// to places the session may write. The next `nd7 run` must at least warn.
#[test]
#[ignore = "open: modes inside the write roots are the agent's (ADR-0094); modes::check does not look at the agent's state or the project, and a chmod-only refusal is undone by umask 0 and a re-made directory"]
fn a_write_root_made_writable_by_others_is_warned_of_at_the_next_start() {
    let w = World::new();
    std::fs::create_dir_all(w.home().join(".claude")).expect("mkdir");
    w.own();
    let claude = w.in_home(".claude");
    let out = w.run_agent(&format!(
        "chmod 777 '{claude}' && echo claude:yes\n\
         chmod 777 . && echo proj:yes\n\
         cp /bin/true suid && chmod 4755 suid && echo suid:yes\n"
    ));
    let said = text(&out.stdout);
    assert!(said.contains("claude:yes"), "{said}\n{}", text(&out.stderr));
    let mode = std::fs::metadata(w.home().join(".claude"))
        .expect("stat")
        .mode();
    assert_eq!(mode & 0o777, 0o777, "the attack landed");
    let next = w.run_agent("echo next");
    let err = text(&next.stderr);
    assert!(
        err.contains(&claude) && err.contains(&w.proj().display().to_string()),
        "no warning of the write roots others can write: {err}"
    );
}

/// The path's bytes changed by another thread while the keeper reads them,
/// and the file swapped for a link to the target between the keeper's open
/// and its walk, thousands of times, by the agent and through the exit: the
/// keeper acts only on what it read once and on the file it opened, so the
/// file outside keeps its mode, times and attributes.
#[test]
fn racing_the_keeper_changes_nothing_outside() {
    let w = World::new();
    let race = w.proj().join("race.py");
    std::fs::write(&race, RACE).expect("write race");
    let readme = w.outside().join("readme");
    std::fs::write(&readme, "r").expect("write");
    w.own();
    std::fs::set_permissions(&readme, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    crate::floor_attrs::keep(&readme);
    let m = std::fs::metadata(&readme).expect("stat");
    let before = (m.mode(), m.mtime(), m.mtime_nsec());
    let r = readme.display().to_string();
    let race = race.display().to_string();
    let out = w.run_agent(&format!(
        "{PYTHON} {race} '{r}' 3000\n\"$EXEC\" \"{PYTHON} {race} '{r}' 1000\"\n"
    ));
    let said = text(&out.stdout);
    assert_eq!(
        said.matches("race:done").count(),
        2,
        "{said}\n{}",
        text(&out.stderr)
    );
    let m = std::fs::metadata(&readme).expect("stat");
    assert_eq!((m.mode(), m.mtime(), m.mtime_nsec()), before);
    assert!(crate::floor_attrs::has_keep(&readme), "user.keep removed");
}

/// The neighbours of the attribute calls that change a file without writing
/// to it through a descriptor: `truncate(2)` by path (Landlock's `TRUNCATE`
/// right must be handled), a FIFO, a socket and a device node made outside
/// (`mknod`), by the agent and through the exit. The file outside keeps
/// its size, and nothing is made.
#[test]
fn truncate_and_mknod_outside_the_write_roots_are_refused() {
    let w = World::new();
    let readme = w.outside().join("readme");
    std::fs::write(&readme, "content").expect("write");
    w.own();
    let r = readme.display().to_string();
    let o = w.outside().display().to_string();
    let script = format!(
        r#"x() {{ local name=$1; shift; if "$@" >/dev/null 2>&1; then echo "$name:yes"; else echo "$name:no"; fi; }}
x truncate {PYTHON} -c "import os; os.truncate('{r}', 0)"
x mkfifo {PYTHON} -c "import os; os.mkfifo('{o}/fifo')"
x mknod-sock {PYTHON} -c "import os, stat; os.mknod('{o}/sock', stat.S_IFSOCK | 0o600)"
x mknod-reg {PYTHON} -c "import os, stat; os.mknod('{o}/reg', stat.S_IFREG | 0o600)"
"#
    );
    std::fs::write(w.proj().join("t.sh"), &script).expect("write");
    let t = w.proj().join("t.sh").display().to_string();
    let out = w.run_agent(&format!(
        "bash '{t}' | sed s/^/agent-/\n\"$EXEC\" \"bash '{t}'\" | sed s/^/exec-/\n"
    ));
    let got = lines(&out);
    assert_eq!(got.len(), 8, "{got:?}\n{}", text(&out.stderr));
    assert!(got.iter().all(|l| l.ends_with(":no")), "{got:?}");
    assert_eq!(std::fs::read(&readme).expect("read"), b"content");
    for made in ["fifo", "sock", "reg"] {
        assert!(!w.outside().join(made).exists(), "{made} made outside");
    }
}

/// The session's user namespace maps the account's own user and group
/// only: natively, `chown` to one of its supplementary groups fails there
/// (`EINVAL`, the group is unmapped). The keeper, outside that namespace,
/// took the number as its own and made the change: a file in the project
/// given to the group (`docker`, `adm` on a real machine), then made
/// set-group-ID, runs with that group for every other account. The owner
/// numbers a caller passes are its namespace's; the keeper maps them as the
/// kernel would, and refuses what is unmapped; the account's own still
/// work. (A nested namespace cannot write its maps: `/proc` is not a write
/// root.) Guards `attrs::outer_owner`.
#[test]
fn owner_numbers_are_the_callers_namespace() {
    let group = 100; // `users`; any group the account is made a member of
    let w = World::new().with_groups(&[group]);
    w.own();
    let out = w.run_agent(&format!(
        r#"x() {{ local name=$1; shift; if "$@" >/dev/null 2>&1; then echo "$name:yes"; else echo "$name:no"; fi; }}
cp /bin/true g && cp /bin/true n
x chgrp {PYTHON} -c "import os; os.chown('g', -1, {group})"
x exec-chgrp "$EXEC" "{PYTHON} -c \"import os; os.chown('g', -1, {group})\""
x own {PYTHON} -c "import os; os.chown('n', {uid}, {gid})"
"#,
        uid = account().uid,
        gid = account().gid,
    ));
    let got = lines(&out);
    assert_eq!(
        got,
        ["chgrp:no", "exec-chgrp:no", "own:yes"],
        "{}",
        text(&out.stderr)
    );
    let g = std::fs::metadata(w.proj().join("g")).expect("stat");
    assert_ne!(g.gid(), group, "given to the supplementary group");
}
