"""Name resolution held the connection: librdkafka resolves a broker's name
with a blocking getaddrinfo() on the broker's thread each time it connects
(after broker.address.ttl, 1 s, the answer is asked again), and messages for
that broker wait for it. Judged over the run from the connection timeline
(kdiag/analysis/life.py): the time from ``Broker changed state TRY_CONNECT ->
CONNECT`` to ``Connecting to ...``, ``Failed to resolve`` lines, and the
resolver's own queries and answers in the syscalls (a socket connect()ed to
port 53 until its close)."""
from __future__ import annotations

from kdiag.analysis.causes import _life
from kdiag.analysis.causes._captures import DEBUG_MSG, SAID_BY_LINES

NAME = "dns_slow"
TAIL = False
COLUMNS = ()
SUMMED = ()
EXAMPLE_COLUMNS = ()
MEETS = None
COLOUR = "#7b4173"
PART = None
# A lookup this long is a resolver that timed out and retried (glibc's
# first timeout is resolv.conf's "timeout", 5 s by default) or one that is
# far or overloaded; a healthy one answers in milliseconds.
SLOW_MS = 1000.0
SIGNATURE = (
    "A broker's name took 1 s or more to resolve (librdkafka's `TRY_CONNECT -> CONNECT` state change to its "
    "`Connecting to` line, or the resolver's queries and answers on port 53 in the syscalls), or resolution "
    "failed (`Failed to resolve '...'`) and was tried again. Messages for that broker wait for it."
    " From a packet capture: the query on port 53 answered 1 s or more after it, followed by the SYN."
)
FIX_DOC = (
    "Fix the resolver the client's host uses (`/etc/resolv.conf`: a nameserver that answers, its `timeout` "
    "and `attempts`); keep resolved addresses longer with `broker.address.ttl`; `broker.address.family=v4` "
    "spares a resolver that is slow to answer AAAA queries."
)
RUN_MEETS = {"requests": 10, "meta": {"completed_ms": 20.0, "life": {"phases": {"resolve": {
    "n": 2, "total_ms": 4012.0, "max_ms": 2007.0,
    "slowest": {"broker": "ssl://broker.example:9093/bootstrap", "line": 8, "end_line": 9}}}}}}
rule = None
# The phase of the connection timeline (life.py) it is named for: what
# `kdiag compare` reads to tell whether a fix shortened it.
PHASE = "resolve"


def _exchanges(facts) -> list[dict]:
    return [d for d in _life.of(facts).get("dns") or [] if (d.get("ms") or 0) >= SLOW_MS]


def from_signals(facts) -> dict | None:
    life = _life.of(facts)
    got = _life.slow_phase(facts, "resolve", SLOW_MS)
    slow_dns = _exchanges(facts)
    failures = life.get("resolve_failures") or 0
    if got is None and slow_dns:
        got = _life.judged(facts, sum(d["ms"] for d in slow_dns), len(slow_dns), ["syscalls"])
    if got is None and failures:
        # Failed and tried again: every retry waits reconnect.backoff.ms
        # and the lookup again; with no Produce request completed it is
        # all the excerpt shows.
        got = _life.judged(facts, life.get("down_ms") or 0.0, failures, ["error lines"])
    if got is not None and slow_dns and "syscalls" not in got["rests_on"]:
        got["rests_on"] = got["rests_on"] + ["syscalls"]
    return got


def fix(version: tuple[int, ...] | None) -> dict[str, str]:
    return {"broker.address.ttl": "300000"}


def evidence(facts) -> list[str]:
    life = _life.of(facts)
    ev = []
    if (_life.phase(facts, "resolve").get("max_ms") or 0) >= SLOW_MS:
        ev.append(_life.slowest_said(facts, "resolve", "name resolution"))
    slow_dns = _exchanges(facts)
    if slow_dns:
        d = max(slow_dns, key=lambda x: x["ms"])
        ev.append(f"the resolver at {d.get('server')} took {d['ms']:g} ms to answer a lookup (strace line "
                  f"{d.get('line')}: connect() to port 53 until its close); {len(slow_dns)} lookup(s) of 1 s or more")
    if life.get("resolve_failures"):
        again = ", and librdkafka tried again after reconnect.backoff.ms" if life["resolve_failures"] > 1 or \
            (life.get("attempts") or 0) > life["resolve_failures"] else ""
        ev.append(f"{life['resolve_failures']} connection attempt(s) failed to resolve the broker's name{again}")
    said = _life.first_messages(facts, _life.phase(facts, "resolve").get("total_ms")
                                or sum(d["ms"] for d in slow_dns) or None)
    return ev + ([said] if said else [])


def fix_text(facts) -> str:
    return ("the client's resolver is slow or failing: check the nameservers in /etc/resolv.conf and their "
            "timeout and attempts; broker.address.ttl=300000 keeps resolved addresses 5 min instead of 1 s, "
            "and broker.address.family=v4 spares AAAA lookups")


def likely(thin) -> tuple[int, str, str] | None:
    return (18, SAID_BY_LINES, DEBUG_MSG) if NAME in thin.found else None
