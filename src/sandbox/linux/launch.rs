//! Starting a confined program the way `posix_spawn` starts one: in a child
//! that shares `nd7 run`'s memory and suspends the calling thread until
//! it has exec'd (`clone` with `CLONE_VM|CLONE_VFORK`), rather than in a
//! copy of the whole of `nd7 run` (`fork`, which `std::process::Command` uses as
//! soon as a step must run before exec).
//!
//! A fork copies the page tables of a process that by then has several
//! threads and megabytes of heap, every page the two touch next is copied
//! again, and the child's exec tears the copy down; that was a third of the
//! agent's start and most of a command's overhead through the exit
//! (ADR-0087). Sharing memory is only sound because the child does nothing
//! a copy would have protected the parent from: it runs on a stack of its
//! own, makes raw system calls on data the suspended thread prepared,
//! allocates nothing, takes no lock, and writes only its own stack, the
//! launch's error slot and the buffers its steps own. Every signal is
//! blocked around the clone, and the child sets each caught signal back to
//! its default before it unblocks them for the program, so no handler of
//! `nd7 run` ever runs in it.
//!
//! What the child does, in order: signal dispositions, its standard
//! descriptors, its process group, its working directory, then each step
//! (`pre_exec`: the run's namespaces' and the floor's own, which were
//! written for a child between fork and exec and hold to the same rules),
//! an empty signal mask, and `execve` of a path resolved beforehand (or of
//! `/bin/sh` with it, for a script with no `#!` line, as `execvp` does).

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

use nix::sys::signal::{SigSet, SigmaskHow, pthread_sigmask, sigprocmask};

/// One step run in the child just before exec. It runs where only
/// async-signal-safe calls are sound and must not allocate.
pub type Step = Box<dyn FnMut() -> io::Result<()> + Send + Sync>;

/// Something a confined program is started from, to which the sandbox adds
/// the steps the child takes before exec: [`Launch`], or a
/// `std::process::Command` where a fork is wanted (its output piped, say).
pub trait PreExec {
    /// Adds `step`, run after the ones added before it.
    ///
    /// # Safety
    /// `step` runs in the child before exec, as `CommandExt::pre_exec`'s
    /// closures do, and must keep to the same rules.
    unsafe fn add_step(&mut self, step: Step);
}

impl PreExec for Command {
    unsafe fn add_step(&mut self, step: Step) {
        // SAFETY: the caller's promise is `pre_exec`'s.
        unsafe { self.pre_exec(step) };
    }
}

/// Why a program could not be started.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("{0}: not found (searched the PATH it would run with)")]
    NotFound(String),
    #[error("{0}: a NUL byte in a program, argument, variable or directory")]
    Nul(String),
    #[error("{what}: {source}")]
    Os {
        what: &'static str,
        source: io::Error,
    },
}

impl From<LaunchError> for io::Error {
    fn from(e: LaunchError) -> io::Error {
        match e {
            LaunchError::Os { source, .. } => source,
            LaunchError::NotFound(_) => io::Error::new(io::ErrorKind::NotFound, e.to_string()),
            LaunchError::Nul(_) => io::Error::new(io::ErrorKind::InvalidInput, e.to_string()),
        }
    }
}

/// A program to start, described the way `std::process::Command` describes
/// one (the subset nd7 uses), and started by [`Launch::spawn`].
pub struct Launch {
    program: OsString,
    args: Vec<OsString>,
    /// Variables set (`Some`) or removed (`None`) over the inherited ones.
    env: Vec<(OsString, Option<OsString>)>,
    env_clear: bool,
    cwd: Option<PathBuf>,
    /// A directory opened beforehand, moved to by descriptor (`fchdir`)
    /// instead of `cwd`'s path.
    cwd_fd: Option<OwnedFd>,
    /// Descriptors for the child's standard input, output and error;
    /// `None` inherits `nd7 run`'s.
    stdio: [Option<OwnedFd>; 3],
    new_group: bool,
    steps: Vec<Step>,
}

impl PreExec for Launch {
    unsafe fn add_step(&mut self, step: Step) {
        self.steps.push(step);
    }
}

/// A started program: its pid, to wait for.
#[derive(Debug)]
pub struct Launched {
    pid: libc::pid_t,
}

impl Launched {
    /// The program's pid.
    pub fn id(&self) -> u32 {
        self.pid as u32
    }

    /// Waits for the program to end and reaps it.
    pub fn wait(&mut self) -> io::Result<ExitStatus> {
        let pid = rustix::process::Pid::from_raw(self.pid).ok_or(io::ErrorKind::InvalidInput)?;
        loop {
            match rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty()) {
                Ok(Some((_, status))) => return Ok(ExitStatus::from_raw(status.as_raw())),
                Ok(None) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// What the child reports when it fails before exec: the step (an index
/// into [`FAILED_AT`]) and errno. Written by the child alone, read by the
/// parent once the child has exec'd or ended.
#[derive(Clone, Copy)]
struct Failure {
    at: usize,
    errno: i32,
}

const FAILED_AT: &[&str] = &[
    "set the child's signal dispositions",
    "give the child its standard descriptors",
    "put the child in a process group of its own",
    "move the child to its working directory",
    "confine the child",
    "clear the child's signal mask",
    "execute the program",
];

/// Everything the child reads, prepared by the parent before the clone.
struct Prepared<'a> {
    path: &'a CString,
    argv: &'a [*const libc::c_char],
    /// `/bin/sh`, the path, and the arguments after argv[0]: what `execvp`
    /// runs for a file with no `#!` line that the kernel will not execute.
    sh_argv: &'a [*const libc::c_char],
    envp: &'a [*const libc::c_char],
    cwd: Option<&'a CString>,
    cwd_fd: Option<BorrowedFd<'a>>,
    stdio: [Option<BorrowedFd<'a>>; 3],
    new_group: bool,
    steps: &'a mut [Step],
    failed: Option<Failure>,
}

/// The child's stack: the steps run Rust code (the floor's), so it is far
/// larger than they need, with a guard page below it.
const STACK: usize = 256 * 1024;

/// The highest signal number, plus one.
const NSIG: libc::c_int = 65;

impl Launch {
    /// A launch of `program` (a path, or a name looked up in the `PATH`
    /// the program will run with), with no arguments, `nd7 run`'s
    /// environment and standard descriptors, and its working directory.
    pub fn new(program: impl AsRef<OsStr>) -> Launch {
        Launch {
            program: program.as_ref().to_os_string(),
            args: Vec::new(),
            env: Vec::new(),
            env_clear: false,
            cwd: None,
            cwd_fd: None,
            stdio: [None, None, None],
            new_group: false,
            steps: Vec::new(),
        }
    }

    /// A launch of what `command` describes: its program, arguments,
    /// variables and directory (its standard descriptors and steps are not
    /// readable, and not taken: give the former with [`Launch::stdio`]).
    pub fn from_command(command: &Command) -> Launch {
        let mut launch = Launch::new(command.get_program());
        launch.args = command.get_args().map(OsStr::to_os_string).collect();
        launch.env = command
            .get_envs()
            .map(|(k, v)| (k.to_os_string(), v.map(OsStr::to_os_string)))
            .collect();
        launch.cwd = command.get_current_dir().map(Path::to_path_buf);
        launch
    }

    pub fn arg(&mut self, arg: impl AsRef<OsStr>) -> &mut Launch {
        self.args.push(arg.as_ref().to_os_string());
        self
    }

    /// Starts from an empty environment rather than `nd7 run`'s.
    pub fn env_clear(&mut self) -> &mut Launch {
        self.env_clear = true;
        self.env.clear();
        self
    }

    pub fn env(&mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> &mut Launch {
        self.env.push((
            key.as_ref().to_os_string(),
            Some(value.as_ref().to_os_string()),
        ));
        self
    }

    pub fn current_dir(&mut self, dir: impl AsRef<Path>) -> &mut Launch {
        self.cwd = Some(dir.as_ref().to_path_buf());
        self
    }

    /// Works in the directory `dir` is open on (`fchdir`), not by path.
    pub fn current_dir_fd(&mut self, dir: OwnedFd) -> &mut Launch {
        self.cwd_fd = Some(dir);
        self
    }

    /// The child's standard input, output and error.
    pub fn stdio(&mut self, fds: [OwnedFd; 3]) -> &mut Launch {
        self.stdio = fds.map(Some);
        self
    }

    /// Puts the child in a new process group of its own.
    pub fn new_process_group(&mut self) -> &mut Launch {
        self.new_group = true;
        self
    }

    /// The environment the program gets, in order, later settings winning.
    fn environment(&self) -> Vec<(OsString, OsString)> {
        let mut vars: Vec<(OsString, OsString)> = if self.env_clear {
            Vec::new()
        } else {
            std::env::vars_os().collect()
        };
        for (key, value) in &self.env {
            vars.retain(|(k, _)| k != key);
            if let Some(value) = value {
                vars.push((key.clone(), value.clone()));
            }
        }
        vars
    }

    /// The path to execute: `program` itself when it holds a slash, else
    /// the first executable file of that name in `path` (the `PATH` the
    /// program runs with; the default search path when it has none), as
    /// `execvp` would find it.
    fn resolve(program: &OsStr, path: Option<&OsStr>) -> Result<PathBuf, LaunchError> {
        crate::files::on_path(program, path)
            .ok_or_else(|| LaunchError::NotFound(program.to_string_lossy().into_owned()))
    }

    /// Starts the program. Returns once it has exec'd; if the child failed
    /// before (a step refused, the program could not be executed), the
    /// child is reaped and the error says which part failed.
    pub fn spawn(mut self) -> Result<Launched, LaunchError> {
        let nul = |what: &OsStr| LaunchError::Nul(what.to_string_lossy().into_owned());
        let cstring = |s: &OsStr| CString::new(s.as_bytes()).map_err(|_| nul(s));
        let vars = self.environment();
        let search = vars
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_os_str());
        let path = cstring(Self::resolve(&self.program, search)?.as_os_str())?;
        let argv_owned: Vec<CString> = std::iter::once(&self.program)
            .chain(&self.args)
            .map(|a| cstring(a))
            .collect::<Result<_, _>>()?;
        let envp_owned: Vec<CString> = vars
            .into_iter()
            .map(|(k, v)| {
                let mut entry = k.into_vec();
                entry.push(b'=');
                entry.extend(v.into_vec());
                CString::new(entry).map_err(|e| nul(OsStr::from_bytes(&e.into_vec())))
            })
            .collect::<Result<_, _>>()?;
        let argv: Vec<*const libc::c_char> = argv_owned
            .iter()
            .map(|a| a.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect();
        let sh_argv: Vec<*const libc::c_char> = [c"/bin/sh".as_ptr(), path.as_ptr()]
            .into_iter()
            .chain(argv_owned.iter().skip(1).map(|a| a.as_ptr()))
            .chain(std::iter::once(std::ptr::null()))
            .collect();
        let envp: Vec<*const libc::c_char> = envp_owned
            .iter()
            .map(|a| a.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect();
        let cwd = self
            .cwd
            .as_ref()
            .map(|c| cstring(c.as_os_str()))
            .transpose()?;
        // A descriptor meant for 0, 1 or 2 is moved above them first, so
        // that placing one cannot close another not yet placed.
        for fd in self.stdio.iter_mut() {
            if let Some(owned) = fd.take() {
                let raised = if owned.as_raw_fd() < 3 {
                    rustix::io::fcntl_dupfd_cloexec(&owned, 3).map_err(|e| LaunchError::Os {
                        what: FAILED_AT[1],
                        source: e.into(),
                    })?
                } else {
                    owned
                };
                *fd = Some(raised);
            }
        }
        let stdio = [0, 1, 2].map(|i| self.stdio[i].as_ref().map(|f| f.as_fd()));
        let mut prepared = Prepared {
            path: &path,
            argv: &argv,
            sh_argv: &sh_argv,
            envp: &envp,
            cwd: cwd.as_ref(),
            cwd_fd: self.cwd_fd.as_ref().map(|f| f.as_fd()),
            stdio,
            new_group: self.new_group,
            steps: &mut self.steps,
            failed: None,
        };
        // SAFETY: `child` reads only `prepared`, which lives on this frame
        // until `vfork` returns, and keeps to a shared-memory child's rules
        // (this module's doc).
        let pid = unsafe { vfork(child, (&mut prepared as *mut Prepared<'_>).cast(), 0) }.map_err(
            |source| LaunchError::Os {
                what: "start a child",
                source,
            },
        )?;
        let mut launched = Launched { pid };
        if let Some(failure) = prepared.failed {
            let _ = launched.wait();
            return Err(LaunchError::Os {
                what: FAILED_AT[failure.at],
                source: io::Error::from_raw_os_error(failure.errno),
            });
        }
        Ok(launched)
    }
}

/// Runs `run(arg)` in a child that shares this process's memory (and, with
/// `flags`, starts in new namespaces), on a stack of its own, with every
/// signal blocked in this thread meanwhile; returns once the child has
/// exec'd or ended, with its pid (to reap).
///
/// # Safety
/// `run` must keep to what a child sharing memory may do: raw system calls,
/// no allocation, no lock, writes only through `arg` and to its own stack,
/// and no handler of `nd7 run` may run in it before it resets them;
/// `arg` must stay valid until this returns.
pub(super) unsafe fn vfork(
    run: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    arg: *mut libc::c_void,
    flags: libc::c_int,
) -> io::Result<libc::pid_t> {
    let stack = Stack::new()?;
    let mut old = SigSet::empty();
    let _ = pthread_sigmask(
        SigmaskHow::SIG_SETMASK,
        Some(&SigSet::all()),
        Some(&mut old),
    );
    // SAFETY: the child runs `run` on `stack`, which lives until after clone
    // returns; with CLONE_VFORK this thread is suspended until the child has
    // exec'd or ended, so the child's use of `arg` (and of this thread's
    // errno) races with nothing, and with every signal blocked no handler
    // can run in it (the caller's promise covers the rest). Other threads
    // share the memory but touch neither `arg` nor `stack`.
    let pid = unsafe {
        libc::clone(
            run,
            stack.top(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD | flags,
            arg,
        )
    };
    let clone_error = (pid < 0).then(io::Error::last_os_error);
    let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
    drop(stack);
    match clone_error {
        Some(e) => Err(e),
        None => Ok(pid),
    }
}

/// The child's stack, mapped with a guard page below it.
struct Stack {
    base: *mut libc::c_void,
    len: usize,
}

impl Stack {
    fn new() -> io::Result<Stack> {
        let page = rustix::param::page_size();
        let len = STACK + page;
        // SAFETY: an anonymous private mapping at an address the kernel
        // chooses; nothing else refers to it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = Stack { base, len };
        // SAFETY: the lowest page of the mapping just made.
        if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    /// The top of the stack, 16-byte aligned (it grows down).
    fn top(&self) -> *mut libc::c_void {
        ((self.base as usize + self.len) & !15) as *mut libc::c_void
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: unmaps the mapping made in `new`, once; the child that
        // ran on it has exec'd or ended.
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// The child. Raw system calls only, on memory the suspended parent
/// prepared; it returns (and so ends, with status 127) only when something
/// failed before exec, after writing what into `failed`.
extern "C" fn child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Prepared` the parent passed to clone, alive and
    // not touched by the parent until this child has exec'd or ended.
    let p = unsafe { &mut *arg.cast::<Prepared<'_>>() };
    let errno = || io::Error::last_os_error().raw_os_error().unwrap_or(0);
    let mut fail = |at: usize, errno: i32| {
        p.failed = Some(Failure { at, errno });
        127
    };
    // No handler of `nd7 run` may run here: each caught signal goes back
    // to its default (an ignored one stays ignored, as exec keeps it), and
    // SIGPIPE, which Rust's runtime ignores, to its default as well; so do
    // SIGTTIN and SIGTTOU, which `nd7 run` ignores so that a program
    // taking the terminal's foreground cannot have the tty driver stop it
    // (ADR-0099), and which are the program's own to choose.
    for sig in 1..NSIG {
        // SAFETY: sigaction reads and writes a local struct; a signal number
        // the kernel refuses (SIGKILL, SIGSTOP, glibc's own) only fails.
        unsafe {
            let mut current: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut current) != 0 {
                continue;
            }
            let handled =
                current.sa_sigaction != libc::SIG_DFL && current.sa_sigaction != libc::SIG_IGN;
            let reset = [libc::SIGPIPE, libc::SIGTTIN, libc::SIGTTOU].contains(&sig);
            if handled || reset {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                if libc::sigaction(sig, &default, std::ptr::null_mut()) != 0 {
                    return fail(0, errno());
                }
            }
        }
    }
    // The copy at 0, 1 or 2 is not close-on-exec.
    for (target, fd) in p.stdio.iter().enumerate() {
        let Some(fd) = *fd else { continue };
        let placed = match target {
            0 => rustix::stdio::dup2_stdin(fd),
            1 => rustix::stdio::dup2_stdout(fd),
            _ => rustix::stdio::dup2_stderr(fd),
        };
        if let Err(e) = placed {
            return fail(1, e.raw_os_error());
        }
    }
    if p.new_group
        && let Err(e) = rustix::process::setpgid(None, None)
    {
        return fail(2, e.raw_os_error());
    }
    if let Some(dir) = p.cwd_fd
        && let Err(e) = rustix::process::fchdir(dir)
    {
        return fail(3, e.raw_os_error());
    }
    if let Some(cwd) = p.cwd
        && let Err(e) = rustix::process::chdir(cwd.as_c_str())
    {
        return fail(3, e.raw_os_error());
    }
    for step in p.steps.iter_mut() {
        if let Err(e) = step() {
            return fail(4, e.raw_os_error().unwrap_or(0));
        }
    }
    // The mask is this child's own (CLONE_VFORK without CLONE_THREAD).
    if let Err(e) = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None) {
        return fail(5, e as i32);
    }
    // SAFETY: the path and the NULL-terminated argument and environment
    // arrays point at strings the parent keeps alive; on success nothing
    // returns.
    unsafe { libc::execve(p.path.as_ptr(), p.argv.as_ptr(), p.envp.as_ptr()) };
    // A script without `#!` is run by the shell, as `execvp` (and so
    // `std::process::Command`) does.
    if errno() == libc::ENOEXEC {
        // SAFETY: as above, with the arguments prepared for the shell.
        unsafe { libc::execve(c"/bin/sh".as_ptr(), p.sh_argv.as_ptr(), p.envp.as_ptr()) };
    }
    fail(6, errno())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A pipe: what the child writes to the second end, read from the first.
    fn pipe() -> (std::fs::File, OwnedFd) {
        let (r, w) = std::io::pipe().expect("pipe");
        (std::fs::File::from(OwnedFd::from(r)), OwnedFd::from(w))
    }

    fn null() -> OwnedFd {
        std::fs::File::open("/dev/null").expect("/dev/null").into()
    }

    /// Runs `sh -c script` with its output piped back, and returns it.
    fn output(mut launch: Launch) -> String {
        let (mut out, w) = pipe();
        launch.stdio([null(), w, null()]);
        let mut child = launch.spawn().expect("spawn");
        let mut text = String::new();
        out.read_to_string(&mut text).expect("read");
        assert!(child.wait().expect("wait").success(), "{text}");
        text
    }

    #[test]
    fn a_program_gets_its_arguments_environment_directory_and_descriptors() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut launch = Launch::new("sh");
        launch
            .arg("-c")
            .arg("echo \"$0|$1|$X|${HOME-unset}|$(pwd)\"")
            .arg("one")
            .arg("two")
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("X", "x y")
            .current_dir(dir.path());
        let real = std::fs::canonicalize(dir.path()).expect("real");
        assert_eq!(
            output(launch),
            format!("one|two|x y|unset|{}\n", real.display())
        );
    }

    #[test]
    fn the_programs_environment_is_the_sessions_with_what_was_set() {
        let mut launch = Launch::new("/bin/sh");
        launch
            .arg("-c")
            .arg("echo \"${ND7_LAUNCH_TEST}|${PATH:+path}\"")
            .env("ND7_LAUNCH_TEST", "set");
        assert_eq!(output(launch), "set|path\n");
    }

    #[test]
    fn a_program_not_on_the_path_is_named_and_nothing_runs() {
        match Launch::new("nd7-no-such-program").spawn() {
            Err(LaunchError::NotFound(name)) => assert_eq!(name, "nd7-no-such-program"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_file_that_cannot_be_executed_fails_at_exec() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("plain");
        std::fs::write(&file, "not a program").expect("write");
        match Launch::new(&file).spawn() {
            Err(LaunchError::Os { what, source }) => {
                assert_eq!(what, "execute the program");
                assert_eq!(source.raw_os_error(), Some(libc::EACCES));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_script_without_an_interpreter_line_runs_in_the_shell() {
        let dir = tempfile::tempdir().expect("tempdir");
        let script = dir.path().join("plain-script");
        std::fs::write(&script, "echo \"ran $1\"\n").expect("write");
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        let mut launch = Launch::new(&script);
        launch.arg("with-arg");
        assert_eq!(output(launch), "ran with-arg\n");
    }

    /// A step that fails keeps the program from running, and the error says
    /// so with the step's errno.
    #[test]
    fn a_failing_step_stops_the_exec_and_says_where() {
        let dir = tempfile::tempdir().expect("tempdir");
        let marker = dir.path().join("ran");
        let mut launch = Launch::new("/bin/sh");
        launch.arg("-c").arg(format!("touch {}", marker.display()));
        // SAFETY: the step makes no call at all.
        unsafe {
            launch.add_step(Box::new(|| Err(io::Error::from_raw_os_error(libc::EPERM))));
        }
        match launch.spawn() {
            Err(LaunchError::Os { what, source }) => {
                assert_eq!(what, "confine the child");
                assert_eq!(source.raw_os_error(), Some(libc::EPERM));
            }
            other => panic!("{other:?}"),
        }
        assert!(!marker.exists());
    }

    static HANDLED: AtomicBool = AtomicBool::new(false);

    extern "C" fn note_winch(_: libc::c_int) {
        HANDLED.store(true, Ordering::SeqCst);
    }

    /// Guards the reset of caught signals in `child`: a signal that reaches
    /// the child before exec is handled by default there, never by one of
    /// `nd7 run`'s handlers, which would run on memory the child shares
    /// with `nd7 run`. Without the reset, the SIGWINCH raised below (held
    /// pending until the child unblocks signals) runs `note_winch` in the
    /// child and sets `HANDLED` in `nd7 run`'s memory.
    #[test]
    fn no_handler_of_the_session_runs_in_the_child() {
        // SAFETY: installs a handler that only stores to an atomic.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = note_winch as *const () as libc::sighandler_t;
            assert_eq!(
                libc::sigaction(libc::SIGWINCH, &action, std::ptr::null_mut()),
                0
            );
        }
        let mut launch = Launch::new("/bin/true");
        // SAFETY: raise is async-signal-safe; SIGWINCH is blocked in the
        // child until just before exec.
        unsafe {
            launch.add_step(Box::new(|| {
                libc::raise(libc::SIGWINCH);
                Ok(())
            }));
        }
        let status = launch.spawn().expect("spawn").wait().expect("wait");
        assert!(status.success());
        assert!(
            !HANDLED.load(Ordering::SeqCst),
            "the session's handler ran in the child"
        );
    }

    /// Guards SIGPIPE's reset: Rust's runtime ignores SIGPIPE, and an
    /// ignored signal stays ignored across exec, so without the reset every
    /// program nd7 starts would ignore it (`yes | head` would never end).
    #[test]
    fn the_program_does_not_inherit_an_ignored_sigpipe() {
        // SAFETY: sets SIGPIPE to ignored in this test process, as Rust's
        // runtime does for a binary.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
        let mut launch = Launch::new("/bin/sh");
        launch.arg("-c").arg("grep SigIgn /proc/self/status");
        let line = output(launch);
        let mask = u64::from_str_radix(line.trim().trim_start_matches("SigIgn:").trim(), 16)
            .expect("a mask");
        assert_eq!(mask & (1 << (libc::SIGPIPE - 1)), 0, "{line}");
    }
}
