"""The parser: chunks of lines -> ``rdkafka_events`` rows."""
from __future__ import annotations

import re
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kdiag.parsers import scan
from kdiag.parsers.base import ParseCounts
from kdiag.parsers.rdkafka_log.columns import (
    cast_to,
    extract_event,
    frac_resolution,
    local_ts,
    match_group,
    null_as_false,
    optional_group,
    resolution_where_stamped,
    typed_or_null,
    unescape,
    unquote,
)
from kdiag.parsers.rdkafka_log.finds import strip_finds
from kdiag.parsers.rdkafka_log.joins import join_wrapped, split_joined
from kdiag.parsers.rdkafka_log.patterns import (
    ANYWHERE,
    BROKER,
    BROKER_STRIP,
    BY_FACILITY,
    COLS,
    DOTNET,
    DOTNET_LEVELS,
    EVENT_FIELDS,
    EVENTS,
    FALLBACK,
    GO,
    HEADER,
    INSPECT_CONT,
    INSPECT_FIELDS,
    INSPECT_MSG,
    INSPECT_PART,
    JSON_FIELDS,
    JSON_LINE,
    JSON_MSG,
    OLD_PRINT,
    OPTIONAL,
    PY_LEVEL,
    PY_LEVELS,
    PY_TIME,
    PYTHON,
    PYTHON_SPLIT,
    SCHEMA,
    THREAD,
    THREAD_STRIP,
)
from kdiag.parsers.rdkafka_log.plain import plain_lines
from kdiag.parsers.rdkafka_log.wrapped import APP_PRODUCE, app_produce_lines, error_lines, unmangle, unquoted, wrapped
from kdiag.parsers.scan import byte_at
from kdiag.parsers.strings import data_buffer, offsets_data, validity, views, with_valid

# A disconnect's words where the FAIL facility is not printed: the
# timeouts' errstr, rd_kafka_broker_fail()'s reasons ("Receive failed: %s",
# "Send failed: %s", "Connect to %s failed: %s", "Disconnected", 0.8's
# "Failed to connect to broker at %s: %s"), and BROKERFAIL's "failed: err:"
# (but not "Local: Broker handle destroyed": the client shutting down).
_FAIL_TEXT = (r"^(?:[0-9]+ request\(s\) timed out|(?:Receive|Send) failed: |Connect to \S+ failed: |"
              r"Failed to connect to broker |Disconnected(?: |$)|Connection closed|"
              r"failed: err: (?:[^L]|Local: (?:[^B]|Broker [^h])))")
_FAIL_FIRST = np.frombuffer(b"0123456789RSCDFf", dtype=np.uint8)
# Events read by the compiled scans where built (scan.sent_received,
# scan.topic_lines), their patterns reading what those leave.
_COMPILED_FIELDS = {
    "send": ["request", "api_version", "size_bytes", "corr_id"],
    "recv": ["request", "api_version", "size_bytes", "corr_id", "rtt_ms"],
    "produce": ["topic", "partition", "msgs", "size_bytes"],
    "msgset": ["topic", "partition", "msgs", "error", "detail"],
}
_READ_COMPILED = tuple(_COMPILED_FIELDS)
# An ERROR copy follows its FAIL line within a few fail rows and a few ms
# (the two are logged one after the other, by different threads).
_COPY_WINDOW = 4
_COPY_US = 5_000
# The events found by a prefix (or a substring: ANYWHERE) of the text.
_NEEDLES = [(name, prefix) for name, prefix, _ in EVENTS if name not in BY_FACILITY]


class _Num(NamedTuple):
    """A compiled read's numbers for its rows; valid where ``ok`` (all
    when None) and inside the column's type."""
    values: np.ndarray
    ok: np.ndarray | None = None


class _Cut(NamedTuple):
    """A compiled read's strings: bytes [start, stop) of the texts' data
    buffer, for its rows."""
    start: np.ndarray
    stop: np.ndarray


# An event's fields for some of the chunk's rows: (rows, {field: an Arrow
# array of the pattern's captures, a _Num, a _Cut, or None for all null}).
Part = tuple[np.ndarray, dict]


def _compiled_read(texts: pa.Array, idx: np.ndarray, name: str, pattern: str) -> tuple[np.ndarray, list[Part]]:
    """Which of texts[idx] are the event, and their fields: read by the
    compiled scans (scan.sent_received, scan.topic_lines) where the texts
    lie, by the pattern where they are unsure of a line (optional groups
    null)."""
    names = _COMPILED_FIELDS[name]
    topic = name in ("produce", "msgset")
    cut = scan.topic_lines(texts, name == "msgset", idx) if topic else scan.sent_received(texts, name == "recv", idx)
    status = np.zeros(len(idx), dtype=np.int64) if cut is None else cut[:, 0]
    done = status == 1
    parts: list[Part] = []
    if done.any():
        c = cut[done]
        if topic:
            cols = {"topic": _Cut(c[:, scan.T_TOPIC], c[:, scan.T_TOPIC_END]), "partition": _Num(c[:, scan.T_PART]),
                    "msgs": _Num(c[:, scan.T_MSGS]), "size_bytes": _Num(c[:, scan.T_SIZE]),
                    "error": None, "detail": None}
        else:
            cols = {"request": _Cut(c[:, scan.S_REQ], c[:, scan.S_REQ_END]),
                    "api_version": _Num(c[:, scan.S_API], c[:, scan.S_API_OK] == 1),
                    "size_bytes": _Num(c[:, scan.S_SIZE]), "corr_id": _Num(c[:, scan.S_CORR]),
                    "rtt_ms": _Num(c[:, scan.S_RTT_N] / 10.0 ** c[:, scan.S_RTT_F], c[:, scan.S_RTT_OK] == 1)}
        parts.append((idx[done], {f: cols[f] for f in names}))
    hit = done.copy()
    rest = np.flatnonzero(status == 0)
    if len(rest):
        got, ok = extract_event(texts.take(pa.array(idx[rest])), name, pattern, True)
        got = got.filter(pa.array(ok))
        opt = OPTIONAL.get(name, ())
        parts.append((idx[rest[ok]], {f: optional_group(got, f) if f in opt else match_group(got, f) for f in names}))
        hit[rest[ok]] = True
    return hit, parts


def _number_column(m: int, typ: pa.DataType, have: list) -> pa.Array:
    """The rows' values of one numeric field from the parts that have it,
    later parts over earlier ones; an integer outside the type is null, as
    typed_or_null makes it."""
    values = np.zeros(m, dtype=typ.to_pandas_dtype())
    ok = np.zeros(m, dtype=bool)
    for rows, v in have:
        if v is None:
            ok[rows] = False
        elif isinstance(v, _Num):
            good = np.ones(len(rows), dtype=bool) if v.ok is None else v.ok.copy()
            if pa.types.is_integer(typ) and typ.bit_width < 64:
                limit = 2 ** (typ.bit_width - 1)
                good &= (v.values >= -limit) & (v.values < limit)
            values[rows] = np.where(good, v.values, 0)
            ok[rows] = good
        else:
            a = typed_or_null(v, typ)
            values[rows] = a.fill_null(0).to_numpy(zero_copy_only=False)
            ok[rows] = null_as_false(a.is_valid())
    return pa.Array.from_buffers(typ, m, [validity(ok), pa.py_buffer(values)], null_count=m - int(ok.sum()))


def _string_column(m: int, texts: pa.Array, have: list) -> pa.Array:
    """The rows' strings of one field from the parts that have it, later
    parts over earlier ones, copied out in row order at once."""
    buffers = [data_buffer(texts)]
    buf = np.zeros(m, dtype=np.int64)
    start = np.zeros(m, dtype=np.int64)
    length = np.zeros(m, dtype=np.int64)
    ok = np.zeros(m, dtype=bool)
    for rows, v in have:
        if v is None:
            ok[rows] = False
        elif isinstance(v, _Cut):
            buf[rows], start[rows], length[rows], ok[rows] = 0, v.start, v.stop - v.start, True
        else:
            off, _ = offsets_data(v)
            good = null_as_false(v.is_valid())
            buffers.append(data_buffer(v))
            buf[rows], start[rows], length[rows], ok[rows] = len(buffers) - 1, off[:-1], np.diff(off), good
    if not ok.any():
        return pa.nulls(m, pa.string())
    # A null's piece: empty, at the start of the first buffer, where it
    # cannot fall inside another (views() wants no overlaps).
    buf[~ok], start[~ok], length[~ok] = 0, 0, 0
    return with_valid(views(start, length, buf, buffers), ok)


def _coarse_recv_untimed(ts_us, resolution, codes: np.ndarray, names: list[str]):
    """A Received line's time of a second or coarser is left out: a
    request's time is then librdkafka's rtt, not the difference of two
    printed seconds (0 or 1000 ms). The Sent lines keep theirs: a send that
    left in pieces over many seconds is bounded by them."""
    if "recv" not in names or not len(resolution) or (pc.max(resolution).as_py() or 0) < 1_000_000:
        return ts_us, resolution
    coarse = null_as_false(pc.greater_equal(resolution, 1_000_000)) & (codes == names.index("recv"))
    if not coarse.any():
        return ts_us, resolution
    mask = pa.array(coarse)
    return (pc.if_else(mask, pa.scalar(None, pa.int64()), ts_us),
            pc.if_else(mask, pa.scalar(None, pa.int32()), resolution))


_CONT = re.compile(INSPECT_CONT)


def _inspect_continued(lines: pa.Array, m_idx: np.ndarray, msg: pa.Array) -> pa.Array:
    """A message util.inspect printed in pieces ("'...' +" at the end of the
    message line, the next pieces on the lines after): the pieces appended.
    Only the lines that end " +" pay the loop."""
    plus = null_as_false(pc.match_substring_regex(lines.take(pa.array(m_idx)), r"['\"`] \+$"))
    if not plus.any():
        return msg
    vals, n = msg.to_pylist(), len(lines)
    for k in np.flatnonzero(plus):
        j, more = int(m_idx[k]) + 1, True
        while more and j < n and vals[k] is not None:
            got = _CONT.match(lines[j].as_py() or "")
            if not got:
                break
            vals[k] += re.sub(r"\\(['\"`\\])", r"\1", got.group("m")[1:-1])
            more, j = bool(got.group("more")), j + 1
    return pa.array(vals, pa.string())


class RdkafkaLogParser:
    """Feeds chunks of lines; stateless across chunks except for counts."""

    source = "rdkafka_log"

    def __init__(self, fast: bool = True) -> None:
        self.counts = ParseCounts(self.source)
        # False reads every line with the regexes; the tests hold the byte
        # level path for plain lines (plain_lines) to its results.
        self.fast = fast
        self._last_fails: list = []

    def feed(self, lines: pa.Array, first_line_no: int = 1) -> pa.Table:
        if isinstance(lines, pa.ChunkedArray):
            lines = lines.combine_chunks()
        n = len(lines)
        self.counts.lines += n
        if n == 0:
            return SCHEMA.empty_table()
        lines = unmangle(lines)
        lines, repeat, header = strip_finds(lines)
        line_no = np.arange(first_line_no, first_line_no + n, dtype=np.int64)
        if header.any():
            self.counts.skip("find_header", int(header.sum()))
            keep = np.flatnonzero(~header)
            lines, line_no = lines.take(pa.array(keep)), line_no[keep]
        lines, line_no, joined_records = split_joined(lines, line_no)
        lines, keep = join_wrapped(lines)
        if len(keep) < len(line_no):
            self.counts.skip("joined", len(line_no) - len(keep))
            line_no = line_no[keep]
        table = self._feed_lines(lines, line_no)
        # Each piece of a split line was read as a row: the line counts once.
        self.counts.parsed -= joined_records
        self.counts.records_after_first += joined_records
        if (repeat != 1).any() and table.num_rows:
            at = table["line_no"].to_numpy() - first_line_no
            table = table.set_column(table.schema.get_field_index("repeat"), "repeat", pa.array(repeat[at]))
        return self._without_error_copies(table)

    def _without_error_copies(self, table: pa.Table) -> pa.Table:
        """The ERROR line that repeats a FAIL line dropped, counted as
        skipped ``error_copy``: without an error_cb, librdkafka logs the
        error event rd_kafka_broker_fail() raises again, facility ERROR,
        same text ("%3|..|FAIL|..| B: 3 request(s) timed out: disconnect"
        then "%3|..|ERROR|..| B: 3 request(s) timed out: disconnect"), and
        the judge counts each ``fail`` row as a disconnect. An ERROR line
        with no such FAIL line before it (the FAIL line not pasted) stays."""
        if not table.num_rows:
            return table
        fail = np.flatnonzero(null_as_false(pc.equal(table["event"], "fail")))
        if not len(fail):
            return table
        sub = table.select(["facility", "broker", "text", "ts_us"]).take(pa.array(fail)).to_pylist()
        # [row, is an ERROR line, broker, text, ts_us, copied]: the chunk
        # before's last fail rows first, at row -1.
        seen = self._last_fails + [[int(i), r["facility"] == "ERROR", r["broker"], r["text"], r["ts_us"], False]
                                   for i, r in zip(fail, sub)]
        drop = []
        for k in range(len(self._last_fails), len(seen)):
            row, is_error, broker, text, ts, _ = seen[k]
            if not is_error:
                continue
            for before in reversed(seen[max(0, k - _COPY_WINDOW):k]):
                _, b_error, b_broker, b_text, b_ts, copied = before
                if (not b_error and not copied and (b_broker, b_text) == (broker, text)
                        and (ts is None or b_ts is None or abs(ts - b_ts) <= _COPY_US)):
                    before[5] = True
                    drop.append(row)
                    break
        self._last_fails = [[-1, *f[1:]] for f in seen[-_COPY_WINDOW:]]
        if not drop:
            return table
        keep = np.ones(table.num_rows, dtype=bool)
        keep[drop] = False
        self.counts.parsed -= len(drop)
        self.counts.skip("error_copy", len(drop))
        return table.filter(pa.array(keep))

    def _feed_lines(self, lines: pa.Array, line_no: np.ndarray) -> pa.Table:
        if not self.fast:
            return self._feed_regex(lines, line_no)
        simple, fast = plain_lines(lines)
        fast_table = None
        if simple.any():
            self.counts.parsed += int(simple.sum())
            fast_table = self._classified(pa.array(line_no[simple]), fast)
            if simple.all():
                return fast_table
        rest = np.flatnonzero(~simple)
        slow = self._feed_regex(lines.take(pa.array(rest)), line_no[rest])
        if fast_table is None:
            return slow
        both = pa.concat_tables([fast_table, slow])
        return both.take(pa.array(np.argsort(both["line_no"].to_numpy(), kind="stable")))

    def _feed_regex(self, lines: pa.Array, line_no_np: np.ndarray) -> pa.Table:
        """Every line read with the regexes: any format, any wording."""
        n = len(lines)
        line_no = pa.array(line_no_np)

        native = pc.fill_null(pc.match_substring_regex(lines, HEADER), False)
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
            cols = {name: pa.concat_arrays([cast_to(c[name], typ) for _, c in pieces]).take(pa.array(order))
                    for name, typ in COLS} if len(pieces) > 1 else pieces[0][1]
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
                "facility": fac_f, "client": client_f, "msg": msg, "ts_resolution_us": resolution_where_stamped(ts_ms, 1000)}

    def _other_formats(self, lines: pa.Array, rest: np.ndarray, pieces: list) -> np.ndarray:
        """Rows of the client libraries' formats, appended to pieces as
        (line indices, columns); returns the indices of the lines that are
        the other parts of multi-line records."""
        parts = np.zeros(0, np.int64)
        left = rest
        for fmt in ("dotnet", "go", "old_print", "json", "inspect", "python", "wrapped", "errors", "app_produce"):
            if not len(left):
                break
            if fmt == "inspect":
                left, parts = self._inspect(lines, left, pieces)
            elif fmt == "wrapped":   # any other wrapper: next to last, as it asks little of a line
                left = wrapped(lines, left, pieces)
            elif fmt == "errors":    # no log message, only an error of librdkafka's
                left = error_lines(lines, left, pieces)
            elif fmt == "app_produce":   # the application's own line, last: nothing of librdkafka's in it
                left = app_produce_lines(lines, left, pieces)
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
        got, msg, hit, left = self._match(lines, idx, DOTNET)
        if len(hit):
            lname = match_group(got, "lname")
            lv = pc.coalesce(pc.index_in(lname, pa.array(DOTNET_LEVELS)),
                             pc.cast(pc.if_else(pc.equal(pc.utf8_length(lname), 1), lname, None), pa.int32()))
            ts = local_ts(match_group(got, "date"), match_group(got, "time"), match_group(got, "frac"), None)
            pieces.append((hit, {"ts_us": ts, "level": pc.cast(lv, pa.int8()),
                                 "facility": match_group(got, "facility"), "client": match_group(got, "client"),
                                 "msg": msg, "ts_resolution_us": resolution_where_stamped(ts, 1000)}))
        return left

    def _go(self, lines, idx, pieces) -> np.ndarray:
        cand = null_as_false(pc.match_substring(lines.take(pa.array(idx)), "]["))
        if not cand.any():
            return idx
        got, msg, hit, miss = self._match(lines, idx[cand], GO)
        left = np.sort(np.concatenate([idx[~cand], miss]))
        if len(hit):
            frac = optional_group(got, "frac")
            ts = local_ts(match_group(got, "date"), match_group(got, "time"), pc.utf8_slice_codeunits(frac, 0, 6),
                          match_group(got, "tz"))
            pieces.append((hit, {"ts_us": ts, "level": pc.cast(match_group(got, "level"), pa.int8()),
                                 "facility": match_group(got, "facility"), "client": match_group(got, "client"),
                                 "msg": msg, "ts_resolution_us": frac_resolution(ts, frac)}))
        return left

    def _old_print(self, lines, idx, pieces) -> np.ndarray:
        cand = null_as_false(pc.match_substring(lines.take(pa.array(idx)), "RDKAFKA-"))
        if not cand.any():
            return idx
        got, msg, hit, miss = self._match(lines, idx[cand], OLD_PRINT)
        left = np.sort(np.concatenate([idx[~cand], miss]))
        if len(hit):
            ms = pc.add(pc.multiply(pc.cast(optional_group(got, "s"), pa.int64()), 1000),
                        pc.cast(optional_group(got, "frac"), pa.int64()))
            ts = pc.multiply(ms, 1000)
            pieces.append((hit, {"ts_us": ts, "level": pc.cast(match_group(got, "level"), pa.int8()),
                                 "facility": match_group(got, "facility"),
                                 "client": pc.utf8_trim_whitespace(match_group(got, "client")),
                                 "msg": msg, "ts_resolution_us": resolution_where_stamped(ts, 1000)}))
        return left

    def _json(self, lines, idx, pieces) -> np.ndarray:
        cand = null_as_false(pc.match_substring_regex(lines.take(pa.array(idx)), JSON_LINE))
        if not cand.any():
            return idx
        # The message is cut out first: its text must not pass for a key.
        got, others, hit, miss = self._match(lines, idx[cand], JSON_MSG)
        left = np.sort(np.concatenate([idx[~cand], miss]))
        if not len(hit):
            return left
        vals = {name: match_group(pc.extract_regex(others, pat), "v") for name, pat in JSON_FIELDS}
        pieces.append((hit, self._object_cols(vals, unescape(match_group(got, "msg"), '"\\\\/'))))
        return left

    @staticmethod
    def _object_cols(vals: dict, msg: pa.Array) -> dict:
        ts = pc.multiply(pc.cast(vals["ts_ms"], pa.int64()), 1000)
        return {"ts_us": ts, "level": pc.cast(vals["level"], pa.int8()),
                "facility": vals["facility"], "client": vals["client"], "msg": msg,
                "ts_resolution_us": resolution_where_stamped(ts, 1000)}

    def _inspect(self, lines, idx, pieces) -> tuple[np.ndarray, np.ndarray]:
        sub = lines.take(pa.array(idx))
        msg_got = pc.extract_regex(sub, INSPECT_MSG)
        is_msg = pc.is_valid(msg_got).to_numpy(zero_copy_only=False)
        if not is_msg.any():
            return idx, np.zeros(0, np.int64)
        # Record boundaries over the whole chunk: a multi-line record is the
        # lines from a "{" line to the next "}" line.
        n = len(lines)
        pos = np.arange(n)
        is_open = null_as_false(pc.equal(lines, "{"))
        is_close = null_as_false(pc.equal(lines, "}"))
        last_open = np.maximum.accumulate(np.where(is_open, pos, -1))
        last_close = np.maximum.accumulate(np.where(is_close, pos, -1))
        prev_close = np.concatenate([[-1], last_close[:-1]])
        rec = np.where(last_open > prev_close, last_open, -1)

        m_idx = idx[is_msg]
        m_rec = rec[m_idx]
        msg = unescape(unquote(msg_got.filter(pa.array(is_msg)), "m"), "'\"`\\\\")
        msg = _inspect_continued(lines, m_idx, msg)
        own = pc.replace_substring_regex(sub.filter(pa.array(is_msg)), INSPECT_MSG, "", max_replacements=1)
        in_rec = np.isin(rec[idx], m_rec[m_rec >= 0]) & (rec[idx] >= 0) & ~is_msg
        r_idx = idx[in_rec]
        r_lines = sub.filter(pa.array(in_rec))
        vals = {}
        for name, pat in INSPECT_FIELDS:
            v = pc.extract_regex(own, pat)
            v = unquote(v, "v") if name in ("facility", "client") else match_group(v, "v")
            if len(r_idx):
                rv = pc.extract_regex(r_lines, pat)
                rv = unquote(rv, "v") if name in ("facility", "client") else match_group(rv, "v")
                ok = pc.is_valid(rv).to_numpy(zero_copy_only=False)
                # Each record's value, looked up by the record's first line
                # (keys ascend with the line index).
                keys, kv = rec[r_idx[ok]], rv.filter(pa.array(ok))
                if len(keys):
                    at = np.minimum(np.searchsorted(keys, m_rec), len(keys) - 1)
                    found = (m_rec >= 0) & (keys[at] == m_rec)
                    v = pc.coalesce(v, kv.take(pa.array(at, mask=~found)))
            vals[name] = unescape(v, "'\"`\\\\") if name in ("facility", "client") else v
        # An object without fac is some other console.log() output.
        keep = null_as_false(pc.is_valid(vals["facility"]))
        cols = self._object_cols({k: v.filter(pa.array(keep)) for k, v in vals.items()},
                                 msg.filter(pa.array(keep)))
        if keep.any():
            pieces.append((m_idx[keep], cols))
        kept_recs = m_rec[keep]
        part = in_rec & np.isin(rec[idx], kept_recs[kept_recs >= 0])
        part_lines = null_as_false(pc.match_substring_regex(sub, INSPECT_PART))
        part &= part_lines
        left = idx[~(part | np.isin(idx, m_idx[keep]))]
        return left, idx[part]

    def _python(self, lines, idx, pieces) -> np.ndarray:
        # A split around the leftmost "FAC [name] " gives the logging
        # prefix and the message at a third of the cost of capturing them.
        sub = lines.take(pa.array(idx))
        parts = pc.split_pattern_regex(sub, PYTHON_SPLIT, max_splits=1)
        hit_m = null_as_false(pc.equal(pc.list_value_length(parts), 2))
        if not hit_m.any():
            return idx
        mask = pa.array(hit_m)
        hit, left = idx[hit_m], idx[~hit_m]
        parts = parts.filter(mask)
        prefix, msg = pc.list_element(parts, 0), pc.list_element(parts, 1)
        got = pc.extract_regex(sub.filter(mask), PYTHON)
        t = pc.extract_regex(prefix, PY_TIME)
        ts = local_ts(optional_group(t, "date"), match_group(t, "time"), optional_group(t, "frac"), optional_group(t, "tz"))
        lname = pc.utf8_upper(match_group(pc.extract_regex(prefix, PY_LEVEL), "v"))
        level = pc.index_in(lname, pa.array(list(PY_LEVELS)))
        level = pc.take(pa.array(list(PY_LEVELS.values()), pa.int8()), level)
        pieces.append((hit, {"ts_us": ts, "level": level, "facility": match_group(got, "facility"),
                             "client": match_group(got, "client"), "msg": unquoted(prefix, msg),
                             "ts_resolution_us": frac_resolution(ts, optional_group(t, "frac"), match_group(t, "time"))}))
        return left

    def _events(self, line_no: pa.Array, cols: dict, m: int) -> pa.Table:
        msg = cols["msg"]
        thread = pc.struct_field(pc.extract_regex(msg, THREAD), "thread")
        rest = pc.replace_substring_regex(msg, THREAD_STRIP, "", max_replacements=1)
        broker = pc.struct_field(pc.extract_regex(rest, BROKER), "broker")
        text = pc.replace_substring_regex(rest, BROKER_STRIP, "", max_replacements=1)
        return self._classified(line_no, {**cols, "thread": thread, "broker": broker, "text": text})

    def _classified(self, line_no: pa.Array, cols: dict) -> pa.Table:
        """The table, once each line is cut into header fields, thread,
        broker and text: which event the text is, and its fields."""
        text = cols["text"]
        m = len(text)
        codes = np.zeros(m, dtype=np.int8)
        names = ["other"]
        parts: list[Part] = []
        # Every prefix test in one pass over the texts: bit k for _NEEDLES[k].
        flags = scan.needle_flags(text, [(prefix, name in ANYWHERE) for name, prefix in _NEEDLES])
        seen = int(np.bitwise_or.reduce(flags)) if m else 0   # the needles some line holds
        for name, prefix, pattern in EVENTS:
            if name in BY_FACILITY:
                # A wrapper may drop the facility: the timeout's own words then.
                found_at = null_as_false(pc.equal(cols["facility"], BY_FACILITY[name])) & (codes == 0)
                # The words begin with one of few letters: the pattern runs on those texts only.
                rest = np.flatnonzero((codes == 0) & ~found_at)
                off, data = offsets_data(text)
                first = byte_at(data, np.where(off[rest + 1] > off[rest], off[rest], -1))
                words = rest[np.isin(first, _FAIL_FIRST)]
                if len(words):
                    found_at[words[null_as_false(pc.match_substring_regex(text.take(pa.array(words)), _FAIL_TEXT))]] = True
            else:
                bit = 1 << _NEEDLES.index((name, prefix))
                if not seen & bit:
                    continue
                found_at = flags & np.uint32(bit)
                if name in FALLBACK:
                    found_at = (found_at != 0) & (codes == 0)
            idx = np.flatnonzero(found_at)
            if not len(idx):
                continue
            if name in _READ_COMPILED and self.fast:
                hit, got_parts = _compiled_read(text, idx, name, pattern)
                parts.extend(got_parts)
            else:
                got, hit = extract_event(text.take(idx), name, pattern, self.fast)
                got = got.filter(pa.array(hit))
                opt = OPTIONAL.get(name, ())
                parts.append((idx[hit], {f: optional_group(got, f) if f in opt else match_group(got, f) for f in got.type.names}))
            codes[idx[hit]] = len(names)
            names.append(name)
        self._app_produce(cols, codes, names)
        ev_cols = self._event_columns(m, parts, text)
        event = pc.cast(pa.DictionaryArray.from_arrays(pa.array(codes), pa.array(names)), pa.string())
        ts_us, resolution = _coarse_recv_untimed(cols["ts_us"], cols["ts_resolution_us"], codes, names)
        return pa.table(
            {
                "line_no": line_no,
                "ts_us": ts_us,
                "level": cols["level"],
                "facility": cols["facility"],
                "client": cols["client"],
                "thread": cols["thread"],
                "broker": cols["broker"],
                "event": event,
                **{f: ev_cols[f] for f in EVENT_FIELDS[:6]},
                "text": text,
                "ts_resolution_us": resolution,
                **{f: ev_cols[f] for f in EVENT_FIELDS[6:]},
                "repeat": pa.array(np.ones(m, dtype=np.int32)),
            },
            schema=SCHEMA,
        )

    @staticmethod
    def _app_produce(cols: dict, codes: np.ndarray, names: list[str]) -> None:
        """``app_produce``: a line of none of the kinds above, without a
        thread or broker name (librdkafka's messages carry one), that says
        the application hands a message to the client
        (wrapped.app_produce_lines)."""
        left = np.flatnonzero(codes == 0)
        if not len(left) or cols.get("thread") is None or cols.get("broker") is None:
            return
        at = pa.array(left)
        # The pattern runs on the bare lines alone: on every line left, it was
        # 3 % of an async producer's log parse (2026-12-01).
        bare = left[null_as_false(pc.and_(pc.is_null(cols["thread"].take(at)), pc.is_null(cols["broker"].take(at))))]
        if not len(bare):
            return
        said = bare[null_as_false(pc.match_substring_regex(cols["text"].take(pa.array(bare)), APP_PRODUCE))]
        if len(said):
            codes[said] = len(names)
            names.append("app_produce")

    @staticmethod
    def _event_columns(m: int, parts: list[Part], texts: pa.Array) -> dict:
        """Each event kind's fields scattered back to row order, a column
        at a time (takes and if_else over long string columns are slow)."""
        cols = {}
        for f in EVENT_FIELDS:
            typ = SCHEMA.field(f).type
            have = [(rows, got[f]) for rows, got in parts if f in got]
            if not have:
                cols[f] = pa.nulls(m, typ)
            elif pa.types.is_string(typ):
                cols[f] = _string_column(m, texts, have)
            else:
                cols[f] = _number_column(m, typ, have)
        return cols

    def finish(self) -> pa.Table:
        return SCHEMA.empty_table()

    def _skip(self, lines: pa.Array, line_no: pa.Array, mask: pa.Array, reason: str) -> None:
        bad = lines.filter(mask)
        self.counts.skip(reason, len(bad))
        nos = line_no.filter(mask)
        for i in range(min(len(bad), 5)):
            self.counts.example(nos[i].as_py(), reason, bad[i].as_py() or "")
