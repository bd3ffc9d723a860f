"""The captures that decide between likely causes when the evidence is thin
(each cause's ``likely`` hook, likely_causes.rank)."""
from __future__ import annotations

STRACE = ("strace -f -tt -T -yy -s 256 -p PID of the producer (or kdiag trace --pid PID): several writes, then a "
          "~40 ms poll() before the response, is Nagle; one write and a long poll() is the broker")
PATH = "tcptraceroute BROKER PORT (or traceroute -T -p PORT, mtr --tcp): the path's own round trip"
STATS = "statistics.interval.ms=1000 in the producer's config: throttle times and queueing per broker"
DEBUG_MSG = "debug=msg,protocol,broker: batch sizes, queue counts, retries and errors"
# A cause librdkafka's own lines named (from_signals) already has its finding.
SAID_BY_LINES = "librdkafka's own lines say so (see its finding)"
