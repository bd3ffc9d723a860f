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
  probes          TCP path probes, per TTL and round (parsers.tcp_probe)
  handshakes      timed TCP connect()s to the brokers (parsers.tcp_probe)
  sockets,        live samples of the producer's sockets (TCP_NODELAY,
  threads, host   TCP_INFO), threads and host (parsers.sockets)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from kdiag.reading import detect, iter_line_chunks

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
    if kind == "sockets":
        from parsers.sockets import SocketsParser
        return SocketsParser()
    raise ValueError(kind)


_TABLE_OF = {"rdkafka_log": "rdkafka_events", "strace": "syscalls", "stats": "stats", "sockets": "sockets",
             "pcap": "probes", "probes_jsonl": "probes", "handshakes_jsonl": "handshakes"}
# Whole-file formats: small by nature (probe packets), read at once.
_WHOLE = ("pcap", "probes_jsonl", "handshakes_jsonl")
MAX_WHOLE_BYTES = 256 << 20


def _parse_whole(kind: str, path: Path, brokers: dict):
    from parsers import tcp_probe

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
    """One Parquet file per table, written chunk by chunk: memory holds one
    chunk's rows, however long the capture."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        self.writers: dict = {}
        self.rows: dict[str, int] = {}

    def write(self, name: str, table: pa.Table) -> None:
        import pyarrow.parquet as pq

        if name not in self.writers:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            self.writers[name] = pq.ParquetWriter(self.out_dir / f"{name}.parquet", table.schema)
            self.rows[name] = 0
        if len(table):
            self.writers[name].write_table(table)
            self.rows[name] += len(table)

    def close(self) -> dict[str, Path]:
        for w in self.writers.values():
            w.close()
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
    day_offsets: list[int] = []
    tod = False
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
            cut = 0
            for chunk in iter_line_chunks(path):
                cut += chunk.cut_lines
                _emit(sink, kind, parser.feed(chunk.lines, chunk.first_line_no), day_offsets)
            _emit(sink, kind, parser.finish(), day_offsets)
            tod |= getattr(parser, "clock", None) == "time_of_day"
            counts = parser.counts.to_dict()
            counts["long_lines_cut"] = cut
        entry["counts"] = counts
        if counts["skipped_total"]:
            out.notes.append(
                f"{shown}: {counts['skipped_total']} of {counts['lines']} lines not parsed "
                f"({', '.join(f'{k} {v}' for k, v in sorted(counts['skipped'].items()))})")
    out.paths = sink.close()
    out.rows = sink.rows
    if tod:
        out.notes.append(_date_time_of_day(out, day_offsets))
    return out


def _emit(sink: _Sink, kind: str, table, day_offsets: list[int]) -> None:
    if isinstance(table, dict):   # one source, several tables (sockets, threads, host)
        for name, part in table.items():
            sink.write(name, part)
        return
    sink.write(_TABLE_OF[kind], table)
    if kind == "strace" and len(table):
        lw = log_writes(table)
        sink.write("log_writes", lw)
        if len(lw):
            diff = pc.subtract(lw["log_ts_us"], lw["ts_us"])
            day_offsets.append(round(pc.approximate_median(diff).as_py() / DAY_US))


def log_writes(syscalls: pa.Table) -> pa.Table:
    from parsers.rdkafka_log import parse_lines

    rows = syscalls.filter(pc.is_valid(syscalls["data"]))
    text = pc.utf8_rtrim(rows["data"], characters="\n")
    text = text.combine_chunks() if isinstance(text, pa.ChunkedArray) else text
    events, _ = parse_lines(text, 0)
    # Lines that are not librdkafka's are other stderr output; not an error.
    src = rows.select(["line_no", "pid", "ts_us"]).take(events["line_no"])
    cols = {n: events[n] for n in events.column_names if n not in ("line_no", "ts_us")}
    return pa.table({"line_no": src["line_no"], "pid": src["pid"], "ts_us": src["ts_us"],
                     "log_ts_us": events["ts_us"], **cols})


def _date_time_of_day(parsed: Parsed, day_offsets: list[int]) -> str:
    """strace -tt prints the time of day only; librdkafka's own timestamps in
    the lines the producer wrote give the date. Rewrites the two strace
    tables' ts_us, row group by row group."""
    import pyarrow.parquet as pq

    if not day_offsets:
        return "strace timestamps are time of day only and no librdkafka line dates them"
    shift = max(set(day_offsets), key=day_offsets.count) * DAY_US
    for name in ("syscalls", "log_writes"):
        path = parsed.paths.get(name)
        if path is None:
            continue
        tmp = path.with_suffix(".dated")
        src = pq.ParquetFile(path)
        with pq.ParquetWriter(tmp, src.schema_arrow) as w:
            for i in range(src.num_row_groups):
                t = src.read_row_group(i)
                t = t.set_column(t.schema.get_field_index("ts_us"), "ts_us", pc.add(t["ts_us"], shift))
                w.write_table(t)
        tmp.replace(path)
    return "strace timestamps were time of day only; dated from librdkafka's own timestamps"
