"""Every lab scenario, captured with tcpdump while kdiag traces it, replayed
from the capture alone: the packets name the scenario's cause.

Where tcpdump listens: kdiag.lab.tcpdump.captured_lab. A loopback lab's
capture holds the TLS terminator's plaintext side too; a network lab's holds
the producer's side of the path only, TLS. The bundle's own files are not
given to the replay.
"""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from conftest import NODE_MODULES, need, need_tansu, require
from kdiag.lab import scenarios
from kdiag.lab.tcpdump import captured_lab
from kdiag.lab.variants import NetworkPath

NAMES = scenarios.names()


def _needs(sc) -> None:
    need("tcpdump", root=True)
    need("stunnel4")
    need_tansu()
    if isinstance(sc.lab, NetworkPath):
        for tool in ("ip", "ethtool", "openssl", "nft"):
            need(tool)


def _replay(paths: list[Path]) -> dict:
    from kdiag.cli import Environment, main

    out, err = io.StringIO(), io.StringIO()
    rc = main(["replay", "--json", *map(str, paths)], Environment(stdout=out, stderr=err))
    assert rc == 0, err.getvalue()
    return json.loads(out.getvalue())


@pytest.mark.e2e
@pytest.mark.parametrize("name", NAMES)
def test_a_capture_of_each_scenario_names_its_cause(name, tmp_path, spark, monkeypatch):
    from kdiag.capture import trace

    sc = scenarios.get(name)
    _needs(sc)
    pcap = tmp_path / f"{name}.pcap"
    # As many messages as the matrix sends, or the scenario's own (a CPU
    # limit shows over hundreds of requests, not twenty).
    messages = sc.matrix_messages or sc.messages
    if sc.client is not None:
        # Another library's producer, traced as -- CMD.
        from kdiag.capture import lab_client

        from kdiag.lab import clients

        monkeypatch.setenv("NODE_PATH", str(NODE_MODULES))
        require(clients.get(sc.client).missing())
        res = lab_client.run(sc, tmp_path / f"{name}.tar.gz", messages, ["test"], lab=captured_lab(name, pcap))
        assert res.error is None, res
    else:
        opts = trace.TraceOptions(messages=messages, out=tmp_path / f"{name}.tar.gz",
                                  lab=captured_lab(name, pcap), path_probe=False, props=dict(sc.props),
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
