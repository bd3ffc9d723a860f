"""Bundles made from the checked-in fixtures, for tests that need more than
the one Nagle bundle: sealed by kdiag's own bundle writer."""
from __future__ import annotations

import json
import re
import shutil
import tarfile
from pathlib import Path

from conftest import CAPTURES, FIXTURES

ON = FIXTURES / "bundles" / "nagle_on.tar.gz"


def healthy_bundle(work: Path, name: str = "off.tar.gz") -> Path:
    """A healthy bundle from another run: the nagle_on bundle's frame with
    the nagle_off capture's log, strace, statistics and probe summary in
    it (its socket samples and the on-run's tables and report taken out),
    sealed anew."""
    from kdiag.bundle import archive

    staging = work / (name + ".staging")
    with tarfile.open(ON) as t:
        t.extractall(staging, filter="data")
    for gone in ("tables", "raw/sockets", "raw/probe", "findings.json", "report.txt"):
        p = staging / gone
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    for src, dest in (("rdkafka.log", "raw/rdkafka_log/rdkafka.log"), ("strace.txt", "raw/strace/strace.txt"),
                      ("stats.jsonl", "raw/stats/stats.jsonl")):
        shutil.copyfile(CAPTURES / "nagle_off" / src, staging / dest)
    noted = (CAPTURES / "nagle_off" / "CAPTURED").read_text()
    summary = json.loads(re.search(r"^probe summary: (\{.*\})$", noted, re.M).group(1))
    (staging / "raw" / "probe").mkdir()
    (staging / "raw" / "probe" / "summary.json").write_text(json.dumps(summary))
    manifest = json.loads((staging / "manifest.json").read_text())
    for stale in ("files", "tables", "parse", "input_checks"):   # of the on-run's tables
        manifest.pop(stale)
    manifest["producer_config"]["socket.nagle.disable"] = "true"
    out = archive.write(staging, work / name, manifest)
    shutil.rmtree(staging)
    return out
