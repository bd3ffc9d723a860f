"""The run-level causes judged from librdkafka's statistics alone, when no
Produce request completed in the input: the windows and counters
``stats_windows.stats_summary`` put in the run's ``meta["stats"]``.

A message's time, as the statistics split it, is its wait in the client's
queue (``int_latency``), in the output buffer (``outbuf_latency``) and its
request's round trip (``rtt``); each cause's share is its part of that.
With completed requests those are judged from the requests themselves,
and the statistics only join them (throttles, the client queue)."""
from __future__ import annotations

from kdiag.analysis.causes import PATH, STATISTICS
from kdiag.analysis.thresholds import CONTRIBUTING_SHARE, NETWORK_RTT_SHARE, SLOW_MS


def of(facts) -> dict | None:
    """The run's statistics when they are all there is to judge from."""
    st = (facts.meta or {}).get("stats")
    if facts.requests or not st or not st.get("snapshots"):
        return None
    return st


def message_ms(st: dict) -> float:
    """A message's time as the statistics split it (medians)."""
    return sum(st.get(f) or 0.0 for f in ("int_latency_p50_ms", "outbuf_latency_p50_ms", "rtt_p50_ms"))


def judged(k: int, share: float, time_share: float | None = None, listed: bool = False) -> dict:
    """A from_signals answer resting on the statistics; ``listed``: at least
    the share that lists a finding (a throttle at all is worth saying)."""
    share = max(share, CONTRIBUTING_SHARE) if listed else share
    share = min(1.0, max(0.0, share))
    ts = share if time_share is None else min(1.0, max(0.0, time_share))
    return {"requests": int(k), "share": share, "time_share": ts, "rests_on": [STATISTICS]}


def seen_in(st: dict) -> str:
    n = st.get("snapshots") or 0
    return f"librdkafka statistics, {n} snapshot{'s' if n != 1 else ''} of {st.get('brokers') or 0} broker(s)"


def counted(st: dict, name: str) -> tuple[int, bool]:
    """A cumulative counter's count over the snapshots given (grew), else,
    when it did not grow or there is one snapshot, its count since the
    client started; and whether that count grew within the snapshots."""
    grew = st.get(f"{name}_grew") or 0
    if grew > 0:
        return grew, True
    return st.get(name) or 0, False


def moved(st: dict, field: str) -> str:
    """How a window moved over the series: first -> worst -> last."""
    pts = [p.get(field) for p in st.get("series") or [] if p.get(field) is not None]
    if len(pts) < 2:
        return ""
    return f" (first {pts[0]:g}, worst {max(pts):g}, last {pts[-1]:g} ms over {st.get('series_of', len(pts))} " \
           f"snapshots)"


def rtt_against_path(facts, slow_path: bool) -> dict | None:
    """The statistics' rtt window slow, and a measured path beside it that
    explains it (``slow_path``) or does not: the network's, or the broker's.
    Without a path neither is named (the likely causes rank both)."""
    st, path = of(facts), facts.path_rtt_ms
    rtt = st.get("rtt_p50_ms") if st is not None else None
    if rtt is None or rtt <= SLOW_MS or path is None:
        return None
    if (path >= NETWORK_RTT_SHARE * rtt) != slow_path:
        return None
    if facts.rtt_upper_bound and slow_path:   # the path is at most that: it may be far shorter
        return None
    got = judged(st["snapshots"], rtt / (message_ms(st) or rtt))
    got["rests_on"] = [STATISTICS, PATH]
    return got


def rtt_evidence(facts, whose: str) -> list[str]:
    st, path = of(facts) or {}, facts.path_rtt_ms
    le = "at most " if facts.rtt_upper_bound else ""
    return [f"librdkafka's rtt to the brokers was {st.get('rtt_p50_ms'):g} ms (median of the snapshots' p50, "
            f"p99 {st.get('rtt_p99_ms') or 0:g} ms){moved(st, 'rtt_p50_ms')}; {seen_in(st)}",
            f"the path's own round trip is {le}{path:g} ms ({facts.summary.get('path_rtt_source')}): {whose}"]
