"""Fuzz targets that parse lines: the text and JSON lines parsers, and
format detection over sample files."""
from __future__ import annotations


import importlib
import json
import math
import random
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa

from fuzz.common import Failure, _seed_lines, decode_block
from fuzz.mutations import _JSON_TOKENS, Mutator, mutated_block
from fuzz.pcap_target import _PCAP_MAGICS
from kdiag.parsers.pcap import PCAPNG_SHB

RDKAFKA_TOKENS = [
    b"%7|", b"%0|", b"%8|", b"|", b"| ", b"[thrd:", b"]: ", b"[thrd:main]: ", b"ssl://127.0.0.1:9093/1: ",
    b":0/internal: ", b"sasl_ssl://h:1/bootstrap: ", b"Sent ", b"Sent partial ", b"Received ", b"Retrying ",
    b"Response for unknown CorrId ", b"Broker changed state ", b"Connecting to ", b"Connected to ",
    b"librdkafka v", b"ProduceRequest (v", b"ProduceResponse (v", b" bytes @ ", b", CorrId ", b", rtt ",
    b"ms)", b" bytes, retry ", b"prev CorrId ", b"(0x20000ff) ", b" initialized", b"UP -> DOWN",
    b"1795314017.477", b"99999999999.999", b"2164+100/", b"-2147483649",
]
STRACE_TOKENS = [
    b"[pid 12345] ", b"[pid  1] ", b"12345  ", b"1795314016.121249 ", b"02:24:05.260276 ", b"02:24:05 ",
    b"(+     0.000318) ", b"     0.000288 ", b"9999999999.999999999 ", b"write(", b"read(", b"???(", b"(",
    b"<... read resumed>", b"<... resumed>", b"<... ??? resumed>", b" <unfinished ...>", b"<unfinished ...>",
    b" <detached ...>", b"--- ", b" ---", b"+++ ", b" +++", b"exited with 0", b"exited with 99999999999",
    b"killed by SIGKILL", b"killed by 9 (core dumped)", b"stopped by SIGSTOP", b"superseded by execve in pid 1",
    b"strace: Process 123 attached", b"strace: Process 123 detached", b"[ Process PID=123 runs in x32 mode. ]",
    b" > /lib/x86_64-linux-gnu/libc.so.6(write+0x14) [0x114a74]", b") = ", b") = ?", b")       = 0",
    b" = -1 EAGAIN (Resource temporarily unavailable)", b" = -1 512 (Unknown error 512)", b" <0.000011>",
    b" <99999999999.999999999>", b"<", b">", b"0x7fffffffffffffff", b"0xffffffffffffffffff", b"0x", b'"',
    b"\\", b"\\x", b"\\377", b"\\n", b'\\"', b"1<pipe:[4254]>, ", b"2</tmp/x.log>, ",
    b"7<TCP:[127.0.0.1:42018->127.0.0.1:19093]>", b"3</dev/null<char 1:3>>", b" ERESTARTSYS",
    b"1795314016.121249123 ", b"= 3</etc/ld.so.cache> <0.000027>",
]

def _check_counts(c, fed: int) -> None:
    if c.lines != fed:
        raise Failure(f"counts.lines {c.lines} != {fed} lines fed")
    if any(not isinstance(v, int) or v <= 0 for v in c.skipped.values()):
        raise Failure(f"bad skip counts {c.skipped}")
    if c.parsed < 0 or c.parsed + c.skipped_total != c.lines:
        raise Failure(f"parsed {c.parsed} + skipped {c.skipped_total} != lines {c.lines}")
    json.dumps(c.to_dict())


def _check_line_nos(line_no: list, first: int, n: int, ordered: bool, shared: int = 0) -> None:
    """``shared``: rows that may repeat a line's number (records joined on one line)."""
    if any(x is None or not first <= x < first + n for x in line_no):
        raise Failure(f"line_no outside [{first}, {first + n})")
    if len(line_no) - len(set(line_no)) > shared:
        raise Failure("a line_no appears twice")
    if ordered and line_no != sorted(line_no):
        raise Failure("rows not in line order")


def _feeds(parser_cls, lines: list[str], first: int, rng: random.Random):
    """The parser's own feed()/finish() over a few consecutive pieces."""
    p = parser_cls()
    cuts = sorted(rng.sample(range(len(lines) + 1), min(len(lines) + 1, rng.randint(1, 3))))
    out, prev = [], 0
    for c in cuts + [len(lines)]:
        out.append(p.feed(pa.array(lines[prev:c], pa.string()), first + prev))
        prev = c
    out.append(p.finish())
    return out, p.counts


class LineTarget:
    name = ""
    module = ""          # the parser's module: parse_lines, its parser class, its schema
    parser_class = ""
    seed_files: tuple[str, ...] = ()
    tokens: Sequence[bytes] = ()
    seps: Sequence[bytes] = (b" ",)
    is_json = False

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.mutator = Mutator(rng, _seed_lines(*self.seed_files), self.tokens, self.seps, self.is_json)

    def make_input(self, n: int) -> bytes:
        return mutated_block(self.mutator, n)

    def parser(self):
        # Imported when a target runs, so that the harness starts without them.
        return importlib.import_module(self.module)

    def parse_lines(self, lines, first):
        return self.parser().parse_lines(lines, first)

    def parser_cls(self):
        return getattr(self.parser(), self.parser_class)

    def variant(self, rng: random.Random) -> dict:
        """How an input is fed: first line number; parse_lines() on an Arrow
        array or a list, or the parser's own feed() over pieces."""
        return {"first": rng.choice((1, 1, 1000, 2**31)), "mode": rng.randrange(4), "cuts": rng.randrange(2**32)}

    def run(self, data: bytes, variant: dict | None = None):
        """Parse one input; raise on a crash or an inconsistency. Returns
        (lines fed, counts)."""
        v = variant or {}
        lines = decode_block(data)
        first, mode = v.get("first", 1), v.get("mode", 0)
        if mode == 3:
            tables, counts = _feeds(self.parser_cls(), lines, first, random.Random(v.get("cuts", 0)))
        else:
            arg = lines if mode == 2 else pa.array(lines, pa.string())
            t, counts = self.parse_lines(arg, first)
            tables = [t]
        _check_counts(counts, len(lines))
        self.check_tables(tables, counts, first, len(lines), ordered=mode != 3)
        return len(lines), counts


class RdkafkaTarget(LineTarget):
    name = "rdkafka_log"
    module, parser_class = "kdiag.parsers.rdkafka_log", "RdkafkaLogParser"
    seed_files = ("rdkafka.log", "rdkafka_clients.log")
    tokens = RDKAFKA_TOKENS
    seps = (b"|", b" ", b", ", b": ")

    def check_tables(self, tables, c, first, n, ordered):
        if any(not t.schema.equals(self.parser().SCHEMA) for t in tables):
            raise Failure("schema differs")
        rows = sum(t.num_rows for t in tables)
        # Records a paste joined onto one line are rows of that one line.
        if rows != c.parsed + c.records_after_first:
            raise Failure(f"{rows} rows for {c.parsed} parsed lines")
        _check_line_nos([x for t in tables for x in t["line_no"].to_pylist()], first, n, ordered,
                        c.records_after_first)


class StraceTarget(LineTarget):
    name = "strace"
    module, parser_class = "kdiag.parsers.strace", "StraceParser"
    seed_files = ("strace_o_ttt.txt", "strace_o_tt.txt", "strace_stderr_tt.txt", "strace_relative.txt",
                  "strace_seconds.txt", "strace_threads.txt", "strace_stderr_mixed.txt", "strace_r_threads.txt")
    tokens = STRACE_TOKENS
    seps = (b", ", b" ", b"(", b") = ", b"<", b">")

    def __init__(self, rng):
        super().__init__(rng)
        # One layout per batch mostly, as in a real file; the layout is learnt
        # from a feed's first lines.
        self.by_file = [_seed_lines(f) for f in self.seed_files]
        self.all_seeds = self.mutator.seeds

    def make_input(self, n):
        self.mutator.seeds = self.all_seeds if self.rng.random() < 0.2 else self.rng.choice(self.by_file)
        return mutated_block(self.mutator, n)

    def check_tables(self, tables, c, first, n, ordered):
        if any(not t.schema.equals(self.parser().SCHEMA) for t in tables):
            raise Failure("schema differs")
        rows = sum(t.num_rows for t in tables)
        # A resumed call joins its unfinished line: two parsed lines, one row.
        if rows > c.parsed + c.skipped.get("orphan_resumed", 0):
            raise Failure(f"{rows} rows for {c.parsed} parsed lines")
        _check_line_nos([x for t in tables for x in t["line_no"].to_pylist()], first, n, ordered)


class StatsTarget(LineTarget):
    name = "stats"
    module, parser_class = "kdiag.parsers.stats", "StatsParser"
    seed_files = ("stats.jsonl",)
    tokens = _JSON_TOKENS
    seps = (b",", b":", b", ")
    is_json = True

    def check_tables(self, tables, c, first, n, ordered):
        schemas = self.parser().SCHEMAS
        # parse_lines gives the stats table, feed() both.
        tables = [t if isinstance(t, dict) else {"stats": t} for t in tables]
        if any(not set(got) <= set(schemas) for got in tables):
            raise Failure("tables differ")
        if any(not t.schema.equals(schemas[name]) for got in tables for name, t in got.items()):
            raise Failure("schema differs")
        nos = [x for got in tables for t in got.values() for x in t["line_no"].to_pylist()]
        # A snapshot that was cut still gives rows; its lines count as cut.
        read = c.parsed + c.skipped.get("cut", 0)
        if len(set(nos)) > read:
            raise Failure(f"rows from {len(set(nos))} lines for {read} parsed or cut")
        _check_line_nos(sorted(set(nos)), first, n, False)


class SocketsTarget(LineTarget):
    name = "sockets"
    module, parser_class = "kdiag.parsers.sockets", "SocketsParser"
    seed_files = ("sockets.jsonl",)
    tokens = _JSON_TOKENS
    seps = (b",", b":", b", ")
    is_json = True

    def check_tables(self, tables, c, first, n, ordered):
        schemas = self.parser().SCHEMAS
        rows, nos = 0, []
        for got in tables:
            if set(got) != set(schemas):
                raise Failure(f"tables {sorted(got)}")
            for name, t in got.items():
                if not t.schema.equals(schemas[name]):
                    raise Failure(f"{name} schema differs")
                rows += t.num_rows
                nos += t["line_no"].to_pylist()
        if rows != c.parsed:
            raise Failure(f"{rows} rows for {c.parsed} parsed lines")
        _check_line_nos(sorted(nos), first, n, False)


class _ProbeJsonTarget(LineTarget):
    module = "kdiag.parsers.tcp_probe"
    parse_fn = schema_name = ""
    is_json = True
    seps = (b",", b":", b", ")
    tokens = _JSON_TOKENS

    def variant(self, rng):
        return {"list": rng.random() < 0.5}

    def run(self, data, variant=None):
        lines = decode_block(data)
        arg = lines if (variant or {}).get("list", True) else pa.array(lines, pa.string())
        t, c = getattr(self.parser(), self.parse_fn)(arg)
        _check_counts(c, len(lines))
        if not t.schema.equals(getattr(self.parser(), self.schema_name)):
            raise Failure("schema differs")
        if t.num_rows != c.parsed:
            raise Failure(f"{t.num_rows} rows for {c.parsed} parsed lines")
        return len(lines), c


class ProbesJsonTarget(_ProbeJsonTarget):
    name = "probes_jsonl"
    parse_fn, schema_name = "parse_probes_jsonl", "PROBES_SCHEMA"
    seed_files = ("probes.jsonl", "handshakes.jsonl")


class HandshakesJsonTarget(_ProbeJsonTarget):
    name = "handshakes_jsonl"
    parse_fn, schema_name = "parse_handshakes", "HANDSHAKES_SCHEMA"
    seed_files = ("handshakes.jsonl", "probes.jsonl")

class DetectTarget:
    """Sample files through format recognition and the line reader."""

    name = "detect"

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.targets = [cls(rng) for cls in (RdkafkaTarget, StraceTarget, StatsTarget, SocketsTarget,
                                              ProbesJsonTarget)]

    def make_input(self, n: int) -> bytes:
        r = self.rng
        n = min(n, r.choice((1, 5, 50, 200, 250)))
        t = r.choice(self.targets)
        data = t.make_input(n)
        if r.random() < 0.2:
            data += b"\n" + r.choice(self.targets).make_input(r.randint(1, 20))
        if r.random() < 0.03:
            data = r.choice((_PCAP_MAGICS[0], PCAPNG_SHB, b"\xd4\xc3", b"")) + data
        return data

    def variant(self, rng):
        return {"chunk_bytes": rng.choice((1 << 10, 1 << 16, 16 << 20))}

    def run(self, data: bytes, variant: dict | None = None):
        with tempfile.TemporaryDirectory(prefix="kdiag-fuzz-") as tmp:
            path = Path(tmp) / "sample"
            path.write_bytes(data)
            return self._run(path, data, variant)

    def _run(self, path: Path, data: bytes, variant: dict | None):
        from kdiag.ingest import lines as reading
        from kdiag.ingest.detect import detect
        from kdiag.parsers.format import BY_LINES
        from kdiag.parsers.registry import formats

        kind = detect(path)
        if kind is not None and kind not in {f.name for f in formats()}:
            raise Failure(f"detect gave {kind!r}")
        sample = reading.sniff(path)
        if len(sample) > reading.SNIFF_LINES:
            raise Failure(f"sniff gave {len(sample)} lines")
        for fmt in formats():
            if fmt.recognised_by != BY_LINES:
                continue
            score = fmt.recognise(sample)
            if not isinstance(score, (int, float)) or not 0 <= score <= 1 or math.isnan(score):
                raise Failure(f"{fmt.name}: looks_like gave {score!r}")
        chunk_bytes = (variant or {}).get("chunk_bytes", reading.CHUNK_BYTES)
        got = 0
        for ch in reading.iter_line_chunks(path, chunk_bytes):
            if ch.first_line_no != got + 1:
                raise Failure(f"chunk starts at line {ch.first_line_no}, expected {got + 1}")
            got += len(ch.lines)
        want = data.count(b"\n") + (0 if not data or data.endswith(b"\n") else 1)
        if got != want:
            raise Failure(f"iter_line_chunks gave {got} lines, the file has {want}")
        return len(decode_block(data)) if data else 1, None
