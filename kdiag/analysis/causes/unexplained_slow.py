"""Slow requests, but nothing in the captures splits their time (a log alone)."""
from __future__ import annotations

from kdiag.analysis.thresholds import SLOW_MS

NAME = "unexplained_slow"
TAIL = False
COLUMNS = ("wait_ms", "total_ms")
SUMMED = ()
EXAMPLE_COLUMNS = ()
MEETS = {"total_ms": 50.0}
COLOUR = "#7f7f7f"
PART = "wait"
SIGNATURE = (
    "Requests over 10 ms that no rule takes, and the captures hold no syscalls to split them. The"
    " findings rank the likely causes, each with what supports it and the one capture that "
    "decides it."
)
FIX_DOC = "Capture strace too: `kdiag trace`, or `strace -f -ttt -T -yy -s 256`."


def rule(x):
    return x.wait.isNull() & (x.total > SLOW_MS)


def fix(version: tuple[int, ...] | None) -> dict[str, str]:
    return {}


def evidence(facts) -> list[str]:
    return [f"median {facts.agg.total:.1f} ms without syscall evidence to explain it"]


def fix_text(facts) -> str:
    return "capture strace of the producer (kdiag trace) to split the time"


def likely(thin) -> tuple[int, str, str] | None:
    untimed = thin.signals.get("untimed")
    if not untimed:
        return None
    return (0, f"{untimed} line(s) without a timestamp: only librdkafka's rtt times them",
            "librdkafka's own stderr log, or a logger that prints milliseconds")
