"""librdkafka's own stderr lines cut by byte position.

Most of a big log is librdkafka's stderr format, and the regexes cost a
pass each over every line. For a line that starts "%L|" its fields are
found by position instead (``scan.rdkafka_plain_cut``: compiled, or its
numpy reference): its first four "|", the first "]" after " [thrd:", the
first " " after that. Only what the patterns allow is cut
this way; a facility or broker name is checked against the same RE2
patterns, once per distinct value. Everything else (a prefix before the
"%", a timestamp of another shape, a facility the header does not allow)
is left to the regexes.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kdiag.parsers import scan
from kdiag.parsers.rdkafka_log.columns import null_as_false
from kdiag.parsers.rdkafka_log.patterns import BROKER_NAME
from kdiag.parsers.scan import byte_at
from kdiag.parsers.strings import data_buffer, offsets_data, views, with_valid

_FACILITY = r"^[A-Za-z0-9_\-]*$"
_BROKER_FULL = "^(?:" + BROKER_NAME + ")$"


def _strings(lines: pa.Array, start: np.ndarray, stop: np.ndarray, valid: np.ndarray | None = None,
             home: np.ndarray | None = None) -> pa.Array:
    """lines' bytes [start, stop) as strings (positions in its data buffer);
    null where not valid. Where not valid, start and stop may point
    anywhere: an empty piece at ``home`` (the line's start) stands in."""
    if valid is not None:
        start, stop = np.where(valid, start, home), np.where(valid, stop, home)
    arr = views(start, stop - start, np.zeros(len(start), np.int64), [data_buffer(lines)])
    return arr if valid is None else with_valid(arr, valid)


def _matches_unique(values: pa.Array, pattern: str) -> np.ndarray:
    """match_substring_regex, run once per distinct value."""
    enc = pc.dictionary_encode(values)
    hit = null_as_false(pc.match_substring_regex(enc.dictionary, pattern))
    return hit[enc.indices.to_numpy(zero_copy_only=False)]


def _compiled_columns(lines: pa.Array, cut: np.ndarray, idx: np.ndarray | None) -> dict | None:
    """The plain lines' columns with their strings copied out in one pass
    (scan.plain_columns); None where that was not built, or where a
    facility or a broker candidate fails its pattern (the columns are then
    made as below, which leaves such lines to the regexes). The facility's
    pattern is a byte class, tested there; the broker's is run on each
    candidate unlike the one before it, the others being equal to one
    that was."""
    got = scan.plain_columns(lines, cut, idx)
    if got is None or got.bad_facilities:
        return None
    facility, client, thread, broker, text = got.strings
    c = cut if idx is None else cut[idx]
    cand = c[:, scan.CAND] == 1
    fresh = np.flatnonzero(got.fresh)
    if len(fresh) and not _matches_unique(broker.take(pa.array(fresh)), _BROKER_FULL).all():
        return None
    return {
        "ts_us": pa.array(c[:, scan.MS] * 1000),
        "level": pa.array(got.level),
        "facility": facility,
        "client": client,
        "thread": with_valid(thread, c[:, scan.THRD] == 1),
        "broker": with_valid(broker, cand),
        "text": text,
        "ts_resolution_us": pa.array(np.full(len(c), 1000, dtype=np.int32)),
    }


def plain_lines(lines: pa.Array, compiled: bool | None = None) -> tuple[np.ndarray, dict]:
    """(which lines are plain librdkafka stderr lines, their columns).
    ``compiled``: the cut by scan.rdkafka_plain_cut's compiled code (None:
    where built), or its reference."""
    cut = scan.rdkafka_plain_cut(lines, compiled)
    # A thread name with a "]" inside ("[thrd:kafka-1.[[REDACTED]]:9092/1]: ")
    # is cut at its first one: left to the regexes, which read it whole.
    plain = (cut[:, scan.OK] == 1) & ~((cut[:, scan.CLOSE] >= 0) & (cut[:, scan.THRD] == 0))
    idx = np.flatnonzero(plain)
    if not len(idx):
        return plain, {}
    if compiled is not False:
        got = _compiled_columns(lines, cut, None if len(idx) == len(plain) else idx)
        if got is not None:
            return plain, got
    off, data = offsets_data(lines)
    c = cut[idx]
    start, end = off[:-1][idx], off[1:][idx]
    p2, p3, p4 = c[:, scan.P2], c[:, scan.P3], c[:, scan.P4]
    facility = _strings(lines, p2 + 1, p3)
    ok = _matches_unique(facility, _FACILITY)
    keep = np.flatnonzero(ok)
    if len(keep) < len(idx):
        plain[idx[~ok]] = False
        start, end, p2, p3, p4, c, idx = (a[keep] for a in (start, end, p2, p3, p4, c, idx))
        facility = facility.take(pa.array(keep))
    has_thrd = c[:, scan.THRD] == 1
    close, rest, space = c[:, scan.CLOSE], c[:, scan.REST], c[:, scan.SPACE]
    # "BROKER: ": the first word, if it ends in ":" and is a broker name.
    cand = c[:, scan.CAND] == 1
    broker = _strings(lines, rest, space - 1, cand, start)
    if cand.any():
        cand &= _matches_unique(broker.fill_null(""), _BROKER_FULL)
        broker = _strings(lines, rest, space - 1, cand, start)
    text_at = np.where(cand, space + 1, rest)
    return plain, {
        "ts_us": pa.array(c[:, scan.MS] * 1000),
        "level": pa.array((byte_at(data, start + 1) - ord("0")).astype(np.int8)),
        "facility": facility,
        "client": _strings(lines, p3 + 1, p4),
        "thread": _strings(lines, p4 + 8, close, has_thrd, start),
        "broker": broker,
        "text": _strings(lines, text_at, end),
        "ts_resolution_us": pa.array(np.full(len(idx), 1000, dtype=np.int32)),
    }
