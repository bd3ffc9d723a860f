"""Checks of the input as a whole: what parses line by line but is wrong
together.

- Duplicates: a block of lines given twice (``cat a a``, a rotated log
  concatenated with overlap, the same file named twice) parses into rows that
  repeat earlier rows exactly. The first copy is kept, the rest counted and
  dropped, so a request is not counted twice.
- Clock steps: a thread's timestamps go back (NTP step, VM restore) or jump
  forward by more than any real pause (VM suspend, clock set). A request that
  spans one has a negative or inflated latency: it is counted and left out
  rather than allowed to move the percentiles and the verdict.

Everything is DataFrame work (one hash aggregate per table, windows
partitioned by thread); only the few step observations reach the driver.
Each check is a dict for ``findings["input_checks"]``: input, check, count,
detail, excluded_requests (and table).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from kdiag.analysis.spark_plumbing import ORDER, RUN, frame, one_run
from kdiag.ingest.input_rules import (
    CORR_EVENTS,
    FORWARD_GAP_US,
    LOG_BACK_TOLERANCE_US,
    PLACE,
    STRACE_BACK_TOLERANCE_US,
    in_copy_scope,
)

# Beyond this many steps the timestamps are not a clock (strace -r prints
# the time since the previous line): the observations are counted, not kept.
MAX_OBSERVATIONS = 10_000

# Free text that the other columns of its row already tell apart: left out
# of the duplicate check's first, hashed pass (the exact pass compares them).
WIDE_COLUMNS = ("args", "text", "detail", "data")


@dataclass
class Quality:
    checks: list[dict] = field(default_factory=list)
    # table -> step observations (driver-side dicts), for excluding requests
    steps: dict[str, list[dict]] = field(default_factory=dict)
    # Checks whose counts come from jobs still running (see spark_plumbing.Later):
    # each adds its check when called, in the order they were begun.
    pending: list = field(default_factory=list)

    def settle(self) -> None:
        while self.pending:
            self.pending.pop(0)()

    def add(self, table: str, check: str, count: int, detail: str, excluded: int = 0, **extra) -> dict:
        c = {"input": table, "table": table, "check": check, "count": int(count), "detail": detail,
             "excluded_requests": int(excluded), **extra}
        self.checks.append(c)
        return c


def copy_candidates(df, table: str):
    """Hashes that more than one row of ``table`` has (in everything but
    line_no): the candidates ``drop_duplicates`` compares column by column.
    A 64-bit hash finds them with one narrow aggregate."""
    if df is None:
        return None
    return df.filter(_copy_scope(table)).groupBy(_copy_hash(df).alias("_h")).count() \
        .filter("count > 1").select("_h")


def _content(df) -> list[str]:
    """The columns a copy repeats: all but its place in the input."""
    return [c for c in df.columns if c not in PLACE]


def _copy_hash(df):
    from pyspark.sql import functions as F

    content = _content(df)
    # Rows equal in every column are equal in these, so hashing only these
    # finds every copy; the text columns hold most of a table's bytes (args:
    # 684 of 780 MB of 5 M strace rows), which the hash then need not read.
    return F.xxhash64(*([c for c in content if c not in WIDE_COLUMNS] or content))


def _copy_scope(table: str):
    from pyspark.sql import functions as F

    scope = F.col("ts_us").isNotNull()
    if table == "rdkafka_events":
        scope = scope & F.col("event").isin(*CORR_EVENTS) & F.col("corr_id").isNotNull()
    if table in ("syscalls", "log_writes"):
        # strace -t prints whole seconds: one thread's identical calls in one
        # second are real, not copies.
        scope = scope & (F.col("ts_us") % 1_000_000 != 0)
    return scope


# The tables whose copies are looked for (the others' rows repeat for real:
# a socket sampled twice the same, a probe's two equal answers).
COPY_TABLES = ("rdkafka_events", "syscalls", "log_writes", "stats")


def has_copies(t, table: str) -> bool:
    """Whether one input's rows of ``table`` (an Arrow table) may hold
    copies as ``drop_duplicates`` finds them, told where the input is
    parsed, so that a fleet's check runs in Spark only for the inputs where
    this says yes. Never no where Spark would find one: the same scope as
    ``_copy_scope`` and every column but line_no compared exactly; a NaN or
    a -0.0 (which Spark normalises and Arrow's grouping need not) says yes."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if t.num_rows < 2:
        return False
    t = in_copy_scope(t, table)
    if t.num_rows < 2:
        return False
    content = [c for c in t.column_names if c not in (*PLACE, RUN)]
    for c in content:
        if pa.types.is_floating(t.schema.field(c).type):
            v = t[c]
            # -0.0 is the zero whose reciprocal is -inf.
            if pc.any(pc.or_(pc.is_nan(v), pc.and_(pc.equal(v, 0.0), pc.less(pc.divide(1.0, v), 0.0)))).as_py():
                return True
    # Copies agree on their time first, then on the narrow columns: each
    # a cheaper necessary condition (a bundle's syscalls: 9.3 -> 1 ms).
    if len(pc.unique(t["ts_us"])) == t.num_rows:
        return False
    for cols in ([c for c in content if c not in WIDE_COLUMNS], content):
        if cols and t.group_by(cols).aggregate([]).num_rows == t.num_rows:
            return False
    return True


def tables_with_copies(candidates: dict) -> set[str]:
    """The tables that have copy candidates, in one job for all of them."""
    from functools import reduce

    from pyspark.sql import functions as F

    parts = [c.limit(1).select(F.lit(t).alias("table")) for t, c in candidates.items() if c is not None]
    return {r.table for r in reduce(lambda a, b: a.unionByName(b), parts).collect()} if parts else set()


def drop_duplicates(df, table: str, q: Quality, candidates):
    """The rows that repeat an earlier row in everything but line_no, dropped;
    the first copy stays. Only the rows whose hash is among ``candidates``
    (copy_candidates) are compared column by column."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    from kdiag.analysis.spark_plumbing import cached

    w = Window.partitionBy(*_content(df)).orderBy(ORDER)
    # Cached for the count and the anti-join, until the analysis ends: a
    # warm server analyses many inputs in one session.
    drop = cached(df.filter(_copy_scope(table)).withColumn("_h", _copy_hash(df)).join(candidates, "_h")
                  .withColumn("_rn", F.row_number().over(w)).filter("_rn > 1").select(ORDER, "line_no"), q)
    stats = drop.agg(F.count("*").alias("n"), F.min("line_no").alias("first"), F.max("line_no").alias("last")).first()
    if not stats.n:
        return df
    what = {
        "syscalls": "strace rows (same thread, time, call and result)",
        "log_writes": "librdkafka lines written to stderr under strace",
        "rdkafka_events": "librdkafka request lines (same client, broker, CorrId and millisecond)",
        "stats": "statistics rows (same client, broker and time)",
    }.get(table, "rows")
    if table != "log_writes":   # a subset of the syscalls' copies: not counted twice
        q.add(table, "duplicate_lines", stats.n,
              f"{stats.n} {what} repeat earlier ones exactly, at lines {stats.first} to {stats.last}: a block "
              f"given twice (cat a a, a rotated log joined with overlap, a file named twice); the first copy "
              f"is kept and the rest dropped")
    return df.join(drop.select(ORDER), ORDER, "left_anti")


def clock_steps(spark, dfs: dict, q: Quality) -> None:
    """Per thread, in file order: a timestamp behind the previous one by more
    than the tolerance is a step back; a gap after the previous call's end
    longer than FORWARD_GAP_US, in which no other thread did anything
    either, is a jump forward. One step seen by several threads counts once
    (their intervals of rows overlap). ``dfs``: table -> DataFrame, whose
    observations are found in one job."""
    from functools import reduce

    obs = {t: _step_observations(df, t) for t, df in dfs.items() if df is not None}
    if not obs:
        return
    firsts = [o.orderBy("a_id").limit(MAX_OBSERVATIONS + 1) for o in obs.values()]
    rows = [r.asDict() for r in reduce(lambda a, b: a.unionByName(b), firsts).collect()]
    for table, o in obs.items():
        mine = sorted((r for r in rows if r["table"] == table), key=lambda r: r["a_id"])
        if mine:
            _steps_of(spark, dfs[table], table, o, mine, q)


def _step_observations(df, table: str):
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    df = one_run(df)
    if table == "syscalls":
        group, tol = [RUN, "pid"], STRACE_BACK_TOLERANCE_US
        end = F.col("ts_us") + F.coalesce(F.col("dur_us"), F.lit(0))
    else:
        group, tol = [RUN, "client", "thread"], LOG_BACK_TOLERANCE_US
        end = F.col("ts_us")
    w = Window.partitionBy(*group).orderBy(ORDER)
    t = (df.filter(F.col("ts_us").isNotNull()).select(ORDER, "line_no", "ts_us", end.alias("_end"), *group)
         .withColumn("a_id", F.lag(ORDER).over(w)).withColumn("a_line", F.lag("line_no").over(w))
         .withColumn("a_ts", F.lag("ts_us").over(w)).withColumn("a_end", F.lag("_end").over(w)))
    # A line number that does not rise is the next input file: not compared.
    t = t.filter(F.col("a_line").isNotNull() & (F.col("line_no") > F.col("a_line")))
    back = F.col("ts_us") - F.col("a_ts") < -tol
    fwd = F.col("ts_us") - F.col("a_end") > FORWARD_GAP_US
    return t.filter(back | fwd).select(
        RUN, F.lit(table).alias("table"), F.when(back, "clock_backwards").otherwise("clock_jump_forward").alias("kind"),
        "a_id", F.col(ORDER).alias("b_id"), "a_line", F.col("line_no").alias("b_line"), "a_ts", "a_end",
        F.col("ts_us").alias("b_ts"))


def _steps_of(spark, df, table: str, obs, rows: list[dict], q: Quality) -> None:
    """The steps that ``table``'s observations ``rows`` (the first of
    ``obs``) make, into q.steps; past MAX_OBSERVATIONS, an unusable clock."""
    if len(rows) > MAX_OBSERVATIONS:
        n = obs.count()
        c = q.add(table, "clock_backwards", n,
                  f"timestamps go back or jump {n} times: they are not a clock (strace -r prints the time "
                  f"since the previous line); no request from this input can be timed")
        q.steps[table] = [{"kind": "unusable", "check": c}]
        return
    steps = []
    for kind in ("clock_backwards", "clock_jump_forward"):
        cur = None
        for r in (r for r in rows if r["kind"] == kind):
            if cur is not None and r["a_id"] < cur["b_id"]:
                cur["obs"].append(r)
                cur["b_id"] = max(cur["b_id"], r["b_id"])
                continue
            cur = {"kind": kind, "b_id": r["b_id"], "obs": [r]}
            steps.append(cur)
    if any(s["kind"] == "clock_jump_forward" for s in steps):
        _confirm_silence(spark, df, steps)
    out = []
    for i, s in enumerate(steps):
        if s.get("busy"):
            continue
        o = s["obs"]
        # Each thread saw the step plus the time it let pass between its two
        # calls (never negative): the busiest thread's view is the closest.
        size = min(r["b_ts"] - (r["a_ts"] if s["kind"] == "clock_backwards" else r["a_end"]) for r in o)
        out.append({"id": i, "kind": s["kind"], "size_us": size,
                    "line": min(r["b_line"] for r in o), "obs": o})
    if out:
        q.steps[table] = out


def _confirm_silence(spark, df, steps: list[dict]) -> None:
    """A long gap on one thread is only a jump when no other thread made a
    call in it (a thread sleeping in an untraced futex is not a jump)."""
    from pyspark.sql import functions as F

    fw = [(i, max(r["a_end"] for r in s["obs"]), min(r["b_ts"] for r in s["obs"]))
          for i, s in enumerate(steps) if s["kind"] == "clock_jump_forward"]
    iv = frame(spark, fw, "sid int, lo long, hi long")
    busy = {r.sid for r in df.select("ts_us").join(
        F.broadcast(iv), (F.col("ts_us") > F.col("lo")) & (F.col("ts_us") < F.col("hi"))).select("sid").distinct().collect()}
    for i in busy:
        steps[i]["busy"] = True


def exclude_spanning(spark, reqs, table: str, q: Quality, source_name: str):
    """Requests whose Sent..Received lines hold a clock step: their latency
    is the step's as much as the request's. An observation lies inside a
    request when its two rows' lines and times both fall between the
    request's (the times keep another input file's lines out)."""
    from pyspark.sql import functions as F

    steps = q.steps.get(table) or []
    if not steps:
        return reqs
    if steps[0]["kind"] == "unusable":
        if reqs is not None:
            steps[0]["check"]["excluded_requests"] = reqs.count()
            return reqs.limit(0)
        return reqs
    rows = [(s["id"], r["a_line"], r["b_line"], r["a_ts"], r["b_ts"]) for s in steps for r in s["obs"]]
    obs = frame(spark, rows, "sid int, a_line long, b_line long, a_ts long, b_ts long")
    r = reqs if reqs is not None else frame(
        spark, [], "send_line long, recv_line long, send_us long, recv_us long, request string")
    # The send and row a are read on the clock before the step, row b and
    # the response on the clock after it: each pair compares like with like,
    # whichever way the clock went.
    slack = STRACE_BACK_TOLERANCE_US if table == "syscalls" else LOG_BACK_TOLERANCE_US
    cond = ((F.col("send_line") <= F.col("a_line")) & (F.col("b_line") <= F.col("recv_line"))
            & (F.col("send_us") <= F.col("a_ts") + slack) & (F.col("b_ts") <= F.col("recv_us") + slack))
    # A recv line pairs with one send line; the times keep other files apart.
    key = ["send_line", "recv_line", "send_us", "recv_us"]
    hit = r.join(F.broadcast(obs), cond).select(*key, "sid", "request").distinct()
    # Few rows: the spanning requests, one per step they span.
    hits = hit.collect()
    spans = {h.sid for h in hits}
    for kind in ("clock_backwards", "clock_jump_forward"):
        mine = [s for s in steps if s["kind"] == kind]
        if table == "rdkafka_events" and kind == "clock_jump_forward":
            # An idle producer logs nothing for minutes: a silence in the log
            # is a jump only when a request was in flight across it.
            mine = [s for s in mine if s["id"] in spans]
        if not mine:
            continue
        ids = {s["id"] for s in mine}
        n = len({tuple(h[k] for k in key) for h in hits if h.sid in ids})
        produce = len({tuple(h[k] for k in key) for h in hits if h.sid in ids and h.request == "Produce"})
        where = ", ".join(f"line {s['line']} ({_dur(s['size_us'])})" for s in mine[:5])
        more = f" and {len(mine) - 5} more" if len(mine) > 5 else ""
        said = ("the clock went back" if kind == "clock_backwards"
                else "the clock jumped forward (or the process was stopped)")
        q.add(table, kind, len(mine),
              f"{said} {len(mine)} time(s) in {source_name}: at {where}{more}; "
              + (f"{n} request(s) spanning it ({produce} Produce) had no true latency and were left out"
                 if n else "no request spanned it"),
              excluded=n)
    if reqs is None or not hits:
        return reqs
    return reqs.join(hit.select(*key).distinct(), key, "left_anti")


def exclude_negative(reqs, table: str, q: Quality, source_name: str, later):
    """A response stamped before its request (a step smaller than the
    tolerance, or the two lines' clocks disagree): no latency to take. The
    requests are filtered at once; how many went is counted by a job of
    ``later`` (spark_plumbing.Later), added to q when it settles."""
    from pyspark.sql import functions as F

    # Null when either time is missing: such a request is not negative.
    neg = F.coalesce(F.col("recv_us") < F.col("send_us"), F.lit(False))
    def negative_count():
        return reqs.agg(
            F.count(F.when(neg, 1)).alias("n"), F.count(F.when(neg & (F.col("request") == "Produce"), 1)).alias("p"),
            F.min(F.when(neg, F.col("recv_line"))).alias("line"),
            F.min(F.when(neg, F.col("recv_us") - F.col("send_us"))).alias("worst")).first()

    row = later(negative_count)
    q.pending.append(lambda: _report_negative(row(), table, q, source_name))
    return reqs.filter(~neg)


def _report_negative(row, table: str, q: Quality, source_name: str) -> None:
    if row.n:
        q.add(table, "negative_latency", row.n,
              f"{row.n} response(s) in {source_name} are stamped before their request (first at line {row.line}, "
              f"by up to {_dur(-row.worst)}); {row.n} request(s) ({row.p} Produce) left out", excluded=row.n)


def _dur(us: int) -> str:
    s = abs(us) / 1e6
    sign = "-" if us < 0 else "+"
    if s >= 3600:
        return f"{sign}{s / 3600:.1f} h"
    if s >= 60:
        return f"{sign}{s / 60:.1f} min"
    if s >= 1:
        return f"{sign}{s:.1f} s"
    return f"{sign}{s * 1000:.1f} ms"


def name_inputs(checks: list[dict], files: list[dict]) -> list[dict]:
    """A table's checks named by the input file that fed it when there is
    one; else by the table, with its files listed. The formats that fill a
    table are the registry's (kdiag.parsers.registry), imported only when
    there are checks: with it come pyarrow and the parsers, which a warm
    replay's client does not otherwise import."""
    if not checks:
        return checks
    from kdiag.parsers.registry import formats

    for c in checks:
        kinds = {fmt.name for fmt in formats() if c["table"] in fmt.tables}
        paths = [f["path"] for f in files if f.get("kind") in kinds and not f.get("error")]
        if len(paths) == 1:
            c["input"] = paths[0]
        elif paths:
            c["input"] = f"{c['table']} ({', '.join(paths)})"
    return checks
