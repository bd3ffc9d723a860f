"""Capture records -> TCP and UDP segments: the one link-layer and IP reader.

``capture_segments(data, counts)`` reads a capture file's bytes to segments:
in compiled code (parsers/_wire.c, built by pip with the system's C
compiler) where it was built, else here, by
``segments(capture_records(data, counts), counts)``: the reference the tests
hold the compiled reader to, segment for segment and count for count.

``segments(records, counts)`` takes the ``(ts_ns, linktype, frame)`` records
``kdiag.parsers.pcap.capture_records`` yields and gives one ``Segment`` per
TCP or UDP packet. ``network_offset`` is the link layer alone (the probe
parser, kdiag.parsers.tcp_probe, reads its IPv4 packets through it too).

Link types (tcpdump.org/linktypes.html): NULL (0, BSD loopback, the address
family in the writer's byte order) and LOOP (108, in network order), with
AF_INET 2 and AF_INET6 10 (Linux), 24, 28 or 30 (the BSDs, macOS); Ethernet
(1) with any number of 802.1Q / 802.1ad (QinQ) tags; RAW (101, and 12, 14 as
some BSDs number it), IPV4 (228), IPV6 (229); Linux cooked capture, what
``tcpdump -i any`` writes: SLL (113, 16-byte header, protocol at byte 14)
and SLL2 (276, 20-byte header, protocol at byte 0).

IPv4: options skipped by the header length; fragments are counted and
skipped (none of kdiag's protocols needs one reassembled). IPv6: extension
headers (hop-by-hop, routing, destination options, authentication) walked,
at most ``MAX_IPV6_HEADERS`` of them; a fragment header is a fragment.

The payload length is the wire's, from the IP total length (minus the IP and
TCP headers), which a snaplen may have cut: ``data`` holds what was captured
and may be shorter. A total length of 0 (a TSO super-packet captured before
the card split it, as some drivers hand it to the capture) falls back to
what was captured. Ethernet's padding of short frames is cut off by the
same total length.

Skip reasons, each counted in ``ParseCounts`` (one per record; a record that
gives a segment counts as ``parsed``), besides the file's own (``truncated``,
``corrupt``, ``malformed``, ``no_timestamp``, kdiag.parsers.pcap):

- ``unsupported_link``: a link type not listed above;
- ``not_ip``: a frame of another protocol (ARP, LLDP, ...);
- ``cut_short``: the captured bytes end before the headers needed (link,
  IP, or the TCP/UDP header's first 20/8 bytes);
- ``bad_ip``: an IP header that contradicts itself (a header length under
  20 or over the total length, an unknown version, extension headers past
  the bound);
- ``bad_tcp``: a TCP data offset under 20 or past the IP payload;
- ``fragment``: an IPv4 fragment or an IPv6 packet with a fragment header;
- ``other_transport``: ICMP, SCTP, ... anything but TCP and UDP.
"""
from __future__ import annotations

import socket
import struct
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from kdiag.parsers.base import ParseCounts
from kdiag.parsers.pcap import PCAP_MAGICS, PCAPNG_SHB, capture_records

try:
    from kdiag.parsers import _wire
except ImportError:   # no compiler where kdiag was installed: the reference here runs
    _wire = None

COMPILED = _wire is not None

# Link-layer types (tcpdump.org/linktypes.html).
LINKTYPE_NULL, LINKTYPE_ETHERNET, LINKTYPE_RAW, LINKTYPE_LOOP = 0, 1, 101, 108
LINKTYPE_LINUX_SLL, LINKTYPE_IPV4, LINKTYPE_IPV6, LINKTYPE_LINUX_SLL2 = 113, 228, 229, 276
RAW_TYPES = frozenset((LINKTYPE_RAW, 12, 14, LINKTYPE_IPV4, LINKTYPE_IPV6))  # 12, 14: DLT_RAW on some BSDs

ETH_IPV4, ETH_IPV6 = 0x0800, 0x86DD
_ETH_TAGS = (0x8100, 0x88A8, 0x9100)  # 802.1Q, 802.1ad, the pre-standard QinQ tag
# NULL/LOOP's 4-byte family, in either byte order: AF_INET is 2 everywhere;
# AF_INET6 is 10 on Linux, 24 (NetBSD, OpenBSD), 28 (FreeBSD), 30 (macOS).
_NULL_FAMILIES = frozenset(
    v.to_bytes(4, order) for v in (2, 10, 24, 28, 30) for order in ("little", "big"))

TCP_FIN, TCP_SYN, TCP_RST, TCP_PSH, TCP_ACK, TCP_URG, TCP_ECE, TCP_CWR = 1, 2, 4, 8, 16, 32, 64, 128
IPPROTO_TCP, IPPROTO_UDP = 6, 17
# IPv6 extension headers walked to the transport: hop-by-hop, routing,
# destination options (length in 8-byte units past the first 8), and AH (in
# 4-byte units past the first 8); 44 is the fragment header.
_IPV6_EXT = frozenset((0, 43, 60, 51))
_IPV6_FRAGMENT = 44
MAX_IPV6_HEADERS = 8


class Segment(NamedTuple):
    """One TCP or UDP packet. ``window`` is the header's, not scaled;
    ``wscale``, ``mss``, ``sack_ok`` are the options a SYN carries (None /
    False on others); ``tsval``/``tsecr`` the timestamps option (None when
    absent). For UDP: seq, ack, flags, window are 0."""

    ts_ns: int
    src: str
    sport: int
    dst: str
    dport: int
    proto: str          # "tcp" or "udp"
    seq: int
    ack: int
    flags: int
    window: int
    wscale: int | None
    payload_len: int    # the wire's, from the IP length
    data: bytes         # the payload captured: may be shorter than payload_len
    mss: int | None = None
    sack_ok: bool = False
    tsval: int | None = None
    tsecr: int | None = None


def network_offset(linktype: int, frame: bytes) -> int | str:
    """Where the IP header starts in a frame, or the skip reason:
    ``unsupported_link``, ``not_ip``, ``cut_short``. For the raw link types
    the IP version is the IP reader's to check."""
    if linktype == LINKTYPE_ETHERNET:
        off = 12
        while frame[off:off + 2] in (b"\x81\x00", b"\x88\xa8", b"\x91\x00"):
            off += 4
        if len(frame) < off + 2:
            return "cut_short"
        return off + 2 if int.from_bytes(frame[off:off + 2], "big") in (ETH_IPV4, ETH_IPV6) else "not_ip"
    if linktype in (LINKTYPE_NULL, LINKTYPE_LOOP):
        if len(frame) < 4:
            return "cut_short"
        return 4 if frame[:4] in _NULL_FAMILIES else "not_ip"
    if linktype in RAW_TYPES:
        return 0
    if linktype == LINKTYPE_LINUX_SLL:
        if len(frame) < 16:
            return "cut_short"
        return 16 if int.from_bytes(frame[14:16], "big") in (ETH_IPV4, ETH_IPV6) else "not_ip"
    if linktype == LINKTYPE_LINUX_SLL2:
        if len(frame) < 20:
            return "cut_short"
        return 20 if int.from_bytes(frame[0:2], "big") in (ETH_IPV4, ETH_IPV6) else "not_ip"
    return "unsupported_link"


class _Names(dict):
    """Addresses as text, each converted once (a capture has few): a
    lookup that hits costs no call."""

    def __missing__(self, raw: bytes) -> str:
        if len(self) > 65536:  # a capture of a scan: stay bounded
            self.clear()
        name = self[raw] = socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, raw)
        return name


def _ipv6_transport(frame: bytes, off: int) -> tuple[int, int, int] | str:
    """(transport protocol, its offset, the IP payload's end on the wire)
    of an IPv6 packet at ``off``, or the skip reason."""
    plen = int.from_bytes(frame[off + 4:off + 6], "big")
    # 0: a jumbogram or a TSO super-packet; what was captured is all there is.
    end = off + 40 + plen if plen else len(frame)
    nxt, at = frame[off + 6], off + 40
    for _ in range(MAX_IPV6_HEADERS):
        if nxt == _IPV6_FRAGMENT:
            return "fragment"
        if nxt not in _IPV6_EXT:
            return nxt, at, end
        if len(frame) < at + 2:
            return "cut_short"
        size = (frame[at + 1] + 2) * 4 if nxt == 51 else (frame[at + 1] + 1) * 8
        nxt, at = frame[at], at + size
        if at > end:
            return "bad_ip"
    return "bad_ip"


def _ip_transport(frame: bytes, off: int) -> tuple[int, bytes, bytes, int, int] | str:
    """(protocol, source, destination, transport offset, payload end on the
    wire) of the IP packet at ``off``, or the skip reason."""
    if len(frame) < off + 20:
        return "cut_short"
    ver = frame[off] >> 4
    if ver == 4:
        ihl = (frame[off] & 0x0F) * 4
        total = int.from_bytes(frame[off + 2:off + 4], "big")
        if total == 0:
            total = len(frame) - off
        if ihl < 20 or total < ihl:
            return "bad_ip"
        if int.from_bytes(frame[off + 6:off + 8], "big") & 0x3FFF:  # MF or an offset
            return "fragment"
        return frame[off + 9], frame[off + 12:off + 16], frame[off + 16:off + 20], off + ihl, off + total
    if ver == 6:
        if len(frame) < off + 40:
            return "cut_short"
        got = _ipv6_transport(frame, off)
        if isinstance(got, str):
            return got
        return got[0], frame[off + 8:off + 24], frame[off + 24:off + 40], got[1], got[2]
    return "bad_ip"


_TCP = struct.Struct("!HHIIBBH")


def _tcp_options(opts: bytes) -> tuple[int | None, int | None, bool, int | None, int | None]:
    """(mss, wscale, sack_ok, tsval, tsecr) from the options' bytes; a cut
    or lying option ends the walk (what came before it stands)."""
    mss = wscale = tsval = tsecr = None
    sack_ok = False
    i, n = 0, len(opts)
    while i < n:
        kind = opts[i]
        if kind == 0:
            break
        if kind == 1:
            i += 1
            continue
        if i + 1 >= n:
            break
        ln = opts[i + 1]
        if ln < 2 or i + ln > n:
            break
        if kind == 2 and ln == 4:
            mss = int.from_bytes(opts[i + 2:i + 4], "big")
        elif kind == 3 and ln == 3:
            wscale = min(opts[i + 2], 14)  # RFC 7323: larger values are taken as 14
        elif kind == 4:
            sack_ok = True
        elif kind == 8 and ln == 10:
            tsval, tsecr = struct.unpack_from("!II", opts, i + 2)
        i += ln
    return mss, wscale, sack_ok, tsval, tsecr


# Linux's options on every segment past the SYN: NOP, NOP, timestamps.
_NOP_NOP_TS = b"\x01\x01\x08\x0a"


def _tcp_segment(ts: int, frame: bytes, at: int, end: int, src: str, dst: str) -> Segment | str:
    if len(frame) < at + 20:
        return "cut_short"
    sport, dport, seq, ack, doff, flags, window = _TCP.unpack_from(frame, at)
    thl = (doff >> 4) * 4
    if thl < 20 or at + thl > end:
        return "bad_tcp"
    mss = wscale = tsval = tsecr = None
    sack_ok = False
    if thl > 20:
        if thl == 32 and frame[at + 20:at + 24] == _NOP_NOP_TS:
            if len(frame) >= at + 32:
                tsval, tsecr = struct.unpack_from("!II", frame, at + 24)
        else:
            mss, wscale, sack_ok, tsval, tsecr = _tcp_options(frame[at + 20:min(at + thl, len(frame))])
    return Segment(ts, src, sport, dst, dport, "tcp", seq, ack, flags, window, wscale,
                   end - at - thl, frame[at + thl:end], mss, sack_ok, tsval, tsecr)


def _udp_segment(ts: int, frame: bytes, at: int, end: int, src: str, dst: str) -> Segment | str:
    if len(frame) < at + 8:
        return "cut_short"
    sport, dport = struct.unpack_from("!HH", frame, at)
    return Segment(ts, src, sport, dst, dport, "udp", 0, 0, 0, 0, None, max(end - at - 8, 0), frame[at + 8:end])


def segment_of(ts_ns: int, linktype: int, frame: bytes, names=None) -> Segment | str:
    """The Segment of one capture record, or why there is none."""
    off = network_offset(linktype, frame)
    if isinstance(off, str):
        return off
    got = _ip_transport(frame, off)
    if isinstance(got, str):
        return got
    proto, src, dst, at, end = got
    names = _Names() if names is None else names
    if proto == IPPROTO_TCP:
        return _tcp_segment(ts_ns, frame, at, end, names[src], names[dst])
    if proto == IPPROTO_UDP:
        return _udp_segment(ts_ns, frame, at, end, names[src], names[dst])
    return "other_transport"


# The commonest packet read in one step: link types whose IPv4 header sits
# at a fixed offset -> (that offset, where the link says IPv4, what it says).
_FAST_LINKS = {
    LINKTYPE_ETHERNET: (14, 12, b"\x08\x00"), LINKTYPE_LINUX_SLL: (16, 14, b"\x08\x00"),
    LINKTYPE_LINUX_SLL2: (20, 0, b"\x08\x00"), LINKTYPE_NULL: (4, 0, b"\x02\x00\x00\x00"),
    LINKTYPE_LOOP: (4, 0, b"\x00\x00\x00\x02"), LINKTYPE_RAW: (0, 0, b"\x45"), LINKTYPE_IPV4: (0, 0, b"\x45"),
}
# version and header length, total length, flags and fragment offset,
# protocol, addresses
_IPV4 = struct.Struct("!BxH2xHxB2x4s4s")
_TS = struct.Struct("!II")


def _fast_tcp4(ts: int, frame: bytes, off: int, names: _Names) -> Segment | None:
    """The Segment of an IPv4 packet without options holding a TCP segment
    with no options or Linux's timestamps alone; None for anything else,
    which the general path (segment_of) then reads. Same result as it."""
    if len(frame) < off + 40:
        return None
    vihl, total, frag, proto, src, dst = _IPV4.unpack_from(frame, off)
    if vihl != 0x45 or proto != IPPROTO_TCP or frag & 0x3FFF or total < 40:
        return None
    at = off + 20
    sport, dport, seq, ack, doff, flags, window = _TCP.unpack_from(frame, at)
    tsval = tsecr = None
    if doff == 0x80 and frame[at + 20:at + 24] == _NOP_NOP_TS and len(frame) >= at + 32:
        tsval, tsecr = _TS.unpack_from(frame, at + 24)
    elif doff != 0x50:
        return None
    thl = (doff >> 4) * 4
    end = off + total
    if at + thl > end:
        return None
    return Segment(ts, names[src], sport, names[dst], dport, "tcp", seq, ack, flags, window, None,
                   end - at - thl, frame[at + thl:end], None, False, tsval, tsecr)


def segments(records: Iterable[tuple[int, int, bytes]], counts: ParseCounts) -> Iterator[Segment]:
    """One Segment per TCP or UDP packet of the records, in capture order;
    every other record counted by its reason (a few kept as examples)."""
    names = _Names()
    fast = _FAST_LINKS
    for ts, linktype, frame in records:
        link = fast.get(linktype)
        seg = None
        if link is not None and frame[link[1]:link[1] + len(link[2])] == link[2]:
            seg = _fast_tcp4(ts, frame, link[0], names)
        if seg is None:
            seg = segment_of(ts, linktype, frame, names)
        if isinstance(seg, str):
            counts.skip(seg)
            if seg not in ("other_transport", "not_ip", "fragment"):
                counts.example(counts.lines, seg, bytes(frame[:64]).hex())
            continue
        counts.parsed += 1
        yield seg


def capture_segments(data: bytes, counts: ParseCounts, compiled: bool | None = None) -> Iterator[Segment] | None:
    """One Segment per TCP or UDP packet of a pcap or pcapng file's bytes,
    everything else counted as ``segments`` and ``capture_records`` count
    it; None when the bytes are neither. ``compiled``: the compiled reader
    (None: where it was built), False the reference. The compiled one adds
    to ``counts.lines`` and ``counts.parsed`` before each skip it counts
    and when the capture ends, not at every packet."""
    if compiled is None:
        compiled = COMPILED
    elif compiled and not COMPILED:
        raise RuntimeError("kdiag's compiled capture reader was not built (no C compiler when it was installed)")
    if not compiled:
        records = capture_records(data, counts)
        return None if records is None else segments(records, counts)
    if data[:4] not in PCAP_MAGICS and data[:4] != PCAPNG_SHB:
        return None
    return _wire.segments(data, Segment, counts)
