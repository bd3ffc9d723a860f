"""Bundles -> tables, on the executors.

An archive is read where it lies: a local file (``file:``) by the
executor's Python straight from its path, as a stream; any other
filesystem (``hdfs://``, ``s3a://``: Hadoop's, which Python cannot read)
through Spark's ``binaryFile`` source, whose bytes (at most the cap on an
archive's size, what the archive holds) are spooled to a temporary file.
Either way the driver never holds one. On the executors, each archive is
first verified as ``kdiag bundle verify`` does (streaming, within the caps
of ``bundle.limits``, every member held to the manifest's size), and only
one that verified is unpacked and parsed by the code ``kdiag replay`` runs
(``bundle.unpack``, ``ingest.tables.parse_paths``: one implementation): an
archive's memory and temporary disk are bounded by the caps, not by what
its members claim. Its rows get the bundle's ``bundle_id`` (the first 16
hex digits of the archive's SHA-256).

Archives with the same content share a ``bundle_id``: a first pass hashes
every archive, and only one of each content (the first by its path) is
parsed; the others are rows of ``bundles`` with state ``duplicate``, the
``bundle_id`` they repeat in ``duplicate_of``, and the kept one named.

Where the work directory is a local or shared disk (``file:``), each task
writes its bundles' rows itself, one Parquet file per table, and says in
the parse job's own (committed) output which files it wrote: only those
are read, so a failed or repeated task's files are never counted. On any
other filesystem, the tables come back as Arrow stream bytes, one row per
(bundle, table), and a second pass per table writes them through Spark. Handing
the rows to the JVM costs more than writing them: at 1000 bundles that
second pass took 39 s, while the tasks' own writes cost 7-9 ms of CPU a
bundle (about 4 s on 2 cores).

Each bundle's parse also says which tables hold copies of rows
(``input_checks.has_copies``), so that the judge hashes only those.

A bundle that cannot be read (refused by verification, over a cap, not a
tar, failing in its parse) is a row of the ``bundles`` table with its
reasons, never a failed job: the other bundles are still analysed.
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
from kdiag.visible import visible

# What a folder or glob is searched for: the names kdiag trace gives bundles.
BUNDLE_GLOB = "*.{tar.gz,tgz}"
FACTS = "bundles"
# A parse job's row that names a table file a task wrote (direct writes).
WRITTEN = "written"
# Rows a table file's row group holds at most: one bundle's syscalls are a
# few thousand, and Spark reads a row group per vectorised batch run.
ROW_GROUP_ROWS = 1 << 17
# binaryFile holds a file in one byte array, which Java caps at 2^31 - 1.
BINARY_FILE_MAX = (1 << 31) - 1
_GLOB_CHARS = set("*?[{")

FACTS_DDL = ("bundle_id string, source string, bytes long, state string, problems array<string>, "
             "host string, librdkafka_version string, created_us long, tcp_retrans long, probe string, "
             "notes array<string>, table_rows map<string,long>, parsed_by string, copies_in array<string>, "
             "duplicate_of string")
# A bundle's state when another archive with its content is the one parsed.
DUPLICATE = "duplicate"
_IDENTITY_DDL = "path string, bundle_id string, problem string"


@dataclass
class Ingested:
    tables: dict        # table -> DataFrame of every bundle's rows, with bundle_id
    bundles: object     # DataFrame: one row per archive found (FACTS_DDL)
    work: str           # the URI the tables were written under


class NoBundles(KdiagError):
    """Nothing to read where the user pointed."""


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
    """DataFrame (path, length) of every archive named or found: a listing,
    no archive's bytes read."""
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
    # Without the content column binaryFile lists the files and reads none.
    return df.select("path", "length")


def _with_content(spark, listed: list[tuple[str, int]]):
    """DataFrame (path, length, content) of ``listed`` (path, length): content
    null for a local file, which the executor reads from its path as a
    stream; read by ``binaryFile`` for any other filesystem's."""
    from pyspark.sql import functions as F

    schema = "path string, length long, content binary"
    local = [(p, n, None) for p, n in listed if local_path(p)]
    remote = [p for p, n in listed if not local_path(p)]
    df = spark.createDataFrame(local, schema)
    if remote:
        df = df.unionByName(spark.read.format("binaryFile").load(remote)
                            .select("path", F.col("length").cast("long"), "content"))
    return df


def _kept(identities: list[tuple[str, str | None, str | None]]) -> tuple[set, dict]:
    """(the paths to parse, path -> (bundle_id, the kept path) of each
    duplicate): of archives with one content, the first by path is kept."""
    first: dict[str, str] = {}
    for path, bid, _ in sorted(identities, key=lambda x: x[0]):
        if bid is not None:
            first.setdefault(bid, path)
    dups = {path: (bid, first[bid]) for path, bid, _ in identities if bid is not None and first[bid] != path}
    return {path for path, _, _ in identities} - set(dups), dups


def ingest(spark, given: list[str], work: str, limits=None, verify: bool = True) -> Ingested:
    """Every bundle in ``given``, parsed on the executors into tables under
    ``work`` (a URI every executor can write and read)."""
    from pyspark.sql import functions as F

    from kdiag.bundle.limits import Limits

    limits = limits or Limits.resolve()
    cap = min(limits.unpacked_bytes, BINARY_FILE_MAX)
    listed = [(r.path, r.length) for r in archives(spark, given).collect()]
    within = [(p, n) for p, n in listed if n <= cap]
    work = work.rstrip("/")
    stage = f"{work}/stage"
    direct = local_path(f"{work}/tables")
    if direct:
        shutil.rmtree(direct, ignore_errors=True)
    conf = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    # One archive a batch: a batch holds its archives' bytes at once.
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "1")
    try:
        identities = [tuple(r) for r in _with_content(spark, within).mapInArrow(_identify, _IDENTITY_DDL).collect()]
        keep, dups = _kept(identities)
        (_with_content(spark, [(p, n) for p, n in within if p in keep]).select("path", "content")
         .mapInArrow(_Parse(limits, verify, direct), "bundle_id string, tbl string, data binary")
         .write.mode("overwrite").parquet(stage))
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", conf)
    staged = spark.read.parquet(stage)
    tables = _written(spark, staged, direct) if direct else _decoded(spark, staged, work)
    facts = staged.filter(F.col("tbl") == FACTS).select(
        F.from_json(F.col("data").cast("string"), FACTS_DDL).alias("f")).select("f.*")
    sizes = dict(listed)
    said = [{"source": p, "bytes": n, "state": "refused",
             "problems": [f"{n} bytes: over the {cap} bytes a bundle may have here "
                          "(--max-unpacked-mb raises it, up to 2 GiB)"]} for p, n in listed if n > cap]
    said += [{"source": p, "bytes": sizes[p], "state": DUPLICATE, "duplicate_of": bid,
              "problems": [f"the same content as {kept} (bundle_id {bid}), read there: counted once"]}
             for p, (bid, kept) in sorted(dups.items())]
    if said:
        names = [c.split()[0] for c in FACTS_DDL.split(", ")]
        facts = facts.unionByName(spark.createDataFrame([tuple(d.get(n) for n in names) for d in said], FACTS_DDL))
    facts.write.mode("overwrite").parquet(f"{work}/{FACTS}")
    return Ingested(tables, spark.read.parquet(f"{work}/{FACTS}"), work)


def reopened(spark, work: str) -> dict:
    """The tables ``ingest`` wrote under ``work``, read by another session
    (the first one's JVM died)."""
    from kdiag.bundle import archive

    work = work.rstrip("/")
    direct = local_path(f"{work}/tables")
    if direct:
        return _written(spark, spark.read.parquet(f"{work}/stage"), direct)
    return {name: spark.read.parquet(f"{work}/tables/{name}") for name in archive.table_schemas()}


def _identify(batches):
    """Batches of (path, length, content) -> (path, bundle_id, why none):
    each archive hashed as a stream from its path, or from its bytes."""
    import pyarrow as pa

    schema = pa.schema([("path", pa.string()), ("bundle_id", pa.string()), ("problem", pa.string())])
    for batch in batches:
        rows = []
        for path, content in zip(batch.column("path").to_pylist(), batch.column("content").to_pylist()):
            try:
                rows.append({"path": path, "bundle_id": _digest(path, content), "problem": None})
            except OSError as e:    # said again, in full, by its parse
                rows.append({"path": path, "bundle_id": None, "problem": str(e)})
        yield pa.RecordBatch.from_pylist(rows, schema=schema)


def _digest(path: str, content: bytes | None) -> str:
    """The bundle_id: an archive's SHA-256, from its bytes or its local file."""
    if content is not None:
        return hashlib.sha256(content).hexdigest()[:16]
    h = hashlib.sha256()
    with open(local_path(path), "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def local_path(uri: str) -> str | None:
    """The local path of a ``file:`` URI (the tasks write there
    themselves), None for any other filesystem."""
    from urllib.parse import unquote, urlparse

    u = urlparse(uri)
    return unquote(u.path) if u.scheme == "file" and u.netloc in ("", "localhost") else None


def _written(spark, staged, direct: str) -> dict:
    """Each table: the files the parse job's committed output names. Any
    other file there (a task that failed or ran twice) is removed."""
    from pyspark.sql import functions as F

    from kdiag.bundle import archive

    files: dict[str, list[str]] = {}
    for r in staged.filter(F.col("tbl") == WRITTEN).select("data").collect():
        w = json.loads(bytes(r.data))
        files.setdefault(w["table"], []).append(w["path"])
    keep = {p for ps in files.values() for p in ps}
    for p in Path(direct).glob("*/*.parquet"):
        if str(p) not in keep:
            p.unlink()
    tables = {}
    for name, schema in archive.table_schemas().items():
        want = _spark_schema(schema)
        paths = [Path(p).as_uri() for p in sorted(files.get(name, []))]
        tables[name] = spark.read.schema(want).parquet(*paths) if paths else spark.createDataFrame([], want)
    return tables


def _decoded(spark, staged, work: str) -> dict:
    """Each table's Arrow stream bytes, one row a bundle, turned into rows
    by a pass of its own and written by Spark under ``work``."""
    from pyspark.sql import functions as F

    from kdiag.bundle import archive

    tables = {}
    for name, schema in archive.table_schemas().items():
        out = f"{work}/tables/{name}"
        (staged.filter(F.col("tbl") == name).mapInArrow(_decode, _spark_schema(schema))
         .write.mode("overwrite").parquet(out))
        tables[name] = spark.read.parquet(out)
    return tables


def _keyed_schema(schema):
    """A table's schema with the bundle_id every fleet row carries."""
    import pyarrow as pa

    return schema.append(pa.field("bundle_id", pa.string()))


def _keyed(t, bid: str, schema):
    """One bundle's rows of a table, with its bundle_id, in ``_keyed_schema``."""
    import pyarrow as pa

    want = _keyed_schema(schema)
    return t.append_column("bundle_id", pa.array([bid] * t.num_rows, pa.string())).select(want.names).cast(want)


def _spark_schema(schema):
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(_keyed_schema(schema))


class _Parse:
    """The executors' half: Arrow batches of (path, content) -> each
    bundle's tables, written to ``direct`` (then a row naming each file
    written) or as rows of (bundle_id, table, Arrow stream bytes), and one
    (bundle_id, "bundles", facts as JSON) a bundle. A class, so that what
    it carries (the caps, the directory) is plain data to pickle."""

    def __init__(self, limits, verify: bool, direct: str | None = None) -> None:
        self.limits = limits
        self.verify = verify
        self.direct = direct

    def __call__(self, batches):
        import pyarrow as pa

        from kdiag.bundle import archive

        schema = pa.schema([("bundle_id", pa.string()), ("tbl", pa.string()), ("data", pa.binary())])
        schemas = archive.table_schemas()
        files = _TableFiles(self.direct) if self.direct else None
        try:
            for batch in batches:
                for path, content in zip(batch.column("path").to_pylist(), batch.column("content").to_pylist()):
                    rows = []
                    for b, t, d in parsed(path, content, self.limits, self.verify):
                        if t == FACTS:
                            rows.append({"bundle_id": b, "tbl": t, "data": d})
                        elif files is not None:
                            files.add(t, _keyed(d, b, schemas[t]))
                        else:
                            rows.append({"bundle_id": b, "tbl": t, "data": _ipc_bytes(_keyed(d, b, schemas[t]))})
                    yield pa.RecordBatch.from_pylist(rows, schema=schema)
            if files is not None:
                written = files.close()
                yield pa.RecordBatch.from_pylist(
                    [{"bundle_id": None, "tbl": WRITTEN, "data": json.dumps({"table": t, "path": p}).encode()}
                     for t, p in written], schema=schema)
        except BaseException:
            if files is not None:
                files.discard()
            raise


def _ipc_bytes(t) -> bytes:
    """A table as an Arrow stream: the parse has it as Arrow already, and
    the stage's Parquet compresses the bytes."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    return sink.getvalue().to_pybytes()


class _TableFiles:
    """One task's table files under ``root/<table>/``: each bundle's rows
    with its bundle_id, buffered into row groups of ROW_GROUP_ROWS."""

    def __init__(self, root: str) -> None:
        import uuid

        self.root = Path(root)
        self.tag = uuid.uuid4().hex[:12]
        self.writers: dict = {}
        self.pending: dict[str, list] = {}

    def add(self, table: str, t) -> None:
        """``t``: one bundle's rows, ``_keyed``."""
        self.pending.setdefault(table, []).append(t)
        if sum(p.num_rows for p in self.pending[table]) >= ROW_GROUP_ROWS:
            self._flush(table)

    def _flush(self, table: str) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        parts = self.pending.pop(table, [])
        if not parts:
            return
        t = pa.concat_tables(parts)
        if table not in self.writers:
            path = self.root / table / f"part-{self.tag}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            self.writers[table] = (pq.ParquetWriter(path, t.schema, compression="snappy"), path)
        self.writers[table][0].write_table(t, row_group_size=ROW_GROUP_ROWS)

    def close(self) -> list[tuple[str, str]]:
        for table in list(self.pending):
            self._flush(table)
        for w, _ in self.writers.values():
            w.close()
        return [(table, str(path)) for table, (_, path) in self.writers.items()]

    def discard(self) -> None:
        for w, path in self.writers.values():
            try:
                w.close()
            finally:
                path.unlink(missing_ok=True)


def _decode(batches):
    """The Arrow streams of one table's bundles (``_ipc_bytes``, already
    ``_keyed``) -> their rows."""
    import pyarrow as pa

    for batch in batches:
        for data in batch.column("data").to_pylist():
            yield from pa.ipc.open_stream(data).read_all().to_batches()


def parsed(source: str, content: bytes | None, limits, verify: bool = True):
    """(bundle_id, table, rows) of one archive, ``content`` its bytes or None
    to read it from its local path: each table (Arrow), then its facts
    (JSON bytes). Whatever goes wrong is a fact, not a raise."""
    facts = {"bundle_id": None, "source": source, "bytes": None, "state": "parsed", "problems": [],
             "parsed_by": _where()}
    try:
        with tempfile.TemporaryDirectory(prefix="kdiag-fleet-") as tmp:
            # Rows are yielded only after the parse is done: a failure
            # half-way leaves no table with some of its rows.
            out = list(_parsed(source, content, limits, verify, facts, Path(tmp)))
    except Exception as e:  # noqa: BLE001 - one bundle's failure, whatever it is, is its row, not the job's
        facts.update(state="refused", problems=facts["problems"] + [visible(f"{type(e).__name__}: {e}")])
        out = []
    yield from out
    yield facts["bundle_id"], FACTS, json.dumps(facts, default=str).encode()


def _parsed(source: str, content: bytes | None, limits, verify: bool, facts: dict, tmp: Path):
    import pyarrow.parquet as pq

    from kdiag.analysis.input_checks import COPY_TABLES, has_copies
    from kdiag.bundle import archive as bundle
    from kdiag.capture.probe_producer import retransmits
    from kdiag.errors import KdiagError
    from kdiag.ingest.tables import parse_paths

    if content is None:
        arc = Path(local_path(source))
        size = arc.stat().st_size
    else:
        arc, size = tmp / "bundle", len(content)
        arc.write_bytes(content)
    facts.update(bundle_id=_digest(source, content), bytes=size)
    d = None
    try:
        # As `kdiag bundle verify`: one stream within the caps, each member
        # held to the manifest's size; nothing is unpacked before it.
        v = bundle.verify(arc, limits)
        facts["problems"] = [str(p) for p in v.problems]
        if not v.ok and not v.unsealed and (verify or v.not_a_bundle):
            facts["state"] = "refused"
            return
        d = bundle.unpack(arc, limits)
        man = bundle.manifest(d, limits)
        raw = bundle.analysed_files(d)
        out = parse_paths(raw, tmp / "tables", base=d)
        probe = bundle.probe_summary(d, limits)
    except (KdiagError, OSError, ValueError, EOFError) as e:
        facts.update(state="refused", problems=facts["problems"] + [visible(f"{type(e).__name__}: {e}")])
        return
    finally:
        if d is not None and d != arc:
            shutil.rmtree(d, ignore_errors=True)
    copies = []
    for table, p in out.paths.items():
        t = pq.read_table(p)
        if table in COPY_TABLES and has_copies(t, table):
            copies.append(table)
        yield facts["bundle_id"], table, t
    host = man.get("host") if isinstance(man.get("host"), dict) else {}
    versions = man.get("versions") if isinstance(man.get("versions"), dict) else {}
    created = man.get("created_us")
    facts.update(host=_str(host.get("hostname")), librdkafka_version=_str(versions.get("librdkafka")),
                 created_us=created if isinstance(created, int) else None,
                 tcp_retrans=retransmits(probe if probe is not None else man.get("target")),
                 probe=json.dumps(probe) if probe is not None else None, notes=out.notes,
                 table_rows=out.rows, copies_in=copies)


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
