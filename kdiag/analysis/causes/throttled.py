"""The broker enforces a quota on this client (KIP-219)."""
from __future__ import annotations

from kdiag.analysis.causes import _stats
from kdiag.analysis.causes._captures import STATS
from kdiag.analysis.thresholds import SLOW_MS, THROTTLE_SHARE

NAME = "throttled"
TAIL = False
COLUMNS = ("wait_ms", "total_ms", "throttle_ms")
SUMMED = ("throttle_ms",)
EXAMPLE_COLUMNS = ()
MEETS = {"wait_ms": 100.0, "total_ms": 100.5, "throttle_ms": 95.0}
COLOUR = "#17becf"
PART = "wait"
# The throttle times its rule reads.
ALSO_RESTS_ON = ("statistics",)
SIGNATURE = (
    "The broker reported throttle times (statistics `throttle` window) at least half as long as "
    "the request's wait. Under KIP-219 a broker over quota answers at once, then reads nothing "
    "from the connection for the throttle time, so the next request waits on a fast path. Without"
    " statistics a throttle looks like `broker_slow`, and the findings say so. Without a "
    "completed request, any throttle time in the statistics names it, by its part of a message's time."
    " From a packet capture: the ProduceResponses' `ThrottleTimeMs`, where they are plaintext (or a "
    "relay's onward side is captured)."
)
FIX_DOC = (
    "Raise the client's quota on the broker (`kafka-configs --alter --entity-type clients "
    "--add-config producer_byte_rate=...`); send fewer bytes (`compression.type=lz4`) and fewer "
    "requests (larger `linger.ms`)."
)

# Statistics alone, no completed request: a broker reported throttle times.
RUN_MEETS = {"requests": 0, "meta": {"stats": {
    "snapshots": 3, "brokers": 1, "rtt_p50_ms": 2.0, "int_latency_p50_ms": 1.0, "throttle_avg_ms": 180.0,
    "throttle_max_ms": 400.0, "throttled_snapshots": 3}}}


def rule(x):
    from pyspark.sql import functions as F

    # A broker that reports throttle times about as long as the wait: under
    # KIP-219 it answers at once, then reads nothing more from the client.
    wait = F.coalesce(x.wait, x.total)
    throttled = F.coalesce(x.col("throttle_ms") >= THROTTLE_SHARE * wait, F.lit(False))
    return (wait > SLOW_MS) & throttled


def from_signals(facts) -> dict | None:
    """Without a completed request: the statistics' throttle window. Its
    share is the throttle's part of a message's time."""
    st = _stats.of(facts)
    if st is None or not (st.get("throttle_max_ms") or 0) > 0:
        return None
    thr = st.get("throttle_avg_ms") or 0.0
    return _stats.judged(st.get("throttled_snapshots") or 1, thr / (thr + _stats.message_ms(st) or 1.0),
                         listed=True)


def signal_evidence(facts) -> list[str]:
    st = _stats.of(facts) or {}
    return [f"the broker reported throttle times of {st.get('throttle_avg_ms'):g} ms (average, up to "
            f"{st.get('throttle_max_ms'):g} ms) in {st.get('throttled_snapshots')} of {st.get('snapshots')} "
            f"snapshots ({_stats.seen_in(st)}, throttle window)",
            "a broker over a client's quota answers at once with ThrottleTimeMs set, then reads nothing more from "
            "that connection for as long (KIP-219): the next requests wait it out"]


def fix(version: tuple[int, ...] | None) -> dict[str, str]:
    return {}   # the quota is the broker's; fewer bytes help (fix_text)


def evidence(facts) -> list[str]:
    agg = facts.agg
    wait50 = (agg.wait or [None])[0]
    return [f"{agg.k} of {facts.requests} Produce requests waited "
            f"{wait50 if wait50 is not None else agg.total:.1f} ms "
            f"(median) for their response, while the broker ({facts.example.get('broker')}) reported throttle "
            f"times of {agg.p50['throttle_ms']:.0f} ms (median), up to {agg.max['throttle_ms']:.0f} ms "
            f"(librdkafka statistics, throttle window)",
            "a broker over a client's quota answers at once with ThrottleTimeMs set, then reads nothing "
            "more from that connection for as long (KIP-219, Kafka >= 2.0); the next request waits out the "
            "throttle on the broker's side, on a fast path"]


def fix_text(facts) -> str:
    return ("the broker is enforcing a quota for this client.id or user: raise it "
            "(kafka-configs --alter --entity-type clients --add-config producer_byte_rate=...), or "
            "send fewer bytes (compression.type=lz4 or zstd) and fewer requests (a larger linger.ms)")


def likely(thin) -> tuple[int, str, str] | None:
    if not thin.slow or thin.client_queue_ms:
        return None
    return 2, "no statistics: a broker's throttle times (quotas) look the same", STATS
