"""bench/analysis.py and bench/verdict.py run at small sizes: every figure is
measured and carries its reference (the figures of a small run say nothing
about speed, so none is judged here)."""
from __future__ import annotations

import re

import pytest

from conftest import need

pytestmark = pytest.mark.e2e


def test_analysis_smoke(tmp_path):
    need("java")
    from bench import analysis

    figs = analysis.run(smoke=True, work=tmp_path)
    by = {f.name: f for f in figs}
    n = analysis.SMOKE_SIZES[0]
    spark, duck = by[f"Spark job, {n:,} requests"], by[f"DuckDB same work, {n:,} requests"]
    assert spark.value > 0 and duck.value > 0 and spark.ref_value == duck.value
    # both read the same made tables and reach the same verdict on them
    assert "DuckDB disagrees" not in spark.note, spark.note
    # where Spark's time went, by step of the analysis
    # (in the order the steps' first actions ended: some run at once)
    steps = spark.note.split("Spark actions by step: ", 1)[1]
    assert "input checks" in steps and "pairing and split" in steps and "facts and connections" in steps, spark.note
    # and by the kdiag function that ran each action: the same seconds, the
    # slowest functions' at most all the steps'
    steps, functions = steps.split("; the slowest by the kdiag function that ran them: ")
    took = lambda part: {k.strip(): float(v) for k, v in re.findall(r"([\w. ]+?) (\d+\.\d) s", part)}  # noqa: E731
    by_step, by_function = took(steps), took(functions)
    assert 1 <= len(by_function) <= analysis.SLOWEST_SHOWN, spark.note
    assert all(re.fullmatch(r"[a-z_]+\.[A-Za-z_<>]+", k) for k in by_function), by_function
    assert sum(by_function.values()) <= sum(by_step.values()) + 0.05 * (len(by_step) + len(by_function)), spark.note
    ratio = by[f"Spark / DuckDB at {n:,} requests"]
    # the times are figures rounded to 0.01 s, the ratio is of the times
    # themselves: DuckDB's ~0.1 s here moves it by up to 5 % on rounding alone
    lo, hi = (spark.value - 0.005) / (duck.value + 0.005), (spark.value + 0.005) / max(duck.value - 0.005, 1e-9)
    assert lo - 0.01 <= ratio.value <= hi + 0.01 and ratio.goal is None, (ratio.value, spark.value, duck.value)


def test_made_tables_read_as_their_verdict(tmp_path, spark):
    """The synthetic tables are what kdiag's parsers write: kdiag's own job
    reads them, and DuckDB's SQL finds the same requests and verdict."""
    from bench import analysis
    from kdiag.analysis.job import analyze

    rows = analysis.make_tables(tmp_path / "t", 3000)
    assert rows["syscalls"] >= 5 * 3000 and rows["rdkafka_events"] >= 2 * 3000
    f = analyze(spark, tmp_path / "t", {})
    d = analysis.duckdb_job(tmp_path / "t", bucketed=True)
    assert f["summary"]["requests"] == d.requests == 3000
    assert f["verdict"] == d.verdict, (f["verdict"], d.verdict)


def test_verdict_smoke(tmp_path):
    need("java")
    from bench import verdict

    (fig,) = verdict.run(smoke=True, work=tmp_path)
    assert fig.name == "kdiag replay (fixture nagle_on)" and fig.value > 0 and fig.ref_value > 0, fig
    assert fig.command.startswith("kdiag replay") and fig.goal is None
    # the breakdown's hooks still find the functions replay calls
    assert "parse " in fig.note and "analysis " in fig.note and "session_start " in fig.note, fig.note
