"""Analysis speed: kdiag's Spark job at 1e5, 1e6 and 1e7 requests, beside
DuckDB doing the same join.

Input: the tables ``kdiag parse`` writes for a capture of a producer with
three brokers, made synthetic so that they can be large. Each request is
what strace and librdkafka's debug log show of one Produce round trip on
its broker thread: three syscalls (the socket write of the request, the
poll() wait for the response, the socket read of it) and the two stderr
writes that carry librdkafka's ``Sent``/``Received`` lines (so 5 rows a
request in ``syscalls``, 2 in ``log_writes``, 2 in ``rdkafka_events``),
plus one statistics row per broker and second and each broker socket's
connect(). Waits are mostly fast (lognormal, median 0.8 ms) with a 3 %
tail at 40-48 ms; the verdict is the same at every size. Tables are
generated and written a chunk at a time, in kdiag's schemas and file
layout (Parquet, one file per table), so that 1e7 requests need no more
memory than one chunk.

Spark: ``kdiag.analysis.job.analyze`` itself, the function ``kdiag replay``
calls, on a session started beforehand: the figure is the job, from its
first read of the tables to the findings, without the session's start
(timed on its own) and without parsing (the tables are given). Every size
runs in one session, smallest first, so that only the first run pays the
JVM's warm-up.

DuckDB: the reference, in the same run, on the same Parquet files: the
job's heavy part in SQL, as kdiag's Spark code does it: Sent joined to
Received by (client, broker, CorrId), each request's send burst found from
the broker thread's syscalls, the thread's poll() waits and socket reads
inside each request's window by the same time-bucketed range join, the
per-request split (socket send, wait, read), each request's cause, and the
summary percentiles. Spark does more than that (the input checks for
duplicate rows and clock steps, connections, the findings' evidence), so
the comparison leans towards DuckDB.
"""
from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

from bench.analysis_tables import make_tables
from bench.common import Figure, check

SIZES = (100_000, 1_000_000, 10_000_000)
SMOKE_SIZES = (2_000,)
RATIO_GOAL = "<= 1.2"
# The kdiag functions whose Spark actions took longest, named in a figure's note.
SLOWEST_SHOWN = 6
# The reference's range join joins on (thread, time bucket), then filters.
BUCKET_US = 50_000
# DuckDB's own default is 80 % of the memory; the machine is shared.
DUCKDB_MEMORY = "6GB"


@dataclass(frozen=True)
class Timed:
    seconds: float
    verdict: str | None
    requests: int | None


# ---- the reference: DuckDB, the same work in SQL ----

def _sock() -> str:
    from kdiag.analysis.per_request import SOCKET_INFO

    return f"fd IS NOT NULL AND fd > 2 AND (fd_info IS NULL OR regexp_matches(fd_info, '{SOCKET_INFO}'))"


def _cause_case() -> str:
    """The cause rules in SQL, as a CASE in the registry's rule order, for
    the causes these tables can show: they hold no path RTT, TCP_NODELAY,
    thread samples or throttle times, so no other rule can match."""
    from kdiag.analysis import causes
    from kdiag.analysis.thresholds import NAGLE_EXCESS_MAX_MS, NAGLE_EXCESS_MIN_MS, SLOW_MS

    sql = {
        "unexplained_slow": f"wait_ms IS NULL AND total_ms > {SLOW_MS}",
        "nagle_delayed_ack": f"coalesce(n_writes, 0) >= 2 AND wait_ms >= {NAGLE_EXCESS_MIN_MS} "
                             f"AND wait_ms <= {NAGLE_EXCESS_MAX_MS}",
        "packet_loss": f"wait_ms > {SLOW_MS}",
        "broker_slow": f"wait_ms > {SLOW_MS}",
    }
    whens, labels = [], set()
    for cause in causes.CAUSES:
        label = causes.label_of(cause)
        if cause.NAME in sql and label not in labels:
            labels.add(label)
            whens.append(f"WHEN {sql[cause.NAME]} THEN '{label}'")
    return "CASE " + " ".join(whens) + f" ELSE '{causes.OTHERWISE}' END"


def _in(names) -> str:
    return "(" + ", ".join(f"'{n}'" for n in names) + ")"


_SPLIT_BUCKETED = """
    CREATE TEMP TABLE split AS
    WITH bursts AS (
        SELECT pid, burst, count(*) n_writes, min(ts_us) send_start_us, sum(ret) written_bytes,
               list(ret ORDER BY ts_us, ret) write_sizes, first(fd) fd, first(fd_info) fd_info
        FROM sc WHERE sock_write GROUP BY pid, burst),
    r1 AS (
        SELECT reqs.*, bs.n_writes, bs.send_start_us, bs.written_bytes, bs.write_sizes, bs.fd, bs.fd_info,
               coalesce(bs.send_start_us, reqs.send_us) start_us
        FROM reqs LEFT JOIN sc sr ON sr.line_no = reqs.send_line
                  LEFT JOIN bursts bs ON bs.pid = reqs.pid AND bs.burst = sr.burst - 1),
    rb AS (
        SELECT send_line, recv_line, send_us, recv_us, pid,
               unnest(range(floor(start_us / {b})::BIGINT, floor(recv_us / {b})::BIGINT + 1)) bucket
        FROM r1),
    ev AS (SELECT pid, ts_us, dur_us, wait, sock_read, floor(ts_us / {b})::BIGINT bucket
           FROM sc WHERE wait OR sock_read),
    agg AS (
        SELECT rb.send_line, rb.recv_line, rb.send_us, rb.recv_us,
               sum(ev.dur_us) FILTER (WHERE ev.wait) poll_us,
               min(ev.ts_us) FILTER (WHERE ev.sock_read) first_read_us,
               count(*) FILTER (WHERE ev.wait) n_polls
        FROM rb JOIN ev USING (pid, bucket)
        WHERE ev.ts_us >= rb.send_us AND ev.ts_us <= rb.recv_us
        GROUP BY ALL)
    SELECT r1.*, agg.first_read_us,
           (r1.send_us - r1.start_us) / 1000.0 send_ms, (agg.first_read_us - r1.send_us) / 1000.0 wait_ms,
           (r1.recv_us - agg.first_read_us) / 1000.0 read_ms, (r1.recv_us - r1.start_us) / 1000.0 total_ms
    FROM r1 LEFT JOIN agg USING (send_line, recv_line, send_us, recv_us)"""

# kdiag's own way (kdiag.analysis.per_request.split_requests), in DuckDB's words: one
# pass in (time, line) order per thread with a marker per request right
# before its Sent line's write(2); the run of writes before each marker and
# the next read after it.
_SPLIT_SORTED = """
    CREATE TEMP TABLE split AS
    WITH rq AS (SELECT row_number() OVER () rid, * FROM reqs),
    ev AS (
        SELECT pid, ts_us t, 1 k, line_no line, sock_write wr, sock_read rd, ret, fd,
               CASE WHEN sock_write THEN fd_info END fdi, NULL::BIGINT rid FROM sc
        UNION ALL
        SELECT pid, send_us, 0, send_line, false, false, NULL, NULL, NULL, rid FROM rq),
    s1 AS (
        SELECT *, sum(wr::INT) OVER run cw, sum((wr AND t IS NOT NULL)::INT) OVER run ctw,
               sum(CASE WHEN wr THEN ret ELSE 0 END) OVER run cb,
               lead(CASE WHEN rd THEN t END IGNORE NULLS) OVER fwd next_read,
               lag(CASE WHEN k = 1 THEN {'wr': wr, 'untimed': t IS NULL} END IGNORE NULLS) OVER fwd prev_call
        FROM ev
        WINDOW fwd AS (PARTITION BY pid ORDER BY t ASC NULLS FIRST, line, k),
               run AS (PARTITION BY pid ORDER BY t ASC NULLS FIRST, line, k ROWS UNBOUNDED PRECEDING)),
    s2 AS (
        SELECT pid, k, line, wr, rid, next_read, cw, ctw, cb,
               last_value(CASE WHEN wr AND (prev_call IS NULL OR NOT prev_call.wr)
                               THEN {'fd': fd, 'fdi': fdi} END IGNORE NULLS) OVER run fw,
               last_value(CASE WHEN wr AND t IS NOT NULL AND (prev_call IS NULL OR NOT prev_call.wr
                               OR prev_call.untimed) THEN t END IGNORE NULLS) OVER run tw,
               last_value(CASE WHEN k = 1 AND NOT wr THEN {'cw': cw, 'ctw': ctw, 'cb': cb} END IGNORE NULLS)
                   OVER (PARTITION BY pid ORDER BY t ASC NULLS FIRST, line, k
                         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) prev_end
        FROM s1
        WINDOW run AS (PARTITION BY pid ORDER BY t ASC NULLS FIRST, line, k ROWS UNBOUNDED PRECEDING)),
    m AS (
        SELECT rid, next_read,
               CASE WHEN cw > coalesce(prev_end.cw, 0) THEN {
                   'n_writes': cw - coalesce(prev_end.cw, 0),
                   'send_start_us': CASE WHEN ctw > coalesce(prev_end.ctw, 0) THEN tw END,
                   'written_bytes': cb - coalesce(prev_end.cb, 0), 'fd': fw.fd, 'fd_info': fw.fdi} END run
        FROM s2 WHERE k = 0),
    r1 AS (
        SELECT rq.*, m.run.n_writes, m.run.send_start_us, m.run.written_bytes, m.run.fd, m.run.fd_info,
               CASE WHEN rq.send_us IS NOT NULL AND m.next_read <= rq.recv_us THEN m.next_read END first_read_us,
               coalesce(m.run.send_start_us, rq.send_us) start_us
        FROM rq JOIN m USING (rid))
    SELECT * EXCLUDE (rid), (send_us - start_us) / 1000.0 send_ms, (first_read_us - send_us) / 1000.0 wait_ms,
           (recv_us - first_read_us) / 1000.0 read_ms, (recv_us - start_us) / 1000.0 total_ms
    FROM r1"""


def _duck_input_checks(one) -> None:
    """The input checks: candidates for repeated rows, then clock steps per thread."""
    one("SELECT count(*) FROM (SELECT hash(pid, ts_us, dur_us, kind, syscall, fd, fd_info, args, ret, errno, "
        "unfinished, data) h FROM syscalls WHERE ts_us IS NOT NULL AND ts_us % 1000000 != 0 "
        "GROUP BY h HAVING count(*) > 1)")
    one("SELECT count(*) FROM (SELECT hash(pid, ts_us, log_ts_us, level, facility, client, thread, broker, event, "
        "request, api_version, size_bytes, corr_id, rtt_ms, detail, text) h FROM log_writes "
        "WHERE ts_us IS NOT NULL AND ts_us % 1000000 != 0 GROUP BY h HAVING count(*) > 1)")
    one("SELECT count(*) FROM (SELECT hash(ts_us, level, facility, client, thread, broker, event, request, "
        "api_version, size_bytes, corr_id, rtt_ms, detail, text) h FROM rdkafka_events WHERE ts_us IS NOT NULL "
        "AND event IN ('send', 'send_partial', 'recv', 'retry', 'unknown_corrid') AND corr_id IS NOT NULL "
        "GROUP BY h HAVING count(*) > 1)")
    one("SELECT count(*) FROM (SELECT hash(ts_us, client, broker, nodeid, state, rtt_avg_ms, rtt_p50_ms, tx) h "
        "FROM stats GROUP BY h HAVING count(*) > 1)")
    one("SELECT count(*) FROM (SELECT line_no, ts_us, lag(line_no) OVER w a_line, lag(ts_us) OVER w a_ts, "
        "lag(ts_us + coalesce(dur_us, 0)) OVER w a_end FROM syscalls WHERE ts_us IS NOT NULL "
        "WINDOW w AS (PARTITION BY pid ORDER BY line_no)) WHERE a_line IS NOT NULL AND line_no > a_line "
        "AND (ts_us - a_ts < -1000 OR ts_us - a_end > 60000000)")
    one("SELECT count(*) FROM (SELECT line_no, ts_us, lag(line_no) OVER w a_line, lag(ts_us) OVER w a_ts "
        "FROM rdkafka_events WHERE ts_us IS NOT NULL WINDOW w AS (PARTITION BY client, thread ORDER BY line_no)) "
        "WHERE a_line IS NOT NULL AND line_no > a_line AND (ts_us - a_ts < -250000 OR ts_us - a_ts > 60000000)")


def duckdb_job(tables: Path, bucketed: bool = False) -> Timed:
    """The reference: kdiag's analysis of the large tables, step for step, in
    DuckDB SQL (2 threads, as Spark's local[2]): the input checks (repeated
    rows by a hash of their content, clock steps per thread), Sent paired
    with Received, the send bursts, the bucketed range join of each
    request's window with its thread's waits and reads, the split, the
    causes and the summary percentiles."""
    import duckdb

    from kdiag.analysis import causes
    from kdiag.analysis.causes import _slow_wait
    from kdiag.analysis.per_request import READ_CALLS, WAIT_CALLS, WRITE_CALLS
    from kdiag.analysis.thresholds import DOMINANT_SHARE, TAIL_TIME_SHARE

    t0 = time.monotonic()
    con = duckdb.connect(config={"threads": 2, "memory_limit": DUCKDB_MEMORY,
                                 "temp_directory": str(tables / "duckdb.tmp")})
    con.execute("SET enable_progress_bar = false")
    for name in ("syscalls", "log_writes", "rdkafka_events", "stats"):
        con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet('{tables / (name + '.parquet')}')")

    def one(sql: str):
        return con.execute(sql).fetchone()

    _duck_input_checks(one)
    # Sent paired with the latest Received before it, by (client, broker, CorrId)
    con.execute("""
        CREATE TEMP TABLE reqs AS
        WITH s AS (SELECT client, broker, corr_id, request, size_bytes req_bytes, ts_us send_us,
                          line_no send_line, pid FROM log_writes WHERE event = 'send'),
             r AS (SELECT client, broker, corr_id, ts_us recv_us, line_no recv_line, rtt_ms,
                          size_bytes resp_bytes FROM log_writes WHERE event = 'recv')
        SELECT * EXCLUDE (k) FROM (
            SELECT r.*, s.request, s.req_bytes, s.send_us, s.send_line, s.pid,
                   row_number() OVER (PARTITION BY r.client, r.broker, r.corr_id, r.recv_line
                                      ORDER BY s.send_line DESC) k
            FROM r JOIN s USING (client, broker, corr_id) WHERE s.send_line < r.recv_line)
        WHERE k = 1""")
    one("SELECT count(*) FILTER (WHERE recv_us < send_us) FROM reqs")
    # The bucketed join numbers the bursts of writes beforehand.
    burst = ("sum(CASE WHEN sock_write THEN 0 ELSE 1 END) OVER (PARTITION BY pid ORDER BY ts_us, line_no "
             "ROWS UNBOUNDED PRECEDING) burst" if bucketed else "NULL burst")
    con.execute(f"""
        CREATE TEMP TABLE sc AS
        SELECT *, {burst}
        FROM (SELECT line_no, pid, ts_us, dur_us, syscall, fd, fd_info, ret,
                     coalesce(syscall IN {_in(WRITE_CALLS)} AND {_sock()} AND ret > 0, false) sock_write,
                     coalesce(syscall IN {_in(READ_CALLS)} AND {_sock()} AND ret > 0, false) sock_read,
                     coalesce(syscall IN {_in(WAIT_CALLS)}, false) wait
              FROM syscalls WHERE kind = 'syscall')""")
    con.execute("SELECT line_no, pid, ts_us, dur_us, syscall, fd, fd_info, args, ret FROM syscalls "
                "WHERE kind = 'syscall' AND (syscall IN ('connect', 'setsockopt', 'getsockopt', 'close', 'socket') "
                f"OR (syscall IN {_in(WAIT_CALLS)} AND contains(args, 'POLLOUT'))) ORDER BY ts_us, line_no").fetchall()
    con.execute(_SPLIT_BUCKETED.format(b=BUCKET_US) if bucketed else _SPLIT_SORTED)
    one("SELECT count(*), quantile_cont(wait_ms, 0.5) FROM split WHERE n_writes = 1 AND wait_ms IS NOT NULL")
    con.execute(f"""
        CREATE TEMP TABLE rq AS
        SELECT *, {_cause_case()} cause
        FROM split WHERE request = 'Produce'""")
    n, k = one(f"SELECT count(*), count(*) FILTER (WHERE cause = '{_slow_wait.LABEL}') FROM rq")
    con.execute(f"UPDATE rq SET cause = '{_slow_wait.resolve(n, k, None)}' WHERE cause = '{_slow_wait.LABEL}'")
    one("SELECT count(*), approx_quantile(total_ms, [0.5, 0.99]), approx_quantile(rtt_ms, [0.5, 0.99]), "
        "approx_quantile(send_ms, 0.5), approx_quantile(wait_ms, 0.5), approx_quantile(read_ms, 0.5), "
        "min(send_us), max(recv_us), list_sort(list(DISTINCT broker)) FROM rq")
    per = con.execute("SELECT cause, count(*), approx_quantile(wait_ms, [0.5, 0.99]), sum(total_ms) "
                      "FROM rq GROUP BY cause").fetchall()
    con.execute("SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY cause ORDER BY wait_ms, send_us) i, "
                "count(*) OVER (PARTITION BY cause) c FROM rq) WHERE i = c // 2 + 1").fetchall()
    secs = time.monotonic() - t0
    con.close()
    time_of = {c: t or 0.0 for c, _, _, t in per}
    all_time = sum(time_of.values()) or 1.0
    counts = {c: k for c, k, _, _ in per}
    top = max(counts, key=counts.get) if counts else None
    verdict = top if top and counts[top] / n >= DOMINANT_SHARE and top != causes.OTHERWISE else next(
        (c for c in causes.TAIL_CAUSES if time_of.get(c, 0) / all_time >= TAIL_TIME_SHARE), causes.OTHERWISE)
    return Timed(secs, verdict, n)


# ---- Spark: kdiag's own job ----

def spark_job(spark, tables: Path, steps: dict[str, float] | None = None,
              functions: dict[str, float] | None = None) -> Timed:
    """``kdiag.analysis.job.analyze``, what replay and trace run after parsing.
    ``steps``, ``functions``: filled with the seconds of Spark actions per
    step and per kdiag function (see ``action_steps``)."""
    from kdiag.analysis.job import analyze

    t0 = time.monotonic()
    with action_steps(steps if steps is not None else {}, functions):
        f = analyze(spark, tables, {})
    return Timed(time.monotonic() - t0, f["verdict"], f["summary"].get("requests"))


# kdiag function that started a Spark action -> the step it belongs to. The
# split requests are cached, and the first action that reads them (the
# negative-latency count, in line on an input this size) computes them.
STEPS = {
    "tables_with_copies": "input checks", "drop_duplicates": "input checks", "clock_steps": "input checks",
    "_steps_of": "input checks", "_confirm_silence": "input checks",
    "exclude_spanning": "input checks", "negative_count": "pairing and split",
    "_facts": "facts and connections", "connections": "facts and connections",
    "_handshake_waits": "facts and connections",
}


@contextlib.contextmanager
def action_steps(into: dict[str, float], functions: dict[str, float] | None = None):
    """Wall time of every Spark action (collect, count) the analysis runs,
    summed per step: the innermost kdiag function on the stack names it
    (``STEPS``; anything else is "causes and evidence"). Actions that run
    at once on a small input are each counted whole. ``functions``: the
    same times per that function ("signals.signals_by_run"), which is how a
    step that grew is traced to the job that grew."""
    import traceback

    import kdiag

    package = os.path.dirname(kdiag.__file__) + os.sep
    try:
        # Spark 4: the DataFrame a local session makes; the base class's
        # actions are abstract there.
        from pyspark.sql.classic.dataframe import DataFrame
    except ImportError:
        from pyspark.sql import DataFrame

    saved = {name: getattr(DataFrame, name) for name in ("collect", "count")}

    def wrapped(orig):
        def timed(self, *a, **k):
            t0 = time.monotonic()
            try:
                return orig(self, *a, **k)
            finally:
                inner = next((fr for fr in reversed(traceback.extract_stack())
                              if fr.filename.startswith(package)), None)
                if inner is not None:
                    took = time.monotonic() - t0
                    step = STEPS.get(inner.name, "causes and evidence")
                    into[step] = into.get(step, 0.0) + took
                    if functions is not None:
                        name = f"{Path(inner.filename).stem}.{inner.name}"
                        functions[name] = functions.get(name, 0.0) + took
        return timed

    for name, orig in saved.items():
        setattr(DataFrame, name, wrapped(orig))
    try:
        yield into
    finally:
        for name, orig in saved.items():
            setattr(DataFrame, name, orig)


# ---- the benchmark ----

def _fmt(times: list[float]) -> str:
    return "/".join(f"{t:.1f}" for t in sorted(times))


def run(smoke: bool, work: Path) -> list[Figure]:
    import shutil

    work.mkdir(parents=True, exist_ok=True)
    sizes = SMOKE_SIZES if smoke else tuple(int(x) for x in os.environ.get(
        "KDIAG_BENCH_ANALYSIS_SIZES", ",".join(map(str, SIZES))).split(","))
    figs: list[Figure] = []
    from kdiag.analysis.spark import session

    t0 = time.monotonic()
    spark = session("kdiag-bench")
    started = time.monotonic() - t0
    figs.append(Figure("analysis", "Spark session start", round(started, 2), "s",
                       note=f"local[2], driver heap {spark.conf.get('spark.driver.memory', '?')}: JVM and "
                            "SparkSession, paid once per process, not in the job figures"))
    last = None
    for n in sizes:
        tables = work / f"tables-{n}"
        t0 = time.monotonic()
        rows = make_tables(tables, n)
        made = time.monotonic() - t0
        repeats = 1 if smoke or n >= 10_000_000 else 2
        steps: list[dict[str, float]] = [{} for _ in range(repeats)]
        functions: list[dict[str, float]] = [{} for _ in range(repeats)]
        sp = [spark_job(spark, tables, steps[i], functions[i]) for i in range(repeats)]
        dk = [duckdb_job(tables, bucketed=True) for _ in range(repeats)]
        s_best, d_best = min(t.seconds for t in sp), min(t.seconds for t in dk)
        best = [t.seconds for t in sp].index(s_best)
        best_steps = steps[best]
        slowest = sorted(functions[best].items(), key=lambda kv: -kv[1])[:SLOWEST_SHOWN]
        agree = sp[0].verdict == dk[0].verdict and sp[0].requests == dk[0].requests
        shown = f"python -m bench --only analysis  # {n:,} requests"
        note = (f"{rows['syscalls']:,} syscalls, {rows['log_writes']:,} log lines written to stderr, "
                f"{rows['rdkafka_events']:,} librdkafka log lines, tables made in {made:.0f} s; best of "
                f"{repeats} ({_fmt([t.seconds for t in sp])} s), warm JVM, without session start or parsing; "
                f"verdict {sp[0].verdict}, {sp[0].requests:,} Produce requests"
                + ("" if agree else f"; DuckDB disagrees: {dk[0].verdict}, {dk[0].requests}")
                + "; Spark actions by step: " + ", ".join(f"{k} {v:.1f} s" for k, v in best_steps.items())
                + "; the slowest by the kdiag function that ran them: "
                + ", ".join(f"{k} {v:.1f} s" for k, v in slowest))
        figs.append(Figure("analysis", f"Spark job, {n:,} requests", round(s_best, 2), "s",
                           reference="DuckDB, the same work", ref_value=round(d_best, 2), command=shown, note=note))
        figs.append(Figure("analysis", f"DuckDB same work, {n:,} requests", round(d_best, 2), "s", command=shown,
                           note=f"best of {repeats} ({_fmt([t.seconds for t in dk])} s), 2 threads, "
                                f"{DUCKDB_MEMORY} memory limit, bucketed range join; verdict {dk[0].verdict}"))
        last = (n, s_best, d_best)
        shutil.rmtree(tables, ignore_errors=True)
    n, s_best, d_best = last
    goal = RATIO_GOAL if n >= 10_000_000 else None
    figs.append(Figure("analysis", f"Spark / DuckDB at {n:,} requests", round(s_best / d_best, 2), "x", goal,
                       goal and check(s_best / d_best, goal), "DuckDB, the same work", round(d_best, 2),
                       f"python -m bench --only analysis  # {n:,} requests",
                       note=f"Spark {s_best:.1f} s / DuckDB {d_best:.1f} s"))
    return figs

