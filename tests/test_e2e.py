"""kdiag trace on real parts: Tansu behind stunnel4, the probe producer
under bpfcalls (or strace), Spark; then the bundle replays to the same
findings."""
import gzip
import hashlib
import io
import json
import tarfile

import pytest

from conftest import need
from kdiag.cli import Environment, main
from kdiag.collectors import bpfcalls

pytestmark = pytest.mark.e2e
PLANTED = "Planted-S3cret-e2e-7d1f"


def trace(tmp_path, name, *extra):
    need("strace", root=True)
    need("stunnel4")
    out, err = io.StringIO(), io.StringIO()
    bundle = tmp_path / f"{name}.tar.gz"
    rc = main(["trace", "--json", "--messages", "30", "-o", str(bundle), *extra],
              Environment(stdout=out, stderr=err))
    assert rc == 0, err.getvalue()
    return json.loads(out.getvalue()), bundle


def replay(bundle):
    out = io.StringIO()
    rc = main(["replay", "--json", str(bundle)], Environment(stdout=out, stderr=io.StringIO()))
    assert rc == 0
    return json.loads(out.getvalue())


def same_findings(a, b):
    assert a["verdict"] == b["verdict"]
    assert [(f["cause"], f["requests"], f["share"]) for f in a["findings"]] == \
           [(f["cause"], f["requests"], f["share"]) for f in b["findings"]]
    for k in ("requests", "rtt_p50_ms", "rtt_p99_ms", "latency_p50_ms", "split_ms", "path_rtt_ms"):
        assert a["summary"][k] == b["summary"][k], k


@pytest.fixture(scope="module")
def nagle_on(tmp_path_factory, spark):
    # a SASL password is ignored over plain ssl, but must still never reach the bundle
    return trace(tmp_path_factory.mktemp("on"), "on", "-X", f"sasl.password={PLANTED}")


def test_nagle_on_is_nagle_delayed_ack(nagle_on):
    f, _ = nagle_on
    assert f["verdict"] == "nagle_delayed_ack"
    top = f["findings"][0]
    assert top["share"] >= 0.9 and top["fix"] == {"socket.nagle.disable": "true"}
    assert f["probe"]["delivered"] == 30 and f["probe"]["msgs_per_s"] < 30
    assert 38 < f["summary"]["rtt_p50_ms"] < 60
    # seen on the socket itself by the sampler: bytes held behind an unacked segment
    assert any("held" in e and "unsent behind an unacknowledged segment" in e for e in top["evidence"])


def test_bundle_layout_and_checksums(nagle_on):
    _, bundle = nagle_on
    with tarfile.open(bundle) as tar:
        names = tar.getnames()
        assert names[0] == "manifest.json"
        man = json.load(tar.extractfile("manifest.json"))
        for name, meta in man["files"].items():
            assert hashlib.sha256(tar.extractfile(name).read()).hexdigest() == meta["sha256"], name
    assert {"raw/rdkafka_log/rdkafka.log", "raw/strace/strace.txt", "findings.json", "report.txt", "report.html",
            "tables/syscalls.parquet", "tables/rdkafka_events.parquet"} <= set(names)
    assert man["versions"]["librdkafka"] and man["versions"]["tansu"]
    assert man["host"]["kernel"] and man["host"]["python"]
    # the default: kdiag's own BPF tracer wherever it can load, strace elsewhere
    tool = "bpfcalls" if bpfcalls.check() is None else "strace"
    assert man["tracer"]["tool"] == tool and man["tracer"]["setting"] == "auto", man["tracer"]
    assert bool(man["versions"]["strace"]) == (tool == "strace")
    assert {c["name"]: c["state"] for c in man["collectors"]} == {"rdkafka_log": "ok", tool: "ok",
                                                                  "tcp_probe": "ok", "sockets": "ok"}
    sockets = next(c for c in man["collectors"] if c["name"] == "sockets")
    assert sockets["samples"] > 0 and sockets["cpu_ms_per_sample"] is not None
    assert man["producer_config"]["sasl.password"] == "[REDACTED]"


def test_planted_secret_is_nowhere_in_the_bundle(nagle_on):
    _, bundle = nagle_on
    blob = bundle.read_bytes()
    assert PLANTED.encode() not in blob
    assert PLANTED.encode() not in gzip.decompress(blob)
    with tarfile.open(bundle) as tar:
        for m in tar.getmembers():
            if m.isfile():
                assert PLANTED.encode() not in tar.extractfile(m).read(), m.name


def test_bundle_replays_to_the_same_findings(nagle_on):
    f, bundle = nagle_on
    same_findings(f, replay(bundle))


def manifest_of(bundle):
    with tarfile.open(bundle) as tar:
        return json.load(tar.extractfile("manifest.json"))


def test_nagle_off_is_healthy_and_replays(tmp_path, spark):
    # strace, as asked: it runs the probe from its first call
    f, bundle = trace(tmp_path, "off", "-X", "socket.nagle.disable=true", "--tracer", "strace")
    assert f["verdict"] == "healthy"
    assert f["summary"]["rtt_p50_ms"] < 10
    same_findings(f, replay(bundle))
    man = manifest_of(bundle)
    assert man["tracer"] == {"tool": "strace", "setting": "strace", "why": "asked for strace",
                             "bpfcalls_failed": None, "lost_events": None}
    assert man["versions"]["strace"] and "strace" in {c["name"] for c in man["collectors"]}


def test_on_uprobes_the_trace_finds_the_same_and_says_what_it_hooked(tmp_path, spark, monkeypatch):
    """bpfcalls on libc's functions (no syscall tracepoint, nothing other
    processes pay for): the same verdict from the same evidence; the
    manifest names the hooks, as it does the tracepoints'."""
    need(root=True)
    assert bpfcalls.check() is None, bpfcalls.check()
    monkeypatch.setenv(bpfcalls.HOOKS_ENV, "uprobes")
    f, bundle = trace(tmp_path, "uprobes")
    assert f["verdict"] == "nagle_delayed_ack" and f["findings"][0]["share"] >= 0.9, f["findings"]
    assert any("waited in poll()" in e for e in f["findings"][0]["evidence"]), f["findings"][0]["evidence"]
    tracer = manifest_of(bundle)["tracer"]
    assert (tracer["tool"], tracer["hooks"]) == ("bpfcalls", "uprobes in libc"), tracer
    monkeypatch.delenv(bpfcalls.HOOKS_ENV)
    f, bundle = trace(tmp_path, "tracepoints")
    assert manifest_of(bundle)["tracer"]["hooks"] == "per-syscall tracepoints"


def test_probe_falls_back_to_strace_when_bpfcalls_does_not_start(tmp_path, spark, monkeypatch):
    """The probe waits, stopped, for its tracer: when bpfcalls fails to
    start, strace attaches before the probe's first call, and the verdict
    still has its evidence (TCP_NODELAY never set, from the connect)."""
    why = bpfcalls.check()
    if why:
        pytest.skip(f"bpfcalls cannot run here, so it is never chosen: {why}")

    def refuse(self, pid):
        self.child, self.failed_to_start = None, "planted failure"
    monkeypatch.setattr(bpfcalls.Bpfcalls, "start", refuse)
    f, bundle = trace(tmp_path, "fallback")
    assert f["verdict"] == "nagle_delayed_ack" and f["partial"] is False
    assert any("TCP_NODELAY was not set" in e for e in f["findings"][0]["evidence"]), f["findings"][0]
    man = manifest_of(bundle)
    assert man["tracer"]["tool"] == "strace" and man["tracer"]["bpfcalls_failed"] == "planted failure"
    assert {c["name"]: c["state"] for c in man["collectors"]}["strace"] == "ok"


def test_unreachable_broker_fails_fast_and_keeps_the_bundle(tmp_path, spark):
    need("strace", root=True)
    out, err = io.StringIO(), io.StringIO()
    bundle = tmp_path / "dead.tar.gz"
    # port 1 on loopback: connection refused, nothing listens there
    rc = main(["trace", "--json", "-b", "127.0.0.1:1", "--messages", "50", "-o", str(bundle)],
              Environment(stdout=out, stderr=err))
    assert rc == 1 and "no message was delivered" in err.getvalue()
    f = json.loads(out.getvalue())
    # librdkafka's refused connects name the cause, though nothing completed.
    assert f["verdict"] == "broker_down" and f["partial"] is True and f["probe"]["gave_up"] is True
    assert any("Connection refused" in line for line in f["findings"][0]["evidence"]), f["findings"][0]
    assert f["probe"]["messages"] == 50 and f["probe"]["failed"] == 1
    with tarfile.open(bundle) as tar:
        assert tar.getnames()[0] == "manifest.json"
        assert json.load(tar.extractfile("manifest.json"))["partial"] is True
        assert tar.extractfile("raw/rdkafka_log/rdkafka.log").read()
