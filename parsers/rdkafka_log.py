"""librdkafka debug log lines -> table ``rdkafka_events``.

Input is librdkafka's own stderr format, as ``rd_kafka_log_print()`` writes
it (``"%%%i|%u.%03u|%s|%s| %s\\n"``: level, epoch seconds.milliseconds,
facility, client name, message)::

    %7|1795314017.477|SEND|rdkafka#producer-1| [thrd:ssl://127.0.0.1:19093/111]: ssl://127.0.0.1:19093/111: Sent ProduceRequest (v10, 2164 bytes @ 0, CorrId 20)

Text before the ``%`` (a timestamp or level a wrapper added) is tolerated.

One row per librdkafka line, every line kept (``event`` = ``other`` when it
is not one of the kinds below):

==============  ========  =====================================================
column          type      meaning (null when the line does not carry it)
==============  ========  =====================================================
line_no         int64     1-based line number in the input
ts_us           int64     librdkafka's timestamp, epoch microseconds (its
                          resolution is 1 ms)
level           int8      syslog level (7 = debug)
facility        string    SEND, RECV, STATE, CONNECT, ...
client          string    client instance name, ``rdkafka#producer-1``
thread          string    the ``[thrd:...]`` name (librdkafka cuts it short)
broker          string    broker handle name, ``ssl://host:port/nodeid``
event           string    send, send_partial, recv, retry, unknown_corrid,
                          state, connect, connected, init, other
request         string    API name without Request/Response: ``Produce``
api_version     int16     request/response version (``v10``)
size_bytes      int64     request or response size
corr_id         int32     correlation id (for ``retry``: the previous one)
rtt_ms          float64   librdkafka's rtt (``recv`` only)
detail          string    state ``UP -> DOWN``, connect address, retry
                          ``1/2 in 100ms``, library version for ``init``
text            string    the message after the broker name
==============  ========  =====================================================
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from parsers.base import ParseCounts

SCHEMA = pa.schema(
    [
        ("line_no", pa.int64()),
        ("ts_us", pa.int64()),
        ("level", pa.int8()),
        ("facility", pa.string()),
        ("client", pa.string()),
        ("thread", pa.string()),
        ("broker", pa.string()),
        ("event", pa.string()),
        ("request", pa.string()),
        ("api_version", pa.int16()),
        ("size_bytes", pa.int64()),
        ("corr_id", pa.int32()),
        ("rtt_ms", pa.float64()),
        ("detail", pa.string()),
        ("text", pa.string()),
    ]
)

# "%7|1795314017.477|SEND|rdkafka#producer-1| <message>"; anything before the
# "%" (a wrapper's own prefix without "|") is tolerated.
_HEADER = r"^[^|]*%[0-7]\|[0-9]{1,12}\.[0-9]{3}\|[A-Za-z0-9_\-]*\|[^|]*\| "
# rd_kafka_dbg() prefixes "[thrd:%s]: "; rd_rkb_dbg() adds the broker name
# "%s: ": "ssl://h:p/111", "sasl_ssl://h:p/bootstrap", ":0/internal".
_THREAD = r"^ \[thrd:(?P<thread>[^\]]*)\]: "
_THREAD_STRIP = r"^ (?:\[thrd:[^\]]*\]: )?"
_BROKER_NAME = r"(?:[A-Za-z_]*://\S+/(?:-?[0-9]+|bootstrap|internal|[A-Za-z0-9_\-]+)|:[0-9]+/internal)"
_BROKER = r"^(?P<broker>" + _BROKER_NAME + "): "
_BROKER_STRIP = r"^" + _BROKER_NAME + ": "

# Each pattern quotes the format string in rdkafka_broker.c it matches.
_EVENTS: list[tuple[str, str, str]] = [
    # "Sent %sRequest (v%hd, %zu bytes @ %zu, CorrId %d)"; before v1.0 there
    # was no " @ offset" part.
    ("send", "Sent ",
     r"^Sent (?P<request>[A-Za-z]+)Request \(v(?P<api_version>[0-9]{1,4}), "
     r"(?P<size_bytes>[0-9]{1,18}) bytes(?: @ [0-9]+)?, CorrId (?P<corr_id>-?[0-9]{1,10})\)"),
    # "Sent partial %sRequest (v%hd, %zd+%zd/%zu bytes, CorrId %d)"
    ("send_partial", "Sent partial ",
     r"^Sent partial (?P<request>[A-Za-z]+)Request \(v(?P<api_version>[0-9]{1,4}), "
     r"(?P<detail>[0-9]+\+[0-9]+)/(?P<size_bytes>[0-9]{1,18}) bytes, CorrId (?P<corr_id>-?[0-9]{1,10})\)"),
    # "Received %sResponse (v%hd, %zu bytes, CorrId %d, rtt %.2fms)"
    ("recv", "Received ",
     r"^Received (?P<request>[A-Za-z]+)Response \(v(?P<api_version>[0-9]{1,4}), "
     r"(?P<size_bytes>[0-9]{1,18}) bytes, CorrId (?P<corr_id>-?[0-9]{1,10}), rtt (?P<rtt_ms>[0-9]{1,12}(?:\.[0-9]{1,6})?)ms\)"),
    # "Retrying %sRequest (v%hd, %zu bytes, retry %d/%d, prev CorrId %d) in %dms"
    ("retry", "Retrying ",
     r"^Retrying (?P<request>[A-Za-z]+)Request \(v(?P<api_version>[0-9]{1,4}), "
     r"(?P<size_bytes>[0-9]{1,18}) bytes, retry (?P<detail>[0-9]+/[0-9]+), "
     r"prev CorrId (?P<corr_id>-?[0-9]{1,10})\)"),
    # "Response for unknown CorrId %d (timed out?)"
    ("unknown_corrid", "Response for unknown CorrId",
     r"^Response for unknown CorrId (?P<corr_id>-?[0-9]{1,10})"),
    # "%s: Broker changed state %s -> %s"
    ("state", "Broker changed state ",
     r"^Broker changed state (?P<detail>[A-Z_]+ -> [A-Z_]+)"),
    # "Connecting to %s (%s) with socket %d"
    ("connect", "Connecting to ",
     r"^Connecting to (?P<detail>\S+ \([a-z_]+\)) with socket [0-9]+"),
    # "Connected to %s"
    ("connected", "Connected to ", r"^Connected to (?P<detail>\S+)"),
    # "librdkafka v%s (0x%x) %s initialized (builtin.features ..."
    ("init", "librdkafka v",
     r"^librdkafka v(?P<detail>[0-9][0-9A-Za-z.\-+]*) \(0x[0-9a-fA-F]+\) \S+ initialized"),
]

_EVENT_FIELDS = ("request", "api_version", "size_bytes", "corr_id", "rtt_ms", "detail")


def _typed(vals: pa.Array, typ: pa.DataType) -> pa.Array:
    """Cast matched digits; a value out of the type's range becomes null
    instead of raising (a corrupt line must not stop the run)."""
    if pa.types.is_string(typ):
        return vals
    if pa.types.is_floating(typ):
        return pc.cast(vals, typ)
    wide = pc.cast(vals, pa.int64())
    limit = {8: 2**7, 16: 2**15, 32: 2**31, 64: None}[typ.bit_width]
    if limit is not None:
        inside = pc.and_(pc.greater_equal(wide, -limit), pc.less(wide, limit))
        wide = pc.if_else(inside, wide, pa.scalar(None, pa.int64()))
    return pc.cast(wide, typ)


class RdkafkaLogParser:
    """Feeds chunks of lines; stateless across chunks except for counts."""

    source = "rdkafka_log"

    def __init__(self) -> None:
        self.counts = ParseCounts(self.source)

    def feed(self, lines: pa.Array, first_line_no: int = 1) -> pa.Table:
        if isinstance(lines, pa.ChunkedArray):
            lines = lines.combine_chunks()
        n = len(lines)
        self.counts.lines += n
        if n == 0:
            return SCHEMA.empty_table()
        line_no = pa.array(np.arange(first_line_no, first_line_no + n, dtype=np.int64))

        ok = pc.fill_null(pc.match_substring_regex(lines, _HEADER), False)
        if not pc.all(ok).as_py():
            self._skip(lines, line_no, pc.invert(ok), "not_librdkafka")
            lines, line_no = lines.filter(ok), line_no.filter(ok)
        m = len(lines)
        self.counts.parsed += m
        if m == 0:
            return SCHEMA.empty_table()

        # Splitting on "|" is several times faster than one capturing regex
        # over the whole, long line; the header check above made it safe.
        parts = pc.split_pattern(lines, "|", max_splits=4)
        lvl_f, ts_f, fac_f, client_f, msg = (pc.list_element(parts, i) for i in range(5))
        ts_ms = pc.cast(pc.replace_substring(ts_f, ".", ""), pa.int64())
        level = pc.cast(pc.utf8_slice_codeunits(lvl_f, -1), pa.int8())

        thread = pc.struct_field(pc.extract_regex(msg, _THREAD), "thread")
        rest = pc.replace_substring_regex(msg, _THREAD_STRIP, "", max_replacements=1)
        broker = pc.struct_field(pc.extract_regex(rest, _BROKER), "broker")
        text = pc.replace_substring_regex(rest, _BROKER_STRIP, "", max_replacements=1)

        codes = np.zeros(m, dtype=np.int8)
        names = ["other"]
        rows: list[np.ndarray] = []
        found: list[pa.StructArray] = []
        for name, prefix, pattern in _EVENTS:
            idx = np.flatnonzero(pc.starts_with(text, prefix).to_numpy(zero_copy_only=False))
            if not len(idx):
                continue
            got = pc.extract_regex(text.take(idx), pattern)
            hit = pc.is_valid(got).to_numpy(zero_copy_only=False)
            codes[idx[hit]] = len(names)
            names.append(name)
            rows.append(idx[hit])
            found.append(got.filter(pa.array(hit)))
        cols = self._event_columns(m, rows, found)
        event = pc.cast(pa.DictionaryArray.from_arrays(pa.array(codes), pa.array(names)), pa.string())
        return pa.table(
            {
                "line_no": line_no,
                "ts_us": pc.multiply(ts_ms, 1000),
                "level": level,
                "facility": fac_f,
                "client": client_f,
                "thread": thread,
                "broker": broker,
                "event": event,
                **cols,
                "text": text,
            },
            schema=SCHEMA,
        )

    @staticmethod
    def _event_columns(m: int, rows: list[np.ndarray], found: list[pa.StructArray]) -> dict:
        """Scatter each event kind's captures back to row order with one take
        per column (if_else over long string columns is slow)."""
        cols = {}
        for f in _EVENT_FIELDS:
            typ = SCHEMA.field(f).type
            pieces, where = [], []
            for idx, got in zip(rows, found):
                if got.type.get_field_index(f) >= 0:
                    pieces.append(_typed(got.field(f), typ))
                    where.append(idx)
            if not pieces:
                cols[f] = pa.nulls(m, typ)
                continue
            pos = np.full(m, -1, dtype=np.int64)
            offset = 0
            for idx, piece in zip(where, pieces):
                pos[idx] = np.arange(offset, offset + len(piece))
                offset += len(piece)
            values = pa.concat_arrays(pieces)
            cols[f] = values.take(pa.array(pos, mask=pos < 0))
        return cols

    def finish(self) -> pa.Table:
        return SCHEMA.empty_table()

    def _skip(self, lines: pa.Array, line_no: pa.Array, mask: pa.Array, reason: str) -> None:
        bad = lines.filter(mask)
        self.counts.skip(reason, len(bad))
        nos = line_no.filter(mask)
        for i in range(min(len(bad), 5)):
            self.counts.example(nos[i].as_py(), reason, bad[i].as_py() or "")


def parse_lines(lines, first_line_no: int = 1) -> tuple[pa.Table, ParseCounts]:
    p = RdkafkaLogParser()
    arr = lines if isinstance(lines, (pa.Array, pa.ChunkedArray)) else pa.array(lines, pa.string())
    t = pa.concat_tables([p.feed(arr, first_line_no), p.finish()])
    return t, p.counts


def looks_like(sample: list[str]) -> float:
    """Share of non-empty sample lines in librdkafka's log format."""
    lines = [s for s in sample if s.strip()]
    if not lines:
        return 0.0
    ok = pc.match_substring_regex(pa.array(lines, pa.string()), _HEADER)
    return pc.sum(pc.cast(ok, pa.int64())).as_py() / len(lines)
