"""An strace excerpt beside a librdkafka log it does not hold the lines of,
and what an excerpt's timestamps cannot say.

Users paste an strace excerpt and a librdkafka log that were often taken
in different runs. Then no logged request may be split by the syscalls of
another run: the requests are the log's, each with its own time, and the
syscalls give the producer's typical exchange (how many writes a request
left in, the last one's size, the time spent writing and reading), the one
thing two runs of the same producer and configuration share. Whether the
two are from one run is told by their clocks: an strace on the epoch
clock whose span meets the log's is the same run, whose librdkafka lines
strace's ``-s`` cut short (the default -s 32 keeps no ``Sent ...`` line).
"""
from __future__ import annotations

from kdiag.analysis.per_request import exchanges, prepare_syscalls
from kdiag.analysis.spark_plumbing import RUN, any_rows, frame, in_driver, one_run, quantile, rounded

# An epoch timestamp (-ttt, or a time of day dated from librdkafka's lines)
# is past this; -r sums and undated times of day are far below it.
EPOCH_US_MIN = 10**15
UNSPLIT = "no librdkafka Sent lines inside an strace capture"
COLUMNS = {"n_writes": "long", "send_ms": "double", "read_ms": "double", "wait_ms": "double",
           "written_bytes": "long", "last_write_bytes": "long", "n_writes_lower_bound": "boolean",
           "write_sizes": "array<long>"}


def timing_unknowns(syscalls) -> list[str]:
    """What the strace's timestamps leave unknown (``timing_said``). One
    small job when every call has both."""
    from pyspark.sql import functions as F

    if syscalls is None:
        return []
    calls = syscalls.filter(F.col("kind") == "syscall")
    if any_rows(calls.filter(F.col("ts_us").isNotNull() & F.col("dur_us").isNotNull())):
        return []
    row = calls.agg(*_timing_columns()).first()
    return timing_said(row.n, row.timed, row.durations, row.both)


def timing_by_run(syscalls) -> dict:
    """run -> ``timing_unknowns`` of its syscalls, in one job for every run
    of a fleet; a run without a call is not among them."""
    from pyspark.sql import functions as F

    calls = one_run(syscalls).filter(F.col("kind") == "syscall")
    return {r[RUN]: timing_said(r.n, r.timed, r.durations, r.both)
            for r in calls.groupBy(RUN).agg(*_timing_columns()).collect()}


def _timing_columns() -> list:
    from pyspark.sql import functions as F

    return [F.count("*").alias("n"), F.count("ts_us").alias("timed"), F.count("dur_us").alias("durations"),
            F.count(F.when(F.col("ts_us").isNotNull() & F.col("dur_us").isNotNull(), 1)).alias("both")]


def timing_said(n: int, timed: int, durations: int, both: int) -> list[str]:
    """Of ``n`` calls, ``timed`` with a timestamp, ``durations`` with one
    (-T) and ``both`` with both: all of the time unknown when none has a
    timestamp; the calls' durations without -T. Nothing when one call has
    both: the capture was made with them."""
    if both or not n:
        return []
    if not timed:
        return ["the strace lines have no timestamps (strace without -t, -tt, -ttt or -r): they show the calls' "
                "order, not their times, so no wait or send time comes from them; capture with "
                "strace -f -ttt -T -yy -s 256"]
    split = (f"only for the {durations} of {n} calls split into <unfinished ...> and <... resumed> lines"
             if durations else "for none of them")
    return [f"strace without -T: a call's duration is known {split}; a call lasted at most until its thread's "
            "next line, an upper bound"]


def typical_exchange(syscalls) -> dict | None:
    """The median exchange of the strace's own requests (a burst of socket
    writes, the wait, the read), inferred from its syscalls; None when it
    holds none."""
    from pyspark.sql import functions as F

    ex = exchanges(prepare_syscalls(syscalls))
    row = ex.agg(F.count("*").alias("k"), quantile("n_writes", 0.5).alias("n_writes"),
                 quantile("send_ms", 0.5).alias("send_ms"), quantile("wait_ms", 0.5).alias("wait_ms"),
                 quantile("read_ms", 0.5).alias("read_ms"), quantile("last_write_bytes", 0.5).alias("last"),
                 F.max(F.col("n_writes_lower_bound").cast("int")).alias("bound"),
                 F.min("send_start_us").alias("first_us"), F.max("recv_us").alias("last_us")).first()
    if not row.k:
        return None
    sizes = ex.filter(F.col("n_writes") == row.n_writes).select("write_sizes").limit(1).collect()
    return {"k": row.k, "n_writes": row.n_writes, "send_ms": row.send_ms, "wait_ms": row.wait_ms,
            "read_ms": row.read_ms, "last_write_bytes": row.last, "lower_bound": bool(row.bound),
            "write_sizes": sizes[0].write_sizes if sizes else None, "first_us": row.first_us,
            "last_us": row.last_us}


def same_run(typical: dict, reqs) -> bool | None:
    """Whether the strace and the log overlap in time; None when the
    strace's clock is not the epoch's (-r undated, no timestamps)."""
    from pyspark.sql import functions as F

    lo, hi = typical["first_us"], typical["last_us"]
    if lo is None or hi is None or lo < EPOCH_US_MIN:
        return None
    row = reqs.agg(F.min("send_us").alias("lo"), F.max("recv_us").alias("hi")).first()
    if row.lo is None or row.hi is None:
        return None
    return row.lo <= hi and lo <= row.hi


def split_by_typical(reqs, syscalls, unknowns: list[str]):
    """The log's requests, each split as the strace's typical exchange
    (see the module docstring), when the strace holds one; else as given.
    ``split_from`` says where the split came from."""
    from pyspark.sql import functions as F

    typical = typical_exchange(syscalls)
    if typical is None:
        return reqs
    same = same_run(typical, reqs)
    unknowns[:] = [u for u in unknowns if not u.startswith(UNSPLIT)]
    shape = (f"{typical['n_writes']:.0f}{' or more' if typical['lower_bound'] else ''} writes "
             f"(e.g. {typical['write_sizes']} bytes), then {rounded(typical['wait_ms'], 3)} ms waiting "
             f"(median of {typical['k']})")
    if same:
        unknowns.append(f"the strace holds no librdkafka Sent lines (strace -s cut them: use -s 256), so no logged "
                        f"request is matched to its own syscalls; each is split as the strace's typical exchange: "
                        f"{shape}")
    else:
        why = "their times do not overlap" if same is False else "the strace's times are not on the log's clock"
        unknowns.append(f"the strace excerpt and the librdkafka log are from different runs ({why}): no request is "
                        f"split by the syscalls of another run; each logged request keeps its own time and is split "
                        f"as the strace's typical exchange: {shape}")
    total = F.coalesce(F.col("total_ms"), F.col("rtt_ms"))
    read = F.lit(typical["read_ms"] or 0.0)
    values = {
        "n_writes": F.lit(typical["n_writes"]), "send_ms": F.lit(typical["send_ms"]), "read_ms": read,
        "wait_ms": F.greatest(total - F.lit(typical["send_ms"] or 0.0) - read, F.lit(0.0)),
        "written_bytes": F.lit(None), "last_write_bytes": F.lit(typical["last_write_bytes"]),
        "n_writes_lower_bound": F.lit(typical["lower_bound"]),
        "write_sizes": F.lit(None),
    }
    for name, value in values.items():
        reqs = reqs.withColumn(name, value.cast(COLUMNS[name]))
    if typical["write_sizes"] is not None:
        reqs = reqs.withColumn("write_sizes", F.array(*[F.lit(x).cast("long") for x in typical["write_sizes"]]))
    return reqs.withColumn("split_from", F.lit("same run, typical exchange" if same else "another run"))


# How many of the log's Sent lines are looked for first (log_of_another_run).
FEW_SENT = 1000


def log_of_another_run(log, log_writes, source: str | None) -> list[str]:
    """When the requests come from the strace's own librdkafka lines, a log
    given beside it none of whose Sent lines strace saw written is of
    another run: it is left out, and the findings say so."""
    from pyspark.sql import functions as F

    if source != "strace" or log is None or log_writes is None:
        return []
    key = [RUN, "broker", "corr_id", "ts_us"]
    log, log_writes = one_run(log), one_run(log_writes)
    sent = log.filter(F.col("event") == "send").select(*key)
    seen = log_writes.filter(F.col("event") == "send").select(RUN, "broker", "corr_id",
                                                               F.col("log_ts_us").alias("ts_us"))
    if in_driver(sent) and in_driver(seen):
        # Rows in the plan (a small input): compared here, where a join
        # would be a Spark job (1.3-1.5 s of a cold 100-request bundle's
        # analysis). A key with a null matches nothing, as in the join
        # (``in`` a Row asks for a field's name, hence the tuples).
        logged = sent.collect()
        mine = {k for k in map(tuple, seen.collect()) if None not in k}
        return [] if not logged or any(tuple(r) in mine for r in logged) else [_OTHER_RUN]
    # One Sent line seen is enough: the log's first few are looked for
    # first, by a broadcast join that stops at the first found; only when
    # none is seen are all of them. At 1e7 requests (10 M Sent lines each
    # side), 10.3 s for the join of the whole -> 1.7 s.
    few = sent.limit(FEW_SENT).collect()
    if not few:
        return []
    probe = frame(sent.sparkSession, few, sent.schema)
    if any_rows(seen.join(F.broadcast(probe), key, "left_semi")) or \
            (len(few) == FEW_SENT and any_rows(sent.join(seen, key, "left_semi"))):
        return []
    return [_OTHER_RUN]


_OTHER_RUN = ("the librdkafka log and the strace are from different runs (none of the log's Sent lines is among "
              "those the strace saw written): the requests are the strace's own, split by its syscalls; the log's "
              "are left out")
