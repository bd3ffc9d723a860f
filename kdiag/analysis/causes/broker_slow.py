"""The path is fast but responses are late: most requests wait on the broker."""
from __future__ import annotations

from kdiag.analysis.causes import _send_stall, _slow_wait, _stats
from kdiag.analysis.causes._captures import STRACE
from kdiag.analysis.spark_plumbing import rounded
from kdiag.analysis.thresholds import ONE_WRITE_MIN

NAME = "broker_slow"
TAIL = False
LABEL = _slow_wait.LABEL
COLUMNS = _slow_wait.COLUMNS
SUMMED = ()
EXAMPLE_COLUMNS = ()
MEETS = {"wait_ms": 80.0, "total_ms": 80.5, "n_writes": 1}
COLOUR = "#8c564b"
PART = "wait"
# The path RTT its rule weighs the wait against.
ALSO_RESTS_ON = ("path",)
SIGNATURE = (
    "The path is fast, but responses are late. Requests that left in one write wait just as long,"
    " so Nagle is ruled out. Without a completed request: the statistics' `rtt` over 10 ms and more "
    "than twice a measured path's (without a path, both this and `network_latency` are only likely)."
)
FIX_DOC = "Look at the broker: request handling, disk, replication."
# A send that stalled over a fast path.
RUN_MEETS = {"requests": 10, "path_rtt_ms": 0.3, "meta": {"completed_ms": 500.0, "signals": {
    "stalled_sends": 5, "send_stall_p50_ms": 80.0, "send_stall_max_ms": 120.0}}}
rule = _slow_wait.rule


def fix(version: tuple[int, ...] | None) -> dict[str, str]:
    return {}


def evidence(facts) -> list[str]:
    path_rtt, meta = facts.path_rtt_ms, facts.meta
    waited = (f"requests waited {facts.agg.wait[0]:.1f} ms (median) for their response"
              if facts.agg.wait and facts.agg.wait[0] is not None else
              f"requests took {facts.agg.total:.1f} ms (median) by librdkafka's rtt")
    ev = [f"{waited} while the path round trip is {rounded(path_rtt, 3) if path_rtt is not None else 'unknown'} ms"]
    one = meta.get("one_write") or {}
    # Only when they are what ruled Nagle out (a capture can rule it out by
    # its hops instead, judge.judge).
    if (one.get("n") or 0) >= ONE_WRITE_MIN and not meta.get("nagle_possible", True) and not meta.get("wire_no_hold"):
        ev.append(f"requests that left in one write waited as long ({one['wait_p50_ms']} ms, median of "
                  f"{one['n']}): Nagle holds nothing back from those, so the wait is the broker's")
    if not meta.get("has_stats") and not meta.get("wire_decoded"):
        ev.append("no librdkafka statistics in the capture: a broker throttling this client (quotas) looks "
                  "the same without them; set statistics.interval.ms to see its throttle times")
    return ev


def fix_text(facts) -> str:
    return "look at the broker: request handling, disk, replication (acks=all waits for the ISR)"


def from_signals(facts) -> dict | None:
    """Requests whose send phase stalled (``Sent partial`` lines spread over
    time) over a path that does not explain it: the broker is not reading.
    Without a completed request: the statistics' rtt well beyond a measured
    path's."""
    return _send_stall.share(facts, slow_path=False) or _stats.rtt_against_path(facts, slow_path=False)


def signal_evidence(facts) -> list[str]:
    if (facts.meta.get("signals") or {}).get("stalled_sends"):
        return _send_stall.evidence(facts, "the broker did not read fast enough: its socket's receive window "
                                           "stayed full")
    return _stats.rtt_evidence(facts, "the path explains little of the rtt: the time is the broker's (request "
                                      "handling, disk, replication; acks=all waits for the ISR)")


def likely(thin) -> tuple[int, str, str] | None:
    rtt, path = thin.rtt_ms, thin.path_rtt_ms
    if not thin.slow or (thin.tls and thin.nagle_band and not thin.nagle_ruled_out):
        return None
    return (10 if path is not None else 6,
            f"rtt {rtt} ms" + (f" over a {path} ms path" if path is not None else "") + " and no Nagle band", STRACE)
