"""strace lines counted with ``uniq -c`` -> table ``syscall_totals``.

Users shorten a long strace by counting it, in two ways::

    $ grep -o '^[a-z_]*(' strace.log | sort | uniq -c | sort -rn
        942 newfstatat(
        252 futex(

    $ sort strace.log | uniq -c | sort -rn | head
        196 20272 <... clock_nanosleep resumed>NULL) = 0
         96 20285 poll([{fd=7, events=POLLIN}, {fd=8, events=POLLIN}], 2, 5 <unfinished ...>
         31 20285 <... futex resumed>)              = -1 EAGAIN (Resource temporarily unavailable)

``uniq -c`` prints the count right-aligned in seven places and a space
(``%7d ``), then the line; the line is strace's, with whatever prefix it
had (``-f``'s pid, a timestamp) or a bare ``name(`` from ``grep -o``.

Why a format of its own and not rows of ``syscalls``: sorting took away
what the strace parser's rows stand for. Lines are no longer in time
order, a call's ``<unfinished ...>`` half is no longer next to its
``<... resumed>`` half, and one row stands for many calls. Fed to the
strace parser as strace lines, they would pair halves of different calls
and time nothing; so each counted line is one row of ``syscall_totals``,
the table of counts that ``strace -c`` fills, with the line itself kept:

- ``repeats``: the count ``uniq -c`` printed; ``line``: the counted text
  (at most 4096 characters); ``pid``: its ``-f`` pid, when it has one.
- ``calls``: the calls the line stands for, so that summing ``calls`` by
  syscall counts each call once though its two halves are two lines. A
  whole line and a bare ``name(`` count ``repeats``. Of a thread's (pid's)
  halves of one syscall, either the ``<unfinished ...>`` ones count or the
  ``<... resumed>`` ones, whichever hold more repeats, the others 0: a
  ``head`` or a ``grep`` often kept only one kind (the poll loop a ticket
  shows as ``<unfinished ...>`` lines alone, or resumed sleeps whose
  starts were all unique).
- ``ret``, ``errno``: the return the line shows; ``errors`` is
  ``repeats`` when it shows an error name (``-1 EAGAIN ...``, ``?
  ERESTARTSYS``), else 0; null for ``name(`` lines, which show none.
- ``seconds``: ``repeats`` times the line's ``-T`` time (``<0.000120>``),
  null without one. ``summary`` is 1, the other columns null.

Signals (``--- SIGCHLD ...``) and exits (``+++ exited ...``) are counted as
skipped ``not_a_call``; other lines ``not_counted``; ``empty`` and
``markup`` as for any paste.
"""
from __future__ import annotations

import re

import pyarrow as pa

from kdiag.parsers.base import ParseCounts
from kdiag.parsers.format import BY_LINES, SYSCALLS, TEXT, TEXT_SCANNER, Format, Told
from kdiag.parsers.pasted import PROMPT, clean, pasted_lines
from kdiag.parsers.strace_summary import SCHEMA

MAX_LINE = 4096
# "%7d " and the line; a count of seven digits or more has no space before it.
_COUNTED = re.compile(r"^\s*(\d{1,19}) (.*)$")
# What strace puts before the call: "-f"'s pid ("12345 " or "[pid 12345] "),
# then -t/-tt/-ttt/-r's time.
_PREFIX = re.compile(r"^(?:\[pid\s{1,8}(\d{1,10})\]\s{1,8}|(\d{1,10})\s{1,8})?"
                     r"(?:(?:\d{1,2}:\d{2}:\d{2}(?:\.\d{1,9})?|\d{1,12}\.\d{1,9})\s{1,8})?")
_CALL = re.compile(r"([A-Za-z_][\w]{0,63}|\?\?\?)\(")
_RESUMED = re.compile(r"<\.\.\. ([A-Za-z_][\w]{0,63}|\?\?\?) resumed>")
_SIGNAL_OR_EXIT = re.compile(r"(?:---|\+\+\+) ")
# " = -1 EAGAIN (Resource ...)", " = 0x7f00", " = ? ERESTARTSYS (...)": after the last " = ".
_RETURN = re.compile(r"(-?\d{1,20}|0x[0-9a-fA-F]{1,16}|\?)(?:\s+(E[A-Z0-9_]{1,31})\b)?")
# -T's "<0.000120>" (a pasted line may have lost the brackets to an autolink cleaner).
_DURATION = re.compile(r"\s<?(\d{1,9}\.\d{1,9})>?\s*$")


def _ret(text: str) -> int | None:
    try:
        v = int(text, 16) if text.startswith("0x") else int(text)
    except ValueError:
        return None
    if v >= 2**63:
        v -= 2**64
    return v if -(2**63) <= v < 2**63 else None


def read_line(text: str) -> tuple[dict | None, str | None]:
    """(row, None) for a counted strace line, else (None, why)."""
    m = _COUNTED.match(text)
    if not m:
        return None, "not_counted"
    repeats, body = int(m.group(1)), m.group(2)
    if repeats >= 2**63:
        return None, "not_counted"
    p = _PREFIX.match(body)
    pid = p.group(1) or p.group(2)
    rest = body[p.end():]
    row = {"summary": 1, "total": False, "repeats": repeats, "line": body[:MAX_LINE],
           "pid": int(pid) if pid and int(pid) < 2**31 else None}
    half = None
    if m := _RESUMED.match(rest):
        row["syscall"], ended, half = m.group(1), True, "resumed"
    elif m := _CALL.match(rest):
        row["syscall"] = m.group(1)
        if not rest[m.end():].strip():   # grep -o's "name(": a count, nothing more
            row.update(calls=repeats)
            return row, None
        ended = not rest.rstrip().endswith("<unfinished ...>")
        half = None if ended else "unfinished"
    elif _SIGNAL_OR_EXIT.match(rest):
        return None, "not_a_call"
    else:
        return None, "not_counted"
    row["calls"], row["errors"] = repeats, 0
    if half:
        row["half"] = half
    at = rest.rfind(" = ")
    if ended and at >= 0:
        r = _RETURN.match(rest, at + 3)
        if r:
            row["ret"] = _ret(r.group(1)) if r.group(1) != "?" else None
            row["errno"] = r.group(2)
            row["errors"] = repeats if r.group(2) else 0
        if d := _DURATION.search(rest[max(at, len(rest) - 40):]):
            row["seconds"] = repeats * float(d.group(1))
    return row, None


def _count_halves_once(rows: list[dict]) -> None:
    """Per pid and syscall, the halves of the kind with fewer repeats count
    no calls: each call is then counted by its start or by its end."""
    held: dict[tuple, list[int]] = {}
    for r in rows:
        if r.get("half"):
            k = held.setdefault((r["pid"], r["syscall"]), [0, 0])
            k[r["half"] == "resumed"] += r["repeats"]
    for r in rows:
        half = r.pop("half", None)
        if half:
            unfinished, resumed = held[(r["pid"], r["syscall"])]
            counts_starts = unfinished >= resumed
            if counts_starts != (half == "unfinished"):
                r["calls"] = 0


def parse_counts(lines) -> tuple[pa.Table, ParseCounts]:
    counts = ParseCounts("strace_counts")
    rows: list[dict] = []
    for no, raw, text, what in pasted_lines(lines, counts):
        if what == PROMPT and "uniq" in text:
            counts.parsed += 1   # the command line that counted them
            continue
        row, why = read_line(text)
        if row is None:
            counts.reject(no, why, raw)
            continue
        counts.parsed += 1
        row["line_no"] = no
        rows.append(row)
    _count_halves_once(rows)
    return pa.table({f.name: [r.get(f.name) for r in rows] for f in SCHEMA}, schema=SCHEMA), counts


def looks_like(sample: list[str]) -> float:
    """Share of the sample's own lines that are counted strace lines.
    uniq -c pads its count (``%7d``), while an strace -f line's pid stands
    at the line's start, so strace's own output scores 0 here."""
    try:
        own = [t for t, what in map(clean, sample) if what is None and t.strip()]
        if not own:
            return 0.0
        good = 0
        for t in own:
            row, _ = read_line(t)
            # Without the padding (a paste that trimmed it), only what no
            # strace line is: a bare "name(", or a count before a pid.
            good += row is not None and (t[:1] == " " or row["line"].endswith("(") or row["pid"] is not None)
        return good / len(own)
    except Exception:  # a guess about an arbitrary file must never raise
        return 0.0


def _parse(lines: list[str], told: Told) -> tuple[pa.Table, ParseCounts]:
    return parse_counts(lines)


FORMATS = (
    Format(name="strace_counts", recognised_by=BY_LINES, recognise=looks_like,
           tables={"syscall_totals": SCHEMA}, schema_version=1, reads=TEXT, parser=_parse,
           title="strace lines counted by uniq -c", pseudonymised=TEXT_SCANNER,
           feeds={"syscall_totals": (SYSCALLS,)}, bundle_dir=None),
)
