//! Seatbelt: applying a profile to the calling process or to a child between
//! fork and exec, and `nd7-exec`'s last step, becoming the shell under the
//! run's profile. (The chain of parent processes is read with libproc in
//! [`crate::kernel`].)
//!
//! A Seatbelt profile, once applied, holds for the process and everything it
//! starts, and the kernel refuses any other profile after it (ADR-0007). The
//! profiles themselves are rendered by [`crate::policy::seatbelt`].
//!
//! `nd7-exec` writes the run's log itself here, outside the floor, so the
//! process that writes must be one no confined process can signal: the
//! profiles let a process signal its own sandbox and its own children only,
//! and `nd7-exec`, the child of a confined process, splits in two ([`split`],
//! ADR-0075): the front stays the caller's child, passes signals on and
//! waits; the writer, its child, writes the entries and runs the command.
//! When the run ends, what is still in its sandboxes is found by the
//! run's mark ([`in_runs_sandbox`]) and ended.
//!
//! All of nd7's `unsafe` for Seatbelt is in this file: four functions of
//! libSystem, declared here rather than through a crate.

use std::ffi::{CStr, CString, OsStr, c_char, c_int};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Why a profile was not applied.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error(
        "the sandbox profile contains a NUL byte, so macOS would read only part of it; refusing to apply it (the session's policy.sb is damaged: start a new nd7 run)"
    )]
    Nul,
    #[error(
        "macOS refused nd7's sandbox profile: {0} (nd7 run needs macOS 13 or newer, and a process that is already sandboxed cannot take another profile: start nd7 from a terminal outside any sandbox)"
    )]
    Refused(String),
}

/// `EPERM` in <sys/errno.h>.
const EPERM: i32 = 1;

unsafe extern "C" {
    /// <sandbox.h>: compiles `profile` (SBPL when `flags` is 0) and applies it
    /// to the calling process. On failure returns -1 and points `errorbuf` at
    /// a message to release with `sandbox_free_error`.
    fn sandbox_init(profile: *const c_char, flags: u64, errorbuf: *mut *mut c_char) -> c_int;
    fn sandbox_free_error(errorbuf: *mut c_char);
    /// libsystem_sandbox (declared as Chromium and WebKit declare it): whether
    /// the sandbox of process `pid` would refuse `operation` on the argument
    /// that follows, of kind `filter_type` (1: a path, as a C string): 1 if
    /// it would, 0 if not (or `pid` is not sandboxed), -1 on failure.
    fn sandbox_check(pid: c_int, operation: *const c_char, filter_type: c_int, ...) -> c_int;
    /// <unistd.h>.
    fn fork() -> c_int;
}

/// `SANDBOX_FILTER_PATH` of libsystem_sandbox's `enum sandbox_filter_type`.
const SANDBOX_FILTER_PATH: c_int = 1;

/// Applies `profile` (SBPL) to the calling process and everything it starts
/// from now on. The error carries the kernel's own explanation.
pub fn restrict_self(profile: &str) -> Result<(), SandboxError> {
    let profile = CString::new(profile).map_err(|_| SandboxError::Nul)?;
    apply(&profile).map_err(SandboxError::Refused)
}

/// `sandbox_init` on a prepared profile; the error text on failure.
fn apply(profile: &CStr) -> Result<(), String> {
    let mut error: *mut c_char = std::ptr::null_mut();
    // SAFETY: `profile` is a NUL-terminated string that outlives the call,
    // and `error` is a valid place for the function to store a pointer.
    let rc = unsafe { sandbox_init(profile.as_ptr(), 0, &mut error) };
    if rc == 0 {
        return Ok(());
    }
    if error.is_null() {
        return Err(io::Error::last_os_error().to_string());
    }
    // SAFETY: on failure `sandbox_init` set `error` to a NUL-terminated string
    // it allocated; it is copied before being released, exactly once.
    let text = unsafe { CStr::from_ptr(error) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: `error` came from `sandbox_init` and is not used after this.
    unsafe { sandbox_free_error(error) };
    Err(text)
}

/// Arranges for the child `cmd` starts to apply `profile` to itself between
/// fork and exec, so the program runs confined from its first instruction.
///
/// If the kernel refuses the profile the child never runs the program, and
/// spawning fails with "Operation not permitted": only an error number
/// crosses back from the child, not the kernel's text. [`restrict_self`] on
/// the same profile in the parent shows that text, at the cost of confining
/// the parent too.
pub fn confine(cmd: &mut Command, profile: &str) -> Result<(), SandboxError> {
    // Everything that allocates in the parent is done here, before fork.
    let profile = CString::new(profile).map_err(|_| SandboxError::Nul)?;
    let hook = move || match apply(&profile) {
        Ok(()) => Ok(()),
        Err(_) => Err(io::Error::from_raw_os_error(EPERM)),
    };
    // SAFETY: `pre_exec` asks that the hook be safe to run in a forked child.
    // `sandbox_init` is not async-signal-safe: it compiles the profile, which
    // allocates, and a child forked while another thread held the allocator's
    // lock could deadlock in it. `nd7 run` forks the agent while it has only
    // one thread, so no lock can be held by a thread that the fork left
    // behind, and the child is as safe to run this as its parent. The hook
    // touches nothing else of the parent's state: the profile is its own copy.
    unsafe { cmd.pre_exec(hook) };
    Ok(())
}

/// The file in a run's directory on which every writer holds a shared lock
/// for as long as it lives, so that `nd7 run` can wait for the last
/// `exec_end` before it writes `run_end` ([`wait_for_writers`]).
pub const WRITERS_LOCK: &str = "writers.lock";

/// The half of `nd7-exec` this process is, after [`split`].
pub enum Half {
    /// The caller's child: passes signals on, waits for the writer.
    Front(Front),
    /// The writer: a child of the front, so of no confined process, which
    /// therefore cannot signal it (the profiles allow a signal only within
    /// the sender's sandbox and to its own children). It knows when the
    /// front is gone by its lifeline.
    Writer(Lifeline),
}

/// The front's side: the writer's pid, and the lifeline's writing end,
/// which closes when the front ends however it ends.
pub struct Front {
    writer: u32,
    _lifeline: std::io::PipeWriter,
}

/// The writer's side of the lifeline: reading it ends when the front is
/// gone.
pub struct Lifeline(std::io::PipeReader);

/// Splits this process in two ([`Half`]). Call it while the process has
/// one thread, before anything is confined or started.
pub fn split() -> io::Result<Half> {
    // Both ends are closed at exec, so no command inherits the lifeline.
    let (reader, writer) = std::io::pipe()?;
    // SAFETY: `fork` has no arguments and no memory of ours to misuse. The
    // process has one thread (nd7-exec forks before it starts any), so the
    // child is a whole copy, with no lock held by a thread it lacks, and may
    // do anything its parent could.
    let pid = unsafe { fork() };
    match pid {
        -1 => Err(io::Error::last_os_error()),
        0 => {
            drop(writer);
            Ok(Half::Writer(Lifeline(reader)))
        }
        pid => {
            drop(reader);
            Ok(Half::Front(Front {
                writer: pid as u32,
                _lifeline: writer,
            }))
        }
    }
}

/// The signals a caller sends to end or interrupt a command: passed from
/// the front to the writer and from the writer to the command's group.
const PASSED_ON: [c_int; 4] = [
    signal_hook::consts::SIGINT,
    signal_hook::consts::SIGTERM,
    signal_hook::consts::SIGHUP,
    signal_hook::consts::SIGQUIT,
];

impl Front {
    /// Waits for the writer and returns its exit code (the command's, or
    /// 128+N for signal N). For a command (`command`), also passes SIGINT,
    /// SIGTERM, SIGHUP and SIGQUIT on to the writer, and ends this process
    /// as soon as its parent is gone (a caller that killed the shell that
    /// started it): the lifeline closes, and the writer ends the command. A
    /// hook's writer gets no signal: it finishes its append whatever happens
    /// to the front.
    pub fn wait(self, command: bool) -> io::Result<i32> {
        let writer = rustix::process::Pid::from_raw(self.writer as i32)
            .ok_or_else(|| io::Error::other("the writer has no pid"))?;
        if command {
            if let Ok(mut signals) = signal_hook::iterator::Signals::new(PASSED_ON) {
                std::thread::spawn(move || {
                    for sig in signals.forever() {
                        if let Some(sig) = rustix::process::Signal::from_named_raw(sig) {
                            let _ = rustix::process::kill_process(writer, sig);
                        }
                    }
                });
            }
            let parent = rustix::process::getppid();
            std::thread::spawn(move || {
                loop {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    if rustix::process::getppid() != parent {
                        std::process::exit(128 + signal_hook::consts::SIGHUP);
                    }
                }
            });
        }
        loop {
            match rustix::process::waitpid(Some(writer), rustix::process::WaitOptions::empty()) {
                Ok(Some((_, status))) => {
                    if let Some(code) = status.exit_status() {
                        return Ok(code);
                    }
                    if let Some(sig) = status.terminating_signal() {
                        return Ok(128 + sig);
                    }
                }
                Ok(None) => {}
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
}

impl Lifeline {
    /// Blocks until the front is gone.
    pub fn wait(mut self) {
        use std::io::Read;
        let mut byte = [0u8; 1];
        loop {
            match self.0.read(&mut byte) {
                Ok(0) => return,
                Err(e) if e.kind() != io::ErrorKind::Interrupted => return,
                _ => {}
            }
        }
    }
}

/// The writer's running command: `/bin/zsh -c <command>` confined by the
/// run's per-command profile, in a process group of its own.
pub struct Shell {
    child: std::process::Child,
}

impl Shell {
    /// Starts it, with every `DYLD_*` variable left out of the shell's
    /// environment. Call it before this process starts any thread: the
    /// profile is applied between fork and exec.
    pub fn start(command: &str, profile: &str) -> io::Result<Shell> {
        let mut shell = Command::new("/bin/zsh");
        shell.arg("-c").arg("--").arg(command).process_group(0);
        for (name, _) in std::env::vars_os() {
            if is_dyld(&name) {
                shell.env_remove(name);
            }
        }
        confine(&mut shell, profile).map_err(io::Error::other)?;
        Ok(Shell {
            child: shell.spawn()?,
        })
    }

    /// Passes SIGINT, SIGTERM, SIGHUP and SIGQUIT that this process gets on
    /// to the command's group (registered before the command started, so
    /// none is lost), and kills the group once `lifeline` says the front is
    /// gone; returns whether that happened, and the shell's status.
    ///
    /// Nothing is sent to the group once its leader has ended: the shell is
    /// waited for without being reaped first, and only then marked ended
    /// and reaped, so no signal can reach a group that took its id later.
    pub fn wait(
        mut self,
        signals: Option<signal_hook::iterator::Signals>,
        lifeline: Lifeline,
    ) -> (bool, io::Result<std::process::ExitStatus>) {
        use std::sync::{Arc, Mutex};
        let group = rustix::process::Pid::from_raw(self.child.id() as i32);
        // Whether the front was gone first; and, behind the lock, whether
        // the shell has ended (then nothing is sent any more).
        let state = Arc::new(Mutex::new((false, false)));
        let send = {
            let state = state.clone();
            move |sig: rustix::process::Signal, from_lifeline: bool| {
                let Ok(mut state) = state.lock() else { return };
                if state.1 {
                    return;
                }
                if let Some(group) = group {
                    let _ = rustix::process::kill_process_group(group, sig);
                }
                state.0 |= from_lifeline;
            }
        };
        if let Some(mut signals) = signals {
            let send = send.clone();
            std::thread::spawn(move || {
                for sig in signals.forever() {
                    if let Some(sig) = rustix::process::Signal::from_named_raw(sig) {
                        send(sig, false);
                    }
                }
            });
        }
        std::thread::spawn(move || {
            lifeline.wait();
            send(rustix::process::Signal::KILL, true);
        });
        if let Some(pid) = group {
            let exited =
                rustix::process::WaitIdOptions::EXITED | rustix::process::WaitIdOptions::NOWAIT;
            while let Err(rustix::io::Errno::INTR) =
                rustix::process::waitid(rustix::process::WaitId::Pid(pid), exited)
            {}
        }
        let gone = match state.lock() {
            Ok(mut state) => {
                state.1 = true;
                state.0
            }
            Err(_) => false,
        };
        (gone, self.child.wait())
    }
}

/// The signals the writer passes on, registered at once (before the command
/// starts, so that one the front passes on meanwhile is kept, not lost).
pub fn passed_on() -> Option<signal_hook::iterator::Signals> {
    signal_hook::iterator::Signals::new(PASSED_ON).ok()
}

/// A shared lock on the run's [`WRITERS_LOCK`], held while the returned
/// file is open. `None` when it cannot be taken: the writer goes on, and
/// `nd7 run` then does not wait for it.
pub fn writing(run_dir: &std::path::Path) -> Option<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(run_dir.join(WRITERS_LOCK))
        .ok()?;
    file.lock_shared().ok()?;
    Some(file)
}

/// Waits, at most `wait`, until no writer of the run in `run_dir` is left.
pub fn wait_for_writers(run_dir: &std::path::Path, wait: std::time::Duration) {
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(file) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(run_dir.join(WRITERS_LOCK))
    else {
        return;
    };
    let deadline = std::time::Instant::now() + wait;
    while matches!(file.try_lock(), Err(std::fs::TryLockError::WouldBlock))
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Whether process `pid` is in one of the run's sandboxes: its sandbox
/// refuses to read `mark` (which only the run's profiles deny) and lets
/// it read `unmarked` (which no profile names, so only a sandbox that denies
/// by default refuses it). Unsandboxed processes, other runs' and other
/// programs' sandboxes answer otherwise.
pub fn in_runs_sandbox(pid: u32, mark: &std::path::Path, unmarked: &std::path::Path) -> bool {
    let (Ok(pid), Ok(mark), Ok(unmarked)) = (
        c_int::try_from(pid),
        CString::new(mark.as_os_str().as_bytes()),
        CString::new(unmarked.as_os_str().as_bytes()),
    ) else {
        return false;
    };
    let refuses = |path: &CStr| {
        // SAFETY: the operation and the path are NUL-terminated strings
        // that outlive the call, the path passed as the one variadic
        // argument a path filter takes.
        unsafe {
            sandbox_check(
                pid,
                c"file-read-data".as_ptr(),
                SANDBOX_FILTER_PATH,
                path.as_ptr(),
            )
        }
    };
    refuses(&mark) == 1 && refuses(&unmarked) == 0
}

/// Ends every process of the user still in the run's sandboxes (by
/// `mark`, [`in_runs_sandbox`]), looking again until none is found (a
/// fork can race a kill), at most ten times; returns what was ended.
pub fn end_marked(mark: &std::path::Path, unmarked: &std::path::Path) -> crate::sandbox::Leftovers {
    let mut ended = crate::sandbox::Leftovers::default();
    let mut killed: std::collections::BTreeSet<(u32, u64)> = std::collections::BTreeSet::new();
    for _ in 0..10 {
        let found: Vec<(u32, u64, String)> = crate::kernel::macos::own_processes()
            .into_iter()
            .filter(|(pid, start, _)| !killed.contains(&(*pid, *start)))
            .filter(|(pid, _, _)| in_runs_sandbox(*pid, mark, unmarked))
            .collect();
        if found.is_empty() {
            break;
        }
        for (pid, start, name) in found {
            let Some(target) = rustix::process::Pid::from_raw(pid as i32) else {
                continue;
            };
            killed.insert((pid, start));
            if rustix::process::kill_process(target, rustix::process::Signal::KILL).is_ok() {
                ended.count += 1;
                if ended.processes.len() < 256 {
                    ended.processes.push((pid, name));
                }
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    ended
}

/// Whether `name` is one of dyld's variables, which can load code into a
/// program (`DYLD_INSERT_LIBRARIES`, `DYLD_LIBRARY_PATH`, …).
fn is_dyld(name: &OsStr) -> bool {
    name.as_bytes().starts_with(b"DYLD_")
}

/// These run only on macOS; on Linux `.ci/check-macos` type-checks them.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Policy, Roots, seatbelt};

    #[test]
    fn dyld_variables_are_recognised_by_prefix() {
        assert!(is_dyld(OsStr::new("DYLD_INSERT_LIBRARIES")));
        assert!(is_dyld(OsStr::new("DYLD_")));
        assert!(!is_dyld(OsStr::new("LD_PRELOAD")));
        assert!(!is_dyld(OsStr::new("MY_DYLD_X")));
    }

    #[test]
    fn a_profile_the_kernel_cannot_compile_is_refused_with_its_reason() {
        // Refused before anything is applied, so this process stays as it was.
        match restrict_self("(version 1) (allow no-such-operation)") {
            Err(SandboxError::Refused(text)) => assert!(!text.is_empty()),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            restrict_self("(version 1)\0"),
            Err(SandboxError::Nul)
        ));
    }

    /// The assumption ADR-0075's sweep stands on: the kernel says of
    /// another process whether its sandbox refuses the run's mark.
    #[test]
    fn a_process_in_the_sessions_sandbox_is_known_by_its_mark_and_no_other_is() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("resolved");
        let mut policy = Policy::new(Roots {
            project: root.join("project"),
            temp: root.join("tmp"),
            home: root.join("home"),
            state: root.join("home/.local/state/nd7"),
            exit: root.join("nd7-exec"),
        });
        let mark = std::path::PathBuf::from(format!("/.nd7-run-test-{}", std::process::id()));
        let unmarked = seatbelt::unmarked(&mark);
        let start = |policy: &Policy| {
            let mut sleep = Command::new("/bin/sleep");
            sleep.arg("30");
            confine(&mut sleep, &seatbelt::command(policy)).expect("profile prepared");
            sleep.spawn().expect("spawned")
        };
        policy.mark = Some(mark.clone());
        let mut ours = start(&policy);
        policy.mark = Some(std::path::PathBuf::from("/.nd7-run-another"));
        let mut theirs = start(&policy);
        let found = |child: &std::process::Child| in_runs_sandbox(child.id(), &mark, &unmarked);
        let (in_ours, in_theirs) = (found(&ours), found(&theirs));
        let me = in_runs_sandbox(std::process::id(), &mark, &unmarked);
        for child in [&mut ours, &mut theirs] {
            let _ = child.kill();
            let _ = child.wait();
        }
        assert!(
            in_ours,
            "a process under the session's profile is not found"
        );
        assert!(
            !in_theirs,
            "another session's process is taken for this one's"
        );
        assert!(!me, "an unsandboxed process is taken for the session's");
    }

    #[test]
    fn a_confined_child_writes_the_project_and_not_the_home() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("resolved");
        let (project, home) = (root.join("project"), root.join("home"));
        for d in [&project, &home, &home.join(".nd7")] {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        let policy = Policy::new(Roots {
            project: project.clone(),
            temp: project.join("tmp"),
            home: home.clone(),
            state: home.join(".local/state/nd7"),
            exit: root.join("nd7-exec"),
        });
        let mut sh = Command::new("/bin/sh");
        sh.arg("-c")
            .arg("echo a > \"$1/ok\"; echo b > /dev/null; echo c > \"$2/no\"; echo d > \"$2/.nd7/no\"")
            .arg("sh")
            .arg(&project)
            .arg(&home);
        confine(&mut sh, &seatbelt::command(&policy)).expect("profile prepared");
        let status = sh.status().expect("spawned");
        assert!(!status.success());
        assert!(project.join("ok").exists());
        assert!(!home.join("no").exists());
        assert!(!home.join(".nd7/no").exists());
    }
}
