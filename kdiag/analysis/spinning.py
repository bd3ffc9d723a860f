"""A producer whose own threads spin: they come back from poll() far more
often than anything they wait for can happen, and move no data. Read from
an strace (the ``syscalls`` table) or from strace lines counted by ``uniq
-c`` (``syscall_totals``' counted lines), when no request completed.

Two shapes, each a busy client by construction, whatever the clock says:

- an empty write wake-up: a poll() that asks POLLOUT on a broker socket
  returns at once (a socket with room in its send buffer is always
  writable), and the thread's next call is a read of that socket that
  gets EAGAIN, then poll() again: it asked to write, wrote nothing and
  read nothing. librdkafka sets POLLOUT when it has a request to send, or
  (before 1.7.0) while a TLS handshake waited to read
  (rdkafka_transport.c; CHANGELOG v1.7.0: "Fix busy-loop (100% CPU on the
  broker threads) during the handshake phase of an SSL connection");
- a poll() with a timeout of at most 1 ms that times out, thousands of
  times in one thread: 0.8's broker threads polled their socket with
  queue.buffering.max.ms as the timeout, so a setting of 1 wakes each of
  them a thousand times a second.
"""
from __future__ import annotations

import re
from pathlib import Path

# Empty write wake-ups in one thread, and their share of its polls.
EMPTY_MIN = 5
EMPTY_SHARE = 0.5
# Short polls in one thread: a second of them at 1 ms each.
SHORT_MIN = 1000
SHORT_TIMEOUT_MS = 1
# Calls that move data, against the short polls: fewer than one in ten.
DATA_SHARE = 0.1
READS = ("read", "recvfrom", "recvmsg", "recv", "readv")
WRITES = ("write", "sendmsg", "sendto", "send", "writev")
# poll(fds, nfds, timeout) as strace prints it: "..., 2, 906) = 1 ([...])"
# or "..., 1, 1 <unfinished ...>"; the timeout is the last argument.
_POLL_TIMEOUT = r",\s*(-?\d{1,9})$"
_COUNTED_POLL = re.compile(r"\bpoll\(\[.{0,2000}?\], \d{1,6}, (-?\d{1,9})(?:\)| <unfinished)")


def spinning(syscalls, tables_dir) -> dict | None:
    """What the threads' polls show, when one of them spins; else None."""
    got = from_counted(tables_dir)
    if got is None and syscalls is not None:
        got = from_syscalls(syscalls)
    return got


def from_counted(tables_dir) -> dict | None:
    """Short polls among strace lines counted by uniq -c (``syscall_totals``
    rows with their ``line``), per thread."""
    import pyarrow.parquet as pq

    path = Path(tables_dir) / "syscall_totals.parquet" if tables_dir else None
    if path is None or not path.exists():
        return None
    rows = pq.read_table(path, columns=["pid", "syscall", "calls", "ret", "line"]).to_pylist()
    short: dict = {}
    data: dict = {}
    timeouts = set()
    example = None
    for r in rows:
        line, calls = r["line"], r["calls"] or 0
        if not line or not calls:
            continue
        if r["syscall"] == "poll" and (m := _COUNTED_POLL.search(line)) and 0 <= int(m.group(1)) <= SHORT_TIMEOUT_MS \
                and (r["ret"] is None or r["ret"] == 0):
            short[r["pid"]] = short.get(r["pid"], 0) + calls
            timeouts.add(int(m.group(1)))
            example = example or line
        elif r["syscall"] in READS + WRITES and (r["ret"] is None or r["ret"] > 0):
            data[r["pid"]] = data.get(r["pid"], 0) + calls
    spin = {pid: n for pid, n in short.items() if n >= SHORT_MIN and data.get(pid, 0) < DATA_SHARE * n}
    if not spin:
        return None
    return {"kind": "short_timeout", "source": "counted", "threads": len(spin), "wakeups": sum(spin.values()),
            "per_thread_max": max(spin.values()), "timeout_ms": max(timeouts), "per_s": None,
            "iterations_per_ms": None, "read_bytes": None, "example": example}


def from_syscalls(syscalls) -> dict | None:
    """Empty write wake-ups and short polls in a full strace, per thread,
    in one job."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    df = syscalls
    if "kind" in df.columns:
        df = df.filter(F.col("kind") == "syscall")
    df = df.filter(F.col("syscall").isin("poll", *READS, *WRITES))
    w = Window.partitionBy("pid").orderBy("line_no")
    nxt, nxt_fd, nxt_err = F.lead("syscall").over(w), F.lead("fd").over(w), F.lead("errno").over(w)
    poll = F.col("syscall") == "poll"
    timeout = F.regexp_extract(F.col("args"), _POLL_TIMEOUT, 1)
    timeout = F.when(timeout != "", timeout.cast("long"))
    asks_out = F.coalesce(F.col("args").contains("POLLOUT"), F.lit(False))
    polled = F.col("args").contains(F.concat(F.lit("{fd="), nxt_fd.cast("string"), F.lit(",")))
    empty = poll & (F.col("ret") >= 1) & asks_out & nxt.isin(*READS) & (nxt_err == "EAGAIN") \
        & F.coalesce(polled, F.lit(False))
    short = poll & timeout.between(0, SHORT_TIMEOUT_MS) & F.coalesce(F.col("ret") == 0, F.col("ret").isNull())
    moved = F.col("syscall").isin(*READS, *WRITES) & (F.col("ret") > 0)
    flagged = df.select("pid", "ts_us", poll.alias("poll"), F.coalesce(empty, F.lit(False)).alias("empty"),
                        F.coalesce(short, F.lit(False)).alias("short"), F.coalesce(moved, F.lit(False)).alias("moved"),
                        timeout.alias("timeout_ms"),
                        F.regexp_extract(F.lead("args").over(w), r",\s*(\d{1,9})$", 1).alias("read_size"))

    def n(c):
        return F.sum(F.col(c).cast("long"))

    per = flagged.groupBy("pid").agg(
        n("poll").alias("polls"), n("empty").alias("empty"), n("short").alias("short"), n("moved").alias("moved"),
        F.max(F.when(F.col("empty"), F.col("timeout_ms"))).alias("empty_tmo_max"),
        F.min(F.when(F.col("empty"), F.col("timeout_ms"))).alias("empty_tmo_min"),
        F.first(F.when(F.col("empty"), F.col("read_size")), ignorenulls=True).alias("read_size"),
        ((F.max("ts_us") - F.min("ts_us")) / 1e6).alias("span_s")).collect()
    return judged_threads([r.asDict() for r in per])


def judged_threads(per: list[dict]) -> dict | None:
    """The spin a full strace's threads show (``from_syscalls``' rows: polls,
    empty and short wake-ups, data calls, the empty polls' timeouts, the
    thread's span), or None."""
    empty = [r for r in per if (r["empty"] or 0) >= EMPTY_MIN and r["empty"] >= EMPTY_SHARE * (r["polls"] or 0)]
    short = [r for r in per if (r["short"] or 0) >= SHORT_MIN and (r["moved"] or 0) < DATA_SHARE * r["short"]]
    spin, kind = (empty, "empty_pollout") if empty else (short, "short_timeout")
    if not spin:
        return None
    key = "empty" if kind == "empty_pollout" else "short"
    top = max(spin, key=lambda r: r[key])
    span = top.get("span_s")
    # librdkafka passes poll() the time left to its next timer: when it
    # drops by a millisecond or less over many wake-ups, each took a
    # fraction of one, whatever the strace's clock.
    tmo = (top.get("empty_tmo_max"), top.get("empty_tmo_min")) if kind == "empty_pollout" else (None, None)
    per_ms = round(top[key] / (tmo[0] - tmo[1] + 1), 1) if None not in tmo else None
    size = top.get("read_size")
    return {"kind": kind, "source": "strace", "threads": len(spin), "wakeups": sum(r[key] for r in spin),
            "per_thread_max": top[key], "timeout_ms": SHORT_TIMEOUT_MS if kind == "short_timeout" else None,
            "per_s": round(top[key] / span) if span else None, "iterations_per_ms": per_ms,
            "read_bytes": int(size) if size else None, "example": None}
