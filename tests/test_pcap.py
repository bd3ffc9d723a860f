"""kdiag's one pcap reader and writer: what it writes reads back, in both byte
orders and both ticks, and a file cut short or lying about a length stops
the reader with a reason instead of being trusted."""
import io
import struct

import pytest

from kdiag.parsers.base import ParseCounts
from kdiag.parsers.pcap import (
    MAX_RECORD, PCAPNG_EPB, PCAPNG_IDB, PCAPNG_SHB, PcapHeader, PcapngReader, PcapReader, PcapWriter,
    capture_kind, capture_records, pcapng_block, pcapng_options,
)

FRAMES = [b"\x45" + bytes(range(39)), b"", b"\x60" + b"x" * 1499]
TS_NS = [1_700_000_000_123_456_789, 1_700_000_001_000_000_000, 5]


def _pcap(header: PcapHeader, frames=FRAMES, stamps=TS_NS) -> bytes:
    out = io.BytesIO()
    w = PcapWriter(out, header)
    for ts, f in zip(stamps, frames):
        w.write(ts, f)
    return out.getvalue()


@pytest.mark.parametrize("byte_order", ["<", ">"])
@pytest.mark.parametrize("tick_ns", [1, 1000])
def test_what_it_writes_reads_back(byte_order, tick_ns):
    header = PcapHeader(101, tick_ns=tick_ns, byte_order=byte_order, snaplen=262144, fcs=0x1234)
    data = _pcap(header)
    assert capture_kind(data) == "pcap"
    r = PcapReader(data)
    assert r.header == header
    recs = list(r)
    assert r.stopped is None
    assert [x.frame for x in recs] == FRAMES
    assert [x.orig_len for x in recs] == [len(f) for f in FRAMES]
    # A microsecond file keeps what its tick holds.
    assert [r.ts_ns(x) for x in recs] == [ts - ts % tick_ns for ts in TS_NS]
    # The header is laid out as libpcap's: magic in the writer's byte order.
    magic = struct.unpack(byte_order + "I", data[:4])[0]
    assert magic == (0xA1B23C4D if tick_ns == 1 else 0xA1B2C3D4)
    assert struct.unpack_from(byte_order + "I", data, 20)[0] == 101 | 0x1234 << 16


def test_a_stream_reads_as_its_bytes(tmp_path):
    data = _pcap(PcapHeader(1))
    (tmp_path / "c.pcap").write_bytes(data)
    with open(tmp_path / "c.pcap", "rb") as f:
        assert list(PcapReader(f)) == list(PcapReader(data))


def test_a_record_rewritten_as_read_keeps_its_bytes():
    data = _pcap(PcapHeader(101, tick_ns=1000, byte_order=">"))
    r = PcapReader(data)
    out = io.BytesIO()
    w = PcapWriter(out, r.header)
    for rec in r:
        w.write_record(rec)
    assert out.getvalue() == data


def test_scapy_reads_what_it_writes(tmp_path):
    """A second implementation of the format."""
    from scapy.utils import RawPcapReader

    path = tmp_path / "c.pcap"
    path.write_bytes(_pcap(PcapHeader(101, tick_ns=1)))
    got = [(bytes(pkt), meta.sec, meta.usec) for pkt, meta in RawPcapReader(str(path))]
    assert got == [(f, ts // 10**9, ts % 10**9) for ts, f in zip(TS_NS, FRAMES)]


def test_every_cut_stops_at_the_last_whole_record():
    data = _pcap(PcapHeader(101))
    ends = [24]
    for f in FRAMES:
        ends.append(ends[-1] + 16 + len(f))
    for n in range(len(data) + 1):
        if n < 4:
            with pytest.raises(ValueError):
                PcapReader(data[:n])
            continue
        r = PcapReader(data[:n])
        recs = list(r)
        whole = sum(1 for e in ends[1:] if e <= n)
        assert [x.frame for x in recs] == FRAMES[:whole], n
        assert r.stopped == (None if n in ends else "truncated"), n
        assert (r.header is None) == (n < 24)


def test_a_record_longer_than_the_file_is_truncated_never_trusted():
    data = _pcap(PcapHeader(101), FRAMES[:1], TS_NS[:1])
    data += struct.pack("<IIII", 1, 2, 1000, 1000) + b"only this"
    r = PcapReader(data)
    assert [x.frame for x in r] == FRAMES[:1]
    assert r.stopped == "truncated" and "claims 1000 bytes, the file holds 9" in r.problem


def test_a_bogus_length_is_corrupt_and_nothing_past_it_is_read():
    data = _pcap(PcapHeader(101), FRAMES[:1], TS_NS[:1])
    data += struct.pack("<IIII", 1, 2, 0xFFFFFFF0, 60) + bytes(60) + _pcap(PcapHeader(101))[24:]
    r = PcapReader(data)
    assert [x.frame for x in r] == FRAMES[:1]
    assert r.stopped == "corrupt" and f"claims {0xFFFFFFF0} bytes" in r.problem
    # MAX_RECORD itself is a length a capture may have.
    ok = _pcap(PcapHeader(101), [bytes(MAX_RECORD)], [0])
    assert [len(x.frame) for x in PcapReader(ok)] == [MAX_RECORD]


def test_the_parsers_count_what_the_reader_stopped_at():
    data = _pcap(PcapHeader(101))
    counts = ParseCounts("t")
    assert len(list(capture_records(data[:-5], counts))) == 2
    assert counts.lines == 3 and counts.skipped == {"truncated": 1}
    counts = ParseCounts("t")
    bogus = data[:24] + struct.pack("<IIII", 0, 0, MAX_RECORD + 1, 0)
    assert list(capture_records(bogus, counts)) == []
    assert counts.skipped == {"corrupt": 1} and counts.examples
    assert capture_records(b"not a capture", ParseCounts("t")) is None


# ---------------------------------------------------------------- pcapng

def _ng(byte_order: str, tsresol: int | None = None) -> bytes:
    e = byte_order
    out = io.BytesIO()
    out.write(pcapng_block(int.from_bytes(PCAPNG_SHB, "big"), struct.pack(e + "IHHq", 0x1A2B3C4D, 1, 0, -1), e))
    opts = b"" if tsresol is None else struct.pack(e + "HH", 9, 1) + bytes([tsresol, 0, 0, 0]) + bytes(4)
    out.write(pcapng_block(PCAPNG_IDB, struct.pack(e + "HHI", 101, 0, 65535) + opts, e))
    for ts, f in zip(TS_NS, FRAMES):
        ticks = ts // 10 ** (9 - (tsresol or 6))
        out.write(pcapng_block(PCAPNG_EPB, struct.pack(e + "IIIII", 0, ticks >> 32, ticks & 0xFFFFFFFF, len(f),
                                                       len(f)) + f, e))
    return out.getvalue()


@pytest.mark.parametrize("byte_order", ["<", ">"])
@pytest.mark.parametrize("tsresol", [None, 9])
def test_pcapng_packets_read_in_both_byte_orders(byte_order, tsresol):
    data = _ng(byte_order, tsresol)
    assert capture_kind(data) == "pcapng"
    counts = ParseCounts("t")
    got = list(capture_records(data, counts))
    tick = 10 ** (9 - (tsresol or 6))
    assert got == [(ts - ts % tick, 101, f) for ts, f in zip(TS_NS, FRAMES)]
    assert counts.lines == 3 and not counts.skipped
    blocks = list(PcapngReader(data))
    assert [b.btype for b in blocks] == [0x0A0D0D0A, PCAPNG_IDB] + [PCAPNG_EPB] * 3
    assert {b.byte_order for b in blocks} == {byte_order}


def test_pcapng_blocks_rewritten_as_read_keep_their_bytes():
    data = _ng(">", 9)
    out = io.BytesIO()
    for b in PcapngReader(data):
        out.write(pcapng_block(b.btype, b.body, b.byte_order))
    assert out.getvalue() == data


def test_pcapng_cut_or_lying_stops_with_a_reason():
    data = _ng("<")
    last = len(data) - (12 + 20 + len(FRAMES[2]) + (-len(FRAMES[2]) % 4))
    r = PcapngReader(data[:-1])
    assert len(list(r)) == 4 and r.stopped == "truncated"
    r = PcapngReader(data[:last + 6])
    assert len(list(r)) == 4 and r.stopped == "truncated"
    bogus = data[:last] + struct.pack("<II", PCAPNG_EPB, 0xFFFFFFF0) + data[last + 8:]
    r = PcapngReader(bogus)
    assert len(list(r)) == 4 and r.stopped == "corrupt" and f"claims {0xFFFFFFF0} bytes" in r.problem
    r = PcapngReader(data[:8] + b"\0\0\0\0" + data[12:])
    assert list(r) == [] and r.stopped == "corrupt"



def test_pcapng_options_stop_at_their_end_and_at_the_block_end():
    opts = (struct.pack(">HH", 2, 4) + b"eth0" + struct.pack(">HH", 1, 3) + b"abc\0"
            + struct.pack(">HH", 0, 0) + struct.pack(">HH", 2, 4) + b"past")
    assert list(pcapng_options(opts, ">")) == [(2, b"eth0"), (1, b"abc")]
    assert list(pcapng_options(struct.pack("<HH", 3, 100) + b"short", "<")) == [(3, b"short")]
    assert list(pcapng_options(b"\1\0", "<")) == []
