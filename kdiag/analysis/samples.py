"""What the samplers saw beside the requests: the socket's unsent bytes, the
threads' run-queue waits, the cgroup's CPU throttling and the broker's
throttle times, each joined to the requests it overlaps."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kdiag.analysis.frames import RUN, one_run, pctl, read_table

# Thread samples are ~100 ms apart: interval-to-request joins use 1 s buckets.
SAMPLE_BUCKET_US = 1_000_000


def time_buckets(start: str, end: str, bucket_us: int):
    """One row per time bucket the span [start, end] touches: the join key
    of a range join by buckets (join on the bucket, then filter), never a
    cross product."""
    from pyspark.sql import functions as F

    return F.explode(F.sequence(F.floor(F.col(start) / bucket_us), F.floor(F.col(end) / bucket_us)))



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
          .select(F.col(RUN).alias("_iv_run"), F.col("tid").cast("long").alias("tid"), F.col("ts_us").alias("iv_end"),
                  F.lag("ts_us").over(w).alias("iv_start"),
                  (F.col("runq_wait_ms") - F.lag("runq_wait_ms").over(w)).alias("iv_runq_ms"))
          .filter(F.col("iv_start").isNotNull() & (F.col("iv_runq_ms") > 0)))
    iv = iv.withColumn("bucket", time_buckets("iv_start", "iv_end", SAMPLE_BUCKET_US))
    start = F.coalesce(F.col("send_start_us"), F.col("send_us")) if "send_start_us" in produce.columns \
        else F.col("send_us")
    keys = [RUN, "pid", "send_us", "recv_us"]
    rb = (produce.filter(F.col("pid").isNotNull()).select(*keys, start.alias("_start"))
          .withColumn("bucket", time_buckets("_start", "recv_us", SAMPLE_BUCKET_US)))
    over = (rb.join(iv, (F.col(RUN) == F.col("_iv_run")) & (F.col("pid").cast("long") == F.col("tid"))
                    & (rb.bucket == iv.bucket))
            .filter((F.col("iv_start") < F.col("recv_us")) & (F.col("iv_end") > F.col("_start")))
            .select(*keys, "iv_start", "iv_runq_ms", ((F.col("recv_us") - F.col("_start")) / 1000.0).alias("_dur"))
            .dropDuplicates([*keys, "iv_start"]))
    agg = over.groupBy(*keys).agg(F.least(F.sum("iv_runq_ms"), F.max("_dur")).alias("runq_ms"))
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
           .select(F.col(RUN).alias("s_run"), F.col("client").alias("s_client"), F.col("broker").alias("s_broker"),
                   F.coalesce(F.lag("ts_us").over(w), F.col("ts_us") - SAMPLE_BUCKET_US).alias("w_start"),
                   (F.col("ts_us") + SAMPLE_BUCKET_US).alias("w_end"), "throttle_max_ms")
           .filter(F.col("throttle_max_ms") > 0))
    win = win.withColumn("bucket", time_buckets("w_start", "w_end", SAMPLE_BUCKET_US))
    keys = [RUN, "client", "broker", "recv_us"]
    rb = produce.select(*keys).distinct().withColumn("bucket", F.floor(F.col("recv_us") / SAMPLE_BUCKET_US))
    hit = (rb.join(F.broadcast(win), (rb[RUN] == win.s_run) & (rb.client == win.s_client) & (rb.broker == win.s_broker)
                   & (rb.bucket == win.bucket))
           .filter((F.col("recv_us") > F.col("w_start")) & (F.col("recv_us") <= F.col("w_end")))
           .groupBy(*keys).agg(F.max("throttle_max_ms").alias("throttle_ms")))
    return produce.join(hit, keys, "left")

