"""What librdkafka's statistics say by themselves, summed on the driver:
the windows (rtt, int_latency, outbuf_latency, throttle) and counters
(req_timeouts, txretries, tx, msg_cnt) of the brokers that carried
requests, snapshot by snapshot, and the per-topic batch windows.

The table ``stats`` has a row per broker per snapshot; a snapshot is
``snapshot`` (its ordinal) where the parser gives it, else its ``time``.
The bootstrap handles and the internal broker (nodeid -1, or a state other
than UP) carry no Produce request, and a broker whose rtt window is empty
answered none in that interval: both are left out of the windows. Columns
the parser adds for newer field sets (``rtt_cnt``, ``msg_cnt``, ...) are
used when present; a table without them (0.8-era objects have ``rtt.avg``
only) is read from what it has.

One Spark job groups the rows per snapshot and one per broker; what comes
back is a row per snapshot (a statistics object a second for a day is
86,400 small rows) and a row per broker, and the series kept in the
findings is thinned to ``SERIES_MAX`` points.
"""
from __future__ import annotations

from kdiag.analysis.spark_plumbing import any_rows, pctl, rounded

# Points of the per-snapshot series kept in the findings: the first, the
# last, the worst and an even sample between.
SERIES_MAX = 60


def _has(df, name: str) -> bool:
    return name in df.columns


def _window(df, w: str, p: str):
    """A window's percentile, else its average (0.8-era objects have
    ``avg`` only); null where the window is empty (``cnt`` 0, else every
    figure 0: librdkafka resets an empty window to zeros)."""
    from pyspark.sql import functions as F

    val = F.coalesce(F.col(f"{w}_{p}_ms"), F.col(f"{w}_avg_ms")) if p != "avg" else F.col(f"{w}_avg_ms")
    if _has(df, f"{w}_cnt"):
        empty = F.coalesce(F.col(f"{w}_cnt"), F.lit(1)) <= 0
    else:
        empty = (F.coalesce(F.col(f"{w}_avg_ms"), F.lit(0.0)) <= 0) & \
            (F.coalesce(F.col(f"{w}_p99_ms"), F.lit(0.0)) <= 0)
    return F.when(~empty, val)


def carrying(stats):
    """The rows of brokers that can carry a Produce request: UP, not a
    bootstrap handle nor the internal broker."""
    from pyspark.sql import functions as F

    up = F.coalesce(F.upper(F.col("state")), F.lit("UP")) == "UP"
    real = F.coalesce(F.col("nodeid"), F.lit(0)) >= 0
    return stats.filter(up & real)


def stats_summary(stats, topics=None, perf=None) -> dict | None:
    """The statistics' evidence: None when the table has no row."""
    out = _stats_summary(stats, topics)
    if out is not None and perf is not None:
        out.update(perf_summary(perf))
    return out


def perf_summary(perf) -> dict:
    """rdkafka_performance's rows (its producer's): the most messages not
    yet delivered (outq), produce() calls refused with the queue full
    (tx_err, the backpressure lines' count), the produce calls and messages
    they are out of, and the rtt column's first and last measurements."""
    from pyspark.sql import functions as F

    prod = perf.filter(F.coalesce(F.col("mode"), F.lit("producer")) != "consumer")
    got = prod.agg(F.count("*").alias("n"), F.max("outq").alias("outq"), F.max("tx_err").alias("tx_err"),
                   F.max("msgs").alias("msgs"), F.max("produce_calls").alias("calls"),
                   F.min_by("rtt_ms", F.when(F.col("rtt_ms") > 0, F.col("line_no"))).alias("rtt_first"),
                   F.max_by("rtt_ms", F.when(F.col("rtt_ms") > 0, F.col("line_no"))).alias("rtt_last"),
                   F.count(F.when(F.col("rtt_ms") > 0, 1)).alias("rtt_rows")).first()
    if not got or not got.n:
        return {}
    return {"perf_rows": got.n, "perf_outq_max": got.outq, "perf_tx_err": got.tx_err, "perf_msgs": got.msgs,
            "perf_produce_calls": got.calls, "perf_rtt_rows": got.rtt_rows,
            "perf_rtt_first_ms": got.rtt_first, "perf_rtt_last_ms": got.rtt_last}


def _stats_summary(stats, topics) -> dict | None:
    from pyspark.sql import functions as F

    # Here, not at the top: the report's text imports this module for
    # series_lines, and a warm replay's client must not import the parsers
    # (pyarrow, numpy and pandas with them).
    from kdiag.parsers.stats import KEY_BY_POSITION

    # Rows or none, in the driver where they are rows in the plan; their
    # count comes with the client's counts below, in the same job.
    if not any_rows(stats):
        return _topics_alone(topics)
    key = "snapshot" if _has(stats, "snapshot") else "ts_us"
    brokers_df = carrying(stats)
    opt = lambda c, f=F.max: (f(c) if _has(stats, c) else F.lit(None)).alias(c)  # noqa: E731
    per_snap = (brokers_df.groupBy(F.col(key).alias("k")).agg(
        F.min("ts_us").alias("ts_us"),
        F.max(_window(stats, "rtt", "p50")).alias("rtt_p50_ms"),
        F.max(_window(stats, "rtt", "p99")).alias("rtt_p99_ms"),
        F.max(_window(stats, "int_latency", "p50")).alias("int_latency_p50_ms"),
        F.max(_window(stats, "int_latency", "p99")).alias("int_latency_p99_ms"),
        F.max(_window(stats, "outbuf_latency", "p50")).alias("outbuf_latency_p50_ms"),
        F.max("throttle_avg_ms").alias("throttle_avg_ms"),
        F.max("throttle_max_ms").alias("throttle_max_ms"),
        opt("xmit_msgq_cnt", F.sum),
        # Rows with a window whose key was cut off, named by its place (parsers.stats).
        (F.count(F.when(F.col("form").contains(KEY_BY_POSITION), 1)) if _has(stats, "form") else F.lit(0))
        .alias("named_by_position"),
        F.count(_window(stats, "rtt", "avg")).alias("answering")).orderBy("k").collect())
    per_snap, rows_all = _with_client_counts(stats, key, [r.asDict() for r in per_snap], opt)
    counters = [c for c in ("tx", "txretries", "req_timeouts", "txerrs") if _has(stats, c)]
    per_broker = brokers_df.groupBy("client", "broker").agg(
        *[x for c in counters for x in (F.max(c).alias(f"{c}_max"), F.min(c).alias(f"{c}_min"))]).collect()
    out = {"rows": rows_all, "snapshots": len(per_snap), "brokers": len(per_broker),
           "windows_named_by_position": sum(r.get("named_by_position") or 0 for r in per_snap)}
    if not per_snap:
        return out
    series = [_point(key, r) for r in per_snap]
    pick = lambda f: [v for v in (p.get(f) for p in series) if v is not None]  # noqa: E731
    for f in ("rtt_p50_ms", "rtt_p99_ms", "int_latency_p50_ms", "int_latency_p99_ms", "outbuf_latency_p50_ms"):
        vals = pick(f)
        out[f] = rounded(pctl(vals, 0.5), 3) if vals else None
        out[f.replace("_ms", "_max_ms")] = rounded(max(vals), 3) if vals else None
    for f in ("throttle_avg_ms", "throttle_max_ms", "msg_cnt", "msg_max", "xmit_msgq_cnt"):
        vals = pick(f)
        out[f if f.startswith("throttle") else f"{f}_max"] = max(vals) if vals else None
    if out.get("throttle_avg_ms") is not None:
        out["throttled_snapshots"] = sum(1 for p in series if (p.get("throttle_max_ms") or 0) > 0)
    for c in counters:
        tops = [r[f"{c}_max"] for r in per_broker if r[f"{c}_max"] is not None]
        grew = [r[f"{c}_max"] - r[f"{c}_min"] for r in per_broker if r[f"{c}_max"] is not None]
        out[c] = sum(tops) if tops else None            # since the client started
        out[f"{c}_grew"] = sum(grew) if grew else None  # over the snapshots given
    out["series"] = thinned(series)
    out["series_of"] = len(series)
    if topics is not None:
        out.update(batch_windows(topics))
    return out


def _with_client_counts(stats, key: str, per_snap: list[dict], opt) -> tuple[list[dict], int]:
    """msg_cnt and msg_max are the client's, not a broker's: read from every
    row, so an object cut before its first broker that can carry a request
    (only the bootstrap handle left) still says how full the queue was.
    With the count of every row, from the same job."""
    from pyspark.sql import functions as F

    client = {r.k: r for r in stats.groupBy(F.col(key).alias("k")).agg(
        F.count("*").alias("n"), F.min("ts_us").alias("ts_us"), opt("msg_cnt"), opt("msg_max")).collect()}
    rows = sum(c.n for c in client.values())
    if not (_has(stats, "msg_cnt") or _has(stats, "msg_max")):
        return [{**r, "msg_cnt": None, "msg_max": None} for r in per_snap], rows
    empty = dict.fromkeys(("rtt_p50_ms", "rtt_p99_ms", "int_latency_p50_ms", "int_latency_p99_ms",
                           "outbuf_latency_p50_ms", "throttle_avg_ms", "throttle_max_ms", "xmit_msgq_cnt"))
    by_k = {r["k"]: r for r in per_snap}
    for k, c in client.items():
        by_k[k] = {**by_k.get(k, {**empty, "k": k, "ts_us": c.ts_us}), "msg_cnt": c.msg_cnt, "msg_max": c.msg_max}
    return [by_k[k] for k in sorted(by_k, key=lambda k: (k is None, k))], rows


def _point(key: str, r) -> dict:
    p = {"snapshot" if key == "snapshot" else "ts_us": r["k"]}
    if key == "snapshot":
        p["ts_us"] = r["ts_us"]
    for f in ("rtt_p50_ms", "rtt_p99_ms", "int_latency_p50_ms", "int_latency_p99_ms", "outbuf_latency_p50_ms",
              "throttle_avg_ms", "throttle_max_ms"):
        p[f] = rounded(r[f], 3)
    for f in ("msg_cnt", "msg_max", "xmit_msgq_cnt"):
        p[f] = r[f]
    return p


def thinned(series: list[dict]) -> list[dict]:
    """At most SERIES_MAX points: an even sample that keeps the first, the
    last and the snapshot of the worst queueing and the worst rtt."""
    n = len(series)
    if n <= SERIES_MAX:
        return series
    keep = {0, n - 1}
    for f in ("int_latency_p50_ms", "rtt_p50_ms"):
        worst = max(range(n), key=lambda i: series[i].get(f) or -1.0)
        keep.add(worst)
    step = n / (SERIES_MAX - len(keep))
    keep.update(int(i * step) for i in range(SERIES_MAX - len(keep)))
    return [series[i] for i in sorted(keep)]


def _topics_alone(topics) -> dict | None:
    """A paste of the "topics" part alone: its batch windows are all there is."""
    got = batch_windows(topics) if any_rows(topics) else {}
    return {"rows": 0, "snapshots": got["batch_windows"], "brokers": 0, **got} if got else None


def batch_windows(topics) -> dict:
    """The per-topic batch windows: messages per batch (``batchcnt``) and
    bytes per batch (``batchsize``), medians over the snapshots whose
    window is not empty."""
    from pyspark.sql import functions as F

    cols = [c for c in ("batchcnt_p50", "batchcnt_avg", "batchsize_p50", "batchsize_avg", "batchcnt_max")
            if c in topics.columns]
    if "batchcnt_p50" not in cols and "batchcnt_avg" not in cols:
        return {}
    cnt = F.coalesce(*[F.col(c) for c in ("batchcnt_p50", "batchcnt_avg") if c in cols])
    size = F.coalesce(*[F.col(c) for c in ("batchsize_p50", "batchsize_avg") if c in cols]) \
        if any(c.startswith("batchsize") for c in cols) else F.lit(None)
    got = topics.filter(cnt > 0).agg(
        F.count("*").alias("n"), F.percentile_approx(cnt, 0.5).alias("cnt"), F.percentile_approx(size, 0.5).alias("size"),
        (F.max("batchcnt_max") if "batchcnt_max" in cols else F.lit(None)).alias("cnt_max"),
        (F.sum("batches") if "batches" in topics.columns else F.lit(None)).alias("batches"),
        F.countDistinct("topic").alias("topics")).first()
    if not got or not got.n:
        return {}
    return {"batch_windows": got.n, "batch_topics": got.topics, "batch_msgs_p50": rounded(got.cnt, 3),
            "batch_bytes_p50": rounded(got.size, 1), "batch_msgs_max": got.cnt_max,
            "batch_count": got.batches}


def series_lines(st: dict, shown: int = 6) -> list[str]:
    """The series in a few lines: how queueing and rtt moved. It may come
    from a bundle anyone edited: what is not a number shows as "-"."""
    series = [p for p in st.get("series") or [] if isinstance(p, dict)] if isinstance(st.get("series"), list) else []
    if not series:
        return []
    n = len(series)
    idx = sorted({0, n - 1, *(round(i * (n - 1) / (shown - 1)) for i in range(shown))}) if n > shown else range(n)
    t0 = _number(series[0].get("ts_us"))
    out = []
    for i in idx:
        p = series[i]
        ts, snap = _number(p.get("ts_us")), _number(p.get("snapshot"))
        at = (f"#{snap:g}" if snap is not None else
              f"+{(ts - t0) / 1e6:.0f}s" if ts is not None and t0 is not None else f"{i + 1}")
        out.append(f"{at:>6}  rtt p50/p99 {_v(p.get('rtt_p50_ms'))}/{_v(p.get('rtt_p99_ms'))}  "
                   f"queue p50/p99 {_v(p.get('int_latency_p50_ms'))}/{_v(p.get('int_latency_p99_ms'))}  "
                   f"throttle {_v(p.get('throttle_avg_ms'))}  msgs {_v(p.get('msg_cnt'))}")
    return out


def _number(x):
    return x if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _v(x) -> str:
    x = _number(x)
    return "-" if x is None else f"{x:g}"
