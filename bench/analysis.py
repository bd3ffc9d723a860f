"""The Spark job at 1e5, 1e6 and 1e7 requests, beside DuckDB doing the same.

What is timed is the heart of the analysis, the part whose cost grows with
the capture: kdiag's own functions (kdiag.analysis.requests,
prepare_syscalls, split_requests), which pair each Sent line with its
Received line by (client, broker, CorrId), find the burst of socket writes
before the Sent line, and range-join every request's send..receive window
with the waits and reads of its thread (by time buckets), written out as a
Parquet table of split requests. DuckDB runs the same join in SQL (below)
on the same Parquet files, as the reference. Both times are from reading
the Parquet files to the written result; Spark's session start is timed
apart (it is paid once per run, whatever the size).

The input is synthetic, in kdiag's schemas: per request, on one of 8 broker
threads, a socket write, the Sent line written to stderr, a poll() of
40-48 ms, a socket read and the Received line: three socket syscalls and
two log lines.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from bench.common import Figure, check

SIZES = (100_000, 1_000_000, 10_000_000)
SMOKE_SIZES = (2_000,)
RATIO_GOAL = "<= 2"
THREADS = 8
CHUNK = 500_000

DUCKDB_SQL = """
WITH lw AS (SELECT * FROM read_parquet('{lw}')),
sc0 AS (SELECT * FROM read_parquet('{sc}') WHERE kind = 'syscall'),
s AS (SELECT client, broker, corr_id, ts_us AS send_us, line_no AS send_line, pid FROM lw WHERE event = 'send'),
r AS (SELECT client, broker, corr_id, ts_us AS recv_us, line_no AS recv_line FROM lw WHERE event = 'recv'),
reqs AS (
  SELECT * EXCLUDE (k) FROM (
    SELECT r.*, s.send_us, s.send_line, s.pid,
           row_number() OVER (PARTITION BY r.client, r.broker, r.corr_id, r.recv_line ORDER BY s.send_line DESC) AS k
    FROM r JOIN s USING (client, broker, corr_id) WHERE s.send_line < r.recv_line) WHERE k = 1),
sc AS (
  SELECT *, sum(CASE WHEN sock_write THEN 0 ELSE 1 END)
              OVER (PARTITION BY pid ORDER BY ts_us, line_no ROWS UNBOUNDED PRECEDING) AS burst
  FROM (SELECT *,
          fd > 2 AND (fd_info IS NULL OR regexp_matches(fd_info, '{sock}')) AS is_sock,
          syscall IN {writes} AND fd > 2 AND (fd_info IS NULL OR regexp_matches(fd_info, '{sock}')) AND ret > 0 AS sock_write,
          syscall IN {reads} AND fd > 2 AND (fd_info IS NULL OR regexp_matches(fd_info, '{sock}')) AND ret > 0 AS sock_read,
          syscall IN {waits} AS wait
        FROM sc0)),
bursts AS (SELECT pid, burst, count(*) AS n_writes, min(ts_us) AS send_start_us, sum(ret) AS written_bytes
           FROM sc WHERE sock_write GROUP BY pid, burst),
r2 AS (SELECT q.*, b.n_writes, b.written_bytes, b.send_start_us, coalesce(b.send_start_us, q.send_us) AS start_us
       FROM reqs q LEFT JOIN sc sl ON sl.line_no = q.send_line
       LEFT JOIN bursts b ON b.pid = q.pid AND b.burst = sl.burst - 1),
rb AS (SELECT send_line, recv_line, send_us, recv_us, pid,
              unnest(range(floor(start_us / {bucket})::BIGINT, floor(recv_us / {bucket})::BIGINT + 1)) AS bucket
       FROM r2),
ev AS (SELECT pid, ts_us, dur_us, wait, sock_read, floor(ts_us / {bucket})::BIGINT AS bucket FROM sc WHERE wait OR sock_read),
agg AS (SELECT send_line, recv_line, send_us, recv_us,
               sum(CASE WHEN wait THEN dur_us END) AS poll_us, max(CASE WHEN wait THEN dur_us END) AS longest_poll_us,
               min(CASE WHEN sock_read THEN ts_us END) AS first_read_us, count(CASE WHEN wait THEN 1 END) AS n_polls
        FROM rb JOIN ev USING (pid, bucket) WHERE ts_us >= send_us AND ts_us <= recv_us
        GROUP BY send_line, recv_line, send_us, recv_us)
SELECT r2.*, agg.poll_us, agg.longest_poll_us, agg.first_read_us, agg.n_polls,
       (r2.send_us - r2.start_us) / 1000.0 AS send_ms, (agg.first_read_us - r2.send_us) / 1000.0 AS wait_ms,
       (r2.recv_us - agg.first_read_us) / 1000.0 AS read_ms, (r2.recv_us - r2.start_us) / 1000.0 AS total_ms,
       agg.poll_us / 1000.0 AS poll_ms
FROM r2 LEFT JOIN agg USING (send_line, recv_line, send_us, recv_us)
"""


def make_tables(out: Path, n: int, seed: int = 1) -> tuple[Path, Path]:
    """syscalls.parquet and log_writes.parquet for n requests."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from parsers.strace import SCHEMA as SC_SCHEMA

    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    sc_path, lw_path = out / "syscalls.parquet", out / "log_writes.parquet"
    sc_w = lw_w = None
    t0 = 1_795_334_606_000_000
    try:
        for start in range(0, n, CHUNK):
            k = min(CHUNK, n - start)
            i = np.arange(start, start + k, dtype=np.int64)
            pid = (10_000 + i % THREADS).astype(np.int32)
            # each thread sends its next request 50 ms after the last one
            base = t0 + (i // THREADS) * 50_000 + (i % THREADS) * 7
            wait = rng.integers(40_000, 48_000, k)
            fd_info = pa.array([f"TCP:[127.0.0.1:{40000 + t}->127.0.0.1:9093]" for t in range(THREADS)])
            # five lines a request: socket write, Sent log write, poll, socket read, Received log write
            line = 1 + i[:, None] * 5 + np.arange(5)
            ts = np.stack([base, base + 30, base + 60, base + 60 + wait, base + 120 + wait], axis=1)
            dur = np.stack([np.full(k, 20), np.full(k, 10), wait, np.full(k, 15), np.full(k, 10)], axis=1)
            calls = np.array(["sendmsg", "write", "poll", "read", "write"])
            fd = np.stack([np.full(k, 7), np.full(k, 2), np.full(k, -1), np.full(k, 7), np.full(k, 2)], axis=1)
            ret = np.stack([np.full(k, 2170), np.full(k, 140), np.ones(k), np.full(k, 54), np.full(k, 150)], axis=1)
            m = k * 5
            sock = fd.reshape(-1) == 7
            tid = np.repeat(i % THREADS, 5)
            info = pa.array(np.where(sock, np.asarray(fd_info.to_pylist(), dtype=object)[tid], None), pa.string())
            sc = pa.table({
                "line_no": line.reshape(-1), "pid": np.repeat(pid, 5), "ts_us": ts.reshape(-1),
                "dur_us": dur.reshape(-1), "kind": pa.array(["syscall"] * m),
                "syscall": pa.array(np.tile(calls, k)), "fd": pa.array(fd.reshape(-1).astype(np.int32), mask=fd.reshape(-1) < 0),
                "fd_info": info, "args": pa.nulls(m, pa.string()), "ret": ret.reshape(-1).astype(np.int64),
                "errno": pa.nulls(m, pa.string()), "unfinished": pa.array(np.zeros(m, bool)),
                "data": pa.nulls(m, pa.string()),
            }).cast(SC_SCHEMA)
            corr = (i // THREADS).astype(np.int32)
            broker = pa.array([f"ssl://127.0.0.1:9093/{t}" for t in range(THREADS)]).take(pa.array(i % THREADS))
            lw = pa.table({
                "line_no": np.concatenate([line[:, 1], line[:, 4]]),
                "ts_us": np.concatenate([ts[:, 1], ts[:, 4]]),
                "client": pa.array(["rdkafka#producer-1"] * (2 * k)),
                "broker": pa.concat_arrays([broker, broker]),
                "event": pa.array(["send"] * k + ["recv"] * k),
                "request": pa.array(["Produce"] * (2 * k)),
                "size_bytes": np.concatenate([np.full(k, 2170), np.full(k, 54)]),
                "corr_id": np.concatenate([corr, corr]),
                "rtt_ms": pa.array(np.concatenate([np.full(k, np.nan), (wait + 60) / 1000.0]),
                                   mask=np.concatenate([np.ones(k, bool), np.zeros(k, bool)])),
                "pid": np.concatenate([pid, pid]),
            })
            if sc_w is None:
                sc_w = pq.ParquetWriter(sc_path, sc.schema)
                lw_w = pq.ParquetWriter(lw_path, lw.schema)
            sc_w.write_table(sc)
            lw_w.write_table(lw)
    finally:
        for w in (sc_w, lw_w):
            if w is not None:
                w.close()
    return sc_path, lw_path


def spark_job(spark, sc_path: Path, lw_path: Path, out: Path) -> int:
    """kdiag's own pairing and split, written out; returns the row count."""
    from kdiag import analysis

    events = spark.read.parquet(str(lw_path))
    syscalls = spark.read.parquet(str(sc_path))
    reqs = analysis.split_requests(spark, analysis.requests(spark, events), analysis.prepare_syscalls(syscalls))
    reqs.write.mode("overwrite").parquet(str(out))
    return spark.read.parquet(str(out)).count()


def duckdb_job(sc_path: Path, lw_path: Path, out: Path) -> int:
    import duckdb

    from kdiag import analysis

    sql = DUCKDB_SQL.format(lw=lw_path, sc=sc_path, sock=analysis.SOCKET_INFO, bucket=analysis.BUCKET_US,
                            writes=tuple(analysis.WRITE_CALLS), reads=tuple(analysis.READ_CALLS),
                            waits=tuple(analysis.WAIT_CALLS))
    con = duckdb.connect()
    con.execute(f"COPY ({sql}) TO '{out}' (FORMAT parquet)")
    return con.execute(f"SELECT count(*) FROM read_parquet('{out}')").fetchone()[0]


def run(smoke: bool, work: Path) -> list[Figure]:
    from kdiag.spark import session, tune_for

    work.mkdir(parents=True, exist_ok=True)
    sizes = SMOKE_SIZES if smoke else tuple(int(x) for x in os.environ.get(
        "KDIAG_BENCH_ANALYSIS_SIZES", ",".join(map(str, SIZES))).split(","))
    t = time.monotonic()
    spark = session("kdiag-bench", small=smoke)
    figs = [Figure("analysis", "Spark session start", round(time.monotonic() - t, 2), "s",
                   note="local[2]; paid once per run")]
    for n in sizes:
        d = work / f"n{n}"
        sc_path, lw_path = make_tables(d, n)
        tune_for(spark, sc_path.stat().st_size + lw_path.stat().st_size)
        t = time.monotonic()
        rows_s = spark_job(spark, sc_path, lw_path, d / "spark_out")
        spark_s = time.monotonic() - t
        t = time.monotonic()
        rows_d = duckdb_job(sc_path, lw_path, d / "duckdb_out.parquet")
        duck_s = time.monotonic() - t
        note = f"{n:,} requests, {5 * n:,} syscall rows; rows out: Spark {rows_s:,}, DuckDB {rows_d:,}"
        cmd = f"KDIAG_BENCH_ANALYSIS_SIZES={n} python -m bench --only analysis"
        figs.append(Figure("analysis", f"Spark job, {n:,} requests", round(spark_s, 2), "s", None, None,
                           f"DuckDB {duckdb_version()}, same join", round(duck_s, 2), cmd, note))
        ratio = spark_s / duck_s if duck_s > 0 else None
        goal = RATIO_GOAL if n >= 10_000_000 and not smoke else None
        figs.append(Figure("analysis", f"Spark/DuckDB time, {n:,} requests", ratio and round(ratio, 2), "x",
                           goal, check(ratio, goal) if goal else None, "DuckDB time (s)", round(duck_s, 2), cmd, note))
        import shutil
        shutil.rmtree(d, ignore_errors=True)
    return figs


def duckdb_version() -> str:
    import duckdb

    return duckdb.__version__
