"""Redaction by pattern: secrets kdiag was never told about."""
import json
import shutil

import pytest

from conftest import CAPTURES, ROOT
from kdiag.bundle.redact import REDACTED, scrub_line, scrub_patterns_file

R = REDACTED.encode()

CASES = [
    # (line, the secret that must go)
    (b"sasl.password=hunter22 other", b"hunter22"),
    (b'1.0 write(2, "sasl.password=s3cretvalue\\n", 27) = 27', b"s3cretvalue"),
    (b'{"sasl.password": "Json S3cret", "x": 1}', b"S3cret"),
    (b'1.0 read(5</etc/kafka/jaas.conf>, "KafkaClient { org.apache.kafka.common.security.plain.PlainLoginModule '
     b'required username=\\"alice\\" password=\\"alice-S3cret\\";\\n};\\n", 4096) = 120', b"alice-S3cret"),
    (b'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="bob" '
     b'password="bob secret with spaces";', b"with spaces"),
    (b'1.0 read(7</etc/ssl/client.key>, "-----BEGIN RSA PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwg\\n"'
     b'..., 4096) = 1704', b"MIIEvQIBADANBgkq"),
    (b"ssl.key.password: KeyP4ss", b"KeyP4ss"),
    (b"ssl.keystore.password=ks-P4ss ssl.truststore.password=ts-P4ss", b"P4ss"),
    (b"sasl.oauthbearer.client.secret=cl1ent-s3cret&scope=x", b"cl1ent-s3cret"),
    (b"Authorization: Bearer abcdefghijklmnop.qrs", b"abcdefghijklmnop"),
    (b"token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
     b"dozjgNry"),
    (b'1.0 write(2, "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjPl4ntedPemBodyAoIBAQC7\\n", 63) = 63', b"MIIEvQ"),
]


@pytest.mark.parametrize("line,secret", CASES)
def test_each_kind_goes(line, secret):
    counts = {}
    out = scrub_line(line, counts)
    assert secret not in out and R in out and sum(counts.values()) >= 1


def test_what_the_analysis_reads_is_untouched(tmp_path):
    """No pattern fires on real captures, and statistics stay valid JSON."""
    files = sorted(CAPTURES.glob("*/*.log")) + sorted(CAPTURES.glob("*/*.txt")) + \
        sorted(CAPTURES.glob("*/*.jsonl")) + sorted((ROOT / "fixtures" / "strace").glob("*.txt"))
    assert files
    for f in files:
        counts = {}
        copy = tmp_path / f.name
        shutil.copy(f, copy)
        assert scrub_patterns_file(copy, counts) == 0, (f, counts)
        assert copy.read_bytes() == f.read_bytes()
    counts = {}
    line = b'{"brokers": {"b": {"throttle": {"max": 0}, "token_refresh": 3, "secret_flag": true}}}'
    assert json.loads(scrub_line(line, counts)) == json.loads(line) and not counts


@pytest.mark.parametrize("block", [16, 64, 8 << 20])
def test_pem_block_over_real_lines(tmp_path, monkeypatch, block):
    """Also with the block boundary inside the PEM block."""
    import kdiag.bundle.redact

    monkeypatch.setattr(kdiag.bundle.redact, "BLOCK", block)
    f = tmp_path / "stderr.log"
    f.write_bytes(b"before\n-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA1111secret\nBBBB2222secret\n"
                  b"-----END ENCRYPTED PRIVATE KEY-----\nafter\n")
    counts = {}
    assert scrub_patterns_file(f, counts) >= 1
    text = f.read_bytes()
    assert b"secret" not in text and text.startswith(b"before\n") and text.endswith(b"after\n")
    assert b"-----END ENCRYPTED PRIVATE KEY-----" in text


def test_long_line_and_binary(tmp_path):
    f = tmp_path / "big.txt"
    f.write_bytes(b"x" * (4 << 20) + b" sasl.password=deep-S3cret\n\xff\xfe\x00 password=bin-S3cret\n")
    counts = {}
    scrub_patterns_file(f, counts)
    text = f.read_bytes()
    assert b"S3cret" not in text and len(text) > 4 << 20
