"""A packet capture replayed: alone, it is the source of the requests; beside
the librdkafka log of the same run, it splits the log's requests. The
captures are real lab runs kept in fixtures/wire/lab (make_lab_captures.py
retakes them)."""
from __future__ import annotations

import io
import json
from pathlib import Path

from conftest import FIXTURES
from kdiag.analysis import wire
from kdiag.parsers.wire.parser import RELAY_HOP, parse_capture, seen_from

LAB = FIXTURES / "wire" / "lab"


def _replay(*paths: Path, text: bool = False):
    from kdiag.cli import Environment, main

    out, err = io.StringIO(), io.StringIO()
    rc = main(["replay", *([] if text else ["--json"]), *map(str, paths)], Environment(stdout=out, stderr=err))
    assert rc == 0, err.getvalue()
    return out.getvalue() if text else json.loads(out.getvalue())


def test_the_tls_terminators_plaintext_side_names_the_producers_requests():
    """nagle-on on loopback: the producer's TLS connections and stunnel's
    onward plaintext ones. Each plaintext exchange lies inside a TLS one and
    lends it its api and correlation id; the producer's socket holds every
    Produce request's later records until the ACK."""
    tables, counts, _ = parse_capture((LAB / "nagle-on.pcap").read_bytes())
    conns = tables["wire_connections"].to_pylist()
    reqs = tables["wire_requests"].to_pylist()
    assert counts.lines == counts.parsed and not counts.skipped
    mine = [c for c in conns if c["hop"] == wire.CLIENT_HOP]
    relays = [c for c in conns if c["hop"] == RELAY_HOP]
    assert {c["protocol"] for c in mine} == {"tls"} and {c["protocol"] for c in relays} == {"kafka"}
    assert {c["relayed_by"] for c in relays} == {c["flow"] for c in mine}
    produce = [r for r in reqs if r["hop"] == wire.CLIENT_HOP and r["api"] == "Produce"]
    assert len(produce) >= 15 and all(r["decoded_from"] is not None and r["corr_id"] for r in produce)
    assert [c["nodelay"] for c in mine if c["requests"] > 5] == [False]
    held = [r["held_ms"] for r in produce if r["held_after_ack"]]
    assert len(held) >= len(produce) - 3 and 35 <= sorted(held)[len(held) // 2] <= 60, held


def test_a_capture_alone_names_nagle_from_the_wire(spark):
    got = _replay(LAB / "nagle-on.pcap")
    assert got["verdict"] == "nagle_delayed_ack" and got["summary"]["source"] == "wire"
    assert got["confidence"].startswith("high"), got["confidence"]
    f = got["findings"][0]
    assert f["example"]["corr_id"] is not None and f["example"]["broker"].startswith("ssl://127.0.0.1:")
    assert any("holding a request's later segments" in e for e in f["evidence"]), f["evidence"]
    assert got["summary"]["path_rtt_source"].startswith("TCP handshakes in the packet capture")
    assert got["wire"]["producer"] >= 1 and got["wire"]["holding"]
    from kdiag.report.html import render_html

    page = render_html(got)
    assert '<ul class="plain" id="capture">' in page and "Nagle held" in page


def test_the_log_beside_its_capture_is_split_by_the_wire(spark):
    alone = _replay(LAB / "nagle-on.log")
    both = _replay(LAB / "nagle-on.log", LAB / "nagle-on.pcap")
    assert alone["confidence"].startswith(("low", "medium")) and alone["summary"]["split_ms"]["wait_response"] is None
    assert both["summary"]["source"] == "log" and both["verdict"] == "nagle_delayed_ack"
    assert both["confidence"] == wire.JOINED_CONFIDENCE and wire.JOINED in both["unknowns"]
    assert both["summary"]["split_ms"]["wait_response"] > 30
    assert both["summary"]["requests"] == alone["summary"]["requests"]


def test_a_lookup_in_the_capture_is_the_connections_resolve_phase(spark):
    """dns-slow: the lab's resolver answers 2 s late; the capture, taken in
    the client's namespace, holds the query and its answer before the SYN."""
    got = _replay(LAB / "dns-slow.pcap")
    assert got["verdict"] == "dns_slow", got["findings"]
    assert got["findings"][0]["rests_on"] == ["packets"]
    life = got["life"]
    assert life["source"] == "wire" and 1900 <= life["phases"]["resolve"]["max_ms"] <= 2600, life["phases"]
    text = _replay(LAB / "dns-slow.pcap", text=True)
    assert "the packet capture's connections" in text and "CAPTURE " in text


def test_messages_that_waited_for_metadata_are_not_the_clients_cpu(spark):
    """metadata-wait: the topic appears 3 s into the run, so the first
    Produce request carries messages produced 3 s before it. They waited
    for the topic's leader (the Metadata asked again and again), not for a
    core: the stall is counted from when the request could have left."""
    got = _replay(LAB / "metadata-wait.pcap")
    assert got["verdict"] == "metadata_wait", got["findings"]
    assert [f["cause"] for f in got["findings"]] == ["metadata_wait"], got["findings"]


def test_a_connections_first_produce_could_leave_once_metadata_was_answered(tmp_path):
    import pyarrow.parquet as pq

    tables, _, _ = parse_capture((LAB / "metadata-wait.pcap").read_bytes())
    for name, t in tables.items():
        pq.write_table(t, tmp_path / f"{name}.parquet")
    reqs = [r for r in tables["wire_requests"].to_pylist() if r["hop"] == wire.CLIENT_HOP]
    first = min((r for r in reqs if r["api"] == "Produce"), key=lambda r: r["first_us"])
    answered = max(r["response_last_us"] for r in reqs if r["api"] == "Metadata" and r["first_us"] < first["first_us"])
    ready = wire._ready(tmp_path)
    assert ready[(first["flow"], first["first_us"])] == answered
    # Its messages were produced about 3 s before it, while the leader was unknown.
    assert first["first_us"] / 1000 - first["last_record_ms"] > 2000


def test_a_client_id_that_is_a_terminal_escape_is_shown_as_data(tmp_path, spark):
    """The client id is the capture's word: bytes that would move the
    cursor are shown escaped, at the terminal and in the JSON."""
    evil = tmp_path / "evil.pcap"
    data = bytearray((LAB / "nagle-on.pcap").read_bytes())
    at = data.find(b"rdkafka")
    while at >= 0:
        # A connection's first request (ApiVersions, api key 18) keeps its
        # id: a control byte there is not taken for a Kafka request at all.
        if data[at - 10:at - 8] != b"\x00\x12":
            data[at:at + 7] = b"\x1b[2J\x1b[H"
        at = data.find(b"rdkafka", at + 7)
    evil.write_bytes(bytes(data))
    tables, _, _ = parse_capture(evil.read_bytes())
    assert "\x1b[2J\x1b[H" in {r["client_id"] for r in tables["wire_requests"].to_pylist()}
    text = _replay(evil, text=True)
    assert "\x1b" not in text and "VERDICT: nagle_delayed_ack" in text
    got = _replay(evil)
    assert got["verdict"] == "nagle_delayed_ack"


def test_where_a_capture_was_taken_is_read_off_the_handshake():
    """At the client the SYN to SYN-ACK is the round trip and the client's
    ACK follows at once; at the server the other way round; on loopback
    neither says. The handshake's RTT is the sum either way."""
    assert seen_from(30_400.0, 35.0) == "client" and seen_from(40.0, 30_100.0) == "server"
    assert seen_from(13.0, 9.0) is None and seen_from(None, 9.0) is None
    assert seen_from(15_000.0, 14_000.0) is None   # taken mid-path: both halves long
    tables, _, _ = parse_capture((LAB / "dns-slow.pcap").read_bytes())
    mine = [c for c in tables["wire_connections"].to_pylist() if c["hop"] == wire.CLIENT_HOP and c["requests"] > 5]
    assert [c["seen_from"] for c in mine] == ["client"], mine


def test_another_clients_capture_is_read_as_its_requests(spark):
    """kafka-python (Produce v9, linger_ms=20, client id kdiag-wire) against
    the lab broker, plaintext: a producer that logs nothing here, known by
    its requests on the wire. Its messages waited for the linger before each
    request left (their CreateTime), which is what held them."""
    meta = json.loads((FIXTURES / "wire" / "kafka-python-produce-v9.json").read_text())
    tables, _, _ = parse_capture((FIXTURES / "wire" / "kafka-python-produce-v9.pcap").read_bytes())
    produce = [r for r in tables["wire_requests"].to_pylist() if r["api"] == "Produce"]
    assert len(produce) == meta["answered"] and {r["client_id"] for r in produce} == {meta["config"]["client_id"]}
    assert {r["api_version"] for r in produce} == set(meta["produce_versions"])
    got = _replay(FIXTURES / "wire" / "kafka-python-produce-v9.pcap")
    assert got["summary"]["requests"] == meta["answered"] and got["confidence"].startswith("high")
    assert got["verdict"] == "client_queueing", got["findings"]
    waited = [e for e in got["findings"][0]["evidence"] if "CreateTime" in e]
    assert waited and meta["config"]["linger_ms"] <= float(waited[0].split(" waited ")[1].split(" ms")[0]) < 200


def test_only_another_librarys_default_client_id_names_it(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kdiag.parsers.wire.parser import WIRE_REQUESTS_SCHEMA

    def said(*ids):
        rows = [{n: None for n in WIRE_REQUESTS_SCHEMA.names} | {"hop": "client", "api": "Produce", "client_id": i}
                for i in ids]
        pq.write_table(pa.Table.from_pylist(rows, WIRE_REQUESTS_SCHEMA), tmp_path / "wire_requests.parquet")
        return wire.other_client(tmp_path)

    libs, sentence = said("kafka-python-2.0.2")
    assert libs == "kafka-python" and "(kafka-python-2.0.2)" in sentence
    assert said("kafkajs", None)[0] == "kafkajs" and said("producer-1")[0] == "the Java client"
    assert said("kafka-python-producer-1")[0] == "kafka-python" and said("aiokafka-producer-2")[0] == "aiokafka"
    assert said("rdkafka") is None and said("orders-service") is None and said("kafkajs-orders") is None


def _held_request(spark, tables_dir: Path, *, gap_ms: float, after_ack: bool, handshake_ms: float = 0.02,
                  seen: str = "client") -> dict:
    """One Produce request whose three TLS records left with ``gap_ms``
    between the first and the last, answered 0.5 ms after the last, as the
    producer's side of the client-cpu lab shows it; its wire row."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kdiag.parsers.wire.parser import WIRE_CONNECTIONS_SCHEMA, WIRE_REQUESTS_SCHEMA

    t0 = 1_800_000_000_000_000
    conn = {"flow": 1, "hop": wire.CLIENT_HOP, "protocol": "tls", "client": "127.0.0.1:40000",
            "server": "127.0.0.1:9093", "syn_us": t0 - 100_000, "synack_us": t0 - 100_000 + int(handshake_ms * 1000),
            "handshake_ms": handshake_ms, "seen_from": seen}
    last = t0 + int(gap_ms * 1000)
    req = {"flow": 1, "hop": wire.CLIENT_HOP, "protocol": "tls", "client": "127.0.0.1:40000",
           "server": "127.0.0.1:9093", "corr_id": 7, "api": "Produce", "request_records": 3, "request_segments": 3,
           "first_us": t0, "last_us": last, "response_first_us": last + 500, "response_last_us": last + 600,
           "held_ms": gap_ms, "held_after_ack": after_ack, "first_record_ms": t0 // 1000, "last_record_ms": t0 // 1000}
    tables_dir.mkdir()
    pq.write_table(pa.Table.from_pylist([conn], WIRE_CONNECTIONS_SCHEMA), tables_dir / "wire_connections.parquet")
    pq.write_table(pa.Table.from_pylist([req], WIRE_REQUESTS_SCHEMA), tables_dir / "wire_requests.parquet")
    waits = {"first_p50_ms": 0.5, "last_p50_ms": 0.5}
    return wire.requests(spark, tables_dir, waits).first().asDict()


def test_a_request_held_between_its_own_records_is_the_clients_time(tmp_path, spark):
    """A gap between a request's records that no ACK ended is the client
    holding it (its thread lost the CPU), not the broker's wait; Nagle's
    hold, ended by the ACK, a gap a slow path's round trips explain, and a
    capture taken near the broker stay in the wait."""
    held = _held_request(spark, tmp_path / "cpu", gap_ms=80.0, after_ack=False)
    assert held["send_ms"] == 80.0 and held["wait_ms"] == 0.5 and held["stalled_ms"] == 80.0, held
    assert held["total_ms"] == 80.6, held
    for name, kw in {"nagle": {"gap_ms": 40.0, "after_ack": True},
                     "short": {"gap_ms": 8.0, "after_ack": False},
                     "slow_path": {"gap_ms": 80.0, "after_ack": False, "handshake_ms": 30.0},
                     "near_broker": {"gap_ms": 80.0, "after_ack": False, "seen": "server"}}.items():
        row = _held_request(spark, tmp_path / name, **kw)
        assert row["send_ms"] == 0.0 and row["wait_ms"] == kw["gap_ms"] + 0.5 and row["stalled_ms"] == 0.0, (name, row)
