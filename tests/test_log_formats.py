"""librdkafka's log lines in every form a client library prints them
(fixtures/logs/, made by fixtures/logs/make.py; each has a .cmd beside it)."""
import io
import json
import shutil
import statistics

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from conftest import CAPTURES, FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st

from kdiag.cli import Environment, main
from kdiag.ingest.detect import detect
from kdiag.ingest.lines import sniff
from kdiag.parsers.rdkafka_log import RdkafkaLogParser, looks_like, parse_lines

LOGS = FIXTURES / "logs"
DAY_US = 86_400 * 1_000_000

# name: (client name carried, timestamp carried, level carried)
FORMATS = {
    "librdkafka_stderr.log": (True, True, True),
    "librdkafka_v0.11.log": (True, True, True),
    "python_asctime_levelname_name.log": (True, True, True),
    "python_asctime_dashes.log": (True, True, True),
    "python_basicconfig.log": (True, False, True),
    "python_msecs_time_only.log": (True, True, True),
    "python_mock_plaintext.log": (True, True, True),
    "go_logevent.log": (True, True, True),
    "dotnet_consolelogger.log": (True, True, True),
    "node_rdkafka_inspect.log": (False, False, True),
    "node_rdkafka_json.log": (False, False, True),
    "confluent_js_event_log.log": (True, False, True),
    "confluent_js_kafkajs_logger.log": (True, True, False),
}
# Printed from librdkafka_stderr.log's records, one for one.
WRAPPED = ["go_logevent.log", "dotnet_consolelogger.log", "node_rdkafka_inspect.log", "node_rdkafka_json.log",
           "confluent_js_event_log.log"]
PYTHON = ["python_asctime_levelname_name.log", "python_asctime_dashes.log", "python_basicconfig.log",
          "python_msecs_time_only.log"]
SAME = ["event", "request", "api_version", "size_bytes", "corr_id", "rtt_ms", "broker", "thread", "facility",
        "detail", "text"]


def parsed(name):
    lines = (LOGS / name).read_text().splitlines()
    t, c = parse_lines(lines)
    return lines, t, c


def produce(t, event):
    return t.filter(pc.and_(pc.equal(t["event"], event), pc.equal(t["request"], "Produce")))


def test_every_fixture_has_its_cmd():
    logs = sorted(p.name for p in LOGS.glob("*.log"))
    assert logs == sorted(FORMATS)
    for name in logs:
        cmd = (LOGS / f"{name}.cmd").read_text()
        assert "make.py" in cmd and "shows:" in cmd and "trimmed:" in cmd


@pytest.mark.parametrize("name", FORMATS)
def test_produce_pairs(name):
    has_client, has_ts, has_level = FORMATS[name]
    lines, t, c = parsed(name)
    assert c.lines == len(lines) == c.parsed + c.skipped_total and len(t) == c.parsed
    assert set(c.skipped) <= {"record_part"}
    sends, recvs = produce(t, "send"), produce(t, "recv")
    assert len(sends) == len(recvs) == 20
    key = ["client", "broker", "corr_id"]
    pairs = lambda t: sorted(tuple(r.values()) for r in t.select(key).to_pylist())
    assert pairs(sends) == pairs(recvs)
    assert sends["corr_id"].null_count == 0 and recvs["rtt_ms"].null_count == 0
    assert sends["broker"].null_count == 0 and sends["thread"].null_count == 0
    assert pc.all(pc.equal(sends["thread"], sends["broker"])).as_py()  # the broker's own thread sends
    assert (sends["client"].null_count == 0) == has_client
    assert (sends["client"].null_count == len(sends)) == (not has_client)
    assert (sends["ts_us"].null_count == 0) == has_ts
    assert (sends["ts_us"].null_count == len(sends)) == (not has_ts)
    assert pc.all(pc.equal(sends["level"], 7)).as_py() if has_level else sends["level"].null_count == len(sends)
    # every Received line carries librdkafka's rtt, whatever the wrapper
    assert pc.min(recvs["rtt_ms"]).as_py() >= 0


def test_nagle_shows_in_every_lab_fixture():
    for name in FORMATS:
        if name != "python_mock_plaintext.log":
            rtt = produce(parsed(name)[1], "recv")["rtt_ms"].to_pylist()
            assert statistics.median(rtt) > 35, name  # Nagle on, TLS: ~40 ms per round trip


@pytest.mark.parametrize("name", WRAPPED)
def test_wrapped_lines_give_the_same_events(name):
    _, native, _ = parsed("librdkafka_stderr.log")
    _, t, _ = parsed(name)
    assert t.select(SAME).equals(native.select(SAME))
    assert t["level"].equals(native["level"])
    if FORMATS[name][0]:
        assert t["client"].equals(native["client"])


def test_kafkajs_logger_gives_the_same_debug_events_and_times():
    _, native, _ = parsed("librdkafka_stderr.log")
    debug = native.filter(pc.equal(native["level"], 7))
    _, t, _ = parsed("confluent_js_kafkajs_logger.log")
    assert t.select(SAME + ["client", "ts_us"]).equals(debug.select(SAME + ["client", "ts_us"]))


def test_go_rfc3339_whole_seconds_kept_with_their_resolution():
    _, native, _ = parsed("librdkafka_stderr.log")
    _, t, _ = parsed("go_logevent.log")
    timed = pc.invert(pc.equal(t["event"], "recv"))
    assert set(t["ts_resolution_us"].filter(timed).to_pylist()) == {1_000_000}
    # the same second as librdkafka's own time, shifted by the zone only
    whole = pc.multiply(pc.divide(native["ts_us"], 1_000_000), 1_000_000)
    shift = set(pc.subtract(t["ts_us"], whole).filter(timed).to_pylist())
    assert len(shift) == 1 and shift.pop() % (15 * 60 * 1_000_000) == 0
    # a Received line's second is left out: the request's time is librdkafka's rtt
    recv = t.filter(pc.equal(t["event"], "recv"))
    assert recv["ts_us"].null_count == len(recv) and recv["rtt_ms"].null_count == 0


def test_dotnet_local_time_is_librdkafka_time_shifted_by_the_zone():
    _, native, _ = parsed("librdkafka_stderr.log")
    _, t, _ = parsed("dotnet_consolelogger.log")
    shift = set(pc.subtract(t["ts_us"], native["ts_us"]).to_pylist())
    assert len(shift) == 1 and shift.pop() % (15 * 60 * 1_000_000) == 0


def test_python_formats_agree():
    tables = [parsed(n)[1] for n in PYTHON]
    for t in tables[1:]:
        assert t.select(SAME + ["client", "level"]).equals(tables[0].select(SAME + ["client", "level"]))
    with_date, dashes, basic, time_only = (t["ts_us"] for t in tables)
    assert with_date.equals(dashes) and basic.null_count == len(basic)
    # "%(asctime)s,%(msecs)03d" with datefmt "%H:%M:%S": the time of day only
    assert pc.max(time_only).as_py() < DAY_US
    assert pc.subtract(with_date, time_only).unique().to_pylist() == [pc.min(with_date).as_py() // DAY_US * DAY_US]


def test_python_asctime_times_requests():
    """asctime is when Python logged the record (flush() serves the log
    queue), yet Sent..Received still spans the round trip."""
    _, t, _ = parsed("python_asctime_levelname_name.log")
    sends, recvs = produce(t, "send"), produce(t, "recv")
    took = [(r - s) / 1000 for s, r in zip(sends["ts_us"].to_pylist(), recvs["ts_us"].to_pylist())]
    assert abs(statistics.median(took) - statistics.median(recvs["rtt_ms"].to_pylist())) < 5


def test_plaintext_broker_names():
    _, t, _ = parsed("python_mock_plaintext.log")
    brokers = set(produce(t, "send")["broker"].to_pylist())
    assert len(brokers) == 1 and "://" not in brokers.pop()
    assert t.filter(pc.equal(t["event"], "state"))["broker"].null_count == 0


def test_v011_wording():
    _, t, _ = parsed("librdkafka_v0.11.log")
    assert set(produce(t, "send")["api_version"].to_pylist()) == {3}
    assert t.filter(pc.equal(t["event"], "init"))["detail"].to_pylist() == ["0.11.6"]
    base = "%7|1500000000.001|REQERR|rdkafka#producer-1| [thrd:b:9092/1]: b:9092/1: "
    rows = parse_lines([
        # v0.11.0-v0.11.3: "Retrying %sRequest (v%hd, %zu bytes, retry %d/%d)"
        base + "Retrying ProduceRequest (v3, 2170 bytes, retry 1/2)",
        # v0.9.0-v0.9.1: "Sent %sRequest (v%hd, %zd bytes, CorrId %d)"
        base + "Sent ProduceRequest (v2, 300 bytes, CorrId 4)",
    ])[0].to_pylist()
    assert rows[0]["event"] == "retry" and rows[0]["detail"] == "1/2" and rows[0]["corr_id"] is None
    assert rows[1]["event"] == "send" and rows[1]["corr_id"] == 4 and rows[1]["broker"] == "b:9092/1"


@pytest.mark.parametrize("name", FORMATS)
def test_detected_by_content(name, tmp_path):
    assert looks_like(sniff(LOGS / name)) >= 0.95
    blind = tmp_path / "capture"
    shutil.copy(LOGS / name, blind)
    assert detect(blind) == "rdkafka_log"


@pytest.mark.parametrize("path,kind", [
    (CAPTURES / "nagle_on" / "strace.txt", "strace"),
    (CAPTURES / "nagle_on" / "stats.jsonl", "stats"),
    (CAPTURES / "nagle_on" / "rdkafka.log", "rdkafka_log"),
    (FIXTURES / "strace" / "threads_loopback.txt", "strace"),
    (FIXTURES / "strace" / "nagle_tls_slice.txt", "strace"),
])
def test_other_formats_still_detected(path, kind):
    assert detect(path) == kind


def test_other_json_and_text_are_not_librdkafka(tmp_path):
    assert looks_like(['{"ts_us": 1, "fd": 7, "nodelay": true}', '{"brokers": {}, "name": "rdkafka#producer-1"}']) == 0
    assert looks_like(["{", "  message: 'hello',", "  level: 'info'", "}"]) == 0  # no fac: not librdkafka's
    assert looks_like(["INFO:root:started", "2026-11-22 04:42:32,123 INFO app ready"]) == 0


def test_mixed_file_keeps_line_order_and_counts():
    native = (LOGS / "librdkafka_stderr.log").read_text().splitlines()[:30]
    python = (LOGS / "python_basicconfig.log").read_text().splitlines()[:30]
    node = (LOGS / "node_rdkafka_inspect.log").read_text().splitlines()[:30]
    lines = native[:10] + ["", "some other output"] + python + node + native[10:]
    t, c = parse_lines(lines)
    assert c.lines == len(lines) == c.parsed + c.skipped_total and len(t) == c.parsed
    assert c.skipped["not_librdkafka"] == 2
    nos = t["line_no"].to_pylist()
    assert nos == sorted(nos) and len(set(nos)) == len(nos)
    assert t.slice(10, 1)["line_no"][0].as_py() == 13  # first Python line, after the two foreign ones


def test_record_cut_by_a_chunk_boundary_leaves_fields_null():
    lines = (LOGS / "node_rdkafka_inspect.log").read_text().splitlines()
    first_long = lines.index("{")
    cut = first_long + 3  # after "{", severity and fac: the message line is in the next chunk
    p = RdkafkaLogParser()
    t = pa.concat_tables([p.feed(pa.array(lines[:cut]), 1), p.feed(pa.array(lines[cut:]), cut + 1)])
    assert p.counts.lines == len(lines) == p.counts.parsed + p.counts.skipped_total
    whole, _ = parse_lines(lines)
    # that one record's message line is still read, as any line holding
    # librdkafka's message is, but without the fac and level on the other
    # side of the cut: never borrowed from a neighbour
    assert len(t) == len(whole)
    assert t["facility"].null_count == 1
    cut_row = t.filter(pc.is_null(t["facility"])).to_pylist()[0]
    assert cut_row["level"] is None and cut_row["line_no"] > cut
    assert cut_row["text"] == whole.filter(pc.equal(whole["line_no"], cut_row["line_no"]))["text"][0].as_py()


def test_quotes_and_escapes():
    rows = parse_lines([
        # util.inspect switches to double quotes for a string holding a '
        """{ severity: 7, fac: 'TOPIC', message: "[thrd:main]: Topic 'a\\\\b' created" }""",
        '{"severity":6,"fac":"X","message":"[thrd:main]: say \\"hi\\" \\\\ done","name":"c#producer-2"}',
        "{ severity: 3, fac: 'ERROR', message: '[thrd:main]: it\\'s down' }",
    ])[0].to_pylist()
    assert [r["text"] for r in rows] == ["Topic 'a\\b' created", 'say "hi" \\ done', "it's down"]
    assert [r["level"] for r in rows] == [7, 6, 3] and rows[1]["client"] == "c#producer-2"


def test_python_levels_and_zones():
    msg = " [rdkafka#producer-1] [thrd:main]: m"
    rows = parse_lines([
        "2026-11-22 04:42:32,123 INFO kafka STATE" + msg,       # INFO: syslog 5 or 6, not known
        "2026-11-22 04:42:32,123 WARNING kafka FAIL" + msg,
        "2026-11-22T04:42:32.123+0100 ERROR kafka FAIL" + msg,  # a datefmt with %z: a real epoch
        "2026-11-22 04:42:32 DEBUG kafka SEND" + msg,           # whole seconds: kept, a second's resolution
    ])[0].to_pylist()
    assert [r["level"] for r in rows] == [None, 4, 3, 7]
    assert rows[2]["ts_us"] == rows[0]["ts_us"] - 3600 * 1_000_000
    assert rows[3]["ts_us"] == rows[0]["ts_us"] - 123_000 and rows[3]["ts_resolution_us"] == 1_000_000
    assert {r["client"] for r in rows} == {"rdkafka#producer-1"} and rows[0]["thread"] == "main"


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(sorted(FORMATS)), st.integers(0, 10_000), st.integers(0, 400), st.text(max_size=20))
def test_mutated_lines_of_every_format(name, which, cut, junk):
    lines = (LOGS / name).read_text().splitlines()
    i = which % len(lines)
    line = lines[i]
    cut = min(cut, len(line))
    lines = lines[max(0, i - 5):i] + [line[:cut] + junk.replace("\n", "") + line[cut:]] + lines[i + 1:i + 6]
    t, c = parse_lines(lines)
    assert c.lines == len(lines) == c.parsed + c.skipped_total and len(t) == c.parsed


def replay(*paths):
    out, err = io.StringIO(), io.StringIO()
    rc = main(["replay", "--json", *map(str, paths)], Environment(stdout=out, stderr=err))
    return rc, json.loads(out.getvalue()) if out.getvalue() else None


def test_replay_python_logging_log(spark):
    """A Python producer's logger= output alone: the requests are there,
    40 ms each over TLS, the delayed-ACK band: Nagle, at low confidence,
    with the likely causes ranked and the capture that decides."""
    rc, f = replay(LOGS / "python_asctime_levelname_name.log")
    assert rc == 0 and f["verdict"] == "nagle_delayed_ack", json.dumps(f["findings"], indent=1)
    assert f["confidence"].startswith("low") and f["likely"][0]["cause"] == "nagle_delayed_ack"
    assert "strace" in f["likely"][0]["decide"]
    s = f["summary"]
    assert s["source"] == "log" and s["requests"] == 20 and len(s["brokers"]) == 1
    assert 35 < s["latency_p50_ms"] < 60 and 35 < s["rtt_p50_ms"] < 60
    assert any("no librdkafka Sent lines inside an strace capture" in u for u in f["unknowns"])


def test_replay_mock_cluster_log_is_healthy(spark):
    rc, f = replay(LOGS / "python_mock_plaintext.log")
    assert rc == 0 and f["verdict"] == "healthy" and f["summary"]["requests"] == 20
    assert f["summary"]["latency_p50_ms"] < 10


def test_replay_log_without_timestamps_says_it_cannot_know(spark):
    rc, f = replay(LOGS / "python_basicconfig.log")
    assert rc == 0 and f["summary"]["requests"] == 20 and f["summary"]["rtt_p50_ms"] > 35
    assert f["verdict"] != "healthy"
    assert any("timestamp" in u for u in f["unknowns"])
