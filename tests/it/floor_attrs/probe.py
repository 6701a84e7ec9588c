# Attacks on a file's attributes that do not go through the calls the
# keeper mediates. Usage: probe.py TARGET PREFIX; prints `PREFIXname:yes`
# when the attack changed TARGET, `PREFIXname:no` otherwise.
import ctypes, fcntl, mmap, os, struct, sys

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
target = sys.argv[1]
prefix = sys.argv[2]


def say(name, ok, why=""):
    print(f"{prefix}{name}:{'yes' if ok else 'no'}", flush=True)
    if why:
        print(f"{prefix}{name}: {why}", file=sys.stderr)


def ioctl_flags():
    """FS_IOC_SETFLAGS: NODUMP and NOATIME on a file the agent may only read."""
    try:
        fd = os.open(target, os.O_RDONLY)
    except OSError as e:
        say("setflags", False, e)
        return say("fssetxattr", False, e)
    try:
        buf = bytearray(8)
        fcntl.ioctl(fd, 0x80086601, buf)
        flags = struct.unpack("l", buf)[0] | 0x40 | 0x80
        fcntl.ioctl(fd, 0x40086602, struct.pack("l", flags))
        say("setflags", True)
    except OSError as e:
        say("setflags", False, e)
    try:
        buf = bytearray(28)
        fcntl.ioctl(fd, 0x801C581F, buf)
        xflags = struct.unpack_from("I", buf)[0] | 0x80 | 0x40  # NODUMP, NOATIME
        struct.pack_into("I", buf, 0, xflags)
        fcntl.ioctl(fd, 0x401C5820, bytes(buf))
        say("fssetxattr", True)
    except OSError as e:
        say("fssetxattr", False, e)
    os.close(fd)


def int80_chmod():
    """chmod(TARGET, 0777) through the 32-bit entry (int $0x80) of a
    64-bit process."""
    MAP_32BIT = 0x40
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    page = libc.mmap(None, 4096, 7, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_32BIT, -1, 0)
    if page in (None, ctypes.c_void_p(-1).value) or page >= 1 << 32:
        return say("int80-chmod", False, "no low page")
    path = target.encode() + b"\0"
    at = page + 64
    ctypes.memmove(at, path, len(path))
    code = (
        b"\x53"  # push rbx
        + b"\xb8\x0f\x00\x00\x00"  # mov eax, 15 (i386 chmod)
        + b"\xbb" + struct.pack("<I", at)  # mov ebx, path
        + b"\xb9\xff\x01\x00\x00"  # mov ecx, 0777
        + b"\xcd\x80"  # int 0x80
        + b"\x5b"  # pop rbx
        + b"\xc3"  # ret
    )
    ctypes.memmove(page, code, len(code))
    r = ctypes.CFUNCTYPE(ctypes.c_int)(page)()
    say("int80-chmod", r == 0, f"returned {r}")


def uring():
    """io_uring_setup, whose ops include SETXATTR and FSETXATTR."""
    params = ctypes.create_string_buffer(120)
    r = libc.syscall(ctypes.c_long(425), ctypes.c_long(4), params)
    say("io_uring", r >= 0, f"errno {ctypes.get_errno()}")


for attack in sys.argv[3:] or ["flags", "int80", "uring"]:
    {"flags": ioctl_flags, "int80": int80_chmod, "uring": uring}[attack]()
