"""The syscall tracer choice: which tracers there are, and the order and
conditions under which ``auto`` takes one.

Each tracer is a collector that declares ``tracing`` (``kdiag.collectors.base.
Tracing``): its rank in ``auto``'s preference, when ``auto`` may take it,
whether it stops the producer's threads, what it captures and what it costs.
Everything here is read from those declarations, so a new tracer is one
collector module (plus its name in ``kdiag.collectors.ORDER`` if its place
among the statuses matters); ``TRACERS``, ``--tracer``, the policy and
docs/tracers.md follow.
"""
from __future__ import annotations

from kdiag import collectors, settings
from kdiag.collectors.base import AUTO_FALLBACK
from kdiag.errors import UsageError

AUTO = "auto"
TRACER_ENV = "KDIAG_TRACER"


def by_rank() -> tuple[type, ...]:
    """Every syscall tracer's collector class, in auto's order of preference."""
    return collectors.tracers()


def names() -> tuple[str, ...]:
    return tuple(c.name for c in by_rank())


# The settings ``--tracer`` and $KDIAG_TRACER take.
TRACERS: tuple[str, ...] = (AUTO, *names())


def auto_policy() -> tuple[tuple[str, str], ...]:
    """auto's preference as data: (tracer, when auto takes it), best first."""
    return tuple((c.name, c.tracing.auto_when) for c in by_rank())


def fallback() -> str:
    """The tracer that runs when auto may take no other, or another fails."""
    found = [name for name, when in auto_policy() if when == AUTO_FALLBACK]
    if len(found) != 1:
        raise TypeError(f"exactly one tracer runs otherwise (auto_when AUTO_FALLBACK), not {found}")
    return found[0]


def threadless() -> tuple[str, ...]:
    """The tracers that stop no thread of the producer, best first."""
    return tuple(c.name for c in by_rank() if not c.tracing.stops_threads)


def find(name: str) -> type:
    return next(c for c in by_rank() if c.name == name)


def setting(asked: str | None) -> str:
    """The tracer setting: ``asked`` (``--tracer``), else $KDIAG_TRACER, else auto."""
    chosen = asked or settings.get(TRACER_ENV)
    if chosen not in TRACERS:
        raise UsageError(f"tracer {chosen!r}: one of {', '.join(TRACERS)}")
    return chosen


def markdown_table() -> str:
    """docs/tracers.md's "Which tracer" table, one row per tracer in auto's order."""
    rows = ["| tracer | auto takes it | stops the producer's threads | captures | cost |",
            "|---|---|---|---|---|"]
    for c in by_rank():
        t = c.tracing
        rows.append(f"| `{c.name}` | {t.auto_when} | {'yes' if t.stops_threads else 'no'} | {t.captures} "
                    f"| {t.cost} |")
    return "\n".join(rows) + "\n"


def hooks_of(status: dict | None, why: str | None = None) -> dict:
    """What a BPF tracer hooked, for the manifest's tracer: the kernel's
    syscall tracepoints, which every process on the host pays for, or
    uprobes in the producer's libc (collectors/bpfcalls.py); why those
    (``why``), why not uprobes where they were chosen, and why the raw
    tracepoints where the per-syscall ones could not be attached
    (``hooks_fallback``). Nothing for the other tracers."""
    status = status or {}
    got = {k: status[k] for k in ("hooks", "uprobes_not_used", "hooks_fallback") if status.get(k)}
    return {**got, "hooks_why": why} if got and why else got
