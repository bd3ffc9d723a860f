"""kdiag.lab.slowproxy's quota mode: Kafka framing, the ThrottleTimeMs rewrite
and the token bucket on fixed bytes, then a broken frame against the real
proxy in front of Tansu.
"""
from __future__ import annotations

import socket
import struct

import pytest

from conftest import alive
from kdiag.lab import broker as kl
from kdiag.lab import scenarios
from kdiag.lab import slowproxy as sp

# A ProduceResponse v10 from Tansu 0.6.0 to librdkafka 2.16.0 (the bytes
# after the size field): correlation_id 2, header tags, topic "t" partition
# 0, then ThrottleTimeMs 0 and an empty tagged-field section.
TANSU_V10 = bytes.fromhex(
    "00000002" "00" "02" "0274" "02" "00000000" "0000" "0000000000000000" "ffffffffffffffff"
    "0000000000000000" "01" "00" "00" "00" "00000000" "00"
)
# The start of librdkafka 2.16.0's ProduceRequest v10 with client.id
# "kdiag": header (key 0, version 10, correlation_id 2, client_id, tags
# 0x00), TransactionalId null (0x00), Acks, TimeoutMs 30000, ...
LIBRDKAFKA_V10_ACKS_ALL = bytes.fromhex(
    "0000000a0000000200056b646961670000ffff0000753002027402000000005500000000000000000000004800000000"
)
LIBRDKAFKA_V10_ACKS_0 = bytes.fromhex(
    "0000000a0000000200056b64696167000000000000753002027402000000005500000000000000000000004800000000"
)


def _v8_response(throttle_ms: int = 0) -> bytes:
    """ProduceResponse v8: correlation_id, [topic [partition]], ThrottleTimeMs."""
    partition = struct.pack(">ihqqq", 0, 0, 42, -1, 0) + struct.pack(">i", 0) + struct.pack(">h", -1)
    topic = struct.pack(">h", 1) + b"t" + struct.pack(">i", 1) + partition
    return struct.pack(">ii", 7, 1) + topic + struct.pack(">i", throttle_ms)


def _v8_request(acks: int, transactional_id: bytes | None = None) -> bytes:
    if transactional_id is None:
        txn = struct.pack(">h", -1)
    else:
        txn = struct.pack(">h", len(transactional_id)) + transactional_id
    return struct.pack(">hhih", 0, 8, 5, 5) + b"kdiag" + txn + struct.pack(">hi", acks, 30000) + struct.pack(">i", 0)


def test_v10_rewrite_puts_the_throttle_before_the_tagged_fields():
    assert sp.throttle_offset(TANSU_V10, 10) == len(TANSU_V10) - 5
    out = sp.with_throttle(TANSU_V10, 10, 106)
    assert len(out) == len(TANSU_V10)
    assert out[:-5] == TANSU_V10[:-5]
    assert out[-5:] == struct.pack(">i", 106) + b"\x00"
    # Same layout in every flexible version.
    assert sp.with_throttle(TANSU_V10, 9, 1) == TANSU_V10[:-5] + struct.pack(">i", 1) + b"\x00"


def test_v8_rewrite_sets_the_last_four_bytes():
    msg = _v8_response()
    out = sp.with_throttle(msg, 8, 250)
    assert out == msg[:-4] + struct.pack(">i", 250)
    assert sp.with_throttle(msg, 1, 250) == out


def test_unexpected_layouts_are_left_alone():
    # A top-level tag after ThrottleTimeMs (here NodeEndpoints: one
    # endpoint, node 1, "h", port 9092, no rack) ends in 0x00 too, but the
    # 4 bytes before the end are not 0.
    endpoints = b"\x02" + struct.pack(">i", 1) + b"\x02h" + struct.pack(">i", 9092) + b"\x00\x00"
    tagged = TANSU_V10[:-1] + b"\x01\x00" + bytes([len(endpoints)]) + endpoints
    assert sp.with_throttle(tagged, 10, 100) is None
    # Another tag whose data does not end in 0x00.
    assert sp.throttle_offset(TANSU_V10[:-1] + b"\x01\x05\x01\x07", 10) is None
    # The broker throttled already.
    assert sp.with_throttle(_v8_response(30), 8, 100) is None
    assert sp.with_throttle(TANSU_V10[:-5] + struct.pack(">i", 30) + b"\x00", 10, 100) is None
    # v0 has no ThrottleTimeMs; too short to hold one.
    assert sp.throttle_offset(_v8_response(), 0) is None
    assert sp.throttle_offset(struct.pack(">i", 7), 8) is None
    assert sp.throttle_offset(b"\x00" * 10, 10) is None


def test_throttle_is_capped_at_int32():
    out = sp.with_throttle(_v8_response(), 8, 2**40)
    assert struct.unpack(">i", out[-4:])[0] == 2**31 - 1


def test_produce_acks_from_real_and_crafted_requests():
    assert sp.produce_acks(LIBRDKAFKA_V10_ACKS_ALL, 10) == -1
    assert sp.produce_acks(LIBRDKAFKA_V10_ACKS_0, 10) == 0
    assert sp.produce_acks(_v8_request(1), 8) == 1
    assert sp.produce_acks(_v8_request(0, b"txn-1"), 8) == 0
    # v9+: header tags (one tag of 2 bytes) and a compact TransactionalId.
    flexible = struct.pack(">hhih", 0, 11, 9, -1) + b"\x01\x00\x02ab" + b"\x04txn" + struct.pack(">h", 0)
    assert sp.produce_acks(flexible, 11) == 0
    # v0-v2 have no TransactionalId.
    assert sp.produce_acks(struct.pack(">hhih", 0, 2, 1, -1) + struct.pack(">hi", -1, 1000), 2) == -1
    # Cut short, or a client_id running past the end.
    assert sp.produce_acks(LIBRDKAFKA_V10_ACKS_0[:17], 10) is None
    assert sp.produce_acks(struct.pack(">hhih", 0, 8, 1, 500) + b"x", 8) is None


def test_quota_bucket():
    q = sp.Quota(20480, now=0.0)
    assert q.capacity == pytest.approx(2048)
    # A full bucket lets the burst through, then each request waits for the
    # bucket to refill to zero: bytes / quota.
    assert q.charge(2000, 0.0) == 0
    assert q.charge(2048, 0.0) == 98  # 2000 bytes short: 97.66 ms, rounded up
    assert q.charge(2048, 0.098) == 100
    # Idle time refills no further than the burst.
    assert q.charge(1000, 60.0) == 0
    assert q.tokens == pytest.approx(1048)
    assert (q.requests, q.throttled) == (4, 2)
    assert q.report() == ["slowproxy: 4 Produce requests, 2 throttled"]
    q.unchanged_response("unexpected layout")
    assert q.report()[1] == "slowproxy: 1 Produce responses left unchanged: unexpected layout"


def test_quota_option_parsing(capsys):
    with pytest.raises(SystemExit):
        sp.main(["--listen", "127.0.0.1:1", "--connect", "127.0.0.1:2", "--quota-bytes-per-s", "0"])
    assert "quota out of range" in capsys.readouterr().err


def _api_versions(s: socket.socket, corr: int) -> int:
    """Send ApiVersions v0, return the correlation_id of the answer."""
    msg = struct.pack(">hhih", 18, 0, corr, 5) + b"kdiag"
    s.sendall(struct.pack(">i", len(msg)) + msg)
    (size,) = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))
    body = s.recv(size, socket.MSG_WAITALL)
    assert len(body) == size
    return struct.unpack(">i", body[:4])[0]


def _closed(s: socket.socket) -> bool:
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


@pytest.mark.e2e
def test_broken_frame_closes_only_its_connection(state_dir):
    with kl.running(state_dir, lab=scenarios.find("throttled").lab) as lab:
        # The proxy's own port is plaintext Kafka, straight to Tansu.
        addr = ("127.0.0.1", lab.proxy_port)
        with socket.create_connection(addr, timeout=3) as good:
            assert _api_versions(good, 41) == 41
            broken = [socket.create_connection(addr, timeout=3) for _ in range(3)]
            # Too small to hold a request header; larger than any frame; a
            # Produce request cut off before its acks.
            broken[0].sendall(struct.pack(">i", 3) + b"abc")
            broken[1].sendall(struct.pack(">i", sp.MAX_FRAME + 1))
            produce = struct.pack(">hhih", 0, 10, 1, 5) + b"kd"
            broken[2].sendall(struct.pack(">i", len(produce)) + produce)
            for s in broken:
                assert _closed(s)
                s.close()
            assert _api_versions(good, 42) == 42
            with socket.create_connection(addr, timeout=3) as fresh:
                assert _api_versions(fresh, 43) == 43
        assert alive(lab.proxy_pid)
    log = (state_dir / kl.SLOWPROXY_LOG).read_text().splitlines()
    closed = [line for line in log if line.endswith("; connection closed")]
    assert len(closed) == 3, log
    assert any("request of 3 bytes: not Kafka framing" in line for line in closed)
    assert any(f"request of {sp.MAX_FRAME + 1} bytes: not Kafka framing" in line for line in closed)
    assert any("Produce request v10 of 12 bytes has no acks field" in line for line in closed)
    assert not any("Traceback" in line for line in log), log
