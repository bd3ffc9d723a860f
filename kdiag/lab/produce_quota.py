"""Kafka framing and the produce quota, for kdiag.lab.slowproxy: where
ThrottleTimeMs sits in a ProduceResponse, the acks of a ProduceRequest, and
a token bucket that throttles as a broker's produce quota does (KIP-219).

Every Kafka message is an int32 size, then that many bytes. A request
starts with api_key int16, api_version int16, correlation_id int32; a
response starts with the correlation_id of its request. All big-endian.
"""
from __future__ import annotations

import math
import struct

# Kafka's own cap on a request (socket.request.max.bytes, 100 MiB). A larger
# size field means the stream is not Kafka framing, and reading on would let
# one connection take that much memory.
MAX_FRAME = 100 * 1024 * 1024
PRODUCE = 0
# A full bucket lets this much of a second's quota through at once.
QUOTA_BURST_S = 0.1
INT32_MAX = 2**31 - 1


class FrameError(ValueError):
    """The stream breaks Kafka framing; its connection is closed."""


def throttle_offset(message: bytes, version: int) -> int | None:
    """Where ThrottleTimeMs starts in a ProduceResponse (the bytes after its
    size field), or None where the message does not have the layout expected.

    ProduceResponse.json: `{ "name": "ThrottleTimeMs", "type": "int32",
    "versions": "1+" }` is the last top-level field, so in v1-v8 it is the
    last 4 bytes. v9+ are flexible versions (KIP-482): the top-level tagged
    fields follow it, a single 0x00 when there are none. With NodeEndpoints
    there (v10+, tag 0, KIP-951) the message ends in the last endpoint's
    Port, Rack and tagged fields, also 0x00; the 4 bytes before that are
    not all 0 then, which is why with_throttle insists on a 0.
    """
    if 1 <= version <= 8:
        # correlation_id, an empty responses array, ThrottleTimeMs
        return len(message) - 4 if len(message) >= 12 else None
    if version >= 9:
        # correlation_id, header tags, empty compact array, ThrottleTimeMs, tags
        if len(message) < 11 or message[-1] != 0:
            return None
        return len(message) - 5
    return None


def with_throttle(message: bytes, version: int, throttle_ms: int) -> bytes | None:
    """The ProduceResponse with ThrottleTimeMs set, or None when its layout
    is not the one expected or the broker already set a throttle there."""
    at = throttle_offset(message, version)
    if at is None or message[at : at + 4] != bytes(4):
        return None
    return message[:at] + min(throttle_ms, INT32_MAX).to_bytes(4, "big") + message[at + 4 :]


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise ValueError("varint too long")


def produce_acks(message: bytes, version: int) -> int | None:
    """The acks field of a ProduceRequest, or None if it does not parse.

    Request header v1 (v2 for flexible versions, Produce v9+): api_key,
    api_version, correlation_id, client_id as an int16-length nullable
    string (never compact), then in v2 the header's tagged fields. The body
    starts with TransactionalId (v3+; a compact nullable string, length + 1,
    in v9+) and then Acks int16.
    """
    try:
        (n,) = struct.unpack_from(">h", message, 8)
        pos = 10 + max(n, 0)
        if version >= 9:
            tags, pos = _uvarint(message, pos)
            for _ in range(tags):
                _, pos = _uvarint(message, pos)
                size, pos = _uvarint(message, pos)
                pos += size
        if 3 <= version <= 8:
            (n,) = struct.unpack_from(">h", message, pos)
            pos += 2 + max(n, 0)
        elif version >= 9:
            n, pos = _uvarint(message, pos)
            pos += max(n - 1, 0)
        (acks,) = struct.unpack_from(">h", message, pos)
    except (struct.error, IndexError, ValueError):
        return None
    return acks


class Quota:
    """A produce byte-rate quota: bytes_per_s, with a burst of QUOTA_BURST_S
    seconds' worth from a standing start.

    Kafka measures the rate over a window of samples (quota.window.num
    samples of quota.window.size.seconds) and throttles for as long as it
    takes that rate to fall back to the quota. A token bucket refilled at the
    quota is simpler and reaches the same steady state: each request over
    the quota is throttled for its bytes / quota.
    """

    def __init__(self, bytes_per_s: float, now: float) -> None:
        self.rate = bytes_per_s
        self.capacity = bytes_per_s * QUOTA_BURST_S
        self.tokens = self.capacity
        self.stamp = now
        self.requests = 0
        self.throttled = 0
        self.unchanged: dict[str, int] = {}

    def charge(self, size: int, now: float) -> int:
        """Throttle time in ms for a produce request of size bytes at now (s):
        the time for the bucket to refill to zero."""
        self.tokens = min(self.capacity, self.tokens + max(0.0, now - self.stamp) * self.rate)
        self.stamp = max(self.stamp, now)
        self.tokens -= size
        self.requests += 1
        if self.tokens >= 0:
            return 0
        self.throttled += 1
        return min(INT32_MAX, math.ceil(-self.tokens / self.rate * 1000))

    def unchanged_response(self, why: str) -> None:
        self.unchanged[why] = self.unchanged.get(why, 0) + 1

    def report(self) -> list[str]:
        lines = [f"slowproxy: {self.requests} Produce requests, {self.throttled} throttled"]
        for why, n in self.unchanged.items():
            lines.append(f"slowproxy: {n} Produce responses left unchanged: {why}")
        return lines
