"""Mutations of seed lines: byte flips, cuts, splices, odd numbers and
JSON values, long lines."""
from __future__ import annotations


import copy
import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from fuzz.common import LONG_LINE

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
