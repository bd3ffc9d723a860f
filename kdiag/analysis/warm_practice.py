"""The warm server's practice: after it answers, while nobody waits, it runs
the analysis again on a copy of the tables it was just given, until its JVM
has run PRACTICE_RUNS analyses.

Why: a JVM plans Spark's queries far faster once its JIT compiler has
compiled the planner's hot paths, which takes about ten analyses (C1, 2
cores, the 100-request bundle, in the server: 3.0-3.9 s an analysis for the
2nd to the 9th, 2.4-2.8 s from the 10th). Without practice a user's second
to tenth replays pay for that; with it, the idle seconds after the first
one do.

What it costs: up to PRACTICE_RUNS analyses of the user's own small input,
on the cores Spark has, from PRACTICE_AFTER_S after an answer, once per
server (the server stops after KDIAG_WARM_IDLE_S of idleness). A request
that arrives meanwhile does not wait for it: the practice stops at its next
checkpoint (spark_plumbing.give_up_on), and it runs in a Spark session of its own,
whose running operations are interrupted (``interruptAll``) while the
request's, in the server's session, run on. KDIAG_WARM_PRACTICE sets the
number of runs; 0: no practice.
"""
from __future__ import annotations

import itertools
import os
import shutil
import sys
import threading
from pathlib import Path

from kdiag import settings

PRACTICE_RUNS = 10
# Quiet this long after an answer before practice starts: replays run one
# after another by a script come sooner, and find the cores free (the
# practice's wind-down takes up to 0.6 s of them).
PRACTICE_AFTER_S = 2.0


def runs_wanted() -> int:
    return max(0, settings.get("KDIAG_WARM_PRACTICE"))


class Practice:
    """One server's practice. Per answered request: ``copy = keep(tables)``
    before the answer (the client removes its tables once answered),
    ``begin(copy, meta)`` after it. ``give_way()`` when a request comes."""

    def __init__(self, spark, directory: Path, runs: int | None = None) -> None:
        # Its own session: interrupting it leaves the requests' operations be.
        self.spark = spark.newSession()
        self.dir = Path(directory)
        self.left = runs_wanted() if runs is None else runs
        self.ran = 0           # practice analyses finished
        self.interrupted = 0   # practices a request ended
        self._serial = itertools.count()
        self._thread: threading.Thread | None = None
        self._dying: threading.Thread | None = None
        self._stop = threading.Event()

    def keep(self, tables: Path) -> Path | None:
        """Counts a request's analysis; while runs are left, a copy of its
        tables (a small input's only) for the practice."""
        from kdiag.analysis.spark_plumbing import fits_in_plan

        self.left -= 1
        if self.left <= 0 or not Path(tables).is_dir() or not fits_in_plan(tables):
            return None
        copy = self.dir / f"practice-{os.getpid()}-{next(self._serial)}"
        try:
            shutil.copytree(tables, copy)
        except OSError:
            shutil.rmtree(copy, ignore_errors=True)
            return None   # no room for a copy: no practice
        return copy

    def begin(self, copy: Path | None, meta: dict) -> None:
        """Practice on ``copy`` (from keep), in a thread."""
        if copy is None:
            return
        if self._dying is not None:   # one practice at a time: the last one is nearly gone
            self._dying.join()
            self._dying = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._practise, args=(copy, dict(meta), self._stop), daemon=True,
                                        name="kdiag-practice")
        self._thread.start()

    def _practise(self, copy: Path, meta: dict, stop: threading.Event) -> None:
        from kdiag.analysis.job import analyze
        from kdiag.analysis.spark_plumbing import give_up_on

        give_up_on(stop)   # it stops at its next checkpoint; its running jobs are interrupted
        try:
            stop.wait(PRACTICE_AFTER_S)
            while self.left > 0 and not stop.is_set():
                analyze(self.spark, copy, dict(meta))
                if not stop.is_set():
                    self.left -= 1
                    self.ran += 1
        except Exception as e:  # noqa: BLE001 - interrupted by give_way, or failing: practice only
            if not stop.is_set():
                print(f"kdiag: practice stopped: {type(e).__name__}: {e}".splitlines()[0], file=sys.stderr)
        finally:
            shutil.rmtree(copy, ignore_errors=True)

    def clear(self) -> None:
        """Removes the copies a server before this one left (it was killed)."""
        for old in self.dir.glob("practice-*"):
            shutil.rmtree(old, ignore_errors=True)

    def practising(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def give_way(self) -> None:
        """Stops the practice without waiting for it: its operations are
        interrupted, from a thread of its own, until it has stopped."""
        thread, self._thread = self._thread, None
        if thread is None or not thread.is_alive():
            return
        self._stop.set()
        self.interrupted += 1
        self._dying = threading.Thread(target=self._wind_down, args=(thread,), daemon=True,
                                       name="kdiag-practice-stop")
        self._dying.start()

    def _wind_down(self, thread: threading.Thread) -> None:
        # An operation it starts after one interruption is stopped by the next.
        while thread.is_alive():
            try:
                self.spark.interruptAll()
            except Exception:  # noqa: BLE001 - the session is stopping with the server
                return
            thread.join(0.05)

    def close(self, timeout_s: float = 10.0) -> None:
        self.give_way()
        if self._dying is not None:
            self._dying.join(timeout_s)
