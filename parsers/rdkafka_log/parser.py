"""The parser: chunks of lines -> ``rdkafka_events`` rows."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kdiag.parsers import scan
from kdiag.parsers.base import ParseCounts
from kdiag.parsers.strings import data_buffer, views
from kdiag.parsers.rdkafka_log.columns import (
    _as,
    _extract_event,
    _field,
    _frac_resolution,
    _local_ts,
    _mask,
    _opt,
    _resolution,
    _typed,
    _unescape,
    _unquote,
)
from kdiag.parsers.rdkafka_log.patterns import (
    _BROKER,
    _BROKER_STRIP,
    _COLS,
    _DOTNET,
    _DOTNET_LEVELS,
    _EVENT_FIELDS,
    _EVENTS,
    _GO,
    _HEADER,
    _INSPECT_FIELDS,
    _INSPECT_MSG,
    _INSPECT_PART,
    _JSON_FIELDS,
    _JSON_LINE,
    _JSON_MSG,
    _ANYWHERE,
    _BY_FACILITY,
    _OPTIONAL,
    _PY_LEVEL,
    _PY_LEVELS,
    _PY_TIME,
    _PYTHON,
    _PYTHON_SPLIT,
    SCHEMA,
    _THREAD,
    _THREAD_STRIP,
)
from kdiag.parsers.rdkafka_log.plain import _plain_lines
from kdiag.parsers.rdkafka_log.wrapped import unmangle, unquoted, wrapped


_FAIL_TEXT = r"^[0-9]+ request\(s\) timed out"
# Events read by the compiled scans where built (scan.sent_received,
# scan.topic_lines), their patterns reading what those leave.
_COMPILED_FIELDS = {
    "send": ["request", "api_version", "size_bytes", "corr_id"],
    "recv": ["request", "api_version", "size_bytes", "corr_id", "rtt_ms"],
    "produce": ["topic", "partition", "msgs", "size_bytes"],
    "msgset": ["topic", "partition", "msgs", "error", "detail"],
}
_READ_COMPILED = tuple(_COMPILED_FIELDS)
# The events found by a prefix (or a substring: _ANYWHERE) of the text.
_NEEDLES = [(name, prefix) for name, prefix, _ in _EVENTS if name not in _BY_FACILITY]


def _compiled_read(texts: pa.Array, name: str, pattern: str) -> tuple[pa.StructArray, np.ndarray]:
    """The event's fields, typed as the table has them (what _typed makes
    of the pattern's captures), optional groups null: read by the compiled
    scans (scan.sent_received, scan.topic_lines), by the pattern where they
    are unsure of a line."""
    names = _COMPILED_FIELDS[name]
    types = [SCHEMA.field(f).type for f in names]
    topic = name in ("produce", "msgset")
    cut = scan.topic_lines(texts, name == "msgset") if topic else scan.sent_received(texts, name == "recv")
    status = np.zeros(len(texts), dtype=np.int64) if cut is None else cut[:, 0]
    done = status == 1
    parts, where = [], []
    if done.any():
        c = cut[done]
        at = np.flatnonzero(done)
        # The scans' positions are into the texts' data buffer.
        piece = lambda lo, hi: views(c[:, lo], c[:, hi] - c[:, lo], np.zeros(len(c), np.int64),  # noqa: E731
                                     [data_buffer(texts)])
        if topic:
            cols = {"topic": piece(scan.T_TOPIC, scan.T_TOPIC_END),
                    "partition": pa.array(c[:, scan.T_PART]), "msgs": pa.array(c[:, scan.T_MSGS]),
                    "size_bytes": pa.array(c[:, scan.T_SIZE]),
                    "error": pa.nulls(len(c), pa.string()), "detail": pa.nulls(len(c), pa.string())}
        else:
            cols = {"request": piece(scan.S_REQ, scan.S_REQ_END),
                    "api_version": pa.array(c[:, scan.S_API], mask=c[:, scan.S_API_OK] == 0),
                    "size_bytes": pa.array(c[:, scan.S_SIZE]), "corr_id": pa.array(c[:, scan.S_CORR]),
                    "rtt_ms": pa.array(c[:, scan.S_RTT_N] / 10.0 ** c[:, scan.S_RTT_F], mask=c[:, scan.S_RTT_OK] == 0)}
        parts.append([_typed(cols[f], t) for f, t in zip(names, types)])
        where.append(at)
    rest = np.flatnonzero(status == 0)
    hit = done.copy()
    if len(rest):
        got, ok = _extract_event(texts.take(pa.array(rest)), name, pattern, True)
        got = got.filter(pa.array(ok))
        opt = _OPTIONAL.get(name, ())
        parts.append([_typed(_opt(got, f) if f in opt else _field(got, f), t) for f, t in zip(names, types)])
        where.append(rest[ok])
        hit[rest[ok]] = True
    at = np.concatenate(where) if where else np.zeros(0, np.int64)
    pos = np.full(len(texts), -1, dtype=np.int64)
    pos[at] = np.arange(len(at))
    take = pa.array(pos, mask=pos < 0)
    arrays = [pa.concat_arrays([p[j] for p in parts]).take(take) if parts else pa.nulls(len(texts), types[j])
              for j in range(len(names))]
    return pa.StructArray.from_arrays(arrays, names=names, mask=pa.array(~hit)), hit


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
        lines = unmangle(lines)
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
                "facility": fac_f, "client": client_f, "msg": msg, "ts_resolution_us": _resolution(ts_ms, 1000)}

    def _other_formats(self, lines: pa.Array, rest: np.ndarray, pieces: list) -> np.ndarray:
        """Rows of the client libraries' formats, appended to pieces as
        (line indices, columns); returns the indices of the lines that are
        the other parts of multi-line records."""
        parts = np.zeros(0, np.int64)
        left = rest
        for fmt in ("dotnet", "go", "json", "inspect", "python", "wrapped"):
            if not len(left):
                break
            if fmt == "inspect":
                left, parts = self._inspect(lines, left, pieces)
            elif fmt == "wrapped":   # any other wrapper: last, as it asks least of a line
                left = wrapped(lines, left, pieces)
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
                                 "msg": msg, "ts_resolution_us": _resolution(ts, 1000)}))
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
                                 "msg": msg, "ts_resolution_us": pa.nulls(len(hit), pa.int32())}))
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
        ts = pc.multiply(pc.cast(vals["ts_ms"], pa.int64()), 1000)
        return {"ts_us": ts, "level": pc.cast(vals["level"], pa.int8()),
                "facility": vals["facility"], "client": vals["client"], "msg": msg,
                "ts_resolution_us": _resolution(ts, 1000)}

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
        lname = pc.utf8_upper(_field(pc.extract_regex(prefix, _PY_LEVEL), "v"))
        level = pc.index_in(lname, pa.array(list(_PY_LEVELS)))
        level = pc.take(pa.array(list(_PY_LEVELS.values()), pa.int8()), level)
        pieces.append((hit, {"ts_us": ts, "level": level, "facility": _field(got, "facility"),
                             "client": _field(got, "client"), "msg": unquoted(prefix, msg),
                             "ts_resolution_us": _frac_resolution(ts, _opt(t, "frac"))}))
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
        # Every prefix test in one pass over the texts: bit k for _NEEDLES[k].
        flags = scan.needle_flags(text, [(prefix, name in _ANYWHERE) for name, prefix in _NEEDLES])
        for name, prefix, pattern in _EVENTS:
            if name in _BY_FACILITY:
                # A wrapper may drop the facility: the timeout's own words then.
                fac_is = pc.fill_null(pc.equal(cols["facility"], _BY_FACILITY[name]), False)
                found_at = _mask(pc.and_(pc.or_(fac_is, pc.fill_null(pc.match_substring_regex(text, _FAIL_TEXT), False)),
                                         pa.array(codes == 0)))
            else:
                found_at = flags & np.uint32(1 << _NEEDLES.index((name, prefix)))
            idx = np.flatnonzero(found_at)
            if not len(idx):
                continue
            if name in _READ_COMPILED and self.fast:
                got, hit = _compiled_read(text.take(idx), name, pattern)
            else:
                got, hit = _extract_event(text.take(idx), name, pattern, self.fast)
            if name in _OPTIONAL and (name not in _READ_COMPILED or not self.fast):
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
                **{f: ev_cols[f] for f in _EVENT_FIELDS[:6]},
                "text": text,
                "ts_resolution_us": cols["ts_resolution_us"],
                **{f: ev_cols[f] for f in _EVENT_FIELDS[6:]},
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
