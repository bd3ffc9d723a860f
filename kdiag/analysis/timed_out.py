"""Where a timed-out message's life went: for every message that failed
with "Local: Message timed out" (message.timeout.ms ran out), whether it
was queued for a connection, queued for metadata or a leader, in flight
unanswered, or queued while its broker was up (behind requests in flight
or retries); which broker, and which cause.

librdkafka says which queue each expired message was in, at debug ``msg``
(rdkafka_broker.c ``rd_kafka_broker_toppar_msgq_scan()``, on the
partition's broker thread)::

    TIMEOUT ... mytopic [3]: timed out 0+5 message(s) (MsgId 10..14): message.timeout.ms exceeded

(the transmit queue's count, then the partition queue's: neither is in a
request yet), and for messages that never had a partition because the
topic's metadata did not come (rdkafka_topic.c, the UA partition's scan)::

    TIMEOUT ... mytopic: 5 message(s) timed out

Messages in a request that timed out are failed by that request: its
``MSGSET`` line ends ``encountered error: Local: Message timed out`` after
a ``REQTMOUT`` line. The broker's state at the time (life.py's attempts)
tells a queue that waited for a connection from one that waited behind a
connected broker. Applications' delivery reports count what none of these
lines places.
"""
from __future__ import annotations

import bisect
import re

from kdiag.analysis.spark_plumbing import RUN

# "%s [%d]: timed out %d+%d message(s) (MsgId ...)" and the UA scan's
# "%s: %d message(s) timed out".
_QUEUED = re.compile(r"^(?P<topic>\S+) \[(?P<partition>-?\d{1,10})\]: timed out (?P<x>\d{1,9})\+(?P<q>\d{1,9}) "
                     r"message\(s\)")
_UNASSIGNED = re.compile(r"^(?P<topic>\S+): (?P<n>\d{1,9}) message\(s\) timed out")
TIMED_OUT = "(?i)Message timed out"
KINDS = ("queued for a connection", "queued for metadata or a leader", "in flight unanswered",
         "queued while the broker was up", "queued, the broker's state not in the log", "where unknown")
MAX_LINES = 100_000


def rows_of(events) -> list[dict]:
    """The lines that place expired messages, and the delivery reports that
    count them, collected (few: one a partition a scan)."""
    from pyspark.sql import functions as F

    cols = [c for c in (RUN, "line_no", "ts_us", "client", "broker", "facility", "event", "request", "text",
                        "error", "msgs", "topic", "partition", "repeat") if c in events.columns]
    ev = F.col("event")
    err = F.coalesce(F.col("error"), F.lit("")) if "error" in events.columns else F.lit("")
    fac = F.col("facility") if "facility" in events.columns else F.lit(None).cast("string")
    wanted = ((fac == "TIMEOUT") | ((ev == "msgset") & err.rlike(TIMED_OUT))
              | ((ev == "timeout") & (F.col("request") == "Produce")) | ((ev == "retry") & (F.col("request") == "Produce"))
              | ((ev == "app_error") & err.rlike(TIMED_OUT)))
    got = events.filter(wanted).select(*cols).limit(MAX_LINES).collect()
    return [r.asDict() for r in got]


def where(rows: list[dict], attempts: list[dict], life_causes: dict | None = None) -> dict | None:
    """One line per kind: its messages, brokers and cause. ``attempts``:
    life.walk's, to tell whether a broker was up when its messages
    expired; ``life_causes``: the cause each broker's failed attempts were
    named (``cause_of_failures``). None when no message timed out."""
    kinds: dict = {}
    placed = 0
    up_at = _up_spans(attempts)
    timed_out_requests = sum(1 for r in rows if r.get("event") == "timeout")
    retried = {(r.get("broker")) for r in rows if r.get("event") == "retry"}
    for r in rows:
        rep = r.get("repeat") or 1
        text = r.get("text") or ""
        if r.get("facility") == "TIMEOUT":
            m, u = _QUEUED.search(text), _UNASSIGNED.search(text)
            if m:
                n = (int(m.group("x")) + int(m.group("q"))) * rep
                kind, cause = _queued(r, up_at, life_causes or {}, r.get("broker") in retried)
                _add(kinds, kind, n, r, cause)
                placed += n
            elif u:
                n = int(u.group("n")) * rep
                # No partition yet: no metadata came, because no broker was
                # up to give it, or because the topic or leader was missing.
                if _none_up(r, up_at):
                    failed = list((life_causes or {}).values())
                    _add(kinds, "queued for a connection", n, r,
                         max(set(failed), key=failed.count) if failed else "broker_down")
                else:
                    _add(kinds, "queued for metadata or a leader", n, r, "metadata_wait")
                placed += n
        elif r.get("event") == "msgset":
            n = (r.get("msgs") or 1) * rep
            _add(kinds, "in flight unanswered", n, r, "request_timeout" if timed_out_requests else None)
            placed += n
    reported = sum((r.get("repeat") or 1) for r in rows if r.get("event") == "app_error")
    if reported > placed:
        _add(kinds, "where unknown", reported - placed, {}, None)
    if not kinds:
        return None
    out = []
    for kind in KINDS:
        k = kinds.get(kind)
        if k:
            out.append({"kind": kind, "messages": k["messages"], "brokers": sorted(k["brokers"])[:5],
                        "cause": max(k["causes"], key=k["causes"].get) if k["causes"] else None,
                        "line": k["line"]})
    return {"kinds": out, "messages": sum(k["messages"] for k in out), "delivery_reports": reported,
            "timed_out_requests": timed_out_requests}


def _add(kinds: dict, kind: str, n: int, r: dict, cause: str | None) -> None:
    k = kinds.setdefault(kind, {"messages": 0, "brokers": set(), "causes": {}, "line": r.get("line_no")})
    k["messages"] += n
    if r.get("broker"):
        k["brokers"].add(r["broker"])
    if cause:
        k["causes"][cause] = k["causes"].get(cause, 0) + n


def _up_spans(attempts: list[dict]) -> dict:
    """broker -> sorted [(from_us, state)]: when each handle came UP or
    failed."""
    spans: dict = {}
    for a in attempts:
        if a.get("start_us") is None:
            continue
        s = spans.setdefault(a.get("broker"), [])
        s.append((a["start_us"], "down"))
        if a.get("up_us") is not None:
            s.append((a["up_us"], "up"))
    return {b: sorted(v) for b, v in spans.items()}


def _none_up(r: dict, up_at: dict) -> bool:
    """Connection attempts were seen and no broker was up at this line."""
    if not up_at or r.get("ts_us") is None:
        return False
    for marks in up_at.values():
        i = bisect.bisect_right(marks, (r["ts_us"], "~")) - 1
        if i >= 0 and marks[i][1] == "up":
            return False
    return True


def _queued(r: dict, up_at: dict, causes: dict, retried: bool) -> tuple[str, str | None]:
    """A partition's queued messages expired: for a connection when their
    broker was not up then, else behind a connected broker."""
    marks = up_at.get(r.get("broker"))
    if not marks or r.get("ts_us") is None:
        return "queued, the broker's state not in the log", None
    i = bisect.bisect_right(marks, (r["ts_us"], "~")) - 1
    if i < 0 or marks[i][1] != "up":
        return "queued for a connection", causes.get(r.get("broker")) or "broker_down"
    return "queued while the broker was up", "retry_backoff" if retried else None

