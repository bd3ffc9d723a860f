"""The parse benchmark runs: its inputs are made, kdiag parse and the
reference both read them, and every figure is measured (not judged: the
figures of a small run say nothing about speed)."""
from __future__ import annotations

from bench import parse


def test_parse_bench_smoke(tmp_path, monkeypatch):
    # Two shapes, one of each kind and one of several files: the others
    # run the same code (their inputs are checked below).
    monkeypatch.setenv(parse.SHAPES_ENV, "rdkafka_log,strace_ff")
    figs = parse.run(smoke=True, work=tmp_path)
    names = {f.name for f in figs}
    assert {"rdkafka_log lines/s", "strace_ff lines/s", "rdkafka_log peak RSS", "strace_ff peak RSS"} <= names
    for f in figs:
        assert f.value is not None and f.value > 0, f
        assert f.command, f
    rates = [f for f in figs if f.unit == "lines/s"]
    assert all(f.ref_value and f.ref_value > 0 for f in rates)


def test_made_inputs_are_real_lines_that_parse(tmp_path):
    from kdiag.ingest.tables import parse_paths

    log, strace = tmp_path / "log.txt", tmp_path / "strace.txt"
    assert parse.make_log(log, 1000) == 1000
    assert parse.make_strace(strace, 5000) == 5000
    out = parse_paths([log, strace], tmp_path / "t")
    by_kind = {f["kind"]: f["counts"] for f in out.files}
    assert by_kind["rdkafka_log"]["parsed"] == 1000 and by_kind["rdkafka_log"]["skipped_total"] == 0
    assert by_kind["strace"]["lines"] == 5000
    # Time moves on: every repeat of the cycle gets later timestamps.
    events = out.read("rdkafka_events")
    ts = events["ts_us"].to_numpy()
    assert ts[-1] > ts[0]


def test_every_shape_is_lines_that_parse(tmp_path):
    from kdiag.ingest.tables import parse_paths

    for shape, make, _, _ in parse.SHAPES:
        inputs = make(tmp_path / f"{shape}.txt", 3000)
        out = parse_paths(inputs, tmp_path / f"{shape}.t")
        counts = [f["counts"] for f in out.files]
        assert sum(c["lines"] for c in counts) == 3000, shape
        assert all(c["skipped_total"] == 0 and c["parsed"] == c["lines"] for c in counts), (shape, counts)
        assert {f["kind"] for f in out.files} == {"rdkafka_log" if shape.startswith("rdkafka") else "strace"}


def test_async_log_has_requests_in_flight_on_every_broker(tmp_path):
    from kdiag.ingest.tables import parse_paths

    (log,) = parse.make_log_async(tmp_path / "async.txt", 5000)
    ev = parse_paths([log], tmp_path / "t").read("rdkafka_events").to_pandas()
    produce = ev.request == "Produce"
    sent, recv = ev[(ev.event == "send") & produce], ev[(ev.event == "recv") & produce]
    assert sent.broker.nunique() >= 3
    # Most requests have others sent between their Sent and Received lines.
    # (Copies of the cycle within a block of repeats share their ids: the first of each.)
    key = ["broker", "corr_id"]
    pairs = sent.drop_duplicates(key).merge(recv.drop_duplicates(key), on=key, suffixes=("_s", "_r"))
    between = [((sent.line_no > s) & (sent.line_no < r)).sum() for s, r in zip(pairs.line_no_s, pairs.line_no_r)]
    # (The last requests of a cycle drain: nothing sent after them.)
    assert len(pairs) > 100 and sorted(between)[len(between) // 2] >= parse.ASYNC_IN_FLIGHT
    assert {"produce", "msgset", "send", "recv"} <= set(ev.event)
    assert ev.facility.nunique() >= 10
