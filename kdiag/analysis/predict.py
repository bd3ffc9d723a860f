"""What each finding's fix would leave: the run's p50 and p99 with that
cause's part taken out of its requests.

A request a cause holds waits for its response longer than one nothing
holds. Its predicted latency is its own, with its wait replaced by the
baseline wait: the median wait of the run's healthy requests when there are
enough, else of the requests that left in one write (Nagle holds nothing
back from those), else the path's round trip. The other requests keep
theirs. Computed from the findings' per-request rows (judge.request_rows:
every request, or a fair sample of a large run).

Measured in the lab (kdiag trace, Nagle on, then off; tests/test_compare.py):
p50 43.1 ms, predicted with socket.nagle.disable=true 1.10 ms, measured
0.70 ms; another pair 43.2 -> predicted 0.78, measured 0.61 ms. The
baseline (other requests, under strace, at another moment) is what the
prediction misses by; the saving itself it gets within 2% (42.0 of 42.4 ms,
42.4 of 42.6 ms; nagle-proxy then proxy-nodelay, 41.4 of 42.5 ms), so the
lab checks the saving."""
from __future__ import annotations

from kdiag.analysis.causes import OTHERWISE, part_of
from kdiag.analysis.spark_plumbing import pctl, rounded

# Fewer healthy requests than this and their median is noise: the one-write
# requests' wait is the baseline instead.
BASELINE_MIN = 5


def baseline(rows: list[dict], one_write_wait_ms: float | None, path_rtt_ms: float | None) -> tuple[float, str] | None:
    """The wait of a request nothing holds, and where it comes from."""
    healthy = [r["wait_ms"] for r in rows if r.get("cause") == OTHERWISE and r.get("wait_ms") is not None]
    if len(healthy) >= BASELINE_MIN:
        return pctl(healthy, 0.5), f"the median wait of the {len(healthy)} healthy requests"
    if one_write_wait_ms is not None:
        return one_write_wait_ms, "the median wait of the requests that left in one write"
    if path_rtt_ms is not None:
        return path_rtt_ms, "the path's round trip"
    return None


def predicted(rows: list[dict], cause: str, base: tuple[float, str] | None) -> dict | None:
    """p50/p99 of the rows with ``cause``'s wait replaced by the baseline:
    for a cause whose part is the wait beyond the baseline (its ``PART``).
    network_latency's part is the path itself, which no setting removes;
    the signal causes (timeouts, retries, batches) have no per-request part
    to take out."""
    if part_of(cause) != "wait" or base is None:
        return None
    wait, said = base
    now, then, held = [], [], 0
    for r in rows:
        total = r.get("total_ms")
        if total is None:
            continue
        now.append(total)
        w = r.get("wait_ms")
        if r.get("cause") == cause and w is not None and w > wait:
            then.append(total - w + wait)
            held += 1
        else:
            then.append(total)
    if not held:
        return None
    p50, p99 = pctl(then, 0.5), pctl(then, 0.99)
    return {"p50_ms": rounded(p50, 3), "p99_ms": rounded(p99, 3),
            "saves_p50_ms": rounded(pctl(now, 0.5) - p50, 3), "saves_p99_ms": rounded(pctl(now, 0.99) - p99, 3),
            "basis": f"the waits of {held} {cause} requests replaced by {rounded(wait, 3)} ms, {said}"}


def queue_saving(client_ms: float | None) -> dict | None:
    """A queue cause's part (client_queueing's) is before the request: the
    messages' time in librdkafka's queue, which a request's latency does not
    hold. Its fix gives each message that back (lab, client-queueing
    scenario, linger.ms 200 then 0: predicted 100.9 ms sooner, measured
    101.4 ms)."""
    if client_ms is None:
        return None
    return {"p50_ms": None, "p99_ms": None, "saves_delivery_p50_ms": rounded(client_ms, 3),
            "basis": "the messages' median time in librdkafka's queue (statistics int_latency) taken out"}


def attach(findings: list[dict], request_rows: dict | None, one_write_wait_ms: float | None,
           path_rtt_ms: float | None, client_ms: float | None = None) -> None:
    """Each finding's ``predicted`` (None where there is nothing to take
    out) and, with its fix, ``predicted_text``."""
    cols = (request_rows or {}).get("columns") or []
    rows = [dict(zip(cols, r)) for r in (request_rows or {}).get("rows") or []]
    base = baseline(rows, one_write_wait_ms, path_rtt_ms) if rows else None
    for f in findings:
        # A fix outside the producer (a proxy's setting) has no properties to name.
        fix = ", ".join(f"{k}={v}" for k, v in (f.get("fix") or {}).items()) or "the fix"
        if part_of(f["cause"]) == "queue":
            p = f["predicted"] = queue_saving(client_ms)
            if p is not None and f.get("fix"):
                f["predicted_text"] = (f"with {fix}: each message delivered about {p['saves_delivery_p50_ms']:g} ms "
                                       "sooner (the median message's time in the queue)")
            continue
        p = f["predicted"] = predicted(rows, f["cause"], base)
        if p is not None:
            f["predicted_text"] = (f"with {fix}: p50 about {p['p50_ms']:g} ms, p99 about {p['p99_ms']:g} ms "
                                   f"({p['saves_p50_ms']:g} ms less at the median)")
