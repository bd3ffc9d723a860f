"""The path's round trip explains the wait."""
from __future__ import annotations

from kdiag.analysis.thresholds import NETWORK_RTT_SHARE, SLOW_MS

NAME = "network_latency"
TAIL = False
COLUMNS = ("wait_ms",)
SUMMED = ()
EXAMPLE_COLUMNS = ()
MEETS = {"wait_ms": 31.0, "total_ms": 31.5, "n_writes": 1, "path_rtt_ms": 30.0}


def rule(x):
    return (x.wait > SLOW_MS) & x.rtt.isNotNull() & (x.rtt >= x.wait * NETWORK_RTT_SHARE)


def fix(version: tuple[int, ...] | None) -> dict[str, str]:
    return {}


def evidence(facts) -> list[str]:
    return [f"median wait {facts.agg.wait[0]:.1f} ms; the path round trip alone is {facts.path_rtt_ms:.1f} ms "
            f"({facts.summary['path_rtt_source']})"]


def fix_text(facts) -> str:
    return "the path is slow: move the producer closer to the brokers, or raise linger/batching for throughput"
