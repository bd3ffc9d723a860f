"""A delay line between two network interfaces, in user space.

    python -m kdiag.lab.delayline --a IFACE_A --b IFACE_B --delay-ms D
        [--jitter-ms J] [--loss PCT] [--seed N] [--stats FILE]

Every Ethernet frame that arrives on one interface leaves on the other D ms
later, or is dropped with probability PCT/100. Nothing else touches it: to
the hosts on either side the pair looks like one long cable. The network lab
runs it in a namespace of its own, between the client and the router.

It exists because this kernel has no netem qdisc and cannot load modules, so
`tc qdisc add ... netem delay` is not available. It reads and writes raw
frames with AF_PACKET sockets; the interfaces it bridges (and their peers)
must have GRO, GSO, TSO and TX checksum offload turned off, or the kernel
hands it frames larger than the MTU and checksums left for hardware that
does not exist. A frame it cannot forward whole is counted, never sent cut.

Frames keep their order within a direction, also with jitter: a frame is
never due before the one that arrived ahead of it.

The process blocks in select() when no frame is due and none arrives. On
SIGTERM or SIGINT it drops the frames still in flight and exits 0. The
counters go to --stats as JSON at start, every half second while traffic
flows, and at exit.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import heapq
import json
import os
import random
import select
import signal
import socket
import struct
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1
PACKET_IGNORE_OUTGOING = 23
SO_RCVBUFFORCE = 33
PR_SET_TIMERSLACK = 29

# Larger than any frame a 64 KiB MTU allows, so a frame that does not fit
# is one that offloads glued together.
FRAME_BUFFER = 65536 + 64
RCVBUF_BYTES = 4 << 20
# Frames read from one socket before the other gets a turn and due frames go out.
BURST = 64
STATS_EVERY = 0.5


@dataclass
class Counters:
    received: int = 0
    forwarded: int = 0
    dropped: int = 0
    oversize: int = 0
    send_errors: int = 0
    forwarded_bytes: int = 0
    pending_at_exit: int = 0


@dataclass(frozen=True)
class Config:
    a: str
    b: str
    delay_s: float
    jitter_s: float = 0.0
    loss: float = 0.0
    seed: int | None = None
    stats: Path | None = None


def _open_port(iface: str) -> socket.socket:
    # Protocol 0 until bind(): a packet socket created with ETH_P_ALL would
    # receive every interface's traffic in the moment before it is bound.
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    try:
        try:
            s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF_BYTES)
        except OSError:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF_BYTES)
        # Frames this socket sends must not come back to it as input.
        with contextlib.suppress(OSError):
            s.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        s.bind((iface, ETH_P_ALL))
        # Without promiscuous mode a frame for the far side's MAC address is
        # not this interface's to receive.
        mreq = struct.pack("iHH8s", socket.if_nametoindex(iface), PACKET_MR_PROMISC, 0, b"")
        s.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, mreq)
        s.setblocking(False)
    except OSError as e:
        s.close()
        raise OSError(e.errno, f"cannot open {iface}: {e.strerror}") from None
    except BaseException:
        s.close()
        raise
    return s


def _tight_timers() -> None:
    # The default 50 us timer slack is small next to a millisecond delay,
    # but it adds to every frame; ask for 1 us.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_TIMERSLACK, 1000, 0, 0, 0)


class DelayLine:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.names = (f"{config.a}->{config.b}", f"{config.b}->{config.a}")
        self.counters = (Counters(), Counters())
        # (due, seq, direction, frame); seq keeps equal due times in arrival order.
        self.heap: list[tuple[float, int, int, bytes]] = []
        self.last_due = [0.0, 0.0]
        self.seq = 0
        self.stop_signal: int | None = None
        self.started = time.time()
        self.buf = bytearray(FRAME_BUFFER)
        self.view = memoryview(self.buf)
        self.socks: tuple[socket.socket, socket.socket] | None = None

    # --- stats ---------------------------------------------------------------

    def stats(self) -> dict:
        c = self.config
        return {
            "interfaces": [c.a, c.b],
            "delay_ms": c.delay_s * 1000.0,
            "jitter_ms": c.jitter_s * 1000.0,
            "loss_pct": c.loss * 100.0,
            "seed": c.seed,
            "pid": os.getpid(),
            "started_at": self.started,
            "written_at": time.time(),
            "running": self.stop_signal is None,
            "directions": {name: asdict(cnt) for name, cnt in zip(self.names, self.counters)},
        }

    def write_stats(self) -> None:
        path = self.config.stats
        if path is None:
            return
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        try:
            tmp.write_text(json.dumps(self.stats(), indent=2) + "\n")
            os.replace(tmp, path)
        except OSError as e:
            print(f"delayline: cannot write stats to {path}: {e}", file=sys.stderr)

    # --- forwarding ------------------------------------------------------------

    def _due(self, direction: int, now: float) -> float:
        c = self.config
        delay = c.delay_s
        if c.jitter_s:
            delay = max(0.0, delay + self.rng.uniform(-c.jitter_s, c.jitter_s))
        due = max(now + delay, self.last_due[direction])
        self.last_due[direction] = due
        return due

    def _receive(self, direction: int, now: float) -> None:
        sock = self.socks[direction]
        cnt = self.counters[direction]
        for _ in range(BURST):
            try:
                n, addr = sock.recvfrom_into(self.buf, 0, socket.MSG_TRUNC)
            except (BlockingIOError, InterruptedError):
                return
            if addr[2] == socket.PACKET_OUTGOING:
                continue
            cnt.received += 1
            if n > len(self.buf):
                cnt.oversize += 1
                continue
            if self.config.loss and self.rng.random() < self.config.loss:
                cnt.dropped += 1
                continue
            self.seq += 1
            heapq.heappush(self.heap, (self._due(direction, now), self.seq, direction, bytes(self.view[:n])))

    def _send_due(self, now: float) -> None:
        heap = self.heap
        while heap and heap[0][0] <= now:
            _, _, direction, frame = heapq.heappop(heap)
            cnt = self.counters[direction]
            try:
                self.socks[1 - direction].send(frame)
            except OSError:
                # ENOBUFS, EMSGSIZE, a peer that went away: the frame is lost,
                # as on a real link.
                cnt.send_errors += 1
                continue
            cnt.forwarded += 1
            cnt.forwarded_bytes += len(frame)

    def _on_signal(self, signum, frame) -> None:
        self.stop_signal = signum

    def run(self) -> int:
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        old_wakeup = signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            self.socks = (_open_port(self.config.a), _open_port(self.config.b))
            _tight_timers()
            self.write_stats()
            self._loop(wake_r)
        finally:
            self.counters[0].pending_at_exit = sum(1 for e in self.heap if e[2] == 0)
            self.counters[1].pending_at_exit = sum(1 for e in self.heap if e[2] == 1)
            self.heap.clear()
            if self.stop_signal is None:
                self.stop_signal = 0
            self.write_stats()
            for s in self.socks or ():
                s.close()
            signal.set_wakeup_fd(old_wakeup)
            for s, h in old.items():
                signal.signal(s, h)
            os.close(wake_r)
            os.close(wake_w)
        return 0

    def _loop(self, wake_fd: int) -> None:
        fds = [self.socks[0].fileno(), self.socks[1].fileno(), wake_fd]
        dirty = False
        next_stats = time.monotonic() + STATS_EVERY
        while self.stop_signal is None:
            now = time.monotonic()
            self._send_due(now)
            if dirty and now >= next_stats:
                self.write_stats()
                dirty = False
                next_stats = now + STATS_EVERY
            timeout = None
            if self.heap:
                timeout = max(0.0, self.heap[0][0] - now)
            if dirty:
                until_stats = max(0.0, next_stats - now)
                timeout = until_stats if timeout is None else min(timeout, until_stats)
            readable, _, _ = select.select(fds, [], [], timeout)
            if not readable:
                continue
            now = time.monotonic()
            for fd in readable:
                if fd == wake_fd:
                    with contextlib.suppress(OSError):
                        os.read(wake_fd, 512)
                else:
                    self._receive(0 if fd == fds[0] else 1, now)
                    dirty = True


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m kdiag.lab.delayline",
        description="Forward Ethernet frames between two interfaces after a delay, with optional loss.",
    )
    p.add_argument("--a", required=True, metavar="IFACE_A", help="first interface")
    p.add_argument("--b", required=True, metavar="IFACE_B", help="second interface")
    p.add_argument("--delay-ms", type=float, required=True, help="one-way delay, both directions")
    p.add_argument("--jitter-ms", type=float, default=0.0, help="uniform +/- jitter on the delay (order is kept)")
    p.add_argument("--loss", type=float, default=0.0, metavar="PCT", help="percentage of frames dropped, per direction")
    p.add_argument("--seed", type=int, default=None, help="seed of the loss and jitter RNG")
    p.add_argument("--stats", type=Path, default=None, metavar="FILE", help="write counters here as JSON")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.a == args.b:
        parser.error("--a and --b must name two different interfaces")
    if args.delay_ms < 0 or args.jitter_ms < 0:
        parser.error("--delay-ms and --jitter-ms must not be negative")
    if not 0.0 <= args.loss <= 100.0:
        parser.error("--loss is a percentage between 0 and 100")
    config = Config(
        a=args.a,
        b=args.b,
        delay_s=args.delay_ms / 1000.0,
        jitter_s=args.jitter_ms / 1000.0,
        loss=args.loss / 100.0,
        seed=args.seed,
        stats=args.stats,
    )
    try:
        return DelayLine(config).run()
    except OSError as e:
        print(f"delayline: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
