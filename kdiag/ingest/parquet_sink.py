"""Tables -> one Parquet file each, written chunk by chunk."""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from kdiag.ingest import feeding


class TableSink:
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

            self._queue = queue.Queue(maxsize=feeding.WORKERS)
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
