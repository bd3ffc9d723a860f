"""kdiag.collectors.tcp_probe and kdiag.parsers.tcp_probe on real packets.

The path is built here: three network namespaces joined by veths,

    client 10.202.1.2 -- 10.202.1.1 router 10.202.2.1 -- 10.202.2.2 server

with forwarding and no ICMP rate limit in the router and a TCP listener on
the server's port 9092. 10.202.9.9 is a black hole: the router has a route
and a permanent neighbour entry for it on the server's link, with a MAC
address nobody has, so the server drops the frames and nothing answers.
The collector runs inside the client namespace, as ``kdiag trace`` runs it.
"""
from __future__ import annotations

import json
import os
import random
import re
import socket
import struct
import subprocess
import sys

import kdiag
from kdiag.collectors import tcp_probe as c_tcp_probe
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import need
from kdiag.parsers.pcap import looks_like_pcap
from kdiag.parsers.tcp_probe import (
    PATH_SCHEMA, PROBES_SCHEMA, format_path_table, parse_handshakes, parse_pcap, parse_probes_jsonl, path_table,
    probe_seq,
)

ROUTER_NEAR, ROUTER_FAR, SERVER, BLACKHOLE = "10.202.1.1", "10.202.2.1", "10.202.2.2", "10.202.9.9"
PORT, CLOSED_PORT = 9092, 9093

LISTENER = r"""
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(128)
print("listening", flush=True)
while True:
    c, _ = s.accept()
    c.close()
"""


def sh(*cmd: str, ns: str | None = None, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
    full = (["ip", "netns", "exec", ns] if ns else []) + list(cmd)
    res = subprocess.run(full, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if check and res.returncode:
        raise AssertionError(f"{' '.join(full)}: exit {res.returncode}: {res.stderr.strip()}")
    return res


class Path3:
    def __init__(self) -> None:
        tag = f"{os.getpid() & 0xFFFF:04x}{random.randrange(256):02x}"
        self.client, self.router, self.server = f"kdpc-{tag}", f"kdpr-{tag}", f"kdps-{tag}"
        self.tag = tag
        self.listener: subprocess.Popen | None = None

    def up(self) -> None:
        t = self.tag
        for ns in (self.client, self.router, self.server):
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "set", "lo", "up", ns=ns)
        sh("ip", "link", "add", f"kc{t}", "netns", self.client, "type", "veth", "peer", "name", f"kr{t}",
           "netns", self.router)
        sh("ip", "link", "add", f"ks{t}", "netns", self.server, "type", "veth", "peer", "name", f"kR{t}",
           "netns", self.router)
        sh("ip", "addr", "add", "10.202.1.2/24", "dev", f"kc{t}", ns=self.client)
        sh("ip", "addr", "add", f"{ROUTER_NEAR}/24", "dev", f"kr{t}", ns=self.router)
        sh("ip", "addr", "add", f"{ROUTER_FAR}/24", "dev", f"kR{t}", ns=self.router)
        sh("ip", "addr", "add", f"{SERVER}/24", "dev", f"ks{t}", ns=self.server)
        for ns, dev in ((self.client, f"kc{t}"), (self.router, f"kr{t}"), (self.router, f"kR{t}"),
                        (self.server, f"ks{t}")):
            sh("ip", "link", "set", dev, "up", ns=ns)
        sh("ip", "route", "add", "default", "via", ROUTER_NEAR, ns=self.client)
        sh("ip", "route", "add", "default", "via", ROUTER_FAR, ns=self.server)
        sh("sysctl", "-qw", "net.ipv4.ip_forward=1", ns=self.router)
        sh("sysctl", "-qw", "net.ipv4.icmp_ratelimit=0", ns=self.router)
        sh("ip", "route", "add", "10.202.9.0/24", "dev", f"kR{t}", ns=self.router)
        sh("ip", "neigh", "add", BLACKHOLE, "lladdr", "02:00:0a:ca:09:09", "dev", f"kR{t}", "nud", "permanent",
           ns=self.router)
        self.listener = subprocess.Popen(["ip", "netns", "exec", self.server, sys.executable, "-c", LISTENER,
                                          str(PORT)], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        assert self.listener.stdout.readline().strip() == "listening"

    def down(self) -> None:
        if self.listener is not None:
            self.listener.kill()
            self.listener.wait()
        for ns in (self.client, self.router, self.server):
            sh("ip", "netns", "del", ns, check=False)


@pytest.fixture(scope="module")
def lab():
    need("ip", root=True)
    p = Path3()
    try:
        p.up()
        yield p
    finally:
        p.down()


def run_probe(ns: str | None, out: Path, targets: list, *args: str, wrap: list[str] = ()) -> dict:
    """The collector's command line, as ``kdiag trace`` runs it; its status."""
    cmd = list(wrap) + [*kdiag.python_m(c_tcp_probe), "--out", str(out),
                        "--targets", json.dumps(targets), *args]
    res = sh(*cmd, ns=ns, timeout=60)
    return json.loads(res.stdout.strip().splitlines()[-1])


def hops(table: pa.Table) -> list[tuple]:
    """(ttl, round, responder, answer) per probe."""
    return [(r["ttl"], r["round"], r["responder"], r["answer"]) for r in table.to_pylist()]


def live(out: Path) -> pa.Table:
    t, c = parse_probes_jsonl((out / "probes.jsonl").read_text().splitlines())
    assert c.skipped_total == 0
    return t


def packets(out: Path) -> pa.Table:
    t, c = parse_pcap((out / "probes.pcap").read_bytes())
    assert c.skipped_total == 0, c.to_dict()
    return t


# ---------------------------------------------------------------- the path

@pytest.fixture(scope="module")
def syn_run(lab, tmp_path_factory):
    out = tmp_path_factory.mktemp("syn")
    st = run_probe(lab.client, out, [[SERVER, PORT, "srv:9092/1"], [SERVER, CLOSED_PORT, None]])
    return out, st


def test_two_hops_open_and_closed(lab, syn_run):
    out, st = syn_run
    assert st["state"] == "ok" and st["reason"] is None, st
    assert st["version"].startswith("scapy ")
    t = live(out)
    assert set(t["method"].to_pylist()) == {"syn"}
    open_rows = [h for h, r in zip(hops(t), t.to_pylist()) if r["target_port"] == PORT]
    assert open_rows == [(1, n, ROUTER_NEAR, "time_exceeded") for n in (1, 2, 3)] + \
                        [(2, n, SERVER, "open") for n in (1, 2, 3)]
    closed_rows = [h for h, r in zip(hops(t), t.to_pylist()) if r["target_port"] == CLOSED_PORT]
    assert closed_rows == [(1, n, ROUTER_NEAR, "time_exceeded") for n in (1, 2, 3)] + \
                          [(2, n, SERVER, "closed") for n in (1, 2, 3)]
    assert all(0 < r < 50 for r in t["rtt_ms"].to_pylist())
    assert set(t.filter(pc.equal(t["target_port"], PORT))["broker"].to_pylist()) == {"srv:9092/1"}


def test_no_half_open_connection_left_on_the_server(lab, syn_run):
    left = sh("ss", "-Htn", "state", "syn-recv", ns=lab.server).stdout.strip()
    assert left == "", left


def test_pcap_offline_gives_the_live_hops(syn_run):
    out, _ = syn_run
    a, b = live(out), packets(out)
    assert hops(a) == hops(b)
    assert a["sent_us"].to_pylist() == b["sent_us"].to_pylist()
    for x, y in zip(a["rtt_ms"].to_pylist(), b["rtt_ms"].to_pylist()):
        assert x == pytest.approx(y, abs=1e-6)
    # broker names come from the caller; the packets do not carry them
    c, _ = parse_pcap((out / "probes.pcap").read_bytes(), brokers={(SERVER, PORT): "srv:9092/1"})
    assert c["broker"].to_pylist() == a["broker"].to_pylist()


def test_pcap_is_read_by_tcpdump(syn_run):
    need("tcpdump")
    out, _ = syn_run
    res = sh("tcpdump", "-nr", str(out / "probes.pcap"))
    lines = res.stdout.splitlines()
    # 12 SYNs, 6 ICMP time exceeded, 3 SYN-ACKs and our 3 RSTs after them, 3 RSTs from the closed port
    assert len(lines) == 27, res.stdout
    assert sum("ICMP time exceeded" in ln for ln in lines) == 6
    assert sum("Flags [S.]" in ln for ln in lines) == 3


def test_handshakes(syn_run):
    out, _ = syn_run
    t, c = parse_handshakes((out / "handshakes.jsonl").read_text().splitlines())
    assert c.parsed == 10 and c.skipped_total == 0
    rows = t.to_pylist()
    ok = [r for r in rows if r["target_port"] == PORT]
    assert len(ok) == 5 and all(r["error"] is None and 0 < r["rtt_ms"] < 50 for r in ok)
    assert {r["broker"] for r in ok} == {"srv:9092/1"}
    refused = [r for r in rows if r["target_port"] == CLOSED_PORT]
    assert len(refused) == 5 and {r["error"] for r in refused} == {"ECONNREFUSED"}
    assert all(r["rtt_ms"] is None for r in refused)


def test_blackhole_gives_none_within_the_bound(lab, tmp_path):
    st = run_probe(lab.client, tmp_path, [[BLACKHOLE, PORT, None]])
    assert st["state"] == "ok" and "not reached within 16 hops" in st["reason"]
    t = live(tmp_path)
    rows = hops(t)
    assert rows[:3] == [(1, n, ROUTER_NEAR, "time_exceeded") for n in (1, 2, 3)]
    assert len(rows) == 16 * 3 and all(r[2:] == (None, "none") for r in rows[3:])
    assert hops(packets(tmp_path)) == rows
    # rounds * max_ttl * pace + timeout for the probes, one timeout for the
    # single handshake tried, and a little for start-up
    took = (st["ended_us"] - st["started_us"]) / 1e6
    assert took < 3 * 16 * 0.050 + 1.0 + 1.0 + 0.5, took
    hs, _ = parse_handshakes((tmp_path / "handshakes.jsonl").read_text().splitlines())
    assert hs["error"].to_pylist() == ["timeout"]


def test_connect_method_finds_the_same_hops(lab, syn_run, tmp_path):
    st = run_probe(lab.client, tmp_path, [[SERVER, PORT, None], [SERVER, CLOSED_PORT, None]], "--method", "connect")
    assert st["state"] == "ok", st
    assert not (tmp_path / "probes.pcap").exists()
    t = live(tmp_path)
    assert set(t["method"].to_pylist()) == {"connect"}
    assert hops(t) == hops(live(syn_run[0]))
    # the open port's connections were reset at once: none left on either side
    assert sh("ss", "-Htn", "state", "syn-recv", ns=lab.server).stdout.strip() == ""


def test_without_cap_net_raw_it_falls_back(lab, tmp_path):
    need("setpriv")
    st = run_probe(lab.client, tmp_path, [[SERVER, PORT, None]],
                   wrap=["setpriv", "--bounding-set=-net_raw", "--inh-caps=-net_raw"])
    assert st["state"] == "ok" and st["reason"].startswith("no raw socket"), st
    assert "connect()" in st["reason"]
    t = live(tmp_path)
    assert set(t["method"].to_pylist()) == {"connect"}
    assert [(h[0], h[2], h[3]) for h in hops(t)] == [(1, ROUTER_NEAR, "time_exceeded")] * 3 + [(2, SERVER, "open")] * 3


def test_forced_syn_without_raw_socket_fails_with_reason(lab, tmp_path):
    need("setpriv")
    st = run_probe(lab.client, tmp_path, [[SERVER, PORT, None]], "--method", "syn",
                   wrap=["setpriv", "--bounding-set=-net_raw", "--inh-caps=-net_raw"])
    assert st["state"] == "failed" and "no raw socket" in st["reason"]


TRACEROUTE_HOP = re.compile(r"^\s*(\d+)\s+(\S+)")  # " 1  10.202.1.1  0.051 ms  0.017 ms  0.013 ms"


def test_path_table_matches_traceroute(lab, syn_run):
    need("traceroute")
    out, _ = syn_run
    res = sh("traceroute", "-T", "-n", "-p", str(PORT), "-q", "3", "-w", "1", "-N", "1", "-m", "8", SERVER,
             ns=lab.client)
    theirs = [TRACEROUTE_HOP.match(ln).groups() for ln in res.stdout.splitlines()[1:]]
    table = path_table(packets(out).filter(pc.equal(packets(out)["target_port"], PORT)))
    assert table.schema == PATH_SCHEMA
    ours = [(str(r["ttl"]), r["responder"]) for r in table.to_pylist()]
    assert ours == theirs == [("1", ROUTER_NEAR), ("2", SERVER)]
    text = format_path_table(table)
    lines = text.splitlines()
    assert lines[0] == f"{SERVER}:{PORT}, syn probes, 2 hops"
    assert lines[1].split() == ["HOP", "ADDRESS", "RTT(ms)", "ANSWER"]
    assert [ln.split()[:2] for ln in lines[2:]] == [list(h) for h in theirs]
    assert lines[2].split()[3:] == ["time_exceeded", "3/3"] and lines[3].split()[3:] == ["open", "3/3"]


def test_tcpdump_capture_of_a_run_gives_the_same_hops(lab, tmp_path):
    """The parser also reads a capture made on the wire (Ethernet frames,
    the kernel's own RSTs among them)."""
    need("tcpdump")
    cap = tmp_path / "wire.pcap"
    # --immediate-mode: else libpcap holds packets in a block until its 1 s
    # timeout, and a SIGTERM before then writes none of them.
    dump = subprocess.Popen(["ip", "netns", "exec", lab.client, "tcpdump", "-i", f"kc{lab.tag}", "-n",
                             "--immediate-mode", "-U", "-Z", "root", "-w", str(cap), "tcp or icmp"],
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        assert "listening on" in dump.stderr.readline()
        st = run_probe(lab.client, tmp_path / "out", [[SERVER, PORT, None]], "--handshakes", "0")
        assert st["state"] == "ok"
        time.sleep(0.2)
    finally:
        dump.terminate()
        dump.wait(timeout=10)
    wire, c = parse_pcap(cap.read_bytes())
    # the rest are the kernel's RSTs and ours: parsed, no rows
    assert c.skipped_total == 0 and c.parsed == c.lines == 6 + 6 + 3 + 3, c.to_dict()
    mine = live(tmp_path / "out")
    assert hops(wire) == hops(mine)
    for x, y in zip(wire["rtt_ms"].to_pylist(), mine["rtt_ms"].to_pylist()):
        assert abs(x - y) < 5


def test_loopback_is_one_hop(tmp_path):
    need(root=True)
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(16)
    try:
        port = ls.getsockname()[1]
        st = run_probe(None, tmp_path, [["127.0.0.1", port, None]], "--handshakes", "2")
    finally:
        ls.close()
    assert st["state"] == "ok", st
    assert hops(live(tmp_path)) == hops(packets(tmp_path)) == [(1, n, "127.0.0.1", "open") for n in (1, 2, 3)]
    hs, _ = parse_handshakes((tmp_path / "handshakes.jsonl").read_text().splitlines())
    assert hs["error"].to_pylist() == [None, None]


def test_no_targets_is_skipped(tmp_path):
    from kdiag.collectors.tcp_probe import probe

    st = probe([], tmp_path)
    assert st.state == "skipped" and st.reason == "no targets"


def test_unresolvable_target_is_a_partial_run(tmp_path):
    from kdiag.collectors.tcp_probe import Target, probe

    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(16)
    try:
        # an IPv6 literal fails without a DNS query
        st = probe([Target("::1", 1), Target("127.0.0.1", ls.getsockname()[1])], tmp_path,
                   rounds=1, handshakes=1, method="connect")
    finally:
        ls.close()
    assert st.state == "partial" and "::1:1: no IPv4 address" in st.reason, st


# ---------------------------------------------------------------- parser input

def _pcap(records: list[tuple[int, bytes]], linktype: int = 101) -> bytes:
    out = struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, linktype)
    for ts, pkt in records:
        out += struct.pack("<IIII", ts // 10**9, ts % 10**9, len(pkt), len(pkt)) + pkt
    return out


def test_empty_and_garbage_input():
    t, c = parse_pcap(b"")
    assert len(t) == 0 and c.lines == 0 and t.schema == PROBES_SCHEMA
    t, c = parse_pcap(b"GET / HTTP/1.1\r\n")
    assert len(t) == 0 and c.skipped == {"not_pcap": 1}
    t, c = parse_pcap(_pcap([])[:10])
    assert len(t) == 0 and c.skipped == {"truncated": 1}
    assert not looks_like_pcap(b"") and not looks_like_pcap(b"{\"ttl\": 1}")
    t, c = parse_probes_jsonl(["", "{", "[]", '{"ttl": 1}', '{"target_host": "h", "target_port": 1, "ttl": 1, '
                               '"round": 1, "answer": "maybe"}'])
    assert len(t) == 0 and c.skipped == {"empty": 1, "not_json": 1, "not_probe": 3}
    t, c = parse_handshakes(["x", '{"target": "h:99999", "rtt_ms": 1}', '{"target": "[::1]:9092", "rtt_ms": 0.5}'])
    assert c.skipped == {"not_json": 1, "not_handshake": 1} and t.to_pylist()[0]["target_host"] == "::1"


def test_every_truncation_of_a_real_pcap(syn_run):
    data = (syn_run[0] / "probes.pcap").read_bytes()
    full, _ = parse_pcap(data)
    assert looks_like_pcap(data[:4])
    cuts = sorted({*range(0, 64), *random.Random(1).sample(range(len(data)), 300), len(data) - 1})
    for n in cuts:
        t, c = parse_pcap(data[:n])
        assert c.lines == c.parsed + c.skipped_total
        assert len(t) <= len(full)
        if n >= 24:
            assert c.skipped_total <= 1   # only the record cut short, if any


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600))
def test_random_bytes_never_raise(data):
    for head in (b"", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x0a\x0d\x0d\x0a\x1c\x00\x00\x00\x4d\x3c\x2b\x1a"):
        t, c = parse_pcap(head + data)
        assert c.lines == c.parsed + c.skipped_total
        assert t.schema == PROBES_SCHEMA


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_corrupted_real_packets_never_raise(syn_run, data):
    raw = bytearray((syn_run[0] / "probes.pcap").read_bytes())
    for _ in range(data.draw(st.integers(1, 8))):
        i = data.draw(st.integers(24, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
    _, c = parse_pcap(bytes(raw))
    assert c.lines == c.parsed + c.skipped_total


def test_pcapng_reads_like_pcap(syn_run, tmp_path):
    """Converted by scapy's own pcapng writer: a second implementation."""
    from scapy.layers.inet6 import IPv46  # noqa: F401  (registers the raw-IP link type)
    from scapy.utils import PcapNgWriter, rdpcap

    src = syn_run[0] / "probes.pcap"
    ng = tmp_path / "probes.pcapng"
    w = PcapNgWriter(str(ng))
    for pkt in rdpcap(str(src)):
        w.write(pkt)
    w.close()
    data = ng.read_bytes()
    assert looks_like_pcap(data[:12])
    t, c = parse_pcap(data)
    assert c.skipped_total == 0, c.to_dict()
    assert hops(t) == hops(packets(syn_run[0]))


def test_foreign_and_unmatched_packets_are_counted():
    from scapy.layers.inet import ICMP, IP, TCP, UDP

    def b(p):
        return bytes(p)

    syn = IP(src="10.0.0.1", dst="10.0.0.2", ttl=1) / TCP(sport=40000, dport=9092, flags="S", seq=probe_seq(1, 1))
    quoted = b(syn)[:28]
    recs = [
        (1_000_000_000, b(syn)),
        (1_000_100_000, b(IP(src="10.0.0.9", dst="10.0.0.1") / ICMP(type=11, code=0) / quoted)),
        (1_000_200_000, b(IP(src="10.0.0.9", dst="10.0.0.1") / ICMP(type=11, code=0) / quoted)),  # duplicate
        (1_000_300_000, b(IP(src="10.0.0.1", dst="10.0.0.2") / TCP(sport=1, dport=2, flags="S", seq=5))),  # foreign
        (1_000_400_000, b(IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=1, dport=2))),
        (1_000_500_000, b(IP(src="10.0.0.2", dst="10.0.0.1") / TCP(sport=9092, dport=40001, flags="SA",
                                                                     ack=probe_seq(2, 1) + 1))),  # no such probe
        (1_000_600_000, b"\x45\x00"),
        (1_000_700_000, b"\x60" + bytes(39)),
    ]
    t, c = parse_pcap(_pcap(recs))
    assert hops(t) == [(1, 1, "10.0.0.9", "time_exceeded")]
    assert t["rtt_ms"].to_pylist() == [pytest.approx(0.1)]
    assert c.parsed == 2 and c.skipped == {"duplicate_answer": 1, "foreign": 2, "unmatched_answer": 1,
                                           "not_ipv4": 2}
    # the same packets in Ethernet frames
    eth = [(ts, b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00" + p) for ts, p in recs[:2]]
    t2, c2 = parse_pcap(_pcap(eth, linktype=1))
    assert hops(t2) == hops(t) and c2.skipped_total == 0
    t3, c3 = parse_pcap(_pcap(recs[:1], linktype=147))
    assert len(t3) == 0 and c3.skipped == {"unsupported_link": 1}


def test_path_table_rows():
    rows = [
        dict(target_host="h", target_port=1, broker="b", ttl=1, round=1, sent_us=1, responder="r1",
             answer="time_exceeded", rtt_ms=1.0, method="syn"),
        dict(target_host="h", target_port=1, broker="b", ttl=1, round=2, sent_us=2, responder=None,
             answer="none", rtt_ms=None, method="syn"),
        dict(target_host="h", target_port=1, broker="b", ttl=1, round=3, sent_us=3, responder="r1",
             answer="time_exceeded", rtt_ms=3.0, method="syn"),
        dict(target_host="h", target_port=1, broker="b", ttl=2, round=1, sent_us=4, responder=None,
             answer="none", rtt_ms=None, method="syn"),
        dict(target_host="h", target_port=1, broker="b", ttl=3, round=1, sent_us=5, responder="h",
             answer="open", rtt_ms=2.0, method="syn"),
        # past the target: traceroute stops before these
        dict(target_host="h", target_port=1, broker="b", ttl=4, round=1, sent_us=6, responder="h",
             answer="open", rtt_ms=2.0, method="syn"),
    ]
    t = path_table(pa.Table.from_pylist(rows, schema=PROBES_SCHEMA))
    got = [(r["ttl"], r["responder"], r["answer"], r["rtt_min_ms"], r["rtt_median_ms"], r["rtt_max_ms"],
            r["answered"], r["sent"]) for r in t.to_pylist()]
    assert got == [(1, "r1", "time_exceeded", 1.0, 2.0, 3.0, 2, 3), (2, None, "none", None, None, None, 0, 1),
                   (3, "h", "open", 2.0, 2.0, 2.0, 1, 1)]
    assert format_path_table(t) == (
        "h:1 (broker b), syn probes, 3 hops\n"
        "HOP  ADDRESS  RTT(ms)            ANSWER\n"
        "  1  r1       1.000/2.000/3.000  time_exceeded 2/3\n"
        "  2  *        *                  none 0/1\n"
        "  3  h        2.000/2.000/2.000  open 1/1\n"
    )
    assert format_path_table(path_table(PROBES_SCHEMA.empty_table())) == ""
    # The report draws the findings' rows as they are, without Arrow: the same text.
    from kdiag.parsers.tcp_path import format_path_rows

    assert format_path_rows(t.to_pylist()) == format_path_table(t)
    # A findings file anyone may have edited: fields missing, of other
    # types, or holding terminal controls; entries that are not rows.
    forged = [{"target_host": ["x"], "ttl": "1\x1b[2J", "rtt_min_ms": "fast", "rtt_median_ms": 1,
               "rtt_max_ms": None, "answer": {"a": 1}}, "not a row", {"ttl": 2, "rtt_min_ms": True}]
    text = format_path_rows(forged)
    assert "\x1b" not in text and "fast" in text and text.count("HOP") == 2
