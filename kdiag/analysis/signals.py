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
import re

from kdiag.analysis.life import RESOLVE_DETAIL
from kdiag.analysis.spark_plumbing import RUN, frame, one_run, quantile, rounded
from kdiag.analysis.thresholds import SLOW_MS

# A broker the client cannot reach, or a connection that cannot stay up.
# A name that does not resolve, or a connect that timed out, is a phase of
# the connection's life that failed (life.py: dns_slow, connect_slow), not a
# broker that refused it.
DOWN_DETAIL = ("(?i)(^Connect to .* failed|Connection refused|Connection reset|"
               "No route to host|Network is unreachable|Host is unreachable|SSL handshake failed|"
               "SASL|Authentication|brokers are down|broker not up)")
# A connection the broker closed (connections.max.idle.ms, 10 min by
# default): "Receive failed: Disconnected", "Disconnected (after 600012ms in
# state UP)", "Connection closed", and the EAGAIN transport failure printed
# beside it. librdkafka reconnects when it next has a request: it costs
# nothing, unless the connection dropped within about a second of coming UP.
IDLE_DETAIL = "(?i)(Disconnected|Connection closed|transport failure: \\(errno: Resource temporarily unavailable)"
# The application's copy of a broker's failure: rd_kafka_broker_fail()
# sends its error to the error callback at LOG_ERR (connect failures, failed
# handshakes, send and receive errors), as RD_KAFKA_RESP_ERR__TRANSPORT
# (-195, "Local: Broker transport failure"); _RESOLVE (-193, "Local: Host
# resolution failure") and _ALL_BROKERS_DOWN (-187, "Local: All broker
# connections are down") follow it. Clients that print only the code's
# string or name ("_TRANSPORT", .NET's "Local_Transport") hide which failure
# it was: see _finished.
APP_DOWN_ERROR = ("(?i)(Broker transport failure|Host resolution failure|All broker connections are down|"
                  "^_(TRANSPORT|RESOLVE|ALL_BROKERS_DOWN)$|^Local_(Transport|Resolve|AllBrokersDown)$)")
UP_FOR_MS = r"after (\d+)ms in state UP"
# The events of librdkafka's Sent/Received lines: most of a large log, and
# never a line any pattern here reads.
SENT_RECEIVED = ("send", "send_partial", "recv")
SHORT_UP_MS = 1500.0
# Errors named in the findings, most frequent first.
ERRORS_SHOWN = 5
_NO_STALLS = {"stalled_sends": 0, "send_stall_p50_ms": None, "send_stall_max_ms": None}
# An application's line and librdkafka's this far apart are on clocks that
# disagree (a local time beside librdkafka's epoch): no wait is taken.
ENQUEUE_WAIT_MAX_MS = 300_000.0
# Requests in flight are counted (a sort of a connection's lines) only in a
# run of at most this many Produce responses: an excerpt or a short log.
IN_FLIGHT_MAX_RESPONSES = 100_000
_NO_WAITS = {"enqueue_waits": 0, "enqueue_wait_p50_ms": None, "enqueue_waits_unsent": 0,
             "enqueue_wait_unsent_min_ms": None}


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
    for name in (c for c in ("text", "error") if c not in events.columns):   # an older table's, or strace's
        events = events.withColumn(name, F.lit(None).cast("string"))
    if "repeat" not in events.columns:
        events = events.withColumn("repeat", F.lit(1))
    rows = {r[RUN]: r.asDict() for r in events.groupBy(RUN).agg(*_columns()).collect()}
    stalled = _send_stalls(events.filter(F.col(RUN).isin(*[k for k, r in rows.items() if r["partial_sends"]]))) \
        if any(r["partial_sends"] for r in rows.values()) else {}
    waits = _enqueue_waits(events.filter(F.col(RUN).isin(*[k for k, r in rows.items() if r["app_produces"]]))) \
        if any(r["app_produces"] for r in rows.values()) else {}
    deep = [k for k, r in rows.items() if (r["produce_rtt_max_ms"] or 0) >= SLOW_MS
            and r["produce_responses"] <= IN_FLIGHT_MAX_RESPONSES]
    in_flight = _in_flight(events.filter(F.col(RUN).isin(*deep))) if deep else {}
    for run, row in rows.items():
        row.pop(RUN)
        row.update(in_flight.get(run, {}))
        row.update(stalled.get(run, _NO_STALLS) if row["partial_sends"] else {})
        row.update(waits.get(run, _NO_WAITS) if row["app_produces"] else {})
        _finished(row)
    return rows


# What no_signals gives: the same for every run, so found once per process
# (a replay of an empty log, or a warm server's, runs no job for it).
_NOTHING: dict = {}


def no_signals(spark) -> dict:
    """The signals of a run without one line."""
    if not _NOTHING:
        empty = frame(spark, [], "event string, request string, error string, count long, "
                             "elapsed_ms double, rtt_ms double, detail string, msgs long, "
                             "ts_us long, ts_resolution_us long, text string, repeat int")
        _NOTHING.update(_finished(empty.agg(*_columns()).first().asDict()))
    return copy.deepcopy(_NOTHING)


def _finished(row: dict) -> dict:
    row["timed_out"] = max(row["timed_out"] or 0, row["timeout_lines"] or 0, row["fail_timeouts"] or 0)
    not_up, detail = row.pop("not_up_lines") or 0, row.pop("not_up_detail")
    row["down_not_up_lines"] = 0
    if not_up and not row["produce_responses"]:
        row["down_lines"] = (row["down_lines"] or 0) + not_up
        row["down_detail"] = row["down_detail"] or detail
        row["down_not_up_lines"] = not_up
    # A transport failure the application got with only its code's string:
    # rd_kafka_broker_conn_closed() logs a connection the broker closed while
    # idle at debug, so it never reaches the application (older versions
    # sent it, and their FAIL lines beside it say so). With no Produce request completed and no
    # sign of an idle disconnect, it is a broker the client cannot reach;
    # else it stays among the other errors.
    bare, detail = row.pop("bare_transport_lines") or 0, row.pop("bare_transport_detail")
    if bare and not row["produce_responses"] and not row["idle_disconnects"]:
        row["down_lines"] = (row["down_lines"] or 0) + bare
        row["down_detail"] = row["down_detail"] or detail
        row["other_errors"] = max(0, (row["other_errors"] or 0) - bare)
        row["other_error_names"] = [n for n in row["other_error_names"] or []
                                    if not re.search(APP_DOWN_ERROR, n.split(": ", 1)[-1])]
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
    # A line counted by uniq -c stands for its count's lines.
    rep = F.coalesce(F.col("repeat"), F.lit(1))

    def lines(cond):
        return F.coalesce(F.sum(F.when(cond, rep)), F.lit(0))

    # A delivery report or exception saying "Local: Message timed out": a
    # message's message.timeout.ms ran out, as the application got it (not a
    # Metadata request's "Metadata request failed: Local: Message timed out").
    app = ev == "app_error"
    # A pattern below that reads a line's text is read only on the lines it
    # can match, by a when(): Spark computes an expression used twice once
    # for every row, before the aggregates, even on the right of an & (its
    # subexpression elimination; the skipForShortcutExpr setting is off by
    # default). An unguarded pattern on the text ran on all 2e7
    # Sent/Received lines of the analysis bench's 1e7 requests: this job
    # 9 s -> 88 s. The patterns on ``error`` meet a null (or "") on those.
    delivery_timeout = F.coalesce(F.when(app, F.col("error").rlike("(?i)Message timed out")
                                         & ~F.coalesce(F.col("text"), F.lit("")).rlike("(?i)metadata")),
                                  F.lit(False))
    produce_error = erred & ((ev == "msgset") | F.coalesce(produce, F.lit(False)))
    # FAIL lines that say a connection failed, by librdkafka's errstr
    # ("Connect to %s failed: %s", "Disconnected", "Failed to resolve",
    # "SSL handshake failed", errno texts). Not a handle decommissioned at
    # shutdown (_DESTROY) nor a request that timed out ("ApiVersionRequest
    # failed: Local: Timed out").
    fail = (ev == "fail") & F.col("count").isNull()
    # The whole message too: the parser keeps "(after Nms in state UP)" only
    # as elapsed_ms, and the state only in the text.
    said = F.when(ev.isin("fail", "app_error"), F.concat_ws(" ", F.col("detail"), F.col("error"), F.col("text")))
    # An application's copy of a failure that carries librdkafka's errstr
    # (confluent-kafka's str="...: Connect to ... failed: ...") is read as
    # its FAIL line is.
    app_fail = app & F.coalesce(F.col("error").rlike(APP_DOWN_ERROR), F.lit(False))
    failed = fail | app_fail
    up_ms = F.coalesce(F.col("elapsed_ms"),
                       F.when(said.rlike(UP_FOR_MS), F.regexp_extract(said, UP_FOR_MS, 1).cast("double")))
    idle_like = failed & said.rlike(IDLE_DETAIL) & ~said.rlike(DOWN_DETAIL)
    short_up = idle_like & said.rlike("in state UP") & F.coalesce(up_ms < SHORT_UP_MS, F.lit(False))
    down = ((failed & said.rlike(DOWN_DETAIL)) | short_up
            | ((ev == "app_error") & F.coalesce(F.col("error"), F.lit("")).rlike("brokers are down")))
    idle = idle_like & ~short_up
    # Neither: only the code's string, decided over the run (_finished).
    bare = app_fail & ~said.rlike(DOWN_DETAIL) & ~said.rlike(IDLE_DETAIL) & ~said.rlike(RESOLVE_DETAIL)
    # A FAIL line's error is its disconnect's, counted as one above.
    other = erred & ~produce_error & (ev != "fail") & ~(app & (down | idle)) & ~delivery_timeout
    # TOPPAR's "[3] 1 message(s) queued but broker not up": messages wait for
    # a leader's connection. Every producer logs it while its first
    # connection comes up, so it counts as down only in a run where no
    # Produce request completed (_finished).
    not_up = F.coalesce(F.when(ev.isNull() | ~ev.isin(*SENT_RECEIVED), F.col("text")).rlike("queued but broker not up"),
                        F.lit(False))
    return [
        lines(ev == "timeout").alias("timeout_lines"),
        F.sum(F.when(ev == "timeouts", F.col("count"))).alias("timed_out"),
        quantile(F.when(ev == "timeout", F.col("elapsed_ms")), 0.5).alias("timeout_after_ms"),
        F.max(F.when(ev == "fail", F.col("count"))).alias("fail_timeouts"),
        F.max(F.when(ev == "fail", F.col("rtt_ms"))).alias("fail_avg_rtt_ms"),
        lines(ev == "fail").alias("disconnects"),
        F.first(F.when(ev == "fail", F.col("detail")), ignorenulls=True).alias("fail_detail"),
        # A broker the client could not reach or lost, not for a request
        # that timed out: FAIL lines without "N request(s) timed out", and
        # state changes to DOWN.
        lines(down).alias("down_lines"),
        F.first(F.when(down, F.coalesce(F.col("detail"), F.col("error"), F.col("text"))), ignorenulls=True)
        .alias("down_detail"),
        lines(not_up).alias("not_up_lines"),
        F.first(F.when(not_up, F.col("text")), ignorenulls=True).alias("not_up_detail"),
        lines(bare).alias("bare_transport_lines"),
        F.first(F.when(bare, F.col("error")), ignorenulls=True).alias("bare_transport_detail"),
        lines(idle).alias("idle_disconnects"),
        F.first(F.when(idle, F.col("detail")), ignorenulls=True).alias("idle_detail"),
        F.max(F.when(idle, up_ms)).alias("idle_up_max_ms"),
        lines((ev == "retry") & produce).alias("retries"),
        lines(ev == "retry").alias("retries_all"),
        lines(produce_error).alias("errors"),
        lines(delivery_timeout).alias("delivery_timeouts"),
        F.slice(F.sort_array(F.collect_set(F.when(produce_error, F.col("error")))), 1, ERRORS_SHOWN)
        .alias("error_names"),
        lines(other).alias("other_errors"),
        F.slice(F.sort_array(F.collect_set(F.when(other, F.concat_ws(
            ": ", F.concat(F.coalesce(F.col("request"), F.lit("?")), F.lit("Request")), F.col("error"))))),
            1, ERRORS_SHOWN).alias("other_error_names"),
        lines(ev == "produce").alias("batches"),
        quantile(F.when(ev == "produce", F.col("msgs")), 0.5).alias("batch_msgs_p50"),
        F.max(F.when(ev == "produce", F.col("msgs"))).alias("batch_msgs_max"),
        F.max(F.when(ev == "xmit_queue", F.col("msgs"))).alias("queued_msgs_max"),
        lines(ev == "send_partial").alias("partial_sends"),
        lines((ev == "recv") & produce).alias("produce_responses"),
        lines((ev == "send") & produce).alias("produce_sends"),
        lines(ev == "app_produce").alias("app_produces"),
        F.max(F.when((ev == "recv") & produce, F.col("rtt_ms"))).alias("produce_rtt_max_ms"),
        F.max(F.col("ts_resolution_us")).alias("ts_resolution_us"),
        lines(F.col("ts_us").isNull() & ev.isin("send", "recv")).alias("untimed"),
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


def _enqueue_waits(events) -> dict:
    """The time from each of the application's lines saying it hands a
    message to the client (``app_produce``) to the first later line showing
    librdkafka took messages towards a request: its broker thread moving
    them to the transmit queue (a TOPPAR count), a MessageSet built, a
    ProduceRequest sent. Where none follows, the log's last Sent line of any
    request after it bounds the wait from below: requests were being sent
    and logged, not this one. run -> the waits' count and median, the
    unsent lines' count and their shortest bound."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ev = F.col("event")
    took = (((ev == "send") & (F.col("request") == "Produce")) | (ev == "produce")
            | ((ev == "xmit_queue") & ((F.coalesce("msgs", F.lit(0)) + F.coalesce("count", F.lit(0))) > 0)))
    rows = (one_run(events).filter(F.col("ts_us").isNotNull() & ((ev == "app_produce") | took | (ev == "send")))
            .select(RUN, "ts_us", "line_no", (ev == "app_produce").alias("app"),
                    F.when(took, F.col("ts_us")).alias("took_us"), F.when(ev == "send", F.col("ts_us")).alias("sent_us")))
    after = Window.partitionBy(RUN).orderBy("ts_us", "line_no").rowsBetween(1, Window.unboundedFollowing)
    rows = rows.select(RUN, "app", "ts_us", F.min("took_us").over(after).alias("took"),
                       F.max("sent_us").over(after).alias("last_sent")).filter("app")
    wait = (F.col("took") - F.col("ts_us")) / 1000.0
    bound = F.when(F.col("took").isNull(), (F.col("last_sent") - F.col("ts_us")) / 1000.0)

    def fair(c):
        return F.when((c >= 0) & (c <= ENQUEUE_WAIT_MAX_MS), c)

    got = rows.select(RUN, fair(wait).alias("w"), fair(bound).alias("b")).groupBy(RUN).agg(
        F.count("w").alias("n"), quantile("w", 0.5).alias("p50"), F.count("b").alias("nb"), F.min("b").alias("bmin"))
    return {r[RUN]: {"enqueue_waits": r.n, "enqueue_wait_p50_ms": rounded(r.p50, 3), "enqueue_waits_unsent": r.nb,
                     "enqueue_wait_unsent_min_ms": rounded(r.bmin, 3)} for r in got.collect()}


def _in_flight(events) -> dict:
    """Produce responses that took SLOW_MS or more, against how many
    requests the client sent on the same connection while each awaited it:
    the highest CorrId sent before its Received line, less its own
    (librdkafka numbers a connection's requests in send order, and the
    broker answers them in that order). run -> the responses' count, their
    median depth, median rtt, and the median size of the Produce requests
    sent."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ev, key = F.col("event"), [RUN, "client", "broker"]
    rows = one_run(events).filter(F.col("corr_id").isNotNull() & F.col("broker").isNotNull()
                                  & (((ev == "send") | ((ev == "recv") & (F.col("request") == "Produce")))))
    before = Window.partitionBy(*key).orderBy(F.col("line_no")).rowsBetween(Window.unboundedPreceding, -1)
    rows = rows.select(*key, "event", "request", "corr_id", "rtt_ms", "size_bytes",
                       F.max(F.when(ev == "send", F.col("corr_id"))).over(before).alias("top"))
    slow = rows.filter((ev == "recv") & (F.col("rtt_ms") >= SLOW_MS) & (F.col("top") > F.col("corr_id")))
    got = {r[RUN]: r for r in slow.groupBy(RUN).agg(
        F.count("*").alias("n"), quantile(F.col("top") - F.col("corr_id"), 0.5).alias("depth"),
        quantile("rtt_ms", 0.5).alias("rtt")).collect()}
    sizes = {r[RUN]: r.size for r in rows.filter((ev == "send") & (F.col("request") == "Produce"))
             .groupBy(RUN).agg(quantile("size_bytes", 0.5).alias("size")).collect()}
    return {run: {"in_flight_slow": r.n, "in_flight_depth_p50": rounded(r.depth, 1),
                  "in_flight_rtt_p50_ms": rounded(r.rtt, 3), "produce_bytes_p50": rounded(sizes.get(run), 0)}
            for run, r in got.items()}
