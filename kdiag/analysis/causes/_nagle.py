"""What the two Nagle causes share: the held-send rule and the evidence
sentences before the one about the client socket's TCP_NODELAY."""
from __future__ import annotations

from kdiag.analysis import samples
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


def rtt_band(x):
    """A request known only from librdkafka's lines, over TLS, whose rtt
    beyond the path is the delayed-ACK timer: the stall as the log alone
    shows it. Over plaintext librdkafka sends a request in one write and
    Nagle holds nothing back."""
    from pyspark.sql import functions as F

    excess = x.total - F.coalesce(x.rtt, F.lit(0.0))
    return (x.unsplit & x.tls & (excess >= NAGLE_EXCESS_MIN_MS) & (excess <= NAGLE_EXCESS_MAX_MS)
            & F.lit(x.nagle_possible))


def log_only_evidence(facts) -> list[str]:
    """The sentences for requests the log alone shows in the band."""
    agg, path_rtt = facts.agg, facts.path_rtt_ms
    le = "<= " if facts.rtt_upper_bound else ""
    ev = [f"{agg.k} of {facts.requests} Produce requests took {agg.total:.1f} ms (median) by librdkafka's rtt, "
          f"about the delayed-ACK timer ({DELAYED_ACK_MS:.0f} ms) plus the path RTT "
          f"({le + '%.3f ms' % path_rtt if path_rtt is not None else 'unknown'}), over TLS: librdkafka writes a "
          f"request as several TLS records, and Nagle holds the last until the broker's delayed ACK"]
    if path_rtt is not None:
        ev.append(f"the path itself is fast: {le}{path_rtt:.3f} ms ({facts.summary['path_rtt_source']}); "
                  f"a healthy path beside a 40 ms rtt is the sign of a held send, not of a slow network")
    ev.append("no syscalls in the inputs: the held send itself is not seen (capture strace with -f -tt -T -yy "
              "-s 256 of the producer, or run kdiag trace --pid PID, to see the writes and the 40 ms poll())")
    held = socket_held(samples.of(facts.meta), None)   # a pasted ss -ti: no fd to match
    if held and held["held"]:
        ev.append(f"the user's ss -ti showed the client socket holding {held['notsent_bytes']} bytes unsent behind "
                  f"an unacknowledged segment in {held['held']} of {held['samples']} socket lines (ato "
                  f"{held['ato_ms']} ms): Nagle waiting for the ACK, seen on the socket itself")
    return ev


def from_wire(facts) -> bool:
    """The run's requests were read off a packet capture, or split by one
    (analysis.wire)."""
    return facts.summary.get("source") == "wire" or facts.meta.get("wire") is not None


def wire_evidence(facts) -> list[str]:
    """The sentences for requests a packet capture shows in the band: the
    hold is seen on the wire, not in a thread's wait."""
    agg, ex, n, path_rtt = facts.agg, facts.example, facts.requests, facts.path_rtt_ms
    unit = "TLS records" if str(ex.get("broker") or "").startswith("ssl://") else "segments"
    corr = f", e.g. CorrId {ex['corr_id']}" if ex.get("corr_id") is not None else ""
    wait50, wait99 = (agg.wait or [None, None])
    ev = [f"{agg.k} of {n} Produce requests left in several {unit} (median {agg.p50['n_writes']:.0f}{corr})",
          f"their responses began {wait50:.1f} ms after the request's first byte on the wire (median; p99 "
          f"{wait99:.1f} ms): about the delayed-ACK timer ({DELAYED_ACK_MS:.0f} ms) plus the path RTT "
          f"({'%.3f ms' % path_rtt if path_rtt is not None else 'unknown'})"]
    if path_rtt is not None:
        ev.append(f"the path itself is fast: {path_rtt:.3f} ms ({facts.summary['path_rtt_source']}): a healthy "
                  f"path beside a 40 ms wait is the sign of a held send")
    return ev + one_write_said(facts, unit[:-1])


def wire_holders(facts) -> tuple[list[dict], list[dict]]:
    """The producer's connections and the relays' onward ones on which the
    capture shows Nagle holding requests (analysis.wire.summary)."""
    w = facts.meta.get("wire") or {}
    return w.get("holding") or [], w.get("relays_holding") or []


def evidence(facts) -> list[str]:
    if from_wire(facts):
        return wire_evidence(facts)
    if facts.agg.wait is None or facts.agg.wait[0] is None:
        return log_only_evidence(facts)
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
    held = socket_held(samples.of(facts.meta), ex.get("fd"))
    if held:
        if held["held"]:
            ev.append(f"the client socket, sampled {held['samples']} times, held {held['notsent_bytes']} bytes "
                      f"unsent behind an unacknowledged segment in {held['held']} samples (ato "
                      f"{held['ato_ms']} ms): Nagle waiting for the ACK, seen on the socket itself")
        else:
            ev.append(f"the client socket, sampled {held['samples']} times, never held bytes unsent: "
                      f"the wait is after the client's send")
    return ev + one_write_said(facts, "write")


def one_write_said(facts, unit: str) -> list[str]:
    """The sentence of the requests that left whole (in one write, TLS
    record or segment) and came back fast."""
    one = facts.meta.get("one_write") or {}
    if not one.get("n"):
        return []
    return [f"requests that left in one {unit} were answered in {one['wait_p50_ms']} ms (median of "
            f"{one['n']}): only the split requests stall, which is Nagle's signature"]
