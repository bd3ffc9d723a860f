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
thread and loses most of its throughput to it. bpftrace
(collectors/bpftrace.py) stops no thread and writes the same strace text.
``tracer`` (KDIAG_TRACER) is auto, strace or bpftrace; auto measures the
producer's call rate for a second before attaching and takes bpftrace when
strace would cost it a noticeable share of a core (kdiag.capture.overhead.choose),
and for a command (no rate to measure) whenever bpftrace can run; strace
otherwise, and whenever bpftrace fails to start. bpftrace is used only on a
process kdiag may ptrace (``/proc/PID/mem`` opens): it sees every process,
and kdiag observes no more than strace would be allowed to. The manifest's
``tracer`` says which ran and why, its ``overhead`` what it cost.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from kdiag.collectors import bpftrace as c_bpf
from kdiag.collectors import strace as c_strace
from kdiag.collectors import sockets
from kdiag.collectors.base import CollectorStatus, dies_with_parent
from kdiag.capture import disk_budget as guard
from kdiag.capture import overhead
from kdiag.bundle import redact
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
    max_capture_mb: float | None = guard.DEFAULT_CAP_MB
    pseudonymise: Path | None = None
    tracer: str | None = None       # auto, strace, bpftrace; None: $KDIAG_TRACER, else auto


TRACERS = ("auto", "strace", "bpftrace")
TRACER_ENV = "KDIAG_TRACER"
# bpftrace compiles its probes before it traces: seconds of CPU on a busy host.
BPF_READY_S = 60.0


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            # A zombie has finished; only its parent's wait() is missing.
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def _detach(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGINT makes strace detach from its tracees and exit. Only strace is
    signalled, never its tracees."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        # strace is ours; a SIGKILLed tracer also releases its tracees.
        proc.kill()
        proc.wait()


def run(opts: TargetOptions, log=lambda msg: None):
    from kdiag.capture.trace import _default_bundle_path, staged

    if opts.pid is not None and not _alive(opts.pid):
        raise UsageError(f"--pid {opts.pid}: no such process")
    if opts.pid is None and not opts.command:
        raise UsageError("nothing to trace: give --pid PID or -- CMD ARGS")
    out = (opts.out or _default_bundle_path()).resolve()
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
    setting = opts.tracer or os.environ.get(TRACER_ENV) or "auto"
    if setting not in TRACERS:
        raise UsageError(f"tracer {setting!r}: one of {', '.join(TRACERS)}")
    return setting


@dataclass
class Tracer:
    """The running tracer: strace -p, or the bpftrace collector."""
    tool: str
    strace: subprocess.Popen | None = None
    bpf: c_bpf.Child | None = None
    cpu_at_start: float | None = None

    @property
    def proc(self) -> subprocess.Popen:
        return self.strace if self.strace is not None else self.bpf.proc

    def cpu_s(self) -> float | None:
        return overhead.cpu_s([self.strace.pid]) if self.strace is not None else None


def start_tracer(tool: str, target: int, strace_out: Path, flags: list[str], err_file, log) -> tuple[Tracer | None, str | None]:
    """Starts ``tool`` on ``target``; returns it once it traces, or None and
    why it could not. The bpftrace collector's status, when it gave up, is
    in the reason."""
    if tool == "bpftrace":
        child = c_bpf.spawn(target, strace_out)
        if c_bpf.wait_ready(child, BPF_READY_S):
            return Tracer("bpftrace", bpf=child), None
        st = c_bpf.collect(child)
        strace_out.unlink(missing_ok=True)
        return None, st.get("reason") or f"bpftrace did not start ({st.get('state')})"
    cmd = ["strace", *flags, "-o", str(strace_out), "-p", str(target)]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err_file,
                            preexec_fn=dies_with_parent, start_new_session=True)
    return Tracer("strace", strace=proc, cpu_at_start=overhead.cpu_s([proc.pid])), None


def _run(opts: TargetOptions, staging: Path, out: Path, log):
    from kdiag.capture.trace import TraceResult, _cap_bytes, collector_gaps, finish, start_spark

    setting = tracer_setting(opts)
    raw = staging / "raw"
    for d in ("rdkafka_log", "strace", "sockets"):
        (raw / d).mkdir(parents=True)
    spark_holder, warm = start_spark()
    strace_out = raw / "strace" / "strace.txt"
    st = CollectorStatus(c_strace.NAME, version=c_strace.version())
    bpf_status: dict | None = None
    stderr_log = None
    # --seccomp-bpf does not apply to -p, and strace would say so on stderr.
    flags = [f for f in c_strace.FLAGS if f != "--seccomp-bpf"]
    wrapped = None
    before = None
    if opts.pid is not None:
        mode, target = "attach", opts.pid
        window = opts.duration_s or DEFAULT_ATTACH_S
        # The producer untraced: what the tracer's cost is measured against,
        # and what auto chooses the tracer by.
        before = overhead.baseline(target)
    else:
        mode = "wrap"
        window = opts.duration_s
        stderr_log = raw / "rdkafka_log" / "stderr.log"
        with open(stderr_log, "wb") as err:
            wrapped = subprocess.Popen([sys.executable, "-c", _SHIM, *opts.command], stdin=subprocess.DEVNULL,
                                       stderr=err)
        target = wrapped.pid
        if not _wait_state(target, "T"):
            raise UsageError(f"{opts.command[0]}: did not start")
    bpf_unusable = c_bpf.check() or may_trace(target)
    tool, why = overhead.choose(setting, before, bpf_unusable)
    fallback = None
    missing = c_strace.check()
    tracer = None
    started = int(time.time() * 1e6)
    with tempfile.TemporaryFile() as tracer_err:
        if tool == "bpftrace":
            log(f"tracing with bpftrace: {why}")
            tracer, fallback = start_tracer("bpftrace", target, strace_out, flags, tracer_err, log)
            if tracer is None:
                log(f"bpftrace did not start ({fallback}); strace instead")
                tool = "strace"
        if tracer is None:
            # Without strace (not installed, not root) the sampler still reads
            # the producer's sockets: TCP_NODELAY alone names a Nagle stall.
            if missing:
                st.state, st.reason = "skipped", missing
                log(f"strace skipped: {missing}; sampling the producer's sockets only")
            else:
                tracer, _ = start_tracer("strace", target, strace_out, flags, tracer_err, log)
                st.command = redact.argv(tracer.strace.args)
                st.files = [str(strace_out)]
        if mode == "attach":
            log(f"attaching to pid {opts.pid} for {window:g}s; it keeps running when kdiag detaches")
        else:
            log(f"running {opts.command[0]} (pid {target})" + (f" under {tool}" if tracer else "")
                + (f" for {window:g}s" if window else " until it exits"))
        if wrapped is not None:
            if tracer is not None and tracer.strace is not None and not _wait_traced(target, tracer.strace):
                _detach(tracer.strace)
            os.kill(target, signal.SIGCONT)
        traced_from = overhead.read_counters(target) if mode == "attach" else None
        sampler = sockets.spawn(target, raw / "sockets" / "samples.jsonl", window) if target else None
        interrupted = None
        traced_to = None
        tracer_cpu = None
        with guard.CaptureGuard(raw, _cap_bytes(opts.max_capture_mb), lambda why: None) as g:
            try:
                deadline = None if window is None else time.monotonic() + window
                while _alive(target) and not g.tripped:
                    if deadline is not None and time.monotonic() >= deadline:
                        break
                    if tracer is not None and tracer.proc.poll() is not None and st.state == "pending" \
                            and tracer.strace is not None:
                        # strace gave up (ptrace refused, the process gone): the
                        # sampler goes on for the window.
                        st.state, st.reason = "failed", _tracer_failure(tracer.strace, tracer_err)
                        log(f"strace stopped: {st.reason}")
                    time.sleep(POLL_S)
            except KeyboardInterrupt:
                interrupted = "interrupted (Ctrl-C or SIGTERM)"
                log("interrupted: detaching; the producer keeps running")
            finally:
                if mode == "attach":
                    traced_to = overhead.read_counters(target)
                if tracer is not None and tracer.strace is not None:
                    end_cpu = tracer.cpu_s()
                    tracer_cpu = None if end_cpu is None or tracer.cpu_at_start is None \
                        else end_cpu - tracer.cpu_at_start
                    _detach(tracer.strace)
                elif tracer is not None:
                    bpf_status = c_bpf.collect(tracer.bpf)
                    tracer_cpu = bpf_status.get("cpu_s")
                sampler_status = sockets.collect(sampler) if sampler is not None else None
        if g.tripped:
            interrupted = g.reason
            log(f"stopped: {g.reason}; the producer keeps running")
        if tracer is not None and tracer.strace is not None and st.state == "pending" \
                and tracer.strace.returncode not in (0, -signal.SIGINT):
            why_failed = _tracer_failure(tracer.strace, tracer_err)
            if "ptrace" in why_failed or "Operation not permitted" in why_failed:
                st.state, st.reason = "failed", why_failed
    ended = int(time.time() * 1e6)
    if bpf_status is not None:
        st = CollectorStatus(c_bpf.NAME, **{k: bpf_status.get(k) for k in
                                            ("state", "reason", "files", "bytes", "version", "command",
                                             "started_us", "ended_us")})
        if st.state == "ok" and interrupted:
            st.state = "partial"
    else:
        st.started_us, st.ended_us = started, ended
        if st.state == "pending":
            st.state = "partial" if interrupted else "ok"
        st.bytes = strace_out.stat().st_size if strace_out.exists() else 0
    if wrapped is not None and wrapped.poll() is not None:
        wrapped.wait()
    producer_alive = target is not None and _alive(target)
    log(f"detached; pid {target} is " + ("still running" if producer_alive else "no longer running"))

    cost = overhead.BPF_EVENT_US if tool == "bpftrace" else overhead.PTRACE_STOP_US
    if tracer is None:
        ovh = overhead.unknown(None, "no syscall tracer ran")
    elif mode == "attach":
        _, top = overhead.busiest_thread_lines(strace_out) if strace_out.exists() else (0, 0)
        during = overhead.rates(traced_from, traced_to)
        ovh = overhead.measured(tool, before, during, tracer_cpu, (bpf_status or {}).get("setup_cpu_s"),
                                top / during.seconds if during and during.seconds else None, cost)
    else:
        t0 = (bpf_status or {}).get("ready_us") or started
        t1 = (bpf_status or {}).get("stopped_us") or ended
        ovh = overhead.for_capture(tool, strace_out, t0, t1, cost, tracer_cpu, (bpf_status or {}).get("setup_cpu_s"),
                                   lower_bound=tool == "strace")

    raw_inputs = [p for p in (strace_out, stderr_log) if p is not None and p.exists()]
    raw_inputs += sorted(p for p in (raw / "sockets").glob("*") if p.is_file())
    reasons = ([interrupted] if interrupted else []) + collector_gaps([st])
    if sampler_status and sampler_status.get("state") in ("skipped", "failed"):
        reasons.append(f"sockets {sampler_status['state']}: {sampler_status.get('reason')}")
    manifest = {
        "argv": redact.argv(opts.argv),
        "mode": mode,
        "target": {"pid": target, "command": redact.argv(opts.command) if opts.command else None,
                   "running_at_detach": producer_alive},
        "partial": bool(reasons),
        "partial_reasons": reasons,
        "versions": {"strace": c_strace.version(), "bpftrace": c_bpf.version() if tool == "bpftrace" else None},
        "tracer": {"tool": tool if tracer is not None else None, "setting": setting, "why": why,
                   "bpftrace_failed": fallback,
                   "lost_events": (bpf_status or {}).get("lost_events"),
                   "tracefs": (bpf_status or {}).get("tracefs")},
        "overhead": ovh.to_dict(),
        "collectors": [c for c in (st.to_dict(), sampler_status) if c is not None],
    }
    findings, out_path = finish(staging, raw_inputs, {}, spark_holder, warm, out, [], manifest,
                                {"partial": bool(reasons), "target": manifest["target"]}, log, opts.pseudonymise)
    return TraceResult(findings, out_path, None, bool(reasons), None, interrupted=interrupted is not None)


def _tracer_failure(tracer: subprocess.Popen, err) -> str:
    """strace's own last words: ``strace: attach: ptrace(PTRACE_SEIZE, 123):
    Operation not permitted``."""
    err.seek(0)
    lines = [ln.strip() for ln in err.read().decode(errors="replace").splitlines() if ln.strip()]
    words = next((ln for ln in reversed(lines) if "ptrace" in ln or "not permitted" in ln), None)
    return words or (lines[-1] if lines else f"strace exited with status {tracer.returncode}")


def _status_field(pid: int, name: str) -> str | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(name + ":"):
                    return line.split()[1]
    except OSError:
        return None
    return None


def _wait_state(pid: int, state: str, timeout_s: float = 10.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if _status_field(pid, "State") == state:
            return True
        time.sleep(0.005)
    return False


def _wait_traced(pid: int, tracer: subprocess.Popen, timeout_s: float = 10.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end and tracer.poll() is None:
        if _status_field(pid, "TracerPid") not in (None, "0"):
            return True
        time.sleep(0.005)
    return False

