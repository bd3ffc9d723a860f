"""A fleet of bundles into tables keyed by bundle_id (``kdiag.fleet.ingest``:
read where they lie, verified, unpacked and parsed on the executors), at
1, 10, 100 and 1000 bundles, in local mode and on a standalone master with
two one-core workers on loopback. The analysis of the fleet's tables is
not yet in this figure: the ingest is.

    python -m bench.fleet --sources SOURCE.tar.gz... [--sizes 1,10,100,1000] [--work DIR]

The bundles are made by ``bench.fleet_bundles`` from the sources (the lab's
bundles: ``kdiag lab matrix -o DIR``, ``kdiag trace --messages 1000``).
Each figure is one driver process: the seconds of ``ingest`` (Spark's
session already up) and the peak memory of every process of the run
together (the driver's Python and JVM; on the cluster also the master, the
workers and their executors), sampled every 0.2 s.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.common import Figure

DRIVER = r"""
import json, os, sys, time
if sys.argv[1] != "local":
    os.environ["KDIAG_SPARK_MASTER"] = sys.argv[1]
from kdiag.analysis.spark import session
from kdiag.fleet.ingest import ingest
spark = session("kdiag-fleet-bench")
sc = spark.sparkContext
want = int(sys.argv[2])
deadline = time.monotonic() + 90
while sc._jsc.sc().getExecutorMemoryStatus().size() < want and time.monotonic() < deadline:
    time.sleep(0.2)
t = time.monotonic()
got = ingest(spark, [sys.argv[4]], sys.argv[3])
states = {r.state: r["count"] for r in got.bundles.groupBy("state").count().collect()}
took = time.monotonic() - t
rows = got.tables["syscalls"].count()
print(json.dumps({"ingest_s": took, "states": states, "syscalls_rows": rows}))
"""


def _tree_rss(pids: list[int]) -> int:
    import psutil

    total, seen = 0, set()
    for pid in pids:
        try:
            p = psutil.Process(pid)
            procs = [p] + p.children(recursive=True)
        except psutil.NoSuchProcess:
            continue
        for q in procs:
            if q.pid in seen:
                continue
            seen.add(q.pid)
            try:
                total += q.memory_info().rss
            except psutil.NoSuchProcess:
                pass
    return total


def run_one(master: str, executors: int, bundles: Path, work: Path, watch: list[int]) -> dict:
    peak = [0]
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, master, str(executors + 1), work.as_uri(), str(bundles)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], _tree_rss([proc.pid, *watch]))
            time.sleep(0.2)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    out, err = proc.communicate(timeout=3600)
    done.set()
    th.join()
    if proc.returncode != 0:
        raise RuntimeError(f"fleet ingest of {bundles} failed: {err[-2000:]}")
    got = json.loads(out.strip().splitlines()[-1])
    got["peak_mib"] = peak[0] / (1 << 20)
    return got


def bench(sources: list[Path], sizes: list[int], work: Path, cluster: bool = True) -> list[Figure]:
    from bench.fleet_bundles import generate

    figures = []
    dirs = {}
    for n in sizes:
        d = work / f"fleet-{n}"
        if not d.is_dir() or len(list(d.glob("*.tar.gz"))) != n:
            generate(sources, n, d)
        dirs[n] = d
    modes = [("local", None)]
    if cluster:
        modes.append(("cluster", "loopback"))
    for mode, _ in modes:
        ctx = _cluster(work) if mode == "cluster" else _Local()
        with ctx as c:
            for n in sizes:
                got = run_one(c.master, c.executors, dirs[n], work / f"out-{mode}-{n}", c.pids)
                mb = sum(p.stat().st_size for p in dirs[n].glob("*.tar.gz")) / 1e6
                figures.append(Figure(
                    "fleet", f"ingest of {n} bundles ({mb:.0f} MB), {mode}", round(got["ingest_s"], 2), "s",
                    command=f"python -m bench.fleet --sizes {n}",
                    note=f"peak memory {got['peak_mib']:.0f} MiB (all processes); bundles {got['states']}; "
                         f"{got['syscalls_rows']} syscall rows"))
    return figures


class _Local:
    master, executors, pids = "local", 0, []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _cluster:
    def __init__(self, work: Path) -> None:
        self.work = work

    def __enter__(self):
        from kdiag.fleet.loopback import standalone

        self._cm = standalone(self.work / "cluster")
        c = self._cm.__enter__()
        self.master, self.executors, self.pids = c.master, 2, c.pids
        return self

    def __exit__(self, *exc):
        return self._cm.__exit__(*exc)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.fleet", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sources", nargs="+", type=Path, required=True)
    ap.add_argument("--sizes", default="1,10,100,1000")
    ap.add_argument("--work", type=Path)
    ap.add_argument("--no-cluster", action="store_true", help="local mode only")
    a = ap.parse_args(argv)
    work = a.work or Path(tempfile.mkdtemp(prefix="kdiag-bench-fleet-"))
    sizes = [int(x) for x in a.sizes.split(",")]
    print("| bundles | mode | ingest (s) | note |\n|---|---|---|---|")
    for f in bench(a.sources, sizes, work, cluster=not a.no_cluster):
        print(f"| {f.name} | | **{f.value}** | {f.note} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
