"""librdkafka's own debug log and statistics, to raw/rdkafka_log/ and
raw/stats/.

The log goes to the producer's stderr in librdkafka's native format (no
``logger=`` callback): then every line is written by the thread it describes,
the moment it happens, which is what places it among that thread's syscalls.
With a callback, lines are queued to the application and delivered only when
it calls poll()/flush().
"""
from __future__ import annotations

from kdiag.collectors.base import CollectorStatus

NAME = "rdkafka_log"
# protocol: Sent/Received/CorrId/rtt; broker: connects and state changes;
# msg: per-message batching decisions.
DEBUG_CONTEXTS = "protocol,broker,msg"
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
