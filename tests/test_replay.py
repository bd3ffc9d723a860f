"""Replay of real captures: no Kafka, no root, no strace needed."""
import io
import json

import pytest

from conftest import CAPTURES
from kdiag.cli import Environment, main


def replay(*paths, spark=None):
    out, err = io.StringIO(), io.StringIO()
    rc = main(["replay", "--json", *map(str, paths)], Environment(stdout=out, stderr=err))
    return rc, json.loads(out.getvalue()) if out.getvalue() else None, err.getvalue()


@pytest.mark.parametrize("capture", ["nagle_on", "nagle_on_tt"])
def test_nagle_capture_names_nagle(spark, capture):
    d = CAPTURES / capture
    rc, f, _ = replay(d / "rdkafka.log", d / "strace.txt", spark=spark)
    assert rc == 0
    assert f["verdict"] == "nagle_delayed_ack"
    nagle = f["findings"][0]
    assert nagle["cause"] == "nagle_delayed_ack" and nagle["share"] == 1.0 and nagle["requests"] == 30
    assert nagle["fix"] == {"socket.nagle.disable": "true"}
    assert nagle["example"]["n_writes"] >= 2
    assert 38 < nagle["example"]["wait_ms"] < 60
    assert any("TCP_NODELAY was not set" in e for e in nagle["evidence"])
    s = f["summary"]
    assert 40 < s["rtt_p50_ms"] < 50 and s["path_rtt_ms"] < 5 and s["source"] == "strace"
    assert f["librdkafka_version"] == "2.16.0"


def test_nagle_off_capture_is_healthy(spark):
    rc, f, _ = replay(CAPTURES / "nagle_off", spark=spark)
    assert rc == 0 and f["verdict"] == "healthy"
    assert f["summary"]["rtt_p50_ms"] < 5 and f["summary"]["requests"] == 30
    # CAPTURED (the notes file) is not a capture: reported, not fatal
    assert any("CAPTURED" in n and "skipped whole" in n for n in f["input_notes"])


def test_log_alone_says_what_it_cannot_know(spark):
    rc, f, _ = replay(CAPTURES / "nagle_on" / "rdkafka.log", spark=spark)
    assert rc == 0
    assert f["summary"]["source"] == "log" and f["summary"]["requests"] == 30
    assert any("no librdkafka Sent lines inside an strace capture" in u for u in f["unknowns"])
    # Not provable from the log alone: named from the rtt band over TLS, at
    # low confidence, saying what it did not see and the capture that would.
    assert f["verdict"] == "nagle_delayed_ack" and f["confidence"].startswith("low")
    nagle = next(x for x in f["findings"] if x["cause"] == "nagle_delayed_ack")
    assert any("the held send itself is not seen" in e for e in nagle["evidence"])
    assert f["likely"][0]["cause"] == "nagle_delayed_ack" and "strace" in f["likely"][0]["decide"]


def test_strace_alone_is_enough(spark):
    rc, f, _ = replay(CAPTURES / "nagle_on" / "strace.txt", spark=spark)
    assert rc == 0 and f["verdict"] == "nagle_delayed_ack"


def test_capture_started_after_connect(spark, tmp_path):
    """Cut the strace before the broker connection's connect(): TCP_NODELAY
    is then unknown and the findings say so, with the version's default."""
    lines = (CAPTURES / "nagle_on" / "strace.txt").read_text().splitlines()
    first_send = next(i for i, ln in enumerate(lines) if "Sent ProduceRequest" in ln)
    cut = tmp_path / "late.txt"
    cut.write_text("\n".join(lines[first_send - 40:]) + "\n")
    rc, f, _ = replay(cut, spark=spark)
    assert rc == 0 and f["verdict"] == "nagle_delayed_ack"
    assert "TCP_NODELAY unknown on fd [8]: the capture started after connect()" in f["unknowns"]
    assert "TCP_NODELAY not seen (capture started after connect)" in f["findings"][0]["evidence"]
    # with the log, the version (2.16.0: Nagle off by default) is known
    rc, f, _ = replay(cut, CAPTURES / "nagle_on" / "rdkafka.log", spark=spark)
    assert any("librdkafka 2.16.0 defaults socket.nagle.disable to true" in u for u in f["unknowns"])
    assert any("unless socket.nagle.disable=false was set" in e for e in f["findings"][0]["evidence"])


def test_foreign_and_empty_files(spark, tmp_path):
    (tmp_path / "empty.log").write_text("")
    (tmp_path / "notes.txt").write_text("hello\nworld\n")
    rc, f, err = replay(tmp_path / "empty.log", tmp_path / "notes.txt", spark=spark)
    assert rc == 3 and f["no_data"] is True and f["verdict"] is None
    assert len(f["input_notes"]) == 2


def test_missing_path_is_a_usage_error(tmp_path):
    rc, f, err = replay(tmp_path / "nope")
    assert rc == 2 and "no such file" in err


@pytest.mark.parametrize("capture,verdict", [("nagle_on", "nagle_delayed_ack"), ("nagle_off", "healthy")])
def test_producer_without_debug_log(spark, tmp_path, capture, verdict):
    """A producer that logs nothing: requests are inferred from its syscalls,
    and the findings say so."""
    lines = (CAPTURES / capture / "strace.txt").read_text().splitlines()
    quiet = tmp_path / "quiet.txt"
    quiet.write_text("\n".join(ln for ln in lines if "write(2<" not in ln) + "\n")
    rc, f, _ = replay(quiet, spark=spark)
    assert rc == 0 and f["verdict"] == verdict
    assert f["confidence"].startswith("medium") and f["summary"]["source"] == "syscalls"
    assert any("inferred from its syscalls" in u for u in f["unknowns"])
    # 30 produce requests, plus the TLS handshake and metadata exchanges
    assert 30 <= f["summary"]["requests"] <= 45


def test_throttled_capture(spark):
    """A real run behind the lab's throttling proxy: the statistics' throttle
    window tells the quota from a slow broker, and from Nagle (a 100 ms wait
    after a split TLS request fits the Nagle window)."""
    d = CAPTURES / "throttled"
    rc, f, _ = replay(d / "rdkafka.log", d / "strace.txt", d / "stats.jsonl", spark=spark)
    assert rc == 0 and f["verdict"] == "throttled", json.dumps(f["findings"], indent=1)
    t = f["findings"][0]
    assert t["requests"] >= 25 and "reported throttle times of 10" in t["evidence"][0]
    assert 95 < f["summary"]["rtt_p50_ms"] < 130
    # without the statistics nothing tells a quota from a slow broker, and the findings say so
    rc, f, _ = replay(d / "rdkafka.log", d / "strace.txt", spark=spark)
    assert rc == 0 and f["verdict"] == "broker_slow", json.dumps(f["findings"], indent=1)
    assert any("no librdkafka statistics" in e for e in f["findings"][0]["evidence"])
