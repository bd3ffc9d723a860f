"""librdkafka debug log lines -> table ``rdkafka_events``.

librdkafka hands every log line to the application as (level, facility,
client name, message); each client library prints it its own way. All of
these are read, recognised by content, line by line (a file may mix them):

* librdkafka's own stderr format, ``rd_kafka_log_print()``
  (``"%%%i|%u.%03u|%s|%s| %s\\n"``: level, epoch seconds.milliseconds,
  facility, client name, message); text before the ``%`` is tolerated::

    %7|1795314017.477|SEND|rdkafka#producer-1| [thrd:ssl://127.0.0.1:19093/111]: ssl://127.0.0.1:19093/111: Sent ProduceRequest (v10, 2164 bytes @ 0, CorrId 20)

* confluent-kafka (Python) ``logger=``: the record's message is
  ``"%s [%s] %s"`` (facility, client name, message), under any ``logging``
  format around it; the timestamp is taken from an ``asctime`` in the
  prefix and the level from a ``levelname``::

    2026-11-22 04:42:32,123 DEBUG kafka SEND [rdkafka#producer-1] [thrd:...]: ...
    DEBUG:kafka:SEND [rdkafka#producer-1] [thrd:...]: ...

* confluent-kafka-go ``LogEvent.String()``:
  ``"[%v][%s][%s][%d]%s"`` (RFC 3339 time, client name, facility, level,
  message), with any prefix (``log.Println``)::

    [2026-11-22T04:42:32Z][rdkafka#producer-1][SEND][7][thrd:...]: ...

* Confluent.Kafka (.NET) ``Loggers.ConsoleLogger``:
  ``"{Level}|{yyyy-MM-dd HH:mm:ss.fff}|{Name}|{Facility}| {Message}"``::

    Debug|2026-11-22 04:42:32.123|rdkafka#producer-1|SEND| [thrd:...]: ...

* node-rdkafka and confluent-kafka-javascript ``event.log`` objects
  (``{ severity, fac, message }``, the latter with ``name``) and the
  KafkaJS-style DefaultLogger's ``{ message, fac, timestamp, name }``, as
  ``console.log`` prints them (util.inspect: one line, or one property a
  line when long) or as JSON lines. A record spread over lines becomes one
  row, at its ``message`` line; its other lines are counted as skipped
  ``record_part`` (a record cut by a chunk boundary loses the fields on the
  other side: null).

* lines copied out of an editor's or grep's search results, or counted
  by ``uniq -c`` (finds.py): the prefix cut off, the count kept
  (``repeat``).

* records a terminal, a console or a logger broke over lines (joins.py):
  the pieces joined back, at most joins.MAX_JOINED a record, counted as
  skipped ``joined``; and the reverse, records a paste joined onto one
  line with spaces: read apart, each a row with the line's number, the
  records after a line's first counted as ``records_after_first``.

* lines that hold only one of librdkafka's errors (wrapped.error_lines):
  ``Local: Message timed out`` in a delivery report or an exception.

* the application's own timed lines saying it hands a message over
  (``Sending message``, ``produce_msg``: wrapped.app_produce_lines), the
  start of a message's wait in the client.

* any other wrapper (wrapped.py): Java, Go, C++ and Node loggers, syslog,
  journald JSON, logfmt; librdkafka's message is found by its ``[thrd:...]: ``
  or its broker name and first words, the prefix searched for a timestamp
  (its resolution kept), a level, the facility and the client name. Lines
  mangled by chat or markdown (``> `` quoting, autolinks, backticks, HTML
  escapes) are undone first.

The message wording of librdkafka 0.8 to current is read (no API version
and no rtt before 0.8.5; Sent lines without `` @ offset`` before 0.9.2;
Retrying lines without ``prev CorrId`` before 0.11.4; broker names with or
without a ``proto://`` scheme).

One row per librdkafka line, every line kept (``event`` = ``other`` when it
is not one of the kinds below), but for an ERROR line that repeats the FAIL
line just before it (librdkafka logs a broker failure twice when the
application sets no error_cb): dropped, counted as skipped ``error_copy``,
so that one disconnect is one ``fail`` row:

==============  ========  =====================================================
column          type      meaning (null when the line does not carry it)
==============  ========  =====================================================
line_no         int64     1-based line number in the input (of the
                          ``message`` line for a multi-line record)
ts_us           int64     the line's timestamp, epoch microseconds:
                          librdkafka's own (1 ms resolution); KafkaJS's
                          ``timestamp`` (epoch ms); else a Python ``asctime``
                          or .NET local time *as printed, zone unknown*
                          (read as if UTC; differences between lines are
                          right, the absolute time is off by the zone; a
                          time of day without date counts from 1970-01-01).
                          Whole seconds and minutes are kept (Go's RFC
                          3339, an asctime without msecs), but not on a
                          Received line: its rtt times the request. Null
                          without a time (basicConfig's format,
                          node-rdkafka)
level           int8      syslog level (7 = debug); from Python only where
                          the mapping is one to one (DEBUG 7, WARNING 4,
                          ERROR 3)
facility        string    SEND, RECV, STATE, CONNECT, ...
client          string    client instance name, ``rdkafka#producer-1``
thread          string    the ``[thrd:...]`` name (librdkafka cuts it short)
broker          string    broker handle name, ``ssl://host:port/nodeid``,
                          ``host:port/nodeid`` (plaintext)
event           string    send, send_partial, recv, retry, unknown_corrid,
                          state, connect, connected, init, timeout (one
                          request timed out), timeouts (REQTMOUT's count),
                          fail (a disconnect), msgset (a MessageSet
                          delivered or failed), produce (a MessageSet
                          built), xmit_queue, reqerr, app_error (one of
                          librdkafka's errors as the application got it:
                          a delivery report, an exception, an error
                          callback; ``error`` its string, ``detail`` its
                          code's name when printed), app_produce (the
                          application's own timed line handing a message
                          to the client, ``text`` the whole line), other
request         string    API name without Request/Response: ``Produce``
api_version     int16     request/response version (``v10``)
size_bytes      int64     request or response size
corr_id         int32     correlation id (for ``retry``: the previous one)
rtt_ms          float64   librdkafka's rtt (``recv``), the average rtt it
                          states when it disconnects (``fail``)
detail          string    state ``UP -> DOWN``, connect address, retry
                          ``1/2 in 100ms``, library version for ``init``
text            string    the message after the broker name
ts_resolution_us int32    what ts_us can resolve: 1000 for librdkafka's own
                          and a ``.fff`` wrapper time, 1 for microseconds,
                          1 000 000 for whole seconds, 60 000 000 minutes;
                          null without ts_us (added in schema version 2, as
                          are the columns below)
msgs            int32     messages in a MessageSet or a transmit queue
count           int32     requests timed out (timeouts, fail), messages
                          added to the transmit queue (xmit_queue)
topic           string    topic and partition of a MessageSet or queue
partition       int32
error           string    the error a MessageSet or request met
elapsed_ms      float64   how long the request was in flight (timeout), the
                          state lasted (fail)
repeat          int32     how many times the line stood: a ``uniq -c``
                          count, else 1 (added in schema version 3)
==============  ========  =====================================================
"""
from __future__ import annotations

import pyarrow as pa

from kdiag.parsers.base import ParseCounts
from kdiag.parsers.format import BY_LINES, CHUNKS, REQUESTS, SIGNALS, TEXT_SCANNER, Format
from kdiag.parsers.rdkafka_log.parser import RdkafkaLogParser
from kdiag.parsers.rdkafka_log.patterns import SCHEMA, SCHEMA_V1, SCHEMA_V2

__all__ = ["FORMATS", "SCHEMA", "SCHEMA_V1", "RdkafkaLogParser", "looks_like", "parse_lines"]


def parse_lines(lines, first_line_no: int = 1) -> tuple[pa.Table, ParseCounts]:
    p = RdkafkaLogParser()
    arr = lines if isinstance(lines, (pa.Array, pa.ChunkedArray)) else pa.array(lines, pa.string())
    t = pa.concat_tables([p.feed(arr, first_line_no), p.finish()])
    return t, p.counts


def looks_like(sample: list[str]) -> float:
    """Share of non-empty sample lines that are librdkafka log lines in one
    of the forms read (a multi-line record's other lines count with it)."""
    lines = [s for s in sample if s.strip()]
    if not lines:
        return 0.0
    p = RdkafkaLogParser()
    p.feed(pa.array(lines, pa.string()), 1)
    whole = ("record_part", "find_header", "joined")
    return (p.counts.parsed + sum(p.counts.skipped.get(k, 0) for k in whole)) / len(lines)


FORMATS = (
    Format(name="rdkafka_log", recognised_by=BY_LINES, recognise=looks_like, tables={"rdkafka_events": SCHEMA},
           schema_version=3, reads=CHUNKS, parser=RdkafkaLogParser, stateless=True,
           title="librdkafka log", pseudonymised=TEXT_SCANNER, feeds={"rdkafka_events": (REQUESTS, SIGNALS)}, bundle_dir="rdkafka_log",
           older={1: {"rdkafka_events": SCHEMA_V1}, 2: {"rdkafka_events": SCHEMA_V2}}),
)
