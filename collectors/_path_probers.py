"""The two ways ``kdiag.collectors.tcp_probe`` sends its path probes: SYNs
on a raw socket (``SynProber``) or connect() with IP_TTL (``ConnectProber``),
and the sweep over TTLs both share."""
from __future__ import annotations

import ctypes
import errno
import math
import select
import socket
import struct
import time
from dataclasses import dataclass

from kdiag.deadline import Deadline
from kdiag.parsers.pcap import PcapWriter
from kdiag.parsers.tcp_probe import (
    FINAL_ANSWERS,
    ICMP_TIME_EXCEEDED,
    TCP_ACK,
    TCP_RST,
    TCP_SYN,
    Packet,
    dissect_ipv4,
    probe_seq,
)

# Linux values Python's socket module does not export.
IP_RECVERR = 11
SO_TIMESTAMPNS = 35
SO_ATTACH_FILTER = 26
SO_EE_ORIGIN_LOCAL, SO_EE_ORIGIN_ICMP = 1, 2
_EXT_ERR = struct.Struct("=IBBBBII")    # struct sock_extended_err
_TIMESPEC = struct.Struct("=qq")
_CMSG_SPACE = socket.CMSG_SPACE(_EXT_ERR.size + 16) + socket.CMSG_SPACE(_TIMESPEC.size)


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


class SynProber:
    """SYN probes on raw sockets; answers matched by the tagged sequence number."""

    method = "syn"

    def __init__(self, addr: str, port: int, pcap: PcapWriter) -> None:
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


class ConnectProber:
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


def sweep_ttls(prober, rounds: int, max_ttl: int, pace_s: float, timeout_s: float) -> list[_Probe]:
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
    deadline = Deadline(timeout_s, start=last_sent)
    while any(p.answer is None for p in probes) and not deadline.expired():
        prober.poll(deadline.remaining_s())
    return probes
