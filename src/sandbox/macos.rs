//! Seatbelt: applying a profile to the calling process or to a child between
//! fork and exec, and `nd7-exec`'s last step, becoming the shell under the
//! session's profile. (The chain of parent processes is read with libproc in
//! [`crate::kernel`].)
//!
//! A Seatbelt profile, once applied, holds for the process and everything it
//! starts, and the kernel refuses any other profile after it (ADR-0007). The
//! profiles themselves are rendered by [`crate::policy::seatbelt`]. All of
//! nd7's `unsafe` for Seatbelt is in this file: two functions of libSystem,
//! declared here rather than through a crate.

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
        "macOS refused nd7's sandbox profile: {0} (a process that is already sandboxed cannot take another profile: start nd7 from a terminal outside any sandbox)"
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
}

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

/// What `nd7-exec` does last: becomes `/bin/zsh -c <command>` confined by
/// `profile`, with every `DYLD_*` variable left out of the shell's
/// environment so no library can be injected into it. Returns only on
/// failure, with nothing run.
///
/// The command is one argument after `--`, so a command starting with `-` or
/// `+` is run, not taken as the shell's options.
pub fn exec_shell(command: &str, profile: &str) -> io::Error {
    let mut shell = Command::new("/bin/zsh");
    shell.arg("-c").arg("--").arg(command);
    for (name, _) in std::env::vars_os() {
        if is_dyld(&name) {
            shell.env_remove(name);
        }
    }
    if let Err(e) = restrict_self(profile) {
        return io::Error::other(e);
    }
    shell.exec()
}

/// `/bin/zsh -c <command>` confined by `profile`, as a child this process
/// waits for, passing on SIGINT, SIGTERM, SIGHUP and SIGQUIT: so that
/// `nd7-exec` can write down how the command ended. Every `DYLD_*` variable
/// is left out of the shell's environment. Call it before this process
/// starts any thread: the profile is applied between fork and exec.
pub fn run_shell(command: &str, profile: &str) -> io::Result<std::process::ExitStatus> {
    let mut shell = Command::new("/bin/zsh");
    shell.arg("-c").arg("--").arg(command);
    for (name, _) in std::env::vars_os() {
        if is_dyld(&name) {
            shell.env_remove(name);
        }
    }
    confine(&mut shell, profile).map_err(io::Error::other)?;
    let mut child = shell.spawn()?;
    let pid = child.id() as i32;
    let forwarded = [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
        signal_hook::consts::SIGQUIT,
    ];
    if let Ok(mut signals) = signal_hook::iterator::Signals::new(forwarded) {
        std::thread::spawn(move || {
            for sig in signals.forever() {
                if let (Some(pid), Some(sig)) = (
                    rustix::process::Pid::from_raw(pid),
                    rustix::process::Signal::from_named_raw(sig),
                ) {
                    let _ = rustix::process::kill_process(pid, sig);
                }
            }
        });
    }
    child.wait()
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
