"""The TLS handshake held the connection: from ``Broker changed state
CONNECT -> SSL_HANDSHAKE`` to the next state change, 500 ms or more. A
handshake is two round trips and the peers' work (the certificate chain,
its checks, the key exchange); a TLS terminator or broker that is slow to
send its first flight shows here. Judged over the run from the connection
timeline (kdiag/analysis/life.py)."""
from __future__ import annotations

from kdiag.analysis.causes import _life
from kdiag.analysis.causes._captures import DEBUG_MSG, SAID_BY_LINES

NAME = "tls_handshake_slow"
TAIL = False
COLUMNS = ()
SUMMED = ()
EXAMPLE_COLUMNS = ()
MEETS = None
COLOUR = "#5254a3"
PART = None
SLOW_MS = 500.0
SIGNATURE = (
    "A broker's TLS handshake took 500 ms or more: librdkafka's `CONNECT -> SSL_HANDSHAKE` state change to "
    "its next one (`SSL_HANDSHAKE -> APIVERSION_QUERY`, or `-> AUTH_*`/`UP`)."
    " From a packet capture: ClientHello to the client's first application data."
)
FIX_DOC = (
    "Look at the TLS endpoint: the broker's or terminator's CPU, its certificate chain and revocation checks, "
    "the round trips to it. No client setting makes the server's first flight come sooner."
)
RUN_MEETS = {"requests": 10, "meta": {"completed_ms": 20.0, "life": {"phases": {"tls": {
    "n": 2, "total_ms": 3010.0, "max_ms": 1508.0,
    "slowest": {"broker": "ssl://10.0.0.5:9093/bootstrap", "line": 11, "end_line": 16}}}}}}
rule = None
# The phase of the connection timeline (life.py) it is named for: what
# `kdiag compare` reads to tell whether a fix shortened it.
PHASE = "tls"


def from_signals(facts) -> dict | None:
    return _life.slow_phase(facts, "tls", SLOW_MS)


def fix(version: tuple[int, ...] | None) -> dict[str, str]:
    return {}   # the server's side


def evidence(facts) -> list[str]:
    said = _life.first_messages(facts, _life.phase(facts, "tls").get("total_ms"))
    return [_life.slowest_said(facts, "tls", "the TLS handshake")] + ([said] if said else [])


def fix_text(facts) -> str:
    return ("the TLS endpoint (broker or terminator) is slow to answer the handshake: check its CPU, its "
            "certificate chain and revocation checks, and the round trips to it")


def likely(thin) -> tuple[int, str, str] | None:
    return (18, SAID_BY_LINES, DEBUG_MSG) if NAME in thin.found else None
