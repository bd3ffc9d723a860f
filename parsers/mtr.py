"""The user's own ``mtr`` reports -> table ``probes``.

Reads ``mtr --report`` and ``--report-wide`` text (with ``-b``: ``name
(address)``) and ``mtr --json``, as pasted into a ticket (see
``kdiag.parsers.pasted``)::

    Start: 2026-11-25T15:41:30+0000
    HOST: vm                          Loss%   Snt   Last   Avg  Best  Wrst StDev
      1.|-- 10.201.1.1                 0.0%     3   31.5  30.8  30.5  31.5   0.6
      2.|-- 10.201.2.2                 0.0%     3   30.4  30.5  30.4  30.6   0.1

mtr gives each hop's statistics, not its probes: a hop of ``Snt`` probes
and ``Loss%`` becomes ``Snt`` rows, the lost ones ``none`` and the
answered ones carrying Best, then Avg, then Wrst (so the path table's
min/median/max are mtr's Best/Avg/Wrst; with fewer than three answered
probes, Avg alone). ``ttl`` is the hop number, ``sent_us`` null.

Neither form says which protocol mtr sent. ``method`` is ``mtr_tcp``,
``mtr_udp`` or ``mtr_icmp`` when a prompt line shows the command
(``--tcp``/``-T``, ``--udp``/``-u``, else ICMP, mtr's default), and
``mtr`` without one. The target is the command's host, else the JSON's
``dst``, else the last hop; its answer is ``open`` to a TCP probe (the
broker's port answered) and ``reply`` to the others; every other hop's is
``time_exceeded``. The port is the command's ``-P``/``--port``, else null.

Skip reasons: ``empty``, ``markup``, ``not_mtr`` (a line of neither form),
``not_json`` (a JSON report that does not decode). Header, prompt and
JSON lines are read (parsed).
"""
from __future__ import annotations

import json
import math
import re

import pyarrow as pa

from kdiag.parsers.base import ParseCounts
from kdiag.parsers.format import BY_LINES, PATH, TEXT, TEXT_SCANNER, Format, Told
from kdiag.parsers.pasted import PROMPT, cleaned, pasted_lines
from kdiag.parsers.tcp_probe import PROBES_SCHEMA

# mtr 0.9x --report prints "Start: 2026-11-25T15:41:30+0000", then "HOST: vm"
# and the chosen fields' titles ("Loss%", "Snt", "Last", "Avg", "Best",
# "Wrst", "StDev" by default).
_START = re.compile(r"^Start: \S+")
_HEADER = re.compile(r"^HOST: \S*\s+(.*?)\s*$")
# Then "  1.|-- 10.201.1.1   0.0%   3  31.5 ..." per hop (with -z an AS
# column before "|--"), and "    |  `|-- ADDRESS" for another address of a hop.
_HOP = re.compile(r"^\s*(\d{1,3})\.(?:\s*AS\S+)?\s*\|--\s+(\S.*?)\s*$")
_OTHER = re.compile(r"^\s*\|\s+`\|--\s+\S+")
_MPLS = re.compile(r"^\s*\[MPLS: ")
DEFAULT_FIELDS = ["Loss%", "Snt", "Last", "Avg", "Best", "Wrst", "StDev"]
# Rows a hop may make: a real report sends tens of probes a hop; a mangled
# "Snt" must not make millions.
MAX_ROUNDS = 1000
_JSON_KEY = re.compile(r'^\s*"[^"]+"\s*:|^\s*[\[\]{},]+\s*$')


def _command(text: str) -> tuple[str, str | None, int | None] | None:
    """(method, host, port) of a prompt line that ran mtr."""
    words = text.split()
    at = next((i for i, w in enumerate(words) if w.rsplit("/", 1)[-1] == "mtr"), None)
    if at is None:
        return None
    args = words[at + 1:]
    flags = " " + " ".join(args) + " "
    method = "mtr_tcp" if re.search(r" (?:--tcp|-\w*T\w*) ", flags) else \
        "mtr_udp" if re.search(r" (?:--udp|-\w*u\w*) ", flags) else "mtr_icmp"
    m = re.search(r"(?:^|\s)(?:-P|--port)[ =]?(\d+)", flags)
    valued = {"-P", "--port", "-c", "--report-cycles", "-s", "--psize", "-i", "--interval", "-a", "--address",
              "-f", "--first-ttl", "-m", "--max-ttl", "-o", "--order", "-Q", "--tos", "-L", "--localport",
              "-I", "--interface", "-B", "--bitpattern", "-G", "--gracetime", "-Z", "--timeout", "-M", "--mark"}
    host, skip = None, False
    for w in args:
        if skip:
            skip = False
        elif w in valued:
            skip = True
        elif not w.startswith("-") and not w.startswith(("|", ">")):
            host = w
    return method, host, int(m.group(1)) if m else None


class _Report:
    def __init__(self) -> None:
        self.method, self.host, self.port = "mtr", None, None
        self.fields = DEFAULT_FIELDS
        self.hops: list[tuple[int, str | None, dict, str]] = []   # (hop, responder, field -> value, as printed)


def _responder(text: str) -> str | None:
    m = re.match(r"^(\S+)\s+\(([^)\s]+)\)$", text)
    name = m.group(2) if m else text.split()[0]
    return None if name.startswith("???") else name


def _emit(rep: _Report, brokers: dict, cols: dict) -> None:
    if not rep.hops:
        return
    # Without the command or dst, the last hop is the target if it answered.
    target = rep.host or rep.hops[-1][1]
    # "-b" prints "name (address)": a target given by name is the hop of that name
    target = next((r for _, r, _, shown in rep.hops
                   if r and target in shown.replace("(", " ").replace(")", " ").split()), target)
    if target is not None and not any(r == target for _, r, _, _ in rep.hops) and rep.hops[-1][1]:
        target = rep.hops[-1][1]   # mtr stops at the host it traced: "localhost" for 127.0.0.1
    tcp = rep.method == "mtr_tcp"
    for hop, resp, vals, _ in rep.hops:
        sent = min(int(vals.get("Snt") or 0), MAX_ROUNDS)
        lost = min(sent, max(0, round(sent * float(vals.get("Loss%") or 0.0) / 100.0)))
        got = max(0, sent - lost) if resp else 0
        best, avg, worst = vals.get("Best"), vals.get("Avg"), vals.get("Wrst")
        rtts = [avg] * got if got < 3 else [best] + [avg] * (got - 2) + [worst]
        answer = ("open" if tcp else "reply") if resp is not None and resp == target else "time_exceeded"
        for rnd in range(1, max(sent, got) + 1):
            rtt = rtts[rnd - 1] if rnd <= got else None
            cols["target_host"].append(target)
            cols["target_port"].append(rep.port)
            cols["broker"].append(brokers.get((target, rep.port)))
            cols["ttl"].append(hop)
            cols["round"].append(rnd)
            cols["sent_us"].append(None)
            cols["responder"].append(resp if rtt is not None else None)
            cols["answer"].append(answer if rtt is not None else "none")
            cols["rtt_ms"].append(float(rtt) if rtt is not None else None)
            cols["method"].append(rep.method)
    rep.hops = []


def _number(text: str) -> float | None:
    try:
        value = float(text.rstrip("%"))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _read_hop(text: str, rep: _Report) -> bool:
    m = _HOP.match(text)
    if not m:
        return False
    words = m.group(2).split()
    n = len(rep.fields)
    if len(words) <= n:
        return False
    values = [_number(w) for w in words[-n:]]
    if any(v is None for v in values):
        return False
    shown = " ".join(words[:-n])
    rep.hops.append((int(m.group(1)), _responder(shown), dict(zip(rep.fields, values)), shown))
    return True


def _read_json(text: str, rep: _Report) -> bool:
    try:
        obj = json.loads(text[text.index("{"):text.rindex("}") + 1])
        report = obj["report"]
        rep.host = rep.host or report.get("mtr", {}).get("dst")
        for hub in report["hubs"]:
            host, hop = str(hub.get("host", "???")), int(hub["count"])
            if not 0 < hop <= 255:
                raise ValueError(f"hop {hop}")
            rep.hops.append((hop, None if host.startswith("???") else host,
                             {k: _number(str(hub.get(k))) for k in DEFAULT_FIELDS}, host))
        return True
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return False


def parse_report(lines, brokers: dict | None = None) -> tuple[pa.Table, ParseCounts]:
    counts = ParseCounts("mtr")
    cols: dict[str, list] = {f.name: [] for f in PROBES_SCHEMA}
    brokers, rep = brokers or {}, _Report()
    json_lines: list[tuple[int, str, str]] = []
    for no, raw, text, what in pasted_lines(lines, counts):
        if what == PROMPT:
            cmd = _command(text)
            if cmd is None:
                counts.reject(no, "not_mtr", raw)
                continue
            _emit(rep, brokers, cols)
            rep = _Report()
            rep.method, rep.host, rep.port = cmd
            counts.parsed += 1
        elif json_lines or (text.lstrip().startswith("{") and not _HOP.match(text)):
            json_lines.append((no, text, raw))
        elif _START.match(text) or _OTHER.match(text) or _MPLS.match(text):
            counts.parsed += 1
        elif h := _HEADER.match(text):
            rep.fields = h.group(1).split() or DEFAULT_FIELDS
            counts.parsed += 1
        elif _read_hop(text, rep):
            counts.parsed += 1
        else:
            counts.reject(no, "not_mtr", raw)
    if json_lines:
        if _read_json("\n".join(t for _, t, _ in json_lines), rep):
            counts.parsed += len(json_lines)
        else:
            counts.reject(json_lines[0][0], "not_json", json_lines[0][2])
            counts.skip("not_json", len(json_lines) - 1)
    _emit(rep, brokers, cols)
    return pa.table(cols, schema=PROBES_SCHEMA), counts


def looks_like(sample: list[str]) -> float:
    """Share of the sample's own lines that are an mtr report's (text), or
    of a JSON report's lines when it holds ``"hubs"``; 0 without a hop."""
    try:
        lines = cleaned(sample)
        if not lines:
            return 0.0
        if any('"hubs"' in s for s in lines) and any('"report"' in s for s in lines):
            return sum(bool(_JSON_KEY.match(s)) or '"hubs"' in s for s in lines) / len(lines)
        rep, good = _Report(), 0
        for s in lines:
            if _START.match(s) or _HEADER.match(s) or _OTHER.match(s) or _MPLS.match(s):
                good += 1
            elif _read_hop(s, rep):
                good += 1
        return good / len(lines) if rep.hops else 0.0
    except Exception:  # a guess about an arbitrary file must never raise
        return 0.0


def _parse_report(lines: list[str], told: Told) -> tuple[pa.Table, ParseCounts]:
    return parse_report(lines, told.brokers)


FORMATS = (
    Format(name="mtr", recognised_by=BY_LINES, recognise=looks_like, tables={"probes": PROBES_SCHEMA},
           schema_version=1, reads=TEXT, parser=_parse_report,
           title="mtr report", pseudonymised=TEXT_SCANNER, feeds={"probes": (PATH,)}, bundle_dir=None),
)
