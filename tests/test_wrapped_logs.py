"""librdkafka's message inside any wrapper, mangled pastes, and the lines
besides Sent/Received: each read into rdkafka_events with its fields."""
from __future__ import annotations

import json

import pyarrow.compute as pc
import pytest

from kdiag.parsers.rdkafka_log import parse_lines

BROKER = "ssl://10.0.0.5:9093/3"
THRD = f"[thrd:{BROKER}]: {BROKER}: "
SENT = THRD + "Sent ProduceRequest (v7, 2219 bytes @ 0, CorrId 4)"
RECV = THRD + "Received ProduceResponse (v7, 89 bytes, CorrId 4, rtt 43.15ms)"


def row(line: str) -> dict:
    t, c = parse_lines([line])
    assert c.parsed == 1, (line, c.skipped)
    return t.to_pylist()[0]


@pytest.mark.parametrize("line, ts_us, resolution_us, facility, level", [
    # log4j2 "%d{yyyy-MM-dd HH:mm:ss.SSS} %-5level [%t] %logger - %msg"
    (f"2026-11-25 10:00:01.788 DEBUG [kafka] c.e.Sink - librdkafka: SEND rdkafka#producer-1 {SENT}",
     1795600801788000, 1000, "SEND", 7),
    # RFC 5424 around librdkafka's own line: librdkafka's timestamp wins
    (f"<135>1 2026-11-25T10:00:01.788123+01:00 app1 producer 42 - - %7|1795600801.788|SEND|rdkafka#producer-1| {SENT}",
     1795600801788000, 1000, "SEND", 7),
    # RFC 5424 with microseconds and a zone, around a logger's record
    (f"<135>1 2026-11-25T10:00:01.788123+01:00 app1 producer 42 - - debug SEND {SENT}",
     1795597201788123, 1, "SEND", 7),
    # syslog's classic time of day with a fraction: no date
    (f"Nov 25 10:00:01.788 host app[12]: warn SEND {SENT}", 36001788000, 1000, "SEND", 4),
    # Go's log package "2026/11/25 10:00:01.788123"
    (f"2026/11/25 10:00:01.788123 [kafka] RECV {RECV}", 1795600801788123, 1, "RECV", None),
    # epoch milliseconds in a JSON line (pino)
    (json.dumps({"level": 20, "time": 1795600801788, "msg": f"SEND {SENT}"}), 1795600801788000, 1000, "SEND", None),
    # whole seconds cannot time a request: kept, their resolution a second
    (f"Nov 25 10:00:01 host app[12]: SEND {SENT}", 36001000000, 1_000_000, "SEND", None),
    (f"2026-11-25 10:00:01 [INFO] rdkafka: {SENT}", 1795600801000000, 1_000_000, None, 6),
    # minutes: the minute's start, a minute's resolution
    (f"2026-11-25 10:00 DEBUG kafka {SENT}", 1795600800000000, 60_000_000, None, 7),
    # a ":" before the milliseconds; a dotted date
    (f"2026-11-25 10:00:01:788: {SENT}", 1795600801788000, 1000, None, None),
    (f"2026.11.25 10:00:01.788123 [ 31 ] <Debug> {SENT}", 1795600801788123, 1, None, 7),
])
def test_timestamp_and_resolution_from_any_prefix(line, ts_us, resolution_us, facility, level):
    r = row(line)
    assert (r["ts_us"], r["ts_resolution_us"], r["facility"], r["level"]) == (ts_us, resolution_us, facility, level)
    assert r["event"] in ("send", "recv") and r["corr_id"] == 4 and r["broker"] == BROKER


def test_librdkafka_own_lines_have_millisecond_resolution():
    r = row(f"%7|1795600801.788|SEND|rdkafka#producer-1| {SENT}")
    assert r["ts_us"] == 1795600801788000 and r["ts_resolution_us"] == 1000


def test_message_quoted_in_logfmt_and_journald():
    r = row(f'time=2026-11-25T10:00:01.788Z level=debug msg="{RECV}" fac=RECV client=rdkafka#producer-2')
    assert r["event"] == "recv" and r["rtt_ms"] == 43.15 and r["client"] == "rdkafka#producer-2"
    assert r["text"].endswith("rtt 43.15ms)")
    j = json.dumps({"__REALTIME_TIMESTAMP": "1795600801788123", "PRIORITY": "4",
                    "MESSAGE": f"%4|1795600801.788|FAIL|rdkafka#producer-1| {THRD}3 request(s) timed out: "
                               f"disconnect (average rtt 1399.123ms) (after 60034ms in state UP)"})
    r = row(j)
    assert (r["event"], r["count"], r["rtt_ms"], r["elapsed_ms"]) == ("fail", 3, 1399.123, 60034.0)
    assert r["ts_us"] == 1795600801788123 and r["ts_resolution_us"] == 1 and r["level"] == 4


def test_chat_and_markdown_mangling_undone():
    quoted_autolinked = f"> > `%7|1795600801.788|SEND|rdkafka#producer-1| {SENT.replace(BROKER, '<' + BROKER + '>')}`"
    slack = f"%7|1795600801.788|SEND|rdkafka#producer-1| {SENT.replace(BROKER, '<' + BROKER + '|' + BROKER + '>')}"
    md_link = f"%7|1795600801.788|SEND|rdkafka#producer-1| {SENT.replace(BROKER, '[' + BROKER + '](' + BROKER + ')')}"
    for line in (quoted_autolinked, slack, md_link, f"&gt; %7|1795600801.788|SEND|rdkafka#producer-1| {SENT}"):
        r = row(line)
        assert r["broker"] == BROKER and r["event"] == "send" and r["ts_us"] == 1795600801788000, line


@pytest.mark.parametrize("text, event, fields", [
    ("Timed out ProduceRequest in flight (after 30004ms, timeout #0)", "timeout",
     {"request": "Produce", "detail": "in flight", "elapsed_ms": 30004.0}),
    # v0.11.6's wording
    ("Timed out #0 ProduceRequest in flight (after 5002ms)", "timeout", {"request": "Produce", "elapsed_ms": 5002.0}),
    ("Timed out 3 in-flight, 0 retry-queued, 1 out-queue, 0 partially-sent requests", "timeouts", {"count": 3}),
    ("Timed out 2+0+1 requests", "timeouts", {"count": 2, "detail": "2+0+1"}),
    ("kdiag-probe [2]: MessageSet with 5 message(s) (MsgId 9, BaseSeq -1) encountered error: Broker: Not leader "
     "for partition (actions Refresh,MsgNotPersisted,Retry)", "msgset",
     {"topic": "kdiag-probe", "partition": 2, "msgs": 5, "error": "Broker: Not leader for partition"}),
    ("kdiag-probe [0]: MessageSet with 4 message(s) delivered", "msgset", {"msgs": 4, "error": None}),
    ("kdiag-probe [0]: Produce MessageSet with 1 message(s) (1094 bytes, ApiVersion 10, MsgVersion 2, MsgId 0, "
     "BaseSeq -1, PID{Invalid}, uncompressed)", "produce", {"msgs": 1, "size_bytes": 1094}),
    ("kdiag-probe [0] 200 message(s) in xmit queue (200 added from partition queue)", "xmit_queue",
     {"msgs": 200, "count": 200}),
    ("ProduceRequest failed: Broker: Request timed out: actions Retry", "reqerr",
     {"request": "Produce", "error": "Broker: Request timed out", "detail": "Retry"}),
    ("Retrying ProduceRequest (v7, 2219 bytes, retry 1/2, prev CorrId 4) in 100ms", "retry",
     {"corr_id": 4, "detail": "1/2"}),
])
def test_lines_besides_sent_and_received(text, event, fields):
    r = row(f"%7|1795600801.788|FAC|rdkafka#producer-1| {THRD}{text}")
    assert r["event"] == event, r
    for k, v in fields.items():
        assert r[k] == v, (k, r)


def test_fail_read_by_its_words_when_the_wrapper_drops_the_facility():
    r = row(f"{THRD}2 request(s) timed out: disconnect (average rtt 51.020ms) (after 1003ms in state UP)")
    assert (r["event"], r["count"], r["rtt_ms"]) == ("fail", 2, 51.02)


def test_librdkafka_0_8_wording_read():
    sent = row("%7|1409000000.100|SEND|rdkafka#producer-0| 10.0.0.1:9092/1: Sent ProduceRequest (120 bytes, CorrId 5)")
    recv = row("%7|1409000000.140|RECV|rdkafka#producer-0| 10.0.0.1:9092/1: Received ProduceResponse (50 bytes, CorrId 5)")
    assert (sent["event"], sent["api_version"], sent["corr_id"]) == ("send", None, 5)
    assert (recv["event"], recv["rtt_ms"], recv["ts_us"] - sent["ts_us"]) == ("recv", None, 40000)


def test_foreign_lines_counted_never_taken():
    lines = ["2026-11-25 10:00:01.788 INFO app started", "Traceback (most recent call last):",
             "[thrd: broken", f"2026-11-25 10:00:01.788 DEBUG x - SEND {SENT}"]
    t, c = parse_lines(lines)
    assert c.lines == 4 and c.parsed == 1 and c.skipped.get("not_librdkafka") == 3
    assert pc.equal(t["event"], "send").to_pylist() == [True]
