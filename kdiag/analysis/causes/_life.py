"""What the connection-life causes share: a phase of the connection
timeline (kdiag/analysis/life.py) that held the messages, judged over the
run from ``meta["life"]``.

A message produced while its broker's connection is being set up waits
for all of it; a message produced later waits for none of it. The phase's
time is set against the time the completed Produce requests took: a 2 s
lookup before 100 requests of 1 ms is most of what those messages waited,
while the same lookup in an hour of traffic is not."""
from __future__ import annotations

from kdiag.analysis.causes import LOG_LINES, PACKETS


def of(facts) -> dict:
    return facts.meta.get("life") or {}


def from_wire(facts) -> bool:
    """The timeline was read off a packet capture (analysis.wire.life), not
    librdkafka's lines: its phases have times, not line numbers."""
    return of(facts).get("source") == "wire"


def kind(facts) -> str:
    """What a finding of the timeline rests on."""
    return PACKETS if from_wire(facts) else LOG_LINES


def phase(facts, name: str) -> dict:
    return (of(facts).get("phases") or {}).get(name) or {}


def judged(facts, stalled_ms: float, k: int, rests_on: list[str]) -> dict | None:
    """A finding's shares from the time a phase held (``stalled_ms``) over
    ``k`` instances."""
    if k <= 0:
        return None
    completed_ms = facts.meta.get("completed_ms") or 0.0
    share = 1.0 if not facts.requests else stalled_ms / (stalled_ms + completed_ms) if stalled_ms else 0.0
    return {"requests": k, "share": round(min(1.0, share), 3), "time_share": round(min(1.0, share), 3),
            "rests_on": rests_on}


def slow_phase(facts, name: str, threshold_ms: float) -> dict | None:
    """A phase of the log's timeline that took ``threshold_ms`` or more, as a
    finding's shares: its slowest instance and the time all its instances
    held."""
    p = phase(facts, name)
    if (p.get("max_ms") or 0) < threshold_ms:
        return None
    return judged(facts, p.get("total_ms") or 0.0, p.get("n") or 1, [kind(facts)])


def slowest_said(facts, name: str, what: str) -> str:
    """The sentence of a phase's slowest instance, with the lines it spans."""
    p = phase(facts, name)
    s = p.get("slowest") or {}
    lines = ("in the packet capture" if from_wire(facts) else
             f"lines {s['line']}-{s['end_line']}" if s.get("end_line") else f"line {s.get('line')}")
    n = p.get("n") or 1
    said = f"{what} took {p.get('max_ms'):g} ms to {s.get('broker') or 'a broker'} ({lines})"
    if n > 1:
        said += f"; the {n} of them took {p.get('total_ms'):g} ms in all"
    if s.get("error"):
        said += f", and it ended in \"{s['error']}\""
    return said


def first_messages(facts, saved_ms: float | None, waiting_for: str = "the connection was being set up") -> str | None:
    """The predicted effect of a fix that takes a connection phase out."""
    if not saved_ms:
        return None
    return (f"predicted: messages produced while {waiting_for} would be delivered about {saved_ms:g} ms sooner; "
            "messages produced once it was there are not affected")

