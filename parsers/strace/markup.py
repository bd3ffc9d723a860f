"""What chat and markdown add around strace lines a user pasted, and the
line a paste cut at its start.

A pasted excerpt arrives quoted ("> 1795773046.071423 write(12, ..., 30)
= 30", "> > ..." when quoted again) and between code fences (```, ~~~).
The quote markers are taken off each line, so the line parses as strace
printed it; a fence is a line of its own, counted as ``markup``.

The first line of an excerpt is often cut inside its head: "46.120485
read(12, ..., 5) = 5" (the epoch seconds lost their first digits) or
"ad(12, ..., 5) = 5". Such a line is told by a timestamp of another kind or
width than the next line's; it is counted as ``cut_at_start``, and the
line layout is learned from the lines after it, so it sets neither the
clock nor the layout.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kdiag.parsers import scan
from kdiag.parsers.strace.grammar import HEAD_ANY

# "> ", ">", "> > ": markdown's quote markers at the very start of a line.
# strace's own lines never start with '>' (-k stack lines start " > ").
_QUOTE = r"^(?:> ?)+"
# How many leading lines are looked at for a cut first line.
HEAD_SAMPLE = 16


def unquote(lines: pa.Array) -> pa.Array:
    """The lines without markdown's quote markers."""
    if not len(lines) or not pc.any(pc.starts_with(lines, ">")).as_py():
        return lines
    return pc.replace_substring_regex(lines, pattern=_QUOTE, replacement="", max_replacements=1)


def fences(lines: pa.Array) -> np.ndarray:
    """Which lines are code fences."""
    if not len(lines):
        return np.zeros(0, dtype=bool)
    cand = scan.fence_candidates(lines)
    out = np.zeros(len(lines), dtype=bool)
    if cand.any():   # the pattern decides, on the few candidates
        idx = np.flatnonzero(cand)
        out[idx] = np.asarray(pc.match_substring_regex(lines.take(pa.array(idx)), scan.FENCE).fill_null(False))
    return out


def _shape(row: dict) -> tuple:
    """What a head's timestamp looks like: its kind and width
    ("1795773046.071423" has 10 digits before the point, "     0.000288"
    (-r) a few; "02:24:05.260276" is a time of day). Not the pid prefix: on
    stderr strace prints it only once a second process is traced."""
    ts = (row["ts"] or "").strip()
    if ":" in ts:
        return ("tod", len(ts.split(".")[0]))
    if ts:
        return ("num", len(ts.split(".")[0]) >= 10)
    return ("none",)


def cut_first_line(lines: pa.Array) -> int:
    """The index of a first call line cut at its start (see the module
    docstring), or -1. Only the first line that looks like a call can be
    one, and only when the next one shows what a whole line looks like."""
    sample = lines.slice(0, HEAD_SAMPLE)
    head = pc.extract_regex(sample, pattern=HEAD_ANY)
    tok = head.field("tok").fill_null("") if len(head) else head
    found = []
    for i, (row, t) in enumerate(zip(head.to_pylist(), tok.to_pylist() if len(head) else [])):
        if row is None or not t.endswith(("(", "resumed>")) and not t.startswith("<..."):
            continue
        found.append((i, _shape(row)))
        if len(found) == 2:
            break
    if len(found) < 2 or found[0][1] == found[1][1]:
        return -1
    return found[0][0]
