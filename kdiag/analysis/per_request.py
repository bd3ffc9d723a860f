"""The per-request pipeline: Sent joined to Received, each request's send
burst and wait found in its thread's syscalls (or requests inferred from
the syscalls alone when the producer logs nothing).

1. Requests: each Received line joined to its Sent line by
   (client, broker, corr_id); correlation ids count per broker handle and a
   retry gets a new one, so corr_id alone is not a key.
2. Send burst: the socket writes on the broker thread right before the
   ``Sent`` line (librdkafka logs it after the writes). Over TLS one request
   is several records, several write()s: that is what Nagle holds back.
3. Window: the thread's syscalls between the first write and the
   ``Received`` line, in one sorted pass per thread, never a cross product.
4. Excerpts: lines without a pid are one thread's; a request whose writes
   the excerpt cut (fewer bytes seen than it had) left in at least one
   write more (``n_writes_lower_bound``, ``unseen_bytes``); the size of its
   last write is ``last_write_bytes`` (a TLS record's tail, under 100
   bytes, before a ~40 ms wait is Nagle's signature).
"""
from __future__ import annotations

import operator
from functools import reduce

from kdiag.analysis.spark_plumbing import RUN, frame, one_run
from kdiag.parsers.strace.schema import SOCKET_PREFIXES
from kdiag.parsers.strace.values import unescape_bytes
from kdiag.parsers.wire.kafka import request_of_write

WRITE_CALLS = ["write", "writev", "sendmsg", "sendto", "send", "pwrite64"]
READ_CALLS = ["read", "readv", "recvmsg", "recvfrom", "recv"]
WAIT_CALLS = ["poll", "ppoll", "epoll_wait", "epoll_pwait", "epoll_pwait2", "select", "pselect6"]
# The fds a wait names: "poll([{fd=7, events=POLLIN}, ...", and those added
# to an epoll set: "epoll_ctl(5, EPOLL_CTL_ADD, 7, {...".
WAITED_FD = r"(?:fd=|EPOLL_CTL_(?:ADD|MOD), )(\d+)"
# No Produce request is smaller: a request header (14 bytes and the client
# id), the acks, timeout and topic fields (about 25 and the topic's name),
# a RecordBatch header (61) and one record. A burst of writes smaller than
# this is only the tail of a request (a TLS record's last bytes).
MIN_PRODUCE_BYTES = 100
SOCKET_INFO = "^(" + "|".join(SOCKET_PREFIXES) + ")"
# A write's first bytes as strace prints them (-s 256; bpfcalls: 64): the first quoted
# string of its arguments, `sendto(6<TCP:[...]>, "\0\0\1N\0\0..."..., 338,`
# or a writev's first `iov_base="..."`. Possessive: no backtracking.
FIRST_STRING = r'"((?:[^"\\]++|\\.)*+)"'
HEAD_TYPE = "struct<api:string,corr_id:int,client_id:string>"
# What a burst's first write tells (``head_facts``): the request it begins, if
# any, and whether it is a TLS handshake record.
HEAD_FACTS_TYPE = f"struct<request:{HEAD_TYPE},tls_handshake:boolean>"


def requests(spark, events):
    """Sent joined to Received by (client, broker, corr_id); a Received pairs
    with the latest Sent before it, so a reused name in a concatenated log
    still pairs right."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    events = one_run(events)
    has_pid = "pid" in events.columns
    pid = F.col("pid") if has_pid else F.lit(None).cast("int")
    key = [RUN, "client", "broker", "corr_id"]
    is_send = F.col("event") == "send"
    # One pass in line order per key instead of a join and a window: each
    # Received takes the latest Sent seen before it. At one line number a
    # Received sorts first, so only a Sent on an earlier line pairs with it.
    # A wrapper that drops the client name (node-rdkafka, some loggers)
    # leaves one unnamed client: its lines pair among themselves.
    ev = events.filter(F.col("event").isin("send", "recv")
                       & F.col("broker").isNotNull() & F.col("corr_id").isNotNull()).select(
        RUN, F.coalesce(F.col("client"), F.lit("")).alias("client"), "broker", "corr_id", F.col("line_no"),
        is_send.alias("_send"),
        F.when(is_send, F.struct(F.col("request"), F.col("size_bytes").alias("req_bytes"),
                                 F.col("ts_us").alias("send_us"), F.col("line_no").alias("send_line"),
                                 pid.alias("pid"))).alias("_s"),
        F.col("ts_us").alias("recv_us"), F.col("line_no").alias("recv_line"), "rtt_ms",
        F.col("size_bytes").alias("resp_bytes"), F.col("request").alias("_request"))
    # corr_id first: the sort's prefix is its first key, and the others are
    # strings mostly alike (RUN is "" outside a fleet): at 1e7 requests
    # 7.9-8.8 s against 9.8-15.9 s.
    w = Window.partitionBy("corr_id", RUN, "client", "broker").orderBy("line_no", "_send").rowsBetween(
        Window.unboundedPreceding, 0)
    # A Received line whose Sent line the excerpt lacks is a request still:
    # librdkafka states its rtt.
    j = ev.withColumn("_s", F.last("_s", ignorenulls=True).over(w)).filter(~F.col("_send"))
    return j.select(*key, "recv_us", "recv_line", "rtt_ms", "resp_bytes",
                    F.coalesce(F.col("_s.request"), F.col("_request")).alias("request"), "_s.req_bytes",
                    "_s.send_us", "_s.send_line", "_s.pid")


def flag_syscalls(syscalls, heads: bool = False):
    """The syscalls with socket writes, socket reads and waits flagged;
    ``heads``: each socket write's first bytes as printed (``write_head``),
    null where the tracer kept none."""
    from pyspark.sql import functions as F

    sc = one_run(syscalls).filter(F.col("kind") == "syscall").select(
        RUN, "line_no", "pid", "ts_us", "dur_us", "syscall", "fd", "fd_info", "ret",
        *(["args"] if heads and "args" in syscalls.columns else []))
    # Prefix tests, not SOCKET_INFO's regex: a regex per call was 0.8 s of
    # the 7.8 s that reading 50 M calls for the split took.
    named = reduce(operator.or_, [F.col("fd_info").startswith(p) for p in SOCKET_PREFIXES])
    is_sock = F.col("fd").isNotNull() & (F.col("fd") > 2) & (F.col("fd_info").isNull() | named)
    sc = sc.withColumn("sock_write", F.col("syscall").isin(WRITE_CALLS) & is_sock & (F.col("ret") > 0))
    sc = sc.withColumn("sock_read", F.col("syscall").isin(READ_CALLS) & is_sock & (F.col("ret") > 0))
    if heads:
        head = F.regexp_extract("args", FIRST_STRING, 1) if "args" in sc.columns else F.lit("")
        sc = sc.withColumn("write_head", F.when(F.col("sock_write") & (head != ""), head)).drop("args")
    return sc.withColumn("wait", F.col("syscall").isin(WAIT_CALLS))


def prepare_syscalls(syscalls, heads: bool = False):
    """Flagged syscalls with the bursts of socket writes numbered per thread
    (for requests inferred from syscalls alone).

    Without -y no fd says what it is: a socket is then an fd that a wait
    names (librdkafka polls its broker sockets), when any wait names one.
    Without -T a call lasted at most until its thread's next line: such a
    ``dur_us`` is an upper bound (``dur_upper_bound``)."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    sc = flag_syscalls(syscalls, heads)
    waited = waited_fds(syscalls)
    if waited:
        on = F.col("fd").isin(waited)
        sc = sc.withColumn("sock_write", F.col("sock_write") & on).withColumn("sock_read", F.col("sock_read") & on)
    order = Window.partitionBy(RUN, "pid").orderBy("ts_us", "line_no")
    nxt = F.lead("ts_us").over(order)
    sc = (sc.withColumn("dur_upper_bound", F.col("dur_us").isNull() & F.col("ts_us").isNotNull() & nxt.isNotNull())
            .withColumn("dur_us", F.coalesce(F.col("dur_us"), nxt - F.col("ts_us"))))
    # burst: a run of socket writes; every other call on the thread starts a
    # new one. The writes of a request share the burst just before its Sent
    # line. Burst 0 began before the thread's first call in the capture.
    w = order.rowsBetween(Window.unboundedPreceding, 0)
    return sc.withColumn("burst", F.sum(F.when(F.col("sock_write"), 0).otherwise(1)).over(w))


def waited_fds(syscalls) -> list[int] | None:
    """The fds the waits name, when no fd carries a -y annotation (one
    small job); None when fds are annotated or no wait names one."""
    from pyspark.sql import functions as F

    named = F.expr(f"regexp_extract_all(args, '{WAITED_FD.replace(chr(92), chr(92) * 2)}', 1)")
    row = syscalls.filter(F.col("kind") == "syscall").agg(
        F.count("fd_info").alias("annotated"),
        F.array_distinct(F.flatten(F.collect_list(
            F.when(F.col("syscall").isin(*WAIT_CALLS, "epoll_ctl"), named)))).alias("fds")).first()
    if row.annotated or not row.fds:
        return None
    return sorted({int(x) for x in row.fds if x})


def _bursts(sc):
    from pyspark.sql import functions as F

    head = ["write_head"] if "write_head" in sc.columns else []
    return sc.filter("sock_write").groupBy(RUN, "pid", "burst").agg(
        F.count("*").alias("n_writes"),
        F.min("ts_us").alias("send_start_us"),
        F.sum("ret").alias("written_bytes"),
        F.sort_array(F.collect_list(F.struct("ts_us", "line_no", "ret", *head))).alias("_w"),
        F.first("fd").alias("fd"),
        F.first("fd_info").alias("fd_info"),
        F.max(F.col("ts_us") + F.coalesce(F.col("dur_us"), F.lit(0))).alias("send_end_us"),
        F.min("line_no").alias("first_line"),
    ).withColumn("write_sizes", F.col("_w.ret")).withColumn(
        "first_head", F.col("_w")[0]["write_head"] if head else F.lit(None).cast("string")).drop("_w")


def requests_from(spark, source: str, lines, syscalls, pieces=None, hold=None):
    """A run's requests (or a fleet's runs' of one source) as ``source``
    (``steps.source_of``) gives them: librdkafka's ``lines`` paired, and
    split by the ``syscalls`` when the lines were written under strace
    (``pieces``, ``hold``: see split_requests); for ``syscalls``, exchanges
    inferred from the syscalls alone. Unchecked: the requests a clock step
    or a response stamped first leaves without a latency are the caller's."""
    if source == "syscalls":
        return exchanges(prepare_syscalls(syscalls, heads=True))
    reqs = requests(spark, lines)
    if source == "strace" and syscalls is not None:
        return split_requests(spark, reqs, flag_syscalls(syscalls), pieces, hold=hold)
    return reqs


def split_requests(spark, reqs, sc, pieces=None, hold=None):
    """Attach each request's send burst and the first socket read of its
    window (between its Sent and Received lines, both included).

    Each thread's syscalls are sorted once by (time, line), with a marker
    row for each request at its Sent line's place: the line is the
    write(2) that carried it, and has its time (``log_writes`` rows take
    their call's), so the marker sorts right before that call. Walking
    forward, each row gets running sums of the socket writes so far; a
    marker sees the run of writes right before its Sent line (every call
    but a socket write ends a run) as the sums since the last call that
    ended the one before: the request left in that run. The first socket
    read of a window is the next read after its marker (a lead that skips
    what is not a read). No range join, no second sort by line, and no
    syscall compared with a request: windows that overlap (pipelined
    requests) cost nothing more. ``pieces``: a large capture's threads are
    walked in time pieces (see ``time_pieces``).

    ``write_sizes`` is left empty: it is only shown for the example
    requests, filled in by ``fill_write_sizes`` from the run's bounds
    (``_run_lo``, ``_run_hi``: (ts_us, line_no) of the calls around it).

    ``hold``: what the caller keeps of the split (``spark_plumbing.cached``) is
    taken before the columns derived from the others (the parts in ms,
    ``start_us``, the short runs'): each is cheap to compute again on every
    read, and cost the cache's build per value (at 1e7 requests the
    build took 14.1-15.1 s without those 8 of the 30 columns, 16.9-19.1 s
    with them)."""
    from pyspark.sql import functions as F

    rows = _runs(_calls_and_marks(one_run(reqs), one_run(sc), pieces))
    send, recv = F.col("_req.send_us"), F.col("_req.recv_us")
    # A request logged on a line without a pid (strace without -f, or one
    # thread attached with -p) is walked with the calls without one: the
    # same stream.
    burst = lambda c, name=None: F.col(f"_run.{c}").alias(name or c)  # noqa: E731
    r = rows.select(
        "_req.*", *[burst(c) for c in ("n_writes", "send_start_us", "written_bytes", "last_write_bytes")],
        burst("fd"), burst("fd_info"), burst("lo", "_run_lo"), burst("hi", "_run_hi"),
        F.when(send.isNotNull() & (F.col("_next_read") <= recv), F.col("_next_read")).alias("first_read_us"))
    if hold is not None:
        r = hold(r)
    at = r.columns.index("last_write_bytes") + 1
    r = r.select(*r.columns[:at], F.lit(None).cast("array<long>").alias("write_sizes"), *r.columns[at:])
    r = _short_runs(r).withColumn("start_us", F.coalesce("send_start_us", "send_us"))
    ms = lambda a, b: (F.col(a) - F.col(b)) / 1000.0  # noqa: E731
    return (r.withColumn("send_ms", ms("send_us", "start_us"))
             .withColumn("wait_ms", ms("first_read_us", "send_us"))
             .withColumn("read_ms", ms("recv_us", "first_read_us"))
             # strace without timestamps: librdkafka's rtt is the time there is.
             .withColumn("total_ms", F.coalesce(ms("recv_us", "start_us"), F.col("rtt_ms"))))


def _short_runs(r):
    """A run of writes shorter than the request librdkafka logged (its
    ``Sent ... (v7, 2219 bytes ...)``) did not carry it all: the request's
    first writes came before the capture began (an excerpt cut inside the
    request) or before a wait (a partial send). It left in at least one
    write more than the run, ``unseen_bytes`` of it unseen (TLS adds its own
    bytes to the seen ones, so at least that many)."""
    from pyspark.sql import functions as F

    short = F.coalesce(F.col("written_bytes") < F.col("req_bytes"), F.lit(False))
    return (r.withColumn("n_writes_lower_bound", short)
             .withColumn("n_writes", F.col("n_writes") + F.when(short, 1).otherwise(0))
             .withColumn("unseen_bytes", F.when(short, F.col("req_bytes") - F.col("written_bytes"))))


def _calls_and_marks(reqs, sc, pieces=None):
    """The thread's calls and one marker row per request (``_k`` 0), in one
    frame: the marker carries its request whole in ``_req``; each row has
    its time piece (``_p``), with the copies a piece needs (``with_edges``)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructField, StructType

    from kdiag.analysis.time_pieces import edges, piece_of, with_edges

    req_t = StructType([StructField(f.name, f.dataType, True) for f in reqs.schema.fields])
    flag = lambda c: F.coalesce(F.col(c), F.lit(False))  # noqa: E731
    calls = sc.select(
        RUN, "pid", F.col("ts_us").alias("_ts"), F.lit(1).alias("_k"), F.col("line_no").alias("_line"),
        flag("sock_write").alias("_wr"), flag("sock_read").alias("_rd"), F.col("ret").alias("_ret"),
        F.col("fd").alias("_fd"), F.when(flag("sock_write"), F.col("fd_info")).alias("_fdi"),
        F.lit(None).cast(req_t).alias("_req")).withColumn("_p", piece_of(pieces))
    if pieces is not None:
        calls = with_edges(calls, edges(calls, pieces), req_t)
    marks = reqs.select(
        RUN, "pid", F.col("send_us").alias("_ts"), F.lit(0).alias("_k"), F.col("send_line").alias("_line"),
        F.lit(False).alias("_wr"), F.lit(False).alias("_rd"), F.lit(None).cast("long").alias("_ret"),
        F.lit(None).cast("int").alias("_fd"), F.lit(None).cast("string").alias("_fdi"),
        F.struct(*[F.col(c) for c in reqs.columns]).cast(req_t).alias("_req")).withColumn("_p", piece_of(pieces))
    return calls.unionByName(marks)


def _runs(rows):
    """The markers, each with the run of writes right before it (``_run``,
    null when none) and the next socket read after it (``_next_read``)."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    # A marker has its Sent line's time and line: it sorts after every call
    # before that line's write(2) and right before the write itself.
    fwd = Window.partitionBy(RUN, "pid", "_p").orderBy("_ts", "_line", "_k")
    upto = fwd.rowsBetween(Window.unboundedPreceding, 0)
    one = lambda c: F.when(c, 1).otherwise(0)  # noqa: E731
    wr, call = F.col("_wr"), F.col("_k") == 1
    timed_wr = wr & F.col("_ts").isNotNull()
    ends = call & ~wr
    rows = rows.select(
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
        "_k", "_req", "_next_read", "_cw", "_ctw", "_cb", pos.alias("_pos"),
        F.last(F.when(first, F.struct("_fd", "_fdi")), ignorenulls=True).over(upto).alias("_fw"),
        F.last(F.when(wr, F.col("_ret")), ignorenulls=True).over(upto).alias("_lw"),
        F.last(F.when(first_timed, F.col("_ts")), ignorenulls=True).over(upto).alias("_tw"),
        F.last(F.when(ends, F.struct(pos.alias("at"), "_cw", "_ctw", "_cb")), ignorenulls=True).over(
            fwd.rowsBetween(Window.unboundedPreceding, -1)).alias("_prev_end"))
    pe = lambda c: F.coalesce(F.col("_prev_end").getField(c), F.lit(0))  # noqa: E731
    n = F.col("_cw") - pe("_cw")
    run = F.struct(n.alias("n_writes"),
                   F.when(F.col("_ctw") > pe("_ctw"), F.col("_tw")).alias("send_start_us"),
                   (F.col("_cb") - pe("_cb")).alias("written_bytes"),
                   F.col("_fw._fd").alias("fd"), F.col("_fw._fdi").alias("fd_info"),
                   F.col("_lw").alias("last_write_bytes"),
                   F.col("_prev_end.at").alias("lo"), F.col("_pos").alias("hi"))
    # Copies are walked for their piece's markers' sake, and only markers
    # leave the walk.
    return rows.filter(F.col("_k") == 0).select("_req", "_next_read", F.when(n > 0, run).alias("_run"))


# More example requests than this: their writes are found by a join.
WRITES_FILTER_MAX = 50


def fill_write_sizes(syscalls, examples: dict) -> None:
    """The sizes of each example request's writes, in time order: the
    socket writes on its thread between the calls around its run (a few
    rows, read with the table's own filters)."""
    want = [e for e in examples.values() if e.get("write_sizes") is None and e.get("_run_hi") is not None
            and e.get("n_writes")]
    if want and syscalls is not None:
        got = (_writes_around(syscalls, want) if len(want) <= WRITES_FILTER_MAX
               else _writes_joined(syscalls, want)).collect()
        key = lambda ts, line: (ts is not None, ts or 0, line)  # noqa: E731
        # Each example looks only at its own thread's writes: a fleet's
        # examples (1,250) against all their writes (4,500) were 5.6 M
        # comparisons, 5 s.
        by_thread: dict = {}
        for g in got:
            by_thread.setdefault((None, g.pid), []).append(g)
            if g[RUN]:
                by_thread.setdefault((g[RUN], g.pid), []).append(g)
        for e in want:
            lo, hi = e["_run_lo"], e["_run_hi"]
            top = key(hi["ts_us"], hi["line_no"])
            bottom = key(lo["ts_us"], lo["line_no"]) if lo is not None else None
            mine = [g for g in by_thread.get((e.get(RUN) or None, e["pid"]), [])
                    if key(g.ts_us, g.line_no) < top and (bottom is None or key(g.ts_us, g.line_no) > bottom)]
            # as sort_array of (ts_us, line_no, ret): untimed first, then in line order
            e["write_sizes"] = [g.ret for g in sorted(mine, key=lambda g: key(g.ts_us, g.line_no))]
    for e in examples.values():
        e.pop("_run_lo", None)
        e.pop("_run_hi", None)


def _writes_around(syscalls, want: list[dict]):
    """The socket writes the examples' bounds hold: one filter, which the
    Parquet reader takes."""
    from pyspark.sql import functions as F

    cond = None
    for e in want:
        lo, hi = e["_run_lo"], e["_run_hi"]
        c = F.col("pid").eqNullSafe(F.lit(e["pid"]).cast("int"))
        if e.get(RUN):   # a fleet's run
            c = c & (F.col(RUN) == e[RUN])
        if hi["ts_us"] is not None:
            c = c & (F.col("ts_us").isNull() | (F.col("ts_us") <= hi["ts_us"]))
        if lo is not None and lo["ts_us"] is not None:
            c = c & (F.col("ts_us") >= lo["ts_us"])
        cond = c if cond is None else cond | c
    return flag_syscalls(one_run(syscalls).filter(cond)).filter("sock_write").select(
        RUN, "pid", "ts_us", "line_no", "ret")


def _writes_joined(syscalls, want: list[dict]):
    """The same for many examples (a fleet's): a broadcast join against
    their bounds, as one condition per example would overflow the planner's
    stack (a thousand bundles' examples did)."""
    from pyspark.sql import functions as F

    sc = one_run(syscalls)
    bounds = frame(
        sc.sparkSession,
        [(e.get(RUN) or "", e["pid"], (e["_run_lo"] or {}).get("ts_us"), e["_run_hi"]["ts_us"]) for e in want],
        "b_run string, b_pid int, b_lo long, b_hi long")
    ts = F.col("ts_us")
    cond = ((F.col(RUN) == F.col("b_run")) & F.col("pid").eqNullSafe(F.col("b_pid"))
            & (F.col("b_hi").isNull() | ts.isNull() | (ts <= F.col("b_hi")))
            & (F.col("b_lo").isNull() | (ts >= F.col("b_lo"))))
    cols = [RUN, "kind", "line_no", "pid", "ts_us", "dur_us", "syscall", "fd", "fd_info", "ret"]
    # Only writes can be socket writes (flag_syscalls): the rest is not
    # joined. A write two examples' bounds hold is one write.
    writes = sc.filter(F.col("syscall").isin(*WRITE_CALLS) & (F.col("ret") > 0)).select(*cols)
    near = writes.join(F.broadcast(bounds), cond).select(*cols).dropDuplicates([RUN, "pid", "line_no", "ts_us"])
    return flag_syscalls(near).filter("sock_write").select(RUN, "pid", "ts_us", "line_no", "ret")


def exchanges(sc):
    """Requests inferred from syscalls alone, for producers that log no
    Sent/Received lines: a burst of socket writes on a thread, then the
    first socket read on that fd is its response (a synchronous producer has
    one request in flight). A burst whose first write's bytes the tracer
    kept and that read as a Kafka request header (plaintext: strace -s 256
    and bpfcalls keep them) is named by it: ``request`` its api, ``corr_id``,
    ``client`` its client id; else ``request`` is "exchange", no
    correlation id: pipelined requests would pair with the wrong response,
    which the findings say."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    sc = one_run(sc)
    # A Python worker only where there are bytes to read, one pass over them.
    # useArrow given: left to itself, PySpark 4 reads head_facts' type hints
    # to choose the kind of UDF, cannot, and warns on the user's terminal.
    facts = F.udf(head_facts, HEAD_FACTS_TYPE, useArrow=False)("first_head") if "write_head" in sc.columns else \
        F.lit(None).cast(HEAD_FACTS_TYPE)
    b = _cut_bursts(_bursts(sc)).withColumn("_f", facts).select(
                           F.col("_f.request").alias("_h"), F.col("_f.tls_handshake").alias("_hs"),
                           RUN, "pid", "fd", "fd_info", "n_writes", "write_sizes", "written_bytes", "last_write_bytes",
                           "n_writes_lower_bound", "unseen_bytes",
                           F.col("send_start_us"), F.col("send_end_us").alias("ts_us"),
                           F.col("first_line").alias("send_line"), F.lit(None).cast("long").alias("read_us"),
                           F.lit(None).cast("long").alias("read_line"))
    reads = sc.filter("sock_read").select(
        F.lit(None).cast(HEAD_TYPE).alias("_h"), F.lit(None).cast("boolean").alias("_hs"),
        RUN, "pid", "fd", F.lit(None).cast("string").alias("fd_info"), F.lit(None).cast("long").alias("n_writes"),
        F.lit(None).cast("array<long>").alias("write_sizes"), F.lit(None).cast("long").alias("written_bytes"),
        F.lit(None).cast("long").alias("last_write_bytes"), F.lit(None).cast("boolean").alias("n_writes_lower_bound"),
        F.lit(None).cast("long").alias("unseen_bytes"),
        F.lit(None).cast("long").alias("send_start_us"), "ts_us", F.lit(None).cast("long").alias("send_line"),
        F.col("ts_us").alias("read_us"), F.col("line_no").alias("read_line"))
    # The first read after each row: the last one seen walking backwards
    # (a frame to the partition's end would be rescanned for every row).
    ev = b.unionByName(reads).withColumn("_o", F.coalesce("send_line", "read_line"))
    w = Window.partitionBy(RUN, "pid", "fd").orderBy(F.col("ts_us").desc(), F.col("_o").desc()).rowsBetween(
        Window.unboundedPreceding, -1)
    nxt = F.last(F.when(F.col("read_us").isNotNull(), F.struct("read_us", "read_line")), ignorenulls=True).over(w)
    ev = ev.withColumn("_n", nxt).withColumn("resp_us", F.col("_n.read_us")).withColumn("recv_line", F.col("_n.read_line"))
    ms = lambda a, c: (F.col(a) - F.col(c)) / 1000.0  # noqa: E731
    done = ev.filter(F.col("n_writes").isNotNull() & F.col("resp_us").isNotNull())
    done = _openings(done, sc)
    return (done
              .select(RUN, F.col("_h.client_id").alias("client"),
                      F.coalesce(F.regexp_extract("fd_info", r"->([^\]]+)", 1), F.col("fd").cast("string")).alias("broker"),
                      F.col("_h.corr_id").alias("corr_id"), F.coalesce(F.col("_h.api"), F.lit("exchange")).alias("request"),
                      F.col("written_bytes").alias("req_bytes"), F.col("ts_us").alias("send_us"),
                      F.col("resp_us").alias("recv_us"), F.lit(None).cast("double").alias("rtt_ms"),
                      "pid", "fd", "n_writes", "write_sizes", "send_line", "recv_line", "send_start_us",
                      "last_write_bytes", "n_writes_lower_bound", "unseen_bytes", "opening")
              .withColumn("send_ms", ms("send_us", "send_start_us"))
              .withColumn("wait_ms", ms("recv_us", "send_us"))
              .withColumn("read_ms", F.lit(0.0))
              .withColumn("total_ms", ms("recv_us", "send_start_us")))


def request_of_head(head: str | None) -> tuple[str, int, str | None] | None:
    """(api, correlation id, client id) of the request a socket write
    begins with, from its first bytes as strace printed them; None when
    they are not a Kafka request's (TLS, another protocol, none kept)."""
    if not head:
        return None
    h = request_of_write(unescape_bytes(head))
    if h is None or h.api_name is None:
        return None
    return h.api_name, h.correlation_id, h.client_id


def head_facts(head: str | None) -> tuple[tuple[str, int, str | None] | None, bool]:
    """``request_of_head`` and ``is_tls_handshake`` of one burst's first
    write, for one Python worker pass over the bytes."""
    return request_of_head(head), is_tls_handshake(head)


def _openings(done, sc):
    """``opening``: whether an exchange is part of its connection's opening,
    not a request the producer waited on for its messages. A connection
    opens with its TLS handshake, if any, then ApiVersions (every client
    since Kafka 0.10: librdkafka, the Java client, kafka-python, aiokafka,
    kafkajs). A burst that begins with a TLS handshake record is one
    wherever it is; an unnamed burst is the ApiVersions only when it is the
    first after a connect() the capture holds on that fd: an excerpt that
    begins mid-connection has no opening. Named, ApiVersions is left out by
    its name."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    hs = F.coalesce(F.col("_hs"), F.lit(False))
    connects = sc.filter(F.col("syscall") == "connect").select(
        RUN, "fd", "ts_us", F.col("line_no").alias("send_line"), F.lit(True).alias("_connect"))
    both = done.withColumn("_connect", F.lit(False)).unionByName(connects, allowMissingColumns=True)
    upto = lambda *by: Window.partitionBy(RUN, "fd", *by).orderBy("ts_us", "send_line").rowsBetween(  # noqa: E731
        Window.unboundedPreceding, Window.currentRow)
    both = both.withColumn("_gen", F.sum(F.col("_connect").cast("int")).over(upto()))
    first = F.sum(F.when(~F.col("_connect") & ~hs, 1).otherwise(0)).over(upto("_gen")) == 1
    return (both.filter(~F.col("_connect"))
                .withColumn("opening", hs | (F.col("_h").isNull() & (F.col("_gen") > 0) & first))
                .drop("_connect", "_gen"))


# RFC 8446 5.1's content types of a handshake's records: change_cipher_spec
# (20; TLS 1.3 sends one before its encrypted Finished, for middleboxes) and
# handshake (22).
TLS_HANDSHAKE_TYPES = (20, 22)


def is_tls_handshake(head: str | None) -> bool:
    """Whether a socket write begins with a TLS handshake record: one of
    TLS_HANDSHAKE_TYPES, then the legacy version's major byte 3."""
    if not head:
        return False
    b = unescape_bytes(head[:16])
    return len(b) >= 2 and b[0] in TLS_HANDSHAKE_TYPES and b[1] == 3


def _cut_bursts(b):
    """A burst that began before the capture (burst 0) and is smaller than
    any Produce request is the tail of one whose first writes the capture
    cut off: it left in at least one write more than is seen, of bytes
    unknown."""
    from pyspark.sql import functions as F

    cut = (F.col("burst") == 0) & (F.col("written_bytes") < MIN_PRODUCE_BYTES)
    return (b.withColumn("last_write_bytes", F.element_at("write_sizes", -1))
             .withColumn("n_writes_lower_bound", cut)
             .withColumn("n_writes", F.col("n_writes") + F.when(cut, 1).otherwise(0))
             .withColumn("unseen_bytes", F.lit(None).cast("long")))
