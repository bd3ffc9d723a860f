"""Raw capture files -> the Arrow tables the analysis reads.

Tables (schemas in each parser's docstring):
  rdkafka_events  librdkafka log lines            (parsers.rdkafka_log)
  syscalls        strace output                    (parsers.strace)
  log_writes      librdkafka lines the producer wrote to stderr, as strace
                  saw them: rdkafka_events columns, plus ``pid`` and a
                  microsecond ``ts_us`` from strace, and ``line_no`` pointing
                  at the syscall row. This is what places a request's
                  Sent/Received lines among its broker thread's syscalls.
  stats           librdkafka statistics JSON      (parsers.stats)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from kdiag.reading import detect, iter_line_chunks

TABLE_NAMES = ("rdkafka_events", "syscalls", "log_writes", "stats")
DAY_US = 86_400 * 1_000_000


def _parser(kind: str):
    if kind == "rdkafka_log":
        from parsers.rdkafka_log import RdkafkaLogParser
        return RdkafkaLogParser()
    if kind == "strace":
        from parsers.strace import StraceParser
        return StraceParser()
    if kind == "stats":
        from parsers.stats import StatsParser
        return StatsParser()
    raise ValueError(kind)


_TABLE_OF = {"rdkafka_log": "rdkafka_events", "strace": "syscalls", "stats": "stats"}


@dataclass
class Parsed:
    tables: dict[str, pa.Table] = field(default_factory=dict)
    files: list[dict] = field(default_factory=list)     # per input: path, kind, counts
    notes: list[str] = field(default_factory=list)      # what could not be read, in words

    def table(self, name: str) -> pa.Table | None:
        return self.tables.get(name)


def parse_file(path: Path, kind: str) -> tuple[pa.Table, dict, str | None]:
    parser = _parser(kind)
    parts = []
    cut = 0
    for chunk in iter_line_chunks(path):
        cut += chunk.cut_lines
        parts.append(parser.feed(chunk.lines, chunk.first_line_no))
    parts.append(parser.finish())
    counts = parser.counts.to_dict()
    counts["long_lines_cut"] = cut
    return pa.concat_tables(parts), counts, getattr(parser, "clock", None)


def _shown(path: Path, base: Path | None) -> str:
    if base is not None:
        try:
            return str(path.resolve().relative_to(base.resolve()))
        except ValueError:
            pass
    return str(path)


def parse_paths(paths: list[Path], base: Path | None = None) -> Parsed:
    """``base``: paths are reported relative to it (a bundle's root)."""
    out = Parsed()
    by_table: dict[str, list[pa.Table]] = {}
    clocks: set[str] = set()
    for path in paths:
        path = Path(path)
        shown = _shown(path, base)
        entry = {"path": shown, "kind": None, "bytes": None}
        try:
            entry["bytes"] = path.stat().st_size
            kind = detect(path)
        except OSError as e:
            entry["error"] = f"cannot read: {e.strerror or e}"
            out.notes.append(f"{shown}: cannot read ({e.strerror or e})")
            out.files.append(entry)
            continue
        entry["kind"] = kind
        if kind is None:
            what = "empty" if entry["bytes"] == 0 else "not a format kdiag reads"
            entry["error"] = what
            out.notes.append(f"{shown}: {what}; skipped whole")
            out.files.append(entry)
            continue
        table, counts, clock = parse_file(path, kind)
        if clock:
            clocks.add(clock)
        entry["counts"] = counts
        if counts["skipped_total"]:
            out.notes.append(
                f"{shown}: {counts['skipped_total']} of {counts['lines']} lines not parsed "
                f"({', '.join(f'{k} {v}' for k, v in sorted(counts['skipped'].items()))})")
        out.files.append(entry)
        by_table.setdefault(_TABLE_OF[kind], []).append(table)
    for name, parts in by_table.items():
        out.tables[name] = pa.concat_tables(parts)
    sc = out.tables.get("syscalls")
    if sc is not None and len(sc):
        lw = log_writes(sc)
        if "time_of_day" in clocks:
            sc, lw, note = _align_time_of_day(sc, lw)
            out.tables["syscalls"] = sc
            out.notes.append(note)
        out.tables["log_writes"] = lw
    return out


def log_writes(syscalls: pa.Table) -> pa.Table:
    from parsers.rdkafka_log import parse_lines

    has = pc.is_valid(syscalls["data"])
    rows = syscalls.filter(has)
    text = pc.utf8_rtrim(rows["data"], characters="\n")
    events, _ = parse_lines(text.combine_chunks() if isinstance(text, pa.ChunkedArray) else text, 0)
    # Lines that are not librdkafka's are other stderr output; not an error.
    idx = events["line_no"]
    src = rows.select(["line_no", "pid", "ts_us"]).take(idx)
    cols = {n: events[n] for n in events.column_names if n not in ("line_no", "ts_us")}
    return pa.table({"line_no": src["line_no"], "pid": src["pid"], "ts_us": src["ts_us"],
                     "log_ts_us": events["ts_us"], **cols})


def _align_time_of_day(sc: pa.Table, lw: pa.Table) -> tuple[pa.Table, pa.Table, str]:
    """strace -tt prints the time of day only; librdkafka's own timestamp in
    the lines the producer wrote gives the date."""
    if len(lw) == 0:
        return sc, lw, "strace timestamps are time of day only and no librdkafka line dates them"
    diff = pc.subtract(lw["log_ts_us"], lw["ts_us"])
    days = round(pc.approximate_median(diff).as_py() / DAY_US)
    shift = days * DAY_US
    sc = sc.set_column(sc.schema.get_field_index("ts_us"), "ts_us", pc.add(sc["ts_us"], shift))
    lw = lw.set_column(lw.schema.get_field_index("ts_us"), "ts_us", pc.add(lw["ts_us"], shift))
    return sc, lw, "strace timestamps were time of day only; dated from librdkafka's own timestamps"


def write_tables(tables: dict[str, pa.Table], out_dir: Path) -> list[Path]:
    """One Parquet file per table: Spark reads Parquet natively (it has no
    Arrow IPC reader), and so do pandas, DuckDB and pyarrow."""
    import pyarrow.parquet as pq

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, table in tables.items():
        path = out_dir / f"{name}.parquet"
        pq.write_table(table, path)
        written.append(path)
    return written
