"""The user's own ``ping`` output -> table ``probes``.

Reads iputils ``ping`` (Linux), busybox's and BSD's (``seq=``,
``round-trip``) and Windows' ``Reply from`` lines, as pasted into a
ticket (see ``kdiag.parsers.pasted``)::

    PING 10.201.2.2 (10.201.2.2) 56(84) bytes of data.
    64 bytes from 10.201.2.2: icmp_seq=1 ttl=63 time=31.5 ms
    --- 10.201.2.2 ping statistics ---
    5 packets transmitted, 5 received, 0% packet loss, time 4007ms
    rtt min/avg/max/mdev = 31.349/31.500/31.689/0.118 ms

One row per echo request, ``method`` ``icmp_ping``: ``answer`` ``reply``
with its time, ``unreachable`` for a ``From ... Destination ...
Unreachable`` line, ``none`` for each request the summary counts as lost.
ping has no hops: ``ttl`` is the hop the reply came from, inferred from
the TTL it arrived with (sent as 64, 128 or 255 and lowered once per
router; ``ttl=63`` is the second hop), null when the line has none.
``round`` is the sequence number. A summary without reply lines (the user
pasted its last lines only) gives its received requests min, then avg,
then max, like ``kdiag.parsers.mtr``. ``target_port`` is null: ICMP
reaches the broker's host, not its port.

Skip reasons: ``empty``, ``markup``, ``not_ping``. Banner, summary and
prompt lines are read (parsed); a duplicate reply (``DUP!``) is read and
makes no row.
"""
from __future__ import annotations

import re

import pyarrow as pa

from kdiag.parsers.base import ParseCounts
from kdiag.parsers.format import BY_LINES, PATH, TEXT, TEXT_SCANNER, Format, Told
from kdiag.parsers.pasted import PROMPT, cleaned, pasted_lines
from kdiag.parsers.tcp_probe import PROBES_SCHEMA

METHOD = "icmp_ping"
# Rows made from a summary's counts: a real run sends tens of requests; a
# mangled count must not make millions.
MAX_LOST_ROWS = 1000
# iputils prints "PING NAME (ADDRESS) 56(84) bytes of data."; busybox "PING NAME (ADDRESS): 56 data bytes"
_BANNER = re.compile(r"^PING (\S+) \(([^)\s]+)\)")
# iputils: "64 bytes from ADDRESS: icmp_seq=1 ttl=63 time=31.5 ms" ("NAME (ADDRESS)" when names
# are resolved); busybox and BSD say "seq=", Windows "Reply from ADDRESS: bytes=32 time=12ms TTL=57".
_REPLY = re.compile(r"^\d+ bytes from (?:(\S+) \(([^)\s]+)\)|(\S+?)):?\s+(?:icmp_)?seq=(\d+)"
                    r"(?:.*?\bttl=(\d+))?.*?\btime[=<]\s*(\d+(?:\.\d+)?)\s*ms(.*)$", re.I)
# Users redact the address, sometimes with its colon ("Reply from x.x.x.x bytes=32 ...").
_WIN_REPLY = re.compile(r"^Reply from (\S+?):? bytes=\d+ time[=<](\d+(?:\.\d+)?)\s*ms TTL=(\d+)", re.I)
# iputils: "From ADDRESS icmp_seq=2 Destination Host Unreachable" and the other ICMP errors
_FROM_ERROR = re.compile(r"^From (\S+)(?: \(([^)\s]+)\))?:? (?:icmp_)?seq=(\d+)\s+(\S.*)$")
_STATS_TITLE = re.compile(r"^-+ (\S+) ping statistics -+$")
# "5 packets transmitted, 5 received, 0% packet loss, time 4007ms"; Windows "Sent = 4, Received = 4"
_TOTALS = re.compile(r"^(\d+) packets transmitted, (\d+) (?:packets )?received")
_WIN_TOTALS = re.compile(r"^\s*Packets: Sent = (\d+), Received = (\d+)")
_SUMMARY = re.compile(r"^(?:rtt|round-trip) min/avg/max(?:/\w+)? = ([\d.]+)/([\d.]+)/([\d.]+)")
_OTHER = re.compile(r"^(?:Pinging \S+|Ping statistics for|Approximate round trip|\s*Minimum = |Request timed out)")


def _hop_of_ttl(ttl: int | None) -> int | None:
    if ttl is None or not 0 < ttl <= 255:
        return None
    start = next(s for s in (64, 128, 255) if ttl <= s)
    return start - ttl + 1


class _Run:
    def __init__(self) -> None:
        self.target: str | None = None
        self.rows: list[tuple[int | None, int, str, str | None, float | None]] = []   # ttl, seq, answer, from, rtt
        self.sent = self.received = None
        self.summary: tuple[float, float, float] | None = None


def _emit(run: _Run, brokers: dict, cols: dict) -> None:
    rows = list(run.rows)
    target = run.target or next((r[3] for r in rows if r[3]), None)
    hop = next((r[0] for r in rows if r[0] is not None), None)
    if not rows and run.summary and run.received:
        lo, avg, hi = run.summary
        got = min(run.received, MAX_LOST_ROWS)
        rtts = [avg] * got if got < 3 else [lo] + [avg] * (got - 2) + [hi]
        rows = [(None, i + 1, "reply", target, rtt) for i, rtt in enumerate(rtts)]
    if run.sent is not None and run.received is not None:
        answered = sum(r[2] == "reply" for r in rows)
        seq = max((r[1] for r in rows), default=0)
        lost = max(0, run.sent - max(run.received, answered) - sum(r[2] != "reply" for r in rows))
        rows += [(hop, seq + i + 1, "none", None, None) for i in range(min(lost, MAX_LOST_ROWS))]
    for ttl, seq, answer, resp, rtt in rows:
        cols["target_host"].append(target)
        cols["target_port"].append(None)
        cols["broker"].append(brokers.get((target, None)))
        cols["ttl"].append(ttl)
        cols["round"].append(min(seq, 2**15 - 1))
        cols["sent_us"].append(None)
        cols["responder"].append(resp)
        cols["answer"].append(answer)
        cols["rtt_ms"].append(rtt)
        cols["method"].append(METHOD)


def _read(text: str, run: _Run) -> bool:
    t = text.strip()
    if m := _REPLY.match(t):
        if "DUP!" not in m.group(7):
            ttl = int(m.group(5)) if m.group(5) else None
            run.rows.append((_hop_of_ttl(ttl), int(m.group(4)), "reply", m.group(2) or m.group(3),
                             float(m.group(6))))
    elif m := _WIN_REPLY.match(t):
        run.rows.append((_hop_of_ttl(int(m.group(3))), len(run.rows) + 1, "reply", m.group(1), float(m.group(2))))
    elif m := _FROM_ERROR.match(t):
        if "nreachable" in m.group(4) or "xceeded" in m.group(4):
            run.rows.append((None, int(m.group(3)), "unreachable", m.group(2) or m.group(1), None))
    elif m := _TOTALS.match(t) or _WIN_TOTALS.match(t):
        run.sent, run.received = int(m.group(1)), int(m.group(2))
    elif m := _SUMMARY.match(t):
        run.summary = (float(m.group(1)), float(m.group(2)), float(m.group(3)))
    elif m := _STATS_TITLE.match(t):
        run.target = run.target or m.group(1)
    elif not _OTHER.match(t):
        return False
    return True


def parse_ping(lines, brokers: dict | None = None) -> tuple[pa.Table, ParseCounts]:
    counts = ParseCounts("ping")
    cols: dict[str, list] = {f.name: [] for f in PROBES_SCHEMA}
    brokers, run = brokers or {}, _Run()
    for no, raw, text, what in pasted_lines(lines, counts):
        m = _BANNER.match(text.strip())
        if m or (what == PROMPT and re.search(r"\bping\b", text)):
            if run.rows or run.summary:
                _emit(run, brokers, cols)
                run = _Run()
            if m:
                run.target = m.group(2)
            counts.parsed += 1
        elif what is None and _read(text, run):
            counts.parsed += 1
        else:
            counts.reject(no, "not_ping", raw)
    _emit(run, brokers, cols)
    return pa.table(cols, schema=PROBES_SCHEMA), counts


def looks_like(sample: list[str]) -> float:
    """Share of the sample's own lines that ping printed; 0 without a
    reply or summary line."""
    try:
        lines = cleaned(sample)
        if not lines:
            return 0.0
        run, good = _Run(), 0
        for s in lines:
            good += bool(_BANNER.match(s.strip())) or _read(s, run)
        return good / len(lines) if run.rows or run.summary else 0.0
    except Exception:  # a guess about an arbitrary file must never raise
        return 0.0


def _parse_ping(lines: list[str], told: Told) -> tuple[pa.Table, ParseCounts]:
    return parse_ping(lines, told.brokers)


FORMATS = (
    Format(name="ping", recognised_by=BY_LINES, recognise=looks_like, tables={"probes": PROBES_SCHEMA},
           schema_version=1, reads=TEXT, parser=_parse_ping,
           title="ping output", pseudonymised=TEXT_SCANNER, feeds={"probes": (PATH,)}, bundle_dir=None),
)
