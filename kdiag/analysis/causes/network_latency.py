"""The path's round trip explains the wait."""
from __future__ import annotations

from kdiag.analysis.causes import _send_stall, _stats
from kdiag.analysis.causes._captures import PATH
from kdiag.analysis.thresholds import NETWORK_RTT_SHARE, PATH_ALONE_SLOW_MS, SLOW_MS

NAME = "network_latency"
TAIL = False
COLUMNS = ("wait_ms",)
SUMMED = ()
EXAMPLE_COLUMNS = ()
MEETS = {"wait_ms": 31.0, "total_ms": 31.5, "n_writes": 1, "path_rtt_ms": 30.0}
COLOUR = "#1f77b4"
PART = None
# The path RTT its rule weighs the wait against.
ALSO_RESTS_ON = ("path",)
SIGNATURE = (
    "The path RTT explains at least half the wait. The RTT comes from kdiag's own `connect()` "
    "handshakes, else from SYN probes, else from the user's own path tools given beside the log "
    "(tcptraceroute, `traceroute -T`, `mtr --tcp`; then ping, `ss`), else from the wait between "
    "the producer's `connect()` and `getsockopt(SO_ERROR)` in strace (see \"The network path\"). "
    "Without syscalls, a request's whole time stands for its wait. Without a completed request: "
    "the statistics' `rtt` about the path's, or a path of 50 ms or more given alone (low confidence)."
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
    drains one round trip at a time. Without a completed request: the
    statistics' rtt about the path's, or a long path alone."""
    return _send_stall.share(facts, slow_path=True) or _stats.rtt_against_path(facts, slow_path=True) \
        or _path_alone(facts) or _slow_opener(facts)


def _slow_opener(facts) -> dict | None:
    """No Produce request completed, but a connection's opening request
    (an ApiVersionRequest, which any broker answers at once from memory,
    sent whole in one record) was slow: the time is in the path, or the
    broker's network stack. Low confidence: one kind of request, no path."""
    ow = (facts.meta or {}).get("one_write") or {}
    took = ow.get("opener_p50_ms")
    if facts.requests or took is None or took < SLOW_MS or facts.path_rtt_ms is not None:
        return None
    return {"requests": ow.get("opener_n") or 1, "share": 0.5, "time_share": 0.5, "rests_on": ["requests"]}


def _path_alone(facts) -> dict | None:
    """Nothing but a path (a ping, a traceroute): a round trip this long is
    what every request to the broker pays at least."""
    st = (facts.meta or {}).get("stats") or {}
    path = facts.path_rtt_ms
    if facts.requests or st.get("rtt_p50_ms") is not None or path is None or facts.rtt_upper_bound \
            or path < PATH_ALONE_SLOW_MS:
        return None
    return {"requests": 0, "share": 1.0, "time_share": 1.0, "rests_on": ["path"]}


def signal_evidence(facts) -> list[str]:
    sig = facts.meta.get("signals") or {}
    if sig.get("stalled_sends"):
        return _send_stall.evidence(facts, "the path's round trip paces the send: each window of data waits for "
                                           "the ACKs of the last")
    ow = (facts.meta or {}).get("one_write") or {}
    if _slow_opener(facts):
        return [f"{ow.get('opener_n')} {ow.get('opener_kind')}Request(s), the first request on a connection, took "
                f"{ow['opener_p50_ms']:g} ms (median): a broker answers it at once from memory, and it leaves whole "
                f"in one record, so neither the broker's work nor Nagle holds it: the time is in the path (or the "
                f"broker's network stack)",
                "no Produce request completed and the path was not measured: a ping or tcptraceroute to the broker "
                "confirms it"]
    if _stats.of(facts) and (_stats.of(facts) or {}).get("rtt_p50_ms") is not None:
        return _stats.rtt_evidence(facts, "the path explains the rtt: the broker answers at once, the network "
                                          "is what takes the time")
    return [f"the path's round trip to the broker is {facts.path_rtt_ms:g} ms ({facts.summary.get('path_rtt_source')}):"
            f" every Produce request waits at least one round trip for its response (two or more with acks=all "
            f"under load), so no setting makes a request faster than that",
            "this rests on the path alone: no request, statistics or log line of the client was seen",
            "to confirm: librdkafka's statistics (statistics.interval.ms=1000) show the requests' rtt; about the "
            "path's, it is the network"]


def likely(thin) -> tuple[int, str, str] | None:
    rtt, path = thin.rtt_ms, thin.path_rtt_ms
    if not thin.slow:
        return None
    if path is None:
        return 8, f"the path's round trip is unknown; {rtt} ms could be the path", PATH
    if path >= NETWORK_RTT_SHARE * rtt:
        return 13, f"the path's round trip is {path} ms of {rtt} ms", PATH
    return None
