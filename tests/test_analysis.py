"""The analysis rules on small hand-made frames."""
from kdiag.analysis.causes import classify, resolve_slow, verdict_of
from kdiag.analysis.judge import one_write_rules_out_nagle
from kdiag.analysis.per_request import requests

REQ = "client string, broker string, corr_id int, n_writes int, wait_ms double, total_ms double, nodelay boolean"


def causes(spark, rows, path_rtt):
    df = spark.createDataFrame(rows, REQ)
    return [r.cause for r in classify(df, path_rtt).orderBy("corr_id").collect()]


def test_cause_rules(spark):
    rows = [
        ("c", "b", 1, 3, 43.0, 43.5, None),   # several writes + delayed-ACK wait: Nagle
        ("c", "b", 2, 3, 43.0, 43.5, True),   # same, but the client socket has TCP_NODELAY
        ("c", "b", 3, 1, 43.0, 43.5, False),  # one write: Nagle cannot hold it
        ("c", "b", 4, 3, 0.4, 0.8, False),    # fast
        ("c", "b", 5, 3, 400.0, 401.0, False),  # far beyond TCP_DELACK_MAX
        ("c", "b", 6, None, None, 50.0, None),  # no syscalls, but a fast path measured: the broker's
        ("c", "b", 7, None, None, 2.0, None),
    ]
    assert causes(spark, rows, 0.1) == ["nagle_delayed_ack", "nagle_in_path", "slow_wait", "healthy",
                                        "slow_wait", "slow_wait", "healthy"]


def test_log_only_rules(spark):
    """Requests known only from librdkafka's lines (no syscalls): the rtt
    band over TLS is Nagle's; the path decides the rest; without it,
    unexplained."""
    tls, plain = "ssl://h:9093/1", "h:9092/1"
    rows = [
        ("c", tls, 1, None, None, 43.5, None),     # TLS, 40 ms band
        ("c", plain, 2, None, None, 43.5, None),   # plaintext: one write, Nagle holds nothing
        ("c", tls, 3, None, None, 400.0, None),    # far beyond the band
        ("c", tls, 4, None, None, 0.8, None),      # fast
    ]
    assert causes(spark, rows, None) == ["nagle_delayed_ack", "unexplained_slow", "unexplained_slow", "healthy"]
    assert causes(spark, rows, 1.0) == ["nagle_delayed_ack", "slow_wait", "slow_wait", "healthy"]
    assert causes(spark, rows, 40.0)[:3] == ["network_latency", "network_latency", "slow_wait"]


def test_one_write_requests_rule_out_nagle_only_when_there_are_enough():
    assert one_write_rules_out_nagle(5, 51.4, 51.6)          # the slow-broker lab
    assert not one_write_rules_out_nagle(5, 0.4, 43.0)       # Nagle: one-write requests are fast
    # one slow one-write request among 72 split ones: a request whose first
    # writes came before the tracer attached, not evidence
    assert not one_write_rules_out_nagle(1, 30.8, 43.4)
    assert not one_write_rules_out_nagle(0, None, 43.4)
    assert not one_write_rules_out_nagle(5, 8.0, 12.0)       # both fast


def test_path_rtt_explains_the_wait(spark):
    rows = [("c", "b", 1, 1, 31.0, 31.5, True), ("c", "b", 2, 3, 75.0, 75.5, False)]
    # a 30 ms path: the one-write wait is the network; 75 ms with several
    # writes is 45 ms beyond the path, the delayed ACK
    assert causes(spark, rows, 30.0) == ["network_latency", "nagle_delayed_ack"]


def test_pairing_by_client_broker_and_corr_id(spark):
    ev = spark.createDataFrame([
        # same corr id on two brokers; a second producer reusing the name later
        ("p-1", "b1", 5, "send", "Produce", 100, 1000, 1, None),
        ("p-1", "b2", 5, "send", "Produce", 100, 1100, 2, None),
        ("p-1", "b2", 5, "recv", "Produce", 40, 2100, 3, 1.0),
        ("p-1", "b1", 5, "recv", "Produce", 40, 5000, 4, 4.0),
        ("p-1", "b1", 5, "send", "Produce", 100, 9000, 5, None),
        ("p-1", "b1", 5, "recv", "Produce", 40, 9500, 6, 0.5),
        ("p-1", "b1", 6, "send", "Produce", 100, 9600, 7, None),  # never answered
    ], "client string, broker string, corr_id int, event string, request string, size_bytes long, "
       "ts_us long, line_no long, rtt_ms double")
    got = sorted((r.broker, r.send_line, r.recv_line) for r in requests(spark, ev).collect())
    assert got == [("b1", 1, 4), ("b1", 5, 6), ("b2", 2, 3)]


def resolved(spark, waits, retrans):
    rows = [("c", "b", i, 1, w, w + 0.5, True) for i, w in enumerate(waits)]
    df = classify(spark.createDataFrame(rows, REQ), 1.0)
    return sorted({r.cause for r in resolve_slow(df, retrans).collect()} - {"healthy"})


def test_slow_tail_is_loss_slow_body_is_the_broker(spark):
    fast, stall = [1.5] * 18, [210.0, 230.0]
    assert resolved(spark, fast + stall, None) == ["packet_loss"]   # shape alone
    assert resolved(spark, fast + stall, 7) == ["packet_loss"]      # and retransmits seen
    assert resolved(spark, fast + stall, 0) == ["broker_slow"]      # known: no retransmit
    assert resolved(spark, [80.0] * 20, None) == ["broker_slow"]    # the whole body is slow


def test_verdict_of():
    loss = {"cause": "packet_loss", "share": 0.05, "time_share": 0.6}
    assert verdict_of([{"cause": "nagle_delayed_ack", "share": 0.9}]) == "nagle_delayed_ack"
    assert verdict_of([loss]) == "packet_loss"
    assert verdict_of([{**loss, "time_share": 0.1}]) == "healthy"
    assert verdict_of([]) == "healthy"


def test_client_cpu_rule(spark):
    schema = REQ + ", runq_ms double"
    rows = [
        ("c", "b", 1, 3, 80.0, 80.5, False, 75.0),   # waited for a core most of the time
        ("c", "b", 2, 3, 43.0, 43.5, False, 35.0),   # looks like Nagle, but the thread was starved
        ("c", "b", 3, 1, 80.0, 80.5, False, 10.0),   # a little CPU wait does not explain 80 ms
        ("c", "b", 4, 1, 5.0, 5.5, False, 5.0),      # fast: nothing to explain
        ("c", "b", 6, 3, 0.5, 70.5, False, 69.0),    # lost its core while sending, not while waiting
        ("c", "b", 5, 1, 80.0, 80.5, False, None),   # no thread samples
    ]
    df = spark.createDataFrame(rows, schema)
    got = [r.cause for r in classify(df, 0.1).orderBy("corr_id").collect()]
    assert got == ["client_cpu", "client_cpu", "slow_wait", "healthy", "slow_wait", "client_cpu"]


def test_runq_of_credits_the_wait_where_it_ends(spark, tmp_path):
    """schedstat adds a run-queue wait when the wait ends: a request that
    stalled 70 ms for a core shows it in the sample after its end."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kdiag.analysis.samples import runq_of

    ms = 1000
    # thread 7 sampled every 100 ms; 70 ms of run-queue wait credited at t=300 ms
    pq.write_table(pa.table({
        "ts_us": [0, 100 * ms, 200 * ms, 300 * ms, 400 * ms],
        "pid": [1] * 5, "tid": [7] * 5, "runq_wait_ms": [0.0, 0.0, 1.0, 71.0, 71.0],
    }), tmp_path / "threads.parquet")
    reqs = spark.createDataFrame([
        (7, 150 * ms, 150 * ms, 230 * ms),   # overlaps [100, 200] and [200, 300]: 1 + 70 ms
        (7, 310 * ms, 310 * ms, 390 * ms),   # after it: nothing
        (8, 150 * ms, 150 * ms, 230 * ms),   # another thread
        (None, 150 * ms, 150 * ms, 230 * ms),
    ], "pid int, send_start_us long, send_us long, recv_us long")
    got = sorted((r.pid or 0, r.send_us, r.runq_ms) for r in runq_of(spark, tmp_path, reqs).collect())
    assert got == [(0, 150 * ms, None), (7, 150 * ms, 71.0),
                   (7, 310 * ms, 0.0), (8, 150 * ms, 0.0)]
