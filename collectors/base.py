"""What collectors share: declared requirements and a status record."""
from __future__ import annotations

import os
import shutil
from dataclasses import asdict, dataclass, field


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
        return asdict(self)


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


def dies_with_parent() -> None:
    """preexec_fn: the kernel sends SIGTERM when the parent dies, even by
    SIGKILL, so a collector never outlives kdiag."""
    import ctypes
    import signal

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
