"""tcpdump writing a capture while a block runs, as the wire tests take
theirs: every packet flushed at the end, and none dropped."""
from __future__ import annotations

import contextlib
import re
import subprocess
import time


@contextlib.contextmanager
def capture(path, *args, iface="lo", netns=None, bpf="tcp", prefix: list[str] | None = None):
    """tcpdump -w path while the block runs; its packets flushed at the end.
    ``prefix`` runs it elsewhere (a lab's client namespace)."""
    pre = prefix if prefix is not None else (["ip", "netns", "exec", netns] if netns else [])
    # --immediate-mode: else libpcap holds packets in a block until its 1 s
    # timeout, and a SIGTERM before then writes none of them. It also gives
    # every packet a ring slot of the snaplen (256 KiB by default), so the
    # default 2 MiB buffer holds 8 and drops the rest of a burst: loopback's
    # largest frame is 64 KiB and the buffer 32 MiB.
    dump = subprocess.Popen([*pre, "tcpdump", "-i", iface, "-n", "--immediate-mode", "-U", "-Z", "root",
                             "-s", "65600", "-B", "32768", *args, "-w", str(path), bpf],
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        line = ""
        while "listening on" not in line:   # after "data link type ..." when -y is given
            line = dump.stderr.readline()
            assert line, "tcpdump did not start"
        yield
        time.sleep(0.2)
    finally:
        dump.terminate()
        _, err = dump.communicate(timeout=10)
    # A capture that lost packets would make every figure here wrong.
    assert re.search(r"^0 packets dropped by kernel", err, re.M), err


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
