"""Lines that something else cut: strace's own messages, and the traced
program's output when it shares strace's stream (no -o)."""
from __future__ import annotations

import itertools
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kdiag.parsers import scan
from kdiag.parsers.strace.grammar import HEAD_ANY, SPLIT_MSG
from kdiag.parsers.strace.schema import TRUNCATED, UNRECOGNISED
from kdiag.parsers.strace.values import unescape


def _cut_by_message(line: str | None) -> bool:
    """Whether strace's own message cut this line, leaving the rest of it on
    the next line (see join_cut_lines)."""
    if not line or not line.endswith(("attached", "detached")):
        return False
    m = re.match(r"^(.+?)strace: Process \d+ (?:attached|detached)$", line)
    return bool(m) and not re.fullmatch(r"(?:\[pid +\d+\] )?", m.group(1))


def join_cut_lines(lines: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """Rejoin "wait4(-1, strace: Process 5940 attached" + " <unfinished ...>".

    Returns the lines with each first half replaced by the whole line, and
    for each line the index of the line it was joined to (-1 for none): the
    second halves point at their first.
    """
    n = len(lines)
    joined_to = np.full(n, -1, dtype=np.int64)
    ci = np.flatnonzero(scan.ends_with(lines, (" attached", " detached")))
    ci = ci[ci + 1 < n]
    if not len(ci):
        return lines, joined_to
    m = pc.extract_regex(lines.take(pa.array(ci)), pattern=SPLIT_MSG)
    pre = m.field("pre").fill_null("")
    nxt = lines.take(pa.array(ci + 1))
    # Not when the first half is only a prefix (a plain message line) or the
    # next line starts a line of its own.
    only_prefix = np.asarray(pc.match_substring_regex(pre, r"^(?:\[pid +\d+\] )?$"))
    own = np.asarray(pc.extract_regex(nxt, pattern=HEAD_ANY).is_valid())
    use = np.asarray(m.is_valid()) & ~only_prefix & ~own
    if not use.any():
        return lines, joined_to
    um = pa.array(use)
    joined = pc.binary_join_element_wise(pre.filter(um), nxt.filter(um), "")
    mask = np.zeros(n, dtype=bool)
    mask[ci[use]] = True
    joined_to[ci[use] + 1] = ci[use]
    return pc.replace_with_mask(lines, pa.array(mask), joined), joined_to


# --- Program output on strace's stream ------------------------------------------
#
# Without -o, strace writes to stderr, and a traced program that writes to
# the same stderr has its text land in whatever line strace has open at that
# moment: strace prints a call's start when the call is entered and the rest
# when it returns. In the call's own line:
#   [pid 16476] 1795332605.978754 write(2</tmp/x>, "%7|...CorrId 2)\n", 156%7|...CorrId 2)
#   ) = 156 <0.000017>
# in another thread's, begun after strace closed the write's with
# <unfinished ...>, even between two of its arguments:
#   [pid 20541] 1795332819.097661 rt_sigprocmask(SIG_SETMASK, ~[KILL STOP RTMIN RT_1], %7|...NodeId 111
#   NULL, 8) = 0 <0.000013>
# or between two lines, on a line of its own. Text of several lines puts
# the rest of them in between. OUTPUT_LOOKBACK bounds how far back the
# write and the open line may be.
OUTPUT_LOOKBACK = 64
_PY_HEAD = re.compile(HEAD_ANY)
# The calls that write a buffer to fd 1 or 2: 'write(2</dev/pts/0>, "' ...
_PY_STD_WRITE = re.compile(r'(?:write|pwrite64|sendto|send)\([12](?:<(?:[^<>]|<[^<>]*>)*>)?, "')
_PY_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"(\.\.\.)?')
# How a line that strace finished ends: ") = 0 <0.000012>", "= ?",
# " <unfinished ...>", " <detached ...>", "--- ... ---", "+++ ... +++".
_PY_FINISHED = re.compile(r"(?:= \S.*|<unfinished \.\.\.>|<detached \.\.\.>| ---| \+\+\+)$")


def _std_write_buffer(line: str) -> tuple[str, bool, int] | None:
    """For a write to fd 1/2: the text it puts out, whether -s cut it, and
    where the quoted buffer ends on the line; None for other lines."""
    m = _PY_HEAD.match(line)
    if not m or not m.group("tok").endswith("("):
        return None
    start = m.start("tok")
    if not _PY_STD_WRITE.match(line, start):
        return None
    q = _PY_QUOTED.search(line, start)
    return (unescape(q.group(1)), q.group(2) is not None, q.end()) if q else None


def _text_start(line: str, head_end: int, between: list[str], writes) -> int:
    """Where a write's text starts on the open line it landed in, followed by
    the lines ``between`` and then the rest of the line; -1 when it is not
    the text of the line's own write or of one of ``writes`` (buffers of the
    writes before it, nearest first)."""
    own = _std_write_buffer(line)
    for k, (text, cut, qend) in enumerate(itertools.chain([own] if own else [], writes)):
        parts = text.split("\n")
        if not parts[0]:
            continue
        # The whole buffer: its lines are this line's end, the lines in
        # between, and nothing after the last newline. A cut one (-s) is
        # known only to its cut.
        whole = len(parts) == len(between) + 2 and parts[-1] == "" and between == parts[1:-1]
        if (whole or (cut and len(parts) > 1)) and line.endswith(parts[0]):
            at = len(line) - len(parts[0])
        elif cut and len(parts) == 1:
            if own and k == 0:  # after its own length argument: '"..., 432%7|...'
                m = re.compile(r", \d+" + re.escape(parts[0])).match(line, qend)
                at = m.end() - len(parts[0]) if m else -1
            else:
                at = line.rfind(parts[0])
        else:
            continue
        if at >= head_end:
            return at
    return -1


class _Block:
    """A block's lines as text, read lazily (most are never needed), with
    the lines just before it in front."""

    def __init__(self, lines: pa.Array, context: list[str]):
        self.lines, self.pre = lines, len(context)
        self.text: list[str | None] = context + [None] * len(lines)
        self.heads: dict[int, re.Match | None] = {}
        self.buffers: dict[int, tuple | None] = {}

    def get(self, i: int) -> str:
        if self.text[i] is None:
            self.text[i] = self.lines[i - self.pre].as_py() or ""
        return self.text[i]

    def head(self, i: int):
        if i not in self.heads:
            self.heads[i] = _PY_HEAD.match(self.get(i))
        return self.heads[i]

    def writes_before(self, i: int):
        """The buffers of the writes to fd 1/2 before line i, nearest first."""
        for x in range(i - 1, max(-1, i - 1 - OUTPUT_LOOKBACK), -1):
            if x not in self.buffers:
                w = self.get(x)
                self.buffers[x] = _std_write_buffer(w) if "write(" in w or "send" in w else None
            if self.buffers[x]:
                yield self.buffers[x]


def _join_open_line(block: _Block, c: int, kind: np.ndarray, joined_to: np.ndarray,
                    program: np.ndarray, replace: dict[int, str]) -> None:
    """Line c as the rest of an open line, after the text (and its other
    lines): cut the text from that line and join line c to it."""
    pre, rest = block.pre, block.get(block.pre + c)
    between: list[str] = []
    for j in range(c - 1, max(-1, c - 1 - OUTPUT_LOOKBACK), -1):
        if joined_to[j] >= 0 or j in replace:
            return
        h = block.head(pre + j)
        if h is None:
            between.insert(0, block.get(pre + j))
            continue
        if kind[j] == TRUNCATED:
            line = block.get(pre + j)
            at = _text_start(line, h.end(), between, block.writes_before(pre + j))
            if at >= 0:
                replace[j] = line[:at] + rest
                joined_to[c] = j
                program[j + 1:c] = True
        return


def _is_own_text_line(block: _Block, c: int) -> bool:
    """Line c as a text line of its own, between two of strace's."""
    rest = block.get(block.pre + c)
    for buf in block.writes_before(block.pre + c):
        if buf[0] and (rest == buf[0].split("\n")[0] or (buf[1] and "\n" not in buf[0]
                                                                 and rest.startswith(buf[0]))):
            return True
    return False


def join_program_output(lines: pa.Array, kind: np.ndarray, joined_to: np.ndarray,
                          context: list[str]) -> tuple[pa.Array | None, np.ndarray]:
    """Take the program's text out of strace's lines: cut it from the open
    line it landed in and join that line's rest to it, and mark the lines
    that are only program text. Tried only for lines that did not parse, so
    a capture written with -o costs nothing. ``context``: the lines just
    before the block, where the write may be.

    Returns the new lines (None when nothing changed; joined_to then points
    each line's rest at the line it ends) and the mask of program text."""
    n = len(lines)
    program = np.zeros(n, dtype=bool)
    odd = np.flatnonzero(kind == UNRECOGNISED)
    if not len(odd):
        return None, program
    block = _Block(lines, context)
    replace: dict[int, str] = {}
    for c in odd.tolist():
        if program[c] or joined_to[c] >= 0:
            continue
        _join_open_line(block, c, kind, joined_to, program, replace)
        if joined_to[c] < 0 and _is_own_text_line(block, c):
            program[c] = True
    if not replace:
        return None, program
    mask = np.zeros(n, dtype=bool)
    idx = sorted(replace)
    mask[idx] = True
    return pc.replace_with_mask(lines, pa.array(mask), pa.array([replace[i] for i in idx], pa.string())), program


def held_tail(block: pa.Array) -> int:
    """How many of the block's last lines may still be waiting for the rest
    of a line in what comes next: a line cut by an strace message, or an open
    line (within OUTPUT_LOOKBACK of the end) and what follows it."""
    k = len(block)
    if not k:
        return 0
    hold = 1 if _cut_by_message(block[k - 1].as_py()) else 0
    for j in range(k - 1, max(-1, k - 1 - OUTPUT_LOOKBACK), -1):
        line = block[j].as_py() or ""
        if _PY_HEAD.match(line):
            if not _PY_FINISHED.search(line):
                hold = max(hold, k - j)
            break
    return hold
