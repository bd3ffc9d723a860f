"""Slow requests, but nothing in the captures splits their time (a log alone)."""
from __future__ import annotations

from kdiag.analysis.thresholds import SLOW_MS

NAME = "unexplained_slow"
TAIL = False
COLUMNS = ("wait_ms", "total_ms")
SUMMED = ()
EXAMPLE_COLUMNS = ()
MEETS = {"total_ms": 50.0}


def rule(x):
    return x.wait.isNull() & (x.total > SLOW_MS)


def fix(version: tuple[int, ...] | None) -> dict[str, str]:
    return {}


def evidence(facts) -> list[str]:
    return [f"median {facts.agg.total:.1f} ms without syscall evidence to explain it"]


def fix_text(facts) -> str:
    return "capture strace of the producer (kdiag trace) to split the time"
