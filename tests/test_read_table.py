"""spark_plumbing.read_table numbers a table's rows in file order as it
reads it, into the plan (a small table) or as a Parquet scan (a larger
one), and in_plan tells the two apart: the analysis holds only what is not
rows in the plan already."""
import pyarrow as pa
import pyarrow.parquet as pq

from kdiag.analysis.spark_plumbing import RUN, in_plan, read_table

LINES = list(range(1, 301))


def _table(tmp_path):
    # Lines out of time order, as a clock step leaves them: only the file's
    # order says which came first.
    t = pa.table({"line_no": pa.array(LINES, pa.int64()),
                  "ts_us": pa.array([(i * 7919) % 1000 for i in LINES], pa.int64())})
    pq.write_table(t, tmp_path / "syscalls.parquet", row_group_size=64)


def test_a_small_table_is_numbered_as_rows_in_the_plan(spark, tmp_path):
    _table(tmp_path)
    df = read_table(spark, tmp_path, "syscalls", numbered=True)
    assert in_plan(df)
    assert [r.line_no for r in df.orderBy("_id").collect()] == LINES
    assert df.columns == ["line_no", "ts_us", RUN, "_id"]
    # A projection of the rows is a plan again, which in_plan does not claim.
    assert not in_plan(df.drop("_id"))
    assert not in_plan(None)


def test_a_scanned_table_is_numbered_by_spark_in_file_order(spark, tmp_path, monkeypatch):
    monkeypatch.setenv("KDIAG_LOCAL_TABLE_BYTES", "0")
    _table(tmp_path)
    df = read_table(spark, tmp_path, "syscalls", numbered=True)
    assert not in_plan(df)
    assert [r.line_no for r in df.orderBy("_id").collect()] == LINES
    assert "_id" not in read_table(spark, tmp_path, "syscalls").columns
