"""The warm server's practice: after it answers, while nobody waits, it runs
the analysis again on a copy of the tables it was just given, until its JVM
has run PRACTICE_RUNS analyses.

Why: a JVM plans Spark's queries far faster once its JIT compiler has
compiled the planner's hot paths, which takes about ten analyses (C1, 2
cores, the 100-request bundle, in the server: 3.0-3.9 s an analysis for the
2nd to the 9th, 2.4-2.8 s from the 10th). Without practice a user's second
to tenth replays pay for that; with it, the first one does, and the idle
seconds after it.

What it costs: up to PRACTICE_RUNS analyses of the user's own small input,
on every core Spark has, once per server (the server stops after
KDIAG_WARM_IDLE_S of idleness). A request that arrives meanwhile waits for
the practice to give way: its Spark jobs are cancelled, which ends it
within one job's planning (tenths of a second). KDIAG_WARM_PRACTICE sets
the number of runs; 0: no practice.
"""
from __future__ import annotations

import os
import shutil
import sys
import threading
from pathlib import Path

PRACTICE_RUNS = 10


def runs_wanted() -> int:
    try:
        return max(0, int(os.environ.get("KDIAG_WARM_PRACTICE", PRACTICE_RUNS)))
    except ValueError:
        return PRACTICE_RUNS


class Practice:
    """One server's practice. ``done(tables, meta)`` after each answered
    request counts it and, while runs are left, starts practising on a copy
    of ``tables`` in a thread; ``give_way()`` before a request is served."""

    def __init__(self, spark, directory: Path, runs: int | None = None) -> None:
        self.spark = spark
        self.copy = Path(directory) / "practice"
        self.left = runs_wanted() if runs is None else runs
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.ran = 0           # practice analyses finished
        self.interrupted = 0   # practices a request ended

    def done(self, tables: Path, meta: dict) -> None:
        """A request was answered from ``tables``: one run fewer to go, then
        practice on a copy (the client removes its tables once answered)."""
        from kdiag.analysis.frames import fits_in_plan

        self.left -= 1
        if self.left <= 0 or not Path(tables).is_dir() or not fits_in_plan(tables):
            return
        shutil.rmtree(self.copy, ignore_errors=True)
        try:
            shutil.copytree(tables, self.copy, ignore=shutil.ignore_patterns("*.tmp"))
        except OSError:
            return   # no room for a copy: no practice
        self._stop.clear()
        self._thread = threading.Thread(target=self._practise, args=(dict(meta),), daemon=True,
                                        name="kdiag-practice")
        self._thread.start()

    def _practise(self, meta: dict) -> None:
        from kdiag.analysis.job import analyze

        try:
            while self.left > 0 and not self._stop.is_set():
                analyze(self.spark, self.copy, dict(meta))
                self.left -= 1
                self.ran += 1
        except Exception as e:  # noqa: BLE001 - cancelled by give_way, or failing: practice only
            if not self._stop.is_set():
                print(f"kdiag: practice stopped: {type(e).__name__}: {e}".splitlines()[0], file=sys.stderr)
        finally:
            if not self._stop.is_set():   # else give_way removes it, once this thread is gone
                shutil.rmtree(self.copy, ignore_errors=True)

    def practising(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def give_way(self) -> None:
        """Ends the practice now: its running Spark jobs are cancelled, and
        each it starts until it has noticed."""
        thread = self._thread
        if thread is None:
            return
        self._stop.set()
        self.interrupted += thread.is_alive()
        while thread.is_alive():
            self.spark.sparkContext.cancelAllJobs()
            thread.join(0.05)
        self._thread = None
        shutil.rmtree(self.copy, ignore_errors=True)
