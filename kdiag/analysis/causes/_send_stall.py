"""A send phase that stalls: librdkafka's ``Sent partial`` lines spread over
time say the socket took the request in pieces, as its send buffer
drained. Whose is the stall, the broker's (not reading) or the network's
(slow round trips), the path evidence decides."""
from __future__ import annotations

from kdiag.analysis.thresholds import NETWORK_RTT_SHARE, SLOW_MS


def _resolution_ms(sig: dict) -> float:
    """How coarse the log's times are: a stall read from two of them is
    only known to within this either way (whole seconds: 1000)."""
    r = sig.get("ts_resolution_us")
    return r / 1000.0 if isinstance(r, (int, float)) and r > 1000 else 0.0


def share(facts, slow_path: bool) -> dict | None:
    sig = facts.meta.get("signals") or {}
    stall = sig.get("send_stall_p50_ms")
    # Coarse times give bounds, not a latency: the stall must be slow at its least.
    if not sig.get("stalled_sends") or stall is None or stall - _resolution_ms(sig) < SLOW_MS:
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
    r, stall = _resolution_ms(sig), sig["send_stall_p50_ms"]
    took = (f"{stall} ms (median, worst {sig['send_stall_max_ms']} ms)" if not r else
            f"between {max(stall - r, 0.0):g} and {stall + r:g} ms (median; the log's times are to the "
            f"{'second' if r == 1000 else '%g ms' % r}, so only bounds)")
    return [f"{sig['stalled_sends']} Produce request(s) left in pieces (Sent partial lines): {took} "
            f"from the first piece to the whole request sent",
            f"the path round trip is {'%.3f ms' % path if path is not None else 'unknown'}"
            + (f" ({facts.summary.get('path_rtt_source')})" if path is not None else
               " (tcptraceroute BROKER PORT would tell the network from the broker)") + f": {whose}"]
