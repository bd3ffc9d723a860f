"""The cause registry: every cause module is listed once in ORDER, declares
what a cause must, is named in docs/causes.md, and its rule gives its cause to
the request it declares (MEETS)."""
import importlib
import pkgutil
import re

import pytest

from conftest import ROOT
from kdiag.analysis import causes
from kdiag.analysis.causes import classify, label_of, resolve_slow

# librdkafka property names: dotted lower-case words.
PROPERTY = re.compile(r"^[a-z]+(\.[a-z]+)*$")
VERSIONS = (None, (0, 11, 6), (1, 4, 0), (1, 5, 0), (2, 3, 0), (2, 10, 0))


def _scanned() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(causes.__path__) if not m.name.startswith("_"))


def test_every_cause_module_is_in_the_order_and_back():
    assert sorted(causes.ORDER) == _scanned()
    assert len(set(causes.ORDER)) == len(causes.ORDER)


@pytest.mark.parametrize("name", sorted(set(causes.ORDER) | set(_scanned())))
def test_cause_declares_everything(name):
    mod = importlib.import_module(f"kdiag.analysis.causes.{name}")
    missing = [a for a in causes.REQUIRED if not hasattr(mod, a)]
    assert not missing, f"{name} lacks {missing}"
    assert mod.NAME == name
    assert isinstance(mod.TAIL, bool)
    for attr in ("COLUMNS", "SUMMED", "EXAMPLE_COLUMNS"):
        cols = getattr(mod, attr)
        assert isinstance(cols, tuple) and all(isinstance(c, str) for c in cols), attr
    assert mod.rule is None or callable(mod.rule)
    assert mod.MEETS is None or isinstance(mod.MEETS, dict)
    assert callable(mod.evidence) and callable(mod.fix_text) and callable(mod.fix)
    for version in VERSIONS:
        fix = mod.fix(version)
        assert isinstance(fix, dict), (name, version)
        assert all(PROPERTY.match(k) and isinstance(v, str) for k, v in fix.items()), (name, fix)


def test_names_are_unique_and_the_docs_table_them():
    names = [c.NAME for c in causes.CAUSES]
    assert len(set(names)) == len(names)
    table = (ROOT / "docs" / "causes.md").read_text().split("\n## ", 1)[0]
    assert set(re.findall(r"^\| `([a-z_]+)` \|", table, re.M)) == set(names)


def test_derived_lists():
    assert causes.TAIL_CAUSES == tuple(c.NAME for c in causes.CAUSES if c.TAIL)
    assert set(causes.FIXES) == set(causes.ORDER)
    assert {"cause", "pid", "fd"} <= set(causes.example_columns())


def _frame(spark, rows: list[dict]):
    """A DataFrame of the requests, with every column a MEETS names (typed
    by its values) and a corr_id in row order."""
    from pyspark.sql.types import BooleanType, DoubleType, IntegerType, LongType, StructField, StructType

    kinds = {bool: BooleanType(), int: LongType(), float: DoubleType()}
    types = {}
    for c in causes.CAUSES:
        for col, v in (getattr(c, "MEETS", None) or {}).items():
            if col != "path_rtt_ms":
                types.setdefault(col, kinds[type(v)])
    schema = StructType([StructField("corr_id", IntegerType())]
                        + [StructField(col, t) for col, t in sorted(types.items())])
    data = [tuple([i] + [r.get(col) for col in sorted(types)]) for i, r in enumerate(rows)]
    return spark.createDataFrame(data, schema)


# A module without MEETS fails test_cause_declares_everything, not the collection.
@pytest.mark.parametrize("cause", [c for c in causes.CAUSES if getattr(c, "MEETS", None) is not None],
                         ids=lambda c: c.NAME)
def test_classify_gives_each_cause_its_request(spark, cause):
    meets = dict(cause.MEETS)
    path_rtt = meets.pop("path_rtt_ms", None)
    # A tail cause is a few requests in a fast body.
    fast = [{"wait_ms": 0.4, "total_ms": 0.8, "n_writes": 1}] * (3 if cause.TAIL else 0)
    df = classify(_frame(spark, [meets, *fast]), path_rtt)
    got = df.orderBy("corr_id").first().cause
    if cause.rule is None:
        assert got == causes.OTHERWISE == cause.NAME
        return
    assert got == label_of(cause)
    if label_of(cause) != cause.NAME:   # one rule, two causes: told apart over the run
        got = resolve_slow(df, None).orderBy("corr_id").first().cause
    assert got == cause.NAME
