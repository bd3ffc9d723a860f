"""Every run's socket, thread and host samples summed in Spark, as
``analysis.samples.socket_held`` and ``cpu_starvation`` read them from one
run's tables on the driver: a RunSamples per run, from three jobs whatever
the number of runs."""
from __future__ import annotations

from kdiag.analysis.spark_plumbing import RUN


def _median(values):
    """``spark_plumbing.pctl(values, 0.5)`` in Spark: the sorted values' element at
    round(0.5 * (n - 1)), rounded half to even as Python's round."""
    from pyspark.sql import functions as F

    arr = F.sort_array(values)
    return F.try_element_at(arr, (F.bround((F.size(arr) - 1) * 0.5, 0) + 1).cast("int"))


def run_samples(t: dict, runs) -> dict:
    """run -> RunSamples, for the runs in ``runs``."""
    from kdiag.analysis.samples import RunSamples

    sockets, pasted = _sockets(t["sockets"])
    threads = _threads(t["threads"])
    cgroups = _cgroups(t["host"])
    return {b: RunSamples(sockets.get(b, {}), pasted.get(b), threads.get(b), cgroups.get(b)) for b in runs}


def _sockets(so) -> tuple[dict, dict]:
    from pyspark.sql import functions as F

    held = F.coalesce((F.col("notsent_bytes") > 0) & (F.col("unacked") > 0), F.lit(False))
    cols = [F.count("*").alias("samples"), F.count(F.when(held, 1)).alias("held"),
            _median(F.collect_list(F.when(held, F.col("notsent_bytes")))).alias("notsent_bytes"),
            _median(F.collect_list("ato_ms")).alias("ato_ms")]
    mine = so.filter(F.col("fd").isNotNull()).groupBy(RUN, "fd").agg(*cols).withColumn("src", F.lit("sampled"))
    ss = so.filter(F.col("ts_us").isNull()).groupBy(RUN).agg(*cols).withColumn("fd", F.lit(None).cast("int")) \
        .withColumn("src", F.lit("ss"))
    per_fd: dict = {}
    pasted: dict = {}
    for r in mine.unionByName(ss).collect():
        d = {"samples": r.samples, "held": r.held, "source": r.src,
             "notsent_bytes": r.notsent_bytes if r.held else None, "ato_ms": r.ato_ms}
        if r.src == "ss":
            pasted[r[RUN]] = d
        else:
            per_fd.setdefault(r[RUN], {})[r.fd] = d
    return per_fd, pasted


def _threads(th) -> dict:
    """Per run: the samples' wall time, and per thread its run-queue wait and
    involuntary switches over the samples (last minus first value seen)."""
    from pyspark.sql import functions as F

    def delta(col):
        seen = F.when(F.col(col).isNotNull(), F.col("ts_us"))
        return F.when(F.count(col) >= 2, F.max_by(col, seen) - F.min_by(col, seen))

    per = th.groupBy(RUN, "tid").agg(F.max_by("name", "ts_us").alias("name"), delta("runq_wait_ms").alias("runq"),
                                     delta("nonvoluntary_ctxt").alias("nonvoluntary"),
                                     F.min("ts_us").alias("first"), F.max("ts_us").alias("last"))
    out: dict = {}
    for r in per.collect():
        run = out.setdefault(r[RUN], {"first": r.first, "last": r.last, "process_runq_ms": 0, "per": {}})
        run["first"], run["last"] = min(run["first"], r.first), max(run["last"], r.last)
        if r.runq is not None:
            run["process_runq_ms"] += r.runq
        run["per"][r.tid] = {"tid": r.tid, "name": r.name, "runq_ms": r.runq, "nonvoluntary": r.nonvoluntary}
    for run in out.values():
        run["wall_ms"] = (run.pop("last") - run.pop("first")) / 1000.0
    return out


def _cgroups(host) -> dict:
    """Per run: the cgroup's CFS periods and throttling between the first
    and last host samples that carry them."""
    from pyspark.sql import functions as F

    if "cpu_nr_periods" not in host.columns:
        return {}
    cols = ["cpu_quota_cores", "cpu_period_ms", "cpu_nr_periods", "cpu_nr_throttled", "cpu_throttled_ms"]
    got = host.filter(F.col("cpu_nr_periods").isNotNull()).groupBy(RUN).agg(
        F.count("*").alias("n"), F.min_by(F.struct(*cols), "ts_us").alias("a"),
        F.max_by(F.struct(*cols), "ts_us").alias("b")).filter("n >= 2").collect()
    return {r[RUN]: {"quota_cores": r.b.cpu_quota_cores, "period_ms": r.b.cpu_period_ms,
                     "periods": r.b.cpu_nr_periods - r.a.cpu_nr_periods,
                     "throttled": r.b.cpu_nr_throttled - r.a.cpu_nr_throttled,
                     "throttled_ms": (r.b.cpu_throttled_ms or 0.0) - (r.a.cpu_throttled_ms or 0.0)} for r in got}
