"""The class archive: named so that the JVM maps it (it refuses one whose
jars changed size or time), stale ones dropped with no other environment's,
and recorded by the warm server when there is none, as an installed kdiag
has none."""
from __future__ import annotations

import os
import subprocess
import sys
import time

from conftest import CAPTURES, need, wait_gone
from kdiag.analysis import class_archive


def _place(tmp_path, name="jars"):
    jars = tmp_path / name
    jars.mkdir()
    for jar in ("spark-core.jar", "scala-library.jar"):
        (jars / jar).write_bytes(b"PK" + jar.encode())
    java = tmp_path / "java"
    java.write_text("")
    return jars, java


def test_the_same_jars_keep_their_archive(tmp_path):
    jars, java = _place(tmp_path)
    assert class_archive.name("4.0", jars, java) == class_archive.name("4.0", jars, java)


def test_a_jar_with_a_new_time_and_the_same_size_names_another_archive(tmp_path):
    # What a reinstall of the same pyspark does to its jars.
    jars, java = _place(tmp_path)
    before = class_archive.name("4.0", jars, java)
    st = (jars / "spark-core.jar").stat()
    os.utime(jars / "spark-core.jar", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    after = class_archive.name("4.0", jars, java)
    assert after != before
    # Same place: what tells a stale archive of these jars from another
    # environment's.
    assert after.split("-")[2] == before.split("-")[2]


def test_writing_an_archive_drops_the_stale_ones_of_its_jars_only(tmp_path):
    jars, java = _place(tmp_path)
    other, _ = _place(tmp_path, "other-venv-jars")
    cache = tmp_path / "cache"
    cache.mkdir()
    stale = cache / class_archive.name("4.0", jars, java)
    stale.write_bytes(b"old")
    theirs = cache / class_archive.name("4.0", other, java)
    theirs.write_bytes(b"theirs")
    os.utime(jars / "spark-core.jar", ns=(0, 10**18))
    kept = cache / class_archive.name("4.0", jars, java)
    kept.write_bytes(b"new")
    unplaced = cache / "spark-classes-9bf678d05abf1aae.jsa"   # named before names held the place
    unplaced.write_bytes(b"older")
    class_archive.drop_replaced(kept)
    assert sorted(p.name for p in cache.iterdir()) == sorted([kept.name, theirs.name])


# Runs in a child: a small session's JVM, and whether it maps the archive
# (a refused archive is not left mapped: checked with a jar touched).
_MAPS = r'''
from pyspark import SparkContext
from kdiag.analysis import class_archive
from kdiag.analysis.spark import session
spark = session("test", small=True)
path = str(class_archive.current().path)
with open(f"/proc/{SparkContext._gateway.proc.pid}/maps") as f:
    print("MAPPED" if path in f.read() else "NOT MAPPED")
spark.stop()
'''


def test_the_warm_server_records_an_archive_the_next_session_maps(tmp_path, monkeypatch):
    need("java")
    from kdiag.analysis.warm import LOCK_NAME, Server
    from kdiag.ingest.tables import parse_paths

    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.setenv("KDIAG_SPARK_CDS", "1")
    warm = tmp_path / "warm"
    warm.mkdir(mode=0o700)
    monkeypatch.setenv("KDIAG_WARM_DIR", str(warm))
    monkeypatch.setenv("KDIAG_WARM_KEY", "test-class-archive")
    monkeypatch.setenv("KDIAG_WARM_PRACTICE", "0")
    tables = tmp_path / "tables"
    parse_paths([CAPTURES / "nagle_on" / "rdkafka.log"], tables)
    archive = class_archive.current()
    assert archive is not None and not archive.path.exists()

    server = Server()
    server.start()
    pid = int((warm / LOCK_NAME).read_text().split()[0]) if (warm / LOCK_NAME).exists() else None
    try:
        assert server.analyze(tables, {})["verdict"]
        deadline = time.monotonic() + 300
        while not archive.path.exists() and time.monotonic() < deadline:
            time.sleep(1)
        assert archive.path.exists(), sorted(p.name for p in cache.rglob("*"))
        # The recorder's copy of the tables goes with it.
        deadline = time.monotonic() + 30
        while list(warm.glob("archive-tables-*")) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not list(warm.glob("archive-tables-*"))
        assert not list(cache.glob("kdiag/*.tmp"))
    finally:
        server.stop()
        if pid:
            wait_gone([pid], 15)
    run = subprocess.run([sys.executable, "-c", _MAPS], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "KDIAG_WARM": "0"}, stdin=subprocess.DEVNULL)
    assert run.stdout.strip().splitlines()[-1:] == ["MAPPED"], run.stderr[-2000:]


def test_no_archive_is_recorded_when_it_is_switched_off(tmp_path, monkeypatch):
    from kdiag.analysis.warm import record_archive_later

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("KDIAG_SPARK_CDS", "0")
    tables = tmp_path / "tables"
    tables.mkdir()
    assert record_archive_later(tables, tmp_path) is None
    assert not list(tmp_path.glob("archive-tables-*"))
