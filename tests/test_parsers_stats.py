from conftest import CAPTURES
from kdiag.parsers.stats import looks_like, parse_lines


def test_real_statistics():
    lines = (CAPTURES / "nagle_on" / "stats.jsonl").read_text().splitlines()
    t, c = parse_lines(lines)
    assert c.parsed == len(lines) >= 1 and c.skipped_total == 0
    rows = [r for r in t.to_pylist() if r["nodeid"] not in (-1, None) and r["rtt_p50_ms"]]
    assert rows, "a broker with rtt windows"
    # librdkafka's own rtt window agrees with the stall: ~43 ms
    assert 35 < rows[-1]["rtt_p50_ms"] < 60
    assert looks_like(lines) == 1.0


def test_bad_statistics_lines():
    t, c = parse_lines(["", "{bad", "[]", '{"brokers": 3}', '{"name": "x", "brokers": {"b": {"rtt": {"p50": "NaN"}, "nodeid": 1e30}}}'])
    # Text that holds no statistics, JSON or not, is counted as such.
    assert c.lines == 5 and c.parsed == 1 and c.skipped == {"empty": 1, "not_statistics": 3}
    row = t.to_pylist()[0]
    assert row["rtt_p50_ms"] is None and row["nodeid"] is None


def test_throttle_window_is_in_milliseconds():
    """librdkafka keeps rtt in microseconds but adds ThrottleTimeMs to the
    throttle window as is: the real throttled capture reads ~104 ms."""
    lines = (CAPTURES / "throttled" / "stats.jsonl").read_text().splitlines()
    t, _ = parse_lines(lines)
    rows = [r for r in t.to_pylist() if r["throttle_max_ms"]]
    assert len(rows) >= 3 and 90 < sorted(r["throttle_max_ms"] for r in rows)[len(rows) // 2] < 120
    rtts = sorted(r["rtt_p50_ms"] for r in rows if r["rtt_p50_ms"])
    assert 90 < rtts[len(rtts) // 2] < 130
