"""``syscalls`` rows -> table ``log_writes``: the librdkafka lines the
producer wrote to stderr, as strace saw them.

Its columns are rdkafka_events' (kdiag.parsers.rdkafka_log), plus ``pid``
and a microsecond ``ts_us`` from strace, ``log_ts_us`` (librdkafka's own
time of the line) and ``line_no`` pointing at the syscall row. This is what
places a request's Sent/Received lines among its broker thread's syscalls.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from kdiag.parsers.rdkafka_log import SCHEMA as EVENTS_SCHEMA
from kdiag.parsers.rdkafka_log import SCHEMA_V1 as EVENTS_SCHEMA_V1
from kdiag.parsers.rdkafka_log import parse_lines
from kdiag.parsers.strace.schema import SCHEMA

_GROWN = set(EVENTS_SCHEMA.names) - set(EVENTS_SCHEMA_V1.names)
# What log_writes reads of the syscalls rows.
WRITE_COLUMNS = ("line_no", "pid", "ts_us", "data")


def log_writes(syscalls: pa.Table) -> pa.Table:
    # The columns wanted, then the rows: a filter of the whole table copied
    # every call's arguments, half the time of this function.
    rows = syscalls.select(list(WRITE_COLUMNS))
    rows = rows.filter(pc.is_valid(rows["data"]))
    text = pc.utf8_rtrim(rows["data"], characters="\n")
    text = text.combine_chunks() if isinstance(text, pa.ChunkedArray) else text
    events, _ = parse_lines(text, 0)
    # Lines that are not librdkafka's are other stderr output; not an error.
    src = rows.take(events["line_no"])
    # A write is one line: no uniq -c count ("repeat") to carry.
    cols = {n: events[n] for n in events.column_names if n not in ("line_no", "ts_us", "repeat")}
    return pa.table({"line_no": src["line_no"], "pid": src["pid"], "ts_us": src["ts_us"],
                     "log_ts_us": events["ts_us"], **cols})


LOG_WRITES_SCHEMA = log_writes(SCHEMA.empty_table()).schema
# Before rdkafka_events grew its columns after "text" (schema version 1).
LOG_WRITES_SCHEMA_V1 = pa.schema([f for f in LOG_WRITES_SCHEMA if f.name not in _GROWN])
