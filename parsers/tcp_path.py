"""Probe rows -> the path table: what ``traceroute -T`` would list.

Table from ``path_table``: one row per (target, method, ttl), the lines of a
``traceroute -T`` listing. TTLs past the first one that reached the target
(open or closed) or met an unreachable are left out, as traceroute stops
there.

=============  =======  =======================================================
target_host,   ...      as in ``probes``
target_port,
broker, method
ttl            int16    the hop
responder      string   the address that answered most often; null if none
answer         string   the most frequent answer among answered rounds;
                        ``none`` when no round was answered
rtt_min_ms,    float64  over the answered rounds, milliseconds; null when
rtt_median_ms,          none was answered
rtt_max_ms
answered       int16    rounds that got an answer
sent           int16    rounds sent
=============  =======  =======================================================
"""
from __future__ import annotations

import functools
import statistics
from collections import Counter
from typing import TYPE_CHECKING

from kdiag.visible import visible

if TYPE_CHECKING:
    import pyarrow as pa


def __getattr__(name: str):
    # The schema needs pyarrow, which a report that only draws the table
    # (format_path_rows, from the findings' rows) does not import.
    if name == "PATH_SCHEMA":
        return _path_schema()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def _path_schema():
    import pyarrow as pa

    return pa.schema(
        [
            ("target_host", pa.string()),
            ("target_port", pa.int32()),
            ("broker", pa.string()),
            ("method", pa.string()),
            ("ttl", pa.int16()),
            ("responder", pa.string()),
            ("answer", pa.string()),
            ("rtt_min_ms", pa.float64()),
            ("rtt_median_ms", pa.float64()),
            ("rtt_max_ms", pa.float64()),
            ("answered", pa.int16()),
            ("sent", pa.int16()),
        ]
    )


# Answers after which a further TTL tells nothing new.
FINAL_ANSWERS = ("open", "closed", "unreachable")


def _most_common(values: list):
    """Most frequent value; a tie goes to the one seen first."""
    if not values:
        return None
    c = Counter(values)
    best = max(c.values())
    return next(v for v in values if c[v] == best)


def path_table(probes: pa.Table) -> pa.Table:
    """Per (target, method, ttl): the hop as traceroute would list it."""
    import pyarrow as pa

    schema = _path_schema()
    groups: dict[tuple, dict[int, list[dict]]] = {}
    for r in probes.to_pylist():
        key = (r["target_host"], r["target_port"], r["method"])
        groups.setdefault(key, {}).setdefault(r["ttl"], []).append(r)
    cols: dict[str, list] = {f.name: [] for f in schema}
    for (host, port, method), hops in groups.items():
        broker = next((r["broker"] for rs in hops.values() for r in rs if r["broker"]), None)
        for ttl in sorted(t for t in hops if t is not None):
            rs = hops[ttl]
            got = [r for r in rs if r["answer"] not in (None, "none")]
            answer = _most_common([r["answer"] for r in got]) or "none"
            rtts = sorted(r["rtt_ms"] for r in got if r["rtt_ms"] is not None)
            cols["target_host"].append(host)
            cols["target_port"].append(port)
            cols["broker"].append(broker)
            cols["method"].append(method)
            cols["ttl"].append(ttl)
            cols["responder"].append(_most_common([r["responder"] for r in got if r["responder"]]))
            cols["answer"].append(answer)
            cols["rtt_min_ms"].append(rtts[0] if rtts else None)
            cols["rtt_median_ms"].append(statistics.median(rtts) if rtts else None)
            cols["rtt_max_ms"].append(rtts[-1] if rtts else None)
            cols["answered"].append(len(got))
            cols["sent"].append(len(rs))
            if answer in FINAL_ANSWERS or any(r["answer"] in ("open", "closed") for r in got):
                break
    return pa.table(cols, schema=schema)


def _rtt_text(row: dict) -> str:
    rtts = [row.get(k) for k in ("rtt_min_ms", "rtt_median_ms", "rtt_max_ms")]
    if rtts[0] is None:
        return "*"
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in rtts):
        return "/".join(f"{v:.3f}" for v in rtts)
    return "/".join(map(visible, rtts))


def _key(value):
    """A field as a block's key: a findings file's may be a list or a map."""
    return value if value is None or isinstance(value, (str, int, float)) else visible(value)


def format_path_table(table: pa.Table) -> str:
    """Render ``path_table``'s rows, one block per target::

        10.0.2.2:9092 (broker b:9092/1), syn probes, 2 hops
        HOP  ADDRESS    RTT(ms)              ANSWER
          1  10.0.1.1   0.031/0.040/0.052    time_exceeded 3/3
          2  10.0.2.2   0.048/0.050/0.061    open 3/3

    RTT is min/median/max over the answered rounds; ``*`` marks no answer.
    """
    return format_path_rows(table.to_pylist())


def format_path_rows(rows: list) -> str:
    """``format_path_table`` of the rows as dicts: ``path_table``'s, or a
    findings file's, where any field may be missing or of another type
    (each is shown as data)."""
    blocks: dict[tuple, list[dict]] = {}
    for r in rows:
        if isinstance(r, dict):
            key = tuple(_key(r.get(k)) for k in ("target_host", "target_port", "broker", "method"))
            blocks.setdefault(key, []).append(r)
    out: list[str] = []
    for (host, port, broker, method), rows in blocks.items():
        # Hosts and answers come from captures: shown as data, each cell
        # before the columns are measured.
        cells = [tuple(map(visible, (r.get("ttl"), r.get("responder") or "*", _rtt_text(r),
                                     f"{r.get('answer')} {r.get('answered')}/{r.get('sent')}")))
                 for r in rows]
        w_hop = max(3, *(len(c[0]) for c in cells))
        w_addr = max(len("ADDRESS"), *(len(c[1]) for c in cells))
        w_rtt = max(len("RTT(ms)"), *(len(c[2]) for c in cells))
        last = rows[-1]
        reached = last.get("answer") in ("open", "closed", "reply")   # reply: the host answered a ping
        title = f"{host}" + (f":{port}" if port is not None else "")   # a ping has no port
        title += (f" (broker {broker})" if broker else "") + f", {method or 'unknown'} probes, "
        title += f"{len(rows)} hop{'s' if len(rows) != 1 else ''}" if reached else f"target not reached in {len(rows)} hops"
        if out:
            out.append("")
        out.append(visible(title))
        out.append(f"{'HOP':>{w_hop}}  {'ADDRESS':<{w_addr}}  {'RTT(ms)':<{w_rtt}}  ANSWER")
        for hop, addr, rtt, ans in cells:
            out.append(f"{hop:>{w_hop}}  {addr:<{w_addr}}  {rtt:<{w_rtt}}  {ans}")
    return "\n".join(out) + ("\n" if out else "")
