"""Records broken over lines by a terminal, a console or a logger's wrap
are joined back into one row; the joins are counted and bounded."""
from __future__ import annotations

from kdiag.parsers.rdkafka_log import parse_lines
from kdiag.parsers.rdkafka_log.joins import MAX_JOINED

B = "kafka-4.example.net:9092/4"


def _cut(line: str, width: int) -> list[str]:
    return [line[i:i + width] for i in range(0, len(line), width)]


def test_terminal_cut_mid_word():
    rec = [f"(T2)1795600801.100 RDKAFKA-3-FAIL: app#producer-0: {B}: Failed to connect to broker at "
           "kafka-4.example.net:9092: Connection refused",
           f"(T2)1795600802.100 RDKAFKA-3-FAIL: app#producer-0: {B}: Failed to connect to broker at "
           "kafka-4.example.net:9092: Connection refused"]
    lines = _cut(rec[0], 90) + _cut(rec[1], 90)
    assert len(lines) == 4 and lines[1][0].islower()
    t, c = parse_lines(lines)
    got = [(r["line_no"], r["event"], r["broker"], r["detail"]) for r in t.to_pylist()]
    detail = "Failed to connect to broker at kafka-4.example.net:9092: Connection refused"
    assert got == [(1, "fail", B, detail), (3, "fail", B, detail)]
    assert (c.parsed, c.skipped) == (2, {"joined": 2})


def test_console_wrap_padded_with_spaces():
    w = 100
    send = (f"Debug|2026-11-25 10:00:01.100|app#producer-1|SEND| [thrd:{B}]: {B}: Sent ProduceRequest "
            "(v7, 4120 bytes @ 0, CorrId 17)")
    recv = (f"Debug|2026-11-25 10:00:01.162|app#producer-1|RECV| [thrd:{B}]: {B}: Received ProduceResponse "
            "(v7, 52 bytes, CorrId 17, rtt 61.80ms)")
    lines = []
    for rec in (send, recv):
        lines += [p.ljust(w) for p in _cut(rec, w)]
    t, c = parse_lines(lines)
    got = [(r["event"], r["corr_id"], r["size_bytes"], r["rtt_ms"]) for r in t.to_pylist()]
    assert got == [("send", 17, 4120, None), ("recv", 17, 52, 61.8)]
    assert c.skipped == {"joined": 2}


def test_logger_wrap_at_a_fixed_column_with_its_prefix_width_indent():
    pad = " " * 20
    lines = [f"Q 261125 -0-KFK: 1795600801.100 SVC-RDKAFKA-7-REQERR: svc #producer-1: [thrd:{B}]: {B}: ProduceRequ",
             pad + "est failed: Local: Timed out in queue: explicit actions Retry,MsgNotPersisted",
             f"Q 261125 -0-KFK: 1795600801.101 SVC-RDKAFKA-4-REQTMOUT: svc #producer-1: [thrd:{B}]: {B}: Timed out",
             pad + " 0 in-flight, 0 retry-queued, 2 out-queue, 0 partially-sent requests"]
    t, c = parse_lines(lines)
    got = [(r["event"], r["request"], r["error"], r["count"]) for r in t.to_pylist()]
    assert got == [("reqerr", "Produce", "Local: Timed out in queue", None), ("timeouts", None, None, 0)]
    assert c.skipped == {"joined": 2}


def test_line_broken_at_a_space():
    t, c = parse_lines(["failed: err: Local: Message timed out: (errno: Connection", " timed out)"])
    r = t.to_pylist()[0]
    assert (r["event"], r["detail"]) == ("fail", "failed: err: Local: Message timed out: (errno: Connection timed out)")
    assert c.skipped == {"joined": 1}


def test_records_and_their_own_parts_are_not_joined():
    lines = [f"%7|1795600801.100|SEND|app#producer-1| [thrd:{B}]: {B}: Sent ProduceRequest (v7, 900 bytes @ 0, "
             "CorrId 5)",
             f" %7|1795600801.160|RECV|app#producer-1| [thrd:{B}]: {B}: Received ProduceResponse (v7, 52 bytes, "
             "CorrId 5, rtt 60.00ms)",
             "{",
             "  severity: 3,",
             "  fac: 'FAIL',",
             f"  message: '[thrd:{B}]: {B}: Receive failed: Disconnected'",
             "}",
             "KafkaException: Local: Broker transport failure",
             "    at Producer.flush (producer.js:10:5)"]
    t, c = parse_lines(lines)
    assert [r["event"] for r in t.to_pylist()] == ["send", "recv", "fail", "app_error"]
    assert "joined" not in c.skipped


def test_joins_are_bounded():
    lines = ["failed: err: Local: Message timed out: (errno: Connection"] + [" timed out"] * (MAX_JOINED + 3)
    t, c = parse_lines(lines)
    assert t.num_rows == 1 and c.skipped["joined"] == MAX_JOINED
    assert c.lines == c.parsed + sum(c.skipped.values())


def test_debug_module_errors_and_their_stack_are_not_joined():
    lines = ["app:kafka Error: Local: Broker transport failure",
             "  app:kafka     at Function.create (/srv/app/node_modules/kafka/lib/error.js:52:10)",
             "  app:kafka     at /srv/app/node_modules/kafka/lib/client.js:301:20 +0ms",
             "  app:kafka Error: Local: Broker transport failure",
             "  app:kafka     at Function.create (/srv/app/node_modules/kafka/lib/error.js:52:10) +3ms"]
    t, c = parse_lines(lines)
    got = [(r["line_no"], r["event"], r["error"]) for r in t.to_pylist()]
    assert got == [(1, "app_error", "Local: Broker transport failure"), (4, "app_error", "Local: Broker transport failure")]
    assert "joined" not in c.skipped


def test_event_log_json_behind_a_prefix_keeps_the_queued_but_not_up_line():
    msg = f"[thrd:{B}]: {B}: orders [2] 3 message(s) queued but broker not up"
    t, c = parse_lines([f'WARN:KAFKA{{"severity":7,"fac":"TOPPAR","message":"{msg}"}}'])
    r = t.to_pylist()[0]
    assert (r["facility"], r["broker"], r["text"]) == ("TOPPAR", B, "orders [2] 3 message(s) queued but broker not up")


def test_console_object_message_left_open_over_lines():
    lines = ["{",
             "timestamp: 1795600801100",
             "fac: 'REQTMOUT',",
             f"message: '[thrd:{B}]:",
             f"{B}: Timed out ProduceRequest in flight (after 30050ms, timeout",
             "#0)',",
             "}",
             "fac: 'FAIL',",
             f"message: '[thrd:{B}]: {B}: 1 request(s) timed out: disconnect (after 90210ms in",
             "state UP)',",
             "message: 'timed out',"]
    t, c = parse_lines(lines)
    got = [(r["line_no"], r["event"], r["broker"], r["elapsed_ms"], r["count"]) for r in t.to_pylist()]
    assert got == [(4, "timeout", B, 30050.0, None), (9, "fail", B, 90210.0, 1)]
    assert c.skipped["joined"] == 3


def test_records_joined_on_one_line_are_read_apart_and_the_line_counts_once():
    sent = "%7|1795600801.100|SEND|app#producer-1| [thrd:{b}]: {b}: Sent ProduceRequest (v9, 300 bytes @ 0, CorrId {n})"
    recv = ("%7|1795600801.140|RECV|app#producer-1| [thrd:{b}]: {b}: Received ProduceResponse (v9, 50 bytes, "
            "CorrId {n}, rtt 40.02ms)")
    lines = [sent.format(b=B, n=3) + " " + recv.format(b=B, n=3),            # single space
             sent.format(b=B, n=4) + "       " + recv.format(b=B, n=4),      # an undone terminal wrap
             " " + sent.format(b=B, n=5),                                     # a leading space: one record
             "note %7|1795600801.100|SEND|x#producer-1| a " + sent.format(b=B, n=6)]   # a prefix: not split
    t, c = parse_lines(lines)
    got = [(r["line_no"], r["event"], r["corr_id"]) for r in t.to_pylist()]
    assert got == [(1, "send", 3), (1, "recv", 3), (2, "send", 4), (2, "recv", 4), (3, "send", 5),
                   (4, "other", None)], got
    assert c.lines == 4 and c.parsed + c.skipped_total == 4 and c.records_after_first == 2
    assert c.to_dict()["records_after_first"] == 2
