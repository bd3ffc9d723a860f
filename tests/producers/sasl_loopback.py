"""A librdkafka producer that authenticates with SASL to a loopback listener
in this same process, which speaks just enough Kafka for the client to send
its handshake and authenticate bytes (ApiVersions -> SaslHandshake ->
SaslAuthenticate, and SCRAM's second round). Traced, both the client's
send and the listener's receive of every SASL token are in the capture.

    python sasl_loopback.py PROPERTIES_FILE JSON_RUNS

PROPERTIES_FILE is read (as a producer reads its config file) and left
unused. JSON_RUNS: a list of [MECHANISM, {librdkafka properties}], one
producer each, one after the other; MECHANISM is PLAIN, SCRAM-SHA-256 or
OAUTHBEARER. With $KDIAG_TEST_TOKENS, every SASL token that went either
way is written there at the end, hex-encoded (so that the capture of that
write does not hold them). Each producer gives up after a few seconds: nothing is ever produced."""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import socket
import struct
import sys
import threading

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
SUPPORTED = [(0, 0, 7), (3, 0, 9), (SASL_HANDSHAKE, 0, 1), (API_VERSIONS, 0, 3), (SASL_AUTHENTICATE, 0, 1)]
SCRAM_SALT = b"kdiag-test-salt!"
SCRAM_ITERATIONS = 4096
TOKENS: list[bytes] = []


def _read_exact(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        got = conn.recv(n - len(data))
        if not got:
            raise ConnectionError("closed")
        data += got
    return data


def _request_body(frame: bytes) -> tuple[int, int, int, bytes]:
    """(api key, version, correlation id, body) of a request (header v1/v2)."""
    key, version, corr, client_len = struct.unpack(">hhih", frame[:10])
    pos = 10 + max(client_len, 0)
    if (key == API_VERSIONS and version >= 3) or (key == SASL_AUTHENTICATE and version >= 2):
        pos += 1   # the flexible header's empty tagged fields
    return key, version, corr, frame[pos:]


def _api_versions(version: int) -> bytes:
    if version >= 3:
        body = struct.pack(">hB", 0, len(SUPPORTED) + 1)
        body += b"".join(struct.pack(">hhhB", k, lo, hi, 0) for k, lo, hi in SUPPORTED)
        return body + struct.pack(">iB", 0, 0)
    body = struct.pack(">hi", 0, len(SUPPORTED)) + b"".join(struct.pack(">hhh", *v) for v in SUPPORTED)
    return body + (struct.pack(">i", 0) if version >= 1 else b"")


class Scram:
    """The server's side of SCRAM-SHA-256 (RFC 5802), for one password."""

    def __init__(self, password: str) -> None:
        self.password = password.encode()
        self.first_bare = self.server_first = b""

    def reply(self, token: bytes) -> bytes:
        if token.startswith(b"n,"):
            self.first_bare = token.split(b",", 2)[2]
            nonce = dict(p.split(b"=", 1) for p in self.first_bare.split(b","))[b"r"]
            self.server_first = b"r=%s%s,s=%s,i=%d" % (nonce, b"SRVnonce0123456789", base64.b64encode(SCRAM_SALT),
                                                        SCRAM_ITERATIONS)
            return self.server_first
        without_proof = token.rsplit(b",p=", 1)[0]
        salted = hashlib.pbkdf2_hmac("sha256", self.password, SCRAM_SALT, SCRAM_ITERATIONS)
        server_key = hmac.new(salted, b"Server Key", hashlib.sha256).digest()
        auth_message = b",".join([self.first_bare, self.server_first, without_proof])
        return b"v=" + base64.b64encode(hmac.new(server_key, auth_message, hashlib.sha256).digest())


def _serve_one(conn: socket.socket, scram: Scram) -> None:
    with conn:
        while True:
            size = struct.unpack(">i", _read_exact(conn, 4))[0]
            key, version, corr, body = _request_body(_read_exact(conn, size))
            if key == API_VERSIONS:
                out = _api_versions(version)
            elif key == SASL_HANDSHAKE:
                mech = body[2:2 + struct.unpack(">h", body[:2])[0]]
                out = struct.pack(">hih", 0, 1, len(mech)) + mech
            elif key == SASL_AUTHENTICATE:
                token = body[4:4 + struct.unpack(">i", body[:4])[0]]
                answer = scram.reply(token) if scram.first_bare or token.startswith(b"n,,n=") else b""
                TOKENS.extend([token, answer])
                out = struct.pack(">hhi", 0, -1, len(answer)) + answer + (struct.pack(">q", 0) if version else b"")
            else:
                return   # authenticated: nothing more to say
            conn.sendall(struct.pack(">ii", len(out) + 4, corr) + out)


def serve(listener: socket.socket, password: str) -> None:
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_serve_one_quietly, args=(conn, Scram(password)), daemon=True).start()


def _serve_one_quietly(conn: socket.socket, scram: Scram) -> None:
    try:
        _serve_one(conn, scram)
    except (ConnectionError, OSError, struct.error):
        pass


def produce(mechanism: str, extra: dict) -> None:
    from confluent_kafka import Producer

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    threading.Thread(target=serve, args=(listener, extra.get("sasl.password", "")), daemon=True).start()
    conf = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "sasl_plaintext",
            "sasl.mechanism": mechanism, "debug": os.environ.get("KDIAG_TEST_DEBUG", "broker,security,protocol"),
            "message.timeout.ms": 1500, "socket.timeout.ms": 1000, "reconnect.backoff.ms": 200, **extra}
    producer = Producer(conf)
    producer.produce("t", b"x" * 16)
    producer.flush(2)


def main() -> int:
    with open(sys.argv[1]) as f:
        f.read()
    for mechanism, extra in json.loads(sys.argv[2]):
        produce(mechanism, extra)
    if os.environ.get("KDIAG_TEST_TOKENS"):
        with open(os.environ["KDIAG_TEST_TOKENS"], "w") as f:
            json.dump([t.hex() for t in TOKENS if t], f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
