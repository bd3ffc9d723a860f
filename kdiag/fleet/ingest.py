"""Bundles -> tables, on the executors.

Spark's ``binaryFile`` source reads each bundle archive where it lies (a
local path, ``file://``, or whatever Hadoop filesystem the cluster is
configured for), so the driver never holds one. On the executors, each
archive is checked, unpacked and parsed by the code ``kdiag replay`` runs
(``bundle.verify``, ``bundle.unpack``, ``ingest.tables.parse_paths``: one
implementation), and its tables come back as Parquet bytes, one row per
(bundle, table). A second pass, per table, turns those bytes into rows
with the bundle's ``bundle_id`` (the first 16 hex digits of the archive's
SHA-256), written under the work directory. Jobs per ingest: one to parse,
one per table, whatever the number of bundles.

A bundle that cannot be read (refused by verification, over a cap, not a
tar) is a row of the ``bundles`` table with its reasons, never a failed
job: the other bundles are still analysed.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kdiag.errors import KdiagError

# What a folder or glob is searched for: the names kdiag trace gives bundles.
BUNDLE_GLOB = "*.{tar.gz,tgz}"
FACTS = "bundles"
# binaryFile holds a file in one byte array, which Java caps at 2^31 - 1.
BINARY_FILE_MAX = (1 << 31) - 1
_GLOB_CHARS = set("*?[{")

FACTS_DDL = ("bundle_id string, source string, bytes long, state string, problems array<string>, "
             "host string, librdkafka_version string, created_us long, tcp_retrans long, probe string, "
             "notes array<string>, table_rows map<string,long>, parsed_by string")


@dataclass
class Ingested:
    tables: dict        # table -> DataFrame of every bundle's rows, with bundle_id
    bundles: object     # DataFrame: one row per archive found (FACTS_DDL)
    work: str           # the URI the tables were written under


class NoBundles(KdiagError):
    """Nothing to read where the user pointed."""


class NeedsPandas(KdiagError):
    """PySpark hands Arrow batches to Python (mapInArrow) only with pandas."""


def _pandas_or_fail() -> None:
    import importlib.util

    if importlib.util.find_spec("pandas") is None:
        raise NeedsPandas("many bundles are parsed on Spark's executors, which PySpark does with pandas "
                          "installed: pip install 'kdiag[fleet]' (pandas>=2.2,<3)")


def locations(given: list[str]) -> tuple[list[str], list[str]]:
    """(archives named one by one, folders and globs to search), as URIs
    or paths Hadoop reads. A local path that does not exist is refused
    here, in the user's words, before Spark says it in Java's."""
    files, trees = [], []
    for g in given:
        if "://" in g or g.startswith("file:"):
            name = g.rstrip("/").rsplit("/", 1)[-1]
            globbed = bool(_GLOB_CHARS & set(name))
            (files if not globbed and name.endswith((".tar.gz", ".tgz", ".tar")) else trees).append(g)
            continue
        p = Path(g)
        if _GLOB_CHARS & set(g):
            trees.append(str(p.absolute()))
        elif p.is_dir():
            trees.append(p.resolve().as_uri())
        elif p.is_file():
            files.append(p.resolve().as_uri())
        else:
            raise NoBundles(f"{g}: no such file or directory")
    return files, trees


def archives(spark, given: list[str]):
    """DataFrame (path, length, content) of every archive named or found;
    content is read only for the rows that keep it."""
    from pyspark.errors import AnalysisException

    files, trees = locations(given)
    found = []
    try:
        if files:
            found.append(spark.read.format("binaryFile").load(files))
        if trees:
            found.append(spark.read.format("binaryFile").option("recursiveFileLookup", "true")
                         .option("pathGlobFilter", BUNDLE_GLOB).load(trees))
    except AnalysisException as e:
        raise NoBundles(str(e).splitlines()[0]) from None
    df = found[0]
    for more in found[1:]:
        df = df.unionByName(more)
    return df.select("path", "length", "content")


def ingest(spark, given: list[str], work: str, limits=None, verify: bool = True) -> Ingested:
    """Every bundle in ``given``, parsed on the executors into tables under
    ``work`` (a URI every executor can write and read)."""
    from pyspark.sql import functions as F

    from kdiag.bundle.limits import Limits
    from kdiag.bundle import archive

    _pandas_or_fail()
    limits = limits or Limits.resolve()
    cap = min(limits.unpacked_bytes, BINARY_FILE_MAX)
    found = archives(spark, given)
    work = work.rstrip("/")
    stage = f"{work}/stage"
    over = found.filter(F.col("length") > cap).select(
        F.col("path").alias("source"), F.col("length").alias("bytes"))
    parse = _Parse(limits, verify)
    conf = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    # One archive a batch: a batch holds its archives' bytes at once.
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "1")
    try:
        (found.filter(F.col("length") <= cap).select("path", "content")
         .mapInArrow(parse, "bundle_id string, tbl string, data binary")
         .write.mode("overwrite").parquet(stage))
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", conf)
    staged = spark.read.parquet(stage)
    tables = {}
    for name, schema in archive.table_schemas().items():
        out = f"{work}/tables/{name}"
        (staged.filter(F.col("tbl") == name).mapInArrow(_Decode(schema), _spark_schema(schema))
         .write.mode("overwrite").parquet(out))
        tables[name] = spark.read.parquet(out)
    facts = staged.filter(F.col("tbl") == FACTS).select(
        F.from_json(F.col("data").cast("string"), FACTS_DDL).alias("f")).select("f.*")
    refused = over.select(
        F.lit(None).cast("string").alias("bundle_id"), "source", "bytes", F.lit("refused").alias("state"),
        F.array(F.format_string(f"%d bytes: over the {cap} bytes a bundle may have here "
                                "(--max-unpacked-mb raises it, up to 2 GiB)", F.col("bytes"))).alias("problems"))
    facts = facts.unionByName(refused, allowMissingColumns=True)
    facts.write.mode("overwrite").parquet(f"{work}/{FACTS}")
    return Ingested(tables, spark.read.parquet(f"{work}/{FACTS}"), work)


def _spark_schema(schema):
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema.append(pa.field("bundle_id", pa.string())))


class _Parse:
    """The executors' half: Arrow batches of (path, content) -> rows of
    (bundle_id, table, Parquet bytes), and one (bundle_id, "bundles",
    facts as JSON) a bundle. A class, so that what it carries (the caps)
    is plain data to pickle."""

    def __init__(self, limits, verify: bool) -> None:
        self.limits = limits
        self.verify = verify

    def __call__(self, batches):
        import pyarrow as pa

        for batch in batches:
            for path, content in zip(batch.column("path").to_pylist(), batch.column("content").to_pylist()):
                rows = list(parsed(path, content, self.limits, self.verify))
                yield pa.RecordBatch.from_pylist(
                    [{"bundle_id": b, "tbl": t, "data": d} for b, t, d in rows],
                    schema=pa.schema([("bundle_id", pa.string()), ("tbl", pa.string()), ("data", pa.binary())]))


class _Decode:
    """Parquet bytes of one table -> its rows, with their bundle_id."""

    def __init__(self, schema) -> None:
        self.schema = schema

    def __call__(self, batches):
        import io

        import pyarrow as pa
        import pyarrow.parquet as pq

        want = self.schema.append(pa.field("bundle_id", pa.string()))
        for batch in batches:
            for bid, data in zip(batch.column("bundle_id").to_pylist(), batch.column("data").to_pylist()):
                t = pq.read_table(io.BytesIO(data))
                t = t.append_column("bundle_id", pa.array([bid] * t.num_rows, pa.string()))
                yield from t.select(want.names).cast(want).to_batches()


def parsed(source: str, content: bytes, limits, verify: bool = True):
    """(bundle_id, table, bytes) of one archive: each table as Parquet,
    then its facts as JSON. Whatever goes wrong is a fact, not a raise."""
    from kdiag.bundle import archive as bundle
    from kdiag.capture.probe_producer import retransmits
    from kdiag.errors import KdiagError
    from kdiag.ingest.tables import parse_paths

    bid = hashlib.sha256(content).hexdigest()[:16]
    facts = {"bundle_id": bid, "source": source, "bytes": len(content), "state": "parsed", "problems": [],
             "parsed_by": _where()}
    with tempfile.TemporaryDirectory(prefix="kdiag-fleet-") as tmp:
        arc = Path(tmp) / "bundle.tar.gz"
        arc.write_bytes(content)
        d = None
        try:
            v = bundle.verify(arc, limits)
            facts["problems"] = [str(p) for p in v.problems]
            if not v.ok and not v.unsealed and verify:
                facts["state"] = "refused"
                yield bid, FACTS, json.dumps(facts).encode()
                return
            d = bundle.unpack(arc, limits)
            man = bundle.manifest(d, limits)
            raw = [f for f in bundle.raw_files(d) if f.parent.name in bundle.ANALYSED_SOURCES]
            out = parse_paths(raw, Path(tmp) / "tables", base=d)
            probe = bundle.probe_summary(d, limits)
        except (KdiagError, OSError, ValueError, EOFError) as e:
            facts.update(state="refused", problems=facts["problems"] + [f"{type(e).__name__}: {e}"])
            yield bid, FACTS, json.dumps(facts).encode()
            return
        finally:
            if d is not None and d != arc:
                shutil.rmtree(d, ignore_errors=True)
        for table, p in out.paths.items():
            yield bid, table, Path(p).read_bytes()
    host = man.get("host") if isinstance(man.get("host"), dict) else {}
    versions = man.get("versions") if isinstance(man.get("versions"), dict) else {}
    created = man.get("created_us")
    facts.update(host=_str(host.get("hostname")), librdkafka_version=_str(versions.get("librdkafka")),
                 created_us=created if isinstance(created, int) else None, tcp_retrans=retransmits(probe),
                 probe=json.dumps(probe) if probe is not None else None, notes=out.notes,
                 table_rows=out.rows)
    yield bid, FACTS, json.dumps(facts, default=str).encode()


def _str(v) -> str | None:
    return v if isinstance(v, str) else None


def _where() -> str:
    """Which process parsed: the host and the JVM whose Python worker this
    is (an executor's, on a cluster)."""
    import socket

    try:
        import psutil

        jvm = next((p for p in psutil.Process().parents() if "java" in p.name()), None)
        role = next((c.rsplit(".", 1)[-1] for c in (jvm.cmdline() if jvm else [])
                     if c.startswith("org.apache.spark.")), "?")
    except Exception:   # psutil may not see the parents (containers): the host says enough
        role = "?"
    return f"{socket.gethostname()}:{os.getpid()}:{role}"
