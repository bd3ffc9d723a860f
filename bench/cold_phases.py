"""Where a cold replay's time goes: ``kdiag replay`` of one input with
Spark started in the replay's own process (``KDIAG_WARM=0``), each phase
timed from inside it.

    python -m bench.cold_phases PATH [-n 3]

The replay runs in a child process, exactly as ``python -m kdiag replay
--no-verify PATH`` runs it, with the phases' boundaries marked by wrapping
the functions that start them (``kdiag.analysis.jvm.launch``,
``kdiag.analysis.spark.session``, ``kdiag.analysis.job.analyze``). Each
phase is given in wall seconds and, for the JVM, in CPU seconds: on 2
cores a phase's CPU is what the machine pays, its wall time is what the
user waits, and the JVM's CPU is counted from /proc for the whole process
(compiler and collector threads included, even those that have exited).
Spark's jobs are read from its status store at the end: when each was
submitted and how long it ran, so that the analysis splits into planning
in the driver (before and between jobs) and the jobs themselves.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.common import ROOT

# Runs in the child: the replay, with its phases marked.
_CHILD = r'''
import json, os, sys, time
T0 = time.monotonic()
marks = {}
try:   # what the command's entry point does first (older code has none)
    from kdiag.no_pandas import skip_pandas_lookups
    skip_pandas_lookups()
except ImportError:
    pass
def mark(name):
    marks.setdefault(name, time.monotonic() - T0)

def jvm_cpu_s():
    from pyspark import SparkContext
    proc = getattr(SparkContext._gateway, "proc", None)
    if proc is None:
        return None
    with open(f"/proc/{proc.pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

import kdiag.analysis.jvm as jvm
import kdiag.analysis.spark as spark_mod
import kdiag.analysis.job as job
mark("imported")
_launch, _session, _analyze = jvm.launch, spark_mod.session, job.analyze
def launch(conf):
    mark("jvm_launch")
    try:
        return _launch(conf)
    finally:
        mark("gateway_up")
        marks["jvm_cpu_at_gateway_s"] = jvm_cpu_s()
def session(*a, **k):
    mark("session_called")
    s = _session(*a, **k)
    mark("session_up")
    marks["jvm_cpu_at_session_s"] = jvm_cpu_s()
    return s
jobs = []
def analyze(spark, *a, **k):
    mark("analyze_start")
    marks["jvm_cpu_at_analyze_s"] = jvm_cpu_s()
    wall0 = time.time()
    try:
        return _analyze(spark, *a, **k)
    finally:
        mark("analyze_end")
        marks["jvm_cpu_at_end_s"] = jvm_cpu_s()
        # AppStatusStore.jobsList(null): a Scala Seq of every job's v1.JobData
        listed = spark.sparkContext._jsc.sc().statusStore().jobsList(None)
        for i in range(listed.size()):
            j = listed.apply(i)
            sub, end = j.submissionTime(), j.completionTime()
            if sub.isDefined() and end.isDefined():
                jobs.append((sub.get().getTime() / 1000 - wall0, (end.get().getTime() - sub.get().getTime()) / 1000))
jvm.launch, spark_mod.session, job.analyze = launch, session, analyze
from kdiag.bundle import archive as bundle
from kdiag.ingest import tables
def summed(mod, name):
    f = getattr(mod, name)
    def g(*a, **k):
        t = time.monotonic()
        try:
            return f(*a, **k)
        finally:
            marks[name + "_s"] = marks.get(name + "_s", 0.0) + time.monotonic() - t
    setattr(mod, name, g)
summed(bundle, "verify"); summed(bundle, "unpack"); summed(tables, "parse_paths")
from kdiag.cli import main
try:
    rc = main(["replay", *sys.argv[2:], sys.argv[1]])
finally:
    me = os.times()
    marks["python_cpu_s"] = me.user + me.system
    marks["exit"] = time.monotonic() - T0
    # The command imports no pandas (kdiag.no_pandas); a library caller's
    # process does: this says which of the two was measured.
    marks["pandas_imported"] = "pandas" in sys.modules
    print("KDIAG_PHASES " + json.dumps({"marks": marks, "jobs": sorted(jobs)}), file=sys.stderr)
'''

PHASES = (
    ("Python start and kdiag's imports", None, "imported"),
    ("a bundle's verification (summed)", None, "verify_s"),
    ("a bundle's unpacking (summed)", None, "unpack_s"),
    ("parsing, beside the JVM's start (summed)", None, "parse_paths_s"),
    ("reading the input, to the session's start", "imported", "session_called"),
    ("Spark's launcher and the JVM, to its gateway", "jvm_launch", "gateway_up"),
    ("SparkContext and SparkSession", "gateway_up", "session_up"),
    ("analysis: planning before the first job", "analyze_start", None),
    ("analysis, whole", "analyze_start", "analyze_end"),
    ("after the analysis: report and exit", "analyze_end", "exit"),
)


def one(path: Path, verify: bool = False) -> dict:
    """One cold replay of ``path``: its marks, jobs and wall time. A bundle
    is verified either way; ``verify``: a failed verification fails it."""
    env = {**os.environ, "KDIAG_WARM": "0"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    t0 = time.monotonic()
    run = subprocess.run([sys.executable, "-c", _CHILD, str(path), *([] if verify else ["--no-verify"])],
                         cwd=ROOT, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
    wall = time.monotonic() - t0
    line = next((ln for ln in run.stderr.splitlines() if ln.startswith("KDIAG_PHASES ")), None)
    if run.returncode != 0 or line is None or "VERDICT:" not in run.stdout:
        raise RuntimeError(f"cold replay of {path} failed ({run.returncode}): {run.stderr.strip()[-400:]}")
    got = json.loads(line.split(" ", 1)[1])
    got["wall_s"] = wall
    got["load"] = os.getloadavg()[0]
    return got


def phases(got: dict) -> list[tuple[str, float]]:
    """(phase, wall seconds) of one replay, in order."""
    m, jobs = got["marks"], got["jobs"]
    out = []
    for name, start, end in PHASES:
        a = 0.0 if start is None else m.get(start)
        if end is None:   # planning: the analysis's start to its first job
            b = None if not jobs or a is None else a + jobs[0][0]
        else:
            b = m.get(end, 0.0 if end.endswith("_s") else None)
        out.append((name, None if a is None or b is None else b - a))
    out.append(("analysis: Spark jobs running (summed)", sum(d for _, d in jobs)))
    return out


def cpu(got: dict) -> list[tuple[str, float | None]]:
    m = got["marks"]

    def diff(a, b):
        return None if m.get(a) is None or m.get(b) is None else m[b] - m[a]
    return [("JVM CPU to its gateway", m.get("jvm_cpu_at_gateway_s")),
            ("JVM CPU, SparkContext and SparkSession", diff("jvm_cpu_at_gateway_s", "jvm_cpu_at_session_s")),
            ("JVM CPU while the input is read", diff("jvm_cpu_at_session_s", "jvm_cpu_at_analyze_s")),
            ("JVM CPU, analysis", diff("jvm_cpu_at_analyze_s", "jvm_cpu_at_end_s")),
            ("kdiag's Python CPU, whole replay", m.get("python_cpu_s"))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.cold_phases", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", type=Path, help="a capture, excerpt or bundle")
    ap.add_argument("-n", type=int, default=3, help="cold replays (default 3); each column is one")
    ap.add_argument("--json", type=Path, help="also write every run's marks and jobs here")
    a = ap.parse_args(argv)
    runs = [one(a.path) for _ in range(a.n)]
    if a.json:
        a.json.write_text(json.dumps(runs, indent=1) + "\n")
    print(f"cold replay of {a.path}, KDIAG_WARM=0, {a.n} run(s); load average "
          + ", ".join(f"{r['load']:.2f}" for r in runs))
    print("| phase | " + " | ".join(f"run {i + 1} (s)" for i in range(a.n)) + " | median |")
    print("|---|" + "---|" * (a.n + 1))
    rows = [("whole replay, wall", [r["wall_s"] for r in runs])]
    per = [phases(r) for r in runs]
    rows += [(per[0][i][0], [p[i][1] for p in per]) for i in range(len(per[0]))]
    cpus = [cpu(r) for r in runs]
    rows += [(cpus[0][i][0], [c[i][1] for c in cpus]) for i in range(len(cpus[0]))]
    for name, vals in rows:
        shown = [f"{v:.2f}" if v is not None else "-" for v in vals]
        known = [v for v in vals if v is not None]
        med = f"**{statistics.median(known):.2f}**" if known else "-"
        print(f"| {name} | " + " | ".join(shown) + f" | {med} |")
    print(f"| analysis: jobs run ({', '.join(str(len(r['jobs'])) for r in runs)}) |" + " |" * (a.n + 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
