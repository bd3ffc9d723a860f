"""The network lab's connection scenarios on real parts: a resolver that
answers late (dns-slow) and SYNs dropped by nftables (connect-slow). Each
runs a real trace and reads, in the bundle's own raw files, that the phase
took the delay the scenario injects, then checks that the lab left nothing
behind.

Needs root (namespaces, nftables, the tracer), strace, stunnel4, ethtool,
nft, Java (the trace's analysis) and Tansu: without them the tests skip on
a workstation and fail under CI.
"""
from __future__ import annotations

import io
import json
import os
import re
import socket
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest

from conftest import need, need_tansu, wait_gone
from kdiag.cli import Environment, main
from kdiag.lab import netns, resolver, scenarios
from kdiag.lab import network as netlab

PATHS = scenarios.network_paths()
# "%7|1795928800.170|STATE|rdkafka#producer-1| [thrd:T]: BROKER: Broker changed state ..."
LOG_LINE = re.compile(r"^%\d\|(?P<t>\d+\.\d+)\|(?P<fac>[A-Z_]+)\|[^|]*\| \[thrd:(?P<thread>[^\]]*)\]: (?P<msg>.*)$")
# strace -ttt -yy: "PID  EPOCH.US call(FD<UDP:[local->10.201.1.1:53]>, ..."
UDP_53 = re.compile(r"^\d+\s+(?P<t>\d+\.\d+) (?P<call>\w+)\((?P<fd>\d+)<UDP:\[[^\]]*->[\d.]+:53\]>")


def trace(tmp_path: Path, scenario: str, messages: int = 10) -> tuple[dict, Path]:
    """A real `kdiag trace` of the scenario; its findings and its bundle
    unpacked."""
    need("ip", root=True)
    for tool in ("strace", "stunnel4", "ethtool", "openssl"):
        need(tool)
    need_tansu()
    out, err = io.StringIO(), io.StringIO()
    bundle = tmp_path / f"{scenario}.tar.gz"
    rc = main(["trace", "--json", "--scenario", scenario, "--messages", str(messages), "-o", str(bundle)],
              Environment(stdout=out, stderr=err))
    assert rc == 0, err.getvalue()
    unpacked = tmp_path / "bundle"
    with tarfile.open(bundle) as tar:
        tar.extractall(unpacked, filter="data")
    return json.loads(out.getvalue()), unpacked


def log_lines(bundle: Path) -> list[dict]:
    text = (bundle / "raw" / "rdkafka_log" / "rdkafka.log").read_text(errors="replace")
    return [{**m.groupdict(), "t": float(m["t"])} for line in text.splitlines() if (m := LOG_LINE.match(line))]


def gaps(lines: list[dict], start: str, end: str) -> list[tuple[str, float]]:
    """Each ``start`` line's broker thread and the seconds from it to that
    thread's next ``end`` line, in log order."""
    found = []
    for i, begin in enumerate(lines):
        if start in begin["msg"]:
            done = next(x for x in lines[i:] if x["thread"] == begin["thread"] and end in x["msg"])
            found.append((begin["thread"], done["t"] - begin["t"]))
    return found


def assert_nothing_left(bundle: Path) -> None:
    """The lab's processes, namespaces, resolv.conf and state are gone."""
    lab = json.loads((bundle / "manifest.json").read_text())["lab"]
    assert wait_gone(lab["pids"].values(), 5.0) == []
    assert not [ns for ns in netlab.list_netns() if ns.startswith(lab["prefix"])]
    assert not list(netns.NETNS_ETC.glob(f"{lab['prefix']}-*"))
    assert not Path(lab["state_dir"]).exists()


@pytest.mark.e2e
def test_dns_slow_resolution_takes_the_resolver_delay(tmp_path, spark):
    delay_s = PATHS["dns-slow"].dns_delay_ms / 1000
    assert delay_s >= 1.0, "the scenario must inject a delay the test can see"
    found, bundle = trace(tmp_path, "dns-slow")
    assert found["verdict"] == "dns_slow", json.dumps(found["findings"], indent=1)
    resolve = found["life"]["phases"]["resolve"]
    assert 0.8 * delay_s * 1000 <= resolve["max_ms"] < (delay_s + 1.0) * 1000, resolve
    (dns,) = [f for f in found["findings"] if f["cause"] == "dns_slow"]
    assert "syscalls" in dns["rests_on"] and any(f"resolver at {netlab.RESOLVER_ADDR}:53" in e for e in dns["evidence"])
    lab = json.loads((bundle / "manifest.json").read_text())["lab"]
    assert lab["bootstrap"] == f"{netlab.BROKER_HOSTNAME}:{netlab.TLS_PORT}" and lab["hostname"]

    # librdkafka resolves between these two lines (rd_kafka_broker_connect:
    # the state change, getaddrinfo, then "Connecting to").
    (thread, gap), *later = gaps(log_lines(bundle), "Broker changed state TRY_CONNECT -> CONNECT", "Connecting to ")
    assert netlab.BROKER_HOSTNAME in thread
    assert 0.8 * delay_s <= gap < delay_s + 1.0, gap
    # Tansu advertises its address: the broker's own connection resolves nothing.
    assert later and all(netlab.BROKER_HOSTNAME not in t and g < 0.5 for t, g in later), later

    # The resolver's query and its late answer, in the producer's syscalls.
    strace = (bundle / "raw" / "strace" / "strace.txt").read_text(errors="replace")
    assert f'sin_port=htons(53), sin_addr=inet_addr("{netlab.RESOLVER_ADDR}")' in strace
    calls = [(m["call"], float(m["t"])) for line in strace.splitlines() if (m := UDP_53.match(line))]
    sent = next(t for call, t in calls if call.startswith("send"))
    got = next(t for call, t in calls if call.startswith("recv") and t > sent)
    assert 0.8 * delay_s <= got - sent < delay_s + 1.0, calls
    assert_nothing_left(bundle)


@pytest.mark.e2e
def test_connect_slow_connect_waits_for_the_syn_retransmits(tmp_path, spark):
    need("nft")
    drops = PATHS["connect-slow"].syn_drops
    assert drops >= 1, "the scenario must drop a SYN for the test to see"
    # The client namespace retransmits a SYN after 1 s, then 2 s more, ...
    expected_s = sum(2 ** i for i in range(drops))
    found, bundle = trace(tmp_path, "connect-slow")
    assert found["verdict"] == "connect_slow", json.dumps(found["findings"], indent=1)
    (cs,) = [f for f in found["findings"] if f["cause"] == "connect_slow"]
    # The log's phase and the syscalls' connect() to writable both say it.
    assert cs["rests_on"] == ["log lines", "syscalls"] and any(f"about {drops} SYN retransmit" in e
                                                                 for e in cs["evidence"]), cs
    (_, gap), *later = gaps(log_lines(bundle), "Connecting to ", "Connected to ")
    assert 0.8 * expected_s <= gap < expected_s + 1.0, gap
    # Only the run's first SYNs are dropped: the connections after it
    # (the broker's own, after the bootstrap one) connect at once.
    assert later and all(g < 0.5 for _, g in later), later
    assert_nothing_left(bundle)


_CHILD = """
import json, time
from kdiag.lab import network as netlab, scenarios
with netlab.running("dns-slow", scenarios.network_paths()["dns-slow"], topics=()) as lab:
    print(json.dumps(lab.to_dict()), flush=True)
    time.sleep(60)
"""


@pytest.mark.e2e
def test_the_client_namespace_resolves_late_and_a_killed_lab_is_swept(tmp_path):
    """`ip netns exec` gives the client namespace the lab's resolv.conf; a
    lab whose owner was SIGKILLed leaves it behind until the next sweep."""
    need("ip", root=True)
    for tool in ("stunnel4", "ethtool", "openssl", "getent"):
        need(tool)
    need_tansu()
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    child = subprocess.Popen([sys.executable, "-c", _CHILD], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=env, cwd=root)
    try:
        line = child.stdout.readline()
        if not line:
            child.wait(10)
            pytest.fail(f"the child started no lab: {child.stderr.read()[-2000:]}")
        info = json.loads(line)
        client = info["namespaces"]["client"]
        resolv = netns.netns_etc(client) / "resolv.conf"
        assert f"nameserver {netlab.RESOLVER_ADDR}" in resolv.read_text()
        started = time.monotonic()
        out = subprocess.run(["ip", "netns", "exec", client, "getent", "ahostsv4", netlab.BROKER_HOSTNAME],
                             capture_output=True, text=True, timeout=30)
        took = time.monotonic() - started
        assert out.returncode == 0 and info["broker_addr"] in out.stdout, out
        delay_s = PATHS["dns-slow"].dns_delay_ms / 1000
        assert 0.8 * delay_s <= took < delay_s + 1.0, took
        child.kill()
        child.wait(10)
        assert wait_gone(info["pids"].values(), 5.0) == []
        assert resolv.exists(), "the owner's death alone removes no file"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
        netlab.sweep_stale()
    assert not netns.netns_etc(client).exists()
    assert not set(netlab.list_netns()) & set(info["namespaces"].values())


# --- the resolver on its own, on loopback (no root) ---------------------------


def _query(qname: str, qtype: str, qid: int) -> bytes:
    from scapy.layers.dns import DNS, DNSQR

    return bytes(DNS(id=qid, rd=1, qd=DNSQR(qname=qname, qtype=qtype)))


def test_resolver_answers_a_nodata_and_nxdomain():
    from scapy.layers.dns import DNS

    name, addr = "broker.kdiag.lab", "10.201.2.2"
    reply, what = resolver.answer(_query("Broker.Kdiag.Lab.", "A", 7), name, addr)
    r = DNS(reply)
    assert (r.id, r.qr, r.aa, r.rcode, r.ancount) == (7, 1, 1, 0, 1) and r.an[0].rdata == addr, what
    # glibc's AAAA question for an IPv4-only name: no records, no error
    r = DNS(resolver.answer(_query(name, "AAAA", 8), name, addr)[0])
    assert (r.id, r.rcode, r.ancount) == (8, 0, 0)
    r = DNS(resolver.answer(_query("other.kdiag.lab", "A", 9), name, addr)[0])
    assert (r.rcode, r.ancount) == (resolver.RCODE_NXDOMAIN, 0)
    # not a standard query: never answered
    assert resolver.answer(b"\x00", name, addr) is None
    assert resolver.answer(reply, name, addr) is None     # a response, not a query


def test_resolver_delays_each_answer_on_its_own_schedule():
    # Imported first, as the lab's resolver has it before its first query:
    # the clock below times the answers, not an import.
    from scapy.layers.dns import DNS

    delay_s = 0.3
    counts, stop = resolver.Counts(), [False]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as server, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
        server.bind(("127.0.0.1", 0))
        t = threading.Thread(target=resolver.serve, args=(server, "broker.kdiag.lab", "10.201.2.2", delay_s,
                                                          counts, stop), daemon=True)
        t.start()
        try:
            client.settimeout(5)
            client.connect(server.getsockname())
            started = time.monotonic()
            # as glibc does: both questions back to back on one socket
            client.send(_query("broker.kdiag.lab", "A", 1))
            client.send(_query("broker.kdiag.lab", "AAAA", 2))
            client.send(b"not dns")
            got = [client.recv(4096), client.recv(4096)]
            took = time.monotonic() - started
        finally:
            stop[0] = True
            t.join(5)
    assert sorted(DNS(g).id for g in got) == [1, 2]
    # together, not one after the other
    assert delay_s * 0.9 <= took < 2 * delay_s, took
    assert (counts.queries, counts.answered, counts.malformed) == (3, 2, 1)
    assert counts.by_type == {"A": 1, "AAAA": 1}
