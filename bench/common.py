"""What every benchmark returns: figures, each beside its reference and goal."""
from __future__ import annotations

import contextlib
import os
import platform
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Figure:
    bench: str                      # module: parse, overhead, analysis, verdict
    name: str                       # what was measured, "rdkafka_log lines/s"
    value: float | None             # None when the run could not measure it
    unit: str                       # "lines/s", "s", "%"
    goal: str | None = None         # ">= 3000000", "<= 20"
    met: bool | None = None         # None: no goal, or not measured
    reference: str | None = None    # what it is compared with in the same run
    ref_value: float | None = None
    command: str | None = None      # how to reproduce this one figure
    note: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def check(value: float | None, goal: str) -> bool | None:
    """``goal`` is ">= N" or "<= N"."""
    if value is None:
        return None
    op, num = goal.split()
    return value >= float(num) if op == ">=" else value <= float(num)


def median_interval(values: list[float], level: float = 0.95, resamples: int = 2000,
                    seed: int = 0) -> tuple[float, float] | None:
    """The ``level`` interval of ``values``' median, by the percentile
    bootstrap (resampled with replacement, the same seed every run): how far
    a median of this many windows can wander on its own. A goal inside it
    is neither shown met nor missed by the run. None under 2 values."""
    import random
    import statistics

    if len(values) < 2:
        return None
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    tail = (1 - level) / 2
    return meds[int(tail * resamples)], meds[min(resamples - 1, int((1 - tail) * resamples))]


def machine() -> dict:
    """What the figures were measured on."""
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kb = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    except OSError:
        pass
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return {"cpu": cpu, "cores": os.cpu_count(), "mem_gib": round(mem_kb / 2**20, 1),
            "kernel": platform.release(), "python": sys.version.split()[0], "commit": commit,
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}


def peak_rss_mib(pid_children: bool = True) -> float:
    """Peak resident memory of the finished child processes, MiB."""
    import resource

    who = resource.RUSAGE_CHILDREN if pid_children else resource.RUSAGE_SELF
    return resource.getrusage(who).ru_maxrss / 1024


@contextlib.contextmanager
def environ(env: dict[str, str]):
    """``env`` set in this process's environment, which the tracers kdiag
    starts inherit, and unset again after."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def spread(vals: list[float], nd: int) -> str:
    """A run's values, lowest first, for a figure's note: "1.2/3.4/5.6"."""
    return "/".join(f"{v:.{nd}f}" for v in sorted(vals)) if vals else "none"


def loadavg() -> str:
    """The 1, 5 and 15 minute load averages, as /proc/loadavg has them."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"
