"""Small inputs to a verdict: ``kdiag replay`` of a 20-line librdkafka
excerpt, the 30-request fixture bundle and a 100-request bundle, wall time
from the command to its exit, cold (``KDIAG_WARM=0``: Spark starts in the
replay's own process) and warm (the warm analysis server already up): back
to back after the replay that started it, which interrupt its practice,
and after its practice.

    python -m bench.small_inputs [-n 5] [--bundle100 B.tar.gz] [--work DIR]

Without ``--bundle100`` a 100-request bundle is made first with
``kdiag trace --messages 100`` (the lab: root, strace, stunnel4, Tansu).
Bundles are replayed with ``--no-verify``: verification still runs (and is
timed), a bundle written before a table gained columns only warns.

References, in the same run (the machine's speed wanders from hour to hour:
bench/history/2026-11-30.md): for cold replays, Spark's floor (a fresh
process starts a small-input session, runs one job and stops:
``bench.verdict``), taken before each input's cold runs; for warm ones, a
fresh process's ping of the same warm server (Python's start, kdiag's
client imports, one round trip), taken after each input's warm runs. Any
other warm analysis server running when the bench starts is named in its
output: its practice takes a core.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import ROOT, Figure

# Seconds from the command to its exit, by input and by whether the warm
# server was up: the first replay is the one a user meets, on 2 cores.
GOALS_S = {("excerpt", "cold"): 4.0, ("bundle100", "cold"): 5.0,
           ("excerpt", "warm"): 1.5, ("bundle100", "warm"): 2.0, ("bundle30", "warm"): 3.0}
EXCERPT_LINES = 20


def make_excerpt(out: Path) -> Path:
    """The init line and the first 19 Produce request and response lines of
    the nagle_on capture: what a user pastes from a debug log."""
    log = (ROOT / "fixtures" / "captures" / "nagle_on" / "rdkafka.log").read_text().splitlines()
    lines = [ln for ln in log if "|INIT|" in ln][:1]
    lines += [ln for ln in log if "ProduceRequest" in ln or "ProduceResponse" in ln][:EXCERPT_LINES - len(lines)]
    out.write_text("\n".join(lines) + "\n")
    return out


def make_bundle100(work: Path) -> Path:
    out = work / "b100.tar.gz"
    subprocess.run([sys.executable, "-m", "kdiag", "trace", "--messages", "100", "-o", str(out)],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=600)
    return out


def replay_s(path: Path, env: dict, cwd: Path) -> float:
    t0 = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "kdiag", "replay", "--no-verify", str(path)], env=env, cwd=cwd,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
    took = time.monotonic() - t0
    if run.returncode != 0 or "VERDICT:" not in run.stdout:
        raise RuntimeError(f"replay of {path} failed ({run.returncode}): {run.stderr.strip()[-300:]}")
    if "note:" in run.stderr and env.get("KDIAG_WARM") == "1":
        raise RuntimeError(f"the warm replay of {path} fell back: {run.stderr.strip()[-300:]}")
    return took


_PING = r"""
import sys
from pathlib import Path
from kdiag.analysis.warm import Server
s = Server(Path(sys.argv[1]))
assert s.call({"op": "ping", "key": s.key}, 30)["ok"]
"""


def warm_floor_s(warm_dir: Path, env: dict, cwd: Path) -> float:
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", _PING, str(warm_dir)], env=env, cwd=cwd, check=True, timeout=60,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.monotonic() - t0


def other_servers() -> list[str]:
    """Warm analysis servers already running (another user's, an earlier
    measurement's): each one's practice takes a core from the runs."""
    import psutil

    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = p.info["cmdline"] or []
        if "kdiag.analysis.warm" in cmd and "--dir" in cmd:
            found.append(f"pid {p.info['pid']} in {cmd[cmd.index('--dir') + 1]}")
    return found


def measure(inputs: dict[str, Path], n: int, work: Path) -> list[dict]:
    # pip compiles an installed kdiag's modules; a checkout run with
    # PYTHONDONTWRITEBYTECODE would compile ~70 of them at every replay
    # (0.08 s of a warm one).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cold_env = {**env, "KDIAG_WARM": "0"}
    rows = []
    from bench.verdict import fresh_spark_floor

    for name, path in inputs.items():
        floors = [fresh_spark_floor() for _ in range(n)]
        cold = [replay_s(path, cold_env, work) for _ in range(n)]
        rows.append({"input": name, "mode": "cold", "runs": cold, "ref": floors, "ref_what": "Spark's floor"})
    # A server's practice (kdiag.analysis.warm_practice) runs after first use:
    # replays that follow at once interrupt it, later ones find it done.
    rows += _warm(inputs, n, work / "warm", env, practised=False)
    rows += _warm(inputs, n, work / "warm-practised", env, practised=True)
    return rows


def _warm(inputs: dict[str, Path], n: int, warm_dir: Path, env: dict, practised: bool) -> list[dict]:
    from kdiag.analysis.warm import LOCK_NAME, Server

    warm_dir.mkdir(mode=0o700, exist_ok=True)
    warm_env = {**env, "KDIAG_WARM": "1", "KDIAG_WARM_DIR": str(warm_dir)}
    first = replay_s(inputs["bundle30"], warm_env, warm_dir.parent)   # starts the server
    pid = (warm_dir / LOCK_NAME).read_text().split()[0]
    rows = []
    mode = "warm, after the practice" if practised else "warm, back to back after first use"
    try:
        if practised:
            t0 = time.monotonic()
            server = Server(warm_dir)
            while server.call({"op": "ping", "key": server.key}, 10).get("practising"):
                time.sleep(0.2)
            rows.append({"input": "bundle30", "mode": "first use (starts the server)", "runs": [first]})
            rows.append({"input": "bundle30", "mode": "its practice, from first use to done", "runs": [time.monotonic() - t0]})
        else:
            rows.append({"input": "bundle30", "mode": "first use (starts the server)", "runs": [first]})
        for name, path in inputs.items():
            runs = [replay_s(path, warm_env, warm_dir.parent) for _ in range(n)]
            rows.append({"input": name, "mode": mode, "runs": runs, "ref_what": "a fresh process's ping",
                         "ref": [warm_floor_s(warm_dir, warm_env, warm_dir.parent) for _ in range(n)]})
        if (warm_dir / LOCK_NAME).read_text().split()[0] != pid:
            raise RuntimeError("the warm server was restarted during the runs (its code changed): measure again")
    finally:
        Server(warm_dir).stop()
    return rows


def run(smoke: bool = False, work: Path | None = None, n: int = 5, bundle100: Path | None = None) -> list[Figure]:
    work = Path(work or tempfile.mkdtemp(prefix="kdiag-bench-small-"))
    work.mkdir(parents=True, exist_ok=True)
    inputs = {"excerpt": make_excerpt(work / "excerpt20.log"),
              "bundle30": ROOT / "fixtures" / "bundles" / "nagle_on.tar.gz"}
    if not smoke:
        inputs["bundle100"] = bundle100 or make_bundle100(work)
    rows = measure(inputs, 1 if smoke else n, work)
    figures = []
    for r in rows:
        med = statistics.median(r["runs"])
        goal_s = GOALS_S.get((r["input"], "cold" if r["mode"] == "cold" else
                              "warm" if r["mode"].startswith("warm") else r["mode"]))
        ref = r.get("ref")
        figures.append(Figure("small_inputs", f"replay {r['input']}, {r['mode']}: median s", round(med, 2), "s",
                              goal=None if goal_s is None else f"<= {goal_s}",
                              met=None if goal_s is None else med <= goal_s,
                              reference=r.get("ref_what"), ref_value=ref and round(statistics.median(ref), 2),
                              command="python -m bench.small_inputs",
                              note=f"runs {', '.join(f'{x:.2f}' for x in r['runs'])}; max {max(r['runs']):.2f}"
                                   + (f"; reference runs {', '.join(f'{x:.2f}' for x in ref)}" if ref else "")))
    return figures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.small_inputs", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=5, help="runs per input and mode (default 5)")
    ap.add_argument("--bundle100", type=Path, help="a 100-request bundle (default: make one in the lab)")
    ap.add_argument("--work", type=Path, help="scratch directory (default: a new temporary one)")
    a = ap.parse_args(argv)
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    for other in other_servers():
        print(f"another warm analysis server is running ({other}): its practice takes a core", flush=True)
    figures = run(work=a.work, n=a.n, bundle100=a.bundle100)
    print("| input | mode | runs (s) | median | max | reference (median s) | goal |\n|---|---|---|---|---|---|---|")
    for f in figures:
        what, mode = f.name.removeprefix("replay ").removesuffix(": median s").split(", ", 1)
        goal = "-" if f.goal is None else f"{f.goal} s: {'met' if f.met else 'not met'}"
        ref = "-" if f.ref_value is None else f"{f.reference} {f.ref_value:.2f}"
        print(f"| {what} | {mode} | {f.note.split(';')[0].removeprefix('runs ')} | **{f.value:.2f}** "
              f"| {f.note.split('max ')[1].split(';')[0]} | {ref} | {goal} |")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
