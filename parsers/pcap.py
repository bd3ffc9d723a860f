"""Capture files: what their first bytes say (pcap or pcapng, byte order,
tick) and their packet records.

The one place that knows the magic numbers; the probe parser, format
detection, the fuzzer and the pseudonymiser's rewriter all read them here.
"""
from __future__ import annotations

import struct

from kdiag.parsers.base import ParseCounts

# Classic pcap: magic as the writer's byte order laid it down ->
# (struct byte order, nanoseconds per fractional timestamp tick).
PCAP_MAGICS: dict[bytes, tuple[str, int]] = {
    b"\xd4\xc3\xb2\xa1": ("<", 1000),  # microseconds, little-endian writer
    b"\xa1\xb2\xc3\xd4": (">", 1000),
    b"\x4d\x3c\xb2\xa1": ("<", 1),     # nanoseconds
    b"\xa1\xb2\x3c\x4d": (">", 1),
}
# pcapng's section header block type; it reads the same in both byte orders,
# so the byte-order magic at offset 8 tells which one the section uses.
PCAPNG_SHB = b"\x0a\x0d\x0d\x0a"
PCAPNG_BOM = 0x1A2B3C4D
PCAPNG_BYTE_ORDERS: dict[bytes, str] = {
    b"\x4d\x3c\x2b\x1a": "<",
    b"\x1a\x2b\x3c\x4d": ">",
}


def pcap_byte_order(magic: bytes) -> str:
    """``<`` or ``>`` for a classic pcap magic (KeyError for anything else)."""
    return PCAP_MAGICS[bytes(magic[:4])][0]


def pcapng_byte_order(bom: bytes) -> str:
    """``<`` or ``>`` for a section header's byte-order magic; "" if corrupt."""
    return PCAPNG_BYTE_ORDERS.get(bytes(bom[:4]), "")


def looks_like_pcap(head: bytes) -> bool:
    """True for a pcap or pcapng file's first bytes (4 are enough for
    pcap, pcapng's byte-order magic is checked when 12 are given)."""
    head = bytes(head[:12])
    if head[:4] in PCAP_MAGICS:
        return True
    if head[:4] == PCAPNG_SHB:
        return len(head) < 12 or head[8:12] in PCAPNG_BYTE_ORDERS
    return False


def capture_kind(head: bytes) -> str | None:
    """``pcap``, ``pcapng`` (only with its byte-order magic, so 12 bytes are
    needed) or None, from a file's first bytes."""
    head = bytes(head[:12])
    if head[:4] in PCAP_MAGICS:
        return "pcap"
    if head[:4] == PCAPNG_SHB and head[8:12] in PCAPNG_BYTE_ORDERS:
        return "pcapng"
    return None


# ---------------------------------------------------------------- records

# No real capture record is this large (the biggest snaplen is 256 KiB);
# a larger length means the file is corrupt from there on.
_MAX_RECORD = 1 << 20


def _pcap_records(data: bytes, counts: ParseCounts):
    """(ts_ns, linktype, frame) per record; bad structure is counted."""
    endian, mult = PCAP_MAGICS[data[:4]]
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
        if btype == PCAPNG_SHB:
            bom = data[off + 8:off + 12]
            endian = pcapng_byte_order(bom)
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


def capture_records(data: bytes, counts: ParseCounts):
    """(ts_ns, linktype, frame) per packet record of a pcap or pcapng
    file's bytes, bad structure counted; None when it is neither."""
    if data[:4] in PCAP_MAGICS:
        return _pcap_records(data, counts)
    if data[:4] == PCAPNG_SHB:
        return _pcapng_records(data, counts)
    return None
