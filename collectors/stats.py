"""librdkafka's statistics (``statistics.interval.ms``), to raw/stats/.

kdiag's probe producer writes them from its stats callback, one JSON object
a line; the rdkafka_log collector's status lists the file with the log.
"""
from __future__ import annotations

from pathlib import Path

from kdiag.collectors.base import PROBE, Collector

NAME = "stats"
FILE = "stats.jsonl"


def path(raw: Path) -> Path:
    return raw / LibrdkafkaStats.raw_dir / FILE


class LibrdkafkaStats(Collector):
    name = NAME
    raw_dir = "stats"
    requirements = ()
    modes = frozenset({PROBE})

    def producer_args(self) -> list[str]:
        return ["--stats", str(self.out_dir / FILE)]
