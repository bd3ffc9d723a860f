"""Mutation fuzzing of every parser, from the real inputs in fuzz/seeds/.

    python3 -m fuzz.mutate --lines 1000000 [--seed N] [--parser all|NAME]
    python3 -m fuzz.mutate --replay FILE --parser NAME

Each target takes lines of its seeds, mutates them (byte flips, cuts,
duplicated and removed spans, two lines spliced or interleaved, random bytes
with NUL and invalid UTF-8, lines of about 1 MB, numbers swapped for huge,
negative or float ones, fields swapped, JSON values of the wrong type) and
feeds them in batches, decoded the way kdiag.ingest.lines decodes a file. A
failure is any exception out of a parser, or counts that do not add up
(``lines == parsed + skipped``, one line counted per line fed, the table's
rows consistent with ``parsed``). The input of each distinct failure is
saved, with a minimised copy, for ``--replay``.

Targets: rdkafka_log, strace, stats, sockets; tcp_probe_pcap (mutated pcap
and pcapng files; "lines" are the records the parser counted),
probes_jsonl and handshakes_jsonl (``--parser tcp_probe`` runs the three);
detect (sample files through kdiag.ingest.lines.detect, sniff, iter_line_chunks
and every looks_like). Everything is derived from ``--seed``: the same
seed gives the same inputs.
"""
from __future__ import annotations

import argparse
import copy
import importlib
import json
import math
import random
import re
import struct
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

SEEDS = Path(__file__).resolve().parent / "seeds"
CRASH_DIR = Path(__file__).resolve().parent / "crashes"

LONG_LINE = 1 << 20


def _seed_lines(*names: str) -> list[bytes]:
    out: list[bytes] = []
    for name in names:
        out += [ln for ln in (SEEDS / name).read_bytes().split(b"\n") if ln.strip()]
    return out


def decode_block(block: bytes) -> list[str]:
    """Bytes -> lines as kdiag.ingest.lines hands them to parsers: invalid UTF-8
    replaced, split on \\n, \\r stripped when the input ends in \\r\\n."""
    lines = block.decode("utf-8", "replace").split("\n")
    if lines and lines[-1].endswith("\r"):
        lines = [ln.rstrip("\r") for ln in lines]
    return lines


# ---------------------------------------------------------------- mutations

_NUMBER = re.compile(rb"-?\d+(?:\.\d+)?")
_ODD_NUMBERS = [
    b"0", b"-0", b"-1", b"1", b"127", b"128", b"255", b"256", b"32767", b"32768", b"65535", b"65536",
    b"2147483647", b"2147483648", b"-2147483648", b"-2147483649", b"4294967295", b"4294967296",
    b"9223372036854775807", b"9223372036854775808", b"-9223372036854775808", b"-9223372036854775809",
    b"18446744073709551615", b"18446744073709551616", b"99999999999999999999999999999999999999",
    b"1e308", b"1e309", b"-1e309", b"1.5", b"-2.5", b"0.000000001", b"1.7976931348623157e308",
    b"NaN", b"Infinity", b"-Infinity", b"0x7fffffff", b"0xffffffffffffffff", b"00000000000000000001",
    b"1.", b".5", b"--1", b"+1", b"", b"\xd9\xa3", b"\xc2\xb2", b"\xef\xbc\x91",  # non-ASCII digits
]
_ODD_BYTES = [
    b"\x00", b"\xff", b"\xfe", b"\xc3", b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xef\xbb\xbf",
    b"\r", b"\t", b"\x1b[0m", b"\x7f", b"\x0b", b"\x0c", b"\xe2\x80\xa8", b"\xc2\x85", b" ", b"\\",
    b'"', b"'", b"(", b")", b"<", b">", b"[", b"]", b"{", b"}", b"|", b"%", b"=", b",", b":", b"\n",
]
_JSON_TOKENS = [
    b'"brokers":', b'{"kind":"socket",', b'{"kind":"thread",', b'{"kind":"host",', b'"ts_us":', b'"pid":',
    b"null", b"true", b"false", b"NaN", b"Infinity", b"-Infinity", b"1e999", b"{", b"}", b"[", b"]", b'"',
    b"\\u0000", b"\\ud800", b'\\udc00"', b":", b",", b'"tcp_info":{', b'"cpu_pct":[', b'"cgroup":{"quota_us":',
    b"[]", b"{}", b'""', b"\\", b'"target":"h:1",', b'"answer":"open",', b'"ttl":1,',
]
# Replacement JSON values of every type, some out of every column's range.
_ODD_VALUES: list = [
    None, True, False, 0, -1, 1, 2**31, -(2**31) - 1, 2**63, -(2**63) - 1, 2**64, 10**30, -(10**30),
    1.5, -0.0, 1e308, float("nan"), float("inf"), float("-inf"), "", "x", "123", "1e5", "\ud800", "\x00",
    "ESTABLISHED", "UP", [], [1, None, "a"], [float("nan")], {}, {"avg": "x"}, {"a": {"b": [1]}},
]


def _json_nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _odd_value(r: random.Random):
    return copy.deepcopy(r.choice(_ODD_VALUES))


@dataclass
class Mutator:
    """Per-line mutations of one target's seed lines."""

    rng: random.Random
    seeds: Sequence[bytes]
    tokens: Sequence[bytes]
    seps: Sequence[bytes]
    is_json: bool = False
    long_every: int = 5000
    pass_through: float = 0.2

    def seed(self) -> bytes:
        return self.rng.choice(self.seeds)

    def line(self) -> bytes:
        r = self.rng
        s = self.seed()
        if r.random() < self.pass_through:
            return s
        if r.randrange(self.long_every) == 0:
            return self.long(s)
        if self.is_json and r.random() < 0.6:
            s = self.json_mutate(s)
            if r.random() < 0.7:
                return s
        for _ in range(r.choice((1, 1, 1, 1, 2, 2, 3))):
            s = r.choice(OPS)(self, s)
        return s

    # byte-level operations, each bytes -> bytes
    def flip(self, s: bytes) -> bytes:
        if not s:
            return bytes([self.rng.randrange(256)])
        b = bytearray(s)
        for _ in range(self.rng.choice((1, 1, 1, 2, 3, 8))):
            i = self.rng.randrange(len(b))
            if self.rng.random() < 0.5:
                b[i] ^= 1 << self.rng.randrange(8)
            else:
                b[i] = self.rng.randrange(256)
        return bytes(b)

    def truncate(self, s: bytes) -> bytes:
        return s[: self.rng.randint(0, len(s))]

    def _span(self, s: bytes) -> tuple[int, int]:
        i = self.rng.randint(0, len(s))
        return i, self.rng.randint(i, min(len(s), i + self.rng.choice((1, 4, 16, 64, 512))))

    def dup_span(self, s: bytes) -> bytes:
        i, j = self._span(s)
        return s[:j] + s[i:j] * self.rng.choice((1, 1, 2, 10)) + s[j:]

    def del_span(self, s: bytes) -> bytes:
        i, j = self._span(s)
        return s[:i] + s[j:]

    def splice(self, s: bytes) -> bytes:
        o = self.seed()
        return s[: self.rng.randint(0, len(s))] + o[self.rng.randint(0, len(o)):]

    def interleave(self, s: bytes) -> bytes:
        i = self.rng.randint(0, len(s))
        return s[:i] + self.seed() + s[i:]

    def insert_bytes(self, s: bytes) -> bytes:
        r = self.rng
        ins = b"".join(r.choice(_ODD_BYTES) for _ in range(r.choice((1, 1, 2, 4))))
        if r.random() < 0.3:
            ins = r.randbytes(r.choice((1, 2, 8, 32)))
        i = r.randint(0, len(s))
        return s[:i] + ins + s[i:]

    def insert_token(self, s: bytes) -> bytes:
        i = self.rng.randint(0, len(s))
        return s[:i] + self.rng.choice(self.tokens) + s[i:]

    def replace_token(self, s: bytes) -> bytes:
        present = [t for t in self.rng.sample(self.tokens, min(8, len(self.tokens))) if t and t in s]
        if not present:
            return self.insert_token(s)
        return s.replace(self.rng.choice(present), self.rng.choice(self.tokens), self.rng.choice((1, -1)))

    def number(self, s: bytes) -> bytes:
        spans = [m.span() for m in _NUMBER.finditer(s)]
        if not spans:
            return self.insert_token(s)
        r = self.rng
        if r.random() < 0.2:
            new = str(r.choice((-1, 1)) * r.randrange(10 ** r.randint(1, 40))).encode()
        else:
            new = r.choice(_ODD_NUMBERS)
        every = r.random() < 0.1
        for a, b in reversed(spans if every else [r.choice(spans)]):
            s = s[:a] + new + s[b:]
        return s

    def swap_fields(self, s: bytes) -> bytes:
        sep = self.rng.choice(self.seps)
        parts = s.split(sep)
        if len(parts) < 2:
            return self.dup_span(s)
        i, j = self.rng.sample(range(len(parts)), 2)
        parts[i], parts[j] = parts[j], parts[i]
        return sep.join(parts)

    def blank(self, s: bytes) -> bytes:
        return self.rng.choice((b"", b" ", b"\t", b"\r", b"   \t ", b"\x00", b"\xef\xbb\xbf"))

    def long(self, s: bytes) -> bytes:
        r = self.rng
        size = r.choice((64 << 10, LONG_LINE - 1, LONG_LINE, LONG_LINE + 1, LONG_LINE + (LONG_LINE >> 3)))
        kind = r.randrange(6)
        if kind == 0 or not s:
            fill = r.choice((b"A", b"9", b"(", b"[", b"{", b"\\", b" ", b"\xff", b'"', b"\xc3\xa9"))
            i = r.randint(0, len(s))
            return s[:i] + fill * (size // len(fill)) + s[i:]
        if kind == 1:  # the line repeated
            return (s * (size // len(s) + 1))[:size]
        if kind == 2 and self.is_json:  # nesting deeper than any recursion limit
            depth = size // 2
            return _json_nested(depth).encode() if r.random() < 0.5 else s[:1] + b'"x":' + b"[" * depth + s[1:]
        if kind == 3:  # a long number
            return self.number(s).replace(b"0", b"0" * 8, 1) + b"7" * size
        if kind == 4:  # the line's last field grown (args, message, JSON string)
            i = max(s.rfind(b'"'), s.rfind(b","), s.rfind(b" "), 0)
            return s[:i] + b"x" * size + s[i:]
        return r.randbytes(size)

    def json_mutate(self, s: bytes) -> bytes:
        r = self.rng
        try:
            obj = json.loads(s)
        except ValueError:
            return s
        for _ in range(r.choice((1, 1, 2, 3))):
            try:
                obj = self._json_op(obj)
            except (ValueError, OverflowError):
                pass
        try:
            return json.dumps(obj, allow_nan=True, separators=r.choice(((",", ":"), (", ", ": ")))).encode(
                "utf-8", "surrogatepass")
        except (ValueError, RecursionError):
            return s

    def _json_op(self, obj):
        r = self.rng
        path = []
        node = obj
        while isinstance(node, (dict, list)) and node and r.random() < 0.7:
            k = r.choice(list(node)) if isinstance(node, dict) else r.randrange(len(node))
            path.append((node, k))
            node = node[k]
        if not path:
            return r.choice((obj, [obj], _odd_value(r), {"kind": obj}))
        parent, key = path[-1]
        op = r.randrange(6)
        if op == 0 and isinstance(parent, dict):
            del parent[key]
        elif op == 1 and isinstance(parent, dict):
            parent[r.choice(("kind", "ts_us", "pid", "brokers", "time", "name", "fd", "tid", key + "_", ""))] = \
                parent.pop(key)
        elif op == 2 and isinstance(parent, dict) and len(parent) > 1:
            k2 = r.choice(list(parent))
            parent[key], parent[k2] = parent[k2], parent[key]
        elif op == 3:
            parent[key] = _odd_value(r)
        elif op == 4 and isinstance(node, (int, float)) and not isinstance(node, bool):
            parent[key] = r.choice((node * 10**20, -node, node + 0.5, str(node), float(node), int(2**63 + node)))
        else:
            parent[key] = r.choice((obj if r.random() < 0.1 else None, [node], {"v": node}, str(node)))
        return obj


OPS = [
    Mutator.flip, Mutator.truncate, Mutator.dup_span, Mutator.del_span, Mutator.splice, Mutator.interleave,
    Mutator.insert_bytes, Mutator.insert_token, Mutator.insert_token, Mutator.replace_token,
    Mutator.replace_token, Mutator.number, Mutator.number, Mutator.swap_fields, Mutator.blank,
]


def mutated_block(m: Mutator, n: int) -> bytes:
    """n mutated lines, with batch-level changes (lines repeated, reordered
    or left out), joined as a file's bytes."""
    r = m.rng
    lines = [m.line() for _ in range(n)]
    for _ in range(r.choice((0, 0, 1, 3))):
        i = r.randrange(n)
        j = min(n, i + r.choice((2, 10, 100)))
        op = r.randrange(3)
        if op == 0:
            lines[i:j] = list(reversed(lines[i:j]))
        elif op == 1:
            lines[i:i] = lines[i:j]
        else:
            k = r.randrange(n)
            lines[i], lines[k] = lines[k], lines[i]
    end = r.choice((b"", b"\n", b"\r\n"))
    sep = b"\r\n" if end == b"\r\n" else b"\n"
    return sep.join(lines) + end


# ---------------------------------------------------------------- targets

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


@dataclass
class Result:
    target: str
    lines: int = 0
    inputs: int = 0
    parsed: int = 0
    skipped: Counter = field(default_factory=Counter)
    crashes: int = 0
    failures: dict = field(default_factory=dict)   # signature -> saved file
    elapsed: float = 0.0


class Failure(Exception):
    """Counts or tables that do not add up."""


def _check_counts(c, fed: int) -> None:
    if c.lines != fed:
        raise Failure(f"counts.lines {c.lines} != {fed} lines fed")
    if any(not isinstance(v, int) or v <= 0 for v in c.skipped.values()):
        raise Failure(f"bad skip counts {c.skipped}")
    if c.parsed < 0 or c.parsed + c.skipped_total != c.lines:
        raise Failure(f"parsed {c.parsed} + skipped {c.skipped_total} != lines {c.lines}")
    json.dumps(c.to_dict())


def _check_line_nos(line_no: list, first: int, n: int, ordered: bool) -> None:
    if any(x is None or not first <= x < first + n for x in line_no):
        raise Failure(f"line_no outside [{first}, {first + n})")
    if len(set(line_no)) != len(line_no):
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
        if rows != c.parsed:
            raise Failure(f"{rows} rows for {c.parsed} parsed lines")
        _check_line_nos([x for t in tables for x in t["line_no"].to_pylist()], first, n, ordered)


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
        if any(not t.schema.equals(self.parser().SCHEMA) for t in tables):
            raise Failure("schema differs")
        nos = [x for t in tables for x in t["line_no"].to_pylist()]
        if len(set(nos)) > c.parsed:
            raise Failure(f"rows from {len(set(nos))} lines for {c.parsed} parsed")
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


# ------------------------------------------------------------------ pcaps

_PCAP_TOKENS = [b"\x6b\x64", b"\x45\x00", b"\x08\x00", b"\x81\x00", b"\x02\x00\x00\x00", b"\x0b\x00",
                b"\x03\x03", b"\x12", b"\x14", b"\x00" * 20, b"\xff" * 4]
_PCAP_MAGICS = (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
_LINKTYPES = (0, 1, 12, 14, 101, 108, 113, 147, 228, 276, 0xFFFF)


def _pcap_split(data: bytes) -> tuple[str, bytes, list[tuple[bytes, bytes]]]:
    """A classic pcap's byte order, header and (record header, frame)s."""
    e = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    recs, off = [], 24
    while off + 16 <= len(data):
        incl = struct.unpack_from(e + "I", data, off + 8)[0]
        recs.append((data[off:off + 16], data[off + 16:off + 16 + incl]))
        off += 16 + incl
    return e, data[:24], recs


def _ng_block(e: str, btype: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    n = len(body) + 12
    return struct.pack(e + "II", btype, n) + body + struct.pack(e + "I", n)


def _ng_option(e: str, code: int, val: bytes) -> bytes:
    return struct.pack(e + "HH", code, len(val)) + val + b"\0" * (-len(val) % 4)


class PcapTarget:
    """Whole capture files: the seeds' records mutated at the byte, packet
    and record level, written back as pcap or as pcapng with random
    interface options."""

    name = "tcp_probe_pcap"

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.files = [(SEEDS / f).read_bytes() for f in ("probes.pcap", "wire.pcap", "probes.pcapng")]
        self.frames: list[tuple[int, bytes]] = []   # (linktype, frame) of every seed record
        for data in self.files[:2]:
            e, head, recs = _pcap_split(data)
            lt = struct.unpack_from(e + "I", head, 20)[0]
            self.frames += [(lt, frame) for _, frame in recs]
        self.bytes_m = Mutator(rng, [f for _, f in self.frames], _PCAP_TOKENS, [b"\x00", b"\x08\x00"])

    def _frame(self) -> tuple[int, bytes]:
        r = self.rng
        lt, f = r.choice(self.frames)
        if r.random() < 0.6:
            f = bytearray(f)
            ip = 14 if lt == 1 else 0
            for _ in range(r.randint(1, 3)):
                # IPv4 version/IHL, total length, fragment, protocol, TCP
                # flags/seq, ICMP type and the quoted header.
                pos = r.choice((ip, ip + 2, ip + 3, ip + 6, ip + 7, ip + 9, ip + 20, ip + 24, ip + 25, ip + 33,
                                ip + 28, ip + 29, ip + 36, ip + 45, ip + 48, r.randrange(max(1, len(f)))))
                if pos < len(f):
                    f[pos] = r.choice((0, 1, 2, 3, 4, 6, 11, 0x12, 0x14, 0x45, 0x4F, 0x40, 0x6B, 0xFF,
                                       r.randrange(256)))
            f = bytes(f)
        if r.random() < 0.3:
            f = r.choice(OPS)(self.bytes_m, f)
        if r.random() < 0.1:
            lt = r.choice(_LINKTYPES)
        return lt, f

    def _records(self) -> list[tuple[int, int, bytes]]:
        r = self.rng
        n = r.choice((1, 5, 20, 40, 80))
        t0 = r.choice((0, 1_795_000_000, 2**32 - 1)) * 10**9
        out, ts = [], t0
        for _ in range(n):
            lt, f = self._frame()
            ts += r.choice((0, 1000, 10**6, 10**9))
            out.append((ts, lt, f))
        return out

    def _pcap(self) -> bytes:
        r = self.rng
        recs = self._records()
        magic = r.choice(_PCAP_MAGICS)
        e = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
        frac = 1 if magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d") else 1000
        lt = recs[0][1] if r.random() < 0.9 else r.choice(_LINKTYPES)
        out = [magic + struct.pack(e + "HHiIII", 2, 4, 0, 0, 65535, lt)]
        for ts, _lt, f in recs:
            sec, sub = divmod(ts, 10**9)
            incl = len(f)
            if r.random() < 0.02:
                incl = r.choice((0, incl + 1, incl - 1, 2**20, 2**20 + 1, 2**32 - 1)) & 0xFFFFFFFF
            out.append(struct.pack(e + "IIII", sec & 0xFFFFFFFF, (sub // frac) & 0xFFFFFFFF, max(incl, 0), len(f))
                       + f)
        return b"".join(out)

    def _pcapng(self) -> bytes:
        r = self.rng
        e = r.choice(("<", ">"))
        recs = self._records()
        out = [_ng_block(e, 0x0A0D0D0A, struct.pack(e + "IHHq", 0x1A2B3C4D, 1, 0, -1))]
        resol = r.choice((None, 6, 9, 0, 3, 12, 19, 255, 0x80 | 10, 0x80 | 30, 0x80 | 127, 0xFF))
        opts = b""
        if resol is not None:
            opts += _ng_option(e, 9, bytes([resol]))
        if r.random() < 0.3:
            opts += _ng_option(e, 14, struct.pack(e + "q", r.choice((1, -1, -(2**63), 2**63 - 1, 2**40))))
        if r.random() < 0.1:
            opts += struct.pack(e + "HH", r.choice((9, 14, 2)), r.choice((0, 1, 200, 0xFFFF)))
        if opts:
            opts += _ng_option(e, 0, b"")
        linktypes = sorted({lt for _, lt, _ in recs})
        for lt in linktypes:
            out.append(_ng_block(e, 1, struct.pack(e + "HHI", lt, 0, 65535) + opts))
        unit = {None: 1000, 6: 1000, 9: 1, 0: 10**9, 3: 10**6}.get(resol, 1000)
        for ts, lt, f in recs:
            iface = linktypes.index(lt) if r.random() < 0.97 else r.choice((len(linktypes), 2**32 - 1))
            ticks = ts // unit if r.random() < 0.9 else r.choice((0, 2**64 - 1, 2**63))
            caplen = len(f) if r.random() < 0.97 else r.choice((0, len(f) + 1, 2**32 - 1))
            kind = r.random()
            if kind < 0.9:
                body = struct.pack(e + "IIII", iface, ticks >> 32, ticks & 0xFFFFFFFF, caplen) + \
                    struct.pack(e + "I", len(f)) + f
                out.append(_ng_block(e, 6, body))
            elif kind < 0.95:
                body = struct.pack(e + "HHIII", iface & 0xFFFF, 0, ticks >> 32, ticks & 0xFFFFFFFF, caplen) + \
                    struct.pack(e + "I", len(f)) + f
                out.append(_ng_block(e, 2, body))
            else:
                out.append(_ng_block(e, r.choice((3, 5, 4, 0x80000001)), struct.pack(e + "I", len(f)) + f))
        if r.random() < 0.1:  # a second section, the other byte order
            out.append(_ng_block(">" if e == "<" else "<", 0x0A0D0D0A,
                                 struct.pack((">" if e == "<" else "<") + "I", 0x1A2B3C4D) + b"\0" * 12))
        return b"".join(out)

    def make_input(self, n: int = 0) -> bytes:
        r = self.rng
        k = r.random()
        if k < 0.4:
            data = self._pcap()
        elif k < 0.8:
            data = self._pcapng()
        else:
            data = r.choice(self.files)
        # Byte-level damage anywhere, headers included.
        for _ in range(r.choice((0, 0, 1, 2, 5))):
            data = r.choice(OPS)(self.bytes_m, data)
        if r.random() < 0.05 and len(data) > 24:
            i = r.randrange(len(data) - 4)
            data = data[:i] + r.choice((b"\xff\xff\xff\xff", b"\x00\x00\x00\x00", b"\x00\x00\x10\x00",
                                        b"\x0c\x00\x00\x00", b"\x0a\x0d\x0d\x0a")) + data[i + 4:]
        return data

    def variant(self, rng):
        return {"brokers": rng.random() < 0.5}

    def run(self, data: bytes, variant: dict | None = None):
        from kdiag.parsers.tcp_probe import (
            PROBES_SCHEMA,
            looks_like_pcap,
            parse_pcap,
            path_table,
        )

        looks_like_pcap(data[:12])
        brokers = {("10.203.2.2", 9092): "srv:9092/1"} if (variant or {}).get("brokers") else None
        t, c = parse_pcap(data, brokers=brokers)
        if not t.schema.equals(PROBES_SCHEMA):
            raise Failure("schema differs")
        if c.parsed + c.skipped_total != c.lines or any(v <= 0 for v in c.skipped.values()):
            raise Failure(f"parsed {c.parsed} + skipped {c.skipped_total} != records {c.lines}")
        if t.num_rows > c.parsed:
            raise Failure(f"{t.num_rows} rows for {c.parsed} parsed records")
        json.dumps(c.to_dict())
        path_table(t)
        return max(c.lines, 1), c


# ---------------------------------------------------------------- detect

class DetectTarget:
    """Sample files through format recognition and the line reader."""

    name = "detect"
    kinds = frozenset({None, "pcap", "probes_jsonl", "handshakes_jsonl", "rdkafka_log", "strace", "stats",
                       "sockets"})

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
            data = r.choice((b"\xd4\xc3\xb2\xa1", b"\x0a\x0d\x0d\x0a", b"\xd4\xc3", b"")) + data
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
        from kdiag.parsers import rdkafka_log, sockets, stats, strace

        kind = reading.detect(path)
        if kind not in self.kinds:
            raise Failure(f"detect gave {kind!r}")
        sample = reading.sniff(path)
        if len(sample) > reading.SNIFF_LINES:
            raise Failure(f"sniff gave {len(sample)} lines")
        for mod in (rdkafka_log, strace, stats, sockets):
            score = mod.looks_like(sample)
            if not isinstance(score, (int, float)) or not 0 <= score <= 1 or math.isnan(score):
                raise Failure(f"{mod.__name__}.looks_like gave {score!r}")
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


TARGETS: dict[str, type] = {
    t.name: t for t in (RdkafkaTarget, StraceTarget, StatsTarget, SocketsTarget, PcapTarget, ProbesJsonTarget,
                        HandshakesJsonTarget, DetectTarget)
}
GROUPS = {"all": list(TARGETS), "tcp_probe": ["tcp_probe_pcap", "probes_jsonl", "handshakes_jsonl"]}


def batch_size(name: str, default: int) -> int:
    # Statistics lines are ~4 KB each; keep a batch's memory modest.
    return min(default, 2000) if name in ("stats", "sockets") else default


# ---------------------------------------------------------------- running

def _signature(exc: BaseException) -> str:
    if isinstance(exc, Failure):
        return "invariant: " + re.sub(r"\d+", "N", str(exc))
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if "/parsers/" in f.filename or "/kdiag/" in f.filename] or frames
    f = own[-1] if own else None
    where = f"{Path(f.filename).name}:{f.lineno}" if f else "?"
    return f"{type(exc).__name__} at {where}"


def _fails(target, data: bytes, variant: dict, sig: str) -> bool:
    try:
        target.run(data, variant)
    except Exception as e:  # noqa: BLE001
        return _signature(e) == sig
    return False


def minimise(target, data: bytes, variant: dict, sig: str, budget_s: float = 60.0) -> bytes:
    """The smallest set of lines found (delta debugging on lines) that
    still fails with the same signature."""
    if isinstance(target, PcapTarget):
        return data
    units = data.split(b"\n")
    deadline = time.monotonic() + budget_s
    n = 2
    while len(units) >= 2 and time.monotonic() < deadline:
        size = math.ceil(len(units) / n)
        for i in range(n):
            cand = units[: i * size] + units[(i + 1) * size:]
            if cand and _fails(target, b"\n".join(cand), variant, sig):
                units = cand
                n = max(n - 1, 2)
                break
        else:
            if n >= len(units):
                break
            n = min(len(units), 2 * n)
    return b"\n".join(units)


def run_target(name: str, lines: int, seed: int = 0, batch: int = 10_000, crash_dir: Path | None = CRASH_DIR,
               log: Callable[[str], None] | None = None, minimise_s: float = 60.0) -> Result:
    """Feed `lines` mutated lines (records for pcaps) to one target."""
    rng = random.Random(f"{seed}:{name}")
    target = TARGETS[name](rng)
    res = Result(name)
    batch = batch_size(name, batch)
    t0 = time.monotonic()
    k = 0
    while res.lines < lines:
        data = target.make_input(min(batch, lines - res.lines))
        variant = target.variant(rng)
        k += 1
        res.inputs += 1
        try:
            fed, counts = target.run(data, variant)
        except Exception as e:  # noqa: BLE001  (anything out of a parser is a finding)
            res.crashes += 1
            res.lines += max(1, data.count(b"\n") + 1) if name != "tcp_probe_pcap" else 1
            sig = _signature(e)
            if sig not in res.failures:
                res.failures[sig] = _save(target, name, seed, k - 1, data, variant, e, sig, crash_dir, minimise_s,
                                          log)
            continue
        res.lines += fed
        if counts is not None:
            res.parsed += counts.parsed
            res.skipped.update(counts.skipped)
    res.elapsed = time.monotonic() - t0
    return res


def _save(target, name, seed, k, data, variant, exc, sig, crash_dir, minimise_s, log) -> str | None:
    tb = "".join(traceback.format_exception(exc))
    if log:
        log(f"{name}: {sig}\n{tb}")
    if crash_dir is None:
        return None
    crash_dir.mkdir(parents=True, exist_ok=True)
    stem = crash_dir / f"{name}-seed{seed}-input{k}"
    stem.with_suffix(".bin").write_bytes(data)
    stem.with_suffix(".json").write_text(json.dumps({"parser": name, "variant": variant}) + "\n")
    small = minimise(target, data, variant, sig, minimise_s)
    stem.with_suffix(".min.bin").write_bytes(small)
    stem.with_suffix(".txt").write_text(f"{sig}\n\n{tb}")
    if log:
        log(f"{name}: saved {stem}.bin (minimised: {stem}.min.bin, {len(small)} bytes)")
    return str(stem) + ".min.bin"


def _sidecar(path: Path) -> dict:
    """The .json saved with a failing input: its parser and variant."""
    stem = path.name.split(".")[0]
    side = path.with_name(stem + ".json")
    return json.loads(side.read_text()) if side.exists() else {}


def replay(name: str | None, path: Path) -> int:
    side = _sidecar(path)
    name = name or side.get("parser")
    if name not in TARGETS:
        print("--replay needs --parser NAME (no .json beside the file)", file=sys.stderr)
        return 2
    target = TARGETS[name](random.Random(0))
    try:
        fed, counts = target.run(path.read_bytes(), side.get("variant"))
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        return 1
    print(f"{name}: {fed} lines, no failure" + (f", {counts.to_dict()['skipped']}" if counts else ""))
    return 0


def format_result(r: Result) -> str:
    skipped = ", ".join(f"{k}={v}" for k, v in sorted(r.skipped.items())) or "-"
    unit = "records" if r.target == "tcp_probe_pcap" else "lines"
    s = (f"{r.target:17s} {unit} {r.lines:>9,d}  inputs {r.inputs:>6,d}  crashes {r.crashes}  "
         f"parsed {r.parsed:,d}  {r.elapsed:7.1f} s\n{'':18s}skipped: {skipped}")
    for sig, where in r.failures.items():
        s += f"\n{'':18s}FAILURE {sig}: {where}"
    return s


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m fuzz.mutate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=100_000, help="lines per target (records for pcaps)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--parser", choices=[*GROUPS, *TARGETS], help="default: all")
    ap.add_argument("--batch", type=int, default=10_000, help="lines per parse call")
    ap.add_argument("--crash-dir", type=Path, default=CRASH_DIR)
    ap.add_argument("--replay", type=Path, help="re-run one saved input against --parser")
    a = ap.parse_args(argv)
    if a.replay:
        if a.parser in GROUPS:
            ap.error("--replay needs one --parser")
        return replay(a.parser, a.replay)
    names = GROUPS.get(a.parser or "all", [a.parser])
    total, crashes = 0, 0
    for name in names:
        r = run_target(name, a.lines, a.seed, a.batch, a.crash_dir, log=lambda s: print(s, file=sys.stderr))
        print(format_result(r), flush=True)
        total += r.lines
        crashes += r.crashes
    print(f"total: {total:,d} lines, {crashes} crashes, seed {a.seed}")
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
