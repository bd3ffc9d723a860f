"""The session remembers py4j's class and static-method lookups
(kdiag/analysis/py4j_lookups.py), and only those."""
from __future__ import annotations

import collections

import pytest


@pytest.fixture
def commands(monkeypatch):
    """py4j commands sent, by their first two lines ("c", "r\\nm", ...)."""
    from py4j.clientserver import ClientServerConnection

    seen = collections.Counter()
    send = ClientServerConnection.send_command

    def counting(self, command):
        head = command.split("\n")
        seen[head[0] + (" " + head[1] if head[0] == "r" else "")] += 1
        return send(self, command)

    monkeypatch.setattr(ClientServerConnection, "send_command", counting)
    return seen


def test_a_function_is_looked_up_once(spark, commands):
    from pyspark.sql import functions as F

    F.col("first_call_may_look_up")
    commands.clear()
    for i in range(5):
        F.col(f"c{i}")
    assert commands["r u"] == 0 and commands["r m"] == 0
    assert commands["c"] == 5


def test_static_fields_are_read_each_time(spark, commands):
    from pyspark import SparkContext

    integer = SparkContext._gateway.jvm.Integer
    assert integer.MAX_VALUE == 2**31 - 1
    commands.clear()
    assert integer.MAX_VALUE == 2**31 - 1
    assert commands["r m"] == 1
    assert "MAX_VALUE" not in vars(integer)


def test_answers_stay_right(spark):
    df = spark.createDataFrame([(1, "a"), (2, "b"), (3, "a")], "n int, s string")
    from pyspark.sql import functions as F

    for _ in range(2):
        got = df.groupBy("s").agg(F.sum("n").alias("n")).orderBy("s").collect()
        assert [(r.s, r.n) for r in got] == [("a", 4), ("b", 2)]
