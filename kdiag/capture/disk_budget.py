"""Bounds on kdiag's own disk use while it captures.

Two limits, checked by a thread four times a second:
  - a size cap on everything under the capture's raw/ (``--max-capture-mb``);
  - a reserve of free space on the disk the bundle is written to, so that a
    capture never fills the disk the traced service may also log to.

When one is reached the budget calls ``on_exceeded`` once, with the reason
in words; the caller stops capturing (detaches strace, stops its own probe) and
bundles what it has, marked partial. The check lags the disk by at most one
interval: a capture at full strace speed (a few MB/s) overshoots the cap by
a megabyte or two.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Callable

DEFAULT_CAP_MB = 1024
INTERVAL_S = 0.25
# Free space kdiag leaves on the output disk: 5% of it, at most 64 MiB. The
# bundle itself (compressed) must still fit after the capture stops.
RESERVE_SHARE = 0.05
RESERVE_MAX_BYTES = 64 << 20
MIB = 1 << 20


def tree_bytes(root: Path) -> int:
    total = 0
    stack = [str(root)]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for e in it:
                    try:
                        if e.is_dir(follow_symlinks=False):
                            stack.append(e.path)
                        elif e.is_file(follow_symlinks=False):
                            total += e.stat(follow_symlinks=False).st_size
                    except OSError:
                        continue    # a file removed while we looked
        except OSError:
            continue
    return total


def reserve_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return int(min(RESERVE_MAX_BYTES, RESERVE_SHARE * st.f_blocks * st.f_frsize))


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def over_limit(raw: Path, cap_bytes: int | None) -> str | None:
    """Why the capture must stop now, or None."""
    if cap_bytes is not None and tree_bytes(raw) >= cap_bytes:
        return f"the capture reached its size cap ({cap_bytes / MIB:g} MiB, --max-capture-mb)"
    try:
        free, reserve = free_bytes(raw), reserve_bytes(raw)
    except OSError:
        return None
    if free < reserve:
        return (f"the output disk is nearly full ({free / MIB:.1f} MiB free; kdiag stops capturing "
                f"below {reserve / MIB:.1f} MiB)")
    return None


class DiskBudget:
    """``with DiskBudget(raw, cap, on_exceeded) as budget: ...``;
    ``budget.reason`` says why it was exceeded, None if it was not."""

    def __init__(self, raw: Path, cap_bytes: int | None, on_exceeded: Callable[[str], None],
                 interval_s: float = INTERVAL_S) -> None:
        self.raw, self.cap_bytes, self.on_exceeded, self.interval_s = Path(raw), cap_bytes, on_exceeded, interval_s
        self.reason: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="kdiag-disk-budget", daemon=True)

    def __enter__(self) -> "DiskBudget":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def exceeded(self) -> bool:
        return self.reason is not None

    def _watch(self) -> None:
        while not self._stop.wait(self.interval_s):
            reason = over_limit(self.raw, self.cap_bytes)
            if reason:
                self.reason = reason
                self.on_exceeded(reason)
                return
