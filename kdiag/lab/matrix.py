"""``kdiag lab matrix``: every lab scenario traced once, one table.

Each row is a full ``kdiag trace`` (lab, probe producer under strace and the
sampler, analysis, bundle) of a scenario built to show one cause; the table
says which cause kdiag found and the request latency it measured. It is how
the cause matrix in the README is made, and a quick check that every rule
still fires on this machine.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Case:
    name: str
    expected: str
    how: str                                   # for the table: what the case sets up
    scenario: str | None = None
    props: dict[str, str] = field(default_factory=dict)
    rate: float | None = None
    messages: int | None = None


CASES: tuple[Case, ...] = (
    Case("nagle-on", "nagle_delayed_ack", "default lab, socket.nagle.disable=false"),
    Case("nagle-off", "healthy", "default lab, socket.nagle.disable=true",
         props={"socket.nagle.disable": "true"}),
    Case("nagle-proxy", "nagle_in_path", "socat TLS terminator without nodelay", scenario="nagle-proxy"),
    Case("slow-broker", "broker_slow", "proxy holds responses 50 ms", scenario="slow-broker"),
    Case("throttled", "throttled", "proxy enforces a produce quota (KIP-219)", scenario="throttled", messages=30),
    Case("client-queueing", "client_queueing", "--rate 20, linger.ms=200",
         props={"linger.ms": "200", "socket.nagle.disable": "true"}, rate=20, messages=40),
    Case("client-cpu", "client_cpu", "cgroup 0.2 core + busy neighbour", scenario="client-cpu", messages=600),
    Case("network-latency", "network_latency", "15 ms each way, namespaces", scenario="network-latency",
         messages=50),
    Case("packet-loss", "packet_loss", "4 % loss each way, namespaces", scenario="packet-loss"),
)


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

    @property
    def ok(self) -> bool:
        return self.error is None and self.found == self.case.expected

    def to_dict(self) -> dict:
        return {"case": self.case.name, "setup": self.case.how, "expected": self.case.expected,
                "found": self.found, "ok": self.ok, "latency_p50_ms": self.p50_ms, "latency_p99_ms": self.p99_ms,
                "msgs_per_s": self.msgs_per_s, "seconds": self.seconds, "bundle": self.bundle, "error": self.error}


def select(names: list[str] | None) -> list[Case]:
    from kdiag.errors import UsageError

    if not names:
        return list(CASES)
    known = {c.name: c for c in CASES}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(f"unknown case {', '.join(unknown)}; known: {', '.join(known)}")
    return [known[n] for n in names]


def run_case(case: Case, out_dir: Path, messages: int | None, log) -> Row:
    from kdiag.capture import trace
    from kdiag.errors import KdiagError

    opts = trace.TraceOptions(props=dict(case.props), scenario=case.scenario, rate=case.rate,
                              messages=messages or case.messages or 100, out=out_dir / f"{case.name}.tar.gz",
                              argv=["kdiag", "lab", "matrix", case.name])
    row = Row(case)
    t0 = time.monotonic()
    try:
        res = trace.run(opts, log=lambda m: log(f"[{case.name}] {m}"))
    except KdiagError as e:
        row.error = str(e)
    else:
        f = res.findings
        s = f.get("summary") or {}
        row.found, row.p50_ms, row.p99_ms = f.get("verdict"), s.get("latency_p50_ms"), s.get("latency_p99_ms")
        row.msgs_per_s = (res.probe or {}).get("msgs_per_s")
        row.bundle = str(res.bundle)
        row.error = res.error.splitlines()[0] if res.error else None
    row.seconds = round(time.monotonic() - t0, 1)
    return row


def table(rows: list[Row]) -> str:
    head = ("CASE", "SETUP", "EXPECTED", "FOUND", "P50(ms)", "P99(ms)", "MSG/S", "OK")
    body = [(r.case.name, r.case.how, r.case.expected, r.found or (f"error: {r.error}" if r.error else "-"),
             _n(r.p50_ms), _n(r.p99_ms), _n(r.msgs_per_s), "yes" if r.ok else "NO") for r in rows]
    widths = [max(len(x[i]) for x in (head, *body)) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in (head, *body)) + "\n"


def _n(v) -> str:
    return "-" if v is None else f"{v:g}"
