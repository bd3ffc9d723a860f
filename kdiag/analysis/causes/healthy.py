"""No cause explains half the requests (and no tail cause much of the time)."""
from __future__ import annotations

NAME = "healthy"
TAIL = False
COLUMNS = ()
SUMMED = ()
EXAMPLE_COLUMNS = ()
MEETS = {"wait_ms": 0.4, "total_ms": 0.8, "n_writes": 3}
COLOUR = "#2ca02c"
PART = None
SIGNATURE = "No cause explains half the requests."
FIX_DOC = "Nothing to change."
rule = None   # what no other rule takes


def fix(version: tuple[int, ...] | None) -> dict[str, str]:
    return {}


def evidence(facts) -> list[str]:
    s = facts.summary
    return [f"median request {s['latency_p50_ms']} ms, p99 {s['latency_p99_ms']} ms; "
            f"no cause explains half the requests"]


def fix_text(facts) -> str:
    return "nothing to change"
