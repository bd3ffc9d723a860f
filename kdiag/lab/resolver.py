"""A DNS server for one name that answers every query late: the network
lab's slow resolver.

    python -m kdiag.lab.resolver --listen ADDR --name HOST --address IPV4
        --delay-ms D [--port 53] [--ready FILE]

It answers on UDP, D ms after each query came in, and each query on its own
schedule: glibc sends the A and AAAA questions of one getaddrinfo() back to
back on one socket, and both answers arrive D ms later, so a lookup takes D,
not 2 D. For HOST, an A query gets IPV4; any other type gets no records and
no error (NODATA), which is what glibc expects of an IPv4-only name. Any
other name gets NXDOMAIN, as late. Responses carry AA and RA, so glibc takes
them as final.

What is not a standard query (a response, another opcode, not exactly one
question, bytes scapy cannot read) is counted and dropped, never answered.
A query larger than a UDP DNS message may be (512 bytes without EDNS, 4096
read at most) is cut off by the read and then fails to parse. The queue of
answers not yet due is bounded: beyond MAX_PENDING a query is dropped and
counted, so a flood cannot fill memory.

One line per query goes to stdout (the lab's log): when it came, from whom,
what it asked, and the rcode it will get. The process names itself
PROCESS_NAME, writes --ready once its socket is bound, and exits 0 on
SIGTERM or SIGINT with its counts on the last line.
"""
from __future__ import annotations

import argparse
import contextlib
import heapq
import ipaddress
import json
import select
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from kdiag.lab.own_process import milliseconds, set_name

PROCESS_NAME = "kdiag-resolver"
MAX_QUERY_BYTES = 4096
MAX_PENDING = 10_000
TTL_S = 5
TYPE_A = 1
TYPE_AAAA = 28
RCODE_NXDOMAIN = 3


@dataclass
class Counts:
    queries: int = 0
    answered: int = 0
    malformed: int = 0
    dropped_full: int = 0
    by_type: dict[str, int] = field(default_factory=dict)


def _canonical(name: str | bytes) -> str:
    if isinstance(name, bytes):
        name = name.decode("ascii", "replace")
    return name.rstrip(".").lower()


def answer(query: bytes, name: str, address: str) -> tuple[bytes, str] | None:
    """The response to one query message and a line describing it, or None
    for what is not a standard query with one question."""
    from scapy.layers.dns import DNS, DNSRR, dnstypes

    try:
        q = DNS(query)
        qd = list(q.qd or ())
        if q.qr != 0 or q.opcode != 0 or len(qd) != 1:
            return None
        qname, qtype = _canonical(qd[0].qname), int(qd[0].qtype)
    # scapy raises whatever its dissectors meet (struct.error, IndexError,
    # Scapy_Exception...) on bytes that are not DNS.
    except Exception:
        return None
    ours = qname == _canonical(name)
    record = DNSRR(rrname=qd[0].qname, type="A", ttl=TTL_S, rdata=address) if ours and qtype == TYPE_A else None
    rcode = 0 if ours else RCODE_NXDOMAIN
    # One packet, not a list, for qd and an: scapy before 2.6 took only that.
    reply = DNS(id=q.id, qr=1, opcode=0, aa=1, rd=q.rd, ra=1, rcode=rcode, qd=qd[0],
                **({"an": record} if record is not None else {}))
    what = f"{dnstypes.get(qtype, qtype)} {qname}: " + (
        "NXDOMAIN" if rcode else "1 record" if record is not None else "no records")
    return bytes(reply), what


def serve(sock: socket.socket, name: str, address: str, delay_s: float, counts: Counts,
          stop: list[bool]) -> None:
    """Answer queries on sock, each delay_s after it came, until stop[0]."""
    # Before the first query is read: answer() needs scapy's DNS, and its
    # import (0.2-0.5 s on a loaded machine) would hold the queries behind
    # the first, each answered that much later than delay_s.
    import scapy.layers.dns  # noqa: F401

    pending: list[tuple[float, int, tuple, bytes]] = []
    seq = 0
    while not stop[0]:
        now = time.monotonic()
        while pending and pending[0][0] <= now:
            _, _, peer, reply = heapq.heappop(pending)
            with contextlib.suppress(OSError):
                sock.sendto(reply, peer)
                counts.answered += 1
        timeout = max(0.0, pending[0][0] - now) if pending else 0.5
        try:
            readable, _, _ = select.select([sock], [], [], timeout)
        except InterruptedError:
            continue
        if not readable:
            continue
        try:
            data, peer = sock.recvfrom(MAX_QUERY_BYTES)
        except OSError:
            continue
        came = time.monotonic()
        counts.queries += 1
        made = answer(data, name, address)
        if made is None:
            counts.malformed += 1
            print(f"{time.time():.6f} from {peer[0]}:{peer[1]}: not a standard query ({len(data)} bytes), dropped",
                  flush=True)
            continue
        if len(pending) >= MAX_PENDING:
            counts.dropped_full += 1
            continue
        reply, what = made
        kind = what.split(" ", 1)[0]
        counts.by_type[kind] = counts.by_type.get(kind, 0) + 1
        print(f"{time.time():.6f} from {peer[0]}:{peer[1]}: {what}, answered in {delay_s * 1000:g} ms", flush=True)
        seq += 1
        heapq.heappush(pending, (came + delay_s, seq, peer, reply))


def _ipv4(text: str) -> str:
    try:
        return str(ipaddress.IPv4Address(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an IPv4 address: {text!r}") from None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kdiag.lab.resolver", description=__doc__.split("\n", 1)[0])
    ap.add_argument("--listen", type=_ipv4, required=True)
    ap.add_argument("--port", type=int, default=53)
    ap.add_argument("--name", required=True)
    ap.add_argument("--address", type=_ipv4, required=True)
    ap.add_argument("--delay-ms", type=milliseconds, required=True)
    ap.add_argument("--ready", type=Path)
    args = ap.parse_args(argv)
    set_name(PROCESS_NAME)
    # scapy's import takes a second: done before the socket is announced,
    # so the first query does not pay for it.
    import scapy.layers.dns  # noqa: F401

    stop = [False]

    def on_signal(signum, frame) -> None:
        stop[0] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    counts = Counts()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind((args.listen, args.port))
        print(f"{time.time():.6f} answering {args.name} = {args.address} on {args.listen}:{args.port} "
              f"after {args.delay_ms:g} ms", flush=True)
        if args.ready is not None:
            args.ready.write_text("ready\n")
        serve(sock, args.name, args.address, args.delay_ms / 1000.0, counts, stop)
    print(json.dumps({"counts": vars(counts)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
