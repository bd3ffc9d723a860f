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


# ---------------------------------------------------------------- structure: command lines, file buffers

@pytest.mark.parametrize("args,secret", [
    (["p.py", "--pw", "Cmd-s3cret"], "Cmd-s3cret"),
    (["p.py", "--sasl-pass", "Cmd-s3cret"], "Cmd-s3cret"),
    (["p.py", "--sasl-pass=Cmd-s3cret"], "Cmd-s3cret"),
    (["p.py", "--pw", "-leading-dash-s3cret"], "leading-dash-s3cret"),
    (["p.py", "--api-token", "Cmd-s3cret"], "Cmd-s3cret"),
    (["p.py", "--clientSecret", "Cmd-s3cret"], "Cmd-s3cret"),
    (["p.py", "-X", "sasl.password=Cmd-s3cret"], "Cmd-s3cret"),
    (["p.py", "-X", "basic.auth.user.info=alice:Cmd-s3cret"], "Cmd-s3cret"),
    (["p.py", "--bootstrap", "sasl_ssl://alice:Cmd-s3cret@kafka-1:9093"], "Cmd-s3cret"),
    (["p.py", "--registry=https://bob:Cmd-s3cret@sr.example.com:8081/subjects"], "Cmd-s3cret"),
])
def test_command_line_by_structure(args, secret):
    from kdiag.bundle.redact import argv

    out = argv(args)
    assert secret not in " ".join(out) and REDACTED in " ".join(out) and len(out) == len(args)


def test_command_line_keeps_what_names_no_secret():
    from kdiag.bundle.redact import argv

    args = ["p.py", "--topic", "orders", "--keepalive", "30", "-b", "kafka-1:9093", "--auth", "--verbose",
            "-X", "linger.ms=5", "ssl://kafka-1:9093/1"]
    assert argv(args) == [*args[:8], "--verbose", *args[9:]]


def _dropped(tmp_path, text: bytes) -> tuple[bytes, dict]:
    from kdiag.bundle.redact import drop_buffers_file

    f = tmp_path / "strace.txt"
    f.write_bytes(text)
    counts = {}
    drop_buffers_file(f, counts)
    return f.read_bytes(), counts


def test_file_buffers_go_sizes_stay(tmp_path):
    """A key file read in 64-byte pieces (its BEGIN line in the read before
    the body), a DER key's bytes in octal, a config, a pipe, and a read left
    unfinished by another thread's line: only their sizes stay."""
    text = (b'1 1.0 read(3</k/client.key>, "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCB", 64)'
            b' = 64 <0.000010>\n'
            b'1 1.1 read(3</k/client.key>, "KcwggSjPemB0dyPieceAoIBAQC7x", 64) = 28 <0.000010>\n'
            b'1 1.2 read(4</k/client.der>, "0\\201\\207\\2\\1\\0000\\23\\6\\7*\\206H\\316=\\2\\1\\6\\10*\\206H\\316=\\3\\1'
            b'\\7\\4m0k\\2\\1\\1\\4 \\321\\17\\377DerScalar", 4096) = 138 <0.000010>\n'
            b'1 1.3 read(5</k/registry.properties>, "basic.auth.user.info=alice:SrPw\\n", 4096) = 32 <0.000010>\n'
            b'2 1.4 read(6<pipe:[99]>,  <unfinished ...>\n'
            b'1 1.5 write(7</k/out.json>, "{\\"sasl.password\\": \\"x\\"}", 24) = 24 <0.000010>\n'
            b'2 1.6 <... read resumed>"PipeSecret", 4096) = 10 <0.000010>\n'
            b'[pid 3] 1.7 pread64(8</k/app.py>, "SASL_PASSWORD = \\"SrcLiteral\\"", 29, 0) = 29 <0.000010>\n')
    out, counts = _dropped(tmp_path, text)
    for secret in (b"MIIEvQ", b"PemB0dy", b"DerScalar", b"\\321\\17", b"SrPw", b"PipeSecret", b"sasl.password",
                   b"SrcLiteral"):
        assert secret not in out, secret
    assert counts == {"file_buffer": 7}
    lines = out.splitlines()
    assert len(lines) == len(text.splitlines())
    assert lines[0] == b'1 1.0 read(3</k/client.key>, "[REDACTED]"..., 64) = 64 <0.000010>'
    assert lines[6] == b'2 1.6 <... read resumed>"[REDACTED]"..., 4096) = 10 <0.000010>'
    # sealed again: nothing changes, and the count is what the file holds dropped
    again, counts = _dropped(tmp_path, out)
    assert again == out and counts == {"file_buffer": 7}


def test_log_and_socket_bytes_stay(tmp_path):
    text = (b'1 1.0 write(2</tmp/stderr.log>, "%7|1.0|SEND|rdkafka#producer-1| [thrd:x]: Sent\\n", 48) = 48\n'
            b'1 1.1 writev(1<pipe:[5]>, [{iov_base="%7|1.1|RECV|rdkafka#producer-1| x\\n", iov_len=34}], 1) = 34\n'
            b'1 1.2 read(9<TCP:[127.0.0.1:1->127.0.0.1:2]>, "\\0\\0\\0\\f\\0\\0\\0\\1", 65536) = 8\n'
            b'1 1.3 sendto(9<UDP:[127.0.0.1:1->127.0.0.53:53]>, "\\22\\4\\1\\0", 4, 0, NULL, 0) = 4\n'
            b'2 1.4 read(9<TCP:[127.0.0.1:1->127.0.0.1:2]>,  <unfinished ...>\n'
            b'2 1.5 <... read resumed>"\\0\\0\\0\\4", 65536) = 4\n'
            b'1 1.6 read(3</etc/hosts>, "127.0.0.1\\tlocalhost\\n", 4096) = 20\n'
            b'1 1.7 openat(AT_FDCWD</>, "/k/client.key", O_RDONLY) = 3</k/client.key>\n')
    out, counts = _dropped(tmp_path, text)
    assert out == text and not counts


def test_dropping_leaves_what_the_analysis_reads(tmp_path):
    """Real captures parse to the same rows, but for the arguments of reads
    and writes on files and pipes."""
    import pyarrow.compute as pc

    from kdiag.parsers.strace import parse_lines

    files = sorted((ROOT / "fixtures" / "strace").glob("*.txt")) + sorted(CAPTURES.glob("*/strace*.txt"))
    assert files
    dropped_any = 0
    for f in files:
        out, counts = _dropped(tmp_path, f.read_bytes())
        dropped_any += counts.get("file_buffer", 0)
        before, _ = parse_lines(f.read_text(errors="surrogateescape").splitlines())
        after, _ = parse_lines(out.decode(errors="surrogateescape").splitlines())
        assert before.drop_columns(["args"]) == after.drop_columns(["args"]), f
        changed = pc.not_equal(before["args"], after["args"])
        assert all(s.startswith(("read", "pread", "write", "pwrite"))
                   for s in before["syscall"].filter(pc.fill_null(changed, False)).to_pylist()), f
    assert dropped_any


def test_short_name_of_a_pseudonymised_host(tmp_path):
    """The short name stands for the host the fully qualified one names,
    also in a file read before the one that names it."""
    from kdiag.bundle.pseudonym import Pseudonyms

    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "a.log").write_text("connect kafka-prod-7:9093 ok; kafka-prod-7 went down\n")
    (raw / "b.log").write_text("dialing kafka-prod-7.corp.example.com\n")
    ps = Pseudonyms.load_or_create(tmp_path / "map.json")
    try:
        ps.tree(raw)
        out = (raw / "a.log").read_text() + (raw / "b.log").read_text()
        assert "kafka-prod-7" not in out and out.count(ps.hostname("kafka-prod-7")) == 2, out
        assert ps.hostname("kafka-prod-7.corp.example.com") in out
    finally:
        ps.close()


def test_sealing_drops_what_an_older_capture_kept(tmp_path):
    """A capture kdiag died before cleaning (or an older kdiag's) loses its
    file buffers when sealed; the count says how many the bundle holds dropped."""
    from kdiag.bundle.redact import scrub_tree_patterns

    raw = tmp_path / "raw" / "strace"
    raw.mkdir(parents=True)
    (raw / "strace.txt").write_bytes(b'7 1.0 read(3</k/registry.properties>, "url=https://u:SrPw@h\\n", 99) = 21\n'
                                     b'7 1.1 read(3</k/client.der>, "0\\201\\207\\2\\1\\0000\\23", 4096) = 138\n')
    counts = scrub_tree_patterns(tmp_path / "raw")
    assert counts == {"file_buffer": 2}
    assert b"SrPw" not in (raw / "strace.txt").read_bytes() and b"\\201" not in (raw / "strace.txt").read_bytes()
