"""Redaction by protocol: SASL PLAIN, SCRAM and OAUTHBEARER exchanges in the
buffers strace prints, TLS keys and passwords in any config form, secrets
in argv; checked on a real traced producer by every byte of its bundle."""
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT, bundle_bytes, need
from kdiag.bundle import redact, sasl

R = redact.REDACTED.encode()
PLAIN_TOKEN = b"\0\0\0(\0$\0\1\0\0\0\3\0\7rdkafka\0\0\0\23\0alice\0PlainPw-9f3a"
JWT = b"eyJhbGciOiJub25lIn0.eyJzdWIiOiJhbGljZSIsImlhdCI6MTc5NTYxNDU1N30."
OAUTH_TOKEN = b"\0\0\0\x80n,,\x01auth=Bearer " + JWT + b"\x01extension_traceToken=ExtVal-77aa\x01\x01"
SCRAM = [
    (b"\0\0\0\x1en,,n=alice,r=CliNonce0123456789ab", b"CliNonce0123456789ab"),
    (b"\0\0\0\x30r=CliNonce0123456789abSRVnonce,s=a2RpYWctdGVzdA==,i=4096", b"a2RpYWctdGVzdA=="),
    (b"\0\0\0\x50c=biws,r=CliNonce0123456789abSRVnonce,p=ProofPr00fProofPr00f0123456789abcdefABCDEFGH=",
     b"ProofPr00f"),
    (b"\0\0\0\x30v=SignSign0123456789abcdefghijklmnopqrstuvwxyzAB=", b"SignSign0123"),
]


def _line(buf: bytes, style: str, cut: bool = False) -> bytes:
    return (b'6637  1795614563.323762 sendto(9<TCP:[127.0.0.1:47616->127.0.0.1:47275]>, "'
            + sasl.encode(buf, style) + (b'"...' if cut else b'"') + b", 44, MSG_NOSIGNAL, NULL, 0) = 44 <0.000015>")


@pytest.mark.parametrize("style", ["octal", "x", "xx"])
@pytest.mark.parametrize("buf,secret", [(PLAIN_TOKEN, b"PlainPw"), (OAUTH_TOKEN, b"ExtVal-77aa"),
                                        (OAUTH_TOKEN, JWT[:30]), *SCRAM])
def test_each_sasl_message_in_each_strace_escaping(buf, secret, style):
    counts = {}
    line = _line(buf, style)
    assert secret in sasl.decode(line.split(b'"')[1])
    out = redact.scrub_line(line, counts)
    assert secret not in sasl.decode(out.split(b'"')[1]) and secret not in out
    assert sum(counts.values()) >= 1
    # the rest of the line, what the parser reads, is untouched
    assert out.split(b'"')[0] == line.split(b'"')[0] and out.split(b'"')[-1] == line.split(b'"')[-1]


def test_secret_cut_short_by_strace_loses_its_visible_part():
    for buf, secret in [(PLAIN_TOKEN[:-4], b"PlainPw-"), (OAUTH_TOKEN[:60], JWT[:20]), (SCRAM[2][0][:70], b"Proof")]:
        out = redact.scrub_line(_line(buf, "octal", cut=True), {})
        assert secret not in out, out
    # as little as one character of a password before the cut (a long client id)
    for keep in (1, 2):
        for style in ("octal", "x", "xx"):
            out = redact.scrub_line(_line(PLAIN_TOKEN[:len(PLAIN_TOKEN) - 12 + keep], style, cut=True), {})
            assert sasl.decode(out.split(b'"')[1]).endswith(b"alice\0" + R), out


def test_sasl_wire_format_decides_not_a_lookalike():
    """A Kafka frame starts "\\0\\0\\0(\\0$\\0": NUL, "$", NUL, like a PLAIN
    token; only the token's own length makes it one. Produce requests with
    long client ids and topic names stay as they are."""
    produce = (b"\0\0\0\x90\0\0\0\x07\0\0\0\x05\0 rdkafka-a-client-id-of-32-chars\0\xff\xff\0\0\0\x01"
               b"\0\x0ckdiag-probe!\0\0\0\x01\0\0\0\0\0\0\0\x50xxxxxxxx")
    for style in ("octal", "x", "xx"):
        line = _line(produce, style)
        assert redact.scrub_line(line, {}) == line
    out = sasl.decode(redact.scrub_line(_line(PLAIN_TOKEN, "octal"), {}).split(b'"')[1])
    assert out == PLAIN_TOKEN.replace(b"PlainPw-9f3a", R), "the frame, the client id and the user stay"


def test_strace_escaping_round_trips():
    data = bytes(range(256)) + b'"\\\n0\x001\x0012'
    for style in ("octal", "x", "xx"):
        assert sasl.decode(sasl.encode(data, style)) == data


@pytest.mark.parametrize("line,secret", [
    (b"sasl.oauthbearer.config=principal=alice extension_traceToken=ExtVal-77aa scope=x", b"ExtVal-77aa"),
    (b'1.0 read(3, "sasl.oauthbearer.config=principal=alice extension_a=ExtVal-77aa\\n", 99) = 99', b"ExtVal-77aa"),
    (b'{"sasl.oauthbearer.config": "principal=alice extension_a=ExtVal-77aa"}', b"ExtVal-77aa"),
    (b"ssl.key.pem=-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0B\\n-----END PRIVATE KEY-----", b"MIIEvQ"),
    (b"ssl_keyfile_password: KeyPw-41d0", b"KeyPw-41d0"),
    (b"KAFKA_SASL_PASSWD=EnvPw-1234 KAFKA_API_KEY=EnvKey-5678", b"EnvPw-1234"),
])
def test_config_forms(line, secret):
    assert secret not in redact.scrub_line(line, {})


def test_argv_and_config_for_the_manifest():
    argv = ["kdiag", "trace", "-X", "sasl.oauthbearer.config=principal=alice extension_traceToken=ExtVal-77aa",
            "-X", "ssl.key.pem=-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0B", "--", "python3", "p.py",
            '{"sasl.username": "alice", "sasl.password": "PlainPw-9f3a"}', "--password", "CliPw-0001",
            "--api-key=ApiKey-0002"]
    out = json.dumps(redact.argv(argv))
    for secret in ("ExtVal-77aa", "MIIEvQ", "PlainPw-9f3a", "CliPw-0001", "ApiKey-0002"):
        assert secret not in out
    assert "alice" in out and "p.py" in out
    cfg = {"sasl.oauthbearer.config": "principal=alice extension_traceToken=ExtVal-77aa",
           "ssl.key.pem": "-----BEGIN PRIVATE KEY-----", "ssl.keystore.password": "StorePw-93b1",
           "sasl.oauthbearer.client.secret": "ClSecret-8e2f", "bootstrap.servers": "b:9092"}
    assert set(redact.config(cfg).values()) == {redact.REDACTED, "b:9092"}
    assert "ExtVal-77aa" in redact.secret_values(cfg) and "alice" not in redact.secret_values(cfg)


# ---------------------------------------------------------------- a real traced producer

CONFIG_FILE = ("ssl.key.password=KeyPw-41d0\nssl.keystore.password=StorePw-93b1\n"
               "sasl.oauthbearer.client.secret=ClSecret-8e2f\n"
               "sasl.oauthbearer.config=principal=alice extension_fileToken=FileExt-6d1c\n"
               "ssl.key.pem=-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0B\\n-----END PRIVATE KEY-----\n")
RUNS = [["PLAIN", {"sasl.username": "alice", "sasl.password": "PlainPw-9f3a71"}],
        ["SCRAM-SHA-256", {"sasl.username": "alice", "sasl.password": "ScramPw-5c2e88"}],
        ["OAUTHBEARER", {"enable.sasl.oauthbearer.unsecure.jwt": True,
                         "sasl.oauthbearer.config": "principal=alice extension_traceToken=ExtVal-77aa01"}]]
PLANTED = [b"PlainPw-9f3a71", b"ScramPw-5c2e88", b"ExtVal-77aa01", b"KeyPw-41d0", b"StorePw-93b1",
           b"ClSecret-8e2f", b"FileExt-6d1c", b"MIIEvQIBADANBgkqhkiG9w0B", b"EnvPw-70b3"]


def _wire_secrets(tokens: list[bytes]) -> list[bytes]:
    """What went on the wire and must not be in the bundle: the PLAIN
    password, SCRAM's nonces, salt, proof and signature, the JWT."""
    found = []
    for t in tokens:
        found += [v for _k, v in re.findall(rb"(?:^|,)([rspv])=([^,]{8,})", t)]
        found += re.findall(rb"auth=Bearer ([^\x01]+)", t)
        found += re.findall(rb"\x01extension_\w+=([^\x01]+)", t)
        if t.count(b"\0") == 2:
            found.append(t.rsplit(b"\0", 1)[1])
    return found


@pytest.mark.e2e
def test_traced_sasl_producer_leaves_no_secret_in_the_bundle(tmp_path):
    need("strace", root=True)
    cfg = tmp_path / "client.properties"
    cfg.write_text(CONFIG_FILE)
    tokens_path, out = tmp_path / "tokens.json", tmp_path / "sasl.tar.gz"
    env = {**os.environ, "KDIAG_TEST_TOKENS": str(tokens_path), "KAFKA_SASL_PASSWORD": "EnvPw-70b3"}
    res = subprocess.run([sys.executable, "-m", "kdiag", "trace", "--tracer", "strace", "--duration", "40", "-o",
                          str(out), "--", sys.executable, str(ROOT / "tests" / "producers" / "sasl_loopback.py"),
                          str(cfg), json.dumps(RUNS)], capture_output=True, text=True, cwd=ROOT, env=env, timeout=240)
    assert out.exists(), res.stderr
    tokens = [bytes.fromhex(h) for h in json.loads(tokens_path.read_text())]
    wire = _wire_secrets(tokens)
    # every mechanism authenticated: PLAIN, SCRAM's two rounds both ways, OAUTHBEARER
    assert any(t.startswith(b"n,,n=alice") for t in tokens) and any(t.startswith(b"v=") for t in tokens)
    assert b"PlainPw-9f3a71" in wire and any(w.startswith(b"eyJ") for w in wire) and len(wire) >= 8
    members = bundle_bytes(out)
    strace = members["raw/strace/strace.txt"]
    assert strace.count(b"SaslAuthenticate") >= 4 and strace.count(R) >= 8, "the exchanges were captured"
    assert b"alice" in strace, "the user name stays"
    leaks = [(name, s) for name, data in members.items() for s in PLANTED + wire
             if s in data or sasl.encode(s) in data]
    assert leaks == []
    manifest = json.loads(members["manifest.json"])
    assert sum(manifest["redaction"]["by_pattern"].get(k, 0) for k in ("sasl_plain", "sasl_scram",
                                                                        "sasl_oauthbearer")) >= 8
