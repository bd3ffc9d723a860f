"""Time pieces: a large capture's threads walked a piece of time at a time
(``per_request._runs``), one window partition each, so its threads become
many bounded tasks on every core instead of one sort per thread (at 1e7
requests: 3 tasks on 2 cores, each spilling 13 GB).

What crosses a piece's edge is copied into the piece (``with_edges``): the
writes of a run still open at its start, the last call before it that
ended a run, and the first socket read after it. Walked with the piece,
the copies make each of its rows see what the walk of the whole thread
shows it; they are walked but never reported (only markers leave the
walk). One aggregation of the calls, a row per thread and piece, tells
where those are.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import NamedTuple

from kdiag.analysis.spark_plumbing import RUN, frame

# The piece of calls without a time: they sort before all others.
UNTIMED = -(2 ** 63)
# Pieces are walked apart when the syscalls are at least this many rows,
# each about PIECE_ROWS of them (of all threads). The copies cost one more
# read of the calls: at 5 M calls (1e6 requests) the split took 20.3 s in
# pieces against 11.7-14.4 s whole, at 50 M 147 s against 168 s.
PIECE_MIN_ROWS = 20_000_000
PIECE_ROWS = 200_000


class Pieces(NamedTuple):
    """Time pieces of ``us`` microseconds from ``t0_us``; every row's piece
    is in ``lo``..``hi`` (or UNTIMED). ``line_bits``: the bits the calls'
    line numbers need (from the footers; None when unknown)."""
    us: int
    t0_us: int
    lo: int
    hi: int
    line_bits: int | None = None


def pieces_of(tables_dir: Path, us: int | None = None,
              names: tuple[str, ...] = ("syscalls", "log_writes")) -> Pieces | None:
    """The pieces a large capture is walked in, from its tables' footers
    (row count, ts_us's bounds); None when it is small or a footer lacks
    the bounds. ``us``: pieces this long, however small the capture."""
    import pyarrow.parquet as pq

    lo = hi = None
    rows = 0
    line_bits = None
    for name in names:
        path = Path(tables_dir) / f"{name}.parquet"
        if not path.exists():
            continue
        meta = pq.read_metadata(path)
        if name == names[0]:
            rows = meta.num_rows
            line_bits = _line_bits(meta)
        col = meta.schema.to_arrow_schema().get_field_index("ts_us")
        for i in range(meta.num_row_groups):
            st = meta.row_group(i).column(col).statistics
            if meta.row_group(i).num_rows == 0:
                continue
            if st is None or not st.has_min_max:
                if st is not None and st.null_count == meta.row_group(i).num_rows:
                    continue   # untimed rows only
                return None
            lo = st.min if lo is None else min(lo, st.min)
            hi = st.max if hi is None else max(hi, st.max)
    if lo is None or (us is None and rows < PIECE_MIN_ROWS):
        return None
    us = us or max(1, math.ceil((hi - lo + 1) * PIECE_ROWS / rows))
    # One piece below and above: a row the footer's bounds miss still has one.
    return Pieces(us, lo, -1, (hi - lo) // us + 1, line_bits)


def _line_bits(meta) -> int | None:
    """The bits of the largest line number in a table's footer; None when
    a row group does not tell it, or has a line number negative or null."""
    col = meta.schema.to_arrow_schema().get_field_index("line_no")
    if col < 0:
        return None
    top = 0
    for i in range(meta.num_row_groups):
        st = meta.row_group(i).column(col).statistics
        if meta.row_group(i).num_rows == 0:
            continue
        if st is None or not st.has_min_max or st.min < 0 or st.null_count:
            return None
        top = max(top, st.max)
    return top.bit_length()


def piece_of(pieces: Pieces | None):
    from pyspark.sql import functions as F

    ts = F.col("_ts")
    if pieces is None:
        return F.lit(0).cast("long")
    # Floored, so that a row's time within its piece is never negative (see
    # _packed_order).
    return F.when(ts.isNull(), F.lit(UNTIMED)).otherwise(
        F.expr(f"(_ts - {pieces.t0_us}L - {_within(pieces)}) div {pieces.us}L"))


def _within(pieces: Pieces) -> str:
    """A timed row's time within its piece, in SQL: never negative."""
    return f"pmod(_ts - {pieces.t0_us}L, {pieces.us}L)"


def _order():
    """A call's place in its thread, comparable in an aggregate or a join:
    (time, line), the calls without a time first."""
    from pyspark.sql import functions as F

    return F.struct(F.coalesce(F.col("_ts"), F.lit(UNTIMED)).alias("t"), F.col("_line").alias("l"))


def _packed_order(pieces: Pieces):
    """_order as one long within a piece, (time in the piece) << line_bits |
    line, when both fit: a long's max and min aggregate in a hash table,
    where a struct's sort all the calls first (at 1e7 requests 50 M rows).
    None when they may not fit."""
    from pyspark.sql import functions as F

    if pieces.line_bits is None or pieces.us.bit_length() + pieces.line_bits > 62:
        return None
    within = F.when(F.col("_ts").isNull(), F.lit(0)).otherwise(F.expr(_within(pieces)))
    return F.shiftleft(within.cast("long"), pieces.line_bits) + F.col("_line")


def _unpacked(v: int | None, piece: int, pieces: Pieces) -> tuple | None:
    """_packed_order's (t, l) again, as _order gives them."""
    if v is None:
        return None
    line = v & ((1 << pieces.line_bits) - 1)
    if piece == UNTIMED:
        return UNTIMED, line
    return pieces.t0_us + piece * pieces.us + (v >> pieces.line_bits), line


def _pid_key():
    """pid as a join key: the calls without one are a thread too."""
    from pyspark.sql import functions as F

    return F.coalesce(F.col("pid"), F.lit(-1))


class _Edges(NamedTuple):
    """Per thread, what each piece needs from the others (``edges``)."""
    into: list      # (run, pid, piece, last ending call (t, l) or None, [later pieces its open writes go to])
    rows: list      # (run, pid, piece, ts, line, is_read): the ending call before it, the read after it


def edges(calls, pieces: Pieces) -> _Edges:
    """One aggregation of the calls (a row per thread and piece: its last
    call that ended a run, its first socket read), walked here in piece
    order: the writes after a piece's last ending call are copied into the
    later pieces up to the next one with an ending call (the run they
    begin is open there); each piece, with calls or not (a marker may fall
    in one without), gets a copy of the last ending call before it and of
    the first socket read after it."""
    from pyspark.sql import functions as F

    packed = _packed_order(pieces)
    o = _order() if packed is None else packed
    got = calls.groupBy(RUN, "pid", "_p").agg(
        F.max(F.when(~F.col("_wr"), o)).alias("le"),
        F.min(F.when(F.col("_rd") & F.col("_ts").isNotNull(), o)).alias("fr")).collect()
    threads: dict = {}
    for g in got:
        if packed is None:
            le, fr = (tuple(g.le) if g.le else None, tuple(g.fr) if g.fr else None)
        else:
            le, fr = _unpacked(g.le, g._p, pieces), _unpacked(g.fr, g._p, pieces)
        threads.setdefault((g[RUN], g.pid), {})[g._p] = (le, fr)
    every = [UNTIMED, *range(pieces.lo, pieces.hi + 1)]
    into, rows = [], []
    for (run, pid), mine in threads.items():
        have = sorted(mine)
        for i, q in enumerate(have):
            to = []
            for r in have[i + 1:]:
                to.append(r)
                if mine[r][0] is not None:
                    break
            into.append((run, pid, q, mine[q][0], to))
        last_end, reads, next_read = None, {}, None
        for q in reversed(every):   # the first read after each piece
            reads[q] = next_read
            if q in mine and mine[q][1] is not None:
                next_read = mine[q][1]
        for q in every:
            if last_end is not None:
                rows.append((run, pid, q, None if last_end[0] == UNTIMED else last_end[0], last_end[1], False))
            if reads[q] is not None:
                rows.append((run, pid, q, reads[q][0], reads[q][1], True))
            if q in mine and mine[q][0] is not None:
                last_end = mine[q][0]
    return _Edges(into, rows)


def with_edges(calls, found: _Edges, req_t):
    """The calls (with ``_p``) and their copies: the open writes in the
    pieces after theirs, each piece's ending call before it and read after
    it."""
    from pyspark.sql import functions as F

    spark = calls.sparkSession
    into = frame(spark, found.into, f"{RUN} string, pid int, _p long, _le struct<t: long, l: long>, "
                                    "_to array<long>").withColumn("_pk", _pid_key()).drop("pid")
    open_ = F.col("_wr") & (F.col("_le").isNull() | (_order() > F.col("_le")))
    # Only a write can be copied forward: the other calls join on a null key,
    # which the hash join skips without a lookup, and stay in their piece
    # without an array of it to explode (the 50 M calls at 1e7 requests
    # read in 5.8-6.0 s against 7.8 s, with the prefix tests of
    # per_request.flag_syscalls).
    walked = calls.withColumn("_pk", F.when(F.col("_wr"), _pid_key())).join(
        F.broadcast(into), [RUN, "_pk", "_p"], "left").withColumn(
        "_in", F.explode_outer(F.when(open_, F.concat(F.array("_p"), F.col("_to")))))
    walked = walked.withColumn("_p", F.coalesce("_in", "_p")).drop("_pk", "_le", "_to", "_in")
    near = frame(spark, found.rows or [], f"{RUN} string, pid int, _p long, _ts long, _line long, _rd boolean")
    near = near.select(
        RUN, "pid", "_ts", F.lit(1).alias("_k"), "_line", F.lit(False).alias("_wr"), "_rd",
        F.lit(None).cast("long").alias("_ret"), F.lit(None).cast("int").alias("_fd"),
        F.lit(None).cast("string").alias("_fdi"), F.lit(None).cast(req_t).alias("_req"), "_p")
    return walked.unionByName(near)
