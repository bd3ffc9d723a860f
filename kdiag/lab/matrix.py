"""``kdiag lab matrix``: every lab scenario traced once, one table.

Each row is a full ``kdiag trace`` (lab, probe producer under its tracer
(bpfcalls where it runs, else strace; ``KDIAG_TRACER`` picks) and the
sampler, analysis, bundle) of a scenario built to show one cause; the table
says which cause kdiag found and the request latency it measured. It checks
the expected causes of docs/lab.md's scenario table on this machine, and
that every rule still fires here.
"""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from pathlib import Path

from kdiag.lab import scenarios


@dataclass(frozen=True)
class Case:
    """One row of the matrix: a scenario of the registry."""

    scenario: scenarios.Scenario

    @property
    def name(self) -> str:
        return self.scenario.name

    @property
    def expected(self) -> str:
        return self.scenario.cause

    @property
    def how(self) -> str:
        """For the table: what the case sets up."""
        return self.scenario.setup

    @property
    def messages(self) -> int:
        return self.scenario.matrix_messages or self.scenario.messages


def cases() -> tuple[Case, ...]:
    """Every scenario of the registry, in its order."""
    return tuple(Case(sc) for sc in scenarios.all_scenarios())


@dataclass
class Row:
    case: Case
    found: str | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    msgs_per_s: float | None = None
    seconds: float | None = None
    bundle: str | None = None
    error: str | None = None
    tracer: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.found == self.case.expected

    def to_dict(self) -> dict:
        return {"case": self.case.name, "setup": self.case.how, "expected": self.case.expected,
                "found": self.found, "ok": self.ok, "latency_p50_ms": self.p50_ms, "latency_p99_ms": self.p99_ms,
                "msgs_per_s": self.msgs_per_s, "seconds": self.seconds, "tracer": self.tracer, "bundle": self.bundle,
                "error": self.error}


def select(names: list[str] | None) -> list[Case]:
    from kdiag.errors import UsageError

    if not names:
        return list(cases())
    known = {c.name: c for c in cases()}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(f"unknown case {', '.join(unknown)}; known: {', '.join(known)}")
    return [known[n] for n in names]


def run_case(case: Case, out_dir: Path, messages: int | None, log) -> Row:
    from kdiag.capture import trace
    from kdiag.errors import KdiagError

    # The scenario's own producer properties come with its lab's config.
    opts = trace.TraceOptions(lab=functools.partial(scenarios.running, case.name), rate=case.scenario.rate,
                              messages=messages or case.messages, out=out_dir / f"{case.name}.tar.gz",
                              argv=["kdiag", "lab", "matrix", case.name])
    row = Row(case)
    say = lambda m: log(f"[{case.name}] {m}")  # noqa: E731
    t0 = time.monotonic()
    try:
        if case.scenario.client is not None:
            from kdiag.capture import lab_client

            res = lab_client.run(case.scenario, opts.out, opts.messages, opts.argv, log=say)
        else:
            res = trace.run(opts, log=say)
    except KdiagError as e:
        row.error = str(e)
    else:
        f = res.findings
        s = f.get("summary") or {}
        row.found, row.p50_ms, row.p99_ms = f.get("verdict"), s.get("latency_p50_ms"), s.get("latency_p99_ms")
        row.msgs_per_s = (res.probe or {}).get("msgs_per_s")
        row.bundle, row.tracer = str(res.bundle), res.tracer
        row.error = res.error.splitlines()[0] if res.error else None
    row.seconds = round(time.monotonic() - t0, 1)
    return row


def table(rows: list[Row]) -> str:
    head = ("CASE", "SETUP", "EXPECTED", "FOUND", "P50(ms)", "P99(ms)", "MSG/S", "TRACER", "OK")
    body = [(r.case.name, r.case.how, r.case.expected, r.found or (f"error: {r.error}" if r.error else "-"),
             _n(r.p50_ms), _n(r.p99_ms), _n(r.msgs_per_s), r.tracer or "-", "yes" if r.ok else "NO") for r in rows]
    widths = [max(len(x[i]) for x in (head, *body)) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in (head, *body)) + "\n"


def _n(v) -> str:
    return "-" if v is None else f"{v:g}"
