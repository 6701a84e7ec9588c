//! The binary trust checks `nd7 run` makes before it starts (and setup and
//! doctor report): nd7, the nd7-exec beside it and their directory must be
//! changeable by no one but the user and root, since a process inside the
//! floor that could replace one could replace the floor's exit; so must the
//! nd7-record beside them, where there is one, which every hook runs; where
//! one is a link, so must every directory it passes through. And where the
//! hooks find that nd7-record ([`recorder_beside`]), which they run only
//! when it proves to be this nd7's (ADR-0153).

use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::hook::{RECORDER_NAME, Recorder};

/// Why a file or directory that nd7's sandbox will trust is not private to
/// its owner: writable by group or others, or owned by someone other than the
/// user and root. `None` when it is fine.
pub fn private_problem(mode: u32, owner: u32, me: u32) -> Option<String> {
    if owner != me && owner != 0 {
        return Some(format!(
            "is owned by uid {owner}, neither you (uid {me}) nor root"
        ));
    }
    if mode & 0o022 != 0 {
        return Some(format!(
            "is writable by {} (mode {:o})",
            if mode & 0o002 != 0 {
                "anyone"
            } else {
                "its group"
            },
            mode & 0o7777
        ));
    }
    None
}

/// What `nd7-record --version` answers (ADR-0153): the recorder's name and
/// the version of the package it was built in, which is nd7's. Setup, doctor
/// and `nd7 run` wire only an nd7-record that answers exactly this.
pub const RECORDER_VERSION: &str = concat!("nd7-record ", env!("CARGO_PKG_VERSION"));

/// The one argument that asks nd7-record for [`RECORDER_VERSION`]; no hook
/// passes it.
pub const VERSION_ARG: &str = "--version";

/// How long nd7 waits for that answer before taking the file for broken.
const VERSION_WAIT: Duration = Duration::from_secs(5);

/// How many links [`link_dirs`] follows, as the kernel does (`MAXSYMLINKS`).
const MAX_LINKS: usize = 40;

/// Why the hooks of an nd7 do not run the nd7-record beside it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoRecorder {
    /// Nothing of that name is there.
    Absent,
    /// Something is, and the hooks must not run it: what and why, naming
    /// the path.
    Refused(String),
}

/// The recorder the hooks of the nd7 at `nd7` run (ADR-0151): the
/// `nd7-record` in the same directory (a link to one counts, as a Nix
/// profile's are), found as `nd7 run` finds `nd7-exec`; otherwise `nd7
/// record`. The path is `nd7`'s directory as given, so a stable path
/// (Homebrew's `opt`, a Nix profile) stays stable. Found once per file in a
/// process ([`find_recorder`]).
pub fn recorder_beside(nd7: &Path) -> Recorder {
    find_recorder(nd7).unwrap_or_else(|_| Recorder::nd7(nd7.to_string_lossy()))
}

/// The nd7-record beside `nd7`, when the hooks may run it (ADR-0153): a
/// file (through links), private to the user as [`binary_problems`] has
/// it, links and all, that answers [`VERSION_ARG`] with exactly
/// [`RECORDER_VERSION`], which proves it nd7's recorder of this version and
/// that this account can start it. The answer is kept for the process,
/// keyed by the file's identity and change time, so `nd7 run` asks before
/// its split and setup asks once.
pub fn find_recorder(nd7: &Path) -> Result<Recorder, NoRecorder> {
    static FOUND: Mutex<Vec<Verdict>> = Mutex::new(Vec::new());
    let lean = nd7.with_file_name(RECORDER_NAME);
    let stamp = stamp(&lean)?;
    let mut found = FOUND.lock().unwrap_or_else(|e| e.into_inner());
    let verdict = match found.iter().find(|(p, s, _)| *p == lean && *s == stamp) {
        Some((_, _, verdict)) => verdict.clone(),
        None => {
            let verdict = recorder_verdict(&lean);
            found.push((lean.clone(), stamp, verdict.clone()));
            verdict
        }
    };
    verdict.map(|()| Recorder::lean(lean.to_string_lossy()))
}

/// The file at `lean` (links followed), or why there is none the hooks
/// could run.
fn stamp(lean: &Path) -> Result<FileStamp, NoRecorder> {
    let refused = |why: String| NoRecorder::Refused(format!("{} {why}", lean.display()));
    match fs::metadata(lean) {
        Err(e) if e.kind() == io::ErrorKind::NotFound && fs::symlink_metadata(lean).is_err() => {
            Err(NoRecorder::Absent)
        }
        Err(e) => Err(refused(format!("cannot be read: {e}"))),
        Ok(meta) if !meta.is_file() => Err(refused("is not a file".into())),
        Ok(meta) => Ok(FileStamp::of(&meta)),
    }
}

/// What [`find_recorder`] found for a path, while the file there is the same.
type Verdict = (PathBuf, FileStamp, Result<(), NoRecorder>);

/// Which file a path led to, and when it last changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileStamp {
    dev: u64,
    ino: u64,
    ctime: (i64, i64),
}

impl FileStamp {
    fn of(meta: &fs::Metadata) -> FileStamp {
        FileStamp {
            dev: meta.dev(),
            ino: meta.ino(),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// Whether the hooks may run the nd7-record at `lean`, a file.
fn recorder_verdict(lean: &Path) -> Result<(), NoRecorder> {
    let me = rustix::process::getuid().as_raw();
    let mut paths = vec![lean.to_path_buf()];
    paths.extend(lean.parent().map(Path::to_path_buf));
    paths.extend(link_dirs(lean));
    if let Some((path, problem)) = problems(&paths, me).into_iter().next() {
        return Err(NoRecorder::Refused(format!("{} {problem}", path.display())));
    }
    answers_version(lean).map_err(NoRecorder::Refused)
}

/// Runs `program --version` and checks its answer is [`RECORDER_VERSION`].
fn answers_version(program: &Path) -> Result<(), String> {
    let shown = program.display();
    let mut child = Command::new(program)
        .arg(VERSION_ARG)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{shown} cannot be started: {e}"))?;
    let Some(status) = wait_bounded(&mut child) else {
        return Err(format!(
            "{shown} did not answer {VERSION_ARG} within {} s",
            VERSION_WAIT.as_secs()
        ));
    };
    let answer = read_answer(child.stdout.take());
    if status.success() && answer == RECORDER_VERSION {
        return Ok(());
    }
    Err(format!(
        "{shown} answered {answer:?} to {VERSION_ARG}, not {RECORDER_VERSION:?}: it is not this nd7's recorder"
    ))
}

/// The child's status once it has ended, or `None` (the child killed) when
/// it has not within [`VERSION_WAIT`]. Asked again after 0.1 ms, then
/// twice as long each time up to 20 ms: no thread, since `nd7 run` asks
/// while it must have only one.
fn wait_bounded(child: &mut Child) -> Option<ExitStatus> {
    let started = Instant::now();
    let mut pause = Duration::from_micros(100);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if started.elapsed() < VERSION_WAIT => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(20));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

/// The first line an ended child wrote, at most 256 bytes. Read without
/// blocking: a process it left behind holding the pipe cannot hold nd7 up.
fn read_answer(out: Option<ChildStdout>) -> String {
    let mut bytes = Vec::new();
    if let Some(out) = out {
        let _ = rustix::io::ioctl_fionbio(&out, true);
        let _ = out.take(256).read_to_end(&mut bytes);
    }
    let text = String::from_utf8_lossy(&bytes);
    text.strip_suffix('\n').unwrap_or(&text).to_string()
}

/// What setup and doctor say when the hooks run `nd7 record` (`why`, from
/// [`find_recorder`]).
pub fn no_recorder_note(nd7: &Path, why: &NoRecorder) -> String {
    match why {
        NoRecorder::Absent => format!(
            "no {RECORDER_NAME} beside {}: hooks run `nd7 record`, which starts slower (reinstall nd7 so that nd7-record sits beside it, then nd7 setup)",
            nd7.display()
        ),
        NoRecorder::Refused(why) => format!(
            "{why}: hooks run `nd7 record` instead, which starts slower (reinstall nd7 so that its own nd7-record sits beside it, yours alone to change, then nd7 setup)"
        ),
    }
}

/// The directories a link at `path` passes through on its way to a file,
/// each where it really is: whoever can write one can re-point the link or
/// replace the file. Empty when `path` is no link.
fn link_dirs(path: &Path) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let mut at = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        let Ok(target) = fs::read_link(&at) else {
            break;
        };
        at = at.parent().unwrap_or(Path::new("/")).join(target);
        let dir = at.parent().and_then(|d| fs::canonicalize(d).ok());
        dirs.extend(dir.filter(|d| !dirs.contains(d)));
    }
    dirs
}

/// Each of `paths` (links followed) that is not private to `me`, with why.
fn problems(paths: &[PathBuf], me: u32) -> Vec<(PathBuf, String)> {
    paths
        .iter()
        .filter_map(|path| {
            let problem = match fs::metadata(path) {
                Ok(meta) => private_problem(meta.permissions().mode(), meta.uid(), me)?,
                Err(e) => format!("cannot be read: {e}"),
            };
            Some((path.clone(), problem))
        })
        .collect()
}

/// nd7, the nd7-exec beside it, the nd7-record beside them when there is
/// one, and the directory holding them, each with why it is not private to
/// the user, if it is not (or cannot be read); where one of the files is a
/// link, also each directory the link passes through (ADR-0153). `nd7 run`
/// trusts all of them: a process inside the sandbox that could replace one
/// could replace the exit, or the program every hook runs.
pub fn binary_problems(nd7: &Path) -> Vec<(PathBuf, String)> {
    let me = rustix::process::getuid().as_raw();
    let mut paths: Vec<PathBuf> = Vec::new();
    for file in binary_files(nd7) {
        let dirs = link_dirs(&file);
        paths.push(file);
        paths.extend(dirs);
    }
    paths.extend(nd7.parent().map(Path::to_path_buf));
    problems(&unique(paths), me)
}

/// nd7, the nd7-exec beside it, and the nd7-record beside them when there
/// is one.
fn binary_files(nd7: &Path) -> Vec<PathBuf> {
    let recorder = nd7.with_file_name(RECORDER_NAME);
    let mut files = vec![nd7.to_path_buf(), nd7.with_file_name("nd7-exec")];
    files.extend(fs::symlink_metadata(&recorder).is_ok().then_some(recorder));
    files
}

/// Every place [`binary_files`] are reached through, each where it really
/// is: the name itself and each link on the way, in its directory's real
/// place, and the file at the end. `nd7 run` keeps the agent from all of
/// them (ADR-0153): one it could write, it could replace or re-point, and
/// the program there runs later outside any sandbox (nd7-record at every
/// hook setup wired, nd7 at the user's next command).
pub fn binary_places(nd7: &Path) -> Vec<PathBuf> {
    let mut places = Vec::new();
    for file in binary_files(nd7) {
        let mut at = file.clone();
        for _ in 0..MAX_LINKS {
            places.extend(in_real_dir(&at));
            let Ok(target) = fs::read_link(&at) else {
                break;
            };
            at = at.parent().unwrap_or(Path::new("/")).join(target);
        }
        places.extend(fs::canonicalize(&file).ok());
    }
    unique(places)
}

/// `path` with its directory resolved, its own name kept (a link stays a
/// link).
fn in_real_dir(path: &Path) -> Option<PathBuf> {
    let dir = fs::canonicalize(path.parent()?).ok()?;
    Some(dir.join(path.file_name()?))
}

/// `paths` without repeats, in their order.
fn unique(paths: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for path in paths {
        if !out.contains(&path) {
            out.push(path);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_private_paths_pass() {
        assert_eq!(private_problem(0o755, 1000, 1000), None);
        assert_eq!(private_problem(0o755, 0, 1000), None);
        assert!(
            private_problem(0o775, 1000, 1000)
                .expect("group")
                .contains("its group")
        );
        assert!(
            private_problem(0o777, 0, 1000)
                .expect("anyone")
                .contains("anyone")
        );
        assert!(
            private_problem(0o755, 1001, 1000)
                .expect("owner")
                .contains("uid 1001")
        );
    }

    /// The nd7-record beside nd7 is found only as a file of that exact
    /// name, private like the binaries (links and all), and once there it
    /// is held to the binaries' rule: every hook runs it. A file that does
    /// not answer as this nd7's recorder (here an empty one) is not used.
    #[test]
    fn nd7_record_beside_nd7_is_found_and_held_private() {
        let dir = tempfile::tempdir().expect("tempdir");
        let nd7 = dir.path().join("nd7");
        let write = |name: &str, mode: u32| {
            let path = dir.path().join(name);
            fs::write(&path, b"").expect("write");
            fs::set_permissions(&path, fs::Permissions::from_mode(mode)).expect("chmod");
            path
        };
        write("nd7", 0o755);
        write("nd7-exec", 0o755);
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
        write("nd7-recorder", 0o755);
        assert_eq!(recorder_beside(&nd7), Recorder::nd7(nd7.to_string_lossy()));
        assert_eq!(find_recorder(&nd7), Err(NoRecorder::Absent));
        assert!(
            binary_problems(&nd7).is_empty(),
            "{:?}",
            binary_problems(&nd7)
        );
        let record = write("nd7-record", 0o644);
        let refused = |why: &str| match find_recorder(&nd7) {
            Err(NoRecorder::Refused(text)) => assert!(text.contains(why), "{text}"),
            other => panic!("{other:?}"),
        };
        refused("cannot be started");
        fs::set_permissions(&record, fs::Permissions::from_mode(0o757)).expect("chmod");
        refused("writable by anyone");
        let problems = binary_problems(&nd7);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].0, record);
        assert!(problems[0].1.contains("anyone"), "{problems:?}");
        // A link to a file in a directory anyone can write: the directory
        // is named, though the link's and the file's own modes are fine.
        let shared = dir.path().join("shared");
        fs::create_dir(&shared).expect("mkdir");
        fs::remove_file(&record).expect("rm");
        fs::write(shared.join("nd7-record"), b"").expect("write");
        std::os::unix::fs::symlink("shared/nd7-record", &record).expect("link");
        fs::set_permissions(&shared, fs::Permissions::from_mode(0o777)).expect("chmod");
        let shared = fs::canonicalize(&shared).expect("realpath");
        refused(&format!("{} is writable by anyone", shared.display()));
        assert_eq!(
            binary_problems(&nd7)
                .into_iter()
                .map(|(path, _)| path)
                .collect::<Vec<_>>(),
            [shared]
        );
        // Something else at that name: a FIFO (never opened), a directory.
        fs::remove_file(&record).expect("rm");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &record,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o755),
            0,
        )
        .expect("mkfifo");
        refused("is not a file");
        fs::remove_file(&record).expect("rm");
        fs::create_dir(&record).expect("mkdir");
        refused("is not a file");
        assert!(!recorder_beside(&nd7).is_lean());
    }
}
