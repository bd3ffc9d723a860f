"""TCP path probes to the brokers, to raw/tcp_probe/.

What the path to each broker looks like, hop by hop, and how long a TCP
handshake takes on it. SYN probes carry no data, so they never show a Nagle
stall: a fast path beside a 40 ms request wait is itself evidence.

Per target, two measurements:

1. Path probes, ``traceroute -T`` style: TCP SYNs to the broker's port with
   TTL 1, 2, ... ``max_ttl``, ``rounds`` probes per TTL, one every
   ``pace_ms`` (a router's ICMP rate limit would otherwise eat hops). It
   stops after the first TTL the target answers (SYN-ACK or RST) or that
   meets an ICMP unreachable. Two methods:

   ``syn``      with CAP_NET_RAW: SYNs built with scapy, sent on a raw
                socket, answers read from raw TCP and ICMP sockets with
                kernel receive timestamps. One source port per target for all
                its probes, so a load-balanced path hashes every probe the
                same way; the port is held by a bound, never-listening socket,
                so the kernel answers a SYN-ACK with RST, and the prober sends
                its own RST as well: no half-open connection stays on the
                target. Every packet sent and every answer goes to
                ``probes.pcap`` (nanosecond pcap, raw IPv4 link type).
   ``connect``  without CAP_NET_RAW: a non-blocking connect() per probe with
                IP_TTL set and IP_RECVERR on; the ICMP error the router sends
                back is read from the socket's error queue (MSG_ERRQUEUE,
                struct sock_extended_err followed by the offender's address).
                An open port completes a real handshake, closed at once with
                RST (SO_LINGER 0). No packets are captured.

   Either way ``probes.jsonl`` holds the per-probe results as measured live.

2. Handshakes: ``handshakes`` plain blocking connect()s, each timed and then
   closed, to ``handshakes.jsonl``. After a timeout the rest are skipped:
   a dead target costs one timeout, not ``handshakes`` of them.

Time bound per target: about rounds * max_ttl * pace_ms + timeout_s for the
probes (the last probe gets ``timeout_s`` to be answered), plus up to one
``timeout_s`` for handshakes.

Only IPv4 targets are probed; a host name is resolved to its first IPv4
address and the tables name the address.

Command line (the last stdout line is the status as JSON)::

    python -m kdiag.collectors.tcp_probe --out DIR --targets '[["10.0.0.5", 9092, "b:9092/1"]]'
"""
from __future__ import annotations

import argparse
import ctypes
import errno
import json
import math
import select
import socket
import struct
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from kdiag.collectors.base import CollectorStatus, Requirement
import kdiag
from kdiag.parsers.tcp_probe import (
    FINAL_ANSWERS, ICMP_TIME_EXCEEDED, TCP_ACK, TCP_RST, TCP_SYN, Packet, dissect_ipv4,
    probe_seq,
)

NAME = "tcp_probe"
# Nothing is a hard need: without root the connect() method runs instead.
REQUIRES: tuple[Requirement, ...] = ()
PREFERS = (Requirement(root=True, why="CAP_NET_RAW for SYN probes and their packet capture; "
                                      "without it, connect() probes with IP_TTL"),)
FILES = ("probes.pcap", "probes.jsonl", "handshakes.jsonl")

# Linux values Python's socket module does not export.
IP_RECVERR = 11
SO_TIMESTAMPNS = 35
SO_ATTACH_FILTER = 26
SO_EE_ORIGIN_LOCAL, SO_EE_ORIGIN_ICMP = 1, 2
_EXT_ERR = struct.Struct("=IBBBBII")    # struct sock_extended_err
_TIMESPEC = struct.Struct("=qq")
_CMSG_SPACE = socket.CMSG_SPACE(_EXT_ERR.size + 16) + socket.CMSG_SPACE(_TIMESPEC.size)

LINKTYPE_RAW = 101


@dataclass(frozen=True)
class Target:
    host: str
    port: int
    broker: str | None = None   # librdkafka's broker name, if known


class _Probe:
    __slots__ = ("ttl", "rnd", "sent_ns", "answer", "responder", "recv_ns", "sock")

    def __init__(self, ttl: int, rnd: int, sent_ns: int) -> None:
        self.ttl, self.rnd, self.sent_ns = ttl, rnd, sent_ns
        self.answer: str | None = None
        self.responder: str | None = None
        self.recv_ns: int | None = None
        self.sock: socket.socket | None = None

    def answered(self, answer: str, responder: str | None, recv_ns: int) -> None:
        if self.answer is None:
            self.answer, self.responder, self.recv_ns = answer, responder, recv_ns

    def row(self, target: Target, addr: str, method: str) -> dict:
        got = self.answer is not None
        return {
            "target_host": addr, "target_port": target.port, "broker": target.broker,
            "ttl": self.ttl, "round": self.rnd, "sent_us": self.sent_ns // 1000,
            "responder": self.responder if got else None, "answer": self.answer or "none",
            "rtt_ms": (self.recv_ns - self.sent_ns) / 1e6 if got else None, "method": method,
        }


class _PcapWriter:
    """Classic pcap, nanosecond timestamps, packets starting at the IP header."""

    def __init__(self, path: Path) -> None:
        self.f = open(path, "wb")
        self.f.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, LINKTYPE_RAW))

    def write(self, ts_ns: int, pkt: bytes) -> None:
        sec, ns = divmod(ts_ns, 1_000_000_000)
        self.f.write(struct.pack("<IIII", sec, ns, len(pkt), len(pkt)) + pkt)

    def close(self) -> None:
        self.f.close()


def _recv_ts(ancdata) -> int | None:
    for level, typ, data in ancdata:
        if level == socket.SOL_SOCKET and typ == SO_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            sec, ns = _TIMESPEC.unpack_from(data)
            return sec * 1_000_000_000 + ns
    return None


def _bpf(sock: socket.socket, insns: list[tuple[int, int, int, int]]) -> None:
    """Attach a classic BPF filter: the kernel then queues only our answers,
    not every TCP segment and ICMP message the host receives."""
    prog = b"".join(struct.pack("=HBBI", *i) for i in insns)
    buf = ctypes.create_string_buffer(prog)
    fprog = struct.pack("=HxxxxxxQ", len(insns), ctypes.addressof(buf))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)


def _ip_u32(addr: str) -> int:
    return struct.unpack("!I", socket.inet_aton(addr))[0]


# Classic BPF opcodes used below (linux/filter.h).
_LD_W_ABS, _LD_H_IND, _LD_B_IND, _LD_W_IND, _LDX_B_MSH = 0x20, 0x48, 0x50, 0x40, 0xB1
_JEQ_K, _RET_K = 0x15, 0x06


class _SynProber:
    """SYN probes on raw sockets; answers matched by the tagged sequence number."""

    method = "syn"

    def __init__(self, addr: str, port: int, pcap: _PcapWriter) -> None:
        from scapy.layers.inet import IP, TCP

        self._IP, self._TCP = IP, TCP
        self.addr, self.port, self.pcap = addr, port, pcap
        self.socks: list[socket.socket] = []
        try:
            self._open()
        except BaseException:
            self.close()
            raise
        self.by_seq: dict[int, _Probe] = {}

    def _open(self) -> None:
        addr, port = self.addr, self.port
        # The source address the kernel would pick; the TCP checksum covers it.
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            u.connect((addr, port))
            self.src = u.getsockname()[0]
        self.hold = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.socks.append(self.hold)
        self.hold.bind((self.src, 0))
        self.sport = self.hold.getsockname()[1]
        self.tx = self._raw(socket.IPPROTO_RAW)
        self.rx_tcp = self._raw(socket.IPPROTO_TCP)
        self.rx_icmp = self._raw(socket.IPPROTO_ICMP)
        a = _ip_u32(addr)
        _bpf(self.rx_tcp, [
            (_LD_W_ABS, 0, 0, 12), (_JEQ_K, 0, 6, a),              # ip src == target
            (_LDX_B_MSH, 0, 0, 0),                                  # x = ip header length
            (_LD_H_IND, 0, 0, 0), (_JEQ_K, 0, 3, port),             # tcp sport == port
            (_LD_H_IND, 0, 0, 2), (_JEQ_K, 0, 1, self.sport),       # tcp dport == ours
            (_RET_K, 0, 0, 0xFFFF), (_RET_K, 0, 0, 0),
        ])
        _bpf(self.rx_icmp, [
            (_LDX_B_MSH, 0, 0, 0),
            (_LD_B_IND, 0, 0, 0), (_JEQ_K, 1, 0, ICMP_TIME_EXCEEDED), (_JEQ_K, 0, 3, 3),  # type 11 or 3
            (_LD_W_IND, 0, 0, 8 + 16), (_JEQ_K, 0, 1, a),          # quoted ip dst == target
            (_RET_K, 0, 0, 0xFFFF), (_RET_K, 0, 0, 0),
        ])
        # Whatever arrived before the filters were attached.
        for s in (self.rx_tcp, self.rx_icmp):
            while True:
                try:
                    s.recv(65535)
                except BlockingIOError:
                    break
        self.poller = select.poll()
        for s in (self.rx_tcp, self.rx_icmp):
            self.poller.register(s, select.POLLIN)

    def _raw(self, proto: int) -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_RAW, proto)
        self.socks.append(s)
        s.setblocking(False)
        if proto != socket.IPPROTO_RAW:
            s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        return s

    def _send(self, pkt: bytes) -> tuple[int, OSError | None]:
        ts = time.time_ns()
        try:
            self.tx.sendto(pkt, (self.addr, 0))
        except OSError as e:
            return ts, e   # never left: not in the capture
        self.pcap.write(ts, pkt)
        return ts, None

    def send(self, ttl: int, rnd: int) -> _Probe:
        seq = probe_seq(ttl, rnd)
        pkt = bytes(self._IP(src=self.src, dst=self.addr, ttl=ttl, flags="DF")
                    / self._TCP(sport=self.sport, dport=self.port, flags="S", seq=seq, window=64240,
                                options=[("MSS", 1460)]))
        ts, err = self._send(pkt)
        p = _Probe(ttl, rnd, ts)
        if err is not None and err.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EINVAL):
            p.answered("unreachable", None, ts)   # no route here
        self.by_seq[seq] = p
        return p

    def poll(self, wait_s: float) -> None:
        if not self.poller.poll(max(0, math.ceil(wait_s * 1000))):
            return
        for s in (self.rx_tcp, self.rx_icmp):
            while True:
                try:
                    data, anc, _flags, _addr = s.recvmsg(65535, _CMSG_SPACE)
                except BlockingIOError:
                    break
                self._answer(data, _recv_ts(anc) or time.time_ns())

    def _answer(self, data: bytes, ts: int) -> None:
        pkt = dissect_ipv4(data)
        if not isinstance(pkt, Packet):
            return
        if pkt.proto == 1:
            _qsrc, qdst, qsport, qdport, qseq = pkt.quoted
            if (qdst, qsport, qdport) != (self.addr, self.sport, self.port) or qseq not in self.by_seq:
                return
            self.pcap.write(ts, data)
            self.by_seq[qseq].answered(
                "time_exceeded" if pkt.icmp_type == ICMP_TIME_EXCEEDED else "unreachable", pkt.src, ts)
            return
        seq = (pkt.ack - 1) & 0xFFFFFFFF
        if (pkt.src, pkt.sport, pkt.dport) != (self.addr, self.port, self.sport) or seq not in self.by_seq \
                or not pkt.flags & TCP_ACK or not pkt.flags & (TCP_SYN | TCP_RST):
            return
        self.pcap.write(ts, data)
        if pkt.flags & TCP_SYN:
            self.by_seq[seq].answered("open", pkt.src, ts)
            self._send(bytes(self._IP(src=self.src, dst=self.addr, flags="DF")
                             / self._TCP(sport=self.sport, dport=self.port, flags="R", seq=pkt.ack, window=0)))
        else:
            self.by_seq[seq].answered("closed", pkt.src, ts)

    def close(self) -> None:
        for s in self.socks:
            s.close()


class _ConnectProber:
    """Unprivileged probes: one non-blocking connect() per probe."""

    method = "connect"

    def __init__(self, addr: str, port: int) -> None:
        self.addr, self.port = addr, port
        self.poller = select.poll()
        self.pending: dict[int, _Probe] = {}

    def send(self, ttl: int, rnd: int) -> _Probe:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, ttl)
        s.setsockopt(socket.IPPROTO_IP, IP_RECVERR, 1)
        s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        # Close with RST: an open port must not keep our connection.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.setblocking(False)
        p = _Probe(ttl, rnd, time.time_ns())
        p.sock = s
        err = s.connect_ex((self.addr, self.port))
        if err in (errno.EINPROGRESS, 0):
            self.pending[s.fileno()] = p
            self.poller.register(s, select.POLLOUT | select.POLLERR)
        else:
            self._finish(p, err, time.time_ns())
        return p

    def poll(self, wait_s: float) -> None:
        for fd, _ev in self.poller.poll(max(0, math.ceil(wait_s * 1000))):
            p = self.pending.pop(fd)
            self.poller.unregister(fd)
            now = time.time_ns()
            if not self._icmp(p):
                self._finish(p, p.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR), now)
            else:
                self._close(p)

    def _icmp(self, p: _Probe) -> bool:
        """The ICMP error in the socket's error queue, if one came back."""
        try:
            _data, anc, _flags, _addr = p.sock.recvmsg(512, _CMSG_SPACE, socket.MSG_ERRQUEUE)
        except OSError:
            return False
        ts = _recv_ts(anc) or time.time_ns()
        for level, typ, data in anc:
            if level != socket.IPPROTO_IP or typ != IP_RECVERR or len(data) < _EXT_ERR.size:
                continue
            _errno, origin, ee_type, _code, _pad, _info, _data2 = _EXT_ERR.unpack_from(data)
            # SO_EE_OFFENDER: a sockaddr_in right after the struct.
            off = data[_EXT_ERR.size:_EXT_ERR.size + 16]
            who = socket.inet_ntoa(off[4:8]) if len(off) >= 8 and off[:2] == struct.pack("=H", socket.AF_INET) else None
            if origin == SO_EE_ORIGIN_ICMP:
                p.answered("time_exceeded" if ee_type == ICMP_TIME_EXCEEDED else "unreachable", who, ts)
            else:
                p.answered("unreachable", who, ts)
            return True
        return False

    def _finish(self, p: _Probe, err: int, now: int) -> None:
        if err == 0:
            p.answered("open", self.addr, now)
        elif err == errno.ECONNREFUSED:
            p.answered("closed", self.addr, now)
        elif err in (errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EACCES, errno.EPERM):
            p.answered("unreachable", None, now)
        self._close(p)

    def _close(self, p: _Probe) -> None:
        if p.sock is not None:
            p.sock.close()
            p.sock = None

    def close(self) -> None:
        for p in self.pending.values():
            self._close(p)
        self.pending.clear()


def _sweep(prober, rounds: int, max_ttl: int, pace_s: float, timeout_s: float) -> list[_Probe]:
    """TTL by TTL, ``rounds`` probes each, one every ``pace_s``; answers are
    read while waiting for the next send, so the pace bounds the time."""
    probes: list[_Probe] = []

    def pump(until: float) -> None:
        while (left := until - time.monotonic()) > 0:
            prober.poll(left)

    next_at = time.monotonic()
    last_sent = next_at
    for ttl in range(1, max_ttl + 1):
        for rnd in range(1, rounds + 1):
            pump(next_at)
            probes.append(prober.send(ttl, rnd))
            last_sent = time.monotonic()
            next_at = last_sent + pace_s
        pump(next_at)
        if any(p.answer in FINAL_ANSWERS for p in probes):
            break
    deadline = last_sent + timeout_s
    while any(p.answer is None for p in probes) and time.monotonic() < deadline:
        prober.poll(deadline - time.monotonic())
    return probes


def _raw_unavailable() -> str | None:
    """Why SYN probes cannot run here, or None."""
    try:
        socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW).close()
    except OSError as e:
        return f"no raw socket ({e.strerror or e})"
    try:
        import scapy.layers.inet  # noqa: F401
    except Exception as e:  # scapy can fail on import in odd environments
        return f"scapy unusable ({type(e).__name__}: {e})"
    return None


def _resolve(host: str, port: int) -> str:
    infos = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)
    return infos[0][4][0]


def _handshakes(target: Target, addr: str, n: int, timeout_s: float, out) -> None:
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(timeout_s)
        ts = time.time_ns()
        t0 = time.perf_counter_ns()
        error, rtt = None, None
        try:
            s.connect((addr, target.port))
            rtt = (time.perf_counter_ns() - t0) / 1e6
        except TimeoutError:
            error = "timeout"
        except OSError as e:
            error = errno.errorcode.get(e.errno, str(e)) if e.errno else str(e)
        finally:
            s.close()
        out.write(json.dumps({
            "target": f"{addr}:{target.port}", "target_host": addr, "target_port": target.port,
            "broker": target.broker, "ts_us": ts // 1000, "rtt_ms": rtt, "error": error,
        }) + "\n")
        if error == "timeout":
            break


def probe(targets: list[Target], out_dir: Path, *, rounds: int = 3, max_ttl: int = 16, pace_ms: float = 50.0,
          timeout_s: float = 1.0, handshakes: int = 5, method: str = "auto") -> CollectorStatus:
    """Probe every target's path and time its handshakes into ``out_dir``.
    ``method``: ``auto`` (SYN probes when a raw socket opens, else
    connect()), ``syn`` or ``connect`` to force one."""
    if not 1 <= rounds <= 255 or not 1 <= max_ttl <= 255:
        raise ValueError("rounds and max_ttl must be within 1..255")
    if method not in ("auto", "syn", "connect"):
        raise ValueError(f"method {method!r}: auto, syn or connect")
    status = CollectorStatus(NAME, started_us=time.time_ns() // 1000)
    status.command = [*kdiag.python_m(sys.modules[__name__]), "--out", str(out_dir),
                      "--rounds", str(rounds), "--max-ttl", str(max_ttl), "--pace-ms", str(pace_ms),
                      "--timeout", str(timeout_s), "--handshakes", str(handshakes), "--method", method]
    seen, uniq = set(), []
    for t in targets:
        if (t.host, t.port) not in seen:
            seen.add((t.host, t.port))
            uniq.append(t)
    if not uniq:
        status.state, status.reason = "skipped", "no targets"
        status.ended_us = time.time_ns() // 1000
        return status

    notes: list[str] = []
    use = method
    if method in ("auto", "syn"):
        why = _raw_unavailable()
        if why and method == "syn":
            status.state, status.reason = "failed", f"SYN probes asked for, but {why}"
            status.ended_us = time.time_ns() // 1000
            return status
        use = "connect" if why else "syn"
        if why:
            notes.append(f"{why}: used connect() with IP_TTL and IP_RECVERR (method connect, no packets captured)")
    if use == "syn":
        import scapy

        status.version = f"scapy {scapy.VERSION}"

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if use != "syn":
        # A capture left by an earlier run would be read instead of this one's results.
        (out_dir / "probes.pcap").unlink(missing_ok=True)
    pcap = _PcapWriter(out_dir / "probes.pcap") if use == "syn" else None
    failed = 0
    try:
        with open(out_dir / "probes.jsonl", "w") as pj, open(out_dir / "handshakes.jsonl", "w") as hj:
            for t in uniq:
                try:
                    addr = _resolve(t.host, t.port)
                except OSError as e:
                    failed += 1
                    notes.append(f"{t.host}:{t.port}: no IPv4 address ({e.strerror or e})")
                    continue
                try:
                    prober = _SynProber(addr, t.port, pcap) if use == "syn" else _ConnectProber(addr, t.port)
                except OSError as e:
                    failed += 1
                    notes.append(f"{t.host}:{t.port}: cannot probe ({e.strerror or e})")
                    continue
                try:
                    probes = _sweep(prober, rounds, max_ttl, pace_ms / 1000.0, timeout_s)
                finally:
                    prober.close()
                for p in probes:
                    pj.write(json.dumps(p.row(t, addr, use)) + "\n")
                if not any(p.answer in ("open", "closed") for p in probes):
                    notes.append(f"{t.host}:{t.port}: not reached within {max_ttl} hops")
                _handshakes(t, addr, handshakes, timeout_s, hj)
    finally:
        if pcap is not None:
            pcap.close()

    status.files = [str(out_dir / f) for f in FILES if (out_dir / f).exists()]
    status.bytes = sum(Path(f).stat().st_size for f in status.files)
    status.state = "ok" if not failed else ("failed" if failed == len(uniq) else "partial")
    status.reason = "; ".join(notes) or None
    status.ended_us = time.time_ns() // 1000
    return status


def _targets_arg(text: str) -> list[Target]:
    out = []
    for t in json.loads(text):
        if isinstance(t, dict):
            out.append(Target(str(t["host"]), int(t["port"]), t.get("broker")))
        else:
            out.append(Target(str(t[0]), int(t[1]), t[2] if len(t) > 2 else None))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kdiag.collectors.tcp_probe", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--targets", required=True, help='JSON: [["host", port, "broker" or null], ...]')
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-ttl", type=int, default=16)
    ap.add_argument("--pace-ms", type=float, default=50.0)
    ap.add_argument("--timeout", type=float, default=1.0)
    ap.add_argument("--handshakes", type=int, default=5)
    ap.add_argument("--method", choices=("auto", "syn", "connect"), default="auto")
    a = ap.parse_args(argv)
    try:
        targets = _targets_arg(a.targets)
    except (ValueError, KeyError, IndexError, TypeError) as e:
        ap.error(f"--targets: {e}")
    st = probe(targets, a.out, rounds=a.rounds, max_ttl=a.max_ttl, pace_ms=a.pace_ms,
               timeout_s=a.timeout, handshakes=a.handshakes, method=a.method)
    print(json.dumps(st.to_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
