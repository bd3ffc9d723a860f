"""TCP's handshake held the connection: SYNs retransmitted (a first
retransmit after 1 s, then 3 s and 7 s) or a connect that timed out
(socket.connection.setup.timeout.ms). Judged over the run from the
connection timeline (kdiag/analysis/life.py): librdkafka's ``Connecting to
...`` line to the next state change, ``Connection setup timed out in state
CONNECT`` lines, and connect() to writable in the syscalls."""
from __future__ import annotations

from kdiag.analysis.causes import _life
from kdiag.analysis.causes._captures import DEBUG_MSG, SAID_BY_LINES
from kdiag.analysis.thresholds import SYN_RETRANSMIT_MS

NAME = "connect_slow"
TAIL = False
COLUMNS = ()
SUMMED = ()
EXAMPLE_COLUMNS = ()
MEETS = None
COLOUR = "#a55194"
PART = None
SIGNATURE = (
    "A broker's TCP connect took long enough to hold a SYN retransmit (about 1 s or more: librdkafka's "
    "`Connecting to` line to its next state change, or connect() to writable in the syscalls), or timed out "
    "(`Connection setup timed out in state CONNECT`). A connect refused at once is `broker_down`."
    " From a packet capture: the SYN sent again before its SYN-ACK."
)
FIX_DOC = (
    "Find what drops the SYNs or their answers (a firewall, a full accept queue, a load balancer); "
    "`socket.connection.setup.timeout.ms` (librdkafka >= 1.7.0, 30 s by default) bounds how long one attempt "
    "may wait before the next address is tried."
)
RUN_MEETS = {"requests": 10, "meta": {"completed_ms": 20.0, "life": {"phases": {"connect": {
    "n": 2, "total_ms": 3004.0, "max_ms": 3003.0,
    "slowest": {"broker": "ssl://10.0.0.5:9093/bootstrap", "line": 9, "end_line": 10}}}}}}
rule = None
SLOW_MS = SYN_RETRANSMIT_MS
# The phase of the connection timeline (life.py) it is named for: what
# `kdiag compare` reads to tell whether a fix shortened it.
PHASE = "connect"
# socket.connection.setup.timeout.ms came in v1.7.0.
SETUP_TIMEOUT_FROM = (1, 7, 0)


def _slow_handshakes(facts) -> list[dict]:
    return _life.of(facts).get("slow_handshakes") or []


def _slow_connect(facts) -> bool:
    p = _life.phase(facts, "connect")
    # Without its "Connecting to" line the state held the lookup too: not
    # this cause's alone.
    return (p.get("max_ms") or 0) >= SYN_RETRANSMIT_MS and not (p.get("slowest") or {}).get("with_resolve")


def from_signals(facts) -> dict | None:
    p = _life.phase(facts, "connect")
    got = _life.judged(facts, p.get("total_ms") or 0.0, p.get("n") or 1, [_life.kind(facts)]) \
        if _slow_connect(facts) else None
    hs = _slow_handshakes(facts)
    if hs:
        spent = sum(h["handshake_ms"] for h in hs)
        if got is None:
            got = _life.judged(facts, spent, len(hs), ["syscalls"])
        else:
            got["rests_on"] = got["rests_on"] + ["syscalls"]
    return got


def retransmits(ms: float) -> str:
    """How many SYN retransmits a handshake this long held: Linux resends
    after 1 s, then doubles (1, 3, 7, 15 s after the first SYN)."""
    k, at = 0, 1000.0
    while ms >= at * 0.9 and k < 8:
        k, at = k + 1, at * 2 + 1000.0
    return (f"about {k} SYN retransmit(s): Linux resends the SYN after 1 s, then after 2 s, 4 s, ... more"
            if k else "a handshake that long held a SYN retransmit")


def fix(version: tuple[int, ...] | None) -> dict[str, str]:
    if version is not None and version < SETUP_TIMEOUT_FROM:
        return {}
    return {"socket.connection.setup.timeout.ms": "10000"}


def evidence(facts) -> list[str]:
    ev = []
    if _slow_connect(facts):
        ev.append(_life.slowest_said(facts, "connect", "the TCP connect"))
    for h in _slow_handshakes(facts)[:3]:
        ev.append(f"connect() to {h.get('peer')} took {h['handshake_ms']:g} ms to become writable (line "
                  f"{h.get('connect_line')}): {retransmits(h['handshake_ms'])}")
    said = _life.first_messages(facts, _life.phase(facts, "connect").get("total_ms") if _slow_connect(facts)
                                else sum(h["handshake_ms"] for h in _slow_handshakes(facts)))
    return ev + ([said] if said else [])


def fix_text(facts) -> str:
    return ("SYNs or their answers are lost on the way to the broker: check firewalls, security groups, the "
            "broker's listen backlog and load balancers; socket.connection.setup.timeout.ms (from librdkafka "
            "1.7.0) bounds how long one attempt waits before the next address is tried")


def likely(thin) -> tuple[int, str, str] | None:
    return (18, SAID_BY_LINES, DEBUG_MSG) if NAME in thin.found else None
