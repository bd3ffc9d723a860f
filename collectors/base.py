"""What collectors share: declared requirements, a status record, and the
base class each collector declares itself with."""
from __future__ import annotations

import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, ClassVar

from kdiag.bundle import redact
from kdiag.deadline import wait_until


@dataclass(frozen=True)
class Requirement:
    """One thing a collector needs; ``check`` returns why it is missing."""

    executable: str | None = None
    root: bool = False
    why: str = ""

    def check(self) -> str | None:
        if self.executable and shutil.which(self.executable) is None:
            return f"{self.executable} not found on PATH ({self.why})" if self.why else f"{self.executable} not found on PATH"
        if self.root and os.geteuid() != 0:
            return f"needs root ({self.why})" if self.why else "needs root"
        return None


# Cost per call to a traced thread, microseconds: a loop of write() to
# /dev/null, 0.40 us a call untraced, 23.6 us under ``strace -p`` (any -e
# set: without seccomp every call stops). strace 6.1, kernel 6.18, 2-core VM;
# bench/overhead.py measures the producer itself.
PTRACE_STOP_US = 23.0

# When ``auto`` takes a syscall tracer (``Tracing.auto_when``).
AUTO_ANY_RATE = "at any rate"
AUTO_BUSY = "when strace would cost the producer a noticeable share of a core, or its rate is unknown"
AUTO_FALLBACK = "otherwise"
AUTO_WHEN = (AUTO_ANY_RATE, AUTO_BUSY, AUTO_FALLBACK)


@dataclass(frozen=True)
class Tracing:
    """What a syscall tracer declares about itself. All write the same strace
    text to the same folder; ``auto`` tries them by ``rank``, lowest first,
    each only under its ``auto_when``; the one whose ``auto_when`` is
    AUTO_FALLBACK runs when none of the others may."""

    rank: int               # auto's order of preference, lowest first (spaced: a new one fits between)
    auto_when: str          # one of AUTO_WHEN
    stops_threads: bool     # ptrace stops: the producer pays for every traced call
    call_us: float          # what one traced call costs the traced thread, microseconds
    captures: str           # what of the producer it records, in words
    cost: str               # what tracing costs the producer, measured (bench/RESULTS.md)


@dataclass
class CollectorStatus:
    """Every field always present; None when unknown."""

    name: str
    state: str = "pending"          # ok, skipped, failed, partial
    reason: str | None = None
    files: list[str] = field(default_factory=list)
    bytes: int | None = None
    version: str | None = None
    command: list[str] | None = None
    started_us: int | None = None
    ended_us: int | None = None

    def to_dict(self) -> dict:
        # The command holds the producer's command line, and its secrets.
        return {**asdict(self), "command": None if self.command is None else redact.argv(self.command)}


def unmet(requirements: tuple[Requirement, ...]) -> str | None:
    for r in requirements:
        why = r.check()
        if why:
            return why
    return None


def status_from_output(name: str, stdout: str, fallback_reason: str) -> dict:
    """A collector run as a child prints its status as JSON on its last
    stdout line; without one it failed, for ``fallback_reason``."""
    import json

    try:
        return json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"name": name, "state": "failed", "reason": fallback_reason}


def tool_version(argv: list[str], pattern: str) -> str | None:
    """The version a tool prints (``pattern``'s first group), or None when it
    cannot run or says something else."""
    import re
    import subprocess

    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(pattern, out)
    return m.group(1) if m else None


def cpu_s(pid: int) -> float | None:
    """CPU seconds (user and system) ``pid`` has used so far, or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def proc_status_field(pid: int, name: str) -> str | None:
    """One field of /proc/PID/status (``State``, ``TracerPid``), or None."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(name + ":"):
                    return line.split()[1]
    except OSError:
        return None
    return None


def wait_state(pid: int, state: str, timeout_s: float = 10.0) -> bool:
    """Whether ``pid`` reached ``state`` (``T``: stopped) within the time."""
    return wait_until(lambda: proc_status_field(pid, "State") == state, timeout_s, 0.005)


def dies_with_parent() -> None:
    """preexec_fn: the kernel sends SIGTERM when the parent dies, even by
    SIGKILL, so a collector never outlives kdiag."""
    import ctypes
    import signal

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


# The three ways kdiag traces a producer: its own probe producer (``kdiag
# trace``), one already running (``--pid``), one it starts (``-- CMD``).
PROBE, PID, COMMAND = "probe", "pid", "command"
MODES = frozenset({PROBE, PID, COMMAND})


@dataclass
class Capture:
    """One trace as the collectors see it: where the raw captures go, how
    the producer runs, and what is known of it so far."""

    raw: Path
    mode: str
    log: Callable[[str], None] = lambda msg: None
    # Runs a command where the producer runs (the lab's client namespace).
    exec_prefix: list[str] = field(default_factory=list)
    window_s: float | None = None
    producer_config: dict[str, str] = field(default_factory=dict)


class Collector:
    """One source of raw captures, declared sos-style as class attributes:

    ``name``          its status's name in the manifest
    ``raw_dir``       its folder under raw/ (bundles and replay rely on it)
    ``requirements``  what it cannot run without: unmet, it is skipped with
                      the reason and the trace goes on
    ``modes``         the trace modes it serves (PROBE, PID, COMMAND)

    and optionally ``preferences`` (it runs without them, seeing less),
    ``partial_without`` (the modes whose capture is partial when it is
    skipped or failed) and ``tracing`` (a ``Tracing``: it is one of the
    syscall tracers, which write the same syscall text to the same folder;
    the trace runs one of them). ``syscall_tracer`` follows from ``tracing``.

    An instance lives for one trace. The methods below are the steps of a
    trace, in order; each does nothing unless the collector needs it.
    """

    REQUIRED: ClassVar[dict[str, type]] = {"name": str, "raw_dir": str, "requirements": tuple, "modes": frozenset}

    name: ClassVar[str]
    raw_dir: ClassVar[str]
    requirements: ClassVar[tuple[Requirement, ...]]
    modes: ClassVar[frozenset[str]]
    preferences: ClassVar[tuple[Requirement, ...]] = ()
    partial_without: ClassVar[frozenset[str]] = frozenset()
    tracing: ClassVar[Tracing | None] = None
    syscall_tracer: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        problem = declaration_problem(cls)
        if problem:
            raise TypeError(f"collector {cls.__module__}.{cls.__qualname__}: {problem}")
        cls.syscall_tracer = cls.tracing is not None

    def __init__(self, capture: Capture) -> None:
        self.capture = capture
        self.out_dir = capture.raw / self.raw_dir
        # Its status once known: a CollectorStatus, or a child collector's own dict.
        self.record: CollectorStatus | dict | None = None

    @classmethod
    def unmet(cls) -> str | None:
        """Why this collector cannot run here, or None."""
        return unmet(cls.requirements)

    def skip_if_unmet(self) -> str | None:
        """Marks this collector skipped when a requirement is unmet; the reason."""
        reason = self.unmet()
        if reason:
            self.record = CollectorStatus(self.name, state="skipped", reason=reason)
        return reason

    @property
    def skipped(self) -> bool:
        return isinstance(self.record, CollectorStatus) and self.record.state == "skipped"

    @classmethod
    def tool_version(cls) -> str | None:
        """The version of the tool it runs, for the manifest, or None."""
        return None

    def producer_config(self, config: dict[str, str]) -> dict[str, str]:
        """kdiag's probe producer's config, with what this collector needs."""
        return config

    def producer_args(self) -> list[str]:
        """Arguments for kdiag's probe producer: where it writes for us."""
        return []

    def stderr_path(self) -> Path | None:
        """Where the producer's stderr goes, if this collector keeps it."""
        return None

    def wrap(self, cmd: list[str]) -> list[str]:
        """The command line that runs the producer ``cmd`` under this collector."""
        return cmd

    def start(self, pid: int) -> None:
        """The producer runs as ``pid``: start watching it."""

    def poll(self) -> None:
        """Called while the capture window is open: notice having given up."""

    def stop(self, started_us: int, ended_us: int, interrupted: bool) -> None:
        """The capture window is over (``interrupted``: cut short)."""

    def after(self, producer_summary: dict | None) -> None:
        """The producer has finished: measurements that need it done."""

    def status(self) -> dict | None:
        """This collector's status for the manifest; None when it has none."""
        return self.record.to_dict() if isinstance(self.record, CollectorStatus) else self.record

    def inputs(self) -> list[Path]:
        """The files of its capture that the analysis reads."""
        return sorted(p for p in self.out_dir.glob("*") if p.is_file())


def declaration_problem(cls: type) -> str | None:
    """What is wrong with a collector class's declarations, or None. Every
    required attribute is the class's own (not inherited), of its type."""
    for attr, kind in Collector.REQUIRED.items():
        if attr not in vars(cls):
            return f"does not declare {attr}"
        if not isinstance(vars(cls)[attr], kind):
            return f"{attr} is {type(vars(cls)[attr]).__name__}, not {kind.__name__}"
    if not all(isinstance(r, Requirement) for r in (*cls.requirements, *cls.preferences)):
        return "requirements and preferences hold Requirement records only"
    if not cls.modes or not cls.modes <= MODES:
        return f"modes {sorted(cls.modes)} not a non-empty subset of {sorted(MODES)}"
    if not cls.partial_without <= cls.modes:
        return "partial_without names a mode it does not serve"
    return tracing_problem(cls)


def tracing_problem(cls: type) -> str | None:
    """What is wrong with a syscall tracer's ``tracing``, or None. A tracer
    declares its own: a subclass of one is another tracer, not the same."""
    tracing = vars(cls).get("tracing")
    if tracing is None:
        inherited = getattr(cls, "tracing", None)
        return "inherits tracing: a syscall tracer declares its own" if inherited is not None else None
    if not isinstance(tracing, Tracing):
        return f"tracing is {type(tracing).__name__}, not Tracing"
    if tracing.auto_when not in AUTO_WHEN:
        return f"tracing.auto_when {tracing.auto_when!r} not one of AUTO_WHEN"
    if not (tracing.captures and tracing.cost and tracing.call_us > 0):
        return "tracing says what it captures and what it costs"
    for hook in ("tool_version", "start_alone" if not tracing.stops_threads else "attach_alone"):
        if not callable(getattr(cls, hook, None)):
            return f"a syscall tracer has {hook}()"
    return None


def gaps(statuses: list[dict | None], mode: str, collectors: list[Collector]) -> list[str]:
    """A collector that could not run leaves the capture partial, in the
    modes it declares so: in words."""
    needed = {c.name for c in collectors if mode in c.partial_without}
    return [f"{st['name']} {st['state']}: {st.get('reason')}" for st in statuses
            if st is not None and st.get("name") in needed and st.get("state") in ("skipped", "failed")]


def settle(st: CollectorStatus, started_us: int, ended_us: int, interrupted: bool) -> None:
    """A status whose files were written by the producer's own run: its
    window, its state, the bytes it holds."""
    st.started_us, st.ended_us = started_us, ended_us
    if st.state != "skipped":
        st.state = "partial" if interrupted else "ok"
        st.bytes = sum(Path(f).stat().st_size for f in st.files if Path(f).exists())
