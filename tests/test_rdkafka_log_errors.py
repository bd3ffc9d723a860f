"""Error lines alone, as users paste them: librdkafka's disconnect and
timeout lines without their facility, errors as the application got them,
lines copied out of an editor's search results or counted by uniq -c. Each
is read into rdkafka_events with the kind and fields the judge reads."""
from __future__ import annotations

import pyarrow as pa
import pytest

from kdiag.parsers.rdkafka_log import looks_like, parse_lines
from kdiag.parsers.rdkafka_log.parser import RdkafkaLogParser

B = "kafka-2.example:9092/2"


def rows(lines: list[str]) -> list[dict]:
    t, _ = parse_lines(lines)
    return t.to_pylist()


def one(line: str) -> dict:
    t, c = parse_lines([line])
    assert c.parsed == 1, (line, c.skipped)
    return t.to_pylist()[0]


@pytest.mark.parametrize("line, event, error, count", [
    # pre-1.0 BROKERFAIL debug line behind an application's own prefix
    (f"2026/11/25 10:00:01 [info] app#producer-7:BROKERFAIL:{B}: failed: err: Local: Message timed out: "
     "(errno: Connection timed out)", "fail", "Local: Message timed out", None),
    # the same cut from its prefix (the broker name lost)
    ("failed: err: Local: Message timed out: (errno: Connection timed out)", "fail", "Local: Message timed out", None),
    # rd_kafka_broker_fail()'s reasons without the FAIL facility
    (f"WARN producer: {B}: Receive failed: Disconnected", "fail", None, None),
    (f"WARN producer: {B}: Connect to ipv4#10.1.2.3:9092 failed: Connection refused (after 1ms in state CONNECT)",
     "fail", None, None),
    (f"WARN producer: {B}: Disconnected (after 61000ms in state UP)", "fail", None, None),
    (f"error_cb: {B}: 4 request(s) timed out: disconnect (average rtt 812.250ms)", "fail", None, 4),
    # errors as the application got them
    ('Delivery failed: KafkaError{code=_MSG_TIMED_OUT,val=-192,str="Local: Message timed out"}',
     "app_error", "Local: Message timed out", None),
    ("2026-11-25 10:00:01,250 ERROR app - Delivery failed: Local: Message timed out", "app_error",
     "Local: Message timed out", None),
    ("Confluent.Kafka.ProduceException`2[System.String,System.String]: Local: Message timed out",
     "app_error", "Local: Message timed out", None),
    ("[12:00:01 ERR] produce error Local_MessageTimedOut", "app_error", "Local_MessageTimedOut", None),
    (f"METADATA|app#producer-1|{B}: Metadata request failed: Local: Timed out", "app_error", "Local: Timed out", None),
    ("Mar  3 10:00:01 host app: kafka error: 3/3 brokers are down", "app_error", "3/3 brokers are down", None),
    # the broker's name redacted: the reason's words alone
    ("[2026/11/25 10:00:01] [error] [out_kafka] app#producer-1: [<REDACTED>]: <REDACTED>/2: Receive failed: "
     "Disconnected", "fail", None, None),
    (f"%3|1795600801.788|ERROR|app#producer-1| [thrd:{B}]: 1/1 brokers are down", "app_error",
     "1/1 brokers are down", None),
])
def test_error_lines_alone(line, event, error, count):
    r = one(line)
    assert (r["event"], r["error"], r["count"]) == (event, error, count)
    assert r["repeat"] == 1


def test_error_code_name_kept():
    r = one('msg failed: KafkaError{code=_MSG_TIMED_OUT,val=-192,str="Local: Message timed out"}')
    assert r["detail"] == "_MSG_TIMED_OUT"


def test_log_lines_keep_their_own_kind_over_the_error_inside():
    got = rows([f"%7|1795600801.788|REQERR|app#producer-1| [thrd:{B}]: {B}: ProduceRequest failed: "
                "Local: Timed out in queue: actions Retry",
                f"%7|1795600801.789|MSGSET|app#producer-1| [thrd:{B}]: {B}: t [0]: MessageSet with 3 message(s) "
                "encountered error: Local: Message timed out (actions Retry)"])
    assert [r["event"] for r in got] == ["reqerr", "msgset"]


def test_shutdown_is_not_a_disconnect():
    r = one(f"app#producer-1:BROKERFAIL:{B}: failed: err: Local: Broker handle destroyed: (errno: Success)")
    assert r["event"] != "fail" and r["error"] == "Local: Broker handle destroyed"


def test_notepadpp_find_in_files():
    lines = ['Search "timed out" (3 hits in 1 file of 1 searched)',
             r"  C:\logs\producer.log (3 hits)",
             f"\tLine 812: 2026/11/25 10:00:01 [info] app#producer-7:BROKERFAIL:{B}: failed: err: "
             "Local: Message timed out: (errno: Unknown error)",
             f"\tLine 815: 2026/11/25 10:00:02 [info] app#producer-7:REQTMOUT:{B}: Timed out 2+0+0 requests",
             f"\tLine 901: 2026/11/25 10:00:09 [info] app#producer-7:REQERR:{B}: ProduceRequest failed: "
             "Local: Timed out in queue: explicit actions 0x0"]
    t, c = parse_lines(lines)
    assert c.skipped.get("find_header") == 2 and "not_librdkafka" not in c.skipped
    got = t.to_pylist()
    assert [(r["line_no"], r["event"], r["facility"], r["client"]) for r in got] == [
        (3, "fail", "BROKERFAIL", "app#producer-7"), (4, "timeouts", "REQTMOUT", "app#producer-7"),
        (5, "reqerr", "REQERR", "app#producer-7")]
    assert got[1]["count"] == 2
    assert looks_like(lines) == 1.0


def test_grep_prefixes():
    got = rows([f"logs/app.log:1201:%7|1795600801.788|REQTMOUT|app#producer-1| [thrd:{B}]: {B}: "
                "Timed out ProduceRequest in flight (after 30012ms, timeout #0)",
                f"logs/app.log-1202-%7|1795600801.788|REQTMOUT|app#producer-1| [thrd:{B}]: {B}: "
                "Timed out 1 in-flight, 0 retry-queued, 0 out-queue, 0 partially-sent requests",
                f"logs/app.log:1203:2026-11-25 10:00:01.790 WARN FAIL [thrd:{B}]: {B}: 1 request(s) timed out: "
                "disconnect (after 90000ms in state UP)"])
    assert [(r["event"], r["ts_us"]) for r in got] == [("timeout", 1795600801788000), ("timeouts", 1795600801788000),
                                                      ("fail", 1795600801790000)]
    assert got[0]["elapsed_ms"] == 30012 and got[2]["count"] == 1


def test_dates_and_broker_names_are_not_taken_for_a_path():
    r = one(f"2026-11-25 10:00:01,250 DEBUG kafka SEND [app#producer-1] [thrd:{B}]: {B}: "
            "Sent ProduceRequest (v7, 2219 bytes @ 0, CorrId 4)")
    assert r["ts_us"] == 1795600801250000 and r["event"] == "send"
    r = one(f"{B}: 2 request(s) timed out: disconnect")
    assert r["broker"] == B and r["count"] == 2


def test_uniq_c_counts_become_repeat():
    lines = [f"   4127 {B}: Receive failed: Disconnected",   # GNU: "%7lu "
             f"     12 {B}: 3 request(s) timed out: disconnect",
             '   9 Delivery failed: KafkaError{code=_MSG_TIMED_OUT,val=-192,str="Local: Message timed out"}',  # BSD "%4d "
             f"12345678 {B}: Disconnected"]                   # wider than its field
    got = rows(lines)
    assert [(r["event"], r["repeat"]) for r in got] == [("fail", 4127), ("fail", 12), ("app_error", 9),
                                                       ("fail", 12345678)]
    assert got[1]["count"] == 3


def test_plain_lines_repeat_once():
    got = rows([f"%7|1795600801.788|SEND|app#producer-1| [thrd:{B}]: {B}: Sent ProduceRequest (v7, 2219 bytes @ 0, "
                "CorrId 4)"])
    assert got[0]["repeat"] == 1


def test_prose_is_not_an_error_line():
    t, c = parse_lines(["The producer is slow when the broker is far away.", "Local time: 10:00",
                        "  1. restart the app"])
    assert t.num_rows == 0 and c.skipped == {"not_librdkafka": 3}


def test_vscode_copy_all():
    got = rows(["/var/log/orders/producer.log",
                f"  812,41: %3|1795600801.788|FAIL|app#producer-1| [thrd:{B}]: {B}: Receive failed: Disconnected",
                f"  815: %4|1795600802.001|REQTMOUT|app#producer-1| [thrd:{B}]: {B}: Timed out 1 in-flight, "
                "0 retry-queued, 0 out-queue, 0 partially-sent requests"])
    assert [(r["line_no"], r["event"], r["ts_us"]) for r in got] == [(2, "fail", 1795600801788000),
                                                                     (3, "timeouts", 1795600802001000)]
    _, c = parse_lines(["/var/log/orders/producer.log", f"  812: {B}: Receive failed: Disconnected"])
    assert c.skipped == {"find_header": 1}


def test_markdown_table_rows():
    got = rows(["| 11/25/2026, 10:00:01.788 AM | %3\\|1795600801.788\\|FAIL\\|app#producer-1\\| "
                f"[thrd:{B}]: {B}: Receive failed: Disconnected |"])
    assert [(r["event"], r["ts_us"], r["level"], r["text"]) for r in got] == [
        ("fail", 1795600801788000, 3, "Receive failed: Disconnected")]


@pytest.mark.parametrize("name", ["app/3", "<HIDDEN>/3", "kafka-3.[[HIDDEN]]:9092/3", "GroupCoordinator",
                                  "[[HIDDEN]]"])
def test_rewritten_broker_names_do_not_stop_a_line(name):
    lines = [f"%5|1795600801.100|REQTMOUT|app#producer-1| [thrd:{name}]: {name}: Timed out ProduceRequest in flight "
             "(after 30012ms, timeout #0)",
             f"%4|1795600801.101|REQTMOUT|app#producer-1| [thrd:{name}]: {name}: Timed out 1 in-flight, "
             "0 retry-queued, 0 out-queue, 0 partially-sent requests"]
    for fast in (True, False):
        p = RdkafkaLogParser(fast=fast)
        got = p.feed(pa.array(lines)).to_pylist()
        assert [(r["thread"], r["broker"], r["event"], r["request"], r["elapsed_ms"], r["count"]) for r in got] == [
            (name, name, "timeout", "Produce", 30012.0, None), (name, name, "timeouts", None, None, 1)], fast
        assert p.counts.parsed == 2


def test_a_prefix_is_not_a_rewritten_broker_name():
    r = one(f"app#producer-1:SEND:{B}: Sent ProduceRequest (v7, 900 bytes @ 0, CorrId 5)")
    assert (r["event"], r["broker"], r["corr_id"]) == ("send", B, 5)


def test_error_copy_of_a_fail_line_is_dropped_and_counted():
    fail = f"[thrd:{B}]: {B}: 12 request(s) timed out: disconnect (average rtt 950.125ms)"
    refused = f"[thrd:{B}]: {B}: Connect to ipv4#10.1.2.3:9092 failed: Connection refused (after 0ms in state CONNECT)"
    lines = [f"%3|1795600801.100|FAIL|app#producer-1| {fail}",
             f"%3|1795600801.101|ERROR|app#producer-1| {fail}",
             f"%3|1795600802.100|ERROR|app#producer-1| {refused}",   # its FAIL line not in the paste: kept
             f"%3|1795600803.100|FAIL|app#producer-1| {fail}",
             f"%3|1795600803.100|ERROR|app#producer-1| {fail}",
             f"%3|1795600804.100|ERROR|app#producer-1| [thrd:{B}]: 1/1 brokers are down"]
    t, c = parse_lines(lines)
    got = [(r["line_no"], r["facility"], r["event"], r["count"]) for r in t.to_pylist()]
    assert got == [(1, "FAIL", "fail", 12), (3, "ERROR", "fail", None), (4, "FAIL", "fail", 12),
                   (6, "ERROR", "app_error", None)]
    assert (c.parsed, c.skipped) == (4, {"error_copy": 2})
    # the pair split between two chunks
    p = RdkafkaLogParser()
    first, second = p.feed(pa.array(lines[:1])), p.feed(pa.array(lines[1:2]), 2)
    assert (first.num_rows, second.num_rows, p.counts.skipped) == (1, 0, {"error_copy": 1})


def test_error_line_alone_or_far_from_its_fail_line_is_kept():
    fail = f"[thrd:{B}]: {B}: Receive failed: Disconnected"
    lines = [f"%3|1795600801.100|FAIL|app#producer-1| {fail}",
             f"%3|1795600809.100|ERROR|app#producer-1| {fail}",       # 8 s later: another disconnect
             f"%3|1795600809.200|ERROR|app#producer-1| [thrd:{B}]: kafka-9.example:9092/9: Receive failed: Disconnected"]
    t, c = parse_lines(lines)
    assert [r["event"] for r in t.to_pylist()] == ["fail"] * 3 and c.skipped == {}
