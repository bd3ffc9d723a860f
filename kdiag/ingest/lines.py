"""Files -> chunks of lines for the pure parsers, and a file's first lines.

Memory stays bounded by the chunk size whatever the file size: lines are
handed to parsers CHUNK_BYTES at a time. Bytes that are not UTF-8 are
replaced (U+FFFD) rather than rejected, so one corrupt byte costs one line's
fidelity, not the file.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pyarrow as pa

# Input bytes a chunk. Peak memory follows it (10 M strace lines, one chunk
# read ahead: 482-491 MiB at 12 MiB, 526-564 MiB at 16, 420-458 at 8), and
# so does speed, each chunk having a cost of its own (4.99-5.09 s at 12 MiB,
# 4.87-4.97 s at 16, 5.34-5.82 s at 8). 12 MiB keeps a parse within 512 MiB.
CHUNK_BYTES = 12 << 20
# A "line" longer than this is cut; the parsers then count it as unparsed.
MAX_LINE_BYTES = 1 << 20
SNIFF_LINES = 200
# Statistics JSON lines run to tens of KB; a cut line would not parse.
SNIFF_LINE_BYTES = 256 << 10


@dataclass(frozen=True)
class Chunk:
    first_line_no: int
    lines: pa.Array  # pa.string(), no trailing newlines
    cut_lines: int   # lines longer than MAX_LINE_BYTES, truncated


def iter_line_chunks(path: Path, chunk_bytes: int = CHUNK_BYTES) -> Iterator[Chunk]:
    line_no = 1
    carry = b""
    skipping = False  # the rest of an endless line already handed over
    # The end of the last read that was no whole line, then the next read,
    # in one buffer used again and again: each chunk's lines are copied out
    # of it, so no read costs a fresh block and its page faults.
    buf = bytearray()
    with open(path, "rb") as f:
        while True:
            n0 = len(carry)
            if len(buf) < n0 + chunk_bytes:
                # Room for a carried line of any usual length: a bytearray
                # is zeroed, a chunk of page faults, each time it is made.
                buf = bytearray(max(n0, MAX_LINE_BYTES) + chunk_bytes)
            view = memoryview(buf)
            view[:n0] = carry
            got = f.readinto(view[n0:n0 + chunk_bytes])
            if not got:
                break
            end = n0 + got
            start = 0
            if skipping:   # nothing is carried then
                nl = buf.find(b"\n", 0, end)
                if nl < 0:
                    continue
                start, skipping = nl + 1, False
            cut = buf.rfind(b"\n", start, end)
            if cut < 0:
                if end - start <= MAX_LINE_BYTES:
                    carry = bytes(view[start:end])
                    continue
                # An endless line: hand over its start as one cut line and
                # drop the rest, so that the next line keeps its number.
                yield Chunk(line_no, _to_chunk(view[start:end], line_no).lines, 1)
                line_no += 1
                carry, skipping = b"", True
                continue
            carry = bytes(view[cut + 1:end])
            chunk = _to_chunk(view[start:cut], line_no)
            line_no += len(chunk.lines)
            yield chunk
    if carry:
        yield _to_chunk(carry, line_no)


def _to_chunk(block, first_line_no: int) -> Chunk:
    """The block's lines as one Arrow string array, built over the block's
    own bytes (``scan.split_lines``, compiled where built): decoding to
    Python strings and back costs five times as much. Falls back to that
    only for a block with a line too long or bytes that are not UTF-8."""
    from kdiag.parsers import scan

    lines, longest = scan.split_lines(block)
    if lines is None or longest > MAX_LINE_BYTES:
        return _to_chunk_slow(block, first_line_no)
    return Chunk(first_line_no, lines, 0)


def _to_chunk_slow(block, first_line_no: int) -> Chunk:
    text = bytes(block).decode("utf-8", "replace")
    lines = text.split("\n")
    cut = 0
    if len(text) > MAX_LINE_BYTES:
        for i, ln in enumerate(lines):
            if len(ln) > MAX_LINE_BYTES:
                lines[i] = ln[:MAX_LINE_BYTES]
                cut += 1
    lines = [ln[:-1] if ln.endswith("\r") else ln for ln in lines]
    return Chunk(first_line_no, pa.array(lines, pa.string()), cut)


def line_blocks(src, block_bytes: int, max_line: int, cut_endless=len) -> Iterator[bytes]:
    """Blocks of whole lines from a binary file, for rewriting a file in one
    pass (redaction, pseudonyms): no match is ever split between blocks. A
    line longer than ``max_line`` is cut where ``cut_endless(buf)`` says."""
    rest = b""
    while True:
        data = src.read(block_bytes)
        buf = rest + data
        if not data:
            yield buf
            return
        cut = buf.rfind(b"\n") + 1
        if cut == 0:
            if len(buf) < max_line:
                rest = buf
                continue
            cut = cut_endless(buf)
        yield buf[:cut]
        rest = buf[cut:]


def sniff(path: Path) -> list[str]:
    out: list[str] = []
    with open(path, "rb") as f:
        while len(out) < SNIFF_LINES:
            raw = f.readline(SNIFF_LINE_BYTES)
            if not raw:
                break
            out.append(raw[:SNIFF_LINE_BYTES].decode("utf-8", "replace").rstrip("\r\n"))
    return out
