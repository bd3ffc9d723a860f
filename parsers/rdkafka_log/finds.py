"""Log lines as a search or a count shows them, before they are read.

Users often paste not the log but what a search of it found, or a count
of its lines:

* Notepad++'s "Find in Files" results: a ``Search "TEXT" (N hits in M
  files ...)`` line, a ``  C:\\path\\file.log (N hits)`` line per file,
  then each hit as ``\\tLine 123: <the line>``;
* VS Code's search view "Copy All" and its search editor: the file's path,
  then each hit ``  123,45: <the line>`` (line, column) or ``  123: ``;
* grep's (and editors' "copy as grep") ``path:123:<the line>`` for a match
  and ``path-123-<the line>`` for a context line;
* ``sort | uniq -c``: each distinct line once, after its count, right
  aligned: GNU's ``"%7lu "``, BSD's ``"%4d "``.

A markdown table's rows have their cells' escaped "|" undone. The prefix
is cut off; the count is kept (``repeat``: the line stood that
many times); the search's own heading lines are not log lines and are
counted apart (``find_header``).
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kdiag.parsers.rdkafka_log.columns import null_as_false
from kdiag.parsers.scan import byte_at
from kdiag.parsers.strings import offsets_data

# uniq -c: the count right-aligned in 7 columns (GNU) or 4 (BSD), then one
# space; a count wider than its field pushes the line right.
_UNIQ = (r"^(?P<n> {6}[0-9]| {5}[0-9]{2}| {4}[0-9]{3}| {3}[0-9]{4}| {2}[0-9]{5}| [0-9]{6}|[0-9]{7,12}"
         r"| {3}[0-9]| {2}[0-9]{2}| [0-9]{3}) ")
# Notepad++ (and klogg): "\tLine 123: "; VS Code: "  123,45: "; grep: a
# file path (it holds a "." or a "/" or "\\", so a date or a broker name
# is not taken for one) then ":123:" or "-123-".
_PATH_CHARS = r"[^\s:|%#\[\]{}\"'<>=,;()]"
_HIT = (r"^(?:\s*Line [0-9]{1,12}: |\s+[0-9]{1,12}(?:,[0-9]{1,6})?: |(?:[A-Za-z]:)?" + _PATH_CHARS
        + r"*[./\\]" + _PATH_CHARS + r"*(?::[0-9]{1,12}:|-[0-9]{1,12}-))")
# Notepad++'s headings: 'Search "x" (12 hits in 1 file of 1 searched)' and
# '  C:\logs\app.log (12 hits)'.
# VS Code's: the file's path alone on its line.
_HEADER = (r'^(?:Search ".*\([0-9]+ hits? in [0-9]+ files?|\s+\S.* \([0-9]+ hits?\)\s*$'
           r'|(?:[A-Za-z]:)?[^\s:]*[/\\][^\s]*\.[A-Za-z0-9]{1,8}\s*$)')


def strip_finds(lines: pa.Array) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """(the lines without search and count prefixes, each line's repeat
    count, which lines are a search's headings)."""
    n = len(lines)
    repeat = np.ones(n, dtype=np.int32)
    header = np.zeros(n, dtype=bool)
    # None of these prefixes begins with librdkafka's own "%": a plain log
    # pays one byte a line, not three regex passes.
    off, data = offsets_data(lines)
    first = byte_at(data, np.where(off[1:] > off[:-1], off[:-1], -1))
    idx = np.flatnonzero(first != ord("%"))
    if not len(idx):
        return lines, repeat, header
    sub = lines.take(pa.array(idx))
    # A markdown table's row ("| time | %3\\|1795600801.788\\|FAIL\\|... |"):
    # GitHub escapes the "|" inside a cell; the escapes and the closing "|"
    # are undone.
    table = first[idx] == ord("|")
    if table.any():
        rows = pc.replace_substring(sub.filter(pa.array(table)), "\\|", "|")
        rows = pc.replace_substring_regex(rows, r"\s*\|\s*$", "")
        sub = pc.replace_with_mask(sub, pa.array(table), rows)
    counted = null_as_false(pc.match_substring_regex(sub, _UNIQ))
    if counted.any():
        got = pc.extract_regex(sub.filter(pa.array(counted)), _UNIQ)
        c = pc.cast(pc.utf8_trim_whitespace(pc.struct_field(got, "n")), pa.int64())
        repeat[idx[counted]] = np.clip(c.to_numpy(zero_copy_only=False), 0, 2**31 - 1).astype(np.int32)
        sub = pc.replace_substring_regex(sub, _UNIQ, "", max_replacements=1)
    hit = null_as_false(pc.match_substring_regex(sub, _HIT))
    if hit.any():
        sub = pc.replace_substring_regex(sub, _HIT, "", max_replacements=1)
    header[idx] = null_as_false(pc.match_substring_regex(sub, _HEADER)) & ~hit & ~counted
    if counted.any() or hit.any() or table.any():
        mask = np.zeros(n, dtype=bool)
        mask[idx] = True
        lines = pc.replace_with_mask(lines, pa.array(mask), sub)
    return lines, repeat, header
