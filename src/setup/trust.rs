//! The binary trust checks `nd7 run` makes before it starts (and setup and
//! doctor report): nd7, the nd7-exec beside it and their directory must be
//! changeable by no one but the user and root, since a process inside the
//! floor that could replace one could replace the floor's exit; so must the
//! nd7-record beside them, where there is one, which every hook runs; where
//! one is a link, so must every directory it passes through. And where the
//! hooks find that nd7-record ([`recorder_beside`]), which they run only
//! when it proves to be this nd7's (ADR-0153).

use std::fs;
use std::io;
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
    ask_recorder(nd7, None).answer()
}

/// What [`find_recorder`] found, per path, while the file there is the same.
static FOUND: Mutex<Vec<Verdict>> = Mutex::new(Vec::new());

/// [`find_recorder`]'s question put, its answer not yet taken: `nd7 run`
/// makes its other checks while the recorder starts and answers
/// ([`ask_recorder`], then [`Asking::answer`]).
pub struct Asking {
    lean: PathBuf,
    /// Where the verdict is new: the file it is about, to keep it by.
    stamp: Option<FileStamp>,
    state: Asked,
    /// Where an answer given is remembered across runs ([`ANSWERS`]).
    remember: Option<PathBuf>,
}

enum Asked {
    /// Known without asking: kept from before, or refused on sight.
    Known(Result<(), NoRecorder>),
    /// The recorder started with [`VERSION_ARG`].
    Started(Question),
}

/// Asks the nd7-record beside `nd7` which recorder it is, unless that is
/// known already or it is refused on sight; returns at once. With `state`
/// (nd7's state directory), an answer this file gave an earlier run is
/// taken from there ([`ANSWERS`], ADR-0156), once the file and the
/// directories it is reached through have been found private again.
pub fn ask_recorder(nd7: &Path, state: Option<&Path>) -> Asking {
    let lean = nd7.with_file_name(RECORDER_NAME);
    let remember = state.map(Path::to_path_buf);
    // Known without asking: nothing to remember across runs.
    let known = |lean, stamp, verdict| Asking {
        lean,
        stamp,
        state: Asked::Known(verdict),
        remember: None,
    };
    let stamp = match stamp(&lean) {
        Ok(stamp) => stamp,
        Err(why) => return known(lean, None, Err(why)),
    };
    let found = FOUND.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, _, verdict)) = found.iter().find(|(p, s, _)| *p == lean && *s == stamp) {
        return known(lean, None, verdict.clone());
    }
    drop(found);
    if let Err(why) = private(&lean) {
        return known(lean, Some(stamp), Err(why));
    }
    if remember
        .as_deref()
        .is_some_and(|state| answered_before(state, &lean, &stamp))
    {
        return known(lean, Some(stamp), Ok(()));
    }
    // A file changed a moment ago may change again within its filesystem's
    // change-time granularity, unseen (ADR-0157): its answer is not kept.
    let remember = remember.filter(|_| stamp.settled());
    let state = match ask(&lean) {
        Ok(question) => Asked::Started(question),
        Err(why) => Asked::Known(Err(NoRecorder::Refused(why))),
    };
    Asking {
        lean,
        stamp: Some(stamp),
        state,
        remember,
    }
}

/// The file in nd7's state directory that remembers which nd7-record files
/// answered as this nd7's recorder (ADR-0156): beside the logs, read-only
/// under the floor.
pub const ANSWERS: &str = "recorder-answers.json";

/// How many files [`ANSWERS`] remembers, newest first.
const ANSWERS_KEPT: usize = 8;

/// One file that answered [`RECORDER_VERSION`].
#[derive(serde::Serialize, serde::Deserialize)]
struct Answered {
    path: PathBuf,
    stamp: FileStamp,
    answer: String,
}

/// The most [`ANSWERS`] may hold (8 paths of up to 4096 bytes, escaped):
/// a larger file is read as empty.
const ANSWERS_MOST: u64 = 256 * 1024;

fn answers(state: &Path) -> Vec<Answered> {
    crate::files::read_cache(&state.join(ANSWERS), ANSWERS_MOST)
}

/// Whether the file at `lean`, exactly as `stamp` has it (same device,
/// inode and change time), answered this nd7's [`RECORDER_VERSION`] before.
fn answered_before(state: &Path, lean: &Path, stamp: &FileStamp) -> bool {
    answers(state)
        .iter()
        .any(|a| a.path == lean && a.stamp == *stamp && a.answer == RECORDER_VERSION)
}

/// Remembers that the file at `lean`, as `stamp` has it, answered
/// [`RECORDER_VERSION`]; a state directory that cannot be written asks
/// again next time.
fn remember_answer(state: &Path, lean: &Path, stamp: FileStamp) {
    let mut all = answers(state);
    all.retain(|a| a.path != lean);
    all.insert(
        0,
        Answered {
            path: lean.to_path_buf(),
            stamp,
            answer: RECORDER_VERSION.to_string(),
        },
    );
    all.truncate(ANSWERS_KEPT);
    crate::files::write_cache(&state.join(ANSWERS), &all);
}

impl Asking {
    /// The recorder the hooks may run, or why not; waits for the answer
    /// (at most [`VERSION_WAIT`] from the question) and keeps it.
    pub fn answer(self) -> Result<Recorder, NoRecorder> {
        let verdict = match self.state {
            Asked::Known(verdict) => verdict,
            Asked::Started(question) => {
                let verdict = question.verdict().map_err(NoRecorder::Refused);
                if let (Ok(()), Some(state), Some(stamp)) = (&verdict, &self.remember, self.stamp) {
                    remember_answer(state, &self.lean, stamp);
                }
                verdict
            }
        };
        if let Some(stamp) = self.stamp {
            let mut found = FOUND.lock().unwrap_or_else(|e| e.into_inner());
            found.push((self.lean.clone(), stamp, verdict.clone()));
        }
        verdict.map(|()| Recorder::lean(self.lean.to_string_lossy()))
    }
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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

    /// Whether the file last changed more than [`SETTLED`] ago. A file
    /// system that keeps change times coarsely (whole seconds, FAT's two,
    /// a clock tick, a server's clock) can change a file again with the
    /// same change time shortly after; one older than that cannot (ADR-0157).
    fn settled(&self) -> bool {
        let (secs, nanos) = self.ctime;
        let (Ok(secs), Ok(nanos)) = (u64::try_from(secs), u32::try_from(nanos)) else {
            return false;
        };
        let changed = std::time::UNIX_EPOCH + Duration::new(secs, nanos);
        std::time::SystemTime::now()
            .duration_since(changed)
            .is_ok_and(|age| age > SETTLED)
    }
}

/// How long ago a recorder file must have changed for its answer to be
/// remembered across runs ([`FileStamp::settled`]).
const SETTLED: Duration = Duration::from_secs(3);

/// Whether the nd7-record at `lean`, a file, and every directory it is
/// reached through are private to the user, as [`binary_problems`] has it:
/// checked before it is started at all.
fn private(lean: &Path) -> Result<(), NoRecorder> {
    let me = rustix::process::getuid().as_raw();
    let mut paths = vec![lean.to_path_buf()];
    paths.extend(lean.parent().map(Path::to_path_buf));
    paths.extend(link_dirs(lean));
    match problems(&paths, me).into_iter().next() {
        Some((path, problem)) => Err(NoRecorder::Refused(format!("{} {problem}", path.display()))),
        None => Ok(()),
    }
}

/// Starts `program --version`; [`Question::verdict`] takes the answer.
fn ask(program: &Path) -> Result<Question, String> {
    let child = Command::new(program)
        .arg(VERSION_ARG)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{} cannot be started: {e}", program.display()))?;
    Ok(Question {
        program: program.to_path_buf(),
        child,
        deadline: Instant::now() + VERSION_WAIT,
    })
}

/// A recorder asked [`VERSION_ARG`]; one dropped unanswered is killed and
/// reaped.
struct Question {
    program: PathBuf,
    child: Child,
    deadline: Instant,
}

impl Question {
    /// Whether the answer is exactly [`RECORDER_VERSION`], from a recorder
    /// that then ended well, by the deadline.
    fn verdict(mut self) -> Result<(), String> {
        let shown = self.program.display();
        let answer = self
            .child
            .stdout
            .take()
            .map(|out| read_answer(out, self.deadline));
        let Some(status) = wait_bounded(&mut self.child, self.deadline) else {
            return Err(format!(
                "{shown} did not answer {VERSION_ARG} within {} s",
                VERSION_WAIT.as_secs()
            ));
        };
        let answer = answer.unwrap_or_default();
        if status.success() && answer == RECORDER_VERSION {
            return Ok(());
        }
        Err(format!(
            "{shown} answered {answer:?} to {VERSION_ARG}, not {RECORDER_VERSION:?}: it is not this nd7's recorder"
        ))
    }
}

impl Drop for Question {
    fn drop(&mut self) {
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The child's status once it has ended, or `None` when it has not by
/// `deadline` (the [`Question`] dropped then kills and reaps it). Called
/// once its output has ended, when a child that answered has ended or is
/// ending: asked again after 20 µs, then twice as long each time up to
/// 20 ms. No thread, since `nd7 run` asks while it must have only one.
fn wait_bounded(child: &mut Child, deadline: Instant) -> Option<ExitStatus> {
    let mut pause = Duration::from_micros(20);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(20));
            }
            _ => return None,
        }
    }
}

/// The first line the child writes, at most 256 bytes, read as it comes
/// (`poll`) until its output ends or `deadline`: the answer is taken the
/// moment it is complete, and a process the child left behind holding the
/// pipe cannot hold nd7 up past the deadline.
fn read_answer(out: ChildStdout, deadline: Instant) -> String {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let mut bytes = Vec::new();
    let _ = rustix::io::ioctl_fionbio(&out, true);
    const MOST: usize = 256;
    let mut chunk = [0u8; MOST];
    while bytes.len() < MOST {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(timeout) = Timespec::try_from(left) else {
            break;
        };
        if left.is_zero() {
            break;
        }
        let mut fds = [PollFd::new(&out, PollFlags::IN)];
        match poll(&mut fds, Some(&timeout)) {
            Ok(0) => break,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => break,
            Ok(_) => {}
        }
        match rustix::io::read(&out, &mut chunk[..MOST - bytes.len()]) {
            Ok(0) => break,
            Ok(n) => {
                bytes.extend_from_slice(&chunk[..n]);
                if bytes.contains(&b'\n') {
                    break;
                }
            }
            Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => {}
            Err(_) => break,
        }
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
        let made = std::process::Command::new("mkfifo")
            .arg(&record)
            .status()
            .expect("run mkfifo");
        assert!(made.success(), "mkfifo");
        refused("is not a file");
        fs::remove_file(&record).expect("rm");
        fs::create_dir(&record).expect("mkdir");
        refused("is not a file");
        assert!(!recorder_beside(&nd7).is_lean());
    }
}
