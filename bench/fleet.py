"""``kdiag fleet`` at 1, 10, 100 and 1000 bundles, in local mode and on a
standalone master with two one-core workers on loopback: the bundles read
where they lie and parsed on the executors (``kdiag.fleet.ingest``), every
bundle judged in one pass keyed by bundle_id (``kdiag.fleet.judge``), the
results written as Parquet.

    python -m bench.fleet --sources SOURCE.tar.gz... [--sizes 1,10,100,1000] [--work DIR]

The bundles are made by ``bench.fleet_bundles`` from the sources (the lab's
bundles: ``kdiag lab matrix -o DIR``, ``kdiag trace --messages 1000``).
Each figure is one driver process: the seconds of ``fleet`` (Spark's
session already up), split into its stages, and the peak memory of every
process of the run together (the driver's Python and JVM; on the cluster
also the master, the workers and their executors), sampled every 0.2 s.
A bundle's captures are its source's, byte for byte, so every bundle made
from one source must get one verdict: the note says how many sources got
more than one.
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
import json, os, sys, tarfile, time
if sys.argv[1] != "local":
    os.environ["KDIAG_SPARK_MASTER"] = sys.argv[1]
from kdiag.analysis.spark import session
from kdiag.fleet.job import fleet
spark = session("kdiag-fleet-bench")
sc = spark.sparkContext
want = int(sys.argv[2])
deadline = time.monotonic() + 90
while sc._jsc.sc().getExecutorMemoryStatus().size() < want and time.monotonic() < deadline:
    time.sleep(0.2)
t = time.monotonic()
got = fleet([sys.argv[4]], sys.argv[3] + "/work", sys.argv[3] + "/out", spark=spark)
took = time.monotonic() - t
rows = spark.read.parquet(sys.argv[3] + "/out/bundles").select("source", "state", "verdict").collect()
verdicts = {}
for r in rows:
    with tarfile.open(r.source.replace("file:", "", 1)) as tar:
        src = json.load(tar.extractfile("manifest.json")).get("generated_from")
    verdicts.setdefault(src, set()).add(r.verdict)
states = {}
for r in rows:
    states[r.state] = states.get(r.state, 0) + 1
print(json.dumps({"fleet_s": took, "stages": got["stage_seconds"], "states": states, "judged": got["judged"],
                  "split_sources": sorted(k for k, v in verdicts.items() if len(v) > 1)}))
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
        raise RuntimeError(f"kdiag fleet of {bundles} failed: {err[-2000:]}")
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
                    "fleet", f"{n} bundles ({mb:.0f} MB), {mode}", round(got["fleet_s"], 2), "s",
                    command=f"python -m bench.fleet --sizes {n}",
                    note=f"stages (s) {got['stages']}; peak memory {got['peak_mib']:.0f} MiB (all processes); "
                         f"bundles {got['states']}, {got['judged']} judged; sources with more than one verdict: "
                         f"{len(got['split_sources'])}"))
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
    print("| bundles | mode | kdiag fleet (s) | note |\n|---|---|---|---|")
    for f in bench(a.sources, sizes, work, cluster=not a.no_cluster):
        print(f"| {f.name} | | **{f.value}** | {f.note} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
