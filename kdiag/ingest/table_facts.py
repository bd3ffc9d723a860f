"""What the writer of a table can tell of it on the way, so that the
analysis need not read every row again to find out: that it holds no
copies, and that no thread's clock steps in it.

The analysis's input checks (``kdiag.analysis.input_checks``) read every
row of four tables: a hash aggregate for copies, a sort per thread in file
order for clock steps; at 1e7 requests a third of its time. The parse
already sees every row, in file order, a chunk at a time: a few numbers per
thread kept from chunk to chunk tell the usual case, a clean capture, for
sure. Each fact is a sufficient condition, never a guess: where it does not
hold the analysis runs its checks as before.

- No copies: within each group of rows a copy would share (same thread, or
  same client, broker and event), one column never goes back in file order
  (the call's time, or the CorrId), so only rows next to each other can
  agree on it; and where they do (one thread's two reads in one
  microsecond: a TLS record's header, then its body), they differ in
  another column. None is a copy of another.
- No clock steps: per thread, in file order, no row is behind the previous
  one by more than the check's tolerance and none follows it by more than
  its forward gap: the check would observe nothing.

The facts go into the Parquet file's footer (key ``kdiag.facts``) with the
row count they describe; a file whose rows differ from it (rewritten by
another tool that kept the metadata) has none.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from kdiag.ingest.input_rules import (
    FORWARD_GAP_US,
    LOG_BACK_TOLERANCE_US,
    PLACE,
    RUN,
    STRACE_BACK_TOLERANCE_US,
    in_copy_scope,
)

KEY = "kdiag.facts"
VERSION = 1
# Past this many threads (or client, broker and event groups) the state is
# not kept: the facts are left unknown, as for a table no parse wrote.
MAX_GROUPS = 100_000
# Rows that tie on the column that rises are compared column by column, up
# to this many a chunk; past it the table is said to maybe hold copies.
MAX_TIED = 20_000
# Not compared: a row's place, and a socket write's text, which the analysis
# does not read (job._inputs), so that its copy check cannot tell rows apart
# by it either.
NOT_COMPARED = (*PLACE, RUN, "data")
# The row of the chunk a scoped row came from.
_ROW = "_facts_row"


@dataclass(frozen=True)
class _Plan:
    copy_group: tuple[str, ...]     # rows a copy shares these with ...
    copy_rises: str                 # ... and this, which never goes back when there is none
    clock_group: tuple[str, ...] = ()   # a thread, for the clock check (none: not checked)
    back_tolerance_us: int = 0
    ends_after_dur: bool = False    # a call's end is ts_us + dur_us (syscalls)


def _plans() -> dict[str, _Plan]:
    # No plan for stats: several snapshots a second share a whole-second
    # time, and nothing else in them rises; they are few rows for Spark.
    return {
        "syscalls": _Plan(("pid",), "ts_us", ("pid",), STRACE_BACK_TOLERANCE_US, True),
        "log_writes": _Plan(("pid",), "ts_us"),
        "rdkafka_events": _Plan(("client", "broker", "event"), "corr_id", ("client", "thread"), LOG_BACK_TOLERANCE_US),
    }


class Watch:
    """Fed a table's chunks in the order they are written; ``facts()`` at
    the end. A table kdiag does not check has no plan: nothing to tell."""

    def __init__(self, table: str) -> None:
        self.plan = _plans().get(table)
        self.table = table
        self.rows = 0
        self.copies_seen = False      # a value that went back, or tied rows that agree: maybe a copy
        self.steps_seen = False       # a row the clock check would observe
        self._last_rise: dict = {}    # copy group -> (its last value, the rows that have it, compared)
        self._last_call: dict = {}    # thread -> (line_no, ts_us, end_us) of its last timed row
        self.lost = False             # too many groups: no facts

    def feed(self, t) -> None:
        self.rows += t.num_rows
        if self.plan is None or self.lost or not t.num_rows:
            return
        import numpy as np
        import pyarrow as pa

        extra = (RUN,) if RUN in t.column_names else ()
        p = self.plan
        # Only the columns looked at: filtering the rest (a call's args) is
        # most of the cost. The rows that tie are taken from ``full``.
        wanted = {*extra, *p.copy_group, p.copy_rises, *p.clock_group, "ts_us", "line_no", "event", "corr_id",
                  *(("dur_us",) if p.ends_after_dur else ())}
        full = t
        t = t.select([c for c in t.column_names if c in wanted])
        try:
            if not self.copies_seen:
                scoped = in_copy_scope(t.append_column(_ROW, pa.array(np.arange(t.num_rows))), self.table)
                self.copies_seen = not _no_copies(scoped, full, extra + p.copy_group, p.copy_rises,
                                                  self._last_rise)
            if p.clock_group and not self.steps_seen:
                self.steps_seen = _steps(t, extra + p.clock_group, p, self._last_call)
        except (KeyError, TypeError, ValueError, pa.ArrowException):
            # A table of another shape than planned: the facts are unknown,
            # and the analysis checks; the table itself is written all the same.
            self.lost = True
        if len(self._last_rise) > MAX_GROUPS or len(self._last_call) > MAX_GROUPS:
            self.lost = True

    def facts(self) -> dict | None:
        if self.plan is None or self.lost:
            return None
        return {"v": VERSION, "rows": self.rows, "no_copies": not self.copies_seen,
                "no_clock_steps": bool(self.plan.clock_group) and not self.steps_seen}

    def stamp(self, writer) -> None:
        """Into the footer of the file ``writer`` (a ParquetWriter, before
        its close) writes."""
        f = self.facts()
        if f is not None:
            writer.add_key_value_metadata({KEY: json.dumps(f)})


def _groups(t, cols: tuple[str, ...]):
    """Each row's group as one integer (codes of this chunk only), and the
    group's values by code."""
    import numpy as np
    import pyarrow.compute as pc

    code = np.zeros(t.num_rows, dtype=np.int64)
    dicts = []
    for c in cols:
        enc = pc.dictionary_encode(t[c].combine_chunks(), null_encoding="encode")
        idx = _np(enc.indices)
        code = code * len(enc.dictionary) + idx
        dicts.append(enc.dictionary.to_pylist())
    return code, dicts


def _np(col):
    """A column without nulls as a numpy int64 array."""
    import numpy as np

    if hasattr(col, "combine_chunks"):
        col = col.combine_chunks()
    return col.to_numpy(zero_copy_only=False).astype(np.int64)


def _key(code: int, dicts: list) -> tuple:
    out = []
    for d in reversed(dicts):
        code, i = divmod(int(code), len(d))
        out.append(d[i])
    return tuple(reversed(out))


def _segments(code):
    """Rows sorted by group, file order kept within each; where each group starts."""
    import numpy as np

    # numpy's stable sort of 16-bit integers is a radix sort: 4x faster
    # than of int64 on a 90,000-row chunk of 5 threads; threads and
    # client-broker-event groups rarely number more.
    small = len(code) and 0 <= code.min() and code.max() < 1 << 16
    order = np.argsort(code.astype(np.uint16) if small else code, kind="stable")
    sc = code[order]
    starts = np.flatnonzero(np.r_[True, sc[1:] != sc[:-1]])
    return order, sc, starts


def _no_copies(t, full, cols: tuple[str, ...], rises: str, last: dict) -> bool:
    """Whether no row of ``t`` can be a copy of another of its group, here
    or in earlier chunks: ``rises`` never goes back within a group, from the
    group's last value on, and the rows that share a value (a tie) differ in
    a compared column. ``t``: the rows in the copy check's scope, narrow,
    with ``_ROW``, their row in ``full`` (the whole chunk)."""
    import numpy as np
    import pyarrow as pa

    if not t.num_rows:
        return True
    code, dicts = _groups(t, cols)
    order, sc, starts = _segments(code)
    v = _np(t[rises])[order]
    same = sc[1:] == sc[:-1]
    if np.any(v[1:][same] < v[:-1][same]):
        return False
    # Runs of rows that tie, within a group; a group's first run continues
    # its last from the chunk before when the value is the same.
    run = np.cumsum(np.r_[True, ~(same & (v[1:] == v[:-1]))]) - 1
    ends = np.r_[starts[1:], len(v)] - 1
    carried = {}
    for s in starts:
        prev = last.get(_key(sc[s], dicts))
        if prev is not None:
            if v[s] < prev[0]:
                return False
            if v[s] == prev[0]:
                carried[int(run[s])] = prev[1]
    compared = np.bincount(run) >= 2
    compared[list(carried)] = True
    compared[run[ends]] = True            # each group's last run, for the next chunk
    idx = np.flatnonzero(compared[run])
    if len(idx) + sum(map(len, carried.values())) > MAX_TIED:
        return False
    names = [c for c in full.column_names if c not in NOT_COMPARED]
    taken = full.select(names).take(pa.array(_np(t[_ROW])[order][idx]))
    seen: dict[int, set] = {}
    for i, row in zip(idx, zip(*(_values(col) for col in taken.columns))):
        r = int(run[i])
        got = seen.get(r)
        if got is None:
            got = seen[r] = set(carried.get(r, ()))
        if row in got:
            return False
        got.add(row)
    for s, e in zip(starts, ends):
        last[_key(sc[s], dicts)] = (int(v[e]), frozenset(seen[int(run[e])]))
    return True


# A NaN as the copy check holds it: equal to every other NaN (Spark
# normalises NaN, and -0.0 to 0.0, before it groups; Python's -0.0 already
# equals 0.0). Nested values become tuples, which a set can hold.
_NAN = ("NaN",)


def _values(col) -> list:
    import pyarrow as pa

    values = col.to_pylist()
    if pa.types.is_floating(col.type) or pa.types.is_nested(col.type):
        return [_held(x) for x in values]
    return values


def _held(x):
    if isinstance(x, float):
        return _NAN if x != x else x
    if isinstance(x, list):
        return tuple(map(_held, x))
    if isinstance(x, dict):
        return tuple((k, _held(y)) for k, y in x.items())
    return x


def _steps(t, cols: tuple[str, ...], plan: _Plan, last: dict) -> bool:
    """Whether the clock check (``input_checks._step_observations``) would
    observe a row here: per thread, among rows with a time, a row whose
    line number rises from the previous one and whose time is behind it by
    more than the tolerance, or after its end by more than the gap."""
    import numpy as np
    import pyarrow.compute as pc

    # A parse's tables mostly have every time and line number: the filter
    # and the fills then cost a chunk's copy for nothing (a fifth of this
    # check's time on an async producer's log, 2026-12-01).
    if t["ts_us"].null_count:
        t = t.filter(pc.is_valid(t["ts_us"]))
    if not t.num_rows:
        return False
    code, dicts = _groups(t, cols)
    order, sc, starts = _segments(code)
    ts = _np(t["ts_us"])[order]
    end = ts
    if plan.ends_after_dur:
        dur = t["dur_us"]
        end = ts + _np(pc.fill_null(dur, 0) if dur.null_count else dur)[order]
    lines = t["line_no"]
    if lines.null_count:
        has_line = _np(pc.is_valid(lines))[order].astype(bool)
        line = _np(pc.fill_null(lines, 0))[order]
    else:
        has_line = np.ones(len(ts), dtype=bool)
        line = _np(lines)[order]
    # Each row's predecessor in its thread: the row before it in the sorted
    # chunk when the group is the same, else the group's last from before.
    p_line, p_ts, p_end, p_ok = (_after(x, z) for x, z in ((line, 0), (ts, 0), (end, 0), (has_line, False)))
    ends = np.append(starts[1:], len(ts)) - 1
    for s, e in zip(starts, ends):
        k = _key(sc[s], dicts)
        prev = last.get(k)
        if prev is None:
            p_ok[s] = False
        else:
            p_ok[s] = prev[0] is not None
            p_line[s], p_ts[s], p_end[s] = (prev[0] or 0), prev[1], prev[2]
        last[k] = (int(line[e]) if has_line[e] else None, int(ts[e]), int(end[e]))
    compared = p_ok & has_line & (line > p_line)
    back = ts - p_ts < -plan.back_tolerance_us
    fwd = ts - p_end > FORWARD_GAP_US
    return bool(np.any(compared & (back | fwd)))


def _after(x, first):
    """x moved one place on, ``first`` in its first place."""
    import numpy as np

    out = np.empty_like(x)
    out[0] = first
    out[1:] = x[:-1]
    return out


def read(path: Path) -> dict:
    """A table file's facts, ``{}`` when it has none (another writer, an
    older kdiag, or rows that are no longer the ones described)."""
    import pyarrow.parquet as pq

    try:
        meta = pq.read_metadata(path)
        raw = (meta.metadata or {}).get(KEY.encode())
        f = json.loads(raw) if raw else None
    except (OSError, ValueError):
        return {}
    if not isinstance(f, dict) or f.get("v") != VERSION or f.get("rows") != meta.num_rows:
        return {}
    return {k: f.get(k) is True for k in ("no_copies", "no_clock_steps")}
