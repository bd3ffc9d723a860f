"""The user's own ``ss -ti`` output -> table ``sockets``.

Reads ``ss -tin``, ``ss -tinp`` and ``ss -ti`` (names instead of
addresses), with or without the State and Netid columns (``ss ... state
established`` leaves State out), the TCP info on the socket's line or on
the next one, as pasted into a ticket (see ``kdiag.parsers.pasted``)::

    State Recv-Q Send-Q Local Address:Port  Peer Address:Port Process
    ESTAB 0      2236       127.0.0.1:49846    127.0.0.1:33029 users:(("python3",pid=10419,fd=5))
    	 bbr wscale:10,10 rto:224 rtt:20.155/24.055 ato:40 mss:46592 ... unacked:1 ... notsent:2096 minrtt:0.004

One row per socket as ``kdiag.parsers.sockets`` documents the table, from
what ss prints (its times are milliseconds, as here; its rates in ``bps``
become bytes a second). ``ts_us`` is null:
ss prints no time, which is how the analysis tells a pasted listing from
kdiag's own samples. ``sample`` counts the listings in the file (each
header line starts one), from 0. ``pid`` and ``fd`` come from ``-p``'s
``users:(...)``, else null; ``nodelay`` is null (ss does not show it).
Nagle holding a request shows as ``notsent:N unacked:1`` with ``ato:40``.

Skip reasons: ``empty``, ``markup``, ``not_ss``, ``orphan_info`` (TCP
info before any socket line). Header and prompt lines are read (parsed).
"""
from __future__ import annotations

import re

import pyarrow as pa

from kdiag.parsers.base import ParseCounts
from kdiag.parsers.format import BY_LINES, PATH, SOCKET_SAMPLES, TEXT, TEXT_SCANNER, Format, Told
from kdiag.parsers.pasted import PROMPT, cleaned, pasted_lines
from kdiag.parsers.sockets import SOCKETS_SCHEMA

# iproute2 ss prints the column titles "Netid", "State", "Recv-Q", "Send-Q", "Local Address:Port",
# "Peer Address:Port" ("Netid" with more than one socket type, "State" unless one state was asked for)
_HEADER = re.compile(r"^\s*(?:Netid\s+)?(?:State\s+)?Recv-Q\s+Send-Q\s+Local Address:Port\s+Peer Address:Port")
_STATES = {"ESTAB": "ESTABLISHED", "SYN-SENT": "SYN_SENT", "SYN-RECV": "SYN_RECV", "FIN-WAIT-1": "FIN_WAIT1",
           "FIN-WAIT-2": "FIN_WAIT2", "TIME-WAIT": "TIME_WAIT", "UNCONN": "CLOSE", "CLOSE-WAIT": "CLOSE_WAIT",
           "LAST-ACK": "LAST_ACK", "LISTEN": "LISTEN", "CLOSING": "CLOSING"}
_SOCKET = re.compile(r"^\s*(?:(?:tcp|tcp6)\s+)?(?:(?P<state>[A-Z][A-Z0-9-]+)\s+)?(?P<recvq>\d+)\s+(?P<sendq>\d+)\s+"
                     r"(?P<local>\S+:\S+)\s+(?P<remote>\S+:\S+)(?P<rest>.*)$")
_USERS = re.compile(r"users:\(\(\"[^\"]*\",pid=(\d+),fd=(\d+)\)")
_INODE = re.compile(r"\bino:(\d+)")
# The TCP info items: "rtt:20.155/24.055", "ato:40", "minrtt:0.004", "notsent:2096",
# "unacked:1", "retrans:0/3", "cwnd:18", "busy:508ms", "send 332882560bps",
# "pacing_rate 104Gbps", "delivery_rate 10Gbps"; "bbr:(bw:...,mrtt:...)" is not read.
_PAIR = re.compile(r"(?<![\w(,])([a-z_]+):([\d.]+(?:/[\d.]+)?)(ms)?"
                   r"|\b(send|pacing_rate|delivery_rate) ([\d.]+)([KMGT]?)bps")
_INT_FIELDS = {"unacked": "unacked", "notsent": "notsent_bytes", "cwnd": "snd_cwnd", "ssthresh": "snd_ssthresh",
               "mss": "snd_mss_bytes", "rcvmss": "rcv_mss_bytes", "advmss": "advmss_bytes", "pmtu": "pmtu_bytes",
               "rcv_space": "rcv_space_bytes", "rcv_ssthresh": "rcv_ssthresh_bytes", "snd_wnd": "snd_wnd_bytes",
               "rcv_wnd": "rcv_wnd_bytes", "bytes_sent": "bytes_sent", "bytes_acked": "bytes_acked",
               "bytes_received": "bytes_received", "bytes_retrans": "bytes_retrans", "segs_out": "segs_out",
               "segs_in": "segs_in", "data_segs_out": "data_segs_out", "data_segs_in": "data_segs_in",
               "lost": "lost", "sacked": "sacked", "reordering": "reordering", "delivered": "delivered",
               "dsack_dups": "dsack_dups", "reord_seen": "reord_seen", "rcv_ooopack": "rcv_ooopack",
               "backoff": "backoff", "lastsnd": "last_data_sent_ms", "lastrcv": "last_data_recv_ms",
               "lastack": "last_ack_recv_ms"}
_MS_FIELDS = {"rto": "rto_ms", "ato": "ato_ms", "minrtt": "min_rtt_ms", "rcv_rtt": "rcv_rtt_ms",
              "busy": "busy_time_ms", "rwnd_limited": "rwnd_limited_ms", "sndbuf_limited": "sndbuf_limited_ms"}
_RATE = {"pacing_rate": "pacing_rate_bytes_s", "delivery_rate": "delivery_rate_bytes_s"}
_SCALE = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_INT_TYPES = (pa.int64(), pa.int32())


def _port(addr: str) -> int | None:
    p = addr.rpartition(":")[2]
    return int(p) if p.isdecimal() and int(p) <= 65535 else None


def _info(text: str, row: dict) -> int:
    """Fill row from the TCP info items in text; how many were read."""
    n = 0
    for m in _PAIR.finditer(text):
        n += 1
        if m.group(4):
            if m.group(4) in _RATE:
                rate = float(m.group(5)) * _SCALE[m.group(6)] / 8
                row[_RATE[m.group(4)]] = int(rate) if rate < 2**63 else None
            continue
        key, value = m.group(1), m.group(2)
        first, _, second = value.partition("/")
        try:
            if key == "rtt":
                row["rtt_ms"], row["rttvar_ms"] = float(first), float(second) if second else None
            elif key == "retrans":
                row["retrans"], row["total_retrans"] = int(float(first)), int(float(second)) if second else None
            elif key in _MS_FIELDS:
                row[_MS_FIELDS[key]] = float(first)
            elif key in _INT_FIELDS:
                row[_INT_FIELDS[key]] = int(float(first))
            else:
                n -= 1
        except (ValueError, OverflowError):
            n -= 1
    if re.search(r"\bapp_limited\b", text):
        row["delivery_rate_app_limited"] = True
    return n


def _is_socket(m: re.Match | None) -> bool:
    return bool(m) and (m.group("state") is None or m.group("state") in _STATES)


def _is_info(text: str) -> bool:
    """A line of TCP info items (ss indents it with a tab; a chat may not)."""
    return ("rtt:" in text or "cwnd:" in text) and _info(text, {}) >= 2


def _socket_row(m: re.Match, no: int, sample: int) -> dict:
    state = m.group("state")
    row = {"line_no": no, "ts_us": None, "sample": sample, "local": m.group("local"), "remote": m.group("remote"),
           "local_port": _port(m.group("local")), "remote_port": _port(m.group("remote")),
           "state": _STATES.get(state, state.replace("-", "_")) if state else None}
    if u := _USERS.search(m.group("rest")):
        row["pid"], row["fd"] = int(u.group(1)), int(u.group(2))
    if i := _INODE.search(m.group("rest")):
        row["inode"] = int(i.group(1))
    _info(m.group("rest"), row)
    return row


def parse_ss(lines, brokers: dict | None = None) -> tuple[pa.Table, ParseCounts]:
    counts = ParseCounts("ss")
    rows: list[dict] = []
    sample = -1
    for no, raw, text, what in pasted_lines(lines, counts):
        if what == PROMPT and re.search(r"\bss\b", text):
            counts.parsed += 1
        elif _HEADER.match(text):
            sample += 1
            counts.parsed += 1
        elif what is None and _is_socket(m := _SOCKET.match(text)):
            rows.append(_socket_row(m, no, max(sample, 0)))
            counts.parsed += 1
        elif what is None and _is_info(text):
            if rows:
                _info(text, rows[-1])
                counts.parsed += 1
            else:
                counts.reject(no, "orphan_info", raw)
        else:
            counts.reject(no, "not_ss", raw)
    return pa.Table.from_pylist([_fit(r) for r in rows], schema=SOCKETS_SCHEMA), counts


_LIMITS = {pa.int32(): 2**31, pa.int64(): 2**63}


def _fit(row: dict) -> dict:
    """A number past its column's range (a mangled line) becomes null."""
    for key, value in row.items():
        if isinstance(value, int) and not isinstance(value, bool):
            limit = _LIMITS.get(SOCKETS_SCHEMA.field(key).type)
            if limit and not -limit <= value < limit:
                row[key] = None
    return row


def looks_like(sample: list[str]) -> float:
    """Share of the sample's own lines that ss printed; 0 without a socket
    line that carries TCP info (``rtt:``) or is followed by one."""
    try:
        lines = cleaned(sample)
        if not lines:
            return 0.0
        good = info = 0
        for s in lines:
            if _HEADER.match(s):
                good += 1
            elif _is_socket(_SOCKET.match(s)):
                good += 1
                info += "rtt:" in s
            elif _is_info(s):
                good += 1
                info += 1
        return good / len(lines) if info else 0.0
    except Exception:  # a guess about an arbitrary file must never raise
        return 0.0


def _parse_ss(lines: list[str], told: Told) -> tuple[pa.Table, ParseCounts]:
    return parse_ss(lines, told.brokers)


FORMATS = (
    Format(name="ss", recognised_by=BY_LINES, recognise=looks_like, tables={"sockets": SOCKETS_SCHEMA},
           schema_version=1, reads=TEXT, parser=_parse_ss,
           title="ss -ti listing", pseudonymised=TEXT_SCANNER, feeds={"sockets": (SOCKET_SAMPLES, PATH)}, bundle_dir=None),
)
