"""A file's chunks of lines fed to its parser, on several threads.

Chunks are parsed at once: the parsers spend their time in Arrow and numpy,
which let go of the GIL, so threads use every core.
"""
from __future__ import annotations

import os
from collections import deque
from pathlib import Path

from kdiag.ingest.lines import CHUNK_BYTES, iter_line_chunks

# Chunks parsed at once. Memory holds about twice this many chunks.
WORKERS = max(1, min(4, os.cpu_count() or 1))
# Chunks read ahead of the parse: one keeps the reader's thread busy (10 M
# strace lines: 4.64-4.97 s against 4.85-5.21 s with two) and a chunk's
# worth of memory free (peak RSS 521-564 MiB against 583-605 MiB).
READ_AHEAD = 1


def feed_chunks(fmt, parser, path: Path):
    """(chunk, table) in file order. The file is read ahead in a thread of
    its own; a stateless parser's chunks are parsed WORKERS at a time, each
    by a parser of its own whose counts are added up in order."""
    from concurrent.futures import ThreadPoolExecutor

    chunks = _read_ahead(iter_line_chunks(path, CHUNK_BYTES), READ_AHEAD)
    if WORKERS > 1 and hasattr(parser, "prepare"):
        # A parser with state across chunks (strace's unfinished calls)
        # feeds them in order, while the next chunk's lines are parsed
        # ahead in a second thread.
        with ThreadPoolExecutor(1, thread_name_prefix="kdiag-parse") as pool:
            prev = None
            for chunk in chunks:
                if prev is not None:
                    ahead = pool.submit(parser.prepare, chunk.lines, chunk.first_line_no)
                    yield prev, parser.feed(prev.lines, prev.first_line_no)
                    parser.use_prepared(ahead.result())
                prev = chunk
            if prev is not None:
                yield prev, parser.feed(prev.lines, prev.first_line_no)
        return
    if not fmt.stateless or WORKERS == 1:
        for chunk in chunks:
            yield chunk, parser.feed(chunk.lines, chunk.first_line_no)
        return

    def feed(chunk):
        own = fmt.parser()
        return own, own.feed(chunk.lines, chunk.first_line_no)

    with ThreadPoolExecutor(WORKERS, thread_name_prefix="kdiag-parse") as pool:
        pending: deque = deque()
        for chunk in chunks:
            pending.append((chunk, pool.submit(feed, chunk)))
            while len(pending) > WORKERS:
                yield _merged(parser, *pending.popleft())
        while pending:
            yield _merged(parser, *pending.popleft())


def _merged(parser, chunk, future):
    own, table = future.result()
    parser.counts.merge(own.counts)
    return chunk, table


def _read_ahead(it, depth: int):
    """The items of ``it``, produced by a thread up to ``depth`` ahead."""
    import queue
    import threading

    q: queue.Queue = queue.Queue(maxsize=depth)
    done = object()
    stop = threading.Event()

    def run():
        try:
            for item in it:
                while not stop.is_set():
                    try:
                        q.put(("item", item), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
        except BaseException as e:  # re-raised in the reader's thread
            q.put(("error", e))
            return
        q.put(("done", done))

    t = threading.Thread(target=run, name="kdiag-read", daemon=True)
    t.start()
    try:
        while True:
            what, item = q.get()
            if what == "done":
                return
            if what == "error":
                raise item
            yield item
    finally:
        stop.set()
