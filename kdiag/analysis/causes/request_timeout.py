"""Requests timed out in flight: the broker did not answer within
request.timeout.ms, and librdkafka disconnected. Judged over the run from
librdkafka's REQTMOUT and FAIL lines (signals.py), not per completed
request: an excerpt may hold no completed request at all."""
from __future__ import annotations

from kdiag.analysis.causes import _stats
from kdiag.analysis.causes._captures import DEBUG_MSG, SAID_BY_LINES
from kdiag.analysis.thresholds import SLOW_MS

NAME = "request_timeout"
TAIL = True
COLUMNS = ()
SUMMED = ()
EXAMPLE_COLUMNS = ()
MEETS = None
COLOUR = "#393b79"
PART = None
SIGNATURE = (
    "librdkafka timed requests out in flight (`REQTMOUT`: `Timed out ProduceRequest in flight "
    "(after N ms ...)`, `Timed out N in-flight, ...`) and disconnected (`FAIL`: `N request(s) "
    "timed out: disconnect (average rtt ...)`). Judged from those lines, so an excerpt of them "
    "alone is enough. Without those lines, the statistics' `req_timeouts` counter (growing "
    "across snapshots, or above 0) names it."
)
FIX_DOC = (
    "Look at the broker and the path; raising `request.timeout.ms` hides the stall (30 s by "
    "default since v1.5.2, 5 s before)."
)
# An excerpt in which nothing completed: the timeouts alone.
RUN_MEETS = {"requests": 0, "meta": {"signals": {
    "timed_out": 3, "timeout_after_ms": 5000.0, "disconnects": 1, "fail_avg_rtt_ms": 2.0,
    "fail_detail": "3 request(s) timed out: disconnect"}}}
rule = None
# librdkafka raised request.timeout.ms from 5 s to 30 s in v1.5.2.
TIMEOUT_30S_FROM = (1, 5, 2)


def timeout_default_ms(version: tuple[int, ...] | None) -> int | None:
    return None if version is None else (30000 if version >= TIMEOUT_30S_FROM else 5000)


def from_signals(facts) -> dict | None:
    """Its requests and shares: each timed-out request cost its timeout.
    From librdkafka's lines, else from the statistics' req_timeouts."""
    sig, completed, completed_ms = facts.meta.get("signals") or {}, facts.requests, facts.meta.get("completed_ms") or 0.0
    k = sig.get("timed_out") or 0
    if not k and messages_timed_out(sig):
        # Delivery failed with "Local: Message timed out": message.timeout.ms
        # ran out while the messages waited for a request to complete.
        k = sig.get("errors") or 1
        return {"requests": k, "share": 1.0 if not completed else min(1.0, k / completed),
                "time_share": 1.0 if not completed else min(1.0, k / completed), "rests_on": ["error lines"]}
    if not k and (sig.get("delivery_timeouts") or 0) > 1 and not sig.get("errors"):
        # The application's delivery reports say it; one alone is a
        # message that waited, not yet a pattern.
        d = sig["delivery_timeouts"]
        share = 1.0 if not completed else min(1.0, d / completed)
        return {"requests": d, "share": share, "time_share": share, "rests_on": ["error lines"]}
    if not k:
        return _from_stats(facts)
    spent = k * (sig.get("timeout_after_ms") or 0.0)
    return {"requests": k, "share": k / (k + completed),
            "time_share": spent / (spent + completed_ms) if spent else 1.0, "rests_on": ["error lines"]}


def messages_timed_out(sig: dict) -> bool:
    """The Produce errors in librdkafka's lines are message timeouts."""
    names = [str(e).lower() for e in sig.get("error_names") or []]
    return bool(names) and all("timed out" in e for e in names)


def _from_stats(facts) -> dict | None:
    from kdiag.analysis.causes import version_tuple

    st = _stats.of(facts)
    k = _stats.counted(st, "req_timeouts")[0] if st is not None else 0
    if not k:
        return None
    # The shorter default when the version is unknown: the least it cost.
    spent = k * (timeout_default_ms(version_tuple(facts.version)) or 5000)
    sent = _stats.counted(st, "tx")[0] or k
    completed_ms = max(sent - k, 0) * (_stats.message_ms(st) or 1.0)
    return _stats.judged(k, k / max(sent, k), spent / (spent + completed_ms))


def signal_evidence(facts) -> list[str]:
    sig = facts.meta.get("signals") or {}
    if sig.get("timed_out"):
        return evidence(facts)
    if messages_timed_out(sig):
        names = ", ".join(f'"{e}"' for e in sig.get("error_names") or [])
        return [f"{sig.get('errors')} Produce error line(s) say messages timed out ({names}): message.timeout.ms "
                f"ran out while they waited for a request to complete",
                "the broker or the path stalled, or no leader was reachable; librdkafka's log with "
                "debug=broker,protocol shows which requests were in flight"]
    if sig.get("delivery_timeouts") and not sig.get("errors"):
        return [f"{sig['delivery_timeouts']} delivery report(s) or exception(s) in the application's lines say "
                f"\"Local: Message timed out\": message.timeout.ms ran out while messages waited to be delivered",
                "the broker or the path stalled, or no leader was reachable; librdkafka's log with "
                "debug=broker,protocol shows which requests were in flight"]
    from kdiag.analysis.causes import version_tuple

    st = _stats.of(facts) or {}
    k, grew = _stats.counted(st, "req_timeouts")
    sent = _stats.counted(st, "tx")[0]
    default = timeout_default_ms(version_tuple(facts.version))
    return [f"{k} request(s) timed out (statistics req_timeouts, "
            + ("grew over the snapshots given" if grew else "since the client started, before the first snapshot "
               "given" if st.get("snapshots", 0) > 1 else "since the client started")
            + (f"; {sent} requests sent" if sent else "") + f"; {_stats.seen_in(st)})",
            "each waited request.timeout.ms"
            + (f" ({default} ms by default in librdkafka {facts.version})" if default else
               " (30 s by default since v1.5.2, 5 s before)")
            + " for a response that did not come: the broker or the path stalled",
            "no completed request was seen: librdkafka's log (debug=broker,protocol) would show which requests "
            "timed out and the disconnects"]


def fix(version: tuple[int, ...] | None) -> dict[str, str]:
    return {}   # nothing in the client makes a broker answer


def evidence(facts) -> list[str]:
    sig = facts.meta.get("signals") or {}
    after = sig.get("timeout_after_ms")
    ev = [f"{sig['timed_out']} request(s) timed out in flight"
          + (f" after {after:.0f} ms (median; a request's timeout is socket.timeout.ms, or what is left of "
             f"message.timeout.ms)" if after else "")
          + ": librdkafka logged REQTMOUT and gave up on them"]
    if sig.get("disconnects"):
        rtt = sig.get("fail_avg_rtt_ms")
        ev.append(f"librdkafka then disconnected ({sig['disconnects']} FAIL line(s): "
                  f"\"{sig.get('fail_detail') or 'request(s) timed out: disconnect'}\")"
                  + (f"; the average rtt it states before that is {rtt:.1f} ms: "
                     + ("the broker was answering slowly before it stopped answering" if rtt > SLOW_MS else
                        "the broker answered fast, then not at all: a stall (a paused or overloaded broker, "
                        "a path that dropped the connection), not a slow broker")
                     if rtt else ""))
    if facts.requests:
        ev.append(f"{facts.requests} other Produce request(s) completed in the capture")
    else:
        ev.append("no Produce request completed in the excerpt: every request in it was still waiting")
    return ev


def fix_text(facts) -> str:
    from kdiag.analysis.causes import version_tuple

    default = timeout_default_ms(version_tuple(facts.version))
    return ("look at the broker (request handling, disk, replication: acks=all waits for the ISR) and at the "
            "path: raising request.timeout.ms only hides the stall"
            + (f" (librdkafka {facts.version} defaults it to {default} ms)" if default else
               " (30 s by default since v1.5.2, 5 s before)"))


def likely(thin) -> tuple[int, str, str] | None:
    return (18, SAID_BY_LINES, DEBUG_MSG) if NAME in thin.found else None
