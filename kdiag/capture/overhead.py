"""What tracing cost the producer, for the manifest (key ``overhead``).

Measured when kdiag attached to a running producer: its counters for about a
second before attaching against the same counters while traced.
``/proc/PID/io`` ``syscr + syscw`` counts the producer's read- and
write-family calls (read, write, their v/p forms; not sendmsg/recvmsg,
poll or futex). A producer at full speed over TLS spends them on its broker
socket, one write per TLS record, so their rate follows its throughput; at a
rate limited by something else (a producer stalled by Nagle) the ratio says
the tracer did not slow it, which is also what happened.

Estimated when there was no untraced moment to compare with (a command
kdiag started, the probe): the busiest thread's traced calls a second times
what one costs it under the tracer that ran (its ``tracing.call_us``:
``PTRACE_STOP_US`` under strace, two ptrace stops; far less under a BPF
tracer, which stops nothing). ``throughput_pct`` = 100 / (1 + rate x cost): the thread's calls
take that much longer, and it was the bottleneck. Without ``--seccomp-bpf``
(strace -p) every call stops the thread, not only the printed ones, so the
printed calls are a lower bound and the estimate says so.

Every field is always present, None when unknown.
"""
from __future__ import annotations

import os
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from kdiag.capture import tracers
from kdiag.collectors.base import AUTO_ANY_RATE, PTRACE_STOP_US

# ``auto`` takes bpftrace when strace's estimated cost to the producer is at
# least this share of a core: below it strace's fuller view costs little.
AUTO_BPF_SHARE = 0.05
BASELINE_S = 1.0


@dataclass
class Counters:
    """A process's counters at one moment, summed over its threads."""
    t: float                    # time.monotonic()
    io_calls: int | None        # syscr + syscw
    cpu_s: float | None         # utime + stime
    ctx: int | None             # voluntary + involuntary context switches


@dataclass
class Rates:
    seconds: float
    io_calls_per_s: float | None
    cpu_cores: float | None
    ctx_per_s: float | None

    def calls_per_s(self) -> float:
        """Its read and write calls a second, or its context switches when
        higher: a lower bound of its calls."""
        return max(self.io_calls_per_s or 0.0, self.ctx_per_s or 0.0)


@dataclass
class Overhead:
    tool: str | None                        # "strace", "strace --seccomp-bpf", "bpftrace"; None: nothing traced
    method: str                             # "measured: ...", "estimated: ...", "unknown: ..."
    throughput_pct: float | None            # traced / untraced, percent
    untraced_io_calls_per_s: float | None
    traced_io_calls_per_s: float | None
    untraced_cpu_cores: float | None        # the producer's own CPU
    traced_cpu_cores: float | None
    tracer_cpu_cores: float | None          # the tracer's CPU while tracing
    tracer_setup_cpu_s: float | None        # before it traced (bpftrace compiling its probes)
    traced_calls_per_s: float | None        # lines in the capture a second, busiest thread
    cost_per_call_us: float | None
    window_s: float | None

    def to_dict(self) -> dict:
        return asdict(self)


def unknown(tool: str | None, why: str) -> Overhead:
    return Overhead(tool, f"unknown: {why}", *([None] * 10))


# --- reading counters -----------------------------------------------------------

def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def parse_io(text: str | None) -> int | None:
    """``/proc/PID/io``: ``syscr: 123`` and ``syscw: 45`` lines."""
    if not text:
        return None
    got = dict(re.findall(r"^(syscr|syscw):\s*(\d+)", text, re.M))
    return int(got["syscr"]) + int(got["syscw"]) if len(got) == 2 else None


def parse_stat_cpu(text: str | None, ticks: int) -> float | None:
    """``/proc/PID/stat``: utime and stime, fields 14 and 15 (after the
    ``(comm)``, which may hold spaces)."""
    if not text:
        return None
    fields = text.rpartition(")")[2].split()
    try:
        return (int(fields[11]) + int(fields[12])) / ticks
    except (IndexError, ValueError):
        return None


def parse_ctx(text: str | None) -> int | None:
    """``/proc/PID/task/TID/status``: voluntary_ctxt_switches and
    nonvoluntary_ctxt_switches."""
    if not text:
        return None
    vals = re.findall(r"^(?:voluntary|nonvoluntary)_ctxt_switches:\s*(\d+)", text, re.M)
    return sum(int(v) for v in vals) if vals else None


def read_counters(pid: int) -> Counters | None:
    t = time.monotonic()
    io = parse_io(_read(f"/proc/{pid}/io"))
    cpu = parse_stat_cpu(_read(f"/proc/{pid}/stat"), os.sysconf("SC_CLK_TCK"))
    if io is None and cpu is None:
        return None
    ctx = None
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        tids = []
    for tid in tids:
        c = parse_ctx(_read(f"/proc/{pid}/task/{tid}/status"))
        if c is not None:
            ctx = (ctx or 0) + c
    return Counters(t, io, cpu, ctx)


def cpu_s(pids: list[int]) -> float | None:
    """CPU seconds used so far by these processes, summed; None when one
    cannot be read."""
    total = 0.0
    for pid in pids:
        c = parse_stat_cpu(_read(f"/proc/{pid}/stat"), os.sysconf("SC_CLK_TCK"))
        if c is None:
            return None
        total += c
    return total


def rates(a: Counters | None, b: Counters | None) -> Rates | None:
    if a is None or b is None or b.t <= a.t:
        return None
    dt = b.t - a.t

    def per_s(x, y):
        return None if x is None or y is None else (y - x) / dt
    return Rates(round(dt, 3), per_s(a.io_calls, b.io_calls), per_s(a.cpu_s, b.cpu_s), per_s(a.ctx, b.ctx))


def baseline(pid: int, seconds: float = BASELINE_S) -> Rates | None:
    """The producer's rates over ``seconds``, untraced."""
    a = read_counters(pid)
    time.sleep(seconds)
    return rates(a, read_counters(pid))


# --- the figures --------------------------------------------------------------------

def _r(x: float | None, nd: int = 1) -> float | None:
    return None if x is None else round(x, nd)


def measured(tool: str, before: Rates | None, during: Rates | None, tracer_cpu_s: float | None = None,
             setup_cpu_s: float | None = None, calls_per_s: float | None = None,
             cost_us: float | None = None) -> Overhead:
    """Before/during: the producer's read+write calls a second untraced and
    traced, and its CPU; the tracer's own CPU over the traced window."""
    if before is None or during is None or not before.io_calls_per_s or during.io_calls_per_s is None:
        why = "the producer's /proc counters could not be read before and while traced"
        if before is not None and before.io_calls_per_s == 0:
            why = "the producer made no read/write calls in the second before kdiag attached"
        est = estimated(tool, calls_per_s, during.seconds if during else None, cost_us, tracer_cpu_s, setup_cpu_s)
        est.method = f"{est.method} ({why})"
        return est
    pct = 100.0 * during.io_calls_per_s / before.io_calls_per_s
    return Overhead(
        tool=tool,
        method=(f"measured: the producer's read+write calls a second (/proc/PID/io syscr+syscw) while traced "
                f"({during.seconds:g} s) against the {before.seconds:g} s before kdiag attached; they follow its "
                f"throughput when it runs at full speed, and stay level when something else limits it"),
        throughput_pct=_r(pct),
        untraced_io_calls_per_s=_r(before.io_calls_per_s),
        traced_io_calls_per_s=_r(during.io_calls_per_s),
        untraced_cpu_cores=_r(before.cpu_cores, 3),
        traced_cpu_cores=_r(during.cpu_cores, 3),
        tracer_cpu_cores=_r(None if tracer_cpu_s is None or not during.seconds else tracer_cpu_s / during.seconds, 3),
        tracer_setup_cpu_s=_r(setup_cpu_s, 2),
        traced_calls_per_s=_r(calls_per_s),
        cost_per_call_us=cost_us,
        window_s=during.seconds,
    )


def estimated(tool: str, calls_per_s: float | None, window_s: float | None, cost_us: float | None,
              tracer_cpu_s: float | None = None, setup_cpu_s: float | None = None,
              lower_bound: bool = False) -> Overhead:
    """The busiest thread's traced calls a second times the cost of one."""
    pct = None
    if calls_per_s is not None and cost_us is not None:
        pct = 100.0 / (1.0 + calls_per_s * cost_us / 1e6)
    how = (f"estimated: the busiest thread's traced calls a second in the capture x {cost_us} us a call under "
           f"{tool}; throughput = 100 / (1 + rate x cost)")
    if lower_bound:
        how += ("; strace -p stops the thread on every call, printed or not, so the real cost is higher "
                "than this")
    return Overhead(
        tool=tool,
        method=how,
        throughput_pct=_r(pct),
        untraced_io_calls_per_s=None,
        traced_io_calls_per_s=None,
        untraced_cpu_cores=None,
        traced_cpu_cores=None,
        tracer_cpu_cores=_r(None if tracer_cpu_s is None or not window_s else tracer_cpu_s / window_s, 3),
        tracer_setup_cpu_s=_r(setup_cpu_s, 2),
        traced_calls_per_s=_r(calls_per_s),
        cost_per_call_us=cost_us,
        window_s=_r(window_s, 3),
    )


# "12345  1795315014.558913 write(" / "[pid 12345] ...": the pid prefix of
# strace -f output; lines without one (no -f) count for one thread.
_PID = re.compile(rb"^(?:\[pid +)?(\d+)[\] ]", re.M)


def busiest_thread_lines(path: Path, chunk: int = 1 << 24) -> tuple[int, int]:
    """(lines, lines of the thread with the most) in an strace capture."""
    counts: dict[bytes, int] = {}
    lines = 0
    rest = b""
    try:
        with open(path, "rb") as f:
            while True:
                data = f.read(chunk)
                if not data:
                    break
                data = rest + data
                cut = data.rfind(b"\n") + 1
                body, rest = data[:cut], data[cut:]
                lines += body.count(b"\n")
                for pid in _PID.findall(body):
                    counts[pid] = counts.get(pid, 0) + 1
    except OSError:
        return 0, 0
    if rest:
        lines += 1
    return lines, max(counts.values(), default=lines)


def for_capture(tool: str, capture: Path, started_us: int | None, ended_us: int | None,
                cost_us: float | None, tracer_cpu_s: float | None = None, setup_cpu_s: float | None = None,
                lower_bound: bool = False) -> Overhead:
    """The estimate from a capture: its busiest thread's lines a second."""
    if started_us is None or ended_us is None or ended_us <= started_us:
        return unknown(tool, "no tracing window")
    _, top = busiest_thread_lines(capture)
    window = (ended_us - started_us) / 1e6
    return estimated(tool, top / window, window, cost_us, tracer_cpu_s, setup_cpu_s, lower_bound)


def for_probe(capture: Path, started_us: int | None, ended_us: int | None) -> dict:
    """``kdiag trace`` with its own probe under ``strace -f --seccomp-bpf``:
    only the printed calls stop the probe, each for about a ptrace stop."""
    if not Path(capture).exists():
        return unknown(None, "strace did not run").to_dict()
    return for_capture("strace --seccomp-bpf", Path(capture), started_us, ended_us, PTRACE_STOP_US).to_dict()


def choose(setting: str, before: Rates | None, unusable: dict[str, str | None]) -> tuple[str, str]:
    """(tool, why) for ``setting``: auto, or a tracer's name.
    ``unusable``: each tracer other than the fallback that may run for this
    trace -> why it cannot run here, or None. auto follows the tracers'
    declared policy (``kdiag.capture.tracers.auto_policy``): the first that
    can run, if it may run at any rate (AUTO_ANY_RATE); else it when strace
    would cost the producer at least AUTO_BPF_SHARE of a core (its read+write
    calls, or its context switches when higher, a lower bound of its calls,
    times PTRACE_STOP_US), or when nothing was measured (a command kdiag
    starts) (AUTO_BUSY); else the fallback."""
    fallback = tracers.fallback()
    if setting == fallback:
        return fallback, f"asked for {fallback}"
    if setting in unusable:
        why = unusable[setting]
        return (fallback, f"{setting} asked for but cannot run: {why}") if why else (setting, f"asked for {setting}")
    passed_over = []
    for tool, when in tracers.auto_policy():
        if tool not in unusable:
            continue
        if unusable[tool] is None:
            return _auto(tool, when, before, fallback, "".join(f"; {p}" for p in passed_over))
        passed_over.append(f"{tool} cannot run here: {unusable[tool]}")
    return fallback, "; ".join(passed_over)


def _auto(tool: str, when: str, before: Rates | None, fallback: str, passed: str) -> tuple[str, str]:
    """auto's answer once ``tool`` is the first that can run: it, if its
    condition ``when`` holds, else the fallback."""
    if when == AUTO_ANY_RATE:
        return tool, f"{tool} stops no thread and costs a producer least at any rate" + passed
    if before is None:
        return tool, f"{tool} stops no thread; the producer's call rate is unknown before it starts" + passed
    calls = before.calls_per_s()
    cost = calls * PTRACE_STOP_US / 1e6
    if cost >= AUTO_BPF_SHARE:
        return tool, (f"the producer made {calls:.0f} calls/s: {fallback} would stop it for about "
                      f"{100 * cost:.0f}% of a core; {tool} stops no thread" + passed)
    return fallback, (f"the producer made {calls:.0f} calls/s: {fallback} costs it about {100 * cost:.1f}% of a "
                      f"core (under {100 * AUTO_BPF_SHARE:g}%), and shows every call" + passed)
