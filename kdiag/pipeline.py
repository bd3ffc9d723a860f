"""Raw files -> tables -> findings: the one path that trace and replay share,
so a bundle replayed elsewhere gives the findings it gave on the host."""
from __future__ import annotations

from pathlib import Path

from kdiag import __version__
from kdiag.tables import Parsed, parse_paths


def analyse(raw: list[Path], tables_dir: Path, meta: dict | None = None, spark=None,
            base: Path | None = None) -> tuple[dict, Parsed]:
    parsed = parse_paths(raw, tables_dir, base=base)
    meta = {"kdiag_version": __version__, **(meta or {})}
    if spark is None:
        from kdiag.spark import SMALL_INPUT_BYTES, session, tables_bytes
        spark = session(small=tables_bytes(tables_dir) < SMALL_INPUT_BYTES)
    from kdiag.analysis import analyze

    findings = analyze(spark, tables_dir, meta)
    findings["input_notes"] = parsed.notes
    findings["inputs"] = parsed.files
    from kdiag.quality import name_inputs

    findings["input_checks"] = name_inputs(findings.get("input_checks") or [], parsed.files)
    return findings, parsed
