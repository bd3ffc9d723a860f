"""Mutation fuzzing of every parser, from the real inputs in fuzz/seeds/.

    python3 -m fuzz.mutate --lines 1000000 [--seed N] [--parser all|NAME]
    python3 -m fuzz.mutate --replay FILE --parser NAME

Each target takes lines of its seeds, mutates them (byte flips, cuts,
duplicated and removed spans, two lines spliced or interleaved, random bytes
with NUL and invalid UTF-8, lines of about 1 MB, numbers swapped for huge,
negative or float ones, fields swapped, JSON values of the wrong type) and
feeds them in batches, decoded the way kdiag.ingest.lines decodes a file. A
failure is any exception out of a parser, or counts that do not add up
(``lines == parsed + skipped``, one line counted per line fed, the table's
rows consistent with ``parsed``). The input of each distinct failure is
saved, with a minimised copy, for ``--replay``.

Targets: rdkafka_log, strace, stats, sockets; tcp_probe_pcap (mutated pcap
and pcapng files; "lines" are the records the parser counted),
probes_jsonl and handshakes_jsonl (``--parser tcp_probe`` runs the three);
detect (sample files through kdiag.ingest.detect.detect, kdiag.ingest.lines's
sniff and iter_line_chunks, and every format's line score). Everything is derived from ``--seed``: the same
seed gives the same inputs.
"""
from __future__ import annotations


import argparse
import json
import math
import random
import re
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
# decode_block and _seed_lines are read here by the tests too.
from fuzz.common import CRASH_DIR, Failure, _seed_lines, decode_block  # noqa: F401
from fuzz.line_targets import (
    DetectTarget,
    HandshakesJsonTarget,
    ProbesJsonTarget,
    RdkafkaTarget,
    SocketsTarget,
    StatsTarget,
    StraceTarget,
)
from fuzz.pcap_target import PcapTarget


@dataclass
class Result:
    target: str
    lines: int = 0
    inputs: int = 0
    parsed: int = 0
    skipped: Counter = field(default_factory=Counter)
    crashes: int = 0
    failures: dict = field(default_factory=dict)   # signature -> saved file
    elapsed: float = 0.0


TARGETS: dict[str, type] = {
    t.name: t for t in (RdkafkaTarget, StraceTarget, StatsTarget, SocketsTarget, PcapTarget, ProbesJsonTarget,
                        HandshakesJsonTarget, DetectTarget)
}
GROUPS = {"all": list(TARGETS), "tcp_probe": ["tcp_probe_pcap", "probes_jsonl", "handshakes_jsonl"]}


def batch_size(name: str, default: int) -> int:
    # Statistics lines are ~4 KB each; keep a batch's memory modest.
    return min(default, 2000) if name in ("stats", "sockets") else default

# ---------------------------------------------------------------- running

def _signature(exc: BaseException) -> str:
    if isinstance(exc, Failure):
        return "invariant: " + re.sub(r"\d+", "N", str(exc))
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if "/parsers/" in f.filename or "/kdiag/" in f.filename] or frames
    f = own[-1] if own else None
    where = f"{Path(f.filename).name}:{f.lineno}" if f else "?"
    return f"{type(exc).__name__} at {where}"


def _fails(target, data: bytes, variant: dict, sig: str) -> bool:
    try:
        target.run(data, variant)
    except Exception as e:  # noqa: BLE001
        return _signature(e) == sig
    return False


def minimise(target, data: bytes, variant: dict, sig: str, budget_s: float = 60.0) -> bytes:
    """The smallest set of lines found (delta debugging on lines) that
    still fails with the same signature."""
    if isinstance(target, PcapTarget):
        return data
    units = data.split(b"\n")
    deadline = time.monotonic() + budget_s
    n = 2
    while len(units) >= 2 and time.monotonic() < deadline:
        size = math.ceil(len(units) / n)
        for i in range(n):
            cand = units[: i * size] + units[(i + 1) * size:]
            if cand and _fails(target, b"\n".join(cand), variant, sig):
                units = cand
                n = max(n - 1, 2)
                break
        else:
            if n >= len(units):
                break
            n = min(len(units), 2 * n)
    return b"\n".join(units)


def run_target(name: str, lines: int, seed: int = 0, batch: int = 10_000, crash_dir: Path | None = CRASH_DIR,
               log: Callable[[str], None] | None = None, minimise_s: float = 60.0) -> Result:
    """Feed `lines` mutated lines (records for pcaps) to one target."""
    rng = random.Random(f"{seed}:{name}")
    target = TARGETS[name](rng)
    res = Result(name)
    batch = batch_size(name, batch)
    t0 = time.monotonic()
    k = 0
    while res.lines < lines:
        data = target.make_input(min(batch, lines - res.lines))
        variant = target.variant(rng)
        k += 1
        res.inputs += 1
        try:
            fed, counts = target.run(data, variant)
        except Exception as e:  # noqa: BLE001  (anything out of a parser is a finding)
            res.crashes += 1
            res.lines += max(1, data.count(b"\n") + 1) if name != "tcp_probe_pcap" else 1
            sig = _signature(e)
            if sig not in res.failures:
                res.failures[sig] = _save(target, name, seed, k - 1, data, variant, e, sig, crash_dir, minimise_s,
                                          log)
            continue
        res.lines += fed
        if counts is not None:
            res.parsed += counts.parsed
            res.skipped.update(counts.skipped)
    res.elapsed = time.monotonic() - t0
    return res


def _save(target, name, seed, k, data, variant, exc, sig, crash_dir, minimise_s, log) -> str | None:
    tb = "".join(traceback.format_exception(exc))
    if log:
        log(f"{name}: {sig}\n{tb}")
    if crash_dir is None:
        return None
    crash_dir.mkdir(parents=True, exist_ok=True)
    stem = crash_dir / f"{name}-seed{seed}-input{k}"
    stem.with_suffix(".bin").write_bytes(data)
    stem.with_suffix(".json").write_text(json.dumps({"parser": name, "variant": variant}) + "\n")
    small = minimise(target, data, variant, sig, minimise_s)
    stem.with_suffix(".min.bin").write_bytes(small)
    stem.with_suffix(".txt").write_text(f"{sig}\n\n{tb}")
    if log:
        log(f"{name}: saved {stem}.bin (minimised: {stem}.min.bin, {len(small)} bytes)")
    return str(stem) + ".min.bin"


def _sidecar(path: Path) -> dict:
    """The .json saved with a failing input: its parser and variant."""
    stem = path.name.split(".")[0]
    side = path.with_name(stem + ".json")
    return json.loads(side.read_text()) if side.exists() else {}


def replay(name: str | None, path: Path) -> int:
    side = _sidecar(path)
    name = name or side.get("parser")
    if name not in TARGETS:
        print("--replay needs --parser NAME (no .json beside the file)", file=sys.stderr)
        return 2
    target = TARGETS[name](random.Random(0))
    try:
        fed, counts = target.run(path.read_bytes(), side.get("variant"))
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        return 1
    print(f"{name}: {fed} lines, no failure" + (f", {counts.to_dict()['skipped']}" if counts else ""))
    return 0


def format_result(r: Result) -> str:
    skipped = ", ".join(f"{k}={v}" for k, v in sorted(r.skipped.items())) or "-"
    unit = "records" if r.target == "tcp_probe_pcap" else "lines"
    s = (f"{r.target:17s} {unit} {r.lines:>9,d}  inputs {r.inputs:>6,d}  crashes {r.crashes}  "
         f"parsed {r.parsed:,d}  {r.elapsed:7.1f} s\n{'':18s}skipped: {skipped}")
    for sig, where in r.failures.items():
        s += f"\n{'':18s}FAILURE {sig}: {where}"
    return s


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m fuzz.mutate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=100_000, help="lines per target (records for pcaps)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--parser", choices=[*GROUPS, *TARGETS], help="default: all")
    ap.add_argument("--batch", type=int, default=10_000, help="lines per parse call")
    ap.add_argument("--crash-dir", type=Path, default=CRASH_DIR)
    ap.add_argument("--replay", type=Path, help="re-run one saved input against --parser")
    a = ap.parse_args(argv)
    if a.replay:
        if a.parser in GROUPS:
            ap.error("--replay needs one --parser")
        return replay(a.parser, a.replay)
    names = GROUPS.get(a.parser or "all", [a.parser])
    total, crashes = 0, 0
    for name in names:
        r = run_target(name, a.lines, a.seed, a.batch, a.crash_dir, log=lambda s: print(s, file=sys.stderr))
        print(format_result(r), flush=True)
        total += r.lines
        crashes += r.crashes
    print(f"total: {total:,d} lines, {crashes} crashes, seed {a.seed}")
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
