"""--pseudonymise covers hostnames in free text: fully qualified names
anywhere, short names the capture names as hosts, cloud names that embed an
address, DNS wire names; one real name, one pseudonym, in every file, with
domains kept as a relation (sos's hostname and domain maps)."""
import json
import subprocess
import sys

import pytest

from conftest import ROOT, bundle_bytes, need
from kdiag.bundle.pseudonym import Pseudonyms
from kdiag.bundle.pseudonym import names

FQDN, SHORT, CLOUD, CLOUD_IP = "brokerA.corp.example.com", "kafka-prod-7", "10-1-2-3.ec2.internal", \
    "ip-10-1-2-3.ec2.internal"
REAL = [FQDN, "corp.example.com", SHORT, CLOUD, CLOUD_IP, "10-1-2-3", "ip-10-1-2-3"]


@pytest.fixture
def ps(tmp_path):
    p = Pseudonyms.load_or_create(tmp_path / "map.json")
    yield p
    p.close()


def test_names_found_in_free_text():
    text = (f"log: connecting to {FQDN} via {CLOUD} and ip-10-1-2-3; rdkafka.log 2.16.0 librdkafka.so.1 "
            "threading.local() self.log.info x_y.example.com socket.nagle.disable orders.v2 localhost").encode()
    assert names.fqdns(text.lower()) == {FQDN.lower(), CLOUD}
    assert names.hosts_named(text) == {"ip-10-1-2-3"}
    assert names.hosts_named(b"bootstrap.servers=kafka-prod-7:9093,SSL://b2.example.com:9093") == \
        {SHORT, "b2.example.com"}
    hosts_read = b'read(3</etc/hosts>, "127.0.0.1\\tlocalhost\\n10.1.2.3\\tkafka-prod-7 brokerA\\n", 99) = 60'
    assert names.hosts_named(hosts_read) >= {SHORT, "brokerA"}
    # not a hosts line: a strace line starts with a pid and a time
    assert not names.hosts_named(b"31675 1795614563.323762 read(3, \"\", 9) = 0\nlocalhost")
    query = (b'sendto(5<UDP:[1]>, "\\22\\4\\1\\0\\0\\1\\0\\0\\0\\0\\0\\0'
             b'\\01010-1-2-3\\3ec2\\10internal\\0\\0\\1\\0\\1", 40')
    assert names.hosts_named(query) == {CLOUD}
    pyc = b'read(3, "\\0d\\0d\\1l\\1Z\\1d\\2x\\0\\0\\1\\0\\1", 99) \\0\\0\\1\\0\\1'
    assert names.hosts_named(pyc) == set()


def test_domain_map_keeps_the_relation(ps):
    host = ps.hostname(FQDN)
    domain = ps.hostname("corp.example.com")
    assert domain.startswith("domain-") and domain.endswith(".invalid")
    assert host.startswith("host-") and host.endswith("." + domain)
    assert ps.hostname("brokerB.corp.example.com").endswith("." + domain)
    assert ps.hostname(SHORT).startswith("host-") and ps.hostname(SHORT).count(".") == 1
    ps.save()
    assert json.loads(ps.path.read_text())["domains"]["corp.example.com"] == domain


def test_short_names_as_tokens_and_dns_wire(ps):
    ps.add_hostnames([SHORT, CLOUD])
    line = (f'%7|1.0|CONNECT|rdkafka#producer-1| [thrd:{SHORT}:9093/bootstrap]: {SHORT}:9093/bootstrap: '
            f'Connect to ipv4#10.9.9.9:9093 failed; {SHORT} down, my{SHORT}x and {SHORT}.local.x stay; '
            'sendto(5, "\\22\\4\\1\\0\\0\\1\\0\\0\\0\\0\\0\\0\\01010-1-2-3\\3ec2\\10internal\\0\\0\\1\\0\\1", 40)')
    out = ps.text(line)
    assert out.count(ps.hostname(SHORT)) == 3 and f"my{SHORT}x" in out and f"{SHORT}.local.x" in out
    assert "10-1-2-3" not in out and "\\3ec2" not in out
    wire = out.split('"')[1]
    name = wire.split("\\0\\0\\0\\0\\0\\0", 1)[1].split("\\0\\0\\1")[0]
    assert names.wire_name(name.encode()) == ps.hostname(CLOUD)


@pytest.mark.e2e
def test_trace_names_no_host_in_any_file(tmp_path):
    """A real traced producer whose brokers have names only: in its config
    (argv), librdkafka's log, /etc/hosts and DNS queries (a private mount
    namespace gives it its own), and a line it prints."""
    need("strace", root=True)
    need("unshare")
    hosts, resolv = tmp_path / "hosts", tmp_path / "resolv.conf"
    hosts.write_text(f"127.0.0.1\tlocalhost\n127.0.0.1\t{FQDN} {SHORT}\n127.0.0.1\t{CLOUD_IP}\n")
    resolv.write_text("nameserver 127.0.0.1\nsearch corp.example.com\noptions timeout:1 attempts:1\n")
    out, map_path = tmp_path / "n.tar.gz", tmp_path / "map" / "hosts.json"
    config = {"bootstrap.servers": ",".join(f"{h}:19093" for h in (FQDN, SHORT, CLOUD, CLOUD_IP))}
    trace = [sys.executable, "-m", "kdiag", "trace", "--tracer", "strace", "--duration", "30", "--pseudonymise",
             str(map_path), "-o", str(out), "--", sys.executable,
             str(ROOT / "tests" / "producers" / "named_brokers.py"), json.dumps(config)]
    script = f'mount --bind {hosts} /etc/hosts && mount --bind {resolv} /etc/resolv.conf && exec "$@"'
    res = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", *trace],
                         capture_output=True, text=True, cwd=ROOT, timeout=240)
    assert out.exists(), res.stderr
    members = bundle_bytes(out)
    strace = members["raw/strace/strace.txt"]
    assert b"/etc/hosts" in strace and b"localhost" in strace, "the resolver's read was captured"
    assert b"\\0\\0\\1\\0\\1" in strace, "a DNS query was captured"
    leaks = [(name, r) for name, data in members.items() for r in REAL if r.lower().encode() in data.lower()]
    assert leaks == []
    pairs = json.loads(map_path.read_text())
    for real in (FQDN.lower(), SHORT, CLOUD, CLOUD_IP):
        assert real in pairs["hostnames"], real
    domain = pairs["domains"]["corp.example.com"]
    assert pairs["hostnames"][FQDN.lower()].endswith("." + domain)
    assert pairs["hostnames"][CLOUD].endswith("." + pairs["domains"]["ec2.internal"])
    # one real name, one pseudonym, in every file that names it
    p = pairs["hostnames"][FQDN.lower()].encode()
    assert all(p in members[f] for f in ("manifest.json", "findings.json", "raw/strace/strace.txt"))
    # what is no host stays: versions, the topic, localhost, file names
    manifest = json.loads(members["manifest.json"])
    assert manifest["versions"]["strace"] and b"orders.v2" in members["raw/rdkafka_log/stderr.log"] + strace
    assert b"2.16.0" in members["raw/rdkafka_log/stderr.log"] + strace and b"localhost" in strace
