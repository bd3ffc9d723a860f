"""The client could not reach a broker, or lost it: connection refused,
transport failures, failed handshakes. Judged over the run from
librdkafka's FAIL lines (signals.py), not per request: an
excerpt of such lines holds no completed request, and while a partition's
leader is unreachable its messages wait in the client."""
from __future__ import annotations

from kdiag.analysis.causes import _life
from kdiag.analysis.causes._captures import DEBUG_MSG, SAID_BY_LINES

NAME = "broker_down"
TAIL = False
COLUMNS = ()
SUMMED = ()
EXAMPLE_COLUMNS = ()
MEETS = None
COLOUR = "#ad494a"
PART = None
SIGNATURE = (
    "librdkafka could not reach a broker or lost its connection (`FAIL` lines other than "
    "`N request(s) timed out: disconnect`: `Connect to ... failed: Connection refused`, "
    "`Failed to resolve`, `SSL handshake failed`, SASL failures, `N/N brokers are down`, a connection "
    "`Disconnected` within about a second of coming UP, `queued but broker not up`). A disconnect after a "
    "long time UP (`Receive failed: Disconnected`, `Connection closed`) is an idle connection the broker "
    "closed (connections.max.idle.ms) and is not counted. The application's copy of such an error counts as its "
    "line does; one that says only `Local: Broker transport failure` or `Local: All broker connections are "
    "down` counts when no Produce request completed and no idle disconnect is in the input. Judged from those "
    "lines, so an excerpt of them alone is enough."
    " From a packet capture: SYNs answered by a reset, or not at all, on the port the producer's "
    "connections use."
)
FIX_DOC = (
    "Bring the broker back or fix the route to it (listeners, `advertised.listeners`, "
    "firewalls, TLS/SASL settings); no client setting makes an unreachable broker answer."
)
# An excerpt of connection failures and nothing completed.
RUN_MEETS = {"requests": 0, "meta": {"signals": {
    "down_lines": 4, "down_detail": "Connect to ipv4#192.0.2.10:9092 failed: Connection refused"}}}
rule = None
# What `kdiag compare` reads: the time the client could not reach a broker
# (life.py's down_ms), with no threshold: any is the broker's.
PHASE = "down"
SLOW_MS = 0.0


def from_signals(facts) -> dict | None:
    sig = facts.meta.get("signals") or {}
    k = sig.get("down_lines") or 0
    life = facts.meta.get("life") or {}
    if _life.from_wire(facts):
        # A capture: each refused or unanswered connection is a failed attempt.
        k = life.get("failed") or 0
    if life.get("attempts") and not life.get("failed"):
        # "queued but broker not up" is printed by every producer while its
        # first connection comes up: beside connection attempts none of
        # which failed, it is that start, not a broker down.
        k -= sig.get("down_not_up_lines") or 0
    failed = life.get("failed") or 0
    if failed and failed <= (life.get("resolve_failures") or 0) + (life.get("slow_connect_failures") or 0):
        # Every failed attempt is a name that did not resolve or a connect
        # that waited out its SYNs: dns_slow's and connect_slow's, no broker
        # that refused the client.
        return None
    if k <= 0:
        return None
    # Beside completed requests, a reconnect costs only the requests it
    # held; with none completed, it is all the excerpt shows, unless
    # requests timed out in flight: the broker was reached and stalled,
    # and the failures to reconnect follow from that.
    share = (0.5 if sig.get("timed_out") else 1.0) if not facts.requests else k / (k + facts.requests)
    # The time the client could not reach the broker (life.py), against
    # what the completed requests took: messages produced meanwhile waited
    # through every failed attempt and reconnect.backoff.ms between them.
    down_ms = (facts.meta.get("life") or {}).get("down_ms") or 0.0
    if facts.requests and down_ms:
        share = max(share, down_ms / (down_ms + (facts.meta.get("completed_ms") or 0.0)))
    return {"requests": k, "share": round(share, 3), "time_share": round(share, 3),
            "rests_on": [_life.kind(facts) if _life.from_wire(facts) else "error lines"]}


def fix(version: tuple[int, ...] | None) -> dict[str, str]:
    return {}   # the broker's, or the path's


def evidence(facts) -> list[str]:
    sig = facts.meta.get("signals") or {}
    life = facts.meta.get("life") or {}
    k = (sig.get("down_lines") or 0) - ((sig.get("down_not_up_lines") or 0)
                                        if life.get("attempts") and not life.get("failed") else 0)
    ev = [f"{k} line(s) say librdkafka could not reach a broker or lost it"
          + (f": \"{sig['down_detail']}\"" if sig.get("down_detail") else "")]
    if life.get("down_ms"):
        backoffs = life.get("backoffs_ms") or []
        waits = (f"; librdkafka waited {', '.join(f'{b:g}' for b in backoffs[:8])} ms between attempts "
                 "(reconnect.backoff.ms, doubling with jitter up to reconnect.backoff.max.ms)") if backoffs else ""
        ev.append(f"the client could not reach the broker for {life['down_ms']:g} ms over {life.get('failed')} "
                  f"failed connection attempt(s){waits}")
    if facts.requests:
        ev.append(f"{facts.requests} Produce request(s) completed in the capture besides")
    else:
        ev.append("no Produce request completed in the excerpt: messages wait in the client until a leader "
                  "is reachable, then time out (message.timeout.ms)")
    return ev


def fix_text(facts) -> str:
    detail = str((facts.meta.get("signals") or {}).get("down_detail") or "").lower()
    why = ("nothing listens where the client connects: check the broker is up and that advertised.listeners "
           "names an address and port the client can reach" if "refused" in detail else
           "check the broker's health and the route to it (firewalls, load balancers that drop idle "
           "connections, TLS or SASL settings that fail the handshake)")
    return why


def likely(thin) -> tuple[int, str, str] | None:
    return (17, SAID_BY_LINES, DEBUG_MSG) if NAME in thin.found else None
