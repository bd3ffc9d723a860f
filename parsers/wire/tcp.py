"""TCP segments -> connections (``Flow``), their two byte streams
(``Stream``) and the messages framed in them (``Message``).

``flows(segments, counts)`` gives one Flow per TCP connection, in the order
their first segment was captured. A connection starts at a SYN (without
ACK); a SYN on a 4-tuple already in use starts a new Flow unless it repeats
that Flow's SYN (same sequence number: a SYN retransmission), so a port
reused after FIN, RST or a connection whose end was not captured is a new
Flow. A capture that starts mid-connection still gives a Flow
(``mid_connection``): its client is the side a SYN-ACK was sent to when one
is seen, else the side with the higher port, as an ephemeral port is higher
than the well-known or configured port it connects to (9092 < 32768, Linux's
first ephemeral port); equal ports: the first sender (``client_by`` says
which rule decided: ``syn``, ``synack``, ``port``).

Directions: 0 is client -> server, 1 is server -> client. ``flow.streams[d]``
holds the bytes side d sent and every fact about that byte stream: its
segments, retransmissions, the peer's ACKs of it (timing, delayed ACKs) and
the peer's zero windows that stalled it.

Stream offsets: offset 0 is the byte after the SYN (the first byte seen, in
a capture that starts mid-connection). Sequence numbers are unwrapped past
4 GiB against the highest offset seen. Bytes are kept only as captured
(snaplen-cut segments leave holes): a stream holds at most what the capture
holds, never an allocation sized by a header's length field.

Retransmission and reordering: data below the highest offset already seen is
a retransmission, unless it fills a hole (bytes never seen) within the
reordering window (the handshake's round trip, at least 3 ms) of the hole's
appearing, which makes it out of order; later, a retransmission of data lost
before the capture point. Holes still open at the end, and bytes the
snaplen cut, are ``missing_bytes``. ACK timing skips retransmitted data
(Karn).

Delayed ACK (RFC 1122 4.2.3.2, Linux's ~40 ms at first): a pure ACK (no
data, SYN or FIN) from the peer that came ``DELAYED_ACK_NS`` or more after
the last data segment it acknowledges, when that ACK covered all the data
sent (nothing else outstanding).

``messages(flow, framing)`` frames a Flow's streams: ``"kafka"`` (int32
big-endian size, then that many bytes; the Message covers the size field
too) or ``"tls"`` (kdiag.parsers.wire.tls). ``framing_of(flow)`` tells which
from the client's first bytes. Framing starts at offset 0 of each stream: in
a capture that starts mid-connection that is a boundary only if the capture
began between messages, which framing_of's reading of the client's first
bytes as a request (or a TLS record) is what vouches for.

Skip reasons counted by ``messages`` (on the ``counts`` given): ``lost_framing``
(a size field that cannot be, or not captured: framing stops on that
direction, nothing past it is guessed).
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from kdiag.parsers.base import ParseCounts
from kdiag.parsers.wire import kafka, tls
from kdiag.parsers.wire.packets import TCP_ACK, TCP_FIN, TCP_RST, TCP_SYN, Segment

_MASK = 0xFFFFFFFF
_SYN_FIN_RST = TCP_SYN | TCP_FIN | TCP_RST
DELAYED_ACK_NS = 10_000_000
# A segment that leaves this soon after the peer's ACK of everything before
# it was waiting for that ACK (Nagle's algorithm, RFC 896).
NAGLE_ACK_NS = 2_000_000
REORDER_MIN_NS = 3_000_000
# Kafka's own ceiling is socket.request.max.bytes (100 MiB by default).
MAX_KAFKA_FRAME = 100 << 20
HEAD_MAX = 64 << 10
# Open holes kept per stream: each retransmission below the highest offset
# is checked against them, so their number bounds that check's cost.
MAX_HOLES = 1024


def _median(xs: list) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


class Stream:
    """One direction's bytes and facts. Counts and times: ``segments``
    (every segment this side sent), ``data_segments``, ``bytes`` (payload on
    the wire, retransmissions included), ``retransmits`` and
    ``retransmit_bytes``, ``out_of_order``, ``missing_bytes``,
    ``zero_windows`` (times the peer's window fell to 0) and
    ``zero_window_ms`` (how long it stayed there), ``delayed_acks`` and
    ``delayed_ack_ms`` (each delayed ACK's wait), ``ack_ms`` (data segment
    -> the peer's ACK covering it, first transmissions only); ``length``;
    ``chunks``: (offset, length, ts_ns, captured, retransmit) per data
    segment in arrival order; ``acks``: (ts_ns, offset acknowledged) of each
    peer ACK that moved forward; ``windows``: (ts_ns, bytes) each time the
    largest window the peer advertised grew (scaled where both SYNs were
    captured with the option, else the raw field: a lower bound)."""

    def __init__(self):
        self.segments = 0
        self.data_segments = 0
        self.bytes = 0
        self.retransmits = 0
        self.retransmit_bytes = 0
        self.out_of_order = 0
        self.missing_bytes = 0
        self.zero_windows = 0
        self.zero_window_ms = 0.0
        self.delayed_ack_ms: list[float] = []
        self.ack_ms: list[float] = []
        self.length = 0
        self.fin = False
        self.chunks: list[tuple[int, int, int, int, bool]] = []
        self.acks: list[tuple[int, int]] = []
        self.windows: list[tuple[int, int]] = []
        self._max_window = 0
        self._grow_above = -1
        self.wscale: int | None = None
        self.mss: int | None = None
        self.base: int | None = None         # the sequence number of offset 0
        self._high = 0
        self._acked = 0
        # Captured bytes: [start, end, [pieces]] while building (joined
        # once at the end: growing one buffer re-copies it as it grows),
        # then [start, bytes].
        self._runs: list[list] = []
        self._late: list[tuple[int, bytes]] = []
        self._firsts: list[tuple[int, int, int]] = []   # (start, end, ts) of each byte range's first sight
        self._first_starts: list[int] = []
        self._holes: list[list[int]] = []    # [start, end, ts it opened]
        self._pending: deque = deque()       # (end, ts) of data not yet acknowledged
        self._zero_since: int | None = None
        self._ack_ts: list[int] = []
        self._run_starts: list[int] = []

    # ---- facts

    @property
    def delayed_acks(self) -> int:
        return len(self.delayed_ack_ms)

    @property
    def delayed_ack_ms_median(self) -> float | None:
        return _median(self.delayed_ack_ms)

    @property
    def ack_ms_median(self) -> float | None:
        return _median(self.ack_ms)

    @property
    def ack_ms_max(self) -> float | None:
        return max(self.ack_ms) if self.ack_ms else None

    # ---- reading

    def bytes_at(self, offset: int, n: int) -> bytes | None:
        """The stream's bytes [offset, offset + n), None when any of them
        was not captured."""
        if offset < 0 or n < 0:
            return None
        i = bisect_right(self._run_starts, offset) - 1
        if i < 0:
            return None
        start, buf = self._runs[i]
        if offset + n > start + len(buf):
            return None
        return bytes(buf[offset - start:offset - start + n])

    def captured_from(self, offset: int, limit: int) -> bytes:
        """The captured bytes from ``offset`` up to the first one missing,
        at most ``limit``."""
        i = bisect_right(self._run_starts, offset) - 1
        if i < 0:
            return b""
        start, buf = self._runs[i]
        return bytes(buf[offset - start:offset - start + limit]) if offset < start + len(buf) else b""

    def first_ns(self, offset: int) -> int | None:
        """When the stream byte at ``offset`` first appeared on the wire."""
        i = bisect_right(self._first_starts, offset) - 1
        if i < 0:
            return None
        start, end, ts = self._firsts[i]
        return ts if offset < end else None

    def firsts_between(self, start: int, end: int) -> list[tuple[int, int, int]]:
        """(start, end, ts_ns) of the first transmissions holding any byte
        of [start, end), in stream order."""
        i = max(bisect_right(self._first_starts, start) - 1, 0)
        out = []
        while i < len(self._firsts) and self._firsts[i][0] < end:
            if self._firsts[i][1] > start:
                out.append(self._firsts[i])
            i += 1
        return out

    def ack_before(self, ts_ns: int, window_ns: int, offset: int) -> bool:
        """Whether a peer ACK of everything before ``offset`` came at most
        ``window_ns`` before ``ts_ns``."""
        i = bisect_right(self._ack_ts, ts_ns) - 1
        while i >= 0 and ts_ns - self.acks[i][0] <= window_ns:
            if self.acks[i][1] >= offset:
                return True
            i -= 1
        return False

    # ---- building

    def offset_of(self, seq: int) -> int:
        """The unwrapped stream offset of a sequence number (nearest the
        highest offset seen)."""
        d = (seq - self.base - self._high) & _MASK
        return self._high + (d - 0x100000000 if d >= 0x80000000 else d)

    def _store(self, off: int, data: bytes) -> None:
        if not data:
            return
        runs = self._runs
        if runs:
            last = runs[-1]
            if off == last[1]:
                last[1] += len(data)
                last[2].append(data)
                return
            if off < last[1]:
                self._late.append((off, data))
                return
        runs.append([off, off + len(data), [data]])

    def _first(self, start: int, end: int, ts: int) -> None:
        if not self._first_starts or start >= self._firsts[-1][0]:
            self._firsts.append((start, end, ts))
            self._first_starts.append(start)
        else:
            i = bisect_left(self._first_starts, start)
            self._firsts.insert(i, (start, end, ts))
            self._first_starts.insert(i, start)

    def data(self, ts: int, off: int, plen: int, data: bytes, reorder_ns: int) -> None:
        end = off + plen
        self.data_segments += 1
        self.bytes += plen
        if off >= self._high:   # new data, the common case: kept in order
            if off > self._high and len(self._holes) < MAX_HOLES:
                self._holes.append([self._high, off, ts])
            runs = self._runs
            if data and runs and runs[-1][1] == off:
                last = runs[-1]
                last[1] += len(data)
                last[2].append(data)
            else:
                self._store(off, data)
            self._firsts.append((off, end, ts))
            self._first_starts.append(off)
            self._pending.append((end, ts))
            self._high = end
            self.chunks.append((off, plen, ts, len(data), False))
            return
        if off < 0:  # before the first byte this capture saw of the stream
            self.retransmits += 1
            self.retransmit_bytes += plen
            self.chunks.append((off, plen, ts, len(data), True))
            return
        below = min(end, self._high) - off
        filled, opened = self._fill(off, off + below, ts, data)
        if end > self._high:
            self._store(self._high, data[self._high - off:])
            self._first(self._high, end, ts)
            self._pending.append((end, ts))
            self._high = end
        fresh = filled and ts - opened < reorder_ns
        if fresh:
            self.out_of_order += 1
        else:
            self.retransmits += 1
            self.retransmit_bytes += below - filled
            # Karn: what is outstanding past it will be acknowledged after
            # the recovery, not at its first transmission's pace.
            while self._pending and self._pending[-1][0] > off:
                self._pending.pop()
        self.chunks.append((off, plen, ts, len(data), not fresh))

    def _fill(self, off: int, end: int, ts: int, data: bytes) -> tuple[int, int]:
        """Bytes of [off, end) that fill holes, and when the first such hole
        opened."""
        filled, opened = 0, ts
        kept: list[list[int]] = []
        for h in self._holes:
            a, b = max(off, h[0]), min(end, h[1])
            if a >= b:
                kept.append(h)
                continue
            if not filled:
                opened = h[2]
            filled += b - a
            self._first(a, b, ts)
            piece = data[a - off:b - off]
            if piece:
                self._late.append((a, piece))
            if h[0] < a:
                kept.append([h[0], a, h[2]])
            if b < h[1]:
                kept.append([b, h[1], h[2]])
        if filled:
            self._holes = kept
        return filled, opened

    def ack(self, ts: int, off: int, pure: bool) -> None:
        """The peer acknowledged everything before ``off``."""
        off = min(off, self._high)
        if off <= self._acked:
            return
        self._acked = off
        self.acks.append((ts, off))
        self._ack_ts.append(ts)
        last = None
        pending = self._pending
        while pending and pending[0][0] <= off:
            end, sent = pending.popleft()
            self.ack_ms.append((ts - sent) / 1e6)
            last = sent
        if pure and last is not None and off == self._high and ts - last >= DELAYED_ACK_NS:
            self.delayed_ack_ms.append((ts - last) / 1e6)

    def window(self, ts: int, window: int) -> None:
        """The peer advertised ``window`` for this stream."""
        if window == 0:
            if self._zero_since is None:
                self._zero_since = ts
                self.zero_windows += 1
        elif self._zero_since is not None:
            self.zero_window_ms += (ts - self._zero_since) / 1e6
            self._zero_since = None

    def finish(self, last_ns: int) -> None:
        if self._zero_since is not None:  # still closed when the capture ended
            self.zero_window_ms += (last_ns - self._zero_since) / 1e6
            self._zero_since = None
        runs = [[start, b"".join(pieces)] for start, _end, pieces in self._runs]
        if self._late:
            merged: list[list] = []   # [start, end, pieces]
            for s, b in sorted(runs + self._late, key=lambda p: p[0]):
                if merged and s <= merged[-1][1]:
                    last = merged[-1]
                    over = last[1] - s
                    if over < len(b):   # the first copy captured wins
                        last[2].append(b[over:])
                        last[1] += len(b) - over
                else:
                    merged.append([s, s + len(b), [b]])
            runs = [[start, b"".join(pieces)] for start, _end, pieces in merged]
            self._late = []
        self._runs = runs
        self._run_starts = [r[0] for r in runs]
        self.length = self._high
        self.missing_bytes = self._high - sum(len(r[1]) for r in runs)
        self._pending.clear()


class Flow:
    """One TCP connection. ``client``/``server``: (address, port). Times
    are capture nanoseconds (None when not seen): ``syn_ns`` (first SYN),
    ``synack_ns``, ``established_ns`` (the client's ACK of the SYN-ACK),
    ``rst_ns`` and ``rst_by`` ("client"/"server"), ``fin_ns`` and
    ``fin_by`` (the first FIN), ``first_ns``/``last_ns``.
    ``handshake_rtt_us``: the last SYN -> SYN-ACK; ``synack_ack_us``:
    SYN-ACK -> the client's ACK (where the capture was taken splits the
    round trip between the two: at the client the first is the whole
    round trip). ``syn_retransmits``, ``synack_retransmits``.
    ``streams``: (client -> server, server -> client)."""

    def __init__(self, client: tuple[str, int], server: tuple[str, int], first_ns: int, client_by: str):
        self.client, self.server = client, server
        self.client_by = client_by
        self.mid_connection = client_by != "syn"
        self.first_ns = self.last_ns = first_ns
        self.syn_ns = self.synack_ns = self.established_ns = None
        self.rst_ns = self.fin_ns = None
        self.rst_by = self.fin_by = None
        self.handshake_rtt_us: float | None = None
        self.synack_ack_us: float | None = None
        self.syn_retransmits = self.synack_retransmits = 0
        self.streams = (Stream(), Stream())
        self._syn_seq: int | None = None
        self._last_syn_ns: int | None = None
        self._synack_seq: int | None = None
        self._reorder_ns = REORDER_MIN_NS

    def __repr__(self) -> str:
        return f"Flow({self.client[0]}:{self.client[1]} -> {self.server[0]}:{self.server[1]})"

    def _handshake(self, seg: Segment, d: int) -> None:
        ts = seg.ts_ns
        s = self.streams[d]
        s.wscale, s.mss = seg.wscale, seg.mss
        if d == 0:
            if self._syn_seq is None:
                self.syn_ns, self._syn_seq = ts, seg.seq
                s.base = (seg.seq + 1) & _MASK
            elif seg.seq == self._syn_seq:
                self.syn_retransmits += 1
            self._last_syn_ns = ts
        elif seg.flags & TCP_ACK:
            if self.synack_ns is None:
                self.synack_ns, self._synack_seq = ts, seg.seq
                s.base = (seg.seq + 1) & _MASK
                if self._last_syn_ns is not None:
                    self.handshake_rtt_us = (ts - self._last_syn_ns) / 1000
            else:
                self.synack_retransmits += 1

    def _opening(self, seg: Segment, d: int) -> None:
        """The handshake's segments and a side's first one."""
        mine = self.streams[d]
        if seg.flags & TCP_SYN:
            self._handshake(seg, d)
        if mine.base is None:
            mine.base = seg.seq
        if (d == 0 and self.established_ns is None and self._synack_seq is not None
                and seg.flags & (TCP_SYN | TCP_ACK) == TCP_ACK and seg.ack == (self._synack_seq + 1) & _MASK):
            self.established_ns = seg.ts_ns
            self.synack_ack_us = (seg.ts_ns - self.synack_ns) / 1000
            self._reorder_ns = max(int((self.handshake_rtt_us or 0) * 1000 + self.synack_ack_us * 1000),
                                   REORDER_MIN_NS)

    def _closing(self, seg: Segment, d: int) -> None:
        if seg.flags & TCP_FIN:
            self.streams[d].fin = True
            if self.fin_ns is None:
                self.fin_ns, self.fin_by = seg.ts_ns, ("client", "server")[d]
        if seg.flags & TCP_RST and self.rst_ns is None:
            self.rst_ns, self.rst_by = seg.ts_ns, ("client", "server")[d]

    @staticmethod
    def _grown(peer: Stream, seg: Segment, shift: int | None, most: int | None) -> None:
        # A SYN's window is never scaled (RFC 7323 2.2).
        w = seg.window << (shift or 0)
        if w > peer._max_window:
            peer._max_window = w
            peer.windows.append((seg.ts_ns, w))
        # The raw field that could be larger: one comparison per segment.
        peer._grow_above = peer._max_window >> (most or 0)

    # The hot path: one call per segment of the capture, the rare cases
    # (handshake, close) apart.
    def add(self, seg: Segment, d: int) -> None:
        ts, flags = seg.ts_ns, seg.flags
        self.last_ns = ts
        mine, peer = self.streams[d], self.streams[1 - d]
        mine.segments += 1
        if flags & TCP_SYN or mine.base is None or (self.established_ns is None and self._synack_seq is not None):
            self._opening(seg, d)
        if flags & TCP_ACK:
            if peer.base is None:  # the peer has sent nothing yet in this capture
                peer.base = seg.ack
            high = peer._high
            u = (seg.ack - peer.base - high) & _MASK
            off = high + (u - 0x100000000 if u >= 0x80000000 else u)
            if off > peer._acked:
                peer.ack(ts, off, not seg.payload_len and not flags & _SYN_FIN_RST)
        if seg.window > peer._grow_above:
            self._grown(peer, seg, mine.wscale if peer.wscale is not None and not flags & TCP_SYN else None,
                        mine.wscale)
        # Only a zero window matters here, which no scale changes.
        if (not seg.window or peer._zero_since is not None) and not flags & (TCP_SYN | TCP_RST):
            peer.window(ts, seg.window)
        if seg.payload_len:
            seq = (seg.seq + 1) & _MASK if flags & TCP_SYN else seg.seq
            mine.data(ts, mine.offset_of(seq), seg.payload_len, seg.data, self._reorder_ns)
        if flags & (TCP_FIN | TCP_RST):
            self._closing(seg, d)

    def facts(self) -> dict:
        """The connection's facts as one flat row (directions as ``c2s_`` and
        ``s2c_`` prefixes)."""
        row = {
            "client_addr": self.client[0], "client_port": self.client[1],
            "server_addr": self.server[0], "server_port": self.server[1],
            "client_by": self.client_by, "first_ns": self.first_ns, "last_ns": self.last_ns,
            "syn_ns": self.syn_ns, "synack_ns": self.synack_ns, "established_ns": self.established_ns,
            "handshake_rtt_us": self.handshake_rtt_us, "synack_ack_us": self.synack_ack_us,
            "syn_retransmits": self.syn_retransmits, "synack_retransmits": self.synack_retransmits,
            "rst_ns": self.rst_ns, "rst_by": self.rst_by, "fin_ns": self.fin_ns, "fin_by": self.fin_by,
        }
        for prefix, s in zip(("c2s_", "s2c_"), self.streams):
            row.update({prefix + k: v for k, v in (
                ("segments", s.segments), ("data_segments", s.data_segments), ("bytes", s.bytes),
                ("length", s.length), ("retransmits", s.retransmits), ("retransmit_bytes", s.retransmit_bytes),
                ("out_of_order", s.out_of_order), ("missing_bytes", s.missing_bytes),
                ("zero_windows", s.zero_windows), ("zero_window_ms", s.zero_window_ms),
                ("delayed_acks", s.delayed_acks), ("delayed_ack_ms_median", s.delayed_ack_ms_median),
                ("ack_ms_median", s.ack_ms_median), ("ack_ms_max", s.ack_ms_max),
                ("mss", s.mss), ("wscale", s.wscale))})
        return row


def _client_of(seg: Segment) -> tuple[tuple[str, int], tuple[str, int], str]:
    """(client, server, rule) for a connection's first captured segment."""
    a, b = (seg.src, seg.sport), (seg.dst, seg.dport)
    if seg.flags & TCP_SYN:
        return (b, a, "synack") if seg.flags & TCP_ACK else (a, b, "syn")
    if seg.sport < seg.dport:
        return b, a, "port"
    return a, b, "port"


def flows(segments: Iterable[Segment], counts: ParseCounts | None = None) -> list[Flow]:
    """One Flow per TCP connection of the segments (UDP ones are passed
    over), in the order their first segment was captured. Every TCP
    segment belongs to a Flow, so none is counted here; ``counts`` is the
    capture's, as the other steps take it."""
    out: list[Flow] = []
    live: dict[tuple, tuple[Flow, int]] = {}
    for seg in segments:
        if seg.proto != "tcp":
            continue
        key = (seg.src, seg.sport, seg.dst, seg.dport)
        got = live.get(key)
        if got is not None and seg.flags & (TCP_SYN | TCP_ACK) == TCP_SYN and not (
                got[1] == 0 and got[0]._syn_seq == seg.seq):
            got = None    # a new connection on a reused 4-tuple
        if got is None:
            client, server, rule = _client_of(seg)
            flow = Flow(client, server, seg.ts_ns, rule)
            out.append(flow)
            live[(*client, *server)] = (flow, 0)
            live[(*server, *client)] = (flow, 1)
            got = live[key]
        got[0].add(seg, got[1])
    for flow in out:
        for s in flow.streams:
            s.finish(flow.last_ns)
    return out


# ---------------------------------------------------------------- messages

class Message(NamedTuple):
    """One framed message of a Flow's stream. ``offset``/``length``: its
    place in the stream, framing header included (Kafka's 4-byte size, TLS
    records' 5-byte headers). ``first_ns``/``last_ns``: when its first and
    its last new byte appeared. ``segments``: the data segments that carried
    it (first transmissions). ``head``: the captured bytes from its start up
    to the first missing one, at most 64 KiB. ``complete``: the stream
    reaches its end (all of it was on the wire in the capture). ``held_ns``:
    the longest wait between two consecutive segments of it;
    ``held_after_ack``: the segment that ended that wait left within 2 ms of
    a peer ACK of everything sent before it (Nagle's signature)."""

    flow: Flow
    direction: int
    offset: int
    length: int
    first_ns: int | None
    last_ns: int | None
    segments: int
    head: bytes
    complete: bool
    held_ns: int
    held_after_ack: bool


def message_at(flow: Flow, direction: int, offset: int, length: int) -> Message:
    """The Message that spans [offset, offset + length) of a stream."""
    s = flow.streams[direction]
    end = offset + length
    firsts = s.firsts_between(offset, end)
    times = [f[2] for f in firsts]
    held, ended_by = 0, None
    for prev, cur in zip(firsts, firsts[1:]):
        if cur[2] - prev[2] > held:
            held, ended_by = cur[2] - prev[2], cur
    after_ack = ended_by is not None and s.ack_before(ended_by[2], NAGLE_ACK_NS, ended_by[0])
    return Message(flow, direction, offset, length, min(times, default=None), max(times, default=None),
                   len(firsts), s.captured_from(offset, min(length, HEAD_MAX)), end <= s.length, held, after_ack)


def kafka_spans(stream: Stream, counts: ParseCounts | None = None) -> Iterator[tuple[int, int]]:
    """(offset, length) of each size-prefixed Kafka frame of a stream,
    size field included, up to the first that cannot be framed."""
    off = 0
    while off + 4 <= stream.length:
        size = stream.bytes_at(off, 4)
        n = None if size is None else int.from_bytes(size, "big", signed=True)
        if n is None or n < 0 or n > MAX_KAFKA_FRAME:
            if counts is not None:
                counts.skip("lost_framing")
                counts.example(0, "lost_framing", f"at stream offset {off}: "
                               + ("size not captured" if size is None else f"size {n}"))
            return
        yield off, 4 + n
        off += 4 + n


def messages(flow: Flow, framing: str, counts: ParseCounts | None = None) -> Iterator[Message]:
    """The Messages of a Flow framed as ``"kafka"`` (direction 0's then
    direction 1's, each in stream order) or ``"tls"`` (in time order)."""
    if framing == "kafka":
        for d in (0, 1):
            for off, n in kafka_spans(flow.streams[d], counts):
                yield message_at(flow, d, off, n)
    elif framing == "tls":
        for d, off, n in tls.message_spans(flow.streams, counts):
            yield message_at(flow, d, off, n)
    else:
        raise ValueError(f"unknown framing {framing!r}")


def framing_of(flow: Flow) -> str | None:
    """``"tls"``, ``"kafka"`` or None, from the client's first bytes."""
    head = flow.streams[0].captured_from(0, 64)
    if tls.looks_like_tls(head):
        return "tls"
    return "kafka" if kafka.looks_like_request(head) else None
