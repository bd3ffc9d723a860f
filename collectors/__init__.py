"""Collectors: one per source, each writing its raw capture under raw/<raw_dir>/.

Each collector module declares one ``Collector`` subclass (``base.py``): its
name, folder, requirements, the trace modes it serves and how it starts and
stops. The registry is every module of this package, found by scanning it;
``ORDER`` fixes the order of those whose order shows (statuses in the
manifest, inputs to the analysis), the rest follow by name. Modules whose
name starts with ``_`` are a collector's helpers, ``base`` is what they
share. A collector whose requirements are not met is skipped with the
reason, and the trace goes on.
"""
from __future__ import annotations

import functools
import importlib
import pkgutil

NOT_COLLECTORS = frozenset({"base"})
ORDER = ("rdkafka_log", "strace", "bpftrace", "bpfcalls", "stats", "probe_output", "tcp_probe", "sockets")


def module_names() -> list[str]:
    """The collector modules in this package, in registry order."""
    found = {m.name for m in pkgutil.iter_modules(__path__)
             if not m.name.startswith("_") and m.name not in NOT_COLLECTORS}
    return [n for n in ORDER if n in found] + sorted(found - set(ORDER))


def declared_in(module) -> list[type]:
    """The Collector subclasses a module defines itself (not imports)."""
    from kdiag.collectors.base import Collector

    return [v for v in vars(module).values()
            if isinstance(v, type) and issubclass(v, Collector) and v is not Collector
            and v.__module__ == module.__name__]


@functools.cache
def registry() -> tuple[type, ...]:
    """Every collector class, one per module, in registry order."""
    out = []
    for name in module_names():
        module = importlib.import_module(f"{__name__}.{name}")
        classes = declared_in(module)
        if len(classes) != 1:
            raise TypeError(f"{module.__name__} declares {len(classes)} collectors, not one")
        out.append(classes[0])
    return tuple(out)


def tracers() -> tuple[type, ...]:
    """The syscall tracers (collectors that declare ``tracing``), in
    ``auto``'s order of preference."""
    return tuple(sorted((c for c in registry() if c.tracing is not None), key=lambda c: c.tracing.rank))


def for_mode(mode: str) -> list[type]:
    """The collectors that serve trace mode ``mode``, in registry order."""
    return [c for c in registry() if mode in c.modes]


def for_capture(capture) -> list:
    """One collector of each kind that serves ``capture``'s mode. One whose
    requirements are unmet is skipped, with the reason in its status and the
    log; which syscall tracer runs is the tracer policy's call."""
    active = []
    for cls in for_mode(capture.mode):
        c = cls(capture)
        if not c.syscall_tracer:
            reason = c.skip_if_unmet()
            if reason:
                capture.log(f"{c.name} skipped: {reason}")
        active.append(c)
    return active


def make_raw_dirs(raw, collectors) -> None:
    for folder in dict.fromkeys(c.raw_dir for c in collectors):
        (raw / folder).mkdir(parents=True)
