"""The lab variants that reproduce causes other than the client's own Nagle,
driven by a real producer with socket.nagle.disable=true:

- nagle-proxy: socat terminates TLS and forwards to Tansu without
  TCP_NODELAY; every request stalls ~40 ms although the client socket has
  TCP_NODELAY. The default lab (stunnel4, TCP_NODELAY on both sides) is the
  fast contrast.
- slow-broker: a proxy in front of Tansu holds every response back; the
  path stays fast.
- throttled: the proxy enforces a produce quota as a Kafka broker does
  (ThrottleTimeMs, then a muted connection); librdkafka reports the
  throttle and every produce waits it out.
"""
from __future__ import annotations

import json
import os
import re
import socket
import statistics
import time

import psutil
import pytest

from conftest import alive, need, wait_gone
from kdiag.lab import broker as kl
from kdiag.lab import scenarios

# The loopback labs the scenarios declare, by scenario name.
LABS = {s.name: s.lab for s in scenarios.all_scenarios() if isinstance(s.lab, scenarios.Loopback)}

pytestmark = pytest.mark.e2e

MESSAGES = 20
VALUE = b"x" * 2048





def _lab_pids(lab: kl.Lab) -> list[int]:
    """The lab's processes with whatever they forked for connections."""
    pids = [lab.tansu_pid, lab.terminator_pid]
    if lab.proxy_pid is not None:
        pids.append(lab.proxy_pid)
    if lab.relay_pid is not None:
        pids.append(lab.relay_pid)
    for pid in list(pids):
        try:
            pids += [c.pid for c in psutil.Process(pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
    return pids


def _nodelay_to(port: int) -> list[int]:
    """TCP_NODELAY of each of this process's connections to the port."""
    me = psutil.Process()
    conns = me.net_connections(kind="tcp") if hasattr(me, "net_connections") else me.connections(kind="tcp")
    flags = []
    for c in conns:
        if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED and c.fd >= 0:
            with socket.socket(fileno=os.dup(c.fd)) as s:
                flags.append(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
    return flags


def _produce(lab: kl.Lab, n: int = MESSAGES, extra: dict | None = None) -> tuple[list[float], list[int]]:
    """Milliseconds from produce() to the end of flush() for n messages sent
    one at a time, and TCP_NODELAY of the producer's sockets to the lab."""
    from confluent_kafka import Producer

    p = Producer(
        {
            **lab.client_config(),
            "socket.nagle.disable": "true",
            "acks": "all",
            "linger.ms": 0,
            **(extra or {}),
        }
    )
    # The first round pays for the TLS handshakes and metadata.
    p.produce("kdiag-probe", VALUE)
    assert p.flush(10) == 0
    latencies = []
    for _ in range(n):
        t0 = time.perf_counter()
        p.produce("kdiag-probe", VALUE)
        assert p.flush(10) == 0
        latencies.append((time.perf_counter() - t0) * 1000)
    nodelay = _nodelay_to(lab.tls_port)
    del p
    return latencies, nodelay


def _summary(name: str, latencies: list[float]) -> str:
    total = sum(latencies) / 1000
    return (
        f"{name}: {len(latencies) / total:.1f} msg/s, latency ms min {min(latencies):.2f} "
        f"p50 {statistics.median(latencies):.2f} max {max(latencies):.2f}"
    )


def _handshake_ms(port: int, rounds: int = 5) -> list[float]:
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            out.append((time.perf_counter() - t0) * 1000)
    return out


def test_nagle_proxy_stalls_every_request_where_stunnel_does_not(tmp_path, tools, capsys):
    need("socat")
    with kl.running(tmp_path / "tls") as lab:
        fast, fast_nodelay = _produce(lab)
    with kl.running(tmp_path / "nagle", lab=LABS["nagle-proxy"]) as lab:
        assert (lab.variant, lab.terminator, lab.proxy) == ("nagle-proxy", "socat", None)
        assert lab.terminator_version.startswith("socat version ")
        slow, slow_nodelay = _produce(lab)
        socat_log = (tmp_path / "nagle" / kl.SOCAT_LOG).read_text()
    with capsys.disabled():
        print(f"\n{_summary('tls (stunnel4)', fast)}\n{_summary('nagle-proxy (socat)', slow)}")

    # The client is not the one holding data back.
    assert slow_nodelay and all(slow_nodelay), slow_nodelay
    assert fast_nodelay and all(fast_nodelay), fast_nodelay
    assert "accepting connection" in socat_log
    # A connection may begin in quick-ACK mode, so allow two that escape.
    assert sorted(slow)[2] >= 35.0, slow
    assert statistics.median(fast) < 10.0, fast
    assert statistics.median(slow) >= 5 * statistics.median(fast)


def test_slow_broker_answers_late_on_a_fast_path(state_dir, capsys):
    with kl.running(state_dir, lab=LABS["slow-broker"]) as lab:
        assert lab.response_delay_ms == LABS["slow-broker"].response_delay_ms == 50
        assert (lab.variant, lab.terminator, lab.proxy) == ("slow-broker", "stunnel4", "kdiag-slowproxy")
        assert psutil.Process(lab.proxy_pid).name() == "kdiag-slowproxy"
        assert lab.proxy_version.startswith("kdiag-slowproxy ")
        d = lab.to_dict()
        assert (d["variant"], d["proxy_pid"], d["proxy_port"]) == ("slow-broker", lab.proxy_pid, lab.proxy_port)
        assert kl.status(state_dir) == lab
        latencies, nodelay = _produce(lab)
        handshakes = _handshake_ms(lab.tls_port)
    with capsys.disabled():
        print(f"\n{_summary('slow-broker (50 ms)', latencies)}; "
              f"handshake ms {', '.join(f'{h:.3f}' for h in handshakes)}")

    assert nodelay and all(nodelay), nodelay
    assert min(latencies) >= lab.response_delay_ms, latencies
    assert statistics.median(handshakes) < 5.0, handshakes


THROTTLED_MESSAGES = 30


def _produce_watched(lab: kl.Lab) -> dict:
    """_produce with librdkafka's throttle events (ms) and statistics."""
    events: list[float] = []
    stats: list[dict] = []
    config = {
        "statistics.interval.ms": 500,
        # ThrottleEvent.throttle_time is in seconds.
        "throttle_cb": lambda e: events.append(e.throttle_time * 1000),
        "stats_cb": lambda s: stats.append(json.loads(s)),
    }
    latencies, nodelay = _produce(lab, THROTTLED_MESSAGES, config)
    windows = [b["throttle"] for st in stats for b in st["brokers"].values() if b["throttle"]["cnt"] > 0]
    # The bootstrap connection (nodeid -1) carries no Produce requests.
    rtts = [b["rtt"] for st in stats for b in st["brokers"].values() if b["nodeid"] >= 0 and b["rtt"]["cnt"] > 0]
    return {"latencies": latencies, "nodelay": nodelay, "events": events, "windows": windows, "rtts": rtts}


def test_throttled_broker_throttles_a_producer_over_its_quota(tmp_path, tools, capsys):
    with kl.running(tmp_path / "tls") as lab:
        fast = _produce_watched(lab)
    with kl.running(tmp_path / "throttled", lab=LABS["throttled"]) as lab:
        assert lab.quota_bytes_per_s == LABS["throttled"].quota_bytes_per_s == 20480
        assert lab.response_delay_ms is None
        assert (lab.variant, lab.terminator, lab.proxy) == ("throttled", "stunnel4", "kdiag-slowproxy")
        assert lab.to_dict()["quota_bytes_per_s"] == 20480
        slow = _produce_watched(lab)
    log = (tmp_path / "throttled" / kl.SLOWPROXY_LOG).read_text()
    # A 2048-byte value makes a Produce request of ~2170 bytes (headers,
    # topic, record batch): ~105 ms of quota, less what refills during the
    # round trip.
    expected = (len(VALUE) + 100) / lab.quota_bytes_per_s * 1000
    throttles = [t for t in slow["events"] if t > 0]
    window_p50 = statistics.median(w["p50"] for w in slow["windows"])
    rtt_p50 = statistics.median(r["p50"] for r in slow["rtts"])
    with capsys.disabled():
        print(
            f"\n{_summary('tls (stunnel4)', fast['latencies'])}\n"
            f"{_summary('throttled (20480 B/s)', slow['latencies'])}; throttle_cb ms "
            f"min {min(throttles):.0f} p50 {statistics.median(throttles):.0f} max {max(throttles):.0f} "
            f"({len(throttles)} events); stats throttle p50 {window_p50} (ms), rtt p50 {rtt_p50} (us)"
        )

    assert "responses 0 ms late, produce quota 20480 bytes/s" in log
    # The proxy's report as it stopped: every timed request throttled, and
    # every response's ThrottleTimeMs found where expected.
    m = re.search(r"slowproxy: (\d+) Produce requests, (\d+) throttled", log)
    assert m and int(m[1]) == THROTTLED_MESSAGES + 1 and int(m[2]) >= THROTTLED_MESSAGES, log
    assert "left unchanged" not in log, log

    # The producer hears of each throttle. Events of 0 mark the end of one
    # (a Metadata response after a throttled Produce).
    assert len(throttles) >= THROTTLED_MESSAGES, slow["events"]
    assert 0.8 * expected <= statistics.median(throttles) <= 1.2 * expected, throttles
    # ...and waits it out: the muted connection holds its next request.
    assert slow["nodelay"] and all(slow["nodelay"]), slow["nodelay"]
    assert statistics.median(slow["latencies"]) >= 50.0, slow["latencies"]
    assert statistics.median(slow["latencies"]) >= 0.9 * statistics.median(throttles)
    # Statistics: the throttle window is in milliseconds, the same figures
    # as throttle_cb; rtt is in microseconds and, measured from the send,
    # includes the time the request sat unread.
    assert slow["windows"], "no throttle in librdkafka's statistics"
    assert abs(window_p50 - statistics.median(throttles)) <= 5, slow["windows"]
    assert max(w["max"] for w in slow["windows"]) <= 1.2 * expected
    assert rtt_p50 >= 1000 * 0.9 * statistics.median(throttles), slow["rtts"]

    # The same producer without the quota: no throttle, fast.
    assert fast["events"] == [] and fast["windows"] == [], (fast["events"], fast["windows"])
    assert statistics.median(fast["latencies"]) < 10.0, fast["latencies"]


def test_throttled_broker_holds_a_pipelining_producer_to_its_quota(state_dir):
    from confluent_kafka import Producer

    quota = 200_000.0
    with kl.running(state_dir, lab=LABS["throttled"], quota_bytes_per_s=quota) as lab:
        assert lab.quota_bytes_per_s == quota
        p = Producer({**lab.client_config(), "linger.ms": 5, "batch.size": 16384})
        # Metadata and connections first, so that they are not timed.
        p.produce("kdiag-probe", b"")
        assert p.flush(10) == 0
        n = 200
        t0 = time.perf_counter()
        for _ in range(n):
            p.produce("kdiag-probe", VALUE)
            p.poll(0)
        assert p.flush(15) == 0
        elapsed = time.perf_counter() - t0
        del p
    # Many requests in flight, yet no faster than the quota: like a broker,
    # the proxy reads the next one only once the last is answered and its
    # throttle is over. The burst and the last batch's throttle (after its
    # response) are free.
    payload = n * len(VALUE)
    assert elapsed >= (payload - quota * 0.1 - 16384) / quota * 0.9, elapsed
    assert elapsed < 2 * payload / quota, elapsed


@pytest.mark.parametrize("variant", ["nagle-proxy", "slow-broker", "throttled", "tls-slow"])
def test_teardown_leaves_no_process(state_dir, variant):
    from confluent_kafka import Producer

    if variant == "nagle-proxy":
        need("socat")

    with kl.running(state_dir, lab=LABS[variant]) as lab:
        # A connected client, so that socat has forked and the proxy holds
        # sessions when the lab goes down.
        p = Producer({**lab.client_config(), "socket.nagle.disable": "true"})
        p.produce("kdiag-probe", VALUE)
        assert p.flush(10) == 0
        pids = _lab_pids(lab)
        assert all(alive(pid) for pid in pids)
        if variant == "nagle-proxy":
            assert len(pids) > 2, "socat forked no connection handler"
        leaving = time.monotonic()
    try:
        # Within the grace period: every process went on SIGTERM, none
        # (Tansu held open by a leftover connection) needed SIGKILL.
        assert time.monotonic() - leaving < kl.STOP_GRACE
        assert wait_gone(pids, 2.0) == []
        assert not (state_dir / "state.json").exists()
    finally:
        del p


def test_detached_variant_round_trip(state_dir):
    lab = kl.up(state_dir, lab=LABS["slow-broker"], response_delay_ms=20)
    assert lab.response_delay_ms == 20
    assert kl.status(state_dir) == lab
    assert kl.up(state_dir, lab=LABS["slow-broker"], response_delay_ms=20) == lab
    with pytest.raises(kl.LabError, match="already running"):
        kl.up(state_dir)
    with pytest.raises(kl.LabError, match="already running"):
        kl.up(state_dir, lab=LABS["slow-broker"])
    assert kl.down(state_dir) is True
    assert wait_gone([lab.tansu_pid, lab.terminator_pid, lab.proxy_pid], 2.0) == []
    assert kl.status(state_dir) is None


def test_detached_throttled_round_trip(state_dir):
    lab = kl.up(state_dir, lab=LABS["throttled"], quota_bytes_per_s=1e6)
    assert (lab.quota_bytes_per_s, lab.response_delay_ms) == (1e6, None)
    assert kl.status(state_dir) == lab
    assert kl.up(state_dir, lab=LABS["throttled"], quota_bytes_per_s=1e6) == lab
    with pytest.raises(kl.LabError, match=r"throttled \(1e\+06 bytes/s\) lab is already running"):
        kl.up(state_dir, lab=LABS["throttled"])
    with pytest.raises(kl.LabError, match="already running"):
        kl.up(state_dir, lab=LABS["slow-broker"])
    cmdline = psutil.Process(lab.proxy_pid).cmdline()
    assert cmdline[-4:] == ["--response-delay-ms", "0", "--quota-bytes-per-s", "1000000.0"]
    # A state file from before the quota existed reads as no quota.
    d = lab.to_dict()
    del d["quota_bytes_per_s"]
    assert kl.Lab.from_dict(d).quota_bytes_per_s is None
    assert kl.down(state_dir) is True
    assert wait_gone([lab.tansu_pid, lab.terminator_pid, lab.proxy_pid], 2.0) == []


def test_bad_variant_requests_are_refused(tmp_path):
    with pytest.raises(kl.LabError, match="declared by a Loopback"):
        kl.up(tmp_path / "x", lab="nope")
    with pytest.raises(kl.LabError, match="response_delay_ms applies"):
        kl.up(tmp_path / "x", response_delay_ms=10)
    with pytest.raises(kl.LabError, match="response_delay_ms applies"):
        kl.up(tmp_path / "x", lab=LABS["throttled"], response_delay_ms=10)
    with pytest.raises(kl.LabError, match="quota_bytes_per_s applies"):
        kl.up(tmp_path / "x", lab=LABS["slow-broker"], quota_bytes_per_s=1000)
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(kl.LabError, match="quota_bytes_per_s out of range"):
            kl.up(tmp_path / "x", lab=LABS["throttled"], quota_bytes_per_s=bad)
    with pytest.raises(kl.LabError, match="nodelay applies to socat"):
        kl.up(tmp_path / "x", lab=kl.Loopback(nodelay=True))
    with pytest.raises(kl.LabError, match="quota_bytes_per_s applies"):
        with kl.running(tmp_path / "y", quota_bytes_per_s=1000):
            pass
    with pytest.raises(kl.LabError, match="declared by a Loopback"):
        with kl.running(tmp_path / "y", lab="nope"):
            pass
    assert not (tmp_path / "x" / "state.json").exists()
