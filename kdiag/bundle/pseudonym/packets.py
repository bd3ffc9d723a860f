"""The pcap and pcapng rewriter: packets keep their headers with the
addresses replaced and the IP, TCP, UDP and ICMP checksums adjusted (also
those of the datagram an ICMP error quotes); their payloads are cut from
the capture, as a short snaplen would (TLS SNI, certificates or Kafka
metadata in a payload would name hosts). What cannot be vetted is removed
and counted: frames of unknown link types or protocols are cut to their
link header, unknown pcapng blocks are dropped.
"""
from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from kdiag.parsers.pcap import PCAPNG_SHB, PcapngReader, PcapReader, PcapWriter, pcapng_block, pcapng_options

if TYPE_CHECKING:
    from kdiag.bundle.pseudonym.mapping import PseudonymMap
    from kdiag.bundle.pseudonym.scanner import TextScanner

# The section header's block type: its magic, the same in both byte orders.
_SHB_TYPE = int.from_bytes(PCAPNG_SHB, "big")

_ICMP4_ERRORS = (3, 4, 5, 11, 12)
_ICMP6_ERRORS = (1, 2, 3, 4)
# Link-layer types: raw IP, Ethernet, Linux cooked v1/v2, BSD loopback.
_RAW = (101, 12, 14, 228, 229)
_ETHERNET, _NULL, _LOOP, _SLL, _SLL2 = 1, 0, 108, 113, 276
_ET_IPV4, _ET_IPV6, _ET_ARP = 0x0800, 0x86DD, 0x0806


def _osum(b) -> int:
    """Ones'-complement sum of 16-bit big-endian words (odd end padded)."""
    if len(b) % 2:
        b = bytes(b) + b"\0"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def _adjust(ck: int, old, new) -> int:
    """RFC 1624 incremental update of checksum ``ck`` for the change of the
    covered bytes from ``old`` to ``new`` (same length, same alignment).
    Incremental, not recomputed: it is right for a packet cut short by the
    snaplen, and keeps a NIC-offloaded partial checksum what it was."""
    s = (~ck & 0xFFFF) + (~_osum(old) & 0xFFFF) + _osum(new)
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def _fix_ck(buf: bytearray, at: int, limit: int, old, new, udp: bool = False) -> None:
    if at + 2 > limit:
        return   # cut off by the snaplen: nothing to fix
    ck = int.from_bytes(buf[at:at + 2], "big")
    if udp and ck == 0:
        return   # IPv4 UDP without a checksum
    ck = _adjust(ck, old, new)
    if udp and ck == 0:
        ck = 0xFFFF
    buf[at:at + 2] = ck.to_bytes(2, "big")


def _link(lt: int, f: bytearray):
    """(offset of the network header, ethertype), or (None, bytes of
    link header to keep) when the frame is not one this rewrites."""
    def by_version(off):
        if len(f) > off and f[off] >> 4 == 4:
            return off, _ET_IPV4
        if len(f) > off and f[off] >> 4 == 6:
            return off, _ET_IPV6
        return None, 0
    if lt in _RAW:
        return by_version(0)
    if lt == _ETHERNET:
        off = 12
        while len(f) >= off + 2 and f[off:off + 2] in (b"\x81\x00", b"\x88\xa8", b"\x91\x00"):
            off += 4
        et = int.from_bytes(f[off:off + 2], "big") if len(f) >= off + 2 else 0
        return (off + 2, et) if et in (_ET_IPV4, _ET_IPV6, _ET_ARP) else (None, min(len(f), off + 2))
    if lt == _SLL:
        et = int.from_bytes(f[14:16], "big") if len(f) >= 16 else 0
        return (16, et) if et in (_ET_IPV4, _ET_IPV6, _ET_ARP) else (None, min(len(f), 16))
    if lt == _SLL2:
        et = int.from_bytes(f[0:2], "big") if len(f) >= 20 else 0
        return (20, et) if et in (_ET_IPV4, _ET_IPV6, _ET_ARP) else (None, min(len(f), 20))
    if lt in (_NULL, _LOOP):
        if len(f) < 4:
            return None, 0
        fam = {int.from_bytes(f[:4], "little"), int.from_bytes(f[:4], "big")}
        if 2 in fam:
            return 4, _ET_IPV4
        if fam & {10, 24, 28, 30}:
            return 4, _ET_IPV6
        return None, 4
    return None, 0


class PacketRewriter:
    """Rewrites one capture file; ``counts`` (shared by every capture of a
    bundle) gets what was rewritten, cut and dropped."""

    def __init__(self, pseudonym_map: PseudonymMap, scanner: TextScanner, counts: dict,
                 cut_payloads: bool = True) -> None:
        self.map = pseudonym_map
        self.scanner = scanner
        self.cut = cut_payloads
        self.c = counts
        for k in ("rewritten", "cut_to_link_header", "payload_bytes_cut", "dropped_corrupt_tail",
                  "pcapng_blocks_dropped"):
            counts.setdefault(k, 0)

    def _n(self, k: str, v: int = 1) -> None:
        self.c[k] = self.c.get(k, 0) + v

    # -- frames

    def frame(self, linktype: int, frame: bytearray) -> bytearray:
        """The frame with its addresses replaced and its payload cut."""
        off, et = _link(linktype, frame)
        if off is None:
            self._n("cut_to_link_header")
            return frame[:et or 0]
        if et == _ET_ARP:
            end = self._arp(frame, off)
        else:
            end = self._ip(frame, off, len(frame), quoted=False)
        if end is None:
            self._n("cut_to_link_header")
            return frame[:off]
        self._n("rewritten")
        if not self.cut:
            return frame
        if end < len(frame):
            self._n("payload_bytes_cut", len(frame) - end)
        return frame[:end]

    def _arp(self, f: bytearray, off: int) -> int | None:
        # Ethernet/IPv4 ARP only: 6-byte hardware, 4-byte protocol addresses.
        if len(f) < off + 28 or f[off:off + 6] != b"\x00\x01\x08\x00\x06\x04":
            return None
        for at in (off + 14, off + 24):
            f[at:at + 4] = self.map.packed(bytes(f[at:at + 4]))
        return off + 28

    def _ip(self, f: bytearray, off: int, end: int, quoted: bool) -> int | None:
        """Rewrite the IP datagram at f[off:end] in place; returns where the
        kept bytes end (headers only), or None when it is not IP."""
        if end - off < 1:
            return None
        v = f[off] >> 4
        if v == 4:
            return self._ip4(f, off, end, quoted)
        if v == 6:
            return self._ip6(f, off, end, quoted)
        return None

    def _ip4(self, f: bytearray, off: int, end: int, quoted: bool) -> int | None:
        ihl = (f[off] & 0x0F) * 4
        if ihl < 20 or end - off < ihl:
            return None
        old = bytes(f[off + 12:off + 20])
        new = self.map.packed(old[:4]) + self.map.packed(old[4:])
        f[off + 12:off + 20] = new
        _fix_ck(f, off + 10, off + ihl, old, new)
        total = int.from_bytes(f[off + 2:off + 4], "big")
        if total >= ihl:
            end = min(end, off + total)   # Ethernet pads short frames
        proto = f[off + 9]
        frag = int.from_bytes(f[off + 6:off + 8], "big") & 0x1FFF
        t = off + ihl
        if frag:
            return t   # a later fragment: no transport header of its own
        return self._transport(f, proto, t, end, old, new, quoted, icmp6=False)

    def _ip6(self, f: bytearray, off: int, end: int, quoted: bool) -> int | None:
        if end - off < 40:
            return None
        old = bytes(f[off + 8:off + 40])
        new = self.map.packed(old[:16]) + self.map.packed(old[16:])
        f[off + 8:off + 40] = new
        plen = int.from_bytes(f[off + 4:off + 6], "big")
        if plen:
            end = min(end, off + 40 + plen)
        nh, t = f[off + 6], off + 40
        # Hop-by-hop and destination options carry no addresses kdiag's
        # captures use; a routing header lists addresses: cut there.
        while nh in (0, 60, 44, 51):
            if end - t < 8:
                return t
            if nh == 44:
                if int.from_bytes(f[t + 2:t + 4], "big") & 0xFFF8:
                    return t + 8   # a later fragment
                nh, t = f[t], t + 8
            elif nh == 51:
                nh, t = f[t], t + (f[t + 1] + 2) * 4
            else:
                nh, t = f[t], t + (f[t + 1] + 1) * 8
        if t > end:
            return end
        if nh == 43:
            self._n("ipv6_routing_header_cut")
            return t
        return self._transport(f, nh, t, end, old, new, quoted, icmp6=True)

    def _transport(self, f, proto, t, end, old_addrs, new_addrs, quoted, icmp6) -> int:
        """Fix the transport checksum for the new addresses (its pseudo-
        header), rewrite what an ICMP error quotes, and say where the
        headers end."""
        if proto == 6:
            hdr = (f[t + 12] >> 4) * 4 if end - t >= 13 else 20
            _fix_ck(f, t + 16, end, old_addrs, new_addrs)
            return min(end, t + max(hdr, 20))
        if proto == 17:
            _fix_ck(f, t + 6, end, old_addrs, new_addrs, udp=not icmp6)
            return min(end, t + 8)
        if proto in (1, 58):
            return self._icmp(f, proto, t, end, old_addrs, new_addrs, quoted)
        return t

    def _icmp(self, f, proto, t, end, old_addrs, new_addrs, quoted) -> int:
        if end - t < 8:
            return end
        typ = f[t]
        errors = _ICMP6_ERRORS if proto == 58 else _ICMP4_ERRORS
        keep = t + 8
        old_msg = bytes(f[t:end])
        if proto == 1 and typ == 5:
            f[t + 4:t + 8] = self.map.packed(bytes(f[t + 4:t + 8]))   # redirect's gateway
        if typ in errors and not quoted and end - keep >= 1:
            inner = self._ip(f, keep, end, quoted=True)
            keep = inner if inner is not None else keep
        if proto == 58:
            # ICMPv6's checksum covers a pseudo-header with the addresses.
            _fix_ck(f, t + 2, end, old_addrs + old_msg, new_addrs + bytes(f[t:end]))
        else:
            _fix_ck(f, t + 2, end, old_msg, bytes(f[t:end]))
        return keep

    # -- files

    def pcap(self, src, dst) -> None:
        reader = PcapReader(src)
        if reader.header is None:
            return   # nothing but a cut header: nothing kept
        writer = PcapWriter(dst, reader.header)
        for rec in reader:
            writer.write_record(rec._replace(frame=self.frame(reader.header.linktype, bytearray(rec.frame))))
        if reader.stopped:
            self._n("dropped_corrupt_tail")

    def pcapng(self, src, dst) -> None:
        reader = PcapngReader(src)
        ifaces: list[int] = []
        for block in reader:
            if block.btype == _SHB_TYPE:
                ifaces = []
            out = self._block(block.btype, bytearray(block.body), block.byte_order, ifaces)
            if out is None:
                self._n("pcapng_blocks_dropped")
                continue
            dst.write(pcapng_block(block.btype, out, block.byte_order))
        if reader.stopped:
            self._n("dropped_corrupt_tail")

    def _block(self, btype: int, body: bytearray, e: str, ifaces: list[int]) -> bytes | None:
        if btype == _SHB_TYPE:    # section header: the section's length is no longer known
            return bytes(body[:8]) + struct.pack(e + "q", -1) + self._options(body[16:], e, {})
        if btype == 1:            # interface description
            if len(body) < 8:
                return None
            ifaces.append(struct.unpack_from(e + "H", body)[0])
            return bytes(body[:8]) + self._options(body[8:], e, {4: self._opt_v4, 5: self._opt_v6})
        if btype in (6, 2):       # enhanced packet, obsolete packet
            return self._packet_block(btype, body, e, ifaces)
        if btype == 3:            # simple packet
            if len(body) < 4 or not ifaces:
                return None
            orig = struct.unpack_from(e + "I", body)[0]
            pkt = self.frame(ifaces[0], bytearray(body[4:4 + orig]))
            return bytes(body[:4]) + _pad(pkt)
        if btype == 4:            # name resolution: address -> names
            return self._nrb(body, e)
        if btype == 5:            # interface statistics
            return bytes(body[:12]) + self._options(body[12:], e, {})
        return None               # custom, decryption secrets, unknown: may hold anything

    def _packet_block(self, btype: int, body: bytearray, e: str, ifaces: list[int]) -> bytes | None:
        if len(body) < 20:
            return None
        iface = struct.unpack_from(e + ("I" if btype == 6 else "H"), body)[0]
        caplen = struct.unpack_from(e + "I", body, 12)[0]
        if iface >= len(ifaces) or 20 + caplen > len(body):
            return None
        pkt = self.frame(ifaces[iface], bytearray(body[20:20 + caplen]))
        opts = body[20 + caplen + (-caplen % 4):]
        fixed = bytearray(body[:20])
        fixed[12:16] = struct.pack(e + "I", len(pkt))
        # epb_hash (3) is a digest of the original packet: now wrong.
        return bytes(fixed) + _pad(pkt) + self._options(opts, e, {3: None})

    def _opt_v4(self, v: bytes) -> bytes:
        return self.map.packed(v[:4]) + v[4:] if len(v) >= 4 else v

    def _opt_v6(self, v: bytes) -> bytes:
        return self.map.packed(v[:16]) + v[16:] if len(v) >= 16 else v

    def _options(self, opts, e: str, special: dict) -> bytes:
        """Options with strings (comments, names, descriptions, OS) through
        ``rewrite``, those in ``special`` through their function (None: dropped)."""
        out = []
        for code, val in pcapng_options(opts, e):
            if code in special:
                if special[code] is None:
                    continue
                val = special[code](val)
            elif _printable(val):
                val = self.scanner.rewrite(val)
            out.append(struct.pack(e + "HH", code, len(val)) + _pad(val))
        if not out:
            return b""
        return b"".join(out) + struct.pack(e + "HH", 0, 0)

    def _nrb(self, body, e: str) -> bytes:
        out, i = [], 0
        while i + 4 <= len(body):
            rtype, ln = struct.unpack_from(e + "HH", body, i)
            val = bytes(body[i + 4:i + 4 + ln])
            i += 4 + ln + (-ln % 4)
            if rtype == 0:
                break
            alen = {1: 4, 2: 16}.get(rtype)
            if alen is None or len(val) < alen:
                continue
            names = [n for n in val[alen:].split(b"\0") if n]
            names = [self.map.hostname(n.decode("utf-8", "replace")).encode() for n in names]
            val = self.map.packed(val[:alen]) + b"".join(n + b"\0" for n in names)
            out.append(struct.pack(e + "HH", rtype, len(val)) + _pad(val))
        return b"".join(out) + struct.pack(e + "HH", 0, 0) + self._options(body[i:], e, {})


def _pad(b: bytes) -> bytes:
    return bytes(b) + b"\0" * (-len(b) % 4)


def _printable(v: bytes) -> bool:
    try:
        v.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return b"\0" not in v.rstrip(b"\0")
