"""Raw capture files -> the Arrow tables the analysis reads.

Which format a file holds, which tables it fills and with what schema, and
in which order its files are parsed, is what the parser modules declare
(kdiag.parsers.registry; docs/formats.md lists them).

What strace files get beyond what the parser gives (pids from file names,
line numbers run on, times on the epoch clock): kdiag.ingest.strace_clock.
"""
from __future__ import annotations

import stat
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from kdiag import progress
from kdiag.ingest.detect import detect, kafka_words
from kdiag.ingest.feeding import feed_chunks
from kdiag.ingest.parquet_sink import TableSink
from kdiag.ingest.parsed import Parsed
from kdiag.ingest.strace_clock import LogWritesAhead, StraceFile, emit_strace, pid_of_name, put_on_epoch, write_rows
from kdiag.parsers.format import BYTES, CHUNKS, Told
from kdiag.parsers.strace import log_writes

__all__ = ["MAX_WHOLE_BYTES", "log_writes", "parse_paths"]

# Whole-file formats are small by nature (probe packets) and read at once.
MAX_WHOLE_BYTES = 256 << 20


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
    sink = TableSink(Path(out_dir))
    try:
        with _rare_collections():
            strace_files = _parse_all(paths, base, out, sink)
        out.paths = sink.close()
        out.rows = sink.rows
        if strace_files:
            out.notes += put_on_epoch(out.paths, strace_files)
        out.paths = sink.commit()
    except BaseException:
        sink.discard()
        raise
    if len(strace_files) > 1 and any(f.pid_from_name for f in strace_files):
        out.notes.append("strace line numbers run on from one file to the next: " + ", ".join(
            f"{f.shown} {f.offset + 1}-{f.offset + f.lines}" for f in strace_files))
    return out


@contextmanager
def _rare_collections():
    """Python's cycle collector run a hundred times less often while files
    are parsed: each chunk makes a few thousand short-lived wrappers of Arrow
    and numpy arrays, and the collections they set off walked every object
    the process holds, 3 % of a parse's CPU (a strace file of 2 M lines)."""
    import gc

    before = gc.get_threshold()
    gc.set_threshold(before[0] * 100, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


def _parse_all(paths: list[Path], base: Path | None, out: Parsed, sink: TableSink) -> list[StraceFile]:
    """Every recognised file into ``sink``; returns the strace files read."""
    from kdiag.parsers.registry import format_named

    strace_files: list[StraceFile] = []
    found = _recognised(paths, base, out)
    found.sort(key=lambda f: format_named(f[2]).parse_order)
    told = Told()
    snapshots = _Snapshots()
    for path, shown, kind, entry in found:
        fmt = format_named(kind)
        with progress.current().stage(f"reading {Path(shown).name}", total=entry["bytes"] or None) as stage:
            if fmt.reads == CHUNKS:
                counts = _parse_chunked(fmt, path, shown, sink, strace_files, stage, snapshots)
            else:
                counts = _parse_whole(fmt, path, sink, told, snapshots)
        entry["counts"] = counts
        out.notes.extend(_count_notes(shown, counts))
    return strace_files


def _count_notes(shown: str, counts: dict) -> list[str]:
    """What the input note says of a file's counts: the lines not read,
    apart from those read as parts of a record, and records a paste joined
    onto one line."""
    from kdiag.parsers.base import READ_AS_PART

    def listed(items) -> str:
        return ", ".join(f"{k} {v}" for k, v in sorted(items))

    skipped = counts["skipped"]
    unread = [(k, v) for k, v in skipped.items() if k not in READ_AS_PART]
    part = [(k, v) for k, v in skipped.items() if k in READ_AS_PART]
    notes = []
    if unread:
        notes.append(f"{shown}: {sum(v for _, v in unread)} of {counts['lines']} lines not parsed ({listed(unread)})")
    if part:
        notes.append(f"{shown}: {sum(v for _, v in part)} of {counts['lines']} lines read as parts of records "
                     f"({listed(part)})")
    if counts.get("records_after_first"):
        notes.append(f"{shown}: {counts['records_after_first']} records joined onto lines after another, read apart")
    return notes


def _recognised(paths: list[Path], base: Path | None, out: Parsed) -> list[tuple]:
    """(path, shown, kind, files entry) of each file in a format kdiag
    reads; the others are noted in ``out`` and left out."""
    from kdiag.parsers.registry import format_named

    found = []
    for path in paths:
        path = Path(path)
        shown = _shown(path, base)
        entry = {"path": shown, "kind": None, "bytes": None}
        out.files.append(entry)
        try:
            st = path.stat()
            entry["bytes"] = st.st_size
            if stat.S_ISFIFO(st.st_mode) or stat.S_ISSOCK(st.st_mode):
                # Its first read would block; stat() does not.
                entry["error"] = "a FIFO or socket, not a file"
                out.notes.append(f"{shown}: {entry['error']}; skipped whole")
                continue
            kind = detect(path)
        except OSError as e:
            entry["error"] = f"cannot read: {e.strerror or e}"
            out.notes.append(f"{shown}: cannot read ({e.strerror or e})")
            continue
        entry["kind"] = kind
        if kind is None:
            what = "empty" if entry["bytes"] == 0 else "not a format kdiag reads"
            entry["error"] = what
            words = kafka_words(path) if entry["bytes"] else []
            if words:
                entry["about_kafka"] = words
                what += f", though it is about a Kafka client ({', '.join(words)})"
            out.notes.append(f"{shown}: {what}; skipped whole")
            continue
        if format_named(kind).reads != CHUNKS and entry["bytes"] > MAX_WHOLE_BYTES:
            entry["error"] = f"larger than {MAX_WHOLE_BYTES >> 20} MiB"
            out.notes.append(f"{shown}: {kind} {entry['error']}; skipped whole")
            continue
        found.append((path, shown, kind, entry))
    return found


class _Snapshots:
    """Each file numbers its statistics snapshots from 1: a second file's
    come after the first's, or two files' first snapshots would be judged
    as one."""

    def __init__(self) -> None:
        self.offset = 0
        self.last = 0

    def renumbered(self, table):
        if isinstance(table, dict):
            return {name: self.renumbered(part) for name, part in table.items()}
        if not isinstance(table, pa.Table) or "snapshot" not in table.column_names or not len(table):
            return table
        col = table["snapshot"]
        top = pc.max(col).as_py()
        if top is None:
            return table
        self.last = max(self.last, self.offset + top)
        if not self.offset:
            return table
        i = table.schema.get_field_index("snapshot")
        return table.set_column(i, table.schema.field(i), pc.add(col, pa.scalar(self.offset, col.type)))

    def file_done(self) -> None:
        self.offset = self.last


def _parse_chunked(fmt, path: Path, shown: str, sink: TableSink, strace_files: list[StraceFile],
                   stage=progress.Stage(), snapshots: _Snapshots | None = None) -> dict:
    snapshots = snapshots or _Snapshots()
    parser = fmt.parser()
    sf = None
    if fmt.dated_after_parse:
        offset = sum(f.lines for f in strace_files)
        sf = StraceFile(shown, offset, pid_of_name(path.name))
        strace_files.append(sf)
    cut = 0
    done = 0
    ahead = LogWritesAhead(sink, sf) if sf is not None else None
    try:
        for chunk, table in feed_chunks(fmt, parser, path):
            cut += chunk.cut_lines
            done += chunk.lines.nbytes - 4 * (len(chunk.lines) + 1)   # less the offsets: about the text read
            stage.update(done, lines=chunk.first_line_no + len(chunk.lines) - 1)
            if sf is not None:
                sf.clock = parser.clock
            _emit(sink, fmt, snapshots.renumbered(table), sf, ahead)
        _emit(sink, fmt, snapshots.renumbered(parser.finish()), sf, ahead)
        snapshots.file_done()
        if ahead is not None:
            ahead.close()
    finally:
        if ahead is not None:
            ahead.abandon()
    if sf is not None:
        sf.clock, sf.lines = parser.clock, parser.counts.lines
    counts = parser.counts.to_dict()
    counts["long_lines_cut"] = cut
    return counts


def _emit(sink: TableSink, fmt, table, sf: StraceFile | None, ahead: LogWritesAhead | None = None) -> None:
    if isinstance(table, dict):   # one source, several tables (sockets, threads, host)
        for name, part in table.items():
            sink.write(name, part)
    elif sf is not None:
        emit_strace(sink, table, sf, ahead)
    else:
        write_rows(sink, fmt.table, table, None)


def _parse_whole(fmt, path: Path, sink: TableSink, told: Told, snapshots: _Snapshots) -> dict:
    data = path.read_bytes() if fmt.reads == BYTES else path.read_text(errors="replace").splitlines()
    table, pcounts = fmt.parser(data, told)
    if isinstance(table, dict):   # one capture, several tables (a pcap's probes and connections)
        for name, part in table.items():
            # The format's own table is written as one table always was; the
            # others only with rows (a probe capture has no requests).
            if name == fmt.table or part.num_rows:
                sink.write(name, part)
    else:
        sink.write(fmt.table, snapshots.renumbered(table))
    snapshots.file_done()
    return pcounts.to_dict()
