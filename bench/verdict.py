"""Time to verdict: from the command to its printed verdict, whole process.

  trace   ``kdiag trace``, the README's first command: the embedded lab
          broker, the 100-message probe under its default tracer (bpfcalls
          where it runs, else strace), the path probe, the Spark analysis
          and the bundle.
  replay  ``kdiag replay`` of a 200-request bundle, made here first by
          ``kdiag trace --messages 200``: verify, unpack, parse, analyse.

The clock stops when the ``VERDICT:`` line reaches stdout (the bundle's
name and the detaching come after it). Each figure is the median of
``repeats`` runs. kdiag's progress lines on stderr are timed as they
arrive: the note gives when the last of them came, which splits a run into
what came before the analysis and the analysis.

The reference, in the same run, is what no verdict can come before: a
local Spark session with kdiag's settings for a small capture, started,
one job run, stopped (``python -m bench.verdict spark``). The trace's probe
itself also takes its time: 100 messages one at a time at ~22 msg/s are
~4.6 s of Nagle stalls that kdiag is there to see.
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.common import ROOT, Figure, check

TRACE_GOAL = "<= 20"
REPLAY_GOAL = "<= 8"
REPLAY_MESSAGES = 200


def timed_run(cmd: list[str], timeout_s: float = 600, env: dict | None = None) -> tuple[float | None, float, list[tuple[float, str]]]:
    """(seconds to the VERDICT line or None, seconds to exit, stderr lines
    with the second each arrived)."""
    import selectors

    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            env=env)
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, "out")
    sel.register(proc.stderr, selectors.EVENT_READ, "err")
    verdict_s, err_lines, open_ = None, [], 2
    bufs = {"out": b"", "err": b""}
    while open_:
        if time.monotonic() - t0 > timeout_s:
            proc.kill()
            break
        for key, _ in sel.select(timeout=1.0):
            chunk = os.read(key.fileobj.fileno(), 65536)
            now = time.monotonic() - t0
            if not chunk:
                sel.unregister(key.fileobj)
                open_ -= 1
                continue
            bufs[key.data] += chunk
            *lines, bufs[key.data] = bufs[key.data].split(b"\n")
            for ln in lines:
                text = ln.decode(errors="replace")
                if key.data == "out" and verdict_s is None and text.startswith("VERDICT:"):
                    verdict_s = now
                elif key.data == "err":
                    err_lines.append((now, text))
    proc.wait()
    total = time.monotonic() - t0
    if proc.returncode != 0:
        tail = " | ".join(t for _, t in err_lines[-3:])
        raise RuntimeError(f"{' '.join(cmd[2:])}: exit {proc.returncode}: {tail}")
    return verdict_s, total, err_lines


def spark_floor() -> float:
    """Seconds for a small-capture Spark session to start, run a job, stop."""
    t0 = time.monotonic()
    from kdiag.analysis.spark import session

    s = session(small=True)
    s.range(10).count()
    s.stop()
    return time.monotonic() - t0


def fresh_spark_floor() -> float:
    """spark_floor, in a fresh process: what a cold replay starts from."""
    out = subprocess.run([sys.executable, "-m", "bench.verdict", "spark"], cwd=ROOT, capture_output=True, text=True,
                         timeout=300, check=True).stdout
    return float(out.strip().splitlines()[-1])


def _phases(err_lines: list[tuple[float, str]]) -> str:
    if not err_lines:
        return "no progress lines"
    t, text = err_lines[-1]
    return f"last progress line at {t:.1f} s: {text.strip()[:60]!r}"


def replay_breakdown(target: Path) -> dict[str, float]:
    """Where one cold ``kdiag replay TARGET`` spends its time (seconds):
    imports, verify and unpack of a bundle, parse, session_start (in a
    thread beside the parse), analysis, total (bench.cold_phases has it all)."""
    from bench.cold_phases import one

    m = one(target, verify=True)["marks"]
    return {k: round(v, 2) for k, v in {
        "imports": m["imported"], "verify": m.get("verify_s", 0.0), "unpack": m.get("unpack_s", 0.0),
        "parse": m.get("parse_paths_s", 0.0), "session_start": m["session_up"] - m["session_called"],
        "analysis": m["analyze_end"] - m["analyze_start"], "total": m["exit"]}.items()}


def _secs(xs: list[float]) -> str:
    return ", ".join(f"{x:.1f}" for x in sorted(xs))


def run(smoke: bool, work: Path) -> list[Figure]:
    """In a smoke run only the replay, of a fixture capture: the trace runs
    in the end-to-end tests, and its figure needs the full run."""
    work.mkdir(parents=True, exist_ok=True)
    repeats = 1 if smoke else 3
    kd = [sys.executable, "-m", "kdiag"]
    floors = [fresh_spark_floor() for _ in range(repeats)]
    floor = statistics.median(floors)
    ref = "Spark session start + one job + stop"
    figs = []
    if smoke:
        target = ROOT / "fixtures" / "captures" / "nagle_on"
        replay_what = f"kdiag replay {target.relative_to(ROOT)}"
    else:
        times, totals, last = [], [], []
        for i in range(repeats):
            v, total, err = timed_run([*kd, "trace", "-o", str(work / f"trace{i}.tar.gz")])
            times.append(v if v is not None else total)
            totals.append(total)
            last.append(_phases(err))
        med = statistics.median(times)
        figs.append(Figure("verdict", "kdiag trace (embedded default)", round(med, 1), "s", TRACE_GOAL,
                           check(med, TRACE_GOAL), ref, round(floor, 1), "kdiag trace",
                           f"median of {repeats}: {_secs(times)} s to the verdict, {statistics.median(totals):.1f} s "
                           f"to exit; median run's {last[times.index(med)]}"))
        target = work / "b200.tar.gz"
        timed_run([*kd, "trace", "--messages", str(REPLAY_MESSAGES), "-o", str(target)])
        replay_what = f"kdiag replay BUNDLE  # made by kdiag trace --messages {REPLAY_MESSAGES}"
    times, totals = [], []
    for _ in range(repeats):
        v, total, _ = timed_run([*kd, "replay", str(target)])
        times.append(v if v is not None else total)
        totals.append(total)
    med = statistics.median(times)
    goal = None if smoke else REPLAY_GOAL
    note = (f"median of {repeats}: {_secs(times)} s to the verdict, {statistics.median(totals):.1f} s to exit; "
            f"reference runs {_secs(floors)} s")
    parts = replay_breakdown(target)
    note += (f"; one run's steps: {', '.join(f'{k} {v}' for k, v in parts.items())} s (the session starts "
             f"beside the parse)")
    if not smoke:
        cold, _, _ = timed_run([*kd, "replay", str(target)], env={"KDIAG_SPARK_CDS": "0"})
        note += f"; without the class archive {cold:.1f} s"
    figs.append(Figure("verdict", "kdiag replay" + (" (fixture nagle_on)" if smoke else
                                                    f" ({REPLAY_MESSAGES}-request bundle)"),
                       round(med, 1), "s", goal, goal and check(med, goal), ref, round(floor, 1), replay_what, note))
    return figs


if __name__ == "__main__":
    if sys.argv[1:2] == ["spark"]:
        print(f"{spark_floor():.3f}")
        sys.exit(0)
    sys.exit("usage: python -m bench.verdict spark")
