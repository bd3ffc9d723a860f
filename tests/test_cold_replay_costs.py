"""What a cold replay does not pay for: spark_plumbing.frame hands rows to
Spark as Arrow, so they become rows in the plan read in the JVM and a
small replay starts no Python worker; the session maps case without ICU
and loads no extension from the class path."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kdiag.analysis.spark_plumbing import frame, in_driver

ROOT = Path(__file__).resolve().parents[1]
LOG = ROOT / "fixtures" / "logs" / "librdkafka_stderr.log"
DDL = "run string, pid int, at long, last struct<t: long, l: long>, sizes array<long>, ok boolean, ms double"
ROWS = [("", 7, 1_795_000_000_000_001, (5, 9), [1, 2], True, 0.5),
        ("b1", None, None, None, None, None, None),
        ("b2", 2**31 - 1, -1, (None, 3), [], False, float("inf"))]


def test_rows_are_rows_in_the_plan(spark):
    df = frame(spark, ROWS, DDL)
    assert in_driver(df)
    got = [(r.run, r.pid, r.at, None if r.last is None else tuple(r.last), r.sizes, r.ok, r.ms) for r in df.collect()]
    assert got == ROWS
    assert [(f.name, f.dataType.simpleString()) for f in df.schema] == [
        ("run", "string"), ("pid", "int"), ("at", "bigint"), ("last", "struct<t:bigint,l:bigint>"),
        ("sizes", "array<bigint>"), ("ok", "boolean"), ("ms", "double")]


def test_no_rows_and_a_value_arrow_will_not_take(spark):
    assert frame(spark, [], DDL).count() == 0
    # A lone surrogate (a byte surrogateescape kept) is no UTF-8 for Arrow:
    # PySpark's own conversion takes it.
    df = frame(spark, [("x\udcff", 1)], "run string, pid int")
    assert df.count() == 1


def test_a_cold_replay_of_a_log_starts_no_python_worker(tmp_path):
    # Spark starts its Python workers with PYSPARK_PYTHON: a wrapper that
    # notes each start.
    seen = tmp_path / "started"
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\necho \"$@\" >> {seen}\nexec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    env = {**os.environ, "KDIAG_WARM": "0", "PYSPARK_PYTHON": str(python)}
    p = subprocess.run([sys.executable, "-m", "kdiag", "replay", "--json", str(LOG)], capture_output=True, text=True,
                       cwd=tmp_path, env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(p.stdout)["verdict"] != "none"
    assert not seen.exists(), seen.read_text()


def test_the_session_starts_without_what_the_analysis_never_uses(spark):
    # ICU's case mapping initialises its break iterators on first use (most
    # of a second of a cold replay with statistics); Spark ML's extension
    # registers functions at the session's start.
    from pyspark.sql import functions as F

    assert spark.conf.get("spark.sql.icu.caseMappings.enabled") == "false"
    assert spark.conf.get("spark.sql.extensions.test.loadFromCp") == "false"
    assert frame(spark, [("up",), ("Down",)], "state string").select(F.upper("state").alias("s")).collect()[0].s == "UP"


def test_a_session_without_a_jvm_gets_the_rows_as_they_are():
    # A Spark Connect client has no JVM to parse the DDL with, and turns
    # rows into Arrow itself.
    class Connect:
        def __getattr__(self, name):
            if name == "_jvm":
                raise AttributeError(name)
            raise AssertionError(name)

        def createDataFrame(self, data, schema):  # noqa: N802 - PySpark's name
            return data, schema

    assert frame(Connect(), ROWS, DDL) == (ROWS, DDL)
