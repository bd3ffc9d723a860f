"""librdkafka statistics, as users paste them -> tables ``stats`` and
``stats_topics``.

Input: any text holding the objects ``stats_cb`` delivers every
``statistics.interval.ms`` (see librdkafka's STATISTICS.md): one a line as
librdkafka writes them, pretty-printed over many lines, several on a line,
behind a logger's prefix, escaped inside a JSON log record, printed as a
Python dict or as rust-rdkafka's Debug print, broken by a terminal or an
editor, cut at either end (kdiag.parsers.loose_objects reads them). Markdown quote markers, code
fences and CRLF are taken off first (kdiag.parsers.pasted). Each object is a
snapshot; each snapshot becomes one row per broker (one row with no broker
when none of its brokers could be read). Field sets from 0.8 (``rtt`` with
min, max, avg, sum and cnt only) to 2.x: what a version does not report is
null.

Windowed figures are librdkafka's, in microseconds, converted to
milliseconds here (``_ms`` columns); the ``throttle`` window alone is in
milliseconds already (librdkafka adds the response's ThrottleTimeMs to it as
is).

Every line is counted: ``parsed`` when it holds part of a whole snapshot,
``cut`` when it holds only part of a snapshot that was cut (its rows say
``cut``), ``not_statistics`` when it holds text but no statistics,
``empty`` and ``markup`` (a code fence) otherwise.

======================  ========  ==========================================
column                  type      meaning (null when absent)
======================  ========  ==========================================
line_no                 int64     line where the snapshot starts (1-based)
ts_us                   int64     ``time`` (epoch seconds, whole) in microseconds
client                  string    ``name`` (rdkafka#producer-1)
broker                  string    broker handle name (ssl://h:p/id)
nodeid                  int32     broker node id (-1 bootstrap)
state                   string    UP, DOWN, ...
rtt_avg_ms              float64   ``rtt.avg``; likewise p50, p99
int_latency_*_ms        float64   produce() to in-flight: client-side queueing
outbuf_latency_*_ms     float64   time in the output buffer before the send
throttle_avg_ms         float64   broker throttle time, ``throttle.avg``;
throttle_max_ms         float64   ``throttle.max``
tx, txretries           int64     requests sent, retried
req_timeouts            int64     requests timed out
waitresp_cnt            int64     requests in flight at the snapshot
outbuf_cnt              int64     requests waiting to be sent at the snapshot
connects                int64     connection attempts
disconnects             int64     disconnects
rtt_p95_ms              float64   ``rtt.p95``; likewise ``_p99_99_ms``, ``_max_ms``,
                                  ``_min_ms``, for int_latency and outbuf_latency too
rtt_cnt                 int64     samples in the ``rtt`` window; likewise
                                  ``int_latency_cnt``, ``outbuf_latency_cnt``
throttle_p50_ms         float64   ``throttle.p50``; ``throttle_p99_ms`` likewise
txerrs, rxerrs          int64     send and receive errors
xmit_msgq_cnt           int64     messages queued for the broker's thread
outbuf_msg_cnt          int64     messages in requests waiting to be sent
waitresp_msg_cnt        int64     messages in requests in flight
msg_cnt, msg_size       int64     the client's queue at the snapshot: messages,
                                  bytes (repeated on each broker's row)
msg_max, replyq         int64     ``queue.buffering.max.messages``; events
                                  waiting for the application's poll()
snapshot                int64     the snapshot's ordinal in the input, from 1
cut                     bool      read from a snapshot that was cut
form                    string    how it was written: json, or ``+``-joined
                                  prefixed, concatenated, escaped,
                                  python_repr, rust_debug, pretty, wrapped;
                                  ``+key_by_position`` when a window's key
                                  was cut off and named by its place
======================  ========  ==========================================

``stats_topics``: one row per topic per snapshot (a topic of unknown name
for partitions pasted without it).

======================  ========  ==========================================
column                  type      meaning (null when absent)
======================  ========  ==========================================
line_no, snapshot       int64     as in ``stats``
ts_us, client           int64,    as in ``stats``
                        string
topic                   string    the topic's name
batchsize_avg           float64   ``batchsize.avg``: bytes a batch (MessageSet),
                                  as librdkafka reports; likewise p50, p99, max
batchcnt_avg            float64   ``batchcnt.avg``: messages a batch; likewise
                                  p50, p99, max
batches                 int64     batches in the window (``batchsize.cnt``)
partitions              int32     partitions reported (the -1 one not counted)
msgq_cnt, msgq_bytes    int64     messages queued, summed over the partitions
xmit_msgq_cnt           int64     messages queued for the broker thread; and
xmit_msgq_bytes                   their bytes (summed likewise)
txmsgs, txbytes         int64     messages and bytes sent (summed likewise)
cut, form               bool,     as in ``stats``
                        string
======================  ========  ==========================================
"""
from __future__ import annotations

import math

import pyarrow as pa

from kdiag.parsers.base import ParseCounts, scrub
from kdiag.parsers.format import BY_LINES, CHUNKS, CLIENT_QUEUE, TEXT_SCANNER, Format
from kdiag.parsers.loose_objects import CUT, Leading, Scanner
from kdiag.parsers.pasted import MARKUP, clean

_WINDOWS = ("rtt", "int_latency", "outbuf_latency")
_PCTS = ("avg", "p50", "p99")
_COUNTERS = ("tx", "txretries", "req_timeouts", "waitresp_cnt", "outbuf_cnt", "connects", "disconnects")
_MORE_PCTS = ("p95", "p99_99", "max", "min")
_MORE_COUNTERS = ("txerrs", "xmit_msgq_cnt", "outbuf_msg_cnt", "waitresp_msg_cnt", "rxerrs")
_CLIENT = ("msg_cnt", "msg_size", "msg_max", "replyq")

SCHEMA_V1 = pa.schema(
    [
        ("line_no", pa.int64()),
        ("ts_us", pa.int64()),
        ("client", pa.string()),
        ("broker", pa.string()),
        ("nodeid", pa.int32()),
        ("state", pa.string()),
        *[(f"{w}_{p}_ms", pa.float64()) for w in _WINDOWS for p in _PCTS],
        ("throttle_avg_ms", pa.float64()),
        ("throttle_max_ms", pa.float64()),
        *[(c, pa.int64()) for c in _COUNTERS],
    ]
)
SCHEMA = pa.schema(
    [
        *SCHEMA_V1,
        *[f for w in _WINDOWS for f in [*[(f"{w}_{p}_ms", pa.float64()) for p in _MORE_PCTS], (f"{w}_cnt", pa.int64())]],
        ("throttle_p50_ms", pa.float64()),
        ("throttle_p99_ms", pa.float64()),
        *[(c, pa.int64()) for c in (*_MORE_COUNTERS, *_CLIENT)],
        ("snapshot", pa.int64()),
        ("cut", pa.bool_()),
        ("form", pa.string()),
    ]
)

_BATCH = ("avg", "p50", "p99", "max")
# Per-partition counters, summed over a topic's partitions (the -1
# partition holds messages not yet given one: queued all the same).
_PARTITION_SUMS = ("msgq_cnt", "msgq_bytes", "xmit_msgq_cnt", "xmit_msgq_bytes", "txmsgs", "txbytes")
TOPICS_SCHEMA = pa.schema(
    [
        ("line_no", pa.int64()),
        ("snapshot", pa.int64()),
        ("ts_us", pa.int64()),
        ("client", pa.string()),
        ("topic", pa.string()),
        *[(f"batchsize_{p}", pa.float64()) for p in _BATCH],
        *[(f"batchcnt_{p}", pa.float64()) for p in _BATCH],
        ("batches", pa.int64()),
        ("partitions", pa.int32()),
        *[(c, pa.int64()) for c in _PARTITION_SUMS],
        ("cut", pa.bool_()),
        ("form", pa.string()),
    ]
)
SCHEMAS = {"stats": SCHEMA, "stats_topics": TOPICS_SCHEMA}

# A time past 146,000 years either side of the epoch is no clock's: such a
# row keeps its figures but no time, so that the windows the analysis builds
# around a time (a second either side, the gap to the previous emission)
# stay within 64 bits instead of failing the whole analysis on overflow.
TS_LIMIT_US = 2**62


def _num(v):
    # NaN and Infinity parse as JSON numbers (Python's json writes them):
    # no measurement, and they would reach the findings as invalid JSON.
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _ms(win, key, per_ms=1000.0):
    v = _num(win.get(key)) if isinstance(win, dict) else None
    try:
        return None if v is None else v / per_ms
    except OverflowError:  # an integer past float range
        return None


def _int(v, lo=-(2**63), hi=2**63 - 1):
    v = _num(v)
    return int(v) if v is not None and lo <= v <= hi else None


# What makes a dict a snapshot's root, a broker's or a topic's, where no
# "brokers" or "topics" key above it says so (its start was cut off).
_ROOT_KEYS = frozenset(("replyq", "msg_cnt", "msg_size", "msg_max", "msg_size_max", "simple_cnt",
                        "metadata_cache_cnt"))
_BROKER_KEYS = frozenset(("nodeid", "stateage", "outbuf_cnt", "outbuf_msg_cnt", "waitresp_cnt", "waitresp_msg_cnt",
                          "txerrs", "txretries", "req_timeouts", "rxerrs", "rxcorriderrs", "rxpartial", "connects",
                          "disconnects", "int_latency", "outbuf_latency", "rtt", "throttle", "toppars"))
WALK_DEPTH = 16
# An object open over more lines than this is taken as cut there: a pasted
# snapshot of a large cluster, pretty-printed, runs to some ten thousand.
OPEN_LINES_MAX = 500_000
# How each line is counted, the higher winning where objects share a line.
_EMPTY, _MARKUP, _TEXT, _CUT_LINE, _PARSED = range(5)
_REASON = {_EMPTY: "empty", _MARKUP: "markup", _TEXT: "not_statistics", _CUT_LINE: "cut"}


def _is_root(d: dict) -> bool:
    return isinstance(d.get("brokers"), dict) or len(_ROOT_KEYS.intersection(d)) >= 2


def _is_broker(d: dict) -> bool:
    return ("nodeid" in d and "state" in d) or len(_BROKER_KEYS.intersection(d)) >= 3


def _is_topic(d: dict) -> bool:
    return "batchsize" in d or "batchcnt" in d or ("topic" in d and isinstance(d.get("partitions"), dict))


def _is_partition(d: dict) -> bool:
    return "partition" in d and ("msgq_cnt" in d or "xmit_msgq_cnt" in d or "txmsgs" in d)


class _Snapshot:
    __slots__ = ("root", "brokers", "topics", "partitions", "cut")

    def __init__(self, root, cut: bool):
        self.root, self.brokers, self.topics, self.partitions, self.cut = root, [], [], {}, cut

    @property
    def empty(self) -> bool:
        return self.root is None and not self.brokers and not self.topics and not self.partitions

    def unclaimed(self) -> None:
        """Partitions found outside any topic (a fragment of a topic's
        "partitions", its topic cut off): one topic of unknown name."""
        if self.partitions:
            self.topics.append((None, {"partitions": self.partitions}))


def snapshots(value, cut: bool) -> list[_Snapshot]:
    """The statistics snapshots in one object read from the text, in the
    order they stand: its root's, and any other root inside it (an object
    cut where another began inside it). Brokers and topics go to the root
    above them, or, with none (its start cut off), to the object's."""
    top = _Snapshot(None, cut)
    found = [top]
    stack = [(value, top, 0, None, None)]
    while stack:
        node, snap, depth, key, role = stack.pop()
        if isinstance(node, list):
            if depth < WALK_DEPTH:
                stack.extend((v, snap, depth + 1, None, None) for v in reversed(node))
            continue
        if not isinstance(node, dict):
            continue
        if _is_root(node):
            if snap.empty:
                snap.root, snap.cut = node, CUT in node or (cut and node is value)
            else:
                snap = _Snapshot(node, CUT in node)
                found.append(snap)
        elif role == "broker" or (role is None and _is_broker(node)):
            snap.brokers.append((key, node))
            continue
        elif role == "topic" or (role is None and _is_topic(node)):
            snap.topics.append((key, node))
            continue
        elif role is None and _is_partition(node):
            snap.partitions[key if isinstance(key, str) else str(len(snap.partitions))] = node
            continue
        if depth < WALK_DEPTH:
            for k, v in reversed(list(node.items())):
                if isinstance(v, (dict, list)):
                    stack.append((v, snap, depth + 1, k, _role_below(node, snap, role, k)))
    for s in found:
        s.unclaimed()
    return [s for s in found if not s.empty]


def _role_below(node, snap, role, key):
    if role == "brokers":
        return "broker"
    if role == "topics":
        return "topic"
    if node is snap.root and key in ("brokers", "topics"):
        return key
    return None


# A broker's windows in the order rdkafka.c's statistics emitter writes
# them: before v0.11.5 "int_latency", "rtt", "throttle", each of min, max,
# avg, sum and cnt only; from v0.11.5 "int_latency", "outbuf_latency",
# "rtt", "throttle", with stddev and the percentiles. A window pasted with
# its key cut off (loose_objects.Leading) is named by the key after it and
# the era its own keys give; the row's form says so.
_WINDOW_BEFORE_V0_11_5 = {"rtt": "int_latency", "throttle": "rtt"}
_WINDOW_SINCE_V0_11_5 = {"outbuf_latency": "int_latency", "rtt": "outbuf_latency", "throttle": "rtt"}
_WINDOW_KEYS = frozenset(("min", "max", "avg", "sum", "cnt", "stddev", "hdrsize", "p50", "p75", "p90", "p95", "p99",
                          "p99_99", "outofrange"))
KEY_BY_POSITION = "key_by_position"


def _named_leading(b: dict) -> tuple[dict, bool]:
    """The broker's dict with a window whose key was cut off named, and
    whether one was."""
    lead = next((k for k in b if isinstance(k, Leading)), None)
    if lead is None:
        return b, False
    win, after = b[lead], next((k for k in b if isinstance(k, str)), None)
    if not isinstance(win, dict) or "avg" not in win or not _WINDOW_KEYS.issuperset(win):
        return b, False
    name = (_WINDOW_SINCE_V0_11_5 if "p50" in win or "stddev" in win else _WINDOW_BEFORE_V0_11_5).get(after)
    if name is None or name in b:
        return b, False
    return {name: win, **b}, True


def _text(v):
    return v if isinstance(v, str) else None


def _plain(win, key):
    v = _num(win.get(key)) if isinstance(win, dict) else None
    return None if v is None else float(v)


def _sums(parts) -> tuple[int | None, list]:
    """The topic's partitions (-1 not one) and its counters summed over
    them, null where no partition reports one."""
    if not isinstance(parts, dict):
        return None, [None] * len(_PARTITION_SUMS)
    real = 0
    sums: list = [None] * len(_PARTITION_SUMS)
    for k, p in parts.items():
        if not isinstance(p, dict):
            continue
        real += _int(p.get("partition")) != -1 and k != "-1"
        for i, c in enumerate(_PARTITION_SUMS):
            v = _int(p.get(c))
            if v is not None:
                sums[i] = _int((sums[i] or 0) + v)
    return real, sums


def _cleaned(raw) -> tuple[str, str | None]:
    """pasted.clean, whose link and quote rewrites are passed over for the
    lines that cannot hold one (most lines of statistics, 6 KB each)."""
    if isinstance(raw, str) and "<" not in raw and "http" not in raw and "\r" not in raw \
            and raw.lstrip()[:1] not in (">", "`", "~", "$", "#", "%", "[", "P"):
        return raw.rstrip(), None
    return clean(raw)


class StatsParser:
    source = "stats"
    SCHEMA = SCHEMA
    SCHEMAS = SCHEMAS

    def __init__(self) -> None:
        self.counts = ParseCounts(self.source)
        self.scanner = Scanner()
        self.snapshot = 0
        self.base: int | None = None     # the first line not counted yet
        self.held = bytearray()          # how lines base.. are counted so far
        self.texts: dict[int, str] = {}  # a few of them, for the examples
        self.rows: dict[str, list] = self._empty_rows()

    @staticmethod
    def _empty_rows() -> dict[str, dict[str, list]]:
        return {name: {f.name: [] for f in schema} for name, schema in SCHEMAS.items()}

    def feed(self, lines, first_line_no: int = 1) -> dict[str, pa.Table]:
        if hasattr(lines, "to_pylist"):
            lines = lines.to_pylist()
        for no, raw in enumerate(lines, first_line_no):
            self.counts.lines += 1
            text, what = _cleaned(raw)
            if self.base is None:
                self.base = no
            self.held.append(_MARKUP if what == MARKUP else _EMPTY if not text.strip() else _TEXT)
            if text.strip() and len(self.texts) < 8:
                self.texts[no] = text
            for f in self.scanner.line(no, text):
                self._take(f)
            since = self.scanner.open_since
            if since is None:
                self._count(no)
            elif no - since >= OPEN_LINES_MAX:
                for f in self.scanner.end():
                    self._take(f)
                self._count(no)
        return self._table()

    def finish(self) -> dict[str, pa.Table]:
        for f in self.scanner.end():
            self._take(f)
        if self.base is not None:
            self._count(self.base + len(self.held) - 1)
        return self._table()

    def _table(self) -> dict[str, pa.Table]:
        tables, self.rows = self.rows, self._empty_rows()
        out = {}
        for name, rows in tables.items():
            try:
                out[name] = pa.table(rows, schema=SCHEMAS[name])
            except UnicodeEncodeError:
                out[name] = pa.table(scrub(rows), schema=SCHEMAS[name])
        return out

    def _count(self, last: int) -> None:
        """Lines base..last counted, each as the best of what it held."""
        for no, code in enumerate(self.held[:last - self.base + 1], self.base):
            if code == _PARSED:
                self.counts.parsed += 1
            elif code in (_EMPTY, _MARKUP):
                self.counts.skip(_REASON[code])
            elif no in self.texts:
                self.counts.reject(no, _REASON[code], self.texts[no])
            else:
                self.counts.skip(_REASON[code])
        del self.held[:last - self.base + 1]
        self.texts = {n: t for n, t in self.texts.items() if n > last}
        self.base = last + 1 if self.held else None

    def _take(self, f) -> None:
        """One object read from the text: its snapshots' rows, and its lines
        counted as what it was."""
        snaps = snapshots(f.value, f.cut)
        code = _PARSED if any(not s.cut for s in snaps) else _CUT_LINE if snaps else _TEXT
        lo = max(f.first, self.base)
        for i in range(lo - self.base, min(f.last - self.base + 1, len(self.held))):
            if self.held[i] >= _TEXT and code > self.held[i]:
                self.held[i] = code
        for s in snaps:
            self.snapshot += 1
            self._rows(s, f.first, f.form)

    def _rows(self, s: _Snapshot, line_no: int, form: str) -> None:
        root = s.root if s.root is not None else {}
        t = _num(root.get("time"))
        ts = None if t is None else _int(t * 1_000_000, -TS_LIMIT_US, TS_LIMIT_US)
        client = root.get("name")
        client = None if client is None else str(client)
        self._topic_rows(s, line_no, form, ts, client)
        brokers = s.brokers or ([(None, {})] if s.root is not None else [])
        rows = self.rows["stats"]
        for name, b in brokers:
            b, named = _named_leading(b)
            rows["line_no"].append(line_no)
            rows["ts_us"].append(ts)
            rows["client"].append(client)
            rows["broker"].append(name if isinstance(name, str) else _text(b.get("name")))
            rows["nodeid"].append(_int(b.get("nodeid"), -(2**31), 2**31 - 1))
            rows["state"].append(_text(b.get("state")))
            for w in _WINDOWS:
                win = b.get(w)
                for p in _PCTS + _MORE_PCTS:
                    rows[f"{w}_{p}_ms"].append(_ms(win, p))
                rows[f"{w}_cnt"].append(_int(win.get("cnt")) if isinstance(win, dict) else None)
            thr = b.get("throttle")
            for p in ("avg", "max", "p50", "p99"):
                rows[f"throttle_{p}_ms"].append(_ms(thr, p, 1.0))
            for c in (*_COUNTERS, *_MORE_COUNTERS):
                rows[c].append(_int(b.get(c)))
            for c in _CLIENT:
                rows[c].append(_int(root.get(c)))
            rows["snapshot"].append(self.snapshot)
            rows["cut"].append(s.cut)
            rows["form"].append(f"{form}+{KEY_BY_POSITION}" if named else form)

    def _topic_rows(self, s: _Snapshot, line_no: int, form: str, ts, client) -> None:
        rows = self.rows["stats_topics"]
        for name, t in s.topics:
            rows["line_no"].append(line_no)
            rows["snapshot"].append(self.snapshot)
            rows["ts_us"].append(ts)
            rows["client"].append(client)
            rows["topic"].append(name if isinstance(name, str) else _text(t.get("topic")))
            for w in ("batchsize", "batchcnt"):
                for p in _BATCH:
                    rows[f"{w}_{p}"].append(_plain(t.get(w), p))
            sizes = t.get("batchsize")
            rows["batches"].append(_int(sizes.get("cnt")) if isinstance(sizes, dict) else None)
            n, sums = _sums(t.get("partitions"))
            rows["partitions"].append(n)
            for c, v in zip(_PARTITION_SUMS, sums):
                rows[c].append(v)
            rows["cut"].append(s.cut)
            rows["form"].append(form)


def parse_all(lines, first_line_no: int = 1) -> tuple[dict[str, pa.Table], ParseCounts]:
    """Both tables (``SCHEMAS``) of the lines, and their counts."""
    p = StatsParser()
    parts = [p.feed(lines, first_line_no), p.finish()]
    return {name: pa.concat_tables([t[name] for t in parts]) for name in SCHEMAS}, p.counts


def parse_lines(lines, first_line_no: int = 1) -> tuple[pa.Table, ParseCounts]:
    """The ``stats`` table of the lines, and their counts."""
    tables, counts = parse_all(lines, first_line_no)
    return tables["stats"], counts


# Keys only statistics hold, as JSON, a Python repr or escaped JSON spells
# them: a sample without one is not read further.
_SIGNS = ("brokers", "int_latency", "txretries", "msg_cnt", "replyq", "outbuf_cnt", "req_timeouts", "batchcnt",
          "toppars", "waitresp_cnt", "rtt", "msgq_cnt", "batchsize")
# The sample's text read to score it: enough for several snapshots.
_SCORE_BYTES = 4 << 20


def looks_like(sample: list[str]) -> float:
    """The share of the sample's lines with text that hold statistics."""
    kept, size = [], 0
    for s in sample:
        kept.append(s[:_SCORE_BYTES - size])
        size += len(kept[-1])
        if size >= _SCORE_BYTES:
            break
    if not any(k in s for s in kept for k in _SIGNS):
        return 0.0
    p = StatsParser()
    p.feed(kept)
    p.finish()
    c = p.counts
    with_text = c.lines - c.skipped.get("empty", 0) - c.skipped.get("markup", 0)
    return (c.parsed + c.skipped.get("cut", 0)) / with_text if with_text else 0.0


FORMATS = (
    Format(name="stats", recognised_by=BY_LINES, recognise=looks_like, tables=SCHEMAS,
           schema_version=2, reads=CHUNKS, parser=StatsParser,
           title="librdkafka statistics", pseudonymised=TEXT_SCANNER,
           feeds={"stats": (CLIENT_QUEUE,), "stats_topics": (CLIENT_QUEUE,)},
           bundle_dir="stats", older={1: {"stats": SCHEMA_V1}}),
)
