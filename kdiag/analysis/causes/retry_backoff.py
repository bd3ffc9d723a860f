"""Errors and the retries they cause add the latency: each retry waits
retry.backoff.ms before the request is sent again. Judged over the run from
librdkafka's Retrying, MSGSET and REQERR lines (signals.py)."""
from __future__ import annotations

from kdiag.analysis.causes import _stats
from kdiag.analysis.causes._captures import DEBUG_MSG, SAID_BY_LINES
from kdiag.analysis.causes.request_timeout import messages_timed_out

NAME = "retry_backoff"
TAIL = True
COLUMNS = ()
SUMMED = ()
EXAMPLE_COLUMNS = ()
MEETS = None
COLOUR = "#637939"
PART = None
SIGNATURE = (
    "Produce requests were retried (`Retrying ProduceRequest ...`) after errors in the responses "
    "(`MessageSet with N message(s) ... encountered error: ...`, `ProduceRequest failed: ...`). "
    "Each retry waits `retry.backoff.ms` (exponential up to `retry.backoff.max.ms` from v2.3.0). "
    "Without those lines, the statistics' `txretries` counter names it."
)
FIX_DOC = (
    "Find the error's cause (a moving leader, quotas); from v2.3.0 `-X retry.backoff.ms=20` "
    "shortens the first wait."
)
RUN_MEETS = {"requests": 20, "meta": {"completed_ms": 200.0, "signals": {
    "retries": 4, "errors": 4, "error_names": ["Broker: Not leader for partition"]}}}
rule = None
# v2.3.0 made the backoff exponential, from retry.backoff.ms (100 ms) up to
# retry.backoff.max.ms (1000 ms); before it, each retry waited
# retry.backoff.ms.
EXPONENTIAL_FROM = (2, 3, 0)
BACKOFF_MS = 100.0


def from_signals(facts) -> dict | None:
    sig, completed, completed_ms = facts.meta.get("signals") or {}, facts.requests, facts.meta.get("completed_ms") or 0.0
    k = sig.get("retries") or 0
    errors = sig.get("errors") or 0
    if not k and not errors:
        return _from_stats(facts)
    if not k and messages_timed_out(sig):   # request_timeout's: nothing was retried
        return None
    spent = max(k, errors) * BACKOFF_MS
    n = max(k, errors)
    return {"requests": n, "share": min(1.0, n / max(completed, 1)),
            "time_share": spent / (spent + completed_ms) if spent else 0.0, "rests_on": ["error lines"]}


def _from_stats(facts) -> dict | None:
    """The statistics' txretries: each retry waited the backoff at least."""
    st = _stats.of(facts)
    k = _stats.counted(st, "txretries")[0] if st is not None else 0
    if not k:
        return None
    spent = k * BACKOFF_MS
    sent = _stats.counted(st, "tx")[0] or k
    completed_ms = sent * (_stats.message_ms(st) or 1.0)
    return _stats.judged(k, k / max(sent, k), spent / (spent + completed_ms))


def signal_evidence(facts) -> list[str]:
    sig = facts.meta.get("signals") or {}
    if sig.get("retries") or sig.get("errors"):
        return evidence(facts)
    st = _stats.of(facts) or {}
    k, grew = _stats.counted(st, "txretries")
    sent = _stats.counted(st, "tx")[0]
    return [f"{k} request(s) were retried (statistics txretries, "
            + ("grew over the snapshots given" if grew else "since the client started")
            + (f", of {sent} sent" if sent else "") + f"; {_stats.seen_in(st)}): each retry waits retry.backoff.ms "
            f"({BACKOFF_MS:.0f} ms by default) before it is sent again",
            "the statistics do not say which errors caused them: librdkafka's log (debug=msg,protocol) would"]


def fix(version: tuple[int, ...] | None) -> dict[str, str]:
    # Shorter waits between retries help only once the error is understood;
    # the first backoff is what every retried request pays.
    return {"retry.backoff.ms": "20"} if version is not None and version >= EXPONENTIAL_FROM else {}


def evidence(facts) -> list[str]:
    sig = facts.meta.get("signals") or {}
    ev = []
    if sig.get("retries"):
        ev.append(f"{sig['retries']} Produce request(s) were retried (Retrying lines): each retry waits "
                  f"retry.backoff.ms ({BACKOFF_MS:.0f} ms by default) before it is sent again")
    if sig.get("errors"):
        names = ", ".join(f'"{e}"' for e in sig.get("error_names") or [])
        ev.append(f"{sig['errors']} error(s) in the responses: {names}")
    return ev


def fix_text(facts) -> str:
    from kdiag.analysis.causes import version_tuple

    vt = version_tuple(facts.version)
    names = " ".join(facts.meta.get("signals", {}).get("error_names") or [])
    why = ("the leader moved: librdkafka refreshes metadata and retries; frequent leader changes are the "
           "cluster's" if "leader" in names.lower() else
           "the broker throttles this client (quotas)" if "throttl" in names.lower() else
           "find what the errors are from")
    backoff = ("since v2.3.0 the backoff grows exponentially up to retry.backoff.max.ms (1000 ms)"
               if vt is not None and vt >= EXPONENTIAL_FROM else "each retry waits retry.backoff.ms")
    return f"{why}; {backoff}"


def likely(thin) -> tuple[int, str, str] | None:
    return (16, SAID_BY_LINES, DEBUG_MSG) if NAME in thin.found else None
