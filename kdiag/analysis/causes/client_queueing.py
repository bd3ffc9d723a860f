"""Messages wait in librdkafka's queue before their request is sent
(statistics int_latency). Judged on the driver, not per request: against
the requests' time, or without a completed request against the
statistics' own rtt window."""
from __future__ import annotations

from kdiag.analysis.causes import _stats
from kdiag.analysis.thresholds import SLOW_MS

# msg_cnt this near msg_max is a full queue; a count that grew to this many
# messages is a backlog, not a batch forming.
FULL_SHARE = 0.9
GREW_TO = 1000
# rdkafka_performance: this many messages not yet delivered beside refused
# produce() calls, or this share of its calls refused, is a full queue.
BACKLOG_MSGS = 10_000
REFUSED_SHARE = 0.01
NAME = "client_queueing"
TAIL = False
COLUMNS = ()
SUMMED = ()
EXAMPLE_COLUMNS = ()
MEETS = None
COLOUR = "#e377c2"
PART = "queue"
SIGNATURE = (
    "Messages wait in librdkafka's queue (statistics `int_latency`) longer than their request "
    "takes. The cause is batching (`linger.ms`, `batch.num.messages`) or the in-flight limit. "
    "Without a completed request, the statistics decide alone: `int_latency` p50 over 10 ms and "
    "above the `rtt` window's."
)
FIX_DOC = "`-X linger.ms=0` (librdkafka's default is 5 ms since v1.5.0)."
RUN_MEETS = {"requests": 100, "client_ms": 40.0, "summary": {"requests": 100, "latency_p50_ms": 2.0}}
rule = None
# librdkafka raised linger.ms (queue.buffering.max.ms) from 0.5 to 5 ms in v1.5.0.
LINGER_DEFAULT_5MS_FROM = (1, 5, 0)


def share_of(client_ms: float | None, summary: dict) -> float | None:
    """Its share of a message's time, when the queue outweighs the request
    itself; else None: not a cause."""
    req_ms = summary.get("latency_p50_ms") or 0.0
    if client_ms is None or client_ms < SLOW_MS or client_ms < req_ms:
        return None
    return client_ms / (client_ms + req_ms)


def from_signals(facts) -> dict | None:
    """Judged from the run's statistics, against its requests; without a
    completed request, against the statistics' rtt window."""
    st = _stats.of(facts)
    if st is not None:
        return _from_stats(st)
    share = share_of(facts.client_ms, facts.summary) if facts.requests else None
    if share is None:
        return None
    return {"requests": facts.summary.get("requests"), "share": share, "time_share": share,
            "rests_on": ["requests", _stats.STATISTICS]}


def queue_full(st: dict) -> bool:
    """msg_cnt at queue.buffering.max.messages (msg_max): the client's queue
    is full, produce() blocks or fails with QUEUE_FULL."""
    full, cap = st.get("msg_cnt_max"), st.get("msg_max_max")
    return bool(full and cap and full >= FULL_SHARE * cap)


def queue_grew(st: dict) -> tuple[str, int, int] | None:
    """A queue count (msg_cnt, xmit_msgq_cnt) that grew across snapshots
    to at least GREW_TO messages: (its name, first, last)."""
    series = [r for r in st.get("series") or [] if r]
    for name in ("msg_cnt", "xmit_msgq_cnt"):
        got = [r.get(name) for r in series if r.get(name) is not None]
        if len(got) >= 3 and got[-1] >= GREW_TO and got[-1] > 2 * max(got[0], 1) \
                and all(b >= a for a, b in zip(got, got[1:])):
            return name, got[0], got[-1]
    return None


def perf_backlog(st: dict) -> str | None:
    """rdkafka_performance's own columns say the client's queue filled: a
    backlog of undelivered messages (outq) while produce() was refused with
    the queue full (tx_err), or refused for a share of its calls."""
    outq, refused = st.get("perf_outq_max") or 0, st.get("perf_tx_err") or 0
    calls = st.get("perf_produce_calls") or st.get("perf_msgs") or 0
    if refused and outq >= BACKLOG_MSGS:
        return (f"rdkafka_performance: up to {outq} messages not yet delivered (outq) while {refused} produce() "
                f"calls were refused with the queue full (tx_err)")
    if refused and calls and refused >= REFUSED_SHARE * calls:
        return (f"rdkafka_performance: {refused} of {calls} produce() calls ({100 * refused / calls:.1f}%) were "
                f"refused with the queue full (backpressure)")
    return None


def _from_stats(st: dict) -> dict | None:
    queue, rtt = st.get("int_latency_p50_ms"), st.get("rtt_p50_ms") or 0.0
    if queue_full(st) or queue_grew(st) or perf_backlog(st):
        return _stats.judged(st["snapshots"], 1.0 if queue is None else
                             max(0.5, queue / (_stats.message_ms(st) or queue)))
    if queue is None or queue < SLOW_MS or queue <= rtt:
        return None
    return _stats.judged(st["snapshots"], queue / (_stats.message_ms(st) or queue))


def fix(version: tuple[int, ...] | None) -> dict[str, str]:
    return {"linger.ms": "0"}


def linger_default(version: tuple[int, ...] | None) -> str | None:
    return None if version is None else ("5 ms" if version >= LINGER_DEFAULT_5MS_FROM else "0.5 ms")


def evidence(facts) -> list[str]:
    req_ms = facts.summary.get("latency_p50_ms") or 0.0
    return [
        f"messages waited {facts.client_ms:.1f} ms (median) in librdkafka's queue before their request was sent "
        f"(statistics int_latency), while a request took {req_ms} ms",
        "batching (linger.ms, batch.num.messages, batch.size) or the in-flight limit holds them in the client",
    ]


def signal_evidence(facts) -> list[str]:
    st = _stats.of(facts)
    if st is None:
        return evidence(facts)
    rtt = st.get("rtt_p50_ms")
    ev = [] if st.get("int_latency_p50_ms") is None else [
          f"messages waited {st['int_latency_p50_ms']:g} ms (median of the snapshots' int_latency p50, "
          f"p99 {st.get('int_latency_p99_ms') or 0:g} ms) in librdkafka's queue before their request was sent"
          + _stats.moved(st, "int_latency_p50_ms")
          + (f", while a request's round trip took {rtt:g} ms (rtt p50)" if rtt is not None else
             "; no broker's rtt window held a request")]
    if ev and st.get("windows_named_by_position"):
        ev.append(f"{st['windows_named_by_position']} broker window(s) had their key cut off in the paste: named "
                  f"by the key after them in the order librdkafka writes a broker's windows")
    ev += [f"from the {_stats.seen_in(st)}; no completed request was seen, so the split is librdkafka's own",
          "batching (linger.ms, batch.num.messages, batch.size) or the in-flight limit holds them in the client"]
    if perf_backlog(st):
        ev.append(perf_backlog(st) + ": messages arrive faster than they are delivered")
    grew = queue_grew(st)
    if grew:
        ev.append(f"the statistics' {grew[0]} grew from {grew[1]} to {grew[2]} messages across the snapshots: "
                  f"messages arrive faster than they are delivered")
    full, cap = st.get("msg_cnt_max"), st.get("msg_max_max")
    if queue_full(st):
        ev.append(f"the client's queue held {full} messages of at most {cap} (queue.buffering.max.messages): "
                  f"produce() blocks or fails with QUEUE_FULL once it is full")
    return ev


def fix_text(facts) -> str:
    from kdiag.analysis.causes import version_tuple

    default = linger_default(version_tuple(facts.version))
    return ("lower linger.ms (queue.buffering.max.ms) for latency; "
            + (f"librdkafka {facts.version} defaults it to {default}" if default else
               "librdkafka defaults it to 5 ms since v1.5.0"))
