"""tcpdump writing the lab's packets to a capture while a block runs: what the
wire tests, the fixtures' captures and the read benchmark take.

--immediate-mode: else libpcap holds packets in a block until its 1 s
timeout, and a stop before then writes none of them (a capture that lost its
last second lost a scenario's Produce requests). It also gives every packet
a ring slot of the snaplen, so the buffer is sized for loopback's 64 KiB
frames: the default 2 MiB holds a handful and drops the rest of a burst. A
capture that dropped a packet is refused: every figure read from it would
be wrong.
"""
from __future__ import annotations

import contextlib
import re
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from kdiag.lab.processes import LabError

SNAPLEN = 65600
BUFFER_KIB = 32768
# The last ACKs of a run, before the capture stops.
TAIL_S = 0.2


@contextlib.contextmanager
def capture(path: Path | str, *, iface: str = "lo", bpf: str = "tcp", prefix: Sequence[str] = (),
            snaplen: int = SNAPLEN, buffer_kib: int = BUFFER_KIB, options: Sequence[str] = ()) -> Iterator[None]:
    """tcpdump -w ``path`` on ``iface`` while the block runs, from when it
    listens; ``prefix`` runs it elsewhere (``ip netns exec NS``, a lab's
    client namespace). LabError when it does not start or dropped packets."""
    dump = subprocess.Popen([*prefix, "tcpdump", "-i", iface, "-n", "--immediate-mode", "-U", "-Z", "root",
                             "-s", str(snaplen), "-B", str(buffer_kib), *options, "-w", str(path), bpf],
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        line = ""
        while "listening on" not in line:   # after "data link type ..." when -y is given
            line = dump.stderr.readline()
            if not line:
                raise LabError(f"tcpdump did not start on {iface}")
        yield
        time.sleep(TAIL_S)
    finally:
        dump.terminate()
        _, err = dump.communicate(timeout=30)
    if not re.search(r"^0 packets dropped by kernel", err, re.M):
        raise LabError(f"tcpdump dropped packets: {err.strip()}")


def captured_lab(name: str, pcap):
    """The lab scenario ``name`` for ``TraceOptions.lab``, with tcpdump on the
    producer's side of it from before the producer starts: a loopback lab on
    `lo`, filtered to the lab's own ports (the TLS terminator's, the
    broker's, a proxy's or relay's), as an engineer filters to the broker's
    port on the producer's host; a network lab on every interface of the
    client's namespace (TLS, and its lookups)."""
    from kdiag.lab import scenarios

    @contextlib.contextmanager
    def lab(topic: str, log):
        with scenarios.running(name, topic, log) as target:
            if target.exec_prefix:
                iface, bpf = "any", "tcp or udp port 53"
            else:
                ports = sorted({v for k, v in target.info.items() if k.endswith("_port") and isinstance(v, int)})
                iface, bpf = "lo", " or ".join(f"tcp port {p}" for p in ports)
            with capture(pcap, iface=iface, bpf=bpf, prefix=target.exec_prefix):
                yield target
    return lab
