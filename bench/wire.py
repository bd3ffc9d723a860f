"""Reading a user's packet capture: pcap bytes -> segments -> TCP connections
with their streams (kdiag.parsers.wire), MB of capture file per second on
one core.

The inputs are real captures, taken here with tcpdump while Kafka-framed
requests (10 KB each) and their responses cross loopback in a network
namespace of the bench's own:

- ``1500-byte frames``: the namespace's loopback at an Ethernet MTU with
  TSO and GSO off, so every frame is one a network card would carry: the
  per-packet cost decides, the harder case;
- ``64 KiB segments``: loopback as Linux sets it up (MTU 65536), what a
  capture on the sending host shows of TSO'd traffic.

The reference, in the same run, is the capture file's own reader
(kdiag.parsers.pcap.capture_records) walking the same bytes: the floor the
Python reader adds its work to. The wire figure is
``kdiag.parsers.wire.packets.capture_segments``'s, compiled where it was
built (the figure's note says which).

Needs root (a network namespace, tcpdump), ip, ethtool and tcpdump; without
them the figures are not measured and say why.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.common import Figure, check
from kdiag.lab import tcpdump

GOAL = ">= 200"

# The exchange, run inside the namespace: a server answering each request
# after reading it whole, a client sending ``n`` of them, one at a time.
_EXCHANGE = r'''
import socket, struct, sys, threading
n, body = int(sys.argv[1]), int(sys.argv[2])
ls = socket.socket(); ls.bind(("127.0.0.1", int(sys.argv[3]))); ls.listen(1)
def rx(s, k):
    out = bytearray()
    while len(out) < k:
        got = s.recv(k - len(out))
        if not got: raise EOFError
        out += got
    return bytes(out)
def serve():
    c, _ = ls.accept()
    for _ in range(n):
        req = rx(c, struct.unpack("!i", rx(c, 4))[0])
        resp = req[4:8] + bytes(64)
        c.sendall(struct.pack("!i", len(resp)) + resp)
    c.recv(1); c.close()
th = threading.Thread(target=serve); th.start()
c = socket.create_connection(ls.getsockname())
for i in range(n):
    payload = struct.pack("!hhih", 0, 9, i, 5) + b"bench" + bytes(body)
    c.sendall(struct.pack("!i", len(payload)) + payload)
    rx(c, struct.unpack("!i", rx(c, 4))[0])
c.close(); th.join()
'''


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root (a network namespace, tcpdump)"
    for tool in ("ip", "tcpdump", "ethtool"):
        if shutil.which(tool) is None:
            return f"{tool} not installed (./setup.sh installs it)"
    return None


def make_capture(path: Path, n: int, mtu: int | None, body: int = 10_000) -> None:
    """A tcpdump capture of ``n`` request/response round trips on the
    loopback of a fresh namespace (``mtu``: its MTU, TSO/GSO off)."""
    ns = f"kdbench{os.getpid()}"
    ex = ["ip", "netns", "exec", ns]
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run([*ex, "ip", "link", "set", "lo", "up"], check=True)
        if mtu:
            subprocess.run([*ex, "ip", "link", "set", "lo", "mtu", str(mtu)], check=True)
            subprocess.run([*ex, "ethtool", "-K", "lo", "tso", "off", "gso", "off"], check=True,
                           capture_output=True)
        # A ring slot per packet of the snaplen (immediate mode): 64 KiB
        # frames in a 64 MiB ring, none dropped on a busy machine.
        with tcpdump.capture(path, bpf="tcp port 9092", prefix=ex, snaplen=(mtu or 65536) + 100,
                             buffer_kib=65536):
            subprocess.run([*ex, sys.executable, "-c", _EXCHANGE, str(n), str(body), "9092"], check=True,
                           timeout=600)
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


def read_rate(data: bytes, repeats: int) -> tuple[float, float, int, int]:
    """(wire MB/s, reader-alone MB/s, packets, connections): the best of
    ``repeats`` runs each."""
    from kdiag.parsers.base import ParseCounts
    from kdiag.parsers.pcap import capture_records
    from kdiag.parsers.wire.packets import capture_segments
    from kdiag.parsers.wire.tcp import flows

    best = best_ref = None
    for _ in range(repeats):
        counts = ParseCounts("wire")
        t0 = time.perf_counter()
        fl = flows(capture_segments(data, counts), counts)
        secs = time.perf_counter() - t0
        best = secs if best is None else min(best, secs)
        t0 = time.perf_counter()
        for _rec in capture_records(data, ParseCounts("ref")):
            pass
        secs = time.perf_counter() - t0
        best_ref = secs if best_ref is None else min(best_ref, secs)
    mb = len(data) / 1e6
    return mb / best, mb / best_ref, counts.lines, len(fl)


def reader() -> str:
    """Which capture reader the figures measure."""
    from kdiag.parsers.wire.packets import COMPILED

    return "compiled reader" if COMPILED else "Python reader (the compiled one was not built)"


def run(smoke: bool, work: Path) -> list[Figure]:
    work.mkdir(parents=True, exist_ok=True)
    why = _missing()
    figs = []
    # ~45 MB of capture each (the 1500-byte one holds more headers).
    n = 40 if smoke else int(os.environ.get("KDIAG_BENCH_WIRE_REQUESTS", 3000))
    for name, mtu in (("1500-byte frames", 1500), ("64 KiB segments", None)):
        shown = f"python -m bench --only wire  # {n:,} Kafka-framed round trips of 10 KB, {name}"
        goal = None if smoke or mtu is None else GOAL
        if why:
            figs.append(Figure("wire", f"pcap read MB/s, {name}", None, "MB/s", goal, None, command=shown, note=why))
            continue
        path = work / f"wire-{mtu or 'lo'}.pcap"
        make_capture(path, n, mtu)
        data = path.read_bytes()
        rate, ref, packets, conns = read_rate(data, 1 if smoke else 3)
        figs.append(Figure("wire", f"pcap read MB/s, {name}", round(rate, 1), "MB/s", goal, goal and check(rate, goal),
                           "capture_records alone (MB/s)", round(ref, 1), shown,
                           f"{reader()}, best of {1 if smoke else 3}, one core; {len(data) / 1e6:.1f} MB, {packets:,} packets, "
                           f"{conns} connection(s); {packets / (len(data) / 1e6 / rate):,.0f} packets/s"))
        path.unlink()
    return figs
