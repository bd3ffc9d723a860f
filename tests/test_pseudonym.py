"""Pseudonyms for addresses and hostnames: consistent, complete, and
invisible to the analysis."""
import io
import ipaddress
import json
import os
import stat
import struct

import pytest
from conftest import CAPTURES

from kdiag.bundle.pseudonym import staging as pseudonym_staging
from kdiag.bundle.pseudonym import PseudonymError, Pseudonyms, pseudonymise_manifest

BROKER, CLIENT, ROUTER = "10.1.2.3", "192.168.7.9", "172.16.5.4"
BROKER6, CLIENT6, ROUTER6 = "fd12:3456::7", "2001:db8::5", "2001:db8:1::1"
FQDN, LEARNED, SHORT = "kafka1.example.com", "b-2.kafka.internal", "myhost"
REAL_V4 = (BROKER, CLIENT, ROUTER)
REAL_V6 = (BROKER6, CLIENT6, ROUTER6)
REAL_HOSTS = (FQDN, LEARNED)


@pytest.fixture
def ps(tmp_path):
    p = Pseudonyms.load_or_create(tmp_path / "keys" / "map.json")
    yield p
    p.close()


# ---------------------------------------------------------------- text

FORMS = [
    # every spelling the analysis joins on, one broker throughout
    (f"%7|1795315014.770|SEND|rdkafka#producer-1| [thrd:ssl://{BROKER}:9093/1]: ssl://{BROKER}:9093/1: "
     f"Sent ProduceRequest (v10, 2161 bytes @ 0, CorrId 30)"),
    (f"17904 1795315014.762000 connect(8<TCP:[{CLIENT}:42154->{BROKER}:9093]>, {{sa_family=AF_INET, "
     f'sin_port=htons(9093), sin_addr=inet_addr("{BROKER}")}}, 16) = -1 EINPROGRESS <0.000040>'),
    f'{{"name":"ssl://{BROKER}:9093/1", "nodeid":1, "nodename":"{BROKER}:9093"}}',
    f'{{"kind":"socket","local":"{CLIENT}:42154","remote":"{BROKER}:9093"}}',
    f'{{"target_host": "{BROKER}", "target_port": 9093, "broker": "{BROKER}:9093/1", "responder": "{ROUTER}"}}',
]


def test_every_form_of_one_broker_gets_one_pseudonym(ps):
    p = ps.ip(BROKER)
    assert p != BROKER and ipaddress.ip_address(p) in ipaddress.ip_network("10.0.0.0/8")
    outs = [ps.text(f) for f in FORMS]
    for out in outs:
        assert BROKER not in out
    assert f"ssl://{p}:9093/1" in outs[0] and f"->{p}:9093]" in outs[1] and f'inet_addr("{p}")' in outs[1]
    assert f'"nodename":"{p}:9093"' in outs[2] and f'"remote":"{p}:9093"' in outs[3]
    assert f'"target_host": "{p}"' in outs[4] and f'"broker": "{p}:9093/1"' in outs[4]
    # the rest of each line, ports included, is as it was
    assert outs[0].replace(p, BROKER) == FORMS[0]
    assert outs[1].replace(p, BROKER).replace(ps.ip(CLIENT), CLIENT) == FORMS[1]


def test_same_map_same_pseudonyms_across_runs(tmp_path):
    text = "\n".join(FORMS + [f"[{BROKER6}]:9093 ::ffff:{BROKER} ssl://{FQDN}:9093/2"])
    path = tmp_path / "map.json"
    with Pseudonyms.load_or_create(path) as a:
        first = a.text(text)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with Pseudonyms.load_or_create(path) as b:
        assert b.text(text) == first
        # values the first run never saw come from the same key
        late = b.ip("10.77.0.1")
    with Pseudonyms.load_or_create(path) as c:
        assert c.ip("10.77.0.1") == late
    with Pseudonyms.load_or_create(tmp_path / "other.json") as d:
        assert d.text(text) != first       # another key, other pseudonyms
        assert d.map_id != c.map_id and c.map_id == json.loads(path.read_text())["map_id"]
    assert f"::ffff:{Pseudonyms.load_or_create(path, lock_timeout_s=1).ip(BROKER)}" in first


def test_families_and_what_is_kept(ps):
    assert ipaddress.ip_address(ps.ip(BROKER6)) in ipaddress.ip_network("fd00::/8")
    assert ps.ip(f"::ffff:{BROKER}") == f"::ffff:{ps.ip(BROKER)}"
    assert ps.ip("fe80::1%eth0").endswith("%eth0")
    for kept in ("127.0.0.1", "127.3.4.5", "::1", "0.0.0.0", "::", "255.255.255.255"):
        assert ps.ip(kept) == kept
    assert ps.hostname("localhost") == "localhost"
    h = ps.hostname(FQDN)
    assert h.startswith("host-") and h.endswith(".invalid") and ps.hostname(FQDN.upper()) == h
    assert ps.hostname(h) == h


def test_loopback_setting_belongs_to_the_map(tmp_path):
    path = tmp_path / "map.json"
    with Pseudonyms.load_or_create(path, keep_loopback=False) as a:
        assert a.ip("127.0.0.1") != "127.0.0.1"
    with Pseudonyms.load_or_create(path) as b:
        assert not b.keep_loopback and b.ip("127.0.0.1") == a.ip("127.0.0.1")
    with pytest.raises(PseudonymError, match="keep_loopback"):
        Pseudonyms.load_or_create(path, keep_loopback=True)


def test_what_is_no_address_stays(ps):
    ps.add_hostnames([FQDN, SHORT])
    text = ("[thrd::0/internal]: :0/internal: librdkafka v2.16.0 04:42:32.755985 1795315014.755985 "
            "socket.nagle.disable=false /usr/lib/python3.11/ssl.py 1.2.3.4.5 x.kafka1.example.com "
            "my-kafka1.example.com myhost is a word std::string 999.1.2.3 aa:bb:cc:dd:ee:ff\n")
    assert ps.text(text) == text


def test_hostnames_in_their_contexts(ps):
    ps.add_hostnames([FQDN])
    ps.hostname(SHORT)
    h, s = ps.hostname(FQDN), ps.hostname(SHORT)
    line = (f'read(3, "127.0.0.1\\tlocalhost\\n{BROKER}\\t{FQDN}\\n{CLIENT}\\t{SHORT}\\n", 4096) '
            f'uname({{nodename="{SHORT}"}}) {FQDN.upper()}. -b {SHORT}:9092')
    out = ps.text(line)
    assert FQDN not in out.lower() and SHORT not in out
    assert f"\\t{h}\\n" in out and f"\\t{s}\\n" in out and f'nodename="{s}"' in out and f"{s}:9092" in out
    # learned from the line itself: a broker named by DNS
    out = ps.text(f"ssl://{LEARNED}:9093/2: Connected; later {LEARNED} alone")
    assert LEARNED not in out and out.count(ps.hostname(LEARNED)) == 2


def test_collision_is_resolved_and_recorded(tmp_path):
    path = tmp_path / "map.json"
    with Pseudonyms.load_or_create(path) as a:
        p = a.ip(BROKER)
    data = json.loads(path.read_text())
    data["ipv4"] = {"10.200.0.1": p}    # another address already holds it
    path.write_text(json.dumps(data))
    with Pseudonyms.load_or_create(path) as b:
        q = b.ip(BROKER)
        assert q != p and ipaddress.ip_address(q) in ipaddress.ip_network("10.0.0.0/8")
    assert json.loads(path.read_text())["ipv4"] == {"10.200.0.1": p, BROKER: q}


def test_the_map_stays_out_of_the_bundle(tmp_path):
    staging = tmp_path / "out.tar.gz.partial"
    (staging / "raw").mkdir(parents=True)
    with pytest.raises(PseudonymError, match="inside"):
        Pseudonyms.load_or_create(staging / "map.json", outside=[staging])
    with Pseudonyms.load_or_create(staging / "raw" / "map.json") as ps, pytest.raises(PseudonymError):
        ps.tree(staging)


def test_manifest(ps):
    manifest = {
        "argv": ["trace", "-b", f"{FQDN}:9093,{BROKER}:9093", "-X", "socket.nagle.disable=true"],
        "producer_config": {"bootstrap.servers": f"{FQDN}:9093,{BROKER}:9093", "acks": "all"},
        "lab": {"broker": f"{BROKER}:9093", "hops": [ROUTER]},
        "partial_reasons": [f"no message was delivered: ssl://{LEARNED}:9093/2: Connection refused"],
        "host": {"kernel": "6.18", "hostname": SHORT},
        "parse": [{"path": "raw/strace/strace.txt", "examples": ["10.99.0.1 was mapped already"]}],
    }
    out = pseudonymise_manifest(manifest, ps)
    text = json.dumps(out)
    for real in (FQDN, LEARNED, BROKER, ROUTER, f'"{SHORT}"'):
        assert real not in text
    assert out["host"]["hostname"] == ps.hostname(SHORT) and out["host"]["kernel"] == "6.18"
    assert out["producer_config"]["bootstrap.servers"] == f"{ps.hostname(FQDN)}:9093,{ps.ip(BROKER)}:9093"
    assert out["argv"][4] == "socket.nagle.disable=true"
    assert out["parse"] == manifest["parse"]   # came from rewritten captures: not mapped twice


@pytest.mark.parametrize("block", [61, 4096])
def test_streaming_blocks_and_endless_lines(tmp_path, monkeypatch, block):
    monkeypatch.setattr(pseudonym_staging, "BLOCK", block)
    monkeypatch.setattr(pseudonym_staging, "MAX_LINE", 200)
    lines = [f"{i} ssl://{BROKER}:9093/1 {CLIENT}->{BROKER} {FQDN}\n" for i in range(50)]
    endless = " ".join(f"[{BROKER}]:{i}" for i in range(100))   # no newline for 1.7 KB
    f = tmp_path / "raw" / "x.log"
    f.parent.mkdir()
    f.write_text("".join(lines) + endless)
    with Pseudonyms.load_or_create(tmp_path / "map.json") as ps:
        ps.add_hostnames([FQDN])
        counts = ps.tree(tmp_path / "raw")
        want = ps.text("".join(lines) + endless)
    got = f.read_text()
    assert got == want and BROKER not in got and FQDN not in got
    assert counts["replacements"]["ipv4"] == 250 and counts["files"]["changed"] == 1


# ---------------------------------------------------------------- packets

def _probe_packets():
    """A SYN probe run as collectors/tcp_probe.py records it: TTL 1 answered
    by a router's time exceeded, TTL 2 by the broker's SYN-ACK; the same in
    IPv6; a UDP datagram and an ICMP echo with payloads."""
    from scapy.all import ICMP, IP, TCP, UDP, ICMPv6TimeExceeded, IPv6, Raw, raw

    from kdiag.parsers.tcp_probe import probe_seq

    pkts, t = [], 1795315014.0
    for rnd in (1, 2):
        syn1 = IP(src=CLIENT, dst=BROKER, ttl=1, id=rnd) / TCP(sport=40000 + rnd, dport=9093, flags="S",
                                                                seq=probe_seq(1, rnd), options=[("MSS", 1460)])
        te = IP(src=ROUTER, dst=CLIENT) / ICMP(type=11, code=0) / Raw(raw(syn1))
        syn2 = IP(src=CLIENT, dst=BROKER, ttl=2, id=10 + rnd) / TCP(sport=40100 + rnd, dport=9093, flags="S",
                                                                     seq=probe_seq(2, rnd))
        sa = IP(src=BROKER, dst=CLIENT) / TCP(sport=9093, dport=40100 + rnd, flags="SA", seq=77,
                                              ack=probe_seq(2, rnd) + 1)
        rst = IP(src=CLIENT, dst=BROKER) / TCP(sport=40100 + rnd, dport=9093, flags="R", seq=probe_seq(2, rnd) + 1)
        for p in (syn1, te, syn2, sa, rst):
            p.time = t
            t += 0.001
            pkts.append(IP(raw(p)))
    syn6 = IPv6(src=CLIENT6, dst=BROKER6, hlim=1) / TCP(sport=40200, dport=9093, flags="S", seq=probe_seq(1, 1))
    te6 = IPv6(src=ROUTER6, dst=CLIENT6) / ICMPv6TimeExceeded() / Raw(raw(syn6))
    udp = IP(src=CLIENT, dst=BROKER) / UDP(sport=5353, dport=53) / Raw(f"query {FQDN}".encode())
    echo = IP(src=CLIENT, dst=ROUTER) / ICMP(type=8) / Raw(b"ping " + BROKER.encode())
    for p in (syn6, te6, udp, echo):
        p.time = t
        t += 0.001
        pkts.append(p.__class__(raw(p)))
    return pkts


def _checksum_problems(pkt) -> list[str]:
    """Each checksum in the packet (inner ones too) against scapy's own.
    A packet whose payload was cut from the capture cannot be checked."""
    from scapy.all import IP, IPv6, NoPayload, raw

    ip = next((pkt[layer] for layer in (IP, IPv6) if layer in pkt), None)
    if ip is not None and len(raw(ip)) < (ip.len if ip.version == 4 else ip.plen + 40):
        return []

    def layers(p):
        while p is not None and not isinstance(p, NoPayload):
            yield p
            p = p.payload

    bare = pkt.copy()
    for layer in layers(bare):
        for name in ("chksum", "cksum"):
            if name in layer.fields:
                setattr(layer, name, None)
    rebuilt = pkt.__class__(raw(bare))
    out = []
    for a, b in zip(layers(pkt), layers(rebuilt)):
        for name in ("chksum", "cksum"):
            if name in a.fields and a.fields[name] != b.fields[name]:
                out.append(f"{a.name}.{name} {a.fields[name]:#06x}, should be {b.fields[name]:#06x}")
    return out


def _pcapng(frames: list[bytes], linktype: int = 1) -> bytes:
    """A pcapng by hand: an interface with an address and a name, Ethernet
    frames, a name resolution block and a block kdiag does not know."""
    def block(btype, body):
        body += b"\0" * (-len(body) % 4)
        n = 12 + len(body)
        return struct.pack("<II", btype, n) + body + struct.pack("<I", n)

    def opt(code, val):
        return struct.pack("<HH", code, len(val)) + val + b"\0" * (-len(val) % 4)

    shb = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)
                + opt(3, f"Linux on {FQDN}".encode()) + opt(0, b""))
    idb = block(1, struct.pack("<HHI", linktype, 0, 65535) + opt(2, b"eth0")
                + opt(4, ipaddress.ip_address(CLIENT).packed + b"\xff\xff\xff\x00") + opt(0, b""))
    out = [shb, idb]
    for i, f in enumerate(frames):
        out.append(block(6, struct.pack("<IIIII", 0, 0, i, len(f), len(f)) + f + b"\0" * (-len(f) % 4)
                         + opt(1, f"seen from {CLIENT}".encode()) + opt(0, b"")))
    rec = ipaddress.ip_address(BROKER).packed + FQDN.encode() + b"\0"
    out.append(block(4, struct.pack("<HH", 1, len(rec)) + rec + b"\0" * (-len(rec) % 4) + struct.pack("<HH", 0, 0)))
    out.append(block(0xBAD, b"\0\0\0\0" + f"custom {BROKER}".encode()))
    return b"".join(out)


def _ether_frames():
    from scapy.all import ARP, Ether, raw

    mac = "02:00:00:00:00:01"
    frames = [raw(Ether(src=mac, dst=mac) / p) for p in _probe_packets()]
    frames.append(raw(Ether(src=mac, dst="ff:ff:ff:ff:ff:ff") / ARP(psrc=CLIENT, pdst=BROKER, hwsrc=mac)))
    frames.append(raw(Ether(src=mac, dst=mac, type=0x88CC) / (f"lldp {FQDN}".encode())))
    return frames


@pytest.fixture
def raw_tree(tmp_path):
    """A raw/ directory with the real values planted in every kind of file."""
    from scapy.all import wrpcap

    raw = tmp_path / "staging" / "raw"
    for d in ("rdkafka_log", "strace", "stats", "probe", "tcp_probe", "sockets", "extra"):
        (raw / d).mkdir(parents=True)
    (raw / "rdkafka_log" / "rdkafka.log").write_text(
        FORMS[0] + "\n" + f"%7|1795315014.771|CONNECT|rdkafka#producer-1| [thrd:ssl://{LEARNED}:9093/2]: "
        f"ssl://{LEARNED}:9093/2: Connecting to ipv6#[{BROKER6}]:9093 (ssl) with socket 9\n")
    # in strace, the learned name shows up before any context that names it as a host
    (raw / "strace" / "strace.txt").write_text(
        f'17904 1795315014.700000 read(3</etc/hosts>, "127.0.0.1\\tlocalhost\\n{BROKER}\\t{FQDN}\\n'
        f'{BROKER}\\t{LEARNED}\\n", 4096) = 60 <0.000010>\n'
        f'17904 1795315014.701000 uname({{sysname="Linux", nodename="{SHORT}", ...}}) = 0 <0.000004>\n'
        + FORMS[1] + "\n"
        f'17904 1795315014.763000 connect(9<TCPv6:[[{CLIENT6}]:40000->[{BROKER6}]:9093]>, {{sa_family=AF_INET6, '
        f'sin6_port=htons(9093), sin6_flowinfo=htonl(0), inet_pton(AF_INET6, "{BROKER6}", &sin6_addr), '
        f"sin6_scope_id=0}}, 28) = -1 EINPROGRESS <0.000040>\n")
    (raw / "stats" / "stats.jsonl").write_text(json.dumps(
        {"name": "rdkafka#producer-1", "brokers": {f"ssl://{FQDN}:9093/1": {
            "name": f"ssl://{FQDN}:9093/1", "nodename": f"{FQDN}:9093", "rtt": {"p50": 43263}}}}) + "\n")
    (raw / "probe" / "summary.json").write_text(json.dumps(
        {"brokers": [{"id": 1, "host": FQDN, "port": 9093}, {"id": 2, "host": LEARNED, "port": 9093}]}))
    (raw / "sockets" / "samples.jsonl").write_text(FORMS[3] + "\n" + json.dumps(
        {"kind": "socket", "local": f"[{CLIENT6}]:40000", "remote": f"[{BROKER6}]:9093"}) + "\n")
    (raw / "tcp_probe" / "handshakes.jsonl").write_text(json.dumps(
        {"target_host": BROKER, "target_port": 9093, "broker": f"{FQDN}:9093/1", "ts_us": 1, "rtt_ms": 0.1}) + "\n")
    (raw / "tcp_probe" / "probes.jsonl").write_text(FORMS[4] + "\n")
    wrpcap(str(raw / "tcp_probe" / "probes.pcap"), [p for p in _probe_packets() if p.version == 4])
    (raw / "tcp_probe" / "wire.pcapng").write_bytes(_pcapng(_ether_frames()))
    (raw / "extra" / "blob.bin").write_bytes(b"\0\1\2" + BROKER.encode() + b"\0")
    (raw / "extra" / "empty.txt").write_bytes(b"")
    return raw


def _leftovers(raw) -> list[str]:
    """Every real value still found, as text and, in packet files, as bytes."""
    found = []
    for p in sorted(raw.rglob("*")):
        if not p.is_file() or p.name == "blob.bin":
            continue
        data = p.read_bytes()
        needles = [v.encode() for v in REAL_V4 + REAL_V6] + [h.encode() for h in REAL_HOSTS] \
            + [f'"{SHORT}"'.encode()]
        if p.suffix in (".pcap", ".pcapng"):
            needles += [ipaddress.ip_address(v).packed for v in REAL_V4 + REAL_V6]
        lowered = data.lower()
        found += [f"{p.name}: {n!r}" for n in needles if n.lower() in lowered]
    return found


def test_tree_leaves_no_real_address_or_name(raw_tree, tmp_path):
    assert _leftovers(raw_tree)   # the check finds them before
    with Pseudonyms.load_or_create(tmp_path / "map.json") as ps:
        ps.hostname(SHORT)   # the host facts' name, as trace learns it
        counts = ps.tree(raw_tree)
    assert _leftovers(raw_tree) == []
    assert counts["binary_left_alone"] == ["extra/blob.bin"]
    assert counts["left_alone"] == {"extra/blob.bin": "binary, in no format kdiag reads"}
    assert (raw_tree / "extra" / "blob.bin").read_bytes() == b"\0\1\2" + BROKER.encode() + b"\0"
    assert counts["files"]["pcap"] == 1 and counts["files"]["pcapng"] == 1 and counts["files"]["empty"] == 1
    assert counts["distinct"] == {"ipv4": 3, "ipv6": 3, "hostname": 3}
    assert counts["packets"]["pcapng_blocks_dropped"] == 1            # the custom block
    assert counts["packets"]["cut_to_link_header"] == 1                # the LLDP frame
    assert counts["packets"]["payload_bytes_cut"] > 0                  # UDP, echo payloads
    # the map lists every pair, and nothing of it is in the tree
    m = json.loads((tmp_path / "map.json").read_text())
    assert set(m["ipv4"]) == set(REAL_V4) and set(m["ipv6"]) == set(REAL_V6)
    assert set(m["hostnames"]) == {FQDN, LEARNED, SHORT}
    for p in raw_tree.rglob("*"):
        assert p.is_dir() or m["key"].encode() not in p.read_bytes()
    # joins: strace's and the log's broker are one pseudonym
    log = (raw_tree / "rdkafka_log" / "rdkafka.log").read_text()
    st = (raw_tree / "strace" / "strace.txt").read_text()
    b, b6 = m["ipv4"][BROKER], m["ipv6"][BROKER6]
    assert f"ssl://{b}:9093/1" in log and f"->{b}:9093]" in st and f"[{b6}]:9093" in log and f'"{b6}"' in st
    # JSON is still JSON
    for f in ("stats/stats.jsonl", "sockets/samples.jsonl", "tcp_probe/probes.jsonl", "probe/summary.json"):
        for line in (raw_tree / f).read_text().splitlines():
            json.loads(line)


def test_pcap_checksums_and_probes_after_rewrite(raw_tree, tmp_path):
    from scapy.all import rdpcap

    from kdiag.parsers.tcp_probe import parse_pcap

    pcap = raw_tree / "tcp_probe" / "probes.pcap"
    for p in rdpcap(str(pcap)):
        assert _checksum_problems(p) == []   # the test's own packets are right to begin with
    before, counts_before = parse_pcap(pcap.read_bytes())
    with Pseudonyms.load_or_create(tmp_path / "map.json") as ps:
        ps.tree(raw_tree)
        m = {real: ps.ip(real) for real in REAL_V4 + REAL_V6}
    for name in ("probes.pcap", "wire.pcapng"):
        pkts = rdpcap(str(raw_tree / "tcp_probe" / name))
        assert len(pkts) >= 12
        for p in pkts:
            assert _checksum_problems(p) == [], p.summary()
        # the probe exchange is whole: SYNs, answers, ICMP errors
        assert sum(1 for p in pkts if "TCP" in p.summary() or "ICMP" in p.summary()) >= 11
    # ICMP time exceeded: the quoted SYN's addresses are the same pseudonyms
    from scapy.all import ICMP, IPerror
    te = next(p for p in rdpcap(str(pcap)) if ICMP in p and p[ICMP].type == 11)
    assert te[IPerror].src == m[CLIENT] and te[IPerror].dst == m[BROKER] and te.src == m[ROUTER]
    after, counts = parse_pcap(pcap.read_bytes())
    assert counts.to_dict() == counts_before.to_dict()   # the UDP and echo: foreign, as before
    want = before.to_pylist()
    for r in want:
        r["target_host"] = m[r["target_host"]]
        r["responder"] = m.get(r["responder"], r["responder"])
    assert after.to_pylist() == want and {r["answer"] for r in want} == {"time_exceeded", "open"}


def test_checksums_stay_right_for_random_packets(tmp_path):
    """Incremental updates against scapy's full computation, over varied
    addresses, options and odd lengths."""
    import random

    from scapy.all import ICMP, IP, TCP, UDP, Raw, raw, rdpcap, wrpcap

    rng = random.Random(7)
    pkts = []
    for i in range(200):
        src = str(ipaddress.IPv4Address(rng.getrandbits(32) | 0x0A000000 & 0xFFFFFFFF))
        dst = str(ipaddress.IPv4Address(rng.getrandbits(32)))
        body = rng.choice([TCP(sport=rng.randrange(65536), dport=9093, seq=rng.getrandbits(32), flags="S"),
                           UDP(sport=rng.randrange(65536), dport=53) / Raw(os.urandom(rng.randrange(9))),
                           ICMP(type=11) / Raw(raw(IP(src=dst, dst=src) / TCP(dport=9093, flags="S")))])
        pkts.append(IP(raw(IP(src=src, dst=dst, ttl=rng.randrange(1, 64)) / body)))
    path = tmp_path / "raw" / "r.pcap"
    path.parent.mkdir()
    wrpcap(str(path), pkts)
    with Pseudonyms.load_or_create(tmp_path / "map.json", keep_loopback=False) as ps:
        ps.tree(path.parent, cut_payloads=False)
    problems = [x for p in rdpcap(str(path)) for x in _checksum_problems(p)]
    assert problems == []


# ---------------------------------------------------------------- replay

def _replay(spark, *paths):
    from kdiag.cli import Environment, main

    out, err = io.StringIO(), io.StringIO()
    rc = main(["replay", "--json", *map(str, paths)], Environment(stdout=out, stderr=err))
    return rc, json.loads(out.getvalue())


@pytest.mark.parametrize("capture,how", [("nagle_on", "planted"), ("throttled", "loopback_as_real")])
def test_replay_gives_the_same_findings(spark, tmp_path, capture, how):
    """The analysis of pseudonymised captures: same verdict, same requests,
    same numbers. Either the loopback address is replaced by a routable one
    first, or the map treats loopback as real."""
    raw = tmp_path / "raw"
    raw.mkdir()
    real = "127.0.0.1"
    for name in ("rdkafka.log", "strace.txt", "stats.jsonl"):
        data = (CAPTURES / capture / name).read_bytes()
        if how == "planted":
            data = data.replace(b"127.0.0.1", BROKER.encode())
        (raw / name).write_bytes(data)
    if how == "planted":
        real = BROKER
    files = [raw / n for n in ("rdkafka.log", "strace.txt", "stats.jsonl")]
    rc, before = _replay(spark, *files)
    assert rc == 0 and real in json.dumps(before)
    with Pseudonyms.load_or_create(tmp_path / "map.json", keep_loopback=how == "planted") as ps:
        counts = ps.tree(raw)
        p = ps.ip(real)
    assert counts["replacements"]["ipv4"] > 1000 and p != real
    for f in files:
        assert real.encode() not in f.read_bytes()
    rc, after = _replay(spark, *files)
    assert rc == 0
    assert after["verdict"] == before["verdict"] == {"nagle_on": "nagle_delayed_ack", "throttled": "throttled"}[capture]
    assert after["summary"]["requests"] == before["summary"]["requests"] > 0
    assert after["summary"]["brokers"] == [b.replace(real, p) for b in before["summary"]["brokers"]]
    assert {k: v for k, v in after["summary"].items() if k != "brokers"} == \
           {k: v for k, v in before["summary"].items() if k != "brokers"}
    assert [(f["cause"], f["share"], f["requests"]) for f in after["findings"]] == \
           [(f["cause"], f["share"], f["requests"]) for f in before["findings"]]
    assert real not in json.dumps(after) and p in json.dumps(after)
    # everything else is the same once the pseudonym is read back, but the
    # files' sizes: a pseudonym is not as long as what it replaces
    back = json.loads(json.dumps(after).replace(p, real))
    for f in back["inputs"] + before["inputs"]:
        f.pop("bytes")
    assert back == before


@pytest.mark.e2e
def test_trace_with_pseudonyms_names_no_host(tmp_path):
    """kdiag trace --pseudonymise across real namespaces: the bundle's every
    member, compressed and not, is free of the lab's addresses and of this
    host's name; the verdict and the path table are the same."""
    import gzip
    import platform
    import subprocess
    import sys
    import tarfile

    from conftest import ROOT, need
    from kdiag.lab import network as netlab

    need("ip", root=True)
    need("stunnel4")
    out, map_path = tmp_path / "p.tar.gz", tmp_path / "map" / "hosts.json"
    res = subprocess.run([sys.executable, "-m", "kdiag", "trace", "--json", "--scenario", "clean", "--messages", "30",
                          "--pseudonymise", str(map_path), "-o", str(out)],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stderr
    f = json.loads(res.stdout)
    assert f["verdict"] and f["summary"]["requests"] >= 30
    # (healthy on an idle machine; a busy one may add client_cpu)
    rep = subprocess.run([sys.executable, "-m", "kdiag", "replay", "--json", str(out)],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert rep.returncode == 0 and json.loads(rep.stdout)["verdict"] == f["verdict"]
    addrs = {netlab.CLIENT_ADDR, netlab.BROKER_ADDR, *netlab.ROUTER_ADDRS}
    real = addrs | {platform.node()}
    pairs = json.loads(map_path.read_text())
    mapped = json.dumps(pairs)
    assert all(r in mapped for r in real), "the map lists what it replaced"
    blob = out.read_bytes()
    members = [gzip.decompress(blob)]
    with tarfile.open(out) as tar:
        members += [tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()]
        manifest = json.load(tar.extractfile("manifest.json"))
    for data in members:
        for r in addrs:
            assert r.encode() not in data
    # A short host name ("vm") occurs by chance in binary data: look for it
    # as a value where kdiag writes it.
    assert manifest["host"]["hostname"] != platform.node()
    assert f'"{platform.node()}"' not in json.dumps(manifest)
    # the map's key and pairs never travel; its path does, in argv
    key = pairs["key"]
    assert manifest["pseudonyms"]["map_id"] and all(key.encode() not in data for data in members)
    hops = [h for h in f.get("paths") or []]
    # A pseudonym is 10.a.b.c from a keyed hash: 1 in 256 falls in the lab's
    # 10.201/16 by chance. No hop may name one of the lab's real addresses.
    assert hops and all(str(h.get("responder") or "") not in addrs for h in hops)
    assert all(str(h.get("broker") or "").partition(":")[0] not in addrs for h in hops)


# Each file is pseudonymised as its format declares (kdiag.parsers.registry).

def _with_binary_format(monkeypatch, **declared):
    """The registry with one more format: files that open with KDX1."""
    import dataclasses

    from kdiag.parsers import registry

    known = registry.formats()
    extra = dataclasses.replace(registry.format_named("pcap"), name="kdx", title="a test capture",
                                recognise=lambda head: bytes(head[:4]) == b"KDX1", **declared)
    monkeypatch.setattr(registry, "formats", lambda: (extra, *known))


def test_a_file_is_taken_as_its_format_declares(tmp_path, ps):
    from scapy.all import wrpcap

    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "log.txt").write_text(f"%7|1.0|SEND|rdkafka#producer-1| [thrd:{BROKER}:9093/1]: Sent\n")
    wrpcap(str(raw / "probes.pcap"), [p for p in _probe_packets() if p.version == 4])
    assert pseudonym_staging.pseudonymiser_of(raw / "log.txt") == ("text", "")
    assert pseudonym_staging.pseudonymiser_of(raw / "probes.pcap") == ("pcap", "")


def test_a_format_left_as_it_is_is_listed_with_its_reason_and_said(tmp_path, ps, monkeypatch, capsys):
    from kdiag.parsers.format import LeftAsIs

    _with_binary_format(monkeypatch, pseudonymised=LeftAsIs("holds counters, no address"))
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "c.kdx").write_bytes(b"KDX1\0\0" + BROKER.encode())
    counts = ps.tree(raw)
    assert counts["left_alone"] == {"c.kdx": "kdx: holds counters, no address"}
    assert counts["binary_left_alone"] == []
    assert "c.kdx" in capsys.readouterr().err


def test_an_unknown_binary_file_is_said_aloud(tmp_path, ps, capsys):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "blob.bin").write_bytes(b"\0\1" + BROKER.encode())
    ps.tree(raw)
    err = capsys.readouterr().err
    assert "blob.bin" in err and "not pseudonymised" in err


def test_a_format_with_a_pseudonymiser_kdiag_lacks_is_refused(tmp_path, ps, monkeypatch):
    _with_binary_format(monkeypatch, pseudonymised="a rewriter nobody wrote")
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "c.kdx").write_bytes(b"KDX1\0\0" + BROKER.encode())
    with pytest.raises(PseudonymError, match="kdx"):
        ps.tree(raw)
    assert (raw / "c.kdx").read_bytes().endswith(BROKER.encode())
