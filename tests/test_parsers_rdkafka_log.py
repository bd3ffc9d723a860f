import pyarrow as pa
import pyarrow.compute as pc
from conftest import CAPTURES
from hypothesis import given, settings
from hypothesis import strategies as st

from kdiag.parsers.rdkafka_log import RdkafkaLogParser, looks_like, parse_lines

SEND = ("%7|1795314017.477|SEND|rdkafka#producer-1| [thrd:ssl://127.0.0.1:19093/111]: "
        "ssl://127.0.0.1:19093/111: Sent ProduceRequest (v10, 2164 bytes @ 0, CorrId 20)")
RECV = ("%7|1795314017.520|RECV|rdkafka#producer-1| [thrd:ssl://127.0.0.1:19093/111]: "
        "ssl://127.0.0.1:19093/111: Received ProduceResponse (v10, 48 bytes, CorrId 20, rtt 43.04ms)")


def lines_of(name):
    return (CAPTURES / name / "rdkafka.log").read_text().splitlines()


def test_send_and_recv_fields():
    t, c = parse_lines([SEND, RECV])
    assert c.lines == 2 and c.parsed == 2 and c.skipped_total == 0
    send, recv = t.to_pylist()
    assert send["event"] == "send" and send["request"] == "Produce" and send["api_version"] == 10
    assert send["size_bytes"] == 2164 and send["corr_id"] == 20
    assert send["broker"] == "ssl://127.0.0.1:19093/111" and send["client"] == "rdkafka#producer-1"
    assert send["ts_us"] == 1795314017477000 and send["level"] == 7 and send["facility"] == "SEND"
    assert recv["event"] == "recv" and recv["rtt_ms"] == 43.04 and recv["size_bytes"] == 48


def test_other_event_kinds():
    base = "%7|1700000000.001|X|rdkafka#producer-2| [thrd:ssl://b:9093/3]: ssl://b:9093/3: "
    t, _ = parse_lines([
        base + "Sent partial ProduceRequest (v7, 1000+500/2219 bytes, CorrId 9)",
        base + "Retrying ProduceRequest (v7, 2219 bytes, retry 1/2, prev CorrId 9) in 100ms",
        base + "Response for unknown CorrId 12 (timed out?)",
        base + "Broker changed state UP -> DOWN",
        base + "Connecting to ipv4#10.0.0.1:9093 (ssl) with socket 12",
        # librdkafka before 0.9.2 printed no " @ offset" in Sent lines
        base + "Sent ProduceRequest (v2, 300 bytes, CorrId 4)",
        "%7|1700000000.002|INIT|rdkafka#producer-2| [thrd:app]: librdkafka v1.9.2 (0x10902ff) rdkafka#producer-2 initialized (builtin.features gzip)",
    ])
    rows = t.to_pylist()
    assert [r["event"] for r in rows] == ["send_partial", "retry", "unknown_corrid", "state", "connect", "send", "init"]
    assert rows[0]["size_bytes"] == 2219 and rows[0]["detail"] == "1000+500" and rows[0]["corr_id"] == 9
    assert rows[1]["detail"] == "1/2" and rows[1]["corr_id"] == 9
    assert rows[2]["corr_id"] == 12
    assert rows[3]["detail"] == "UP -> DOWN" and rows[3]["broker"] == "ssl://b:9093/3"
    assert rows[4]["detail"] == "ipv4#10.0.0.1:9093 (ssl)"
    assert rows[5]["corr_id"] == 4 and rows[5]["size_bytes"] == 300
    assert rows[6]["detail"] == "1.9.2" and rows[6]["broker"] is None and rows[6]["thread"] == "app"


def test_plaintext_broker_and_old_retry_wording():
    """rd_kafka_mk_brokername() gives plaintext brokers no scheme; before
    0.11.4 a Retrying line had no prev CorrId."""
    base = "%7|1700000000.001|X|rdkafka#producer-1| [thrd:127.0.0.1:9092/1]: 127.0.0.1:9092/1: "
    state = ("%7|1700000000.002|X|rdkafka#producer-1| [thrd:main]: localhost:9092/bootstrap: "
             "Broker changed state INIT -> CONNECT")
    t, _ = parse_lines([base + "Sent ProduceRequest (v3, 2170 bytes @ 0, CorrId 5)",
                        base + "Retrying ProduceRequest (v3, 2170 bytes, retry 1/2)", state])
    rows = t.to_pylist()
    assert [r["broker"] for r in rows] == ["127.0.0.1:9092/1", "127.0.0.1:9092/1", "localhost:9092/bootstrap"]
    assert rows[0]["thread"] == "127.0.0.1:9092/1" and rows[0]["corr_id"] == 5
    assert rows[1]["event"] == "retry" and rows[1]["corr_id"] is None and rows[1]["detail"] == "1/2"
    assert rows[2]["event"] == "state" and rows[2]["detail"] == "INIT -> CONNECT"


def test_real_capture_pairs_every_produce():
    t, c = parse_lines(lines_of("nagle_on"))
    assert c.skipped_total == 0 and c.parsed == c.lines
    ev = t["event"].to_pylist()
    produce = pc.equal(t["request"], "Produce")
    sends = t.filter(pc.and_(produce, pc.equal(t["event"], "send")))
    recvs = t.filter(pc.and_(produce, pc.equal(t["event"], "recv")))
    assert len(sends) == len(recvs) == 30
    assert set(sends["corr_id"].to_pylist()) == set(recvs["corr_id"].to_pylist())
    # Nagle on: every Produce round trip pays the delayed ACK
    assert pc.min(recvs["rtt_ms"]).as_py() > 35
    assert ev.count("init") == 1


def test_bad_lines_counted_never_dropped():
    bad = ["", "garbage", "%7|12", "\ufffd\ufffd binary", "%7|1700000000.001|SEND|c| " + "x" * 100_000,
           SEND[: len(SEND) // 2]]
    t, c = parse_lines([SEND, *bad, RECV])
    assert c.lines == 8
    assert c.parsed + c.skipped_total == c.lines
    assert c.skipped["not_librdkafka"] == 4
    # a truncated line that keeps its header is still a librdkafka line
    assert t["event"].to_pylist().count("other") == 2
    assert {ex[1] for ex in c.examples} == {"not_librdkafka"}


def test_out_of_range_numbers_do_not_crash():
    t, _ = parse_lines([RECV.replace("CorrId 20", "CorrId 3000000000")])
    assert t["event"][0].as_py() == "recv" and t["corr_id"][0].as_py() is None


def test_chunks_give_the_same_rows():
    lines = lines_of("nagle_on")
    whole, _ = parse_lines(lines)
    p = RdkafkaLogParser()
    parts = [p.feed(pa.array(lines[:100]), 1), p.feed(pa.array(lines[100:]), 101), p.finish()]
    assert pa.concat_tables(parts).equals(whole)
    assert p.counts.lines == len(lines)


def test_looks_like():
    assert looks_like(lines_of("nagle_on")[:50]) == 1.0
    assert looks_like(['{"brokers": {}}', "12345 1795314017.1 write(2, ...) = 3"]) == 0.0
    assert looks_like([]) == 0.0


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=300), max_size=30))
def test_never_raises_and_counts_balance(lines):
    lines = [ln.replace("\n", " ") for ln in lines]
    t, c = parse_lines(lines)
    assert c.lines == len(lines) and c.parsed + c.skipped_total == c.lines and len(t) == c.parsed


@settings(max_examples=200, deadline=None)
@given(st.integers(0, len(SEND)), st.text(max_size=20))
def test_mutated_real_lines(cut, junk):
    line = SEND[:cut] + junk.replace("\n", "") + SEND[cut:]
    t, c = parse_lines([line])
    assert c.parsed + c.skipped_total == 1 and len(t) == c.parsed


def test_an_applications_produce_line_and_v08_queue_counts():
    """The application's own timed line handing a message over is an
    app_produce row; one without a time, or a delivery report, is not.
    librdkafka 0.8's TOPPAR "topic [p] N+M msgs" is an xmit_queue row."""
    t, c = parse_lines([
        "2026-11-22 04:10:03.140 | sending message 7 to payments",
        "sending message 8 to payments",
        "2026-11-22 04:10:03.150 | Produced record to payments [0] @ offset 12",
        "2026-11-22 04:10:04.001|DEBUG|ingest|10.1.1.1:9092/0: payments [3] 2+1 msgs",
        "%7|1795314017.477|SEND|rdkafka#producer-1| [thrd:h:9092/1]: h:9092/1: Sent ProduceRequest "
        "(v7, 200 bytes @ 0, CorrId 5)",
    ])
    rows = {r["line_no"]: r for r in t.to_pylist()}
    assert rows[1]["event"] == "app_produce" and rows[1]["ts_us"] is not None and rows[1]["broker"] is None
    assert 2 not in rows and 3 not in rows and c.skipped.get("not_librdkafka") == 2
    assert (rows[4]["event"], rows[4]["topic"], rows[4]["partition"], rows[4]["count"], rows[4]["msgs"]) == \
        ("xmit_queue", "payments", 3, 2, 1)
    assert rows[5]["event"] == "send"
