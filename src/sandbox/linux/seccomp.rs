//! The seccomp filter every process of a session runs under, beside
//! Landlock: the floor (the agent and all it starts) and each command the
//! exit starts get one, installed between fork and exec.
//!
//! It does three things Landlock cannot:
//!
//! - **Terminal injection.** `ioctl` requests that push input into a
//!   terminal or act on the console outside the session (`TIOCSTI`,
//!   `TIOCLINUX`, `TIOCCONS`, `TIOCSETD`, the keyboard-map and VT-switching
//!   requests) fail with `EPERM`. Everything else a terminal needs (sizes,
//!   modes, job control) is untouched, which Landlock's all-or-nothing
//!   `IOCTL_DEV` right could not offer.
//! - **Sockets.** `connect` and `bind` are handed to nd7 run's keeper
//!   (`SECCOMP_RET_USER_NOTIF`), which performs each connect itself against
//!   an allow-list (`super::supervise`); `io_uring_setup`, which could
//!   connect without a system call the filter sees, fails with `EPERM`.
//! - **Stopping.** A stop signal (`SIGSTOP`, `SIGTSTP`, `SIGTTIN`,
//!   `SIGTTOU`) sent by any call that names a signal (`kill`, `tkill`,
//!   `tgkill`, `rt_sigqueueinfo`, `rt_tgsigqueueinfo`, `pidfd_send_signal`,
//!   `fcntl(F_SETSIG)`), and `TCXONC` (`tcflow`, which suspends the user's
//!   terminal output), fail with `EPERM`: nothing inside may stop the
//!   session process, the program, or the user's terminal (ADR-0096). The
//!   terminal's own Ctrl-Z is the kernel's, not a call, and still works.
//! - **The filter itself.** A process inside may add filters of its own, but
//!   not one with a listener: a newer listener would receive the session's
//!   `connect` notifications first and could let them through.
//!
//! The program is rendered by pure code ([`program`]) from a table of system
//! call numbers per architecture, and checked by a small interpreter in the
//! tests. Only the low 32 bits of an `ioctl` request are compared, as the
//! kernel itself reads only those. Calls of the compatibility ABI (32-bit
//! x86 on x86-64, 32-bit Arm on arm64) are filtered with their own numbers;
//! x32 calls and any other architecture are refused outright.

use std::io;

/// The `ioctl` requests refused with `EPERM`, with why each is there. The
/// values are the asm-generic ones, shared by x86, Arm and RISC-V.
pub const DENIED_IOCTLS: [(&str, u32, &str); 15] = [
    ("TIOCSTI", 0x5412, "pushes bytes into the terminal's input"),
    (
        "TIOCLINUX",
        0x541C,
        "pastes the console selection as input, among others",
    ),
    ("TIOCCONS", 0x541D, "redirects the console's output"),
    ("TIOCSETD", 0x5423, "changes the terminal's line discipline"),
    (
        "KDSIGACCEPT",
        0x4B4E,
        "makes the console send a signal on a key",
    ),
    ("KDSKBENT", 0x4B47, "rewrites the console's keymap"),
    (
        "KDSKBSENT",
        0x4B49,
        "binds a string to a console function key",
    ),
    ("KDSKBDIACR", 0x4B4B, "rewrites the console's accent table"),
    (
        "KDSKBDIACRUC",
        0x4BFB,
        "rewrites the console's accent table",
    ),
    ("KDSETKEYCODE", 0x4B4D, "remaps console scancodes"),
    ("KDSKBMODE", 0x4B45, "switches the console keyboard's mode"),
    ("KDSETMODE", 0x4B3A, "switches the console to graphics"),
    ("VT_ACTIVATE", 0x5606, "switches the visible console"),
    ("VT_SETMODE", 0x5602, "takes over console switching"),
    ("VT_LOCKSWITCH", 0x560B, "locks console switching"),
];

/// `ioctl` requests refused with `EPERM` beside [`DENIED_IOCTLS`], because
/// they stop something the user needs (ADR-0096).
pub const STOPPING_IOCTLS: [(&str, u32, &str); 1] =
    [("TCXONC", 0x540A, "suspends the terminal's output (tcflow)")];

/// The stop signals, `SIGSTOP` to `SIGTTOU` (19 to 22 on every architecture
/// nd7 has a table for): refused to every call that sends a signal.
const FIRST_STOP: u32 = 19;
const PAST_STOPS: u32 = 23;
/// `fcntl`'s `F_SETSIG`: the signal the kernel sends a descriptor's owner.
const F_SETSIG: u32 = 10;

/// The calls that send a signal, for the architecture with audit value
/// `audit`: each call's number and which argument is the signal. Looked up
/// by the audit value, so a new architecture without a row sends signals
/// unfiltered (as before), which its test says.
pub fn signal_calls(audit: u32) -> &'static [(u32, u32)] {
    match audit {
        // x86-64: kill, tkill, tgkill, rt_sigqueueinfo, rt_tgsigqueueinfo,
        // pidfd_send_signal.
        AUDIT_X86_64 => &[(62, 1), (200, 1), (234, 2), (129, 1), (297, 2), (424, 1)],
        // i386.
        AUDIT_I386 => &[(37, 1), (238, 1), (270, 2), (178, 1), (335, 2), (424, 1)],
        // arm64 and riscv64 (the generic table).
        AUDIT_AARCH64 | AUDIT_RISCV64 => {
            &[(129, 1), (130, 1), (131, 2), (138, 1), (240, 2), (424, 1)]
        }
        // 32-bit Arm.
        AUDIT_ARM => &[(37, 1), (238, 1), (268, 2), (178, 1), (363, 2), (424, 1)],
        _ => &[],
    }
}

/// `fcntl` (and `fcntl64`) for the architecture with audit value `audit`.
pub fn fcntl_calls(audit: u32) -> &'static [u32] {
    match audit {
        AUDIT_X86_64 => &[72],
        AUDIT_I386 | AUDIT_ARM => &[55, 221],
        AUDIT_AARCH64 | AUDIT_RISCV64 => &[25],
        _ => &[],
    }
}

/// The `ioctl` requests that change a file's inode flags, refused with
/// `EPERM` with the `attrs` part: the `ioctl` forms of `file_setattr`, which
/// act on any file the session may merely open for reading (`NODUMP`,
/// `NOATIME`, `SYNC` on `~/.bashrc`), where Landlock gives no right and the
/// keeper sees no call. Nothing nd7 serves sets inode flags.
pub const ATTR_IOCTLS: [(&str, u32); 8] = [
    ("FS_IOC_SETFLAGS", 0x4008_6602),
    ("FS_IOC32_SETFLAGS", 0x4004_6602),
    ("FS_IOC_FSSETXATTR", 0x401C_5820),
    ("FS_IOC_SETVERSION", 0x4008_7602),
    ("FS_IOC32_SETVERSION", 0x4004_7602),
    ("FS_IOC_ENABLE_VERITY", 0x4080_6685),
    ("FS_IOC_SET_ENCRYPTION_POLICY", 0x800C_6613),
    ("BTRFS_IOC_SUBVOL_SETFLAGS", 0x4008_941A),
];

/// What the filter does with `connect` and `bind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sockets {
    /// Hand them to the keeper, which decides (`SECCOMP_RET_USER_NOTIF`).
    Supervised,
    /// Let them through: the kernel cannot let the keeper act for the
    /// session (say, `kernel.yama.ptrace_scope` of 2 or more).
    Open,
}

/// Which parts a filter has. Every process nd7 confines gets all three;
/// the parts are separate so the tests can tell them apart.
///
/// The filter cannot be installed once, on the session process, for
/// everything it starts to inherit: the kernel allows one listener per chain
/// of filters, and each command needs a listener of its own, whose hang-up
/// tells the keeper that the command's last process is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Filter {
    /// Refuse [`DENIED_IOCTLS`] and `io_uring_setup`.
    pub terminal: bool,
    /// Refuse a seccomp filter with a listener.
    pub no_listeners: bool,
    pub sockets: Sockets,
    /// Hand the calls that change a file's mode, owner, times or extended
    /// attributes ([`attr_calls`]) to the keeper where sockets are, too;
    /// refuse the 32-bit ones and `file_setattr` ([`refused_attr_calls`]).
    pub attrs: bool,
    /// Refuse stop signals and [`STOPPING_IOCTLS`].
    pub no_stops: bool,
    /// Refuse `ptrace`, `process_vm_writev` and the compatibility ABI's
    /// execs: nothing inside may trace, write into another process, or
    /// exec by an entry point the observer is not built for (ADR-0112).
    pub no_tracing: bool,
}

impl Filter {
    /// The filter of the floor and of every command.
    pub const fn full(sockets: Sockets) -> Filter {
        Filter {
            terminal: true,
            no_listeners: true,
            sockets,
            attrs: true,
            no_stops: true,
            no_tracing: true,
        }
    }
}

/// One classic-BPF instruction, as the kernel reads it.
pub type Insn = libc::sock_filter;

// Classic BPF opcodes used here, composed from the kernel's (libc's) parts.
const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const JSET_K: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

// seccomp_data offsets: nr, arch, then the arguments (little-endian, so an
// argument's low half comes first).
const NR: u32 = 0;
const ARCH: u32 = 4;
const fn arg_low(i: u32) -> u32 {
    16 + 8 * i
}

pub const RET_ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
pub const RET_NOTIFY: u32 = libc::SECCOMP_RET_USER_NOTIF;
pub const RET_KILL_PROCESS: u32 = libc::SECCOMP_RET_KILL_PROCESS;
pub const RET_EPERM: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;

const SECCOMP_SET_MODE_FILTER: u32 = libc::SECCOMP_SET_MODE_FILTER;
const FLAG_NEW_LISTENER: u32 = libc::SECCOMP_FILTER_FLAG_NEW_LISTENER as u32;
const X32_BIT: u32 = 0x4000_0000;
const SOCKETCALL_BIND: u32 = 2;
const SOCKETCALL_CONNECT: u32 = 3;

/// The system-call numbers the filter looks at, for one architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arch {
    pub audit: u32,
    pub ioctl: u32,
    pub connect: u32,
    pub bind: u32,
    pub seccomp: u32,
    pub io_uring_setup: u32,
    /// `socketcall`, where the ABI multiplexes sockets through it.
    pub socketcall: Option<u32>,
    /// Whether numbers with the x32 bit are this architecture's too.
    pub x32_bit: bool,
    pub ptrace: u32,
    pub process_vm_writev: u32,
    /// `execve` and `execveat`, where the filter refuses them (the
    /// compatibility ABI's, ADR-0112).
    pub refused_execs: Option<[u32; 2]>,
}

/// The architecture nd7 is built for, with the native numbers.
pub fn native() -> Option<Arch> {
    #[cfg(target_arch = "x86_64")]
    let audit = Some(AUDIT_X86_64);
    #[cfg(target_arch = "aarch64")]
    let audit = Some(AUDIT_AARCH64);
    #[cfg(target_arch = "riscv64")]
    let audit = Some(AUDIT_RISCV64);
    #[cfg(not(any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        target_arch = "riscv64"
    )))]
    let audit: Option<u32> = None;
    Some(Arch {
        audit: audit?,
        ioctl: libc::SYS_ioctl as u32,
        connect: libc::SYS_connect as u32,
        bind: libc::SYS_bind as u32,
        seccomp: libc::SYS_seccomp as u32,
        io_uring_setup: libc::SYS_io_uring_setup as u32,
        socketcall: None,
        x32_bit: cfg!(target_arch = "x86_64"),
        ptrace: libc::SYS_ptrace as u32,
        process_vm_writev: libc::SYS_process_vm_writev as u32,
        refused_execs: None,
    })
}

/// The 32-bit ABI the kernel also accepts from a process of this
/// architecture, if any.
pub fn compat() -> Option<Arch> {
    if cfg!(target_arch = "x86_64") {
        Some(COMPAT_I386)
    } else if cfg!(target_arch = "aarch64") {
        Some(COMPAT_ARM)
    } else {
        None
    }
}

/// i386, the compatibility ABI of x86-64.
const COMPAT_I386: Arch = Arch {
    audit: AUDIT_I386,
    ioctl: 54,
    connect: 362,
    bind: 361,
    seccomp: 354,
    io_uring_setup: 425,
    socketcall: Some(102),
    x32_bit: false,
    ptrace: 26,
    process_vm_writev: 348,
    refused_execs: Some([11, 358]),
};

/// 32-bit Arm, the compatibility ABI of arm64.
const COMPAT_ARM: Arch = Arch {
    audit: AUDIT_ARM,
    ioctl: 54,
    connect: 283,
    bind: 282,
    seccomp: 383,
    io_uring_setup: 425,
    socketcall: Some(102),
    x32_bit: false,
    ptrace: 26,
    process_vm_writev: 377,
    refused_execs: Some([11, 387]),
};

/// A call that changes a file's mode, owner, times or extended attributes.
/// Landlock has no right for any of them, so the filter hands each to the
/// keeper ([`super::attrs`]), which makes it itself inside the write roots
/// and refuses it elsewhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttrCall {
    Chmod,
    Fchmod,
    Fchmodat,
    Fchmodat2,
    Chown,
    Fchown,
    Lchown,
    Fchownat,
    Utime,
    Utimes,
    Futimesat,
    Utimensat,
    Setxattr,
    Lsetxattr,
    Fsetxattr,
    Removexattr,
    Lremovexattr,
    Fremovexattr,
    Setxattrat,
    Removexattrat,
}

/// A rename, handed to the keeper with the `attrs` part: onto a held git
/// configuration it is made by the keeper when what it changes runs
/// nothing ([`super::rename`], ADR-0134); any other goes on unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RenameCall {
    Rename,
    Renameat,
    Renameat2,
}

/// The [`RenameCall`]s of the architecture with audit value `audit`, by
/// number. The compatibility ABIs' are not handed over: there a rename onto
/// a held file is the mount's to refuse, as it was.
pub fn rename_calls(audit: u32) -> &'static [(u32, RenameCall)] {
    use RenameCall::*;
    match audit {
        AUDIT_X86_64 => &[(82, Rename), (264, Renameat), (316, Renameat2)],
        // riscv64 has only the flagged call: 38 is unused there.
        AUDIT_AARCH64 | AUDIT_RISCV64 => &[(38, Renameat), (276, Renameat2)],
        _ => &[],
    }
}

/// The audit values of the native architectures nd7 has tables for.
const AUDIT_X86_64: u32 = 0xC000_003E;
const AUDIT_AARCH64: u32 = 0xC000_00B7;
const AUDIT_RISCV64: u32 = 0xC000_00F3;
const AUDIT_I386: u32 = 0x4000_0003;
const AUDIT_ARM: u32 = 0x4000_0028;

/// `file_setattr` (Linux 6.17), the same number everywhere: it sets a
/// file's inode flags, which nothing nd7 serves needs; refused.
const FILE_SETATTR: u32 = 469;

/// The [`AttrCall`]s of the architecture with audit value `audit`, by
/// number: handed to the keeper. The generic table (arm64, RISC-V) has no
/// path-only or `utime` forms.
pub fn attr_calls(audit: u32) -> &'static [(u32, AttrCall)] {
    use AttrCall::*;
    const X86_64: [(u32, AttrCall); 20] = [
        (90, Chmod),
        (91, Fchmod),
        (92, Chown),
        (93, Fchown),
        (94, Lchown),
        (132, Utime),
        (188, Setxattr),
        (189, Lsetxattr),
        (190, Fsetxattr),
        (197, Removexattr),
        (198, Lremovexattr),
        (199, Fremovexattr),
        (235, Utimes),
        (260, Fchownat),
        (261, Futimesat),
        (268, Fchmodat),
        (280, Utimensat),
        (452, Fchmodat2),
        (463, Setxattrat),
        (466, Removexattrat),
    ];
    const GENERIC: [(u32, AttrCall); 14] = [
        (5, Setxattr),
        (6, Lsetxattr),
        (7, Fsetxattr),
        (14, Removexattr),
        (15, Lremovexattr),
        (16, Fremovexattr),
        (52, Fchmod),
        (53, Fchmodat),
        (54, Fchownat),
        (55, Fchown),
        (88, Utimensat),
        (452, Fchmodat2),
        (463, Setxattrat),
        (466, Removexattrat),
    ];
    match audit {
        AUDIT_X86_64 => &X86_64,
        AUDIT_AARCH64 | AUDIT_RISCV64 => &GENERIC,
        _ => &[],
    }
}

/// The calls of the same kind refused outright with `EPERM`: every one of
/// the 32-bit ABIs (their structures and 16-bit owners are not read by the
/// keeper; a 32-bit program cannot change modes, owners, times or
/// extended attributes under nd7), and `file_setattr` everywhere.
pub fn refused_attr_calls(audit: u32) -> &'static [u32] {
    // chmod, lchown, utime, fchmod, fchown, chown, lchown32, fchown32,
    // chown32, then the six xattr calls: 32-bit Arm kept i386's numbers.
    const OLD: [u32; 15] = [
        15, 16, 30, 94, 95, 182, 198, 207, 212, 226, 227, 228, 235, 236, 237,
    ];
    // utimensat_time64, fchmodat2, setxattrat, removexattrat and
    // file_setattr: numbered alike on every ABI since Linux 5.1.
    const NEW: [u32; 5] = [412, 452, 463, 466, FILE_SETATTR];
    // utimes, fchownat, futimesat, fchmodat, utimensat.
    const I386: [u32; 25] = joined(&[&OLD, &[271, 298, 299, 306, 320], &NEW]);
    const ARM: [u32; 25] = joined(&[&OLD, &[269, 325, 326, 333, 348], &NEW]);
    match audit {
        AUDIT_I386 => &I386,
        AUDIT_ARM => &ARM,
        _ => &[FILE_SETATTR],
    }
}

/// `parts` one after the other, at compile time; `N` must be their length.
const fn joined<const N: usize>(parts: &[&[u32]]) -> [u32; N] {
    let mut out = [0; N];
    let mut n = 0;
    let mut p = 0;
    while p < parts.len() {
        let mut i = 0;
        while i < parts[p].len() {
            out[n] = parts[p][i];
            n += 1;
            i += 1;
        }
        p += 1;
    }
    assert!(n == N, "the parts are not N numbers long");
    out
}

/// A jump target while the program is assembled.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Label(usize);

enum Item {
    Stmt(u16, u32),
    Jump(u16, u32, Label, Label),
    Ret(u32),
    Here(Label),
}

/// Assembles a program from straight-line items and labels, resolving
/// jumps to the classic-BPF relative offsets.
struct Asm {
    items: Vec<Item>,
    labels: usize,
    /// At most this many call numbers are compared one after the other;
    /// more are split in halves first ([`dispatch`]).
    leaf: usize,
}

impl Asm {
    fn label(&mut self) -> Label {
        self.labels += 1;
        Label(self.labels - 1)
    }
    fn here(&mut self, l: Label) {
        self.items.push(Item::Here(l));
    }
    fn load(&mut self, offset: u32) {
        self.items.push(Item::Stmt(LD_W_ABS, offset));
    }
    fn jump(&mut self, op: u16, k: u32, yes: Label, no: Label) {
        self.items.push(Item::Jump(op, k, yes, no));
    }
    fn ret(&mut self, value: u32) {
        self.items.push(Item::Ret(value));
    }
    fn finish(self) -> Vec<Insn> {
        let mut at = vec![usize::MAX; self.labels];
        let mut pc = 0;
        for item in &self.items {
            match item {
                Item::Here(Label(l)) => at[*l] = pc,
                _ => pc += 1,
            }
        }
        let mut out = Vec::with_capacity(pc);
        for item in &self.items {
            let insn = |code, jt, jf, k| Insn { code, jt, jf, k };
            match *item {
                Item::Here(_) => continue,
                Item::Stmt(code, k) => out.push(insn(code, 0, 0, k)),
                Item::Ret(k) => out.push(insn(RET_K, 0, 0, k)),
                Item::Jump(code, k, Label(yes), Label(no)) => {
                    let next = out.len() + 1;
                    let rel = |target: usize| {
                        u8::try_from(target - next).expect("a jump within 255 instructions")
                    };
                    out.push(insn(code, rel(at[yes]), rel(at[no]), k));
                }
            }
        }
        out
    }
}

/// Emits the checks for one architecture's calls, with the call number
/// already loaded.
fn arch_body(a: &mut Asm, arch: &Arch, f: Filter, eperm: Label, allow: Label) {
    let on_socket = match f.sockets {
        Sockets::Supervised => a.label(),
        Sockets::Open => allow,
    };
    let [ioctl, seccomp, socketcall] = [a.label(), a.label(), a.label()];
    let mut checks = Vec::new();
    // One check of `ioctl`, for whichever parts refuse requests.
    if f.terminal || f.no_stops || f.attrs {
        checks.push((arch.ioctl, ioctl));
    }
    if f.terminal {
        checks.push((arch.io_uring_setup, eperm));
    }
    if f.no_listeners {
        checks.push((arch.seccomp, seccomp));
    }
    if f.sockets == Sockets::Supervised {
        checks.extend([(arch.connect, on_socket), (arch.bind, on_socket)]);
    }
    let on_attr = a.label();
    if f.attrs {
        let handed = match f.sockets {
            Sockets::Supervised => on_attr,
            Sockets::Open => allow,
        };
        checks.extend(attr_calls(arch.audit).iter().map(|&(nr, _)| (nr, handed)));
        checks.extend(rename_calls(arch.audit).iter().map(|&(nr, _)| (nr, handed)));
        checks.extend(refused_attr_calls(arch.audit).iter().map(|&nr| (nr, eperm)));
    }
    let [signal_at_1, signal_at_2, fcntl] = [a.label(), a.label(), a.label()];
    if f.no_stops {
        for &(nr, arg) in signal_calls(arch.audit) {
            checks.push((nr, if arg == 1 { signal_at_1 } else { signal_at_2 }));
        }
        for &nr in fcntl_calls(arch.audit) {
            checks.push((nr, fcntl));
        }
    }
    if f.no_tracing {
        checks.extend([(arch.ptrace, eperm), (arch.process_vm_writev, eperm)]);
        checks.extend(arch.refused_execs.iter().flatten().map(|&nr| (nr, eperm)));
    }
    if arch.x32_bit {
        let next = a.label();
        a.jump(JGE_K, X32_BIT, eperm, next);
        a.here(next);
    }
    let rest = a.label();
    dispatch(a, &by_number(checks), rest);
    a.here(rest);
    if let (Some(nr), Sockets::Supervised) = (arch.socketcall, f.sockets) {
        let next = a.label();
        a.jump(JEQ_K, nr, socketcall, next);
        a.here(next);
    }
    a.ret(RET_ALLOW);

    if f.terminal || f.no_stops || f.attrs {
        a.here(ioctl);
        a.load(arg_low(1));
        let terminal = DENIED_IOCTLS.iter().filter(|_| f.terminal).map(|d| d.1);
        let stopping = STOPPING_IOCTLS.iter().filter(|_| f.no_stops).map(|d| d.1);
        let attrs = ATTR_IOCTLS.iter().filter(|_| f.attrs).map(|d| d.1);
        for request in terminal.chain(stopping).chain(attrs) {
            let next = a.label();
            a.jump(JEQ_K, request, eperm, next);
            a.here(next);
        }
        a.ret(RET_ALLOW);
    }

    if f.no_stops {
        // A stop signal is refused whichever call sends it; `F_SETSIG`
        // names its signal in the third argument, as `tgkill` does. (Jumps
        // only go forward: `fcntl` comes first.)
        a.here(fcntl);
        a.load(arg_low(1));
        a.jump(JEQ_K, F_SETSIG, signal_at_2, allow);
        let stop = a.label();
        for (label, arg) in [(signal_at_1, 1), (signal_at_2, 2)] {
            a.here(label);
            a.load(arg_low(arg));
            a.jump(JGE_K, FIRST_STOP, stop, allow);
        }
        a.here(stop);
        a.jump(JGE_K, PAST_STOPS, allow, eperm);
    }

    if f.no_listeners {
        a.here(seccomp);
        a.load(arg_low(0));
        let flags = a.label();
        a.jump(JEQ_K, SECCOMP_SET_MODE_FILTER, flags, allow);
        a.here(flags);
        a.load(arg_low(1));
        a.jump(JSET_K, FLAG_NEW_LISTENER, eperm, allow);
    }

    if f.sockets == Sockets::Supervised {
        a.here(socketcall);
        a.load(arg_low(0));
        for call in [SOCKETCALL_BIND, SOCKETCALL_CONNECT] {
            let next = a.label();
            a.jump(JEQ_K, call, on_socket, next);
            a.here(next);
        }
        a.ret(RET_ALLOW);
        a.here(on_socket);
        a.ret(RET_NOTIFY);
    }
    if f.attrs && f.sockets == Sockets::Supervised {
        a.here(on_attr);
        a.ret(RET_NOTIFY);
    }
}

/// `checks` sorted by call number, each number once: the first check of a
/// number is the one a chain compared in order would have taken.
fn by_number(mut checks: Vec<(u32, Label)>) -> Vec<(u32, Label)> {
    checks.sort_by_key(|&(nr, _)| nr);
    checks.dedup_by_key(|&mut (nr, _)| nr);
    checks
}

/// Sends the call number loaded to the target of its check in `checks`
/// (sorted, each number once), or on to `rest`: a binary search, halving
/// on `>=` until at most [`Asm::leaf`] numbers are left, then compared one
/// by one. The kernel runs the program over every call number when it
/// installs the filter (to learn which calls it always allows, its action
/// cache), with the installing thread's signal lock held: a chain of all
/// the checks took up to 43 steps per number, this at most 12, and so
/// does every call of a confined process that the cache does not answer
/// (ADR-0152).
fn dispatch(a: &mut Asm, checks: &[(u32, Label)], rest: Label) {
    if checks.len() <= a.leaf {
        for (i, &(nr, target)) in checks.iter().enumerate() {
            let last = i + 1 == checks.len();
            let next = if last { rest } else { a.label() };
            a.jump(JEQ_K, nr, target, next);
            if !last {
                a.here(next);
            }
        }
        return;
    }
    let mid = checks.len() / 2;
    let (low, high) = (a.label(), a.label());
    a.jump(JGE_K, checks[mid].0, high, low);
    a.here(low);
    dispatch(a, &checks[..mid], rest);
    a.here(high);
    dispatch(a, &checks[mid..], rest);
}

/// How many call numbers [`dispatch`] compares one by one.
const LEAF: usize = 4;

/// The filter for the given architectures: the native one and, where the
/// kernel has one, its compatibility ABI. Anything else is killed.
pub fn program_for(native: &Arch, compat: Option<&Arch>, f: Filter) -> Vec<Insn> {
    program_with(native, compat, f, LEAF)
}

/// [`program_for`], comparing at most `leaf` call numbers one by one:
/// with `usize::MAX`, the chain of every check in turn that the search
/// replaced (ADR-0152), which `tests/it/attack_seccomp_search.rs` installs
/// next to the search in real processes to compare what the kernel does
/// (ADR-0154).
pub fn program_with(native: &Arch, compat: Option<&Arch>, f: Filter, leaf: usize) -> Vec<Insn> {
    let mut a = Asm {
        items: Vec::new(),
        labels: 0,
        leaf,
    };
    let [is_native, is_compat, eperm, allow] = [a.label(), a.label(), a.label(), a.label()];
    a.load(ARCH);
    let not_native = a.label();
    a.jump(JEQ_K, native.audit, is_native, not_native);
    a.here(not_native);
    if let Some(compat) = compat {
        let neither = a.label();
        a.jump(JEQ_K, compat.audit, is_compat, neither);
        a.here(neither);
    }
    a.ret(RET_KILL_PROCESS);
    for (label, arch) in [(is_native, Some(native)), (is_compat, compat)] {
        if let Some(arch) = arch {
            a.here(label);
            a.load(NR);
            arch_body(&mut a, arch, f, eperm, allow);
        }
    }
    a.here(eperm);
    a.ret(RET_EPERM);
    a.here(allow);
    a.ret(RET_ALLOW);
    a.finish()
}

/// The filter for this build's architecture; `None` where nd7 has no table
/// of its system calls (then the session runs without the filter, and says so).
pub fn program(f: Filter) -> Option<Vec<Insn>> {
    Some(program_for(&native()?, compat().as_ref(), f))
}

/// [`Filter::full`]'s program, rendered once per process.
pub fn full_program(sockets: Sockets) -> Option<&'static [Insn]> {
    static SUPERVISED: std::sync::OnceLock<Option<Vec<Insn>>> = std::sync::OnceLock::new();
    static OPEN: std::sync::OnceLock<Option<Vec<Insn>>> = std::sync::OnceLock::new();
    let cell = match sockets {
        Sockets::Supervised => &SUPERVISED,
        Sockets::Open => &OPEN,
    };
    cell.get_or_init(|| program(Filter::full(sockets)))
        .as_deref()
}

/// Whether this kernel runs seccomp filters at all.
pub fn available() -> bool {
    rustix::thread::secure_computing_mode().is_ok()
}

/// Installs `filter` on the calling thread, asking for a listener when it
/// hands calls to the keeper. Returns the listener's descriptor (or -1).
/// Makes one system call and allocates nothing, so that it can run between
/// fork and exec; `no_new_privs` must already be set.
///
/// # Safety
/// `filter` must outlive the call (it does: the kernel copies it).
pub fn install(filter: &[Insn], listener: bool) -> io::Result<libc::c_int> {
    let prog = libc::sock_fprog {
        len: filter.len() as libc::c_ushort,
        filter: filter.as_ptr() as *mut Insn,
    };
    // SPEC_ALLOW: without it the kernel would turn on speculative-execution
    // mitigations (SSBD, and STIBP where so configured) for every process
    // under the filter, slowing the agent and every command; they protect a
    // process from itself, which is not what the filter is for.
    const SPEC_ALLOW: libc::c_ulong = libc::SECCOMP_FILTER_FLAG_SPEC_ALLOW;
    let flags: libc::c_ulong = if listener {
        libc::SECCOMP_FILTER_FLAG_NEW_LISTENER | SPEC_ALLOW
    } else {
        SPEC_ALLOW
    };
    // SAFETY: `prog` points at `filter`, which is borrowed for the call, and
    // its length is the slice's; the kernel copies the program.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            flags,
            &prog as *const libc::sock_fprog,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(if listener { fd as libc::c_int } else { -1 })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a classic-BPF program of the opcodes above over a seccomp_data
    /// image: the kernel's verdict, without a kernel.
    fn run(prog: &[Insn], nr: u32, arch: u32, args: [u64; 6]) -> u32 {
        run_counted(prog, nr, arch, args).0
    }

    /// [`run`]'s verdict, and how many instructions it took before it
    /// returned or first read an argument: as far as the kernel's pass
    /// over every call number at install follows it (`seccomp_cache_prepare`
    /// stops at a load of anything but the number and the architecture).
    fn run_counted(prog: &[Insn], nr: u32, arch: u32, args: [u64; 6]) -> (u32, usize) {
        let mut data = [0u8; 64];
        data[0..4].copy_from_slice(&nr.to_le_bytes());
        data[4..8].copy_from_slice(&arch.to_le_bytes());
        for (i, arg) in args.iter().enumerate() {
            data[16 + 8 * i..24 + 8 * i].copy_from_slice(&arg.to_le_bytes());
        }
        let mut acc = 0u32;
        let mut pc = 0usize;
        let mut before_args = None;
        for steps in 1.. {
            let insn = prog[pc];
            pc += 1;
            match insn.code {
                LD_W_ABS => {
                    let k = insn.k as usize;
                    if k >= 16 {
                        before_args.get_or_insert(steps);
                    }
                    acc = u32::from_le_bytes(data[k..k + 4].try_into().expect("4 bytes"));
                }
                RET_K => return (insn.k, before_args.unwrap_or(steps)),
                JEQ_K | JGE_K | JSET_K => {
                    let taken = match insn.code {
                        JEQ_K => acc == insn.k,
                        JGE_K => acc >= insn.k,
                        _ => acc & insn.k != 0,
                    };
                    pc += usize::from(if taken { insn.jt } else { insn.jf });
                }
                other => panic!("unexpected opcode {other:#x}"),
            }
        }
        unreachable!("a program without an end")
    }

    fn x86() -> (Arch, Arch) {
        let native = Arch {
            audit: 0xC000_003E,
            ioctl: 16,
            connect: 42,
            bind: 49,
            seccomp: 317,
            io_uring_setup: 425,
            socketcall: None,
            x32_bit: true,
            ptrace: 101,
            process_vm_writev: 311,
            refused_execs: None,
        };
        (native, COMPAT_I386)
    }

    #[test]
    fn tracing_writing_into_a_process_and_32_bit_execs_are_refused() {
        let (n, c) = x86();
        let p = program_for(&n, Some(&c), Filter::full(Sockets::Supervised));
        for (arch, nr) in [
            (n, n.ptrace),
            (n, n.process_vm_writev),
            (c, c.ptrace),
            (c, c.process_vm_writev),
            (c, 11),
            (c, 358),
        ] {
            assert_eq!(run(&p, nr, arch.audit, [0; 6]), RET_EPERM, "{nr}");
        }
        // The native execs pass: the observer reads what they start.
        assert_eq!(run(&p, 59, n.audit, [0; 6]), RET_ALLOW);
        assert_eq!(run(&p, 322, n.audit, [0; 6]), RET_ALLOW);
        let without = Filter {
            no_tracing: false,
            ..Filter::full(Sockets::Supervised)
        };
        let p = program_for(&n, Some(&c), without);
        assert_eq!(run(&p, n.ptrace, n.audit, [0; 6]), RET_ALLOW);
        assert_eq!(run(&p, 11, c.audit, [0; 6]), RET_ALLOW);
    }

    #[test]
    fn terminal_injection_is_refused_and_other_ioctls_pass() {
        let (n, c) = x86();
        let p = program_for(&n, Some(&c), Filter::full(Sockets::Supervised));
        for (name, request, _) in DENIED_IOCTLS {
            let args = [0, u64::from(request), 0, 0, 0, 0];
            assert_eq!(run(&p, n.ioctl, n.audit, args), RET_EPERM, "{name}");
            assert_eq!(run(&p, c.ioctl, c.audit, args), RET_EPERM, "{name} (i386)");
            // The kernel reads only the low 32 bits of the request.
            let high = [0, u64::from(request) | 0xdead_0000_0000, 0, 0, 0, 0];
            assert_eq!(run(&p, n.ioctl, n.audit, high), RET_EPERM, "{name} high");
        }
        for ok in [0x5401u64, 0x5413, 0x540F, 0x5410, 0x541B] {
            assert_eq!(run(&p, n.ioctl, n.audit, [1, ok, 0, 0, 0, 0]), RET_ALLOW);
        }
        // Without its terminal part, the same request passes.
        let without = Filter {
            terminal: false,
            ..Filter::full(Sockets::Supervised)
        };
        let without = program_for(&n, Some(&c), without);
        assert_eq!(
            run(&without, n.ioctl, n.audit, [0, 0x5412, 0, 0, 0, 0]),
            RET_ALLOW
        );
    }

    #[test]
    fn sockets_go_to_the_keeper_only_when_supervised() {
        let (n, c) = x86();
        let sup = program_for(&n, Some(&c), Filter::full(Sockets::Supervised));
        let open = program_for(&n, Some(&c), Filter::full(Sockets::Open));
        for nr in [n.connect, n.bind] {
            assert_eq!(run(&sup, nr, n.audit, [0; 6]), RET_NOTIFY);
            assert_eq!(run(&open, nr, n.audit, [0; 6]), RET_ALLOW);
        }
        for nr in [c.connect, c.bind] {
            assert_eq!(run(&sup, nr, c.audit, [0; 6]), RET_NOTIFY);
        }
        let socketcall = |call| run(&sup, 102, c.audit, [call, 0, 0, 0, 0, 0]);
        assert_eq!(socketcall(3), RET_NOTIFY);
        assert_eq!(socketcall(2), RET_NOTIFY);
        assert_eq!(socketcall(1), RET_ALLOW); // socket()
        assert_eq!(socketcall(9), RET_ALLOW); // send()
        // sendto is left alone: it is every write to a socket.
        assert_eq!(run(&sup, 44, n.audit, [0; 6]), RET_ALLOW);
    }

    #[test]
    fn no_listener_can_be_added_and_io_uring_is_refused() {
        let (n, c) = x86();
        let p = program_for(&n, Some(&c), Filter::full(Sockets::Supervised));
        let seccomp = |flags| run(&p, n.seccomp, n.audit, [1, flags, 0, 0, 0, 0]);
        assert_eq!(seccomp(u64::from(FLAG_NEW_LISTENER)), RET_EPERM);
        assert_eq!(seccomp(u64::from(FLAG_NEW_LISTENER) | 1), RET_EPERM);
        assert_eq!(seccomp(0), RET_ALLOW);
        assert_eq!(run(&p, n.seccomp, n.audit, [0, 8, 0, 0, 0, 0]), RET_ALLOW);
        assert_eq!(run(&p, c.seccomp, c.audit, [1, 8, 0, 0, 0, 0]), RET_EPERM);
        assert_eq!(run(&p, 425, n.audit, [0; 6]), RET_EPERM);
        assert_eq!(run(&p, 425, c.audit, [0; 6]), RET_EPERM);
        let listener = [1, u64::from(FLAG_NEW_LISTENER), 0, 0, 0, 0];
        let without = Filter {
            no_listeners: false,
            ..Filter::full(Sockets::Supervised)
        };
        let without = program_for(&n, Some(&c), without);
        assert_eq!(run(&without, n.seccomp, n.audit, listener), RET_ALLOW);
    }

    /// Every call that sends a signal refuses the four stop signals and
    /// lets every other through, on both ABIs; `fcntl(F_SETSIG)` too, and
    /// `tcflow`'s `TCXONC`. Without `no_stops` they all pass.
    #[test]
    fn stop_signals_and_tcxonc_are_refused() {
        let (n, c) = x86();
        let p = program_for(&n, Some(&c), Filter::full(Sockets::Supervised));
        let without = Filter {
            no_stops: false,
            ..Filter::full(Sockets::Supervised)
        };
        let without = program_for(&n, Some(&c), without);
        for arch in [&n, &c] {
            let calls = signal_calls(arch.audit);
            assert_eq!(calls.len(), 6);
            for &(nr, arg) in calls {
                let with_signal = |sig: u64| {
                    let mut args = [0u64; 6];
                    args[0] = u64::MAX; // -1: every process
                    args[arg as usize] = sig;
                    args
                };
                for sig in 19..=22 {
                    assert_eq!(
                        run(&p, nr, arch.audit, with_signal(sig)),
                        RET_EPERM,
                        "{nr} {sig}"
                    );
                    assert_eq!(run(&without, nr, arch.audit, with_signal(sig)), RET_ALLOW);
                }
                for sig in [0, 1, 2, 9, 15, 17, 18, 23, 34, 64] {
                    assert_eq!(
                        run(&p, nr, arch.audit, with_signal(sig)),
                        RET_ALLOW,
                        "{nr} {sig}"
                    );
                }
            }
            // Not even the caller's own job (`kill(0, SIGTSTP)`, Claude
            // Code's Ctrl-Z): the Landlock scope keeps `nd7 run`'s front and
            // keeper out of it, so it would stop only the session.
            let kill = calls[0].0;
            assert_eq!(run(&p, kill, arch.audit, [0, 20, 0, 0, 0, 0]), RET_EPERM);
            for &nr in fcntl_calls(arch.audit) {
                let setsig = |sig| [3, u64::from(F_SETSIG), sig, 0, 0, 0];
                assert_eq!(run(&p, nr, arch.audit, setsig(19)), RET_EPERM);
                assert_eq!(run(&p, nr, arch.audit, setsig(20)), RET_EPERM);
                assert_eq!(run(&p, nr, arch.audit, setsig(29)), RET_ALLOW);
                // F_SETFL with a value of 19 is not a signal.
                assert_eq!(run(&p, nr, arch.audit, [3, 4, 19, 0, 0, 0]), RET_ALLOW);
                assert_eq!(run(&without, nr, arch.audit, setsig(19)), RET_ALLOW);
            }
            let tcxonc = [0, 0x540A, 0, 0, 0, 0];
            assert_eq!(run(&p, arch.ioctl, arch.audit, tcxonc), RET_EPERM);
            assert_eq!(run(&without, arch.ioctl, arch.audit, tcxonc), RET_ALLOW);
        }
        // Without the terminal part, TCXONC is still refused.
        let stops_only = Filter {
            terminal: false,
            ..Filter::full(Sockets::Open)
        };
        let stops_only = program_for(&n, Some(&c), stops_only);
        assert_eq!(
            run(&stops_only, n.ioctl, n.audit, [0, 0x540A, 0, 0, 0, 0]),
            RET_EPERM
        );
        assert_eq!(
            run(&stops_only, n.ioctl, n.audit, [0, 0x5412, 0, 0, 0, 0]),
            RET_ALLOW
        );
    }

    /// This build's table agrees with libc's numbers for the native calls.
    #[test]
    fn the_native_signal_table_is_libcs() {
        let n = native().expect("native");
        let nrs: Vec<u32> = signal_calls(n.audit).iter().map(|c| c.0).collect();
        let libc_nrs = [
            libc::SYS_kill,
            libc::SYS_tkill,
            libc::SYS_tgkill,
            libc::SYS_rt_sigqueueinfo,
            libc::SYS_rt_tgsigqueueinfo,
            libc::SYS_pidfd_send_signal,
        ]
        .map(|n| n as u32);
        assert_eq!(nrs, libc_nrs);
        assert_eq!(fcntl_calls(n.audit), [libc::SYS_fcntl as u32]);
    }

    #[test]
    fn attribute_calls_go_to_the_keeper_and_32_bit_ones_are_refused() {
        let (n, c) = x86();
        let sup = program_for(&n, Some(&c), Filter::full(Sockets::Supervised));
        let open = program_for(&n, Some(&c), Filter::full(Sockets::Open));
        let without = Filter {
            attrs: false,
            ..Filter::full(Sockets::Supervised)
        };
        let without = program_for(&n, Some(&c), without);
        assert_eq!(attr_calls(n.audit).len(), 20);
        for &(nr, call) in attr_calls(n.audit) {
            assert_eq!(run(&sup, nr, n.audit, [0; 6]), RET_NOTIFY, "{call:?}");
            // Where the keeper cannot act for the session: unmediated.
            assert_eq!(run(&open, nr, n.audit, [0; 6]), RET_ALLOW, "{call:?}");
            assert_eq!(run(&without, nr, n.audit, [0; 6]), RET_ALLOW, "{call:?}");
        }
        for &nr in refused_attr_calls(c.audit) {
            assert_eq!(run(&sup, nr, c.audit, [0; 6]), RET_EPERM, "i386 {nr}");
            assert_eq!(run(&open, nr, c.audit, [0; 6]), RET_EPERM, "i386 {nr}");
        }
        assert_eq!(run(&sup, FILE_SETATTR, n.audit, [0; 6]), RET_EPERM);
        // Its ioctl forms, native and i386, whatever the high bits.
        for (name, request) in ATTR_IOCTLS {
            let args = [3, u64::from(request) | 0xdead_0000_0000, 0, 0, 0, 0];
            assert_eq!(run(&sup, n.ioctl, n.audit, args), RET_EPERM, "{name}");
            assert_eq!(run(&open, n.ioctl, n.audit, args), RET_EPERM, "{name}");
            assert_eq!(run(&sup, c.ioctl, c.audit, args), RET_EPERM, "{name} i386");
            assert_eq!(run(&without, n.ioctl, n.audit, args), RET_ALLOW, "{name}");
        }
        // Reading the flags (FS_IOC_GETFLAGS, FS_IOC_FSGETXATTR) passes.
        for get in [0x8008_6601u64, 0x801C_581F] {
            assert_eq!(run(&sup, n.ioctl, n.audit, [3, get, 0, 0, 0, 0]), RET_ALLOW);
        }
        // Neighbours pass: fstat (5), getxattr (191), i386 read (3).
        assert_eq!(run(&sup, 5, n.audit, [0; 6]), RET_ALLOW);
        assert_eq!(run(&sup, 191, n.audit, [0; 6]), RET_ALLOW);
        assert_eq!(run(&sup, 3, c.audit, [0; 6]), RET_ALLOW);
        // The generic table (arm64) is handed over too.
        let arm64 = Arch {
            audit: AUDIT_AARCH64,
            ioctl: 29,
            connect: 203,
            bind: 200,
            seccomp: 277,
            io_uring_setup: 425,
            socketcall: None,
            x32_bit: false,
            ptrace: 117,
            process_vm_writev: 271,
            refused_execs: None,
        };
        let p = program_for(&arm64, None, Filter::full(Sockets::Supervised));
        for &(nr, call) in attr_calls(AUDIT_AARCH64) {
            assert_eq!(run(&p, nr, AUDIT_AARCH64, [0; 6]), RET_NOTIFY, "{call:?}");
        }
    }

    /// Renames go to the keeper with the `attrs` part (ADR-0134), native
    /// only: the i386 ones pass, and meet the mount as before.
    #[test]
    fn renames_go_to_the_keeper_with_the_attrs_part() {
        let (n, c) = x86();
        let sup = program_for(&n, Some(&c), Filter::full(Sockets::Supervised));
        let open = program_for(&n, Some(&c), Filter::full(Sockets::Open));
        let without = Filter {
            attrs: false,
            ..Filter::full(Sockets::Supervised)
        };
        let without = program_for(&n, Some(&c), without);
        let native: Vec<u32> = rename_calls(n.audit).iter().map(|c| c.0).collect();
        let libc_nrs = [libc::SYS_rename, libc::SYS_renameat, libc::SYS_renameat2];
        assert_eq!(native, libc_nrs.map(|n| n as u32));
        for &(nr, call) in rename_calls(n.audit) {
            assert_eq!(run(&sup, nr, n.audit, [0; 6]), RET_NOTIFY, "{call:?}");
            assert_eq!(run(&open, nr, n.audit, [0; 6]), RET_ALLOW, "{call:?}");
            assert_eq!(run(&without, nr, n.audit, [0; 6]), RET_ALLOW, "{call:?}");
        }
        for nr in [38, 302, 353] {
            assert_eq!(run(&sup, nr, c.audit, [0; 6]), RET_ALLOW, "i386 {nr}");
        }
        assert_eq!(rename_calls(AUDIT_AARCH64).len(), 2);
    }

    #[test]
    fn x32_and_foreign_architectures_are_refused() {
        let (n, c) = x86();
        let p = program_for(&n, Some(&c), Filter::full(Sockets::Open));
        assert_eq!(run(&p, X32_BIT | 16, n.audit, [0; 6]), RET_EPERM);
        assert_eq!(run(&p, 0, 0xC000_00B7, [0; 6]), RET_KILL_PROCESS);
        assert_eq!(run(&p, 0, n.audit, [0; 6]), RET_ALLOW); // read
        assert_eq!(run(&p, 3, c.audit, [0; 6]), RET_ALLOW); // read (i386)
    }

    /// Call numbers to try: every number of both tables' range, the x32
    /// ones, and the edges of the 32-bit range.
    fn numbers() -> impl Iterator<Item = u32> {
        (0..1100)
            .chain((0..1100).map(|n| X32_BIT | n))
            .chain([u32::MAX, u32::MAX - 1, X32_BIT - 1])
    }

    /// Arguments that reach each check the filter makes of an argument.
    fn argument_sets() -> Vec<[u64; 6]> {
        let mut sets = vec![[0; 6]];
        let requests = DENIED_IOCTLS.iter().chain(&STOPPING_IOCTLS).map(|d| d.1);
        for request in requests
            .chain(ATTR_IOCTLS.iter().map(|d| d.1))
            .chain([0x5413])
        {
            sets.push([0, u64::from(request), 0, 0, 0, 0]);
        }
        for sig in [1, 18, 19, 20, 21, 22, 23] {
            sets.push([0, sig, 0, 0, 0, 0]);
            sets.push([0, 0, sig, 0, 0, 0]);
            sets.push([0, u64::from(F_SETSIG), sig, 0, 0, 0]);
        }
        sets.push([
            u64::from(SECCOMP_SET_MODE_FILTER),
            u64::from(FLAG_NEW_LISTENER),
            0,
            0,
            0,
            0,
        ]);
        sets.push([u64::from(SECCOMP_SET_MODE_FILTER), 0, 0, 0, 0, 0]);
        sets.push([u64::from(SOCKETCALL_BIND), 0, 0, 0, 0, 0]);
        sets.push([u64::from(SOCKETCALL_CONNECT), 0, 0, 0, 0, 0]);
        sets
    }

    /// The binary search over call numbers decides every call as the chain
    /// of checks in their order did: same verdict for every number, on
    /// every architecture (and a foreign one), for each argument the
    /// filter looks at, in every filter the floor and the tests use.
    #[test]
    fn the_search_decides_as_the_chain_of_checks() {
        let (n, c) = x86();
        let mut tables = vec![(n, Some(c)), (n, None)];
        if let Some(native) = native() {
            tables.push((native, compat()));
        }
        let filters = [
            Filter::full(Sockets::Supervised),
            Filter::full(Sockets::Open),
            Filter {
                attrs: false,
                ..Filter::full(Sockets::Supervised)
            },
        ];
        let args = argument_sets();
        for (native, compat) in tables {
            for f in filters {
                let search = program_for(&native, compat.as_ref(), f);
                let chain = program_with(&native, compat.as_ref(), f, usize::MAX);
                assert_ne!(search, chain, "the search is not a chain");
                let audits = [Some(native.audit), compat.map(|c| c.audit), Some(0x1234)];
                for audit in audits.into_iter().flatten() {
                    for nr in numbers() {
                        for a in &args {
                            assert_eq!(
                                run(&search, nr, audit, *a),
                                run(&chain, nr, audit, *a),
                                "call {nr:#x} on {audit:#x} with {a:?}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// What the kernel pays at every install (its action cache runs the
    /// program over every call number, ADR-0152), and every confined call
    /// the cache does not answer: at most 16 instructions to decide any
    /// call number without arguments (a chain of the checks took up to 43).
    #[test]
    fn any_call_number_is_decided_in_few_steps() {
        let (n, c) = x86();
        let mut tables = vec![(n, Some(c))];
        if let Some(native) = native() {
            tables.push((native, compat()));
        }
        for (native, compat) in tables {
            let p = program_for(&native, compat.as_ref(), Filter::full(Sockets::Supervised));
            let audits = [Some(native.audit), compat.map(|c| c.audit)];
            for audit in audits.into_iter().flatten() {
                let most = (0..1100)
                    .map(|nr| run_counted(&p, nr, audit, [0; 6]).1)
                    .max()
                    .expect("numbers");
                assert!(most <= 16, "{most} steps on {audit:#x}");
            }
        }
    }

    #[test]
    fn this_builds_program_fits_the_kernels_limits() {
        let p = program(Filter::full(Sockets::Supervised)).expect("a table for this architecture");
        assert!(p.len() < 4096);
        let n = native().expect("native");
        assert_eq!(
            run(&p, n.ioctl, n.audit, [0, 0x5412, 0, 0, 0, 0]),
            RET_EPERM
        );
    }

    /// The filter, installed for real in a child process: TIOCSTI on
    /// /dev/null fails with EPERM instead of ENOTTY, and on x86-64 the same
    /// request through the i386 entry (`int 0x80`) and the x32 numbering is
    /// refused too.
    #[test]
    fn the_kernel_applies_it() {
        let filter = program(Filter::full(Sockets::Open)).expect("program");
        let null = std::fs::File::open("/dev/null").expect("/dev/null");
        let fd = std::os::fd::AsRawFd::as_raw_fd(&null);
        // SAFETY: the child only makes system calls and exits with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = (|| {
                if rustix::thread::set_no_new_privs(true).is_err() {
                    return 10;
                }
                if install(&filter, false).is_err() {
                    return 11;
                }
                let c = 0u8;
                // SAFETY: ioctl on an open descriptor with a pointer to a
                // live byte.
                let r = unsafe { libc::ioctl(fd, 0x5412, &c as *const u8) };
                let errno = io::Error::last_os_error().raw_os_error();
                if r != -1 || errno != Some(libc::EPERM) {
                    return 12;
                }
                #[cfg(target_arch = "x86_64")]
                {
                    let ret: i64;
                    // SAFETY: the i386 entry with eax=54 (ioctl), ebx=fd,
                    // ecx=TIOCSTI, edx=0: the filter answers before the
                    // kernel would read the (null) pointer.
                    unsafe {
                        // rbx is LLVM's: swapped in and back out around the call.
                        std::arch::asm!(
                            "xchg rbx, {fd}",
                            "int 0x80",
                            "xchg rbx, {fd}",
                            fd = inout(reg) i64::from(fd) => _,
                            inlateout("rax") 54i64 => ret,
                            in("rcx") 0x5412i64,
                            in("rdx") 0i64,
                        );
                    }
                    // ENOSYS: a kernel without the i386 entry, so nothing to refuse.
                    if ret != -i64::from(libc::EPERM) && ret != -i64::from(libc::ENOSYS) {
                        return 13;
                    }
                    // SAFETY: a numbered syscall with integer arguments.
                    let r = unsafe { libc::syscall(0x4000_0000 | 16, fd, 0x5412, 0) };
                    let errno = io::Error::last_os_error().raw_os_error();
                    if r != -1 || errno != Some(libc::EPERM) {
                        return 14;
                    }
                }
                0
            })();
            // SAFETY: ends the forked child without running the parent's
            // destructors or test harness.
            unsafe { libc::_exit(code) };
        }
        let pid = rustix::process::Pid::from_raw(pid).expect("a child's pid");
        let (_, status) =
            rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty())
                .expect("waitpid")
                .expect("the child's status");
        assert_eq!(
            status.exit_status(),
            Some(0),
            "child died or a step failed: {status:?}"
        );
    }
}
