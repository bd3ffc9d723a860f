"""What the two Nagle causes share: the held-send rule and the evidence
sentences before the one about the client socket's TCP_NODELAY."""
from __future__ import annotations

from kdiag.analysis.samples import socket_held
from kdiag.analysis.thresholds import DELAYED_ACK_MS, NAGLE_EXCESS_MAX_MS, NAGLE_EXCESS_MIN_MS

COLUMNS = ("wait_ms", "n_writes")
SUMMED = ("n_writes",)


def held_send(x):
    """Several writes, then a wait beyond the path RTT about the delayed-ACK
    timer."""
    from pyspark.sql import functions as F

    excess = x.wait - F.coalesce(x.rtt, F.lit(0.0))
    several = F.coalesce(x.col("n_writes"), F.lit(0)) >= 2
    return several & (excess >= NAGLE_EXCESS_MIN_MS) & (excess <= NAGLE_EXCESS_MAX_MS) & F.lit(x.nagle_possible)


def evidence(facts) -> list[str]:
    agg, ex, n, path_rtt = facts.agg, facts.example, facts.requests, facts.path_rtt_ms
    le = "<= " if facts.rtt_upper_bound else ""
    wait50, wait99 = (agg.wait or [None, None])
    ev = [f"{agg.k} of {n} Produce requests left in several writes "
          f"(median {agg.p50['n_writes']:.0f}, e.g. {ex.get('write_sizes')} bytes for CorrId {ex['corr_id']})",
          f"then the broker thread waited in poll() for the response: median "
          f"{wait50:.1f} ms, p99 {wait99:.1f} ms, about the delayed-ACK "
          f"timer ({DELAYED_ACK_MS:.0f} ms) plus the path RTT "
          f"({le + '%.3f ms' % path_rtt if path_rtt is not None else 'unknown'})"]
    if path_rtt is not None:
        ev.append(f"the path itself is fast: {le}{path_rtt:.3f} ms ({facts.summary['path_rtt_source']}); "
                  f"a SYN probe carries no data, so it can never show a Nagle stall: a healthy path "
                  f"beside a 40 ms wait is itself the sign of a held send")
    held = socket_held(facts.meta.get("tables_dir"), ex.get("fd"))
    if held:
        if held["held"]:
            ev.append(f"the client socket, sampled {held['samples']} times, held {held['notsent_bytes']} bytes "
                      f"unsent behind an unacknowledged segment in {held['held']} samples (ato "
                      f"{held['ato_ms']} ms): Nagle waiting for the ACK, seen on the socket itself")
        else:
            ev.append(f"the client socket, sampled {held['samples']} times, never held bytes unsent: "
                      f"the wait is after the client's send")
    one = facts.meta.get("one_write") or {}
    if one.get("n"):
        ev.append(f"requests that left in one write were answered in {one['wait_p50_ms']} ms (median of "
                  f"{one['n']}): only the split requests stall, which is Nagle's signature")
    return ev
