"""The strace parser: chunks of lines in, ``syscalls`` rows out, with the
state that spans chunks (calls still unfinished, lines held back for
their other half, the line layout, the -r running clock)."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kdiag.parsers import scan
from kdiag.parsers.base import EXAMPLES_KEPT, ParseCounts
from kdiag.parsers.strace.events import Events, pair
from kdiag.parsers.strace.line_fields import Layout, learn_layout, line_fields
from kdiag.parsers.strace.markup import HEAD_SAMPLE, cut_first_line, fences, unquote
from kdiag.parsers.strace.program_output import OUTPUT_LOOKBACK, held_tail, join_cut_lines, join_program_output
from kdiag.parsers.strace.rows import concat_rows, emit_rows
from kdiag.parsers.strace.schema import (
    BLANK,
    CONT,
    CUT_START,
    KILLED,
    MARKUP,
    PROGRAM,
    SKIP_REASON,
    SUMMARY,
    UNRECOGNISED,
    empty_table_of_schema,
)
from kdiag.parsers.strings import data_buffer as _data_buffer
from kdiag.parsers.strings import offsets_data as _offsets_data

# strace -c/-C's table: its header, a dashed rule, a row of figures and a name
# (RE2, linear in the line).
_SUMMARY_LINE = (r"^\s*(?:% time\s.*\bcalls\b.*|-{3,}(?: +-{3,})+\s*"
                 r"|\d{1,3}\.\d{2}\s+\d+\.\d{6}(?:\s+\d+){1,3}\s+[A-Za-z_?][\w?]*\s*)$")

# Lines are parsed in blocks so that intermediate arrays stay a bounded size
# whatever one feed() is given.
BLOCK_LINES = 1 << 17


class _Prepared(NamedTuple):
    """What prepare() did ahead for a feed."""
    block: tuple[int, int]     # the first block's first line number and length
    joined: pa.Array           # its lines, those cut by strace's messages joined
    joined_to: np.ndarray
    fields: dict               # line_fields of joined
    source: pa.Array           # the lines prepare() was given,
    lines: pa.Array            # and as feed() reads them (as_string_array)


class StraceParser:
    """Incremental strace parser: feed() chunks of lines, then finish()."""

    source = "strace"

    def __init__(self) -> None:
        self.counts = ParseCounts(self.source)
        self.clock: str | None = None
        self._clock_set = False
        # Set once, from the first lines that parse: prepare(), in another
        # thread, starts once it is.
        self._layout: Layout | None = None
        # Calls still <unfinished ...>, at most one per pid.
        self._pending = Events.empty()
        # Lines held back from the end of the last feed (see held_tail),
        # and the line number of the first.
        self._carry: tuple[pa.Array, int] | None = None
        # The last lines of the previous block once program output was seen
        # (see join_program_output).
        self._context: list[str] = []
        # -r: the running sum of the deltas so far, in half microseconds
        # (see _run_relative; the first line's delta is not corrected).
        self._rel_half_us = -1
        # What prepare() did ahead for the next block.
        self._ahead = None
        # Only the input's first block can begin with a line cut at its start.
        self._first_block = True

    # -- public ---------------------------------------------------------------

    def feed(self, lines: pa.Array, first_line_no: int) -> pa.Table:
        ahead = self._ahead
        lines = ahead.lines if ahead is not None and ahead.source is lines else as_string_array(lines)
        first = int(first_line_no)
        out = []
        if self._carry is not None and len(lines):
            held, no = self._carry
            self._carry = None
            if no + len(held) == first:
                lines = pa.concat_arrays([held, lines])
                first = no
            else:  # what they waited for is not next: they stay cut
                out.append(self._feed_block(held, no))
        n = len(lines)
        if self._first_block and 0 < n < HEAD_SAMPLE:
            # Whether the first line was cut shows against the lines after
            # it: the input's first lines are judged together, however fed.
            self._carry = (pa.array(lines.to_pylist(), pa.string()), first)
            return concat_rows(out)
        s = 0
        while s < n:
            block = lines.slice(s, BLOCK_LINES)
            k = len(block)
            # A line whose end may be in the next block (cut by an strace
            # message or by the program's own output) is held back, with
            # what follows it, so that both halves meet in one block.
            hold = held_tail(block)
            if s + k < n:
                hold = min(hold, k - 1)
            elif hold:
                self._carry = (pa.array(block.slice(k - hold).to_pylist(), pa.string()), first + s + k - hold)
            if k - hold:
                out.append(self._feed_block(block.slice(0, k - hold), first + s))
            s += k if s + k >= n else k - hold
        return concat_rows(out)

    def prepare(self, lines: pa.Array, first_line_no: int):
        """The per-line work of the first block that feed(lines,
        first_line_no) will cut, done ahead: pure, so a second thread can do
        it while this one feeds the lines before. Hand the result to
        use_prepared() before that feed(); it is used only if the block
        turns out the same (no lines held back from the feed before), else
        redone. None until the line format is known."""
        if self._layout is None:
            return None
        source, lines = lines, as_string_array(lines)
        block = lines.slice(0, BLOCK_LINES)
        hold = held_tail(block)
        if len(lines) > len(block):
            hold = min(hold, len(block) - 1)
        block = block.slice(0, len(block) - hold)
        if not len(block):
            return None
        joined, joined_to = join_cut_lines(block)
        return _Prepared((int(first_line_no), len(block)), joined, joined_to, line_fields(joined, self._layout),
                         source, lines)

    def use_prepared(self, prepared) -> None:
        self._ahead = prepared

    def finish(self) -> pa.Table:
        out = []
        if self._carry is not None:
            held, no = self._carry
            self._carry = None
            out.append(self._feed_block(held, no))
        pend, self._pending = self._pending, Events.empty()
        if len(pend):
            m = len(pend)
            out.append(emit_rows(pend, np.arange(m), np.full(m, -1), np.ones(m, dtype=bool)))
        return concat_rows(out)

    # -- one block --------------------------------------------------------------

    def _feed_block(self, lines: pa.Array, first: int) -> pa.Table:
        n = len(lines)
        if n == 0:
            return empty_table_of_schema()
        cut = -1
        if self._first_block:
            self._first_block = False
            cut = cut_first_line(lines)
        if self._layout is None:
            self._layout = learn_layout(lines.slice(cut + 1))
        line_no = np.arange(first, first + n, dtype=np.int64)
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead.block == (first, n):
            lines, joined_to, p = ahead.joined, ahead.joined_to, ahead.fields
        else:
            lines, joined_to = join_cut_lines(lines)
            p = line_fields(lines, self._layout)
        fence = fences(lines)
        p["kind"][fence] = MARKUP
        joined, program = join_program_output(lines, p["kind"], joined_to, self._context)
        if joined is not None:
            lines = joined
            p = line_fields(lines, self._layout)
            p["kind"][fence] = MARKUP
        if cut >= 0:
            p["kind"][cut] = CUT_START
            p["ts_ok"][cut] = False
        keep = 2 * OUTPUT_LOOKBACK
        self._context = (self._context + [x or "" for x in lines.slice(max(0, n - keep)).to_pylist()])[-keep:]
        kind = p["kind"]
        # The end that was joined to its line shares that line's fate.
        ci = np.flatnonzero(joined_to >= 0)
        if len(ci):
            to = kind[joined_to[ci]]
            kind[ci] = np.where(to <= KILLED, CONT, to)
        if program.any():
            kind[program] = PROGRAM
            p["ts_ok"][program] = False

        odd = np.flatnonzero(kind == UNRECOGNISED)
        if len(odd):
            table = pc.match_substring_regex(lines.take(pa.array(odd)), _SUMMARY_LINE).to_numpy(zero_copy_only=False)
            kind[odd[table]] = SUMMARY

        if not self._clock_set:
            self._set_clock(p, kind)
        if self.clock == "relative":
            self._run_relative(p)

        ev = np.flatnonzero(kind <= KILLED)
        off, _ = _offsets_data(lines)
        evs = Events(
            line_no=line_no, pid=p["pid"], pid_ok=p["pid_ok"], ts=p["ts"], ts_ok=p["ts_ok"], kind=kind,
            ret=p["ret"], ret_ok=p["ret_ok"], dur=p["dur"], dur_ok=p["dur_ok"], name=p["name"],
            errno=p["errno"], a_start=off[:-1] + p["a_start"], a_len=np.maximum(p["a_stop"] - p["a_start"], 0),
            a_buf=np.zeros(n, dtype=np.int64), buffers=[_data_buffer(lines)],
        )
        if len(ev) < n:
            evs = evs.select(ev)
        paired = pair(self._pending, evs)
        self._pending = paired.pending
        self._count(lines, line_no, kind, paired.orphan_line_no)
        return emit_rows(paired.events, paired.rows, paired.partner, paired.unfinished)

    def _count(self, lines: pa.Array, line_no: np.ndarray, kind: np.ndarray, orphans: np.ndarray) -> None:
        c = self.counts
        n = len(kind)
        c.lines += n
        skipped = 0
        for code, reason in SKIP_REASON.items():
            k = int(np.count_nonzero(kind == code))
            c.skip(reason, k)
            skipped += k
        c.skip("orphan_resumed", len(orphans))
        c.parsed += n - skipped - len(orphans)
        if len(c.examples) < EXAMPLES_KEPT:
            bad = [(int(i), SKIP_REASON[int(kind[i])]) for i in np.flatnonzero(kind >= BLANK)[:EXAMPLES_KEPT]]
            bad += [(int(np.searchsorted(line_no, no)), "orphan_resumed") for no in orphans[:EXAMPLES_KEPT]]
            for i, reason in sorted(bad)[: EXAMPLES_KEPT - len(c.examples)]:
                c.example(int(line_no[i]), reason, lines[i].as_py() or "")

    def _run_relative(self, p: dict) -> None:
        """-r prints each line's time since the previous line's; ts_us
        becomes their running sum, in line order. Every timestamped line
        counts, resumed halves and signals included, because strace measures
        from whichever line it printed last. strace cuts each delta to the
        microsecond (``%06ld`` of nanoseconds / 1000), losing half a
        microsecond a line on average: adding that back keeps a million-line
        capture from drifting half a second."""
        ok = p["ts_ok"]
        if not ok.any():
            return
        half = np.cumsum(np.where(ok, 2 * p["ts"] + 1, 0)) + self._rel_half_us
        self._rel_half_us = int(half[-1])
        p["ts"] = np.where(ok, half // 2, p["ts"])

    def _set_clock(self, p: dict, kind: np.ndarray) -> None:
        parsed = np.flatnonzero(kind <= KILLED)
        if not len(parsed):
            return
        i = parsed[0]
        self._clock_set = True
        if not p["ts_ok"][i]:
            self.clock = None
        elif p["tod"][i]:
            self.clock = "time_of_day"
        elif p["ts"][i] >= 10**15:  # 2001 onwards: -ttt; -r prints small deltas
            self.clock = "epoch"
        else:
            self.clock = "relative"



def as_string_array(lines) -> pa.Array:
    if isinstance(lines, pa.ChunkedArray):
        lines = lines.combine_chunks() if lines.num_chunks else pa.array([], pa.string())
    elif not isinstance(lines, pa.Array):
        lines = pa.array(list(lines), pa.string())
    if lines.type != pa.string():
        lines = lines.cast(pa.string())
    if lines.null_count:
        lines = lines.fill_null("")
    quoted, crlf = scan.edge_bytes(lines, ">", "\r")
    if crlf:
        lines = pc.utf8_rtrim(lines, "\r")
    return unquote(lines) if quoted else lines
