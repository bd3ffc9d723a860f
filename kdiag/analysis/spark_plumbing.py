"""Spark plumbing of the analysis: reading a table, caching a DataFrame for
the length of one analysis, running independent jobs at once."""
from __future__ import annotations

import threading
from pathlib import Path

from kdiag import settings

# RUN, the column naming a row's run (a bundle's id in a fleet, else ""),
# is defined below the analysis, beside the checks the writer of a table
# shares with it; the analysis's modules read it here.
from kdiag.ingest.input_rules import RUN  # noqa: F401
from kdiag.no_pandas import pandas_hidden

# Each row's place in its table (with_order).
ORDER = "_id"


class Abandoned(Exception):
    """The analysis was given up before its end (see give_up_on)."""


_thread = threading.local()


def give_up_on(event: threading.Event | None) -> None:
    """This thread's analysis, and the threads it starts here (at_once,
    Later), stop at their next checkpoint once ``event`` is set: what the
    warm server's practice needs to give way to a request at once, where
    cancelling Spark's jobs alone leaves it planning between them for up to
    1.4 s."""
    _thread.give_up = event


def checkpoint() -> None:
    event = getattr(_thread, "give_up", None)
    if event is not None and event.is_set():
        raise Abandoned("given up")


def _carried(fn):
    """fn, run in another thread under this thread's give_up_on."""
    event = getattr(_thread, "give_up", None)

    def run():
        give_up_on(event)
        try:
            checkpoint()
            return fn()
        finally:
            give_up_on(None)
    return run


# Spark jobs started at once on a small input (2 cores: planning is one
# core's work per job, the JVM compiles on the other).
PARALLEL_JOBS = 3


# A table this small (uncompressed, from the Parquet footer) is read here and
# handed to Spark as rows in the plan (a LocalRelation): a filter and first()
# over it run in the driver without a Spark job, and the jobs that remain skip
# the Parquet scan's setup. On a 100-request capture's events, warm: first()
# 1 job 0.33 s -> 0 jobs 0.13 s, count() 0.57 -> 0.33 s. Larger tables are
# scanned by the executors: rows in the plan are shipped with every task.
LOCAL_TABLE_BYTES = 8 << 20


def _local_bytes() -> int:
    return settings.get("KDIAG_LOCAL_TABLE_BYTES")


def _uncompressed_bytes(meta) -> int:
    """A Parquet file's rows in memory, from its footer (``meta``)."""
    return sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))




def one_run(df):
    """``df`` with its ``RUN``: a frame made without one (a caller with one
    run, a test's rows) is one run, ""."""
    if df is None or RUN in df.columns:
        return df
    from pyspark.sql import functions as F

    return df.withColumn(RUN, F.lit(""))


def read_table(spark, tables: Path, name: str, drop: tuple[str, ...] = (), numbered: bool = False):
    """The table, without the columns in ``drop``, with its ``RUN`` ("" when
    the file has none). Its schema comes from the file's footer, read here:
    Spark would run a job to infer it. ``numbered``: with its ``ORDER``
    column (with_order); a table read into the plan is numbered here, so
    that it stays rows in the plan (see in_plan) rather than a projection
    Spark must run to number them."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql.pandas.types import from_arrow_schema

    checkpoint()
    path = tables / f"{name}.parquet"
    if not path.exists():
        return None
    meta = pq.read_metadata(path)
    schema = pa.schema([f.remove_metadata() for f in meta.schema.to_arrow_schema() if f.name not in drop])
    spark_schema = from_arrow_schema(schema)
    one_run = RUN not in schema.names
    if _uncompressed_bytes(meta) <= _local_bytes():
        table = pq.read_table(path, columns=schema.names).replace_schema_metadata(None).cast(schema)
        if table.num_rows:
            if one_run:
                table = table.append_column(RUN, pa.array([""] * table.num_rows, pa.string()))
            if numbered:
                table = table.append_column(ORDER, pa.array(range(table.num_rows), pa.int64()))
            return frame(spark, table, from_arrow_schema(table.schema))
    from pyspark.sql import functions as F

    df = spark.read.schema(spark_schema).parquet(str(path))
    if one_run:
        df = df.withColumn(RUN, F.lit(""))
    return with_order(df) if numbered else df


def with_order(df):
    """``df`` with its ``ORDER`` column: rows are written file after file,
    chunk after chunk, so per thread this is line order within a file. It
    outlives a clock step, which ts_us order does not. Spark numbers a scan
    in this order; read_table numbers rows it reads into the plan the same way."""
    from pyspark.sql import functions as F

    return None if df is None else df.withColumn(ORDER, F.monotonically_increasing_id())


def in_plan(df) -> bool:
    """``df`` is rows in the plan itself (a table read_table read into it):
    holding it (cached) would collect it only to make the same rows again."""
    return df is not None and df._jdf.queryExecution().analyzed().getClass().getSimpleName() == "LocalRelation"


def in_driver(df) -> bool:
    """``df``'s rows come from the plan alone once it is optimised (rows in
    the plan, filtered and projected: Catalyst's ConvertToLocalRelation):
    collecting them runs no Spark job. The optimised plan is the one an
    action on ``df`` then uses."""
    return df is not None and df._jdf.queryExecution().optimizedPlan().getClass().getSimpleName() == "LocalRelation"


# id(Quality of an analysis) -> the DataFrames it cached.
_HELD: dict[int, list] = {}


def fits_in_plan(tables: Path) -> bool:
    """Every table together no larger than one table read into the plan
    (see read_table): what the analysis makes of them is smaller still, and
    can be held the same way (see cached)."""
    import pyarrow.parquet as pq

    size = sum(_uncompressed_bytes(pq.read_metadata(path)) for path in Path(tables).glob("*.parquet"))
    return size <= _local_bytes()


def cached(df, q, local: bool = False):
    """df computed once for the rest of the analysis that q belongs to: each
    table and the requests are read by many actions.

    ``local`` (the tables fit in the plan, see fits_in_plan): its rows are
    collected and handed back as rows in the plan, like a table read into
    it. Every later plan then starts from those rows, not from the windows
    and joins that made them: planning them is most of a small input's
    time, and a filter or projection of them runs in the driver. On the
    100-request bundle, warm, after the same 13 analyses in one JVM: 3.5 ->
    2.4 s an analysis, JVM CPU 4.3 -> 2.7 s. Else it is cached until the
    analysis ends (100-request capture, warm: 14 -> 10.6 s against
    reading Parquet and the duplicate check's windows again)."""
    checkpoint()
    if df is None:
        return None
    if local:
        return frame(df.sparkSession, df.toArrow(), df.schema)
    _HELD.setdefault(id(q), []).append(df.cache())
    return df


def frame(spark, data, schema):
    """``spark.createDataFrame(data, schema)``, of rows or an Arrow table
    (``schema`` a StructType or its DDL).

    Rows are handed over as an Arrow table: PySpark makes a DataFrame of a
    list through an RDD that Spark can only read with a Python worker, whose
    start (a Python that imports PySpark, then forks) was 0.7 s of the 20-line
    excerpt's cold replay on 2 cores (2026-12-01); Arrow's rows are read in
    the JVM. And PySpark imports pandas at every call, to ask whether the
    data is a pandas DataFrame, which kdiag's never is: the import is most
    of a second of a cold replay on a loaded machine (kdiag.no_pandas)."""
    import pyarrow as pa

    # A Spark Connect client (no JVM of its own) sends rows as Arrow itself.
    if not isinstance(data, pa.Table) and getattr(spark, "_jvm", None) is not None:
        from pyspark.sql.types import StructType, _parse_datatype_string

        # A DDL schema parsed as createDataFrame parses it.
        struct = schema if isinstance(schema, StructType) else _parse_datatype_string(schema)
        data = list(data)
        try:
            data, schema = _arrow_rows(data, struct), struct
        except (pa.ArrowException, OverflowError, TypeError, ValueError, UnicodeEncodeError):
            # A value Arrow will not take as its type (a lone surrogate in a
            # name read with surrogateescape): PySpark's own way, worker and all.
            pass
    with pandas_hidden():
        return spark.createDataFrame(data, schema=schema)


def _arrow_rows(rows: list, struct):
    """Rows (tuples, in the schema's order) as an Arrow table of the
    schema's types."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(struct)
    columns = list(zip(*rows)) if rows else [()] * len(schema)
    return pa.Table.from_arrays([pa.array(c, type=f.type) for c, f in zip(columns, schema)], schema=schema)


def release(q) -> None:
    """Unpersist what the analysis that q belongs to cached."""
    for df in _HELD.pop(id(q), []):
        df.unpersist()


def at_once(parallel: bool, tasks: list) -> list:
    """The tasks' results, in order. In parallel (threads, each with its own
    Spark jobs) when asked: on a small input every job is the JVM planning
    and warming up, one core each, and the second core would wait. On a 200-
    request capture, first analysis 9.2 -> ... s."""
    checkpoint()
    if not parallel:
        return [t() for t in tasks]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(PARALLEL_JOBS, thread_name_prefix="kdiag-analysis") as pool:
        return [f.result() for f in [pool.submit(_carried(t)) for t in tasks]]


class Later:
    """Jobs whose results are wanted only further on. ``later(fn)`` returns
    a function that gives fn's result. Parallel (a small input): fn starts
    now in a thread, beside the jobs on the way to where its result is
    read; each job there is mostly the JVM planning and scheduling, one
    core's work. Else fn runs now, in line, as it did before it was
    deferred. Results never asked for still finish before the ``with``
    block ends, so no job outlives the analysis."""

    def __init__(self, parallel: bool) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self._pool = ThreadPoolExecutor(PARALLEL_JOBS, thread_name_prefix="kdiag-later") if parallel else None

    def __enter__(self) -> "Later":
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def __call__(self, fn):
        checkpoint()
        if self._pool is not None:
            return self._pool.submit(_carried(fn)).result
        result = fn()
        return lambda: result


def resolved(value):
    """A value that may still be coming from ``Later``."""
    return value() if callable(value) else value


def any_rows(df) -> bool:
    # take(1), not limit(1).count(): over a table read into the plan (see
    # read_table) a filter and take run in the driver, without a Spark job.
    checkpoint()
    return df is not None and len(df.take(1)) > 0


def pctl(values: list[float], q: float) -> float | None:
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return None
    k = min(len(vals) - 1, max(0, int(round(q * (len(vals) - 1)))))
    return vals[k]


def rounded(x: float | None, nd: int = 2) -> float | None:
    return None if x is None else round(float(x), nd)


# percentile_approx's rank error is 1/ACCURACY of the count: exact below
# about 5,000 values (every capture kdiag makes), 1,000 ranks out of 1e7.
# Its cost grows with the accuracy: at 1e5 the per-cause sums of 1e7
# requests took 23-24 s, at 1e4 (Spark's default) 10 s; DuckDB's
# approx_quantile, the benchmark's reference, is coarser still (a t-digest).
QUANTILE_ACCURACY = 10_000


def quantile(col, p):
    """percentile_approx within 1/QUANTILE_ACCURACY of the true rank."""
    from pyspark.sql import functions as F

    return F.percentile_approx(col, p, QUANTILE_ACCURACY)
