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
from pathlib import Path

import pytest

from conftest import need, need_tansu
from kdiag.lab import scenarios
from kdiag.lab.variants import NetworkPath
from tcpdump_capture import capture

NAMES = scenarios.names()


def _needs(sc) -> None:
    need("tcpdump", root=True)
    need("stunnel4")
    need_tansu()
    if isinstance(sc.lab, NetworkPath):
        for tool in ("ip", "ethtool", "openssl", "nft"):
            need(tool)


def _captured_lab(name: str, pcap: Path):
    """The scenario's lab for ``TraceOptions.lab``, with tcpdump on the
    producer's side of it from before the producer starts."""
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
    # As many messages as the matrix sends, or the scenario's own (a CPU
    # limit shows over hundreds of requests, not twenty).
    opts = trace.TraceOptions(messages=sc.matrix_messages or sc.messages, out=tmp_path / f"{name}.tar.gz",
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
