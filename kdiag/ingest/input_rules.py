"""What the analysis's input checks (``kdiag.analysis.input_checks``) look
for, told here so that a table's writer (``kdiag.ingest.table_facts``) can look for
the same on the way and tell the analysis what it need not check again: the
column naming a row's run, the clock tolerances, and the rows a copy check
looks at.
"""
from __future__ import annotations

# Every table the analysis reads carries the run its rows are from, and every
# window, join and grouping of rows is within one run: "" when there is one
# (replay, trace), a bundle's id when kdiag fleet analyses many at once.
RUN = "bundle_id"

# A thread's own clock readings never go back unless the clock was set; 1 ms
# is nothing strace (microseconds) can misprint.
STRACE_BACK_TOLERANCE_US = 1_000
# librdkafka stamps a line before writing it, and several application
# threads log under one name (thrd:app): one descheduled in between (a CFS
# throttled container loses up to 100 ms) writes an older time after a newer
# one. NTP only steps beyond 128 ms; smaller offsets it slews.
LOG_BACK_TOLERANCE_US = 250_000
# No request stays in flight this long (librdkafka times it out at
# socket.timeout.ms, 60 s by default; Produce at request.timeout.ms, 30 s), and
# under strace librdkafka's threads wake at least once a second
# (rd_kafka_max_block_ms): a minute in which no traced thread made one call
# is a stopped process or a clock set forward, not a wait.
FORWARD_GAP_US = 60_000_000
# A row's place in its input, which a copy does not repeat: its line, and
# the ordinal of the statistics snapshot it came from (_id: the analysis's
# own row number). A copy repeats every other column.
PLACE = ("line_no", "snapshot", "_id")
# librdkafka lines that carry a correlation id are logged once per request;
# other lines (state changes, "Not selecting any broker") can repeat within
# the log's millisecond resolution and are left alone.
CORR_EVENTS = ("send", "send_partial", "recv", "retry", "unknown_corrid")


def in_copy_scope(t, table: str):
    """The rows of ``t`` (an Arrow table of ``table``) that the analysis's
    copy check keeps (``input_checks._copy_scope``, in Spark): where a parse
    looks for copies as Spark would."""
    import pyarrow as pa
    import pyarrow.compute as pc

    scope = pc.is_valid(t["ts_us"])
    if table == "rdkafka_events":
        scope = pc.and_(scope, pc.and_(pc.is_in(t["event"], pa.array(CORR_EVENTS)), pc.is_valid(t["corr_id"])))
    if table in ("syscalls", "log_writes"):
        scope = pc.and_(scope, pc.not_equal(pc.remainder(t["ts_us"], 1_000_000), 0))
    return t.filter(pc.fill_null(scope, False))
