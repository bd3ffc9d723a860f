"""A TCP relay in front of the lab's TLS terminator that makes connection
faults: a late first flight from the server, or nothing listening.

    python -m kdiag.lab.relay --listen HOST:PORT --connect HOST:PORT
        [--first-flight-delay-ms D] [--outage-ms O]

Each accepted connection gets its own connection to --connect, and bytes
pass both ways at once. The faults begin on SIGUSR1, which the lab sends
when it hands its target to a run, so that the lab's own readiness checks
and topic creation are not slowed and the run meets the fault from its
start:

- with D, on every connection accepted from then on, the server's first
  flight (the first bytes it sends: for TLS, ServerHello to Finished) is
  held: whatever the server sends in the D ms after its first byte reaches
  the client at once when they are up; the rest of the connection passes
  untouched. The client can send nothing the server answers before it has
  that flight, so the held bytes are the handshake's and only its time
  grows.
- with O, the relay drops its connections and closes its listening socket
  for O ms: a client's connect() meets a closed port (ECONNREFUSED), as
  with a broker that is down; then it listens again on the same port.

Both of its sockets have TCP_NODELAY. On SIGTERM or SIGINT it drops its
connections and exits 0.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import time

from kdiag import __version__
from kdiag.lab.own_process import forward, host_port, milliseconds, nodelay, set_name
from kdiag.lab.variants import RELAY

PROCESS_NAME = RELAY
CHUNK = 65536
# A server's first flight is a few kilobytes; past this the relay stops
# reading until the hold is over, so a server cannot fill its memory.
MAX_HELD = 1 << 20
# The port may still be held by a connection in TIME_WAIT or taken for a
# moment; listening again is retried this long.
REBIND_S = 5.0


def _say(text: str) -> None:
    print(f"relay: {time.time():.3f} {text}", file=sys.stderr, flush=True)


async def _held_first(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, hold_s: float, peer) -> None:
    """Server to client: everything read in the hold_s after the server's
    first byte goes out at once when the hold is over; then a plain pipe."""
    loop = asyncio.get_running_loop()
    first = await reader.read(CHUNK)
    if not first:
        with contextlib.suppress(OSError):
            writer.write_eof()
        return
    due = loop.time() + hold_s
    held, size, ended = [first], len(first), False
    while (left := due - loop.time()) > 0:
        if size >= MAX_HELD:
            await asyncio.sleep(left)
            break
        try:
            # A read cancelled by the timeout loses nothing: StreamReader
            # hands over bytes only when it returns.
            more = await asyncio.wait_for(reader.read(CHUNK), left)
        except asyncio.TimeoutError:
            break
        if not more:
            ended = True
            await asyncio.sleep(max(0.0, due - loop.time()))
            break
        held.append(more)
        size += len(more)
    writer.write(b"".join(held))
    await writer.drain()
    _say(f"{peer}: held the server's first {size} bytes for {hold_s * 1000:g} ms")
    if ended:
        with contextlib.suppress(OSError):
            writer.write_eof()
        return
    await forward(reader, writer, CHUNK)


async def _together(*coros) -> None:
    """Run the coroutines until all have finished or one has failed."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class Relay:
    def __init__(self, listen: tuple[str, int], upstream: tuple[str, int], first_flight_ms: float | None,
                 outage_ms: float | None) -> None:
        self.listen = listen
        self.upstream = upstream
        self.first_flight_s = None if first_flight_ms is None else first_flight_ms / 1000.0
        self.outage_s = None if outage_ms is None else outage_ms / 1000.0
        self.armed = False
        self.server: asyncio.AbstractServer | None = None
        self.sessions: set[asyncio.Task] = set()
        self.closing = False

    async def handle(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self.sessions.add(task)
        hold = self.first_flight_s if self.armed else None
        peer = c_writer.get_extra_info("peername")
        s_writer = None
        try:
            nodelay(c_writer)
            try:
                s_reader, s_writer = await asyncio.open_connection(*self.upstream)
            except OSError as e:
                _say(f"{peer} -> {self.upstream[0]}:{self.upstream[1]}: {e}")
                return
            nodelay(s_writer)
            back = forward(s_reader, c_writer, CHUNK) if hold is None else _held_first(s_reader, c_writer, hold, peer)
            await _together(forward(c_reader, s_writer, CHUNK), back)
        except OSError:
            pass
        except asyncio.CancelledError:
            if not self.closing:
                raise
        finally:
            for w in (c_writer, s_writer):
                if w is not None:
                    w.close()
            self.sessions.discard(task)

    async def start(self) -> None:
        deadline = time.monotonic() + REBIND_S
        while True:
            try:
                self.server = await asyncio.start_server(self.handle, *self.listen, reuse_address=True)
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)

    async def drop(self) -> None:
        """Close the listening socket and every connection."""
        if self.server is not None:
            self.server.close()
            self.server = None
        self.closing = True
        for task in list(self.sessions):
            task.cancel()
        await asyncio.gather(*self.sessions, return_exceptions=True)
        self.closing = False

    async def outage(self) -> None:
        await self.drop()
        _say(f"down: nothing listens on {self.listen[0]}:{self.listen[1]} for {self.outage_s * 1000:g} ms")
        await asyncio.sleep(self.outage_s)
        await self.start()
        _say(f"up: listening again on {self.listen[0]}:{self.listen[1]}")

    def arm(self) -> list:
        """The faults begin; what to run for them."""
        if self.armed:
            return []
        self.armed = True
        _say("armed" + (f": first flights held {self.first_flight_s * 1000:g} ms" if self.first_flight_s else ""))
        return [self.outage()] if self.outage_s is not None else []


async def serve(listen: tuple[str, int], upstream: tuple[str, int], first_flight_ms: float | None,
                outage_ms: float | None) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    relay = Relay(listen, upstream, first_flight_ms, outage_ms)
    background: set[asyncio.Task] = set()

    def arm() -> None:
        for coro in relay.arm():
            task = asyncio.ensure_future(coro)
            background.add(task)
            task.add_done_callback(background.discard)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # Installed before the port opens: the lab sends it only to a relay
    # that accepts, and SIGUSR1's default action would kill the relay.
    loop.add_signal_handler(signal.SIGUSR1, arm)
    await relay.start()
    _say(f"listening on {listen[0]}:{listen[1]}, forwarding to {upstream[0]}:{upstream[1]}")
    try:
        await stop.wait()
    finally:
        for task in list(background):
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        await relay.drop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kdiag.lab.relay", description=__doc__.split("\n\n")[0])
    ap.add_argument("--listen", type=host_port, required=True, metavar="HOST:PORT")
    ap.add_argument("--connect", type=host_port, required=True, metavar="HOST:PORT")
    ap.add_argument("--first-flight-delay-ms", type=milliseconds, metavar="D",
                    help="once armed (SIGUSR1), hold the server's first flight on each new connection D ms")
    ap.add_argument("--outage-ms", type=milliseconds, metavar="O",
                    help="once armed (SIGUSR1), refuse connections for O ms, then listen again")
    ap.add_argument("--version", action="version", version=f"{PROCESS_NAME} {__version__}")
    args = ap.parse_args(argv)
    set_name(PROCESS_NAME)
    try:
        asyncio.run(serve(args.listen, args.connect, args.first_flight_delay_ms, args.outage_ms))
    except OSError as e:
        _say(str(e))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
