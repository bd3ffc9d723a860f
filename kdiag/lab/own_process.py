"""What the lab's own small processes (the slow proxy, the relay, the
resolver) share: their command-line arguments' types, the name each gives
itself, by which the lab recognises it (with its start time) before it
signals a recorded pid ("python3" would match any interpreter), and the
two TCP relays' stream helpers."""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import socket

PR_SET_NAME = 15
# Delays and outages: under an hour.
MAX_MS = 3_600_000


def host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def milliseconds(text: str) -> float:
    try:
        ms = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= ms < MAX_MS:
        raise argparse.ArgumentTypeError(f"out of range: {text!r}")
    return ms


def set_name(name: str) -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NAME, name.encode(), 0, 0, 0)


def nodelay(writer) -> None:
    """TCP_NODELAY on an asyncio stream's socket: a relay adds no Nagle hop
    of its own."""
    sock = writer.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


async def forward(reader, writer, chunk: int) -> None:
    """Copy one direction of a connection until its end, then pass the end on."""
    while data := await reader.read(chunk):
        writer.write(data)
        await writer.drain()
    with contextlib.suppress(OSError):
        if writer.can_write_eof():
            writer.write_eof()
