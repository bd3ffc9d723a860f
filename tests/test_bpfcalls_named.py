"""A producer that logs nothing (kafka-python), traced by kdiag's default
tracer, bpfcalls: the first bytes it keeps of each socket write name every
Produce request by its Kafka header, correlation id and all, and each has
its latency, as under strace."""
import contextlib
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time

import pytest

from conftest import need, need_tansu, require
from kdiag.cli import Environment, main

pytestmark = pytest.mark.e2e
TOPIC = "kdiag-head"
MESSAGES = 20
# One message at a time, each waited for: one Produce request each.
PRODUCER = f"""
import sys
from kafka import KafkaProducer
p = KafkaProducer(bootstrap_servers=sys.argv[1], linger_ms=0)
for i in range({MESSAGES}):
    p.send({TOPIC!r}, b"message %d" % i).get(timeout=30)
p.close()
"""


@contextlib.contextmanager
def plaintext_tansu():
    """A Tansu of its own that advertises its plaintext port (the lab's
    advertises TLS): the client's connections after metadata stay
    plaintext, where the header can be read."""
    from kdiag.lab import broker as lab
    from kdiag.lab.broker_start import ensure_topics
    from kdiag.lab.tls import free_ports

    port, = free_ports(1)
    env = {k: v for k, v in os.environ.items() if k not in lab.TANSU_ENV}
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen([str(lab.tansu_path()), "broker", "--listener-url", f"tcp://127.0.0.1:{port}",
                             "--advertised-listener-url", f"tcp://127.0.0.1:{port}",
                             "--storage-engine", "memory://tansu/"],
                            env=env, stdout=log, stderr=log, stdin=subprocess.DEVNULL)

    class Plain:
        bootstrap = f"127.0.0.1:{port}"

        def client_config(self):
            return {"bootstrap.servers": self.bootstrap}
    try:
        ensure_topics(Plain(), [TOPIC], time.monotonic() + 30)
        yield Plain.bootstrap
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def test_kafka_python_requests_are_named_under_bpfcalls(spark, tmp_path, monkeypatch):
    from kdiag.collectors import bpfcalls

    need(root=True)
    require(bpfcalls.check())
    need_tansu()
    try:
        import kafka  # noqa: F401
    except ImportError:
        require("kafka-python is not installed (pip install 'kdiag[clients]')")
    monkeypatch.delenv("KDIAG_TRACER", raising=False)
    script = tmp_path / "producer.py"
    script.write_text(PRODUCER)
    bundle = tmp_path / "k.tar.gz"
    out, err = io.StringIO(), io.StringIO()
    with plaintext_tansu() as bootstrap:
        rc = main(["trace", "--json", "--tracer", "bpfcalls", "-o", str(bundle), "--", sys.executable, str(script),
                   bootstrap], Environment(stdout=out, stderr=err))
    assert rc == 0, err.getvalue()
    f = json.loads(out.getvalue())
    assert f["summary"]["source"] == "syscalls" and f["summary"]["requests"] == MESSAGES, f["summary"]
    assert any("named by the Kafka request header" in u for u in f["unknowns"]), f["unknowns"]

    # The bundle's own analysis: the Produce requests judged, each with its
    # correlation id from its header and its latency.
    with tarfile.open(bundle) as tar:
        man = json.load(tar.extractfile("manifest.json"))
        found = json.load(tar.extractfile("findings.json"))
        trace = tar.extractfile("raw/strace/strace.txt").read().decode()
    # (a run this short may end before the socket sampler's first sample)
    assert man["tracer"]["tool"] == "bpfcalls" and man["tracer"]["lost_events"] == 0, man["tracer"]
    assert not any("bpfcalls" in r or "strace" in r for r in man["partial_reasons"]), man["partial_reasons"]
    rows = [dict(zip(found["request_rows"]["columns"], r)) for r in found["request_rows"]["rows"]]
    ids = sorted(r["corr_id"] for r in rows)
    assert len(ids) == MESSAGES and ids == list(range(ids[0], ids[0] + MESSAGES)), ids
    assert all(r["total_ms"] > 0 for r in rows), rows
    # what named them: the kept bytes, escaped and cut as strace -s cuts them
    assert "kafka-python-producer-1" in trace and '"..., ' in trace
