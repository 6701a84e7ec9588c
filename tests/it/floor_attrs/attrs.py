# Tries every system call that changes a file's mode, owner, times or
# extended attributes on TARGET, each once, by its x86-64 number, and prints
# `NAME:yes` when the call succeeded, `NAME:no` when it failed.
# Usage: attrs.py TARGET [PREFIX]
import ctypes, os, sys

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
AT_FDCWD, NOFOLLOW, EMPTY = -100, 0x100, 0x1000
O_PATH = 0o10000000
target = sys.argv[1].encode()
prefix = sys.argv[2] if len(sys.argv) > 2 else ""
uid, gid = os.getuid(), os.getgid()


def arg(a):
    return ctypes.c_long(a) if isinstance(a, int) else a


def call(name, nr, *args):
    r = libc.syscall(ctypes.c_long(nr), *[arg(a) for a in args])
    err = ctypes.get_errno()
    print(f"{prefix}{name}:{'yes' if r == 0 else 'no'}", flush=True)
    if r != 0:
        print(f"{prefix}{name}: errno {err}", file=sys.stderr)


def keep():
    """Puts `user.keep` back, so that each removal has one to remove."""
    libc.syscall(ctypes.c_long(188), target, b"user.keep", value, ctypes.c_long(1), ctypes.c_long(0))


def opened(flags):
    try:
        return os.open(target, flags)
    except OSError:
        return -1


zeros16 = ctypes.create_string_buffer(16)  # struct utimbuf / timespec of 0
zeros32 = ctypes.create_string_buffer(32)  # two timevals or timespecs of 0
value = ctypes.create_string_buffer(b"x")
xargs = ctypes.create_string_buffer(16)  # struct xattr_args: value, size, flags
ctypes.memmove(xargs, ctypes.byref(ctypes.c_uint64(ctypes.addressof(value))), 8)
ctypes.memmove(ctypes.byref(xargs, 8), ctypes.byref(ctypes.c_uint32(1)), 4)
path_fd = opened(O_PATH | os.O_NOFOLLOW)
read_fd = opened(os.O_RDONLY | os.O_NOFOLLOW)

call("chmod", 90, target, 0o777)
call("fchmodat", 268, AT_FDCWD, target, 0o777)
call("fchmodat2", 452, AT_FDCWD, target, 0o777, 0)
call("fchmodat2-nofollow", 452, AT_FDCWD, target, 0o777, NOFOLLOW)
call("fchmodat2-opath", 452, path_fd, b"", 0o777, EMPTY)
call("fchmod-opath", 91, path_fd, 0o777)
call("chown", 92, target, uid, gid)
call("lchown", 94, target, uid, gid)
call("fchownat", 260, AT_FDCWD, target, uid, gid, 0)
call("fchownat-opath", 260, path_fd, b"", uid, gid, EMPTY)
call("utime", 132, target, zeros16)
call("utimes", 235, target, zeros32)
call("futimesat", 261, AT_FDCWD, target, zeros32)
call("utimensat", 280, AT_FDCWD, target, zeros32, 0)
call("utimensat-opath", 280, path_fd, b"", zeros32, EMPTY)
call("setxattr", 188, target, b"user.nd7", value, 1, 0)
call("lsetxattr", 189, target, b"user.nd7", value, 1, 0)
call("setxattrat", 463, AT_FDCWD, target, 0, b"user.nd7", xargs, 16)
keep()
call("removexattr", 197, target, b"user.keep")
keep()
call("lremovexattr", 198, target, b"user.keep")
keep()
call("removexattrat", 466, AT_FDCWD, target, 0, b"user.keep")
if read_fd >= 0:
    call("fchmod", 91, read_fd, 0o777)
    call("fchown", 93, read_fd, uid, gid)
    call("futimens", 280, read_fd, None, zeros32, 0)
    call("fsetxattr", 190, read_fd, b"user.nd7", value, 1, 0)
    keep()
    call("fremovexattr", 199, read_fd, b"user.keep")
