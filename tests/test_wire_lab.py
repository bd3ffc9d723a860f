"""Every lab scenario, captured with tcpdump while kdiag traces it, replayed
from the capture alone: the packets name the scenario's cause.

A loopback lab is captured on `lo`, filtered to the lab's own ports (the
TLS terminator's, the broker's, a proxy's or relay's), as an engineer would
filter to the broker's port on the producer's host; the terminator's
plaintext side is then in the capture too. A network lab is captured on
every interface of the client's namespace: the producer's side of the path,
TLS only. The bundle's own files are not given to the replay.
"""
from __future__ import annotations

import contextlib
import io
import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import need, need_tansu
from kdiag.lab import scenarios
from kdiag.lab.variants import NetworkPath

NAMES = scenarios.names()
# Enough requests for a share, few enough for CI: a scenario that needs
# more to show its cause declares its own matrix count.
MESSAGES = 20


def _needs(sc) -> None:
    need("tcpdump", root=True)
    need("stunnel4")
    need_tansu()
    if isinstance(sc.lab, NetworkPath):
        for tool in ("ip", "ethtool", "openssl", "nft"):
            need(tool)


@contextlib.contextmanager
def _tcpdump(prefix: list[str], iface: str, bpf: list[str], pcap: Path):
    """tcpdump writing ``pcap`` until the block ends; the test waits for it
    to listen before the producer starts."""
    proc = subprocess.Popen([*prefix, "tcpdump", "-i", iface, "-n", "-U", "-s", "0", "-w", str(pcap), *bpf],
                            stderr=subprocess.PIPE, text=True)
    try:
        said = []
        while not said or "listening on" not in said[-1]:   # "data link type ..." may come first
            said.append(proc.stderr.readline())
            assert said[-1], said
        yield
    finally:
        time.sleep(0.3)   # the last ACKs
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err


def _captured_lab(name: str, pcap: Path):
    """The scenario's lab for ``TraceOptions.lab``, with tcpdump on the
    producer's side of it from before the producer starts."""
    @contextlib.contextmanager
    def lab(topic: str, log):
        with scenarios.running(name, topic, log) as target:
            if target.exec_prefix:
                iface, bpf = "any", ["tcp", "or", "udp", "port", "53"]
            else:
                ports = sorted({v for k, v in target.info.items() if k.endswith("_port") and isinstance(v, int)})
                iface, bpf = "lo", " or ".join(f"tcp port {p}" for p in ports).split()
            with _tcpdump(target.exec_prefix, iface, bpf, pcap):
                yield target
    return lab


def _replay(paths: list[Path]) -> dict:
    from kdiag.cli import Environment, main

    out, err = io.StringIO(), io.StringIO()
    rc = main(["replay", "--json", *map(str, paths)], Environment(stdout=out, stderr=err))
    assert rc == 0, err.getvalue()
    return json.loads(out.getvalue())


@pytest.mark.e2e
@pytest.mark.parametrize("name", NAMES)
def test_a_capture_of_each_scenario_names_its_cause(name, tmp_path, spark):
    from kdiag.capture import trace

    sc = scenarios.get(name)
    _needs(sc)
    pcap = tmp_path / f"{name}.pcap"
    opts = trace.TraceOptions(messages=sc.matrix_messages or MESSAGES, out=tmp_path / f"{name}.tar.gz",
                              lab=_captured_lab(name, pcap), path_probe=False, props=dict(sc.props),
                              rate=sc.rate)
    res = trace.run(opts, log=lambda m: None)
    assert res.error is None and res.probe["delivered"] > 0, res
    got = _replay([pcap])
    said = json.dumps({k: got.get(k) for k in ("verdict", "findings", "wire", "summary")}, indent=1)[:6000]
    assert got["verdict"] == sc.cause, said
    assert got["summary"]["source"] in ("wire", None), said
    # Read as packets, every one of them.
    counts = got["inputs"][0]["counts"]
    assert counts["lines"] == counts["parsed"] + counts["skipped_total"] and counts["parsed"] > 0, counts
    assert got["wire"]["producer"] >= 1, said
