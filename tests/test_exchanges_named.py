"""A producer that logs nothing (kafka-python, traced by strace -s 256):
its requests inferred from syscalls are named by the Kafka request header
each burst's first write begins with, so that only its Produce requests are
judged and each has its correlation id (bpfcalls keeps the same bytes:
tests/test_bpfcalls_named.py). Without those bytes (TLS, a tracer that keeps
none) the exchanges are as before: unnamed."""
from __future__ import annotations

import pytest

from conftest import ROOT
from kdiag.analysis.spark_plumbing import read_table

STRACE = ROOT / "fixtures" / "strace" / "kafka_python_plain.txt"


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    from kdiag.ingest.tables import parse_paths

    out = tmp_path_factory.mktemp("tables")
    parse_paths([STRACE], out)
    return out


def test_exchanges_are_named_by_their_first_write(spark, tables):
    from kdiag.analysis.per_request import exchanges, prepare_syscalls

    sc = read_table(spark, tables, "syscalls")
    named = exchanges(prepare_syscalls(sc, heads=True)).collect()
    produce = [r for r in named if r.request == "Produce"]
    # 30 messages, each sent and waited for: one Produce each, after the
    # connection's ApiVersions (correlation id 1).
    assert sorted(r.corr_id for r in produce) == list(range(2, 32)), [(r.request, r.corr_id) for r in named]
    assert {r.request for r in named} - {"Produce"} <= {"ApiVersions", "Metadata"}
    assert {r.client for r in named} == {"kafka-python-producer-1"}
    assert all(r.req_bytes == 338 for r in produce)
    # The same bursts, unnamed, where the bytes are not read (as for
    # librdkafka's TLS writes or bpftrace).
    plain = exchanges(prepare_syscalls(sc)).collect()
    assert sorted(r.send_us for r in plain) == sorted(r.send_us for r in named)
    assert {(r.request, r.corr_id, r.client) for r in plain} == {("exchange", None, None)}


@pytest.mark.parametrize("head,expected", [
    (r"\0\0\1N\0\0\0\t\0\0\0\2\0\27kafka-python-producer-1\0\0\0\1\0\0u0",
     ("Produce", 2, "kafka-python-producer-1")),
    (r"\0\0\0&\0\3\0\f\0\0\0\2\0\5ab", ("Metadata", 2, None)),    # the client id cut short
    (r"\27\3\3\0\37\212", None),                      # a TLS record
    (r"\0\0\0\5hello", None),                         # too short for a request header
    ("", None),
    (None, None),
])
def test_request_of_head(head, expected):
    from kdiag.analysis.per_request import request_of_head

    got = request_of_head(head)
    assert (got if got is None else tuple(got)) == expected


def test_replay_judges_only_the_produce_requests(spark):
    """The whole analysis of the same trace: 30 requests judged, not the 33
    exchanges, and the findings say how they were named."""
    import io
    import json

    from kdiag.cli import Environment, main

    out = io.StringIO()
    rc = main(["replay", "--json", str(STRACE)], Environment(stdout=out, stderr=io.StringIO()))
    f = json.loads(out.getvalue())
    assert rc == 0 and f["summary"]["source"] == "syscalls" and f["summary"]["requests"] == 30, f["summary"]
    assert any("named by the Kafka request header" in u for u in f["unknowns"]), f["unknowns"]


@pytest.mark.parametrize("head,expected", [
    (r"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", True),      # a ClientHello
    (r"\26\3\1\2\0\1\0\1\374\3\3", True),                      # the same, as strace escapes by default
    (r"\x14\x03\x03\x00\x01\x01\x17\x03\x03\x00E", True),          # TLS 1.3's change_cipher_spec, then Finished
    (r"\x17\x03\x03\x00L", False),                              # application data: a request, or Finished alone
    (r"\0\0\0&\0\3\0\f\0\0\0\2\0\5ab", False),                  # a plaintext Kafka request
    (r"\x16", False),
    ("", False),
    (None, False),
])
def test_a_tls_handshake_write_is_told_by_its_record(head, expected):
    from kdiag.analysis.per_request import is_tls_handshake

    assert is_tls_handshake(head) is expected


def _strace_with(spark, tmp_path, connect: bool, first_head: str = '""...') -> list:
    """Four exchanges on one TLS socket (no bytes kept but the first
    write's), after its connect() or not: an excerpt that begins
    mid-connection."""
    from kdiag.analysis.per_request import exchanges, prepare_syscalls
    from kdiag.ingest.tables import parse_paths

    fd = "6<TCP:[127.0.0.1:40000->127.0.0.1:9093]>"
    lines = [f"100 1795000000.000100 connect({fd}, {{sa_family=AF_INET, sin_port=htons(9093), "
             f'sin_addr=inet_addr("127.0.0.1")}}, 16) = 0 <0.000050>'] if connect else []
    for i in range(4):
        t = 1795000000.001 + i * 0.1
        head = first_head if i == 0 else '""...'
        lines += [f"100 {t:.6f} write({fd}, {head}, 300) = 300 <0.000020>",
                  f"100 {t + 0.0001:.6f} poll([{{fd=6, events=POLLIN}}], 1, 1000) = 1 ([{{fd=6, revents=POLLIN}}]) "
                  f"<0.002000>",
                  f"100 {t + 0.0022:.6f} read({fd}, \"\"..., 4096) = 100 <0.000010>"]
    f = tmp_path / "strace.txt"
    f.write_text("\n".join(lines) + "\n")
    parse_paths([f], tmp_path / "t")
    return exchanges(prepare_syscalls(read_table(spark, tmp_path / "t", "syscalls"), heads=True)) \
        .orderBy("send_us").collect()



@pytest.mark.parametrize("connect,head,openings", [
    (True, '""...', [True, False, False, False]),          # the first exchange after connect(): ApiVersions
    (False, '""...', [False, False, False, False]),        # an excerpt from mid-connection: no opening
    (False, r'"\x16\x03\x01\x02\x00"...', [True, False, False, False]),   # a ClientHello, wherever it is
    (True, r'"\x16\x03\x01\x02\x00"...', [True, True, False, False]),     # the handshake, then ApiVersions
])
def test_a_connections_opening_is_not_a_request(spark, tmp_path, connect, head, openings):
    got = _strace_with(spark, tmp_path, connect, head)
    assert [r.opening for r in got] == openings, [(r.send_us, r.opening) for r in got]
