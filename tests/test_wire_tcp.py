"""kdiag.parsers.wire.packets, .tcp and .tls on real captures: each test
takes its own with tcpdump while it drives plain sockets, and checks the
figures against what it did and what it measured itself."""
from __future__ import annotations

import contextlib
import io
import os
import re
import socket
import struct
import subprocess
import threading
import time

import pytest

from conftest import need
from kdiag.parsers.base import ParseCounts
from kdiag.parsers.pcap import PCAPNG_EPB, PCAPNG_IDB, PcapHeader, PcapReader, PcapWriter, pcapng_block
from kdiag.parsers.wire import packets, tcp, tls
from kdiag.parsers.wire.packets import Segment, segments
from kdiag.parsers.wire.tcp import flows, framing_of, messages
from tcpdump_capture import capture


def _tools():
    need("tcpdump")
    need(root=True)


def read(path) -> tuple[list[tcp.Flow], ParseCounts]:
    """The capture's flows, read by the reference; where the compiled
    reader was built, it must give the same segments and counts."""
    from kdiag.parsers.pcap import capture_records

    counts = ParseCounts("wire")
    data = path.read_bytes()
    segs = list(segments(capture_records(data, counts), counts))
    if packets.COMPILED:
        got = ParseCounts("wire")
        assert list(packets.capture_segments(data, got, compiled=True)) == segs and got == counts
    fl = flows(segs, counts)
    return fl, counts


def _recv_exact(sock, n: int) -> bytes:
    out = b""
    while len(out) < n:
        got = sock.recv(n - len(out))
        if not got:
            raise EOFError
        out += got
    return out


def frame(api_key: int, version: int, corr: int, body: bytes) -> bytes:
    """A size-prefixed Kafka request: header v1 (client id "kdiag-test")."""
    payload = struct.pack("!hhih", api_key, version, corr, 10) + b"kdiag-test" + body
    return struct.pack("!i", len(payload)) + payload


def _serve_kafka(ls, replies: int, body_len: int):
    conn, _ = ls.accept()
    with conn:
        for _ in range(replies):
            size = struct.unpack("!i", _recv_exact(conn, 4))[0]
            req = _recv_exact(conn, size)
            corr = struct.unpack_from("!i", req, 4)[0]
            resp = struct.pack("!i", corr) + bytes(body_len)
            conn.sendall(struct.pack("!i", len(resp)) + resp)
        conn.recv(1)  # the client's FIN


def kafka_exchange(ls, n: int, body_len: int = 100, nodelay: bool = True,
                   split: bool = False, pipelined: bool = False) -> tuple[tuple, list[float]]:
    """n request/response round trips over a fresh connection to the
    listening socket ``ls``; returns the client's (address, port) and each
    round trip's duration in ms as the client measured it. ``pipelined``:
    all n requests in one write first."""
    family = ls.family
    th = threading.Thread(target=_serve_kafka, args=(ls, n, body_len), daemon=True)
    th.start()
    c = socket.socket(family)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, int(nodelay))
    c.connect(ls.getsockname()[:2])
    rtts = []
    if pipelined:
        c.sendall(b"".join(frame(0, 9, 1000 + i, bytes(body_len)) for i in range(n)))
    for i in range(n if not pipelined else 0):
        req = frame(0, 9, 1000 + i, bytes(body_len))
        t0 = time.monotonic()
        if split:   # the size alone, then the rest: two writes
            c.sendall(req[:4])
            c.sendall(req[4:])
        else:
            c.sendall(req)
        size = struct.unpack("!i", _recv_exact(c, 4))[0]
        _recv_exact(c, size)
        rtts.append((time.monotonic() - t0) * 1000)
    for _ in range(n if pipelined else 0):
        _recv_exact(c, struct.unpack("!i", _recv_exact(c, 4))[0])
    me = c.getsockname()[:2]
    c.close()
    th.join(5)
    return me, rtts


def captured_exchange(path, family, host: str, n: int, *args, iface: str = "lo", **kw):
    """kafka_exchange on a new listener, captured on its port alone (the
    machine's other loopback traffic would crowd the capture buffer)."""
    ls = socket.socket(family)
    ls.bind((host, 0))
    ls.listen(1)
    try:
        with capture(path, *args, iface=iface, bpf=f"tcp port {ls.getsockname()[1]}"):
            return kafka_exchange(ls, n, **kw)
    finally:
        ls.close()


def _same_as_general_path(path) -> None:
    """segments() reads the commonest packets in one step: it must give
    what the general reader (segment_of) gives for every record."""
    from kdiag.parsers.pcap import capture_records

    recs = list(capture_records(path.read_bytes(), ParseCounts("wire")))
    assert recs and list(segments(recs, ParseCounts("wire"))) == [packets.segment_of(*r) for r in recs]


def _held_inside(reqs, rtts) -> None:
    """Each request's hold on the wire fits inside the round trip the client
    measured, and is most of it (the rest: the path and, on a loaded
    machine, the scheduler)."""
    gaps = sorted(r - m.held_ns / 1e6 for m, r in zip(reqs, rtts) if m.held_ns >= 20_000_000)
    assert gaps and gaps[0] > -1 and gaps[len(gaps) // 2] < 5, gaps


def _mine(fl, client) -> tcp.Flow:
    got = [f for f in fl if f.client == client]
    assert len(got) == 1, (fl, client)
    return got[0]


# ---------------------------------------------------------------- loopback


@pytest.mark.parametrize("family,host", [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")])
def test_loopback_kafka_round_trips(tmp_path, family, host):
    """Every request and response framed, joined by correlation id, with
    the connection's handshake, FIN and byte counts."""
    _tools()
    cap = tmp_path / "lo.pcap"
    client, rtts = captured_exchange(cap, family, host, 20, body_len=3000)
    fl, counts = read(cap)
    assert PcapReader(cap.read_bytes()).header.linktype == packets.LINKTYPE_ETHERNET
    assert counts.skipped_total == 0 and counts.parsed > 0, counts.to_dict()
    _same_as_general_path(cap)
    f = _mine(fl, client)
    assert f.client_by == "syn" and not f.mid_connection
    assert f.syn_ns < f.synack_ns <= f.established_ns
    assert 0 < f.handshake_rtt_us < 50_000 and f.synack_ack_us >= 0
    assert f.fin_by == "client" and f.rst_ns is None
    req_len, resp_len = 4 + 20 + 3000, 4 + 4 + 3000
    assert f.streams[0].length == 20 * req_len and f.streams[1].length == 20 * resp_len
    assert all(s.retransmits == 0 and s.missing_bytes == 0 for s in f.streams)
    assert framing_of(f) == "kafka"
    got = list(messages(f, "kafka"))
    reqs = [m for m in got if m.direction == 0]
    resps = [m for m in got if m.direction == 1]
    assert [m.length for m in reqs] == [req_len] * 20 and [m.length for m in resps] == [resp_len] * 20
    assert all(m.complete and len(m.head) == m.length for m in got)
    assert [struct.unpack_from("!i", m.head, 8)[0] for m in reqs] == list(range(1000, 1020))
    assert [struct.unpack_from("!i", m.head, 4)[0] for m in resps] == list(range(1000, 1020))
    # The wire's round trip sits inside the client's own measure of it.
    for q, r, measured in zip(reqs, resps, rtts):
        wire_ms = (r.last_ns - q.first_ns) / 1e6
        assert 0 < wire_ms <= measured + 1
    # Loopback carries a 3 KiB write in one segment; every byte acknowledged.
    assert all(m.segments == 1 for m in got)
    assert f.streams[0].acks[-1][1] == f.streams[0].length
    assert f.streams[0].ack_ms_median is not None and f.streams[0].ack_ms_max < 1000
    s0 = f.streams[0]
    assert s0.bytes_at(0, 4) == struct.pack("!i", req_len - 4) and s0.bytes_at(s0.length - 1, 2) is None
    assert s0.first_ns(0) == reqs[0].first_ns and s0.first_ns(s0.length) is None


def test_pcapng_of_the_same_records_reads_the_same(tmp_path):
    """A pcapng written from a real pcap's records gives the same flows."""
    _tools()
    cap = tmp_path / "lo.pcap"
    client, _ = captured_exchange(cap, socket.AF_INET, "127.0.0.1", 5)
    reader = PcapReader(cap.read_bytes())
    shb = struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)
    # if_tsresol 9: nanoseconds
    idb = struct.pack("<HHI", reader.header.linktype, 0, 0) + struct.pack("<HHB3x", 9, 1, 9) + bytes(4)
    blocks = [pcapng_block(0x0A0D0D0A, shb, "<"), pcapng_block(PCAPNG_IDB, idb, "<")]
    for rec in reader:
        ts = reader.ts_ns(rec)
        blocks.append(pcapng_block(PCAPNG_EPB, struct.pack("<IIIII", 0, ts >> 32, ts & 0xFFFFFFFF, len(rec.frame),
                                                           rec.orig_len) + rec.frame, "<"))
    ng = tmp_path / "lo.pcapng"
    ng.write_bytes(b"".join(blocks))
    a, ca = read(cap)
    b, cb = read(ng)
    assert ca.parsed == cb.parsed > 0 and cb.skipped_total == 0
    fa, fb = _mine(a, client), _mine(b, client)
    assert fa.facts() == fb.facts()
    assert [m.head for m in messages(fa, "kafka")] == [m.head for m in messages(fb, "kafka")]


@pytest.mark.parametrize("link,linktype", [("LINUX_SLL", packets.LINKTYPE_LINUX_SLL),
                                           ("LINUX_SLL2", packets.LINKTYPE_LINUX_SLL2)])
def test_any_interface_cooked_headers(tmp_path, link, linktype):
    """tcpdump -i any writes Linux cooked headers (v1 by default, v2 asked)."""
    _tools()
    cap = tmp_path / "any.pcap"
    client, _ = captured_exchange(cap, socket.AF_INET, "127.0.0.1", 3, "-y", link, iface="any")
    assert PcapReader(cap.read_bytes()).header.linktype == linktype
    _same_as_general_path(cap)
    fl, counts = read(cap)
    assert counts.skipped_total == 0
    f = _mine(fl, client)
    assert [m.direction for m in messages(f, "kafka")] == [0, 0, 0, 1, 1, 1]


def test_short_snaplen_keeps_wire_lengths_and_counts_the_missing(tmp_path):
    """-s 96: the headers and the first bytes of each segment; the stream
    lengths are the wire's, the rest is missing, never guessed."""
    _tools()
    cap = tmp_path / "short.pcap"
    client, _ = captured_exchange(cap, socket.AF_INET, "127.0.0.1", 4, "-s", "96", body_len=2000, pipelined=True)
    fl, counts = read(cap)
    f = _mine(fl, client)
    req_len = 4 + 20 + 2000
    s0 = f.streams[0]
    assert s0.length == 4 * req_len
    # Ethernet 14 + IPv4 20 + TCP 32 (timestamps): 30 payload bytes a
    # segment; the requests left in one segment, the responses in up to
    # four (Nagle may join the later ones).
    s1 = f.streams[1]
    assert s0.missing_bytes == 4 * req_len - 30 and s0.data_segments == 1
    assert s1.length == 4 * (4 + 4 + 2000) and s1.missing_bytes == s1.length - 30 * s1.data_segments
    assert s0.bytes_at(0, 30) is not None and s0.bytes_at(0, 31) is None
    # The requests went in one write: the first is framed (its size field
    # was captured), the second's size field was cut, so framing stops
    # there, counted. The responses: framed while each starts a segment.
    got = list(tcp.messages(f, "kafka", counts))
    assert [(m.offset, m.length, len(m.head)) for m in got if m.direction == 0] == [(0, req_len, 30)]
    starts = [c[0] for c in s1.chunks]
    resps = [m for m in got if m.direction == 1]
    assert resps and all(len(m.head) == 30 and m.offset in starts for m in resps)
    assert counts.skipped.get("lost_framing") == 1 + (len(resps) < 4)


def test_rst_from_a_closed_port(tmp_path):
    _tools()
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()   # nothing listens there now
    cap = tmp_path / "rst.pcap"
    with capture(cap, bpf=f"tcp port {port}"):
        c = socket.socket()
        c.bind(("127.0.0.1", 0))
        with pytest.raises(ConnectionRefusedError):
            c.connect(("127.0.0.1", port))
        me = c.getsockname()
        c.close()
    fl, _ = read(cap)
    f = _mine(fl, me)
    assert f.rst_by == "server" and f.synack_ns is None and f.rst_ns >= f.syn_ns
    assert f.established_ns is None and f.streams[0].length == 0


def test_a_new_syn_on_a_reused_four_tuple_is_a_new_flow(tmp_path):
    """Two connections from the same client port, one after the other."""
    _tools()
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(4)
    cap = tmp_path / "reuse.pcap"
    port = None
    with capture(cap, bpf=f"tcp port {ls.getsockname()[1]}"):
        for _ in range(2):
            c = socket.socket()
            c.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            # RST on close, so the port is free again at once (no TIME_WAIT)
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            c.bind(("127.0.0.1", port or 0))
            port = c.getsockname()[1]
            c.connect(ls.getsockname())
            conn, _ = ls.accept()
            c.sendall(b"x" * 10)
            conn.recv(10)
            c.close()
            conn.close()
    ls.close()
    fl, _ = read(cap)
    mine = [f for f in fl if f.client == ("127.0.0.1", port)]
    assert len(mine) == 2 and all(f.rst_by == "client" and f.streams[0].length == 10 for f in mine)
    assert mine[0].last_ns <= mine[1].syn_ns


# ---------------------------------------------------------------- Nagle and delayed ACKs


def test_nagle_and_delayed_ack_on_split_writes(tmp_path):
    """TCP_NODELAY off, a request written as two small writes: the second
    waits for the peer's ACK of the first (Nagle), which the peer delays
    (~40 ms on Linux). The wait is measured by the client itself, and the
    capture shows it as held_ns right after a delayed ACK."""
    _tools()
    cap = tmp_path / "nagle.pcap"
    client, rtts = captured_exchange(cap, socket.AF_INET, "127.0.0.1", 12, body_len=40, nodelay=False, split=True)
    fl, _ = read(cap)
    f = _mine(fl, client)
    reqs = [m for m in messages(f, "kafka") if m.direction == 0]
    assert len(reqs) == 12 and all(m.segments == 2 for m in reqs)
    held = [m for m in reqs if m.held_ns >= 30_000_000]
    # The client saw stalls of ~40 ms; each is on the wire as a held
    # request whose last segment left right after the server's ACK (give
    # or take one: a loaded machine may slow a round trip that was not held).
    slow = [r for r in rtts if r >= 30]
    assert len(held) >= 8 and abs(len(held) - len(slow)) <= 1, (rtts, [m.held_ns for m in reqs])
    assert all(m.held_after_ack for m in held)
    _held_inside(reqs, rtts)
    s0 = f.streams[0]
    assert abs(s0.delayed_acks - len(held)) <= 1 and 20 <= s0.delayed_ack_ms_median <= 250


def test_nodelay_split_writes_are_not_held(tmp_path):
    """The same exchange with TCP_NODELAY on: no segment waits for an ACK."""
    _tools()
    cap = tmp_path / "nodelay.pcap"
    client, rtts = captured_exchange(cap, socket.AF_INET, "127.0.0.1", 12, body_len=40, nodelay=True, split=True)
    fl, _ = read(cap)
    f = _mine(fl, client)
    reqs = [m for m in messages(f, "kafka") if m.direction == 0]
    # (a loaded machine may pause the client between its writes, never 40 ms)
    assert len(reqs) == 12 and max(m.held_ns for m in reqs) < 30_000_000
    assert f.streams[0].delayed_acks == 0


# ---------------------------------------------------------------- unit checks on built segments


def _seg(ts, src, dst, flags, seq, ack, data=b"", window=1000, plen=None):
    return Segment(ts, src[0], src[1], dst[0], dst[1], "tcp", seq, ack, flags, window, None,
                   len(data) if plen is None else plen, data)


C, S = ("10.0.0.1", 40000), ("10.0.0.2", 9092)
SYN, ACK, PSH, FIN = packets.TCP_SYN, packets.TCP_ACK, packets.TCP_PSH, packets.TCP_FIN


def test_mid_connection_capture_takes_the_higher_port_as_client():
    segs = [_seg(1, S, C, ACK | PSH, 500, 100, b"resp"), _seg(2, C, S, ACK, 100, 504)]
    (f,) = flows(segs)
    assert f.client == C and f.client_by == "port" and f.mid_connection
    assert f.streams[1].length == 4 and f.streams[1].acks == [(2, 4)]


def test_sequence_numbers_wrap_past_four_gib():
    isn = 0xFFFFFFF0
    segs = [_seg(0, C, S, SYN, isn, 0), _seg(1, S, C, SYN | ACK, 7, isn + 1), _seg(2, C, S, ACK, isn + 1, 8)]
    seq = isn + 1
    for i in range(4):
        segs.append(_seg(3 + i, C, S, ACK | PSH, seq & 0xFFFFFFFF, 8, b"abcdefgh"))
        seq += 8
    (f,) = flows(segs)
    s0 = f.streams[0]
    assert s0.length == 32 and s0.bytes_at(0, 32) == b"abcdefgh" * 4 and s0.retransmits == 0


def test_retransmission_and_reordering_told_apart():
    segs = [_seg(0, C, S, SYN, 0, 0), _seg(1_000_000, S, C, SYN | ACK, 0, 1), _seg(2_000_000, C, S, ACK, 1, 1),
            _seg(10_000_000, C, S, ACK, 1, 1, b"a" * 10),
            _seg(10_100_000, C, S, ACK, 21, 1, b"c" * 10),   # a hole at 10..20
            _seg(10_200_000, C, S, ACK, 11, 1, b"b" * 10),   # fills it soon: out of order
            _seg(300_000_000, C, S, ACK, 1, 1, b"a" * 10)]   # seen before: retransmission
    (f,) = flows(segs)
    s0 = f.streams[0]
    assert (s0.out_of_order, s0.retransmits, s0.retransmit_bytes, s0.missing_bytes) == (1, 1, 10, 0)
    assert s0.bytes_at(0, 30) == b"a" * 10 + b"b" * 10 + b"c" * 10
    assert s0.first_ns(15) == 10_200_000 and [c[4] for c in s0.chunks] == [False, False, False, True]


def test_a_lying_size_stops_framing_and_is_counted():
    body = struct.pack("!i", -5) + b"x" * 20
    segs = [_seg(0, C, S, SYN, 0, 0), _seg(1, S, C, SYN | ACK, 0, 1), _seg(2, C, S, ACK | PSH, 1, 1, body)]
    (f,) = flows(segs)
    counts = ParseCounts("t")
    assert list(messages(f, "kafka", counts)) == [] and counts.skipped == {"lost_framing": 1}
    assert framing_of(f) is None


def test_a_huge_claimed_payload_allocates_nothing():
    """A segment that claims 60 KB with 10 captured holds 10 bytes."""
    segs = [_seg(0, C, S, SYN, 0, 0), _seg(1, S, C, SYN | ACK, 0, 1),
            _seg(2, C, S, ACK, 1, 1, b"x" * 10, plen=60000), _seg(3, C, S, ACK, 60001, 1, b"y" * 10, plen=60000)]
    (f,) = flows(segs)
    s0 = f.streams[0]
    # missing_bytes is the length less what the stream holds
    assert s0.length == 120000 and s0.missing_bytes == 120000 - 20
    assert s0.captured_from(0, 1 << 20) == b"x" * 10 and s0.captured_from(60000, 1 << 20) == b"y" * 10


# ---------------------------------------------------------------- link layers, built frames


def _ipv4_tcp(payload=b"hi", sport=1, dport=2) -> bytes:
    tcph = struct.pack("!HHIIBBHHH", sport, dport, 1, 0, 5 << 4, ACK, 100, 0, 0)
    total = 20 + len(tcph) + len(payload)
    iph = struct.pack("!BBHHHBBH4s4s", 0x45, 0, total, 0, 0, 64, 6, 0, bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]))
    return iph + tcph + payload


@pytest.mark.parametrize("linktype,prefix", [
    (packets.LINKTYPE_NULL, struct.pack("<I", 2)), (packets.LINKTYPE_LOOP, struct.pack(">I", 2)),
    (packets.LINKTYPE_ETHERNET, bytes(12) + b"\x81\x00\x00\x05" + b"\x88\xa8\x00\x06" + b"\x08\x00"),
    (packets.LINKTYPE_RAW, b""), (packets.LINKTYPE_IPV4, b""),
])
def test_link_layers_reach_the_same_segment(linktype, prefix):
    seg = packets.segment_of(5, linktype, prefix + _ipv4_tcp())
    assert isinstance(seg, Segment) and (seg.src, seg.sport, seg.dst, seg.dport, seg.data) == \
        ("10.0.0.1", 1, "10.0.0.2", 2, b"hi")
    assert list(segments([(5, linktype, prefix + _ipv4_tcp())], ParseCounts("t"))) == [seg]


def _tcp_frame(src, dst, flags, seq, ack, window, payload=b"", opts=b"") -> bytes:
    opts += bytes(-len(opts) % 4)
    tcph = struct.pack("!HHIIBBHHH", src[1], dst[1], seq, ack, (5 + len(opts) // 4) << 4, flags, window, 0, 0)
    total = 20 + len(tcph) + len(opts) + len(payload)
    iph = struct.pack("!BBHHHBBH4s4s", 0x45, 0, total, 0, 0, 64, 6, 0, socket.inet_aton(src[0]),
                      socket.inet_aton(dst[0]))
    return iph + tcph + opts + payload


@pytest.mark.parametrize("server_window,nodelay", [(None, None), (2000, True)])
def test_nodelay_judges_small_by_the_senders_segment_size(server_window, nodelay):
    """A request of 45 KB sent as 32741 bytes and the rest, back to back,
    the first unacknowledged: both below the SYN's MSS. Linux bounds its
    segments to half the largest window the peer advertised
    (tcp_bound_to_half_wnd): after a 65483-byte window the first was
    full-size, which Nagle lets the rest follow (no sign of TCP_NODELAY, as
    a client with Nagle on writes on loopback); after the server opened its
    window to 2000 << 10 both were small, which Nagle never sends so
    (TCP_NODELAY on)."""
    from kdiag.parsers.wire.parser import parse_capture

    req = frame(0, 9, 1000, bytes(45_000))
    resp = struct.pack("!ii", 12, 1000) + bytes(8)
    mss = struct.pack("!BBH", 2, 4, 65495)
    wscale = struct.pack("!BBBB", 1, 3, 3, 10)
    pkts = [
        (0, _tcp_frame(C, S, SYN, 0, 0, 65495, opts=mss + wscale)),
        (10_000, _tcp_frame(S, C, SYN | ACK, 0, 1, 65483, opts=mss + wscale)),
        (20_000, _tcp_frame(C, S, ACK, 1, 1, 64)),
        *([(30_000, _tcp_frame(S, C, ACK, 1, 1, server_window))] if server_window else []),
        (1_000_000, _tcp_frame(C, S, ACK, 1, 1, 64, req[:32741])),
        (1_025_000, _tcp_frame(C, S, ACK | PSH, 32742, 1, 64, req[32741:])),
        (1_040_000, _tcp_frame(S, C, ACK, 1, 1 + len(req), 93)),
        (2_000_000, _tcp_frame(S, C, ACK | PSH, 1, 1 + len(req), 93, resp)),
        (2_010_000, _tcp_frame(C, S, ACK, 1 + len(req), 1 + len(resp), 64)),
    ]
    out = io.BytesIO()
    w = PcapWriter(out, PcapHeader(packets.LINKTYPE_RAW))
    for ts, f in pkts:
        w.write(1_700_000_000 * 10**9 + ts, f)
    tables, counts, _ = parse_capture(out.getvalue())
    conns = tables["wire_connections"].to_pylist()
    assert [(c["protocol"], c["requests"], c["nodelay"]) for c in conns] == [("kafka", 1, nodelay)], counts


def test_bad_records_are_counted_by_reason():
    counts = ParseCounts("t")
    frag = bytearray(_ipv4_tcp())
    frag[6] = 0x20  # more fragments
    recs = [(1, 147, b"x"), (2, 1, bytes(12) + b"\x08\x06" + bytes(28)), (3, 101, b"\x45\x00"),
            (4, 101, bytes(frag)), (5, 101, b"\x47" + bytes(19)), (6, 101, _ipv4_tcp()[:30])]
    assert list(segments(recs, counts)) == []
    assert counts.skipped == {"unsupported_link": 1, "not_ip": 1, "cut_short": 2, "fragment": 1, "bad_ip": 1}


def test_tls_records_and_bursts():
    """A TLS 1.2-shaped exchange: ClientHello, ServerHello..., CCS,
    Finished each way, then two requests and their responses."""
    def rec(t, body):
        return bytes([t, 3, 3]) + struct.pack("!H", len(body)) + body
    hello = rec(22, b"\x01" + (40).to_bytes(3, "big") + bytes(40))
    server = rec(22, b"\x02" + (30).to_bytes(3, "big") + bytes(30) + b"\x0e\x00\x00\x00")
    segs = [_seg(0, C, S, SYN, 0, 0), _seg(1, S, C, SYN | ACK, 0, 1), _seg(2, C, S, ACK, 1, 1)]
    c_seq, s_seq, t = 1, 1, 10

    def send(side, payload):
        nonlocal c_seq, s_seq, t
        t += 1_000_000
        if side == 0:
            segs.append(_seg(t, C, S, ACK | PSH, c_seq, s_seq, payload))
            c_seq += len(payload)
        else:
            segs.append(_seg(t, S, C, ACK | PSH, s_seq, c_seq, payload))
            s_seq += len(payload)
    send(0, hello)
    send(1, server)
    send(0, rec(20, b"\x01") + rec(22, bytes(40)))
    send(1, rec(20, b"\x01") + rec(22, bytes(40)))
    send(0, rec(23, bytes(100)))
    send(0, rec(23, bytes(50)))
    send(1, rec(23, bytes(30)))
    send(0, rec(23, bytes(70)))
    send(1, rec(23, bytes(20)))
    (f,) = flows(segs)
    assert framing_of(f) == "tls"
    hs = tls.handshake(f)
    names = [(d, n) for d, n, _ in hs["messages"]]
    assert names == [(0, "ClientHello"), (1, "ServerHello"), (1, "ServerHelloDone"), (0, "ChangeCipherSpec"),
                     (0, "encrypted"), (1, "ChangeCipherSpec"), (1, "encrypted")]
    assert hs["tls13"] is False and hs["handshake_ms"] == pytest.approx(4.0)
    got = [(m.direction, m.length) for m in messages(f, "tls")]
    assert got == [(0, 105 + 55), (1, 35), (0, 75), (1, 25)]


# ---------------------------------------------------------------- namespaces: VLAN, loss, zero window

_CLONE_NEWNET = 0x40000000


@contextlib.contextmanager
def in_netns(name: str):
    """This thread in network namespace ``name`` (setns is per thread):
    sockets made meanwhile stay in it."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    back = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    there = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if libc.setns(there, _CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns")
        yield
    finally:
        libc.setns(back, _CLONE_NEWNET)
        os.close(there)
        os.close(back)


@contextlib.contextmanager
def netns(*names: str):
    for n in names:
        subprocess.run(["ip", "netns", "add", n], check=True)
        subprocess.run(["ip", "-n", n, "link", "set", "lo", "up"], check=True)
    try:
        yield
    finally:
        for n in names:
            subprocess.run(["ip", "netns", "del", n], check=False)


def _ns_name() -> str:
    return f"kdw{os.getpid() % 10000}{threading.get_ident() % 1000}"


def test_vlan_tagged_frames(tmp_path):
    """802.1Q and QinQ (802.1ad outer) tags, inserted into the Ethernet
    frames of a real loopback capture: the kernels kdiag is tested on have
    no 8021q (``ip link add ... type vlan``: "Unknown device type"), so a
    tagged capture cannot be taken here. Same flows, same messages."""
    _tools()
    cap = tmp_path / "lo.pcap"
    client, _ = captured_exchange(cap, socket.AF_INET, "127.0.0.1", 3)
    reader = PcapReader(cap.read_bytes())
    out = io.BytesIO()
    w = PcapWriter(out, reader.header)
    for i, rec in enumerate(reader):
        tags = b"\x81\x00\x00\x2a" if i % 2 else b"\x88\xa8\x00\x07\x81\x00\x00\x2a"
        w.write(reader.ts_ns(rec), rec.frame[:12] + tags + rec.frame[12:], rec.orig_len + len(tags))
    tagged = tmp_path / "vlan.pcap"
    tagged.write_bytes(out.getvalue())
    a, _ = read(cap)
    b, counts = read(tagged)
    assert counts.skipped_total == 0
    fa, fb = _mine(a, client), _mine(b, client)
    assert fa.facts() == fb.facts()
    assert [m.head for m in messages(fb, "kafka")] == [m.head for m in messages(fa, "kafka")]
    assert len(list(messages(fb, "kafka"))) == 6


def test_retransmissions_of_dropped_segments(tmp_path):
    """nftables drops the first data segments to the server after the
    capture saw them (input hook): each comes again after the RTO. The
    capture's retransmissions are the rule's drops."""
    _tools()
    need("nft")
    ns = _ns_name() + "r"
    with netns(ns):
        with in_netns(ns):
            ls = socket.socket()
            ls.bind(("127.0.0.1", 0))
            ls.listen(1)
        port = ls.getsockname()[1]
        rules = (f"table inet kdw {{\n counter dropped {{\n }}\n chain input {{\n"
                 f"  type filter hook input priority 0; policy accept;\n"
                 f"  tcp dport {port} meta length > 200 quota until 4000 bytes counter name \"dropped\" drop\n"
                 f" }}\n}}\n")
        subprocess.run(["ip", "netns", "exec", ns, "nft", "-f", "-"], input=rules, text=True, check=True)
        cap = tmp_path / "loss.pcap"
        try:
            with capture(cap, netns=ns, bpf=f"tcp port {port}"):
                with in_netns(ns):
                    client, rtts = kafka_exchange(ls, 3, body_len=1000)
        finally:
            ls.close()
        shown = subprocess.run(["ip", "netns", "exec", ns, "nft", "list", "counter", "inet", "kdw", "dropped"],
                               capture_output=True, text=True, check=True).stdout
    dropped = int(re.search(r"packets (\d+)", shown).group(1))
    assert dropped >= 1
    fl, _ = read(cap)
    f = _mine(fl, client)
    s0 = f.streams[0]
    assert s0.retransmits == dropped and s0.retransmit_bytes == dropped * 1024
    assert s0.out_of_order == 0 and s0.missing_bytes == 0 and f.streams[1].retransmits == 0
    # The first request waited for the retransmission timeout(s), as the
    # client measured; its ACK timing skips the retransmitted segment.
    assert rtts[0] >= 190 and [m.length for m in messages(f, "kafka") if m.direction == 0] == [1024] * 3
    assert s0.ack_ms_max < rtts[0]
    print(f"dropped {dropped}, retransmits {s0.retransmits}; first round trip {rtts[0]:.1f} ms")


def test_zero_window_of_a_receiver_that_stops_reading(tmp_path):
    """A server with a small receive buffer that reads nothing for a
    while: its window falls to 0 and the client's stream stalls."""
    _tools()
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    total, pause = 1 << 20, 0.5
    got = {}

    def server():
        conn, _ = ls.accept()
        with conn:
            time.sleep(pause)
            got["resumed"] = time.monotonic()
            n = 0
            while n < total:
                n += len(conn.recv(65536))
    cap = tmp_path / "zero.pcap"
    try:
        # Headers only: the test reads sequence numbers and windows, and 1 MiB
        # of 64 KiB loopback frames fills the ring's full-size slots faster
        # than tcpdump drains them on a busy machine (the kernel drops some,
        # and capture() refuses the file).
        with capture(cap, "-s", "128", bpf=f"tcp port {ls.getsockname()[1]}"):
            th = threading.Thread(target=server, daemon=True)
            th.start()
            c = socket.socket()
            c.connect(ls.getsockname())
            t0 = time.monotonic()
            c.sendall(bytes(total))
            client = c.getsockname()
            c.close()
            th.join(10)
    finally:
        ls.close()
    stalled_ms = (got["resumed"] - t0) * 1000
    fl, _ = read(cap)
    f = _mine(fl, client)
    s0 = f.streams[0]
    assert s0.length == total and s0.zero_windows >= 1
    # The window stayed shut while the server slept, give or take the
    # time the buffer took to fill.
    assert stalled_ms - 100 <= s0.zero_window_ms <= stalled_ms + 100, (s0.zero_window_ms, stalled_ms)
    print(f"zero window {s0.zero_windows}x, {s0.zero_window_ms:.1f} ms; server paused {stalled_ms:.1f} ms")


# ---------------------------------------------------------------- TLS


def _tls_exchange(ls, cert, n: int, nodelay: bool, version) -> tuple[tuple, list[float], float]:
    """n Kafka-framed round trips over TLS, each request written as two
    TLS writes (its size, then the rest); the client's address, round trips
    (ms) and handshake (ms, connect() to the handshake's end)."""
    import ssl

    sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    sctx.load_cert_chain(cert[0], cert[1])
    sctx.maximum_version = sctx.minimum_version = version
    # TLS 1.3 session tickets are application data on the wire, sent in the
    # middle of the first request: kdiag.parsers.wire.tls says so; here the
    # requests alone are counted.
    sctx.num_tickets = 0

    def serve():
        raw, _ = ls.accept()
        # the server's own Nagle would hold its responses: the client's is measured
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with sctx.wrap_socket(raw, server_side=True) as conn:
            for _ in range(n):
                size = struct.unpack("!i", _recv_exact(conn, 4))[0]
                corr = struct.unpack_from("!i", _recv_exact(conn, size), 4)[0]
                resp = struct.pack("!i", corr) + bytes(60)
                conn.sendall(struct.pack("!i", len(resp)) + resp)
            conn.recv(1)
    th = threading.Thread(target=serve, daemon=True)
    th.start()
    cctx = ssl.create_default_context(cafile=str(cert[0]))
    raw = socket.socket()
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, int(nodelay))
    t0 = time.monotonic()
    raw.connect(ls.getsockname())
    c = cctx.wrap_socket(raw, server_hostname="localhost")
    hs_ms = (time.monotonic() - t0) * 1000
    rtts = []
    for i in range(n):
        req = frame(0, 9, 2000 + i, bytes(50))
        t1 = time.monotonic()
        c.sendall(req[:4])
        c.sendall(req[4:])
        _recv_exact(c, struct.unpack("!i", _recv_exact(c, 4))[0])
        rtts.append((time.monotonic() - t1) * 1000)
    me = c.getsockname()
    c.close()
    th.join(5)
    return me, rtts, hs_ms


@pytest.mark.parametrize("version", ["TLSv1_2", "TLSv1_3"])
@pytest.mark.parametrize("nodelay", [False, True])
def test_tls_requests_and_nagle_on_the_wire(tmp_path, version, nodelay):
    """Over TLS the requests are told apart by the alternation of the two
    sides' application data; with Nagle on, each request's second record
    leaves only after the server's delayed ACK: held ~40 ms right after an
    ACK, as the client's own round trips show."""
    import ssl

    _tools()
    need("openssl")
    from kdiag.lab.tls import make_cert

    cert = make_cert("openssl", tmp_path)
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    cap = tmp_path / "tls.pcap"
    try:
        with capture(cap, bpf=f"tcp port {ls.getsockname()[1]}"):
            client, rtts, hs_ms = _tls_exchange(ls, cert, 10, nodelay, getattr(ssl.TLSVersion, version))
    finally:
        ls.close()
    fl, _ = read(cap)
    f = _mine(fl, client)
    assert framing_of(f) == "tls"
    hs = tls.handshake(f)
    assert hs["tls13"] == (version == "TLSv1_3")
    names = [(d, n) for d, n, _ in hs["messages"]]
    assert names[:2] == [(0, "ClientHello"), (1, "ServerHello")]
    # ClientHello -> the first request's first record: inside the client's
    # measure of connect + handshake and its first round trip (in TLS 1.3
    # with Nagle on, that record waits for the ACK of the client's Finished).
    assert 0 < hs["handshake_ms"] <= hs_ms + rtts[0] + 5
    got = list(messages(f, "tls"))
    assert [m.direction for m in got] == [0, 1] * 10, [(m.direction, m.length) for m in got]
    reqs = [m for m in got if m.direction == 0]
    assert all(m.complete for m in reqs) and all(m.segments == 2 for m in reqs[1:])
    if version == "TLSv1_3" and not nodelay and reqs[0].segments == 1:
        # Both records of the first request waited, together, for the ACK
        # of the client's Finished: held before its first segment, which
        # left right after that ACK.
        assert rtts[0] >= 20 and f.streams[0].ack_before(reqs[0].first_ns, 2_000_000, reqs[0].offset)
        reqs, rtts = reqs[1:], rtts[1:]
    held = [m for m in reqs if m.held_ns >= 30_000_000]
    slow = [r for r in rtts if r >= 30]
    if nodelay:
        assert not held
    else:
        assert len(held) >= 7 and abs(len(held) - len(slow)) <= 1, (rtts, [m.held_ns for m in reqs])
        assert all(m.held_after_ack for m in held)
        _held_inside(reqs, rtts)
        print(f"{version} Nagle: held {[round(m.held_ns / 1e6, 1) for m in reqs]} ms; client {rtts}")


# ---------------------------------------------------------------- the lab's nagle-on case


def test_lab_nagle_on_librdkafka_over_tls(tmp_path):
    """The lab's nagle-on case (librdkafka with socket.nagle.disable=false,
    TLS through stunnel4 to Tansu) captured: every Produce request is held
    ~40 ms with its last segment right after the terminator's delayed ACK,
    as long as the producer's own wait for each delivery."""
    _tools()
    need("stunnel4")
    from confluent_kafka import Producer

    from kdiag.lab import broker as lab
    from kdiag.lab.scenarios import nagle_on

    cap = tmp_path / "nagle-on.pcap"
    waits = []
    with lab.running(lab=nagle_on.LAB) as L:
        with capture(cap, bpf=f"tcp port {L.tls_port}"):
            p = Producer({"bootstrap.servers": L.bootstrap, "security.protocol": "ssl",
                          "ssl.ca.location": str(L.ca_path), **nagle_on.PROPS, "linger.ms": 0})
            p.produce("kdiag-probe", b"w")   # warm: metadata, the connection
            p.flush(30)
            for _ in range(15):
                t0 = time.monotonic()
                p.produce("kdiag-probe", b"x" * 2048)
                p.flush(10)
                waits.append((time.monotonic() - t0) * 1000)
            del p
    fl, counts = read(cap)
    assert counts.skipped_total == 0
    assert {framing_of(f) for f in fl} == {"tls"}
    held = [m for f in fl for m in messages(f, "tls") if m.direction == 0 and m.held_ns >= 30_000_000]
    slow = [w for w in waits if w >= 30]
    # Each slow delivery is one held request on the wire (the warm-up's too
    # when it was held), its wait the delayed ACK's.
    assert len(held) >= 10 and abs(len(held) - len(slow)) <= 2, (waits, [m.held_ns for m in held])
    assert all(m.held_after_ack for m in held)
    med_held = sorted(m.held_ns for m in held)[len(held) // 2] / 1e6
    med_wait = sorted(slow)[len(slow) // 2]
    assert 30 <= med_held <= med_wait and med_wait - med_held < 5, (med_held, med_wait)
    s0 = max((f.streams[0] for f in fl), key=lambda s: s.delayed_acks)
    assert s0.delayed_acks >= len(held) - 1 and abs(s0.delayed_ack_ms_median - med_held) < 5
    print(f"held median {med_held:.1f} ms, producer's wait median {med_wait:.1f} ms, {len(held)} held requests")


def test_mangled_captures_are_counted_never_raised(tmp_path):
    """Real records with bytes overwritten, cut or lengthened at random
    (seeded): every record is parsed or counted, and the connections,
    their Kafka and TLS framing and the TLS handshake read without raising."""
    import random

    from kdiag.parsers.pcap import capture_records

    _tools()
    cap = tmp_path / "lo.pcap"
    captured_exchange(cap, socket.AF_INET6, "::1", 6, body_len=300)
    recs = list(capture_records(cap.read_bytes(), ParseCounts("wire")))
    rnd = random.Random(42)
    for round_ in range(200):
        mangled = []
        for ts, lt, frame in recs:
            b = bytearray(frame)
            for _ in range(rnd.randrange(4)):
                b[rnd.randrange(len(b))] = rnd.randrange(256)
            if rnd.random() < 0.1:
                b = b[:rnd.randrange(len(b) + 1)]
            if rnd.random() < 0.05:
                b += rnd.randbytes(rnd.randrange(64))
            mangled.append((ts + rnd.randrange(-1000, 1000), rnd.choice((lt, lt, lt, 0, 113, 276, 229)), bytes(b)))
        counts = ParseCounts("wire")
        counts.lines = len(mangled)
        fl = flows(segments(mangled, counts), counts)
        assert counts.parsed + counts.skipped_total == len(mangled), (round_, counts.to_dict())
        for f in fl:
            for framing in ("kafka", "tls"):
                for m in messages(f, framing, counts):
                    assert 0 <= len(m.head) <= min(m.length, tcp.HEAD_MAX)
            tls.handshake(f)
            f.facts()
            framing_of(f)


def _ipv6_tcp(ext: bytes = b"", first: int = 6, payload: bytes = b"hey") -> bytes:
    tcph = struct.pack("!HHIIBBHHH", 40000, 9092, 7, 0, 5 << 4, ACK, 100, 0, 0)
    src, dst = socket.inet_pton(socket.AF_INET6, "fd00::1"), socket.inet_pton(socket.AF_INET6, "fd00::2")
    return struct.pack("!IHBB", 6 << 28, len(ext) + len(tcph) + len(payload), first, 64) + src + dst + ext + tcph \
        + payload


def test_ipv6_extension_headers_walked_and_fragments_counted():
    hop = bytes([43, 0]) + bytes(6)                 # hop-by-hop, 8 bytes, then routing
    routing = bytes([60, 1]) + bytes(14)            # routing, 16 bytes, then destination options
    dest = bytes([6, 0]) + bytes(6)                 # destination options, then TCP
    seg = packets.segment_of(1, packets.LINKTYPE_IPV6, _ipv6_tcp(hop + routing + dest, first=0))
    assert isinstance(seg, Segment) and (seg.src, seg.dst, seg.dport, seg.data, seg.payload_len) == \
        ("fd00::1", "fd00::2", 9092, b"hey", 3)
    frag = bytes([6, 0, 0, 1]) + bytes(4)
    assert packets.segment_of(1, packets.LINKTYPE_IPV6, _ipv6_tcp(frag, first=44)) == "fragment"
    # A chain longer than the bound is refused, not walked on.
    loop = (bytes([60, 0]) + bytes(6)) * (packets.MAX_IPV6_HEADERS + 1)
    assert packets.segment_of(1, packets.LINKTYPE_IPV6, _ipv6_tcp(loop, first=60)) == "bad_ip"
    for family in (10, 24, 28, 30):   # BSD loopback's AF_INET6, either byte order
        for order in ("little", "big"):
            frame = family.to_bytes(4, order) + _ipv6_tcp()
            assert isinstance(packets.segment_of(1, packets.LINKTYPE_NULL, frame), Segment)
    eth = bytes(12) + b"\x86\xdd" + _ipv6_tcp()
    assert list(segments([(1, packets.LINKTYPE_ETHERNET, eth)], ParseCounts("t")))[0].src == "fd00::1"
