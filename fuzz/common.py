"""What the fuzz targets share: the seeds' lines, bytes -> lines the way
kdiag reads a file, and the failure of an invariant."""
from __future__ import annotations


from pathlib import Path

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


class Failure(Exception):
    """Counts or tables that do not add up."""
