"""What the samplers saw beside the requests: the socket's unsent bytes, the
threads' run-queue waits, the cgroup's CPU throttling and the broker's
throttle times, each joined to the requests it overlaps."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kdiag.analysis.spark_plumbing import RUN, one_run, pctl, read_table

# Thread samples are ~100 ms apart: interval-to-request joins use 1 s buckets.
SAMPLE_BUCKET_US = 1_000_000


def time_buckets(start, end, bucket_us: int):
    """One row per time bucket the span [start, end] touches: the join key
    of a range join by buckets (join on the bucket, then filter), never a
    cross product. A span's bucket count is what its row states: callers
    bound the span first (the rows' own times are outside input)."""
    from pyspark.sql import functions as F

    col = lambda c: F.col(c) if isinstance(c, str) else c  # noqa: E731
    return F.explode(F.sequence(F.floor(col(start) / bucket_us), F.floor(col(end) / bucket_us)))


def as_of(rows, points, part: list[str], at: str, **over):
    """``points`` with, for each name of ``over``, ``over[name](w)``: a
    Column over the window ``w`` of the rows of ``rows`` before each point
    (strictly earlier in ``at``, within its ``part``). One sort of both: a
    range join whose cost is the rows it is given, however far apart the
    times they state. Columns of one side are null on the other's rows."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    both = points.withColumn("_row", F.lit(1)).unionByName(rows.withColumn("_row", F.lit(2)),
                                                           allowMissingColumns=True)
    # At one time a point sorts before the rows: it sees only earlier ones.
    w = Window.partitionBy(*part).orderBy(at, "_row").rowsBetween(Window.unboundedPreceding, 0)
    for name, f in over.items():
        both = both.withColumn(name, f(w))
    return both.filter(F.col("_row") == 1).drop("_row")


@dataclass(frozen=True)
class RunSamples:
    """One run's samples as ``socket_held`` and ``cpu_starvation`` give
    them, summed in Spark for every run of a fleet at once
    (``kdiag.fleet.samples``) instead of read from a tables directory."""
    sockets: dict                # fd -> socket_held's dict (source "sampled")
    pasted: dict | None          # socket_held's dict of ss -ti rows without a time (source "ss")
    threads: dict | None         # {"wall_ms", "process_runq_ms", "per": {tid: thread dict}}
    cgroup: dict | None


def of(meta: dict):
    """Where a run's samples are: its RunSamples, else its tables directory."""
    return meta.get("samples") or meta.get("tables_dir")


def socket_held(tables_dir, fd) -> dict | None:
    """What the sampled socket showed: bytes not yet sent while a segment
    waits for its ACK is Nagle caught in the act (``ss``: notsent, unacked).
    Without samples of that fd, the user's pasted ``ss -ti`` listings (rows
    without a time) stand for the producer's sockets; ``source`` says
    which. ``tables_dir`` may be a RunSamples."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    if isinstance(tables_dir, RunSamples):
        return (tables_dir.sockets.get(fd) if fd is not None else None) or tables_dir.pasted
    path = Path(tables_dir) / "sockets.parquet" if tables_dir else None
    if path is None or not path.exists():
        return None
    t = pq.read_table(path, columns=["ts_us", "fd", "notsent_bytes", "unacked", "ato_ms"])
    source = "sampled"
    mine = t.filter(pc.fill_null(pc.equal(t["fd"], fd), False)) if fd is not None else t.slice(0, 0)
    if not len(mine):
        mine, source = t.filter(pc.is_null(t["ts_us"])), "ss"
    t = mine
    if not len(t):
        return None
    held = t.filter(pc.fill_null(pc.and_(pc.greater(t["notsent_bytes"], 0), pc.greater(t["unacked"], 0)), False))
    return {"samples": len(t), "held": len(held), "source": source,
            "notsent_bytes": pctl(held["notsent_bytes"].to_pylist(), 0.5) if len(held) else None,
            "ato_ms": pctl(t["ato_ms"].to_pylist(), 0.5)}


def cpu_starvation(tables_dir, tid) -> dict | None:
    """Run-level CPU facts from the thread and host samples (a few hundred
    rows a minute, read on the driver): the request thread's and the whole
    process's run-queue wait, and the cgroup's CFS throttling.
    ``tables_dir`` may be a RunSamples."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    if isinstance(tables_dir, RunSamples):
        th = tables_dir.threads
        if th is None:
            return None
        out = {"wall_ms": th["wall_ms"], "thread": th["per"].get(tid) if tid is not None else None,
               "process_runq_ms": th["process_runq_ms"]}
        if tables_dir.cgroup is not None:
            out["cgroup"] = tables_dir.cgroup
        return out
    if not tables_dir:
        return None
    path = Path(tables_dir) / "threads.parquet"
    if not path.exists():
        return None
    t = pq.read_table(path, columns=["ts_us", "tid", "name", "runq_wait_ms", "nonvoluntary_ctxt"])
    if not len(t):
        return None
    first, last = pc.min(t["ts_us"]).as_py(), pc.max(t["ts_us"]).as_py()
    out: dict = {"wall_ms": (last - first) / 1000.0, "thread": None}
    per: dict[int, list[dict]] = {}
    for r in t.to_pylist():
        per.setdefault(r["tid"], []).append(r)

    def delta(rows, col):
        vals = [r[col] for r in sorted(rows, key=lambda r: r["ts_us"]) if r[col] is not None]
        return vals[-1] - vals[0] if len(vals) >= 2 else None

    out["process_runq_ms"] = sum(d for rows in per.values() if (d := delta(rows, "runq_wait_ms")) is not None)
    if tid is not None and tid in per:
        rows = per[tid]
        out["thread"] = {"tid": tid, "name": rows[-1]["name"], "runq_ms": delta(rows, "runq_wait_ms"),
                         "nonvoluntary": delta(rows, "nonvoluntary_ctxt")}
    host = Path(tables_dir) / "host.parquet"
    if host.exists():
        h = pq.read_table(host)
        if "cpu_nr_periods" in h.column_names:
            h = h.filter(pc.is_valid(h["cpu_nr_periods"])).sort_by("ts_us").to_pylist()
            if len(h) >= 2:
                a, b = h[0], h[-1]
                out["cgroup"] = {
                    "quota_cores": b["cpu_quota_cores"], "period_ms": b["cpu_period_ms"],
                    "periods": b["cpu_nr_periods"] - a["cpu_nr_periods"],
                    "throttled": b["cpu_nr_throttled"] - a["cpu_nr_throttled"],
                    "throttled_ms": (b["cpu_throttled_ms"] or 0.0) - (a["cpu_throttled_ms"] or 0.0),
                }
    return out



def runq_of(spark, tables_dir, produce, threads=None):
    """Each request gets ``runq_ms``: how long its thread was runnable but
    waiting for a core while the request was out, from the sampler's
    schedstat counters (null without thread samples).

    The kernel credits a run-queue wait when it ends (sched_info_arrive), so
    a thread stalled while its response waited has the stall counted in the
    sample interval holding the request's end, not in the ones it spanned.
    Samples are ~100 ms apart: each interval that overlaps the request adds
    its run-queue wait, capped at the request's duration. That is an upper
    bound on the request's own run-queue wait. ``threads``: the table
    itself, when it is not read from ``tables_dir`` (a fleet's)."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    if threads is None and tables_dir:
        threads = read_table(spark, Path(tables_dir), "threads")
    if threads is None or "pid" not in produce.columns:
        return produce.withColumn("runq_ms", F.lit(None).cast("double"))
    threads, produce = one_run(threads), one_run(produce)
    w = Window.partitionBy(RUN, "pid", "tid").orderBy("ts_us")
    iv = (threads.filter(F.col("runq_wait_ms").isNotNull())
          .select(RUN, F.col("tid").cast("long").alias("tid"), F.col("ts_us").alias("iv_end"),
                  F.lag("ts_us").over(w).alias("iv_start"),
                  (F.col("runq_wait_ms") - F.lag("runq_wait_ms").over(w)).alias("iv_runq_ms"))
          .filter(F.col("iv_start").isNotNull() & (F.col("iv_runq_ms") > 0)))
    start = F.coalesce(F.col("send_start_us"), F.col("send_us")) if "send_start_us" in produce.columns \
        else F.col("send_us")
    keys = [RUN, "pid", "send_us", "recv_us"]
    # An interval overlaps a request [s, e] when it starts inside it, or
    # starts before s and ends after it. A thread's intervals follow one
    # another, so the first is a difference of running sums at e and at s,
    # and the second is at most the last interval begun before s: both
    # found by sorting the requests' two ends among the intervals, never by
    # spreading a span over buckets (two samples 10^9 s apart are two rows).
    rows = iv.select(RUN, "tid", F.col("iv_start").alias("_t"), "iv_runq_ms",
                     F.struct("iv_end", "iv_runq_ms").alias("_iv"))
    rq = (produce.filter(F.col("pid").isNotNull()).select(*keys, start.alias("_start"))
          .filter(F.col("_start").isNotNull() & F.col("recv_us").isNotNull()).distinct())
    ends = rq.select(*keys, "_start", F.col("pid").cast("long").alias("tid"),
                     F.explode(F.array(F.struct(F.lit(False).alias("end"), F.col("_start").alias("t")),
                                       F.struct(F.lit(True).alias("end"), F.col("recv_us").alias("t")))).alias("_e"))
    ends = ends.select("*", F.col("_e.end").alias("_end"), F.col("_e.t").alias("_t")).drop("_e")
    seen = as_of(rows, ends, [RUN, "tid"], "_t", _sum=lambda w: F.sum("iv_runq_ms").over(w),
                 _prev=lambda w: F.last("_iv", ignorenulls=True).over(w))
    got = F.coalesce(F.col("_sum"), F.lit(0.0))
    agg = seen.groupBy(*keys, "_start").agg(
        F.sum(F.when(F.col("_end"), got).otherwise(-got)).alias("_inside"),
        F.max(F.when(~F.col("_end") & (F.col("_prev.iv_end") > F.col("_start")),
                     F.col("_prev.iv_runq_ms"))).alias("_across"))
    # Requests alike but for where their send began are one row, as the
    # join below takes them.
    agg = agg.groupBy(*keys).agg(F.max(F.least(F.col("_inside") + F.coalesce(F.col("_across"), F.lit(0.0)),
                                               (F.col("recv_us") - F.col("_start")) / 1000.0)).alias("runq_ms"))
    return produce.join(agg, keys, "left").withColumn(
        "runq_ms", F.when(F.col("pid").isNotNull(), F.coalesce("runq_ms", F.lit(0.0))))


def throttle_of(stats, produce):
    """Each request gets ``throttle_ms``: the longest throttle time its
    broker reported in the statistics window that holds the response (null
    without statistics). librdkafka stamps statistics with whole epoch
    seconds, so a window runs from the previous emission to one second past
    its own."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    if stats is None or not {"client", "broker"} <= set(produce.columns):
        return produce.withColumn("throttle_ms", F.lit(None).cast("double"))
    stats, produce = one_run(stats), one_run(produce)
    w = Window.partitionBy(RUN, "client", "broker").orderBy("ts_us")
    win = (stats.filter(F.col("ts_us").isNotNull())
           .select(RUN, "client", "broker", "ts_us",
                   F.coalesce(F.lag("ts_us").over(w), F.col("ts_us") - SAMPLE_BUCKET_US).alias("w_start"),
                   (F.col("ts_us") + SAMPLE_BUCKET_US).alias("w_end"), "throttle_max_ms")
           .filter(F.col("throttle_max_ms") > 0))
    keys = [RUN, "client", "broker", "recv_us"]
    rb = produce.select(*keys).distinct()
    # A window holds the response when w_start < recv_us <= w_end. Its last
    # two seconds are joined by one-second buckets (three at most a window);
    # before that, a response can only be in the last window begun before
    # it, found by sorting the responses among the windows' starts. Two
    # statistics 10^9 s apart are then two rows, not 10^9 buckets.
    tail = (win.withColumn("s_bucket", time_buckets(F.greatest("w_start", F.col("ts_us") - SAMPLE_BUCKET_US), "w_end",
                                                  SAMPLE_BUCKET_US))
            .select(F.col(RUN).alias("s_run"), F.col("client").alias("s_client"), F.col("broker").alias("s_broker"),
                    "s_bucket", "w_start", "w_end", "throttle_max_ms"))
    near = (rb.withColumn("bucket", F.floor(F.col("recv_us") / SAMPLE_BUCKET_US))
            .join(F.broadcast(tail), (F.col(RUN) == F.col("s_run")) & (F.col("client") == F.col("s_client"))
                  & (F.col("broker") == F.col("s_broker")) & (F.col("bucket") == F.col("s_bucket")))
            .filter((F.col("recv_us") > F.col("w_start")) & (F.col("recv_us") <= F.col("w_end")))
            .select(*keys, "throttle_max_ms"))
    starts = win.select(RUN, "client", "broker", F.col("w_start").alias("recv_us"),
                        F.struct("w_end", "throttle_max_ms").alias("_w"))
    before = (as_of(starts, rb, [RUN, "client", "broker"], "recv_us",
                    _prev=lambda w: F.last("_w", ignorenulls=True).over(w))
              .filter(F.col("recv_us") <= F.col("_prev.w_end"))
              .select(*keys, F.col("_prev.throttle_max_ms").alias("throttle_max_ms")))
    hit = near.unionByName(before).groupBy(*keys).agg(F.max("throttle_max_ms").alias("throttle_ms"))
    return produce.join(hit, keys, "left")
