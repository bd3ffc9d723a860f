"""The parsers' hottest scans over a chunk's lines, in compiled code
(``parsers/_scan.c``, built by pip with the system's C compiler) where it
was built, else in numpy and Arrow here: the reference the tests hold the
compiled code to, line for line. The scans over lines take an Arrow
string array and return numpy arrays, ``compiled=False`` asking for the
reference. The compiled reads of an event's lines (``sent_received``,
``topic_lines``) and ``copy_out`` return None where nothing was built: their
reference is the code that ran before them (the event's pattern,
``strings.views``' string views).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kdiag.parsers.string_buffers import data_buffer, gather, offsets_data

try:
    from kdiag.parsers import _scan
except ImportError:   # no compiler where kdiag was installed: the reference runs
    _scan = None

COMPILED = _scan is not None

# ``` or ~~~ fences, with an info string ("```text") or not: markdown's code
# fences around pasted strace (strace.markup), and the reference the compiled
# fence scan is held to.
FENCE = r"^\s*(?:```|~~~)[^`]*$"

# The columns of sent_received's rows (see _scan.c).
S_OK, S_REQ, S_REQ_END, S_API, S_API_OK, S_SIZE, S_CORR, S_RTT_OK, S_RTT_N, S_RTT_F = range(10)
S_FIELDS = 10
# The columns of topic_lines' rows (see _scan.c); T_OK 2: surely not the event.
T_OK, T_TOPIC, T_TOPIC_END, T_PART, T_MSGS, T_SIZE = range(6)
T_FIELDS = 6
# The columns of rdkafka_plain_cut's rows (see _scan.c).
OK, MS, P2, P3, P4, THRD, CLOSE, REST, CAND, SPACE = range(10)
FIELDS = 10
_THRD = np.frombuffer(b" [thrd:", dtype=np.uint8)
# The columns of strace_lines' rows (see _scan_strace.c).
(L_OK, L_KIND, L_PID, L_PID_OK, L_TS, L_TS_OK, L_HLEN, L_A_STOP, L_NAME, L_NAME_LEN,
 L_RET, L_RET_OK, L_DUR, L_DUR_OK, L_ERR, L_ERR_LEN) = range(16)
L_FIELDS = 16
# The columns of first_fds' rows (see _scan_strace.c).
F_RUN, F_FD, F_ANNOTATED, F_INFO, F_INFO_LEN = range(5)
F_FIELDS = 5
# The columns of quoted_data's rows (see _scan_strace.c).
Q_STATUS, Q_AT, Q_LEN = range(3)
Q_FIELDS = 3
# strace_lines' layout code: bit 0 "[pid N] " prefixes, bits 1-2 the
# timestamp, bit 3 -T durations.
_TS_CODES = {"none": 0, "num": 1, "num_o": 2, "tod": 3}
# "%u.%03u": up to 12 digits of seconds, ".", 3 of milliseconds.
_TS_WIDTH = 16


def _use(compiled: bool | None) -> bool:
    if compiled and not COMPILED:
        raise RuntimeError("kdiag's compiled scans were not built (no C compiler when it was installed)")
    return COMPILED if compiled is None else compiled


def _buffers(lines: pa.Array):
    """A string array as the compiled scans take it: (offsets, first, n, data)."""
    return lines.buffers()[1], lines.offset, len(lines), data_buffer(lines)


def _mask(arr) -> np.ndarray:
    """A boolean Arrow result as numpy, null as false."""
    return pc.fill_null(arr, False).to_numpy(zero_copy_only=False)


def split_lines(block: bytes, compiled: bool | None = None) -> tuple[pa.Array | None, int]:
    """(the block's lines as a string array, each without its "\n" and a
    "\r" before it, or None when the block is not UTF-8; the longest
    line's bytes, its "\r" counted)."""
    if _use(compiled):
        data = np.empty(len(block), dtype=np.uint8)
        # Room for lines of 32 bytes on average: counting them first would
        # read the block once more.
        offsets = np.empty(len(block) // 32 + 2, dtype=np.int32)
        n, size, longest, utf8 = _scan.split_lines(block, data, offsets)
        if n < 0:
            offsets = np.empty(bytes(block).count(b"\n") + 2, dtype=np.int32)
            n, size, longest, utf8 = _scan.split_lines(block, data, offsets)
        if not utf8:
            return None, longest
        return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets[:n + 1]),
                                                      pa.py_buffer(data[:size])]), longest
    buf = np.frombuffer(block, dtype=np.uint8)
    nl = np.flatnonzero(buf == 10)
    n = len(nl) + 1
    ends = np.empty(n, dtype=np.int64)
    ends[:-1] = nl
    ends[-1] = len(buf)
    starts = np.empty(n, dtype=np.int64)
    starts[0] = 0
    starts[1:] = nl + 1
    # A CRLF line's "\r" goes with its "\n".
    cr = ends > starts
    cr[cr] = buf[ends[cr] - 1] == 13
    drop = nl if not cr.any() else np.sort(np.concatenate([nl, ends[cr] - 1]))
    data = np.delete(buf, drop)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(ends - starts - cr, out=offsets[1:])
    lines = pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    try:
        lines.validate(full=True)
    except pa.ArrowInvalid:
        lines = None
    return lines, int((ends - starts).max())


def copy_out(buffer: pa.Buffer, start: np.ndarray, length: np.ndarray, type_=pa.string()) -> pa.Array | None:
    """buffer[start[i]:start[i]+length[i]] for every i, as a ``type_``
    (string or binary) array, copied once; None where the compiled scans
    were not built (strings.views then cuts by string views: the
    reference), or for pieces outside the buffer."""
    return copy_out_many([buffer], np.zeros(len(start), dtype=np.int64), start, length, type_)


def copy_out_many(buffers: list, buf: np.ndarray, start: np.ndarray, length: np.ndarray,
                  type_=pa.string()) -> pa.Array | None:
    """copy_out with piece i from buffers[buf[i]]; None where the compiled
    scans were not built, or for pieces outside their buffers (the
    reference's to make)."""
    if not COMPILED:
        return None
    buf = np.ascontiguousarray(buf, dtype=np.int64)
    start = np.ascontiguousarray(start, dtype=np.int64)
    length = np.ascontiguousarray(length, dtype=np.int64)
    n = len(start)
    offsets = np.empty(n + 1, dtype=np.int32)
    # 32 bytes of room past the pieces: the copy moves 32 bytes at a time.
    data = np.empty(max(0, int(length.sum()) if n else 0) + 32, dtype=np.uint8)
    try:
        _scan.copy_out_many(tuple(buffers), buf, start, length, offsets, data)
    except ValueError:   # a piece outside its buffer (checked there, every one)
        return None
    return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(offsets), pa.py_buffer(data[:int(offsets[-1])])])


def strace_lines(lines: pa.Array, pid_kind: str, ts_kind: str, has_dur: bool,
                 compiled: bool | None = None) -> np.ndarray | None:
    """strace's lines read in one pass where a file's layout (``pid_kind``
    "o" or "b", ``ts_kind`` as strace/line_fields.Layout names them) reads
    them: int64[L_FIELDS, n], a field a row, L_OK 1 on the lines read. None
    where the compiled scans were not built or ``compiled`` is False:
    line_fields' patterns, the reference, read every line then."""
    if not _use(compiled):
        return None
    out = np.empty((L_FIELDS, len(lines)), dtype=np.int64)
    code = (pid_kind == "b") | _TS_CODES[ts_kind] << 1 | bool(has_dur) << 3
    if len(lines):
        _scan.strace_lines(*_buffers(lines), out, code)
    return out


def first_fds(args: pa.Array, compiled: bool | None = None) -> np.ndarray | None:
    """The first argument of each of strace's argument lists read as an fd:
    int64[F_FIELDS, n] (see _scan_strace.c). None where the compiled scans
    were not built or ``compiled`` is False: strace/rows.py's reading, the
    reference, runs then."""
    if not _use(compiled):
        return None
    out = np.empty((F_FIELDS, len(args)), dtype=np.int64)
    if len(args):
        _scan.first_fds(*_buffers(args), out)
    return out


def quoted_data(args: pa.Array, mask: np.ndarray, compiled: bool | None = None):
    """The first C string of each masked row's arguments, decoded where its
    only escapes are \\n \\t \\r \\": (int64[Q_FIELDS, n], the decoded
    texts' buffer) (see _scan_strace.c). None where the compiled scans were
    not built or ``compiled`` is False: strace/rows.py's patterns, the
    reference, run then."""
    if not _use(compiled):
        return None
    n = len(args)
    out = np.empty((Q_FIELDS, n), dtype=np.int64)
    off, first, _, data = _buffers(args)
    o = np.frombuffer(off, dtype=np.int32, count=n + 1, offset=first * 4) if n else np.zeros(1, np.int32)
    text = np.empty(max(1, int(o[-1]) - int(o[0])), dtype=np.uint8)
    if n:
        _scan.quoted_data(off, first, n, data, out, np.ascontiguousarray(mask, dtype=np.uint8), text)
    return out, pa.py_buffer(text)


def ends_with(lines: pa.Array, suffixes: tuple[str, ...], compiled: bool | None = None) -> np.ndarray:
    """Which lines end with one of the suffixes."""
    if _use(compiled):
        out = np.zeros(len(lines), dtype=np.uint8)
        if len(lines):
            for x in suffixes:
                _scan.ends_with(*_buffers(lines), out, x.encode())
        if lines.null_count:   # a null's offsets may span bytes all the same
            out[~np.asarray(pc.is_valid(lines))] = 0
        return out.view(bool)
    out = np.zeros(len(lines), dtype=bool)
    for x in suffixes:
        out |= _mask(pc.ends_with(lines, x))
    return out


def edge_bytes(lines: pa.Array, first: str, last: str, compiled: bool | None = None) -> tuple[bool, bool]:
    """Whether a line starts with the byte ``first``, and whether one ends
    with the byte ``last``."""
    if _use(compiled):
        out = np.zeros(2, dtype=np.uint8)
        if len(lines):
            _scan.edge_bytes(*_buffers(lines), out, ord(first) | ord(last) << 8)
        return bool(out[0]), bool(out[1])
    if not len(lines):
        return False, False
    return (bool(pc.any(pc.starts_with(lines, first)).as_py()), bool(pc.any(pc.ends_with(lines, last)).as_py()))


def mangle_candidates(lines: pa.Array, compiled: bool | None = None) -> np.ndarray:
    """Which lines chat or markdown may have changed (rdkafka_log.wrapped.
    unmangle runs its regex on these). The compiled scan flags a superset of
    the reference's (see _scan.c); the regex that follows decides."""
    if _use(compiled):
        out = np.empty(len(lines), dtype=np.uint8)
        if len(lines):
            _scan.mangle_candidates(*_buffers(lines), out)
        return out.view(bool)
    cheap = np.zeros(len(lines), dtype=bool)
    for needle in ("<", "&", "`", "](", "\u00a0"):
        cheap |= _mask(pc.match_substring(lines, needle))
    cheap |= _mask(pc.starts_with(pc.utf8_ltrim_whitespace(lines), ">"))
    return cheap


def needle_flags(lines: pa.Array, needles: list[tuple[str, bool]], compiled: bool | None = None) -> np.ndarray:
    """uint32 a line: bit k set where needles[k] = (text, anywhere) begins
    the line (anywhere false) or stands in it (true). At most 32."""
    if not 0 < len(needles) <= 32 or any(not t for t, _ in needles):
        raise ValueError("needle_flags: 1 to 32 needles, none empty")
    if _use(compiled):
        out = np.empty(len(lines), dtype=np.uint32)
        if len(lines):
            _scan.needle_flags(*_buffers(lines), out, tuple(t.encode() for t, _ in needles),
                               bytes(bool(a) for _, a in needles))
        if lines.null_count:   # a null's offsets may span bytes all the same
            out[~np.asarray(pc.is_valid(lines))] = 0
        return out
    out = np.zeros(len(lines), dtype=np.uint32)
    for k, (text, anywhere) in enumerate(needles):
        hit = _mask((pc.match_substring if anywhere else pc.starts_with)(lines, text))
        out[hit] |= np.uint32(1 << k)
    return out


def fence_candidates(lines: pa.Array, compiled: bool | None = None) -> np.ndarray:
    """Which lines may be markdown code fences: the compiled scan flags a
    superset of what ``FENCE`` matches (see _scan.c), the reference exactly
    those."""
    if _use(compiled):
        out = np.empty(len(lines), dtype=np.uint8)
        if len(lines):
            _scan.fence_candidates(*_buffers(lines), out)
        return out.view(bool)
    return np.asarray(pc.match_substring_regex(lines, FENCE).fill_null(False))


def _read(fn: str, texts: pa.Array, fields: int, flag: bool, sel: np.ndarray | None = None) -> np.ndarray | None:
    """n x fields int64 from the compiled scan ``fn``, a row for each of
    texts or, given ``sel``, for each texts[sel[i]]; None where the compiled
    scans were not built: the event's pattern reads every line (the
    reference)."""
    if not COMPILED:
        return None
    if sel is not None:
        sel = np.ascontiguousarray(sel, dtype=np.int64)
    out = np.empty((len(texts) if sel is None else len(sel), fields), dtype=np.int64)
    if len(out):
        getattr(_scan, fn)(*_buffers(texts), out, flag, sel)
    return out


def sent_received(texts: pa.Array, recv: bool, sel: np.ndarray | None = None) -> np.ndarray | None:
    """librdkafka's Sent (``recv`` false) or Received lines read (see
    _scan.c), all or those at ``sel``; row[S_OK] 0 where the text is left
    to the event's pattern. Positions are into the texts' data buffer."""
    return _read("sent_received", texts, S_FIELDS, recv, sel)


def topic_lines(texts: pa.Array, msgset: bool, sel: np.ndarray | None = None) -> np.ndarray | None:
    """librdkafka's "Produce MessageSet" (``msgset`` false) or delivered
    "MessageSet" lines read (see _scan.c), all or those at ``sel``;
    row[T_OK] 0 where the text is left to the event's pattern, 2 where it
    is surely not the event."""
    return _read("topic_lines", texts, T_FIELDS, msgset, sel)


class PlainColumns(NamedTuple):
    """plain_columns' result (see _scan.c)."""
    strings: list          # facility, client, thread, broker, text
    level: np.ndarray      # int8
    fresh: np.ndarray      # bool: a broker candidate unlike the one before
    bad_facilities: int    # facilities with a byte outside [A-Za-z0-9_-]


def plain_columns(lines: pa.Array, cut: np.ndarray, sel: np.ndarray | None) -> PlainColumns | None:
    """The facility, client, thread, broker and text of the plain lines
    ``sel`` picks (all when None), as rdkafka_plain_cut's ``cut`` found
    them, copied out in one pass (see _scan.c): a thread or broker the line
    lacks is empty, the text follows a broker candidate. None where the
    compiled scans were not built."""
    if not COMPILED:
        return None
    k = len(lines) if sel is None else len(sel)
    got = _scan.plain_columns(*_buffers(lines), np.ascontiguousarray(cut, dtype=np.int64),
                              None if sel is None else np.ascontiguousarray(sel, dtype=np.int64))
    strings = [pa.Array.from_buffers(pa.string(), k, [None, pa.py_buffer(got[2 * c]), pa.py_buffer(got[2 * c + 1])])
               for c in range(5)]
    return PlainColumns(strings, np.frombuffer(got[10], dtype=np.int8), np.frombuffer(got[11], dtype=bool), got[12])


def rdkafka_plain_cut(lines: pa.Array, compiled: bool | None = None) -> np.ndarray:
    """n x FIELDS int64: each line cut as librdkafka's stderr format lays it
    out (see _scan.c); row[OK] 0 where it is not of that shape."""
    if _use(compiled):
        out = np.empty((len(lines), FIELDS), dtype=np.int64)
        if len(lines):
            _scan.rdkafka_plain_cut(*_buffers(lines), out)
        return out
    return _plain_cut_numpy(lines)


def _next_at(pos: np.ndarray, at: np.ndarray, k: int = 0) -> np.ndarray:
    """The k-th position in sorted ``pos`` at or after each ``at`` (a large
    number when there is none)."""
    padded = np.concatenate([pos, np.full(k + 1, np.iinfo(np.int64).max // 2, dtype=np.int64)])
    return padded[np.searchsorted(pos, at) + k]


def byte_at(data: np.ndarray, at: np.ndarray) -> np.ndarray:
    """data[at], 0 where at is out of range."""
    ok = (at >= 0) & (at < len(data))
    out = np.zeros(len(at), dtype=np.uint8)
    out[ok] = data[at[ok]]
    return out


def _plain_cut_numpy(lines: pa.Array) -> np.ndarray:
    out = np.zeros((len(lines), FIELDS), dtype=np.int64)
    out[:, CLOSE] = out[:, SPACE] = -1
    off, data = offsets_data(lines)
    start, end = off[:-1], off[1:]
    plain = (end - start >= 10) & (byte_at(data, start) == ord("%")) & (byte_at(data, start + 2) == ord("|"))
    lvl = byte_at(data, start + 1)
    plain &= (lvl >= ord("0")) & (lvl <= ord("7"))
    idx = np.flatnonzero(plain)
    if not len(idx):
        return out
    start, end = start[idx], end[idx]
    pipes = np.flatnonzero(data == ord("|"))
    p2, p3, p4 = (_next_at(pipes, start + 2, k) for k in (1, 2, 3))
    ok = (p4 + 1 < end) & (byte_at(data, p4 + 1) == ord(" "))
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
    keep = np.flatnonzero(ok)
    start, end, p2, p3, p4, ms, idx = (a[keep] for a in (start, end, p2, p3, p4, ms, idx))
    # " [thrd:NAME]: ": NAME runs to the first "]", which ": " must follow.
    thrd = gather(data, p4 + 1, end - p4 - 1, len(_THRD))
    is_thrd = np.all(thrd == _THRD, axis=1)
    close = _next_at(np.flatnonzero(data == ord("]")), p4 + 8)
    has_thrd = is_thrd & (close + 2 < end) & (byte_at(data, close + 1) == ord(":")) & (byte_at(data, close + 2) == ord(" "))
    rest = np.where(has_thrd, close + 3, p4 + 2)
    # "BROKER: ": the first word, if it ends in ":".
    space = _next_at(np.flatnonzero(data == ord(" ")), rest)
    cand = (space < end) & (space - 1 > rest) & (byte_at(data, space - 1) == ord(":"))
    rows = out[idx]
    rows[:, OK] = 1
    rows[:, MS], rows[:, P2], rows[:, P3], rows[:, P4] = ms, p2, p3, p4
    rows[:, THRD], rows[:, REST], rows[:, CAND] = has_thrd, rest, cand
    # Where there is no "]" or " " in the line, the compiled scan says -1.
    rows[:, CLOSE] = np.where(is_thrd & (close < end), close, -1)
    rows[:, SPACE] = np.where(space < end, space, -1)
    out[idx] = rows
    return out
