"""Messages waited for metadata: the topic was unknown, a partition had no
leader, or the topic was being created, and librdkafka asked for metadata
again and again (topic.metadata.refresh.fast.interval.ms) before it could
build the first ProduceRequest. Judged over the run from the connection
timeline (kdiag/analysis/life.py): MetadataRequests sent in a row up to the
first ProduceRequest, and lines naming a missing topic or leader."""
from __future__ import annotations

from kdiag.analysis.causes import _life
from kdiag.analysis.causes._captures import DEBUG_MSG, SAID_BY_LINES
from kdiag.analysis.life import METADATA_WAIT_REQUESTS

NAME = "metadata_wait"
TAIL = False
COLUMNS = ()
SUMMED = ()
EXAMPLE_COLUMNS = ()
MEETS = None
COLOUR = "#bd9e39"
PART = None
SLOW_MS = 500.0
SIGNATURE = (
    "The first ProduceRequest came 500 ms or more after the MetadataRequests that preceded it, sent in a row "
    "(three or more, each within 2 s of the last), or librdkafka's lines name a missing topic or leader "
    "(`Unknown topic or partition`, `Leader not available`, `not found in cluster`)."
    " From a packet capture: the MetadataRequests on a plaintext connection, or on a TLS terminator's "
    "onward side captured beside the producer's."
)
FIX_DOC = (
    "Create the topic before producing to it (or let the broker create it: `auto.create.topics.enable`); a "
    "leader not available is the cluster electing one. `topic.metadata.refresh.fast.interval.ms` sets how soon "
    "librdkafka asks again."
)
RUN_MEETS = {"requests": 10, "meta": {"completed_ms": 20.0, "life": {"metadata": {
    "requests": 12, "error_lines": 0, "error": None, "start_us": 1_000_000, "produced": True, "ms": 3012.0}}}}
rule = None
# The phase of the connection timeline (life.py) it is named for: what
# `kdiag compare` reads to tell whether a fix shortened it.
PHASE = "metadata"


def _wait(facts) -> dict:
    return _life.of(facts).get("metadata") or {}


def _waited(m: dict) -> bool:
    # Only before a ProduceRequest: what else asks for metadata (a
    # consumer, an admin client) holds no message back.
    return bool(m.get("produced")) and (m.get("ms") or 0) >= SLOW_MS and (
        (m.get("requests") or 0) >= METADATA_WAIT_REQUESTS or (m.get("error_lines") or 0) > 0)


def from_signals(facts) -> dict | None:
    m = _wait(facts)
    if _waited(m):
        return _life.judged(facts, m["ms"], m.get("requests") or 1, [_life.kind(facts)])
    if (m.get("error_lines") or 0) and not facts.requests:
        # Errors about the topic and nothing produced: what held the
        # messages, though not for how long.
        return _life.judged(facts, 0.0, m["error_lines"], ["error lines"])
    return None


def fix(version: tuple[int, ...] | None) -> dict[str, str]:
    return {}   # the topic's, or the cluster's


def evidence(facts) -> list[str]:
    m = _wait(facts)
    ev = []
    if m.get("ms") is not None and m.get("requests"):
        ev.append(f"librdkafka sent {m['requests']} MetadataRequest(s) in a row before the first ProduceRequest, "
                  f"which came {m['ms']:g} ms after the first of them")
    if m.get("error_lines"):
        ev.append(f"{m['error_lines']} line(s) name a missing topic or leader: \"{m.get('error')}\"")
    said = _life.first_messages(facts, m.get("ms") if _waited(m) else None, "the topic's metadata was missing")
    return ev + ([said] if said else [])


def fix_text(facts) -> str:
    return ("the topic or its leader was missing when the producer started: create topics before producing, "
            "or wait for the cluster's leader election; messages for an unknown topic fail after "
            "topic.metadata.propagation.max.ms")


def likely(thin) -> tuple[int, str, str] | None:
    return (18, SAID_BY_LINES, DEBUG_MSG) if NAME in thin.found else None
