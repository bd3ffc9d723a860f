"""Tables -> one Parquet file each, written chunk by chunk.

The files are written in a private work directory inside the output one
and renamed into place only when every table is complete: a full disk, a
read-only directory or a signal leaves no truncated Parquet behind.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pyarrow as pa

from kdiag.ingest import feeding, table_facts


class TableSink:
    """One Parquet file per table, written chunk by chunk: memory holds a
    few chunks' rows, however long the capture. The writing (encoding and
    compression, a fifth of the work) runs in a thread of its own, a few
    tables behind the parsing; an error there is raised by the next write()
    or by close()."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        self.work_dir: Path | None = None   # 0700, in out_dir: the rename into place stays on one disk
        self.writers: dict = {}
        self.watches: dict[str, table_facts.Watch] = {}   # what each table's footer will tell of it
        self.rows: dict[str, int] = {}
        self._queue = None
        self._thread = None
        self._error: BaseException | None = None

    def write(self, name: str, table: pa.Table) -> None:
        import pyarrow.parquet as pq

        if self._error is not None:
            raise self._error
        if name not in self.writers:
            if self.work_dir is None:
                self.out_dir.mkdir(parents=True, exist_ok=True)
                self.work_dir = Path(tempfile.mkdtemp(prefix=".kdiag-parse-", dir=self.out_dir))
            self.writers[name] = pq.ParquetWriter(self.work_dir / f"{name}.parquet", table.schema,
                                                  **writer_options(table.schema))
            self.watches[name] = table_facts.Watch(name)
            self.rows[name] = 0
        if len(table):
            self.rows[name] += len(table)
            self._start().put((name, table))

    def _start(self):
        if self._thread is None:
            import queue
            import threading

            self._queue = queue.Queue(maxsize=feeding.WORKERS)
            self._thread = threading.Thread(target=self._run, name="kdiag-write", daemon=True)
            self._thread.start()
        return self._queue

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            if self._error is None:
                try:
                    self.watches[item[0]].feed(item[1])
                    self.writers[item[0]].write_table(item[1])
                except BaseException as e:  # noqa: BLE001 - handed to the parsing thread
                    self._error = e

    def close(self) -> dict[str, Path]:
        """Finishes every file; they are still in the work directory
        (``commit`` moves them into place, ``discard`` removes them)."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None
        writers, self.writers = self.writers, {}
        for name, w in writers.items():
            try:
                if self._error is None:
                    self.watches[name].stamp(w)
                w.close()
            except BaseException as e:  # noqa: BLE001 - the first error is the one to report
                self._error = self._error or e
        self.writers = dict.fromkeys(writers)
        if self._error is not None:
            raise self._error
        return {name: self.work_dir / f"{name}.parquet" for name in self.writers}

    def commit(self) -> dict[str, Path]:
        """The finished files, renamed into the output directory, private (0600)."""
        done = {}
        for name in self.writers:
            dest = self.out_dir / f"{name}.parquet"
            os.chmod(self.work_dir / dest.name, 0o600)
            os.replace(self.work_dir / dest.name, dest)
            done[name] = dest
        if self.work_dir is not None:
            shutil.rmtree(self.work_dir, ignore_errors=True)
            self.work_dir = None
        return done

    def discard(self) -> None:
        """After a failure: the writing thread stopped, nothing left behind."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=30)
            self._thread = None
        for w in self.writers.values():
            if w is not None:
                try:
                    w.close()
                except BaseException:  # noqa: BLE001,S110 - the file is removed next; the first error is raised
                    pass
        if self.work_dir is not None:
            shutil.rmtree(self.work_dir, ignore_errors=True)
            self.work_dir = None


def writer_options(schema: pa.Schema) -> dict:
    """How a parsed table is encoded. Measured on 1.4 M rows of
    ``rdkafka_events`` (2026-11-27): 218 ns a row with pyarrow's defaults,
    164 with these, and a file a tenth the size. ``line_no`` rises by one
    from row to row, which delta encoding stores in almost nothing, where
    a dictionary of every distinct value cost 24 ns a row (5 with delta).
    ``ts_us`` nearly rises with it, line after line: on 2 M rows of
    ``syscalls`` from strace -r (2026-11-30) its dictionary took 0.83 s of
    CPU to write and delta 0.69 s, in a file of 57 MiB against 68.
    Statistics are kept for the numbers (the analysis reads ``ts_us``'s
    and ``line_no``'s bounds from the footers) and dropped for the strings,
    which nothing reads and whose min and max cost 30 ns a row.

    The strings are compressed with zstd at its fastest level, the numbers
    with snappy. A string column whose values are mostly distinct (strace's
    arguments) outgrows its dictionary page and is written plain, where
    snappy finds little: on 1.4 M rows of ``syscalls`` (strace -r,
    2026-11-30) the writer took 0.48-0.50 s of CPU for 41 MiB with snappy
    throughout, 0.37-0.39 s for 7 MiB with this; on 1 M rows of
    ``rdkafka_events``, 0.26 against 0.27 s, both under 1 MiB."""
    numbers = [f.name for f in schema if not (pa.types.is_string(f.type) or pa.types.is_binary(f.type)
                                               or pa.types.is_large_string(f.type))]
    texts = [f.name for f in schema if f.name not in numbers]
    delta = [f.name for f in schema if f.name in ("line_no", "ts_us") and pa.types.is_integer(f.type)]
    return {"write_statistics": numbers,
            "use_dictionary": [f.name for f in schema if f.name not in delta],
            "column_encoding": dict.fromkeys(delta, "DELTA_BINARY_PACKED"),
            "compression": {f.name: "zstd" if f.name in texts else "snappy" for f in schema},
            "compression_level": dict.fromkeys(texts, 1)}


def reason(e: OSError) -> str:
    """The system's words for a failed write; Arrow's own wrap them in a paragraph."""
    return os.strerror(e.errno) if e.errno else (e.strerror or str(e)).splitlines()[0]
