"""A packet capture (pcap, pcapng) -> tables ``wire_connections`` and
``wire_requests``: what the producer's connections did on the wire.

Every TCP connection is read (``tcp.flows``) and framed by what its client
sent first (``tcp.framing_of``): plaintext Kafka on any port, recognised by
its request header, or TLS. Other connections are counted, not read.

- Kafka: every request's header (api, version, correlation id, client id);
  Produce requests' acks, timeout, partitions and record batches; responses
  joined to their requests by correlation id on the connection, Produce
  responses' errors and throttle time. Kafka answers a connection's requests
  in order, so a response pairs with the earliest request of its id still
  open.
- TLS: a request is a burst of application-data records from the client, its
  response the server's burst after it (``tls.message_spans``).

A relay seen in the same capture (a TLS terminator or proxy on the same
loopback, kdiag's own lab among them) shows each request twice: on the
producer's connection and on the relay's onward one, whose exchange lies
inside the producer's in time. Such a connection is a ``relay`` hop; the
producer's exchange takes the decoded facts of the first relay exchange
inside it (``decoded_from``), so a TLS request gets its api and correlation
id when the terminator's plaintext side was captured too.

The client socket's TCP_NODELAY, as the wire shows it (``nodelay``): off
when a request's later segment left only after the peer acknowledged the
earlier ones (within ``tcp.NAGLE_ACK_NS``), after waiting ``NAGLE_HOLD_MS``
or more: Nagle (RFC 896) waiting for a delayed ACK; on when a small segment
of a request left while an earlier small one was unacknowledged, which
Linux's Nagle (Minshall's rule, tcp_minshall_check) never lets happen; null
when the capture shows neither.

Columns, units in their names; times are the capture's, epoch microseconds.
"""
from __future__ import annotations

from bisect import bisect_left

import pyarrow as pa

from kdiag.parsers.base import ParseCounts
from kdiag.parsers.format import BY_MAGIC, BYTES, PACKET_REWRITER, PATH, WIRE, Format, Told
from kdiag.parsers.pcap import looks_like_pcap
from kdiag.parsers.tcp_probe import PROBES_SCHEMA, parse_pcap
from kdiag.parsers.wire import kafka, tcp, tls
from kdiag.parsers.wire.kafka_specs import PRODUCE
from kdiag.parsers.wire.packets import capture_segments

CLIENT_HOP, RELAY_HOP = "client", "relay"
# A probe's answers that come as ICMP, one packet each (parsers.tcp_probe).
ICMP_ANSWERS = ("time_exceeded", "unreachable")
# A wait this long inside one request, ended by the peer's ACK, is Nagle
# holding it (Linux's delayed ACK is 40 ms at first; a quick ACK is well
# under a millisecond on a LAN).
NAGLE_HOLD_MS = 10.0
# Exchanges of a connection that must lie inside another's for it to be a
# relay's onward hop.
RELAY_SHARE = 0.5
# A relay passes a request on at once, or its response back at once (it may
# hold the other: a proxy that mutes a throttled client, one that delays
# responses); another client's exchange that falls inside one by chance is
# seldom this close to either end.
RELAY_EDGE_US = 5000

WIRE_CONNECTIONS_SCHEMA = pa.schema([
    ("flow", pa.int32()),              # the connection's number in the capture, from 0, in order first seen
    ("client", pa.string()),           # "addr:port" of the side that connected (see tcp.flows)
    ("server", pa.string()),
    ("protocol", pa.string()),         # "kafka", "tls" or null: another protocol, not read
    ("hop", pa.string()),              # "client": the producer's own; "relay": a relay's onward hop
    ("relayed_by", pa.int32()),        # the flow whose exchanges a relay hop carries
    ("mid_connection", pa.bool_()),    # its SYN was not captured
    ("first_us", pa.int64()),
    ("last_us", pa.int64()),
    ("syn_us", pa.int64()),            # the first SYN
    ("synack_us", pa.int64()),
    # The path's round trip by the handshake: the last SYN to the SYN-ACK
    # plus the SYN-ACK to the client's ACK. Where the capture was taken
    # splits it in two (at the client the first part is all of it, at the
    # server the second); their sum is the round trip anywhere on the path.
    ("handshake_ms", pa.float64()),
    ("seen_from", pa.string()),        # "client" or "server": the side the capture was taken near, by that split
    ("syn_retransmits", pa.int32()),
    ("tls_hello_us", pa.int64()),      # the ClientHello
    ("tls_handshake_ms", pa.float64()),  # ClientHello to the client's first application data
    ("rst_us", pa.int64()),
    ("rst_by", pa.string()),           # "client" or "server"
    ("fin_us", pa.int64()),
    ("client_bytes", pa.int64()),      # payload on the wire, retransmissions included
    ("server_bytes", pa.int64()),
    ("retransmits", pa.int32()),       # the client's segments sent again
    ("server_retransmits", pa.int32()),
    ("zero_windows", pa.int32()),      # times the server's window closed on the client
    ("missing_bytes", pa.int64()),     # stream bytes not captured, both directions
    ("delayed_acks", pa.int32()),      # the server's pure ACKs of the client's data 10 ms or more late
    ("delayed_ack_ms", pa.float64()),  # their median wait
    ("nagle_holds", pa.int32()),       # the client's requests held by Nagle (see the module's doc)
    ("nodelay", pa.bool_()),           # the client socket's TCP_NODELAY as the wire shows it
    ("requests", pa.int32()),
    # What of its streams was not read, counted: "lost_framing 1" (a size
    # field that cannot be, or was not captured: nothing past it is read),
    # "unmatched_response 2" (a response whose request the capture lacks).
    ("unread", pa.string()),
])
WIRE_REQUESTS_SCHEMA = pa.schema([
    ("flow", pa.int32()),
    ("hop", pa.string()),
    ("protocol", pa.string()),
    ("client", pa.string()),
    ("server", pa.string()),
    ("client_id", pa.string()),        # the request header's; null over TLS
    ("corr_id", pa.int32()),
    ("api", pa.string()),              # "Produce", "Metadata", ...; null over TLS
    ("api_key", pa.int16()),
    ("api_version", pa.int16()),
    ("request_bytes", pa.int64()),     # framing included: Kafka's size field, TLS records' headers
    ("request_segments", pa.int32()),
    ("request_records", pa.int32()),   # TLS records; null for plaintext
    ("first_us", pa.int64()),          # the request's first byte on the wire
    ("last_us", pa.int64()),           # its last byte
    ("response_first_us", pa.int64()),  # null: no response in the capture
    ("response_last_us", pa.int64()),
    ("response_bytes", pa.int64()),
    ("held_ms", pa.float64()),         # the longest wait between two of its segments
    ("held_after_ack", pa.bool_()),    # that wait ended with the server's ACK (Nagle's signature)
    ("acks", pa.int16()),              # Produce only, from here to batch_bytes
    ("timeout_ms", pa.int32()),
    ("partitions", pa.int32()),
    ("records", pa.int64()),
    ("codec", pa.string()),            # the first batch's: none, gzip, snappy, lz4, zstd
    ("batch_bytes", pa.int64()),
    # The earliest and latest record timestamps of its batches, epoch ms, as
    # the client set them (CreateTime) when the application produced them;
    # null for magic 0 and for LogAppendTime batches.
    ("first_record_ms", pa.int64()),
    ("last_record_ms", pa.int64()),
    ("error_code", pa.int16()),        # the response's first non-zero partition error, else 0
    ("errors", pa.int32()),            # partitions answered with an error
    ("throttle_ms", pa.int32()),       # the response's ThrottleTimeMs
    ("cut", pa.string()),              # where a frame the capture cut short ended, else null
    ("decoded_from", pa.int32()),      # the relay flow whose exchange named this one, else null
])


WIRE_DNS_SCHEMA = pa.schema([
    ("client", pa.string()),           # "addr:port" that asked
    ("server", pa.string()),           # the resolver, "addr:53"
    ("name", pa.string()),             # the first question's name; null when cut or compressed
    ("qtype", pa.int32()),             # 1 A, 28 AAAA, ...
    ("query_us", pa.int64()),          # the first query of this id
    ("answer_us", pa.int64()),         # null: no answer in the capture
    ("ms", pa.float64()),
    ("queries", pa.int32()),           # 1, or more when the query was sent again (same id)
    ("rcode", pa.int16()),             # 0 NOERROR, 2 SERVFAIL, 3 NXDOMAIN, ...
    ("answers", pa.int32()),
])
DNS_PORT = 53
# RFC 1035 3.1: a name is at most 255 bytes. A question's name is written
# out whole, so compression pointers are not followed.
MAX_DNS_NAME = 255


def dns_name(msg: bytes, at: int) -> tuple[str | None, int]:
    """The name at ``at`` of a DNS message and where it ends; None when cut,
    compressed or longer than a name can be."""
    labels, n = [], 0
    while at < len(msg):
        size = msg[at]
        if size == 0:
            return ".".join(labels), at + 1
        if size & 0xC0 or at + 1 + size > len(msg):
            return None, at
        n += size + 1
        if n > MAX_DNS_NAME:
            return None, at
        labels.append(msg[at + 1:at + 1 + size].decode("ascii", "replace"))
        at += 1 + size
    return None, at


class _Lookups:
    """The DNS exchanges among the segments, gathered as they pass (RFC 1035
    4.1.1: id; flags, QR the top bit and RCODE the low 4; QDCOUNT; ANCOUNT;
    then the question)."""

    def __init__(self):
        self.open: dict[tuple, dict] = {}
        self.rows: list[dict] = []

    def seen(self, seg) -> None:
        if seg.proto != "udp" or DNS_PORT not in (seg.sport, seg.dport) or len(seg.data) < 12:
            return
        msg = seg.data
        qid, flags = int.from_bytes(msg[0:2], "big"), msg[2] << 8 | msg[3]
        if not flags & 0x8000 and seg.dport == DNS_PORT:
            self._query(seg, qid, msg)
        elif flags & 0x8000 and seg.sport == DNS_PORT:
            row = self.open.get((seg.dst, seg.dport, seg.src, qid))
            if row is not None and row["answer_us"] is None:
                row.update(answer_us=_us(seg.ts_ns), rcode=flags & 0x0F, answers=int.from_bytes(msg[6:8], "big"))
                if row["query_us"] is not None and row["answer_us"] is not None:
                    row["ms"] = (row["answer_us"] - row["query_us"]) / 1000.0

    def _query(self, seg, qid: int, msg: bytes) -> None:
        key = (seg.src, seg.sport, seg.dst, qid)
        row = self.open.get(key)
        if row is not None and row["answer_us"] is None:
            row["queries"] += 1
            return
        name, end = dns_name(msg, 12) if int.from_bytes(msg[4:6], "big") else (None, 12)
        qtype = int.from_bytes(msg[end:end + 2], "big") if name is not None and end + 2 <= len(msg) else None
        row = {"client": _addr((seg.src, seg.sport)), "server": _addr((seg.dst, seg.dport)), "name": name,
               "qtype": qtype, "query_us": _us(seg.ts_ns), "answer_us": None, "ms": None, "queries": 1,
               "rcode": None, "answers": None}
        self.open[key] = row
        self.rows.append(row)

    def through(self, segs):
        for seg in segs:
            self.seen(seg)
            yield seg


def _addr(a: tuple[str, int]) -> str:
    host, port = a
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _us(ns: int | None) -> int | None:
    # A record's timestamp is the file's word: one past int64 is unknown.
    if ns is None:
        return None
    us = ns // 1000
    return us if -(2**63) <= us < 2**63 else None


# ---------------------------------------------------------------- Kafka

def _produce_facts(frame: bytes, header, complete: bool) -> dict:
    body = kafka.produce_request(frame, header, complete)
    parts = [p for t in body.get("topics") or () for p in t.get("partitions") or ()]
    batches = [b for p in parts for b in p.get("records") or ()]
    counts = [b["record_count"] for b in batches if b.get("record_count") is not None]
    sizes = [b["size_bytes"] for b in batches if b.get("size_bytes") and b["size_bytes"] > 0]
    # Magic 2 keeps the first record's time and the batch's latest (max
    # timestamp); magic 1 one per message, the first of its run here. A
    # producer's batch is always CreateTime (the broker applies a topic's
    # LogAppendTime on its side).
    created = [b for b in batches if b.get("magic") in (1, 2) and b.get("base_timestamp_ms") is not None]
    first = [b["base_timestamp_ms"] for b in created if b["base_timestamp_ms"] >= 0]
    last = [b.get("max_timestamp_ms") or b["base_timestamp_ms"] for b in created if b["base_timestamp_ms"] >= 0]
    return {"acks": body.get("acks"), "timeout_ms": body.get("timeout_ms"), "partitions": len(parts) if parts else None,
            "records": sum(counts) if counts else None, "codec": batches[0].get("codec") if batches else None,
            "batch_bytes": sum(sizes) if sizes else None, "cut": body.get("cut_at") if body.get("cut") else None,
            "first_record_ms": min(first) if first else None, "last_record_ms": max(last) if last else None}


def _produce_answer(frame: bytes, header, complete: bool) -> dict:
    body = kafka.produce_response(frame, header, complete)
    codes = [p.get("error_code") for t in body.get("topics") or () for p in t.get("partitions") or ()
             if p.get("error_code") is not None]
    bad = [c for c in codes if c]
    return {"throttle_ms": body.get("throttle_time_ms"), "error_code": bad[0] if bad else (0 if codes else None),
            "errors": len(bad) if codes else None}


def _kafka_exchanges(flow, counts: ParseCounts) -> list[dict]:
    rows: list[dict] = []
    open_: dict[int, list[dict]] = {}
    msgs = list(tcp.messages(flow, "kafka", counts))
    for m in (m for m in msgs if m.direction == 0):
        frame = m.head[4:]
        h = kafka.request_header(frame)
        row = _request_row(flow, m, "kafka")
        if h is not None:
            row.update(corr_id=h.correlation_id, api=h.api_name, api_key=h.api_key, api_version=h.api_version,
                       client_id=h.client_id, cut="header" if h.cut else None)
            if h.api_key == PRODUCE and not h.cut:
                row.update(_produce_facts(frame, h, m.complete))
            open_.setdefault(h.correlation_id, []).append(row)
            row["_header"] = h
        rows.append(row)
    for m in (m for m in msgs if m.direction == 1):
        frame = m.head[4:]
        if len(frame) < 4:
            counts.skip("response_cut")
            continue
        corr = int.from_bytes(frame[:4], "big", signed=True)
        waiting = open_.get(corr)
        if not waiting:
            counts.skip("unmatched_response")
            continue
        row = waiting.pop(0)
        _answer(row, m)
        h = row["_header"]
        if h.api_key == PRODUCE and h.api_name is not None:
            rh = kafka.response_header(frame, h.api_key, h.api_version)
            if rh is not None:
                row.update(_produce_answer(frame, rh, m.complete))
    for row in rows:
        row.pop("_header", None)
    return rows


# ---------------------------------------------------------------- TLS

def _records_in(stream, offset: int, length: int) -> int:
    """TLS records in [offset, offset + length) of a stream, by their
    headers' lengths (a header not captured ends the count)."""
    n, at, end = 0, offset, offset + length
    while at + 5 <= end:
        head = stream.bytes_at(at, 5)
        if head is None:
            break
        n += 1
        at += 5 + int.from_bytes(head[3:5], "big")
    return n


def _tls_exchanges(flow, counts: ParseCounts) -> list[dict]:
    rows: list[dict] = []
    last = None
    for m in sorted(tcp.messages(flow, "tls", counts), key=lambda m: (m.first_ns or 0, m.direction)):
        if m.direction == 0:
            last = _request_row(flow, m, "tls")
            last["request_records"] = _records_in(flow.streams[0], m.offset, m.length)
            rows.append(last)
        elif last is not None and last["response_first_us"] is None:
            _answer(last, m)
    return rows


# ---------------------------------------------------------------- rows

def _request_row(flow, m, protocol: str) -> dict:
    return {name: None for name in WIRE_REQUESTS_SCHEMA.names} | {
        "protocol": protocol, "client": _addr(flow.client), "server": _addr(flow.server),
        "request_bytes": m.length, "request_segments": m.segments, "first_us": _us(m.first_ns),
        "last_us": _us(m.last_ns), "held_ms": m.held_ns / 1e6, "held_after_ack": m.held_after_ack}


def _answer(row: dict, m) -> None:
    row.update(response_first_us=_us(m.first_ns), response_last_us=_us(m.last_ns), response_bytes=m.length)


def _nodelay(flow, rows: list[dict]) -> tuple[bool | None, int]:
    """The client socket's TCP_NODELAY as its requests show it, and how
    many Nagle held (see the module's doc)."""
    holds = sum(1 for r in rows if r["held_after_ack"] and r["held_ms"] >= NAGLE_HOLD_MS)
    if holds:
        return False, holds
    s = flow.streams[0]
    mss = s.mss or flow.streams[1].mss
    ack_ts = [a[0] for a in s.acks]
    grew_ts = [w[0] for w in s.windows]

    def small(chunk) -> bool:
        f = full(chunk[2])
        return f is None or chunk[1] < f

    def full(ts: int) -> int | None:
        """Linux's segment size for Nagle at ts: the MSS, at most half the
        largest window the peer has advertised (tcp_bound_to_half_wnd), so
        a 32 KiB segment is full after a 64 KiB window on loopback."""
        i = bisect_left(grew_ts, ts + 1)
        if not i:
            return mss
        w = s.windows[i - 1][1]
        cutoff = w >> 1 if w > 536 else w      # 536: TCP_MSS_DEFAULT
        return min(mss, cutoff) if mss else cutoff

    chunks = [c for c in s.chunks if not c[4]]
    for prev, cur in zip(chunks, chunks[1:]):
        if not (small(prev) and small(cur)) or cur[2] - prev[2] > NAGLE_HOLD_MS * 1e6:
            continue
        # Was every byte of prev acknowledged before cur left? If not, a
        # small segment left behind an unacknowledged small one.
        # Stream.acks keeps only ACKs that moved forward: the last one
        # before cur is the most acknowledged then.
        i = bisect_left(ack_ts, cur[2])
        acked = s.acks[i - 1][1] if i else 0
        if acked < prev[0] + prev[1]:
            return True, 0
    return None, 0


def _inside(inner: list[dict], outer: list[dict]) -> list[int | None]:
    """For each exchange of ``inner`` (both in time order), the index of the
    ``outer`` exchange it lies inside, else None: one walk of both."""
    out: list[int | None] = []
    j = 0
    for r in inner:
        if r["first_us"] is None or r["response_last_us"] is None:
            out.append(None)
            continue
        while j < len(outer) and (outer[j]["response_last_us"] or outer[j]["first_us"] or 0) < r["response_last_us"]:
            j += 1
        o = outer[j] if j < len(outer) else None
        # One host's clock times both: the relay forwards a request after
        # the producer sent it, and answers after the broker answered it.
        ok = (o is not None and o["first_us"] is not None and o["response_last_us"] is not None
              and o["first_us"] <= r["first_us"] and r["response_last_us"] <= o["response_last_us"]
              and min(r["first_us"] - o["first_us"], o["response_last_us"] - r["response_last_us"]) <= RELAY_EDGE_US
              # What a relay passes on is no larger than what it took in
              # (TLS adds its records' headers and tags).
              and r["request_bytes"] <= o["request_bytes"])
        out.append(j if ok else None)
    return out


def _relays(flows: list, exchanges: dict[int, list[dict]]) -> dict[int, int]:
    """flow -> the flow it relays: a connection most of whose exchanges lie
    inside another's, the other's that starts earliest (nearest the
    producer) and is not itself a relay."""
    spans = {i: (rows[0]["first_us"], rows[-1]["response_last_us"] or rows[-1]["first_us"])
             for i, rows in exchanges.items() if rows and rows[0]["first_us"] is not None}
    relayed: dict[int, int] = {}
    for i, rows in exchanges.items():
        timed = [r for r in rows if r["response_last_us"] is not None]
        if not timed or i not in spans:
            continue
        best = None
        for j, other in exchanges.items():
            if j == i or j not in spans or spans[j][0] is None or spans[j][1] is None or spans[i][1] is None:
                continue
            if spans[j][0] > spans[i][1] or spans[j][1] < spans[i][0]:
                continue    # never open at once
            hits = _inside(timed, other)
            if sum(h is not None for h in hits) >= RELAY_SHARE * len(timed) and \
                    (best is None or spans[j][0] < spans[best][0]):
                best = j
        if best is not None:
            relayed[i] = best
    # Two connections each inside the other (exchanges stamped alike): the
    # one whose first request came first is the producer's.
    for i, j in list(relayed.items()):
        if relayed.get(j) == i:
            relayed.pop(i if spans[i][0] <= spans[j][0] else j, None)
    # A relay of a relay relays the first one's producer.
    for i in list(relayed):
        seen = {i}
        while relayed[i] in relayed and relayed[i] not in seen:
            seen.add(relayed[i])
            relayed[i] = relayed[relayed[i]]
    return relayed


def _lend(outer: list[dict], inner: list[dict], inner_flow: int) -> None:
    """The decoded facts of the relay's exchanges to the producer's ones
    they lie inside (the first one inside each, the relay nearest it)."""
    keep = ("client_id", "corr_id", "api", "api_key", "api_version", "acks", "timeout_ms", "partitions", "records",
            "codec", "batch_bytes", "first_record_ms", "last_record_ms", "error_code", "errors", "throttle_ms")
    timed = [r for r in inner if r["response_last_us"] is not None]
    for r, j in zip(timed, _inside(timed, outer)):
        if j is None or r["api"] is None:
            continue
        o = outer[j]
        if o["decoded_from"] is None or o["api"] is None:
            o.update({k: r[k] for k in keep if o.get(k) is None or k in ("api", "corr_id")})
            o["decoded_from"] = inner_flow


def parse_capture(data: bytes) -> tuple[dict[str, pa.Table], ParseCounts, int]:
    """The two tables of a capture's bytes, the counts of its records, and
    how many packets belong to the Kafka and TLS connections read."""
    counts = ParseCounts("wire")
    segs = capture_segments(data, counts)
    if segs is None:
        counts.lines += 1
        counts.skip("not_pcap")
        return _tables([], [], []), counts, 0
    lookups = _Lookups()
    flows = tcp.flows(lookups.through(segs), counts)
    conns: list[dict] = []
    exchanges: dict[int, list[dict]] = {}
    read_packets = 0
    for i, flow in enumerate(flows):
        proto = tcp.framing_of(flow)
        # Not the file's records: what a stream held that was not read is
        # the connection's own count.
        unread = ParseCounts("stream")
        if proto is not None:
            rows = _kafka_exchanges(flow, unread) if proto == "kafka" else _tls_exchanges(flow, unread)
            for r in rows:
                r["flow"] = i
            exchanges[i] = sorted(rows, key=lambda r: (r["first_us"] is None, r["first_us"] or 0))
            read_packets += flow.streams[0].segments + flow.streams[1].segments
        conns.append(_connection(i, flow, proto, exchanges.get(i, [])))
        conns[-1]["unread"] = ", ".join(f"{k} {v}" for k, v in sorted(unread.skipped.items())) or None
    relayed = _relays(flows, exchanges)
    for i, rows in exchanges.items():
        hop = RELAY_HOP if i in relayed else CLIENT_HOP
        conns[i].update(hop=hop, relayed_by=relayed.get(i))
        for r in rows:
            r["hop"] = hop
    for i, j in sorted(relayed.items(), key=lambda kv: exchanges[kv[0]][0]["first_us"] or 0):
        _lend(exchanges[j], exchanges[i], i)
    return _tables(conns, [r for i in sorted(exchanges) for r in exchanges[i]], lookups.rows), counts, read_packets


def _connection(i: int, flow, proto: str | None, rows: list[dict]) -> dict:
    c, s = flow.streams
    nodelay, holds = _nodelay(flow, rows) if proto else (None, 0)
    hs = tls.handshake(flow) if proto == "tls" else {}
    return {
        "flow": i, "client": _addr(flow.client), "server": _addr(flow.server), "protocol": proto, "hop": None,
        "relayed_by": None, "mid_connection": flow.mid_connection, "first_us": _us(flow.first_ns),
        "last_us": _us(flow.last_ns), "syn_us": _us(flow.syn_ns), "synack_us": _us(flow.synack_ns),
        "handshake_ms": None if flow.handshake_rtt_us is None else
        (flow.handshake_rtt_us + (flow.synack_ack_us or 0.0)) / 1000,
        "seen_from": seen_from(flow.handshake_rtt_us, flow.synack_ack_us),
        "syn_retransmits": flow.syn_retransmits, "tls_hello_us": _us(hs.get("client_hello_ns")), "tls_handshake_ms": hs.get("handshake_ms"), "rst_us": _us(flow.rst_ns),
        "rst_by": flow.rst_by, "fin_us": _us(flow.fin_ns), "client_bytes": c.bytes, "server_bytes": s.bytes,
        "retransmits": c.retransmits, "server_retransmits": s.retransmits, "zero_windows": c.zero_windows,
        "missing_bytes": c.missing_bytes + s.missing_bytes, "delayed_acks": c.delayed_acks,
        "delayed_ack_ms": c.delayed_ack_ms_median, "nagle_holds": holds, "nodelay": nodelay,
        "requests": len(rows)}


# A split of the handshake this lopsided, over a path this long, says which
# end the capture was near; on loopback neither part is long enough to say.
SIDE_SHARE, SIDE_MIN_US = 4.0, 200.0


def seen_from(syn_synack_us: float | None, synack_ack_us: float | None) -> str | None:
    if syn_synack_us is None or synack_ack_us is None:
        return None
    if syn_synack_us >= SIDE_MIN_US and syn_synack_us > SIDE_SHARE * synack_ack_us:
        return "client"
    if synack_ack_us >= SIDE_MIN_US and synack_ack_us > SIDE_SHARE * syn_synack_us:
        return "server"
    return None


def _tables(conns: list[dict], reqs: list[dict], dns: list[dict]) -> dict[str, pa.Table]:
    return {"wire_connections": pa.Table.from_pylist(conns, WIRE_CONNECTIONS_SCHEMA),
            "wire_requests": pa.Table.from_pylist(reqs, WIRE_REQUESTS_SCHEMA),
            "wire_dns": pa.Table.from_pylist(dns, WIRE_DNS_SCHEMA)}


# ---------------------------------------------------------------- the format

def _capture_file(data: bytes, told: Told) -> tuple[dict[str, pa.Table], ParseCounts]:
    """A capture's probes (kdiag's own SYN probes, parsers.tcp_probe) and its
    connections. Its records are counted once, as packets: parsed when
    they hold a TCP or UDP segment or a probe's ICMP answer."""
    probes, _ = parse_pcap(data, told.brokers or None)
    told.packets |= len(probes) > 0
    tables, counts, _ = parse_capture(data)
    counts.source = "pcap"
    icmp = sum(1 for a in probes.column("answer").to_pylist() if a in ICMP_ANSWERS)
    moved = min(icmp, counts.skipped.get("other_transport", 0))
    if moved:
        counts.skip("other_transport", -moved)
        if not counts.skipped["other_transport"]:
            del counts.skipped["other_transport"]
        counts.parsed += moved
    return {"probes": probes, **tables}, counts


FORMATS = (
    Format(name="pcap", recognised_by=BY_MAGIC, recognise=looks_like_pcap,
           tables={"probes": PROBES_SCHEMA, "wire_connections": WIRE_CONNECTIONS_SCHEMA,
                   "wire_requests": WIRE_REQUESTS_SCHEMA, "wire_dns": WIRE_DNS_SCHEMA},
           schema_version=1, reads=BYTES, parser=_capture_file,
           title="packet capture (pcap, pcapng)", pseudonymised=PACKET_REWRITER,
           feeds={"probes": (PATH,), "wire_connections": (WIRE,), "wire_requests": (WIRE,), "wire_dns": (WIRE,)},
           bundle_dir="tcp_probe", parse_order=-1),
)
