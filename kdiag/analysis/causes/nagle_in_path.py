"""The Nagle stall with TCP_NODELAY on the client socket: a proxy or TLS
terminator on the path holds the record."""
from __future__ import annotations

from kdiag.analysis.causes import _nagle
from kdiag.analysis.causes._captures import STRACE

NAME = "nagle_in_path"
TAIL = False
COLUMNS = (*_nagle.COLUMNS, "nodelay")
SUMMED = _nagle.SUMMED
EXAMPLE_COLUMNS = ("nodelay", "nodelay_line")
MEETS = {"wait_ms": 43.0, "total_ms": 43.5, "n_writes": 3, "nodelay": True}
COLOUR = "#ff7f0e"
PART = "wait"
# The path RTT its rule weighs the wait against.
ALSO_RESTS_ON = ("path",)
SIGNATURE = (
    "The same stall, but the client socket has TCP_NODELAY (from strace's `setsockopt`, or "
    "sampled live from the socket). Requests that left in one write come back fast. A proxy or "
    "TLS terminator on the path runs Nagle."
    " From a packet capture: the client sends a request's small segments back to back, one while another "
    "is unacknowledged (Nagle never does), and, when the relay's onward side is captured too, that "
    "connection holds them until its peer's ACK."
)
FIX_DOC = "Disable Nagle on the proxy (for socat, `,nodelay`)."


def rule(x):
    from pyspark.sql import functions as F

    return _nagle.held_send(x) & (x.col("nodelay") == F.lit(True))


def fix(version: tuple[int, ...] | None) -> dict[str, str]:
    return {}   # nothing in the client: the proxy holds the record


def evidence(facts) -> list[str]:
    ev = _nagle.evidence(facts)
    ex = facts.example
    if _nagle.from_wire(facts):
        ev.append("the capture shows the client socket sending a request's small segments back to back, one while "
                  "another was unacknowledged, which Nagle never does: TCP_NODELAY is on, and the stall is in a "
                  "proxy or TLS terminator on the path")
        _, relays = _nagle.wire_holders(facts)
        for c in relays[:3]:
            ev.append(f"the capture holds it: the onward connection {c['client']} -> {c['server']} of a relay "
                      f"held {c['nagle_holds']} requests' later segments until its peer's ACK")
        return ev
    where = f"strace line {ex['nodelay_line']}" if ex.get("nodelay_line") else "sampled live from the socket"
    ev.append(f"the client socket has TCP_NODELAY ({where}): "
              "the stall is in a proxy or TLS terminator on the path")
    return ev


def fix_text(facts) -> str:
    return "disable Nagle on the proxy/TLS terminator's sockets (e.g. socat ...,nodelay)"


def likely(thin) -> tuple[int, str, str] | None:
    if not thin.slow or thin.tls or not thin.nagle_band or thin.nagle_ruled_out:
        return None
    return (4, f"rtt {thin.rtt_ms} ms is in the delayed-ACK band, but the brokers are not TLS: librdkafka sends "
            f"a plaintext request in one write, so only a proxy could hold it", STRACE)
