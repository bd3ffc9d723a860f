"""The parse benchmark runs: its inputs are made, kdiag parse and the
reference both read them, and every figure is measured (not judged: the
figures of a small run say nothing about speed)."""
from __future__ import annotations

from bench import parse


def test_parse_bench_smoke(tmp_path):
    figs = parse.run(smoke=True, work=tmp_path)
    names = {f.name for f in figs}
    assert {"rdkafka_log lines/s", "strace lines/s", "rdkafka_log peak RSS", "strace peak RSS"} <= names
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
