"""The network path on real parts: namespaces, the delay line, a kernel
router, SYN probes, Tansu behind TLS."""
import io
import json
import shutil
import tarfile

import pytest

from conftest import need
from kdiag.cli import Environment, main

pytestmark = pytest.mark.e2e
ONE_WAY_MS = 15.0   # the network-latency scenario


def trace(tmp_path, scenario, messages):
    need("strace", root=True)
    need("stunnel4")
    need("ethtool")
    out, err = io.StringIO(), io.StringIO()
    bundle = tmp_path / f"{scenario}.tar.gz"
    rc = main(["trace", "--json", "--scenario", scenario, "--messages", str(messages), "-o", str(bundle)],
              Environment(stdout=out, stderr=err))
    assert rc == 0, err.getvalue()
    return json.loads(out.getvalue()), bundle


def replay(path, *flags):
    out = io.StringIO()
    rc = main(["replay", "--json", *flags, str(path)], Environment(stdout=out, stderr=io.StringIO()))
    assert rc == 0
    return json.loads(out.getvalue())


@pytest.fixture(scope="module")
def latency(tmp_path_factory, spark):
    return trace(tmp_path_factory.mktemp("nl"), "network-latency", 30)


def test_network_latency_names_the_network(latency):
    f, _ = latency
    assert f["verdict"] == "network_latency"
    s = f["summary"]
    assert abs(s["path_rtt_ms"] - 2 * ONE_WAY_MS) <= 0.2 * 2 * ONE_WAY_MS, s["path_rtt_ms"]
    assert s["path_rtt_source"].startswith("TCP connect() handshakes")
    assert f["findings"][0]["cause"] == "network_latency" and f["findings"][0]["share"] >= 0.9


def test_path_table_shows_router_then_broker(latency):
    f, _ = latency
    hops = [(p["ttl"], p["answer"]) for p in f["paths"]]
    assert hops == [(1, "time_exceeded"), (2, "open")]
    router, broker = f["paths"]
    # named as librdkafka names the broker, from cluster metadata
    assert broker["broker"] and broker["broker"].startswith(broker["target_host"])
    assert router["responder"] != broker["responder"] and broker["responder"] == broker["target_host"]
    # the delay line sits before the router: both hops are ~30 ms away
    assert router["rtt_median_ms"] > 0.8 * 2 * ONE_WAY_MS


def test_replay_without_probes_uses_the_handshake_in_strace(latency, tmp_path):
    _, bundle = latency
    with tarfile.open(bundle) as tar:
        tar.extractall(tmp_path, filter="data")
    shutil.rmtree(tmp_path / "raw" / "tcp_probe")
    # the bundle no longer matches its manifest, on purpose
    f = replay(tmp_path, "--no-verify")
    assert f["verdict"] == "network_latency"
    s = f["summary"]
    assert s["path_rtt_source"].startswith("strace") and s["path_rtt_upper_bound"] is False
    assert abs(s["path_rtt_ms"] - 2 * ONE_WAY_MS) <= 0.2 * 2 * ONE_WAY_MS, s["path_rtt_ms"]
    assert f["paths"] == []


def test_packet_loss_names_loss(tmp_path, spark):
    f, _ = trace(tmp_path, "packet-loss", 100)
    shown = json.dumps(f["findings"], indent=1)
    # The link drops frames from the first: when it drops a SYN or its
    # answer, the connect waits a second for the retransmit, which outweighs
    # the requests' own losses, and the verdict is that connect, named as
    # lost SYNs. Either way the requests' loss is found.
    if f["verdict"] == "connect_slow":
        slow = f["findings"][0]
        assert any("SYN retransmit" in e for e in slow["evidence"]), shown
    else:
        assert f["verdict"] == "packet_loss", shown
    loss = next(x for x in f["findings"] if x["cause"] == "packet_loss")
    assert f["summary"]["tcp_retransmits"] > 0
    assert any("retransmitted" in e for e in loss["evidence"])
    # a fast body and a slow tail
    assert f["summary"]["latency_p50_ms"] < 10 < f["summary"]["latency_p99_ms"]
