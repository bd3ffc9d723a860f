"""TLS on a TCP connection, seen from outside: records, the handshake's
messages and time, and the requests and responses told apart by the
application-data records' sizes and timing.

A record (RFC 8446 5.1, RFC 5246 6.2): content type (20 change_cipher_spec,
21 alert, 22 handshake, 23 application_data, 24 heartbeat), version (3, x),
a 16-bit length of at most 2^14 + 2048 (TLSCiphertext's bound; a
TLSPlaintext's is 2^14), then the fragment. A header that breaks these, or
one not captured, stops the walk on that direction (``lost_framing``).

Handshake messages are named while they are readable: in a direction's
handshake records before its ChangeCipherSpec (TLS 1.2) or before the
first encrypted record (TLS 1.3, where everything after ServerHello is
application_data on the wire). An encrypted handshake record is named
``encrypted``.

Messages (``message_spans``): a message is a burst of application-data
records in one direction, ended when the other direction sends application
data: a request and its response alternate. Records of the handshake's end
are not messages: in TLS 1.3 the server's encrypted handshake and the
client's Finished travel as application data, so the application data of
each side starts after the client's first application-data record when the
server sent encrypted records before it (TLS 1.3's order); and server
records before the client's first message (session tickets) are passed
over. A TLS 1.3 session ticket the server sends later, in the middle of
the first request (OpenSSL sends its two one write apart, measured on
loopback), is application data like any other: it ends that request's
burst and reads as a response.
"""
from __future__ import annotations

from typing import NamedTuple

from kdiag.parsers.base import ParseCounts

CHANGE_CIPHER_SPEC, ALERT, HANDSHAKE, APPLICATION_DATA, HEARTBEAT = 20, 21, 22, 23, 24
MAX_RECORD = (1 << 14) + 2048
HANDSHAKE_TYPES = {
    0: "HelloRequest", 1: "ClientHello", 2: "ServerHello", 4: "NewSessionTicket", 5: "EndOfEarlyData",
    8: "EncryptedExtensions", 11: "Certificate", 12: "ServerKeyExchange", 13: "CertificateRequest",
    14: "ServerHelloDone", 15: "CertificateVerify", 16: "ClientKeyExchange", 20: "Finished",
    24: "KeyUpdate",
}


def looks_like_tls(head: bytes) -> bool:
    """A TLS handshake record's first bytes: 0x16, 0x03, 0x00-0x04."""
    return len(head) >= 3 and head[0] == HANDSHAKE and head[1] == 3 and head[2] <= 4


class Record(NamedTuple):
    """One TLS record: its place in the stream (``length`` counts its
    5-byte header), content type, version (major, minor) and when its
    first and last bytes appeared."""

    direction: int
    offset: int
    length: int
    type: int
    version: tuple[int, int]
    first_ns: int | None
    last_ns: int | None


def records(stream, direction: int, counts: ParseCounts | None = None) -> list[Record]:
    """Every TLS record of a stream (a kdiag.parsers.wire.tcp.Stream), up
    to the first header that cannot be read."""
    out = []
    off = 0
    while off + 5 <= stream.length:
        head = stream.bytes_at(off, 5)
        n = int.from_bytes(head[3:5], "big") if head else None
        if head is None or not CHANGE_CIPHER_SPEC <= head[0] <= HEARTBEAT or head[1] != 3 or n > MAX_RECORD:
            if counts is not None:
                counts.skip("lost_framing")
                counts.example(0, "lost_framing", f"TLS at stream offset {off}: "
                               + ("header not captured" if head is None else head.hex()))
            break
        out.append(Record(direction, off, 5 + n, head[0], (head[1], head[2]), stream.first_ns(off),
                          stream.first_ns(min(off + 4 + n, stream.length - 1))))
        off += 5 + n
    return out


def _handshake_names(stream, rec: Record) -> list[str]:
    """The handshake message types a plaintext record starts or holds (the
    4-byte message headers walked within what was captured)."""
    body = stream.captured_from(rec.offset + 5, rec.length - 5)
    names, i = [], 0
    while i + 4 <= len(body):
        names.append(HANDSHAKE_TYPES.get(body[i], f"type_{body[i]}"))
        i += 4 + int.from_bytes(body[i + 1:i + 4], "big")
    return names


def handshake(flow, counts: ParseCounts | None = None) -> dict:
    """What the handshake shows: ``messages`` [(direction, name, ts_ns)],
    ``version`` (the ServerHello record's, which TLS 1.3 keeps at 3,3: see
    ``tls13``), ``tls13`` (the server sent encrypted records before the
    client's first), ``client_hello_ns``, ``first_app_data_ns`` (the
    client's first application data past the handshake) and
    ``handshake_ms`` between them."""
    recs = [records(flow.streams[d], d, counts) for d in (0, 1)]
    first_app = [next((r for r in recs[d] if r.type == APPLICATION_DATA), None) for d in (0, 1)]
    tls13 = first_app[1] is not None and (first_app[0] is None or (first_app[1].first_ns or 0)
                                          < (first_app[0].first_ns or 0))
    messages = []
    for d in (0, 1):
        encrypted = False
        for r in recs[d]:
            if r.type == CHANGE_CIPHER_SPEC:
                messages.append((d, "ChangeCipherSpec", r.first_ns))
                encrypted = True
            elif r.type == HANDSHAKE:
                names = ["encrypted"] if encrypted else _handshake_names(flow.streams[d], r)
                messages.extend((d, name, r.first_ns) for name in names)
            elif r.type == APPLICATION_DATA:
                break
    messages.sort(key=lambda m: (m[2] or 0, m[0]))
    hello = next((r.first_ns for r in recs[0] if r.type == HANDSHAKE), None)
    app = [r for r in recs[0] if r.type == APPLICATION_DATA]
    first = app[1] if tls13 and len(app) > 1 else (app[0] if app and not tls13 else None)
    server_hello = next((r for r in recs[1] if r.type == HANDSHAKE), None)
    return {
        "messages": messages, "tls13": tls13,
        "version": None if server_hello is None else server_hello.version,
        "client_hello_ns": hello, "first_app_data_ns": first and first.first_ns,
        "handshake_ms": None if hello is None or first is None or first.first_ns is None
        else (first.first_ns - hello) / 1e6,
    }


def message_spans(streams, counts: ParseCounts | None = None) -> list[tuple[int, int, int]]:
    """(direction, offset, length) of each message, in time order: bursts
    of application-data records, each ended by the other side's."""
    recs = [[r for r in records(streams[d], d, counts) if r.type == APPLICATION_DATA] for d in (0, 1)]
    if recs[1] and recs[0] and (recs[1][0].first_ns or 0) < (recs[0][0].first_ns or 0):
        recs[0] = recs[0][1:]   # TLS 1.3: the client's first is its Finished
    merged = sorted(recs[0] + recs[1], key=lambda r: (r.first_ns or 0, r.direction, r.offset))
    spans: list[list[int]] = []
    for r in merged:
        if not spans and r.direction == 1:
            continue   # the server's before any request: its handshake's end, tickets
        if spans and spans[-1][0] == r.direction:
            spans[-1][2] = r.offset + r.length - spans[-1][1]
        else:
            spans.append([r.direction, r.offset, r.length])
    return [tuple(s) for s in spans]
