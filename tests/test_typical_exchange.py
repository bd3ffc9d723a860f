"""Many runs in one set of tables (kdiag fleet): every window, join and
grouping of the per-request pipeline stays within a run (``bundle_id``).
The same capture given as two runs has the same threads, sockets, clients
and correlation ids in both; any key without the run would pair one run's
Sent with the other's Received, or walk both runs' syscalls as one thread."""
from __future__ import annotations

import pytest

from conftest import CAPTURES
from kdiag.analysis.spark_plumbing import RUN, read_table


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    from kdiag.ingest.tables import parse_paths

    d = CAPTURES / "nagle_on"
    out = tmp_path_factory.mktemp("tables")
    parse_paths([d / "rdkafka.log", d / "strace.txt", d / "stats.jsonl"], out)
    return out


# Run b is run a half a second later: the two overlap in time (a's
# requests span 1.5 s), as the bundles of a fleet's hosts do.
SHIFT_US = 500_000


def two_runs(spark, tables, name):
    """(run a alone, run b alone, both as one table)."""
    from pyspark.sql import functions as F

    a = read_table(spark, tables, name)
    assert a.select(RUN).distinct().collect()[0][0] == ""   # a file without the column is one run
    b = a
    for c in ("ts_us", "log_ts_us"):
        if c in b.columns:
            b = b.withColumn(c, F.col(c) + SHIFT_US)
    return a, b, a.withColumn(RUN, F.lit("a")).unionByName(b.withColumn(RUN, F.lit("b")))


def rows(df, run=None):
    from pyspark.sql import functions as F

    if run is not None:
        df = df.filter(F.col(RUN) == run)
    cols = sorted(c for c in df.columns if c != RUN)
    return sorted((tuple(r) for r in df.select(*cols).collect()), key=repr)


def test_requests_are_paired_and_split_within_their_run(spark, tables):
    from kdiag.analysis.per_request import flag_syscalls, requests, split_requests

    ev_a, ev_b, ev = two_runs(spark, tables, "log_writes")
    sc_a, sc_b, sc = two_runs(spark, tables, "syscalls")
    a = rows(split_requests(spark, requests(spark, ev_a), flag_syscalls(sc_a)))
    b = rows(split_requests(spark, requests(spark, ev_b), flag_syscalls(sc_b)))
    both = split_requests(spark, requests(spark, ev), flag_syscalls(sc))
    assert sum("Produce" in r for r in a) == 30 and a != b
    assert rows(both, "a") == a and rows(both, "b") == b


def test_exchanges_from_syscalls_stay_within_their_run(spark, tables):
    from kdiag.analysis.per_request import exchanges, prepare_syscalls

    sc_a, sc_b, sc = two_runs(spark, tables, "syscalls")
    a, b = rows(exchanges(prepare_syscalls(sc_a))), rows(exchanges(prepare_syscalls(sc_b)))
    both = exchanges(prepare_syscalls(sc))
    assert len(a) >= 30 and a != b
    assert rows(both, "a") == a and rows(both, "b") == b


def test_clock_steps_are_seen_per_run(spark, tables):
    """A run that starts before the other ended is no step back."""
    from kdiag.analysis.input_checks import _step_observations
    from kdiag.analysis.spark_plumbing import with_order

    a, _, both = two_runs(spark, tables, "syscalls")
    assert _step_observations(with_order(a), "syscalls").count() == 0
    assert _step_observations(with_order(both), "syscalls").count() == 0
