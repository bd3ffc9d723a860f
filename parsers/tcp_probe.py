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
                       answer before the probing ended)
rtt_ms        float64  probe sent to answer received, milliseconds; null when
                       no answer
method        string   ``syn`` (raw SYN packets) or ``connect`` (non-blocking
                       connect() with IP_TTL and IP_RECVERR, no raw socket)
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

import math
import statistics
import struct
from collections import Counter
from collections.abc import Iterable
from typing import NamedTuple

import pyarrow as pa

from kdiag.parsers.base import ParseCounts, json_lines, scrub

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
PATH_SCHEMA = pa.schema(
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

ANSWERS = ("time_exceeded", "open", "closed", "unreachable", "none")
METHODS = ("syn", "connect")
# Answers after which a further TTL tells nothing new.
FINAL_ANSWERS = ("open", "closed", "unreachable")

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


# Link-layer types (tcpdump.org/linktypes.html) whose IPv4 payload we find.
LINKTYPE_NULL, LINKTYPE_ETHERNET, LINKTYPE_RAW, LINKTYPE_LOOP = 0, 1, 101, 108
LINKTYPE_LINUX_SLL, LINKTYPE_IPV4, LINKTYPE_LINUX_SLL2 = 113, 228, 276
_RAW_TYPES = (LINKTYPE_RAW, 12, 14, LINKTYPE_IPV4)  # 12, 14: DLT_RAW on some BSDs


def _ip_of_frame(linktype: int, frame: bytes) -> bytes | str:
    if linktype in _RAW_TYPES:
        return frame
    if linktype == LINKTYPE_ETHERNET:
        off = 12
        while len(frame) >= off + 2 and frame[off:off + 2] in (b"\x81\x00", b"\x88\xa8"):
            off += 4
        return frame[off + 2:] if frame[off:off + 2] == b"\x08\x00" else "not_ipv4"
    if linktype == LINKTYPE_LINUX_SLL:
        return frame[16:] if frame[14:16] == b"\x08\x00" else "not_ipv4"
    if linktype == LINKTYPE_LINUX_SLL2:
        return frame[20:] if frame[0:2] == b"\x08\x00" else "not_ipv4"
    if linktype in (LINKTYPE_NULL, LINKTYPE_LOOP):
        # AF_INET is 2 everywhere; NULL stores it in the writer's byte order.
        fam = frame[:4]
        return frame[4:] if fam in (b"\x02\x00\x00\x00", b"\x00\x00\x00\x02") else "not_ipv4"
    return "unsupported_link"


# ---------------------------------------------------------------- pcap files

_PCAP_MAGICS = {
    b"\xd4\xc3\xb2\xa1": ("<", 1000),  # microseconds, little-endian writer
    b"\xa1\xb2\xc3\xd4": (">", 1000),
    b"\x4d\x3c\xb2\xa1": ("<", 1),     # nanoseconds
    b"\xa1\xb2\x3c\x4d": (">", 1),
}
_PCAPNG_SHB = b"\x0a\x0d\x0d\x0a"
_PCAPNG_BOM = 0x1A2B3C4D
# No real capture record is this large (the biggest snaplen is 256 KiB);
# a larger length means the file is corrupt from there on.
_MAX_RECORD = 1 << 20


def looks_like_pcap(head: bytes) -> bool:
    """True for a pcap or pcapng file's first bytes (4 are enough for
    pcap, pcapng's byte-order magic is checked when 12 are given)."""
    head = bytes(head[:12])
    if head[:4] in _PCAP_MAGICS:
        return True
    if head[:4] == _PCAPNG_SHB:
        return len(head) < 12 or head[8:12] in (b"\x1a\x2b\x3c\x4d", b"\x4d\x3c\x2b\x1a")
    return False


def _pcap_records(data: bytes, counts: ParseCounts):
    """(ts_ns, linktype, frame) per record; bad structure is counted."""
    endian, mult = _PCAP_MAGICS[data[:4]]
    if len(data) < 24:
        counts.lines += 1
        counts.skip("truncated")
        return
    linktype = struct.unpack_from(endian + "I", data, 20)[0] & 0xFFFF
    off = 24
    while off < len(data):
        counts.lines += 1
        if len(data) - off < 16:
            counts.skip("truncated")
            return
        sec, frac, incl, _orig = struct.unpack_from(endian + "IIII", data, off)
        if incl > _MAX_RECORD:
            counts.skip("corrupt")
            counts.example(counts.lines, "corrupt", f"record at byte {off} claims {incl} bytes")
            return
        if len(data) - off - 16 < incl:
            counts.skip("truncated")
            return
        yield sec * 1_000_000_000 + frac * mult, linktype, data[off + 16:off + 16 + incl]
        off += 16 + incl


def _pcapng_tsresol(opts: bytes, endian: str) -> tuple[int, int]:
    """(if_tsresol as (base, exponent), if_tsoffset seconds) from IDB options."""
    resol, offset = (10, 6), 0
    i = 0
    while i + 4 <= len(opts):
        code, ln = struct.unpack_from(endian + "HH", opts, i)
        val = opts[i + 4:i + 4 + ln]
        if code == 0:
            break
        if code == 9 and len(val) >= 1:
            resol = (2, val[0] & 0x7F) if val[0] & 0x80 else (10, val[0])
        elif code == 14 and len(val) >= 8:
            offset = struct.unpack_from(endian + "q", val)[0]
        i += 4 + ln + (-ln % 4)
    return resol, offset


def _ticks_to_ns(ticks: int, resol: tuple[int, int]) -> int:
    base, exp = resol
    if base == 2:
        return (ticks * 1_000_000_000) >> exp
    return ticks * 10 ** (9 - exp) if exp <= 9 else ticks // 10 ** (exp - 9)


def _pcapng_records(data: bytes, counts: ParseCounts):
    endian = "<"
    ifaces: list[tuple[int, tuple[int, int], int]] = []  # (linktype, tsresol, tsoffset)
    off = 0
    while off < len(data):
        if len(data) - off < 12:
            counts.lines += 1
            counts.skip("truncated")
            return
        btype = data[off:off + 4]
        if btype == _PCAPNG_SHB:
            bom = data[off + 8:off + 12]
            endian = "<" if bom == b"\x4d\x3c\x2b\x1a" else ">" if bom == b"\x1a\x2b\x3c\x4d" else ""
            if not endian:
                counts.lines += 1
                counts.skip("corrupt")
                return
            ifaces = []
        btype_n, blen = struct.unpack_from(endian + "II", data, off)
        if blen < 12 or blen % 4 or blen > _MAX_RECORD + 64:
            counts.lines += 1
            counts.skip("corrupt")
            counts.example(counts.lines, "corrupt", f"block at byte {off} claims {blen} bytes")
            return
        if len(data) - off < blen:
            counts.lines += 1
            counts.skip("truncated")
            return
        body = data[off + 8:off + blen - 4]
        off += blen
        if btype_n == 1:  # interface description
            if len(body) < 8:
                continue
            lt = struct.unpack_from(endian + "H", body)[0]
            resol, tsoff = _pcapng_tsresol(body[8:], endian)
            ifaces.append((lt, resol, tsoff))
        elif btype_n in (6, 2):  # enhanced packet, obsolete packet
            counts.lines += 1
            if len(body) < 20:
                counts.skip("malformed")
                continue
            if btype_n == 6:
                iface, hi, lo, caplen = struct.unpack_from(endian + "IIII", body)
            else:
                iface, _drops, hi, lo, caplen = struct.unpack_from(endian + "HHIII", body)
            if iface >= len(ifaces) or 20 + caplen > len(body):
                counts.skip("malformed")
                continue
            lt, resol, tsoff = ifaces[iface]
            ts = _ticks_to_ns((hi << 32) | lo, resol) + tsoff * 1_000_000_000
            yield ts, lt, body[20:20 + caplen]
        elif btype_n == 3:  # simple packet: no timestamp, no use for RTTs
            counts.lines += 1
            counts.skip("no_timestamp")


def _records(data: bytes, counts: ParseCounts):
    if data[:4] in _PCAP_MAGICS:
        return _pcap_records(data, counts)
    if data[:4] == _PCAPNG_SHB:
        return _pcapng_records(data, counts)
    return None


def parse_pcap(data: bytes, brokers: dict[tuple[str, int], str] | None = None
               ) -> tuple[pa.Table, ParseCounts]:
    """Rebuild the probes from the packets. ``brokers`` maps (address, port)
    to librdkafka's broker name for the ``broker`` column."""
    counts = ParseCounts("tcp_probe_pcap")
    data = bytes(data)
    if not data:
        return PROBES_SCHEMA.empty_table(), counts
    records = _records(data, counts)
    if records is None:
        counts.lines += 1
        counts.skip("not_pcap")
        counts.example(1, "not_pcap", data[:32].hex())
        return PROBES_SCHEMA.empty_table(), counts

    probes: dict[tuple, dict] = {}           # (src, sport, dst, dport, seq) -> row
    flows: dict[tuple, int] = {}              # (src, sport, dst, dport) -> first-seen order
    others: list[tuple[int, int, Packet]] = []  # (record no, ts_ns, packet)
    for ts, linktype, frame in records:
        no = counts.lines
        ip = _ip_of_frame(linktype, frame)
        pkt = ip if isinstance(ip, str) else dissect_ipv4(ip)
        if isinstance(pkt, str):
            counts.skip(pkt)
            if pkt != "foreign":
                counts.example(no, pkt, frame[:64].hex())
            continue
        if pkt.proto == 6 and pkt.flags & (TCP_SYN | TCP_ACK | TCP_RST | TCP_FIN) == TCP_SYN:
            tr = probe_of_seq(pkt.seq)
            if tr is not None:
                key = (pkt.src, pkt.sport, pkt.dst, pkt.dport, pkt.seq)
                if key in probes:
                    counts.skip("duplicate_probe")
                    continue
                flows.setdefault(key[:4], len(flows))
                probes[key] = {"ts": ts, "ttl": tr[0], "round": tr[1], "answer_ts": None,
                               "responder": None, "answer": "none"}
                counts.parsed += 1
                continue
        others.append((no, ts, pkt))

    for no, ts, pkt in others:
        key, answer = None, None
        if pkt.proto == 1:
            key = (pkt.quoted[0], pkt.quoted[2], pkt.quoted[1], pkt.quoted[3], pkt.quoted[4])
            answer = "time_exceeded" if pkt.icmp_type == ICMP_TIME_EXCEEDED else "unreachable"
        elif pkt.flags & TCP_ACK and pkt.flags & (TCP_SYN | TCP_RST):
            key = (pkt.dst, pkt.dport, pkt.src, pkt.sport, (pkt.ack - 1) & 0xFFFFFFFF)
            answer = "open" if pkt.flags & TCP_SYN else "closed"
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

    brokers = brokers or {}
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
    return pa.table(cols, schema=PROBES_SCHEMA), counts


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


# ---------------------------------------------------------------- path table

def _most_common(values: list):
    """Most frequent value; a tie goes to the one seen first."""
    if not values:
        return None
    c = Counter(values)
    best = max(c.values())
    return next(v for v in values if c[v] == best)


def path_table(probes: pa.Table) -> pa.Table:
    """Per (target, method, ttl): the hop as traceroute would list it."""
    groups: dict[tuple, dict[int, list[dict]]] = {}
    for r in probes.to_pylist():
        key = (r["target_host"], r["target_port"], r["method"])
        groups.setdefault(key, {}).setdefault(r["ttl"], []).append(r)
    cols: dict[str, list] = {f.name: [] for f in PATH_SCHEMA}
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
    return pa.table(cols, schema=PATH_SCHEMA)


def _rtt_text(row: dict) -> str:
    if row["rtt_min_ms"] is None:
        return "*"
    return f"{row['rtt_min_ms']:.3f}/{row['rtt_median_ms']:.3f}/{row['rtt_max_ms']:.3f}"


def format_path_table(table: pa.Table) -> str:
    """Render ``path_table``'s rows, one block per target::

        10.0.2.2:9092 (broker b:9092/1), syn probes, 2 hops
        HOP  ADDRESS    RTT(ms)              ANSWER
          1  10.0.1.1   0.031/0.040/0.052    time_exceeded 3/3
          2  10.0.2.2   0.048/0.050/0.061    open 3/3

    RTT is min/median/max over the answered rounds; ``*`` marks no answer.
    """
    blocks: dict[tuple, list[dict]] = {}
    for r in table.to_pylist():
        blocks.setdefault((r["target_host"], r["target_port"], r["broker"], r["method"]), []).append(r)
    out: list[str] = []
    for (host, port, broker, method), rows in blocks.items():
        cells = [(str(r["ttl"]), r["responder"] or "*", _rtt_text(r), f"{r['answer']} {r['answered']}/{r['sent']}")
                 for r in rows]
        w_hop = max(3, *(len(c[0]) for c in cells))
        w_addr = max(len("ADDRESS"), *(len(c[1]) for c in cells))
        w_rtt = max(len("RTT(ms)"), *(len(c[2]) for c in cells))
        last = rows[-1]
        reached = last["answer"] in ("open", "closed")
        title = f"{host}:{port}" + (f" (broker {broker})" if broker else "") + f", {method or 'unknown'} probes, "
        title += f"{len(rows)} hop{'s' if len(rows) != 1 else ''}" if reached else f"target not reached in {len(rows)} hops"
        if out:
            out.append("")
        out.append(title)
        out.append(f"{'HOP':>{w_hop}}  {'ADDRESS':<{w_addr}}  {'RTT(ms)':<{w_rtt}}  ANSWER")
        for hop, addr, rtt, ans in cells:
            out.append(f"{hop:>{w_hop}}  {addr:<{w_addr}}  {rtt:<{w_rtt}}  {ans}")
    return "\n".join(out) + ("\n" if out else "")
