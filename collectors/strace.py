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

from kdiag.collectors.base import CollectorStatus, Requirement, tool_version, unmet

NAME = "strace"
REQUIRES = (
    Requirement(executable="strace", why="apt-get install strace"),
    Requirement(root=True, why="ptrace of the producer"),
)
# %desc covers read/write/poll/close on sockets and the log fd; the rest are
# the socket calls that carry TCP_NODELAY and the connect handshake.
TRACE_SET = "%desc,%network,exit_group"
FLAGS = ["-f", "-ttt", "-T", "-yy", "-s", "256", "--seccomp-bpf", "-e", f"trace={TRACE_SET}"]


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
