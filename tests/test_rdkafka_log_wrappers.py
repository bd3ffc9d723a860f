"""Wrappers met in real pastes: the logger callback of librdkafka's examples,
application loggers whose prefix carries no facility, the message alone,
timestamps of whole seconds or minutes, and every request type's
Sent/Received lines with their sizes and rtt."""
from __future__ import annotations

import pyarrow.compute as pc

from kdiag.parsers.rdkafka_log import looks_like, parse_lines

B = "10.0.0.5:9092/1"


def rows(lines: list[str]) -> list[dict]:
    t, c = parse_lines(lines)
    assert c.parsed == len(lines), c.skipped
    return t.to_pylist()


def test_examples_logger_callback_format():
    # rdkafka_example's "%u.%03u RDKAFKA-%i-%s: %s: %s\n": seconds.ms, level,
    # facility, name, message; copied by many programs
    got = rows([f"1795600801.788 RDKAFKA-7-SEND: rdkafka#producer-0: {B}: Sent ProduceRequest (1290 bytes, CorrId 3)",
                f"1795600801.831 RDKAFKA-7-RECV: rdkafka#producer-0: {B}: Received ProduceResponse (34 bytes, CorrId 3)",
                "1795600801.900 RDKAFKA-7-TOPIC: rdkafka#producer-0: New local topic: t1",
                f"1795600802.001 RDKAFKA-3-FAIL: rdkafka#producer-0: {B}: Failed to connect to broker at h:9092: "
                "Connection refused",
                # an application's own word before it, a thread prefix in front
                f"{{T2}}1795600802.002 APP-RDKAFKA-4-REQTMOUT: c1 #producer-1: [thrd:{B}]: {B}: "
                "Timed out 1+0+0 requests"])
    assert [(r["event"], r["facility"], r["level"], r["ts_us"]) for r in got] == [
        ("send", "SEND", 7, 1795600801788000), ("recv", "RECV", 7, 1795600801831000),
        ("other", "TOPIC", 7, 1795600801900000), ("fail", "FAIL", 3, 1795600802001000),
        ("timeouts", "REQTMOUT", 4, 1795600802002000)]
    assert got[0]["client"] == "rdkafka#producer-0" and got[0]["broker"] == B and got[0]["corr_id"] == 3
    assert got[4]["client"] == "c1 #producer-1" and got[4]["count"] == 1
    assert {r["ts_resolution_us"] for r in got} == {1000}


def test_logger_without_facility_and_level_run_together():
    got = rows([f"2026-11-25 10:00:01,250 [INFO] rdkafka: [thrd:{B}]: {B}: Sent ProduceRequest (v7, 2219 bytes @ 0, "
                "CorrId 4)",
                f"[2026-11-25 10:00:01] [src/sink.cpp:61] INFO  - LOG:7SEND[thrd:{B}]: {B}: Sent ProduceRequest "
                "(v7, 2219 bytes @ 0, CorrId 5)"])
    assert [(r["event"], r["corr_id"], r["facility"], r["level"]) for r in got] == [
        ("send", 4, None, 6), ("send", 5, "SEND", 7)]
    assert [r["ts_resolution_us"] for r in got] == [1000, 1_000_000]


def test_message_alone_every_request_type():
    got = rows(["Sent ApiVersionRequest (v3, 25 bytes @ 0, CorrId 1)",
                "Received ApiVersionResponse (v3, 421 bytes, CorrId 1, rtt 66.12ms)",
                "Sent MetadataRequest (v9, 40 bytes @ 0, CorrId 2)",
                "Received MetadataResponse (v9, 310 bytes, CorrId 2, rtt 65.80ms)",
                "Received FetchResponse (v2, 222 bytes, CorrId 77, rtt218.00ms)",   # the space lost in a paste
                "Timed out MetadataRequest in flight (after 60001ms, timeout #0)"])
    assert [(r["event"], r["request"], r["size_bytes"], r["rtt_ms"]) for r in got] == [
        ("send", "ApiVersion", 25, None), ("recv", "ApiVersion", 421, 66.12), ("send", "Metadata", 40, None),
        ("recv", "Metadata", 310, 65.8), ("recv", "Fetch", 222, 218.0), ("timeout", "Metadata", None, None)]
    assert got[5]["elapsed_ms"] == 60001


def test_every_request_type_in_librdkafka_own_lines():
    thrd = "[thrd:sasl_ssl://b1:9093/1]: sasl_ssl://b1:9093/1: "
    lines = [f"%7|1795600801.{i:03d}|{fac}|rdkafka#producer-1| {thrd}{m}" for i, (fac, m) in enumerate([
        ("SEND", "Sent ApiVersionRequest (v3, 25 bytes @ 0, CorrId 1)"),
        ("RECV", "Received ApiVersionResponse (v3, 421 bytes, CorrId 1, rtt 66.12ms)"),
        ("SEND", "Sent SaslHandshakeRequest (v1, 31 bytes @ 0, CorrId 2)"),
        ("RECV", "Received SaslHandshakeResponse (v1, 29 bytes, CorrId 2, rtt 64.01ms)"),
        ("SEND", "Sent InitProducerIdRequest (v4, 30 bytes @ 0, CorrId 3)"),
        ("RECV", "Received InitProducerIdResponse (v4, 24 bytes, CorrId 3, rtt 70.50ms)"),
        ("SEND", "Sent ProduceRequest (v9, 2219 bytes @ 0, CorrId 4)"),
        ("RECV", "Received ProduceResponse (v9, 89 bytes, CorrId 4, rtt 62.20ms)")])]
    t, _ = parse_lines(lines)
    recv = t.filter(pc.equal(t["event"], "recv"))
    assert recv["request"].to_pylist() == ["ApiVersion", "SaslHandshake", "InitProducerId", "Produce"]
    assert recv["rtt_ms"].to_pylist() == [66.12, 64.01, 70.5, 62.2]
    send = t.filter(pc.equal(t["event"], "send"))
    assert send["size_bytes"].to_pylist() == [25, 31, 30, 2219]


def test_whole_second_logger_gives_partial_sends_with_bounds():
    """One 2 MB request's pieces over 30 s, printed with whole seconds:
    every piece kept with its second and a second's resolution."""
    pre = "[2026-11-25 10:00:{:02d}] [sink.cpp:61] INFO  - LOG:7SEND"
    thrd = f"[thrd:{B}]: {B}: "
    sizes = [(0, 0, 185917), (4, 185917, 471580), (17, 657497, 435552), (25, 1093049, 423400), (30, 1516449, 464280)]
    lines = [pre.format(s) + thrd + f"Sent partial ProduceRequest (v3, {a}+{b}/2015087 bytes, CorrId 86)"
             for s, a, b in sizes]
    lines.append(pre.format(30) + thrd + "Sent ProduceRequest (v3, 2015087 bytes @ 1980729, CorrId 86)")
    got = rows(lines)
    assert [r["event"] for r in got] == ["send_partial"] * 5 + ["send"]
    assert {(r["request"], r["corr_id"], r["size_bytes"]) for r in got} == {("Produce", 86, 2015087)}
    assert {r["ts_resolution_us"] for r in got} == {1_000_000}
    assert got[-1]["ts_us"] - got[0]["ts_us"] == 30_000_000
    assert looks_like(lines) == 1.0


def test_minute_timestamps():
    got = rows([f"2026-11-25 10:07 WARN kafka [thrd:{B}]: {B}: 2 request(s) timed out: disconnect"])
    assert got[0]["ts_us"] == 1795601220000000 and got[0]["ts_resolution_us"] == 60_000_000
    assert got[0]["event"] == "fail" and got[0]["count"] == 2


def test_dotnet_0_11_default_logger_numeric_level():
    got = rows([f"7|2026-11-25 10:00:01.788|rdkafka#producer-1|SEND| [thrd:{B}]: {B}: Sent ProduceRequest "
                "(v2, 1657 bytes @ 0, CorrId 2)",
                f"Debug|2026-11-25 10:00:01.790|rdkafka#producer-1|RECV| [thrd:{B}]: {B}: Received ProduceResponse "
                "(v2, 55 bytes, CorrId 2, rtt 2.00ms)"])
    assert [(r["event"], r["level"], r["facility"], r["ts_resolution_us"]) for r in got] == [
        ("send", 7, "SEND", 1000), ("recv", 7, "RECV", 1000)]


def test_old_toppar_line_in_an_application_prefix():
    got = rows(["2026-11-25 10:00:01.638|DEBUG|sink|kafka|event=10.0.0.5:9092/0: orders [0] 3+0 msgs,error_code=0"])
    # v0.8's TOPPAR "%s [%d] %i+%i msgs": the partition queue's count, then the transmit queue's.
    assert got[0]["broker"] == "10.0.0.5:9092/0" and got[0]["event"] == "xmit_queue"
    assert (got[0]["topic"], got[0]["partition"], got[0]["count"], got[0]["msgs"]) == ("orders", 0, 3, 0)
    assert got[0]["ts_us"] == 1795600801638000


def test_coarse_received_lines_leave_the_time_to_the_rtt():
    thrd = f"[thrd:{B}]: {B}: "
    got = rows([f"2026-11-25 10:00:01 DEBUG kafka {thrd}Sent ProduceRequest (v7, 2219 bytes @ 0, CorrId 4)",
                f"2026-11-25 10:00:02 DEBUG kafka {thrd}Received ProduceResponse (v7, 89 bytes, CorrId 4, rtt 43.15ms)",
                f"2026-11-25 10:00:02.101 DEBUG kafka {thrd}Received ProduceResponse (v7, 89 bytes, CorrId 5, "
                "rtt 43.15ms)"])
    assert [(r["ts_us"], r["ts_resolution_us"]) for r in got] == [
        (1795600801000000, 1_000_000), (None, None), (1795600802101000, 1000)]
