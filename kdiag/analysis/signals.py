"""What librdkafka's lines say besides Sent/Received pairs, summed over the
run in one Spark job: requests that timed out in flight and the
disconnects they caused (with the average rtt librdkafka states), retries
and the errors behind them, how many messages each Produce request carried
and how many waited in the partition queue, and requests whose send phase
stalled (``Sent partial`` lines spread over time: the socket is not
drained). An excerpt of only such lines has no completed request, and is
judged from these alone (the run-level causes' ``from_signals``).
"""
from __future__ import annotations

import copy

from kdiag.analysis.spark_plumbing import RUN, one_run, quantile, rounded

DOWN_DETAIL = ("(?i)(^Connect to .* failed|Connection refused|Connection reset|Disconnected|Failed to resolve|"
               "No route to host|Network is unreachable|Host is unreachable|SSL handshake failed|"
               "transport failure|Connection setup timed out)")
# Errors named in the findings, most frequent first.
ERRORS_SHOWN = 5
_NO_STALLS = {"stalled_sends": 0, "send_stall_p50_ms": None, "send_stall_max_ms": None}


def signals(events) -> dict:
    """The run's signals from an rdkafka_events-shaped DataFrame (the log, or
    the lines written under strace); empty for None: ``signals_by_run`` of
    its one run."""
    if events is None:
        return {}
    got = signals_by_run(events)
    return next(iter(got.values())) if got else no_signals(events.sparkSession)


def signals_by_run(events) -> dict:
    """run -> its signals, in one job for every run of a fleet; a run
    without a row in ``events`` is not among them (see ``no_signals``)."""
    from pyspark.sql import functions as F

    events = one_run(events)
    rows = {r[RUN]: r.asDict() for r in events.groupBy(RUN).agg(*_columns()).collect()}
    stalled = _send_stalls(events.filter(F.col(RUN).isin(*[k for k, r in rows.items() if r["partial_sends"]]))) \
        if any(r["partial_sends"] for r in rows.values()) else {}
    for run, row in rows.items():
        row.pop(RUN)
        row.update(stalled.get(run, _NO_STALLS) if row["partial_sends"] else {})
        _finished(row)
    return rows


# What no_signals gives: the same for every run, so found once per process
# (a replay of an empty log, or a warm server's, runs no job for it).
_NOTHING: dict = {}


def no_signals(spark) -> dict:
    """The signals of a run without one line."""
    if not _NOTHING:
        empty = spark.createDataFrame([], "event string, request string, error string, count long, "
                                          "elapsed_ms double, rtt_ms double, detail string, msgs long, "
                                          "ts_us long, ts_resolution_us long")
        _NOTHING.update(_finished(empty.agg(*_columns()).first().asDict()))
    return copy.deepcopy(_NOTHING)


def _finished(row: dict) -> dict:
    row["timed_out"] = max(row["timed_out"] or 0, row["timeout_lines"] or 0, row["fail_timeouts"] or 0)
    for k in ("timeout_after_ms", "fail_avg_rtt_ms", "batch_msgs_p50"):
        row[k] = rounded(row[k], 3)
    return row


def _columns() -> list:
    from pyspark.sql import functions as F

    ev, produce = F.col("event"), F.col("request") == "Produce"
    # Only an error on a Produce request (its MSGSET line, its REQERR line)
    # holds messages back. Another request's (a bootstrap handle's
    # MetadataRequest failing as the handle is decommissioned: "Local: Broker
    # handle destroyed without termination") is counted apart.
    erred = F.col("error").isNotNull()
    # A delivery report's "Local: Message timed out" (an application's line,
    # no request named; .NET's Local_MessageTimedOut) is a produced message's.
    delivery_timeout = (ev == "app_error") & F.coalesce(F.col("error").rlike("(?i)message ?timed ?out"), F.lit(False))
    produce_error = erred & ((ev == "msgset") | F.coalesce(produce, F.lit(False)) | delivery_timeout)
    # FAIL lines that say a connection failed, by librdkafka's errstr
    # ("Connect to %s failed: %s", "Disconnected", "Failed to resolve",
    # "SSL handshake failed", errno texts). Not a handle decommissioned at
    # shutdown (_DESTROY) nor a request that timed out ("ApiVersionRequest
    # failed: Local: Timed out").
    down = (ev == "fail") & F.col("count").isNull() & F.coalesce(F.col("detail").rlike(DOWN_DETAIL), F.lit(False))
    return [
        F.count(F.when(ev == "timeout", 1)).alias("timeout_lines"),
        F.sum(F.when(ev == "timeouts", F.col("count"))).alias("timed_out"),
        quantile(F.when(ev == "timeout", F.col("elapsed_ms")), 0.5).alias("timeout_after_ms"),
        F.max(F.when(ev == "fail", F.col("count"))).alias("fail_timeouts"),
        F.max(F.when(ev == "fail", F.col("rtt_ms"))).alias("fail_avg_rtt_ms"),
        F.count(F.when(ev == "fail", 1)).alias("disconnects"),
        F.first(F.when(ev == "fail", F.col("detail")), ignorenulls=True).alias("fail_detail"),
        # A broker the client could not reach or lost, not for a request
        # that timed out: FAIL lines without "N request(s) timed out", and
        # state changes to DOWN.
        F.count(F.when(down, 1)).alias("down_lines"),
        F.first(F.when(down & (ev == "fail"), F.col("detail")), ignorenulls=True).alias("down_detail"),
        F.count(F.when((ev == "retry") & produce, 1)).alias("retries"),
        F.count(F.when(ev == "retry", 1)).alias("retries_all"),
        F.count(F.when(produce_error, 1)).alias("errors"),
        F.slice(F.sort_array(F.collect_set(F.when(produce_error, F.col("error")))), 1, ERRORS_SHOWN)
        .alias("error_names"),
        F.count(F.when(erred & ~produce_error, 1)).alias("other_errors"),
        F.slice(F.sort_array(F.collect_set(F.when(erred & ~produce_error, F.concat_ws(
            ": ", F.concat(F.coalesce(F.col("request"), F.lit("?")), F.lit("Request")), F.col("error"))))),
            1, ERRORS_SHOWN).alias("other_error_names"),
        F.count(F.when(ev == "produce", 1)).alias("batches"),
        quantile(F.when(ev == "produce", F.col("msgs")), 0.5).alias("batch_msgs_p50"),
        F.max(F.when(ev == "produce", F.col("msgs"))).alias("batch_msgs_max"),
        F.max(F.when(ev == "xmit_queue", F.col("msgs"))).alias("queued_msgs_max"),
        F.count(F.when(ev == "send_partial", 1)).alias("partial_sends"),
        F.count(F.when((ev == "recv") & produce, 1)).alias("produce_responses"),
        F.count(F.when((ev == "send") & produce, 1)).alias("produce_sends"),
        F.max(F.col("ts_resolution_us")).alias("ts_resolution_us"),
        F.count(F.when(F.col("ts_us").isNull() & ev.isin("send", "recv"), 1)).alias("untimed"),
    ]


def _send_stalls(events) -> dict:
    """Produce requests that left in several ``Sent partial`` pieces: the
    time from the first piece to the whole request's ``Sent`` line; run ->
    their count, median and longest."""
    from pyspark.sql import functions as F

    key = [RUN, "client", "broker", "corr_id"]
    span = (one_run(events).filter(F.col("event").isin("send_partial", "send") & (F.col("request") == "Produce"))
            .groupBy(*key).agg(F.min(F.when(F.col("event") == "send_partial", F.col("ts_us"))).alias("first"),
                               F.max(F.when(F.col("event") == "send", F.col("ts_us"))).alias("sent"))
            .filter(F.col("first").isNotNull())
            .select(RUN, ((F.col("sent") - F.col("first")) / 1000.0).alias("stall_ms")))
    rows = span.groupBy(RUN).agg(F.count("*").alias("n"), quantile("stall_ms", 0.5).alias("p50"),
                                 F.max("stall_ms").alias("max")).collect()
    return {r[RUN]: {"stalled_sends": r.n, "send_stall_p50_ms": rounded(r.p50, 3),
                     "send_stall_max_ms": rounded(r.max, 3)} for r in rows}
