"""What a lab scenario needs from the lab, as data: the parts of a loopback
lab (``Loopback``) or the link of the network lab (``NetworkPath``).

A scenario module declares one as its ``LAB``; the loopback lab
(``kdiag.lab.broker``) and the network lab (``kdiag.lab.network``) take the
declaration and start what it says. Neither knows a scenario's name, so a
new scenario that combines parts the labs already have needs no edit there.
This module imports nothing of the lab: the labs and the scenario registry
both build on it.
"""
from __future__ import annotations

from dataclasses import dataclass

TERMINATORS = ("stunnel4", "socat")
# The process kdiag.lab.slowproxy names itself; the one proxy the lab has.
SLOWPROXY = "kdiag-slowproxy"
# The process kdiag.lab.relay names itself: the relay in front of the terminator.
RELAY = "kdiag-relay"
# The longest fault a declaration may ask for.
MAX_MS = 3_600_000


@dataclass(frozen=True)
class Loopback:
    """Tansu and a TLS terminator on loopback, and what sits between them.

    With ``response_delay_ms`` or ``quota_bytes_per_s`` set, the proxy
    (kdiag.lab.slowproxy) runs between the terminator and Tansu: it holds
    every response that long, or enforces that produce quota as a Kafka
    broker does. ``nodelay`` applies to socat (stunnel4 always sets
    TCP_NODELAY); ``cpu_limit_cores`` puts the probe and a busy neighbour in
    a cgroup of that size.

    The connection faults begin when the lab hands its target to a run
    (``kdiag.lab.broker.handed_over``), not while the lab starts. With
    ``first_flight_delay_ms`` or ``outage_ms`` set, the relay
    (kdiag.lab.relay) runs in front of the terminator and Tansu advertises
    its port, so every client connection crosses it: it holds the server's
    first TLS flight on each connection that long, or refuses connections
    (nothing listens) for that long. With ``topic_delay_ms`` the run's topic
    does not exist when the run starts and is created that long after.

    With ``plaintext`` Tansu advertises its own port and clients speak
    plaintext Kafka to it: the requests' headers are then in what a tracer
    sees a producer write. The terminator still runs, unused, so that the
    lab starts and is checked one way."""

    variant: str = "tls"                     # its name in the lab's state file and the manifest
    terminator: str = "stunnel4"             # one of TERMINATORS
    nodelay: bool = False                    # socat sets TCP_NODELAY on its hop to the broker (",nodelay")
    response_delay_ms: float | None = None   # the proxy holds every response this long
    quota_bytes_per_s: float | None = None   # the proxy enforces this produce quota (KIP-219)
    cpu_limit_cores: float | None = None     # the probe and a busy neighbour in a cgroup this size
    first_flight_delay_ms: float | None = None  # the relay holds the server's first TLS flight this long
    outage_ms: float | None = None           # nothing listens on the client's port this long
    topic_delay_ms: float | None = None      # the run's topic is created this long after the run starts
    plaintext: bool = False                  # clients reach Tansu's own port, in plaintext

    @property
    def proxy(self) -> str | None:
        """The process between the terminator and Tansu, if any."""
        return SLOWPROXY if self.response_delay_ms is not None or self.quota_bytes_per_s is not None else None

    @property
    def relay(self) -> str | None:
        """The process in front of the terminator, if any."""
        return RELAY if self.first_flight_delay_ms is not None or self.outage_ms is not None else None

    def problem(self) -> str | None:
        """What makes this declaration one the lab cannot start, or None."""
        if self.terminator not in TERMINATORS:
            return f"terminator {self.terminator!r} is not one of {', '.join(TERMINATORS)}"
        if self.nodelay and self.terminator != "socat":
            return "nodelay applies to socat (stunnel4 always sets TCP_NODELAY)"
        if self.response_delay_ms is not None and not 0 <= self.response_delay_ms < MAX_MS:
            return f"response_delay_ms out of range: {self.response_delay_ms!r}"
        if self.quota_bytes_per_s is not None and not 0 < self.quota_bytes_per_s <= 1e12:
            return f"quota_bytes_per_s out of range: {self.quota_bytes_per_s!r}"
        if self.cpu_limit_cores is not None and not 0 < self.cpu_limit_cores:
            return f"cpu_limit_cores out of range: {self.cpu_limit_cores!r}"
        if self.plaintext and (self.proxy or self.relay):
            return "plaintext has no proxy or relay: they stand on the TLS path"
        for name in ("first_flight_delay_ms", "outage_ms", "topic_delay_ms"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and 0 < value < MAX_MS):
                return f"{name} out of range: {value!r}"
        return None


@dataclass(frozen=True)
class NetworkPath:
    """Client, delay line, router and broker in network namespaces
    (``kdiag.lab.network``): the link the delay line makes, and what stands
    in the way of a new connection.

    With ``dns_delay_ms`` set, the client reaches the broker by a host name
    that a resolver in the router namespace (kdiag.lab.resolver) answers
    that long after each query. ``syn_drops`` is how many of the run's
    first SYNs to the broker's TLS port nftables drops, so that connect()
    waits for the client's SYN retransmits."""

    delay_ms: float      # one way, both directions
    loss_pct: float      # per frame, each direction
    jitter_ms: float = 0.0
    description: str = ""
    dns_delay_ms: float | None = None   # the resolver answers each query this late; None: no name, no resolver
    syn_drops: int = 0                  # the first SYNs of the run to the TLS port that are dropped
