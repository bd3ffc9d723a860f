"""librdkafka's own debug log and statistics, to raw/rdkafka_log/ and
raw/stats/ (the probe producer writes those: ``kdiag.collectors.stats``).

The log goes to the producer's stderr in librdkafka's native format (no
``logger=`` callback): then every line is written by the thread it describes,
the moment it happens, which is what places it among that thread's syscalls.
With a callback, lines are queued to the application and delivered only when
it calls poll()/flush().
"""
from __future__ import annotations

from pathlib import Path

from kdiag.collectors import stats
from kdiag.collectors.base import COMMAND, MODES, PROBE, Collector, CollectorStatus, settle

NAME = "rdkafka_log"
# protocol: Sent/Received/CorrId/rtt; broker: connects and state changes;
# msg: per-message batching decisions and where expired messages were;
# metadata: the errors in a metadata reply ("Topic t with 0 partitions:
# Broker: Unknown topic or partition") while messages wait for a topic.
DEBUG_CONTEXTS = "protocol,broker,msg,metadata"
STATS_INTERVAL_MS = 500


def producer_config(user: dict[str, str]) -> dict[str, str]:
    """The user's properties plus what the log and stats need; the user's
    own debug contexts are kept and ours added."""
    cfg = dict(user)
    have = {c for c in cfg.get("debug", "").split(",") if c}
    cfg["debug"] = ",".join(sorted(have | set(DEBUG_CONTEXTS.split(","))))
    cfg.setdefault("statistics.interval.ms", str(STATS_INTERVAL_MS))
    return cfg


def status(log_path: str, stats_path: str) -> CollectorStatus:
    return CollectorStatus(NAME, state="ok", files=[log_path, stats_path])


class RdkafkaLog(Collector):
    """The producer's stderr: kdiag's probe's debug log, or a wrapped
    command's own stderr (``stderr.log``; whatever its logger writes there).
    An attached producer's stderr is not kdiag's to read: the folder stays
    empty."""

    name = NAME
    raw_dir = "rdkafka_log"
    requirements = ()
    modes = MODES
    partial_without = frozenset({PROBE})

    def producer_config(self, config: dict[str, str]) -> dict[str, str]:
        return producer_config(config)

    def stderr_path(self) -> Path | None:
        return {PROBE: self.out_dir / "rdkafka.log", COMMAND: self.out_dir / "stderr.log"}.get(self.capture.mode)

    def stop(self, started_us: int, ended_us: int, interrupted: bool) -> None:
        if self.capture.mode == PROBE:
            self.record = status(str(self.stderr_path()), str(stats.path(self.capture.raw)))
            settle(self.record, started_us, ended_us, interrupted)
