"""Cutting Arrow strings by byte position, with numpy, without copying.

The parsers find fields by byte arithmetic on a string array's own buffers
(offsets and data) and make the fields into string arrays through views.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from kdiag.parsers import scan

# The buffers' own helpers are below scan, which reads buffers too; the
# parsers take them from here, with the cutting.
from kdiag.parsers.string_buffers import EMPTY_BUF, data_buffer, gather, lengths, offsets_data  # noqa: F401

# Strings are cut and reordered as string_view arrays built with numpy
# (16-byte views into existing buffers), then cast to plain strings in one
# copy: a take() on a million long strings costs ten times as much.


def views(start: np.ndarray, length: np.ndarray, buf: np.ndarray, buffers: list[pa.Buffer],
           type_=pa.string()) -> pa.Array:
    """Strings buffers[buf[i]][start[i]:start[i]+length[i]], as a type_ array.

    Per buffer, the wanted pieces sorted by position are laid out as every
    second string of a 2n-string array over the same bytes (the others are
    the gaps between them), so no byte is copied; casting that to a view
    type and keeping every second 16-byte view selects the pieces; one cast
    back to type_ copies them out. Pieces must not overlap.
    """
    n = len(start)
    if n == 0:
        return pa.array([], type_)
    if type_ in (pa.string(), pa.binary()):
        got = scan.copy_out_many(buffers, buf, start, length, type_)   # the same pieces, copied in one pass
        if got is not None:
            return got
    base, vtype = (pa.string(), pa.string_view()) if type_ == pa.string() else (pa.binary(), pa.binary_view())
    if (buf == buf[0]).all():
        groups = [(int(buf[0]), None)]
    else:
        groups = [(b, np.flatnonzero(buf == b)) for b in range(len(buffers))]
    out = None
    out_bufs: list[pa.Buffer] = []
    for b, rows in groups:
        if rows is not None and not len(rows):
            continue
        s = start if rows is None else start[rows]
        e = s + (length if rows is None else length[rows])
        # An empty piece where another begins must come first, or the
        # laid-out offsets fall back and Arrow's cast reads out of bounds.
        if len(s) > 1 and ((s[1:] < s[:-1]) | ((s[1:] == s[:-1]) & (e[1:] < e[:-1]))).any():
            order = np.lexsort((e, s))
            rows = order if rows is None else rows[order]
            s, e = s[order], e[order]
        k = len(s)
        inter = np.empty(2 * k + 1, dtype=np.int32)
        inter[0] = s[0]
        inter[1::2] = s
        inter[2::2] = e
        both = pa.Array.from_buffers(base, 2 * k, [None, pa.py_buffer(inter), buffers[b]])
        v = both.cast(vtype)
        vb = v.buffers()
        rec = np.frombuffer(vb[1], dtype=np.int32).reshape(-1, 4)[1::2]
        if rows is None:  # one buffer, pieces already in order
            out = np.ascontiguousarray(rec)
        else:
            if out is None:
                out = np.zeros((n, 4), dtype=np.int32)
            out[rows] = rec
            if out_bufs:
                # Views of more than 12 bytes name their data buffer by index.
                long = rows[rec[:, 0] > 12]
                out[long, 2] += len(out_bufs)
        out_bufs.extend(vb[2:])
    return pa.Array.from_buffers(vtype, n, [None, pa.py_buffer(out), *out_bufs]).cast(type_)


def validity(ok: np.ndarray) -> pa.Buffer | None:
    """An Arrow validity bitmap of ``ok``; None when all are valid."""
    return None if ok.all() else pa.py_buffer(np.packbits(ok, bitorder="little"))


def with_valid(arr: pa.Array, ok: np.ndarray) -> pa.Array:
    """A string array null where not ``ok`` (its pieces there are empty)."""
    if ok.all():
        return arr
    _, offsets, body = arr.buffers()
    return pa.Array.from_buffers(arr.type, len(arr), [validity(ok), offsets, body], null_count=len(arr) - int(ok.sum()))


def placed(n: int, at: np.ndarray, start: np.ndarray, length: np.ndarray, buffer: pa.Buffer) -> pa.Array:
    """A length-n string array with buffer[start[j]:start[j]+length[j]] at
    row at[j] and null elsewhere, copied once (no concat, no take)."""
    s, ln = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    ok = np.zeros(n, dtype=bool)
    s[at], ln[at], ok[at] = start, length, True
    return with_valid(views(s, ln, np.zeros(n, dtype=np.int64), [buffer]), ok)


def take_str(arr: pa.Array, idx: np.ndarray, type_=pa.string()) -> pa.Array:
    off, _ = offsets_data(arr)
    return views(off[idx], off[idx + 1] - off[idx], np.zeros(len(idx), np.int64), [data_buffer(arr)], type_)


def cut(arr: pa.Array, idx: np.ndarray, start: np.ndarray, stop: np.ndarray, type_=pa.string()) -> pa.Array:
    """arr[idx[i]][start[i]:stop[i]] (byte positions) for every i."""
    off, _ = offsets_data(arr)
    return views(off[idx] + start, np.maximum(stop - start, 0), np.zeros(len(idx), np.int64),
                  [data_buffer(arr)], type_)


def first_last(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """First and last byte of each string (0 for empty ones)."""
    off, data = offsets_data(arr)
    first = np.zeros(len(arr), dtype=np.uint8)
    last = np.zeros(len(arr), dtype=np.uint8)
    ne = off[1:] > off[:-1]
    first[ne] = data[off[:-1][ne]]
    last[ne] = data[off[1:][ne] - 1]
    return first, last
