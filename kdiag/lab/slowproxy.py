"""A TCP proxy that holds back every byte the server sends, or throttles
Kafka producers as a broker's produce quota would.

    python -m kdiag.lab.slowproxy --listen HOST:PORT --connect HOST:PORT
        [--response-delay-ms D] [--quota-bytes-per-s Q]

Each accepted connection gets its own connection to --connect. Bytes from
the client go on to the server at once; bytes from the server reach the
client D ms (default 50) after the proxy read them, in the order they came.
Placed in front of a broker it makes a slow broker on a fast path: a TCP
handshake with the proxy takes microseconds, but every response is late.

With --quota-bytes-per-s the proxy reads Kafka frames both ways and enforces
a produce byte-rate quota of Q bytes/s, as Apache Kafka 2.0 and later do
(KIP-219): the Produce response goes out at once with ThrottleTimeMs set,
then the proxy reads nothing more from that connection for that long (the
broker "mutes the channel"). As at a broker, nothing more is read either
while a Produce request waits for its response. Other requests and
responses pass untouched; D defaults to 0 in this mode. One quota covers
every connection, as a broker's covers all of one client id's (and
librdkafka clients share the client id "rdkafka" unless told otherwise).
A connection that breaks the framing is closed; the others go on.

Both of its sockets have TCP_NODELAY, so the proxy adds no Nagle delay of
its own. On SIGTERM or SIGINT it drops its connections and exits 0.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import signal
import struct
import sys
from typing import AsyncIterator, Callable

from kdiag import __version__
from kdiag.lab.own_process import forward, host_port, milliseconds, nodelay, set_name

# The framing and the quota, re-exported: tests and callers know them as this module's.
from kdiag.lab.produce_quota import MAX_FRAME, PRODUCE, FrameError, Quota, produce_acks, throttle_offset, with_throttle  # noqa: F401
from kdiag.lab.variants import SLOWPROXY

# The name the lab knows it by (kdiag.lab.variants: a Loopback with a
# response delay or a quota runs this proxy).
PROCESS_NAME = SLOWPROXY
CHUNK = 65536
# Chunks read from the server but not yet due; beyond this the proxy stops
# reading, so a fast server cannot fill its memory.
MAX_PENDING = 256
DEFAULT_RESPONSE_DELAY_MS = 50.0
# What to do once a frame has been written to the client, if anything.
_Then = Callable[[], None] | None

# Requests waiting for their response on one connection.
MAX_INFLIGHT = 100_000


def _rate(text: str) -> float:
    try:
        rate = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < rate <= 1e12:
        raise argparse.ArgumentTypeError(f"quota out of range: {text!r}")
    return rate


async def _together(*coros) -> None:
    """Run the coroutines until all have finished or one has failed; a
    failure cancels the rest and is raised."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    for t in done:
        if not t.cancelled() and t.exception() is not None:
            raise t.exception()


async def _forward_late(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    delay: float,
    session: _Session | None = None,
) -> None:
    """Server to client, delay seconds late; with a session, frame by frame
    through its quota."""
    loop = asyncio.get_running_loop()
    # (due time, bytes, what to do once they are written); None marks the
    # server's end of stream. Read times only grow, so taking chunks in queue
    # order keeps both order and delay.
    pending: asyncio.Queue[tuple[float, bytes | memoryview | None, _Then]] = asyncio.Queue(MAX_PENDING)

    async def read() -> None:
        if session is None:
            while data := await reader.read(CHUNK):
                await pending.put((loop.time() + delay, data, None))
        else:
            async for head, message, then in session.responses(reader):
                due = loop.time() + delay
                # In chunks, so that MAX_PENDING still bounds what waits; the
                # size field goes with the first, not in a segment of its own.
                first = CHUNK - len(head)
                view = memoryview(message)
                await pending.put((due, head + view[:first], then if len(view) <= first else None))
                for i in range(first, len(view), CHUNK):
                    await pending.put((due, view[i : i + CHUNK], then if i + CHUNK >= len(view) else None))
        await pending.put((loop.time() + delay, None, None))

    async def write() -> None:
        while True:
            due, data, then = await pending.get()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if data is None:
                with contextlib.suppress(OSError):
                    if writer.can_write_eof():
                        writer.write_eof()
                return
            writer.write(data)
            await writer.drain()
            if then is not None:
                then()

    await _together(read(), write())


async def _frame(reader: asyncio.StreamReader, smallest: int, what: str) -> tuple[bytes, bytes] | None:
    """The next frame's size field and message; None at the end of the
    stream (a frame cut short included)."""
    try:
        head = await reader.readexactly(4)
        size = int.from_bytes(head, "big", signed=True)
        if not smallest <= size <= MAX_FRAME:
            raise FrameError(f"{what} of {size} bytes: not Kafka framing")
        return head, await reader.readexactly(size)
    except asyncio.IncompleteReadError:
        return None


class _Session:
    """One client connection under the quota.

    Like a Kafka broker, the session reads nothing more from the client
    while a Produce request waits for its response, nor for the throttle
    time after a throttled one (the broker's muted channel). Without the
    first, a producer with several requests in flight would have them all
    read before the first throttle took effect.
    """

    def __init__(self, quota: Quota, c_writer: asyncio.StreamWriter) -> None:
        self.quota = quota
        # correlation_id -> (api_key, api_version, size) of the requests
        # still waiting for their response.
        self.inflight: dict[int, tuple[int, int, int]] = {}
        self.transport = c_writer.transport
        self.readable = asyncio.Event()
        self.readable.set()
        self.producing = False
        self.muted_until = 0.0
        self.timer: asyncio.TimerHandle | None = None
        self.paused = False

    def _hold(self) -> None:
        self.readable.clear()
        # With reading paused the client's bytes wait in the socket, as at a
        # muted broker. When the stream reader has paused it (its buffer is
        # full) the resume is the reader's to make.
        if not self.paused and self.transport.is_reading():
            self.transport.pause_reading()
            self.paused = True

    def _release(self) -> None:
        if self.producing or self.timer is not None:
            return
        if self.paused:
            self.paused = False
            if not self.transport.is_closing():
                self.transport.resume_reading()
        self.readable.set()

    def mute(self, throttle_ms: int) -> None:
        """Read nothing more from the client for throttle_ms."""
        loop = asyncio.get_running_loop()
        until = loop.time() + throttle_ms / 1000
        if until <= self.muted_until:
            return
        self.muted_until = until
        self._hold()
        if self.timer is not None:
            self.timer.cancel()
        self.timer = loop.call_at(until, self._unmute)

    def _unmute(self) -> None:
        self.timer = None
        self._release()

    def _produced(self, throttle_ms: int) -> None:
        """The Produce response is with the client."""
        self.producing = False
        if throttle_ms > 0:
            self.mute(throttle_ms)
        self._release()

    def close(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    async def requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        while (frame := await _frame(reader, 8, "request")) is not None:
            head, message = frame
            # While held, not even a request already read goes on.
            await self.readable.wait()
            api_key, version, corr = struct.unpack_from(">hhi", message)
            acks = produce_acks(message, version) if api_key == PRODUCE else None
            if api_key == PRODUCE and acks is None:
                raise FrameError(f"Produce request v{version} of {len(message)} bytes has no acks field")
            if acks != 0:
                if len(self.inflight) >= MAX_INFLIGHT:
                    raise FrameError(f"{MAX_INFLIGHT} requests without a response")
                self.inflight[corr] = (api_key, version, len(message))
            if api_key == PRODUCE and acks != 0:
                self.producing = True
                self._hold()
            writer.write(head + message)
            await writer.drain()
            if acks == 0:
                # No response will carry the throttle, but the broker mutes
                # the channel all the same.
                self.mute(self.quota.charge(len(message), loop.time()))
        with contextlib.suppress(OSError):
            if writer.can_write_eof():
                writer.write_eof()

    async def responses(self, reader: asyncio.StreamReader) -> AsyncIterator[tuple[bytes, bytes, _Then]]:
        """The server's frames as (size field, message, what to do once the
        client has them)."""
        loop = asyncio.get_running_loop()
        while (frame := await _frame(reader, 4, "response")) is not None:
            head, message = frame
            (corr,) = struct.unpack_from(">i", message)
            request = self.inflight.pop(corr, None)
            if request is None or request[0] != PRODUCE:
                yield head, message, None
                continue
            _, version, size = request
            # Kafka records the bytes as the response is ready, then sends it
            # with the throttle and mutes the channel once it is sent.
            throttle_ms = self.quota.charge(size, loop.time())
            if throttle_offset(message, version) is None:
                self.quota.unchanged_response("unexpected layout" if version >= 1 else "v0 has no ThrottleTimeMs")
            elif throttle_ms > 0:
                marked = with_throttle(message, version, throttle_ms)
                if marked is None:
                    self.quota.unchanged_response("ThrottleTimeMs not 0 (set by the broker, or tagged fields follow)")
                else:
                    message = marked
            yield head, message, functools.partial(self._produced, throttle_ms)


class Proxy:
    def __init__(self, upstream: tuple[str, int], delay_ms: float, quota: Quota | None = None) -> None:
        self.upstream = upstream
        self.delay = delay_ms / 1000.0
        self.quota = quota
        self.sessions: set[asyncio.Task] = set()
        self.closing = False

    async def handle(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self.sessions.add(task)
        s_writer = None
        session = None
        peer = c_writer.get_extra_info("peername")
        try:
            nodelay(c_writer)
            try:
                s_reader, s_writer = await asyncio.open_connection(*self.upstream)
            except OSError as e:
                print(f"slowproxy: {peer} -> {self.upstream[0]}:{self.upstream[1]}: {e}", file=sys.stderr, flush=True)
                return
            nodelay(s_writer)
            if self.quota is None:
                await _together(forward(c_reader, s_writer, CHUNK), _forward_late(s_reader, c_writer, self.delay))
            else:
                session = _Session(self.quota, c_writer)
                await _together(
                    session.requests(c_reader, s_writer), _forward_late(s_reader, c_writer, self.delay, session)
                )
        except FrameError as e:
            print(f"slowproxy: {peer}: {e}; connection closed", file=sys.stderr, flush=True)
        except OSError:
            pass
        except asyncio.CancelledError:
            # Python 3.11's stream server logs a traceback for a handler
            # that ends cancelled; at shutdown that is the expected end.
            if not self.closing:
                raise
        finally:
            if session is not None:
                session.close()
            for w in (c_writer, s_writer):
                if w is not None:
                    w.close()
            self.sessions.discard(task)


async def serve(
    listen: tuple[str, int], upstream: tuple[str, int], delay_ms: float, quota_bytes_per_s: float | None = None
) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    quota = Quota(quota_bytes_per_s, loop.time()) if quota_bytes_per_s is not None else None
    proxy = Proxy(upstream, delay_ms, quota)
    server = await asyncio.start_server(proxy.handle, *listen, reuse_address=True)
    throttling = ""
    if quota is not None:
        throttling = (
            f", produce quota {quota.rate:g} bytes/s (burst {quota.capacity:g} bytes), "
            "throttled as Kafka >= 2.0 does (ThrottleTimeMs, then a muted channel)"
        )
    print(
        f"slowproxy: listening on {listen[0]}:{listen[1]}, forwarding to {upstream[0]}:{upstream[1]}, "
        f"responses {delay_ms:g} ms late{throttling}",
        file=sys.stderr,
        flush=True,
    )
    try:
        async with server:
            await stop.wait()
            server.close()
            proxy.closing = True
            for task in list(proxy.sessions):
                task.cancel()
            await asyncio.gather(*proxy.sessions, return_exceptions=True)
    finally:
        if quota is not None:
            print("\n".join(quota.report()), file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kdiag.lab.slowproxy", description=__doc__.split("\n\n")[0])
    ap.add_argument("--listen", type=host_port, required=True, metavar="HOST:PORT")
    ap.add_argument("--connect", type=host_port, required=True, metavar="HOST:PORT")
    ap.add_argument(
        "--response-delay-ms", type=milliseconds, metavar="D",
        help=f"default {DEFAULT_RESPONSE_DELAY_MS:g}, or 0 with --quota-bytes-per-s",
    )
    ap.add_argument("--quota-bytes-per-s", type=_rate, metavar="Q", help="throttle Produce requests to Q bytes/s")
    ap.add_argument("--version", action="version", version=f"{PROCESS_NAME} {__version__}")
    args = ap.parse_args(argv)
    delay = args.response_delay_ms
    if delay is None:
        delay = 0.0 if args.quota_bytes_per_s is not None else DEFAULT_RESPONSE_DELAY_MS
    set_name(PROCESS_NAME)
    try:
        asyncio.run(serve(args.listen, args.connect, delay, args.quota_bytes_per_s))
    except OSError as e:
        print(f"slowproxy: {e}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
