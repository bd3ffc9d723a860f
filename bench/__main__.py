"""python -m bench [--smoke] [--only NAME ...] [-o results.json]"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path

from bench.common import ROOT, machine

BENCHES = ("parse", "wire", "overhead", "hosttax", "analysis", "verdict")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    ap.add_argument("--smoke", action="store_true", help="small sizes: shows the benchmarks work")
    ap.add_argument("--only", nargs="+", choices=BENCHES, default=list(BENCHES))
    ap.add_argument("-o", "--output", type=Path, default=ROOT / "bench" / "results" / "latest.json")
    ap.add_argument("--work", type=Path, default=None, help="scratch directory (default: a temporary one)")
    args = ap.parse_args(argv)

    import tempfile

    figures = []
    with tempfile.TemporaryDirectory(prefix="kdiag-bench-", dir=args.work) as tmp:
        for name in args.only:
            mod = importlib.import_module(f"bench.{name}")
            t0 = time.monotonic()
            got = mod.run(smoke=args.smoke, work=Path(tmp) / name)
            for f in got:
                figures.append(f)
                print(_line(f), flush=True)
            print(f"[{name}: {time.monotonic() - t0:.1f} s]", file=sys.stderr, flush=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({"machine": machine(), "smoke": args.smoke,
                                       "figures": [f.to_dict() for f in figures]}, indent=1) + "\n")
    print(f"results: {args.output}")
    return 0 if all(f.value is not None for f in figures) else 1


def _line(f) -> str:
    val = "n/a" if f.value is None else f"{f.value:,.4g}"
    ref = "" if f.ref_value is None else f"  ref {f.reference}: {f.ref_value:,.4g}"
    goal = "" if f.goal is None else f"  goal {f.goal}: {'met' if f.met else 'NOT met' if f.met is False else '?'}"
    return f"{f.bench:9} {f.name:40} {val:>12} {f.unit}{ref}{goal}"


if __name__ == "__main__":
    sys.exit(main())
