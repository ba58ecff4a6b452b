#!/usr/bin/env python3
"""What sending a file into UDP with sendfile saves over read + send, on loopback.

Usage: probe-udp-sendfile.py copy|sendfile [FILE]   (FILE defaults to /dev/shm/in1g.bin)

Sends FILE as 64 KiB datagrams (a 16-byte header, then 65483 bytes of the file, as slipstream
does over loopback) to a receiver thread in the same process, and prints the sending thread's
wall, user and system time. `copy` reads each piece into a buffer and sends header and piece
with one send (two copies: page cache to buffer, buffer to socket); `sendfile` sends the
header with MSG_MORE and the piece with os.sendfile, the kernel taking the page-cache pages
(no copy on the sending side). The receiver may drop datagrams; only the sender is measured.
"""
import os
import resource
import socket
import sys
import threading
import time

PAYLOAD = 65483
mode = sys.argv[1]
path = sys.argv[2] if len(sys.argv) > 2 else "/dev/shm/in1g.bin"
size = os.path.getsize(path)

rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
rx.bind(("127.0.0.1", 0))
rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
got = [0]


def drain():
    buf = bytearray(70000)
    rx.settimeout(1.0)
    try:
        while True:
            got[0] += rx.recv_into(buf)
    except socket.timeout:
        pass


t = threading.Thread(target=drain)
t.start()
tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
tx.connect(rx.getsockname())
tx.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
fd = os.open(path, os.O_RDONLY)
header = b"\0" * 16
buf = bytearray(16 + PAYLOAD)
view = memoryview(buf)
r0 = resource.getrusage(resource.RUSAGE_THREAD)
t0 = time.time()
off = 0
while off < size:
    n = min(PAYLOAD, size - off)
    if mode == "sendfile":
        tx.send(header, socket.MSG_MORE)
        if os.sendfile(tx.fileno(), fd, off, n) != n:
            sys.exit("short sendfile")
    else:
        os.preadv(fd, [view[16 : 16 + n]], off)
        tx.send(view[: 16 + n])
    off += n
r1 = resource.getrusage(resource.RUSAGE_THREAD)
wall = time.time() - t0
t.join()
print(
    f"{mode}: wall {wall:.2f} s, user {r1.ru_utime - r0.ru_utime:.2f} s, "
    f"system {r1.ru_stime - r0.ru_stime:.2f} s for {size >> 20} MiB; "
    f"receiver got {100 * got[0] / (size + 16 * ((size + PAYLOAD - 1) // PAYLOAD)):.0f} % of the bytes"
)
