"""Capture files: what their first bytes say (pcap or pcapng, byte order,
tick), their records read and written.

The one place that knows the file formats: the probe parser, format
detection, the fuzzer, the probe collector's capture and the pseudonymiser's
rewriter all read and write them here.

A capture is untrusted input: every length in it is checked against the
largest record a capture has (a longer one is "corrupt") and against what the
file still holds (a record that claims more is "truncated"). A reader stops
at the first such record and says why (``stopped``); nothing past it is
guessed at, and no length is allocated before it is checked.

Why kdiag's own reader and writer and not a library's (measured with
scapy 2.8.0 and dpkt 1.9.8 on the project's 2-core machine, three runs of
``python -X importtime``): importing scapy.utils takes 0.3-0.45 s, dpkt
0.06-0.23 s, this module 0.02-0.05 s, for a format of two fixed headers. And
neither tells a record cut by the file's end from a whole one (scapy logs a
warning and yields the cut bytes, dpkt yields them silently) nor stops at a
bogus length, and those are what the parsers count. scapy stays the probe's
packet builder and the tests' second implementation.
"""
from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from typing import BinaryIO, Iterator, NamedTuple

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
MAX_RECORD = 1 << 20
# pcapng block types kdiag reads.
PCAPNG_IDB, PCAPNG_OPB, PCAPNG_SPB, PCAPNG_EPB = 1, 2, 3, 6
_SHB_TYPE = int.from_bytes(PCAPNG_SHB, "big")
_MAGIC_OF = {value: magic for magic, value in PCAP_MAGICS.items()}


class _Bounded:
    """Reads of a stream or bytes that say where they stopped and why."""

    def __init__(self, src: BinaryIO | bytes | bytearray | memoryview):
        self._src = io.BytesIO(src) if isinstance(src, (bytes, bytearray, memoryview)) else src
        self.offset = 0
        # None while the file reads whole; else "truncated" (it ends inside a
        # record) or "corrupt" (a length no capture has), and what was wrong.
        self.stopped: str | None = None
        self.problem: str | None = None

    def _read(self, n: int) -> bytes:
        b = self._src.read(n)
        self.offset += len(b)
        return b

    def _stop(self, why: str, problem: str) -> None:
        self.stopped, self.problem = why, problem


@dataclass(frozen=True)
class PcapHeader:
    """A classic pcap file's header."""

    linktype: int
    tick_ns: int = 1             # 1: nanosecond timestamps; 1000: microsecond
    byte_order: str = "<"
    snaplen: int = 65535
    version: tuple[int, int] = (2, 4)
    thiszone: int = 0
    sigfigs: int = 0
    fcs: int = 0                 # the link-type field's upper 16 bits

    SIZE = 24

    @classmethod
    def unpack(cls, head: bytes) -> PcapHeader:
        """From a file's first 24 bytes (KeyError if not a pcap magic)."""
        endian, tick = PCAP_MAGICS[bytes(head[:4])]
        major, minor, zone, sigfigs, snaplen, link = struct.unpack_from(endian + "HHiIII", head, 4)
        return cls(link & 0xFFFF, tick, endian, snaplen, (major, minor), zone, sigfigs, link >> 16)

    def pack(self) -> bytes:
        return _MAGIC_OF[(self.byte_order, self.tick_ns)] + struct.pack(
            self.byte_order + "HHiIII", *self.version, self.thiszone, self.sigfigs, self.snaplen,
            self.linktype | self.fcs << 16)


class PcapRecord(NamedTuple):
    """One packet record: its timestamp as written (seconds and ticks), the
    packet's length on the wire and the bytes captured."""

    sec: int
    frac: int
    orig_len: int
    frame: bytes


class PcapReader(_Bounded):
    """The records of a classic pcap stream or bytes. ``header`` is None when
    the file ends inside it (``stopped`` then says "truncated")."""

    def __init__(self, src: BinaryIO | bytes | bytearray | memoryview):
        super().__init__(src)
        head = self._read(PcapHeader.SIZE)
        if bytes(head[:4]) not in PCAP_MAGICS:
            raise ValueError("not a pcap file")
        self.header: PcapHeader | None = None
        if len(head) < PcapHeader.SIZE:
            self._stop("truncated", f"the file ends at byte {len(head)}, inside its header")
        else:
            self.header = PcapHeader.unpack(head)

    def ts_ns(self, rec: PcapRecord) -> int:
        return rec.sec * 1_000_000_000 + rec.frac * self.header.tick_ns

    def __iter__(self) -> Iterator[PcapRecord]:
        if self.header is None:
            return
        rec = struct.Struct(self.header.byte_order + "IIII")
        while True:
            at = self.offset
            rh = self._read(16)
            if not rh:
                return
            if len(rh) < 16:
                self._stop("truncated", f"the file ends inside the record header at byte {at}")
                return
            sec, frac, incl, orig = rec.unpack(rh)
            if incl > MAX_RECORD:
                self._stop("corrupt", f"record at byte {at} claims {incl} bytes")
                return
            frame = self._read(incl)
            if len(frame) < incl:
                self._stop("truncated", f"record at byte {at} claims {incl} bytes, the file holds {len(frame)}")
                return
            yield PcapRecord(sec, frac, orig, frame)


class PcapWriter:
    """Writes a classic pcap to ``dst`` (which stays the caller's to close)."""

    def __init__(self, dst: BinaryIO, header: PcapHeader):
        self._dst = dst
        self.header = header
        self._rec = struct.Struct(header.byte_order + "IIII")
        dst.write(header.pack())

    def write(self, ts_ns: int, frame: bytes, orig_len: int | None = None) -> None:
        sec, ns = divmod(ts_ns, 1_000_000_000)
        self.write_record(PcapRecord(sec, ns // self.header.tick_ns, len(frame) if orig_len is None else orig_len,
                                     frame))

    def write_record(self, rec: PcapRecord) -> None:
        self._dst.write(self._rec.pack(rec.sec, rec.frac, len(rec.frame), rec.orig_len))
        self._dst.write(rec.frame)


class PcapngBlock(NamedTuple):
    """One pcapng block: its type, the bytes between its two lengths, and its
    section's byte order."""

    btype: int
    body: bytes
    byte_order: str


class PcapngReader(_Bounded):
    """The blocks of a pcapng stream or bytes, every section's."""

    def __iter__(self) -> Iterator[PcapngBlock]:
        endian = "<"
        while True:
            at = self.offset
            head = self._read(8)
            if not head:
                return
            if head[:4] == PCAPNG_SHB:
                head += self._read(4)
            if len(head) < (12 if head[:4] == PCAPNG_SHB else 8):
                self._stop("truncated", f"the file ends inside the block header at byte {at}")
                return
            if head[:4] == PCAPNG_SHB:
                endian = pcapng_byte_order(head[8:12])
                if not endian:
                    self._stop("corrupt", f"section at byte {at} has no byte-order magic")
                    return
            btype, blen = struct.unpack_from(endian + "II", head)
            if blen < 12 or blen % 4 or blen > MAX_RECORD + 64:
                self._stop("corrupt", f"block at byte {at} claims {blen} bytes")
                return
            rest = self._read(blen - len(head))
            if len(rest) < blen - len(head):
                self._stop("truncated", f"block at byte {at} claims {blen} bytes, the file holds "
                                        f"{len(head) + len(rest)}")
                return
            yield PcapngBlock(btype, (head + rest)[8:-4], endian)


def pcapng_options(opts: bytes, byte_order: str) -> Iterator[tuple[int, bytes]]:
    """(code, value) of each option of a block, up to the end-of-options
    one; a value that claims more than the block holds is cut to it."""
    i = 0
    while i + 4 <= len(opts):
        code, ln = struct.unpack_from(byte_order + "HH", opts, i)
        if code == 0:
            return
        yield code, bytes(opts[i + 4:i + 4 + ln])
        i += 4 + ln + (-ln % 4)


def pcapng_block(btype: int, body: bytes, byte_order: str) -> bytes:
    """One block's bytes; ``body`` padded to 4 bytes as pcapng requires."""
    body = bytes(body) + b"\0" * (-len(body) % 4)
    n = 12 + len(body)
    return struct.pack(byte_order + "II", btype, n) + body + struct.pack(byte_order + "I", n)


# ---------------------------------------------------------------- packets

def _pcapng_tsresol(opts: bytes, endian: str) -> tuple[tuple[int, int], int]:
    """(if_tsresol as (base, exponent), if_tsoffset seconds) from IDB options."""
    resol, offset = (10, 6), 0
    for code, val in pcapng_options(opts, endian):
        if code == 9 and len(val) >= 1:
            resol = (2, val[0] & 0x7F) if val[0] & 0x80 else (10, val[0])
        elif code == 14 and len(val) >= 8:
            offset = struct.unpack_from(endian + "q", val)[0]
    return resol, offset


def _ticks_to_ns(ticks: int, resol: tuple[int, int]) -> int:
    base, exp = resol
    if base == 2:
        return (ticks * 1_000_000_000) >> exp
    return ticks * 10 ** (9 - exp) if exp <= 9 else ticks // 10 ** (exp - 9)


def _pcap_packets(reader: PcapReader, counts: ParseCounts):
    for rec in reader:
        counts.lines += 1
        yield reader.ts_ns(rec), reader.header.linktype, rec.frame


def _pcapng_packet(block: PcapngBlock, ifaces: list, counts: ParseCounts):
    """(ts_ns, linktype, frame) of an enhanced or obsolete packet block, or
    None (counted) when it names no interface or overruns itself."""
    body, endian = block.body, block.byte_order
    if len(body) < 20:
        counts.skip("malformed")
        return None
    if block.btype == PCAPNG_EPB:
        iface, hi, lo, caplen = struct.unpack_from(endian + "IIII", body)
    else:
        iface, _drops, hi, lo, caplen = struct.unpack_from(endian + "HHIII", body)
    if iface >= len(ifaces) or 20 + caplen > len(body):
        counts.skip("malformed")
        return None
    lt, resol, tsoff = ifaces[iface]
    return _ticks_to_ns((hi << 32) | lo, resol) + tsoff * 1_000_000_000, lt, body[20:20 + caplen]


def _pcapng_packets(reader: PcapngReader, counts: ParseCounts):
    ifaces: list[tuple[int, tuple[int, int], int]] = []  # (linktype, tsresol, tsoffset)
    for block in reader:
        if block.btype == _SHB_TYPE:
            ifaces = []
        elif block.btype == PCAPNG_IDB:
            if len(block.body) >= 8:
                resol, tsoff = _pcapng_tsresol(block.body[8:], block.byte_order)
                ifaces.append((struct.unpack_from(block.byte_order + "H", block.body)[0], resol, tsoff))
        elif block.btype in (PCAPNG_EPB, PCAPNG_OPB):
            counts.lines += 1
            packet = _pcapng_packet(block, ifaces, counts)
            if packet is not None:
                yield packet
        elif block.btype == PCAPNG_SPB:  # no timestamp, no use for RTTs
            counts.lines += 1
            counts.skip("no_timestamp")


def _counted(reader: _Bounded, packets, counts: ParseCounts):
    yield from packets
    if reader.stopped:
        counts.lines += 1
        counts.skip(reader.stopped)
        if reader.stopped == "corrupt":
            counts.example(counts.lines, "corrupt", reader.problem)


def capture_records(data: bytes, counts: ParseCounts):
    """(ts_ns, linktype, frame) per packet record of a pcap or pcapng
    file's bytes, bad structure counted; None when it is neither."""
    if data[:4] in PCAP_MAGICS:
        reader = PcapReader(data)
        return _counted(reader, _pcap_packets(reader, counts), counts)
    if data[:4] == PCAPNG_SHB:
        reader = PcapngReader(data)
        return _counted(reader, _pcapng_packets(reader, counts), counts)
    return None
