"""Raw files -> tables -> findings: the one path that trace and replay share,
so a bundle replayed elsewhere gives the findings it gave on the host."""
from __future__ import annotations

from pathlib import Path

from kdiag import __version__
from kdiag.ingest.tables import Parsed, parse_paths


def analyse(raw: list[Path], tables_dir: Path, meta: dict | None = None, spark=None,
            base: Path | None = None) -> tuple[dict, Parsed]:
    starting = None if spark is not None else start_session(raw)
    parsed = parse_paths(raw, tables_dir, base=base)
    meta = {"kdiag_version": __version__, **(meta or {})}
    if starting is not None:
        spark = starting.result()
    from kdiag.analysis.job import analyze

    findings = analyze(spark, tables_dir, meta)
    findings["input_notes"] = parsed.notes
    findings["inputs"] = parsed.files
    from kdiag.analysis.input_checks import name_inputs

    findings["input_checks"] = name_inputs(findings.get("input_checks") or [], parsed.files)
    return findings, parsed


def start_session(raw: list[Path]):
    """The Spark session, started in a thread of its own: the JVM starts
    (seconds) while the captures are parsed. A future of the session."""
    from concurrent.futures import ThreadPoolExecutor

    from kdiag.analysis.spark import SMALL_RAW_BYTES, session

    size = 0
    for p in raw:
        try:
            size += Path(p).stat().st_size
        except OSError:
            pass
    pool = ThreadPoolExecutor(1, thread_name_prefix="kdiag-spark")
    future = pool.submit(session, small=size < SMALL_RAW_BYTES)
    pool.shutdown(wait=False)
    return future
