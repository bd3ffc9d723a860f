"""The analysis job: tables -> per-request latency split -> causes.

Runs in PySpark (local mode by default; the same code runs under
``spark-submit kdiag/analysis.py --tables DIR --out findings.json`` on a
cluster). DataFrame operations only, no Python UDFs, so executors need
nothing but Spark.

Steps:
0. Input checks (kdiag/quality.py): rows that repeat earlier rows are
   dropped, clock steps found per thread; requests that span a step or whose
   response is stamped before them are left out and counted
   (``input_checks``).
1. Requests: each Received line joined to its Sent line by
   (client, broker, corr_id); correlation ids count per broker handle and a
   retry gets a new one, so corr_id alone is not a key.
2. Send burst: the socket writes on the broker thread right before the
   ``Sent`` line (librdkafka logs it after the writes). Over TLS one request
   is several records, several write()s: that is what Nagle holds back.
3. Window: the thread's syscalls between the first write and the
   ``Received`` line, found with a time-bucketed range join (join on
   (thread, bucket), then filter), never a cross product.
4. Connections: connect(), setsockopt(TCP_NODELAY) and the handshake wait
   per socket; a small table, joined back by fd and time.
5. Causes per request, then the verdict over all Produce requests.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

# Linux's TCP_DELACK_MIN: the shortest a receiver delays an ACK (HZ/25).
DELAYED_ACK_MS = 40.0
# A stall counts as the delayed-ACK timer when the wait beyond the path RTT
# is in this range. Request/response traffic keeps Linux's ACK delay near
# TCP_ATO_MIN (40 ms; 40-48 ms measured here, p99 under 55 ms). The upper
# bound keeps out what only looks alike: a broker throttle (~100 ms in the
# throttled lab, which a 150 ms bound took for nagle_in_path) and RTO
# stalls (205-250 ms in the packet-loss lab). Peers that delay ACKs longer
# (BSD and macOS 100 ms, Windows 200 ms) are not covered.
NAGLE_EXCESS_MIN_MS = 30.0
NAGLE_EXCESS_MAX_MS = 70.0
# A request slower than this is worth explaining at all.
SLOW_MS = 10.0
# Requests sent in one write that wait as long as the split ones rule Nagle
# out, from this many on: one alone can be a request whose first writes came
# before an attached tracer did (the slow-broker lab has 5 in 30 messages).
ONE_WRITE_MIN = 3
# A cause names the verdict when it explains at least this share of requests.
DOMINANT_SHARE = 0.5
# A cause is listed as contributing from this share on.
CONTRIBUTING_SHARE = 0.1
# A tail cause (a few requests, long stalls) names the verdict when its
# requests take this share of all the time spent.
TAIL_TIME_SHARE = 0.25
# Spark jobs started at once on a small input (2 cores: planning is one
# core's work per job, the JVM compiles on the other).
PARALLEL_JOBS = 3
# A wait after connect() times its handshake only this soon after it.
HANDSHAKE_WINDOW_US = 10_000_000
MAX_HANDSHAKE_SPANS = 100
# A slow request is the client's CPU when its thread waited for a core (run-
# queue wait, schedstat) for at least this share of its wait.
CPU_STARVED_SHARE = 0.5
# A slow request is the broker's quota when the broker reported a throttle
# time of at least this share of the request's wait around its response.
THROTTLE_SHARE = 0.5
# Thread samples are ~100 ms apart: interval-to-request joins use 1 s buckets.
SAMPLE_BUCKET_US = 1_000_000

WRITE_CALLS = ["write", "writev", "sendmsg", "sendto", "send", "pwrite64"]
READ_CALLS = ["read", "readv", "recvmsg", "recvfrom", "recv"]
WAIT_CALLS = ["poll", "ppoll", "epoll_wait", "epoll_pwait", "epoll_pwait2", "select", "pselect6"]
# -yy names the endpoints; -y only says "socket:[inode]".
SOCKET_INFO = r"^(TCP|TCPv6|UDP|UDPv6|UNIX|UNIX-STREAM|NETLINK|socket:)"

# librdkafka made socket.nagle.disable=true its default in v2.10.0; 0.9.3 to
# 0.11.4 ignored the setting altogether.
NAGLE_DEFAULT_FLIPPED = (2, 10, 0)

FIXES = {
    "nagle_delayed_ack": {"socket.nagle.disable": "true"},
    "nagle_in_path": {},
    "network_latency": {},
    "broker_slow": {},
    "packet_loss": {},
    "client_queueing": {"linger.ms": "0"},
    "client_cpu": {},
    "throttled": {},
    "healthy": {},
}


def _version_tuple(v: str | None) -> tuple[int, ...] | None:
    if not v:
        return None
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", v)
    return tuple(int(x) for x in m.groups()) if m else None


def _read(spark, tables: Path, name: str, drop: tuple[str, ...] = ()):
    """The table, without the columns in ``drop``. Its schema comes from the
    file's footer, read here: Spark would run a job to infer it."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql.pandas.types import from_arrow_schema

    path = tables / f"{name}.parquet"
    if not path.exists():
        return None
    schema = pq.read_schema(path)
    schema = pa.schema([f.remove_metadata() for f in schema if f.name not in drop])
    return spark.read.schema(from_arrow_schema(schema)).parquet(str(path))


# id(Quality of an analysis) -> the DataFrames it cached.
_HELD: dict[int, list] = {}


def _cached(df, q):
    """df cached until the analysis that q belongs to ends: each table and
    the requests are read by many actions, which then start from the cache
    instead of from Parquet and the duplicate check's windows (on a
    100-request capture, warm: 14 -> 10.6 s)."""
    if df is None:
        return None
    _HELD.setdefault(id(q), []).append(df.cache())
    return df


def _pctl(values: list[float], q: float) -> float | None:
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return None
    k = min(len(vals) - 1, max(0, int(round(q * (len(vals) - 1)))))
    return vals[k]


def _r(x: float | None, nd: int = 2) -> float | None:
    return None if x is None else round(float(x), nd)


def requests(spark, events):
    """Sent joined to Received by (client, broker, corr_id); a Received pairs
    with the latest Sent before it, so a reused name in a concatenated log
    still pairs right."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    has_pid = "pid" in events.columns
    pid = F.col("pid") if has_pid else F.lit(None).cast("int")
    key = ["client", "broker", "corr_id"]
    is_send = F.col("event") == "send"
    # One pass in line order per key instead of a join and a window: each
    # Received takes the latest Sent seen before it. At one line number a
    # Received sorts first, so only a Sent on an earlier line pairs with it.
    ev = events.filter(F.col("event").isin("send", "recv") & F.col("client").isNotNull()
                       & F.col("broker").isNotNull() & F.col("corr_id").isNotNull()).select(
        *key, F.col("line_no"), is_send.alias("_send"),
        F.when(is_send, F.struct(F.col("request"), F.col("size_bytes").alias("req_bytes"),
                                 F.col("ts_us").alias("send_us"), F.col("line_no").alias("send_line"),
                                 pid.alias("pid"))).alias("_s"),
        F.col("ts_us").alias("recv_us"), F.col("line_no").alias("recv_line"), "rtt_ms",
        F.col("size_bytes").alias("resp_bytes"))
    w = Window.partitionBy(*key).orderBy("line_no", "_send").rowsBetween(Window.unboundedPreceding, 0)
    j = ev.withColumn("_s", F.last("_s", ignorenulls=True).over(w)).filter(~F.col("_send") & F.col("_s").isNotNull())
    return j.select(*key, "recv_us", "recv_line", "rtt_ms", "resp_bytes", "_s.request", "_s.req_bytes",
                    "_s.send_us", "_s.send_line", "_s.pid")


def flag_syscalls(syscalls):
    """The syscalls with socket writes, socket reads and waits flagged."""
    from pyspark.sql import functions as F

    sc = syscalls.filter(F.col("kind") == "syscall").select(
        "line_no", "pid", "ts_us", "dur_us", "syscall", "fd", "fd_info", "ret")
    is_sock = F.col("fd").isNotNull() & (F.col("fd") > 2) & (
        F.col("fd_info").isNull() | F.col("fd_info").rlike(SOCKET_INFO))
    sc = sc.withColumn("sock_write", F.col("syscall").isin(WRITE_CALLS) & is_sock & (F.col("ret") > 0))
    sc = sc.withColumn("sock_read", F.col("syscall").isin(READ_CALLS) & is_sock & (F.col("ret") > 0))
    return sc.withColumn("wait", F.col("syscall").isin(WAIT_CALLS))


def prepare_syscalls(syscalls):
    """Flagged syscalls with the bursts of socket writes numbered per thread
    (for requests inferred from syscalls alone)."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    sc = flag_syscalls(syscalls)
    # burst: a run of socket writes; every other call on the thread starts a
    # new one. The writes of a request share the burst just before its Sent line.
    w = Window.partitionBy("pid").orderBy("ts_us", "line_no").rowsBetween(Window.unboundedPreceding, 0)
    return sc.withColumn("burst", F.sum(F.when(F.col("sock_write"), 0).otherwise(1)).over(w))


def _bursts(sc):
    from pyspark.sql import functions as F

    return sc.filter("sock_write").groupBy("pid", "burst").agg(
        F.count("*").alias("n_writes"),
        F.min("ts_us").alias("send_start_us"),
        F.sum("ret").alias("written_bytes"),
        F.sort_array(F.collect_list(F.struct("ts_us", "ret"))).alias("_w"),
        F.first("fd").alias("fd"),
        F.first("fd_info").alias("fd_info"),
        F.max(F.col("ts_us") + F.coalesce(F.col("dur_us"), F.lit(0))).alias("send_end_us"),
        F.min("line_no").alias("first_line"),
    ).withColumn("write_sizes", F.col("_w.ret")).drop("_w")


def _buckets(start: str, end: str, bucket_us: int):
    """One row per time bucket the span [start, end] touches: the join key
    of a range join by buckets (join on the bucket, then filter), never a
    cross product."""
    from pyspark.sql import functions as F

    return F.explode(F.sequence(F.floor(F.col(start) / bucket_us), F.floor(F.col(end) / bucket_us)))


def split_requests(spark, reqs, sc):
    """Attach each request's send burst and the first socket read of its
    window (between its Sent and Received lines, both included).

    Each thread's syscalls are sorted once, with a marker row for each
    request at its Sent time, sorted before the thread's calls of that time.
    Walking forward, each row gets running sums of the socket writes so far;
    the call that ends a run of writes (every call but a socket write does)
    sees its run as the sums since the call that ended the previous one.
    The first socket read of a window is the next read after its marker (a
    lead that skips what is not a read). A request left in the run right
    before its Sent line's own write(2): a second, small sort of markers and
    runs brings the two together by that line's number. No range join and
    no syscall compared with a request: windows that overlap (pipelined
    requests) cost nothing more.

    ``write_sizes`` is left empty: it is only shown for the example
    requests, filled in by ``fill_write_sizes`` from the run's bounds
    (``_run_lo``, ``_run_hi``: (ts_us, line_no) of the calls around it)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructField, StructType
    from pyspark.sql.window import Window

    req_t = StructType([StructField(f.name, f.dataType, True) for f in reqs.schema.fields])
    flag = lambda c: F.coalesce(F.col(c), F.lit(False))  # noqa: E731
    calls = sc.select(
        "pid", F.col("ts_us").alias("_ts"), F.lit(1).alias("_k"), F.col("line_no").alias("_line"),
        flag("sock_write").alias("_wr"), flag("sock_read").alias("_rd"), F.col("ret").alias("_ret"),
        F.col("fd").alias("_fd"), F.when(flag("sock_write"), F.col("fd_info")).alias("_fdi"),
        F.lit(None).cast(req_t).alias("_req"))
    marks = reqs.select(
        "pid", F.col("send_us").alias("_ts"), F.lit(0).alias("_k"), F.col("send_line").alias("_line"),
        F.lit(False).alias("_wr"), F.lit(False).alias("_rd"), F.lit(None).cast("long").alias("_ret"),
        F.lit(None).cast("int").alias("_fd"), F.lit(None).cast("string").alias("_fdi"),
        F.struct(*[F.col(c) for c in reqs.columns]).cast(req_t).alias("_req"))
    fwd = Window.partitionBy("pid").orderBy("_ts", "_k", "_line")
    upto = fwd.rowsBetween(Window.unboundedPreceding, 0)
    one = lambda c: F.when(c, 1).otherwise(0)  # noqa: E731
    wr, call = F.col("_wr"), F.col("_k") == 1
    timed_wr = wr & F.col("_ts").isNotNull()
    ends = call & ~wr
    rows = calls.unionByName(marks).select(
        "*", F.when(F.col("_rd"), F.col("_ts")).alias("_read_ts"),
        F.when(call, F.struct(wr.alias("wr"), F.col("_ts").isNull().alias("untimed"))).alias("_as_call"))
    rows = rows.select(
        "*",
        F.sum(one(wr)).over(upto).alias("_cw"),
        F.sum(one(timed_wr)).over(upto).alias("_ctw"),
        F.sum(F.when(wr, F.col("_ret")).otherwise(0)).over(upto).alias("_cb"),
        F.expr("lead(_read_ts, 1, null, true)").over(fwd).alias("_next_read"),
        F.expr("lag(_as_call, 1, null, true)").over(fwd).alias("_prev_call"))
    # A run's first write follows a call that is not a write; its first
    # timed write follows that or an untimed write (untimed rows sort first).
    prev = F.col("_prev_call")
    first = wr & (prev.isNull() | ~prev.getField("wr"))
    first_timed = timed_wr & (prev.isNull() | ~prev.getField("wr") | prev.getField("untimed"))
    pos = F.struct(F.col("_ts").alias("ts_us"), F.col("_line").alias("line_no"))
    rows = rows.select(
        "pid", "_k", "_line", "_req", "_next_read", "_cw", "_ctw", "_cb", pos.alias("_pos"),
        F.last(F.when(first, F.struct("_fd", "_fdi")), ignorenulls=True).over(upto).alias("_fw"),
        F.last(F.when(first_timed, F.col("_ts")), ignorenulls=True).over(upto).alias("_tw"),
        F.last(F.when(ends, F.struct(pos.alias("at"), "_cw", "_ctw", "_cb")), ignorenulls=True).over(
            fwd.rowsBetween(Window.unboundedPreceding, -1)).alias("_prev_end"))
    pe = lambda c: F.coalesce(F.col("_prev_end").getField(c), F.lit(0))  # noqa: E731
    n = F.col("_cw") - pe("_cw")
    run = F.struct(n.alias("n_writes"),
                   F.when(F.col("_ctw") > pe("_ctw"), F.col("_tw")).alias("send_start_us"),
                   (F.col("_cb") - pe("_cb")).alias("written_bytes"),
                   F.col("_fw._fd").alias("fd"), F.col("_fw._fdi").alias("fd_info"),
                   F.col("_prev_end.at").alias("lo"), F.col("_pos").alias("hi"))
    # A request meets its run by its Sent line's number.
    rows = rows.filter((F.col("_k") == 0) | (n > 0)).select(
        "pid", "_k", "_line", "_req", "_next_read", F.when(F.col("_k") == 1, run).alias("_run"))
    pair = Window.partitionBy("pid", "_line").orderBy(F.col("_k").desc()).rowsBetween(Window.unboundedPreceding, 0)
    rows = rows.withColumn("_b", F.first("_run", ignorenulls=True).over(pair)).filter(F.col("_k") == 0)
    send, recv = F.col("_req.send_us"), F.col("_req.recv_us")
    # A request without a thread is not matched with any syscall.
    own = F.col("_req.pid").isNotNull()
    burst = lambda c, name=None: F.when(own, F.col(f"_b.{c}")).alias(name or c)  # noqa: E731
    r = rows.select(
        "_req.*", *[burst(c) for c in ("n_writes", "send_start_us", "written_bytes")],
        F.lit(None).cast("array<long>").alias("write_sizes"), burst("fd"), burst("fd_info"),
        burst("lo", "_run_lo"), burst("hi", "_run_hi"),
        F.when(own & send.isNotNull() & (F.col("_next_read") <= recv), F.col("_next_read")).alias("first_read_us"))
    r = r.withColumn("start_us", F.coalesce("send_start_us", "send_us"))
    ms = lambda a, b: (F.col(a) - F.col(b)) / 1000.0  # noqa: E731
    return (r.withColumn("send_ms", ms("send_us", "start_us"))
             .withColumn("wait_ms", ms("first_read_us", "send_us"))
             .withColumn("read_ms", ms("recv_us", "first_read_us"))
             .withColumn("total_ms", ms("recv_us", "start_us")))


def fill_write_sizes(syscalls, examples: dict) -> None:
    """The sizes of each example request's writes, in time order: the
    socket writes on its thread between the calls around its run (a few
    rows, read with the table's own filters)."""
    from pyspark.sql import functions as F

    want = [e for e in examples.values() if e.get("write_sizes") is None and e.get("_run_hi") is not None
            and e.get("pid") is not None and e.get("n_writes")]
    if want and syscalls is not None:
        cond = None
        for e in want:
            lo, hi = e["_run_lo"], e["_run_hi"]
            c = F.col("pid") == e["pid"]
            if hi["ts_us"] is not None:
                c = c & (F.col("ts_us").isNull() | (F.col("ts_us") <= hi["ts_us"]))
            if lo is not None and lo["ts_us"] is not None:
                c = c & (F.col("ts_us") >= lo["ts_us"])
            cond = c if cond is None else cond | c
        got = flag_syscalls(syscalls.filter(cond)).filter("sock_write").select(
            "pid", "ts_us", "line_no", "ret").collect()
        key = lambda ts, line: (ts is not None, ts or 0, line)  # noqa: E731
        for e in want:
            lo, hi = e["_run_lo"], e["_run_hi"]
            top = key(hi["ts_us"], hi["line_no"])
            bottom = key(lo["ts_us"], lo["line_no"]) if lo is not None else None
            mine = [(g.ts_us, g.ret) for g in got if g.pid == e["pid"]
                    and key(g.ts_us, g.line_no) < top and (bottom is None or key(g.ts_us, g.line_no) > bottom)]
            # sort_array of (ts_us, ret): nulls first
            e["write_sizes"] = [ret for _, ret in sorted(mine, key=lambda x: (x[0] is not None, x[0] or 0,
                                                                              x[1] is not None, x[1] or 0))]
    for e in examples.values():
        e.pop("_run_lo", None)
        e.pop("_run_hi", None)


def exchanges(sc):
    """Requests inferred from syscalls alone, for producers that log no
    Sent/Received lines: a burst of socket writes on a thread, then the
    first socket read on that fd is its response (a synchronous producer has
    one request in flight). No correlation ids: pipelined requests would
    pair with the wrong response, which the findings say."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    b = _bursts(sc).select("pid", "fd", "fd_info", "n_writes", "write_sizes", "written_bytes",
                           F.col("send_start_us"), F.col("send_end_us").alias("ts_us"),
                           F.col("first_line").alias("send_line"), F.lit(None).cast("long").alias("read_us"),
                           F.lit(None).cast("long").alias("read_line"))
    reads = sc.filter("sock_read").select(
        "pid", "fd", F.lit(None).cast("string").alias("fd_info"), F.lit(None).cast("long").alias("n_writes"),
        F.lit(None).cast("array<long>").alias("write_sizes"), F.lit(None).cast("long").alias("written_bytes"),
        F.lit(None).cast("long").alias("send_start_us"), "ts_us", F.lit(None).cast("long").alias("send_line"),
        F.col("ts_us").alias("read_us"), F.col("line_no").alias("read_line"))
    # The first read after each row: the last one seen walking backwards
    # (a frame to the partition's end would be rescanned for every row).
    ev = b.unionByName(reads).withColumn("_o", F.coalesce("send_line", "read_line"))
    w = Window.partitionBy("pid", "fd").orderBy(F.col("ts_us").desc(), F.col("_o").desc()).rowsBetween(
        Window.unboundedPreceding, -1)
    nxt = F.last(F.when(F.col("read_us").isNotNull(), F.struct("read_us", "read_line")), ignorenulls=True).over(w)
    ev = ev.withColumn("_n", nxt).withColumn("resp_us", F.col("_n.read_us")).withColumn("recv_line", F.col("_n.read_line"))
    ms = lambda a, c: (F.col(a) - F.col(c)) / 1000.0  # noqa: E731
    return (ev.filter(F.col("n_writes").isNotNull() & F.col("resp_us").isNotNull())
              .select(F.lit(None).cast("string").alias("client"),
                      F.coalesce(F.regexp_extract("fd_info", r"->([^\]]+)", 1), F.col("fd").cast("string")).alias("broker"),
                      F.lit(None).cast("int").alias("corr_id"), F.lit("exchange").alias("request"),
                      F.col("written_bytes").alias("req_bytes"), F.col("ts_us").alias("send_us"),
                      F.col("resp_us").alias("recv_us"), F.lit(None).cast("double").alias("rtt_ms"),
                      "pid", "fd", "n_writes", "write_sizes", "send_line", "recv_line", "send_start_us")
              .withColumn("send_ms", ms("send_us", "send_start_us"))
              .withColumn("wait_ms", ms("recv_us", "send_us"))
              .withColumn("read_ms", F.lit(0.0))
              .withColumn("total_ms", ms("recv_us", "send_start_us")))


_PEER = re.compile(r'sin6?_port=htons\((\d+)\).*?(?:inet_addr\("([^"]+)"\)|inet_pton\(AF_INET6, "([^"]+)")')


def connections(syscalls) -> list[dict]:
    """Per connect(): peer, TCP_NODELAY as set before it, handshake wait.

    ``setsockopt(..., TCP_NODELAY, [1], ...)`` comes before ``connect()`` in
    librdkafka; absent between the socket's previous close and the connect,
    the socket kept Nagle on. Few rows: computed on the driver.

    ``syscalls`` is best the table as read, so that the filters reach the
    Parquet reader: row groups without one of these calls are skipped
    unread, and of the waits (librdkafka polls with POLLOUT before most
    sends) only those that can time a handshake are read at all: on their
    connect()'s thread, within 10 s of it."""
    from pyspark.sql import functions as F

    cols = ["line_no", "pid", "ts_us", "dur_us", "syscall", "fd", "fd_info", "args", "ret"]
    sc = syscalls.filter(F.col("kind") == "syscall")
    rows = sc.filter(F.col("syscall").isin("connect", "setsockopt", "getsockopt", "close", "socket")).select(
        *cols).collect()
    spans: dict = {}
    for r in rows:
        if r.syscall == "connect" and r.fd is not None and "AF_INET" in (r.args or "") and r.ts_us is not None:
            spans.setdefault(r.pid, []).append(r.ts_us)
    near = []
    for pid, starts in spans.items():
        lo = hi = None
        for t in sorted(starts):
            if hi is not None and t <= hi + 1:
                hi = t + HANDSHAKE_WINDOW_US - 1
                continue
            if lo is not None:
                near.append((pid, lo, hi))
            lo, hi = t, t + HANDSHAKE_WINDOW_US - 1
        near.append((pid, lo, hi))
    if len(near) > MAX_HANDSHAKE_SPANS:   # a reconnect storm: read them all
        rows += sc.filter(F.col("syscall").isin(WAIT_CALLS) & F.col("args").contains("POLLOUT")).select(
            *cols).collect()
    elif near:
        cond = None
        for pid, lo, hi in near:
            c = F.col("pid").eqNullSafe(F.lit(pid).cast("int")) & F.col("ts_us").between(lo, hi)
            cond = c if cond is None else cond | c
        rows += sc.filter(F.col("syscall").isin(WAIT_CALLS) & cond & F.col("args").contains("POLLOUT")).select(
            *cols).collect()
    rows.sort(key=lambda r: (r.ts_us is not None, r.ts_us or 0, r.line_no is not None, r.line_no or 0))
    conns: list[dict] = []
    last_close: dict[int, int] = {}
    nodelay_at: dict[int, tuple[int, int, bool]] = {}
    for row in rows:
        name, fd, args = row.syscall, row.fd, row.args or ""
        if name == "close" and fd is not None:
            last_close[fd] = row.ts_us
            nodelay_at.pop(fd, None)
        elif name == "setsockopt" and fd is not None and "TCP_NODELAY" in args:
            nodelay_at[fd] = (row.ts_us, row.line_no, "[0]" not in args)
        elif name == "connect" and fd is not None and "AF_INET" in args:
            m = _PEER.search(args)
            nd = nodelay_at.get(fd)
            conns.append({
                "fd": fd, "pid": row.pid, "connect_us": row.ts_us, "connect_line": row.line_no,
                "peer": f"{m.group(2) or m.group(3)}:{m.group(1)}" if m else None,
                "nodelay": nd[2] if nd else False,
                "nodelay_line": nd[1] if nd else None,
                "handshake_ms": None,
            })
        elif name == "getsockopt" and fd is not None and "SO_ERROR" in args:
            # librdkafka asks SO_ERROR once the connecting socket is writable:
            # the handshake ended with the last POLLOUT wait before it. (Its
            # first wait may have woken for the wake-up pipe instead.)
            c = _open_conn(conns, row.pid, fd, row.ts_us)
            if c is not None and c["handshake_ms"] is None:
                _set_handshake(c, c.pop("_last_wait", None), row.ts_us)
        elif row.dur_us is not None:
            for c in reversed(conns):
                if c["pid"] == row.pid and c["handshake_ms"] is None and row.ts_us >= c["connect_us"] \
                        and row.ts_us - c["connect_us"] < HANDSHAKE_WINDOW_US and f"fd={c['fd']}" in args:
                    c["_last_wait"] = (row.ts_us, row.dur_us)
                    c.setdefault("_first_wait", (row.ts_us, row.dur_us))
                    break
    for c in conns:
        # A client that never asks SO_ERROR: its first POLLOUT wait is the
        # best there is.
        first = c.pop("_first_wait", None)
        c.pop("_last_wait", None)
        if c["handshake_ms"] is None and first is not None:
            _set_handshake(c, first, None)
    return conns


def _open_conn(conns: list[dict], pid, fd: int, ts_us: int) -> dict | None:
    for c in reversed(conns):
        if c["pid"] == pid and c["fd"] == fd and c["connect_us"] <= ts_us:
            return c
    return None


def _set_handshake(c: dict, wait: tuple[int, int] | None, confirmed_us: int | None) -> None:
    """From connect() to the end of the wait that saw the socket writable. A
    wait that returned at once began after the handshake was over: the
    figure is then only an upper bound."""
    if wait is not None:
        ts, dur = wait
        end = ts + dur
        c["handshake_upper_bound"] = dur * 2 < (end - c["connect_us"])
    else:
        end = confirmed_us
        c["handshake_upper_bound"] = True
    c["handshake_ms"] = round((end - c["connect_us"]) / 1000.0, 3)


_SOURCE_NAMES = {"syscalls": "the strace output", "rdkafka_events": "the librdkafka log"}


def analyze(spark, tables_dir: Path, meta: dict | None = None) -> dict:
    """The findings, with ``input_checks``: what was wrong with the input as
    a whole (repeated blocks, clock steps) and how many requests it cost."""
    from kdiag.analysis import input_checks as quality

    from kdiag.analysis.spark import tables_bytes, tune_for

    tune_for(spark, tables_bytes(tables_dir))
    q = quality.Quality()
    try:
        result = _analyze(spark, Path(tables_dir), meta, q)
    finally:
        # What this analysis cached goes with it: a session that analyses
        # many inputs (the tests, a long replay) must not fill with them.
        for df in _HELD.pop(id(q), []):
            df.unpersist()
    result["input_checks"] = q.checks
    return result


def _at_once(parallel: bool, tasks: list) -> list:
    """The tasks' results, in order. In parallel (threads, each with its own
    Spark jobs) when asked: on a small input every job is the JVM planning
    and warming up, one core each, and the second core would wait. On a 200-
    request capture, first analysis 9.2 -> ... s."""
    if not parallel:
        return [t() for t in tasks]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(PARALLEL_JOBS, thread_name_prefix="kdiag-analysis") as pool:
        return [f.result() for f in [pool.submit(t) for t in tasks]]


def _checked(spark, reqs, table: str, q):
    """Requests of ``table``'s clock without those a clock step or a response
    stamped before its request leaves without a true latency."""
    from kdiag.analysis import input_checks as quality

    name = _SOURCE_NAMES[table]
    for other, other_name in _SOURCE_NAMES.items():
        if other != table:   # steps there are reported; no request rests on them
            quality.exclude_spanning(spark, None, other, q, other_name)
    reqs = quality.exclude_spanning(spark, reqs, table, q, name)
    return quality.exclude_negative(reqs, table, q, name)


def _analyze(spark, tables_dir: Path, meta: dict | None, q) -> dict:
    from pyspark.sql import functions as F

    from kdiag.analysis import input_checks as quality

    meta = {**(meta or {}), "tables_dir": str(tables_dir)}
    unknowns: list[str] = []
    # Rows that repeat earlier ones go before anything counts them; the
    # clock steps are found per thread in file order. A small input's tables
    # are cached: read by many actions, each then starts from memory. A large
    # one's are not: holding them costs more than reading the few columns
    # each action needs again, and what is read again is what the job made
    # of them (the split requests), cached below.
    from kdiag.analysis.spark import SMALL_INPUT_BYTES, tables_bytes

    small = tables_bytes(tables_dir) < SMALL_INPUT_BYTES
    # data is the text of a write to stdout/stderr, already in args: it
    # neither tells copies apart nor is read below.
    read = {name: _read(spark, tables_dir, name, ("data",) if name == "syscalls" else ())
            for name in ("rdkafka_events", "syscalls", "log_writes", "stats")}
    # Each check gets a Quality of its own, merged in this order below: the
    # checks run at once on a small input (see _at_once).
    qs = {k: quality.Quality() for k in ("dup_events", "dup_syscalls", "dup_lw", "dup_stats", "steps_syscalls",
                                         "steps_events")}

    def checked(name: str, key: str, steps: str | None = None):
        def run():
            ordered = quality.with_order(read[name])
            df = quality.drop_duplicates(ordered, name, qs[key])
            if df is not ordered:   # copies dropped: every later read must drop them too
                read[name] = df
            df = _cached(df, q) if small else df
            if steps is not None:
                quality.clock_steps(spark, df, name, qs[steps])
            return df
        return run

    def facts():
        # Copies change none of these: the first copy of a row stays.
        log, lw, sc = read["rdkafka_events"], read["log_writes"], read["syscalls"]
        version = meta.get("librdkafka_version")
        for src in (log, lw):
            if version is None and src is not None:
                row = src.filter(F.col("event") == "init").select("detail").first()
                version = row.detail if row else None
        source = None
        if lw is not None and lw.filter(F.col("event") == "send").limit(1).count():
            source = "strace"
        elif log is not None and log.filter(F.col("event") == "send").limit(1).count():
            source = "log"
        elif sc is not None and sc.limit(1).count() and not _any_rows(log) and not _any_rows(lw):
            # Only a producer that logs nothing has its requests inferred: a
            # librdkafka log without one Sent line means nothing was sent.
            source = "syscalls"
        return version, source

    raw_syscalls = read["syscalls"]

    def conns_of():
        return connections(raw_syscalls) if raw_syscalls is not None else []

    log, syscalls, lw, stats, (version, source), conns = _at_once(small, [
        checked("rdkafka_events", "dup_events", "steps_events"),
        checked("syscalls", "dup_syscalls", "steps_syscalls"), checked("log_writes", "dup_lw"),
        checked("stats", "dup_stats"), facts, conns_of])
    for k in ("dup_events", "dup_syscalls", "dup_lw", "dup_stats", "steps_syscalls", "steps_events"):
        q.checks += qs[k].checks
        q.steps.update(qs[k].steps)
    if read["syscalls"] is not raw_syscalls:   # its copies were dropped: they are not connections
        conns = connections(read["syscalls"])
    events = {"strace": lw, "log": log}.get(source)
    if source is None:
        for table, name in _SOURCE_NAMES.items():
            quality.exclude_spanning(spark, None, table, q, name)
        return _result(meta, version, "healthy", [], {"requests": 0},
                       ["no librdkafka Sent/Received lines and no syscalls in the inputs: nothing to analyse"],
                       no_data=True)

    if source == "syscalls":
        sc = prepare_syscalls(syscalls)
        reqs = _checked(spark, exchanges(sc), "syscalls", q)
        conns += sampled_connections(tables_dir, conns)
        unknowns.append("the producer logged no librdkafka Sent/Received lines: requests were inferred from "
                        "its syscalls (a burst of socket writes, then the first read of the response); "
                        "no correlation ids, and pipelined requests would pair with the wrong response")
        result = judge(spark, reqs, reqs, conns, stats, version, source, unknowns, meta, read.get("syscalls"),
                       small)
        result["confidence"] = "medium: requests inferred from syscalls"
        result["paths"] = path_rows(tables_dir)
        return result

    reqs = requests(spark, events)
    if source == "strace" and syscalls is not None:
        # Cached before the input checks: their counts and every later
        # action read one computation of the split.
        reqs = _checked(spark, _cached(split_requests(spark, reqs, flag_syscalls(syscalls)), q), "syscalls", q)
        conns += sampled_connections(tables_dir, conns)
    else:
        reqs = _checked(spark, reqs, "syscalls" if source == "strace" else "rdkafka_events", q)
        conns = []
        for c in ("send_ms", "wait_ms", "read_ms", "n_writes", "fd", "first_read_us",
                  "written_bytes", "write_sizes", "send_start_us", "fd_info"):
            reqs = reqs.withColumn(c, F.lit(None))
        # A log without timestamps (basicConfig, Go, node) still carries
        # librdkafka's own rtt for each response.
        reqs = reqs.withColumn("total_ms", F.coalesce((F.col("recv_us") - F.col("send_us")) / 1000.0,
                                                      F.col("rtt_ms")))
        if not _any_rows(reqs.filter(F.col("send_us").isNotNull() & F.col("recv_us").isNotNull())):
            unknowns.append("the log has no timestamps: a request's time is librdkafka's rtt")
        unknowns.append("no librdkafka Sent lines inside an strace capture: a request's time cannot be split "
                        "into socket and wait, and Nagle cannot be told from a slow broker")
        reqs = _cached(reqs, q)

    produce = reqs.filter(F.col("request") == "Produce")
    result = judge(spark, produce, reqs, conns, stats, version, source, unknowns, meta, read.get("syscalls"),
                   small)
    result["confidence"] = "high: requests from librdkafka's own lines" if source == "strace" else \
        "low: librdkafka's log without syscalls"
    result["paths"] = path_rows(tables_dir)
    return result


def sampled_connections(tables_dir: Path, conns: list[dict]) -> list[dict]:
    """TCP_NODELAY as the socket really had it (pidfd_getfd + getsockopt),
    for sockets whose connect() the capture did not see. They stand for the
    socket from before the capture began until its first connect() seen."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    path = Path(tables_dir) / "sockets.parquet"
    if not path.exists():
        return []
    t = pq.read_table(path, columns=["ts_us", "fd", "remote", "nodelay"])
    t = t.filter(pc.is_valid(t["nodelay"]))
    seen = {c["fd"] for c in conns}
    out: dict[int, dict] = {}
    for r in t.to_pylist():
        if r["fd"] in seen or r["fd"] in out:
            continue
        out[r["fd"]] = {"fd": r["fd"], "pid": None, "connect_us": 0, "connect_line": None, "peer": r["remote"],
                        "nodelay": bool(r["nodelay"]), "nodelay_line": None, "handshake_ms": None,
                        "sampled": True}
    return list(out.values())


def socket_held(tables_dir, fd) -> dict | None:
    """What the sampled socket showed: bytes not yet sent while a segment
    waits for its ACK is Nagle caught in the act (``ss``: notsent, unacked)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    path = Path(tables_dir) / "sockets.parquet" if tables_dir else None
    if path is None or fd is None or not path.exists():
        return None
    t = pq.read_table(path, columns=["fd", "notsent_bytes", "unacked", "ato_ms"])
    t = t.filter(pc.fill_null(pc.equal(t["fd"], fd), False))
    if not len(t):
        return None
    held = t.filter(pc.fill_null(pc.and_(pc.greater(t["notsent_bytes"], 0), pc.greater(t["unacked"], 0)), False))
    return {"samples": len(t), "held": len(held),
            "notsent_bytes": _pctl(held["notsent_bytes"].to_pylist(), 0.5) if len(held) else None,
            "ato_ms": _pctl(t["ato_ms"].to_pylist(), 0.5)}


def cpu_starvation(tables_dir, tid) -> dict | None:
    """Run-level CPU facts from the thread and host samples (a few hundred
    rows a minute, read on the driver): the request thread's and the whole
    process's run-queue wait, and the cgroup's CFS throttling."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    if not tables_dir:
        return None
    path = Path(tables_dir) / "threads.parquet"
    if not path.exists():
        return None
    t = pq.read_table(path, columns=["ts_us", "tid", "name", "runq_wait_ms", "nonvoluntary_ctxt"])
    if not len(t):
        return None
    first, last = pc.min(t["ts_us"]).as_py(), pc.max(t["ts_us"]).as_py()
    out: dict = {"wall_ms": (last - first) / 1000.0, "thread": None}
    per: dict[int, list[dict]] = {}
    for r in t.to_pylist():
        per.setdefault(r["tid"], []).append(r)

    def delta(rows, col):
        vals = [r[col] for r in sorted(rows, key=lambda r: r["ts_us"]) if r[col] is not None]
        return vals[-1] - vals[0] if len(vals) >= 2 else None

    out["process_runq_ms"] = sum(d for rows in per.values() if (d := delta(rows, "runq_wait_ms")) is not None)
    if tid is not None and tid in per:
        rows = per[tid]
        out["thread"] = {"tid": tid, "name": rows[-1]["name"], "runq_ms": delta(rows, "runq_wait_ms"),
                         "nonvoluntary": delta(rows, "nonvoluntary_ctxt")}
    host = Path(tables_dir) / "host.parquet"
    if host.exists():
        h = pq.read_table(host)
        if "cpu_nr_periods" in h.column_names:
            h = h.filter(pc.is_valid(h["cpu_nr_periods"])).sort_by("ts_us").to_pylist()
            if len(h) >= 2:
                a, b = h[0], h[-1]
                out["cgroup"] = {
                    "quota_cores": b["cpu_quota_cores"], "period_ms": b["cpu_period_ms"],
                    "periods": b["cpu_nr_periods"] - a["cpu_nr_periods"],
                    "throttled": b["cpu_nr_throttled"] - a["cpu_nr_throttled"],
                    "throttled_ms": (b["cpu_throttled_ms"] or 0.0) - (a["cpu_throttled_ms"] or 0.0),
                }
    return out


def _any_rows(df) -> bool:
    return df is not None and df.limit(1).count() > 0


def path_rows(tables_dir: Path) -> list[dict]:
    """The traceroute-style table per broker; probes are a few hundred rows,
    read on the driver."""
    import pyarrow.parquet as pq

    from kdiag.parsers.tcp_probe import path_table

    path = Path(tables_dir) / "probes.parquet"
    if not path.exists():
        return []
    return path_table(pq.read_table(path)).to_pylist()


def attach_connections(spark, produce, conns: list[dict]):
    """Each request gets the facts of the latest connect() on its fd before
    it: a broadcast range join against a table of a few rows."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    cols = {"c_fd": "int", "connect_us": "long", "nodelay": "boolean", "connect_line": "long",
            "peer": "string", "nodelay_line": "long"}
    schema = ", ".join(f"{k} {t}" for k, t in cols.items())
    rows = [(c["fd"], c["connect_us"], c["nodelay"], c["connect_line"], c["peer"], c["nodelay_line"]) for c in conns]
    cdf = spark.createDataFrame(rows, schema)
    cdf = cdf.withColumn("until_us", F.lead("connect_us").over(Window.partitionBy("c_fd").orderBy("connect_us")))
    cond = ((F.col("fd") == F.col("c_fd")) & (F.col("send_us") >= F.col("connect_us"))
            & (F.col("until_us").isNull() | (F.col("send_us") < F.col("until_us"))))
    return produce.join(F.broadcast(cdf), cond, "left").drop("c_fd", "until_us")


def runq_of(spark, tables_dir, produce):
    """Each request gets ``runq_ms``: how long its thread was runnable but
    waiting for a core while the request was out, from the sampler's
    schedstat counters (null without thread samples).

    The kernel credits a run-queue wait when it ends (sched_info_arrive), so
    a thread stalled while its response waited has the stall counted in the
    sample interval holding the request's end, not in the ones it spanned.
    Samples are ~100 ms apart: each interval that overlaps the request adds
    its run-queue wait, capped at the request's duration. That is an upper
    bound on the request's own run-queue wait."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    threads = _read(spark, Path(tables_dir), "threads") if tables_dir else None
    if threads is None or "pid" not in produce.columns:
        return produce.withColumn("runq_ms", F.lit(None).cast("double"))
    w = Window.partitionBy("pid", "tid").orderBy("ts_us")
    iv = (threads.filter(F.col("runq_wait_ms").isNotNull())
          .select(F.col("tid").cast("long").alias("tid"), F.col("ts_us").alias("iv_end"),
                  F.lag("ts_us").over(w).alias("iv_start"),
                  (F.col("runq_wait_ms") - F.lag("runq_wait_ms").over(w)).alias("iv_runq_ms"))
          .filter(F.col("iv_start").isNotNull() & (F.col("iv_runq_ms") > 0)))
    iv = iv.withColumn("bucket", _buckets("iv_start", "iv_end", SAMPLE_BUCKET_US))
    start = F.coalesce(F.col("send_start_us"), F.col("send_us")) if "send_start_us" in produce.columns \
        else F.col("send_us")
    keys = ["pid", "send_us", "recv_us"]
    rb = (produce.filter(F.col("pid").isNotNull()).select(*keys, start.alias("_start"))
          .withColumn("bucket", _buckets("_start", "recv_us", SAMPLE_BUCKET_US)))
    over = (rb.join(iv, (F.col("pid").cast("long") == F.col("tid")) & (rb.bucket == iv.bucket))
            .filter((F.col("iv_start") < F.col("recv_us")) & (F.col("iv_end") > F.col("_start")))
            .select(*keys, "iv_start", "iv_runq_ms", ((F.col("recv_us") - F.col("_start")) / 1000.0).alias("_dur"))
            .dropDuplicates([*keys, "iv_start"]))
    agg = over.groupBy(*keys).agg(F.least(F.sum("iv_runq_ms"), F.max("_dur")).alias("runq_ms"))
    return produce.join(agg, keys, "left").withColumn(
        "runq_ms", F.when(F.col("pid").isNotNull(), F.coalesce("runq_ms", F.lit(0.0))))


def throttle_of(stats, produce):
    """Each request gets ``throttle_ms``: the longest throttle time its
    broker reported in the statistics window that holds the response (null
    without statistics). librdkafka stamps statistics with whole epoch
    seconds, so a window runs from the previous emission to one second past
    its own."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    if stats is None or not {"client", "broker"} <= set(produce.columns):
        return produce.withColumn("throttle_ms", F.lit(None).cast("double"))
    w = Window.partitionBy("client", "broker").orderBy("ts_us")
    win = (stats.filter(F.col("ts_us").isNotNull())
           .select(F.col("client").alias("s_client"), F.col("broker").alias("s_broker"),
                   F.coalesce(F.lag("ts_us").over(w), F.col("ts_us") - SAMPLE_BUCKET_US).alias("w_start"),
                   (F.col("ts_us") + SAMPLE_BUCKET_US).alias("w_end"), "throttle_max_ms")
           .filter(F.col("throttle_max_ms") > 0))
    win = win.withColumn("bucket", _buckets("w_start", "w_end", SAMPLE_BUCKET_US))
    keys = ["client", "broker", "recv_us"]
    rb = produce.select(*keys).distinct().withColumn("bucket", F.floor(F.col("recv_us") / SAMPLE_BUCKET_US))
    hit = (rb.join(F.broadcast(win), (rb.client == win.s_client) & (rb.broker == win.s_broker)
                   & (rb.bucket == win.bucket))
           .filter((F.col("recv_us") > F.col("w_start")) & (F.col("recv_us") <= F.col("w_end")))
           .groupBy(*keys).agg(F.max("throttle_max_ms").alias("throttle_ms")))
    return produce.join(hit, keys, "left")


def classify(produce, path_rtt: float | None, nagle_possible: bool = True):
    """The cause of each request. A slow wait spent mostly runnable without a
    core: the client's CPU. Several writes, then a wait beyond the path
    RTT about the delayed-ACK timer: Nagle (in the path when the client
    socket has TCP_NODELAY). Otherwise a slow wait is the network when the
    path RTT explains half of it, else the broker."""
    from pyspark.sql import functions as F

    rtt = F.lit(path_rtt).cast("double")
    wait = F.col("wait_ms")
    excess = wait - F.coalesce(rtt, F.lit(0.0))
    several = F.coalesce(F.col("n_writes"), F.lit(0)) >= 2
    nagle = several & (excess >= NAGLE_EXCESS_MIN_MS) & (excess <= NAGLE_EXCESS_MAX_MS) & F.lit(nagle_possible)
    # Against the whole request: a thread can lose its core while writing or
    # after reading the response, not only while it waits.
    starved = F.coalesce(F.col("runq_ms") >= CPU_STARVED_SHARE * F.col("total_ms"), F.lit(False)) \
        if "runq_ms" in produce.columns else F.lit(False)
    # A broker that reports throttle times about as long as the wait: under
    # KIP-219 it answers at once, then reads nothing more from the client.
    throttled = F.coalesce(F.col("throttle_ms") >= THROTTLE_SHARE * F.coalesce(wait, F.col("total_ms")), F.lit(False)) \
        if "throttle_ms" in produce.columns else F.lit(False)
    cause = (
        F.when((F.coalesce(wait, F.col("total_ms")) > SLOW_MS) & throttled, "throttled")
        .when(wait.isNull(), F.when(F.col("total_ms") > SLOW_MS, "unexplained_slow").otherwise("healthy"))
        # Checked first: a thread that waits for a core sees every other
        # stall (a held send, a slow response) only late as well.
        .when((F.col("total_ms") > SLOW_MS) & starved, "client_cpu")
        .when(nagle, F.when(F.col("nodelay") == F.lit(True), "nagle_in_path").otherwise("nagle_delayed_ack"))
        .when(wait > SLOW_MS, F.when(rtt.isNotNull() & (rtt >= wait * 0.5), "network_latency").otherwise("slow_wait"))
        .otherwise("healthy")
    )
    return produce.withColumn("cause", cause)


def path_rtt_of(spark, tables_dir, conns: list[dict]) -> tuple[float | None, str | None, bool]:
    """The path round trip, from the best source there is: kdiag's own
    connect() handshakes, then the SYN probe's answer from the broker port,
    then the wait after the producer's own connect() in strace."""
    from pyspark.sql import functions as F

    if tables_dir is not None:
        hs = _read(spark, Path(tables_dir), "handshakes")
        if hs is not None:
            row = hs.filter(F.col("error").isNull() & F.col("rtt_ms").isNotNull()).agg(
                F.count("*").alias("k"), F.percentile_approx("rtt_ms", 0.5, 100000).alias("m")).first()
            if row.k:
                return row.m, f"TCP connect() handshakes to the brokers by kdiag ({row.k})", False
        pr = _read(spark, Path(tables_dir), "probes")
        if pr is not None:
            row = pr.filter(F.col("answer").isin("open", "closed") & F.col("rtt_ms").isNotNull()).agg(
                F.count("*").alias("k"), F.percentile_approx("rtt_ms", 0.5, 100000).alias("m")).first()
            if row.k:
                return row.m, f"SYN probes answered by the broker port ({row.k})", False
    measured = [c for c in conns if c.get("handshake_ms") is not None]
    if not measured:
        return None, None, False
    rtt = _pctl([c["handshake_ms"] for c in measured], 0.5)
    bound = all(c.get("handshake_upper_bound") for c in measured)
    return rtt, ("strace: connect() to writable; an upper bound, the handshake was over before librdkafka "
                 "polled" if bound else "strace: connect() to writable"), bound


def _resolve_slow(rq, retrans: int | None):
    """A slow wait that neither Nagle nor the path explains: a minority of
    such requests over an otherwise fast body is the tail loss leaves (unless
    the run is known to have retransmitted nothing); a majority is the broker."""
    from pyspark.sql import functions as F

    row = rq.agg(F.count("*").alias("n"), F.count(F.when(F.col("cause") == "slow_wait", 1)).alias("k")).first()
    tail = row.n and row.k / row.n < DOMINANT_SHARE and retrans != 0
    return rq.withColumn("cause", F.when(F.col("cause") == "slow_wait",
                                         F.lit("packet_loss" if tail else "broker_slow")).otherwise(F.col("cause")))


# Causes that stall a few requests for long: loss (TCP's timers) and a CPU
# limit (the rest of a CFS period).
TAIL_CAUSES = ("packet_loss", "client_cpu")


def verdict_of(findings: list[dict]) -> str:
    """The cause of most requests; else a tail cause that takes a large share
    of the time; else healthy."""
    if findings and findings[0]["share"] >= DOMINANT_SHARE:
        return findings[0]["cause"]
    tails = [f for f in findings if f["cause"] in TAIL_CAUSES and f.get("time_share", 0) >= TAIL_TIME_SHARE]
    tails.sort(key=lambda f: -f["time_share"])
    return tails[0]["cause"] if tails else "healthy"


# librdkafka raised linger.ms (queue.buffering.max.ms) from 0.5 to 5 ms in v1.5.0.
LINGER_DEFAULT_5MS_FROM = (1, 5, 0)


def _client_queueing(client_ms: float | None, summary: dict, version: str | None, vt) -> dict | None:
    """Time a message waits in librdkafka's queue before its request is sent
    (statistics int_latency): a cause when it outweighs the request itself."""
    req_ms = summary.get("latency_p50_ms") or 0.0
    if client_ms is None or client_ms < SLOW_MS or client_ms < req_ms:
        return None
    share = client_ms / (client_ms + req_ms)
    default = None if vt is None else ("5 ms" if vt >= LINGER_DEFAULT_5MS_FROM else "0.5 ms")
    return {
        "cause": "client_queueing",
        "share": round(share, 3),
        "time_share": round(share, 3),
        "requests": summary.get("requests"),
        "evidence": [
            f"messages waited {client_ms:.1f} ms (median) in librdkafka's queue before their request was sent "
            f"(statistics int_latency), while a request took {req_ms} ms",
            "batching (linger.ms, batch.num.messages, batch.size) or the in-flight limit holds them in the client",
        ],
        "fix": {"linger.ms": "0"},
        "fix_text": ("lower linger.ms (queue.buffering.max.ms) for latency; "
                     + (f"librdkafka {version} defaults it to {default}" if default else
                        "librdkafka defaults it to 5 ms since v1.5.0")),
    }


def q_(col, p):
    from pyspark.sql import functions as F

    return F.percentile_approx(col, p, 100000)


def one_write_requests(reqs) -> dict:
    """Requests of any kind that left in a single write, and how long they
    waited for their response."""
    from pyspark.sql import functions as F

    row = reqs.filter((F.col("n_writes") == 1) & F.col("wait_ms").isNotNull()).agg(
        F.count("*").alias("n"), q_("wait_ms", 0.5).alias("m")).first()
    return {"n": row.n, "wait_p50_ms": _r(row.m, 3)}


# Above this many requests a cause's median request is found without
# sorting them all: the rows whose wait lies within EXAMPLE_BAND (as a
# quantile) of the median are sorted on the driver. percentile_approx at
# accuracy 100000 is within 1e-5 of the true rank, well inside the band.
EXAMPLE_SORT_MAX = 100_000
EXAMPLE_BAND = 0.0005
# More rows in a band than this (the waits tie): the cause is sorted whole.
EXAMPLE_BAND_ROWS = 200_000


def median_requests(rq, bands: dict, cols: list[str]) -> dict:
    """cause -> its median request by (wait_ms, send_us), nulls first: the
    one at floor(k / 2) + 1. ``bands``: cause -> (k, requests with a wait,
    wait quantiles [.., .., 0.5 - EXAMPLE_BAND, 0.5 + EXAMPLE_BAND]), for
    every cause when they are to be found by band; the causes a band misses
    are sorted whole."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    found: dict = {}
    banded = {}
    for cause, (k, timed, wait) in bands.items():
        want = k // 2 + 1 - (k - timed)        # rank among the requests with a wait
        if wait and wait[2] is not None and timed > 1 and 0 < want \
                and 0.5 - EXAMPLE_BAND < (want - 1) / (timed - 1) < 0.5 + EXAMPLE_BAND:
            banded[cause] = (want, wait[2], wait[3])
    if banded:
        lo = F.create_map(*[x for c, (_, a, _) in banded.items() for x in (F.lit(c), F.lit(a))])[F.col("cause")]
        hi = F.create_map(*[x for c, (_, _, b) in banded.items() for x in (F.lit(c), F.lit(b))])[F.col("cause")]
        wait = F.col("wait_ms")
        got = rq.filter(F.col("cause").isin(*banded)).groupBy("cause").agg(
            F.count(F.when(wait < lo, 1)).alias("below"),
            F.count(F.when((wait >= lo) & (wait <= hi), 1)).alias("n"),
            F.collect_list(F.when((wait >= lo) & (wait <= hi), F.struct("wait_ms", "send_us", "send_line",
                                                                         "recv_line"))).alias("band")).collect()
        pick = {}
        for g in got:
            want = banded[g.cause][0]
            band = sorted(g.band, key=lambda r: (r.wait_ms, r.send_us is not None, r.send_us or 0))
            if g.n <= EXAMPLE_BAND_ROWS and 0 <= want - g.below - 1 < len(band):
                pick[g.cause] = band[want - g.below - 1]
        if pick:
            cond = None
            for cause, r in pick.items():
                c = (F.col("cause") == cause) & (F.col("send_line").eqNullSafe(r.send_line)) & \
                    (F.col("recv_line").eqNullSafe(r.recv_line)) & (F.col("wait_ms") == r.wait_ms)
                cond = c if cond is None else cond | c
            for r in rq.filter(cond).select(*cols).collect():
                found.setdefault(r.cause, r.asDict(recursive=True))
    if bands and set(found) >= set(bands):
        return found
    rest = rq if not found else rq.filter(~F.col("cause").isin(*found))
    w = Window.partitionBy("cause").orderBy("wait_ms", "send_us")
    found.update({r.cause: r.asDict(recursive=True) for r in rest.withColumn("_i", F.row_number().over(w))
                  .withColumn("_n", F.count("*").over(Window.partitionBy("cause")))
                  .filter(F.col("_i") == F.floor(F.col("_n") / 2) + 1).select(*cols).collect()})
    return found


@dataclass(frozen=True)
class _CauseAgg:
    """One cause's requests, summed up."""
    k: int
    wait: list | None           # wait_ms p50, p99
    writes: float | None        # n_writes p50
    total: float | None         # total_ms p50
    wait_max: float | None
    time: float | None          # total_ms summed
    runq: float | None
    throttle: float | None
    throttle_max: float | None


def one_write_rules_out_nagle(n_one: int, one_wait_p50_ms: float | None, split_wait_p50_ms: float | None) -> bool:
    """Nagle holds back only what follows an unacknowledged segment: a
    request that left in one write has nothing held. When enough of those
    wait as long as the split ones, the wait is not Nagle's."""
    return (n_one >= ONE_WRITE_MIN and one_wait_p50_ms is not None and split_wait_p50_ms is not None
            and one_wait_p50_ms >= max(SLOW_MS, 0.5 * split_wait_p50_ms))


def judge(spark, produce, reqs, conns: list[dict], stats, version: str | None, source: str,
          unknowns: list[str], meta: dict, syscalls=None, parallel: bool = False) -> dict:
    """Per-request causes in Spark; only aggregates and one example request
    per cause come back to the driver, however many requests there are.
    ``parallel``: a small input, whose independent jobs run at once."""
    from pyspark.sql import functions as F

    vt = _version_tuple(version)
    default_nodelay = None if vt is None else vt >= NAGLE_DEFAULT_FLIPPED
    # Everything that comes before the causes, in one job (beside the path's).
    one_write = (F.col("n_writes") == 1) & F.col("wait_ms").isNotNull()
    pre = reqs.agg(F.count("*").alias("all_kinds"), F.count(F.when(one_write, 1)).alias("n1"),
                   q_(F.when(one_write, F.col("wait_ms")), 0.5).alias("m1"),
                   q_(F.when((F.col("request") == "Produce") & (F.col("n_writes") >= 2), F.col("wait_ms")), 0.5)
                   .alias("multi_wait"))
    if stats is not None:
        pre = pre.crossJoin(stats.agg(F.percentile_approx("int_latency_p50_ms", 0.5).alias("client_ms"),
                                      F.count(F.when(F.col("throttle_max_ms") > 0, 1)).alias("throttled")))
    (path_rtt, rtt_source, rtt_bound), pre = _at_once(parallel, [
        lambda: path_rtt_of(spark, meta.get("tables_dir"), conns), pre.first])
    single = {"n": pre.n1, "wait_p50_ms": _r(pre.m1, 3)}
    multi_wait = pre.multi_wait
    client_ms = pre.client_ms if stats is not None else None
    nagle_possible = not one_write_rules_out_nagle(single["n"], single["wait_p50_ms"], multi_wait)
    meta = {**meta, "one_write": single, "nagle_possible": nagle_possible, "has_stats": stats is not None}
    # Statistics without one throttle time add nothing but a join.
    throttles = stats if stats is not None and pre.throttled else None
    produce = runq_of(spark, meta.get("tables_dir"), produce)
    produce = throttle_of(throttles, produce) if throttles is not None else \
        produce.withColumn("throttle_ms", F.lit(None).cast("double"))
    rq = classify(attach_connections(spark, produce, conns), path_rtt, nagle_possible)
    held = "runq_ms" in produce.columns and meta.get("tables_dir") and \
        (Path(meta["tables_dir"]) / "threads.parquet").exists() or throttles is not None
    if held:   # joins that shuffle: made once for the two jobs below
        rq = rq.cache()
    q = lambda col, p: F.percentile_approx(col, p, 100000)  # noqa: E731
    # The causes and the whole in one job: each request counted once as
    # itself and once under its cause, with only the columns each side is
    # summed over (a percentile costs per value it is given). slow_wait is
    # told apart below; all its requests get the same name.
    none = lambda t: F.lit(None).cast(t)  # noqa: E731
    whole = rq.select(none("string").alias("_g"), "total_ms", "wait_ms", "rtt_ms", "send_ms", "read_ms", "send_us",
                      "recv_us", "broker", F.when(F.col("fd").isNotNull() & F.col("connect_us").isNull(),
                                                  F.col("fd")).alias("_ufd"),
                      none("long").alias("n_writes"), none("double").alias("runq_ms"),
                      none("double").alias("throttle_ms"))
    each = rq.select(F.col("cause").alias("_g"), "total_ms", "wait_ms", none("double").alias("rtt_ms"),
                     none("double").alias("send_ms"), none("double").alias("read_ms"), none("long").alias("send_us"),
                     none("long").alias("recv_us"), none("string").alias("broker"), none("int").alias("_ufd"),
                     F.col("n_writes").cast("long").alias("n_writes"), F.col("runq_ms").cast("double").alias("runq_ms"),
                     F.col("throttle_ms").cast("double").alias("throttle_ms"))
    sums = whole.unionByName(each).groupBy("_g").agg(
        F.count("*").alias("k"), F.count("wait_ms").alias("timed"),
        q("total_ms", [0.5, 0.99]).alias("total"), q("rtt_ms", [0.5, 0.99]).alias("rtt"),
        q("send_ms", 0.5).alias("send"), q("wait_ms", [0.5, 0.99, 0.5 - EXAMPLE_BAND, 0.5 + EXAMPLE_BAND]).alias("wait"),
        q("read_ms", 0.5).alias("read"), F.min("send_us").alias("first"), F.max("recv_us").alias("last"),
        F.sort_array(F.collect_set("broker")).alias("brokers"), F.sort_array(F.collect_set("_ufd")).alias("unknown_fds"),
        q("n_writes", 0.5).alias("writes"), F.max("wait_ms").alias("wait_max"), F.sum("total_ms").alias("time"),
        q("runq_ms", 0.5).alias("runq"), q("throttle_ms", 0.5).alias("throttle"),
        F.max("throttle_ms").alias("throttle_max"))
    # The example is the cause's median request by wait.
    ex_cols = ["cause", "broker", "corr_id", "n_writes", "write_sizes", "wait_ms", "rtt_ms", "send_line",
               "recv_line", "fd", "connect_us", "connect_line", "peer", "nodelay", "nodelay_line", "pid",
               "runq_ms"]
    ex_cols += [c for c in ("_run_lo", "_run_hi") if c in rq.columns]
    examples = None
    if parallel:   # few requests: sorted whole, beside the sums
        rows, examples = _at_once(True, [sums.collect, lambda: median_requests(rq, {}, ex_cols)])
    else:
        rows = sums.collect()
    s = next((r for r in rows if r._g is None), None)
    per = {r._g: _CauseAgg(r.k, r.wait[:2] if r.wait else r.wait, r.writes, r.total[0] if r.total else None,
                           r.wait_max, r.time, r.runq, r.throttle, r.throttle_max)
           for r in rows if r._g is not None}
    bands = {r._g: (r.k, r.timed, r.wait) for r in rows if r._g is not None}
    n = s.k if s is not None else 0
    if "slow_wait" in per:
        # _resolve_slow's rule, on the counts already here
        tail = n and per["slow_wait"].k / n < DOMINANT_SHARE and meta.get("tcp_retrans") != 0
        per["packet_loss" if tail else "broker_slow"] = per.pop("slow_wait")
    two = lambda v, i: None if v is None else v[i]  # noqa: E731
    summary = {
        "requests": n,
        "requests_all_kinds": pre.all_kinds,
        "brokers": list((s.brokers if s is not None else None) or []),
        "source": source,
        "rtt_p50_ms": _r(two(s and s.rtt, 0)), "rtt_p99_ms": _r(two(s and s.rtt, 1)),
        "latency_p50_ms": _r(two(s and s.total, 0)), "latency_p99_ms": _r(two(s and s.total, 1)),
        "split_ms": {
            "client_queue": _r(client_ms),
            "socket_send": _r(s and s.send, 3),
            "wait_response": _r(two(s and s.wait, 0), 3),
            "read_response": _r(s and s.read, 3),
        },
        "path_rtt_ms": _r(path_rtt, 3),
        "path_rtt_source": rtt_source,
        "path_rtt_upper_bound": rtt_bound if path_rtt is not None else None,
        "tcp_retransmits": meta.get("tcp_retrans"),
        "first_send_us": s and s.first,
        "last_recv_us": s and s.last,
    }
    if client_ms is None:
        unknowns.append("no statistics: time queued in the client before the send is unknown")
    if s is not None and s.unknown_fds:
        hint = ""
        if default_nodelay is not None:
            hint = (f"; librdkafka {version} defaults socket.nagle.disable to "
                    f"{'true' if default_nodelay else 'false'}")
        unknowns.append(f"TCP_NODELAY unknown on fd {list(s.unknown_fds)}: the capture started after connect(){hint}")
    if n == 0:
        unknowns.append("no Produce request completed in the capture")
        if held:
            rq.unpersist()
        return _result(meta, version, "healthy", [], summary, unknowns, no_data=True)

    if examples is None:
        examples = median_requests(rq, bands if n > EXAMPLE_SORT_MAX else {}, ex_cols)
    if "slow_wait" in examples:
        examples["packet_loss" if "packet_loss" in per else "broker_slow"] = examples.pop("slow_wait")
    fill_write_sizes(syscalls, examples)
    if held:
        rq.unpersist()

    all_time = sum((a.time or 0.0) for a in per.values()) or 1.0
    findings = []
    for cause, agg in per.items():
        share = agg.k / n
        time_share = (agg.time or 0.0) / all_time
        # A tail cause is few requests but much of the time: listed by either.
        if cause == "healthy" or max(share, time_share) < CONTRIBUTING_SHARE:
            continue
        f = _finding(cause, agg, examples[cause], share, n, path_rtt, rtt_bound, version, default_nodelay,
                     summary, meta)
        f["time_share"] = round(time_share, 3)
        findings.append(f)
    queueing = _client_queueing(client_ms, summary, version, vt)
    if queueing is not None:
        findings.append(queueing)
    findings.sort(key=lambda f: (-f["share"], f["cause"]))
    verdict = verdict_of(findings)
    if verdict == "healthy":
        k = per["healthy"].k if "healthy" in per else 0
        findings.insert(0, {
            "cause": "healthy", "share": round(k / n, 3), "requests": k,
            "evidence": [f"median request {summary['latency_p50_ms']} ms, p99 {summary['latency_p99_ms']} ms; "
                         f"no cause explains half the requests"],
            "fix": {}, "fix_text": "nothing to change",
        })
    return _result(meta, version, verdict, findings, summary, unknowns)


def _finding(cause: str, agg, ex: dict, share: float, n: int, path_rtt, rtt_bound, version,
             default_nodelay, summary: dict, meta: dict) -> dict:
    le = "<= " if rtt_bound else ""
    wait50, wait99 = (agg.wait or [None, None])
    f = {
        "cause": cause,
        "share": round(share, 3),
        "requests": agg.k,
        "evidence": [],
        "fix": FIXES.get(cause, {}),
        "fix_text": None,
        "example": {k: ex.get(k) for k in ("broker", "corr_id", "n_writes", "write_sizes", "wait_ms",
                                            "rtt_ms", "send_line", "recv_line", "fd")},
    }
    ev = f["evidence"]
    if cause in ("nagle_delayed_ack", "nagle_in_path"):
        ev.append(f"{agg.k} of {n} Produce requests left in several writes "
                  f"(median {agg.writes:.0f}, e.g. {ex.get('write_sizes')} bytes for CorrId {ex['corr_id']})")
        ev.append(f"then the broker thread waited in poll() for the response: median "
                  f"{wait50:.1f} ms, p99 {wait99:.1f} ms, about the delayed-ACK "
                  f"timer ({DELAYED_ACK_MS:.0f} ms) plus the path RTT "
                  f"({le + '%.3f ms' % path_rtt if path_rtt is not None else 'unknown'})")
        if path_rtt is not None:
            ev.append(f"the path itself is fast: {le}{path_rtt:.3f} ms ({summary['path_rtt_source']}); "
                      f"a SYN probe carries no data, so it can never show a Nagle stall: a healthy path "
                      f"beside a 40 ms wait is itself the sign of a held send")
        held = socket_held(meta.get("tables_dir"), ex.get("fd"))
        if held:
            if held["held"]:
                ev.append(f"the client socket, sampled {held['samples']} times, held {held['notsent_bytes']} bytes "
                          f"unsent behind an unacknowledged segment in {held['held']} samples (ato "
                          f"{held['ato_ms']} ms): Nagle waiting for the ACK, seen on the socket itself")
            else:
                ev.append(f"the client socket, sampled {held['samples']} times, never held bytes unsent: "
                          f"the wait is after the client's send")
        one = meta.get("one_write") or {}
        if one.get("n"):
            ev.append(f"requests that left in one write were answered in {one['wait_p50_ms']} ms (median of "
                      f"{one['n']}): only the split requests stall, which is Nagle's signature")
        if cause == "nagle_delayed_ack":
            if ex.get("connect_us") is not None and ex.get("connect_line") is None:
                ev.append(f"TCP_NODELAY was off on fd {ex['fd']} to {ex['peer']}, as sampled live from the "
                          f"socket (getsockopt through pidfd_getfd)")
            elif ex.get("connect_us") is not None:
                ev.append(f"TCP_NODELAY was not set on fd {ex['fd']}: no setsockopt(TCP_NODELAY) "
                          f"before its connect() to {ex['peer']} (strace line {ex['connect_line']})")
            elif default_nodelay is False:
                ev.append(f"TCP_NODELAY not seen (capture started after connect); librdkafka {version} "
                          f"leaves Nagle on by default")
            elif default_nodelay is True:
                ev.append(f"TCP_NODELAY not seen (capture started after connect); librdkafka {version} sets it "
                          f"unless socket.nagle.disable=false was set: if it is set, the stall is in the path "
                          f"(nagle_in_path)")
            else:
                ev.append("TCP_NODELAY not seen (capture started after connect)")
            f["fix_text"] = ("set socket.nagle.disable=true (librdkafka's default from v2.10.0); "
                             "it sets TCP_NODELAY so the last TLS record of a request is not held "
                             "until the broker's delayed ACK")
        else:
            where = f"strace line {ex['nodelay_line']}" if ex.get("nodelay_line") else "sampled live from the socket"
            ev.append(f"the client socket has TCP_NODELAY ({where}): "
                      "the stall is in a proxy or TLS terminator on the path")
            f["fix_text"] = "disable Nagle on the proxy/TLS terminator's sockets (e.g. socat ...,nodelay)"
    elif cause == "packet_loss":
        ev.append(f"{agg.k} of {n} Produce requests stalled: median wait {wait50:.1f} ms, worst "
                  f"{agg.wait_max:.1f} ms, while the median request took {summary['latency_p50_ms']} ms "
                  f"over a {_r(path_rtt, 2) if path_rtt is not None else '?'} ms path")
        retrans = meta.get("tcp_retrans")
        if retrans:
            ev.append(f"TCP retransmitted {retrans} segments during the run "
                      f"(RetransSegs in the producer's network namespace, /proc/net/snmp)")
        else:
            ev.append("retransmissions were not sampled: judged from the latency shape (a fast body, "
                      "a tail of stalls the size of TCP's loss timers)")
        ev.append("TCP recovers a lost segment after a tail-loss probe (~2x the smoothed RTT, at least "
                  "10 ms) or a retransmission timeout (at least 200 ms on Linux)")
        f["fix_text"] = ("find the lossy link: drops and errors on each hop (ip -s link, ethtool -S), "
                         "congestion or a policer on the path")
    elif cause == "client_cpu":
        ev.append(f"{agg.k} of {n} Produce requests stalled: median {agg.total:.1f} ms from first write to "
                  f"response, while the median request took {summary['latency_p50_ms']} ms")
        ev.append(f"their thread was runnable but waiting for a core for up to {agg.runq:.1f} ms of that "
                  f"(median; run-queue wait from /proc/PID/task/TID/schedstat, sampled ~every 100 ms): the "
                  f"response was there, the producer could not run to read it")
        cpu = cpu_starvation(meta.get("tables_dir"), ex.get("pid"))
        if cpu:
            th = cpu.get("thread")
            if th and th.get("runq_ms") is not None:
                ev.append(f"thread {th['name']} ({th['tid']}) waited {th['runq_ms']:.0f} ms for a core in "
                          f"{cpu['wall_ms']:.0f} ms of samples, with {th['nonvoluntary']} involuntary context "
                          f"switches; the whole process waited {cpu['process_runq_ms']:.0f} ms")
            cg = cpu.get("cgroup")
            if cg and cg["periods"]:
                limit = (f"limited to {cg['quota_cores']:.2f} cores per {cg['period_ms']:g} ms period"
                         if cg["quota_cores"] else "with no CPU limit of its own")
                ev.append(f"the producer's cgroup is {limit} and was throttled in {cg['throttled']} of "
                          f"{cg['periods']} periods, {cg['throttled_ms']:.0f} ms in all (cpu.stat)")
        ev.append(f"the path ({_r(path_rtt, 3) if path_rtt is not None else '?'} ms) and the broker answer fast; "
                  f"the time is lost in the client")
        f["fix_text"] = ("give the producer CPU: raise or remove its CPU limit (Kubernetes limits.cpu, cgroup "
                         "cpu.max / cpu.cfs_quota_us), or move busy neighbours off its cores; no librdkafka "
                         "property fixes a starved thread")
    elif cause == "throttled":
        ev.append(f"{agg.k} of {n} Produce requests waited {wait50 if wait50 is not None else agg.total:.1f} ms "
                  f"(median) for their response, while the broker ({ex.get('broker')}) reported throttle times "
                  f"of {agg.throttle:.0f} ms (median), up to {agg.throttle_max:.0f} ms (librdkafka statistics, "
                  f"throttle window)")
        ev.append("a broker over a client's quota answers at once with ThrottleTimeMs set, then reads nothing "
                  "more from that connection for as long (KIP-219, Kafka >= 2.0); the next request waits out the "
                  "throttle on the broker's side, on a fast path")
        f["fix_text"] = ("the broker is enforcing a quota for this client.id or user: raise it "
                         "(kafka-configs --alter --entity-type clients --add-config producer_byte_rate=...), or "
                         "send fewer bytes (compression.type=lz4 or zstd) and fewer requests (a larger linger.ms)")
    elif cause == "network_latency":
        ev.append(f"median wait {wait50:.1f} ms; the path round trip alone is {path_rtt:.1f} ms "
                  f"({summary['path_rtt_source']})")
        f["fix_text"] = "the path is slow: move the producer closer to the brokers, or raise linger/batching for throughput"
    elif cause == "broker_slow":
        ev.append(f"requests waited {wait50:.1f} ms (median) for their response while the path round trip "
                  f"is {_r(path_rtt, 3) if path_rtt is not None else 'unknown'} ms")
        one = meta.get("one_write") or {}
        if (one.get("n") or 0) >= ONE_WRITE_MIN and not meta.get("nagle_possible", True):
            ev.append(f"requests that left in one write waited as long ({one['wait_p50_ms']} ms, median of "
                      f"{one['n']}): Nagle holds nothing back from those, so the wait is the broker's")
        if not meta.get("has_stats"):
            ev.append("no librdkafka statistics in the capture: a broker throttling this client (quotas) looks "
                      "the same without them; set statistics.interval.ms to see its throttle times")
        f["fix_text"] = "look at the broker: request handling, disk, replication (acks=all waits for the ISR)"
    else:
        ev.append(f"median {agg.total:.1f} ms without syscall evidence to explain it")
        f["fix_text"] = "capture strace of the producer (kdiag trace) to split the time"
    return f


def _result(meta, version, verdict, findings, summary, unknowns, no_data=False) -> dict:
    return {
        "kdiag_version": meta.get("kdiag_version"),
        "librdkafka_version": version,
        # Nothing to judge is not "healthy": the verdict is then null.
        "verdict": None if no_data else verdict,
        "no_data": no_data,
        "summary": summary,
        "findings": findings,
        "unknowns": unknowns,
    }


def main(argv: list[str] | None = None) -> int:
    """Entry point for spark-submit."""
    ap = argparse.ArgumentParser(prog="analysis.py")
    ap.add_argument("--tables", required=True, help="directory of <table>.parquet files")
    ap.add_argument("--out", help="write findings JSON here (default: stdout)")
    a = ap.parse_args(argv)
    from kdiag.analysis.spark import session

    result = analyze(session("kdiag-analysis"), Path(a.tables))
    text = json.dumps(result, indent=2, default=str)
    if a.out:
        Path(a.out).write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
