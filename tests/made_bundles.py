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
    noted = (CAPTURES / "nagle_off" / "CAPTURED").read_text()
    summary = json.loads(re.search(r"^probe summary: (\{.*\})$", noted, re.M).group(1))
    return bundle_of(work, name, {"raw/rdkafka_log/rdkafka.log": CAPTURES / "nagle_off" / "rdkafka.log",
                                  "raw/strace/strace.txt": CAPTURES / "nagle_off" / "strace.txt",
                                  "raw/stats/stats.jsonl": CAPTURES / "nagle_off" / "stats.jsonl"},
                     probe=summary, config={"socket.nagle.disable": "true"},
                     drop=("tables", "raw/sockets", "raw/probe", "findings.json", "report.txt"))


def bundle_of(work: Path, name: str, files: dict, probe: dict | None = None, config: dict | None = None,
              drop: tuple = ("tables", "raw", "findings.json", "report.txt")) -> Path:
    """A bundle of ``files`` (its path in the bundle -> the file to put
    there) in the nagle_on bundle's frame, what ``drop`` names of that one
    taken out (by default every raw capture, its tables and report), sealed
    anew; ``probe``: its probe's summary."""
    from kdiag.bundle import archive

    staging = work / (name + ".staging")
    with tarfile.open(ON) as t:
        t.extractall(staging, filter="data")
    for gone in drop:
        p = staging / gone
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    for dest, src in files.items():
        (staging / dest).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, staging / dest)
    if probe is not None:
        (staging / "raw" / "probe").mkdir(parents=True, exist_ok=True)
        (staging / "raw" / "probe" / "summary.json").write_text(json.dumps(probe))
    manifest = json.loads((staging / "manifest.json").read_text())
    for stale in ("files", "tables", "parse", "input_checks"):   # of the on-run's tables
        manifest.pop(stale)
    manifest["producer_config"].update(config or {})
    out = archive.write(staging, work / name, manifest)
    shutil.rmtree(staging)
    return out
