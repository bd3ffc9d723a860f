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
# A backlog in flight: this many requests sent on a connection while a slow
# response was awaited (median), holding at least this many bytes.
IN_FLIGHT_DEPTH = 8
IN_FLIGHT_BYTES = 1_000_000
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
    "above the `rtt` window's. Without statistics, a log's own times: from the application's line handing a "
    "message over (\"Sending message\") to librdkafka's first line taking it (a TOPPAR count, a MessageSet, a "
    "`Sent ProduceRequest`), or, when none follows while other requests are sent, at least that long. "
    "A backlog in flight counts too: 8 or more requests, 1 MB or more, sent on a connection while a slow "
    "response was awaited (by CorrId) make its rtt mostly the wait behind them."
    " From a packet capture: the oldest message of a Produce request waited 10 ms or more (median) from "
    "its CreateTime (the record batch's timestamps) to the request's first byte, longer than the request "
    "took."
)
FIX_DOC = ("`-X linger.ms=0` (librdkafka's default is 5 ms since v1.5.0, 0.5 ms from v1.0.0, 0 in v0.11.x and "
           "1000 ms before v0.11.0).")
RUN_MEETS = {"requests": 100, "client_ms": 40.0, "summary": {"requests": 100, "latency_p50_ms": 2.0}}
rule = None
# queue.buffering.max.ms (linger.ms) defaulted to 1000 ms up to v0.9.5; v0.11.0
# lowered it to 0 (librdkafka#1244), v1.0.0 made it 0.5 ms, and v1.5.0
# raised it to 5 ms (librdkafka#2974).
LINGER_DEFAULTS = (((1, 5, 0), "5 ms"), ((1, 0, 0), "0.5 ms"), ((0, 11, 0), "0 ms"), ((0,), "1000 ms"))


def share_of(client_ms: float | None, summary: dict) -> float | None:
    """Its share of a message's time, when the queue outweighs the request
    itself; else None: not a cause."""
    req_ms = summary.get("latency_p50_ms") or 0.0
    if client_ms is None or client_ms < SLOW_MS or client_ms < req_ms:
        return None
    return client_ms / (client_ms + req_ms)


def from_signals(facts) -> dict | None:
    """Judged from the run's statistics, against its requests; without a
    completed request, against the statistics' rtt window. Without
    statistics, from the log's own times: the application's line handing a
    message over, then librdkafka's first line taking it (``enqueue_wait``)."""
    st = _stats.of(facts)
    if st is not None:
        return _from_stats(st)
    if facts.client_ms is None:
        return _from_wire(facts) or _from_enqueue_lines(facts) or _from_in_flight(facts)
    share = share_of(facts.client_ms, facts.summary) if facts.requests else None
    if share is None:
        return None
    return {"requests": facts.summary.get("requests"), "share": share, "time_share": share,
            "rests_on": ["requests", _stats.STATISTICS]}


def enqueue_wait(facts) -> tuple[float, bool] | None:
    """How long messages waited in the client by the log's lines: the
    median from the application's line to librdkafka's taking them, else
    the shortest bound of the lines never followed by a ProduceRequest
    (True: a lower bound). None without such lines."""
    sig = facts.meta.get("signals") or {}
    if sig.get("enqueue_waits") and sig.get("enqueue_wait_p50_ms") is not None:
        return sig["enqueue_wait_p50_ms"], False
    if sig.get("enqueue_waits_unsent") and sig.get("enqueue_wait_unsent_min_ms") is not None:
        return sig["enqueue_wait_unsent_min_ms"], True
    return None


def backlog_in_flight(facts) -> tuple[float, float, float] | None:
    """(requests sent while a slow response was awaited, a Produce
    request's median bytes, that response's rtt) when the client keeps a
    backlog on a connection: IN_FLIGHT_DEPTH requests or more, holding
    IN_FLIGHT_BYTES or more. The broker answers a connection's requests in
    order, so a request's rtt is then mostly its wait behind the ones
    ahead of it: messages are produced faster than the connection carries."""
    sig = facts.meta.get("signals") or {}
    depth, size, rtt = (sig.get(k) for k in ("in_flight_depth_p50", "produce_bytes_p50", "in_flight_rtt_p50_ms"))
    if not depth or not size or not rtt or depth < IN_FLIGHT_DEPTH or depth * size < IN_FLIGHT_BYTES:
        return None
    return depth, size, rtt


def wire_wait(facts) -> float | None:
    """A packet capture: the median time the oldest message of a Produce
    request waited from its CreateTime to the request's first byte
    (analysis.wire.client_waits)."""
    return (facts.meta.get("wire_waits") or {}).get("first_p50_ms")


def _from_wire(facts) -> dict | None:
    share = share_of(wire_wait(facts), facts.summary) if facts.requests else None
    if share is None:
        return None
    return {"requests": facts.summary.get("requests"), "share": share, "time_share": share,
            "rests_on": ["packets", "requests"]}


def _wire_evidence(facts) -> list[str]:
    w = facts.meta.get("wire_waits") or {}
    return [f"the oldest message of each Produce request waited {w['first_p50_ms']:g} ms (median of {w['n']}) from "
            f"its CreateTime to the request's first byte on the wire, the newest {w['last_p50_ms']:g} ms (record "
            f"batches' timestamps in the packet capture), while a request took "
            f"{facts.summary.get('latency_p50_ms')} ms",
            f"{w['records_p50']:g} messages a request (median): batching (linger.ms, batch.num.messages, batch.size) "
            f"or the in-flight limit holds them in the client"]


def _from_in_flight(facts) -> dict | None:
    got = backlog_in_flight(facts)
    if got is None:
        return None
    # In a steady backlog as many were ahead of it when it was sent.
    share = got[0] / (got[0] + 1)
    return {"requests": (facts.meta.get("signals") or {}).get("in_flight_slow"), "share": share,
            "time_share": share, "rests_on": ["requests"]}


def _from_enqueue_lines(facts) -> dict | None:
    got = enqueue_wait(facts)
    if got is None:
        return None
    if not facts.requests:   # no request to weigh it against: its length alone
        share = 1.0 if got[0] >= SLOW_MS else None
    else:
        share = share_of(got[0], facts.summary)
    if share is None:
        return None
    return {"requests": facts.summary.get("requests"), "share": share, "time_share": share,
            "rests_on": ["log lines"] + (["requests"] if facts.requests else [])}


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


def signal_fix(facts) -> dict[str, str]:
    """A backlog in flight is not fixed by lingering less: its fix is in the
    fix text (fewer bytes a second, or more carried)."""
    return {} if _backlog_only(facts) else {"linger.ms": "0"}


def _backlog_only(facts) -> bool:
    return (facts.client_ms is None and _stats.of(facts) is None and enqueue_wait(facts) is None
            and backlog_in_flight(facts) is not None)


def linger_default(version: tuple[int, ...] | None) -> str | None:
    if version is None:
        return None
    return next(default for since, default in LINGER_DEFAULTS if version >= since)


def evidence(facts) -> list[str]:
    req_ms = facts.summary.get("latency_p50_ms") or 0.0
    return [
        f"messages waited {facts.client_ms:.1f} ms (median) in librdkafka's queue before their request was sent "
        f"(statistics int_latency), while a request took {req_ms} ms",
        "batching (linger.ms, batch.num.messages, batch.size) or the in-flight limit holds them in the client",
    ]


def _enqueue_evidence(facts, wait_ms: float, bound: bool) -> list[str]:
    sig = facts.meta.get("signals") or {}
    req_ms = facts.summary.get("latency_p50_ms")
    ev = [(f"the application's line handing a message to the client was followed by no ProduceRequest for at least "
           f"{wait_ms:g} ms, while the log went on showing other requests sent"
           f" ({sig.get('enqueue_waits_unsent')} such line(s))") if bound else
          (f"messages waited {wait_ms:g} ms (median of {sig.get('enqueue_waits')}) from the application's line "
           f"handing them to the client to librdkafka's first line taking them towards a request")]
    ev.append(f"a Produce request itself took {req_ms} ms (median): the time went before the request was sent"
              if req_ms is not None else
              "no Produce request completed in the log: its own time is unknown")
    ev.append("librdkafka holds a message for queue.buffering.max.ms (linger.ms); before v1.0.0 its broker thread "
              "also slept up to socket.blocking.max.ms before looking at new messages")
    return ev


def _in_flight_evidence(depth: float, size: float, rtt: float) -> list[str]:
    return [f"{depth:g} requests (median) were sent on the connection while a slow Produce response was awaited, "
            f"{size / 1e6:.2f} MB each (the median Produce request): {depth * size / 1e6:.1f} MB in flight",
            f"the broker answers a connection's requests in order, so the response's rtt ({rtt:g} ms) is mostly its "
            f"wait behind the requests ahead of it, not the path's round trip",
            f"messages are produced faster than the connection carries them (about "
            f"{depth * size / rtt / 1e3:.1f} MB/s here): the backlog grows until requests or messages time out"]


def signal_evidence(facts) -> list[str]:
    st = _stats.of(facts)
    if st is None and facts.client_ms is None and wire_wait(facts) is not None:
        return _wire_evidence(facts)
    if st is None:
        got = enqueue_wait(facts) if facts.client_ms is None else None
        if got:
            return _enqueue_evidence(facts, *got)
        backlog = backlog_in_flight(facts) if facts.client_ms is None else None
        return _in_flight_evidence(*backlog) if backlog else evidence(facts)
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

    vt = version_tuple(facts.version)
    if _backlog_only(facts):
        return ("produce fewer bytes a second, or carry more: compression.type=lz4, partitions led by more "
                "brokers; a lower max.in.flight.requests.per.connection keeps the backlog in the client's queue")
    default = linger_default(vt)
    return ("lower linger.ms (queue.buffering.max.ms) for latency; "
            + (f"librdkafka {facts.version} defaults it to {default}" if default else
               "librdkafka defaults it to 5 ms since v1.5.0 (1000 ms before v0.11.0)")
            + ("" if vt is not None and vt >= (1, 0, 0) else
               "; before v1.0.0 set socket.blocking.max.ms=1 too, or the broker thread sleeps before sending"))
