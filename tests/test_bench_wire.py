"""The wire benchmark runs: it takes its captures with tcpdump in a
namespace of its own and measures every figure (not judged: a small run
says nothing about speed)."""
from __future__ import annotations

from bench import wire
from tests.conftest import need


def test_wire_bench_smoke(tmp_path):
    for tool in ("tcpdump", "ethtool", "ip"):
        need(tool)
    need(root=True)
    figs = wire.run(smoke=True, work=tmp_path)
    assert [f.name for f in figs] == ["pcap read MB/s, 1500-byte frames", "pcap read MB/s, 64 KiB segments"]
    for f in figs:
        assert f.value and f.value > 0 and f.ref_value and f.ref_value > 0 and f.command, f
    assert list(tmp_path.iterdir()) == []   # the captures are removed


def test_the_captures_hold_what_was_sent(tmp_path):
    """40 round trips of 10 KB requests on one connection: every request
    framed whole, carried in 1500-byte frames."""
    for tool in ("tcpdump", "ethtool", "ip"):
        need(tool)
    need(root=True)
    from kdiag.parsers.base import ParseCounts
    from kdiag.parsers.pcap import capture_records
    from kdiag.parsers.wire.packets import segments
    from kdiag.parsers.wire.tcp import flows, framing_of, messages

    path = tmp_path / "b.pcap"
    wire.make_capture(path, 40, 1500)
    counts = ParseCounts("wire")
    segs = list(segments(capture_records(path.read_bytes(), counts), counts))
    assert max(s.payload_len for s in segs) <= 1448 and counts.skipped_total == 0
    (f,) = flows(segs)
    assert framing_of(f) == "kafka"
    got = list(messages(f, "kafka"))
    assert [m.length for m in got if m.direction == 0] == [4 + 15 + 10_000] * 40
    assert len([m for m in got if m.direction == 1]) == 40
