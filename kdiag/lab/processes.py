"""The lab's processes: starting them tied to their caller, knowing them
again by pid and start time, stopping them in order, and SIGTERM turned into
an orderly exit while a lab runs. Shared by the loopback and the network lab.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

import psutil

from kdiag.deadline import wait_until
from kdiag.errors import KdiagError

STOP_GRACE = 3.0

# Popen objects for children started by this process, so that down() can
# reap them instead of leaving zombies behind.
_children: dict[int, subprocess.Popen] = {}


class LabError(KdiagError):
    """The lab could not be started, found or stopped; the message says why."""


def tool(name: str, hint: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise LabError(f"{name} not found: {hint}")
    return path


# --- process identity -------------------------------------------------------

# create_time is derived from boot time and the start tick, so two readings of
# the same process agree to well under this; a recycled pid differs by far more.
CREATE_TIME_SLACK = 0.05


def identity(pid: int) -> dict[str, Any]:
    p = psutil.Process(pid)
    return {"pid": pid, "create_time": p.create_time(), "name": p.name()}


def verified(ident: dict[str, Any] | None, expected_name: str) -> psutil.Process | None:
    """The live process the state file describes, or None if that pid is now
    something else (or nothing)."""
    if not ident:
        return None
    try:
        p = psutil.Process(int(ident["pid"]))
        if p.name() != expected_name:
            return None
        if abs(p.create_time() - float(ident["create_time"])) > CREATE_TIME_SLACK:
            return None
        if p.status() == psutil.STATUS_ZOMBIE:
            return None
        return p
    except (psutil.Error, KeyError, TypeError, ValueError):
        return None


def forks(p: psutil.Process) -> list[psutil.Process]:
    """The copies of p it forked for its connections (socat's fork option);
    socat does not pass a SIGTERM on to them."""
    try:
        name = p.name()
        children = p.children(recursive=True)
    except psutil.Error:
        return []
    forks = []
    for c in children:
        with contextlib.suppress(psutil.Error):
            if c.name() == name:
                forks.append(c)
    return forks


def reap(pid: int) -> None:
    child = _children.pop(pid, None)
    if child is not None:
        child.poll()
        if child.returncode is None:
            _children[pid] = child
        return
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _gone(p: psutil.Process) -> bool:
    reap(p.pid)
    try:
        return not p.is_running() or p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def stop(procs: list[psutil.Process]) -> None:
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.terminate()
    # Tansu does not exit on SIGTERM while a client is still connected.
    wait_until(lambda: all(_gone(p) for p in procs), STOP_GRACE, 0.02)
    for p in procs:
        if not _gone(p):
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
    wait_until(lambda: all(_gone(p) for p in procs), STOP_GRACE, 0.02)


def version_line(cmd: list[str], pattern: str) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise LabError(f"{' '.join(cmd)} failed: {e}") from None
    for line in (out.stdout + "\n" + out.stderr).splitlines():
        if re.search(pattern, line):
            return line.strip()
    raise LabError(f"{' '.join(cmd)} printed no version line")



_libc = None


def _prctl_pdeathsig(parent: int):
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    libc = _libc
    pr_set_pdeathsig = 1

    def preexec() -> None:
        libc.prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)
        # The parent may have died between fork() and prctl(); then no signal
        # would ever come.
        if os.getppid() != parent:
            os._exit(1)

    return preexec


def spawn(
    cmd: list[str], log: Path, detach: bool, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.Popen:
    kwargs: dict[str, Any] = {"cwd": cwd}
    if detach:
        kwargs["start_new_session"] = True
    else:
        kwargs["preexec_fn"] = _prctl_pdeathsig(os.getpid())
        # Own process group: a Ctrl-C at the terminal reaches only the caller,
        # which then tears the lab down in order.
        kwargs["process_group"] = 0
    with open(log, "ab") as out:
        try:
            child = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env, **kwargs
            )
        except OSError as e:
            raise LabError(f"could not start {cmd[0]}: {e}") from None
    _children[child.pid] = child
    return child


def one_line(text: str, lines: int = 5) -> str:
    kept = [l.strip() for l in text.splitlines() if l.strip()][-lines:]
    return " | ".join(kept)


def log_tail(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return "(no log)"
    return one_line(text) or "(log empty)"


@contextlib.contextmanager
def sigterm_exits() -> Iterator[Callable[[], None]]:
    """Inside the block, SIGTERM raises SystemExit(143), so the caller's
    finally clauses run (main thread only; elsewhere this does nothing).

    Calling the function it yields holds any further SIGTERM back until the
    block ends: a second signal must not cut a teardown short. At the end
    the old handler comes back and a held signal is delivered again.
    """
    in_main = threading.current_thread() is threading.main_thread()
    old_handler = signal.getsignal(signal.SIGTERM) if in_main else None
    # A handler someone else installed (kdiag trace's: SIGTERM ends the
    # capture as Ctrl-C does) stays theirs.
    trap = in_main and old_handler is signal.SIG_DFL
    pending: list[int] = []

    def on_sigterm(signum, frame):
        raise SystemExit(128 + signum)

    def defer_sigterm(signum, frame):
        pending.append(signum)

    def hold() -> None:
        if trap:
            signal.signal(signal.SIGTERM, defer_sigterm)

    if trap:
        signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield hold
    finally:
        if trap:
            signal.signal(signal.SIGTERM, old_handler)
            if pending:
                os.kill(os.getpid(), signal.SIGTERM)
