"""Raw capture files -> the Arrow tables the analysis reads.

Tables (schemas in each parser's docstring):
  rdkafka_events  librdkafka log lines            (kdiag.parsers.rdkafka_log)
  syscalls        strace output                    (kdiag.parsers.strace)
  log_writes      librdkafka lines the producer wrote to stderr, as strace
                  saw them: rdkafka_events columns, plus ``pid`` and a
                  microsecond ``ts_us`` from strace, and ``line_no`` pointing
                  at the syscall row. This is what places a request's
                  Sent/Received lines among its broker thread's syscalls.
  stats           librdkafka statistics JSON      (kdiag.parsers.stats)
  probes          TCP path probes, per TTL and round (kdiag.parsers.tcp_probe)
  handshakes      timed TCP connect()s to the brokers (kdiag.parsers.tcp_probe)
  sockets,        live samples of the producer's sockets (TCP_NODELAY,
  threads, host   TCP_INFO), threads and host (kdiag.parsers.sockets)

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
                     milliseconds). Not with -ff: strace measures each delta
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

import os
import re
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kdiag.ingest.lines import CHUNK_BYTES, detect, iter_line_chunks

DAY_US = 86_400 * 1_000_000


def _parser(kind: str):
    if kind == "rdkafka_log":
        from kdiag.parsers.rdkafka_log import RdkafkaLogParser
        return RdkafkaLogParser()
    if kind == "strace":
        from kdiag.parsers.strace import StraceParser
        return StraceParser()
    if kind == "stats":
        from kdiag.parsers.stats import StatsParser
        return StatsParser()
    if kind == "sockets":
        from kdiag.parsers.sockets import SocketsParser
        return SocketsParser()
    raise ValueError(kind)


_TABLE_OF = {"rdkafka_log": "rdkafka_events", "strace": "syscalls", "stats": "stats", "sockets": "sockets",
             "pcap": "probes", "probes_jsonl": "probes", "handshakes_jsonl": "handshakes"}
# Whole-file formats: small by nature (probe packets), read at once.
_WHOLE = ("pcap", "probes_jsonl", "handshakes_jsonl")
MAX_WHOLE_BYTES = 256 << 20


def _parse_whole(kind: str, path: Path, brokers: dict):
    from kdiag.parsers import tcp_probe

    if kind == "pcap":
        return tcp_probe.parse_pcap(path.read_bytes(), brokers or None)
    lines = path.read_text(errors="replace").splitlines()
    if kind == "probes_jsonl":
        return tcp_probe.parse_probes_jsonl(lines)
    return tcp_probe.parse_handshakes(lines)


@dataclass
class Parsed:
    rows: dict[str, int] = field(default_factory=dict)     # table -> rows written
    paths: dict[str, Path] = field(default_factory=dict)   # table -> Parquet file
    files: list[dict] = field(default_factory=list)        # per input: path, kind, counts
    notes: list[str] = field(default_factory=list)         # what could not be read, in words

    def read(self, name: str) -> pa.Table | None:
        import pyarrow.parquet as pq

        return pq.read_table(self.paths[name]) if name in self.paths else None


class _Sink:
    """One Parquet file per table, written chunk by chunk: memory holds a
    few chunks' rows, however long the capture. The writing (encoding and
    compression, a fifth of the work) runs in a thread of its own, a few
    tables behind the parsing; an error there is raised by the next write()
    or by close()."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        self.writers: dict = {}
        self.rows: dict[str, int] = {}
        self._queue = None
        self._thread = None
        self._error: BaseException | None = None

    def write(self, name: str, table: pa.Table) -> None:
        import pyarrow.parquet as pq

        if self._error is not None:
            raise self._error
        if name not in self.writers:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            self.writers[name] = pq.ParquetWriter(self.out_dir / f"{name}.parquet", table.schema)
            self.rows[name] = 0
        if len(table):
            self.rows[name] += len(table)
            self._start().put((name, table))

    def _start(self):
        if self._thread is None:
            import queue
            import threading

            self._queue = queue.Queue(maxsize=WORKERS)
            self._thread = threading.Thread(target=self._run, name="kdiag-write", daemon=True)
            self._thread.start()
        return self._queue

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            if self._error is None:
                try:
                    self.writers[item[0]].write_table(item[1])
                except BaseException as e:  # noqa: BLE001 - handed to the parsing thread
                    self._error = e

    def close(self) -> dict[str, Path]:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None
        for w in self.writers.values():
            w.close()
        if self._error is not None:
            raise self._error
        return {name: self.out_dir / f"{name}.parquet" for name in self.writers}


def _shown(path: Path, base: Path | None) -> str:
    if base is not None:
        try:
            return str(path.resolve().relative_to(base.resolve()))
        except ValueError:
            pass
    return str(path)


def parse_paths(paths: list[Path], out_dir: Path, base: Path | None = None) -> Parsed:
    """Parse every file into ``out_dir/<table>.parquet``. ``base``: paths are
    reported relative to it (a bundle's root)."""
    out = Parsed()
    sink = _Sink(Path(out_dir))
    strace_files: list[_StraceFile] = []
    found = []
    for path in paths:
        path = Path(path)
        shown = _shown(path, base)
        entry = {"path": shown, "kind": None, "bytes": None}
        out.files.append(entry)
        try:
            entry["bytes"] = path.stat().st_size
            kind = detect(path)
        except OSError as e:
            entry["error"] = f"cannot read: {e.strerror or e}"
            out.notes.append(f"{shown}: cannot read ({e.strerror or e})")
            continue
        entry["kind"] = kind
        if kind is None:
            what = "empty" if entry["bytes"] == 0 else "not a format kdiag reads"
            entry["error"] = what
            out.notes.append(f"{shown}: {what}; skipped whole")
            continue
        if kind in _WHOLE and entry["bytes"] > MAX_WHOLE_BYTES:
            entry["error"] = f"larger than {MAX_WHOLE_BYTES >> 20} MiB"
            out.notes.append(f"{shown}: {kind} {entry['error']}; skipped whole")
            continue
        found.append((path, shown, kind, entry))
    # The packets are the record of SYN probes; the live results file then
    # adds only what has no packets (the connect() fallback). A pcap cannot
    # name brokers: the handshakes, read first, do.
    found.sort(key=lambda f: {"handshakes_jsonl": 0, "pcap": 1}.get(f[2], 2))
    have_packets = False
    brokers: dict[tuple[str, int], str] = {}
    for path, shown, kind, entry in found:
        if kind in _WHOLE:
            table, pcounts = _parse_whole(kind, path, brokers)
            if kind == "handshakes_jsonl":
                for r in table.select(["target_host", "target_port", "broker"]).to_pylist():
                    if r["broker"]:
                        brokers[(r["target_host"], r["target_port"])] = r["broker"]
            if kind == "pcap":
                have_packets |= len(table) > 0
            elif kind == "probes_jsonl" and have_packets:
                table = table.filter(pc.invert(pc.fill_null(pc.equal(table["method"], "syn"), False)))
            sink.write(_TABLE_OF[kind], table)
            counts = pcounts.to_dict()
        else:
            parser = _parser(kind)
            sf = None
            if kind == "strace":
                offset = sum(f.lines for f in strace_files)
                sf = _StraceFile(shown, offset, _pid_of_name(path.name))
                strace_files.append(sf)
            cut = 0
            for chunk, table in _feed_chunks(kind, parser, path):
                cut += chunk.cut_lines
                if sf is not None:
                    sf.clock = parser.clock
                _emit(sink, kind, table, sf)
            _emit(sink, kind, parser.finish(), sf)
            if sf is not None:
                sf.clock, sf.lines = parser.clock, parser.counts.lines
            counts = parser.counts.to_dict()
            counts["long_lines_cut"] = cut
        entry["counts"] = counts
        if counts["skipped_total"]:
            out.notes.append(
                f"{shown}: {counts['skipped_total']} of {counts['lines']} lines not parsed "
                f"({', '.join(f'{k} {v}' for k, v in sorted(counts['skipped'].items()))})")
    out.paths = sink.close()
    out.rows = sink.rows
    if strace_files:
        out.notes += _put_on_epoch(out, strace_files)
    if len(strace_files) > 1 and any(f.pid_from_name for f in strace_files):
        out.notes.append("strace line numbers run on from one file to the next: " + ", ".join(
            f"{f.shown} {f.offset + 1}-{f.offset + f.lines}" for f in strace_files))
    return out


# Chunks parsed at once: the parsers spend their time in Arrow and numpy,
# which let go of the GIL, so threads use every core. Memory holds about
# twice this many chunks.
WORKERS = max(1, min(4, os.cpu_count() or 1))
# Parsers that keep nothing from one chunk to the next but their counts:
# each chunk gets a parser of its own and the counts are added up in order.
_STATELESS = ("rdkafka_log",)


def _feed_chunks(kind: str, parser, path: Path):
    """(chunk, table) in file order. The file is read ahead in a thread of
    its own; a stateless parser's chunks are parsed WORKERS at a time."""
    from concurrent.futures import ThreadPoolExecutor

    chunks = _read_ahead(iter_line_chunks(path, CHUNK_BYTES), WORKERS)
    if WORKERS > 1 and hasattr(parser, "prepare"):
        # A parser with state across chunks (strace's unfinished calls)
        # feeds them in order, while the next chunk's lines are parsed
        # ahead in a second thread.
        with ThreadPoolExecutor(1, thread_name_prefix="kdiag-parse") as pool:
            prev = None
            for chunk in chunks:
                if prev is not None:
                    ahead = pool.submit(parser.prepare, chunk.lines, chunk.first_line_no)
                    yield prev, parser.feed(prev.lines, prev.first_line_no)
                    parser.use_prepared(ahead.result())
                prev = chunk
            if prev is not None:
                yield prev, parser.feed(prev.lines, prev.first_line_no)
        return
    if kind not in _STATELESS or WORKERS == 1:
        for chunk in chunks:
            yield chunk, parser.feed(chunk.lines, chunk.first_line_no)
        return

    def feed(chunk):
        own = _parser(kind)
        return own, own.feed(chunk.lines, chunk.first_line_no)

    with ThreadPoolExecutor(WORKERS, thread_name_prefix="kdiag-parse") as pool:
        pending: deque = deque()
        for chunk in chunks:
            pending.append((chunk, pool.submit(feed, chunk)))
            while len(pending) > WORKERS:
                yield _merged(parser, *pending.popleft())
        while pending:
            yield _merged(parser, *pending.popleft())


def _merged(parser, chunk, future):
    own, table = future.result()
    parser.counts.merge(own.counts)
    return chunk, table


def _read_ahead(it, depth: int):
    """The items of ``it``, produced by a thread up to ``depth`` ahead."""
    import queue
    import threading

    q: queue.Queue = queue.Queue(maxsize=depth)
    done = object()
    stop = threading.Event()

    def run():
        try:
            for item in it:
                while not stop.is_set():
                    try:
                        q.put(("item", item), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
        except BaseException as e:  # re-raised in the reader's thread
            q.put(("error", e))
            return
        q.put(("done", done))

    t = threading.Thread(target=run, name="kdiag-read", daemon=True)
    t.start()
    try:
        while True:
            what, item = q.get()
            if what == "done":
                return
            if what == "error":
                raise item
            yield item
    finally:
        stop.set()


@dataclass
class _StraceFile:
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


# "strace.12345", "out.txt.12345": what -ff -o adds to the name it is given.
_PID_SUFFIX = re.compile(r"\.(\d{1,9})$")


def _pid_of_name(name: str) -> int | None:
    m = _PID_SUFFIX.search(name)
    return int(m.group(1)) if m and int(m.group(1)) < 2**31 else None


def _emit(sink: _Sink, kind: str, table, sf: _StraceFile | None) -> None:
    if isinstance(table, dict):   # one source, several tables (sockets, threads, host)
        for name, part in table.items():
            sink.write(name, part)
        return
    if sf is not None and len(table):
        table = _strace_rows(table, sf)
    _write(sink, _TABLE_OF[kind], table, sf)
    if kind == "strace" and len(table):
        lw = log_writes(table)
        _write(sink, "log_writes", lw, sf)
        if len(lw):
            ok = pc.and_(pc.is_valid(lw["log_ts_us"]), pc.is_valid(lw["ts_us"]))
            if pc.any(ok).as_py():
                sf.diffs.append(pc.subtract(lw["log_ts_us"], lw["ts_us"]).filter(ok).to_numpy())


def _write(sink: _Sink, name: str, table: pa.Table, sf: _StraceFile | None) -> None:
    start = sink.rows.get(name, 0)
    sink.write(name, table)
    if sf is not None and len(table):
        first, _ = sf.rows.get(name, (start, start))
        sf.rows[name] = (first, sink.rows[name])


def _strace_rows(table: pa.Table, sf: _StraceFile) -> pa.Table:
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


def _estimate_seconds(table: pa.Table, sf: _StraceFile) -> pa.Table:
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


def log_writes(syscalls: pa.Table) -> pa.Table:
    from kdiag.parsers.rdkafka_log import parse_lines

    rows = syscalls.filter(pc.is_valid(syscalls["data"]))
    text = pc.utf8_rtrim(rows["data"], characters="\n")
    text = text.combine_chunks() if isinstance(text, pa.ChunkedArray) else text
    events, _ = parse_lines(text, 0)
    # Lines that are not librdkafka's are other stderr output; not an error.
    src = rows.select(["line_no", "pid", "ts_us"]).take(events["line_no"])
    cols = {n: events[n] for n in events.column_names if n not in ("line_no", "ts_us")}
    return pa.table({"line_no": src["line_no"], "pid": src["pid"], "ts_us": src["ts_us"],
                     "log_ts_us": events["ts_us"], **cols})


def _put_on_epoch(parsed: Parsed, files: list[_StraceFile]) -> list[str]:
    """Shift each strace file's ts_us onto the epoch (see the module
    docstring), rewriting the two strace tables row group by row group.
    Returns the notes that say what was done or could not be."""
    notes: list[str] = []
    shifts: dict[int, int] = {}
    whole_seconds: list[_StraceFile] = []
    days = {}
    for f in files:
        if f.clock == "time_of_day" and f.diffs:
            days[id(f)] = round(float(np.median(np.concatenate(f.diffs))) / DAY_US)
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
                shifts[id(f)] = day * DAY_US
                tod_dated = True
        elif f.clock == "relative":
            if f.pid_from_name:
                notes.append(f"{f.shown}: strace -r in per-thread files (-ff) cannot be put on one clock: strace "
                             "measures each line's delta from the previous line of any thread; capture with -ttt")
            elif f.diffs:
                shifts[id(f)] = int(np.median(np.concatenate(f.diffs)))
                notes.append(f"{f.shown}: strace -r times (each line's time since the previous one) were summed and "
                             "dated from librdkafka's own timestamps, to about a millisecond")
            else:
                notes.append(f"{f.shown}: strace -r times (each line's time since the previous one) were summed, but "
                             "no librdkafka line dates them: they count from the file's first line")
    if tod_dated:
        notes.append("strace timestamps were time of day only; dated from librdkafka's own timestamps")
    if tod_undated:
        notes.append("strace timestamps are time of day only and no librdkafka line dates them")
    for f in whole_seconds:
        if f.estimated:
            notes.append(f"{f.shown}: strace -t prints whole seconds: each call's time within its second was "
                         "estimated from librdkafka's millisecond timestamps and the -T durations (a call starts no "
                         "earlier than its thread's previous call ended), so a request's split is an estimate; "
                         "capture with -tt or -ttt for measured times")
        else:
            notes.append(f"{f.shown}: strace -t prints whole seconds and no librdkafka line times the calls within "
                         "them: no request's time can be split into socket send and wait for the response "
                         "(capture with -tt or -ttt)")
    plan = [(f.rows, shifts.get(id(f), 0), f in whole_seconds and not f.estimated) for f in files]
    if any(shift or logged for _, shift, logged in plan):
        for name in ("syscalls", "log_writes"):
            ranges = [(r[name][0], r[name][1], shift, logged and name == "log_writes")
                      for r, shift, logged in plan if name in r]
            if name in parsed.paths and any(sh or lg for _, _, sh, lg in ranges):
                _shift_rows(parsed.paths[name], ranges)
    return notes


def _shift_rows(path: Path, ranges: list[tuple[int, int, int, bool]]) -> None:
    """Add each range's shift to ts_us ([first, end) rows); where the flag is
    set, take librdkafka's log_ts_us instead."""
    import pyarrow.parquet as pq

    starts = np.array([r[0] for r in ranges], dtype=np.int64)
    ends = np.array([r[1] for r in ranges], dtype=np.int64)
    shift = np.array([r[2] for r in ranges], dtype=np.int64)
    logged = np.array([r[3] for r in ranges], dtype=bool)
    tmp = path.with_suffix(".dated")
    src = pq.ParquetFile(path)
    row = 0
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
            w.write_table(t.set_column(t.schema.get_field_index("ts_us"), t.schema.field("ts_us"), ts))
    tmp.replace(path)
