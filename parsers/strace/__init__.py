"""strace text output -> the ``syscalls`` table (and ``log_writes``).

Reads what ``strace`` writes with any mix of -f/-ff, -t/-tt/-ttt/-r, -T,
-y/-yy and -s, whether it went to a file (-o) or to stderr, one row per
syscall, signal and process exit. The table:

  line_no     int64   1-based line number in the input of the row's first
                      line (the ``<unfinished ...>`` line for a resumed call).
  pid         int32   the pid/tid prefix: ``12345  `` (-f with -o) or
                      ``[pid 12345] `` (-f on stderr). Null when the line has
                      none (no -f, -ff files, or stderr while one process ran).
  ts_us       int64   the line's timestamp in microseconds: -ttt -> since the
                      epoch; -tt -> since midnight; -t -> since midnight, whole
                      seconds; -r -> since the input's first line: the running
                      sum of the printed deltas (each line's time since the
                      previous line, whatever its thread), resumed lines and
                      signals included, plus half a microsecond a line for
                      what strace's truncation to microseconds lost. Finer
                      digits (--timestamps=ns) are cut to microseconds. Null
                      when the line has no timestamp.
                      (kdiag.ingest.strace_clock puts -tt/-t/-r times on the
                      epoch clock from librdkafka's own timestamps; with
                      -ff, -r deltas span files and one file's sum is not a
                      clock.)
  dur_us      int64   time spent in the call, -T ``<0.000123>``, microseconds.
                      Without -T, a call split into ``<unfinished ...>`` and
                      ``<... resumed>`` lines gets the time between their
                      timestamps (strace stamps the call's entry and its
                      return; not with -t's whole seconds). Null otherwise
                      (no -T, calls that never returned, signals, exits).
  kind        string  "syscall", "signal" (``--- SIGCHLD {...} ---``), "exit"
                      (``+++ exited with 0 +++``, ``+++ superseded by execve
                      ... +++``) or "killed" (``+++ killed by SIGKILL +++``).
  syscall     string  the syscall name (``???`` when strace could not tell);
                      for signals and killed, the signal name (``SIGCHLD``);
                      null for exits.
  fd          int32   the first argument when it is an integer file
                      descriptor: annotated by -y/-yy (``7<TCP:[...]>``), or
                      an integer first argument of a call whose first
                      parameter is an fd (read, write, close, sendto, ...).
                      Null otherwise (``poll([...``, ``openat(AT_FDCWD...``).
  fd_info     string  the -y/-yy annotation of that fd without the brackets:
                      ``TCP:[127.0.0.1:42018->127.0.0.1:19093]``,
                      ``pipe:[4254]``, ``/tmp/x.log``. Null when absent.
  args        string  the arguments as printed, without the call's
                      parentheses; for a resumed call the unfinished part
                      followed by the resumed part. Signals and exits: the
                      text between ``---``/``+++`` markers. At most 4096
                      characters.
  ret         int64   the return value, decimal or 0x hex (hex is read as a
                      64-bit two's complement value); for exits the exit
                      status. Null for ``= ?``, calls that never returned,
                      signals, killed processes.
  errno       string  the error name after the return value (``EAGAIN``,
                      ``ERESTARTSYS``); null when none.
  unfinished  bool    true only for a call that never resumed: still
                      ``<unfinished ...>`` at the end of the input, followed
                      by its thread's exit, or ``<detached ...>``.
  data        string  for write, writev, pwrite64, sendto and sendmsg on fd 1
                      or 2 only: the first quoted string argument, unescaped
                      (log lines a program wrote to stdout/stderr; cut where
                      strace's -s cut it). Null otherwise.

Row order: feed() returns a chunk's rows sorted by line_no, but a call left
``<unfinished ...>`` is held back until its ``<... resumed>`` line arrives,
so across feeds rows are not globally in line order; sort on line_no when
that matters.

Lines that give no row are counted in ``counts.skipped`` by reason:
``blank``, ``strace_message`` (``strace: Process 123 attached``,
``[ Process PID=123 runs in x32 mode. ]``), ``stack_trace`` (the
`` > /lib/...`` lines of -k), ``unrecognised`` (not strace output),
``truncated`` (starts like strace output but the end is missing or
unreadable), ``summary_table`` (the table ``-C`` prints after the calls;
given alone it is read by ``kdiag.parsers.strace_summary``), ``markup``
(a pasted excerpt's code fences; its quote
markers "> " are taken off the lines), ``cut_at_start`` (an excerpt's
first line cut inside its head; see ``markup``), ``program_output``
(without -o, strace shares stderr with the traced program, whose text
lands inside strace's lines: the text is cut out, the line's rest on the
next line joined back to it, and text lines of their own are counted
here; see _join_program_output). A ``<... resumed>``
line with no pending call on its pid still
gives a row (what it knows: its own time, the resumed arguments, ret, errno,
dur) but is counted as skipped ``orphan_resumed`` rather than parsed.

Parsing is vectorised: a few RE2 passes over whole Arrow arrays, numpy
index arithmetic for cutting strings and for pairing unfinished calls with
their resumption (a stable sort by pid puts each thread's lines together).
Nothing loops over lines in Python except the unescaping of unusual
``data`` strings, the pairing of the rare call whose pid prefix changed
between its two lines (stderr output), the few last lines of each block
(is a line there still waiting for its end?) and, only in blocks with lines
that did not parse, the search for program output in them.

Modules: ``grammar`` (the line formats, as RE2 patterns), ``line_fields``
(a block's lines -> per-line fields; the line layout), ``values``
(numbers, timestamps, escapes), ``markup`` (what a paste adds or cuts),
``program_output`` (lines cut by strace's messages or the program's
output), ``events`` (pairing unfinished calls
with their resumption), ``rows`` (the table rows), ``parser`` (the
incremental parser), ``log_writes`` (the librdkafka lines among the
writes).
"""
from __future__ import annotations

import pyarrow as pa

from kdiag.parsers.base import ParseCounts
from kdiag.parsers.format import BY_LINES, CHUNKS, REQUESTS, SIGNALS, SYSCALLS, TEXT_SCANNER, Format
from kdiag.parsers.strace.log_writes import LOG_WRITES_SCHEMA, LOG_WRITES_SCHEMA_V1, log_writes
from kdiag.parsers.strace.parser import StraceParser, as_string_array
from kdiag.parsers.strace.rows import concat_rows
from kdiag.parsers.strace.schema import SCHEMA
from kdiag.parsers.strace.values import unescape

__all__ = ["FORMATS", "LOG_WRITES_SCHEMA", "SCHEMA", "StraceParser", "log_writes", "looks_like", "parse_lines",
           "unescape"]


def parse_lines(lines: list[str] | pa.Array, first_line_no: int = 1) -> tuple[pa.Table, ParseCounts]:
    """Parse a whole input at once: one feed() and finish(), in line order."""
    p = StraceParser()
    a = p.feed(as_string_array(lines), first_line_no)
    return concat_rows([a, p.finish()]), p.counts


def looks_like(sample: list[str]) -> float:
    """0..1: how much these first lines of a file look like strace output.

    The share of non-blank lines that parse (strace's own messages count),
    so strace output scores 1 and a log, JSON or source file near 0.
    """
    try:
        lines = [s.rstrip("\r\n") for s in sample if isinstance(s, str)]
        if not lines:
            return 0.0
        p = StraceParser()
        p.feed(pa.array(lines, pa.string()), 1)
        p.finish()
        c = p.counts
        # A pasted excerpt's code fences say nothing either way.
        nonblank = c.lines - c.skipped.get("blank", 0) - c.skipped.get("markup", 0)
        if nonblank <= 0:
            return 0.0
        good = c.parsed + sum(c.skipped.get(k, 0) for k in ("strace_message", "orphan_resumed", "program_output",
                                                            "cut_at_start"))
        return max(0.0, min(1.0, good / nonblank))
    except Exception:  # a guess about an arbitrary file must never raise
        return 0.0


FORMATS = (
    Format(name="strace", recognised_by=BY_LINES, recognise=looks_like,
           tables={"syscalls": SCHEMA, "log_writes": LOG_WRITES_SCHEMA},
           schema_version=2, reads=CHUNKS, parser=StraceParser,
           title="strace output", pseudonymised=TEXT_SCANNER, feeds={"syscalls": (SYSCALLS,), "log_writes": (REQUESTS, SIGNALS)},
           bundle_dir="strace", dated_after_parse=True,
           # log_writes carries rdkafka_events' columns, which grew in version 2.
           older={1: {"log_writes": LOG_WRITES_SCHEMA_V1}}),
)
