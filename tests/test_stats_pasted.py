"""Statistics as users paste them: each shape in fixtures/stats/ (made from a
real producer's stats_cb strings by fixtures/stats/make.py) gives the same
figures as the object it was made from, with every line counted."""
from __future__ import annotations

import json

import pytest
from conftest import FIXTURES

from kdiag.parsers.stats import looks_like, parse_lines

STATS = FIXTURES / "stats"
REAL = [json.loads(s) for s in (STATS / "real.jsonl").read_text().splitlines()]


def _ms(win, key, per=1000.0):
    return None if win is None or key not in win else win[key] / per


def expected(o: dict) -> list[tuple]:
    """The figures of one source object, read straight from it."""
    out = []
    for name, b in o["brokers"].items():
        out.append((o["time"] * 1_000_000, o["name"], name, b["nodeid"], b["state"],
                    _ms(b["rtt"], "p50"), _ms(b["rtt"], "p99_99"), _ms(b["rtt"], "max"), b["rtt"]["cnt"],
                    _ms(b["int_latency"], "avg"), _ms(b["int_latency"], "p95"), b["int_latency"]["cnt"],
                    _ms(b["outbuf_latency"], "p99"), _ms(b["throttle"], "max", 1.0), _ms(b["throttle"], "p99", 1.0),
                    b["tx"], b["txretries"], b["txerrs"], b["waitresp_msg_cnt"], b["xmit_msgq_cnt"] if "xmit_msgq_cnt"
                    in b else None, o["msg_cnt"], o["msg_size"], o["replyq"]))
    return out


COLUMNS = ("ts_us", "client", "broker", "nodeid", "state", "rtt_p50_ms", "rtt_p99_99_ms", "rtt_max_ms", "rtt_cnt",
           "int_latency_avg_ms", "int_latency_p95_ms", "int_latency_cnt", "outbuf_latency_p99_ms", "throttle_max_ms",
           "throttle_p99_ms", "tx", "txretries", "txerrs", "waitresp_msg_cnt", "xmit_msgq_cnt", "msg_cnt", "msg_size",
           "replyq")


def got(t, snapshot: int | None = None) -> list[tuple]:
    return [tuple(r[c] for c in COLUMNS) for r in t.to_pylist() if snapshot is None or r["snapshot"] == snapshot]


def read(name: str):
    lines = (STATS / name).read_bytes().decode().split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines, *parse_lines(lines)


# file -> (source objects, in order; its form; lines counted not_statistics)
WHOLE = {
    "real.jsonl": (list(range(9)), "json", 0),
    "pretty.txt": ([0, 1, 2], "pretty", 0),
    "concatenated.txt": ([0, 1, 2, 3, 4], None, 0),
    "prefixed.txt": ([0, 1, 2], "prefixed", 1),
    "escaped.txt": ([0, 1, 2], "prefixed+escaped", 0),
    "python_repr.txt": ([0, 1, 2], "python_repr", 0),
    "python2_repr.txt": ([0, 1], "python_repr", 0),
    "wrapped80.txt": ([0, 1, 2], "wrapped", 0),
    "rust_debug.txt": ([0, 1], "prefixed+rust_debug", 0),
    "editor_break.txt": ([0], "prefixed+wrapped", 0),
    "quoted.md": ([3], "pretty", 0),
    "sorted_elided.txt": ([3], "pretty", 0),
}


@pytest.mark.parametrize("name", list(WHOLE))
def test_whole_snapshots_give_the_source_figures(name):
    sources, form, other = WHOLE[name]
    lines, t, c = read(name)
    assert sorted(set(t["snapshot"].to_pylist())) == list(range(1, len(sources) + 1))
    for k, i in enumerate(sources, 1):
        assert got(t, k) == expected(REAL[i]), (name, k)
    assert not any(t["cut"].to_pylist())
    if form is not None:
        assert set(t["form"].to_pylist()) == {form}
    # Every line counted: the statistics' lines parsed, the rest said.
    assert c.lines == len(lines) and c.parsed + c.skipped_total == c.lines
    assert c.skipped.get("not_statistics", 0) == other and "cut" not in c.skipped
    assert looks_like(lines) >= 0.7


def test_concatenated_objects_are_told_apart():
    _, t, c = read("concatenated.txt")
    forms = [r["form"] for r in t.to_pylist()]
    assert forms == ["json", "concatenated", "concatenated", "json", "concatenated"]
    assert c.parsed == 2


def test_an_object_cut_at_its_end_keeps_what_was_whole():
    lines, t, c = read("cut_end.txt")
    rows = t.to_pylist()
    cut = [r for r in rows if r["cut"]]
    whole = [r for r in rows if not r["cut"]]
    assert got(t, 2) == expected(REAL[1]) and [r["snapshot"] for r in whole] == [2]
    # The first object was cut inside its broker's "req" counts (three fifths
    # in): its client figures and every broker window before that are whole.
    assert len(cut) == 1 and cut[0]["snapshot"] == 1
    assert got(t, 1) == expected(REAL[0])
    assert c.skipped == {"cut": 1} and c.parsed == 1


def test_an_object_cut_at_its_start_keeps_its_broker_windows():
    lines, t, c = read("cut_start.txt")
    (row,) = t.to_pylist()
    src = REAL[2]
    (name, b), = src["brokers"].items()
    # Its start, with the client's name and time, is gone; the broker's
    # name too (cut off with the "brokers" key above it): its figures stay.
    assert row["cut"] and row["ts_us"] is None and row["client"] is None
    assert row["rtt_p50_ms"] == b["rtt"]["p50"] / 1000 and row["int_latency_p99_ms"] == b["int_latency"]["p99"] / 1000
    # The cut fell after "tx", before "connects".
    assert row["tx"] is None and row["connects"] == b["connects"] and row["disconnects"] == b["disconnects"]
    assert c.skipped == {"cut": 1} and c.parsed == 0


def test_v0_9_windows_in_whole_milliseconds_are_read_as_they_stand():
    """A Windows build of 0.9 gave windows of a millisecond clock: a 0 min
    is a real 0, not a missing value."""
    lines, t, c = read("v0_9_windows.txt")
    (a,) = t.to_pylist()
    assert a["broker"] == "kafka-1.example:9092/1" and a["int_latency_avg_ms"] == 507.0
    assert a["int_latency_max_ms"] == 1016.0 and a["rtt_avg_ms"] == 9.0 and a["rtt_min_ms"] == 0.0
    assert a["throttle_avg_ms"] == 0.0 and a["rtt_p50_ms"] is None and a["msg_cnt"] == 9400
    assert c.parsed == 1 and c.skipped_total == 0


def test_v0_8_objects_fill_avg_and_leave_percentiles_null():
    lines, t, c = read("v0_8.txt")
    rows = t.to_pylist()
    assert [r["broker"] for r in rows] == ["broker-a:9092/1", "broker-b:9092/2"]
    a = rows[0]
    assert a["rtt_avg_ms"] == 6.25 and a["rtt_max_ms"] == 48.0 and a["rtt_min_ms"] == 2.1 and a["rtt_cnt"] == 30
    assert a["rtt_p50_ms"] is None and a["rtt_p99_ms"] is None and a["int_latency_avg_ms"] is None
    assert a["throttle_avg_ms"] is None and a["txretries"] == 4 and a["req_timeouts"] == 1
    assert a["msg_cnt"] == 1200 and a["replyq"] == 3 and a["ts_us"] == 1420070400 * 1_000_000
    assert c.parsed == 1 and c.skipped_total == 0 and looks_like(lines) == 1.0


def test_a_real_log_and_other_json_are_not_statistics():
    lines = (FIXTURES / "captures" / "nagle_on" / "rdkafka.log").read_text().splitlines()[:200]
    assert looks_like(lines) == 0.0
    t, c = parse_lines(['{"ts": 1, "event": "sample", "rtt_us": 5}', "plain words", "{", "}"])
    assert t.num_rows == 0 and c.skipped == {"not_statistics": 4}


def expected_topics(o: dict) -> list[tuple]:
    out = []
    for name, t in o["topics"].items():
        parts = t["partitions"].values()
        out.append((name, *(float(t["batchsize"][p]) for p in ("avg", "p50", "p99", "max")),
                    *(float(t["batchcnt"][p]) for p in ("avg", "p50", "p99", "max")), t["batchsize"]["cnt"],
                    sum(p["partition"] != -1 for p in parts), sum(p["msgq_cnt"] for p in parts),
                    sum(p["xmit_msgq_cnt"] for p in parts), sum(p["txmsgs"] for p in parts)))
    return out


TOPIC_COLUMNS = ("topic", "batchsize_avg", "batchsize_p50", "batchsize_p99", "batchsize_max", "batchcnt_avg",
                 "batchcnt_p50", "batchcnt_p99", "batchcnt_max", "batches", "partitions", "msgq_cnt", "xmit_msgq_cnt",
                 "txmsgs")


@pytest.mark.parametrize("name", ["real.jsonl", "python_repr.txt", "wrapped80.txt", "pretty.txt", "rust_debug.txt"])
def test_topics_give_the_source_batch_windows(name):
    from kdiag.parsers.stats import parse_all

    sources = WHOLE[name][0]
    tables, _ = parse_all((STATS / name).read_text().splitlines())
    rows = tables["stats_topics"].to_pylist()
    for k, i in enumerate(sources, 1):
        mine = [r for r in rows if r["snapshot"] == k]
        assert [tuple(r[c] for c in TOPIC_COLUMNS) for r in mine] == expected_topics(REAL[i])
        assert all(r["ts_us"] == REAL[i]["time"] * 1_000_000 and r["client"] == REAL[i]["name"] for r in mine)


def test_a_topics_fragment_alone_gives_its_topics():
    from kdiag.parsers.stats import parse_all

    lines = (STATS / "topics_fragment.txt").read_text().splitlines()
    tables, c = parse_all(lines)
    rows = tables["stats_topics"].to_pylist()
    assert [tuple(r[c] for c in TOPIC_COLUMNS) for r in rows] == expected_topics(REAL[5])
    assert all(r["cut"] and r["client"] is None for r in rows) and tables["stats"].num_rows == 0
    assert c.skipped == {"cut": len(lines)} and looks_like(lines) == 1.0


def test_v0_8_partition_counters_are_summed_per_topic():
    from kdiag.parsers.stats import parse_all

    tables, _ = parse_all((STATS / "v0_8.txt").read_text().splitlines())
    (row,) = tables["stats_topics"].to_pylist()
    assert row["topic"] == "events" and row["partitions"] == 2 and row["msgq_cnt"] == 1180
    assert row["xmit_msgq_cnt"] == 20 and row["batchsize_avg"] is None and row["batches"] is None


def test_partitions_alone_give_a_topic_of_unknown_name():
    from kdiag.parsers.stats import parse_all

    # A paste that starts inside a topic's "partitions" and is cut there.
    src = REAL[4]["topics"]["kdiag-probe"]["partitions"]
    text = json.dumps(src)
    lines = [text[text.index('"partition":'):], "", "..."]
    tables, c = parse_all(lines)
    (row,) = tables["stats_topics"].to_pylist()
    assert row["topic"] is None and row["cut"] and row["partitions"] == 1
    assert row["txmsgs"] == sum(p["txmsgs"] for p in src.values())
    assert c.skipped == {"cut": 1, "empty": 1, "not_statistics": 1}


@pytest.mark.parametrize("name", ["pretty.txt", "wrapped80.txt", "cut_end.txt", "editor_break.txt"])
def test_chunks_cut_anywhere_give_the_same_rows(name):
    """The file reaches the parser in chunks of lines: an object open at a
    chunk's end goes on in the next."""
    from kdiag.parsers.stats import StatsParser, parse_all

    lines = (STATS / name).read_text().splitlines()
    whole, counts = parse_all(lines)
    for cut in (1, len(lines) // 3, len(lines) - 1):
        p = StatsParser()
        parts = [p.feed(lines[:cut], 1), p.feed(lines[cut:], cut + 1), p.finish()]
        assert [r for t in parts for r in t["stats"].to_pylist()] == whole["stats"].to_pylist()
        assert p.counts.to_dict() == counts.to_dict()


HOSTILE = {
    "braces": lambda n: ["{" * n],
    "nested": lambda n: ['{"a":' * n],
    "keys": lambda n: ['"a": ' * n],
    "open string": lambda n: ['{"a": "' + "x" * n, "y" * n],
    "escapes": lambda n: ["{'a': u'" + "\\'" * n],
    "backslashes": lambda n: ["\\" * n + "{"],
    "pretty lines": lambda n: ["{"] + ['  "a": 1,'] * (n // 10) + ["  "],
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_input_costs_its_length(name):
    """Each shape at two sizes, ten times apart: ten times the time at most
    (with room for a noisy machine), never a crash, every line counted."""
    import time

    def took(n):
        lines = HOSTILE[name](n)
        t0 = time.perf_counter()
        t, c = parse_lines(lines)
        assert c.lines == len(lines) and c.parsed + c.skipped_total == c.lines and t.num_rows == 0
        return time.perf_counter() - t0

    small = min(took(4_000) for _ in range(3))
    # Each size's best of three: one run on a busy host measures the host.
    assert min(took(40_000) for _ in range(3)) < 10 * max(small, 2e-3) * 3


def _bare(window: str, after: str) -> str:
    """A paste that starts at a broker window whose key was cut off, in the
    old emitter's spacing, then the rest of that broker and the next one."""
    return (window + ', "' + after + '": { "min":1000, "max":31000, "avg":7000, "sum":350000, "cnt":50 }, '
            '"throttle": { "min":0, "max":0, "avg":0, "sum":0, "cnt":50 }, "toppars":{ "orders-3": { '
            '"topic":"orders", "partition":3} } } , "k2.example:9092/2": { "name":"k2.example:9092/2", "nodeid":2, '
            '"state":"UP", "stateage":120000000, "outbuf_cnt":0, "outbuf_msg_cnt":0, "waitresp_cnt":0, '
            '"waitresp_msg_cnt":0, "tx":810, "txbytes":250000, "txerrs":0, "txretries":')


def _cut_broker(text: str) -> dict:
    """The row of the broker whose start was cut off (no name read)."""
    rows = [r for r in parse_lines([text])[0].to_pylist() if r["broker"] is None]
    assert len(rows) == 1, rows
    return rows[0]


def test_a_leading_window_whose_key_was_cut_off_is_named_by_the_key_after_it():
    """Before v0.11.5 a broker's windows are int_latency, rtt, throttle (of
    min..cnt only); from it int_latency, outbuf_latency, rtt, with the
    percentiles: the window before "rtt" is int_latency in the first era and
    outbuf_latency in the second. Before anything else it stays unnamed."""
    old = '{ "min":12000, "max":880000, "avg":412000, "sum":20600000, "cnt":50 }'
    first = _cut_broker(_bare(old, "rtt"))
    assert first["int_latency_avg_ms"] == 412.0 and first["rtt_avg_ms"] == 7.0, first
    assert first["outbuf_latency_avg_ms"] is None and first["form"].endswith("+key_by_position"), first
    new = ('{ "min":100, "max":900, "avg":400, "sum":20000, "stddev":80, "p50":390, "p75":500, "p90":700, '
           '"p95":800, "p99":880, "p99_99":900, "outofrange":0, "hdrsize":11376, "cnt":50 }')
    row = _cut_broker(_bare(new, "rtt"))
    assert row["outbuf_latency_p50_ms"] == 0.39 and row["int_latency_avg_ms"] is None, row
    row = _cut_broker(_bare(new, "outbuf_latency"))
    assert row["int_latency_p50_ms"] == 0.39 and row["outbuf_latency_avg_ms"] == 7.0, row
    # Not a window, or a gap other than a comma: nothing named, nothing lost.
    for text in (_bare('{ "topic":"orders", "partition":3 }', "rtt"), _bare(old, "rtt").replace("}, ", "} x ", 1)):
        row = _cut_broker(text)
        assert row["int_latency_avg_ms"] is None and "key_by_position" not in row["form"], row
        assert row["rtt_avg_ms"] == 7.0
