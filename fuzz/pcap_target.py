"""The fuzz target for capture files: mutated pcap and pcapng records."""
from __future__ import annotations


import json
import random
import struct


from fuzz.common import SEEDS, Failure
from fuzz.mutations import OPS, Mutator
from kdiag.parsers.pcap import PCAP_MAGICS, PcapReader, pcap_byte_order, pcapng_block

_PCAP_TOKENS = [b"\x6b\x64", b"\x45\x00", b"\x08\x00", b"\x81\x00", b"\x02\x00\x00\x00", b"\x0b\x00",
                b"\x03\x03", b"\x12", b"\x14", b"\x00" * 20, b"\xff" * 4]
_PCAP_MAGICS = tuple(PCAP_MAGICS)
_LINKTYPES = (0, 1, 12, 14, 101, 108, 113, 147, 228, 276, 0xFFFF)


def _ng_option(e: str, code: int, val: bytes) -> bytes:
    return struct.pack(e + "HH", code, len(val)) + val + b"\0" * (-len(val) % 4)


def _same_segments(data: bytes) -> None:
    """The compiled capture reader, where built, gives its reference's
    segments and counts."""
    from kdiag.parsers.base import ParseCounts
    from kdiag.parsers.wire.packets import COMPILED, capture_segments

    if not COMPILED:
        return
    got, ref = ParseCounts("wire"), ParseCounts("wire")
    a, b = capture_segments(data, got, compiled=True), capture_segments(data, ref, compiled=False)
    if (a is None) != (b is None) or (a is not None and list(a) != list(b)) or got != ref:
        raise Failure(f"compiled capture reader differs: {got.to_dict()} vs {ref.to_dict()}")


class PcapTarget:
    """Whole capture files: the seeds' records mutated at the byte, packet
    and record level, written back as pcap or as pcapng with random
    interface options."""

    name = "tcp_probe_pcap"

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.files = [(SEEDS / f).read_bytes() for f in ("probes.pcap", "wire.pcap", "probes.pcapng", "kafka.pcap")]
        self.frames: list[tuple[int, bytes]] = []   # (linktype, frame) of every seed record
        for data in self.files[:2]:
            reader = PcapReader(data)
            self.frames += [(reader.header.linktype, rec.frame) for rec in reader]
        self.bytes_m = Mutator(rng, [f for _, f in self.frames], _PCAP_TOKENS, [b"\x00", b"\x08\x00"])

    def _frame(self) -> tuple[int, bytes]:
        r = self.rng
        lt, f = r.choice(self.frames)
        if r.random() < 0.6:
            f = bytearray(f)
            ip = 14 if lt == 1 else 0
            for _ in range(r.randint(1, 3)):
                # IPv4 version/IHL, total length, fragment, protocol, TCP
                # flags/seq, ICMP type and the quoted header.
                pos = r.choice((ip, ip + 2, ip + 3, ip + 6, ip + 7, ip + 9, ip + 20, ip + 24, ip + 25, ip + 33,
                                ip + 28, ip + 29, ip + 36, ip + 45, ip + 48, r.randrange(max(1, len(f)))))
                if pos < len(f):
                    f[pos] = r.choice((0, 1, 2, 3, 4, 6, 11, 0x12, 0x14, 0x45, 0x4F, 0x40, 0x6B, 0xFF,
                                       r.randrange(256)))
            f = bytes(f)
        if r.random() < 0.3:
            f = r.choice(OPS)(self.bytes_m, f)
        if r.random() < 0.1:
            lt = r.choice(_LINKTYPES)
        return lt, f

    def _records(self) -> list[tuple[int, int, bytes]]:
        r = self.rng
        n = r.choice((1, 5, 20, 40, 80))
        t0 = r.choice((0, 1_795_000_000, 2**32 - 1)) * 10**9
        out, ts = [], t0
        for _ in range(n):
            lt, f = self._frame()
            ts += r.choice((0, 1000, 10**6, 10**9))
            out.append((ts, lt, f))
        return out

    def _pcap(self) -> bytes:
        r = self.rng
        recs = self._records()
        magic = r.choice(_PCAP_MAGICS)
        e = pcap_byte_order(magic)
        frac = 1 if magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d") else 1000
        lt = recs[0][1] if r.random() < 0.9 else r.choice(_LINKTYPES)
        out = [magic + struct.pack(e + "HHiIII", 2, 4, 0, 0, 65535, lt)]
        for ts, _lt, f in recs:
            sec, sub = divmod(ts, 10**9)
            incl = len(f)
            if r.random() < 0.02:
                incl = r.choice((0, incl + 1, incl - 1, 2**20, 2**20 + 1, 2**32 - 1)) & 0xFFFFFFFF
            out.append(struct.pack(e + "IIII", sec & 0xFFFFFFFF, (sub // frac) & 0xFFFFFFFF, max(incl, 0), len(f))
                       + f)
        return b"".join(out)

    def _pcapng(self) -> bytes:
        r = self.rng
        e = r.choice(("<", ">"))
        recs = self._records()
        out = [pcapng_block(0x0A0D0D0A, struct.pack(e + "IHHq", 0x1A2B3C4D, 1, 0, -1), e)]
        resol = r.choice((None, 6, 9, 0, 3, 12, 19, 255, 0x80 | 10, 0x80 | 30, 0x80 | 127, 0xFF))
        opts = b""
        if resol is not None:
            opts += _ng_option(e, 9, bytes([resol]))
        if r.random() < 0.3:
            opts += _ng_option(e, 14, struct.pack(e + "q", r.choice((1, -1, -(2**63), 2**63 - 1, 2**40))))
        if r.random() < 0.1:
            opts += struct.pack(e + "HH", r.choice((9, 14, 2)), r.choice((0, 1, 200, 0xFFFF)))
        if opts:
            opts += _ng_option(e, 0, b"")
        linktypes = sorted({lt for _, lt, _ in recs})
        for lt in linktypes:
            out.append(pcapng_block(1, struct.pack(e + "HHI", lt, 0, 65535) + opts, e))
        unit = {None: 1000, 6: 1000, 9: 1, 0: 10**9, 3: 10**6}.get(resol, 1000)
        for ts, lt, f in recs:
            iface = linktypes.index(lt) if r.random() < 0.97 else r.choice((len(linktypes), 2**32 - 1))
            ticks = ts // unit if r.random() < 0.9 else r.choice((0, 2**64 - 1, 2**63))
            caplen = len(f) if r.random() < 0.97 else r.choice((0, len(f) + 1, 2**32 - 1))
            kind = r.random()
            if kind < 0.9:
                body = struct.pack(e + "IIII", iface, ticks >> 32, ticks & 0xFFFFFFFF, caplen) + \
                    struct.pack(e + "I", len(f)) + f
                out.append(pcapng_block(6, body, e))
            elif kind < 0.95:
                body = struct.pack(e + "HHIII", iface & 0xFFFF, 0, ticks >> 32, ticks & 0xFFFFFFFF, caplen) + \
                    struct.pack(e + "I", len(f)) + f
                out.append(pcapng_block(2, body, e))
            else:
                out.append(pcapng_block(r.choice((3, 5, 4, 0x80000001)), struct.pack(e + "I", len(f)) + f, e))
        if r.random() < 0.1:  # a second section, the other byte order
            other = ">" if e == "<" else "<"
            out.append(pcapng_block(0x0A0D0D0A, struct.pack(other + "I", 0x1A2B3C4D) + b"\0" * 12, other))
        return b"".join(out)

    def make_input(self, n: int = 0) -> bytes:
        r = self.rng
        k = r.random()
        if k < 0.4:
            data = self._pcap()
        elif k < 0.8:
            data = self._pcapng()
        else:
            data = r.choice(self.files)
        # Byte-level damage anywhere, headers included.
        for _ in range(r.choice((0, 0, 1, 2, 5))):
            data = r.choice(OPS)(self.bytes_m, data)
        if r.random() < 0.05 and len(data) > 24:
            i = r.randrange(len(data) - 4)
            data = data[:i] + r.choice((b"\xff\xff\xff\xff", b"\x00\x00\x00\x00", b"\x00\x00\x10\x00",
                                        b"\x0c\x00\x00\x00", b"\x0a\x0d\x0d\x0a")) + data[i + 4:]
        return data

    def variant(self, rng):
        return {"brokers": rng.random() < 0.5}

    def run(self, data: bytes, variant: dict | None = None):
        from kdiag.parsers.pcap import looks_like_pcap
        from kdiag.parsers.tcp_probe import PROBES_SCHEMA, parse_pcap, path_table
        from kdiag.parsers.wire.parser import WIRE_CONNECTIONS_SCHEMA, WIRE_REQUESTS_SCHEMA, parse_capture

        looks_like_pcap(data[:12])
        brokers = {("10.203.2.2", 9092): "srv:9092/1"} if (variant or {}).get("brokers") else None
        t, c = parse_pcap(data, brokers=brokers)
        if not t.schema.equals(PROBES_SCHEMA):
            raise Failure("schema differs")
        if c.parsed + c.skipped_total != c.lines or any(v <= 0 for v in c.skipped.values()):
            raise Failure(f"parsed {c.parsed} + skipped {c.skipped_total} != records {c.lines}")
        if t.num_rows > c.parsed:
            raise Failure(f"{t.num_rows} rows for {c.parsed} parsed records")
        json.dumps(c.to_dict())
        path_table(t)
        # The same records read as connections: every record counted once.
        tables, wc, _ = parse_capture(data)
        if not (tables["wire_connections"].schema.equals(WIRE_CONNECTIONS_SCHEMA)
                and tables["wire_requests"].schema.equals(WIRE_REQUESTS_SCHEMA)):
            raise Failure("wire schema differs")
        if wc.parsed + wc.skipped_total != wc.lines or any(v <= 0 for v in wc.skipped.values()):
            raise Failure(f"wire: parsed {wc.parsed} + skipped {wc.skipped_total} != records {wc.lines}")
        _same_segments(data)
        return max(c.lines, 1), c
