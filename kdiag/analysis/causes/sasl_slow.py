"""SASL authentication held the connection: librdkafka's AUTH states
(``AUTH_HANDSHAKE``, ``AUTH_REQ``, ``AUTH_LEGACY``, ``REAUTH``) lasted 500 ms
or more: a SaslHandshake and SaslAuthenticate round trip each, plus the
mechanism's own work (a Kerberos ticket from the KDC, an OAUTHBEARER token
from its endpoint, SCRAM's iterations). Judged over the run from the
connection timeline (kdiag/analysis/life.py)."""
from __future__ import annotations

from kdiag.analysis.causes import _life
from kdiag.analysis.causes._captures import DEBUG_MSG, SAID_BY_LINES

NAME = "sasl_slow"
TAIL = False
COLUMNS = ()
SUMMED = ()
EXAMPLE_COLUMNS = ()
MEETS = None
COLOUR = "#8c6d31"
PART = None
SLOW_MS = 500.0
SIGNATURE = (
    "A broker's SASL authentication took 500 ms or more: librdkafka's `AUTH_HANDSHAKE`, `AUTH_REQ`, "
    "`AUTH_LEGACY` or `REAUTH` state until its next state change."
)
FIX_DOC = (
    "Look at what the mechanism waits for: the KDC (GSSAPI), the token endpoint (OAUTHBEARER), the broker's "
    "authenticator; `sasl.kerberos.min.time.before.relogin` and a token refreshed ahead of time keep that work "
    "off the connection."
)
RUN_MEETS = {"requests": 10, "meta": {"completed_ms": 20.0, "life": {"phases": {"sasl": {
    "n": 1, "total_ms": 900.0, "max_ms": 900.0,
    "slowest": {"broker": "sasl_ssl://10.0.0.5:9093/1", "line": 20, "end_line": 24}}}}}}
rule = None
# The phase of the connection timeline (life.py) it is named for: what
# `kdiag compare` reads to tell whether a fix shortened it.
PHASE = "sasl"


def from_signals(facts) -> dict | None:
    return _life.slow_phase(facts, "sasl", SLOW_MS)


def fix(version: tuple[int, ...] | None) -> dict[str, str]:
    return {}


def evidence(facts) -> list[str]:
    said = _life.first_messages(facts, _life.phase(facts, "sasl").get("total_ms"))
    return [_life.slowest_said(facts, "sasl", "SASL authentication")] + ([said] if said else [])


def fix_text(facts) -> str:
    return ("authentication is slow: check what the SASL mechanism waits for (the KDC for GSSAPI, the token "
            "endpoint for OAUTHBEARER, the broker's authenticator)")


def likely(thin) -> tuple[int, str, str] | None:
    return (18, SAID_BY_LINES, DEBUG_MSG) if NAME in thin.found else None
