"""The likely causes, ranked, when the evidence is thin (no syscalls): each
with what supports it and the one capture that would decide it. Read from
the findings' summary and the run's signals on the driver: the verdict is
the Spark job's; this only says how sure it can be, and what to capture
next."""
from __future__ import annotations

from kdiag.analysis.thresholds import DELAYED_ACK_MS, NAGLE_EXCESS_MAX_MS, NAGLE_EXCESS_MIN_MS, NETWORK_RTT_SHARE, SLOW_MS

STRACE = ("strace -f -tt -T -yy -s 256 -p PID of the producer (or kdiag trace --pid PID): several writes, then a "
          "~40 ms poll() before the response, is Nagle; one write and a long poll() is the broker")
PATH = "tcptraceroute BROKER PORT (or traceroute -T -p PORT, mtr --tcp): the path's own round trip"
STATS = "statistics.interval.ms=1000 in the producer's config: throttle times and queueing per broker"
DEBUG_MSG = "debug=msg,protocol,broker: batch sizes, queue counts, retries and errors"


def rank(result: dict) -> list[dict]:
    """Likely causes, most likely first: {cause, support, decide}."""
    s = result.get("summary") or {}
    sig = result.get("signals") or {}
    rtt = s.get("rtt_p50_ms") or s.get("latency_p50_ms")
    path = s.get("path_rtt_ms")
    tls = any(str(b).startswith(("ssl://", "sasl_ssl://")) for b in s.get("brokers") or [])
    found = {f["cause"] for f in result.get("findings") or []}
    out: list[tuple[int, dict]] = []

    def add(score: int, cause: str, support: str, decide: str) -> None:
        out.append((score, {"cause": cause, "support": support, "decide": decide}))

    for name, score in (("request_timeout", 9), ("retry_backoff", 8), ("small_batches", 7)):
        if name in found:
            add(score, name, "librdkafka's own lines say so (see its finding)", DEBUG_MSG)
    if rtt is not None and rtt > SLOW_MS:
        excess = rtt - (path or 0.0)
        in_band = NAGLE_EXCESS_MIN_MS <= excess <= NAGLE_EXCESS_MAX_MS
        if tls and in_band:
            add(6, "nagle_delayed_ack", f"rtt {rtt} ms is the delayed-ACK timer ({DELAYED_ACK_MS:.0f} ms) plus the "
                f"path, over TLS", STRACE)
        elif in_band:
            add(2, "nagle_in_path", f"rtt {rtt} ms is in the delayed-ACK band, but the brokers are not TLS: "
                f"librdkafka sends a plaintext request in one write, so only a proxy could hold it", STRACE)
        if path is None:
            add(4, "network_latency", f"the path's round trip is unknown; {rtt} ms could be the path", PATH)
        elif path >= NETWORK_RTT_SHARE * rtt:
            add(7, "network_latency", f"the path's round trip is {path} ms of {rtt} ms", PATH)
        if not in_band or not tls:
            add(5 if path is not None else 3, "broker_slow",
                f"rtt {rtt} ms" + (f" over a {path} ms path" if path is not None else "") + " and no Nagle band",
                STRACE)
        if not (result.get("summary") or {}).get("split_ms", {}).get("client_queue"):
            add(1, "throttled", "no statistics: a broker's throttle times (quotas) look the same", STATS)
    if sig.get("untimed"):
        add(0, "unexplained_slow", f"{sig['untimed']} line(s) without a timestamp: only librdkafka's rtt times "
            f"them", "librdkafka's own stderr log, or a logger that prints milliseconds")
    out.sort(key=lambda x: -x[0])
    seen, ranked = set(), []
    for _, item in out:
        if item["cause"] not in seen:
            seen.add(item["cause"])
            ranked.append(item)
    return ranked
