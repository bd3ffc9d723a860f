"""Entry point for spark-submit, as on a cluster:

    spark-submit kdiag/analysis/__main__.py --tables DIR --out findings.json
    spark-submit kdiag/analysis/__main__.py --bundle B.tar.gz --out findings.json

``--bundle`` reads the bundle as ``kdiag replay`` does (verified, its
captures parsed, its manifest's librdkafka version and its probe's summary
and retransmits with them): the findings are replay's. Tables alone carry
none of the bundle's metadata.

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


def tables_dir(arg: str) -> Path:
    """``--tables`` as a local directory: a path or a file:// URI. The job
    reads each table's footer, and a small table whole, on the driver, so
    another filesystem (hdfs://, s3a://) is refused in words, as is a
    directory without one table the job reads: that is an error, not an
    input without data."""
    from urllib.parse import unquote, urlparse

    from kdiag.analysis.job import TABLES

    if "://" in arg:
        uri = urlparse(arg)
        if uri.scheme != "file" or uri.netloc not in ("", "localhost"):
            raise ValueError(f"{arg}: the tables are read from a local directory or a file:// URI, not from "
                             f"{uri.scheme}://{uri.netloc}; copy them to a local directory first")
        arg = unquote(uri.path)
    path = Path(arg)
    if not path.is_dir():
        raise ValueError(f"{arg}: no such directory")
    if not any((path / f"{name}.parquet").is_file() for name in TABLES):
        raise ValueError(f"{arg}: none of the tables the analysis reads is there "
                         f"({', '.join(f'{n}.parquet' for n in TABLES)}); kdiag parse writes them")
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kdiag/analysis/__main__.py")
    given = ap.add_mutually_exclusive_group(required=True)
    given.add_argument("--tables", help="directory of <table>.parquet files (a path or a file:// URI)")
    given.add_argument("--bundle", help="a bundle (a path or a file:// URI), read as kdiag replay reads it")
    ap.add_argument("--out", help="write findings JSON here (default: stdout)")
    a = ap.parse_args(argv)
    if a.bundle is not None:
        result = _replayed(ap, a.bundle)
    else:
        try:
            tables = tables_dir(a.tables)
        except ValueError as e:
            ap.error(str(e))
        from kdiag.analysis.job import analyze
        from kdiag.analysis.spark import session

        result = analyze(session("kdiag-analysis"), tables)
    text = json.dumps(result, indent=2, default=str)
    if a.out:
        Path(a.out).write_text(text)
    else:
        print(text)
    return 0


def _replayed(ap: argparse.ArgumentParser, bundle: str) -> dict:
    """replay's findings of ``bundle``, analysed in this process's Spark
    (spark-submit's): its --json output, read back."""
    import io

    from kdiag.analysis.spark import session
    from kdiag.cli import Environment
    from kdiag.cli import main as kdiag

    session("kdiag-analysis")   # spark-submit's gateway; replay then finds a session and stays here
    out, err = io.StringIO(), io.StringIO()
    rc = kdiag(["replay", "--json", "--no-warm", bundle], Environment(stdout=out, stderr=err))
    sys.stderr.write(err.getvalue())
    if not out.getvalue():
        ap.exit(rc or 1, f"{ap.prog}: {bundle}: no findings (kdiag replay exited {rc})\n")
    return json.loads(out.getvalue())


if __name__ == "__main__":
    sys.exit(main())
