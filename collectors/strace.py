"""strace wrapper: the producer's syscalls, per thread, to raw/strace/.

Flags, and why each:
  -f            follow librdkafka's threads (the broker thread does the I/O)
  -ttt          epoch microseconds, the same clock as librdkafka's log
  -T            time spent in each call: the poll() wait is the stall
  -yy           socket endpoints on every fd, so a write names its broker
  -s 256        the default 32 cuts ``write(2, "...Sent ProduceRequest``
                before the CorrId, the key that joins syscalls to requests
  --seccomp-bpf with -e trace=..., the tracee stops only for traced calls,
                not for futex/mmap: far less overhead on a busy producer
"""
from __future__ import annotations

import contextlib
import signal
import subprocess
import tempfile
from pathlib import Path

from kdiag.bundle import redact
from kdiag.collectors.base import (
    AUTO_FALLBACK,
    COMMAND,
    MODES,
    PROBE,
    PTRACE_STOP_US,
    Collector,
    CollectorStatus,
    Requirement,
    Tracing,
    cpu_s,
    dies_with_parent,
    proc_status_field,
    settle,
    tool_version,
    unmet,
)
from kdiag.deadline import wait_until

NAME = "strace"
REQUIRES = (
    Requirement(executable="strace", why="apt-get install strace"),
    Requirement(root=True, why="ptrace of the producer"),
)
# %desc covers read/write/poll/close on sockets and the log fd; the rest are
# the socket calls that carry TCP_NODELAY and the connect handshake.
TRACE_SET = "%desc,%network,exit_group"
FLAGS = ["-f", "-ttt", "-T", "-yy", "-s", "256", "--seccomp-bpf", "-e", f"trace={TRACE_SET}"]
# --seccomp-bpf does not apply to -p, and strace would say so on stderr.
ATTACH_FLAGS = [f for f in FLAGS if f != "--seccomp-bpf"]
FILE = "strace.txt"


def version() -> str | None:
    # "strace -- version 6.1"
    return tool_version(["strace", "-V"], r"version\s+(\S+)")


def check() -> str | None:
    return unmet(REQUIRES)


def wrap(cmd: list[str], out_path: str, flags: list[str] = FLAGS) -> tuple[list[str], CollectorStatus]:
    """The command line that runs ``cmd`` under strace, or ``cmd`` itself
    with a skipped status when strace cannot run here."""
    status = CollectorStatus(NAME)
    reason = check()
    if reason:
        status.state, status.reason = "skipped", reason
        return cmd, status
    status.version = version()
    status.command = ["strace", *flags, "-o", out_path, "--", *cmd]
    status.files = [out_path]
    return status.command, status


def attach(pid: int, out_path: Path, flags: list[str], err_file) -> subprocess.Popen:
    """strace -p ``pid``, dying with kdiag, in its own session (a Ctrl-C at
    the terminal reaches kdiag only, and kdiag detaches)."""
    cmd = ["strace", *flags, "-o", str(out_path), "-p", str(pid)]
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err_file,
                            preexec_fn=dies_with_parent, start_new_session=True)


def detach(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
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


def wait_traced(pid: int, tracer: subprocess.Popen, timeout_s: float = 10.0) -> bool:
    return wait_until(lambda: proc_status_field(pid, "TracerPid") not in (None, "0"), timeout_s, 0.005,
                      give_up=lambda: tracer.poll() is not None)


def failure(tracer: subprocess.Popen, err) -> str:
    """strace's own last words: ``strace: attach: ptrace(PTRACE_SEIZE, 123):
    Operation not permitted``."""
    err.seek(0)
    lines = [ln.strip() for ln in err.read().decode(errors="replace").splitlines() if ln.strip()]
    words = next((ln for ln in reversed(lines) if "ptrace" in ln or "not permitted" in ln), None)
    return words or (lines[-1] if lines else f"strace exited with status {tracer.returncode}")


class Strace(Collector):
    """kdiag's probe runs under strace from its first call when strace is
    its tracer; a producer kdiag attaches to, a command it starts, or a
    probe whose in-kernel tracer failed to start, gets strace -p (see
    ``kdiag.capture.attach`` for why a command is not started by strace)."""

    name = NAME
    raw_dir = "strace"
    requirements = REQUIRES
    modes = MODES
    partial_without = MODES
    tracing = Tracing(
        rank=30, auto_when=AUTO_FALLBACK, stops_threads=True, call_us=PTRACE_STOP_US,
        captures=f"every call in {TRACE_SET}, with the first 256 bytes of each buffer",
        cost="a TLS producer at full speed kept 28 % of its throughput; about 23 us a traced call",
    )

    @classmethod
    def tool_version(cls) -> str | None:
        return version()

    @classmethod
    def attach_alone(cls, pid: int, out_path: Path, flags: list[str], err_file) -> subprocess.Popen:
        """strace -p on its own, outside a trace (the overhead bench)."""
        return attach(pid, out_path, flags, err_file)

    def __init__(self, capture) -> None:
        super().__init__(capture)
        self.out_path = self.out_dir / FILE
        self.proc: subprocess.Popen | None = None
        self.cpu_at_start_s: float | None = None
        self.cpu_used_s: float | None = None
        self._err = None
        # strace runs the probe (or was to, and is skipped): nothing to attach or detach
        self.wrapped = False

    def wrap(self, cmd: list[str]) -> list[str]:
        full_cmd, self.record = wrap(cmd, str(self.out_path))
        self.wrapped = True
        if self.record.state == "skipped":
            self.out_dir.rmdir()
            self.capture.log(f"strace skipped: {self.record.reason}")
        return full_cmd

    def start(self, pid: int) -> None:
        if self.wrapped:
            return
        self.record = CollectorStatus(NAME, version=version())
        # Without strace (not installed, not root) the sampler still reads
        # the producer's sockets: TCP_NODELAY alone names a Nagle stall.
        missing = check()
        if missing:
            self.record.state, self.record.reason = "skipped", missing
            self.capture.log(f"strace skipped: {missing}; sampling the producer's sockets only")
            return
        self._err = tempfile.TemporaryFile()
        self.proc = attach(pid, self.out_path, ATTACH_FLAGS, self._err)
        self.cpu_at_start_s = cpu_s(self.proc.pid)
        self.record.command = list(self.proc.args)
        self.record.files = [str(self.out_path)]
        if self.capture.mode in (COMMAND, PROBE) and not wait_traced(pid, self.proc):
            detach(self.proc)

    def poll(self) -> None:
        if self.proc is not None and self.proc.poll() is not None and self.record.state == "pending":
            # strace gave up (ptrace refused, the process gone): the sampler
            # goes on for the window.
            self.record.state, self.record.reason = "failed", failure(self.proc, self._err)
            self.capture.log(f"strace stopped: {self.record.reason}")

    def stop(self, started_us: int, ended_us: int, interrupted: bool) -> None:
        if self.wrapped:
            settle(self.record, started_us, ended_us, interrupted)
            return
        if self.proc is not None:
            self._detach()
            self._drop_buffers()
        st = self.record
        if st is None:      # another tracer ran
            return
        st.started_us, st.ended_us = started_us, ended_us
        if st.state == "pending":
            st.state = "partial" if interrupted else "ok"
        st.bytes = self.out_path.stat().st_size if self.out_path.exists() else 0

    def _drop_buffers(self) -> None:
        """strace shows every read's and write's first bytes; what the
        producer read from its files (keys, configs, its own source) is not
        kept past the capture. Sealing drops them again, for a capture
        kdiag did not live to finish and for kdiag's probe, whose strace
        may still be writing when this runs."""
        if self.out_path.is_file():
            redact.drop_buffers_file(self.out_path, {})

    def inputs(self) -> list[Path]:
        return [self.out_path] if self.record is not None and self.out_path.exists() else []

    def _detach(self) -> None:
        end_cpu = cpu_s(self.proc.pid)
        if end_cpu is not None and self.cpu_at_start_s is not None:
            self.cpu_used_s = end_cpu - self.cpu_at_start_s
        detach(self.proc)
        if self.record.state == "pending" and self.proc.returncode not in (0, -signal.SIGINT):
            why_failed = failure(self.proc, self._err)
            if "ptrace" in why_failed or "Operation not permitted" in why_failed:
                self.record.state, self.record.reason = "failed", why_failed
        self._err.close()
