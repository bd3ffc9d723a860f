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

The message wording of librdkafka 0.9.2 to current is read (Sent lines
without `` @ offset`` before 0.9.2; Retrying lines without ``prev CorrId``
before 0.11.4; broker names with or without a ``proto://`` scheme).

One row per librdkafka line, every line kept (``event`` = ``other`` when it
is not one of the kinds below):

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
                          Null when the line has no time finer than a
                          second (Go's RFC 3339, an asctime without msecs,
                          basicConfig's format, node-rdkafka)
level           int8      syslog level (7 = debug); from Python only where
                          the mapping is one to one (DEBUG 7, WARNING 4,
                          ERROR 3)
facility        string    SEND, RECV, STATE, CONNECT, ...
client          string    client instance name, ``rdkafka#producer-1``
thread          string    the ``[thrd:...]`` name (librdkafka cuts it short)
broker          string    broker handle name, ``ssl://host:port/nodeid``,
                          ``host:port/nodeid`` (plaintext)
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

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kdiag.parsers.base import ParseCounts
from kdiag.parsers.strings import data_buffer, gather, offsets_data, views

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
# "%s: ": "ssl://h:p/111", "sasl_ssl://h:p/bootstrap", ":0/internal", and
# for plaintext no scheme at all (rd_kafka_mk_brokername() omits it):
# "127.0.0.1:9092/1". The stderr format puts a space before the thread; the
# log callbacks' messages are given one to match.
_THREAD = r"^ \[thrd:(?P<thread>[^\]]*)\]: "
_THREAD_STRIP = r"^ (?:\[thrd:[^\]]*\]: )?"
_BROKER_NAME = (r"(?:[A-Za-z_]*://\S+/(?:-?[0-9]+|bootstrap|internal|[A-Za-z0-9_\-]+)|:[0-9]+/internal"
                r"|\S+:[0-9]+/(?:-?[0-9]+|bootstrap|internal))")
_BROKER = r"^(?P<broker>" + _BROKER_NAME + "): "
_BROKER_STRIP = r"^" + _BROKER_NAME + ": "

# Each pattern quotes the format string in rdkafka_broker.c it matches.
_EVENTS: list[tuple[str, str, str]] = [
    # "Sent %sRequest (v%hd, %zu bytes @ %zu, CorrId %d)"; before v0.9.2
    # "Sent %sRequest (v%hd, %zd bytes, CorrId %d)".
    ("send", "Sent ",
     (r"^Sent (?P<request>[A-Za-z]+)Request \(v(?P<api_version>[0-9]{1,4}), "
      r"(?P<size_bytes>[0-9]{1,18}) bytes(?: @ [0-9]+)?, CorrId (?P<corr_id>-?[0-9]{1,10})\)")),
    # "Sent partial %sRequest (v%hd, %zd+%zd/%zu bytes, CorrId %d)"
    ("send_partial", "Sent partial ",
     (r"^Sent partial (?P<request>[A-Za-z]+)Request \(v(?P<api_version>[0-9]{1,4}), "
      r"(?P<detail>[0-9]+\+[0-9]+)/(?P<size_bytes>[0-9]{1,18}) bytes, CorrId (?P<corr_id>-?[0-9]{1,10})\)")),
    # "Received %sResponse (v%hd, %zu bytes, CorrId %d, rtt %.2fms)"
    ("recv", "Received ",
     (r"^Received (?P<request>[A-Za-z]+)Response \(v(?P<api_version>[0-9]{1,4}), "
      r"(?P<size_bytes>[0-9]{1,18}) bytes, CorrId (?P<corr_id>-?[0-9]{1,10}), rtt (?P<rtt_ms>[0-9]{1,12}(?:\.[0-9]{1,6})?)ms\)")),
    # "Retrying %sRequest (v%hd, %zu bytes, retry %d/%d, prev CorrId %d) in %dms";
    # before v0.11.4 "Retrying %sRequest (v%hd, %zu bytes, retry %d/%d)".
    ("retry", "Retrying ",
     (r"^Retrying (?P<request>[A-Za-z]+)Request \(v(?P<api_version>[0-9]{1,4}), "
      r"(?P<size_bytes>[0-9]{1,18}) bytes, retry (?P<detail>[0-9]+/[0-9]+)"
      r"(?:, prev CorrId (?P<corr_id>-?[0-9]{1,10}))?\)")),
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

# The same patterns with the API name captured up to the space, then its
# "Request"/"Response" suffix checked and cut: "(?P<request>[A-Za-z]+)Request"
# makes RE2 try every split of the word, which costs it twice the time.
_ONE_PASS = {
    name: (re.sub(r"\(\?P<request>\[A-Za-z\]\+\)(Request|Response) ", r"(?P<request>[A-Za-z]+) ", pat),
           "Response" if name == "recv" else "Request")
    for name, _, pat in _EVENTS if "(?P<request>" in pat
}


def _extract_event(text: pa.Array, name: str, pattern: str, fast: bool) -> tuple[pa.StructArray, np.ndarray]:
    """The pattern's groups for each line (null where it does not match),
    and where it matched."""
    if not fast or name not in _ONE_PASS:
        got = pc.extract_regex(text, pattern)
        return got, pc.is_valid(got).to_numpy(zero_copy_only=False)
    one_pass, suffix = _ONE_PASS[name]
    got = pc.extract_regex(text, one_pass)
    api = pc.struct_field(got, "request")
    ok = pc.and_(pc.ends_with(api, suffix), pc.greater(pc.utf8_length(api), len(suffix)))
    hit = _mask(ok)
    fields = [pc.utf8_slice_codeunits(api, 0, -len(suffix)) if f == "request" else pc.struct_field(got, f)
              for f in got.type.names]
    return pa.StructArray.from_arrays(fields, names=got.type.names, mask=pa.array(~hit)), hit


_EVENT_FIELDS = ("request", "api_version", "size_bytes", "corr_id", "rtt_ms", "detail")
# Groups that may not take part in a match (RE2 then gives ""): null them.
_OPTIONAL = {"retry": ("corr_id",)}

# ---- the client libraries' own log output around librdkafka's message ----

# Confluent.Kafka (.NET) Loggers.ConsoleLogger:
#   var now = DateTime.Now.ToString("yyyy-MM-dd HH:mm:ss.fff");
#   Console.Error.WriteLine($"{logInfo.Level}|{now}|{logInfo.Name}|{logInfo.Facility}| {logInfo.Message}");
# Level is the SyslogLevel enum's name: Emergency = 0 ... Debug = 7.
_DOTNET_LEVELS = ["Emergency", "Alert", "Critical", "Error", "Warning", "Notice", "Info", "Debug"]
_DOTNET = (r"^(?P<lname>" + "|".join(_DOTNET_LEVELS) + r")\|"
           r"(?P<date>[0-9]{4}-[0-9]{2}-[0-9]{2}) (?P<time>[0-9]{2}:[0-9]{2}:[0-9]{2})\.(?P<frac>[0-9]{3})\|"
           r"(?P<client>[^|]*)\|(?P<facility>[A-Za-z0-9_\-]*)\| ")
# confluent-kafka-go LogEvent.String():
#   fmt.Sprintf("[%v][%s][%s][%d]%s", logEvent.Timestamp.Format(time.RFC3339),
#               logEvent.Name, logEvent.Tag, logEvent.Level, logEvent.Message)
# RFC 3339 prints whole seconds: too coarse to time a request, so not kept.
_GO = (r"^.*?\[[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?(?:Z|[+\-][0-9]{2}:[0-9]{2})\]"
       r"\[(?P<client>[^\]]*)\]\[(?P<facility>[A-Za-z0-9_\-]*)\]\[(?P<level>[0-7])\]")
# JSON.stringify() of an event.log object: node-rdkafka's
# { severity, fac, message }, confluent-kafka-javascript's adds name; the
# KafkaJS-style logger's { message, fac, timestamp: Date.now(), name }.
_JSON_LINE = r'^\s*\{.*"fac"\s*:\s*"'
_JSON_MSG = r'"message"\s*:\s*"(?P<msg>(?:[^"\\]|\\.)*)"'
_JSON_FIELDS = [
    ("facility", r'"fac"\s*:\s*"(?P<v>[^"\\]*)"'),
    ("level", r'"severity"\s*:\s*(?P<v>[0-7])\b'),
    ("client", r'"name"\s*:\s*"(?P<v>[^"\\]*)"'),
    ("ts_ms", r'"timestamp"\s*:\s*(?P<v>[0-9]{12,14})\b'),
]
# console.log() of the same objects: Node's util.inspect puts the object on
# one line ("{ severity: 7, fac: 'SEND', message: '...' }") when it fits in
# breakLength (80), else one property a line, indented two spaces, between
# "{" and "}" lines. Strings are quoted ', else " or ` when they hold a '.
_KEY = r"(?:^\{ |^  |, )"


def _js_string(group: str) -> str:
    return rf"(?P<{group}>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|`(?:[^`\\]|\\.)*`)"


_INSPECT_MSG = _KEY + "message: " + _js_string("m")
_INSPECT_FIELDS = [
    ("facility", _KEY + "fac: " + _js_string("v")),
    ("level", _KEY + r"severity: (?P<v>[0-7])(?:,| \}|$)"),
    ("client", _KEY + "name: " + _js_string("v")),
    ("ts_ms", _KEY + r"timestamp: (?P<v>[0-9]{12,14})(?:,| \}|$)"),
]
_INSPECT_PART = r"^(?:\{|\}|  (?:severity|fac|name|timestamp): .*)$"
# confluent-kafka (Python) log_cb:
#   PyObject_CallMethod(h->logger, "log", "issss", level_map[level],
#                       "%s [%s] %s", fac, rd_kafka_name(rk), buf);
# so the record's message is "SEND [rdkafka#producer-1] [thrd:...]: ...",
# under any logging format. rd_kafka_name() is "%s#%s-%i" (client.id,
# producer or consumer, instance number): the "#type-N" anchors it.
_PYTHON = r"(?P<facility>[A-Za-z0-9_]+) \[(?P<client>[^\]\s]*#[a-z_]+-[0-9]+)\] "
_PYTHON_SPLIT = r"[A-Za-z0-9_]+ \[[^\]\s]*#[a-z_]+-[0-9]+\] "
# %(asctime)s: "2026-11-22 04:42:32,123" (local time, no zone unless the
# datefmt adds one); with a datefmt such as "%H:%M:%S" plus ",%(msecs)03d"
# only the time of day.
_PY_TIME = (r"(?:(?P<date>[0-9]{4}-[0-9]{2}-[0-9]{2})[ T])?(?P<time>[0-9]{2}:[0-9]{2}:[0-9]{2})"
            r"(?:[.,](?P<frac>[0-9]{1,6}))?(?P<tz>Z|[+\-][0-9]{2}:?[0-9]{2}| [+\-][0-9]{4})?")
# confluent-kafka maps syslog levels 0-2 to CRITICAL and 5-6 to INFO: only
# DEBUG, WARNING and ERROR name one syslog level.
_PY_LEVEL = r"(?:^|[^A-Za-z])(?P<v>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)(?:[^A-Za-z]|$)"
_PY_LEVELS = {"DEBUG": 7, "WARNING": 4, "WARN": 4, "ERROR": 3}

_COLS = (("ts_us", pa.int64()), ("level", pa.int8()), ("facility", pa.string()),
         ("client", pa.string()), ("msg", pa.string()))


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


def _mask(arr) -> np.ndarray:
    return pc.fill_null(arr, False).to_numpy(zero_copy_only=False)


def _field(got: pa.StructArray, name: str) -> pa.Array:
    return pc.struct_field(got, name)


def _opt(got: pa.StructArray, name: str) -> pa.Array:
    """An optional group: RE2 gives "" when it did not take part."""
    v = pc.struct_field(got, name)
    return pc.if_else(pc.equal(v, ""), pa.scalar(None, v.type), v)


def _unquote(got: pa.StructArray, group: str) -> pa.Array:
    """A quoted JavaScript string without its quotes."""
    return pc.utf8_slice_codeunits(_field(got, group), 1, -1)


def _unescape(vals: pa.Array, chars: str) -> pa.Array:
    """Only the escapes of the quote and the backslash themselves; any other
    escape (\\n, \\uXXXX: not in librdkafka's own messages) is kept as
    printed."""
    if not pc.any(pc.match_substring(vals, "\\")).as_py():
        return vals
    return pc.replace_substring_regex(vals, r"\\([" + chars + r"])", r"\1")


def _local_ts(date, time, frac, tz) -> pa.Array:
    """Epoch microseconds of a printed date and time, as if UTC unless a
    zone is printed; null without a fraction of a second (whole seconds
    cannot time a request). No date: the time of day from 1970-01-01."""
    day = pc.coalesce(date, pa.scalar("1970-01-01"))
    secs = pc.strptime(pc.binary_join_element_wise(day, time, "T"), format="%Y-%m-%dT%H:%M:%S",
                       unit="s", error_is_null=True)
    us = pc.multiply(pc.cast(secs, pa.int64()), 1_000_000)
    us = pc.add(us, pc.cast(pc.utf8_rpad(frac, 6, "0"), pa.int64()))
    if tz is not None and pc.any(pc.is_valid(tz)).as_py():
        z = pc.utf8_trim_whitespace(pc.replace_substring(tz, ":", ""))
        z = pc.if_else(pc.equal(z, "Z"), "+0000", z)
        hh = pc.cast(pc.utf8_slice_codeunits(z, 1, 3), pa.int64())
        mm = pc.cast(pc.utf8_slice_codeunits(z, 3, 5), pa.int64())
        off = pc.multiply(pc.add(pc.multiply(hh, 3600), pc.multiply(mm, 60)), 1_000_000)
        off = pc.if_else(pc.starts_with(z, "-"), pc.negate(off), off)
        us = pc.subtract(us, pc.fill_null(off, 0))
    return us


# ---- librdkafka's own lines, cut by byte position ----
#
# Most of a big log is librdkafka's stderr format, and the regexes cost a
# pass each over every line. For a line that starts "%L|" its fields are
# found with numpy instead: its first four "|", the first "]" after
# " [thrd:", the first " " after that. Only what the patterns allow is cut
# this way; a facility or broker name is checked against the same RE2
# patterns, once per distinct value. Everything else (a prefix before the
# "%", a timestamp of another shape, a facility the header does not allow)
# is left to the regexes.

_FACILITY = r"^[A-Za-z0-9_\-]*$"
_BROKER_FULL = "^(?:" + _BROKER_NAME + ")$"
_THRD = np.frombuffer(b" [thrd:", dtype=np.uint8)
# "%u.%03u": up to 12 digits of seconds, ".", 3 of milliseconds.
_TS_WIDTH = 16


def _next_at(pos: np.ndarray, at: np.ndarray, k: int = 0) -> np.ndarray:
    """The k-th position in sorted ``pos`` at or after each ``at`` (a large
    number when there is none)."""
    padded = np.concatenate([pos, np.full(k + 1, np.iinfo(np.int64).max // 2, dtype=np.int64)])
    return padded[np.searchsorted(pos, at) + k]


def _byte(data: np.ndarray, at: np.ndarray) -> np.ndarray:
    """data[at], 0 where at is out of range."""
    ok = (at >= 0) & (at < len(data))
    out = np.zeros(len(at), dtype=np.uint8)
    out[ok] = data[at[ok]]
    return out


def _strings(lines: pa.Array, start: np.ndarray, stop: np.ndarray, valid: np.ndarray | None = None,
             home: np.ndarray | None = None) -> pa.Array:
    """lines' bytes [start, stop) as strings (positions in its data buffer);
    null where not valid. Where not valid, start and stop may point
    anywhere: an empty piece at ``home`` (the line's start) stands in."""
    if valid is not None:
        start, stop = np.where(valid, start, home), np.where(valid, stop, home)
    arr = views(start, stop - start, np.zeros(len(start), np.int64), [data_buffer(lines)])
    if valid is None or valid.all():
        return arr
    bitmap = pa.array(valid).buffers()[1]
    _, offsets, body = arr.buffers()
    return pa.Array.from_buffers(pa.string(), len(arr), [bitmap, offsets, body])


def _matches_unique(values: pa.Array, pattern: str) -> np.ndarray:
    """match_substring_regex, run once per distinct value."""
    enc = pc.dictionary_encode(values)
    hit = _mask(pc.match_substring_regex(enc.dictionary, pattern))
    return hit[enc.indices.to_numpy(zero_copy_only=False)]


def _plain_lines(lines: pa.Array) -> tuple[np.ndarray, dict]:
    """(which lines are plain librdkafka stderr lines, their columns)."""
    n = len(lines)
    off, data = offsets_data(lines)
    start, end = off[:-1], off[1:]
    plain = (end - start >= 10) & (_byte(data, start) == ord("%")) & (_byte(data, start + 2) == ord("|"))
    lvl = _byte(data, start + 1)
    plain &= (lvl >= ord("0")) & (lvl <= ord("7"))
    idx = np.flatnonzero(plain)
    if not len(idx):
        return plain, {}
    start, end = start[idx], end[idx]
    pipes = np.flatnonzero(data == ord("|"))
    p2, p3, p4 = (_next_at(pipes, start + 2, k) for k in (1, 2, 3))
    ok = (p4 + 1 < end) & (_byte(data, p4 + 1) == ord(" "))
    # The timestamp "%u.%03u" between the first and second "|".
    ts_len = p2 - start - 3
    ok &= (ts_len >= 5) & (ts_len <= _TS_WIDTH)
    g = gather(data, start + 3, np.where(ok, ts_len, 0), _TS_WIDTH)
    col = np.arange(_TS_WIDTH)
    dot_at = (ts_len - 4)[:, None]
    inside = col < ts_len[:, None]
    digit = (g >= ord("0")) & (g <= ord("9"))
    ok &= np.all(~inside | np.where(col == dot_at, g == ord("."), digit), axis=1)
    ms = np.zeros(len(idx), dtype=np.int64)
    for c in range(_TS_WIDTH):
        take = inside[:, c] & (c != dot_at[:, 0])
        ms = np.where(take, ms * 10 + (g[:, c].astype(np.int64) - ord("0")), ms)
    facility = _strings(lines, p2 + 1, p3, ok, start)
    ok &= _matches_unique(facility.fill_null(""), _FACILITY)

    keep = np.flatnonzero(ok)
    if len(keep) < len(idx):
        plain[idx[~ok]] = False
        start, end, p2, p3, p4, ms, idx = (a[keep] for a in (start, end, p2, p3, p4, ms, idx))
        facility = facility.take(pa.array(keep))
    # " [thrd:NAME]: ": NAME runs to the first "]", which ": " must follow.
    thrd = gather(data, p4 + 1, end - p4 - 1, len(_THRD))
    has_thrd = np.all(thrd == _THRD, axis=1)
    close = _next_at(np.flatnonzero(data == ord("]")), p4 + 8)
    has_thrd &= (close + 2 < end) & (_byte(data, close + 1) == ord(":")) & (_byte(data, close + 2) == ord(" "))
    rest = np.where(has_thrd, close + 3, p4 + 2)
    # "BROKER: ": the first word, if it ends in ":" and is a broker name.
    space = _next_at(np.flatnonzero(data == ord(" ")), rest)
    cand = (space < end) & (space - 1 > rest) & (_byte(data, space - 1) == ord(":"))
    broker = _strings(lines, rest, space - 1, cand, start)
    if cand.any():
        cand &= _matches_unique(broker.fill_null(""), _BROKER_FULL)
        broker = _strings(lines, rest, space - 1, cand, start)
    text_at = np.where(cand, space + 1, rest)
    return plain, {
        "ts_us": pa.array(ms * 1000),
        "level": pa.array((_byte(data, start + 1) - ord("0")).astype(np.int8)),
        "facility": facility,
        "client": _strings(lines, p3 + 1, p4),
        "thread": _strings(lines, p4 + 8, close, has_thrd, start),
        "broker": broker,
        "text": _strings(lines, text_at, end),
    }


class RdkafkaLogParser:
    """Feeds chunks of lines; stateless across chunks except for counts."""

    source = "rdkafka_log"

    def __init__(self, fast: bool = True) -> None:
        self.counts = ParseCounts(self.source)
        # False reads every line with the regexes; the tests hold the byte
        # level path for plain lines (_plain_lines) to its results.
        self.fast = fast

    def feed(self, lines: pa.Array, first_line_no: int = 1) -> pa.Table:
        if isinstance(lines, pa.ChunkedArray):
            lines = lines.combine_chunks()
        n = len(lines)
        self.counts.lines += n
        if n == 0:
            return SCHEMA.empty_table()
        if not self.fast:
            return self._feed_regex(lines, np.arange(first_line_no, first_line_no + n, dtype=np.int64))
        simple, fast = _plain_lines(lines)
        fast_table = None
        if simple.any():
            line_no = np.flatnonzero(simple) + first_line_no
            self.counts.parsed += len(line_no)
            fast_table = self._classified(pa.array(line_no), fast)
            if simple.all():
                return fast_table
        rest = np.flatnonzero(~simple)
        slow = self._feed_regex(lines.take(pa.array(rest)), rest + first_line_no)
        if fast_table is None:
            return slow
        both = pa.concat_tables([fast_table, slow])
        return both.take(pa.array(np.argsort(both["line_no"].to_numpy(), kind="stable")))

    def _feed_regex(self, lines: pa.Array, line_no_np: np.ndarray) -> pa.Table:
        """Every line read with the regexes: any format, any wording."""
        n = len(lines)
        line_no = pa.array(line_no_np)

        native = pc.fill_null(pc.match_substring_regex(lines, _HEADER), False)
        if pc.all(native).as_py():
            cols = self._native(lines)
        else:
            idx = np.flatnonzero(native.to_numpy(zero_copy_only=False))
            pieces = [(idx, self._native(lines.take(idx)))] if len(idx) else []
            rest = np.flatnonzero(~native.to_numpy(zero_copy_only=False))
            first_other = len(pieces)
            parts = self._other_formats(lines, rest, pieces)
            for _, c in pieces[first_other:]:
                c["msg"] = pc.utf8_replace_slice(c["msg"], 0, 0, " ")
            found = np.concatenate([i for i, _ in pieces]) if pieces else np.zeros(0, np.int64)
            unread = np.setdiff1d(rest, np.concatenate([found, parts]), assume_unique=True)
            if len(parts):
                self.counts.skip("record_part", len(parts))
            if len(unread):
                bad = np.zeros(n, dtype=bool)
                bad[unread] = True
                self._skip(lines, line_no, pa.array(bad), "not_librdkafka")
            if not pieces:
                return SCHEMA.empty_table()
            order = np.argsort(found, kind="stable")
            cols = {name: pa.concat_arrays([_as(c[name], typ) for _, c in pieces]).take(pa.array(order))
                    for name, typ in _COLS} if len(pieces) > 1 else pieces[0][1]
            line_no = line_no.take(pa.array(found[order]))
        m = len(line_no)
        self.counts.parsed += m
        return self._events(line_no, cols, m)

    @staticmethod
    def _native(lines: pa.Array) -> dict:
        # Splitting on "|" is several times faster than one capturing regex
        # over the whole, long line; the header check made it safe.
        parts = pc.split_pattern(lines, "|", max_splits=4)
        lvl_f, ts_f, fac_f, client_f, msg = (pc.list_element(parts, i) for i in range(5))
        ts_ms = pc.cast(pc.replace_substring(ts_f, ".", ""), pa.int64())
        return {"ts_us": pc.multiply(ts_ms, 1000), "level": pc.cast(pc.utf8_slice_codeunits(lvl_f, -1), pa.int8()),
                "facility": fac_f, "client": client_f, "msg": msg}

    def _other_formats(self, lines: pa.Array, rest: np.ndarray, pieces: list) -> np.ndarray:
        """Rows of the client libraries' formats, appended to pieces as
        (line indices, columns); returns the indices of the lines that are
        the other parts of multi-line records."""
        parts = np.zeros(0, np.int64)
        left = rest
        for fmt in ("dotnet", "go", "json", "inspect", "python"):
            if not len(left):
                break
            if fmt == "inspect":
                left, parts = self._inspect(lines, left, pieces)
            else:
                left = getattr(self, "_" + fmt)(lines, left, pieces)
        return parts

    @staticmethod
    def _match(lines: pa.Array, idx: np.ndarray, pattern: str):
        """The header's fields, and the message after it. The patterns end
        where the message begins: RE2 then finds submatches within the
        short header instead of running its slow engine over the line."""
        sub = lines.take(pa.array(idx))
        got = pc.extract_regex(sub, pattern)
        hit = pc.is_valid(got).to_numpy(zero_copy_only=False)
        mask = pa.array(hit)
        msg = pc.replace_substring_regex(sub.filter(mask), pattern, "", max_replacements=1)
        return got.filter(mask), msg, idx[hit], idx[~hit]

    def _dotnet(self, lines, idx, pieces) -> np.ndarray:
        got, msg, hit, left = self._match(lines, idx, _DOTNET)
        if len(hit):
            lv = pc.index_in(_field(got, "lname"), pa.array(_DOTNET_LEVELS))
            ts = _local_ts(_field(got, "date"), _field(got, "time"), _field(got, "frac"), None)
            pieces.append((hit, {"ts_us": ts, "level": pc.cast(lv, pa.int8()),
                                 "facility": _field(got, "facility"), "client": _field(got, "client"),
                                 "msg": msg}))
        return left

    def _go(self, lines, idx, pieces) -> np.ndarray:
        cand = _mask(pc.match_substring(lines.take(pa.array(idx)), "]["))
        if not cand.any():
            return idx
        got, msg, hit, miss = self._match(lines, idx[cand], _GO)
        left = np.sort(np.concatenate([idx[~cand], miss]))
        if len(hit):
            pieces.append((hit, {"ts_us": pa.nulls(len(hit), pa.int64()),
                                 "level": pc.cast(_field(got, "level"), pa.int8()),
                                 "facility": _field(got, "facility"), "client": _field(got, "client"),
                                 "msg": msg}))
        return left

    def _json(self, lines, idx, pieces) -> np.ndarray:
        cand = _mask(pc.match_substring_regex(lines.take(pa.array(idx)), _JSON_LINE))
        if not cand.any():
            return idx
        # The message is cut out first: its text must not pass for a key.
        got, others, hit, miss = self._match(lines, idx[cand], _JSON_MSG)
        left = np.sort(np.concatenate([idx[~cand], miss]))
        if not len(hit):
            return left
        vals = {name: _field(pc.extract_regex(others, pat), "v") for name, pat in _JSON_FIELDS}
        pieces.append((hit, self._object_cols(vals, _unescape(_field(got, "msg"), '"\\\\/'))))
        return left

    @staticmethod
    def _object_cols(vals: dict, msg: pa.Array) -> dict:
        ts = vals["ts_ms"]
        return {"ts_us": pc.multiply(pc.cast(ts, pa.int64()), 1000), "level": pc.cast(vals["level"], pa.int8()),
                "facility": vals["facility"], "client": vals["client"], "msg": msg}

    def _inspect(self, lines, idx, pieces) -> tuple[np.ndarray, np.ndarray]:
        sub = lines.take(pa.array(idx))
        msg_got = pc.extract_regex(sub, _INSPECT_MSG)
        is_msg = pc.is_valid(msg_got).to_numpy(zero_copy_only=False)
        if not is_msg.any():
            return idx, np.zeros(0, np.int64)
        # Record boundaries over the whole chunk: a multi-line record is the
        # lines from a "{" line to the next "}" line.
        n = len(lines)
        pos = np.arange(n)
        is_open = _mask(pc.equal(lines, "{"))
        is_close = _mask(pc.equal(lines, "}"))
        last_open = np.maximum.accumulate(np.where(is_open, pos, -1))
        last_close = np.maximum.accumulate(np.where(is_close, pos, -1))
        prev_close = np.concatenate([[-1], last_close[:-1]])
        rec = np.where(last_open > prev_close, last_open, -1)

        m_idx = idx[is_msg]
        m_rec = rec[m_idx]
        msg = _unescape(_unquote(msg_got.filter(pa.array(is_msg)), "m"), "'\"`\\\\")
        own = pc.replace_substring_regex(sub.filter(pa.array(is_msg)), _INSPECT_MSG, "", max_replacements=1)
        in_rec = np.isin(rec[idx], m_rec[m_rec >= 0]) & (rec[idx] >= 0) & ~is_msg
        r_idx = idx[in_rec]
        r_lines = sub.filter(pa.array(in_rec))
        vals = {}
        for name, pat in _INSPECT_FIELDS:
            v = pc.extract_regex(own, pat)
            v = _unquote(v, "v") if name in ("facility", "client") else _field(v, "v")
            if len(r_idx):
                rv = pc.extract_regex(r_lines, pat)
                rv = _unquote(rv, "v") if name in ("facility", "client") else _field(rv, "v")
                ok = pc.is_valid(rv).to_numpy(zero_copy_only=False)
                # Each record's value, looked up by the record's first line
                # (keys ascend with the line index).
                keys, kv = rec[r_idx[ok]], rv.filter(pa.array(ok))
                if len(keys):
                    at = np.minimum(np.searchsorted(keys, m_rec), len(keys) - 1)
                    found = (m_rec >= 0) & (keys[at] == m_rec)
                    v = pc.coalesce(v, kv.take(pa.array(at, mask=~found)))
            vals[name] = _unescape(v, "'\"`\\\\") if name in ("facility", "client") else v
        # An object without fac is some other console.log() output.
        keep = _mask(pc.is_valid(vals["facility"]))
        cols = self._object_cols({k: v.filter(pa.array(keep)) for k, v in vals.items()},
                                 msg.filter(pa.array(keep)))
        if keep.any():
            pieces.append((m_idx[keep], cols))
        kept_recs = m_rec[keep]
        part = in_rec & np.isin(rec[idx], kept_recs[kept_recs >= 0])
        part_lines = _mask(pc.match_substring_regex(sub, _INSPECT_PART))
        part &= part_lines
        left = idx[~(part | np.isin(idx, m_idx[keep]))]
        return left, idx[part]

    def _python(self, lines, idx, pieces) -> np.ndarray:
        # A split around the leftmost "FAC [name] " gives the logging
        # prefix and the message at a third of the cost of capturing them.
        sub = lines.take(pa.array(idx))
        parts = pc.split_pattern_regex(sub, _PYTHON_SPLIT, max_splits=1)
        hit_m = _mask(pc.equal(pc.list_value_length(parts), 2))
        if not hit_m.any():
            return idx
        mask = pa.array(hit_m)
        hit, left = idx[hit_m], idx[~hit_m]
        parts = parts.filter(mask)
        prefix, msg = pc.list_element(parts, 0), pc.list_element(parts, 1)
        got = pc.extract_regex(sub.filter(mask), _PYTHON)
        t = pc.extract_regex(prefix, _PY_TIME)
        ts = _local_ts(_opt(t, "date"), _field(t, "time"), _opt(t, "frac"), _opt(t, "tz"))
        lname = _field(pc.extract_regex(prefix, _PY_LEVEL), "v")
        level = pc.index_in(lname, pa.array(list(_PY_LEVELS)))
        level = pc.take(pa.array(list(_PY_LEVELS.values()), pa.int8()), level)
        pieces.append((hit, {"ts_us": ts, "level": level, "facility": _field(got, "facility"),
                             "client": _field(got, "client"), "msg": msg}))
        return left

    def _events(self, line_no: pa.Array, cols: dict, m: int) -> pa.Table:
        msg = cols["msg"]
        thread = pc.struct_field(pc.extract_regex(msg, _THREAD), "thread")
        rest = pc.replace_substring_regex(msg, _THREAD_STRIP, "", max_replacements=1)
        broker = pc.struct_field(pc.extract_regex(rest, _BROKER), "broker")
        text = pc.replace_substring_regex(rest, _BROKER_STRIP, "", max_replacements=1)
        return self._classified(line_no, {**cols, "thread": thread, "broker": broker, "text": text})

    def _classified(self, line_no: pa.Array, cols: dict) -> pa.Table:
        """The table, once each line is cut into header fields, thread,
        broker and text: which event the text is, and its fields."""
        text = cols["text"]
        m = len(text)
        codes = np.zeros(m, dtype=np.int8)
        names = ["other"]
        rows: list[np.ndarray] = []
        found: list[pa.StructArray] = []
        for name, prefix, pattern in _EVENTS:
            idx = np.flatnonzero(pc.starts_with(text, prefix).to_numpy(zero_copy_only=False))
            if not len(idx):
                continue
            got, hit = _extract_event(text.take(idx), name, pattern, self.fast)
            if name in _OPTIONAL:
                got = pa.StructArray.from_arrays(
                    [_opt(got, f) if f in _OPTIONAL[name] else _field(got, f) for f in got.type.names],
                    names=got.type.names, mask=pc.invert(pc.is_valid(got)))
            codes[idx[hit]] = len(names)
            names.append(name)
            rows.append(idx[hit])
            found.append(got.filter(pa.array(hit)))
        ev_cols = self._event_columns(m, rows, found)
        event = pc.cast(pa.DictionaryArray.from_arrays(pa.array(codes), pa.array(names)), pa.string())
        return pa.table(
            {
                "line_no": line_no,
                "ts_us": cols["ts_us"],
                "level": cols["level"],
                "facility": cols["facility"],
                "client": cols["client"],
                "thread": cols["thread"],
                "broker": cols["broker"],
                "event": event,
                **ev_cols,
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


def _as(arr, typ: pa.DataType) -> pa.Array:
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    return arr if arr.type == typ else pc.cast(arr, typ)


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
    return (p.counts.parsed + p.counts.skipped.get("record_part", 0)) / len(lines)
