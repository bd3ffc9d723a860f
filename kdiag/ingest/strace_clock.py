"""What parse_paths adds to the strace parser's rows, per file.

strace files, beyond what the parser gives (the parser reads lines, never
file names):
  pid          ``strace -ff -o DIR/strace`` writes one file per thread,
               DIR/strace.PID, with no pid on its lines. A file recognised as
               strace by its content whose lines carry no pid takes the pid
               from a trailing ``.<digits>`` in its name; recognition stays by
               content, the name only supplies the pid.
  line_no      with several strace files, line numbers run on from one file
               to the next (the analysis joins a librdkafka line to its
               syscall by line number); a note gives each file's range.
  ts_us        put on the epoch clock, per file:
               -ttt  as printed.
               -tt   time of day: dated by the day that librdkafka's own
                     epoch timestamps, in the lines the producer wrote to
                     stderr (log_writes.log_ts_us), give; a file without such
                     lines takes the day of the other files of the capture.
               -r    the parser's running sum of the deltas, shifted onto
                     librdkafka's clock by the median of log_ts_us - ts_us:
                     right to about a millisecond (librdkafka prints
                     milliseconds). The median of the first chunk's lines
                     is used where the whole file's is within
                     RELATIVE_SLACK_US of it. Not with -ff: strace measures each delta
                     from the previous line of any thread, so one thread's
                     file cannot be summed alone; a note says so.
               -t    whole seconds, dated as -tt. A request takes well under
                     a second, so its syscalls cannot be placed within it:
                     log_writes.ts_us is then librdkafka's own millisecond
                     time (the request's total time stays right), and a note
                     says that the time cannot be split into socket and wait.
                     -T durations are kept as printed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kdiag.parsers.strace import log_writes
from kdiag.parsers.strace.log_writes import WRITE_COLUMNS

DAY_US = 86_400 * 1_000_000
# -r: how far the whole file's shift onto librdkafka's clock may be from
# the one its first lines gave (and its rows were written with) before the
# rows are shifted again: half of librdkafka's millisecond, finer than the
# shift is known.
RELATIVE_SLACK_US = 500


@dataclass
class StraceFile:
    """What parse_paths learns about one strace file on the way through."""
    shown: str
    offset: int                 # added to its line numbers
    name_pid: int | None        # the ".PID" of its name
    lines: int = 0
    clock: str | None = None
    pid_from_name: bool = False  # its rows took name_pid
    saw_pid: bool = False        # its lines carry pids
    fraction: bool = False       # some timestamp has a fraction of a second
    diffs: list = field(default_factory=list)  # log_ts_us - ts_us of its librdkafka lines
    rows: dict = field(default_factory=dict)   # table -> [first row, end row)
    # -t: the day, and the state of the estimate (see _estimate_seconds)
    day: int | None = None
    estimated: bool = False
    last_start: int = 0
    thread_ends: dict = field(default_factory=dict)
    # -tt, -r: what was already added to ts_us as the rows were written,
    # from its first chunk's librdkafka lines (see _shift_ahead); None until
    # that chunk.
    shift_ahead: int | None = None


# "strace.12345", "out.txt.12345": what -ff -o adds to the name it is given.
_PID_SUFFIX = re.compile(r"\.(\d{1,9})$")


def pid_of_name(name: str) -> int | None:
    m = _PID_SUFFIX.search(name)
    return int(m.group(1)) if m and int(m.group(1)) < 2**31 else None


def emit_strace(sink, table: pa.Table, sf: StraceFile, ahead: LogWritesAhead | None = None) -> None:
    """One chunk's syscalls rows, and the log_writes among them, to the
    sink, noting where they went and how librdkafka's clock compares.
    ``ahead``: the log_writes are made on its thread."""
    if len(table):
        table = _shift_ahead(_strace_rows(table, sf), sf)
    write_rows(sink, "syscalls", table, sf)
    if len(table):
        if ahead is None:
            _write_log_writes(sink, log_writes(table), sf)
        else:
            ahead.add(table)


def _write_log_writes(sink, lw: pa.Table, sf: StraceFile) -> None:
    write_rows(sink, "log_writes", lw, sf)
    if len(lw):
        ok = pc.and_(pc.is_valid(lw["log_ts_us"]), pc.is_valid(lw["ts_us"]))
        if pc.any(ok).as_py():
            sf.diffs.append(pc.subtract(lw["log_ts_us"], lw["ts_us"]).filter(ok).to_numpy())


class LogWritesAhead:
    """The log_writes of one strace file's chunks, made on a thread of their
    own and written in chunk order: reading the librdkafka lines a producer
    wrote to stderr was a third of the main thread's time in ``kdiag parse``
    of 2 M strace lines, while the strace parser's own state keeps it on
    that thread. The thread gathers the writes of several chunks before it
    reads them (BATCH_ROWS): each read has a cost of its own (the patterns
    compiled, the wrappers' formats tried on the few lines that are not
    librdkafka's), 4.9 ms for a chunk's 4,177 lines. At most ``depth``
    chunks wait (each one more is a chunk's tables held in memory); close()
    writes the rest."""

    BATCH_ROWS = 16384

    def __init__(self, sink, sf: StraceFile, depth: int = 1) -> None:
        from collections import deque
        from concurrent.futures import ThreadPoolExecutor

        self.sink, self.sf, self.depth = sink, sf, depth
        self.pending: deque = deque()
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="kdiag-log-writes")
        self._batch: list[pa.Table] = []   # the pool's own: its jobs run one at a time, in order
        self._batched = 0

    def add(self, table: pa.Table) -> None:
        self.pending.append(self.pool.submit(self._gather, table, False))
        self._write(self.depth)

    def close(self) -> None:
        """Writes what waits."""
        self.pending.append(self.pool.submit(self._gather, None, True))
        self._write(0)

    def _write(self, depth: int) -> None:
        while self.pending and (len(self.pending) > depth or self.pending[0].done()):
            lw = self.pending.popleft().result()
            if lw is not None:
                _write_log_writes(self.sink, lw, self.sf)

    def _gather(self, table: pa.Table | None, last: bool) -> pa.Table | None:
        """On the pool's thread: the chunk's writes kept, and read once
        enough wait (or at the last)."""
        if table is not None and len(table):
            rows = table.select(list(WRITE_COLUMNS))
            rows = rows.filter(pc.is_valid(rows["data"]))
            if len(rows):
                self._batch.append(rows)
                self._batched += len(rows)
        if not self._batch or (self._batched < self.BATCH_ROWS and not last):
            return None
        batch, self._batch, self._batched = self._batch, [], 0
        return log_writes(pa.concat_tables(batch) if len(batch) > 1 else batch[0])

    def abandon(self) -> None:
        """Drops what still waits (none after close(): the parse failed or
        was stopped) and ends the thread."""
        while self.pending:
            self.pending.popleft().cancel()
        self.pool.shutdown(wait=True)


def write_rows(sink, name: str, table: pa.Table, sf: StraceFile | None) -> None:
    start = sink.rows.get(name, 0)
    sink.write(name, table)
    if sf is not None and len(table):
        first, _ = sf.rows.get(name, (start, start))
        sf.rows[name] = (first, sink.rows[name])


def _strace_rows(table: pa.Table, sf: StraceFile) -> pa.Table:
    if sf.offset:
        i = table.schema.get_field_index("line_no")
        table = table.set_column(i, "line_no", pc.add(table["line_no"], sf.offset))
    if sf.name_pid is not None and not sf.saw_pid:
        if table["pid"].null_count < len(table):
            sf.saw_pid = True
        else:
            i = table.schema.get_field_index("pid")
            table = table.set_column(i, table.schema.field("pid"),
                                     pc.fill_null(table["pid"], pa.scalar(sf.name_pid, pa.int32())))
            sf.pid_from_name = True
    if not sf.fraction:
        ts = table["ts_us"].drop_null().to_numpy()
        sf.fraction = bool((ts % 1_000_000 != 0).any())
        if not sf.fraction and sf.clock == "time_of_day" and len(ts):
            table = _estimate_seconds(table, sf)
    return table


def _shift_ahead(table: pa.Table, sf: StraceFile) -> pa.Table:
    """-tt: the day, -r: the shift onto librdkafka's clock, that the file's
    first chunk's librdkafka lines give, added to ts_us as the rows are
    written, so that they need no second pass (reading both tables back
    and writing them again was a fifth of ``kdiag parse``'s time on -tt
    and -r files). put_on_epoch still dates the file by the median over
    all its lines: a day that differs from the guess, or a -r shift that
    differs from it by more than RELATIVE_SLACK_US, is added after. A first
    chunk without librdkafka lines adds nothing (all is done after)."""
    if sf.shift_ahead is None:
        # Only the first chunk decides: the file's rows all get one guess.
        if sf.clock == "time_of_day" and sf.fraction and not sf.estimated:
            sf.shift_ahead = first_day(table)
        elif sf.clock == "relative" and not sf.pid_from_name:
            sf.shift_ahead = first_shift(table)
        else:
            sf.shift_ahead = 0
    if not sf.shift_ahead:
        return table
    i = table.schema.get_field_index("ts_us")
    return table.set_column(i, table.schema.field("ts_us"),
                            pc.add(table["ts_us"], pa.scalar(sf.shift_ahead, pa.int64())))


def _diffs(table: pa.Table) -> np.ndarray:
    lw = log_writes(table)
    ok = pc.and_(pc.is_valid(lw["log_ts_us"]), pc.is_valid(lw["ts_us"]))
    return pc.subtract(lw["log_ts_us"], lw["ts_us"]).filter(ok).to_numpy()


def first_day(table: pa.Table) -> int:
    """The day (us) that the librdkafka lines among a chunk's rows put its
    time-of-day rows in; 0 without such lines."""
    diffs = _diffs(table)
    return round(float(np.median(diffs)) / DAY_US) * DAY_US if len(diffs) else 0


def first_shift(table: pa.Table) -> int:
    """-r: the shift onto librdkafka's clock (us) that the librdkafka lines
    among a chunk's rows give; 0 without such lines."""
    diffs = _diffs(table)
    return int(np.floor(np.median(diffs))) if len(diffs) else 0


def _estimate_seconds(table: pa.Table, sf: StraceFile) -> pa.Table:
    """strace -t prints whole seconds, far coarser than a request. Each
    call's start is estimated, in line order, as the latest of: its second;
    the previous line's start (lines are in the order calls began); the end
    of its thread's previous call (start + -T duration: a thread makes one
    call at a time); and, for a librdkafka line, librdkafka's own
    millisecond time (the line was formatted before it was written). All
    are lower bounds, so a wait that -T measured stays whole: a 43 ms poll()
    after a Sent line puts the read after it 43 ms later. Never past the
    line's second. A slow loop in Python, but only for -t files."""
    lw = log_writes(table)
    if sf.day is None:
        ok = pc.and_(pc.is_valid(lw["log_ts_us"]), pc.is_valid(lw["ts_us"]))
        if not pc.any(ok).as_py():
            return table
        sf.day = round(float(np.median(pc.subtract(lw["log_ts_us"], lw["ts_us"]).filter(ok).to_numpy())) / DAY_US)
    anchor = dict(zip(lw["line_no"].to_pylist(), lw["log_ts_us"].to_pylist()))
    base = sf.day * DAY_US
    ts = table["ts_us"].to_pylist()
    out = []
    ends = sf.thread_ends
    for line_no, pid, t, dur in zip(table["line_no"].to_pylist(), table["pid"].to_pylist(), ts,
                                    table["dur_us"].to_pylist()):
        if t is None:
            out.append(None)
            continue
        second = t + base
        est = max(second, sf.last_start, ends.get(pid, second), anchor.get(line_no) or second)
        est = min(est, second + 999_999)
        sf.last_start = est
        ends[pid] = est + (dur or 0)
        out.append(est)
    sf.estimated = True
    i = table.schema.get_field_index("ts_us")
    return table.set_column(i, table.schema.field("ts_us"), pa.array(out, pa.int64()))


def put_on_epoch(paths: dict[str, Path], files: list[StraceFile]) -> list[str]:
    """Shift each strace file's ts_us onto the epoch (see the module
    docstring), rewriting the two strace tables row group by row group.
    Returns the notes that say what was done or could not be."""
    notes: list[str] = []
    shifts: dict[int, int] = {}
    whole_seconds: list[StraceFile] = []
    days = {}
    for f in files:
        if f.clock == "time_of_day" and f.diffs:
            # (The diffs are from times that already hold shift_ahead.)
            days[id(f)] = round(float(np.median(np.concatenate(f.diffs))) / DAY_US) + (f.shift_ahead or 0) // DAY_US
    common_day = max(set(days.values()), key=list(days.values()).count) if days else None
    tod_dated = tod_undated = False
    for f in files:
        if f.estimated:
            whole_seconds.append(f)
        elif f.clock == "time_of_day":
            if not f.fraction:
                whole_seconds.append(f)
            day = days.get(id(f), common_day)
            if day is None:
                tod_undated = True
            else:
                shifts[id(f)] = day * DAY_US - (f.shift_ahead or 0)
                tod_dated = True
        elif f.clock == "relative":
            notes.append(_date_relative(f, shifts))
    if tod_dated:
        notes.append("strace timestamps were time of day only; dated from librdkafka's own timestamps")
    if tod_undated:
        notes.append("strace timestamps are time of day only and no librdkafka line dates them")
    notes += [_whole_seconds_note(f) for f in whole_seconds]
    plan = [(f.rows, shifts.get(id(f), 0), f in whole_seconds and not f.estimated) for f in files]
    if any(shift or logged for _, shift, logged in plan):
        for name in ("syscalls", "log_writes"):
            ranges = [(r[name][0], r[name][1], shift, logged and name == "log_writes")
                      for r, shift, logged in plan if name in r]
            if name in paths and any(sh or lg for _, _, sh, lg in ranges):
                _shift_rows(paths[name], ranges)
    return notes


def _date_relative(f: StraceFile, shifts: dict[int, int]) -> str:
    """Date an strace -r file by librdkafka's timestamps where it can (into
    ``shifts``); returns the note that says how."""
    if f.pid_from_name:
        return (f"{f.shown}: strace -r in per-thread files (-ff) cannot be put on one clock: strace "
                "measures each line's delta from the previous line of any thread; capture with -ttt")
    if f.diffs:
        # (The diffs are from times that already hold shift_ahead.)
        # (floor, not int(): the same whether or not shift_ahead was taken off.)
        more = int(np.floor(np.median(np.concatenate(f.diffs))))
        shifts[id(f)] = more if not f.shift_ahead or abs(more) > RELATIVE_SLACK_US else 0
        return (f"{f.shown}: strace -r times (each line's time since the previous one) were summed and "
                "dated from librdkafka's own timestamps, to about a millisecond")
    return (f"{f.shown}: strace -r times (each line's time since the previous one) were summed, but "
            "no librdkafka line dates them: they count from the file's first line")


def _whole_seconds_note(f: StraceFile) -> str:
    if f.estimated:
        return (f"{f.shown}: strace -t prints whole seconds: each call's time within its second was "
                "estimated from librdkafka's millisecond timestamps and the -T durations (a call starts no "
                "earlier than its thread's previous call ended), so a request's split is an estimate; "
                "capture with -tt or -ttt for measured times")
    return (f"{f.shown}: strace -t prints whole seconds and no librdkafka line times the calls within "
            "them: no request's time can be split into socket send and wait for the response "
            "(capture with -tt or -ttt)")


def _shift_rows(path: Path, ranges: list[tuple[int, int, int, bool]]) -> None:
    """Add each range's shift to ts_us ([first, end) rows); where the flag is
    set, take librdkafka's log_ts_us instead."""
    import pyarrow.parquet as pq

    from kdiag.ingest import table_facts

    starts = np.array([r[0] for r in ranges], dtype=np.int64)
    ends = np.array([r[1] for r in ranges], dtype=np.int64)
    shift = np.array([r[2] for r in ranges], dtype=np.int64)
    logged = np.array([r[3] for r in ranges], dtype=bool)
    tmp = path.with_suffix(".dated")
    src = pq.ParquetFile(path)
    row = 0
    watch = table_facts.Watch(path.stem)   # the times moved: what the footer tells is told again
    with pq.ParquetWriter(tmp, src.schema_arrow) as w:
        for i in range(src.num_row_groups):
            t = src.read_row_group(i).combine_chunks()
            idx = np.arange(row, row + len(t))
            row += len(t)
            f = np.searchsorted(starts, idx, side="right") - 1
            inside = (f >= 0) & (idx < ends[np.maximum(f, 0)])
            f = np.maximum(f, 0)
            ts = pc.add(t["ts_us"].chunk(0), pa.array(np.where(inside, shift[f], 0)))
            use_log = inside & logged[f]
            if use_log.any():
                ts = pc.if_else(pc.and_(pa.array(use_log), pc.is_valid(t["log_ts_us"].chunk(0))),
                                t["log_ts_us"].chunk(0), ts)
            t = t.set_column(t.schema.get_field_index("ts_us"), t.schema.field("ts_us"), ts)
            watch.feed(t)
            w.write_table(t)
        watch.stamp(w)
    tmp.replace(path)
