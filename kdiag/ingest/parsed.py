"""What a parse made: its tables' rows and files, and what each input was.
Apart from ``kdiag.ingest.tables`` because a warm replay's client receives
one from the server without parsing anything itself, and must not import
the parsers for it: with them come pyarrow, numpy and pandas (0.3 s of a
warm replay of a 20-line excerpt)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass
class Parsed:
    rows: dict[str, int] = field(default_factory=dict)     # table -> rows written
    paths: dict[str, Path] = field(default_factory=dict)   # table -> Parquet file
    files: list[dict] = field(default_factory=list)        # per input: path, kind, counts
    notes: list[str] = field(default_factory=list)         # what could not be read, in words

    def read(self, name: str) -> pa.Table | None:
        import pyarrow.parquet as pq

        return pq.read_table(self.paths[name]) if name in self.paths else None
