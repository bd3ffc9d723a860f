"""The user's own traceroute listings -> table ``probes``.

Reads the listing that Michael Toren's ``tcptraceroute``, Linux
``traceroute`` (``-T`` for TCP SYNs, UDP by default, ``-I`` for ICMP) and
the Debian ``tcptraceroute`` wrapper around it print, as pasted into a
ticket (see ``kdiag.parsers.pasted``)::

    Selected device eth0, address 10.0.0.2, port 40123 for outgoing packets
    Tracing the path to 10.0.0.5 on TCP port 9093, 30 hops max
     1  10.0.0.1  0.301 ms  0.208 ms  0.289 ms
     2  broker1.example.com (10.0.0.5) [open]  0.300 ms  0.278 ms  0.265 ms

    traceroute to 10.0.0.5 (10.0.0.5), 30 hops max, 60 byte packets
     1  10.0.0.1  30.355 ms  30.360 ms *
     2  10.0.0.5  30.767 ms  30.851 ms !H  30.850 ms

One row per probe, as ``kdiag.parsers.tcp_probe`` documents the table;
``sent_us`` is null (a listing has no clock), ``broker`` comes from the
handshakes when they name the target. ``method``:

* ``tcptraceroute``: Toren's banner (``Tracing the path to``), or a prompt
  line that ran ``tcptraceroute``;
* ``traceroute_t``: a prompt line that ran ``traceroute -T`` (or
  ``--tcp``, ``-M tcp``, ``tcptraceroute.db``);
* ``traceroute_udp``, ``traceroute_icmp``: a prompt line with ``-U`` or
  ``-I``, or none of the TCP flags (UDP is traceroute's default);
* ``traceroute``: ``traceroute to`` without the command line: the listing
  does not say which protocol it sent. Path evidence of lesser weight, as
  are UDP and ICMP: they reach the broker's host, not its port.

``answer``: ``time_exceeded`` from a hop that is not the target, ``open``
(``[open]``, or the target answering a TCP method's SYN: a ``traceroute
-T`` listing does not tell a SYN-ACK from a RST), ``closed`` (``[closed]``),
``reply`` (the target answering a UDP or ICMP probe), ``unreachable``
(``!H``, ``!N``, ``!P``, ``!X`` and traceroute's other ``!`` marks),
``none`` (``*``). When the listing names no target (no banner), its last
hop is taken as the target.

Skip reasons: ``empty``, ``markup`` (code fences), ``not_traceroute``.
Banner and prompt lines are read (parsed): they name the target, port and
method.
"""
from __future__ import annotations

import re

import pyarrow as pa

from kdiag.parsers.base import ParseCounts
from kdiag.parsers.format import BY_LINES, PATH, TEXT, TEXT_SCANNER, Format, Told
from kdiag.parsers.pasted import PROMPT, cleaned, pasted_lines
from kdiag.parsers.tcp_probe import PROBES_SCHEMA

TCP_METHODS = ("tcptraceroute", "traceroute_t")

# traceroute 2.1 prints "traceroute to NAME (ADDRESS), 30 hops max, 60 byte packets"
_TR_BANNER = re.compile(r"^traceroute6? to (\S+?)(?: \(([^)\s]+)\))?, \d+ hops max")
# tcptraceroute 1.5 prints "Tracing the path to NAME (ADDRESS) on TCP port 9093, 30 hops max"
# (the port followed by its service name, "9 (discard)", where it has one)
_TCPTR_BANNER = re.compile(r"^Tracing the path to (\S+?)(?: \(([^)\s]+)\))? on TCP port (\d+)(?: \([^)]*\))?")
# and before it "Selected device eth0, address 10.0.0.2, port 40123 for outgoing packets"
_TCPTR_DEVICE = re.compile(r"^Selected device \S+, address \S+, port \d+ for outgoing packets")
_HOP = re.compile(r"^\s*(\d{1,3})\s+(\S.*)$")
# One item after the hop number: both tools print "NAME (ADDRESS)" or
# "ADDRESS", then "0.301 ms" per probe, "*" for none, and "!H" style marks;
# tcptraceroute adds "[open]"/"[closed]" after the answering address.
_ITEM = re.compile(r"""\s*(?:
      (?P<star>\*)
    | (?P<ms>\d+(?:\.\d+)?)\s*ms\b
    | (?P<bang>![A-Za-z]*[-\d]*)
    | \[(?P<ann>[^\]]*)\]
    | <(?P<angle>[^>]*)>
    | (?P<name>[A-Za-z0-9_][^\s()\[\]<>*!]*)(?:\s+\((?P<addr>[^)\s]+)\))?
    )""", re.X)


def _method_of_command(cmd: str) -> str | None:
    words = cmd.split()
    tool = next((w.rsplit("/", 1)[-1] for w in words if "traceroute" in w), None)
    if tool is None:
        return None
    if tool.startswith("tcptraceroute") and not tool.endswith(".db"):
        return "tcptraceroute"
    flags = " " + " ".join(words) + " "
    if tool.endswith(".db") or re.search(r" (?:-\w*T\w*|--tcp|-M\s*tcp) ", flags):
        return "traceroute_t"
    if re.search(r" (?:-\w*I\w*|--icmp|-M\s*icmp) ", flags):
        return "traceroute_icmp"
    return "traceroute_udp"


def _port_of_command(cmd: str, method: str) -> int | None:
    words = cmd.split()
    m = re.search(r"(?:^|\s)(?:-p|--port)[ =]?(\d+)", cmd)
    if m:
        return int(m.group(1))
    if method == "tcptraceroute":
        tail = [w for w in words[words.index(next(w for w in words if "traceroute" in w)) + 1:]
                if not w.startswith("-")]
        if len(tail) >= 2 and tail[1].isdecimal():
            return int(tail[1])
        return 80
    return 80 if method == "traceroute_t" else None


def _items(rest: str) -> list[tuple[str, object]] | None:
    """The hop line's items after its number: ("addr", (name, address)),
    ("ms", float), ("star", None), ("mark", text), ("ann", text); None
    when something in it is not one of these."""
    out, pos = [], 0
    while pos < len(rest):
        m = _ITEM.match(rest, pos)
        if not m or m.end() == pos:
            return None if rest[pos:].strip() else out
        pos = m.end()
        if m.group("star"):
            out.append(("star", None))
        elif m.group("ms") is not None:
            out.append(("ms", float(m.group("ms"))))
        elif m.group("bang") is not None:
            out.append(("mark", m.group("bang")))
        elif m.group("ann") is not None or m.group("angle") is not None:
            out.append(("ann", (m.group("ann") or m.group("angle") or "").strip().lower()))
        else:
            out.append(("addr", (m.group("name"), m.group("addr"))))
    return out


class _Listing:
    """What the banner and prompt lines said so far."""

    def __init__(self) -> None:
        self.target: tuple[str | None, str | None] = (None, None)   # (name, address)
        self.port: int | None = None
        self.method = "traceroute"
        self.hops: list[tuple[int, list]] = []


def _is_target(responder: tuple[str, str | None] | None, target: tuple[str | None, str | None]) -> bool:
    if responder is None:   # a time before any address: a line cut at its start
        return False
    name, addr = responder
    return bool(target[0] or target[1]) and ((addr or name) in (target[1], target[0]) or name in target)


def _probe_rows(listing: _Listing, brokers: dict, cols: dict) -> None:
    """The listing's hop lines as rows, once its target is known."""
    target = listing.target
    if not (target[0] or target[1]):
        last = next((it[1] for _, items in reversed(listing.hops) for it in items if it[0] == "addr"), None)
        target = last or (None, None)
    host = target[1] or target[0]
    rounds: dict[int, int] = {}
    for ttl, items in listing.hops:
        responder, rows, marked = None, [], None
        for kind, value in items:
            if kind == "addr":
                responder, marked = value, None
            elif kind == "star":
                rows.append([None, "none", None])
            elif kind == "ms":
                rows.append([responder, marked, value])
            elif kind == "mark" and rows and rows[-1][2] is not None:
                rows[-1][1] = "unreachable"
            elif kind == "ann" and value in ("open", "closed", "syn,ack", "rst"):
                # tcptraceroute puts "[open]" after the address, before its times
                marked = "closed" if value in ("closed", "rst") else "open"
                for r in rows:
                    if r[0] == responder and r[2] is not None:
                        r[1] = marked
        for resp, answer, rtt in rows:
            if answer is None:
                if _is_target(resp, target):
                    answer = "open" if listing.method in TCP_METHODS else "reply"
                else:
                    answer = "time_exceeded"
            rounds[ttl] = rounds.get(ttl, 0) + 1
            cols["target_host"].append(host)
            cols["target_port"].append(listing.port)
            cols["broker"].append(brokers.get((host, listing.port)))
            cols["ttl"].append(ttl)
            cols["round"].append(min(rounds[ttl], 2**15 - 1))
            cols["sent_us"].append(None)
            cols["responder"].append((resp[1] or resp[0]) if resp else None)
            cols["answer"].append(answer)
            cols["rtt_ms"].append(rtt)
            cols["method"].append(listing.method)
    listing.hops = []


def parse_listing(lines, brokers: dict | None = None) -> tuple[pa.Table, ParseCounts]:
    counts = ParseCounts("traceroute")
    cols: dict[str, list] = {f.name: [] for f in PROBES_SCHEMA}
    brokers = brokers or {}
    listing = _Listing()
    for no, raw, text, what in pasted_lines(lines, counts):
        if what == PROMPT:
            method = _method_of_command(text)
            if method is None:
                counts.reject(no, "not_traceroute", raw)
                continue
            _probe_rows(listing, brokers, cols)
            listing = _Listing()
            listing.method, listing.port = method, _port_of_command(text, method)
            counts.parsed += 1
            continue
        if _read_banner(text.strip(), listing, brokers, cols):
            counts.parsed += 1
            continue
        hop = _HOP.match(text)
        items = _items(hop.group(2)) if hop else None
        if not items or not any(k in ("ms", "star") for k, _ in items):
            counts.reject(no, "not_traceroute", raw)
            continue
        listing.hops.append((int(hop.group(1)), items))
        counts.parsed += 1
    _probe_rows(listing, brokers, cols)
    return pa.table(cols, schema=PROBES_SCHEMA), counts


def _read_banner(text: str, listing: _Listing, brokers: dict, cols: dict) -> bool:
    if _TCPTR_DEVICE.match(text):
        return True
    m = _TCPTR_BANNER.match(text)
    if m:
        if listing.hops:
            _probe_rows(listing, brokers, cols)
        listing.target, listing.port, listing.method = (m.group(1), m.group(2)), int(m.group(3)), "tcptraceroute"
        return True
    m = _TR_BANNER.match(text)
    if m:
        if listing.hops:
            _probe_rows(listing, brokers, cols)
        listing.target = (m.group(1), m.group(2))
        return True
    return False


def looks_like(sample: list[str]) -> float:
    """Share of the sample's own lines (see ``pasted``) that are a
    traceroute banner or hop line; 0 without a single hop line."""
    try:
        lines = cleaned(sample)
        if not lines:
            return 0.0
        hops = banners = 0
        for s in lines:
            t = s.strip()
            if _TCPTR_BANNER.match(t) or _TR_BANNER.match(t) or _TCPTR_DEVICE.match(t):
                banners += 1
                continue
            hop = _HOP.match(s)
            items = _items(hop.group(2)) if hop else None
            hops += bool(items) and any(k in ("ms", "star") for k, _ in items)
        return (hops + banners) / len(lines) if hops else 0.0
    except Exception:  # a guess about an arbitrary file must never raise
        return 0.0


def _parse_listing(lines: list[str], told: Told) -> tuple[pa.Table, ParseCounts]:
    return parse_listing(lines, told.brokers)


FORMATS = (
    Format(name="traceroute", recognised_by=BY_LINES, recognise=looks_like, tables={"probes": PROBES_SCHEMA},
           schema_version=1, reads=TEXT, parser=_parse_listing,
           title="traceroute listing", pseudonymised=TEXT_SCANNER, feeds={"probes": (PATH,)}, bundle_dir=None),
)
