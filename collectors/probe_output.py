"""What kdiag's probe producer measured itself, to raw/probe/: one JSON line
per message (``messages.jsonl``) and the run's summary (``summary.json``:
delivered, failed, the brokers of the cluster metadata, ...).

Not analysed as a capture: the summary is the report's probe section and
names the brokers the path probe goes to.
"""
from __future__ import annotations

import json
from pathlib import Path

from kdiag.collectors.base import PROBE, Collector

NAME = "probe_output"


def summary_path(raw: Path) -> Path:
    return raw / ProbeOutput.raw_dir / "summary.json"


def read_summary(raw: Path) -> dict | None:
    """The probe's summary; None when it wrote none (killed, or it failed)."""
    try:
        return json.loads(summary_path(raw).read_text())
    except (OSError, ValueError):
        return None


class ProbeOutput(Collector):
    name = NAME
    raw_dir = "probe"
    requirements = ()
    modes = frozenset({PROBE})

    def producer_args(self) -> list[str]:
        return ["--results", str(self.out_dir / "messages.jsonl"), "--summary", str(self.out_dir / "summary.json")]

    def inputs(self) -> list[Path]:
        return []
