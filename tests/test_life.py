"""The connection timeline (kdiag/analysis/life.py) walked from rows in
the shape the librdkafka log parser gives, with lines written here in
librdkafka's own wording (rdkafka_broker.c, rdkafka_transport.c)."""
from kdiag.analysis import life

B = "ssl://broker.example:9093/bootstrap"


def row(n, ms, event, detail=None, text=None, broker=B):
    return {"line_no": n, "ts_us": None if ms is None else 1_000_000_000 + ms * 1000, "client": "rdkafka#producer-1",
            "broker": broker, "event": event, "detail": detail, "text": text or detail}


def state(n, ms, frm, to, broker=B):
    return row(n, ms, "state", f"{frm} -> {to}", f"Broker changed state {frm} -> {to}", broker)


def healthy(start=0, resolve=1, connect=1, tls=3, broker=B, line=1):
    return [state(line, start, "INIT", "TRY_CONNECT", broker),
            state(line + 1, start, "TRY_CONNECT", "CONNECT", broker),
            row(line + 2, start + resolve, "connect", "ipv4#10.0.0.5:9093 (ssl)",
                "Connecting to ipv4#10.0.0.5:9093 (ssl) with socket 8", broker),
            row(line + 3, start + resolve + connect, "connected", "ipv4#10.0.0.5:9093", None, broker),
            state(line + 4, start + resolve + connect, "CONNECT", "SSL_HANDSHAKE", broker),
            state(line + 5, start + resolve + connect + tls, "SSL_HANDSHAKE", "APIVERSION_QUERY", broker),
            state(line + 6, start + resolve + connect + tls + 1, "APIVERSION_QUERY", "UP", broker)]


def phases(att):
    return {p["phase"]: p["ms"] for p in att["phases"]}


def test_each_state_is_a_phase_and_resolution_ends_at_connecting_to():
    (att,) = life.walk(healthy(resolve=2007, connect=2, tls=4))
    assert att["outcome"] == "up" and att["up_us"] is not None
    assert phases(att) == {"backoff": 0.0, "resolve": 2007.0, "connect": 2.0, "tls": 4.0, "apiversion": 1.0}


def test_without_its_connecting_to_line_the_state_holds_both():
    rows = [r for r in healthy(resolve=1500, connect=10) if r["event"] != "connect"]
    (att,) = life.walk(rows)
    (ph,) = [p for p in att["phases"] if p["phase"] == "connect"]
    assert ph["ms"] == 1510.0 and ph["with_resolve"]
    s = life.summed([att], [], None, len(rows), 0)
    assert s["phases"]["connect"]["slowest"]["with_resolve"] and "resolve" not in s["phases"]


def test_a_failed_attempt_then_one_that_comes_up_after_the_backoff():
    fail = row(4, 1, "fail", "Connect to ipv4#10.0.0.5:9093 failed",
               "Connect to ipv4#10.0.0.5:9093 failed: Connection refused (after 0ms in state CONNECT)")
    rows = [state(1, 0, "INIT", "TRY_CONNECT"), state(2, 0, "TRY_CONNECT", "CONNECT"),
            row(3, 0, "connect", "ipv4#10.0.0.5:9093 (ssl)", "Connecting to ipv4#10.0.0.5:9093 (ssl) with socket 8"),
            fail, state(5, 1, "CONNECT", "DOWN"), state(6, 1, "DOWN", "INIT"),
            state(7, 2, "INIT", "TRY_CONNECT")] + healthy(start=250, line=8)[1:]
    first, second = life.walk(rows)
    assert first["outcome"] == "failed" and "Connection refused" in first["error"]
    assert second["outcome"] == "up" and phases(second)["backoff"] == 248.0
    s = life.summed([first, second], [], None, len(rows), 0)
    assert s["failed"] == 1 and s["up"] == 1 and s["down_ms"] == 256.0 and s["backoffs_ms"] == [249.0]
    assert s["resolve_failures"] == 0


def test_a_failure_logged_twice_is_one_attempt():
    """At debug, then at LOG_ERR when the application sets no error callback."""
    text = "Connect to ipv4#10.0.0.5:9093 failed: Connection refused (after 0ms in state CONNECT)"
    rows = [state(1, 0, "INIT", "TRY_CONNECT"), state(2, 0, "TRY_CONNECT", "CONNECT"),
            row(3, 0, "fail", "Connect to ipv4#10.0.0.5:9093 failed", text + " (_TRANSPORT)"),
            row(4, 0, "fail", "Connect to ipv4#10.0.0.5:9093 failed", text), state(5, 0, "CONNECT", "DOWN")]
    (att,) = life.walk(rows)
    assert att["outcome"] == "failed" and phases(att) == {"backoff": 0.0, "connect": 0.0}


def test_a_fail_line_alone_gives_the_phase_it_ended():
    """An excerpt that starts at the failure, timed and untimed."""
    text = "Connection setup timed out in state CONNECT (after 30029ms in state CONNECT)"
    (timed,) = life.walk([row(1, 40_000, "fail", "Connection setup timed out", text)])
    assert phases(timed) == {"connect": 30029.0} and timed["outcome"] == "failed"
    untimed = life.walk([row(1, None, "fail", "Failed to resolve 'kafka:9092'",
                             "Failed to resolve 'kafka:9092': Name or service not known (after 5012ms in state "
                             "CONNECT)")])
    assert phases(untimed[0]) == {"resolve": 5012.0}
    assert life.summed(untimed, [], None, 1, 0)["resolve_failures"] == 1
    # A handle decommissioned after it was UP is no phase of a connect.
    assert life.walk([row(1, 5, "fail", "Decommissioning this broker",
                          "Decommissioning this broker (after 3ms in state UP) (_DESTROY_BROKER)")]) == []


def test_handles_apart_and_sasl_summed_over_its_states():
    b2 = "sasl_ssl://broker.example:9094/2"
    rows = healthy(broker=B) + [state(20, 0, "INIT", "TRY_CONNECT", b2), state(21, 0, "TRY_CONNECT", "CONNECT", b2),
                                state(22, 3, "CONNECT", "SSL_HANDSHAKE", b2),
                                state(23, 8, "SSL_HANDSHAKE", "APIVERSION_QUERY", b2),
                                state(24, 9, "APIVERSION_QUERY", "AUTH_HANDSHAKE", b2),
                                state(25, 10, "AUTH_HANDSHAKE", "AUTH_REQ", b2), state(26, 910, "AUTH_REQ", "UP", b2)]
    rows.sort(key=lambda r: (r["ts_us"], r["line_no"]))
    a, b = sorted(life.walk(rows), key=lambda x: x["broker"])
    assert a["broker"] == b2 and phases(a)["sasl"] == 900.0 and a["outcome"] == "up"
    s = life.summed([a, b], [], None, len(rows), 0)
    assert s["phases"]["sasl"] == {**s["phases"]["sasl"], "n": 2, "total_ms": 901.0, "max_ms": 900.0}


def test_metadata_asked_again_and_again_before_the_first_produce():
    t0 = 1_000_000_000
    sends = [{"event": "send", "ts_us": t0 + i * 250_000} for i in range(12)]
    got = life.metadata_wait(sends, t0 + 3_000_000)
    assert got["requests"] == 12 and got["ms"] == 3000.0 and got["produced"]
    # One refresh on connecting, then the produce: a short wait of one request.
    assert life.metadata_wait(sends[:1], t0 + 4_000)["requests"] == 1
    # A refresh long before the first produce is not a wait for it.
    assert life.metadata_wait(sends[:1], t0 + 60_000_000) is None


def test_the_resolver_exchanges_and_retransmitted_handshakes_from_the_syscalls():
    conns = [{"pid": 7, "peer": "10.0.0.53:53", "connect_line": 40, "connect_us": 0, "closed_us": 2_004_000,
              "dns": True, "handshake_ms": None},
             {"pid": 7, "peer": "10.0.0.5:9093", "connect_line": 50, "connect_us": 3_000_000, "closed_us": None,
              "dns": False, "handshake_ms": 3001.2}]
    s = life.summed([], conns, None, 0, 0)
    assert s["dns"] == [{"pid": 7, "server": "10.0.0.53:53", "line": 40, "ms": 2004.0}]
    assert [h["peer"] for h in s["slow_handshakes"]] == ["10.0.0.5:9093"]


def test_where_timed_out_messages_were():
    """One line per kind: queued for a connection (the broker's failures'
    cause), for metadata (no partition while a broker was up), in flight,
    queued while up, and the delivery reports no line places."""
    from kdiag.analysis import timed_out

    b2 = "ssl://broker.example:9093/2"
    down = [state(1, 0, "INIT", "TRY_CONNECT"), state(2, 0, "TRY_CONNECT", "CONNECT"),
            row(3, 2, "fail", "Failed to resolve 'broker.example:9093'",
                "Failed to resolve 'broker.example:9093': Name or service not known (after 2ms in state CONNECT)"),
            state(4, 2, "CONNECT", "DOWN")]
    up = healthy(broker=b2, line=10)
    attempts = life.walk(down + up)
    causes = life.cause_of_failures(attempts)
    assert causes == {B: "dns_slow"}

    def timeout(n, ms, text, broker):
        return {**row(n, ms, "other", None, text, broker), "facility": "TIMEOUT"}
    rows = [timeout(20, 9000, "t [0]: timed out 2+3 message(s) (MsgId 1..5): message.timeout.ms exceeded", B),
            timeout(21, 9000, "t [1]: timed out 0+4 message(s) (MsgId 1..4): message.timeout.ms exceeded", b2),
            timeout(22, 9000, "u: 6 message(s) timed out", None),
            {**row(23, 9000, "timeout", None, "Timed out ProduceRequest in flight", b2), "request": "Produce"},
            {**row(24, 9001, "msgset", None, "t [1]: MessageSet with 7 message(s) (MsgId 5, BaseSeq -1) encountered "
                   "error: Local: Message timed out", b2), "msgs": 7}]
    rows += [{**row(30 + i, 9002, "app_error"), "error": "Local: Message timed out"} for i in range(25)]
    got = timed_out.where(rows, attempts, causes)
    kinds = {k["kind"]: (k["messages"], k["cause"], k["brokers"]) for k in got["kinds"]}
    assert kinds == {"queued for a connection": (5, "dns_slow", [B]),
                     "queued for metadata or a leader": (6, "metadata_wait", []),
                     "in flight unanswered": (7, "request_timeout", [b2]),
                     "queued while the broker was up": (4, None, [b2]),
                     "where unknown": (3, None, [])}
    assert got["messages"] == 25 == got["delivery_reports"]
    assert timed_out.where([], attempts, causes) is None


def test_what_a_failure_says_decides_its_phase():
    """"Failed to resolve" is the lookup and "SSL handshake failed" the
    handshake whatever state is named; an age counted from no time at all
    gives no length."""
    (dns,) = life.walk([row(1, 50, "fail", "Failed to resolve 'k:9092'",
                            "Failed to resolve 'k:9092': Temporary failure in name resolution "
                            "(after 3461538871ms in state INIT)")])
    assert [(p["phase"], p["ms"]) for p in dns["phases"]] == [("resolve", None)]
    assert life.summed([dns], [], None, 1, 0)["resolve_failures"] == 1
    old = [state(1, 0, "INIT", "CONNECT"),
           row(2, 6, "fail", "SSL handshake failed", "SSL handshake failed: error:1416F086:SSL routines: "
               "certificate verify failed (after 6ms in state CONNECT)")]
    (tls,) = life.walk(old)
    assert phases(tls) == {"tls": 6.0} and tls["outcome"] == "failed"
    # Without "(after ...)" (librdkafka 0.9, 0.11), a copy 1 ms later is the same failure.
    text = "Failed to resolve 'k:9092': Name or service not known"
    (once,) = life.walk([row(1, 5, "fail", text, text), row(2, 6, "fail", text, text)])
    assert once["phases"][0]["phase"] == "resolve"


def test_queued_but_not_up_beside_attempts_that_did_not_fail_is_a_start():
    """Every producer logs "queued but broker not up" while its first
    connection comes up: with the timeline's attempts none of which failed,
    it names no broker_down."""
    from kdiag.analysis.causes import Facts, broker_down

    def facts(failed):
        return Facts(None, {}, 0, None, False, None, None, {},
                     {"signals": {"down_lines": 3, "down_not_up_lines": 3,
                                  "down_detail": "t [0] 1 message(s) queued but broker not up"},
                      "life": {"attempts": 2, "failed": failed}})
    assert broker_down.from_signals(facts(0)) is None
    assert broker_down.from_signals(facts(1))["requests"] == 3


def test_an_excerpt_that_starts_inside_an_attempt():
    """From its "Connecting to" line, or from a state change past CONNECT:
    the phases from there on, the attempt said to be partial."""
    rows = healthy(resolve=1, connect=1500)[2:]
    (att,) = life.walk(rows)
    assert att["partial"] and phases(att) == {"connect": 1500.0, "tls": 3.0, "apiversion": 1.0}
    (late,) = life.walk(healthy()[5:])
    assert late["partial"] and late["outcome"] == "up" and phases(late) == {"apiversion": 1.0}


def test_a_real_run_whose_name_does_not_resolve_says_where_its_messages_were(spark, tmp_path):
    """fixtures/excerpts/log_conn_resolve_failed: a producer here whose
    bootstrap name does not resolve, replayed from its log alone."""
    from conftest import FIXTURES

    from kdiag.analysis.pipeline import analyse

    log = FIXTURES / "excerpts" / "log_conn_resolve_failed" / "producer.log"
    found, _ = analyse([log], tmp_path / "tables", {}, spark=spark)
    assert found["verdict"] == "dns_slow"
    got = found["life"]
    assert got["failed"] == got["resolve_failures"] == got["attempts"] >= 5 and got["up"] == 0
    (kind,) = got["timed_out"]["kinds"]
    assert (kind["kind"], kind["messages"], kind["cause"]) == ("queued for a connection", 5, "dns_slow")
    (dns,) = found["findings"]
    assert any("failed to resolve the broker's name, and librdkafka tried again" in e for e in dns["evidence"])
