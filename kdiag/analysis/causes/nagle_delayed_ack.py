"""Nagle on the client socket holds a request's last TLS record until the
broker's delayed ACK."""
from __future__ import annotations

from kdiag.analysis.causes import _nagle
from kdiag.analysis.causes._captures import STRACE
from kdiag.analysis.thresholds import DELAYED_ACK_MS

NAME = "nagle_delayed_ack"
TAIL = False
COLUMNS = _nagle.COLUMNS
SUMMED = _nagle.SUMMED
EXAMPLE_COLUMNS = ("connect_us", "connect_line", "peer")
MEETS = {"wait_ms": 43.0, "total_ms": 43.5, "n_writes": 3, "nodelay": False}
COLOUR = "#d62728"
PART = "wait"
# The path RTT its rule weighs the wait against; the sockets' unsent bytes
# its evidence cites.
ALSO_RESTS_ON = ("path", "socket samples")
SIGNATURE = (
    "The request left in several writes (TLS records). The broker thread then waited in `poll()` "
    "for about the delayed-ACK timer (40 ms) plus the path RTT: 30-70 ms beyond the RTT. Linux "
    "delays ACKs about 40 ms; peers that wait longer (BSD and macOS 100 ms, Windows 200 ms) are "
    "not covered. No `setsockopt(TCP_NODELAY)` came before the socket's `connect()`. From a "
    "librdkafka log alone (no syscalls): requests to a TLS broker (`ssl://`, `sasl_ssl://`) whose"
    " rtt is 30-70 ms beyond the path RTT, at confidence low, or medium when a measured path "
    "backs it (from v2.10.0, which sets TCP_NODELAY by default, the evidence says that without "
    "`socket.nagle.disable=false` in the config the stall is a proxy's: `nagle_in_path`)."
    " From a packet capture: a request's later segments leave only after the broker's ACK of the earlier "
    "ones, about 40 ms later."
)
FIX_DOC = "`-X socket.nagle.disable=true`"
# librdkafka made socket.nagle.disable=true its default in v2.10.0; 0.9.3 to
# 0.11.4 ignored the setting altogether.
NAGLE_DEFAULT_FLIPPED = (2, 10, 0)


def rule(x):
    # From a log alone the client socket's TCP_NODELAY is unknown: the
    # client's setting is the likelier one, and its fix is harmless to try
    # (the evidence names nagle_in_path when the version defaults it on).
    return _nagle.held_send(x) | _nagle.rtt_band(x)


def fix(version: tuple[int, ...] | None) -> dict[str, str]:
    # The same on every version: before v2.10.0 Nagle is on by default, from
    # it on a socket with Nagle had socket.nagle.disable=false set.
    return {"socket.nagle.disable": "true"}


def evidence(facts) -> list[str]:
    ev = _nagle.evidence(facts)
    ex, version = facts.example, facts.version
    if ex.get("wait_ms") is None and ex.get("n_writes") is None:
        ev.append(f"librdkafka {version} leaves Nagle on by default (socket.nagle.disable=false before v2.10.0)"
                  if facts.default_nodelay is False else
                  f"librdkafka {version} sets TCP_NODELAY by default: if socket.nagle.disable=false is not set "
                  f"in the producer's config, the stall is in a proxy or TLS terminator (nagle_in_path)"
                  if facts.default_nodelay else
                  "librdkafka's version is unknown: before v2.10.0 it leaves Nagle on by default")
        return ev
    if _nagle.from_wire(facts):
        mine, _ = _nagle.wire_holders(facts)
        for c in mine[:3]:
            ev.append(f"the capture shows the client socket holding a request's later segments until the broker "
                      f"acknowledged the earlier ones, about a delayed ACK later, on {c['nagle_holds']} requests of "
                      f"its connection {c['client']} -> {c['server']}: Nagle, with TCP_NODELAY off")
        return ev
    if ex.get("connect_us") is not None and ex.get("connect_line") is None:
        ev.append(f"TCP_NODELAY was off on fd {ex['fd']} to {ex['peer']}, as sampled live from the "
                  f"socket (getsockopt through pidfd_getfd)")
    elif ex.get("connect_us") is not None:
        ev.append(f"TCP_NODELAY was not set on fd {ex['fd']}: no setsockopt(TCP_NODELAY) "
                  f"before its connect() to {ex['peer']} (strace line {ex['connect_line']})")
    elif facts.default_nodelay is False:
        ev.append(f"TCP_NODELAY not seen (capture started after connect); librdkafka {version} "
                  f"leaves Nagle on by default")
    elif facts.default_nodelay is True:
        ev.append(f"TCP_NODELAY not seen (capture started after connect); librdkafka {version} sets it "
                  f"unless socket.nagle.disable=false was set: if it is set, the stall is in the path "
                  f"(nagle_in_path)")
    else:
        ev.append("TCP_NODELAY not seen (capture started after connect)")
    return ev


def fix_text(facts) -> str:
    return ("set socket.nagle.disable=true (librdkafka's default from v2.10.0); "
            "it sets TCP_NODELAY so the last TLS record of a request is not held "
            "until the broker's delayed ACK")


def likely(thin) -> tuple[int, str, str] | None:
    if not (thin.slow and thin.tls and thin.nagle_band) or thin.nagle_ruled_out:
        return None
    return (12, f"rtt {thin.rtt_ms} ms is the delayed-ACK timer ({DELAYED_ACK_MS:.0f} ms) plus the path, over TLS",
            STRACE)
