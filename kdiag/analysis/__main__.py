"""Entry point for spark-submit, as on a cluster:

    spark-submit kdiag/analysis/__main__.py --tables DIR --out findings.json

(``python -m kdiag.analysis`` runs the same). Imports are absolute: run as
a file, this folder is not a package to Python."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# Run as a file, Python puts this folder first on sys.path, where its
# modules (spark, job, ...) would shadow any top-level module of that name.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kdiag/analysis/__main__.py")
    ap.add_argument("--tables", required=True, help="directory of <table>.parquet files")
    ap.add_argument("--out", help="write findings JSON here (default: stdout)")
    a = ap.parse_args(argv)
    from kdiag.analysis.job import analyze
    from kdiag.analysis.spark import session

    result = analyze(session("kdiag-analysis"), Path(a.tables))
    text = json.dumps(result, indent=2, default=str)
    if a.out:
        Path(a.out).write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
