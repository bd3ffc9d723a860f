"""Records a terminal, a console or a logger broke over lines, joined.

Two shapes, both seen in pastes:

* a line cut at a fixed column (a terminal's width, a console buffer's
  ~150 columns, a logger that wraps): the pieces after the first start
  where the cut fell, mid-word, often lower case ("...: Co" / "nnection
  refused"); a .NET console pads them with spaces to the column; a logger
  indents them by its prefix's width ("ProduceRequ" / 23 spaces "est
  failed"). The cut line's length is the chunk's longest, found on two
  lines or more;
* a line broken at a space and its rest indented ("(errno: Connection" /
  " timed out)"), or not indented inside a console.log'd object's
  ``message: '...'`` left open.

A continuation is joined to the line before it, when that line is one of
librdkafka's records or errors, if it does not start as a record does: it is indented, or it follows a line cut at the column and
starts with a lower-case letter or "_"; and it holds none of librdkafka's
or the client libraries' record starts. Indented lines that are records'
parts of their own (node's util.inspect properties, a stack trace's "at"
frames) are left alone. At most MAX_JOINED lines join one record; the
joined lines are counted as skipped ``joined`` (the record keeps the first
one's line number). A record cut by a chunk boundary is not joined across
it.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kdiag.parsers import scan
from kdiag.parsers.rdkafka_log.columns import null_as_false
from kdiag.parsers.scan import byte_at
from kdiag.parsers.strings import offsets_data

MAX_JOINED = 8
# A cut line is a long one: shorter lines are lines that ended.
_MIN_WIDTH = 60
_LOGGER_INDENT = 8
# A line that starts a record of any format read here, or is one of
# node's util.inspect record lines (a string's pieces too, "    ' Sent
# ProduceRequest ...'," after a "'...' +": the parser reads them) or a
# stack frame (behind a prefix too: the debug module's "  app:error     at
# f (file.js:1:2)").
_STARTS = (r"[A-Za-z]*Error: |\s{2,}at \S|%[0-7]\||\[thrd:|RDKAFKA-[0-7]-|#(?:producer|consumer)-[0-9]|^\s*(?:at |\{|\}|[A-Za-z]+: |"
           r"(?:severity|fac|name|timestamp|message): )|^(?:Emergency|Alert|Critical|Error|Warning|Notice|Info|Debug)\||"
           r"^    ['\"`].*['\"`](?: \+)?,?$")
_RECORD = (r"%[0-7]\||\[thrd:|RDKAFKA-[0-7]-|#(?:producer|consumer)-[0-9]|\|[A-Z]{3,}\||[Ff]ailed|Local: |"
           r"[Ee]rror|[Tt]imed out|[Tt]ransport")
# util.inspect's "message: '...": a single-quoted string not closed on its line.
_OPEN_MESSAGE = r"^\s*message: '(?:[^'\\]|\\.)*$"
_SPACE = np.frombuffer(b" \t", dtype=np.uint8)


def _holds(lines: pa.Array, needle: str) -> np.ndarray:
    """Which lines hold ``needle``, null as not: the compiled needle scan,
    where Arrow's match_substring over every line of a chunk was two thirds
    of the log parser's time in Arrow (long lines: an async producer's)."""
    return scan.needle_flags(lines, [(needle, True)]) != 0


def _open_quotes(lines: pa.Array, n: int) -> np.ndarray:
    """The lines that go on a console.log'd object's ``message: '...``
    left open on the line before (a console that wraps at a space, its
    pieces not indented), up to the one that closes it; at most
    MAX_JOINED."""
    out = np.zeros(n, dtype=bool)
    has = np.flatnonzero(_holds(lines, "message: '"))
    if not len(has):
        return out
    open_ = has[null_as_false(pc.match_substring_regex(lines.take(pa.array(has)), _OPEN_MESSAGE))]
    for i in open_:
        rest = lines.slice(i + 1, MAX_JOINED).to_pylist()
        for k, piece in enumerate(rest):
            if not piece or not piece.strip():
                break
            out[i + 1 + k] = True
            if "'" in piece:
                break
    return out


def join_wrapped(lines: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """(the lines with continuations joined to their record, the indices
    of the lines kept)."""
    n = len(lines)
    keep_all = np.arange(n)
    if n < 2:
        return lines, keep_all
    off, data = offsets_data(lines)
    length = np.diff(off)
    first = byte_at(data, np.where(length > 0, off[:-1], -1))
    indented = np.isin(first, _SPACE)
    cont = np.zeros(n, dtype=bool)
    # No line is longer than the column a terminal cuts at.
    width = int(length.max())
    if width < _MIN_WIDTH or int((length == width).sum()) < 2:
        width = -1
    after_cut = np.zeros(n, dtype=bool)
    if width > 0:
        after_cut[1:] = length[:-1] == width
        lower = ((first >= ord("a")) & (first <= ord("z"))) | (first == ord("_"))
        cont |= after_cut & lower
    cont |= indented & (length > 0)
    quoted = _open_quotes(lines, n)
    cont |= quoted
    cont[0] = False
    # The line before must hold something: a blank line ends a record.
    cont[1:] &= length[:-1] > 0
    idx = np.flatnonzero(cont)
    if not len(idx):
        return lines, keep_all
    starts = null_as_false(pc.match_substring_regex(lines.take(pa.array(idx)), _STARTS))
    blank = null_as_false(pc.match_substring_regex(lines.take(pa.array(idx)), r"^\s*$"))
    cont[idx[(starts | blank) & ~quoted[idx]]] = False
    # Bounded: the MAX_JOINED+1th line of a run and those after it stay lines.
    run = np.zeros(n, dtype=np.int64)
    idx = np.flatnonzero(cont)
    for i in idx:   # continuation lines only
        run[i] = run[i - 1] + 1 if run[i - 1] else 1
    cont &= run <= MAX_JOINED
    # Only a record of librdkafka's or of its errors is continued: prose
    # and other programs' lines are left as they are.
    anchors = np.flatnonzero(~cont[:-1] & cont[1:])
    if len(anchors):
        ok = null_as_false(pc.match_substring_regex(lines.take(pa.array(anchors)), _RECORD))
        for a in anchors[~ok]:
            stop = a + 1
            while stop < n and cont[stop]:
                cont[stop] = False
                stop += 1
    idx = np.flatnonzero(cont)
    if not len(idx):
        return lines, keep_all
    # The indent a logger pads its pieces with: the least among them.
    pieces_indent = [len(s) - len(s.lstrip(" \t")) for s in lines.take(pa.array(idx[indented[idx]])).to_pylist()]
    pad = min(pieces_indent) if pieces_indent else 0
    anchors = np.flatnonzero(~cont[:-1] & cont[1:])
    joined = []
    for a in anchors:
        stop = a + 1
        while stop < n and cont[stop]:
            stop += 1
        parts = lines.take(pa.array(np.arange(a, stop))).to_pylist()
        text = parts[0]
        for k, piece in enumerate(parts[1:], start=a + 1):
            # Cut at the column (a logger's wrap indents by its prefix's width,
            # and its first line may be longer than the pieces): the piece
            # goes on where the cut fell.
            if quoted[k]:
                text = text.rstrip() + " " + piece.strip()
            elif after_cut[k] or (indented[k] and pad >= _LOGGER_INDENT and length[k - 1] >= _MIN_WIDTH):
                text += piece[pad:] if indented[k] else piece
            else:
                text = text.rstrip() + " " + piece.lstrip()
        joined.append(text)
    keep = np.flatnonzero(~cont)
    out = lines.take(pa.array(keep))
    mask = np.zeros(len(keep), dtype=bool)
    mask[np.searchsorted(keep, anchors)] = True
    out = pc.replace_with_mask(out, pa.array(mask), pa.array(joined, out.type))
    return out, keep


# A second whole "%<level>|<E.ms>|<FAC>|<name>| " record start after
# spaces on a line that starts with one, no prefix before it: records a paste joined with
# single spaces, or with the run of spaces a terminal wrap left. RE2, linear
# in the line.
_RECORD_START = r"%[0-7]\|[0-9]{9,12}\.[0-9]{3}\|[A-Za-z0-9_\-]*\|[^|]*\| "
_NEXT_RECORD = r"(\S)\s+(" + _RECORD_START + ")"


def split_joined(lines: pa.Array, line_no: np.ndarray) -> tuple[pa.Array, np.ndarray, int]:
    """(the records joined on one line apart, each keeping the line's
    number; how many records came after a line's first). Only a line that
    starts with one of librdkafka's own records is split, so that every
    piece is a record the parser reads: the line stays one line read."""
    cheap = _holds(lines, " %")
    if not cheap.any():
        return lines, line_no, 0
    sub = lines.filter(pa.array(cheap))
    hit = null_as_false(pc.match_substring_regex(sub, "^" + _RECORD_START + ".*" + _NEXT_RECORD))
    if not hit.any():
        return lines, line_no, 0
    at = np.flatnonzero(cheap)[hit]
    mask = np.zeros(len(lines), dtype=bool)
    mask[at] = True
    marked = pc.replace_substring_regex(lines.filter(pa.array(mask)), _NEXT_RECORD, "\\1\n\\2")
    whole = pc.replace_with_mask(lines, pa.array(mask), marked)
    parts = pc.split_pattern(pc.fill_null(whole, ""), "\n")
    parent = pc.list_parent_indices(parts).to_numpy()
    out = pc.list_flatten(parts)
    # A null line stays null (it counts as what it was).
    if lines.null_count:
        out = pc.if_else(pa.array(~lines.is_null().to_numpy(zero_copy_only=False)[parent]), out,
                         pa.scalar(None, pa.string()))
    return out, line_no[parent], len(out) - len(lines)
