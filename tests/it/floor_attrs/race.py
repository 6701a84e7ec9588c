# Races the keeper: while the main thread changes the mode, times and an
# extended attribute of a path, other threads flip the path's bytes between
# a file in the project and TARGET outside, and swap `mine` between a file
# and a link to TARGET. Usage: race.py TARGET ROUNDS; prints `race:done`.
import ctypes, os, sys, threading

libc = ctypes.CDLL(None, use_errno=True)
target, rounds = sys.argv[1].encode(), int(sys.argv[2])
inside = b"mine"
buf = ctypes.create_string_buffer(max(len(target), len(inside)) + 1)
ctypes.memmove(buf, inside + b"\0", len(inside) + 1)
open("reg", "w").close()
stop = False


def flip():
    while not stop:
        ctypes.memmove(buf, target + b"\0", len(target) + 1)
        ctypes.memmove(buf, inside + b"\0", len(inside) + 1)


def swap():
    while not stop:
        try:
            os.symlink(target, "lnk")
        except FileExistsError:
            pass
        os.rename("lnk", "mine")
        open("reg", "w").close()
        os.rename("reg", "mine")


threads = [threading.Thread(target=flip), threading.Thread(target=swap)]
for t in threads:
    t.start()
for i in range(rounds):
    libc.chmod(buf, 0o777)
    libc.utimes(buf, None)
    libc.setxattr(buf, b"user.race", b"x", 1, 0)
    libc.removexattr(buf, b"user.keep")
stop = True
for t in threads:
    t.join()
print("race:done", flush=True)
