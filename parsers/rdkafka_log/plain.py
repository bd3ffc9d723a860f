"""librdkafka's own stderr lines cut by byte position, with numpy.

Most of a big log is librdkafka's stderr format, and the regexes cost a
pass each over every line. For a line that starts "%L|" its fields are
found with numpy instead: its first four "|", the first "]" after
" [thrd:", the first " " after that. Only what the patterns allow is cut
this way; a facility or broker name is checked against the same RE2
patterns, once per distinct value. Everything else (a prefix before the
"%", a timestamp of another shape, a facility the header does not allow)
is left to the regexes.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kdiag.parsers.rdkafka_log.columns import _mask
from kdiag.parsers.rdkafka_log.patterns import _BROKER_NAME
from kdiag.parsers.strings import data_buffer, gather, offsets_data, views


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
        "ts_resolution_us": pa.array(np.full(len(idx), 1000, dtype=np.int32)),
    }
