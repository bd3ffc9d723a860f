"""strace's summary tables (``strace -c``, ``-C``, ``-w``) -> table
``syscall_totals``.

``strace -c`` counts each syscall and, when the traced program ends,
prints one table (to stderr, or to the ``-o`` file)::

    % time     seconds  usecs/call     calls    errors syscall
    ------ ----------- ----------- --------- --------- ----------------
     59.74    0.094542         379       249        24 futex
     19.36    0.030642         153       200           clock_nanosleep
    ------ ----------- ----------- --------- --------- ----------------
    100.00    0.158243          30      5136       605 total

Columns are right-aligned under the dashed rule, the name left-aligned; an
``errors`` cell is blank when the call never failed (0 errors), and strace
4's ``total`` row leaves ``usecs/call`` blank. ``-U`` chooses and orders
the columns (``syscall`` may come first; ``shortest``/``longest`` are the
fastest and slowest call in seconds), so a row is read through the header
it stands under: cells by the spans of the dashed rule, or by position
when a paste lost the rule. ``seconds`` is system time spent in the call
(CPU, not waiting), or with ``-w`` the wall-clock time inside it: the
output looks the same either way, so ``wall`` is true or false only when
the paste holds the command line (``$ strace -c -w ...``), else null.

==============  ========  ================================================
column          type      meaning (null when the table has no such column)
==============  ========  ================================================
line_no         int64     1-based line of the row
ts_us           int64     always null: a summary holds no time of its own
summary         int32     which table of the input, from 1
syscall         string    the call's name; null on the ``total`` row
total           bool      the ``total`` row (sums of the rows above it)
calls           int64     calls made
errors          int64     calls that failed (a blank cell is 0)
seconds         float64   time in the calls, seconds
usecs_per_call  int64     ``seconds`` / ``calls``, microseconds
time_pct        float64   share of all the calls' time, percent
shortest_s      float64   fastest call, seconds (``-U min-time``)
longest_s       float64   slowest call, seconds (``-U max-time``)
wall            bool      ``-w``: wall-clock time, not system time
pid, repeats,   ...       a counted strace line's own (``uniq -c``, see
ret, errno,               ``kdiag.parsers.strace_counts``); null here
line
==============  ========  ================================================

Skip reasons: ``empty``, ``markup`` (fences), ``strace_message``
(``strace: Process 12 attached``), ``not_summary`` (any other line, such
as the traced program's own output), ``bad_row`` (a row under a header
whose cells do not fit it). Header, rule and prompt lines are read.
"""
from __future__ import annotations

import re

import pyarrow as pa

from kdiag.parsers.base import ParseCounts
from kdiag.parsers.format import BY_LINES, SYSCALLS, TEXT, TEXT_SCANNER, Format, Told
from kdiag.parsers.pasted import MARKUP, PROMPT, clean, pasted_lines

SCHEMA = pa.schema([
    ("line_no", pa.int64()),
    # Every table the analysis reads has its rows' time; a count has none.
    ("ts_us", pa.int64()),
    ("summary", pa.int32()),
    ("syscall", pa.string()),
    ("total", pa.bool_()),
    ("calls", pa.int64()),
    ("errors", pa.int64()),
    ("seconds", pa.float64()),
    ("usecs_per_call", pa.int64()),
    ("time_pct", pa.float64()),
    ("shortest_s", pa.float64()),
    ("longest_s", pa.float64()),
    ("wall", pa.bool_()),
    # Counted strace lines (kdiag.parsers.strace_counts); null in a summary table's rows.
    ("pid", pa.int32()),
    ("repeats", pa.int64()),
    ("ret", pa.int64()),
    ("errno", pa.string()),
    ("line", pa.string()),
], metadata={"table": "syscall_totals"})

# strace's header names (strace 4 to 6, and -U's) -> column, type.
_HEADER_COLUMNS = {
    "% time": ("time_pct", float), "seconds": ("seconds", float), "usecs/call": ("usecs_per_call", int),
    "calls": ("calls", int), "errors": ("errors", int), "syscall": ("syscall", str),
    "shortest": ("shortest_s", float), "longest": ("longest_s", float),
}
_HEADER = re.compile(r"^\s*(?:% time\b.*\bcalls\b|syscall\s+calls\b|calls\s+errors\s+syscall\b)")
_HEADER_NAME = re.compile(r"% time|[\w/%]+")
_RULE = re.compile(r"^\s*-{3,}(?: +-{3,})+\s*$")
_NUMBER = re.compile(r"^\d{1,19}(?:\.\d{1,12})?$")
_NAME = re.compile(r"^[A-Za-z_?][\w?]{0,63}$")
_MESSAGE = re.compile(r"^(?:strace: |System call usage summary for |\[ Process PID=)")
# The command line: -c with -w among its short options, or the long form.
_STRACE_CMD = re.compile(r"\bstrace\b")
_WALL_OPT = re.compile(r"\s(?:-[A-Za-z]*w[A-Za-z]*|--summary-wall-clock)(?=\s|$)")


class _Table:
    """One summary's header: each column's name and span."""

    def __init__(self, header: str, number: int) -> None:
        self.number = number
        self.names: list[str] = []
        for m in _HEADER_NAME.finditer(header):
            self.names.append(m.group())
        self.columns = [_HEADER_COLUMNS.get(n, (None, None)) for n in self.names]
        self.spans: list[tuple[int, int]] | None = None

    def ruled(self, rule: str) -> None:
        spans = [m.span() for m in re.finditer(r"-+", rule)]
        if self.spans is None and len(spans) == len(self.names):
            self.spans = spans

    def cells(self, text: str) -> list[str | None] | None:
        """The row's cells in column order, None for a blank one; None when
        the row does not fit the header."""
        tokens = text.split()
        if len(tokens) == len(self.names):
            return tokens
        if self.spans is None or len(tokens) > len(self.names):
            return None
        # Fewer cells than columns: a blank one (errors 0). Which, the rule's
        # spans say; a cell may run past its column's left edge when wide.
        out: list[str | None] = []
        for i, (a, b) in enumerate(self.spans):
            end = len(text) if i == len(self.spans) - 1 else b
            cell = text[a:end].strip()
            out.append(cell or None)
        return out if sum(c is not None for c in out) == len(tokens) and " " not in "".join(c or "" for c in out) \
            else None


def _row(table: _Table, cells: list[str | None]) -> dict | None:
    row: dict = {"total": False}
    for (col, kind), cell in zip(table.columns, cells):
        if col is None:
            continue   # a column strace may add later: the rest of the row still reads
        if cell is None:
            row[col] = 0 if col == "errors" else None
        elif kind is str:
            if not _NAME.match(cell):
                return None
            row[col] = cell
        elif not _NUMBER.match(cell) or (kind is int and "." in cell):
            return None
        else:
            row[col] = kind(cell)
    name = row.get("syscall")
    if not name:
        return None
    if name == "total":
        row["syscall"], row["total"] = None, True
    return row


class _Reader:
    def __init__(self) -> None:
        self.table: _Table | None = None
        self.tables = 0
        self.wall: bool | None = None
        self.rows: list[dict] = []

    def read(self, no: int, text: str, what: str | None) -> str | None:
        """None when the line was read, else why it was skipped."""
        # strace's header starts "% time", which reads as a csh prompt.
        if _HEADER.match(text):
            self.tables += 1
            self.table = _Table(text, self.tables)
            return None
        if what == PROMPT:
            if _STRACE_CMD.search(text):
                self.wall = bool(_WALL_OPT.search(text))
            return None
        if _RULE.match(text):
            if self.table is None:
                return "not_summary"
            self.table.ruled(text)
            return None
        if _MESSAGE.match(text.lstrip()):
            return "strace_message"
        if self.table is None:
            return "not_summary"
        cells = self.table.cells(text)
        row = _row(self.table, cells) if cells is not None else None
        if row is None:
            return "bad_row" if text.split() and text.split()[0][:1].isdigit() else "not_summary"
        row["line_no"], row["summary"], row["wall"] = no, self.table.number, self.wall
        self.rows.append(row)
        return None


def parse_summary(lines) -> tuple[pa.Table, ParseCounts]:
    counts = ParseCounts("strace_summary")
    reader = _Reader()
    for no, raw, text, what in pasted_lines(lines, counts):
        if (why := reader.read(no, text, what)) is None:
            counts.parsed += 1
        elif why == "strace_message":
            counts.skip(why)
        else:
            counts.reject(no, why, raw)
    cols = {f.name: [r.get(f.name) for r in reader.rows] for f in SCHEMA}
    return pa.table(cols, schema=SCHEMA), counts


def looks_like(sample: list[str]) -> float:
    """Share of the sample's own lines that belong to a summary table; 0
    without a header and a row under it."""
    try:
        lines = [(text, what) for text, what in map(clean, sample) if what != MARKUP and text.strip()]
        if not lines:
            return 0.0
        reader, good = _Reader(), 0
        for i, (text, what) in enumerate(lines):
            why = reader.read(i, text, what)
            good += why is None or why == "strace_message"
        return good / len(lines) if reader.rows else 0.0
    except Exception:  # a guess about an arbitrary file must never raise
        return 0.0


def _parse(lines: list[str], told: Told) -> tuple[pa.Table, ParseCounts]:
    return parse_summary(lines)


FORMATS = (
    Format(name="strace_summary", recognised_by=BY_LINES, recognise=looks_like,
           tables={"syscall_totals": SCHEMA}, schema_version=1, reads=TEXT, parser=_parse,
           title="strace -c summary", pseudonymised=TEXT_SCANNER, feeds={"syscall_totals": (SYSCALLS,)},
           bundle_dir=None),
)
