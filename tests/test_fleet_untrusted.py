"""``kdiag fleet`` given bundles from strangers: each archive verified as
``kdiag bundle verify`` verifies it, streaming and within the caps, before
anything of it is unpacked; an archive repeated is counted once and named;
the output is private as bundles are; and a bundle the analysis fails on is
a row with its reasons while every other bundle keeps its verdict."""
from __future__ import annotations

import io
import json
import os
import shutil
import stat
import subprocess
import sys

import pytest

import bundle_mutations as bm
from conftest import ROOT
from made_bundles import ON, healthy_bundle
from kdiag.cli import Environment, main
from kdiag.status import ExitStatus

MIB = 1 << 20
# The real bundle's strace as 256 MiB of zeros: about 1 MB packed, and the
# manifest still says 678,156 bytes.
BOMB_BYTES = 256 * MIB
SIZE_DIFFERS = f"raw/strace/strace.txt: size differs from the manifest ({BOMB_BYTES} bytes, the manifest says 678156)"


@pytest.fixture(scope="module")
def bomb(tmp_path_factory):
    items = [(m, (BOMB_BYTES, bm.Zeros(BOMB_BYTES)) if m.name == "raw/strace/strace.txt" else d)
             for m, d in bm.real_members()]
    path = bm.write(items, tmp_path_factory.mktemp("bomb") / "bomb.tar.gz")
    assert path.stat().st_size < 4 * MIB
    return path


# What an executor runs for one archive, in a child whose files may not pass
# 64 MiB: the peak memory after the real bundle, then after the bomb given
# as its bytes (binaryFile's, from any other filesystem than the local one)
# and read from its path (a local file).
EXECUTOR = r"""
import json, resource, signal, sys
from pathlib import Path
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # EFBIG instead of death
resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 20, 64 << 20))
from kdiag.bundle.limits import Limits
from kdiag.fleet.ingest import parsed
out = []
for path, how in ((sys.argv[1], "bytes"), (sys.argv[2], "bytes"), (sys.argv[2], "path")):
    p = Path(path)
    rows = list(parsed(p.as_uri(), p.read_bytes() if how == "bytes" else None, Limits()))
    facts = json.loads(rows[-1][2])
    out.append({"how": how, "state": facts["state"], "problems": facts["problems"], "tables": len(rows) - 1,
                "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})
print(json.dumps(out))
"""


def test_an_executor_refuses_a_bomb_as_verify_does_before_it_unpacks(bomb, tmp_path):
    """Before: the archive was gunzipped into memory up to the unpacked-size
    cap (4 GiB) and written out whole before verify looked at it: 1.2 GB
    of one worker and 2 GB of temp disk for a 1 GiB member."""
    res = subprocess.run([sys.executable, "-c", EXECUTOR, str(ON), str(bomb)], capture_output=True, text=True,
                         cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp_path)}, timeout=300, check=False)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-3000:]
    real, by_bytes, by_path = json.loads(res.stdout)
    assert real["state"] == "parsed" and real["tables"] > 0
    for got in (by_bytes, by_path):
        assert got["state"] == "refused" and SIZE_DIFFERS in got["problems"] and got["tables"] == 0
        # The member is hashed as a stream and refused: no more memory
        # than the real bundle's parse took, far below the member's size.
        assert got["maxrss_mib"] - real["maxrss_mib"] < 48, (real, got)
    assert not list(tmp_path.iterdir())


def _fleet(tmp_path, *sources):
    out, err = io.StringIO(), io.StringIO()
    rc = main(["fleet", *map(str, sources), "-o", str(tmp_path / "out"), "--json"],
              Environment(stdout=out, stderr=err))
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def tickets(tmp_path_factory, bomb):
    """The real bundle twice (a copy under another name), a healthy one and the bomb."""
    d = tmp_path_factory.mktemp("tickets")
    shutil.copy(ON, d / "a-on.tar.gz")
    shutil.copy(ON, d / "b-copy-of-on.tar.gz")
    healthy_bundle(d, "c-off.tar.gz")
    shutil.copy(bomb, d / "d-bomb.tar.gz")
    return d


@pytest.mark.parametrize("read", ["path", "binaryFile"])
def test_ingest_parses_one_copy_of_each_content_and_refuses_the_bomb_unread(tickets, tmp_path, spark, read,
                                                                            monkeypatch):
    """``binaryFile``: as an archive on HDFS or S3 is read (no local path for
    the executors' Python), its bytes spooled, then verified the same way."""
    from pyspark.sql import functions as F

    from kdiag.fleet import ingest as fleet_ingest

    if read == "binaryFile":
        monkeypatch.setattr(fleet_ingest, "local_path", lambda uri: None)
    got = fleet_ingest.ingest(spark, [str(tickets)], (tmp_path / "work").as_uri())
    facts = {r.source.rsplit("/", 1)[-1]: r for r in got.bundles.collect()}
    on, copy, bomb = facts["a-on.tar.gz"], facts["b-copy-of-on.tar.gz"], facts["d-bomb.tar.gz"]
    assert on.state == "parsed" and on.bundle_id
    # Before: both were parsed under one bundle_id, every table's rows twice.
    assert copy.state == "duplicate" and copy.duplicate_of == on.bundle_id and copy.bundle_id is None
    assert copy.problems == [f"the same content as {on.source} (bundle_id {on.bundle_id}), read there: counted once"]
    assert bomb.state == "refused" and SIZE_DIFFERS in bomb.problems
    rows = {t: {r.bundle_id: r["count"] for r in df.groupBy("bundle_id").count().collect()}
            for t, df in got.tables.items()}
    assert {t: rows[t][on.bundle_id] for t in on.table_rows} == on.table_rows
    assert got.tables["syscalls"].filter(F.col("bundle_id") == bomb.bundle_id).count() == 0


def _modes(root):
    """(path, octal mode) of everything under ``root`` that is not private."""
    bad = []
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            mode = stat.S_IMODE(os.lstat(os.path.join(d, n)).st_mode)
            if mode != (0o700 if n in dirs else 0o600):
                bad.append((os.path.join(d, n), oct(mode)))
    if stat.S_IMODE(os.stat(root).st_mode) != 0o700:
        bad.append((str(root), oct(stat.S_IMODE(os.stat(root).st_mode))))
    return bad


def test_a_bundle_the_analysis_fails_on_is_a_row_and_the_rest_are_judged(tickets, tmp_path, spark, monkeypatch):
    """The judge runs every bundle in one Spark plan: when a bundle's rows
    fail it (here a real failing Spark job, whenever the healthy bundle is
    among those judged), the bundles are judged again in halves until it
    stands alone. Before: exit 1 with the traceback, no output at all."""
    import pandas as pd
    from pyspark.sql import functions as F

    from kdiag.fleet import judge

    original = judge.judged
    bad = {}

    def failing(spark, tables, facts, version=None):
        if any(f["source"].endswith("/c-off.tar.gz") for f in facts):
            bad["id"] = next(f["bundle_id"] for f in facts if f["source"].endswith("/c-off.tar.gz"))
            spark.range(1).select(F.raise_error(F.lit("a bundle's rows broke the plan"))).collect()
        return original(spark, tables, facts, version)

    monkeypatch.setattr(judge, "judged", failing)
    rc, out, err = _fleet(tmp_path, tickets)
    assert rc == ExitStatus.OK and "Traceback" not in err, err[-3000:]
    summary = json.loads(out)
    rows = {r.source.rsplit("/", 1)[-1]: r for r in pd.read_parquet(tmp_path / "out" / "bundles").itertuples()}
    on, off = rows["a-on.tar.gz"], rows["c-off.tar.gz"]
    assert on.judged and on.verdict == "nagle_delayed_ack" and on.requests == 30    # not 60
    assert not off.judged and off.verdict is None and off.bundle_id == bad["id"]
    assert off.problems[-1].startswith("not judged: the analysis failed on this bundle (")
    assert "a bundle's rows broke the plan" in off.problems[-1]
    assert f"the analysis failed on bundle {bad['id']}; set aside" in err
    # The copy: a row naming the one judged, counted once in the summary.
    copy = rows["b-copy-of-on.tar.gz"]
    assert copy.state == "duplicate" and not copy.judged and copy.duplicate_of == on.bundle_id
    assert summary["duplicates"] == [{"source": copy.source, "bundle_id": on.bundle_id, "kept": on.source}]
    assert summary["bundles"] == 3 and summary["judged"] == 1
    assert summary["verdicts"] == {"nagle_delayed_ack": 1, "not judged": 1}
    causes = pd.read_parquet(tmp_path / "out" / "findings")
    assert causes[causes.bundle_id == on.bundle_id].cause.tolist().count("nagle_delayed_ack") == 1
    assert [u["source"] for u in summary["not_judged"]] == [off.source]
    assert [u["source"].rsplit("/", 1)[-1] for u in summary["unread"]] == ["d-bomb.tar.gz"]
    # Private as bundles are. Before: 0755 directories and 0644 files.
    assert _modes(tmp_path / "out") == []


# A bundle whose analysis kills Spark's JVM (as one whose statistics are
# 10^9 s apart did, in the throttle join): here the JVM is killed whenever
# the healthy bundle is among those judged.
DYING = r"""
import os, signal, sys
from pyspark import SparkContext
from kdiag.cli import main
from kdiag.fleet import judge
original = judge.judged
def dying(spark, tables, facts, version=None):
    if any(f["source"].endswith("/c-off.tar.gz") for f in facts):
        os.kill(SparkContext._gateway.proc.pid, signal.SIGKILL)
        spark.range(3).count()
    return original(spark, tables, facts, version)
judge.judged = dying
sys.exit(main(["fleet", *sys.argv[1:]]))
"""


def test_a_bundle_that_takes_the_jvm_down_is_set_aside_and_a_new_jvm_judges_the_rest(tickets, tmp_path):
    """Local mode: the driver's JVM is the executors'. Before: exit 1, a
    py4j traceback, no output."""
    import pandas as pd

    mine = tmp_path / "two"
    mine.mkdir()
    for name in ("a-on.tar.gz", "c-off.tar.gz"):
        shutil.copy(tickets / name, mine / name)
    res = subprocess.run([sys.executable, "-c", DYING, str(mine), "-o", str(tmp_path / "out")], cwd=ROOT,
                         capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
    assert res.returncode == ExitStatus.OK and "Traceback" not in res.stderr, res.stderr[-3000:]
    assert "Spark's JVM is gone; starting a new one" in res.stderr
    rows = {r.source.rsplit("/", 1)[-1]: r for r in pd.read_parquet(tmp_path / "out" / "bundles").itertuples()}
    assert rows["a-on.tar.gz"].verdict == "nagle_delayed_ack"
    off = rows["c-off.tar.gz"]
    assert not off.judged and off.problems[-1].startswith("not judged: the analysis failed on this bundle "
                                                          "(Spark's JVM died (")
    assert "2 bundle(s), 1 judged" in res.stdout and "  not judged: file:" in res.stdout


def test_the_output_is_private_as_bundles_are(tmp_path, spark):
    """Before: 0755 directories and 0644 files, the findings of every
    bundle readable by every user of the machine."""
    out = tmp_path / "shared" / "out"
    rc, _, err = _fleet(tmp_path / "shared", ON)
    assert rc == ExitStatus.OK, err[-3000:]
    assert (out / "bundles").is_dir() and _modes(out) == []
