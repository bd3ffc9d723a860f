"""A string or binary Arrow array's own buffers (offsets and data), as numpy
arrays: what both the parsers' cutting (strings) and the compiled scans
(scan) read.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

EMPTY_BUF = pa.py_buffer(b"\0")


def offsets_data(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(int64 offsets into data, data bytes) of a string/binary array."""
    n = len(arr)
    bufs = arr.buffers()
    off = np.frombuffer(bufs[1], dtype=np.int32, count=n + 1, offset=arr.offset * 4).astype(np.int64)
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None and bufs[2].size else np.zeros(0, np.uint8)
    return off, data


def data_buffer(arr: pa.Array) -> pa.Buffer:
    b = arr.buffers()[2]
    return b if b is not None and b.size else EMPTY_BUF


def lengths(arr: pa.Array) -> np.ndarray:
    off, _ = offsets_data(arr)
    return np.diff(off)


def gather(data: np.ndarray, start: np.ndarray, length: np.ndarray, width: int) -> np.ndarray:
    """n x width bytes of data from each start, zero past each length."""
    n = len(start)
    if n == 0 or width == 0 or len(data) == 0:
        return np.zeros((n, width), dtype=np.uint8)
    safe = start + width <= len(data)
    if safe.all():
        out = np.lib.stride_tricks.sliding_window_view(data, width)[start]
    else:
        lo = int(start[~safe].min())
        out = np.zeros((n, width), dtype=np.uint8)
        if len(data) >= width:
            out[safe] = np.lib.stride_tricks.sliding_window_view(data, width)[start[safe]]
        padded = np.concatenate([data[lo:], np.zeros(width, dtype=np.uint8)])
        out[~safe] = np.lib.stride_tricks.sliding_window_view(padded, width)[start[~safe] - lo]
    out *= np.arange(width) < length[:, None]
    return out
