#!/usr/bin/env python3
"""The anonymous flood of bench/vault_flood.sh (ADR-0118): ADDRS loopback
source addresses (127.0.0.2 up) each hold PER connections to HOST:PORT of
one KIND, and open a new one whenever the vault closes one:

  idle        connect, send nothing
  keepalive   an anonymous GET /v1/recipients every 8 s on the same connection
  slowheader  a request line, then one header byte every 8 s
  tlsstall    the first 3 bytes of a TLS record, then nothing

Runs until killed (SIGTERM); on exit prints "held N, opened M" (connections
held at the end, and opened in all) on stdout.
usage: flood.py HOST PORT KIND ADDRS PER"""
import errno, selectors, signal, socket, sys, time

host, port, kind, addrs, per = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
RECIPIENTS = b"GET /v1/recipients HTTP/1.1\r\nHost: vault\r\nx-nd7-nonce: 00112233445566778899aabbccddeeff\r\n\r\n"
sel = selectors.DefaultSelector()
opened = 0
stop = False


def on_term(*_):
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_term)


class Conn:
    def __init__(self, src, idx):
        global opened
        self.src, self.idx, self.next, self.ok = src, idx, time.monotonic() + 8, False
        self.s = socket.socket()
        self.s.setblocking(False)
        self.s.bind((src, 0))
        try:
            self.s.connect((host, port))
        except BlockingIOError:
            pass
        opened += 1
        sel.register(self.s, selectors.EVENT_READ | selectors.EVENT_WRITE, self)

    def connected(self):
        self.ok = True
        sel.modify(self.s, selectors.EVENT_READ, self)
        first = {"idle": b"", "keepalive": RECIPIENTS,
                 "slowheader": b"GET /v1/recipients HTTP/1.1\r\nX-Slow: ", "tlsstall": b"\x16\x03\x01"}[kind]
        self.send(first)

    def send(self, data):
        if data:
            try:
                self.s.send(data)
            except OSError:
                pass

    def tick(self, now):
        if self.ok and now >= self.next:
            self.next = now + 8
            self.send({"keepalive": RECIPIENTS, "slowheader": b"a"}.get(kind, b""))


conns = []
for a in range(addrs):
    for _ in range(per):
        conns.append(Conn(f"127.0.0.{2 + a}", len(conns)))
while not stop:
    for key, events in sel.select(timeout=0.5):
        c = key.data
        if not c.ok and events & selectors.EVENT_WRITE:
            if c.s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                c.connected()
                continue
        try:
            data = c.s.recv(65536)
        except BlockingIOError:
            continue
        except OSError:
            data = b""
        if not data:
            sel.unregister(c.s)
            c.s.close()
            conns[c.idx] = Conn(c.src, c.idx)
    now = time.monotonic()
    for c in conns:
        c.tick(now)
held = sum(1 for c in conns if c.ok)
print(f"held {held}, opened {opened}", flush=True)
