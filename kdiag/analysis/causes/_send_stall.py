"""A send phase that stalls: librdkafka's ``Sent partial`` lines spread over
time say the socket took the request in pieces, as its send buffer
drained. Whose is the stall, the broker's (not reading) or the network's
(slow round trips), the path evidence decides."""
from __future__ import annotations

from kdiag.analysis.thresholds import NETWORK_RTT_SHARE, SLOW_MS


def share(facts, slow_path: bool) -> dict | None:
    sig = facts.meta.get("signals") or {}
    stall = sig.get("send_stall_p50_ms")
    if not sig.get("stalled_sends") or stall is None or stall < SLOW_MS:
        return None
    path = facts.path_rtt_ms
    path_slow = path is not None and path >= NETWORK_RTT_SHARE * SLOW_MS
    if path_slow != slow_path:
        return None
    k = sig["stalled_sends"]
    return {"requests": k, "share": min(1.0, k / max(facts.requests, 1)), "time_share": 1.0 if not facts.requests
            else min(1.0, k * stall / max(facts.meta.get("completed_ms") or 1.0, 1.0)),
            "rests_on": ["log lines"] + (["path"] if path is not None else [])}


def evidence(facts, whose: str) -> list[str]:
    sig, path = facts.meta.get("signals") or {}, facts.path_rtt_ms
    return [f"{sig['stalled_sends']} Produce request(s) left in pieces (Sent partial lines): {sig['send_stall_p50_ms']} "
            f"ms (median, worst {sig['send_stall_max_ms']} ms) from the first piece to the whole request sent",
            f"the path round trip is {'%.3f ms' % path if path is not None else 'unknown'}"
            + (f" ({facts.summary.get('path_rtt_source')})" if path is not None else
               " (tcptraceroute BROKER PORT would tell the network from the broker)") + f": {whose}"]
