"""An encoder of Kafka frames for the tests, walking the same layouts as the
decoder (``kdiag.parsers.wire.kafka_specs``), and record batches and message
sets of every magic. The hand-written byte strings in test_wire_kafka.py
check both against the specs, so that the two cannot agree on a wrong
layout unnoticed."""
from __future__ import annotations

import gzip
import struct

from kdiag.parsers.wire import kafka_specs as ks

_FMT = {"int8": ">b", "int16": ">h", "int32": ">i", "int64": ">q"}
CODEC_IDS = {name: code for code, name in ks.CODECS.items()}


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _length(n: int, flexible: bool, wide: bool) -> bytes:
    if flexible:
        return uvarint(n + 1)
    return struct.pack(">i" if wide else ">h", n)


def _value(f: ks.Field, v, version: int, flexible: bool) -> bytes:
    if v is None and not f.nullable:
        raise ValueError(f"{f.name} is not nullable")
    if f.type in _FMT:
        return struct.pack(_FMT[f.type], v)
    if f.type == "uuid":
        return bytes.fromhex(v.replace("-", ""))
    if f.type == "string":
        if v is None:
            return _length(-1, flexible, False)
        raw = v.encode()
        return _length(len(raw), flexible, False) + raw
    if f.type == "records":
        if v is None:
            return _length(-1, flexible, True)
        return _length(len(v), flexible, True) + v
    if f.type == "array":
        if v is None:
            return _length(-1, flexible, True)
        return _length(len(v), flexible, True) + b"".join(struct_bytes(f.fields, x, version, flexible) for x in v)
    if f.type == "struct":
        return struct_bytes(f.fields, v, version, flexible)
    raise ValueError(f.type)


def struct_bytes(fields: tuple, value: dict, version: int, flexible: bool) -> bytes:
    """``value``'s fields as ``version`` lays them out; records are the
    raw bytes of the Records field."""
    out = b"".join(_value(f, value[f.name], version, flexible)
                   for f in fields if f.tag is None and f.present(version))
    if flexible:
        tagged = [(f.tag, _value(f, value[f.name], version, True)) for f in fields
                  if f.tag is not None and f.present(version) and value.get(f.name) is not None]
        out += uvarint(len(tagged)) + b"".join(uvarint(t) + uvarint(len(b)) + b for t, b in sorted(tagged))
    return out


def request_frame(api_key: int, version: int, correlation_id: int, client_id: str | None, body: bytes) -> bytes:
    """A request without its size field."""
    hv = ks.request_header_version(api_key, version)
    head = struct.pack(">hhi", api_key, version, correlation_id)
    if hv >= 1:
        head += _value(ks.Field("client_id", "string", nullable=True), client_id, version, False)
    if hv >= 2:
        head += uvarint(0)
    return head + body


def response_frame(api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    head = struct.pack(">i", correlation_id)
    if ks.response_header_version(api_key, version) >= 1:
        head += uvarint(0)
    return head + body


def sized(frame: bytes) -> bytes:
    return struct.pack(">i", len(frame)) + frame


def record_batch(count: int, codec: str = "none", base_offset: int = 0, base_ts: int = 1_700_000_000_000,
                 transactional: bool = False, payload: bytes | None = None) -> bytes:
    """A magic 2 batch whose header says ``count`` records; the records
    section is opaque filler (the decoder reads the header only)."""
    attributes = CODEC_IDS[codec] | (0x10 if transactional else 0)
    records = payload if payload is not None else bytes(7 * count)
    after_crc = struct.pack(">hiqqqhii", attributes, count - 1, base_ts, base_ts + count, 4242, 3, 17, count) + records
    after_length = struct.pack(">ibI", 0, 2, 0) + after_crc
    return struct.pack(">qi", base_offset, len(after_length)) + after_length


def message_set(magic: int, count: int, codec: str = "none", base_ts: int = 1_700_000_000_000) -> bytes:
    """``count`` uncompressed messages of ``magic`` 0 or 1, or with a codec
    one wrapper message whose value is the inner set compressed (gzip) or
    filler standing for it (other codecs)."""
    def entry(offset: int, attributes: int, value: bytes) -> bytes:
        ts = struct.pack(">q", base_ts + offset) if magic == 1 else b""
        msg = struct.pack(">bb", magic, attributes) + ts + struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
        msg = struct.pack(">I", 0) + msg
        return struct.pack(">qi", offset, len(msg)) + msg

    inner = b"".join(entry(i, 0, b"v%d" % i) for i in range(count))
    if codec == "none":
        return inner
    # gzip is the one codec the standard library has: others stand in as filler.
    value = gzip.compress(inner) if codec == "gzip" else bytes(5 * count)
    return entry(count - 1, CODEC_IDS[codec], value)


def loopback_streams(pcap: bytes) -> dict[tuple[int, int], tuple[bytes, bytes]]:
    """(client port, server port) -> (client's bytes, server's bytes) of
    each TCP connection whose SYN a loopback capture (Ethernet, IPv4) holds.
    Loopback loses nothing, so a stream is its segments laid by sequence
    number; a hole fails the test that reads it."""
    from kdiag.parsers.base import ParseCounts
    from kdiag.parsers.pcap import capture_records

    isn, opener, segments = {}, set(), {}
    for _, linktype, frame in capture_records(pcap, ParseCounts("loopback")):
        if linktype != 1 or frame[12:14] != b"\x08\x00" or frame[14 + 9] != 6:
            continue
        ip = frame[14:]
        tcp = ip[(ip[0] & 15) * 4:struct.unpack_from(">H", ip, 2)[0]]
        sport, dport, seq = struct.unpack_from(">HHI", tcp)
        flags, key = tcp[13], (sport, dport)
        if flags & 0x02:
            isn[key] = seq + 1
            if not flags & 0x10:
                opener.add(key)
        payload = tcp[(tcp[12] >> 4) * 4:]
        if payload:
            segments.setdefault(key, {})[seq] = payload

    def stream(key) -> bytes:
        buf = bytearray()
        for seq, payload in sorted(segments.get(key, {}).items(), key=lambda kv: (kv[0] - isn[key]) & 0xFFFFFFFF):
            at = (seq - isn[key]) & 0xFFFFFFFF
            assert at <= len(buf), f"hole in {key} at {len(buf)}"
            buf[at:at + len(payload)] = payload
        return bytes(buf)

    return {c: (stream(c), stream((c[1], c[0]))) for c in opener if c in isn and (c[1], c[0]) in isn}


def frames(stream: bytes):
    """Each message's frame (the bytes after its size field)."""
    pos = 0
    while pos + 4 <= len(stream):
        n = struct.unpack_from(">i", stream, pos)[0]
        yield stream[pos + 4:pos + 4 + n]
        pos += 4 + n
