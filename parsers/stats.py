"""librdkafka statistics JSON lines -> table ``stats``.

Input: one JSON object per line, as ``stats_cb`` delivers it every
``statistics.interval.ms`` (see librdkafka's STATISTICS.md). Each object
becomes one row per broker. Windowed figures are librdkafka's, in
microseconds, converted to milliseconds here (``_ms`` columns); the
``throttle`` window alone is in milliseconds already (librdkafka adds the
response's ThrottleTimeMs to it as is).

Statistics are a line a second at most, so a per-line ``json.loads`` is
cheap here; the high-volume parsers are vectorised.

==================  ========  ==============================================
column              type      meaning (null when absent)
==================  ========  ==============================================
line_no             int64     1-based line number
ts_us               int64     ``time`` (epoch seconds, whole) in microseconds
client              string    ``name`` (rdkafka#producer-1)
broker              string    broker handle name (ssl://h:p/id)
nodeid              int32     broker node id (-1 bootstrap)
state               string    UP, DOWN, ...
rtt_avg_ms          float64   ``rtt.avg``; likewise p50, p99
int_latency_*_ms    float64   produce() to in-flight: client-side queueing
outbuf_latency_*_ms float64   time in the output buffer before the send
throttle_avg_ms     float64   broker throttle time, ``throttle.avg``;
throttle_max_ms     float64   ``throttle.max``
tx, txretries       int64     requests sent, retried
req_timeouts        int64     requests timed out
waitresp_cnt        int64     requests in flight at the snapshot
outbuf_cnt          int64     requests waiting to be sent at the snapshot
connects            int64     connection attempts
disconnects         int64     disconnects
==================  ========  ==============================================
"""
from __future__ import annotations

import json
import math

import pyarrow as pa

from kdiag.parsers.base import ParseCounts, json_lines, scrub
from kdiag.parsers.format import BY_LINES, CHUNKS, CLIENT_QUEUE, TEXT_SCANNER, Format

_WINDOWS = ("rtt", "int_latency", "outbuf_latency")
_PCTS = ("avg", "p50", "p99")
_COUNTERS = ("tx", "txretries", "req_timeouts", "waitresp_cnt", "outbuf_cnt", "connects", "disconnects")

SCHEMA = pa.schema(
    [
        ("line_no", pa.int64()),
        ("ts_us", pa.int64()),
        ("client", pa.string()),
        ("broker", pa.string()),
        ("nodeid", pa.int32()),
        ("state", pa.string()),
        *[(f"{w}_{p}_ms", pa.float64()) for w in _WINDOWS for p in _PCTS],
        ("throttle_avg_ms", pa.float64()),
        ("throttle_max_ms", pa.float64()),
        *[(c, pa.int64()) for c in _COUNTERS],
    ]
)


# A time past 146,000 years either side of the epoch is no clock's: such a
# row keeps its figures but no time, so that the windows the analysis builds
# around a time (a second either side, the gap to the previous emission)
# stay within 64 bits instead of failing the whole analysis on overflow.
TS_LIMIT_US = 2**62


def _num(v):
    # NaN and Infinity parse as JSON numbers (Python's json writes them):
    # no measurement, and they would reach the findings as invalid JSON.
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _ms(win, key, per_ms=1000.0):
    v = _num(win.get(key)) if isinstance(win, dict) else None
    try:
        return None if v is None else v / per_ms
    except OverflowError:  # an integer past float range
        return None


def _int(v, lo=-(2**63), hi=2**63 - 1):
    v = _num(v)
    return int(v) if v is not None and lo <= v <= hi else None


class StatsParser:
    source = "stats"

    def __init__(self) -> None:
        self.counts = ParseCounts(self.source)

    def feed(self, lines: pa.Array, first_line_no: int = 1) -> pa.Table:
        rows: dict[str, list] = {f.name: [] for f in SCHEMA}
        for no, text, obj in json_lines(lines, self.counts, first_line_no):
            brokers = obj.get("brokers") if isinstance(obj, dict) else None
            if not isinstance(brokers, dict):
                self.counts.reject(no, "not_statistics", text)
                continue
            self.counts.parsed += 1
            t = _num(obj.get("time"))
            for name, b in brokers.items():
                if not isinstance(b, dict):
                    continue
                rows["line_no"].append(no)
                rows["ts_us"].append(None if t is None else _int(t * 1_000_000, -TS_LIMIT_US, TS_LIMIT_US))
                rows["client"].append(str(obj.get("name")) if obj.get("name") is not None else None)
                rows["broker"].append(str(name))
                rows["nodeid"].append(_int(b.get("nodeid"), -(2**31), 2**31 - 1))
                rows["state"].append(b.get("state") if isinstance(b.get("state"), str) else None)
                for w in _WINDOWS:
                    for p in _PCTS:
                        rows[f"{w}_{p}_ms"].append(_ms(b.get(w), p))
                rows["throttle_avg_ms"].append(_ms(b.get("throttle"), "avg", 1.0))
                rows["throttle_max_ms"].append(_ms(b.get("throttle"), "max", 1.0))
                for c in _COUNTERS:
                    rows[c].append(_int(b.get(c)))
        try:
            return pa.table(rows, schema=SCHEMA)
        except UnicodeEncodeError:
            return pa.table(scrub(rows), schema=SCHEMA)

    def finish(self) -> pa.Table:
        return SCHEMA.empty_table()


def parse_lines(lines, first_line_no: int = 1) -> tuple[pa.Table, ParseCounts]:
    p = StatsParser()
    arr = lines if isinstance(lines, pa.Array) else pa.array(lines, pa.string())
    return pa.concat_tables([p.feed(arr, first_line_no), p.finish()]), p.counts


def looks_like(sample: list[str]) -> float:
    lines = [s for s in sample if s.strip()]
    if not lines:
        return 0.0
    hits = 0
    for s in lines:
        if s.lstrip().startswith("{") and '"brokers"' in s:
            try:
                obj = json.loads(s)
            except (ValueError, RecursionError):
                continue
            hits += isinstance(obj, dict) and isinstance(obj.get("brokers"), dict)
    return hits / len(lines)


FORMATS = (
    Format(name="stats", recognised_by=BY_LINES, recognise=looks_like, tables={"stats": SCHEMA},
           schema_version=1, reads=CHUNKS, parser=StatsParser,
           title="librdkafka statistics", pseudonymised=TEXT_SCANNER, feeds={"stats": (CLIENT_QUEUE,)}, bundle_dir="stats"),
)
