"""A CPU-limited cgroup for the client-cpu scenario.

A producer in a container with a CPU limit (Kubernetes ``limits.cpu``) runs
under the kernel's CFS bandwidth control: once its cgroup has used its
quota in a period (100 ms by default), every thread in it waits for the next
period. A broker thread woken by a response in that gap answers up to a
period late, though the broker and the path were fast. The scenario puts
kdiag's probe, and only the probe, in such a cgroup: strace, the sampler
and the lab stay outside, as on a real host.

cgroup v1 (the ``cpu`` controller's own hierarchy) and v2 (``cpu.max``,
with ``cpu`` enabled in the parent's ``cgroup.subtree_control``) are both
handled. The cgroup is removed on exit; a process can join it by writing
``0`` to its ``cgroup.procs`` (``join``).
"""
from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

from kdiag.deadline import wait_until
from kdiag.errors import KdiagError

# Kubernetes and the kernel both default the CFS period to 100 ms.
DEFAULT_PERIOD_US = 100_000


class CpuLimitError(KdiagError):
    """No CPU-limited cgroup can be made here; the message says why."""


def _mounts() -> tuple[Path | None, Path | None]:
    from kdiag.collectors.sockets import cgroup_mounts

    v1, v2 = cgroup_mounts()
    return (Path(v1) if v1 else None), (Path(v2) if v2 else None)


def _make(cores: float, period_us: int) -> tuple[Path, int]:
    quota_us = max(1000, int(cores * period_us))   # the kernel's minimum quota is 1 ms
    v1, v2 = _mounts()
    name = f"kdiag-cpu-{os.getpid()}-{time.monotonic_ns() % 1_000_000}"
    if v1 is not None:
        d = v1 / name
        try:
            d.mkdir()
            (d / "cpu.cfs_period_us").write_text(str(period_us))
            (d / "cpu.cfs_quota_us").write_text(str(quota_us))
        except OSError as e:
            with contextlib.suppress(OSError):
                d.rmdir()
            raise CpuLimitError(f"cannot make a CPU-limited cgroup in {v1}: {e.strerror or e} (needs root)") from e
        return d, 1
    if v2 is not None:
        parent = v2
        try:
            controllers = (parent / "cgroup.subtree_control").read_text().split()
            if "cpu" not in controllers:
                (parent / "cgroup.subtree_control").write_text("+cpu")
            d = parent / name
            d.mkdir()
            (d / "cpu.max").write_text(f"{quota_us} {period_us}")
        except OSError as e:
            raise CpuLimitError(f"cannot make a CPU-limited cgroup in {parent}: {e.strerror or e} "
                                f"(needs root and the cpu controller)") from e
        return d, 2
    raise CpuLimitError("no cgroup hierarchy with the cpu controller is mounted")


def _remove(d: Path, timeout_s: float = 5.0) -> None:
    # A cgroup can be removed once its last task has exited; a child that is
    # still being reaped keeps it busy for a moment.
    def removed() -> bool:
        try:
            d.rmdir()
        except FileNotFoundError:
            pass
        except OSError:
            return False
        return True

    wait_until(removed, timeout_s, 0.05)


@contextlib.contextmanager
def limited(cores: float, period_us: int = DEFAULT_PERIOD_US) -> Iterator[Path]:
    """A fresh cgroup allowed ``cores`` of CPU per period; its directory."""
    if not 0 < cores <= 64:
        raise CpuLimitError(f"CPU limit out of range: {cores!r} cores")
    d, _ = _make(cores, period_us)
    try:
        yield d
    finally:
        _remove(d)


def join(cgroup_dir: str | Path) -> None:
    """Move the calling process (and the threads it starts later) into the
    cgroup."""
    try:
        (Path(cgroup_dir) / "cgroup.procs").write_text("0")
    except OSError as e:
        raise CpuLimitError(f"cannot join the cgroup {cgroup_dir}: {e.strerror or e}") from e


# The neighbour: a process that never blocks, joining the cgroup first.
_BUSY = "import sys\nopen(sys.argv[1] + '/cgroup.procs', 'w').write('0')\nwhile True:\n    pass\n"


@contextlib.contextmanager
def busy(cgroup_dir: str | Path) -> Iterator[int]:
    """A busy neighbour inside the cgroup, as the application's own work in
    the same container: it spends the quota early in every period, so the
    producer's threads are throttled whenever they happen to be waiting for
    a response. kdiag started it, so kdiag stops it; it also dies with
    kdiag. Yields its pid."""
    import subprocess
    import sys

    from kdiag.collectors.base import dies_with_parent

    proc = subprocess.Popen([sys.executable, "-c", _BUSY, str(cgroup_dir)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=dies_with_parent)
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()
