"""The compiled capture reader (parsers/_wire.c) gives what its reference
gives (kdiag.parsers.pcap.capture_records feeding
kdiag.parsers.wire.packets.segments): the same Segments in the same order,
the same counts and the same examples, on real captures, on frames built
for every link layer and header path, and on damaged files. Where it was
not built, the reference runs and says so.

The tcpdump captures of tests/test_wire_tcp.py are held to the same check
by its ``read``."""
from __future__ import annotations

import inspect
import os
import random
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from kdiag.parsers.base import ParseCounts
from kdiag.parsers.pcap import PCAPNG_EPB, PCAPNG_IDB, PCAPNG_OPB, PCAPNG_SPB, pcapng_block
from kdiag.parsers.wire import packets

ROOT = Path(__file__).resolve().parents[1]
CAPTURES = sorted((ROOT / "fixtures" / "wire").rglob("*.pcap*")) + sorted((ROOT / "fuzz" / "seeds").glob("*.pcap*"))

compiled = pytest.mark.skipif(not packets.COMPILED and not os.environ.get("CI"),
                              reason="kdiag's compiled capture reader was not built here (no C compiler at install)")


def same(data: bytes) -> tuple[list | None, ParseCounts]:
    """Both readers' segments and counts of ``data``, held equal (each
    field's type too: True is not 1)."""
    got, ref = ParseCounts("wire"), ParseCounts("wire")
    a = packets.capture_segments(data, got, compiled=True)
    b = packets.capture_segments(data, ref, compiled=False)
    a, b = (None if a is None else list(a)), (None if b is None else list(b))
    if a != b:
        first = next((i for i, (x, y) in enumerate(zip(a or [], b or [])) if x != y), None)
        pytest.fail(f"{len(a or [])} vs {len(b or [])} segments; first differing: {first}: "
                    f"{a[first] if first is not None else None} != {b[first] if first is not None else None}")
    assert [[type(v) for v in s] for s in a or []] == [[type(v) for v in s] for s in b or []]
    assert got == ref, (got.to_dict(), ref.to_dict())
    return a, got


def test_ci_builds_the_compiled_reader():
    # CI installs with the compiler setup.sh provides: it must not fall back.
    if os.environ.get("CI"):
        assert packets.COMPILED


@compiled
@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_real_captures_and_every_cut_of_them(path):
    data = path.read_bytes()
    segs, counts = same(data)
    assert segs and counts.parsed == len(segs) and counts.lines == counts.parsed + counts.skipped_total
    # Cut anywhere: inside the file header, a record header, a frame.
    for k in [*range(0, 80), *range(80, len(data), max(1, len(data) // 300))]:
        same(data[:k])


# ---------------------------------------------------------------- built frames

def _tcp(flags=0x10, options=b"", payload=b"hi", doff=None) -> bytes:
    thl = 20 + len(options)
    return struct.pack("!HHIIBBHHH", 40000, 9092, 0xFFFFFFF0, 7, (doff if doff is not None else thl // 4) << 4,
                       flags, 65535, 0, 0) + options + payload


def _ipv4(transport: bytes, proto=6, total=None, ihl=5, frag=0, options=b"") -> bytes:
    n = 20 + len(options) + len(transport) if total is None else total
    return struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, 0, n, 0, frag, 64, proto, 0, bytes([10, 0, 0, 1]),
                       bytes([192, 168, 7, 200])) + options + transport


def _ipv6(transport: bytes, first=6, ext=b"", plen=None) -> bytes:
    src, dst = socket.inet_pton(socket.AF_INET6, "fd00::1"), socket.inet_pton(socket.AF_INET6, "2001:db8::7")
    n = len(ext) + len(transport) if plen is None else plen
    return struct.pack("!IHBB", 6 << 28, n, first, 64) + src + dst + ext + transport


def _udp(payload=b"dns?", length=None) -> bytes:
    return struct.pack("!HHHH", 53, 40000, 8 + len(payload) if length is None else length, 0) + payload


SYN_OPTIONS = (b"\x02\x04\x05\xb4" + b"\x04\x02" + b"\x08\x0a\x00\x00\x00\x01\x00\x00\x00\x00" + b"\x01"
               + b"\x03\x03\x0e")
PACKETS = [
    _ipv4(_tcp()), _ipv4(_tcp(payload=b"")), _ipv4(_tcp(0x02, SYN_OPTIONS, b"")),
    _ipv4(_tcp(0x12, b"\x02\x04\x05\xb4\x03\x03\x0f\x04\x02\x00\x00", b"")),      # wscale 15: taken as 14
    _ipv4(_tcp(options=b"\x01\x01\x08\x0a" + bytes(range(8)))),                  # Linux's timestamps
    _ipv4(_tcp(options=b"\x01\x01\x08\x0a" + bytes(range(8))))[:50],             # ... cut by the snaplen
    _ipv4(_tcp(options=b"\x01\x01\x08\x0a" + bytes(range(8))))[:42],
    _ipv4(_tcp(options=b"\x08\x0a" + bytes(8) + b"\x01\x01")),                   # timestamps elsewhere
    _ipv4(_tcp(options=b"\x02\x09\x05\xb4" + bytes(4))),                        # an option past its end
    _ipv4(_tcp(options=b"\x02\x01\x05\xb4")), _ipv4(_tcp(options=b"\x00\x02\x04\x05")),
    _ipv4(_tcp(options=b"\x01\x01\x01\x02")), _ipv4(_tcp(doff=4)), _ipv4(_tcp(doff=15)),
    _ipv4(_tcp(), total=0), _ipv4(_tcp(), total=30), _ipv4(_tcp(), total=19), _ipv4(_tcp(payload=b"x" * 50), total=45),
    _ipv4(_tcp(payload=b"x" * 50))[:45], _ipv4(_tcp())[:30], _ipv4(_tcp())[:19],
    _ipv4(_tcp(), ihl=4), _ipv4(_tcp(), ihl=7, options=bytes(8)), _ipv4(_tcp(), frag=0x2000), _ipv4(_tcp(), frag=5),
    _ipv4(_tcp(), frag=0x4000), _ipv4(b"\x08\x00" + bytes(6), proto=1), _ipv4(_udp()), _ipv4(_udp(), total=24),
    _ipv4(_udp())[:25], _ipv4(_udp(b"x" * 40), total=0), b"\x75" + bytes(40),
    _ipv6(_tcp()), _ipv6(_tcp(), plen=0), _ipv6(_udp()), _ipv6(_tcp())[:39], _ipv6(_tcp(), plen=3),
    _ipv6(_tcp(), first=0, ext=bytes([43, 0]) + bytes(6) + bytes([60, 1]) + bytes(14) + bytes([6, 0]) + bytes(6)),
    _ipv6(_tcp(), first=51, ext=bytes([6, 1]) + bytes(10)),                      # AH: 4-byte units
    _ipv6(_tcp(), first=44, ext=bytes([6, 0, 0, 1]) + bytes(4)),
    _ipv6(_tcp(), first=60, ext=(bytes([60, 0]) + bytes(6)) * 9),
    _ipv6(_tcp(), first=60, ext=bytes([6, 200]) + bytes(6)), _ipv6(b"", first=0),
    _ipv6(b"\x80\x00" + bytes(6), first=58),
]


def _framed(linktype: int, ip: bytes) -> list[bytes]:
    """``ip`` as a link layer of ``linktype`` carries it, and the ways that
    link layer goes wrong."""
    v6 = ip[:1] and ip[0] >> 4 == 6
    etype = b"\x86\xdd" if v6 else b"\x08\x00"
    if linktype == packets.LINKTYPE_ETHERNET:
        return [bytes(12) + etype + ip, bytes(12) + b"\x81\x00\x00\x05\x88\xa8\x00\x06" + etype + ip,
                bytes(12) + b"\x08\x06" + ip, bytes(12) + b"\x81\x00", bytes(13), bytes(12) + b"\x91\x00\x00\x01"]
    if linktype in (packets.LINKTYPE_NULL, packets.LINKTYPE_LOOP):
        fam = 10 if v6 else 2
        return [fam.to_bytes(4, "little") + ip, fam.to_bytes(4, "big") + ip, (30).to_bytes(4, "big") + ip,
                (7).to_bytes(4, "little") + ip, b"\x02\x00"]
    if linktype == packets.LINKTYPE_LINUX_SLL:
        return [bytes(14) + etype + ip, bytes(14) + b"\x08\x06" + ip, bytes(15)]
    if linktype == packets.LINKTYPE_LINUX_SLL2:
        return [etype + bytes(18) + ip, b"\x88\xcc" + bytes(18) + ip, bytes(19)]
    return [ip]


LINKTYPES = (0, 1, 12, 14, 101, 108, 113, 228, 229, 276, 147)


def _pcap(linktype: int, frames: list[bytes], magic=b"\xd4\xc3\xb2\xa1") -> bytes:
    e = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    out = [magic + struct.pack(e + "HHiIII", 2, 4, 0, 0, 65535, linktype | 0x10000000)]
    for i, f in enumerate(frames):
        out.append(struct.pack(e + "IIII", 0xFFFFFFFF - i, 999_999 - i, len(f), len(f) + 3) + f)
    return b"".join(out)


@compiled
@pytest.mark.parametrize("magic", [b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d"],
                         ids=["us-le", "us-be", "ns-le", "ns-be"])
def test_every_link_layer_and_header_path(magic):
    seen_reasons: set[str] = set()
    for lt in LINKTYPES:
        frames = [f for ip in PACKETS for f in _framed(lt, ip)]
        segs, counts = same(_pcap(lt, frames, magic))
        seen_reasons |= set(counts.skipped)
        if lt != 147:
            assert segs, lt
    # The built frames reach every reason a packet is skipped for.
    assert seen_reasons >= {"unsupported_link", "not_ip", "cut_short", "bad_ip", "bad_tcp", "fragment",
                            "other_transport"}, seen_reasons


def _ng_option(e: str, code: int, val: bytes) -> bytes:
    return struct.pack(e + "HH", code, len(val)) + val + b"\0" * (-len(val) % 4)


@compiled
@pytest.mark.parametrize("e", ["<", ">"])
def test_pcapng_interfaces_clocks_and_blocks(e):
    """Every if_tsresol kind, offsets past int64 nanoseconds, obsolete and
    simple packet blocks, blocks that name no interface or overrun
    themselves, and a second section in the other byte order."""
    frame = bytes(12) + b"\x08\x00" + _ipv4(_tcp())
    out = [pcapng_block(0x0A0D0D0A, struct.pack(e + "IHHq", 0x1A2B3C4D, 1, 0, -1), e)]
    resols = [None, 0, 6, 9, 12, 19, 28, 29, 127, 0x80 | 10, 0x80 | 30, 0x80 | 64, 0xFF]
    for r in resols:
        opts = b"" if r is None else _ng_option(e, 9, bytes([r]))
        if r in (6, 0x80 | 30):
            opts += _ng_option(e, 14, struct.pack(e + "q", -(2**63) if r == 6 else 2**63 - 1))
        out.append(pcapng_block(PCAPNG_IDB, struct.pack(e + "HHI", 1, 0, 65535) + opts + _ng_option(e, 0, b""), e))
    out.append(pcapng_block(PCAPNG_IDB, struct.pack(e + "HHI", 1, 0, 0) + struct.pack(e + "HH", 9, 0xFFFF), e))
    out.append(pcapng_block(PCAPNG_IDB, b"\x01\x00", e))          # too short to be read: no interface
    for i in range(len(resols) + 2):
        for ticks in (0, 1_700_000_000_123_456_789, 2**64 - 1):
            body = struct.pack(e + "IIII", i, ticks >> 32, ticks & 0xFFFFFFFF, len(frame)) + struct.pack(e + "I", 9)
            out.append(pcapng_block(PCAPNG_EPB, body + frame, e))
        out.append(pcapng_block(PCAPNG_OPB, struct.pack(e + "HHIII", i, 0, 1, 2, len(frame)) + struct.pack(e + "I", 0)
                                + frame, e))
    out += [pcapng_block(PCAPNG_EPB, struct.pack(e + "IIII", 99, 0, 0, 4) + bytes(8), e),      # no such interface
            pcapng_block(PCAPNG_EPB, struct.pack(e + "IIII", 0, 0, 0, 400) + bytes(8), e),     # overruns its block
            pcapng_block(PCAPNG_EPB, bytes(12), e), pcapng_block(PCAPNG_SPB, struct.pack(e + "I", 4) + frame, e),
            pcapng_block(5, bytes(8), e)]
    other = ">" if e == "<" else "<"
    out.append(pcapng_block(0x0A0D0D0A, struct.pack(other + "IHHq", 0x1A2B3C4D, 1, 0, -1), other))
    out.append(pcapng_block(PCAPNG_EPB, struct.pack(other + "IIII", 0, 0, 5, len(frame)) + bytes(4) + frame, other))
    out.append(pcapng_block(PCAPNG_IDB, struct.pack(other + "HHI", 113, 0, 0), other))
    out.append(pcapng_block(PCAPNG_EPB, struct.pack(other + "IIII", 0, 0, 5, 16 + 40) + bytes(4) + bytes(14)
                            + b"\x08\x00" + _ipv4(_tcp(payload=b"")), other))
    data = b"".join(out)
    segs, counts = same(data)
    assert len(segs) > 2 * len(resols) and {"malformed", "no_timestamp"} <= set(counts.skipped)
    assert any(s.ts_ns >= 2**63 for s in segs) and any(s.ts_ns < 0 for s in segs)
    for k in range(0, len(data), 7):
        same(data[:k])
    # A section that lies about its byte order, a length no block has.
    same(data[:8] + b"\x00\x11\x22\x33" + data[12:])
    for bad in (b"\x00\x00\x00\x00", b"\xff\xff\xff\xff", b"\x0d\x00\x00\x00", b"\x00\x00\x20\x00"):
        at = len(data) // 2 // 4 * 4
        same(data[:at] + b"\x06\x00\x00\x00" + bad + data[at + 8:])


@compiled
def test_damaged_files_read_the_same():
    """Real captures with bytes overwritten, cut, inserted or lengthened
    anywhere, file and record headers included (seeded)."""
    rnd = random.Random(42)
    files = [p.read_bytes() for p in CAPTURES]
    for round_ in range(400):
        b = bytearray(rnd.choice(files))
        for _ in range(rnd.randrange(1, 6)):
            at = rnd.randrange(len(b))
            kind = rnd.random()
            if kind < 0.6:
                b[at] = rnd.randrange(256)
            elif kind < 0.75:
                b[at:at + 4] = rnd.choice((b"\xff\xff\xff\xff", b"\x00\x00\x00\x00", b"\x00\x00\x10\x00",
                                           b"\x0c\x00\x00\x00", b"\x0a\x0d\x0d\x0a"))
            elif kind < 0.9:
                b[at:at] = rnd.randbytes(rnd.randrange(1, 40))
            else:
                del b[at:at + rnd.randrange(1, 40)]
        if rnd.random() < 0.2:
            b = b[:rnd.randrange(len(b) + 1)]
        same(bytes(b))


@compiled
def test_the_fuzz_targets_inputs_read_the_same():
    """The capture fuzz target's own inputs (mutated records, every pcapng
    clock and block kind, byte damage anywhere)."""
    from fuzz.pcap_target import PcapTarget

    target = PcapTarget(random.Random(7))
    for _ in range(1500):
        same(target.make_input())


@compiled
def test_neither_pcap_nor_pcapng_and_what_is_not_bytes():
    for data in (b"", b"\xd4\xc3", b"not a capture", b"\x0a\x0d\x0d"):
        assert same(data) == (None, ParseCounts("wire"))
    segs, _ = same(memoryview(_pcap(101, [_ipv4(_tcp())])))
    assert len(segs) == 1 and type(segs[0].data) is bytes


# ---------------------------------------------------------------- where it was not built

def test_without_the_compiled_reader_the_reference_runs(monkeypatch):
    data = _pcap(101, [_ipv4(_tcp())])
    monkeypatch.setattr(packets, "COMPILED", False)
    counts = ParseCounts("wire")
    it = packets.capture_segments(data, counts)
    assert inspect.isgenerator(it) and len(list(it)) == counts.parsed == 1
    with pytest.raises(RuntimeError, match="not built"):
        packets.capture_segments(data, counts, compiled=True)


def test_an_install_without_it_says_so(tmp_path):
    """As where pip had no compiler: the extension cannot be imported; the
    capture still reads, and the bench says which reader it measured."""
    code = ("import sys; sys.modules['kdiag.parsers._wire'] = None\n"
            "from kdiag.parsers.base import ParseCounts\n"
            "from kdiag.parsers.wire import packets, parser\n"
            "import bench.wire\n"
            "print(packets.COMPILED, parser.parse_capture(open(sys.argv[1], 'rb').read())[1].parsed > 0)\n"
            "print(bench.wire.reader())\n")
    res = subprocess.run([sys.executable, "-c", code, str(CAPTURES[0])], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert res.stdout.splitlines() == ["False True", "Python reader (the compiled one was not built)"], \
        res.stdout + res.stderr[-2000:]


# ---------------------------------------------------------------- memory errors

_SANITIZED_RUN = r'''
import importlib.util, random, sys
spec = importlib.util.spec_from_file_location("kdiag.parsers._wire", sys.argv[1])
wire = importlib.util.module_from_spec(spec)
spec.loader.exec_module(wire)
sys.modules["kdiag.parsers._wire"] = wire
from kdiag.parsers.wire import packets
assert packets.COMPILED and packets.capture_segments.__globals__["_wire"] is wire
import test_wire_compiled as t
from fuzz.pcap_target import PcapTarget
for p in t.CAPTURES:
    t.test_real_captures_and_every_cut_of_them(p)
t.test_damaged_files_read_the_same()
for e in "<>":
    t.test_pcapng_interfaces_clocks_and_blocks(e)
target = PcapTarget(random.Random(11))
for _ in range(3000):
    t.same(target.make_input())
print("clean")
'''


def test_no_memory_error_under_the_sanitizers(tmp_path):
    """The reader built with AddressSanitizer and UndefinedBehaviorSanitizer
    reads the real captures cut everywhere, the damaged files and the fuzz
    target's inputs: a read past a buffer or an overflow stops the run."""
    import sysconfig

    from conftest import need

    need("gcc")
    lib = {n: subprocess.run(["gcc", f"-print-file-name={n}"], capture_output=True, text=True).stdout.strip()
           for n in ("libasan.so", "libubsan.so")}
    so = tmp_path / "_wire.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-g", "-fsanitize=address,undefined",
                    "-fno-sanitize-recover=undefined", f"-I{sysconfig.get_paths()['include']}",
                    str(ROOT / "parsers" / "_wire.c"), "-o", str(so)], check=True, capture_output=True)
    env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=0", "LD_PRELOAD": f"{lib['libasan.so']}:{lib['libubsan.so']}",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    res = subprocess.run([sys.executable, "-c", _SANITIZED_RUN, str(so)], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "clean", res.stdout[-2000:] + res.stderr[-4000:]
