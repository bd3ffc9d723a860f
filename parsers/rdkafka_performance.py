"""librdkafka's ``rdkafka_performance`` output -> tables ``perf_intervals``
and ``stats``.

``rdkafka_performance -P`` (examples/rdkafka_performance.c) prints, every
display interval (``-i``, 1000 ms by default), either a row of a table
(``-u``) or a summary line. The table's header names its columns (each
``| %10.10s ``; 2014's tool had no ``offset``, ``-l`` adds the four
``lat_`` columns), repeated every 20 rows::

    % Sending 20000 messages of size 1024 bytes
    |    elapsed |       msgs |      bytes |        rtt |         dr |     dr_m/s |    dr_MB/s |     dr_err |     tx_err |       outq |     offset
    |        514 |        600 |     614400 |          1 |          0 |          0 |       0.00 |          0 |          0 |        600 |          0

    % 741 messages produced (758784 bytes), 358 delivered (offset 40357, 0 failed) in 1529ms: 234 msgs/s and 0.24 MB/s, 0 produce failures, 383 in queue, no compression
    % 12 backpressures for 3400 produce calls: 0.353% backpressure rate

``elapsed`` is ms since the first message; ``msgs``/``bytes`` produced so
far; ``rtt`` the mean of the brokers' ``rtt.avg`` from the last statistics
callback, in whole ms (brokers under 0.1 ms left out; 0 when none passed
a message in that window); ``dr`` delivered so far; ``dr_m/s`` and
``dr_MB/s`` delivered per second since the start; ``dr_err`` failed
deliveries; ``tx_err`` produce() calls refused with the queue full
(backpressure); ``outq`` ``rd_kafka_outq_len()``: messages and requests
not yet delivered; ``offset`` the last delivered offset; ``lat_curr``,
``lat_avg``, ``lat_lo``, ``lat_hi`` (``-l``) produce() to delivery report
of a message, ms. A pasted summary line may have lost its ``% `` or
carry the ``^C`` that stopped the run. The consumer (``-C``) prints ``m/s``, ``MB/s``,
``rx_err`` and ``% N messages (B bytes) consumed in ...`` instead. Older
tools print ``Mb/s`` for the same bytes-per-microsecond figure (MB/s), and
2013's ``% N messages and B bytes produced in Nms: ...``.

``perf_intervals``: one row per table row or summary line, nothing the
tool printed dropped (columns null where the line has none):

==============  ========  ================================================
column          type      meaning
==============  ========  ================================================
line_no         int64     1-based line
ts_us           int64     ``elapsed_ms`` in microseconds (since the run's
                          start, not the epoch), as in ``stats``
run             int32     which run of the input, from 1 (a ``% Sending``
                          banner, a command line, or elapsed going back)
mode            string    ``producer`` or ``consumer``
form            string    which line gave it (below)
elapsed_ms      int64     ms since the run's first message
msgs            int64     messages produced (consumed) so far
bytes           int64     their bytes
rtt_ms          int64     ``rtt`` as printed (0: no message in the window)
delivered       int64     ``dr``: delivered so far
msgs_per_s      int64     ``dr_m/s`` (consumer ``m/s``)
mb_per_s        float64   ``dr_MB/s`` (``MB/s``, old ``Mb/s``)
dr_err          int64     failed deliveries (consumer ``rx_err``)
tx_err          int64     produce() refused, queue full
outq            int64     messages and requests not yet delivered
offset          int64     last delivered (consumed) offset
latency_curr_ms float64   ``lat_curr``; ``latency_avg_ms``, ``_lo``, ``_hi``
produce_calls   int64     produce() calls (backpressure lines)
throttle_ms     int64     ``% THROTTLED 3300ms by BROKER (ID)``: the
                          broker's throttle time (throttle_cb); ``broker``
                          its name, ``broker_id`` its id
detail          string    an error callback's or failed delivery's text
==============  ========  ================================================

``form`` says which line gave the row: ``table``, ``summary``,
``backpressure``, ``throttle`` or ``error`` (``% ERROR CALLBACK: ...``,
``% Message delivery failed ...``).

``stats`` (the statistics table, ``kdiag.parsers.stats``): one row per
producer table row (and per producer summary line, when that table has
``msg_cnt``), client ``rdkafka_performance``, broker null (the
column is the tool's mean over brokers), ``ts_us`` the elapsed time (since
the run's start, not the epoch), ``rtt_avg_ms`` the ``rtt`` column (null
for 0, which is no measurement), and ``outq`` as ``msg_cnt`` when the
statistics table has that column. Other columns stay null.

Skip reasons: ``empty``, ``markup``, ``log_line`` (librdkafka's own
``%5|...|FAC|`` lines among the rows), ``not_performance`` (any other
line), ``cut_row`` (a row cut short: it still gives its complete cells,
the last one, which may be cut, left out).
"""
from __future__ import annotations

import re

import pyarrow as pa

from kdiag.parsers import stats
from kdiag.parsers.base import ParseCounts
from kdiag.parsers.format import BY_LINES, CHUNKS, CLIENT_QUEUE, TEXT_SCANNER, Format
from kdiag.parsers.pasted import MARKUP, PROMPT, clean, pasted_lines

CLIENT = "rdkafka_performance"

PERF_SCHEMA = pa.schema([
    ("line_no", pa.int64()),
    ("ts_us", pa.int64()),
    ("run", pa.int32()),
    ("mode", pa.string()),
    ("form", pa.string()),
    ("elapsed_ms", pa.int64()),
    ("msgs", pa.int64()),
    ("bytes", pa.int64()),
    ("rtt_ms", pa.int64()),
    ("delivered", pa.int64()),
    ("msgs_per_s", pa.int64()),
    ("mb_per_s", pa.float64()),
    ("dr_err", pa.int64()),
    ("tx_err", pa.int64()),
    ("outq", pa.int64()),
    ("offset", pa.int64()),
    ("latency_curr_ms", pa.float64()),
    ("latency_avg_ms", pa.float64()),
    ("latency_lo_ms", pa.float64()),
    ("latency_hi_ms", pa.float64()),
    ("produce_calls", pa.int64()),
    ("throttle_ms", pa.int64()),
    ("broker", pa.string()),
    ("broker_id", pa.int32()),
    ("detail", pa.string()),
], metadata={"table": "perf_intervals"})

# The table header's names (COL_HDR) -> column, type.
_COLUMNS = {
    "elapsed": ("elapsed_ms", int), "msgs": ("msgs", int), "bytes": ("bytes", int), "rtt": ("rtt_ms", int),
    "dr": ("delivered", int), "dr_m/s": ("msgs_per_s", int), "m/s": ("msgs_per_s", int),
    "dr_MB/s": ("mb_per_s", float), "MB/s": ("mb_per_s", float), "dr_err": ("dr_err", int),
    "rx_err": ("dr_err", int), "tx_err": ("tx_err", int), "outq": ("outq", int), "offset": ("offset", int),
    "lat_curr": ("latency_curr_ms", float), "lat_avg": ("latency_avg_ms", float),
    "lat_lo": ("latency_lo_ms", float), "lat_hi": ("latency_hi_ms", float),
}
_CONSUMER_ONLY = {"m/s", "MB/s", "rx_err"}
_HEADER = re.compile(r"^\|\s*elapsed\s*\|\s*msgs\s*\|")
_ROW = re.compile(r"^\|\s*\d")
_CELL = re.compile(r"^-?\d{1,20}(?:\.\d{1,20})?$")
_N = r"(\d{1,20})"
_F = r"(\d{1,20}(?:\.\d{1,20})?)"
# Its "% ", which a paste may have lost, after the "^C" a terminal echoed when the run was stopped.
_LEAD = r"(?:\^C)?(?:% )?"
# print_stats' summary lines, 2014 onwards ("offset N, " since 2015) and 2013's.
_PRODUCED = re.compile(rf"^{_LEAD}{_N} messages produced \({_N} bytes\), {_N} delivered \((?:offset (-?\d{{1,20}}), )?"
                       rf"{_N} failed\) in {_N} ?ms: {_N} msgs/s and {_F} M[Bb]/s, {_N} produce failures, "
                       rf"(-?\d{{1,20}}) in queue")
_OLD_SUMMARY = re.compile(rf"^{_LEAD}{_N} messages and {_N} bytes (produced|consumed|sent) in {_N} ?ms: {_N} msgs/s and "
                          rf"{_F} M[Bb]/s(?:, {_N} messages failed)?")
_CONSUMED = re.compile(rf"^{_LEAD}(?:INTERVAL: )?{_N} messages \({_N} bytes\) consumed in {_N} ?ms: {_N} msgs/s "
                       rf"\({_F} M[Bb]/s\)(?:, latency curr/avg/lo/hi {_F}/{_F}/{_F}/{_F} ?ms)?")
_BACKPRESSURES = re.compile(rf"^{_LEAD}{_N} backpressures for {_N} produce calls")
_BACKPRESSURE = re.compile(rf"^% Backpressure (-?\d{{1,20}}) \(tx {_N}, txerr {_N}\)")
# throttle_cb: "% THROTTLED %dms by %s (%d)"; err_cb; the delivery report at -v -v.
_THROTTLED = re.compile(r"^% THROTTLED (\d{1,10}) ?ms by (\S{1,512}) \((-?\d{1,10})\)")
_ERROR = re.compile(r"^% (?:FATAL ERROR CALLBACK|ERROR CALLBACK|Message delivery failed)\b:? ?(.*)$")
_BANNER = re.compile(r"^% (?:Sending |Using random seed |All messages |Waiting for |\d+ messages in outq"
                     r"|Hard exit |Consumer reached |Consume error |Created |Finished )")
_LOG_LINE = re.compile(r"^%\d\|\d+(?:\.\d+)?\|[^|\s]{1,64}\|")
_COMMAND = re.compile(r"(?:^|[\s/])rdkafka_performance(?:\.exe)?\s+-")


def _stats_row(no: int, row: dict, columns: list[str]) -> dict:
    out = dict.fromkeys(columns)
    rtt = row.get("rtt_ms")
    elapsed = row.get("elapsed_ms")
    out.update(line_no=no, client=CLIENT, ts_us=None if elapsed is None else elapsed * 1000,
               rtt_avg_ms=float(rtt) if rtt else None)
    if "msg_cnt" in out:
        out["msg_cnt"] = row.get("outq")
    return out


class _Run:
    def __init__(self) -> None:
        self.columns: list[tuple[str | None, type | None]] | None = None
        self.mode: str | None = None
        self.elapsed = -1


class PerformanceParser:
    """rdkafka_performance lines in chunks -> {perf_intervals, stats}."""

    source = "rdkafka_performance"

    def __init__(self) -> None:
        self.counts = ParseCounts(self.source)
        self.run = _Run()
        self.runs = 0
        self._stats_columns = [f.name for f in stats.SCHEMA]

    # -- reading one line ------------------------------------------------------

    def _new_run(self) -> None:
        self.runs += 1
        self.run = _Run()

    def _header(self, text: str) -> None:
        names = [c.strip() for c in text.strip().strip("|").split("|")]
        run = self.run
        if run.columns is None and run.mode is not None and run.elapsed >= 0:
            self._new_run()
            run = self.run
        run.columns = [_COLUMNS.get(n, (None, None)) for n in names]
        run.mode = "consumer" if _CONSUMER_ONLY & set(names) else "producer"

    def _table_row(self, text: str) -> tuple[dict | None, bool]:
        """(row, cut): the row's cells by the header's columns."""
        cols = self.run.columns
        cells = text.strip().strip("|").split("|")
        cut = len(cells) < len(cols) or len(cells) > len(cols)
        if cut:
            cells = cells[:min(len(cells), len(cols)) - 1] if len(cells) < len(cols) else cells[:len(cols)]
        row: dict = {}
        for (col, kind), cell in zip(cols, cells):
            cell = cell.strip()
            if not _CELL.match(cell):
                return None, cut
            if col is not None:
                row[col] = kind(cell) if kind is float or "." not in cell else None
        return row, cut

    def _summary(self, text: str) -> dict | None:
        if m := _PRODUCED.match(text):
            msgs, nbytes, dr, off, err, ms, rate, mb, txe, q = m.groups()
            return dict(mode="producer", msgs=int(msgs), bytes=int(nbytes), delivered=int(dr),
                        offset=int(off) if off else None, dr_err=int(err), elapsed_ms=int(ms), msgs_per_s=int(rate),
                        mb_per_s=float(mb), tx_err=int(txe), outq=int(q))
        if m := _CONSUMED.match(text):
            msgs, nbytes, ms, rate, mb, *lat = m.groups()
            row = dict(mode="consumer", msgs=int(msgs), bytes=int(nbytes), elapsed_ms=int(ms), msgs_per_s=int(rate),
                       mb_per_s=float(mb))
            if lat[0] is not None:
                row.update(latency_curr_ms=float(lat[0]), latency_avg_ms=float(lat[1]), latency_lo_ms=float(lat[2]),
                           latency_hi_ms=float(lat[3]))
            return row
        if m := _OLD_SUMMARY.match(text):
            msgs, nbytes, how, ms, rate, mb, failed = m.groups()
            return dict(mode="consumer" if how == "consumed" else "producer", msgs=int(msgs), bytes=int(nbytes),
                        elapsed_ms=int(ms), msgs_per_s=int(rate), mb_per_s=float(mb),
                        dr_err=int(failed) if failed else None)
        return None

    def _event(self, text: str) -> dict | None:
        if m := _THROTTLED.match(text):
            return dict(form="throttle", throttle_ms=int(m.group(1)), broker=m.group(2), broker_id=int(m.group(3)))
        if m := _ERROR.match(text):
            return dict(form="error", detail=text[2:][:4096])
        return self._backpressure(text)

    def _backpressure(self, text: str) -> dict | None:
        if m := _BACKPRESSURES.match(text):
            return dict(mode="producer", form="backpressure", tx_err=int(m.group(1)), produce_calls=int(m.group(2)))
        if m := _BACKPRESSURE.match(text):
            return dict(mode="producer", form="backpressure", outq=int(m.group(1)), produce_calls=int(m.group(2)),
                        tx_err=int(m.group(3)))
        return None

    def read(self, no: int, text: str, what: str | None) -> tuple[str | None, dict | None]:
        """(why it was skipped or None, the row it gives or None)."""
        s = text.strip()
        if _HEADER.match(s):
            self._header(s)
            return None, None
        if _ROW.match(s):
            if self.run.columns is None:
                return "not_performance", None
            row, cut = self._table_row(s)
            if row is None:
                return "not_performance", None
            row.update(mode=self.run.mode, form="table")
            return ("cut_row" if cut else None), row
        if row := self._summary(s):
            row["form"] = "summary"
            return None, row
        if (row := self._backpressure(s)) and not s.startswith("%"):
            row.setdefault("mode", "producer")
            return None, row
        if s.startswith("%"):
            if _LOG_LINE.match(s):
                return "log_line", None
            if row := self._event(s):
                row.setdefault("mode", self.run.mode or "producer")
                return None, row
            if _BANNER.match(s):
                if s.startswith("% Sending ") and self.run.elapsed >= 0:
                    self._new_run()
                return None, None
            return "not_performance", None
        if _COMMAND.search(s):
            if self.run.elapsed >= 0 or self.run.columns is not None:
                self._new_run()
            return None, None
        return "not_performance", None

    # -- chunks ------------------------------------------------------------------

    def feed(self, lines, first_line_no: int = 1) -> dict[str, pa.Table]:
        if hasattr(lines, "to_pylist"):
            lines = lines.to_pylist()
        perf: list[dict] = []
        st: list[dict] = []
        c = self.counts
        if self.runs == 0:
            self.runs = 1
        for no, raw, text, what in pasted_lines(lines, c, first_line_no):
            why, row = self.read(no, text, what if what != PROMPT else None)
            if row is not None:
                self._place(no, row, perf, st)
            if why is None:
                c.parsed += 1
            elif why == "log_line":
                c.skip(why)
            else:
                c.reject(no, why, raw or "")
        return self._tables(perf, st)

    def _place(self, no: int, row: dict, perf: list, st: list) -> None:
        elapsed = row.get("elapsed_ms")
        if elapsed is not None:
            if elapsed < self.run.elapsed:   # the tool was run again
                cols, mode = self.run.columns, self.run.mode
                self._new_run()
                self.run.columns, self.run.mode = cols, mode
            self.run.elapsed = elapsed
        row.update(line_no=no, run=self.runs, ts_us=None if elapsed is None else elapsed * 1000)
        perf.append(row)
        # A summary line has no rtt: it gives the statistics table only its
        # queue, where that table has the column for it.
        if row["mode"] == "producer" and (row["form"] == "table" or (
                row["form"] == "summary" and "msg_cnt" in self._stats_columns and row.get("outq") is not None)):
            st.append(_stats_row(no, row, self._stats_columns))

    def _tables(self, perf: list[dict], st: list[dict]) -> dict[str, pa.Table]:
        return {
            "perf_intervals": pa.table({f.name: [r.get(f.name) for r in perf] for f in PERF_SCHEMA},
                                       schema=PERF_SCHEMA),
            "stats": pa.table({f.name: [r.get(f.name) for r in st] for f in stats.SCHEMA}, schema=stats.SCHEMA),
        }

    def finish(self) -> dict[str, pa.Table]:
        return self._tables([], [])


def parse_lines(lines, first_line_no: int = 1) -> tuple[dict[str, pa.Table], ParseCounts]:
    p = PerformanceParser()
    return p.feed(list(lines), first_line_no), p.counts


def looks_like(sample: list[str]) -> float:
    """Share of the sample's own lines that rdkafka_performance printed
    (librdkafka's log lines among them count); 0 without a table row or a
    summary line."""
    try:
        p = PerformanceParser()
        p.runs = 1
        good = total = rows = 0
        for i, raw in enumerate(sample, 1):
            text, what = clean(raw)
            if what == MARKUP or not text.strip():
                continue
            total += 1
            why, row = p.read(i, text, None)
            good += why in (None, "log_line", "cut_row")
            rows += row is not None
        return good / total if rows and total else 0.0
    except Exception:  # a guess about an arbitrary file must never raise
        return 0.0


# The statistics table is also the stats format's: a bundle records one
# version a table, so these tables take that format's version and history.
_STATS_FORMAT = stats.FORMATS[0]

FORMATS = (
    Format(name="rdkafka_performance", recognised_by=BY_LINES, recognise=looks_like,
           tables={"perf_intervals": PERF_SCHEMA, "stats": stats.SCHEMA}, schema_version=_STATS_FORMAT.schema_version,
           older=_STATS_FORMAT.older, reads=CHUNKS,
           parser=PerformanceParser, title="rdkafka_performance output", pseudonymised=TEXT_SCANNER,
           feeds={"perf_intervals": (CLIENT_QUEUE,), "stats": (CLIENT_QUEUE,)}, bundle_dir=None),
)
