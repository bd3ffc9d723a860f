"""The path's round trip explains the wait."""
from __future__ import annotations

from kdiag.analysis.causes import _send_stall
from kdiag.analysis.causes._captures import PATH
from kdiag.analysis.thresholds import NETWORK_RTT_SHARE, SLOW_MS

NAME = "network_latency"
TAIL = False
COLUMNS = ("wait_ms",)
SUMMED = ()
EXAMPLE_COLUMNS = ()
MEETS = {"wait_ms": 31.0, "total_ms": 31.5, "n_writes": 1, "path_rtt_ms": 30.0}
COLOUR = "#1f77b4"
PART = None
SIGNATURE = (
    "The path RTT explains at least half the wait. The RTT comes from kdiag's own `connect()` "
    "handshakes, else from SYN probes, else from the user's own path tools given beside the log "
    "(tcptraceroute, `traceroute -T`, `mtr --tcp`; then ping, `ss`), else from the wait between "
    "the producer's `connect()` and `getsockopt(SO_ERROR)` in strace (see \"The network path\"). "
    "Without syscalls, a request's whole time stands for its wait."
)
FIX_DOC = "A shorter path; batching for throughput."
# A send that stalled over a slow path.
RUN_MEETS = {"requests": 10, "path_rtt_ms": 30.0, "meta": {"completed_ms": 500.0, "signals": {
    "stalled_sends": 5, "send_stall_p50_ms": 80.0, "send_stall_max_ms": 120.0}}}


def rule(x):
    from pyspark.sql import functions as F

    # Without syscalls the request's whole time stands for its wait.
    wait = F.coalesce(x.wait, x.total)
    return (wait > SLOW_MS) & x.rtt.isNotNull() & (x.rtt >= wait * NETWORK_RTT_SHARE)


def fix(version: tuple[int, ...] | None) -> dict[str, str]:
    return {}


def evidence(facts) -> list[str]:
    if facts.agg.wait is None or facts.agg.wait[0] is None:
        return [f"median request {facts.agg.total:.1f} ms by librdkafka's rtt; the path round trip alone is "
                f"{facts.path_rtt_ms:.1f} ms ({facts.summary['path_rtt_source']})"]
    return [f"median wait {facts.agg.wait[0]:.1f} ms; the path round trip alone is {facts.path_rtt_ms:.1f} ms "
            f"({facts.summary['path_rtt_source']})"]


def fix_text(facts) -> str:
    return "the path is slow: move the producer closer to the brokers, or raise linger/batching for throughput"


def from_signals(facts) -> dict | None:
    """Requests whose send phase stalled over a slow path: the window
    drains one round trip at a time."""
    return _send_stall.share(facts, slow_path=True)


def signal_evidence(facts) -> list[str]:
    return _send_stall.evidence(facts, "the path's round trip paces the send: each window of data waits for "
                                       "the ACKs of the last")


def likely(thin) -> tuple[int, str, str] | None:
    rtt, path = thin.rtt_ms, thin.path_rtt_ms
    if not thin.slow:
        return None
    if path is None:
        return 8, f"the path's round trip is unknown; {rtt} ms could be the path", PATH
    if path >= NETWORK_RTT_SHARE * rtt:
        return 13, f"the path's round trip is {path} ms of {rtt} ms", PATH
    return None
