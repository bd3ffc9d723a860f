"""The likely causes, ranked, when the evidence is thin (no syscalls): each
with what supports it and the one capture that would decide it. Read from
the findings' summary and the run's signals on the driver: the verdict is
the Spark job's; this only says how sure it can be, and what to capture
next. Each cause ranks itself (its ``likely`` hook)."""
from __future__ import annotations

from kdiag.analysis import causes
from kdiag.analysis.causes import ThinEvidence


def thin_evidence(result: dict) -> ThinEvidence:
    s = result.get("summary") or {}
    return ThinEvidence(
        rtt_ms=s.get("rtt_p50_ms") or s.get("latency_p50_ms"),
        path_rtt_ms=s.get("path_rtt_ms"),
        tls=any(str(b).startswith(("ssl://", "sasl_ssl://")) for b in s.get("brokers") or []),
        found=frozenset(f["cause"] for f in result.get("findings") or []),
        signals=result.get("signals") or {},
        client_queue_ms=(s.get("split_ms") or {}).get("client_queue"),
        nagle_ruled_out=bool(s.get("nagle_ruled_out")))


def rank(result: dict) -> list[dict]:
    """Likely causes, most likely first (the registry's order among equal
    scores): {cause, support, decide}."""
    thin = thin_evidence(result)
    scored = []
    for cause in causes.CAUSES:
        hook = getattr(cause, "likely", None)
        got = hook(thin) if hook is not None else None
        if got is not None:
            score, support, decide = got
            scored.append((score, {"cause": cause.NAME, "support": support, "decide": decide}))
    scored.sort(key=lambda x: -x[0])
    return [item for _, item in scored]
