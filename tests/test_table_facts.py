"""What the parse tells of a table in its footer (kdiag.ingest.table_facts), held
to what the analysis's own checks find: it may say "no copies" or "no
clock steps" only where Spark's check finds none. Real captures parsed by
the real parse (clean, with a block given twice, with a clock step), then
random tables made to hold copies and steps at random, each compared with
Spark's checks on the same rows."""
import json
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kdiag.ingest import table_facts
from kdiag.ingest.tables import parse_paths
from test_bad_input import LOG, STRACE, shifted_log, shifted_strace, write


def spark_finds(spark, t: pa.Table, name: str) -> tuple[int, int]:
    """(rows Spark's copy check drops, step observations of its clock check)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from kdiag.analysis import input_checks as quality
    from kdiag.analysis.spark_plumbing import release, with_order

    df = with_order(spark.createDataFrame(t.to_pandas(), schema=from_arrow_schema(t.schema)).coalesce(1))
    q = quality.Quality()
    try:
        drops = df.count() - quality.drop_duplicates(df, name, q, quality.copy_candidates(df, name)).count()
    finally:
        release(q)
    steps = quality._step_observations(df, name).count() if name in ("syscalls", "rdkafka_events") else 0
    return drops, steps


def told(tmp_path, case: str, files: dict) -> dict:
    (tmp_path / case).mkdir()
    out = parse_paths([write(tmp_path / case, n, lines) for n, lines in files.items()], tmp_path / case / "t")
    return {name: (table_facts.read(p), p) for name, p in out.paths.items()}


def test_a_clean_capture_is_told_clean_and_spark_agrees(spark, tmp_path):
    got = told(tmp_path, "clean", {"rdkafka.log": LOG, "strace.txt": STRACE})
    for name in ("syscalls", "rdkafka_events"):
        f, path = got[name]
        assert f == {"no_copies": True, "no_clock_steps": True}, name
        assert spark_finds(spark, pq.read_table(path), name) == (0, 0)
    assert got["log_writes"][0] == {"no_copies": True, "no_clock_steps": False}   # no clock check of its own


@pytest.mark.parametrize("case", ["twice", "stepped_back", "jumped", "log_stepped"])
def test_a_damaged_capture_is_never_told_clean(spark, tmp_path, case):
    files = {
        "twice": {"rdkafka.log": LOG + LOG[-40:], "strace.txt": STRACE + STRACE[100:400]},
        "stepped_back": {"rdkafka.log": LOG, "strace.txt": shifted_strace(-30_000_000, 2816)},
        "jumped": {"rdkafka.log": LOG, "strace.txt": shifted_strace(7_200_000_000, 2816)},
        "log_stepped": {"rdkafka.log": shifted_log(-30_000, 110)},
    }[case]
    got = told(tmp_path, case, files)
    found = {name: spark_finds(spark, pq.read_table(p), name) for name, (f, p) in got.items()
             if name in ("syscalls", "rdkafka_events")}
    assert any(d or s for d, s in found.values()), found   # the damage is there ...
    for name, (drops, steps) in found.items():             # ... and never told away
        f = got[name][0]
        assert not (drops and f.get("no_copies")), (name, f, drops)
        assert not ((drops or steps) and f.get("no_copies") and f.get("no_clock_steps")), (name, f, steps)


def _random_table(rng: random.Random, name: str) -> pa.Table:
    """Rows of a few threads in file order: times mostly rising, with a
    chance of a copied row, a time that does not rise, a step back or a
    forward gap, and lines that restart (a second input file). A row may
    repeat the one before it in all but its result (a tie the facts compare
    column by column); results and a float (NaN, -0.0) are often equal."""
    n = rng.randint(2, 60)
    rows, line, ts, corr = [], 1, 1_700_000_000_000_000, 0
    for _ in range(n):
        r = rng.random()
        if rows and r < 0.04:
            rows.append({**rng.choice(rows), "line_no": line})
        elif rows and r < 0.08:
            rows.append({**rows[-1], "line_no": line, "ret": rng.choice([0, 1, None]),
                         "f": rng.choice([0.0, -0.0, float("nan"), None])})
        else:
            ts += rng.choice([1, 3, 250, 1_500, 400_000]) if r > 0.12 else rng.choice(
                [0, -2_000, -300_000, 61_000_000, -1])
            rows.append({"line_no": line, "ts_us": ts if rng.random() > 0.03 else None,
                         "pid": rng.choice([7, 8, None]), "thread": rng.choice(["main", "broker"]),
                         "client": "c", "broker": rng.choice(["b1", "b2"]), "event": rng.choice(["send", "recv", "x"]),
                         "corr_id": (corr := corr + 1) if rng.random() > 0.05 else rng.randint(1, 8), "dur_us": rng.choice([None, 5, 70_000_000]),
                         "ret": rng.choice([0, 1, None]), "f": rng.choice([0.0, -0.0, float("nan"), None])})
        line = 1 if rng.random() < 0.03 else line + 1
    cols = {"syscalls": ["line_no", "pid", "ts_us", "dur_us", "ret", "f"],
            "rdkafka_events": ["line_no", "ts_us", "client", "thread", "broker", "event", "corr_id", "f"]}[name]
    types = {"line_no": pa.int64(), "pid": pa.int32(), "ts_us": pa.int64(), "dur_us": pa.int64(),
             "client": pa.string(), "thread": pa.string(), "broker": pa.string(), "event": pa.string(),
             "corr_id": pa.int32(), "ret": pa.int64(), "f": pa.float64()}
    return pa.table({c: pa.array([r[c] for r in rows], types[c]) for c in cols})


@pytest.mark.parametrize("name", ["syscalls", "rdkafka_events"])
def test_random_tables_fed_in_chunks_are_never_told_clean_where_spark_finds(spark, name):
    """80 tables, each its own run (bundle_id), checked by Spark in one pass."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from kdiag.analysis import input_checks as quality
    from kdiag.analysis.spark_plumbing import RUN, release, with_order

    rng = random.Random(20261126)
    tables, told_facts = [], {}
    for i in range(80):
        t = _random_table(rng, name)
        t = t.append_column(RUN, pa.array([f"r{i}"] * t.num_rows, pa.string()))
        w = table_facts.Watch(name)
        cut = sorted(rng.sample(range(1, t.num_rows), min(3, t.num_rows - 1)))
        for a, b in zip([0, *cut], [*cut, t.num_rows]):
            w.feed(t.slice(a, b - a))
        tables.append(t)
        told_facts[f"r{i}"] = w.facts()
    t = pa.concat_tables(tables)
    df = with_order(spark.createDataFrame(t.to_pandas(), schema=from_arrow_schema(t.schema)).coalesce(1))
    q = quality.Quality()
    try:
        kept = quality.drop_duplicates(df, name, q, quality.copy_candidates(df, name))
        before = {r[RUN]: r["count"] for r in df.groupBy(RUN).count().collect()}
        after = {r[RUN]: r["count"] for r in kept.groupBy(RUN).count().collect()}
    finally:
        release(q)
    stepped = {r[RUN] for r in quality._step_observations(df, name).select(RUN).distinct().collect()}
    told_clean = found = 0
    for run, f in told_facts.items():
        drops = before[run] - after.get(run, 0)
        one = t.filter(pa.compute.equal(t[RUN], run)).to_pylist()
        assert not (drops and f["no_copies"]), (one, f, drops)
        assert not (run in stepped and f["no_clock_steps"]), (one, f)
        told_clean += f["no_copies"] and f["no_clock_steps"]
        found += bool(drops or run in stepped)
    # Both kinds of table were made: the comparison could have failed.
    assert told_clean >= 5 and found >= 5, (told_clean, found)


def _calls(*rows) -> pa.Table:
    """syscalls rows (pid, ts_us, args, ret, data) of one thread, in file order."""
    return pa.table({"line_no": pa.array(range(1, len(rows) + 1), pa.int64()),
                     "pid": pa.array([r[0] for r in rows], pa.int32()),
                     "ts_us": pa.array([r[1] for r in rows], pa.int64()),
                     "dur_us": pa.array([0] * len(rows), pa.int64()), "syscall": ["read"] * len(rows),
                     "args": [r[2] for r in rows], "ret": pa.array([r[3] for r in rows], pa.int64()),
                     "data": [r[4] for r in rows]})


HEADER = (7, 1_700_000_000_000_001, '3, "\\x17\\x03\\x03\\x01\\x0b", 5', 5, "")
BODY = (7, 1_700_000_000_000_001, '3, "..."..., 267', 267, "")
LATER = (7, 1_700_000_000_000_040, "3, 0x7f, 5", -1, "")


@pytest.mark.parametrize("case, rows, clean", [
    # A TLS record's header, then its body, in one microsecond: a tie, not a copy.
    ("tied", (HEADER, BODY, LATER), True),
    ("copied", (HEADER, HEADER, LATER), False),
    # Spark's check reads no socket text (job._inputs): not a difference.
    ("copied_but_text", (HEADER, HEADER[:4] + ("x",), LATER), False),
    ("tied_then_copied", (HEADER, BODY, HEADER, LATER), False),
    ("back", (LATER, HEADER), False),
])
@pytest.mark.parametrize("cut", [None, 1, 2])
def test_calls_in_one_microsecond_are_compared_column_by_column(spark, case, rows, clean, cut):
    """One thread's calls that share a time are told apart by their other
    columns, also across the chunks the parse feeds (``cut``: where the
    table is split); where they agree, Spark's check drops one."""
    t = _calls(*rows)
    w = table_facts.Watch("syscalls")
    for a, b in ((0, t.num_rows),) if cut is None else ((0, cut), (cut, t.num_rows)):
        w.feed(t.slice(a, b - a))
    assert w.facts()["no_copies"] is clean
    drops, _ = spark_finds(spark, t.drop_columns(["data"]), "syscalls")
    assert drops == (0 if case in ("tied", "back") else 1)


def test_ties_past_the_bound_are_not_compared():
    many = _calls(*[(7, 1_700_000_000_000_001, f"3, {i}", i, "") for i in range(table_facts.MAX_TIED + 1)])
    w = table_facts.Watch("syscalls")
    w.feed(many)
    assert w.facts()["no_copies"] is False


def test_facts_describe_their_rows_only(tmp_path):
    t = pa.table({"line_no": [1, 2, 3], "pid": pa.array([1, 1, 1], pa.int32()), "ts_us": [10, 20, 30],
                  "dur_us": [1, 1, 1]})
    w = table_facts.Watch("syscalls")
    w.feed(t)
    with pq.ParquetWriter(tmp_path / "syscalls.parquet", t.schema) as pw:
        pw.write_table(t)
        w.stamp(pw)
    assert table_facts.read(tmp_path / "syscalls.parquet") == {"no_copies": True, "no_clock_steps": True}
    # Rewritten with a row less by a tool that copies the footer's metadata: not the rows described.
    footer = pq.read_metadata(tmp_path / "syscalls.parquet").metadata
    kept = pq.read_table(tmp_path / "syscalls.parquet").replace_schema_metadata(
        {table_facts.KEY: footer[table_facts.KEY.encode()]})
    pq.write_table(kept.slice(1), tmp_path / "cut.parquet")
    assert table_facts.read(tmp_path / "cut.parquet") == {}
    pq.write_table(t, tmp_path / "plain.parquet")
    assert table_facts.read(tmp_path / "plain.parquet") == {}
    meta = {table_facts.KEY: json.dumps({"v": table_facts.VERSION + 1, "rows": 3, "no_copies": True})}
    pq.write_table(t.replace_schema_metadata(meta), tmp_path / "newer.parquet")
    assert table_facts.read(tmp_path / "newer.parquet") == {}


def test_the_analysis_checks_only_what_was_not_told(spark, tmp_path, monkeypatch):
    """Told clean: neither copies nor steps looked for in Spark. Not told
    (the footer stripped): both, and the same findings."""
    from kdiag.analysis import input_checks as quality
    from kdiag.analysis.job import TABLES, analyze

    out = parse_paths([write(tmp_path, "rdkafka.log", LOG), write(tmp_path, "strace.txt", STRACE)], tmp_path / "t")
    looked = []
    real_candidates, real_steps = quality.copy_candidates, quality.clock_steps
    monkeypatch.setattr(quality, "copy_candidates", lambda df, name: looked.append(name) or real_candidates(df, name))
    monkeypatch.setattr(quality, "clock_steps", lambda s, dfs, q: looked.append(tuple(dfs)) or real_steps(s, dfs, q))
    first = analyze(spark, out.paths["syscalls"].parent)
    # Only the tables this parse did not write are looked at (none of their rows to hash).
    assert looked == [n for n in TABLES if n not in ("syscalls", "rdkafka_events", "log_writes")] + [()], looked
    for name in ("syscalls", "rdkafka_events", "log_writes"):
        path = out.paths[name]
        pq.write_table(pq.read_table(path).replace_schema_metadata(None), path)
    looked.clear()
    second = analyze(spark, out.paths["syscalls"].parent)
    assert sorted(x for x in looked if isinstance(x, str)) == sorted(TABLES)
    assert ("syscalls", "rdkafka_events") in looked
    for f in (first, second):
        f.pop("seconds", None)
        f.pop("timings", None)
    assert json.dumps(first, sort_keys=True, default=str) == json.dumps(second, sort_keys=True, default=str)
