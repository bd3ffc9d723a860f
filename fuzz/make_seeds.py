"""Rebuild fuzz/seeds/ from real data. Run as root from the repo root:

    python3 -m fuzz.make_seeds

Text seeds are slices of the captures under fixtures/ (one or two lines of
each shape, so every kind of line is there in a few KB). sockets.jsonl is
sampled from a live process here; the tcp_probe seeds are a probe run
across three network namespaces (client -- router -- server, as in
tests/test_tcp_probe.py) so that the packets hold ICMP time-exceeded
answers, SYN-ACKs, RSTs and probes nobody answered, plus a tcpdump capture
of the same path (Ethernet frames) and a pcapng copy written by scapy.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import kdiag
from kdiag.collectors import sockets as c_sockets
from kdiag.collectors import tcp_probe as c_tcp_probe

ROOT = Path(__file__).resolve().parents[1]
SEEDS = ROOT / "fuzz" / "seeds"
FIX = ROOT / "fixtures"

STRACE_SOURCES = {
    "strace_o_ttt.txt": FIX / "captures" / "nagle_on" / "strace.txt",       # -f -o, -ttt -T -yy
    "strace_o_tt.txt": FIX / "captures" / "nagle_on_tt" / "strace.txt",     # -f -o, -tt -T
    "strace_stderr_tt.txt": FIX / "strace" / "sh_fork_stderr.txt",          # [pid N] on stderr, -tt
    "strace_relative.txt": FIX / "strace" / "nofork_relative.txt",          # -r -T
    "strace_seconds.txt": FIX / "strace" / "nofork_seconds.txt",            # -t, no -T
    "strace_threads.txt": FIX / "strace" / "threads_loopback.txt",          # -f -o -ttt, signals, exits
    "strace_stderr_mixed.txt": FIX / "strace" / "nagle_stderr.txt",         # producer stderr inside strace's lines
    "strace_r_threads.txt": FIX / "strace" / "nagle_r.txt",                 # -f -r -T -yy, a librdkafka producer
}
# Client-library wrappings of librdkafka's lines: the first Produce exchange
# (and what precedes it) of each, so every prefix shape is a seed.
CLIENT_LOGS = ("python_asctime_levelname_name", "python_basicconfig", "python_msecs_time_only", "go_logevent",
               "dotnet_consolelogger", "node_rdkafka_inspect", "node_rdkafka_json", "confluent_js_event_log",
               "confluent_js_kafkajs_logger", "librdkafka_v0.11")

_STRACE_SHAPE = re.compile(
    r"^(?:\[pid +\d+\] |\d+ +)?(?: *[\d:.]+ )?(?:\(\+ *[\d.]+\) )?"
    r"(?P<tok><\.\.\. [^ >]*|--- \S+|\+\+\+ \S+|strace:|\S+?\()"
)


def _strace_key(line: str) -> tuple:
    m = _STRACE_SHAPE.match(line)
    tok = m.group("tok") if m else line[:8]
    tail = ("unfinished" if line.endswith("<unfinished ...>") else
            "err" if re.search(r"= -1 E", line) else
            "hex" if re.search(r"= 0x", line) else
            "q" if line.rstrip().endswith("= ?") else "")
    return tok, tail


def _pick(lines: list[str], key, per_key: int, max_len: int, limit: int) -> list[str]:
    seen: dict = {}
    out = []
    for ln in lines:
        if len(ln) > max_len:
            continue
        k = key(ln)
        if seen.get(k, 0) < per_key:
            seen[k] = seen.get(k, 0) + 1
            out.append(ln)
        if len(out) >= limit:
            break
    return out


def text_seeds() -> None:
    for name, src in STRACE_SOURCES.items():
        lines = src.read_text(errors="replace").splitlines()
        picked = _pick(lines, _strace_key, 1, 300, 90)
        (SEEDS / name).write_text("\n".join(picked) + "\n")
    log = (FIX / "captures" / "nagle_on" / "rdkafka.log").read_text(errors="replace").splitlines()

    def rd_key(ln):
        parts = ln.split("|", 4)
        msg = re.sub(r"^ \[thrd:[^\]]*\]: (?:\S+: )?", "", parts[4]) if len(parts) == 5 else ln
        return parts[2] if len(parts) == 5 else "", " ".join(msg.split()[:2])

    (SEEDS / "rdkafka.log").write_text("\n".join(_pick(log, rd_key, 1, 400, 60)) + "\n")
    clients = []
    for name in CLIENT_LOGS:
        lines = (FIX / "logs" / f"{name}.log").read_text(errors="replace").splitlines()
        first = next((i for i, ln in enumerate(lines) if "Received ProduceResponse" in ln), 30)
        clients += lines[max(0, first - 30):first + 6]
    (SEEDS / "rdkafka_clients.log").write_text("\n".join(clients) + "\n")
    stats = [ln for ln in (FIX / "captures" / "nagle_on" / "stats.jsonl").read_text().splitlines() if ln.strip()]
    (SEEDS / "stats.jsonl").write_text("\n".join(stats[:2]) + "\n")


TARGET = r"""
import ctypes, socket, threading, time
libc = ctypes.CDLL(None)
lst = socket.create_server(("127.0.0.1", 0))
fast = socket.create_connection(lst.getsockname())
fast.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
slow = socket.create_connection(lst.getsockname())
peers = [lst.accept()[0], lst.accept()[0]]
def work():
    libc.prctl(15, b"rdk:broker1", 0, 0, 0)
    while True:
        fast.send(b"x" * 100); peers[0].recv(100)
        slow.send(b"y" * 100); slow.send(b"z" * 100); peers[1].recv(200)
        time.sleep(0.01)
threading.Thread(target=work, daemon=True).start()
time.sleep(30)
"""


def sockets_seed(tmp: Path) -> None:
    target = subprocess.Popen([sys.executable, "-c", TARGET])
    try:
        time.sleep(0.5)
        out = tmp / "sockets.jsonl"
        subprocess.run([*kdiag.python_m(c_sockets), "--pid", str(target.pid), "--out", str(out),
                        "--duration", "0.5", "--interval-ms", "200"], check=True, cwd=ROOT,
                       stdout=subprocess.DEVNULL)
    finally:
        target.kill()
        target.wait()
    lines = out.read_text().splitlines()
    keep = [ln for ln in lines if json.loads(ln).get("sample") in (0, 1)]
    (SEEDS / "sockets.jsonl").write_text("\n".join(keep) + "\n")


def sh(*cmd: str, ns: str | None = None) -> None:
    subprocess.run((["ip", "netns", "exec", ns] if ns else []) + list(cmd), check=True,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)


def probe_seeds(tmp: Path) -> None:
    tag = f"{os.getpid() & 0xFFFF:04x}"
    client, router, server = f"kdfc-{tag}", f"kdfr-{tag}", f"kdfs-{tag}"
    listener = dump = None
    try:
        for ns in (client, router, server):
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "set", "lo", "up", ns=ns)
        sh("ip", "link", "add", f"fc{tag}", "netns", client, "type", "veth", "peer", "name", f"fr{tag}",
           "netns", router)
        sh("ip", "link", "add", f"fs{tag}", "netns", server, "type", "veth", "peer", "name", f"fR{tag}",
           "netns", router)
        sh("ip", "addr", "add", "10.203.1.2/24", "dev", f"fc{tag}", ns=client)
        sh("ip", "addr", "add", "10.203.1.1/24", "dev", f"fr{tag}", ns=router)
        sh("ip", "addr", "add", "10.203.2.1/24", "dev", f"fR{tag}", ns=router)
        sh("ip", "addr", "add", "10.203.2.2/24", "dev", f"fs{tag}", ns=server)
        for ns, dev in ((client, f"fc{tag}"), (router, f"fr{tag}"), (router, f"fR{tag}"), (server, f"fs{tag}")):
            sh("ip", "link", "set", dev, "up", ns=ns)
        sh("ip", "route", "add", "default", "via", "10.203.1.1", ns=client)
        sh("ip", "route", "add", "default", "via", "10.203.2.1", ns=server)
        sh("sysctl", "-qw", "net.ipv4.ip_forward=1", ns=router)
        sh("sysctl", "-qw", "net.ipv4.icmp_ratelimit=0", ns=router)
        # 10.203.9.9: routed to the server's link, where nobody answers.
        sh("ip", "route", "add", "10.203.9.0/24", "dev", f"fR{tag}", ns=router)
        sh("ip", "neigh", "add", "10.203.9.9", "lladdr", "02:00:0a:cb:09:09", "dev", f"fR{tag}", "nud",
           "permanent", ns=router)
        listener = subprocess.Popen(
            ["ip", "netns", "exec", server, sys.executable, "-c",
             ("import socket\ns=socket.create_server(('0.0.0.0',9092))\nprint('ok',flush=True)\n"
              "while True: s.accept()[0].close()")],
            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        assert listener.stdout.readline().strip() == "ok"
        cap = tmp / "wire.pcap"
        dump = subprocess.Popen(["ip", "netns", "exec", client, "tcpdump", "-i", f"fc{tag}", "-n",
                                 "--immediate-mode", "-U", "-Z", "root", "-w", str(cap), "tcp or icmp"],
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        assert "listening on" in dump.stderr.readline()
        targets = [["10.203.2.2", 9092, "srv:9092/1"], ["10.203.2.2", 9093, None], ["10.203.9.9", 9092, None]]
        sh(*kdiag.python_m(c_tcp_probe), "--out", str(tmp / "out"), "--targets",
           json.dumps(targets), "--rounds", "2", "--max-ttl", "3", "--timeout", "0.3", "--handshakes", "2",
           ns=client)
        time.sleep(0.2)
    finally:
        if dump is not None:
            dump.terminate()
            dump.wait(timeout=10)
        if listener is not None:
            listener.kill()
            listener.wait()
        for ns in (client, router, server):
            subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL, check=False)
    out = tmp / "out"
    for name in ("probes.pcap", "probes.jsonl", "handshakes.jsonl"):
        (SEEDS / name).write_bytes((out / name).read_bytes())
    (SEEDS / "wire.pcap").write_bytes(cap.read_bytes())

    from scapy.layers.inet6 import IPv46  # noqa: F401  (registers the raw-IP link type)
    from scapy.utils import PcapNgWriter, rdpcap

    w = PcapNgWriter(str(SEEDS / "probes.pcapng"))
    for pkt in rdpcap(str(out / "probes.pcap")):
        w.write(pkt)
    w.close()


def main() -> None:
    SEEDS.mkdir(parents=True, exist_ok=True)
    os.chdir(ROOT)
    text_seeds()
    with tempfile.TemporaryDirectory() as tmp:
        sockets_seed(Path(tmp))
        probe_seeds(Path(tmp))
    for p in sorted(SEEDS.iterdir()):
        print(f"{p.stat().st_size:8d}  {p.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
