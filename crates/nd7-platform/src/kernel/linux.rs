//! What the Linux kernel says about processes, read from `/proc`, and what
//! a path leads to, opened with `openat2(RESOLVE_NO_SYMLINKS)` so that no
//! link on the way is followed (ADR-0028).

use std::fs;
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use super::PinError;
use nd7_format::policy::Identity;

/// A process's state letter (`R`, `S`, `T`, `Z`…), parent and start time
/// (clock ticks since boot).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    pub state: char,
    pub ppid: u32,
    pub started: u64,
}

/// Reads `pid`'s stat line; `None` when there is no such process.
pub fn stat(pid: u32) -> Option<Stat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// Parses a stat line. The command name (field 2) is in parentheses and may
/// hold spaces and parentheses itself, so fields are counted after the last `)`.
pub fn parse_stat(line: &str) -> Option<Stat> {
    let after = &line[line.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_ascii_whitespace().collect();
    // fields[0] is field 3 (state): ppid is field 4, starttime field 22.
    Some(Stat {
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        started: fields.get(19)?.parse().ok()?,
    })
}

/// The ancestors of `pid`, nearest first, up to (not including) pid 0,
/// read one `/proc` file at a time as the caller asks for them.
pub fn ancestors(pid: u32) -> impl Iterator<Item = u32> {
    let mut at = Some(pid);
    std::iter::from_fn(move || {
        let ppid = stat(at?)?.ppid;
        at = (ppid != 0).then_some(ppid);
        at
    })
    // A tree deeper than this is not one the kernel builds; the bound only
    // keeps a corrupt read from looping.
    .take(1 << 16)
}

/// The process (thread group) thread `tid` belongs to.
pub fn tgid(tid: u32) -> Option<u32> {
    let status = fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))?
        .trim()
        .parse()
        .ok()
}

/// The short command name of `pid` (`comm`), for messages.
pub fn name(pid: u32) -> String {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim_end().to_string())
        .unwrap_or_else(|_| "?".into())
}

/// Every process on the system with its stat, as one pass over `/proc` finds them.
pub fn all() -> Vec<(u32, Stat)> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, stat(pid)?)))
        .collect()
}

/// The children of `pid` (of every thread of it), from
/// `/proc/<pid>/task/<tid>/children`; `None` where the kernel has no such
/// file (built without `CONFIG_PROC_CHILDREN`).
pub fn children(pid: u32) -> Option<Vec<u32>> {
    let parse = |text: String| -> Vec<u32> {
        text.split_ascii_whitespace()
            .filter_map(|c| c.parse::<u32>().ok())
            .collect()
    };
    // The main thread's list first: where it cannot be read (a kernel
    // without the children files, or the process gone) the caller falls back
    // to a scan. Another thread may end between being listed and being read,
    // taking its file with it; its children then have a parent still here.
    let mut found = parse(fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?);
    let tasks = fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    for task in tasks.filter_map(Result::ok) {
        if task.file_name().to_str() == Some(pid.to_string().as_str()) {
            continue;
        }
        if let Ok(text) = fs::read_to_string(task.path().join("children")) {
            found.extend(parse(text));
        }
    }
    Some(found)
}

/// The descendants of `root` (not `root` itself), parents before their
/// children: walked down through each process's children where the kernel
/// lists them, else found in one pass over all of `/proc`.
pub fn descendants(root: u32) -> Vec<(u32, Stat)> {
    let mut found: Vec<(u32, Stat)> = Vec::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        let Some(kids) = children(parent) else {
            return descendants_by_scan(root);
        };
        for pid in kids {
            if let Some(st) = stat(pid).filter(|st| st.ppid == parent) {
                found.push((pid, st));
                frontier.push(pid);
            }
        }
    }
    found
}

fn descendants_by_scan(root: u32) -> Vec<(u32, Stat)> {
    let everyone = all();
    let mut found: Vec<(u32, Stat)> = Vec::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for &(pid, st) in &everyone {
            if st.ppid == parent && pid != root {
                found.push((pid, st));
                frontier.push(pid);
            }
        }
    }
    found
}

/// Whether `ancestor` is among `pid`'s ancestors now.
pub fn descends_from(pid: u32, ancestor: u32) -> bool {
    ancestors(pid).any(|p| p == ancestor)
}

/// Opens `path` (absolute) as a rule descriptor, following no symbolic link
/// in any component: a link anywhere on the way fails with `ELOOP`.
pub fn open_nofollow(path: &Path, flags: OFlags) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat2(
        rustix::fs::CWD,
        path,
        flags | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS,
    )
}

/// What `path` leads to now, without following links.
pub fn pin(path: &Path) -> Result<Identity, PinError> {
    let fd = open_nofollow(path, OFlags::PATH).map_err(|e| pin_error(path, e))?;
    let stat = rustix::fs::fstat(&fd).map_err(|e| super::io_err(path, "stat")(e.into()))?;
    Ok(Identity {
        dev: stat.st_dev,
        ino: stat.st_ino,
    })
}

fn pin_error(path: &Path, e: Errno) -> PinError {
    match e {
        Errno::LOOP => PinError::Link,
        Errno::NOENT | Errno::NOTDIR => PinError::Missing,
        other => super::io_err(path, "open (following no link)")(other.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_with_parentheses_and_spaces_does_not_shift_fields() {
        let line = "4242 (a) b (c)) S 17 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10 18446744073709551615\n";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                state: 'S',
                ppid: 17,
                started: 987654
            })
        );
        assert_eq!(parse_stat("12 (x) S"), None);
    }

    #[test]
    fn this_process_descends_from_pid_1() {
        let me = std::process::id();
        let chain: Vec<u32> = ancestors(me).collect();
        assert_eq!(
            chain.first().copied(),
            Some(std::os::unix::process::parent_id())
        );
        assert_eq!(chain.last().copied(), Some(1));
        assert!(stat(me).is_some_and(|s| s.started > 0 && s.state != 'Z'));
        assert_eq!(tgid(me), Some(me));
    }

    #[test]
    fn a_child_is_among_the_descendants() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let found = descendants(std::process::id());
        assert!(found.iter().any(|&(pid, _)| pid == child.id()));
        let scanned = descendants_by_scan(std::process::id());
        assert!(scanned.iter().any(|&(pid, _)| pid == child.id()));
        assert!(
            children(std::process::id())
                .expect("children")
                .contains(&child.id())
        );
        assert!(descends_from(child.id(), std::process::id()));
        assert_eq!(name(child.id()), "sleep");
        child.kill().expect("kill");
        child.wait().expect("wait");
    }

    /// A pin that fails for another reason than a link or a missing name
    /// says which path, doing what (ADR-0060).
    #[test]
    fn a_pin_that_fails_names_its_path_and_action() {
        let long = std::path::PathBuf::from(format!("/{}", "x".repeat(300)));
        let e = pin(&long).expect_err("a name over NAME_MAX");
        assert!(
            matches!(&e, PinError::Io { path, action: "open (following no link)", .. } if *path == long),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(
            text.starts_with(&format!(
                "{}: cannot open (following no link): ",
                long.display()
            )),
            "{text}"
        );
    }
}
