"""Bundles parsed on the executors of a real standalone cluster on loopback
(a master and two workers from the Spark that pyspark ships): every table
keyed by bundle_id, each bundle's rows as its own parse gives them, a bad
bundle a row of reasons rather than a failed job."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile

import pytest

from made_bundles import ON, healthy_bundle

# The driver runs in a process of its own: this one has a local session.
DRIVER = r"""
import json, os, sys, time
os.environ["KDIAG_SPARK_MASTER"] = sys.argv[1]
from pyspark.sql import functions as F
from kdiag.analysis.spark import session
from kdiag.fleet.ingest import ingest
spark = session("kdiag-fleet-test")
sc = spark.sparkContext
# Both executors up before the job, so that its tasks can go to both.
deadline = time.monotonic() + 90
while sc._jsc.sc().getExecutorMemoryStatus().size() < 3 and time.monotonic() < deadline:
    time.sleep(0.2)
got = ingest(spark, sys.argv[3:], sys.argv[2])
def checksum(df):   # as test_fleet_ingest.checksum
    return F.sum(F.xxhash64(*[c for c in df.columns if c != "bundle_id"]) % 1000000007)
rows = {name: {r.bundle_id: r["count"] for r in df.groupBy("bundle_id").count().collect()}
        for name, df in got.tables.items()}
sums = {name: {r.bundle_id: r.s for r in df.groupBy("bundle_id").agg(checksum(df).alias("s")).collect()}
        for name, df in got.tables.items()}
print(json.dumps({"bundles": [r.asDict() for r in got.bundles.collect()], "rows": rows, "sums": sums}))
"""


def checksum(df):
    """An order-free sum over a table's rows, of every column but bundle_id."""
    from pyspark.sql import functions as F

    return F.sum(F.xxhash64(*[c for c in df.columns if c != "bundle_id"]) % 1_000_000_007)


def own_parse(bundle, tmp_path, spark) -> tuple[dict, dict]:
    """(rows, checksum) per table of the bundle's own parse, in this process."""
    from kdiag.analysis.spark_plumbing import read_table
    from kdiag.bundle import archive
    from kdiag.ingest.tables import parse_paths

    d = tmp_path / (bundle.name + ".unpacked")
    with tarfile.open(bundle) as t:
        t.extractall(d, filter="data")
    raw = archive.analysed_files(d)
    out = tmp_path / (bundle.name + ".tables")
    rows = parse_paths(raw, out, base=d).rows
    sums = {}
    for name in rows:
        df = read_table(spark, out, name)
        sums[name] = df.agg(checksum(df)).first()[0]
    return rows, sums


def test_bundles_are_parsed_on_the_executors_into_tables_keyed_by_bundle(cluster, tmp_path, spark):
    folder = tmp_path / "tickets"
    folder.mkdir()
    off = healthy_bundle(folder)
    (folder / "junk.tar.gz").write_bytes(b"pasted text, not an archive\n")
    (folder / "notes.txt").write_text("not named as a bundle: not read\n")
    shutil.copy(ON, tmp_path / "on.tar.gz")
    work = (tmp_path / "work").as_uri()
    res = subprocess.run([sys.executable, "-c", DRIVER, cluster.master, work,
                          (tmp_path / "on.tar.gz").as_uri(), str(folder)],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    facts = {b["source"].rsplit("/", 1)[-1]: b for b in got["bundles"]}
    assert set(facts) == {"on.tar.gz", "off.tar.gz", "junk.tar.gz"}
    junk = facts["junk.tar.gz"]
    assert junk["state"] == "refused" and junk["problems"] == ["neither a tar archive nor a directory"]
    for name, bundle in (("on.tar.gz", ON), ("off.tar.gz", off)):
        f = facts[name]
        assert f["state"] == "parsed" and f["librdkafka_version"] == "2.16.0" and f["host"] == "vm"
        want, sums = own_parse(bundle, tmp_path, spark)
        assert f["table_rows"] == want
        assert {t: got["rows"][t][f["bundle_id"]] for t in want} == want
        # Every value of every row, not only the counts.
        assert {t: got["sums"][t][f["bundle_id"]] for t in want} == sums
    assert facts["on.tar.gz"]["tcp_retrans"] == 2
    # Parsed in the executors' Python workers, not the driver's, on both workers.
    where = [b["parsed_by"].split(":") for b in got["bundles"]]
    assert all(role == "CoarseGrainedExecutorBackend" for _, _, role in where), where
    assert len({pid for _, pid, _ in where}) >= 2, where


def test_a_path_that_is_not_there_is_said_before_spark(tmp_path):
    from kdiag.fleet.ingest import NoBundles, locations

    with pytest.raises(NoBundles, match="absent.tar.gz: no such file or directory"):
        locations([str(tmp_path / "absent.tar.gz")])
    files, trees = locations([str(ON), str(tmp_path), str(tmp_path / "*.tgz"), "s3a://b/x/y.tar.gz", "hdfs://nn/d"])
    assert files == [ON.resolve().as_uri(), "s3a://b/x/y.tar.gz"]
    assert trees == [tmp_path.resolve().as_uri(), str(tmp_path / "*.tgz"), "hdfs://nn/d"]


def test_where_python_cannot_write_the_work_dir_spark_writes_the_tables(tmp_path, spark):
    """A work dir given as a bare path is Hadoop's default filesystem (HDFS
    on many clusters), which the executors' Python cannot write: the
    tables come back as bytes and Spark writes them. Same rows as the
    direct writes."""
    from pyspark.sql import functions as F

    from kdiag.fleet.ingest import ingest

    shutil.copy(ON, tmp_path / "on.tar.gz")
    sums = {}
    for kind, work in (("spark", str(tmp_path / "bare")), ("direct", (tmp_path / "direct").as_uri())):
        got = ingest(spark, [str(tmp_path / "on.tar.gz")], work)
        sums[kind] = {name: df.agg(checksum(df), F.count("*")).first()[:] for name, df in got.tables.items()}
    want, own = own_parse(ON, tmp_path, spark)
    assert sums["spark"] == sums["direct"]
    assert {t: sums["direct"][t][0] for t in want} == own
    assert {t: sums["direct"][t][1] for t in want} == want
    # Spark's writes carry its commit marker; the direct ones are named by the parse job's output.
    assert (tmp_path / "bare" / "tables" / "syscalls" / "_SUCCESS").exists()
    assert not (tmp_path / "direct" / "tables" / "syscalls" / "_SUCCESS").exists()


def test_only_the_files_the_committed_parse_names_are_read(tmp_path, spark):
    """A task that failed or ran twice may leave a table file behind; the
    parse job's output names the files of the attempts Spark kept, and
    only those are read. The others are removed."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kdiag.bundle import archive
    from kdiag.fleet.ingest import WRITTEN, _written

    schema = archive.table_schemas()["host"].append(pa.field("bundle_id", pa.string()))
    root = tmp_path / "tables"
    (root / "host").mkdir(parents=True)
    kept, stray = root / "host" / "part-a.parquet", root / "host" / "part-b.parquet"
    for path, bid in ((kept, "kept"), (stray, "stray")):
        pq.write_table(pa.Table.from_pylist([{"bundle_id": bid}], schema=schema), path)
    staged = spark.createDataFrame(
        [(None, WRITTEN, json.dumps({"table": "host", "path": str(kept)}).encode())],
        "bundle_id string, tbl string, data binary")
    tables = _written(spark, staged, str(root))
    assert [r.bundle_id for r in tables["host"].collect()] == ["kept"]
    assert not stray.exists() and kept.exists()
    assert tables["syscalls"].count() == 0 and "bundle_id" in tables["syscalls"].columns
