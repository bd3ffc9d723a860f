"""Numbers, timestamps and strings out of strace's text, whole Arrow
arrays at a time; and strace's C-style escapes."""
from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kdiag.parsers.strings import cut as _cut
from kdiag.parsers.strings import first_last as _first_last
from kdiag.parsers.strings import lengths as _lengths
from kdiag.parsers.strings import offsets_data as _offsets_data


# --- Arrow/numpy plumbing ----------------------------------------------------
#
def scatter_str(n: int, parts: list[tuple[np.ndarray, pa.Array]]) -> pa.Array:
    """Length-n string array with parts[k][1][j] at parts[k][0][j], null elsewhere."""
    parts = [(i, a) for i, a in parts if len(i)]
    if not parts:
        return pa.nulls(n, pa.string())
    if len(parts) == 1 and len(parts[0][0]) == n:  # already in place
        return parts[0][1].cast(pa.string())
    allv = pa.concat_arrays([a.cast(pa.string()) for _, a in parts])
    pos = np.full(n, -1, dtype=np.int64)
    start = 0
    for idx, a in parts:
        pos[idx] = np.arange(start, start + len(a))
        start += len(a)
    return allv.take(pa.array(pos, mask=pos < 0))


def ints(digits: pa.Array) -> np.ndarray:
    """int64 of strings already known to be 1-18 ASCII digits."""
    if len(digits) == 0:
        return np.zeros(0, dtype=np.int64)
    return pc.cast(digits, pa.int64()).to_numpy(zero_copy_only=False)


def seconds_us(s: pa.Array, tod: np.ndarray) -> np.ndarray:
    """Microseconds of "1795314016.121249" / "0.000011" (seconds, any number
    of fraction digits, cut to 6) or, where tod, of "02:24:05[.260276]"
    (time of day). Strings are known to match those shapes."""
    n = len(s)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    dot = pc.find_substring(s, ".").to_numpy()
    frac_digits = np.where(dot >= 0, _lengths(s) - dot - 1, 0)
    # A double holds 10 integer and 6 fraction digits exactly enough for
    # rint(x * 1e6) to give the exact microsecond; the rest are done in
    # integers.
    simple = ~tod & (dot >= 0) & (dot <= 10) & (frac_digits <= 6)
    out = np.empty(n, dtype=np.int64)
    if simple.any():
        sub = s if simple.all() else s.filter(pa.array(simple))
        us = np.rint(pc.cast(sub, pa.float64()).to_numpy(zero_copy_only=False) * 1e6)
        exact = us < 2.0**53
        out[simple] = np.where(exact, us, 0).astype(np.int64)
        simple[np.flatnonzero(simple)[~exact]] = False
        if simple.all():
            return out
    hard = ~simple
    sub = s.filter(pa.array(hard))
    digits = pc.replace_substring(pc.replace_substring(sub, ".", ""), ":", "")
    # Up to 10 + 9 digits: past int64, not past uint64.
    v = pc.cast(digits, pa.uint64()).to_numpy(zero_copy_only=False)
    fdig = frac_digits[hard].astype(np.uint64)
    scale = np.uint64(10) ** fdig
    whole = (v // scale).astype(np.int64)
    frac = v % scale
    frac_us = np.where(fdig <= 6, frac * np.uint64(10) ** (6 - np.minimum(fdig, 6)),
                       frac // np.uint64(10) ** (np.maximum(fdig, 6) - 6))
    whole = np.where(tod[hard], whole // 10000 * 3600 + whole // 100 % 100 * 60 + whole % 100, whole)
    out[hard] = whole * 1_000_000 + frac_us.astype(np.int64)
    return out


def _hex_values(hexdigits: pa.Array) -> np.ndarray:
    """int64 (two's complement) of strings of 1-16 hex digits."""
    if len(hexdigits) == 0:
        return np.zeros(0, dtype=np.int64)
    padded = pc.utf8_lpad(hexdigits, 16, "0")
    off, data = _offsets_data(padded)
    nib = _HEX[data[off[0]: off[-1]].reshape(-1, 16)].astype(np.uint64)
    acc = np.zeros(len(hexdigits), dtype=np.uint64)
    for k in range(16):
        acc = (acc << np.uint64(4)) | nib[:, k]
    return acc.view(np.int64)


_HEX = np.zeros(256, dtype=np.int64)
for _i, _c in enumerate(b"0123456789abcdef"):
    _HEX[_c] = _i
for _i, _c in enumerate(b"ABCDEF"):
    _HEX[_c] = 10 + _i


def parse_ret(v: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Return values "137", "-1", "0x7f1a34009ba3", "?", "3</etc/ld.so.cache>"
    -> (int64, valid). Hex is read as 64-bit two's complement."""
    n = len(v)
    out = np.zeros(n, dtype=np.int64)
    ok = np.zeros(n, dtype=bool)
    if n == 0:
        return out, ok
    v = v.cast(pa.string())
    lt = pc.find_substring(v, "<").to_numpy()
    if (lt >= 0).any():  # drop the fd annotation
        v = _cut(v, np.arange(n), np.zeros(n, np.int64), np.where(lt >= 0, lt, _lengths(v)))
    L = _lengths(v)
    first, _ = _first_last(v)
    # Most values are plain digits; "-1" and "0x..." are the few others.
    dec = np.asarray(pc.ascii_is_decimal(v)) & (L <= 18)
    neg = np.flatnonzero((first == ord("-")) & (L >= 2) & (L <= 19))
    if len(neg):
        tail = pc.utf8_slice_codeunits(v.take(pa.array(neg)), 1)
        digits = np.asarray(pc.ascii_is_decimal(tail))
        out[neg[digits]] = -ints(tail.filter(pa.array(digits)))
        ok[neg[digits]] = True
    hx = np.flatnonzero((first == ord("0")) & (L > 2) & (L <= 18) & ~dec)
    if len(hx):
        h = v.take(pa.array(hx))
        good = np.asarray(pc.match_substring_regex(h, r"^0[xX][0-9a-fA-F]{1,16}$"))
        out[hx[good]] = _hex_values(pc.utf8_slice_codeunits(h.filter(pa.array(good)), 2))
        ok[hx[good]] = True
    ok |= dec
    if dec.any():
        out[dec] = ints(v.filter(pa.array(dec)))
    return out, ok


# --- unescape ---------------------------------------------------------------

_ESCAPE_RE = re.compile(rb"\\(x[0-9a-fA-F]{1,2}|[0-7]{1,3}|.)", re.S)
_SIMPLE_ESCAPES = {
    b"n": b"\n", b"t": b"\t", b"v": b"\v", b"f": b"\f", b"r": b"\r", b"a": b"\a",
    b"b": b"\b", b"e": b"\x1b", b'"': b'"', b"\\": b"\\", b"'": b"'",
}


def _unescape_one(m: re.Match) -> bytes:
    e = m.group(1)
    if e[:1] == b"x" and len(e) > 1:  # a bare "\\x" is an unknown escape
        return bytes([int(e[1:], 16)])
    if b"0" <= e[:1] <= b"7":
        return bytes([int(e, 8) & 0xFF])
    return _SIMPLE_ESCAPES.get(e, b"\\" + e)


def unescape(s: str) -> str:
    """Decode strace's C-style escapes: \\n \\t \\" \\\\ \\xNN and octal \\NNN.

    Escaped bytes are reassembled and decoded as UTF-8 (invalid sequences
    become U+FFFD), so a multi-byte character strace printed as octal comes
    back whole. Unknown escapes are kept as written.
    """
    if "\\" not in s:
        return s
    raw = s.encode("utf-8", "surrogatepass")
    return _ESCAPE_RE.sub(_unescape_one, raw).decode("utf-8", "replace")


def unescape_bytes(s: str) -> bytes:
    """The bytes strace printed as ``s`` (a socket write's payload, say),
    escapes decoded as unescape() decodes them."""
    return _ESCAPE_RE.sub(_unescape_one, s.encode("utf-8", "surrogatepass"))
