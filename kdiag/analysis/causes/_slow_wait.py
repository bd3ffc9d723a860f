"""``slow_wait``: a slow wait that neither Nagle nor the path explains. One
rule serves two causes, told apart over the whole run: a minority of such
requests over an otherwise fast body is the tail loss leaves (unless the
run is known to have retransmitted nothing); a majority is the broker."""
from __future__ import annotations

from kdiag.analysis.thresholds import DOMINANT_SHARE, SLOW_MS

LABEL = "slow_wait"
COLUMNS = ("wait_ms",)


def rule(x):
    # Without syscalls, a slow request over a path known to be fast is the
    # broker's as well (Nagle's and the network's rules come first).
    return (x.wait > SLOW_MS) | (x.unsplit & x.rtt.isNotNull() & (x.total > SLOW_MS))


def resolve(n: int, k: int, retrans: int | None) -> str:
    """The cause of the ``k`` slow waits among ``n`` requests."""
    tail = n and k / n < DOMINANT_SHARE and retrans != 0
    return "packet_loss" if tail else "broker_slow"


def resolved_in(per: dict) -> str:
    """The cause ``slow_wait`` was told apart as, in a run's causes."""
    return "packet_loss" if "packet_loss" in per else "broker_slow"
