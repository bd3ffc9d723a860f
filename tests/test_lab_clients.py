"""The other clients' lab rows: kafka-python, aiokafka and kafkajs producers
(kdiag.lab.clients), plaintext and TLS, each traced as ``kdiag trace --
CMD`` traces a user's, with no client log. Each row must give a latency
per request; in plaintext each request is named by the Kafka header its
first socket write begins with, under the default tracer."""
from __future__ import annotations

import importlib
import json
import pkgutil
import tarfile
import types

import pytest

from conftest import NODE_MODULES, need, need_tansu, require
from kdiag.lab import clients, matrix, scenarios

ROWS = [s.name for s in scenarios.all_scenarios() if s.client is not None]
MESSAGES = 40


def test_every_client_module_is_in_the_order_and_declares_itself():
    found = sorted(m.name for m in pkgutil.iter_modules(clients.__path__) if not m.name.startswith("_"))
    assert sorted(clients.ORDER) == found
    for c in clients.all_clients():
        assert c.program.is_file() and c.runtime in clients.RUNTIMES and c.install
    # Each client has its plaintext and its TLS row.
    assert sorted(ROWS) == sorted(f"{c.name}-{how}" for c in clients.all_clients() for how in ("plain", "tls"))


@pytest.mark.parametrize("attr", clients.REQUIRED)
def test_a_client_module_without_a_declaration_is_refused(attr):
    source = importlib.import_module(f"{clients.__name__}.{clients.ORDER[0]}")
    module = types.ModuleType("kdiag.lab.clients.incomplete")
    for a in clients.REQUIRED:
        if a != attr:
            setattr(module, a, getattr(source, a))
    with pytest.raises(clients.ClientError, match=attr):
        clients.from_module(module)


def test_a_scenario_names_a_known_client_and_keeps_its_defaults():
    source = importlib.import_module("kdiag.lab.scenarios.kafka_python_plain")

    def module(**changed):
        m = types.ModuleType("kdiag.lab.scenarios.changed")
        for a in (*scenarios.REQUIRED, "CLIENT"):
            setattr(m, a, changed.get(a, getattr(source, a)))
        return m

    assert scenarios.from_module(module()).client == "kafka-python"
    with pytest.raises(scenarios.ScenarioError, match="not one of"):
        scenarios.from_module(module(CLIENT="no-such-client"))
    with pytest.raises(scenarios.ScenarioError, match="defaults"):
        scenarios.from_module(module(PROPS={"linger.ms": "5"}))


def test_the_command_takes_the_labs_config():
    c = clients.get("kafka-python")
    plain = c.command({"bootstrap.servers": "127.0.0.1:9092"}, "t", 5)
    assert plain[1:] == [str(c.program), "127.0.0.1:9092", "t", "", "5", "each"]
    tls = c.command({"bootstrap.servers": "127.0.0.1:9093", "security.protocol": "ssl",
                     "ssl.ca.location": "/ca.pem"}, "t", 5, mode="hold")
    assert tls[-4:] == ["t", "/ca.pem", "5", "hold"]
    with pytest.raises(ValueError):
        c.command({"bootstrap.servers": "x"}, "t", 5, mode="fast")


def _bundle_json(path, name: str) -> dict:
    with tarfile.open(path) as tar:
        return json.load(tar.extractfile(name))


@pytest.mark.e2e
@pytest.mark.parametrize("name", ROWS)
def test_each_clients_row_gives_a_latency_per_request(name, tmp_path, spark, monkeypatch):
    need("stunnel4")
    need_tansu()
    monkeypatch.setenv("NODE_PATH", str(NODE_MODULES))
    case = next(c for c in matrix.cases() if c.name == name)
    require(clients.get(case.scenario.client).missing())
    row = matrix.run_case(case, tmp_path, MESSAGES, log=lambda m: None)
    assert row.ok, row.to_dict()
    assert row.p50_ms is not None and row.p99_ms is not None, row.to_dict()
    f = _bundle_json(row.bundle, "findings.json")
    man = _bundle_json(row.bundle, "manifest.json")
    requests = f["summary"]["requests"]
    assert man["lab"]["client"] == case.scenario.client and man["lab"]["client_version"], man["lab"]
    assert man["target"]["exit_status"] == 0, man["target"]
    if name.endswith("-plain"):
        # One Produce request per message, each named by its header.
        assert requests == MESSAGES, f["summary"]
        assert any("named by the Kafka request header" in u for u in f["unknowns"]), f["unknowns"]
        # Its requests' client id is its library's default: the fixes' names are librdkafka's.
        assert f["client_library"] == case.scenario.client, f.get("client_library")
    else:
        # Over TLS each exchange is one: the messages' and the bootstrap's
        # Metadata; each connection's handshake and ApiVersions are left out.
        assert MESSAGES <= requests <= MESSAGES + 4, f["summary"]


@pytest.mark.e2e
@pytest.mark.parametrize("client,how", [("kafka-python", "plain"), ("kafkajs", "tls")])
def test_a_running_producer_of_another_library_is_attached_to(client, how, tmp_path, spark, monkeypatch):
    """kdiag trace --pid on a producer that was already connected: no
    connection opens in the window, and its requests are still timed one by
    one (named by their headers in plaintext); it keeps running."""
    import io
    import os
    import subprocess
    import time

    from kdiag.capture.lab_client import TOPIC
    from kdiag.cli import Environment, main

    need("stunnel4")
    need_tansu()
    monkeypatch.setenv("NODE_PATH", str(NODE_MODULES))
    require(clients.get(client).missing())
    sc = scenarios.get(f"{client}-{how}")
    with scenarios.running(sc.name, TOPIC, lambda m: None) as target:
        # One message every 20 ms, each acknowledged, until stdin closes.
        cmd = clients.get(client).command(target.config, TOPIC, 20, mode="steady")
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                env=dict(os.environ))
        try:
            time.sleep(3)
            assert proc.poll() is None, proc.stderr.read()
            out, err = io.StringIO(), io.StringIO()
            rc = main(["trace", "--json", "--pid", str(proc.pid), "--duration", "3", "-o", str(tmp_path / "p.tar.gz")],
                      Environment(stdout=out, stderr=err))
            assert rc == 0, err.getvalue()
            assert proc.poll() is None, "the producer stopped"
        finally:
            proc.stdin.close()
            proc.wait(timeout=30)
    f = json.loads(out.getvalue())
    assert f["summary"]["requests"] >= 30 and f["summary"]["latency_p50_ms"] is not None, f["summary"]
    if how == "plain":
        assert any("named by the Kafka request header" in u for u in f["unknowns"]), f["unknowns"]
        assert f["client_library"] == client


@pytest.mark.e2e
@pytest.mark.parametrize("name", ["kafka-python-tls", "kafkajs-plain"])
def test_a_capture_beside_the_syscalls_is_joined_to_them(name, tmp_path, spark, monkeypatch):
    """Over TLS the syscalls cannot name a request, the capture (the
    terminator's plaintext side with it) can; in plaintext both do, by the
    same correlation id. Replayed together, each burst of writes is joined
    to the request the capture saw leave while it was written: one Produce
    per message, ids consecutive."""
    import io

    from kdiag.capture import lab_client
    from kdiag.cli import Environment, main
    from kdiag.lab.tcpdump import captured_lab

    need("tcpdump", root=True)
    need("stunnel4")
    need_tansu()
    monkeypatch.setenv("NODE_PATH", str(NODE_MODULES))
    sc = scenarios.get(name)
    require(clients.get(sc.client).missing())
    pcap = tmp_path / "c.pcap"
    res = lab_client.run(sc, tmp_path / "b.tar.gz", MESSAGES, ["test"], lab=captured_lab(sc.name, pcap))
    assert res.error is None, res
    out, err = io.StringIO(), io.StringIO()
    rc = main(["replay", "--json", "--merge", str(res.bundle), str(pcap)], Environment(stdout=out, stderr=err))
    assert rc == 0, err.getvalue()
    f = json.loads(out.getvalue())
    from kdiag.analysis import wire

    assert wire.NAMED_BY_WIRE in f["unknowns"], f["unknowns"]
    ids = sorted(r[f["request_rows"]["columns"].index("corr_id")] for r in f["request_rows"]["rows"])
    assert f["summary"]["requests"] == MESSAGES and ids == list(range(ids[0], ids[0] + MESSAGES)), ids
    assert f["client_library"] == sc.client
