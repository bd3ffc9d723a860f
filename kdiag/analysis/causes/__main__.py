"""docs/causes.md, written from the cause modules: ``python -m
kdiag.analysis.causes > docs/causes.md``. tests/test_registry_causes.py
checks the page is what this writes."""
from __future__ import annotations

import sys
import textwrap

from kdiag.analysis.causes import CAUSES, OTHERWISE

INTRO = (
    "kdiag names the cause of a producer's latency from what each request did: how it left the socket, how long "
    "it waited for its response, and librdkafka's own lines over the run. This page lists every cause kdiag "
    "names, the signature it is recognised by, its fix and what the fix is predicted to leave. How the requests "
    "are split and judged is in [analysis.md](analysis.md).")
# The table's last column, by the cause's PART.
PREDICTS = {
    "wait": "p50 and p99 with its requests' wait taken out",
    "queue": "each message delivered sooner by its time in the queue",
    None: "nothing",
}
PREDICTED = (
    "A finding whose cause holds requests in their wait ({wait}) says what its fix would leave: the run's p50 "
    "and p99 with those requests' waits replaced by the wait of requests nothing holds (the healthy requests' "
    "median when there are 5 or more, else the one-write requests', else the path RTT), for example "
    "`predicted with socket.nagle.disable=true: p50 about 0.78 ms, p99 about 0.88 ms (42.4 ms less at the "
    "median)`. A cause whose part comes before the request ({queue}) predicts how much sooner each message is "
    "delivered (the median time in librdkafka's queue), and `kdiag compare` judges it by the probe's delivery "
    "times. `tests/test_compare.py` checks each against its real fix in the lab, the predicted saving within 25% "
    "of the measured one. Measured there: Nagle on then off, 42.4 ms predicted and 42.6 measured (another pair: "
    "42.0 and 42.4); `nagle-proxy` then `proxy-nodelay`, 41.4 and 42.5 ms (another: 42.1 and 42.5); "
    "`client-queueing` with `linger.ms=200` then 0, 100.9 and 101.4 ms of delivery time (another: 100.9 and "
    "100.7). The predicted p50 itself misses by more (0.78-1.72 ms predicted against 0.61-0.70 measured after "
    "the Nagle fixes), because the baseline comes from other requests at another moment. The other causes "
    "({none}) predict nothing: no setting takes their part out of a request.")
OUTRO = (
    "This page is written from the cause modules in `kdiag/analysis/causes/` (their `SIGNATURE`, `FIX_DOC` and "
    "`PART`) by `python -m kdiag.analysis.causes`; a test checks that it matches them.")
WIDTH = 100


def _names(part) -> str:
    return ", ".join(f"`{c.NAME}`" for c in CAUSES if c.PART == part and c.NAME != OTHERWISE)


def _prose(text: str) -> str:
    return textwrap.fill(text, WIDTH, break_long_words=False, break_on_hyphens=False)


def page() -> str:
    rows = [f"| `{c.NAME}` | {c.SIGNATURE} | {c.FIX_DOC} | {PREDICTS[c.PART]} |" for c in CAUSES]
    return "\n".join([
        "# Causes", "", _prose(INTRO), "",
        "| cause | signature | fix | predicted effect |", "|---|---|---|---|", *rows, "",
        "## Predicted effect", "", _prose(PREDICTED.format(wait=_names("wait"), queue=_names("queue"),
                                                           none=_names(None))), "",
        _prose(OUTRO), ""])


if __name__ == "__main__":
    sys.stdout.write(page())
