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
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from collectors import strace as c_strace
from collectors import sockets
from collectors.base import CollectorStatus, dies_with_parent
from kdiag import redact
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
    from kdiag.trace import TraceResult, finish, start_spark

    if opts.pid is not None and not _alive(opts.pid):
        raise UsageError(f"--pid {opts.pid}: no such process")
    if opts.pid is None and not opts.command:
        raise UsageError("nothing to trace: give --pid PID or -- CMD ARGS")
    reason = c_strace.check()
    if reason:
        raise UsageError(f"cannot trace another process here: {reason}")

    work = Path(tempfile.mkdtemp(prefix="kdiag-trace-"))
    try:
        staging = work / "bundle"
        raw = staging / "raw"
        for d in ("rdkafka_log", "strace", "sockets"):
            (raw / d).mkdir(parents=True)
        spark_holder, warm = start_spark()
        strace_out = raw / "strace" / "strace.txt"
        st = CollectorStatus(c_strace.NAME, version=c_strace.version())
        stderr_log = None
        # --seccomp-bpf does not apply to -p, and strace would say so on stderr.
        flags = [f for f in c_strace.FLAGS if f != "--seccomp-bpf"]
        wrapped = None
        if opts.pid is not None:
            mode, target = "attach", opts.pid
            window = opts.duration_s or DEFAULT_ATTACH_S
            log(f"attaching to pid {opts.pid} for {window:g}s; it keeps running when kdiag detaches")
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
            log(f"running {opts.command[0]} (pid {target}) under strace"
                + (f" for {window:g}s" if window else " until it exits"))
        cmd = ["strace", *flags, "-o", str(strace_out), "-p", str(target)]
        st.command = redact.argv(cmd)
        st.files = [str(strace_out)]
        started = int(time.time() * 1e6)
        tracer = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, preexec_fn=dies_with_parent, start_new_session=True)
        if wrapped is not None:
            if not _wait_traced(target):
                _detach(tracer)
            os.kill(target, signal.SIGCONT)
        sampler = sockets.spawn(target, raw / "sockets" / "samples.jsonl", window) if target else None
        interrupted = False
        try:
            deadline = None if window is None else time.monotonic() + window
            while tracer.poll() is None and (target is None or _alive(target)):
                if deadline is not None and time.monotonic() >= deadline:
                    break
                time.sleep(POLL_S)
        except KeyboardInterrupt:
            interrupted = True
            log("interrupted: detaching; the producer keeps running")
        finally:
            _detach(tracer)
            sampler_status = sockets.collect(sampler) if sampler is not None else None
        st.started_us, st.ended_us = started, int(time.time() * 1e6)
        st.state = "partial" if interrupted else "ok"
        st.bytes = strace_out.stat().st_size if strace_out.exists() else 0
        if wrapped is not None and wrapped.poll() is not None:
            wrapped.wait()
        producer_alive = target is not None and _alive(target)
        log(f"detached; pid {target} is " + ("still running" if producer_alive else "no longer running"))

        raw_inputs = [p for p in (strace_out, stderr_log) if p is not None and p.exists()]
        raw_inputs += sorted(p for p in (raw / "sockets").glob("*") if p.is_file())
        manifest = {
            "argv": redact.argv(opts.argv),
            "mode": mode,
            "target": {"pid": target, "command": redact.argv(opts.command) if opts.command else None,
                       "running_at_detach": producer_alive},
            "partial": interrupted,
            "versions": {"strace": st.version},
            "collectors": [c for c in (st.to_dict(), sampler_status) if c is not None],
        }
        findings, out_path = finish(staging, raw_inputs, {}, spark_holder, warm, opts.out, [], manifest,
                                    {"partial": interrupted, "target": manifest["target"]})
        return TraceResult(findings, out_path, None, interrupted, None)
    finally:
        shutil.rmtree(work, ignore_errors=True)


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


def _wait_traced(pid: int, timeout_s: float = 10.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if _status_field(pid, "TracerPid") not in (None, "0"):
            return True
        time.sleep(0.005)
    return False

