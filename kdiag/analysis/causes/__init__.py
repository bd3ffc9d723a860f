"""The causes kdiag names, one module each, and the classification built
from them.

A cause module declares:

- ``NAME``: the cause as findings and docs/causes.md name it;
- ``rule(x: RuleInputs)``: the Spark Column condition a request meets to
  take this cause, or ``None`` for a cause judged over the run
  (``from_signals``) or given to what no rule takes (``healthy``);
- ``LABEL`` (optional): the label the rule gives, when one rule serves two
  causes told apart over the whole run (``slow_wait``, see ``_slow_wait``);
- ``COLUMNS``: the request columns its rule reads;
- ``SUMMED``: the columns summed over its requests for its evidence
  (median and maximum in ``CauseAgg.p50`` / ``CauseAgg.max``);
- ``EXAMPLE_COLUMNS``: the columns of its example request its evidence reads;
- ``TAIL``: a few requests stalled long: named by its share of the time;
- ``MEETS``: a request (column -> value, ``path_rtt_ms`` for the run's
  path) that takes this cause, or None for a cause judged on the driver:
  tests/test_registry_causes.py classifies it (a tail cause's request among
  fast ones);
- ``fix(version)``: librdkafka properties that fix it, for a version tuple
  (or None when unknown);
- ``evidence(facts)`` and ``fix_text(facts)``: the sentences users read;
- ``COLOUR``: the colour charts and reports draw it in (``colour_of``);
- ``PART``: what of a message's time its fix takes out, which predict.py
  predicts the fix's effect from: ``"wait"``, the wait of the requests it
  holds (replaced by the wait of requests nothing holds); ``"queue"``, the
  messages' time in librdkafka's queue before the request; None, nothing a
  setting takes out (no prediction);
- ``SIGNATURE`` and ``FIX_DOC``: its row in docs/causes.md (Markdown), which
  ``python -m kdiag.analysis.causes`` writes.

Optional hooks (``HOOKS``), each looked up where it is used:

- ``from_signals(facts: Facts) -> dict | None``: the cause judged over the
  run, not per request: from librdkafka's other lines (signals.py) or the
  run's statistics. ``{"requests": int, "share": float, "time_share":
  float}`` (shares in 0..1) and ``"rests_on"``: the ``EVIDENCE`` kinds it
  was judged from (``LOG_LINES`` when absent), or None when the run does
  not show it;
  judge.signal_findings makes it a finding, or adds to the finding its
  requests gave. A cause with it declares ``RUN_MEETS``: Facts fields
  (``meta``'s ``signals`` among them) of a run it names this cause in;
  tests/test_registry_causes.py judges it;
- ``signal_evidence(facts) -> list[str]``: the sentences of a finding
  ``from_signals`` gave (``evidence`` when absent);
- ``signal_fix(facts) -> dict``: the properties to set for a finding
  ``from_signals`` gave, when its evidence calls for other than ``fix``'s;
- ``ALSO_RESTS_ON``: what a finding its requests gave rests on besides
  them, when the run has it (``STATISTICS``, ``PATH``): what its rule reads;
- ``likely(thin: ThinEvidence) -> tuple[int, str, str] | None``: when the
  evidence is thin (no syscalls), how likely the cause is (a score, higher
  first, against the other causes' scores), what supports it and the
  capture that would decide it (likely_causes.rank).

``ORDER`` names them in rule priority: a request takes the first cause
whose rule it meets. Adding a cause is one module plus one line there
(then ``python -m kdiag.analysis.causes > docs/causes.md``).
"""
from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from types import ModuleType

from kdiag.analysis.causes import _captures, _slow_wait
from kdiag.analysis.thresholds import DOMINANT_SHARE, NAGLE_EXCESS_MAX_MS, NAGLE_EXCESS_MIN_MS, SLOW_MS, TAIL_TIME_SHARE

ORDER = (
    # Checked first: under KIP-219 a throttled broker answers at once, then
    # stalls the next request, which would pass for any other cause.
    "throttled",
    # Before Nagle: a thread that waits for a core sees every other stall
    # (a held send, a slow response) only late as well.
    "client_cpu",
    "nagle_in_path",
    "nagle_delayed_ack",
    "network_latency",
    "packet_loss",
    "broker_slow",
    # A request without syscalls that none of the above takes from its rtt
    # and the path: slow, and nothing here to say why.
    "unexplained_slow",
    "client_queueing",
    # Judged over the run from librdkafka's other lines (signals.py), not
    # per completed request: an excerpt may hold no completed request.
    "request_timeout",
    # A connection's life (life.py), judged over the run: what held the
    # messages before any request existed.
    "dns_slow",
    "connect_slow",
    "tls_handshake_slow",
    "sasl_slow",
    "broker_down",
    "metadata_wait",
    "retry_backoff",
    "small_batches",
    "healthy",
)
REQUIRED = ("NAME", "TAIL", "COLUMNS", "SUMMED", "EXAMPLE_COLUMNS", "MEETS", "rule", "fix", "evidence",
            "fix_text", "COLOUR", "PART", "SIGNATURE", "FIX_DOC")
HOOKS = ("from_signals", "signal_evidence", "signal_fix", "likely")
PARTS = ("wait", "queue", None)
# What a finding rests on (its ``rests_on``), as the reports name them.
REQUESTS, SYSCALLS, STATISTICS, PATH = "requests", "syscalls", "statistics", "path"
ERROR_LINES, LOG_LINES, SOCKET_SAMPLES, PACKETS = "error lines", "log lines", "socket samples", "packets"
EVIDENCE = (REQUESTS, SYSCALLS, STATISTICS, PATH, ERROR_LINES, LOG_LINES, SOCKET_SAMPLES, PACKETS)
# The captures that decide (``_captures``), for what an undecided run says
# to capture next.
CAPTURE_PATH, CAPTURE_STATS, CAPTURE_LOG = _captures.PATH, _captures.STATS, _captures.DEBUG_MSG
# A name no module declares (a stranger's findings, "none" in a fleet's
# table) is drawn in grey.
UNKNOWN_COLOUR = "#b0b7c0"
# What no rule takes.
OTHERWISE = "healthy"
# Every example request carries these (pid and the run's bounds fill in its
# write sizes).
EXAMPLE_BASE = ("cause", "broker", "corr_id", "n_writes", "write_sizes", "wait_ms", "rtt_ms", "send_line",
                "recv_line", "fd", "pid")


def load(names=ORDER) -> tuple[ModuleType, ...]:
    return tuple(importlib.import_module(f"{__name__}.{name}") for name in names)


CAUSES = load()
BY_NAME = {c.NAME: c for c in CAUSES}
TAIL_CAUSES = tuple(c.NAME for c in CAUSES if c.TAIL)
FIXES = {c.NAME: c.fix(None) for c in CAUSES}


def colour_of(name: str) -> str:
    cause = BY_NAME.get(name)
    return cause.COLOUR if cause is not None else UNKNOWN_COLOUR


def part_of(name: str) -> str | None:
    """What of a message's time the cause's fix takes out (``PART``); None
    for a name no module declares."""
    cause = BY_NAME.get(name)
    return cause.PART if cause is not None else None


def label_of(cause: ModuleType) -> str:
    return getattr(cause, "LABEL", cause.NAME)


def summed_columns() -> list[str]:
    return list(dict.fromkeys(col for c in CAUSES for col in c.SUMMED))


def example_columns() -> list[str]:
    return list(dict.fromkeys([*EXAMPLE_BASE, *(col for c in CAUSES for col in c.EXAMPLE_COLUMNS)]))


def version_tuple(v: str | None) -> tuple[int, ...] | None:
    if not v:
        return None
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", v)
    return tuple(int(x) for x in m.groups()) if m else None


@dataclass(frozen=True)
class RuleInputs:
    """What a rule is built from: the request's columns (null where the
    frame lacks one: no thread samples, no statistics) and the run's facts."""
    columns: frozenset
    path_rtt_ms: object           # float | None, or a Column: each run of a fleet its own
    nagle_possible: object = True  # bool, or a Column

    def col(self, name: str):
        from pyspark.sql import functions as F

        return F.col(name) if name in self.columns else F.lit(None)

    @property
    def wait(self):
        return self.col("wait_ms")

    @property
    def total(self):
        return self.col("total_ms")

    @property
    def unsplit(self):
        """A request known only from librdkafka's lines: no syscalls split it."""
        return self.wait.isNull() & self.total.isNotNull()

    @property
    def tls(self):
        """The broker handle's name says TLS: "ssl://" or "sasl_ssl://"."""
        return self.col("broker").rlike("^(sasl_)?ssl://")

    @property
    def rtt(self):
        from pyspark.sql import functions as F

        # F.lit of a Column is that Column.
        return F.lit(self.path_rtt_ms).cast("double")


@dataclass(frozen=True)
class CauseAgg:
    """One cause's requests, summed up."""
    k: int
    wait: list | None           # wait_ms p50, p99
    total: float | None         # total_ms p50
    wait_max: float | None
    time: float | None          # total_ms summed
    p50: dict = field(default_factory=dict)   # SUMMED column -> median
    max: dict = field(default_factory=dict)   # SUMMED column -> maximum


@dataclass(frozen=True)
class Facts:
    """What a cause's sentences read: its requests summed, its example
    request and the run as a whole."""
    agg: CauseAgg | None
    example: dict
    requests: int
    path_rtt_ms: float | None
    rtt_upper_bound: bool
    version: str | None
    default_nodelay: bool | None
    summary: dict
    meta: dict
    client_ms: float | None = None


@dataclass(frozen=True)
class ThinEvidence:
    """What a run's findings say when no syscalls split its requests, which
    the ``likely`` hooks rank the causes from."""
    rtt_ms: float | None            # librdkafka's median rtt, else the median latency
    path_rtt_ms: float | None
    tls: bool                       # a broker's handle says TLS
    found: frozenset                # the causes already found
    signals: dict                   # librdkafka's other lines, summed (signals.py)
    client_queue_ms: float | None   # statistics' int_latency; None without statistics
    # A one-record request of another kind took as long: not Nagle.
    nagle_ruled_out: bool = False

    @property
    def slow(self) -> bool:
        return self.rtt_ms is not None and self.rtt_ms > SLOW_MS

    @property
    def nagle_band(self) -> bool:
        """The rtt beyond the path (or the whole rtt, the path unknown) is
        about the delayed-ACK timer."""
        excess = self.rtt_ms - (self.path_rtt_ms or 0.0)
        return NAGLE_EXCESS_MIN_MS <= excess <= NAGLE_EXCESS_MAX_MS


def classify(produce, path_rtt, nagle_possible=True):
    """The cause of each request: the ``ORDER``ed rules folded into one
    ``F.when`` chain; what none takes is healthy. ``path_rtt`` and
    ``nagle_possible``: the run's, or Columns (a fleet's runs each their
    own)."""
    from pyspark.sql import functions as F

    x = RuleInputs(frozenset(produce.columns), path_rtt, nagle_possible)
    chain, labels = None, set()
    for cause in CAUSES:
        label = label_of(cause)
        if cause.rule is None or label in labels:
            continue
        labels.add(label)
        cond = cause.rule(x)
        chain = F.when(cond, label) if chain is None else chain.when(cond, label)
    return produce.withColumn("cause", chain.otherwise(OTHERWISE))


# One rule labels a slow wait that neither Nagle nor the path explains;
# over the whole run it is told apart as packet_loss or broker_slow
# (``_slow_wait``). The judge reads it through these names.
SLOW_WAIT = _slow_wait.LABEL


def slow_wait_as(n: int, k: int, retrans: int | None) -> str:
    """The cause the ``k`` slow waits among ``n`` requests are told apart as."""
    return _slow_wait.resolve(n, k, retrans)


def slow_wait_resolved_in(per: dict) -> str:
    """The cause ``slow_wait`` was told apart as, in a run's causes."""
    return _slow_wait.resolved_in(per)


def resolve_slow(rq, retrans: int | None):
    """``slow_wait`` told apart over the whole run (see ``_slow_wait``)."""
    from pyspark.sql import functions as F

    row = rq.agg(F.count("*").alias("n"),
                 F.count(F.when(F.col("cause") == _slow_wait.LABEL, 1)).alias("k")).first()
    name = _slow_wait.resolve(row.n, row.k, retrans)
    return rq.withColumn("cause", F.when(F.col("cause") == _slow_wait.LABEL, F.lit(name)).otherwise(F.col("cause")))


def verdict_of(findings: list[dict]) -> str:
    """The cause of most requests; else a tail cause that takes a large share
    of the time; else ``OTHERWISE`` (healthy)."""
    if findings and findings[0]["share"] >= DOMINANT_SHARE:
        return findings[0]["cause"]
    tails = [f for f in findings if f["cause"] in TAIL_CAUSES and f.get("time_share", 0) >= TAIL_TIME_SHARE]
    tails.sort(key=lambda f: -f["time_share"])
    return tails[0]["cause"] if tails else OTHERWISE
