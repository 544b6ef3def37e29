"""Stalled handshakes against a running node (bench/faults.sh, the `handshake` case).

Opens 1,000 TCP connections to HOST:PORT; each sends the 8-byte frame prefix of a frame whose
header it never sends (half announce 1 MiB, an authenticated peer's largest handshake header; half
4,000 bytes, under a stranger's 4 KiB limit) and stalls; 20 more connect and send nothing. Samples
the node's resident memory (/proc/PID/status, VmRSS) before and every 20 ms while the connections
are open, and waits (at most 30 s) for the node to close each one. Prints JSON: connections,
stalled, silent, rss_before and rss_peak (bytes), closed (how many the node closed),
last_closed_s (seconds from the first connect to the last close seen).

usage: python3 bench/lib/stalled_handshakes.py HOST:PORT PID
"""
import json
import resource
import select
import socket
import struct
import sys
import time

STALLED, SILENT = 1000, 20
host, port = sys.argv[1].rsplit(":", 1)
pid = int(sys.argv[2])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))


def rss():
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


rss_before = rss_peak = rss()
start = time.monotonic()
open_socks = []
for i in range(STALLED + SILENT):
    s = socket.create_connection((host, int(port)))
    if i < STALLED:
        header = (1 << 20) if i % 2 == 0 else 4000
        try:
            s.sendall(struct.pack("<II", header, 0))
        except OSError:
            pass  # already closed by the node (a cap)
    s.setblocking(False)
    open_socks.append(s)
    if i % 50 == 0:
        rss_peak = max(rss_peak, rss())

closed, last_closed = 0, 0.0
deadline = start + 30.0
poll = select.epoll()  # select() stops at fd 1023
by_fd = {s.fileno(): s for s in open_socks}
for fd in by_fd:
    poll.register(fd, select.EPOLLIN | select.EPOLLRDHUP)
while by_fd and time.monotonic() < deadline:
    rss_peak = max(rss_peak, rss())
    for fd, _ in poll.poll(0.02):
        s = by_fd[fd]
        try:
            data = s.recv(4096)
        except BlockingIOError:
            continue
        except OSError:
            data = b""
        if not data:  # EOF or reset: the node closed it
            closed += 1
            last_closed = time.monotonic() - start
            poll.unregister(fd)
            del by_fd[fd]
            s.close()
for s in by_fd.values():
    s.close()
print(json.dumps({"connections": STALLED + SILENT, "stalled": STALLED, "silent": SILENT,
                  "rss_before": rss_before, "rss_peak": rss_peak, "closed": closed,
                  "last_closed_s": last_closed}))
