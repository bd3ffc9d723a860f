"""Connections and the path: connect(), setsockopt(TCP_NODELAY) and the
handshake wait per socket (a small table, joined back to the requests by fd
and time), TCP_NODELAY sampled live from sockets, and the path's round trip."""
from __future__ import annotations

import re
from pathlib import Path

from kdiag.analysis.per_request import WAIT_CALLS
from kdiag.analysis.spark_plumbing import RUN, frame, one_run, pctl, quantile, read_table
from kdiag.analysis.thresholds import SYN_RETRANSMIT_MS

# A wait after connect() times its handshake only this soon after it.
HANDSHAKE_WINDOW_US = 10_000_000
MAX_HANDSHAKE_SPANS = 100
DNS_PORT = 53

_PEER = re.compile(r'sin6?_port=htons\((\d+)\).*?(?:inet_addr\("([^"]+)"\)|inet_pton\(AF_INET6, "([^"]+)")')


def connections(syscalls, many: bool = False) -> list[dict]:
    """Per connect(): peer, TCP_NODELAY as set before it, handshake wait.

    ``setsockopt(..., TCP_NODELAY, [1], ...)`` comes before ``connect()`` in
    librdkafka; absent between the socket's previous close and the connect,
    the socket kept Nagle on. Few rows: computed on the driver.

    ``syscalls`` is best the table as read, so that the filters reach the
    Parquet reader: row groups without one of these calls are skipped
    unread, and of the waits (librdkafka polls with POLLOUT before most
    sends) only those that can time a handshake are read at all: on their
    connect()'s thread, within 10 s of it.

    ``many``: a fleet's runs, whose rows (a thousand runs: 240,000 calls and
    140,000 waits) come back as Arrow, 5.8 -> 2.5 s for the calls; a small
    input's few rows come back faster as they are."""
    from pyspark.sql import functions as F

    cols = [RUN, "line_no", "pid", "ts_us", "dur_us", "syscall", "fd", "fd_info", "args", "ret"]
    sc = one_run(syscalls).filter(F.col("kind") == "syscall")
    got = _collected if many else (lambda df: df.collect())
    rows = got(sc.filter(F.col("syscall").isin("connect", "setsockopt", "getsockopt", "close", "socket")).select(
        *cols))
    rows += _handshake_waits(sc, rows, cols, got)
    runs: dict = {}
    for r in rows:   # a fleet's runs apart: their pids and fds are their own
        runs.setdefault(getattr(r, RUN), []).append(r)
    conns = []
    for run, mine in runs.items():
        mine.sort(key=lambda r: (r.ts_us is not None, r.ts_us or 0, r.line_no is not None, r.line_no or 0))
        conns += [{**c, RUN: run} if run else c for c in _walk(mine)]
    return conns


def _collected(df) -> list:
    """The rows, by way of Arrow, as named tuples (attribute access as a Row)."""
    from collections import namedtuple

    t = df.toArrow()
    row = namedtuple("Row", t.column_names)
    return [row(*v) for v in zip(*(c.to_pylist() for c in t.columns))] if t.num_rows else []


def _handshake_waits(sc, rows: list, cols: list[str], got=lambda df: df.collect()) -> list:
    """The POLLOUT waits that can time a handshake: on a connect()'s thread,
    within HANDSHAKE_WINDOW_US of it (all of them in a reconnect storm)."""
    from pyspark.sql import functions as F

    spans: dict = {}
    for r in rows:
        if r.syscall == "connect" and r.fd is not None and "AF_INET" in (r.args or "") and r.ts_us is not None:
            spans.setdefault((getattr(r, RUN), r.pid), []).append(r.ts_us)
    near = []
    for (run, pid), starts in spans.items():
        lo = hi = None
        for t in sorted(starts):
            if hi is not None and t <= hi + 1:
                hi = t + HANDSHAKE_WINDOW_US - 1
                continue
            if lo is not None:
                near.append((run, pid, lo, hi))
            lo, hi = t, t + HANDSHAKE_WINDOW_US - 1
        near.append((run, pid, lo, hi))
    polls = F.col("syscall").isin(WAIT_CALLS) & F.col("args").contains("POLLOUT")
    if len(near) > MAX_HANDSHAKE_SPANS and any(run for run, *_ in near):
        # A fleet's runs: each run's spans by a broadcast join (the
        # condition per span would overflow the planner's stack).
        spans = frame(sc.sparkSession, near, "h_run string, h_pid int, h_lo long, h_hi long")
        return got(sc.filter(polls).join(F.broadcast(spans), (F.col(RUN) == F.col("h_run"))
                                         & F.col("pid").eqNullSafe(F.col("h_pid"))
                                         & F.col("ts_us").between(F.col("h_lo"), F.col("h_hi"))).select(
            *cols).dropDuplicates([RUN, "pid", "line_no", "ts_us"]))
    if len(near) > MAX_HANDSHAKE_SPANS:   # a reconnect storm: read them all
        return got(sc.filter(polls).select(*cols))
    if near:
        cond = None
        for run, pid, lo, hi in near:
            c = F.col("pid").eqNullSafe(F.lit(pid).cast("int")) & F.col("ts_us").between(lo, hi)
            c = c & (F.col(RUN) == run) if run else c
            cond = c if cond is None else cond | c
        return got(sc.filter(polls & cond).select(*cols))
    return []


def _walk(rows: list) -> list[dict]:
    """The connections, from the rows in time order: each close forgets the
    fd's TCP_NODELAY, each connect() takes what was set since."""
    conns: list[dict] = []
    last_close: dict[int, int] = {}
    nodelay_at: dict[int, tuple[int, int, bool]] = {}
    for row in rows:
        name, fd, args = row.syscall, row.fd, row.args or ""
        if name == "close" and fd is not None:
            last_close[fd] = row.ts_us
            nodelay_at.pop(fd, None)
            c = _open_conn(conns, row.pid, fd, row.ts_us)
            if c is not None and c.get("closed_us") is None:
                c["closed_us"] = row.ts_us
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
                # The resolver's socket (getaddrinfo() connect()s a UDP or
                # TCP socket to port 53): a lookup, not a broker's handshake.
                "dns": bool(m) and m.group(1) == str(DNS_PORT),
            })
        elif name == "getsockopt" and fd is not None and "SO_ERROR" in args:
            # librdkafka asks SO_ERROR once the connecting socket is writable:
            # the handshake ended with the last POLLOUT wait before it. (Its
            # first wait may have woken for the wake-up pipe instead.)
            c = _open_conn(conns, row.pid, fd, row.ts_us)
            if c is not None and c["handshake_ms"] is None and not c["dns"]:
                _set_handshake(c, c.pop("_last_wait", None), row.ts_us)
        elif row.dur_us is not None:
            for c in reversed(conns):
                if c["pid"] == row.pid and c["handshake_ms"] is None and not c["dns"] and row.ts_us >= c["connect_us"] \
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
        out[r["fd"]] = sampled_connection(r["fd"], r["remote"], r["nodelay"])
    return list(out.values())


def sampled_connection(fd: int, remote: str | None, nodelay) -> dict:
    """A socket as sampled live, in the shape of a connection ``_walk`` found:
    no connect() seen, so it stands from the capture's start."""
    return {"fd": fd, "pid": None, "connect_us": 0, "connect_line": None, "peer": remote,
            "nodelay": bool(nodelay), "nodelay_line": None, "handshake_ms": None, "sampled": True}



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

    cols = {"c_run": "string", "c_fd": "int", "connect_us": "long", "nodelay": "boolean", "connect_line": "long",
            "peer": "string", "nodelay_line": "long"}
    schema = ", ".join(f"{k} {t}" for k, t in cols.items())
    rows = [(c.get(RUN, ""), c["fd"], c["connect_us"], c["nodelay"], c["connect_line"], c["peer"], c["nodelay_line"])
            for c in conns]
    cdf = frame(spark, rows, schema)
    cdf = cdf.withColumn("until_us", F.lead("connect_us").over(
        Window.partitionBy("c_run", "c_fd").orderBy("connect_us")))
    cond = ((F.col(RUN) == F.col("c_run")) & (F.col("fd") == F.col("c_fd")) & (F.col("send_us") >= F.col("connect_us"))
            & (F.col("until_us").isNull() | (F.col("send_us") < F.col("until_us"))))
    return one_run(produce).join(F.broadcast(cdf), cond, "left").drop("c_run", "c_fd", "until_us")



# Probe methods of the user's own tools (kdiag.parsers.traceroute, .mtr,
# .ping) that reach the broker's port, and what each is called in a source.
USER_TCP_METHODS = ("tcptraceroute", "traceroute_t", "mtr_tcp")
USER_TOOL_NAMES = {"tcptraceroute": "tcptraceroute", "traceroute_t": "traceroute -T", "mtr_tcp": "mtr --tcp",
                   "traceroute_udp": "traceroute (UDP)", "traceroute_icmp": "traceroute -I",
                   "traceroute": "traceroute", "mtr_udp": "mtr --udp", "mtr_icmp": "mtr", "mtr": "mtr",
                   "icmp_ping": "ping"}


def path_rtt_of(spark, tables_dir, conns: list[dict]) -> tuple[float | None, str | None, bool]:
    """The path round trip, from the best source there is: kdiag's own
    connect() handshakes, then its SYN probes' answers from the broker port,
    then the user's own TCP tool output to the broker port (tcptraceroute,
    traceroute -T, mtr --tcp), then the wait after the producer's own
    connect() in strace, then the user's ping or UDP/ICMP traceroute to the
    broker's host, then ``ss -ti``'s RTT of the producer's sockets."""
    hs = pr = None
    if tables_dir is not None:
        hs = read_table(spark, Path(tables_dir), "handshakes")
        if hs is not None:
            row = handshake_rtts(hs).first()
            hs = (row.k, row.m) if row.k else None
        if hs is None:
            pr = read_table(spark, Path(tables_dir), "probes")
    by_method = {r.method: (r.k, r.m) for r in probe_rtts(pr).collect()} if pr is not None else {}
    return path_choice(hs, by_method, conns, lambda: _ss_rtt(tables_dir))


def handshake_rtts(hs, keys: tuple = ()):
    """kdiag's own connect() handshakes: how many, and their median."""
    from pyspark.sql import functions as F

    ok = hs.filter(F.col("error").isNull() & F.col("rtt_ms").isNotNull())
    cols = [F.count("*").alias("k"), quantile("rtt_ms", 0.5).alias("m")]
    return ok.groupBy(*keys).agg(*cols) if keys else ok.agg(*cols)


def probe_rtts(pr, keys: tuple = ()):
    """Answers per probe method, and their median: kdiag's own probes
    (method syn or connect) under a null method, the user's tools by name."""
    from pyspark.sql import functions as F

    return pr.filter(F.col("answer").isin("open", "closed", "reply") & F.col("rtt_ms").isNotNull()).groupBy(
        *keys, F.when(F.col("method").isin(*USER_TOOL_NAMES), F.col("method")).alias("method")).agg(
        F.count("*").alias("k"), quantile("rtt_ms", 0.5).alias("m"))


def path_choice(hs: tuple | None, by_method: dict, conns: list[dict], ss) -> tuple[float | None, str | None, bool]:
    """The path RTT from what was measured (see ``path_rtt_of``): ``hs``
    (count, median) of kdiag's handshakes or None, ``by_method`` method ->
    (count, median) of probes, the run's connections, and ``ss`` a callable
    giving ``ss -ti``'s figure (or None), asked only when it decides."""
    if hs is not None:
        return hs[1], f"TCP connect() handshakes to the brokers by kdiag ({hs[0]})", False
    if None in by_method:
        k, m = by_method[None]
        return m, f"SYN probes answered by the broker port ({k})", False
    # A packet capture's producer connections (analysis.wire): SYN to
    # SYN-ACK where the capture was taken, the producer's host at best.
    seen = [c["handshake_ms"] for c in conns if c.get("wire") and c.get("handshake_ms") is not None
            and c["handshake_ms"] < SYN_RETRANSMIT_MS]
    if seen:
        return pctl(seen, 0.5), f"TCP handshakes in the packet capture ({len(seen)})", False
    tcp = _user_path(by_method, USER_TCP_METHODS, "answers from the broker's port")
    if tcp:
        return tcp
    # A handshake that held a SYN retransmit times the retransmit, not the
    # path.
    measured = [c for c in conns if c.get("handshake_ms") is not None and c["handshake_ms"] < SYN_RETRANSMIT_MS
                and not c.get("wire")]
    bound = bool(measured) and all(c.get("handshake_upper_bound") for c in measured)
    if measured and not bound:
        return pctl([c["handshake_ms"] for c in measured], 0.5), "strace: connect() to writable", False
    host = _user_path(by_method, tuple(m for m in USER_TOOL_NAMES if m not in USER_TCP_METHODS),
                      "answers from the broker's host, not its port")
    if host:
        return host
    held = ss()
    if held:
        return held
    if not measured:
        return None, None, False
    return (pctl([c["handshake_ms"] for c in measured], 0.5), "strace: connect() to writable; an upper bound, "
            "the handshake was over before librdkafka polled", True)


def _user_path(by_method: dict, methods: tuple, reached: str) -> tuple[float, str, bool] | None:
    """The median RTT of the user's tool of these methods with the most
    answers from the target, and a source that names the tool."""
    got = [(by_method[m][0], m) for m in methods if m in by_method]
    if not got:
        return None
    k, method = max(got)
    return by_method[method][1], f"{USER_TOOL_NAMES[method]} output (user's), {k} {reached}", False


def _ss_rtt(tables_dir) -> tuple[float, str, bool] | None:
    """RTT from pasted ``ss -ti`` listings (sockets rows without a time):
    minrtt where ss printed it; else the smoothed rtt, an upper bound, as a
    send held by Nagle inflates it."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    path = Path(tables_dir) / "sockets.parquet" if tables_dir else None
    if path is None or not path.exists():
        return None
    t = pq.read_table(path, columns=["ts_us", "min_rtt_ms", "rtt_ms"])
    t = t.filter(pc.is_null(t["ts_us"]))
    return ss_choice(t["min_rtt_ms"].to_pylist(), t["rtt_ms"].to_pylist())


def ss_choice(min_rtts: list, rtts: list) -> tuple[float, str, bool] | None:
    """minrtt where ss printed it; else the smoothed rtt, an upper bound."""
    for vals, what, bound in ((min_rtts, "minrtt", False),
                              (rtts, "smoothed rtt; an upper bound, a held send inflates it", True)):
        vals = [v for v in vals if v is not None]
        if vals:
            return pctl(vals, 0.5), f"ss -ti output (user's), {what} of {len(vals)} socket(s)", bound
    return None
