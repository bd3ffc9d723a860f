"""Judging from whatever evidence the input holds when no Produce request
completed in it: librdkafka's statistics alone, a path tool alone, and
both. Each input is written here in the format kdiag reads (statistics
objects as JSON lines, a ping listing), replayed, and its verdict and
what each finding rests on asserted. The causes' statistics rules are
also checked on the driver, without Spark."""
from __future__ import annotations

import io
import json

from kdiag.analysis.causes import Facts
from kdiag.analysis.judge import from_signals_only
from kdiag.cli import Environment, main
from kdiag.report.text import render


def replay(*paths):
    out, err = io.StringIO(), io.StringIO()
    rc = main(["replay", "--json", *map(str, paths)], Environment(stdout=out, stderr=err))
    return rc, json.loads(out.getvalue()) if out.getvalue() else None


def _window(ms: float) -> dict:
    us = ms * 1000
    return {"min": int(us * 0.8), "max": int(us * 1.6), "avg": int(us), "sum": int(us * 10), "cnt": 10 if ms else 0,
            "stddev": 1, "hdrsize": 0, "p50": int(us), "p75": int(us * 1.1), "p90": int(us * 1.2),
            "p95": int(us * 1.3), "p99": int(us * 1.4), "p99_99": int(us * 1.5), "outofrange": 0}


def _broker(name: str, nodeid: int, state: str, rtt: float, queue: float, throttle: float = 0.0, tx: int = 0,
            retries: int = 0, timeouts: int = 0) -> dict:
    return {"name": name, "nodeid": nodeid, "nodename": name.split("/")[0], "source": "learned", "state": state,
            "stateage": 9000000, "outbuf_cnt": 0, "outbuf_msg_cnt": 0, "waitresp_cnt": 1, "waitresp_msg_cnt": 4,
            "tx": tx, "txbytes": tx * 900, "txerrs": 0, "txretries": retries, "req_timeouts": timeouts, "rx": tx,
            "rxbytes": tx * 60, "rxerrs": 0, "connects": 1, "disconnects": 0, "int_latency": _window(queue),
            "outbuf_latency": _window(0.02 if rtt else 0.0), "rtt": _window(rtt), "throttle":
                {"min": 0, "max": int(throttle * 2), "avg": int(throttle), "sum": 0, "cnt": 3 if throttle else 0}}


def write_stats(path, n: int, rtt: float, queue, throttle: float = 0.0, retries: int = 0, timeouts: int = 0):
    """``n`` statistics objects a second apart from one producer with a
    bootstrap handle (no requests) and one broker that answers; ``queue``
    a function of the snapshot's index."""
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({
                "name": "rdkafka#producer-1", "client_id": "rdkafka", "type": "producer", "ts": 5_000_000 + i,
                "time": 1_760_000_000 + i, "age": 9000000 + i, "replyq": 0, "msg_cnt": 40 * i, "msg_size": 0,
                "msg_max": 100000, "msg_size_max": 1073741824,
                "brokers": {
                    "k1.example:9092/bootstrap": _broker("k1.example:9092/bootstrap", -1, "INIT", 0.0, 0.0),
                    "k1.example:9092/1": _broker("k1.example:9092/1", 1, "UP", rtt, queue(i), throttle,
                                                 tx=100 * (i + 1), retries=retries * i, timeouts=timeouts * i)},
                "topics": {}}) + "\n")
    return path


def write_ping(path, ms: float):
    lines = ["PING 192.0.2.10 (192.0.2.10) 56(84) bytes of data."]
    lines += [f"64 bytes from 192.0.2.10: icmp_seq={i} ttl=52 time={ms + i * 0.1:.1f} ms" for i in range(1, 6)]
    lines += ["", "--- 192.0.2.10 ping statistics ---", "5 packets transmitted, 5 received, 0% packet loss, time 4006ms",
              f"rtt min/avg/max/mdev = {ms + 0.1:.3f}/{ms + 0.3:.3f}/{ms + 0.5:.3f}/0.141 ms"]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_statistics_alone_decide(spark, tmp_path):
    """Queueing that grows, throttles, timeouts: each named from the
    statistics alone; the series says how the queue moved."""
    rc, f = replay(write_stats(tmp_path / "queue.json", 6, 2.0, lambda i: 100.0 + 20 * i))
    assert rc == 0 and f["verdict"] == "client_queueing" and not f["undecided"]
    top = f["findings"][0]
    assert top["rests_on"] == ["statistics"] and top["share"] > 0.9
    st = f["summary"]["statistics"]
    assert st["snapshots"] == 6 and st["brokers"] == 1   # the bootstrap handle is left out
    assert [p["int_latency_p50_ms"] for p in st["series"]] == [100.0, 120.0, 140.0, 160.0, 180.0, 200.0]
    assert f["confidence"].startswith("medium")
    text = render(f)
    assert "VERDICT: client_queueing" in text and "rests on: statistics (6 snapshots)" in text
    assert "queue p50/p99 200/280" in text

    rc, f = replay(write_stats(tmp_path / "throttle.json", 4, 3.0, lambda i: 1.0, throttle=250.0))
    assert f["verdict"] == "throttled" and f["findings"][0]["rests_on"] == ["statistics"]
    assert any("throttle times of 250 ms" in e for e in f["findings"][0]["evidence"])

    rc, f = replay(write_stats(tmp_path / "timeouts.json", 4, 3.0, lambda i: 1.0, timeouts=2, retries=1))
    assert f["verdict"] == "request_timeout", f["findings"]
    assert {x["cause"] for x in f["findings"]} >= {"request_timeout", "retry_backoff"}
    assert all(x["rests_on"] == ["statistics"] for x in f["findings"])


def test_statistics_and_a_path_tell_the_broker_from_the_network(spark, tmp_path):
    slow = write_stats(tmp_path / "slow.json", 3, 80.0, lambda i: 1.0)
    rc, f = replay(slow)
    # A slow rtt without a path: undecided, both ranked, a ping decides.
    assert rc == 0 and f["verdict"] is None and f["undecided"] and not f["no_data"]
    assert {x["cause"] for x in f["likely"][:2]} == {"network_latency", "broker_slow"}
    assert any("a ping" in u for u in f["unknowns"])
    assert "VERDICT: undecided" in render(f)

    rc, f = replay(slow, write_ping(tmp_path / "far.txt", 78.0), "--merge")
    assert f["verdict"] == "network_latency" and f["findings"][0]["rests_on"] == ["statistics", "path"]
    rc, f = replay(slow, write_ping(tmp_path / "near.txt", 1.0), "--merge")
    assert f["verdict"] == "broker_slow" and f["findings"][0]["rests_on"] == ["statistics", "path"]


def test_a_path_alone(spark, tmp_path):
    rc, f = replay(write_ping(tmp_path / "far.txt", 290.0))
    assert rc == 0 and f["verdict"] == "network_latency"
    top = f["findings"][0]
    assert top["rests_on"] == ["path"] and f["confidence"].startswith("low: the path alone")
    assert any("rests on the path alone" in e for e in top["evidence"])
    assert "rests on: path (" in render(f)
    rc, f = replay(write_ping(tmp_path / "near.txt", 2.0))
    assert rc == 0 and f["verdict"] is None and f["undecided"] and not f["no_data"]
    assert any("too short alone" in u for u in f["unknowns"])
    assert any(u.startswith("read, without deciding a cause: probes") for u in f["unknowns"])


# ------------------------------------------------------------ on the driver

def _run(stats: dict, path=None, version=None, bound=False) -> Facts:
    summary = {"requests": 0, "path_rtt_ms": path, "path_rtt_source": "ping", "statistics": stats}
    return Facts(None, {}, 0, path, bound, version, None, summary,
                 {"stats": stats, "signals": {}, "completed_ms": 0.0, "evidence_read": {"stats": 3}})


BASE = {"snapshots": 3, "brokers": 1, "rtt_p50_ms": 2.0, "rtt_p99_ms": 3.0, "int_latency_p50_ms": 1.0,
        "throttle_avg_ms": 0.0, "throttle_max_ms": 0.0, "tx": 300, "tx_grew": 200}


def _verdict(stats: dict, **kw):
    got = from_signals_only(_run({**BASE, **stats}, **kw), None, [])
    return got["verdict"], got


def test_statistics_rules_on_the_driver():
    assert _verdict({})[1]["undecided"]
    assert _verdict({"int_latency_p50_ms": 30.0})[0] == "client_queueing"
    # Queueing shorter than the round trip is not the client's.
    assert _verdict({"int_latency_p50_ms": 30.0, "rtt_p50_ms": 40.0})[0] != "client_queueing"
    assert _verdict({"throttle_avg_ms": 5.0, "throttle_max_ms": 9.0, "throttled_snapshots": 1})[0] == "throttled"
    assert _verdict({"txretries": 4, "txretries_grew": 4})[0] == "retry_backoff"
    assert _verdict({"req_timeouts": 1, "req_timeouts_grew": 0})[0] == "request_timeout"
    # An upper bound on the path cannot say the network explains the rtt.
    assert _verdict({"rtt_p50_ms": 60.0}, path=50.0, bound=True)[1]["undecided"]
    assert _verdict({"rtt_p50_ms": 60.0}, path=5.0, bound=True)[0] == "broker_slow"
    small = {"batch_msgs_p50": 1.0, "msg_cnt_max": 500}
    assert _verdict(small)[0] == "small_batches"
    assert _verdict({**small, "msg_cnt_max": 0})[1]["undecided"]   # nothing waited: a quiet producer


def write_tls_log(path, small_ms: float, produce_ms: float, n: int = 8):
    """librdkafka's debug log (``%7|epoch|FAC|name| ...``) of a TLS broker:
    a 25-byte ApiVersionRequest, then ``n`` Produce requests."""
    b = "ssl://k1.example:9093/1"
    t = 1_760_000_000.0
    out = []

    def line(at, fac, text):
        out.append(f"%7|{at:.3f}|{fac}|rdkafka#producer-1| [thrd:{b}]: {b}: {text}")
    line(t, "SEND", "Sent ApiVersionRequest (v3, 25 bytes @ 0, CorrId 1)")
    line(t + small_ms / 1000, "RECV", f"Received ApiVersionResponse (v3, 400 bytes, CorrId 1, rtt {small_ms:.2f}ms)")
    for i in range(n):
        at = t + 1 + i * 0.5
        line(at, "SEND", f"Sent ProduceRequest (v7, 1200 bytes @ 0, CorrId {i + 2})")
        line(at + produce_ms / 1000, "RECV",
             f"Received ProduceResponse (v7, 60 bytes, CorrId {i + 2}, rtt {produce_ms:.2f}ms)")
    path.write_text("\n".join(out) + "\n")
    return path


def test_a_one_record_request_as_slow_rules_nagle_out(spark, tmp_path):
    rc, f = replay(write_tls_log(tmp_path / "slow_all.log", 66.0, 62.0))
    assert rc == 0 and f["summary"]["requests"] == 8
    assert "Nagle is ruled out" in f["summary"]["nagle_ruled_out"]
    assert f["verdict"] != "nagle_delayed_ack"
    assert all(x["cause"] not in ("nagle_delayed_ack", "nagle_in_path") for x in f["findings"])
    assert f["likely"][0]["cause"] != "nagle_delayed_ack"
    assert any("ApiVersionRequest" in e for x in f["findings"] for e in x["evidence"])
    assert f["findings"][0]["rests_on"][0] == "requests"
    # The same log with a fast ApiVersionRequest: Nagle stays possible.
    rc, f = replay(write_tls_log(tmp_path / "fast_small.log", 1.0, 62.0))
    assert "nagle_ruled_out" not in f["summary"]


def test_error_lines_alone(spark, tmp_path):
    """Connection failures alone name broker_down (a handle decommissioned
    at shutdown does not); delivery failures that say
    messages timed out name request_timeout; both from the error lines."""
    b = "k1.example:9092/bootstrap"
    t = 1_760_000_000.0
    down = tmp_path / "refused.log"
    down.write_text("".join(
        f"%3|{t + i:.3f}|FAIL|rdkafka#producer-1| [thrd:{b}]: {b}: Connect to ipv4#192.0.2.10:9092 failed: "
        f"Connection refused (after {i}ms in state CONNECT)\n"
        f"%7|{t + i + 0.001:.3f}|STATE|rdkafka#producer-1| [thrd:{b}]: {b}: Broker changed state CONNECT -> DOWN\n"
        for i in range(3))
        + f"%7|{t + 9:.3f}|FAIL|rdkafka#producer-1| [thrd:{b}]: {b}: Decommissioning this broker (after 2ms in state "
          f"UP) (_DESTROY_BROKER)\n")
    rc, f = replay(down)
    assert rc == 0 and f["verdict"] == "broker_down", f["findings"]
    assert f["findings"][0]["rests_on"] == ["error lines"]
    assert any("Connection refused" in e and "3 line(s)" in e for e in f["findings"][0]["evidence"])
    assert f["confidence"].startswith("low")

    timed = tmp_path / "timed_out.log"
    timed.write_text("".join(
        f"%7|{t + i:.3f}|MSGSET|rdkafka#producer-1| [thrd:k1.example:9092/1]: k1.example:9092/1: orders [{i}]: "
        f"MessageSet with 4 message(s) (MsgId 0, BaseSeq -1) encountered error: Local: Message timed out "
        f"(actions Permanent,MsgNotPersisted)\n" for i in range(3)))
    rc, f = replay(timed)
    assert f["verdict"] == "request_timeout", f["findings"]
    assert "retry_backoff" not in {x["cause"] for x in f["findings"]}
    assert f["findings"][0]["rests_on"] == ["error lines"]


def test_what_a_request_finding_rests_on():
    from kdiag.analysis.causes import BY_NAME
    from kdiag.analysis.judge import request_rests_on

    def facts(source, path=None, **meta):
        return Facts(None, {}, 10, path, False, None, None, {"source": source}, meta)
    nagle = BY_NAME["nagle_delayed_ack"]
    assert request_rests_on(nagle, facts("strace")) == ["requests", "syscalls"]
    assert request_rests_on(nagle, facts("log", 0.3, evidence_read={"sockets": 4})) == \
        ["requests", "path", "socket samples"]
    assert request_rests_on(BY_NAME["throttled"], facts("syscalls", has_stats=True)) == ["syscalls", "statistics"]
    assert request_rests_on(BY_NAME["healthy"], facts("log", 0.3)) == ["requests"]


def test_the_statistics_newer_columns_are_read_when_present(spark):
    """The windows' ``_cnt`` (an empty window is left out), the snapshot
    ordinal, msg_cnt and the per-topic batch windows, when the table has them."""
    from kdiag.analysis.stats_windows import stats_summary

    rows = []
    for snap in (1, 2, 3):
        for broker, nodeid, state, cnt in (("b:9092/bootstrap", -1, "UP", 0), ("b:9092/1", 1, "UP", 20),
                                           ("b:9092/2", 2, "UP", 0)):
            rows.append({"line_no": snap, "ts_us": 1_760_000_000_000_000, "client": "p", "broker": broker,
                         "nodeid": nodeid, "state": state, "snapshot": snap,
                         "rtt_avg_ms": 4.0 if cnt else 0.5, "rtt_p50_ms": 4.0 if cnt else 0.5, "rtt_p99_ms": 6.0,
                         "rtt_cnt": cnt, "int_latency_avg_ms": 50.0 * snap, "int_latency_p50_ms": 50.0 * snap,
                         "int_latency_p99_ms": 90.0 * snap, "int_latency_cnt": cnt,
                         "outbuf_latency_avg_ms": 0.1, "outbuf_latency_p50_ms": 0.1, "outbuf_latency_p99_ms": 0.2,
                         "outbuf_latency_cnt": cnt, "throttle_avg_ms": 0.0, "throttle_max_ms": 0.0,
                         "tx": 10 * snap, "txretries": 0, "req_timeouts": 0, "txerrs": 0, "msg_cnt": 30 * snap,
                         "msg_max": 100000})
    stats = spark.createDataFrame(rows)
    topics = spark.createDataFrame([{"snapshot": s, "topic": "orders", "batchcnt_p50": 1.0, "batchcnt_avg": 1.2,
                                     "batchcnt_max": 3, "batchsize_p50": 250.0, "batchsize_avg": 260.0}
                                    for s in (1, 2, 3)])
    st = stats_summary(stats, topics)
    assert st["snapshots"] == 3 and st["brokers"] == 2   # the bootstrap handle is not a broker
    # Broker 2's empty window (rtt_cnt 0) leaves its 0.5 ms out.
    assert st["rtt_p50_ms"] == 4.0 and [p["snapshot"] for p in st["series"]] == [1, 2, 3]
    assert [p["int_latency_p50_ms"] for p in st["series"]] == [50.0, 100.0, 150.0]
    assert st["msg_cnt_max"] == 90 and st["tx"] == 60 and st["tx_grew"] == 40   # both UP brokers sent
    assert st["batch_msgs_p50"] == 1.0 and st["batch_bytes_p50"] == 250.0 and st["batch_topics"] == 1
    assert _verdict({k: v for k, v in st.items() if k != "series"})[0] == "client_queueing"


def test_idle_disconnects_are_not_a_broker_down(spark, tmp_path):
    """Connections the broker closed while idle (connections.max.idle.ms)
    decide nothing; a connection dropped within a second of coming up, or
    messages queued for a broker that is not up, are broker_down."""
    b = "k2.example:9092/2"
    t = 1_760_000_000.0
    idle = tmp_path / "idle.log"
    idle.write_text(
        f"%3|{t:.3f}|FAIL|rdkafka#producer-1| [thrd:{b}]: {b}: Receive failed: Disconnected\n"
        f"%3|{t + 0.001:.3f}|ERROR|rdkafka#producer-1| [thrd:{b}]: {b}: Receive failed: Disconnected\n"
        f"%7|{t + 600:.3f}|FAIL|rdkafka#producer-1| [thrd:{b}]: {b}: Disconnected (after 600004ms in state UP)\n"
        f"%7|{t + 600.001:.3f}|STATE|rdkafka#producer-1| [thrd:{b}]: {b}: Broker changed state UP -> DOWN\n")
    rc, f = replay(idle)
    assert rc == 0 and f["verdict"] is None and f["undecided"], f["findings"]
    assert not f["findings"]
    assert any("idle connections" in u and "600 s" in u for u in f["unknowns"]), f["unknowns"]

    short = tmp_path / "short.log"
    short.write_text("".join(
        f"%7|{t + i:.3f}|FAIL|rdkafka#producer-1| [thrd:{b}]: {b}: Disconnected (after {40 + i}ms in state UP)\n"
        f"%7|{t + i + 0.2:.3f}|TOPPAR|rdkafka#producer-1| [thrd:{b}]: {b}: orders [1] 3 message(s) queued but "
        f"broker not up\n" for i in range(3)))
    rc, f = replay(short)
    assert rc == 0 and f["verdict"] == "broker_down", f["findings"]
    assert f["findings"][0]["rests_on"] == ["error lines"]
    assert f["findings"][0]["requests"] == 6


def test_application_errors_and_counted_lines(spark, tmp_path):
    """Delivery reports an application logged ("Local: Message timed out")
    name request_timeout when they repeat, one alone decides nothing; a
    line counted by uniq -c stands for its count."""
    def app_log(name, n):
        p = tmp_path / name
        p.write_text("2026-11-28 10:00:01,120 INFO  app.producer - started producer for topic ledger\n" + "".join(
            f"2026-11-28 10:00:31,{900 + i} ERROR app.producer - delivery of record {17 + i} failed: "
            f"Local: Message timed out\n" for i in range(n)))
        return p
    rc, f = replay(app_log("three.log", 3))
    assert rc == 0 and f["verdict"] == "request_timeout", f["findings"]
    assert f["findings"][0]["rests_on"] == ["error lines"] and f["findings"][0]["requests"] == 3
    rc, f = replay(app_log("one.log", 1))
    assert f["verdict"] is None and f["undecided"], f["findings"]

    b = "k3.example:9092/3"
    counted = tmp_path / "counted.txt"
    counted.write_text(
        f"     40 %3|1760000000.100|FAIL|rdkafka#producer-1| [thrd:{b}]: {b}: Connect to ipv4#192.0.2.33:9092 "
        f"failed: Connection refused (after 1ms in state CONNECT)\n"
        f"      2 %3|1760000000.200|ERROR|rdkafka#producer-1| [thrd:{b}]: {b}: Connect to ipv4#192.0.2.33:9092 "
        f"failed: Connection refused\n")
    rc, f = replay(counted)
    assert f["verdict"] == "broker_down" and f["findings"][0]["requests"] == 42, f["findings"]
    assert f["findings"][0]["rests_on"] == ["error lines"]


def test_a_full_or_growing_client_queue_is_client_queueing():
    """msg_cnt at msg_max, or a queue count that grows across snapshots, is
    client_queueing from the statistics alone, without an int_latency window."""
    bare = {"int_latency_p50_ms": None, "rtt_p50_ms": None}
    verdict, got = _verdict({**bare, "msg_cnt_max": 99_950, "msg_max_max": 100_000})
    assert verdict == "client_queueing" and got["findings"][0]["rests_on"] == ["statistics"]
    assert any("99950 messages of at most 100000" in e for e in got["findings"][0]["evidence"])
    assert _verdict({**bare, "msg_cnt_max": 4_000, "msg_max_max": 100_000})[1]["undecided"]
    series = [{"snapshot": i, "msg_cnt": 500 * 4 ** i} for i in range(4)]
    verdict, got = _verdict({**bare, "msg_cnt_max": 32_000, "msg_max_max": 100_000, "series": series})
    assert verdict == "client_queueing"
    assert any("grew from 500 to 32000" in e for e in got["findings"][0]["evidence"])
    # A count that rises and falls is batches forming and leaving.
    series = [{"snapshot": i, "msg_cnt": n} for i, n in enumerate((500, 3000, 200, 2500))]
    assert _verdict({**bare, "msg_cnt_max": 3000, "msg_max_max": 100_000, "series": series})[1]["undecided"]


def test_a_cut_object_with_a_full_queue(spark, tmp_path):
    """An object cut after its bootstrap handle still says the client's queue
    was full: msg_cnt and msg_max are the client's, not a broker's."""
    whole = json.dumps({
        "name": "rdkafka#producer-1", "client_id": "rdkafka", "type": "producer", "ts": 5_000_000,
        "time": 1_760_000_000, "replyq": 0, "msg_cnt": 49_990, "msg_size": 0, "msg_max": 50_000,
        "msg_size_max": 1073741824,
        "brokers": {"k1.example:9092/bootstrap": _broker("k1.example:9092/bootstrap", -1, "UP", 0.0, 0.0),
                    "k1.example:9092/1": _broker("k1.example:9092/1", 1, "UP", 2.0, 1.0)}}, indent=2)
    cut = tmp_path / "cut.json"
    cut.write_text(whole[:whole.index('"k1.example:9092/1"')] + "\n")
    rc, f = replay(cut)
    assert rc == 0 and f["verdict"] == "client_queueing", (f["findings"], f["unknowns"])
    assert f["findings"][0]["rests_on"] == ["statistics"]
    assert any("49990 messages of at most 50000" in e for e in f["findings"][0]["evidence"])


def test_topic_windows_alone_name_small_batches(spark, tmp_path):
    """The "topics" part of an object alone: hundreds of one-message batches
    are small_batches, from the statistics; a few are not enough."""
    def win(v, n):
        return {"min": v, "max": v, "avg": v, "sum": v * n, "stddev": 0, "p50": v, "p75": v, "p90": v, "p95": v,
                "p99": v, "p99_99": v, "outofrange": 0, "hdrsize": 100, "cnt": n}
    body = json.dumps({"ledger": {"topic": "ledger", "age": 30000, "metadata_age": 29000,
                                  "batchsize": win(180, 420), "batchcnt": win(1, 420)}}, indent="\t")
    part = tmp_path / "topics.txt"
    part.write_text('"topics": ' + body + "\n")
    rc, f = replay(part)
    assert rc == 0 and f["verdict"] == "small_batches", (f["findings"], f["unknowns"])
    assert f["findings"][0]["rests_on"] == ["statistics"]
    assert any("over 420 batches" in e for e in f["findings"][0]["evidence"])
    few = {"brokers": 0, "tx": None, "tx_grew": None, "int_latency_p50_ms": None, "rtt_p50_ms": None,
           "batch_msgs_p50": 1.0, "batch_windows": 1, "batch_count": 12}
    assert _verdict(few)[1]["undecided"]
    assert _verdict({**few, "batch_count": 400})[0] == "small_batches"


def _perf_table(path, rows):
    names = ("elapsed", "msgs", "bytes", "rtt", "dr", "dr_m/s", "dr_MB/s", "dr_err", "tx_err", "outq")
    lines = ["% Sending messages of size 200 bytes", "|" + "|".join(f"{n:>12} " for n in names) + "|"]
    for r in rows:
        lines.append("|" + "|".join(f"{v:>12} " for v in r) + "|")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_performance_tool_backlog_is_client_queueing(spark, tmp_path):
    """rdkafka_performance's table: undelivered messages at tens of
    thousands while produce() is refused is client_queueing; a few refusals
    beside no backlog decide nothing."""
    rows = [(1000 * i, 90_000 * i, 18_000_000 * i, 40 + 20 * i, 60_000 * i - 50_000, 60_000, "12.00", 0, 150 * i,
             30_000 + 15_000 * i) for i in range(1, 5)]
    rc, f = replay(_perf_table(tmp_path / "perf.txt", rows))
    assert rc == 0 and f["verdict"] == "client_queueing", (f["findings"], f["unknowns"])
    assert f["findings"][0]["rests_on"] == ["statistics"]
    assert any("up to 90000 messages not yet delivered" in e and "600 produce()" in e
               for e in f["findings"][0]["evidence"]), f["findings"][0]["evidence"]
    rc, f = replay(_perf_table(tmp_path / "calm.txt", [(1000, 90_000, 18_000_000, 3, 89_000, 89_000, "17.80", 0, 12,
                                                         1000)]))
    assert f["verdict"] != "client_queueing", f["findings"]


def test_a_slow_opening_request_alone_is_the_path(spark, tmp_path):
    """No Produce request, only a connection's ApiVersionRequest that took
    long: network_latency at low confidence, resting on the requests; a fast
    one decides nothing."""
    rc, f = replay(write_tls_log(tmp_path / "opener.log", 71.0, 62.0, n=0))
    assert rc == 0 and f["verdict"] == "network_latency", (f["findings"], f["unknowns"])
    top = f["findings"][0]
    assert top["rests_on"] == ["requests"] and top["share"] == 0.5
    assert any("ApiVersionRequest" in e and "71 ms" in e for e in top["evidence"]), top["evidence"]
    rc, f = replay(write_tls_log(tmp_path / "fast_opener.log", 0.9, 62.0, n=0))
    assert f["verdict"] != "network_latency", f["findings"]


def test_an_strace_summary_alone_says_what_it_shows(spark, tmp_path):
    """strace -c's table decides no cause by itself; the undecided result
    says which call took the traced time."""
    summary = tmp_path / "strace_c.txt"
    summary.write_text(
        "% time     seconds  usecs/call     calls    errors syscall\n"
        "------ ----------- ----------- --------- --------- ----------------\n"
        " 97.10    2.401200          40     60030           poll\n"
        "  2.90    0.071700          13      5190           sendmsg\n"
        "------ ----------- ----------- --------- --------- ----------------\n"
        "100.00    2.472900                 65220           total\n")
    rc, f = replay(summary)
    assert rc == 0 and f["verdict"] is None and f["undecided"], f["findings"]
    assert any("poll: 97.1% of the traced time, 60,030 calls, 40 µs a call" in u for u in f["unknowns"]), \
        f["unknowns"]


def test_two_statistics_files_are_two_series_of_snapshots_not_one(tmp_path):
    """Each file numbers its snapshots from 1: a second file's come after
    the first's instead of being taken for the same snapshots."""
    from conftest import FIXTURES

    real = FIXTURES / "stats" / "real.jsonl"
    old = FIXTURES / "stats" / "v0_9_windows.txt"
    rc, f = replay(real, old)
    st = f["summary"]["statistics"]
    assert rc == 0 and st["snapshots"] == len(real.read_text().splitlines()) + 1, st
    assert [p["snapshot"] for p in st["series"]] == list(range(1, st["snapshots"] + 1))
    assert st["series"][-1]["int_latency_p50_ms"] == 507.0 and st["series"][0]["int_latency_p50_ms"] < 50


def test_whole_second_times_give_a_send_stall_only_as_bounds(tmp_path):
    """A stall read from whole-second lines is known to a second either
    way: 30 s of pieces is a stall between 29 and 31 s; pieces within a
    second or two of each other name nothing."""
    b = "k1.example:9092/1"
    pre = "[2026-11-25 10:00:{:02d}] [sink.cpp:61] INFO  - LOG:7SEND" + f"[thrd:{b}]: {b}: "

    def stalled(spread_s: list[int], name: str):
        lines = [pre.format(s) + f"Sent partial ProduceRequest (v3, {i * 1000}+1000/9000 bytes, CorrId 7)"
                 for i, s in enumerate(spread_s)]
        lines.append(pre.format(spread_s[-1]) + "Sent ProduceRequest (v3, 9000 bytes @ 0, CorrId 7)")
        p = tmp_path / name
        p.write_text("\n".join(lines) + "\n")
        return replay(p)

    rc, f = stalled([0, 4, 17, 30], "long.log")
    assert rc == 0 and f["verdict"] == "broker_slow", f["findings"]
    assert any("between 29000 and 31000 ms" in e and "only bounds" in e for e in f["findings"][0]["evidence"])
    rc, f = stalled([0, 1], "short.log")
    assert rc == 0 and "broker_slow" not in {x["cause"] for x in f["findings"]}, f["findings"]


def test_a_transport_failure_the_application_got_is_a_broker_it_cannot_reach(spark, tmp_path):
    """An error callback's RD_KAFKA_RESP_ERR__TRANSPORT printed as its
    string only (a debug-module logger, stack frames between) with nothing
    completed is broker_down; beside an idle disconnect it decides nothing."""
    frames = ("  svc:kafka     at KafkaError.from (/srv/app/node_modules/kafka-client/errors.js:88:12)\n"
              "  svc:kafka     at Producer.<anonymous> (/srv/app/node_modules/kafka-client/producer.js:120:9) +1ms\n")
    bare = tmp_path / "bare.log"
    bare.write_text("".join(f"  svc:kafka Error: Local: Broker transport failure\n{frames}" for _ in range(3))
                    + "  svc:kafka Error: Local: All broker connections are down\n")
    rc, f = replay(bare)
    assert rc == 0 and f["verdict"] == "broker_down", f["findings"]
    assert f["findings"][0]["rests_on"] == ["error lines"] and f["findings"][0]["requests"] == 4
    assert any("Broker transport failure" in e for e in f["findings"][0]["evidence"]), f["findings"][0]

    # The same copies beside a connection the broker closed after ten idle minutes.
    b = "k4.example:9092/4"
    idle = tmp_path / "idle_and_bare.log"
    idle.write_text(f"%7|1760000600.000|FAIL|rdkafka#producer-1| [thrd:{b}]: {b}: Disconnected (after 600011ms "
                    f"in state UP)\n" + bare.read_text())
    rc, f = replay(idle)
    assert rc == 0 and f["verdict"] is None and f["undecided"], f["findings"]

    # The application's copy with librdkafka's errstr is read as its FAIL line.
    said = tmp_path / "said.log"
    said.write_text("".join(
        f"2026-11-28 10:00:0{i},100 ERROR app.kafka - error callback: KafkaError{{code=_TRANSPORT,val=-195,"
        f"str=\"{b}: Connect to ipv4#192.0.2.44:9092 failed: Connection refused (after 0ms in state CONNECT)\"}}\n"
        for i in range(2)))
    rc, f = replay(said)
    assert f["verdict"] == "broker_down" and f["findings"][0]["requests"] == 2, f["findings"]


def _pollout_loop(path, writes: bool):
    """A broker thread's poll() answered POLLOUT eight times, each followed
    by a read that gets EAGAIN and, with ``writes``, the request it sends."""
    lines = []
    for i in range(8):
        lines.append(f"[pid 9120] poll([{{fd=12, events=POLLIN|POLLOUT}}, {{fd=9, events=POLLIN}}], 2, {230 - i // 3}) "
                     f"= 1 ([{{fd=12, revents=POLLOUT}}])")
        if writes:
            lines.append("[pid 9120] sendmsg(12, {msg_name=NULL, msg_namelen=0, msg_iov=[{iov_base=\"\\0\\0\\0\\x52\", "
                         "iov_len=86}], msg_iovlen=1, msg_controllen=0, msg_flags=0}, MSG_DONTWAIT|MSG_NOSIGNAL) = 86")
        lines.append("[pid 9120] read(12, 0x7ffd2c0010a0, 4)  = -1 EAGAIN (Resource temporarily unavailable)")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_spinning_client_from_its_strace(spark, tmp_path):
    """A thread that poll()s for POLLOUT, writes nothing and reads EAGAIN,
    again and again, is client_cpu from the syscalls; the same loop that
    sends a request each time is a producer at work and decides nothing."""
    rc, f = replay(_pollout_loop(tmp_path / "spin.txt", writes=False))
    assert rc == 0 and f["verdict"] == "client_cpu", (f["findings"], f["unknowns"])
    top = f["findings"][0]
    assert top["rests_on"] == ["syscalls"] and top["requests"] == 8
    assert any("8 times" in e and "POLLOUT" in e for e in top["evidence"]), top["evidence"]
    assert "1.7.0" in top["fix_text"]
    rc, f = replay(_pollout_loop(tmp_path / "busy.txt", writes=True))
    assert "client_cpu" not in {x["cause"] for x in f["findings"]}, f["findings"]


def test_counted_short_polls_and_the_fix_by_version(tmp_path):
    """Counted 1 ms poll timeouts: thousands in a thread that moves almost
    no data spin; a few hundred, or as many beside as many writes, do not.
    The fix names the setting for 0.8, the upgrade for the POLLOUT loop."""
    from kdiag.analysis.causes.client_cpu import spin_fix
    from kdiag.analysis.spinning import from_counted
    from kdiag.ingest.tables import parse_paths

    def counted(name, polls, writes):
        p = tmp_path / name
        p.write_text(f"   {polls} [pid 700] poll([{{fd=30, events=POLLIN}}], 1, 1 <unfinished ...>\n"
                     f"   {polls} [pid 701] poll([{{fd=31, events=POLLIN}}], 1, 1 <unfinished ...>\n"
                     f"   {writes} [pid 700] write(30, \"\\0\\0\\0\\x40\"..., 68) = 68\n"
                     f"      1 [pid 699] futex(0x5581d2, FUTEX_WAIT_PRIVATE, 0, NULL <unfinished ...>\n")
        out = tmp_path / (name + ".tables")
        parse_paths([p], out)
        return from_counted(out)

    spin = counted("spin.txt", 1500, 3)
    assert spin["kind"] == "short_timeout" and spin["threads"] == 2 and spin["wakeups"] == 3000, spin
    assert counted("few.txt", 300, 0) is None
    busy = counted("busy.txt", 1500, 900)
    assert busy["threads"] == 1, busy   # pid 700 moved data between its polls; pid 701 did not
    assert "queue.buffering.max.ms" in spin_fix("short_timeout", (0, 8, 6)) and "0.9" in spin_fix("short_timeout",
                                                                                                   (0, 8, 6))
    assert "upgrade librdkafka to 1.7.0" in spin_fix("empty_pollout", (1, 4, 0))
    assert "report" in spin_fix("empty_pollout", (2, 3, 0)) and "1.7.0" not in spin_fix("empty_pollout", (2, 3, 0))


def test_purged_messages_alone_decide_nothing_and_say_so(spark, tmp_path):
    """The application's purge errors ("Local: Purged in queue") say messages
    were still queued when it purged them, not why: undecided, the purge
    described."""
    log = tmp_path / "sink.log"
    log.write_text("".join(
        f"2026-11-28T09:14:0{i}.120044Z ERROR sink{{id=events}}: app::sink: send failed "
        f"error=Some(KafkaError (Message production error: PurgeQueue (Local: Purged in queue)))\n" for i in range(3)))
    rc, f = replay(log)
    assert rc == 0 and f["verdict"] is None and f["undecided"], f["findings"]
    assert any("purged messages" in u and "Local: Purged in queue" in u and "not why" in u for u in f["unknowns"]), \
        f["unknowns"]
