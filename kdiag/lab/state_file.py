"""A lab's state file: what it started (ports, pids, process start times,
versions), written atomically under a lock so that any process finds the lab
again."""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path
from typing import Iterator

STATE_FILE = "state.json"
LOCK_FILE = ".lock"


@contextlib.contextmanager
def locked(state_dir: Path) -> Iterator[None]:
    state_dir.mkdir(parents=True, exist_ok=True)
    with open(state_dir / LOCK_FILE, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def read_state(state_dir: Path) -> dict | None:
    path = state_dir / STATE_FILE
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def write_state(state_dir: Path, state: dict) -> None:
    path = state_dir / STATE_FILE
    tmp = path.with_name(f".{STATE_FILE}.{os.getpid()}")
    tmp.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def remove_state(state_dir: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        (state_dir / STATE_FILE).unlink()
