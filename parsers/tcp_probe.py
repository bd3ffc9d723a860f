"""TCP path probes -> tables ``probes`` and ``handshakes``, and the path table.

Three inputs, all written by ``collectors/tcp_probe.py``:

* ``probes.pcap``: every SYN probe sent and every answer received, with
  capture timestamps. ``parse_pcap`` rebuilds the hops from these packets
  alone. It reads classic pcap (both byte orders, micro- and nanosecond) and
  pcapng, with raw-IP, Ethernet (VLAN tags skipped), Linux cooked (v1, v2)
  and BSD loopback link layers, so a ``tcpdump -w`` of a probe run reads too.
* ``probes.jsonl``: the same per-probe results as measured live; the only
  record of the ``connect`` method, which has no packets of its own.
* ``handshakes.jsonl``: timed plain ``connect()`` calls to each broker.

How a probe is recognised in packets: a TCP segment with SYN alone whose
sequence number carries the tag ``0x6b64`` ("kd") in its upper 16 bits, the
TTL in the next 8 and the round in the lowest 8 (``probe_seq``). An answer is
matched to its probe by

* an ICMP error (time exceeded, destination unreachable): the TCP header it
  quotes (addresses, ports and sequence number);
* a SYN-ACK or RST from the target: the reversed 4-tuple and ``ack - 1``.

The first answer to a probe counts; later ones are counted as duplicates.
RSTs from the prober to the target (its own, or its kernel's after a
SYN-ACK) are part of the exchange: parsed, but they make no row.

``ParseCounts.lines`` counts packet records for a pcap (plus one for a
header that is not pcap, and one for a record cut short at the end; pcapng
blocks that hold no packet are not records); for the JSON files it counts
lines. Skip reasons: ``not_pcap``, ``truncated``,
``corrupt`` (a record length that cannot be), ``unsupported_link``,
``not_ipv4``, ``malformed`` (an IPv4/TCP/ICMP header cut short or
inconsistent), ``no_timestamp`` (pcapng simple packet), ``foreign`` (a
packet that is not part of a probe exchange), ``unmatched_answer`` (answers
a tagged probe that is not in the capture), ``duplicate_probe``,
``duplicate_answer``; ``empty``, ``not_json``, ``not_probe``,
``not_handshake`` for the JSON lines.

Table ``probes``: one row per probe sent.

============  =======  ========================================================
column        type     meaning (null when stated)
============  =======  ========================================================
target_host   string   the target's IPv4 address as probed
target_port   int32    the target's TCP port
broker        string   librdkafka's broker name; null when not known (a pcap
                       does not carry it: pass ``brokers`` to ``parse_pcap``)
ttl           int16    IP time to live the probe was sent with (1 = first hop)
round         int16    1-based round: the n-th probe sent at this TTL
sent_us       int64    when the probe left, epoch microseconds; null when the
                       live record lacks it or the capture's is out of range
responder     string   source address of the answer; null when no answer
answer        string   ``time_exceeded`` (ICMP type 11 from a router),
                       ``open`` (SYN-ACK from the target), ``closed`` (RST
                       from the target), ``unreachable`` (ICMP type 3, or a
                       local routing error for ``connect``), ``none`` (no
                       answer before the probing ended); ``reply`` only from
                       the user's tools: the target host answered a ping or
                       a UDP/ICMP traceroute
rtt_ms        float64  probe sent to answer received, milliseconds; null when
                       no answer
method        string   ``syn`` (raw SYN packets) or ``connect`` (non-blocking
                       connect() with IP_TTL and IP_RECVERR, no raw socket);
                       the user's own tools' output gives ``tcptraceroute``,
                       ``traceroute_t``, ``traceroute_udp``, ``traceroute_icmp``,
                       ``traceroute``, ``mtr_tcp``, ``mtr_udp``, ``mtr_icmp``,
                       ``mtr``, ``icmp_ping`` (kdiag.parsers.traceroute, .mtr,
                       .ping)
============  =======  ========================================================

Table ``handshakes``: one row per timed connect().

============  =======  ========================================================
target_host   string   address connected to
target_port   int32    port
broker        string   librdkafka's broker name; null when not known
ts_us         int64    when connect() was called, epoch microseconds
rtt_ms        float64  connect() call to established, milliseconds: one SYN,
                       SYN-ACK round trip plus the local stack; null on error
error         string   null when connected; else ``timeout`` or the errno
                       name (``ECONNREFUSED``, ``EHOSTUNREACH``, ...)
============  =======  ========================================================

The path table (``path_table``, ``format_path_table``): kdiag.parsers.tcp_path.
"""
from __future__ import annotations

import math
import struct
from collections.abc import Iterable
from typing import NamedTuple

import pyarrow as pa

from kdiag.parsers.base import ParseCounts, json_lines, scrub
from kdiag.parsers.format import BY_JSON_KEYS, PATH, TEXT, TEXT_SCANNER, Format, Told
from kdiag.parsers.pcap import capture_records

# Re-exported: the collector and the report read them here.
from kdiag.parsers.tcp_path import FINAL_ANSWERS, PATH_SCHEMA, format_path_table, path_table  # noqa: F401

# LINKTYPE_RAW re-exported: the collector writes its captures with it.
from kdiag.parsers.wire.packets import LINKTYPE_RAW, network_offset  # noqa: F401

PROBES_SCHEMA = pa.schema(
    [
        ("target_host", pa.string()),
        ("target_port", pa.int32()),
        ("broker", pa.string()),
        ("ttl", pa.int16()),
        ("round", pa.int16()),
        ("sent_us", pa.int64()),
        ("responder", pa.string()),
        ("answer", pa.string()),
        ("rtt_ms", pa.float64()),
        ("method", pa.string()),
    ]
)
HANDSHAKES_SCHEMA = pa.schema(
    [
        ("target_host", pa.string()),
        ("target_port", pa.int32()),
        ("broker", pa.string()),
        ("ts_us", pa.int64()),
        ("rtt_ms", pa.float64()),
        ("error", pa.string()),
    ]
)
ANSWERS = ("time_exceeded", "open", "closed", "unreachable", "none")
METHODS = ("syn", "connect")

SEQ_TAG = 0x6B64


def probe_seq(ttl: int, rnd: int) -> int:
    """The TCP sequence number of the probe (ttl, rnd); both 1..255."""
    return (SEQ_TAG << 16) | ((ttl & 0xFF) << 8) | (rnd & 0xFF)


def probe_of_seq(seq: int) -> tuple[int, int] | None:
    """(ttl, round) of a probe's sequence number; None if not a probe's."""
    if seq >> 16 != SEQ_TAG:
        return None
    ttl, rnd = (seq >> 8) & 0xFF, seq & 0xFF
    return (ttl, rnd) if ttl and rnd else None


# ---------------------------------------------------------------- packets

TCP_FIN, TCP_SYN, TCP_RST, TCP_ACK = 0x01, 0x02, 0x04, 0x10
ICMP_UNREACH, ICMP_TIME_EXCEEDED = 3, 11


class Packet(NamedTuple):
    """An IPv4 TCP segment or ICMP error, the fields probing needs."""

    src: str
    dst: str
    proto: int
    sport: int = 0
    dport: int = 0
    seq: int = 0
    ack: int = 0
    flags: int = 0
    icmp_type: int = -1
    # The TCP header an ICMP error quotes: (src, dst, sport, dport, seq).
    quoted: tuple[str, str, int, int, int] | None = None


def _addr(b: bytes) -> str:
    return f"{b[0]}.{b[1]}.{b[2]}.{b[3]}"


def dissect_ipv4(ip: bytes) -> Packet | str:
    """A Packet, or the skip reason: ``not_ipv4``, ``malformed``,
    ``foreign`` (a fragment, or neither TCP nor an ICMP error quoting TCP)."""
    if len(ip) < 20 or ip[0] >> 4 != 4:
        return "not_ipv4"
    ihl = (ip[0] & 0x0F) * 4
    total = int.from_bytes(ip[2:4], "big")
    if ihl < 20 or len(ip) < ihl or total < ihl:
        return "malformed"
    ip = ip[:total]  # Ethernet pads short frames
    if int.from_bytes(ip[6:8], "big") & 0x1FFF:
        return "foreign"
    proto = ip[9]
    src, dst = _addr(ip[12:16]), _addr(ip[16:20])
    body = ip[ihl:]
    if proto == 6:
        if len(body) < 14:
            return "malformed"
        sport, dport, seq, ack = struct.unpack_from("!HHII", body)
        return Packet(src, dst, 6, sport, dport, seq, ack, body[13])
    if proto != 1 or len(body) < 8 or body[0] not in (ICMP_UNREACH, ICMP_TIME_EXCEEDED):
        return "foreign"
    q = body[8:]
    if len(q) < 20 or q[0] >> 4 != 4:
        return "malformed"
    qihl = (q[0] & 0x0F) * 4
    if qihl < 20:
        return "malformed"
    if q[9] != 6:
        return "foreign"
    # RFC 792 guarantees 8 bytes of the offending datagram: ports and seq.
    if len(q) < qihl + 8:
        return "malformed"
    qs, qd, qseq = struct.unpack_from("!HHI", q, qihl)
    return Packet(src, dst, 1, icmp_type=body[0], quoted=(_addr(q[12:16]), _addr(q[16:20]), qs, qd, qseq))


def _ip_of_frame(linktype: int, frame: bytes) -> bytes | str:
    """The IP packet of a frame (its version is dissect_ipv4's to check),
    or the skip reason: probes are IPv4, so every frame that is not is
    ``not_ipv4``."""
    off = network_offset(linktype, frame)
    if isinstance(off, str):
        return off if off == "unsupported_link" else "not_ipv4"
    return frame[off:] if off else frame


def _sent_probes(records, counts: ParseCounts) -> tuple[dict, dict, list]:
    """The probes sent, by (src, sport, dst, dport, seq); each flow's
    first-seen order; every other packet as (record no, ts_ns, packet)."""
    probes: dict[tuple, dict] = {}
    flows: dict[tuple, int] = {}
    others: list[tuple[int, int, Packet]] = []
    for ts, linktype, frame in records:
        no = counts.lines
        ip = _ip_of_frame(linktype, frame)
        pkt = ip if isinstance(ip, str) else dissect_ipv4(ip)
        if isinstance(pkt, str):
            counts.skip(pkt)
            if pkt != "foreign":
                counts.example(no, pkt, frame[:64].hex())
            continue
        tr = None
        if pkt.proto == 6 and pkt.flags & (TCP_SYN | TCP_ACK | TCP_RST | TCP_FIN) == TCP_SYN:
            tr = probe_of_seq(pkt.seq)
        if tr is None:
            others.append((no, ts, pkt))
            continue
        key = (pkt.src, pkt.sport, pkt.dst, pkt.dport, pkt.seq)
        if key in probes:
            counts.skip("duplicate_probe")
            continue
        flows.setdefault(key[:4], len(flows))
        probes[key] = {"ts": ts, "ttl": tr[0], "round": tr[1], "answer_ts": None, "responder": None, "answer": "none"}
        counts.parsed += 1
    return probes, flows, others


def _answer_of(pkt: Packet) -> tuple[tuple | None, str | None]:
    """The probe a packet answers, by its key, and the answer."""
    if pkt.proto == 1:
        key = (pkt.quoted[0], pkt.quoted[2], pkt.quoted[1], pkt.quoted[3], pkt.quoted[4])
        return key, "time_exceeded" if pkt.icmp_type == ICMP_TIME_EXCEEDED else "unreachable"
    if pkt.flags & TCP_ACK and pkt.flags & (TCP_SYN | TCP_RST):
        key = (pkt.dst, pkt.dport, pkt.src, pkt.sport, (pkt.ack - 1) & 0xFFFFFFFF)
        return key, "open" if pkt.flags & TCP_SYN else "closed"
    return None, None


def _match_answers(probes: dict, flows: dict, others: list, counts: ParseCounts) -> None:
    for no, ts, pkt in others:
        key, answer = _answer_of(pkt)
        if key is not None and key in probes:
            row = probes[key]
            if row["answer_ts"] is not None:
                counts.skip("duplicate_answer")
                continue
            row.update(answer_ts=ts, responder=pkt.src, answer=answer)
            counts.parsed += 1
        elif pkt.proto == 6 and pkt.flags & TCP_RST and (pkt.src, pkt.sport, pkt.dst, pkt.dport) in flows:
            counts.parsed += 1   # the prober's reset after a SYN-ACK
        elif key is not None and probe_of_seq(key[4]) is not None:
            counts.skip("unmatched_answer")
            counts.example(no, "unmatched_answer", f"{pkt.src} -> {pkt.dst} answers a probe not captured")
        else:
            counts.skip("foreign")


def _probes_table(probes: dict, flows: dict, brokers: dict) -> pa.Table:
    order = sorted(probes.items(), key=lambda kv: (flows[kv[0][:4]], kv[1]["ttl"], kv[1]["round"], kv[1]["ts"]))
    cols: dict[str, list] = {f.name: [] for f in PROBES_SCHEMA}
    for (_src, _sport, dst, dport, _seq), row in order:
        cols["target_host"].append(dst)
        cols["target_port"].append(dport)
        cols["broker"].append(brokers.get((dst, dport)))
        cols["ttl"].append(row["ttl"])
        cols["round"].append(row["round"])
        sent_us = row["ts"] // 1000
        cols["sent_us"].append(sent_us if -(2**63) <= sent_us < 2**63 else None)
        cols["responder"].append(row["responder"])
        cols["answer"].append(row["answer"])
        cols["rtt_ms"].append(None if row["answer_ts"] is None else (row["answer_ts"] - row["ts"]) / 1e6)
        cols["method"].append("syn")
    return pa.table(cols, schema=PROBES_SCHEMA)


def parse_pcap(data: bytes, brokers: dict[tuple[str, int], str] | None = None
               ) -> tuple[pa.Table, ParseCounts]:
    """Rebuild the probes from the packets. ``brokers`` maps (address, port)
    to librdkafka's broker name for the ``broker`` column."""
    counts = ParseCounts("tcp_probe_pcap")
    data = bytes(data)
    if not data:
        return PROBES_SCHEMA.empty_table(), counts
    records = capture_records(data, counts)
    if records is None:
        counts.lines += 1
        counts.skip("not_pcap")
        counts.example(1, "not_pcap", data[:32].hex())
        return PROBES_SCHEMA.empty_table(), counts
    probes, flows, others = _sent_probes(records, counts)
    _match_answers(probes, flows, others, counts)
    return _probes_table(probes, flows, brokers or {}), counts


# ---------------------------------------------------------------- JSON lines

def _int(v, lo: int, hi: int):
    if isinstance(v, bool) or not isinstance(v, int):
        return None
    return v if lo <= v <= hi else None


def _ms(v):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        v = float(v)
    except OverflowError:  # an integer past float range
        return None
    return v if math.isfinite(v) and v >= 0 else None


def _str(v):
    return v if isinstance(v, str) else None


def _json_rows(lines, counts: ParseCounts, kind: str):
    for no, text, obj in json_lines(lines, counts):
        if not isinstance(obj, dict):
            counts.reject(no, kind, text)
            continue
        yield no, text, obj


def _table(cols: dict, schema: pa.Schema) -> pa.Table:
    try:
        return pa.table(cols, schema=schema)
    except UnicodeEncodeError:
        return pa.table(scrub(cols), schema=schema)


def _target_of(obj: dict) -> tuple[str | None, int | None]:
    host, port = _str(obj.get("target_host")), _int(obj.get("target_port"), 0, 65535)
    if (host is None or port is None) and isinstance(obj.get("target"), str):
        # "host:port", "[v6]:port"
        h, _, p = obj["target"].rpartition(":")
        host = host or (h.strip("[]") or None)
        port = port if port is not None else (int(p) if p.isdecimal() and len(p) <= 10 and int(p) <= 65535 else None)
    return host, port


def parse_probes_jsonl(lines: Iterable[str]) -> tuple[pa.Table, ParseCounts]:
    """The live per-probe results, one JSON object a line with the
    ``probes`` columns as keys."""
    counts = ParseCounts("tcp_probe_jsonl")
    cols: dict[str, list] = {f.name: [] for f in PROBES_SCHEMA}
    for no, text, obj in _json_rows(lines, counts, "not_probe"):
        host, port = _target_of(obj)
        ttl, rnd = _int(obj.get("ttl"), 1, 255), _int(obj.get("round"), 0, 2**15 - 1)
        answer = obj.get("answer")
        method = _str(obj.get("method"))
        if host is None or port is None or ttl is None or rnd is None or answer not in ANSWERS \
                or (method is not None and method not in METHODS):
            counts.skip("not_probe")
            counts.example(no, "not_probe", text)
            continue
        counts.parsed += 1
        cols["target_host"].append(host)
        cols["target_port"].append(port)
        cols["broker"].append(_str(obj.get("broker")))
        cols["ttl"].append(ttl)
        cols["round"].append(rnd)
        cols["sent_us"].append(_int(obj.get("sent_us"), 0, 2**63 - 1))
        cols["responder"].append(_str(obj.get("responder")))
        cols["answer"].append(answer)
        cols["rtt_ms"].append(_ms(obj.get("rtt_ms")) if answer != "none" else None)
        cols["method"].append(method)
    return _table(cols, PROBES_SCHEMA), counts


def parse_handshakes(lines: Iterable[str]) -> tuple[pa.Table, ParseCounts]:
    """Timed connect()s, one JSON object a line: ``target_host``,
    ``target_port`` (or ``target`` as "host:port"), ``broker``, ``ts_us``,
    ``rtt_ms``, ``error``."""
    counts = ParseCounts("tcp_handshakes")
    cols: dict[str, list] = {f.name: [] for f in HANDSHAKES_SCHEMA}
    for no, text, obj in _json_rows(lines, counts, "not_handshake"):
        host, port = _target_of(obj)
        if host is None or port is None or ("rtt_ms" not in obj and "error" not in obj):
            counts.skip("not_handshake")
            counts.example(no, "not_handshake", text)
            continue
        counts.parsed += 1
        error = _str(obj.get("error"))
        cols["target_host"].append(host)
        cols["target_port"].append(port)
        cols["broker"].append(_str(obj.get("broker")))
        cols["ts_us"].append(_int(obj.get("ts_us"), 0, 2**63 - 1))
        cols["rtt_ms"].append(None if error else _ms(obj.get("rtt_ms")))
        cols["error"].append(error)
    return _table(cols, HANDSHAKES_SCHEMA), counts

# ------------------------------------------------------------ format declarations

def _probe_result_keys(keys: set) -> bool:
    return {"ttl", "answer", "responder"} <= keys


def _handshake_keys(keys: set) -> bool:
    # Not a probe result (ttl) nor a statistics line (brokers).
    return {"rtt_ms", "ts_us"} <= keys and "ttl" not in keys and "brokers" not in keys


def _probes_file(lines: list[str], told: Told) -> tuple[pa.Table, ParseCounts]:
    table, counts = parse_probes_jsonl(lines)   # names its brokers itself
    if told.packets:
        # The packets are the record of SYN probes; the results file then
        # adds only what has no packets (the connect() fallback).
        import pyarrow.compute as pc

        table = table.filter(pc.invert(pc.fill_null(pc.equal(table["method"], "syn"), False)))
    return table, counts


def _handshakes_file(lines: list[str], told: Told) -> tuple[pa.Table, ParseCounts]:
    table, counts = parse_handshakes(lines)
    # A pcap cannot name brokers: the handshakes, read first, do.
    for r in table.select(["target_host", "target_port", "broker"]).to_pylist():
        if r["broker"]:
            told.brokers[(r["target_host"], r["target_port"])] = r["broker"]
    return table, counts


# A capture's format ("pcap") is declared by kdiag.parsers.wire.parser,
# which reads its probes with parse_pcap beside the producer's connections.
FORMATS = (
    Format(name="probes_jsonl", recognised_by=BY_JSON_KEYS, recognise=_probe_result_keys,
           tables={"probes": PROBES_SCHEMA}, schema_version=1, reads=TEXT, parser=_probes_file,
           title="probe results", pseudonymised=TEXT_SCANNER, feeds={"probes": (PATH,)}, bundle_dir="tcp_probe"),
    Format(name="handshakes_jsonl", recognised_by=BY_JSON_KEYS, recognise=_handshake_keys,
           tables={"handshakes": HANDSHAKES_SCHEMA}, schema_version=1, reads=TEXT, parser=_handshakes_file,
           title="timed handshakes", pseudonymised=TEXT_SCANNER, feeds={"handshakes": (PATH,)}, bundle_dir="tcp_probe",
           parse_order=-2),
)
