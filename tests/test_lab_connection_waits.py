"""The lab scenarios whose fault is in a connection's life rather than in its
requests, each traced for real: the phase that waited took about the delay
the lab injected, the probe still delivered every message, and nothing of
the lab is left running.

- tls-slow: the relay holds the server's first TLS flight 1.5 s;
- broker-down: nothing listens on the broker's port for 3 s;
- metadata-wait: the probe's topic is created 3 s after the producer starts.

The relay itself is tested first, on a toy server, without the lab.
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import re
import signal
import socket
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from conftest import ROOT, need, need_tansu, wait_gone
from kdiag.lab import relay, scenarios
from kdiag.lab.variants import Loopback

MESSAGES = 10
# librdkafka's log: "%7|1795928807.741|STATE|rdkafka#producer-1| [thrd:...]: NAME: Broker changed state A -> B"
LINE = re.compile(r"^%\d\|(\d+\.\d+)\|([A-Z_]+)\|[^|]*\| \[thrd:([^\]]*)\]: (.*)$")


# --- the declarations --------------------------------------------------------

@pytest.mark.parametrize("field", ["first_flight_delay_ms", "outage_ms", "topic_delay_ms"])
@pytest.mark.parametrize("value", [0, -1.0, 3_600_000.0, float("nan"), "3000"])
def test_a_fault_out_of_range_is_refused(field, value):
    assert field in (Loopback(**{field: value}).problem() or "")


def test_the_relay_runs_for_a_first_flight_delay_or_an_outage_only():
    assert Loopback().relay is None and Loopback(topic_delay_ms=3000.0).relay is None
    assert Loopback(first_flight_delay_ms=1500.0).relay == relay.PROCESS_NAME
    assert Loopback(outage_ms=3000.0).relay == relay.PROCESS_NAME
    for name in ("tls-slow", "broker-down", "metadata-wait"):
        sc = scenarios.get(name)
        assert isinstance(sc.lab, Loopback) and sc.lab.problem() is None
    assert scenarios.get("metadata-wait").props["allow.auto.create.topics"] == "false"


# --- the relay on a toy server ----------------------------------------------

@contextlib.contextmanager
def _greeter():
    """A server that sends a greeting as each connection opens, then echoes."""
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.2)
    stop = False

    def serve():
        while not stop:
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(b"hello")
                with contextlib.suppress(OSError):
                    conn.settimeout(2)
                    while data := conn.recv(100):
                        conn.sendall(data)

    import threading

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield srv.getsockname()[1]
    finally:
        stop = True
        t.join(3)
        srv.close()


@contextlib.contextmanager
def _relay(upstream: int, *args: str):
    port = socket.create_server(("127.0.0.1", 0))
    listen = port.getsockname()[1]
    port.close()
    proc = subprocess.Popen([sys.executable, "-m", "kdiag.lab.relay", "--listen", f"127.0.0.1:{listen}",
                             "--connect", f"127.0.0.1:{upstream}", *args], cwd=ROOT,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", listen), timeout=1):
                break
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.05)
        yield proc, listen
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(5) == 0


def _greeting_s(port: int) -> float:
    """Seconds from connect to the first byte, and the echo after it is prompt."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        t0 = time.monotonic()
        assert s.recv(5) == b"hello"
        took = time.monotonic() - t0
        t1 = time.monotonic()
        s.sendall(b"ping")
        assert s.recv(4) == b"ping"
        assert time.monotonic() - t1 < 0.2, "only the first flight is held"
        return took


def test_the_relay_holds_the_first_flight_once_armed():
    with _greeter() as server, _relay(server, "--first-flight-delay-ms", "400") as (proc, port):
        assert _greeting_s(port) < 0.2, "before SIGUSR1 the relay holds nothing"
        proc.send_signal(signal.SIGUSR1)
        time.sleep(0.2)
        assert 0.38 < _greeting_s(port) < 0.8


def test_the_relay_refuses_connections_for_its_outage_then_listens_again():
    with _greeter() as server, _relay(server, "--outage-ms", "600") as (proc, port):
        assert _greeting_s(port) < 0.2
        t0 = time.monotonic()
        proc.send_signal(signal.SIGUSR1)
        time.sleep(0.1)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        while True:
            try:
                _greeting_s(port)
                break
            except ConnectionRefusedError:
                assert time.monotonic() - t0 < 3
                time.sleep(0.02)
        assert 0.55 < time.monotonic() - t0 < 1.5


# --- the loopback lab's part --------------------------------------------------

def _topics(lab) -> set[str]:
    from confluent_kafka.admin import AdminClient

    return set(AdminClient(lab.client_config()).list_topics(timeout=5).topics)


@pytest.mark.e2e
def test_an_outage_begins_when_the_run_starts_and_teardown_during_it_leaves_nothing(state_dir):
    from kdiag.lab import broker as kl

    logged: list[str] = []
    with kl.running(state_dir, topics=("t1",), lab=Loopback(variant="down", outage_ms=60_000.0)) as lab, \
            kl.faults(lab, ("t1",), logged.append) as start:
        assert lab.bootstrap == f"127.0.0.1:{lab.relay_port}" and "t1" in _topics(lab)
        socket.create_connection(("127.0.0.1", lab.relay_port), timeout=1).close()
        start()
        start()    # a second call does nothing
        deadline = time.monotonic() + 5
        while True:
            try:
                socket.create_connection(("127.0.0.1", lab.relay_port), timeout=1).close()
            except ConnectionRefusedError:
                break
            assert time.monotonic() < deadline, "the relay still listens"
            time.sleep(0.02)
        assert sum("is down" in m for m in logged) == 1
        pids = [lab.tansu_pid, lab.terminator_pid, lab.relay_pid]
    assert wait_gone(pids, 5.0) == []
    assert not (state_dir / "state.json").exists()


@pytest.mark.e2e
def test_a_detached_relay_lab_is_found_and_stopped(state_dir):
    from kdiag.lab import broker as kl

    declared = Loopback(variant="held", first_flight_delay_ms=1500.0)
    lab = kl.up(state_dir, lab=declared)
    assert (lab.relay, lab.first_flight_delay_ms) == (relay.PROCESS_NAME, 1500.0)
    assert kl.status(state_dir) == lab and kl.up(state_dir, lab=declared) == lab
    with pytest.raises(kl.LabError, match="already running"):
        kl.up(state_dir, lab=dataclasses.replace(declared, first_flight_delay_ms=100.0))
    assert kl.down(state_dir) is True
    assert wait_gone([lab.tansu_pid, lab.terminator_pid, lab.relay_pid], 5.0) == []


@pytest.mark.e2e
def test_a_late_topic_is_created_after_its_delay_and_not_after_the_run(state_dir, tmp_path):
    from kdiag.lab import broker as kl

    declared = Loopback(variant="late", topic_delay_ms=1000.0)
    with kl.running(state_dir, topics=("late",), lab=declared) as lab:
        assert lab.relay is None and "late" not in _topics(lab)
        with kl.faults(lab, ("late",), lambda m: None) as start:
            t0 = time.monotonic()
            start()
            time.sleep(0.5)
            assert "late" not in _topics(lab)
            while "late" not in _topics(lab):
                assert time.monotonic() - t0 < 8
                time.sleep(0.1)
            assert time.monotonic() - t0 > 0.95
        # Left before its delay: the creation never happens.
        with kl.faults(lab, ("never",), lambda m: None) as start:
            start()
        time.sleep(1.5)
        assert "never" not in _topics(lab)


# --- traced for real ---------------------------------------------------------

@dataclasses.dataclass
class Traced:
    log: list[tuple[float, str, str, str]]   # (time s, facility, thread, text) of each librdkafka line
    summary: dict
    messages: list[dict]
    lab: dict
    findings: dict


def _trace(tmp_path: Path, scenario: str) -> Traced:
    need("strace", root=True)
    need("stunnel4")
    need_tansu()
    from kdiag.cli import Environment, main

    out, err = io.StringIO(), io.StringIO()
    bundle = tmp_path / f"{scenario}.tar.gz"
    rc = main(["trace", "--json", "--scenario", scenario, "--messages", str(MESSAGES), "--no-path-probe",
               "-o", str(bundle)], Environment(stdout=out, stderr=err))
    assert rc == 0, err.getvalue()
    with tarfile.open(bundle) as tar:
        def text(name: str) -> str:
            return tar.extractfile(name).read().decode()

        log = [(float(m[1]), m[2], m[3], m[4]) for ln in text("raw/rdkafka_log/rdkafka.log").splitlines()
               if (m := LINE.match(ln))]
        summary = json.loads(text("raw/probe/summary.json"))
        messages = [json.loads(ln) for ln in text("raw/probe/messages.jsonl").splitlines() if ln.strip()]
        lab = json.loads(text("manifest.json"))["lab"]
    return Traced(log, summary, messages, lab, json.loads(out.getvalue()))


def _all_delivered(t: Traced) -> None:
    assert (t.summary["delivered"], t.summary["failed"]) == (MESSAGES, 0), t.summary
    assert len(t.messages) == MESSAGES and all(m["error"] is None for m in t.messages)


def _nothing_left(t: Traced) -> None:
    pids = [t.lab[k] for k in ("tansu_pid", "terminator_pid", "proxy_pid", "relay_pid") if t.lab.get(k)]
    assert wait_gone(pids, 5.0) == []
    assert not Path(t.lab["state_dir"]).exists()


def _state_changes(t: Traced, change: str) -> dict[str, float]:
    """When each broker thread logged "Broker changed state <change>" first."""
    seen: dict[str, float] = {}
    for ts, fac, thread, text in t.log:
        if fac == "STATE" and text.endswith(f"Broker changed state {change}"):
            seen.setdefault(thread, ts)
    return seen


@pytest.mark.e2e
def test_tls_slow_each_handshake_takes_the_held_first_flight(tmp_path, spark):
    t = _trace(tmp_path, "tls-slow")
    assert t.findings["verdict"] == "tls_handshake_slow", json.dumps(t.findings["findings"], indent=1)
    delay_s = scenarios.get("tls-slow").lab.first_flight_delay_ms / 1000
    begun = _state_changes(t, "CONNECT -> SSL_HANDSHAKE")
    done = _state_changes(t, "SSL_HANDSHAKE -> APIVERSION_QUERY")
    # The bootstrap connection and the broker's both cross the relay.
    assert len(begun) >= 2 and begun.keys() == done.keys(), (begun, done)
    for thread in begun:
        assert delay_s - 0.05 < done[thread] - begun[thread] < delay_s + 0.8, (thread, done[thread] - begun[thread])
    _all_delivered(t)
    # Nothing after the handshakes is held.
    assert sorted(m["delivered_us"] - m["produce_us"] for m in t.messages)[MESSAGES // 2] < 100_000
    _nothing_left(t)


@pytest.mark.e2e
def test_broker_down_connects_are_refused_until_it_is_up(tmp_path, spark):
    t = _trace(tmp_path, "broker-down")
    outage_s = scenarios.get("broker-down").lab.outage_ms / 1000
    assert t.findings["verdict"] == "broker_down", json.dumps(t.findings["findings"], indent=1)
    assert outage_s - 0.8 < t.findings["life"]["down_ms"] / 1000 < outage_s + 1.5, t.findings["life"]["down_ms"]
    refused = [ts for ts, fac, _, text in t.log if fac == "FAIL" and "failed: Connection refused" in text]
    up = min(_state_changes(t, "APIVERSION_QUERY -> UP").values())
    assert len(refused) >= 3 and refused[-1] < up
    # The producer starts a little after the outage does (its interpreter
    # and librdkafka load first), so it sees a little less of it.
    assert outage_s - 0.8 < up - refused[0] < outage_s + 1.5, up - refused[0]
    _all_delivered(t)
    assert min(m["delivered_us"] for m in t.messages) / 1e6 > up
    _nothing_left(t)


@pytest.mark.e2e
def test_metadata_wait_the_first_message_waits_for_the_topic(tmp_path, spark):
    t = _trace(tmp_path, "metadata-wait")
    delay_s = scenarios.get("metadata-wait").lab.topic_delay_ms / 1000
    assert t.findings["verdict"] == "metadata_wait", json.dumps(t.findings["findings"], indent=1)
    meta = t.findings["life"]["metadata"]
    assert meta["requests"] >= 3 and delay_s - 0.8 < meta["ms"] / 1000 < delay_s + 1.5, meta
    _all_delivered(t)
    first = t.messages[0]
    waited = (first["delivered_us"] - first["produce_us"]) / 1e6
    # librdkafka asks again with a backoff that grows to about a second.
    assert delay_s - 0.8 < waited < delay_s + 1.5, waited
    asked = [ts for ts, fac, _, text in t.log if fac == "SEND" and "Sent MetadataRequest" in text
             and first["produce_us"] / 1e6 <= ts < first["delivered_us"] / 1e6]
    assert len(asked) >= 3, "librdkafka asks for the missing topic again and again"
    assert sorted(m["delivered_us"] - m["produce_us"] for m in t.messages)[MESSAGES // 2] < 100_000
    _nothing_left(t)
