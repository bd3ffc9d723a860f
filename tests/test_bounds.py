"""Issue 38, a one-kilobyte input that crashed the analysis: the range joins
of the analysis cost what their rows are, never what the times in them
state, and the whole analysis, fuzzed with extreme numbers under a capped
heap, ends with a verdict or a one-line error."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time

from conftest import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

S = 1_000_000
T0 = 1_795_610_318 * S
# The attack's spans, and the ordinary ones around them.
GAPS_S = [1, 1, 2, 5, 60, 10**7, 10**9]


def _runs(draw, n_runs: int):
    """Per run (its id is its number): statistics (ts_us distinct within a
    broker, throttle) and response times, some of them in the long gaps."""
    stats, recvs = [], []
    for run in range(n_runs):
        for broker in ("b1", "b2"):
            t, times = T0, []
            for _ in range(draw(st.integers(1, 4))):
                t += draw(st.sampled_from(GAPS_S)) * S
                times.append(t)
                stats.append((str(run), "c", broker, t, draw(st.sampled_from([0.0, 0.0, 5.0, 50.0, 300.0]))))
            for _ in range(draw(st.integers(0, 5))):
                at = draw(st.sampled_from(times))
                off = draw(st.sampled_from([-10**9 * S // 2, -3 * S, -S - 1, -S, -S // 2, -1, 0, 1, S // 2, S,
                                            S + 1, 3 * S]))
                recvs.append((str(run), "c", broker, at + off))
    return stats, recvs


def _throttle_reference(stats, recvs) -> dict:
    """The join as it was specified: a window runs from the previous
    emission (or a second before the first) to a second past its own."""
    by = {}
    for run, c, b, ts, thr in stats:
        by.setdefault((run, c, b), []).append((ts, thr))
    windows = []
    for key, rows in by.items():
        rows.sort()
        for i, (ts, thr) in enumerate(rows):
            start = rows[i - 1][0] if i else ts - S
            if thr > 0:
                windows.append((key, start, ts + S, thr))
    out = {}
    for run, c, b, r in recvs:
        hit = [thr for key, lo, hi, thr in windows if key == (run, c, b) and lo < r <= hi]
        out[(run, c, b, r)] = max(hit) if hit else None
    return out


@settings(max_examples=3, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_throttle_join_holds_windows_10e9_seconds_long(spark, data):
    """Statistics 10^9 s apart are one window each, not 10^9 one-second
    buckets broadcast (which killed the JVM: a 1 KB input, exit 1 and a
    traceback); every response gets the throttle of the windows that hold
    it, as before."""
    from kdiag.analysis.samples import throttle_of

    stats, recvs = _runs(data.draw, 12)
    sdf = spark.createDataFrame(stats, "bundle_id string, client string, broker string, ts_us long, "
                                       "throttle_max_ms double")
    pdf = spark.createDataFrame(recvs or [("0", "c", "b1", T0)], "bundle_id string, client string, broker string, "
                                                                 "recv_us long")
    got = {(r.bundle_id, r.client, r.broker, r.recv_us): r.throttle_ms for r in throttle_of(sdf, pdf).collect()}
    assert got == _throttle_reference(stats, recvs or [("0", "c", "b1", T0)])


def _runq_reference(samples, reqs) -> dict:
    """Each request's run-queue wait as specified: every sample interval
    that overlaps it adds its wait, at most the request's duration."""
    ivs = []
    by = {}
    for run, tid, ts, runq in samples:
        by.setdefault((run, tid), []).append((ts, runq))
    for (run, tid), rows in by.items():
        rows.sort()
        for (a, ra), (b, rb) in zip(rows, rows[1:]):
            if rb - ra > 0:
                ivs.append((run, tid, a, b, rb - ra))
    out = {}
    for run, pid, s, e in reqs:
        total = sum(d for r, t, a, b, d in ivs if (r, t) == (run, pid) and a < e and b > s)
        out[(run, pid, s, e)] = min(total, (e - s) / 1000.0) if any(
            (r, t) == (run, pid) and a < e and b > s for r, t, a, b, d in ivs) else 0.0
    return out


@settings(max_examples=3, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_runq_join_holds_samples_and_requests_10e9_seconds_apart(spark, data):
    """Two thread samples 10^9 s apart are one interval, and a request
    whose Sent and Received lines are 10^9 s apart is one span: neither is
    spread over a bucket per second. The waits summed are those of the
    intervals that overlap each request, as before."""
    from kdiag.analysis.samples import runq_of

    draw = data.draw
    samples, reqs = [], []
    for run in range(10):
        t, runq, times = T0, 0.0, []
        for _ in range(draw(st.integers(2, 6))):
            t += draw(st.sampled_from([S // 10, S // 10, S // 10, 10**7 * S, 10**9 * S]))
            runq += draw(st.sampled_from([0.0, 1.0, 70.0]))
            times.append(t)
            samples.append((str(run), 7, t, runq))
        for _ in range(draw(st.integers(1, 4))):
            s = draw(st.sampled_from(times)) + draw(st.sampled_from([-S // 20, 0, S // 20]))
            e = s + draw(st.sampled_from([S // 50, S // 5, 10**9 * S]))
            reqs.append((str(run), 7, s, e))
    reqs = list(dict.fromkeys(reqs))
    threads = spark.createDataFrame([(r, 1, tid, ts, q) for r, tid, ts, q in samples],
                                    "bundle_id string, pid int, tid int, ts_us long, runq_wait_ms double")
    produce = spark.createDataFrame(reqs, "bundle_id string, pid int, send_us long, recv_us long")
    got = {(r.bundle_id, r.pid, r.send_us, r.recv_us): r.runq_ms
           for r in runq_of(spark, None, produce, threads=threads).collect()}
    want = _runq_reference(samples, reqs)
    assert got.keys() == want.keys()
    for k, v in want.items():
        assert abs(got[k] - v) < 1e-6, (k, got[k], v)


def test_fuzzed_analysis_under_a_capped_heap(tmp_path):
    """The attack bundle through replay and report, then generated
    statistics, logs, thread samples and manifests with extreme numbers
    through replay, in one child process whose JVM heap is 768 MB: each
    ends with a verdict or a one-line error, within a bound."""
    env = {**os.environ, "KDIAG_SPARK_MEMORY": "768m", "KDIAG_WARM": "0", "TMPDIR": str(tmp_path)}
    p = subprocess.run([sys.executable, "-m", "fuzz.analysis", "--examples", "6"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-4000:]
    assert re.search(r"^ok: the attack and \d+ generated examples", p.stdout, re.M), p.stdout


EXTREME = [0, -1, 1e-300, 1e300, -1e300, 1.7976931348623157e308, 2**63 - 1, -2**63, 10**400, 1e15, 10**9 * S]


def _page_findings(pairs) -> dict:
    cols = ["send_us", "total_ms", "send_ms", "wait_ms", "read_ms", "rtt_ms", "cause", "broker", "corr_id",
            "n_writes"]
    rows = [[T0 + i * 1000, 40.0 + i, 0.1, 40.0, 0.1, 40.0, "nagle_delayed_ack", "b", i, 3] for i in range(4)]
    rows += [[a, b, b, b, a, a, "healthy", "b", 9, 1] for a, b in pairs]
    return {"verdict": "nagle_delayed_ack", "findings": [], "summary": {"requests": len(rows)},
            "request_rows": {"columns": cols, "rows": rows, "slowest": [], "of": len(rows), "sampled": False}}


def test_charts_place_only_what_an_axis_can_span():
    """A page's charts of requests 10^9 s apart, latencies from 1e-300 to
    1e300 ms, integers past float range: each chart is drawn (or said to be
    empty) in bounded time and size, with no NaN or infinity among its
    coordinates; before, OverflowError and ValueError tracebacks."""
    import re

    from kdiag.report.html import render_html

    for a in EXTREME:
        pairs = [(a, b) for b in EXTREME]
        socks = [{"ts_us": x, "fd": 7, "remote": "10.0.0.1", "notsent_bytes": y} for x, y in pairs]
        began = time.monotonic()
        page = render_html(_page_findings(pairs), socks)
        assert time.monotonic() - began < 5 and len(page) < 1_000_000
        coords = re.findall(r'(?:x|y|x1|x2|y1|y2|cx|cy|width|height|points)="([^"]*)"', page)
        assert coords and not [c for c in coords if re.search(r"nan|inf", c, re.I)], a


def test_a_failed_spark_job_ends_replay_with_one_line(spark, monkeypatch):
    """Whatever Spark fails with under an input (a job's error, a JVM gone)
    ends the command with one line naming it, never a Python traceback
    with the JVM's stack or a note to set TMPDIR."""
    import io

    from pyspark.sql import functions as F

    from kdiag.analysis import pipeline
    from kdiag.cli import Environment, main

    def failing(*a, **k):
        spark.range(1).select(F.assert_true(F.lit(False), "no room for 10^9 buckets")).collect()

    monkeypatch.setattr(pipeline, "analyse", failing)
    out, err = io.StringIO(), io.StringIO()
    log = ROOT / "fixtures" / "captures" / "throttled" / "rdkafka.log"
    assert main(["replay", "--no-warm", str(log)], Environment(stdout=out, stderr=err)) == 1
    said = err.getvalue().splitlines()
    assert len(said) == 1 and said[0].startswith("kdiag: error: Spark could not analyse the input: "), said
    assert "no room for 10^9 buckets" in said[0] and "Traceback" not in err.getvalue()
    from kdiag.analysis.spark import failure

    assert failure(ValueError("not Spark's")) is None


# The JVM killed mid-analysis, in a process of its own: py4j's logger and
# PySpark's accumulator thread printed tracebacks of their own beside kdiag's line.
_JVM_KILLED = """
import os, signal, sys
from kdiag.analysis import pipeline, spark as ks
from kdiag.cli import main

def dying(*a, **k):
    from pyspark import SparkContext
    s = ks.session("kdiag", small=True)
    s.range(3).collect()
    os.kill(SparkContext._gateway.proc.pid, signal.SIGKILL)
    s.range(3).collect()

pipeline.analyse = dying
sys.exit(main(["replay", "--no-warm", sys.argv[1]]))
"""


def test_a_jvm_killed_mid_analysis_ends_replay_with_one_line_that_says_so(tmp_path):
    log = ROOT / "fixtures" / "captures" / "throttled" / "rdkafka.log"
    res = subprocess.run([sys.executable, "-c", _JVM_KILLED, str(log)], capture_output=True, text=True,
                         cwd=tmp_path, timeout=300, check=False)
    assert res.returncode == 1 and res.stdout == ""
    assert res.stderr.splitlines() == ["kdiag: error: Spark's JVM stopped during the analysis (out of memory, "
                                       "or killed)"], res.stderr


def test_a_statistics_time_no_clock_could_state_has_none():
    """``time`` 9223372036854 (its microseconds fit 63 bits, a second more
    does not) made the throttle window's end overflow, and Spark's ANSI
    arithmetic failed the whole analysis; such a row now keeps its figures
    without a time, and ordinary times are kept whole."""
    from kdiag.parsers.stats import parse_lines

    lines = ['{"name": "c", "time": %s, "brokers": {"b": {"throttle": {"max": 5}}}}' % t
             for t in (9223372036854, -9223372036854, 1e300, 1795610318, -1)]
    t, _ = parse_lines(lines)
    assert t["ts_us"].to_pylist() == [None, None, None, 1795610318 * S, -S]
    assert t["throttle_max_ms"].to_pylist() == [5.0] * 5
    from kdiag.parsers.stats import TS_LIMIT_US

    assert TS_LIMIT_US + 2 * S < 2**63
