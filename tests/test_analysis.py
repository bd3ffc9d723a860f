"""The analysis rules on small hand-made frames."""
from kdiag.analysis import classify, requests

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
        ("c", "b", 6, None, None, 50.0, None),  # no syscall evidence
        ("c", "b", 7, None, None, 2.0, None),
    ]
    assert causes(spark, rows, 0.1) == ["nagle_delayed_ack", "nagle_in_path", "broker_slow", "healthy",
                                        "broker_slow", "unexplained_slow", "healthy"]


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
