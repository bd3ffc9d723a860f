"""Many Produce requests with few messages each while messages wait in the
partition queue: each request's overhead (a round trip, acks) is paid per
message. Judged over the run from librdkafka's PRODUCE and TOPPAR lines
(signals.py, debug=msg)."""
from __future__ import annotations

from kdiag.analysis.causes import _stats
from kdiag.analysis.causes._captures import DEBUG_MSG, SAID_BY_LINES
from kdiag.analysis.thresholds import SLOW_MS

NAME = "small_batches"
TAIL = False
COLUMNS = ()
SUMMED = ()
EXAMPLE_COLUMNS = ()
MEETS = None
COLOUR = "#843c39"
PART = None
SIGNATURE = (
    "Produce MessageSets carry a median of at most 2 messages while 10 or more wait in a "
    "partition's transmit queue (`debug=msg,queue`: `Produce MessageSet with N message(s)`, `N "
    "message(s) in xmit queue`): every message pays a request's round trip. From the statistics: "
    "the topics' `batchcnt` window at most 2 while messages wait in the client."
)
FIX_DOC = (
    "`-X linger.ms=10`; from v1.6.0 the sticky partitioner (`sticky.partitioning.linger.ms`) "
    "batches keyless messages per partition."
)
RUN_MEETS = {"requests": 50, "meta": {"signals": {
    "batches": 50, "batch_msgs_p50": 1.0, "batch_msgs_max": 2, "queued_msgs_max": 40}}}
rule = None
# A batch this small carries a request's overhead for almost every message.
SMALL_BATCH_MSGS = 2
# Requests seen before small batches are a pattern, not one quiet moment.
MIN_BATCHES = 5
MANY_BATCHES = 100
# Messages waiting in the queue while those batches left: more than a batch
# could have taken.
QUEUED_MIN_MSGS = 10
# v1.6.0 brought the sticky partitioner (sticky.partitioning.linger.ms) for
# keyless messages; before it they were spread over the partitions one by
# one, and each partition's batch stayed small.
STICKY_FROM = (1, 6, 0)


def from_signals(facts) -> dict | None:
    sig = facts.meta.get("signals") or {}
    p50, batches, queued = sig.get("batch_msgs_p50"), sig.get("batches") or 0, sig.get("queued_msgs_max") or 0
    if p50 is None or batches < MIN_BATCHES or p50 > SMALL_BATCH_MSGS or queued < QUEUED_MIN_MSGS:
        return _from_stats(facts)
    return {"requests": batches, "share": 1.0, "time_share": 1.0, "rests_on": ["log lines"]}


def _from_stats(facts) -> dict | None:
    """The statistics' per-topic batch windows (``batchcnt``): many
    requests of few messages each while messages waited in the client."""
    st = _stats.of(facts)
    if st is None or st.get("batch_msgs_p50") is None or st["batch_msgs_p50"] > SMALL_BATCH_MSGS:
        return None
    sent = _stats.counted(st, "tx")[0] or st.get("batch_count") or 0
    waited = max(st.get("msg_cnt_max") or 0, st.get("xmit_msgq_cnt_max") or 0) >= QUEUED_MIN_MSGS or \
        (st.get("int_latency_p50_ms") or 0.0) >= SLOW_MS
    # Only the topics' windows given: hundreds of batches of one message or
    # two each are small batches whatever the queue held.
    alone = not st.get("brokers") and (st.get("batch_count") or 0) >= MANY_BATCHES
    if sent < MIN_BATCHES or not (waited or alone):
        return None
    rtt = st.get("rtt_p50_ms")
    return _stats.judged(sent, rtt / _stats.message_ms(st) if rtt else 0.5)


def signal_evidence(facts) -> list[str]:
    st = _stats.of(facts)
    sig = facts.meta.get("signals") or {}
    if st is None or (sig.get("batches") or 0) >= MIN_BATCHES:
        return evidence(facts)
    queued = max(st.get("msg_cnt_max") or 0, st.get("xmit_msgq_cnt_max") or 0)
    sent = _stats.counted(st, "tx")[0]
    return [f"batches carried {st['batch_msgs_p50']:g} message(s) (median of the topics' batchcnt windows, "
            f"{st.get('batch_bytes_p50')} bytes) over "
            + (f"{sent} requests, while " if sent else f"{st.get('batch_count')} batches; ")
            + (f"up to {queued} messages waited in the client" if queued else
               f"messages waited {st.get('int_latency_p50_ms')} ms in its queue (int_latency p50)"
               if st.get("int_latency_p50_ms") is not None else
               "only the topics' windows were given, so how long messages waited is not known")
            + f" ({_stats.seen_in(st)}): each message pays a request's round trip",
            "larger batches amortise it: linger.ms lets a batch fill; keyless messages spread over many partitions "
            "make each partition's batch small unless the sticky partitioner keeps them on one"]


def fix(version: tuple[int, ...] | None) -> dict[str, str]:
    fix = {"linger.ms": "10"}
    if version is not None and version >= STICKY_FROM:
        fix["sticky.partitioning.linger.ms"] = "20"
    return fix


def evidence(facts) -> list[str]:
    sig = facts.meta.get("signals") or {}
    return [f"{sig['batches']} Produce MessageSets carried {sig['batch_msgs_p50']:.0f} message(s) (median, at most "
            f"{sig['batch_msgs_max']}) while up to {sig['queued_msgs_max']} messages waited in a partition's "
            f"transmit queue: each message pays a request's round trip",
            "larger batches amortise it: linger.ms lets a batch fill; keyless messages spread over many partitions "
            "make each partition's batch small unless the sticky partitioner keeps them on one"]


def fix_text(facts) -> str:
    from kdiag.analysis.causes import version_tuple

    vt = version_tuple(facts.version)
    sticky = ("sticky.partitioning.linger.ms keeps keyless messages on one partition per batch"
              if vt is None or vt >= STICKY_FROM else
              f"librdkafka {facts.version} predates the sticky partitioner (v1.6.0): upgrade, or give "
              f"messages keys that group them")
    return (f"raise linger.ms (and batch.size; batch.num.messages if it was lowered) so requests carry more "
            f"messages; {sticky}")


def likely(thin) -> tuple[int, str, str] | None:
    return (14, SAID_BY_LINES, DEBUG_MSG) if NAME in thin.found else None
