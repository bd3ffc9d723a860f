"""``kdiag trace --pid PID`` and ``kdiag trace -- CMD ARGS``: trace a
producer that is not kdiag's probe.

The traced producer is never harmed:
- kdiag never signals a process it did not start. It stops tracing by
  sending SIGINT to its own strace, which detaches from every thread and
  lets the producer run on.
- strace runs with PR_SET_PDEATHSIG=SIGTERM, so when kdiag dies, even by
  SIGKILL, the kernel tells strace, and strace detaches.
- strace runs in its own session: a Ctrl-C at the terminal reaches kdiag
  only, and kdiag detaches. A wrapped command also keeps running once its
  window (``--duration``) is over.
- strace never starts the command itself: it does not detach from a command
  it started (it waits for it to end, whatever signal it gets). A shim
  stops itself before exec, strace attaches with ``-p``, and SIGCONT lets
  it exec the command under trace. So every mode detaches the same way,
  and none uses ``--seccomp-bpf`` (its filter is only for commands strace
  starts).

The tracer: strace -p stops the traced thread on every call (~23 us each);
a producer at full speed over TLS makes ~13 k calls a second on its broker
thread and loses most of its throughput to it. The BPF tracers stop no
thread and write the same strace text: kdiag's own (kdiag.collectors.bpfcalls,
built at install) and bpftrace (kdiag.collectors.bpftrace).
``tracer`` (KDIAG_TRACER) is auto, strace, bpfcalls or bpftrace; auto
takes bpfcalls wherever it runs; else it measures the producer's call rate
for a second before attaching and takes bpftrace when strace would cost it
a noticeable share of a core (kdiag.capture.overhead.choose), and for a
command (no rate to measure) whenever it can run; strace otherwise, and
whenever they fail to start. A BPF tracer is used only on a
process kdiag may ptrace (``/proc/PID/mem`` opens): it sees every process,
and kdiag observes no more than strace would be allowed to. The manifest's
``tracer`` says which ran and why, its ``overhead`` what it cost.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kdiag import collectors, progress
from kdiag.bundle import redact
from kdiag.capture import disk_budget, overhead, probe_producer, tracers
from kdiag.capture.bundling import TraceResult, cap_bytes, default_bundle_path, finish, staged, start_spark
from kdiag.collectors.base import COMMAND, PID, Capture, Collector, gaps, wait_state
from kdiag.deadline import Deadline
from kdiag.errors import UsageError

# Without a window, an attach traces this long.
DEFAULT_ATTACH_S = 30.0
POLL_S = 0.1
# Stops itself, then (once strace is attached and kdiag sends SIGCONT)
# becomes the command.
_SHIM = ("import os, signal, sys; os.kill(os.getpid(), signal.SIGSTOP); "
         "os.execvp(sys.argv[1], sys.argv[1:])")


@dataclass
class TargetOptions:
    pid: int | None = None
    command: list[str] = field(default_factory=list)
    duration_s: float | None = None
    out: Path | None = None
    argv: list[str] = field(default_factory=list)
    max_capture_mb: float | None = disk_budget.DEFAULT_CAP_MB
    pseudonymise: Path | None = None
    tracer: str | None = None       # auto, strace, bpftrace; None: $KDIAG_TRACER, else auto
    lab: dict | None = None         # the lab the command produces to, for the manifest (kdiag.capture.lab_client)


# The settings --tracer takes: auto, then each tracer the registry holds.
TRACERS = tracers.TRACERS
TRACER_ENV = tracers.TRACER_ENV


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            # A zombie has finished; only its parent's wait() is missing.
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def run(opts: TargetOptions, log=lambda msg: None):
    if opts.pid is not None and not _alive(opts.pid):
        raise UsageError(f"--pid {opts.pid}: no such process")
    if opts.pid is None and not opts.command:
        raise UsageError("nothing to trace: give --pid PID or -- CMD ARGS")
    out = (opts.out or default_bundle_path()).resolve()
    with staged(out, opts.argv, log) as staging:
        return _run(opts, staging, out, log)


def may_trace(pid: int) -> str | None:
    """Why kdiag may not trace ``pid``, or None. Opening /proc/PID/mem takes
    the kernel's ptrace access check (PTRACE_MODE_ATTACH) and touches
    nothing in the process."""
    try:
        with open(f"/proc/{pid}/mem", "rb"):
            return None
    except OSError as e:
        return f"ptrace access to pid {pid} refused ({e.strerror or e})"


def tracer_setting(opts: TargetOptions) -> str:
    return tracers.setting(opts.tracer)


@dataclass
class Tracer:
    """A tracer started on its own (``start_tracer``), as the overhead
    bench runs it: strace -p, or the bpftrace collector."""
    tool: str
    strace: subprocess.Popen | None = None
    bpf: Any = None                 # a threadless tracer's runner (its collector module's Child)
    cpu_at_start: float | None = None

    @property
    def proc(self) -> subprocess.Popen:
        return self.strace if self.strace is not None else self.bpf.proc

    def cpu_s(self) -> float | None:
        return overhead.cpu_s([self.strace.pid]) if self.strace is not None else None


def start_tracer(tool: str, target: int, strace_out: Path, flags: list[str], err_file, log,
                 calls_per_s: float | None = None) -> tuple[Tracer | None, str | None]:
    """Starts ``tool`` on ``target``; returns it once it traces, or None and
    why it could not. The bpftrace collector's status, when it gave up, is
    in the reason. ``calls_per_s``: the target's calls a second before, as
    ``kdiag trace --pid`` measures them (bpfcalls chooses its hooks by it)."""
    cls = tracers.find(tool)
    if not cls.tracing.stops_threads:
        child, why = cls.start_alone(target, strace_out, calls_per_s)
        return (Tracer(tool, bpf=child), None) if child is not None else (None, why)
    proc = cls.attach_alone(target, strace_out, flags, err_file)
    return Tracer(tool, strace=proc, cpu_at_start=overhead.cpu_s([proc.pid])), None


@dataclass
class Target:
    """The producer being traced."""
    pid: int
    mode: str                                   # PID or COMMAND
    window_s: float | None
    wrapped: subprocess.Popen | None = None     # the shim kdiag started for -- CMD
    untraced: overhead.Rates | None = None      # --pid: its call rate before tracing


@dataclass
class TracerChoice:
    """Which syscall tracer runs, and why."""
    tracer: Collector | None        # the syscall tracer's collector that traces, if any
    tool: str
    setting: str
    why: str
    failed: dict = field(default_factory=dict)      # in-kernel tracer -> why it did not start


@dataclass
class Window:
    """The capture window as it went."""
    started_us: int
    ended_us: int = 0
    interrupted: str | None = None
    traced_from: overhead.Counters | None = None
    traced_to: overhead.Counters | None = None


def _run(opts: TargetOptions, staging: Path, out: Path, log):
    setting = tracer_setting(opts)
    mode = PID if opts.pid is not None else COMMAND
    capture = Capture(raw=staging / "raw", mode=mode, log=log,
                      window_s=(opts.duration_s or DEFAULT_ATTACH_S) if mode == PID else opts.duration_s)
    active = collectors.for_capture(capture)
    collectors.make_raw_dirs(capture.raw, active)
    spark_holder, warm = start_spark()
    stderr_path = next((c.stderr_path() for c in active if c.stderr_path()), None)
    target = _start_target(opts, capture, stderr_path)
    window = Window(started_us=int(time.time() * 1e6))
    counters = _Counters(target.pid)
    choice = _start_tracer(setting, target, active, log)
    _say_what_runs(opts, target, choice, log)
    if target.wrapped is not None:
        os.kill(target.pid, signal.SIGCONT)
    # Only the tracer that runs is watched; stopping the other is a no-op.
    watching = [c for c in active if not c.syscall_tracer or c is choice.tracer]
    _watch(opts, capture, target, watching, active, window, log)
    if target.wrapped is not None and target.wrapped.poll() is not None:
        target.wrapped.wait()
    producer_alive = _alive(target.pid)
    counters.end(producer_alive)
    # The command's own status: a producer that failed (a missing library,
    # a refused connection) explains a run without requests.
    exit_status = target.wrapped.returncode if target.wrapped is not None else None
    log(f"detached; pid {target.pid} is " + ("still running" if producer_alive else "no longer running")
        + (f" (it exited with status {exit_status})" if exit_status else ""))

    statuses = [st for st in (c.status() for c in active) if st is not None]
    reasons = ([window.interrupted] if window.interrupted else []) + gaps(statuses, mode, active)
    manifest = _manifest(opts, target, choice, window, statuses, reasons, producer_alive)
    manifest["target"].update(exit_status=exit_status, **counters.to_dict())
    raw_inputs = [p for c in active for p in c.inputs()]
    findings, out_path = finish(staging, raw_inputs, {"tcp_retrans": probe_producer.retransmits(manifest["target"])},
                                spark_holder, warm, out, [], manifest,
                                {"partial": bool(reasons), "target": manifest["target"]}, log, opts.pseudonymise)
    return TraceResult(findings, out_path, None, bool(reasons), None, interrupted=window.interrupted is not None,
                       tracer=choice.tool if choice.tracer is not None else None, exit_status=exit_status)


class _Counters:
    """TCP's counters (RetransSegs, ...) of the producer's network namespace
    at the window's start and end, as the probe records its own: what the
    packet_loss rule weighs. At the end a producer that has exited is read
    through kdiag's own namespace when it is the same one, else not at all."""

    def __init__(self, pid: int) -> None:
        self.ns = _netns(pid)
        self.before = probe_producer.tcp_counters(f"/proc/{pid}/net/snmp")
        self.pid, self.after = pid, None

    def end(self, alive: bool) -> None:
        if alive:
            self.after = probe_producer.tcp_counters(f"/proc/{self.pid}/net/snmp")
        elif self.ns is not None and self.ns == _netns("self"):
            self.after = probe_producer.tcp_counters()

    def to_dict(self) -> dict:
        ok = self.before is not None and self.after is not None
        return {"tcp_counters_before": self.before if ok else None, "tcp_counters_after": self.after if ok else None}


def _netns(pid) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def _start_target(opts: TargetOptions, capture: Capture, stderr_path: Path | None) -> Target:
    """The producer to trace: the running one (measured untraced first: what
    the tracer's cost is measured against, and what auto chooses the tracer
    by), or the command, started stopped before its exec."""
    if capture.mode == PID:
        return Target(opts.pid, PID, capture.window_s, untraced=overhead.baseline(opts.pid))
    with open(stderr_path, "wb") as err:
        wrapped = subprocess.Popen([sys.executable, "-c", _SHIM, *opts.command], stdin=subprocess.DEVNULL,
                                   stderr=err)
    if not wait_state(wrapped.pid, "T"):
        raise UsageError(f"{opts.command[0]}: did not start")
    return Target(wrapped.pid, COMMAND, capture.window_s, wrapped=wrapped)


def _start_tracer(setting: str, target: Target, active: list[Collector], log) -> TracerChoice:
    """The in-kernel tracer ``overhead.choose`` takes, if it starts; one
    that does not is then as unusable as one that cannot run, and choose
    is asked again; strace otherwise, or none when strace cannot run here
    (the sampler still does)."""
    by_name = {c.name: c for c in active if c.syscall_tracer}
    threadless = [name for name in tracers.threadless() if name in by_name]
    fallback = by_name[tracers.fallback()]
    refused = may_trace(target.pid)
    unusable = {name: by_name[name].unmet() or refused for name in threadless}
    tool, why = overhead.choose(setting, target.untraced, unusable)
    choice = TracerChoice(None, tool, setting, why)
    while choice.tool in threadless:
        t = by_name[choice.tool]
        log(f"tracing with {choice.tool}: {choice.why}")
        t.calls_per_s = target.untraced.calls_per_s() if target.untraced else None
        t.start(target.pid)
        if t.child is not None:
            choice.tracer = t
            return choice
        choice.failed[choice.tool] = t.failed_to_start
        log(f"{choice.tool} did not start ({t.failed_to_start})")
        unusable[choice.tool] = f"it did not start ({t.failed_to_start})"
        choice.tool, choice.why = overhead.choose(setting, target.untraced, unusable)
    fallback.start(target.pid)
    choice.tracer = fallback if fallback.proc is not None else None
    return choice


def _say_what_runs(opts: TargetOptions, target: Target, choice: TracerChoice, log) -> None:
    if target.mode == PID:
        log(f"attaching to pid {opts.pid} for {target.window_s:g}s; it keeps running when kdiag detaches")
    else:
        log(f"running {opts.command[0]} (pid {target.pid})" + (f" under {choice.tool}" if choice.tracer else "")
            + (f" for {target.window_s:g}s" if target.window_s else " until it exits"))


def _watch(opts: TargetOptions, capture: Capture, target: Target, watching: list[Collector],
           active: list[Collector], window: Window, log) -> None:
    """The capture window: until the producer exits, the window ends,
    Ctrl-C, or the disk budget is spent. Then every collector stops."""

    window.traced_from = overhead.read_counters(target.pid) if target.mode == PID else None
    for c in watching:
        if not c.syscall_tracer and not c.skipped:
            c.start(target.pid)
    what = f"tracing pid {target.pid}" + (f" for {target.window_s:g} s" if target.window_s else " until it exits")
    with disk_budget.DiskBudget(capture.raw, cap_bytes(opts.max_capture_mb), lambda why: None) as budget, \
            progress.current().stage(what, total=target.window_s) as stage:
        try:
            started = time.monotonic()
            deadline = None if target.window_s is None else Deadline(target.window_s, start=started)
            while _alive(target.pid) and not budget.exceeded:
                if deadline is not None and deadline.expired():
                    break
                for c in watching:
                    c.poll()
                stage.update(time.monotonic() - started)
                time.sleep(POLL_S)
        except KeyboardInterrupt:
            window.interrupted = "interrupted (Ctrl-C or SIGTERM)"
            log("interrupted: detaching; the producer keeps running")
        finally:
            if target.mode == PID:
                window.traced_to = overhead.read_counters(target.pid)
            if budget.exceeded:
                window.interrupted = budget.reason
            window.ended_us = int(time.time() * 1e6)
            # The tracer first: it detaches, and then the sampler's last sample.
            for c in sorted(active, key=lambda c: not c.syscall_tracer):
                c.stop(window.started_us, window.ended_us, window.interrupted is not None)
    if budget.exceeded:
        log(f"stopped: {budget.reason}; the producer keeps running")


def _overhead(choice: TracerChoice, target: Target, window: Window) -> overhead.Overhead:
    """What tracing cost the producer: measured against its untraced rate
    (--pid), or estimated from the capture (-- CMD)."""
    tracer = choice.tracer
    if tracer is None:
        return overhead.unknown(None, "no syscall tracer ran")
    bpf_status = getattr(tracer, "child_status", {})
    tracing = tracers.find(choice.tool).tracing
    tracer_cpu = tracer.cpu_used_s if tracing.stops_threads else bpf_status.get("cpu_s")
    cost = tracing.call_us
    strace_out = tracer.out_path
    if target.mode == PID:
        _, top = overhead.busiest_thread_lines(strace_out) if strace_out.exists() else (0, 0)
        during = overhead.rates(window.traced_from, window.traced_to)
        return overhead.measured(choice.tool, target.untraced, during, tracer_cpu, bpf_status.get("setup_cpu_s"),
                                 top / during.seconds if during and during.seconds else None, cost)
    t0 = bpf_status.get("ready_us") or window.started_us
    t1 = bpf_status.get("stopped_us") or window.ended_us
    return overhead.for_capture(choice.tool, strace_out, t0, t1, cost, tracer_cpu, bpf_status.get("setup_cpu_s"),
                                lower_bound=tracing.stops_threads)


def _manifest(opts: TargetOptions, target: Target, choice: TracerChoice, window: Window, statuses: list[dict],
              reasons: list[str], producer_alive: bool) -> dict:
    bpf_status = getattr(choice.tracer, "child_status", {})
    return {
        "argv": redact.argv(opts.argv),
        "mode": "attach" if target.mode == PID else "wrap",
        "target": {"pid": target.pid, "command": redact.argv(opts.command) if opts.command else None,
                   "running_at_detach": producer_alive},
        "partial": bool(reasons),
        "partial_reasons": reasons,
        "versions": _versions(choice),
        **({"lab": opts.lab} if opts.lab is not None else {}),
        "tracer": {"tool": choice.tool if choice.tracer is not None else None, "setting": choice.setting,
                   "why": choice.why, **{f"{name}_failed": choice.failed.get(name) for name in tracers.threadless()},
                   "lost_events": bpf_status.get("lost_events"), "tracefs": bpf_status.get("tracefs"),
                   **tracers.hooks_of(bpf_status, getattr(choice.tracer, "hooks_why", None))},
        "overhead": _overhead(choice, target, window).to_dict(),
        "collectors": statuses,
    }


def _versions(choice: TracerChoice) -> dict[str, str | None]:
    """The fallback tracer's version always (it may have run for part of
    the window), another tracer's when it was the one chosen."""
    fallback = tracers.fallback()
    return {c.name: c.tool_version() if c.name in (fallback, choice.tool) else None for c in tracers.by_rank()}
