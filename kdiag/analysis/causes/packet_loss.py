"""A tail of requests stalls for the length of TCP's loss timers over an
otherwise fast body."""
from __future__ import annotations

from kdiag.analysis.causes import _slow_wait
from kdiag.analysis.spark_plumbing import rounded

NAME = "packet_loss"
# Loss stalls a few requests for long (TCP's timers).
TAIL = True
LABEL = _slow_wait.LABEL
COLUMNS = _slow_wait.COLUMNS
SUMMED = ()
EXAMPLE_COLUMNS = ()
MEETS = {"wait_ms": 210.0, "total_ms": 210.5, "n_writes": 1}
COLOUR = "#9467bd"
PART = "wait"
# The path RTT its rule weighs the wait against.
ALSO_RESTS_ON = ("path",)
SIGNATURE = (
    "Most requests are fast, but a tail of them stalls for the length of TCP's loss timers: a "
    "tail-loss probe (about 2x SRTT, at least 10 ms) or an RTO (at least 200 ms). The evidence is"
    " `RetransSegs` in the producer's namespace when kdiag ran the producer, else the latency "
    "shape."
)
FIX_DOC = "Find the lossy hop: `ip -s link`, `ethtool -S`, policers."
rule = _slow_wait.rule


def fix(version: tuple[int, ...] | None) -> dict[str, str]:
    return {}


def evidence(facts) -> list[str]:
    agg, path_rtt = facts.agg, facts.path_rtt_ms
    if agg.wait is None or agg.wait[0] is None:   # the log alone: librdkafka's rtt
        stalled = f"median {agg.total:.1f} ms by librdkafka's rtt"
    else:
        stalled = f"median wait {agg.wait[0]:.1f} ms, worst {agg.wait_max:.1f} ms"
    ev = [f"{agg.k} of {facts.requests} Produce requests stalled: {stalled}, while the median request took {facts.summary['latency_p50_ms']} ms "
          f"over a {rounded(path_rtt, 2) if path_rtt is not None else '?'} ms path"]
    retrans = facts.meta.get("tcp_retrans")
    if retrans:
        ev.append(f"TCP retransmitted {retrans} segments during the run "
                  f"(RetransSegs in the producer's network namespace, /proc/net/snmp)")
    else:
        ev.append("retransmissions were not sampled: judged from the latency shape (a fast body, "
                  "a tail of stalls the size of TCP's loss timers)")
    ev.append("TCP recovers a lost segment after a tail-loss probe (~2x the smoothed RTT, at least "
              "10 ms) or a retransmission timeout (at least 200 ms on Linux)")
    return ev


def fix_text(facts) -> str:
    return ("find the lossy link: drops and errors on each hop (ip -s link, ethtool -S), "
            "congestion or a policer on the path")
