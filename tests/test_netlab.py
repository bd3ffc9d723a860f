"""The network lab on real namespaces, veths, delay line, router and broker.

Needs root, iproute2, ethtool, traceroute, stunnel4, openssl and Tansu:
without them the tests skip on a workstation and fail under CI.
"""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from conftest import alive, need, need_tansu, wait_gone
import kdiag
from kdiag.lab import delayline as delayline_mod
from kdiag.lab import netns
from kdiag.lab import network as netlab
from kdiag.lab import scenarios

# The network lab's scenarios, as the registry declares them.
PATHS = scenarios.network_paths()

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def tools() -> None:
    need("ip", root=True)
    for tool in ("ethtool", "stunnel4", "openssl", "traceroute"):
        need(tool)
    need_tansu()


@pytest.fixture(scope="module")
def latency_lab(tools):
    with netlab.running("network-latency", PATHS["network-latency"]) as lab:
        yield lab


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def _in_ns(lab: netlab.NetLab, code: str, *args: str, timeout: float = 60) -> str:
    out = subprocess.run(
        [*lab.exec_prefix("client"), sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True, text=True, timeout=timeout, env=_child_env(),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


_CONNECT_TIMES = """
import socket, sys, time
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for _ in range(n):
    s = socket.socket()
    t = time.perf_counter()
    s.connect((host, port))
    print((time.perf_counter() - t) * 1000)
    s.close()
"""

_PRODUCER = """
import json, statistics, sys, time
from confluent_kafka import Producer
config, n = json.loads(sys.argv[1]), int(sys.argv[2])
rtts = []
def on_stats(raw):
    for b in json.loads(raw)["brokers"].values():
        if b.get("nodeid", -1) >= 0 and b["rtt"]["cnt"] > 0:
            rtts.append(b["rtt"]["p50"] / 1000.0)
p = Producer({**config, "socket.nagle.disable": "true", "acks": "all", "linger.ms": 0,
              "statistics.interval.ms": 100, "stats_cb": on_stats})
value = b"x" * 1024
# The first message pays for metadata and the TLS handshakes.
p.produce("kdiag-probe", value)
assert p.flush(30) == 0
rtts.clear()
latencies = []
t0 = time.monotonic()
for _ in range(n):
    t = time.monotonic()
    p.produce("kdiag-probe", value)
    assert p.flush(30) == 0
    latencies.append((time.monotonic() - t) * 1000)
elapsed = time.monotonic() - t0
p.poll(0.25)
print(json.dumps({"msg_per_s": n / elapsed, "latency_p50_ms": statistics.median(latencies),
                  "latency_max_ms": max(latencies), "rtt_p50_ms": rtts[-1] if rtts else None}))
"""


def _produce(lab: netlab.NetLab, n: int) -> dict:
    return json.loads(_in_ns(lab, _PRODUCER, json.dumps(lab.client_config()), str(n)))



def _assert_gone(lab: netlab.NetLab) -> None:
    assert wait_gone(lab.pids.values(), 2.0) == []
    left = set(netlab.list_netns())
    assert not left & set(lab.namespaces.values())
    assert not lab.state_dir.exists()


def test_interface_and_config(latency_lab):
    lab = latency_lab
    assert lab.scenario == netlab.get_scenario("network-latency", PATHS["network-latency"])
    assert set(lab.namespaces) == {"client", "link", "router", "broker"}
    assert all(ns.startswith(lab.prefix) for ns in lab.namespaces.values())
    assert all(len(name) <= 15 for name in netns.ifnames(lab.prefix).values())
    assert lab.client_config() == {
        "bootstrap.servers": f"{lab.broker_addr}:{lab.tls_port}",
        "security.protocol": "ssl",
        "ssl.ca.location": str(lab.ca_path),
    }
    assert lab.exec_prefix() == ["ip", "netns", "exec", lab.namespaces["client"]]
    assert lab.exec_prefix("broker")[-1] == lab.namespaces["broker"]
    assert json.loads(json.dumps(lab.to_dict()))["bootstrap"] == lab.bootstrap
    state = json.loads((lab.state_dir / "state.json").read_text())
    assert state["owner"]["pid"] == os.getpid()
    assert set(state["processes"]) == {"tansu", "terminator", "delayline"}
    assert psutil.Process(lab.pids["tansu"]).name() == "tansu"
    assert psutil.Process(lab.pids["terminator"]).name() == "stunnel4"


def test_handshake_rtt_is_the_configured_delay(latency_lab):
    lab = latency_lab
    times = [float(x) for x in _in_ns(lab, _CONNECT_TIMES, lab.broker_addr, str(lab.tls_port), "7").split()]
    median = statistics.median(times)
    assert 0.8 * 30 <= median <= 1.2 * 30, times


def test_traceroute_sees_router_then_broker(latency_lab):
    lab = latency_lab
    out = subprocess.run(
        [*lab.exec_prefix(), "traceroute", "-T", "-n", "-p", str(lab.tls_port), lab.broker_addr],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    hops = [line.split() for line in out.stdout.splitlines()[1:] if line.strip()]
    assert hops[0][:2] == ["1", lab.router_addrs[0]], out.stdout
    assert hops[-1][1] == lab.broker_addr, out.stdout
    assert len(hops) == 2, out.stdout


def test_producer_sees_the_path_rtt(latency_lab):
    result = _produce(latency_lab, 20)
    # One produce round trip per message: the 30 ms path plus a little.
    assert 27 <= result["latency_p50_ms"] <= 40, result
    assert result["rtt_p50_ms"] is not None and 27 <= result["rtt_p50_ms"] <= 40, result


def test_delay_line_sleeps_when_idle(latency_lab):
    p = psutil.Process(latency_lab.pids["delayline"])
    time.sleep(0.6)  # let its last counters write pass
    before = p.cpu_times()
    time.sleep(1.0)
    after = p.cpu_times()
    busy = (after.user + after.system) - (before.user + before.system)
    assert busy < 0.05, f"delay line used {busy:.3f}s of CPU in 1s with no traffic"


def test_packet_loss_drops_frames_and_tcp_recovers(tools):
    with netlab.running("packet-loss", PATHS["packet-loss"], seed=7) as lab:
        result = _produce(lab, 60)
        time.sleep(0.6)
        directions = lab.link_stats()["directions"].values()
    assert sum(d["dropped"] for d in directions) > 0, directions
    assert all(d["forwarded"] > 0 for d in directions)
    assert result["msg_per_s"] > 0  # every one of them was delivered


def test_two_labs_coexist_and_both_go_away(tools):
    with netlab.running("clean", PATHS["clean"], topics=()) as one, netlab.running("clean", PATHS["clean"], topics=()) as two:
        assert one.prefix != two.prefix
        assert not set(one.namespaces.values()) & set(two.namespaces.values())
        for lab in (one, two):
            assert netlab.call_in_netns(
                lab.namespaces["client"], netns.tls_handshake, lab.broker_addr, lab.tls_port, lab.ca_path, 5.0
            )
    _assert_gone(one)
    _assert_gone(two)


def test_teardown_when_the_body_raises(tools):
    with pytest.raises(RuntimeError, match="boom"):
        with netlab.running("clean", PATHS["clean"], topics=()) as lab:
            assert all(alive(p) for p in lab.pids.values())
            raise RuntimeError("boom")
    _assert_gone(lab)


def test_a_scenario_without_a_network_path_is_refused():
    with pytest.raises(netlab.NetLabError, match="takes a NetworkPath"):
        with netlab.running("nagle-on", scenarios.find("nagle-on").lab):
            pass


_CHILD = """
import json, sys, time
from kdiag.lab import network as netlab, scenarios
with netlab.running("clean", scenarios.network_paths()["clean"], topics=()) as lab:
    try:
        print(json.dumps(lab.to_dict()), flush=True)
        time.sleep(60)
    finally:
        print("body left", flush=True)
"""


@contextlib.contextmanager
def _lab_child():
    """A child process that runs a network lab: (child, what it started).
    Killed at the end if the test left it running."""
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_CHILD)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_child_env(), cwd=REPO,
    )
    line = child.stdout.readline()
    if not line:
        child.wait(5)
        pytest.fail(f"child did not start a network lab: {child.stderr.read()[-2000:]}")
    try:
        yield child, json.loads(line)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(5)


def test_sigterm_tears_down_and_exits(tools):
    with _lab_child() as (child, info):
        child.terminate()
        out, _ = child.communicate(timeout=20)
        assert child.returncode == 128 + signal.SIGTERM
        assert "body left" in out
        assert wait_gone(info["pids"].values(), 1.0) == []
        assert not set(netlab.list_netns()) & set(info["namespaces"].values())
        assert not Path(info["state_dir"]).exists()


def test_sigkilled_owner_is_swept_at_the_next_start(tools):
    try:
        with _lab_child() as (child, info):
            child.kill()
            child.wait(5)
            # The kernel's parent-death signal stops the processes...
            assert wait_gone(info["pids"].values(), 5.0) == []
            # ...but namespaces stay until a sweep finds their owner dead.
            assert set(info["namespaces"].values()) <= set(netlab.list_netns())
            with netlab.running("clean", PATHS["clean"], topics=()) as lab:
                assert lab.prefix != info["prefix"]
                assert not set(netlab.list_netns()) & set(info["namespaces"].values())
                assert not Path(info["state_dir"]).exists()
    finally:
        netlab.sweep_stale()


_RECEIVER = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 9999))
s.settimeout(3)
seen = []
print("ready", flush=True)
try:
    while len(seen) < int(sys.argv[1]):
        seen.append(int(s.recv(64)))
except socket.timeout:
    pass
print(" ".join(map(str, seen)), flush=True)
"""


def test_delay_line_keeps_order_under_jitter_and_exits_cleanly(tools, tmp_path):
    # Its own two-host wire, with names outside the labs' pattern so that a
    # lab's sweep never touches them.
    p = "kdt" + secrets.token_hex(3)
    a, link, b = f"{p}-a", f"{p}-l", f"{p}-b"
    stats = tmp_path / "stats.json"
    run = netns.run
    delayline = receiver = None
    try:
        for ns in (a, link, b):
            run(["ip", "netns", "add", ns])
            run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv6.conf.default.disable_ipv6=1"])
        run(["ip", "link", "add", f"{p}a", "netns", a, "type", "veth", "peer", "name", f"{p}la", "netns", link])
        run(["ip", "link", "add", f"{p}lb", "netns", link, "type", "veth", "peer", "name", f"{p}b", "netns", b])
        for ns, dev in ((a, f"{p}a"), (link, f"{p}la"), (link, f"{p}lb"), (b, f"{p}b")):
            run(["ip", "netns", "exec", ns, "ethtool", "-K", dev, *netns.OFFLOADS_OFF])
            run(["ip", "-n", ns, "link", "set", dev, "up"])
        run(["ip", "-n", a, "addr", "add", "10.202.0.1/24", "dev", f"{p}a"])
        run(["ip", "-n", b, "addr", "add", "10.202.0.2/24", "dev", f"{p}b"])
        # Static neighbours: with ARP, the sender's kernel flushes the frames it
        # queued during resolution while the next send already goes straight
        # out, so frames can pass each other before they reach the delay line.
        for ns, dev, peer_ns, peer_dev, peer_ip in ((a, f"{p}a", b, f"{p}b", "10.202.0.2"),
                                                    (b, f"{p}b", a, f"{p}a", "10.202.0.1")):
            mac = json.loads(run(["ip", "-j", "-n", peer_ns, "link", "show", "dev", peer_dev]))[0]["address"]
            run(["ip", "-n", ns, "neigh", "replace", peer_ip, "lladdr", mac, "dev", dev, "nud", "permanent"])
        delayline = subprocess.Popen(
            ["ip", "netns", "exec", link, *kdiag.python_m(delayline_mod), "--a", f"{p}la", "--b", f"{p}lb",
             "--delay-ms", "5", "--jitter-ms", "4", "--seed", "1", "--stats", str(stats)],
            env=_child_env(), stderr=subprocess.PIPE, text=True,
        )
        receiver = subprocess.Popen(
            ["ip", "netns", "exec", b, sys.executable, "-c", _RECEIVER, "200"],
            stdout=subprocess.PIPE, text=True,
        )
        assert receiver.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 5
        while not stats.exists():
            assert delayline.poll() is None, delayline.stderr.read()
            assert time.monotonic() < deadline
            time.sleep(0.02)

        def send() -> None:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            for i in range(200):
                s.sendto(str(i).encode(), ("10.202.0.2", 9999))
                time.sleep(0.0005)
            s.close()

        t0 = time.monotonic()
        netlab.call_in_netns(a, send)
        seen = [int(x) for x in receiver.communicate(timeout=10)[0].split()]
        assert seen == list(range(200))
        assert time.monotonic() - t0 >= 0.005

        delayline.send_signal(signal.SIGTERM)
        assert delayline.wait(5) == 0
        final = json.loads(stats.read_text())
        assert final["running"] is False
        forward = final["directions"][f"{p}la->{p}lb"]
        # No ARP and no IPv6: the datagrams are the only traffic on this wire.
        assert forward["forwarded"] == 200 and forward["dropped"] == 0 and forward["oversize"] == 0
    finally:
        for proc in (delayline, receiver):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(5)
        netns.delete_netns([a, link, b])
