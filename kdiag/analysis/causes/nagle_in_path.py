"""The Nagle stall with TCP_NODELAY on the client socket: a proxy or TLS
terminator on the path holds the record."""
from __future__ import annotations

from kdiag.analysis.causes import _nagle

NAME = "nagle_in_path"
TAIL = False
COLUMNS = (*_nagle.COLUMNS, "nodelay")
SUMMED = _nagle.SUMMED
EXAMPLE_COLUMNS = ("nodelay", "nodelay_line")
MEETS = {"wait_ms": 43.0, "total_ms": 43.5, "n_writes": 3, "nodelay": True}


def rule(x):
    from pyspark.sql import functions as F

    return _nagle.held_send(x) & (x.col("nodelay") == F.lit(True))


def fix(version: tuple[int, ...] | None) -> dict[str, str]:
    return {}   # nothing in the client: the proxy holds the record


def evidence(facts) -> list[str]:
    ev = _nagle.evidence(facts)
    ex = facts.example
    where = f"strace line {ex['nodelay_line']}" if ex.get("nodelay_line") else "sampled live from the socket"
    ev.append(f"the client socket has TCP_NODELAY ({where}): "
              "the stall is in a proxy or TLS terminator on the path")
    return ev


def fix_text(facts) -> str:
    return "disable Nagle on the proxy/TLS terminator's sockets (e.g. socat ...,nodelay)"
