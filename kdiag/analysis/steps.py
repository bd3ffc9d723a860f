"""The analysis as data: its steps, which input each one needs, and how a
run's requests are judged given what its input has.

One run (``kdiag.analysis.job``: replay, trace, the warm server) and a
fleet of runs keyed by ``bundle_id`` (``kdiag.fleet.judge``) take the same
steps in the same order and route a run by the same rule (``route``). A step
the fleet does not take says so in ``fleet_instead``; what a fleet run's
findings list in ``fleet_omits`` is that, for the steps its input would have
taken (``fleet_omits``), never a list kept apart.
"""
from __future__ import annotations

from dataclasses import dataclass

from kdiag.parsers.format import CLIENT_QUEUE, PATH, REQUESTS, SIGNALS, SOCKET_SAMPLES, SYSCALLS, THREAD_SAMPLES, WIRE


@dataclass(frozen=True)
class Step:
    name: str
    does: str                 # what it finds, in words
    needs: frozenset          # the analysis inputs (kdiag.parsers.format) any of which it reads
    # None: the fleet takes it too, keyed by run. Else what a fleet run's
    # findings say instead, or, for a route, why the run is left unjudged.
    fleet_instead: str | None = None


def _step(name: str, does: str, needs: tuple, fleet_instead: str | None = None) -> Step:
    return Step(name, does, frozenset(needs), fleet_instead)


LINES = (REQUESTS, SYSCALLS, SIGNALS)
STEPS = (
    _step("copies", "rows that repeat earlier rows dropped", (*LINES, CLIENT_QUEUE)),
    _step("clock_steps", "clock steps found per thread; requests that span one left out", LINES,
          "clock steps are not looked for in a fleet: replay the bundle alone for its input checks"),
    _step("source", "librdkafka's version and where the requests come from", LINES),
    _step("signals", "librdkafka's lines besides Sent/Received: timeouts, retries, batches", (SIGNALS,)),
    _step("connections", "connect(), TCP_NODELAY and the handshake wait per socket", (SYSCALLS, SOCKET_SAMPLES)),
    _step("path", "the path RTT from the best source the run has", (PATH, SYSCALLS, SOCKET_SAMPLES)),
    _step("path_table", "the path to each broker, hop by hop, from the probes", (PATH,),
          "no per-broker path table (the path RTT is there): replay the bundle alone for it"),
    _step("timing", "what the strace's timestamps leave unknown (no -t, no -T), and the confidence it costs",
          (SYSCALLS,)),
    _step("requests", "requests paired, and split by the syscalls where the run has them", (REQUESTS, SYSCALLS)),
    _step("samples", "the socket, thread and host samples' evidence", (SOCKET_SAMPLES, THREAD_SAMPLES)),
    _step("causes", "each Produce request's cause, their shares, each cause's median request", (REQUESTS, SYSCALLS)),
    _step("request_rows", "the request rows for the report's charts and the predictions built on them",
          (REQUESTS, SYSCALLS)),
    _step("likely", "without syscalls, the likely causes ranked with the capture that decides each", LINES),
    _step("wire", "the connections and requests a packet capture shows", (WIRE,),
          "a packet capture's connections and requests are not read in a fleet: replay the bundle alone"),
)

# How a run's requests are judged (``route``), each a step of its own: the
# fleet takes every route but TYPICAL and FROM_WIRE.
SIGNALS_ONLY = _step("signals_only", "no request: judged from librdkafka's other lines and the path", ())
FROM_SYSCALLS = _step("from_syscalls", "a producer that logs nothing: requests inferred from its syscalls", (SYSCALLS,))
FROM_WIRE = _step("from_wire", "neither librdkafka's lines nor syscalls: the requests a packet capture shows", (WIRE,),
                  "a packet capture's requests are not judged in a fleet: replay the bundle alone")
SPLIT = _step("split", "librdkafka's lines under strace, split by the syscalls", (REQUESTS, SYSCALLS))
LOG_ALONE = _step("log_alone", "librdkafka's log alone: a request's time is all there is", (REQUESTS,))
TYPICAL = _step("typical", "a log beside an strace of other requests, split by the strace's typical exchange",
                (REQUESTS, SYSCALLS),
                "a librdkafka log beside an strace without its Sent lines: the fleet does not split such a "
                "log by the strace's typical exchange; replay the bundle alone")
ROUTES = (SIGNALS_ONLY, FROM_SYSCALLS, SPLIT, LOG_ALONE, TYPICAL, FROM_WIRE)


def source_of(log_writes_sends, log_sends, syscalls, logged, wire=lambda: False) -> str | None:
    """Where a run's requests come from: ``strace`` (librdkafka's lines the
    producer wrote under strace), ``log``, ``syscalls``, ``wire`` (a packet
    capture's) or None (nothing to pair). Each argument is a function,
    called only when the rule gets to it (one run's is a Spark job):
    whether librdkafka's lines under strace hold a Sent line, whether its
    log does, whether it has syscall rows, whether it has librdkafka lines
    of any kind, and whether a capture holds an exchange of the producer's."""
    if log_writes_sends():
        return "strace"
    if log_sends():
        return "log"
    if syscalls() and not logged():
        # Only a producer that logs nothing has its requests inferred: a
        # librdkafka log without one Sent line means nothing was sent.
        return "syscalls"
    if wire():
        # Requests librdkafka logged or syscalls showed come first: a
        # capture's are joined to them where both exist.
        return "wire"
    return None


def route(source: str | None, has_syscalls: bool) -> Step:
    """How a run with this source of requests is judged."""
    if source is None:
        return SIGNALS_ONLY
    if source == "syscalls":
        return FROM_SYSCALLS
    if source == "wire":
        return FROM_WIRE
    if source == "strace" and has_syscalls:
        return SPLIT
    if source == "log" and has_syscalls:   # an strace without these requests' lines: see runs
        return TYPICAL
    return LOG_ALONE


def fleet_omits(inputs) -> list[str]:
    """What a fleet run's findings say the fleet left out: the steps the
    single analysis would have taken on a run with these inputs."""
    return [s.fleet_instead for s in STEPS if s.fleet_instead and s.needs & set(inputs)]
